/*
 * delivery.h: the delivery of one stream's or one group's batches to its
 * members, through sealed memfd regions (proto/feed_shm.h, laid out by
 * layout.h) and eventfd doorbells: the slots, the credits, the ready
 * rings, the untrusted release rings, the lifetime and the errors.
 *
 * A delivery builds each batch once into its data region; each member (a
 * client: one for a plain stream, several for a group, DESIGN.md "Sharing
 * between jobs") has its own control region (ready ring, a copy of every
 * slot header), release region and doorbells. A slot is reused only when
 * every member it was published to has released it (a member mask per
 * slot). A group member that releases nothing for the group timeout is
 * detached (dlv_detach_idle): the slots it has taken stay intact until it
 * releases them or leaves, the rest go back, and its next call fails with
 * -ENOLINK.
 * Which position comes next is the schedule's (schedule.h); building a
 * batch into a slot is the builder's (work/builder.h).
 *
 * Threads (daemon/README.md has the whole picture): the loop thread
 * creates, starts and closes a delivery and drains its release doorbell; a
 * worker creates a member's regions (dlv_join) and builds batches, publishing
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
#include "feed_shm.h"
#include "mixture.h"
#include "schedule.h"

struct dlv;
struct dlv_member;
struct cache;
struct fmt_dataset;
struct region;
struct pipe_plan;
struct pool;
struct slot_layout;

#define DLV_MAX_CREDITS FEED_SHM_MAX_SLOTS    /* slots of a delivery: one bit each in a member's mask */
#define DLV_MAX_MEMBERS FEED_SHM_MAX_MEMBERS    /* members of a group: one bit each in a slot's mask */
#define DLV_MAX_BATCH 65536

struct pool_job;

/* How a delivery's jobs (pool.h's struct pool_job: its batches, its
 * members' regions, its order's tables, its last teardown) reach a
 * worker. The daemon's is the pool (spec->runner NULL); a test's may run
 * them synchronously, or hold them and run them in the order it chooses. */
struct dlv_runner {
	/* Queues job: run() on a worker, then done() (when not NULL) on the
	 * loop thread. 0, or -ESHUTDOWN when no job runs any more (the pool
	 * stopped): the delivery then runs it itself. Any thread; called with
	 * no lock held. */
	int (*submit)(void *arg, struct pool_job *job);
	void *arg;
};

/* What a client asked for, checked by the session before dlv_new(). */
struct dsl;                 /* device slots: gpu/devslots.h, a layer above */
struct bld_predecode;       /* work/builder.h */
struct bld_limits;          /* work/builder.h */
struct feed_shm_slot;

/* What a delivery does with its device slots. The layer that makes them
 * (gpu/devslots.c, dsl_dlv_ops) supplies the table, so the delivery drives
 * them without naming that layer. The threads and contracts are those of
 * the dsl_* function each entry stands for (devslots.h). */
struct dlv_dev_ops {
	/* dsl_make: once, on the worker that made the data region; < 0: the
	 * stream goes on with host slots (it undid itself, free is still due) */
	int (*make)(struct dsl *s, struct feed_err *err);
	/* dsl_before_build: the device has read the slot's last batch (worker) */
	int (*before_build)(struct dsl *s, uint32_t slot, struct feed_err *err);
	/* dsl_after_build: copy and convert the built slot (worker) */
	int (*after_build)(struct dsl *s, uint32_t slot, const struct feed_shm_slot *hdr,
			   uint8_t *data, uint64_t data_bytes, struct feed_err *err);
	/* dsl_predecode: the decode dispatch of the batch about to be built,
	 * with ready of the stream's slots built and not yet released (worker):
	 * true and *ret when some of its images decode ahead (hybrid JPEG
	 * decode, gpu/hybrid.c). NULL: never */
	bool (*predecode)(struct dsl *s, uint32_t batch, uint32_t ready,
			  struct bld_predecode *ret);
	/* dsl_abandon: the client is gone, release every wait (loop thread) */
	void (*abandon)(struct dsl *s);
	/* dsl_free: takes the data region (left empty) and unmaps it when
	 * the device no longer reads it; never waits (the last reference's
	 * thread) */
	void (*free)(struct dsl *s, struct region *data);
};

