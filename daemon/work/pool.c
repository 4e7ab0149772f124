/*
 * pool.c: worker threads, their queues and the fair-share pick (see
 * pool.h). pool_* calls run on the loop thread unless pool.h says any
 * thread; pool_main() runs on each worker. The single mutex mu guards the
 * queues, users, sources, done and stopping; nothing blocks while holding
 * it.
 */
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "feed_lock.h"
#include "fmt.h"

/* Worker time by which a source whose reader waits may be ahead of its
 * user's other sources and still go first. */
#define POOL_URGENT_NS 20000000ull

/* A user's share: the sources it owns (mu). */
struct pool_user {
	struct pool_user *next;       /* p->users, picked ones moved to the tail */
	uid_t uid;
	uint64_t vtime;               /* worker ns charged (estimates included) */
	uint64_t nqueued;             /* jobs queued in its sources */
	unsigned running;             /* its jobs running */
	struct pool_source *sources;  /* picked ones moved to the tail */
};

struct pool_source {
	struct pool *pool;
	struct pool_user *user;
	struct pool_source *next;     /* the user's sources (mu) */
	struct pool_job *head, *tail; /* its queued jobs (mu) */
	uint64_t nqueued;             /* (mu) */
	unsigned refs;                /* the owner's + one per job queued or running (mu) */
	uint64_t vtime;               /* worker ns charged (mu) */
	uint64_t est_ns;              /* recent cost of one job, charged at the pick (mu) */
	/* its readers' flags, untrusted (mu): slot i set when bit i of watched */
	const _Atomic uint32_t *waiting[POOL_SOURCE_READERS];
	uint64_t watched;             /* (mu) */
	unsigned nwaiting;            /* its jobs waiting on the network: not picked
				       * while any does (mu) */
	/* relaxed: counters for display and tests; nothing is ordered by them */
	_Atomic uint64_t worker_ns, jobs;
};

struct pool_thread {
	pthread_t tid;
	struct pool *pool;
	struct pool_worker w;
	struct pool_worker w2;        /* for a job run inside another (pool_yield) */
	/* the job running on w: this thread's alone */
	struct pool_source *cur_src;
	uint64_t cur_est, cur_t0;     /* its estimate, thread CPU ns at its start */
	uint64_t nested_ns;           /* thread CPU ns of jobs run inside it */
	bool nesting;                 /* a job runs on w2 */
	bool spare;                   /* runs jobs only while workers wait (pool.h) */
	struct pool_source *run_src;  /* the innermost job's source (NULL: the pool's) */
	unsigned calls, next_check;   /* pool_yield() calls; backoff after a refusal */
	/* relaxed: CLOCK_MONOTONIC ms at which the job running on w began, 0
	 * while idle; read by the loop's watchdog (pool_longest_job), which
	 * orders nothing by it */
	_Atomic uint64_t job_since_ms;
};

struct pool {
	const struct log *log;
	uv_async_t async;             /* loop thread's handle, woken by workers */
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* signalled when queue grows or stopping is set */
	struct pool_job *head, *tail; /* the pool's own queued jobs (mu) */
	struct pool_user *users;      /* every user with a source (mu) */
	uint64_t nqueued;             /* jobs queued in sources (mu) */
	uint64_t vclock;              /* vtime of the user picked last (mu) */
	struct pool_job *done;        /* finished jobs, newest first (mu) */
	unsigned idle;                /* workers (not spares) waiting for a job (mu) */
	unsigned nwaiting;            /* threads in a job waiting on the network (mu) */
	unsigned spare_running;       /* spares running a job (mu) */
	pthread_cond_t spare_cv;      /* a spare may have work: a wait began, work came */
	unsigned running;             /* jobs of sources running (mu) */
	/* relaxed: a hint set when work is queued while no worker is idle and
	 * one runs another user's job; pool_yield() looks under mu before
	 * acting on it */
	_Atomic int yield_wanted;
	bool stopping;                /* workers exit once queue is empty (mu) */
	bool stopped;                 /* pool_stop() ran (loop thread) */
	bool joined;                  /* every worker exited: nothing runs a job (mu) */
	bool closed;                  /* the async handle's close completed */
	unsigned n;                   /* threads running: workers, then spares */
	unsigned size;                /* workers asked for; as many spares again */
	struct pool_thread *threads;
	char *test_stall;             /* $FEEDD_TEST_STALL read at pool_new (test
				       * builds), or NULL; read-only afterwards */
};

