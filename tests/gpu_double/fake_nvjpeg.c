/*
 * fake_nvjpeg.c: the test double of nvJPEG, a shared library exporting the
 * entry points feedd loads (daemon/gpu/nvjpeg_load.h), loaded in their
 * place through FEED_NVJPEG_LIBRARY. It is not a GPU decoder: it decodes
 * with feedd's own CPU decoder (core/image.h, libjpeg-turbo) at full
 * scale, so what it writes is checkable bit for bit against the CPU path's
 * full-scale decode of the same box. It writes the output where the
 * nvjpegImage_t points: under the CUDA driver's double (fake_cuda.c)
 * device memory is host memory, so that is where the caller's device
 * buffer is.
 *
 * Batched decode fails as a whole, as nvJPEG's does: one bad image in
 * a batch makes nvjpegDecodeBatchedEx return that image's status (the
 * others may or may not have been written).
 *
 * Set up through the environment, read at each nvjpegCreateEx:
 *   FAKE_NVJPEG_VERSION    "major.minor.patch" nvjpegGetProperty reports
 *                          (default 13.0.1)
 *   FAKE_NVJPEG_CREATE     the status nvjpegCreateEx returns (default 0)
 *   FAKE_NVJPEG_HARDWARE   1: the hardware backend exists (an A100/H100's
 *                          JPEG engines, baseline only: a progressive image
 *                          fails its batch with NVJPEG_STATUS_JPEG_NOT_SUPPORTED,
 *                          as there); default: nvjpegCreateEx with
 *                          NVJPEG_BACKEND_HARDWARE fails with
 *                          NVJPEG_STATUS_ARCH_MISMATCH, as on other GPUs
 *   FAKE_NVJPEG_FAIL_AFTER N: nvjpegDecodeBatchedEx calls after the first N
 *                          fail with NVJPEG_STATUS_EXECUTION_FAILED (a
 *                          device fault); default: never
 *   FAKE_NVJPEG_STATS      a file: the counters live there (created and
 *                          zeroed at the first call: feedd's load), for another
 *                          process (a test reading feedd's) to map
 * fake_nvjpeg_stats() (dlsym on the same handle) says what it saw.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "image.h"

#define EXPORT __attribute__((visibility("default")))

typedef int nvjpegStatus_t;

enum {
	ST_SUCCESS = 0,
	ST_NOT_INITIALIZED = 1,
	ST_INVALID_PARAMETER = 2,
	ST_BAD_JPEG = 3,
	ST_JPEG_NOT_SUPPORTED = 4,
	ST_EXECUTION_FAILED = 6,
	ST_ARCH_MISMATCH = 7,
};
#define BACKEND_HARDWARE 3
#define OUTPUT_Y 2
#define OUTPUT_RGBI 5

typedef struct {
	unsigned char *channel[4];
	size_t pitch[4];
} nvjpegImage_t;

/* What the double saw; read with fake_nvjpeg_stats(). */
struct fake_nvjpeg_stats {
	int creates;          /* nvjpegCreateEx that succeeded */
	int hardware_creates; /* ... with the hardware backend */
	int batched_calls;    /* nvjpegDecodeBatchedEx */
	int images_decoded;   /* images written */
	int roi_decodes;      /* ... of a region, not the whole image */
	int bad_images;       /* images it refused (bad or unsupported) */
	int device_faults;    /* calls failed by FAKE_NVJPEG_FAIL_AFTER */
	int destroys;         /* nvjpegDestroy (last: older copies of this layout
			       * in the tests stop before it) */
};

static struct fake_nvjpeg_stats local_stats;
static struct fake_nvjpeg_stats *stats = &local_stats;
static pthread_once_t stats_once = PTHREAD_ONCE_INIT;
#define ADD(f) atomic_fetch_add_explicit((_Atomic int *)&stats->f, 1, memory_order_relaxed)

