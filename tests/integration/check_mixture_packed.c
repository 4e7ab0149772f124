/*
 * check_mixture_packed.c: packed mixtures through a real feedd and the C
 * API (feed_stream_opts.mixture with pipeline concat or pack). Two
 * token-document datasets made here with feedpack tokens, each source's
 * tokens in a range of its own. In order, every concat row of source s is
 * the next window of s's own token stream (its k-th row: tokens
 * [(k mod R) L, + L] of the stream, its labels one further), passes
 * following one another; a shuffled pack mixture resumed from a token in
 * the middle of an epoch gives every row, field by field, as the
 * uninterrupted stream does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define P_NSRC 2
#define P_DOCS 30
#define P_L 8
#define P_BATCH 4
#define P_MAXTOK (P_DOCS * 14)

static const char *p_names[P_NSRC] = {"a", "b"};
static uint16_t p_tok[P_NSRC][P_MAXTOK];  /* each source's token stream */
static size_t p_ntok[P_NSRC];

/* Source s's documents (1 to 13 tokens, the last the separator 1) into
 * a flat file, packed with feedpack into h.dir/<name>. */
static void p_make(int s)
{
	char bin[200], out[200], log[200];

	p_ntok[s] = 0;
	for (uint32_t i = 0; i < P_DOCS; i++) {
		uint32_t len = (i * 7 + (uint32_t)s * 3) % 13 + 1;
		for (uint32_t j = 0; j + 1 < len; j++)
			p_tok[s][p_ntok[s]++] = (uint16_t)(1000 * (s + 1) + 2 + (i * 31 + j) % 900);
		p_tok[s][p_ntok[s]++] = 1;
	}
	snprintf(bin, sizeof(bin), "%s/%s.bin", h.dir, p_names[s]);
	snprintf(out, sizeof(out), "%s/%s", h.dir, p_names[s]);
	snprintf(log, sizeof(log), "%s/feedpack.log", h.dir);
	FILE *f = fopen(bin, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(p_tok[s], 2, p_ntok[s], f), p_ntok[s]);
	fclose(f);
	ck_assert_int_eq(h_run_tool("feedpack", (const char *[]){"tokens", bin, "--dtype", "uint16",
								 "--doc-sep", "1", "-o", out, NULL},
				    log), 0);
}

static void p_setup(void)
{
	static char arg[P_NSRC][220];

	h_setup();
	for (int s = 0; s < P_NSRC; s++) {
		p_make(s);
		snprintf(arg[s], sizeof(arg[s]), "%s=%s/%s", p_names[s], h.dir, p_names[s]);
	}
	h_start((const char *[]){"--dataset", arg[0], "--dataset", arg[1], "--workers", "2", NULL});
}

/* One row's fields. */
struct p_row {
	int32_t source;
	uint16_t ids[P_L];
	int64_t labels[P_L], pos[P_L], docs[P_L];
};

static const void *p_field(struct feed_stream *st, struct feed_batch *b, const char *name,
			   int dtype)
{
	const struct feed_stream_info *in = feed_stream_info(st);
	struct feed_view v;

	for (uint32_t f = 0; f < in->num_fields; f++)
		if (!strcmp(in->fields[f].name, name)) {
			ck_assert_int_eq(feed_batch_field(b, f, &v), 0);
			ck_assert_int_eq(v.dtype, dtype);
			return v.data;
		}
	ck_abort_msg("no field '%s'", name);
	return NULL;
}

/* The rows of n batches (epoch ends passed over; an epoch's last batch
 * may be short) into r; returns how many. */
static size_t p_read(struct feed_stream *st, int n, struct p_row *r)
{
	struct feed_batch *b;
	size_t rows = 0;
	int rc;

	for (int k = 0; k < n;) {
		if ((rc = feed_next(st, H_DEADLINE_MS, &b)) == FEED_END_OF_EPOCH)
			continue;
		ck_assert_int_eq(rc, 0);
		uint32_t m = feed_batch_size(b);
		ck_assert(m >= 1 && m <= P_BATCH);
		const int32_t *src = p_field(st, b, "source", FEED_DTYPE_INT32);
		const uint16_t *ids = p_field(st, b, "input_ids", FEED_DTYPE_UINT16);
		const int64_t *lab = p_field(st, b, "labels", FEED_DTYPE_INT64);
		const int64_t *pos = p_field(st, b, "position_ids", FEED_DTYPE_INT64);
		const int64_t *doc = p_field(st, b, "document_ids", FEED_DTYPE_INT64);
		for (uint32_t i = 0; i < m; i++, r++, rows++) {
			r->source = src[i];
			memcpy(r->ids, ids + i * P_L, sizeof(r->ids));
			memcpy(r->labels, lab + i * P_L, sizeof(r->labels));
			memcpy(r->pos, pos + i * P_L, sizeof(r->pos));
			memcpy(r->docs, doc + i * P_L, sizeof(r->docs));
		}
		feed_release(b);
		k++;
	}
	return rows;
}

static const struct feed_mixture_source p_w[P_NSRC] = {{"a", 0.75, 0, 0}, {"b", 0.25, 0, 0}};

START_TEST(test_mixture_packed_concat_rows_tile_each_source)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.batch = P_BATCH, .order = FEED_ORDER_SEQUENTIAL,
				     .pipeline = "concat(seq_len=8)", .mixture = p_w,
				     .nmixture = P_NSRC};
	struct feed_stream *st = h_stream_open(c, &o);
	static struct p_row r[40 * P_BATCH];
	uint64_t k[P_NSRC] = {0};

	size_t nrows = p_read(st, 40, r);  /* past an epoch */
	for (size_t n = 0; n < nrows; n++) {
		int s = r[n].source;
		ck_assert(s >= 0 && s < P_NSRC);
		uint64_t rows = (p_ntok[s] - 1) / P_L, at = k[s]++ % rows * P_L;
		for (uint32_t j = 0; j < P_L; j++) {
			ck_assert_uint_eq(r[n].ids[j], p_tok[s][at + j]);
			ck_assert_int_eq(r[n].labels[j], p_tok[s][at + j + 1]);
		}
	}
	ck_assert_uint_gt(k[1], (p_ntok[1] - 1) / P_L);  /* b into its second pass */
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_mixture_packed_resume_is_exact)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.batch = P_BATCH, .order = FEED_ORDER_FULL, .seed = 9,
				     .pipeline = "pack(seq_len=8, window=5)", .mixture = p_w,
				     .nmixture = P_NSRC};
	static struct p_row want[20 * P_BATCH], got[20 * P_BATCH];
	uint8_t tok[FEED_RESUME_MAX];
	size_t len;

	struct feed_stream *st = h_stream_open(c, &o);
	size_t nwant = p_read(st, 20, want);
	feed_stream_close(st);
	st = h_stream_open(c, &o);
	size_t ngot = p_read(st, 7, got);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	feed_stream_close(st);
	o.resume = tok;
	o.resume_len = len;
	st = h_stream_open(c, &o);
	ngot += p_read(st, 13, got + ngot);
	feed_stream_close(st);
	ck_assert_uint_eq(ngot, nwant);
	for (size_t n = 0; n < nwant; n++)
		ck_assert_msg(!memcmp(&want[n], &got[n], sizeof(want[n])), "row %zu differs", n);
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mixture_packed");
	TCase *tc = tcase_create("mixture_packed");

	tcase_add_checked_fixture(tc, p_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_mixture_packed_concat_rows_tile_each_source);
	tcase_add_test(tc, test_mixture_packed_resume_is_exact);
	suite_add_tcase(s, tc);
	return h_run_suite(s);
}
