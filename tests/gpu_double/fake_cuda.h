/*
 * fake_cuda.h: the test double of the CUDA driver (fake_cuda.c), a shared
 * library exporting the driver entry points libfeedclient dlopen()s, loaded
 * in its place through FEED_CUDA_DRIVER. It is not a driver: device memory
 * is host memory, copies happen at once, kernels run the CPU twins, and an
 * event completes only when the test says so (fake_cuda_complete_events)
 * or someone waits for it (cuEventSynchronize).
 *
 * Set up through the environment, read at cuInit:
 *   FAKE_CUDA_VERSION   cuDriverGetVersion's value (default 13000)
 *   FAKE_CUDA_DEVICES   device count (default 1)
 *   FAKE_CUDA_RO        READ_ONLY_HOST_REGISTER_SUPPORTED of device 0 (default 0)
 *   FAKE_CUDA_INIT      cuInit's result code (default 0)
 * A test reaches the functions below with dlopen() of the same path (the
 * same handle) and dlsym().
 */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

#include <stddef.h>

/* What the double saw. */
struct fake_cuda_stats {
	int inits;
	int registers, unregisters;   /* cuMemHostRegister / Unregister calls */
	unsigned last_register_flags;
	void *last_register_ptr;
	size_t last_register_bytes;
	int copies;                   /* cuMemcpyHtoDAsync */
	size_t copied_bytes;
	int launches;                 /* cuLaunchKernel */
	int module_loads;             /* cuModuleLoadData with a fatbin image */
	int events_created, events_destroyed, events_pending; /* recorded, not complete */
	int syncs;                    /* cuEventSynchronize */
	int allocs, frees;            /* cuMemAlloc / cuMemFree */
};

const struct fake_cuda_stats *fake_cuda_stats(void);
/* Completes every event recorded so far. */
void fake_cuda_complete_events(void);

#endif
