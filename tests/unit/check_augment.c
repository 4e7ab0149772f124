/*
 * check_augment.c: unit tests of core/augment.c and core/philox.h:
 * Philox known-answer vectors, pure draws, draw -> parameter mappings
 * (crop offsets, center offsets with Python's rounding, flip rate, window
 * bounds), each op against hand-computed pixels on small images, fused
 * crop/flip runs equal to the ops run one at a time, bilinear resize
 * against hand-computed values, pass-through and errors.
 *
 * Also a probe for tests/python/test_feedclient_augment_ops.py:
 *   check_augment --pixel PIPELINE H W C SEED EPOCH SAMPLE
 * runs a pipeline of pixel ops on an H x W x C u8 image from stdin and
 * writes "out_h out_w out_c nops", one line per basic op the sample's
 * draws chose (augment_pixel.h: "op kind f bits ksize out_c angle tx ty
 * scale shx shy cx cy interp fill i j h w value random pad_l pad_t pad_r
 * pad_b pad_mode pc0..pc7 mean clip nomask"), then the bytes;
 *   check_augment --aug-mix PIPELINE H W C SEED EPOCH SAMPLE
 * runs a pipeline with aug_mix on an H x W x C u8 image from stdin and
 * writes "h w c", the first aug_mix's draws (augmix_probe), the bytes;
 *   check_augment --pixel-params PIPELINE H W C SEED N
 * writes those lines for samples 0..N-1 of epoch 0, each prefixed with
 * "sample ", without running the ops (for the parameter distributions).
 *
 * And a probe for tests/python/test_augment_torchvision.py:
 *   check_augment --probe PIPELINE H W C SEED EPOCH SAMPLE
 * reads an H x W x C u8 image on stdin and writes one text line
 * "top left flip out_h out_w" (the first random_crop's offsets in padded
 * coordinates and the first hflip's decision, -1 when absent) followed by
 * the output image bytes.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../images/fixture_file.h"
#include "augment.h"
#include "augment_pixel.h"
#include "check_util.h"
#include "convert.h"
#include "philox.h"

/* One u8 image field (rank 2 when c == 0, else H x W x C). */
static void image_schema(struct fmt_schema *s, uint32_t h, uint32_t w, uint32_t c)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 1;
	struct fmt_field *f = &s->fields[0];
	strcpy(f->name, "image");
	f->dtype = FEED_DTYPE_U8;
	f->rank = c ? 3 : 2;
	f->shape[0] = h;
	f->shape[1] = w;
	f->shape[2] = c;
	f->max_bytes = (uint64_t)h * w * (c ? c : 1);
}

static struct pipe_plan *plan_for(const char *text, const struct fmt_schema *s)
{
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};

	ck_assert_ptr_nonnull(p);
	ck_assert_msg(pipe_plan_text(text, s, p, &err) == 0, "'%s': %s", text, err.msg);
	return p;
}

/* Applies a one-field plan; returns the output length. */
static size_t apply1(const struct pipe_plan *p, const struct aug_ctx *ctx, const uint8_t *src,
		     size_t len, uint8_t *dst, size_t cap)
{
	void *scratch = malloc(pipe_scratch_bytes(p) + 1);
	size_t got = 0;
	struct aug_in in = {src, len};
	struct aug_out out = {dst, cap, &got};
	struct feed_err err = {0};

	ck_assert_msg(aug_apply(p, ctx, &in, &out, scratch, &err) == 0, "%s", err.msg);
	free(scratch);
	return got;
}

static void fill_image(uint8_t *img, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		img[i] = (uint8_t)(feed_rand_u32(seed, 0, i, 0, 0) >> 24);
}

/* ------------------------------------------------------------------ */
/* Philox and draws                                                    */

