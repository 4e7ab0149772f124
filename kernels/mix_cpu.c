/*
 * mix_cpu.c: the draws of a batch's mix (lambda from Beta(alpha, alpha),
 * the op, cutmix's box) and the CPU twins of the mix kernels (mix.h).
 *
 * Owns: the Gamma sampler behind lambda and the walk of the twins over a
 * batch. Each output value comes from the element functions of mix.h, the
 * very code the kernels run; only the walk differs (runs of elements,
 * every sample of the batch for each run, carrying the previous sample's
 * original values, where a kernel thread takes one element of every
 * sample).
 *
 * Threads: pure; any number of threads at once. Never allocates, blocks or
 * prints. Built with -ffp-contract=off: the element functions' products
 * and sums are rounded one by one, as torch rounds them.
 */
#include "mix.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>

#include "philox.h"

/* ------------------------------------------------------------------ */
/* Draws                                                               */

/* The words of one Philox stream of a batch, in order. */
struct mix_rng {
	uint64_t seed, epoch, batch; /* batch tagged */
	uint32_t stream, next;
};

static uint32_t mix_word(struct mix_rng *r)
{
	return feed_rand_u32(r->seed, r->epoch, r->batch, r->stream, r->next++);
}

/* A uniform in (0, 1): 53 bits from two words, never 0 or 1. */
static double mix_unit(struct mix_rng *r)
{
	uint32_t hi = mix_word(r), lo = mix_word(r);
	uint64_t k = (uint64_t)(hi >> 5) << 26 | (lo >> 6);
	return ((double)k + 0.5) * 0x1p-53;
}

