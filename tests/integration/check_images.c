/*
 * check_images.c: encoded images through a real feedd (issue 12). A small
 * dataset of the image fixtures (tests/images/make_fixtures.py: real
 * photographs, odd sizes, progressive, gray, CMYK, PNG variants), written
 * with the format library as feedpack imagefolder writes it (field
 * `image`, the file as it is, its header's dimensions noted; label i64):
 * - batches of `decode | random_resized_crop(size=64) | hflip(p=0.5)` hold,
 *   sample for sample, what core's aug_apply_img() makes of the same record
 *   for the same seed, epoch and sample, and the labels pass through;
 * - the same spec twice, and --workers 1 against --workers 2, give the same
 *   bytes; another seed gives other bytes;
 * - a corrupt image stops its stream with an error naming the dataset, the
 *   sample and the decoder's words, while a stream of another dataset on
 *   the same daemon is served to its end;
 * - the config's limits.max_pixels caps the decoders: larger images fail
 *   with -E2BIG naming the limit.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../images/fixture_file.h"
#include "augment.h"
#include "feed/stream.h"
#include "feedd_harness.h"
#include "fmt.h"
#include "image.h"

#define PIPE "decode | random_resized_crop(size=64) | hflip(p=0.5)"
#define OUT_BYTES (64 * 64 * 3)
#define BATCH 4
#define EPOCHS 2
#define SEED 77
#define MAX_BATCHES 64

static const char *const files[] = {
	"photo_00.jpg", "photo_01.jpg", "photo_02.jpg", "photo_03.jpg", "photo_04.jpg",
	"photo_05.jpg", "rgb420.jpg",   "rgb422.jpg",   "progressive.jpg", "gray.jpg",
	"cmyk.jpg",     "small.jpg",    "tiny.jpg",     "rgb8.png",     "palette.png",
	"rgba.png",     "gray16.png",   "interlaced.png"};
#define NFILES (sizeof(files) / sizeof(files[0]))
#define BAD_SAMPLE 5 /* in dataset "bad": bad_garbage.jpg */


/* The file of record i: files[] in order, or with the bad one at
 * BAD_SAMPLE. */
static const char *file_of(uint64_t i, bool bad)
{
	return bad && i == BAD_SAMPLE ? "bad_garbage.jpg" : files[i];
}

/* Writes the dataset at h.dir/name (once per test): a few records per
 * block, so workers build from different blocks. */