/* FAKE_NVJPEG_STATS=file: the counters live there, for another process */
static void stats_map(void)
{
	const char *path = getenv("FAKE_NVJPEG_STATS");
	if (!path || !*path)
		return;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	void *m = MAP_FAILED;
	if (ftruncate(fd, sizeof(*stats)) == 0)
		m = mmap(NULL, sizeof(*stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED)
		stats = m;
}

struct nvjpegHandle {
	int backend;
	long fail_after;     /* -1: never */
};
struct nvjpegJpegState {
	int batch, fmt;
	long calls;          /* nvjpegDecodeBatchedEx on this state */
};
struct nvjpegDecodeParams {
	int fmt;
	int x, y, w, h;      /* w < 0: the whole image */
};

EXPORT const struct fake_nvjpeg_stats *fake_nvjpeg_stats(void)
{
	pthread_once(&stats_once, stats_map);
	return stats;
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

EXPORT nvjpegStatus_t nvjpegGetProperty(int type, int *value)
{
	const char *v = getenv("FAKE_NVJPEG_VERSION");
	int p[3] = {13, 0, 1};
	pthread_once(&stats_once, stats_map);
	if (v && *v && sscanf(v, "%d.%d.%d", &p[0], &p[1], &p[2]) != 3)
		return ST_INVALID_PARAMETER;
	if (type < 0 || type > 2 || !value)
		return ST_INVALID_PARAMETER;
	*value = p[type];
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegCreateEx(int backend, void *dev_alloc, void *pinned_alloc,
				     unsigned flags, struct nvjpegHandle **h)
{
	(void)dev_alloc;
	(void)pinned_alloc;
	(void)flags;
	pthread_once(&stats_once, stats_map);
	int st = env_int("FAKE_NVJPEG_CREATE", 0);
	if (st != ST_SUCCESS)
		return st;
	if (backend == BACKEND_HARDWARE && !env_int("FAKE_NVJPEG_HARDWARE", 0))
		return ST_ARCH_MISMATCH;
	struct nvjpegHandle *n = calloc(1, sizeof(*n));
	if (!n)
		return 5; /* NVJPEG_STATUS_ALLOCATOR_FAILURE */
	n->backend = backend;
	n->fail_after = env_int("FAKE_NVJPEG_FAIL_AFTER", -1);
	ADD(creates);
	if (backend == BACKEND_HARDWARE)
		ADD(hardware_creates);
	*h = n;
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDestroy(struct nvjpegHandle *h)
{
	if (h)
		ADD(destroys);
	free(h);
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegJpegStateCreate(struct nvjpegHandle *h, struct nvjpegJpegState **s)
{
	if (!h || !s)
		return ST_INVALID_PARAMETER;
	*s = calloc(1, sizeof(**s));
	return *s ? ST_SUCCESS : 5;
}

EXPORT nvjpegStatus_t nvjpegJpegStateDestroy(struct nvjpegJpegState *s)
{
	free(s);
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegGetImageInfo(struct nvjpegHandle *h, const unsigned char *data,
					 size_t len, int *ncomp, int *subsampling, int *widths,
					 int *heights)
{
	struct img_info info;
	struct feed_err err = {0};
	if (!h)
		return ST_NOT_INITIALIZED;
	if (img_probe(data, len, &info, &err) < 0 || info.format != IMG_FORMAT_JPEG)
		return ST_BAD_JPEG;
	*ncomp = (int)info.channels;
	*subsampling = info.channels == 1 ? 6 : 2; /* GRAY, else "4:2:0" (not modelled) */
	for (int i = 0; i < 4; i++)
		widths[i] = heights[i] = 0;
	widths[0] = (int)info.width;
	heights[0] = (int)info.height;
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeParamsCreate(struct nvjpegHandle *h,
					       struct nvjpegDecodeParams **p)
{
	if (!h || !p)
		return ST_INVALID_PARAMETER;
	if (!(*p = calloc(1, sizeof(**p))))
		return 5;
	(*p)->fmt = OUTPUT_RGBI;
	(*p)->w = (*p)->h = -1;
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeParamsDestroy(struct nvjpegDecodeParams *p)
{
	free(p);
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeParamsSetOutputFormat(struct nvjpegDecodeParams *p, int fmt)
{
	if (!p || (fmt != OUTPUT_RGBI && fmt != OUTPUT_Y))
		return ST_INVALID_PARAMETER; /* the double does these two only */
	p->fmt = fmt;
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeParamsSetROI(struct nvjpegDecodeParams *p, int x, int y, int w,
					       int h)
{
	if (!p || x < 0 || y < 0)
		return ST_INVALID_PARAMETER;
	p->x = x;
	p->y = y;
	p->w = w;
	p->h = h;
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeBatchedInitialize(struct nvjpegHandle *h,
						    struct nvjpegJpegState *s, int n,
						    int max_cpu_threads, int fmt)
{
	(void)max_cpu_threads;
	if (!h || !s || n < 1)
		return ST_INVALID_PARAMETER;
	s->batch = n;
	s->fmt = fmt;
	return ST_SUCCESS;
}

/* One image into dst, as p says, with the CPU decoder at full scale. */
static nvjpegStatus_t decode_one(const struct nvjpegHandle *h, const unsigned char *data,
				 size_t len, const nvjpegImage_t *dst,
				 const struct nvjpegDecodeParams *p)
{
	struct img_info info;
	struct feed_err err = {0};
	if (img_probe(data, len, &info, &err) < 0 || info.format != IMG_FORMAT_JPEG)
		return ST_BAD_JPEG;
	if (h->backend == BACKEND_HARDWARE && info.progressive)
		return ST_JPEG_NOT_SUPPORTED; /* the engines take baseline only */
	struct img_box box = {0, 0, info.width, info.height};
	if (p->w > 0 && p->h > 0)
		box = (struct img_box){(uint32_t)p->x, (uint32_t)p->y, (uint32_t)p->w, (uint32_t)p->h};
	if (box.x + box.w > info.width || box.y + box.h > info.height)
		return ST_INVALID_PARAMETER;
	uint32_t c = p->fmt == OUTPUT_Y ? 1 : 3;
	struct img_limits lim = {info.width, info.height, 0};
	struct img_decoder *dec;
	if (img_decoder_new(&lim, c, &dec, &err) < 0)
		return 5;
	struct img_decoded d;
	int rc = img_decode(dec, data, len, &box, 1, &d, &err);
	if (rc == 0) {
		const uint8_t *src = d.view.px + (size_t)d.box_y * d.view.stride +
				     (size_t)d.box_x * c;
		for (uint32_t r = 0; r < box.h; r++)
			memcpy(dst->channel[0] + r * dst->pitch[0], src + r * d.view.stride,
			       (size_t)box.w * c);
	}
	img_decoder_free(dec);
	if (rc < 0)
		return rc == -ENOTSUP ? ST_JPEG_NOT_SUPPORTED : ST_BAD_JPEG;
	ADD(images_decoded);
	if (p->w > 0)
		ADD(roi_decodes);
	return ST_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeBatchedEx(struct nvjpegHandle *h, struct nvjpegJpegState *s,
					    const unsigned char *const *data, const size_t *lens,
					    nvjpegImage_t *dst, struct nvjpegDecodeParams **params,
					    void *stream)
{
	(void)stream;
	if (!h || !s || !s->batch)
		return ST_NOT_INITIALIZED;
	ADD(batched_calls);
	if (h->fail_after >= 0 && s->calls++ >= h->fail_after) {
		ADD(device_faults);
		return ST_EXECUTION_FAILED;
	}
	nvjpegStatus_t first = ST_SUCCESS;
	for (int i = 0; i < s->batch; i++) {
		if (params[i]->fmt != s->fmt)
			return ST_INVALID_PARAMETER;
		nvjpegStatus_t st = decode_one(h, data[i], lens[i], &dst[i], params[i]);
		if (st != ST_SUCCESS) {
			ADD(bad_images);
			if (first == ST_SUCCESS)
				first = st;
		}
	}
	return first;
}
