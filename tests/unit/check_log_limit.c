/*
 * check_log_limit.c: unit tests of daemon/log_limit.c, the rate limit on
 * log lines, with the clock passed in (no sleeping): the burst passes, the
 * rest is counted until a token is earned, the line that passes then
 * carries the count, partial intervals are kept, a zeroed limiter has the
 * default policy, and a clock that stands still or goes back grants nothing.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "log_limit.h"

/* Offers n lines at now; returns how many were allowed, and the sum of
 * the suppressed counts they carried into *carried. */
static unsigned offer(struct log_limit *l, uint64_t now, unsigned n, uint64_t *carried)
{
	unsigned ok = 0;

	for (unsigned i = 0; i < n; i++) {
		uint64_t s = 999999;
		if (log_limit_allow(l, now, &s)) {
			ok++;
			*carried += s;
		} else {
			ck_assert_uint_eq(s, 999999);  /* not written when refused */
		}
	}
	return ok;
}

START_TEST(test_log_limit_burst_then_one_per_interval)
{
	struct log_limit l;
	uint64_t carried = 0, s = 0;

	log_limit_init(&l, 3, 1000);
	ck_assert_uint_eq(offer(&l, 5000, 3, &carried), 3);
	ck_assert_uint_eq(carried, 0);
	ck_assert_uint_eq(offer(&l, 5000, 100, &carried), 0);
	ck_assert_uint_eq(offer(&l, 5999, 100, &carried), 0);
	/* one second on: one line, carrying the 200 refused */
	ck_assert(log_limit_allow(&l, 6000, &s));
	ck_assert_uint_eq(s, 200);
	ck_assert_uint_eq(offer(&l, 6000, 7, &carried), 0);
	ck_assert(log_limit_allow(&l, 7000, &s));
	ck_assert_uint_eq(s, 7);
	/* a long quiet spell refills the burst, no more */
	ck_assert_uint_eq(offer(&l, 60000, 10, &carried), 3);
	ck_assert_uint_eq(carried, 0);
}
END_TEST

START_TEST(test_log_limit_partial_interval_kept)
{
	struct log_limit l;
	uint64_t carried = 0;

	log_limit_init(&l, 2, 1000);
	ck_assert_uint_eq(offer(&l, 0, 2, &carried), 2);
	/* 1.5 s earns one token; the half second left counts toward the next */
	ck_assert_uint_eq(offer(&l, 1500, 5, &carried), 1);
	ck_assert_uint_eq(carried, 0);
	ck_assert_uint_eq(offer(&l, 1999, 5, &carried), 0);
	ck_assert_uint_eq(offer(&l, 2000, 5, &carried), 1);
	ck_assert_uint_eq(carried, 9);
}
END_TEST

START_TEST(test_log_limit_zeroed_is_default)
{
	struct log_limit l;
	uint64_t carried = 0, s = 0;

	memset(&l, 0, sizeof(l));
	ck_assert_uint_eq(offer(&l, 100, 1000, &carried), LOG_LIMIT_BURST);
	ck_assert(!log_limit_allow(&l, 100 + LOG_LIMIT_INTERVAL_MS - 1, &s));
	ck_assert(log_limit_allow(&l, 100 + LOG_LIMIT_INTERVAL_MS, &s));
	ck_assert_uint_eq(s, 1000 - LOG_LIMIT_BURST + 1);
}
END_TEST

START_TEST(test_log_limit_clock_back_grants_nothing)
{
	struct log_limit l;
	uint64_t carried = 0;

	log_limit_init(&l, 1, 1000);
	ck_assert_uint_eq(offer(&l, 10000, 2, &carried), 1);
	ck_assert_uint_eq(offer(&l, 3000, 2, &carried), 0);
	ck_assert_uint_eq(offer(&l, 10999, 2, &carried), 0);
	ck_assert_uint_eq(offer(&l, 11000, 2, &carried), 1);
	ck_assert_uint_eq(carried, 5);
}
END_TEST

START_TEST(test_log_limit_take_and_note)
{
	struct log_limit l;
	char buf[LOG_LIMIT_NOTE_MAX];
	uint64_t carried = 0;

	log_limit_init(&l, 1, 1000);
	ck_assert_uint_eq(offer(&l, 0, 4, &carried), 1);
	ck_assert_uint_eq(log_limit_take_suppressed(&l), 3);
	ck_assert_uint_eq(log_limit_take_suppressed(&l), 0);
	ck_assert_str_eq(log_limit_note(0, buf), "");
	ck_assert_str_eq(log_limit_note(1234, buf), "; 1234 more suppressed");
	ck_assert_str_eq(log_limit_note(UINT64_MAX, buf),
			 "; 18446744073709551615 more suppressed");
}
END_TEST

static Suite *log_limit_suite(void)
{
	Suite *s = suite_create("log_limit");
	TCase *tc = tcase_create("log_limit");

	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, test_log_limit_burst_then_one_per_interval);
	tcase_add_test(tc, test_log_limit_partial_interval_kept);
	tcase_add_test(tc, test_log_limit_zeroed_is_default);
	tcase_add_test(tc, test_log_limit_clock_back_grants_nothing);
	tcase_add_test(tc, test_log_limit_take_and_note);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(log_limit_suite)