START_TEST(test_augment_philox_known_answers)
{
	static const uint32_t ctr[3][4] = {
		{0, 0, 0, 0},
		{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
		{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
	static const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
	static const uint32_t want[3][4] = {
		{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
		{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
		{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};

	for (int v = 0; v < 3; v++) {
		uint32_t out[4];
		philox4x32_10(ctr[v], key[v], out);
		for (int k = 0; k < 4; k++)
			ck_assert_msg(out[k] == want[v][k], "vector %d word %d: %08x != %08x", v, k,
				      out[k], want[v][k]);
	}
}
END_TEST

START_TEST(test_augment_draws_are_pure)
{
	uint32_t a = feed_rand_u32(1, 2, 3, 4, 5);

	ck_assert_uint_eq(feed_rand_u32(1, 2, 3, 4, 5), a);
	ck_assert_uint_ne(feed_rand_u32(9, 2, 3, 4, 5), a);
	ck_assert_uint_ne(feed_rand_u32(1, 9, 3, 4, 5), a);
	ck_assert_uint_ne(feed_rand_u32(1, 2, 9, 4, 5), a);
	ck_assert_uint_ne(feed_rand_u32(1, 2, 3, 9, 5), a);
	ck_assert_uint_ne(feed_rand_u32(1, 2, 3, 4, 9), a);
	ck_assert_uint_ne(feed_rand_u32(1ull << 32, 2, 3, 4, 5), a); /* high seed bits count */
	ck_assert_uint_ne(feed_rand_u32(1, 2, 3 + (1ull << 32), 4, 5), a);
	/* draws 0..3 are the words of block 0 */
	uint32_t w[4];
	feed_rand_block(1, 2, 3, 4, 1, w);
	ck_assert_uint_eq(w[1], a);
	for (uint32_t d = 0; d < 1000; d++) {
		float u = feed_rand_unit(7, 0, d, 1, 0);
		ck_assert(u >= 0.0f && u < 1.0f);
	}
	ck_assert(feed_rand_unit_of(0xffffffffu) < 1.0f);
	ck_assert(feed_rand_unit_of(0) == 0.0f);
}
END_TEST

START_TEST(test_augment_draw_to_parameters)
{
	uint32_t top, left;

	ck_assert_uint_eq(aug_randint(0, 7), 0);
	ck_assert_uint_eq(aug_randint(0xffffffffu, 7), 6);
	ck_assert_uint_eq(aug_randint(0x80000000u, 7), 3);
	/* 4x5 image, pad 1, crop 3: top in [0, 3], left in [0, 4] */
	aug_random_crop_offsets(4, 5, 3, 1, 0, 0, &top, &left);
	ck_assert_uint_eq(top, 0);
	ck_assert_uint_eq(left, 0);
	aug_random_crop_offsets(4, 5, 3, 1, 0xffffffffu, 0xffffffffu, &top, &left);
	ck_assert_uint_eq(top, 3);
	ck_assert_uint_eq(left, 4);
	aug_random_crop_offsets(4, 5, 3, 1, 0x80000000u, 0x80000000u, &top, &left);
	ck_assert_uint_eq(top, 2);
	ck_assert_uint_eq(left, 2);
	aug_random_crop_offsets(28, 28, 28, 0, 0xffffffffu, 0x12345678u, &top, &left);
	ck_assert_uint_eq(top + left, 0);
	/* torchvision: int(round((n - size) / 2.0)), Python rounds ties to even */
	ck_assert_int_eq(aug_center_crop_offset(4, 2), 1);   /* 1.0 */
	ck_assert_int_eq(aug_center_crop_offset(5, 4), 0);   /* 0.5 -> 0 */
	ck_assert_int_eq(aug_center_crop_offset(5, 2), 2);   /* 1.5 -> 2 */
	ck_assert_int_eq(aug_center_crop_offset(7, 2), 2);   /* 2.5 -> 2 */
	ck_assert_int_eq(aug_center_crop_offset(10, 3), 4);  /* 3.5 -> 4 */
	ck_assert_int_eq(aug_center_crop_offset(3, 3), 0);
	ck_assert_int_eq(aug_center_crop_offset(3, 5), -1);  /* pads 1 before, 1 after */
	ck_assert_int_eq(aug_center_crop_offset(3, 6), -1);  /* pads 1 before, 2 after */
	ck_assert_int_eq(aug_center_crop_offset(2, 7), -2);
	/* flip iff (u >> 8) / 2^24 < p */
	ck_assert(!aug_hflip_decision(0, 0));
	ck_assert(aug_hflip_decision(0xffffffffu, PIPE_P_ONE));
	ck_assert(aug_hflip_decision(0x7fffffffu, PIPE_P_ONE / 2));
	ck_assert(!aug_hflip_decision(0x80000000u, PIPE_P_ONE / 2));
	ck_assert(aug_hflip_decision(0xffu, 1)); /* rand 0 < 1e-9 */
	ck_assert(!aug_hflip_decision(0x100u, 1)); /* rand 2^-24 > 1e-9 */
	ck_assert_uint_eq(aug_window_start(10, 4, 0), 0);
	ck_assert_uint_eq(aug_window_start(10, 4, 0xffffffffu), 6);
	ck_assert_uint_eq(aug_window_start(10, 10, 0xffffffffu), 0);
}
END_TEST

START_TEST(test_augment_hflip_rate)
{
	uint32_t flips = 0;

	for (uint64_t s = 0; s < 20000; s++)
		flips += aug_hflip_decision(feed_rand_u32(5, 1, s, 0, 0), PIPE_P_ONE / 2);
	ck_assert_uint_gt(flips, 9700);
	ck_assert_uint_lt(flips, 10300);
	flips = 0;
	for (uint64_t s = 0; s < 20000; s++)
		flips += aug_hflip_decision(feed_rand_u32(5, 1, s, 0, 0), PIPE_P_ONE / 10);
	ck_assert_uint_gt(flips, 1800);
	ck_assert_uint_lt(flips, 2200);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Image ops against hand-computed pixels                              */

/* 4x5x1 image holding 1..20 row by row. */
static const uint8_t img45[20] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
				  11, 12, 13, 14, 15, 16, 17, 18, 19, 20};

/* The first sample (from 0) whose crop draws give (top, left). */
static uint64_t sample_with_crop(uint32_t want_top, uint32_t want_left)
{
	for (uint64_t s = 0; s < 100000; s++) {
		uint32_t t, l;
		aug_random_crop_offsets(4, 5, 3, 1, feed_rand_u32(11, 0, s, 0, 0),
					feed_rand_u32(11, 0, s, 0, 1), &t, &l);
		if (t == want_top && l == want_left)
			return s;
	}
	ck_abort_msg("no sample with crop (%u, %u)", want_top, want_left);
	return 0;
}

START_TEST(test_augment_random_crop_hand)
{
	struct fmt_schema s;
	image_schema(&s, 4, 5, 0);
	struct pipe_plan *p = plan_for("random_crop(size=3, pad=1)", &s);
	static const uint8_t tl[9] = {0, 0, 0, 0, 1, 2, 0, 6, 7};
	static const uint8_t br[9] = {14, 15, 0, 19, 20, 0, 0, 0, 0};
	static const uint8_t mid[9] = {7, 8, 9, 12, 13, 14, 17, 18, 19};
	uint8_t out[9];

	struct aug_ctx ctx = {.seed = 11, .sample = sample_with_crop(0, 0)};
	ck_assert_uint_eq(apply1(p, &ctx, img45, 20, out, sizeof(out)), 9);
	ck_assert_mem_eq(out, tl, 9);
	ctx.sample = sample_with_crop(3, 4);
	apply1(p, &ctx, img45, 20, out, sizeof(out));
	ck_assert_mem_eq(out, br, 9);
	ctx.sample = sample_with_crop(2, 2);
	apply1(p, &ctx, img45, 20, out, sizeof(out));
	ck_assert_mem_eq(out, mid, 9);
	free(p);
}
END_TEST

START_TEST(test_augment_hflip_hand)
{
	struct fmt_schema s;
	uint8_t img[27], out[27], want[27];

	image_schema(&s, 3, 3, 3);
	for (int i = 0; i < 27; i++)
		img[i] = (uint8_t)(10 + i);
	for (int y = 0; y < 3; y++) /* pixel (y, x) <- (y, 2 - x), channels kept in order */
		for (int x = 0; x < 3; x++)
			for (int k = 0; k < 3; k++)
				want[(y * 3 + x) * 3 + k] = (uint8_t)(10 + (y * 3 + 2 - x) * 3 + k);
	struct pipe_plan *p = plan_for("hflip(p=1)", &s);
	struct aug_ctx ctx = {.seed = 1, .sample = 3};
	apply1(p, &ctx, img, 27, out, sizeof(out));
	ck_assert_mem_eq(out, want, 27);
	free(p);
	p = plan_for("hflip(p=0)", &s);
	apply1(p, &ctx, img, 27, out, sizeof(out));
	ck_assert_mem_eq(out, img, 27);
	free(p);
	/* one channel, rows of 19 (two 8-byte swaps and a tail) */
	uint8_t g[57], gout[57];
	image_schema(&s, 3, 19, 0);
	for (int i = 0; i < 57; i++)
		g[i] = (uint8_t)(i * 3 + 1);
	p = plan_for("hflip(p=1)", &s);
	apply1(p, &ctx, g, 57, gout, sizeof(gout));
	for (int y = 0; y < 3; y++)
		for (int x = 0; x < 19; x++)
			ck_assert_uint_eq(gout[y * 19 + x], g[y * 19 + 18 - x]);
	free(p);
}
END_TEST

START_TEST(test_augment_center_crop_hand)
{
	struct fmt_schema s;
	uint8_t out[25];
	struct aug_ctx ctx = {0};

	/* 4x5, size 3: top round(0.5) = 0, left round(1.0) = 1 */
	image_schema(&s, 4, 5, 0);
	struct pipe_plan *p = plan_for("center_crop(size=3)", &s);
	static const uint8_t want3[9] = {2, 3, 4, 7, 8, 9, 12, 13, 14};
	apply1(p, &ctx, img45, 20, out, sizeof(out));
	ck_assert_mem_eq(out, want3, 9);
	free(p);
	/* 4x5, size 2: top 1, left round(1.5) = 2 */
	p = plan_for("center_crop(size=2)", &s);
	static const uint8_t want2[4] = {8, 9, 13, 14};
	apply1(p, &ctx, img45, 20, out, sizeof(out));
	ck_assert_mem_eq(out, want2, 4);
	free(p);
	/* 4x5, size 5: rows padded (5 - 4) // 2 = 0 before, 1 after */
	p = plan_for("center_crop(size=5)", &s);
	uint8_t want5[25] = {0};
	memcpy(want5, img45, 20);
	apply1(p, &ctx, img45, 20, out, sizeof(out));
	ck_assert_mem_eq(out, want5, 25);
	free(p);
	/* 3x3x3 in a 5x5 window: one zero pixel all round */
	uint8_t img[27], big[75], wantbig[75] = {0};
	image_schema(&s, 3, 3, 3);
	for (int i = 0; i < 27; i++)
		img[i] = (uint8_t)(100 + i);
	for (int y = 0; y < 3; y++)
		memcpy(wantbig + ((y + 1) * 5 + 1) * 3, img + y * 9, 9);
	p = plan_for("center_crop(size=5)", &s);
	apply1(p, &ctx, img, 27, big, sizeof(big));
	ck_assert_mem_eq(big, wantbig, 75);
	free(p);
}
END_TEST

/* Runs ops one plan at a time (op k behind k identity ops, so it draws as
 * op k of the fused pipeline); returns the output size. */
static size_t run_chain(const char *const *ops, uint32_t n, uint32_t h, uint32_t w, uint32_t c,
			const uint8_t *src, const struct aug_ctx *ctx, uint8_t *dst)
{
	size_t len = (size_t)h * w * (c ? c : 1);
	uint8_t *cur = malloc(len);

	memcpy(cur, src, len);
	for (uint32_t k = 0; k < n; k++) {
		char text[512] = "";
		struct fmt_schema s;
		for (uint32_t j = 0; j < k; j++)
			strcat(text, "identity | ");
		strcat(text, ops[k]);
		image_schema(&s, h, w, c);
		struct pipe_plan *p = plan_for(text, &s);
		size_t cap = p->out.fields[0].max_bytes;
		uint8_t *next = malloc(cap);
		len = apply1(p, ctx, cur, len, next, cap);
		h = p->out.fields[0].shape[0];
		w = p->out.fields[0].shape[1];
		free(p);
		free(cur);
		cur = next;
	}
	memcpy(dst, cur, len);
	free(cur);
	return len;
}

static void check_fused_equals_chain(const char *const *ops, uint32_t n, uint32_t h, uint32_t w,
				     uint32_t c)
{
	char text[512] = "";
	struct fmt_schema s;
	size_t len = (size_t)h * w * (c ? c : 1);
	uint8_t *img = malloc(len), a[4096], b[4096];

	for (uint32_t k = 0; k < n; k++) {
		strcat(text, k ? " | " : "");
		strcat(text, ops[k]);
	}
	image_schema(&s, h, w, c);
	struct pipe_plan *p = plan_for(text, &s);
	for (uint64_t smp = 0; smp < 200; smp++) {
		struct aug_ctx ctx = {.seed = 99, .epoch = smp % 3, .sample = smp};
		fill_image(img, len, (uint32_t)smp);
		size_t la = apply1(p, &ctx, img, len, a, sizeof(a));
		size_t lb = run_chain(ops, n, h, w, c, img, &ctx, b);
		ck_assert_uint_eq(la, lb);
		ck_assert_msg(!memcmp(a, b, la), "'%s' sample %" PRIu64 ": fused != one at a time",
			      text, smp);
	}
	free(p);
	free(img);
}

START_TEST(test_augment_crop_flip_fused_equals_separate)
{
	static const char *const cf[] = {"random_crop(size=3, pad=2)", "hflip(p=0.5)"};
	check_fused_equals_chain(cf, 2, 4, 5, 0);
	check_fused_equals_chain(cf, 2, 3, 3, 3);
	static const char *const cf28[] = {"random_crop(size=28, pad=4)", "hflip(p=0.5)"};
	check_fused_equals_chain(cf28, 2, 28, 28, 0);
	static const char *const many[] = {"hflip(p=0.7)", "random_crop(size=6, pad=3)",
					   "center_crop(size=5)", "hflip(p=0.5)",
					   "random_crop(size=4, pad=1)", "center_crop(size=7)"};
	check_fused_equals_chain(many, 6, 5, 7, 3);
	check_fused_equals_chain(many, 6, 9, 4, 2);
	/* resize breaks the run; the runs on either side still fuse */
	static const char *const mixed[] = {"random_crop(size=5, pad=1)", "hflip(p=0.5)",
					    "resize(h=7, w=9)", "hflip(p=0.5)",
					    "center_crop(size=6)"};
	check_fused_equals_chain(mixed, 5, 6, 6, 3);
	/* crop then flip, by hand: flip decided by draw 0 of op 1 */
	struct fmt_schema s;
	image_schema(&s, 4, 5, 0);
	struct pipe_plan *p = plan_for(cf[0], &s), *q = plan_for("random_crop(size=3, pad=2) | hflip", &s);
	uint32_t flipped = 0;
	for (uint64_t smp = 0; smp < 64; smp++) {
		struct aug_ctx ctx = {.seed = 3, .sample = smp};
		uint8_t crop[9], both[9], want[9];
		apply1(p, &ctx, img45, 20, crop, 9);
		apply1(q, &ctx, img45, 20, both, 9);
		bool flip = aug_hflip_decision(feed_rand_u32(3, 0, smp, 1, 0), PIPE_P_ONE / 2);
		for (int y = 0; y < 3; y++)
			for (int x = 0; x < 3; x++)
				want[y * 3 + x] = crop[y * 3 + (flip ? 2 - x : x)];
		ck_assert_mem_eq(both, want, 9);
		flipped += flip;
	}
	ck_assert_uint_gt(flipped, 10);
	ck_assert_uint_lt(flipped, 54);
	free(p);
	free(q);
}
END_TEST

static void check_resize(uint32_t h, uint32_t w, uint32_t oh, uint32_t ow, const uint8_t *src,
			 const uint8_t *want)
{
	struct fmt_schema s;
	char text[64];
	uint8_t out[256];
	struct aug_ctx ctx = {0};

	image_schema(&s, h, w, 0);
	snprintf(text, sizeof(text), "resize(h=%u, w=%u)", oh, ow);
	struct pipe_plan *p = plan_for(text, &s);
	ck_assert_uint_eq(apply1(p, &ctx, src, (size_t)h * w, out, sizeof(out)), (size_t)oh * ow);
	for (uint32_t i = 0; i < oh * ow; i++)
		ck_assert_msg(out[i] == want[i], "%ux%u -> %ux%u: pixel (%u, %u) = %u, want %u", h, w,
			      oh, ow, i / ow, i % ow, out[i], want[i]);
	free(p);
}

/*
 * Hand-computed with half-pixel centres, src = (dst + 0.5) * in / out - 0.5
 * clamped at 0, the right neighbour clamped at the edge:
 *   2 -> 4: weights (1, 0), (.75, .25), (.25, .75), (0, 1); ties round to even
 *   4 -> 2: src 0.5 and 2.5, the mean of each 2x2 block
 *   3 -> 5: src 0, 0.4, 1, 1.6, 2.2 (-> 2)
 */
START_TEST(test_augment_resize_hand)
{
	static const uint8_t a[4] = {10, 20, 30, 40};
	static const uint8_t a4[16] = {10, 12, 18, 20,  /* 12.5 -> 12, 17.5 -> 18 */
				       15, 18, 22, 25,  /* 17.5 -> 18, 22.5 -> 22 */
				       25, 28, 32, 35,  /* 27.5 -> 28, 32.5 -> 32 */
				       30, 32, 38, 40}; /* 32.5 -> 32, 37.5 -> 38 */
	check_resize(2, 2, 4, 4, a, a4);
	static const uint8_t b[16] = {0, 10, 20, 30, 40, 52, 60, 70,
				      80, 90, 100, 110, 120, 130, 140, 153};
	static const uint8_t b2[4] = {26, 45, 105, 126}; /* 25.5 -> 26, 125.75 -> 126 */
	check_resize(4, 4, 2, 2, b, b2);
	static const uint8_t c[9] = {0, 100, 200, 50, 150, 250, 10, 20, 30};
	static const uint8_t c5[25] = {0,  40, 100, 160, 200,
				       20, 60, 120, 180, 220,
				       50, 90, 150, 210, 250,
				       26, 44, 72,  100, 118, /* 44.4, 99.6 */
				       10, 14, 20,  26,  30};
	check_resize(3, 3, 5, 5, c, c5);
	static const uint8_t same[4] = {7, 8, 9, 250};
	check_resize(2, 2, 2, 2, same, same);
}
END_TEST

/* The separable path (c > 1) on the 2 -> 4 case, channels a, a + 100 and
 * a + 1 (the odd shift moves every tie to the other even neighbour). */
START_TEST(test_augment_resize_channels_hand)
{
	static const uint8_t a[4] = {10, 20, 30, 40};
	static const uint8_t want[3][16] = {
		{10, 12, 18, 20, 15, 18, 22, 25, 25, 28, 32, 35, 30, 32, 38, 40},
		{110, 112, 118, 120, 115, 118, 122, 125, 125, 128, 132, 135, 130, 132, 138, 140},
		{11, 14, 18, 21, 16, 18, 24, 26, 26, 28, 34, 36, 31, 34, 38, 41}};
	static const uint8_t shift[3] = {0, 100, 1};
	uint8_t img[12], out[48];
	struct fmt_schema s;
	struct aug_ctx ctx = {0};

	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 3; k++)
			img[i * 3 + k] = (uint8_t)(a[i] + shift[k]);
	image_schema(&s, 2, 2, 3);
	struct pipe_plan *p = plan_for("resize(h=4, w=4)", &s);
	ck_assert_uint_eq(apply1(p, &ctx, img, 12, out, sizeof(out)), 48);
	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 3; k++)
			ck_assert_msg(out[i * 3 + k] == want[k][i], "pixel %d channel %d: %u, want %u", i,
				      k, out[i * 3 + k], want[k][i]);
	free(p);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Sequences, pass-through, errors                                     */

/* label i64, tokens u16 variable (<= 64), vec u32 [10], name str. */
static void seq_schema(struct fmt_schema *s)
{
	memset(s, 0, sizeof(*s));
	struct fmt_field f[] = {
		{.name = "label", .dtype = FEED_DTYPE_I64, .max_bytes = 8},
		{.name = "tokens", .dtype = FEED_DTYPE_U16, .variable = true, .max_bytes = 128},
		{.name = "vec", .dtype = FEED_DTYPE_U32, .rank = 1, .shape = {10}, .max_bytes = 40},
		{.name = "name", .dtype = FEED_DTYPE_STR, .variable = true, .max_bytes = 30},
	};
	s->nfields = 4;
	memcpy(s->fields, f, sizeof(f));
}

START_TEST(test_augment_random_window_bounds)
{
	struct fmt_schema s;
	seq_schema(&s);
	struct pipe_plan *p = plan_for("random_window(len=4) | random_window(len=3, field=vec)", &s);
	int64_t label = -5;
	uint16_t tok[20];
	uint32_t vec[10];
	const char *name = "sample";
	for (int i = 0; i < 20; i++)
		tok[i] = (uint16_t)(1000 + i);
	for (int i = 0; i < 10; i++)
		vec[i] = 70000u + (uint32_t)i;
	uint8_t o_label[8], o_tok[128], o_vec[40], o_name[30];
	size_t lens[4];
	uint32_t seen_tok[20] = {0}, seen_vec[10] = {0};

	for (uint64_t smp = 0; smp < 2000; smp++) {
		size_t ntok = 4 + smp % 17; /* 4 .. 20 tokens */
		struct aug_in in[4] = {{&label, 8}, {tok, ntok * 2}, {vec, 40}, {name, 6}};
		struct aug_out out[4] = {{o_label, 8, &lens[0]}, {o_tok, 128, &lens[1]},
					 {o_vec, 40, &lens[2]}, {o_name, 30, &lens[3]}};
		struct aug_ctx ctx = {.seed = 8, .epoch = 1, .sample = smp};
		void *scratch = malloc(pipe_scratch_bytes(p) + 1);
		ck_assert_int_eq(aug_apply(p, &ctx, in, out, scratch, NULL), 0);
		free(scratch);
		ck_assert_uint_eq(lens[0], 8);
		ck_assert_mem_eq(o_label, &label, 8);
		ck_assert_uint_eq(lens[3], 6);
		ck_assert_mem_eq(o_name, name, 6);
		ck_assert_uint_eq(lens[1], 8);
		ck_assert_uint_eq(lens[2], 12);
		uint16_t t0;
		uint32_t v0;
		memcpy(&t0, o_tok, 2);
		memcpy(&v0, o_vec, 4);
		uint64_t st = t0 - 1000u, sv = v0 - 70000u;
		ck_assert_uint_eq(st, aug_window_start(ntok, 4, feed_rand_u32(8, 1, smp, 0, 0)));
		ck_assert_uint_le(st + 4, ntok);
		ck_assert_uint_le(sv + 3, 10);
		ck_assert_mem_eq(o_tok, tok + st, 8);
		ck_assert_mem_eq(o_vec, vec + sv, 12);
		if (ntok == 20)
			seen_tok[st]++;
		seen_vec[sv]++;
	}
	for (int k = 0; k <= 16; k++) /* both ends reached, nothing beyond */
		ck_assert_msg(seen_tok[k] > 0, "token start %d never drawn", k);
	for (int k = 0; k <= 7; k++)
		ck_assert_uint_gt(seen_vec[k], 0);
	ck_assert_uint_eq(seen_vec[8] + seen_vec[9], 0);
	free(p);
}
END_TEST

START_TEST(test_augment_errors)
{
	struct fmt_schema s;
	seq_schema(&s);
	struct pipe_plan *p = plan_for("random_window(len=4)", &s);
	int64_t label = 1;
	uint16_t tok[20] = {0};
	uint32_t vec[10] = {0};
	uint8_t o[4][128];
	struct aug_in in[4] = {{&label, 8}, {tok, 6}, {vec, 40}, {"x", 1}};
	struct aug_out out[4] = {{o[0], 128, NULL}, {o[1], 128, NULL}, {o[2], 128, NULL},
				 {o[3], 128, NULL}};
	struct aug_ctx ctx = {.sample = 17};
	struct feed_err err = {0};

	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), -EINVAL); /* 3 tokens < 4 */
	ck_assert_ptr_nonnull(strstr(err.msg, "sample 17"));
	ck_assert_ptr_nonnull(strstr(err.msg, "'tokens'"));
	ck_assert_ptr_nonnull(strstr(err.msg, "op 1 random_window"));
	in[1].len = 7; /* half a token */
	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "multiple of 2"));
	in[1].len = 8;
	in[2].len = 36; /* fixed field of the wrong size */
	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "'vec'"));
	in[2].len = 40;
	out[1].cap = 7;
	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), -ENOBUFS);
	ck_assert_ptr_nonnull(strstr(err.msg, "'tokens'"));
	out[1].cap = 8;
	out[3].cap = 0;
	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), -ENOBUFS);
	ck_assert_ptr_nonnull(strstr(err.msg, "'name'"));
	out[3].cap = 1;
	ck_assert_int_eq(aug_apply(p, &ctx, in, out, NULL, &err), 0);
	free(p);
}
END_TEST

