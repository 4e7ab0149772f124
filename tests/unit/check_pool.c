/*
 * check_pool.c: unit tests of daemon/work/pool.c: jobs run on worker threads,
 * each worker owns a decoder, done() runs on the loop thread exactly once
 * per job, and stopping finishes queued jobs and joins every thread; jobs
 * that workers submit from run() (as a stream's follow-up batches are)
 * run exactly once too, also while pool_stop() waits for the workers.
 * Fair shares: a light user's jobs are not queued behind a heavy user's,
 * two sources of a user take turns, a source whose reader waits goes
 * first within its user (and only there), each source's worker time
 * and jobs are counted, and a long job lets another user's short jobs run
 * between its items (pool_yield). pool_longest_job names the worker that
 * has been in one job longest (the watchdog's view), and none once idle.
 * A job waiting on the network (pool_wait_begin) is not stuck, a spare
 * runs other work meanwhile, and its source waits its turn; what jobs
 * keep on a worker (pool_worker.ctx) stays between jobs and is freed
 * once, when the pool stops.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "check_util.h"
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

/* ------------------------------------------------------------------ */
/* Fair shares                                                          */

#define FAIR_MAX 64

/* One worker; a gate job (the pool's own) holds it while the test queues
 * everything, so the order the jobs then run in is the pick's alone. */
static struct {
	struct pool *pool;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool held, open;
	atomic_int nran;
	int order[FAIR_MAX];         /* tag of each job, in the order run */
} fs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

struct fair_job {
	struct pool_job job;
	int tag;                     /* which source */
	uint64_t spin_ns;            /* thread CPU time to burn: the job's cost */
};

static uint64_t thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fair_run(struct pool_job *job, struct pool_worker *w)
{
	struct fair_job *j = (struct fair_job *)job;
	uint64_t end = thread_ns() + j->spin_ns;

	(void)w;
	while (thread_ns() < end)
		;  /* work, not a wait: the cost the pool charges */
	fs.order[atomic_fetch_add(&fs.nran, 1)] = j->tag;
}

static void gate_run(struct pool_job *job, struct pool_worker *w)
{
	(void)job;
	(void)w;
	pthread_mutex_lock(&fs.mu);
	fs.held = true;
	pthread_cond_broadcast(&fs.cv);
	while (!fs.open)
		pthread_cond_wait(&fs.cv, &fs.mu);
	pthread_mutex_unlock(&fs.mu);
}

static struct pool_job gate = {.run = gate_run};

static void fair_start(uv_loop_t *loop)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};

	fs.held = fs.open = false;
	atomic_store(&fs.nran, 0);
	ck_assert_int_eq(uv_loop_init(loop), 0);
	ck_assert_int_eq(pool_new(loop, &lg, 1, &fs.pool, &err), 0);
	pool_submit(fs.pool, &gate);
	pthread_mutex_lock(&fs.mu);
	while (!fs.held)
		pthread_cond_wait(&fs.cv, &fs.mu);
	pthread_mutex_unlock(&fs.mu);
}

static void fair_queue(struct fair_job *jobs, int n, struct pool_source *src, int tag,
		       uint64_t spin_ns)
{
	for (int i = 0; i < n; i++) {
		jobs[i] = (struct fair_job){.job = {.run = fair_run, .src = src}, .tag = tag,
					    .spin_ns = spin_ns};
		pool_submit(fs.pool, &jobs[i].job);
	}
}

/* Opens the gate and runs everything queued. */
static void fair_finish(uv_loop_t *loop, int total)
{
	pthread_mutex_lock(&fs.mu);
	fs.open = true;
	pthread_cond_broadcast(&fs.cv);
	pthread_mutex_unlock(&fs.mu);
	pool_stop(fs.pool);
	ck_assert_int_eq(atomic_load(&fs.nran), total);
	ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
}

