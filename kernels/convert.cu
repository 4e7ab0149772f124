/*
 * convert.cu: the CUDA kernels of convert.h and their launchers.
 *
 * Owns: one grid-stride kernel per conversion, each element computed by the
 * element functions of convert.h (the code the CPU twins run), so a kernel
 * and its twin give the same bits. Built with --fmad=false: the one float
 * operation per pixel is the explicit fmaf.
 *
 * Threads: the launchers only enqueue on the caller's stream; any host
 * thread, with the stream's device current. They allocate nothing, never
 * synchronize and never print.
 */
#include "convert.h"
#include "convert_kernels.cuh"

#include <errno.h>

#include <cuda_runtime.h>

#include "launch.cuh"

using feed_launch::blocks_for;
using feed_launch::kThreads;
using feed_launch::launch_result;

namespace {

template <typename T, T (*PX)(uint8_t, float, float)>
__global__ void convert_images(struct feed_convert cv, const uint8_t *__restrict__ src, size_t n,
			       const uint8_t *__restrict__ flip, T *__restrict__ dst)
{
	feed_k_images<T, PX>(cv, src, n, flip, dst);
}

template <typename T, int64_t (*TOK)(T)>
__global__ void convert_tokens(const T *__restrict__ src, size_t n, int64_t *__restrict__ dst)
{
	feed_k_tokens<T, TOK>(src, n, dst);
}

/* The launch's outcome as convert.h's codes. cudaGetLastError also clears
 * a launch error so the next call on this thread starts clean. */
} // namespace

extern "C" int feed_convert_images_cuda(const struct feed_convert *cv, const uint8_t *src,
					size_t n, const uint8_t *flip, void *dst,
					struct CUstream_st *stream)
{
	if (!cv || (n && (!src || !dst)))
		return -EINVAL;
	size_t pixels = (size_t)cv->h * cv->w * n;
	if (!pixels)
		return 0;
	/* a thread a group of pixels (convert_kernels.cuh) */
	uint32_t out = cv->dtype == FEED_CONVERT_F32 ? 4 : 2;
	unsigned b = blocks_for(pixels / feed_convert_images_step(cv, (uintptr_t)src,
								  (uintptr_t)dst, out));
	cudaStream_t st = stream;
	switch (cv->dtype) {
	case FEED_CONVERT_F32:
		convert_images<float, feed_convert_px_f32>
			<<<b, kThreads, 0, st>>>(*cv, src, n, flip, (float *)dst);
		break;
	case FEED_CONVERT_F16:
		convert_images<uint16_t, feed_convert_px_f16>
			<<<b, kThreads, 0, st>>>(*cv, src, n, flip, (uint16_t *)dst);
		break;
	case FEED_CONVERT_BF16:
		convert_images<uint16_t, feed_convert_px_bf16>
			<<<b, kThreads, 0, st>>>(*cv, src, n, flip, (uint16_t *)dst);
		break;
	default:
		return -EINVAL;
	}
	return launch_result();
}

extern "C" int feed_convert_tokens_u16_cuda(const uint16_t *src, size_t n, int64_t *dst,
					    struct CUstream_st *stream)
{
	if (n && (!src || !dst))
		return -EINVAL;
	if (!n)
		return 0;
	convert_tokens<uint16_t, feed_convert_tok_u16><<<blocks_for(n), kThreads, 0, stream>>>(src, n, dst);
	return launch_result();
}

extern "C" int feed_convert_tokens_u32_cuda(const uint32_t *src, size_t n, int64_t *dst,
					    struct CUstream_st *stream)
{
	if (n && (!src || !dst))
		return -EINVAL;
	if (!n)
		return 0;
	convert_tokens<uint32_t, feed_convert_tok_u32><<<blocks_for(n), kThreads, 0, stream>>>(src, n, dst);
	return launch_result();
}
