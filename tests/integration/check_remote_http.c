/*
 * check_remote_http.c: datasets on a web server (issue 24). Each test starts
 * its own nginx on a free loopback port with a private config and prefix
 * (never the system's), serving the harness's packed datasets as plain
 * files, and a feedd whose dataset paths are URLs. Checked: batches over
 * HTTP hold exactly the dataset's bytes; the disk tier (cache_dir) keeps
 * the fetched blocks across a daemon restart (nginx's log shows no block
 * read the second time); through tests/remote/fault_proxy.py, a server
 * that answers 503, resets, sends short bodies, changed bytes or nothing
 * in time stops only that dataset's stream, with an error naming the URL
 * and the block, while a local dataset in the same daemon is served; a
 * server that fails every other try is retried to correct batches; one
 * worker keeps several block requests in flight (the proxy sees them at
 * once) with remote_inflight 8, exactly one with 1; s3://
 * requests go path-style to AWS_ENDPOINT_URL signed with SigV4 for the
 * region (nginx logs the headers); --check-config warns of a URL it
 * cannot reach. A server that hangs (issue 28): while a stream's block
 * waits on it, a local dataset streams, status answers within 1 s and
 * WATCHDOG=1 keeps coming; then that stream alone fails naming URL and
 * block. A host that never answers holds up neither start-up nor a
 * reload: its dataset is pending, then left out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include "feedd_harness.h"

#define NGINX "/usr/sbin/nginx"
#define BLOCKED 40  /* samples of the one-record-per-block dataset */

static pid_t nginx_pid, proxy_pid;
static int nginx_port;
static char www[160];   /* nginx's root: h.dir/www, datasets below it */

/* A loopback port nobody listens on now (bound, then released). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static bool port_accepts(void *arg)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*(int *)arg),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

/* Runs path with argv, output to log, killed with the test process. */
static pid_t spawn(const char *path, const char *const *argv, const char *log)
{
	pid_t parent = getpid(), pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* nginx on a free port serving www, its access log one line per request:
 * "METHOD URI RANGE AUTHORIZATION TOKEN". */
static void nginx_start(void)
{
	char conf[4096], path[400], prefix[200], log[400];

	ck_assert_msg(access(NGINX, X_OK) == 0, NGINX " missing: scripts/setup.sh installs nginx");
	snprintf(prefix, sizeof(prefix), "%s/ng", h.dir);
	snprintf(path, sizeof(path), "%s/tmp", prefix);
	mkdir(prefix, 0755);
	mkdir(path, 0755);
	for (int tries = 0; tries < 5; tries++) {
		nginx_port = free_port();
		snprintf(conf, sizeof(conf),
			 "worker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
			 "events { worker_connections 128; }\n"
			 "http {\n"
			 "  log_format feed '$request_method $uri $http_range "
			 "\"$http_authorization\" \"$http_x_amz_security_token\"';\n"
			 "  access_log %s/access.log feed;\n"
			 "  client_body_temp_path %s/tmp; proxy_temp_path %s/tmp;\n"
			 "  fastcgi_temp_path %s/tmp; uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
			 "  server { listen 127.0.0.1:%d; root %s; }\n"
			 "}\n", prefix, prefix, prefix, prefix, prefix, prefix, prefix, prefix,
			 nginx_port, www);
		snprintf(path, sizeof(path), "%s/nginx.conf", prefix);
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fputs(conf, f);
		fclose(f);
		snprintf(log, sizeof(log), "%s/nginx.out", prefix);
		const char *argv[] = {"nginx", "-p", prefix, "-c", path, "-g", "daemon off;", NULL};
		nginx_pid = spawn(NGINX, argv, log);
		if (h_wait_until(port_accepts, &nginx_port, H_DEADLINE_MS))
			return;
		kill(nginx_pid, SIGKILL);  /* the port was taken meanwhile: another */
		waitpid(nginx_pid, NULL, 0);
	}
	ck_abort_msg("nginx did not start:\n%s", h_file_text(log));
}

static void stop(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGTERM);
		if (h_wait(*pid, H_DEADLINE_MS) == -1) {
			kill(*pid, SIGKILL);
			waitpid(*pid, NULL, 0);
		}
	}
	*pid = 0;
}

static const char *access_log(void)
{
	static char p[200];
	snprintf(p, sizeof(p), "%s/ng/access.log", h.dir);
	return p;
}