/* Same (seed, epoch, sample) -> same bytes; the key changes the result. */
START_TEST(test_augment_deterministic)
{
	struct fmt_schema s;
	uint8_t img[28 * 28], a[784], b[784];
	uint32_t differ = 0;

	image_schema(&s, 28, 28, 0);
	fill_image(img, sizeof(img), 4);
	struct pipe_plan *p = plan_for("random_crop(size=28, pad=2) | hflip(p=0.5)", &s);
	for (uint64_t smp = 0; smp < 100; smp++) {
		struct aug_ctx c1 = {.seed = 1, .epoch = 2, .sample = smp}, c2 = c1;
		apply1(p, &c1, img, sizeof(img), a, sizeof(a));
		apply1(p, &c2, img, sizeof(img), b, sizeof(b));
		ck_assert_mem_eq(a, b, sizeof(a));
		c2.epoch = 3;
		apply1(p, &c2, img, sizeof(img), b, sizeof(b));
		differ += memcmp(a, b, sizeof(a)) != 0;
	}
	ck_assert_uint_gt(differ, 90);
	free(p);
}
END_TEST


/* ------------------------------------------------------------------ */
/* Pixel ops (augment_pixel.c and friends)                             */

/* pipe_parse refuses text, naming op and key in its message. */
static void px_refused(const char *text, const char *n1, const char *n2)
{
	struct pipe_spec spec;
	struct feed_err err = {0};

	ck_assert_msg(pipe_parse(text, &spec, &err) == -EINVAL, "'%s' accepted", text);
	ck_assert_msg(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)),
		      "'%s': message '%s' lacks '%s' or '%s'", text, err.msg, n1, n2 ? n2 : "");
}

