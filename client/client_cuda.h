/*
 * client_cuda.h: the CUDA driver API as libfeedclient reaches it, loaded at
 * run time from libcuda.so.1 (never linked), so one library serves nodes
 * with and without a GPU.
 *
 * Owns: the few types and entry points used (declared here, not taken from
 * cuda.h, so libfeedclient builds without the toolkit), the one dlopen of
 * the driver, and the capability facts found then (devices, driver
 * version, whether the GPU path is usable and why not).
 *
 * The declarations are the ABI of the driver API as CUDA 12.0 - 13.0's
 * cuda.h gives it (CUDA_VERSION 13000): the symbol names are the versioned
 * ones cuda.h maps the plain names to (cuMemAlloc -> cuMemAlloc_v2, ...),
 * which a driver keeps exporting unchanged for as long as it supports them.
 *
 * FEED_CUDA_DRIVER=path loads that library instead of libcuda.so.1 (the
 * tests' double of the driver, tests/gpu_double/fake_cuda.c).
 *
 * Threads: cl_cuda() loads once (pthread_once) on whichever thread asks
 * first; afterwards everything here is read-only. Never prints.
 */
#ifndef FEED_CLIENT_CUDA_H
#define FEED_CLIENT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "feed/gpu.h"

typedef int CUresult;                  /* enum cudaError_enum */
typedef int CUdevice;                  /* a device ordinal */
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INSUFFICIENT_DRIVER 35
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED 113
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_EVENT_DISABLE_TIMING 0x2

/* The driver version (cuDriverGetVersion: 1000*major + 10*minor) the
 * embedded kernels need: nvcc 13.0 writes PTX ISA 9.0 and CUDA 13 cubins,
 * which drivers from release 580 (CUDA 13.0) load. */
#define CL_CUDA_DRIVER_NEEDED 13000

/* The entry points, resolved with dlsym under the names in comments. */
struct cl_cuda_api {
	CUresult (*Init)(unsigned flags);                            /* cuInit */
	CUresult (*DriverGetVersion)(int *v);                        /* cuDriverGetVersion */
	CUresult (*GetErrorName)(CUresult e, const char **s);        /* cuGetErrorName */
	CUresult (*DeviceGetCount)(int *n);                          /* cuDeviceGetCount */
	CUresult (*DeviceGet)(CUdevice *d, int ordinal);             /* cuDeviceGet */
	CUresult (*DeviceGetName)(char *name, int len, CUdevice d);  /* cuDeviceGetName */
	CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d); /* cuDeviceGetAttribute */
	CUresult (*CtxGetCurrent)(CUcontext *c);                     /* cuCtxGetCurrent */
	CUresult (*CtxSetCurrent)(CUcontext c);                      /* cuCtxSetCurrent */
	CUresult (*CtxGetDevice)(CUdevice *d);                       /* cuCtxGetDevice */
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *c, CUdevice d); /* cuDevicePrimaryCtxRetain */
	CUresult (*MemHostRegister)(void *p, size_t n, unsigned flags); /* cuMemHostRegister_v2 */
	CUresult (*MemHostUnregister)(void *p);                      /* cuMemHostUnregister */
	CUresult (*MemAlloc)(CUdeviceptr *p, size_t n);              /* cuMemAlloc_v2 */
	CUresult (*MemFree)(CUdeviceptr p);                          /* cuMemFree_v2 */
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n,
				    CUstream s);                      /* cuMemcpyHtoDAsync_v2 */
	CUresult (*EventCreate)(CUevent *e, unsigned flags);         /* cuEventCreate */
	CUresult (*EventRecord)(CUevent e, CUstream s);              /* cuEventRecord */
	CUresult (*EventQuery)(CUevent e);                           /* cuEventQuery */
	CUresult (*EventSynchronize)(CUevent e);                     /* cuEventSynchronize */
	CUresult (*EventDestroy)(CUevent e);                         /* cuEventDestroy_v2 */
	CUresult (*ModuleLoadData)(CUmodule *m, const void *image);  /* cuModuleLoadData */
	CUresult (*ModuleUnload)(CUmodule m);                        /* cuModuleUnload */
	CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name); /* cuModuleGetFunction */
	CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
				 unsigned bx, unsigned by, unsigned bz, unsigned shmem,
				 CUstream s, void **params, void **extra); /* cuLaunchKernel */
};

/* What loading found: the driver's entry points when info.usable, and the
 * facts feed_gpu_query() returns either way. */
struct cl_cuda {
	struct cl_cuda_api api;     /* all set when info.usable */
	struct feed_gpu_info info;  /* the capability facts */
};

/* The process's driver, loaded on first use (FEED_CUDA_DRIVER or
 * libcuda.so.1). Never NULL; check ->info.usable. Any thread. */
const struct cl_cuda *cl_cuda(void);

/* "CUDA_ERROR_X (code)" for e, in buf; returns buf. */
const char *cl_cuda_errname(const struct cl_cuda *cu, CUresult e, char *buf, size_t cap);

/* The embedded kernels (kernels/convert_fatbin.cu, built by nvcc --fatbin):
 * the image, or NULL when this build had no CUDA compiler. */
const void *cl_cuda_fatbin(void);

#endif