static void setup(void)
{
	char tiny[200];

	h_setup();
	snprintf(www, sizeof(www), "%s/www", h.dir);
	ck_assert_int_eq(mkdir(www, 0755), 0);
	snprintf(tiny, sizeof(tiny), "%s/tiny", www);
	h_make_dataset(tiny, H_SAMPLES);
	snprintf(tiny, sizeof(tiny), "%s/blocked", www);
	h_make_dataset_blocks(tiny, BLOCKED, 1);  /* one block per record */
	nginx_start();
}

static void teardown(void)
{
	h_stop();
	stop(&proxy_pid);
	stop(&nginx_pid);
	h_teardown();
}

/* "--dataset NAME=http://127.0.0.1:PORT/PATH" in a static buffer (4 kept). */
static const char *url_flag(const char *name, const char *path, int port)
{
	static char buf[8][300];
	static int next;
	char *p = buf[next++ % 8];

	snprintf(p, sizeof(buf[0]), "%s=http://127.0.0.1:%d/%s", name, port, path);
	return p;
}

/* Asserts that b holds the harness's bytes: image i & 0xff, label i. */
static void check_batch(struct feed_batch *b, uint64_t n_samples)
{
	struct feed_view img, lab;
	const uint64_t *idx = feed_batch_samples(b);

	ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
	ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
	for (uint32_t i = 0; i < feed_batch_size(b); i++) {
		int64_t label;
		ck_assert_uint_lt(idx[i], n_samples);
		for (int k = 0; k < 16; k++)
			ck_assert_uint_eq(((const uint8_t *)img.data)[16 * i + k], idx[i] & 0xff);
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		ck_assert_int_eq(label, (int64_t)idx[i]);
	}
}

struct served {
	struct feed_conn *c;
	const char *name;
	int last;
};

static bool served_now(void *arg)
{
	struct served *s = arg;
	struct feed_dataset_list *l = NULL;

	s->last = feed_dataset_info(s->c, s->name, &l);
	feed_dataset_list_free(l);
	return s->last != -EAGAIN;
}

/* Waits while dataset name is pending (a URL opens in the background;
 * a stream opened meanwhile is refused with -EAGAIN): until it is served,
 * or failed to open. */
static void wait_served(const char *name)
{
	struct served s = {.c = h_conn_new(), .name = name};

	ck_assert_msg(h_wait_until(served_now, &s, H_DEADLINE_MS), "%s: still pending", name);
	feed_disconnect(s.c);
}

/* Reads n epochs of dataset name (n_samples, harness content:
 * image bytes i & 0xff, label i) checking every byte and that each epoch
 * holds every sample exactly once. */
static void read_epochs(const char *name, uint64_t n_samples, int epochs)
{
	wait_served(name);
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = name, .batch = 4, .credits = 4,
				     .epochs = (uint64_t)epochs, .order = FEED_ORDER_FULL,
				     .seed = 7};
	struct feed_stream *st = h_stream_open(c, &o);
	unsigned seen[BLOCKED] = {0};
	struct feed_batch *b;
	int r, ends = 0;

	ck_assert_uint_le(n_samples, BLOCKED);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH) {
			for (uint64_t i = 0; i < n_samples; i++)
				ck_assert_uint_eq(seen[i], (unsigned)ends + 1);
			ends++;
			continue;
		}
		ck_assert_msg(r == 0, "feed_next: %d (%s)", r, feed_errmsg(c));
		check_batch(b, n_samples);
		for (uint32_t i = 0; i < feed_batch_size(b); i++)
			seen[feed_batch_samples(b)[i]]++;
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(ends, epochs);
	feed_stream_close(st);
	feed_disconnect(c);
}