static void fair_end(uv_loop_t *loop)
{
	pool_free(fs.pool);
	ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* The case: a heavy user's 16 queued builds must not delay a
 * light user's batches; FIFO ran all 16 first. */
START_TEST(test_pool_light_user_not_behind_heavy)
{
	struct fair_job heavy[16], light[8];
	struct pool_source *h, *l;
	uv_loop_t loop;

	fair_start(&loop);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &h), 0);
	ck_assert_int_eq(pool_source_new(fs.pool, 2000, &l), 0);
	fair_queue(heavy, 16, h, 'H', 2000000);
	fair_queue(light, 8, l, 'L', 0);
	fair_finish(&loop, 24);
	int lights_left = 8;
	for (int i = 0; i < 24 && lights_left; i++) {
		if (fs.order[i] == 'L')
			lights_left--;
		else
			ck_assert_msg(i == 0 || fs.order[i - 1] != 'H',
				      "two heavy jobs in a row (at %d) while light ones waited", i);
	}
	struct pool_source_stats hs, ls;
	pool_source_stats(h, &hs);
	pool_source_stats(l, &ls);
	ck_assert_uint_eq(hs.jobs, 16);
	ck_assert_uint_eq(ls.jobs, 8);
	ck_assert_uint_ge(hs.worker_ns, 16 * 2000000ull);  /* each burnt 2 ms */
	ck_assert_uint_lt(ls.worker_ns, hs.worker_ns);
	pool_source_put(h);
	pool_source_put(l);
	fair_end(&loop);
}
END_TEST

/* Two sources of one user, equal jobs, one queued entirely before the
 * other: they take turns, and get the same worker time. */
START_TEST(test_pool_sources_take_turns)
{
	struct fair_job a[12], b[12];
	struct pool_source *sa, *sb;
	uv_loop_t loop;

	fair_start(&loop);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sa), 0);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sb), 0);
	fair_queue(a, 12, sa, 'A', 1000000);
	fair_queue(b, 12, sb, 'B', 1000000);
	fair_finish(&loop, 24);
	int na = 0, nb = 0;
	for (int i = 0; i < 24; i++) {
		na += fs.order[i] == 'A';
		nb += fs.order[i] == 'B';
		ck_assert_msg(abs(na - nb) <= 2, "after %d jobs: %d of A, %d of B", i + 1, na, nb);
	}
	struct pool_source_stats as, bs;
	pool_source_stats(sa, &as);
	pool_source_stats(sb, &bs);
	ck_assert_uint_eq(as.jobs, 12);
	ck_assert_uint_eq(bs.jobs, 12);
	ck_assert_msg(as.worker_ns * 10 >= bs.worker_ns * 8 && bs.worker_ns * 10 >= as.worker_ns * 8,
		      "worker time %llu vs %llu", (unsigned long long)as.worker_ns,
		      (unsigned long long)bs.worker_ns);
	pool_source_put(sa);
	pool_source_put(sb);
	fair_end(&loop);
}
END_TEST

/* A source whose reader waits goes before its user's others; the flag
 * (the client's word) does not put it before another user. */
START_TEST(test_pool_waiting_reader_first)
{
	struct fair_job a[6], b[6], c[6];
	struct pool_source *sa, *sb, *sc;
	_Atomic uint32_t waiting = 1;
	uv_loop_t loop;

	fair_start(&loop);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sa), 0);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sb), 0);
	ck_assert_int_eq(pool_source_new(fs.pool, 2000, &sc), 0);
	/* a group: one member idle, another waiting: the source is urgent */
	static _Atomic uint32_t idle_reader;
	pool_source_watch(sb, 0, &idle_reader);
	pool_source_watch(sb, 5, &waiting);
	fair_queue(a, 6, sa, 'A', 500000);
	fair_queue(b, 6, sb, 'B', 500000);
	fair_queue(c, 6, sc, 'C', 500000);
	fair_finish(&loop, 18);
	int user1 = 0, user2 = 0, a_seen = 0;
	for (int i = 0; i < 18; i++) {
		if (fs.order[i] == 'A')
			a_seen = 1;
		ck_assert_msg(!(fs.order[i] == 'B' && a_seen), "A ran before waiting B (at %d)", i);
		user1 += fs.order[i] != 'C';
		user2 += fs.order[i] == 'C';
		if (user2 < 6)
			ck_assert_msg(abs(user1 - user2) <= 2, "after %d jobs: user 1000 %d, 2000 %d",
				      i + 1, user1, user2);
	}
	pool_source_watch(sb, 5, NULL);
	pool_source_put(sa);
	pool_source_put(sb);
	pool_source_put(sc);
	fair_end(&loop);
}
END_TEST

/* A source put while its jobs are queued lives until they ran. */
START_TEST(test_pool_source_outlives_owner)
{
	struct fair_job a[4];
	struct pool_source *sa;
	uv_loop_t loop;

	fair_start(&loop);
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sa), 0);
	fair_queue(a, 4, sa, 'A', 0);
	pool_source_put(sa);
	fair_finish(&loop, 4);
	fair_end(&loop);
}
END_TEST

