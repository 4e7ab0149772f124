/*
 * fmt_writer.c: writes a dataset directory (FORMAT.md).
 *
 * Owns a temporary sibling of the output directory until finish renames it
 * into place, so a failed or interrupted ingest never leaves something that
 * looks like a dataset. Records are gathered by field (columns) for the
 * current block, then laid out, compressed and appended to the current
 * shard. One thread per writer; not on any hot path of the daemon.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fmt.h"
#include "fmt_layout.h"
#include "fmt_pb.h"

/* A growable byte buffer. */
struct wr_buf {
	uint8_t *p;
	size_t len, cap;
};

/* What the manifest will say of a finished shard. */
struct wr_shard {
	char file[32];
	uint64_t size, first_sample, num_samples, num_blocks;
};

struct fmt_writer {
	char *out_dir, *tmp_dir;
	struct fmt_schema schema;
	struct fmt_writer_opts opts;
	char *name, *source;
	char **classes;                      /* opts.classes, copied (opts.num_classes) */
	uint64_t noted[FMT_MAX_FIELDS];      /* image fields: records noted */
	struct wr_buf paths;                 /* records' paths, one a line */
	uint64_t npaths;                     /* records whose path was noted */
	int tok_field;                       /* variable FMT_TOKENS_FIELD, or -1 */
	struct wr_buf lens;                  /* its records' lengths, u32 LE each */
	ZSTD_CCtx *cctx;
	/* The block being gathered. */
	struct wr_buf col[FMT_MAX_FIELDS];   /* field bytes */
	struct wr_buf offs[FMT_MAX_FIELDS];  /* variable fields: u32 end offsets */
	uint32_t blk_n;
	struct wr_buf raw, comp;             /* layout and compression buffers */
	/* The shard being written. */
	int fd;
	uint64_t shard_pos, shard_first, shard_records;
	struct wr_buf index;                 /* encoded index entries */
	/* Everything so far. */
	struct wr_shard *shards;
	uint32_t nshards, shards_cap;
	uint64_t total, max_raw, max_comp;
	int finished;
};

