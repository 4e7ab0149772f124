/*
 * cudrv.h: the CUDA driver API as libfeedclient and feedd reach it, loaded
 * at run time from libcuda.so.1 (never linked), so one binary serves nodes
 * with and without a GPU, and the tests can load a double of the driver.
 *
 * Owns: the few types and entry points used (declared here, not taken from
 * cuda.h, so everything builds without the toolkit), the one dlopen of the
 * driver per process, and the capability facts found then (devices and
 * their UUIDs, driver version, whether the GPU path and CUDA IPC are usable
 * and why not), and the embedded kernels (cudrv_fatbin.c).
 *
 * The declarations are the ABI of the driver API as CUDA 12.0 - 13.0's
 * cuda.h gives it (CUDA_VERSION 13000): the symbol names are the versioned
 * ones cuda.h maps the plain names to (cuMemAlloc -> cuMemAlloc_v2, ...),
 * which a driver keeps exporting unchanged for as long as it supports them.
 *
 * FEED_CUDA_DRIVER=path loads that library instead of libcuda.so.1 (the
 * tests' double of the driver, tests/gpu_double/fake_cuda.c).
 *
 * The entry points of CUDA IPC (cuIpc*, streams, cuDeviceGetUuid_v2, the
 * stream memory operations cuStreamWrite/WaitValue32_v2) are optional: a driver without them still converts, and info.ipc says why
 * CUDA IPC is not usable.
 *
 * Threads: cudrv_get() loads once (pthread_once) on whichever thread asks
 * first; afterwards everything here is read-only. Never prints.
 */
#ifndef FEED_CUDRV_H
#define FEED_CUDRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;                  /* enum cudaError_enum */
typedef int CUdevice;                  /* a device ordinal */
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
#define CU_IPC_HANDLE_SIZE 64
typedef struct { char reserved[CU_IPC_HANDLE_SIZE]; } CUipcMemHandle;
typedef struct { char reserved[CU_IPC_HANDLE_SIZE]; } CUipcEventHandle;
typedef struct { char bytes[16]; } CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INSUFFICIENT_DRIVER 35
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED 113
#define CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED 125
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_STREAM_WAIT_VALUE_GEQ 0x0   /* (int32_t)(*addr - value) >= 0: cyclic */
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0

/* The driver version (cuDriverGetVersion: 1000*major + 10*minor) the
 * embedded kernels need: nvcc 13.0 writes PTX ISA 9.0 and CUDA 13 cubins,
 * which drivers from release 580 (CUDA 13.0) load. */
#define CUDRV_DRIVER_NEEDED 13000

#define CUDRV_MAX_DEVICES 16

/* The entry points, resolved with dlsym under the names in comments; the
 * last group (from IpcGetMemHandle) is optional (info.ipc). */
struct cudrv_api {
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
	CUresult (*DevicePrimaryCtxRelease)(CUdevice d);             /* cuDevicePrimaryCtxRelease_v2 */
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
	/* optional: CUDA IPC */
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *h, CUdeviceptr p); /* cuIpcGetMemHandle */
	CUresult (*IpcOpenMemHandle)(CUdeviceptr *p, CUipcMemHandle h,
				     unsigned flags);                /* cuIpcOpenMemHandle_v2 */
	CUresult (*IpcCloseMemHandle)(CUdeviceptr p);                /* cuIpcCloseMemHandle */
	CUresult (*IpcGetEventHandle)(CUipcEventHandle *h, CUevent e); /* cuIpcGetEventHandle */
	CUresult (*IpcOpenEventHandle)(CUevent *e, CUipcEventHandle h); /* cuIpcOpenEventHandle */
	CUresult (*StreamCreate)(CUstream *s, unsigned flags);       /* cuStreamCreate */
	CUresult (*StreamDestroy)(CUstream s);                       /* cuStreamDestroy_v2 */
	CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags); /* cuStreamWaitEvent */
	CUresult (*StreamSynchronize)(CUstream s);                   /* cuStreamSynchronize */
	CUresult (*DeviceGetUuid)(CUuuid *u, CUdevice d);            /* cuDeviceGetUuid_v2 */
	CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n,
				    CUstream s);                      /* cuMemcpyDtoDAsync_v2 */
	/* stream memory operations (the v2 ones, on by default everywhere
	 * since CUDA 11.7; no device attribute gates 32-bit ones: the _V1
	 * attribute reports the legacy API's module parameter only) */
	CUresult (*StreamWriteValue32)(CUstream s, CUdeviceptr addr, uint32_t value,
				       unsigned flags);               /* cuStreamWriteValue32_v2 */
	CUresult (*StreamWaitValue32)(CUstream s, CUdeviceptr addr, uint32_t value,
				      unsigned flags);                /* cuStreamWaitValue32_v2 */
	/* optional, NULL when absent: copies back to the host (feedd's
	 * nvJPEG decode, daemon/gpu/hybrid.c) */
	CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n,
				    CUstream s);                      /* cuMemcpyDtoHAsync_v2 */
};

