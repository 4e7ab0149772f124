/*
 * pool.h: the worker threads. Each owns one struct fmt_decoder (its zstd
 * context) for the lifetime of the pool, its buffers, and an opaque slot
 * for what its jobs keep between runs (struct pool_worker). The pool knows
 * nothing of images, packing or the limits a job reads.
 *
 * Owns: the threads, the job queue and the completion path back to the
 * loop. Jobs are submitted on the loop thread; run() executes on a worker;
 * done() executes later on the loop thread, reached only through
 * uv_async_send() (which coalesces) and the done list. A worker never
 * touches a libuv handle and never calls back into the loop itself.
 *
 * Fair shares: jobs are queued per work source (one stream, or one group
 * of streams counted once), each belonging to a user. A worker takes the
 * pool's own jobs first (a new stream's regions), then picks the user with
 * the least worker time charged among those with queued work, and within
 * that user the source with the least worker time, where a source any of
 * whose watched readers is waiting (a group's: any member's) counts 20 ms
 * less (it goes first unless it is that far ahead); a source takes its jobs in the order submitted. Worker
 * time is the thread CPU time of each run(), charged when the job is
 * picked (the source's recent average) and corrected when it ends, so two
 * workers do not both pick a user whose first job is still running. A user
 * or source that had nothing queued is lifted to the time of the last one
 * picked when its work arrives: idleness banks no credit. Ties go round
 * robin. The reader-waiting flag is the client's (untrusted): it only
 * orders a user's own sources, never one user against another.
 *
 * Jobs are not preempted, but a long one calls pool_yield() between
 * items: when every worker is busy and another user's job that the fair
 * share puts first is queued and costs at most a quarter of the running
 * one, it runs there and then, on the same thread with the worker's
 * second set of buffers (one level deep: a job run so never yields). A
 * light stream next to heavy ones then waits for one item, not one batch.
 * The worker looks only when a flag says so: work was queued while every
 * worker was busy and one ran another user's job.
 *
 * Locks: one mutex (pool.mu) guards the queues, the users and sources, the
 * done list and the stop flag; it is the only lock and is never held while
 * a job runs or a callback is called.
 */
#ifndef FEEDD_POOL_H
#define FEEDD_POOL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "feed_err.h"
#include "feed_shm.h"
#include "log.h"

struct fmt_decoder;
struct pool_thread;

/* ---- which thread is which (cheap asserts) ----
 *
 * A thread's roles: pool_new() marks its caller the loop thread, each
 * worker marks itself when it starts; a test that runs jobs itself marks
 * its thread both (pool_thread_roles()). assert_loop_thread() and
 * assert_worker(), at the entry of a function whose header names its
 * thread, abort naming the function when the calling thread has roles and
 * not that one (a thread with none, a library's or a test's, is not
 * checked). On in FEED_LOCK_CHECKS or !NDEBUG builds; else nothing. */
#define POOL_ROLE_LOOP 1u
#define POOL_ROLE_WORKER 2u
/* Sets the calling thread's roles (POOL_ROLE_* or'ed; 0: none). */
void pool_thread_roles(unsigned roles);
/* Aborts naming fn when the calling thread has roles and not role. */
void pool_assert_role(unsigned role, const char *fn);
#if defined(FEED_LOCK_CHECKS) || !defined(NDEBUG)
#define assert_loop_thread() pool_assert_role(POOL_ROLE_LOOP, __func__)
#define assert_worker() pool_assert_role(POOL_ROLE_WORKER, __func__)
#else
#define assert_loop_thread() ((void)0)
#define assert_worker() ((void)0)
#endif

/* What a job sees of the worker running it. */
struct pool_worker {
	unsigned index;               /* 0 .. workers-1 */
	struct fmt_decoder *dec;      /* this worker's own; never shared */
	/* Buffers jobs grow to the largest need seen (64-byte aligned) and
	 * reuse, so no job allocates per item; freed when the pool stops. */
	void *comp;                   /* a compressed block */
	size_t comp_cap;
	void *scratch;                /* augmentation scratch */
	size_t scratch_cap;
	/* What the jobs keep here between runs (work/builder.c's decoders and
	 * packing state): made by them on first use, freed with ctx_free(ctx)
	 * when the pool stops (or by whoever made a pool_worker by hand). The
	 * pool never looks inside. NULL: nothing yet. */
	void *ctx;
	void (*ctx_free)(void *ctx);
	struct pool_thread *thread;   /* private: pool_yield() */
	_Atomic int *yield_flag;      /* private: NULL where pool_yield() never acts */
};

/* A unit of work, owned by whoever submits it until done() is called (or,
 * with done NULL, until run() returns: such jobs never wake the loop, which
 * is how batch building stays off the loop thread entirely). */