/* Lines of nginx's access log holding needle. */
static unsigned log_lines(const char *needle)
{
	const char *t = h_file_text(access_log());
	unsigned n = 0;

	for (const char *p = t; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

START_TEST(test_remote_http_serves_the_datasets_bytes)
{
	const char *args[] = {"--dataset", url_flag("tiny", "tiny", nginx_port), "--dataset",
			      url_flag("blocked", "blocked/", nginx_port), NULL};

	h_start(args);
	read_epochs("tiny", H_SAMPLES, 2);
	read_epochs("blocked", BLOCKED, 2);
	/* every block of "blocked" was a range request to nginx */
	ck_assert_uint_ge(log_lines("GET /blocked/shard-00000.fsh bytes="), BLOCKED);
}
END_TEST

/* GETs of blocked's shard whose range is neither its header (0-63) nor
 * past its last block: block reads. */
static unsigned block_gets(void)
{
	const char *t = h_file_text(access_log());
	unsigned n = 0;
	char shard[300];
	struct stat st;

	snprintf(shard, sizeof(shard), "%s/blocked/shard-00000.fsh", www);
	ck_assert_int_eq(stat(shard, &st), 0);
	uint64_t index_start = (uint64_t)st.st_size - 64 - 40ull * BLOCKED;
	for (const char *p = t; (p = strstr(p, "GET /blocked/shard-00000.fsh bytes=")); p++) {
		unsigned long long a, b;
		if (sscanf(strchr(p, '=') + 1, "%llu-%llu", &a, &b) == 2 && a >= 64 && a < index_start)
			n++;
	}
	return n;
}

/* feedd's /metrics, served on the port its log names. */
static const char *metrics_text(void)
{
	const char *at = strstr(h_file_text(h.log), "metrics: serving http://");
	char url[128], cmd[400];
	static char out[200];

	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(sscanf(at, "metrics: serving %127s", url), 1);
	snprintf(out, sizeof(out), "%s/metrics.txt", h.dir);
	snprintf(cmd, sizeof(cmd), "curl -sf '%s' > %s", url, out);
	ck_assert_int_eq(system(cmd), 0);
	return h_file_text(out);
}

/* The value of metric name (no labels) in feedd's /metrics. */
static unsigned long long metric(const char *name)
{
	char want[128];
	unsigned long long v = 0;

	snprintf(want, sizeof(want), "\n%s ", name);
	const char *p = strstr(metrics_text(), want);
	ck_assert_msg(p, "no %s in /metrics", name);
	ck_assert_int_eq(sscanf(p + strlen(want), "%llu", &v), 1);
	return v;
}

START_TEST(test_remote_disk_tier_keeps_blocks_across_a_restart)
{
	char cfg[1024];

	/* a memory cache too small to hold a block: every read goes below it;
	 * one worker: no two batches fetch the same block at once */
	snprintf(cfg, sizeof(cfg), "metrics: 127.0.0.1:0\nworkers: 1\ncache_bytes: 0\ncache_dir: %s/tier\ncache_dir_bytes: 1M\n"
		 "datasets:\n  - name: blocked\n    path: http://127.0.0.1:%d/blocked\n",
		 h.dir, nginx_port);
	const char *args[] = {"--config", h_write_file("feedd.yaml", cfg), NULL};
	h_start(args);
	read_epochs("blocked", BLOCKED, 2);
	unsigned first = block_gets();
	ck_assert_uint_eq(first, BLOCKED);  /* each block fetched once, then from disk */
	ck_assert_uint_eq(metric("feedd_disk_tier_stored_total"), BLOCKED);
	ck_assert_uint_ge(metric("feedd_disk_tier_hits_total"), BLOCKED);  /* epoch 2 */
	ck_assert_uint_eq(metric("feedd_disk_tier_files"), BLOCKED);
	ck_assert_uint_ge(metric("feedd_remote_requests_total"), BLOCKED + 5);
	ck_assert_uint_eq(metric("feedd_remote_failures_total"), 0);
	ck_assert_int_eq(h_stop(), 0);

	ck_assert_int_eq(truncate(h.log, 0), 0);  /* h_start() waits for a new "ready" */
	h_start(args);
	ck_assert(h_log_has("blocks, "));  /* "cache_dir DIR: 40 blocks, ... kept from before" */
	ck_assert(h_log_has(": 40 blocks"));
	read_epochs("blocked", BLOCKED, 1);
	ck_assert_uint_eq(block_gets(), first);  /* none fetched again */
	ck_assert_uint_eq(metric("feedd_disk_tier_stored_total"), 0);
	ck_assert_uint_ge(metric("feedd_disk_tier_hits_total"), BLOCKED);

	/* a file altered on disk is not served: refetched, and right */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "for f in %s/tier/*.blk; do printf 'X' | dd of=$f bs=1 seek=0 "
		 "conv=notrunc status=none; done", h.dir);
	ck_assert_int_eq(system(cmd), 0);
	read_epochs("blocked", BLOCKED, 1);
	ck_assert_uint_eq(block_gets(), first + BLOCKED);
	ck_assert_uint_eq(metric("feedd_disk_tier_corrupt_total"), BLOCKED);
}
END_TEST

/* Starts tests/remote/fault_proxy.py in front of nginx; its port. */
static int proxy_start(void)
{
	char script[300], portf[200], log[200], upstream[64];
	const char *src = getenv("FEED_SRC");
	int port = 0;

	ck_assert_ptr_nonnull(src);
	snprintf(script, sizeof(script), "%s/tests/remote/fault_proxy.py", src);
	snprintf(portf, sizeof(portf), "%s/proxy.port", h.dir);
	snprintf(log, sizeof(log), "%s/proxy.log", h.dir);
	snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%d", nginx_port);
	const char *argv[] = {"python3", script, upstream, portf, NULL};
	proxy_pid = spawn("/usr/bin/python3", argv, log);
	ck_assert_msg(h_file_has(portf, "\n"), "fault proxy did not start:\n%s", h_file_text(log));
	ck_assert_int_eq(sscanf(h_file_text(portf), "%d", &port), 1);
	ck_assert(h_wait_until(port_accepts, &port, H_DEADLINE_MS));
	return port;
}

/* GET /_WHAT/MODE of the fault proxy on port: its number. */
static int proxy_ask(int port, const char *what, const char *mode)
{
	char cmd[400], out[200];

	snprintf(out, sizeof(out), "%s/proxy.answer", h.dir);
	snprintf(cmd, sizeof(cmd), "curl -sf http://127.0.0.1:%d/_%s/%s > %s", port, what, mode,
		 out);
	ck_assert_int_eq(system(cmd), 0);
	return atoi(h_file_text(out));
}

/* Opens dataset name and asserts that its stream stops with an error
 * naming url and a block, and that no batch it gave was wrong. */
static void expect_failure(const char *name, const char *url)
{
	wait_served(name);
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = name, .batch = 4, .credits = 2, .epochs = 1};
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_batch *b;
	int r;

	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH) {
		if (r == 0) {
			check_batch(b, BLOCKED);
			feed_release(b);
		}
	}
	ck_assert_msg(r != FEED_END_OF_STREAM, "%s: every batch came", name);
	ck_assert_msg(r != -ETIMEDOUT, "%s: no error in time", name);
	ck_assert_msg(strstr(feed_errmsg(c), url) && strstr(feed_errmsg(c), "block "),
		      "%s: %d %s", name, r, feed_errmsg(c));
	feed_stream_close(st);
	feed_disconnect(c);
}

