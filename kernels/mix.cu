/*
 * mix.cu: the runtime-API launchers of the mixes of mix.h (for tests/gpu;
 * libfeedclient and feedd launch the same loops from the embedded fatbin,
 * kernels/cudrv.c).
 *
 * Threads: the launchers only enqueue on the caller's stream; any host
 * thread, with the stream's device current. They allocate nothing, never
 * synchronize and never print.
 */
#include "mix.h"
#include "mix_kernels.cuh"

#include <errno.h>

#include <cuda_runtime.h>

#include "launch.cuh"

using feed_launch::blocks_for;
using feed_launch::kThreads;
using feed_launch::launch_result;

namespace {

template <typename T, T (*MIX)(T, T, float, float)>
__global__ void mix_images(struct feed_convert cv, struct feed_mix_args a, size_t n, T *data)
{
	feed_k_mix<T, MIX>(cv, a, n, data);
}

__global__ void mix_labels(struct feed_mix_args a, const void *labels, uint32_t t, size_t n,
			   float *dst)
{
	feed_k_mix_labels_loop(a, labels, t, n, dst);
}

} // namespace

extern "C" int feed_mix_images_cuda(const struct feed_convert *cv, const struct feed_mix_args *a,
				    size_t n, void *data, struct CUstream_st *stream)
{
	if (!cv || !a || (n && !data))
		return -EINVAL;
	if (!n || a->op == FEED_MIX_OP_NONE)
		return 0;
	unsigned b = blocks_for((size_t)cv->h * cv->w * cv->c); /* a thread an element */
	cudaStream_t st = stream;
	switch (cv->dtype) {
	case FEED_CONVERT_F32:
		mix_images<float, feed_mix_f32><<<b, kThreads, 0, st>>>(*cv, *a, n, (float *)data);
		break;
	case FEED_CONVERT_F16:
		mix_images<uint16_t, feed_mix_f16><<<b, kThreads, 0, st>>>(*cv, *a, n, (uint16_t *)data);
		break;
	case FEED_CONVERT_BF16:
		mix_images<uint16_t, feed_mix_bf16><<<b, kThreads, 0, st>>>(*cv, *a, n, (uint16_t *)data);
		break;
	default:
		return -EINVAL;
	}
	return launch_result();
}

extern "C" int feed_mix_labels_cuda(const struct feed_mix_args *a, const void *labels, uint32_t t,
				    size_t n, float *dst, struct CUstream_st *stream)
{
	if (!a || (n && (!labels || !dst)) || t > FEED_MIX_LABEL_I64 || !a->num_classes)
		return -EINVAL;
	if (!n)
		return 0;
	mix_labels<<<blocks_for(n * a->num_classes), kThreads, 0, stream>>>(*a, labels, t, n, dst);
	return launch_result();
}
