/*
 * feedpack_megatron.c: `feedpack megatron PREFIX... -o DIR`: Megatron-LM
 * indexed datasets (PREFIX.idx + PREFIX.bin, the "MMIDIDX" format that
 * Megatron's preprocess_data.py writes) into one token-document dataset,
 * one sample per document, field `tokens` (variable, u16 or i32 as the
 * header says). Owns the .idx parse and every check of it against itself
 * and against the .bin's size. Reads one document at a time with pread.
 *
 * The .idx layout (little-endian): magic "MMIDIDX\0\0" (9 bytes), version
 * u64 (1), dtype code u8, sequence count S u64, document index count D
 * u64, then S i32 sequence lengths (tokens), S i64 sequence offsets
 * (bytes into .bin), D i64 document indices (sequence numbers: document d
 * holds sequences [doc[d], doc[d+1]); doc[0] = 0, doc[D-1] = S).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"

#define MEG_MAGIC "MMIDIDX\0\0"
#define MEG_MAGIC_LEN 9
#define MEG_HEAD_LEN (MEG_MAGIC_LEN + 8 + 1 + 8 + 8)

/* One prefix's index, read whole. */
struct meg_idx {
	char idx_path[PATH_MAX], bin_path[PATH_MAX];
	int dtype;                 /* FEED_DTYPE_U16 or FEED_DTYPE_I32 */
	uint64_t nseq, ndoc;       /* S, D */
	uint8_t *raw;              /* the whole .idx */
	const uint8_t *lens, *ptrs, *docs; /* the three arrays inside raw */
	uint64_t bin_bytes;        /* what the arrays describe */
};

static uint64_t meg_u64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static int64_t meg_i64(const uint8_t *p, uint64_t i)
{
	int64_t v;
	memcpy(&v, p + 8 * i, 8);
	return v;
}

static int32_t meg_i32(const uint8_t *p, uint64_t i)
{
	int32_t v;
	memcpy(&v, p + 4 * i, 4);
	return v;
}

/* Megatron's DType codes that are token dtypes here. */
static int meg_dtype(uint8_t code)
{
	return code == 8 ? FEED_DTYPE_U16 : code == 4 ? FEED_DTYPE_I32 : FEED_DTYPE_INVALID;
}

/* Header fields and the file's size against S and D. */
static int meg_header(struct meg_idx *m, uint64_t size, struct feed_err *err)
{
	const char *p = m->idx_path;

	if (size < MEG_HEAD_LEN || memcmp(m->raw, MEG_MAGIC, MEG_MAGIC_LEN))
		return feed_err_set(err, -EINVAL, "%s: not a Megatron MMIDIDX index (magic)", p);
	if (meg_u64(m->raw + 9) != 1)
		return feed_err_set(err, -EINVAL, "%s: index version %llu, expected 1", p,
				    (unsigned long long)meg_u64(m->raw + 9));
	uint8_t code = m->raw[17];
	if ((m->dtype = meg_dtype(code)) == FEED_DTYPE_INVALID)
		return feed_err_set(err, -EINVAL, "%s: dtype code %u is not a token dtype this "
				    "imports (8 uint16, 4 int32)", p, code);
	m->nseq = meg_u64(m->raw + 18);
	m->ndoc = meg_u64(m->raw + 26);
	if (m->nseq > (size / 12) || m->ndoc > size / 8 || m->ndoc < 1 ||
	    size != MEG_HEAD_LEN + 12 * m->nseq + 8 * m->ndoc)
		return feed_err_set(err, -EINVAL, "%s: %llu bytes, but its header says %llu "
				    "sequences and %llu document indices", p,
				    (unsigned long long)size, (unsigned long long)m->nseq,
				    (unsigned long long)m->ndoc);
	m->lens = m->raw + MEG_HEAD_LEN;
	m->ptrs = m->lens + 4 * m->nseq;
	m->docs = m->ptrs + 8 * m->nseq;
	return 0;
}

/* Lengths, offsets (contiguous, in order) and document indices. */
static int meg_arrays(struct meg_idx *m, struct feed_err *err)
{
	uint64_t dsize = feed_dtype_size(m->dtype), at = 0;
	const char *p = m->idx_path;

	for (uint64_t i = 0; i < m->nseq; i++) {
		int32_t len = meg_i32(m->lens, i);
		if (len < 0 || meg_i64(m->ptrs, i) != (int64_t)at)
			return feed_err_set(err, -EINVAL, "%s: sequence %llu: length %d at offset "
					    "%lld, expected a length >= 0 at offset %llu", p,
					    (unsigned long long)i, len,
					    (long long)meg_i64(m->ptrs, i), (unsigned long long)at);
		at += (uint64_t)len * dsize;
	}
	m->bin_bytes = at;
	for (uint64_t d = 0; d < m->ndoc; d++) {
		int64_t s = meg_i64(m->docs, d);
		int64_t prev = d ? meg_i64(m->docs, d - 1) : 0;
		if (s < prev || (uint64_t)s > m->nseq || (d == 0 && s != 0) ||
		    (d + 1 == m->ndoc && (uint64_t)s != m->nseq))
			return feed_err_set(err, -EINVAL, "%s: document index %llu is %lld: not in "
					    "order from 0 to %llu sequences", p,
					    (unsigned long long)d, (long long)s,
					    (unsigned long long)m->nseq);
	}
	return 0;
}

