/*
 * pipeline_canon.c: a pipeline's canonical text (the form its hash is
 * taken of: every key shown, in the op table's order, defaults written
 * out) and each op's usage line for `feedd --list-ops`.
 *
 * Threads: pure functions on the caller's thread.
 * Never: allocate, depend on the locale.
 */
#include "pipeline_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void format_tuple(const int64_t *v, uint32_t n, char *out, size_t cap)
{
	size_t k = 0;
	char x[32];

	k += (size_t)snprintf(out, cap, "%s", n == 1 ? "" : "(");
	for (uint32_t i = 0; i < n && k < cap; i++) {
		pipe_format_ppb(v[i], x);
		k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? ", " : "", x);
	}
	if (n != 1 && k < cap)
		snprintf(out + k, cap - k, ")");
}

/* The decimal key k of a pixel op, or NULL when k is not one. */
static const int64_t *pixel_decimal(const struct pipe_op *op, enum pipe_key k)
{
	switch (k) {
	case PK_FACTOR: return &op->factor_ppb;
	case PK_ANGLE: return &op->angle_ppb;
	case PK_DEGREES: return &op->degrees_ppb;
	case PK_TRANSLATE_X: return &op->translate_ppb[0];
	case PK_TRANSLATE_Y: return &op->translate_ppb[1];
	case PK_TRANSLATE: return &op->translate_frac_ppb;
	case PK_SCALE: return &op->scale_f_ppb;
	case PK_SHEAR_X: return &op->shear_ppb[0];
	case PK_SHEAR_Y: return &op->shear_ppb[1];
	case PK_SHEAR: return &op->shear_r_ppb;
	case PK_SIGMA:
	case PK_SIGMA_MIN: return &op->sigma_ppb[0];
	case PK_SIGMA_MAX: return &op->sigma_ppb[1];
	case PK_BRIGHTNESS:
	case PK_CONTRAST:
	case PK_SATURATION:
	case PK_HUE: return &op->jitter_ppb[k - PK_BRIGHTNESS];
	default: return NULL;
	}
}

static void format_key_pixel(const struct pipe_op *op, enum pipe_key k, char out[160])
{
	const char *name = pipe_key_names[k];
	const int64_t *d = pixel_decimal(op, k);
	uint32_t u = 0;
	char p[32];

	if (d) {
		pipe_format_ppb(*d, p);
		snprintf(out, 160, "%s=%s", name, p);
		return;
	}
	if ((k == PK_SCALE_MIN || k == PK_SCALE_MAX) && op->kind == PIPE_RANDOM_AFFINE)
		d = &op->ascale_ppb[k - PK_SCALE_MIN];
	else if (k == PK_SCALE_MIN || k == PK_SCALE_MAX)
		d = &op->escale_ppb[k - PK_SCALE_MIN];
	else if (k == PK_RATIO_MIN || k == PK_RATIO_MAX)
		d = &op->eratio_ppb[k - PK_RATIO_MIN];
	if (d) {
		pipe_format_ppb(*d, p);
		snprintf(out, 160, "%s=%s", name, p);
		return;
	}
	if (k == PK_INTERPOLATION) {
		snprintf(out, 160, "%s=%s", name, pipe_interp_names[op->interp & 1]);
		return;
	}
	if (k == PK_POLICY) {
		snprintf(out, 160, "%s=%s", name, pipe_policy_names[op->policy % 3]);
		return;
	}
	if (k == PK_VALUE && op->value_random) {
		snprintf(out, 160, "value=random");
		return;
	}
	if (k == PK_VALUE && op->kind == PIPE_RANDOM_ERASING) {
		char t[128];
		format_tuple(op->evalue_ppb, op->nevalue, t, sizeof(t));
		snprintf(out, 160, "value=%s", t);
		return;
	}
	switch (k) {
	case PK_FILL: u = op->fill; break;
	case PK_BITS: u = op->bits; break;
	case PK_THRESHOLD: u = op->threshold; break;
	case PK_KERNEL_SIZE: u = op->ksize; break;
	case PK_NUM_OUTPUT_CHANNELS: u = op->out_c; break;
	case PK_I: u = op->ei; break;
	case PK_J: u = op->ej; break;
	case PK_VALUE: u = op->value; break;
	case PK_NUM_MAGNITUDE_BINS: u = op->nbins; break;
	case PK_NUM_OPS: u = op->num_ops; break;
	case PK_MAGNITUDE: u = op->magnitude; break;
	default: break;
	}
	snprintf(out, 160, "%s=%u", name, u);
}

