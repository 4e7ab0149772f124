/*
 * check_convert.c: unit tests of kernels/convert.h and the CPU twins in
 * kernels/convert_cpu.c: set-up errors, hand-computed pixels, NCHW and
 * NHWC layouts, per-sample flip, the twin's walk against the per-element
 * index the kernels use, fp16 and bf16 rounding (ties, overflow,
 * subnormals, NaN) against independent references (the compiler's
 * _Float16 conversion; a nearest-neighbour search in double for bf16) over
 * all 256 inputs x several mean/std and a sweep of float bit patterns,
 * extreme mean/std never giving NaN, and the token conversions.
 *
 * Also a probe for tests/python/test_convert_torch.py:
 *   check_convert --probe C MEAN0,MEAN1,.. STD0,STD1,..
 * converts a 1 x 256 x C image whose pixel x holds x in every channel and
 * writes the NHWC fp32, then fp16, then bf16 outputs (native byte order).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "convert.h"

/* Parameter sets: torchvision's ImageNet values, plain x/255, [-1, 1],
 * ones that push fp16 past its range and under its normals, and one that
 * makes exact ties. */
static const struct {
	float mean[3], std[3];
} params[] = {
	{ { 0.485f, 0.456f, 0.406f }, { 0.229f, 0.224f, 0.225f } },
	{ { 0.0f, 0.0f, 0.0f }, { 1.0f, 1.0f, 1.0f } },
	{ { 0.5f, 0.5f, 0.5f }, { 0.5f, 0.5f, 0.5f } },
	{ { 0.5f, -3.0f, 100.0f }, { 1e-3f, 7.0f, 0.01f } },
	{ { 0.0f, 1.0f, 0.25f }, { 1e-6f, 3e-5f, 1e4f } },
	{ { 1e3f, -1e3f, 0.0f }, { 1e-7f, 1e-7f, 1e5f } },
	/* scale exactly 1 + 2^-8 and 1 + 2^-11: x = 1 (and others) land on
	 * bf16 and fp16 ties, which a round-half-up would get wrong */
	{ { 0.0f, 0.0f, 0.0f }, { 0.003906309604644775f, 0.003919654525816441f, 1.0f } },
};
#define NPARAMS (sizeof(params) / sizeof(params[0]))

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* fp16 reference: the compiler's (libgcc's) conversion, nearest even. */
static uint16_t ref_f16(float f)
{
	_Float16 h = (_Float16)f;
	uint16_t u;
	memcpy(&u, &h, 2);
	return u;
}

/* bf16 reference: of the two bf16 values around f (truncation and the next
 * one up in magnitude), the nearer in exact double arithmetic, the even one
 * on a tie. Finite f only. */
static uint16_t ref_bf16(float f)
{
	uint32_t u = bits(f);
	uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
	double dl = fabs((double)f - (double)from_bits((uint32_t)lo << 16));
	double dh = fabs((double)from_bits((uint32_t)hi << 16) - (double)f);
	if ((hi & 0x7fff) == 0x7f80) /* hi is infinity: IEEE rounds as if it were 2^128 */
		dh = 0x1p128 - fabs((double)f);
	if (dl < dh)
		return lo;
	if (dh < dl)
		return hi;
	return (lo & 1) ? hi : lo;
}

static struct feed_convert make(uint32_t h, uint32_t w, uint32_t c, enum feed_convert_dtype d,
				enum feed_convert_layout l, const float *mean, const float *std)
{
	struct feed_convert cv;
	int r = feed_convert_init(&cv, h, w, c, d, l, mean, std);
	ck_assert_int_eq(r, 0);
	return cv;
}

