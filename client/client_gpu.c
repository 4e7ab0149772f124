/*
 * client_gpu.c: batches to a device or to host memory, converted
 * (feed/gpu.h, feed_batch_to_device), and the deferred release of a slot
 * whose bytes are still being copied.
 *
 * Owns, per stream that asked for GPU delivery (struct cl_gpu_stream,
 * hung on the stream at its first device call): the context and the
 * module of the embedded kernels, the registration of each data region
 * for DMA (once per region: cuMemHostRegister, undone before the region
 * is unmapped), a device staging buffer per batch and field, and the
 * events of copies in flight with the batches they read from. A batch
 * released while one of its events is pending is kept here (gpu_keep)
 * and handed back to the stream when the events have completed: the
 * stream asks (gpu_done, cuEventQuery) at each feed_next() and at close;
 * no driver callback ever calls into the library. Both parts hook into
 * the stream (client_internal.h: CL_HOOK_GPU, CL_HOOK_PIN) and never call
 * it back: a kept batch goes back through gpu_done().
 *
 * Threads: feed_batch_to_device(), gpu_done() and gpu_close() run on the
 * thread that calls feed_next(), the only one that adds or removes
 * pending events (so it reads them without the lock, and queries and
 * waits for them with no lock held); gpu_keep() and gpu_unmap() on any
 * thread (feed_release()). g->lock guards the pending list's entries,
 * the batches waiting for them and the regions; p->lock the pinned
 * regions. Neither is held across a driver call or a call into the
 * stream (client_internal.h's table). Never prints.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "cudrv.h"
#include "convert.h"
#include "feed/gpu.h"
#include "feed/stream.h"
#include "feed_lock.h"
#include "mix.h"

/* What a field becomes: converted images or tokens, its bytes as they
 * are (FEED_TO_SAME), or soft labels (to->mix on an integer field). */
enum gpu_kind { GPU_IMAGES, GPU_TOKENS, GPU_SAME, GPU_LABELS };

struct gpu_pending {
	struct feed_batch *b;      /* the batch the copy reads */
	CUevent ev;                /* recorded after the copy and the kernel */
	bool done;                 /* ev completed and destroyed; the entry goes at
				    * the next compaction (feed_next()'s thread) */
};

struct gpu_region {
	void *base;                /* a data region's mapping */
	bool registered;           /* ours to unregister (else pageable, or the
				    * caller registered it) */
};

struct gpu_staging {
	const struct feed_batch *b;/* the batch and field it holds */
	uint32_t field;
	CUdeviceptr p;
	size_t size;
	CUstream stream;           /* the last copy into it was on this stream */
};

struct cl_gpu_stream {
	pthread_mutex_t lock;      /* pending, wanted, regions */
	const struct cudrv *cu;
	CUcontext ctx;             /* of the first device call; later ones must match */
	int device;
	bool retained;             /* ctx is the device's primary context, retained
				    * by us (none was current): released at close */
	bool read_only;            /* the device takes CU_MEMHOSTREGISTER_READ_ONLY */
	struct cudrv_kernels k;
	struct gpu_pending *pending; /* copies in flight (written under lock) */
	size_t npending, cap_pending;
	/* released by the caller, copies in flight (lock); room for npending + 1
	 * is made with each copy, so keeping a batch never allocates */
	struct feed_batch **wanted;
	size_t nwanted, cap_wanted;
	/* nwanted, for gpu_done's look without the lock (relaxed: a stale 0
	 * only leaves a batch for the next feed_next) */
	_Atomic size_t nkept;
	struct gpu_region *regions;  /* (lock) */
	size_t nregions, cap_regions;
	struct gpu_staging *staging; /* caller's thread only */
	size_t nstaging, cap_staging;
};

/* Grows *arr (of *cap elements of size sz) to hold n + 1. */
static int gpu_grow(void *arr, size_t *cap, size_t n, size_t sz)
{
	void **a = arr;
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	void *p = realloc(*a, nc * sz);
	if (!p)
		return -ENOMEM;
	*a = p;
	*cap = nc;
	return 0;
}

static int gpu_fail_cu(struct feed_conn *conn, const struct cudrv *cu, CUresult e,
		       const char *what)
{
	char name[96];
	return cl_fail(conn, -EIO, "%s failed: %s", what, cudrv_errname(cu, e, name, sizeof(name)));
}

/* ------------------------------------------------------------------ */
/* Deferred release                                                    */

static bool gpu_in_flight(const struct cl_gpu_stream *g, const struct feed_batch *b)
{
	for (size_t i = 0; i < g->npending; i++)
		if (g->pending[i].b == b)
			return true;
	return false;
}

