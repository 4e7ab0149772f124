/*
 * feedpack_tokens.c: `feedpack tokens FILE --dtype uint16|uint32 --seq-len
 * N`: a flat file of little-endian token ids cut into sequences of N tokens,
 * field `tokens` (u16 or u32, shape [N]); and `feedpack tokens FILE...
 * --dtype T --doc-sep ID [--vocab-size V]`: flat files (`-` is stdin) split
 * into documents after each separator token (kept as the document's last
 * token, as Megatron's preprocess appends its end-of-document token), a
 * token-document dataset (field `tokens`, variable, u16 when the vocabulary
 * fits). Owns the size checks (whole tokens, at least one sequence), the
 * refusal of text given as tokens, the vocabulary check and the note about
 * a dropped trailing partial sequence. Streams its input a chunk at a time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"

/* What the file holds, from its size. */
struct tok_plan {
	uint64_t dsize;     /* bytes per token */
	uint64_t ntok;      /* tokens in the file */
	uint64_t nseq;      /* whole sequences packed */
	uint64_t dropped;   /* tokens of the trailing partial sequence */
};

static int tok_plan(const char *path, int fd, const struct pack_opts *o, struct tok_plan *p,
		    struct feed_err *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return feed_err_set(err, -EINVAL, "%s: not a regular file", path);
	p->dsize = feed_dtype_size(o->tok_dtype);
	if (st.st_size == 0)
		return feed_err_set(err, -EINVAL, "%s: empty token file", path);
	if ((uint64_t)st.st_size % p->dsize)
		return feed_err_set(err, -EINVAL, "%s: size %lld is not a multiple of %llu bytes "
				    "(%s tokens)", path, (long long)st.st_size,
				    (unsigned long long)p->dsize, feed_dtype_name(o->tok_dtype));
	p->ntok = (uint64_t)st.st_size / p->dsize;
	if (p->ntok < o->seq_len)
		return feed_err_set(err, -EINVAL, "%s: %llu tokens, fewer than one sequence of %llu",
				    path, (unsigned long long)p->ntok,
				    (unsigned long long)o->seq_len);
	p->nseq = p->ntok / o->seq_len;
	p->dropped = p->ntok % o->seq_len;
	return 0;
}

static int tok_copy(const char *path, int fd, uint64_t nseq, uint64_t rec,
		    struct pack_sink *sink, struct feed_err *err)
{
	uint64_t chunk = PACK_CHUNK_BYTES / rec ? PACK_CHUNK_BYTES / rec : 1;
	uint8_t *buf = malloc(chunk * rec);
	int rc = 0;

	if (!buf)
		return feed_err_set(err, -ENOMEM, "%s: out of memory", path);
	for (uint64_t done = 0; done < nseq && rc == 0; done += chunk) {
		uint64_t k = nseq - done < chunk ? nseq - done : chunk;
		long long got = pack_read_full(fd, buf, k * rec);
		if (got < 0) {
			rc = feed_err_set(err, (int)got, "%s: %s", path, strerror((int)-got));
			break;
		}
		if ((uint64_t)got < k * rec) {
			rc = feed_err_set(err, -EBADMSG, "%s: file shrank while reading", path);
			break;
		}
		for (uint64_t j = 0; j < k && rc == 0; j++) {
			struct fmt_value v = {buf + j * rec, rec};
			rc = sink_add(sink, &v, err);
		}
	}
	free(buf);
	return rc;
}

static int pack_tokens_docs(const struct pack_opts *o, struct feed_err *err);

int pack_cmd_tokens(const struct pack_opts *o, struct feed_err *err)
{
	if (o->doc_sep_set)
		return pack_tokens_docs(o, err);
	if (o->npos != 1)
		return feed_err_set(err, -PACK_EUSAGE, "--seq-len takes one FILE");
	const char *path = o->pos[0];
	struct fmt_schema schema = {.nfields = 1};
	struct pack_sink sink = {0};
	struct tok_plan p = {0};
	char source[PATH_MAX + 64];
	int fd = -1, rc;

	if ((rc = pack_open_input(path, &fd, err)) < 0)
		return rc;
	if ((rc = tok_plan(path, fd, o, &p, err)) < 0)
		goto out;
	pack_field(&schema.fields[0], "tokens", o->tok_dtype, 1, &o->seq_len, false);
	snprintf(source, sizeof(source), "tokens %s %s seq_len %llu", path,
		 feed_dtype_name(o->tok_dtype), (unsigned long long)o->seq_len);
	rc = sink_open(&sink, o, &schema, source, p.nseq * o->seq_len * p.dsize, err);
	if (rc == 0)
		rc = tok_copy(path, fd, p.nseq, o->seq_len * p.dsize, &sink, err);
	if (rc == 0)
		rc = sink_finish(&sink, err);
	if (rc == 0 && p.dropped)
		fprintf(stderr, "feedpack: %s: dropped the last %llu tokens (a partial sequence)\n",
			path, (unsigned long long)p.dropped);
out:
	sink_free(&sink);
	close(fd);
	return rc;
}

