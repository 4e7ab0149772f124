/*
 * fuzz_dataset.h: the small dataset fuzz_manifest_load and fuzz_shard_open
 * read around the bytes they fuzz, and fuzz_seeds writes as their seeds:
 * written by format/'s own writer, so a target and its seeds agree byte
 * for byte (same schema, records and options give the same files). Three
 * fields (a fixed u8 8x8 image, variable u32 tokens, an i64 label), two
 * class names. One thread; everything allocated is freed by
 * fuzz_dataset_free().
 */
#ifndef FEED_FUZZ_DATASET_H
#define FEED_FUZZ_DATASET_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt.h"
#include "fuzz_store.h"

static inline size_t fmt_align64_fuzz(size_t n)
{
	return (n + FMT_SECTION_ALIGN - 1) & ~(size_t)(FMT_SECTION_ALIGN - 1);
}

/* The dataset's schema. */
static inline void fuzz_dataset_schema(struct fmt_schema *s)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 3;
	s->fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 2,
					  .shape = {8, 8}};
	s->fields[1] = (struct fmt_field){.name = "tokens", .dtype = FEED_DTYPE_U32,
					  .variable = true};
	s->fields[2] = (struct fmt_field){.name = "label", .dtype = FEED_DTYPE_I64};
}

/* Writes n records, at most per_block a block (0: no cap), shards past
 * shard_bytes, into dir (which must not exist). 0 or the writer's error. */
static inline int fuzz_dataset_write(const char *dir, uint32_t n, uint32_t per_block,
				     uint64_t shard_bytes, struct feed_err *err)
{
	static const char *const classes[] = {"cat", "dog"};
	struct fmt_writer_opts o = {.name = "fuzz", .block_records = per_block,
				    .block_bytes = 4096, .shard_bytes = shard_bytes,
				    .num_classes = 2, .classes = classes};
	struct fmt_schema s;
	struct fmt_writer *w = NULL;
	uint8_t image[64];
	uint32_t tokens[16];
	int64_t label;
	int rc;

	fuzz_dataset_schema(&s);
	if ((rc = fmt_writer_new(dir, &s, &o, &w, err)) < 0)
		return rc;
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		for (uint32_t k = 0; k < 64; k++)
			image[k] = (uint8_t)(i * 37 + k);
		for (uint32_t k = 0; k < 16; k++)
			tokens[k] = i * 1000 + k;
		label = i % 2;
		struct fmt_value v[3] = {{image, 64}, {tokens, 4 * (i % 16)}, {&label, 8}};
		rc = fmt_writer_add(w, v, err);
	}
	if (rc == 0)
		rc = fmt_writer_finish(w, err);
	fmt_writer_free(w);
	return rc;
}

/* The whole file at path, malloc'd, or NULL. */
static inline uint8_t *fuzz_slurp(const char *path, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t *buf = NULL;

	if (fd >= 0 && fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) &&
	    read(fd, buf, (size_t)st.st_size) == st.st_size) {
		*ret_len = (size_t)st.st_size;
	} else {
		free(buf);
		buf = NULL;
	}
	if (fd >= 0)
		close(fd);
	return buf;
}

/* Frees what fuzz_dataset_load() put in s. */
static inline void fuzz_dataset_free(struct fuzz_store *s)
{
	free((void *)s->manifest);
	for (int i = 0; i < FUZZ_STORE_SHARDS; i++) {
		free((void *)s->shard_name[i]);
		free((void *)s->shard[i]);
	}
	memset(s, 0, sizeof(*s));
}

/* Reads dir's manifest and its shard files (named shard-0000K.fsh, as the
 * writer names them) into s. 0, or -1 when something is missing. */
static inline int fuzz_dataset_load(const char *dir, struct fuzz_store *s)
{
	char path[4096];

	memset(s, 0, sizeof(*s));
	snprintf(path, sizeof(path), "%s/%s", dir, FMT_MANIFEST_FILE);
	if (!(s->manifest = fuzz_slurp(path, &s->manifest_len)))
		return -1;
	for (int i = 0; i < FUZZ_STORE_SHARDS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "shard-%05d.fsh", i);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (!(s->shard[i] = fuzz_slurp(path, &s->shard_len[i])))
			break;
		s->shard_name[i] = strdup(name);
	}
	return s->shard[0] ? 0 : -1;
}

/* Makes the dataset of n records, per_block a block, in a temporary
 * directory, loads it into s and removes the directory. 0 or -1. */
static inline int fuzz_dataset_make(uint32_t n, uint32_t per_block, uint64_t shard_bytes,
				    struct fuzz_store *s)
{
	char tmp[] = "/tmp/feed-fuzz-XXXXXX", dir[64], path[4096];
	struct feed_err err = {0};
	int rc = -1;