/* The keys of op_set_tv() and random_choice's weights; false for others. */
static bool format_key_tv(const struct pipe_op *op, enum pipe_key k, char out[160])
{
	char p[32], q[128];
	size_t n = 0;

	switch (k) {
	case PK_PADDING:
		if (op->padding[0] == op->padding[1] && op->padding[1] == op->padding[2] &&
		    op->padding[2] == op->padding[3])
			snprintf(out, 160, "padding=%u", op->padding[0]);
		else
			snprintf(out, 160, "padding=(%u, %u, %u, %u)", op->padding[0], op->padding[1],
				 op->padding[2], op->padding[3]);
		return true;
	case PK_PADDING_MODE:
		snprintf(out, 160, "padding_mode=%s", pipe_pad_mode_names[op->padding_mode & 3]);
		return true;
	case PK_DISTORTION_SCALE:
		pipe_format_ppb(op->distortion_ppb, p);
		snprintf(out, 160, "distortion_scale=%s", p);
		return true;
	case PK_CLIP: snprintf(out, 160, "clip=%s", op->clip ? "true" : "false"); return true;
	case PK_EXACT: snprintf(out, 160, "exact=%s", op->exact ? "true" : "false"); return true;
	case PK_NUM_CLASSES: snprintf(out, 160, "num_classes=%u", op->num_classes); return true;
	case PK_SEVERITY: snprintf(out, 160, "severity=%u", op->severity); return true;
	case PK_MIXTURE_WIDTH: snprintf(out, 160, "mixture_width=%u", op->mix_width); return true;
	case PK_CHAIN_DEPTH: snprintf(out, 160, "chain_depth=%d", op->chain_depth); return true;
	case PK_ALPHA: pipe_format_ppb(op->alpha_ppb, p); snprintf(out, 160, "alpha=%s", p); return true;
	case PK_ALL_OPS:
		snprintf(out, 160, "all_ops=%s", op->all_ops ? "true" : "false");
		return true;
	case PK_MIXUP_ALPHA:
	case PK_CUTMIX_ALPHA:
	case PK_SWITCH_PROB:
	case PK_LABEL_SMOOTHING:
		pipe_format_ppb(k == PK_MIXUP_ALPHA    ? op->mixup_ppb
			   : k == PK_CUTMIX_ALPHA ? op->cutmix_ppb
			   : k == PK_SWITCH_PROB  ? (int64_t)op->switch_ppb
						  : (int64_t)op->smoothing_ppb,
			   p);
		snprintf(out, 160, "%s=%s", pipe_key_names[k], p);
		return true;
	case PK_ANTIALIAS:
		snprintf(out, 160, "antialias=%s", op->antialias == 1 ? "false" : "true");
		return true;
	case PK_P:
		if (op->kind != PIPE_RANDOM_CHOICE)
			return false;
		for (uint32_t i = 0; i < op->nwts && n < sizeof(q); i++) {
			pipe_format_ppb(op->wts_ppb[i], p);
			n += (size_t)snprintf(q + n, sizeof(q) - n, "%s%s", i ? ", " : "", p);
		}
		snprintf(out, 160, "p=(%s)", q);
		return true;
	default: return false;
	}
}

/* The keys of the newer torch / torchvision variants; false for others. */
static bool format_key_variant(const struct pipe_op *op, enum pipe_key k, char out[160])
{
	if (k == PK_LINSPACE)
		snprintf(out, 160, "linspace=%s", pipe_linspace_names[op->linspace & 1]);
	else if (k == PK_HUE_CAST)
		snprintf(out, 160, "hue_cast=%s", pipe_hue_cast_names[op->hue_cast & 1]);
	else
		return false;
	return true;
}

