/*
 * check_format.c: unit tests of format/: round trips of every field kind
 * and block size, random access, checksum and truncation detection, and the
 * real Fashion-MNIST (when Debian's dataset-fashion-mnist is installed)
 * read back equal to its IDX source, and the image facts and class names
 * (written, read back, refused when the writer or a manifest is wrong).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check_util.h"
#include "feed.pb-c.h"
#include "fmt.h"

#define FM_DIR "/usr/share/datasets/fashion-mnist"

static char tmpdir[256];

static void tmp_setup(void)
{
	strcpy(tmpdir, "/tmp/check_format.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmp_teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static size_t round64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static void path_in(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", tmpdir, name);
}

/* Deterministic record content: field f of record i. */
static size_t rec_len(const struct fmt_field *fd, uint64_t i)
{
	size_t elem = fmt_field_elem_bytes(fd);
	return fd->variable ? elem * ((i * 7919) % 13) : elem;
}

static void rec_fill(uint8_t *buf, size_t len, uint32_t f, uint64_t i)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (f * 40503u);
	for (size_t k = 0; k < len; k++) {
		x = x * 1103515245u + 12345u;
		buf[k] = (uint8_t)(x >> 16);
	}
}

/* A schema with a field of every kind: fixed u8 image, scalar i64, f32
 * vector, variable u16 tokens, variable str, bool, bf16 matrix. */
static void schema_all(struct fmt_schema *s)
{
	memset(s, 0, sizeof(*s));
	struct fmt_field f[] = {
		{.name = "image", .dtype = FEED_DTYPE_U8, .rank = 3, .shape = {5, 4, 3}},
		{.name = "label", .dtype = FEED_DTYPE_I64},
		{.name = "vec", .dtype = FEED_DTYPE_F32, .rank = 1, .shape = {7}},
		{.name = "tokens", .dtype = FEED_DTYPE_U16, .variable = true},
		{.name = "name", .dtype = FEED_DTYPE_STR, .variable = true},
		{.name = "flag", .dtype = FEED_DTYPE_BOOL},
		{.name = "pairs", .dtype = FEED_DTYPE_BF16, .rank = 1, .shape = {2}, .variable = true},
	};
	s->nfields = sizeof(f) / sizeof(f[0]);
	memcpy(s->fields, f, sizeof(f));
}

/* Adds records first .. first + n - 1 (their content depends on the index). */
static void add_range(struct fmt_writer *w, const struct fmt_schema *s, uint64_t first, uint64_t n)
{
	struct feed_err err = {0};
	static uint8_t bufs[FMT_MAX_FIELDS][4096];
	struct fmt_value v[FMT_MAX_FIELDS];

	for (uint64_t i = first; i < first + n; i++) {
		for (uint32_t f = 0; f < s->nfields; f++) {
			v[f].len = rec_len(&s->fields[f], i);
			rec_fill(bufs[f], v[f].len, f, i);
			v[f].data = bufs[f];
		}
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
	}
}

