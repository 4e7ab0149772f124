/*
 * augment_auto.c: what each pixel op of a plan does to one sample, as
 * basic ops with fixed parameters (augment_pixel.h): the deterministic
 * ops' keys as they are; the random ops' parameters drawn as torchvision
 * draws them (same distributions, same order of ops), from the sample's
 * Philox draws; TrivialAugmentWide, RandAugment and AutoAugment with
 * torchvision's op lists, magnitude bins (float32 linspace) and policies.
 *
 * Draws (feed_rand_u32(seed, epoch, sample, op, d)): a probability test is
 * draw 0 ("u < p" on 24 bits, as hflip); color_jitter: draws 0..2 the
 * order (Fisher-Yates, torch.randperm(4)'s distribution), 4..7 the four
 * factors; random_rotation: 0 the angle; random_affine: 0 angle, 1 and 2
 * the translation, 3 scale, 4 shear; gaussian_blur: 0 sigma;
 * trivial_augment_wide: 0 the op, 1 the bin, 2 the sign; rand_augment: 2n
 * op n, 2n + 1 its sign; auto_augment: 0 the sub-policy, 1 and 2 the
 * probabilities, 3 and 4 the signs; random_erasing: 0 p, 1 + 2t and 2 + 2t
 * scale and log-ratio of try t (t < 10), 21 and 22 top and left, from draw
 * 32 on the normal values of value=random.
 *
 * Threads: pure. Never allocates, blocks or prints.
 */
#include <math.h>

#include "augment.h"
#include "augment_pixel.h"
#include "philox.h"

static uint32_t draw(const struct aug_ctx *ctx, uint32_t op, uint32_t d)
{
	return feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample, op, d);
}

/* U(a, b) from one draw (24-bit resolution, as torch's float32 uniform_). */
static double uni(uint32_t u, double a, double b)
{
	return a + (b - a) * (double)feed_rand_unit_of(u);
}

static double ppb(int64_t v)
{
	return (double)v / 1e9;
}

/* The auto-augment op names, in torchvision's dict order. */
enum aa_op {
	AA_IDENTITY = 0,
	AA_SHEARX,
	AA_SHEARY,
	AA_TRANSLATEX,
	AA_TRANSLATEY,
	AA_ROTATE,
	AA_BRIGHTNESS,
	AA_COLOR,
	AA_CONTRAST,
	AA_SHARPNESS,
	AA_POSTERIZE,
	AA_SOLARIZE,
	AA_AUTOCONTRAST,
	AA_EQUALIZE,
	AA_INVERT,
};
#define AA_NWIDE 14 /* TrivialAugmentWide and RandAugment draw among the first 14 */

/* The magnitude of bin `bin` of op in the space of TrivialAugmentWide
 * (wide) or of RandAugment / AutoAugment, with the linspace of pop's
 * variant; *ret_signed when it takes a random sign. */
static double aa_magnitude(const struct pipe_op *pop, enum aa_op op, bool wide, uint32_t nbins,
			   uint32_t bin, uint32_t h, uint32_t w, bool *ret_signed)
{
	float lin = wide ? 0.99f : 0.9f;
	uint32_t v = pop->linspace;

	*ret_signed = true;
	switch (op) {
	case AA_SHEARX:
	case AA_SHEARY: return aug_linspace_v(0.0f, wide ? 0.99f : 0.3f, nbins, bin, v);
	case AA_TRANSLATEX:
		return aug_linspace_v(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * w), nbins, bin, v);
	case AA_TRANSLATEY:
		return aug_linspace_v(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * h), nbins, bin, v);
	case AA_ROTATE: return aug_linspace_v(0.0f, wide ? 135.0f : 30.0f, nbins, bin, v);
	case AA_BRIGHTNESS:
	case AA_COLOR:
	case AA_CONTRAST:
	case AA_SHARPNESS: return aug_linspace_v(0.0f, lin, nbins, bin, v);
	case AA_POSTERIZE:
		*ret_signed = false;
		return 8.0 - (double)nearbyintf((float)bin /
						(float)((nbins - 1) / (wide ? 6.0 : 4.0)));
	case AA_SOLARIZE: *ret_signed = false; return aug_linspace_v(255.0f, 0.0f, nbins, bin, v);
	default: *ret_signed = false; return 0.0;
	}
}

