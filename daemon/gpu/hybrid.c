/*
 * hybrid.c: hybrid JPEG decode (hybrid.h): the per-stream scheduler and
 * the per-worker nvJPEG decoder.
 *
 * Owns: the share of a stream's images sent to the GPU, the stream's
 * reason for staying on the CPU, and a worker's nvJPEG handle, state,
 * decode parameters, stream and buffers.
 *
 * Threads: the scheduler is atomics only; a decoder is its worker's (one
 * per thread: the builder does not yield to another job while views into
 * its buffer remain). Never holds a lock of feedd's (hyb_stream_run and
 * hyb_dec_free assert it in the lock-checking builds); calls cuMemFree
 * (implicitly synchronising) only in hyb_dec_free and when hyb_buffers
 * outgrows a buffer, on the worker. Never prints: what went wrong goes back
 * in err and into the stream's reason.
 */
#include "hybrid.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudrv.h"
#include "feed_lock.h"
#include "nvjpeg_load.h"

/* ------------------------------------------------------------------ */
/* The per-stream scheduler                                            */

void hyb_sched_init(struct hyb_sched *s, const char *reason)
{
	memset(s->reason, 0, sizeof(s->reason));
	atomic_init(&s->step, 0);
	atomic_init(&s->failed, false);
	atomic_init(&s->claimed, reason != NULL);
	if (reason) {
		snprintf(s->reason, sizeof(s->reason), "%s", reason);
		atomic_store_explicit(&s->failed, true, memory_order_relaxed);
	}
}

uint32_t hyb_sched_gpu_images(struct hyb_sched *s, uint32_t batch, uint32_t ready,
			      uint32_t credits)
{
	/* acquire: pairs with hyb_sched_fail's release (not needed for the
	 * count itself, but a caller that sees 0 may read the reason) */
	if (atomic_load_explicit(&s->failed, memory_order_acquire))
		return 0;
	uint32_t step = atomic_load_explicit(&s->step, memory_order_relaxed), want = step;
	if ((uint64_t)ready * 4 <= credits && step < HYB_STEPS)
		want = step + 1;    /* the reader is catching up with the CPU */
	else if ((uint64_t)ready * 4 >= (uint64_t)credits * 3 && step > 0)
		want = step - 1;    /* the CPU keeps ahead */
	/* relaxed: a heuristic; two workers racing move it by one step once */
	if (want != step)
		atomic_compare_exchange_strong_explicit(&s->step, &step, want, memory_order_relaxed,
							memory_order_relaxed);
	return (uint32_t)((uint64_t)batch * want / HYB_STEPS);
}

void hyb_sched_fail(struct hyb_sched *s, const char *fmt, ...)
{
	/* relaxed: only the winner writes the reason, and publishes it below */
	if (atomic_exchange_explicit(&s->claimed, true, memory_order_relaxed))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
	va_end(ap);
	atomic_store_explicit(&s->step, 0, memory_order_relaxed);
	/* release: the reason is written before anyone sees failed */
	atomic_store_explicit(&s->failed, true, memory_order_release);
}

const char *hyb_sched_reason(const struct hyb_sched *s)
{
	/* acquire: pairs with hyb_sched_fail's release of the reason */
	return atomic_load_explicit(&s->failed, memory_order_acquire) ? s->reason : "";
}

static char hyb_why[400];
static const char *hyb_why_p;
static pthread_once_t hyb_why_once = PTHREAD_ONCE_INIT;

/* The process's reason, composed once: the driver's and nvJPEG's facts
 * are fixed after their first load. */
static void hyb_why_make(void)
{
	const struct cudrv *cu = cudrv_get();

	/* nvJPEG (tens of MB) is loaded only where a GPU could use it */
	if (!cu->info.usable)
		snprintf(hyb_why, sizeof(hyb_why), "no GPU: %s", cu->info.reason);
	else if (!cu->api.MemcpyDtoHAsync || !cu->api.StreamCreate || !cu->api.StreamSynchronize)
		snprintf(hyb_why, sizeof(hyb_why), "the CUDA driver has no cuMemcpyDtoHAsync_v2 "
			 "or no stream calls");
	else if (!njl_get()->usable)
		snprintf(hyb_why, sizeof(hyb_why), "%s", njl_get()->reason);
	else
		return;
	hyb_why_p = hyb_why;
}

