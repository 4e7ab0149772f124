/*
 * check_delivery.c: batches from a real feedd, seen from the trainer's
 * side (DESIGN.md "Delivery", "Security", "Failure behaviour"): a whole
 * epoch of the real Fashion-MNIST byte for byte against its IDX files;
 * variable-length fields; a block corrupted under a running feedd;
 * pipelines refused by name. What a client may not do to feedd and to
 * others is in check_isolation.c.
 *
 * main() packs the Fashion-MNIST train split once (feedpack idx) and
 * loads the IDX bytes it compares against; each test starts its own feedd
 * serving that pack as "fashion" and the harness's dataset as "tiny"
 * (H_SAMPLES records: image u8[4,4] filled with i, label i64 i).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "feed/stream.h"
#include "feedd_harness.h"
#include "fmt.h"

#define FM_SIDE 28
#define FM_PIXELS (FM_SIDE * FM_SIDE)

static char fm_dir[128];   /* the packed train split */
static uint8_t *src_images; /* the IDX files' records, FM_PIXELS bytes each */
static uint8_t *src_labels;
static uint64_t src_n;

/* ------------------------------------------------------------------ */
/* The daemon and libfeedclient                                        */

/* Starts feedd serving "tiny" and "fashion", with extra args after. */
static void start(const char *const *extra)
{
	static char tiny[160], fashion[160];
	const char *args[24] = {"--dataset", tiny, "--dataset", fashion, "--workers", "2"};
	size_t n = 6;

	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	snprintf(fashion, sizeof(fashion), "fashion=%s", fm_dir);
	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	h_start(args);
}

/* ------------------------------------------------------------------ */
/* Test 1: an epoch of Fashion-MNIST, byte for byte                    */

/* One epoch with the given order: each batch's samples and bytes against
 * the IDX files, the last batch (partial as DataLoader's by default, full
 * with pad_last, cut with drop_last), and the multiplicity of every
 * sample. */
static void fashion_epoch(struct feed_conn *c, int order, bool drop_last, bool pad_last)
{
	const uint32_t B = 256;
	struct feed_stream_opts o = {.dataset = "fashion", .batch = B, .epochs = 1, .seed = 42,
				     .order = order, .drop_last = drop_last, .pad_last = pad_last};
	uint64_t nb = drop_last ? src_n / B : (src_n + B - 1) / B;
	uint64_t total = drop_last || pad_last ? nb * B : src_n;
	uint64_t *at = calloc(total, sizeof(*at));   /* sample at each position */
	uint32_t *seen = calloc(src_n, sizeof(*seen));
	struct feed_stream *st = h_stream_open(c, &o);
	const struct feed_stream_info *in = feed_stream_info(st);
	struct feed_batch *b;
	uint64_t got = 0;
	int r, ends = 0;

	ck_assert_uint_eq(in->batches_per_epoch, nb);
	ck_assert_uint_eq(in->num_fields, 2);
	ck_assert_str_eq(in->fields[0].name, "image");
	ck_assert_str_eq(in->fields[1].name, "label");
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(got, nb);
			ends++;
			continue;
		}
		ck_assert_msg(r == 0, "batch %llu: %s: %s", (unsigned long long)got,
			      feed_strerror(r), feed_errmsg(c));
		struct feed_view img, lab;
		const uint64_t *idx = feed_batch_samples(b);
		ck_assert_uint_eq(feed_batch_epoch(b), 0);
		ck_assert_uint_eq(feed_batch_index(b), got);
		/* 60,000 at 256: 234 batches of 256, then 96 (or 256 padded) */
		uint32_t n = total - got * B < B ? (uint32_t)(total - got * B) : B;
		ck_assert_uint_eq(feed_batch_size(b), n);
		/* padded exactly when the batch reaches past the dataset */
		ck_assert_int_eq(feed_batch_padded(b), got * B + n > src_n);
		ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
		ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
		ck_assert_int_eq(img.dtype, in->fields[0].dtype);
		ck_assert_uint_eq(img.rank, 4);
		ck_assert_uint_eq(img.shape[0], n);
		ck_assert_uint_eq(img.shape[1], FM_SIDE);
		ck_assert_uint_eq(img.shape[2], FM_SIDE);
		ck_assert_uint_eq(img.shape[3], 1);
		ck_assert_uint_eq(img.bytes, (uint64_t)n * FM_PIXELS);
		ck_assert_ptr_null(img.ends);
		ck_assert_uint_eq(lab.rank, 1);
		ck_assert_uint_eq(lab.bytes, n);
		for (uint32_t i = 0; i < n; i++) {
			ck_assert_uint_lt(idx[i], src_n);
			at[got * B + i] = idx[i];
			ck_assert_msg(!memcmp((const uint8_t *)img.data + (size_t)i * FM_PIXELS,
					      src_images + idx[i] * FM_PIXELS, FM_PIXELS),
				      "batch %llu sample %u (index %llu): image differs from the IDX file",
				      (unsigned long long)got, i, (unsigned long long)idx[i]);
			ck_assert_msg(((const uint8_t *)lab.data)[i] == src_labels[idx[i]],
				      "batch %llu sample %u: label differs", (unsigned long long)got, i);
		}
		ck_assert_int_eq(feed_release(b), 0);
		got++;
	}
	ck_assert_int_eq(ends, 1);
	ck_assert_uint_eq(got, nb);
	for (uint64_t p = 0; p < total && p < src_n; p++)
		seen[at[p]]++;
	/* before the padding, no sample twice; with it, every sample */
	uint64_t once = 0;
	for (uint64_t s = 0; s < src_n; s++) {
		ck_assert_msg(seen[s] <= 1, "sample %llu read %u times before any padding",
			      (unsigned long long)s, seen[s]);
		once += seen[s];
	}
	ck_assert_uint_eq(once, total < src_n ? total : src_n);
	for (uint64_t p = src_n; p < total; p++)   /* padding wraps to the epoch's start */
		ck_assert_uint_eq(at[p], at[p - src_n]);
	if (order == FEED_ORDER_SEQUENTIAL)
		for (uint64_t p = 0; p < total; p++)
			ck_assert_uint_eq(at[p], p % src_n);
	else
		ck_assert_uint_ne(at[0] + 1, at[1]);  /* shuffled, not the dataset's order */
	ck_assert_int_eq(feed_stream_close(st), 0);
	free(at);
	free(seen);
}

