/*
 * builder.c: one batch into one destination (see builder.h), and with
 * on_error skip the deterministic replacement of samples that fail.
 * Worker thread, no lock of ours; the cache takes its own.
 */
#include "builder.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "cache.h"
#include "feed_shm.h"
#include "fmt.h"
#include "layout.h"
#include "order.h"
#include "pipeline.h"
#include "pool.h"

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
 * pixel cap is the worker's img_max_pixels: a dataset recording larger
 * images still opens, and each such image fails with -E2BIG. */
static int worker_decoders(struct pool_worker *w, const struct pipe_plan *plan,
			   struct aug_img *ret, struct feed_err *err)
{
	static const uint32_t chans[2] = {1, 3};

	for (uint32_t k = 0; k < 2; k++) {
		struct img_limits *have = &w->img_lim[k], want = plan->dec_lim;
		if (!(plan->dec_channels_mask & (1u << chans[k])))
			continue;
		if (want.max_pixels > w->img_max_pixels)
			want.max_pixels = w->img_max_pixels;
		if (w->img_dec[k] && have->max_width >= want.max_width &&
		    have->max_height >= want.max_height && have->max_pixels >= want.max_pixels)
			continue;
		if (have->max_width > want.max_width)
			want.max_width = have->max_width;
		if (have->max_height > want.max_height)
			want.max_height = have->max_height;
		if (have->max_pixels > want.max_pixels)
			want.max_pixels = have->max_pixels;
		struct img_decoder *dec;
		int rc = img_decoder_new(&want, chans[k], &dec, err);
		if (rc < 0)
			return feed_err_prefix(err, "worker %u: image decoder", w->index);
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

/* Writes the slot header's field table once the bytes are in place; the
 * generation goes last. Returns the field bytes. */
static uint64_t header_fill(const struct bld_batch *b, const uint64_t *cursor, bool padded,
			    bool replaced)
{
	const struct fmt_schema *out = &b->plan->out;
	struct feed_shm_slot *h = b->hdr;
	uint64_t bytes = 0;

	h->nsamples = b->nsamples;
	h->epoch = b->epoch;
	h->index = b->index;
	h->flags = (padded ? FEED_SLOT_PADDED : 0) | (replaced ? FEED_SLOT_REPLACED : 0);
	h->position = ord_position_of(b->ord, b->ord_batch);
	h->nfields = out->nfields;
	for (uint32_t f = 0; f < out->nfields; f++) {
		const struct fmt_field *fd = &out->fields[f];
		struct feed_shm_field *sf = &h->field[f];
		memset(sf, 0, sizeof(*sf));
		sf->dtype = (uint32_t)fd->dtype;
		sf->rank = fd->rank + 1;
		sf->shape[0] = b->nsamples;
		for (uint32_t d = 0; d < fd->rank; d++)
			sf->shape[d + 1] = fd->shape[d];
		sf->offset = b->data_off + b->lay->field_off[f];
		if (fd->variable) {
			sf->bytes = cursor[f];
			sf->var_off = b->hdr_off + b->lay->var_off[f];
			/* the variable axis: shape[1] = 0, element shape after it */
			sf->rank = fd->rank + 2;
			memmove(&sf->shape[2], &sf->shape[1], fd->rank * sizeof(uint64_t));
			sf->shape[1] = 0;
		} else {
			sf->bytes = (uint64_t)b->nsamples * fd->max_bytes;
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
static int sample_err(const struct bld_batch *b, uint64_t idx, struct feed_err *err)
{
	const char *path = fmt_dataset_sample_path(b->ds, idx);

	if (path)
		return feed_err_prefix(err, "dataset '%s': %s", fmt_dataset_info(b->ds)->name,
				       path);
	return feed_err_prefix(err, "dataset '%s'", fmt_dataset_info(b->ds)->name);
}

/* Notes position i's failure in b->bad (its message, cut to fit). */
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
			return sample_err(b, idx, err);
		}
	}
	feed_err_set(err, -EBADMSG, "sample %llu: no good sample to replace it within %llu positions",
		     (unsigned long long)b->hdr->sample[i], (unsigned long long)b->max_search);
	return sample_err(b, b->hdr->sample[i], err);
}

/* Builds samples [i0, i0 + n) of the batch, n <= CACHE_PIN_MAX: locates
 * them, pins their blocks with one trip to the cache for all that are
 * cached (the others one by one, decoding), builds, unpins. *ret_done:
 * the samples done; with skip, the chunk stops after one that fails
 * (noted, *ret_failed set) so that its replacement, built next, goes in
 * order (variable fields are laid out in order) with one pin of its own. */
static int chunk_build(const struct bld_batch *b, struct pool_worker *w,
		       const struct aug_img *ai, struct cache_worker *cw, uint32_t i0, uint32_t n,
		       uint64_t *cursor, bool *padded, uint32_t *ret_done, bool *ret_failed,
		       struct feed_err *err)
{
	uint64_t block[CACHE_PIN_MAX], idx[CACHE_PIN_MAX];
	uint32_t rec[CACHE_PIN_MAX];
	const struct fmt_block *blk[CACHE_PIN_MAX];
	struct cache_entry *ent[CACHE_PIN_MAX];
	int rc = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct fmt_loc loc;
		idx[k] = ord_sample(b->ord, b->ord_batch, i0 + k);
		*padded |= ord_padding(b->ord, b->ord_batch, i0 + k);
		b->hdr->sample[i0 + k] = idx[k];
		fmt_dataset_locate(b->ds, idx[k], &loc);
		block[k] = loc.block;
		rec[k] = loc.record;
	}
	if (cache_pin_many(b->cache, b->ds, block, n, blk, ent) < n) {
		uint64_t miss[CACHE_PIN_MAX];
		size_t nmiss = 0;
		for (uint32_t k = 0; k < n; k++)
			if (!ent[k])
				miss[nmiss++] = block[k];
		/* a remote dataset fetches them together; a directory: nothing */
		fmt_dataset_prefetch(b->ds, miss, nmiss);
		for (uint32_t k = 0; k < n; k++) {
			if (ent[k])
				continue;
			rc = cache_get(b->cache, b->ds, block[k], cw, &blk[k], &ent[k], err);
			if (rc < 0) {
				feed_err_prefix(err, "sample %llu", (unsigned long long)idx[k]);
				goto out;
			}
		}
	}
	*ret_done = n;
	for (uint32_t k = 0; k < n && rc == 0; k++) {
		rc = sample_build(b, ai, w->scratch, blk[k], rec[k], idx[k], i0 + k, cursor, err);
		if (rc < 0)
			sample_err(b, idx[k], err);
		if (rc < 0 && b->on_error == BLD_ON_ERROR_SKIP && sample_bad(rc)) {
			if (b->bad->n < FEED_SHM_FAILED_MAX) /* bad_note counts it */
				feed_shm_failed(b->hdr, b->lay->batch)[b->bad->n] = idx[k];
			bad_note(b, i0 + k, err);
			*err = (struct feed_err){0};
			*ret_failed = true;
			*ret_done = k + 1;
			rc = 0;
			break;
		}
		pool_yield(w);  /* another user's light batch need not wait for ours */
	}
out:
	cache_put_many(b->cache, ent, n);
	return rc;
}

int bld_build(const struct bld_batch *b, struct pool_worker *w, uint64_t *ret_bytes,
	      struct feed_err *err)
{
	assert_worker();
	const struct fmt_info *in = fmt_dataset_info(b->ds);
	uint64_t cursor[FMT_MAX_FIELDS] = {0};
	bool padded = false;
	int rc = 0;