START_TEST(test_remote_faults_stop_that_dataset_only)
{
	static const char *const modes[] = {"503", "reset", "short", "changed", "slow"};
	int port = proxy_start();
	char cfg[4096], url[5][128];
	int n = snprintf(cfg, sizeof(cfg), "remote_timeout_ms: 500\nremote_retries: 2\n"
			 "datasets:\n  - name: tiny\n    path: %s/tiny\n", www);

	for (int i = 0; i < 5; i++) {
		snprintf(url[i], sizeof(url[i]), "http://127.0.0.1:%d/%s/blocked", port, modes[i]);
		n += snprintf(cfg + n, sizeof(cfg) - (size_t)n, "  - name: f%s\n    path: %s\n",
			      modes[i], url[i]);
	}
	const char *args[] = {"--config", h_write_file("feedd.yaml", cfg), NULL};
	h_start(args);
	for (int i = 0; i < 5; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%s", modes[i]);
		expect_failure(name, url[i]);
		read_epochs("tiny", H_SAMPLES, 1);  /* the local dataset is served meanwhile */
	}
	/* each was tried 1 + remote_retries times before the stream heard of it */
	ck_assert(h_log_has("checksum mismatch"));
	ck_assert(h_log_has("after 3 tries"));
}
END_TEST

/* The notify socket feedd is told of (NOTIFY_SOCKET), bound here. */
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

/* Waits for a datagram holding WATCHDOG=1 that arrives after at_ms
 * (h_now_ms()); false at the deadline. */
static bool watchdog_after(int fd, int64_t at_ms)
{
	int64_t end = h_now_ms() + H_DEADLINE_MS;
	char buf[512];

	while (h_now_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) != 1)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
		ck_assert_int_gt(n, 0);
		buf[n] = '\0';
		if (strstr(buf, "WATCHDOG=1") && h_now_ms() > at_ms)
			return true;
	}
	return false;
}