START_TEST(test_convert_init_errors)
{
	struct feed_convert cv, keep;
	float m[4] = { 0 }, s[4] = { 1, 1, 1, 1 };
	memset(&keep, 0xab, sizeof(keep));
	cv = keep;
	ck_assert_int_eq(feed_convert_init(&cv, 0, 4, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 0, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 0, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 5, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 65536, 65536, 1, FEED_CONVERT_F32, FEED_CONVERT_NCHW,
					   m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 3, (enum feed_convert_dtype)3, FEED_CONVERT_NCHW,
					   m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 3, FEED_CONVERT_F32, (enum feed_convert_layout)2,
					   m, s), -EINVAL);
	/* std 0, negative zero, infinite, NaN, so small the scale overflows;
	 * a NaN or infinite mean. */
	const float bad_std[] = { 0.0f, -0.0f, INFINITY, NAN, 1e-45f };
	for (size_t i = 0; i < sizeof(bad_std) / sizeof(bad_std[0]); i++) {
		s[1] = bad_std[i];
		ck_assert_msg(feed_convert_init(&cv, 4, 4, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s)
			      == -EINVAL, "std %g accepted", bad_std[i]);
	}
	s[1] = 1;
	m[2] = NAN;
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	m[2] = INFINITY;
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, m, s), -EINVAL);
	ck_assert_int_eq(feed_convert_init(NULL, 4, 4, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, NULL, NULL),
			 -EINVAL);
	ck_assert_msg(!memcmp(&cv, &keep, sizeof(cv)), "*ret written on error");
	/* The channel past c is not read: a NaN there is fine. */
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 2, FEED_CONVERT_BF16, FEED_CONVERT_NHWC, m, s), 0);
	ck_assert_uint_eq(feed_convert_sample_bytes(&cv), 4 * 4 * 2 * 2);
	cv = make(224, 224, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, NULL, NULL);
	ck_assert_uint_eq(feed_convert_sample_bytes(&cv), 224 * 224 * 3 * 4);
	ck_assert_int_eq(feed_convert_images_cpu(NULL, NULL, 0, NULL, NULL), -EINVAL);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, NULL, 1, NULL, &cv), -EINVAL);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, NULL, 0, NULL, NULL), 0);
}
END_TEST

/* Values worked out by hand. Plain x/255: scale = float(1/255) =
 * 0x808081 * 2^-31, and 255 * scale = 1 + 127 * 2^-31 rounds to 1. Mean
 * 0.5, std 0.5: scale = float(2/255) = 0x808081 * 2^-30, bias -1, so 0 ->
 * -1 and 255 -> 1 + 127 * 2^-30, which rounds to 1 + 2^-23 (torchvision
 * gets 1: the single fmaf with a rounded scale is 1 ulp off there, within
 * the few ulp convert.h allows). ImageNet's red channel maps 0 to
 * -0.485/0.229 = -2.117903... */
START_TEST(test_convert_hand_values)
{
	const float half[3] = { 0.5f, 0.5f, 0.5f };
	const uint8_t px[3] = { 0, 255, 51 };
	float out[3];
	struct feed_convert cv = make(1, 1, 3, FEED_CONVERT_F32, FEED_CONVERT_NHWC, half, half);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, px, 1, NULL, out), 0);
	ck_assert_uint_eq(bits(out[0]), bits(-1.0f));
	ck_assert_uint_eq(bits(out[1]), 0x3f800001);
	ck_assert_float_eq_tol(out[2], -0.6f, 1e-6f); /* 51/255 = 0.2 */

	cv = make(1, 1, 3, FEED_CONVERT_F32, FEED_CONVERT_NHWC, NULL, NULL);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, px, 1, NULL, out), 0);
	ck_assert_uint_eq(bits(out[0]), 0);
	ck_assert_uint_eq(bits(out[1]), bits(1.0f));
	ck_assert_float_eq_tol(out[2], 0.2f, 1e-7f);

	cv = make(1, 1, 3, FEED_CONVERT_F32, FEED_CONVERT_NHWC, params[0].mean, params[0].std);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, px, 1, NULL, out), 0);
	ck_assert_float_eq_tol(out[0], -2.1179039f, 1e-6f);
	ck_assert_float_eq_tol(out[1], (1.0f - 0.456f) / 0.224f, 1e-5f);
	ck_assert_float_eq_tol(out[2], (0.2f - 0.406f) / 0.225f, 1e-5f);

	/* bf16 and fp16 of those: -1 and 1 are exact in both. */
	uint16_t h[3];
	cv = make(1, 1, 3, FEED_CONVERT_BF16, FEED_CONVERT_NHWC, half, half);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, px, 1, NULL, h), 0);
	ck_assert_uint_eq(h[0], 0xbf80);
	ck_assert_uint_eq(h[1], 0x3f80);
	ck_assert_uint_eq(h[2], 0xbf1a); /* -0.6 = 0xbf19999a -> up */
	cv = make(1, 1, 3, FEED_CONVERT_F16, FEED_CONVERT_NHWC, half, half);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, px, 1, NULL, h), 0);
	ck_assert_uint_eq(h[0], 0xbc00);
	ck_assert_uint_eq(h[1], 0x3c00);
	ck_assert_uint_eq(h[2], 0xb8cd); /* -0.6 -> 0xb8cd (-0.60009765625) */
}
END_TEST

