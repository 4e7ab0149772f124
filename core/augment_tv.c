/*
 * augment_tv.c: the image ops torchvision has that the first rounds did
 * not, as pixel-stage basic ops (augment_pixel.h): vflip (RandomVerticalFlip),
 * pad (F.pad's four modes), random_perspective (RandomPerspective's corner
 * draws, F.perspective's coefficients and grid, grid_sample with the fill
 * mask) and gaussian_noise (v2 GaussianNoise on the image as floats x /
 * 255, back to u8 as ToDtype(uint8, scale=True) does: truncating x * (255 +
 * 1 - 1e-3)).
 *
 * Draws (feed_rand_u32(seed, epoch, sample, op, d)): vflip and
 * random_perspective draw 0 the probability test (as hflip); then
 * random_perspective draws 1..8 the corners' x and y in torchvision's order
 * (top-left, top-right, bottom-right, bottom-left); gaussian_noise's
 * N(0, 1) numbers come in pairs from draw block 8 + k / 2 (Box-Muller), k
 * counting channel-major (C x H x W, torch.randn_like's order).
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include <math.h>
#include <string.h>

#include "augment.h"
#include "augment_pixel.h"
#include "philox.h"

static uint32_t draw(const struct aug_ctx *ctx, uint32_t op, uint32_t d)
{
	return feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample, op, d);
}

/* ------------------------------------------------------------------ */
/* Expansion                                                           */

/* RandomPerspective.get_params: end points of the four corners. */
static void perspective_points(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			       uint32_t h, uint32_t w, double pc[8])
{
	double ds = (double)op->distortion_ppb / 1e9;
	uint32_t dx = (uint32_t)(ds * (double)(w / 2)), dy = (uint32_t)(ds * (double)(h / 2));
	/* torch.randint(lo, hi): lo + randint(hi - lo); x then y of each corner */
	const int64_t lo[8] = {0, 0, (int64_t)w - dx - 1, 0, (int64_t)w - dx - 1,
			       (int64_t)h - dy - 1, 0, (int64_t)h - dy - 1};
	const uint32_t span[8] = {dx + 1, dy + 1, dx + 1, dy + 1, dx + 1, dy + 1, dx + 1, dy + 1};

	for (uint32_t k = 0; k < 8; k++)
		pc[k] = (double)(lo[k] + aug_randint(draw(ctx, i, 1 + k), span[k]));
}

uint32_t aug_tv_expand(const struct pipe_plan *p, uint32_t i, const struct aug_ctx *ctx,
		       uint32_t h, uint32_t w, uint32_t c, struct aug_px_op *out)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct aug_px_op *o = out;

	(void)c;
	*o = (struct aug_px_op){.kind = AX_IDENTITY, .af = {.scale = 1.0}};
	switch (op->kind) {
	case PIPE_VFLIP:
		if (!aug_hflip_decision(draw(ctx, i, 0), op->p_ppb))
			return 0;
		o->kind = AX_VFLIP;
		return 1;
	case PIPE_PAD:
		o->kind = AX_PAD;
		memcpy(o->pad, op->padding, sizeof(o->pad));
		o->pad_mode = op->padding_mode;
		o->value = op->fill;
		return 1;
	case PIPE_RANDOM_PERSPECTIVE:
		if (!aug_hflip_decision(draw(ctx, i, 0), op->p_ppb))
			return 0;
		o->kind = AX_PERSPECTIVE;
		o->af.interp = op->interp;
		o->af.fill = op->fill;
		perspective_points(op, ctx, i, h, w, o->pc);
		return 1;
	case PIPE_GAUSSIAN_NOISE:
		o->kind = AX_NOISE;
		o->f = (double)op->sigma_ppb[0] / 1e9;
		o->mean = (double)op->mean_ppb[0] / 1e9;
		o->clip = op->clip;
		o->ctx = *ctx;
		o->draw_op = i;
		return 1;
	default:
		return 0;
	}
}

/* ------------------------------------------------------------------ */
/* vflip and pad                                                       */

static void px_vflip(struct aug_px_img *im)
{
	size_t row = (size_t)im->w * im->c;

	px_flush(im);
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, false);
	for (uint32_t y = 0; y < im->h; y++)
		memcpy(d + (size_t)y * row, s + (size_t)(im->h - 1 - y) * row, row);
	im->cur = d;
}

/* Source index of padded coordinate x (-pad .. n + pad) in a side of n:
 * edge repeats the border, reflect mirrors about it, symmetric mirrors
 * with the border repeated; -1 for constant outside. */
static int64_t pad_index(int64_t x, int64_t n, uint32_t mode)
{
	if (x >= 0 && x < n)
		return x;
	switch (mode) {
	case PIPE_PAD_EDGE: return x < 0 ? 0 : n - 1;
	case PIPE_PAD_REFLECT: return x < 0 ? -x : 2 * (n - 1) - x;
	case PIPE_PAD_SYMMETRIC: return x < 0 ? -x - 1 : 2 * n - 1 - x;
	default: return -1;
	}
}

