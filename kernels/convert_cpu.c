/*
 * convert_cpu.c: set-up of a conversion and the CPU twins of the kernels
 * in convert.cu (see convert.h).
 *
 * Owns: checking a conversion's parameters once (feed_convert_init) and the
 * host loops over a batch. Each output value comes from the element
 * functions of convert.h, the very code the kernels run; only the walk
 * differs (row by row here, one thread per element there), and the index
 * of every element is the one feed_convert_src_index gives, which
 * tests/unit/check_convert.c checks.
 *
 * Threads: pure; any number of threads at once. Never allocates, blocks or
 * prints. Built with -ffp-contract=off: the one float operation per pixel
 * is the explicit fmaf of the element function, and the compiler must not
 * fuse or reorder anything around it.
 */
#include "convert.h"

#include <errno.h>
#include <math.h>

int feed_convert_init(struct feed_convert *ret, uint32_t h, uint32_t w, uint32_t c,
		      enum feed_convert_dtype dtype, enum feed_convert_layout layout,
		      const float *mean, const float *std)
{
	struct feed_convert cv = { .h = h, .w = w, .c = c, .dtype = dtype, .layout = layout };

	if (!ret || !h || !w || !c || c > FEED_CONVERT_MAX_C ||
	    (uint64_t)h * w * c > UINT32_MAX)
		return -EINVAL;
	if (dtype != FEED_CONVERT_F32 && dtype != FEED_CONVERT_F16 && dtype != FEED_CONVERT_BF16)
		return -EINVAL;
	if (layout != FEED_CONVERT_NCHW && layout != FEED_CONVERT_NHWC)
		return -EINVAL;
	for (uint32_t ch = 0; ch < c; ch++) {
		double m = mean ? mean[ch] : 0.0, s = std ? std[ch] : 1.0;
		/* Once, in double, then rounded: one rounding each. */
		float scale = (float)(1.0 / (255.0 * s)), bias = (float)(-m / s);
		if (!isfinite(scale) || !isfinite(bias) || scale == 0.0f ||
		    !isfinite(feed_convert_px_f32(0, scale, bias)) ||
		    !isfinite(feed_convert_px_f32(255, scale, bias)))
			return -EINVAL; /* also a std of 0, inf or NaN, a NaN mean */
		cv.scale[ch] = scale;
		cv.bias[ch] = bias;
	}
	*ret = cv;
	return 0;
}

size_t feed_convert_sample_bytes(const struct feed_convert *cv)
{
	size_t elem = cv->dtype == FEED_CONVERT_F32 ? 4 : 2;
	return (size_t)cv->h * cv->w * cv->c * elem;
}

/*
 * The twin converts through a table: an input is one of 256 bytes, so per
 * channel the table holds PX(x, scale, bias) for every x, computed by the
 * element function itself (the very code the kernels run: the same bits by
 * construction, and the tests check every entry). The walk then only
 * gathers: one output row of one channel (NCHW) or one output pixel row
 * (NHWC) per inner loop. A macro rather than a function pointer so it
 * inlines for each output type.
 */
#define CONVERT_TABLE(T, PX, lut)                                                       \
	do {                                                                            \
		for (uint32_t ch = 0; ch < cv->c; ch++)                                 \
			for (unsigned x = 0; x < 256; x++)                              \
				(lut)[ch][x] = PX((uint8_t)x, cv->scale[ch], cv->bias[ch]); \
	} while (0)

#define CONVERT_SAMPLE(T, lut)                                                          \
	do {                                                                            \
		T *o = (T *)out;                                                        \
		if (cv->layout == FEED_CONVERT_NCHW) {                                  \
			for (uint32_t ch = 0; ch < c; ch++) {                           \
				const T *t = (lut)[ch];                                 \
				for (uint32_t y = 0; y < h; y++) {                      \
					const uint8_t *row = in + (size_t)y * w * c + ch; \
					if (fl)                                         \
						for (uint32_t x = 0; x < w; x++)        \
							*o++ = t[row[(size_t)(w - 1 - x) * c]]; \
					else if (c == 3)                                \
						for (uint32_t x = 0; x < w; x++)        \
							*o++ = t[row[(size_t)x * 3]];   \
					else                                            \
						for (uint32_t x = 0; x < w; x++)        \
							*o++ = t[row[(size_t)x * c]];   \
				}                                                       \
			}                                                               \
		} else {                                                                \
			for (uint32_t y = 0; y < h; y++) {                              \
				const uint8_t *row = in + (size_t)y * w * c;            \
				for (uint32_t x = 0; x < w; x++) {                      \
					const uint8_t *px = row + (size_t)(fl ? w - 1 - x : x) * c; \
					for (uint32_t ch = 0; ch < c; ch++)             \
						*o++ = (lut)[ch][px[ch]];               \
				}                                                       \
			}                                                               \
		}                                                                       \
	} while (0)

/* The tables of one batch: 256 outputs per channel. */
union convert_lut {
	float f32[FEED_CONVERT_MAX_C][256];
	uint16_t u16[FEED_CONVERT_MAX_C][256];
};

static void convert_lut(const struct feed_convert *cv, union convert_lut *lut)
{
	switch (cv->dtype) {
	case FEED_CONVERT_F32:
		CONVERT_TABLE(float, feed_convert_px_f32, lut->f32);
		break;
	case FEED_CONVERT_F16:
		CONVERT_TABLE(uint16_t, feed_convert_px_f16, lut->u16);
		break;
	default:
		CONVERT_TABLE(uint16_t, feed_convert_px_bf16, lut->u16);
		break;
	}
}

static void convert_sample(const struct feed_convert *cv, const union convert_lut *lut,
			   const uint8_t *in, int fl, void *out)
{
	uint32_t h = cv->h, w = cv->w, c = cv->c;
	if (cv->dtype == FEED_CONVERT_F32)
		CONVERT_SAMPLE(float, lut->f32);
	else
		CONVERT_SAMPLE(uint16_t, lut->u16);
}

int feed_convert_images_cpu(const struct feed_convert *cv, const uint8_t *src, size_t n,
			    const uint8_t *flip, void *dst)
{
	union convert_lut lut;
	if (!cv || (n && (!src || !dst)))
		return -EINVAL;
	if (!n)
		return 0;
	convert_lut(cv, &lut);
	size_t in_bytes = (size_t)cv->h * cv->w * cv->c, out_bytes = feed_convert_sample_bytes(cv);
	for (size_t s = 0; s < n; s++)
		convert_sample(cv, &lut, src + s * in_bytes, flip && flip[s],
			       (char *)dst + s * out_bytes);
	return 0;
}

int feed_convert_tokens_u16_cpu(const uint16_t *src, size_t n, int64_t *dst)
{
	if (n && (!src || !dst))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		dst[i] = feed_convert_tok_u16(src[i]);
	return 0;
}

int feed_convert_tokens_u32_cpu(const uint32_t *src, size_t n, int64_t *dst)
{
	if (n && (!src || !dst))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		dst[i] = feed_convert_tok_u32(src[i]);
	return 0;
}
