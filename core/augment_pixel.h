/*
 * augment_pixel.h: core/'s internal contract between the pixel-stage
 * driver (augment_pixel.c), the draws of the random ops and auto-augment
 * policies (augment_auto.c), the colour ops (augment_color.c), the filters
 * (augment_filter.c) and rotate / affine (augment_geom.c).
 *
 * The files call one way (a DAG, scripts/check-layers): augment.c ->
 * augment_pixel.c (the stage) -> augment_augmix.c -> augment_pxrun.c (one
 * basic op) -> augment_color.c, _filter.c, _geom.c, _tv.c ->
 * augment_pximg.c (the image's buffers); augment_pixel.c and
 * augment_erase.c -> augment_auto.c (expansion) -> augment_tv.c; every
 * file -> augment_draw.c (draws to parameters).
 *
 * A pipeline op of a PIXEL stage (pipeline.h) expands, for one sample, into
 * a short list of basic ops (struct aug_px_op) with every parameter fixed:
 * torchvision.transforms.functional's calls on uint8 tensors. The driver
 * runs them on one image (struct aug_px_img).
 *
 * Fusion: brightness, contrast, posterize, solarize, invert, equalize and
 * autocontrast are per-channel 256-entry tables; a run of them composes
 * into one table (equalize / autocontrast / contrast read their statistics
 * through the tables so far, from one histogram or one mean pass), applied
 * in one pass at the end of the run, or on the fly by the next saturation,
 * hue or grayscale pass. Only blur, sharpness, rotate / affine and erase
 * apply the table first.
 *
 * Threads: pure functions on the caller's buffers. Never allocates.
 */
#ifndef FEED_AUGMENT_PIXEL_H
#define FEED_AUGMENT_PIXEL_H

#include <stdbool.h>
#include <stdint.h>

#include "augment_ctx.h"
#include "philox.h"
#include "pipeline.h"

#define AUG_PX_MAX 16 /* most basic ops one pipeline op expands to */

enum aug_px_kind {
	AX_IDENTITY = 0,
	AX_BRIGHTNESS,  /* F.adjust_brightness(f) */
	AX_CONTRAST,    /* F.adjust_contrast(f) */
	AX_SATURATION,  /* F.adjust_saturation(f) */
	AX_HUE,         /* F.adjust_hue(f) */
	AX_SHARPNESS,   /* F.adjust_sharpness(f) */
	AX_POSTERIZE,   /* F.posterize(bits) */
	AX_SOLARIZE,    /* F.solarize(f): f the (float) threshold */
	AX_EQUALIZE,    /* F.equalize */
	AX_AUTOCONTRAST, /* F.autocontrast */
	AX_INVERT,      /* F.invert */
	AX_GRAYSCALE,   /* F.rgb_to_grayscale(out_c) */
	AX_BLUR,        /* F.gaussian_blur([ksize]*2, [f]*2): f = sigma */
	AX_AFFINE,      /* F.affine / F.rotate through the inverse matrix */
	AX_ERASE,       /* F.erase(ei, ej, eh, ew, value) */
	AX_VFLIP,       /* F.vflip (augment_tv.c, as the three below) */
	AX_PAD,         /* F.pad(pad, fill, pad_mode) */
	AX_PERSPECTIVE, /* F.perspective(startpoints, endpoints = pc, interp, fill) */
	AX_NOISE,       /* v2 F.gaussian_noise(mean, sigma = f, clip) on x / 255 */
	AX_KIND_COUNT_,
};

/* F.affine's arguments, with rotate's as F.rotate passes them. */
struct aug_affine {
	double angle;      /* degrees, as _get_inverse_affine_matrix takes it */
	double tx, ty;     /* translate, pixels */
	double scale;      /* > 0 */
	double shx, shy;   /* shear, degrees */
	double cx, cy;     /* centre relative to the image centre (0, 0) */
	uint32_t interp;   /* enum pipe_interp */
	uint32_t fill;     /* fill value 0..255 (a fill list: the mask path) */
	bool nomask;       /* fill=None: zeros outside, no mask blend */
};