static int buf_reserve(struct wr_buf *b, size_t need)
{
	if (b->cap >= need)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap *= 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static int buf_append(struct wr_buf *b, const void *data, size_t len)
{
	if (buf_reserve(b, b->len + len) < 0)
		return -ENOMEM;
	if (len)
		memcpy(b->p + b->len, data, len);
	b->len += len;
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int io_err(struct fmt_writer *w, struct feed_err *err, int rc, const char *file)
{
	return feed_err_set(err, rc, "%s/%s: %s", w->tmp_dir, file, strerror(-rc));
}

/* Room for one more entry in w->shards. */
static int shards_grow(struct fmt_writer *w)
{
	if (w->nshards < w->shards_cap)
		return 0;
	uint32_t cap = w->shards_cap ? w->shards_cap * 2 : 8;
	void *p = realloc(w->shards, cap * sizeof(*w->shards));
	if (!p)
		return -ENOMEM;
	w->shards = p;
	w->shards_cap = cap;
	return 0;
}

static int shard_start(struct fmt_writer *w, struct feed_err *err)
{
	struct wr_shard *s;
	char path[PATH_MAX];
	uint8_t zero[FMT_HEADER_SIZE] = {0};

	if (shards_grow(w) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	s = &w->shards[w->nshards];
	memset(s, 0, sizeof(*s));
	snprintf(s->file, sizeof(s->file), "shard-%05u.fsh", w->nshards);
	s->first_sample = w->total - w->blk_n; /* total already counts the block */
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, s->file);
	w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (w->fd < 0)
		return feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	w->nshards++; /* from here on free() knows to remove it */
	int rc = write_full(w->fd, zero, sizeof(zero));
	if (rc < 0)
		return io_err(w, err, rc, s->file);
	w->shard_pos = FMT_HEADER_SIZE;
	w->shard_first = s->first_sample;
	w->shard_records = 0;
	w->index.len = 0;
	return 0;
}

static int shard_close(struct fmt_writer *w, struct feed_err *err)
{
	struct wr_shard *s = &w->shards[w->nshards - 1];
	uint64_t nblocks = w->index.len / FMT_INDEX_ENTRY_SIZE;
	struct fmt_header h = {.version = FMT_FORMAT_VERSION, .nfields = w->schema.nfields,
			       .first_sample = w->shard_first, .num_records = w->shard_records,
			       .num_blocks = nblocks};
	struct fmt_trailer t = {.index_offset = w->shard_pos, .num_blocks = nblocks,
				.num_records = w->shard_records,
				.index_hash = XXH64(w->index.p, w->index.len, 0)};
	uint8_t hb[FMT_HEADER_SIZE], tb[FMT_TRAILER_SIZE];
	int rc;

	fmt_header_encode(&h, hb);
	fmt_trailer_encode(&t, tb);
	rc = write_full(w->fd, w->index.p, w->index.len);
	if (rc == 0)
		rc = write_full(w->fd, tb, sizeof(tb));
	if (rc == 0) {
		ssize_t n = pwrite(w->fd, hb, sizeof(hb), 0);
		if (n != (ssize_t)sizeof(hb))
			rc = n < 0 ? -errno : -EIO;
	}
	if (rc == 0 && fsync(w->fd) < 0)
		rc = -errno;
	if (close(w->fd) < 0 && rc == 0)
		rc = -errno;
	w->fd = -1;
	if (rc < 0)
		return io_err(w, err, rc, s->file);
	s->size = w->shard_pos + w->index.len + FMT_TRAILER_SIZE;
	s->num_samples = w->shard_records;
	s->num_blocks = nblocks;
	return 0;
}

/* Lays out the gathered records (FORMAT.md "Decoded block") into w->raw. */
static int block_layout(struct fmt_writer *w, uint64_t *ret_size)
{
	uint32_t section[FMT_MAX_FIELDS], data_start[FMT_MAX_FIELDS];
	uint64_t var_bytes[FMT_MAX_FIELDS];

	for (uint32_t f = 0; f < w->schema.nfields; f++)
		var_bytes[f] = w->col[f].len;
	uint64_t size = fmt_block_layout(&w->schema, w->blk_n, var_bytes, section, data_start);
	if (size == 0 || buf_reserve(&w->raw, size) < 0)
		return size == 0 ? -E2BIG : -ENOMEM;
	memset(w->raw.p, 0, size); /* padding between sections is zero */
	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		if (w->schema.fields[f].variable) {
			uint32_t zero = 0;
			memcpy(w->raw.p + section[f], &zero, 4);
			memcpy(w->raw.p + section[f] + 4, w->offs[f].p, w->offs[f].len);
		}
		if (w->col[f].len)
			memcpy(w->raw.p + data_start[f], w->col[f].p, w->col[f].len);
	}
	*ret_size = size;
	return 0;
}

static int block_flush(struct fmt_writer *w, struct feed_err *err)
{
	uint64_t raw_size;
	int rc;

	if (w->blk_n == 0)
		return 0;
	if ((rc = block_layout(w, &raw_size)) < 0)
		return feed_err_set(err, rc, "block of %u records: %s", w->blk_n,
				    rc == -E2BIG ? "larger than 4 GiB" : "out of memory");
	size_t bound = ZSTD_compressBound(raw_size);
	if (buf_reserve(&w->comp, bound) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	size_t comp = ZSTD_compress2(w->cctx, w->comp.p, bound, w->raw.p, raw_size);
	if (ZSTD_isError(comp) || comp > UINT32_MAX)
		return feed_err_set(err, -EIO, "zstd: %s", ZSTD_getErrorName(comp));
	if (w->fd < 0 && (rc = shard_start(w, err)) < 0)
		return rc;
	if ((rc = write_full(w->fd, w->comp.p, comp)) < 0)
		return io_err(w, err, rc, w->shards[w->nshards - 1].file);
	struct fmt_index_entry e = {.offset = w->shard_pos, .first_record = w->shard_records,
				    .num_records = w->blk_n, .comp_size = (uint32_t)comp,
				    .raw_size = (uint32_t)raw_size, .hash = XXH64(w->comp.p, comp, 0)};
	uint8_t eb[FMT_INDEX_ENTRY_SIZE];
	fmt_index_encode(&e, eb);
	if (buf_append(&w->index, eb, sizeof(eb)) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	w->shard_pos += comp;
	w->shard_records += w->blk_n;
	w->max_raw = raw_size > w->max_raw ? raw_size : w->max_raw;
	w->max_comp = comp > w->max_comp ? comp : w->max_comp;
	for (uint32_t f = 0; f < w->schema.nfields; f++)
		w->col[f].len = w->offs[f].len = 0;
	w->blk_n = 0;
	if (w->shard_pos >= w->opts.shard_bytes)
		return shard_close(w, err);
	return 0;
}

static char *dir_strip(const char *path)
{
	char *s = strdup(path);
	size_t n = s ? strlen(s) : 0;

	while (n > 1 && s[n - 1] == '/')
		s[--n] = '\0';
	return s;
}

static int writer_dirs(struct fmt_writer *w, const char *out_dir, struct feed_err *err)
{
	struct stat st;

	w->out_dir = dir_strip(out_dir);
	if (!w->out_dir || asprintf(&w->tmp_dir, "%s.tmp-XXXXXX", w->out_dir) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	if (lstat(w->out_dir, &st) == 0)
		return feed_err_set(err, -EEXIST, "%s: already exists (remove it or pick another output)",
				    w->out_dir);
	if (!mkdtemp(w->tmp_dir)) {
		int rc = -errno;
		free(w->tmp_dir);
		w->tmp_dir = NULL;
		return feed_err_set(err, rc, "%s: cannot create output: %s", w->out_dir, strerror(-rc));
	}
	chmod(w->tmp_dir, 0755); /* mkdtemp makes it 0700; datasets are shared */
	return 0;
}

int fmt_writer_new(const char *out_dir, const struct fmt_schema *schema,
		   const struct fmt_writer_opts *opts, struct fmt_writer **ret_w,
		   struct feed_err *err)
{
	struct fmt_writer *w;
	int rc = fmt_schema_check(schema, err);

	if (rc == 0)
		rc = fmt_schema_check_images(schema, err);
	if (rc < 0)
		return rc;
	if (!(w = calloc(1, sizeof(*w))))
		return feed_err_set(err, -ENOMEM, "out of memory");
	w->fd = -1;
	w->schema = *schema;
	w->tok_field = fmt_schema_tokens(schema);
	for (uint32_t f = 0; f < schema->nfields; f++) {
		struct fmt_field *fd = &w->schema.fields[f];
		fd->max_bytes = fd->variable ? 0 : fmt_field_elem_bytes(fd);
		fd->max_width = fd->max_height = 0;
		fd->max_pixels = 0;
	}
	if ((rc = fmt_classes_check(opts->num_classes, opts->classes, err)) < 0) {
		free(w);
		return rc;
	}
	w->opts = *opts;
	w->opts.block_bytes = opts->block_bytes ? opts->block_bytes : 64 * 1024;
	w->opts.zstd_level = opts->zstd_level ? opts->zstd_level : 3;
	w->opts.shard_bytes = opts->shard_bytes ? opts->shard_bytes : 256ull << 20;
	w->name = strdup(opts->name ? opts->name : "dataset");
	w->source = strdup(opts->source ? opts->source : "");
	w->cctx = ZSTD_createCCtx();
	w->opts.classes = NULL;
	bool classes_ok = true;
	if (opts->num_classes && !(w->classes = calloc(opts->num_classes, sizeof(char *))))
		w->opts.num_classes = 0, classes_ok = false;
	for (uint32_t i = 0; i < w->opts.num_classes; i++)
		if (!(w->classes[i] = strdup(opts->classes[i])))
			classes_ok = false;
	if (!w->name || !w->source || !w->cctx || !classes_ok) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (w->opts.zstd_level < 1 || w->opts.zstd_level > ZSTD_maxCLevel()) {
		rc = feed_err_set(err, -EINVAL, "zstd level %d out of range 1..%d", w->opts.zstd_level,
				  ZSTD_maxCLevel());
		goto fail;
	}
	ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, w->opts.zstd_level);
	if ((rc = writer_dirs(w, out_dir, err)) < 0)
		goto fail;
	*ret_w = w;
	return 0;
fail:
	fmt_writer_free(w);
	return rc;
}

/* Raw bytes the current block would take with one more record of add bytes. */
static uint64_t block_estimate(const struct fmt_writer *w, const struct fmt_value *v)
{
	uint64_t est = 0;

	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		est += FMT_SECTION_ALIGN + w->col[f].len + v[f].len;
		if (w->schema.fields[f].variable)
			est += FMT_SECTION_ALIGN + 4 * ((uint64_t)w->blk_n + 2);
	}
	return est;
}

static int value_check(const struct fmt_writer *w, const struct fmt_value *v, struct feed_err *err)
{
	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		const struct fmt_field *fd = &w->schema.fields[f];
		size_t elem = fmt_field_elem_bytes(fd);
		if (fd->image && w->noted[f] != w->total)
			return feed_err_set(err, -EINVAL,
					    "record %llu: field '%s': image dimensions not noted",
					    (unsigned long long)w->noted[f], fd->name);
		if (!fd->variable && v[f].len != elem)
			return feed_err_set(err, -EINVAL, "record %llu: field '%s' has %zu bytes, expected %zu",
					    (unsigned long long)w->total, fd->name, v[f].len, elem);
		if (fd->variable && (v[f].len % elem || v[f].len > UINT32_MAX / 2))
			return feed_err_set(err, -EINVAL,
					    "record %llu: field '%s' has %zu bytes, not a multiple of %zu",
					    (unsigned long long)w->total, fd->name, v[f].len, elem);
		if (v[f].len && !v[f].data)
			return feed_err_set(err, -EINVAL, "record %llu: field '%s' has no data",
					    (unsigned long long)w->total, fd->name);
	}
	return 0;
}

/* A token record's length in elements, for FMT_LENGTHS_FILE. */
static int lens_note(struct fmt_writer *w, const struct fmt_value *v, struct feed_err *err)
{
	uint64_t n = v->len / fmt_field_elem_bytes(&w->schema.fields[w->tok_field]);
	uint32_t le = (uint32_t)n;

	if (n > UINT32_MAX)
		return feed_err_set(err, -EINVAL, "record %llu: field '%s': %llu tokens, more than "
				    "%u", (unsigned long long)w->total, FMT_TOKENS_FIELD,
				    (unsigned long long)n, UINT32_MAX);
	if (buf_append(&w->lens, &le, 4) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	return 0;
}

int fmt_writer_add(struct fmt_writer *w, const struct fmt_value *values, struct feed_err *err)
{
	int rc = value_check(w, values, err);

	if (rc < 0)
		return rc;
	if (w->blk_n > 0 && (block_estimate(w, values) > w->opts.block_bytes ||
			     (w->opts.block_records && w->blk_n >= w->opts.block_records) ||
			     block_estimate(w, values) > UINT32_MAX / 2))
		if ((rc = block_flush(w, err)) < 0)
			return rc;
	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		struct fmt_field *fd = &w->schema.fields[f];
		if (buf_append(&w->col[f], values[f].data, values[f].len) < 0)
			return feed_err_set(err, -ENOMEM, "out of memory");
		if (!fd->variable)
			continue;
		uint32_t end = (uint32_t)w->col[f].len;
		if (buf_append(&w->offs[f], &end, 4) < 0)
			return feed_err_set(err, -ENOMEM, "out of memory");
		if (values[f].len > fd->max_bytes)
			fd->max_bytes = values[f].len;
	}
	if (w->tok_field >= 0 && (rc = lens_note(w, &values[w->tok_field], err)) < 0)
		return rc;
	w->blk_n++;
	w->total++;
	return 0;
}

int fmt_writer_note_image(struct fmt_writer *w, uint32_t f, uint32_t width, uint32_t height,
			  struct feed_err *err)
{
	if (f >= w->schema.nfields || !w->schema.fields[f].image)
		return feed_err_set(err, -EINVAL, "field %u is not an image field", f);
	struct fmt_field *fd = &w->schema.fields[f];
	if (w->total == 0 || w->noted[f] >= w->total)
		return feed_err_set(err, -EINVAL, "field '%s': no record added to note", fd->name);
	if (width < 1 || height < 1 || width > FMT_IMAGE_DIM_MAX || height > FMT_IMAGE_DIM_MAX)
		return feed_err_set(err, -EINVAL, "record %llu: field '%s': image %ux%u outside 1..%u",
				    (unsigned long long)(w->total - 1), fd->name, width, height,
				    FMT_IMAGE_DIM_MAX);
	uint64_t px = (uint64_t)width * height;
	fd->max_width = width > fd->max_width ? width : fd->max_width;
	fd->max_height = height > fd->max_height ? height : fd->max_height;
	fd->max_pixels = px > fd->max_pixels ? px : fd->max_pixels;
	w->noted[f] = w->total;
	return 0;
}

/* The part's schema describes the same records as w's. */
static int adopt_schema_check(const struct fmt_writer *w, const struct fmt_schema *s,
			      const char *dir, struct feed_err *err)
{
	if (s->nfields != w->schema.nfields)
		return feed_err_set(err, -EINVAL, "%s: %u fields, the dataset being written has %u",
				    dir, s->nfields, w->schema.nfields);
	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct fmt_field *a = &s->fields[f], *b = &w->schema.fields[f];
		if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->rank != b->rank ||
		    a->variable != b->variable || a->image != b->image ||
		    memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->rank))
			return feed_err_set(err, -EINVAL,
					    "%s: field %u ('%s') is not field '%s' of the dataset "
					    "being written", dir, f, a->name, b->name);
	}
	return 0;
}

