/*
 * convert.h: the conversions a batch goes through between its slot and the
 * trainer: u8 HWC images -> fp32 / fp16 / bf16, NCHW or NHWC, normalized
 * per channel and optionally flipped per sample; u16 / u32 tokens -> i64.
 *
 * Owns: one element function per conversion, written once below as
 * `static inline FEED_HD` code that nvcc compiles for the device
 * (kernels/convert.cu) and the C compiler for the CPU twins
 * (kernels/convert_cpu.c). Every float operation is explicit (one fmaf per
 * pixel; both sides are built without contraction). fp16 / bf16 rounding
 * is round-to-nearest-even of that fp32 value on both sides: the device
 * uses its own conversion instructions (cvt.rn.f16.f32, cvt.rn.bf16.f32;
 * one instruction where the bit arithmetic below took some twenty, which
 * kept the fp16 / bf16 kernels compute-bound), the CPU twin does the same
 * rounding on the float's bits. Both are IEEE round-to-nearest-even, so
 * every finite value (the only kind feed_convert_init lets through, and
 * infinities) gets the same bits; only a NaN's payload could differ, and
 * no conversion produces one.
 *
 * Normalization is torchvision's Normalize after ToTensor: mean and std in
 * units of x/255, y = (x/255 - mean) / std, computed as
 * fmaf(x, scale, bias) with scale = 1/(255*std) and bias = -mean/std
 * rounded once to float from double (feed_convert_init). That differs from
 * torchvision's two float operations by at most a few ulp of fp32; the fp16
 * and bf16 results are the round-to-nearest-even of that fp32 value.
 *
 * Threads: pure functions; any number of threads may convert at once with
 * one struct feed_convert. Nothing here allocates, blocks or prints; the
 * CUDA launchers enqueue on the caller's stream and return.
 */
#ifndef FEED_CONVERT_H
#define FEED_CONVERT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FEED_HD __host__ __device__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#define FEED_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Most channels an image conversion takes (RGBA). */
#define FEED_CONVERT_MAX_C 4

/* Output element type of an image conversion. */
enum feed_convert_dtype {
	FEED_CONVERT_F32 = 0,  /* IEEE binary32 */
	FEED_CONVERT_F16 = 1,  /* IEEE binary16, round to nearest even */
	FEED_CONVERT_BF16 = 2, /* bfloat16 (upper half of binary32), nearest even */
};

/* Output layout of one sample. */
enum feed_convert_layout {
	FEED_CONVERT_NCHW = 0, /* channel planes, as torch's conv layers take them */
	FEED_CONVERT_NHWC = 1, /* pixels with their channels, as the source is */
};

/*
 * One image conversion, made by feed_convert_init and read-only after; a
 * plain value (no pointers), passed by value to the kernels. Fields public,
 * read-only.
 */
struct feed_convert {
	uint32_t h, w, c;    /* source and output image size; 1 <= c <= 4 */
	uint32_t dtype;      /* enum feed_convert_dtype */
	uint32_t layout;     /* enum feed_convert_layout */
	float scale[FEED_CONVERT_MAX_C]; /* 1 / (255 * std[ch]), rounded once */
	float bias[FEED_CONVERT_MAX_C];  /* -mean[ch] / std[ch], rounded once */
};

/* ------------------------------------------------------------------ */
/* Element functions (shared by the twins and the kernels)             */

/* The bits of a float. */
static inline FEED_HD uint32_t feed_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

/* f rounded to bfloat16, nearest even; a NaN stays a (quiet) NaN of the
 * same sign, infinities stay infinite. */
static inline FEED_HD uint16_t feed_f32_to_bf16(float f)
{
#ifdef __CUDA_ARCH__
	return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
	uint32_t u = feed_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u); /* rounding could carry it to inf */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
#endif
}

/* f rounded to IEEE binary16, nearest even: subnormal halves below 2^-14,
 * infinity from 65520 up (the tie above 65504 goes to the even, inf); a NaN
 * stays a quiet NaN of the same sign. */
static inline FEED_HD uint16_t feed_f32_to_f16(float f)
{
#ifdef __CUDA_ARCH__
	return __half_as_ushort(__float2half_rn(f));
#else
	uint32_t u = feed_f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* 65520: rounds to infinity (and inf itself) */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: a subnormal half or zero */
		if (a <= 0x33000000u) /* <= 2^-25: zero (2^-25 is a tie, to even 0) */
			return (uint16_t)sign;
		uint32_t e = a >> 23;                   /* 102..112 */
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - e;              /* to units of 2^-24: 14..24 */
		uint32_t q = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1u);
		uint32_t half = 1u << (shift - 1u);
		if (rem > half || (rem == half && (q & 1u)))
			q++; /* may carry into the smallest normal: still right */
		return (uint16_t)(sign | q);
	}
	a -= 0x38000000u; /* rebias the exponent: 127 -> 15 */
	a += 0xfffu + ((a >> 13) & 1u);
	return (uint16_t)(sign | (a >> 13));
#endif
}

/* One normalized pixel: fmaf(x, scale, bias), the only float operation. */
static inline FEED_HD float feed_convert_px_f32(uint8_t x, float scale, float bias)
{
	return fmaf((float)x, scale, bias);
}

static inline FEED_HD uint16_t feed_convert_px_f16(uint8_t x, float scale, float bias)
{
	return feed_f32_to_f16(feed_convert_px_f32(x, scale, bias));
}

static inline FEED_HD uint16_t feed_convert_px_bf16(uint8_t x, float scale, float bias)
{
	return feed_f32_to_bf16(feed_convert_px_f32(x, scale, bias));
}