static const char *make_dataset(const char *name, bool bad)
{
	static char dir[3][160];
	char *d = dir[bad ? 2 : name[4] ? 1 : 0];
	struct fmt_schema s = {.nfields = 2};
	struct fmt_writer *w;
	struct feed_err err = {0};

	if (d[0])
		return d;
	snprintf(d, sizeof dir[0], "%s/%s", h.dir, name);
	strcpy(s.fields[0].name, "image");
	s.fields[0].dtype = FEED_DTYPE_U8;
	s.fields[0].variable = true;
	s.fields[0].image = true;
	s.fields[0].max_bytes = 1;
	strcpy(s.fields[1].name, "label");
	s.fields[1].dtype = FEED_DTYPE_I64;
	s.fields[1].max_bytes = 8;
	struct fmt_writer_opts o = {.name = name, .block_records = 3};
	ck_assert_msg(fmt_writer_new(d, &s, &o, &w, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < NFILES; i++) {
		size_t len;
		uint8_t *p = fixture_file(file_of(i, bad), &len);
		int64_t label = (int64_t)i;
		struct fmt_value v[2] = {{p, len}, {&label, 8}};
		struct img_info info;
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(img_probe(p, len, &info, NULL), 0);
		ck_assert_msg(fmt_writer_note_image(w, 0, info.width, info.height, &err) == 0, "%s",
			      err.msg);
		free(p);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
	return d;
}

static void start(const char *workers, bool with_bad)
{
	static char a[200], b[200];

	snprintf(a, sizeof a, "imgs=%s", make_dataset("imgs", false));
	if (with_bad) {
		snprintf(b, sizeof b, "bad=%s", make_dataset("bad", true));
		h_start((const char *[]){"--dataset", a, "--dataset", b, "--workers", workers, NULL});
	} else {
		h_start((const char *[]){"--dataset", a, "--workers", workers, NULL});
	}
}

/* What core makes of record idx for (SEED, epoch): the plan on the open
 * dataset's schema, its decoders made for the plan's limits. */
struct expect {
	struct fmt_dataset *ds;
	struct pipe_plan *plan;
	struct aug_img ai;
	void *scratch;
	uint8_t *rec[NFILES];
	size_t len[NFILES];
};

static void expect_open(struct expect *e, const char *dir)
{
	struct feed_err err = {0};

	memset(e, 0, sizeof(*e));
	ck_assert_msg(fmt_dataset_open(dir, &e->ds, &err) == 0, "%s", err.msg);
	e->plan = calloc(1, sizeof(*e->plan));
	ck_assert_msg(pipe_plan_text(PIPE, fmt_dataset_info(e->ds)->schema, e->plan, &err) == 0,
		      "%s", err.msg);
	ck_assert_int_eq(img_decoder_new(&e->plan->dec_lim, 3, &e->ai.dec3, NULL), 0);
	e->scratch = malloc(pipe_scratch_bytes(e->plan) + 64);
	for (uint64_t i = 0; i < NFILES; i++)
		e->rec[i] = fixture_file(files[i], &e->len[i]);
}

static void expect_sample(struct expect *e, uint64_t epoch, uint64_t idx, uint8_t *out)
{
	struct aug_ctx ctx = {.seed = SEED, .epoch = epoch, .sample = idx};
	int64_t label;
	size_t got = 0;
	struct aug_in in[2] = {{e->rec[idx], e->len[idx]}, {&idx, 8}};
	struct aug_out o[2] = {{out, OUT_BYTES, &got}, {&label, 8, NULL}};
	struct feed_err err = {0};

	ck_assert_msg(aug_apply_img(e->plan, &ctx, in, o, e->scratch, &e->ai, &err) == 0, "%s",
		      err.msg);
	ck_assert_uint_eq(got, OUT_BYTES);
}

static void expect_close(struct expect *e)
{
	for (uint64_t i = 0; i < NFILES; i++)
		free(e->rec[i]);
	img_decoder_free(e->ai.dec3);
	free(e->scratch);
	free(e->plan);
	fmt_dataset_close(e->ds);
}

/* FNV-1a, 64 bits. */
static uint64_t fnv(uint64_t x, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		x = (x ^ b[i]) * 0x100000001b3ull;
	return x;
}

struct run {
	uint64_t n;
	uint64_t hash[MAX_BATCHES];
};

/* Reads EPOCHS epochs of PIPE in full order; hashes each batch, and when
 * e is given checks every sample against it. */
static void read_all(uint64_t seed, struct expect *e, struct run *out)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "imgs", .batch = BATCH, .epochs = EPOCHS,
				     .seed = seed, .order = FEED_ORDER_FULL, .pipeline = PIPE};
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_batch *b;
	static uint8_t want[OUT_BYTES];
	uint64_t seen = 0;
	int r;

	memset(out, 0, sizeof(*out));
	ck_assert_uint_eq(feed_stream_info(st)->num_fields, 2);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		ck_assert_uint_lt(out->n, MAX_BATCHES);
		struct feed_view img, lab;
		ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
		ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
		uint32_t n = feed_batch_size(b);
		const uint64_t *smp = feed_batch_samples(b);
		ck_assert_uint_eq(img.bytes, (uint64_t)n * OUT_BYTES);
		uint64_t x = fnv(0xcbf29ce484222325ull, smp, 8ull * n);
		x = fnv(x, img.data, img.bytes);
		for (uint32_t i = 0; e && i < n; i++) {
			int64_t label;
			memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
			ck_assert_int_eq(label, (int64_t)smp[i]);
			expect_sample(e, feed_batch_epoch(b), smp[i], want);
			ck_assert_msg(!memcmp((const uint8_t *)img.data + (size_t)i * OUT_BYTES, want,
					      OUT_BYTES),
				      "epoch %" PRIu64 " sample %" PRIu64 " (%s): bytes differ from "
				      "core's", feed_batch_epoch(b), smp[i], files[smp[i]]);
			seen++;
		}
		out->hash[out->n++] = x;
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(out->n, EPOCHS * ((NFILES + BATCH - 1) / BATCH));
	if (e)
		ck_assert_uint_eq(seen, EPOCHS * NFILES);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}

