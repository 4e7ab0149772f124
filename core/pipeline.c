/*
 * pipeline.c: parses the pipeline text form, checks it against a schema
 * and plans fused stages (see pipeline.h for the language).
 *
 * Owns: the op table (names, keys, defaults, ranges), error messages that
 * name op and key, canonical text and hash, output shapes, scratch sizes.
 *
 * Threads: pure functions on the caller's thread; plans are immutable.
 * Never: allocate, touch sample bytes, depend on the locale.
 */
#include "pipeline.h"
#include "pipeline_tv.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "mix.h"

enum pipe_key {
	PK_SIZE = 0,
	PK_PAD,
	PK_P,
	PK_H,
	PK_W,
	PK_LEN,
	PK_FIELD,
	PK_SHORT,
	PK_CHANNELS,
	PK_SCALE_MIN,
	PK_SCALE_MAX,
	PK_RATIO_MIN,
	PK_RATIO_MAX,
	PK_MEAN,
	PK_STD,
	PK_DTYPE,
	PK_LAYOUT,
	PK_FACTOR,
	PK_ANGLE,
	PK_INTERPOLATION,
	PK_FILL,
	PK_TRANSLATE_X,
	PK_TRANSLATE_Y,
	PK_SCALE,
	PK_SHEAR_X,
	PK_SHEAR_Y,
	PK_BITS,
	PK_THRESHOLD,
	PK_KERNEL_SIZE,
	PK_SIGMA,
	PK_SIGMA_MIN,
	PK_SIGMA_MAX,
	PK_NUM_OUTPUT_CHANNELS,
	PK_I,
	PK_J,
	PK_VALUE,
	PK_BRIGHTNESS,
	PK_CONTRAST,
	PK_SATURATION,
	PK_HUE,
	PK_DEGREES,
	PK_TRANSLATE,
	PK_SHEAR,
	PK_NUM_MAGNITUDE_BINS,
	PK_NUM_OPS,
	PK_MAGNITUDE,
	PK_POLICY,
	PK_SEQ_LEN,
	PK_PAD_ID,
	PK_WINDOW,
	PK_ANTIALIAS,
	PK_PADDING,
	PK_PADDING_MODE,
	PK_DISTORTION_SCALE,
	PK_CLIP,
	PK_TRANSFORMS,
	PK_EXACT,
	PK_MIXUP_ALPHA,
	PK_CUTMIX_ALPHA,
	PK_SWITCH_PROB,
	PK_NUM_CLASSES,
	PK_LABEL_SMOOTHING,
	PK_SEVERITY,
	PK_MIXTURE_WIDTH,
	PK_CHAIN_DEPTH,
	PK_ALPHA,
	PK_ALL_OPS,
	PK_COUNT_,
};
/* A set of keys (the keys an op requires, the keys a text gave). */
__extension__ typedef unsigned __int128 pk_mask;
#define PKB(k) ((pk_mask)1 << (k))
_Static_assert(PK_COUNT_ <= 128, "key sets are 128 bits");

static const char *const pipe_key_names[PK_COUNT_] = {
	"size", "pad", "p", "h", "w", "len", "field", "short", "channels", "scale_min",
	"scale_max", "ratio_min", "ratio_max", "mean", "std", "dtype", "layout", "factor",
	"angle", "interpolation", "fill", "translate_x", "translate_y", "scale", "shear_x",
	"shear_y", "bits", "threshold", "kernel_size", "sigma", "sigma_min", "sigma_max",
	"num_output_channels", "i", "j", "value", "brightness", "contrast", "saturation", "hue",
	"degrees", "translate", "shear", "num_magnitude_bins", "num_ops", "magnitude", "policy",
	"seq_len", "pad_id", "window",
	"antialias", "padding", "padding_mode", "distortion_scale", "clip", "transforms", "exact",
	"mixup_alpha", "cutmix_alpha", "switch_prob", "num_classes", "label_smoothing",
	"severity", "mixture_width", "chain_depth", "alpha", "all_ops"};

/* One row per op: its name, the keys it takes (in canonical order), which
 * of them are required, and the defaults of the others. */
struct pipe_op_desc {
	const char *name;
	uint32_t keys[10];         /* enum pipe_key, terminated by PK_FIELD */
	uint32_t nkeys;            /* keys before field */
	pk_mask required;          /* bit mask over enum pipe_key (PKB) */
};