/* The calling thread's roles (pool.h): written by itself only. */
static _Thread_local unsigned pool_roles;
/* The pool thread the caller is, or NULL: pool_wait_begin() finds it. */
static _Thread_local struct pool_thread *pool_self;

void pool_thread_roles(unsigned roles)
{
	pool_roles = roles;
}

void pool_assert_role(unsigned role, const char *fn)
{
	if (!pool_roles || (pool_roles & role))
		return;
	fprintf(stderr, "feedd: %s called on %s, not on %s\n", fn,
		pool_roles & POOL_ROLE_LOOP ? "the loop thread" : "a worker",
		role == POOL_ROLE_LOOP ? "the loop thread" : "a worker");
	abort();
}

static uint64_t pool_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u + 1; /* never 0 */
}

#ifdef FEEDD_TEST_SEAMS
/* Test builds only (FEED_TEST_SEAMS): while the file $FEEDD_TEST_STALL
 * (read once, at pool_new) exists, a batch job does not get going, as one
 * stuck in a read that never returns would not: the watchdog test's
 * stuck worker. */
static void pool_test_stall(const char *f)
{
	struct timespec nap = {.tv_nsec = 10000000};

	while (f && access(f, F_OK) == 0)
		nanosleep(&nap, NULL);
}
#endif

static uint64_t pool_thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void source_free_locked(struct pool_source *s)
{
	struct pool_user *u = s->user;
	struct pool *p = s->pool;

	for (struct pool_source **q = &u->sources; *q; q = &(*q)->next)
		if (*q == s) {
			*q = s->next;
			break;
		}
	free(s);
	if (u->sources)
		return;
	for (struct pool_user **q = &p->users; *q; q = &(*q)->next)
		if (*q == u) {
			*q = u->next;
			break;
		}
	free(u);
}

/* Moves x, an element of the list at *head, to its tail (round robin among
 * equals). Lists are short: one entry per user, per stream of a user. */
#define POOL_TO_TAIL(type, head, x)                                   \
	do {                                                          \
		type **q_ = (head);                                   \
		while (*q_ != (x))                                    \
			q_ = &(*q_)->next;                            \
		*q_ = (x)->next;                                      \
		while (*q_)                                           \
			q_ = &(*q_)->next;                            \
		*q_ = (x);                                            \
		(x)->next = NULL;                                     \
	} while (0)

static bool source_urgent(const struct pool_source *s)
{
	/* relaxed: a hint; a stale value only reorders one pick. Any reader
	 * waiting makes the source urgent (a group goes at its fastest
	 * member's pace, the slowest holds slots instead) */
	for (uint64_t m = s->watched; m; m &= m - 1)
		if (atomic_load_explicit(s->waiting[__builtin_ctzll(m)], memory_order_relaxed))
			return true;
	return false;
}

/* The fair-share choice (pool.h): the user with the least vtime, then of
 * its sources with queued jobs the one with the least vtime, a source
 * with a waiting reader counted POOL_URGENT_NS less. Changes nothing. */
/* A source a worker may take a job of: queued work, no job waiting on
 * the network (one waiting job per source holds a thread; the others
 * stay queued for when it ends, so a stalled remote store cannot take
 * every thread). */
static bool source_ready(const struct pool_source *s)
{
	return s->nqueued && !s->nwaiting;
}

static bool user_ready(const struct pool_user *u)
{
	if (!u->nqueued)
		return false;
	for (const struct pool_source *s = u->sources; s; s = s->next)
		if (source_ready(s))
			return true;
	return false;
}

static struct pool_source *pool_choose_locked(struct pool *p)
{
	struct pool_user *best = NULL;