static void px_pad(struct aug_px_img *im, const struct aug_px_op *o)
{
	px_flush(im);
	const uint8_t *s = im->cur;
	uint32_t h = im->h, w = im->w, c = im->c;

	im->h = h + o->pad[1] + o->pad[3];
	im->w = w + o->pad[0] + o->pad[2];
	uint8_t *d = px_target(im, false);
	for (uint32_t y = 0; y < im->h; y++) {
		int64_t sy = pad_index((int64_t)y - o->pad[1], h, o->pad_mode);
		for (uint32_t x = 0; x < im->w; x++) {
			int64_t sx = pad_index((int64_t)x - o->pad[0], w, o->pad_mode);
			uint8_t *px = d + ((size_t)y * im->w + x) * c;
			if (sy < 0 || sx < 0)
				memset(px, (int)o->value, c);
			else
				memcpy(px, s + ((size_t)sy * w + (size_t)sx) * c, c);
		}
	}
	im->cur = d;
}

/* ------------------------------------------------------------------ */
/* Perspective                                                         */

/* _get_perspective_coeffs: the 8 coefficients mapping output (end)
 * points to input (start) points, solving the 8 x 8 system (Gaussian
 * elimination with partial pivoting, in double). */
static void perspective_coeffs(const double end[8], uint32_t h, uint32_t w, double x[8])
{
	const double start[8] = {0, 0, w - 1.0, 0, w - 1.0, h - 1.0, 0, h - 1.0};
	double a[8][9];

	for (int i = 0; i < 4; i++) {
		double ex = end[2 * i], ey = end[2 * i + 1], sx = start[2 * i], sy = start[2 * i + 1];
		const double r0[9] = {ex, ey, 1, 0, 0, 0, -sx * ex, -sx * ey, sx};
		const double r1[9] = {0, 0, 0, ex, ey, 1, -sy * ex, -sy * ey, sy};
		memcpy(a[2 * i], r0, sizeof(r0));
		memcpy(a[2 * i + 1], r1, sizeof(r1));
	}
	for (int col = 0; col < 8; col++) {
		int piv = col;
		for (int r = col + 1; r < 8; r++)
			if (fabs(a[r][col]) > fabs(a[piv][col]))
				piv = r;
		for (int k = 0; k < 9; k++) {
			double t = a[col][k];
			a[col][k] = a[piv][k];
			a[piv][k] = t;
		}
		for (int r = 0; r < 8; r++) {
			if (r == col || a[col][col] == 0.0)
				continue;
			double f = a[r][col] / a[col][col];
			for (int k = col; k < 9; k++)
				a[r][k] -= f * a[col][k];
		}
	}
	for (int k = 0; k < 8; k++)
		x[k] = a[k][k] == 0.0 ? 0.0 : a[k][8] / a[k][k]; /* degenerate corners: 0 */
}

/* F.perspective on a tensor: _perspective_grid in float32 (theta1 over
 * half the size, divided by the projective row, minus 1), grid_sample's
 * unnormalisation ((g + 1) * size - 1) / 2, then the mask blend of the
 * fill as rotate's. */
static void px_perspective(struct aug_px_img *im, const struct aug_px_op *o)
{
	uint32_t h = im->h, w = im->w, c = im->c;
	double cf[8];

	px_flush(im);
	perspective_coeffs(o->pc, h, w, cf);
	float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
	float r00 = (float)cf[0] / hw, r10 = (float)cf[1] / hw, r20 = (float)cf[2] / hw;
	float r01 = (float)cf[3] / hh, r11 = (float)cf[4] / hh, r21 = (float)cf[5] / hh;
	float p0 = (float)cf[6], p1 = (float)cf[7];
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, false);

	for (uint32_t y = 0; y < h; y++) {
		float by = 0.5f + (float)y;
		for (uint32_t x = 0; x < w; x++) {
			float bx = 0.5f + (float)x;
			float den = (bx * p0 + by * p1) + 1.0f;
			float gx = ((bx * r00 + by * r10) + r20) / den - 1.0f;
			float gy = ((bx * r01 + by * r11) + r21) / den - 1.0f;
			float ix = ((gx + 1.0f) * (float)w - 1.0f) / 2.0f;
			float iy = ((gy + 1.0f) * (float)h - 1.0f) / 2.0f;
			uint8_t *px = d + ((size_t)y * w + x) * c;
			if (o->af.interp == PIPE_INTERP_NEAREST)
				px_warp_nearest(s, h, w, c, ix, iy, (uint8_t)o->af.fill, px);
			else
				px_warp_bilinear(s, h, w, c, ix, iy, (float)o->af.fill, false, px);
		}
	}
	im->cur = d;
}

/* ------------------------------------------------------------------ */
/* Gaussian noise                                                      */


static void px_noise(struct aug_px_img *im, const struct aug_px_op *o)
{
	uint32_t h = im->h, w = im->w, c = im->c;
	float mean = (float)o->mean, sigma = (float)o->f;

	px_flush(im);
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, true);
	uint32_t k = 0;
	for (uint32_t ch = 0; ch < c; ch++)
		for (size_t at = ch; at < (size_t)h * w * c; at += c, k++) {
			float x = (float)s[at] / 255.0f + (mean + px_normal(&o->ctx, o->draw_op, k) * sigma);
			if (o->clip)
				x = x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
			float v = x * (255.0f + 1.0f - 1e-3f); /* ToDtype(uint8, scale=True) */
			d[at] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
		}
	im->cur = d;
}

void px_tv(struct aug_px_img *im, const struct aug_px_op *o)
{
	switch (o->kind) {
	case AX_VFLIP: px_vflip(im); break;
	case AX_PAD: px_pad(im, o); break;
	case AX_PERSPECTIVE: px_perspective(im, o); break;
	case AX_NOISE: px_noise(im, o); break;
	default: break;
	}
}