/* A dataset of records first .. first + n - 1. */
static void write_range(const char *dir, const struct fmt_schema *s, uint64_t first, uint64_t n,
			const struct fmt_writer_opts *o)
{
	struct fmt_writer *w;
	struct feed_err err = {0};

	ck_assert_msg(fmt_writer_new(dir, s, o, &w, &err) == 0, "%s", err.msg);
	add_range(w, s, first, n);
	ck_assert_int_eq(fmt_writer_count(w), n);
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

static void write_dataset(const char *dir, const struct fmt_schema *s, uint64_t n,
			  const struct fmt_writer_opts *o)
{
	write_range(dir, s, 0, n, o);
}

/* Reads every sample (in the given order) and compares with the source. */
static void check_samples(const char *dir, const struct fmt_schema *s, uint64_t n, int shuffled)
{
	struct fmt_dataset *ds;
	struct fmt_decoder *dec;
	struct feed_err err = {0};
	uint8_t expect[4096];

	ck_assert_msg(fmt_dataset_open(dir, &ds, &err) == 0, "%s", err.msg);
	const struct fmt_info *in = fmt_dataset_info(ds);
	ck_assert_uint_eq(in->num_samples, n);
	ck_assert_uint_eq(in->schema->nfields, s->nfields);
	ck_assert_int_eq(fmt_decoder_new(&dec), 0);
	void *comp = malloc(in->max_block_comp), *raw = aligned_alloc(64, round64(in->max_block_raw));
	for (uint64_t k = 0; k < n; k++) {
		uint64_t i = shuffled ? (k * 48271u + 11) % n : k;
		struct fmt_loc loc;
		struct fmt_block blk;
		ck_assert_int_eq(fmt_dataset_locate(ds, i, &loc), 0);
		ck_assert_msg(fmt_block_read(ds, loc.block, dec, comp, in->max_block_comp, raw,
					     in->max_block_raw, &blk, &err) == 0, "%s", err.msg);
		ck_assert_uint_eq(blk.first_sample + loc.record, i);
		for (uint32_t f = 0; f < s->nfields; f++) {
			size_t len;
			const void *p = fmt_block_field(&blk, f, loc.record, &len);
			size_t want = rec_len(&s->fields[f], i);
			rec_fill(expect, want, f, i);
			ck_assert_uint_eq(len, want);
			ck_assert_msg(memcmp(p, expect, len) == 0, "sample %llu field %u differs",
				      (unsigned long long)i, f);
			ck_assert_uint_eq(blk.section[f] % FMT_SECTION_ALIGN, 0);
			ck_assert_uint_eq(blk.data_start[f] % FMT_SECTION_ALIGN, 0);
		}
	}
	ck_assert_int_eq(fmt_dataset_locate(ds, n, &(struct fmt_loc){0}), -EINVAL);
	free(comp);
	free(raw);
	fmt_decoder_free(dec);
	fmt_dataset_close(ds);
}

START_TEST(test_format_roundtrip_every_kind)
{
	/* _i selects a block shape: one record per block, small blocks,
	 * default 64 KiB, tiny shards (many files). */
	static const struct fmt_writer_opts opts[] = {
		{.name = "one", .block_records = 1},
		{.name = "small", .block_bytes = 1000},
		{.name = "default"},
		{.name = "shards", .block_bytes = 2000, .shard_bytes = 3000, .zstd_level = 9},
	};
	struct fmt_schema s;
	char dir[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 1000, &opts[_i]);
	check_samples(dir, &s, 1000, 0);
	check_samples(dir, &s, 1000, 1);
}
END_TEST

START_TEST(test_format_blocks_and_manifest)
{
	struct fmt_schema s;
	struct fmt_dataset *ds;
	struct feed_err err;
	char dir[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 500, &(struct fmt_writer_opts){.name = "x", .block_records = 7,
							       .shard_bytes = 4096});
	ck_assert_msg(fmt_dataset_open(dir, &ds, &err) == 0, "%s", err.msg);
	const struct fmt_info *in = fmt_dataset_info(ds);
	ck_assert_str_eq(in->name, "x");
	ck_assert_uint_eq(strlen(in->version), 16);
	ck_assert_uint_eq(in->num_blocks, (500 + 6) / 7);
	ck_assert_uint_gt(in->num_shards, 1);
	uint64_t expect_first = 0;
	for (uint64_t b = 0; b < in->num_blocks; b++) {
		struct fmt_block_meta m;
		ck_assert_int_eq(fmt_dataset_block_meta(ds, b, &m), 0);
		ck_assert_uint_eq(m.first_sample, expect_first);
		ck_assert_uint_le(m.num_records, 7);
		expect_first += m.num_records;
	}
	ck_assert_uint_eq(expect_first, 500);
	/* variable fields record their largest record */
	ck_assert_uint_eq(in->schema->fields[3].max_bytes, 12 * 2);
	ck_assert_uint_eq(in->schema->fields[0].max_bytes, 60);
	fmt_dataset_close(ds);
}
END_TEST

START_TEST(test_format_version_is_content_hash)
{
	struct fmt_schema s;
	struct fmt_dataset *a, *b, *c;
	char da[300], db[300], dc[300];

	schema_all(&s);
	path_in(da, sizeof(da), "a");
	path_in(db, sizeof(db), "b");
	path_in(dc, sizeof(dc), "c");
	write_dataset(da, &s, 100, &(struct fmt_writer_opts){.name = "a"});
	write_dataset(db, &s, 100, &(struct fmt_writer_opts){.name = "b"});
	write_dataset(dc, &s, 101, &(struct fmt_writer_opts){.name = "a"});
	ck_assert_int_eq(fmt_dataset_open(da, &a, NULL), 0);
	ck_assert_int_eq(fmt_dataset_open(db, &b, NULL), 0);
	ck_assert_int_eq(fmt_dataset_open(dc, &c, NULL), 0);
	ck_assert_str_eq(fmt_dataset_info(a)->version, fmt_dataset_info(b)->version);
	ck_assert_str_ne(fmt_dataset_info(a)->version, fmt_dataset_info(c)->version);
	fmt_dataset_close(a);
	fmt_dataset_close(b);
	fmt_dataset_close(c);
}
END_TEST

START_TEST(test_format_writer_adopt_joins_parts)
{
	const struct fmt_writer_opts small = {.name = "part", .block_bytes = 1500, .shard_bytes = 4000};
	struct fmt_schema s, other;
	struct fmt_writer *w;
	struct feed_err err = {0};
	char dir[300], pa[300], pb[300], pc[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	path_in(pa, sizeof(pa), "pa");
	path_in(pb, sizeof(pb), "pb");
	path_in(pc, sizeof(pc), "pc");
	write_range(pa, &s, 100, 250, &small);   /* several shards */
	write_range(pb, &s, 400, 600, &(struct fmt_writer_opts){.name = "b"});
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.name = "ds"}, &w, &err), 0);
	add_range(w, &s, 0, 100);
	ck_assert_msg(fmt_writer_adopt(w, pa, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(fmt_writer_count(w), 350);
	add_range(w, &s, 350, 50);
	ck_assert_msg(fmt_writer_adopt(w, pb, &err) == 0, "%s", err.msg);
	/* another schema is refused, naming the part */
	other = s;
	other.fields[1].dtype = FEED_DTYPE_I32;
	write_range(pc, &other, 0, 3, &small);
	ck_assert_int_eq(fmt_writer_adopt(w, pc, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, pc) && strstr(err.msg, "'label'"), "%s", err.msg);
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
	check_samples(dir, &s, 1000, 0);
	check_samples(dir, &s, 1000, 1);
}
END_TEST

/* Flips one byte at offset off of the first shard. */
static void shard_poke(const char *dir, off_t off, int truncate_to)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/shard-00000.fsh", dir);
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	if (truncate_to >= 0) {
		ck_assert_int_eq(ftruncate(fd, truncate_to), 0);
	} else {
		uint8_t c;
		ck_assert_int_eq(pread(fd, &c, 1, off), 1);
		c ^= 0x40;
		ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
	}
	close(fd);
}

