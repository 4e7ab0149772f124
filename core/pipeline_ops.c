/*
 * pipeline_ops.c: the pipeline op table: each op's name, the keys it takes
 * (in canonical order), which are required, their defaults, the names a
 * key's value may take, and the one line that says what the op does
 * (pipeline_doc.h: `feedd --list-ops`, feedclient.ops()).
 *
 * Threads: pure data and functions, any thread.
 * Never: call the other pipeline_*.c files (they call it).
 */
#include "pipeline_priv.h"
#include "pipeline_doc.h"
#include "pipeline_tv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>


const char *const pipe_key_names[PK_COUNT_] = {
	"size", "pad", "p", "h", "w", "len", "field", "short", "channels", "scale_min",
	"scale_max", "ratio_min", "ratio_max", "mean", "std", "dtype", "layout", "factor",
	"angle", "interpolation", "fill", "translate_x", "translate_y", "scale", "shear_x",
	"shear_y", "bits", "threshold", "kernel_size", "sigma", "sigma_min", "sigma_max",
	"num_output_channels", "i", "j", "value", "brightness", "contrast", "saturation", "hue",
	"degrees", "translate", "shear", "num_magnitude_bins", "num_ops", "magnitude", "policy",
	"seq_len", "pad_id", "window",
	"antialias", "padding", "padding_mode", "distortion_scale", "clip", "transforms", "exact",
	"mixup_alpha", "cutmix_alpha", "switch_prob", "num_classes", "label_smoothing",
	"severity", "mixture_width", "chain_depth", "alpha", "all_ops", "linspace", "hue_cast"};

const struct pipe_op_desc pipe_ops[] = {
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
	[PIPE_ADJUST_HUE] = {"adjust_hue", {PK_FACTOR, PK_HUE_CAST, PK_FIELD}, 2, PKB(PK_FACTOR)},
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
			       {PK_BRIGHTNESS, PK_CONTRAST, PK_SATURATION, PK_HUE, PK_HUE_CAST,
				PK_FIELD},
			       5, 0},
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
	[PIPE_TRIVIAL_AUGMENT_WIDE] = {"trivial_augment_wide",
				       {PK_NUM_MAGNITUDE_BINS, PK_LINSPACE, PK_FIELD}, 2, 0},
	[PIPE_RAND_AUGMENT] = {"rand_augment",
			       {PK_NUM_OPS, PK_MAGNITUDE, PK_NUM_MAGNITUDE_BINS, PK_LINSPACE,
				PK_FIELD},
			       4, 0},
	[PIPE_AUTO_AUGMENT] = {"auto_augment", {PK_POLICY, PK_LINSPACE, PK_FIELD}, 2, 0},
	[PIPE_RANDOM_ERASING] = {"random_erasing",
				 {PK_P, PK_SCALE_MIN, PK_SCALE_MAX, PK_RATIO_MIN, PK_RATIO_MAX,
				  PK_VALUE, PK_FIELD},
				 6, 0},
	PIPE_TV_OP_ROWS
	[PIPE_AUG_MIX] = {"aug_mix",
			  {PK_SEVERITY, PK_MIXTURE_WIDTH, PK_CHAIN_DEPTH, PK_ALPHA, PK_ALL_OPS,
			   PK_INTERPOLATION, PK_FILL, PK_LINSPACE, PK_FIELD},
			  8, 0},
	[PIPE_MIX] = {"mix",
		      {PK_NUM_CLASSES, PK_MIXUP_ALPHA, PK_CUTMIX_ALPHA, PK_SWITCH_PROB,
		       PK_LABEL_SMOOTHING, PK_FIELD},
		      5, PKB(PK_NUM_CLASSES)},
};
_Static_assert(sizeof(pipe_ops) / sizeof(pipe_ops[0]) == PIPE_KIND_COUNT_,
	       "one row per op kind");

const char *pipe_kind_name(enum pipe_kind kind)
{
	return (unsigned)kind < PIPE_NKINDS ? pipe_ops[kind].name : "invalid";
}

const char *const pipe_dtype_names[] = {"f32", "f16", "bf16", NULL};
const int pipe_dtypes[] = {FEED_DTYPE_F32, FEED_DTYPE_F16, FEED_DTYPE_BF16};
const char *const pipe_layout_names[] = {"chw", "hwc", NULL};
const char *const pipe_interp_names[] = {"nearest", "bilinear", NULL};
const char *const pipe_policy_names[] = {"imagenet", "cifar10", "svhn", NULL};

const char *const pipe_bool_names[] = {"false", "true", "False", "True", "0", "1", NULL};
const char *const pipe_pad_mode_names[] = {"constant", "edge", "reflect", "symmetric", NULL};
const char *const pipe_linspace_names[] = {"plain", "fused", NULL};
const char *const pipe_hue_cast_names[] = {"mul255", "scaled", NULL};

/* p in parts per 1e9 as the shortest decimal: 0, 1, 0.5, -1.25. */
void pipe_format_ppb(int64_t ppb, char out[32])
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

void pipe_op_defaults(struct pipe_op *op)
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


/* What each op does, in one line (pipe_op_summary()); a kind without a
 * line shows "" (and the test of feedclient.ops() fails, naming it). */