/* Moves shard file `file` of the part in dir into w's temporary directory
 * as w's next shard, its header saying it starts at record w->total. */
static int adopt_shard(struct fmt_writer *w, const char *dir, const char *file,
		       struct feed_err *err)
{
	char src[PATH_MAX], dst[PATH_MAX];
	uint8_t hb[FMT_HEADER_SIZE];
	struct fmt_header h;
	struct stat st;
	int rc = 0, fd;

	if (shards_grow(w) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	struct wr_shard *s = &w->shards[w->nshards];
	memset(s, 0, sizeof(*s));
	snprintf(s->file, sizeof(s->file), "shard-%05u.fsh", w->nshards);
	snprintf(src, sizeof(src), "%s/%s", dir, file);
	snprintf(dst, sizeof(dst), "%s/%s", w->tmp_dir, s->file);
	if ((fd = open(src, O_RDWR | O_CLOEXEC)) < 0)
		return feed_err_set(err, -errno, "%s: %s", src, strerror(errno));
	if (pread(fd, hb, sizeof(hb), 0) != (ssize_t)sizeof(hb) || fmt_header_decode(hb, &h) < 0 ||
	    fstat(fd, &st) < 0)
		rc = feed_err_set(err, -EBADMSG, "%s: unreadable shard header", src);
	h.first_sample = w->total;
	fmt_header_encode(&h, hb);
	if (rc == 0 && (pwrite(fd, hb, sizeof(hb), 0) != (ssize_t)sizeof(hb) || fsync(fd) < 0))
		rc = feed_err_set(err, -EIO, "%s: cannot rewrite the header: %s", src, strerror(errno));
	close(fd);
	if (rc == 0 && rename(src, dst) < 0)
		rc = feed_err_set(err, -errno, "%s: cannot move to %s: %s", src, dst, strerror(errno));
	if (rc < 0)
		return rc;
	w->nshards++; /* from here on free() removes it */
	*s = (struct wr_shard){.size = (uint64_t)st.st_size, .first_sample = w->total,
			       .num_samples = h.num_records, .num_blocks = h.num_blocks};
	snprintf(s->file, sizeof(s->file), "shard-%05u.fsh", w->nshards - 1);
	w->total += h.num_records;
	return 0;
}

/* Takes the part's largest records, blocks and images into w's maxima. */
static void adopt_maxima(struct fmt_writer *w, const struct fmt_info *in)
{
	w->max_raw = in->max_block_raw > w->max_raw ? in->max_block_raw : w->max_raw;
	w->max_comp = in->max_block_comp > w->max_comp ? in->max_block_comp : w->max_comp;
	for (uint32_t f = 0; f < w->schema.nfields; f++) {
		struct fmt_field *fd = &w->schema.fields[f];
		const struct fmt_field *pf = &in->schema->fields[f];
		if (fd->variable && pf->max_bytes > fd->max_bytes)
			fd->max_bytes = pf->max_bytes;
		if (!fd->image)
			continue;
		fd->max_width = pf->max_width > fd->max_width ? pf->max_width : fd->max_width;
		fd->max_height = pf->max_height > fd->max_height ? pf->max_height : fd->max_height;
		fd->max_pixels = pf->max_pixels > fd->max_pixels ? pf->max_pixels : fd->max_pixels;
	}
}

/* A token-document part's lengths, after ours (FMT_LENGTHS_FILE). */
static int adopt_lens(struct fmt_writer *w, const struct fmt_dataset *ds, const char *dir,
		      uint64_t n, struct feed_err *err)
{
	const uint32_t *lens;
	uint64_t total;

	if (w->tok_field < 0)
		return 0;
	int rc = fmt_dataset_doc_lens(ds, &lens, &total);
	if (rc < 0)
		return feed_err_set(err, rc, "%s: no %s to join (written before lengths were "
				    "kept?)", dir, FMT_LENGTHS_FILE);
	if (n > SIZE_MAX / 4 || buf_append(&w->lens, lens, (size_t)n * 4) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	return 0;
}

int fmt_writer_adopt(struct fmt_writer *w, const char *dir, struct feed_err *err)
{
	struct fmt_dataset *ds = NULL;
	int rc;

	if ((rc = block_flush(w, err)) < 0 || (w->fd >= 0 && (rc = shard_close(w, err)) < 0))
		return rc;
	if ((rc = fmt_dataset_open(dir, &ds, err)) < 0)
		return rc;
	const struct fmt_info *in = fmt_dataset_info(ds);
	if ((rc = adopt_schema_check(w, in->schema, dir, err)) < 0)
		goto out;
	if (w->npaths || fmt_dataset_sample_path(ds, 0)) {
		rc = feed_err_set(err, -ENOTSUP, "%s: datasets with paths cannot be joined", dir);
		goto out;
	}
	if ((rc = adopt_lens(w, ds, dir, in->num_samples, err)) < 0)
		goto out;
	adopt_maxima(w, in);
	for (uint32_t i = 0; i < in->num_shards && rc == 0; i++)
		rc = adopt_shard(w, dir, fmt_dataset_shard_file(ds, i), err);
	for (uint32_t f = 0; f < w->schema.nfields; f++)
		if (w->schema.fields[f].image)
			w->noted[f] = w->total;
out:
	fmt_dataset_close(ds);
	return rc;
}

uint64_t fmt_writer_count(const struct fmt_writer *w)
{
	return w->total;
}

/* Fills a Schema message whose fields point into w (no allocation beyond
 * the caller's arrays). */
void fmt_schema_to_pb(const struct fmt_schema *s, Feed__Schema *pb, Feed__Field *fields,
		      Feed__Field **ptrs)
{
	feed__schema__init(pb);
	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct fmt_field *fd = &s->fields[f];
		feed__field__init(&fields[f]);
		fields[f].name = (char *)fd->name;
		fields[f].dtype = (Feed__DType)fd->dtype;
		fields[f].n_shape = fd->rank;
		fields[f].shape = (uint32_t *)fd->shape;
		fields[f].variable = fd->variable;
		fields[f].max_bytes = fd->max_bytes;
		fields[f].image = fd->image;
		fields[f].max_width = fd->max_width;
		fields[f].max_height = fd->max_height;
		fields[f].max_pixels = fd->max_pixels;
		ptrs[f] = &fields[f];
	}
	pb->n_fields = s->nfields;
	pb->fields = ptrs;
}

/* version = xxh64(packed schema || every shard file), FORMAT.md. */
static int content_hash(const struct fmt_writer *w, const Feed__Schema *schema, char out[17],
			struct feed_err *err)
{
	XXH64_state_t *st = XXH64_createState();
	size_t len = feed__schema__get_packed_size(schema);
	uint8_t *buf = malloc(len > (1 << 20) ? len : (1 << 20));
	int rc = 0;

