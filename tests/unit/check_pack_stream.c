/*
 * check_pack_stream.c: unit tests of core/pack_stream.c through
 * pack_stream.h: a source's row stream is its passes' rows one after the
 * other, each pass cut by packing.c over pk_source_epoch(pass) (checked
 * against pk_concat_row / pk_pack_row called on each pass directly);
 * a seek to any row, forward, backward or on a fresh stream (a worker
 * that has not seen the stream), lands where the walk does; concat's cap
 * (a source epoch in rows) cuts passes short; the refusals.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "pack_stream.h"

#define MAXSEG 64   /* seq_len + 2 for the tests' L */

/* n documents of 0 .. maxlen tokens (some empty), lengths only. */
static uint32_t *lens_make(uint64_t n, uint32_t maxlen, uint64_t *ret_total)
{
	uint32_t *lens = malloc(n * sizeof(*lens));
	uint64_t x = 41 + n, total = 0;

	ck_assert_ptr_nonnull(lens);
	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(x >> 33);
		lens[i] = r % 7 == 0 ? 0 : 1 + r % maxlen;
		total += lens[i];
	}
	*ret_total = total;
	return lens;
}

static void source_make(struct pk_source *src, enum pk_mode mode, uint32_t L, const uint32_t *lens,
			uint64_t n, uint64_t total)
{
	struct pk_spec spec = {.mode = mode, .seq_len = L, .window = 9};

	ck_assert_int_eq(pk_source_init(src, &spec, lens, n, total, "00000000000000aa", 3,
					ORD_FULL, NULL), 0);
}

/* A reference row: pass p's row r, cut by packing.c directly. */
struct ref_row {
	uint64_t pass, row;
	uint32_t nseg;
	struct pk_seg segs[MAXSEG];
};

/* The stream's first `want` rows (no cap), pass after pass. */
static struct ref_row *ref_rows(const struct pk_source *src, uint64_t want)
{
	struct ref_row *out = calloc(want, sizeof(*out));
	uint64_t got = 0;

	ck_assert_ptr_nonnull(out);
	for (uint64_t p = 0; got < want; p++) {
		struct ord_epoch ord;
		struct pk_docs d;
		struct pk_cursor c = {0};
		struct pk_window w = {0};
		ck_assert_int_eq(pk_source_epoch(src, p, &ord, &d, NULL), 0);
		uint64_t rows = src->spec.mode == PK_MODE_CONCAT ? pk_concat_rows(&d, src->spec.seq_len) :
								   UINT64_MAX;
		for (uint64_t r = 0; r < rows && got < want; r++) {
			struct ref_row *x = &out[got];
			int n = src->spec.mode == PK_MODE_CONCAT ?
				(int)pk_concat_row(&d, src->spec.seq_len, &c, x->segs) :
				pk_pack_row(&d, &src->spec, &c, &w, x->segs);
			ck_assert_int_ge(n, 0);
			if (n == 0)
				break;  /* pack: the pass ended */
			x->pass = p;
			x->row = r;
			x->nseg = (uint32_t)n;
			got++;
		}
		pk_window_free(&w);
		ord_epoch_fini(&ord);
	}
	return out;
}

static void row_same(const struct ref_row *want, const struct pk_seg *segs, int n, uint64_t k)
{
	ck_assert_msg(n == (int)want->nseg, "row %llu: %d segments, want %u", (unsigned long long)k,
		      n, want->nseg);
	for (int i = 0; i < n; i++) {
		ck_assert_uint_eq(segs[i].doc, want->segs[i].doc);
		ck_assert_uint_eq(segs[i].start, want->segs[i].start);
		ck_assert_uint_eq(segs[i].len, want->segs[i].len);
		ck_assert_uint_eq(segs[i].at, want->segs[i].at);
	}
}