START_TEST(test_augment_pixel_keys_refused_by_name)
{
	px_refused("adjust_brightness", "op 1 'adjust_brightness'", "missing key 'factor'");
	px_refused("adjust_brightness(factor=-1)", "key 'factor'", "not in [0, 100]");
	px_refused("adjust_hue(factor=0.6)", "key 'factor'", "not in [-0.5, 0.5]");
	px_refused("invert | rotate(angle=10, interpolation=bicubic)", "op 2 'rotate'",
		   "key 'interpolation': 'bicubic' is not one of nearest, bilinear");
	px_refused("rotate(angle=10, fill=256)", "key 'fill'", "out of range [0, 255]");
	px_refused("affine(angle=0, shear_x=90)", "op 1 'affine'", "key 'shear_x'");
	px_refused("affine(angle=0, scale=0)", "key 'scale'", NULL);
	px_refused("affine(translate_x=3)", "missing key 'angle'", NULL);
	px_refused("posterize(bits=9)", "key 'bits'", "out of range [0, 8]");
	px_refused("solarize(threshold=300)", "key 'threshold'", NULL);
	px_refused("equalize(p=0.5)", "op 1 'equalize'", "unknown key 'p'");
	px_refused("gaussian_blur(kernel_size=4, sigma=1)", "key 'kernel_size'", "not odd");
	px_refused("gaussian_blur(kernel_size=3, sigma=1, sigma_max=2)", "key 'sigma'",
		   "either sigma or sigma_min");
	px_refused("gaussian_blur(kernel_size=3, sigma_min=2, sigma_max=1)", "key 'sigma_min'",
		   "above sigma_max");
	px_refused("gaussian_blur(kernel_size=3, sigma=0)", "key 'sigma'", NULL);
	px_refused("rgb_to_grayscale(num_output_channels=2)", "key 'num_output_channels'", NULL);
	px_refused("erase(i=1, j=1, h=2)", "op 1 'erase'", "missing key 'w'");
	px_refused("erase(i=1, j=1, h=2, w=2, value=random)", "key 'value'", "random_erasing");
	px_refused("color_jitter(hue=0.7)", "key 'hue'", NULL);
	px_refused("color_jitter(brightness=1, gamma=2)", "unknown key 'gamma'",
		   "brightness, contrast, saturation, hue");
	px_refused("random_grayscale(p=2)", "key 'p'", NULL);
	px_refused("random_rotation", "missing key 'degrees'", NULL);
	px_refused("random_rotation(degrees=-5)", "key 'degrees'", NULL);
	px_refused("random_affine(degrees=5, translate=1.5)", "key 'translate'", NULL);
	px_refused("random_affine(degrees=5, scale_min=1.2, scale_max=1.1)", "key 'scale_min'",
		   "above scale_max");
	px_refused("random_solarize(p=0.5)", "missing key 'threshold'", NULL);
	px_refused("random_posterize", "missing key 'bits'", NULL);
	px_refused("random_adjust_sharpness", "missing key 'factor'", NULL);
	px_refused("trivial_augment_wide(num_magnitude_bins=1)", "key 'num_magnitude_bins'", NULL);
	px_refused("rand_augment(magnitude=31)", "key 'magnitude'", "not below num_magnitude_bins");
	px_refused("auto_augment(policy=reduced_imagenet)", "key 'policy'",
		   "imagenet, cifar10, svhn");
	px_refused("random_erasing(ratio_min=4, ratio_max=3)", "key 'ratio_min'", NULL);
	px_refused("random_erasing(scale_min=0.5, scale_max=1.5)", "key 'scale_max'", NULL);
	/* -1 is a normalised value (after normalize); the planner refuses it on u8 */
	px_refused("random_erasing(value=1001)", "key 'value'", "not in [-1000, 1000]");
	px_refused("gamma(x=1)", "op 1 'gamma'", "unknown op");
	px_refused("trivial_augment_wide(linspace=torch2)", "key 'linspace'", "plain, fused");
	px_refused("adjust_hue(factor=0.1, hue_cast=round)", "key 'hue_cast'", "mul255, scaled");
	px_refused("adjust_brightness(factor=1, hue_cast=scaled)", "unknown key 'hue_cast'", NULL);
}
END_TEST

/* Canonical text: torchvision's defaults filled in, keys in order. */
START_TEST(test_augment_pixel_canonical_defaults)
{
	static const char *const pairs[][2] = {
		{"trivial_augment_wide", "trivial_augment_wide(num_magnitude_bins=31)"},
		{"rand_augment", "rand_augment(num_ops=2, magnitude=9, num_magnitude_bins=31)"},
		{"auto_augment", "auto_augment(policy=imagenet)"},
		{"random_erasing", "random_erasing(p=0.5, scale_min=0.02, scale_max=0.33, "
				   "ratio_min=0.3, ratio_max=3.3, value=0)"},
		{"random_erasing(value=random)", "random_erasing(p=0.5, scale_min=0.02, "
		 "scale_max=0.33, ratio_min=0.3, ratio_max=3.3, value=random)"},
		/* no fill: F.rotate's fill=None (no mask blend), shown only when given */
		{"rotate(angle=-7.50)", "rotate(angle=-7.5, interpolation=nearest)"},
		{"rotate(angle=-7.50, fill=0)", "rotate(angle=-7.5, interpolation=nearest, fill=0)"},
		{"gaussian_blur(kernel_size=3)", "gaussian_blur(kernel_size=3, sigma_min=0.1, "
		 "sigma_max=2)"},
		{"gaussian_blur(sigma=1.5, kernel_size=5)", "gaussian_blur(kernel_size=5, sigma=1.5)"},
		{"random_grayscale", "random_grayscale(p=0.1)"},
		{"color_jitter(hue=0.1)", "color_jitter(brightness=0, contrast=0, saturation=0, "
		 "hue=0.1)"},
		/* the newer torch / torchvision variants: shown only when chosen,
		 * so the text (and hash) of a pipeline without them is as before */
		{"trivial_augment_wide(linspace=plain)", "trivial_augment_wide(num_magnitude_bins=31)"},
		{"trivial_augment_wide(linspace=fused)",
		 "trivial_augment_wide(num_magnitude_bins=31, linspace=fused)"},
		{"auto_augment(linspace=fused)", "auto_augment(policy=imagenet, linspace=fused)"},
		{"adjust_hue(factor=0.1, hue_cast=scaled)", "adjust_hue(factor=0.1, hue_cast=scaled)"},
		{"color_jitter(hue=0.1, hue_cast=mul255)", "color_jitter(brightness=0, contrast=0, "
		 "saturation=0, hue=0.1)"},
	};
	char buf[PIPE_CANON_MAX];

	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
		struct pipe_spec spec;
		struct feed_err err = {0};
		ck_assert_msg(pipe_parse(pairs[k][0], &spec, &err) == 0, "%s: %s", pairs[k][0],
			      err.msg);
		ck_assert_int_gt(pipe_spec_canonical(&spec, buf, sizeof(buf)), 0);
		ck_assert_str_eq(buf, pairs[k][1]);
	}
	/* every op has a usage line naming its keys */
	ck_assert_int_gt(pipe_op_usage(PIPE_AFFINE, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "affine(angle, translate_x=0, translate_y=0, scale=1, shear_x=0, "
			      "shear_y=0, interpolation=nearest, fill=0, field)");
	ck_assert_int_eq(pipe_op_usage(PIPE_KIND_COUNT_, buf, sizeof(buf)), -EINVAL);
}
END_TEST

/* torch.linspace's bins rounded twice (plain: start + step * k) and once
 * (fused: torch 2.x's vectorised kernel, AVX2 / AVX-512): linspace(0, 32,
 * 31)[15] is 16 and 15.999999 (TrivialAugmentWide's translate bin: 16 or
 * 15 pixels); [17] 18.133331 and 18.133333 (torch 2.15 prints the fused
 * values). */
START_TEST(test_augment_linspace_variants)
{
	ck_assert_float_eq(aug_linspace_v(0.0f, 32.0f, 31, 15, AUG_LINSPACE_PLAIN), 16.0f);
	ck_assert_float_eq(aug_linspace_v(0.0f, 32.0f, 31, 15, AUG_LINSPACE_FMA),
			   nextafterf(16.0f, 0.0f));
	ck_assert_float_eq(aug_linspace_v(0.0f, 32.0f, 31, 17, AUG_LINSPACE_PLAIN),
			   18.133331298828125f);
	ck_assert_float_eq(aug_linspace_v(0.0f, 32.0f, 31, 17, AUG_LINSPACE_FMA),
			   18.133333206176758f);
	ck_assert_float_eq(aug_linspace(0.0f, 32.0f, 31, 15), 16.0f);
	/* the ends are exact either way */
	for (uint32_t v = 0; v < 2; v++) {
		ck_assert_float_eq(aug_linspace_v(0.0f, 0.99f, 31, 0, v), 0.0f);
		ck_assert_float_eq(aug_linspace_v(0.0f, 0.99f, 31, 30, v), 0.99f);
		ck_assert_float_eq(aug_linspace_v(255.0f, 0.0f, 31, 30, v), 0.0f);
	}
}
END_TEST

/* Planning: pixel ops need fixed images of 1 or 3 channels, and a blur
 * kernel that reflect padding can serve. */