START_TEST(test_format_checksum_mismatch_names_block)
{
	struct fmt_schema s;
	struct fmt_dataset *ds;
	struct fmt_decoder *dec;
	struct fmt_block_meta m;
	struct feed_err err = {0};
	char dir[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 300, &(struct fmt_writer_opts){.name = "x", .block_records = 10});
	/* Block 3 starts after blocks 0..2; flip a byte in its middle. */
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), 0);
	uint64_t off = 64;
	for (int b = 0; b < 3; b++) {
		ck_assert_int_eq(fmt_dataset_block_meta(ds, b, &m), 0);
		off += m.comp_size;
	}
	ck_assert_int_eq(fmt_dataset_block_meta(ds, 3, &m), 0);
	fmt_dataset_close(ds);
	shard_poke(dir, (off_t)(off + m.comp_size / 2), -1);

	ck_assert_msg(fmt_dataset_open(dir, &ds, &err) == 0, "%s", err.msg);
	const struct fmt_info *in = fmt_dataset_info(ds);
	void *comp = malloc(in->max_block_comp), *raw = malloc(in->max_block_raw);
	ck_assert_int_eq(fmt_decoder_new(&dec), 0);
	struct fmt_block blk;
	ck_assert_int_eq(fmt_block_read(ds, 2, dec, comp, in->max_block_comp, raw, in->max_block_raw,
					&blk, &err), 0);
	memset(&blk, 0, sizeof(blk));
	ck_assert_int_eq(fmt_block_read(ds, 3, dec, comp, in->max_block_comp, raw,
					in->max_block_raw, &blk, &err), -EBADMSG);
	ck_assert_ptr_null(blk.raw); /* nothing handed out */
	ck_assert_ptr_nonnull(strstr(err.msg, "shard-00000.fsh"));
	ck_assert_ptr_nonnull(strstr(err.msg, "block 3"));
	ck_assert_ptr_nonnull(strstr(err.msg, "checksum"));
	free(comp);
	free(raw);
	fmt_decoder_free(dec);
	fmt_dataset_close(ds);
}
END_TEST

START_TEST(test_format_truncated_shard_refused_at_open)
{
	struct fmt_schema s;
	struct fmt_dataset *ds = NULL;
	struct feed_err err = {0};
	char dir[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 300, &(struct fmt_writer_opts){.name = "x"});
	shard_poke(dir, 0, 1000);
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), -EBADMSG);
	ck_assert_ptr_null(ds);
	ck_assert_ptr_nonnull(strstr(err.msg, "shard-00000.fsh"));
	ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
}
END_TEST

