/*
 * feedpack_inspect.c: `feedpack inspect DIR` (what a dataset holds, on
 * stdout) and `feedpack verify DIR` (open it, then read, checksum and decode
 * every block; the first corruption is an error naming the shard file and
 * block). Read-only: never writes into DIR. One thread, one decoder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "feedpack.h"

/* Per-shard totals gathered from the block index. */
struct shard_sum {
	uint64_t samples;
	uint64_t blocks;
};

/* Makes err say "<cmd> DIR: <what fmt said>" and hold rc. */
static int blame_dir(struct feed_err *err, int rc, const char *cmd, const char *dir)
{
	if (!err->msg[0])
		snprintf(err->msg, sizeof(err->msg), "%s", strerror(-rc));
	err->code = rc;
	feed_err_prefix(err, "%s %s", cmd, dir);
	return rc;
}

static void print_shape(const struct fmt_field *f)
{
	char buf[128];
	size_t n = snprintf(buf, sizeof(buf), "[%s", f->variable ? "*" : "");

	for (uint32_t i = 0; i < f->rank; i++)
		n += snprintf(buf + n, sizeof(buf) - n, "%s%u", i || f->variable ? "," : "",
			      f->shape[i]);
	snprintf(buf + n, sizeof(buf) - n, "]");
	printf("%-14s", buf);
}

static void print_schema(const struct fmt_schema *s)
{
	printf("schema:       %u fields\n", s->nfields);
	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct fmt_field *f = &s->fields[i];
		printf("  %-16s %-5s ", f->name, feed_dtype_name(f->dtype));
		print_shape(f);
		printf(" %-8s %s%llu bytes", f->variable ? "variable" : "fixed",
		       f->variable ? "max " : "", (unsigned long long)f->max_bytes);
		if (f->image)
			printf(", image: max %u wide, %u high, %llu pixels",
			       f->max_width, f->max_height,
			       (unsigned long long)f->max_pixels);
		printf("\n");
	}
}

/* Class names, label value first; the first INSPECT_CLASSES of them. */
#define INSPECT_CLASSES 64
static void print_classes(const struct fmt_info *info)
{
	if (!info->num_classes)
		return;
	printf("classes:      %u\n", info->num_classes);
	for (uint32_t i = 0; i < info->num_classes && i < INSPECT_CLASSES; i++)
		printf("  %-6u %s\n", i, info->classes[i]);
	if (info->num_classes > INSPECT_CLASSES)
		printf("  ... and %u more\n", info->num_classes - INSPECT_CLASSES);
}

static int print_shards(const char *dir, const struct fmt_dataset *ds, struct feed_err *err)
{
	const struct fmt_info *info = fmt_dataset_info(ds);
	struct shard_sum *sums = calloc(info->num_shards ? info->num_shards : 1, sizeof(*sums));
	struct fmt_block_meta m;
	int rc = 0;

	if (!sums)
		return feed_err_set(err, -ENOMEM, "%s: out of memory", dir);
	for (uint64_t b = 0; b < info->num_blocks && rc == 0; b++) {
		if ((rc = fmt_dataset_block_meta(ds, b, &m)) < 0)
			rc = feed_err_set(err, rc, "%s: block %llu: no metadata", dir,
					  (unsigned long long)b);
		else if (m.shard < info->num_shards)
			sums[m.shard].samples += m.num_records, sums[m.shard].blocks++;
	}
	printf("shards:       %u\n", info->num_shards);
	for (uint32_t i = 0; i < info->num_shards && rc == 0; i++) {
		char path[PATH_MAX];
		struct stat st;
		const char *file = fmt_dataset_shard_file(ds, i);
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
		printf("  %-24s %10llu samples %8llu blocks %12lld bytes\n", file,
		       (unsigned long long)sums[i].samples, (unsigned long long)sums[i].blocks, size);
	}
	free(sums);
	return rc;
}

int pack_cmd_inspect(const struct pack_opts *o, struct feed_err *err)
{
	const char *dir = o->pos[0];
	struct fmt_dataset *ds = NULL;
	const struct fmt_info *info;
	int rc;

	if ((rc = fmt_dataset_open(dir, &ds, err)) < 0)
		return blame_dir(err, rc, "inspect", dir);
	info = fmt_dataset_info(ds);
	printf("name:         %s\n", info->name);
	printf("version:      %s\n", info->version);
	printf("source:       %s\n", info->source ? info->source : "");
	printf("samples:      %llu\n", (unsigned long long)info->num_samples);
	printf("blocks:       %llu (target %llu bytes, ", (unsigned long long)info->num_blocks,
	       (unsigned long long)info->block_bytes);
	if (info->block_records)
		printf("at most %u records each, ", info->block_records);
	printf("zstd level %d)\n", info->zstd_level);
	printf("largest block: %llu bytes decoded, %llu compressed\n",
	       (unsigned long long)info->max_block_raw, (unsigned long long)info->max_block_comp);
	print_schema(info->schema);
	print_classes(info);
	rc = print_shards(dir, ds, err);
	printf("size:         %.1f MB raw, %.1f MB on disk, ratio %.2f\n",
	       (double)info->bytes_raw / 1e6, (double)info->bytes_on_disk / 1e6,
	       info->bytes_on_disk ? (double)info->bytes_raw / (double)info->bytes_on_disk : 0.0);
	fmt_dataset_close(ds);
	return rc;
}

