/*
 * augment.h: runs a planned pipeline (pipeline.h) on one sample, writing
 * every output field straight into its destination (the batch slot).
 *
 * Owns: the pixel and element work of the ops, with torchvision's
 * semantics, and the mapping from generator draws to op parameters.
 * Consecutive random_crop / center_crop / hflip on a field are one pass
 * from the source record to the destination (crop window, zero padding and
 * flip composed, rows copied once, pixels reversed with their channels
 * when flipped); consecutive random_window ops are one copy. resize is a
 * pass of its own (through scratch when other ops follow or precede it).
 *
 * Image stages (pipeline.h PIPE_STAGE_IMAGE) run decode, the ops up to the
 * one that fixes the size and trailing hflips as one pass: the crop box
 * and the flip are worked out from the image's header (img_probe: no
 * pixels), in the source's full-resolution coordinates; then the box is
 * decoded at the largest DCT scale that keeps it at least twice the
 * output's size (img_scale_for), and img_resample_u8() resamples it
 * straight into the destination, mirrored when flipped. decode followed only by
 * center_crop (and hflips) copies pixels, zero-padding as torchvision's
 * CenterCrop does. resize(short=N) then center_crop resamples only the
 * crop's part of the image: inside the crop the same filter as Resize(N)
 * then CenterCrop, at the crop's edge the filter stops at the edge (as
 * torchvision's resized_crop does) instead of reading the pixels just
 * outside it. normalize runs kernels/convert.h's CPU twin, so its bits
 * equal the GPU conversion's.
 *
 * Randomness: draw d of op i (0-based index in the pipeline) for a sample
 * is feed_rand_u32(seed, epoch, sample, i, d) (philox.h): random_crop uses
 * draw 0 for the top and draw 1 for the left offset (torchvision draws i
 * then j), hflip draw 0, random_window draw 0; random_resized_crop uses
 * draws 2t (scale) and 2t+1 (log-ratio) of try t = 0..9, then draw 20 for
 * the top and 21 for the left (aug_rrc_box()). The draws depend only on
 * the header's width and height, never on how the box is decoded. The
 * pixel ops (torchvision's colour, filter, geometric and auto-augment ops:
 * PIPE_STAGE_PIXEL, augment_pixel.h) draw as augment_auto.c lists. Nothing
 * else is random.
 *
 * Threads: pure functions; any number of threads may share one plan, each
 * with its own scratch. Never allocates, blocks or prints.
 */
#ifndef FEED_AUGMENT_H
#define FEED_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment_ctx.h"
#include "feed_err.h"
#include "image.h"
#include "pipeline.h"


/* One input field of the record: len bytes at data (a fixed field's
 * record size; a variable field's bytes). Borrowed for the call. */
struct aug_in {
	const void *data;
	size_t len;
};

/* One output field: cap bytes at dst (plan->out.fields[f].max_bytes
 * suffice); *ret_len (if not NULL) gets the bytes written. */
struct aug_out {
	void *dst;
	size_t cap;
	size_t *ret_len;
};

/* What a worker lends image stages: one decoder per channel count the
 * plan decodes to (plan->dec_channels_mask), each made by
 * img_decoder_new() for at least plan->dec_lim. Borrowed for the call;
 * used by one thread at a time. */
struct aug_img {
	struct img_decoder *dec1;  /* channels=1, or NULL */
	struct img_decoder *dec3;  /* channels=3, or NULL */
	const struct aug_pre *pre; /* this sample's image decoded elsewhere, or NULL */
};

/* An image decoded ahead of its sample (hybrid JPEG decode: nvJPEG on a
 * GPU, daemon/gpu/hybrid.c): the box aug_image_box() gave, decoded at full
 * scale. The image stage of that field uses it in place of its own decode
 * when the box is the one it would decode; else it decodes as ever. The
 * draws are the same either way (a function of the aug_ctx alone). */
struct aug_pre {
	uint32_t field;            /* the schema field */
	struct img_box box;        /* full-resolution coordinates */
	struct img_view view;      /* box.w x box.h pixels of the stage's channels */
};

/* The box field f's decode would decode for the sample ctx names, from
 * its encoded bytes (src, len): 1 and *ret_box, *ret_c (channels) when f
 * is decoded from a JPEG and the crop reaches the image; 0 when there is
 * nothing to decode ahead (not a decoded field, not a JPEG, a crop wholly
 * in the padding, a header the stage will refuse). Pure. */
int aug_image_box(const struct pipe_plan *plan, uint32_t f, const struct aug_ctx *ctx,
		  const void *src, size_t len, struct img_box *ret_box, uint32_t *ret_c);

/*
 * Builds one sample: in[f] and out[f] for every field f of the plan's input
 * schema (plan->in.nfields entries each). scratch holds
 * pipe_scratch_bytes(plan) bytes, aligned as that says (may be NULL when
 * it is 0); its content is garbage afterwards. Outputs may not overlap
 * inputs or scratch.
 * Returns 0, or
 *   -EINVAL  a fixed field's record has the wrong size, a variable field is
 *            not a whole number of elements, or a sequence is shorter than
 *            its random_window (naming sample, field and op);
 *   -ENOBUFS an output's cap is too small.
 * On error the outputs hold garbage. err may be NULL.
 */
