/*
 * pipeline_parse.c: parses the pipeline text form (see pipeline.h for the
 * language) into a struct pipe_spec, checking each op's keys and values
 * against the op table (pipeline_ops.c), with errors that name op and key.
 *
 * Threads: pure functions on the caller's thread.
 * Never: allocate, depend on the locale.
 */
#include "pipeline_priv.h"
#include "pipeline_tv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Scanner                                                             */

#define PIPE_TOK_MAX 64

struct pipe_scan {
	const char *s;             /* the text */
	size_t i;                  /* cursor */
	uint32_t opno;             /* 1-based op being parsed */
	const char *opname;        /* its name once known, else NULL */
	struct feed_err *err;
	struct pipe_spec *spec;    /* where a container's transforms go */
	uint32_t at;               /* index in spec of the op being parsed */
};

static void scan_ws(struct pipe_scan *sc)
{
	while (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' || sc->s[sc->i] == '\n' ||
	       sc->s[sc->i] == '\r')
		sc->i++;
}

/* Error about the current op: "pipeline op N 'name': ..." */
static int scan_fail(struct pipe_scan *sc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int scan_fail(struct pipe_scan *sc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	feed_err_vset(sc->err, -EINVAL, fmt, ap);
	va_end(ap);
	if (sc->opname)
		feed_err_prefix(sc->err, "pipeline op %u '%s'", sc->opno, sc->opname);
	else
		feed_err_prefix(sc->err, "pipeline op %u", sc->opno);
	return -EINVAL;
}

static bool is_ident_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* Characters a value may hold: numbers and field names. */
static bool is_value_char(char c)
{
	return is_ident_char(c, false) || c == '.' || c == '-' || c == '+';
}

/* Copies the run of characters at the cursor that are identifier
 * characters (ident) or value characters into out, truncated to fit;
 * returns the run's whole length. */
static size_t scan_run(struct pipe_scan *sc, char out[PIPE_TOK_MAX], bool ident)
{
	size_t n = 0;

	while (ident ? is_ident_char(sc->s[sc->i], n == 0) : is_value_char(sc->s[sc->i])) {
		if (n + 1 < PIPE_TOK_MAX)
			out[n] = sc->s[sc->i];
		n++;
		sc->i++;
	}
	out[n < PIPE_TOK_MAX ? n : PIPE_TOK_MAX - 1] = '\0';
	return n;
}

/* Reads an identifier into out; returns its length (0 if none). */
static size_t scan_ident(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	return scan_run(sc, out, true);
}

static size_t scan_value(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	return scan_run(sc, out, false);
}

/* What the scanner sees at the cursor, for messages. */
static const char *scan_seen(const struct pipe_scan *sc, char buf[8])
{
	char c = sc->s[sc->i];

	if (c == '\0')
		return "end of text";
	if (c >= 0x20 && c < 0x7f)
		snprintf(buf, 8, "'%c'", c);
	else
		snprintf(buf, 8, "0x%02x", (unsigned char)c);
	return buf;
}

/* ------------------------------------------------------------------ */
/* Values                                                              */

/* Decimal integer in [lo, hi]. */
static int parse_uint(struct pipe_scan *sc, const char *key, const char *v, uint32_t lo,
		      uint32_t hi, uint32_t *ret)
{
	uint64_t x = 0;

	if (!*v)
		return scan_fail(sc, "key '%s': bad number ''", key);
	for (const char *c = v; *c; c++) {
		if (*c < '0' || *c > '9')
			return scan_fail(sc, "key '%s': bad number '%s' (want a whole number)", key,
					 v);
		if (x <= UINT32_MAX)
			x = x * 10 + (uint64_t)(*c - '0');
	}
	if (x < lo || x > hi)
		return scan_fail(sc, "key '%s': %s out of range [%u, %u]", key, v, lo, hi);
	*ret = (uint32_t)x;
	return 0;
}


/* Signed decimal with at most 9 decimals in [lo, hi] (parts per 1e9), kept
 * exactly. */
static int parse_decimal(struct pipe_scan *sc, const char *key, const char *v, int64_t lo,
			 int64_t hi, int64_t *ret)
{
	uint64_t whole = 0, frac = 0;
	uint32_t nfrac = 0;
	const char *c = v;
	bool digits = false, neg = false;
	char blo[32], bhi[32];

	if (*c == '-' || *c == '+')
		neg = *c++ == '-';
	for (; *c >= '0' && *c <= '9'; c++, digits = true)
		whole = whole < 100000 ? whole * 10 + (uint64_t)(*c - '0') : 1000000;
	if (*c == '.')
		for (c++; *c >= '0' && *c <= '9'; c++, digits = true) {
			if (nfrac < 9)
				frac = frac * 10 + (uint64_t)(*c - '0');
			else if (*c != '0')
				return scan_fail(sc, "key '%s': bad number '%s' (at most 9 decimals)",
						 key, v);
			nfrac++;
		}
	if (*c || !digits)
		return scan_fail(sc, "key '%s': bad number '%s'", key, v);
	for (; nfrac < 9; nfrac++)
		frac *= 10;
	int64_t x = (int64_t)(whole * PIPE_P_ONE + frac);
	if (neg)
		x = -x;
	if (x < lo || x > hi) {
		pipe_format_ppb(lo, blo);
		pipe_format_ppb(hi, bhi);
		return scan_fail(sc, "key '%s': %s not in [%s, %s]", key, v, blo, bhi);
	}
	*ret = x;
	return 0;
}

/* Decimal probability in [0, 1] with at most 9 decimals, in parts per 1e9. */
static int parse_prob(struct pipe_scan *sc, const char *key, const char *v, uint32_t *ret)
{
	int64_t x;
	int rc = parse_decimal(sc, key, v, 0, PIPE_P_ONE, &x);

	if (rc == 0)
		*ret = (uint32_t)x;
	return rc;
}

/* One of the names in opts (NULL-terminated); *ret = its index. */
static int parse_name(struct pipe_scan *sc, const char *key, const char *v,
		      const char *const *opts, const char *list, uint32_t *ret)
{
	for (uint32_t k = 0; opts[k]; k++)
		if (!strcmp(opts[k], v)) {
			*ret = k;
			return 0;
		}
	return scan_fail(sc, "key '%s': '%s' is not one of %s", key, v, list);
}

static int parse_field_name(struct pipe_scan *sc, const char *v, char out[FMT_NAME_MAX])
{
	size_t len = strlen(v);

	if (len == 0 || len >= FMT_NAME_MAX)
		return scan_fail(sc, "key 'field': bad field name '%s'", v);
	for (size_t k = 0; k < len; k++)
		if (!is_ident_char(v[k], false) && v[k] != '.' && v[k] != '-')
			return scan_fail(sc, "key 'field': bad field name '%s'", v);
	memcpy(out, v, len + 1);
	return 0;
}

#define PIPE_ANGLE_MAX 3600u  /* largest |angle| and degrees */
#define PIPE_SHEAR_MAX 89u    /* largest |shear| (tan grows without bound) */
#define PIPE_FACTOR_MAX 100u  /* largest adjust_* factor and jitter */
#define PIPE_SIGMA_MAX 100u   /* largest gaussian_blur sigma */
#define PIPE_KSIZE_MAX 255u   /* largest gaussian_blur kernel_size */
#define PIPE_MIX_ALPHA_MAX 1000 /* largest mixup_alpha, cutmix_alpha */
#define PIPE_MIX_CLASSES_MAX (1u << 24) /* widest soft labels */

/* random_erasing's value number `item`: a decimal (normalised units after
 * normalize); op->value keeps it as a u8 level where it is one (the
 * planner refuses it before normalize otherwise). */
static int parse_erase_value(struct pipe_scan *sc, struct pipe_op *op, const char *v,
			     uint32_t item)
{
	const int64_t lim = (int64_t)PIPE_NORM_MAX * PIPE_P_ONE;
	int rc = parse_decimal(sc, "value", v, -lim, lim, &op->evalue_ppb[item]);

	if (rc < 0)
		return rc;
	op->nevalue = item + 1;
	int64_t x = op->evalue_ppb[item];
	if (item == 0)
		op->value = x >= 0 && x <= 255 * (int64_t)PIPE_P_ONE && x % PIPE_P_ONE == 0
				    ? (uint32_t)(x / PIPE_P_ONE) : UINT32_MAX;
	return 0;
}

/* value=: 0..255, or `random` where the op draws it (random_erasing). */
static int parse_fill_value(struct pipe_scan *sc, struct pipe_op *op, const char *v)
{
	if (!strcmp(v, "random")) {
		if (op->kind != PIPE_RANDOM_ERASING)
			return scan_fail(sc, "key 'value': 'random' is random_erasing's only");
		op->value_random = true;
		return 0;
	}
	op->value_random = false;
	if (op->kind == PIPE_RANDOM_ERASING)
		return parse_erase_value(sc, op, v, 0);
	return parse_uint(sc, "value", v, 0, 255, &op->value);
}

/* scale_min / scale_max: random_resized_crop's are in [0, 1] (u32 ppb);
 * random_affine's and random_erasing's their own fields. */
static int parse_scale_key(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
			   const char *v)
{
	const char *k = pipe_key_names[key];
	uint32_t at = key == PK_SCALE_MIN ? 0 : 1;
	int64_t x = 0;
	int rc;

	if (op->kind == PIPE_RANDOM_AFFINE)
		return parse_decimal(sc, k, v, 1, PIPE_FACTOR_MAX * (int64_t)PIPE_P_ONE,
				     &op->ascale_ppb[at]);
	if (op->kind == PIPE_RANDOM_ERASING)
		return parse_decimal(sc, k, v, 0, PIPE_P_ONE, &op->escale_ppb[at]);
	rc = parse_decimal(sc, k, v, key == PK_SCALE_MIN ? 0 : 1, PIPE_P_ONE, &x);
	op->scale_ppb[at] = (uint32_t)x;
	return rc;
}

/* interpolation: nearest or bilinear, as torchvision names them too
 * (NEAREST, InterpolationMode.BILINEAR); resize and random_resized_crop
 * resample bilinear only. */
static int parse_interp(struct pipe_scan *sc, struct pipe_op *op, const char *v)
{
	char low[PIPE_TOK_MAX];
	size_t n = 0;
	uint32_t u = 0;

	if (!strncmp(v, "InterpolationMode.", 18))
		v += 18;
	for (; v[n] && n + 1 < sizeof(low); n++)
		low[n] = (char)(v[n] >= 'A' && v[n] <= 'Z' ? v[n] - 'A' + 'a' : v[n]);
	low[n] = '\0';
	int rc = parse_name(sc, "interpolation", low, pipe_interp_names, "nearest, bilinear", &u);
	if (rc == 0 && u != PIPE_INTERP_BILINEAR &&
	    (op->kind == PIPE_RESIZE || op->kind == PIPE_RANDOM_RESIZED_CROP))
		return scan_fail(sc, "key 'interpolation': '%s': %s resamples bilinear only", v,
				 pipe_kind_name(op->kind));
	op->interp = u;
	return rc;
}

/* rotate / affine / random_rotation / random_affine keys; 1 when key is
 * not one of them. */
static int op_set_geom(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
		       const char *v)
{
	const char *k = pipe_key_names[key];
	const int64_t one = PIPE_P_ONE, fmax = PIPE_FACTOR_MAX * one;
	const int64_t amax = PIPE_ANGLE_MAX * one, smax = PIPE_SHEAR_MAX * one;

	switch (key) {
	case PK_ANGLE: return parse_decimal(sc, k, v, -amax, amax, &op->angle_ppb);
	case PK_DEGREES: return parse_decimal(sc, k, v, 0, amax, &op->degrees_ppb);
	case PK_INTERPOLATION: return parse_interp(sc, op, v);
	case PK_FILL:
		op->fill_set = true;
		return parse_uint(sc, k, v, 0, 255, &op->fill);
	case PK_TRANSLATE_X:
	case PK_TRANSLATE_Y:
		return parse_decimal(sc, k, v, -(int64_t)PIPE_DIM_MAX * one,
				     (int64_t)PIPE_DIM_MAX * one, &op->translate_ppb[key - PK_TRANSLATE_X]);
	case PK_TRANSLATE: return parse_decimal(sc, k, v, 0, one, &op->translate_frac_ppb);
	case PK_SCALE: return parse_decimal(sc, k, v, 1, fmax, &op->scale_f_ppb);
	case PK_SHEAR_X:
	case PK_SHEAR_Y:
		return parse_decimal(sc, k, v, -smax, smax, &op->shear_ppb[key - PK_SHEAR_X]);
	case PK_SHEAR: return parse_decimal(sc, k, v, 0, smax, &op->shear_r_ppb);
	default: return 1;
	}
}

static int parse_bool(struct pipe_scan *sc, const char *key, const char *v, bool *ret)
{
	uint32_t u = 0;
	int rc = parse_name(sc, key, v, pipe_bool_names, "true, false", &u);

	*ret = u & 1;
	return rc;
}

/* The keys of torchvision's forms and of augment_tv.c's ops. */
static int op_set_tv(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key, const char *v)
{
	const char *k = pipe_key_names[key];
	uint32_t u = 0;
	bool b = false;
	int rc;

	switch (key) {
	case PK_ANTIALIAS:
		rc = parse_bool(sc, k, v, &b);
		op->antialias = b ? 2 : 1;
		return rc;
	case PK_PADDING_MODE:
		rc = parse_name(sc, k, v, pipe_pad_mode_names, "constant, edge, reflect, symmetric",
				&u);
		op->padding_mode = u;
		return rc;
	case PK_DISTORTION_SCALE:
		return parse_decimal(sc, k, v, 0, PIPE_P_ONE, &op->distortion_ppb);
	case PK_CLIP:
		return parse_bool(sc, k, v, &op->clip);
	case PK_EXACT:
		return parse_bool(sc, k, v, &op->exact);
	case PK_PADDING:
		rc = parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &u);
		op->padding[0] = op->padding[1] = op->padding[2] = op->padding[3] = u;
		return rc;
	case PK_LINSPACE:
		return parse_name(sc, k, v, pipe_linspace_names, "plain, fused", &op->linspace);
	case PK_HUE_CAST:
		return parse_name(sc, k, v, pipe_hue_cast_names, "mul255, scaled", &op->hue_cast);
	default:
		return scan_fail(sc, "key '%s': not handled", k);
	}
}