/* CL_HOOK_GPU keep: b released while copies from it are in flight. */
static int gpu_keep(void *self, struct feed_batch *b)
{
	struct cl_gpu_stream *g = self;
	int r = 0;
	feed_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->nwanted; i++)
		if (g->wanted[i] == b)
			r = -EINVAL; /* released twice */
	if (!r && gpu_in_flight(g, b)) {
		assert(g->nwanted < g->cap_wanted); /* gpu_enqueue made room */
		g->wanted[g->nwanted++] = b;
		atomic_store_explicit(&g->nkept, g->nwanted, memory_order_relaxed);
		r = 1;
	}
	feed_mutex_unlock(&g->lock);
	return r;
}

/* Queries the pending events (and waits for each when all, or for the
 * oldest when wait_one), destroying the completed ones; then drops their
 * entries. feed_next()'s thread, the only one that changes the events:
 * read without the lock, the driver called with none held. */
static void gpu_reap(struct cl_gpu_stream *g, bool wait_one, bool all)
{
	const struct cudrv_api *api = &g->cu->api;
	size_t n = g->npending, kept = 0;

	for (size_t i = 0; i < n; i++) {
		CUevent ev = g->pending[i].ev;
		CUresult e = FEED_CU(api, EventQuery, ev);
		if (e == CUDA_ERROR_NOT_READY && (all || (wait_one && i == 0)))
			e = FEED_CU(api, EventSynchronize, ev);
		if (e == CUDA_ERROR_NOT_READY)
			continue;
		/* complete, or the context failed: no copy runs any more */
		FEED_CU(api, EventDestroy, ev);
		g->pending[i].done = true;
	}
	feed_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->npending; i++)
		if (!g->pending[i].done)
			g->pending[kept++] = g->pending[i];
	g->npending = kept;
	feed_mutex_unlock(&g->lock);
}

/* CL_HOOK_GPU done: the kept batches whose copies are all done. */
static uint32_t gpu_done(void *self, bool wait_one, bool all, struct feed_batch **out,
			 uint32_t cap)
{
	struct cl_gpu_stream *g = self;
	uint32_t n = 0;

	/* feed_next()'s fast path: no lock when nothing is in flight or kept */
	if (!g->npending && !atomic_load_explicit(&g->nkept, memory_order_relaxed))
		return 0;
	if (g->npending)
		gpu_reap(g, wait_one, all);
	feed_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->nwanted && n < cap;) {
		if (gpu_in_flight(g, g->wanted[i])) {
			i++;
			continue;
		}
		out[n++] = g->wanted[i];
		g->wanted[i] = g->wanted[--g->nwanted];
	}
	atomic_store_explicit(&g->nkept, g->nwanted, memory_order_relaxed);
	feed_mutex_unlock(&g->lock);
	return n;
}

/* CL_HOOK_GPU unmap: unregisters the region at base before it goes. */
static void gpu_unmap(void *self, void *base)
{
	struct cl_gpu_stream *g = self;
	bool registered = false;

	feed_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->nregions; i++) {
		if (g->regions[i].base != base)
			continue;
		registered = g->regions[i].registered;
		g->regions[i] = g->regions[--g->nregions];
		break;
	}
	feed_mutex_unlock(&g->lock);
	if (registered)
		FEED_CU(&g->cu->api, MemHostUnregister, base);
}

/* CL_HOOK_GPU close: every copy is done (gpu_done(all) came first);
 * unregisters, frees the staging buffers and the state. */
static void gpu_close(void *self)
{
	struct cl_gpu_stream *g = self;
	const struct cudrv_api *api = &g->cu->api;
	CUcontext prev = NULL;
	FEED_CU(api, CtxGetCurrent, &prev);
	if (g->ctx && prev != g->ctx)
		FEED_CU(api, CtxSetCurrent, g->ctx);
	for (size_t i = 0; i < g->nregions; i++)
		if (g->regions[i].registered)
			FEED_CU(api, MemHostUnregister, g->regions[i].base);
	for (size_t i = 0; i < g->nstaging; i++)
		FEED_CU(api, MemFree, g->staging[i].p);
	feed_assert_unlocked("cudrv_kernels_unload");
	cudrv_kernels_unload(g->cu, &g->k);
	if (g->ctx && prev != g->ctx)
		FEED_CU(api, CtxSetCurrent, prev);
	if (g->retained) {
		/* it was current only because we made it so: not any more */
		if (prev == g->ctx)
			FEED_CU(api, CtxSetCurrent, NULL);
		FEED_CU(api, DevicePrimaryCtxRelease, g->device);
	}
	pthread_mutex_destroy(&g->lock);
	free(g->pending);
	free(g->wanted);
	free(g->regions);
	free(g->staging);
	free(g);
}