	if (!st || !buf) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	XXH64_reset(st, 0);
	feed__schema__pack(schema, buf);
	XXH64_update(st, buf, len);
	for (uint32_t i = 0; i < w->nshards && rc == 0; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, w->shards[i].file);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
			break;
		}
		ssize_t n;
		while ((n = read(fd, buf, 1 << 20)) > 0)
			XXH64_update(st, buf, (size_t)n);
		if (n < 0)
			rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
		close(fd);
	}
	snprintf(out, 17, "%016llx", (unsigned long long)XXH64_digest(st));
out:
	XXH64_freeState(st);
	free(buf);
	return rc;
}

/* The manifest's shard rows: sinfo[i] for shard i (pointing into w),
 * sptrs[i] to it. */
static void manifest_shards(const struct fmt_writer *w, Feed__ShardInfo *sinfo,
			    Feed__ShardInfo **sptrs)
{
	for (uint32_t i = 0; i < w->nshards; i++) {
		feed__shard_info__init(&sinfo[i]);
		sinfo[i].file = w->shards[i].file;
		sinfo[i].size = w->shards[i].size;
		sinfo[i].first_sample = w->shards[i].first_sample;
		sinfo[i].num_samples = w->shards[i].num_samples;
		sinfo[i].num_blocks = w->shards[i].num_blocks;
		sptrs[i] = &sinfo[i];
	}
}