/* ------------------------------------------------------------------ */
/* --doc-sep: documents                                                */

/* A document being gathered, and where the run stands. */
struct tok_docs {
	const struct pack_opts *o;
	size_t isz, osz;           /* bytes per token in and out */
	uint8_t *doc;              /* the current document, out dtype */
	size_t len, cap;           /* its tokens, and room */
	uint64_t ndocs, ntok;      /* documents written, tokens read */
	struct pack_sink *sink;
};

/* The field's dtype: u16 when the vocabulary (or the input) fits. */
static int docs_out_dtype(const struct pack_opts *o)
{
	if (o->tok_dtype == FEED_DTYPE_U16 || (o->vocab_size && o->vocab_size <= 65536))
		return FEED_DTYPE_U16;
	return FEED_DTYPE_U32;
}

/* True when buf's first bytes read as text (UTF-8 with no control
 * character but tab, newline and return): a text file given as tokens. */
static bool docs_looks_text(const uint8_t *buf, size_t n)
{
	unsigned char tmp[4097];
	size_t k = n < 4096 ? n : 4096;

	if (k < 16)
		return false;
	for (size_t i = 0; i < k; i++)
		if ((buf[i] < 0x20 && buf[i] != '\t' && buf[i] != '\n' && buf[i] != '\r') ||
		    buf[i] == 0x7f)
			return false;
	memcpy(tmp, buf, k);
	if (k < n) { /* a multi-byte character cut by the sample's end does not count */
		size_t j = k;
		while (j > 0 && k - j < 3 && (tmp[j - 1] & 0xc0) == 0x80)
			j--;
		if (j > 0 && tmp[j - 1] >= 0xc0) {
			size_t need = tmp[j - 1] >= 0xf0 ? 4 : tmp[j - 1] >= 0xe0 ? 3 : 2;
			if (k - (j - 1) < need)
				k = j - 1;
		}
	}
	tmp[k] = '\0';
	return pack_utf8_ok(tmp);
}

static int docs_emit(struct tok_docs *d, const char *path, struct feed_err *err)
{
	struct fmt_value v = {d->doc, d->len * d->osz};
	int rc;

	if (d->len == 0)
		return 0;
	if ((rc = sink_add(d->sink, &v, err)) < 0)
		return feed_err_prefix(err, "%s", path);
	d->ndocs++;
	d->len = 0;
	return 0;
}

/* Appends token v (read at token offset `at` of path) to the document,
 * which ends after a separator. */
static int docs_token(struct tok_docs *d, uint32_t v, const char *path, uint64_t at,
		      struct feed_err *err)
{
	if (d->o->vocab_size && v >= d->o->vocab_size)
		return feed_err_set(err, -EINVAL, "%s: token %llu is %u, not below --vocab-size %llu",
				    path, (unsigned long long)at, v,
				    (unsigned long long)d->o->vocab_size);
	if (d->len == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 4096;
		uint8_t *p = cap * d->osz <= PACK_MAX_RECORD ? realloc(d->doc, cap * d->osz) : NULL;
		if (!p)
			return feed_err_set(err, -ENOMEM, "%s: document %llu: more than %llu bytes "
					    "or out of memory", path, (unsigned long long)d->ndocs,
					    (unsigned long long)PACK_MAX_RECORD);
		d->doc = p;
		d->cap = cap;
	}
	if (d->osz == 2) {
		uint16_t t = (uint16_t)v;
		memcpy(d->doc + 2 * d->len, &t, 2);
	} else {
		memcpy(d->doc + 4 * d->len, &v, 4);
	}
	d->len++;
	d->ntok++;
	return v == d->o->doc_sep ? docs_emit(d, path, err) : 0;
}

/* The tokens of n bytes (a whole number of tokens) at token offset at. */
static int docs_chunk(struct tok_docs *d, const uint8_t *buf, size_t n, const char *path,
		      uint64_t at, struct feed_err *err)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i += d->isz) {
		uint32_t v;
		if (d->isz == 2) {
			uint16_t t;
			memcpy(&t, buf + i, 2);
			v = t;
		} else {
			memcpy(&v, buf + i, 4);
		}
		rc = docs_token(d, v, path, at + i / d->isz, err);
	}
	return rc;
}

