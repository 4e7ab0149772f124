/*
 * augment_geom.c: rotate and affine of a PIXEL stage as torchvision's
 * tensor path does them: the inverse matrix of _get_inverse_affine_matrix
 * (in double, then float32 as torch.tensor(matrix) makes it), the grid of
 * _gen_affine_grid (pixel centres relative to the image centre, divided by
 * half the size), grid_sample with align_corners=False and zero padding,
 * then the fill through the mask channel torchvision appends (nearest:
 * outside pixels take the fill; bilinear: v * m + (1 - m) * fill), rounded
 * half to even.
 *
 * torch evaluates the grid with a BLAS matrix product whose summation
 * order and fused multiply-adds this file does not copy; a source
 * coordinate within float rounding of a .5 tie (nearest) or of a pixel
 * boundary can therefore pick the neighbouring pixel. The README states
 * the measured bound.
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include <math.h>
#include <string.h>

#include "augment_pixel.h"
#include "pipeline.h"

void aug_affine_matrix(const struct aug_affine *a, double m[6])
{
	double rot = a->angle * M_PI / 180.0, sx = a->shx * M_PI / 180.0;
	double sy = a->shy * M_PI / 180.0;
	double ca = cos(rot - sy) / cos(sy);
	double cb = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
	double cc = sin(rot - sy) / cos(sy);
	double cd = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);

	m[0] = cd / a->scale;
	m[1] = -cb / a->scale;
	m[2] = 0.0 / a->scale;
	m[3] = -cc / a->scale;
	m[4] = ca / a->scale;
	m[5] = 0.0 / a->scale;
	m[2] += m[0] * (-a->cx - a->tx) + m[1] * (-a->cy - a->ty);
	m[5] += m[3] * (-a->cx - a->tx) + m[4] * (-a->cy - a->ty);
	m[2] += a->cx;
	m[5] += a->cy;
}

/* One output pixel, nearest: the source pixel or the fill. Inlined into
 * px_affine's loop (a call per pixel was a tenth of a TrivialAugmentWide
 * warp), RGB copied without a loop. */
static inline void warp_nearest(const uint8_t *s, uint32_t h, uint32_t w, uint32_t c, float ix,
				float iy, uint8_t fill, uint8_t *d)
{
	float rx = px_round_even(ix), ry = px_round_even(iy);

	if (rx >= 0.0f && ry >= 0.0f && rx < (float)w && ry < (float)h) {
		const uint8_t *p = s + ((size_t)ry * w + (size_t)rx) * c;
		if (c == 3) {
			d[0] = p[0];
			d[1] = p[1];
			d[2] = p[2];
			return;
		}
		for (uint32_t k = 0; k < c; k++)
			d[k] = p[k];
	} else {
		for (uint32_t k = 0; k < c; k++)
			d[k] = fill;
	}
}

void px_warp_nearest(const uint8_t *s, uint32_t h, uint32_t w, uint32_t c, float ix, float iy,
		     uint8_t fill, uint8_t *d)
{
	warp_nearest(s, h, w, c, ix, iy, fill, d);
}

/* One output pixel, bilinear with the mask: torch's vectorised
 * grid_sample weights, ((nw + ne) + sw) + se. */
void px_warp_bilinear(const uint8_t *s, uint32_t h, uint32_t w, uint32_t c, float ix, float iy,
		      float fill, bool nomask, uint8_t *d)
{
	float x0 = floorf(ix), y0 = floorf(iy);
	float we = ix - x0, ww = 1.0f - we, ns = iy - y0, nn = 1.0f - ns;
	float wt[4] = {nn * ww, nn * we, ns * ww, ns * we};
	int64_t xs[4] = {(int64_t)x0, (int64_t)x0 + 1, (int64_t)x0, (int64_t)x0 + 1};
	int64_t ys[4] = {(int64_t)y0, (int64_t)y0, (int64_t)y0 + 1, (int64_t)y0 + 1};
	bool in[4];
	float m = 0.0f;

	for (int t = 0; t < 4; t++) {
		in[t] = xs[t] >= 0 && ys[t] >= 0 && xs[t] < w && ys[t] < h;
		m = m + (in[t] ? wt[t] : 0.0f);
	}
	size_t at[4];
	for (int t = 0; t < 4; t++)
		at[t] = in[t] ? ((size_t)ys[t] * w + (size_t)xs[t]) * c : 0;
	for (uint32_t k = 0; k < c; k++) {
		float v = 0.0f; /* outside pixels add 0 * weight: nothing */
		for (int t = 0; t < 4; t++)
			if (in[t])
				v = v + (float)s[at[t] + k] * wt[t];
		float o = nomask ? v : v * m + (1.0f - m) * fill;
		d[k] = (uint8_t)px_round_even(o);
	}
}

void px_affine(struct aug_px_img *im, const struct aug_affine *a)
{
	double m[6];
	uint32_t h = im->h, w = im->w, c = im->c;

	px_flush(im);
	aug_affine_matrix(a, m);
	float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
	float a00 = (float)m[0] / hw, a10 = (float)m[1] / hw, a20 = (float)m[2] / hw;
	float a01 = (float)m[3] / hh, a11 = (float)m[4] / hh, a21 = (float)m[5] / hh;
	float sw = (float)w / 2.0f, sh = (float)h / 2.0f;
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, false);
	float *colx = im->fbuf, *coly = im->fbuf + w; /* bx * a00, bx * a01 per column */

	for (uint32_t x = 0; x < w; x++) {
		float bx = (float)(-(double)w * 0.5 + 0.5) + (float)x;
		colx[x] = bx * a00;
		coly[x] = bx * a01;
	}
	for (uint32_t y = 0; y < h; y++) {
		float by = (float)(-(double)h * 0.5 + 0.5) + (float)y;
		float rowx = by * a10, rowy = by * a11;
		for (uint32_t x = 0; x < w; x++) {
			/* the same roundings as (bx * a00 + by * a10) + a20 */
			float gx = (colx[x] + rowx) + a20;
			float gy = (coly[x] + rowy) + a21;
			float ix = (gx + 1.0f) * sw - 0.5f, iy = (gy + 1.0f) * sh - 0.5f;
			uint8_t *o = d + ((size_t)y * w + x) * c;
			if (a->interp == PIPE_INTERP_NEAREST)
				warp_nearest(s, h, w, c, ix, iy, (uint8_t)a->fill, o);
			else
				px_warp_bilinear(s, h, w, c, ix, iy, (float)a->fill, a->nomask, o);
		}
	}
	im->cur = d;
}
