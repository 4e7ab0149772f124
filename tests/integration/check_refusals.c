/*
 * check_refusals.c: access control seen from outside: a child process
 * switched to nobody does not see a dataset it may not read and is refused
 * by name, with the groups it was seen with, when it asks for it (while
 * datasets open to it by uid, group or "*" are listed, and by a group its
 * process holds that its passwd entry does not name); without the socket
 * group nobody cannot connect at all; the per-user connection limit
 * refuses with a message naming the limit;
 * so do the per-user limits on streams, credits and slot bytes, and a
 * refused stream leaves the user's count as it was; a pipeline name that
 * is not configured is refused as such; refusals in a loop do not flood
 * the log; limit refusals of nobody's log at warning.
 * The nobody tests need root and are left out otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define NOBODY 65534

/* Forks a child that takes the supplementary groups (n of them), becomes
 * nobody and runs fn; returns fn's exit code (0 = every check in it passed;
 * n = check n failed). */
static int as_nobody_in(int (*fn)(void), const gid_t *groups, size_t n)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(n, groups) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(100);
		if (getuid() != NOBODY || geteuid() != NOBODY)
			_exit(101);
		_exit(fn());
	}
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(status != -1, "child did not finish");
	ck_assert(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static int as_nobody(int (*fn)(void))
{
	return as_nobody_in(fn, NULL, 0);
}

static void start_with_config(const char *extra)
{
	char text[1280];

	snprintf(text, sizeof(text),
		 "%s"
		 "datasets:\n"
		 "  - name: secret\n"
		 "    path: fm\n"
		 "    allow_users: [root]\n"
		 "  - name: by_group\n"
		 "    path: fm\n"
		 "    allow_groups: [nogroup]\n"
		 "  - name: by_uid\n"
		 "    path: fm\n"
		 "    allow_users: [\"65534\"]\n"
		 "  - name: everyone\n"
		 "    path: fm\n"
		 "    allow_users: [\"*\"]\n"
		 "  - name: owner_only\n"
		 "    path: fm\n"
		 "  - name: by_extra_group\n"
		 "    path: fm\n"
		 "    allow_groups: [\"4242\"]\n",
		 extra);
	const char *cfg = h_write_file("feedd.yaml", text);
	h_start((const char *[]){"--config", cfg, NULL});
}

/* In the nobody child: the checks, numbered. */
static int nobody_reads(void)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;
	struct feed_stats st;

	if (feed_conn_new(&conn) < 0)
		return 1;
	if (feed_conn_open(conn, h.sock) < 0) {
		fprintf(stderr, "nobody: connect: %s\n", feed_errmsg(conn));
		return 2;
	}
	if (feed_list_datasets(conn, &list) < 0 || list->count != 3)
		return 3;
	if (strcmp(list->datasets[0].name, "by_group") || strcmp(list->datasets[1].name, "by_uid") ||
	    strcmp(list->datasets[2].name, "everyone"))
		return 4;
	feed_dataset_list_free(list);
	if (feed_dataset_info(conn, "secret", &list) != -EACCES)
		return 5;
	if (strcmp(feed_errmsg(conn), "dataset 'secret': user 65534 (groups 65534) not allowed")) {
		fprintf(stderr, "nobody: message: %s\n", feed_errmsg(conn));
		return 6;
	}
	if (feed_dataset_info(conn, "owner_only", &list) != -EACCES)
		return 7;
	if (feed_dataset_info(conn, "by_uid", &list) < 0)  /* the refusals did not close it */
		return 8;
	feed_dataset_list_free(list);
	if (feed_stats(conn, &st) < 0 || st.datasets != 3)
		return 9;
	/* streams: refused on the dataset it may not read, served on another */
	struct feed_stream *fs;
	struct feed_batch *b;
	struct feed_stream_opts o = {.dataset = "secret", .batch = 2};
	if (feed_stream_open(conn, &o, &fs) != -EACCES ||
	    strcmp(feed_errmsg(conn), "dataset 'secret': user 65534 (groups 65534) not allowed"))
		return 10;
	o.dataset = "everyone";
	if (feed_stream_open(conn, &o, &fs) < 0 || feed_next(fs, H_DEADLINE_MS, &b) != 0 ||
	    feed_batch_size(b) != 2 || feed_release(b) < 0 || feed_stream_close(fs) < 0)
		return 11;
	feed_disconnect(conn);
	return 0;
}

START_TEST(test_refusals_nobody)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	start_with_config("socket_group: nogroup\n");
	int code = as_nobody(nobody_reads);
	ck_assert_msg(code == 0, "check %d failed in the nobody child; daemon log:\n%s", code,
		      h_file_text(h.log));
	ck_assert(h_log_has("uid 65534 pid"));
	ck_assert(h_log_has("dataset 'secret': user 65534 (groups 65534) not allowed"));
	/* Root reads everything. */
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(feed_list_datasets(conn, &list), 0);
	ck_assert_uint_eq(list->count, 6);
	feed_dataset_list_free(list);
	feed_disconnect(conn);
}
END_TEST

