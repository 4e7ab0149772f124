/*
 * schedule.h: the positions a stream delivers, in order: (epoch, batch) after
 * (epoch, batch), each with its order (core/order.h) and sample count. Knows
 * no slots, no regions and no threads.
 *
 * Not thread-safe: the owner (delivery) calls it under its own lock. Two
 * epochs' orders are alive at once (the one being finished and the next);
 * a third waits (-EAGAIN) until every batch of the oldest is done.
 *
 * Every call is O(1) (O(levels) for node order): nothing here walks the
 * dataset. A block-window epoch's position table (core/order.h, O(nblocks)
 * to build) is built by the owner outside its lock, on a worker, when
 * sched_table_want() asks for it, one epoch ahead of the positions handed
 * out, and given back with sched_table_put(); sched_next() waits (-EAGAIN)
 * for an epoch whose table has not come. Tables the schedule is done with
 * go back to the owner through sched_table_put() too, to be freed outside
 * the lock (freeing nblocks * 8 bytes unmaps them).
 *
 * Batch indices are true: a stream resumed at batch 37 of an epoch
 * delivers index 37 first, and batches_per_epoch counts the whole epoch.
 * When the resume position is not a batch boundary of this stream's layout
 * (a token taken with another world size or batch size), the rest of the
 * epoch is laid out from that position and indices count on from the batch
 * the position falls in.
 */
#ifndef FEEDD_SCHEDULE_H
#define FEEDD_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"
#include "order.h"
#include "packing.h"

/* Epochs are numbered below this: a stream starts before it (and never
 * runs the 2^63 epochs it would take to wrap its count). */
#define SCHED_EPOCH_MAX ((uint64_t)1 << 63)

/* What a stream asks for. */
struct sched_spec {
	struct ord_spec ord;       /* order and partition; block_first borrowed from
				    * the catalog, which outlives every stream */
	uint64_t epochs;           /* deliver epochs < epochs; 0 = no end */
	uint64_t start_epoch;      /* first position delivered */
	uint64_t start_batch;      /* with !at_position */
	bool at_position;          /* resume token: start at global position */
	uint64_t start_position;   /* with at_position */
	/* node order, with at_position: the token's node count and its
	 * epoch's earlier layouts (core/order.h "Node order") */
	uint32_t start_nodes;
	uint32_t nlevels;
	struct ord_level levels[ORD_MAX_LEVELS];
	/* packing (rows.spec.mode): ord's positions are rows (ord is
	 * sequential; concat: n = rows per epoch; pack: n bounds them, ord is
	 * laid out as eval, and the epoch ends at the last full batch of the
	 * world that its rows fill, found by walking ahead) cut from rows'
	 * documents; each position carries the cursor at its first row */
	struct pk_source rows;
};

/* One batch to build. */
struct sched_pos {
	uint64_t epoch;
	uint64_t index;            /* true batch index in the epoch (see above) */
	uint64_t batch;            /* batch in ord's layout, for the ord_*() queries */
	const struct ord_epoch *ord; /* valid until sched_done() of this position */
	uint32_t nsamples;
	bool last_of_epoch;        /* an EPOCH_END follows it */
	bool last_of_stream;       /* a STREAM_END follows it */
	struct pk_cursor pk;       /* packing: the cursor at the batch's first row */
};

struct sched_epoch {
	bool valid;
	uint64_t epoch;
	uint64_t base;             /* index of the layout's batch 0 */
	uint32_t inflight;         /* positions handed out, not yet done */
	struct ord_epoch ord;
};

/* Tables a sched_table_put() may give back at most. */
#define SCHED_TABLES_FREED 4

struct sched {
	struct sched_spec spec;    /* immutable after sched_init(): a table job
				    * reads spec.ord without the owner's lock */
	uint64_t next_epoch, next_batch; /* next position (batch in its layout) */
	bool done;                 /* every position handed out */
	bool empty;                /* nothing to deliver at all: only STREAM_END */
	uint64_t first_epoch;      /* the first position delivered */
	uint64_t first_index;
	/* resumed at a position: where the start epoch's positions count
	 * from, and node order's layouts of it (sched_resume_layout()) */
	uint64_t resume_from;
	uint32_t resume_nlevels;
	struct ord_level resume_levels[ORD_MAX_LEVELS];
	struct sched_epoch ep[2];  /* by epoch & 1 */
	/* block-window position tables (order.h "Position table") */
	bool building;             /* sched_table_want() asked for one, not put yet */
	uint64_t *ahead;           /* built for epoch ahead_epoch, not made yet */
	uint64_t ahead_epoch;
	int table_rc;              /* a build failed: its error, for table_err_epoch */
	uint64_t table_err_epoch;
	char table_msg[FEED_ERR_MSG_MAX];
	uint64_t *retired[SCHED_TABLES_FREED]; /* epochs' tables done with */
	uint32_t nretired;
	/* packing: the cursor of the last position handed out, and its
	 * epoch's document order */
	bool pk_valid;
	uint64_t pk_epoch;
	struct ord_epoch pk_order;
	struct pk_docs pk_docs;
	struct pk_cursor pk_cur;
	/* pack: the main cursor's window, and a cursor walked ahead (with its
	 * own window) to find the epoch's end one batch early */
	struct pk_window pk_win, pk_win_ahead;
	struct pk_cursor pk_ahead;
};