static const struct pipe_op_desc pipe_ops[] = {
	[PIPE_IDENTITY] = {"identity", {PK_FIELD}, 0, 0},
	[PIPE_RANDOM_CROP] = {"random_crop", {PK_SIZE, PK_PAD, PK_FIELD}, 2, 1u << PK_SIZE},
	[PIPE_CENTER_CROP] = {"center_crop", {PK_SIZE, PK_FIELD}, 1, 1u << PK_SIZE},
	[PIPE_HFLIP] = {"hflip", {PK_P, PK_FIELD}, 1, 0},
	/* h and w, or short: checked in op_check() */
	[PIPE_RESIZE] = {"resize", {PK_H, PK_W, PK_SHORT, PK_INTERPOLATION, PK_ANTIALIAS,
				    PK_FIELD}, 5, 0},
	[PIPE_RANDOM_WINDOW] = {"random_window", {PK_LEN, PK_FIELD}, 1, 1u << PK_LEN},
	[PIPE_DECODE] = {"decode", {PK_CHANNELS, PK_EXACT, PK_FIELD}, 2, 0},
	[PIPE_RANDOM_RESIZED_CROP] = {"random_resized_crop",
				      {PK_SIZE, PK_SCALE_MIN, PK_SCALE_MAX, PK_RATIO_MIN,
				       PK_RATIO_MAX, PK_INTERPOLATION, PK_ANTIALIAS, PK_FIELD},
				      7, 1u << PK_SIZE},
	[PIPE_NORMALIZE] = {"normalize", {PK_MEAN, PK_STD, PK_DTYPE, PK_LAYOUT, PK_FIELD}, 4,
			    1u << PK_MEAN | 1u << PK_STD},
	[PIPE_CONCAT] = {"concat", {PK_SEQ_LEN, PK_FIELD}, 1, PKB(PK_SEQ_LEN)},
	[PIPE_PACK] = {"pack", {PK_SEQ_LEN, PK_PAD_ID, PK_WINDOW, PK_FIELD}, 3, PKB(PK_SEQ_LEN)},
	[PIPE_TO_CHW] = {"to_chw", {PK_FIELD}, 0, 0},
	[PIPE_ADJUST_BRIGHTNESS] = {"adjust_brightness", {PK_FACTOR, PK_FIELD}, 1, PKB(PK_FACTOR)},
	[PIPE_ADJUST_CONTRAST] = {"adjust_contrast", {PK_FACTOR, PK_FIELD}, 1, PKB(PK_FACTOR)},
	[PIPE_ADJUST_SATURATION] = {"adjust_saturation", {PK_FACTOR, PK_FIELD}, 1, PKB(PK_FACTOR)},
	[PIPE_ADJUST_HUE] = {"adjust_hue", {PK_FACTOR, PK_FIELD}, 1, PKB(PK_FACTOR)},
	[PIPE_ADJUST_SHARPNESS] = {"adjust_sharpness", {PK_FACTOR, PK_FIELD}, 1, PKB(PK_FACTOR)},
	[PIPE_ROTATE] = {"rotate", {PK_ANGLE, PK_INTERPOLATION, PK_FILL, PK_FIELD}, 3,
			 PKB(PK_ANGLE)},
	[PIPE_AFFINE] = {"affine",
			 {PK_ANGLE, PK_TRANSLATE_X, PK_TRANSLATE_Y, PK_SCALE, PK_SHEAR_X,
			  PK_SHEAR_Y, PK_INTERPOLATION, PK_FILL, PK_FIELD},
			 8, PKB(PK_ANGLE)},
	[PIPE_POSTERIZE] = {"posterize", {PK_BITS, PK_FIELD}, 1, PKB(PK_BITS)},
	[PIPE_SOLARIZE] = {"solarize", {PK_THRESHOLD, PK_FIELD}, 1, PKB(PK_THRESHOLD)},
	[PIPE_EQUALIZE] = {"equalize", {PK_FIELD}, 0, 0},
	[PIPE_AUTOCONTRAST] = {"autocontrast", {PK_FIELD}, 0, 0},
	[PIPE_INVERT] = {"invert", {PK_FIELD}, 0, 0},
	/* sigma, or sigma_min and sigma_max: checked in op_check() */
	[PIPE_GAUSSIAN_BLUR] = {"gaussian_blur",
				{PK_KERNEL_SIZE, PK_SIGMA, PK_SIGMA_MIN, PK_SIGMA_MAX, PK_FIELD}, 4,
				PKB(PK_KERNEL_SIZE)},
	[PIPE_RGB_TO_GRAYSCALE] = {"rgb_to_grayscale", {PK_NUM_OUTPUT_CHANNELS, PK_FIELD}, 1, 0},
	[PIPE_ERASE] = {"erase", {PK_I, PK_J, PK_H, PK_W, PK_VALUE, PK_FIELD}, 5,
			PKB(PK_I) | PKB(PK_J) | PKB(PK_H) | PKB(PK_W)},
	[PIPE_COLOR_JITTER] = {"color_jitter",
			       {PK_BRIGHTNESS, PK_CONTRAST, PK_SATURATION, PK_HUE, PK_FIELD}, 4, 0},
	[PIPE_RANDOM_GRAYSCALE] = {"random_grayscale", {PK_P, PK_FIELD}, 1, 0},
	[PIPE_RANDOM_ROTATION] = {"random_rotation",
				  {PK_DEGREES, PK_INTERPOLATION, PK_FILL, PK_FIELD}, 3,
				  PKB(PK_DEGREES)},
	[PIPE_RANDOM_AFFINE] = {"random_affine",
				{PK_DEGREES, PK_TRANSLATE, PK_SCALE_MIN, PK_SCALE_MAX, PK_SHEAR,
				 PK_INTERPOLATION, PK_FILL, PK_FIELD},
				7, PKB(PK_DEGREES)},
	[PIPE_RANDOM_SOLARIZE] = {"random_solarize", {PK_THRESHOLD, PK_P, PK_FIELD}, 2,
				  PKB(PK_THRESHOLD)},
	[PIPE_RANDOM_POSTERIZE] = {"random_posterize", {PK_BITS, PK_P, PK_FIELD}, 2, PKB(PK_BITS)},
	[PIPE_RANDOM_EQUALIZE] = {"random_equalize", {PK_P, PK_FIELD}, 1, 0},
	[PIPE_RANDOM_AUTOCONTRAST] = {"random_autocontrast", {PK_P, PK_FIELD}, 1, 0},
	[PIPE_RANDOM_ADJUST_SHARPNESS] = {"random_adjust_sharpness", {PK_FACTOR, PK_P, PK_FIELD},
					  2, PKB(PK_FACTOR)},
	[PIPE_RANDOM_INVERT] = {"random_invert", {PK_P, PK_FIELD}, 1, 0},
	[PIPE_TRIVIAL_AUGMENT_WIDE] = {"trivial_augment_wide", {PK_NUM_MAGNITUDE_BINS, PK_FIELD},
				       1, 0},
	[PIPE_RAND_AUGMENT] = {"rand_augment",
			       {PK_NUM_OPS, PK_MAGNITUDE, PK_NUM_MAGNITUDE_BINS, PK_FIELD}, 3, 0},
	[PIPE_AUTO_AUGMENT] = {"auto_augment", {PK_POLICY, PK_FIELD}, 1, 0},
	[PIPE_RANDOM_ERASING] = {"random_erasing",
				 {PK_P, PK_SCALE_MIN, PK_SCALE_MAX, PK_RATIO_MIN, PK_RATIO_MAX,
				  PK_VALUE, PK_FIELD},
				 6, 0},
	PIPE_TV_OP_ROWS
	[PIPE_AUG_MIX] = {"aug_mix",
			  {PK_SEVERITY, PK_MIXTURE_WIDTH, PK_CHAIN_DEPTH, PK_ALPHA, PK_ALL_OPS,
			   PK_INTERPOLATION, PK_FILL, PK_FIELD},
			  7, 0},
	[PIPE_MIX] = {"mix",
		      {PK_NUM_CLASSES, PK_MIXUP_ALPHA, PK_CUTMIX_ALPHA, PK_SWITCH_PROB,
		       PK_LABEL_SMOOTHING, PK_FIELD},
		      5, PKB(PK_NUM_CLASSES)},
};
#define PIPE_NKINDS (sizeof(pipe_ops) / sizeof(pipe_ops[0]))
_Static_assert(PIPE_NKINDS == PIPE_KIND_COUNT_, "one row per op kind");

const char *pipe_kind_name(enum pipe_kind kind)
{
	return (unsigned)kind < PIPE_NKINDS ? pipe_ops[kind].name : "invalid";
}

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
	char what[FEED_ERR_MSG_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (sc->opname)
		return feed_err_set(sc->err, -EINVAL, "pipeline op %u '%s': %s", sc->opno,
				    sc->opname, what);
	return feed_err_set(sc->err, -EINVAL, "pipeline op %u: %s", sc->opno, what);
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

/* Reads an identifier into out; returns its length (0 if none). */
static size_t scan_ident(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	size_t n = 0;

	if (!is_ident_char(sc->s[sc->i], true))
		return 0;
	while (is_ident_char(sc->s[sc->i], n == 0)) {
		if (n + 1 < PIPE_TOK_MAX)
			out[n] = sc->s[sc->i];
		n++;
		sc->i++;
	}
	out[n < PIPE_TOK_MAX ? n : PIPE_TOK_MAX - 1] = '\0';
	return n;
}

static size_t scan_value(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	size_t n = 0;

	while (is_value_char(sc->s[sc->i])) {
		if (n + 1 < PIPE_TOK_MAX)
			out[n] = sc->s[sc->i];
		n++;
		sc->i++;
	}
	out[n < PIPE_TOK_MAX ? n : PIPE_TOK_MAX - 1] = '\0';
	return n;
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

/* p in parts per 1e9 as the shortest decimal: 0, 1, 0.5, -1.25. */
static void format_ppb(int64_t ppb, char out[32])
{
	uint64_t a = ppb < 0 ? (uint64_t)0 - (uint64_t)ppb : (uint64_t)ppb;
	const char *sign = ppb < 0 ? "-" : "";

	if (a % PIPE_P_ONE == 0) {
		snprintf(out, 32, "%s%" PRIu64, sign, a / PIPE_P_ONE);
		return;
	}
	snprintf(out, 32, "%s%" PRIu64 ".%09" PRIu64, sign, a / PIPE_P_ONE, a % PIPE_P_ONE);
	size_t n = strlen(out);
	while (out[n - 1] == '0')
		out[--n] = '\0';
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
		format_ppb(lo, blo);
		format_ppb(hi, bhi);
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

static const char *const pipe_dtype_names[] = {"f32", "f16", "bf16", NULL};
static const int pipe_dtypes[] = {FEED_DTYPE_F32, FEED_DTYPE_F16, FEED_DTYPE_BF16};
static const char *const pipe_layout_names[] = {"chw", "hwc", NULL};
static const char *const pipe_interp_names[] = {"nearest", "bilinear", NULL};
static const char *const pipe_policy_names[] = {"imagenet", "cifar10", "svhn", NULL};

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

static const char *const pipe_bool_names[] = {"false", "true", "False", "True", "0", "1", NULL};
static const char *const pipe_pad_mode_names[] = {"constant", "edge", "reflect", "symmetric",
						  NULL};

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
static int op_set(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key, const char *v,
		  uint32_t item)
{
	const char *k = pipe_key_names[key];
	const int64_t one = PIPE_P_ONE;
	uint32_t u = 0;
	int64_t x = 0;
	int rc;

	switch (key) {
	case PK_SIZE:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->size);
	case PK_PAD:
		return parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &op->pad);
	case PK_P:
		return parse_prob(sc, k, v, &op->p_ppb);
	case PK_H:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->h);
	case PK_W:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->w);
	case PK_SHORT:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->short_side);
	case PK_LEN:
		return parse_uint(sc, k, v, 1, PIPE_LEN_MAX, &op->len);
	case PK_CHANNELS:
		rc = parse_uint(sc, k, v, 1, 3, &op->channels);
		if (rc == 0 && op->channels == 2)
			return scan_fail(sc, "key 'channels': 2 is not 1 (gray) or 3 (RGB)");
		return rc;
	case PK_SCALE_MIN:
	case PK_SCALE_MAX:
		return parse_scale_key(sc, op, key, v);
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
	case PK_LAYOUT:
		rc = parse_name(sc, k, v, pipe_layout_names, "chw, hwc", &u);
		op->layout = u;
		return rc;
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