static const struct cl_hook gpu_hook = {
	.keep = gpu_keep, .done = gpu_done, .unmap = gpu_unmap, .close = gpu_close};

/* ------------------------------------------------------------------ */
/* The conversion                                                      */

/* What one field becomes. */
struct gpu_job {
	enum gpu_kind kind;
	struct feed_convert cv;    /* images */
	size_t elem_size;          /* tokens: 2 or 4 */
	size_t n;                  /* samples (images) or tokens */
	size_t out_bytes;
	const uint8_t *flip;       /* images: per-sample flags, or NULL */
	bool mixed;                /* images: mixed after the conversion */
	struct feed_mix_args mix;  /* images (mixed) and labels */
	uint32_t label_type;       /* labels: enum feed_mix_label_type */
};

/* The label type of a FEED_DTYPE_* integer, or -1. */
static int gpu_label_type(int dtype)
{
	switch (dtype) {
	case FEED_DTYPE_UINT8: return FEED_MIX_LABEL_U8;
	case FEED_DTYPE_INT8: return FEED_MIX_LABEL_I8;
	case FEED_DTYPE_UINT16: return FEED_MIX_LABEL_U16;
	case FEED_DTYPE_INT16: return FEED_MIX_LABEL_I16;
	case FEED_DTYPE_UINT32: return FEED_MIX_LABEL_U32;
	case FEED_DTYPE_INT32: return FEED_MIX_LABEL_I32;
	case FEED_DTYPE_UINT64: return FEED_MIX_LABEL_U64;
	case FEED_DTYPE_INT64: return FEED_MIX_LABEL_I64;
	default: return -1;
	}
}

/* j's mix arguments from m, for images of h x w. */
static int gpu_mix_args(struct feed_conn *conn, uint32_t field, const struct feed_mix *m,
			uint32_t h, uint32_t w, struct gpu_job *j)
{
	struct feed_mix_draw d = {.op = m->op < 0 ? UINT32_MAX : (uint32_t)m->op, .lam = m->lam,
				  .x1 = m->x1, .y1 = m->y1, .x2 = m->x2, .y2 = m->y2};
	if (feed_mix_args_init(&j->mix, &d, h, w, m->num_classes, m->label_smoothing) >= 0)
		return 0;
	if (h == UINT32_MAX) /* labels: no image size to name */
		return cl_fail(conn, -EINVAL, "field %u: mix op %d, lambda %g or label_smoothing %g "
			       "out of range", field, m->op, m->lam, m->label_smoothing);
	return cl_fail(conn, -EINVAL, "field %u: mix op %d, lambda %g, box [%u, %u) x [%u, %u) "
		       "or label_smoothing %g does not fit images of %ux%u", field, m->op, m->lam,
		       m->x1, m->x2, m->y1, m->y2, m->label_smoothing, h, w);
}

/* Field v as soft labels of to->mix: an integer [n] or [n, 1], every
 * label below num_classes (checked here, on the host). */
static int gpu_plan_labels(struct feed_conn *conn, const struct feed_view *v, uint32_t field,
			   const struct feed_to_device *to, struct gpu_job *j)
{
	const struct feed_mix *m = to->mix;
	int t = gpu_label_type(v->dtype);
	int64_t bad;
	size_t at;
	if (to->dtype != FEED_TO_F32 || t < 0 || !(v->rank == 1 || (v->rank == 2 && v->shape[1] == 1)))
		return cl_fail(conn, -EINVAL, "field %u: mix makes soft labels (dtype FEED_TO_F32) "
			       "from an integer field of shape [n] or [n, 1], and mixes u8 images",
			       field);
	if (!m->num_classes)
		return cl_fail(conn, -EINVAL, "field %u: soft labels need mix num_classes > 0", field);
	/* the box is the images': here only lambda and the labels matter */
	if (gpu_mix_args(conn, field, m, UINT32_MAX, UINT32_MAX, j) < 0)
		return -EINVAL;
	j->n = v->shape[0];
	if (feed_mix_labels_check(v->data, (uint32_t)t, j->n, m->num_classes, &bad, &at) < 0)
		return cl_fail(conn, -ERANGE, "field %u: label %lld of sample %zu of the batch is not "
			       "in [0, num_classes %u)", field, (long long)bad, at, m->num_classes);
	j->kind = GPU_LABELS;
	j->label_type = (uint32_t)t;
	j->out_bytes = j->n * m->num_classes * sizeof(float);
	return 0;
}