/* Every twin fp32 output over all 256 inputs equals the exact x*scale +
 * bias rounded once (double holds it exactly for these parameters) and is
 * within a few ulp of torchvision's (x/255 - mean)/std. */
START_TEST(test_convert_f32_all_inputs)
{
	uint8_t img[256];
	float out[256];
	for (int x = 0; x < 256; x++)
		img[x] = (uint8_t)x;
	for (size_t p = 0; p < 3; p++) {
		for (int ch = 0; ch < 3; ch++) {
			const float m = params[p].mean[ch], s = params[p].std[ch];
			struct feed_convert cv = make(1, 256, 1, FEED_CONVERT_F32, FEED_CONVERT_NCHW, &m, &s);
			ck_assert_int_eq(feed_convert_images_cpu(&cv, img, 1, NULL, out), 0);
			for (int x = 0; x < 256; x++) {
				float want = (float)((double)x * cv.scale[0] + cv.bias[0]);
				ck_assert_msg(bits(out[x]) == bits(want), "x %d: %a, want %a", x,
					      (double)out[x], (double)want);
				float tv = ((float)x / 255.0f - m) / s;
				ck_assert_msg(fabsf(out[x] - tv) <= 1e-6f * fmaxf(1.0f, fabsf(tv)),
					      "x %d: %g, torchvision %g", x, (double)out[x], (double)tv);
			}
		}
	}
}
END_TEST

/* A 2 x 3 image of 3 channels, all bytes distinct, and per-channel means
 * that tell the channels apart: element (ch, y, x) of NCHW and (y, x, ch)
 * of NHWC both come from byte (y*3 + x)*3 + ch. */
START_TEST(test_convert_layouts)
{
	uint8_t img[18];
	for (int i = 0; i < 18; i++)
		img[i] = (uint8_t)(10 * i + 1);
	const float mean[3] = { 0.0f, 0.5f, 1.0f }, std[3] = { 1.0f, 1.0f, 1.0f };
	float nchw[18], nhwc[18];
	struct feed_convert a = make(2, 3, 3, FEED_CONVERT_F32, FEED_CONVERT_NCHW, mean, std);
	struct feed_convert b = make(2, 3, 3, FEED_CONVERT_F32, FEED_CONVERT_NHWC, mean, std);
	ck_assert_int_eq(feed_convert_images_cpu(&a, img, 1, NULL, nchw), 0);
	ck_assert_int_eq(feed_convert_images_cpu(&b, img, 1, NULL, nhwc), 0);
	for (int ch = 0; ch < 3; ch++)
		for (int y = 0; y < 2; y++)
			for (int x = 0; x < 3; x++) {
				int src = (y * 3 + x) * 3 + ch;
				float want = feed_convert_px_f32(img[src], a.scale[ch], a.bias[ch]);
				ck_assert_uint_eq(bits(nchw[ch * 6 + y * 3 + x]), bits(want));
				ck_assert_uint_eq(bits(nhwc[src]), bits(want));
			}
	/* By hand: NCHW element 11 is (ch 1, y 1, x 2), byte 16 = 161,
	 * 161/255 - 0.5 = 0.131372...; NHWC element 11 is (y 1, x 0, ch 2), byte
	 * 11 = 111, 111/255 - 1 = -0.564705... */
	ck_assert_float_eq_tol(nchw[11], 161.0f / 255.0f - 0.5f, 1e-6f);
	ck_assert_float_eq_tol(nhwc[11], 111.0f / 255.0f - 1.0f, 1e-6f);
}
END_TEST

/* flip[s] mirrors sample s alone: sample 1 (flipped) of a batch of the same
 * image twice is sample 0 mirrored, in both layouts; a 1-wide image is its
 * own mirror. */
