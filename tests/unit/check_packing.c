/*
 * check_packing.c: unit tests of core/packing.c against straightforward
 * references written here: concat against the epoch's whole token stream
 * laid out in memory and cut; pack against a plain best-fit-decreasing of
 * each window (sort, then a scan of every open row per piece). Both check
 * every field of every row (input ids, labels, position and document
 * ids, segment starts), the rank skipping a cursor does, and that empty
 * and one-token documents never stop the stream.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "packing.h"

/* Token k of document d: a function the reference and the fetch share. */
static uint32_t tok(uint64_t d, uint64_t k)
{
	return (uint32_t)((d * 7919 + k * 31 + 5) % 50000);
}

struct corpus {
	uint32_t *lens;
	uint64_t n, total;
	struct ord_epoch ord;
	struct pk_docs docs;
};

static int fetch(void *ctx, uint64_t doc, uint64_t start, uint32_t n, uint32_t *dst,
		 struct feed_err *err)
{
	const struct corpus *c = ctx;
	(void)err;
	ck_assert_uint_lt(doc, c->n);
	ck_assert_uint_le(start + n, c->lens[doc]);
	for (uint32_t k = 0; k < n; k++)
		dst[k] = tok(doc, start + k);
	return 0;
}

/* n documents of 0 .. maxlen tokens (about one in eight empty or of one
 * token), in a shuffled (or sequential) order of epoch `epoch`. */
static void corpus_make(struct corpus *c, uint64_t n, uint32_t maxlen, uint64_t epoch,
			bool shuffle)
{
	uint64_t x = 99 + n;
	struct ord_spec s = {.n = n, .seed = 7, .mode = shuffle ? ORD_FULL : ORD_SEQUENTIAL,
			     .world = 1, .batch = 1};

	memset(c, 0, sizeof(*c));
	strcpy(s.version, "0123456789abcdef");
	c->lens = malloc(n * sizeof(uint32_t));
	c->n = n;
	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(x >> 33);
		c->lens[i] = r % 8 == 0 ? r % 2 : 1 + r % maxlen;
		c->total += c->lens[i];
	}
	ck_assert_int_eq(ord_epoch_init(&c->ord, &s, epoch, NULL), 0);
	c->docs = (struct pk_docs){.lens = c->lens, .n = n, .total = c->total, .order = &c->ord};
}

static void corpus_free(struct corpus *c)
{
	ord_epoch_fini(&c->ord);
	free(c->lens);
}

/* One row's fields, made by pk_row_fill(). */
struct row {
	uint32_t *ids, *tmp;
	int64_t *labels, *pos, *docid;
	int32_t *cu;
	uint32_t ncu;
	struct pk_seg *segs;
};

static void row_alloc(struct row *r, uint32_t L)
{
	r->ids = calloc(L + 1, 4);
	r->tmp = calloc(L + 1, 4);
	r->labels = calloc(L, 8);
	r->pos = calloc(L, 8);
	r->docid = calloc(L, 8);
	r->cu = calloc(L + 1, 4);
	r->segs = calloc(L + 2, sizeof(struct pk_seg));
}

static void row_free(struct row *r)
{
	free(r->ids), free(r->tmp), free(r->labels), free(r->pos), free(r->docid), free(r->cu);
	free(r->segs);
}

static void row_fill(struct corpus *c, const struct pk_spec *sp, struct row *r, uint32_t nseg,
		     int32_t base)
{
	struct pk_row_out out = {.labels = r->labels, .position_ids = r->pos,
				 .document_ids = r->docid, .cu = r->cu, .cu_base = base};
	struct feed_err err = {0};
	ck_assert_int_eq(pk_row_fill(sp, &c->docs, r->segs, nseg, fetch, c, r->ids, r->tmp, &out,
				     &err), 0);
	r->ncu = out.ncu;
}

/* position_ids and segment starts, straight from a row's document ids. */
static void check_runs(const struct row *r, uint32_t L, int32_t base)
{
	uint32_t k = 0;
	for (uint32_t j = 0; j < L; j++) {
		uint32_t s = j;
		while (s > 0 && r->docid[s - 1] == r->docid[j])
			s--;
		ck_assert_int_eq(r->pos[j], j - s);
		if (s == j) {
			ck_assert_uint_lt(k, r->ncu);
			ck_assert_int_eq(r->cu[k++], base + (int32_t)j);
		}
	}
	ck_assert_uint_eq(k, r->ncu);
}

