/*
 * nvjpeg_load.h: nvJPEG as feedd reaches it, loaded at run time (never
 * linked), the way kernels/cudrv.h loads the CUDA driver: one feedd binary
 * runs where nvJPEG is, where it is not (JPEGs decode on the CPU, and
 * status says why), and under the tests' double (tests/gpu_double/
 * fake_nvjpeg.c, through FEED_NVJPEG_LIBRARY).
 *
 * Owns: the few nvJPEG types and entry points used (declared here, not
 * taken from nvjpeg.h, so everything builds without it), the search for
 * the library, the load, and the facts found then (version, path, whether
 * it is usable and why not, in words).
 *
 * The declarations are nvJPEG's ABI as CUDA 11.6 - 13.0's nvjpeg.h gives
 * it; a cudaStream_t is a CUstream. The library is searched, in order:
 *   1. FEED_NVJPEG_LIBRARY=path (tests: the double; set: nothing else is tried)
 *   2. libnvjpeg.so.13, then libnvjpeg.so.12, through the dynamic loader
 *      (the CUDA toolkit's lib64 when ld.so.conf lists it, LD_LIBRARY_PATH)
 *   3. /usr/local/cuda/lib64 (the toolkit where ld.so.conf does not list it)
 *   4. the `nvidia-nvjpeg` wheels' folders (nvidia/cu13/lib for CUDA 13,
 *      nvidia/nvjpeg/lib for nvidia-nvjpeg-cu12), then torchvision's own
 *      copy (torchvision.libs/libnvjpeg*.so*), under $VIRTUAL_ENV's and
 *      the system's site- and dist-packages.
 *
 * Threads: njl_get() loads once (pthread_once) on whichever thread asks
 * first; afterwards everything here is read-only. njl_load() is the same
 * search without the cache (tests). Never prints.
 */
#ifndef FEEDD_NVJPEG_LOAD_H
#define FEEDD_NVJPEG_LOAD_H

#include <stdbool.h>
#include <stddef.h>

/* nvjpeg.h's types, by ABI */
typedef int nvjpegStatus_t;          /* enum: NVJPEG_STATUS_* */
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegDecodeParams *nvjpegDecodeParams_t;
typedef struct CUstream_st *njl_stream_t; /* cudaStream_t == CUstream */

#define NVJPEG_MAX_COMPONENT 4
/* an output image: planes in device memory */
typedef struct {
	unsigned char *channel[NVJPEG_MAX_COMPONENT];
	size_t pitch[NVJPEG_MAX_COMPONENT];
} nvjpegImage_t;

#define NVJPEG_STATUS_SUCCESS 0
#define NVJPEG_STATUS_NOT_INITIALIZED 1
#define NVJPEG_STATUS_INVALID_PARAMETER 2
#define NVJPEG_STATUS_BAD_JPEG 3
#define NVJPEG_STATUS_JPEG_NOT_SUPPORTED 4
#define NVJPEG_STATUS_ALLOCATOR_FAILURE 5
#define NVJPEG_STATUS_EXECUTION_FAILED 6
#define NVJPEG_STATUS_ARCH_MISMATCH 7
#define NVJPEG_STATUS_INTERNAL_ERROR 8
#define NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED 9
#define NVJPEG_STATUS_INCOMPLETE_BITSTREAM 10

#define NVJPEG_BACKEND_DEFAULT 0
#define NVJPEG_BACKEND_HARDWARE 3    /* the A100/H100/H200 JPEG engines */
#define NVJPEG_OUTPUT_Y 2            /* luma only, into channel[0] */
#define NVJPEG_OUTPUT_RGBI 5         /* interleaved RGB, into channel[0] */
#define NVJPEG_FLAGS_DEFAULT 0

/* libraryPropertyType (library_types.h) */
#define NJL_MAJOR_VERSION 0
#define NJL_MINOR_VERSION 1
#define NJL_PATCH_LEVEL 2

/* The entry points, resolved with dlsym under the names in comments: every
 * one is needed (a library without one is not used). */
struct njl_api {
	nvjpegStatus_t (*GetProperty)(int type, int *value);                  /* nvjpegGetProperty */
	nvjpegStatus_t (*CreateEx)(int backend, void *dev_alloc, void *pinned_alloc,
				   unsigned flags, nvjpegHandle_t *h);       /* nvjpegCreateEx */
	nvjpegStatus_t (*Destroy)(nvjpegHandle_t h);                         /* nvjpegDestroy */
	nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t h, nvjpegJpegState_t *s); /* nvjpegJpegStateCreate */
	nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t s);             /* nvjpegJpegStateDestroy */
	nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t h, const unsigned char *data, size_t len,
				       int *ncomp, int *subsampling, int *widths,
				       int *heights);                        /* nvjpegGetImageInfo */
	nvjpegStatus_t (*DecodeParamsCreate)(nvjpegHandle_t h, nvjpegDecodeParams_t *p); /* nvjpegDecodeParamsCreate */
	nvjpegStatus_t (*DecodeParamsDestroy)(nvjpegDecodeParams_t p);       /* nvjpegDecodeParamsDestroy */
	nvjpegStatus_t (*DecodeParamsSetOutputFormat)(nvjpegDecodeParams_t p, int fmt); /* nvjpegDecodeParamsSetOutputFormat */
	nvjpegStatus_t (*DecodeParamsSetROI)(nvjpegDecodeParams_t p, int x, int y, int w,
					     int h);                         /* nvjpegDecodeParamsSetROI */
	nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t h, nvjpegJpegState_t s, int n,
						  int max_cpu_threads, int fmt); /* nvjpegDecodeBatchedInitialize */
	nvjpegStatus_t (*DecodeBatchedEx)(nvjpegHandle_t h, nvjpegJpegState_t s,
					  const unsigned char *const *data, const size_t *lens,
					  nvjpegImage_t *dst, nvjpegDecodeParams_t *params,
					  njl_stream_t stream);              /* nvjpegDecodeBatchedEx */
};

/* What loading found. */
struct njl {
	struct njl_api api;   /* all set when usable */
	bool usable;          /* every entry point resolved and the version read */
	int version;          /* 1000 * major + 10 * minor + patch (12.4.1: 12041) */
	char path[256];       /* the library loaded ("" when none) */
	char reason[320];     /* !usable: why, in words; else "" */
};

/* The process's nvJPEG, loaded on first use. Never NULL; check ->usable.
 * Any thread. */
const struct njl *njl_get(void);

/* The same search and load into *ret (zeroed first), uncached: 0, or
 * -ENOENT (no library: ret->reason names what was tried), -ENOSYS (a
 * library without an entry point, or whose version cannot be read) or
 * -ENOTSUP (a library newer than the CUDA driver runs: the search skips
 * sonames above the driver's major, so only a forced path gets here).
 * A library found stays loaded. Any thread. */
int njl_load(struct njl *ret);

/* "NVJPEG_STATUS_X (code)" for s; a static string. */
const char *njl_status_name(nvjpegStatus_t s);

/* Whether s says the image is at fault (bad, unsupported or truncated
 * bitstream), so the CPU path should decode that image; any other failure
 * is the device's or the library's. */
bool njl_status_is_image(nvjpegStatus_t s);

#endif /* FEEDD_NVJPEG_LOAD_H */