START_TEST(test_delivery_fashion_epoch_bytes)
{
	start(NULL);
	struct feed_conn *c = h_conn_new();
	fashion_epoch(c, FEED_ORDER_SEQUENTIAL, false, false);
	fashion_epoch(c, FEED_ORDER_FULL, false, false);
	fashion_epoch(c, FEED_ORDER_FULL, false, true);
	fashion_epoch(c, FEED_ORDER_FULL, true, false);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 2: variable-length fields                                      */

#define VAR_N 23

/* Sample i: tokens u16[tok_len(i)] = i*100 + j; pts f32[pts_len(i), 2] =
 * (i, j); id i64 = i. Some records are empty. */
static uint32_t tok_len(uint64_t i) { return (uint32_t)((i * 7) % 13); }
static uint32_t pts_len(uint64_t i) { return (uint32_t)(i % 4 + 1); }

static void var_dataset(const char *dir)
{
	struct fmt_schema s = {.nfields = 3};
	struct fmt_writer *w;
	struct feed_err err = {0};
	uint16_t tok[16];
	float pts[16];

	s.fields[0] = (struct fmt_field){.name = "tokens", .dtype = FEED_DTYPE_U16,
					 .variable = true};
	s.fields[1] = (struct fmt_field){.name = "pts", .dtype = FEED_DTYPE_F32, .rank = 1,
					 .shape = {2}, .variable = true};
	s.fields[2] = (struct fmt_field){.name = "id", .dtype = FEED_DTYPE_I64};
	/* small blocks: a batch spans several */
	ck_assert_msg(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.name = "var",
									 .block_records = 4},
				     &w, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < VAR_N; i++) {
		int64_t id = (int64_t)i;
		for (uint32_t j = 0; j < tok_len(i); j++)
			tok[j] = (uint16_t)(i * 100 + j);
		for (uint32_t j = 0; j < pts_len(i); j++) {
			pts[2 * j] = (float)i;
			pts[2 * j + 1] = (float)j;
		}
		struct fmt_value v[3] = {{tok, 2 * tok_len(i)}, {pts, 8 * pts_len(i)}, {&id, 8}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

/* Field f of b is variable: rank, shape, ends, and sample i's bytes. */
static void var_check_field(struct feed_batch *b, uint32_t f, size_t elem_bytes, uint32_t rank)
{
	struct feed_view v;
	const uint64_t *idx = feed_batch_samples(b);
	uint32_t n = feed_batch_size(b);

	ck_assert_int_eq(feed_batch_field(b, f, &v), 0);
	ck_assert_uint_eq(v.rank, rank);
	ck_assert_uint_eq(v.shape[0], n);
	ck_assert_uint_eq(v.shape[1], 0);
	if (rank == 3)
		ck_assert_uint_eq(v.shape[2], 2);
	ck_assert_ptr_nonnull(v.ends);
	ck_assert_uint_eq(v.ends[0], 0);
	ck_assert_uint_eq(v.ends[n], v.bytes);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t s = idx[i], len = v.ends[i + 1] - v.ends[i];
		const uint8_t *p = (const uint8_t *)v.data + v.ends[i];
		if (f == 0) {
			ck_assert_uint_eq(len, elem_bytes * tok_len(s));
			for (uint32_t j = 0; j < tok_len(s); j++) {
				uint16_t t;
				memcpy(&t, p + 2 * j, 2);
				ck_assert_uint_eq(t, s * 100 + j);
			}
		} else {
			ck_assert_uint_eq(len, elem_bytes * pts_len(s));
			for (uint32_t j = 0; j < pts_len(s); j++) {
				float xy[2];
				memcpy(xy, p + 8 * j, 8);
				ck_assert(xy[0] == (float)s && xy[1] == (float)j);
			}
		}
	}
}

static void var_epochs(struct feed_conn *c, int order)
{
	const uint32_t B = 5;
	struct feed_stream_opts o = {.dataset = "var", .batch = B, .epochs = 2, .seed = 3,
				     .order = order, .credits = 3};
	struct feed_stream *st = h_stream_open(c, &o);
	const struct feed_stream_info *in = feed_stream_info(st);
	uint32_t seen[VAR_N] = {0};
	uint64_t nb = (VAR_N + B - 1) / B, got = 0;
	struct feed_batch *b;
	int r;

	ck_assert_uint_eq(in->batches_per_epoch, nb);
	ck_assert(in->fields[0].variable && in->fields[1].variable && !in->fields[2].variable);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		uint64_t bi = got % nb;
		ck_assert_uint_eq(feed_batch_epoch(b), got / nb);
		ck_assert_uint_eq(feed_batch_index(b), bi);
		uint32_t n = bi + 1 == nb ? VAR_N - bi * B : B;  /* the last one partial */
		ck_assert_uint_eq(feed_batch_size(b), n);
		ck_assert(!feed_batch_padded(b));
		var_check_field(b, 0, 2, 2);
		var_check_field(b, 1, 8, 3);
		struct feed_view id;
		ck_assert_int_eq(feed_batch_field(b, 2, &id), 0);
		ck_assert_ptr_null(id.ends);
		for (uint32_t i = 0; i < n; i++) {
			int64_t v;
			memcpy(&v, (const uint8_t *)id.data + 8 * i, 8);
			ck_assert_int_eq(v, (int64_t)feed_batch_samples(b)[i]);
			if (got < nb && bi * B + i < VAR_N)
				seen[feed_batch_samples(b)[i]]++;
		}
		ck_assert_int_eq(feed_release(b), 0);
		got++;
	}
	ck_assert_uint_eq(got, 2 * nb);
	for (int s = 0; s < VAR_N; s++)
		ck_assert_uint_eq(seen[s], 1);
	ck_assert_int_eq(feed_stream_close(st), 0);
}

START_TEST(test_delivery_variable_length_ends)
{
	static char arg[160];
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/var", h.dir);
	var_dataset(dir);
	snprintf(arg, sizeof(arg), "var=%s", dir);
	start((const char *[]){"--dataset", arg, NULL});
	struct feed_conn *c = h_conn_new();
	var_epochs(c, FEED_ORDER_SEQUENTIAL);
	var_epochs(c, FEED_ORDER_FULL);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 3: a block that fails its checksum while serving              */

/* Flips one byte of the tiny dataset's block 0 (its frame starts at byte
 * 64 of the shard, FORMAT.md) under a running feedd. */
static void tiny_corrupt_block0(void)
{
	char path[200];
	uint8_t byte;

	snprintf(path, sizeof(path), "%s/shard-00000.fsh", h.data);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, 64 + 6), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, 64 + 6), 1);
	close(fd);
}