/* A long job that calls pool_yield() between its 20 items (1 ms each),
 * and says when it has started. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started;
	int ran_before_end;        /* other jobs run when it ended */
} ly = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void long_run(struct pool_job *job, struct pool_worker *w)
{
	struct fair_job *j = (struct fair_job *)job;

	pthread_mutex_lock(&ly.mu);
	ly.started = true;
	pthread_cond_broadcast(&ly.cv);
	pthread_mutex_unlock(&ly.mu);
	for (int i = 0; i < 20; i++) {
		uint64_t end = thread_ns() + j->spin_ns / 20;
		while (thread_ns() < end)
			;
		pool_yield(w);
	}
	ly.ran_before_end = atomic_load(&fs.nran);
	fs.order[atomic_fetch_add(&fs.nran, 1)] = j->tag;
}

/* Runs the long job of user 1000 on the one worker, queues 5 short jobs
 * of user other_uid once it runs, and returns how many ran inside it. */
static int yield_case(uid_t other_uid, struct pool_source_stats *ret_long,
		      struct pool_source_stats *ret_short)
{
	struct fair_job lj, shorts[5];
	struct pool_source *sl, *ss;
	uv_loop_t loop;

	fair_start(&loop);
	ly.started = false;
	ck_assert_int_eq(pool_source_new(fs.pool, 1000, &sl), 0);
	ck_assert_int_eq(pool_source_new(fs.pool, other_uid, &ss), 0);
	lj = (struct fair_job){.job = {.run = long_run, .src = sl}, .tag = 'L', .spin_ns = 20000000};
	pool_submit(fs.pool, &lj.job);
	pthread_mutex_lock(&fs.mu);
	fs.open = true;  /* the gate goes: the long job runs */
	pthread_cond_broadcast(&fs.cv);
	pthread_mutex_unlock(&fs.mu);
	pthread_mutex_lock(&ly.mu);
	while (!ly.started)
		pthread_cond_wait(&ly.cv, &ly.mu);
	pthread_mutex_unlock(&ly.mu);
	fair_queue(shorts, 5, ss, 'S', 0);
	fair_finish(&loop, 6);
	pool_source_stats(sl, ret_long);
	pool_source_stats(ss, ret_short);
	pool_source_put(sl);
	pool_source_put(ss);
	fair_end(&loop);
	return ly.ran_before_end;
}

/* Another user's short jobs run between the long job's items, on its
 * thread, and their time is not charged to it; the same user's wait. */
START_TEST(test_pool_yield_runs_other_users_short_jobs)
{
	struct pool_source_stats l, s;

	ck_assert_int_eq(yield_case(2000, &l, &s), 5);
	ck_assert_uint_eq(l.jobs, 1);
	ck_assert_uint_eq(s.jobs, 5);
	ck_assert_uint_ge(l.worker_ns, 20000000);
	ck_assert_uint_lt(s.worker_ns, l.worker_ns / 4);
	ck_assert_int_eq(yield_case(1000, &l, &s), 0);
}
END_TEST

/* A job that stays in run() until released: the watchdog's stuck worker. */
static struct {
	_Atomic int started;   /* set by the job once in run() */
	_Atomic int release;   /* set by the test to let it return */
	_Atomic unsigned worker;
} held;

static void held_run(struct pool_job *job, struct pool_worker *w)
{
	struct timespec nap = {.tv_nsec = 1000000};

	(void)job;
	atomic_store(&held.worker, w->index);
	atomic_store(&held.started, 1);
	while (!atomic_load(&held.release))
		nanosleep(&nap, NULL);
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(test_pool_longest_job_names_busy_worker)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};
	struct pool_job job = {.run = held_run};
	struct timespec nap = {.tv_nsec = 1000000};
	struct pool *p;
	uv_loop_t loop;
	unsigned idx = 99;
	uint64_t ms = 0;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(pool_new(&loop, &lg, 3, &p, &err), 0);
	ck_assert_int_eq(pool_longest_job(p, &idx, &ms), 0);  /* all idle */
	pool_submit(p, &job);
	int64_t end = mono_ms() + 10000;
	while (!atomic_load(&held.started) && mono_ms() < end)
		nanosleep(&nap, NULL);
	ck_assert(atomic_load(&held.started));
	/* its time in the job grows while it stays there */
	do {
		ck_assert_int_eq(pool_longest_job(p, &idx, &ms), 1);
		ck_assert_uint_eq(idx, atomic_load(&held.worker));
	} while (ms < 20 && mono_ms() < end && !nanosleep(&nap, NULL));
	ck_assert_uint_ge(ms, 20);
	atomic_store(&held.release, 1);
	while (pool_longest_job(p, &idx, &ms) == 1 && mono_ms() < end)
		nanosleep(&nap, NULL);
	ck_assert_int_eq(pool_longest_job(p, &idx, &ms), 0);
	pool_stop(p);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	pool_free(p);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* ---- waiting on the network (pool_wait_begin) ---- */