	for (struct pool_user *u = p->users; u; u = u->next)
		if (user_ready(u) && (!best || u->vtime < best->vtime))
			best = u;
	if (!best)
		return NULL;
	struct pool_source *pick = NULL;
	uint64_t pick_key = 0;
	for (struct pool_source *s = best->sources; s; s = s->next) {
		if (!source_ready(s))
			continue;
		/* a waiting reader is a head start, not a pass: its stream goes
		 * first unless it is already POOL_URGENT_NS ahead */
		uint64_t key = s->vtime + (source_urgent(s) ? 0 : POOL_URGENT_NS);
		if (!pick || key < pick_key) {
			pick = s;
			pick_key = key;
		}
	}
	return pick;
}

/* Takes the first job of s, chosen: rotates the round robin and charges
 * the source's estimate (corrected in pool_charge_locked()). */
static struct pool_job *pool_dequeue_locked(struct pool *p, struct pool_source *s)
{
	struct pool_user *u = s->user;
	struct pool_job *job = s->head;

	POOL_TO_TAIL(struct pool_user, &p->users, u);
	POOL_TO_TAIL(struct pool_source, &u->sources, s);
	p->vclock = u->vtime;
	s->head = job->next;
	if (!s->head)
		s->tail = NULL;
	s->nqueued--;
	s->user->nqueued--;
	p->nqueued--;
	s->vtime += s->est_ns;
	s->user->vtime += s->est_ns;
	return job;
}

/* The pool's own first job, if any. */
static struct pool_job *pool_own_locked(struct pool *p)
{
	struct pool_job *job = p->head;

	if (job) {
		p->head = job->next;
		if (!p->head)
			p->tail = NULL;
	}
	return job;
}

/* The next job to run, or NULL when nothing is queued. */
static struct pool_job *pool_take_locked(struct pool *p)
{
	struct pool_job *job = pool_own_locked(p);

	if (job)
		return job;
	struct pool_source *s = pool_choose_locked(p);
	return s ? pool_dequeue_locked(p, s) : NULL;
}

/* job of s ran for ns: replaces the estimate charged at the pick. */
static void pool_charge_locked(struct pool_source *s, uint64_t est, uint64_t ns)
{
	s->vtime = s->vtime - est + ns;
	s->user->vtime = s->user->vtime - est + ns;
	s->est_ns = (3 * s->est_ns + ns) / 4;
	atomic_fetch_add_explicit(&s->worker_ns, ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->jobs, 1, memory_order_relaxed);
	if (--s->refs == 0)
		source_free_locked(s);
}

/* Runs job on w and accounts for it; mu is held on entry and on return,
 * dropped while the job runs. Returns the thread CPU ns it took. */
static uint64_t pool_run_locked(struct pool *p, struct pool_thread *t, struct pool_job *job,
				struct pool_worker *w)
{
	/* read before run(): job may die in it; src lives on (its reference) */
	struct pool_source *src = job->src;
	uint64_t est = src ? src->est_ns : 0;
	bool notify = job->done != NULL, outer = w == &t->w;

	struct pool_source *outer_src = t->run_src;
	if (outer) {
		t->cur_src = src;
		t->cur_est = est;
		t->nested_ns = 0;
		t->calls = t->next_check = 0;
	}
	t->run_src = src;
	if (src) {
		src->user->running++;
		p->running++;
	}
	feed_mutex_unlock(&p->mu);
	if (outer)
		atomic_store_explicit(&t->job_since_ms, pool_now_ms(), memory_order_relaxed);
#ifdef FEEDD_TEST_SEAMS
	if (src)
		pool_test_stall(p->test_stall);
#endif
	uint64_t t0 = pool_thread_ns();
	if (outer)
		t->cur_t0 = t0;
	job->run(job, w);
	t->run_src = outer_src;
	if (outer)
		atomic_store_explicit(&t->job_since_ms, 0, memory_order_relaxed);
	uint64_t ns = pool_thread_ns() - t0;
	if (outer)  /* what ran inside it is charged to its own source */
		ns = ns > t->nested_ns ? ns - t->nested_ns : 0;
	feed_mutex_lock(&p->mu);
	if (src) {
		src->user->running--;
		p->running--;
		pool_charge_locked(src, est, ns);
	}
	if (notify) {
		job->next = p->done;
		p->done = job;
		feed_mutex_unlock(&p->mu);
		uv_async_send(&p->async);  /* coalesced; the loop drains the list */
		feed_mutex_lock(&p->mu);
	}
	return ns;
}