/* A manifest whose one shard claims 4 TiB and 2^36 blocks (2^36 samples)
 * over a small file: the reader must find the file's size wrong before it
 * sizes its block table from the claim (3 TiB, which fails, and whose
 * failure once closed descriptors 0..nshards-1 that were never opened). */
static void manifest_claim_huge(const char *dir)
{
	char path[400];
	static uint8_t buf[1 << 16];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, FMT_MANIFEST_FILE);
	ck_assert_ptr_nonnull(f = fopen(path, "rb"));
	size_t len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	Feed__Manifest *m = feed__manifest__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->n_shards, 1);
	m->shards[0]->size = 1ull << 42;
	m->shards[0]->num_blocks = m->shards[0]->num_samples = m->num_samples = 1ull << 36;
	len = feed__manifest__pack(m, buf);
	feed__manifest__free_unpacked(m, NULL);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	fclose(f);
}

START_TEST(test_format_shard_size_checked_before_block_table)
{
	struct fmt_schema s;
	struct fmt_dataset *ds = NULL;
	struct feed_err err = {0};
	char dir[300];

	if (fcntl(0, F_GETFD) < 0)  /* descriptor 0 open, to see it stay open */
		ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 300, &(struct fmt_writer_opts){.name = "x"});
	manifest_claim_huge(dir);
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), -EBADMSG);
	ck_assert_ptr_null(ds);
	ck_assert_msg(strstr(err.msg, "shard-00000.fsh") && strstr(err.msg, "manifest says 4398046511104"),
		      "%s", err.msg);
	ck_assert_int_ge(fcntl(0, F_GETFD), 0);
}
END_TEST

START_TEST(test_format_truncated_after_open_is_error)
{
	struct fmt_schema s;
	struct fmt_dataset *ds;
	struct fmt_decoder *dec;
	struct feed_err err = {0};
	char dir[300];

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	write_dataset(dir, &s, 300, &(struct fmt_writer_opts){.name = "x", .block_records = 10});
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), 0);
	shard_poke(dir, 0, 2000); /* cut underneath the open reader */
	const struct fmt_info *in = fmt_dataset_info(ds);
	void *comp = malloc(in->max_block_comp), *raw = malloc(in->max_block_raw);
	struct fmt_block blk;
	ck_assert_int_eq(fmt_decoder_new(&dec), 0);
	ck_assert_int_eq(fmt_block_read(ds, in->num_blocks - 1, dec, comp, in->max_block_comp, raw,
					in->max_block_raw, &blk, &err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
	free(comp);
	free(raw);
	fmt_decoder_free(dec);
	fmt_dataset_close(ds);
}
END_TEST

START_TEST(test_format_header_and_footer_corruption)
{
	/* _i: 0 header byte, 1 index byte, 2 trailer byte, 3 manifest of another dataset */
	struct fmt_schema s;
	struct fmt_dataset *ds = NULL;
	struct feed_err err = {0};
	char dir[300], other[300], cmd[800];
	struct stat st;

	schema_all(&s);
	path_in(dir, sizeof(dir), "ds");
	path_in(other, sizeof(other), "other");
	write_dataset(dir, &s, 300, &(struct fmt_writer_opts){.name = "x", .block_records = 10});
	snprintf(cmd, sizeof(cmd), "%s/shard-00000.fsh", dir);
	ck_assert_int_eq(stat(cmd, &st), 0);
	if (_i == 0)
		shard_poke(dir, 20, -1);
	else if (_i == 1)
		shard_poke(dir, st.st_size - 64 - 40 * 5 + 3, -1);
	else if (_i == 2)
		shard_poke(dir, st.st_size - 60, -1);
	else {
		write_dataset(other, &s, 301, &(struct fmt_writer_opts){.name = "y"});
		snprintf(cmd, sizeof(cmd), "cp %s/manifest.pb %s/manifest.pb", other, dir);
		ck_assert_int_eq(system(cmd), 0);
	}
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), -EBADMSG);
	ck_assert_ptr_null(ds);
	ck_assert_ptr_nonnull(strstr(err.msg, "shard-00000.fsh"));
}
END_TEST

