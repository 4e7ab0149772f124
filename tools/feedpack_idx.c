/*
 * feedpack_idx.c: `feedpack idx IMAGES LABELS`: IDX files (MNIST and
 * Fashion-MNIST), plain or gzip (zlib reads both), into fields `image` (u8
 * [H,W,1]) and `label` (u8 scalar). Owns the IDX header checks (magic, dims,
 * counts) and streams both files in chunks of records, so memory stays
 * bounded whatever the file size. Every data error names the file; a file
 * shorter or longer than its header says is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "feedpack.h"

#define IDX_MAGIC_IMAGES 0x00000803u  /* u8, 3 dims: N, H, W */
#define IDX_MAGIC_LABELS 0x00000801u  /* u8, 1 dim: N */

/* One open IDX file. */
struct idx_file {
	const char *path;    /* as given, for messages */
	gzFile gz;           /* reads plain and gzip files alike */
	uint32_t dims[3];    /* N, then H, W for images */
	uint64_t rec;        /* bytes per record */
	uint64_t got;        /* data bytes read after the header */
};

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads up to len bytes; returns the count (short only at end of file) or
 * an error naming the file when zlib or the OS fails. */
static long long idx_read(struct idx_file *f, void *buf, size_t len, struct feed_err *err)
{
	size_t done = 0;

	while (done < len) {
		unsigned want = len - done > (1u << 30) ? 1u << 30 : (unsigned)(len - done);
		int n = gzread(f->gz, (char *)buf + done, want);
		if (n < 0) {
			int zerr;
			const char *msg = gzerror(f->gz, &zerr);
			if (zerr == Z_ERRNO)
				return feed_err_set(err, -errno, "%s: %s", f->path, strerror(errno));
			return feed_err_set(err, -EBADMSG, "%s: corrupt gzip data: %s", f->path, msg);
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (long long)done;
}

/* Reads exactly len data bytes or fails with "truncated". */
static int idx_read_data(struct idx_file *f, void *buf, size_t len, struct feed_err *err)
{
	long long n = idx_read(f, buf, len, err);

	if (n < 0)
		return (int)n;
	f->got += (uint64_t)n;
	if ((size_t)n < len)
		return feed_err_set(err, -EBADMSG,
				    "%s: truncated: header says %u records of %llu bytes, "
				    "the data ends after %llu bytes",
				    f->path, f->dims[0], (unsigned long long)f->rec,
				    (unsigned long long)f->got);
	return 0;
}

static const char *idx_kind(uint32_t magic)
{
	if (magic == IDX_MAGIC_IMAGES)
		return "u8 images, 3 dims";
	if (magic == IDX_MAGIC_LABELS)
		return "u8 labels, 1 dim";
	return "not IDX u8";
}

/* Opens path and checks its magic and dims; fills f. */
static int idx_open(struct idx_file *f, const char *path, uint32_t magic, struct feed_err *err)
{
	unsigned ndims = magic & 0xff;
	uint8_t hdr[16];
	long long n;
	int fd, rc;

	*f = (struct idx_file){.path = path, .rec = 1};
	if ((rc = pack_open_input(path, &fd, err)) < 0)
		return rc;
	if (!(f->gz = gzdopen(fd, "rb"))) {
		close(fd);
		return feed_err_set(err, -ENOMEM, "%s: cannot start reading", path);
	}
	gzbuffer(f->gz, 256 * 1024);
	if ((n = idx_read(f, hdr, 4 + 4 * ndims, err)) < 0)
		return (int)n;
	if (n < 4 || be32(hdr) != magic)
		return feed_err_set(err, -EBADMSG, "%s: bad magic 0x%08x (%s), expected 0x%08x (%s)",
				    path, n < 4 ? 0 : be32(hdr), n < 4 ? "file too short" :
				    idx_kind(be32(hdr)), magic, idx_kind(magic));
	if (n < 4 + 4 * ndims)
		return feed_err_set(err, -EBADMSG, "%s: truncated header", path);
	for (unsigned i = 0; i < ndims; i++)
		f->dims[i] = be32(hdr + 4 + 4 * i);
	for (unsigned i = 1; i < ndims; i++)
		f->rec *= f->dims[i];
	if (f->rec == 0 || f->rec > PACK_MAX_RECORD)
		return feed_err_set(err, -EBADMSG, "%s: unsupported record size %ux%u", path,
				    f->dims[1], f->dims[2]);
	return 0;
}

static void idx_close(struct idx_file *f)
{
	if (f->gz)
		gzclose_r(f->gz);
	f->gz = NULL;
}

/* A file longer than its header says is as suspect as a shorter one. */
static int idx_check_end(struct idx_file *f, struct feed_err *err)
{
	uint8_t extra;
	long long n = idx_read(f, &extra, 1, err);

	if (n < 0)
		return (int)n;
	if (n > 0)
		return feed_err_set(err, -EBADMSG, "%s: data continues past the %u records its header "
				    "declares", f->path, f->dims[0]);
	return 0;
}

/* Streams both files into the sink, a chunk of records at a time. */
static int idx_copy(struct idx_file *img, struct idx_file *lab, struct pack_sink *sink,
		    struct feed_err *err)
{
	uint64_t n = img->dims[0], chunk = PACK_CHUNK_BYTES / img->rec;
	uint8_t *ibuf, *lbuf;
	int rc = 0;

	chunk = chunk ? chunk : 1;
	ibuf = malloc(chunk * img->rec);
	lbuf = malloc(chunk);
	if (!ibuf || !lbuf) {
		rc = feed_err_set(err, -ENOMEM, "%s: out of memory", img->path);
		goto out;
	}
	for (uint64_t done = 0; done < n && rc == 0; done += chunk) {
		uint64_t k = n - done < chunk ? n - done : chunk;
		if ((rc = idx_read_data(img, ibuf, k * img->rec, err)) < 0 ||
		    (rc = idx_read_data(lab, lbuf, k, err)) < 0)
			break;
		for (uint64_t j = 0; j < k && rc == 0; j++) {
			struct fmt_value v[2] = {{ibuf + j * img->rec, img->rec}, {lbuf + j, 1}};
			rc = sink_add(sink, v, err);
		}
	}
	if (rc == 0 && (rc = idx_check_end(img, err)) == 0)
		rc = idx_check_end(lab, err);
out:
	free(ibuf);
	free(lbuf);
	return rc;
}

static int idx_pack(const struct pack_opts *o, struct idx_file *img, struct idx_file *lab,
		    struct feed_err *err)
{
	uint64_t img_shape[3] = {img->dims[1], img->dims[2], 1};
	struct fmt_schema schema = {.nfields = 2};
	struct pack_sink sink = {0};
	char source[2 * PATH_MAX + 8];
	int rc;

	if (img->dims[0] == 0)
		return feed_err_set(err, -EINVAL, "%s: no images (its header says 0 records)",
				    img->path);
	if (img->dims[0] != lab->dims[0])
		return feed_err_set(err, -EINVAL, "%s: %u labels, but %s has %u images", lab->path,
				    lab->dims[0], img->path, img->dims[0]);
	pack_field(&schema.fields[0], "image", FEED_DTYPE_U8, 3, img_shape, false);
	pack_field(&schema.fields[1], "label", FEED_DTYPE_U8, 0, NULL, false);
	snprintf(source, sizeof(source), "idx %s %s", img->path, lab->path);
	rc = sink_open(&sink, o, &schema, source, (uint64_t)img->dims[0] * (img->rec + 1), err);
	if (rc == 0)
		rc = idx_copy(img, lab, &sink, err);
	if (rc == 0)
		rc = sink_finish(&sink, err);
	sink_free(&sink);
	return rc;
}

int pack_cmd_idx(const struct pack_opts *o, struct feed_err *err)
{
	struct idx_file img = {0}, lab = {0};
	int rc;

	if ((rc = idx_open(&img, o->pos[0], IDX_MAGIC_IMAGES, err)) == 0 &&
	    (rc = idx_open(&lab, o->pos[1], IDX_MAGIC_LABELS, err)) == 0)
		rc = idx_pack(o, &img, &lab, err);
	idx_close(&img);
	idx_close(&lab);
	return rc;
}
