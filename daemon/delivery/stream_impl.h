/*
 * stream_impl.h: the inside of struct stream, shared by stream.c (delivery)
 * and batch.c (order and building). Not for other modules.
 */
#ifndef FEED_STREAM_IMPL_H
#define FEED_STREAM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "order.h"
#include "pipeline.h"
#include "pool.h"
#include "region.h"
#include "feed_shm.h"
#include "stream.h"

enum slot_state {
	SLOT_FREE = 0,   /* in free_slots */
	SLOT_BUILDING,   /* a worker writes it */
	SLOT_CLIENT,     /* published: the client's until released */
};

struct slot_info {
	enum slot_state state;
	uint32_t gen;        /* bumped at each build; releases must match */
};

/* One batch being built: one per slot, reused (no allocation per batch). */
struct stream_job {
	struct pool_job base;      /* first: the pool hands this back */
	struct stream *stream;
	uint32_t slot;
	uint64_t seq;              /* publication order */
	uint64_t epoch, batch;     /* position */
	struct ord_epoch *ep;      /* the epoch's order (batch.c) */
	uint32_t nsamples;
	uint64_t bytes;            /* field bytes written */
	bool built;                /* finished, waiting for its turn (lock) */
	bool last_of_epoch;
	bool last_of_stream;
};

/* Order state of one epoch, two alive at once (batch.c). */
struct stream_epoch {
	bool valid;
	uint64_t epoch;
	uint32_t inflight;         /* jobs of this epoch not yet done (lock) */
	struct ord_epoch ord;
};

struct stream {
	pthread_mutex_t lock;      /* guards everything below marked (lock) */
	_Atomic int refs;          /* loop's + one per job in flight */
	_Atomic bool closed_flag;  /* closing, readable without the lock */
	const struct fmt_dataset *ds;
	const struct pipe_plan *plan;     /* = plan_own */
	struct pipe_plan *plan_own;       /* our copy: the stream may outlive the request */
	struct stream_spec spec;
	struct cache *cache;
	struct pool *pool;

	/* layout (immutable after stream_new) */
	uint32_t nslots, ring_cap, rel_cap;
	uint64_t slot_bytes, slot_hdr_bytes, ring_off, slots_off, rel_off;
	uint64_t ctl_bytes, data_bytes, rel_bytes;
	uint64_t field_off[FEED_SHM_MAX_FIELDS]; /* in a data slot */
	uint64_t var_off[FEED_SHM_MAX_FIELDS];   /* ends table in a slot header */
	struct region ctl, data, rel;
	int ready_efd, release_efd;
	uint64_t *ready_ring;             /* in ctl */
	_Atomic uint64_t *rel_ring;       /* in rel: untrusted */

	/* delivery (lock) */
	struct slot_info *slots;
	struct stream_job *jobs;          /* [nslots], job i builds slot i */
	uint32_t free_slots[STREAM_MAX_CREDITS];
	uint32_t nfree;
	struct stream_job *seq_job[STREAM_MAX_CREDITS]; /* by seq % nslots */
	uint64_t sched_seq, pub_seq;      /* next to schedule / to publish */
	uint64_t ready_head;              /* our copy of ctl->ready_head */
	uint64_t rel_tail;                /* private: never read from rel */
	bool want_recheck;                /* daemon_waiting was set */
	bool closing;
	int error;
	struct stream_stats st;

	/* schedule (lock; batch.c) */
	uint64_t next_epoch, next_batch;  /* next position to schedule */
	bool sched_done;
	/* a resume token taken after an epoch's last batch: the epoch's end
	 * (and the stream's, if it was the last) is published first */
	bool lead_epoch_end, lead_stream_end;
	uint64_t lead_epoch;
	struct stream_epoch ep[2];        /* by epoch & 1 */
	uint64_t *block_first;            /* block-window table, or NULL */
};

void stream_unref(struct stream *s);
struct feed_shm_slot *stream_slot_header(struct stream *s, uint32_t slot);
void stream_fail_locked(struct stream *s, int code, const char *msg);

#endif