/* One basic op, parameters fixed. */
struct aug_px_op {
	enum aug_px_kind kind;
	double f;          /* factor; solarize threshold; blur sigma */
	uint32_t bits;     /* posterize */
	uint32_t ksize;    /* blur kernel size (odd) */
	uint32_t out_c;    /* grayscale: 1 or 3 */
	struct aug_affine af; /* affine / rotate */
	uint32_t ei, ej, eh, ew; /* erase box: top, left, height, width */
	uint32_t value;    /* erase fill value */
	uint32_t nvalues;  /* erase: 0, or one value per channel in cvalue */
	uint8_t cvalue[PIPE_MAX_C]; /* erase: the per-channel values */
	bool value_random; /* erase with N(0, 1) draws cast as torch casts to u8 */
	struct aug_ctx ctx; /* value_random: the sample's key */
	uint32_t draw_op;  /* value_random, noise: the op index its draws use */
	uint32_t pad[4];   /* pad: left, top, right, bottom */
	uint32_t pad_mode; /* pad: enum pipe_pad_mode */
	double pc[8];      /* perspective: the corners' end points (x, y) for
			    * top-left, top-right, bottom-right, bottom-left */
	double mean;       /* noise: mean */
	bool clip;         /* noise: clamp to [0, 1] */
	bool hue_scaled;   /* hue: back to uint8 as x * 255.999 (torchvision
			    * after 0.14), not x * 255 */
};

/* The image a PIXEL stage works on. cur holds the pixels (before lut
 * when lut_on); a pass writes to a buffer of buf[] or dst that fits. */
struct aug_px_img {
	const uint8_t *cur; /* current pixels (the stage's source at first) */
	uint8_t *dst;       /* the stage's output, dst_bytes long */
	size_t dst_bytes;
	uint8_t *buf[2];    /* two scratch images of the stage's input size */
	float *fbuf;        /* a float plane of the stage's input size (at
			     * least 2 * w floats) */
	uint32_t h, w, c;   /* current shape */
	bool lut_on;        /* lut pending on cur */
	uint8_t lut[3][256]; /* per-channel table still to apply */
};

/* augment_pximg.c: a writable buffer for the current shape: dst when it
 * fits (and, with in_place false, differs from cur), else a scratch buffer
 * that is not cur. */
uint8_t *px_target(struct aug_px_img *im, bool in_place);
/* augment_pximg.c: applies a pending table (no-op when none). */
void px_flush(struct aug_px_img *im);

/* augment_color.c: tables, blends, hue, grayscale, erase. */
void px_color(struct aug_px_img *im, const struct aug_px_op *o);

/* augment_filter.c */
void px_blur(struct aug_px_img *im, uint32_t ksize, double sigma);
void px_sharpness(struct aug_px_img *im, double factor);

/* augment_geom.c: torchvision's inverse affine matrix (6 floats' worth
 * in double) and the grid-sampled warp. */
void aug_affine_matrix(const struct aug_affine *a, double m[6]);
void px_affine(struct aug_px_img *im, const struct aug_affine *a);

/* augment_geom.c: one output pixel sampled at source (ix, iy) as
 * grid_sample does (zero padding), with torchvision's fill mask (nomask:
 * fill=None). */
void px_warp_nearest(const uint8_t *s, uint32_t h, uint32_t w, uint32_t c, float ix, float iy,
		     uint8_t fill, uint8_t *d);
void px_warp_bilinear(const uint8_t *s, uint32_t h, uint32_t w, uint32_t c, float ix, float iy,
		      float fill, bool nomask, uint8_t *d);

/* N(0, 1) number k of op `op`'s draws for this sample: Box-Muller on the
 * first two words of draw block 8 + k / 2 (erase's value=random, noise). */
static inline float px_normal(const struct aug_ctx *ctx, uint32_t op, uint32_t k)
{
	uint32_t wd[4];

	feed_rand_block(ctx->seed, ctx->epoch, ctx->sample, op, 8 + k / 2, wd);
	double u1 = ((double)(wd[0] >> 8) + 1.0) * 0x1p-24, u2 = (double)(wd[1] >> 8) * 0x1p-24;
	double r = sqrt(-2.0 * log(u1));
	return (float)(k & 1 ? r * sin(2.0 * M_PI * u2) : r * cos(2.0 * M_PI * u2));
}

