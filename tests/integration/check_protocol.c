/*
 * check_protocol.c: a real feedd on a private socket, spoken to through
 * libfeedclient and through raw packets libfeedclient would never send:
 * hello and listing, garbage, an oversized packet, a truncated message, an
 * attached descriptor, unknown and premature requests, a version with no
 * overlap, repeated malformed requests, a peer that does not read, peers
 * that vanish, a daemon that never answers or goes away. After each abuse a
 * healthy client must still be served.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed_text.h"
#include "feedd_harness.h"

static const char *fm_args[] = {"--dataset", NULL, "--workers", "2", NULL};

static void start_fm(void)
{
	static char arg[160];

	snprintf(arg, sizeof(arg), "fm=%s", h.data);
	fm_args[1] = arg;
	h_start(fm_args);
}

START_TEST(test_protocol_hello_and_list)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;
	struct feed_stats st;

	start_fm();
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(feed_list_datasets(conn, &list), 0);
	ck_assert_uint_eq(list->count, 1);
	const struct feed_dataset *d = &list->datasets[0];
	ck_assert_str_eq(d->name, "fm");
	ck_assert_uint_eq(strlen(d->version), 16);
	ck_assert_uint_eq(d->num_samples, H_SAMPLES);
	ck_assert_uint_eq(d->num_fields, 2);
	ck_assert_str_eq(d->fields[0].name, "image");
	ck_assert_str_eq(d->fields[0].dtype_name, "u8");
	ck_assert_uint_eq(d->fields[0].elem_size, 1);
	ck_assert_uint_eq(d->fields[0].rank, 2);
	ck_assert_uint_eq(d->fields[0].shape[0], 4);
	ck_assert_uint_eq(d->fields[0].shape[1], 4);
	ck_assert(!d->fields[0].variable);
	ck_assert_uint_eq(d->fields[0].max_bytes, 16);
	ck_assert_str_eq(d->fields[1].name, "label");
	ck_assert_str_eq(d->fields[1].dtype_name, "i64");
	ck_assert_uint_eq(d->fields[1].rank, 0);
	feed_dataset_list_free(list);

	ck_assert_int_eq(feed_dataset_info(conn, "fm", &list), 0);
	ck_assert_uint_eq(list->count, 1);
	ck_assert_str_eq(list->datasets[0].name, "fm");
	feed_dataset_list_free(list);
	ck_assert_int_eq(feed_dataset_info(conn, "nope", &list), -ENOENT);
	ck_assert_str_eq(feed_errmsg(conn), "dataset 'nope': no such dataset");

	ck_assert_int_eq(feed_stats(conn, &st), 0);
	ck_assert_str_eq(st.server_version, "0.1.0");
	ck_assert_uint_eq(st.protocol_version, 1);
	ck_assert_uint_eq(st.connections, 1);
	ck_assert_uint_eq(st.user_connections, 1);
	ck_assert_uint_eq(st.workers, 2);
	ck_assert_uint_eq(st.datasets, 1);
	ck_assert_uint_eq(st.requests, 4);  /* hello, list, info, info refused */
	ck_assert_uint_eq(st.rejected, 1);
	feed_disconnect(conn);
	ck_assert(h_log_has("'check_protocol' connected, protocol 1"));
}
END_TEST

START_TEST(test_protocol_garbage)
{
	static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					  0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

	start_fm();
	int fd = h_raw_connect();
	h_raw_send(fd, garbage, sizeof(garbage));
	h_expect_error(fd, 0, -EBADMSG, "undecodable request (12 bytes)");
	h_expect_eof(fd);
	close(fd);
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_oversized)
{
	size_t len = 100 * 1024;
	uint8_t *big = calloc(1, len);

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	h_raw_send(fd, big, len);
	h_expect_error(fd, 0, -EMSGSIZE, "request of 102400 bytes exceeds the 65536 byte limit");
	h_expect_eof(fd);
	close(fd);
	free(big);
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_truncated)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello hello = FEED__HELLO__INIT;
	uint8_t buf[256];

	start_fm();
	hello.client_name = feed_pb_text("truncated-client");
	hello.min_version = hello.max_version = 1;
	req.id = 3;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	size_t len = feed__request__pack(&req, buf);
	int fd = h_raw_connect();
	h_raw_send(fd, buf, len - 4);  /* cut inside the hello */
	h_expect_error(fd, 0, -EBADMSG, "undecodable request");
	h_expect_eof(fd);
	close(fd);
	h_assert_healthy();
}
END_TEST