/* Whether a job may be taken now: the pool's own, or a ready source's. */
static bool pool_runnable_locked(const struct pool *p)
{
	if (p->head)
		return true;
	if (!p->nqueued)
		return false;
	for (const struct pool_user *u = p->users; u; u = u->next)
		if (user_ready(u))
			return true;
	return false;
}

/* A spare's turn: while fewer threads work than workers (some wait on
 * the network), and there is work. */
static bool pool_spare_due_locked(const struct pool *p)
{
	return p->nwaiting > p->spare_running && pool_runnable_locked(p);
}

/* A worker: takes jobs until stopping and nothing is queued (jobs of a
 * source with a waiting job are taken once that wait ends). */
static void pool_worker_loop(struct pool *p, struct pool_thread *t)
{
	for (;;) {
		p->idle++;
		while (!pool_runnable_locked(p) && !(p->stopping && !p->head && !p->nqueued))
			pthread_cond_wait(&p->cv, &p->mu);
		p->idle--;
		struct pool_job *job = pool_take_locked(p);
		if (!job)
			break;  /* stopping and drained */
		pool_run_locked(p, t, job, &t->w);
		t->cur_src = NULL;
	}
}

/* A spare: stands in for workers waiting on the network, one job at a
 * time; leaves the draining at a stop to the workers. */
static void pool_spare_loop(struct pool *p, struct pool_thread *t)
{
	for (;;) {
		while (!pool_spare_due_locked(p) && !p->stopping)
			pthread_cond_wait(&p->spare_cv, &p->mu);
		if (!pool_spare_due_locked(p))
			break;  /* stopping */
		struct pool_job *job = pool_take_locked(p);
		p->spare_running++;
		pool_run_locked(p, t, job, &t->w);
		p->spare_running--;
		t->cur_src = NULL;
	}
}

static void *pool_main(void *arg)
{
	struct pool_thread *t = arg;
	struct pool *p = t->pool;

	pool_thread_roles(POOL_ROLE_WORKER);
	pool_self = t;
	feed_mutex_lock(&p->mu);
	if (t->spare)
		pool_spare_loop(p, t);
	else
		pool_worker_loop(p, t);
	feed_mutex_unlock(&p->mu);
	return NULL;
}

void pool_wait_begin(void *pool)
{
	struct pool_thread *t = pool_self;
	struct pool *p = pool;

	if (!t || t->pool != p)
		return;  /* not one of its threads: nothing to count */
	/* relaxed: the watchdog's reading; a wait is not a stuck job */
	atomic_store_explicit(&t->job_since_ms, 0, memory_order_relaxed);
	feed_mutex_lock(&p->mu);
	p->nwaiting++;
	if (t->run_src)
		t->run_src->nwaiting++;
	pthread_cond_signal(&p->spare_cv);
	feed_mutex_unlock(&p->mu);
}

void pool_wait_end(void *pool)
{
	struct pool_thread *t = pool_self;
	struct pool *p = pool;

	if (!t || t->pool != p)
		return;
	feed_mutex_lock(&p->mu);
	p->nwaiting--;
	if (t->run_src && --t->run_src->nwaiting == 0)
		pthread_cond_broadcast(&p->cv);  /* its queued jobs may go now */
	feed_mutex_unlock(&p->mu);
	/* the job goes on: the watchdog's clock starts again */
	atomic_store_explicit(&t->job_since_ms, pool_now_ms(), memory_order_relaxed);
}

/* The job pool_yield() may run inside the one on t, or NULL: the pool's
 * own, or another user's that the fair share puts first and that costs at
 * most a quarter of what the running job has cost so far (or is
 * expected to). */
