/*
 * check_mixture.c: unit tests of daemon/delivery/mixture.c alone, through
 * mixture.h: weights into integer units; the blend against Megatron's
 * greedy rule written out plainly (the next row goes to the source
 * furthest below its share); every prefix's shares within one row of the
 * weights; row lookups (O(1)) and counts (mixt_counts) that agree with
 * the rows walked one by one, from a base; each source's own epochs,
 * reshuffled, with Mosaic's choose and repeat; determinism; refusals.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "mixture.h"

static struct mixt_spec spec_of(const double *w, uint32_t n, uint64_t samples)
{
	struct mixt_spec s = {.nsrc = n, .seed = 5, .shuffle = true};

	for (uint32_t i = 0; i < n; i++) {
		s.src[i].n = samples;
		s.src[i].epoch_rows = samples;
		s.src[i].weight = w[i];
		snprintf(s.src[i].name, sizeof(s.src[i].name), "s%u", i);
		snprintf(s.src[i].version, sizeof(s.src[i].version), "%016x", 0xabc0 + i);
	}
	return s;
}

START_TEST(test_mixture_units_exact_for_simple_weights)
{
	uint32_t u[MIXT_MAX_SOURCES], p;

	ck_assert_int_eq(mixt_units((double[]){0.6, 0.3, 0.1}, 3, u, &p, NULL), 0);
	ck_assert_uint_eq(p, 10);
	ck_assert_uint_eq(u[0], 6);
	ck_assert_uint_eq(u[1], 3);
	ck_assert_uint_eq(u[2], 1);
	ck_assert_int_eq(mixt_units((double[]){3, 1}, 2, u, &p, NULL), 0);
	ck_assert_uint_eq(p, 4);
	ck_assert_int_eq(mixt_units((double[]){1, 1, 1}, 3, u, &p, NULL), 0);
	ck_assert_uint_eq(p, 3);
	ck_assert_int_eq(mixt_units((double[]){2, 0, 5}, 3, u, &p, NULL), 0);
	ck_assert_uint_eq(p, 7);
	ck_assert_uint_eq(u[1], 0);
	/* no small denominator: units of 1/65536 that still sum to it */
	ck_assert_int_eq(mixt_units((double[]){M_PI, M_E, 1.0}, 3, u, &p, NULL), 0);
	ck_assert_uint_eq(p, MIXT_PERIOD_MAX);
	ck_assert_uint_eq(u[0] + u[1] + u[2], MIXT_PERIOD_MAX);
	ck_assert(fabs(u[0] / 65536.0 - M_PI / (M_PI + M_E + 1.0)) < 1.0 / 65536);
	/* a tiny weight keeps one unit: a source asked for is never left out */
	ck_assert_int_eq(mixt_units((double[]){1.0, 1e-9 * M_PI}, 2, u, &p, NULL), 0);
	ck_assert_uint_eq(p, MIXT_PERIOD_MAX);
	ck_assert_uint_eq(u[1], 1);
	ck_assert_uint_eq(u[0], MIXT_PERIOD_MAX - 1);
	ck_assert_int_eq(mixt_units((double[]){1.0, 1e-12}, 2, u, &p, NULL), 0);
	ck_assert_uint_eq(u[1], 1);
}
END_TEST

START_TEST(test_mixture_bad_weights_refused)
{
	uint32_t u[MIXT_MAX_SOURCES], p;
	struct feed_err err = {0};

	ck_assert_int_eq(mixt_units((double[]){0.5, -1}, 2, u, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "source 1") && strstr(err.msg, "-1"), "%s", err.msg);
	ck_assert_int_eq(mixt_units((double[]){NAN, 1}, 2, u, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "source 0"), "%s", err.msg);
	ck_assert_int_eq(mixt_units((double[]){0, 0}, 2, u, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "above 0"), "%s", err.msg);
	double nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
	ck_assert_int_eq(mixt_units(nine, 9, u, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "9 sources"), "%s", err.msg);
}
END_TEST

