/*
 * packing.c: concat and pack rows over an epoch's documents (packing.h).
 * Pure; caller's thread. The only allocation is a pack window's arrays.
 */
#include "packing.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the document at position pos of the epoch's order. */
static uint32_t doc_len_at(const struct pk_docs *d, uint64_t pos)
{
	return d->lens[ord_permute(d->order, pos)];
}

int pk_source_init(struct pk_source *src, const struct pk_spec *spec, const uint32_t *lens,
		   uint64_t n, uint64_t total, const char *version, uint64_t seed,
		   enum ord_mode mode, struct feed_err *err)
{
	memset(src, 0, sizeof(*src));
	if (spec->mode == PK_MODE_CONCAT && (total == 0 || (total - 1) / spec->seq_len == 0))
		return feed_err_set(err, -EINVAL, "concat(seq_len=%u): the dataset holds %llu "
				    "tokens, not one row of %u and its label", spec->seq_len,
				    (unsigned long long)total, spec->seq_len);
	src->spec = *spec;
	src->lens = lens;
	src->total = total;
	src->doc_ord = (struct ord_spec){.n = n, .seed = seed, .world = 1, .batch = 1,
					 .mode = mode == ORD_SEQUENTIAL ? ORD_SEQUENTIAL : ORD_FULL};
	snprintf(src->doc_ord.version, sizeof(src->doc_ord.version), "%s", version);
	return 0;
}

bool pk_source_same(const struct pk_source *a, const struct pk_source *b)
{
	return a->spec.mode == b->spec.mode && a->spec.seq_len == b->spec.seq_len &&
	       a->spec.pad_id == b->spec.pad_id && a->spec.window == b->spec.window &&
	       a->doc_ord.n == b->doc_ord.n && a->doc_ord.seed == b->doc_ord.seed &&
	       a->doc_ord.mode == b->doc_ord.mode && a->total == b->total &&
	       !strcmp(a->doc_ord.version, b->doc_ord.version);
}

int pk_source_epoch(const struct pk_source *src, uint64_t epoch, struct ord_epoch *order,
		    struct pk_docs *ret_docs, struct feed_err *err)
{
	int rc = ord_epoch_init(order, &src->doc_ord, epoch, err);

	if (rc < 0)
		return rc;
	*ret_docs = (struct pk_docs){.lens = src->lens, .n = src->doc_ord.n, .total = src->total,
				     .order = order};
	return 0;
}

uint64_t pk_concat_rows(const struct pk_docs *d, uint32_t seq_len)
{
	return d->total ? (d->total - 1) / seq_len : 0;
}

/* Moves (pos, off) forward by `skip` tokens; with segs, records the runs
 * passed (at from `at`) and counts them in *nseg. Lands on a token, never
 * at a document's end (empty documents are passed over). */
static void concat_walk(const struct pk_docs *d, uint64_t *pos, uint64_t *off, uint64_t skip,
			struct pk_seg *segs, uint32_t *nseg, uint32_t at)
{
	while (*pos < d->n) {
		uint32_t len = doc_len_at(d, *pos);
		uint64_t rem = len - *off;
		if (rem == 0) {
			(*pos)++, *off = 0;
			continue;
		}
		if (skip == 0)
			return;
		uint64_t take = skip < rem ? skip : rem;
		if (segs)
			segs[(*nseg)++] = (struct pk_seg){.doc = ord_permute(d->order, *pos),
							  .start = *off, .len = (uint32_t)take,
							  .at = at};
		at += (uint32_t)take;
		skip -= take;
		*off += take;
	}
}

void pk_concat_seek(const struct pk_docs *d, uint32_t seq_len, struct pk_cursor *c,
		    uint64_t row)
{
	if (row < c->row)
		*c = (struct pk_cursor){0};
	concat_walk(d, &c->pos, &c->off, (row - c->row) * seq_len, NULL, NULL, 0);
	c->row = row;
}

uint32_t pk_concat_row(const struct pk_docs *d, uint32_t seq_len, struct pk_cursor *c,
		       struct pk_seg *segs)
{
	uint64_t pos = c->pos, off = c->off;
	uint32_t n = 0;

	assert(c->row < pk_concat_rows(d, seq_len));
	concat_walk(d, &pos, &off, (uint64_t)seq_len + 1, segs, &n, 0);
	concat_walk(d, &c->pos, &c->off, seq_len, NULL, NULL, 0);
	c->row++;
	return n;
}

