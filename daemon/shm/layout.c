/*
 * layout.c: region layout of a stream (see layout.h). Pure: any thread.
 */
#include "layout.h"

#include <errno.h>
#include <unistd.h>

#include "fmt.h"

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* a * b + c, or UINT64_MAX when it overflows (so it fails the size check). */
static uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t r;

	if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
		return UINT64_MAX;
	return r;
}

static uint64_t align_sat(uint64_t v)
{
	return v > UINT64_MAX - FEED_SHM_ALIGN ? UINT64_MAX : feed_shm_align(v);
}

/* Field offsets in a slot and ends tables in its header; *ret_data and
 * *ret_hdr are the slot's and the header's sizes. */
static int layout_fields(const struct fmt_schema *out, uint32_t batch, struct slot_layout *l,
			 uint64_t *ret_data, uint64_t *ret_hdr, struct feed_err *err)
{
	uint64_t pos = 0, hdr = FEED_SHM_FAILED_END(batch); /* samples, bitmap, failed */

	if (out->nfields > FEED_SHM_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "pipeline output has %u fields, at most %d",
				    out->nfields, FEED_SHM_MAX_FIELDS);
	for (uint32_t f = 0; f < out->nfields; f++) {
		const struct fmt_field *fd = &out->fields[f];
		if (fd->rank + 1 + fd->variable > FEED_SHM_MAX_RANK)
			return feed_err_set(err, -EINVAL, "field '%s': rank %u too high", fd->name,
					    fd->rank);
		l->field_off[f] = pos;
		pos = align_sat(mul_add(batch, fd->max_bytes, pos));
		if (fd->variable) {
			l->var_off[f] = hdr;
			hdr += 8ull * (batch + 1);
		}
	}
	*ret_data = pos ? pos : FEED_SHM_ALIGN;
	*ret_hdr = feed_shm_align(hdr);
	return 0;
}

int layout_compute(const struct fmt_schema *out, uint32_t batch, uint32_t nslots,
		   struct slot_layout *ret, struct feed_err *err)
{
	struct slot_layout l = {.batch = batch, .nslots = nslots, .nfields = out->nfields};
	int rc = layout_fields(out, batch, &l, &l.slot_bytes, &l.slot_hdr_bytes, err);

	if (rc < 0)
		return rc;
	/* Unconsumed ready entries: at most one per held slot plus one epoch
	 * marker per batch, plus the end marker (feed_shm.h). */
	l.ring_cap = pow2_at_least(2 * nslots + 2);
	l.rel_cap = pow2_at_least(2 * nslots);
	l.ring_off = feed_shm_align(sizeof(struct feed_shm_ctl));
	l.slots_off = feed_shm_align(l.ring_off + 8ull * l.ring_cap);
	l.ctl_bytes = l.slots_off + (uint64_t)nslots * l.slot_hdr_bytes;
	l.data_bytes = mul_add(nslots, l.slot_bytes, 0);
	l.rel_off = feed_shm_align(sizeof(struct feed_shm_rel));
	l.rel_bytes = l.rel_off + 8ull * l.rel_cap;
	if (l.data_bytes > LAYOUT_MAX_BYTES || l.slot_bytes > LAYOUT_MAX_BYTES)
		return feed_err_set(err, -EFBIG, "%u slots of %llu bytes exceed the %llu bytes "
				    "one stream may hold", nslots,
				    (unsigned long long)l.slot_bytes,
				    (unsigned long long)LAYOUT_MAX_BYTES);
	*ret = l;
	return 0;
}

static uint64_t page_round(uint64_t v)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	return v ? (v + page - 1) / page * page : page;
}

uint64_t layout_shm_bytes(const struct slot_layout *l)
{
	return page_round(l->ctl_bytes) + page_round(l->data_bytes) + page_round(l->rel_bytes);
}

uint64_t layout_member_bytes(const struct slot_layout *l)
{
	return page_round(l->ctl_bytes) + page_round(l->rel_bytes);
}

uint64_t layout_data_bytes(const struct slot_layout *l)
{
	return page_round(l->data_bytes);
}

int layout_page_slots(struct slot_layout *l, struct feed_err *err)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t sb = l->slot_bytes, data;

	/* l is written only on success: a refused layout stays as it was */
	if (sb > LAYOUT_MAX_BYTES || (sb = (sb + page - 1) / page * page) > LAYOUT_MAX_BYTES ||
	    (data = mul_add(l->nslots, sb, 0)) > LAYOUT_MAX_BYTES)
		return feed_err_set(err, -EFBIG, "%u slots of %llu bytes exceed the %llu bytes "
				    "one stream may hold", l->nslots, (unsigned long long)sb,
				    (unsigned long long)LAYOUT_MAX_BYTES);
	l->slot_bytes = sb;
	l->data_bytes = data;
	return 0;
}
