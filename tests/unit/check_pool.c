/*
 * check_pool.c: unit tests of daemon/work/pool.c: jobs run on worker threads,
 * each worker owns a decoder, done() runs on the loop thread exactly once
 * per job, and stopping finishes queued jobs and joins every thread; jobs
 * that workers submit from run() (as a stream's follow-up batches are)
 * run exactly once too, also while pool_stop() waits for the workers.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* ------------------------------------------------------------------ */
/* Jobs submitted from workers                                          */

/* TREES binary trees of jobs, each DEPTH levels below its root: a job's
 * run() submits its two children from the worker running it. */
#define TREES 8
#define DEPTH 6
#define PER_TREE ((1u << (DEPTH + 1)) - 1)   /* 127 */
#define TREE_JOBS (TREES * PER_TREE)

struct tree_job {
	struct pool_job job;
	unsigned id;                 /* tree * PER_TREE + heap index */
	atomic_int runs;             /* run() calls: must end at 1 */
	pthread_t ran_on;
	pthread_t submitted_by;      /* written by the submitter before pool_submit */
	bool submitted_late;         /* submitted after the loop began pool_stop() */
	int done_calls;              /* loop thread only */
	pthread_t done_on;
};

static struct {
	struct tree_job *jobs;
	pthread_t loop_thread;
	struct pool *pool;
	int done;                    /* done() calls (loop thread) */
	bool stop_when_done;         /* the last done() stops the pool */
	/* The stop test holds the roots back until the loop is about to stop
	 * the pool, so that every other job is submitted by a worker while
	 * pool_stop() runs. */
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv;
	bool gated;                  /* roots wait for stopping (gate_mu) */
	bool stopping;               /* the loop is calling pool_stop() (gate_mu) */
	atomic_int late_submits;     /* submissions by workers after that */
} tt = {.gate_mu = PTHREAD_MUTEX_INITIALIZER, .gate_cv = PTHREAD_COND_INITIALIZER};

static void tree_run(struct pool_job *job, struct pool_worker *w);
static void tree_done(struct pool_job *job);

static void tree_submit(unsigned id, bool late)
{
	struct tree_job *j = &tt.jobs[id];

	j->job.run = tree_run;
	j->job.done = tree_done;
	j->submitted_by = pthread_self();
	j->submitted_late = late;
	if (late)
		atomic_fetch_add_explicit(&tt.late_submits, 1, memory_order_relaxed);
	pool_submit(tt.pool, &j->job);
}

static void tree_run(struct pool_job *job, struct pool_worker *w)
{
	struct tree_job *j = (struct tree_job *)job;
	unsigned k = j->id % PER_TREE, base = j->id - k;
	bool late;

	atomic_fetch_add_explicit(&j->runs, 1, memory_order_relaxed);
	j->ran_on = pthread_self();
	pthread_mutex_lock(&tt.gate_mu);
	while (tt.gated && !tt.stopping)
		pthread_cond_wait(&tt.gate_cv, &tt.gate_mu);
	late = tt.stopping;
	pthread_mutex_unlock(&tt.gate_mu);
	for (unsigned c = 2 * k + 1; c <= 2 * k + 2 && c < PER_TREE; c++)
		tree_submit(base + c, late);
}

static void tree_done(struct pool_job *job)
{
	struct tree_job *j = (struct tree_job *)job;

	j->done_calls++;
	j->done_on = pthread_self();
	if (++tt.done == TREE_JOBS && tt.stop_when_done)
		pool_stop(tt.pool);
}

/* Runs TREES trees on nworkers; with stop_at_once the loop calls
 * pool_stop() before uv_run(), releasing the roots only then. */
static void run_trees(unsigned nworkers, bool stop_at_once)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};
	uv_loop_t loop;

	tt.jobs = calloc(TREE_JOBS, sizeof(*tt.jobs));
	ck_assert_ptr_nonnull(tt.jobs);
	for (unsigned i = 0; i < TREE_JOBS; i++)
		tt.jobs[i].id = i;
	tt.loop_thread = pthread_self();
	tt.done = 0;
	tt.stop_when_done = !stop_at_once;
	tt.gated = stop_at_once;
	tt.stopping = false;
	atomic_store(&tt.late_submits, 0);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(pool_new(&loop, &lg, nworkers, &tt.pool, &err), 0);
	for (unsigned r = 0; r < TREES; r++)
		tree_submit(r * PER_TREE, false);
	if (stop_at_once) {
		pthread_mutex_lock(&tt.gate_mu);
		tt.stopping = true;
		pthread_cond_broadcast(&tt.gate_cv);
		pthread_mutex_unlock(&tt.gate_mu);
		/* pool.h: every queued job is finished and every done() called
		 * before pool_stop() returns, the workers' submissions included */
		pool_stop(tt.pool);
		ck_assert_int_eq(tt.done, TREE_JOBS);
		/* every job but the roots was submitted by a worker after the gate */
		ck_assert_int_eq(atomic_load(&tt.late_submits), TREE_JOBS - TREES);
	}
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(tt.done, TREE_JOBS);
	for (unsigned i = 0; i < TREE_JOBS; i++) {
		struct tree_job *j = &tt.jobs[i];
		bool root = i % PER_TREE == 0;
		ck_assert_msg(atomic_load(&j->runs) == 1, "job %u ran %d times", i,
			      atomic_load(&j->runs));
		ck_assert_msg(j->done_calls == 1, "job %u: done() called %d times", i, j->done_calls);
		ck_assert(!pthread_equal(j->ran_on, tt.loop_thread));
		ck_assert(pthread_equal(j->done_on, tt.loop_thread));
		/* children come from a worker: never from the loop thread */
		ck_assert(pthread_equal(j->submitted_by, tt.loop_thread) == root);
		ck_assert(j->submitted_late == (stop_at_once && !root));
	}
	pool_free(tt.pool);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	free(tt.jobs);
}

START_TEST(test_pool_worker_submits_follow_ups)
{
	run_trees(3, false);
}
END_TEST

START_TEST(test_pool_stop_runs_worker_submissions)
{
	run_trees(2, true);
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
	tcase_add_test(tc, test_pool_worker_submits_follow_ups);
	tcase_add_test(tc, test_pool_stop_runs_worker_submissions);
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