	if (worker_reserve(&w->comp, &w->comp_cap, in->max_block_comp) < 0 ||
	    worker_reserve(&w->scratch, &w->scratch_cap, pipe_scratch_bytes(b->plan) + 64) < 0)
		return feed_err_set(err, -ENOMEM, "worker %u: out of memory", w->index);
	struct aug_img ai = {0};
	if ((rc = worker_decoders(w, b->plan, &ai, err)) < 0)
		return rc;
	struct cache_worker cw = {.dec = w->dec, .comp = w->comp, .comp_cap = w->comp_cap};
	assert(b->on_error != BLD_ON_ERROR_SKIP || b->bad);
	if (b->bad) {
		b->bad->n = 0;
		b->bad->what[0] = '\0';
		memset(feed_shm_replaced(b->hdr, b->lay->batch), 0,
		       8 * FEED_SHM_REPLACED_WORDS(b->lay->batch));
	}
	for (uint32_t i0 = 0; i0 < b->nsamples && rc == 0;) {
		uint32_t n = b->nsamples - i0 < CACHE_PIN_MAX ? b->nsamples - i0 : CACHE_PIN_MAX;
		uint32_t done = 0;
		bool failed = false;
		rc = chunk_build(b, w, &ai, &cw, i0, n, cursor, &padded, &done, &failed, err);
		i0 += done;
		/* after the chunk's pins are dropped: a replacement pins one block */
		if (rc == 0 && failed)
			rc = sample_replace(b, w, &ai, &cw, i0 - 1,
					    ord_global_position(b->ord, b->ord_batch, i0 - 1), cursor,
					    err);
	}
	if (rc == 0)
		*ret_bytes = header_fill(b, cursor, padded, b->bad && b->bad->n);
	return rc;
}
