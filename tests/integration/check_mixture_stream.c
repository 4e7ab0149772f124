/*
 * check_mixture_stream.c: mixtures through a real feedd and the C API. A
 * configured mixture opened by its name and one given in
 * feed_stream_opts.mixture are one stream each: every batch carries the
 * int32 field "source", the rows of each source follow the weights to
 * within a row at every prefix, and each source's rows are its own
 * sequence (the same as that source read alone). A resume token carries
 * every source's position: reopened with other weights each source goes on
 * from there, and a feedd killed and restarted under a reading client
 * costs no row and repeats none (the client reopens with its sources and
 * the token). Refused, naming what: a source whose schema differs, a
 * group, a dataset's token given to a mixture.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define M_ROWS 80          /* web 40 + code 24 + books 16 */
#define M_BATCH 8

static const uint64_t m_size[3] = {40, 24, 16};

static const char *m_cfg;  /* the config file, for a restart */

static void m_setup(void)
{
	static const char *names[3] = {"web", "code", "books"};
	char path[200];

	h_setup();
	for (int s = 0; s < 3; s++) {
		snprintf(path, sizeof(path), "%s/%s", h.dir, names[s]);
		h_make_dataset(path, m_size[s]);
	}
	snprintf(path, sizeof(path), "%s/kinds", h.dir);
	h_make_kinds_dataset(path);
	m_cfg = h_write_file("feedd.yaml",
		"datasets:\n"
		"  - {name: web, path: web}\n  - {name: code, path: code}\n"
		"  - {name: books, path: books}\n  - {name: kinds, path: kinds}\n"
		"mixtures:\n"
		"  - name: lm\n"
		"    sources:\n"
		"      - {dataset: web, weight: 0.5}\n"
		"      - {dataset: code, weight: 0.25}\n"
		"      - {dataset: books, weight: 0.25}\n");
	h_start((const char *[]){"--config", m_cfg, "--workers", "2", NULL});
}

/* Rows read: each one's source and sample. */
struct m_rows {
	size_t n;
	int32_t source[4 * M_ROWS];
	uint64_t sample[4 * M_ROWS];
};

/* The index of the field named name. */
static uint32_t m_field(struct feed_stream *st, const char *name)
{
	const struct feed_stream_info *in = feed_stream_info(st);

	for (uint32_t f = 0; f < in->num_fields; f++)
		if (!strcmp(in->fields[f].name, name))
			return f;
	ck_abort_msg("no field '%s'", name);
	return 0;
}

/* Reads up to max batches (0: to the epoch's end) into r. */
static void m_read(struct feed_stream *st, struct m_rows *r, int max)
{
	uint32_t fs = m_field(st, "source"), fl = m_field(st, "label");
	struct feed_batch *b;
	int k = 0, rc;

	while ((!max || k < max) && (rc = feed_next(st, H_DEADLINE_MS, &b)) == 0) {
		struct feed_view vs, vl;
		ck_assert_int_eq(feed_batch_field(b, fs, &vs), 0);
		ck_assert_int_eq(feed_batch_field(b, fl, &vl), 0);
		ck_assert_int_eq(vs.dtype, FEED_DTYPE_INT32);
		for (uint32_t i = 0; i < feed_batch_size(b); i++) {
			int32_t s = ((const int32_t *)vs.data)[i];
			ck_assert(s >= 0 && s < 3);
			uint64_t x = feed_batch_samples(b)[i];
			ck_assert_uint_lt(x, m_size[s]);   /* a sample of its own source */
			ck_assert_int_eq(((const int64_t *)vl.data)[i], (int64_t)x);
			ck_assert_uint_lt(r->n, 4 * M_ROWS);
			r->source[r->n] = s;
			r->sample[r->n++] = x;
		}
		feed_release(b);
		k++;
	}
	if (!max)
		ck_assert_int_eq(rc, FEED_END_OF_EPOCH);
}

/* Each prefix of r from row `from` on holds each source's share within a row. */
static void m_assert_shares(const struct m_rows *r, size_t from, const double *w)
{
	uint64_t c[3] = {0};

	for (size_t n = from; n < r->n; n++) {
		c[r->source[n]]++;
		for (int s = 0; s < 3; s++)
			ck_assert_msg(fabs((double)c[s] - w[s] * (double)(n + 1 - from)) < 1.0,
				      "source %d after %zu rows: %llu", s, n + 1 - from,
				      (unsigned long long)c[s]);
	}
}

START_TEST(test_mixture_configured_by_name)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "lm", .batch = M_BATCH, .seed = 3,
				     .order = FEED_ORDER_FULL};
	struct feed_stream *st = h_stream_open(c, &o);
	static struct m_rows r;

	ck_assert_uint_eq(feed_stream_info(st)->batches_per_epoch, M_ROWS / M_BATCH);
	m_read(st, &r, 0);
	ck_assert_uint_eq(r.n, M_ROWS);
	m_assert_shares(&r, 0, (const double[]){0.5, 0.25, 0.25});
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