START_TEST(test_convert_flip)
{
	uint8_t img[2 * 12];
	for (int i = 0; i < 12; i++)
		img[i] = img[12 + i] = (uint8_t)(7 * i);
	const uint8_t flip[2] = { 0, 1 };
	for (int l = 0; l < 2; l++) {
		uint16_t out[24];
		struct feed_convert cv = make(2, 3, 2, FEED_CONVERT_BF16, (enum feed_convert_layout)l,
					      params[0].mean, params[0].std);
		ck_assert_int_eq(feed_convert_images_cpu(&cv, img, 2, flip, out), 0);
		for (int ch = 0; ch < 2; ch++)
			for (int y = 0; y < 2; y++)
				for (int x = 0; x < 3; x++) {
					int i = l == FEED_CONVERT_NCHW ? (ch * 2 + y) * 3 + x : (y * 3 + x) * 2 + ch;
					int j = l == FEED_CONVERT_NCHW ? (ch * 2 + y) * 3 + (2 - x)
								       : (y * 3 + (2 - x)) * 2 + ch;
					ck_assert_uint_eq(out[12 + i], out[j]);
				}
		ck_assert_msg(memcmp(out, out + 12, 24) != 0, "flip changed nothing");
	}
}
END_TEST

/* The twin's row walk puts every element where feed_convert_src_index (the
 * kernels' mapping) says, for every dtype, layout, flip and c of 1..4, on
 * odd sizes, rows wider than any vector the compiler may use. */
START_TEST(test_convert_twin_matches_element_index)
{
	enum { H = 3, W = 37, N = 2 };
	uint8_t img[N * H * W * 4];
	for (size_t i = 0; i < sizeof(img); i++)
		img[i] = (uint8_t)(i * 37 + 11);
	const uint8_t flip[N] = { 1, 0 };
	const float mean[4] = { 0.1f, 0.2f, 0.3f, 0.4f }, std[4] = { 0.5f, 0.25f, 2.0f, 0.125f };
	for (uint32_t c = 1; c <= 4; c++)
		for (int d = 0; d < 3; d++)
			for (int l = 0; l < 2; l++) {
				struct feed_convert cv = make(H, W, c, (enum feed_convert_dtype)d,
							      (enum feed_convert_layout)l, mean, std);
				union { float f[N * H * W * 4]; uint16_t h[N * H * W * 4]; } out;
				ck_assert_int_eq(feed_convert_images_cpu(&cv, img, N, flip, &out), 0);
				size_t per = (size_t)H * W * c;
				for (size_t s = 0; s < N; s++)
					for (size_t e = 0; e < per; e++) {
						uint32_t ch;
						size_t at = feed_convert_src_index(&cv, e, flip[s], &ch);
						ck_assert_uint_lt(at, per);
						uint8_t x = img[s * per + at];
						float f = feed_convert_px_f32(x, cv.scale[ch], cv.bias[ch]);
						uint32_t got = d == 0 ? bits(out.f[s * per + e]) : out.h[s * per + e];
						uint32_t want = d == 0 ? bits(f)
							: d == 1 ? feed_f32_to_f16(f) : feed_f32_to_bf16(f);
						ck_assert_msg(got == want, "c %u dtype %d layout %d sample %zu elem %zu: %#x, want %#x",
							      c, d, l, s, e, got, want);
					}
			}
}
END_TEST

