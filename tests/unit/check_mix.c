/*
 * check_mix.c: the mixes of kernels/mix.h: the CPU twins against a
 * straightforward out-of-place reference (every dtype and layout, bit for
 * bit), cutmix's box, soft labels that sum to 1, and the draws: pure,
 * lambda corrected by the box area, the switch's probability, Beta's mean
 * and variance. Built with -ffp-contract=off: the references round each
 * product and sum as the element functions do.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "convert.h"
#include "mix.h"

/* A deterministic float in [-2.5, 2.5) (normalized images reach both signs). */
static float val(size_t i)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 3);
	return (float)(x % 100000u) * 5e-5f - 2.5f;
}

/* A batch of n samples of cv filled with val(), stored in cv's dtype. */
static void *make_batch(const struct feed_convert *cv, size_t n)
{
	size_t per = (size_t)cv->h * cv->w * cv->c, total = per * n;
	void *p = malloc(feed_convert_sample_bytes(cv) * n);
	for (size_t i = 0; i < total; i++) {
		float f = val(i);
		if (cv->dtype == FEED_CONVERT_F32)
			((float *)p)[i] = f;
		else if (cv->dtype == FEED_CONVERT_F16)
			((uint16_t *)p)[i] = feed_f32_to_f16(f);
		else
			((uint16_t *)p)[i] = feed_f32_to_bf16(f);
	}
	return p;
}

static float load(const struct feed_convert *cv, const void *p, size_t i)
{
	if (cv->dtype == FEED_CONVERT_F32)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return cv->dtype == FEED_CONVERT_F16 ? feed_f16_to_f32(h) : feed_bf16_to_f32(h);
}

/* round f to the batch's dtype, as a float */
static float rnd(const struct feed_convert *cv, float f)
{
	if (cv->dtype == FEED_CONVERT_F16)
		return feed_f16_to_f32(feed_f32_to_f16(f));
	if (cv->dtype == FEED_CONVERT_BF16)
		return feed_bf16_to_f32(feed_f32_to_bf16(f));
	return f;
}

static struct feed_convert conv(uint32_t h, uint32_t w, uint32_t c, int dtype, int layout)
{
	struct feed_convert cv;
	ck_assert_int_eq(feed_convert_init(&cv, h, w, c, (enum feed_convert_dtype)dtype,
					   (enum feed_convert_layout)layout, NULL, NULL), 0);
	return cv;
}

static struct feed_mix_args args(uint32_t op, double lam, uint32_t x1, uint32_t y1, uint32_t x2,
				 uint32_t y2, uint32_t h, uint32_t w)
{
	struct feed_mix_draw d = {op, lam, x1, y1, x2, y2};
	struct feed_mix_args a;
	ck_assert_int_eq(feed_mix_args_init(&a, &d, h, w, 10, 0.1), 0);
	return a;
}

START_TEST(test_mix_mixup_matches_reference)
{
	const size_t ns[] = {1, 2, 5};
	const double lams[] = {0.0, 1.0, 0.3, 0.7312345678901};
	for (int dtype = 0; dtype < 3; dtype++)
		for (int layout = 0; layout < 2; layout++)
			for (size_t ni = 0; ni < 3; ni++)
				for (size_t li = 0; li < 4; li++) {
					/* 3 x 37 x 29: runs cross the twin's 512-element pieces */
					struct feed_convert cv = conv(37, 29, 3, dtype, layout);
					size_t n = ns[ni], per = 37 * 29 * 3;
					double lam = lams[li];
					struct feed_mix_args a = args(FEED_MIX_OP_MIXUP, lam, 0, 0, 0, 0, 37, 29);
					ck_assert(a.lam == (float)lam && a.oml == (float)(1.0 - lam));
					void *src = make_batch(&cv, n), *got = make_batch(&cv, n);
					ck_assert_int_eq(feed_mix_images_cpu(&cv, &a, n, got), 0);
					for (size_t i = 0; i < n; i++)
						for (size_t e = 0; e < per; e++) {
							size_t j = (i + n - 1) % n; /* x.roll(1, 0) */
							float x = load(&cv, src, i * per + e);
							float xr = load(&cv, src, j * per + e);
							float t1 = rnd(&cv, x * (float)lam);
							float t2 = rnd(&cv, xr * (float)(1.0 - lam));
							float want = rnd(&cv, t1 + t2);
							float have = load(&cv, got, i * per + e);
							ck_assert_msg(memcmp(&want, &have, 4) == 0,
								      "dtype %d layout %d n %zu lam %g: "
								      "sample %zu element %zu: %a, not %a",
								      dtype, layout, n, lam, i, e, have, want);
						}
					free(src);
					free(got);
				}
}
END_TEST

