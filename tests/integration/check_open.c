/*
 * check_open.c: opening a stream, the one request that makes the daemon
 * allocate on a client's behalf. A client that goes away at any point of
 * an open (before, while and after its regions are made) harms nobody; the
 * per-user limits are checked against the stream's layout before a byte of
 * shared memory exists; and the shared memory is made by a worker, never
 * by the loop thread that serves every other client meanwhile; its answer
 * is never lost behind replies the client has not read yet.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feed_text.h"
#include "feedd_harness.h"

static const char *data_arg(void)
{
	static char arg[160];
	snprintf(arg, sizeof(arg), "fm=%s", h.data);
	return arg;
}

/* Sends an open_stream for fm on fd (after hello) with request id id. */
static void raw_open(int fd, uint32_t id, uint32_t batch, const char *pipeline)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream os = FEED__OPEN_STREAM__INIT;

	os.dataset = feed_pb_text("fm");
	os.batch = batch;
	os.credits = 4;
	os.pipeline = feed_pb_text(pipeline);
	req.id = id;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &os;
	h_raw_send_request(fd, &req);
}

/* Waits until the daemon holds no stream's shared memory any more. */
static void wait_no_regions(void)
{
	int64_t end = h_now_ms() + H_DEADLINE_MS;

	while (h_proc_maps_count(h.pid, "memfd:feedd-") > 0 && h_now_ms() < end)
		h_nap_ms(5);
	ck_assert_int_eq(h_proc_maps_count(h.pid, "memfd:feedd-"), 0);
}

/* Hello, open, gone: before the fix the reply's EPIPE closed the
 * connection inside the open handler, which then started a stream it no
 * longer had (SIGSEGV: every client of the node lost). Here the client
 * goes at every point: right after asking, after a large open that keeps a
 * worker busy making memory, and after reading the reply. */
START_TEST(test_open_client_gone)
{
	/* one worker: the pool runs its own jobs (making regions) in order, so
	 * the probe below is answered only after every earlier open's job */
	h_start((const char *[]){"--dataset", data_arg(), "--workers", "1", NULL});
	for (int i = 0; i < 30; i++) {
		int fd = h_raw_connect();
		h_raw_hello(fd);
		raw_open(fd, 2, 1 + i % 4, i % 3 ? NULL : "resize(h=512, w=512)");
		if (i % 5 == 4) {  /* reads the reply, descriptors and all, then goes */
			Feed__Reply *rep;
			int fds[8];
			unsigned nfds;
			ck_assert_int_eq(h_raw_recv_fds(fd, H_DEADLINE_MS, &rep, fds, 8, &nfds), 1);
			ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STREAM_OPENED);
			feed__reply__free_unpacked(rep, NULL);
			for (unsigned k = 0; k < nfds; k++)
				close(fds[k]);
		}
		close(fd);
	}
	h_assert_healthy();
	/* The vanished clients' opens end one by one on the worker, so the
	 * count of regions can touch 0 while one is still being made: a
	 * probe stream, opened and closed, comes after all of them. */
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "fm", .batch = 1, .credits = 1};
	ck_assert_int_eq(feed_stream_close(h_stream_open(c, &o)), 0);
	feed_disconnect(c);
	wait_no_regions();  /* and nothing the vanished clients asked for is kept */
}
END_TEST

/* Starts feedd under strace, recording every fallocate of every thread,
 * and returns the daemon's own pid (the loop thread's id). h.pid is
 * strace's: it exits with feedd's status. */
