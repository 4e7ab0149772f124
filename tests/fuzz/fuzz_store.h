/*
 * fuzz_store.h: a dataset held in memory, read through format/'s store
 * seam (fmt.h struct fmt_store_ops) exactly as the daemon's HTTP and S3
 * reader is: the manifest and the shard files are byte arrays the target
 * owns; a file the store does not hold is -ENOENT, a range past a file's
 * end -EBADMSG. For fuzz_manifest_load and fuzz_shard_open. One thread.
 */
#ifndef FEED_FUZZ_STORE_H
#define FEED_FUZZ_STORE_H

#include <errno.h>
#include <string.h>

#include "fmt.h"

#define FUZZ_STORE_SHARDS 4

struct fuzz_store {
	const uint8_t *manifest;   /* manifest.pb: borrowed */
	size_t manifest_len;
	const char *shard_name[FUZZ_STORE_SHARDS]; /* NULL: not held */
	const uint8_t *shard[FUZZ_STORE_SHARDS];    /* borrowed */
	size_t shard_len[FUZZ_STORE_SHARDS];
};

/* The bytes of file (shard -1: the manifest), or NULL when not held. */
static inline const uint8_t *fuzz_store_file(const struct fuzz_store *s, int32_t shard,
					     const char *file, size_t *ret_len)
{
	if (shard < 0) {
		if (strcmp(file, FMT_MANIFEST_FILE))
			return NULL;
		*ret_len = s->manifest_len;
		return s->manifest;
	}
	if (shard >= FUZZ_STORE_SHARDS || !s->shard_name[shard] || strcmp(file, s->shard_name[shard]))
		return NULL;
	*ret_len = s->shard_len[shard];
	return s->shard[shard];
}

static int fuzz_store_size(void *ctx, int32_t shard, const char *file, uint64_t *ret_size,
			   struct feed_err *err)
{
	size_t len;

	if (!fuzz_store_file(ctx, shard, file, &len))
		return feed_err_set(err, -ENOENT, "fuzz store: %s: not there", file);
	*ret_size = len;
	return 0;
}

static int fuzz_store_read(void *ctx, const struct fmt_range *r, void *buf, struct feed_err *err)
{
	size_t len;
	const uint8_t *p = fuzz_store_file(ctx, r->shard, r->file, &len);

	if (!p)
		return feed_err_set(err, -ENOENT, "fuzz store: %s: not there", r->file);
	if (r->off > len || r->len > len - r->off)
		return feed_err_set(err, -EBADMSG, "fuzz store: %s: %u bytes at %llu past its end",
				    r->file, r->len, (unsigned long long)r->off);
	memcpy(buf, p + r->off, r->len);
	return 0;
}

static const struct fmt_store_ops fuzz_store_ops = {
	.size = fuzz_store_size,
	.read = fuzz_store_read,
};

#endif
