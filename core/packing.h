/*
 * packing.h: rows of a token-document dataset (DESIGN.md "Packing"): the
 * pipeline ops concat(seq_len=L) and pack(seq_len=L, pad_id=P, window=W)
 * as a cursor over an epoch's documents, and the fields of one row.
 *
 * The documents of an epoch come in an order (a struct ord_epoch over the
 * dataset's documents: ord_permute(pos) is the document at position pos)
 * with their lengths (format's lengths.u32, 4 bytes per document, read at
 * open: no index pass). A cursor (struct pk_cursor, three integers) says
 * where the epoch's row stream stands; it moves forward only, reading
 * lengths, never tokens. A mixture drives one cursor per source.
 *
 *   concat  The documents in epoch order form one token stream; row r's
 *           input_ids are stream tokens [rL, rL + L) and its labels
 *           [rL + 1, rL + L + 1) (Megatron's windows of L + 1 overlapping by
 *           one). An epoch holds floor((T - 1) / L) rows (T tokens in all):
 *           only the last partial row is lost.
 *   pack    Windows of W consecutive documents of the order; each window's
 *           documents, cut into pieces of at most L tokens, are placed by
 *           best-fit decreasing (longest piece first, ties by position in
 *           the order then by piece; each into the open row with the least
 *           room that holds it, ties to the older row; else a new row).
 *           Rows come window after window, each window's in the order they
 *           were opened, pieces in a row in placement order, padding
 *           (pad_id) at the end. labels: the document's next token, -100 at
 *           a document's last token and at padding. The row count of an
 *           epoch is known only once its last window is packed.
 * Both: position_ids restart at 0 at the row's start and at each document
 * start (padding counts as one more run), document_ids hold the document's
 * index in the dataset (-1 for padding), and a row's segments (maximal runs
 * of one document, padding one more) give cu_seqlens.
 *
 * Threads: pure functions; a struct pk_window belongs to one thread.
 * Allocation: pk_window only (grown to the largest window seen).
 * Never: touch a block, print, keep state beyond the caller's structs.
 */
#ifndef FEED_PACKING_H
#define FEED_PACKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"
#include "order.h"

#define PK_SEQ_LEN_MAX (1u << 20)   /* largest seq_len */
#define PK_WINDOW_MAX (1u << 20)    /* largest pack window */
#define PK_WINDOW_DEFAULT 1000u
#define PK_LABEL_IGNORE (-100)      /* labels at padding (torch's ignore_index) */
#define PK_DOC_PAD UINT64_MAX       /* a segment of padding */

enum pk_mode {
	PK_MODE_NONE = 0,
	PK_MODE_CONCAT = 1,
	PK_MODE_PACK = 2,
};

/* What the pipeline asked for (pipeline.h's concat / pack op). */
struct pk_spec {
	enum pk_mode mode;
	uint32_t seq_len;          /* L, 1 .. PK_SEQ_LEN_MAX */
	uint32_t pad_id;           /* pack: the padding token */
	uint32_t window;           /* pack: documents per window, 1 .. PK_WINDOW_MAX */
};

/* An epoch's documents. Borrowed; immutable while rows are made. */
struct pk_docs {
	const uint32_t *lens;      /* lens[i]: tokens of dataset document i */
	uint64_t n;                /* documents */
	uint64_t total;            /* sum of lens */
	const struct ord_epoch *order; /* the epoch's document order (ord_permute) */
};

/* What a stream (or one source of a mixture) packs: the spec, its
 * dataset's documents and the order spec of their epochs. The daemon
 * keeps one per stream; each epoch's order is made from it in O(1). */
struct pk_source {
	struct pk_spec spec;       /* mode PK_MODE_NONE: not packing */
	struct ord_spec doc_ord;   /* n = documents, rank 0 of world 1, batch 1 */
	const uint32_t *lens;      /* borrowed: the dataset's lengths */
	uint64_t total;            /* their sum */
};

/* Fills *src for packing ds's n documents (lens, total) with spec, their
 * order keyed by (version, seed) and shuffled unless mode is
 * ORD_SEQUENTIAL (or eval). -EINVAL naming seq_len when a concat epoch
 * would have no row. */
int pk_source_init(struct pk_source *src, const struct pk_spec *spec, const uint32_t *lens,
		   uint64_t n, uint64_t total, const char *version, uint64_t seed,
		   enum ord_mode mode, struct feed_err *err);

/* True when a and b place the same rows: the same spec, documents
 * (dataset version, count, tokens) and order (seed, mode). A window
 * placed for one serves the other. */
bool pk_source_same(const struct pk_source *a, const struct pk_source *b);

/* Epoch `epoch` of src: its document order into *order (the caller's:
 * ord_epoch_fini() it) and *ret_docs pointing at it. O(1). */
int pk_source_epoch(const struct pk_source *src, uint64_t epoch, struct ord_epoch *order,
		    struct pk_docs *ret_docs, struct feed_err *err);