START_TEST(test_format_writer_refusals)
{
	struct fmt_schema s;
	struct fmt_writer *w = NULL;
	struct feed_err err = {0};
	char dir[300], tmpl[300];
	uint8_t img[60] = {0};

	schema_all(&s);
	path_in(dir, sizeof(dir), "exists");
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err.msg, "exists"));
	ck_assert_int_eq(fmt_writer_new("/nonexistent-dir/x", &s, &(struct fmt_writer_opts){0}, &w,
					&err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir/x"));

	/* A wrong-sized fixed field is refused naming the field. */
	path_in(dir, sizeof(dir), "new");
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), 0);
	struct fmt_value v[7] = {{img, 59}};
	ck_assert_int_eq(fmt_writer_add(w, v, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "'image'"));
	/* Nothing added: finish refuses, and free leaves no directory behind. */
	ck_assert_int_eq(fmt_writer_finish(w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
	fmt_writer_free(w);
	ck_assert_int_ne(access(dir, F_OK), 0);
	snprintf(tmpl, sizeof(tmpl), "ls %s | grep -q tmp", tmpdir);
	ck_assert_int_ne(system(tmpl), 0);

	/* Bad schemas. */
	s.fields[1] = s.fields[0];
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "twice"));
	schema_all(&s);
	s.fields[0].shape[1] = 0;
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "'image'"));
}
END_TEST

/* ---- image facts and class names ---- */

static const char *const img_classes[] = {"cat", "dog", "zebra"};

