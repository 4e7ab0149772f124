/*
 * pack_stream.c: a packed source's rows over its passes (pack_stream.h).
 * Pure; the caller's thread. Reads document lengths, never tokens.
 */
#include "pack_stream.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

int pks_spec_check(const struct pks_spec *spec, struct feed_err *err)
{
	const struct pk_source *s = spec->src;

	if (s->spec.mode == PK_MODE_PACK && spec->cap)
		return feed_err_set(err, -EINVAL, "pack(seq_len=%u): a pass's rows are known only "
				    "once placed, so repeat and choose (a source epoch counted in "
				    "rows) are not offered with pack; use concat", s->spec.seq_len);
	/* concat without a row never gets here: pk_source_init() refuses it */
	if (s->total == 0)
		return feed_err_set(err, -EINVAL, "pack(seq_len=%u): 0 tokens make no row",
				    s->spec.seq_len);
	return 0;
}

/* Drops the pass held (and the window placed in it). */
static void stream_drop(struct pks_stream *st)
{
	if (st->valid)
		ord_epoch_fini(&st->ord);
	st->valid = false;
	st->win.index = UINT64_MAX;
	st->win.nsegs = 0;
}

void pks_stream_use(struct pks_stream *st, const struct pks_spec *spec)
{
	bool same = st->src.spec.mode != PK_MODE_NONE && st->cap == spec->cap &&
		    pk_source_same(&st->src, spec->src);

	if (!same)
		stream_drop(st);
	/* the same rows: the copy's lengths may be another stream's mapping
	 * (of the same dataset version), so take this one's */
	st->src = *spec->src;
	st->cap = spec->cap;
	if (st->valid)
		st->docs.lens = st->src.lens;
}

void pks_stream_fini(struct pks_stream *st)
{
	stream_drop(st);
	pk_window_free(&st->win);
	memset(st, 0, sizeof(*st));
}

/* Lays out pass `pass` (its document order) unless held. */
static int stream_pass(struct pks_stream *st, uint64_t pass, struct feed_err *err)
{
	int rc;

	if (st->valid && st->pass == pass)
		return 0;
	stream_drop(st);
	if ((rc = pk_source_epoch(&st->src, pass, &st->ord, &st->docs, err)) < 0)
		return rc;
	st->valid = true;
	st->pass = pass;
	return 0;
}

/* concat: the pass and row of the stream's k-th row. */
static void concat_place(const struct pks_stream *st, uint64_t k, uint64_t *ret_pass,
			 uint64_t *ret_row)
{
	uint64_t rows = (st->src.total - 1) / st->src.spec.seq_len;

	if (!st->cap) {
		*ret_pass = k / rows;
		*ret_row = k % rows;
		return;
	}
	uint64_t passes = st->cap / rows + (st->cap % rows != 0), j = k % st->cap;
	*ret_pass = k / st->cap * passes + j / rows;
	*ret_row = j % rows;
}

static int concat_seek(struct pks_stream *st, struct pks_pos *p, uint64_t k,
		       struct feed_err *err)
{
	uint64_t pass, row;
	int rc;

	concat_place(st, k, &pass, &row);
	if ((rc = stream_pass(st, pass, err)) < 0)
		return rc;
	if (p->pass != pass || p->k > k)
		p->c = (struct pk_cursor){0};
	p->pass = pass;
	pk_concat_seek(&st->docs, st->src.spec.seq_len, &p->c, row);
	p->k = k;
	return 0;
}

/* pack: forward pass by pass; a pass's rows are counted as its windows
 * are placed. Every pass has a row (pks_spec_check: a token at least). */
static int pack_seek(struct pks_stream *st, struct pks_pos *p, uint64_t k, struct feed_err *err)
{
	int rc;

	if (k < p->k)
		*p = (struct pks_pos){0};
	for (;;) {
		if ((rc = stream_pass(st, p->pass, err)) < 0)
			return rc;
		uint64_t row0 = p->c.row;
		rc = pk_pack_seek(&st->docs, &st->src.spec, &p->c, &st->win, row0 + (k - p->k));
		if (rc < 0)
			return feed_err_set(err, rc, "pack: out of memory for a window");
		if (rc == 1) {
			p->k = k;
			return 0;
		}
		p->k += p->c.row - row0;  /* the pass ended: c.row is its row count */
		p->pass++;
		p->c = (struct pk_cursor){0};
	}
}

int pks_seek(struct pks_stream *st, struct pks_pos *p, uint64_t k, struct feed_err *err)
{
	if (st->src.spec.mode == PK_MODE_CONCAT)
		return concat_seek(st, p, k, err);
	return pack_seek(st, p, k, err);
}

int pks_row(struct pks_stream *st, struct pks_pos *p, struct pk_seg *segs,
	    const struct pk_docs **ret_docs, struct feed_err *err)
{
	int rc = pks_seek(st, p, p->k, err);  /* at a pass's end: the next pass */

	if (rc < 0)
		return rc;
	*ret_docs = &st->docs;
	if (st->src.spec.mode == PK_MODE_CONCAT) {
		rc = (int)pk_concat_row(&st->docs, st->src.spec.seq_len, &p->c, segs);
	} else {
		rc = pk_pack_row(&st->docs, &st->src.spec, &p->c, &st->win, segs);
		if (rc < 0)
			return feed_err_set(err, rc, "pack: out of memory for a window");
		assert(rc > 0);  /* the seek found the row */
	}
	p->k++;
	return rc;
}
