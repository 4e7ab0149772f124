/*
 * client_ipc.h: a stream's device slots (client_ipc.c), the layer below
 * the stream: it knows batches only as opaque pointers it keeps and gives
 * back, and never calls the stream. The stream (client_stream.h) opens,
 * polls and closes them. Threads: each call says.
 */
#ifndef FEED_CLIENT_IPC_H
#define FEED_CLIENT_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_internal.h"
#include "feed_shm.h"

struct cl_ipc;
struct feed_batch;
struct feed_stream_device;
struct feed_view;
struct Feed__DeviceRequest;
struct Feed__DeviceSlots;

/* Before an open: fills dr (uuid is its storage) from o and returns 1; or
 * returns 0 with why (this process cannot use CUDA IPC: ask nothing);
 * or -EINVAL naming the bad option. */
int cl_ipc_request(struct feed_conn *conn, const struct feed_stream_device *o,
		   struct Feed__DeviceRequest *dr, uint8_t uuid[16], char *why, size_t cap);
/* After a reply granting device slots: opens the handles into *ret; or
 * returns 0 with *ret NULL and why (they would not open here: the stream
 * should not use them); -EPROTO for a reply that does not fit the stream,
 * -ENOMEM. */
int cl_ipc_open(struct feed_conn *conn, const struct feed_stream_device *o,
		const struct Feed__DeviceSlots *ds, uint32_t nslots, uint32_t nfields,
		uint32_t batch, struct cl_ipc **ret, char *why, size_t cap);
/* feed_release() of b, the batch in slot, of generation gen: enqueues the
 * write of gen into the slot's done word on the stream it was tied to
 * (cl_ipc_tie), or, never tied, on the device slots' own stream behind
 * the slot's last write. Then returns 0 when feedd's conversion of b has
 * run (its ready event completed): give the host slot back now; 1 when
 * it has not: b is kept, and cl_ipc_poll() gives it back later, since
 * feedd's rebuild of it would overwrite the staging area the conversion
 * still reads; -EINVAL when b is kept already or being released
 * (released twice). Never waits. Any thread; takes no lock of another. */
int cl_ipc_release(struct cl_ipc *ipc, struct feed_batch *b, uint32_t slot, uint32_t gen);
/* The kept batches whose conversion has run, or every kept one when all
 * (feedd is gone, or the stream closes: nothing will rebuild their
 * slots), into out (FEED_SHM_MAX_SLOTS of them); how many, and in
 * *ret_left (when not NULL) how many are still kept. After a call with
 * all, cl_ipc_release keeps nothing more. Never waits. feed_next()'s
 * thread. */
uint32_t cl_ipc_poll(struct cl_ipc *ipc, bool all, struct feed_batch **out, uint32_t *ret_left);
/* feed_batch_device() of field of b (held, in slot, of the current
 * incarnation), whose host view is v, on the caller's CUDA stream: ties
 * the slot to stream (its release writes the done word there, behind the
 * caller's work) after making stream wait for the slot's ready event,
 * and writes the device view to *ret. -EINVAL (field on the host only,
 * b released, or tied to another stream), -EIO naming the driver's
 * error, with conn's message. feed_next()'s thread. */
int cl_ipc_tie(struct cl_ipc *ipc, struct feed_conn *conn, const struct feed_batch *b,
	       uint32_t slot, uint32_t field, const char *name, const struct feed_view *v,
	       void *stream, struct feed_view *ret);
/* Waits for the work tied to the slots, closes every handle. No batch may
 * be kept (cl_ipc_poll with all first). Accepts NULL. No lock held. */
void cl_ipc_close(struct cl_ipc *ipc);

#endif