/* One input file (or stdin) through the document splitter; its end ends
 * a document. */
static int docs_file(struct tok_docs *d, const char *path, int fd, uint8_t *buf,
		     struct feed_err *err)
{
	uint64_t total = 0;
	size_t keep = 0;   /* bytes of a token cut by the chunk's end */
	int rc = 0;

	for (;;) {
		long long got = pack_read_full(fd, buf + keep, PACK_CHUNK_BYTES);
		if (got < 0)
			return feed_err_set(err, (int)got, "%s: %s", path, strerror((int)-got));
		if (total == 0 && docs_looks_text(buf, (size_t)got))
			return feed_err_set(err, -EINVAL, "%s: looks like text, not a file of "
					    "%s token ids (tokenize it first)", path,
					    feed_dtype_name(d->o->tok_dtype));
		size_t have = keep + (size_t)got, whole = have - have % d->isz;
		if ((rc = docs_chunk(d, buf, whole, path, total / d->isz, err)) < 0)
			return rc;
		total += whole;
		keep = have - whole;
		memmove(buf, buf + whole, keep);
		if ((size_t)got < PACK_CHUNK_BYTES)
			break;
	}
	if (keep || total == 0)
		return feed_err_set(err, -EINVAL, "%s: size %llu is %s (%s tokens of %zu bytes)",
				    path, (unsigned long long)(total + keep),
				    total + keep ? "not a whole number of tokens" : "empty",
				    feed_dtype_name(d->o->tok_dtype), d->isz);
	return docs_emit(d, path, err);
}

/* Every input, in order; `-` is stdin. */
static int docs_inputs(struct tok_docs *d, struct feed_err *err)
{
	uint8_t *buf = malloc(PACK_CHUNK_BYTES + 8);
	int rc = 0;

	if (!buf)
		return feed_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; i < d->o->npos && rc == 0; i++) {
		const char *path = d->o->pos[i];
		int fd = 0;
		if (strcmp(path, "-") && (rc = pack_open_input(path, &fd, err)) < 0)
			break;
		rc = docs_file(d, strcmp(path, "-") ? path : "stdin", fd, buf, err);
		if (fd > 0)
			close(fd);
	}
	free(buf);
	return rc;
}

/* Sum of the inputs' sizes, for the progress bar (stdin counts 0). */
static uint64_t docs_input_bytes(const struct pack_opts *o)
{
	uint64_t total = 0;
	struct stat st;

	for (int i = 0; i < o->npos; i++)
		if (strcmp(o->pos[i], "-") && stat(o->pos[i], &st) == 0 && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	return total;
}

static int pack_tokens_docs(const struct pack_opts *o, struct feed_err *err)
{
	struct fmt_schema schema = {.nfields = 1};
	struct pack_sink sink = {0};
	int out = docs_out_dtype(o);
	struct tok_docs d = {.o = o, .isz = feed_dtype_size(o->tok_dtype),
			     .osz = feed_dtype_size(out), .sink = &sink};
	char source[PATH_MAX + 64];
	int rc;

	if (o->vocab_size && o->vocab_size > (o->tok_dtype == FEED_DTYPE_U16 ? 65536ull :
					      1ull << 32))
		return feed_err_set(err, -PACK_EUSAGE, "--vocab-size %llu does not fit %s tokens",
				    (unsigned long long)o->vocab_size,
				    feed_dtype_name(o->tok_dtype));
	if (o->doc_sep >= (o->tok_dtype == FEED_DTYPE_U16 ? 65536ull : 1ull << 32) ||
	    (o->vocab_size && o->doc_sep >= o->vocab_size))
		return feed_err_set(err, -PACK_EUSAGE, "--doc-sep %llu is not a %s token%s",
				    (unsigned long long)o->doc_sep, feed_dtype_name(o->tok_dtype),
				    o->vocab_size ? " below --vocab-size" : "");
	pack_field(&schema.fields[0], FMT_TOKENS_FIELD, out, 0, NULL, true);
	snprintf(source, sizeof(source), "tokens %s%s %s doc_sep %llu", o->pos[0],
		 o->npos > 1 ? " ..." : "", feed_dtype_name(o->tok_dtype),
		 (unsigned long long)o->doc_sep);
	rc = sink_open(&sink, o, &schema, source, docs_input_bytes(o), err);
	if (rc == 0)
		rc = docs_inputs(&d, err);
	if (rc == 0)
		rc = sink_finish(&sink, err);
	sink_free(&sink);
	free(d.doc);
	return rc;
}
