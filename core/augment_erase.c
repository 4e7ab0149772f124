/*
 * augment_erase.c: random_erasing after normalize (RandomErasing on the
 * float tensor): op i's box drawn as the pixel op's (augment_auto.c), its
 * values written in normalised units into the stage's float output, in the
 * normalize op's dtype and layout. augment.c's stage driver calls it.
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include "augment.h"
#include "augment_pixel.h"
#include "convert.h"
#include "philox.h"

static void store_float(void *dst, size_t at, int dtype, float v)
{
	if (dtype == FEED_DTYPE_F32)
		((float *)dst)[at] = v;
	else if (dtype == FEED_DTYPE_F16)
		((uint16_t *)dst)[at] = feed_f32_to_f16(v);
	else
		((uint16_t *)dst)[at] = feed_f32_to_bf16(v);
}

void aug_erase_normalized(const struct pipe_plan *p, const struct pipe_stage *st, uint32_t i,
			  const struct aug_ctx *ctx, void *dst)
{
	const struct pipe_op *op = &p->spec.ops[i];
	const struct pipe_op *norm = &p->spec.ops[p->stage_ops[st->first]];
	uint32_t h = st->in_h, w = st->in_w, c = st->c, k = 0;
	struct aug_px_op box[AUG_PX_MAX];

	if (aug_px_expand(p, i, ctx, h, w, c, box) == 0)
		return; /* p said no, or no try fitted */
	const struct aug_px_op *o = &box[0];
	for (uint32_t ch = 0; ch < c; ch++) /* channel-major, as the value tensor */
		for (uint32_t y = o->ei; y < o->ei + o->eh; y++)
			for (uint32_t x = o->ej; x < o->ej + o->ew; x++, k++) {
				float v = op->value_random
						  ? px_normal(ctx, i, k)
						  : (float)((double)op->evalue_ppb[op->nevalue == 1 ? 0 : ch] /
							    1e9);
				size_t at = norm->layout == PIPE_LAYOUT_CHW
						    ? ((size_t)ch * h + y) * w + x
						    : ((size_t)y * w + x) * c + ch;
				store_float(dst, at, norm->dtype, v);
			}
}