START_TEST(test_images_batches_equal_core)
{
	struct expect e;
	struct run a;

	start("2", false);
	expect_open(&e, make_dataset("imgs-copy", false)); /* the same bytes, read by the test */
	read_all(SEED, &e, &a);
	expect_close(&e);
}
END_TEST

START_TEST(test_images_same_spec_same_bytes)
{
	static struct run a, b, other, one;
	char old[200];
	uint64_t differ = 0;

	start("2", false);
	read_all(SEED, NULL, &a);
	read_all(SEED, NULL, &b);
	ck_assert_uint_eq(a.n, b.n);
	ck_assert_mem_eq(a.hash, b.hash, a.n * sizeof(a.hash[0]));
	read_all(SEED + 1, NULL, &other);
	for (uint64_t i = 0; i < a.n; i++)
		differ += a.hash[i] != other.hash[i];
	ck_assert_uint_eq(differ, a.n);
	ck_assert_int_eq(h_stop(), 0);
	snprintf(old, sizeof old, "%s.1", h.log);
	ck_assert_int_eq(rename(h.log, old), 0);
	start("1", false);
	read_all(SEED, NULL, &one);
	ck_assert_uint_eq(a.n, one.n);
	ck_assert_mem_eq(a.hash, one.hash, a.n * sizeof(a.hash[0]));
}
END_TEST

START_TEST(test_images_bad_image_stops_its_stream)
{
	struct feed_batch *b;
	int r;

	start("2", true);
	struct feed_conn *c = h_conn_new(), *c2 = h_conn_new();
	struct feed_stream_opts o = {.dataset = "bad", .batch = 2, .epochs = 1, .credits = 2,
				     .pipeline = PIPE};
	struct feed_stream *st = h_stream_open(c, &o);
	/* batches 0 and 1 (samples 0..3) come, the one holding sample 5 fails */
	for (int k = 0; k < 2; k++) {
		r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r == 0, "batch %d: %s: %s", k, feed_strerror(r), feed_errmsg(c));
		ck_assert_int_eq(feed_release(b), 0);
	}
	r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == -EBADMSG, "got %d: %s", r, feed_errmsg(c));
	const char *msg = feed_errmsg(c);
	ck_assert_msg(strstr(msg, "dataset 'bad': sample 5: field 'image': "), "%s", msg);
	ck_assert_msg(strstr(msg, "JPEG"), "no decoder words in '%s'", msg);
	ck_assert_int_eq(feed_next(st, 0, &b), -EBADMSG); /* stopped for good */
	/* another stream on the same daemon is served to its end */
	struct feed_stream_opts o2 = {.dataset = "imgs", .batch = 3, .epochs = 1, .credits = 2,
				      .pipeline = PIPE};
	struct feed_stream *ok = h_stream_open(c2, &o2);
	uint64_t got = 0;
	while ((r = feed_next(ok, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c2));
		got += feed_batch_size(b);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(got, NFILES);
	ck_assert_int_eq(feed_stream_close(ok), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c2);
	feed_disconnect(c);
	/* and the daemon logged why the stream stopped */
	ck_assert(h_log_line_has("stopped", "dataset 'bad': sample 5: field 'image'"));
}
END_TEST

/* on_error skip, through the C client: in sequential order sample 5 (the
 * bad one) is replaced by sample 6, built with its own draws (so the two
 * positions hold the same bytes), the batch keeps its size and says which
 * position; the epoch holds every other sample once. */
