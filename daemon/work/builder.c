/*
 * builder.c: one batch into one destination (see builder.h), and with
 * on_error skip the deterministic replacement of samples that fail (or,
 * in an eval stream, their drop: the batch comes out shorter).
 * Worker thread, no lock of ours; the cache takes its own. What it keeps
 * on a worker between batches (struct bld_worker) hangs on the pool's
 * opaque per-worker slot, pool_worker.ctx.
 */
#include "builder.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "augment_mix.h"
#include "cache.h"
#include "feed_shm.h"
#include "fmt.h"
#include "layout.h"
#include "order.h"
#include "pipeline.h"
#include "pool.h"

/* What a worker keeps between batches: made on its first batch, freed
 * when the pool stops (pool_worker.ctx_free). This worker's own. */
struct bld_worker {
	/* Image decoders (image.h), made on the first batch that decodes and
	 * grown, never shrunk, to the largest dataset limits seen (the pixel
	 * cap clipped to the job's lim.img_max_pixels); [0] one channel,
	 * [1] three */
	struct img_decoder *img_dec[2];
	struct img_limits img_lim[2]; /* what each was made for */
	/* pack (core/packing.h): the window placed last, for the rows
	 * (pk_source_same()) and epoch it was placed for (pack_valid) */
	struct pk_window pack_win;
	struct pk_source pack_src;
	uint64_t pack_epoch;
	bool pack_valid;
	/* a packed mixture: each source's pass and window (pack_stream.h),
	 * kept while the next batch reads the same rows */
	struct pks_stream mix_pk[PKS_STREAMS_MAX];
};

static void bld_worker_free(void *p)
{
	struct bld_worker *bw = p;

	if (!bw)
		return;
	img_decoder_free(bw->img_dec[0]);
	img_decoder_free(bw->img_dec[1]);
	pk_window_free(&bw->pack_win);
	for (uint32_t s = 0; s < PKS_STREAMS_MAX; s++)
		pks_stream_fini(&bw->mix_pk[s]);
	free(bw);
}

/* w's state, made on its first batch; NULL: out of memory. */
static struct bld_worker *bld_worker_of(struct pool_worker *w)
{
	if (!w->ctx) {
		w->ctx = calloc(1, sizeof(struct bld_worker));
		w->ctx_free = bld_worker_free;
	}
	return w->ctx;
}

void bld_limits_init(struct bld_limits *l)
{
	atomic_init(&l->img_max_pixels, IMG_MAX_PIXELS_DEFAULT);
}

void bld_limits_set(struct bld_limits *l, uint64_t img_max_pixels)
{
	assert_loop_thread();
	/* relaxed: a value each job reads once at its start */
	atomic_store_explicit(&l->img_max_pixels, img_max_pixels, memory_order_relaxed);
}

struct bld_snap bld_limits_snap(const struct bld_limits *l)
{
	struct bld_snap s = {.img_max_pixels = IMG_MAX_PIXELS_DEFAULT};

	/* relaxed: see bld_limits_set() */
	if (l)
		s.img_max_pixels = atomic_load_explicit(&l->img_max_pixels, memory_order_relaxed);
	return s;
}

/* Per-worker buffers, grown once to the largest need seen. */
static int worker_reserve(void **p, size_t *cap, size_t need)
{
	if (*cap >= need)
		return 0;
	void *n = aligned_alloc(64, (need + 63) & ~(size_t)63);
	if (!n)
		return -ENOMEM;
	free(*p);
	*p = n;
	*cap = need;
	return 0;
}

/* The worker's image decoders for plan: made, or grown to the union of
 * the limits seen, only when the plan needs more than they were made for
 * (so a worker allocates once per larger dataset, never per image). The
 * pixel cap is the job's (b->lim: the snapshot taken when it started): a
 * dataset recording larger images still opens, and each such image fails
 * with -E2BIG; a decoder made for more than the cap (a reload lowered it)
 * is made again. */
static int worker_decoders(struct bld_worker *w, unsigned index, const struct bld_batch *b,
			   struct aug_img *ret, struct feed_err *err)
{
	static const uint32_t chans[2] = {1, 3};
	const struct pipe_plan *plan = b->plan;
	const uint64_t cap = b->lim.img_max_pixels;