/* An image field and a label; three records noted as 10x20, 300x5, 7x7. */
static void write_images(const char *dir)
{
	struct fmt_schema s = {.nfields = 2,
			       .fields = {{.name = "image", .dtype = FEED_DTYPE_U8,
					   .variable = true, .image = true},
					  {.name = "label", .dtype = FEED_DTYPE_I64}}};
	struct fmt_writer_opts o = {.name = "imgs", .num_classes = 3, .classes = img_classes};
	static const uint32_t dims[3][2] = {{10, 20}, {300, 5}, {7, 7}};
	struct fmt_writer *w;
	struct feed_err err = {0};
	uint8_t bytes[16] = {0xff, 0xd8};

	ck_assert_msg(fmt_writer_new(dir, &s, &o, &w, &err) == 0, "%s", err.msg);
	for (int64_t i = 0; i < 3; i++) {
		struct fmt_value v[2] = {{bytes, 8 + (size_t)i}, {&i, 8}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
		ck_assert_msg(fmt_writer_note_image(w, 0, dims[i][0], dims[i][1], &err) == 0, "%s",
			      err.msg);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

START_TEST(test_format_image_facts_and_classes)
{
	struct fmt_dataset *ds;
	struct feed_err err = {0};
	struct fmt_schema s;
	char dir[300], old[300];

	path_in(dir, sizeof(dir), "imgs");
	write_images(dir);
	ck_assert_msg(fmt_dataset_open(dir, &ds, &err) == 0, "%s", err.msg);
	const struct fmt_info *in = fmt_dataset_info(ds);
	const struct fmt_field *im = &in->schema->fields[0], *lb = &in->schema->fields[1];
	ck_assert(im->image);
	ck_assert_uint_eq(im->max_width, 300);
	ck_assert_uint_eq(im->max_height, 20);
	ck_assert_uint_eq(im->max_pixels, 1500); /* 300 x 5, not 300 x 20 */
	ck_assert(!lb->image);
	ck_assert_uint_eq(lb->max_width + lb->max_height + lb->max_pixels, 0);
	ck_assert_uint_eq(in->num_classes, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_str_eq(in->classes[i], img_classes[i]);
	fmt_dataset_close(ds);

	/* A dataset without images or classes says so. */
	schema_all(&s);
	path_in(old, sizeof(old), "plain");
	write_dataset(old, &s, 5, &(struct fmt_writer_opts){0});
	ck_assert_msg(fmt_dataset_open(old, &ds, &err) == 0, "%s", err.msg);
	in = fmt_dataset_info(ds);
	ck_assert_uint_eq(in->num_classes, 0);
	for (uint32_t f = 0; f < in->schema->nfields; f++)
		ck_assert(!in->schema->fields[f].image);
	fmt_dataset_close(ds);
}
END_TEST

START_TEST(test_format_image_writer_refusals)
{
	struct fmt_schema s = {.nfields = 2,
			       .fields = {{.name = "image", .dtype = FEED_DTYPE_U8,
					   .variable = true, .image = true},
					  {.name = "label", .dtype = FEED_DTYPE_I64}}};
	struct fmt_writer *w = NULL;
	struct feed_err err = {0};
	char dir[300];
	int64_t label = 0;
	uint8_t bytes[8] = {0};
	struct fmt_value v[2] = {{bytes, 8}, {&label, 8}};

	path_in(dir, sizeof(dir), "w");
	/* An image field must be variable u8 of rank 0. */
	s.fields[0].dtype = FEED_DTYPE_U16;
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "'image'"));
	s.fields[0].dtype = FEED_DTYPE_U8;
	s.fields[0].variable = false;
	s.fields[0].rank = 1;
	s.fields[0].shape[0] = 4;
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "image field"));
	s.fields[0].variable = true;
	s.fields[0].rank = 0;

	/* Class names: distinct, non-empty, no control characters. */
	const char *dup[] = {"a", "b", "a"}, *empty[] = {"a", ""}, *ctl[] = {"a\nb"};
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.num_classes = 3,
					.classes = dup}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "'a' appears twice"));
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.num_classes = 2,
					.classes = empty}, &w, &err), -EINVAL);
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.num_classes = 1,
					.classes = ctl}, &w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "control"));
	ck_assert_int_ne(access(dir, F_OK), 0);

	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){0}, &w, &err), 0);
	/* Nothing to note yet; label is no image field; dimensions in range. */
	ck_assert_int_eq(fmt_writer_note_image(w, 0, 1, 1, &err), -EINVAL);
	ck_assert_int_eq(fmt_writer_add(w, v, &err), 0);
	ck_assert_int_eq(fmt_writer_note_image(w, 1, 1, 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not an image field"));
	ck_assert_int_eq(fmt_writer_note_image(w, 0, 0, 5, &err), -EINVAL);
	ck_assert_int_eq(fmt_writer_note_image(w, 0, 5, FMT_IMAGE_DIM_MAX + 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "record 0"));
	/* An image not noted: the next add and finish refuse. */
	ck_assert_int_eq(fmt_writer_add(w, v, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not noted"));
	ck_assert_int_eq(fmt_writer_finish(w, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "record 0"));
	ck_assert_int_eq(fmt_writer_note_image(w, 0, 5, 6, &err), 0);
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}
END_TEST

/* Rewrites dir's manifest after applying bad manifest case i. */
static const char *manifest_spoil(const char *dir, int i)
{
	char path[400];
	static uint8_t buf[1 << 16];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, FMT_MANIFEST_FILE);
	ck_assert_ptr_nonnull(f = fopen(path, "rb"));
	size_t len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	Feed__Manifest *m = feed__manifest__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(m);
	Feed__Field *im = m->schema->fields[0], *lb = m->schema->fields[1];
	char *saved[3];
	const char *want = NULL;
	ck_assert_uint_eq(m->n_classes, 3);
	memcpy(saved, m->classes, sizeof(saved));
	switch (i) {
	case 0: im->max_width = 0; want = "outside 1.."; break;
	case 1: im->max_height = FMT_IMAGE_DIM_MAX + 1; want = "outside 1.."; break;
	case 2: im->max_pixels = 300 * 20 + 1; want = "max_pixels"; break;
	case 3: im->max_pixels = 0; want = "max_pixels"; break;
	case 4: lb->max_width = 3; want = "not marked image"; break;
	case 5: lb->image = true; want = "image field"; break;
	case 6: m->classes[2] = m->classes[0]; want = "appears twice"; break;
	case 7: m->classes[1] = (char *)""; want = "class 1"; break;
	case 8: m->classes[1] = (char *)"d\x01g"; want = "control"; break;
	}
	len = feed__manifest__pack(m, buf);
	memcpy(m->classes, saved, sizeof(saved)); /* free what unpack allocated */
	feed__manifest__free_unpacked(m, NULL);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	fclose(f);
	return want;
}

START_TEST(test_format_bad_image_manifest_refused)
{
	struct fmt_dataset *ds = NULL;
	struct feed_err err = {0};
	char dir[300];

	path_in(dir, sizeof(dir), "imgs");
	write_images(dir);
	const char *want = manifest_spoil(dir, _i);
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), -EBADMSG);
	ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, FMT_MANIFEST_FILE),
		      "case %d: '%s' lacks '%s'", _i, err.msg, want);
}
END_TEST

/* ---- real Fashion-MNIST ---- */

static uint8_t *gz_read_all(const char *path, size_t *ret_len)
{
	gzFile g = gzopen(path, "rb");
	size_t cap = 1 << 20, len = 0;
	uint8_t *buf = malloc(cap);
	int n;

	ck_assert_ptr_nonnull(g);
	while ((n = gzread(g, buf + len, (unsigned)(cap - len))) > 0) {
		len += (size_t)n;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
	}
	gzclose(g);
	*ret_len = len;
	return buf;
}

