/*
 * pipeline_doc.c: the one-line description of every pipeline op (see
 * pipeline_doc.h), indexed by enum pipe_kind like pipeline.c's table, so
 * a new op kind without a line here shows "" (and the test of
 * feedclient.ops() fails, naming it) rather than a line of another op.
 */
#include "pipeline_doc.h"

#include "pipeline.h"

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