	for (uint32_t k = 0; k < 2; k++) {
		struct img_limits *have = &w->img_lim[k], want = plan->dec_lim;
		if (!(plan->dec_channels_mask & (1u << chans[k])))
			continue;
		if (want.max_pixels > cap)
			want.max_pixels = cap;
		if (w->img_dec[k] && have->max_width >= want.max_width &&
		    have->max_height >= want.max_height && have->max_pixels >= want.max_pixels &&
		    have->max_pixels <= cap)
			continue;
		if (w->img_dec[k] && have->max_width > want.max_width)
			want.max_width = have->max_width;
		if (w->img_dec[k] && have->max_height > want.max_height)
			want.max_height = have->max_height;
		if (w->img_dec[k] && have->max_pixels > want.max_pixels)
			want.max_pixels = have->max_pixels < cap ? have->max_pixels : cap;
		struct img_decoder *dec;
		int rc = img_decoder_new(&want, chans[k], &dec, err);
		if (rc < 0)
			return feed_err_prefix(err, "worker %u: image decoder", index);
		img_decoder_free(w->img_dec[k]);
		w->img_dec[k] = dec;
		*have = want;
	}
	ret->dec1 = w->img_dec[0];
	ret->dec3 = w->img_dec[1];
	return 0;
}

/* Where field f of sample i goes, and how much room it has. */
static void out_dest(const struct bld_batch *b, uint32_t f, uint32_t i, const uint64_t *cursor,
		     struct aug_out *o, size_t *len)
{
	const struct fmt_field *fd = &b->plan->out.fields[f];
	uint8_t *base = b->data + b->lay->field_off[f];

	o->ret_len = len;
	if (!fd->variable) {
		o->dst = base + (size_t)i * fd->max_bytes;
		o->cap = fd->max_bytes;
	} else {
		o->dst = base + cursor[f];
		o->cap = (size_t)b->lay->batch * fd->max_bytes - cursor[f];
	}
}

/* The header flag for the batch's failed samples: replaced or dropped. */
static uint32_t header_bad_flag(const struct bld_batch *b)
{
	if (!b->bad || !b->bad->n)
		return 0;
	return b->on_error == BLD_ON_ERROR_DROP ? FEED_SLOT_DROPPED : FEED_SLOT_REPLACED;
}

/* Writes the slot header's field table once the bytes are in place (n
 * samples built); the generation goes last. Returns the field bytes. */
static uint64_t header_fill(const struct bld_batch *b, const uint64_t *cursor, uint32_t n,
			    bool padded)
{
	const struct fmt_schema *out = &b->plan->out;
	struct feed_shm_slot *h = b->hdr;
	uint64_t bytes = 0;

	h->nsamples = n;
	h->epoch = b->epoch;
	h->index = b->index;
	h->flags = (padded ? FEED_SLOT_PADDED : 0) | header_bad_flag(b);
	h->position = ord_position_of(b->ord, b->ord_batch);
	h->nfields = out->nfields;
	for (uint32_t f = 0; f < out->nfields; f++) {
		const struct fmt_field *fd = &out->fields[f];
		struct feed_shm_field *sf = &h->field[f];
		memset(sf, 0, sizeof(*sf));
		sf->dtype = (uint32_t)fd->dtype;
		sf->rank = fd->rank + 1;
		sf->shape[0] = n;
		for (uint32_t d = 0; d < fd->rank; d++)
			sf->shape[d + 1] = fd->shape[d];
		sf->offset = b->data_off + b->lay->field_off[f];
		if (fd->variable) {
			/* every sample dropped: ends[0] alone, written nowhere else */
			((uint64_t *)((uint8_t *)h + b->lay->var_off[f]))[0] = 0;
			sf->bytes = cursor[f];
			sf->var_off = b->hdr_off + b->lay->var_off[f];
			/* the variable axis: shape[1] = 0, element shape after it */
			sf->rank = fd->rank + 2;
			memmove(&sf->shape[2], &sf->shape[1], fd->rank * sizeof(uint64_t));
			sf->shape[1] = 0;
		} else {
			sf->bytes = (uint64_t)n * fd->max_bytes;
		}
		bytes += sf->bytes;
	}
	h->gen = b->gen;
	return bytes;
}

