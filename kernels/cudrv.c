/*
 * cudrv.c: the CUDA driver loaded at run time (cudrv.h), for libfeedclient
 * and feedd alike.
 *
 * Owns: the process's one dlopen of libcuda.so.1 (or FEED_CUDA_DRIVER),
 * the resolved entry points and the facts found at load: driver version,
 * devices and their UUIDs, whether the GPU path is usable, with the reason
 * in words when not (no driver library, a missing entry point, cuInit's
 * error, a driver older than the kernels need, no device, no kernels built
 * in), and whether CUDA IPC is (its entry points, stream memory
 * operations included, unified addressing).
 *
 * Threads: loading runs once (pthread_once) on the first thread that asks;
 * the result is read-only afterwards. The library stays loaded for the
 * life of the process (a driver is not safely unloaded). Never prints.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "cudrv.h"
#include "mix.h"

#define CU_LIBRARY "libcuda.so.1"

static struct cudrv cu_state;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

const char *cudrv_errname(const struct cudrv *cu, CUresult e, char *buf, size_t cap)
{
	const char *name = NULL;
	if (!cu->api.GetErrorName || cu->api.GetErrorName(e, &name) != CUDA_SUCCESS || !name)
		name = "CUDA_ERROR_UNKNOWN";
	snprintf(buf, cap, "%s (%d)", name, e);
	return buf;
}

static void cu_unusable(struct cudrv *cu, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void cu_unusable(struct cudrv *cu, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cu->info.reason, sizeof(cu->info.reason), fmt, ap);
	va_end(ap);
	cu->info.usable = false;
}

struct cu_sym {
	const char *name;
	size_t off;
};
#define S(field, name) {name, offsetof(struct cudrv_api, field)}

/* The entry points every use needs. */
static const struct cu_sym cu_syms[] = {
	S(Init, "cuInit"),
	S(DriverGetVersion, "cuDriverGetVersion"),
	S(GetErrorName, "cuGetErrorName"),
	S(DeviceGetCount, "cuDeviceGetCount"),
	S(DeviceGet, "cuDeviceGet"),
	S(DeviceGetName, "cuDeviceGetName"),
	S(DeviceGetAttribute, "cuDeviceGetAttribute"),
	S(CtxGetCurrent, "cuCtxGetCurrent"),
	S(CtxSetCurrent, "cuCtxSetCurrent"),
	S(CtxGetDevice, "cuCtxGetDevice"),
	S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	S(MemHostRegister, "cuMemHostRegister_v2"),
	S(MemHostUnregister, "cuMemHostUnregister"),
	S(MemAlloc, "cuMemAlloc_v2"),
	S(MemFree, "cuMemFree_v2"),
	S(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	S(EventCreate, "cuEventCreate"),
	S(EventRecord, "cuEventRecord"),
	S(EventQuery, "cuEventQuery"),
	S(EventSynchronize, "cuEventSynchronize"),
	S(EventDestroy, "cuEventDestroy_v2"),
	S(ModuleLoadData, "cuModuleLoadData"),
	S(ModuleUnload, "cuModuleUnload"),
	S(ModuleGetFunction, "cuModuleGetFunction"),
	S(LaunchKernel, "cuLaunchKernel"),
};

/* CUDA IPC's (optional: info.ipc). */
static const struct cu_sym cu_ipc_syms[] = {
	S(IpcGetMemHandle, "cuIpcGetMemHandle"),
	S(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
	S(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
	S(IpcGetEventHandle, "cuIpcGetEventHandle"),
	S(IpcOpenEventHandle, "cuIpcOpenEventHandle"),
	S(StreamCreate, "cuStreamCreate"),
	S(StreamDestroy, "cuStreamDestroy_v2"),
	S(StreamWaitEvent, "cuStreamWaitEvent"),
	S(StreamSynchronize, "cuStreamSynchronize"),
	S(DeviceGetUuid, "cuDeviceGetUuid_v2"),
	S(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	S(StreamWriteValue32, "cuStreamWriteValue32_v2"),
	S(StreamWaitValue32, "cuStreamWaitValue32_v2"),
};
/* Each on its own, NULL when absent (cudrv_api says who needs it). */
static const struct cu_sym cu_opt_syms[] = {
	S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
};
#undef S

/* Resolves the n entry points of syms into a; the name of the first one
 * missing (then nothing of syms is set), or NULL. */
static const char *cu_resolve(void *lib, const struct cu_sym *syms, size_t n, struct cudrv_api *a)
{
	void *p[sizeof(cu_syms) / sizeof(cu_syms[0])];
	for (size_t i = 0; i < n; i++)
		if (!(p[i] = dlsym(lib, syms[i].name)))
			return syms[i].name;
	/* POSIX: a data pointer from dlsym converts to a function pointer */
	for (size_t i = 0; i < n; i++)
		memcpy((char *)a + syms[i].off, &p[i], sizeof(p[i]));
	return NULL;
}

/* The devices' names and compute capabilities into cu->info. */
static int cu_devices(struct cudrv *cu)
{
	char err[96];
	int n = 0;
	CUresult e = cu->api.DeviceGetCount(&n);
	if (e != CUDA_SUCCESS) {
		cu_unusable(cu, "cuDeviceGetCount failed: %s", cudrv_errname(cu, e, err, sizeof(err)));
		return -1;
	}
	cu->info.num_devices = n > 0 ? (uint32_t)n : 0;
	for (int i = 0; i < n && i < CUDRV_MAX_DEVICES; i++) {
		struct cudrv_device *d = &cu->info.devices[i];
		CUdevice dev;
		if (cu->api.DeviceGet(&dev, i) != CUDA_SUCCESS)
			continue;
		if (cu->api.DeviceGetName(d->name, sizeof(d->name), dev) != CUDA_SUCCESS)
			snprintf(d->name, sizeof(d->name), "device %d", i);
		d->name[sizeof(d->name) - 1] = '\0';
		cu->api.DeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		cu->api.DeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
		int ua = 0, ipc_ev = 0;
		CUuuid u;
		if (cu->api.DeviceGetUuid && cu->api.DeviceGetUuid(&u, dev) == CUDA_SUCCESS)
			memcpy(d->uuid, u.bytes, sizeof(d->uuid));
		d->ipc = cu->api.DeviceGetUuid &&
			 cu->api.DeviceGetAttribute(&ua, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev) ==
				 CUDA_SUCCESS && ua &&
			 cu->api.DeviceGetAttribute(&ipc_ev, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED,
						    dev) == CUDA_SUCCESS && ipc_ev;
	}
	return 0;
}

/* After cuInit: the devices, and whether the driver (version v, no_ipc:
 * the IPC symbol it lacks, or NULL) and the build make CUDA usable. */
static void cu_settle(struct cudrv *cu, int v, const char *no_ipc)
{
	if (cu_devices(cu) < 0)
		return;
	if (v < CUDRV_DRIVER_NEEDED) {
		cu_unusable(cu,
			    "driver %d.%d too old: the kernels need CUDA %d.%d (driver r580) or newer; "
			    "converting on the CPU",
			    v / 1000, v % 1000 / 10, CUDRV_DRIVER_NEEDED / 1000,
			    CUDRV_DRIVER_NEEDED % 1000 / 10);
		return;
	}
	if (!cu->info.num_devices) {
		cu_unusable(cu, "no CUDA device");
		return;
	}
	if (!cu->info.kernels) {
		cu_unusable(cu, "built without CUDA kernels (no nvcc at build time); converting on the CPU");
		return;
	}
	cu->info.usable = true;
	cu->info.ipc = !no_ipc;
	for (uint32_t i = 0; i < cu->info.num_devices && i < CUDRV_MAX_DEVICES; i++)
		if (cu->info.devices[i].ipc)
			return;
	if (!no_ipc) {
		cu->info.ipc = false;
		snprintf(cu->info.ipc_reason, sizeof(cu->info.ipc_reason),
			 "no device supports IPC events with unified addressing");
	}
}

static void cu_load(void)
{
	struct cudrv *cu = &cu_state;
	const char *path = getenv("FEED_CUDA_DRIVER");
	char err[96];

	cu->info.driver_needed = CUDRV_DRIVER_NEEDED;
	cu->info.kernels = cudrv_fatbin() != NULL;
	if (!path || !*path)
		path = CU_LIBRARY;
	/* LOCAL: its symbols stay out of the host's namespace */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		cu_unusable(cu, "%s not found (no NVIDIA driver): %s; converting on the CPU", path,
			    why ? why : "dlopen failed");
		return;
	}
	const char *missing = cu_resolve(lib, cu_syms, sizeof(cu_syms) / sizeof(cu_syms[0]), &cu->api);
	if (missing) {
		memset(&cu->api, 0, sizeof(cu->api));
		cu_unusable(cu, "%s has no %s (driver too old or not a CUDA driver)", path, missing);
		return; /* lib stays loaded: unloading a driver is not safe */
	}
	const char *no_ipc = cu_resolve(lib, cu_ipc_syms, sizeof(cu_ipc_syms) / sizeof(cu_ipc_syms[0]),
					&cu->api);
	if (no_ipc)
		snprintf(cu->info.ipc_reason, sizeof(cu->info.ipc_reason),
			 "%s has no %s: no CUDA IPC", path, no_ipc);
	for (size_t i = 0; i < sizeof(cu_opt_syms) / sizeof(cu_opt_syms[0]); i++)
		(void)cu_resolve(lib, &cu_opt_syms[i], 1, &cu->api);
	int v = 0;
	if (cu->api.DriverGetVersion(&v) == CUDA_SUCCESS)
		cu->info.driver_version = v;
	CUresult e = cu->api.Init(0);
	if (e != CUDA_SUCCESS) {
		cu_unusable(cu, "cuInit failed: %s%s", cudrv_errname(cu, e, err, sizeof(err)),
			    e == CUDA_ERROR_NO_DEVICE ? ": no CUDA device" : "");
		return;
	}
	cu_settle(cu, v, no_ipc);
}

const struct cudrv *cudrv_get(void)
{
	pthread_once(&cu_once, cu_load);
	return &cu_state;
}

int cudrv_device_by_uuid(const struct cudrv *cu, const uint8_t uuid[16])
{
	for (uint32_t i = 0; i < cu->info.num_devices && i < CUDRV_MAX_DEVICES; i++)
		if (!memcmp(cu->info.devices[i].uuid, uuid, 16))
			return (int)i;
	return -1;
}

/* ------------------------------------------------------------------ */
/* The embedded kernels                                                */

#define CU_THREADS 256u      /* per block, as kernels/convert.cu launches */
#define CU_MAX_BLOCKS 65535u /* the kernels are grid-stride */

static const char *const cu_kernel_name[CUDRV_K_COUNT] = {
	"feed_k_images_f32", "feed_k_images_f16", "feed_k_images_bf16",
	"feed_k_tokens_u16", "feed_k_tokens_u32",
	"feed_k_mix_f32", "feed_k_mix_f16", "feed_k_mix_bf16", "feed_k_mix_labels",
};

CUresult cudrv_kernels_load(const struct cudrv *cu, struct cudrv_kernels *ret)
{
	struct cudrv_kernels k = {0};
	CUresult e = cu->api.ModuleLoadData(&k.mod, cudrv_fatbin());
	if (e != CUDA_SUCCESS)
		return e;
	for (int i = 0; i < CUDRV_K_COUNT; i++)
		if ((e = cu->api.ModuleGetFunction(&k.fn[i], k.mod, cu_kernel_name[i])) !=
		    CUDA_SUCCESS) {
			cu->api.ModuleUnload(k.mod);
			return e;
		}
	*ret = k;
	return CUDA_SUCCESS;
}

void cudrv_kernels_unload(const struct cudrv *cu, struct cudrv_kernels *k)
{
	if (k->mod)
		cu->api.ModuleUnload(k->mod);
	memset(k, 0, sizeof(*k));
}

static CUresult cu_launch(const struct cudrv *cu, CUfunction f, size_t total, CUstream s,
			  void **params)
{
	size_t blocks = (total + CU_THREADS - 1) / CU_THREADS;
	if (!total)
		return CUDA_SUCCESS;
	if (blocks > CU_MAX_BLOCKS)
		blocks = CU_MAX_BLOCKS;
	return cu->api.LaunchKernel(f, (unsigned)blocks, 1, 1, CU_THREADS, 1, 1, 0, s, params, NULL);
}

CUresult cudrv_launch_images(const struct cudrv *cu, const struct cudrv_kernels *k,
			     const struct feed_convert *cv, CUdeviceptr src, size_t n,
			     CUdeviceptr flip, CUdeviceptr dst, CUstream s)
{
	struct feed_convert c = *cv; /* the launch copies its parameters */
	void *params[] = {&c, &src, &n, &flip, &dst};
	if ((unsigned)cv->dtype > FEED_CONVERT_BF16)
		return CUDA_ERROR_INVALID_VALUE;
	/* a thread a group of pixels (convert_kernels.cuh) */
	uint32_t step = feed_convert_images_step(cv, (uintptr_t)src, (uintptr_t)dst,
						 cv->dtype == FEED_CONVERT_F32 ? 4 : 2);
	return cu_launch(cu, k->fn[CUDRV_K_F32 + cv->dtype], n * cv->h * cv->w / step, s, params);
}

CUresult cudrv_launch_tokens(const struct cudrv *cu, const struct cudrv_kernels *k,
			     size_t elem_size, CUdeviceptr src, size_t n, CUdeviceptr dst, CUstream s)
{
	void *params[] = {&src, &n, &dst};
	if (elem_size != 2 && elem_size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_launch(cu, k->fn[elem_size == 2 ? CUDRV_K_TOK16 : CUDRV_K_TOK32], n, s, params);
}

CUresult cudrv_launch_mix(const struct cudrv *cu, const struct cudrv_kernels *k,
			  const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
			  CUdeviceptr data, CUstream s)
{
	struct feed_convert c = *cv;
	struct feed_mix_args m = *a;
	void *params[] = {&c, &m, &n, &data};
	if ((unsigned)cv->dtype > FEED_CONVERT_BF16)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n || a->op == FEED_MIX_OP_NONE)
		return CUDA_SUCCESS;
	/* a thread an element of one sample (mix_kernels.cuh) */
	return cu_launch(cu, k->fn[CUDRV_K_MIX_F32 + cv->dtype], (size_t)cv->h * cv->w * cv->c, s,
			 params);
}

CUresult cudrv_launch_mix_labels(const struct cudrv *cu, const struct cudrv_kernels *k,
				 const struct feed_mix_args *a, CUdeviceptr labels, uint32_t t,
				 size_t n, CUdeviceptr dst, CUstream s)
{
	struct feed_mix_args m = *a;
	void *params[] = {&m, &labels, &t, &n, &dst};
	if (t > FEED_MIX_LABEL_I64 || !a->num_classes)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_launch(cu, k->fn[CUDRV_K_MIX_LABELS], n * a->num_classes, s, params);
}