/* Megatron's BlendedDataset rule in doubles (weights that are exact in
 * binary): row n goes to argmax w[s] * (n + 1) - c[s], first on ties. */
static uint32_t greedy_plain(const double *w, uint32_t n, uint64_t row, const uint64_t *c)
{
	uint32_t best = 0;
	double bd = -1e300;

	for (uint32_t s = 0; s < n; s++) {
		double d = w[s] * (double)(row + 1) - (double)c[s];
		if (d > bd) {
			bd = d;
			best = s;
		}
	}
	return best;
}

START_TEST(test_mixture_next_row_to_the_source_furthest_below_its_share)
{
	static const double ws[][4] = {{0.5, 0.25, 0.25, 0}, {0.125, 0.625, 0.25, 0},
				       {0.75, 0.25, 0, 0}, {0.25, 0.25, 0.25, 0.25}};
	static const uint32_t ns[] = {3, 3, 2, 4};

	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		struct mixt_spec sp = spec_of(ws[t], ns[t], 10);
		struct mixture *m;
		uint64_t c[MIXT_MAX_SOURCES] = {0};
		ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
		for (uint64_t g = 0; g < 1000; g++) {
			uint64_t k;
			uint32_t want = greedy_plain(ws[t], ns[t], g, c);
			ck_assert_msg(mixt_row(m, g, &k) == want, "weights %zu row %llu", t,
				      (unsigned long long)g);
			ck_assert_uint_eq(k, c[want]);
			c[want]++;
		}
		mixt_free(m);
	}
}
END_TEST

START_TEST(test_mixture_shares_exact_up_to_rounding)
{
	static const double ws[][3] = {{0.6, 0.3, 0.1}, {M_PI, M_E, 1.0}, {1, 2, 3}, {0.999, 0.001, 0}};

	for (size_t t = 0; t < sizeof(ws) / sizeof(ws[0]); t++) {
		struct mixt_spec sp = spec_of(ws[t], 3, 7);
		struct mixture *m;
		uint64_t c[3] = {0};
		ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
		uint64_t rows = 3 * (uint64_t)m->period + 17;
		for (uint64_t g = 0; g < rows; g++) {
			uint64_t k;
			c[mixt_row(m, g, &k)]++;
			for (uint32_t s = 0; s < 3; s++) {
				double want = (double)m->units[s] / m->period * (double)(g + 1);
				ck_assert_msg(fabs((double)c[s] - want) < 1.0, "weights %zu source %u after "
					      "%llu rows: %llu, share %.3f", t, s,
					      (unsigned long long)(g + 1), (unsigned long long)c[s], want);
			}
			/* each whole period holds exactly each source's units */
			if ((g + 1) % m->period == 0)
				for (uint32_t s = 0; s < 3; s++)
					ck_assert_uint_eq(c[s], (g + 1) / m->period * m->units[s]);
		}
		mixt_free(m);
	}
}
END_TEST

START_TEST(test_mixture_counts_and_rows_agree_from_a_base)
{
	struct mixt_spec sp = spec_of((double[]){0.6, 0.3, 0.1}, 3, 11);
	struct mixture *m;
	uint64_t c[3] = {100, 7, 0}, got[3];

	sp.src[0].base = 100;
	sp.src[1].base = 7;
	sp.base_row = 1000;
	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	for (uint64_t g = 1000; g < 1100; g++) {
		mixt_counts(m, g, got);
		for (uint32_t s = 0; s < 3; s++)
			ck_assert_uint_eq(got[s], c[s]);
		uint64_t k;
		uint32_t s = mixt_row(m, g, &k);
		ck_assert_uint_eq(k, c[s]);  /* its k-th row, counting its base */
		c[s]++;
	}
	/* far away, in O(1): whole periods of units after the base */
	mixt_counts(m, 1000 + 10 * 1000003ull, got);
	ck_assert_uint_eq(got[0], 100 + 6 * 1000003ull);
	ck_assert_uint_eq(got[2], 1000003ull);
	mixt_free(m);
}
END_TEST