/* A standard normal: Box-Muller, cosine branch. */
static double mix_normal(struct mix_rng *r)
{
	double u1 = mix_unit(r), u2 = mix_unit(r);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Tries of Marsaglia-Tsang before giving up on a stream (each accepts with
 * probability above 0.95: never reached in practice, but a pure function
 * must end). */
#define MIX_GAMMA_TRIES 1000

double feed_mix_gamma_log(double alpha, uint64_t seed, uint64_t epoch, uint64_t batch,
			  uint32_t stream)
{
	struct mix_rng r = {seed, epoch, batch | FEED_MIX_BATCH_TAG, stream, 0};
	double boost = 0.0;
	if (alpha < 1.0) {
		boost = log(mix_unit(&r)) / alpha;
		alpha += 1.0;
	}
	double d = alpha - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
	for (int t = 0; t < MIX_GAMMA_TRIES; t++) {
		double x = mix_normal(&r), v = 1.0 + c * x;
		if (v <= 0.0)
			continue;
		v = v * v * v;
		double u = mix_unit(&r);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return log(d) + log(v) + boost;
	}
	return log(d) + boost; /* the mode of Gamma(alpha) */
}

/* floor(word * n / 2^32): an integer in [0, n). */
static uint32_t mix_below(uint32_t word, uint32_t n)
{
	return (uint32_t)(((uint64_t)word * n) >> 32);
}

int feed_mix_draw_batch(double mixup_alpha, double cutmix_alpha, double switch_prob,
			uint64_t seed, uint64_t epoch, uint64_t batch, uint32_t h, uint32_t w,
			struct feed_mix_draw *ret)
{
	struct feed_mix_draw d = {0};
	if (!ret || !h || !w || !(mixup_alpha >= 0.0) || !(cutmix_alpha >= 0.0) ||
	    !isfinite(mixup_alpha) || !isfinite(cutmix_alpha) || !(switch_prob >= 0.0) ||
	    !(switch_prob <= 1.0))
		return -EINVAL;
	uint64_t tagged = batch | FEED_MIX_BATCH_TAG;
	bool cut;
	if (mixup_alpha > 0.0 && cutmix_alpha > 0.0)
		cut = feed_rand_u32(seed, epoch, tagged, 0, 0) * 0x1p-32 < switch_prob;
	else if (mixup_alpha > 0.0 || cutmix_alpha > 0.0)
		cut = cutmix_alpha > 0.0;
	else {
		d.op = FEED_MIX_OP_NONE;
		d.lam = 1.0;
		*ret = d;
		return 0;
	}
	double alpha = cut ? cutmix_alpha : mixup_alpha;
	double lx = feed_mix_gamma_log(alpha, seed, epoch, batch, 1);
	double ly = feed_mix_gamma_log(alpha, seed, epoch, batch, 2);
	/* X / (X + Y) = 1 / (1 + Y / X), in logs */
	d.lam = 1.0 / (1.0 + exp(ly - lx));
	if (!cut) {
		d.op = FEED_MIX_OP_MIXUP;
		*ret = d;
		return 0;
	}
	d.op = FEED_MIX_OP_CUTMIX;
	int64_t rx = mix_below(feed_rand_u32(seed, epoch, tagged, 0, 1), w);
	int64_t ry = mix_below(feed_rand_u32(seed, epoch, tagged, 0, 2), h);
	double r = 0.5 * sqrt(1.0 - d.lam);
	int64_t rw = (int64_t)(r * w), rh = (int64_t)(r * h);
	d.x1 = (uint32_t)(rx - rw > 0 ? rx - rw : 0);
	d.y1 = (uint32_t)(ry - rh > 0 ? ry - rh : 0);
	d.x2 = (uint32_t)(rx + rw < w ? rx + rw : w);
	d.y2 = (uint32_t)(ry + rh < h ? ry + rh : h);
	d.lam = 1.0 - (double)(d.x2 - d.x1) * (d.y2 - d.y1) / ((double)w * h);
	*ret = d;
	return 0;
}

int feed_mix_args_init(struct feed_mix_args *ret, const struct feed_mix_draw *d, uint32_t h,
		       uint32_t w, uint32_t num_classes, double label_smoothing)
{
	struct feed_mix_args a = {0};
	if (!ret || !d || d->op > FEED_MIX_OP_CUTMIX || !(d->lam >= 0.0) || !(d->lam <= 1.0) ||
	    !(label_smoothing >= 0.0) || !(label_smoothing <= 1.0))
		return -EINVAL;
	if (d->op == FEED_MIX_OP_CUTMIX &&
	    (d->x1 > d->x2 || d->x2 > w || d->y1 > d->y2 || d->y2 > h))
		return -EINVAL;
	a.op = d->op;
	if (d->op == FEED_MIX_OP_CUTMIX) {
		a.x1 = d->x1;
		a.y1 = d->y1;
		a.x2 = d->x2;
		a.y2 = d->y2;
	}
	a.num_classes = num_classes;
	a.lam = (float)d->lam;
	a.oml = (float)(1.0 - d->lam);
	if (num_classes) {
		double off = label_smoothing / num_classes; /* timm's mixup_target */
		a.off = (float)off;
		a.on = (float)(1.0 - label_smoothing + off);
	}
	*ret = a;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Twins                                                               */

#define MIX_RUN 512 /* elements a run carries at once (on the stack) */

/* One run of one sample: row (its len elements) mixed with prev, the
 * previous sample's original values. */
static void mix_row(const struct feed_convert *cv, const struct feed_mix_args *a, char *row,
		    const char *prev, size_t len)
{
	if (a->op == FEED_MIX_OP_CUTMIX) {
		memcpy(row, prev, len * (cv->dtype == FEED_CONVERT_F32 ? 4 : 2));
	} else if (cv->dtype == FEED_CONVERT_F32) {
		float *o = (float *)row;
		const float *p = (const float *)prev;
		for (size_t k = 0; k < len; k++)
			o[k] = feed_mix_f32(o[k], p[k], a->lam, a->oml);
	} else {
		uint16_t *o = (uint16_t *)row;
		const uint16_t *p = (const uint16_t *)prev;
		if (cv->dtype == FEED_CONVERT_F16)
			for (size_t k = 0; k < len; k++)
				o[k] = feed_mix_f16(o[k], p[k], a->lam, a->oml);
		else
			for (size_t k = 0; k < len; k++)
				o[k] = feed_mix_bf16(o[k], p[k], a->lam, a->oml);
	}
}

/* Mixes elements [e, e + len) (len <= MIX_RUN) of every sample: sample i
 * with sample i - 1's original values, sample 0 with sample n - 1's. The
 * walk goes from the last sample down, so sample i - 1 still holds its
 * original values when sample i reads them; only sample n - 1's are kept
 * apart, for sample 0. */
static void mix_run(const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
		    char *data, size_t per, size_t e, size_t len)
{
	union {
		float f[MIX_RUN];
		uint16_t h[MIX_RUN];
	} last;
	size_t esz = cv->dtype == FEED_CONVERT_F32 ? 4 : 2;
	memcpy(&last, data + ((n - 1) * per + e) * esz, len * esz);
	for (size_t i = n; i-- > 0;) {
		char *row = data + (i * per + e) * esz;
		mix_row(cv, a, row, i ? row - per * esz : (const char *)&last, len);
	}
}

/* Every run of [e, e + len) in MIX_RUN pieces. */
static void mix_span(const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
		     char *data, size_t per, size_t e, size_t len)
{
	while (len) {
		size_t k = len < MIX_RUN ? len : MIX_RUN;
		mix_run(cv, a, n, data, per, e, k);
		e += k;
		len -= k;
	}
}

int feed_mix_images_cpu(const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
			void *data)
{
	if (!cv || !a || (n && !data))
		return -EINVAL;
	if (!n || a->op == FEED_MIX_OP_NONE)
		return 0;
	size_t w = cv->w, h = cv->h, c = cv->c, per = h * w * c;
	if (a->op == FEED_MIX_OP_MIXUP) {
		mix_span(cv, a, n, data, per, 0, per);
		return 0;
	}
	if (a->x2 > w || a->y2 > h || a->x1 >= a->x2 || a->y1 >= a->y2)
		return a->x2 > w || a->y2 > h ? -EINVAL : 0; /* an empty box: nothing */
	size_t bw = a->x2 - a->x1;
	for (size_t y = a->y1; y < a->y2; y++) {
		if (cv->layout == FEED_CONVERT_NHWC) {
			mix_span(cv, a, n, data, per, (y * w + a->x1) * c, bw * c);
			continue;
		}
		for (size_t ch = 0; ch < c; ch++)
			mix_span(cv, a, n, data, per, (ch * h + y) * w + a->x1, bw);
	}
	return 0;
}

int feed_mix_labels_check(const void *labels, uint32_t t, size_t n, uint32_t num_classes,
			  int64_t *ret_bad, size_t *ret_at)
{
	for (size_t i = 0; i < n; i++) {
		int64_t v = feed_mix_label_at(labels, t, i);
		if (v < 0 || v >= (int64_t)num_classes) {
			if (ret_bad)
				*ret_bad = v;
			if (ret_at)
				*ret_at = i;
			return -ERANGE;
		}
	}
	return 0;
}

int feed_mix_labels_cpu(const struct feed_mix_args *a, const void *labels, uint32_t t, size_t n,
			float *dst)
{
	if (!a || (n && (!labels || !dst)) || t > FEED_MIX_LABEL_I64 || !a->num_classes)
		return -EINVAL;
	if (feed_mix_labels_check(labels, t, n, a->num_classes, NULL, NULL) < 0)
		return -ERANGE;
	uint32_t C = a->num_classes;
	for (size_t i = 0; i < n; i++) {
		int64_t own = feed_mix_label_at(labels, t, i);
		int64_t partner = feed_mix_label_at(labels, t, i ? i - 1 : n - 1);
		for (uint32_t k = 0; k < C; k++)
			dst[i * C + k] = feed_mix_label(a, own, partner, k);
	}
	return 0;
}