START_TEST(test_augment_pixel_plan_refusals)
{
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};

	image_schema(&s, 6, 6, 4);
	ck_assert_int_eq(pipe_plan_text("invert", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "op 1 'invert': key 'field': 'image' has 4 channels"));
	image_schema(&s, 6, 6, 3);
	ck_assert_int_eq(pipe_plan_text("gaussian_blur(kernel_size=13, sigma=1)", &s, p, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "key 'kernel_size': 13 too large for the 6x6"));
	ck_assert_int_eq(pipe_plan_text("rgb_to_grayscale | equalize", &s, p, &err), 0);
	ck_assert_uint_eq(p->out.fields[0].shape[2], 1);
	ck_assert_uint_eq(p->nstages, 1); /* one fused stage */
	/* a rank-2 image (Fashion-MNIST) stays rank 2 */
	image_schema(&s, 28, 28, 0);
	ck_assert_int_eq(pipe_plan_text("trivial_augment_wide | rgb_to_grayscale", &s, p, &err), 0);
	ck_assert_uint_eq(p->out.fields[0].rank, 2);
	uint8_t img[28 * 28], out[28 * 28];
	fill_image(img, sizeof(img), 3);
	struct aug_ctx ctx = {.seed = 2};
	ck_assert_uint_eq(apply1(p, &ctx, img, sizeof(img), out, sizeof(out)), sizeof(out));
	free(p);
}
END_TEST

/* Hand-computed pixels: invert, posterize, solarize, erase, grayscale,
 * brightness, and the table ops fused in one stage equal to the same ops
 * run one plan at a time. */
START_TEST(test_augment_pixel_hand)
{
	struct fmt_schema s;
	const uint8_t img[2 * 3 * 3] = {0, 10, 20, 100, 128, 200, 255, 1, 2,
					3, 4, 5, 90, 91, 92, 250, 251, 252};
	uint8_t out[sizeof(img)], a[sizeof(img)], b[sizeof(img)];
	struct aug_ctx ctx = {.seed = 1};

	image_schema(&s, 2, 3, 3);
	struct pipe_plan *p = plan_for("invert", &s);
	apply1(p, &ctx, img, sizeof(img), out, sizeof(out));
	for (size_t k = 0; k < sizeof(img); k++)
		ck_assert_uint_eq(out[k], 255 - img[k]);
	free(p);
	p = plan_for("posterize(bits=2) | solarize(threshold=128)", &s);
	apply1(p, &ctx, img, sizeof(img), out, sizeof(out));
	for (size_t k = 0; k < sizeof(img); k++) {
		uint8_t v = img[k] & 0xc0;
		ck_assert_uint_eq(out[k], v >= 128 ? 255 - v : v);
	}
	free(p);
	p = plan_for("adjust_brightness(factor=2)", &s);
	apply1(p, &ctx, img, sizeof(img), out, sizeof(out));
	for (size_t k = 0; k < sizeof(img); k++)
		ck_assert_uint_eq(out[k], img[k] * 2 > 255 ? 255 : img[k] * 2);
	free(p);
	p = plan_for("erase(i=1, j=1, h=5, w=1, value=7)", &s);
	apply1(p, &ctx, img, sizeof(img), out, sizeof(out));
	for (size_t k = 0; k < sizeof(img); k++)
		ck_assert_uint_eq(out[k], k >= 12 && k < 15 ? 7 : img[k]); /* clipped at the edge */
	free(p);
	p = plan_for("rgb_to_grayscale", &s);
	ck_assert_uint_eq(apply1(p, &ctx, img, sizeof(img), out, sizeof(out)), 6);
	ck_assert_uint_eq(out[1], (uint8_t)(0.2989f * 100 + 0.587f * 128 + 0.114f * 200));
	free(p);
	/* fused: one stage of table ops and saturation == one op at a time */
	const char *ops[] = {"adjust_contrast(factor=0.6)", "equalize", "autocontrast",
			     "adjust_saturation(factor=1.7)", "invert"};
	p = plan_for("adjust_contrast(factor=0.6) | equalize | autocontrast | "
		     "adjust_saturation(factor=1.7) | invert", &s);
	apply1(p, &ctx, img, sizeof(img), a, sizeof(a));
	free(p);
	memcpy(b, img, sizeof(img));
	for (size_t k = 0; k < 5; k++) {
		p = plan_for(ops[k], &s);
		apply1(p, &ctx, b, sizeof(b), out, sizeof(out));
		memcpy(b, out, sizeof(out));
		free(p);
	}
	ck_assert_mem_eq(a, b, sizeof(a));
}
END_TEST

/* px_round_even is nearbyintf (ties to even) without the call. */
START_TEST(test_augment_pixel_round_even)
{
	const float v[] = {0.0f, -0.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 254.5f, 255.49999f,
			   0.49999997f, 1e-30f, 8388607.5f, 8388608.0f, 4194304.5f, -3.75f,
			   1e30f, -1e30f};

	for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
		ck_assert_msg(px_round_even(v[k]) == nearbyintf(v[k]), "%.9g: %.9g vs %.9g",
			      (double)v[k], (double)px_round_even(v[k]), (double)nearbyintf(v[k]));
	for (uint32_t k = 0; k < 100000; k++) {
		float x = (float)((int32_t)feed_rand_u32(5, 0, k, 0, 0)) * 0x1p-20f;
		ck_assert(px_round_even(x) == nearbyintf(x));
	}
}
END_TEST

/* The random pixel ops are pure functions of (seed, epoch, sample). */
START_TEST(test_augment_pixel_random_deterministic)
{
	struct fmt_schema s;
	uint8_t img[16 * 16 * 3], a[sizeof(img)], b[sizeof(img)];
	uint32_t differ = 0;

	for (size_t k = 0; k < sizeof(img); k++)
		img[k] = (uint8_t)(k * 37 + k / 48 * 11);
	image_schema(&s, 16, 16, 3);
	struct pipe_plan *p = plan_for("trivial_augment_wide | random_erasing(value=random) | "
				       "color_jitter(brightness=0.5, hue=0.2)", &s);
	for (uint64_t smp = 0; smp < 40; smp++) {
		struct aug_ctx c1 = {.seed = 4, .epoch = 1, .sample = smp}, c2 = c1;
		apply1(p, &c1, img, sizeof(img), a, sizeof(a));
		apply1(p, &c2, img, sizeof(img), b, sizeof(b));
		ck_assert_mem_eq(a, b, sizeof(a));
		c2.epoch = 2;
		apply1(p, &c2, img, sizeof(img), b, sizeof(b));
		differ += memcmp(a, b, sizeof(a)) != 0;
	}
	ck_assert_uint_gt(differ, 35);
	free(p);
}
END_TEST
/* ------------------------------------------------------------------ */

static int probe(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: %s --probe PIPELINE H W C SEED EPOCH SAMPLE\n", argv[0]);
		return 2;
	}
	uint32_t h = (uint32_t)atoi(argv[3]), w = (uint32_t)atoi(argv[4]), c = (uint32_t)atoi(argv[5]);
	struct aug_ctx ctx = {strtoull(argv[6], NULL, 0), strtoull(argv[7], NULL, 0),
			      strtoull(argv[8], NULL, 0)};
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	size_t len = (size_t)h * w * c;
	uint8_t *img = malloc(len + 1);

	image_schema(&s, h, w, c);
	if (pipe_plan_text(argv[2], &s, p, &err) < 0 || fread(img, 1, len, stdin) != len) {
		fprintf(stderr, "probe: %s\n", err.msg[0] ? err.msg : "short input");
		return 1;
	}
	size_t cap = p->out.fields[0].max_bytes, got = 0;
	uint8_t *out = malloc(cap), *scratch = malloc(pipe_scratch_bytes(p) + 1);
	struct aug_in in = {img, len};
	struct aug_out o = {out, cap, &got};
	if (aug_apply(p, &ctx, &in, &o, scratch, &err) < 0) {
		fprintf(stderr, "probe: %s\n", err.msg);
		return 1;
	}
	long top = -1, left = -1, flip = -1;
	for (uint32_t i = p->spec.nops; i-- > 0;) {
		const struct pipe_op *op = &p->spec.ops[i];
		uint32_t t, l;
		if (op->kind == PIPE_RANDOM_CROP) {
			aug_random_crop_offsets(p->dims[i].in_h, p->dims[i].in_w, op->size, op->pad,
						feed_rand_u32(ctx.seed, ctx.epoch, ctx.sample, i, 0),
						feed_rand_u32(ctx.seed, ctx.epoch, ctx.sample, i, 1), &t, &l);
			top = t;
			left = l;
		} else if (op->kind == PIPE_HFLIP) {
			flip = aug_hflip_decision(feed_rand_u32(ctx.seed, ctx.epoch, ctx.sample, i, 0),
						  op->p_ppb);
		}
	}
	printf("%ld %ld %ld %u %u\n", top, left, flip, p->out.fields[0].shape[0],
	       p->out.fields[0].shape[1]);
	fwrite(out, 1, got, stdout);
	free(out);
	free(scratch);
	free(img);
	free(p);
	return fflush(stdout) ? 1 : 0;
}

/* The basic ops every pixel op of the plan chose for this sample, one
 * line each (see the file's opening comment). */
static uint32_t pixel_lines(const struct pipe_plan *p, const struct aug_ctx *ctx, char *out,
			    size_t cap)
{
	struct aug_px_op ops[AUG_PX_MAX];
	uint32_t total = 0;
	size_t n = 0;

	out[0] = '\0';
	for (uint32_t i = 0; i < p->spec.nops; i++) {
		const struct pipe_dims *dm = &p->dims[i];
		if (p->spec.ops[i].kind < PIPE_ADJUST_BRIGHTNESS || p->spec.ops[i].sub)
			continue; /* a container's transforms come with it */
		uint32_t k = aug_px_expand(p, i, ctx, dm->in_h, dm->in_w, dm->in_c, ops);
		for (uint32_t j = 0; j < k && n < cap; j++, total++) {
			const struct aug_px_op *o = &ops[j];
			n += (size_t)snprintf(out + n, cap - n,
					      "%u %d %.17g %u %u %u %.17g %.17g %.17g %.17g %.17g "
					      "%.17g %.17g %.17g %u %u %u %u %u %u %u %d "
					      "%u %u %u %u %u %g %g %g %g %g %g %g %g %.17g %d %d\n",
					      i, (int)o->kind, o->f, o->bits, o->ksize, o->out_c,
					      o->af.angle, o->af.tx, o->af.ty, o->af.scale, o->af.shx,
					      o->af.shy, o->af.cx, o->af.cy, o->af.interp, o->af.fill,
					      o->ei, o->ej, o->eh, o->ew, o->value, (int)o->value_random,
					      o->pad[0], o->pad[1], o->pad[2], o->pad[3], o->pad_mode,
					      o->pc[0], o->pc[1], o->pc[2], o->pc[3], o->pc[4], o->pc[5],
					      o->pc[6], o->pc[7], o->mean, (int)o->clip, (int)o->af.nomask);
		}
	}
	return total;
}