/* The pixel ops' keys (see pipeline.h). */
static int op_set_pixel(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
			const char *v)
{
	const char *k = pipe_key_names[key];
	const int64_t one = PIPE_P_ONE, fmax = PIPE_FACTOR_MAX * one;
	uint32_t u = 0;
	int rc = op_set_geom(sc, op, key, v);

	if (rc <= 0)
		return rc;
	switch (key) {
	case PK_FACTOR:
		if (op->kind == PIPE_ADJUST_HUE)
			return parse_decimal(sc, k, v, -one / 2, one / 2, &op->factor_ppb);
		return parse_decimal(sc, k, v, 0, fmax, &op->factor_ppb);
	case PK_BITS: return parse_uint(sc, k, v, 0, 8, &op->bits);
	case PK_THRESHOLD: return parse_uint(sc, k, v, 0, 255, &op->threshold);
	case PK_KERNEL_SIZE:
		rc = parse_uint(sc, k, v, 1, PIPE_KSIZE_MAX, &op->ksize);
		if (rc == 0 && !(op->ksize & 1))
			return scan_fail(sc, "key 'kernel_size': %u is not odd", op->ksize);
		return rc;
	case PK_SIGMA:
		op->sigma_fixed = true;
		rc = parse_decimal(sc, k, v, op->kind == PIPE_GAUSSIAN_NOISE ? 0 : 1,
				   PIPE_SIGMA_MAX * one, &op->sigma_ppb[0]);
		op->sigma_ppb[1] = op->sigma_ppb[0];
		return rc;
	case PK_SIGMA_MIN:
	case PK_SIGMA_MAX:
		return parse_decimal(sc, k, v, 1, PIPE_SIGMA_MAX * one,
				     &op->sigma_ppb[key - PK_SIGMA_MIN]);
	case PK_NUM_OUTPUT_CHANNELS:
		rc = parse_uint(sc, k, v, 1, 3, &op->out_c);
		if (rc == 0 && op->out_c == 2)
			return scan_fail(sc, "key 'num_output_channels': 2 is not 1 or 3");
		return rc;
	case PK_I: return parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &op->ei);
	case PK_J: return parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &op->ej);
	case PK_VALUE: return parse_fill_value(sc, op, v);
	case PK_BRIGHTNESS:
	case PK_CONTRAST:
	case PK_SATURATION:
		return parse_decimal(sc, k, v, 0, fmax, &op->jitter_ppb[key - PK_BRIGHTNESS]);
	case PK_HUE: return parse_decimal(sc, k, v, 0, one / 2, &op->jitter_ppb[3]);
	case PK_NUM_MAGNITUDE_BINS: return parse_uint(sc, k, v, 2, 1000, &op->nbins);
	case PK_NUM_OPS: return parse_uint(sc, k, v, 0, 16, &op->num_ops);
	case PK_MAGNITUDE: return parse_uint(sc, k, v, 0, 999, &op->magnitude);
	case PK_POLICY:
		rc = parse_name(sc, k, v, pipe_policy_names, "imagenet, cifar10, svhn", &u);
		op->policy = u;
		return rc;
	default:
		return op_set_tv(sc, op, key, v);
	}
}

