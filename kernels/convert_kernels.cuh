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

/* One thread per pixel of the batch (pixel p: sample p / (h*w), pixel
 * p % (h*w) of it), writing its c channels: index arithmetic once per
 * pixel, in 32 bits inside a sample (feed_convert_init keeps h*w*c below
 * 2^32), and 64-bit division only for batches of 2^32 pixels or more.
 * A warp reads its pixels' bytes as one run and writes each channel's
 * plane (NCHW) or the interleaved run (NHWC) contiguously. Launchers size
 * the grid by pixels (any grid is right: grid-stride). Each output
 * element is PX of the same byte, scale and bias as the twins'. */
template <typename T, T (*PX)(uint8_t, float, float)>
__device__ inline void feed_k_images(const struct feed_convert &cv, const uint8_t *__restrict__ src,
				     size_t n, const uint8_t *__restrict__ flip, T *__restrict__ dst)
{
	const uint32_t w = cv.w, hw = cv.h * cv.w, c = cv.c;
	const size_t per = (size_t)hw * c, pixels = (size_t)hw * n;
	const bool nchw = cv.layout == FEED_CONVERT_NCHW, small = pixels <= 0xffffffffu;
	float sc[FEED_CONVERT_MAX_C], bi[FEED_CONVERT_MAX_C];
#pragma unroll
	for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++) {
		sc[ch] = cv.scale[ch];
		bi[ch] = cv.bias[ch];
	}
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += stride) {
		size_t s = small ? (uint32_t)p / hw : p / hw;
		uint32_t q = (uint32_t)(p - s * hw), y = q / w, x = q - y * w;
		if (flip && flip[s])
			x = w - 1 - x;
		const uint8_t *in = src + s * per + (size_t)(y * w + x) * c;
		T *out = dst + s * per;
#pragma unroll
		for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++)
			if (ch < c)
				out[nchw ? ch * hw + q : q * c + ch] = PX(in[ch], sc[ch], bi[ch]);
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