START_TEST(test_mix_cutmix_pastes_the_partners_box)
{
	for (int dtype = 0; dtype < 3; dtype++)
		for (int layout = 0; layout < 2; layout++) {
			uint32_t h = 9, w = 13, c = 3;
			struct feed_convert cv = conv(h, w, c, dtype, layout);
			size_t n = 4, per = (size_t)h * w * c;
			struct feed_mix_args a = args(FEED_MIX_OP_CUTMIX, 0.5, 3, 2, 11, 7, h, w);
			void *src = make_batch(&cv, n), *got = make_batch(&cv, n);
			size_t esz = dtype == FEED_CONVERT_F32 ? 4 : 2, inside = 0;
			ck_assert_int_eq(feed_mix_images_cpu(&cv, &a, n, got), 0);
			for (size_t i = 0; i < n; i++)
				for (size_t e = 0; e < per; e++) {
					size_t x = layout ? e / c % w : e % w;
					size_t y = layout ? e / (c * w) : e / w % h;
					int in = x >= 3 && x < 11 && y >= 2 && y < 7;
					ck_assert_int_eq(feed_mix_in_box(&cv, &a, e), in);
					size_t from = in ? ((i + n - 1) % n) * per + e : i * per + e;
					inside += in;
					ck_assert_msg(!memcmp((char *)got + (i * per + e) * esz,
							      (char *)src + from * esz, esz),
						      "dtype %d layout %d sample %zu element %zu", dtype,
						      layout, i, e);
				}
			ck_assert_uint_eq(inside, n * 8 * 5 * c);
			free(src);
			free(got);
		}
}
END_TEST

START_TEST(test_mix_none_and_empty_box_change_nothing)
{
	struct feed_convert cv = conv(4, 5, 2, FEED_CONVERT_F32, FEED_CONVERT_NCHW);
	void *src = make_batch(&cv, 3), *got = make_batch(&cv, 3);
	struct feed_mix_args a = args(FEED_MIX_OP_NONE, 1.0, 0, 0, 0, 0, 4, 5);
	ck_assert_int_eq(feed_mix_images_cpu(&cv, &a, 3, got), 0);
	a = args(FEED_MIX_OP_CUTMIX, 1.0, 2, 1, 2, 3, 4, 5);
	ck_assert_int_eq(feed_mix_images_cpu(&cv, &a, 3, got), 0);
	ck_assert(!memcmp(src, got, feed_convert_sample_bytes(&cv) * 3));
	free(src);
	free(got);
}
END_TEST

START_TEST(test_mix_labels_sum_to_one)
{
	const int64_t labels[] = {3, 0, 9, 3, 7};
	const double smooth[] = {0.0, 0.1, 0.25};
	for (int op = 0; op < 3; op++)
		for (int s = 0; s < 3; s++) {
			struct feed_mix_draw d = {(uint32_t)op, 0.625, 1, 1, 3, 3};
			struct feed_mix_args a;
			float out[5 * 10];
			ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 10, smooth[s]), 0);
			ck_assert_int_eq(feed_mix_labels_cpu(&a, labels, FEED_MIX_LABEL_I64, 5, out), 0);
			float off = (float)(smooth[s] / 10), on = (float)(1.0 - smooth[s] + smooth[s] / 10);
			for (int i = 0; i < 5; i++) {
				double sum = 0;
				int64_t own = labels[i], partner = labels[(i + 4) % 5];
				for (int k = 0; k < 10; k++) {
					float y = own == k ? on : off, yr = partner == k ? on : off;
					float want = op == FEED_MIX_OP_NONE ? y :
						(float)(y * (float)0.625) + (float)(yr * (float)0.375);
					ck_assert_msg(out[i * 10 + k] == want, "op %d s %g row %d class %d: %a",
						      op, smooth[s], i, k, out[i * 10 + k]);
					sum += out[i * 10 + k];
				}
				ck_assert_msg(fabs(sum - 1.0) < 1e-6, "row %d sums to %.9g", i, sum);
			}
		}
}
END_TEST