static const char *const pipe_op_summaries[PIPE_KIND_COUNT_] = {
	[PIPE_IDENTITY] = "passes the field through unchanged",
	[PIPE_RANDOM_CROP] = "crops a random size x size window, after zero padding of pad "
			     "(RandomCrop)",
	[PIPE_CENTER_CROP] = "crops the central size x size window (CenterCrop)",
	[PIPE_HFLIP] = "flips left-right with probability p (RandomHorizontalFlip)",
	[PIPE_RESIZE] = "resizes to h x w, or the shorter side to short (Resize)",
	[PIPE_RANDOM_WINDOW] = "takes a random window of len elements of a sequence",
	[PIPE_DECODE] = "decodes a JPEG or PNG into an HWC uint8 image of channels channels",
	[PIPE_RANDOM_RESIZED_CROP] = "crops a random area and aspect ratio, resized to size "
				     "(RandomResizedCrop)",
	[PIPE_NORMALIZE] = "(x / 255 - mean) / std as f32, f16 or bf16, in chw or hwc layout "
			   "(ToDtype + Normalize)",
	[PIPE_CONCAT] = "concatenates token documents into rows of seq_len tokens",
	[PIPE_TO_CHW] = "moves a u8 image's channels first, HWC to CHW (PILToTensor, "
			"ToImage)",
	[PIPE_PACK] = "packs whole token documents into rows of seq_len tokens, best fit over "
		      "a window, padded with pad_id",
	[PIPE_ADJUST_BRIGHTNESS] = "multiplies the brightness by factor",
	[PIPE_ADJUST_CONTRAST] = "blends with the mean grey level by factor",
	[PIPE_ADJUST_SATURATION] = "blends with the greyscale image by factor",
	[PIPE_ADJUST_HUE] = "shifts the hue by factor of a turn (-0.5 .. 0.5)",
	[PIPE_ADJUST_SHARPNESS] = "blends with a smoothed image by factor",
	[PIPE_ROTATE] = "rotates by angle degrees counter-clockwise about the centre",
	[PIPE_AFFINE] = "applies rotation, translation, scale and shear about the centre",
	[PIPE_POSTERIZE] = "keeps the top bits bits of each channel",
	[PIPE_SOLARIZE] = "inverts the levels at or above threshold",
	[PIPE_EQUALIZE] = "equalises each channel's histogram",
	[PIPE_AUTOCONTRAST] = "stretches each channel to the full 0..255 range",
	[PIPE_INVERT] = "inverts every level (255 - x)",
	[PIPE_GAUSSIAN_BLUR] = "blurs with a Gaussian kernel of kernel_size, sigma fixed or drawn "
			       "in [sigma_min, sigma_max] (GaussianBlur)",
	[PIPE_RGB_TO_GRAYSCALE] = "converts to greyscale with 1 or 3 output channels (Grayscale)",
	[PIPE_ERASE] = "sets the h x w rectangle at (i, j) to value",
	[PIPE_COLOR_JITTER] = "randomly changes brightness, contrast, saturation and hue, in a "
			      "random order (ColorJitter)",
	[PIPE_RANDOM_GRAYSCALE] = "converts to greyscale with probability p (RandomGrayscale)",
	[PIPE_RANDOM_ROTATION] = "rotates by an angle drawn in [-degrees, degrees] "
				 "(RandomRotation)",
	[PIPE_RANDOM_AFFINE] = "applies a random rotation, translation, scale and shear "
			       "(RandomAffine)",
	[PIPE_RANDOM_SOLARIZE] = "solarizes with probability p (RandomSolarize)",
	[PIPE_RANDOM_POSTERIZE] = "posterizes with probability p (RandomPosterize)",
	[PIPE_RANDOM_EQUALIZE] = "equalises with probability p (RandomEqualize)",
	[PIPE_RANDOM_AUTOCONTRAST] = "autocontrasts with probability p (RandomAutocontrast)",
	[PIPE_RANDOM_ADJUST_SHARPNESS] = "adjusts sharpness by factor with probability p "
					 "(RandomAdjustSharpness)",
	[PIPE_RANDOM_INVERT] = "inverts with probability p (RandomInvert)",
	[PIPE_TRIVIAL_AUGMENT_WIDE] = "applies one random op at a random strength "
				      "(TrivialAugmentWide)",
	[PIPE_RAND_AUGMENT] = "applies num_ops random ops at strength magnitude (RandAugment)",
	[PIPE_AUTO_AUGMENT] = "applies a random sub-policy of the imagenet, cifar10 or svhn "
			      "policy (AutoAugment)",
	[PIPE_RANDOM_ERASING] = "with probability p erases a random rectangle to value; after "
				"normalize, in normalised space (RandomErasing)",
	[PIPE_VFLIP] = "flips top-bottom with probability p (RandomVerticalFlip)",
	[PIPE_PAD] = "pads the borders by padding with fill, or edge, reflect or symmetric "
		     "(Pad)",
	[PIPE_RANDOM_PERSPECTIVE] = "with probability p warps the corners by up to "
				    "distortion_scale (RandomPerspective)",
	[PIPE_GAUSSIAN_NOISE] = "adds Gaussian noise of mean and sigma on the 0..1 scale, "
				"clipped (GaussianNoise)",
	[PIPE_RANDOM_APPLY] = "applies its transforms with probability p (RandomApply)",
	[PIPE_RANDOM_CHOICE] = "applies one of its transforms, drawn with weights p "
			       "(RandomChoice)",
	[PIPE_RANDOM_ORDER] = "applies its transforms in a random order (RandomOrder)",
	[PIPE_AUG_MIX] = "blends mixture_width chains of severity-scaled augmentations with the "
			 "image, weights drawn from Dirichlet and Beta(alpha) (AugMix)",
	[PIPE_MIX] = "the batch's last op: MixUp or CutMix of the normalized batch, labels made "
		     "soft over num_classes (MixUp, CutMix)",
};

const char *pipe_op_summary(uint32_t k)
{
	if (k >= PIPE_KIND_COUNT_)
		return NULL;
	return pipe_op_summaries[k] ? pipe_op_summaries[k] : "";
}
