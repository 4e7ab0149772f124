/*
 * fmt_reader.c: opens a dataset directory and reads blocks (FORMAT.md).
 *
 * Owns the shard descriptors and one flat table of every block, built once
 * at open. fmt_block_read() runs on any thread with the caller's buffers and
 * decoder; it never allocates and never maps a file: pread only, so a shard
 * truncated underneath us is -EBADMSG, not SIGBUS. A dataset opened with
 * fmt_dataset_open_store() reads the same bytes through the caller's store
 * (fmt.h) instead of pread, and checks them the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fmt.h"
#include "fmt_layout.h"

#define RD_MANIFEST_MAX (64u << 20) /* a manifest larger than this is refused */

/* One shard file, open for the life of the dataset. */
struct rd_shard {
	int fd;
	const char *file;      /* points into the manifest */
	uint64_t first_block;  /* global id of its first block */
};

/* One block, from a shard's footer index, with global sample numbers. */
struct rd_block {
	uint64_t offset;
	uint64_t first_sample;
	uint64_t hash;
	uint32_t num_records;
	uint32_t comp_size;
	uint32_t raw_size;
	uint32_t shard;
};

struct fmt_dataset {
	char *dir;                 /* the directory, or the store's label (a URL) */
	const struct fmt_store_ops *ops; /* NULL: a local directory, pread */
	void *store;               /* ops' context, owned */
	Feed__Manifest *manifest;  /* unpacked manifest.pb, owns the strings */
	struct fmt_schema schema;
	struct fmt_info info;
	uint32_t nshards;
	struct rd_shard *shards;
	uint64_t nblocks;
	struct rd_block *blocks;
	uint64_t stride;           /* records in every block, or 0 if they differ */
	char *paths;               /* FMT_PATHS_FILE, each newline made a NUL, or NULL */
	uint64_t *path_off;        /* sample i's path at paths + path_off[i] */
	uint32_t *lens;            /* FMT_LENGTHS_FILE (num_samples), or NULL */
	uint64_t lens_total;       /* their sum */
};

struct fmt_decoder {
	ZSTD_DCtx *dctx;  /* one per thread */
};

/* Reads exactly len bytes at off; -EBADMSG on a short file, -errno on error. */
static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EBADMSG;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Reads range r through ds's store; without one, with pread on fd. The
 * local path's errors are -errno, or -EBADMSG for a short file; a store's
 * carry its own message in err. */
static int rd_read(const struct fmt_dataset *ds, int fd, const struct fmt_range *r, void *buf,
		   struct feed_err *err)
{
	if (ds->ops)
		return ds->ops->read(ds->store, r, buf, err);
	int rc = pread_full(fd, buf, r->len, r->off);
	if (rc < 0)
		feed_err_set(err, rc, "%s", rc == -EBADMSG ? "shard truncated" : strerror(-rc));
	return rc;
}

/* manifest.pb through the store: its size, then its bytes. */
static int manifest_fetch(struct fmt_dataset *ds, uint8_t **ret_buf, size_t *ret_len,
			  struct feed_err *err)
{
	uint64_t size;
	int rc = ds->ops->size(ds->store, -1, FMT_MANIFEST_FILE, &size, err);

	if (rc < 0)
		return rc;
	if (size == 0 || size > RD_MANIFEST_MAX)
		return feed_err_set(err, -EBADMSG, "%s/%s: size %llu is not a manifest", ds->dir,
				    FMT_MANIFEST_FILE, (unsigned long long)size);
	uint8_t *buf = malloc(size);
	if (!buf)
		return feed_err_set(err, -ENOMEM, "%s/%s: out of memory", ds->dir, FMT_MANIFEST_FILE);
	struct fmt_range r = {.shard = -1, .file = FMT_MANIFEST_FILE, .len = (uint32_t)size};
	rc = ds->ops->read(ds->store, &r, buf, err);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*ret_buf = buf;
	*ret_len = size;
	return 0;
}