/* Known roundings: ties to even, the top of fp16, subnormals, signs, NaN. */
START_TEST(test_convert_rounding_edges)
{
	static const struct { uint32_t f; uint16_t h, b; } cases[] = {
		{ 0x00000000, 0x0000, 0x0000 }, { 0x80000000, 0x8000, 0x8000 },
		{ 0x3f800000, 0x3c00, 0x3f80 }, /* 1 */
		{ 0x3f801000, 0x3c00, 0x3f80 }, /* 1 + 2^-11: fp16 tie, to even */
		{ 0x3f803000, 0x3c02, 0x3f80 }, /* 1 + 3*2^-11: fp16 tie, up to even */
		{ 0x3f808000, 0x3c04, 0x3f80 }, /* 1 + 2^-8: bf16 tie, to even */
		{ 0x3f818000, 0x3c0c, 0x3f82 }, /* 1 + 3*2^-8: bf16 tie, up to even */
		{ 0x3f808001, 0x3c04, 0x3f81 }, /* just above the bf16 tie */
		{ 0x477fe000, 0x7bff, 0x4780 }, /* 65504, fp16's largest */
		{ 0x477fefff, 0x7bff, 0x4780 }, /* just under 65520 */
		{ 0x477ff000, 0x7c00, 0x4780 }, /* 65520: tie, to even = inf */
		{ 0xc7800000, 0xfc00, 0xc780 }, /* -65536 */
		{ 0x7f7fffff, 0x7c00, 0x7f80 }, /* FLT_MAX: bf16 rounds to inf */
		{ 0x7f800000, 0x7c00, 0x7f80 }, { 0xff800000, 0xfc00, 0xff80 },
		{ 0x38800000, 0x0400, 0x3880 }, /* 2^-14, smallest fp16 normal */
		{ 0x387ff000, 0x0400, 0x3880 }, /* just under it: rounds up into it */
		{ 0x33800000, 0x0001, 0x3380 }, /* 2^-24, smallest fp16 subnormal */
		{ 0x33000000, 0x0000, 0x3300 }, /* 2^-25: tie, to even 0 */
		{ 0x33000001, 0x0001, 0x3300 }, /* just above */
		{ 0x33c00000, 0x0002, 0x33c0 }, /* 1.5 * 2^-24: tie, to even 2 */
		{ 0xb3a00000, 0x8001, 0xb3a0 }, /* -1.25 * 2^-24 */
		{ 0x00000001, 0x0000, 0x0000 }, /* smallest float subnormal */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		float f = from_bits(cases[i].f);
		ck_assert_msg(feed_f32_to_f16(f) == cases[i].h, "f16(%#x) = %#x, want %#x", cases[i].f,
			      feed_f32_to_f16(f), cases[i].h);
		ck_assert_msg(feed_f32_to_bf16(f) == cases[i].b, "bf16(%#x) = %#x, want %#x", cases[i].f,
			      feed_f32_to_bf16(f), cases[i].b);
	}
	/* NaNs stay NaN (never infinity), quiet, with their sign: including one
	 * whose payload sits only in the bits rounding drops. */
	const uint32_t nans[] = { 0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7f80ffff };
	for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
		uint16_t h = feed_f32_to_f16(from_bits(nans[i])), b = feed_f32_to_bf16(from_bits(nans[i]));
		ck_assert_msg((h & 0x7c00) == 0x7c00 && (h & 0x0200), "f16 NaN %#x -> %#x", nans[i], h);
		ck_assert_msg((b & 0x7f80) == 0x7f80 && (b & 0x0040), "bf16 NaN %#x -> %#x", nans[i], b);
		ck_assert_uint_eq(h >> 15, nans[i] >> 31);
		ck_assert_uint_eq(b >> 15, nans[i] >> 31);
	}
}
END_TEST

/* The rounding functions against the references on a sweep of float bit
 * patterns (a stride prime to every power of two, so every exponent and
 * many mantissas), finite values only for bf16's reference. */
START_TEST(test_convert_rounding_sweep)
{
	for (uint64_t u = 0; u <= UINT32_MAX; u += 4099) {
		float f = from_bits((uint32_t)u);
		if (isnan(f))
			continue;
		ck_assert_msg(feed_f32_to_f16(f) == ref_f16(f), "f16(%#x) = %#x, reference %#x",
			      (uint32_t)u, feed_f32_to_f16(f), ref_f16(f));
		if (isfinite(f))
			ck_assert_msg(feed_f32_to_bf16(f) == ref_bf16(f), "bf16(%#x) = %#x, reference %#x",
				      (uint32_t)u, feed_f32_to_bf16(f), ref_bf16(f));
	}
}
END_TEST

/* All 256 inputs x every parameter set x every channel: the fp16 and bf16
 * twins give the references' rounding of the fp32 twin's value, and no
 * output is NaN (fp16 may overflow to inf on the extreme sets). */
START_TEST(test_convert_all_inputs_bits)
{
	uint8_t img[256 * 3];
	for (int i = 0; i < 256 * 3; i++)
		img[i] = (uint8_t)(i / 3);
	for (size_t p = 0; p < NPARAMS; p++) {
		float f32[256 * 3];
		uint16_t f16[256 * 3], bf16[256 * 3];
		struct feed_convert a = make(1, 256, 3, FEED_CONVERT_F32, FEED_CONVERT_NHWC,
					     params[p].mean, params[p].std);
		struct feed_convert b = make(1, 256, 3, FEED_CONVERT_F16, FEED_CONVERT_NHWC,
					     params[p].mean, params[p].std);
		struct feed_convert c = make(1, 256, 3, FEED_CONVERT_BF16, FEED_CONVERT_NHWC,
					     params[p].mean, params[p].std);
		ck_assert_int_eq(feed_convert_images_cpu(&a, img, 1, NULL, f32), 0);
		ck_assert_int_eq(feed_convert_images_cpu(&b, img, 1, NULL, f16), 0);
		ck_assert_int_eq(feed_convert_images_cpu(&c, img, 1, NULL, bf16), 0);
		for (int i = 0; i < 256 * 3; i++) {
			ck_assert_msg(!isnan(f32[i]), "set %zu input %d: NaN", p, i / 3);
			ck_assert_msg(f16[i] == ref_f16(f32[i]), "set %zu input %d ch %d: f16 %#x, want %#x",
				      p, i / 3, i % 3, f16[i], ref_f16(f32[i]));
			ck_assert_msg(bf16[i] == ref_bf16(f32[i]), "set %zu input %d ch %d: bf16 %#x, want %#x",
				      p, i / 3, i % 3, bf16[i], ref_bf16(f32[i]));
			ck_assert((f16[i] & 0x7fff) <= 0x7c00);
			ck_assert((bf16[i] & 0x7fff) <= 0x7f80);
		}
	}
}
END_TEST