static struct aug_affine affine_none(void)
{
	return (struct aug_affine){.scale = 1.0, .interp = PIPE_INTERP_NEAREST};
}

/* torchvision's _apply_op(img, op, magnitude, NEAREST, fill=None). */
static uint32_t aa_apply(enum aa_op op, double mag, uint32_t h, uint32_t w, struct aug_px_op *o)
{
	*o = (struct aug_px_op){.kind = AX_AFFINE, .af = affine_none(), .f = 1.0 + mag};
	switch (op) {
	case AA_SHEARX:
	case AA_SHEARY:
		/* center=[0, 0]: the top-left corner */
		o->af.cx = -0.5 * w;
		o->af.cy = -0.5 * h;
		*(op == AA_SHEARX ? &o->af.shx : &o->af.shy) = atan(mag) * 180.0 / M_PI;
		return 1;
	case AA_TRANSLATEX: o->af.tx = (double)(int64_t)mag; return 1;
	case AA_TRANSLATEY: o->af.ty = (double)(int64_t)mag; return 1;
	case AA_ROTATE: o->af.angle = -mag; return 1; /* F.rotate passes -angle */
	case AA_BRIGHTNESS: o->kind = AX_BRIGHTNESS; return 1;
	case AA_COLOR: o->kind = AX_SATURATION; return 1;
	case AA_CONTRAST: o->kind = AX_CONTRAST; return 1;
	case AA_SHARPNESS: o->kind = AX_SHARPNESS; return 1;
	case AA_POSTERIZE: o->kind = AX_POSTERIZE; o->bits = (uint32_t)(int)mag; return 1;
	case AA_SOLARIZE: o->kind = AX_SOLARIZE; o->f = mag; return 1;
	case AA_AUTOCONTRAST: o->kind = AX_AUTOCONTRAST; return 1;
	case AA_EQUALIZE: o->kind = AX_EQUALIZE; return 1;
	case AA_INVERT: o->kind = AX_INVERT; return 1;
	default: return 0;
	}
}

static uint32_t expand_trivial(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			       uint32_t h, uint32_t w, struct aug_px_op *out)
{
	enum aa_op a = (enum aa_op)aug_randint(draw(ctx, i, 0), AA_NWIDE);
	bool sgn;
	uint32_t bin = aug_randint(draw(ctx, i, 1), op->nbins);
	double mag = aa_magnitude(op, a, true, op->nbins, bin, h, w, &sgn);

	if (sgn && aug_randint(draw(ctx, i, 2), 2))
		mag = -mag;
	return aa_apply(a, mag, h, w, out);
}

static uint32_t expand_rand(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			    uint32_t h, uint32_t w, struct aug_px_op *out)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < op->num_ops && n < AUG_PX_MAX; k++) {
		enum aa_op a = (enum aa_op)aug_randint(draw(ctx, i, 2 * k), AA_NWIDE);
		bool sgn;
		double mag = aa_magnitude(op, a, false, op->nbins, op->magnitude, h, w, &sgn);
		if (sgn && aug_randint(draw(ctx, i, 2 * k + 1), 2))
			mag = -mag;
		n += aa_apply(a, mag, h, w, &out[n]);
	}
	return n;
}

/* One step of a sub-policy: op, probability in tenths, bin (-1: none). */
struct aa_step {
	uint8_t op;
	uint8_t p10;
	int8_t bin;
};

#define S(o, p, b) {AA_##o, p, b}
/* torchvision's AutoAugmentPolicy sub-policies (from the AutoAugment
 * paper's tables), 25 per policy, two steps each. */