static int pixel_params(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: %s --pixel-params PIPELINE H W C SEED N\n", argv[0]);
		return 2;
	}
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	static char lines[1 << 16];

	image_schema(&s, (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]));
	if (pipe_plan_text(argv[2], &s, p, &err) < 0) {
		fprintf(stderr, "probe: %s\n", err.msg);
		return 1;
	}
	uint64_t n = strtoull(argv[7], NULL, 0);
	for (uint64_t smp = 0; smp < n; smp++) {
		struct aug_ctx ctx = {strtoull(argv[6], NULL, 0), 0, smp};
		pixel_lines(p, &ctx, lines, sizeof(lines));
		for (char *l = strtok(lines, "\n"); l; l = strtok(NULL, "\n"))
			printf("%" PRIu64 " %s\n", smp, l);
	}
	free(p);
	return fflush(stdout) ? 1 : 0;
}

static int pixel_probe(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: %s --pixel PIPELINE H W C SEED EPOCH SAMPLE\n", argv[0]);
		return 2;
	}
	uint32_t h = (uint32_t)atoi(argv[3]), w = (uint32_t)atoi(argv[4]), c = (uint32_t)atoi(argv[5]);
	struct aug_ctx ctx = {strtoull(argv[6], NULL, 0), strtoull(argv[7], NULL, 0),
			      strtoull(argv[8], NULL, 0)};
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	size_t len = (size_t)h * w * c;
	uint8_t *img = malloc(len + 1);
	static char lines[1 << 16];

	image_schema(&s, h, w, c);
	if (pipe_plan_text(argv[2], &s, p, &err) < 0 || fread(img, 1, len, stdin) != len) {
		fprintf(stderr, "probe: %s\n", err.msg[0] ? err.msg : "short input");
		return 1;
	}
	size_t cap = p->out.fields[0].max_bytes, got = 0;
	uint8_t *out = malloc(cap), *scratch = aligned_alloc(64, (pipe_scratch_bytes(p) + 64) & ~63ul);
	struct aug_in in = {img, len};
	struct aug_out o = {out, cap, &got};
	if (aug_apply(p, &ctx, &in, &o, scratch, &err) < 0) {
		fprintf(stderr, "probe: %s\n", err.msg);
		return 1;
	}
	uint32_t nops = pixel_lines(p, &ctx, lines, sizeof(lines));
	const struct fmt_field *fo = &p->out.fields[0];
	printf("%u %u %u %u\n%s", fo->shape[0], fo->shape[1], fo->rank == 3 ? fo->shape[2] : 1,
	       nops, lines);
	fwrite(out, 1, got, stdout);
	free(out);
	free(scratch);
	free(img);
	free(p);
	return fflush(stdout) ? 1 : 0;
}

/* --aug-mix: the pipeline's first aug_mix op's draws for the sample
 * ("width m0 m1 w0 .. w(width-1)", then one line per chain "depth" and
 * "op bin neg magnitude" for each op), after the output's "out_h out_w out_c", then the
 * output bytes. */
static int augmix_probe(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: %s --aug-mix PIPELINE H W C SEED EPOCH SAMPLE\n", argv[0]);
		return 2;
	}
	uint32_t h = (uint32_t)atoi(argv[3]), w = (uint32_t)atoi(argv[4]), c = (uint32_t)atoi(argv[5]);
	struct aug_ctx ctx = {strtoull(argv[6], NULL, 0), strtoull(argv[7], NULL, 0),
			      strtoull(argv[8], NULL, 0)};
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	size_t len = (size_t)h * w * c;
	uint8_t *img = malloc(len + 1);

	image_schema(&s, h, w, c);
	if (pipe_plan_text(argv[2], &s, p, &err) < 0 || fread(img, 1, len, stdin) != len) {
		fprintf(stderr, "probe: %s\n", err.msg[0] ? err.msg : "short input");
		return 1;
	}
	size_t cap = p->out.fields[0].max_bytes, got = 0;
	uint8_t *out = malloc(cap), *scratch = aligned_alloc(64, (pipe_scratch_bytes(p) + 64) & ~63ul);
	struct aug_in in = {img, len};
	struct aug_out o = {out, cap, &got};
	if (aug_apply(p, &ctx, &in, &o, scratch, &err) < 0) {
		fprintf(stderr, "probe: %s\n", err.msg);
		return 1;
	}
	printf("%u %u %u\n", h, w, c);
	for (uint32_t i = 0; i < p->spec.nops; i++) {
		if (p->spec.ops[i].kind != PIPE_AUG_MIX)
			continue;
		struct aug_mix_draws d;
		aug_mix_draw(&p->spec.ops[i], i, &ctx, h, w, &d);
		printf("%u %.9g %.9g", d.width, d.m0, d.m1);
		for (uint32_t k = 0; k < d.width; k++)
			printf(" %.9g", d.w[k]);
		printf("\n");
		for (uint32_t k = 0; k < d.width; k++) {
			printf("%u", d.chain[k].depth);
			for (uint32_t t = 0; t < d.chain[k].depth; t++)
				printf(" %u %u %d %.17g", d.chain[k].op[t], d.chain[k].bin[t],
				       d.chain[k].neg[t], d.chain[k].mag[t]);
			printf("\n");
		}
		break;
	}
	fwrite(out, 1, got, stdout);
	free(out);
	free(scratch);
	free(img);
	free(p);
	return fflush(stdout) ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* Image ops                                                           */

static const uint32_t rrc_scale_def[2] = {80000000, 1000000000};
static const uint64_t rrc_ratio_def[2] = {750000000, 1333300000};

START_TEST(test_augment_rrc_box_hand)
{
	uint32_t u[22] = {0};
	struct img_box b;
	const uint32_t quarter[2] = {250000000, 250000000}, one[2] = {1000000000, 1000000000};
	const uint64_t square[2] = {1000000000, 1000000000}, wide[2] = {2000000000, 3000000000};
	const uint64_t tall[2] = {500000000, 1000000000};

	/* scale 1/4, ratio 1 on 100x100: 50x50, top from u[20], left from u[21] */
	u[21] = 0xffffffffu;
	aug_rrc_box(100, 100, quarter, square, u, &b);
	ck_assert_uint_eq(b.w, 50);
	ck_assert_uint_eq(b.h, 50);
	ck_assert_uint_eq(b.y, 0);
	ck_assert_uint_eq(b.x, 50);
	/* the whole image */
	aug_rrc_box(30, 40, one, (const uint64_t[2]){1333333333, 1333333333}, u, &b);
	ck_assert_uint_eq(b.w, 40);
	ck_assert_uint_eq(b.h, 30);
	ck_assert_uint_eq(b.x, 0);
	ck_assert_uint_eq(b.y, 0);
	/* no try fits (aspect >= 2 needs w = 141): fallback, h = round(100 / 2) */
	aug_rrc_box(100, 100, one, wide, u, &b);
	ck_assert_uint_eq(b.w, 100);
	ck_assert_uint_eq(b.h, 50);
	ck_assert_uint_eq(b.y, 25);
	ck_assert_uint_eq(b.x, 0);
	/* 100 x 400, aspect <= 1: h = 200 > 100 every try; w = round(100 * 1) */
	aug_rrc_box(100, 400, one, tall, u, &b);
	ck_assert_uint_eq(b.w, 100);
	ck_assert_uint_eq(b.h, 100);
	ck_assert_uint_eq(b.x, 150);
	ck_assert_uint_eq(b.y, 0);
	/* first try too large, second fits: scale from u[2], ratio from u[3] */
	const uint32_t half_one[2] = {250000000, 1000000000};
	uint32_t v[22] = {0};
	v[0] = 0xffffffffu;               /* scale ~1: fits only at aspect 1 */
	v[1] = 0xffffffffu;               /* aspect ~2 on a square: too wide */
	v[2] = 0;                         /* scale 0.25 */
	v[3] = 0x80000000u;               /* log-ratio midway: aspect sqrt(0.5 * 2) = 1 */
	aug_rrc_box(64, 64, half_one, (const uint64_t[2]){500000000, 2000000000}, v, &b);
	ck_assert_uint_eq(b.w, 32);
	ck_assert_uint_eq(b.h, 32);
	/* always inside the image, and the draws are the sample's */
	struct aug_ctx ctx = {.seed = 3, .epoch = 1, .sample = 9};
	for (uint32_t k = 0; k < 2000; k++) {
		uint32_t h = 1 + k % 97, w = 1 + (k * 7) % 211;
		ctx.sample = k;
		aug_rrc_draws(&ctx, 2, u);
		ck_assert_uint_eq(u[21], feed_rand_u32(3, 1, k, 2, 21));
		aug_rrc_box(h, w, rrc_scale_def, rrc_ratio_def, u, &b);
		ck_assert(b.w >= 1 && b.h >= 1 && b.x + b.w <= w && b.y + b.h <= h);
	}
}
END_TEST

START_TEST(test_augment_resize_short_dims)
{
	uint32_t h, w;

	aug_resize_short_dims(480, 640, 256, &h, &w);
	ck_assert_uint_eq(h, 256);
	ck_assert_uint_eq(w, 341); /* int(256 * 640 / 480) = int(341.33) */
	aug_resize_short_dims(640, 480, 256, &h, &w);
	ck_assert_uint_eq(h, 341);
	ck_assert_uint_eq(w, 256);
	aug_resize_short_dims(300, 300, 256, &h, &w);
	ck_assert_uint_eq(h, 256);
	ck_assert_uint_eq(w, 256);
	aug_resize_short_dims(3, 7, 2, &h, &w);
	ck_assert_uint_eq(h, 2);
	ck_assert_uint_eq(w, 4); /* int(14 / 3) */
}
END_TEST

