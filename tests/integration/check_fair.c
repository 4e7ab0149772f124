/*
 * check_fair.c: fair shares of the workers, seen through the per-stream
 * worker-time counters of feed_status(), never through wall-clock rates.
 * One worker; streams read by child processes that release every batch at
 * once, so each always wants more. Two competing streams of one user, and
 * of two users (the second a child switched to nobody), get worker time
 * within 20% of each other although one holds 16 credits and the other
 * 4, with batches of half the cost (first come, first served gave the
 * first twice the other's worker time). A light
 * stream of another user opened next to a heavy one gets its 20 batches
 * built interleaved with the heavy one's: the heavy stream runs at most
 * about a job per light batch meanwhile, not its whole queue before each.
 * The nobody tests need root and are left out otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define NOBODY 65534
#define HEAVY "resize(h=512, w=512)"  /* ~2 M pixels a batch of 8 */

static void start_daemon(void)
{
	char text[256];

	/* nobody reaches the socket through its group; only root can set it */
	snprintf(text, sizeof(text),
		 "%s"
		 "workers: 1\n"
		 "datasets:\n"
		 "  - name: tiny\n"
		 "    path: fm\n"
		 "    allow_users: [\"*\"]\n",
		 geteuid() == 0 ? "socket_group: nogroup\n" : "");
	const char *cfg = h_write_file("feedd.yaml", text);
	h_start((const char *[]){"--config", cfg, NULL});
}

struct reader {
	uid_t uid;            /* 0: stay as we are; else become nobody */
	uint32_t batch, credits;
	const char *pipeline;
	int batches;          /* to read, then exit 0; 0: until killed */
};

/* The child's side: opens, says so on fd, reads. Exit codes name the
 * step that failed. */
static int reader_main(const struct reader *r, int fd)
{
	struct feed_conn *c;
	struct feed_stream *s;
	struct feed_batch *b;
	struct feed_stream_opts o = {.dataset = "tiny", .batch = r->batch, .credits = r->credits,
				     .pipeline = r->pipeline};

	/* best effort (root only): on a loaded machine the readers, not the
	 * daemon, would otherwise decide how often each stream wants a batch */
	(void)!setpriority(PRIO_PROCESS, 0, -10);
	if (r->uid && (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0))
		return 10;
	if (feed_connect(h.sock, &c) < 0)
		return 11;
	if (feed_stream_open(c, &o, &s) < 0) {
		fprintf(stderr, "reader: open: %s\n", feed_errmsg(c));
		return 12;
	}
	if (write(fd, "o", 1) != 1)
		return 13;
	for (int n = 0; r->batches == 0 || n < r->batches;) {
		int rc = feed_next(s, H_DEADLINE_MS, &b);
		if (rc < 0) {
			fprintf(stderr, "reader: next: %s\n", feed_errmsg(c));
			return 14;
		}
		if (rc == 0) {
			if (feed_release(b) < 0)
				return 15;
			n++;
		}
	}
	feed_stream_close(s);
	feed_disconnect(c);
	return 0;
}

/* Forks a reader and returns once its stream is open. */
static pid_t reader_start(const struct reader *r)
{
	int p[2];
	char c;

	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		_exit(reader_main(r, p[1]));
	}
	close(p[1]);
	ck_assert_msg(read(p[0], &c, 1) == 1, "reader (uid %u) did not open; daemon log:\n%s",
		      (unsigned)r->uid, h_file_text(h.log));
	close(p[0]);
	return pid;
}

static void reader_kill(pid_t pid)
{
	kill(pid, SIGKILL);
	h_wait(pid, H_DEADLINE_MS);
}

/* The worker counters of the stream of uid with credits, from status. */
struct share {
	uint64_t worker_ns, jobs;
};

static struct share share_of(const struct feed_status *st, uid_t uid, uint32_t credits)
{
	for (size_t i = 0; i < st->count; i++)
		if (st->streams[i].uid == uid && st->streams[i].credits == credits)
			return (struct share){st->streams[i].worker_ns, st->streams[i].jobs};
	ck_abort_msg("no stream of uid %u with %u credits", (unsigned)uid, credits);
	return (struct share){0};
}

static struct feed_conn *status_conn;

static void shares_now(uid_t ua, uint32_t ca, uid_t ub, uint32_t cb, struct share *a,
		       struct share *b)
{
	struct feed_status *st;

	ck_assert_int_eq(feed_status(status_conn, &st), 0);
	*a = share_of(st, ua, ca);
	*b = share_of(st, ub, cb);
	feed_status_free(st);
}

struct jobs_wait {
	uid_t ua, ub;
	uint32_t ca, cb;
	uint64_t a_from, b_from;   /* counts to exceed */
	uint64_t a_more, b_more;   /* by at least this much each */
	uint64_t sum_more;         /* or, with sum_more, together */
};

