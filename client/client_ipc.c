/*
 * client_ipc.c: a stream's device slots, the consumer side of feedd's
 * CUDA IPC delivery (feed/gpu.h: feed_stream_device and feed_batch_device,
 * whose public halves are the stream's, client_stream_base.c and
 * client_stream.c;
 * daemon/delivery/devslots.h is the producer).
 *
 * Owns, per stream granted device slots (struct cl_ipc): the context the
 * handles are opened in (retained when it is the device's primary one),
 * the mapping of feedd's device slots and their done words (one
 * cuIpcOpenMemHandle), each slot's ready event (cuIpcOpenEventHandle),
 * which CUDA stream each held batch is tied to, a stream of our own and
 * per slot a local event after our last write of its done word. Handles
 * are opened once, at open; closed at close after our writes of the done
 * words have run (feedd frees the memory only after our close).
 *
 * The done protocol (devslots.h is feedd's side): at feed_release of the
 * batch of generation g in slot i, g goes into done word i on the device
 * (cuStreamWriteValue32): on the stream the batch was tied to, behind the
 * work the caller enqueued there; a batch never tied, on our own stream
 * behind our last write of that word (wrote[i]), so a slot's words land
 * in order (a later generation landing first would let feedd rewrite the
 * slot under work still reading it). feedd waits on the device until the
 * word reaches g (cyclic >=) before it rewrites slot i.
 *
 * The host slot goes back later than the word is written: feedd's
 * conversion of a batch reads the slot's staging area on the device, and
 * feedd rebuilds the host slot as soon as it comes back (its copy stream
 * then overwrites that staging area, never waiting for the convert
 * stream). That conversion may not have run when the caller releases the
 * batch (it waits on the device for the done word of the slot's previous
 * batch, behind the caller's own work), so feed_release() gives the host
 * slot back only once ready[i] of that batch has completed; until then
 * the batch is deferred here. cl_ipc_poll() checks (cuEventQuery, no
 * wait) at each feed_next(), and a feed_next() with every credit held
 * waits for the oldest, in slices, within its timeout: feedd never waits
 * on the CPU for what a client's work gates, so this wait is the
 * client's, gated by its own streams' work.
 *
 * The layer below the stream (client_ipc.h): a batch is an opaque
 * pointer here, kept and handed back by cl_ipc_poll(); nothing here calls
 * the stream.
 *
 * Threads: cl_ipc_request / cl_ipc_open / cl_ipc_close on the thread
 * opening or closing the stream; cl_ipc_tie (feed_batch_device) and
 * cl_ipc_poll on the thread calling feed_next(); cl_ipc_release from
 * feed_release() on any thread. ipc->mu guards the ties, the slots being
 * released and the kept batches; it is never held across a driver call
 * (the state is read under it, the driver called after, the outcome
 * written under it again; a slot being released is marked so that a
 * second release of the same batch meanwhile is refused). Never prints.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_ipc.h"
#include "cudrv.h"
#include "dtype.h"
#include "feed_lock.h"
#include "feed_shm.h"
#include "feed/gpu.h"
#include "feed/stream.h"

enum { IPC_ABSENT, IPC_IMAGE, IPC_TOKENS, IPC_SAME, IPC_KINDS };

struct ipc_field {
	uint32_t kind;
	int dtype;
	uint64_t off, sample_bytes;
};

struct cl_ipc {
	const struct cudrv *cu;
	CUcontext ctx;
	CUdevice dev;
	bool retained;             /* ctx is the primary context, retained by us */
	int layout;                /* FEED_TO_NCHW / NHWC: the shape of images */
	CUdeviceptr base;          /* feedd's device slots, mapped here */
	uint64_t slot_bytes;
	uint32_t nslots, nfields;
	struct ipc_field field[FEED_SHM_MAX_FIELDS];
	CUdeviceptr words;         /* the done words (uint32 per slot), mapped here */
	CUevent ready[FEED_SHM_MAX_SLOTS];
	CUevent wrote[FEED_SHM_MAX_SLOTS]; /* ours: after our last write of word i */
	CUstream own;              /* ours, non-blocking: the writes of batches never tied */

	pthread_mutex_t mu;        /* the ties, writes and deferred releases below */
	CUstream tie[FEED_SHM_MAX_SLOTS];
	bool tied[FEED_SHM_MAX_SLOTS];
	bool recorded[FEED_SHM_MAX_SLOTS]; /* wrote[i] recorded by us */
	bool releasing[FEED_SHM_MAX_SLOTS]; /* cl_ipc_release of slot i under way */
	/* cl_ipc_poll(all) ran: feedd is gone or the stream closes, so nothing
	 * will convert or rebuild a slot, and a release keeps nothing more
	 * (one racing that poll from another thread would stay kept for good) */
	bool draining;
	/* released by the caller, its conversion (ready[i]) not yet run:
	 * host slot i goes back to feedd once it has (NULL: none) */
	struct feed_batch *deferred[FEED_SHM_MAX_SLOTS];
	/* how many are (written under mu; read without it by cl_ipc_poll's
	 * fast path, relaxed: a stale 0 only delays a look to the next call) */
	_Atomic uint32_t ndeferred;
};