	if (!mkdtemp(tmp))
		return -1;
	snprintf(dir, sizeof(dir), "%s/ds", tmp);
	if (fuzz_dataset_write(dir, n, per_block, shard_bytes, &err) == 0)
		rc = fuzz_dataset_load(dir, s);
	else
		fprintf(stderr, "fuzz dataset: %s\n", err.msg);
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_name[0] != '.')
			unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
	rmdir(tmp);
	return rc;
}

/* For the targets, not the seed maker: reads what an opened dataset
 * holds, as a worker would, and checks it. */
#ifdef FEED_FUZZ_H

#define FUZZ_WALK_BLOCKS 64         /* blocks read from one input, at most */
#define FUZZ_WALK_BYTES (16u << 20) /* largest block buffer allocated */

/* Sample s is in the block fmt_dataset_locate() names. */
static inline void fuzz_dataset_locate(const struct fmt_dataset *ds, uint64_t s)
{
	struct fmt_block_meta m;
	struct fmt_loc loc;

	FUZZ_CHECK(fmt_dataset_locate(ds, s, &loc) == 0, "sample %llu", (unsigned long long)s);
	FUZZ_CHECK(fmt_dataset_block_meta(ds, loc.block, &m) == 0 && m.shard == loc.shard &&
		   m.first_sample <= s && s - m.first_sample == loc.record &&
		   loc.record < m.num_records, "sample %llu located in block %llu",
		   (unsigned long long)s, (unsigned long long)loc.block);
}

/* Block b's records, field by field, within the schema's sizes. */
static inline void fuzz_dataset_block(const struct fmt_dataset *ds, uint64_t b,
				      struct fmt_decoder *dec, uint8_t *comp, uint8_t *raw)
{
	const struct fmt_info *in = fmt_dataset_info(ds);
	struct feed_err err = {0};
	struct fmt_block_meta m;
	struct fmt_block blk;

	FUZZ_CHECK(fmt_dataset_block_meta(ds, b, &m) == 0, "block %llu", (unsigned long long)b);
	int rc = fmt_block_read(ds, b, dec, comp, in->max_block_comp, raw, in->max_block_raw, &blk,
				&err);
	if (rc < 0) {
		FUZZ_CHECK(err.msg[0], "block read refused (%d) without a message", rc);
		return;
	}
	FUZZ_CHECK(blk.num_records == m.num_records && blk.raw_size == m.raw_size, "block meta");
	unsigned sum = 0;
	for (uint32_t r = 0; r < blk.num_records; r++) {
		for (uint32_t f = 0; f < in->schema->nfields; f++) {
			size_t len;
			const uint8_t *p = fmt_block_field(&blk, f, r, &len);
			FUZZ_CHECK(len <= in->schema->fields[f].max_bytes, "field %u: %zu bytes", f, len);
			for (size_t i = 0; i < len; i++)
				sum += p[i];
		}
	}
	(void)sum;
}

/* Every check above over an open dataset. */
static inline void fuzz_dataset_walk(const struct fmt_dataset *ds)
{
	const struct fmt_info *in = fmt_dataset_info(ds);
	struct fmt_decoder *dec = NULL;

	FUZZ_CHECK(fmt_schema_check(in->schema, NULL) == 0, "an opened dataset's schema");
	FUZZ_CHECK(in->num_samples >= in->num_blocks && in->num_blocks >= 1, "%llu samples in "
		   "%llu blocks", (unsigned long long)in->num_samples,
		   (unsigned long long)in->num_blocks);
	fuzz_dataset_locate(ds, 0);
	fuzz_dataset_locate(ds, in->num_samples / 2);
	fuzz_dataset_locate(ds, in->num_samples - 1);
	if (in->max_block_comp > FUZZ_WALK_BYTES || in->max_block_raw > FUZZ_WALK_BYTES)
		return;
	uint8_t *comp = malloc(in->max_block_comp + 1);
	uint8_t *raw = aligned_alloc(FMT_SECTION_ALIGN, fmt_align64_fuzz(in->max_block_raw + 1));
	FUZZ_CHECK(comp && raw && fmt_decoder_new(&dec) == 0, "out of memory");
	for (uint64_t b = 0; b < in->num_blocks && b < FUZZ_WALK_BLOCKS; b++)
		fuzz_dataset_block(ds, b, dec, comp, raw);
	fmt_decoder_free(dec);
	free(raw);
	free(comp);
}

#endif /* FEED_FUZZ_H */

#endif