/* torchvision's defaults for the pixel ops. */
static void op_defaults_pixel(struct pipe_op *op)
{
	const int64_t one = PIPE_P_ONE;

	op->p_ppb = PIPE_P_ONE / 2;             /* the random_* ops' p=0.5 */
	op->scale_f_ppb = one;                  /* affine(scale=1) */
	op->ascale_ppb[0] = op->ascale_ppb[1] = one; /* random_affine: no scaling */
	op->sigma_ppb[0] = one / 10;            /* GaussianBlur sigma=(0.1, 2.0) */
	op->sigma_ppb[1] = 2 * one;
	op->out_c = 1;                          /* rgb_to_grayscale(num_output_channels=1) */
	op->nbins = 31;
	op->num_ops = 2;
	op->magnitude = 9;
	op->escale_ppb[0] = 20000000;           /* RandomErasing scale=(0.02, 0.33) */
	op->escale_ppb[1] = 330000000;
	op->eratio_ppb[0] = 300000000;          /* ratio=(0.3, 3.3) */
	op->eratio_ppb[1] = 3300000000;
	op->nevalue = 1;                        /* value=0 */
	if (op->kind == PIPE_RANDOM_GRAYSCALE)
		op->p_ppb = PIPE_P_ONE / 10;    /* RandomGrayscale(p=0.1) */
	if (op->kind == PIPE_RANDOM_PERSPECTIVE) {
		op->distortion_ppb = PIPE_P_ONE / 2; /* RandomPerspective(0.5, p=0.5) */
		op->interp = PIPE_INTERP_BILINEAR;
	} else if (op->kind == PIPE_GAUSSIAN_NOISE) {
		op->nmean = 1;                  /* GaussianNoise(mean=0, sigma=0.1, clip) */
		op->sigma_ppb[0] = op->sigma_ppb[1] = PIPE_P_ONE / 10;
		op->clip = true;
	} else if (op->kind == PIPE_AUG_MIX) {
		op->severity = 3;               /* AugMix(3, 3, -1, 1.0, True, BILINEAR) */
		op->mix_width = 3;
		op->chain_depth = -1;
		op->alpha_ppb = PIPE_P_ONE;
		op->all_ops = true;
		op->interp = PIPE_INTERP_BILINEAR;
	}
}

static void op_defaults(struct pipe_op *op)
{
	if (op->kind == PIPE_HFLIP) {
		op->p_ppb = PIPE_P_ONE / 2;
	} else if (op->kind == PIPE_DECODE) {
		op->channels = 3;
	} else if (op->kind == PIPE_RANDOM_RESIZED_CROP) {
		/* torchvision's scale=(0.08, 1.0), ratio=(3/4, 4/3) */
		op->scale_ppb[0] = 80000000;
		op->scale_ppb[1] = PIPE_P_ONE;
		op->ratio_ppb[0] = 750000000;
		op->ratio_ppb[1] = 1333300000;
		op->interp = PIPE_INTERP_BILINEAR;
	} else if (op->kind == PIPE_RESIZE) {
		op->interp = PIPE_INTERP_BILINEAR;
	} else if (op->kind == PIPE_NORMALIZE) {
		op->dtype = FEED_DTYPE_F32;
		op->layout = PIPE_LAYOUT_CHW;
	} else if (op->kind == PIPE_CONCAT || op->kind == PIPE_PACK) {
		op->window = PK_WINDOW_DEFAULT;
	} else if (op->kind == PIPE_MIX) {
		op->switch_ppb = PIPE_P_ONE / 2; /* torchvision's RandomChoice of the two */
	} else {
		op_defaults_pixel(op);
	}
}

