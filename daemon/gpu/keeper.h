/*
 * keeper.h: the GPU keeper, one thread of the daemon's that makes the CUDA
 * driver calls that synchronise implicitly (cuMemHostRegister,
 * cuMemHostUnregister, cuMemFree) so that none runs on the loop thread or
 * on a worker, where a trainer's queued device work could hold up every
 * stream's progress (DESIGN.md "GPU path"): such a call waits for all of
 * the context's work, and a stream's conversions may wait for a client's
 * done word behind seconds of that client's kernels. Here only the keeper
 * waits.
 *
 * Owns the thread and a FIFO of jobs; knows nothing of device slots (their
 * jobs are written in devslots.c). Jobs run in the order submitted, one
 * at a time, with no lock held; a tick function runs every GK_TICK_MS
 * while ticking is asked for (the graveyard's reaping).
 *
 * Threads: gk_start and gk_stop on the main thread (start, stop);
 * gk_submit and gk_ticking from any thread. keeper.mu guards the queue
 * and the flags and is never held across a job or a tick.
 */
#ifndef FEEDD_KEEPER_H
#define FEEDD_KEEPER_H

#include <pthread.h>
#include <stdbool.h>

#include "feed_err.h"

#define GK_TICK_MS 20  /* how often the tick runs while it is asked for */

/* A job: embedded in what it concerns, which it may free. */
struct gk_job {
	void (*run)(struct gk_job *j); /* on the keeper's thread, no lock held */
	struct gk_job *next;           /* the keeper's */
};

struct gk {
	pthread_t tid;
	bool started;              /* the thread runs (gk_stop joins it) */
	void (*tick)(void *arg);   /* see gk_ticking */
	void *arg;
	pthread_mutex_t mu;        /* the fields below */
	pthread_cond_t cv;         /* a job, a tick asked for, or stop */
	struct gk_job *head, *tail;
	bool ticking;              /* tick every GK_TICK_MS */
	bool stop;                 /* run what is queued, then end */
};

/* Starts the thread. tick (may be NULL) runs with arg while gk_ticking()
 * asked for it. 0, or -errno with err naming the call. Main thread. */
int gk_start(struct gk *k, void (*tick)(void *arg), void *arg, struct feed_err *err);

/* Queues j (never blocks on a job). Any thread while the keeper runs;
 * on a keeper not started (or stopped), j runs at once on the caller's
 * thread. */
void gk_submit(struct gk *k, struct gk_job *j);

/* Asks for the tick (on) or stops asking (off). Any thread; the tick
 * itself calls it to stop when it has nothing left. */
void gk_ticking(struct gk *k, bool on);

/* Runs every queued job, one last tick, and joins the thread. Accepts a
 * keeper never started. Main thread. */
void gk_stop(struct gk *k);

#endif