static void ipc_why(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void ipc_why(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, cap, fmt, ap);
	va_end(ap);
}

int cl_ipc_request(struct feed_conn *conn, const struct feed_stream_device *o,
		   Feed__DeviceRequest *dr, uint8_t uuid[16], char *why, size_t cap)
{
	const struct cudrv *cu;

	if (o->dtype < FEED_TO_F32 || o->dtype > FEED_TO_BF16)
		return cl_fail(conn, -EINVAL, "option device.dtype: %d, not FEED_TO_F32, F16 or BF16",
			       o->dtype);
	if (o->layout != FEED_TO_NCHW && o->layout != FEED_TO_NHWC)
		return cl_fail(conn, -EINVAL, "option device.layout: %d, not FEED_TO_NCHW or NHWC",
			       o->layout);
	if (o->nmean > 4)
		return cl_fail(conn, -EINVAL, "option device.nmean: %u, at most 4 (channels)",
			       o->nmean);
	for (uint32_t i = 0; i < o->nmean; i++)
		if (!isfinite(o->mean[i]) || !isfinite(o->std[i]) || o->std[i] == 0.0f)
			return cl_fail(conn, -EINVAL, "option device.mean/std[%u]: %g / %g (finite, "
				       "std not 0)", i, (double)o->mean[i], (double)o->std[i]);
	if (o->device < 0)
		return cl_fail(conn, -EINVAL, "option device.device: %d is no CUDA device",
			       o->device);
	cu = cudrv_get();
	if (!cu->info.usable) {
		ipc_why(why, cap, "this process: %s", cu->info.reason);
		return 0;
	}
	if (!cu->info.ipc) {
		ipc_why(why, cap, "this process: %s", cu->info.ipc_reason);
		return 0;
	}
	if ((uint32_t)o->device >= cu->info.num_devices || o->device >= CUDRV_MAX_DEVICES)
		return cl_fail(conn, -EINVAL, "option device.device: no CUDA device %d (%u found)",
			       o->device, cu->info.num_devices);
	memcpy(uuid, cu->info.devices[o->device].uuid, 16);
	dr->uuid.data = uuid;
	dr->uuid.len = 16;
	dr->dtype = (uint32_t)o->dtype;
	dr->layout = (uint32_t)o->layout;
	dr->n_mean = dr->n_std = o->nmean;
	dr->mean = (float *)o->mean;
	dr->std = (float *)o->std;
	dr->pid = (int32_t)getpid();
	return 1;
}

