/*
 * check_augment_mix.c: the pipeline's batch op `mix` (core/augment_mix.c,
 * planned by core/pipeline_*.c): its text (defaults, canonical form), the
 * plan's refusals naming what is wrong, the label field made f32
 * [num_classes], and aug_batch_mix() on a batch laid out as the daemon's
 * builder lays it out against kernels/mix.h's twins called directly on
 * separate copies (the Loader's conversion path), bit for bit, for every
 * op and dtype; an out-of-range label refused naming its row.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment_mix.h"
#include "check_util.h"
#include "convert.h"
#include "mix.h"
#include "pipeline.h"

#define H 5
#define W 6
#define CH 3
#define NCLS 7
#define NB 9

/* image u8 H x W x 3 and label of dtype ldt. */
static void schema(struct fmt_schema *s, int ldt, size_t lbytes)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 2;
	s->fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 3,
					  .shape = {H, W, CH}, .max_bytes = H * W * CH};
	s->fields[1] = (struct fmt_field){.name = "label", .dtype = ldt, .max_bytes = lbytes};
}

static struct pipe_plan *plan(const char *text, const struct fmt_schema *s, int want_rc,
			      const char *want_msg)
{
	struct pipe_plan *p = calloc(1, sizeof(*p));
	struct feed_err err = {0};
	int rc = pipe_plan_text(text, s, p, &err);

	ck_assert_msg(rc == want_rc, "%s: rc %d (%s)", text, rc, err.msg);
	if (want_msg)
		ck_assert_msg(strstr(err.msg, want_msg), "%s: message '%s' lacks '%s'", text,
			      err.msg, want_msg);
	return p;
}

START_TEST(test_augment_mix_text_and_plan)
{
	struct fmt_schema s;
	schema(&s, FEED_DTYPE_I64, 8);
	struct pipe_plan *p = plan("normalize(mean=0.5, std=0.25) | mix(10, mixup_alpha=0.2)", &s,
				   0, NULL);
	ck_assert_str_eq(p->canonical, "normalize(mean=0.5, std=0.25, dtype=f32, layout=chw, "
				       "field=image) | mix(num_classes=10, mixup_alpha=0.2, "
				       "cutmix_alpha=0, switch_prob=0.5, label_smoothing=0, "
				       "field=image)");
	ck_assert(p->bmix.on);
	ck_assert_uint_eq(p->bmix.img_field, 0);
	ck_assert_uint_eq(p->bmix.label_field, 1);
	ck_assert_int_eq(p->out.fields[1].dtype, FEED_DTYPE_F32);
	ck_assert_uint_eq(p->out.fields[1].rank, 1);
	ck_assert_uint_eq(p->out.fields[1].shape[0], 10);
	ck_assert_uint_eq(p->out.fields[1].max_bytes, 40);
	ck_assert_uint_eq(p->bmix.cv.h, H);
	ck_assert_uint_eq(p->bmix.cv.w, W);
	ck_assert(p->bmix.mixup_alpha == 0.2 && p->bmix.cutmix_alpha == 0.0);
	/* the canonical text plans again to the same plan */
	struct pipe_plan *q = plan(p->canonical, &s, 0, NULL);
	ck_assert_uint_eq(q->hash, p->hash);
	free(q);
	free(p);
	free(plan("normalize(mean=0, std=1) | mix(num_classes=10, label_smoothing=1)", &s,
		  -EINVAL, "key 'label_smoothing'"));
	free(plan("normalize(mean=0, std=1) | mix(mixup_alpha=1)", &s, -EINVAL,
		  "missing key 'num_classes'"));
	free(plan("normalize(mean=0, std=1) | mix(num_classes=3, cutmix_alpha=-1)", &s, -EINVAL,
		  "key 'cutmix_alpha'"));
	free(plan("mix(num_classes=3, mixup_alpha=1)", &s, -EINVAL,
		  "op 1 'mix': mixes normalized images: put normalize(...)"));
	free(plan("normalize(mean=0, std=1) | mix(num_classes=3) | hflip", &s, -EINVAL,
		  "op 2 'mix': a batch op: it must be the pipeline's last"));
	free(plan("normalize(mean=0, std=1) | random_apply(transforms=[mix(num_classes=3)])", &s,
		  -EINVAL, "mix cannot be one"));
	/* an i64 label is wider than one f32 soft label */
	free(plan("normalize(mean=0, std=1) | mix(num_classes=1)", &s, -EINVAL,
		  "key 'num_classes': 1 soft labels are smaller than the 8-byte label"));
	s.fields[1].dtype = FEED_DTYPE_F32;
	s.fields[1].max_bytes = 4;
	free(plan("normalize(mean=0, std=1) | mix(num_classes=3)", &s, -EINVAL,
		  "which is f32, not one integer per sample"));
	strcpy(s.fields[1].name, "target");
	free(plan("normalize(mean=0, std=1) | mix(num_classes=3)", &s, -EINVAL,
		  "the field 'label', which the dataset lacks"));
}
END_TEST

