/*
 * pipeline.h: augmentation pipelines — the text form of DESIGN.md's
 * command-line contract, parsed, checked against a dataset schema and
 * planned into fused stages that augment.c runs per sample.
 *
 * Text form: ops joined by `|`, each `name(key=value, ...)` or a bare
 * `name`; whitespace anywhere between tokens. The empty text means
 * `identity`. Ops and keys (every op also takes `field=NAME`):
 *   identity                      no change
 *   random_crop(size, pad=0)      torchvision RandomCrop(size, padding=pad),
 *                                 zero padding; square size x size
 *   center_crop(size)             torchvision CenterCrop(size) (zero-pads when
 *                                 size exceeds the image, as torchvision does)
 *   hflip(p=0.5)                  torchvision RandomHorizontalFlip(p)
 *   resize(h, w)                  torchvision Resize((h, w)), bilinear,
 *                                 antialias=False, half-pixel centres, rounded
 *                                 to nearest (ties to even, like torch.round);
 *                                 bit-exact with torch 1.13 (aug_resize_u8())
 *   random_window(len)            a random run of len elements of a 1-D field
 *   concat(seq_len)               token documents concatenated in epoch order
 *                                 and cut into rows (packing.h)
 *   pack(seq_len, pad_id=0, window=1000)
 *                                 token documents placed into rows by
 *                                 best-fit decreasing over windows (packing.h)
 * concat and pack act on a token-document dataset's `tokens` field and are
 * the pipeline's only op; the batch has input_ids [L] (the tokens' dtype),
 * labels, position_ids, document_ids [L] (i64) and cu_seqlens (i32,
 * variable: each row's segment starts as offsets into the flattened batch,
 * the last row's followed by rows * L).
 *   decode(channels=3, exact=false)
 *                                 encoded JPEG/PNG bytes -> u8 HWC, channels
 *                                 1 (gray) or 3 (RGB); sizes vary per image;
 *                                 exact=true never decodes at a reduced DCT
 *                                 scale (augment.h), for an eval path within
 *                                 1 of torchvision's inside the crop
 *   random_resized_crop(size, scale_min=0.08, scale_max=1, ratio_min=0.75,
 *                       ratio_max=1.3333)
 *                                 torchvision RandomResizedCrop(size, scale,
 *                                 ratio): its box sampler, then an antialiased
 *                                 bilinear resample of the box (image.h)
 *   resize(short=N)               torchvision Resize(N) with antialias=True:
 *                                 shorter side N, longer int(N * long / short)
 *   normalize(mean, std, dtype=f32, layout=chw)
 *                                 ToTensor + Normalize(mean, std): mean and
 *                                 std in units of x/255, one value per channel
 *                                 (a tuple "(0.485, 0.456, 0.406)" or one
 *                                 number for one channel), dtype f32|f16|bf16,
 *                                 layout chw|hwc; the field's last op but
 *                                 random_erasing, which then erases the
 *                                 floats in normalised units (value 0 =
 *                                 the mean colour, one value per channel,
 *                                 or random), as RandomErasing after
 *                                 Normalize; it joins normalize's stage
 *   adjust_brightness(factor) ... random_erasing(p, ...)
 *                                 torchvision's per-sample augmentations
 *                                 (pixel ops: PIPE_ADJUST_BRIGHTNESS and
 *                                 after; docs/augmentations.md and
 *                                 `feedd --list-ops` list them with their
 *                                 keys): on fixed u8 images of 1 or 3
 *                                 channels, shape kept (rgb_to_grayscale
 *                                 may make one channel); consecutive ones
 *                                 on a field run as one PIXEL stage
 *   vflip(p), pad(padding, fill, padding_mode), random_perspective(
 *   distortion_scale, p, interpolation, fill), gaussian_noise(mean, sigma,
 *   clip)                         torchvision's RandomVerticalFlip, Pad,
 *                                 RandomPerspective, v2 GaussianNoise:
 *                                 pixel ops (augment_tv.c); pad changes the
 *                                 size
 *   aug_mix(severity=3, mixture_width=3, chain_depth=-1, alpha=1,
 *           all_ops=true, interpolation=bilinear, fill)
 *                                 torchvision's AugMix: a pixel op on a
 *                                 fixed u8 image (augment_augmix.c)
 *   to_chw                        a fixed u8 image's channels first (HWC ->
 *                                 CHW, as PILToTensor / ToImage give): the
 *                                 field's last op; Loader(layout="NCHW")
 *                                 without device= appends it
 *   random_apply(transforms=[op, ...], p=0.5), random_choice(transforms,
 *   p=(w, ...)), random_order(transforms)
 *                                 RandomApply / RandomChoice / RandomOrder
 *                                 over pixel ops that keep the shape; the
 *                                 transforms follow their container in the
 *                                 spec (pipe_op.nsub, .sub)
 *   mix(num_classes, mixup_alpha=0, cutmix_alpha=0, switch_prob=0.5,
 *       label_smoothing=0)
 *                                 a batch op, the pipeline's last, after the
 *                                 image field's normalize: torchvision's
 *                                 MixUp / CutMix (a RandomChoice of both
 *                                 with switch_prob cutmix's share) on the
 *                                 normalized batch rolled by one, and the
 *                                 integer field `label` made soft labels,
 *                                 f32 [num_classes] (timm's smoothing);
 *                                 kernels/mix.h's draws and arithmetic, the
 *                                 same bits as the Loader's conversion
 *                                 (augment_mix.c)
 * torchvision's forms: a first argument without a key is the op's first
 * key (resize(256) is short=256, resize((h, w)) is h and w); tuples spread
 * over key pairs (size=(h, w) of resize, scale=(a, b), ratio=(a, b),
 * sigma=(a, b)), symmetric ranges (degrees=(-a, a), shear=(-a, a)) and
 * equal items (size=(n, n) of crops, fill=(v, v, v)) are kept as one
 * value; interpolation takes torchvision's spellings (BILINEAR,
 * InterpolationMode.BILINEAR) and antialias is checked against what the op
 * does. rotate and affine without fill= are F.rotate's fill=None (zeros,
 * no mask blend). Names random_horizontal_flip and random_vertical_flip
 * are hflip and vflip.
 * Image ops act on a fixed u8 field of shape (H, W) or (H, W, C), or on a
 * field decode made; by default the first such field at that point of the
 * pipeline. decode acts on a field whose records are encoded images (fmt.h
 * `image`), by default the first one. After decode an image's size varies
 * (bounded by the field's max_width x max_height); random_resized_crop,
 * center_crop and resize(h, w) make it fixed, hflip keeps it as it is, and
 * resize(short=N) keeps it variable and must be followed by center_crop
 * (size <= N). Between decode and the op that fixes the size only hflip and
 * resize(short) may come; a field still variable at the end is refused,
 * naming the op that is missing. On decoded images resize(h, w) and
 * center_crop after resize(short) resample with antialiasing (image.h), as
 * torchvision does on PIL images; on fixed u8 fields resize(h, w) keeps
 * its torch 1.13 antialias=False arithmetic.
 * random_window acts on a fixed 1-D field or
 * a variable field of scalars, by default the first one of dtype u16, u32,
 * i32 or i64, and makes it fixed [len]. Fields no op names pass through.
 * Numbers: decimal integers; p, scale_*, ratio_*, mean and std decimals
 * with at most 9 decimals (kept exactly, in parts per 10^9).
 *
 * Threads: parse and plan are pure and run on the caller's thread; a
 * finished struct pipe_plan is immutable and may be shared by any number of
 * threads. Nothing here allocates: the structs are fixed-size values.
 * Never: touch sample data (augment.c does), print, or allocate.
 *
 * Errors: -EINVAL with a message naming the op (1-based index and name)
 * and the key, e.g. "pipeline op 2 'hflip': key 'p': 1.5 not in [0, 1]".
 */