static inline FEED_HD int64_t feed_convert_tok_u16(uint16_t t)
{
	return (int64_t)t;
}

static inline FEED_HD int64_t feed_convert_tok_u32(uint32_t t)
{
	return (int64_t)t;
}

/* How many neighbouring pixels one thread of the image kernels converts
 * (convert_kernels.cuh): 4 with NCHW, a width that is a multiple of 4, src
 * 4-byte aligned and dst aligned for four outputs; else 2 with NCHW, an
 * even h*w and dst aligned for two; else 1. out_size: bytes of one output
 * element. The launchers size their grid by it: a thread per group. */
static inline FEED_HD uint32_t feed_convert_images_step(const struct feed_convert *cv,
							uintptr_t src, uintptr_t dst,
							uint32_t out_size)
{
	if (cv->layout != FEED_CONVERT_NCHW)
		return 1;
	if (cv->w % 4 == 0 && src % 4 == 0 && dst % (4u * out_size) == 0)
		return 4;
	if ((cv->h * cv->w) % 2 == 0 && dst % (2u * out_size) == 0)
		return 2;
	return 1;
}

/* Output element i of one sample (0 <= i < h*w*c, in cv's layout): sets
 * *ret_ch to its channel and returns the index of its source byte in the
 * sample's HWC bytes, mirrored left-right when flip. */
static inline FEED_HD size_t feed_convert_src_index(const struct feed_convert *cv, size_t i,
						    int flip, uint32_t *ret_ch)
{
	size_t x, y, ch;
	if (cv->layout == FEED_CONVERT_NCHW) {
		x = i % cv->w;
		y = (i / cv->w) % cv->h;
		ch = i / ((size_t)cv->w * cv->h);
	} else {
		ch = i % cv->c;
		x = (i / cv->c) % cv->w;
		y = i / ((size_t)cv->c * cv->w);
	}
	if (flip)
		x = cv->w - 1 - x;
	*ret_ch = (uint32_t)ch;
	return (y * cv->w + x) * cv->c + ch;
}

/* ------------------------------------------------------------------ */
/* Set-up and CPU twins (kernels/convert_cpu.c, library feed_kernels)  */

/*
 * Fills *ret for images of h x w x c u8 pixels (HWC) converted to dtype in
 * layout, normalized with mean[ch] and std[ch] (ch < c; torchvision's
 * units, of x/255). mean == NULL means 0 and std == NULL means 1 (plain
 * x/255). Returns 0, or -EINVAL when a size is 0, c > 4, h*w*c does not fit
 * in 32 bits, dtype or layout is unknown, or a mean/std gives a scale or a
 * bias that is not a finite float, or an output at x = 0 or 255 that is not
 * (so no output is ever NaN; fp16 may still round a large one to inf).
 * *ret is written only on success. Pure; any thread.
 */
int feed_convert_init(struct feed_convert *ret, uint32_t h, uint32_t w, uint32_t c,
		      enum feed_convert_dtype dtype, enum feed_convert_layout layout,
		      const float *mean, const float *std);

/* Bytes of one converted sample: h*w*c times 4 (fp32) or 2 (fp16, bf16). */
size_t feed_convert_sample_bytes(const struct feed_convert *cv);

/*
 * CPU twin of feed_convert_images_cuda: converts n samples of
 * h*w*c bytes each, packed at src, into n samples of
 * feed_convert_sample_bytes(cv) bytes at dst. flip, when not NULL, holds n
 * bytes: sample s is mirrored left-right when flip[s] != 0. src and dst are
 * borrowed for the call and must not overlap. Returns 0, or -EINVAL when
 * cv is NULL or src or dst is NULL with n > 0. Pure; any thread.
 */
int feed_convert_images_cpu(const struct feed_convert *cv, const uint8_t *src, size_t n,
			    const uint8_t *flip, void *dst);

/* CPU twins of the token conversions: dst[i] = src[i] for i < n. Borrowed
 * for the call, not overlapping. Returns 0, or -EINVAL for a NULL pointer
 * with n > 0. Pure; any thread. */
int feed_convert_tokens_u16_cpu(const uint16_t *src, size_t n, int64_t *dst);
int feed_convert_tokens_u32_cpu(const uint32_t *src, size_t n, int64_t *dst);

/* ------------------------------------------------------------------ */
/* CUDA launchers (kernels/convert.cu, library feed_kernels_cuda)      */

/* cudaStream_t and CUstream are both this pointer type; NULL is the legacy
 * default stream. */
struct CUstream_st;

/*
 * Enqueues on stream the conversion feed_convert_images_cpu does: src, flip
 * (or NULL) and dst are device pointers (or managed / mapped host memory the
 * device can reach), each valid until the work has run on stream; the
 * caller orders and synchronizes. Allocates nothing. Returns 0 once
 * enqueued, -EINVAL for the argument errors of the twin, -ENODEV when the
 * runtime finds no usable device or driver, -EIO when the launch fails
 * otherwise. Any host thread, with the device of stream current.
 */
int feed_convert_images_cuda(const struct feed_convert *cv, const uint8_t *src, size_t n,
			     const uint8_t *flip, void *dst, struct CUstream_st *stream);

/* Enqueues the token conversions on stream; same rules as above. */
int feed_convert_tokens_u16_cuda(const uint16_t *src, size_t n, int64_t *dst,
				 struct CUstream_st *stream);
int feed_convert_tokens_u32_cuda(const uint32_t *src, size_t n, int64_t *dst,
				 struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* FEED_CONVERT_H */