/* A u8 image per sample, deterministic. */
static uint8_t px(size_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

/* One batch through aug_batch_mix() (the builder's layout: images then
 * label rows of 4 * NCLS bytes, each starting with the label) against the
 * twins on the Loader's layout (converted images, labels apart). */
static void mix_case(const char *dt, const char *mix, uint64_t batch, int ldt, size_t lbytes)
{
	struct fmt_schema s;
	char text[256];
	schema(&s, ldt, lbytes);
	snprintf(text, sizeof(text), "normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, "
		 "0.225), dtype=%s) | mix(num_classes=%d, %s)", dt, NCLS, mix);
	struct pipe_plan *p = plan(text, &s, 0, NULL);
	const struct feed_convert *cv = &p->bmix.cv;
	size_t per = feed_convert_sample_bytes(cv);
	uint8_t *u8 = malloc(H * W * CH * NB), *img = malloc(per * NB), *ref = malloc(per * NB);
	uint8_t *rows = calloc(NB, 4 * NCLS), *labels = calloc(NB, 8);
	float *want = malloc(sizeof(float) * NB * NCLS);

	for (size_t i = 0; i < (size_t)H * W * CH * NB; i++)
		u8[i] = px(i);
	feed_convert_images_cpu(cv, u8, NB, NULL, img);
	memcpy(ref, img, per * NB);
	for (uint32_t i = 0; i < NB; i++) {
		uint64_t y = (i * 5 + batch) % NCLS;
		memcpy(rows + (size_t)i * 4 * NCLS, &y, lbytes);
		memcpy(labels + i * lbytes, &y, lbytes);
	}
	struct feed_err err = {0};
	ck_assert_int_eq(aug_batch_mix(p, 42, 3, batch, img, rows, NB, NULL, &err), 0);

	struct feed_mix_draw d = {.op = FEED_MIX_OP_NONE, .lam = 1.0};
	struct feed_mix_args a;
	if (p->bmix.mixup_alpha > 0 || p->bmix.cutmix_alpha > 0)
		ck_assert_int_eq(feed_mix_draw_batch(p->bmix.mixup_alpha, p->bmix.cutmix_alpha,
						     p->bmix.switch_prob, 42, 3, batch, H, W, &d),
				 0);
	ck_assert_int_eq(feed_mix_args_init(&a, &d, H, W, NCLS, p->bmix.label_smoothing), 0);
	ck_assert_int_eq(feed_mix_images_cpu(cv, &a, NB, ref), 0);
	ck_assert_int_eq(feed_mix_labels_cpu(&a, labels, p->bmix.label_type, NB, want), 0);
	ck_assert_msg(!memcmp(img, ref, per * NB), "%s: images differ (op %u)", text, d.op);
	ck_assert_msg(!memcmp(rows, want, sizeof(float) * NB * NCLS), "%s: labels differ", text);
	if (d.op == FEED_MIX_OP_MIXUP) { /* it did mix: the images moved */
		uint8_t *plain = malloc(per * NB);
		feed_convert_images_cpu(cv, u8, NB, NULL, plain);
		ck_assert(memcmp(img, plain, per * NB) != 0);
		free(plain);
	}
	free(u8), free(img), free(ref), free(rows), free(labels), free(want), free(p);
}

START_TEST(test_augment_mix_equals_the_twins)
{
	static const char *const dts[] = {"f32", "f16", "bf16"};
	static const char *const mixes[] = {
		"mixup_alpha=0.2", "cutmix_alpha=1", "mixup_alpha=0.8, cutmix_alpha=1, "
		"switch_prob=0.3, label_smoothing=0.1", "label_smoothing=0.1"};
	for (size_t t = 0; t < 3; t++)
		for (size_t m = 0; m < 4; m++)
			for (uint64_t b = 0; b < 6; b++)
				mix_case(dts[t], mixes[m], b, FEED_DTYPE_I64, 8);
	mix_case("f32", "cutmix_alpha=1", 2, FEED_DTYPE_U8, 1);
	mix_case("f32", "mixup_alpha=1", 3, FEED_DTYPE_U16, 2);
}
END_TEST

START_TEST(test_augment_mix_refuses_a_label_out_of_range)
{
	struct fmt_schema s;
	schema(&s, FEED_DTYPE_I32, 4);
	struct pipe_plan *p = plan("normalize(mean=0, std=1) | mix(num_classes=4, mixup_alpha=1)",
				   &s, 0, NULL);
	size_t per = feed_convert_sample_bytes(&p->bmix.cv);
	uint8_t *img = calloc(3, per), *rows = calloc(3, 16);
	int32_t y[3] = {1, 4, 0};
	for (int i = 0; i < 3; i++)
		memcpy(rows + 16 * i, &y[i], 4);
	struct feed_err err = {0};
	uint64_t sample[3] = {30, 31, 32};
	ck_assert_int_eq(aug_batch_mix(p, 1, 0, 0, img, rows, 3, sample, &err), -ERANGE);
	ck_assert_str_eq(err.msg, "mix: sample 31 (row 1 of the batch): field 'label' 4 not in "
				  "[0, num_classes=4)");
	y[1] = -1;
	memcpy(rows + 16, &y[1], 4);
	ck_assert_int_eq(aug_batch_mix(p, 1, 0, 0, img, rows, 3, NULL, &err), -ERANGE);
	ck_assert_str_eq(err.msg, "mix: row 1 of the batch: field 'label' -1 not in "
				  "[0, num_classes=4)");
	free(img), free(rows), free(p);
}
END_TEST

static Suite *augment_mix_suite(void)
{
	Suite *s = suite_create("augment_mix");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_augment_mix_text_and_plan);
	tcase_add_test(tc, test_augment_mix_equals_the_twins);
	tcase_add_test(tc, test_augment_mix_refuses_a_label_out_of_range);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(augment_mix_suite)