struct dlv_spec {
	uint32_t credits;          /* slots (a group: its depth), 1..DLV_MAX_CREDITS */
	uint64_t seed;             /* augmentation draws */
	struct sched_spec sched;   /* positions (a group's: no end, epochs 0) */
	bool group;                /* members map the data region copy-on-write:
				    * sealed FUTURE_WRITE, page-sized slots
				    * (layout_page_slots()) */
	uid_t uid;                 /* whose fair share its batches are built from
				    * (pool.h): a group's creator's; one pool
				    * source per delivery, a group counts once */
	uint32_t on_error;         /* enum bld_on_error: fail, or skip (replace) */
	uint64_t max_bad;          /* skip: samples replaced an epoch before the
				    * stream stops (>= 1) */
	struct dsl *dev;           /* planned device slots (devslots.h; a plain
				    * stream's CUDA IPC), or NULL: the delivery's
				    * once dlv_new() succeeds (made on the device
				    * with the data region, freed with it), the
				    * caller's if it fails */
	const struct dlv_dev_ops *dev_ops; /* how to drive dev (with dev) */
	/* The limits its jobs read (builder.h; the daemon's, set at reload),
	 * each job a snapshot taken when it starts; must outlive the
	 * delivery. NULL: the defaults. */
	const struct bld_limits *limits;
	/* Called once the delivery is gone, by whichever thread dropped its
	 * last reference (often a worker), so what it borrowed (its dataset,
	 * the schedule's block table) can go too: the session passes
	 * cat_entry_unref here (a reload may have retired the dataset). Not
	 * called when dlv_new() fails. NULL: nothing to call. */
	void (*on_free)(void *arg);
	void *on_free_arg;
	/* Where its jobs go (copied), or NULL: pool_try_submit() on dlv_new()'s
	 * pool. */
	const struct dlv_runner *runner;
	/* A mixture (mixture.h), or NULL: the delivery's once dlv_new()
	 * succeeds (freed with it), the caller's if it fails. Its positions
	 * are sched.ord's (sequential over the mixture's epoch rows): row p of
	 * epoch e is mixture row e * ord.n + p; its sources' datasets must
	 * live until on_free is called. The plan's out schema ends with the
	 * int32 field `source` (index mix_field). */
	struct mixture *mix;
	uint32_t mix_field;
};

/* The descriptors a member needs; owned by the delivery (send copies). */
struct dlv_fds {
	int ctl, data, rel;        /* memfds: ctl and rel the member's, data the delivery's */
	int ready, release;        /* eventfds: ready rings the client, release the daemon */
};

/* Creates a delivery for layout lay (from layout_compute() over plan->out,
 * spec->sched.ord.batch and spec->credits, page-rounded for a group),
 * copying plan and lay, and builds its schedule. No shared memory exists
 * yet (dlv_join()). Makes the delivery's one work source (pool.h) for
 * spec->uid: every batch job goes to it, whatever the members, and each
 * member's reader-waiting flag is watched on it while the member is added
 * (any one waiting makes it urgent). ds and the schedule's block table
 * must live until spec->on_free is called; cache and pool must outlive it. Returns 0, -EINVAL naming the
 * parameter, -ENOMEM. Loop thread; O(1): a block-window order's table
 * is built by the first dlv_join()'s job, the next epoch's one epoch
 * ahead by a job of the delivery's source. */
int dlv_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	    const struct slot_layout *lay, const struct dlv_spec *spec, struct cache *cache,
	    struct pool *pool, struct dlv **ret_dlv, struct feed_err *err);

/* Called on the loop thread when a member's regions are made (or could
 * not be): rc 0, or the error (-ENOSPC / -ENOMEM naming the region and
 * bytes) with its message. */
typedef void dlv_ready_fn(void *arg, int rc, const char *msg);

/* A new member of d that receives batches until epoch `epochs` (0: no
 * end; a stream's own epochs for a plain stream) and may take `credits`
 * of them at a time. Creates, faults in and seals its regions on a worker
 * thread (the first member also makes the data region: allocating
 * gigabytes must not stall the loop), then calls ready(arg, ...) on the
 * loop thread, exactly once, even when the pool is stopping. The member
 * receives nothing until dlv_member_add(). *ret is d's until
 * dlv_member_leave(). Returns 0 or -ENOMEM (then ready is never called).
 * Loop thread. */
int dlv_join(struct dlv *d, uint64_t epochs, uint32_t credits, dlv_ready_fn *ready, void *arg,
	     struct dlv_member **ret, struct feed_err *err);

/* Before dlv_member_add(): the member of a group resumes from its own
 * resume token, at (epoch, position: the global position of its next
 * batch's first sample) whatever the group's position. dlv_member_add()
 * then lets it skip the group's batches before that position when the
 * group is behind it, or refuses it (-EALREADY) when the group is past
 * it; the first batch it receives starts exactly there (or it is stopped
 * with -ESPIPE): a member never gets a batch out of sequence. No effect
 * on a plain stream (its schedule starts at its token). Loop thread. */
void dlv_member_resume_at(struct dlv_member *m, uint64_t epoch, uint64_t position);

/* After ready(rc 0): the member receives every batch from the next one to
 * be published on (see dlv_member_resume_at()). Writes where it starts (the first batch's epoch and
 * true index). -EINVAL naming why when it could receive nothing (its
 * epochs end before the group's position), then call dlv_member_leave().
 * Loop thread. */
int dlv_member_add(struct dlv_member *m, uint64_t *ret_epoch, uint64_t *ret_index,
		   struct feed_err *err);

/* After ready(rc 0). */
void dlv_member_fds(const struct dlv_member *m, struct dlv_fds *ret_fds);