START_TEST(test_augment_normalize_hand)
{
	struct fmt_schema s;
	/* 1 x 2 x 3: pixels (0, 51, 255) and (255, 102, 0) */
	const uint8_t img[6] = {0, 51, 255, 255, 102, 0};
	float out[6];
	const double mean[3] = {0.485, 0.456, 0.406}, sd[3] = {0.229, 0.224, 0.225};
	struct aug_ctx ctx = {0};

	image_schema(&s, 1, 2, 3);
	struct pipe_plan *p = plan_for("normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, "
				       "0.225))", &s);
	ck_assert_uint_eq(apply1(p, &ctx, img, 6, (uint8_t *)out, sizeof(out)), sizeof(out));
	/* CHW: out[ch * 2 + x] = (img[x * 3 + ch] / 255 - mean) / std */
	for (uint32_t ch = 0; ch < 3; ch++)
		for (uint32_t x = 0; x < 2; x++) {
			double want = (img[x * 3 + ch] / 255.0 - mean[ch]) / sd[ch];
			ck_assert_double_eq_tol(out[ch * 2 + x], want, 2e-6);
		}
	ck_assert_double_eq_tol(out[0], -0.485 / 0.229, 2e-6); /* x = 0: -mean / std */
	free(p);

	/* HWC, bf16, one std for a gray image: same bits as the kernels' twin */
	uint16_t o16[2];
	const uint8_t g[2] = {0, 255};
	image_schema(&s, 1, 2, 0);
	p = plan_for("normalize(mean=0.5, std=0.5, dtype=bf16, layout=hwc)", &s);
	ck_assert_uint_eq(apply1(p, &ctx, g, 2, (uint8_t *)o16, sizeof(o16)), 4);
	ck_assert_uint_eq(o16[0], 0xbf80); /* -1.0 */
	ck_assert_uint_eq(o16[1], 0x3f80); /* 1.0 */
	struct feed_convert cv;
	ck_assert_int_eq(feed_convert_init(&cv, 1, 2, 1, FEED_CONVERT_BF16, FEED_CONVERT_NHWC,
					   (const float[]){0.5f}, (const float[]){0.5f}), 0);
	uint16_t twin[2];
	ck_assert_int_eq(feed_convert_images_cpu(&cv, g, 1, NULL, twin), 0);
	ck_assert_mem_eq(twin, o16, sizeof(twin));
	free(p);
}
END_TEST

/* ------------------------------------------------------------------ */
/* decode stages on real files ($FEED_IMAGES, tests/images fixtures)    */


/* An encoded-image field "image" whose largest image is w x h. */
static void encoded_schema(struct fmt_schema *s, uint32_t w, uint32_t h)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 1;
	struct fmt_field *f = &s->fields[0];
	strcpy(f->name, "image");
	f->dtype = FEED_DTYPE_U8;
	f->variable = true;
	f->max_bytes = 1u << 24;
	f->image = true;
	f->max_width = w;
	f->max_height = h;
	f->max_pixels = (uint64_t)w * h;
}

/* Runs plan on one encoded record with fresh decoders; returns the code. */
static int apply_img(const struct pipe_plan *p, const struct aug_ctx *ctx, const uint8_t *src,
		     size_t len, uint8_t *dst, size_t cap, struct feed_err *err)
{
	struct aug_img ai = {0};
	void *scratch = malloc(pipe_scratch_bytes(p) + 1);
	struct aug_in in = {src, len};
	struct aug_out out = {dst, cap, NULL};

	if (p->dec_channels_mask & 2)
		ck_assert_int_eq(img_decoder_new(&p->dec_lim, 1, &ai.dec1, NULL), 0);
	if (p->dec_channels_mask & 8)
		ck_assert_int_eq(img_decoder_new(&p->dec_lim, 3, &ai.dec3, NULL), 0);
	int rc = aug_apply_img(p, ctx, &in, &out, scratch, &ai, err);
	img_decoder_free(ai.dec1);
	img_decoder_free(ai.dec3);
	free(scratch);
	return rc;
}

/* decode | center_crop (| hflip): the decoder's own full decode, cropped
 * (zero-padded where the crop is larger) and mirrored, byte for byte. */
START_TEST(test_augment_decode_center_crop_equals_full_decode)
{
	static const struct {
		const char *file;
		uint32_t c, size;
	} cases[] = {{"rgb420.jpg", 3, 100}, {"progressive.jpg", 3, 57}, {"gray.jpg", 1, 64},
		     {"cmyk.jpg", 3, 33}, {"rgb8.png", 3, 200}, {"palette.png", 3, 31},
		     {"rgb420.jpg", 1, 64}, {"tiny.jpg", 3, 9}, {"small.jpg", 3, 48}};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		size_t len;
		uint8_t *src = fixture_file(cases[k].file, &len);
		struct img_info info;
		struct fmt_schema s;
		char text[128];
		uint32_t c = cases[k].c, n = cases[k].size;
		struct feed_err err = {0};

		ck_assert_int_eq(img_probe(src, len, &info, NULL), 0);
		encoded_schema(&s, info.width, info.height);
		struct img_limits lim = {info.width, info.height, 0};
		struct img_decoder *dec;
		struct img_decoded full;
		ck_assert_int_eq(img_decoder_new(&lim, c, &dec, NULL), 0);
		ck_assert_int_eq(img_decode(dec, src, len, NULL, 1, &full, NULL), 0);
		/* flip 1: flipped after the crop; 2: before it (the crop's offsets
		 * are then the mirrored image's) */
		for (int flip = 0; flip < 3; flip++) {
			snprintf(text, sizeof text, "decode(channels=%u) | %scenter_crop(size=%u)%s", c,
				 flip == 2 ? "hflip(p=1) | " : "", n, flip == 1 ? " | hflip(p=1)" : "");
			struct pipe_plan *p = plan_for(text, &s);
			uint8_t *got = malloc((size_t)n * n * c), *want = calloc((size_t)n * n, c);
			memset(got, 0xa5, (size_t)n * n * c);
			struct aug_ctx ctx = {.seed = 1, .sample = k};
			ck_assert_msg(apply_img(p, &ctx, src, len, got, (size_t)n * n * c, &err) == 0,
				      "%s: %s", text, err.msg);
			int64_t top = aug_center_crop_offset(info.height, n);
			int64_t left = aug_center_crop_offset(info.width, n);
			for (uint32_t y = 0; y < n; y++)
				for (uint32_t x = 0; x < n; x++) {
					int64_t sy = top + y, sx = left + x;
					if (sy < 0 || sx < 0 || sy >= info.height || sx >= info.width)
						continue;
					uint32_t ox = flip == 1 ? n - 1 - x : x;
					if (flip == 2)
						sx = info.width - 1 - sx;
					memcpy(want + ((size_t)y * n + ox) * c,
					       full.view.px + sy * full.view.stride + sx * c, c);
				}
			ck_assert_msg(!memcmp(got, want, (size_t)n * n * c), "%s on %s", text,
				      cases[k].file);
			free(got);
			free(want);
			free(p);
		}
		img_decoder_free(dec);
		free(src);
	}
}
END_TEST

/* decode | random_resized_crop | hflip: the box drawn from the header,
 * decoded at img_scale_for's scale and resampled, flipped as drawn. */
START_TEST(test_augment_decode_rrc_equals_parts)
{
	static const char *const files[] = {"photo_00.jpg", "photo_03.jpg", "rgb444.jpg",
					    "rgb16.png", "interlaced.png"};

	for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
		size_t len;
		uint8_t *src = fixture_file(files[k], &len);
		struct img_info info;
		struct fmt_schema s;
		uint32_t flips = 0;

		ck_assert_int_eq(img_probe(src, len, &info, NULL), 0);
		encoded_schema(&s, info.width + 7, info.height + 3); /* not the largest */
		struct pipe_plan *p = plan_for("decode | random_resized_crop(size=64) | hflip", &s);
		struct img_decoder *dec;
		ck_assert_int_eq(img_decoder_new(&p->dec_lim, 3, &dec, NULL), 0);
		void *rs = malloc(img_resample_scratch_bytes(info.width, info.height, 64, 64, 3));
		uint8_t got[64 * 64 * 3], want[64 * 64 * 3];
		for (uint64_t smp = 0; smp < 8; smp++) {
			struct aug_ctx ctx = {.seed = 11, .epoch = 2, .sample = smp};
			struct feed_err err = {0};
			uint32_t u[22];
			struct img_box b;
			struct img_decoded d;
			memset(got, 1, sizeof(got));
			memset(want, 2, sizeof(want));
			ck_assert_msg(apply_img(p, &ctx, src, len, got, sizeof(got), &err) == 0, "%s: %s",
				      files[k], err.msg);
			aug_rrc_draws(&ctx, 1, u);
			aug_rrc_box(info.height, info.width, p->spec.ops[1].scale_ppb,
				    p->spec.ops[1].ratio_ppb, u, &b);
			bool flip = aug_hflip_decision(feed_rand_u32(11, 2, smp, 2, 0), PIPE_P_ONE / 2);
			flips += flip;
			uint32_t sc = img_scale_for(b.w, b.h, 64, 64);
			ck_assert_int_eq(img_decode(dec, src, len, &b, sc, &d, NULL), 0);
			memset(want, 1, sizeof(want));
			img_resample_u8(&d.view, d.box_x, d.box_y, d.box_w, d.box_h, want, 64, 64, flip,
					rs);
			ck_assert_msg(!memcmp(got, want, sizeof(got)), "%s sample %" PRIu64, files[k],
				      smp);
		}
		ck_assert_uint_gt(flips, 0);
		ck_assert_uint_lt(flips, 8);
		free(rs);
		img_decoder_free(dec);
		free(p);
		free(src);
	}
}
END_TEST