/* In a nobody child that holds group 4242 besides its own: the dataset
 * open to that group only is listed and read, though nobody's passwd
 * entry knows nothing of 4242. */
static int extra_group_reads(void)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;
	struct feed_stream *fs;
	struct feed_batch *b;
	struct feed_stream_opts o = {.dataset = "by_extra_group", .batch = 2};

	if (feed_connect(h.sock, &conn) < 0)
		return 1;
	if (feed_dataset_info(conn, "by_extra_group", &list) < 0) {
		fprintf(stderr, "extra group: %s\n", feed_errmsg(conn));
		return 2;
	}
	feed_dataset_list_free(list);
	if (feed_list_datasets(conn, &list) < 0 || list->count != 4 ||
	    strcmp(list->datasets[3].name, "by_extra_group"))
		return 3;
	feed_dataset_list_free(list);
	if (feed_stream_open(conn, &o, &fs) < 0 || feed_next(fs, H_DEADLINE_MS, &b) != 0 ||
	    feed_release(b) < 0 || feed_stream_close(fs) < 0)
		return 4;
	/* other groups' datasets stay closed, and the refusal names the groups seen */
	if (feed_dataset_info(conn, "secret", &list) != -EACCES ||
	    strcmp(feed_errmsg(conn), "dataset 'secret': user 65534 (groups 65534, 4242) not "
				      "allowed")) {
		fprintf(stderr, "extra group: %s\n", feed_errmsg(conn));
		return 5;
	}
	feed_disconnect(conn);
	return 0;
}

/* In a nobody child with no extra group: refused, the groups named. */
static int no_extra_group_refused(void)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	if (feed_connect(h.sock, &conn) < 0)
		return 1;
	if (feed_dataset_info(conn, "by_extra_group", &list) != -EACCES)
		return 2;
	if (strcmp(feed_errmsg(conn), "dataset 'by_extra_group': user 65534 (groups 65534) not "
				      "allowed")) {
		fprintf(stderr, "no extra group: %s\n", feed_errmsg(conn));
		return 3;
	}
	feed_disconnect(conn);
	return 0;
}

/* In the nobody child: asks for a dataset it may not read, in a loop for
 * 1.5 s; every time refused. */
static int nobody_asks_in_a_loop(void)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;
	unsigned n = 0;

	if (feed_connect(h.sock, &conn) < 0)
		return 1;
	for (int64_t end = h_now_ms() + 1500; h_now_ms() < end; n++)
		if (feed_dataset_info(conn, "secret", &list) != -EACCES)
			return 2;
	feed_disconnect(conn);
	return n > 100 ? 0 : 3;
}

START_TEST(test_refusals_access_flood_log_bounded)
{
	start_with_config("socket_group: nogroup\n");
	int code = as_nobody(nobody_asks_in_a_loop);
	ck_assert_msg(code == 0, "check %d failed in the nobody child", code);
	unsigned lines = h_log_count("dataset 'secret': user 65534");
	ck_assert_msg(lines <= 12, "%u lines logged for the refusals", lines);
	ck_assert(h_log_has("not allowed; "));
	ck_assert(h_log_has(" more suppressed"));
}
END_TEST

START_TEST(test_refusals_process_groups)
{
	static const gid_t extra[] = {4242};

	start_with_config("socket_group: nogroup\n");
	int code = as_nobody_in(extra_group_reads, extra, 1);
	ck_assert_msg(code == 0, "check %d failed in the child with group 4242; daemon log:\n%s",
		      code, h_file_text(h.log));
	code = as_nobody(no_extra_group_refused);
	ck_assert_msg(code == 0, "check %d failed in the child without it; daemon log:\n%s",
		      code, h_file_text(h.log));
}
END_TEST

/* In the nobody child: connecting must fail for lack of permission. */
static int nobody_cannot_connect(void)
{
	struct feed_conn *conn;
	int r;

	if (feed_conn_new(&conn) < 0)
		return 1;
	r = feed_conn_open(conn, h.sock);
	if (r != -EACCES) {
		fprintf(stderr, "nobody: got %d: %s\n", r, feed_errmsg(conn));
		return 2;
	}
	if (!strstr(feed_errmsg(conn), "Permission denied"))
		return 3;
	feed_disconnect(conn);
	return 0;
}

START_TEST(test_refusals_socket_mode)
{
	start_with_config("");  /* no socket_group: root:root 0660 */
	ck_assert_int_eq(as_nobody(nobody_cannot_connect), 0);
	h_assert_healthy();
}
END_TEST