static int manifest_load(struct fmt_dataset *ds, struct feed_err *err)
{
	char path[4096];
	struct stat st;
	uint8_t *buf = NULL;
	int rc, fd;

	if (ds->ops) {
		size_t len = 0;
		rc = manifest_fetch(ds, &buf, &len, err);
		if (rc < 0)
			return rc;
		ds->manifest = feed__manifest__unpack(NULL, len, buf);
		free(buf);
		if (!ds->manifest)
			return feed_err_set(err, -EBADMSG, "%s/%s: not a valid manifest (protobuf "
					    "decode failed)", ds->dir, FMT_MANIFEST_FILE);
		return 0;
	}
	snprintf(path, sizeof(path), "%s/%s", ds->dir, FMT_MANIFEST_FILE);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > RD_MANIFEST_MAX) {
		rc = feed_err_set(err, -EBADMSG, "%s: size %lld is not a manifest", path,
				  (long long)st.st_size);
		goto out;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		rc = feed_err_set(err, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	rc = pread_full(fd, buf, (size_t)st.st_size, 0);
	if (rc < 0) {
		feed_err_set(err, rc, "%s: read failed: %s", path, strerror(-rc));
		goto out;
	}
	ds->manifest = feed__manifest__unpack(NULL, (size_t)st.st_size, buf);
	if (!ds->manifest)
		rc = feed_err_set(err, -EBADMSG, "%s: not a valid manifest (protobuf decode failed)", path);
out:
	free(buf);
	close(fd);
	return rc;
}

/* Checks the manifest's own consistency and fills ds->schema and ds->info. */
static int manifest_check(struct fmt_dataset *ds, struct feed_err *err)
{
	const Feed__Manifest *m = ds->manifest;
	uint64_t next = 0, blocks = 0;

	if (m->format_version != FMT_FORMAT_VERSION)
		return feed_err_set(err, -EBADMSG, "%s/%s: format version %u, expected %d", ds->dir,
				    FMT_MANIFEST_FILE, m->format_version, FMT_FORMAT_VERSION);
	int rc = fmt_schema_from_pb(m->schema, &ds->schema, err);
	if (rc < 0)
		return feed_err_prefix(err, "%s/%s", ds->dir, FMT_MANIFEST_FILE);
	if (m->n_shards == 0 || m->n_shards > UINT32_MAX)
		return feed_err_set(err, -EBADMSG, "%s/%s: no shards", ds->dir, FMT_MANIFEST_FILE);
	for (size_t i = 0; i < m->n_shards; i++) {
		const Feed__ShardInfo *s = m->shards[i];
		if (!s->file[0] || strchr(s->file, '/') || !strcmp(s->file, ".") || !strcmp(s->file, ".."))
			return feed_err_set(err, -EBADMSG, "%s/%s: shard %zu has a bad file name",
					    ds->dir, FMT_MANIFEST_FILE, i);
		if (s->first_sample != next || s->num_blocks == 0 || s->num_samples < s->num_blocks ||
		    s->num_blocks > (s->size / FMT_INDEX_ENTRY_SIZE))
			return feed_err_set(err, -EBADMSG, "%s/%s: shard '%s' counts do not add up",
					    ds->dir, FMT_MANIFEST_FILE, s->file);
		next += s->num_samples;
		blocks += s->num_blocks;
	}
	if (next != m->num_samples)
		return feed_err_set(err, -EBADMSG, "%s/%s: shards hold %llu samples, manifest says %llu",
				    ds->dir, FMT_MANIFEST_FILE, (unsigned long long)next,
				    (unsigned long long)m->num_samples);
	if (m->max_block_raw > UINT32_MAX || m->max_block_comp > UINT32_MAX)
		return feed_err_set(err, -EBADMSG, "%s/%s: block sizes out of range", ds->dir,
				    FMT_MANIFEST_FILE);
	if (m->n_classes > FMT_MAX_CLASSES)
		return feed_err_set(err, -EBADMSG, "%s/%s: %zu class names (at most %u)", ds->dir,
				    FMT_MANIFEST_FILE, m->n_classes, FMT_MAX_CLASSES);
	if (fmt_classes_check((uint32_t)m->n_classes, (const char *const *)m->classes, err) < 0) {
		if (!err)
			return -EBADMSG;
		err->code = -EBADMSG;
		return feed_err_prefix(err, "%s/%s", ds->dir, FMT_MANIFEST_FILE);
	}
	ds->nshards = (uint32_t)m->n_shards;
	ds->nblocks = blocks;
	return 0;
}

/* Checks one index entry against the running position in its shard. */
static int index_entry_check(const struct fmt_dataset *ds, const struct fmt_index_entry *e,
			     uint64_t pos, uint64_t rec)
{
	const Feed__Manifest *m = ds->manifest;

	return e->offset == pos && e->first_record == rec && e->num_records > 0 &&
	       e->comp_size > 0 && e->comp_size <= m->max_block_comp &&
	       e->raw_size <= m->max_block_raw;
}

static int shard_index_load(struct fmt_dataset *ds, uint32_t si, const struct fmt_trailer *t,
			    struct feed_err *err)
{
	const Feed__ShardInfo *s = ds->manifest->shards[si];
	struct rd_shard *sh = &ds->shards[si];
	size_t len = (size_t)t->num_blocks * FMT_INDEX_ENTRY_SIZE;
	uint8_t *idx = malloc(len);
	uint64_t pos = FMT_HEADER_SIZE, rec = 0;
	int rc;

	if (!idx)
		return feed_err_set(err, -ENOMEM, "%s/%s: out of memory for index", ds->dir, s->file);
	struct fmt_range r = {.shard = (int32_t)si, .file = s->file, .off = t->index_offset,
			      .len = (uint32_t)len};
	if (len > UINT32_MAX) {
		rc = feed_err_set(err, -EBADMSG, "%s/%s: index of %zu bytes", ds->dir, s->file, len);
		goto out;
	}
	rc = rd_read(ds, sh->fd, &r, idx, err);
	if (rc < 0 && ds->ops)
		goto out;  /* the store named what failed */
	if (rc < 0) {  /* rd_read said why; the file is named here */
		feed_err_prefix(err, "%s/%s: block index", ds->dir, s->file);
		goto out;
	}
	if (XXH64(idx, len, 0) != t->index_hash) {
		rc = feed_err_set(err, -EBADMSG, "%s/%s: block index checksum mismatch", ds->dir, s->file);
		goto out;
	}
	for (uint64_t b = 0; b < t->num_blocks; b++) {
		struct fmt_index_entry e;
		struct rd_block *rb = &ds->blocks[sh->first_block + b];
		fmt_index_decode(idx + b * FMT_INDEX_ENTRY_SIZE, &e);
		if (!index_entry_check(ds, &e, pos, rec)) {
			rc = feed_err_set(err, -EBADMSG, "%s/%s: block %llu: index entry inconsistent",
					  ds->dir, s->file, (unsigned long long)b);
			goto out;
		}
		*rb = (struct rd_block){.offset = e.offset, .first_sample = s->first_sample + rec,
					.hash = e.hash, .num_records = e.num_records,
					.comp_size = e.comp_size, .raw_size = e.raw_size, .shard = si};
		pos += e.comp_size;
		rec += e.num_records;
	}
	if (pos != t->index_offset || rec != t->num_records)
		rc = feed_err_set(err, -EBADMSG, "%s/%s: blocks do not fill the shard", ds->dir, s->file);
out:
	free(idx);
	return rc;
}

static int shard_check(struct fmt_dataset *ds, uint32_t si, const struct fmt_header *hp,
		       const struct fmt_trailer *tp, struct feed_err *err);

/* Shard si's file: opened (a local one) and its size checked against the
 * manifest's, before dataset_open() sizes the block table from the
 * manifest's counts, so that table is never larger than the files can
 * index (manifest_check(): a shard's blocks fit in its size). */
static int shard_find(struct fmt_dataset *ds, uint32_t si, struct feed_err *err)
{
	const Feed__ShardInfo *s = ds->manifest->shards[si];
	struct rd_shard *sh = &ds->shards[si];
	uint64_t size;
	struct stat st;
	int rc;

	sh->file = s->file;
	if (ds->ops) {
		if ((rc = ds->ops->size(ds->store, (int32_t)si, s->file, &size, err)) < 0)
			return rc;
	} else {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", ds->dir, s->file);
		sh->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (sh->fd < 0 || fstat(sh->fd, &st) < 0)
			return feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
		size = (uint64_t)st.st_size;
	}
	if (size != s->size)
		return feed_err_set(err, -EBADMSG, "%s/%s: size %llu, manifest says %llu (truncated "
				    "or replaced)", ds->dir, s->file, (unsigned long long)size,
				    (unsigned long long)s->size);
	return 0;
}

/* len bytes at off of shard si, from its file or through the store: 0,
 * or < 0 with err set by the store only (the caller names a local
 * file's short read). */
static int shard_read(struct fmt_dataset *ds, uint32_t si, uint64_t off, uint32_t len, void *buf,
		      struct feed_err *err)
{
	struct fmt_range r = {.shard = (int32_t)si, .file = ds->shards[si].file, .off = off,
			      .len = len};

	if (ds->ops)
		return ds->ops->read(ds->store, &r, buf, err);
	return pread_full(ds->shards[si].fd, buf, len, off);
}

/* Shard si, found (its size checked): header and trailer, then the checks
 * and the block index. */
static int shard_open(struct fmt_dataset *ds, uint32_t si, struct feed_err *err)
{
	const Feed__ShardInfo *s = ds->manifest->shards[si];
	uint8_t hb[FMT_HEADER_SIZE], tb[FMT_TRAILER_SIZE];
	struct fmt_header h;
	struct fmt_trailer t;
	int rc;

	if (s->size < FMT_HEADER_SIZE + FMT_TRAILER_SIZE)
		return feed_err_set(err, -EBADMSG, "%s/%s: bad shard header (magic or checksum)",
				    ds->dir, s->file);
	rc = shard_read(ds, si, 0, FMT_HEADER_SIZE, hb, err);
	if (rc == 0)
		rc = shard_read(ds, si, s->size - FMT_TRAILER_SIZE, FMT_TRAILER_SIZE, tb, err);
	if (rc < 0 && ds->ops)
		return rc;  /* the store named what failed */
	if (rc < 0)  /* the disk's error, not the bytes' */
		return feed_err_set(err, rc, "%s/%s: %s", ds->dir, s->file,
				    rc == -EBADMSG ? "shard truncated" : strerror(-rc));
	if (fmt_header_decode(hb, &h) < 0)
		return feed_err_set(err, -EBADMSG, "%s/%s: bad shard header (magic or checksum)",
				    ds->dir, s->file);
	if (fmt_trailer_decode(tb, &t) < 0)
		return feed_err_set(err, -EBADMSG, "%s/%s: bad shard trailer (magic or checksum)",
				    ds->dir, s->file);
	return shard_check(ds, si, &h, &t, err);
}

/* The header and trailer of shard si against the manifest and its size. */
static int shard_check(struct fmt_dataset *ds, uint32_t si, const struct fmt_header *hp,
		       const struct fmt_trailer *tp, struct feed_err *err)
{
	const Feed__ShardInfo *s = ds->manifest->shards[si];
	struct fmt_header h = *hp;
	struct fmt_trailer t = *tp;
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", ds->dir, s->file);
	if (h.version != FMT_FORMAT_VERSION || h.nfields != ds->schema.nfields ||
	    h.first_sample != s->first_sample || h.num_records != s->num_samples ||
	    h.num_blocks != s->num_blocks || t.num_blocks != h.num_blocks ||
	    t.num_records != h.num_records)
		return feed_err_set(err, -EBADMSG, "%s: header does not match the manifest", path);
	if (t.index_offset < FMT_HEADER_SIZE ||
	    t.index_offset + t.num_blocks * FMT_INDEX_ENTRY_SIZE + FMT_TRAILER_SIZE != s->size)
		return feed_err_set(err, -EBADMSG, "%s: file size does not match its footer", path);
	return shard_index_load(ds, si, &t, err);
}

static void info_fill(struct fmt_dataset *ds)
{
	const Feed__Manifest *m = ds->manifest;
	struct fmt_info *in = &ds->info;

	in->name = m->name;
	in->version = m->version;
	in->source = m->source;
	in->num_samples = m->num_samples;
	in->num_shards = ds->nshards;
	in->num_blocks = ds->nblocks;
	in->max_block_raw = m->max_block_raw;
	in->max_block_comp = m->max_block_comp;
	in->block_bytes = m->block_bytes;
	in->block_records = m->block_records;
	in->zstd_level = m->zstd_level;
	in->schema = &ds->schema;
	in->num_classes = (uint32_t)m->n_classes;
	in->classes = (const char *const *)m->classes;
	for (uint32_t i = 0; i < ds->nshards; i++)
		in->bytes_on_disk += m->shards[i]->size;
	for (uint64_t b = 0; b < ds->nblocks; b++)
		in->bytes_raw += ds->blocks[b].raw_size;
}

/* When block b starts at sample b * R for every block (all blocks but the
 * last hold R records, the last at most R), returns R, so that locating a sample is a division;
 * otherwise 0. */
static uint64_t uniform_stride(const struct fmt_dataset *ds)
{
	uint64_t r = ds->nblocks > 1 ? ds->blocks[1].first_sample : ds->info.num_samples;

	if (r == 0 || ds->blocks[ds->nblocks - 1].num_records > r)
		return 0;
	for (uint64_t b = 0; b < ds->nblocks; b++)
		if (ds->blocks[b].first_sample != b * r)
			return 0;
	return r;
}

/* The text of FMT_PATHS_FILE (len bytes in ds->paths): one line per
 * sample, each newline made a NUL, or an error naming path. */
static int paths_parse(struct fmt_dataset *ds, size_t len, const char *path, struct feed_err *err)
{
	uint64_t n = ds->info.num_samples, k = 0;

	if (!(ds->path_off = malloc(n * sizeof(uint64_t))))
		return feed_err_set(err, -ENOMEM, "%s: out of memory", path);
	for (uint64_t i = 0, start = 0; i < (uint64_t)len; i++) {
		if (ds->paths[i] != '\n')
			continue;
		if (k < n)
			ds->path_off[k] = start;
		k++;
		ds->paths[i] = '\0';
		start = i + 1;
	}
	if (k != n || ds->paths[len - 1] != '\0')
		return feed_err_set(err, -EBADMSG, "%s: %llu whole lines for %llu samples", path,
				    (unsigned long long)k, (unsigned long long)n);
	return 0;
}

/* FMT_PATHS_FILE through the store, when there is one (404: none). */
static int paths_fetch(struct fmt_dataset *ds, const char *path, struct feed_err *err)
{
	struct feed_err e2 = {0};
	uint64_t size;
	int rc = ds->ops->size(ds->store, -1, FMT_PATHS_FILE, &size, &e2);

	/* S3 answers 403 for a missing key to a reader without ListBucket:
	 * the manifest and shards read, so it is the optional file's absence */
	if (rc == -ENOENT || rc == -EACCES)
		return 0;
	if (rc < 0)
		return feed_err_set(err, rc, "%s", e2.msg);
	if (size == 0 || size > UINT32_MAX || !(ds->paths = malloc(size)))
		return feed_err_set(err, size ? -ENOMEM : -EBADMSG, "%s: %llu bytes", path,
				    (unsigned long long)size);
	struct fmt_range r = {.shard = -1, .file = FMT_PATHS_FILE, .len = (uint32_t)size};
	if ((rc = ds->ops->read(ds->store, &r, ds->paths, err)) < 0)
		return rc;
	return paths_parse(ds, size, path, err);
}

/* FMT_PATHS_FILE, when there is one: one line per sample, or an error. */
static int paths_load(struct fmt_dataset *ds, struct feed_err *err)
{
	char path[4096];
	struct stat st;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", ds->dir, FMT_PATHS_FILE);
	if (ds->ops)
		return paths_fetch(ds, path, err);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || !(ds->paths = malloc((size_t)st.st_size))) {
		rc = feed_err_set(err, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((rc = pread_full(fd, ds->paths, (size_t)st.st_size, 0)) < 0) {
		feed_err_set(err, rc, "%s: read failed: %s", path, strerror(-rc));
		goto out;
	}
	rc = paths_parse(ds, (size_t)st.st_size, path, err);
out:
	close(fd);
	return rc;
}

/* FMT_LENGTHS_FILE's bytes into ds->lens: exactly 4 per sample. */
static int lens_read(struct fmt_dataset *ds, int fd, uint64_t size, const char *path,
		     struct feed_err *err)
{
	uint64_t n = ds->info.num_samples;
	int rc;

	if (size != 4 * n)
		return feed_err_set(err, -EBADMSG, "%s: %llu bytes, expected %llu (4 per sample)",
				    path, (unsigned long long)size, (unsigned long long)(4 * n));
	if (!(ds->lens = malloc(size)))
		return feed_err_set(err, -ENOMEM, "%s: out of memory", path);
	if (ds->ops) {
		struct fmt_range r = {.shard = -1, .file = FMT_LENGTHS_FILE, .len = (uint32_t)size};
		if (size > UINT32_MAX)
			return feed_err_set(err, -E2BIG, "%s: too large to fetch", path);
		rc = ds->ops->read(ds->store, &r, ds->lens, err);
	} else if ((rc = pread_full(fd, ds->lens, size, 0)) < 0) {
		feed_err_set(err, rc, "%s: read failed: %s", path, strerror(-rc));
	}
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		ds->lens_total += ds->lens[i];
	return rc;
}

/* FMT_LENGTHS_FILE, when the schema has a token field and the file is
 * there (datasets packed before lengths were kept have none). */
static int lens_load(struct fmt_dataset *ds, struct feed_err *err)
{
	char path[4096];
	struct feed_err e2 = {0};
	struct stat st;
	uint64_t size;
	int fd = -1, rc;

	if (fmt_schema_tokens(&ds->schema) < 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", ds->dir, FMT_LENGTHS_FILE);
	if (ds->ops) {
		rc = ds->ops->size(ds->store, -1, FMT_LENGTHS_FILE, &size, &e2);
		if (rc == -ENOENT || rc == -EACCES)
			return 0;
		if (rc < 0)
			return feed_err_set(err, rc, "%s", e2.msg);
		return lens_read(ds, -1, size, path, err);
	}
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0)
		rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	else
		rc = lens_read(ds, fd, (uint64_t)st.st_size, path, err);
	close(fd);
	return rc;
}

int fmt_dataset_doc_lens(const struct fmt_dataset *ds, const uint32_t **ret_lens,
			 uint64_t *ret_total)
{
	if (!ds->lens)
		return -ENOENT;
	*ret_lens = ds->lens;
	*ret_total = ds->lens_total;
	return 0;
}

const char *fmt_dataset_sample_path(const struct fmt_dataset *ds, uint64_t sample)
{
	if (!ds->path_off || sample >= ds->info.num_samples)
		return NULL;
	return ds->paths + ds->path_off[sample];
}

/* The shard table, every fd -1 until opened (fmt_dataset_close() closes
 * those >= 0), and every shard found (shard_find()). */
static int shards_find(struct fmt_dataset *ds, struct feed_err *err)
{
	int rc;

	if (!(ds->shards = calloc(ds->nshards, sizeof(*ds->shards))))
		return feed_err_set(err, -ENOMEM, "%s: out of memory for %u shards", ds->dir,
				    ds->nshards);
	for (uint32_t i = 0; i < ds->nshards; i++)
		ds->shards[i].fd = -1;
	for (uint32_t i = 0; i < ds->nshards; i++)
		if ((rc = shard_find(ds, i, err)) < 0)
			return rc;
	return 0;
}

static int dataset_open(struct fmt_dataset *ds, struct fmt_dataset **ret_ds, struct feed_err *err)
{
	const char *dir = ds->dir;
	int rc = manifest_load(ds, err);
	if (rc == 0)
		rc = manifest_check(ds, err);
	if (rc < 0)
		goto fail;
	if ((rc = shards_find(ds, err)) < 0)
		goto fail;
	if (!(ds->blocks = calloc(ds->nblocks, sizeof(*ds->blocks)))) {
		rc = feed_err_set(err, -ENOMEM, "%s: out of memory for %llu blocks", dir,
				  (unsigned long long)ds->nblocks);
		goto fail;
	}
	for (uint64_t i = 0, first = 0; i < ds->nshards; i++) {
		ds->shards[i].first_block = first;
		first += ds->manifest->shards[i]->num_blocks;
		if ((rc = shard_open(ds, (uint32_t)i, err)) < 0)
			goto fail;
	}
	info_fill(ds);
	ds->stride = uniform_stride(ds);
	if ((rc = paths_load(ds, err)) < 0 || (rc = lens_load(ds, err)) < 0)
		goto fail;
	*ret_ds = ds;
	return 0;
fail:
	fmt_dataset_close(ds);
	return rc;
}

int fmt_dataset_open(const char *dir, struct fmt_dataset **ret_ds, struct feed_err *err)
{
	struct fmt_dataset *ds = calloc(1, sizeof(*ds));

	if (!ds || !(ds->dir = strdup(dir))) {
		free(ds);
		return feed_err_set(err, -ENOMEM, "%s: out of memory", dir);
	}
	return dataset_open(ds, ret_ds, err);
}

int fmt_dataset_open_store(const char *label, const struct fmt_store_ops *ops, void *ctx,
			   struct fmt_dataset **ret_ds, struct feed_err *err)
{
	struct fmt_dataset *ds = calloc(1, sizeof(*ds));

	if (!ds || !(ds->dir = strdup(label))) {
		free(ds);
		if (ops->close)
			ops->close(ctx);
		return feed_err_set(err, -ENOMEM, "%s: out of memory", label);
	}
	ds->ops = ops;
	ds->store = ctx;
	return dataset_open(ds, ret_ds, err);
}

void fmt_dataset_prefetch(const struct fmt_dataset *ds, const uint64_t *blocks, size_t n)
{
	struct fmt_range r[64];
	size_t k = 0;

	if (!ds->ops || !ds->ops->prefetch)
		return;
	for (size_t i = 0; i < n; i++) {
		if (blocks[i] >= ds->nblocks)
			continue;
		const struct rd_block *b = &ds->blocks[blocks[i]];
		const struct rd_shard *sh = &ds->shards[b->shard];
		r[k++] = (struct fmt_range){.shard = (int32_t)b->shard, .file = sh->file,
					    .off = b->offset, .len = b->comp_size,
					    .has_hash = true, .hash = b->hash,
					    .block = blocks[i] - sh->first_block};
		if (k == sizeof(r) / sizeof(r[0]) || i + 1 == n) {
			ds->ops->prefetch(ds->store, r, k);
			k = 0;
		}
	}
	if (k)
		ds->ops->prefetch(ds->store, r, k);
}

uint64_t fmt_hash(const void *data, size_t len)
{
	return XXH64(data, len, 0);
}

void fmt_dataset_close(struct fmt_dataset *ds)
{
	if (!ds)
		return;
	for (uint32_t i = 0; ds->shards && i < ds->nshards; i++)
		if (ds->shards[i].fd >= 0)
			close(ds->shards[i].fd);
	free(ds->shards);
	free(ds->blocks);
	free(ds->paths);
	free(ds->path_off);
	free(ds->lens);
	if (ds->manifest)
		feed__manifest__free_unpacked(ds->manifest, NULL);
	if (ds->ops && ds->ops->close)
		ds->ops->close(ds->store);
	free(ds->dir);
	free(ds);
}

const struct fmt_info *fmt_dataset_info(const struct fmt_dataset *ds)
{
	return &ds->info;
}

const char *fmt_dataset_shard_file(const struct fmt_dataset *ds, uint32_t shard)
{
	return shard < ds->nshards ? ds->shards[shard].file : NULL;
}

int fmt_dataset_locate(const struct fmt_dataset *ds, uint64_t sample, struct fmt_loc *ret_loc)
{
	uint64_t lo = 0, hi = ds->nblocks;

	if (sample >= ds->info.num_samples)
		return -EINVAL;
	if (ds->stride) /* the usual case: a division, not a search */
		lo = hi = sample / ds->stride;
	while (hi - lo > 1) { /* invariant: blocks[lo].first_sample <= sample */
		uint64_t mid = lo + (hi - lo) / 2;
		if (ds->blocks[mid].first_sample <= sample)
			lo = mid;
		else
			hi = mid;
	}
	ret_loc->block = lo;
	ret_loc->shard = ds->blocks[lo].shard;
	ret_loc->record = (uint32_t)(sample - ds->blocks[lo].first_sample);
	return 0;
}

int fmt_dataset_block_meta(const struct fmt_dataset *ds, uint64_t block, struct fmt_block_meta *ret_meta)
{
	if (block >= ds->nblocks)
		return -EINVAL;
	const struct rd_block *b = &ds->blocks[block];
	*ret_meta = (struct fmt_block_meta){.shard = b->shard, .first_sample = b->first_sample,
					    .num_records = b->num_records,
					    .comp_size = b->comp_size, .raw_size = b->raw_size};
	return 0;
}

int fmt_decoder_new(struct fmt_decoder **ret_dec)
{
	struct fmt_decoder *d = calloc(1, sizeof(*d));

	if (!d || !(d->dctx = ZSTD_createDCtx())) {
		free(d);
		return -ENOMEM;
	}
	*ret_dec = d;
	return 0;
}

void fmt_decoder_free(struct fmt_decoder *dec)
{
	if (!dec)
		return;
	ZSTD_freeDCtx(dec->dctx);
	free(dec);
}

/* Walks the sections of a decoded block, checking every offset table, and
 * fills blk->section/data_start. Returns 0 or -EBADMSG. */
static int block_sections(const struct fmt_schema *s, struct fmt_block *blk)
{
	uint64_t pos = 0, n = blk->num_records;
	const uint8_t *raw = blk->raw;

	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct fmt_field *fd = &s->fields[f];
		pos = fmt_align64(pos);
		blk->section[f] = (uint32_t)pos;
		if (!fd->variable) {
			blk->data_start[f] = (uint32_t)pos;
			pos += n * fd->max_bytes;
			if (pos > blk->raw_size)
				return -EBADMSG;
			continue;
		}
		uint64_t start = fmt_align64(pos + 4 * (n + 1));
		if (start > blk->raw_size)
			return -EBADMSG;
		size_t elem = fmt_field_elem_bytes(fd);
		uint32_t prev = fmt_get32(raw + pos);
		if (prev != 0)
			return -EBADMSG;
		for (uint64_t j = 1; j <= n; j++) {
			uint32_t o = fmt_get32(raw + pos + 4 * j);
			if (o < prev || (o - prev) % elem || o - prev > fd->max_bytes)
				return -EBADMSG;
			prev = o;
		}
		blk->data_start[f] = (uint32_t)start;
		pos = start + prev;
		if (pos > blk->raw_size)
			return -EBADMSG;
	}
	return pos == blk->raw_size ? 0 : -EBADMSG;
}

int fmt_block_read(const struct fmt_dataset *ds, uint64_t block, struct fmt_decoder *dec,
		   void *comp_buf, size_t comp_cap, void *raw_buf, size_t raw_cap,
		   struct fmt_block *ret_blk, struct feed_err *err)
{
	if (block >= ds->nblocks)
		return feed_err_set(err, -EINVAL, "%s: block %llu out of range", ds->dir,
				    (unsigned long long)block);
	const struct rd_block *b = &ds->blocks[block];
	const struct rd_shard *sh = &ds->shards[b->shard];
	uint64_t local = block - sh->first_block;

	if (comp_cap < b->comp_size || raw_cap < b->raw_size)
		return feed_err_set(err, -EINVAL, "%s/%s: block %llu: buffers too small", ds->dir,
				    sh->file, (unsigned long long)local);
	struct fmt_range r = {.shard = (int32_t)b->shard, .file = sh->file, .off = b->offset,
			      .len = b->comp_size, .has_hash = true, .hash = b->hash,
			      .block = local};
	int rc = rd_read(ds, sh->fd, &r, comp_buf, err);
	if (rc < 0 && ds->ops)
		return rc;  /* the store's message names URL, file and block */
	if (rc < 0)
		return feed_err_prefix(err, "%s/%s: block %llu", ds->dir, sh->file,
				       (unsigned long long)local);
	if (XXH64(comp_buf, b->comp_size, 0) != b->hash)
		return feed_err_set(err, -EBADMSG, "%s/%s: block %llu: checksum mismatch", ds->dir,
				    sh->file, (unsigned long long)local);
	size_t got = ZSTD_decompressDCtx(dec->dctx, raw_buf, b->raw_size, comp_buf, b->comp_size);
	if (ZSTD_isError(got) || got != b->raw_size)
		return feed_err_set(err, -EBADMSG, "%s/%s: block %llu: decode failed (%s)", ds->dir,
				    sh->file, (unsigned long long)local,
				    ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
	struct fmt_block blk = {.schema = &ds->schema, .id = block, .first_sample = b->first_sample,
				.num_records = b->num_records, .raw = raw_buf,
				.raw_size = b->raw_size};
	if (block_sections(&ds->schema, &blk) < 0)
		return feed_err_set(err, -EBADMSG, "%s/%s: block %llu: record layout inconsistent",
				    ds->dir, sh->file, (unsigned long long)local);
	*ret_blk = blk;
	return 0;
}
