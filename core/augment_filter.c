/*
 * augment_filter.c: the neighbourhood filters of a PIXEL stage, as
 * torchvision.transforms.functional computes them on uint8 tensors:
 * gaussian_blur (normalised float32 Gaussian, reflect padding, rounded
 * half to even) and adjust_sharpness (blend with the 3x3 [1 1 1; 1 5 1;
 * 1 1 1] / 13 smoothing, rounded, the border rows and columns kept).
 *
 * torch convolves with the 2-D kernel in one float sum; this file runs the
 * blur as two 1-D passes (the same kernel, factored), so a pixel whose
 * exact value lies within float rounding of a .5 tie may differ by 1.
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "augment_pixel.h"

/* Reflect (no edge repeat) an index into [0, n). */
static inline uint32_t reflect(int64_t i, uint32_t n)
{
	if (i < 0)
		i = -i;
	if (i >= n)
		i = 2 * (int64_t)n - 2 - i;
	return (uint32_t)i;
}

/* torchvision's _get_gaussian_kernel1d in float: x = linspace(-half,
 * half, k), pdf = exp(-0.5 (x / sigma)^2), normalised. */
static void gauss_kernel(uint32_t k, double sigma, float *kern)
{
	float half = (float)((k - 1) * 0.5), s = (float)sigma, sum = 0.0f;
	float step = k > 1 ? (half - -half) / (float)(k - 1) : 0.0f;

	for (uint32_t i = 0; i < k; i++) {
		float x = i < k / 2 ? -half + step * (float)i : half - step * (float)(k - 1 - i);
		float t = x / s;
		kern[i] = expf(-0.5f * (t * t));
		sum += kern[i];
	}
	for (uint32_t i = 0; i < k; i++)
		kern[i] /= sum;
}

void px_blur(struct aug_px_img *im, uint32_t ksize, double sigma)
{
	float kern[256];
	uint32_t h = im->h, w = im->w, c = im->c, r = ksize / 2;
	float *f = im->fbuf;

	px_flush(im);
	gauss_kernel(ksize, sigma, kern);
	const uint8_t *s = im->cur;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w; x++) {
			bool in = x >= r && x + r < w; /* no reflection needed */
			for (uint32_t ch = 0; ch < c; ch++) {
				const uint8_t *p = s + ((size_t)y * w) * c + ch;
				float acc = 0.0f;
				for (uint32_t t = 0; t < ksize; t++) {
					uint32_t xx = in ? x + t - r : reflect((int64_t)x + t - r, w);
					acc += kern[t] * (float)p[(size_t)xx * c];
				}
				f[((size_t)y * w + x) * c + ch] = acc;
			}
		}
	uint8_t *d = px_target(im, true);
	size_t row = (size_t)w * c;
	for (uint32_t y = 0; y < h; y++) {
		const float *rows[256];
		for (uint32_t t = 0; t < ksize; t++)
			rows[t] = f + (size_t)reflect((int64_t)y + t - r, h) * row;
		for (size_t i = 0; i < row; i++) {
			float acc = 0.0f;
			for (uint32_t t = 0; t < ksize; t++)
				acc += kern[t] * rows[t][i];
			d[(size_t)y * row + i] = (uint8_t)px_round_even(acc);
		}
	}
	im->cur = d;
}

/* px_round_even for x in [0, 2^23), without its branches (so the loops
 * over a row vectorize): the same bits there. */
static inline float round_even_pos(float x)
{
	return (x + 0x1p23f) - 0x1p23f;
}

/* The 3x3 smoothing at p, summed in torch's order, rounded half to even
 * (the sum of non-negative terms with weights summing to 1: in [0, 256)). */
static inline float sharp_smooth(const uint8_t *p, ptrdiff_t rs, ptrdiff_t cc, float k1, float k5)
{
	float acc = 0.0f;

	acc += k1 * (float)p[-rs - cc];
	acc += k1 * (float)p[-rs];
	acc += k1 * (float)p[-rs + cc];
	acc += k1 * (float)p[-cc];
	acc += k5 * (float)p[0];
	acc += k1 * (float)p[cc];
	acc += k1 * (float)p[rs - cc];
	acc += k1 * (float)p[rs];
	acc += k1 * (float)p[rs + cc];
	return round_even_pos(acc);
}

/* One row of px_sharpness: the border pixels keep their value (blended
 * with itself), the inner ones blend with their 3x3 smoothing. */
static void sharp_row(const uint8_t *s, uint8_t *d, size_t row, uint32_t c, bool edge, float r,
		      float r1)
{
	const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
	size_t lo = edge ? row : c, hi = edge ? row : row - c;

	for (size_t at = 0; at < lo; at++)
		d[at] = px_blend(s[at], s[at], r, r1);
	for (size_t at = lo; at < hi; at++)
		d[at] = px_blend(s[at], sharp_smooth(s + at, (ptrdiff_t)row, (ptrdiff_t)c, k1, k5),
				 r, r1);
	for (size_t at = hi; at < row; at++)
		d[at] = px_blend(s[at], s[at], r, r1);
}

void px_sharpness(struct aug_px_img *im, double factor)
{
	uint32_t h = im->h, w = im->w, c = im->c;
	float r = (float)factor, r1 = (float)(1.0 - factor);

	if (h <= 2 || w <= 2)
		return;
	px_flush(im);
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, false);
	size_t row = (size_t)w * c;
	for (uint32_t y = 0; y < h; y++)
		sharp_row(s + (size_t)y * row, d + (size_t)y * row, row, c, y == 0 || y + 1 == h, r,
			  r1);
	im->cur = d;
}
