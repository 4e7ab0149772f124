/*
 * delivery.h: the delivery of one stream's batches to its one client,
 * through three sealed memfd regions (proto/feed_shm.h, laid out by
 * layout.h) and two eventfd doorbells: the slots, the credits, the ready
 * ring, the untrusted release ring, the stream's lifetime and its errors.
 * Which position comes next is the schedule's (schedule.h); building a
 * batch into a slot is the builder's (work/builder.h).
 *
 * Threads (daemon/README.md has the whole picture): the loop thread
 * creates, starts and closes a delivery and drains its release doorbell; a
 * worker creates its regions (dlv_prepare) and builds batches, publishing
 * each in batch order straight to the ready ring with no loop involvement.
 * One mutex per delivery guards the slot table, the schedule and the ring;
 * it is a leaf lock (nothing else is locked while it is held: pool_submit
 * and the cache are called outside it) and is held only for O(1)-per-slot
 * bookkeeping, never while a batch is built.
 *
 * Never trusts the release region: every entry is read once and checked
 * against the ownership table; a head that moves backwards or past the
 * ring's capacity ends the stream with an error the client can read.
 */
#ifndef FEEDD_DELIVERY_H
#define FEEDD_DELIVERY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "feed_err.h"
#include "schedule.h"

struct dlv;
struct cache;
struct fmt_dataset;
struct pipe_plan;
struct pool;
struct slot_layout;

#define DLV_MAX_CREDITS 64
#define DLV_MAX_BATCH 65536

/* What a client asked for, checked by the session before dlv_new(). */
struct dlv_spec {
	uint32_t credits;          /* slots: built-but-unreleased batches, 1..DLV_MAX_CREDITS */
	uint64_t seed;             /* augmentation draws */
	struct sched_spec sched;   /* positions */
	uid_t uid;                 /* whose fair share its batches are built from (pool.h) */
};

/* The descriptors a client needs; owned by the delivery (send copies). */
struct dlv_fds {
	int ctl, data, rel;        /* memfds */
	int ready, release;        /* eventfds: ready rings the client, release the daemon */
};

/* Creates a delivery for layout lay (from layout_compute() over plan->out,
 * spec->sched.ord.batch and spec->credits), copying plan and lay, and
 * builds its schedule. No shared memory exists yet (dlv_prepare()). ds,
 * the schedule's block table, cache and pool must outlive it. Returns 0,
 * -EINVAL naming the parameter, -ENOMEM. Loop thread; cheap. */
int dlv_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	    const struct slot_layout *lay, const struct dlv_spec *spec, struct cache *cache,
	    struct pool *pool, struct dlv **ret_dlv, struct feed_err *err);

/* Called on the loop thread when dlv_prepare() is done: rc 0, or the
 * error (-ENOSPC / -ENOMEM naming the region and bytes) with its message. */
typedef void dlv_ready_fn(void *arg, int rc, const char *msg);

/* Creates, faults in and seals the regions and doorbells on a worker
 * thread (allocating gigabytes must not stall the loop), then calls
 * ready(arg, ...) on the loop thread, exactly once, even when the pool is
 * stopping. Call once, before anything below but dlv_close(). Loop thread. */
void dlv_prepare(struct dlv *d, dlv_ready_fn *ready, void *arg);

/* After a successful dlv_prepare(). */
void dlv_fds(const struct dlv *d, struct dlv_fds *ret_fds);

/* Batches of this rank in the start epoch (true count), the start epoch and
 * the index of the first batch delivered (schedule.h). */
uint64_t dlv_batches_per_epoch(const struct dlv *d);
uint64_t dlv_start_epoch(const struct dlv *d);
uint64_t dlv_start_index(const struct dlv *d);

/* Schedules the first batches. Loop thread, after a successful prepare. */
void dlv_start(struct dlv *d);

/* The release doorbell rang (or may have): reads the release ring, frees
 * the released slots and schedules more batches. Loop thread. */
void dlv_on_release(struct dlv *d);

/* Stops scheduling and drops the loop's reference; batches being built
 * finish and the last reference (a worker's or ours) frees the regions.
 * The client may keep its mappings: they stay valid for it. Loop thread,
 * never while dlv_prepare() is pending. Accepts NULL. */
void dlv_close(struct dlv *d);

/* Counters for stats. */
struct dlv_stats {
	uint64_t batches, samples, bytes;  /* published */
	uint64_t bad_releases;             /* release entries refused */
	uint32_t credits_in_use;           /* slots building, ready or held */
	uint32_t credits;                  /* slots in all */
	uint64_t worker_ns, jobs;          /* worker CPU time and jobs run (pool.h) */
	uint64_t reader_wait_ns;           /* the client's own report: untrusted,
					    * unchecked; for display only */
	int error;                         /* 0, or why the stream stopped */
	char error_msg[256];               /* with error: what the client reads */
};

/* Any thread (takes the lock). */
void dlv_stats(struct dlv *d, struct dlv_stats *ret_stats);

/* batches, samples, bytes, worker_ns, jobs and reader_wait_ns alone,
 * without the lock (relaxed atomics). Any thread. */
void dlv_counters(struct dlv *d, struct dlv_stats *ret_stats);

#endif