START_TEST(test_refusals_max_connections)
{
	struct feed_conn *a, *b, *c;
	int r;

	start_with_config("limits:\n  max_connections: 2\n");
	ck_assert_int_eq(feed_connect(h.sock, &a), 0);
	ck_assert_int_eq(feed_connect(h.sock, &b), 0);
	ck_assert_int_eq(feed_conn_new(&c), 0);
	r = feed_conn_open(c, h.sock);
	ck_assert_msg(r == -EUSERS, "got %d: %s", r, feed_errmsg(c));
	ck_assert_ptr_nonnull(strstr(feed_errmsg(c), "user 0 already has 2 connections "
					       "(limits.max_connections = 2)"));
	ck_assert(h_log_has("connection refused (uid 0"));
	/* Once one goes, a new one is let in (the daemon sees the close soon). */
	feed_disconnect(b);
	int64_t end = h_now_ms() + H_DEADLINE_MS;
	while ((r = feed_conn_open(c, h.sock)) == -EUSERS && h_now_ms() < end)
		;
	ck_assert_int_eq(r, 0);
	feed_disconnect(c);
	feed_disconnect(a);
}
END_TEST

/* A user who keeps connecting past max_connections is refused every time,
 * but the log gets a few lines and how many it left out, not one each. */
START_TEST(test_refusals_connection_flood_log_bounded)
{
	struct feed_conn *a;
	unsigned refused = 0;

	start_with_config("limits:\n  max_connections: 1\n");
	ck_assert_int_eq(feed_connect(h.sock, &a), 0);
	for (int64_t end = h_now_ms() + 1500; h_now_ms() < end; refused++) {
		int fd = h_raw_connect();
		h_expect_error(fd, 0, -EUSERS, "limits.max_connections = 1");
		close(fd);
	}
	ck_assert_uint_gt(refused, 100);
	unsigned lines = h_log_count("connection refused");
	ck_assert_msg(lines <= 12, "%u lines logged for %u refused connections", lines, refused);
	ck_assert(h_log_has("(limits.max_connections = 1); "));
	ck_assert(h_log_has(" more suppressed"));
	/* still serving: once a goes (the daemon sees it soon), b gets in */
	feed_disconnect(a);
	struct feed_conn *b;
	int r;
	ck_assert_int_eq(feed_conn_new(&b), 0);
	int64_t end = h_now_ms() + H_DEADLINE_MS;
	while ((r = feed_conn_open(b, h.sock)) == -EUSERS && h_now_ms() < end)
		;
	ck_assert_int_eq(r, 0);
	feed_disconnect(b);
}
END_TEST

/* A bare name that is no configured pipeline (and no op) is refused as a
 * pipeline that does not exist, listing those that do; op text, op names
 * and configured names still work as before. */
START_TEST(test_refusals_unknown_pipeline_name)
{
	static const struct {
		const char *pipeline, *msg;
	} bad[] = {
		{"img-aug", "dataset 'everyone': no pipeline named 'img-aug' (configured: train, "
			    "eval.v2)"},
		{"imgaug", "dataset 'everyone': no pipeline named 'imgaug' (configured: train, "
			   "eval.v2)"},
	};
	struct feed_stream *st;
	struct feed_conn *c;

	start_with_config("pipelines:\n  - name: train\n    ops: \"hflip(p=0.5)\"\n"
			  "  - name: eval.v2\n    ops: identity\n");
	c = h_conn_new();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct feed_stream_opts o = {.dataset = "everyone", .batch = 2,
					     .pipeline = bad[i].pipeline};
		int r = feed_stream_open(c, &o, &st);
		ck_assert_msg(r == -EINVAL, "'%s': got %d: %s", bad[i].pipeline, r, feed_errmsg(c));
		ck_assert_str_eq(feed_errmsg(c), bad[i].msg);
	}
	struct feed_stream_opts o = {.dataset = "everyone", .batch = 2, .pipeline = "blur(p=1)"};
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(c), "op 1 'blur': unknown op"));
	const char *good[] = {"train", "eval.v2", "hflip", "", "center_crop(size=2)"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		o.pipeline = good[i];
		st = h_stream_open(c, &o);
		ck_assert_int_eq(feed_stream_close(st), 0);
	}
	feed_disconnect(c);
}
END_TEST

/* Opens a stream on "everyone"; returns 0 or the refusal's code. */
static int limits_open(struct feed_conn *c, uint32_t credits, const char *pipeline,
		       struct feed_stream **ret)
{
	struct feed_stream_opts o = {.dataset = "everyone", .batch = 5, .credits = credits,
				     .pipeline = pipeline};

