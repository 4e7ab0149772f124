/*
 * devslots.c: device slots and CUDA IPC (devslots.h).
 *
 * Owns, per daemon (struct dsl_gpu), the loaded driver's facts and, per
 * device that can serve CUDA IPC, its retained primary context and the
 * embedded kernels loaded there (made once, by the first stream that asks
 * for device slots on that device, on a worker with no lock held: making
 * a context takes seconds and memory on the card, so nothing is made for
 * a GPU no stream uses), and the streams' slots whose device work
 * had not finished when they were freed (the graveyard, reaped later);
 * per stream (struct dsl), one device allocation holding every device
 * slot and, after them, one 32-bit done word per slot (one IPC memory
 * handle), a staging area per slot, three CUDA streams and per slot two
 * events:
 *   - copy stream: only the copies of host slot i into staging i, then
 *     copied[i] (feedd's own). It never waits for anything a client does,
 *     so a worker about to rebuild host slot i may wait for copied[i] on
 *     the CPU: that wait is bounded by a DMA. It does not wait for the
 *     convert stream either, so the next copy into staging i must not
 *     start before the last conversion read it: the client returns host
 *     slot i only after ready[i] of its batch completed (client_ipc.c).
 *   - convert stream: waits for copied[i] and until done word i reaches
 *     the generation of the slot's last batch (cuStreamWaitValue32, cyclic
 *     >=; the client writes it on the device when it releases that batch),
 *     then converts (or copies) staging i into device slot i and records
 *     ready[i] (interprocess: the client's stream waits for it).
 *   - rescue stream (non-blocking, nothing else on it): when the client
 *     leaves (dsl_abandon), feedd writes every done word itself, so a
 *     client that died with its writes behind work that never runs leaves
 *     nothing stuck: the convert stream drains and dsl_free() frees.
 * Why words, not an interprocess done event: an event recorded by a
 * process that dies before the record runs never completes, and nobody
 * else may record it; a word feedd can always write itself. A stream of
 * feedd's stuck for ever would also stall every implicitly synchronising
 * driver call of the daemon (cuMemHostUnregister, cuMemFree).
 *
 * Why cyclic >= and the batch's generation: generations of a slot only
 * grow (uint32, wrapping: the comparison is cyclic, and a slot's word is
 * never more than a few generations behind), so one write covers every
 * earlier wait, the rescue can write the newest value for each slot
 * without knowing which waits are queued, and a client's late write of an
 * older generation cannot undo a wait that has been satisfied.
 * The graveyard stays as a safety net: dsl_free() still never waits on
 * the CPU for the convert stream.
 *
 * Implicitly synchronising calls (cuMemHostRegister, cuMemHostUnregister,
 * cuMemFree) wait for every stream's queued work in the context, some of
 * it behind a client's done word: they run on the GPU keeper (keeper.h)
 * alone, never on a worker or the loop, so one client's queue delays
 * nobody's batches.
 *
 * Locks: grave_mu for list work, dev_mu for the wait on a context being
 * made; no lock is held across a driver call (every one goes through FEED_CU, which asserts it in
 * FEED_LOCK_CHECKS builds). The registration of a data region for DMA is
 * claimed with an atomic, and made by the worker that claimed it.
 */
#include "devslots.h"
#include "delivery.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "feed_lock.h"
#include "cudrv.h"
#include "dtype.h"
#include "builder.h"
#include "fmt.h"
#include "hybrid.h"
#include "keeper.h"
#include "layout.h"
#include "region.h"

#define DSL_ALIGN 256u   /* device field offsets: any kernel's vector loads */

/* A device's context and kernels: made once, on demand, by the first
 * stream that asks for device slots there (dsl_make on a worker, no lock
 * held), never at start: a node whose jobs never ask for CUDA IPC keeps
 * every GPU free of feedd, and a GPU in EXCLUSIVE_PROCESS mode stays the
 * trainer's. state goes UNTRIED -> MAKING (one worker, by compare and
 * swap) -> MADE; the other fields are written by that worker before MADE
 * (release) and read only after seeing MADE (acquire), immutable then. */
enum dsl_dev_state { DSL_DEV_UNTRIED, DSL_DEV_MAKING, DSL_DEV_MADE };

struct dsl_dev {
	_Atomic int state;         /* enum dsl_dev_state */
	CUresult err;              /* what failed, or CUDA_SUCCESS */
	const char *what;          /* the call that failed */
	CUcontext ctx;             /* retained primary context */
	struct cudrv_kernels k;
	_Atomic uint64_t bytes;    /* device memory the streams' slots hold here */
};

struct dsl_gpu {
	const struct cudrv *cu;
	char why[320];             /* "" when CUDA IPC can be served */
	uint64_t allowed;          /* bit i: `gpus:` lets feedd use device i */
	struct dsl_dev dev[CUDRV_MAX_DEVICES];
	/* workers that find a device's context being made wait here for it;
	 * held only around the state check and the wait, never across a
	 * driver call */
	pthread_mutex_t dev_mu;
	pthread_cond_t dev_cv;
	/* the graveyard: list work only under it, never a driver call
	 * (dsl_reap queries outside it); only the keeper buries and reaps
	 * while it runs */
	pthread_mutex_t grave_mu;
	struct dsl *graveyard;     /* freed, device work not finished */
	/* the thread of the implicitly synchronising calls: registrations,
	 * unregistrations, frees (keeper.h) */
	struct gk keeper;
};