static pid_t start_traced(const char *config, const char *trace)
{
	char bin[300];
	pid_t parent = getpid(), pid;
	int64_t end = h_now_ms() + H_DEADLINE_MS;

	snprintf(bin, sizeof(bin), "%s/feedd", h.bin);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		FILE *f = freopen(h.log, "a", stderr);
		if (!f || dup2(2, 1) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		/* LeakSanitizer cannot run under ptrace; the other tests look for leaks */
		char asan[256];
		const char *was = getenv("ASAN_OPTIONS");
		snprintf(asan, sizeof(asan), "%s%sdetect_leaks=0", was ? was : "", was ? ":" : "");
		setenv("ASAN_OPTIONS", asan, 1);
		execlp("strace", "strace", "-f", "-qq", "-e", "trace=fallocate", "-o", trace, bin,
		       "--socket", h.sock, "--config", config, (char *)NULL);
		_exit(127);
	}
	h.pid = pid;
	const char *ready;
	while (!(ready = strstr(h_file_text(h.log), "ready:"))) {
		ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "feedd under strace exited:\n%s",
			      h_file_text(h.log));
		ck_assert_msg(h_now_ms() < end, "feedd not ready:\n%s", h_file_text(h.log));
		h_nap_ms(5);
	}
	const char *p = strstr(h_file_text(h.log), "feedd[");
	ck_assert_ptr_nonnull(p);
	return (pid_t)atoi(p + 6);
}

/* With max_slot_bytes 1M, a stream whose slots need 32 MiB is refused by
 * the limit before any memory is made (before the fix strace showed the
 * 32 MiB fallocated, then the refusal), and the regions of a stream that
 * fits are made by a worker thread, not the loop. */
START_TEST(test_open_limits_before_memory)
{
	char cfg[512], trace[200];
	struct feed_conn *c;
	struct feed_stream *st;
	int r;

	snprintf(cfg, sizeof(cfg), "limits:\n  max_slot_bytes: 1M\nworkers: 2\n"
		 "datasets:\n  - name: fm\n    path: %s\n", h.data);
	snprintf(trace, sizeof(trace), "%s/strace.txt", h.dir);
	pid_t daemon = start_traced(h_write_file("feedd.yaml", cfg), trace);
	c = h_conn_new();
	/* 4 credits of 8 images of 1024 x 1024 bytes */
	struct feed_stream_opts o = {.dataset = "fm", .batch = 8, .credits = 4,
				     .pipeline = "resize(h=1024, w=1024)"};
	r = feed_stream_open(c, &o, &st);
	ck_assert_msg(r == -ENOSPC, "got %d: %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "more would exceed max_slot_bytes 1048576"), "%s",
		      feed_errmsg(c));
	o.pipeline = NULL;  /* a stream that fits is served */
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	h_tiny_read(st, 3);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);

	ck_assert_int_eq(kill(daemon, SIGTERM), 0);
	int status = h_wait(h.pid, H_DEADLINE_MS);
	h.pid = 0;
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d:\n%s", status,
		      h_file_text(h.log));
	/* "<tid> fallocate(<fd>, 0, 0, <bytes>) = 0" */
	char text[1 << 15];
	snprintf(text, sizeof(text), "%s", h_file_text(trace));
	long tid[16];
	unsigned long long bytes[16];
	int calls = 0;
	for (char *line = strtok(text, "\n"); line && calls < 16; line = strtok(NULL, "\n"))
		if (sscanf(line, "%ld fallocate(%*d, %*d, %*d, %llu)", &tid[calls],
			   &bytes[calls]) == 2)
			calls++;
	for (int i = 0; i < calls; i++)
		ck_assert_msg(bytes[i] <= (1u << 20), "fallocate of %llu bytes:\n%s", bytes[i],
			      h_file_text(trace));
	for (int i = 0; i < calls; i++)
		ck_assert_msg(tid[i] != daemon, "the loop thread made shared memory:\n%s",
			      h_file_text(trace));
	ck_assert_int_eq(calls, 3);  /* the served stream's three regions, no more */
}
END_TEST

/* A client retrying a refused open in a loop gets every refusal, but the
 * log gets a few lines and then one a second saying how many were left
 * out (before, one line each: thousands a second). */