/* One device as the driver names it. */
struct cudrv_device {
	char name[128];
	int cc_major, cc_minor;    /* compute capability */
	uint8_t uuid[16];          /* cuDeviceGetUuid_v2 (zero without IPC entry points):
				    * names the same GPU in every process, whatever
				    * CUDA_VISIBLE_DEVICES renumbers */
	bool ipc;                  /* unified addressing and IPC events */
};

/* The capability facts. */
struct cudrv_info {
	bool usable;               /* the kernels can run on a device */
	bool kernels;              /* this build embeds the kernels */
	bool ipc;                  /* usable, and the IPC entry points resolved */
	int driver_version;        /* cuDriverGetVersion(), 0 without a driver */
	int driver_needed;         /* CUDRV_DRIVER_NEEDED */
	uint32_t num_devices;      /* all the driver reports */
	struct cudrv_device devices[CUDRV_MAX_DEVICES]; /* the first ones */
	char reason[256];          /* !usable: why, in words; else "" */
	char ipc_reason[256];      /* usable && !ipc: why; else "" */
};

/* What loading found: the driver's entry points when info.usable, and the
 * facts either way. */
struct cudrv {
	struct cudrv_api api;      /* all set when info.usable (the IPC group
				    * when info.ipc) */
	struct cudrv_info info;
};

/* The process's driver, loaded on first use (FEED_CUDA_DRIVER or
 * libcuda.so.1). Never NULL; check ->info.usable. Any thread. */
const struct cudrv *cudrv_get(void);

/* "CUDA_ERROR_X (code)" for e, in buf; returns buf. */
const char *cudrv_errname(const struct cudrv *cu, CUresult e, char *buf, size_t cap);

/* The ordinal of the device whose UUID is uuid, or -1. */
int cudrv_device_by_uuid(const struct cudrv *cu, const uint8_t uuid[16]);

/* The embedded kernels (kernels/convert_fatbin.cu, built by nvcc --fatbin):
 * the image, or NULL when this build had no CUDA compiler. */
const void *cudrv_fatbin(void);

struct feed_convert;

/* The conversion kernels of one context, by what they do. */
enum cudrv_kernel { CUDRV_K_F32, CUDRV_K_F16, CUDRV_K_BF16, CUDRV_K_TOK16, CUDRV_K_TOK32,
		    CUDRV_K_MIX_F32, CUDRV_K_MIX_F16, CUDRV_K_MIX_BF16, CUDRV_K_MIX_LABELS,
		    CUDRV_K_COUNT };
struct cudrv_kernels {
	CUmodule mod;
	CUfunction fn[CUDRV_K_COUNT];
};

/* Loads the embedded kernels into the current context. Returns
 * CUDA_SUCCESS or the driver's error (then *ret holds nothing to unload). */
CUresult cudrv_kernels_load(const struct cudrv *cu, struct cudrv_kernels *ret);
/* Accepts a never-loaded (zeroed) one. */
void cudrv_kernels_unload(const struct cudrv *cu, struct cudrv_kernels *k);

/* Enqueues on s the conversion of n images of cv from src (u8 on the
 * device) into dst, mirroring image i when flip (device memory, n bytes;
 * 0: none) has flip[i] != 0. Nothing to do is CUDA_SUCCESS. */
CUresult cudrv_launch_images(const struct cudrv *cu, const struct cudrv_kernels *k,
			     const struct feed_convert *cv, CUdeviceptr src, size_t n,
			     CUdeviceptr flip, CUdeviceptr dst, CUstream s);
/* Enqueues on s n tokens of elem_size 2 or 4 from src into int64 dst. */
CUresult cudrv_launch_tokens(const struct cudrv *cu, const struct cudrv_kernels *k,
			     size_t elem_size, CUdeviceptr src, size_t n, CUdeviceptr dst, CUstream s);

struct feed_mix_args;

/* Enqueues on s the mix a (mix.h) of n converted images of cv in place at
 * data. Nothing to do is CUDA_SUCCESS. */
CUresult cudrv_launch_mix(const struct cudrv *cu, const struct cudrv_kernels *k,
			  const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
			  CUdeviceptr data, CUstream s);
/* Enqueues on s the soft labels of n labels of type t (enum
 * feed_mix_label_type) at labels into dst, n x a->num_classes fp32. */
CUresult cudrv_launch_mix_labels(const struct cudrv *cu, const struct cudrv_kernels *k,
				 const struct feed_mix_args *a, CUdeviceptr labels, uint32_t t,
				 size_t n, CUdeviceptr dst, CUstream s);

#endif /* FEED_CUDRV_H */