static void format_key(const struct pipe_op *op, enum pipe_key k, char out[160])
{
	char p[128];

	if (format_key_tv(op, k, out) || format_key_variant(op, k, out))
		return;
	switch (k) {
	case PK_SIZE: snprintf(out, 160, "size=%u", op->size); break;
	case PK_PAD: snprintf(out, 160, "pad=%u", op->pad); break;
	case PK_P: pipe_format_ppb(op->p_ppb, p); snprintf(out, 160, "p=%s", p); break;
	case PK_H: snprintf(out, 160, "h=%u", op->h); break;
	case PK_W: snprintf(out, 160, "w=%u", op->w); break;
	case PK_SHORT: snprintf(out, 160, "short=%u", op->short_side); break;
	case PK_LEN: snprintf(out, 160, "len=%u", op->len); break;
	case PK_CHANNELS: snprintf(out, 160, "channels=%u", op->channels); break;
	case PK_SCALE_MIN:
	case PK_SCALE_MAX:
		if (op->kind != PIPE_RANDOM_RESIZED_CROP) {
			format_key_pixel(op, k, out);
			break;
		}
		pipe_format_ppb(op->scale_ppb[k - PK_SCALE_MIN], p);
		snprintf(out, 160, "%s=%s", pipe_key_names[k], p);
		break;
	case PK_RATIO_MIN:
	case PK_RATIO_MAX:
		if (op->kind != PIPE_RANDOM_RESIZED_CROP) {
			format_key_pixel(op, k, out);
			break;
		}
		pipe_format_ppb((int64_t)op->ratio_ppb[k - PK_RATIO_MIN], p);
		snprintf(out, 160, "%s=%s", pipe_key_names[k], p);
		break;
	case PK_MEAN:
		format_tuple(op->mean_ppb, op->nmean, p, sizeof(p));
		snprintf(out, 160, "mean=%s", p);
		break;
	case PK_STD:
		format_tuple(op->std_ppb, op->nstd, p, sizeof(p));
		snprintf(out, 160, "std=%s", p);
		break;
	case PK_DTYPE:
		snprintf(out, 160, "dtype=%s", feed_dtype_name(op->dtype));
		break;
	case PK_LAYOUT: snprintf(out, 160, "layout=%s", pipe_layout_names[op->layout & 1]); break;
	case PK_FIELD: snprintf(out, 160, "field=%s", op->field); break;
	case PK_SEQ_LEN: snprintf(out, 160, "seq_len=%u", op->seq_len); break;
	case PK_PAD_ID: snprintf(out, 160, "pad_id=%u", op->pad_id); break;
	case PK_WINDOW: snprintf(out, 160, "window=%u", op->window); break;
	default: format_key_pixel(op, k, out); break;
	}
}

/* Whether key k of op appears in the canonical text: resize shows either
 * h and w or short; field only when the text named one. */
static bool key_shown(const struct pipe_op *op, enum pipe_key k)
{
	if (k == PK_FIELD)
		return op->field[0] != '\0';
	/* torchvision's forms that change nothing: what feedd does anyway */
	if (k == PK_ANTIALIAS || ((op->kind == PIPE_RESIZE || op->kind == PIPE_RANDOM_RESIZED_CROP) &&
				  k == PK_INTERPOLATION))
		return false;
	if ((op->kind == PIPE_ROTATE || op->kind == PIPE_AFFINE || op->kind == PIPE_AUG_MIX) &&
	    k == PK_FILL)
		return op->fill_set;
	if (k == PK_EXACT)
		return op->exact;
	/* the variants of newer torch / torchvision: only when chosen, so
	 * that the text (and hash) of a pipeline without them is unchanged */
	if (k == PK_LINSPACE)
		return op->linspace != 0;
	if (k == PK_HUE_CAST)
		return op->hue_cast != 0;
	if (op->kind == PIPE_RANDOM_CHOICE && k == PK_P)
		return op->nwts > 0;
	if (op->kind == PIPE_RESIZE)
		return k == PK_SHORT ? op->short_side != 0 : op->short_side == 0;
	if (op->kind == PIPE_GAUSSIAN_BLUR && (k == PK_SIGMA || k == PK_SIGMA_MIN ||
					       k == PK_SIGMA_MAX))
		return (k == PK_SIGMA) == op->sigma_fixed;
	return true;
}