/* min above max of a pair of keys: the message names the first. */
static int check_order(struct pipe_scan *sc, const char *key, const char *other, int64_t lo,
		       int64_t hi)
{
	char a[32], b[32];

	if (lo <= hi)
		return 0;
	format_ppb(lo, a);
	format_ppb(hi, b);
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
			format_ppb(op->scale_ppb[0], a);
			format_ppb(op->scale_ppb[1], b);
			return scan_fail(sc, "key 'scale_min': %s above scale_max %s", a, b);
		}
		if (op->ratio_ppb[0] > op->ratio_ppb[1]) {
			format_ppb((int64_t)op->ratio_ppb[0], a);
			format_ppb((int64_t)op->ratio_ppb[1], b);
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
	op_defaults(op);
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

/* ------------------------------------------------------------------ */
/* Canonical text                                                      */

static void format_tuple(const int64_t *v, uint32_t n, char *out, size_t cap)
{
	size_t k = 0;
	char x[32];

	k += (size_t)snprintf(out, cap, "%s", n == 1 ? "" : "(");
	for (uint32_t i = 0; i < n && k < cap; i++) {
		format_ppb(v[i], x);
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
		format_ppb(*d, p);
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
		format_ppb(*d, p);
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
		format_ppb(op->distortion_ppb, p);
		snprintf(out, 160, "distortion_scale=%s", p);
		return true;
	case PK_CLIP: snprintf(out, 160, "clip=%s", op->clip ? "true" : "false"); return true;
	case PK_EXACT: snprintf(out, 160, "exact=%s", op->exact ? "true" : "false"); return true;
	case PK_NUM_CLASSES: snprintf(out, 160, "num_classes=%u", op->num_classes); return true;
	case PK_SEVERITY: snprintf(out, 160, "severity=%u", op->severity); return true;
	case PK_MIXTURE_WIDTH: snprintf(out, 160, "mixture_width=%u", op->mix_width); return true;
	case PK_CHAIN_DEPTH: snprintf(out, 160, "chain_depth=%d", op->chain_depth); return true;
	case PK_ALPHA: format_ppb(op->alpha_ppb, p); snprintf(out, 160, "alpha=%s", p); return true;
	case PK_ALL_OPS:
		snprintf(out, 160, "all_ops=%s", op->all_ops ? "true" : "false");
		return true;
	case PK_MIXUP_ALPHA:
	case PK_CUTMIX_ALPHA:
	case PK_SWITCH_PROB:
	case PK_LABEL_SMOOTHING:
		format_ppb(k == PK_MIXUP_ALPHA    ? op->mixup_ppb
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
			format_ppb(op->wts_ppb[i], p);
			n += (size_t)snprintf(q + n, sizeof(q) - n, "%s%s", i ? ", " : "", p);
		}
		snprintf(out, 160, "p=(%s)", q);
		return true;
	default: return false;
	}
}

static void format_key(const struct pipe_op *op, enum pipe_key k, char out[160])
{
	char p[128];

	if (format_key_tv(op, k, out))
		return;
	switch (k) {
	case PK_SIZE: snprintf(out, 160, "size=%u", op->size); break;
	case PK_PAD: snprintf(out, 160, "pad=%u", op->pad); break;
	case PK_P: format_ppb(op->p_ppb, p); snprintf(out, 160, "p=%s", p); break;
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
		format_ppb(op->scale_ppb[k - PK_SCALE_MIN], p);
		snprintf(out, 160, "%s=%s", pipe_key_names[k], p);
		break;
	case PK_RATIO_MIN:
	case PK_RATIO_MAX:
		if (op->kind != PIPE_RANDOM_RESIZED_CROP) {
			format_key_pixel(op, k, out);
			break;
		}
		format_ppb((int64_t)op->ratio_ppb[k - PK_RATIO_MIN], p);
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
	op_defaults(&op);
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

/* ------------------------------------------------------------------ */
/* Planning                                                            */

static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...)
{
	char what[FEED_ERR_MSG_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return feed_err_set(err, -EINVAL, "pipeline op %u '%s': %s", i + 1,
			    pipe_kind_name(spec->ops[i].kind), what);
}

static bool is_pixel_op(enum pipe_kind k)
{
	return k >= PIPE_ADJUST_BRIGHTNESS && k < PIPE_MIX;
}

static bool is_image_op(enum pipe_kind k)
{
	return k == PIPE_RANDOM_CROP || k == PIPE_CENTER_CROP || k == PIPE_HFLIP ||
	       k == PIPE_RESIZE || k == PIPE_RANDOM_RESIZED_CROP || k == PIPE_NORMALIZE ||
	       k == PIPE_TO_CHW || is_pixel_op(k);
}

static bool is_image_field(const struct fmt_field *f)
{
	return !f->variable && f->dtype == FEED_DTYPE_U8 && (f->rank == 2 || f->rank == 3);
}

static bool is_sequence_field(const struct fmt_field *f)
{
	return f->dtype != FEED_DTYPE_STR &&
	       ((!f->variable && f->rank == 1) || (f->variable && f->rank == 0));
}

static bool is_token_dtype(int dt)
{
	return dt == FEED_DTYPE_U16 || dt == FEED_DTYPE_U32 || dt == FEED_DTYPE_I32 ||
	       dt == FEED_DTYPE_I64;
}

/* A field's state while planning. */
enum plan_fstate {
	FS_AS_IS = 0,     /* as the schema says, or a fixed shape after ops */
	FS_DECODED,       /* decoded: size varies, bounded by out.fields[f].shape */
	FS_SHORT,         /* decoded, then resize(short): must be center-cropped */
	FS_NORMALIZED,    /* normalize ran: the field takes no more ops */
	FS_CHW,           /* to_chw ran: likewise */
};

/* The planner's working state (on the stack: nothing allocates). */
struct plan_work {
	uint8_t st[FMT_MAX_FIELDS];       /* enum plan_fstate */
	uint32_t short_op[FMT_MAX_FIELDS]; /* FS_SHORT: the resize(short)'s op index */
	bool img_open[FMT_MAX_FIELDS];    /* field's last stage is IMAGE: hflips join it */
	uint8_t sk[PIPE_MAX_OPS];         /* op i's stage kind */
	bool join[PIPE_MAX_OPS];          /* op i joins its field's last stage */
	uint32_t norm_op[FMT_MAX_FIELDS]; /* FS_NORMALIZED: the normalize's op index */
};

static bool is_encoded_field(const struct pipe_plan *p, const struct plan_work *w, uint32_t f)
{
	const struct fmt_field *fd = &p->in.fields[f];

	return fd->image && fd->variable && fd->dtype == FEED_DTYPE_U8 && w->st[f] == FS_AS_IS &&
	       p->out.fields[f].variable;
}

/* Whether image ops see field f as an image at this point of the plan. */
static bool is_image_now(const struct pipe_plan *p, const struct plan_work *w, uint32_t f)
{
	return w->st[f] != FS_AS_IS || is_image_field(&p->out.fields[f]);
}

/* *ret_f = the field index op i applies to (-1: none, identity), or an
 * error naming key 'field'. */
static int plan_field(const struct pipe_plan *p, const struct plan_work *w, uint32_t i,
		      int *ret_f, struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct fmt_schema *in = &p->in;
	const struct pipe_op *op = &spec->ops[i];

	if (op->field[0]) {
		*ret_f = fmt_schema_find(in, op->field);
		if (*ret_f < 0)
			return plan_fail(spec, i, err, "key 'field': no field '%s' in the dataset",
					 op->field);
		return 0;
	}
	*ret_f = -1;
	if (op->kind == PIPE_IDENTITY)
		return 0;
	for (uint32_t f = 0; f < in->nfields; f++) {
		const struct fmt_field *fd = &in->fields[f];
		bool ok = op->kind == PIPE_DECODE ? is_encoded_field(p, w, f)
			  : is_image_op(op->kind) ? is_image_now(p, w, f)
						   : is_sequence_field(fd) && is_token_dtype(fd->dtype);
		if (ok) {
			*ret_f = (int)f;
			return 0;
		}
	}
	if (op->kind == PIPE_DECODE)
		return plan_fail(spec, i, err, "missing key 'field': the dataset has no field of "
				 "encoded images (feedpack imagefolder makes one)");
	if (is_image_op(op->kind))
		for (uint32_t f = 0; f < in->nfields; f++)
			if (is_encoded_field(p, w, f))
				return plan_fail(spec, i, err, "missing key 'field': field '%s' holds "
						 "encoded images: decode them first (decode | ...)",
						 in->fields[f].name);
	return plan_fail(spec, i, err,
			 is_image_op(op->kind)
				 ? "missing key 'field': the dataset has no image field "
				   "(fixed u8 HxW or HxWxC)"
				 : "missing key 'field': the dataset has no token sequence "
				   "(u16/u32/i32/i64, 1-D)");
}

/* Sets field fd to a fixed u8 image oh x ow x c (rank 3 when c3). */
static int set_image_out(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			 struct pipe_dims *dm, uint32_t oh, uint32_t ow, uint32_t c, bool rank3,
			 struct feed_err *err)
{
	if ((uint64_t)oh * ow * c > UINT32_MAX)
		return plan_fail(spec, i, err, "output %ux%ux%u larger than 4 GiB", oh, ow, c);
	dm->out_h = oh;
	dm->out_w = ow;
	dm->c = c;
	fd->variable = false;
	fd->rank = rank3 ? 3 : 2;
	fd->shape[0] = oh;
	fd->shape[1] = ow;
	fd->shape[2] = rank3 ? c : 0;
	fd->max_bytes = (uint64_t)oh * ow * c;
	return 0;
}

/* decode on field f: its records become u8 images of varying size. */
static int plan_decode(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		       struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	const struct fmt_field *infd = &p->in.fields[f];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];

	if (w->st[f] != FS_AS_IS || (infd->image && !fd->variable))
		return plan_fail(&p->spec, i, err, "key 'field': '%s' is decoded already",
				 infd->name);
	if (!is_encoded_field(p, w, f))
		return plan_fail(&p->spec, i, err,
				 "key 'field': '%s' is not a field of encoded images", infd->name);
	if (!infd->max_width || !infd->max_height)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' records no image sizes "
				 "(max_width, max_height): pack it again with feedpack imagefolder",
				 infd->name);
	dm->in_h = dm->out_h = infd->max_height;
	dm->in_w = dm->out_w = infd->max_width;
	dm->c = op->channels;
	fd->rank = 3;
	fd->shape[0] = infd->max_height;
	fd->shape[1] = infd->max_width;
	fd->shape[2] = op->channels;
	fd->max_bytes = (uint64_t)infd->max_height * infd->max_width * op->channels;
	/* pixels from here on: the out schema carries no encoded-image facts */
	fd->image = false;
	fd->max_width = fd->max_height = 0;
	fd->max_pixels = 0;
	w->st[f] = FS_DECODED;
	w->sk[i] = PIPE_STAGE_IMAGE;
	w->img_open[f] = true;
	uint64_t px = infd->max_pixels ? infd->max_pixels
				       : (uint64_t)infd->max_width * infd->max_height;
	if (infd->max_width > p->dec_lim.max_width)
		p->dec_lim.max_width = infd->max_width;
	if (infd->max_height > p->dec_lim.max_height)
		p->dec_lim.max_height = infd->max_height;
	if (px > p->dec_lim.max_pixels)
		p->dec_lim.max_pixels = px;
	p->dec_channels_mask |= 1u << op->channels;
	return 0;
}

static const char pipe_fixers[] = "random_resized_crop, center_crop or resize(h, w)";

/* An image op on decoded images of varying size: hflip and resize(short)
 * keep them varying, random_resized_crop, center_crop and resize(h, w)
 * fix the size; every one joins the field's IMAGE stage. */
static int plan_var_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		       struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct pipe_op *op = &spec->ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t c = fd->shape[2];
	const struct pipe_op *sh = w->st[f] == FS_SHORT ? &spec->ops[w->short_op[f]] : NULL;

	dm->in_h = dm->out_h = fd->shape[0];
	dm->in_w = dm->out_w = fd->shape[1];
	dm->c = c;
	w->sk[i] = PIPE_STAGE_IMAGE;
	w->join[i] = true;
	if (op->kind == PIPE_RANDOM_CROP || op->kind == PIPE_NORMALIZE ||
	    op->kind == PIPE_TO_CHW || is_pixel_op(op->kind))
		return plan_fail(spec, i, err, "decoded images of '%s' vary in size: put %s "
				 "before %s", fd->name, pipe_fixers, pipe_kind_name(op->kind));
	if (op->kind == PIPE_HFLIP)
		return 0;
	if (op->kind == PIPE_RESIZE && op->short_side) {
		if (sh)
			return plan_fail(spec, i, err, "key 'short': '%s' was resized by op %u "
					 "already", fd->name, w->short_op[f] + 1);
		w->st[f] = FS_SHORT;
		w->short_op[f] = i;
		return 0;
	}
	if (sh && op->kind != PIPE_CENTER_CROP)
		return plan_fail(spec, i, err, "after op %u resize(short=%u), decoded images of "
				 "'%s' take center_crop", w->short_op[f] + 1, sh->short_side,
				 fd->name);
	if (sh && op->size > sh->short_side)
		return plan_fail(spec, i, err, "key 'size': crop %u larger than op %u "
				 "resize(short=%u)", op->size, w->short_op[f] + 1, sh->short_side);
	w->st[f] = FS_AS_IS;
	if (op->kind == PIPE_RESIZE)
		return set_image_out(spec, i, fd, dm, op->h, op->w, c, true, err);
	return set_image_out(spec, i, fd, dm, op->size, op->size, c, true, err);
}

