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

/* Two of T in one store (NCHW pairs): 8 bytes for float, 4 for 16-bit. */
template <typename T> struct feed_k_pair;
template <> struct feed_k_pair<float> {
	typedef float2 type;
	static __device__ inline float2 make(float a, float b) { return make_float2(a, b); }
};
template <> struct feed_k_pair<uint16_t> {
	typedef uint32_t type;
	static __device__ inline uint32_t make(uint16_t a, uint16_t b)
	{
		return (uint32_t)a | (uint32_t)b << 16; /* little-endian: a first */
	}
};

/* Four of T in one store (NCHW quads): 16 bytes for float, 8 for 16-bit. */
template <typename T> struct feed_k_quad;
template <> struct feed_k_quad<float> {
	typedef float4 type;
	static __device__ inline float4 make(float a, float b, float c, float d)
	{
		return make_float4(a, b, c, d);
	}
};
template <> struct feed_k_quad<uint16_t> {
	typedef uint2 type;
	static __device__ inline uint2 make(uint16_t a, uint16_t b, uint16_t c, uint16_t d)
	{
		return make_uint2((uint32_t)a | (uint32_t)b << 16, (uint32_t)c | (uint32_t)d << 16);
	}
};

/* Byte k of the little-endian words w. */
__device__ inline uint8_t feed_k_byte(const uint32_t *w, uint32_t k)
{
	return (uint8_t)(w[k >> 2] >> (8 * (k & 3)));
}

/* Four neighbouring pixels of one row (x a multiple of 4, w too), NCHW:
 * their 4c source bytes read as c aligned words, each channel's four
 * outputs written with one store. Mirrored, the four come from the
 * mirrored quad in reverse. */
template <typename T, T (*PX)(uint8_t, float, float)>
__device__ inline void feed_k_quad4(const uint8_t *__restrict__ in, T *__restrict__ out,
				    uint32_t w, uint32_t hw, uint32_t c, uint32_t q, uint32_t y,
				    uint32_t x, bool f, const float *sc, const float *bi)
{
	uint32_t words[FEED_CONVERT_MAX_C];
	const uint32_t *src = (const uint32_t *)(in + (size_t)(y * w + (f ? w - 4 - x : x)) * c);
#pragma unroll
	for (uint32_t k = 0; k < FEED_CONVERT_MAX_C; k++)
		if (k < c)
			words[k] = src[k];
#pragma unroll
	for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++) {
		if (ch >= c)
			continue;
		T v[4];
#pragma unroll
		for (uint32_t j = 0; j < 4; j++)
			v[j] = PX(feed_k_byte(words, (f ? 3 - j : j) * c + ch), sc[ch], bi[ch]);
		*(typename feed_k_quad<T>::type *)(out + ch * hw + q) =
			feed_k_quad<T>::make(v[0], v[1], v[2], v[3]);
	}
}

/* One thread per pixel of the batch (pixel p: sample p / (h*w), pixel
 * p % (h*w) of it), writing its c channels: index arithmetic once per
 * pixel, in 32 bits inside a sample (feed_convert_init keeps h*w*c below
 * 2^32), and 64-bit division only for batches of 2^32 pixels or more.
 * With NCHW and a width that is a multiple of 4 (and aligned pointers), a
 * thread takes four neighbouring pixels of a row, reads their bytes as
 * words and writes each channel's four with one store; else, with an even
 * h*w (so pairs never straddle two samples and stay aligned), two
 * neighbouring pixels and one store a channel for the pair. A warp reads its pixels' bytes as one
 * run and writes each plane (NCHW) or the interleaved run (NHWC)
 * contiguously. Launchers size the grid by pixels (any grid is right:
 * grid-stride). Each output element is PX of the same byte, scale and
 * bias as the twins'. */
template <typename T, T (*PX)(uint8_t, float, float)>
__device__ inline void feed_k_images(const struct feed_convert &cv, const uint8_t *__restrict__ src,
				     size_t n, const uint8_t *__restrict__ flip, T *__restrict__ dst)
{
	const uint32_t w = cv.w, hw = cv.h * cv.w, c = cv.c;
	const size_t per = (size_t)hw * c, pixels = (size_t)hw * n;
	const bool nchw = cv.layout == FEED_CONVERT_NCHW;
	const uint32_t step = feed_convert_images_step(&cv, (uintptr_t)src, (uintptr_t)dst,
						       sizeof(T));
	const bool quads = step == 4, pairs = step == 2;
	const size_t units = pixels / step;
	const bool small = pixels <= 0xffffffffu;
	float sc[FEED_CONVERT_MAX_C], bi[FEED_CONVERT_MAX_C];
#pragma unroll
	for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++) {
		sc[ch] = cv.scale[ch];
		bi[ch] = cv.bias[ch];
	}
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride) {
		size_t p = u * step;
		size_t s = small ? (uint32_t)p / hw : p / hw;
		uint32_t q = (uint32_t)(p - s * hw), y = q / w, x = q - y * w;
		bool f = flip && flip[s];
		const uint8_t *in = src + s * per;
		T *out = dst + s * per;
		if (quads) {
			feed_k_quad4<T, PX>(in, out, w, hw, c, q, y, x, f, sc, bi);
			continue;
		}
		/* source of pixel q (and of q + 1: the next one in the row,
		 * or the first of the next row) */
		uint32_t x0 = f ? w - 1 - x : x, at0 = (y * w + x0) * c;
		if (!pairs) {
#pragma unroll
			for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++)
				if (ch < c)
					out[nchw ? ch * hw + q : q * c + ch] =
						PX(in[at0 + ch], sc[ch], bi[ch]);
			continue;
		}
		uint32_t y1 = x + 1 < w ? y : y + 1, x1 = x + 1 < w ? x + 1 : 0;
		uint32_t at1 = (y1 * w + (f ? w - 1 - x1 : x1)) * c;
#pragma unroll
		for (uint32_t ch = 0; ch < FEED_CONVERT_MAX_C; ch++)
			if (ch < c)
				*(typename feed_k_pair<T>::type *)(out + ch * hw + q) =
					feed_k_pair<T>::make(PX(in[at0 + ch], sc[ch], bi[ch]),
							     PX(in[at1 + ch], sc[ch], bi[ch]));
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
