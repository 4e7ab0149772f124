/*
 * launch.cuh: what the runtime-API launchers (convert.cu, mix.cu) share:
 * the block shape, a grid for n threads, and a launch's outcome as the
 * kernels' error codes. Host code only; header-only, internal linkage.
 */
#ifndef FEED_LAUNCH_CUH
#define FEED_LAUNCH_CUH

#include <errno.h>
#include <stddef.h>

#include <cuda_runtime.h>

namespace feed_launch {

const unsigned kThreads = 256;     /* per block */
const unsigned kMaxBlocks = 65535; /* grid-stride beyond: any n fits */

/* Blocks for total threads, capped (the kernels stride over the rest). */
static inline unsigned blocks_for(size_t total)
{
	size_t b = (total + kThreads - 1) / kThreads;
	return b > kMaxBlocks ? kMaxBlocks : (unsigned)b;
}

/* The launch's outcome: 0, -ENODEV (no device, driver or kernel image for
 * it) or -EIO. cudaGetLastError also clears a launch error so the next
 * call on this thread starts clean. */
static inline int launch_result(void)
{
	switch (cudaGetLastError()) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorNoKernelImageForDevice:
		return -ENODEV;
	default:
		return -EIO;
	}
}

} // namespace feed_launch

#endif