START_TEST(test_convert_tokens)
{
	const uint16_t a[] = { 0, 1, 32767, 32768, 65535 };
	const uint32_t b[] = { 0, 1, 0x7fffffffu, 0x80000000u, 0xffffffffu };
	int64_t out[5];
	ck_assert_int_eq(feed_convert_tokens_u16_cpu(a, 5, out), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(out[i], (int64_t)a[i]);
	ck_assert_int_eq(out[4], 65535); /* not sign-extended */
	ck_assert_int_eq(feed_convert_tokens_u32_cpu(b, 5, out), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(out[i], (int64_t)b[i]);
	ck_assert_int_eq(out[4], 4294967295LL);
	ck_assert_int_eq(feed_convert_tokens_u16_cpu(NULL, 1, out), -EINVAL);
	ck_assert_int_eq(feed_convert_tokens_u32_cpu(b, 1, NULL), -EINVAL);
	ck_assert_int_eq(feed_convert_tokens_u32_cpu(NULL, 0, NULL), 0);
}
END_TEST

static int parse_floats(const char *s, float *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		char *end;
		out[i] = strtof(s, &end);
		if (end == s || (*end != (i + 1 < n ? ',' : '\0')))
			return -1;
		s = end + 1;
	}
	return 0;
}

static int probe(int argc, char **argv)
{
	float mean[4], std[4];
	uint32_t c = argc == 5 ? (uint32_t)atoi(argv[2]) : 0;
	if (c < 1 || c > 4 || parse_floats(argv[3], mean, c) || parse_floats(argv[4], std, c)) {
		fprintf(stderr, "usage: %s --probe C MEAN0,.. STD0,..\n", argv[0]);
		return 2;
	}
	uint8_t img[256 * 4];
	for (uint32_t i = 0; i < 256 * c; i++)
		img[i] = (uint8_t)(i / c);
	static float f32[256 * 4];
	static uint16_t h16[2][256 * 4];
	for (int d = 0; d < 3; d++) {
		struct feed_convert cv;
		int r = feed_convert_init(&cv, 1, 256, c, (enum feed_convert_dtype)d, FEED_CONVERT_NHWC,
					  mean, std);
		if (r) {
			fprintf(stderr, "probe: feed_convert_init: %s\n", strerror(-r));
			return 1;
		}
		feed_convert_images_cpu(&cv, img, 1, NULL, d == 0 ? (void *)f32 : (void *)h16[d - 1]);
	}
	fwrite(f32, 4, 256 * c, stdout);
	fwrite(h16[0], 2, 256 * c, stdout);
	fwrite(h16[1], 2, 256 * c, stdout);
	return fflush(stdout) ? 1 : 0;
}

static Suite *convert_suite(void)
{
	Suite *s = suite_create("convert");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_convert_init_errors);
	tcase_add_test(tc, test_convert_hand_values);
	tcase_add_test(tc, test_convert_f32_all_inputs);
	tcase_add_test(tc, test_convert_layouts);
	tcase_add_test(tc, test_convert_flip);
	tcase_add_test(tc, test_convert_twin_matches_element_index);
	tcase_add_test(tc, test_convert_rounding_edges);
	tcase_add_test(tc, test_convert_rounding_sweep);
	tcase_add_test(tc, test_convert_all_inputs_bits);
	tcase_add_test(tc, test_convert_tokens);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--probe"))
		return probe(argc, argv);
	return check_run(convert_suite);
}
