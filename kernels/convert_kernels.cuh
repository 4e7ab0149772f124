/*
 * convert_kernels.cuh: the device loops of the conversions, shared by the
 * runtime-API launchers (convert.cu, for the daemon and tests/gpu) and the
 * driver-API kernels embedded in libfeedclient (convert_fatbin.cu), so both
 * walk a batch the same way with the element functions of convert.h.
 *
 * Device code only; grid-stride, any grid size covers any n.
 */
#ifndef FEED_CONVERT_KERNELS_CUH
#define FEED_CONVERT_KERNELS_CUH

#include "convert.h"

/* Output element i of the batch: sample i / per, element i % per. */
template <typename T, T (*PX)(uint8_t, float, float)>
__device__ inline void feed_k_images(const struct feed_convert &cv, const uint8_t *__restrict__ src,
				     size_t n, const uint8_t *__restrict__ flip, T *__restrict__ dst)
{
	size_t per = (size_t)cv.h * cv.w * cv.c, total = per * n;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
		size_t s = i / per, e = i % per;
		uint32_t ch;
		size_t at = feed_convert_src_index(&cv, e, flip && flip[s], &ch);
		dst[i] = PX(src[s * per + at], cv.scale[ch], cv.bias[ch]);
	}
}

template <typename T, int64_t (*TOK)(T)>
__device__ inline void feed_k_tokens(const T *__restrict__ src, size_t n, int64_t *__restrict__ dst)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		dst[i] = TOK(src[i]);
}

#endif