/* Sends a packed hello with fd attached. */
static void send_hello_with_fd(int sock, int fd)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello hello = FEED__HELLO__INIT;
	uint8_t buf[256];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;

	hello.client_name = feed_pb_text("fd-client");
	hello.min_version = hello.max_version = 1;
	req.id = 77;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	struct iovec iov = {.iov_base = buf, .iov_len = feed__request__pack(&req, buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof(ctl.b)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ck_assert_int_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)iov.iov_len);
}

START_TEST(test_protocol_unexpected_fd)
{
	int pipefd[2];
	char ch;

	start_fm();
	ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	int fd = h_raw_connect();
	send_hello_with_fd(fd, pipefd[1]);
	close(pipefd[1]);
	h_expect_error(fd, 77, -EPROTO, "unexpected file descriptor");
	/* The daemon closed its copy: the pipe's last writer is gone. */
	struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, H_DEADLINE_MS), 1);
	ck_assert_int_eq(read(pipefd[0], &ch, 1), 0);
	close(pipefd[0]);
	/* The request was ignored, the connection kept: hello works now. */
	h_raw_hello(fd);
	close(fd);
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_unknown_kind)
{
	static const uint8_t future[] = {0x08, 0x09, 0x7a, 0x00};  /* id 9, field 15 */
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__ListDatasets ld = FEED__LIST_DATASETS__INIT;
	Feed__Reply *rep = NULL;

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	h_raw_send(fd, future, sizeof(future));
	h_expect_error(fd, 9, -EOPNOTSUPP, "unknown request (field 15)");
	req.id = 10;
	req.body_case = FEED__REQUEST__BODY_LIST_DATASETS;
	req.list_datasets = &ld;
	h_raw_send_request(fd, &req);
	ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_DATASETS);
	ck_assert_uint_eq(rep->id, 10);
	ck_assert_uint_eq(rep->datasets->n_datasets, 1);
	feed__reply__free_unpacked(rep, NULL);
	close(fd);
}
END_TEST

/* A string with a NUL inside is refused naming the field, not read as
 * the C string before the NUL ("fm", a dataset that exists). */
START_TEST(test_protocol_string_nul)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;
	uint8_t buf[64];

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	q.name = feed_pb_text("fm#/../x");
	req.id = 8;
	req.body_case = FEED__REQUEST__BODY_DATASET_INFO;
	req.dataset_info = &q;
	size_t len = feed__request__get_packed_size(&req);
	ck_assert_uint_le(len, sizeof(buf));
	feed__request__pack(&req, buf);
	*(uint8_t *)memchr(buf, '#', len) = '\0';
	h_raw_send(fd, buf, len);
	h_expect_error(fd, 8, -EINVAL, "dataset_info.name: a NUL byte at offset 2");
	/* refused, not disconnected */
	Feed__Reply *rep = NULL;
	q.name = feed_pb_text("fm");
	req.id = 9;
	h_raw_send_request(fd, &req);
	ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_DATASETS);
	feed__reply__free_unpacked(rep, NULL);
	close(fd);
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_hello_first)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__StatsQuery q = FEED__STATS_QUERY__INIT;

	start_fm();
	int fd = h_raw_connect();
	req.id = 4;
	req.body_case = FEED__REQUEST__BODY_STATS;
	req.stats = &q;
	h_raw_send_request(fd, &req);
	h_expect_error(fd, 4, -EPROTO, "hello first");
	h_raw_hello(fd);
	close(fd);
}
END_TEST

