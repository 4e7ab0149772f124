/*
 * check_systemd.c: feedd as a systemd service, against real processes:
 * socket activation through systemd-socket-activate with the daemon
 * restarted under the same listening socket (no client refused), what
 * feedd says on NOTIFY_SOCKET (READY=1, STATUS=, WATCHDOG=1, and no
 * WATCHDOG=1 while a worker is stuck: the FEEDD_TEST_STALL seam of test
 * builds holds a batch job), the journal's priority prefixes, and the
 * signals: ignored ones leave feedd serving, stopping ones leave neither
 * socket nor lock file behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feed_text.h"
#include "feedd_harness.h"

#define SOCKET_ACTIVATE "/usr/bin/systemd-socket-activate"

static const char *fm_arg(void)
{
	static char arg[160];
	snprintf(arg, sizeof(arg), "tiny=%s", h.data);
	return arg;
}

static bool path_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* The pid the running feedd wrote in its lock file, or 0. */
static pid_t lock_pid(void)
{
	char path[160], buf[32] = "";
	snprintf(path, sizeof(path), "%s.lock", h.sock);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return (pid_t)atoi(buf);
}

/* Sends a Hello on fd, not waiting for the reply. */
static void hello_send(int fd)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello hello = FEED__HELLO__INIT;

	hello.client_name = feed_pb_text("systemd-test");
	hello.min_version = 1;
	hello.max_version = 1;
	req.id = 7;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	h_raw_send_request(fd, &req);
}

static void hello_expect(int fd)
{
	Feed__Reply *rep = NULL;

	ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_HELLO);
	ck_assert_uint_eq(rep->id, 7);
	feed__reply__free_unpacked(rep, NULL);
}

static unsigned ready_count;
static bool ready_seen(void *arg)
{
	(void)arg;
	return path_exists(h.log) && h_log_count("ready:") >= ready_count;
}

static bool listening_seen(void *arg)
{
	(void)arg;
	return path_exists(h.log) && h_log_count("Listening on") >= 1;
}

static bool stopped_seen(void *arg)
{
	(void)arg;
	return h_log_count(": stopped") + h_log_count(">stopped") >= 1;
}

/* systemd-socket-activate makes the listening socket (as a .socket unit
 * does) and execs a shell that runs feedd twice on it, the second only
 * once the file "go" exists, each as its own process with LISTEN_PID set
 * to itself: what systemd does on a restart. The first feedd starts on
 * the first connection, which waits for it in the backlog. Clients that connect while
 * no feedd runs, and while the second starts, wait in the backlog: every
 * connect succeeds and every Hello is answered by the second feedd. */