struct slow_seen {
	int port;
};

static bool slow_requested(void *arg)
{
	return proxy_ask(((struct slow_seen *)arg)->port, "count", "slow") >= 1;
}

START_TEST(test_remote_hanging_server_stops_only_its_stream)
{
	int port = proxy_start(), nfd = notify_socket();
	char cfg[1024], url[128];

	/* each block try hangs past remote_timeout_ms: the stream waits about
	 * 2 x 2 s; the watchdog (WatchdogSec 1.5 s) would call that stuck */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow/blocked", port);
	snprintf(cfg, sizeof(cfg), "workers: 2\nremote_timeout_ms: 2000\nremote_retries: 1\n"
		 "datasets:\n  - name: tiny\n    path: %s/tiny\n  - name: hang\n    path: %s\n",
		 www, url);
	setenv("WATCHDOG_USEC", "1500000", 1);
	const char *args[] = {"--config", h_write_file("feedd.yaml", cfg), NULL};
	h_start(args);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");

	wait_served("hang");
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "hang", .batch = 4, .credits = 2, .epochs = 1};
	struct feed_stream *st = h_stream_open(c, &o);
	struct slow_seen seen = {.port = port};
	ck_assert(h_wait_until(slow_requested, &seen, H_DEADLINE_MS));
	int64_t hung_at = h_now_ms();

	read_epochs("tiny", H_SAMPLES, 2);  /* another dataset streams on */
	struct feed_conn *quick = h_conn_new();
	struct feed_status *status = NULL;
	ck_assert_int_eq(feed_conn_set_timeout(quick, 1000), 0);
	ck_assert_int_eq(feed_status(quick, &status), 0);  /* answered within 1 s */
	feed_status_free(status);
	feed_disconnect(quick);
	/* past WatchdogSec of waiting, the pings go on */
	ck_assert_msg(watchdog_after(nfd, hung_at + 2000), "no WATCHDOG=1 while the remote hung");
	close(nfd);  /* unread, its queue would fill and block feedd's sd_notify() */
	ck_assert_msg(!h_log_has("has been in one job"), "log:\n%s", h_file_text(h.log));

	struct feed_batch *b;
	int r;
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0)
		feed_release(b);
	ck_assert_msg(r < 0 && r != -ETIMEDOUT, "hang: %d %s", r, feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), url) && strstr(feed_errmsg(c), ": block "),
		      "hang: %d %s", r, feed_errmsg(c));
	feed_stream_close(st);
	feed_disconnect(c);
	read_epochs("tiny", H_SAMPLES, 1);  /* and after it */
	ck_assert_int_eq(h_stop(), 0);
}
END_TEST

/* A loopback port that accepts connections and never answers. */
static int mute_listener(int *ret_port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 64), 0);  /* the kernel completes connects; nobody reads */
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*ret_port = ntohs(a.sin_port);
	return fd;
}

static bool open_failed(void *arg)
{
	struct served *s = arg;
	struct feed_dataset_list *l = NULL;

	s->last = feed_dataset_info(s->c, s->name, &l);
	feed_dataset_list_free(l);
	return s->last == -ENOENT;
}

/* Start-up and reload never wait on a remote host: a dataset whose host
 * does not answer is pending (a stream on it is refused with -EAGAIN
 * naming it), the daemon serves the others meanwhile, a reload that adds
 * one is applied at once with a warning, and once its tries are spent it
 * is left out, the refusal saying why. */