/* The epoch's whole token stream and each token's document. */
static void stream_of(const struct corpus *c, uint32_t **ret_t, uint64_t **ret_d)
{
	uint32_t *t = malloc((c->total + 1) * 4);
	uint64_t *d = malloc((c->total + 1) * 8), k = 0;
	for (uint64_t p = 0; p < c->n; p++) {
		uint64_t doc = ord_permute(&c->ord, p);
		for (uint32_t i = 0; i < c->lens[doc]; i++, k++)
			t[k] = tok(doc, i), d[k] = doc;
	}
	*ret_t = t;
	*ret_d = d;
}

/* Rows rank, rank + world, ... of a concat epoch against the stream. */
static void concat_check(struct corpus *c, uint32_t L, uint32_t rank, uint32_t world)
{
	struct pk_spec sp = {.mode = PK_MODE_CONCAT, .seq_len = L};
	uint64_t rows = pk_concat_rows(&c->docs, L), *sd;
	uint32_t *st;
	struct pk_cursor cur = {0};
	struct row r;

	ck_assert_uint_eq(rows, (c->total - 1) / L);
	stream_of(c, &st, &sd);
	row_alloc(&r, L);
	for (uint64_t g = rank; g < rows; g += world) {
		pk_concat_seek(&c->docs, L, &cur, g);
		uint32_t n = pk_concat_row(&c->docs, L, &cur, r.segs);
		row_fill(c, &sp, &r, n, (int32_t)(g % 4) * (int32_t)L);
		for (uint32_t j = 0; j < L; j++) {
			ck_assert_uint_eq(r.ids[j], st[g * L + j]);
			ck_assert_int_eq(r.labels[j], st[g * L + j + 1]);
			ck_assert_int_eq(r.docid[j], (int64_t)sd[g * L + j]);
		}
		check_runs(&r, L, (int32_t)(g % 4) * (int32_t)L);
	}
	row_free(&r);
	free(st);
	free(sd);
}

START_TEST(test_packing_concat_matches_stream)
{
	static const uint32_t Ls[] = {1, 3, 16, 100};
	for (uint32_t k = 0; k < 4; k++) {
		struct corpus c;
		corpus_make(&c, 301, 40, k, k != 1);
		concat_check(&c, Ls[k], 0, 1);
		corpus_free(&c);
	}
}
END_TEST

START_TEST(test_packing_concat_ranks_skip)
{
	struct corpus c;
	corpus_make(&c, 500, 60, 3, true);
	for (uint32_t world = 2; world <= 3; world++)
		for (uint32_t rank = 0; rank < world; rank++)
			concat_check(&c, 32, rank, world);
	/* seeking back starts over and lands on the same row */
	struct pk_cursor a = {0}, b = {0};
	pk_concat_seek(&c.docs, 32, &a, 200);
	pk_concat_seek(&c.docs, 32, &a, 17);
	pk_concat_seek(&c.docs, 32, &b, 17);
	ck_assert_mem_eq(&a, &b, sizeof(a));
	corpus_free(&c);
}
END_TEST

START_TEST(test_packing_concat_tiny)
{
	/* one token in all: no row; two tokens and L = 1: one row */
	struct corpus c;
	corpus_make(&c, 1, 1, 0, false);
	c.lens[0] = 1;
	c.docs.total = 1;
	ck_assert_uint_eq(pk_concat_rows(&c.docs, 1), 0);
	c.lens[0] = 2;
	c.docs.total = c.total = 2;
	concat_check(&c, 1, 0, 1);
	corpus_free(&c);
}
END_TEST

/* Reference best-fit decreasing of one window: pieces (doc, start, len)
 * and rows as lists of piece indices in placement order. */
struct ref_piece {
	uint64_t doc, start, wpos;
	uint32_t len;
};