START_TEST(test_systemd_socket_activation_restart)
{
	char script[1024], go[160], lock[160];
	int waiting[6];
	struct stat st;

	if (access(SOCKET_ACTIVATE, X_OK) < 0) {
		fprintf(stderr, "skipped: %s absent (Debian package systemd)\n", SOCKET_ACTIVATE);
		return;
	}
	snprintf(go, sizeof(go), "%s/go", h.dir);
	snprintf(lock, sizeof(lock), "%s.lock", h.sock);
	snprintf(script, sizeof(script),
		 "for i in 1 2; do\n"
		 "  if [ $i = 2 ]; then while [ ! -e %s ]; do sleep 0.01; done; fi\n"
		 "  sh -c 'LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" \"$@\"' "
		 "%s/feedd --socket %s --dataset %s --workers 2\n"
		 "done\n", go, h.bin, h.sock, fm_arg());
	const char *sh = h_write_file("restart.sh", script);
	pid_t act = fork();
	ck_assert_int_ge(act, 0);
	if (act == 0) {
		int fd = open(h.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(SOCKET_ACTIVATE, SOCKET_ACTIVATE, "--seqpacket", "-l", h.sock, "/bin/sh", sh,
		      (char *)NULL);
		_exit(127);
	}
	/* It starts the program on the first connection, as systemd would. */
	ck_assert(h_wait_until(listening_seen, NULL, H_DEADLINE_MS));
	int early = h_raw_connect();
	hello_send(early);
	ready_count = 1;
	ck_assert_msg(h_wait_until(ready_seen, NULL, H_DEADLINE_MS), "log:\n%s",
		      h_file_text(h.log));
	hello_expect(early);
	close(early);
	ck_assert_msg(h_log_has("socket activation: serving fd 3"), "%s", h_file_text(h.log));
	ck_assert(h_log_has("(from systemd: mode"));
	h_assert_healthy();

	pid_t first = lock_pid();
	ck_assert_int_gt(first, 0);
	ck_assert_int_eq(kill(first, SIGTERM), 0);
	ck_assert(h_wait_until(stopped_seen, NULL, H_DEADLINE_MS));
	ck_assert_msg(stat(h.sock, &st) == 0 && S_ISSOCK(st.st_mode),
		      "the socket systemd made was removed");
	ck_assert(!path_exists(lock));
	for (int i = 0; i < 4; i++) {  /* no feedd at all now */
		waiting[i] = h_raw_connect();  /* asserts connect() succeeded */
		hello_send(waiting[i]);
	}
	int fd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	for (int i = 4; i < 6; i++) {  /* the second one starting */
		waiting[i] = h_raw_connect();
		hello_send(waiting[i]);
	}
	for (int i = 0; i < 6; i++) {
		hello_expect(waiting[i]);
		close(waiting[i]);
	}
	ready_count = 2;
	ck_assert(h_wait_until(ready_seen, NULL, H_DEADLINE_MS));
	ck_assert_uint_eq(h_log_count("connection refused"), 0);
	h_assert_healthy();

	pid_t second = lock_pid();
	ck_assert_int_gt(second, 0);
	ck_assert_int_ne(second, first);
	ck_assert_int_eq(kill(second, SIGTERM), 0);
	int status = h_wait(act, H_DEADLINE_MS);
	ck_assert_msg(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "status %d; log:\n%s", status, h_file_text(h.log));
}
END_TEST

/* Reads one datagram from the notify socket into buf; false after
 * timeout_ms with none. */
static bool notify_recv(int fd, char *buf, size_t cap, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (poll(&p, 1, timeout_ms) != 1)
		return false;
	ssize_t n = recv(fd, buf, cap - 1, 0);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	return true;
}

/* Reads datagrams until one holds needle; false at the deadline. */
static bool notify_until(int fd, const char *needle)
{
	char buf[512];
	int64_t end = h_now_ms() + H_DEADLINE_MS;

	while (h_now_ms() < end)
		if (notify_recv(fd, buf, sizeof(buf), 100) && strstr(buf, needle))
			return true;
	return false;
}

static int notify_socket(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify.sock", h.dir);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	return fd;
}

/* READY=1, then STATUS= "serving N datasets, M streams, X samples/s" and
 * WATCHDOG=1 every WatchdogSec/3. A worker held in one job (the stall
 * seam) past WatchdogSec is logged by number and the pings stop while
 * STATUS= goes on; once it moves on, they resume and the stream serves. */
START_TEST(test_systemd_watchdog_stops_on_stuck_worker)
{
	char stall[160], buf[512];

#ifndef FEEDD_TEST_SEAMS
	fprintf(stderr, "skipped: feedd built without FEED_TEST_SEAMS (no way to stall a worker)\n");
	return;
#endif
	snprintf(stall, sizeof(stall), "%s/stall", h.dir);
	int nfd = notify_socket();
	setenv("WATCHDOG_USEC", "1500000", 1);  /* sanitizer builds are slow */
	setenv("FEEDD_TEST_STALL", stall, 1);
	h_start((const char *[]){"--dataset", fm_arg(), "--workers", "1", NULL});
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("FEEDD_TEST_STALL");
	ck_assert(notify_until(nfd, "READY=1"));
	ck_assert(notify_until(nfd, "STATUS=serving 1 datasets, 0 streams, 0 samples/s"));
	ck_assert(notify_until(nfd, "WATCHDOG=1"));

	int fd = open(stall, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	ck_assert_msg(h_log_line_has("watchdog: worker 0 has been in one job", "no more WATCHDOG=1"),
		      "log:\n%s", h_file_text(h.log));
	while (recv(nfd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;  /* sent before the stall was seen */
	for (int i = 0; i < 3; i++) {
		ck_assert(notify_recv(nfd, buf, sizeof(buf), H_DEADLINE_MS));
		ck_assert_msg(strstr(buf, "STATUS=serving 1 datasets"), "%s", buf);
		ck_assert_msg(!strstr(buf, "WATCHDOG=1"), "pinged while stuck: %s", buf);
	}

	ck_assert_int_eq(unlink(stall), 0);
	ck_assert(h_log_has("watchdog: workers make progress again"));
	ck_assert(notify_until(nfd, "WATCHDOG=1"));
	h_tiny_read(st, 4);
	ck_assert(notify_until(nfd, ", 1 streams, "));
	feed_stream_close(st);
	feed_disconnect(c);
	ck_assert_int_eq(h_stop(), 0);
	ck_assert(notify_until(nfd, "STOPPING=1"));
	close(nfd);
}
END_TEST

/* True if every line of text starts with "<N>", N one of 3 4 6 7. */
static bool all_prefixed(const char *text)
{
	for (const char *p = text; *p;) {
		if (p[0] != '<' || !strchr("3467", p[1]) || p[2] != '>')
			return false;
		p = strchr(p, '\n');
		if (!p)
			return false;
		p++;
	}
	return true;
}

/* With JOURNAL_STREAM naming its stderr, every line feedd writes starts
 * with the sd-daemon priority and carries no time or pid of its own. */
START_TEST(test_systemd_journal_prefixes)
{
	char v[64];
	struct stat st;

	int fd = open(h.log, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	close(fd);
	snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", v, 1);
	h_start((const char *[]){"--dataset", fm_arg(), "--dataset", "gone=/nonexistent", NULL});
	unsetenv("JOURNAL_STREAM");
	ck_assert_int_eq(kill(h.pid, SIGUSR1), 0);
	ck_assert(h_log_has("<4>SIGUSR1: no meaning to feedd; ignored"));
	ck_assert(h_log_has("<4>dataset 'gone' (/nonexistent): "));
	ck_assert_int_eq(h_stop(), 0);
	ck_assert(h_log_has("<6>SIGTERM: stopping"));
	const char *text = h_file_text(h.log);
	ck_assert_msg(all_prefixed(text), "log:\n%s", text);
	ck_assert_ptr_null(strstr(text, "feedd["));
	ck_assert_ptr_null(strstr(text, "info: "));
}
END_TEST

/* Elsewhere (stderr a plain file, JOURNAL_STREAM naming something else)
 * the lines keep their time, pid and level word. */
START_TEST(test_systemd_plain_log_elsewhere)
{
	setenv("JOURNAL_STREAM", "8:12345", 1);
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	unsetenv("JOURNAL_STREAM");
	ck_assert_int_eq(h_stop(), 0);
	const char *text = h_file_text(h.log);
	ck_assert_msg(text[0] >= '0' && text[0] <= '9' && text[10] == 'T', "log:\n%s", text);
	ck_assert_ptr_nonnull(strstr(text, " feedd["));
	ck_assert_ptr_nonnull(strstr(text, "]: info: SIGTERM: stopping"));
	ck_assert_ptr_null(strstr(text, "<6>"));
}
END_TEST

/* Signals with no meaning are logged, and feedd goes on serving. */
START_TEST(test_systemd_sigusr1_keeps_serving)
{
	const int sigs[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGRTMIN + 2};
	const char *names[] = {"SIGUSR1", "SIGUSR2", "SIGALRM", "SIGRTMIN+2"};
	char want[64];

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(kill(h.pid, sigs[i]), 0);
		snprintf(want, sizeof(want), "%s: no meaning to feedd; ignored", names[i]);
		ck_assert_msg(h_log_has(want), "log:\n%s", h_file_text(h.log));
		h_assert_healthy();
	}
	ck_assert_int_eq(h_stop(), 0);
}
END_TEST

/* SIGTERM, SIGQUIT (and SIGINT) stop cleanly: exit 0, and neither the
 * socket nor its lock file is left behind. */
static void stop_leaves_nothing(int sig, const char *name)
{
	char lock[160], want[64];

	snprintf(lock, sizeof(lock), "%s.lock", h.sock);
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	ck_assert(path_exists(h.sock) && path_exists(lock));
	pid_t pid = h.pid;
	h.pid = 0;
	ck_assert_int_eq(kill(pid, sig), 0);
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	snprintf(want, sizeof(want), "%s: stopping", name);
	ck_assert(h_log_has(want));
	ck_assert(!path_exists(h.sock));
	ck_assert(!path_exists(lock));
}

START_TEST(test_systemd_sigterm_leaves_no_socket_or_lock)
{
	stop_leaves_nothing(SIGTERM, "SIGTERM");
}
END_TEST

START_TEST(test_systemd_sigquit_leaves_no_socket_or_lock)
{
	stop_leaves_nothing(SIGQUIT, "SIGQUIT");
}
END_TEST

/* A second feedd on the socket is still refused, naming the first's pid
 * (the lock file, now removed at stop, is made again by each start). */
START_TEST(test_systemd_lock_still_refuses_second)
{
	char out[160], want[64];

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	snprintf(out, sizeof(out), "%s/second.log", h.dir);
	pid_t pid = h_spawn("feedd", (const char *[]){"--socket", h.sock, NULL}, out);
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	snprintf(want, sizeof(want), "another feedd (pid %d) is serving", (int)h.pid);
	ck_assert_msg(h_file_has(out, want), "%s", h_file_text(out));
	h_assert_healthy();
}
END_TEST

/* Runs feedd with args to completion, its output in a fresh file under
 * h.dir (path in out_path); returns its exit code. */
static int run_feedd(const char *const *args, char *out_path, size_t cap)
{
	static int n;
	snprintf(out_path, cap, "%s/check.%d", h.dir, n++);
	int status = h_wait(h_spawn("feedd", args, out_path), H_DEADLINE_MS);
	ck_assert(status != -1);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --check-config reports every error, not the first: names that do not
 * resolve (each with file:line and key), a socket directory that cannot
 * be made, a socket_group the user (--user) can neither join nor chown
 * to; a dataset that does not open is a warning, as at start-up, and
 * --strict makes it an error. */
START_TEST(test_systemd_check_config_reports_every_error)
{
	char out[160], text[512];
	const char *cfg = h_write_file("names.yaml",
		"datasets:\n  - name: a\n    path: fm\n"
		"    allow_users: [nobody-x, root, nobody-y]\n"
		"    allow_groups: [group-z]\n");

	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, NULL}, out,
				   sizeof(out)), 1);
	const char *got = h_file_text(out);
	snprintf(text, sizeof(text), "%s:4: datasets[0].allow_users[0]: no user named 'nobody-x'",
		 cfg);
	ck_assert_msg(strstr(got, text), "%s", got);
	ck_assert_ptr_nonnull(strstr(got, ":4: datasets[0].allow_users[2]: no user named "
				      "'nobody-y'"));
	ck_assert_ptr_nonnull(strstr(got, ":5: datasets[0].allow_groups[0]: no group named "
				      "'group-z'"));
	ck_assert_ptr_nonnull(strstr(got, ": 3 errors; start-up would refuse it"));

	/* errors of other keys too, each once, not just the first */
	cfg = h_write_file("keys.yaml", "workers: 0\ncache_bytes: 12Q\n"
			   "datasets:\n  - name: a\n    path: fm\n    allow_users: [nobody-x]\n");
	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, NULL}, out,
				   sizeof(out)), 1);
	got = h_file_text(out);
	ck_assert_msg(strstr(got, ":1: workers: 0 out of range 1..256"), "%s", got);
	ck_assert_msg(strstr(got, ":2: cache_bytes: '12Q' is not a byte count"), "%s", got);
	const char *user = strstr(got, "allow_users[0]: no user named 'nobody-x'");
	ck_assert_msg(user && !strstr(user + 1, "allow_users[0]"), "%s", got);
	ck_assert_msg(strstr(got, ": 3 errors; start-up would refuse it"), "%s", got);

	snprintf(text, sizeof(text), "socket: %s/none/sub/feedd.sock\nsocket_group: users\n"
		 "datasets:\n  - name: gone\n    path: nonexistent\n", h.dir);
	cfg = h_write_file("sock.yaml", text);
	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, "--user", "nobody",
						    NULL}, out, sizeof(out)), 1);
	got = h_file_text(out);
	snprintf(text, sizeof(text), "socket directory %s/none/sub: cannot be made: %s/none: No "
		 "such file or directory", h.dir, h.dir);
	ck_assert_msg(strstr(got, text), "%s", got);
	ck_assert_msg(strstr(got, "socket_group 100 (users): uid 65534 (nobody) is not a member "
			     "and lacks CAP_CHOWN"), "%s", got);
	ck_assert_ptr_nonnull(strstr(got, "warning: dataset 'gone' ("));
	ck_assert_ptr_nonnull(strstr(got, ": 2 errors, 1 warning; start-up would refuse it"));

	snprintf(text, sizeof(text), "socket: %s/sub/feedd.sock\n"
		 "datasets:\n  - name: gone\n    path: nonexistent\n", h.dir);
	cfg = h_write_file("warn.yaml", text);
	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, NULL}, out,
				   sizeof(out)), 0);
	ck_assert(h_file_has(out, ": ok (socket "));
	ck_assert(h_file_has(out, "1 warning, checked as uid "));
	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, "--strict", NULL}, out,
				   sizeof(out)), 1);
	ck_assert(h_file_has(out, "0 errors, 1 warning; refused: --strict"));
	ck_assert_int_eq(run_feedd((const char *[]){"--strict", NULL}, out, sizeof(out)), 2);
	ck_assert(h_file_has(out, "--strict: only with --check-config"));
}
END_TEST

