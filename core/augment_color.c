/*
 * augment_color.c: the colour ops of a PIXEL stage with the arithmetic of
 * torchvision.transforms.functional on uint8 tensors (see augment_pixel.h):
 * brightness, contrast, posterize, solarize, invert, equalize and
 * autocontrast as per-channel tables that compose (one pass for a run of
 * them); saturation, hue and grayscale as passes that read through the
 * pending table; erase.
 *
 * Arithmetic: torch computes these in float32 with one rounding per
 * operation and casts to uint8 by truncation; so does this file (built
 * with -ffp-contract=off so that no multiply-add is fused). Equalize is
 * integer arithmetic and exact. Hue follows _rgb2hsv / _hsv2rgb operation
 * by operation; its bound is stated in the README.
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include <math.h>
#include <string.h>

#include "augment_pixel.h"
#include "philox.h"

/* ------------------------------------------------------------------ */
/* Tables                                                              */

static void lut_start(struct aug_px_img *im)
{
	if (im->lut_on)
		return;
	for (uint32_t k = 0; k < 3; k++)
		for (uint32_t v = 0; v < 256; v++)
			im->lut[k][v] = (uint8_t)v;
	im->lut_on = true;
}

/* Per-channel histograms of the image as the pending table makes it. */
static void lut_hist(const struct aug_px_img *im, uint32_t hist[3][256])
{
	uint32_t base[3][256];
	size_t n = (size_t)im->h * im->w;
	const uint8_t *p = im->cur;

	memset(base, 0, sizeof(base));
	memset(hist, 0, sizeof(base));
	if (im->c == 1)
		for (size_t i = 0; i < n; i++)
			base[0][p[i]]++;
	else
		for (size_t i = 0; i < n; i++, p += 3) {
			base[0][p[0]]++;
			base[1][p[1]]++;
			base[2][p[2]]++;
		}
	for (uint32_t k = 0; k < im->c; k++)
		for (uint32_t v = 0; v < 256; v++)
			hist[k][im->lut[k][v]] += base[k][v];
}

/* torchvision's _scale_channel: the equalizing table of one histogram,
 * or identity when step is 0. */
static void equalize_table(const uint32_t hist[256], uint8_t out[256])
{
	uint64_t sum = 0, last = 0, cum = 0;

	for (uint32_t v = 0; v < 256; v++)
		if (hist[v]) {
			sum += hist[v];
			last = hist[v];
		}
	uint64_t step = (sum - last) / 255;
	for (uint32_t v = 0; v < 256; v++) {
		if (!step) {
			out[v] = (uint8_t)v;
			continue;
		}
		uint64_t l = (cum + step / 2) / step; /* lut shifted by one: cumsum before v */
		out[v] = (uint8_t)(l > 255 ? 255 : l);
		cum += hist[v];
	}
}

static void lut_equalize(struct aug_px_img *im)
{
	uint32_t hist[3][256];
	uint8_t t[256];

	lut_start(im);
	lut_hist(im, hist);
	for (uint32_t k = 0; k < im->c; k++) {
		equalize_table(hist[k], t);
		for (uint32_t v = 0; v < 256; v++)
			im->lut[k][v] = t[im->lut[k][v]];
	}
}

static void lut_autocontrast(struct aug_px_img *im)
{
	uint32_t hist[3][256];

	lut_start(im);
	lut_hist(im, hist);
	for (uint32_t k = 0; k < im->c; k++) {
		uint32_t lo = 0, hi = 255;
		while (lo < 255 && !hist[k][lo])
			lo++;
		while (hi > 0 && !hist[k][hi])
			hi--;
		float mn = (float)lo, scale = 255.0f / ((float)hi - mn);
		if (!isfinite(scale)) {
			mn = 0.0f;
			scale = 1.0f;
		}
		for (uint32_t v = 0; v < 256; v++) {
			float x = ((float)im->lut[k][v] - mn) * scale;
			x = x < 0.0f ? 0.0f : x > 255.0f ? 255.0f : x;
			im->lut[k][v] = (uint8_t)x;
		}
	}
}

/* torch's rgb_to_grayscale on u8: trunc(0.2989 r + 0.587 g + 0.114 b),
 * each product and sum rounded to float. */
static inline uint8_t gray_of(uint8_t r, uint8_t g, uint8_t b)
{
	float v = 0.2989f * (float)r + 0.587f * (float)g;
	v = v + 0.114f * (float)b;
	return (uint8_t)v;
}

/* adjust_contrast's mean: of the grayscale (3 channels) or of the image
 * (1), as the pending table makes them, in float. */