static struct pool_job *pool_yield_take_locked(struct pool *p, struct pool_thread *t,
					       uint64_t now, bool *ret_later)
{
	struct pool_job *job = pool_own_locked(p);

	if (job)
		return job;
	struct pool_source *s = pool_choose_locked(p);
	struct pool_user *mine = t->cur_src ? t->cur_src->user : NULL;
	if (!s || !mine || s->user == mine)
		return NULL;
	/* the running job's user as charged once it ends: the estimate made
	 * at the pick, or what it has cost so far if that is more */
	uint64_t spent = now - t->cur_t0 - t->nested_ns;
	uint64_t worth = spent > t->cur_est ? spent : t->cur_est;
	if (s->user->vtime > mine->vtime - t->cur_est + worth)
		return NULL;
	if (s->est_ns > worth / 4) {
		*ret_later = true;  /* the running job may grow dear enough */
		return NULL;
	}
	return pool_dequeue_locked(p, s);
}

void pool_yield_slow(struct pool_worker *w)
{
	assert_worker();
	struct pool_thread *t = w->thread;
	struct pool *p = t->pool;

	if (t->nesting || ++t->calls < t->next_check)
		return;
	uint64_t now = pool_thread_ns();
	feed_mutex_lock(&p->mu);
	atomic_store_explicit(&p->yield_wanted, 0, memory_order_relaxed);
	struct pool_job *job;
	bool later = false;
	/* as many as the fair share allows: a light stream's next batch is
	 * often queued by the time its last one is built */
	while (!p->idle && (job = pool_yield_take_locked(p, t, now, &later))) {
		/* a worker's nested job: it is not a spare's (one at a time) */
		t->nesting = true;
		pool_run_locked(p, t, job, &t->w2);
		t->nesting = false;
		uint64_t after = pool_thread_ns();
		t->nested_ns += after - now;
		now = after;
	}
	if (later) {
		/* too dear for now: look again later, less often each time */
		atomic_store_explicit(&p->yield_wanted, 1, memory_order_relaxed);
		t->next_check = t->calls + (t->next_check ? t->next_check : 8);
	}
	feed_mutex_unlock(&p->mu);
}

/* Runs done() of every finished job, oldest first (loop thread). */
static void pool_drain(struct pool *p)
{
	feed_mutex_lock(&p->mu);
	struct pool_job *list = p->done;
	p->done = NULL;
	feed_mutex_unlock(&p->mu);

	struct pool_job *fifo = NULL;
	while (list) {  /* reverse: done was pushed newest first */
		struct pool_job *next = list->next;
		list->next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo) {
		struct pool_job *next = fifo->next;
		fifo->done(fifo);
		fifo = next;
	}
}

static void pool_on_async(uv_async_t *h)
{
	pool_drain(h->data);
}

static void pool_on_close(uv_handle_t *h)
{
	struct pool *p = h->data;
	p->closed = true;
}

static void pool_join(struct pool *p)
{
	feed_mutex_lock(&p->mu);
	p->stopping = true;
	pthread_cond_broadcast(&p->cv);
	pthread_cond_broadcast(&p->spare_cv);
	feed_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n; i++) {
		pthread_join(p->threads[i].tid, NULL);
		fmt_decoder_free(p->threads[i].w.dec);
		free(p->threads[i].w.comp);
		free(p->threads[i].w.scratch);
		if (p->threads[i].w.ctx_free)
			p->threads[i].w.ctx_free(p->threads[i].w.ctx);
		fmt_decoder_free(p->threads[i].w2.dec);
		free(p->threads[i].w2.comp);
		free(p->threads[i].w2.scratch);
		if (p->threads[i].w2.ctx_free)
			p->threads[i].w2.ctx_free(p->threads[i].w2.ctx);
	}
	p->n = 0;
	feed_mutex_lock(&p->mu);
	p->joined = true;
	feed_mutex_unlock(&p->mu);
}

/* Starts thread i with every signal blocked, so signals reach the loop. */
static int pool_spawn(struct pool *p, unsigned i, struct feed_err *err)
{
	struct pool_thread *t = &p->threads[i];
	sigset_t all, old;

	t->pool = p;
	t->spare = i >= p->size;
	t->w.index = t->w2.index = i;
	t->w.thread = t->w2.thread = t;
	/* w2's stays NULL: one level deep; a spare never nests (it stands in
	 * for one waiting job and takes no second one meanwhile) */
	t->w.yield_flag = t->spare ? NULL : &p->yield_wanted;
	int r = fmt_decoder_new(&t->w.dec);
	if (r == 0 && (r = fmt_decoder_new(&t->w2.dec)) < 0)
		fmt_decoder_free(t->w.dec);
	if (r < 0)
		return feed_err_set(err, r, "worker %u: decoder: %s", i, strerror(-r));
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t->tid, NULL, pool_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		fmt_decoder_free(t->w.dec);
		fmt_decoder_free(t->w2.dec);
		return feed_err_set(err, -r, "worker %u: pthread_create: %s", i, strerror(r));
	}
	return 0;
}