/* systemctl reload runs feedctl reload (deploy/feedd.service's
 * ExecReload=): feedd says RELOADING=1 with MONOTONIC_USEC= as a reload
 * starts and READY=1 as it ends, and feedctl exits 0 when the config was
 * applied, 1 when feedd refused it (the unit's reload then fails). */
START_TEST(test_systemd_reload_notifies_and_fails_when_refused)
{
	char text[256], out[160], buf[512];
	const char *cfg;

	snprintf(text, sizeof(text), "datasets:\n  - name: tiny\n    path: %s\n", h.data);
	cfg = h_write_file("reload.yaml", text);
	int nfd = notify_socket();
	h_start((const char *[]){"--config", cfg, NULL});
	unsetenv("NOTIFY_SOCKET");
	ck_assert(notify_until(nfd, "READY=1"));

	snprintf(out, sizeof(out), "%s/reload.out", h.dir);
	const char *args[] = {"--socket", h.sock, "reload", NULL};
	ck_assert_int_eq(h_run_tool("feedctl", args, out), 0);
	ck_assert_msg(h_file_has(out, "reloaded "), "%s", h_file_text(out));
	ck_assert(notify_until(nfd, "RELOADING=1\nMONOTONIC_USEC="));
	ck_assert(notify_until(nfd, "READY=1"));

	/* metrics needs a restart: applied without it, and said so */
	snprintf(text, sizeof(text), "metrics: 127.0.0.1:0\n"
		 "datasets:\n  - name: tiny\n    path: %s\n", h.data);
	h_write_file("reload.yaml", text);
	ck_assert_int_eq(h_run_tool("feedctl", args, out), 0);
	ck_assert_msg(h_file_has(out, "warning: metrics: 127.0.0.1:0 in the file, still off until "
				      "a restart"), "%s", h_file_text(out));

	/* READY=1 goes before the reply: nothing of these reloads is left after it */
	while (recv(nfd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	h_write_file("reload.yaml", "workers: 2\nno_such_key: 1\n");
	ck_assert_int_eq(h_run_tool("feedctl", args, out), 1);
	ck_assert_msg(h_file_has(out, "refused"), "%s", h_file_text(out));
	ck_assert_msg(h_file_has(out, "no_such_key: unknown key"), "%s", h_file_text(out));
	bool reloading = false, ready = false;
	while (!(reloading && ready) && notify_recv(nfd, buf, sizeof(buf), H_DEADLINE_MS)) {
		reloading |= strstr(buf, "RELOADING=1") != NULL;
		ready |= reloading && !strncmp(buf, "READY=1", 7);
	}
	ck_assert_msg(reloading && ready, "no RELOADING=1 then READY=1 around a refused reload");
	h_assert_healthy();
	ck_assert_int_eq(h_stop(), 0);
	close(nfd);
}
END_TEST

/* --check-config goes on past an unknown key: every one is named with
 * its line and path, and the other keys' errors are reported too. */
START_TEST(test_systemd_check_config_lists_every_unknown_key)
{
	char out[160];
	const char *cfg = h_write_file("unknown.yaml",
		"workers: 0\nbogus: 1\nlimits:\n  max_streams: 4\n  nope: [1]\n"
		"datasets:\n  - name: a\n    path: fm\n    extra: {x: 1}\n"
		"    allow_users: [nobody-x]\nlast: 2\n");

	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, NULL}, out,
				   sizeof(out)), 1);
	const char *got = h_file_text(out);
	ck_assert_msg(strstr(got, ":2: bogus: unknown key"), "%s", got);
	ck_assert_msg(strstr(got, ":5: limits.nope: unknown key"), "%s", got);
	ck_assert_msg(strstr(got, ":9: datasets[0].extra: unknown key"), "%s", got);
	ck_assert_msg(strstr(got, ":11: last: unknown key"), "%s", got);
	ck_assert_msg(strstr(got, ":1: workers: 0 out of range"), "%s", got);
	ck_assert_msg(strstr(got, ":10: datasets[0].allow_users[0]: no user named 'nobody-x'"),
		      "%s", got);
	ck_assert_msg(strstr(got, ": 6 errors; start-up would refuse it"), "%s", got);

	/* a start still stops at the first */
	ck_assert_int_eq(run_feedd((const char *[]){"--config", cfg, NULL}, out, sizeof(out)), 1);
	ck_assert_msg(h_file_has(out, "unknown key"), "%s", h_file_text(out));
}
END_TEST

