/*
 * fake_cuda.c: a test double of the CUDA driver entry points libfeedclient
 * loads (kernels/cudrv.h), for tests on machines without a GPU; see
 * fake_cuda.h. Records every call in struct fake_cuda_stats. Not thread-
 * safe beyond what the tests need (one thread drives it).
 */
#include "fake_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

struct fake_event {
	int recorded, complete;
	struct fake_event *next;
};

struct fake_func {
	char name[64];
};

static struct fake_cuda_stats stats;
static struct fake_event *events;
static int fake_version = 13000, fake_devices = 1, fake_ro, fake_init_result;
static int fake_ctx_obj;
static void *current_ctx;
static struct fake_func funcs[8];
static int nfuncs;

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

EXPORT const struct fake_cuda_stats *fake_cuda_stats(void)
{
	return &stats;
}

EXPORT void fake_cuda_complete_events(void)
{
	for (struct fake_event *e = events; e; e = e->next)
		if (e->recorded && !e->complete) {
			e->complete = 1;
			stats.events_pending--;
		}
}

EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	stats.inits++;
	fake_version = env_int("FAKE_CUDA_VERSION", 13000);
	fake_devices = env_int("FAKE_CUDA_DEVICES", 1);
	fake_ro = env_int("FAKE_CUDA_RO", 0);
	fake_init_result = env_int("FAKE_CUDA_INIT", 0);
	return fake_init_result;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = env_int("FAKE_CUDA_VERSION", 13000);
	return 0;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
	switch (e) {
	case 0: *s = "CUDA_SUCCESS"; return 0;
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 999: *s = "CUDA_ERROR_UNKNOWN"; return 0;
	default: return 1;
	}
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = fake_devices;
	return 0;
}

EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= fake_devices)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*d = ordinal;
	return 0;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int d)
{
	snprintf(name, (size_t)len, "Fake GPU %d (test double)", d);
	return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
	(void)d;
	switch (attr) {
	case 75: *v = 9; return 0;  /* compute capability 9.0 */
	case 76: *v = 0; return 0;
	case 113: *v = fake_ro; return 0;
	default: *v = 0; return 0;
	}
}

EXPORT CUresult cuCtxGetCurrent(void **c)
{
	*c = current_ctx;
	return 0;
}

EXPORT CUresult cuCtxSetCurrent(void *c)
{
	current_ctx = c;
	return 0;
}

EXPORT CUresult cuCtxGetDevice(int *d)
{
	*d = 0;
	return current_ctx ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **c, int d)
{
	(void)d;
	*c = &fake_ctx_obj;
	return 0;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
	(void)d;
	return 0;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	stats.registers++;
	stats.last_register_ptr = p;
	stats.last_register_bytes = n;
	stats.last_register_flags = flags;
	return 0;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	(void)p;
	stats.unregisters++;
	return 0;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	void *m = malloc(n);
	if (!m)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	stats.allocs++;
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	stats.frees++;
	free((void *)(uintptr_t)p);
	return 0;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream)
{
	(void)stream;
	stats.copies++;
	stats.copied_bytes += n;
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}

EXPORT CUresult cuEventCreate(struct fake_event **e, unsigned flags)
{
	(void)flags;
	struct fake_event *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return 2;
	ev->next = events;
	events = ev;
	stats.events_created++;
	*e = ev;
	return 0;
}

EXPORT CUresult cuEventRecord(struct fake_event *e, void *stream)
{
	(void)stream;
	if (!e->recorded || e->complete)
		stats.events_pending++;
	e->recorded = 1;
	e->complete = 0;
	return 0;
}

EXPORT CUresult cuEventQuery(struct fake_event *e)
{
	return !e->recorded || e->complete ? 0 : 600; /* CUDA_ERROR_NOT_READY */
}

EXPORT CUresult cuEventSynchronize(struct fake_event *e)
{
	stats.syncs++;
	if (e->recorded && !e->complete) {
		e->complete = 1;
		stats.events_pending--;
	}
	return 0;
}

EXPORT CUresult cuEventDestroy_v2(struct fake_event *e)
{
	struct fake_event **p = &events;
	while (*p && *p != e)
		p = &(*p)->next;
	if (!*p)
		return 400; /* CUDA_ERROR_INVALID_HANDLE */
	*p = e->next;
	if (e->recorded && !e->complete)
		stats.events_pending--;
	free(e);
	stats.events_destroyed++;
	return 0;
}

EXPORT CUresult cuModuleLoadData(void **m, const void *image)
{
	uint32_t magic;
	if (!image)
		return 1;
	memcpy(&magic, image, sizeof(magic));
	if (magic != 0xBA55ED50u) /* a fatbin's header */
		return 200;       /* CUDA_ERROR_INVALID_IMAGE */
	stats.module_loads++;
	*m = &stats;
	return 0;
}

EXPORT CUresult cuModuleUnload(void *m)
{
	(void)m;
	return 0;
}

EXPORT CUresult cuModuleGetFunction(struct fake_func **f, void *m, const char *name)
{
	(void)m;
	if (nfuncs == 8 || strlen(name) >= sizeof(funcs[0].name))
		return 500; /* CUDA_ERROR_NOT_FOUND */
	snprintf(funcs[nfuncs].name, sizeof(funcs[0].name), "%s", name);
	*f = &funcs[nfuncs++];
	return 0;
}

/* Runs the CPU twin of the kernel named f on "device" (host) memory. */
EXPORT CUresult cuLaunchKernel(struct fake_func *f, unsigned gx, unsigned gy, unsigned gz,
			       unsigned bx, unsigned by, unsigned bz, unsigned shmem, void *stream,
			       void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)stream;
	(void)extra;
	stats.launches++;
	if (!strncmp(f->name, "feed_k_images_", 14)) {
		const struct feed_convert *cv = params[0];
		const uint8_t *src = (const uint8_t *)(uintptr_t) * (CUdeviceptr *)params[1];
		size_t n = *(size_t *)params[2];
		const uint8_t *flip = (const uint8_t *)(uintptr_t) * (CUdeviceptr *)params[3];
		void *dst = (void *)(uintptr_t) * (CUdeviceptr *)params[4];
		static const char *const dt[] = {"f32", "f16", "bf16"};
		if ((unsigned)cv->dtype > 2 || strcmp(f->name + 14, dt[cv->dtype]))
			return 1; /* the kernel does not match the conversion */
		return feed_convert_images_cpu(cv, src, n, flip, dst) ? 1 : 0;
	}
	const void *src = (const void *)(uintptr_t) * (CUdeviceptr *)params[0];
	size_t n = *(size_t *)params[1];
	int64_t *dst = (int64_t *)(uintptr_t) * (CUdeviceptr *)params[2];
	if (!strcmp(f->name, "feed_k_tokens_u16"))
		return feed_convert_tokens_u16_cpu(src, n, dst) ? 1 : 0;
	if (!strcmp(f->name, "feed_k_tokens_u32"))
		return feed_convert_tokens_u32_cpu(src, n, dst) ? 1 : 0;
	return 1;
}