START_TEST(test_delivery_corrupt_block_stops_stream)
{
	struct feed_conn *c;
	struct feed_batch *b;
	char line[300];

	start(NULL);
	tiny_corrupt_block0();
	c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	int r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == -EBADMSG, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "shard-00000.fsh: block 0: checksum mismatch"), "%s",
		      feed_errmsg(c));
	/* the daemon says so in its log while the stream is still open */
	snprintf(line, sizeof(line), "stream %u stopped: sample ", feed_stream_info(st)->id);
	const char *why = "/fm/shard-00000.fsh: block 0: checksum mismatch";
	ck_assert_msg(h_log_line_has(line, why), "no '%s...%s' in the log:\n%s", line, why,
		      h_file_text(h.log));
	/* stopped for good, and everyone else is served */
	ck_assert_int_eq(feed_next(st, 0, &b), -EBADMSG);
	struct feed_stream_opts o = {.dataset = "fashion", .batch = 256, .credits = 2};
	struct feed_stream *other = h_stream_open(c, &o);
	ck_assert_int_eq(feed_next(other, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(other), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

/* A batch that fails (its block is corrupt) ends the stream only after
 * every batch before it: the reader gets batches 0..8 whole and in order,
 * then the error. Before, the error went to the ready queue as soon as the
 * failing build ended, ahead of earlier batches still being built. */
START_TEST(test_delivery_error_after_earlier_batches)
{
	char dir[160], arg[200], path[220];
	struct fmt_dataset *ds;
	struct feed_err err = {0};
	struct feed_batch *b;
	uint64_t off = 64;   /* block 0's frame; each block starts where the last ends */
	uint8_t byte;

	snprintf(dir, sizeof(dir), "%s/blk", h.dir);
	h_make_dataset_blocks(dir, 40, 4);   /* 10 blocks of 4 records */
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), 0);
	for (uint64_t k = 0; k < 9; k++) {
		struct fmt_block_meta m;
		ck_assert_int_eq(fmt_dataset_block_meta(ds, k, &m), 0);
		ck_assert_uint_eq(m.shard, 0);
		off += m.comp_size;
	}
	fmt_dataset_close(ds);
	snprintf(path, sizeof(path), "%s/shard-00000.fsh", dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, (off_t)off + 6), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)off + 6), 1);
	close(fd);

	snprintf(arg, sizeof(arg), "blk=%s", dir);
	start((const char *[]){"--dataset", arg, NULL});
	struct feed_conn *c = h_conn_new();
	/* every batch scheduled at once; the good ones take longer to build */
	struct feed_stream_opts o = {.dataset = "blk", .batch = 4, .credits = 16, .epochs = 1,
				     .order = FEED_ORDER_SEQUENTIAL,
				     .pipeline = "resize(h=256, w=256) | resize(h=4, w=4)"};
	struct feed_stream *st = h_stream_open(c, &o);
	for (uint64_t i = 0; i < 9; i++) {
		int r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r == 0, "batch %llu: got %d (%s) before it", (unsigned long long)i, r,
			      feed_errmsg(c));
		ck_assert_uint_eq(feed_batch_index(b), i);
		ck_assert_uint_eq(feed_batch_samples(b)[0], 4 * i);
		ck_assert_int_eq(feed_release(b), 0);
	}
	int r = feed_next(st, H_DEADLINE_MS, &b);
	ck_assert_msg(r == -EBADMSG, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "block 9: checksum mismatch"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 3b: an event loop of the caller's own, on feed_stream_fd()     */

START_TEST(test_delivery_stream_fd_wakes_poller)
{
	struct feed_batch *b;
	int slept = 0;

	start(NULL);
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 1);  /* one credit: one batch at a time */
	for (int round = 0; round < 40; round++) {
		int r;
		/* drain what is ready, as an event loop does when woken */
		while ((r = feed_next(st, 0, &b)) == FEED_END_OF_EPOCH)
			;
		if (r == -ETIMEDOUT) {
			/* armed: the descriptor must become readable at the next publish */
			struct pollfd p = {.fd = feed_stream_fd(st), .events = POLLIN};
			ck_assert_msg(poll(&p, 1, H_DEADLINE_MS) == 1,
				      "round %d: feed_stream_fd() never became readable", round);
			slept++;
			while ((r = feed_next(st, 0, &b)) == FEED_END_OF_EPOCH)
				;
		}
		ck_assert_msg(r == 0, "round %d: %d: %s", round, r, feed_errmsg(c));
		h_tiny_check(b);
		ck_assert_int_eq(feed_release(b), 0);
	}
	/* with one credit the next batch is built only after a release, so a
	 * poll right after releasing finds nothing nearly every time */
	ck_assert_int_gt(slept, 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 4: pipelines refused by name                                   */

START_TEST(test_delivery_bad_pipeline_named)
{
	static const struct {
		const char *dataset, *pipeline, *needle;
	} bad[] = {
		{"fashion", "blur(p=1)", "pipeline op 1 'blur': unknown op"},
		{"fashion", "hflip(p=0.5) | random_crop(pad=2)",
		 "pipeline op 2 'random_crop': missing key 'size'"},
		{"fashion", "hflip(p=2)", "pipeline op 1 'hflip': key 'p': 2 not in [0, 1]"},
		{"fashion", "hflip(q=0.5)", "pipeline op 1 'hflip': unknown key 'q'"},
		{"fashion", "random_crop(size=x)", "pipeline op 1 'random_crop': key 'size': bad number"},
		{"fashion", "random_crop(size=40, pad=2)",
		 "pipeline op 1 'random_crop': key 'size': crop 40 larger than the padded image 32x32"},
		{"fashion", "hflip(field=nope)", "pipeline op 1 'hflip': key 'field': no field 'nope'"},
		{"tiny", "random_window(len=4)", "pipeline op 1 'random_window': missing key 'field'"},
	};
	struct feed_stream *st;

	start(NULL);
	struct feed_conn *c = h_conn_new();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct feed_stream_opts o = {.dataset = bad[i].dataset, .batch = 4,
					     .pipeline = bad[i].pipeline};
		int r = feed_stream_open(c, &o, &st);
		ck_assert_msg(r == -EINVAL, "'%s': got %d", bad[i].pipeline, r);
		ck_assert_msg(strstr(feed_errmsg(c), bad[i].needle), "'%s': message '%s' lacks '%s'",
			      bad[i].pipeline, feed_errmsg(c), bad[i].needle);
		ck_assert_msg(strstr(feed_errmsg(c), bad[i].dataset), "'%s' does not name the dataset",
			      feed_errmsg(c));
	}
	/* The connection is as good as new. */
	struct feed_stream_opts ok = {.dataset = "fashion", .batch = 4, .epochs = 1,
				      .pipeline = "random_crop(size=28, pad=2) | hflip(p=0.5)"};
	st = h_stream_open(c, &ok);
	ck_assert_str_eq(feed_stream_info(st)->pipeline,
			 "random_crop(size=28, pad=2, field=image) | hflip(p=0.5, field=image)");
	struct feed_batch *b;
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	struct feed_stream *t = h_tiny_open(c, 2, 2);
	h_tiny_read(t, 6);
	ck_assert_int_eq(feed_stream_close(t), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Setup once: pack Fashion-MNIST, load its IDX files                  */

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an IDX file (gzip) whole: its records after a header of ndims. */
static int idx_load(const char *name, uint32_t magic, int ndims, uint64_t rec, uint8_t **ret,
		    uint64_t *ret_n)
{
	char path[256];
	uint8_t hdr[16];
	int hlen = 4 + 4 * ndims;

	snprintf(path, sizeof(path), "%s/%s", H_FASHION_DIR, name);
	gzFile gz = gzopen(path, "rb");
	if (!gz)
		return -1;
	if (gzread(gz, hdr, (unsigned)hlen) != hlen || be32(hdr) != magic) {
		gzclose(gz);
		return -1;
	}
	uint64_t n = be32(hdr + 4);
	uint8_t *buf = malloc(n * rec);
	if (!buf || gzread(gz, buf, (unsigned)(n * rec)) != (int)(n * rec)) {
		free(buf);
		gzclose(gz);
		return -1;
	}
	gzclose(gz);
	*ret = buf;
	*ret_n = n;
	return 0;
}

static int fashion_prepare(void)
{
	uint64_t nl;

	if (h_fashion_pack("train", fm_dir, sizeof(fm_dir)) < 0)
		return -1;
	if (idx_load("train-images-idx3-ubyte.gz", 0x803, 3, FM_PIXELS, &src_images, &src_n) < 0 ||
	    idx_load("train-labels-idx1-ubyte.gz", 0x801, 1, 1, &src_labels, &nl) < 0 ||
	    nl != src_n) {
		fprintf(stderr, "check_delivery: cannot read the IDX files in %s\n", H_FASHION_DIR);
		return -1;
	}
	return 0;
}

static Suite *delivery_suite(void)
{
	Suite *s = suite_create("delivery");
	TCase *tc = tcase_create("delivery");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_delivery_fashion_epoch_bytes);
	tcase_add_test(tc, test_delivery_variable_length_ends);
	tcase_add_test(tc, test_delivery_bad_pipeline_named);
	tcase_add_test(tc, test_delivery_corrupt_block_stops_stream);
	tcase_add_test(tc, test_delivery_error_after_earlier_batches);
	tcase_add_test(tc, test_delivery_stream_fd_wakes_poller);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	int failed = 1;

	if (fashion_prepare() == 0)
		failed = h_run_suite(delivery_suite());
	if (h_fashion_remove() < 0)
		failed = 1;
	free(src_images);
	free(src_labels);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
