/*
 * feedpack_tokens.c: `feedpack tokens FILE --dtype uint16|uint32 --seq-len
 * N`: a flat file of little-endian token ids cut into sequences of N tokens,
 * field `tokens` (u16 or u32, shape [N]). Owns the size checks (whole
 * tokens, at least one sequence) and the note about a dropped trailing
 * partial sequence. Streams the file a chunk of sequences at a time.
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

int pack_cmd_tokens(const struct pack_opts *o, struct feed_err *err)
{
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