static int gpu_plan(struct feed_conn *conn, const struct feed_view *v, uint32_t field,
		    const struct feed_to_device *to, struct gpu_job *ret)
{
	struct gpu_job j = {0};
	if (v->ends)
		return cl_fail(conn, -EINVAL, "field %u: variable-length, not convertible", field);
	if (to->flip && (to->dtype == FEED_TO_SAME || v->dtype != FEED_DTYPE_UINT8))
		return cl_fail(conn, -EINVAL, "field %u: flip is for u8 images converted to fp32, "
			       "fp16 or bf16", field);
	int r;
	/* with a mix, an integer field of one value per sample is labels */
	if (to->mix && (v->dtype != FEED_DTYPE_UINT8 || v->rank <= 2)) {
		if ((r = gpu_plan_labels(conn, v, field, to, &j)) < 0)
			return r;
	} else if (to->dtype == FEED_TO_SAME) {
		if (to->mix)
			return cl_fail(conn, -EINVAL, "field %u: mix is for u8 images converted to "
				       "fp32, fp16 or bf16, and integer labels", field);
		j.kind = GPU_SAME;
		j.n = v->shape[0];
		j.out_bytes = v->bytes;
	} else if (v->dtype == FEED_DTYPE_UINT16 || v->dtype == FEED_DTYPE_UINT32) {
		j.kind = GPU_TOKENS;
		j.elem_size = v->dtype == FEED_DTYPE_UINT16 ? 2 : 4;
		j.n = v->bytes / j.elem_size;
		j.out_bytes = j.n * sizeof(int64_t);
	} else if (v->dtype == FEED_DTYPE_UINT8) {
		if (v->rank != 3 && v->rank != 4)
			return cl_fail(conn, -EINVAL,
				       "field %u: u8 of rank %u, not images [n, h, w] or [n, h, w, c]",
				       field, v->rank - 1);
		uint64_t h = v->shape[1], w = v->shape[2], c = v->rank == 4 ? v->shape[3] : 1;
		if (h > UINT32_MAX || w > UINT32_MAX || c > FEED_CONVERT_MAX_C)
			return cl_fail(conn, -EINVAL, "field %u: images of %llux%llux%llu not convertible "
				       "(at most %d channels)", field, (unsigned long long)h,
				       (unsigned long long)w, (unsigned long long)c, FEED_CONVERT_MAX_C);
		if (to->dtype < FEED_TO_F32 || to->dtype > FEED_TO_BF16 ||
		    (to->layout != FEED_TO_NCHW && to->layout != FEED_TO_NHWC))
			return cl_fail(conn, -EINVAL, "field %u: unknown dtype %d or layout %d", field,
				       to->dtype, to->layout);
		if (feed_convert_init(&j.cv, (uint32_t)h, (uint32_t)w, (uint32_t)c,
				      (enum feed_convert_dtype)to->dtype,
				      (enum feed_convert_layout)to->layout, to->mean, to->std) < 0)
			return cl_fail(conn, -EINVAL, "field %u: mean/std give outputs that are not "
				       "finite (a std of 0?) or the image is too large", field);
		j.kind = GPU_IMAGES;
		j.n = v->shape[0];
		j.out_bytes = j.n * feed_convert_sample_bytes(&j.cv);
		j.flip = to->flip;
		if (to->mix && (r = gpu_mix_args(conn, field, to->mix, (uint32_t)h, (uint32_t)w, &j)) < 0)
			return r;
		j.mixed = to->mix != NULL;
	} else {
		return cl_fail(conn, -EINVAL, "field %u: dtype %d not convertible (u8 images, u16 or "
			       "u32 tokens; FEED_TO_SAME delivers any fixed field as it is)", field,
			       v->dtype);
	}
	*ret = j;
	return 0;
}

static int gpu_cpu(const struct gpu_job *j, const struct feed_view *v, void *dst)
{
	switch (j->kind) {
	case GPU_SAME:
		memcpy(dst, v->data, v->bytes);
		return 0;
	case GPU_TOKENS:
		return j->elem_size == 2 ? feed_convert_tokens_u16_cpu(v->data, j->n, dst) :
					   feed_convert_tokens_u32_cpu(v->data, j->n, dst);
	case GPU_LABELS:
		return feed_mix_labels_cpu(&j->mix, v->data, j->label_type, j->n, dst);
	default: {
		int r = feed_convert_images_cpu(&j->cv, v->data, j->n, j->flip, dst);
		if (!r && j->mixed)
			r = feed_mix_images_cpu(&j->cv, &j->mix, j->n, dst);
		return r;
	}
	}
}

/* The context current now, which must be device's, or else device's
 * primary one, retained (*ret_retained) and made current. */