/* Walks 4 passes' worth of rows, then seeks around; both modes. */
static void check_mode(enum pk_mode mode)
{
	uint64_t n = 60, total, want;
	uint32_t *lens = lens_make(n, 30, &total);
	struct pk_source src;
	struct pks_stream st = {0}, fresh = {0};
	struct pks_pos p = {0};
	struct pk_seg segs[MAXSEG];
	const struct pk_docs *d;

	source_make(&src, mode, 8, lens, n, total);
	want = 4 * (total / 8);
	struct ref_row *ref = ref_rows(&src, want);
	ck_assert_uint_gt(ref[want - 1].pass, 2);  /* several passes */
	pks_stream_use(&st, &(struct pks_spec){.src = &src});
	for (uint64_t k = 0; k < want; k++) {
		int nseg = pks_row(&st, &p, segs, &d, NULL);
		row_same(&ref[k], segs, nseg, k);
		ck_assert_uint_eq(p.k, k + 1);
	}
	/* seeks: forward over passes, backward, and on a stream never used */
	uint64_t at[] = {want - 1, 3, want / 2, want / 2 + 1, 0, want - 7};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		struct pks_stream *s = i % 2 ? &fresh : &st;
		struct pks_pos q = i % 2 ? (struct pks_pos){0} : p;
		pks_stream_use(s, &(struct pks_spec){.src = &src});
		ck_assert_int_eq(pks_seek(s, &q, at[i], NULL), 0);
		ck_assert_uint_eq(q.pass, ref[at[i]].pass);
		ck_assert_uint_eq(q.c.row, ref[at[i]].row);
		row_same(&ref[at[i]], segs, pks_row(s, &q, segs, &d, NULL), at[i]);
		p = i % 2 ? p : q;
	}
	pks_stream_fini(&st);
	pks_stream_fini(&fresh);
	free(ref);
	free(lens);
}

START_TEST(test_pack_stream_concat_passes_and_seeks)
{
	check_mode(PK_MODE_CONCAT);
}
END_TEST

START_TEST(test_pack_stream_pack_passes_and_seeks)
{
	check_mode(PK_MODE_PACK);
}
END_TEST

/* concat with a cap: a source epoch of cap rows is ceil(cap / R) passes,
 * the last cut short; the next source epoch starts a new pass. */
START_TEST(test_pack_stream_concat_cap)
{
	uint64_t n = 40, total;
	uint32_t *lens = lens_make(n, 20, &total);
	struct pk_source src;
	struct pks_stream st = {0};
	struct pks_pos p = {0};

	source_make(&src, PK_MODE_CONCAT, 8, lens, n, total);
	uint64_t R = (total - 1) / 8;
	struct {
		uint64_t cap, k, pass, row;
	} cases[] = {
		{R + 3, R + 2, 1, 2},      /* the second pass of epoch 0, cut after 3 rows */
		{R + 3, R + 3, 2, 0},      /* epoch 1: a new pass */
		{R + 3, 2 * R + 4, 3, 1},
		{5, 4, 0, 4},              /* choose fewer rows than a pass */
		{5, 5, 1, 0},
		{5, 12, 2, 2},
		{R, 2 * R + 1, 2, 1},      /* a cap of one pass: no cap */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pks_stream_use(&st, &(struct pks_spec){.src = &src, .cap = cases[i].cap});
		ck_assert_int_eq(pks_seek(&st, &p, cases[i].k, NULL), 0);
		ck_assert_uint_eq(p.pass, cases[i].pass);
		ck_assert_uint_eq(p.c.row, cases[i].row);
	}
	pks_stream_fini(&st);
	free(lens);
}
END_TEST

START_TEST(test_pack_stream_refusals)
{
	uint32_t lens[3] = {0, 5, 0}, none[2] = {0, 0};
	struct pk_source src;
	struct feed_err err = {0};

	source_make(&src, PK_MODE_PACK, 4, lens, 3, 5);
	ck_assert_int_eq(pks_spec_check(&(struct pks_spec){.src = &src}, NULL), 0);
	ck_assert_int_eq(pks_spec_check(&(struct pks_spec){.src = &src, .cap = 2}, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "repeat and choose"), "%s", err.msg);
	source_make(&src, PK_MODE_PACK, 4, none, 2, 0);
	ck_assert_int_eq(pks_spec_check(&(struct pks_spec){.src = &src}, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "0 tokens make no row"), "%s", err.msg);
	/* concat reads seq_len + 1 tokens a row: a source of exactly seq_len
	 * has none, refused when the source is made (pks_spec_check never
	 * sees it) */
	uint32_t four[1] = {4};
	struct pk_spec cat = {.mode = PK_MODE_CONCAT, .seq_len = 4, .window = 9};
	ck_assert_int_eq(pk_source_init(&src, &cat, four, 1, 4, "00000000000000aa", 3, ORD_FULL,
					&err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "the dataset holds 4 tokens, not one row of 4"), "%s",
		      err.msg);
}
END_TEST

static Suite *pack_stream_suite(void)
{
	Suite *s = suite_create("pack_stream");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_pack_stream_concat_passes_and_seeks);
	tcase_add_test(tc, test_pack_stream_pack_passes_and_seeks);
	tcase_add_test(tc, test_pack_stream_concat_cap);
	tcase_add_test(tc, test_pack_stream_refusals);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(pack_stream_suite)
