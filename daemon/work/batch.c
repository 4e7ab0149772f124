/*
 * batch.c: a stream's schedule and batch building (see batch.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "batch.h"
#include "cache.h"
#include "fmt.h"
#include "stream_impl.h"

static int ord_spec_fill(struct stream *s, struct ord_spec *o, struct feed_err *err)
{
	const struct fmt_info *in = fmt_dataset_info(s->ds);

	memset(o, 0, sizeof(*o));
	o->n = in->num_samples;
	o->seed = s->spec.seed;
	snprintf(o->version, sizeof(o->version), "%s", in->version);
	o->mode = (enum ord_mode)s->spec.order;
	o->window = s->spec.window ? s->spec.window : 1;
	o->rank = s->spec.rank;
	o->world = s->spec.world ? s->spec.world : 1;
	o->batch = s->spec.batch;
	o->drop_last = s->spec.drop_last;
	o->eval = s->spec.eval;
	if (o->mode == ORD_BLOCK_WINDOW && !o->eval) {
		s->block_first = malloc((in->num_blocks + 1) * sizeof(uint64_t));
		if (!s->block_first)
			return feed_err_set(err, -ENOMEM, "stream: out of memory for the block table");
		for (uint64_t b = 0; b < in->num_blocks; b++) {
			struct fmt_block_meta m;
			fmt_dataset_block_meta(s->ds, b, &m);
			s->block_first[b] = m.first_sample;
		}
		s->block_first[in->num_blocks] = in->num_samples;
		o->block_first = s->block_first;
		o->nblocks = in->num_blocks;
	}
	return 0;
}

static int epoch_make(struct stream *s, uint64_t epoch, struct feed_err *err)
{
	struct stream_epoch *e = &s->ep[epoch & 1];
	struct ord_spec o;
	int rc;

	if (e->valid)
		ord_epoch_fini(&e->ord);
	e->valid = false;
	if ((rc = ord_spec_fill(s, &o, err)) < 0)
		return rc;
	if (s->spec.at_position && epoch == s->spec.start_epoch)
		rc = ord_epoch_init_at(&e->ord, &o, epoch, s->spec.start_position, err);
	else
		rc = ord_epoch_init(&e->ord, &o, epoch, err);
	if (rc < 0)
		return rc;
	e->valid = true;
	e->epoch = epoch;
	e->inflight = 0;
	return 0;
}

int batch_order_init(struct stream *s, struct feed_err *err)
{
	int rc = epoch_make(s, s->spec.start_epoch, err);

	if (rc < 0)
		return rc;
	uint64_t nb = ord_batches_per_epoch(&s->ep[s->spec.start_epoch & 1].ord);
	if (nb == 0 && s->spec.at_position) {
		/* the token was taken after an epoch's last batch: that epoch's
		 * end comes first (stream_new), then the next epoch, if any */
		s->lead_epoch_end = true;
		s->lead_epoch = s->spec.start_epoch;
		if (s->spec.epochs && s->spec.start_epoch + 1 >= s->spec.epochs) {
			s->lead_stream_end = true;
			s->sched_done = true;
			return 0;
		}
		s->spec.at_position = false;
		s->spec.start_epoch++;
		s->spec.start_batch = 0;
		if ((rc = epoch_make(s, s->spec.start_epoch, err)) < 0)
			return rc;
		nb = ord_batches_per_epoch(&s->ep[s->spec.start_epoch & 1].ord);
	}
	if (s->spec.epochs && s->spec.start_epoch >= s->spec.epochs)
		return feed_err_set(err, -EINVAL, "start epoch %llu is past the %llu epochs asked for",
				    (unsigned long long)s->spec.start_epoch,
				    (unsigned long long)s->spec.epochs);
	if (nb == 0)
		return feed_err_set(err, -EINVAL, "rank %u of %u gets no batch of %u samples in an epoch",
				    s->spec.rank, s->spec.world, s->spec.batch);
	if (s->spec.start_batch >= nb)
		return feed_err_set(err, -EINVAL, "start batch %llu is past the epoch's %llu batches",
				    (unsigned long long)s->spec.start_batch, (unsigned long long)nb);
	s->next_epoch = s->spec.start_epoch;
	s->next_batch = s->spec.start_batch;
	return 0;
}

void batch_order_fini(struct stream *s)
{
	for (int i = 0; i < 2; i++)
		if (s->ep[i].valid)
			ord_epoch_fini(&s->ep[i].ord);
	free(s->block_first);
	s->block_first = NULL;
}