static struct {
	struct pool *pool;
	_Atomic int a_waiting, a_done_waiting, b_ran, a_saw_b, a2_early, a2_ran;
	_Atomic unsigned b_worker;
	_Atomic uint64_t v1, v2, v3;
	_Atomic int started, go;
} wt;

/* Polls flag until set, 10 s at most (the pool's own threads decide
 * when it is set; the test only waits for it). */
static bool wait_flag(_Atomic int *flag)
{
	struct timespec nap = {.tv_nsec = 1000000};
	int64_t end = mono_ms() + 10000;

	while (!atomic_load(flag) && mono_ms() < end)
		nanosleep(&nap, NULL);
	return atomic_load(flag);
}

/* As a batch job waiting for the fetcher: until another job has run. */
static void waiting_run(struct pool_job *job, struct pool_worker *w)
{
	(void)job;
	(void)w;
	pool_wait_begin(wt.pool);
	atomic_store(&wt.a_waiting, 1);
	atomic_store(&wt.a_saw_b, wait_flag(&wt.b_ran));
	atomic_store(&wt.a_done_waiting, 1);
	pool_wait_end(wt.pool);
}

static void other_run(struct pool_job *job, struct pool_worker *w)
{
	(void)job;
	atomic_store(&wt.b_worker, w->index);
	atomic_store(&wt.b_ran, 1);
}

static void second_run(struct pool_job *job, struct pool_worker *w)
{
	(void)job;
	(void)w;
	atomic_store(&wt.a2_early, atomic_load(&wt.a_waiting) && !atomic_load(&wt.a_done_waiting));
	atomic_store(&wt.a2_ran, 1);
}

static struct pool *wait_pool(uv_loop_t *loop)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};

	memset(&wt, 0, sizeof(wt));
	ck_assert_int_eq(uv_loop_init(loop), 0);
	ck_assert_int_eq(pool_new(loop, &lg, 1, &wt.pool, &err), 0);
	return wt.pool;
}