int pool_new(uv_loop_t *loop, const struct log *lg, unsigned n, struct pool **ret,
	     struct feed_err *err)
{
	struct pool *p = calloc(1, sizeof(*p));
	int r = 0;

	pool_roles |= POOL_ROLE_LOOP;  /* the caller runs the loop (pool.h) */
	if (!p || !(p->threads = calloc(n ? 2 * n : 1, sizeof(*p->threads)))) {
		free(p);
		return feed_err_set(err, -ENOMEM, "worker pool: out of memory");
	}
	p->log = lg;
	p->size = n;
#ifdef FEEDD_TEST_SEAMS
	if (getenv("FEEDD_TEST_STALL") && !(p->test_stall = strdup(getenv("FEEDD_TEST_STALL")))) {
		free(p->threads);
		free(p);
		return feed_err_set(err, -ENOMEM, "worker pool: out of memory");
	}
#endif
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	pthread_cond_init(&p->spare_cv, NULL);
	atomic_init(&p->yield_wanted, 0);
	/* Threads first: idle ones never touch the async handle, so a failure
	 * below is undone by joining them, with no handle to close. */
	for (unsigned i = 0; i < 2 * n && r == 0; i++)  /* workers, then as many spares */
		if ((r = pool_spawn(p, i, err)) == 0)
			p->n++;
	if (r == 0 && (r = uv_async_init(loop, &p->async, pool_on_async)) < 0)
		feed_err_set(err, r, "worker pool: uv_async_init: %s", uv_strerror(r));
	if (r < 0) {
		pool_join(p);
		pthread_cond_destroy(&p->cv);
		pthread_cond_destroy(&p->spare_cv);
		pthread_mutex_destroy(&p->mu);
		free(p->test_stall);
		free(p->threads);
		free(p);
		return r;
	}
	p->async.data = p;
	log_debug(lg, "worker pool: %u threads started", n);
	*ret = p;
	return 0;
}

/* Queues job in s; work arriving at an idle user or source is lifted to
 * the time of the last pick, so idleness banks no credit. */
static void source_queue_locked(struct pool *p, struct pool_source *s, struct pool_job *job)
{
	struct pool_user *u = s->user;

	if (!u->nqueued && u->vtime < p->vclock)
		u->vtime = p->vclock;
	if (!s->nqueued) {
		uint64_t least = UINT64_MAX;
		for (struct pool_source *o = u->sources; o; o = o->next)
			if (o->nqueued && o->vtime < least)
				least = o->vtime;
		if (least != UINT64_MAX && s->vtime < least)
			s->vtime = least;
	}
	if (s->tail)
		s->tail->next = job;
	else
		s->head = job;
	s->tail = job;
	s->nqueued++;
	s->refs++;
	u->nqueued++;
	p->nqueued++;
}

void pool_submit(struct pool *p, struct pool_job *job)
{
	(void)pool_try_submit(p, job);
}

int pool_try_submit(struct pool *p, struct pool_job *job)
{
	job->next = NULL;
	feed_mutex_lock(&p->mu);
	if (p->joined) {
		feed_mutex_unlock(&p->mu);
		return -ESHUTDOWN;
	}
	assert(!job->src || job->src->pool == p);
	if (job->src) {
		source_queue_locked(p, job->src, job);
	} else {
		if (p->tail)
			p->tail->next = job;
		else
			p->head = job;
		p->tail = job;
	}
	/* every worker busy, one with another user's job: that one may run it
	 * between its items (a user's own jobs never nest: no flag, no cost) */
	if (!p->idle && (!job->src || p->running > job->src->user->running))
		atomic_store_explicit(&p->yield_wanted, 1, memory_order_relaxed);
	pthread_cond_signal(&p->cv);
	if (p->nwaiting > p->spare_running)  /* a worker waits: a spare may take it */
		pthread_cond_signal(&p->spare_cv);
	feed_mutex_unlock(&p->mu);
	return 0;
}

