/*
 * client_describe.c: feed_next_desc, feed_next() for language bindings:
 * the reader-wait note of the caller's previous next(), the next batch,
 * and everything needed to hand it out (position, size, flags, where each
 * field lies) written into caller-owned memory, in one call. A binding
 * that pays per foreign call (Python's ctypes: microseconds each, tens
 * with cold caches after a training step) makes one instead of ten.
 *
 * Threads: the thread that calls feed_next() on the stream. Takes no lock
 * and allocates nothing beyond what feed_next() does. Must never: write
 * the caller's memory unless a batch is delivered.
 */
#include <errno.h>

#include "client_stream.h"

FEED_API int feed_next_desc(struct feed_stream *st, int timeout_ms, uint64_t note_ns,
			    struct feed_batch **ret, struct feed_batch_desc *ret_desc,
			    struct feed_field_span *ret_fields, uint32_t nfields)
{
	struct feed_batch *b;

	if (!st)
		return -EINVAL;
	if (!ret || !ret_desc || (nfields && !ret_fields))
		return cl_fail(st->conn, -EINVAL, "feed_next_desc: NULL %s",
			       !ret ? "ret" : !ret_desc ? "ret_desc" : "ret_fields with fields asked");
	if (nfields > st->nfields)
		return cl_fail(st->conn, -EINVAL, "feed_next_desc: %u fields asked, the stream has %u",
			       nfields, st->nfields);
	if (note_ns) /* the previous next()'s time: counted before this one's waits */
		(void)feed_stream_note_next(st, note_ns);
	int r = feed_next(st, timeout_ms, &b);
	if (r != 0)
		return r;
	*ret_desc = (struct feed_batch_desc){
		.epoch = b->epoch,
		.index = b->index,
		.nsamples = b->nsamples,
		.slot = b->slot,
		.padded = (b->flags & FEED_SLOT_PADDED) != 0,
		.nreplaced = b->nreplaced,
		.ndropped = b->ndropped,
	};
	for (uint32_t f = 0; f < nfields; f++) /* checked at delivery (st_field) */
		ret_fields[f] = (struct feed_field_span){.data = (uintptr_t)b->view[f].data,
							 .bytes = b->view[f].bytes};
	*ret = b;
	return 0;
}