static const struct aa_step aa_policies[3][25][2] = {
	{/* imagenet */
	 {S(POSTERIZE, 4, 8), S(ROTATE, 6, 9)}, {S(SOLARIZE, 6, 5), S(AUTOCONTRAST, 6, -1)},
	 {S(EQUALIZE, 8, -1), S(EQUALIZE, 6, -1)}, {S(POSTERIZE, 6, 7), S(POSTERIZE, 6, 6)},
	 {S(EQUALIZE, 4, -1), S(SOLARIZE, 2, 4)}, {S(EQUALIZE, 4, -1), S(ROTATE, 8, 8)},
	 {S(SOLARIZE, 6, 3), S(EQUALIZE, 6, -1)}, {S(POSTERIZE, 8, 5), S(EQUALIZE, 10, -1)},
	 {S(ROTATE, 2, 3), S(SOLARIZE, 6, 8)}, {S(EQUALIZE, 6, -1), S(POSTERIZE, 4, 6)},
	 {S(ROTATE, 8, 8), S(COLOR, 4, 0)}, {S(ROTATE, 4, 9), S(EQUALIZE, 6, -1)},
	 {S(EQUALIZE, 0, -1), S(EQUALIZE, 8, -1)}, {S(INVERT, 6, -1), S(EQUALIZE, 10, -1)},
	 {S(COLOR, 6, 4), S(CONTRAST, 10, 8)}, {S(ROTATE, 8, 8), S(COLOR, 10, 2)},
	 {S(COLOR, 8, 8), S(SOLARIZE, 8, 7)}, {S(SHARPNESS, 4, 7), S(INVERT, 6, -1)},
	 {S(SHEARX, 6, 5), S(EQUALIZE, 10, -1)}, {S(COLOR, 4, 0), S(EQUALIZE, 6, -1)},
	 {S(EQUALIZE, 4, -1), S(SOLARIZE, 2, 4)}, {S(SOLARIZE, 6, 5), S(AUTOCONTRAST, 6, -1)},
	 {S(INVERT, 6, -1), S(EQUALIZE, 10, -1)}, {S(COLOR, 6, 4), S(CONTRAST, 10, 8)},
	 {S(EQUALIZE, 8, -1), S(EQUALIZE, 6, -1)}},
	{/* cifar10 */
	 {S(INVERT, 1, -1), S(CONTRAST, 2, 6)}, {S(ROTATE, 7, 2), S(TRANSLATEX, 3, 9)},
	 {S(SHARPNESS, 8, 1), S(SHARPNESS, 9, 3)}, {S(SHEARY, 5, 8), S(TRANSLATEY, 7, 9)},
	 {S(AUTOCONTRAST, 5, -1), S(EQUALIZE, 9, -1)}, {S(SHEARY, 2, 7), S(POSTERIZE, 3, 7)},
	 {S(COLOR, 4, 3), S(BRIGHTNESS, 6, 7)}, {S(SHARPNESS, 3, 9), S(BRIGHTNESS, 7, 9)},
	 {S(EQUALIZE, 6, -1), S(EQUALIZE, 5, -1)}, {S(CONTRAST, 6, 7), S(SHARPNESS, 6, 5)},
	 {S(COLOR, 7, 7), S(TRANSLATEX, 5, 8)}, {S(EQUALIZE, 3, -1), S(AUTOCONTRAST, 4, -1)},
	 {S(TRANSLATEY, 4, 3), S(SHARPNESS, 2, 6)}, {S(BRIGHTNESS, 9, 6), S(COLOR, 2, 8)},
	 {S(SOLARIZE, 5, 2), S(INVERT, 0, -1)}, {S(EQUALIZE, 2, -1), S(AUTOCONTRAST, 6, -1)},
	 {S(EQUALIZE, 2, -1), S(EQUALIZE, 6, -1)}, {S(COLOR, 9, 9), S(EQUALIZE, 6, -1)},
	 {S(AUTOCONTRAST, 8, -1), S(SOLARIZE, 2, 8)}, {S(BRIGHTNESS, 1, 3), S(COLOR, 7, 0)},
	 {S(SOLARIZE, 4, 5), S(AUTOCONTRAST, 9, -1)}, {S(TRANSLATEY, 9, 9), S(TRANSLATEY, 7, 9)},
	 {S(AUTOCONTRAST, 9, -1), S(SOLARIZE, 8, 3)}, {S(EQUALIZE, 8, -1), S(INVERT, 1, -1)},
	 {S(TRANSLATEY, 7, 9), S(AUTOCONTRAST, 9, -1)}},
	{/* svhn */
	 {S(SHEARX, 9, 4), S(INVERT, 2, -1)}, {S(SHEARY, 9, 8), S(INVERT, 7, -1)},
	 {S(EQUALIZE, 6, -1), S(SOLARIZE, 6, 6)}, {S(INVERT, 9, -1), S(EQUALIZE, 6, -1)},
	 {S(EQUALIZE, 6, -1), S(ROTATE, 9, 3)}, {S(SHEARX, 9, 4), S(AUTOCONTRAST, 8, -1)},
	 {S(SHEARY, 9, 8), S(INVERT, 4, -1)}, {S(SHEARY, 9, 5), S(SOLARIZE, 2, 6)},
	 {S(INVERT, 9, -1), S(AUTOCONTRAST, 8, -1)}, {S(EQUALIZE, 6, -1), S(ROTATE, 9, 3)},
	 {S(SHEARX, 9, 4), S(SOLARIZE, 3, 3)}, {S(SHEARY, 8, 8), S(INVERT, 7, -1)},
	 {S(EQUALIZE, 9, -1), S(TRANSLATEY, 6, 6)}, {S(INVERT, 9, -1), S(EQUALIZE, 6, -1)},
	 {S(CONTRAST, 3, 3), S(ROTATE, 8, 4)}, {S(INVERT, 8, -1), S(TRANSLATEY, 0, 2)},
	 {S(SHEARY, 7, 6), S(SOLARIZE, 4, 8)}, {S(INVERT, 6, -1), S(ROTATE, 8, 4)},
	 {S(SHEARY, 3, 7), S(TRANSLATEX, 9, 3)}, {S(SHEARX, 1, 6), S(INVERT, 6, -1)},
	 {S(SOLARIZE, 7, 2), S(TRANSLATEY, 6, 7)}, {S(SHEARY, 8, 4), S(INVERT, 8, -1)},
	 {S(SHEARX, 7, 9), S(TRANSLATEY, 8, 3)}, {S(SHEARY, 8, 5), S(AUTOCONTRAST, 7, -1)},
	 {S(SHEARX, 7, 2), S(INVERT, 1, -1)}},
};
#undef S