START_TEST(test_protocol_version_mismatch)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello hello = FEED__HELLO__INIT;

	start_fm();
	int fd = h_raw_connect();
	hello.client_name = feed_pb_text("future-client");
	hello.min_version = 2;
	hello.max_version = 9;
	req.id = 1;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	h_raw_send_request(fd, &req);
	h_expect_error(fd, 1, -EPROTONOSUPPORT, "client speaks 2..9, feedd speaks 1..1");
	h_expect_eof(fd);
	close(fd);
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_repeated_malformed)
{
	static const uint8_t empty[] = {0x08, 0x05};  /* id 5, no kind */

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	for (int i = 1; i < 8; i++) {
		h_raw_send(fd, empty, sizeof(empty));
		h_expect_error(fd, 5, -EOPNOTSUPP, "empty request");
	}
	h_raw_send(fd, empty, sizeof(empty));
	h_expect_error(fd, 5, -EOPNOTSUPP, "closing after repeated malformed requests");
	h_expect_eof(fd);
	close(fd);
	h_assert_healthy();
}
END_TEST

/* Longer than one second of flooding, so the limit lets a line through
 * after suppressing some; the log must stay within a handful of lines. */
#define FLOOD_MS 1500
#define FLOOD_LINES_MAX 12

/* A peer that sends malformed requests in a loop (a good one every few
 * keeps the connection open) gets them all answered, but the daemon logs
 * a few of them and then how many it left out, not one line each. */
START_TEST(test_protocol_malformed_flood_log_bounded)
{
	static const uint8_t empty[] = {0x08, 0x05};  /* id 5, no kind */
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__StatsQuery q = FEED__STATS_QUERY__INIT;
	Feed__Reply *rep = NULL;
	unsigned sent = 0;

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	req.id = 6;
	req.body_case = FEED__REQUEST__BODY_STATS;
	req.stats = &q;
	for (int64_t end = h_now_ms() + FLOOD_MS; h_now_ms() < end;) {
		for (int i = 0; i < 4; i++, sent++) {
			h_raw_send(fd, empty, sizeof(empty));
			h_expect_error(fd, 5, -EOPNOTSUPP, "empty request");
		}
		h_raw_send_request(fd, &req);
		ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
		ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STATS);
		feed__reply__free_unpacked(rep, NULL);
	}
	ck_assert_uint_gt(sent, 100);
	unsigned lines = h_log_count("empty request");
	ck_assert_msg(lines <= FLOOD_LINES_MAX, "%u lines logged for %u malformed requests", lines,
		      sent);
	ck_assert(h_log_has("empty request: no request kind set; "));
	ck_assert(h_log_has(" more suppressed"));
	close(fd);
	h_assert_healthy();
}
END_TEST

/* Sends stats requests without reading until the socket is full, then
 * reads: every request is answered, in order, once. */
START_TEST(test_protocol_slow_reader)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__StatsQuery q = FEED__STATS_QUERY__INIT;
	uint8_t buf[64];
	uint32_t sent = 0;

	start_fm();
	int fd = h_raw_connect();
	h_raw_hello(fd);
	req.body_case = FEED__REQUEST__BODY_STATS;
	req.stats = &q;
	int64_t quiet_since = h_now_ms();
	while (h_now_ms() - quiet_since < 300 && sent < 100000) {  /* full: 300 ms of EAGAIN */
		req.id = sent + 2;
		size_t len = feed__request__pack(&req, buf);
		if (send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len) {
			sent++;
			quiet_since = h_now_ms();
		} else {
			ck_assert_int_eq(errno, EAGAIN);
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			poll(&p, 1, 20);
		}
	}
	ck_assert_uint_gt(sent, 100);
	for (uint32_t i = 0; i < sent; i++) {
		Feed__Reply *rep = NULL;
		ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
		ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STATS);
		ck_assert_uint_eq(rep->id, i + 2);
		feed__reply__free_unpacked(rep, NULL);
	}
	close(fd);
	h_assert_healthy();
}
END_TEST

/* Waits until the daemon counts n connections (closes are asynchronous). */
static void wait_connections(uint32_t n)
{
	struct feed_conn *conn;
	struct feed_stats st = {0};
	int64_t end = h_now_ms() + H_DEADLINE_MS;

	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	do
		ck_assert_int_eq(feed_stats(conn, &st), 0);
	while (st.connections != n && h_now_ms() < end);
	ck_assert_uint_eq(st.connections, n);
	feed_disconnect(conn);
}