/* normalize's mean and std for c channels: one value given serves all. */
static void norm_values(const struct pipe_op *op, uint32_t c, float *mean, float *sd)
{
	for (uint32_t k = 0; k < c; k++) {
		mean[k] = (float)((double)op->mean_ppb[op->nmean == 1 ? 0 : k] / PIPE_P_ONE);
		sd[k] = (float)((double)op->std_ppb[op->nstd == 1 ? 0 : k] / PIPE_P_ONE);
	}
}

/* normalize on a fixed u8 image: float output, CHW or HWC. */
static int plan_normalize(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			  struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;
	float mean[PIPE_MAX_C], sd[PIPE_MAX_C];
	struct feed_convert cv;

	if (c > PIPE_MAX_C)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' has %u channels (at most %d)",
				 fd->name, c, PIPE_MAX_C);
	/* one value serves every channel, as torchvision's Normalize broadcasts it */
	if (op->nmean != c && op->nmean != 1)
		return plan_fail(&p->spec, i, err, "key 'mean': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nmean, c, c == 1 ? "" : "s", fd->name, c);
	if (op->nstd != c && op->nstd != 1)
		return plan_fail(&p->spec, i, err, "key 'std': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nstd, c, c == 1 ? "" : "s", fd->name, c);
	norm_values(op, c, mean, sd);
	enum feed_convert_dtype dt = op->dtype == FEED_DTYPE_F16    ? FEED_CONVERT_F16
				     : op->dtype == FEED_DTYPE_BF16 ? FEED_CONVERT_BF16
								    : FEED_CONVERT_F32;
	if (feed_convert_init(&cv, h, wd, c, dt, (enum feed_convert_layout)op->layout, mean, sd) < 0)
		return plan_fail(&p->spec, i, err, "key 'std': mean and std give outputs that are "
				 "not finite floats");
	dm->in_h = dm->out_h = h;
	dm->in_w = dm->out_w = wd;
	dm->c = c;
	fd->dtype = op->dtype;
	fd->rank = 3;
	if (op->layout == PIPE_LAYOUT_CHW) {
		fd->shape[0] = c;
		fd->shape[1] = h;
		fd->shape[2] = wd;
	} else {
		fd->shape[2] = c;
	}
	fd->max_bytes = (uint64_t)h * wd * c * feed_dtype_size(op->dtype);
	w->st[f] = FS_NORMALIZED;
	w->norm_op[f] = i;
	w->sk[i] = PIPE_STAGE_NORMALIZE;
	return 0;
}

/* to_chw on a fixed u8 h x w (x c) image: c x h x w, the field's last op
 * (a 2-d image becomes 1 x h x w, as PILToTensor makes it). */
static int plan_to_chw(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f)
{
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;

	dm->in_h = dm->out_h = h;
	dm->in_w = dm->out_w = wd;
	dm->in_c = dm->c = c;
	fd->rank = 3;
	fd->shape[0] = c;
	fd->shape[1] = h;
	fd->shape[2] = wd;
	w->st[f] = FS_CHW;
	w->img_open[f] = false;
	w->sk[i] = PIPE_STAGE_CHW;
	return 0;
}

/* pad on a fixed u8 h x w x c image: (h + top + bottom) x (w + left +
 * right); reflect needs each padding below the side, symmetric at most
 * the side (as torch's pads). */
static int plan_pad(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		    struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;
	const uint32_t *pd = op->padding; /* left, top, right, bottom */

	for (uint32_t k = 0; k < 4; k++) {
		uint32_t side = k & 1 ? h : wd;
		if (op->padding_mode == PIPE_PAD_REFLECT && pd[k] >= side)
			return plan_fail(&p->spec, i, err, "key 'padding': %u not below the side %u of "
					 "'%s' (reflect)", pd[k], side, fd->name);
		if (op->padding_mode == PIPE_PAD_SYMMETRIC && pd[k] > side)
			return plan_fail(&p->spec, i, err, "key 'padding': %u above the side %u of "
					 "'%s' (symmetric)", pd[k], side, fd->name);
	}
	uint64_t oh = (uint64_t)h + pd[1] + pd[3], ow = (uint64_t)wd + pd[0] + pd[2];
	if (oh > PIPE_DIM_MAX || ow > PIPE_DIM_MAX)
		return plan_fail(&p->spec, i, err, "key 'padding': %ux%u padded to a side above %u",
				 h, wd, PIPE_DIM_MAX);
	w->sk[i] = PIPE_STAGE_PIXEL;
	w->img_open[f] = false;
	dm->in_h = h;
	dm->in_w = wd;
	dm->in_c = c;
	return set_image_out(&p->spec, i, fd, dm, (uint32_t)oh, (uint32_t)ow, c, fd->rank == 3, err);
}

/* random_erasing after normalize: on the floats, in normalised units (0
 * is the mean colour), as torchvision's RandomErasing after Normalize;
 * it joins normalize's stage. */
static int plan_erase_normalized(struct pipe_plan *p, struct plan_work *w, uint32_t i,
				 uint32_t f, struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	const struct pipe_dims *nd = &p->dims[w->norm_op[f]];
	struct pipe_dims *dm = &p->dims[i];

	if (!op->value_random && op->nevalue != 1 && op->nevalue != nd->c)
		return plan_fail(&p->spec, i, err, "key 'value': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nevalue, nd->c, nd->c == 1 ? "" : "s",
				 p->out.fields[f].name, nd->c);
	*dm = *nd;
	dm->in_c = nd->c;
	w->sk[i] = PIPE_STAGE_NORMALIZE;
	w->join[i] = true;
	return 0;
}

/* A pixel op on a fixed u8 image: the shape stays (rgb_to_grayscale may
 * drop to one channel); gaussian_blur's reflect padding needs the kernel's
 * half below each side. */
static int plan_pixel_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			 struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;

	if (c != 1 && c != 3)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' has %u channels (%s takes 1 "
				 "or 3)", fd->name, c, pipe_kind_name(op->kind));
	for (uint32_t k = 0; k <= op->nsub; k++) {
		const struct pipe_op *b = op + k; /* the op, then a container's transforms */
		if (b->kind == PIPE_GAUSSIAN_BLUR && (b->ksize / 2 >= h || b->ksize / 2 >= wd))
			return plan_fail(&p->spec, i + k, err, "key 'kernel_size': %u too large for "
					 "the %ux%u images of '%s' (reflect padding needs "
					 "kernel_size / 2 below each side)", b->ksize, h, wd, fd->name);
	}
	if (op->kind == PIPE_PAD)
		return plan_pad(p, w, i, f, err);
	w->sk[i] = PIPE_STAGE_PIXEL;
	w->img_open[f] = false;
	dm->in_h = h;
	dm->in_w = wd;
	dm->in_c = c;
	uint32_t oc = op->kind == PIPE_RGB_TO_GRAYSCALE && op->out_c == 1 ? 1 : c;
	return set_image_out(&p->spec, i, fd, dm, h, wd, oc, fd->rank == 3, err);
}