static uint32_t expand_auto(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			    uint32_t h, uint32_t w, struct aug_px_op *out)
{
	const struct aa_step *sp = aa_policies[op->policy % 3][aug_randint(draw(ctx, i, 0), 25)];
	uint32_t n = 0;

	for (uint32_t k = 0; k < 2; k++) {
		float prob = feed_rand_unit_of(draw(ctx, i, 1 + k));
		if (!(prob <= (float)(sp[k].p10 / 10.0)))
			continue;
		bool sgn;
		double mag = sp[k].bin < 0 ? 0.0
					   : aa_magnitude(op, (enum aa_op)sp[k].op, false, 10,
							  (uint32_t)sp[k].bin, h, w, &sgn);
		if (sp[k].bin >= 0 && sgn && aug_randint(draw(ctx, i, 3 + k), 2) == 0)
			mag = -mag;
		n += aa_apply((enum aa_op)sp[k].op, mag, h, w, &out[n]);
	}
	return n;
}

/* ColorJitter: the four adjustments whose range is not empty, in a random
 * order. */
static uint32_t expand_jitter(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			      struct aug_px_op *out)
{
	static const enum aug_px_kind kinds[4] = {AX_BRIGHTNESS, AX_CONTRAST, AX_SATURATION,
						  AX_HUE};
	uint32_t perm[4] = {0, 1, 2, 3}, n = 0;

	for (uint32_t k = 3; k >= 1; k--) {
		uint32_t j = aug_randint(draw(ctx, i, 3 - k), k + 1), t = perm[k];
		perm[k] = perm[j];
		perm[j] = t;
	}
	for (uint32_t k = 0; k < 4; k++) {
		uint32_t fn = perm[k];
		double v = ppb(op->jitter_ppb[fn]);
		if (v == 0.0)
			continue;
		double lo = fn == 3 ? -v : (1.0 - v > 0.0 ? 1.0 - v : 0.0), hi = fn == 3 ? v : 1.0 + v;
		out[n++] = (struct aug_px_op){.kind = kinds[fn], .f = uni(draw(ctx, i, 4 + fn), lo, hi),
					      .hue_scaled = op->hue_cast != 0};
	}
	return n;
}

