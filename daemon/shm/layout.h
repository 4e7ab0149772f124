/*
 * layout.h: where everything of a stream lives in its three regions
 * (proto/feed_shm.h): the control region (header, ready ring, one slot
 * header per slot), the data region (the slots) and the release region.
 *
 * A pure function of the pipeline's output schema, the batch size and the
 * credits: no allocation, no I/O, any thread. The session computes it and
 * checks every per-user limit against layout_shm_bytes() before a single
 * byte of shared memory exists; delivery then creates regions of exactly
 * these sizes.
 */
#ifndef FEEDD_LAYOUT_H
#define FEEDD_LAYOUT_H

#include <stdint.h>

#include "feed_err.h"
#include "feed_shm.h"

struct fmt_schema;

/* The most shared memory one stream may ask for, whatever the limits say:
 * beyond it a request is refused as a mistake, not as a quota. */
#define LAYOUT_MAX_BYTES (1ull << 40)

struct slot_layout {
	uint32_t batch;            /* samples per slot */
	uint32_t nslots;           /* = credits */
	uint32_t nfields;          /* output fields */
	uint32_t ring_cap;         /* ready ring entries, a power of two */
	uint32_t rel_cap;          /* release ring entries, a power of two */
	uint64_t slot_bytes;       /* one data slot, FEED_SHM_ALIGN-aligned */
	uint64_t slot_hdr_bytes;   /* one slot header in the control region */
	uint64_t ring_off;         /* ready ring in the control region */
	uint64_t slots_off;        /* first slot header in the control region */
	uint64_t rel_off;          /* release ring in the release region */
	uint64_t ctl_bytes, data_bytes, rel_bytes; /* region sizes, before page rounding */
	uint64_t field_off[FEED_SHM_MAX_FIELDS]; /* field f's bytes in a data slot */
	uint64_t var_off[FEED_SHM_MAX_FIELDS];   /* variable field f's ends table in a slot header */
};

/* Lays out nslots slots of batch samples of schema out. Returns 0, or
 * -EINVAL naming what cannot be laid out (too many fields, a rank too
 * high) or -EFBIG naming the bytes when the stream would need more than
 * LAYOUT_MAX_BYTES. *ret is written only on success. */
int layout_compute(const struct fmt_schema *out, uint32_t batch, uint32_t nslots,
		   struct slot_layout *ret, struct feed_err *err);

/* A group's layout (DESIGN.md "Sharing between jobs"): members map the
 * data region copy-on-write and drop their private pages of a slot at its
 * release (madvise), so each slot must own whole pages. Rounds slot_bytes
 * up to the page size and recomputes data_bytes. Returns 0 or -EFBIG as
 * layout_compute(). */
int layout_page_slots(struct slot_layout *l, struct feed_err *err);

/* Bytes one member of a group adds: its control and release regions,
 * page-rounded (the data region is the group's, layout_data_bytes()). */
uint64_t layout_member_bytes(const struct slot_layout *l);
uint64_t layout_data_bytes(const struct slot_layout *l);

/* Bytes of shared memory the three regions take, each rounded up to the
 * page size as the regions will be: what per-user limits count. */
uint64_t layout_shm_bytes(const struct slot_layout *l);

/* Offsets of slot i: its bytes in the data region and its header in the
 * control region. */
static inline uint64_t layout_slot_off(const struct slot_layout *l, uint32_t i)
{
	return (uint64_t)i * l->slot_bytes;
}

static inline uint64_t layout_hdr_off(const struct slot_layout *l, uint32_t i)
{
	return l->slots_off + (uint64_t)i * l->slot_hdr_bytes;
}

#endif