START_TEST(test_open_refusal_flood_log_bounded)
{
	h_start((const char *[]){"--dataset", data_arg(), NULL});
	int fd = h_raw_connect();
	h_raw_hello(fd);
	unsigned n = 0;
	for (int64_t end = h_now_ms() + 1500; h_now_ms() < end; n++) {
		raw_open(fd, n + 2, 4, "no_such_op(x=1)");
		h_expect_error(fd, n + 2, -EINVAL, "unknown op");
	}
	close(fd);
	h_assert_healthy();
	ck_assert_uint_gt(n, 100);
	unsigned lines = h_log_count("open_stream refused");
	ck_assert_msg(lines >= 1 && lines <= 12, "%u lines for %u refusals:\n%s", lines, n,
		      h_file_text(h.log));
	ck_assert(h_log_has("more suppressed"));
}
END_TEST

/* Issue 28: a reply that came while an earlier one waited for room in the
 * socket was dropped. The client asks for a large stream (its regions
 * take a worker a while) and then, without reading, for the dataset list
 * until its socket is full, so the daemon's replies wait, and reads only
 * once the open's answer came: every request still gets its answer, the
 * open's with its descriptors. */
#define RQ_MAX 4096  /* requests at most: more than our socket takes */

START_TEST(test_open_answer_queued_behind_waiting_replies)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__ListDatasets ld = FEED__LIST_DATASETS__INIT;
	uint8_t buf[256];
	static bool got[RQ_MAX];
	uint32_t sent = 0;

	h_start((const char *[]){"--dataset", data_arg(), "--workers", "1", NULL});
	int fd = h_raw_connect();
	h_raw_hello(fd);
	raw_open(fd, 2, 64, "resize(h=512, w=512)");  /* 64 MiB: a while to make */
	req.body_case = FEED__REQUEST__BODY_LIST_DATASETS;
	req.list_datasets = &ld;
	/* until the daemon stops reading: a reply of its waits for us */
	for (uint32_t id = 3; id < RQ_MAX; id++, sent++) {
		req.id = id;
		size_t len = feed__request__pack(&req, buf);
		ssize_t r;
		while ((r = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, 300) == 0)
				break;
		}
		if (r < 0)
			break;
		ck_assert_int_eq(r, (ssize_t)len);
	}
	ck_assert_uint_lt(sent, RQ_MAX - 3);
	/* the open's answer comes (its log line follows the reply) while the
	 * replies to the lists wait for us */
	ck_assert(h_log_has(": stream 1 on 'fm'"));
	for (uint32_t n = 0; n < sent + 1; n++) {
		Feed__Reply *rep;
		int fds[8];
		unsigned nfds;
		ck_assert_msg(h_raw_recv_fds(fd, H_DEADLINE_MS, &rep, fds, 8, &nfds) == 1,
			      "%u of %u replies came (the open's: %s)", n, sent + 1,
			      got[2] ? "yes" : "no");
		ck_assert_uint_lt(rep->id, RQ_MAX);
		if (rep->id == 2 || n == 0 || n == sent)
			fprintf(stderr, "reply %u: id %u (sent %u)\n", n, rep->id, sent);
		ck_assert(!got[rep->id]);
		got[rep->id] = true;
		ck_assert_int_eq(rep->body_case, rep->id == 2 ? FEED__REPLY__BODY_STREAM_OPENED :
								 FEED__REPLY__BODY_DATASETS);
		ck_assert_uint_eq(nfds, rep->id == 2 ? 5 : 0);
		for (unsigned k = 0; k < nfds; k++)
			close(fds[k]);
		feed__reply__free_unpacked(rep, NULL);
	}
	close(fd);
	h_assert_healthy();
}
END_TEST

static Suite *open_suite(void)
{
	Suite *s = suite_create("open");
	TCase *tc = tcase_create("open");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_open_client_gone);
	tcase_add_test(tc, test_open_answer_queued_behind_waiting_replies);
	tcase_add_test(tc, test_open_limits_before_memory);
	tcase_add_test(tc, test_open_refusal_flood_log_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(open_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