enum dsl_kind { DSL_ABSENT, DSL_IMAGE, DSL_TOKENS, DSL_SAME };

struct dsl_field {
	enum dsl_kind kind;
	int dtype;                 /* enum feed_dtype of the device copy */
	uint64_t off;              /* in a device slot */
	uint64_t sample_bytes;     /* device bytes per sample */
	uint64_t stage_off;        /* in a slot's staging area */
	struct feed_convert cv;    /* images */
	size_t elem_size;          /* tokens: 2 or 4 */
};

struct dsl {
	struct dsl_gpu *g;
	const struct cudrv *cu;
	struct dsl_dev *dev;       /* set by dsl_make */
	int ord;                   /* the device's ordinal here */
	uint32_t nslots, nfields;
	struct dsl_field field[FEED_SHM_MAX_FIELDS];
	uint64_t slot_bytes, stage_bytes; /* one device slot, one staging area */
	uint64_t done_off;         /* the done words, from slots (after the last slot) */
	CUdeviceptr slots, stage;         /* nslots of each (slots: then the words) */
	CUstream copy, conv, rescue;
	CUevent ready[DSL_MAX_SLOTS], copied[DSL_MAX_SLOTS];
	CUevent fin;               /* recorded on conv by dsl_free */
	bool recorded[DSL_MAX_SLOTS]; /* copied[i] was recorded (slot i's worker) */
	bool converted[DSL_MAX_SLOTS]; /* slot i holds a batch (slot i's worker) */
	/* the generation of the batch last converted into slot i: written by
	 * slot i's worker, read by dsl_abandon (seq_cst: see dsl_abandon) */
	_Atomic uint32_t last[DSL_MAX_SLOTS];
	_Atomic bool made;         /* dsl_make finished: the rescue stream exists */
	_Atomic bool abandoned;    /* the client left: no more waits for it */
	struct dsl *next_grave;

	/* the registration of the host region for DMA, once: 0 not tried, 1
	 * being made (by the worker that claimed it: no lock is held across
	 * cuMemHostRegister), 2 made or refused (registered says which) */
	_Atomic int reg_state;
	void *registered;          /* written before reg_state 2: the region, 1 (refused), NULL */
	uint8_t *reg_data;         /* what the keeper registers (set by the claim) */
	uint64_t reg_bytes;
	struct gk_job reg_job;     /* the keeper's registration of it */
	struct gk_job free_job;    /* the keeper's dsl_free */
	struct hyb_stream hyb;     /* hybrid JPEG decode of its images (hybrid.h) */
	struct region data;        /* the host region, given by dsl_free: unmapped
				    * by the keeper after its unregistration */

	/* the reply's storage */
	CUipcMemHandle mem_h;
	CUipcEventHandle ready_h[DSL_MAX_SLOTS];
	ProtobufCBinaryData ready_pb[DSL_MAX_SLOTS];
	Feed__DeviceField field_pb[FEED_SHM_MAX_FIELDS];
	Feed__DeviceField *field_pp[FEED_SHM_MAX_FIELDS];
};

static uint64_t dsl_align(uint64_t x)
{
	return (x + DSL_ALIGN - 1) / DSL_ALIGN * DSL_ALIGN;
}

static int dsl_fail_cu(const struct cudrv *cu, struct feed_err *err, CUresult e, const char *what)
{
	char name[96];
	return feed_err_set(err, -EIO, "device slots: %s failed: %s", what,
			    cudrv_errname(cu, e, name, sizeof(name)));
}

/* ------------------------------------------------------------------ */
/* The daemon's GPU                                                    */

/* Device ordinal's primary context and kernels (driver calls that take
 * long: a worker, no lock held; the one that moved the device to MAKING).
 * What failed is kept for every stream that asks for the device. */
static void dsl_dev_make(struct dsl_gpu *g, int ordinal)
{
	const struct cudrv_api *api = &g->cu->api;
	struct dsl_dev *d = &g->dev[ordinal];
	CUdevice dev;

	d->what = "cuDeviceGet";
	if ((d->err = FEED_CU(api, DeviceGet, &dev, ordinal)) != CUDA_SUCCESS)
		return;
	d->what = "cuDevicePrimaryCtxRetain";
	if ((d->err = FEED_CU(api, DevicePrimaryCtxRetain, &d->ctx, dev)) != CUDA_SUCCESS) {
		d->ctx = NULL;
		return;
	}
	d->what = "cuCtxSetCurrent";
	if ((d->err = FEED_CU(api, CtxSetCurrent, d->ctx)) != CUDA_SUCCESS)
		return;
	d->what = "loading the embedded kernels";
	feed_assert_unlocked("cuModuleLoadData");
	d->err = cudrv_kernels_load(g->cu, &d->k);
	(void)FEED_CU(api, CtxSetCurrent, NULL);
}

static void dsl_reap(struct dsl_gpu *g);

/* The keeper's tick while the graveyard holds anything: frees what has
 * finished; stops ticking when nothing is left (only the keeper buries,
 * so nothing is buried between the look and the stop). */
static void dsl_tick(void *arg)
{
	struct dsl_gpu *g = arg;
	dsl_reap(g);
	feed_mutex_lock(&g->grave_mu);
	bool empty = !g->graveyard;
	feed_mutex_unlock(&g->grave_mu);
	if (empty)
		gk_ticking(&g->keeper, false);
}

