/*
 * check_pool.c: unit tests of daemon/work/pool.c: jobs run on worker threads,
 * each worker owns a decoder, done() runs on the loop thread exactly once
 * per job, and stopping finishes queued jobs and joins every thread.
 */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <uv.h>

#include "pool.h"

#define NJOBS 200

struct test_job {
	struct pool_job job;
	pthread_t ran_on;      /* worker thread that ran it */
	unsigned worker;       /* its index */
	bool had_decoder;
	int done_calls;
	pthread_t done_on;
};

static struct {
	pthread_t loop_thread;
	int done;
	struct pool *pool;
	bool stop_when_done;
} t;

static void job_run(struct pool_job *job, struct pool_worker *w)
{
	struct test_job *j = (struct test_job *)job;
	j->ran_on = pthread_self();
	j->worker = w->index;
	j->had_decoder = w->dec != NULL;
}

static void job_done(struct pool_job *job)
{
	struct test_job *j = (struct test_job *)job;
	j->done_calls++;
	j->done_on = pthread_self();
	if (++t.done == NJOBS && t.stop_when_done)
		pool_stop(t.pool);
}

static void run_jobs(unsigned nworkers, bool stop_at_once)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};
	struct test_job *jobs = calloc(NJOBS, sizeof(*jobs));
	uv_loop_t loop;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	t.loop_thread = pthread_self();
	t.done = 0;
	t.stop_when_done = !stop_at_once;
	ck_assert_int_eq(pool_new(&loop, &lg, nworkers, &t.pool, &err), 0);
	ck_assert_uint_eq(pool_size(t.pool), nworkers);
	for (int i = 0; i < NJOBS; i++) {
		jobs[i].job.run = job_run;
		jobs[i].job.done = job_done;
		pool_submit(t.pool, &jobs[i].job);
	}
	if (stop_at_once)  /* queued jobs still run; their done() comes from stop */
		pool_stop(t.pool);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(t.done, NJOBS);
	for (int i = 0; i < NJOBS; i++) {
		ck_assert_int_eq(jobs[i].done_calls, 1);
		ck_assert(!pthread_equal(jobs[i].ran_on, t.loop_thread));
		ck_assert(pthread_equal(jobs[i].done_on, t.loop_thread));
		ck_assert_uint_lt(jobs[i].worker, nworkers);
		ck_assert(jobs[i].had_decoder);
	}
	pool_free(t.pool);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	free(jobs);
}

START_TEST(test_pool_runs_jobs)
{
	run_jobs(3, false);
}
END_TEST

START_TEST(test_pool_stop_drains)
{
	run_jobs(2, true);
}
END_TEST

START_TEST(test_pool_idle_stop)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};
	struct pool *p;
	uv_loop_t loop;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(pool_new(&loop, &lg, 4, &p, &err), 0);
	pool_stop(p);
	pool_stop(p);  /* idempotent */
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	pool_free(p);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_pool_runs_jobs);
	tcase_add_test(tc, test_pool_stop_drains);
	tcase_add_test(tc, test_pool_idle_stop);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pool_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