/* Bad records fail with the decoder's code, naming sample and field. */
START_TEST(test_augment_decode_bad_images)
{
	static const struct {
		const char *file;
		int code;
	} cases[] = {{"bad_truncated.jpg", -EBADMSG}, {"bad_garbage.jpg", -EBADMSG},
		     {"bad_truncated.png", -EBADMSG}, {"bad_crc.png", -EBADMSG},
		     {"bomb.jpg", -E2BIG}, {"bomb.png", -E2BIG}, {"other.gif", -ENOTSUP},
		     {"other.bmp", -ENOTSUP}, {"bad_truncated_header.jpg", -EBADMSG}};
	struct fmt_schema s;
	uint8_t out[32 * 32 * 3];

	encoded_schema(&s, 640, 480);
	struct pipe_plan *p = plan_for("decode | random_resized_crop(size=32)", &s);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		size_t len;
		uint8_t *src = fixture_file(cases[k].file, &len);
		struct aug_ctx ctx = {.sample = 41};
		struct feed_err err = {0};
		int rc = apply_img(p, &ctx, src, len, out, sizeof(out), &err);
		ck_assert_msg(rc == cases[k].code, "%s: %d (%s)", cases[k].file, rc, err.msg);
		ck_assert_msg(strstr(err.msg, "sample 41: field 'image': "), "%s: '%s'", cases[k].file,
			      err.msg);
		ck_assert_msg(strlen(err.msg) > strlen("sample 41: field 'image': ") + 4, "%s: '%s'",
			      cases[k].file, err.msg);
		free(src);
	}
	/* no decoder lent */
	size_t len;
	uint8_t *src = fixture_file("small.jpg", &len);
	struct aug_in in = {src, len};
	struct aug_out o = {out, sizeof(out), NULL};
	struct feed_err err = {0};
	void *scratch = malloc(pipe_scratch_bytes(p));
	ck_assert_int_eq(aug_apply(p, &(struct aug_ctx){0}, &in, &o, scratch, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "no 3-channel image decoder"));
	free(scratch);
	free(src);
	free(p);
}
END_TEST

/* A worker's decoders and scratch over many good and bad records: the heap
 * in use does not grow (bad images leave nothing behind). */
START_TEST(test_augment_decode_no_memory_growth)
{
	static const char *const names[] = {"photo_01.jpg", "bad_garbage.jpg", "bad_truncated.png",
					    "bomb.jpg", "rgb8.png", "bad_truncated.jpg", "other.gif"};
	enum { NN = sizeof(names) / sizeof(names[0]) };
	uint8_t *rec[NN];
	size_t len[NN];
	struct fmt_schema s;
	uint8_t out[48 * 48 * 3];
	struct aug_img ai = {0};
	size_t before = 0;

	for (int k = 0; k < NN; k++)
		rec[k] = fixture_file(names[k], &len[k]);
	encoded_schema(&s, 640, 640);
	struct pipe_plan *p = plan_for("decode | random_resized_crop(size=48) | hflip", &s);
	void *scratch = malloc(pipe_scratch_bytes(p) + 1);
	ck_assert_int_eq(img_decoder_new(&p->dec_lim, 3, &ai.dec3, NULL), 0);
	for (uint64_t it = 0; it < 300; it++) {
		if (it == 20)
			before = mallinfo2().uordblks;
		for (int k = 0; k < NN; k++) {
			struct aug_ctx ctx = {.seed = 5, .epoch = it, .sample = (uint64_t)k};
			struct aug_in in = {rec[k], len[k]};
			struct aug_out o = {out, sizeof(out), NULL};
			struct feed_err err = {0};
			int rc = aug_apply_img(p, &ctx, &in, &o, scratch, &ai, &err);
			/* bad_truncated.jpg fails only when the box reaches its missing rows */
			if (k != 5)
				ck_assert_msg((rc == 0) == (k == 0 || k == 4), "%s: %d %s", names[k], rc,
					      err.msg);
		}
	}
	size_t after = mallinfo2().uordblks;
	ck_assert_msg(after <= before + 4096, "heap in use grew from %zu to %zu bytes", before,
		      after);
	img_decoder_free(ai.dec3);
	free(scratch);
	free(p);
	for (int k = 0; k < NN; k++)
		free(rec[k]);
}
END_TEST

/* ------------------------------------------------------------------ */

/* check_augment --rrc H W N SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX SEED:
 * prints N boxes "y x h w" of random_resized_crop (op 0, epoch 0, samples
 * 0..N-1) on an H x W image, for tests/python/test_rrc_sampler.py. */
static int rrc_boxes(int argc, char **argv)
{
	if (argc != 10) {
		fprintf(stderr, "usage: %s --rrc H W N SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX SEED\n",
			argv[0]);
		return 2;
	}
	uint32_t h = (uint32_t)atoi(argv[2]), w = (uint32_t)atoi(argv[3]);
	uint64_t n = strtoull(argv[4], NULL, 0);
	uint32_t scale[2] = {(uint32_t)(atof(argv[5]) * 1e9 + 0.5), (uint32_t)(atof(argv[6]) * 1e9 + 0.5)};
	uint64_t ratio[2] = {(uint64_t)(atof(argv[7]) * 1e9 + 0.5), (uint64_t)(atof(argv[8]) * 1e9 + 0.5)};
	struct aug_ctx ctx = {.seed = strtoull(argv[9], NULL, 0)};
	uint32_t u[22];
	struct img_box b;

	for (ctx.sample = 0; ctx.sample < n; ctx.sample++) {
		aug_rrc_draws(&ctx, 0, u);
		aug_rrc_box(h, w, scale, ratio, u, &b);
		printf("%u %u %u %u\n", b.y, b.x, b.h, b.w);
	}
	return fflush(stdout) ? 1 : 0;
}

/* check_augment --decode PIPELINE FILE SEED EPOCH SAMPLE: runs PIPELINE
 * (which decodes field "image") on the JPEG or PNG FILE as sample SAMPLE
 * and prints one line "top left height width flip out_bytes" (the first
 * random_resized_crop's box in the image's pixels and the first hflip's
 * decision, -1 when absent) and the output bytes, for
 * tests/python/test_rrc_torchvision.py. */
static int decode_probe(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s --decode PIPELINE FILE SEED EPOCH SAMPLE\n", argv[0]);
		return 2;
	}
	struct aug_ctx ctx = {strtoull(argv[4], NULL, 0), strtoull(argv[5], NULL, 0),
			      strtoull(argv[6], NULL, 0)};
	FILE *f = fopen(argv[3], "rb");
	static uint8_t src[1 << 24];
	size_t len = f ? fread(src, 1, sizeof(src), f) : 0;
	struct img_info info;
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	struct aug_img ai = {0};

	if (f)
		fclose(f);
	if (!len || img_probe(src, len, &info, &err) < 0) {
		fprintf(stderr, "decode: %s: %s\n", argv[3], err.msg[0] ? err.msg : "cannot read");
		return 1;
	}
	encoded_schema(&s, info.width, info.height);
	if (pipe_plan_text(argv[2], &s, p, &err) < 0 ||
	    ((p->dec_channels_mask & 2) && img_decoder_new(&p->dec_lim, 1, &ai.dec1, &err) < 0) ||
	    ((p->dec_channels_mask & 8) && img_decoder_new(&p->dec_lim, 3, &ai.dec3, &err) < 0)) {
		fprintf(stderr, "decode: %s\n", err.msg);
		return 1;
	}
	size_t cap = p->out.fields[0].max_bytes, got = 0;
	uint8_t *out = malloc(cap), *scratch = malloc(pipe_scratch_bytes(p) + 1);
	struct aug_in in = {src, len};
	struct aug_out o = {out, cap, &got};
	if (aug_apply_img(p, &ctx, &in, &o, scratch, &ai, &err) < 0) {
		fprintf(stderr, "decode: %s\n", err.msg);
		return 1;
	}
	long box[4] = {-1, -1, -1, -1}, flip = -1;
	for (uint32_t i = p->spec.nops; i-- > 0;) {
		const struct pipe_op *op = &p->spec.ops[i];
		if (op->kind == PIPE_RANDOM_RESIZED_CROP) {
			uint32_t u[22];
			struct img_box b;
			aug_rrc_draws(&ctx, i, u);
			aug_rrc_box(info.height, info.width, op->scale_ppb, op->ratio_ppb, u, &b);
			box[0] = b.y, box[1] = b.x, box[2] = b.h, box[3] = b.w;
		} else if (op->kind == PIPE_HFLIP) {
			flip = aug_hflip_decision(feed_rand_u32(ctx.seed, ctx.epoch, ctx.sample, i, 0),
						  op->p_ppb);
		}
	}
	printf("%ld %ld %ld %ld %ld %zu\n", box[0], box[1], box[2], box[3], flip, got);
	fwrite(out, 1, got, stdout);
	img_decoder_free(ai.dec1);
	img_decoder_free(ai.dec3);
	free(out);
	free(scratch);
	free(p);
	return fflush(stdout) ? 1 : 0;
}

static Suite *augment_suite(void)
{
	Suite *s = suite_create("augment");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_augment_philox_known_answers);
	tcase_add_test(tc, test_augment_draws_are_pure);
	tcase_add_test(tc, test_augment_draw_to_parameters);
	tcase_add_test(tc, test_augment_hflip_rate);
	tcase_add_test(tc, test_augment_random_crop_hand);
	tcase_add_test(tc, test_augment_hflip_hand);
	tcase_add_test(tc, test_augment_center_crop_hand);
	tcase_add_test(tc, test_augment_crop_flip_fused_equals_separate);
	tcase_add_test(tc, test_augment_resize_hand);
	tcase_add_test(tc, test_augment_resize_channels_hand);
	tcase_add_test(tc, test_augment_random_window_bounds);
	tcase_add_test(tc, test_augment_errors);
	tcase_add_test(tc, test_augment_deterministic);
	tcase_add_test(tc, test_augment_rrc_box_hand);
	tcase_add_test(tc, test_augment_resize_short_dims);
	tcase_add_test(tc, test_augment_normalize_hand);
	tcase_add_test(tc, test_augment_decode_center_crop_equals_full_decode);
	tcase_add_test(tc, test_augment_decode_rrc_equals_parts);
	tcase_add_test(tc, test_augment_decode_bad_images);
	tcase_add_test(tc, test_augment_decode_no_memory_growth);
	tcase_add_test(tc, test_augment_pixel_keys_refused_by_name);
	tcase_add_test(tc, test_augment_pixel_canonical_defaults);
	tcase_add_test(tc, test_augment_linspace_variants);
	tcase_add_test(tc, test_augment_pixel_plan_refusals);
	tcase_add_test(tc, test_augment_pixel_hand);
	tcase_add_test(tc, test_augment_pixel_random_deterministic);
	tcase_add_test(tc, test_augment_pixel_round_even);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--probe"))
		return probe(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--pixel"))
		return pixel_probe(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--aug-mix"))
		return augmix_probe(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--pixel-params"))
		return pixel_params(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--decode"))
		return decode_probe(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--rrc"))
		return rrc_boxes(argc, argv);
	return check_run(augment_suite);
}