int dsl_gpu_new(const struct dsl_gpu_opts *opts, struct dsl_gpu **ret)
{
	struct dsl_gpu *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cu = cudrv_get();
	g->allowed = opts && opts->has_gpus ? opts->gpus : ~(uint64_t)0;
	pthread_mutex_init(&g->grave_mu, NULL);
	pthread_mutex_init(&g->dev_mu, NULL);
	pthread_cond_init(&g->dev_cv, NULL);
	const struct cudrv_info *in = &g->cu->info;
	if (!in->usable)
		snprintf(g->why, sizeof(g->why), "feedd has no usable GPU: %s", in->reason);
	else if (!in->ipc)
		snprintf(g->why, sizeof(g->why), "feedd cannot use CUDA IPC: %s", in->ipc_reason);
	struct feed_err e = {0};
	if (!g->why[0] && gk_start(&g->keeper, dsl_tick, g, &e) < 0)
		snprintf(g->why, sizeof(g->why), "%.300s", e.msg);
	/* no context here: each is made by the first stream that needs it */
	*ret = g;
	return 0;
}

static void dsl_undo(struct dsl *s);

void dsl_gpu_free(struct dsl_gpu *g)
{
	if (!g)
		return;
	/* the keeper runs the frees still queued and reaps once more; what
	 * is still unfinished (only where dsl_abandon's writes failed) is
	 * left to the driver's teardown at exit: freeing it could wait */
	gk_stop(&g->keeper);
	dsl_reap(g);
	for (int i = 0; i < CUDRV_MAX_DEVICES; i++) {
		struct dsl_dev *d = &g->dev[i];
		if (atomic_load_explicit(&d->state, memory_order_acquire) != DSL_DEV_MADE ||
		    !d->ctx)
			continue;
		CUdevice dev;
		const struct cudrv_api *api = &g->cu->api;
		(void)FEED_CU(api, CtxSetCurrent, d->ctx);
		feed_assert_unlocked("cuModuleUnload");
		cudrv_kernels_unload(g->cu, &d->k);
		(void)FEED_CU(api, CtxSetCurrent, NULL);
		if (FEED_CU(api, DeviceGet, &dev, i) == CUDA_SUCCESS)
			(void)FEED_CU(api, DevicePrimaryCtxRelease, dev);
	}
	pthread_mutex_destroy(&g->grave_mu);
	pthread_mutex_destroy(&g->dev_mu);
	pthread_cond_destroy(&g->dev_cv);
	free(g);
}

void dsl_gpu_describe(const struct dsl_gpu *g, char *buf, size_t cap)
{
	const struct cudrv_info *in = &g->cu->info;
	if (g->why[0]) {
		snprintf(buf, cap, "CUDA IPC off (%s): streams get host slots", g->why);
		return;
	}
	int n = snprintf(buf, cap, "CUDA IPC on: driver %d.%d, %u device%s", in->driver_version / 1000,
			 in->driver_version % 1000 / 10, in->num_devices,
			 in->num_devices == 1 ? "" : "s");
	for (uint32_t i = 0; i < in->num_devices && i < CUDRV_MAX_DEVICES && n > 0 &&
			     (size_t)n < cap; i++)
		n += snprintf(buf + n, cap - (size_t)n, "%s %u: %s (%d.%d)%s", i ? ";" : ":", i,
			      in->devices[i].name, in->devices[i].cc_major, in->devices[i].cc_minor,
			      in->devices[i].ipc ? "" : " no IPC");
}

int dsl_gpu_devices(const struct dsl_gpu *g, struct dsl_dev_info *ret, int cap)
{
	if (!g)
		return 0;
	const struct cudrv_info *in = &g->cu->info;
	int n = 0;
	for (uint32_t i = 0; i < in->num_devices && i < CUDRV_MAX_DEVICES && n < cap; i++, n++) {
		const struct dsl_dev *d = &g->dev[i];
		/* acquire: MADE publishes err */
		bool made = atomic_load_explicit(&d->state, memory_order_acquire) == DSL_DEV_MADE;
		ret[n] = (struct dsl_dev_info){
			.ordinal = (int)i,
			.name = in->devices[i].name,
			.allowed = i < 64 && (g->allowed >> i & 1),
			.context = made && d->err == CUDA_SUCCESS,
			.failed = made && d->err != CUDA_SUCCESS,
			.slot_bytes = atomic_load_explicit(&d->bytes, memory_order_relaxed),
		};
	}
	return n;
}

/* Device ordinal's context and kernels, made now by the first caller
 * (no lock held across the driver calls); a caller that finds them being
 * made waits for that maker, once. Worker. */
static int dsl_dev_get(struct dsl_gpu *g, int ordinal, struct dsl_dev **ret, struct feed_err *err)
{
	struct dsl_dev *d = &g->dev[ordinal];
	int st = DSL_DEV_UNTRIED;

	/* acquire on success and failure: MADE publishes the fields */
	if (atomic_compare_exchange_strong_explicit(&d->state, &st, DSL_DEV_MAKING,
						    memory_order_acquire, memory_order_acquire)) {
		dsl_dev_make(g, ordinal);
		feed_mutex_lock(&g->dev_mu);
		/* release: the fields above before MADE */
		atomic_store_explicit(&d->state, DSL_DEV_MADE, memory_order_release);
		pthread_cond_broadcast(&g->dev_cv);
		feed_mutex_unlock(&g->dev_mu);
	} else if (st == DSL_DEV_MAKING) {
		feed_mutex_lock(&g->dev_mu);
		while (atomic_load_explicit(&d->state, memory_order_acquire) != DSL_DEV_MADE)
			pthread_cond_wait(&g->dev_cv, &g->dev_mu);
		feed_mutex_unlock(&g->dev_mu);
	}
	if (d->err != CUDA_SUCCESS) {
		char name[96];
		return feed_err_set(err, -ENODEV, "device %d: %s failed: %s", ordinal, d->what,
				    cudrv_errname(g->cu, d->err, name, sizeof(name)));
	}
	*ret = d;
	return 0;
}

