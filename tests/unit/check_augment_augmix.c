/*
 * check_augment_augmix.c: the pipeline op aug_mix (core/augment_augmix.c,
 * planned by core/pipeline_*.c): its text (torchvision's defaults, canonical
 * form, refusals naming the key), its plan (a pixel stage with room for
 * its chains), and its draws: Beta weights summing to 1, chain weights
 * summing to m1, depths and bins in range, the same for the same sample.
 * Parity with torchvision's AugMix is tests/python/test_feedclient_augmix.py.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "augment_pixel.h"
#include "check_util.h"
#include "pipeline.h"

static void schema(struct fmt_schema *s, uint32_t c)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 1;
	s->fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 3,
					  .shape = {12, 10, c}, .max_bytes = 120 * c};
}

static void refused(const char *text, const char *want)
{
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	schema(&s, 3);
	ck_assert_int_eq(pipe_plan_text(text, &s, p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, want), "%s: '%s' lacks '%s'", text, err.msg, want);
	free(p);
}

START_TEST(test_augment_augmix_text_and_plan)
{
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	schema(&s, 3);
	ck_assert_int_eq(pipe_plan_text("aug_mix", &s, p, &err), 0);
	ck_assert_str_eq(p->canonical, "aug_mix(severity=3, mixture_width=3, chain_depth=-1, "
				       "alpha=1, all_ops=true, interpolation=bilinear, field=image)");
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_int_eq(p->stages[0].kind, PIPE_STAGE_PIXEL);
	/* after the stage's two images and float plane: three images and a sum */
	ck_assert_uint_gt(p->stages[0].px_mix_off, 0);
	ck_assert_uint_ge(p->pix_scratch_bytes, p->stages[0].px_mix_off + 3 * 384 + 4 * 360);
	ck_assert_int_eq(pipe_plan_text("aug_mix(4, mixture_width=2, chain_depth=3, alpha=0.5, "
					"all_ops=false, interpolation=nearest, fill=9)",
					&s, p, &err), 0);
	ck_assert_str_eq(p->canonical, "aug_mix(severity=4, mixture_width=2, chain_depth=3, "
				       "alpha=0.5, all_ops=false, interpolation=nearest, fill=9, "
				       "field=image)");
	ck_assert_int_eq(pipe_plan_text("hflip | aug_mix", &s, p, &err), 0);
	free(p);
	refused("aug_mix(severity=11)", "key 'severity'");
	refused("aug_mix(mixture_width=9)", "key 'mixture_width'");
	refused("aug_mix(chain_depth=0)", "key 'chain_depth': -1 (1 to 3 drawn) or a whole");
	refused("aug_mix(chain_depth=1.5)", "key 'chain_depth'");
	refused("aug_mix(alpha=0)", "key 'alpha'");
	refused("aug_mix(interpolation=bicubic)", "key 'interpolation'");
	refused("random_apply(transforms=[aug_mix])", "aug_mix cannot be one");
	schema(&s, 4);
	p = calloc(1, sizeof(*p));
	ck_assert_int_eq(pipe_plan_text("aug_mix", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "has 4 channels (aug_mix takes 1 or 3)"));
	free(p);
}
END_TEST

START_TEST(test_augment_augmix_draws)
{
	struct fmt_schema s;
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	double m0 = 0.0;
	schema(&s, 3);
	ck_assert_int_eq(pipe_plan_text("aug_mix(severity=2, mixture_width=4)", &s, p, &err), 0);
	for (uint64_t smp = 0; smp < 400; smp++) {
		struct aug_ctx ctx = {11, 1, smp};
		struct aug_mix_draws d, again;
		aug_mix_draw(&p->spec.ops[0], 0, &ctx, 12, 10, &d);
		aug_mix_draw(&p->spec.ops[0], 0, &ctx, 12, 10, &again);
		ck_assert(!memcmp(&d, &again, sizeof(d)));
		ck_assert(fabsf(d.m0 + d.m1 - 1.0f) < 1e-6f && d.m0 >= 0 && d.m1 >= 0);
		float sum = 0;
		ck_assert_uint_eq(d.width, 4);
		for (uint32_t k = 0; k < d.width; k++) {
			sum += d.w[k];
			ck_assert(d.chain[k].depth >= 1 && d.chain[k].depth <= 3);
			for (uint32_t t = 0; t < d.chain[k].depth; t++)
				ck_assert(d.chain[k].op[t] < 13 && d.chain[k].bin[t] < 2);
		}
		ck_assert(fabsf(sum - d.m1) < 1e-5f);
		m0 += d.m0;
	}
	ck_assert(fabs(m0 / 400 - 0.5) < 0.05); /* Beta(1, 1) */
	free(p);
}
END_TEST

static Suite *augment_augmix_suite(void)
{
	Suite *s = suite_create("augment_augmix");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_augment_augmix_text_and_plan);
	tcase_add_test(tc, test_augment_augmix_draws);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(augment_augmix_suite)