START_TEST(test_mixture_blend_is_deterministic)
{
	struct mixt_spec sp = spec_of((double[]){M_PI, 1, M_E}, 3, 50);
	struct mixture *a, *b;
	struct mixt_cursor ca = {0}, cb = {0};

	ck_assert_int_eq(mixt_new(&sp, &a, NULL), 0);
	ck_assert_int_eq(mixt_new(&sp, &b, NULL), 0);
	for (uint64_t g = 0; g < 5000; g += 7) {
		uint64_t ka, kb, xa, xb;
		uint32_t sa = mixt_row(a, g, &ka), sb = mixt_row(b, g, &kb);
		ck_assert_uint_eq(sa, sb);
		ck_assert_uint_eq(ka, kb);
		ck_assert_int_eq(mixt_sample(a, &ca, sa, ka, &xa, NULL), 0);
		ck_assert_int_eq(mixt_sample(b, &cb, sb, kb, &xb, NULL), 0);
		ck_assert_uint_eq(xa, xb);
	}
	mixt_cursor_fini(&ca);
	mixt_cursor_fini(&cb);
	mixt_free(a);
	mixt_free(b);
}
END_TEST

/* Samples of source 0's rows [k0, k0 + n) into out. */
static void source_rows(const struct mixture *m, uint64_t k0, uint64_t n, uint64_t *out)
{
	struct mixt_cursor c = {0};

	for (uint64_t k = 0; k < n; k++)
		ck_assert_int_eq(mixt_sample(m, &c, 0, k0 + k, &out[k], NULL), 0);
	mixt_cursor_fini(&c);
}

/* Each of samples [0, n) appears `times` times in v[0..len). */
static void assert_each(const uint64_t *v, uint64_t len, uint64_t n, uint32_t times)
{
	uint32_t seen[64] = {0};

	for (uint64_t i = 0; i < len; i++) {
		ck_assert_uint_lt(v[i], n);
		seen[v[i]]++;
	}
	for (uint64_t i = 0; i < n; i++)
		ck_assert_uint_eq(seen[i], times);
}

START_TEST(test_mixture_each_source_keeps_its_own_epochs)
{
	struct mixt_spec sp = spec_of((double[]){1, 1}, 2, 40);
	struct mixture *m;
	uint64_t e0[40], e1[40];

	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	source_rows(m, 0, 40, e0);
	source_rows(m, 40, 40, e1);
	assert_each(e0, 40, 40, 1);
	assert_each(e1, 40, 40, 1);
	ck_assert_msg(memcmp(e0, e1, sizeof(e0)), "the next epoch is reshuffled");
	mixt_free(m);

	sp.src[0].epoch_rows = 80;  /* repeat=2: every sample twice an epoch */
	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	uint64_t r[80];
	source_rows(m, 0, 80, r);
	assert_each(r, 80, 40, 2);
	mixt_free(m);

	sp.src[0].epoch_rows = 10;  /* choose=10: ten distinct samples an epoch */
	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	uint64_t ch[20];
	source_rows(m, 0, 20, ch);
	for (int i = 0; i < 10; i++)
		for (int j = i + 1; j < 10; j++) {
			ck_assert_uint_ne(ch[i], ch[j]);
			ck_assert_uint_ne(ch[10 + i], ch[10 + j]);
		}
	ck_assert_msg(memcmp(ch, ch + 10, 10 * sizeof(ch[0])), "each epoch chooses anew");
	mixt_free(m);

	sp.shuffle = false;  /* sequential passes */
	sp.src[0].epoch_rows = 40;
	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	source_rows(m, 43, 3, r);
	ck_assert_uint_eq(r[0], 3);
	ck_assert_uint_eq(r[2], 5);
	mixt_free(m);
}
END_TEST

