/*
 * check_client_api.c: promises of libfeedclient's public headers that
 * concern the API itself rather than delivery (check_delivery.c) or
 * resuming (check_resume.c), each against a real feedd serving the
 * harness's dataset as "tiny" (H_SAMPLES records: image u8[4,4] filled
 * with i, label i64 i).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

static void api_start(void)
{
	static char tiny[200];

	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, NULL});
}

/* A token that does not fit leaves buf and *ret_len as they were; one
 * that fits exactly is written whole. */
START_TEST(test_client_resume_token_enospc_writes_nothing)
{
	uint8_t tok[FEED_RESUME_MAX], again[FEED_RESUME_MAX];
	size_t len, small;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 3, 2);
	h_tiny_read(st, 2);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	ck_assert_uint_gt(len, 1);
	ck_assert_uint_le(len, FEED_RESUME_MAX);

	memset(again, 0xa5, sizeof(again));
	small = 12345;
	ck_assert_int_eq(feed_stream_resume_token(st, again, len - 1, &small), -ENOSPC);
	ck_assert_uint_eq(small, 12345);
	for (size_t i = 0; i < sizeof(again); i++)
		ck_assert_uint_eq(again[i], 0xa5);
	ck_assert_int_eq(feed_stream_resume_token(st, again, 0, &small), -ENOSPC);
	ck_assert_uint_eq(small, 12345);

	ck_assert_int_eq(feed_stream_resume_token(st, again, len, &small), 0);
	ck_assert_uint_eq(small, len);
	ck_assert_mem_eq(again, tok, len);
	ck_assert_int_eq(feed_stream_resume_token(NULL, again, len, &small), -EINVAL);
	ck_assert_uint_eq(small, len);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client_api");
	TCase *tc = tcase_create("client_api");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_client_resume_token_enospc_writes_nothing);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