int pool_source_new(struct pool *p, uid_t uid, struct pool_source **ret)
{
	struct pool_source *s = calloc(1, sizeof(*s));
	struct pool_user *u;

	if (!s)
		return -ENOMEM;
	s->pool = p;
	s->refs = 1;
	atomic_init(&s->worker_ns, 0);
	atomic_init(&s->jobs, 0);
	feed_mutex_lock(&p->mu);
	for (u = p->users; u && u->uid != uid; u = u->next)
		;
	if (!u) {
		if (!(u = calloc(1, sizeof(*u)))) {
			feed_mutex_unlock(&p->mu);
			free(s);
			return -ENOMEM;
		}
		u->uid = uid;
		u->vtime = p->vclock;
		u->next = p->users;
		p->users = u;
	}
	s->user = u;
	s->next = u->sources;
	u->sources = s;
	feed_mutex_unlock(&p->mu);
	*ret = s;
	return 0;
}

void pool_source_put(struct pool_source *s)
{
	if (!s)
		return;
	struct pool *p = s->pool;
	feed_mutex_lock(&p->mu);
	s->watched = 0;  /* the owner's flags may go with it */
	if (--s->refs == 0)
		source_free_locked(s);
	feed_mutex_unlock(&p->mu);
}

void pool_source_watch(struct pool_source *s, unsigned i, const _Atomic uint32_t *reader_waiting)
{
	assert(i < POOL_SOURCE_READERS);
	feed_mutex_lock(&s->pool->mu);
	s->waiting[i] = reader_waiting;
	if (reader_waiting)
		s->watched |= 1ull << i;
	else
		s->watched &= ~(1ull << i);
	feed_mutex_unlock(&s->pool->mu);
}

void pool_source_stats(const struct pool_source *s, struct pool_source_stats *ret)
{
	/* relaxed: display counters; each is read once and nothing depends on
	 * the two agreeing with each other */
	ret->worker_ns = atomic_load_explicit(&s->worker_ns, memory_order_relaxed);
	ret->jobs = atomic_load_explicit(&s->jobs, memory_order_relaxed);
}

void pool_stop(struct pool *p)
{
	assert_loop_thread();
	if (p->stopped)
		return;
	p->stopped = true;
	pool_join(p);
	pool_drain(p);
	uv_close((uv_handle_t *)&p->async, pool_on_close);
	log_debug(p->log, "worker pool: %u threads joined", p->size);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	assert(p->stopped && p->closed && !p->head && !p->nqueued && !p->done);
	pthread_cond_destroy(&p->cv);
	pthread_cond_destroy(&p->spare_cv);
	pthread_mutex_destroy(&p->mu);
	free(p->test_stall);
	free(p->threads);
	free(p);
}

int pool_longest_job(struct pool *p, unsigned *ret_index, uint64_t *ret_ms)
{
	assert_loop_thread();
	uint64_t now = pool_now_ms(), oldest = 0;
	unsigned idx = 0;

	for (unsigned i = 0; i < p->n; i++) {
		uint64_t since = atomic_load_explicit(&p->threads[i].job_since_ms,
						      memory_order_relaxed);
		if (since && (!oldest || since < oldest)) {
			oldest = since;
			idx = p->threads[i].w.index;
		}
	}
	if (!oldest)
		return 0;
	*ret_index = idx;
	*ret_ms = now > oldest ? now - oldest : 0;
	return 1;
}

unsigned pool_size(const struct pool *p)
{
	return p->size;
}

unsigned pool_busy(struct pool *p)
{
	unsigned busy;

	feed_mutex_lock(&p->mu);
	unsigned workers = p->n < p->size ? p->n : p->size;
	busy = (workers > p->idle ? workers - p->idle : 0) + p->spare_running;
	feed_mutex_unlock(&p->mu);
	return busy;
}