/* Builds sample i of the batch into the destination. */
static int sample_build(const struct bld_batch *b, const struct aug_img *ai,
			void *scratch, const struct fmt_block *blk, uint32_t rec, uint64_t idx,
			uint32_t i, uint64_t *cursor, struct feed_err *err)
{
	uint32_t nf = b->plan->in.nfields;
	struct aug_in ain[FMT_MAX_FIELDS] = {0};
	struct aug_out aout[FMT_MAX_FIELDS] = {0};
	size_t len[FMT_MAX_FIELDS];
	struct aug_ctx ctx = {.seed = b->seed, .epoch = b->epoch, .sample = idx};

	for (uint32_t f = 0; f < nf; f++) {
		ain[f].data = fmt_block_field(blk, f, rec, &ain[f].len);
		out_dest(b, f, i, cursor, &aout[f], &len[f]);
	}
	int rc = aug_apply_img(b->plan, &ctx, ain, aout, scratch, ai, err);
	if (rc < 0)  /* "sample 12: field 'image': <decoder's words>" */
		return rc;
	for (uint32_t f = 0; f < nf; f++) {
		if (!b->plan->out.fields[f].variable)
			continue;
		uint64_t *ends = (uint64_t *)((uint8_t *)b->hdr + b->lay->var_off[f]);
		cursor[f] += len[f];
		ends[0] = 0;
		ends[i + 1] = cursor[f];
	}
	return 0;
}

/* A record the pipeline could not take (not a dataset or memory fault):
 * what on_error skip replaces. */
static bool sample_bad(int rc)
{
	return rc == -EBADMSG || rc == -ENOTSUP || rc == -E2BIG;
}

/* The prefix every sample error carries: the dataset and, when ingest
 * recorded it, the file ("dataset 'x': train/a/b.JPEG: sample 12: field
 * 'image': JPEG: ..."). */
static int sample_err(const struct fmt_dataset *ds, uint64_t idx, struct feed_err *err)
{
	const char *path = fmt_dataset_sample_path(ds, idx);

	if (path)
		return feed_err_prefix(err, "dataset '%s': %s", fmt_dataset_info(ds)->name, path);
	return feed_err_prefix(err, "dataset '%s'", fmt_dataset_info(ds)->name);
}

/* The dataset row i reads: its source's in a mixture. */
static const struct fmt_dataset *row_ds(const struct bld_batch *b, uint32_t i)
{
	return b->mix_rows ? b->srcs[b->mix_rows[i].source] : b->ds;
}

/* Rows from i0 on that read one dataset, at most n (a chunk pins one's
 * blocks). */
static uint32_t row_run(const struct bld_batch *b, uint32_t i0, uint32_t n)
{
	uint32_t k = 1;

	while (b->mix_rows && k < n && b->mix_rows[i0 + k].source == b->mix_rows[i0].source)
		k++;
	return b->mix_rows ? k : n;
}

/* A mixture's source field: each row's source index (int32), the rows
 * dropped (drop) left out. */
static void source_fill(const struct bld_batch *b)
{
	int32_t *v = (int32_t *)(void *)(b->data + b->lay->field_off[b->src_field]);
	const uint64_t *gone = feed_shm_replaced(b->hdr, b->lay->batch);
	bool drop = b->on_error == BLD_ON_ERROR_DROP;

	for (uint32_t i = 0, o = 0; i < b->nsamples; i++)
		if (!drop || !((gone[i / 64] >> (i % 64)) & 1))
			v[o++] = (int32_t)b->mix_rows[i].source;
}

/* Notes position i's failure in b->bad (its message, cut to fit): i is
 * the position as laid out (a dropped sample's too). */
static void bad_note(const struct bld_batch *b, uint32_t i, const struct feed_err *e)
{
	struct bld_bad *bad = b->bad;
	size_t used = strlen(bad->what);

	feed_shm_replaced(b->hdr, b->lay->batch)[i / 64] |= 1ull << (i % 64);
	const char *sep = bad->n ? "; " : "";
	size_t ls = strlen(sep), lm = strlen(e->msg);
	if (used + ls + lm < sizeof(bad->what)) { /* else cut: whole messages only */
		memcpy(bad->what + used, sep, ls);
		memcpy(bad->what + used + ls, e->msg, lm + 1);
	}
	bad->n++;
}

/* Builds, in place of position i (global position g), the first sample
 * after g in the epoch's global order that builds; one pin at a time. */