START_TEST(test_remote_start_and_reload_never_wait_on_a_host)
{
	int port, lfd = mute_listener(&port);
	char cfg[1024];
	/* each try waits 3 s: pending for about 7 s (slow sanitizer builds too) */
	const char *fmt = "metrics: 127.0.0.1:0\nremote_timeout_ms: 3000\nremote_retries: 1\n"
			  "datasets:\n"
			  "  - name: tiny\n    path: %s/tiny\n"
			  "  - name: mute\n    path: http://127.0.0.1:%d/mute\n%s";

	snprintf(cfg, sizeof(cfg), fmt, www, port, "");
	const char *args[] = {"--config", h_write_file("feedd.yaml", cfg), NULL};
	h_start(args);
	ck_assert_msg(h_log_has("ready: 1 of 2 datasets (1 pending)"), "%s", h_file_text(h.log));
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "mute", .batch = 4, .credits = 2, .epochs = 1};
	struct feed_stream *st = NULL;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EAGAIN);
	ck_assert_msg(strstr(feed_errmsg(c), "dataset 'mute'") && strstr(feed_errmsg(c), "pending"),
		      "%s", feed_errmsg(c));
	ck_assert_msg(strstr(metrics_text(), "feedd_dataset_state{dataset=\"mute\",state=\"pending\"} 1"),
		      "%s", metrics_text());
	char out[200];  /* feedctl says so too */
	snprintf(out, sizeof(out), "%s/feedctl.out", h.dir);
	ck_assert_int_ne(h_run_tool("feedctl", (const char *[]){"--socket", h.sock, "datasets",
								 "mute", NULL}, out), 0);
	ck_assert_msg(h_file_has(out, "dataset 'mute'") && strstr(h_file_text(out), "pending"),
		      "%s", h_file_text(out));
	read_epochs("tiny", H_SAMPLES, 1);  /* served meanwhile */
	struct feed_status *fs;  /* status lists it as pending, and only it */
	ck_assert_int_eq(feed_status(c, &fs), 0);
	ck_assert_uint_eq(fs->npending, 1);
	ck_assert_str_eq(fs->pending[0], "mute");
	feed_status_free(fs);

	char more[128];
	snprintf(more, sizeof(more), "  - name: mute2\n    path: http://127.0.0.1:%d/other\n", port);
	snprintf(cfg, sizeof(cfg), fmt, www, port, more);
	h_write_file("feedd.yaml", cfg);
	struct feed_reload_result *res = NULL;
	int r = feed_reload(c, &res);  /* answered before the host would be */
	ck_assert_msg(r == 0 && res->applied, "reload: %d %s", r, feed_errmsg(c));
	bool warned = false;
	for (size_t i = 0; i < res->nwarnings; i++)
		warned = warned || (strstr(res->warnings[i], "'mute2'") &&
				    strstr(res->warnings[i], "pending"));
	ck_assert_msg(warned, "no pending warning for mute2");
	feed_reload_result_free(res);

	struct served s = {.c = c, .name = "mute"};
	ck_assert(h_wait_until(open_failed, &s, H_DEADLINE_MS));  /* its tries spent */
	char want[128];
	snprintf(want, sizeof(want), "http://127.0.0.1:%d/mute/manifest.pb", port);
	ck_assert_msg(strstr(feed_errmsg(c), "failed to open in the background") &&
		      strstr(feed_errmsg(c), want), "%s", feed_errmsg(c));
	ck_assert(strstr(metrics_text(), "feedd_dataset_state{dataset=\"mute\",state=\"failed\"} 1"));
	ck_assert(strstr(metrics_text(), "feedd_dataset_state{dataset=\"tiny\",state=\"ready\"} 1"));
	feed_disconnect(c);
	close(lfd);
}
END_TEST

START_TEST(test_remote_flaky_server_is_retried)
{
	int port = proxy_start();
	char flag[300];

	snprintf(flag, sizeof(flag), "blocked=http://127.0.0.1:%d/flaky/blocked", port);
	const char *args[] = {"--dataset", flag, NULL};
	h_start(args);
	read_epochs("blocked", BLOCKED, 1);
	/* each block failed once, then came */
	ck_assert_int_ge(proxy_ask(port, "count", "flaky"), 2 * BLOCKED);
}
END_TEST

START_TEST(test_remote_worker_keeps_several_requests_in_flight)
{
	int port = proxy_start();
	char cfg[512];

	/* one worker; each block request answered 10 ms late */
	snprintf(cfg, sizeof(cfg), "workers: 1\nremote_inflight: 8\ndatasets:\n"
		 "  - name: blocked\n    path: http://127.0.0.1:%d/delay/blocked\n", port);
	const char *args[] = {"--config", h_write_file("feedd.yaml", cfg), NULL};
	h_start(args);
	read_epochs("blocked", BLOCKED, 1);
	ck_assert_int_ge(proxy_ask(port, "max", "delay"), 3);  /* a batch's blocks together */
	ck_assert_int_eq(h_stop(), 0);

	/* remote_inflight 1: one at a time (the same proxy, another path) */
	snprintf(cfg, sizeof(cfg), "workers: 1\nremote_inflight: 1\ndatasets:\n"
		 "  - name: blocked\n    path: http://127.0.0.1:%d/ok/blocked\n", port);
	h_write_file("feedd.yaml", cfg);
	ck_assert_int_eq(truncate(h.log, 0), 0);
	h_start(args);
	read_epochs("blocked", BLOCKED, 1);
	ck_assert_int_eq(proxy_ask(port, "count", "ok"), BLOCKED);
	ck_assert_int_eq(proxy_ask(port, "max", "ok"), 1);
}
END_TEST