/* concat's and pack's keys. */
static int op_set_pack(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
		       const char *v)
{
	const char *k = pipe_key_names[key];

	if (key == PK_SEQ_LEN)
		return parse_uint(sc, k, v, 1, PK_SEQ_LEN_MAX, &op->seq_len);
	if (key == PK_PAD_ID)
		return parse_uint(sc, k, v, 0, UINT32_MAX, &op->pad_id);
	return parse_uint(sc, k, v, 1, PK_WINDOW_MAX, &op->window);
}

/* mix's keys: alphas >= 0 (0 turns the op off), probabilities, a width. */
static int op_set_mix(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
		      const char *v)
{
	const char *k = pipe_key_names[key];
	int64_t x = 0;
	int rc;

	switch (key) {
	case PK_MIXUP_ALPHA:
		return parse_decimal(sc, k, v, 0, PIPE_MIX_ALPHA_MAX * (int64_t)PIPE_P_ONE,
				     &op->mixup_ppb);
	case PK_CUTMIX_ALPHA:
		return parse_decimal(sc, k, v, 0, PIPE_MIX_ALPHA_MAX * (int64_t)PIPE_P_ONE,
				     &op->cutmix_ppb);
	case PK_SWITCH_PROB:
		return parse_prob(sc, k, v, &op->switch_ppb);
	case PK_NUM_CLASSES:
		return parse_uint(sc, k, v, 1, PIPE_MIX_CLASSES_MAX, &op->num_classes);
	default:
		rc = parse_decimal(sc, k, v, 0, PIPE_P_ONE - 1, &x);
		op->smoothing_ppb = (uint32_t)x;
		return rc;
	}
}