static uint32_t expand_affine_random(const struct pipe_op *op, const struct aug_ctx *ctx,
				     uint32_t i, uint32_t h, uint32_t w, struct aug_px_op *o)
{
	double deg = ppb(op->degrees_ppb);

	*o = (struct aug_px_op){.kind = AX_AFFINE, .af = affine_none()};
	o->af.interp = op->interp;
	o->af.fill = op->fill;
	o->af.angle = uni(draw(ctx, i, 0), -deg, deg);
	if (op->kind == PIPE_RANDOM_ROTATION) {
		o->af.angle = -o->af.angle; /* F.rotate */
		return 1;
	}
	if (op->translate_frac_ppb) {
		double mx = (double)(float)(ppb(op->translate_frac_ppb) * w);
		double my = (double)(float)(ppb(op->translate_frac_ppb) * h);
		o->af.tx = nearbyint(uni(draw(ctx, i, 1), -mx, mx));
		o->af.ty = nearbyint(uni(draw(ctx, i, 2), -my, my));
	}
	if (op->ascale_ppb[0] != PIPE_P_ONE || op->ascale_ppb[1] != PIPE_P_ONE)
		o->af.scale = uni(draw(ctx, i, 3), ppb(op->ascale_ppb[0]), ppb(op->ascale_ppb[1]));
	if (op->shear_r_ppb)
		o->af.shx = uni(draw(ctx, i, 4), -ppb(op->shear_r_ppb), ppb(op->shear_r_ppb));
	return 1;
}

/* RandomErasing.get_params; 0 when p says no or no try fits. */
static uint32_t expand_erasing(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			       uint32_t h, uint32_t w, struct aug_px_op *o)
{
	if (!aug_hflip_decision(draw(ctx, i, 0), op->p_ppb))
		return 0;
	double area = (double)h * w;
	double lr0 = (double)logf((float)ppb(op->eratio_ppb[0]));
	double lr1 = (double)logf((float)ppb(op->eratio_ppb[1]));
	for (uint32_t t = 0; t < 10; t++) {
		double ea = area * uni(draw(ctx, i, 1 + 2 * t), ppb(op->escale_ppb[0]),
				       ppb(op->escale_ppb[1]));
		double ar = exp(uni(draw(ctx, i, 2 + 2 * t), lr0, lr1));
		double eh = nearbyint(sqrt(ea * ar)), ew = nearbyint(sqrt(ea / ar));
		if (!(eh < h && ew < w))
			continue;
		*o = (struct aug_px_op){.kind = AX_ERASE, .eh = (uint32_t)eh, .ew = (uint32_t)ew,
					.value = op->value, .value_random = op->value_random,
					.ctx = *ctx, .draw_op = i};
		if (op->nevalue > 1 && !op->value_random) {
			o->nvalues = op->nevalue;
			for (uint32_t k = 0; k < op->nevalue && k < PIPE_MAX_C; k++)
				o->cvalue[k] = (uint8_t)(op->evalue_ppb[k] / PIPE_P_ONE);
		}
		o->ei = aug_randint(draw(ctx, i, 21), h - o->eh + 1);
		o->ej = aug_randint(draw(ctx, i, 22), w - o->ew + 1);
		return 1;
	}
	return 0;
}