START_TEST(test_images_skip_replaces_bad_sample)
{
	struct feed_batch *b;
	uint64_t seen[NFILES] = {0}, got = 0, replaced = 0;
	int r;

	start("2", true);
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "bad", .batch = 4, .epochs = 1, .credits = 2,
				     .pipeline = PIPE, .on_error = FEED_ON_ERROR_SKIP,
				     .max_bad = 1};
	struct feed_stream *st = h_stream_open(c, &o);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		const uint64_t *idx = feed_batch_samples(b), *bits;
		uint32_t n = feed_batch_replaced(b, &bits);
		for (uint32_t i = 0; i < feed_batch_size(b); i++)
			seen[idx[i]]++;
		if (feed_batch_index(b) == BAD_SAMPLE / 4) {
			struct feed_view v;
			ck_assert_int_eq(n, 1);
			ck_assert_uint_eq(bits[0], 1u << (BAD_SAMPLE % 4));
			ck_assert_uint_eq(idx[BAD_SAMPLE % 4], BAD_SAMPLE + 1);
			ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
			const uint8_t *px = v.data;
			ck_assert(!memcmp(px + (BAD_SAMPLE % 4) * OUT_BYTES,
					  px + (BAD_SAMPLE % 4 + 1) * OUT_BYTES, OUT_BYTES));
		} else {
			ck_assert_int_eq(n, 0);
			ck_assert_ptr_null(bits);
		}
		got += feed_batch_size(b);
		replaced += n;
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(got, NFILES);
	ck_assert_uint_eq(replaced, 1);
	for (uint64_t i = 0; i < NFILES; i++)
		ck_assert_uint_eq(seen[i], i == BAD_SAMPLE ? 0 : i == BAD_SAMPLE + 1 ? 2 : 1);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	ck_assert(h_log_line_has("on_error skip", "dataset 'bad': sample 5: field 'image'"));
}
END_TEST

/* limits.max_pixels caps the decoders: an image past it (the photographs
 * here, but not the 64x48 one) fails with -E2BIG naming the limit. */
START_TEST(test_images_max_pixels_from_config)
{
	static char a[200];
	struct feed_batch *b;

	snprintf(a, sizeof a, "imgs=%s", make_dataset("imgs", false));
	const char *cfg = h_write_file("feedd.yaml", "limits:\n  max_pixels: 100000\n");
	h_start((const char *[]){"--config", cfg, "--dataset", a, "--workers", "1", NULL});
	struct feed_conn *c = h_conn_new();
	/* sample 11 (small.jpg, 64x48) decodes */
	struct feed_stream_opts o = {.dataset = "imgs", .batch = 1, .epochs = 1, .credits = 1,
				     .pipeline = PIPE, .start_batch = 11};
	struct feed_stream *st = h_stream_open(c, &o);
	int r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	/* sample 0 (a photograph, > 100000 pixels) does not */
	o.start_batch = 0;
	st = h_stream_open(c, &o);
	r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == -E2BIG, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "dataset 'imgs': sample 0: field 'image': "), "%s",
		      feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "100000"), "limit not named: %s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* Lowering limits.max_pixels by a reload takes effect for the jobs that
 * start after it: the worker's decoders, made for the photographs under
 * the default cap, are made again for the lower one (they were kept). */
START_TEST(test_images_max_pixels_lowered_by_reload)
{
	static char a[200];
	struct feed_reload_result *res = NULL;
	struct feed_batch *b;

	snprintf(a, sizeof a, "imgs=%s", make_dataset("imgs", false));
	const char *cfg = h_write_file("feedd.yaml", "workers: 1\n");
	h_start((const char *[]){"--config", cfg, "--dataset", a, NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "imgs", .batch = 1, .epochs = 1, .credits = 1,
				     .pipeline = PIPE};
	struct feed_stream *st = h_stream_open(c, &o);
	int r = feed_next(st, H_DEADLINE_MS, &b);  /* a photograph, under the default */
	ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);

	h_write_file("feedd.yaml", "workers: 1\nlimits:\n  max_pixels: 100000\n");
	r = feed_reload(c, &res);
	ck_assert_msg(r == 0, "feed_reload: %d: %s", r, feed_errmsg(c));
	feed_reload_result_free(res);
	st = h_stream_open(c, &o);
	r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == -E2BIG, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "100000"), "limit not named: %s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

static Suite *images_suite(void)
{
	Suite *s = suite_create("images");
	TCase *tc = tcase_create("images");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_images_batches_equal_core);
	tcase_add_test(tc, test_images_same_spec_same_bytes);
	tcase_add_test(tc, test_images_bad_image_stops_its_stream);
	tcase_add_test(tc, test_images_skip_replaces_bad_sample);
	tcase_add_test(tc, test_images_max_pixels_from_config);
	tcase_add_test(tc, test_images_max_pixels_lowered_by_reload);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(images_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