/* random_erasing's values are u8 levels (whole numbers 0..255). */
static bool erase_values_u8(const struct pipe_op *op)
{
	for (uint32_t k = 0; k < op->nevalue; k++) {
		int64_t x = op->evalue_ppb[k];
		if (x < 0 || x > 255 * (int64_t)PIPE_P_ONE || x % PIPE_P_ONE)
			return false;
	}
	return true;
}

/* antialias= as given against what op i does: resize(h, w) of a fixed u8
 * image is torch's antialias=False arithmetic; random_resized_crop,
 * resize(short) and any resize of decoded images resample with
 * antialiasing (torchvision's PIL path, and v2's default). */
static int plan_antialias(const struct pipe_spec *spec, uint32_t i, bool decoded,
			  struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	bool aa = decoded || op->kind == PIPE_RANDOM_RESIZED_CROP || op->short_side;

	if (op->antialias == 2 && !aa)
		return plan_fail(spec, i, err, "key 'antialias': resize(h, w) of a fixed u8 image "
				 "is antialias=False (decode the images, or use resize(short=N))");
	if (op->antialias == 1 && aa)
		return plan_fail(spec, i, err, "key 'antialias': %s resamples with antialiasing "
				 "here (antialias=False only for resize(h, w) of fixed u8 images)",
				 pipe_kind_name(op->kind));
	return 0;
}

/* The image shape op i sees on field f (updated by earlier ops) and the
 * shape it leaves. */
static int plan_image_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			 struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct pipe_op *op = &spec->ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1];

	if (w->st[f] == FS_NORMALIZED && op->kind == PIPE_RANDOM_ERASING)
		return plan_erase_normalized(p, w, i, f, err);
	if (w->st[f] == FS_NORMALIZED)
		return plan_fail(spec, i, err, "key 'field': '%s' is normalized already "
				 "(only random_erasing may follow normalize)", fd->name);
	if (w->st[f] == FS_CHW)
		return plan_fail(spec, i, err, "key 'field': '%s' is CHW already (to_chw is a "
				 "field's last op)", fd->name);
	if (op->kind == PIPE_RANDOM_ERASING && !op->value_random && !erase_values_u8(op))
		return plan_fail(spec, i, err, "key 'value': not u8 levels 0..255 (before "
				 "normalize; after it values are in normalised units)");
	if (op->kind == PIPE_RANDOM_ERASING && op->nevalue > 1 &&
	    op->nevalue != (fd->rank == 3 ? fd->shape[2] : 1))
		return plan_fail(spec, i, err, "key 'value': %u values for the %u channel%s of '%s'",
				 op->nevalue, fd->rank == 3 ? fd->shape[2] : 1,
				 fd->rank == 3 && fd->shape[2] == 1 ? "" : "s", fd->name);
	int rc = plan_antialias(spec, i, w->st[f] != FS_AS_IS, err);
	if (rc < 0)
		return rc;
	if (w->st[f] != FS_AS_IS)
		return plan_var_op(p, w, i, f, err);
	if (!is_image_field(fd))
		return plan_fail(spec, i, err,
				 is_encoded_field(p, w, f)
					 ? "key 'field': '%s' holds encoded images: decode them first"
					 : "key 'field': '%s' is not an image (fixed u8 HxW or HxWxC)",
				 fd->name);
	if (h > PIPE_DIM_MAX || wd > PIPE_DIM_MAX)
		return plan_fail(spec, i, err, "key 'field': image '%s' is %ux%u, sides above %u "
				 "are not supported", fd->name, h, wd, PIPE_DIM_MAX);
	if (op->kind == PIPE_NORMALIZE)
		return plan_normalize(p, w, i, f, err);
	if (op->kind == PIPE_TO_CHW)
		return plan_to_chw(p, w, i, f);
	if (is_pixel_op(op->kind))
		return plan_pixel_op(p, w, i, f, err);
	uint32_t c = fd->rank == 3 ? fd->shape[2] : 1, oh = h, ow = wd;
	dm->in_h = h;
	dm->in_w = wd;
	w->sk[i] = op->kind == PIPE_RESIZE && !op->short_side ? PIPE_STAGE_RESIZE : PIPE_STAGE_GEO;
	if (op->kind == PIPE_HFLIP) {
		w->join[i] = w->img_open[f];
		if (w->join[i])
			w->sk[i] = PIPE_STAGE_IMAGE;
	} else {
		w->img_open[f] = false;
	}
	if (op->kind == PIPE_RANDOM_CROP) {
		uint64_t ph = (uint64_t)h + 2ull * op->pad, pw = (uint64_t)wd + 2ull * op->pad;
		if (op->size > ph || op->size > pw)
			return plan_fail(spec, i, err,
					 "key 'size': crop %u larger than the padded image "
					 "%" PRIu64 "x%" PRIu64 " (%ux%u + pad %u)",
					 op->size, ph, pw, h, wd, op->pad);
		oh = ow = op->size;
	} else if (op->kind == PIPE_CENTER_CROP || op->kind == PIPE_RANDOM_RESIZED_CROP) {
		oh = ow = op->size;
	} else if (op->kind == PIPE_RESIZE && op->short_side) {
		/* torchvision: short side N, long side int(N * long / short) */
		uint32_t s = h < wd ? h : wd, l = h < wd ? wd : h;
		uint64_t nl = (uint64_t)op->short_side * l / s;
		if (nl > PIPE_DIM_MAX)
			return plan_fail(spec, i, err, "key 'short': %ux%u resized to a side of "
					 "%" PRIu64 " (above %u)", h, wd, nl, PIPE_DIM_MAX);
		oh = h <= wd ? op->short_side : (uint32_t)nl;
		ow = h <= wd ? (h == wd ? op->short_side : (uint32_t)nl) : op->short_side;
	} else if (op->kind == PIPE_RESIZE) {
		oh = op->h;
		ow = op->w;
	}
	if (op->kind == PIPE_RANDOM_RESIZED_CROP || (op->kind == PIPE_RESIZE && op->short_side)) {
		w->sk[i] = PIPE_STAGE_IMAGE;
		w->img_open[f] = true;
	}
	return set_image_out(spec, i, fd, dm, oh, ow, c, fd->rank == 3, err);
}

static int plan_window_op(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			  struct pipe_dims *dm, struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	size_t elem = feed_dtype_size(fd->dtype);

	if (!is_sequence_field(fd))
		return plan_fail(spec, i, err,
				 "key 'field': '%s' is not a sequence (fixed 1-D or variable flat)",
				 fd->name);
	uint64_t longest = fd->variable ? fd->max_bytes / elem : fd->shape[0];
	if (op->len > longest)
		return plan_fail(spec, i, err,
				 "key 'len': window %u longer than the sequence '%s' (%s%" PRIu64
				 " elements)",
				 op->len, fd->name, fd->variable ? "at most " : "", longest);
	dm->in_elems = fd->variable ? 0 : longest;
	dm->out_elems = op->len;
	fd->variable = false;
	fd->rank = 1;
	fd->shape[0] = op->len;
	fd->max_bytes = (uint64_t)op->len * elem;
	return 0;
}

/* Opens a stage for op i on its field, or extends the field's last stage:
 * runs of geometric ops, runs of windows, and the ops that join an IMAGE
 * stage (resize never fuses). */