/* A store over a local directory (the seam remote datasets use): reads
 * with pread, counts them and the blocks among them, and flips a byte
 * of every block read while `flip` is set. */
struct test_store {
	char dir[300];
	unsigned reads, blocks, prefetched;
	bool flip, closed;
};

static int ts_size(void *ctx, int32_t shard, const char *file, uint64_t *ret,
		   struct feed_err *err)
{
	struct test_store *t = ctx;
	char p[600];
	struct stat st;

	(void)shard;
	snprintf(p, sizeof(p), "%s/%s", t->dir, file);
	if (stat(p, &st) < 0)
		return feed_err_set(err, -errno, "%s: %s", p, strerror(errno));
	*ret = (uint64_t)st.st_size;
	return 0;
}

static int ts_read(void *ctx, const struct fmt_range *r, void *buf, struct feed_err *err)
{
	struct test_store *t = ctx;
	char p[600];

	snprintf(p, sizeof(p), "%s/%s", t->dir, r->file);
	int fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ssize_t n = pread(fd, buf, r->len, (off_t)r->off);
	close(fd);
	t->reads++;
	if (n != (ssize_t)r->len)
		return feed_err_set(err, -EBADMSG, "%s: short", p);
	if (r->has_hash) {
		t->blocks++;
		ck_assert_uint_eq(fmt_hash(buf, r->len), r->hash);  /* the hash it must have */
		if (t->flip)
			((uint8_t *)buf)[r->len / 2] ^= 1;
	}
	return 0;
}

static void ts_prefetch(void *ctx, const struct fmt_range *r, size_t n)
{
	(void)r;
	((struct test_store *)ctx)->prefetched += (unsigned)n;
}

static void ts_close(void *ctx)
{
	((struct test_store *)ctx)->closed = true;
}