/* ------------------------------------------------------------------ */
/* A stream's slots                                                    */

/* What field f becomes on the device. */
static int dsl_plan_field(const struct dsl_request *req, const struct fmt_field *f,
			  struct dsl_field *ret, struct feed_err *err)
{
	struct dsl_field o = {.kind = DSL_SAME, .dtype = f->dtype};
	if (f->variable) {
		o.kind = DSL_ABSENT;
	} else if (f->dtype == FEED_DTYPE_U8 && (f->rank == 2 || (f->rank == 3 && f->shape[2] <= 4))) {
		uint32_t c = f->rank == 3 ? f->shape[2] : 1;
		float mean[4], std[4];
		for (uint32_t ch = 0; ch < c; ch++) {
			if ((req->nmean > 1 && req->nmean != c) || (req->nstd > 1 && req->nstd != c))
				return feed_err_set(err, -EINVAL, "field '%s': %u channels, but mean has "
						    "%u values and std %u (1 or one per channel)",
						    f->name, c, req->nmean, req->nstd);
			mean[ch] = req->nmean ? req->mean[req->nmean == 1 ? 0 : ch] : 0.0f;
			std[ch] = req->nstd ? req->std[req->nstd == 1 ? 0 : ch] : 1.0f;
		}
		if (feed_convert_init(&o.cv, f->shape[0], f->shape[1], c,
				      (enum feed_convert_dtype)req->dtype,
				      (enum feed_convert_layout)req->layout, mean, std) < 0)
			return feed_err_set(err, -EINVAL, "field '%s': mean/std give outputs that are "
					    "not finite (a std of 0?)", f->name);
		o.kind = DSL_IMAGE;
		o.dtype = req->dtype == FEED_CONVERT_F32 ? FEED_DTYPE_F32 :
			  req->dtype == FEED_CONVERT_F16 ? FEED_DTYPE_F16 : FEED_DTYPE_BF16;
		o.sample_bytes = feed_convert_sample_bytes(&o.cv);
	} else if (f->dtype == FEED_DTYPE_U16 || f->dtype == FEED_DTYPE_U32) {
		o.kind = DSL_TOKENS;
		o.dtype = FEED_DTYPE_I64;
		o.elem_size = feed_dtype_size(f->dtype);
		o.sample_bytes = f->max_bytes / o.elem_size * sizeof(int64_t);
	}
	if (o.kind == DSL_SAME)
		o.sample_bytes = f->max_bytes;
	*ret = o;
	return 0;
}

/* The device's ordinal for the request's UUID, or -ENODEV naming why not. */
static int dsl_device(const struct dsl_gpu *g, const uint8_t uuid[16], struct feed_err *err)
{
	if (g->why[0])
		return feed_err_set(err, -ENODEV, "%s", g->why);
	int ord = cudrv_device_by_uuid(g->cu, uuid);
	if (ord < 0) {
		char hex[33];
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
		return feed_err_set(err, -ENODEV, "feedd does not see the client's GPU (UUID %s) "
				    "among its %u: another node's, or hidden from the service by "
				    "CUDA_VISIBLE_DEVICES", hex, g->cu->info.num_devices);
	}
	if (!g->cu->info.devices[ord].ipc)
		return feed_err_set(err, -ENODEV, "device %d (%s) does not support CUDA IPC events "
				    "with unified addressing", ord, g->cu->info.devices[ord].name);
	if (ord >= 64 || !(g->allowed >> ord & 1))
		return feed_err_set(err, -ENODEV, "device %d (%s) is not among the GPUs feedd may "
				    "use (`gpus:` in its config)", ord, g->cu->info.devices[ord].name);
	return ord;
}

/* The one allocation the client maps: the slots, then the done words. */
static uint64_t dsl_slots_bytes(const struct dsl *s)
{
	return dsl_align(s->done_off + sizeof(uint32_t) * s->nslots);
}

static CUdeviceptr dsl_word(const struct dsl *s, uint32_t slot)
{
	return s->slots + s->done_off + sizeof(uint32_t) * slot;
}

/* The done words start at 0 (cuMemAlloc leaves memory undefined: a stray
 * value could pass a wait), written on the rescue stream, which the
 * rescue's writes then follow in order; waited for here, on a worker:
 * nothing else is on that stream yet, so the wait is bounded. */
static int dsl_words_init(struct dsl *s, struct feed_err *err)
{
	const struct cudrv_api *api = &s->cu->api;
	CUresult e;
	for (uint32_t i = 0; i < s->nslots; i++)
		if ((e = FEED_CU(api, StreamWriteValue32, s->rescue, dsl_word(s, i), 0,
						 CU_STREAM_WRITE_VALUE_DEFAULT)) != CUDA_SUCCESS)
			return dsl_fail_cu(s->cu, err, e, "cuStreamWriteValue32");
	if ((e = FEED_CU(api, StreamSynchronize, s->rescue)) != CUDA_SUCCESS)
		return dsl_fail_cu(s->cu, err, e, "cuStreamSynchronize (done words)");
	return 0;
}