/* A packed mixture's walk (mixt_walk_to): at each batch's first row g,
 * every source stands at its rows before g (the blend's count) and where a
 * fresh pack stream seeks that row; forward batch after batch, backward,
 * from a base (a resume under other weights), for concat and pack. */
static void check_walk(enum pk_mode mode)
{
	static uint32_t lens[3][50];
	uint64_t total[3] = {0};
	struct mixt_spec sp = spec_of((double[]){0.5, 0.3, 0.2}, 3, 1);
	struct pk_spec pk = {.mode = mode, .seq_len = 8, .window = 7};
	struct mixture *m;
	struct mixt_walk w = {0};
	struct pks_pos at[MIXT_MAX_SOURCES];

	for (uint32_t s = 0; s < 3; s++) {
		uint64_t n = 10 + 20 * s;
		for (uint64_t i = 0; i < n; i++)
			total[s] += lens[s][i] = (uint32_t)((i * 37 + s * 11) % 23);
		ck_assert_int_eq(pk_source_init(&sp.src[s].rows, &pk, lens[s], n, total[s],
						sp.src[s].version, 5, ORD_FULL, NULL), 0);
		sp.src[s].n = sp.src[s].epoch_rows = (total[s] - 1) / 8;
	}
	sp.base_row = 10;
	sp.src[0].base = 4;
	sp.src[2].base = 9;
	ck_assert_int_eq(mixt_new(&sp, &m, NULL), 0);
	ck_assert(mixt_packed(m));
	uint64_t gs[] = {10, 14, 18, 22, 90, 94, 12, 300, 10};
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
		uint64_t c[MIXT_MAX_SOURCES];
		mixt_counts(m, gs[i], c);
		ck_assert_int_eq(mixt_walk_to(&w, m, gs[i], at, NULL), 0);
		for (uint32_t s = 0; s < 3; s++) {
			struct pks_spec ps;
			struct pks_stream st = {0};
			struct pks_pos q = {0};
			mixt_pks_spec(m, s, &ps);
			pks_stream_use(&st, &ps);
			ck_assert_int_eq(pks_seek(&st, &q, c[s], NULL), 0);
			ck_assert_uint_eq(at[s].k, c[s]);
			ck_assert_uint_eq(at[s].pass, q.pass);
			ck_assert_uint_eq(at[s].c.row, q.c.row);
			ck_assert_uint_eq(at[s].c.pos, q.c.pos);
			ck_assert_uint_eq(at[s].c.off, q.c.off);
			pks_stream_fini(&st);
		}
	}
	ck_assert_uint_eq(at[0].k, 4);   /* back at the base */
	ck_assert_uint_eq(at[1].k, 0);
	ck_assert_uint_eq(at[2].k, 9);
	mixt_walk_fini(&w);
	mixt_free(m);
}

START_TEST(test_mixture_walk_concat_sources_stand_at_their_rows)
{
	check_walk(PK_MODE_CONCAT);
}
END_TEST

START_TEST(test_mixture_walk_pack_sources_stand_at_their_rows)
{
	check_walk(PK_MODE_PACK);
}
END_TEST

static Suite *mixture_suite(void)
{
	Suite *s = suite_create("mixture");
	TCase *tc = tcase_create("mixture");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_mixture_units_exact_for_simple_weights);
	tcase_add_test(tc, test_mixture_bad_weights_refused);
	tcase_add_test(tc, test_mixture_next_row_to_the_source_furthest_below_its_share);
	tcase_add_test(tc, test_mixture_shares_exact_up_to_rounding);
	tcase_add_test(tc, test_mixture_counts_and_rows_agree_from_a_base);
	tcase_add_test(tc, test_mixture_blend_is_deterministic);
	tcase_add_test(tc, test_mixture_each_source_keeps_its_own_epochs);
	tcase_add_test(tc, test_mixture_walk_concat_sources_stand_at_their_rows);
	tcase_add_test(tc, test_mixture_walk_pack_sources_stand_at_their_rows);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(mixture_suite)
