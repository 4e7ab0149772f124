/*
 * pool.h: the worker threads. Each owns one struct fmt_decoder (its zstd
 * context) for the lifetime of the pool, and the image decoders jobs make
 * for it (struct pool_worker).
 *
 * Owns: the threads, the job queue and the completion path back to the
 * loop. Jobs are submitted on the loop thread; run() executes on a worker;
 * done() executes later on the loop thread, reached only through
 * uv_async_send() (which coalesces) and the done list. A worker never
 * touches a libuv handle and never calls back into the loop itself.
 *
 * Locks: one mutex (pool.mu) guards both lists and the stop flag; it is the
 * only lock and is never held while a job runs or a callback is called.
 */
#ifndef FEEDD_POOL_H
#define FEEDD_POOL_H

#include <uv.h>

#include "feed_err.h"
#include "image.h"
#include "log.h"

struct fmt_decoder;

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
	/* Image decoders (image.h), made on the first batch that decodes and
	 * grown, never shrunk, to the largest dataset limits seen (the
	 * pixel cap clipped to img_max_pixels); [0] one channel, [1] three.
	 * Freed when the pool stops. */
	struct img_decoder *img_dec[2];
	struct img_limits img_lim[2]; /* what each was made for */
	uint64_t img_max_pixels;      /* cap on any decoder's max_pixels */
};

/* A unit of work, owned by whoever submits it until done() is called (or,
 * with done NULL, until run() returns: such jobs never wake the loop, which
 * is how batch building stays off the loop thread entirely). */
struct pool_job {
	struct pool_job *next;        /* private: list link */
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

/* Caps every worker's image decoders at max_pixels (width * height; the
 * config's limits.max_pixels): images past it fail with -E2BIG. Loop
 * thread, before the first job is submitted (the queue's mutex hands the
 * value to the workers). The default is IMG_MAX_PIXELS_DEFAULT. */
void pool_set_img_max_pixels(struct pool *p, uint64_t max_pixels);

#endif