static int dsl_events(struct dsl *s, struct feed_err *err)
{
	const struct cudrv_api *api = &s->cu->api;
	const unsigned ipc = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
	CUresult e;
	for (uint32_t i = 0; i < s->nslots; i++) {
		if ((e = FEED_CU(api, EventCreate, &s->ready[i], ipc)) != CUDA_SUCCESS) {
			s->ready[i] = NULL;
			return dsl_fail_cu(s->cu, err, e, "cuEventCreate (interprocess)");
		}
		if ((e = FEED_CU(api, EventCreate, &s->copied[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			s->copied[i] = NULL;
			return dsl_fail_cu(s->cu, err, e, "cuEventCreate");
		}
		if ((e = FEED_CU(api, IpcGetEventHandle, &s->ready_h[i], s->ready[i])) != CUDA_SUCCESS)
			return dsl_fail_cu(s->cu, err, e, "cuIpcGetEventHandle");
	}
	return 0;
}

int dsl_plan(struct dsl_gpu *g, const struct dsl_request *req, const struct fmt_schema *out,
	     const struct slot_layout *lay, struct dsl **ret, struct feed_err *err)
{
	struct dsl *s;
	int ord, r;

	if ((ord = dsl_device(g, req->uuid, err)) < 0)
		return ord;
	if (lay->nslots > DSL_MAX_SLOTS || out->nfields > FEED_SHM_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "device slots: %u slots, %u fields", lay->nslots,
				    out->nfields);
	if (!(s = calloc(1, sizeof(*s))))
		return feed_err_set(err, -ENOMEM, "out of memory for device slots");
	s->g = g;
	s->cu = g->cu;
	s->ord = ord;
	s->nslots = lay->nslots;
	s->nfields = out->nfields;
	hyb_stream_init(&s->hyb, ord);
	bool any = false;
	for (uint32_t f = 0; f < out->nfields; f++) {
		struct dsl_field *df = &s->field[f];
		if ((r = dsl_plan_field(req, &out->fields[f], df, err)) < 0)
			goto fail;
		if (df->kind == DSL_ABSENT)
			continue;
		any = true;
		df->off = s->slot_bytes;
		s->slot_bytes = dsl_align(s->slot_bytes + df->sample_bytes * lay->batch);
		df->stage_off = s->stage_bytes;
		s->stage_bytes = dsl_align(s->stage_bytes + out->fields[f].max_bytes * lay->batch);
	}
	s->done_off = s->slot_bytes * s->nslots;
	if (!any) {
		r = feed_err_set(err, -ENODEV, "no field of the batches can go to the device (all "
				 "are variable-length)");
		goto fail;
	}
	if (dsl_device_bytes(s) > req->max_bytes) {
		r = feed_err_set(err, -ENODEV, "its device slots would take %llu bytes of GPU "
				 "memory, more than the %llu left to this user (limits."
				 "max_device_bytes)", (unsigned long long)dsl_device_bytes(s),
				 (unsigned long long)req->max_bytes);
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	dsl_free(s, NULL);
	return r;
}

/* The copy, convert and rescue streams and the finishing event (context
 * current); on failure what was made is left for dsl_undo(). */
static int dsl_streams(struct dsl *s, struct feed_err *err)
{
	const struct cudrv_api *api = &s->cu->api;
	CUresult e;

	if ((e = FEED_CU(api, StreamCreate, &s->copy, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		s->copy = NULL;
		return dsl_fail_cu(s->cu, err, e, "cuStreamCreate");
	}
	if ((e = FEED_CU(api, StreamCreate, &s->conv, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		s->conv = NULL;
		return dsl_fail_cu(s->cu, err, e, "cuStreamCreate");
	}
	if ((e = FEED_CU(api, StreamCreate, &s->rescue, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		s->rescue = NULL;
		return dsl_fail_cu(s->cu, err, e, "cuStreamCreate");
	}
	if ((e = FEED_CU(api, EventCreate, &s->fin, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		s->fin = NULL;
		return dsl_fail_cu(s->cu, err, e, "cuEventCreate");
	}
	return 0;
}

int dsl_make(struct dsl *s, struct feed_err *err)
{
	const struct cudrv_api *api = &s->cu->api;
	int ord = s->ord, r;
	CUresult e;

	if ((r = dsl_dev_get(s->g, ord, &s->dev, err)) < 0)
		return r;
	if ((e = FEED_CU(api, CtxSetCurrent, s->dev->ctx)) != CUDA_SUCCESS) {
		r = dsl_fail_cu(s->cu, err, e, "cuCtxSetCurrent");
		goto fail;
	}
	if ((e = FEED_CU(api, MemAlloc, &s->slots, dsl_slots_bytes(s))) != CUDA_SUCCESS) {
		s->slots = 0;
		char name[96];
		r = feed_err_set(err, -ENODEV, "device %d: cuMemAlloc of %llu bytes of device slots "
				 "failed: %s", ord, (unsigned long long)dsl_slots_bytes(s),
				 cudrv_errname(s->cu, e, name, sizeof(name)));
		goto fail;
	}
	if ((e = FEED_CU(api, MemAlloc, &s->stage, s->stage_bytes * s->nslots)) != CUDA_SUCCESS) {
		s->stage = 0;
		r = dsl_fail_cu(s->cu, err, e, "cuMemAlloc of the staging areas");
		goto fail;
	}
	if ((e = FEED_CU(api, IpcGetMemHandle, &s->mem_h, s->slots)) != CUDA_SUCCESS) {
		r = dsl_fail_cu(s->cu, err, e, "cuIpcGetMemHandle");
		goto fail;
	}
	if ((r = dsl_streams(s, err)) < 0 || (r = dsl_events(s, err)) < 0)
		goto fail;
	if ((r = dsl_words_init(s, err)) < 0)
		goto fail;
	/* relaxed: a figure for status, ordered by nothing */
	atomic_fetch_add_explicit(&s->dev->bytes, dsl_device_bytes(s), memory_order_relaxed);
	/* seq_cst: pairs with dsl_abandon's store, then load of made */
	atomic_store(&s->made, true);
	return 0;
fail:
	/* what was made goes now; s stays the caller's, as planned */
	dsl_undo(s);
	return r;
}

void dsl_reply(struct dsl *s, Feed__DeviceSlots *ret)
{
	ret->ipc = true;
	ret->reason = (char *)"";
	ret->mem_handle.data = (uint8_t *)&s->mem_h;
	ret->mem_handle.len = sizeof(s->mem_h);
	ret->slot_bytes = s->slot_bytes;
	ret->done_offset = s->done_off;
	for (uint32_t i = 0; i < s->nslots; i++)
		s->ready_pb[i] = (ProtobufCBinaryData){sizeof(s->ready_h[i]), (uint8_t *)&s->ready_h[i]};
	ret->n_ready = s->nslots;
	ret->ready = s->ready_pb;
	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct dsl_field *df = &s->field[f];
		Feed__DeviceField *p = &s->field_pb[f];
		feed__device_field__init(p);
		p->kind = (uint32_t)df->kind;
		p->dtype = (Feed__DType)df->dtype;
		p->offset = df->off;
		p->sample_bytes = df->sample_bytes;
		s->field_pp[f] = p;
	}
	ret->n_fields = s->nfields;
	ret->fields = s->field_pp;
}

uint64_t dsl_device_bytes(const struct dsl *s)
{
	return dsl_slots_bytes(s) + s->stage_bytes * s->nslots;
}

int dsl_before_build(struct dsl *s, uint32_t slot, struct feed_err *err)
{
	const struct cudrv_api *api = &s->cu->api;
	CUresult e;
	if (!s->recorded[slot])
		return 0;
	if ((e = FEED_CU(api, CtxSetCurrent, s->dev->ctx)) != CUDA_SUCCESS ||
	    (e = FEED_CU(api, EventSynchronize, s->copied[slot])) != CUDA_SUCCESS)
		return dsl_fail_cu(s->cu, err, e, "waiting for the slot's last copy to the device");
	return 0;
}

/* Registers the data region for DMA once; a refusal leaves the copies
 * pageable, slower but right. */
/* The keeper's registration of the host region for DMA. */
static void dsl_register_run(struct gk_job *j)
{
	struct dsl *s = (struct dsl *)((char *)j - offsetof(struct dsl, reg_job));
	const struct cudrv_api *api = &s->cu->api;
	bool ok = FEED_CU(api, CtxSetCurrent, s->dev->ctx) == CUDA_SUCCESS &&
		  FEED_CU(api, MemHostRegister, s->reg_data, s->reg_bytes, 0) == CUDA_SUCCESS;
	s->registered = ok ? (void *)s->reg_data : (void *)1; /* 1: tried, not again */
	/* release: registered before 2 (read by the keeper's free, after) */
	atomic_store_explicit(&s->reg_state, 2, memory_order_release);
}

/* Asks the keeper, once, to register the host region for DMA: the call
 * synchronises implicitly (it would wait, on this worker, for every
 * stream's queued conversions, some behind a client's done word). Until
 * it is made the copies read pageable memory, which the driver stages:
 * slower, the same bytes. Never waits. */
static void dsl_register(struct dsl *s, uint8_t *data, uint64_t bytes)
{
	int expect = 0;
	/* relaxed: the claim only picks who submits; the keeper's job is
	 * ordered by its queue's lock */
	if (atomic_load_explicit(&s->reg_state, memory_order_relaxed) != 0 ||
	    !atomic_compare_exchange_strong_explicit(&s->reg_state, &expect, 1,
						     memory_order_relaxed, memory_order_relaxed))
		return;
	s->reg_data = data;
	s->reg_bytes = bytes;
	s->reg_job.run = dsl_register_run;
	gk_submit(&s->g->keeper, &s->reg_job);
}

/* Each field of a batch from its staging area (stage) into its device
 * slot (base), on the convert stream: copied, or converted by a kernel. */
static CUresult dsl_convert(struct dsl *s, const struct feed_shm_slot *hdr, CUdeviceptr base,
			    CUdeviceptr stage, const char **what)
{
	const struct cudrv_api *api = &s->cu->api;
	CUresult e = CUDA_SUCCESS;

	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct dsl_field *df = &s->field[f];
		const struct feed_shm_field *hf = &hdr->field[f];
		CUdeviceptr in = stage + df->stage_off, out = base + df->off;
		switch (df->kind) {
		case DSL_ABSENT:
			continue;
		case DSL_SAME:
			*what = "cuMemcpyDtoDAsync";
			e = FEED_CU(api, MemcpyDtoDAsync, out, in, hf->bytes, s->conv);
			break;
		case DSL_IMAGE:
			*what = "cuLaunchKernel (images)";
			e = cudrv_launch_images(s->cu, &s->dev->k, &df->cv, in, hdr->nsamples, 0, out,
						s->conv);
			break;
		case DSL_TOKENS:
			*what = "cuLaunchKernel (tokens)";
			e = cudrv_launch_tokens(s->cu, &s->dev->k, df->elem_size, in,
						hf->bytes / df->elem_size, out, s->conv);
			break;
		}
		if (e != CUDA_SUCCESS)
			return e;
	}
	return CUDA_SUCCESS;
}

/* Slot's copies on the copy stream, then its conversion on the convert
 * stream behind the client's done word for the slot's last batch
 * (context current). */
static CUresult dsl_enqueue(struct dsl *s, uint32_t slot, const struct feed_shm_slot *hdr,
			    uint8_t *data, const char **what)
{
	const struct cudrv_api *api = &s->cu->api;
	CUdeviceptr base = s->slots + (CUdeviceptr)slot * s->slot_bytes;
	feed_assert_unlocked("cuLaunchKernel");  /* cudrv_launch_*() below */
	CUdeviceptr stage = s->stage + (CUdeviceptr)slot * s->stage_bytes;
	CUresult e;

	*what = "cuMemcpyHtoDAsync";
	for (uint32_t f = 0; f < s->nfields; f++)
		if (s->field[f].kind != DSL_ABSENT &&
		    (e = FEED_CU(api, MemcpyHtoDAsync, stage + s->field[f].stage_off, data + hdr->field[f].offset,
					      hdr->field[f].bytes, s->copy)) != CUDA_SUCCESS)
			return e;
	*what = "cuEventRecord";
	if ((e = FEED_CU(api, EventRecord, s->copied[slot], s->copy)) != CUDA_SUCCESS)
		return e;
	s->recorded[slot] = true;
	*what = "cuStreamWaitEvent";
	if ((e = FEED_CU(api, StreamWaitEvent, s->conv, s->copied[slot], 0)) != CUDA_SUCCESS)
		return e;
	/* the device slot's last batch: the client's done write for it first.
	 * seq_cst store, then load: with dsl_abandon's store, then load, one
	 * of us sees the other: either no wait is queued, or the rescue
	 * writes this generation (or a later one) */
	uint32_t prev = atomic_load_explicit(&s->last[slot], memory_order_relaxed);
	bool had = s->converted[slot];
	atomic_store(&s->last[slot], hdr->gen);
	s->converted[slot] = true;
	*what = "cuStreamWaitValue32 on the client's done word";
	if (had && !atomic_load(&s->abandoned) &&
	    (e = FEED_CU(api, StreamWaitValue32, s->conv, dsl_word(s, slot), prev,
					CU_STREAM_WAIT_VALUE_GEQ)) != CUDA_SUCCESS)
		return e;
	if ((e = dsl_convert(s, hdr, base, stage, what)) != CUDA_SUCCESS)
		return e;
	*what = "cuEventRecord";
	return FEED_CU(api, EventRecord, s->ready[slot], s->conv);
}

int dsl_after_build(struct dsl *s, uint32_t slot, const struct feed_shm_slot *hdr,
		    uint8_t *data, uint64_t data_bytes, struct feed_err *err)
{
	const char *what = "cuCtxSetCurrent";
	CUresult e = FEED_CU(&s->cu->api, CtxSetCurrent, s->dev->ctx);
	if (e != CUDA_SUCCESS)
		return dsl_fail_cu(s->cu, err, e, what);
	dsl_register(s, data, data_bytes);
	e = dsl_enqueue(s, slot, hdr, data, &what);
	return e == CUDA_SUCCESS ? 0 : dsl_fail_cu(s->cu, err, e, what);
}

/* Frees what dsl_make made of s (its device work finished, or none). */
static void dsl_undo(struct dsl *s)
{
	const struct cudrv_api *api = &s->cu->api;
	if (s->dev && atomic_load(&s->made))
		atomic_fetch_sub_explicit(&s->dev->bytes, dsl_device_bytes(s),
					  memory_order_relaxed); /* as in dsl_make */
	if (s->dev && FEED_CU(api, CtxSetCurrent, s->dev->ctx) == CUDA_SUCCESS) {
		if (s->copy)
			FEED_CU(api, StreamDestroy, s->copy);
		if (s->conv)
			FEED_CU(api, StreamDestroy, s->conv);
		if (s->rescue)
			FEED_CU(api, StreamDestroy, s->rescue);
		for (uint32_t i = 0; i < s->nslots; i++) {
			if (s->ready[i])
				FEED_CU(api, EventDestroy, s->ready[i]);
			if (s->copied[i])
				FEED_CU(api, EventDestroy, s->copied[i]);
		}
		if (s->fin)
			FEED_CU(api, EventDestroy, s->fin);
		if (s->stage)
			FEED_CU(api, MemFree, s->stage);
		if (s->slots)
			FEED_CU(api, MemFree, s->slots);
	}
	memset(s->ready, 0, sizeof(s->ready));
	memset(s->copied, 0, sizeof(s->copied));
	memset(s->recorded, 0, sizeof(s->recorded));
	memset(s->converted, 0, sizeof(s->converted));
	atomic_store(&s->made, false);
	s->copy = s->conv = s->rescue = NULL;
	s->fin = NULL;
	s->stage = s->slots = 0;
	s->dev = NULL;
}

static void dsl_destroy(struct dsl *s)
{
	hyb_stream_fini(&s->hyb);
	dsl_undo(s);
	free(s);
}

/* Puts the streams of list (linked by next_grave) back in the graveyard. */
static void dsl_bury(struct dsl_gpu *g, struct dsl *list)
{
	while (list) {
		struct dsl *s = list;
		list = s->next_grave;
		feed_mutex_lock(&g->grave_mu);
		s->next_grave = g->graveyard;
		g->graveyard = s;
		feed_mutex_unlock(&g->grave_mu);
	}
}

/* Frees the graveyard's streams whose device work has finished: the list
 * is taken under grave_mu, the device asked after it is dropped. Any
 * thread. */
static void dsl_reap(struct dsl_gpu *g)
{
	const struct cudrv_api *api = &g->cu->api;
	struct dsl *keep = NULL, *list;

	feed_mutex_lock(&g->grave_mu);
	list = g->graveyard;
	g->graveyard = NULL;
	feed_mutex_unlock(&g->grave_mu);
	while (list) {
		struct dsl *s = list;
		list = s->next_grave;
		bool finished = FEED_CU(api, CtxSetCurrent, s->dev->ctx) == CUDA_SUCCESS &&
				FEED_CU(api, EventQuery, s->fin) != CUDA_ERROR_NOT_READY;
		if (finished) {
			dsl_destroy(s);
		} else {
			s->next_grave = keep;
			keep = s;
		}
	}
	dsl_bury(g, keep);
}

/* The keeper's dsl_free: it may wait (cuStreamSynchronize, and
 * cuMemHostUnregister synchronises implicitly), so only the keeper does. */
static void dsl_free_run(struct gk_job *j)
{
	struct dsl *s = (struct dsl *)((char *)j - offsetof(struct dsl, free_job));
	const struct cudrv_api *api = &s->cu->api;
	bool pending = false;
	if (FEED_CU(api, CtxSetCurrent, s->dev->ctx) == CUDA_SUCCESS) {
		/* the copies read the host region: they end before it is
		 * unregistered (and unmapped); they wait for nothing else */
		if (s->copy)
			FEED_CU(api, StreamSynchronize, s->copy);
		/* acquire: the registration's result (the keeper made it,
		 * before this job: 2 already) */
		if (atomic_load_explicit(&s->reg_state, memory_order_acquire) == 2 &&
		    s->registered != (void *)1)
			FEED_CU(api, MemHostUnregister, s->registered);
		s->registered = NULL;
		/* the conversions wait for done words (dsl_abandon wrote them
		 * when the client left): never on the CPU; the memory goes once
		 * they have run */
		pending = s->conv && s->fin && FEED_CU(api, EventRecord, s->fin, s->conv) == CUDA_SUCCESS &&
			  FEED_CU(api, EventQuery, s->fin) == CUDA_ERROR_NOT_READY;
	}
	region_free(&s->data);
	struct dsl_gpu *g = s->g;
	if (!pending) {
		dsl_destroy(s);
		dsl_reap(g); /* an earlier one's work may have finished since */
		return;
	}
	s->next_grave = NULL;
	dsl_bury(g, s);
	gk_ticking(&g->keeper, true);
}

void dsl_free(struct dsl *s, struct region *data)
{
	if (!s || !s->dev) { /* a plan never made (freed on the loop, say): no driver call */
		if (data)
			region_free(data);
		if (s)
			dsl_destroy(s);
		return;
	}
	assert(data); /* a made plan has copied out of a region */
	s->data = *data;
	*data = (struct region){.fd = -1};
	s->free_job.run = dsl_free_run;
	gk_submit(&s->g->keeper, &s->free_job);
}
void dsl_abandon(struct dsl *s)
{
	if (!s)
		return;
	const struct cudrv_api *api = &s->cu->api;
	/* seq_cst store, then loads: pairs with dsl_make's store of made and
	 * dsl_enqueue's store of last[i] before its load of abandoned */
	atomic_store(&s->abandoned, true);
	if (!atomic_load(&s->made) || FEED_CU(api, CtxSetCurrent, s->dev->ctx) != CUDA_SUCCESS)
		return; /* nothing converted: nothing waits */
	/* enqueued only: the rescue stream waits for nothing, so the words
	 * land at once and the convert stream drains */
	for (uint32_t i = 0; i < s->nslots; i++)
		(void)FEED_CU(api, StreamWriteValue32, s->rescue, dsl_word(s, i), atomic_load(&s->last[i]),
					      CU_STREAM_WRITE_VALUE_DEFAULT);
}

const char *dsl_jpeg_describe(const struct dsl *s, char *buf, size_t cap)
{
	return hyb_stream_describe(&s->hyb, buf, cap);
}

/* The decode dispatch (dlv_dev_ops.predecode): the share of the batch's
 * images the stream's scheduler sends to the GPU. Worker. */
static bool dsl_predecode(struct dsl *s, uint32_t batch, uint32_t ready,
			  struct bld_predecode *ret)
{
	uint32_t n = hyb_sched_gpu_images(&s->hyb.sched, batch, ready, s->nslots);
	if (!n)
		return false;
	*ret = (struct bld_predecode){.run = hyb_stream_run, .arg = &s->hyb, .n_first = n};
	return true;
}

const struct dlv_dev_ops dsl_dlv_ops = {
	.make = dsl_make,
	.predecode = dsl_predecode,
	.before_build = dsl_before_build,
	.after_build = dsl_after_build,
	.abandon = dsl_abandon,
	.free = dsl_free,
};