int aug_apply(const struct pipe_plan *plan, const struct aug_ctx *ctx, const struct aug_in *in,
	      const struct aug_out *out, void *scratch, struct feed_err *err);

/* aug_apply() for plans that decode: img lends the decoders (NULL is
 * allowed when the plan decodes nothing). Besides aug_apply()'s errors, a
 * record that is not a readable image returns the decoder's code (-EBADMSG
 * corrupt or truncated, -ENOTSUP a format or variant not decoded, -E2BIG
 * past the decoder's limits) with "sample N: field 'F': " and the
 * decoder's words; -EINVAL when img lacks a decoder the plan needs. */
int aug_apply_img(const struct pipe_plan *plan, const struct aug_ctx *ctx,
		  const struct aug_in *in, const struct aug_out *out, void *scratch,
		  const struct aug_img *img, struct feed_err *err);

/* ------------------------------------------------------------------ */
/* Draws to parameters (exposed so tests can recompute them).         */

/* A uniform integer in [0, n) from one 32-bit draw: floor(u * n / 2^32)
 * (multiply-shift; bias below n / 2^32). n >= 1. */
uint32_t aug_randint(uint32_t u, uint32_t n);

/* torchvision RandomCrop.get_params on the zero-padded image: *ret_top in
 * [0, h + 2*pad - size], *ret_left in [0, w + 2*pad - size], in padded
 * coordinates, from draws u_top and u_left. Requires size <= h + 2*pad and
 * size <= w + 2*pad. */
void aug_random_crop_offsets(uint32_t h, uint32_t w, uint32_t size, uint32_t pad,
			     uint32_t u_top, uint32_t u_left, uint32_t *ret_top,
			     uint32_t *ret_left);

/* torchvision CenterCrop's offset along one axis of length n for a crop of
 * `size`: int(round((n - size) / 2)) (Python round: ties to even) when
 * size <= n; when size > n torchvision first zero-pads (size - n) // 2 in
 * front, so the offset is -((size - n) / 2). */
int64_t aug_center_crop_offset(uint32_t n, uint32_t size);

/* torchvision RandomHorizontalFlip: flip when rand < p, rand the draw's
 * top 24 bits / 2^24 (feed_rand_unit_of()), p in parts per 10^9 (exact). */
bool aug_hflip_decision(uint32_t u, uint32_t p_ppb);

/*
 * torchvision RandomResizedCrop.get_params on an h x w image, from the 22
 * draws u[0..21] (see Randomness above): area = h * w; for t in 0..9:
 * target = area * U(scale_min, scale_max) (u[2t]), aspect =
 * exp(U(log ratio_min, log ratio_max)) (u[2t+1]), bw = round(sqrt(target *
 * aspect)), bh = round(sqrt(target / aspect)) (round half to even, as
 * Python's round); the first try with 0 < bw <= w and 0 < bh <= h gives
 * y = randint(0, h - bh + 1) (u[20]) and x = randint(0, w - bw + 1)
 * (u[21]). If none does, the centre crop of the whole image with its
 * aspect clamped to [ratio_min, ratio_max]. U(a, b) = a + (b - a) * u /
 * 2^32 in double. scale and ratio in parts per 10^9 as pipe_op keeps them.
 */
void aug_rrc_box(uint32_t h, uint32_t w, const uint32_t scale_ppb[2], const uint64_t ratio_ppb[2],
		 const uint32_t u[22], struct img_box *ret_box);

/* The 22 draws of random_resized_crop op `op` for a sample. */
void aug_rrc_draws(const struct aug_ctx *ctx, uint32_t op, uint32_t u[22]);

/* torchvision Resize(n) on an h x w image: the short side becomes n, the
 * long side int(n * long / short); a square becomes n x n. */
void aug_resize_short_dims(uint32_t h, uint32_t w, uint32_t n, uint32_t *ret_h, uint32_t *ret_w);

/* random_window's start in a sequence of n elements: in [0, n - len]. */
uint64_t aug_window_start(uint64_t n, uint64_t len, uint32_t u);

/*
 * Bilinear resize of an h x w x c u8 image to oh x ow x c: what torch's
 * interpolate(mode="bilinear", align_corners=False, antialias=False) gives
 * on a float copy of the image as a contiguous (1, C, H, W) tensor (what
 * torchvision's PILToTensor / read_image make), rounded half to even
 * (torch.round) and clamped. Half-pixel centres: src = (dst + 0.5) * in /
 * out - 0.5, clamped at 0; the second neighbour clamped at the edge.
 * torch's last float bit depends on its kernel, so this reproduces torch
 * 1.13's operations exactly: weights as compute_source_index_and_lambda
 * makes them (float scale, double source index, float weights); for c == 1
 * the channels-last kernel (products h_i * w_j in float, one rounding of the
 * four-term sum), for c > 1 the separable kernel (fmaf(a, w0, b * w1) along
 * rows, then the same between the two rows). Other torch versions can
 * differ by 1 where the exact value is within an ulp of a .5 tie.
 * table: 16 * ow bytes of scratch.
 */
void aug_resize_u8(const uint8_t *src, uint32_t h, uint32_t w, uint32_t c, uint8_t *dst,
		   uint32_t oh, uint32_t ow, void *table);

#endif