void cl_ipc_close(struct cl_ipc *ipc)
{
	if (!ipc)
		return;
	const struct cudrv_api *api = &ipc->cu->api;
	CUcontext prev = NULL;
	FEED_CU(api, CtxGetCurrent, &prev);
	if (prev != ipc->ctx)
		FEED_CU(api, CtxSetCurrent, ipc->ctx);
	/* the work that reads the slots, and our writes of the done words
	 * behind it, end before the mapping goes */
	for (uint32_t i = 0; i < ipc->nslots; i++) {
		if (ipc->recorded[i])
			FEED_CU(api, EventSynchronize, ipc->wrote[i]);
		if (ipc->ready[i])
			FEED_CU(api, EventDestroy, ipc->ready[i]);
		if (ipc->wrote[i])
			FEED_CU(api, EventDestroy, ipc->wrote[i]);
	}
	if (ipc->own)
		FEED_CU(api, StreamDestroy, ipc->own);
	if (ipc->base)
		FEED_CU(api, IpcCloseMemHandle, ipc->base);
	if (prev != ipc->ctx)
		FEED_CU(api, CtxSetCurrent, prev);
	if (ipc->retained) {
		if (prev == ipc->ctx)
			FEED_CU(api, CtxSetCurrent, NULL);
		FEED_CU(api, DevicePrimaryCtxRelease, ipc->dev);
	}
	pthread_mutex_destroy(&ipc->mu);
	free(ipc);
}

/* The reply's facts, checked: -EPROTO naming what is wrong. */
static int ipc_check(struct feed_conn *conn, const Feed__DeviceSlots *ds, uint32_t nslots,
		     uint32_t nfields, uint32_t batch)
{
	if (ds->mem_handle.len != sizeof(CUipcMemHandle) || ds->n_ready != nslots ||
	    ds->n_fields != nfields || nslots > FEED_SHM_MAX_SLOTS)
		return cl_bad_reply(conn, "device slots: handles or fields do not match the stream");
	for (uint32_t i = 0; i < nslots; i++)
		if (ds->ready[i].len != sizeof(CUipcEventHandle))
			return cl_bad_reply(conn, "device slots: an event handle of the wrong size");
	/* the words after the slots, aligned, in the same allocation */
	if (ds->done_offset % sizeof(uint32_t) || ds->slot_bytes > UINT64_MAX / nslots ||
	    ds->done_offset < ds->slot_bytes * nslots || ds->done_offset > UINT64_MAX / 2)
		return cl_bad_reply(conn, "device slots: done words not after the slots");
	for (uint32_t f = 0; f < nfields; f++) {
		const Feed__DeviceField *df = ds->fields[f];
		if (df->kind >= IPC_KINDS || (df->kind != IPC_ABSENT &&
					     (feed_dtype_size(df->dtype) == 0 ||
					      df->sample_bytes > ds->slot_bytes / batch ||
					      df->offset > ds->slot_bytes - df->sample_bytes * batch)))
			return cl_bad_reply(conn, "device slots: a field out of its slot");
	}
	return 0;
}

/* A cl_ipc for ds's slots and fields, holding nothing on the device yet;
 * NULL when out of memory. */
static struct cl_ipc *ipc_new(const struct cudrv *cu, const struct feed_stream_device *o,
			      const Feed__DeviceSlots *ds, uint32_t nslots, uint32_t nfields)
{
	struct cl_ipc *ipc = calloc(1, sizeof(*ipc));

	if (!ipc)
		return NULL;
	ipc->cu = cu;
	ipc->layout = o->layout;
	ipc->slot_bytes = ds->slot_bytes;
	ipc->nslots = nslots;
	ipc->nfields = nfields;
	pthread_mutex_init(&ipc->mu, NULL);
	for (uint32_t f = 0; f < nfields; f++)
		ipc->field[f] = (struct ipc_field){ds->fields[f]->kind, ds->fields[f]->dtype,
						   ds->fields[f]->offset, ds->fields[f]->sample_bytes};
	return ipc;
}

/* Makes device's context current: cur (the caller's) if it is that
 * device's, else the device's primary context, retained. CUDA_SUCCESS, or
 * the failing call's error with *ret_what naming it. */