static int gpu_context(const struct cudrv *cu, struct feed_conn *conn, int device,
		       CUcontext *ret_ctx, CUdevice *ret_dev, bool *ret_retained)
{
	const struct cudrv_api *api = &cu->api;
	CUresult e;

	if ((e = FEED_CU(api, CtxGetCurrent, ret_ctx)) != CUDA_SUCCESS)
		return gpu_fail_cu(conn, cu, e, "cuCtxGetCurrent");
	if (*ret_ctx) {
		if ((e = FEED_CU(api, CtxGetDevice, ret_dev)) != CUDA_SUCCESS)
			return gpu_fail_cu(conn, cu, e, "cuCtxGetDevice");
		if (*ret_dev != device)
			return cl_fail(conn, -EINVAL, "device %d asked, but the current context is "
				       "device %d's", device, *ret_dev);
		return 0;
	}
	if ((e = FEED_CU(api, DeviceGet, ret_dev, device)) != CUDA_SUCCESS)
		return cl_fail(conn, -EINVAL, "no CUDA device %d (%u found)", device,
			       cu->info.num_devices);
	if ((e = FEED_CU(api, DevicePrimaryCtxRetain, ret_ctx, *ret_dev)) != CUDA_SUCCESS)
		return gpu_fail_cu(conn, cu, e, "cuDevicePrimaryCtxRetain");
	if ((e = FEED_CU(api, CtxSetCurrent, *ret_ctx)) != CUDA_SUCCESS) {
		FEED_CU(api, DevicePrimaryCtxRelease, *ret_dev);
		return gpu_fail_cu(conn, cu, e, "cuCtxSetCurrent");
	}
	*ret_retained = true;
	return 0;
}

/* The stream's GPU state, made at its first device call in the context
 * current now (or the device's primary one). */
static int gpu_stream(struct feed_stream *st, struct feed_conn *conn, int device,
		      struct cl_gpu_stream **ret)
{
	const struct cudrv *cu = cudrv_get();
	const struct cudrv_api *api = &cu->api;
	struct cl_gpu_stream *g = cl_stream_hooked(st, CL_HOOK_GPU);
	CUcontext ctx = NULL;
	CUdevice dev;
	CUresult e;
	bool retained = false;
	int r;