struct pool_job {
	struct pool_job *next;        /* private: list link */
	/* Whose work it is; set before pool_submit(), held (a reference) until
	 * run() returns. NULL: the pool's own, run before any source's. */
	struct pool_source *src;
	void (*run)(struct pool_job *job, struct pool_worker *w);  /* worker thread */
	void (*done)(struct pool_job *job);                        /* loop thread, or NULL */
};

struct pool;

/* Starts n worker threads (signals blocked in them) and the async handle
 * on loop. Loop thread. -errno naming what failed; nothing is left running
 * on failure. */
int pool_new(uv_loop_t *loop, const struct log *lg, unsigned n, struct pool **ret,
	     struct feed_err *err);

/* Queues job. Any thread (workers queue follow-up batches). */
void pool_submit(struct pool *p, struct pool_job *job);

/* As pool_submit(), or -ESHUTDOWN, queueing nothing, once pool_stop() has
 * joined the workers: the caller runs what must run itself (a delivery's
 * last teardown, after the stop). Any thread. */
int pool_try_submit(struct pool *p, struct pool_job *job);

/* Loop thread: lets the workers finish every queued job, joins them, calls
 * the remaining done() callbacks, and starts closing the async handle.
 * Jobs that a worker submits from run() before the join completes run too
 * (a stream's follow-up batches; the stream is closing, so they end at
 * once), so a chain of jobs that never ends keeps pool_stop() from
 * returning. A submission from the loop thread or from a done() callback
 * after pool_stop() began is a bug. Idempotent. */
void pool_stop(struct pool *p);

/* Frees the pool once pool_stop() ran and the loop has processed the close
 * (uv_run returned). Accepts NULL. */
void pool_free(struct pool *p);

unsigned pool_size(const struct pool *p);

/* The worker that has been in its current job longest (a job run inside
 * it by pool_yield() counts as the same job; time waiting on the network,
 * pool_wait_begin(), does not, and the clock starts again after it): 1
 * with its index and how long, in milliseconds, so far; 0 when every
 * worker is idle or waiting. Loop thread
 * (the watchdog), never blocks: relaxed loads, no lock. */
int pool_longest_job(struct pool *p, unsigned *ret_index, uint64_t *ret_ms);
/* Workers running a job now. Any thread; takes the queue's lock for a read. */
unsigned pool_busy(struct pool *p);

/* ---- waiting on the network ----
 *
 * A job that must wait for something no CPU work brings (a remote block:
 * data/fetcher.h) calls pool_wait_begin() before and pool_wait_end()
 * after, on its own thread, with no lock held (they are the fetcher's
 * hooks; pool is the struct pool). Meanwhile:
 * - the thread does not count as stuck for the watchdog
 *   (pool_longest_job(): its job's clock starts again when the wait ends);
 * - a spare thread stands in for it: the pool starts as many spares as
 *   workers, each of which runs jobs only while more threads wait than
 *   spares run, so the CPU work of other streams goes on;
 * - its job's source is not picked again until the wait ends: one stalled
 *   stream holds one thread, not every thread.
 * Called from a thread that is not one of pool's: nothing happens. */
void pool_wait_begin(void *pool);
void pool_wait_end(void *pool);

void pool_yield_slow(struct pool_worker *w);

/* Between the items of a long job (samples of a batch), on its worker:
 * may run one queued job first (see Fair shares above). The caller holds
 * no lock (cache pins are fine: the job run here pins its own). Nearly
 * free when there is nothing to do: one relaxed load. */
static inline void pool_yield(struct pool_worker *w)
{
	/* relaxed: a hint; pool_yield_slow() looks under the lock */
	if (w->yield_flag && atomic_load_explicit(w->yield_flag, memory_order_relaxed))
		pool_yield_slow(w);
}

/* ---- work sources (fair shares) ---- */

struct pool_source;

/* A new source of work for user uid, with one reference: the caller's.
 * Any thread. -ENOMEM. */
int pool_source_new(struct pool *p, uid_t uid, struct pool_source **ret);

/* Drops the caller's reference; the source goes once no job of it is
 * queued or running. Any thread, also from inside one of its jobs' run().
 * Accepts NULL. */
void pool_source_put(struct pool_source *s);

/* Where reader i (< POOL_SOURCE_READERS: a group's member index, 0 for a
 * plain stream) of the source says it is waiting (feed_shm_rel's
 * client_waiting: untrusted, read only to order the user's own sources),
 * or NULL. The source is urgent while any watched reader waits. A flag
 * must stay mapped until replaced by NULL or pool_source_put() (which
 * drops every watch). Any thread. */
#define POOL_SOURCE_READERS FEED_SHM_MAX_MEMBERS
void pool_source_watch(struct pool_source *s, unsigned i, const _Atomic uint32_t *reader_waiting);

/* Counters; any thread, without the lock (relaxed atomics). */
struct pool_source_stats {
	uint64_t worker_ns;           /* thread CPU time of its jobs' run() */
	uint64_t jobs;                /* jobs run */
};
void pool_source_stats(const struct pool_source *s, struct pool_source_stats *ret);

#endif