static void wait_pool_end(struct pool *p, uv_loop_t *loop)
{
	pool_stop(p);
	ck_assert_int_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
	pool_free(p);
	ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* One worker, its job waiting on the network: a spare runs another
 * stream's job meanwhile, and the watchdog does not see a stuck job. */
START_TEST(test_pool_waiting_job_lets_a_spare_run_others)
{
	uv_loop_t loop;
	struct pool *p = wait_pool(&loop);
	struct pool_source *sa, *sb;
	unsigned idx;
	uint64_t ms;

	ck_assert_int_eq(pool_source_new(p, 1, &sa), 0);
	ck_assert_int_eq(pool_source_new(p, 2, &sb), 0);
	struct pool_job a = {.src = sa, .run = waiting_run}, b = {.src = sb, .run = other_run};
	pool_submit(p, &a);
	ck_assert(wait_flag(&wt.a_waiting));
	ck_assert_int_eq(pool_longest_job(p, &idx, &ms), 0);  /* waiting is not stuck */
	pool_submit(p, &b);
	ck_assert(wait_flag(&wt.a_done_waiting));
	ck_assert_msg(atomic_load(&wt.a_saw_b), "the other job waited for the waiting one");
	ck_assert_uint_ge(atomic_load(&wt.b_worker), pool_size(p));  /* a spare ran it */
	pool_source_put(sa);
	pool_source_put(sb);
	wait_pool_end(p, &loop);
}
END_TEST

/* A source whose job waits is not picked again until the wait ends: the
 * spare takes the other source's job, not the waiting one's next. */
START_TEST(test_pool_waiting_source_is_not_picked)
{
	uv_loop_t loop;
	struct pool *p = wait_pool(&loop);
	struct pool_source *sa, *sb;

	ck_assert_int_eq(pool_source_new(p, 1, &sa), 0);
	ck_assert_int_eq(pool_source_new(p, 2, &sb), 0);
	struct pool_job a1 = {.src = sa, .run = waiting_run}, a2 = {.src = sa, .run = second_run};
	struct pool_job b = {.src = sb, .run = other_run};
	pool_submit(p, &a1);
	ck_assert(wait_flag(&wt.a_waiting));
	pool_submit(p, &a2);
	pool_submit(p, &b);
	ck_assert(wait_flag(&wt.a2_ran));
	ck_assert(atomic_load(&wt.a_saw_b));
	ck_assert_msg(!atomic_load(&wt.a2_early), "a waiting source's next job ran meanwhile");
	pool_source_put(sa);
	pool_source_put(sb);
	wait_pool_end(p, &loop);
}
END_TEST

/* A worker-only call on the loop thread aborts (FEED_LOCK_CHECKS builds,
 * which the tests are); a thread marked both, or not at all, passes. */
START_TEST(test_pool_role_checks)
{
	pool_thread_roles(0);
	assert_worker();
	assert_loop_thread();
	pool_thread_roles(POOL_ROLE_LOOP | POOL_ROLE_WORKER);
	assert_worker();
	assert_loop_thread();
	pool_thread_roles(POOL_ROLE_LOOP);
	assert_loop_thread();
	assert_worker();  /* SIGABRT, naming this function */
	ck_abort_msg("assert_worker() passed on the loop thread");
}
END_TEST

/* pool_try_submit() refuses once the workers are joined: nothing would
 * run the job. */
START_TEST(test_pool_try_submit_after_stop)
{
	struct log lg = {.level = LOG_LEVEL_ERROR, .fd = 2};
	struct feed_err err = {0};
	struct pool_job job = {.run = NULL};
	struct pool *p;
	uv_loop_t loop;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(pool_new(&loop, &lg, 1, &p, &err), 0);
	pool_stop(p);
	ck_assert_int_eq(pool_try_submit(p, &job), -ESHUTDOWN);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	pool_free(p);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static _Atomic int ctx_made, ctx_freed;

static void ctx_free_count(void *ctx)
{
	free(ctx);
	atomic_fetch_add(&ctx_freed, 1);
}

static void ctx_run(struct pool_job *job, struct pool_worker *w)
{
	(void)job;
	if (!w->ctx) {
		w->ctx = malloc(16);
		w->ctx_free = ctx_free_count;
		atomic_fetch_add(&ctx_made, 1);
	}
	atomic_fetch_add(&wt.b_ran, 1);
}

/* The opaque per-worker slot: made by the first job, seen by the next on
 * the same worker (one worker), freed once by pool_stop(). */
START_TEST(test_pool_frees_worker_ctx_at_stop)
{
	uv_loop_t loop;
	struct pool *p = wait_pool(&loop);
	struct pool_job j1 = {.run = ctx_run}, j2 = {.run = ctx_run};

	pool_submit(p, &j1);
	pool_submit(p, &j2);
	while (atomic_load(&wt.b_ran) < 2)
		sched_yield();
	ck_assert_int_eq(atomic_load(&ctx_made), 1);
	ck_assert_int_eq(atomic_load(&ctx_freed), 0);
	wait_pool_end(p, &loop);
	ck_assert_int_eq(atomic_load(&ctx_freed), 1);
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
	tcase_add_test(tc, test_pool_light_user_not_behind_heavy);
	tcase_add_test(tc, test_pool_sources_take_turns);
	tcase_add_test(tc, test_pool_waiting_reader_first);
	tcase_add_test(tc, test_pool_source_outlives_owner);
	tcase_add_test(tc, test_pool_yield_runs_other_users_short_jobs);
	tcase_add_test(tc, test_pool_longest_job_names_busy_worker);
	tcase_add_test(tc, test_pool_waiting_job_lets_a_spare_run_others);
	tcase_add_test(tc, test_pool_frees_worker_ctx_at_stop);
	tcase_add_test(tc, test_pool_waiting_source_is_not_picked);
	tcase_add_test_raise_signal(tc, test_pool_role_checks, SIGABRT);
	tcase_add_test(tc, test_pool_try_submit_after_stop);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(pool_suite)
