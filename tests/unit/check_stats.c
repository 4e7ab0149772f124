/*
 * check_stats.c: the registry's arithmetic, with entries whose read()
 * returns what a test sets: a closed entry's counts stay under its labels
 * (user, dataset, job, group) and add to a live one's of the same labels;
 * a counter read never falls (a group's reader wait is its members'
 * largest, which drops when that member leaves) and the client's reader
 * wait is clamped to the entry's age; the 10 s rates of an entry younger
 * than that run from its opening (the window itself: the Python test
 * test_status_10s_rates_fall_to_zero_when_idle); refusals count by reason;
 * past STATS_SERIES_MAX closed label sets the rest count as "_other";
 * after a scrape (stats_scraped) closed series leave unless an open stream
 * has their labels, while the per-dataset totals keep every count; a
 * reload's outcome is kept for feedd_config_last_reload_*.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "catalog.h"
#include "check_util.h"
#include "stats.h"

static struct cfg_dataset cfg_m = {.name = "m"};
static struct cat_entry cat_m = {.cfg = &cfg_m};

/* An entry whose read() reports what the test put in x. */
struct fake {
	struct stats_entry en;
	struct stats_sample x;
};

static void fake_read(struct stats_entry *en, struct stats_sample *ret)
{
	*ret = ((struct fake *)en)->x;
}

static void fake_init(struct fake *f, uid_t uid, const char *job, const char *group)
{
	memset(f, 0, sizeof(*f));
	f->en = (struct stats_entry){.kind = "stream", .uid = uid, .e = &cat_m, .job = job,
				     .group = group, .opened_ms = 0, .read = fake_read};
}

/* Collects every series. */
struct all {
	struct stats_series s[8];
	int n;
};

static int collect(const struct stats_series *s, void *arg)
{
	struct all *a = arg;
	ck_assert_int_lt(a->n, 8);
	a->s[a->n++] = *s;
	return 0;
}

static const struct stats_series *find(const struct all *a, uid_t uid, const char *job)
{
	for (int i = 0; i < a->n; i++)
		if (a->s[i].uid == uid && !strcmp(a->s[i].job, job))
			return &a->s[i];
	return NULL;
}

START_TEST(test_stats_closed_counts_keep_their_labels)
{
	struct stats_reg r = {0};
	struct fake a, b, c;
	struct all all = {0};

	fake_init(&a, 1000, "j1", "");
	fake_init(&b, 1000, "j1", "");
	fake_init(&c, 1001, "j2", "g");
	stats_add(&r, &a.en);
	stats_add(&r, &b.en);
	stats_add(&r, &c.en);
	a.x = (struct stats_sample){.samples = 100, .batches = 10, .bytes = 800, .credits = 4,
				    .credits_in_use = 3};
	b.x = (struct stats_sample){.samples = 50, .batches = 5, .bytes = 400, .credits = 2};
	c.x = (struct stats_sample){.samples = 7};
	stats_remove(&r, &a.en);  /* its counts move, under the same labels */
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_int_eq(all.n, 2);
	const struct stats_series *j1 = find(&all, 1000, "j1");
	ck_assert_ptr_nonnull(j1);
	ck_assert_uint_eq(j1->samples, 150);
	ck_assert_uint_eq(j1->batches, 15);
	ck_assert_uint_eq(j1->bytes, 1200);
	ck_assert_uint_eq(j1->credits, 2);       /* gauges: the live stream's alone */
	ck_assert_uint_eq(j1->credits_in_use, 0);
	ck_assert_str_eq(j1->dataset, "m");
	ck_assert_str_eq(find(&all, 1001, "j2")->group, "g");
	stats_remove(&r, &b.en);
	stats_remove(&r, &c.en);
	all.n = 0;
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_uint_eq(find(&all, 1000, "j1")->samples, 150);
	ck_assert_uint_eq(find(&all, 1001, "j2")->samples, 7);
	stats_free(&r);
}
END_TEST

START_TEST(test_stats_counters_never_fall)
{
	struct stats_reg r = {0};
	struct fake g;
	struct stats_sample x;

	fake_init(&g, 1000, "", "grp");
	stats_add(&r, &g.en);
	g.x.reader_wait_ns = 3000000000ull;   /* its slowest member's */
	g.x.samples = 10;
	stats_read(&g.en, 5000, &x);
	ck_assert_uint_eq(x.reader_wait_ns, 3000000000ull);
	g.x.reader_wait_ns = 1000000000ull;   /* that member left */
	stats_read(&g.en, 6000, &x);
	ck_assert_uint_eq(x.reader_wait_ns, 3000000000ull);
	ck_assert_uint_eq(x.samples, 10);
	/* the client's word is clamped to the entry's age */
	g.x.reader_wait_ns = 9000000000ull;
	stats_read(&g.en, 7000, &x);
	ck_assert_uint_eq(x.reader_wait_ns, 7000000000ull);
	stats_remove(&r, &g.en);
	stats_free(&r);
}
END_TEST

