/*
 * feedd_harness.c: temporary directory, dataset, daemon process and raw
 * socket helpers for the integration tests (see feedd_harness.h). Runs in
 * the forked Check test process; every wait polls a condition against a
 * deadline.
 */
#include "feedd_harness.h"

#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feed_text.h"
#include "fmt.h"

struct h_env h;

int64_t h_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void h_nap(void)
{
	struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

void h_make_dataset(const char *dir, uint64_t n)
{
	h_make_dataset_blocks(dir, n, 0);
}

void h_make_dataset_blocks(const char *dir, uint64_t n, uint32_t block_records)
{
	struct fmt_schema s = {.nfields = 2};
	struct fmt_writer *w;
	struct feed_err err = {0};
	uint8_t image[16];
	int64_t label;

	s.fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 2,
					 .shape = {4, 4}};
	s.fields[1] = (struct fmt_field){.name = "label", .dtype = FEED_DTYPE_I64};
	ck_assert_msg(fmt_writer_new(dir, &s,
				     &(struct fmt_writer_opts){.name = "tiny",
							       .block_records = block_records},
				     &w, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < n; i++) {
		memset(image, (int)i, sizeof(image));
		label = (int64_t)i;
		struct fmt_value v[2] = {{image, sizeof(image)}, {&label, sizeof(label)}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

void h_make_kinds_dataset(const char *dir)
{
	struct fmt_schema s = {.nfields = 4};
	struct fmt_writer *w;
	struct feed_err err = {0};

	s.fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 3,
					 .shape = {4, 4, 3}};
	s.fields[1] = (struct fmt_field){.name = "tokens", .dtype = FEED_DTYPE_U16, .rank = 1,
					 .shape = {5}};
	s.fields[2] = (struct fmt_field){.name = "label", .dtype = FEED_DTYPE_I64};
	s.fields[3] = (struct fmt_field){.name = "note", .dtype = FEED_DTYPE_U8, .variable = true};
	ck_assert_msg(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.name = "kinds"}, &w,
				     &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < H_SAMPLES; i++) {
		uint8_t image[4 * 4 * 3], note[H_SAMPLES + 1];
		uint16_t tokens[5];
		int64_t label = (int64_t)i * 11;
		for (size_t k = 0; k < sizeof(image); k++)
			image[k] = (uint8_t)(i * 37 + k * 5);
		for (int k = 0; k < 5; k++)
			tokens[k] = (uint16_t)(60000 + i * 100 + (uint64_t)k);
		memset(note, 'a' + (int)i, sizeof(note));
		struct fmt_value v[4] = {{image, sizeof(image)}, {tokens, sizeof(tokens)},
					 {&label, sizeof(label)}, {note, i + 1}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

void h_setup(void)
{
	const char *bin = getenv("FEED_BIN");

	ck_assert_msg(bin && *bin, "FEED_BIN is not set (ctest sets it)");
	memset(&h, 0, sizeof(h));
	snprintf(h.bin, sizeof(h.bin), "%s", bin);
	strcpy(h.dir, "/tmp/feedd_it.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(h.dir));
	ck_assert_int_eq(chmod(h.dir, 0755), 0);  /* reachable by a child as nobody */
	snprintf(h.sock, sizeof(h.sock), "%s/feedd.sock", h.dir);
	snprintf(h.log, sizeof(h.log), "%s/feedd.log", h.dir);
	snprintf(h.data, sizeof(h.data), "%s/fm", h.dir);
	unsetenv("FEEDD_SOCKET");
	h_make_dataset(h.data, H_SAMPLES);
}

void h_teardown(void)
{
	char cmd[128];

	if (h.pid) {
		int code = h_stop();
		if (code != 0) {
			/* on stderr: a sanitizer's report is longer than a Check
			 * message may be (Check would exit with "Message string
			 * too long" instead) */
			fputs(h_file_text(h.log), stderr);
			ck_abort_msg("feedd exited with %d; its log is on stderr", code);
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", h.dir);
	ck_assert_int_eq(system(cmd), 0);
}

const char *h_write_file(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", h.dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

const char *h_file_text(const char *file)
{
	static char buf[1 << 16];
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

bool h_wait_until(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
	int64_t end = h_now_ms() + timeout_ms;

	for (;;) {
		if (cond(arg))
			return true;
		if (h_now_ms() >= end)
			return false;
		h_nap();
	}
}

struct h_needles {
	const char *file;
	const char *first, *then;    /* then: NULL for a needle anywhere */
};

static bool h_needles_found(void *arg)
{
	const struct h_needles *n = arg;
	const char *text = h_file_text(n->file);

	if (!n->then)
		return strstr(text, n->first) != NULL;
	for (const char *p = text; (p = strstr(p, n->first)); p++) {
		const char *eol = strchr(p, '\n'), *t = strstr(p, n->then);
		if (t && (!eol || t < eol))
			return true;
	}
	return false;
}

bool h_file_has(const char *file, const char *needle)
{
	struct h_needles n = {file, needle, NULL};

	return h_wait_until(h_needles_found, &n, H_DEADLINE_MS);
}

bool h_log_line_has(const char *first, const char *then)
{
	struct h_needles n = {h.log, first, then};

	return h_wait_until(h_needles_found, &n, H_DEADLINE_MS);
}

bool h_log_has(const char *needle)
{
	return h_file_has(h.log, needle);
}

unsigned h_log_count(const char *needle)
{
	FILE *f = fopen(h.log, "re");
	char *line = NULL;
	size_t cap = 0;
	unsigned n = 0;

	ck_assert_ptr_nonnull(f);
	while (getline(&line, &cap, f) >= 0)
		if (strstr(line, needle))
			n++;
	free(line);
	fclose(f);
	return n;
}

pid_t h_spawn(const char *prog, const char *const *args, const char *log)
{
	char path[300];
	const char *argv[32] = {prog};
	size_t n = 1;
	pid_t parent = getpid();

	snprintf(path, sizeof(path), "%s/%s", h.bin, prog);
	while (args && args[n - 1] && n < 31) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);  /* never outlive a failed test */
		if (getppid() != parent)
			_exit(126);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int h_wait(pid_t pid, int timeout_ms)
{
	int64_t end = h_now_ms() + timeout_ms;
	int status;

	do {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		ck_assert_int_eq(r, 0);
		h_nap();
	} while (h_now_ms() < end);
	return -1;
}

void h_start(const char *const *args)
{
	const char *argv[32] = {"--socket", h.sock};
	size_t n = 2;
	int64_t end = h_now_ms() + H_DEADLINE_MS;
	int status;

	while (args && *args && n < 31)
		argv[n++] = *args++;
	argv[n] = NULL;
	h.pid = h_spawn("feedd", argv, h.log);
	while (!strstr(h_file_text(h.log), "ready:")) {
		pid_t r = waitpid(h.pid, &status, WNOHANG);
		if (r == h.pid) {
			h.pid = 0;
			ck_abort_msg("feedd exited at start (status %d):\n%s", status,
				     h_file_text(h.log));
		}
		ck_assert_msg(h_now_ms() < end, "feedd not ready in time:\n%s", h_file_text(h.log));
		h_nap();
	}
}

int h_stop(void)
{
	pid_t pid = h.pid;

	h.pid = 0;
	if (!pid || kill(pid, SIGTERM) < 0)
		return -1;
	int status = h_wait(pid, H_DEADLINE_MS);
	if (status == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int h_raw_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h.sock);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %s: %s",
		      h.sock, strerror(errno));
	return fd;
}

void h_raw_send(int fd, const void *buf, size_t len)
{
	ck_assert_int_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

void h_raw_send_request(int fd, Feed__Request *req)
{
	uint8_t buf[4096];
	size_t len = feed__request__get_packed_size(req);

	ck_assert_uint_le(len, sizeof(buf));
	feed__request__pack(req, buf);
	h_raw_send(fd, buf, len);
}

int h_raw_recv(int fd, int timeout_ms, Feed__Reply **ret)
{
	static uint8_t buf[256 * 1024];
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (poll(&p, 1, timeout_ms) == 0)
		return -ETIMEDOUT;
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	if (n == 0 || (n < 0 && errno == ECONNRESET))
		return 0;
	ck_assert_int_gt(n, 0);
	*ret = feed__reply__unpack(NULL, (size_t)n, buf);
	ck_assert_ptr_nonnull(*ret);
	return 1;
}

int h_raw_recv_fds(int fd, int timeout_ms, Feed__Reply **ret, int *fds, unsigned cap,
		   unsigned *ret_nfds)
{
	static uint8_t buf[256 * 1024];
	union {
		char buf[CMSG_SPACE(16 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
			    .msg_controllen = sizeof(cbuf.buf)};
	struct pollfd p = {.fd = fd, .events = POLLIN};
	unsigned n = 0;

	*ret_nfds = 0;
	if (poll(&p, 1, timeout_ms) == 0)
		return -ETIMEDOUT;
	ssize_t len = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (len == 0 || (len < 0 && errno == ECONNRESET))
		return 0;
	ck_assert_msg(len > 0, "recvmsg: %s", strerror(errno));
	ck_assert_msg(!(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)), "truncated packet or descriptors");
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		ck_assert_uint_le(n + k, cap);
		memcpy(fds + n, CMSG_DATA(cm), k * sizeof(int));
		n += (unsigned)k;
	}
	*ret = feed__reply__unpack(NULL, (size_t)len, buf);
	ck_assert_ptr_nonnull(*ret);
	*ret_nfds = n;
	return 1;
}

void h_expect_error(int fd, uint32_t id, int code, const char *needle)
{
	Feed__Reply *rep = NULL;

	ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_ERROR);
	ck_assert_uint_eq(rep->id, id);
	ck_assert_int_eq(rep->error->code, code);
	ck_assert_msg(strstr(rep->error->message, needle), "error '%s' lacks '%s'",
		      rep->error->message, needle);
	feed__reply__free_unpacked(rep, NULL);
}

void h_expect_eof(int fd)
{
	Feed__Reply *rep = NULL;
	int r = h_raw_recv(fd, H_DEADLINE_MS, &rep);

	if (rep)
		feed__reply__free_unpacked(rep, NULL);
	ck_assert_msg(r == 0, "expected the daemon to close the connection (got %d)", r);
}

void h_raw_hello(int fd)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello hello = FEED__HELLO__INIT;
	Feed__Reply *rep = NULL;

	hello.client_name = feed_pb_text("raw-test");
	hello.min_version = 1;
	hello.max_version = 1;
	req.id = 1;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &hello;
	h_raw_send_request(fd, &req);
	ck_assert_int_eq(h_raw_recv(fd, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_HELLO);
	ck_assert_uint_eq(rep->id, 1);
	ck_assert_uint_eq(rep->hello->version, 1);
	feed__reply__free_unpacked(rep, NULL);
}

void h_assert_healthy(void)
{
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	int r = feed_connect(h.sock, &conn);
	ck_assert_msg(r == 0, "connect: %s", feed_strerror(r));
	r = feed_list_datasets(conn, &list);
	ck_assert_msg(r == 0, "list: %s: %s", feed_strerror(r), feed_errmsg(conn));
	ck_assert_uint_ge(list->count, 1);
	ck_assert_uint_eq(list->datasets[0].num_samples, H_SAMPLES);
	feed_dataset_list_free(list);
	feed_disconnect(conn);
}

int h_run_tool(const char *prog, const char *const *args, const char *log)
{
	const char *bin = getenv("FEED_BIN");
	const char *argv[32] = {prog};
	char path[300];
	size_t n = 1;
	int status;

	if (!bin || !*bin)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", bin, prog);
	while (args && args[n - 1] && n < 31) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char fashion_root[64]; /* made by h_fashion_pack(): fashion/, pack.log */

int h_fashion_pack(const char *split, char *ret_dir, size_t cap)
{
	char images[256], labels[256], log[128];

	snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", H_FASHION_DIR, split);
	snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", H_FASHION_DIR, split);
	strcpy(fashion_root, "/tmp/feedd_fm.XXXXXX");
	if (!mkdtemp(fashion_root) || chmod(fashion_root, 0755) < 0) {
		fprintf(stderr, "cannot make a directory for Fashion-MNIST: %s\n", strerror(errno));
		fashion_root[0] = 0;
		return -1;
	}
	if ((size_t)snprintf(ret_dir, cap, "%s/fashion", fashion_root) >= cap)
		return -1;
	snprintf(log, sizeof(log), "%s/pack.log", fashion_root);
	if (h_run_tool("feedpack", (const char *[]){"idx", images, labels, "-o", ret_dir, NULL},
		       log) != 0) {
		fprintf(stderr, "feedpack idx %s failed:\n%s", split, h_file_text(log));
		return -1;
	}
	return 0;
}

int h_fashion_remove(void)
{
	char cmd[96];

	if (!fashion_root[0])
		return 0;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fashion_root);
	fashion_root[0] = 0;
	return system(cmd) == 0 ? 0 : -1;
}

struct feed_conn *h_conn_new(void)
{
	struct feed_conn *c;
	int r = feed_connect(h.sock, &c);

	ck_assert_msg(r == 0, "connect: %s", feed_strerror(r));
	return c;
}

struct feed_stream *h_stream_open(struct feed_conn *c, const struct feed_stream_opts *o)
{
	struct feed_stream *st;
	int r = feed_stream_open(c, o, &st);

	ck_assert_msg(r == 0, "open: %s: %s", feed_strerror(r), feed_errmsg(c));
	return st;
}

struct feed_stream *h_tiny_open(struct feed_conn *c, uint32_t batch, uint32_t credits)
{
	struct feed_stream_opts o = {.dataset = "tiny", .batch = batch, .credits = credits};

	return h_stream_open(c, &o);
}

struct feed_batch *h_next_batch(struct feed_stream *st)
{
	struct feed_batch *b;
	int r;
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == FEED_END_OF_EPOCH)
		;
	ck_assert_msg(r == 0, "feed_next: %d", r);
	return b;
}

void h_tiny_check(struct feed_batch *b)
{
	struct feed_view img, lab;
	const uint64_t *idx = feed_batch_samples(b);

	ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
	ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
	ck_assert_uint_eq(img.bytes, 16ull * feed_batch_size(b));
	ck_assert_uint_eq(lab.bytes, 8ull * feed_batch_size(b));
	for (uint32_t i = 0; i < feed_batch_size(b); i++) {
		const uint8_t *px = (const uint8_t *)img.data + 16 * i;
		int64_t label;
		ck_assert_uint_lt(idx[i], H_SAMPLES);
		for (int k = 0; k < 16; k++)
			ck_assert_uint_eq(px[k], idx[i]);
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		ck_assert_int_eq(label, (int64_t)idx[i]);
	}
}

void h_tiny_read(struct feed_stream *st, int n)
{
	struct feed_batch *b;

	while (n > 0) {
		int r = feed_next(st, H_DEADLINE_MS, &b);
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "feed_next: %s", feed_strerror(r));
		h_tiny_check(b);
		ck_assert_int_eq(feed_release(b), 0);
		n--;
	}
}

void h_nap_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

int h_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

/* Every thread of the pid in *arg is stopped (state T or t in its stat). */
static bool h_all_stopped(void *arg)
{
	pid_t pid = *(pid_t *)arg;
	char path[64], line[512];
	struct dirent *e;
	bool all = true;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	while (all && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue; /* a thread that just ended */
		const char *st = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		all = st && (st[2] == 'T' || st[2] == 't');
		fclose(f);
	}
	closedir(d);
	return all;
}

void h_stop_process(pid_t pid)
{
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	ck_assert_msg(h_wait_until(h_all_stopped, &pid, H_DEADLINE_MS),
		      "pid %d did not stop within %d ms of SIGSTOP", (int)pid, H_DEADLINE_MS);
}

int h_proc_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int h_proc_maps_count(pid_t pid, const char *needle)
{
	char path[64], line[512];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

long h_proc_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut, st;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* the command name may hold spaces: fields start after its ')' */
	const char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return -1;
	return (long)(ut + st);
}