static int manifest_write(struct fmt_writer *w, struct feed_err *err)
{
	Feed__Manifest m;
	Feed__Schema schema;
	Feed__Field fields[FMT_MAX_FIELDS], *fptrs[FMT_MAX_FIELDS];
	Feed__ShardInfo *sinfo = calloc(w->nshards, sizeof(*sinfo));
	Feed__ShardInfo **sptrs = calloc(w->nshards, sizeof(*sptrs));
	char version[17], path[PATH_MAX];
	uint8_t *buf = NULL;
	int rc, fd = -1;

	if (!sinfo || !sptrs) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	fmt_schema_to_pb(&w->schema, &schema, fields, fptrs);
	if ((rc = content_hash(w, &schema, version, err)) < 0)
		goto out;
	feed__manifest__init(&m);
	m.format_version = FMT_FORMAT_VERSION;
	m.name = w->name;
	m.version = version;
	m.schema = &schema;
	m.num_samples = w->total;
	m.block_bytes = w->opts.block_bytes;
	m.block_records = w->opts.block_records;
	m.zstd_level = w->opts.zstd_level;
	m.max_block_raw = w->max_raw;
	m.max_block_comp = w->max_comp;
	m.source = w->source;
	m.n_classes = w->opts.num_classes;
	m.classes = w->classes;
	manifest_shards(w, sinfo, sptrs);
	m.n_shards = w->nshards;
	m.shards = sptrs;
	size_t len = feed__manifest__get_packed_size(&m);
	if (!(buf = malloc(len))) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	feed__manifest__pack(&m, buf);
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_MANIFEST_FILE);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || (rc = write_full(fd, buf, len)) < 0 || fsync(fd) < 0)
		rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(sinfo);
	free(sptrs);
	return rc;
}