static bool canon_put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static bool canon_put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= cap - *n)
		return false;
	*n += (size_t)w;
	return true;
}

/* Appends op's canonical text at buf + *n; returns false when out of room. */
static bool canon_op(const struct pipe_op *op, char *buf, size_t cap, size_t *n);

/* A container's transforms=[...]: the ops that follow it in the spec. */
static bool canon_transforms(const struct pipe_op *op, char *buf, size_t cap, size_t *n)
{
	bool ok = canon_put(buf, cap, n, "transforms=[");

	for (uint32_t k = 0; ok && k < op->nsub; k++)
		ok = (k == 0 || canon_put(buf, cap, n, ", ")) && canon_op(op + 1 + k, buf, cap, n);
	return ok && canon_put(buf, cap, n, "]");
}

static bool canon_op(const struct pipe_op *op, char *buf, size_t cap, size_t *n)
{
	const struct pipe_op_desc *d = &pipe_ops[op->kind];
	char kv[160];
	uint32_t shown = 0;
	bool ok = canon_put(buf, cap, n, "%s", d->name);

	for (uint32_t k = 0; ok && k <= d->nkeys; k++) {
		if (!key_shown(op, (enum pipe_key)d->keys[k]))
			continue;
		ok = canon_put(buf, cap, n, "%s", shown++ ? ", " : "(");
		if (ok && d->keys[k] == PK_TRANSFORMS) {
			ok = canon_transforms(op, buf, cap, n);
			continue;
		}
		format_key(op, (enum pipe_key)d->keys[k], kv);
		ok = ok && canon_put(buf, cap, n, "%s", kv);
	}
	return ok && (shown == 0 || canon_put(buf, cap, n, ")"));
}

int pipe_spec_canonical(const struct pipe_spec *spec, char *buf, size_t cap)
{
	size_t n = 0;

	if (cap == 0)
		return -ENOSPC;
	buf[0] = '\0';
	for (uint32_t i = 0; i < spec->nops; i++) {
		if (spec->ops[i].sub)
			continue; /* in its container's transforms */
		if ((i && !canon_put(buf, cap, &n, " | ")) || !canon_op(&spec->ops[i], buf, cap, &n))
			return -ENOSPC;
	}
	return (int)n;
}

int pipe_op_usage(uint32_t k, char *buf, size_t cap)
{
	struct pipe_op op = {.kind = (enum pipe_kind)k};
	char kv[160];
	size_t n = 0;

	if (k >= PIPE_NKINDS || cap == 0)
		return -EINVAL;
	pipe_op_defaults(&op);
	const struct pipe_op_desc *d = &pipe_ops[k];
	buf[0] = '\0';
	if (!canon_put(buf, cap, &n, "%s(", d->name))
		return -ENOSPC;
	for (uint32_t i = 0; i < d->nkeys; i++) {
		enum pipe_key key = (enum pipe_key)d->keys[i];
		if (d->required & PKB(key))
			snprintf(kv, sizeof(kv), "%s", pipe_key_names[key]);
		else if (k == PIPE_RESIZE || (k == PIPE_GAUSSIAN_BLUR && key == PK_SIGMA))
			snprintf(kv, sizeof(kv), "%s", pipe_key_names[key]);
		else if ((k == PIPE_NORMALIZE && (key == PK_MEAN || key == PK_STD)) ||
			 (k == PIPE_RANDOM_CHOICE && key == PK_P))
			snprintf(kv, sizeof(kv), "%s", pipe_key_names[key]);
		else
			format_key(&op, key, kv);
		if (!canon_put(buf, cap, &n, "%s, ", kv))
			return -ENOSPC;
	}
	if (!canon_put(buf, cap, &n, "field)"))
		return -ENOSPC;
	return (int)n;
}