/* --check-config --unit: the unit's User= is who is checked, its sandbox
 * decides what feedd may write (an error naming the key), and under its
 * socket unit socket_group only warns, as a socket-activated start does. */
START_TEST(test_systemd_check_config_knows_the_unit)
{
	char out[160], text[512], unit[160];

	snprintf(text, sizeof(text), "[Service]\nUser=nobody\nProtectSystem=strict\n"
		 "PrivateTmp=no\nReadWritePaths=-%s/rw\nCacheDirectory=feedd-test\n"
		 "IPAddressDeny=any\nIPAddressAllow=localhost\n", h.dir);
	snprintf(unit, sizeof(unit), "%s", h_write_file("feedd.service", text));
	snprintf(text, sizeof(text), "socket: %s/rw/feedd.sock\ncache_dir: %s/cache\n"
		 "metrics: 0.0.0.0:9464\n", h.dir, h.dir);
	const char *cfg = h_write_file("unit.yaml", text);
	char rw[160];
	snprintf(rw, sizeof(rw), "%s/rw", h.dir);
	ck_assert_int_eq(mkdir(rw, 0755), 0);
	ck_assert_int_eq(chmod(rw, 0777), 0);  /* nobody may make the socket there */
	ck_assert_int_eq(run_feedd((const char *[]){"--check-config", cfg, "--unit", unit, NULL},
				   out, sizeof(out)), 1);
	const char *got = h_file_text(out);
	snprintf(text, sizeof(text), "cache_dir %s/cache: read-only under %s (ProtectSystem=strict)",
		 h.dir, unit);
	ck_assert_msg(strstr(got, text), "%s", got);
	ck_assert_msg(strstr(got, "warning: metrics 0.0.0.0:9464: "), "%s", got);
	ck_assert_msg(!strstr(got, "socket directory"), "%s", got);
	ck_assert_msg(strstr(got, ": 1 error, 1 warning;"), "%s", got);

	/* under the cache directory the unit makes, and with its socket unit */
	char cfg2[160];  /* h_write_file()'s result lasts until its next call */
	snprintf(text, sizeof(text), "socket: /run/feedd/feedd.sock\nsocket_group: users\n"
		 "cache_dir: /var/cache/feedd-test\n");
	snprintf(cfg2, sizeof(cfg2), "%s", h_write_file("unit2.yaml", text));
	cfg = cfg2;
	h_write_file("feedd.socket", "[Socket]\nListenSequentialPacket=/run/feedd/feedd.sock\n"
		     "SocketGroup=root\n");
	snprintf(text, sizeof(text), "[Service]\nUser=nobody\nProtectSystem=strict\n"
		 "ReadWritePaths=-/run/feedd\nCacheDirectory=feedd-test\n");
	h_write_file("feedd.service", text);
	int rc = run_feedd((const char *[]){"--check-config", cfg, "--unit", unit, NULL}, out,
			   sizeof(out));
	got = h_file_text(out);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, got);
	ck_assert_msg(strstr(got, "warning: socket_group 100 (users): under "), "%s", got);
	ck_assert_msg(strstr(got, "SocketGroup=root decides"), "%s", got);
	ck_assert_msg(!strstr(got, "CAP_CHOWN"), "%s", got);
	ck_assert_msg(strstr(got, "checked as uid 65534 (nobody) under "), "%s", got);
	ck_assert_msg(strstr(got, " with its socket unit)"), "%s", got);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("systemd");
	TCase *tc = tcase_create("systemd");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_systemd_socket_activation_restart);
	tcase_add_test(tc, test_systemd_watchdog_stops_on_stuck_worker);
	tcase_add_test(tc, test_systemd_journal_prefixes);
	tcase_add_test(tc, test_systemd_plain_log_elsewhere);
	tcase_add_test(tc, test_systemd_sigusr1_keeps_serving);
	tcase_add_test(tc, test_systemd_sigterm_leaves_no_socket_or_lock);
	tcase_add_test(tc, test_systemd_sigquit_leaves_no_socket_or_lock);
	tcase_add_test(tc, test_systemd_lock_still_refuses_second);
	tcase_add_test(tc, test_systemd_check_config_reports_every_error);
	tcase_add_test(tc, test_systemd_reload_notifies_and_fails_when_refused);
	tcase_add_test(tc, test_systemd_check_config_lists_every_unknown_key);
	tcase_add_test(tc, test_systemd_check_config_knows_the_unit);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