/* aug_mix's own keys (interpolation and fill are the pixel ops'). */
static int op_set_augmix(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
			 const char *v)
{
	const char *k = pipe_key_names[key];
	const int64_t one = PIPE_P_ONE;
	int64_t x = 0;
	int rc;

	switch (key) {
	case PK_SEVERITY: return parse_uint(sc, k, v, 1, 10, &op->severity);
	case PK_MIXTURE_WIDTH: return parse_uint(sc, k, v, 1, PIPE_AUGMIX_WIDTH_MAX, &op->mix_width);
	case PK_CHAIN_DEPTH:
		rc = parse_decimal(sc, k, v, -one, PIPE_AUGMIX_DEPTH_MAX * one, &x);
		if (rc == 0 && (x % one || x == 0))
			return scan_fail(sc, "key 'chain_depth': -1 (1 to 3 drawn) or a whole "
					 "number 1..%d", PIPE_AUGMIX_DEPTH_MAX);
		op->chain_depth = (int32_t)(x / one);
		return rc;
	case PK_ALPHA: return parse_decimal(sc, k, v, 1, PIPE_MIX_ALPHA_MAX * one, &op->alpha_ppb);
	default: return parse_bool(sc, k, v, &op->all_ops);
	}
}

/* Stores value v of key into op (item `item` of a tuple for mean/std). */
/* The sizes of crops, resizes and windows, and decode's channels. */
static int op_set_size(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
		       const char *v)
{
	const char *k = pipe_key_names[key];
	int rc;

	switch (key) {
	case PK_SIZE:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->size);
	case PK_PAD:
		return parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &op->pad);
	case PK_H:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->h);
	case PK_W:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->w);
	case PK_SHORT:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->short_side);
	case PK_LEN:
		return parse_uint(sc, k, v, 1, PIPE_LEN_MAX, &op->len);
	default: /* PK_CHANNELS */
		rc = parse_uint(sc, k, v, 1, 3, &op->channels);
		if (rc == 0 && op->channels == 2)
			return scan_fail(sc, "key 'channels': 2 is not 1 (gray) or 3 (RGB)");
		return rc;
	}
}

/* random_resized_crop's ratio, and normalize's keys (item: a tuple's). */
static int op_set_norm(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key,
		       const char *v, uint32_t item)
{
	const char *k = pipe_key_names[key];
	const int64_t one = PIPE_P_ONE;
	uint32_t u = 0;
	int64_t x = 0;
	int rc;

	switch (key) {
	case PK_RATIO_MIN:
	case PK_RATIO_MAX:
		rc = parse_decimal(sc, k, v, 1, PIPE_RATIO_MAX * one, &x);
		op->ratio_ppb[key - PK_RATIO_MIN] = (uint64_t)x;
		op->eratio_ppb[key - PK_RATIO_MIN] = x;
		return rc;
	case PK_MEAN:
		return parse_decimal(sc, k, v, -(int64_t)PIPE_NORM_MAX * one,
				     PIPE_NORM_MAX * one, &op->mean_ppb[item]);
	case PK_STD:
		return parse_decimal(sc, k, v, 1, PIPE_NORM_MAX * one, &op->std_ppb[item]);
	case PK_DTYPE:
		rc = parse_name(sc, k, v, pipe_dtype_names, "f32, f16, bf16", &u);
		op->dtype = pipe_dtypes[u];
		return rc;
	default: /* PK_LAYOUT */
		rc = parse_name(sc, k, v, pipe_layout_names, "chw, hwc", &u);
		op->layout = u;
		return rc;
	}
}

static int op_set(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key, const char *v,
		  uint32_t item)
{
	switch (key) {
	case PK_SIZE:
	case PK_PAD:
	case PK_H:
	case PK_W:
	case PK_SHORT:
	case PK_LEN:
	case PK_CHANNELS:
		return op_set_size(sc, op, key, v);
	case PK_P:
		return parse_prob(sc, pipe_key_names[key], v, &op->p_ppb);
	case PK_SCALE_MIN:
	case PK_SCALE_MAX:
		return parse_scale_key(sc, op, key, v);
	case PK_RATIO_MIN:
	case PK_RATIO_MAX:
	case PK_MEAN:
	case PK_STD:
	case PK_DTYPE:
	case PK_LAYOUT:
		return op_set_norm(sc, op, key, v, item);
	case PK_FIELD:
		return parse_field_name(sc, v, op->field);
	case PK_SEQ_LEN:
	case PK_PAD_ID:
	case PK_WINDOW:
		return op_set_pack(sc, op, key, v);
	case PK_MIXUP_ALPHA:
	case PK_CUTMIX_ALPHA:
	case PK_SWITCH_PROB:
	case PK_NUM_CLASSES:
	case PK_LABEL_SMOOTHING:
		return op_set_mix(sc, op, key, v);
	case PK_SEVERITY:
	case PK_MIXTURE_WIDTH:
	case PK_CHAIN_DEPTH:
	case PK_ALPHA:
	case PK_ALL_OPS:
		return op_set_augmix(sc, op, key, v);
	default:
		return op_set_pixel(sc, op, key, v);
	}
}

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static int find_key(const struct pipe_op_desc *d, const char *name)
{
	for (uint32_t k = 0; k <= d->nkeys; k++)
		if (!strcmp(pipe_key_names[d->keys[k]], name))
			return (int)d->keys[k];
	return -1;
}

static void allowed_keys(const struct pipe_op_desc *d, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t k = 0; k <= d->nkeys && n < cap; k++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? ", " : "",
				      pipe_key_names[d->keys[k]]);
}

/* One value of key (item of a tuple) at the cursor. */
static int parse_value(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key k, uint32_t item)
{
	char val[PIPE_TOK_MAX];
	const char *key = pipe_key_names[k];
	size_t n = scan_value(sc, val);

	if (n == 0)
		return scan_fail(sc, "key '%s': missing value at column %zu", key, sc->i + 1);
	if (n >= PIPE_TOK_MAX)
		return scan_fail(sc, "key '%s': value longer than %d characters", key,
				 PIPE_TOK_MAX - 1);
	return op_set(sc, op, k, val, item);
}