static bool jobs_reached(void *arg)
{
	struct jobs_wait *w = arg;
	struct share a, b;

	shares_now(w->ua, w->ca, w->ub, w->cb, &a, &b);
	if (w->sum_more)
		return a.jobs + b.jobs >= w->a_from + w->b_from + w->sum_more;
	return a.jobs >= w->a_from + w->a_more && b.jobs >= w->b_from + w->b_more;
}

/* Stream A (uid ua, batch 8, 16 credits) and B (uid ub, batch 4, 4
 * credits: while its reader turns one batch around B still has some
 * queued, so it wants one whenever its turn comes, even on a loaded
 * machine) compete for one worker; compares the worker time each got over
 * 400 jobs. */
static void compete(uid_t ua, uid_t ub)
{
	struct reader ra = {.uid = ua, .batch = 8, .credits = 16, .pipeline = HEAVY};
	struct reader rb = {.uid = ub, .batch = 4, .credits = 4, .pipeline = HEAVY};
	struct share a0, b0, a1, b1;

	start_daemon();
	status_conn = h_conn_new();
	pid_t pa = reader_start(&ra);
	pid_t pb = reader_start(&rb);
	struct jobs_wait w = {.ua = ua, .ub = ub, .ca = 16, .cb = 4, .a_more = 10, .b_more = 10};
	ck_assert_msg(h_wait_until(jobs_reached, &w, 60000), "the streams did not both run");
	shares_now(ua, 16, ub, 4, &a0, &b0);
	w = (struct jobs_wait){.ua = ua, .ub = ub, .ca = 16, .cb = 4, .a_from = a0.jobs,
			       .b_from = b0.jobs, .sum_more = 400};
	ck_assert_msg(h_wait_until(jobs_reached, &w, 120000), "400 jobs did not run");
	shares_now(ua, 16, ub, 4, &a1, &b1);
	reader_kill(pa);
	reader_kill(pb);
	uint64_t da = a1.worker_ns - a0.worker_ns, db = b1.worker_ns - b0.worker_ns;
	ck_assert_msg(da * 10 <= db * 12 && db * 10 <= da * 12,
		      "worker time: 16 credits %llu ns (%llu jobs), 4 credits %llu ns (%llu jobs)",
		      (unsigned long long)da, (unsigned long long)(a1.jobs - a0.jobs),
		      (unsigned long long)db, (unsigned long long)(b1.jobs - b0.jobs));
	feed_disconnect(status_conn);
}

START_TEST(test_fair_same_user_worker_time)
{
	compete(getuid(), getuid());
}
END_TEST

START_TEST(test_fair_two_users_worker_time)
{
	compete(getuid(), NOBODY);
}
END_TEST

/* The case: another user's 20 small batches next to a heavy
 * stream with 16 credits queued. */
START_TEST(test_fair_light_interleaved_with_heavy)
{
	struct reader heavy = {.uid = 0, .batch = 8, .credits = 16, .pipeline = HEAVY};
	struct reader light = {.uid = NOBODY, .batch = 2, .credits = 1, .pipeline = "",
			       .batches = 20};
	struct share h0, l0, h1, l1;

	start_daemon();
	status_conn = h_conn_new();
	pid_t ph = reader_start(&heavy);
	struct jobs_wait w = {.ua = getuid(), .ub = getuid(), .ca = 16, .cb = 16, .a_more = 20,
			      .b_more = 20};
	ck_assert_msg(h_wait_until(jobs_reached, &w, 60000), "the heavy stream did not run");
	shares_now(getuid(), 16, getuid(), 16, &h0, &l0);
	pid_t pl = reader_start(&light);
	int status = h_wait(pl, 120000);
	shares_now(getuid(), 16, getuid(), 16, &h1, &l1);
	reader_kill(ph);
	ck_assert_msg(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "light reader: status %d; daemon log:\n%s", status, h_file_text(h.log));
	/* At most about one heavy job per light batch (each light job goes
	 * next; a heavy one runs while the light reader turns around): 4 to
	 * 24 were seen. First come, first served ran the heavy stream's queue
	 * before each light batch: 81 to 84. */
	ck_assert_msg(h1.jobs - h0.jobs <= 50,
		      "%llu heavy jobs ran while the light stream took its 20 batches",
		      (unsigned long long)(h1.jobs - h0.jobs));
}
END_TEST

static Suite *fair_suite(void)
{
	Suite *s = suite_create("fair");
	TCase *tc = tcase_create("fair");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 400);
	tcase_add_test(tc, test_fair_same_user_worker_time);
	if (geteuid() == 0) {
		tcase_add_test(tc, test_fair_two_users_worker_time);
		tcase_add_test(tc, test_fair_light_interleaved_with_heavy);
	}
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(fair_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