#ifndef FEED_PIPELINE_H
#define FEED_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "feed_err.h"
#include "fmt.h"
#include "image.h"
#include "packing.h"

#define PIPE_MAX_OPS 16
#define PIPE_TEXT_MAX 4096     /* longest accepted pipeline text */
#define PIPE_CANON_MAX 4096    /* room for any canonical string */
#define PIPE_DIM_MAX 65535u    /* largest size, pad, h, w */
#define PIPE_LEN_MAX (1u << 30) /* largest random_window len */
#define PIPE_P_ONE 1000000000u /* p = 1 in parts per 10^9 */
#define PIPE_RATIO_MAX 100u    /* largest ratio_max */
#define PIPE_NORM_MAX 1000u    /* largest |mean| and std */
#define PIPE_MAX_C 4           /* most channels normalize takes */
#define PIPE_MIX_LABEL "label" /* the field mix makes soft labels of */
#define PIPE_AUGMIX_WIDTH_MAX 8  /* largest aug_mix mixture_width */
#define PIPE_AUGMIX_DEPTH_MAX 10 /* largest aug_mix chain_depth */

enum pipe_kind {
	PIPE_IDENTITY = 0,
	PIPE_RANDOM_CROP,
	PIPE_CENTER_CROP,
	PIPE_HFLIP,
	PIPE_RESIZE,
	PIPE_RANDOM_WINDOW,
	PIPE_DECODE,
	PIPE_RANDOM_RESIZED_CROP,
	PIPE_NORMALIZE,
	/* packing of token documents (packing.h): the pipeline's only op */
	PIPE_CONCAT,
	PIPE_PACK,
	/* u8 HWC -> u8 CHW (PILToTensor's layout): a fixed image field's last op */
	PIPE_TO_CHW,
	/* pixel ops (augment_pixel.c): fixed u8 images, shape kept */
	PIPE_ADJUST_BRIGHTNESS,
	PIPE_ADJUST_CONTRAST,
	PIPE_ADJUST_SATURATION,
	PIPE_ADJUST_HUE,
	PIPE_ADJUST_SHARPNESS,
	PIPE_ROTATE,
	PIPE_AFFINE,
	PIPE_POSTERIZE,
	PIPE_SOLARIZE,
	PIPE_EQUALIZE,
	PIPE_AUTOCONTRAST,
	PIPE_INVERT,
	PIPE_GAUSSIAN_BLUR,
	PIPE_RGB_TO_GRAYSCALE,
	PIPE_ERASE,
	PIPE_COLOR_JITTER,
	PIPE_RANDOM_GRAYSCALE,
	PIPE_RANDOM_ROTATION,
	PIPE_RANDOM_AFFINE,
	PIPE_RANDOM_SOLARIZE,
	PIPE_RANDOM_POSTERIZE,
	PIPE_RANDOM_EQUALIZE,
	PIPE_RANDOM_AUTOCONTRAST,
	PIPE_RANDOM_ADJUST_SHARPNESS,
	PIPE_RANDOM_INVERT,
	PIPE_TRIVIAL_AUGMENT_WIDE,
	PIPE_RAND_AUGMENT,
	PIPE_AUTO_AUGMENT,
	PIPE_RANDOM_ERASING,
	/* torchvision's remaining image ops (augment_tv.c), pixel ops too */
	PIPE_VFLIP,
	PIPE_PAD,
	PIPE_RANDOM_PERSPECTIVE,
	PIPE_GAUSSIAN_NOISE,
	/* containers over the pixel ops that follow them (pipe_op.nsub) */
	PIPE_RANDOM_APPLY,
	PIPE_RANDOM_CHOICE,
	PIPE_RANDOM_ORDER,
	/* torchvision's AugMix: a pixel op (augment_augmix.c) */
	PIPE_AUG_MIX,
	/* batch ops (augment_mix.c): after the samples, on the whole batch */
	PIPE_MIX,
	PIPE_KIND_COUNT_,
};

