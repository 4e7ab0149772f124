/*
 * augment_pxrun.c: runs one basic op (struct aug_px_op) on the stage's
 * image: the dispatch over the files that hold the pixel ops (colour,
 * filters, geometry, torchvision's later ops). Called by the stage driver
 * (augment_pixel.c) and by AugMix's chains (augment_augmix.c).
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include "augment_pixel.h"

void px_run(struct aug_px_img *im, const struct aug_px_op *o)
{
	switch (o->kind) {
	case AX_IDENTITY: break;
	case AX_BLUR: px_blur(im, o->ksize, o->f); break;
	case AX_SHARPNESS: px_sharpness(im, o->f); break;
	case AX_AFFINE: px_affine(im, &o->af); break;
	case AX_VFLIP:
	case AX_PAD:
	case AX_PERSPECTIVE:
	case AX_NOISE: px_tv(im, o); break;
	default: px_color(im, o); break;
	}
}