int batch_next_locked(struct stream *s, struct stream_job **ret_job)
{
	struct stream_epoch *e = &s->ep[s->next_epoch & 1];

	if (s->sched_done)
		return -ENODATA;
	if (!e->valid || e->epoch != s->next_epoch) {
		/* the slot of epoch-2 must be drained before reuse */
		if (e->valid && e->inflight > 0)
			return -EAGAIN;
		struct feed_err err = {0};
		int rc = epoch_make(s, s->next_epoch, &err);
		if (rc < 0) {
			stream_fail_locked(s, rc, err.msg);
			return rc;
		}
	}
	uint64_t nb = ord_batches_per_epoch(&e->ord);
	uint32_t slot = s->free_slots[--s->nfree];
	struct stream_job *j = &s->jobs[slot];
	j->epoch = s->next_epoch;
	j->batch = s->next_batch;
	j->ep = &e->ord;
	j->nsamples = ord_batch_size(&e->ord, j->batch);
	j->last_of_epoch = j->batch + 1 == nb;
	j->last_of_stream = j->last_of_epoch && s->spec.epochs && j->epoch + 1 >= s->spec.epochs;
	j->built = false;
	e->inflight++;
	if (j->last_of_stream)
		s->sched_done = true;
	if (j->last_of_epoch) {
		s->next_epoch++;
		s->next_batch = 0;
	} else {
		s->next_batch++;
	}
	*ret_job = j;
	return 0;
}