static uint32_t ref_window(const struct corpus *c, uint32_t L, uint64_t first, uint64_t end,
			   struct ref_piece *p, uint32_t *rowof, uint32_t *nrows)
{
	uint32_t n = 0, room[4096];
	for (uint64_t q = first; q < end; q++) {
		uint64_t d = ord_permute(&c->ord, q);
		for (uint64_t s = 0; s < c->lens[d]; s += L)
			p[n++] = (struct ref_piece){d, s, q, c->lens[d] - s < L ? c->lens[d] - s : L};
	}
	for (uint32_t i = 1; i < n; i++)  /* insertion sort: longer, then earlier */
		for (uint32_t j = i; j > 0; j--) {
			struct ref_piece a = p[j - 1], b = p[j];
			bool swap = b.len > a.len || (b.len == a.len && (b.wpos < a.wpos ||
					(b.wpos == a.wpos && b.start < a.start)));
			if (!swap)
				break;
			p[j - 1] = b, p[j] = a;
		}
	*nrows = 0;
	for (uint32_t i = 0; i < n; i++) {
		int best = -1;
		for (uint32_t r = 0; r < *nrows; r++)
			if (room[r] >= p[i].len && (best < 0 || room[r] < room[best]))
				best = (int)r;
		if (best < 0) {
			ck_assert_uint_lt(*nrows, 4096);
			best = (int)(*nrows)++;
			room[best] = L;
		}
		room[best] -= p[i].len;
		rowof[i] = (uint32_t)best;
	}
	return n;
}

/* Checks one packed row against the reference row `rr` of its window. */
static void pack_row_check(const struct corpus *c, const struct pk_spec *sp, const struct row *r,
			   const struct ref_piece *p, const uint32_t *rowof, uint32_t np,
			   uint32_t rr)
{
	uint32_t at = 0, L = sp->seq_len;
	for (uint32_t i = 0; i < np; i++) {
		if (rowof[i] != rr)
			continue;
		for (uint32_t k = 0; k < p[i].len; k++, at++) {
			uint64_t t = p[i].start + k;
			ck_assert_uint_eq(r->ids[at], tok(p[i].doc, t));
			ck_assert_int_eq(r->docid[at], (int64_t)p[i].doc);
			int64_t want = t + 1 < c->lens[p[i].doc] ? (int64_t)tok(p[i].doc, t + 1) : -100;
			ck_assert_int_eq(r->labels[at], want);
		}
	}
	ck_assert_uint_gt(at, 0);
	for (; at < L; at++) {
		ck_assert_uint_eq(r->ids[at], sp->pad_id);
		ck_assert_int_eq(r->labels[at], -100);
		ck_assert_int_eq(r->docid[at], -1);
	}
	check_runs(r, L, 0);
}

static void pack_check(struct corpus *c, uint32_t L, uint32_t W)
{
	struct pk_spec sp = {.mode = PK_MODE_PACK, .seq_len = L, .pad_id = 65000, .window = W};
	struct pk_window w = {0};
	struct pk_cursor cur = {0};
	struct ref_piece *p = malloc(200000 * sizeof(*p));
	uint32_t *rowof = malloc(200000 * 4), nrows, np, rr = 0;
	uint64_t win = 0, rows = 0;
	struct row r;
	int n;

	row_alloc(&r, L);
	np = ref_window(c, L, 0, W < c->n ? W : c->n, p, rowof, &nrows);
	while ((n = pk_pack_row(&c->docs, &sp, &cur, &w, r.segs)) > 0) {
		while (rr == nrows) {  /* the reference's next window with rows */
			win++;
			ck_assert_uint_lt(win * W, c->n);
			uint64_t end = (win + 1) * W < c->n ? (win + 1) * W : c->n;
			np = ref_window(c, L, win * W, end, p, rowof, &nrows);
			rr = 0;
		}
		row_fill(c, &sp, &r, (uint32_t)n, 0);
		pack_row_check(c, &sp, &r, p, rowof, np, rr++);
		rows++;
		ck_assert_uint_eq(cur.row, rows);
	}
	ck_assert_int_eq(n, 0);
	ck_assert_uint_eq(rr, nrows);
	ck_assert_uint_ge((win + 1) * W, c->n);  /* every window was used */
	pk_window_free(&w);
	row_free(&r);
	free(p);
	free(rowof);
}

START_TEST(test_packing_pack_matches_best_fit_decreasing)
{
	static const uint32_t Ls[] = {8, 64, 128};
	static const uint32_t Ws[] = {1, 10, 1000};
	for (uint32_t k = 0; k < 3; k++) {
		struct corpus c;
		corpus_make(&c, 777, 150, k, true);
		pack_check(&c, Ls[k], Ws[k]);
		corpus_free(&c);
	}
}
END_TEST