static const struct feed_mixture_source m_w1[3] = {
	{"web", 0.5, 0, 0}, {"code", 0.25, 0, 0}, {"books", 0.25, 0, 0}};
static const struct feed_mixture_source m_w2[3] = {
	{"web", 0.25, 0, 0}, {"code", 0.25, 0, 0}, {"books", 0.5, 0, 0}};

static struct feed_stream_opts m_opts(const struct feed_mixture_source *src, uint32_t n)
{
	return (struct feed_stream_opts){.batch = M_BATCH, .seed = 3, .order = FEED_ORDER_FULL,
					 .mixture = src, .nmixture = n};
}

/* Source s's own rows, read alone: the sequence any mixture reads it in. */
static void m_alone(struct feed_conn *c, int s, struct m_rows *r)
{
	struct feed_mixture_source one = m_w1[s];
	struct feed_stream_opts o = m_opts(&one, 1);
	o.samples_per_epoch = 3 * M_ROWS;
	struct feed_stream *st = h_stream_open(c, &o);
	m_read(st, r, 0);
	feed_stream_close(st);
}

START_TEST(test_mixture_resume_with_other_weights)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = m_opts(m_w1, 3);
	static struct m_rows r, alone[3];
	uint8_t tok[FEED_RESUME_MAX];
	size_t len;

	struct feed_stream *st = h_stream_open(c, &o);
	m_read(st, &r, 3);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	feed_stream_close(st);
	size_t head = r.n;
	o = m_opts(m_w2, 3);
	o.resume = tok;
	o.resume_len = len;
	st = h_stream_open(c, &o);
	m_read(st, &r, 0);
	feed_stream_close(st);
	ck_assert_uint_eq(r.n, M_ROWS);  /* the epoch's rest */
	m_assert_shares(&r, head, (const double[]){0.25, 0.25, 0.5});
	for (int s = 0; s < 3; s++) {  /* each source from its own position on */
		size_t k = 0;
		m_alone(c, s, &alone[s]);
		for (size_t i = 0; i < r.n; i++)
			if (r.source[i] == s)
				ck_assert_uint_eq(r.sample[i], alone[s].sample[k++]);
	}
	feed_disconnect(c);
}
END_TEST

/* feedd is killed and started again after 2 batches: the client reopens
 * the mixture (its sources kept, the blend's token) and the epoch goes
 * on exactly as an uninterrupted one. */
START_TEST(test_mixture_survives_a_restart)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = m_opts(m_w1, 3);
	static struct m_rows want, got;

	struct feed_stream *st = h_stream_open(c, &o);
	m_read(st, &want, 0);
	feed_stream_close(st);
	o.reconnect_ms = H_DEADLINE_MS;
	st = h_stream_open(c, &o);
	m_read(st, &got, 2);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.2.log", h.dir);
	h_start((const char *[]){"--config", m_cfg, "--workers", "2", NULL});
	m_read(st, &got, 0);
	feed_stream_close(st);
	ck_assert_uint_eq(got.n, want.n);
	ck_assert(!memcmp(got.source, want.source, want.n * sizeof(want.source[0])));
	ck_assert(!memcmp(got.sample, want.sample, want.n * sizeof(want.sample[0])));
	feed_disconnect(c);
}
END_TEST

START_TEST(test_mixture_refusals)
{
	struct feed_conn *c = h_conn_new();
	struct feed_mixture_source bad[2] = {{"web", 1, 0, 0}, {"kinds", 1, 0, 0}};
	struct feed_stream_opts o = m_opts(bad, 2);
	struct feed_stream *st = NULL;

	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "mixture (web, kinds)") &&
		      strstr(feed_errmsg(c), "source 'kinds'") && strstr(feed_errmsg(c), "field"),
		      "%s", feed_errmsg(c));
	o = m_opts(m_w1, 3);
	o.group = "g";
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "group"), "%s", feed_errmsg(c));

	/* a dataset's token is not a mixture's, nor the other way */
	struct feed_stream_opts d = {.dataset = "web", .batch = M_BATCH};
	uint8_t tok[FEED_RESUME_MAX];
	size_t len;
	st = h_stream_open(c, &d);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	feed_stream_close(st);
	o = m_opts(m_w1, 3);
	o.resume = tok;
	o.resume_len = len;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "not a mixture"), "%s", feed_errmsg(c));
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mixture_stream");
	TCase *tc = tcase_create("mixture_stream");

	tcase_add_checked_fixture(tc, m_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_mixture_configured_by_name);
	tcase_add_test(tc, test_mixture_resume_with_other_weights);
	tcase_add_test(tc, test_mixture_survives_a_restart);
	tcase_add_test(tc, test_mixture_refusals);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