START_TEST(test_stats_rates_cover_the_last_10s)
{
	struct stats_reg r = {0};
	struct fake f;
	struct stats_sample x;
	struct stats_rates rt;

	fake_init(&f, 1000, "", "");
	stats_add(&r, &f.en);  /* a sample of zeros at 0 ms */
	f.x.samples = 1000;
	f.x.bytes = 2000000;
	f.x.reader_wait_ns = 500000000ull;
	stats_read(&f.en, 2000, &x);
	stats_rates(&f.en, &x, 2000, &rt);  /* younger than 10 s: since it opened */
	ck_assert_double_eq_tol(rt.samples_per_s, 500.0, 1e-9);
	ck_assert_double_eq_tol(rt.mb_per_s, 1.0, 1e-9);
	ck_assert_double_eq_tol(rt.reader_wait_share, 0.25, 1e-9);
	stats_free(&r);
}
END_TEST

/* Past STATS_SERIES_MAX label sets of closed streams, the rest count
 * under "_other": memory and the number of series stay bounded, and no
 * count is lost. */
START_TEST(test_stats_closed_series_bounded)
{
	static char jobs[STATS_SERIES_MAX + 10][16];
	struct stats_reg r = {0};
	struct fake f;

	for (int i = 0; i < STATS_SERIES_MAX + 10; i++) {
		snprintf(jobs[i], sizeof(jobs[i]), "j%d", i);
		fake_init(&f, 1000, jobs[i], "");
		stats_add(&r, &f.en);
		f.x.samples = 1;
		stats_remove(&r, &f.en);
	}
	ck_assert_uint_eq(r.nclosed, STATS_SERIES_MAX);
	ck_assert_str_eq(r.closed[STATS_SERIES_MAX - 2].job, "j4094");
	const struct stats_series *o = &r.closed[STATS_SERIES_MAX - 1];
	ck_assert_uint_eq(o->uid, (uid_t)-1);
	ck_assert_str_eq(o->job, "_other");
	ck_assert_uint_eq(o->samples, 11);   /* j4095 .. j4105 */
	/* a label set already kept still counts under its own labels */
	fake_init(&f, 1000, jobs[7], "");
	stats_add(&r, &f.en);
	f.x.samples = 5;
	stats_remove(&r, &f.en);
	ck_assert_uint_eq(r.closed[7].samples, 6);
	stats_free(&r);
}
END_TEST

/* Each dataset total, by name. */
struct totals {
	struct stats_dataset_total t[8];
	int n;
};

static int collect_total(const struct stats_dataset_total *t, void *arg)
{
	struct totals *a = arg;
	ck_assert_int_lt(a->n, 8);
	a->t[a->n++] = *t;
	return 0;
}

/* A closed stream's series is shown once more, then leaves; one whose
 * labels an open stream still has stays (its counter must not fall); the
 * per-dataset totals keep what every stream counted. */
START_TEST(test_stats_closed_series_leave_after_scrape)
{
	struct stats_reg r = {0};
	struct fake a, b, c;
	struct all all = {0};
	struct totals tot = {0};

	fake_init(&a, 1000, "j1", "");
	fake_init(&b, 1000, "j1", "");
	fake_init(&c, 1001, "j2", "");
	stats_add(&r, &a.en);
	stats_add(&r, &b.en);
	stats_add(&r, &c.en);
	a.x.samples = 100;
	b.x.samples = 50;
	c.x.samples = 7;
	stats_remove(&r, &a.en);
	stats_remove(&r, &c.en);
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_int_eq(all.n, 2);       /* the scrape that shows them closed */
	ck_assert_uint_eq(find(&all, 1001, "j2")->samples, 7);
	stats_scraped(&r);
	all.n = 0;
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_int_eq(all.n, 1);       /* j2 left; j1 goes on with b */
	ck_assert_ptr_null(find(&all, 1001, "j2"));
	ck_assert_uint_eq(find(&all, 1000, "j1")->samples, 150);
	ck_assert_uint_eq(find(&all, 1000, "j1")->live, 1);
	ck_assert_int_eq(stats_each_dataset(&r, 0, collect_total, &tot), 0);
	ck_assert_int_eq(tot.n, 1);
	ck_assert_str_eq(tot.t[0].dataset, "m");
	ck_assert_uint_eq(tot.t[0].samples, 157);  /* closed and open together */
	ck_assert_uint_eq(tot.t[0].closed, 2);
	stats_remove(&r, &b.en);
	all.n = 0;                        /* the scrape after its last stream closed */
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_int_eq(all.n, 1);
	ck_assert_uint_eq(all.s[0].samples, 150);
	ck_assert_uint_eq(all.s[0].live, 0);
	stats_scraped(&r);
	all.n = 0;
	ck_assert_int_eq(stats_each_series(&r, 0, collect, &all), 0);
	ck_assert_int_eq(all.n, 0);
	ck_assert_uint_eq(r.nclosed, 0);
	tot.n = 0;
	ck_assert_int_eq(stats_each_dataset(&r, 0, collect_total, &tot), 0);
	ck_assert_uint_eq(tot.t[0].samples, 157);
	ck_assert_uint_eq(tot.t[0].closed, 3);
	stats_free(&r);
}
END_TEST