/* Reads and checks PREFIX.idx, and PREFIX.bin's size against it. */
static int meg_open(struct meg_idx *m, const char *prefix, int *ret_bin, struct feed_err *err)
{
	struct stat st;
	int fd = -1, rc;

	if ((size_t)snprintf(m->idx_path, sizeof(m->idx_path), "%s.idx", prefix) >=
	    sizeof(m->idx_path) ||
	    (size_t)snprintf(m->bin_path, sizeof(m->bin_path), "%s.bin", prefix) >=
	    sizeof(m->bin_path))
		return feed_err_set(err, -ENAMETOOLONG, "%s: prefix too long", prefix);
	if ((rc = pack_open_input(m->idx_path, &fd, err)) < 0)
		return rc;
	if (fstat(fd, &st) < 0 || !(m->raw = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return feed_err_set(err, -ENOMEM, "%s: cannot read", m->idx_path);
	}
	long long got = pack_read_full(fd, m->raw, (size_t)st.st_size);
	close(fd);
	if (got != (long long)st.st_size)
		return feed_err_set(err, got < 0 ? (int)got : -EIO, "%s: read failed", m->idx_path);
	if ((rc = meg_header(m, (uint64_t)st.st_size, err)) < 0 || (rc = meg_arrays(m, err)) < 0)
		return rc;
	if ((rc = pack_open_input(m->bin_path, &fd, err)) < 0)
		return rc;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != m->bin_bytes) {
		close(fd);
		return feed_err_set(err, -EINVAL, "%s: %lld bytes, but %s describes %llu", m->bin_path,
				    (long long)st.st_size, m->idx_path,
				    (unsigned long long)m->bin_bytes);
	}
	*ret_bin = fd;
	return 0;
}

/* Every document of one prefix into the sink, one pread each. */
static int meg_copy(const struct meg_idx *m, int bin, struct pack_sink *sink, uint8_t **buf,
		    size_t *cap, struct feed_err *err)
{
	uint64_t dsize = feed_dtype_size(m->dtype);

	for (uint64_t d = 0; d + 1 < m->ndoc; d++) {
		uint64_t s0 = (uint64_t)meg_i64(m->docs, d), s1 = (uint64_t)meg_i64(m->docs, d + 1);
		uint64_t off = s0 < m->nseq ? (uint64_t)meg_i64(m->ptrs, s0) : m->bin_bytes;
		uint64_t end = s1 < m->nseq ? (uint64_t)meg_i64(m->ptrs, s1) : m->bin_bytes;
		uint64_t len = end - off;
		if (len > PACK_MAX_RECORD || len / dsize > UINT32_MAX)
			return feed_err_set(err, -E2BIG, "%s: document %llu: %llu bytes, too large",
					    m->bin_path, (unsigned long long)d,
					    (unsigned long long)len);
		if (len > *cap) {
			uint8_t *p = realloc(*buf, len);
			if (!p)
				return feed_err_set(err, -ENOMEM, "%s: out of memory", m->bin_path);
			*buf = p;
			*cap = len;
		}
		ssize_t got = len ? pread(bin, *buf, len, (off_t)off) : 0;
		if (got != (ssize_t)len)
			return feed_err_set(err, got < 0 ? -errno : -EBADMSG, "%s: document %llu: "
					    "short read at offset %llu", m->bin_path,
					    (unsigned long long)d, (unsigned long long)off);
		struct fmt_value v = {*buf, len};
		int rc = sink_add(sink, &v, err);
		if (rc < 0)
			return feed_err_prefix(err, "%s: document %llu", m->bin_path,
					       (unsigned long long)d);
	}
	return 0;
}

/* Opens every prefix (each checked before anything is written). */
static int meg_open_all(const struct pack_opts *o, struct meg_idx *m, int *bin,
			uint64_t *ret_bytes, struct feed_err *err)
{
	int rc;

	*ret_bytes = 0;
	for (int i = 0; i < o->npos; i++) {
		if ((rc = meg_open(&m[i], o->pos[i], &bin[i], err)) < 0)
			return rc;
		if (m[i].dtype != m[0].dtype)
			return feed_err_set(err, -EINVAL, "%s: dtype %s, but %s has %s",
					    m[i].idx_path, feed_dtype_name(m[i].dtype),
					    m[0].idx_path, feed_dtype_name(m[0].dtype));
		*ret_bytes += m[i].bin_bytes;
	}
	return 0;
}

int pack_cmd_megatron(const struct pack_opts *o, struct feed_err *err)
{
	struct meg_idx *m = calloc((size_t)o->npos, sizeof(*m));
	int *bin = malloc((size_t)o->npos * sizeof(int));
	struct fmt_schema schema = {.nfields = 1};
	struct pack_sink sink = {0};
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t bytes;
	char source[PATH_MAX + 64];
	int rc;

	if (!m || !bin) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < o->npos; i++)
		bin[i] = -1;
	if ((rc = meg_open_all(o, m, bin, &bytes, err)) < 0)
		goto out;
	pack_field(&schema.fields[0], FMT_TOKENS_FIELD, m[0].dtype, 0, NULL, true);
	snprintf(source, sizeof(source), "megatron %s%s", o->pos[0], o->npos > 1 ? " ..." : "");
	rc = sink_open(&sink, o, &schema, source, bytes, err);
	for (int i = 0; i < o->npos && rc == 0; i++)
		rc = meg_copy(&m[i], bin[i], &sink, &buf, &cap, err);
	if (rc == 0)
		rc = sink_finish(&sink, err);
out:
	sink_free(&sink);
	for (int i = 0; m && bin && i < o->npos; i++) {
		free(m[i].raw);
		if (bin[i] >= 0)
			close(bin[i]);
	}
	free(m);
	free(bin);
	free(buf);
	return rc;
}