/* rotate / affine interpolation. */
enum pipe_interp {
	PIPE_INTERP_NEAREST = 0,
	PIPE_INTERP_BILINEAR = 1,
};

/* pad's padding modes, as torchvision's padding_mode. */
enum pipe_pad_mode {
	PIPE_PAD_CONSTANT = 0,
	PIPE_PAD_EDGE,
	PIPE_PAD_REFLECT,
	PIPE_PAD_SYMMETRIC,
};

#define PIPE_MAX_SUB 8 /* most transforms of a random_apply / choice / order */
#define PIPE_SUB_BASIC_MAX 16 /* most basic ops a container's transforms make
			       * (augment_pixel.h's AUG_PX_MAX) */

/* auto_augment policies, as torchvision's AutoAugmentPolicy. */
enum pipe_policy {
	PIPE_POLICY_IMAGENET = 0,
	PIPE_POLICY_CIFAR10,
	PIPE_POLICY_SVHN,
};

/* normalize's layouts. */
enum pipe_layout {
	PIPE_LAYOUT_CHW = 0,
	PIPE_LAYOUT_HWC = 1,
};

/* One parsed op. Keys an op does not take stay 0. */
struct pipe_op {
	enum pipe_kind kind;
	uint32_t size;             /* random_crop, center_crop */
	uint32_t pad;              /* random_crop (default 0) */
	uint32_t p_ppb;            /* hflip: probability in parts per 10^9 */
	uint32_t h, w;             /* resize(h, w) (both 0 with short) */
	uint32_t short_side;       /* resize(short=N), 0 with h, w */
	uint32_t len;              /* random_window */
	uint32_t channels;         /* decode: 1 or 3 (default 3) */
	uint32_t scale_ppb[2];     /* random_resized_crop: scale_min, scale_max */
	uint64_t ratio_ppb[2];     /* random_resized_crop: ratio_min, ratio_max */
	int64_t mean_ppb[PIPE_MAX_C]; /* normalize: mean per channel, ppb */
	int64_t std_ppb[PIPE_MAX_C];  /* normalize: std per channel, ppb */
	uint32_t nmean, nstd;      /* normalize: values given */
	int dtype;                 /* normalize: FEED_DTYPE_F32, F16 or BF16 */
	uint32_t layout;           /* normalize: enum pipe_layout */
	/* Pixel ops. Decimals in parts per 10^9, signed where they may be. */
	int64_t factor_ppb;        /* adjust_*(factor), random_adjust_sharpness */
	int64_t angle_ppb;         /* rotate, affine: angle in degrees */
	int64_t degrees_ppb;       /* random_rotation, random_affine: +-degrees */
	int64_t translate_ppb[2];  /* affine: translate_x, translate_y (pixels) */
	int64_t translate_frac_ppb; /* random_affine: translate (of the side) */
	int64_t scale_f_ppb;       /* affine: scale */
	int64_t ascale_ppb[2];     /* random_affine: scale_min, scale_max */
	int64_t shear_ppb[2];      /* affine: shear_x, shear_y (degrees) */
	int64_t shear_r_ppb;       /* random_affine: shear range +-degrees (x) */
	uint32_t interp;           /* rotate, affine, random_*: enum pipe_interp */
	uint32_t fill;             /* rotate, affine, random_*: fill value 0..255 */
	uint32_t bits;             /* posterize, random_posterize: 1..8 */
	uint32_t threshold;        /* solarize, random_solarize: 0..255 */
	uint32_t ksize;            /* gaussian_blur: odd kernel_size */
	int64_t sigma_ppb[2];      /* gaussian_blur: sigma_min, sigma_max (equal
				    * when sigma fixes it) */
	bool sigma_fixed;          /* gaussian_blur: sigma= given */
	uint32_t out_c;            /* rgb_to_grayscale: num_output_channels 1|3 */
	uint32_t ei, ej;           /* erase: top row i, left column j (h, w above) */
	uint32_t value;            /* erase, random_erasing: fill 0..255 */
	bool value_random;         /* random_erasing: value=random (normal draws) */
	int64_t jitter_ppb[4];     /* color_jitter: brightness, contrast,
				    * saturation, hue */
	uint32_t nbins;            /* trivial/rand_augment: num_magnitude_bins */
	uint32_t num_ops;          /* rand_augment */
	uint32_t magnitude;        /* rand_augment: bin index */
	uint32_t policy;           /* auto_augment: enum pipe_policy */
	int64_t eratio_ppb[2];     /* random_erasing: ratio_min, ratio_max */
	int64_t escale_ppb[2];     /* random_erasing: scale_min, scale_max */
	uint32_t seq_len;          /* concat, pack: tokens per row */
	uint32_t pad_id;           /* pack: padding token (default 0) */
	uint32_t window;           /* pack: documents per window (default 1000) */
	/* torchvision's forms and the ops of augment_tv.c */
	uint32_t antialias;        /* resize, random_resized_crop: 0 not given,
				    * 1 False, 2 True (checked in planning) */
	bool fill_set;             /* rotate, affine: fill= given; without it no
				    * mask blend, as F.rotate's fill=None */
	uint32_t padding[4];       /* pad: left, top, right, bottom */
	uint32_t padding_mode;     /* pad: enum pipe_pad_mode */
	int64_t distortion_ppb;    /* random_perspective: distortion_scale */
	bool clip;                 /* gaussian_noise: clamp to [0, 1] */
	bool exact;                /* decode: at full scale, never a reduced DCT
				    * scale (bit-exact with a full decode) */
	uint32_t nevalue;          /* random_erasing: values given (1 or one per
				    * channel) */
	int64_t evalue_ppb[PIPE_MAX_C]; /* random_erasing: the values as decimals
				    * (after normalize: in normalised units) */
	uint32_t nsub;             /* random_apply/choice/order: the next nsub
				    * ops of the spec are its transforms */
	bool sub;                  /* a transform of the container before it */
	uint32_t nwts;             /* random_choice: weights given (0: uniform) */
	uint32_t wts_ppb[PIPE_MAX_SUB]; /* random_choice: p per transform */
	uint32_t severity;         /* aug_mix: 1..10 */
	uint32_t mix_width;        /* aug_mix: mixture_width, 1..PIPE_AUGMIX_WIDTH_MAX */
	int32_t chain_depth;       /* aug_mix: -1 (1..3 drawn) or 1..10 */
	int64_t alpha_ppb;         /* aug_mix: the Dirichlet / Beta alpha, > 0 */
	bool all_ops;              /* aug_mix: brightness, color, contrast,
				    * sharpness too */
	uint32_t linspace;         /* trivial/rand/auto_augment, aug_mix: the
				    * magnitude bins' linspace rounding twice
				    * (0, plain) or once (1, fused: torch 2.x
				    * with AVX2 or AVX-512) */
	uint32_t hue_cast;         /* adjust_hue, color_jitter: back to uint8 as
				    * torchvision 0.14 (0: x * 255 truncated) or
				    * later ones (1: x * 255.999, convert_image_dtype) */
	int64_t mixup_ppb;         /* mix: mixup_alpha (0: off) */
	int64_t cutmix_ppb;        /* mix: cutmix_alpha (0: off) */
	uint32_t switch_ppb;       /* mix: switch_prob (cutmix's share, both on) */
	uint32_t num_classes;      /* mix: the soft labels' width */
	uint32_t smoothing_ppb;    /* mix: label_smoothing, in [0, 1) */
	char field[FMT_NAME_MAX];  /* field=NAME, "" for the default */
};

/* A parsed pipeline, independent of any dataset. */
struct pipe_spec {
	uint32_t nops;             /* 1 .. PIPE_MAX_OPS */
	struct pipe_op ops[PIPE_MAX_OPS];
};

/* Parses text (NUL-terminated, at most PIPE_TEXT_MAX bytes) into *ret_spec
 * (written only on success). Returns 0 or -EINVAL with err naming op and
 * key (err may be NULL). */
int pipe_parse(const char *text, struct pipe_spec *ret_spec, struct feed_err *err);

/* The op's name ("random_crop"); static string. */
const char *pipe_kind_name(enum pipe_kind kind);

/* One line describing op kind k for `feedd --list-ops`: its name and
 * keys with defaults, e.g. "hflip(p=0.5, field)". Writes at most cap
 * bytes (NUL-terminated); returns the length, or -EINVAL when k names no
 * op (k from 0 up to the first -EINVAL lists every op). */
int pipe_op_usage(uint32_t k, char *buf, size_t cap);

/* Writes spec's canonical text into buf (NUL-terminated): ops joined by
 * " | ", keys in a fixed order with defaults filled, numbers canonical
 * ("p=0.5"), field=NAME only where the text gave one. Returns its length,
 * or -ENOSPC if cap is too small (PIPE_CANON_MAX always suffices). */
int pipe_spec_canonical(const struct pipe_spec *spec, char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* Planning                                                            */

enum pipe_stage_kind {
	PIPE_STAGE_GEO = 0,   /* a run of random_crop / center_crop / hflip: one pass */
	PIPE_STAGE_RESIZE,    /* one bilinear resize */
	PIPE_STAGE_WINDOW,    /* a run of random_window: one copy */
	PIPE_STAGE_IMAGE,     /* decode and/or an antialiased resample: decode, the
			       * ops up to the one that fixes the size, trailing
			       * hflips; or random_resized_crop / resize(short) on a
			       * fixed image, with trailing hflips */
	PIPE_STAGE_NORMALIZE, /* normalize: u8 HWC -> f32/f16/bf16 (kernels' twin) */
	PIPE_STAGE_PIXEL,     /* a run of pixel ops (colour, filters, rotate,
			       * affine, erase, the auto-augment policies) on a
			       * fixed u8 image: augment_pixel.c */
	PIPE_STAGE_CHW,       /* to_chw: u8 HWC -> u8 CHW, one transposing copy */
};

/* Shape of a field before and after one op (images: h, w, c; windows:
 * elems, 0 = variable length). */
struct pipe_dims {
	uint32_t in_h, in_w, out_h, out_w; /* decoded images: the largest */
	uint32_t c;                        /* images: channels after the op */
	uint32_t in_c;                     /* pixel ops: channels before the op */
	uint64_t in_elems, out_elems;
};

/* Consecutive ops of one field run as one stage. */
struct pipe_stage {
	enum pipe_stage_kind kind;
	uint32_t field;            /* schema field index */
	uint32_t first, count;     /* plan->stage_ops[first .. first+count) */
	uint32_t in_h, in_w;       /* images: stage input */
	uint32_t out_h, out_w;     /* images: stage output */
	uint32_t c;                /* images: channels (1 for rank 2) */
	uint32_t in_c;             /* pixel stages: input channels (grayscale
				    * may make c smaller) */
	uint64_t in_elems;         /* windows: input elements, 0 = variable */
	uint64_t out_elems;        /* windows: output elements */
	size_t elem_bytes;         /* windows: bytes per element */
	size_t out_bytes;          /* bytes the stage writes */
	bool decode;               /* image: the input is encoded (decode op first) */
	struct feed_convert cv;    /* normalize: the conversion */
	size_t px_img_bytes;       /* pixel stages: the largest image any op of
				    * the stage reads or writes (pad grows it) */
	size_t px_mix_off;         /* pixel stages with aug_mix: where its
				    * scratch (three images and a float image)
				    * starts in the stage's scratch; 0 without */
};

/* The batch mix of a plan (the op `mix`, pipeline's last): mixup / cutmix
 * of the normalized image field and soft labels from the field `label`,
 * as kernels/mix.h computes them for the Loader's conversion. */
struct pipe_bmix {
	bool on;                   /* the pipeline ends with mix */
	uint32_t op;               /* its op index */
	uint32_t img_field;        /* the normalized image field (out schema) */
	uint32_t label_field;      /* `label`: in an integer, out f32 [num_classes] */
	uint32_t label_type;       /* kernels/mix.h enum feed_mix_label_type */
	uint32_t label_bytes;      /* the label's size in the dataset */
	struct feed_convert cv;    /* the normalize's conversion (dtype, layout) */
	double mixup_alpha, cutmix_alpha, switch_prob, label_smoothing;
	uint32_t num_classes;
};

/* A pipeline checked against a schema. Read-only for users (all fields
 * public for augment.c and tests); about 23 KiB; immutable once planned. */
struct pipe_plan {
	struct pipe_spec spec;     /* as parsed, every op's field resolved */
	int op_field[PIPE_MAX_OPS];  /* field index of op i, -1 = none (identity) */
	struct pipe_dims dims[PIPE_MAX_OPS]; /* shape around op i */
	struct fmt_schema in;      /* the dataset's schema */
	struct fmt_schema out;     /* the batch schema: shapes after the ops;
				    * out.fields[f].max_bytes = largest output */
	uint32_t nstages;
	struct pipe_stage stages[PIPE_MAX_OPS]; /* grouped by field, in op order */
	uint32_t stage_ops[PIPE_MAX_OPS]; /* op indices, by stage */
	uint32_t field_stage[FMT_MAX_FIELDS];  /* first stage of field f */
	uint32_t field_nstages[FMT_MAX_FIELDS]; /* 0 = passthrough */
	size_t inter_bytes;        /* largest intermediate stage output */
	size_t table_bytes;        /* resize column table */
	size_t img_scratch_bytes;  /* img_resample_u8() scratch, largest stage */
	size_t pix_scratch_bytes;  /* pixel stages: two images and a float plane */
	size_t scratch_bytes;      /* = pipe_scratch_bytes() */
	/* Decoders the worker passes to aug_apply_img(): limits covering
	 * every decoded field (max_pixels 0 when no field records it), and
	 * bit c set when some decode makes c channels. */
	struct img_limits dec_lim;
	uint32_t dec_channels_mask;
	char canonical[PIPE_CANON_MAX]; /* canonical text, fields resolved */
	uint64_t hash;             /* xxh64(canonical), seed 0 */
	/* mix (on = false without one): the batch op run after the samples */
	struct pipe_bmix bmix;
	/* concat / pack (mode PK_MODE_NONE otherwise): the rows' shape, and
	 * the dataset's token field they read */
	struct pk_spec pack;
	uint32_t pack_field;
};

/* Checks spec against schema `in` and plans it into *ret_plan (about
 * 23 KiB: better on the heap than on a small stack; zeroed on failure).
 * Returns 0 or -EINVAL naming op and key: field missing or not image-like
 * / not a sequence / not encoded images, crop larger than the padded image,
 * window longer than the longest sequence, output larger than 4 GiB, an op
 * that needs a fixed size on decoded images, an op after normalize, mean or
 * std not one value per channel; or naming the field and the missing op
 * when decoded images still vary in size at the end. */
int pipe_plan(const struct pipe_spec *spec, const struct fmt_schema *in,
	      struct pipe_plan *ret_plan, struct feed_err *err);

/* Parse + plan in one call. */
int pipe_plan_text(const char *text, const struct fmt_schema *in, struct pipe_plan *ret_plan,
		   struct feed_err *err);

/* Scratch a worker passes to aug_apply() for this plan, in bytes (0 when
 * no op needs it), in memory aligned to at least 16 bytes (malloc's: the
 * stages keep tables of floats and integers in it); 64 is best. */
size_t pipe_scratch_bytes(const struct pipe_plan *plan);

/* The 64-bit hash resume tokens and groups compare: xxh64 of the
 * canonical text with fields resolved. */
uint64_t pipe_hash(const struct pipe_plan *plan);

#endif