static CUresult ipc_attach(struct cl_ipc *ipc, int device, CUcontext cur, const char **ret_what)
{
	const struct cudrv_api *api = &ipc->cu->api;
	CUdevice cur_dev;
	CUresult e;

	*ret_what = "cuDeviceGet";
	if ((e = FEED_CU(api, DeviceGet, &ipc->dev, device)) != CUDA_SUCCESS)
		return e;
	if (cur && FEED_CU(api, CtxGetDevice, &cur_dev) == CUDA_SUCCESS && cur_dev == ipc->dev) {
		ipc->ctx = cur;
		return CUDA_SUCCESS;
	}
	*ret_what = "cuDevicePrimaryCtxRetain";
	if ((e = FEED_CU(api, DevicePrimaryCtxRetain, &ipc->ctx, ipc->dev)) != CUDA_SUCCESS)
		return e;
	ipc->retained = true;
	*ret_what = "cuCtxSetCurrent";
	return FEED_CU(api, CtxSetCurrent, ipc->ctx);
}

/* On the current context: maps ds's device memory, opens each slot's
 * ready event, makes its wrote event and our own stream. CUDA_SUCCESS, or
 * the failing call's error with *ret_what naming it (what was made stays
 * in ipc, for cl_ipc_close). */
static CUresult ipc_map(struct cl_ipc *ipc, const Feed__DeviceSlots *ds, const char **ret_what)
{
	const struct cudrv_api *api = &ipc->cu->api;
	CUipcMemHandle mh;
	CUresult e;

	memcpy(&mh, ds->mem_handle.data, sizeof(mh));
	*ret_what = "cuIpcOpenMemHandle";
	if ((e = FEED_CU(api, IpcOpenMemHandle, &ipc->base, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) !=
	    CUDA_SUCCESS) {
		ipc->base = 0;
		return e;
	}
	ipc->words = ipc->base + ds->done_offset;
	for (uint32_t i = 0; i < ipc->nslots; i++) {
		CUipcEventHandle h;
		memcpy(&h, ds->ready[i].data, sizeof(h));
		*ret_what = "cuIpcOpenEventHandle";
		if ((e = FEED_CU(api, IpcOpenEventHandle, &ipc->ready[i], h)) != CUDA_SUCCESS) {
			ipc->ready[i] = NULL;
			return e;
		}
		*ret_what = "cuEventCreate";
		if ((e = FEED_CU(api, EventCreate, &ipc->wrote[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			ipc->wrote[i] = NULL;
			return e;
		}
	}
	*ret_what = "cuStreamCreate";
	if ((e = FEED_CU(api, StreamCreate, &ipc->own, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
		ipc->own = NULL;
	return e;
}

int cl_ipc_open(struct feed_conn *conn, const struct feed_stream_device *o,
		const Feed__DeviceSlots *ds, uint32_t nslots, uint32_t nfields, uint32_t batch,
		struct cl_ipc **ret, char *why, size_t cap)
{
	const struct cudrv *cu = cudrv_get();
	struct cl_ipc *ipc;
	CUcontext cur = NULL;
	char name[96];
	const char *what;
	CUresult e;
	int r;

	*ret = NULL;
	if (ds->done_offset == 0) { /* a feedd from before the done words */
		ipc_why(why, cap, "feedd gives no done words (an older feedd): host slots");
		return 0;
	}
	if ((r = ipc_check(conn, ds, nslots, nfields, batch)) < 0)
		return r;
	if (!(ipc = ipc_new(cu, o, ds, nslots, nfields)))
		return cl_fail(conn, -ENOMEM, "out of memory for device slots");
	/* the caller's context, given back as it was whatever happens */
	if (FEED_CU(&cu->api, CtxGetCurrent, &cur) != CUDA_SUCCESS)
		cur = NULL;
	if ((e = ipc_attach(ipc, o->device, cur, &what)) != CUDA_SUCCESS ||
	    (e = ipc_map(ipc, ds, &what)) != CUDA_SUCCESS) {
		/* not this stream's error: it goes on with host slots, saying why */
		ipc_why(why, cap, "this process: %s failed: %s", what,
			cudrv_errname(cu, e, name, sizeof(name)));
		cl_ipc_close(ipc);
		FEED_CU(&cu->api, CtxSetCurrent, cur);
		return 0;
	}
	if (cur != ipc->ctx)
		FEED_CU(&cu->api, CtxSetCurrent, cur);
	*ret = ipc;
	return 0;
}

/* A thread with no current context gets the stream's (the legacy default
 * stream, NULL, means the current context's). */
static void ipc_ctx(const struct cl_ipc *ipc)
{
	CUcontext cur = NULL;
	if (FEED_CU(&ipc->cu->api, CtxGetCurrent, &cur) == CUDA_SUCCESS && !cur)
		FEED_CU(&ipc->cu->api, CtxSetCurrent, ipc->ctx);
}

/* Enqueues the write of gen into slot's done word: on tie when tied (and
 * the caller's stream takes it), else on our own stream behind our last
 * write of that word (recorded: there is one). The stream it went on, or
 * NULL (a failure: feedd writes it when we go). No lock held. */
static CUstream ipc_write_word(struct cl_ipc *ipc, uint32_t slot, uint32_t gen, CUstream tie,
			       bool recorded)
{
	const struct cudrv_api *api = &ipc->cu->api;
	CUdeviceptr word = ipc->words + sizeof(uint32_t) * slot;

	if (tie && FEED_CU(api, StreamWriteValue32, tie, word, gen,
			   CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS)
		return tie;
	if ((!recorded || FEED_CU(api, StreamWaitEvent, ipc->own, ipc->wrote[slot], 0) ==
				  CUDA_SUCCESS) &&
	    FEED_CU(api, StreamWriteValue32, ipc->own, word, gen, CU_STREAM_WRITE_VALUE_DEFAULT) ==
		    CUDA_SUCCESS)
		return ipc->own;
	return NULL;
}

int cl_ipc_release(struct cl_ipc *ipc, struct feed_batch *b, uint32_t slot, uint32_t gen)
{
	const struct cudrv_api *api = &ipc->cu->api;
	ipc_ctx(ipc);
	feed_mutex_lock(&ipc->mu);
	/* kept already (its word is written), or a release of it under way */
	if (ipc->deferred[slot] == b || ipc->releasing[slot]) {
		feed_mutex_unlock(&ipc->mu);
		return -EINVAL;
	}
	/* the slot is not given back while a batch of it is kept */
	assert(!ipc->deferred[slot]);
	CUstream tie = ipc->tied[slot] ? ipc->tie[slot] : NULL;
	bool recorded = ipc->recorded[slot];
	ipc->tied[slot] = false;
	ipc->releasing[slot] = true;
	feed_mutex_unlock(&ipc->mu);

	CUstream on = ipc_write_word(ipc, slot, gen, tie, recorded);
	bool wrote = on && FEED_CU(api, EventRecord, ipc->wrote[slot], on) == CUDA_SUCCESS;
	/* feedd recorded ready[slot] for this batch before publishing it, and
	 * records it again only after the slot is back: the query is this
	 * batch's conversion (any other answer than "not yet": it ran, or the
	 * context failed and nothing runs any more) */
	bool pending = FEED_CU(api, EventQuery, ipc->ready[slot]) == CUDA_ERROR_NOT_READY;

	feed_mutex_lock(&ipc->mu);
	if (wrote)
		ipc->recorded[slot] = true;
	ipc->releasing[slot] = false;
	pending = pending && !ipc->draining;
	if (pending) {
		ipc->deferred[slot] = b;
		atomic_fetch_add_explicit(&ipc->ndeferred, 1, memory_order_relaxed);
	}
	feed_mutex_unlock(&ipc->mu);
	return pending;
}

uint32_t cl_ipc_poll(struct cl_ipc *ipc, bool all, struct feed_batch **out, uint32_t *ret_left)
{
	const struct cudrv_api *api = &ipc->cu->api;
	uint64_t kept = 0, ran = 0;
	uint32_t n = 0;

	/* feed_next()'s fast path: no lock, no driver call when none is
	 * (all always locks: it sets draining) */
	if (!all && !atomic_load_explicit(&ipc->ndeferred, memory_order_relaxed)) {
		if (ret_left)
			*ret_left = 0;
		return 0;
	}
	feed_mutex_lock(&ipc->mu);
	for (uint32_t i = 0; i < ipc->nslots; i++)
		if (ipc->deferred[i])
			kept |= 1ull << i;
	ipc->draining |= all;
	feed_mutex_unlock(&ipc->mu);
	/* the ready events are fixed at open: queried unlocked */
	ipc_ctx(ipc);
	for (uint32_t i = 0; i < ipc->nslots; i++)
		if ((kept >> i & 1) &&
		    (all || FEED_CU(api, EventQuery, ipc->ready[i]) != CUDA_ERROR_NOT_READY))
			ran |= 1ull << i;
	feed_mutex_lock(&ipc->mu);
	for (uint32_t i = 0; i < ipc->nslots; i++) {
		if (!(ran >> i & 1) || !ipc->deferred[i])
			continue;
		out[n++] = ipc->deferred[i];
		ipc->deferred[i] = NULL;
		atomic_fetch_sub_explicit(&ipc->ndeferred, 1, memory_order_relaxed);
	}
	uint32_t left = atomic_load_explicit(&ipc->ndeferred, memory_order_relaxed);
	feed_mutex_unlock(&ipc->mu);
	if (ret_left)
		*ret_left = left;
	return n;
}

/* The device view of a host view v of field f. */
static void ipc_view(const struct cl_ipc *ipc, uint32_t slot, uint32_t f,
		     const struct feed_view *v, struct feed_view *ret)
{
	const struct ipc_field *df = &ipc->field[f];
	struct feed_view d = {.dtype = df->dtype, .rank = v->rank};
	uint64_t n = v->shape[0];

	d.data = (void *)(uintptr_t)(ipc->base + slot * ipc->slot_bytes + df->off);
	d.bytes = n * df->sample_bytes;
	memcpy(d.shape, v->shape, sizeof(d.shape));
	if (df->kind == IPC_IMAGE) {
		uint64_t h = v->shape[1], w = v->shape[2], c = v->rank == 4 ? v->shape[3] : 1;
		d.rank = 4;
		if (ipc->layout == FEED_TO_NCHW) {
			d.shape[1] = c;
			d.shape[2] = h;
			d.shape[3] = w;
		} else {
			d.shape[3] = c;
		}
	}
	*ret = d;
}

int cl_ipc_tie(struct cl_ipc *ipc, struct feed_conn *conn, const struct feed_batch *b,
	       uint32_t slot, uint32_t field, const char *name, const struct feed_view *v,
	       void *stream, struct feed_view *ret)
{
	if (ipc->field[field].kind == IPC_ABSENT)
		return cl_fail(conn, -EINVAL, "field %u ('%s'): variable-length, on the host only",
			       field, name);
	ipc_ctx(ipc);
	feed_mutex_lock(&ipc->mu);
	bool kept = ipc->deferred[slot] == b || ipc->releasing[slot];
	bool other = ipc->tied[slot] && ipc->tie[slot] != (CUstream)stream;
	feed_mutex_unlock(&ipc->mu);
	if (kept) /* released, its host slot not back yet */
		return cl_fail(conn, -EINVAL, "batch already released");
	if (other)
		return cl_fail(conn, -EINVAL, "batch already tied to another CUDA stream (one "
			       "stream per batch: its release writes the done word there)");
	CUresult e = FEED_CU(&ipc->cu->api, StreamWaitEvent, (CUstream)stream, ipc->ready[slot], 0);
	if (e != CUDA_SUCCESS) {
		char ename[96];
		return cl_fail(conn, -EIO, "cuStreamWaitEvent on the batch's ready event failed: %s",
			       cudrv_errname(ipc->cu, e, ename, sizeof(ename)));
	}
	feed_mutex_lock(&ipc->mu);
	ipc->tie[slot] = (CUstream)stream;
	ipc->tied[slot] = true;
	feed_mutex_unlock(&ipc->mu);
	ipc_view(ipc, slot, field, v, ret);
	return 0;
}