const char *hyb_unusable_reason(void)
{
	pthread_once(&hyb_why_once, hyb_why_make);
	return hyb_why_p;
}

const char *hyb_describe(char *buf, size_t cap)
{
	const char *why = hyb_unusable_reason();

	if (why) {
		snprintf(buf, cap, "CPU only: %s", why);
	} else {
		const struct njl *nv = njl_get();
		snprintf(buf, cap, "nvJPEG %d.%d.%d (%s)", nv->version / 1000,
			 nv->version % 1000 / 10, nv->version % 10, nv->path);
	}
	return buf;
}

/* ------------------------------------------------------------------ */
/* The per-worker decoder                                              */

#define HYB_RUN_MAX 64   /* images per hyb_stream_run (a chunk: CACHE_PIN_MAX) */
#define HYB_OLD_MAX 8     /* outgrown device buffers kept until hyb_dec_free */
#define HYB_ALIGN 256u    /* each box's offset in the device buffer */

struct hyb_dec {
	const struct njl *nv;
	const struct cudrv *cu;
	CUdevice dev;
	CUcontext ctx;             /* dev's primary context (retained) */
	CUstream stream;           /* ours, non-blocking: nothing of a client's waits on it */
	CUevent done;              /* recorded after a call's copy; blocking sync: the
				    * worker sleeps while the device works, not spins */
	nvjpegHandle_t h;
	nvjpegJpegState_t st;
	bool hardware;             /* h is the hardware backend's */
	int batch_n, batch_fmt;    /* what the state was last initialised for (0: never) */
	nvjpegDecodeParams_t *params; /* one per image of the largest call */
	uint32_t cap;              /* entries of params and the arrays below */
	const unsigned char **data; /* a call's good images, packed */
	size_t *lens;
	nvjpegImage_t *dst;
	uint32_t *idx;             /* packed k -> the caller's i */
	size_t *off;               /* the caller's i -> its box's offset in the buffers */
	CUdeviceptr buf;           /* the decoded boxes */
	size_t buf_cap;
	CUdeviceptr old[HYB_OLD_MAX]; /* outgrown, freed by hyb_dec_free */
	uint32_t nold;
	uint8_t *host;             /* the boxes copied back */
	size_t host_cap;
};

static int hyb_cu_fail(const struct hyb_dec *d, CUresult e, const char *call, struct feed_err *err)
{
	char name[96];
	return feed_err_set(err, -EIO, "%s failed: %s", call,
			    cudrv_errname(d->cu, e, name, sizeof(name)));
}

static int hyb_nv_fail(nvjpegStatus_t s, const char *call, struct feed_err *err)
{
	return feed_err_set(err, s == NVJPEG_STATUS_ALLOCATOR_FAILURE ? -ENOMEM : -EIO,
			    "%s failed: %s", call, njl_status_name(s));
}

