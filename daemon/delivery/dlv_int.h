/*
 * dlv_int.h: the delivery's private types and the calls its files make
 * into one another (dlv_*.c). Not for use outside daemon/delivery/.
 * Files call one way: dlv_loop.c -> dlv_regions.c ->
 * dlv_sched.c -> dlv_publish.c, and each of them -> dlv_life.c.
 */
#ifndef FEEDD_DLV_INT_H
#define FEEDD_DLV_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "builder.h"
#include "delivery.h"
#include "feed_ring.h"
#include "mixture.h"
#include "pool.h"
#include "region.h"
#include "schedule.h"

enum slot_state {
	SLOT_FREE = 0,   /* in free_slots */
	SLOT_BUILDING,   /* a worker writes it */
	SLOT_CLIENT,     /* published: the members' in its mask until each released it */
};

struct slot_info {
	enum slot_state state;
	uint32_t gen;              /* bumped at each build; releases must match */
	uint64_t members;          /* SLOT_CLIENT: bit i = members[i] holds it */
};

/* One batch being built: one per slot, reused (no allocation per batch). */
struct dlv_job {
	struct pool_job base;      /* first: the pool hands this back */
	struct dlv *d;
	uint32_t slot;
	uint64_t seq;              /* publication order */
	struct sched_pos pos;
	uint64_t position;         /* global position of its first sample (lock) */
	uint64_t bytes;            /* field bytes written */
	bool built;                /* finished, waiting for its turn (lock) */
	struct bld_bad bad;        /* on_error skip: what it replaced */
	/* a packed mixture: each source's stream at the batch's first row */
	struct pks_pos mpk[MIXT_MAX_SOURCES];
};

/* One reader: its control region (ready ring, copies of the slot headers),
 * its release region and doorbells. */
struct dlv_member {
	struct dlv *d;
	uint64_t epochs;           /* receives epochs < epochs; 0: no end */
	uint32_t credits;          /* what it may take at a time (the client checks) */
	/* made by the join job on a worker, immutable afterwards */
	struct region ctl, rel;
	int ready_efd, release_efd;
	struct feed_ring ready;           /* the ready ring: we produce (in ctl) */
	struct feed_ring rel_ring;        /* the release ring: we consume, untrusted */
	struct pool_job prep_job;
	dlv_ready_fn *ready_fn;
	void *ready_arg;
	int prep_rc;
	struct feed_err prep_err;

	/* (lock) */
	bool added;                       /* in d->members[idx] */
	uint32_t idx;                     /* its bit in slot masks, once added */
	enum dlv_member_state state;
	uint64_t held;                    /* bit s: slot s published to it, not released */
	uint64_t releases;                /* releases it made, plus one each time it began
					   * holding: what the detach timer watches */
	/* the detach timer's own (dlv_detach_idle, loop thread, its clock) */
	bool watched;                     /* the timer has looked at it */
	uint64_t seen_releases;           /* releases at the timer's last change seen */
	uint64_t quiet_since;             /* the timer's time of that change */
	uint64_t ready_head;              /* our copy of ctl->ready_head */
	uint64_t rel_tail;                /* private: never read from rel */
	bool pending;                     /* entries pushed, not yet published */
	uint64_t start_epoch, start_index;
	/* a group member resumed from its own token (dlv_member_resume_at):
	 * the group's batches before (from_epoch, from_position) are not its
	 * own and go past it; the first it receives must start there, or
	 * at the next epoch when its token was taken at its epoch's end */
	bool from_set;                    /* resumed: skipping until its position */
	uint64_t from_epoch, from_position;
	uint64_t batches, samples, bytes, bad_releases;
	int error;
	char error_msg[256];
};

struct dlv {
	pthread_mutex_t lock;      /* guards everything below marked (lock) */
	_Atomic int refs;          /* the loop's + one per job in flight */
	_Atomic bool closed_flag;  /* closing, readable without the lock */
	const struct fmt_dataset *ds;
	struct mixture *mix;       /* a mixture's blend (owned, immutable), or NULL */
	const struct fmt_dataset *srcs[MIXT_MAX_SOURCES]; /* its sources' datasets */
	uint32_t mix_field;        /* the out field `source` */
	struct bld_row *rows;      /* a mixture: batch rows per slot, each the
				    * job's of that slot while it builds */
	/* a packed mixture (mixt_packed()): its sources' streams, and the walk
	 * that starts each batch's (lock), in the order batches are handed out;
	 * a plain stream's join job walks it to the first batch before
	 * dlv_start(), unlocked (mix_prime(), dlv_regions.c) */
	struct pks_spec mpk_spec[MIXT_MAX_SOURCES];
	struct mixt_walk mwalk;
	struct pipe_plan *plan;    /* our copy: the request that made it is gone */
	void (*on_free)(void *arg);/* spec->on_free, called when we are gone */
	void *on_free_arg;
	struct slot_layout lay;    /* immutable */
	uint64_t seed;
	bool group;                /* several members: see dlv_spec */
	uint32_t on_error;         /* enum bld_on_error */
	const struct bld_limits *limits; /* spec's: each job's snapshot (builder.h) */
	uint64_t max_bad;          /* skip: replaced samples an epoch, at most */
	struct cache *cache;
	struct dlv_runner run;     /* where its jobs go (delivery.h) */
	struct pool_source *src;   /* our fair share of the workers: one for
				    * every member (a group counts once) */
	/* published, for status and metrics (dlv_counters): relaxed atomics,
	 * counts for people and tests that order no other memory */
	_Atomic uint64_t pub_batches, pub_samples, pub_bytes;
	uint8_t *hdrs;             /* the slot headers as built, copied to each
				    * member at publish (nslots * slot_hdr_bytes) */