static int sample_replace(const struct bld_batch *b, struct pool_worker *w,
			  const struct aug_img *ai, struct cache_worker *cw, uint32_t i, uint64_t g,
			  uint64_t *cursor, struct feed_err *err)
{
	uint64_t n = fmt_dataset_info(b->ds)->num_samples;
	struct feed_err e = {0};
	int rc = 0;

	for (uint64_t k = 1; k <= b->max_search && k < n; k++) {
		uint64_t idx = ord_sample_after(b->ord, g, k);
		struct fmt_loc loc;
		const struct fmt_block *blk;
		struct cache_entry *ent;
		fmt_dataset_locate(b->ds, idx, &loc);
		if ((rc = cache_get(b->cache, b->ds, loc.block, cw, &blk, &ent, err)) < 0)
			return feed_err_prefix(err, "sample %llu", (unsigned long long)idx);
		e = (struct feed_err){0};
		rc = sample_build(b, ai, w->scratch, blk, loc.record, idx, i, cursor, &e);
		cache_put(b->cache, ent);
		if (rc == 0) {
			b->hdr->sample[i] = idx;
			return 0;
		}
		if (!sample_bad(rc)) {
			*err = e;
			return sample_err(b->ds, idx, err);
		}
	}
	feed_err_set(err, -EBADMSG, "sample %llu: no good sample to replace it within %llu positions",
		     (unsigned long long)b->hdr->sample[i], (unsigned long long)b->max_search);
	return sample_err(b->ds, b->hdr->sample[i], err);
}

/* The decode dispatch: the chunk's samples at batch positions below
 * b->pre->n_first have their image decoded ahead, together (hybrid JPEG
 * decode), into pre[k] (view.px NULL: the sample decodes it itself).
 * Returns how many leading entries of pre are set. Draws are the sample's
 * own (aug_image_box), so the batch is the same whichever decodes. */
static uint32_t chunk_predecode(const struct bld_batch *b, const struct fmt_block *const *blk,
				const uint32_t *rec, const uint64_t *idx, uint32_t i0, uint32_t n,
				struct aug_pre *pre)
{
	struct bld_pre_image im[CACHE_PIN_MAX];
	struct aug_pre got[CACHE_PIN_MAX];
	uint32_t at[CACHE_PIN_MAX], m = 0, c = 0, f = 0;

	if (!b->pre || i0 >= b->pre->n_first)
		return 0;
	n = n < b->pre->n_first - i0 ? n : b->pre->n_first - i0;
	while (f < b->plan->in.nfields && !b->plan->field_nstages[f])
		f++;  /* the first field with stages: the one a decode can lead */
	for (uint32_t k = 0; k < n; k++) {
		struct aug_ctx ctx = {.seed = b->seed, .epoch = b->epoch, .sample = idx[k]};
		uint32_t kc;
		memset(&pre[k], 0, sizeof(pre[k]));
		im[m].data = fmt_block_field(blk[k], f, rec[k], &im[m].len);
		if (aug_image_box(b->plan, f, &ctx, im[m].data, im[m].len, &im[m].box, &kc) <= 0 ||
		    (m && kc != c))
			continue;
		c = kc;
		at[m++] = k;
	}
	if (m == 0)
		return 0;
	memset(got, 0, m * sizeof(got[0]));
	b->pre->run(b->pre->arg, im, m, c, got);
	for (uint32_t j = 0; j < m; j++) {
		pre[at[j]] = got[j];
		pre[at[j]].field = f;
		pre[at[j]].box = im[j].box;
	}
	return n;
}

/* Locates samples idx[0..n) of ds (rec: their records) and pins their
 * blocks: one trip to the cache for all that are cached, the others one
 * by one, decoding (a remote dataset fetching them together first). On
 * error ent[] holds what was pinned (NULL elsewhere), for cache_put_many. */
static int chunk_pin(const struct bld_batch *b, const struct fmt_dataset *ds,
		     struct cache_worker *cw, const uint64_t *idx, uint32_t n, uint32_t *rec,
		     const struct fmt_block **blk, struct cache_entry **ent, struct feed_err *err)
{
	uint64_t block[CACHE_PIN_MAX], miss[CACHE_PIN_MAX];
	size_t nmiss = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct fmt_loc loc;
		fmt_dataset_locate(ds, idx[k], &loc);
		block[k] = loc.block;
		rec[k] = loc.record;
	}
	if (cache_pin_many(b->cache, ds, block, n, blk, ent) == n)
		return 0;
	for (uint32_t k = 0; k < n; k++)
		if (!ent[k])
			miss[nmiss++] = block[k];
	/* a remote dataset fetches them together; a directory: nothing */
	fmt_dataset_prefetch(ds, miss, nmiss);
	for (uint32_t k = 0; k < n; k++) {
		if (ent[k])
			continue;
		int rc = cache_get(b->cache, ds, block[k], cw, &blk[k], &ent[k], err);
		if (rc < 0)
			return feed_err_prefix(err, "sample %llu", (unsigned long long)idx[k]);
	}
	return 0;
}

