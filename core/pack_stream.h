/*
 * pack_stream.h: one packed source's rows over its passes, as a mixture
 * reads a source under concat or pack (DESIGN.md "Mixtures", "Packing").
 * Pass p is the source's documents in the order of pk_source_epoch(src, p)
 * (each pass reshuffled), its rows cut as packing.h cuts an epoch's; the
 * stream's k-th row (k counted from its first row ever) is a row of one
 * pass, and the passes follow one another without a gap.
 *
 * A position (struct pks_pos) is O(1) state: k, the pass and the pass's
 * cursor. concat knows its rows per pass (R = pk_concat_rows()), so row k
 * is found in O(1) plus the lengths walked inside its pass; with a cap
 * (a source epoch of `cap` rows: Mosaic's choose or repeat counted in
 * rows) each source epoch is ceil(cap / R) passes, the last cut short at
 * the cap. pack learns a pass's rows only by placing its windows, so a
 * position moves forward pass by pass (a seek from 0 to a row of pass p
 * places the windows of passes 0..p once); pack takes no cap.
 *
 * Threads: none of its own; a struct pks_stream belongs to one thread
 * (the delivery under its lock, or one worker).
 * Allocation: the stream's pack window only (grown to the largest window).
 * Never: read a token, print, keep state beyond the caller's structs.
 */
#ifndef FEED_PACK_STREAM_H
#define FEED_PACK_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"
#include "order.h"
#include "packing.h"

/* Most streams a worker keeps (one per source of a mixture). */
#define PKS_STREAMS_MAX 8

/* A source's packed rows: what the stream reads. Borrowed by the stream. */
struct pks_spec {
	const struct pk_source *src; /* its documents, order and spec (concat or pack) */
	uint64_t cap;               /* concat: rows of a source epoch (>= 1), 0: one pass */
};

/* Where a source's row stream stands: its k-th row is row c.row of pass
 * `pass` (c the pass's cursor). Zeroed: the stream's first row. */
struct pks_pos {
	uint64_t k;                 /* rows of the stream before this point */
	uint64_t pass;              /* pk_source_epoch()'s epoch */
	struct pk_cursor c;         /* inside the pass */
};

/* The pass being read and its pack window: a cache, any position may be
 * used with it. Zero it, pks_stream_fini() it. */
struct pks_stream {
	struct pk_source src;       /* a copy of the spec's (lens borrowed) */
	uint64_t cap;               /* the spec's */
	bool valid;                 /* ord, docs hold pass `pass` */
	uint64_t pass;
	struct ord_epoch ord;
	struct pk_docs docs;
	struct pk_window win;       /* pack: the last window placed in `pass` */
};

/* Checks that spec has a row in every pass (-EINVAL naming seq_len:
 * documents without a token; a cap with pack). */
int pks_spec_check(const struct pks_spec *spec, struct feed_err *err);

/* Points st at spec (a no-op when it reads the same rows already: its
 * window goes on serving). */
void pks_stream_use(struct pks_stream *st, const struct pks_spec *spec);
void pks_stream_fini(struct pks_stream *st);

/* Moves p to the stream's k-th row (forward from p, or from the stream's
 * start when k < p->k), so that the next pks_row() gives that row.
 * 0, -ENOMEM (a window), -EINVAL (err) when a pass cannot be laid out. */
int pks_seek(struct pks_stream *st, struct pks_pos *p, uint64_t k, struct feed_err *err);

/* The segments of p's row into segs (room for seq_len + 2), and p moved
 * to the next row; *ret_docs is the row's pass (valid until st moves to
 * another pass). Returns the segment count or a negative errno (err). */
int pks_row(struct pks_stream *st, struct pks_pos *p, struct pk_seg *segs,
	    const struct pk_docs **ret_docs, struct feed_err *err);

#endif