	/* the data region, made once by the first join's job with no lock
	 * held (a region of gigabytes, a device's allocations); data_mu (a
	 * leaf, never held with d->lock) guards data_state, and a later join
	 * waits on data_cv until it is 2; immutable afterwards */
	pthread_mutex_t data_mu;
	pthread_cond_t data_cv;
	int data_state;            /* 0 not begun, 1 being made, 2 made (or failed) */
	int data_rc;
	struct feed_err data_err;
	struct region data;
	struct dsl *dev;           /* device slots (CUDA IPC), or NULL: made on
				    * the device with the data region, NULL from
				    * there (dev_err says why) if that fails */
	const struct dlv_dev_ops *dev_ops; /* drives dev_own (delivery.h) */
	struct dsl *dev_own;       /* the planned device slots, or NULL: ours,
				    * immutable, freed with us (dlv_close may
				    * abandon them while a join makes them) */
	struct feed_err dev_err;

	/* (lock) */
	struct sched sched;
	struct slot_info slots[DLV_MAX_CREDITS];
	struct dlv_job jobs[DLV_MAX_CREDITS]; /* job i builds slot i */
	uint32_t free_slots[DLV_MAX_CREDITS];
	uint32_t nfree;
	struct dlv_job *seq_job[DLV_MAX_CREDITS]; /* by seq % nslots */
	uint64_t sched_seq, pub_seq;      /* next to schedule / to publish */
	struct dlv_member *members[DLV_MAX_MEMBERS]; /* added, not yet left */
	uint32_t nmembers;
	struct dlv_member *solo;          /* a plain stream's member: freed with us, so
					   * a worker may ring it after the lock */
	bool want_recheck;                /* daemon_waiting was set */
	bool started;
	bool closing;
	int error;
	char error_msg[256];
	/* A batch that failed to build ends the delivery only once every batch
	 * before it is published: the members get those first, in order. */
	int fail_code;                    /* 0, or the earliest failed batch's error */
	uint64_t fail_seq;                /* its publication order */
	char fail_msg[FEED_ERR_MSG_MAX];
	/* samples replaced (skip) in the epoch being published, counted in
	 * publication order so the stop past max_bad is the same batch on
	 * every run (from where the stream started) */
	uint64_t bad_epoch;               /* the epoch bad_count counts */
	uint64_t bad_count;
	char bad_what[FEED_ERR_MSG_MAX];  /* what failed in it, cut */
	struct dlv_stats st;
	/* an order table being built (sched_table_want): one at a time */
	struct pool_job table_job;
	uint64_t table_epoch;             /* (lock) set before it is submitted */
	struct pool_job free_job;         /* the last teardown, on a worker */
#ifdef FEEDD_TEST_SEAMS
	uint64_t *seam_blocks;     /* FEEDD_TEST_ORDER_BLOCKS's block table, or NULL */
#endif
};


/* ---- lifetime (dlv_life.c) ---- */

void dlv_member_free(struct dlv_member *m);
void dlv_submit(struct dlv *d, struct pool_job *job);
void dlv_unref(struct dlv *d, bool on_worker);

/* ---- member rings and publishing (dlv_publish.c) ---- */

struct feed_shm_slot *dlv_slot_header(struct dlv *d, uint32_t slot);
void dlv_ring_push(struct dlv_member *m, uint64_t entry);
void dlv_ring_wake(struct dlv_member *m);
void dlv_ring_publish(struct dlv_member *m, bool *defer_wake);
void dlv_member_fail_locked(struct dlv_member *m, int code, const char *msg,
			enum dlv_member_state state);
void dlv_member_drop_locked(struct dlv *d, struct dlv_member *m, uint32_t s);
void dlv_member_drop_all_locked(struct dlv *d, struct dlv_member *m);
uint64_t dlv_stride_of(const struct dlv *d);
bool dlv_resume_point_locked(struct dlv *d, uint64_t fe, uint64_t fp, uint64_t epoch,
			 uint64_t pos);
void dlv_publish_ready_locked(struct dlv *d, bool *defer_wake);
void dlv_reclaim_locked(struct dlv *d);

/* ---- scheduling (dlv_sched.c) ---- */

void dlv_submit_all(struct dlv *d, struct pool_job *list);
struct pool_job *dlv_advance_locked(struct dlv *d);
void dlv_advance(struct dlv *d);

#endif