/* A run of tokens of one document inside a row. */
struct pk_seg {
	uint64_t doc;              /* dataset document, PK_DOC_PAD for padding */
	uint64_t start;            /* first token within the document */
	uint32_t len;              /* tokens in the row */
	uint32_t at;               /* where in the row the run starts */
};

/* Where an epoch's row stream stands: O(1) state, what a resume token or a
 * mixture keeps per source. Zeroed = the epoch's first row. */
struct pk_cursor {
	uint64_t row;              /* rows of the epoch before this point */
	uint64_t pos;              /* concat: position in the document order;
				    * pack: window */
	uint64_t off;              /* concat: tokens of that document already
				    * consumed; pack: row within the window */
};

/* pack: one window placed (best-fit decreasing). Owned by the caller:
 * zero it, pk_window_free() it. */
struct pk_window {
	uint64_t index;            /* which window (UINT64_MAX: none yet) */
	uint32_t seq_len, nrows;
	struct pk_seg *segs;       /* every row's pieces, row after row */
	uint32_t *row_first;       /* nrows + 1 offsets into segs */
	uint32_t *room;            /* per row: tokens still free (while placing) */
	uint64_t nsegs, cap_segs, cap_rows;
	struct pk_seg *items;      /* pieces being sorted (cap_segs) */
	uint32_t *rowof;           /* per piece placed: its row (cap_segs) */
};

/* Rows of a concat epoch: floor((total - 1) / seq_len), 0 when empty. */
uint64_t pk_concat_rows(const struct pk_docs *d, uint32_t seq_len);

/* Moves c forward to row `row` of a concat epoch (c->row <= row, else it
 * starts over from the epoch's start): reads the lengths of the documents
 * passed, O(documents skipped). */
void pk_concat_seek(const struct pk_docs *d, uint32_t seq_len, struct pk_cursor *c,
		    uint64_t row);

/* The segments of c's row (c->row < pk_concat_rows(); asserted): L + 1
 * tokens (the last one a label only, at = L), at most L + 1 segments into
 * segs; returns how many. Moves c to the next row. */
uint32_t pk_concat_row(const struct pk_docs *d, uint32_t seq_len, struct pk_cursor *c,
		       struct pk_seg *segs);

/* Places window `index` of spec's pack into w (a no-op when w holds it
 * already). -ENOMEM; -EINVAL past the epoch's last window. */
int pk_window_place(const struct pk_docs *d, const struct pk_spec *spec, uint64_t index,
		    struct pk_window *w);
void pk_window_free(struct pk_window *w);

/* pack: moves c forward to row `row` (c->row <= row, else it starts over),
 * placing the windows passed in w. Returns 1 when the epoch has that row
 * (c at it), 0 when it ends before (c at the end, c->row the epoch's row
 * count), -ENOMEM. O(windows passed). */
int pk_pack_seek(const struct pk_docs *d, const struct pk_spec *spec, struct pk_cursor *c,
		 struct pk_window *w, uint64_t row);

/* pack: the segments of c's row into segs (room for seq_len + 1;
 * padding last) and c moved on. Returns the count, 0 at the epoch's end
 * (c stays), or -ENOMEM. Uses (and may replace) w's window. */
int pk_pack_row(const struct pk_docs *d, const struct pk_spec *spec, struct pk_cursor *c,
		struct pk_window *w, struct pk_seg *segs);

/* Scratch a row needs (pk_scratch_split()): ids and tmp of seq_len + 1
 * tokens, segments for seq_len + 2, 64-byte aligned each. */
size_t pk_scratch_bytes(uint32_t seq_len);

/* Cuts scratch (pk_scratch_bytes(seq_len), 64-byte aligned) into the
 * three arrays a row uses. */
void pk_scratch_split(void *scratch, uint32_t seq_len, uint32_t **ret_ids, uint32_t **ret_tmp,
		      struct pk_seg **ret_segs);

/* One row's fields, written by pk_row_fill(). Arrays of seq_len. */
struct pk_row_out {
	int64_t *labels;
	int64_t *position_ids;
	int64_t *document_ids;
	int32_t *cu;               /* segment starts, plus base (may be NULL) */
	int32_t cu_base;           /* added to every segment start (row * L) */
	uint32_t ncu;              /* written: entries of cu */
};

/* The tokens of a document: n tokens from `start` of document `doc` into
 * dst. 0 or a negative errno with err naming what failed. */
typedef int (*pk_fetch_fn)(void *ctx, uint64_t doc, uint64_t start, uint32_t n, uint32_t *dst,
			   struct feed_err *err);

/* Fills a row from its segments: ids[0 .. L) (the input ids, as u32),
 * labels, position and document ids and segment starts. tmp has room for
 * seq_len + 1 tokens. concat: the label of position j is token j + 1 of
 * the segments; pack: the next token of the same document (fetched past
 * the segment when the document goes on), -100 at a document's end and at
 * padding. */
int pk_row_fill(const struct pk_spec *spec, const struct pk_docs *d, const struct pk_seg *segs,
		uint32_t nseg, pk_fetch_fn fetch, void *ctx, uint32_t *ids, uint32_t *tmp,
		struct pk_row_out *out, struct feed_err *err);

#endif