START_TEST(test_format_store_reads_and_checks_like_a_directory)
{
	static const struct fmt_store_ops ops = {.size = ts_size, .read = ts_read,
						 .prefetch = ts_prefetch, .close = ts_close};
	struct fmt_schema s;
	struct fmt_writer_opts o = {.name = "st", .block_records = 3};
	struct test_store t = {0};
	struct fmt_dataset *ds, *local;
	struct fmt_decoder *dec;
	struct feed_err err = {0};
	struct fmt_block blk;

	schema_all(&s);
	path_in(t.dir, sizeof(t.dir), "st");
	write_dataset(t.dir, &s, 20, &o);
	ck_assert_msg(fmt_dataset_open_store("http://h/st", &ops, &t, &ds, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(fmt_dataset_open(t.dir, &local, &err), 0);
	ck_assert_str_eq(fmt_dataset_info(ds)->version, fmt_dataset_info(local)->version);
	ck_assert_uint_eq(t.blocks, 0);  /* open reads manifest, headers, trailers, indexes */
	const struct fmt_info *in = fmt_dataset_info(ds);
	uint64_t ids[3] = {0, 2, 99};
	fmt_dataset_prefetch(ds, ids, 3);
	ck_assert_uint_eq(t.prefetched, 2);  /* block 99 does not exist */
	ck_assert_int_eq(fmt_decoder_new(&dec), 0);
	void *comp = malloc(in->max_block_comp), *raw = aligned_alloc(64, round64(in->max_block_raw));
	for (uint64_t b = 0; b < in->num_blocks; b++)
		ck_assert_msg(fmt_block_read(ds, b, dec, comp, in->max_block_comp, raw,
					     in->max_block_raw, &blk, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(t.blocks, in->num_blocks);
	t.flip = true;  /* the store's bytes are wrong: never served */
	ck_assert_int_eq(fmt_block_read(ds, 1, dec, comp, in->max_block_comp, raw,
					in->max_block_raw, &blk, &err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err.msg, "http://h/st/"));
	ck_assert_ptr_nonnull(strstr(err.msg, "block 1: checksum mismatch"));
	fmt_dataset_prefetch(local, ids, 2);  /* a directory: nothing to do */
	ck_assert_ptr_null(fmt_dataset_sample_path(ds, 0));  /* no paths.txt: none */
	fmt_dataset_close(ds);
	ck_assert(t.closed);

	/* paths.txt comes through the store too */
	char pp[400];
	snprintf(pp, sizeof(pp), "%s/%s", t.dir, FMT_PATHS_FILE);
	FILE *f = fopen(pp, "w");
	for (int i = 0; i < 20; i++)
		fprintf(f, "img/%d.png\n", i);
	fclose(f);
	t = (struct test_store){.reads = 0};
	path_in(t.dir, sizeof(t.dir), "st");
	ck_assert_msg(fmt_dataset_open_store("http://h/st", &ops, &t, &ds, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(fmt_dataset_sample_path(ds, 7), "img/7.png");
	fmt_dataset_close(ds);
	fmt_dataset_close(local);
	fmt_decoder_free(dec);
	free(comp);
	free(raw);
}
END_TEST

START_TEST(test_format_fashion_mnist_equals_source)
{
	char imgs[300], lbls[300];
	snprintf(imgs, sizeof(imgs), "%s/train-images-idx3-ubyte.gz", FM_DIR);
	snprintf(lbls, sizeof(lbls), "%s/train-labels-idx1-ubyte.gz", FM_DIR);
	ck_assert_msg(access(imgs, R_OK) == 0,
		      "%s missing: scripts/test installs dataset-fashion-mnist", imgs);
	size_t ni, nl;
	uint8_t *im = gz_read_all(imgs, &ni), *lb = gz_read_all(lbls, &nl);
	ck_assert_uint_eq(ni, 16 + 60000 * 784);
	ck_assert_uint_eq(nl, 8 + 60000);

	struct fmt_schema s = {.nfields = 2};
	s.fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 3,
					 .shape = {28, 28, 1}};
	s.fields[1] = (struct fmt_field){.name = "label", .dtype = FEED_DTYPE_U8};
	char dir[300];
	struct fmt_writer *w;
	struct feed_err err = {0};
	path_in(dir, sizeof(dir), "fm");
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.name = "fm"}, &w, &err), 0);
	for (size_t i = 0; i < 60000; i++) {
		struct fmt_value v[2] = {{im + 16 + i * 784, 784}, {lb + 8 + i, 1}};
		ck_assert_int_eq(fmt_writer_add(w, v, &err), 0);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);

	struct fmt_dataset *ds;
	struct fmt_decoder *dec;
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), 0);
	ck_assert_int_eq(fmt_decoder_new(&dec), 0);
	const struct fmt_info *in = fmt_dataset_info(ds);
	void *comp = malloc(in->max_block_comp), *raw = aligned_alloc(64, round64(in->max_block_raw));
	uint64_t seen = 0;
	for (uint64_t b = 0; b < in->num_blocks; b++) {
		struct fmt_block blk;
		ck_assert_int_eq(fmt_block_read(ds, b, dec, comp, in->max_block_comp, raw,
						in->max_block_raw, &blk, &err), 0);
		for (uint32_t r = 0; r < blk.num_records; r++, seen++) {
			size_t len;
			uint64_t i = blk.first_sample + r;
			const uint8_t *p = fmt_block_field(&blk, 0, r, &len);
			ck_assert_int_eq(memcmp(p, im + 16 + i * 784, 784), 0);
			p = fmt_block_field(&blk, 1, r, &len);
			ck_assert_uint_eq(len, 1);
			ck_assert_uint_eq(*p, lb[8 + i]);
		}
	}
	ck_assert_uint_eq(seen, 60000);
	free(comp);
	free(raw);
	free(im);
	free(lb);
	fmt_decoder_free(dec);
	fmt_dataset_close(ds);
}
END_TEST

static Suite *format_suite(void)
{
	Suite *s = suite_create("format");
	TCase *tc = tcase_create("format");

	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_format_roundtrip_every_kind, 0, 4);
	tcase_add_test(tc, test_format_blocks_and_manifest);
	tcase_add_test(tc, test_format_version_is_content_hash);
	tcase_add_test(tc, test_format_writer_adopt_joins_parts);
	tcase_add_test(tc, test_format_checksum_mismatch_names_block);
	tcase_add_test(tc, test_format_truncated_shard_refused_at_open);
	tcase_add_test(tc, test_format_truncated_after_open_is_error);
	tcase_add_test(tc, test_format_shard_size_checked_before_block_table);
	tcase_add_loop_test(tc, test_format_header_and_footer_corruption, 0, 4);
	tcase_add_test(tc, test_format_writer_refusals);
	tcase_add_test(tc, test_format_fashion_mnist_equals_source);
	tcase_add_test(tc, test_format_image_facts_and_classes);
	tcase_add_test(tc, test_format_image_writer_refusals);
	tcase_add_test(tc, test_format_store_reads_and_checks_like_a_directory);
	tcase_add_loop_test(tc, test_format_bad_image_manifest_refused, 0, 9);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(format_suite)