/* The context, the stream, nvJPEG's handle and state. */
static int hyb_dec_open(struct hyb_dec *d, int dev, struct feed_err *err)
{
	const struct cudrv_api *a = &d->cu->api;
	CUresult e;
	nvjpegStatus_t s;

	if ((e = a->DeviceGet(&d->dev, dev)) != CUDA_SUCCESS)
		return feed_err_set(err, -ENODEV, "no CUDA device %d", dev);
	if ((e = a->DevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuDevicePrimaryCtxRetain", err);
	if ((e = a->CtxSetCurrent(d->ctx)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuCtxSetCurrent", err);
	if ((e = a->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuStreamCreate", err);
	if ((e = a->EventCreate(&d->done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)) !=
	    CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuEventCreate", err);
	/* the JPEG engines where the device has them (else ARCH_MISMATCH) */
	s = d->nv->api.CreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &d->h);
	d->hardware = s == NVJPEG_STATUS_SUCCESS;
	if (!d->hardware &&
	    (s = d->nv->api.CreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, NVJPEG_FLAGS_DEFAULT,
				     &d->h)) != NVJPEG_STATUS_SUCCESS) {
		d->h = NULL;
		return hyb_nv_fail(s, "nvjpegCreateEx", err);
	}
	if ((s = d->nv->api.JpegStateCreate(d->h, &d->st)) != NVJPEG_STATUS_SUCCESS) {
		d->st = NULL;
		return hyb_nv_fail(s, "nvjpegJpegStateCreate", err);
	}
	return 0;
}

int hyb_dec_new(const struct njl *nv, const struct cudrv *cu, int dev, struct hyb_dec **ret,
		struct feed_err *err)
{
	assert(nv->usable && cu->info.usable);
	struct hyb_dec *d = calloc(1, sizeof(*d));
	if (!d)
		return feed_err_set(err, -ENOMEM, "out of memory");
	d->nv = nv;
	d->cu = cu;
	d->dev = -1;
	int rc = hyb_dec_open(d, dev, err);
	if (rc < 0) {
		hyb_dec_free(d);
		return rc;
	}
	*ret = d;
	return 0;
}

void hyb_dec_free(struct hyb_dec *d)
{
	feed_assert_unlocked("hyb_dec_free (cuMemFree, cuStreamSynchronize)");
	if (!d)
		return;
	const struct cudrv_api *a = &d->cu->api;
	if (d->ctx)
		(void)a->CtxSetCurrent(d->ctx);
	for (uint32_t i = 0; i < d->cap && d->params; i++)
		if (d->params[i])
			(void)d->nv->api.DecodeParamsDestroy(d->params[i]);
	if (d->st)
		(void)d->nv->api.JpegStateDestroy(d->st);
	if (d->h)
		(void)d->nv->api.Destroy(d->h);
	if (d->stream) {
		(void)a->StreamSynchronize(d->stream);
		(void)a->StreamDestroy(d->stream);
	}
	if (d->done)
		(void)a->EventDestroy(d->done);
	for (uint32_t i = 0; i < d->nold; i++)
		(void)a->MemFree(d->old[i]);
	if (d->buf)
		(void)a->MemFree(d->buf);
	if (d->ctx)
		(void)a->DevicePrimaryCtxRelease(d->dev);
	free(d->params);
	free(d->data);
	free(d->lens);
	free(d->dst);
	free(d->idx);
	free(d->off);
	free(d->host);
	free(d);
}

bool hyb_dec_hardware(const struct hyb_dec *d)
{
	return d->hardware;
}

/* *p grown to n elements of sz bytes (unchanged when that fails). */
static bool hyb_grow(void *p, size_t n, size_t sz)
{
	void *q = realloc(*(void **)p, n * sz);
	if (q)
		*(void **)p = q;
	return q != NULL;
}

/* Room for n images' arrays and decode parameters. */
static int hyb_reserve(struct hyb_dec *d, uint32_t n, struct feed_err *err)
{
	if (n <= d->cap)
		return 0;
	if (!hyb_grow(&d->params, n, sizeof(*d->params)) ||
	    !hyb_grow(&d->data, n, sizeof(*d->data)) || !hyb_grow(&d->lens, n, sizeof(*d->lens)) ||
	    !hyb_grow(&d->dst, n, sizeof(*d->dst)) || !hyb_grow(&d->idx, n, sizeof(*d->idx)) ||
	    !hyb_grow(&d->off, n, sizeof(*d->off)))
		return feed_err_set(err, -ENOMEM, "out of memory for %u images", n);
	for (; d->cap < n; d->cap++) {
		nvjpegStatus_t s = d->nv->api.DecodeParamsCreate(d->h, &d->params[d->cap]);
		if (s != NVJPEG_STATUS_SUCCESS)
			return hyb_nv_fail(s, "nvjpegDecodeParamsCreate", err);
	}
	return 0;
}

/* Room for bytes in the device buffer and the host one. */
static int hyb_buffers(struct hyb_dec *d, size_t bytes, struct feed_err *err)
{
	if (bytes > d->buf_cap) {
		size_t want = bytes > 2 * d->buf_cap ? bytes : 2 * d->buf_cap;
		CUdeviceptr p;
		CUresult e = d->cu->api.MemAlloc(&p, want);
		if (e != CUDA_SUCCESS)
			return hyb_cu_fail(d, e, "cuMemAlloc", err);
		if (d->buf && d->nold == HYB_OLD_MAX) {
			/* rare: more growths than kept; the oldest is long idle */
			(void)d->cu->api.MemFree(d->old[0]);
			memmove(d->old, d->old + 1, (HYB_OLD_MAX - 1) * sizeof(d->old[0]));
			d->nold--;
		}
		if (d->buf)
			d->old[d->nold++] = d->buf;
		d->buf = p;
		d->buf_cap = want;
	}
	if (bytes > d->host_cap) {
		uint8_t *h = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		if (!h)
			return feed_err_set(err, -ENOMEM, "out of memory for %zu decoded bytes", bytes);
		free(d->host);
		d->host = h;
		d->host_cap = bytes;
	}
	return 0;
}

/* Whether the JPEG engines (the hardware backend) decode an image of
 * chroma subsampling sub: baseline or extended sequential, not 4:1:0 or
 * 4:1:1 (nvjpeg.h's NVJPEG_CSS_411, _410, _410V). */
static bool hyb_engine_takes(const void *data, size_t len, int sub)
{
	struct img_info info;
	struct feed_err err;
	return sub != 4 && sub != 5 && sub != 7 && img_probe(data, len, &info, &err) == 0 &&
	       !info.progressive;
}

/* Which images go in the batch (the others are left to the CPU, with
 * why), where each box lands; the bytes needed into *ret_bytes, the
 * batch's size into *ret_m. */
static void hyb_plan(struct hyb_dec *d, const struct hyb_image *im, uint32_t n, uint32_t channels,
		     struct hyb_result *out, uint32_t *ret_m, size_t *ret_bytes)
{
	size_t bytes = 0;
	uint32_t m = 0;

	for (uint32_t i = 0; i < n; i++) {
		int nc = 0, sub = 0, w[NVJPEG_MAX_COMPONENT], h[NVJPEG_MAX_COMPONENT];
		const struct img_box *b = &im[i].box;
		memset(&out[i], 0, sizeof(out[i]));
		nvjpegStatus_t s = d->nv->api.GetImageInfo(d->h, im[i].data, im[i].len, &nc, &sub, w, h);
		if (s != NVJPEG_STATUS_SUCCESS) {
			snprintf(out[i].why, sizeof(out[i].why), "nvjpegGetImageInfo: %s",
				 njl_status_name(s));
			continue;
		}
		if (nc != 1 && nc != 3) {
			/* CMYK/YCCK: the CPU path converts as PIL does */
			snprintf(out[i].why, sizeof(out[i].why), "%d components", nc);
			continue;
		}
		if (d->hardware && !hyb_engine_takes(im[i].data, im[i].len, sub)) {
			/* found here, not by failing the whole batch on the engines */
			snprintf(out[i].why, sizeof(out[i].why),
				 "progressive or 4:1:x: not for the JPEG engines");
			continue;
		}
		if (!b->w || !b->h || b->x + b->w > (uint32_t)w[0] || b->y + b->h > (uint32_t)h[0]) {
			snprintf(out[i].why, sizeof(out[i].why), "box outside the %dx%d image", w[0],
				 h[0]);
			continue;
		}
		d->off[i] = bytes;
		d->idx[m] = i;
		d->data[m] = im[i].data;
		d->lens[m] = im[i].len;
		m++;
		bytes += ((size_t)b->w * b->h * channels + HYB_ALIGN - 1) & ~(size_t)(HYB_ALIGN - 1);
	}
	*ret_m = m;
	*ret_bytes = bytes;
}

/* The batch's parameters and destinations, for output format fmt. */
static int hyb_params(struct hyb_dec *d, const struct hyb_image *im, uint32_t m, uint32_t channels,
		      int fmt, struct feed_err *err)
{
	for (uint32_t k = 0; k < m; k++) {
		uint32_t i = d->idx[k];
		const struct img_box *b = &im[i].box;
		nvjpegStatus_t s = d->nv->api.DecodeParamsSetOutputFormat(d->params[k], fmt);
		if (s == NVJPEG_STATUS_SUCCESS)
			s = d->nv->api.DecodeParamsSetROI(d->params[k], (int)b->x, (int)b->y, (int)b->w,
							  (int)b->h);
		if (s != NVJPEG_STATUS_SUCCESS)
			return hyb_nv_fail(s, "nvjpegDecodeParamsSetROI", err);
		memset(&d->dst[k], 0, sizeof(d->dst[k]));
		d->dst[k].channel[0] = (unsigned char *)(uintptr_t)(d->buf + d->off[i]);
		d->dst[k].pitch[0] = (size_t)b->w * channels;
	}
	return 0;
}

/* m images from packed index k0 as one batched call. */
static nvjpegStatus_t hyb_batch(struct hyb_dec *d, uint32_t k0, uint32_t m, int fmt)
{
	nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
	if (d->batch_n != (int)m || d->batch_fmt != fmt) {
		s = d->nv->api.DecodeBatchedInitialize(d->h, d->st, (int)m, 1, fmt);
		d->batch_n = s == NVJPEG_STATUS_SUCCESS ? (int)m : 0;
		d->batch_fmt = fmt;
	}
	if (s == NVJPEG_STATUS_SUCCESS)
		s = d->nv->api.DecodeBatchedEx(d->h, d->st, d->data + k0, d->lens + k0, d->dst + k0,
					       d->params + k0, (njl_stream_t)d->stream);
	return s;
}

/* After a batch an image failed: each image alone, those nvJPEG refuses
 * left to the CPU. */
static int hyb_singles(struct hyb_dec *d, uint32_t m, int fmt, struct hyb_result *out,
		       struct feed_err *err)
{
	for (uint32_t k = 0; k < m; k++) {
		nvjpegStatus_t s = hyb_batch(d, k, 1, fmt);
		if (s == NVJPEG_STATUS_SUCCESS)
			continue;
		if (!njl_status_is_image(s))
			return hyb_nv_fail(s, "nvjpegDecodeBatchedEx", err);
		struct hyb_result *r = &out[d->idx[k]];
		snprintf(r->why, sizeof(r->why), "nvjpegDecodeBatchedEx: %s", njl_status_name(s));
		d->off[d->idx[k]] = SIZE_MAX;
	}
	return 0;
}

int hyb_decode(struct hyb_dec *d, const struct hyb_image *im, uint32_t n, uint32_t channels,
	       struct hyb_result *out, struct feed_err *err)
{
	const struct cudrv_api *a = &d->cu->api;
	int fmt = channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
	uint32_t m;
	size_t bytes;
	CUresult e;
	int rc;

	if (channels != 1 && channels != 3)
		return feed_err_set(err, -EINVAL, "%u channels: nvJPEG gives 1 or 3", channels);
	if ((e = a->CtxSetCurrent(d->ctx)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuCtxSetCurrent", err);
	if ((rc = hyb_reserve(d, n, err)) < 0)
		return rc;
	hyb_plan(d, im, n, channels, out, &m, &bytes);
	if (m == 0)
		return 0;
	if ((rc = hyb_buffers(d, bytes, err)) < 0 || (rc = hyb_params(d, im, m, channels, fmt, err)) < 0)
		return rc;
	nvjpegStatus_t s = hyb_batch(d, 0, m, fmt);
	if (njl_status_is_image(s))
		rc = hyb_singles(d, m, fmt, out, err);
	else if (s != NVJPEG_STATUS_SUCCESS)
		rc = hyb_nv_fail(s, "nvjpegDecodeBatchedEx", err);
	if (rc < 0)
		return rc;
	if ((e = a->MemcpyDtoHAsync(d->host, d->buf, bytes, d->stream)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuMemcpyDtoHAsync", err);
	/* our own stream: waits for our decode and copy, nothing of a client's;
	 * on a blocking-sync event, so the worker sleeps meanwhile */
	if ((e = a->EventRecord(d->done, d->stream)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuEventRecord", err);
	if ((e = a->EventSynchronize(d->done)) != CUDA_SUCCESS)
		return hyb_cu_fail(d, e, "cuEventSynchronize", err);
	for (uint32_t k = 0; k < m; k++) {
		uint32_t i = d->idx[k];
		if (d->off[i] == SIZE_MAX)
			continue;
		const struct img_box *b = &im[i].box;
		out[i].ok = true;
		out[i].view = (struct img_view){.px = d->host + d->off[i], .w = b->w, .h = b->h,
						.c = channels, .stride = (size_t)b->w * channels};
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* A stream's hybrid decode                                            */

/* The calling worker's decoders, one per device it has decoded for (a
 * worker serving streams on several GPUs keeps each: no remaking at every
 * switch), freed at the thread's end by hyb_tl_key's destructor, or at
 * the worker's next decode once no stream of their device is left
 * (hyb_live). */
struct hyb_tl {
	struct hyb_dec *dec[CUDRV_MAX_DEVICES];
};
static _Thread_local struct hyb_tl hyb_tl;
static pthread_key_t hyb_tl_key;
static pthread_once_t hyb_tl_once = PTHREAD_ONCE_INIT;
/* relaxed: the hybrid streams of each device (hyb_stream_init to
 * hyb_stream_fini); a hint for freeing idle decoders, which orders nothing */
static _Atomic uint32_t hyb_live[CUDRV_MAX_DEVICES];

static void hyb_tl_free(void *p)
{
	struct hyb_tl *t = p;
	for (int i = 0; i < CUDRV_MAX_DEVICES; i++) {
		hyb_dec_free(t->dec[i]);
		t->dec[i] = NULL;
	}
}

static void hyb_tl_make_key(void)
{
	(void)pthread_key_create(&hyb_tl_key, hyb_tl_free);
}

static bool hyb_dev_ok(int dev)
{
	return dev >= 0 && dev < CUDRV_MAX_DEVICES;
}

void hyb_stream_init(struct hyb_stream *s, int dev)
{
	hyb_sched_init(&s->sched, hyb_unusable_reason());
	s->dev = dev;
	if (hyb_dev_ok(dev))
		atomic_fetch_add_explicit(&hyb_live[dev], 1, memory_order_relaxed);
}

void hyb_stream_fini(struct hyb_stream *s)
{
	if (hyb_dev_ok(s->dev))
		atomic_fetch_sub_explicit(&hyb_live[s->dev], 1, memory_order_relaxed);
	s->dev = -1;
}

/* This worker's decoder for dev, made if need be; its decoders of devices
 * no stream uses any more are freed first. */
static struct hyb_dec *hyb_tl_get(int dev, struct feed_err *err)
{
	if (!hyb_dev_ok(dev)) {
		feed_err_set(err, -ENODEV, "device %d: feedd decodes on the first %d", dev,
			     CUDRV_MAX_DEVICES);
		return NULL;
	}
	for (int i = 0; i < CUDRV_MAX_DEVICES; i++)
		if (i != dev && hyb_tl.dec[i] &&
		    atomic_load_explicit(&hyb_live[i], memory_order_relaxed) == 0) {
			hyb_dec_free(hyb_tl.dec[i]);
			hyb_tl.dec[i] = NULL;
		}
	if (hyb_tl.dec[dev])
		return hyb_tl.dec[dev];
	pthread_once(&hyb_tl_once, hyb_tl_make_key);
	(void)pthread_setspecific(hyb_tl_key, &hyb_tl);
	struct hyb_dec *d;
	if (hyb_dec_new(njl_get(), cudrv_get(), dev, &d, err) < 0)
		return NULL;
	hyb_tl.dec[dev] = d;
	return d;
}

uint32_t hyb_stream_run(void *arg, const struct bld_pre_image *im, uint32_t n, uint32_t c,
			struct aug_pre *out)
{
	feed_assert_unlocked("hybrid decode (nvJPEG, the CUDA driver)");
	struct hyb_stream *s = arg;
	struct hyb_image hi[HYB_RUN_MAX] = {0};
	struct hyb_result res[HYB_RUN_MAX];
	struct feed_err err = {0};
	uint32_t got = 0;

	if (n > HYB_RUN_MAX)
		n = HYB_RUN_MAX;
	struct hyb_dec *d = hyb_tl_get(s->dev, &err);
	if (!d) {
		hyb_sched_fail(&s->sched, "nvJPEG on GPU %d: %s", s->dev, err.msg);
		return 0;
	}
	for (uint32_t k = 0; k < n; k++)
		hi[k] = (struct hyb_image){im[k].data, im[k].len, im[k].box};
	if (hyb_decode(d, hi, n, c, res, &err) < 0) {
		hyb_sched_fail(&s->sched, "nvJPEG on GPU %d: %s", s->dev, err.msg);
		return 0;
	}
	for (uint32_t k = 0; k < n; k++)
		if (res[k].ok) {
			out[k].view = res[k].view;
			got++;
		}
	return got;
}

const char *hyb_stream_describe(const struct hyb_stream *s, char *buf, size_t cap)
{
	const char *why = hyb_sched_reason(&s->sched);
	/* relaxed: a figure for people */
	uint32_t step = atomic_load_explicit(&s->sched.step, memory_order_relaxed);

	if (*why)
		snprintf(buf, cap, "CPU: %s", why);
	else
		snprintf(buf, cap, "nvJPEG: %u/%u of each batch", step, HYB_STEPS);
	return buf;
}