/* Lays out the start epoch (without its table) and checks the start
 * position (its epoch below SCHED_EPOCH_MAX). A resume position at an
 * epoch's end starts the next epoch (no END_OF_EPOCH first: the token was
 * taken once that epoch was done); past the last epoch asked for, the
 * stream is empty. Returns 0 or -EINVAL naming the parameter
 * (e.g. an epoch with no batch for this rank), -ENOMEM. On failure
 * sched_fini() is still safe. */
int sched_init(struct sched *s, const struct sched_spec *spec, struct feed_err *err);
void sched_fini(struct sched *s);

/* The next position. With packing, its cursor too: the walk from the
 * last position reads the lengths of the documents between (a resumed or
 * wrapped-around position walks from its epoch's start once). Returns 0; -EAGAIN when the next epoch must wait for
 * the oldest one's positions to be done, or for its position table
 * (sched_table_want()); -ENODATA when every position was handed out;
 * -ENOMEM or -EINVAL naming what failed to build an epoch. */
int sched_next(struct sched *s, struct sched_pos *ret, struct feed_err *err);

/* The epoch and true index of the position sched_next() would hand out
 * next (where a group's late joiner starts when nothing is in flight).
 * False when every position was handed out. */
bool sched_peek(const struct sched *s, uint64_t *ret_epoch, uint64_t *ret_index);

/* Like sched_peek(), with the global position of that batch's first
 * sample (ord_position_of(); an epoch not made yet starts at 0). */
bool sched_peek_position(const struct sched *s, uint64_t *ret_epoch, uint64_t *ret_position);

/* The global row (epoch * ord.n + the rank's global position) of the
 * first sample of the position sched_next() would hand out next, when its
 * epoch is laid out (a started or resumed one); false otherwise. */
bool sched_peek_row(const struct sched *s, uint64_t *ret_g);

/* Whether a block-window position table should be built now, and for
 * which epoch (*ret_epoch): the next position's epoch when it has none,
 * else the one after it (ahead), unless past the stream's last epoch, a
 * build is out already (one at a time) or one failed. True marks it out:
 * the owner builds it (ord_table_build(&s->spec.ord, epoch), off its lock)
 * and puts it. */
bool sched_table_want(struct sched *s, uint64_t *ret_epoch);

/* The table asked for epoch `epoch`: t from ord_table_build(), or NULL
 * with rc its error and msg (sched_next() returns them when that epoch
 * comes), or NULL with rc 0 when the owner gave up (closing). The schedule
 * takes t, and writes the tables it no longer needs into ret_free (at most
 * SCHED_TABLES_FREED; the count is returned) for the caller to free once
 * its lock is dropped. */
uint32_t sched_table_put(struct sched *s, uint64_t epoch, uint64_t *t, int rc, const char *msg,
			 uint64_t *ret_free[SCHED_TABLES_FREED]);

/* A position from sched_next() was built or abandoned. */
void sched_done(struct sched *s, const struct sched_pos *p);

/* Batches of the start epoch (true count: a resumed epoch counts its
 * batches before the start too), the start epoch and its first index. */
uint64_t sched_batches_per_epoch(const struct sched *s);
uint64_t sched_start_epoch(const struct sched *s);
uint64_t sched_start_index(const struct sched *s);
/* Resumed at a position: where positions count from in the start epoch
 * (node order laid out again from the token's position: 0), and node
 * order's layouts of that epoch into lv (ORD_MAX_LEVELS), their count
 * into *ret_n. The one place this is decided: the open reply carries it
 * to the client (feed.proto StreamOpened.resume_*). */
uint64_t sched_resume_layout(const struct sched *s, struct ord_level *lv, uint32_t *ret_n);

/* True when the stream has nothing to deliver (a token taken after the
 * last epoch's last batch): its only entry is STREAM_END. */
bool sched_empty(const struct sched *s);

#endif