	return feed_stream_open(c, &o, ret);
}

START_TEST(test_refusals_stream_limits)
{
	struct feed_stream *a, *b, *x;
	struct feed_conn *c;
	int r;

	start_with_config("limits:\n  max_streams: 2\n  max_credits: 8\n"
			  "  max_slot_bytes: 1M\n");
	c = h_conn_new();
	/* more credits than max_credits */
	r = limits_open(c, 9, NULL, &x);
	ck_assert_msg(r == -EINVAL, "got %d: %s", r, feed_errmsg(c));
	ck_assert_str_eq(feed_errmsg(c),
			 "dataset 'everyone': credits 9 exceed the limit max_credits 8");
	/* a slot of 5 images resized to 256x256 is 320 KiB: 4 of them are
	 * more than 1 MiB, 2 are not */
	r = limits_open(c, 4, "resize(h=256, w=256)", &x);
	ck_assert_msg(r == -ENOSPC, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "dataset 'everyone': user 0: 0 bytes of slots held, ") &&
		      strstr(feed_errmsg(c), "would exceed max_slot_bytes 1048576"),
		      "%s", feed_errmsg(c));
	ck_assert_int_eq(limits_open(c, 2, "resize(h=256, w=256)", &x), 0);
	ck_assert_int_eq(feed_stream_close(x), 0);
	/* the refusals counted nothing: two streams fit, a third does not */
	ck_assert_int_eq(limits_open(c, 4, NULL, &a), 0);
	ck_assert_int_eq(limits_open(c, 4, NULL, &b), 0);
	r = limits_open(c, 4, NULL, &x);
	ck_assert_msg(r == -EUSERS, "got %d: %s", r, feed_errmsg(c));
	ck_assert_str_eq(feed_errmsg(c),
			 "dataset 'everyone': user 0: 2 streams open, limit max_streams is 2");
	ck_assert(h_log_has("open_stream refused: dataset 'everyone': user 0: 2 streams open"));
	/* a closed stream gives its place back */
	ck_assert_int_eq(feed_stream_close(b), 0);
	int64_t end = h_now_ms() + H_DEADLINE_MS;
	while ((r = limits_open(c, 4, NULL, &b)) == -EUSERS && h_now_ms() < end)
		;
	ck_assert_msg(r == 0, "got %d: %s", r, feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(a), 0);
	ck_assert_int_eq(feed_stream_close(b), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

/* As nobody: a second stream over max_streams 1 is refused. 0, or the
 * check that failed. */
static int nobody_over_limit(void)
{
	struct feed_conn *c;
	struct feed_stream *a, *x;

	if (feed_connect(h.sock, &c))
		return 1;
	if (limits_open(c, 2, NULL, &a))
		return 2;
	if (limits_open(c, 2, NULL, &x) != -EUSERS)
		return 3;
	if (!strstr(feed_errmsg(c), "user 65534: 1 streams open, limit max_streams is 1"))
		return 4;
	feed_stream_close(a);
	feed_disconnect(c);
	return 0;
}

/* A limit refusal is logged at warning, naming user and limit. */
START_TEST(test_refusals_limits_logged_at_warning)
{
	start_with_config("socket_group: nogroup\nlimits:\n  max_streams: 1\n");
	ck_assert_int_eq(as_nobody(nobody_over_limit), 0);
	const char *log = h_file_text(h.log);
	const char *line = strstr(log, "open_stream refused: dataset 'everyone': user 65534: 1 "
				  "streams open, limit max_streams is 1");
	ck_assert_msg(line, "%s", log);
	while (line > log && line[-1] != '\n')
		line--;
	ck_assert_msg(strstr(line, "feedd[") && strstr(line, "]: warn: ") &&
		      strstr(line, "]: warn: ") < strstr(line, "open_stream refused"), "%.200s", line);
}
END_TEST

static Suite *refusals_suite(void)
{
	Suite *s = suite_create("refusals");
	TCase *tc = tcase_create("refusals");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	if (geteuid() == 0) {
		tcase_add_test(tc, test_refusals_nobody);
		tcase_add_test(tc, test_refusals_socket_mode);
		tcase_add_test(tc, test_refusals_process_groups);
		tcase_add_test(tc, test_refusals_access_flood_log_bounded);
		tcase_add_test(tc, test_refusals_limits_logged_at_warning);
	} else {
		fprintf(stderr, "check_refusals: not root: the nobody tests are left out\n");
	}
	tcase_add_test(tc, test_refusals_max_connections);
	tcase_add_test(tc, test_refusals_stream_limits);
	tcase_add_test(tc, test_refusals_connection_flood_log_bounded);
	tcase_add_test(tc, test_refusals_unknown_pipeline_name);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(refusals_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