START_TEST(test_mix_labels_every_type_and_range)
{
	struct feed_mix_draw d = {FEED_MIX_OP_MIXUP, 0.5, 0, 0, 0, 0};
	struct feed_mix_args a;
	float out[3 * 4], ref[3 * 4];
	const uint8_t u8[] = {1, 2, 3};
	const int8_t i8[] = {1, 2, 3};
	const uint16_t u16[] = {1, 2, 3};
	const int16_t i16[] = {1, 2, 3};
	const uint32_t u32[] = {1, 2, 3};
	const int32_t i32[] = {1, 2, 3};
	const uint64_t u64[] = {1, 2, 3};
	const int64_t i64[] = {1, 2, 3};
	const void *all[] = {u8, i8, u16, i16, u32, i32, u64, i64};
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 1, 1, 4, 0.0), 0);
	ck_assert_int_eq(feed_mix_labels_cpu(&a, i64, FEED_MIX_LABEL_I64, 3, ref), 0);
	ck_assert(ref[0 * 4 + 1] == 0.5f && ref[0 * 4 + 3] == 0.5f && ref[1 * 4 + 2] == 0.5f);
	for (uint32_t t = 0; t <= FEED_MIX_LABEL_I64; t++) {
		ck_assert_int_eq(feed_mix_labels_cpu(&a, all[t], t, 3, out), 0);
		ck_assert(!memcmp(out, ref, sizeof(out)));
	}
	const int64_t neg[] = {1, -1, 2}, big[] = {1, 2, 4};
	int64_t bad = 0;
	size_t at = 0;
	ck_assert_int_eq(feed_mix_labels_cpu(&a, neg, FEED_MIX_LABEL_I64, 3, out), -ERANGE);
	ck_assert_int_eq(feed_mix_labels_check(big, FEED_MIX_LABEL_I64, 3, 4, &bad, &at), -ERANGE);
	ck_assert(bad == 4 && at == 2);
	const uint64_t huge[] = {UINT64_MAX};
	ck_assert_int_eq(feed_mix_labels_check(huge, FEED_MIX_LABEL_U64, 1, 4, NULL, NULL), -ERANGE);
	ck_assert_int_eq(feed_mix_labels_cpu(&a, i64, 99, 3, out), -EINVAL);
}
END_TEST

START_TEST(test_mix_args_init_errors)
{
	struct feed_mix_args a;
	struct feed_mix_draw ok = {FEED_MIX_OP_CUTMIX, 0.5, 0, 0, 4, 4};
	ck_assert_int_eq(feed_mix_args_init(&a, &ok, 4, 4, 3, 0.0), 0);
	struct feed_mix_draw d = ok;
	d.x2 = 5; /* wider than the image */
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 3, 0.0), -EINVAL);
	d = ok;
	d.y1 = 3, d.y2 = 2;
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 3, 0.0), -EINVAL);
	d = ok;
	d.lam = NAN;
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 3, 0.0), -EINVAL);
	d.lam = 1.5;
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 3, 0.0), -EINVAL);
	d = ok;
	d.op = 7;
	ck_assert_int_eq(feed_mix_args_init(&a, &d, 4, 4, 3, 0.0), -EINVAL);
	ck_assert_int_eq(feed_mix_args_init(&a, &ok, 4, 4, 3, -0.1), -EINVAL);
	ck_assert_int_eq(feed_mix_args_init(&a, &ok, 4, 4, 3, 1.5), -EINVAL);
	ck_assert_int_eq(feed_mix_args_init(&a, &ok, 4, 4, 3, 1.0), 0);
}
END_TEST

START_TEST(test_mix_draw_pure_and_keyed)
{
	struct feed_mix_draw a, b, c;
	ck_assert_int_eq(feed_mix_draw_batch(0.2, 1.0, 0.5, 7, 3, 11, 224, 224, &a), 0);
	ck_assert_int_eq(feed_mix_draw_batch(0.2, 1.0, 0.5, 7, 3, 11, 224, 224, &b), 0);
	ck_assert(a.op == b.op && a.lam == b.lam && a.x1 == b.x1 && a.y1 == b.y1 && a.x2 == b.x2 &&
		  a.y2 == b.y2);
	int same_epoch = 0, same_batch = 0, same_seed = 0;
	for (uint64_t k = 0; k < 50; k++) {
		feed_mix_draw_batch(0.8, 0.0, 0.5, 7, 3, k, 32, 32, &a);
		feed_mix_draw_batch(0.8, 0.0, 0.5, 7, 4, k, 32, 32, &b);
		feed_mix_draw_batch(0.8, 0.0, 0.5, 7, 3, k + 1, 32, 32, &c);
		same_epoch += a.lam == b.lam;
		same_batch += a.lam == c.lam;
		feed_mix_draw_batch(0.8, 0.0, 0.5, 8, 3, k, 32, 32, &b);
		same_seed += a.lam == b.lam;
	}
	ck_assert_int_eq(same_epoch + same_batch + same_seed, 0);
	ck_assert_int_eq(feed_mix_draw_batch(-1.0, 0, 0.5, 0, 0, 0, 4, 4, &a), -EINVAL);
	ck_assert_int_eq(feed_mix_draw_batch(INFINITY, 0, 0.5, 0, 0, 0, 4, 4, &a), -EINVAL);
	ck_assert_int_eq(feed_mix_draw_batch(1, 0, 1.5, 0, 0, 0, 4, 4, &a), -EINVAL);
	ck_assert_int_eq(feed_mix_draw_batch(1, 0, 0.5, 0, 0, 0, 0, 4, &a), -EINVAL);
	ck_assert_int_eq(feed_mix_draw_batch(0, 0, 0.5, 0, 0, 0, 4, 4, &a), 0);
	ck_assert(a.op == FEED_MIX_OP_NONE && a.lam == 1.0);
}
END_TEST