/* augment_erase.c: random_erasing op i after normalize, on the stage's float
 * output dst (the normalize op's dtype and layout), in normalised units. */
void aug_erase_normalized(const struct pipe_plan *p, const struct pipe_stage *st, uint32_t i,
			  const struct aug_ctx *ctx, void *dst);

/* augment_tv.c: vflip, pad, perspective and noise; and the expansion of
 * vflip, pad, random_perspective, gaussian_noise and the containers
 * (random_apply / choice / order: their transforms' basic ops). */
void px_tv(struct aug_px_img *im, const struct aug_px_op *o);
uint32_t aug_tv_expand(const struct pipe_plan *p, uint32_t i, const struct aug_ctx *ctx,
		       uint32_t h, uint32_t w, uint32_t c, struct aug_px_op *out);

/* augment_pxrun.c: runs one basic op on im. */
void px_run(struct aug_px_img *im, const struct aug_px_op *o);

/* augment_draw.c: torch.linspace(start, end, n)[k] in float32, each bin
 * rounded twice (aug_linspace; the op's linspace=plain) or once
 * (linspace=fused) as the variant says. */
enum { AUG_LINSPACE_PLAIN = 0, AUG_LINSPACE_FMA = 1 };
float aug_linspace(float start, float end, uint32_t n, uint32_t k);
float aug_linspace_v(float start, float end, uint32_t n, uint32_t k, uint32_t variant);

/* augment_augmix.c: aug_mix's draws for one sample (see there) and AugMix
 * on the stage's image: mix_scratch holds three images of al bytes and
 * then a float image (pipe_stage.px_mix_off). */
struct aug_mix_chain {
	uint32_t depth;                        /* ops in the chain */
	uint32_t op[PIPE_AUGMIX_DEPTH_MAX];    /* AugMix's op index, dict order */
	double mag[PIPE_AUGMIX_DEPTH_MAX];     /* its magnitude, sign applied */
	uint32_t bin[PIPE_AUGMIX_DEPTH_MAX];   /* its bin (0 for ops without bins) */
	bool neg[PIPE_AUGMIX_DEPTH_MAX];       /* sign drawn negative (signed ops) */
};
struct aug_mix_draws {
	float m0, m1;                          /* Beta weights: original, chains */
	uint32_t width;                        /* chains */
	float w[PIPE_AUGMIX_WIDTH_MAX];        /* chain k's weight (times m1) */
	struct aug_mix_chain chain[PIPE_AUGMIX_WIDTH_MAX];
};
void aug_mix_draw(const struct pipe_op *op, uint32_t i, const struct aug_ctx *ctx, uint32_t h,
		  uint32_t w, struct aug_mix_draws *ret);
void px_aug_mix(struct aug_px_img *im, const struct pipe_op *op, const struct aug_mix_draws *d,
		uint8_t *mix_scratch, size_t al);

/* augment_auto.c: op i of the plan for this sample on an h x w x c image
 * (its shape at the op) as basic ops; returns how many (<= AUG_PX_MAX). */
uint32_t aug_px_expand(const struct pipe_plan *p, uint32_t i, const struct aug_ctx *ctx,
		       uint32_t h, uint32_t w, uint32_t c, struct aug_px_op *out);

/* augment_pixel.c: runs a PIXEL stage from src to dst. scratch:
 * plan->pix_scratch_bytes, 64-byte aligned. */
void aug_pixel_stage(const struct pipe_plan *p, const struct pipe_stage *st,
		     const struct aug_ctx *ctx, const uint8_t *src, uint8_t *dst, uint8_t *scratch);

/* nearbyintf(x) in the default rounding mode (half to even, torch.round),
 * without the libm call: adding and removing 2^23 leaves the integer
 * nearest |x|, ties to even; floats of 2^23 and above are integers. */
static inline float px_round_even(float x)
{
	float a = x < 0.0f ? -x : x;

	if (!(a < 0x1p23f))
		return x;
	a = (a + 0x1p23f) - 0x1p23f;
	return x < 0.0f ? -a : a;
}

/* torch's float32 blend (_blend): trunc(clamp(r * a + (1 - r) * b)). */
static inline uint8_t px_blend(float a, float b, float r, float r1)
{
	float v = r * a + r1 * b;
	v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
	return (uint8_t)v;
}

#endif