/* Past STATS_DATASETS_MAX dataset names, closed streams' totals go to
 * "_other": bounded however many datasets reloads add. */
START_TEST(test_stats_dataset_totals_bounded)
{
	static struct cfg_dataset cfgs[STATS_DATASETS_MAX + 5];
	static struct cat_entry ents[STATS_DATASETS_MAX + 5];
	struct stats_reg r = {0};
	struct fake f;

	for (int i = 0; i < STATS_DATASETS_MAX + 5; i++) {
		snprintf(cfgs[i].name, sizeof(cfgs[i].name), "d%d", i);
		ents[i].cfg = &cfgs[i];
		fake_init(&f, 1000, "", "");
		f.en.e = &ents[i];
		stats_add(&r, &f.en);
		f.x.samples = 2;
		stats_remove(&r, &f.en);
		stats_scraped(&r);
	}
	ck_assert_uint_eq(r.ntotals, STATS_DATASETS_MAX);
	ck_assert_uint_eq(r.nclosed, 0);
	ck_assert_str_eq(r.totals[STATS_DATASETS_MAX - 1].dataset, "_other");
	ck_assert_uint_eq(r.totals[STATS_DATASETS_MAX - 1].samples, 12);  /* 6 names */
	stats_free(&r);
}
END_TEST

START_TEST(test_stats_reload_outcome_kept)
{
	struct stats_reg r = {0};

	stats_reloaded(&r, true);
	ck_assert(r.reload_ok);
	ck_assert(r.reload_ok_s > 1.6e9);
	double ok_s = r.reload_ok_s;
	stats_reloaded(&r, false);
	ck_assert(!r.reload_ok);
	ck_assert(r.reload_ok_s == ok_s);  /* the last success's time stays */
	ck_assert_uint_eq(r.reloads, 2);
	ck_assert_uint_eq(r.reloads_failed, 1);
}
END_TEST

START_TEST(test_stats_refusals_by_reason)
{
	struct stats_reg r = {0};

	stats_refused(&r, -EACCES, false);
	stats_refused(&r, -ENOENT, false);
	stats_refused(&r, -EUSERS, false);
	stats_refused(&r, -EINVAL, true);
	stats_refused(&r, -ENOMEM, false);
	ck_assert_uint_eq(r.refusals[STATS_REFUSED_ACCESS], 1);
	ck_assert_uint_eq(r.refusals[STATS_REFUSED_NOT_FOUND], 1);
	ck_assert_uint_eq(r.refusals[STATS_REFUSED_LIMIT], 1);
	ck_assert_uint_eq(r.refusals[STATS_REFUSED_MALFORMED], 1);
	ck_assert_uint_eq(r.refusals[STATS_REFUSED_OTHER], 1);
	ck_assert_str_eq(stats_refusal_names[STATS_REFUSED_NOT_FOUND], "not_found");
}
END_TEST

static Suite *stats_suite(void)
{
	Suite *s = suite_create("stats");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_stats_closed_counts_keep_their_labels);
	tcase_add_test(tc, test_stats_counters_never_fall);
	tcase_add_test(tc, test_stats_rates_cover_the_last_10s);
	tcase_add_test(tc, test_stats_refusals_by_reason);
	tcase_add_test(tc, test_stats_closed_series_bounded);
	tcase_add_test(tc, test_stats_closed_series_leave_after_scrape);
	tcase_add_test(tc, test_stats_dataset_totals_bounded);
	tcase_add_test(tc, test_stats_reload_outcome_kept);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(stats_suite)