static void plan_add_to_stage(struct pipe_plan *p, const struct plan_work *w, uint32_t i,
			      uint32_t *nops)
{
	uint32_t f = (uint32_t)p->op_field[i];
	const struct pipe_op *op = &p->spec.ops[i];
	enum pipe_stage_kind k = op->kind == PIPE_RANDOM_WINDOW ? PIPE_STAGE_WINDOW
							       : (enum pipe_stage_kind)w->sk[i];
	struct pipe_stage *last = p->nstages ? &p->stages[p->nstages - 1] : NULL;
	bool same = last && last->field == f;

	p->stage_ops[*nops] = i;
	(*nops)++;
	if (same && (w->join[i] || (last->kind == k && (k == PIPE_STAGE_GEO ||
							    k == PIPE_STAGE_WINDOW ||
							    k == PIPE_STAGE_PIXEL)))) {
		last->count++;
	} else {
		last = &p->stages[p->nstages++];
		*last = (struct pipe_stage){.kind = k, .field = f, .first = *nops - 1, .count = 1};
		last->in_h = p->dims[i].in_h;
		last->in_w = p->dims[i].in_w;
		last->in_elems = p->dims[i].in_elems;
		last->in_c = p->dims[i].in_c;
		last->decode = op->kind == PIPE_DECODE;
		last->elem_bytes = k == PIPE_STAGE_WINDOW ? feed_dtype_size(p->in.fields[f].dtype)
				   : k == PIPE_STAGE_NORMALIZE ? feed_dtype_size(op->dtype)
							       : 1;
	}
	last->out_h = p->dims[i].out_h;
	last->out_w = p->dims[i].out_w;
	last->c = p->dims[i].c;
	last->out_elems = p->dims[i].out_elems;
	last->out_bytes = k == PIPE_STAGE_WINDOW
				  ? (size_t)last->out_elems * last->elem_bytes
				  : (size_t)last->out_h * last->out_w * last->c * last->elem_bytes;
}

/* normalize's conversion, which plan_normalize() checked. */
static void plan_convert(struct pipe_plan *p, struct pipe_stage *st)
{
	const struct pipe_op *op = &p->spec.ops[p->stage_ops[st->first]];
	float mean[PIPE_MAX_C], sd[PIPE_MAX_C];

	norm_values(op, st->c, mean, sd);
	enum feed_convert_dtype dt = op->dtype == FEED_DTYPE_F16    ? FEED_CONVERT_F16
				     : op->dtype == FEED_DTYPE_BF16 ? FEED_CONVERT_BF16
								    : FEED_CONVERT_F32;
	int rc = feed_convert_init(&st->cv, st->in_h, st->in_w, st->c, dt,
				   (enum feed_convert_layout)op->layout, mean, sd);
	assert(rc == 0);
	(void)rc;
}

/* The largest image a pixel stage's ops read or write, in bytes. */
static size_t plan_pixel_image(const struct pipe_plan *p, const struct pipe_stage *st)
{
	size_t most = 0;

	for (uint32_t j = 0; j < st->count; j++) {
		const struct pipe_dims *dm = &p->dims[p->stage_ops[st->first + j]];
		size_t in = (size_t)dm->in_h * dm->in_w * dm->in_c;
		size_t out = (size_t)dm->out_h * dm->out_w * dm->c;
		most = in > most ? in : most;
		most = out > most ? out : most;
	}
	return most;
}

/* Whether stage st runs an op of kind k. */
static bool plan_stage_has(const struct pipe_plan *p, const struct pipe_stage *st,
			   enum pipe_kind k)
{
	for (uint32_t j = 0; j < st->count; j++)
		if (p->spec.ops[p->stage_ops[st->first + j]].kind == k)
			return true;
	return false;
}

/* The widest image of a pixel stage. */
static size_t plan_pixel_width(const struct pipe_plan *p, const struct pipe_stage *st)
{
	size_t most = 0;

	for (uint32_t j = 0; j < st->count; j++) {
		const struct pipe_dims *dm = &p->dims[p->stage_ops[st->first + j]];
		most = dm->in_w > most ? dm->in_w : most;
		most = dm->out_w > most ? dm->out_w : most;
	}
	return most;
}

/* Stages grouped by field (ops keep their order within a field), then the
 * scratch: two ping-pong buffers for intermediate outputs, the resize
 * column table, and the resample scratch of the IMAGE stages. */
static void plan_stages(struct pipe_plan *p, const struct plan_work *w)
{
	uint32_t nops = 0;
	size_t maxw = 0;

	for (uint32_t f = 0; f < p->in.nfields; f++) {
		p->field_stage[f] = p->nstages;
		for (uint32_t i = 0; i < p->spec.nops; i++)
			if (p->op_field[i] == (int)f && p->spec.ops[i].kind != PIPE_IDENTITY &&
			    p->spec.ops[i].kind != PIPE_MIX)
				plan_add_to_stage(p, w, i, &nops);
		p->field_nstages[f] = p->nstages - p->field_stage[f];
		for (uint32_t s = p->field_stage[f]; s + 1 < p->nstages; s++)
			if (p->stages[s].out_bytes > p->inter_bytes)
				p->inter_bytes = p->stages[s].out_bytes;
	}
	for (uint32_t s = 0; s < p->nstages; s++) {
		struct pipe_stage *st = &p->stages[s];
		if (st->kind == PIPE_STAGE_RESIZE && st->out_w > maxw)
			maxw = st->out_w;
		if (st->kind == PIPE_STAGE_NORMALIZE)
			plan_convert(p, st);
		if (st->kind == PIPE_STAGE_PIXEL) {
			size_t n = plan_pixel_image(p, st), wmax = plan_pixel_width(p, st);
			size_t nf = n > 2 * wmax ? n : 2 * wmax;
			st->px_img_bytes = n;
			size_t al = (n + 63) & ~(size_t)63;
			n = 2 * al + ((4 * nf + 63) & ~(size_t)63);
			if (plan_stage_has(p, st, PIPE_AUG_MIX)) { /* its chains and sum */
				st->px_mix_off = n;
				n += 3 * al + ((4 * st->px_img_bytes + 63) & ~(size_t)63);
			}
			if (n > p->pix_scratch_bytes)
				p->pix_scratch_bytes = n;
		}
		if (st->kind == PIPE_STAGE_IMAGE) {
			size_t n = img_resample_scratch_bytes(st->in_w, st->in_h, st->out_w,
							      st->out_h, st->c);
			if (n > p->img_scratch_bytes)
				p->img_scratch_bytes = n;
		}
	}
	p->table_bytes = maxw * 16;
	size_t inter = (p->inter_bytes + 63) & ~(size_t)63;
	p->scratch_bytes = 2 * inter + ((p->table_bytes + 63) & ~(size_t)63) +
			   ((p->img_scratch_bytes + 63) & ~(size_t)63) + p->pix_scratch_bytes;
}

/* The integer field `label` mix makes soft labels of: its index, or an
 * error naming it. */
static int plan_mix_label(struct pipe_plan *p, uint32_t i, struct feed_err *err)
{
	static const int types[][2] = {
		{FEED_DTYPE_U8, FEED_MIX_LABEL_U8},   {FEED_DTYPE_I8, FEED_MIX_LABEL_I8},
		{FEED_DTYPE_U16, FEED_MIX_LABEL_U16}, {FEED_DTYPE_I16, FEED_MIX_LABEL_I16},
		{FEED_DTYPE_U32, FEED_MIX_LABEL_U32}, {FEED_DTYPE_I32, FEED_MIX_LABEL_I32},
		{FEED_DTYPE_U64, FEED_MIX_LABEL_U64}, {FEED_DTYPE_I64, FEED_MIX_LABEL_I64},
	};
	int f = fmt_schema_find(&p->in, PIPE_MIX_LABEL);
	const struct fmt_field *fd = f < 0 ? NULL : &p->in.fields[f];

	if (!fd)
		return plan_fail(&p->spec, i, err, "soft labels are made from the field '%s', "
				 "which the dataset lacks", PIPE_MIX_LABEL);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		if (fd->dtype != types[t][0] || fd->variable ||
		    !(fd->rank == 0 || (fd->rank == 1 && fd->shape[0] == 1)))
			continue;
		p->bmix.label_type = (uint32_t)types[t][1];
		p->bmix.label_bytes = (uint32_t)feed_dtype_size(fd->dtype);
		return f;
	}
	return plan_fail(&p->spec, i, err, "soft labels are made from the field '%s', which is "
			 "%s%s, not one integer per sample", PIPE_MIX_LABEL,
			 feed_dtype_name(fd->dtype), fd->variable ? " (variable)" : "");
}

/* mix: the last op, on a field normalize made; `label` becomes f32
 * [num_classes]. */