/* After the first ready(rc 0): the device slots made on the device, or
 * NULL with *ret_why (when not NULL) saying why not ("" when none were
 * planned; the delivery's, valid while it lives). Loop thread. */
struct dsl *dlv_device(const struct dlv *d, const char **ret_why);

/* Batches of this rank in the start epoch (true count). Takes d's lock
 * (a group's schedule moves on while a member joins). */
uint64_t dlv_batches_per_epoch(struct dlv *d);
/* sched_resume_layout() of d's schedule (immutable after dlv_new()). */
uint64_t dlv_resume_layout(struct dlv *d, struct ord_level *lv, uint32_t *ret_n);

/* Schedules the first batches. Loop thread, after the first member was
 * added; once. */
void dlv_start(struct dlv *d);

/* m's release doorbell rang (or may have): reads its release ring, frees
 * the slots every member released and schedules more batches. Loop thread. */
void dlv_member_on_release(struct dlv_member *m);

/* m leaves: every slot it holds goes back, its regions and doorbells are
 * freed (a plain stream's with the delivery) and the others go on; m is
 * invalid afterwards. The client may keep its mappings. Loop thread, once
 * m's ready() has come (ready() itself may call it, also after a failed
 * dlv_member_add() or none); accepts NULL. */
void dlv_member_leave(struct dlv_member *m);

/* Detaches every member that holds a slot, holds the group up (batches
 * wait untaken for it, it holds all it may take, or no slot is free and
 * none is being built: a member waiting for a slow build is not idle) and
 * released nothing for timeout_ns (DESIGN.md: the group timeout), measured on the caller's
 * clock (now_ns, monotonic, read by this one caller only) from the call
 * that first saw its release count where it still is: a call only samples
 * each member's releases, so the first call detaches nobody, and a
 * member is detached at most one call period late. What it has taken stays
 * intact for it, what it had not taken goes back, it receives nothing
 * more, and its next call fails with -ENOLINK and a message naming the
 * group (name) and the timeout. Returns how many were detached. Loop
 * thread (a timer); takes the lock. */
unsigned dlv_detach_idle(struct dlv *d, uint64_t now_ns, uint64_t timeout_ns, const char *name);

/* Stops scheduling and drops the loop's reference; batches being built
 * finish and the last reference frees the regions, the device slots and
 * the order's tables on a worker (a job of its own when the last is the
 * loop's; at once once the pool has stopped). Call once every member has
 * left. Loop thread. Accepts NULL. */
void dlv_close(struct dlv *d);

/* Counters for stats. */
struct dlv_stats {
	uint64_t batches, samples, bytes;  /* published (built once, whatever the members) */
	uint64_t delivered;                /* batches handed to members, each counted */
	uint64_t bad_releases;             /* release entries refused */
	uint64_t replaced;                 /* samples replaced (on_error skip), published */
	char replaced_what[256];           /* what failed in the last batch with any */
	uint32_t credits_in_use;           /* slots building, ready or held */
	uint32_t members;                  /* receiving batches or holding slots */
	uint32_t credits;                  /* slots in all */
	uint64_t worker_ns, jobs;          /* worker CPU time and jobs run (pool.h):
					    * the delivery's one source, whatever
					    * the members */
	int error;                         /* 0, or why the delivery stopped */
	char error_msg[256];               /* with error: what the client reads */
};

/* Any thread (takes the lock). */
void dlv_stats(struct dlv *d, struct dlv_stats *ret_stats);

/* One member's view. */
enum dlv_member_state {
	DLV_MEMBER_JOINING,        /* regions being made, or not added yet */
	DLV_MEMBER_ACTIVE,         /* receives every batch published */
	DLV_MEMBER_DONE,           /* received its last epoch */
	DLV_MEMBER_DETACHED,       /* timed out: keeps what it had taken */
	DLV_MEMBER_STOPPED,        /* its release ring was bad: stopped */
};

struct dlv_member_stats {
	enum dlv_member_state state;
	uint64_t batches, samples, bytes;  /* published to it */
	uint64_t bad_releases;             /* its release entries refused */
	uint32_t held;                     /* slots published to it, not released */
	uint64_t start_epoch, start_index; /* where it started (dlv_member_add) */
	uint64_t reader_wait_ns;           /* its client's own report of time blocked
					    * (its release region): untrusted,
					    * unchecked; for display only */
	uint64_t detached;                 /* its client's own count of batches it
					    * moved to private memory (held views):
					    * likewise untrusted, for display only */
	int error;                         /* 0, or why it stopped receiving */
	char error_msg[256];
};

/* Any thread (takes the lock). */
void dlv_member_stats(struct dlv_member *m, struct dlv_member_stats *ret_stats);

/* batches, samples, bytes, worker_ns and jobs alone, without the lock
 * (relaxed atomics). Any thread. */
void dlv_counters(struct dlv *d, struct dlv_stats *ret_stats);

#endif