/* mean / std: one number, or `(a, b, ...)` of 1..PIPE_MAX_C numbers (a
 * trailing comma allowed, as in Python). */
static int parse_tuple(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key k)
{
	uint32_t *n = k == PK_MEAN ? &op->nmean : &op->nstd;
	const char *key = pipe_key_names[k];
	char c[8];

	if (sc->s[sc->i] != '(') {
		*n = 1;
		return parse_value(sc, op, k, 0);
	}
	sc->i++;
	for (*n = 0;;) {
		scan_ws(sc);
		if (sc->s[sc->i] == ')' && *n > 0)
			break;
		if (*n == PIPE_MAX_C)
			return scan_fail(sc, "key '%s': more than %d values", key, PIPE_MAX_C);
		int rc = parse_value(sc, op, k, *n);
		if (rc < 0)
			return rc;
		(*n)++;
		scan_ws(sc);
		if (sc->s[sc->i] == ')')
			break;
		if (sc->s[sc->i] != ',')
			return scan_fail(sc, "key '%s': expected ',' or ')' at column %zu, found %s",
					 key, sc->i + 1, scan_seen(sc, c));
		sc->i++;
	}
	sc->i++;
	return 0;
}

/* Sets key k (one of op's keys) from value v, once: the duplicate check
 * of every path (keyed, positional, a tuple spread over a key pair). */
static int set_key(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		   enum pipe_key k, const char *v, pk_mask *seen)
{
	if (find_key(d, pipe_key_names[k]) < 0)
		return scan_fail(sc, "key '%s': not taken here", pipe_key_names[k]);
	if (*seen & PKB(k))
		return scan_fail(sc, "key '%s' given twice", pipe_key_names[k]);
	*seen |= PKB(k);
	return op_set(sc, op, k, v, 0);
}

#define PIPE_TUPLE_MAX 8 /* most items of a tuple value */

/* `(a, b, ...)` or `[a, b, ...]` of plain values; the cursor is on the
 * opening bracket and ends after the closing one. */
static int scan_tuple(struct pipe_scan *sc, const char *key, char vals[][PIPE_TOK_MAX],
		      uint32_t *ret_n)
{
	char close = sc->s[sc->i] == '(' ? ')' : ']', c[8];
	uint32_t n = 0;

	for (sc->i++;;) {
		scan_ws(sc);
		if (sc->s[sc->i] == close && n > 0)
			break;
		if (n == PIPE_TUPLE_MAX)
			return scan_fail(sc, "key '%s': more than %d values", key, PIPE_TUPLE_MAX);
		size_t len = scan_value(sc, vals[n]);
		if (len == 0 || len >= PIPE_TOK_MAX)
			return scan_fail(sc, "key '%s': bad value at column %zu", key, sc->i + 1);
		n++;
		scan_ws(sc);
		if (sc->s[sc->i] == close)
			break;
		if (sc->s[sc->i] != ',')
			return scan_fail(sc, "key '%s': expected ',' or '%c' at column %zu, found %s",
					 key, close, sc->i + 1, scan_seen(sc, c));
		sc->i++;
	}
	sc->i++;
	*ret_n = n;
	return 0;
}

/* A tuple whose items must all be equal (feedd keeps one value). */
static int tuple_same(struct pipe_scan *sc, const char *key, char vals[][PIPE_TOK_MAX],
		      uint32_t n, const char *why)
{
	for (uint32_t k = 1; k < n; k++)
		if (strcmp(vals[k], vals[0]))
			return scan_fail(sc, "key '%s': values differ ('%s', '%s'): %s", key, vals[0],
					 vals[k], why);
	return 0;
}

/* `(-a, a)`: a range symmetric about 0, kept as a. */
static int tuple_symmetric(struct pipe_scan *sc, const char *key, char vals[][PIPE_TOK_MAX],
			   uint32_t n)
{
	if (n != 2 || vals[0][0] != '-' || strcmp(vals[0] + 1, vals[1]))
		return scan_fail(sc, "key '%s': give (-a, a) or a (feedd draws symmetric ranges)",
				 key);
	return 0;
}

static int set_pair(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		    enum pipe_key lo, char vals[][PIPE_TOK_MAX], uint32_t n, pk_mask *seen)
{
	const char *key = pipe_key_names[lo];

	if (n != 2)
		return scan_fail(sc, "key '%.*s': give (min, max)", (int)strlen(key) - 4, key);
	int rc = set_key(sc, d, op, lo, vals[0], seen);
	return rc < 0 ? rc : set_key(sc, d, op, (enum pipe_key)(lo + 1), vals[1], seen);
}

/* pad's padding: 1, 2 (left/right, top/bottom) or 4 (left, top, right,
 * bottom) values, as torchvision's Pad. */