static int plan_mix(struct pipe_plan *p, struct plan_work *w, uint32_t i, struct feed_err *err)
{
	struct pipe_op *op = &p->spec.ops[i];
	int f = -1;

	if (i + 1 != p->spec.nops)
		return plan_fail(&p->spec, i, err, "a batch op: it must be the pipeline's last");
	if (op->field[0] && (f = fmt_schema_find(&p->in, op->field)) < 0)
		return plan_fail(&p->spec, i, err, "key 'field': no field '%s' in the dataset",
				 op->field);
	for (uint32_t k = 0; f < 0 && k < p->in.nfields; k++)
		if (w->st[k] == FS_NORMALIZED)
			f = (int)k;
	if (f < 0 || w->st[f] != FS_NORMALIZED)
		return plan_fail(&p->spec, i, err, "mixes normalized images: put normalize(...) "
				 "on %s%s%s before it", f < 0 ? "the image field" : "'",
				 f < 0 ? "" : p->in.fields[f].name, f < 0 ? "" : "'");
	int lf = plan_mix_label(p, i, err);
	if (lf < 0)
		return lf;
	if (p->bmix.label_bytes > 4ull * op->num_classes)
		return plan_fail(&p->spec, i, err, "key 'num_classes': %u soft labels are smaller "
				 "than the %u-byte label they replace", op->num_classes,
				 p->bmix.label_bytes);
	struct fmt_field *lo = &p->out.fields[lf];
	lo->dtype = FEED_DTYPE_F32;
	lo->rank = 1;
	lo->shape[0] = op->num_classes;
	lo->max_bytes = 4ull * op->num_classes;
	strcpy(op->field, p->in.fields[f].name);
	p->op_field[i] = f;
	p->bmix = (struct pipe_bmix){
		.on = true, .op = i, .img_field = (uint32_t)f, .label_field = (uint32_t)lf,
		.label_type = p->bmix.label_type, .label_bytes = p->bmix.label_bytes,
		.mixup_alpha = (double)op->mixup_ppb / PIPE_P_ONE,
		.cutmix_alpha = (double)op->cutmix_ppb / PIPE_P_ONE,
		.switch_prob = (double)op->switch_ppb / PIPE_P_ONE,
		.label_smoothing = (double)op->smoothing_ppb / PIPE_P_ONE,
		.num_classes = op->num_classes,
	};
	return 0;
}

/* Resolves every op's field and shapes, in op order; then refuses fields
 * whose images still vary in size. */
/* One output field of a packed batch. */
static void pack_out_field(struct fmt_field *fd, const char *name, int dtype, uint32_t L,
			   bool variable)
{
	*fd = (struct fmt_field){.dtype = dtype, .rank = 1, .shape = {L}, .variable = variable};
	snprintf(fd->name, sizeof(fd->name), "%s", name);
	if (variable) {
		fd->rank = 0;
		fd->max_bytes = ((uint64_t)L + 1) * 4;  /* a segment per token, and the end */
	} else {
		fd->max_bytes = (uint64_t)L * feed_dtype_size(dtype);
	}
}

/* concat / pack: the only op, on the dataset's token field; the batch
 * schema is the rows' (pipeline.h). */
static int plan_packing(struct pipe_plan *p, uint32_t i, struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	int f = fmt_schema_tokens(&p->in);
	uint32_t L = op->seq_len;

	if (p->spec.nops != 1)
		return plan_fail(&p->spec, i, err, "packing is the pipeline's only op");
	if (f < 0 || (op->field[0] && strcmp(op->field, FMT_TOKENS_FIELD)))
		return plan_fail(&p->spec, i, err, "needs a token-document dataset: a variable "
				 "'tokens' field of u16, u32 or i32 (feedpack tokens --doc-sep, "
				 "feedpack megatron)");
	p->op_field[i] = f;
	p->pack = (struct pk_spec){.mode = op->kind == PIPE_CONCAT ? PK_MODE_CONCAT : PK_MODE_PACK,
				   .seq_len = L, .pad_id = op->pad_id, .window = op->window};
	p->pack_field = (uint32_t)f;
	memset(&p->out, 0, sizeof(p->out));
	p->out.nfields = 5;
	pack_out_field(&p->out.fields[0], "input_ids", p->in.fields[f].dtype, L, false);
	pack_out_field(&p->out.fields[1], "labels", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[2], "position_ids", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[3], "document_ids", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[4], "cu_seqlens", FEED_DTYPE_I32, L, true);
	p->scratch_bytes = pk_scratch_bytes(L);
	return 0;
}

static int plan_ops(struct pipe_plan *p, struct plan_work *w, struct feed_err *err)
{
	for (uint32_t i = 0; i < p->spec.nops; i++) {
		struct pipe_op *op = &p->spec.ops[i];
		int f;
		if (op->kind == PIPE_CONCAT || op->kind == PIPE_PACK)
			return plan_packing(p, i, err);
		if (op->sub) {
			p->op_field[i] = -1; /* runs inside its container */
			continue;
		}
		if (op->kind == PIPE_MIX) {
			int rc = plan_mix(p, w, i, err);
			if (rc < 0)
				return rc;
			continue;
		}
		int rc = plan_field(p, w, i, &f, err);
		if (rc < 0)
			return rc;
		p->op_field[i] = f;
		if (f < 0)
			continue;
		strcpy(op->field, p->in.fields[f].name);
		struct fmt_field *fd = &p->out.fields[f];
		if (op->kind == PIPE_DECODE) {
			rc = plan_decode(p, w, i, (uint32_t)f, err);
		} else if (is_image_op(op->kind)) {
			rc = plan_image_op(p, w, i, (uint32_t)f, err);
		} else if (op->kind == PIPE_RANDOM_WINDOW) {
			w->img_open[f] = false;
			rc = w->st[f] == FS_AS_IS ? plan_window_op(&p->spec, i, fd, &p->dims[i], err)
				: plan_fail(&p->spec, i, err, "key 'field': '%s' is not a sequence "
					    "(fixed 1-D or variable flat)", fd->name);
		}
		if (rc < 0)
			return rc;
	}
	for (uint32_t f = 0; f < p->in.nfields; f++) {
		if (w->st[f] == FS_DECODED)
			return feed_err_set(err, -EINVAL, "pipeline: field '%s': decoded images vary "
					    "in size: end with %s", p->in.fields[f].name,
					    pipe_fixers);
		if (w->st[f] == FS_SHORT)
			return feed_err_set(err, -EINVAL, "pipeline: field '%s': op %u "
					    "resize(short=%u) leaves sizes varying: follow it with "
					    "center_crop", p->in.fields[f].name, w->short_op[f] + 1,
					    p->spec.ops[w->short_op[f]].short_side);
	}
	return 0;
}

int pipe_plan(const struct pipe_spec *spec, const struct fmt_schema *in,
	      struct pipe_plan *ret_plan, struct feed_err *err)
{
	struct pipe_plan *p = ret_plan;
	struct plan_work w;

	if (spec->nops == 0 || spec->nops > PIPE_MAX_OPS)
		return feed_err_set(err, -EINVAL, "pipeline: %u ops (1..%d allowed)", spec->nops,
				    PIPE_MAX_OPS);
	int rc = fmt_schema_check(in, err);
	if (rc < 0)
		return rc;
	memset(p, 0, sizeof(*p));
	memset(&w, 0, sizeof(w));
	p->spec = *spec;
	p->in = *in;
	p->out = *in;
	rc = plan_ops(p, &w, err);
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return rc;
	}
	if (p->pack.mode == PK_MODE_NONE)
		plan_stages(p, &w);
	if (p->bmix.on) {
		uint32_t f = p->bmix.img_field;
		p->bmix.cv = p->stages[p->field_stage[f] + p->field_nstages[f] - 1].cv;
	}
	rc = pipe_spec_canonical(&p->spec, p->canonical, sizeof(p->canonical));
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return feed_err_set(err, -EINVAL, "pipeline: canonical text too long");
	}
	p->hash = XXH64(p->canonical, (size_t)rc, 0);
	return 0;
}

int pipe_plan_text(const char *text, const struct fmt_schema *in, struct pipe_plan *ret_plan,
		   struct feed_err *err)
{
	struct pipe_spec spec;
	int rc = pipe_parse(text, &spec, err);

	return rc < 0 ? rc : pipe_plan(&spec, in, ret_plan, err);
}

size_t pipe_scratch_bytes(const struct pipe_plan *plan)
{
	return plan->scratch_bytes;
}

uint64_t pipe_hash(const struct pipe_plan *plan)
{
	return plan->hash;
}