START_TEST(test_protocol_vanishing_clients)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__ListDatasets ld = FEED__LIST_DATASETS__INIT;

	start_fm();
	close(h_raw_connect());  /* connects and goes */
	int fd = h_raw_connect();
	h_raw_hello(fd);
	req.body_case = FEED__REQUEST__BODY_LIST_DATASETS;
	req.list_datasets = &ld;
	for (uint32_t i = 0; i < 50; i++) {  /* asks, and goes without reading */
		req.id = i + 2;
		h_raw_send_request(fd, &req);
	}
	close(fd);
	wait_connections(1);  /* only the asking one is left */
	h_assert_healthy();
}
END_TEST

START_TEST(test_protocol_client_timeout)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct feed_conn *conn;
	char path[100];

	/* A "daemon" that listens and never answers. */
	snprintf(path, sizeof(path), "%s/silent.sock", h.dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	ck_assert_int_eq(feed_conn_new(&conn), 0);
	ck_assert_int_eq(feed_conn_set_timeout(conn, 300), 0);
	int64_t t0 = h_now_ms();
	ck_assert_int_eq(feed_conn_open(conn, path), -ETIMEDOUT);
	int64_t took = h_now_ms() - t0;
	ck_assert_int_ge(took, 250);
	ck_assert_int_lt(took, 5000);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(conn), "no reply from feedd within 300 ms"));
	ck_assert_ptr_nonnull(strstr(feed_errmsg(conn), path));
	feed_disconnect(conn);
	close(lfd);
}
END_TEST

START_TEST(test_protocol_daemon_goes_away)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	start_fm();
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(h_stop(), 0);
	int r = feed_list_datasets(conn, &list);
	ck_assert_msg(r == -ECONNRESET, "got %d (%s)", r, feed_errmsg(conn));
	ck_assert_str_eq(feed_errmsg(conn), "feedd closed the connection");
	ck_assert_int_eq(feed_list_datasets(conn, &list), -ENOTCONN);
	feed_disconnect(conn);
	ck_assert_int_eq(feed_connect(h.sock, &conn), -ENOENT);  /* socket removed */
}
END_TEST

START_TEST(test_protocol_no_daemon)
{
	struct feed_conn *conn;
	char longpath[200];

	ck_assert_int_eq(feed_conn_new(&conn), 0);
	ck_assert_int_eq(feed_conn_open(conn, h.sock), -ENOENT);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(conn), "cannot reach feedd at"));
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	ck_assert_int_eq(feed_conn_open(conn, longpath), -ENAMETOOLONG);
	ck_assert_int_eq(feed_conn_set_timeout(conn, 0), -EINVAL);
	feed_disconnect(conn);
	feed_disconnect(NULL);
	ck_assert_str_eq(feed_errmsg(NULL), "");
	ck_assert_str_eq(feed_strerror(-EACCES), "Permission denied");
	ck_assert_str_eq(feed_strerror(0), "Success");
	ck_assert_ptr_nonnull(feed_strerror(-99999));
}
END_TEST

static Suite *protocol_suite(void)
{
	Suite *s = suite_create("protocol");
	TCase *tc = tcase_create("protocol");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_protocol_hello_and_list);
	tcase_add_test(tc, test_protocol_garbage);
	tcase_add_test(tc, test_protocol_oversized);
	tcase_add_test(tc, test_protocol_truncated);
	tcase_add_test(tc, test_protocol_unexpected_fd);
	tcase_add_test(tc, test_protocol_unknown_kind);
	tcase_add_test(tc, test_protocol_string_nul);
	tcase_add_test(tc, test_protocol_hello_first);
	tcase_add_test(tc, test_protocol_version_mismatch);
	tcase_add_test(tc, test_protocol_repeated_malformed);
	tcase_add_test(tc, test_protocol_malformed_flood_log_bounded);
	tcase_add_test(tc, test_protocol_slow_reader);
	tcase_add_test(tc, test_protocol_vanishing_clients);
	tcase_add_test(tc, test_protocol_client_timeout);
	tcase_add_test(tc, test_protocol_daemon_goes_away);
	tcase_add_test(tc, test_protocol_no_daemon);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(protocol_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