/* The deterministic ops: their keys as they are. */
static uint32_t expand_fixed(const struct pipe_op *op, struct aug_px_op *o)
{
	*o = (struct aug_px_op){.f = ppb(op->factor_ppb), .af = affine_none()};
	switch (op->kind) {
	case PIPE_ADJUST_BRIGHTNESS: o->kind = AX_BRIGHTNESS; return 1;
	case PIPE_ADJUST_CONTRAST: o->kind = AX_CONTRAST; return 1;
	case PIPE_ADJUST_SATURATION: o->kind = AX_SATURATION; return 1;
	case PIPE_ADJUST_HUE:
		o->kind = AX_HUE;
		o->hue_scaled = op->hue_cast != 0;
		return 1;
	case PIPE_ADJUST_SHARPNESS: o->kind = AX_SHARPNESS; return 1;
	case PIPE_ROTATE:
	case PIPE_AFFINE:
		o->kind = AX_AFFINE;
		o->af.angle = op->kind == PIPE_ROTATE ? -ppb(op->angle_ppb) : ppb(op->angle_ppb);
		o->af.interp = op->interp;
		o->af.fill = op->fill;
		o->af.nomask = !op->fill_set; /* F.rotate / F.affine's fill=None */
		if (op->kind == PIPE_AFFINE) {
			o->af.tx = ppb(op->translate_ppb[0]);
			o->af.ty = ppb(op->translate_ppb[1]);
			o->af.scale = ppb(op->scale_f_ppb);
			o->af.shx = ppb(op->shear_ppb[0]);
			o->af.shy = ppb(op->shear_ppb[1]);
		}
		return 1;
	case PIPE_POSTERIZE: o->kind = AX_POSTERIZE; o->bits = op->bits; return 1;
	case PIPE_SOLARIZE: o->kind = AX_SOLARIZE; o->f = op->threshold; return 1;
	case PIPE_EQUALIZE: o->kind = AX_EQUALIZE; return 1;
	case PIPE_AUTOCONTRAST: o->kind = AX_AUTOCONTRAST; return 1;
	case PIPE_INVERT: o->kind = AX_INVERT; return 1;
	case PIPE_RGB_TO_GRAYSCALE: o->kind = AX_GRAYSCALE; o->out_c = op->out_c; return 1;
	case PIPE_ERASE:
		o->kind = AX_ERASE;
		o->ei = op->ei;
		o->ej = op->ej;
		o->eh = op->h;
		o->ew = op->w;
		o->value = op->value;
		return 1;
	default: return 0;
	}
}

/* The random_<op>(p) ops: the op when draw 0 says so. */
static uint32_t expand_maybe(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i,
			     uint32_t c, struct aug_px_op *o)
{
	if (!aug_hflip_decision(draw(ctx, i, 0), op->p_ppb))
		return 0;
	*o = (struct aug_px_op){.f = ppb(op->factor_ppb), .bits = op->bits, .out_c = c};
	switch (op->kind) {
	case PIPE_RANDOM_GRAYSCALE: o->kind = AX_GRAYSCALE; return 1;
	case PIPE_RANDOM_SOLARIZE: o->kind = AX_SOLARIZE; o->f = op->threshold; return 1;
	case PIPE_RANDOM_POSTERIZE: o->kind = AX_POSTERIZE; return 1;
	case PIPE_RANDOM_EQUALIZE: o->kind = AX_EQUALIZE; return 1;
	case PIPE_RANDOM_AUTOCONTRAST: o->kind = AX_AUTOCONTRAST; return 1;
	case PIPE_RANDOM_ADJUST_SHARPNESS: o->kind = AX_SHARPNESS; return 1;
	case PIPE_RANDOM_INVERT: o->kind = AX_INVERT; return 1;
	default: return 0;
	}
}

_Static_assert(PIPE_SUB_BASIC_MAX <= AUG_PX_MAX, "a container's transforms fit one expansion");

/* random_choice: the transform drawn (draw 0), uniformly or by the
 * weights p (random.choices: the first whose running sum exceeds u * sum). */
static uint32_t choice_of(const struct pipe_op *op, const struct aug_ctx *ctx, uint32_t i)
{
	uint32_t u = draw(ctx, i, 0);
	uint64_t sum = 0, run = 0;

	if (op->nwts == 0)
		return aug_randint(u, op->nsub);
	for (uint32_t k = 0; k < op->nwts; k++)
		sum += op->wts_ppb[k];
	double at = (double)feed_rand_unit_of(u) * (double)sum;
	for (uint32_t k = 0; k < op->nwts; k++) {
		run += op->wts_ppb[k];
		if (at < (double)run)
			return k;
	}
	return op->nwts - 1;
}

