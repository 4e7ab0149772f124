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
#include <unistd.h>

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

/* The public FEED_DTYPE_* constants are the values fields and views
 * carry: the tiny dataset's image is u8, its label i64. */
START_TEST(test_client_dtype_constants_match_fields)
{
	struct feed_dataset_list *list;
	struct feed_batch *b;
	struct feed_view v;

	api_start();
	struct feed_conn *c = h_conn_new();
	ck_assert_int_eq(feed_dataset_info(c, "tiny", &list), 0);
	ck_assert_int_eq(list->datasets[0].fields[0].dtype, FEED_DTYPE_UINT8);
	ck_assert_int_eq(list->datasets[0].fields[1].dtype, FEED_DTYPE_INT64);
	feed_dataset_list_free(list);

	struct feed_stream *st = h_tiny_open(c, 2, 2);
	const struct feed_stream_info *in = feed_stream_info(st);
	ck_assert_int_eq(in->fields[0].dtype, FEED_DTYPE_UINT8);
	ck_assert_str_eq(in->fields[0].dtype_name, "u8");
	ck_assert_int_eq(in->fields[1].dtype, FEED_DTYPE_INT64);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
	ck_assert_int_eq(v.dtype, FEED_DTYPE_UINT8);
	ck_assert_int_eq(feed_batch_field(b, 1, &v), 0);
	ck_assert_int_eq(v.dtype, FEED_DTYPE_INT64);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);

	/* distinct, and the ones a reader of feed.proto expects */
	const int all[] = {FEED_DTYPE_UINT8,   FEED_DTYPE_INT8,    FEED_DTYPE_UINT16,
			   FEED_DTYPE_INT16,   FEED_DTYPE_UINT32,  FEED_DTYPE_INT32,
			   FEED_DTYPE_UINT64,  FEED_DTYPE_INT64,   FEED_DTYPE_FLOAT16,
			   FEED_DTYPE_BFLOAT16, FEED_DTYPE_FLOAT32, FEED_DTYPE_FLOAT64,
			   FEED_DTYPE_BOOLEAN, FEED_DTYPE_STRING};
	for (int i = 0; i < (int)(sizeof(all) / sizeof(all[0])); i++)
		ck_assert_int_eq(all[i], i + 1);
}
END_TEST

/* Fields are found by name, as feed_stream_info() lists them. */
START_TEST(test_client_batch_field_index_by_name)
{
	struct feed_batch *b;
	struct feed_view v;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_batch_field_index(b, "image"), 0);
	ck_assert_int_eq(feed_batch_field_index(b, "label"), 1);
	ck_assert_int_eq(feed_batch_field_index(b, "Label"), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, "label "), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, ""), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, NULL), -EINVAL);
	ck_assert_int_eq(feed_batch_field_index(NULL, "image"), -EINVAL);
	int i = feed_batch_field_index(b, "label");
	ck_assert_int_eq(feed_batch_field(b, (uint32_t)i, &v), 0);
	ck_assert_uint_eq(v.bytes, 8ull * feed_batch_size(b));
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* The library says which version it is: the project's, which CMake also
 * gave the shared object's file name. */
START_TEST(test_client_version_is_the_projects)
{
	const char *lib = getenv("FEED_LIB");
	char path[512];

	ck_assert_ptr_nonnull(feed_version());
	ck_assert_str_eq(feed_version(), API_PROJECT_VERSION);
	ck_assert_ptr_eq(feed_version(), feed_version()); /* static */
	ck_assert_msg(lib != NULL, "FEED_LIB is not set (ctest sets it)");
	snprintf(path, sizeof(path), "%s/libfeedclient.so.%s", lib, feed_version());
	ck_assert_msg(access(path, F_OK) == 0, "%s does not exist", path);
}
END_TEST

/* feed_strerror() names a code in feedd's terms (a per-user limit is not
 * "Too many users", a stale resume token not a "Stale file handle");
 * feed_errmsg() has the daemon's words exactly, and the operating system's
 * for what the operating system refused. */
START_TEST(test_client_strerror_speaks_feedd)
{
	static const struct {
		int code;
		const char *words;
	} want[] = {
		{-EUSERS, "Per-user limit reached (connections or streams)"},
		{-ENOSPC, "Not enough room (slot memory limit, shared memory or buffer size)"},
		{-ESTALE, "Resume token does not match the dataset version or pipeline"},
		{-ENOENT, "No such dataset, stream or feedd socket"},
		{-EPROTO, "Protocol error between feedd and the client"},
		{-EINVAL, "Invalid argument or option"},
		{-EMSGSIZE, "Message larger than the protocol allows"},
		{-EPROTONOSUPPORT, "No protocol version in common with feedd"},
		{-EOPNOTSUPP, "Request not supported by feedd"},
		{-EBADMSG, "Corrupt data (a dataset block or a message)"},
		{-ENOBUFS, "No buffer left (every credit held, or a slot too small)"},
		{-ECONNRESET, "feedd closed the connection"},
		{-ECONNREFUSED, "No feedd listening on the socket"},
		{-ENOTCONN, "Not connected to feedd"},
		{-EISCONN, "Already connected to feedd"},
		{-ETIMEDOUT, "Timed out waiting for feedd"},
		{-ENOMEM, "Out of memory"},
		{-EACCES, "Permission denied"},
		{-EIO, "Input/output error"}, /* no meaning of feedd's own */
		{0, "Success"},
	};
	struct feed_dataset_list *list;
	struct feed_conn *c;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_str_eq(feed_strerror(want[i].code), want[i].words);
	ck_assert_str_eq(feed_strerror(-99999), "Unknown error");
	ck_assert_str_eq(feed_strerror(ESTALE), feed_strerror(-ESTALE));

	/* the operating system's words for its own refusal */
	ck_assert_int_eq(feed_conn_new(&c), 0);
	ck_assert_int_eq(feed_conn_open(c, h.sock), -ENOENT);
	ck_assert_msg(strstr(feed_errmsg(c), "No such file or directory"), "message: %s",
		      feed_errmsg(c));
	feed_disconnect(c);

	/* the daemon's, exactly */
	api_start();
	c = h_conn_new();
	ck_assert_int_eq(feed_dataset_info(c, "nope", &list), -ENOENT);
	ck_assert_str_eq(feed_errmsg(c), "dataset 'nope': no such dataset");
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
	tcase_add_test(tc, test_client_dtype_constants_match_fields);
	tcase_add_test(tc, test_client_batch_field_index_by_name);
	tcase_add_test(tc, test_client_version_is_the_projects);
	tcase_add_test(tc, test_client_strerror_speaks_feedd);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
