/*
 * pipeline_priv.h: core/'s private types of the pipeline language, shared by
 * its files: the keys an op takes (enum pipe_key), the op table's row
 * (struct pipe_op_desc), and the tables pipeline_ops.c defines.
 *
 * The files call one way: pipeline_plan.c calls pipeline_parse.c and
 * pipeline_canon.c, which both call pipeline_ops.c (the table, below all).
 * Never: included outside core/pipeline_*.c.
 */
#ifndef FEED_PIPELINE_PRIV_H
#define FEED_PIPELINE_PRIV_H

#include <stdint.h>

#include "pipeline.h"

/* The keys an op may take, in pipe_key_names's order. */
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
	PK_LINSPACE,
	PK_HUE_CAST,
	PK_COUNT_,
};
/* A set of keys (the keys an op requires, the keys a text gave). */
__extension__ typedef unsigned __int128 pk_mask;
#define PKB(k) ((pk_mask)1 << (k))
_Static_assert(PK_COUNT_ <= 128, "key sets are 128 bits");

/* One row per op: its name, the keys it takes (in canonical order), which
 * of them are required, and the defaults of the others. */
struct pipe_op_desc {
	const char *name;
	uint32_t keys[10];         /* enum pipe_key, terminated by PK_FIELD */
	uint32_t nkeys;            /* keys before field */
	pk_mask required;          /* bit mask over enum pipe_key (PKB) */
};

/* The op table, indexed by enum pipe_kind (pipeline_ops.c). */
extern const struct pipe_op_desc pipe_ops[PIPE_KIND_COUNT_];
#define PIPE_NKINDS ((uint32_t)PIPE_KIND_COUNT_)
/* Each key's name, indexed by enum pipe_key. */
extern const char *const pipe_key_names[PK_COUNT_];

/* The names a key's value may take (NULL-terminated), indexed by the
 * value they stand for; pipe_dtypes[i] is the dtype pipe_dtype_names[i]
 * names. */
extern const char *const pipe_dtype_names[];
extern const int pipe_dtypes[];
extern const char *const pipe_layout_names[];
extern const char *const pipe_interp_names[];
extern const char *const pipe_policy_names[];
extern const char *const pipe_bool_names[];
extern const char *const pipe_pad_mode_names[];
extern const char *const pipe_linspace_names[];
extern const char *const pipe_hue_cast_names[];

/* p in parts per 1e9 as the shortest decimal: 0, 1, 0.5, -1.25. */
void pipe_format_ppb(int64_t ppb, char out[32]);

/* Sets op's keys to the defaults of its kind (op->kind set, the rest
 * zero): torchvision's, where the op is torchvision's. */
void pipe_op_defaults(struct pipe_op *op);

#endif