START_TEST(test_mix_draw_cutmix_lambda_is_box_area)
{
	const uint32_t sizes[][2] = {{224, 224}, {7, 5}, {1, 1}, {32, 300}};
	for (int s = 0; s < 4; s++)
		for (uint64_t k = 0; k < 500; k++) {
			uint32_t h = sizes[s][0], w = sizes[s][1];
			struct feed_mix_draw d;
			ck_assert_int_eq(feed_mix_draw_batch(0.0, 1.0, 0.5, 1, 0, k, h, w, &d), 0);
			ck_assert_uint_eq(d.op, FEED_MIX_OP_CUTMIX);
			ck_assert(d.x1 <= d.x2 && d.x2 <= w && d.y1 <= d.y2 && d.y2 <= h);
			double area = (double)(d.x2 - d.x1) * (d.y2 - d.y1);
			ck_assert(d.lam == 1.0 - area / ((double)w * h));
			/* the box is torchvision's: unclamped sides are whole half-sizes
			 * around a centre inside the image */
			ck_assert(d.x2 - d.x1 <= w && (d.x1 > 0 && d.x2 < w ? (d.x2 - d.x1) % 2 == 0 : 1));
			ck_assert(d.y1 > 0 && d.y2 < h ? (d.y2 - d.y1) % 2 == 0 : 1);
		}
}
END_TEST

START_TEST(test_mix_draw_switch_probability)
{
	const double ps[] = {0.0, 0.25, 0.5, 1.0};
	const int N = 4000;
	for (int i = 0; i < 4; i++) {
		int cut = 0;
		for (int k = 0; k < N; k++) {
			struct feed_mix_draw d;
			ck_assert_int_eq(feed_mix_draw_batch(0.8, 1.0, ps[i], 5, 1, (uint64_t)k, 16, 16, &d), 0);
			ck_assert(d.op == FEED_MIX_OP_MIXUP || d.op == FEED_MIX_OP_CUTMIX);
			cut += d.op == FEED_MIX_OP_CUTMIX;
		}
		double sd = sqrt(N * ps[i] * (1 - ps[i]));
		ck_assert_msg(fabs(cut - N * ps[i]) <= 5 * sd + 0.5, "p %g: %d of %d cutmix", ps[i],
			      cut, N);
	}
}
END_TEST

START_TEST(test_mix_draw_beta_moments)
{
	/* Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)); 20000 draws put the
	 * sample mean within 5 standard errors */
	const double alphas[] = {0.1, 0.2, 0.8, 1.0, 4.0};
	const int N = 20000;
	for (int i = 0; i < 5; i++) {
		double a = alphas[i], sum = 0, sq = 0, var = 1.0 / (4 * (2 * a + 1));
		for (int k = 0; k < N; k++) {
			struct feed_mix_draw d;
			feed_mix_draw_batch(a, 0.0, 0.5, 99, 2, (uint64_t)k, 8, 8, &d);
			ck_assert(d.lam >= 0.0 && d.lam <= 1.0);
			sum += d.lam;
			sq += (d.lam - 0.5) * (d.lam - 0.5);
		}
		double mean = sum / N, v = sq / N;
		ck_assert_msg(fabs(mean - 0.5) < 5 * sqrt(var / N), "alpha %g: mean %g", a, mean);
		ck_assert_msg(fabs(v - var) < 0.05 * var + 0.002, "alpha %g: variance %g, not %g", a,
			      v, var);
	}
}
END_TEST

static Suite *mix_suite(void)
{
	Suite *s = suite_create("mix");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_mix_mixup_matches_reference);
	tcase_add_test(tc, test_mix_cutmix_pastes_the_partners_box);
	tcase_add_test(tc, test_mix_none_and_empty_box_change_nothing);
	tcase_add_test(tc, test_mix_labels_sum_to_one);
	tcase_add_test(tc, test_mix_labels_every_type_and_range);
	tcase_add_test(tc, test_mix_args_init_errors);
	tcase_add_test(tc, test_mix_draw_pure_and_keyed);
	tcase_add_test(tc, test_mix_draw_cutmix_lambda_is_box_area);
	tcase_add_test(tc, test_mix_draw_switch_probability);
	tcase_add_test(tc, test_mix_draw_beta_moments);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(mix_suite)