	if (!cu->info.usable)
		return cl_fail(conn, -ENODEV, "GPU path not usable: %s", cu->info.reason);
	if ((r = gpu_context(cu, conn, device, &ctx, &dev, &retained)) < 0)
		return r;
	if (g) {
		if (retained) /* ours holds it already */
			FEED_CU(api, DevicePrimaryCtxRelease, dev);
		if (g->ctx != ctx)
			return cl_fail(conn, -EINVAL, "stream %u: its GPU delivery began in another "
				       "context", feed_stream_info(st)->id);
		*ret = g;
		return 0;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return cl_fail(conn, -ENOMEM, "out of memory for GPU delivery");
	g->cu = cu;
	g->ctx = ctx;
	g->device = device;
	g->retained = retained;
	pthread_mutex_init(&g->lock, NULL);
	feed_assert_unlocked("cudrv_kernels_load");
	if ((e = cudrv_kernels_load(cu, &g->k)) != CUDA_SUCCESS)
		goto fail;
	int ro = 0;
	g->read_only = FEED_CU(api, DeviceGetAttribute, &ro,
			       CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, dev) ==
			       CUDA_SUCCESS && ro;
	/* published by the stream: feed_release() on another thread reaches it */
	cl_stream_hook(st, CL_HOOK_GPU, &gpu_hook, g);
	*ret = g;
	return 0;
fail:
	if (retained)
		FEED_CU(api, DevicePrimaryCtxRelease, dev);
	pthread_mutex_destroy(&g->lock);
	free(g);
	return gpu_fail_cu(conn, cu, e, "loading the embedded kernels (cuModuleLoadData)");
}

/* Registers b's data region for DMA unless it already is (once per region). */
static int gpu_register(struct cl_gpu_stream *g, struct feed_conn *conn, const struct feed_batch *b)
{
	void *base;
	size_t len;
	int r = 0;

	cl_batch_region(b, &base, &len);
	feed_mutex_lock(&g->lock);
	bool known = false;
	for (size_t i = 0; i < g->nregions; i++)
		known |= g->regions[i].base == base;
	if (!known)
		r = gpu_grow(&g->regions, &g->cap_regions, g->nregions, sizeof(*g->regions));
	feed_mutex_unlock(&g->lock);
	if (known)
		return 0;
	if (r < 0)
		return cl_fail(conn, -ENOMEM, "out of memory for a region's registration");
	/* The device only reads the region. It is mapped read-write here (the
	 * stream's reader may change its batches in place), so READ_ONLY is
	 * not required: it is a promise, given where the device takes it.
	 * Unlocked: only this thread adds regions, and b (held) keeps it mapped. */
	unsigned flags = g->read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0;
	CUresult e = FEED_CU(&g->cu->api, MemHostRegister, base, len, flags);
	/* refused (or registered by the caller): copies still work, unpinned */
	feed_mutex_lock(&g->lock);
	g->regions[g->nregions++] = (struct gpu_region){base, e == CUDA_SUCCESS};
	feed_mutex_unlock(&g->lock);
	return 0;
}

/* Waits for every copy still in flight from b. feed_next()'s thread, the
 * only one that changes the events: read without the lock. */
static void gpu_wait_batch(struct cl_gpu_stream *g, const struct feed_batch *b)
{
	for (size_t i = 0; i < g->npending; i++)
		if (g->pending[i].b == b && !g->pending[i].done)
			FEED_CU(&g->cu->api, EventSynchronize, g->pending[i].ev);
}

/* The device staging buffer of (b, field), at least size bytes, for a copy
 * on stream. A buffer last filled on another stream may still be read
 * there: b's copies in flight are waited for first (the same stream
 * orders them by itself). */
static int gpu_staging(struct cl_gpu_stream *g, struct feed_conn *conn, const struct feed_batch *b,
		       uint32_t field, size_t size, CUstream stream, CUdeviceptr *ret)
{
	struct gpu_staging *s = NULL;
	CUresult e;
	for (size_t i = 0; i < g->nstaging; i++)
		if (g->staging[i].b == b && g->staging[i].field == field)
			s = &g->staging[i];
	if (!s) {
		if (gpu_grow(&g->staging, &g->cap_staging, g->nstaging, sizeof(*g->staging)) < 0)
			return cl_fail(conn, -ENOMEM, "out of memory for a staging buffer");
		s = &g->staging[g->nstaging++];
		*s = (struct gpu_staging){b, field, 0, 0, stream};
	}
	if (s->stream != stream || s->size < size) {
		gpu_wait_batch(g, b);
		s->stream = stream;
	}
	if (s->size < size) {
		if (s->p)
			FEED_CU(&g->cu->api, MemFree, s->p); /* nothing reads it now: waited for above */
		s->p = 0;
		s->size = 0;
		if ((e = FEED_CU(&g->cu->api, MemAlloc, &s->p, size)) != CUDA_SUCCESS)
			return gpu_fail_cu(conn, g->cu, e, "cuMemAlloc of a staging buffer");
		s->size = size;
	}
	*ret = s->p;
	return 0;
}

/* The copy (and for a conversion, the kernel) of j on stream: straight
 * into dst for GPU_SAME, else through src, the staging buffer (its flags,
 * if any, after the field's bytes at flip_off). */
static CUresult gpu_work(struct cl_gpu_stream *g, const struct gpu_job *j,
			 const struct feed_view *v, CUdeviceptr src, size_t flip_off,
			 CUdeviceptr dst, CUstream stream, const char **what)
{
	const struct cudrv_api *api = &g->cu->api;
	CUresult e;
	feed_assert_unlocked("cudrv_launch"); /* the launches below call the driver too */
	*what = "cuMemcpyHtoDAsync of the field";
	if (j->kind == GPU_SAME)
		return FEED_CU(api, MemcpyHtoDAsync, dst, v->data, v->bytes, stream);
	if ((e = FEED_CU(api, MemcpyHtoDAsync, src, v->data, v->bytes, stream)) != CUDA_SUCCESS)
		return e;
	CUdeviceptr flip = 0;
	if (j->flip) {
		*what = "cuMemcpyHtoDAsync of the flip flags";
		if ((e = FEED_CU(api, MemcpyHtoDAsync, src + flip_off, j->flip, j->n, stream)) !=
		    CUDA_SUCCESS)
			return e;
		flip = src + flip_off;
	}
	*what = "cuLaunchKernel of the conversion";
	if (j->kind == GPU_TOKENS)
		return cudrv_launch_tokens(g->cu, &g->k, j->elem_size, src, j->n, dst, stream);
	if (j->kind == GPU_LABELS) {
		*what = "cuLaunchKernel of the soft labels";
		return cudrv_launch_mix_labels(g->cu, &g->k, &j->mix, src, j->label_type, j->n, dst,
					       stream);
	}
	if ((e = cudrv_launch_images(g->cu, &g->k, &j->cv, src, j->n, flip, dst, stream)) !=
	    CUDA_SUCCESS || !j->mixed)
		return e;
	*what = "cuLaunchKernel of the mix";
	return cudrv_launch_mix(g->cu, &g->k, &j->cv, &j->mix, j->n, dst, stream);
}

/* The job's work and an event on stream; the event joins the pending ones. */
static int gpu_enqueue(struct cl_gpu_stream *g, struct feed_conn *conn, struct feed_batch *b,
		       uint32_t field, const struct feed_view *v, const struct gpu_job *j,
		       void *dst, CUstream stream)
{
	const struct cudrv_api *api = &g->cu->api;
	size_t flip_off = (v->bytes + 15) / 16 * 16;
	CUdeviceptr src = 0;
	const char *what;
	CUevent ev;
	CUresult e;
	int r;

	if ((r = gpu_register(g, conn, b)) < 0 ||
	    (j->kind != GPU_SAME &&
	     (r = gpu_staging(g, conn, b, field, flip_off + (j->flip ? j->n : 0) + !v->bytes,
			      stream, &src)) < 0))
		return r;
	feed_mutex_lock(&g->lock);
	r = gpu_grow(&g->pending, &g->cap_pending, g->npending, sizeof(*g->pending));
	/* room to keep every batch in flight: gpu_keep never allocates */
	if (!r)
		r = gpu_grow(&g->wanted, &g->cap_wanted, g->npending, sizeof(*g->wanted));
	feed_mutex_unlock(&g->lock);
	if (r < 0)
		return cl_fail(conn, -ENOMEM, "out of memory for an event");
	if ((e = FEED_CU(api, EventCreate, &ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
		return gpu_fail_cu(conn, g->cu, e, "cuEventCreate");
	if ((e = gpu_work(g, j, v, src, flip_off, (CUdeviceptr)(uintptr_t)dst, stream, &what)) !=
	    CUDA_SUCCESS)
		r = gpu_fail_cu(conn, g->cu, e, what);
	/* recorded even after a failure: a copy may have been enqueued, and
	 * the slot must not go back before it ran */
	if ((e = FEED_CU(api, EventRecord, ev, stream)) != CUDA_SUCCESS) {
		FEED_CU(api, EventDestroy, ev);
		/* nothing tells when the copy ends: wait for everything on stream */
		CUevent sync;
		if (FEED_CU(api, EventCreate, &sync, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
			if (FEED_CU(api, EventRecord, sync, stream) == CUDA_SUCCESS)
				FEED_CU(api, EventSynchronize, sync);
			FEED_CU(api, EventDestroy, sync);
		}
		return r ? r : gpu_fail_cu(conn, g->cu, e, "cuEventRecord");
	}
	feed_mutex_lock(&g->lock);
	g->pending[g->npending++] = (struct gpu_pending){b, ev, false};
	feed_mutex_unlock(&g->lock);
	return r;
}

FEED_API int feed_batch_to_device(struct feed_batch *b, uint32_t field, void *dst,
				  const struct feed_to_device *to, void *stream)
{
	struct feed_view v;
	struct gpu_job j;
	struct cl_gpu_stream *g = NULL;
	int r;

	if (!b || !to || !dst)
		return -EINVAL;
	struct feed_stream *st = cl_batch_stream(b);
	struct feed_conn *conn = cl_stream_conn(st);
	if (!cl_batch_held(b))
		return cl_fail(conn, -EINVAL, "batch already released");
	if (feed_batch_field(b, field, &v) < 0)
		return cl_fail(conn, -EINVAL, "no field %u (the stream has %u)", field,
			       feed_stream_info(st)->num_fields);
	if ((r = gpu_plan(conn, &v, field, to, &j)) < 0)
		return r;
	if (to->dst_bytes < j.out_bytes)
		return cl_fail(conn, -EINVAL, "field %u: dst holds %zu bytes, the output needs %zu",
			       field, to->dst_bytes, j.out_bytes);
	if (to->device == FEED_DEVICE_CPU)
		return gpu_cpu(&j, &v, dst) < 0 ? cl_fail(conn, -EINVAL, "field %u: conversion "
							    "refused", field) : 0;
	if (to->device < 0)
		return cl_fail(conn, -EINVAL, "device %d: neither a CUDA device nor "
			       "FEED_DEVICE_CPU", to->device);
	if ((r = gpu_stream(st, conn, to->device, &g)) < 0)
		return r;
	return gpu_enqueue(g, conn, b, field, &v, &j, dst, (CUstream)stream);
}

/* ------------------------------------------------------------------ */
/* Pinning for the caller's own copies (feed_stream_pin)               */

struct cl_pin {
	pthread_mutex_t lock;      /* base, n, cap */
	const struct cudrv *cu;
	CUcontext ctx;             /* the device's primary context, retained until
				    * close: registrations live in a context */
	CUdevice dev;
	void **base;               /* registered data regions, each still mapped */
	size_t n, cap;
};

/* Runs cuMemHostRegister / Unregister with p's context current on this
 * thread, then puts back whatever was current. No lock held. */
static CUresult pin_call(struct cl_pin *p, void *base, size_t len, bool reg)
{
	const struct cudrv_api *api = &p->cu->api;
	CUcontext prev = NULL;
	CUresult e;

	FEED_CU(api, CtxGetCurrent, &prev);
	if (prev != p->ctx && (e = FEED_CU(api, CtxSetCurrent, p->ctx)) != CUDA_SUCCESS)
		return e;
	/* PORTABLE: pinned for every context, torch's included */
	e = reg ? FEED_CU(api, MemHostRegister, base, len, CU_MEMHOSTREGISTER_PORTABLE)
		: FEED_CU(api, MemHostUnregister, base);
	if (prev != p->ctx)
		FEED_CU(api, CtxSetCurrent, prev);
	return e;
}

/* Registers the region at base for p, unless it is already; a failure
 * named in conn's message (none when conn is NULL). No lock held across
 * the driver call: only feed_next()'s thread adds regions. */
static int pin_add(struct cl_pin *p, struct feed_conn *conn, void *base, size_t len)
{
	bool known = false;
	int r = 0;

	feed_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n; i++)
		known |= p->base[i] == base;
	if (!known)
		r = gpu_grow(&p->base, &p->cap, p->n, sizeof(*p->base));
	feed_mutex_unlock(&p->lock);
	if (known)
		return 0;
	if (r < 0)
		return conn ? cl_fail(conn, -ENOMEM, "out of memory for a region's registration") :
			      -ENOMEM;
	CUresult e = pin_call(p, base, len, true);
	if (e != CUDA_SUCCESS)
		return conn ? gpu_fail_cu(conn, p->cu, e, "cuMemHostRegister of the stream's data "
					  "region") : -EIO;
	feed_mutex_lock(&p->lock);
	p->base[p->n++] = base;
	feed_mutex_unlock(&p->lock);
	return 0;
}

/* CL_HOOK_PIN map: a reopening mapped a new data region; pinned too
 * (refused: pageable, still correct). */
static void pin_map(void *self, void *base, size_t len)
{
	struct cl_pin *p = self;
	(void)pin_add(p, NULL, base, len);
}

/* CL_HOOK_PIN unmap: unregisters the region at base if it was pinned. */
static void pin_unmap(void *self, void *base)
{
	struct cl_pin *p = self;
	bool found = false;

	feed_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n; i++)
		if (p->base[i] == base) {
			p->base[i] = p->base[--p->n];
			found = true;
			break;
		}
	feed_mutex_unlock(&p->lock);
	if (found)
		pin_call(p, base, 0, false);
}

/* CL_HOOK_PIN close: unregisters every pinned region, frees p. */
static void pin_close(void *self)
{
	struct cl_pin *p = self;

	for (size_t i = 0; i < p->n; i++)
		pin_call(p, p->base[i], 0, false);
	FEED_CU(&p->cu->api, DevicePrimaryCtxRelease, p->dev);
	pthread_mutex_destroy(&p->lock);
	free(p->base);
	free(p);
}

static const struct cl_hook pin_hook = {.map = pin_map, .unmap = pin_unmap, .close = pin_close};

FEED_API int feed_stream_pin(struct feed_stream *st, int device)
{
	if (!st)
		return -EINVAL;
	struct feed_conn *conn = cl_stream_conn(st);
	struct cl_pin *p = cl_stream_hooked(st, CL_HOOK_PIN);
	const struct cudrv *cu = cudrv_get();
	void *base;
	size_t len;
	CUresult e;

	if (!p) {
		/* the driver's entry points, not the kernels: a build without them pins too */
		if (!cu->api.MemHostRegister || !cu->info.num_devices)
			return cl_fail(conn, -ENODEV, "no CUDA driver to pin with: %s",
				       cu->info.reason[0] ? cu->info.reason : "no CUDA device");
		if (device < 0 || (uint32_t)device >= cu->info.num_devices)
			return cl_fail(conn, -EINVAL, "no CUDA device %d (%u found)", device,
				       cu->info.num_devices);
		if (!(p = calloc(1, sizeof(*p))))
			return cl_fail(conn, -ENOMEM, "out of memory for pinning");
		p->cu = cu;
		if ((e = FEED_CU(&cu->api, DeviceGet, &p->dev, device)) != CUDA_SUCCESS ||
		    (e = FEED_CU(&cu->api, DevicePrimaryCtxRetain, &p->ctx, p->dev)) != CUDA_SUCCESS) {
			free(p);
			return gpu_fail_cu(conn, cu, e, "cuDevicePrimaryCtxRetain");
		}
		pthread_mutex_init(&p->lock, NULL);
		/* published by the stream: a releasing thread's unmap reaches it */
		cl_stream_hook(st, CL_HOOK_PIN, &pin_hook, p);
	}
	cl_stream_region(st, &base, &len);
	return pin_add(p, conn, base, len);
}