START_TEST(test_remote_s3_path_style_signed_sigv4)
{
	char ep[64];

	/* www is the endpoint's root: bucket "www-bucket" is a folder in it */
	char bucket[600];
	snprintf(bucket, sizeof(bucket), "mkdir -p %s/bkt/pre && cp -r %s/tiny %s/bkt/pre/", www,
		 www, www);
	ck_assert_int_eq(system(bucket), 0);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", nginx_port);
	setenv("AWS_ENDPOINT_URL", ep, 1);
	setenv("AWS_REGION", "eu-west-3", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 1);
	setenv("AWS_SESSION_TOKEN", "tok123", 1);
	const char *args[] = {"--dataset", "tiny=s3://bkt/pre/tiny", NULL};
	h_start(args);
	read_epochs("tiny", H_SAMPLES, 1);
	ck_assert_uint_ge(log_lines("GET /bkt/pre/tiny/shard-00000.fsh bytes="), 1);
	ck_assert_uint_ge(log_lines("\"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), 3);
	ck_assert_uint_ge(log_lines("/eu-west-3/s3/aws4_request"), 3);
	ck_assert_uint_ge(log_lines("\"tok123\""), 3);
	/* the token and the payload hash are signed, as S3 requires */
	ck_assert_uint_ge(log_lines("SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
				    "x-amz-security-token, Signature="), 3);
}
END_TEST

START_TEST(test_remote_check_config_warns_of_an_unreachable_url)
{
	char cfg[512], log[200];
	int dead = free_port();

	snprintf(cfg, sizeof(cfg), "remote_timeout_ms: 500\nremote_retries: 0\ndatasets:\n"
		 "  - name: gone\n    path: http://127.0.0.1:%d/nothing\n"
		 "  - name: here\n    path: http://127.0.0.1:%d/tiny\n", dead, nginx_port);
	snprintf(log, sizeof(log), "%s/check.log", h.dir);
	const char *args[] = {"--check-config", h_write_file("feedd.yaml", cfg), NULL};
	int rc = h_run_tool("feedd", args, log);
	const char *t = h_file_text(log);
	char want[400];
	snprintf(want, sizeof(want), "warning: dataset 'gone' (http://127.0.0.1:%d/nothing)", dead);
	ck_assert_msg(strstr(t, want), "%s", t);
	ck_assert_msg(!strstr(t, "dataset 'here'"), "%s", t);
	ck_assert_int_eq(rc, 0);  /* warnings only */

	/* a cache_dir start-up could not make is an error */
	snprintf(cfg, sizeof(cfg), "cache_dir: %s/feedd.yaml/tier\n", h.dir);
	const char *args2[] = {"--check-config", h_write_file("bad.yaml", cfg), NULL};
	ck_assert_int_eq(h_run_tool("feedd", args2, log), 1);
	snprintf(want, sizeof(want), "cache_dir %s/feedd.yaml/tier: cannot be created (%s/feedd.yaml: "
		 "not a directory)", h.dir, h.dir);
	ck_assert_msg(strstr(h_file_text(log), want), "%s", h_file_text(log));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("remote");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_remote_http_serves_the_datasets_bytes);
	tcase_add_test(tc, test_remote_disk_tier_keeps_blocks_across_a_restart);
	tcase_add_test(tc, test_remote_faults_stop_that_dataset_only);
	tcase_add_test(tc, test_remote_hanging_server_stops_only_its_stream);
	tcase_add_test(tc, test_remote_start_and_reload_never_wait_on_a_host);
	tcase_add_test(tc, test_remote_flaky_server_is_retried);
	tcase_add_test(tc, test_remote_worker_keeps_several_requests_in_flight);
	tcase_add_test(tc, test_remote_s3_path_style_signed_sigv4);
	tcase_add_test(tc, test_remote_check_config_warns_of_an_unreachable_url);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? 1 : 0;
}