/* Longest piece first; then by position in the order, then by start. */
static int item_cmp(const void *a, const void *b)
{
	const struct pk_seg *x = a, *y = b;

	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int window_reserve(struct pk_window *w, uint64_t segs, uint64_t rows)
{
	if (segs > w->cap_segs) {
		struct pk_seg *a = realloc(w->segs, segs * sizeof(*a));
		if (a)
			w->segs = a;
		struct pk_seg *b = realloc(w->items, segs * sizeof(*b));
		if (b)
			w->items = b;
		uint32_t *r = realloc(w->rowof, segs * sizeof(*r));
		if (r)
			w->rowof = r;
		if (!a || !b || !r)
			return -ENOMEM;
		w->cap_segs = segs;
	}
	if (rows > w->cap_rows) {
		uint32_t *a = realloc(w->row_first, (rows + 1) * sizeof(*a));
		if (a)
			w->row_first = a;
		uint32_t *b = realloc(w->room, rows * sizeof(*b));
		if (b)
			w->room = b;
		if (!a || !b)
			return -ENOMEM;
		w->cap_rows = rows;
	}
	return 0;
}

/* The window's pieces into w->items (at = position within the window). */
static int window_items(const struct pk_docs *d, uint32_t L, uint64_t first, uint64_t end,
			struct pk_window *w)
{
	uint64_t n = 0;

	for (uint64_t p = first; p < end; p++)
		n += (doc_len_at(d, p) + (uint64_t)L - 1) / L;
	if (window_reserve(w, n ? n : 1, n ? n : 1) < 0)
		return -ENOMEM;
	n = 0;
	for (uint64_t p = first; p < end; p++) {
		uint64_t doc = ord_permute(d->order, p);
		uint32_t len = d->lens[doc];
		for (uint64_t s = 0; s < len; s += L)
			w->items[n++] = (struct pk_seg){.doc = doc, .start = s,
							.len = (uint32_t)(len - s < L ? len - s : L),
							.at = (uint32_t)(p - first)};
	}
	w->nsegs = n;
	return 0;
}

/* Best fit: the open row with the least room that holds len (the oldest
 * of equals), else a new one. */
static uint32_t window_fit(struct pk_window *w, uint32_t len)
{
	uint32_t best = w->nrows;

	for (uint32_t r = 0; r < w->nrows; r++)
		if (w->room[r] >= len && (best == w->nrows || w->room[r] < w->room[best]))
			best = r;
	if (best == w->nrows)
		w->room[w->nrows++] = w->seq_len;
	w->room[best] -= len;
	return best;
}

int pk_window_place(const struct pk_docs *d, const struct pk_spec *spec, uint64_t index,
		    struct pk_window *w)
{
	uint64_t first = index * spec->window, end;

	if (w->segs && w->index == index && w->seq_len == spec->seq_len)
		return 0;
	if (first >= d->n)
		return -EINVAL;
	end = d->n - first < spec->window ? d->n : first + spec->window;
	w->index = UINT64_MAX;
	w->seq_len = spec->seq_len;
	w->nrows = 0;
	if (window_items(d, spec->seq_len, first, end, w) < 0)
		return -ENOMEM;
	qsort(w->items, w->nsegs, sizeof(*w->items), item_cmp);
	for (uint64_t i = 0; i < w->nsegs; i++)
		w->rowof[i] = window_fit(w, w->items[i].len);
	/* rows' pieces in placement order: a counting sort by row */
	memset(w->row_first, 0, (w->nrows + 1) * sizeof(uint32_t));
	for (uint64_t i = 0; i < w->nsegs; i++)
		w->row_first[w->rowof[i] + 1]++;
	for (uint32_t r = 0; r < w->nrows; r++)
		w->row_first[r + 1] += w->row_first[r];
	for (uint32_t r = 0; r < w->nrows; r++)
		w->room[r] = 0;  /* now: tokens placed so far in row r */
	for (uint64_t i = 0; i < w->nsegs; i++) {
		uint32_t r = w->rowof[i];
		struct pk_seg s = w->items[i];
		s.at = w->room[r];
		w->room[r] += s.len;
		w->segs[w->row_first[r]++] = s;
	}
	for (uint32_t r = w->nrows; r > 0; r--)
		w->row_first[r] = w->row_first[r - 1];
	w->row_first[0] = 0;
	w->index = index;
	return 0;
}

void pk_window_free(struct pk_window *w)
{
	free(w->segs);
	free(w->items);
	free(w->rowof);
	free(w->row_first);
	free(w->room);
	memset(w, 0, sizeof(*w));
}

int pk_pack_seek(const struct pk_docs *d, const struct pk_spec *spec, struct pk_cursor *c,
		 struct pk_window *w, uint64_t row)
{
	uint64_t nwin = (d->n + spec->window - 1) / spec->window;

	if (row < c->row)
		*c = (struct pk_cursor){0};
	while (c->pos < nwin) {
		int rc = pk_window_place(d, spec, c->pos, w);
		if (rc < 0)
			return rc;
		uint64_t avail = w->nrows - c->off, step = row - c->row;
		if (step < avail) {
			c->off += step;
			c->row += step;
			return 1;
		}
		c->row += avail;
		c->pos++, c->off = 0;
	}
	return 0;
}

int pk_pack_row(const struct pk_docs *d, const struct pk_spec *spec, struct pk_cursor *c,
		struct pk_window *w, struct pk_seg *segs)
{
	uint64_t nwin = (d->n + spec->window - 1) / spec->window;

	for (;;) {
		if (c->pos >= nwin)
			return 0;
		int rc = pk_window_place(d, spec, c->pos, w);
		if (rc < 0)
			return rc;
		if (c->off < w->nrows)
			break;
		c->pos++, c->off = 0;  /* a window of empty documents has no row */
	}
	uint32_t a = w->row_first[c->off], b = w->row_first[c->off + 1], used = 0, n = 0;
	for (uint32_t i = a; i < b; i++) {
		segs[n++] = w->segs[i];
		used += w->segs[i].len;
	}
	if (used < spec->seq_len)
		segs[n++] = (struct pk_seg){.doc = PK_DOC_PAD, .len = spec->seq_len - used,
					    .at = used};
	c->off++;
	c->row++;
	return (int)n;
}

#define PK_ALIGN(x) (((x) + 63) & ~(size_t)63)

size_t pk_scratch_bytes(uint32_t seq_len)
{
	return 2 * PK_ALIGN(((size_t)seq_len + 1) * 4) +
	       PK_ALIGN(((size_t)seq_len + 2) * sizeof(struct pk_seg));
}

void pk_scratch_split(void *scratch, uint32_t seq_len, uint32_t **ret_ids, uint32_t **ret_tmp,
		      struct pk_seg **ret_segs)
{
	uint8_t *p = scratch;
	size_t t = PK_ALIGN(((size_t)seq_len + 1) * 4);

	*ret_ids = (uint32_t *)p;
	*ret_tmp = (uint32_t *)(p + t);
	*ret_segs = (struct pk_seg *)(p + 2 * t);
}

/* position_ids and segment starts from document_ids. */
static void row_runs(uint32_t L, struct pk_row_out *out)
{
	out->ncu = 0;
	for (uint32_t j = 0; j < L; j++) {
		bool start = j == 0 || out->document_ids[j] != out->document_ids[j - 1];
		out->position_ids[j] = start ? 0 : out->position_ids[j - 1] + 1;
		if (start && out->cu)
			out->cu[out->ncu] = out->cu_base + (int32_t)j;
		out->ncu += start;
	}
}

static int fill_concat(const struct pk_docs *d, uint32_t L, const struct pk_seg *segs,
		       uint32_t nseg, pk_fetch_fn fetch, void *ctx, uint32_t *ids, uint32_t *tmp,
		       struct pk_row_out *out, struct feed_err *err)
{
	(void)d;
	for (uint32_t s = 0; s < nseg; s++) {
		int rc = fetch(ctx, segs[s].doc, segs[s].start, segs[s].len, tmp + segs[s].at, err);
		if (rc < 0)
			return rc;
		for (uint32_t k = 0; k < segs[s].len && segs[s].at + k < L; k++)
			out->document_ids[segs[s].at + k] = (int64_t)segs[s].doc;
	}
	for (uint32_t j = 0; j < L; j++) {
		ids[j] = tmp[j];
		out->labels[j] = tmp[j + 1];
	}
	return 0;
}

static int fill_pack(const struct pk_spec *spec, const struct pk_docs *d,
		     const struct pk_seg *segs, uint32_t nseg, pk_fetch_fn fetch, void *ctx,
		     uint32_t *ids, struct pk_row_out *out, struct feed_err *err)
{
	for (uint32_t s = 0; s < nseg; s++) {
		const struct pk_seg *g = &segs[s];
		uint32_t *t = ids + g->at, next = 0;
		int rc = 0;
		bool more = g->doc != PK_DOC_PAD && g->start + g->len < d->lens[g->doc];
		for (uint32_t k = 0; g->doc == PK_DOC_PAD && k < g->len; k++)
			t[k] = spec->pad_id;
		if (g->doc != PK_DOC_PAD)
			rc = fetch(ctx, g->doc, g->start, g->len, t, err);
		if (rc == 0 && more)
			rc = fetch(ctx, g->doc, g->start + g->len, 1, &next, err);
		if (rc < 0)
			return rc;
		for (uint32_t k = 0; k < g->len; k++) {
			bool last = k + 1 == g->len;
			out->document_ids[g->at + k] = g->doc == PK_DOC_PAD ? -1 : (int64_t)g->doc;
			out->labels[g->at + k] = g->doc == PK_DOC_PAD ? PK_LABEL_IGNORE :
				!last ? (int64_t)t[k + 1] : more ? (int64_t)next : PK_LABEL_IGNORE;
		}
	}
	return 0;
}

int pk_row_fill(const struct pk_spec *spec, const struct pk_docs *d, const struct pk_seg *segs,
		uint32_t nseg, pk_fetch_fn fetch, void *ctx, uint32_t *ids, uint32_t *tmp,
		struct pk_row_out *out, struct feed_err *err)
{
	uint32_t L = spec->seq_len;
	int rc;

	if (spec->mode == PK_MODE_CONCAT)
		rc = fill_concat(d, L, segs, nseg, fetch, ctx, ids, tmp, out, err);
	else
		rc = fill_pack(spec, d, segs, nseg, fetch, ctx, ids, out, err);
	if (rc == 0)
		row_runs(L, out);
	return rc;
}