/* The token records' lengths, when the schema has a variable
 * FMT_TOKENS_FIELD: FMT_LENGTHS_FILE. */
static int lens_write(struct fmt_writer *w, struct feed_err *err)
{
	char path[PATH_MAX];
	int rc = 0;

	if (w->tok_field < 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_LENGTHS_FILE);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || (rc = write_full(fd, w->lens.p, w->lens.len)) < 0 || fsync(fd) < 0)
		rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

/* The records' paths, when they were noted: FMT_PATHS_FILE. */
static int paths_write(struct fmt_writer *w, struct feed_err *err)
{
	char path[PATH_MAX];
	int rc = 0;

	if (w->npaths == 0)
		return 0;
	if (w->npaths != w->total)
		return feed_err_set(err, -EINVAL, "%s: %llu records, %llu paths noted", w->out_dir,
				    (unsigned long long)w->total, (unsigned long long)w->npaths);
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_PATHS_FILE);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || (rc = write_full(fd, w->paths.p, w->paths.len)) < 0 || fsync(fd) < 0)
		rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

int fmt_writer_note_path(struct fmt_writer *w, const char *path, struct feed_err *err)
{
	size_t n = strlen(path);

	if (n == 0 || n >= PATH_MAX || memchr(path, '\n', n))
		return feed_err_set(err, -EINVAL, "path '%.200s': 1..%d bytes without a newline",
				    path, PATH_MAX - 1);
	if (w->npaths + 1 != w->total)
		return feed_err_set(err, -EINVAL, "%s: path noted for record %llu of %llu",
				    w->out_dir, (unsigned long long)w->npaths,
				    (unsigned long long)w->total);
	if (buf_reserve(&w->paths, w->paths.len + n + 1) < 0)
		return feed_err_set(err, -ENOMEM, "out of memory");
	memcpy(w->paths.p + w->paths.len, path, n);
	w->paths.p[w->paths.len + n] = '\n';
	w->paths.len += n + 1;
	w->npaths++;
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int fmt_writer_finish(struct fmt_writer *w, struct feed_err *err)
{
	int rc;

	if (w->finished)
		return feed_err_set(err, -EINVAL, "%s: already finished", w->out_dir);
	if (w->total == 0)
		return feed_err_set(err, -EINVAL, "%s: no records to write (empty input)", w->out_dir);
	for (uint32_t f = 0; f < w->schema.nfields; f++)
		if (w->schema.fields[f].image && w->noted[f] != w->total)
			return feed_err_set(err, -EINVAL,
					    "%s: field '%s': record %llu's image dimensions were "
					    "not noted", w->out_dir, w->schema.fields[f].name,
					    (unsigned long long)w->noted[f]);
	if ((rc = block_flush(w, err)) < 0)
		return rc;
	if (w->fd >= 0 && (rc = shard_close(w, err)) < 0)
		return rc;
	if ((rc = paths_write(w, err)) < 0 || (rc = lens_write(w, err)) < 0 ||
	    (rc = manifest_write(w, err)) < 0)
		return rc;
	if ((rc = fsync_dir(w->tmp_dir)) < 0)
		return feed_err_set(err, rc, "%s: %s", w->tmp_dir, strerror(-rc));
	if (renameat2(AT_FDCWD, w->tmp_dir, AT_FDCWD, w->out_dir, RENAME_NOREPLACE) < 0)
		return feed_err_set(err, -errno, "%s: cannot rename into place: %s", w->out_dir,
				    strerror(errno));
	w->finished = 1;
	char *parent = strdup(w->out_dir);
	if (parent) {
		char *slash = strrchr(parent, '/');
		fsync_dir(slash ? (slash == parent ? "/" : (*slash = '\0', parent)) : ".");
		free(parent);
	}
	return 0;
}

/* Removes the temporary directory and what we put in it. */
static void tmp_remove(struct fmt_writer *w)
{
	char path[PATH_MAX];

	for (uint32_t i = 0; i < w->nshards; i++) {
		snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, w->shards[i].file);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_MANIFEST_FILE);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_PATHS_FILE);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s", w->tmp_dir, FMT_LENGTHS_FILE);
	unlink(path);
	rmdir(w->tmp_dir);
}

void fmt_writer_free(struct fmt_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp_dir && !w->finished)
		tmp_remove(w);
	for (uint32_t f = 0; f < FMT_MAX_FIELDS; f++) {
		free(w->col[f].p);
		free(w->offs[f].p);
	}
	free(w->raw.p);
	free(w->comp.p);
	free(w->index.p);
	free(w->paths.p);
	free(w->lens.p);
	free(w->shards);
	ZSTD_freeCCtx(w->cctx);
	free(w->name);
	free(w->source);
	for (uint32_t i = 0; w->classes && i < w->opts.num_classes; i++)
		free(w->classes[i]);
	free(w->classes);
	free(w->out_dir);
	free(w->tmp_dir);
	free(w);
}