START_TEST(test_packing_pack_deterministic_per_epoch)
{
	struct pk_spec sp = {.mode = PK_MODE_PACK, .seq_len = 64, .pad_id = 0, .window = 50};
	struct corpus a, b, e;
	struct pk_window wa = {0}, wb = {0}, we = {0};
	struct pk_cursor ca = {0}, cb = {0}, ce = {0};
	struct pk_seg sa[80], sb[80], se[80];
	bool differ = false;

	corpus_make(&a, 400, 90, 5, true);
	corpus_make(&b, 400, 90, 5, true);
	corpus_make(&e, 400, 90, 6, true);
	for (int k = 0; k < 40; k++) {
		int na = pk_pack_row(&a.docs, &sp, &ca, &wa, sa);
		int nb = pk_pack_row(&b.docs, &sp, &cb, &wb, sb);
		int ne = pk_pack_row(&e.docs, &sp, &ce, &we, se);
		ck_assert_int_eq(na, nb);
		ck_assert_mem_eq(sa, sb, (size_t)na * sizeof(*sa));
		differ |= na != ne || memcmp(sa, se, (size_t)na * sizeof(*sa));
	}
	ck_assert(differ);
	pk_window_free(&wa), pk_window_free(&wb), pk_window_free(&we);
	corpus_free(&a), corpus_free(&b), corpus_free(&e);
}
END_TEST

START_TEST(test_packing_short_documents_never_stop)
{
	/* every document empty or of one token: concat and pack run to the end */
	struct corpus c;
	corpus_make(&c, 1000, 1, 0, true);
	for (uint64_t i = 0; i < c.n; i++)
		c.lens[i] = i % 3 == 0 ? 0 : 1;
	c.total = 0;
	for (uint64_t i = 0; i < c.n; i++)
		c.total += c.lens[i];
	c.docs.total = c.total;
	concat_check(&c, 16, 0, 1);
	pack_check(&c, 16, 100);
	corpus_free(&c);
}
END_TEST

/* Seeking to a row (forward, or back: from the start) gives the row a
 * walk row by row gives; past the end it says so, with the row count. */
START_TEST(test_packing_pack_seek)
{
	struct pk_spec sp = {.mode = PK_MODE_PACK, .seq_len = 48, .pad_id = 0, .window = 30};
	struct corpus c;
	struct pk_window w = {0}, w2 = {0};
	struct pk_cursor walk = {0};
	static struct pk_seg rows[2000][50];
	int nseg[2000], n;
	uint64_t total = 0;

	corpus_make(&c, 600, 100, 2, true);
	while ((n = pk_pack_row(&c.docs, &sp, &walk, &w, rows[total])) > 0)
		nseg[total++] = n;
	ck_assert_uint_lt(total, 2000);
	static const uint64_t targets[] = {0, 5, 77, 3, 200, 1};
	struct pk_cursor cur = {0};
	struct pk_seg segs[50];
	for (uint32_t k = 0; k < 6; k++) {
		uint64_t g = targets[k] % total;
		ck_assert_int_eq(pk_pack_seek(&c.docs, &sp, &cur, &w2, g), 1);
		ck_assert_uint_eq(cur.row, g);
		struct pk_cursor peek = cur;
		n = pk_pack_row(&c.docs, &sp, &peek, &w2, segs);
		ck_assert_int_eq(n, nseg[g]);
		ck_assert_mem_eq(segs, rows[g], (size_t)n * sizeof(*segs));
	}
	ck_assert_int_eq(pk_pack_seek(&c.docs, &sp, &cur, &w2, total), 0);
	ck_assert_uint_eq(cur.row, total);
	cur = (struct pk_cursor){0};
	ck_assert_int_eq(pk_pack_seek(&c.docs, &sp, &cur, &w2, total + 50), 0);
	ck_assert_uint_eq(cur.row, total);
	pk_window_free(&w), pk_window_free(&w2);
	corpus_free(&c);
}
END_TEST

static Suite *packing_suite(void)
{
	Suite *s = suite_create("packing");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_packing_concat_matches_stream);
	tcase_add_test(tc, test_packing_concat_ranks_skip);
	tcase_add_test(tc, test_packing_concat_tiny);
	tcase_add_test(tc, test_packing_pack_matches_best_fit_decreasing);
	tcase_add_test(tc, test_packing_pack_deterministic_per_epoch);
	tcase_add_test(tc, test_packing_short_documents_never_stop);
	tcase_add_test(tc, test_packing_pack_seek);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(packing_suite)
