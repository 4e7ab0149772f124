/*
 * augment_pixel.c: runs a PIXEL stage (pipeline.h) on one sample: each op
 * expanded into basic ops for this sample (augment_auto.c), each basic op
 * run on the image in turn (augment_pxrun.c), table ops composed
 * (augment_color.c), the result left in the stage's destination.
 *
 * Buffers: the stage's source is read-only; passes write to the
 * destination when the current shape fits it, else to one of two scratch
 * images (plan->pix_scratch_bytes, which also holds the blur's float
 * plane). A stage of table ops only reads the source once and writes the
 * destination once.
 *
 * Threads: pure, one sample on the caller's thread. Never allocates,
 * blocks or prints.
 */
#include <string.h>

#include "augment_pixel.h"

void aug_pixel_stage(const struct pipe_plan *p, const struct pipe_stage *st,
		     const struct aug_ctx *ctx, const uint8_t *src, uint8_t *dst, uint8_t *scratch)
{
	size_t al = (st->px_img_bytes + 63) & ~(size_t)63; /* pipeline_plan.c's layout */
	struct aug_px_img im = {.cur = src, .dst = dst, .dst_bytes = st->out_bytes,
				.buf = {scratch, scratch + al}, .fbuf = (float *)(void *)(scratch + 2 * al),
				.h = st->in_h, .w = st->in_w, .c = st->in_c};
	struct aug_px_op ops[AUG_PX_MAX];

	for (uint32_t j = 0; j < st->count; j++) {
		uint32_t i = p->stage_ops[st->first + j];
		if (p->spec.ops[i].kind == PIPE_AUG_MIX) { /* a blend of chains, not a list */
			struct aug_mix_draws d;
			aug_mix_draw(&p->spec.ops[i], i, ctx, im.h, im.w, &d);
			px_aug_mix(&im, &p->spec.ops[i], &d, scratch + st->px_mix_off, al);
			continue;
		}
		uint32_t n = aug_px_expand(p, i, ctx, im.h, im.w, im.c, ops);
		for (uint32_t k = 0; k < n; k++)
			px_run(&im, &ops[k]);
	}
	px_flush(&im);
	if (im.cur != dst)
		memcpy(dst, im.cur, st->out_bytes);
}