static float contrast_mean(const struct aug_px_img *im)
{
	size_t n = (size_t)im->h * im->w;
	const uint8_t *p = im->cur;
	uint64_t sum = 0;

	if (im->c == 1) {
		for (size_t i = 0; i < n; i++)
			sum += im->lut[0][p[i]];
	} else {
		for (size_t i = 0; i < n; i++, p += 3)
			sum += gray_of(im->lut[0][p[0]], im->lut[1][p[1]], im->lut[2][p[2]]);
	}
	return (float)((double)sum / (double)n);
}

/* blend(v, b, f) for every v: brightness (b = 0) and contrast (b = mean). */
static void lut_blend(struct aug_px_img *im, double f, float b)
{
	float r = (float)f, r1 = (float)(1.0 - f), rb = r1 * b;

	lut_start(im);
	for (uint32_t k = 0; k < im->c; k++)
		for (uint32_t v = 0; v < 256; v++) {
			float x = r * (float)im->lut[k][v] + rb;
			x = x < 0.0f ? 0.0f : x > 255.0f ? 255.0f : x;
			im->lut[k][v] = (uint8_t)x;
		}
}

/* posterize, solarize, invert. */
static void lut_point(struct aug_px_img *im, const struct aug_px_op *o)
{
	uint8_t mask = (uint8_t)(0xff00u >> o->bits);
	float thr = (float)o->f;

	lut_start(im);
	for (uint32_t k = 0; k < im->c; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint8_t x = im->lut[k][v];
			if (o->kind == AX_POSTERIZE)
				x &= mask;
			else if (o->kind == AX_INVERT || (float)x >= thr)
				x = (uint8_t)(255 - x);
			im->lut[k][v] = x;
		}
}

/* ------------------------------------------------------------------ */
/* Passes that read through the table                                  */

/* The pending table (identity when none) for the passes below. */
static const uint8_t (*pass_lut(struct aug_px_img *im))[256]
{
	lut_start(im);
	im->lut_on = false;
	return (const uint8_t (*)[256])im->lut;
}

static void pass_saturation(struct aug_px_img *im, double f)
{
	size_t n = (size_t)im->h * im->w;
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, true), *out = d;
	const uint8_t (*L)[256] = pass_lut(im);
	float r = (float)f, r1 = (float)(1.0 - f);

	for (size_t i = 0; i < n; i++, s += 3, d += 3) {
		uint8_t a = L[0][s[0]], b = L[1][s[1]], c = L[2][s[2]];
		float g = (float)gray_of(a, b, c);
		d[0] = px_blend(a, g, r, r1);
		d[1] = px_blend(b, g, r, r1);
		d[2] = px_blend(c, g, r, r1);
	}
	im->cur = out;
}

static void pass_grayscale(struct aug_px_img *im, uint32_t out_c)
{
	size_t n = (size_t)im->h * im->w;
	const uint8_t *s = im->cur;
	const uint8_t (*L)[256];
	uint8_t *d;

	im->c = out_c; /* the target must fit the output */
	d = px_target(im, true);
	L = pass_lut(im);
	for (size_t i = 0; i < n; i++, s += 3) {
		uint8_t g = gray_of(L[0][s[0]], L[1][s[1]], L[2][s[2]]);
		if (out_c == 1) {
			d[i] = g;
		} else {
			d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = g;
		}
	}
	im->cur = d;
}

/* torch.clamp(x, 0, 1) for a number that is not NaN. */
static inline float unit_clamp(float x)
{
	return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
}

/* torchvision's _rgb2hsv, hue shift, _hsv2rgb on one pixel in [0, 1].
 * torch computes all three of rc, gc, bc and adds the three masked hue
 * terms; two of them are zero, so only the chosen term is computed here
 * (adding zeros changes no bit). */
static void hue_pixel(float r, float g, float b, float hf, float out[3])
{
	float maxc = r > g ? r : g, minc = r < g ? r : g;

	maxc = b > maxc ? b : maxc;
	minc = b < minc ? b : minc;
	bool eqc = maxc == minc;
	float cr = maxc - minc;
	float s = cr / (eqc ? 1.0f : maxc);
	float crd = eqc ? 1.0f : cr, h;

	if (maxc == r)
		h = (maxc - b) / crd - (maxc - g) / crd;
	else if (maxc == g)
		h = (2.0f + (maxc - r) / crd) - (maxc - b) / crd;
	else
		h = (4.0f + (maxc - g) / crd) - (maxc - r) / crd;
	h = h / 6.0f + 1.0f;
	h = h >= 1.0f ? h - 1.0f : h; /* fmod(h, 1) for h in [0, 2): exact */
	h = h + hf;
	h = h - floorf(h); /* torch.remainder(h, 1.0) */
	float i6 = floorf(h * 6.0f), f = h * 6.0f - i6;
	int i = (int)i6 % 6;
	float v = maxc;
	float p = unit_clamp(v * (1.0f - s));
	float q = unit_clamp(v * (1.0f - s * f));
	float t = unit_clamp(v * (1.0f - s * (1.0f - f)));

	switch (i < 0 ? i + 6 : i) {
	case 0: out[0] = v; out[1] = t; out[2] = p; break;
	case 1: out[0] = q; out[1] = v; out[2] = p; break;
	case 2: out[0] = p; out[1] = v; out[2] = t; break;
	case 3: out[0] = p; out[1] = q; out[2] = v; break;
	case 4: out[0] = t; out[1] = p; out[2] = v; break;
	default: out[0] = v; out[1] = p; out[2] = q; break;
	}
}