void batch_job_done(struct stream *s, struct stream_job *j)
{
	struct stream_epoch *e = &s->ep[j->epoch & 1];

	if (e->valid && e->epoch == j->epoch && e->inflight > 0)
		e->inflight--;
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

/* Where field f of sample i goes, and how much room it has. */
static void out_dest(struct stream *s, uint8_t *slot, uint32_t f, uint32_t i, uint64_t *cursor,
		     struct aug_out *o, size_t *len)
{
	const struct fmt_field *fd = &s->plan->out.fields[f];
	uint8_t *base = slot + s->field_off[f];

	o->ret_len = len;
	if (!fd->variable) {
		o->dst = base + (size_t)i * fd->max_bytes;
		o->cap = fd->max_bytes;
	} else {
		o->dst = base + cursor[f];
		o->cap = (size_t)s->spec.batch * fd->max_bytes - cursor[f];
	}
}

/* Writes the slot header's field table once the bytes are in place. */
static void header_fill(struct stream *s, struct stream_job *j, struct feed_shm_slot *h,
			const uint64_t *cursor, bool padded)
{
	const struct fmt_schema *out = &s->plan->out;
	uint64_t slot_base = (uint64_t)j->slot * s->slot_bytes;

	h->nsamples = j->nsamples;
	h->epoch = j->epoch;
	h->index = j->batch;
	h->flags = padded ? FEED_SLOT_PADDED : 0;
	h->position = ord_position_of(j->ep, j->batch);
	h->nfields = out->nfields;
	j->bytes = 0;
	for (uint32_t f = 0; f < out->nfields; f++) {
		const struct fmt_field *fd = &out->fields[f];
		struct feed_shm_field *sf = &h->field[f];
		memset(sf, 0, sizeof(*sf));
		sf->dtype = (uint32_t)fd->dtype;
		sf->rank = fd->rank + 1;
		sf->shape[0] = j->nsamples;
		for (uint32_t d = 0; d < fd->rank; d++)
			sf->shape[d + 1] = fd->shape[d];
		sf->offset = slot_base + s->field_off[f];
		if (fd->variable) {
			sf->bytes = cursor[f];
			sf->var_off = s->slots_off + (uint64_t)j->slot * s->slot_hdr_bytes + s->var_off[f];
			/* the variable axis: shape[1] = 0, element shape after it */
			sf->rank = fd->rank + 2;
			memmove(&sf->shape[2], &sf->shape[1], fd->rank * sizeof(uint64_t));
			sf->shape[1] = 0;
		} else {
			sf->bytes = (uint64_t)j->nsamples * fd->max_bytes;
		}
		j->bytes += sf->bytes;
	}
	h->gen = s->slots[j->slot].gen; /* read under no lock: only we change it while BUILDING */
}

/* Builds sample i of job j into the slot. */
static int sample_build(struct stream *s, struct stream_job *j, struct pool_worker *w,
			const struct fmt_block *blk, uint32_t rec, uint64_t idx, uint32_t i,
			uint64_t *cursor, struct feed_shm_slot *h, struct feed_err *err)
{
	uint32_t nf = s->plan->in.nfields;
	uint8_t *slot = (uint8_t *)s->data.map + (uint64_t)j->slot * s->slot_bytes;
	struct aug_in ain[FMT_MAX_FIELDS];
	struct aug_out aout[FMT_MAX_FIELDS];
	size_t len[FMT_MAX_FIELDS];
	struct aug_ctx ctx = {.seed = s->spec.seed, .epoch = j->epoch, .sample = idx};

	for (uint32_t f = 0; f < nf; f++) {
		ain[f].data = fmt_block_field(blk, f, rec, &ain[f].len);
		out_dest(s, slot, f, i, cursor, &aout[f], &len[f]);
	}
	int rc = aug_apply(s->plan, &ctx, ain, aout, w->scratch, err);
	if (rc < 0)
		return rc;
	for (uint32_t f = 0; f < nf; f++) {
		if (!s->plan->out.fields[f].variable)
			continue;
		uint64_t *ends = (uint64_t *)((uint8_t *)h + s->var_off[f]);
		cursor[f] += len[f];
		ends[0] = 0;
		ends[i + 1] = cursor[f];
	}
	return 0;
}

/* Builds samples [i0, i0 + n) of the batch, n <= CACHE_PIN_MAX: locates
 * them, pins their blocks with one trip to the cache for all that are
 * cached (the others one by one, decoding), builds, unpins. */
static int chunk_build(struct stream *s, struct stream_job *j, struct pool_worker *w,
		       struct cache_worker *cw, uint32_t i0, uint32_t n, uint64_t *cursor,
		       struct feed_shm_slot *h, bool *padded, struct feed_err *err)
{
	const struct fmt_info *in = fmt_dataset_info(s->ds);
	uint64_t block[CACHE_PIN_MAX], idx[CACHE_PIN_MAX];
	uint32_t rec[CACHE_PIN_MAX];
	const struct fmt_block *blk[CACHE_PIN_MAX];
	struct cache_entry *ent[CACHE_PIN_MAX];
	int rc = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct fmt_loc loc;
		idx[k] = ord_sample(j->ep, j->batch, i0 + k);
		*padded |= ord_global_position(j->ep, j->batch, i0 + k) >= in->num_samples;
		h->sample[i0 + k] = idx[k];
		fmt_dataset_locate(s->ds, idx[k], &loc);
		block[k] = loc.block;
		rec[k] = loc.record;
	}
	if (cache_pin_many(s->cache, s->ds, block, n, blk, ent) < n) {
		for (uint32_t k = 0; k < n; k++) {
			if (ent[k])
				continue;
			rc = cache_get(s->cache, s->ds, block[k], cw, &blk[k], &ent[k], err);
			if (rc < 0) {
				feed_err_prefix(err, "sample %llu", (unsigned long long)idx[k]);
				goto out;
			}
		}
	}
	for (uint32_t k = 0; k < n && rc == 0; k++)
		rc = sample_build(s, j, w, blk[k], rec[k], idx[k], i0 + k, cursor, h, err);
out:
	cache_put_many(s->cache, ent, n);
	return rc;
}

int batch_build(struct stream *s, struct stream_job *j, struct pool_worker *w,
		struct feed_err *err)
{
	const struct fmt_info *in = fmt_dataset_info(s->ds);
	struct feed_shm_slot *h = stream_slot_header(s, j->slot);
	uint64_t cursor[FMT_MAX_FIELDS] = {0};
	bool padded = false;
	int rc = 0;

	if (worker_reserve(&w->comp, &w->comp_cap, in->max_block_comp) < 0 ||
	    worker_reserve(&w->scratch, &w->scratch_cap, pipe_scratch_bytes(s->plan) + 64) < 0)
		return feed_err_set(err, -ENOMEM, "worker %u: out of memory", w->index);
	struct cache_worker cw = {.dec = w->dec, .comp = w->comp, .comp_cap = w->comp_cap};
	for (uint32_t i0 = 0; i0 < j->nsamples && rc == 0; i0 += CACHE_PIN_MAX) {
		uint32_t n = j->nsamples - i0 < CACHE_PIN_MAX ? j->nsamples - i0 : CACHE_PIN_MAX;
		rc = chunk_build(s, j, w, &cw, i0, n, cursor, h, &padded, err);
	}
	if (rc == 0)
		header_fill(s, j, h, cursor, padded);
	return rc;
}