/* random_apply (draw 0 against p, then every transform in order),
 * random_choice (one transform, choice_of()), random_order (all, in the
 * order of a Fisher-Yates shuffle on draws 0..n-2). The transforms (ops
 * i + 1 .. i + nsub) draw from their own op index. */
static uint32_t expand_container(const struct pipe_plan *p, uint32_t i, const struct aug_ctx *ctx,
				 uint32_t h, uint32_t w, uint32_t c, struct aug_px_op *out)
{
	const struct pipe_op *op = &p->spec.ops[i];
	uint32_t order[PIPE_MAX_SUB], n = 0, count = op->nsub;

	for (uint32_t k = 0; k < count; k++)
		order[k] = k;
	if (op->kind == PIPE_RANDOM_APPLY && !aug_hflip_decision(draw(ctx, i, 0), op->p_ppb))
		return 0;
	if (op->kind == PIPE_RANDOM_CHOICE) {
		order[0] = choice_of(op, ctx, i);
		count = 1;
	}
	for (uint32_t k = count - 1; op->kind == PIPE_RANDOM_ORDER && k >= 1; k--) {
		uint32_t j = aug_randint(draw(ctx, i, count - 1 - k), k + 1), t = order[k];
		order[k] = order[j];
		order[j] = t;
	}
	for (uint32_t k = 0; k < count; k++)
		n += aug_px_expand(p, i + 1 + order[k], ctx, h, w, c, out + n);
	return n;
}

uint32_t aug_px_expand(const struct pipe_plan *p, uint32_t i, const struct aug_ctx *ctx,
		       uint32_t h, uint32_t w, uint32_t c, struct aug_px_op *out)
{
	const struct pipe_op *op = &p->spec.ops[i];

	switch (op->kind) {
	case PIPE_GAUSSIAN_BLUR:
		out[0] = (struct aug_px_op){.kind = AX_BLUR, .ksize = op->ksize,
					    .f = op->sigma_fixed ? ppb(op->sigma_ppb[0])
						 : uni(draw(ctx, i, 0), ppb(op->sigma_ppb[0]),
						       ppb(op->sigma_ppb[1]))};
		return 1;
	case PIPE_COLOR_JITTER: return expand_jitter(op, ctx, i, out);
	case PIPE_RANDOM_ROTATION:
	case PIPE_RANDOM_AFFINE: return expand_affine_random(op, ctx, i, h, w, out);
	case PIPE_TRIVIAL_AUGMENT_WIDE: return expand_trivial(op, ctx, i, h, w, out);
	case PIPE_RAND_AUGMENT: return expand_rand(op, ctx, i, h, w, out);
	case PIPE_AUTO_AUGMENT: return expand_auto(op, ctx, i, h, w, out);
	case PIPE_RANDOM_ERASING: return expand_erasing(op, ctx, i, h, w, out);
	case PIPE_RANDOM_GRAYSCALE:
	case PIPE_RANDOM_SOLARIZE:
	case PIPE_RANDOM_POSTERIZE:
	case PIPE_RANDOM_EQUALIZE:
	case PIPE_RANDOM_AUTOCONTRAST:
	case PIPE_RANDOM_ADJUST_SHARPNESS:
	case PIPE_RANDOM_INVERT: return expand_maybe(op, ctx, i, c, out);
	case PIPE_RANDOM_APPLY:
	case PIPE_RANDOM_CHOICE:
	case PIPE_RANDOM_ORDER: return expand_container(p, i, ctx, h, w, c, out);
	case PIPE_VFLIP:
	case PIPE_PAD:
	case PIPE_RANDOM_PERSPECTIVE:
	case PIPE_GAUSSIAN_NOISE: return aug_tv_expand(p, i, ctx, h, w, c, out);
	case PIPE_AUG_MIX: return 0; /* augment_augmix.c: blends, not a list */
	default: return expand_fixed(op, out);
	}
}
