/*
 * batch.h: what goes into a stream's batches: the schedule of positions
 * (epoch, batch) over the order module, and building one batch into its
 * slot: samples located, blocks pinned from the cache, the pipeline applied
 * straight into the slot's bytes, the slot header written last.
 *
 * batch_build() runs on a worker without the stream lock; the rest run
 * with it held. Never allocates per batch or per sample (per-worker buffers
 * grow once).
 */
#ifndef FEED_BATCH_H
#define FEED_BATCH_H

#include "feed_err.h"

struct stream;
struct stream_job;
struct pool_worker;

/* Builds the order of the stream's first epoch and checks the start
 * position. -EINVAL naming the parameter when the spec cannot be served
 * (e.g. an epoch with no batch for this rank). */
int batch_order_init(struct stream *s, struct feed_err *err);
void batch_order_fini(struct stream *s);

/* Takes a free slot for the next position (s->lock held). Returns 0, or
 * -EAGAIN when the next epoch must wait for the one before the current to
 * drain, or -ENODATA when every requested epoch is scheduled. */
int batch_next_locked(struct stream *s, struct stream_job **ret_job);

/* A job finished (built or abandoned): its epoch may be recycled. Lock. */
void batch_job_done(struct stream *s, struct stream_job *j);

/* Builds job j into its slot. Worker thread, no lock. Returns 0, or an
 * error naming the sample and shard/block (-EBADMSG) or the field. */
int batch_build(struct stream *s, struct stream_job *j, struct pool_worker *w,
		struct feed_err *err);

#endif