/* Builds samples [i0, i0 + n) of the batch, n <= CACHE_PIN_MAX, into
 * output positions [o0, o0 + n) (o0 < i0 once samples were dropped):
 * locates them, pins their blocks with one trip to the cache for all that
 * are cached (the others one by one, decoding), builds, unpins. *ret_done:
 * the samples done; with skip or drop, the chunk stops after one that
 * fails (noted, *ret_failed set) so that its replacement, built next, or
 * the sample after it, goes in order (variable fields are laid out in
 * order) with one pin of its own. */
static int chunk_build(const struct bld_batch *b, struct pool_worker *w,
		       const struct aug_img *ai, struct cache_worker *cw, uint32_t i0, uint32_t o0,
		       uint32_t n, uint64_t *cursor, bool *padded, uint32_t *ret_done,
		       bool *ret_failed, struct feed_err *err)
{
	uint64_t idx[CACHE_PIN_MAX];
	uint32_t rec[CACHE_PIN_MAX];
	const struct fmt_block *blk[CACHE_PIN_MAX];
	struct cache_entry *ent[CACHE_PIN_MAX];
	const struct fmt_dataset *ds = row_ds(b, i0);  /* every row's: row_run() */

	for (uint32_t k = 0; k < n; k++) {
		idx[k] = b->mix_rows ? b->mix_rows[i0 + k].sample : ord_sample(b->ord, b->ord_batch, i0 + k);
		*padded |= ord_padding(b->ord, b->ord_batch, i0 + k);
		b->hdr->sample[o0 + k] = idx[k];
	}
	int rc = chunk_pin(b, ds, cw, idx, n, rec, blk, ent, err);
	if (rc < 0)
		goto out;
	*ret_done = n;
	struct aug_pre pre[CACHE_PIN_MAX];
	struct aug_img aik = *ai;
	uint32_t npre = chunk_predecode(b, blk, rec, idx, i0, n, pre);
	for (uint32_t k = 0; k < n && rc == 0; k++) {
		aik.pre = k < npre && pre[k].view.px ? &pre[k] : NULL;
		rc = sample_build(b, &aik, w->scratch, blk[k], rec[k], idx[k], o0 + k, cursor, err);
		if (rc < 0)
			sample_err(ds, idx[k], err);
		if (rc < 0 && b->on_error != BLD_ON_ERROR_FAIL && sample_bad(rc)) {
			if (b->bad->n < FEED_SHM_FAILED_MAX) /* bad_note counts it */
				feed_shm_failed(b->hdr, b->lay->batch)[b->bad->n] = idx[k];
			bad_note(b, i0 + k, err);
			*err = (struct feed_err){0};
			*ret_failed = true;
			*ret_done = k + 1;
			rc = 0;
			break;
		}
		/* another user's light batch need not wait for ours; but not while
		 * views into this thread's hybrid decoder remain (gpu/hybrid.c keeps
		 * one per thread: a job yielded to here could overwrite or free
		 * them, putting its pixels in our batch) */
		if (k + 1 >= npre)
			pool_yield(w);
	}
out:
	cache_put_many(b->cache, ent, n);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Packed rows                                                         */

/* A row's token reads: one block pinned at a time, kept while the next
 * read is in the same block of the same dataset. */
struct rows_fetch {
	const struct bld_batch *b;
	struct cache_worker *cw;
	uint32_t field;              /* the dataset's token field */
	int dtype;                   /* its dtype */
	const struct fmt_dataset *ds; /* the row's dataset (a mixture's source) */
	const uint32_t *lens;        /* its document lengths */
	const struct fmt_dataset *pin_ds; /* the pinned block's dataset */
	uint64_t block;              /* pinned block, UINT64_MAX when none */
	const struct fmt_block *blk;
	struct cache_entry *ent;
};

static void rows_unpin(struct rows_fetch *f)
{
	if (f->ent)
		cache_put(f->b->cache, f->ent);
	f->ent = NULL;
	f->block = UINT64_MAX;
}

/* pk_fetch_fn: n tokens of document doc from start, as u32. */
static int rows_fetch(void *ctx, uint64_t doc, uint64_t start, uint32_t n, uint32_t *dst,
		      struct feed_err *err)
{
	struct rows_fetch *f = ctx;
	struct fmt_loc loc;
	size_t len;
	int rc;

	fmt_dataset_locate(f->ds, doc, &loc);
	if (loc.block != f->block || f->pin_ds != f->ds) {
		rows_unpin(f);
		if ((rc = cache_get(f->b->cache, f->ds, loc.block, f->cw, &f->blk, &f->ent, err)) < 0)
			return feed_err_prefix(err, "document %llu", (unsigned long long)doc);
		f->block = loc.block;
		f->pin_ds = f->ds;
	}
	const uint8_t *p = fmt_block_field(f->blk, f->field, loc.record, &len);
	size_t es = feed_dtype_size(f->dtype);
	if (len / es != f->lens[doc] || start + n > len / es)
		return feed_err_set(err, -EBADMSG, "dataset '%s': document %llu holds %zu tokens, "
				    "its recorded length is %u", fmt_dataset_info(f->ds)->name,
				    (unsigned long long)doc, len / es, f->lens[doc]);
	for (uint32_t k = 0; k < n; k++) {
		if (es == 2) {
			uint16_t t;
			memcpy(&t, p + 2 * (start + k), 2);
			dst[k] = t;
		} else {
			memcpy(&dst[k], p + 4 * (start + k), 4);
		}
	}
	return 0;
}

/* Row i's fields into the destination: ids as the tokens' dtype. */
static void rows_out(const struct bld_batch *b, uint32_t i, struct pk_row_out *o)
{
	uint32_t L = b->plan->pack.seq_len;
	uint8_t *base = b->data;

	o->labels = (int64_t *)(base + b->lay->field_off[1]) + (size_t)i * L;
	o->position_ids = (int64_t *)(base + b->lay->field_off[2]) + (size_t)i * L;
	o->document_ids = (int64_t *)(base + b->lay->field_off[3]) + (size_t)i * L;
	o->cu_base = (int32_t)(i * L);
}

static void rows_ids(const struct bld_batch *b, uint32_t i, const uint32_t *ids)
{
	uint32_t L = b->plan->pack.seq_len;
	int dt = b->plan->out.fields[0].dtype;
	uint8_t *dst = b->data + b->lay->field_off[0] + (size_t)i * L * feed_dtype_size(dt);

	for (uint32_t j = 0; j < L; j++) {
		if (dt == FEED_DTYPE_U16) {
			uint16_t t = (uint16_t)ids[j];
			memcpy(dst + 2 * j, &t, 2);
		} else {
			memcpy(dst + 4 * j, &ids[j], 4);
		}
	}
}

/* Row g's segments into segs, c moved to the row after it: concat walks
 * the lengths; pack places the windows it reaches (w's window is kept for
 * the next batch of the same stream and epoch). */
static int rows_segs(const struct bld_batch *b, struct bld_worker *w, unsigned index,
		     const struct pk_docs *docs, struct pk_cursor *c, uint64_t g, struct pk_seg *segs,
		     struct feed_err *err)
{
	const struct pk_spec *sp = &b->plan->pack;
	int rc;

	if (sp->mode == PK_MODE_CONCAT) {
		pk_concat_seek(docs, sp->seq_len, c, g);
		return (int)pk_concat_row(docs, sp->seq_len, c, segs);
	}
	/* a window is a pure function of the rows' inputs and the epoch: one
	 * placed for another stream of the same ones serves */
	if (!w->pack_valid || w->pack_epoch != b->epoch || !pk_source_same(&w->pack_src, b->rows)) {
		w->pack_win.index = UINT64_MAX;
		w->pack_win.nsegs = 0;
		w->pack_src = *b->rows;
		w->pack_epoch = b->epoch;
		w->pack_valid = true;
	}
	if ((rc = pk_pack_seek(docs, sp, c, &w->pack_win, g)) == 1 &&
	    (rc = pk_pack_row(docs, sp, c, &w->pack_win, segs)) > 0)
		return rc;
	w->pack_valid = false;
	if (rc == -ENOMEM)
		return feed_err_set(err, rc, "worker %u: out of memory for a pack window", index);
	return feed_err_set(err, -EINVAL, "row %llu: past the epoch's last row",
			    (unsigned long long)g);
}

/* A batch of rows being built: the worker's scratch cut for one row, the
 * token reads, the variable fields' cursors. */
struct rows_ctx {
	const struct bld_batch *b;
	struct pool_worker *w;
	struct bld_worker *bw;       /* w's state */
	struct rows_fetch f;
	uint64_t cursor[FMT_MAX_FIELDS];
	uint32_t *ids, *tmp;
	struct pk_seg *segs;
};

/* Fills row i from its nseg segments in x->segs (row `sample` of its
 * stream), its segment starts appended to cu_seqlens (and, after the
 * batch's last row, rows * L). */
static int rows_put(struct rows_ctx *x, const struct pk_docs *docs, uint32_t nseg,
		    uint64_t sample, uint32_t i, struct feed_err *err)
{
	const struct bld_batch *b = x->b;
	const struct pk_spec *sp = &b->plan->pack;
	struct pk_row_out o;
	int rc;

	rows_out(b, i, &o);
	int32_t *cu = (int32_t *)(b->data + b->lay->field_off[4] + x->cursor[4]);
	o.cu = cu;
	if ((rc = pk_row_fill(sp, docs, x->segs, nseg, rows_fetch, &x->f, x->ids, x->tmp, &o,
			      err)) < 0)
		return feed_err_prefix(err, "row %llu", (unsigned long long)sample);
	rows_ids(b, i, x->ids);
	if (i + 1 == b->nsamples)
		cu[o.ncu++] = (int32_t)((i + 1) * sp->seq_len);
	uint64_t *ends = (uint64_t *)((uint8_t *)b->hdr + b->lay->var_off[4]);
	x->cursor[4] += (uint64_t)o.ncu * 4;
	ends[0] = 0;
	ends[i + 1] = x->cursor[4];
	b->hdr->sample[i] = sample;
	return 0;
}

/* The rows of one stream (plan->pack over b->rows), row i at ord's
 * sample i, walked from b->pk. */
static int rows_stream(struct rows_ctx *x, bool *padded, struct feed_err *err)
{
	const struct bld_batch *b = x->b;
	struct ord_epoch order;
	struct pk_docs docs;
	struct pk_cursor c = b->pk;
	int rc;

	if ((rc = pk_source_epoch(b->rows, b->epoch, &order, &docs, err)) < 0)
		return rc;
	for (uint32_t i = 0; i < b->nsamples && rc == 0; i++) {
		uint64_t g = ord_sample(b->ord, b->ord_batch, i);
		int nseg = rows_segs(b, x->bw, x->w->index, &docs, &c, g, x->segs, err);
		*padded |= ord_padding(b->ord, b->ord_batch, i);
		rc = nseg < 0 ? nseg : rows_put(x, &docs, (uint32_t)nseg, g, i, err);
		pool_yield(x->w);
	}
	ord_epoch_fini(&order);
	return rc;
}

/* A packed mixture's rows: row i is row mix_rows[i].sample of its
 * source's stream, each source walked from where the batch starts it
 * (b->mix_pk) with the worker's pass and window of that source. */
static int rows_mixture(struct rows_ctx *x, bool *padded, struct feed_err *err)
{
	const struct bld_batch *b = x->b;
	struct pks_pos pos[PKS_STREAMS_MAX];
	int rc = 0;

	assert(b->nsrcs <= PKS_STREAMS_MAX);
	for (uint32_t s = 0; s < b->nsrcs; s++) {
		pks_stream_use(&x->bw->mix_pk[s], &b->mix_pk_spec[s]);
		pos[s] = b->mix_pk[s];
	}
	for (uint32_t i = 0; i < b->nsamples && rc == 0; i++) {
		uint32_t s = b->mix_rows[i].source;
		uint64_t k = b->mix_rows[i].sample;
		const struct pk_docs *docs;
		int nseg = 0;
		x->f.ds = b->srcs[s];
		x->f.lens = b->mix_pk_spec[s].src->lens;
		*padded |= ord_padding(b->ord, b->ord_batch, i);
		if ((rc = pks_seek(&x->bw->mix_pk[s], &pos[s], k, err)) == 0 &&
		    (rc = nseg = pks_row(&x->bw->mix_pk[s], &pos[s], x->segs, &docs, err)) > 0)
			rc = rows_put(x, docs, (uint32_t)nseg, k, i, err);
		if (rc < 0)
			feed_err_prefix(err, "dataset '%s'", fmt_dataset_info(b->srcs[s])->name);
		pool_yield(x->w);
	}
	return rc;
}

static int rows_build(const struct bld_batch *b, struct pool_worker *w, struct cache_worker *cw,
		      uint64_t *ret_bytes, struct feed_err *err)
{
	struct rows_ctx x = {.b = b, .w = w, .bw = w->ctx,
			     .f = {.b = b, .cw = cw, .field = b->plan->pack_field,
				   .dtype = b->plan->in.fields[b->plan->pack_field].dtype,
				   .ds = b->ds, .block = UINT64_MAX}};
	bool padded = false;
	int rc;

	if ((uint64_t)b->nsamples * b->plan->pack.seq_len > INT32_MAX)
		return feed_err_set(err, -EINVAL, "%u rows of %u tokens: more than cu_seqlens' "
				    "int32 holds", b->nsamples, b->plan->pack.seq_len);
	pk_scratch_split(w->scratch, b->plan->pack.seq_len, &x.ids, &x.tmp, &x.segs);
	if (b->mix_rows) {
		rc = rows_mixture(&x, &padded, err);
	} else {
		x.f.lens = b->rows->lens;
		rc = rows_stream(&x, &padded, err);
	}
	rows_unpin(&x.f);
	if (rc == 0 && b->mix_rows)
		source_fill(b);
	if (rc == 0)
		*ret_bytes = header_fill(b, x.cursor, b->nsamples, padded);
	return rc;
}

/* No sample failed yet: b->bad and the header's bitmap cleared. */
static void bad_reset(const struct bld_batch *b)
{
	if (!b->bad)
		return;
	b->bad->n = 0;
	b->bad->what[0] = '\0';
	memset(feed_shm_replaced(b->hdr, b->lay->batch), 0,
	       8 * FEED_SHM_REPLACED_WORDS(b->lay->batch));
}

int bld_build(const struct bld_batch *b, struct pool_worker *w, uint64_t *ret_bytes,
	      struct feed_err *err)
{
	assert_worker();
	uint64_t comp = fmt_dataset_info(b->ds)->max_block_comp;
	uint64_t cursor[FMT_MAX_FIELDS] = {0};
	bool padded = false;
	int rc = 0;

	for (uint32_t s = 0; b->mix_rows && s < b->nsrcs; s++)
		if (fmt_dataset_info(b->srcs[s])->max_block_comp > comp)
			comp = fmt_dataset_info(b->srcs[s])->max_block_comp;
	if (worker_reserve(&w->comp, &w->comp_cap, comp) < 0 ||
	    worker_reserve(&w->scratch, &w->scratch_cap, pipe_scratch_bytes(b->plan) + 64) < 0)
		return feed_err_set(err, -ENOMEM, "worker %u: out of memory", w->index);
	struct bld_worker *bw = bld_worker_of(w);
	if (!bw)
		return feed_err_set(err, -ENOMEM, "worker %u: out of memory", w->index);
	struct aug_img ai = {0};
	if ((rc = worker_decoders(bw, w->index, b, &ai, err)) < 0)
		return rc;
	struct cache_worker cw = {.dec = w->dec, .comp = w->comp, .comp_cap = w->comp_cap};
	bad_reset(b);
	if (b->plan->pack.mode != PK_MODE_NONE)
		return rows_build(b, w, &cw, ret_bytes, err);
	assert(b->on_error == BLD_ON_ERROR_FAIL || b->bad);
	uint32_t out = 0;  /* samples in place: i0 less those dropped */
	for (uint32_t i0 = 0; i0 < b->nsamples && rc == 0;) {
		uint32_t n = row_run(b, i0, b->nsamples - i0 < CACHE_PIN_MAX ? b->nsamples - i0 :
									   CACHE_PIN_MAX);
		uint32_t done = 0;
		bool failed = false;
		rc = chunk_build(b, w, &ai, &cw, i0, out, n, cursor, &padded, &done, &failed, err);
		i0 += done;
		out += done;
		if (rc == 0 && failed && b->on_error == BLD_ON_ERROR_DROP)
			out--;  /* the next sample takes its place */
		/* after the chunk's pins are dropped: a replacement pins one block */
		else if (rc == 0 && failed)
			rc = sample_replace(b, w, &ai, &cw, out - 1,
					    ord_global_position(b->ord, b->ord_batch, i0 - 1), cursor,
					    err);
	}
	if (rc == 0 && b->mix_rows)
		source_fill(b);
	if (rc == 0 && b->plan->bmix.on) /* the batch op, once every sample is in */
		rc = aug_batch_mix(b->plan, b->seed, b->epoch, b->mix_batch,
				   b->data + b->lay->field_off[b->plan->bmix.img_field],
				   b->data + b->lay->field_off[b->plan->bmix.label_field],
				   b->nsamples, b->hdr->sample, err);
	if (rc == 0)
		*ret_bytes = header_fill(b, cursor, out, padded);
	return rc;
}
