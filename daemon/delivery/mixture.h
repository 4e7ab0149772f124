/*
 * mixture.h: one stream over several datasets (DESIGN.md "Mixtures"): which
 * source each row of the mixture comes from, and which sample of that
 * source it reads. Pure: no thread, no lock, no I/O; a mixture is
 * immutable once made, so a worker resolving a batch's rows and the loop
 * reading it need nothing between them.
 *
 * The blend: weights become integer units u[s] of a period P = sum(u)
 * (P <= MIXT_PERIOD_MAX, exact for weights with a common denominator that
 * small, else rounded to units of 1/P). Row r of a period goes to the
 * source furthest below its share, u[s] * (r + 1) - P * c[s] largest (c[s]
 * its rows so far, ties to the lowest index: Megatron's deterministic
 * blend, in integers so that every machine agrees). Each source then holds
 * exactly u[s] rows of every period and never strays a row from its share
 * inside one, so the pattern repeats: row g is a table lookup (O(1)), and
 * the rows each source gave before g are O(1) too (mixt_counts walks at
 * most one period, O(P * sources), at an open only).
 *
 * Rows are counted from base_row, where each source had given base[s] rows
 * (0 for a new stream; a resume token under other weights sets them: the
 * new shares run from there). A source's k-th row (k counts from its
 * first row ever) is row j = k % epoch of its own epoch k / epoch, whose
 * rows come from passes over the dataset, each a fresh order (core/order.h
 * keyed by source epoch and pass): a source that runs out starts its next
 * epoch, reshuffled.
 */
#ifndef FEEDD_MIXTURE_H
#define FEEDD_MIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"
#include "order.h"
#include "pack_stream.h"

struct fmt_dataset;

#define MIXT_MAX_SOURCES 8          /* what a resume token of FEED_RESUME_MAX holds */
#define MIXT_PERIOD_MAX 65536u      /* finest share: 1 / 65536 */
_Static_assert(MIXT_MAX_SOURCES <= PKS_STREAMS_MAX, "a worker keeps a stream per source");

/* One source as the session resolved it. */
struct mixt_source {
	const struct fmt_dataset *ds; /* borrowed: lives as long as the mixture */
	char name[64];              /* for messages */
	uint64_t n;                 /* its samples, >= 1 */
	char version[17];           /* its dataset version */
	double weight;              /* >= 0, finite */
	uint64_t epoch_rows;        /* its epoch: choose, or repeat * n (>= 1) */
	uint64_t base;              /* rows it gave before base_row */
	/* packing (concat or pack; mode PK_MODE_NONE: samples): its rows, cut
	 * from its own documents over its own passes (core/pack_stream.h);
	 * n is then its rows per pass (concat), or their least (pack: every
	 * row full), and epoch_rows counts rows */
	struct pk_source rows;
};

struct mixt_spec {
	uint32_t nsrc;              /* 1 .. MIXT_MAX_SOURCES */
	struct mixt_source src[MIXT_MAX_SOURCES];
	uint64_t seed;              /* the stream's: each source's order */
	bool shuffle;               /* full permutations, else sequential passes */
	uint64_t base_row;          /* where base[] holds */
};

struct mixture {
	struct mixt_spec spec;
	uint32_t units[MIXT_MAX_SOURCES];
	uint32_t period;            /* sum of units */
	uint64_t passes[MIXT_MAX_SOURCES]; /* ceil(epoch_rows / n) */
	uint8_t *pick;              /* [period]: the source of row r of a period */
	uint32_t *rank;             /* [period]: that source's rows before r in it */
};

/* Weights into integer units summing to *ret_period <= MIXT_PERIOD_MAX: the
 * smallest period that holds every share within 1e-9, else
 * MIXT_PERIOD_MAX with the largest remainders rounded up (a weight above 0
 * keeps at least one unit, taken from the largest). -EINVAL naming
 * the source for a weight that is negative or not finite, or when none is
 * above 0. */
int mixt_units(const double *w, uint32_t n, uint32_t *ret_units, uint32_t *ret_period,
	       struct feed_err *err);

/* Rows each source gives among rows [0, r) after a base, with units u[]
 * (n sources): the blend walked over r % period rows. O(period * n). */
void mixt_blend_counts(const uint32_t *u, uint32_t n, uint64_t r, uint64_t *ret);

/* Makes the mixture of spec (copied), its period table included. 0, or
 * -EINVAL naming the bad weight, -ENOMEM. Free with mixt_free(). */
int mixt_new(const struct mixt_spec *spec, struct mixture **ret, struct feed_err *err);
void mixt_free(struct mixture *m);

/* The source of mixture row g (>= base_row) and, in *ret_k, its row count
 * before g (base included): the source's k-th row. O(1). */
uint32_t mixt_row(const struct mixture *m, uint64_t g, uint64_t *ret_k);

/* Rows every source gave before mixture row g (>= base_row), base
 * included. O(period * sources). */
void mixt_counts(const struct mixture *m, uint64_t g, uint64_t *ret);

/* A source's order cache for mixt_sample (one epoch layout per source):
 * zero it before first use, mixt_cursor_fini() after. */
struct mixt_cursor {
	bool valid[MIXT_MAX_SOURCES];
	uint64_t key[MIXT_MAX_SOURCES];
	struct ord_epoch ord[MIXT_MAX_SOURCES];
};

/* The sample of source s that its k-th row reads. -EINVAL (err) when its
 * order cannot be laid out (which a made mixture's never is). */
int mixt_sample(const struct mixture *m, struct mixt_cursor *c, uint32_t s, uint64_t k,
		uint64_t *ret_sample, struct feed_err *err);
void mixt_cursor_fini(struct mixt_cursor *c);

/* Packed mixtures (every source's rows.spec.mode is concat or pack): a
 * source's k-th row is the k-th row of its pack stream (pack_stream.h),
 * whose source epoch is epoch_rows rows under concat (choose, repeat) and
 * one pass under pack. */
bool mixt_packed(const struct mixture *m);
void mixt_pks_spec(const struct mixture *m, uint32_t s, struct pks_spec *ret);

/* Each source walked along the mixture's rows (the delivery's, under its
 * lock): zero it before first use, mixt_walk_fini() after. */
struct mixt_walk {
	bool valid;                 /* k holds the counts before row g */
	uint64_t g;
	uint64_t k[MIXT_MAX_SOURCES];
	struct pks_stream st[MIXT_MAX_SOURCES];
	struct pks_pos pos[MIXT_MAX_SOURCES];
};

/* Where each source's first row at or after mixture row g (>= base_row)
 * stands, into ret[nsrc]: its rows before g. Moves w forward from where
 * it stood (O(rows between) for the blend, the lengths of the documents
 * passed; pack places the windows it passes), or from the sources'
 * starts when g is behind it. 0, or -ENOMEM / -EINVAL (err). */
int mixt_walk_to(struct mixt_walk *w, const struct mixture *m, uint64_t g, struct pks_pos *ret,
		 struct feed_err *err);
void mixt_walk_fini(struct mixt_walk *w);

#endif
