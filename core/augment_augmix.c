/*
 * augment_augmix.c: torchvision's AugMix(severity, mixture_width,
 * chain_depth, alpha, all_ops, interpolation, fill) on one u8 image of a
 * PIXEL stage: the sample's draws (aug_mix_draw) and the blend
 * (px_aug_mix), as torchvision 0.14's AugMix.forward computes it on a
 * uint8 tensor: mix = m0 * x, then for each of the mixture_width chains
 * mix += w_k * chain_k(x) in float32 (each product and sum rounded once),
 * cast back to u8 by truncation. A chain is chain_depth ops (1 to 3 drawn
 * when -1) from AugMix's space (_PARAMETER_MAX = 10 bins: ShearX, ShearY,
 * TranslateX, TranslateY, Rotate, Posterize, Solarize, AutoContrast,
 * Equalize, and with all_ops Brightness, Color, Contrast, Sharpness), each
 * with a bin below severity and a random sign where the op is signed, run
 * as torchvision's _apply_op with the op's interpolation and fill
 * (augment_pixel.h's basic ops).
 *
 * Draws, for op i of the pipeline and a sample: (m0, m1) ~ Dirichlet(alpha,
 * alpha) and the chains' weights ~ Dirichlet(alpha, ... mixture_width) from
 * Gamma(alpha) variates (kernels/mix.h's feed_mix_gamma_log, keyed by the
 * sample in place of a batch number, streams 64 + 16 i + j: j = 0, 1 for
 * the Beta, 2 + k for chain k, apart from the batch mix's streams 0..2);
 * w_k = dirichlet_k * m1 in float32 as torch multiplies them. Chain k's
 * draws are the sample's feed_rand_u32 draws 32k (the depth: 1 +
 * randint(3)), then 32k + 1 + 3t, + 2 + 3t, + 3 + 3t for op t: which op,
 * its bin (randint(severity)) and its sign (randint(2)).
 *
 * Threads: pure, one sample on the caller's thread. Never allocates,
 * blocks or prints.
 */
#include <math.h>
#include <string.h>

#include "augment.h"
#include "augment_pixel.h"
#include "mix.h"
#include "philox.h"

#define AM_STREAM0 64u /* Gamma streams: 64 + 16 i + j */
#define AM_BINS 10u    /* AugMix's _PARAMETER_MAX */

/* AugMix's op space, in torchvision's dict order. */
enum am_op {
	AM_SHEARX = 0, AM_SHEARY, AM_TRANSLATEX, AM_TRANSLATEY, AM_ROTATE, AM_POSTERIZE,
	AM_SOLARIZE, AM_AUTOCONTRAST, AM_EQUALIZE, AM_BRIGHTNESS, AM_COLOR, AM_CONTRAST,
	AM_SHARPNESS, AM_NOPS,
};
#define AM_NBASIC 9u /* without all_ops: the first nine */

/* Op a's magnitude at bin b for an h x w image; *ret_signed when a random
 * sign applies; *ret_binned when a bin is drawn at all. */
static double am_magnitude(enum am_op a, uint32_t b, uint32_t h, uint32_t w, uint32_t v,
			   bool *ret_signed, bool *ret_binned)
{
	*ret_signed = true;
	*ret_binned = true;
	switch (a) {
	case AM_SHEARX:
	case AM_SHEARY: return aug_linspace_v(0.0f, 0.3f, AM_BINS, b, v);
	case AM_TRANSLATEX: return aug_linspace_v(0.0f, (float)(w / 3.0), AM_BINS, b, v);
	case AM_TRANSLATEY: return aug_linspace_v(0.0f, (float)(h / 3.0), AM_BINS, b, v);
	case AM_ROTATE: return aug_linspace_v(0.0f, 30.0f, AM_BINS, b, v);
	case AM_POSTERIZE:
		*ret_signed = false;
		return 4.0 - (double)nearbyintf((float)b / (float)((AM_BINS - 1) / 4.0));
	case AM_SOLARIZE: *ret_signed = false; return aug_linspace_v(255.0f, 0.0f, AM_BINS, b, v);
	case AM_AUTOCONTRAST:
	case AM_EQUALIZE: *ret_signed = false; *ret_binned = false; return 0.0;
	default: return aug_linspace_v(0.0f, 0.9f, AM_BINS, b, v);
	}
}

