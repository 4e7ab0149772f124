/*
 * stream.h: one stream of batches from a dataset to one client, through
 * three sealed memfd regions (proto/feed_shm.h) and two eventfd doorbells.
 *
 * Owns the regions, the doorbells, the slot ownership table and the
 * schedule (which batch goes into which slot). Threads: the loop thread
 * creates, starts and closes a stream and drains the release doorbell;
 * worker threads build batches (batch.c) and publish them in batch order
 * straight to the ready ring, with no loop involvement per batch. One
 * mutex per stream guards the table and the schedule; it is taken after no
 * other lock and held only for O(1)-per-slot bookkeeping, never while
 * building a batch. Lock order: stream lock, then the pool's queue lock.
 *
 * Never trusts the release region: every entry is read once and checked
 * against the ownership table; a head that moves past the ring capacity
 * ends the stream with an error the client can read.
 */
#ifndef FEED_STREAM_H
#define FEED_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"

struct stream;
struct fmt_dataset;
struct pipe_plan;
struct cache;
struct pool;
struct pool_worker;

#define STREAM_MAX_CREDITS 64
#define STREAM_MAX_BATCH 65536

/* What a client asked for, checked by the server before stream_new(). */
struct stream_spec {
	uint32_t batch;        /* samples per batch, 1..STREAM_MAX_BATCH */
	uint32_t credits;      /* built-but-unreleased batches, 1..STREAM_MAX_CREDITS */
	uint64_t epochs;       /* deliver epochs up to epochs-1 (counted from 0, so
				* a resumed stream finishes the same run); 0 = until closed */
	bool drop_last;        /* cut the epoch to whole batches (per rank) */
	uint64_t seed;
	int order;             /* enum ord_mode */
	uint32_t window;       /* block-window size in blocks */
	uint32_t rank, world;  /* partition; world >= 1 */
	bool eval;             /* sequential, every sample once across ranks */
	uint64_t start_epoch;  /* resume position: first batch delivered */
	uint64_t start_batch;
	bool at_position;      /* resume token: the start epoch's layout begins at
				* global position start_position (any world size) */
	uint64_t start_position;
};

/* The descriptors a client needs; owned by the stream (send copies). */
struct stream_fds {
	int ctl, data, rel;    /* memfds */
	int ready, release;    /* eventfds: ready rings the client, release the daemon */
};

/* Creates a stream (copying plan): plans slot sizes from the plan's output schema, creates,
 * faults in and seals the regions. Nothing runs until stream_start().
 * ds, cache and pool must outlive the stream. Returns 0, -ENOSPC /
 * -ENOMEM naming the bytes when memory is short, -EINVAL naming the
 * parameter. Loop thread. */
int stream_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	       const struct stream_spec *spec, struct cache *cache, struct pool *pool,
	       struct stream **ret_stream, struct feed_err *err);

void stream_fds(const struct stream *s, struct stream_fds *ret_fds);

/* Batches of this rank in the start epoch (after a resume at a position,
 * the rest of that epoch; every later epoch may have more). */
uint64_t stream_batches_per_epoch(const struct stream *s);

/* The epoch delivery starts in (a resume token taken at an epoch's end
 * starts the next one). */
uint64_t stream_start_epoch(const struct stream *s);

/* Bytes of shared memory the stream holds (for per-user limits). */
uint64_t stream_shm_bytes(const struct stream *s);

/* Schedules the first batches. Loop thread. */
void stream_start(struct stream *s);

/* The release doorbell rang (or may have): reads the release ring, frees
 * the released slots and schedules more batches. Loop thread. */
void stream_on_release(struct stream *s);

/* Stops scheduling and drops the loop's reference; batches being built
 * finish and the last reference frees the regions. The client may keep
 * its mappings: they stay valid for it. Loop thread. Accepts NULL. */
void stream_close(struct stream *s);

/* Counters for stats. */
struct stream_stats {
	uint64_t batches, samples, bytes;  /* published */
	uint64_t bad_releases;             /* release entries refused */
	uint32_t credits_in_use;           /* slots building, ready or held */
	int error;                         /* 0, or why the stream stopped */
	char error_msg[256];               /* with error: what the client reads */
};
void stream_stats(struct stream *s, struct stream_stats *ret_stats);

#endif
