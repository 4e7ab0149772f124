/*
 * client_cuda.c: the CUDA driver loaded at run time (client_cuda.h) and
 * the capability query (feed/gpu.h, feed_gpu_query).
 *
 * Owns: the process's one dlopen of libcuda.so.1 (or FEED_CUDA_DRIVER),
 * the resolved entry points and the facts found at load: driver version,
 * devices, and whether the GPU path is usable, with the reason in words
 * when not (no driver library, a missing entry point, cuInit's error, a
 * driver older than the kernels need, no device, no kernels built in).
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

#include "client_cuda.h"
#include "client_internal.h"

#define CU_LIBRARY "libcuda.so.1"

static struct cl_cuda cu_state;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

const char *cl_cuda_errname(const struct cl_cuda *cu, CUresult e, char *buf, size_t cap)
{
	const char *name = NULL;
	if (!cu->api.GetErrorName || cu->api.GetErrorName(e, &name) != CUDA_SUCCESS || !name)
		name = "CUDA_ERROR_UNKNOWN";
	snprintf(buf, cap, "%s (%d)", name, e);
	return buf;
}

static void cu_unusable(struct cl_cuda *cu, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void cu_unusable(struct cl_cuda *cu, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cu->info.reason, sizeof(cu->info.reason), fmt, ap);
	va_end(ap);
	cu->info.usable = false;
}

/* Resolves every entry point of cl_cuda_api; the name of the first one
 * missing, or NULL. */
static const char *cu_resolve(void *lib, struct cl_cuda_api *a)
{
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define S(field, name) {name, offsetof(struct cl_cuda_api, field)}
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
#undef S
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(lib, syms[i].name);
		if (!p)
			return syms[i].name;
		/* POSIX: a data pointer from dlsym converts to a function pointer */
		memcpy((char *)a + syms[i].off, &p, sizeof(p));
	}
	return NULL;
}

/* The devices' names and compute capabilities into cu->info. */
static int cu_devices(struct cl_cuda *cu)
{
	char err[96];
	int n = 0;
	CUresult e = cu->api.DeviceGetCount(&n);
	if (e != CUDA_SUCCESS) {
		cu_unusable(cu, "cuDeviceGetCount failed: %s", cl_cuda_errname(cu, e, err, sizeof(err)));
		return -1;
	}
	cu->info.num_devices = n > 0 ? (uint32_t)n : 0;
	for (int i = 0; i < n && i < FEED_GPU_MAX_DEVICES; i++) {
		struct feed_gpu_device *d = &cu->info.devices[i];
		CUdevice dev;
		if (cu->api.DeviceGet(&dev, i) != CUDA_SUCCESS)
			continue;
		if (cu->api.DeviceGetName(d->name, sizeof(d->name), dev) != CUDA_SUCCESS)
			snprintf(d->name, sizeof(d->name), "device %d", i);
		d->name[sizeof(d->name) - 1] = '\0';
		cu->api.DeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		cu->api.DeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	}
	return 0;
}

static void cu_load(void)
{
	struct cl_cuda *cu = &cu_state;
	const char *path = getenv("FEED_CUDA_DRIVER");
	char err[96];

	cu->info.driver_needed = CL_CUDA_DRIVER_NEEDED;
	cu->info.kernels = cl_cuda_fatbin() != NULL;
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
	const char *missing = cu_resolve(lib, &cu->api);
	if (missing) {
		memset(&cu->api, 0, sizeof(cu->api));
		cu_unusable(cu, "%s has no %s (driver too old or not a CUDA driver)", path, missing);
		return; /* lib stays loaded: unloading a driver is not safe */
	}
	int v = 0;
	if (cu->api.DriverGetVersion(&v) == CUDA_SUCCESS)
		cu->info.driver_version = v;
	CUresult e = cu->api.Init(0);
	if (e != CUDA_SUCCESS) {
		cu_unusable(cu, "cuInit failed: %s%s", cl_cuda_errname(cu, e, err, sizeof(err)),
			    e == CUDA_ERROR_NO_DEVICE ? ": no CUDA device" : "");
		return;
	}
	if (cu_devices(cu) < 0)
		return;
	if (v < CL_CUDA_DRIVER_NEEDED) {
		cu_unusable(cu,
			    "driver %d.%d too old: the kernels need CUDA %d.%d (driver r580) or newer; "
			    "converting on the CPU",
			    v / 1000, v % 1000 / 10, CL_CUDA_DRIVER_NEEDED / 1000,
			    CL_CUDA_DRIVER_NEEDED % 1000 / 10);
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
}

const struct cl_cuda *cl_cuda(void)
{
	pthread_once(&cu_once, cu_load);
	return &cu_state;
}

FEED_API int feed_gpu_query(struct feed_gpu_info *ret)
{
	if (!ret)
		return -EINVAL;
	*ret = cl_cuda()->info;
	return 0;
}