/* Back to uint8: torchvision 0.14's (x * 255).to(uint8), or later ones'
 * convert_image_dtype, x * (255 + 1 - 1e-3) in float32 (scaled), both
 * truncating. */
static uint8_t hue_cast(float x, bool scaled)
{
	x = x * (scaled ? (float)(255.0 + 1.0 - 1e-3) : 255.0f);
	return (uint8_t)(x < 0.0f ? 0.0f : x);
}

static void pass_hue(struct aug_px_img *im, double hf, bool scaled)
{
	size_t n = (size_t)im->h * im->w;
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, true), *out = d;
	const uint8_t (*L)[256] = pass_lut(im);
	float o[3], unit[256];

	for (uint32_t v = 0; v < 256; v++)
		unit[v] = (float)v / 255.0f; /* img.to(float32) / 255 */
	for (size_t i = 0; i < n; i++, s += 3, d += 3) {
		hue_pixel(unit[L[0][s[0]]], unit[L[1][s[1]]], unit[L[2][s[2]]], (float)hf, o);
		for (int k = 0; k < 3; k++)
			d[k] = hue_cast(o[k], scaled);
	}
	im->cur = out;
}

/* ------------------------------------------------------------------ */
/* Erase                                                               */

/* torch's float -> uint8 cast on x86: truncate toward zero, keep the low
 * 8 bits of the integer (so -1.3 becomes 255). */
static uint8_t torch_cast_u8(float x)
{
	return (uint8_t)(int32_t)x;
}

/* N(0, 1) number k of the erase's draws. */
static float erase_normal(const struct aug_px_op *o, uint32_t k)
{
	return px_normal(&o->ctx, o->draw_op, k);
}

static void px_erase(struct aug_px_img *im, const struct aug_px_op *o)
{
	px_flush(im);
	uint8_t *d = px_target(im, true);
	uint32_t c = im->c;

	if (d != im->cur)
		memcpy(d, im->cur, (size_t)im->h * im->w * c);
	im->cur = d;
	uint32_t y1 = o->ei + o->eh < im->h ? o->ei + o->eh : im->h;
	uint32_t x1 = o->ej + o->ew < im->w ? o->ej + o->ew : im->w;
	uint32_t k = 0;
	/* torchvision's value tensor is C x h x w: draw k is channel-major */
	for (uint32_t ch = 0; ch < c; ch++)
		for (uint32_t y = o->ei; y < y1; y++)
			for (uint32_t x = o->ej; x < x1; x++, k++)
				d[((size_t)y * im->w + x) * c + ch] =
					o->value_random ? torch_cast_u8(erase_normal(o, k))
					: o->nvalues	? o->cvalue[ch < o->nvalues ? ch : 0]
							: (uint8_t)o->value;
}

/* ------------------------------------------------------------------ */

void px_color(struct aug_px_img *im, const struct aug_px_op *o)
{
	switch (o->kind) {
	case AX_BRIGHTNESS: lut_blend(im, o->f, 0.0f); break;
	case AX_CONTRAST:
		lut_start(im);
		lut_blend(im, o->f, contrast_mean(im));
		break;
	case AX_POSTERIZE:
	case AX_SOLARIZE:
	case AX_INVERT: lut_point(im, o); break;
	case AX_EQUALIZE: lut_equalize(im); break;
	case AX_AUTOCONTRAST: lut_autocontrast(im); break;
	case AX_SATURATION:
		if (im->c == 3)
			pass_saturation(im, o->f);
		break;
	case AX_HUE:
		if (im->c == 3)
			pass_hue(im, o->f, o->hue_scaled);
		break;
	case AX_GRAYSCALE:
		if (im->c == 3)
			pass_grayscale(im, o->out_c);
		break;
	case AX_ERASE: px_erase(im, o); break;
	default: break;
	}
}
