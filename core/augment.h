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
 * Randomness: draw d of op i (0-based index in the pipeline) for a sample
 * is feed_rand_u32(seed, epoch, sample, i, d) (philox.h): random_crop uses
 * draw 0 for the top and draw 1 for the left offset (torchvision draws i
 * then j), hflip draw 0, random_window draw 0. Nothing else is random.
 *
 * Threads: pure functions; any number of threads may share one plan, each
 * with its own scratch. Never allocates, blocks or prints.
 */
#ifndef FEED_AUGMENT_H
#define FEED_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"
#include "pipeline.h"

/* Which sample is being built: the draws' key. */
struct aug_ctx {
	uint64_t seed;    /* the stream's seed */
	uint64_t epoch;   /* epoch number */
	uint64_t sample;  /* dataset sample index (not the position) */
};

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

/*
 * Builds one sample: in[f] and out[f] for every field f of the plan's input
 * schema (plan->in.nfields entries each). scratch holds
 * pipe_scratch_bytes(plan) bytes (may be NULL when that is 0); its content
 * is garbage afterwards. Outputs may not overlap inputs or scratch.
 * Returns 0, or
 *   -EINVAL  a fixed field's record has the wrong size, a variable field is
 *            not a whole number of elements, or a sequence is shorter than
 *            its random_window (naming sample, field and op);
 *   -ENOBUFS an output's cap is too small.
 * On error the outputs hold garbage. err may be NULL.
 */
int aug_apply(const struct pipe_plan *plan, const struct aug_ctx *ctx, const struct aug_in *in,
	      const struct aug_out *out, void *scratch, struct feed_err *err);

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
