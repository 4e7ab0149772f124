/*
 * check_quota.c: unit tests of daemon/policy/quota.c: connections,
 * streams, credits and slot bytes counted per user against the limits,
 * refusals that name the user and the limit and change nothing, and every
 * count given back.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "config.h"
#include "quota.h"

START_TEST(test_quota_connections)
{
	struct quota q = {0};
	struct feed_err err = {0};

	ck_assert_int_eq(quota_conn_take(&q, 7, 2, &err), 0);
	ck_assert_int_eq(quota_conn_take(&q, 7, 2, &err), 0);
	ck_assert_int_eq(quota_conn_take(&q, 7, 2, &err), -EUSERS);
	ck_assert_str_eq(err.msg, "user 7 already has 2 connections (limits.max_connections = 2)");
	ck_assert_uint_eq(quota_of(&q, 7).conns, 2);
	for (uid_t uid = 100; uid < 120; uid++)  /* grows past its first size */
		ck_assert_int_eq(quota_conn_take(&q, uid, 2, &err), 0);
	ck_assert_uint_eq(quota_of(&q, 119).conns, 1);
	quota_conn_give(&q, 7);
	ck_assert_uint_eq(quota_of(&q, 7).conns, 1);
	ck_assert_int_eq(quota_conn_take(&q, 7, 2, &err), 0);
	quota_conn_give(&q, 7);
	quota_conn_give(&q, 7);
	ck_assert_uint_eq(quota_of(&q, 7).conns, 0);
	ck_assert_uint_eq(quota_of(&q, 110).conns, 1);
	ck_assert_int_eq(quota_conn_take(&q, 8, 0, &err), -EUSERS);
	ck_assert_uint_eq(q.len, 20);  /* users holding nothing take no entry */
	quota_free(&q);
}
END_TEST

START_TEST(test_quota_streams)
{
	struct quota q = {0};
	struct feed_err err = {0};
	struct cfg_limits lim = {.max_connections = 4, .max_streams = 2, .max_credits = 8,
				 .max_slot_bytes = 1000};

	ck_assert_int_eq(quota_stream_take(&q, 5, 9, 10, &lim, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "credits 9 exceed the limit max_credits 8");
	ck_assert_int_eq(quota_stream_take(&q, 5, 8, 1001, &lim, &err), -ENOSPC);
	ck_assert_str_eq(err.msg, "user 5: 0 bytes of slots held, 1001 more would exceed "
				  "max_slot_bytes 1000");
	ck_assert_uint_eq(q.len, 0);  /* refusals change nothing */
	ck_assert_int_eq(quota_stream_take(&q, 5, 8, 600, &lim, &err), 0);
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, 401, &lim, &err), -ENOSPC);
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, 400, &lim, &err), 0);
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, 0, &lim, &err), -EUSERS);
	ck_assert_str_eq(err.msg, "user 5: 2 streams open, limit max_streams is 2");
	ck_assert_int_eq(quota_stream_take(&q, 6, 1, 1000, &lim, &err), 0); /* per user */
	struct quota_use u = quota_of(&q, 5);
	ck_assert_uint_eq(u.streams, 2);
	ck_assert_uint_eq(u.bytes, 1000);
	quota_stream_give(&q, 5, 600);
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, 600, &lim, &err), 0);
	quota_stream_give(&q, 5, 600);
	quota_stream_give(&q, 5, 400);
	quota_stream_give(&q, 6, 1000);
	ck_assert_uint_eq(q.len, 0);
	/* a byte count that would overflow the sum is refused, not wrapped */
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, 1000, &lim, &err), 0);
	ck_assert_int_eq(quota_stream_take(&q, 5, 1, UINT64_MAX, &lim, &err), -ENOSPC);
	quota_free(&q);
}
END_TEST

/* A group's data region counts for its creator beside its members'
 * streams, within max_slot_bytes, until the group ends. */
START_TEST(test_quota_groups)
{
	struct quota q = {0};
	struct feed_err err = {0};
	struct cfg_limits lim = {.max_connections = 4, .max_streams = 2, .max_credits = 8,
				 .max_slot_bytes = 1000};

	ck_assert_int_eq(quota_stream_take(&q, 5, 4, 100, &lim, &err), 0);  /* a member */
	ck_assert_int_eq(quota_group_take(&q, 5, 901, &lim, &err), -ENOSPC);
	ck_assert_str_eq(err.msg, "user 5: 100 bytes of slots held, a group's 901 more would "
				  "exceed max_slot_bytes 1000");
	ck_assert_int_eq(quota_group_take(&q, 5, 900, &lim, &err), 0);
	struct quota_use u = quota_of(&q, 5);
	ck_assert_uint_eq(u.groups, 1);
	ck_assert_uint_eq(u.streams, 1);
	ck_assert_uint_eq(u.bytes, 1000);
	ck_assert_int_eq(quota_stream_take(&q, 5, 4, 1, &lim, &err), -ENOSPC);
	quota_stream_give(&q, 5, 100);  /* the member leaves; the group's region stays */
	ck_assert_uint_eq(quota_of(&q, 5).bytes, 900);
	quota_group_give(&q, 5, 900);
	ck_assert_uint_eq(q.len, 0);
	quota_free(&q);
}
END_TEST

/* Device slots have their own limit, and the entry stays while any is held. */
START_TEST(test_quota_device)
{
	struct quota q = {0};
	struct feed_err err = {0};
	struct cfg_limits lim = {.max_connections = 4, .max_streams = 2, .max_credits = 8,
				 .max_slot_bytes = 1000, .max_device_bytes = 5000};

	ck_assert_int_eq(quota_device_take(&q, 7, 3000, &lim, &err), 0);
	ck_assert_int_eq(quota_device_take(&q, 7, 2001, &lim, &err), -ENOSPC);
	ck_assert_str_eq(err.msg, "user 7: 3000 bytes of device slots held, 2001 more would "
				  "exceed max_device_bytes 5000");
	ck_assert_int_eq(quota_device_take(&q, 8, 5000, &lim, &err), 0); /* per user */
	ck_assert_int_eq(quota_device_take(&q, 7, 2000, &lim, &err), 0);
	ck_assert_uint_eq(quota_of(&q, 7).device_bytes, 5000);
	ck_assert_uint_eq(quota_of(&q, 7).bytes, 0); /* not shared memory */
	quota_device_give(&q, 7, 3000);
	ck_assert_uint_eq(quota_of(&q, 7).device_bytes, 2000);
	quota_device_give(&q, 7, 2000);
	quota_device_give(&q, 8, 5000);
	ck_assert_uint_eq(q.len, 0);
	quota_free(&q);
}
END_TEST

static Suite *quota_suite(void)
{
	Suite *s = suite_create("quota");
	TCase *tc = tcase_create("quota");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_quota_connections);
	tcase_add_test(tc, test_quota_streams);
	tcase_add_test(tc, test_quota_groups);
	tcase_add_test(tc, test_quota_device);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(quota_suite)