static int set_padding(struct pipe_scan *sc, struct pipe_op *op, char vals[][PIPE_TOK_MAX],
		       uint32_t n, pk_mask *seen)
{
	static const uint32_t from[3][4] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 1, 2, 3}};

	if (n != 1 && n != 2 && n != 4)
		return scan_fail(sc, "key 'padding': %u values (give 1, 2 or 4)", n);
	if (*seen & PKB(PK_PADDING))
		return scan_fail(sc, "key 'padding' given twice");
	*seen |= PKB(PK_PADDING);
	for (uint32_t k = 0; k < 4; k++) {
		int rc = parse_uint(sc, "padding", vals[from[n / 2][k]], 0, PIPE_DIM_MAX,
				    &op->padding[k]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* random_choice's p: one probability per transform. */
static int set_weights(struct pipe_scan *sc, struct pipe_op *op, char vals[][PIPE_TOK_MAX],
		       uint32_t n, pk_mask *seen)
{
	if (*seen & PKB(PK_P))
		return scan_fail(sc, "key 'p' given twice");
	*seen |= PKB(PK_P);
	for (uint32_t k = 0; k < n; k++) {
		int rc = parse_prob(sc, "p", vals[k], &op->wts_ppb[k]);
		if (rc < 0)
			return rc;
	}
	op->nwts = n;
	return 0;
}

/* random_erasing's value=(a, b, c): one per channel. */
static int set_erase_values(struct pipe_scan *sc, struct pipe_op *op, char vals[][PIPE_TOK_MAX],
			    uint32_t n, pk_mask *seen)
{
	if (*seen & PKB(PK_VALUE))
		return scan_fail(sc, "key 'value' given twice");
	*seen |= PKB(PK_VALUE);
	if (n > PIPE_MAX_C)
		return scan_fail(sc, "key 'value': more than %d values", PIPE_MAX_C);
	op->value_random = false;
	for (uint32_t k = 0; k < n; k++) {
		int rc = parse_erase_value(sc, op, vals[k], k);
		if (rc < 0)
			return rc;
		if (op->evalue_ppb[k] != op->evalue_ppb[0])
			op->value = UINT32_MAX; /* no one u8 level */
	}
	bool same = true;
	for (uint32_t k = 1; k < n; k++)
		same = same && op->evalue_ppb[k] == op->evalue_ppb[0];
	op->nevalue = same ? 1 : n; /* (v, v, v) is v, as torchvision fills */
	return 0;
}

/* A tuple value of key `name`, in torchvision's forms: size=(h, w),
 * scale=(a, b), ratio=(a, b), sigma=(a, b), degrees=(-a, a), ... */
static int parse_tuple_arg(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
			   const char *name, pk_mask *seen)
{
	char vals[PIPE_TUPLE_MAX][PIPE_TOK_MAX];
	uint32_t n = 0;
	int rc = scan_tuple(sc, name, vals, &n);

	if (rc < 0)
		return rc;
	if (!strcmp(name, "size") && op->kind == PIPE_RESIZE) {
		if (n != 2)
			return scan_fail(sc, "key 'size': give (h, w) or one number");
		rc = set_key(sc, d, op, PK_H, vals[0], seen);
		return rc < 0 ? rc : set_key(sc, d, op, PK_W, vals[1], seen);
	}
	if (!strcmp(name, "scale") || !strcmp(name, "ratio") || !strcmp(name, "sigma"))
		return set_pair(sc, d, op, name[0] == 'r' ? PK_RATIO_MIN
					   : name[1] == 'c' ? PK_SCALE_MIN : PK_SIGMA_MIN,
				vals, n, seen);
	if (!strcmp(name, "padding") && op->kind == PIPE_PAD)
		return set_padding(sc, op, vals, n, seen);
	if (!strcmp(name, "p") && op->kind == PIPE_RANDOM_CHOICE)
		return set_weights(sc, op, vals, n, seen);
	if (!strcmp(name, "value") && op->kind == PIPE_RANDOM_ERASING)
		return set_erase_values(sc, op, vals, n, seen);
	int k = find_key(d, name);
	if (k < 0)
		return scan_fail(sc, "unknown key '%s'", name);
	if (k == PK_DEGREES || k == PK_SHEAR)
		rc = tuple_symmetric(sc, name, vals, n);
	else if (k == PK_SIZE || k == PK_KERNEL_SIZE)
		rc = tuple_same(sc, name, vals, n, "feedd's crops and kernels are square");
	else if (k == PK_FILL || k == PK_VALUE || k == PK_TRANSLATE)
		rc = tuple_same(sc, name, vals, n, "one value serves every channel and axis");
	else
		return scan_fail(sc, "key '%s': takes one value, not a tuple", name);
	return rc < 0 ? rc : set_key(sc, d, op, (enum pipe_key)k, vals[n - 1], seen);
}

static int parse_op(struct pipe_scan *sc, struct pipe_op *op);

/* Basic ops a transform of a container expands to, at most. */
static uint32_t sub_expansion(const struct pipe_op *op)
{
	switch (op->kind) {
	case PIPE_RAND_AUGMENT: return op->num_ops;
	case PIPE_COLOR_JITTER: return 4;
	case PIPE_AUTO_AUGMENT: return 2;
	default: return 1;
	}
}

/* A container's transforms must keep the image's shape: pixel ops other
 * than pad, grayscale to one channel and containers. */
static int check_sub(struct pipe_scan *sc, const struct pipe_op *ch, uint32_t *budget)
{
	enum pipe_kind k = ch->kind;

	if (k < PIPE_ADJUST_BRIGHTNESS || k == PIPE_PAD || k >= PIPE_RANDOM_APPLY ||
	    (k == PIPE_RGB_TO_GRAYSCALE && ch->out_c == 1))
		return scan_fail(sc, "key 'transforms': %s cannot be one (transforms are pixel "
				 "ops that keep the shape, not containers)", pipe_kind_name(k));
	if (ch->field[0])
		return scan_fail(sc, "key 'transforms': %s: field= goes on the container",
				 pipe_kind_name(k));
	if (sub_expansion(ch) > *budget)
		return scan_fail(sc, "key 'transforms': more than %d basic ops", PIPE_SUB_BASIC_MAX);
	*budget -= sub_expansion(ch);
	return 0;
}

/* transforms=[op, op, ...] of random_apply / choice / order: parsed into
 * the spec right after the container (op sc->at). */
static int parse_transforms(struct pipe_scan *sc, struct pipe_op *op, pk_mask *seen)
{
	uint32_t at = sc->at, opno = sc->opno, budget = PIPE_SUB_BASIC_MAX;
	const char *opname = sc->opname;
	char c[8];

	if (at == UINT32_MAX)
		return scan_fail(sc, "key 'transforms': containers do not nest");
	if (*seen & PKB(PK_TRANSFORMS))
		return scan_fail(sc, "key 'transforms' given twice");
	*seen |= PKB(PK_TRANSFORMS);
	if (sc->s[sc->i] != '[')
		return scan_fail(sc, "key 'transforms': expected '[' at column %zu, found %s",
				 sc->i + 1, scan_seen(sc, c));
	for (sc->i++;;) {
		scan_ws(sc);
		if (op->nsub == PIPE_MAX_SUB || at + 1 + op->nsub >= PIPE_MAX_OPS)
			return scan_fail(sc, "key 'transforms': more than %d transforms or %d ops in "
					 "all", PIPE_MAX_SUB, PIPE_MAX_OPS);
		struct pipe_op *ch = &sc->spec->ops[at + 1 + op->nsub];
		sc->opno = at + 2 + op->nsub;
		sc->at = UINT32_MAX;
		int rc = parse_op(sc, ch);
		if (rc == 0)
			rc = check_sub(sc, ch, &budget);
		sc->opno = opno;
		sc->opname = opname;
		sc->at = at;
		if (rc < 0)
			return rc;
		ch->sub = true;
		op->nsub++;
		scan_ws(sc);
		if (sc->s[sc->i] == ']')
			break;
		if (sc->s[sc->i] != ',')
			return scan_fail(sc, "key 'transforms': expected ',' or ']' at column %zu, "
					 "found %s", sc->i + 1, scan_seen(sc, c));
		sc->i++;
	}
	sc->i++;
	return 0;
}

/* The key a first argument without `key=` stands for: torchvision's first
 * parameter (Resize(256), Pad(4), RandomApply([...])). */
static const char *positional_key(const struct pipe_op_desc *d, enum pipe_kind kind)
{
	if (kind == PIPE_RESIZE)
		return "size";
	return pipe_key_names[d->keys[0]];
}

/* Whether the argument at the cursor is `ident ...` other than a value
 * alone (an identifier followed by ',' or ')', as `bilinear`): `key=value`,
 * or a key missing its '=' (refused by the keyed path). */
static bool arg_is_keyed(struct pipe_scan *sc)
{
	char key[PIPE_TOK_MAX];
	size_t at = sc->i;
	bool keyed = scan_ident(sc, key) > 0;

	scan_ws(sc);
	keyed = keyed && sc->s[sc->i] != ',' && sc->s[sc->i] != ')';
	sc->i = at;
	return keyed;
}

/* The value of key `name` at the cursor. */
static int parse_keyed_value(struct pipe_scan *sc, const struct pipe_op_desc *d,
			     struct pipe_op *op, const char *name, pk_mask *seen)
{
	char v[PIPE_TOK_MAX];

	if (!strcmp(name, "transforms") && d->keys[0] == PK_TRANSFORMS)
		return parse_transforms(sc, op, seen);
	bool tuple = sc->s[sc->i] == '(' || sc->s[sc->i] == '[';
	if (tuple && strcmp(name, "mean") && strcmp(name, "std"))
		return parse_tuple_arg(sc, d, op, name, seen);
	if (!strcmp(name, "size") && op->kind == PIPE_RESIZE) {
		size_t n = scan_value(sc, v);
		if (n == 0 || n >= PIPE_TOK_MAX)
			return scan_fail(sc, "key 'size': missing value at column %zu", sc->i + 1);
		return set_key(sc, d, op, PK_SHORT, v, seen);
	}
	int k = find_key(d, name);
	if (k < 0) {
		char allowed[192];
		allowed_keys(d, allowed, sizeof(allowed));
		return scan_fail(sc, "unknown key '%s' (takes: %s)", name, allowed);
	}
	if (*seen & PKB(k))
		return scan_fail(sc, "key '%s' given twice", name);
	*seen |= PKB(k);
	if (k == PK_MEAN || k == PK_STD)
		return parse_tuple(sc, op, (enum pipe_key)k);
	return parse_value(sc, op, (enum pipe_key)k, 0);
}

/* One `key = value` inside the parentheses, or a value alone for the
 * op's next key in order (*pos of them so far; positional arguments come
 * first, as in Python); *seen tracks duplicates. */
static int parse_arg(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		     pk_mask *seen, uint32_t *pos)
{
	char key[PIPE_TOK_MAX], c[8];

	scan_ws(sc);
	if (*pos != UINT32_MAX && !arg_is_keyed(sc)) {
		uint32_t at = (*pos)++;
		if (at >= d->nkeys || (at > 0 && op->kind == PIPE_RESIZE))
			return scan_fail(sc, "argument %u at column %zu needs a key (key=value)",
					 at + 1, sc->i + 1);
		return parse_keyed_value(sc, d, op,
					 at ? pipe_key_names[d->keys[at]] : positional_key(d, op->kind),
					 seen);
	}
	*pos = UINT32_MAX;
	if (!scan_ident(sc, key))
		return scan_fail(sc, "expected a key at column %zu, found %s", sc->i + 1,
				 scan_seen(sc, c));
	scan_ws(sc);
	if (sc->s[sc->i] != '=')
		return scan_fail(sc, "key '%s': expected '=' at column %zu, found %s", key,
				 sc->i + 1, scan_seen(sc, c));
	sc->i++;
	scan_ws(sc);
	return parse_keyed_value(sc, d, op, key, seen);
}

/* `( key=value, ... )` after the op name; the cursor is on '('. */
static int parse_args(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		      pk_mask *seen)
{
	char c[8];
	uint32_t pos = 0;

	sc->i++;
	scan_ws(sc);
	if (sc->s[sc->i] == ')') {
		sc->i++;
		return 0;
	}
	for (;;) {
		int rc = parse_arg(sc, d, op, seen, &pos);
		if (rc < 0)
			return rc;
		scan_ws(sc);
		if (sc->s[sc->i] == ')') {
			sc->i++;
			return 0;
		}
		if (sc->s[sc->i] != ',')
			return scan_fail(sc, "expected ',' or ')' at column %zu, found %s",
					 sc->i + 1, scan_seen(sc, c));
		sc->i++;
	}
}
/* min above max of a pair of keys: the message names the first. */
static int check_order(struct pipe_scan *sc, const char *key, const char *other, int64_t lo,
		       int64_t hi)
{
	char a[32], b[32];

	if (lo <= hi)
		return 0;
	pipe_format_ppb(lo, a);
	pipe_format_ppb(hi, b);
	return scan_fail(sc, "key '%s': %s above %s %s", key, a, other, b);
}

static int op_check_pixel(struct pipe_scan *sc, const struct pipe_op *op, pk_mask seen)
{
	bool range = seen & (PKB(PK_SIGMA_MIN) | PKB(PK_SIGMA_MAX));

	switch (op->kind) {
	case PIPE_GAUSSIAN_BLUR:
		if (op->sigma_fixed && range)
			return scan_fail(sc, "key 'sigma': give either sigma or sigma_min and "
					 "sigma_max");
		return check_order(sc, "sigma_min", "sigma_max", op->sigma_ppb[0], op->sigma_ppb[1]);
	case PIPE_RANDOM_AFFINE:
		return check_order(sc, "scale_min", "scale_max", op->ascale_ppb[0], op->ascale_ppb[1]);
	case PIPE_RANDOM_ERASING:
		if (check_order(sc, "scale_min", "scale_max", op->escale_ppb[0], op->escale_ppb[1]))
			return -EINVAL;
		return check_order(sc, "ratio_min", "ratio_max", op->eratio_ppb[0], op->eratio_ppb[1]);
	case PIPE_GAUSSIAN_NOISE:
		if (op->nmean != 1)
			return scan_fail(sc, "key 'mean': one value (the noise's mean)");
		return 0;
	case PIPE_RANDOM_CHOICE:
		if (op->nwts && op->nwts != op->nsub)
			return scan_fail(sc, "key 'p': %u values for %u transforms", op->nwts,
					 op->nsub);
		uint64_t sum = 0;
		for (uint32_t k = 0; k < op->nwts; k++)
			sum += op->wts_ppb[k];
		if (op->nwts && sum == 0)
			return scan_fail(sc, "key 'p': every weight is 0");
		return 0;
	case PIPE_RAND_AUGMENT:
		if (op->magnitude >= op->nbins)
			return scan_fail(sc, "key 'magnitude': %u not below num_magnitude_bins %u",
					 op->magnitude, op->nbins);
		return 0;
	default:
		return 0;
	}
}

/* Checks between keys, once all are read. */
static int op_check(struct pipe_scan *sc, const struct pipe_op *op, pk_mask seen)
{
	if (op->kind == PIPE_RESIZE) {
		bool hw = seen & (1u << PK_H | 1u << PK_W);
		if ((seen & (1u << PK_SHORT)) && hw)
			return scan_fail(sc, "key 'short': give either short or h and w");
		if (!(seen & (1u << PK_SHORT)) && !hw)
			return scan_fail(sc, "missing key 'h' and 'w' (or 'short')");
		if (hw && !(seen & (1u << PK_H)))
			return scan_fail(sc, "missing key 'h'");
		if (hw && !(seen & (1u << PK_W)))
			return scan_fail(sc, "missing key 'w'");
	} else if (op->kind >= PIPE_ADJUST_BRIGHTNESS) {
		return op_check_pixel(sc, op, seen);
	} else if (op->kind == PIPE_RANDOM_RESIZED_CROP) {
		char a[32], b[32];
		if (op->scale_ppb[0] > op->scale_ppb[1]) {
			pipe_format_ppb(op->scale_ppb[0], a);
			pipe_format_ppb(op->scale_ppb[1], b);
			return scan_fail(sc, "key 'scale_min': %s above scale_max %s", a, b);
		}
		if (op->ratio_ppb[0] > op->ratio_ppb[1]) {
			pipe_format_ppb((int64_t)op->ratio_ppb[0], a);
			pipe_format_ppb((int64_t)op->ratio_ppb[1], b);
			return scan_fail(sc, "key 'ratio_min': %s above ratio_max %s", a, b);
		}
	}
	return 0;
}

/* One op: a name and optional arguments; the cursor ends after them. */
/* The op named `name` (or one of its torchvision names); PIPE_NKINDS when
 * none. */
static uint32_t op_kind_of(const char *name)
{
	static const struct {
		const char *name;
		enum pipe_kind kind;
	} aliases[] = {PIPE_TV_ALIASES};
	uint32_t kind = 0;

	while (kind < PIPE_NKINDS && strcmp(pipe_ops[kind].name, name))
		kind++;
	for (size_t a = 0; kind == PIPE_NKINDS && a < sizeof(aliases) / sizeof(aliases[0]); a++)
		if (!strcmp(aliases[a].name, name))
			kind = aliases[a].kind;
	return kind;
}

static int parse_op(struct pipe_scan *sc, struct pipe_op *op)
{
	char name[PIPE_TOK_MAX], c[8];
	pk_mask seen = 0;

	memset(op, 0, sizeof(*op));
	sc->opname = NULL;
	scan_ws(sc);
	if (!scan_ident(sc, name))
		return scan_fail(sc, "expected an op name at column %zu, found %s", sc->i + 1,
				 scan_seen(sc, c));
	uint32_t kind = op_kind_of(name);
	if (kind == PIPE_NKINDS)
		return feed_err_set(sc->err, -EINVAL,
				    "pipeline op %u '%s': unknown op (feedd --list-ops lists them)",
				    sc->opno, name);
	const struct pipe_op_desc *d = &pipe_ops[kind];
	sc->opname = d->name;
	op->kind = (enum pipe_kind)kind;
	pipe_op_defaults(op);
	scan_ws(sc);
	if (sc->s[sc->i] == '(') {
		int rc = parse_args(sc, d, op, &seen);
		if (rc < 0)
			return rc;
	}
	for (uint32_t k = 0; k < PK_COUNT_; k++)
		if ((d->required & PKB(k)) && !(seen & PKB(k)))
			return scan_fail(sc, "missing key '%s'", pipe_key_names[k]);
	return op_check(sc, op, seen);
}

int pipe_parse(const char *text, struct pipe_spec *ret_spec, struct feed_err *err)
{
	struct pipe_spec spec = {0};
	struct pipe_scan sc = {.s = text, .err = err, .spec = &spec};
	char c[8];

	if (strnlen(text, PIPE_TEXT_MAX + 1) > PIPE_TEXT_MAX)
		return feed_err_set(err, -EINVAL, "pipeline: longer than %d characters",
				    PIPE_TEXT_MAX);
	scan_ws(&sc);
	if (text[sc.i] == '\0') {
		spec.nops = 1; /* the empty pipeline is identity */
		*ret_spec = spec;
		return 0;
	}
	for (;;) {
		if (spec.nops == PIPE_MAX_OPS)
			return feed_err_set(err, -EINVAL, "pipeline: more than %d ops", PIPE_MAX_OPS);
		sc.opno = spec.nops + 1;
		sc.at = spec.nops;
		int rc = parse_op(&sc, &spec.ops[spec.nops]);
		if (rc < 0)
			return rc;
		spec.nops += 1 + spec.ops[spec.nops].nsub; /* the op and its transforms */
		scan_ws(&sc);
		if (text[sc.i] == '\0')
			break;
		if (text[sc.i] != '|')
			return scan_fail(&sc, "unexpected %s at column %zu (ops are joined by '|')",
					 scan_seen(&sc, c), sc.i + 1);
		sc.i++;
	}
	*ret_spec = spec;
	return 0;
}