void aug_mix_draw(const struct pipe_op *op, uint32_t i, const struct aug_ctx *ctx, uint32_t h,
		  uint32_t w, struct aug_mix_draws *ret)
{
	double alpha = (double)op->alpha_ppb / 1e9, g[2 + PIPE_AUGMIX_WIDTH_MAX] = {0}, top = -INFINITY;
	uint32_t nops = op->all_ops ? AM_NOPS : AM_NBASIC;
	uint32_t width = op->mix_width < PIPE_AUGMIX_WIDTH_MAX ? op->mix_width : PIPE_AUGMIX_WIDTH_MAX;

	memset(ret, 0, sizeof(*ret));
	for (uint32_t j = 0; j < 2 + width; j++) {
		g[j] = feed_mix_gamma_log(alpha, ctx->seed, ctx->epoch, ctx->sample,
					  AM_STREAM0 + 16 * i + j);
		top = g[j] > top ? g[j] : top;
	}
	double beta = 0.0, dir = 0.0; /* sums of the variates, scaled by e^-top */
	for (uint32_t j = 0; j < 2 + width; j++) {
		g[j] = exp(g[j] - top);
		*(j < 2 ? &beta : &dir) += g[j];
	}
	ret->m0 = (float)(g[0] / beta);
	ret->m1 = (float)(g[1] / beta);
	ret->width = width;
	for (uint32_t k = 0; k < width; k++) {
		ret->w[k] = (float)(g[2 + k] / dir) * ret->m1;
		struct aug_mix_chain *ch = &ret->chain[k];
		uint32_t d0 = 32 * k;
		ch->depth = op->chain_depth > 0 ? (uint32_t)op->chain_depth
			    : 1 + aug_randint(feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample, i, d0), 3);
		for (uint32_t t = 0; t < ch->depth; t++) {
			uint32_t u[3];
			for (uint32_t q = 0; q < 3; q++)
				u[q] = feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample, i,
						     d0 + 1 + 3 * t + q);
			bool sgn, binned;
			ch->op[t] = aug_randint(u[0], nops);
			ch->bin[t] = aug_randint(u[1], op->severity);
			double mag = am_magnitude((enum am_op)ch->op[t], ch->bin[t], h, w,
						  op->linspace, &sgn, &binned);
			ch->bin[t] = binned ? ch->bin[t] : 0;
			ch->neg[t] = sgn && aug_randint(u[2], 2);
			ch->mag[t] = ch->neg[t] ? -mag : mag;
		}
	}
}

/* torchvision's _apply_op(img, op, mag, interpolation, fill) as a basic op. */
static void am_basic(const struct pipe_op *op, enum am_op a, double mag, uint32_t h, uint32_t w,
		     struct aug_px_op *o)
{
	*o = (struct aug_px_op){.kind = AX_AFFINE, .f = 1.0 + mag,
				.af = {.scale = 1.0, .interp = op->interp, .fill = op->fill,
				       .nomask = !op->fill_set}};
	switch (a) {
	case AM_SHEARX:
	case AM_SHEARY:
		o->af.cx = -0.5 * w; /* center=[0, 0]: the top-left corner */
		o->af.cy = -0.5 * h;
		*(a == AM_SHEARX ? &o->af.shx : &o->af.shy) = atan(mag) * 180.0 / M_PI;
		return;
	case AM_TRANSLATEX: o->af.tx = (double)(int64_t)mag; return;
	case AM_TRANSLATEY: o->af.ty = (double)(int64_t)mag; return;
	case AM_ROTATE: o->af.angle = -mag; return; /* F.rotate passes -angle */
	case AM_POSTERIZE: o->kind = AX_POSTERIZE; o->bits = (uint32_t)(int)mag; return;
	case AM_SOLARIZE: o->kind = AX_SOLARIZE; o->f = mag; return;
	case AM_AUTOCONTRAST: o->kind = AX_AUTOCONTRAST; return;
	case AM_EQUALIZE: o->kind = AX_EQUALIZE; return;
	case AM_BRIGHTNESS: o->kind = AX_BRIGHTNESS; return;
	case AM_COLOR: o->kind = AX_SATURATION; return;
	case AM_CONTRAST: o->kind = AX_CONTRAST; return;
	default: o->kind = AX_SHARPNESS; return;
	}
}

void px_aug_mix(struct aug_px_img *im, const struct pipe_op *op, const struct aug_mix_draws *d,
		uint8_t *mix_scratch, size_t al)
{
	px_flush(im);
	const uint8_t *orig = im->cur;
	size_t n = (size_t)im->h * im->w * im->c;
	float *acc = (float *)(void *)(mix_scratch + 3 * al);

	for (size_t j = 0; j < n; j++)
		acc[j] = d->m0 * (float)orig[j];
	for (uint32_t k = 0; k < d->width; k++) {
		struct aug_px_img sub = {.cur = orig, .dst = mix_scratch, .dst_bytes = n,
					 .buf = {mix_scratch + al, mix_scratch + 2 * al},
					 .fbuf = im->fbuf, .h = im->h, .w = im->w, .c = im->c};
		for (uint32_t t = 0; t < d->chain[k].depth; t++) {
			struct aug_px_op o;
			am_basic(op, (enum am_op)d->chain[k].op[t], d->chain[k].mag[t], im->h, im->w,
				 &o);
			px_run(&sub, &o);
		}
		px_flush(&sub);
		float wk = d->w[k];
		for (size_t j = 0; j < n; j++)
			acc[j] = acc[j] + wk * (float)sub.cur[j];
	}
	uint8_t *out = px_target(im, false);
	for (size_t j = 0; j < n; j++)
		out[j] = acc[j] >= 255.0f ? 255 : acc[j] <= 0.0f ? 0 : (uint8_t)acc[j];
	im->cur = out;
}