/* Names block id as the reader does: shard file and block inside it. */
static void block_name(const struct fmt_dataset *ds, uint64_t id, char *buf, size_t cap)
{
	struct fmt_block_meta m;
	uint64_t first = id;

	if (fmt_dataset_block_meta(ds, id, &m) < 0) {
		snprintf(buf, cap, "block %llu", (unsigned long long)id);
		return;
	}
	while (first > 0) {
		struct fmt_block_meta prev;
		if (fmt_dataset_block_meta(ds, first - 1, &prev) < 0 || prev.shard != m.shard)
			break;
		first--;
	}
	snprintf(buf, cap, "%s: block %llu", fmt_dataset_shard_file(ds, m.shard),
		 (unsigned long long)(id - first));
}

/* Checks what fmt_block_read() leaves to the caller: blocks follow each
 * other, and no record exceeds its field's max_bytes. Error path only
 * pays for naming the block. */
static int verify_block(const char *dir, const struct fmt_dataset *ds,
			const struct fmt_block *blk, uint64_t expect_first, struct feed_err *err)
{
	const struct fmt_schema *s = blk->schema;
	char where[FMT_NAME_MAX + 64];
	const char *bad = NULL;
	size_t len = 0;
	uint32_t f = 0;

	if (blk->first_sample != expect_first)
		bad = "does not start where the previous block ended";
	for (; !bad && f < s->nfields; f++) {
		for (uint32_t r = 0; s->fields[f].variable && r < blk->num_records; r++) {
			fmt_block_field(blk, f, r, &len);
			if (len > s->fields[f].max_bytes) {
				bad = "a record exceeds its field's max_bytes";
				break;
			}
		}
	}
	if (!bad)
		return 0;
	block_name(ds, blk->id, where, sizeof(where));
	return feed_err_set(err, -EBADMSG, "verify %s: %s: %s", dir, where, bad);
}

/* Reads every block; returns the sample count seen. */
static int verify_blocks(const char *dir, const struct fmt_dataset *ds, struct fmt_decoder *dec,
			 uint8_t *comp, size_t comp_cap, uint8_t *raw, size_t raw_cap,
			 struct feed_err *err)
{
	const struct fmt_info *info = fmt_dataset_info(ds);
	struct pack_progress prog;
	uint64_t samples = 0, bytes = 0;
	int rc = 0;

	progress_start(&prog, "verifying", "samples", info->bytes_raw);
	for (uint64_t b = 0; b < info->num_blocks && rc == 0; b++) {
		struct fmt_block blk;
		if ((rc = fmt_block_read(ds, b, dec, comp, comp_cap, raw, raw_cap, &blk, err)) < 0)
			rc = blame_dir(err, rc, "verify", dir);
		else if ((rc = verify_block(dir, ds, &blk, samples, err)) == 0)
			samples += blk.num_records, bytes += blk.raw_size;
		progress_tick(&prog, bytes, samples);
	}
	progress_end(&prog);
	if (rc == 0 && samples != info->num_samples)
		rc = feed_err_set(err, -EBADMSG, "verify %s: blocks hold %llu samples, the manifest "
				  "says %llu", dir, (unsigned long long)samples,
				  (unsigned long long)info->num_samples);
	return rc;
}

int pack_cmd_verify(const struct pack_opts *o, struct feed_err *err)
{
	const char *dir = o->pos[0];
	struct fmt_dataset *ds = NULL;
	struct fmt_decoder *dec = NULL;
	uint8_t *comp = NULL, *raw = NULL;
	size_t comp_cap, raw_cap;
	int rc;

	if ((rc = fmt_dataset_open(dir, &ds, err)) < 0)
		return blame_dir(err, rc, "verify", dir);
	const struct fmt_info *info = fmt_dataset_info(ds);
	comp_cap = info->max_block_comp ? info->max_block_comp : 1;
	raw_cap = (info->max_block_raw + FMT_SECTION_ALIGN) & ~(size_t)(FMT_SECTION_ALIGN - 1);
	comp = malloc(comp_cap);
	raw = aligned_alloc(FMT_SECTION_ALIGN, raw_cap);
	if (!comp || !raw) {
		rc = feed_err_set(err, -ENOMEM, "verify %s: out of memory", dir);
		goto out;
	}
	if ((rc = fmt_decoder_new(&dec)) < 0) {
		rc = feed_err_set(err, rc, "verify %s: cannot create a zstd decoder", dir);
		goto out;
	}
	if ((rc = verify_blocks(dir, ds, dec, comp, comp_cap, raw, raw_cap, err)) == 0)
		printf("ok: %llu samples, %llu blocks\n", (unsigned long long)info->num_samples,
		       (unsigned long long)info->num_blocks);
	if (rc == 0 && o->decode)
		rc = chk_verify_decode(dir, ds, err);
out:
	fmt_decoder_free(dec);
	free(comp);
	free(raw);
	fmt_dataset_close(ds);
	return rc;
}
