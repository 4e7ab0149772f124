/*
 * check_fault.c: feedd under injected faults, with tests/fault/fault_shim.c
 * preloaded (fault_ctl.h is the control page both map; README.md here).
 *
 * Allocations: for each kind of request (fault_shim.c lists the kinds:
 * accept, packet, hello, ..., open_stream and its completion, a reload's
 * load on its worker), the 1st, 2nd, ... allocation its handling makes
 * fails in turn, one request each, until a request makes fewer
 * allocations than that. Each time the requester gets an error reply
 * saying memory ran out (and its connection serves the next request), or
 * its connection is closed with a log line naming the memory, or a
 * correct answer (an allocation the daemon can do without). A stream
 * opened before by another client keeps receiving correct batches
 * throughout, and a status request is served after each. At the end a
 * fresh client is served and feedd exits 0 on SIGTERM: in the ASan build
 * LeakSanitizer runs at its exit and a leak makes it exit 23.
 *
 * Shard reads: every pread on the datasets' files cut to half (the reader
 * must loop); pread failing with EIO on one dataset's shard while another
 * dataset is streamed: the stream reading it stops with an error naming
 * the shard and block, the other goes on, and once the fault is gone a
 * new stream on that dataset is served; EIO on a shard's header or index
 * while feedd opens it: the dataset is left out, named, until a reload.
 *
 * Shared memory: fallocate failing with ENOSPC on a stream's data or
 * control region (/dev/shm full): its open is refused naming the region,
 * everyone else is served.
 *
 * Needs feedd built with FEED_TEST_SEAMS (skipped, 77, without).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_ctl.h"
#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define FT_MAX_N 4000  /* more allocations than any one request makes */

static struct fault_ctl *fc;  /* the control page, shared with feedd's shim */
static char other[160];       /* h.dir/other: a second dataset, 4 blocks */

/* Creates the control page in h.dir and maps it. */
static void ft_ctl_make(void)
{
	char path[200];

	snprintf(path, sizeof(path), "%s/fault.ctl", h.dir);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, sizeof(*fc)), 0);
	fc = mmap(NULL, sizeof(*fc), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(fc, MAP_FAILED);
	close(fd);
	fc->magic = FAULT_CTL_MAGIC;
	ck_assert_int_eq(setenv("FEED_FAULT_CTL", path, 1), 0);
}

/* Starts feedd with the shim preloaded, serving "tiny" (h.data) and
 * "other" from a config file (a reload reads it again). A sanitizer's
 * runtime insists on coming first in the process; the shim must come
 * before it to see every allocation, and forwards each to it. */
static void ft_start(void)
{
	static char asan[512];
	const char *shim = getenv("FEED_FAULT_SHIM"), *old = getenv("ASAN_OPTIONS");
	const char *conf = h_write_file("feedd.yaml", "workers: 2\n"
					"limits:\n  max_connections: 1000\n"  /* FT_HELD */
					"datasets:\n"
					"  - name: tiny\n    path: fm\n"
					"  - name: other\n    path: other\n");

	ck_assert_msg(shim && *shim, "FEED_FAULT_SHIM is not set (ctest sets it)");
	snprintf(asan, sizeof(asan), "%s%sverify_asan_link_order=0", old ? old : "",
		 old && *old ? ":" : "");
	ck_assert_int_eq(setenv("ASAN_OPTIONS", asan, 1), 0);
	ck_assert_int_eq(setenv("LD_PRELOAD", shim, 1), 0);
	h_start((const char *[]){"--config", conf, NULL});
	unsetenv("LD_PRELOAD");  /* for feedd only */
	if (old)
		setenv("ASAN_OPTIONS", old, 1);
}

static void ft_setup(void)
{
	h_setup();
	snprintf(other, sizeof(other), "%s/other", h.dir);
	h_make_dataset_blocks(other, H_SAMPLES, 3);
	ft_ctl_make();
}

static void ft_teardown(void)
{
	h_teardown();
	if (fc)
		munmap(fc, sizeof(*fc));
	fc = NULL;
}

/* ------------------------------------------------------------------ */
/* Allocation failures                                                 */

/* The requests a case makes, each on its own connection. */
struct ft_case {
	const char *kind;                       /* what the shim arms */
	int refusal;                            /* the error it gives, 0: -ENOMEM */
	const char *open_group;                 /* open_stream: a group, or NULL */
	/* what runs unarmed first (may be NULL): connects, opens */
	void (*prepare)(struct ft_case *k);
	/* the armed request: 0 served (and checked), <0 refused */
	int (*request)(struct ft_case *k);
	struct feed_conn *conn;                 /* prepare's, closed after request */
	struct feed_stream *st;                 /* prepare's or request's stream */
	bool keep;                              /* a request served keeps its connection */
};

static void ft_connect(struct ft_case *k)
{
	k->conn = h_conn_new();
}

static void ft_connect_open(struct ft_case *k)
{
	k->conn = h_conn_new();
	k->st = h_tiny_open(k->conn, 3, 2);
}

static int ft_req_connect(struct ft_case *k)
{
	ck_assert_int_eq(feed_conn_new(&k->conn), 0);
	return feed_conn_open(k->conn, h.sock);
}

static int ft_req_list(struct ft_case *k)
{
	struct feed_dataset_list *l;
	int r = feed_list_datasets(k->conn, &l);

	if (r == 0) {
		ck_assert_uint_eq(l->count, 2);
		feed_dataset_list_free(l);
	}
	return r;
}

static int ft_req_connect_list(struct ft_case *k)
{
	int r = ft_req_connect(k);

	return r < 0 ? r : ft_req_list(k);
}

static int ft_req_info(struct ft_case *k)
{
	struct feed_dataset_list *l;
	int r = feed_dataset_info(k->conn, "other", &l);

	if (r == 0) {
		ck_assert_uint_eq(l->count, 1);
		ck_assert_str_eq(l->datasets[0].name, "other");
		feed_dataset_list_free(l);
	}
	return r;
}

static int ft_req_status(struct ft_case *k)
{
	struct feed_status *st;
	int r = feed_status(k->conn, &st);

	if (r == 0) {
		ck_assert_uint_ge(st->count, 1);  /* the bystander, at least */
		feed_status_free(st);
	}
	return r;
}

static int ft_req_open(struct ft_case *k)
{
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 3, .credits = 2,
				     .group = k->open_group};
	int r;

	if (!k->conn)
		k->conn = h_conn_new();
	if ((r = feed_stream_open(k->conn, &o, &k->st)) < 0) {
		k->st = NULL;
		return r;
	}
	h_tiny_read(k->st, 2);  /* served as if nothing had happened */
	return 0;
}

/* Reloads the unchanged config file: applied, nothing changes. */
static int ft_req_reload(struct ft_case *k)
{
	struct feed_reload_result *res;
	int r = feed_reload(k->conn, &res);

	if (r == 0) {
		ck_assert(res->applied);
		ck_assert_uint_eq(res->nadded + res->nremoved + res->nrepointed, 0);
	}
	if (r == 0 || r == -EINVAL)  /* refused: *ret says why */
		feed_reload_result_free(res);
	return r;
}

static int ft_req_close(struct ft_case *k)
{
	int r = feed_stream_close(k->st);

	k->st = NULL;
	return r;
}

static void ft_case_end(struct ft_case *k)
{
	if (k->st)
		ck_assert_int_eq(feed_stream_close(k->st), 0);
	feed_disconnect(k->conn);
	k->st = NULL;
	k->conn = NULL;
}

static bool ft_armed_done(void *arg)
{
	return atomic_load(&fc->armed_done) > *(int64_t *)arg;
}

/* The daemon serves a status request on a fresh connection. */
static void ft_assert_status(void)
{
	struct ft_case k = {0};

	ft_connect(&k);
	ck_assert_int_eq(ft_req_status(&k), 0);
	ft_case_end(&k);
}

/* What one request with a failed allocation came to. */
enum ft_outcome {
	FT_UNTOUCHED,  /* it made fewer allocations than asked: none failed */
	FT_REFUSED,    /* an error reply saying memory ran out */
	FT_CLOSED,     /* the daemon closed the connection, and logged why */
	FT_SERVED,     /* an allocation it can do without: served all the same */
	FT_OUTCOMES
};

/* A failed request's error: -ENOMEM saying so, or the connection closed
 * (the client sees the daemon gone), with a log line naming the memory. */
static enum ft_outcome ft_refusal(struct ft_case *k, int r, unsigned logged)
{
	const char *msg = k->conn ? feed_errmsg(k->conn) : "";

	if (r == (k->refusal ? k->refusal : -ENOMEM)) {
		ck_assert_msg(strstr(msg, "out of memory"), "%s: %s without saying why: %s",
			      k->kind, feed_strerror(r), msg);
		if (k->prepare) {  /* a refusal: the connection goes on */
			struct feed_stats st;
			ck_assert_msg(feed_stats(k->conn, &st) == 0, "%s: after the refusal: %s",
				      k->kind, feed_errmsg(k->conn));
		}
		return FT_REFUSED;
	}
	ck_assert_msg(r == -ECONNRESET || r == -EPIPE || r == -ENOTCONN,
		      "%s: unexpected error %d (%s): %s", k->kind, r, feed_strerror(r), msg);
	ck_assert_msg(h_log_count("memory") > logged, "%s: connection closed (%s), and no log "
		      "line names the memory:\n%s", k->kind, msg, h_file_text(h.log));
	return FT_CLOSED;
}

/* The armed request never ended: feedd died of it (the usual reason), or
 * it never came. Fails the test, saying which. */
static void ft_died(const struct ft_case *k, int64_t n)
{
	int status = h_wait(h.pid, 0);

	if (status == -1)
		ck_abort_msg("%s (allocation %lld failing): the request never ended", k->kind,
			     (long long)n);
	h.pid = 0;
	fputs(h_file_text(h.log), stderr);  /* a sanitizer's report is long */
	ck_abort_msg("%s: feedd died (wait status %#x, %s) when allocation %lld failed; its log "
		     "is on stderr", k->kind, status, WIFSIGNALED(status) ?
		     strsignal(WTERMSIG(status)) : "exited", (long long)n);
}

/* One request of k with its n-th allocation failed. */
static enum ft_outcome ft_one(struct ft_case *k, int64_t n)
{
	int64_t done = atomic_load(&fc->armed_done), fired = atomic_load(&fc->fired);
	unsigned logged = h_log_count("memory");
	enum ft_outcome o = FT_SERVED;

	if (k->prepare)
		k->prepare(k);
	snprintf(fc->kind, sizeof(fc->kind), "%s", k->kind);
	atomic_store_explicit(&fc->fail_at, n, memory_order_release);  /* kind first */
	int r = k->request(k);
	if (!h_wait_until(ft_armed_done, &done, H_DEADLINE_MS))
		ft_died(k, n);
	bool hit = atomic_load(&fc->fired) != fired;
	ck_assert_msg(hit || r == 0, "%s refused with no fault injected: %s", k->kind,
		      k->conn ? feed_errmsg(k->conn) : feed_strerror(r));
	if (!hit)
		o = FT_UNTOUCHED;
	else if (r < 0)
		o = ft_refusal(k, r, logged);
	if (!k->keep || o != FT_UNTOUCHED)
		ft_case_end(k);
	return o;
}

/* Fails each allocation of k's request in turn, the bystander read after
 * each; returns how many allocations a request of k makes. */
static int64_t ft_each_alloc(struct ft_case *k, struct feed_stream *bystander)
{
	unsigned seen[FT_OUTCOMES] = {0};
	enum ft_outcome o;
	int64_t n = 1;

	char served[80] = "";
	size_t at = 0;

	while ((o = ft_one(k, n)) != FT_UNTOUCHED) {
		seen[o]++;
		if (o == FT_SERVED && at < sizeof(served))  /* which: worth a look */
			at += (size_t)snprintf(served + at, sizeof(served) - at, " #%lld",
					       (long long)n);
		h_tiny_read(bystander, 1);
		ft_assert_status();
		ck_assert_msg(++n <= FT_MAX_N, "%s: still failing after %d allocations", k->kind,
			      FT_MAX_N);
	}
	h_tiny_read(bystander, 1);
	int64_t allocs = atomic_load(&fc->last_allocs);
	ck_assert_int_eq(allocs, n - 1);
	fprintf(stderr, "check_fault: %s%s%s: %lld allocations, each failed once: "
		"%u refused, %u closed, %u served all the same%s\n", k->kind,
		k->open_group ? " in group " : "", k->open_group ? k->open_group : "",
		(long long)allocs, seen[FT_REFUSED], seen[FT_CLOSED], seen[FT_SERVED], served);
	return allocs;
}

/* Runs each case in turn against one feedd, a stream on it all along. */
static void ft_run_cases(struct ft_case *cases, size_t n)
{
	ft_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *bystander = h_tiny_open(c, 2, 2);
	h_tiny_read(bystander, 1);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_gt(ft_each_alloc(&cases[i], bystander), 0);
	h_tiny_read(bystander, 3);
	ck_assert_int_eq(feed_stream_close(bystander), 0);
	feed_disconnect(c);
	h_assert_healthy();
}

#define FT_HELD 150  /* connections held: feedd's descriptors pass 30, 62 and 126 */

/* Each of FT_HELD connections, held open, is first refused at each of its
 * accept's allocations in turn: so the one that first takes a descriptor
 * above those feedd polled before meets each failure, libuv's growth of
 * its table of polled descriptors included (which aborts the process when
 * it fails, unless feedd grew the table at start). */
START_TEST(test_fault_alloc_accept_held)
{
	static struct ft_case held[FT_HELD];

	ft_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *bystander = h_tiny_open(c, 2, 2);
	for (int i = 0; i < FT_HELD; i++) {
		struct ft_case *k = &held[i];
		int64_t n = 1;
		*k = (struct ft_case){.kind = "accept", .request = ft_req_connect, .keep = true};
		while (ft_one(k, n) != FT_UNTOUCHED)
			ck_assert_int_le(++n, FT_MAX_N);
		ck_assert_ptr_nonnull(k->conn);
	}
	h_tiny_read(bystander, 2);
	for (int i = 0; i < FT_HELD; i++)
		feed_disconnect(held[i].conn);
	ck_assert_int_eq(feed_stream_close(bystander), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

START_TEST(test_fault_alloc_connect)
{
	struct ft_case cases[] = {
		{.kind = "accept", .request = ft_req_connect_list},
		{.kind = "hello", .request = ft_req_connect},
	};

	ft_run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_fault_alloc_queries)
{
	struct ft_case cases[] = {
		{.kind = "packet", .prepare = ft_connect, .request = ft_req_status},
		{.kind = "list_datasets", .prepare = ft_connect, .request = ft_req_list},
		{.kind = "dataset_info", .prepare = ft_connect, .request = ft_req_info},
		{.kind = "stats", .prepare = ft_connect, .request = ft_req_status},
		{.kind = "reload", .prepare = ft_connect, .request = ft_req_reload},
		/* a reload refused for any reason is -EINVAL (client.h), its
		 * errors saying why */
		{.kind = "reload/run", .refusal = -EINVAL, .prepare = ft_connect,
		 .request = ft_req_reload},
		{.kind = "reload/done", .prepare = ft_connect, .request = ft_req_reload},
	};

	ft_run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_fault_alloc_open_close)
{
	struct ft_case cases[] = {
		{.kind = "open_stream", .prepare = ft_connect, .request = ft_req_open},
		{.kind = "open_stream/ready", .prepare = ft_connect, .request = ft_req_open},
		{.kind = "close_stream", .prepare = ft_connect_open, .request = ft_req_close},
	};

	ft_run_cases(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

/* A group member that reads on its own thread, so that the group's slots
 * free up for the members that join it. */
struct ft_reader {
	struct feed_stream *st;
	pthread_t thread;
	atomic_bool stop;
	atomic_int failed;      /* feed_next's error, or 1: wrong bytes */
	atomic_long batches;    /* read and released */
};

/* True when every sample of b holds the harness dataset's bytes (as
 * h_tiny_check(), which asserts: on this thread a failure is recorded). */
static bool ft_batch_right(struct feed_batch *b)
{
	struct feed_view img, lab;
	const uint64_t *idx = feed_batch_samples(b);

	if (feed_batch_field(b, 0, &img) < 0 || feed_batch_field(b, 1, &lab) < 0)
		return false;
	for (uint32_t i = 0; i < feed_batch_size(b); i++) {
		int64_t label;
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		if (idx[i] >= H_SAMPLES || label != (int64_t)idx[i] ||
		    ((const uint8_t *)img.data)[16 * i + 15] != idx[i])
			return false;
	}
	return true;
}

static void *ft_reader_run(void *arg)
{
	struct ft_reader *rd = arg;
	struct feed_batch *b;

	while (!atomic_load(&rd->stop) && !atomic_load(&rd->failed)) {
		int r = feed_next(rd->st, 50, &b);
		if (r == FEED_END_OF_EPOCH || r == -ETIMEDOUT)
			continue;
		if (r < 0 || !ft_batch_right(b))
			atomic_store(&rd->failed, r < 0 ? r : 1);
		if (r == 0 && feed_release(b) < 0)
			atomic_store(&rd->failed, 2);
		atomic_fetch_add(&rd->batches, 1);
	}
	return NULL;
}

/* Groups: the first member's open makes the group; a later one joins it
 * (the first member, opened unarmed, reads all along). */
START_TEST(test_fault_alloc_group_open)
{
	struct ft_case cases[] = {
		{.kind = "open_stream", .open_group = "gnew", .prepare = ft_connect,
		 .request = ft_req_open},
		{.kind = "open_stream/ready", .open_group = "gnew", .prepare = ft_connect,
		 .request = ft_req_open},
		{.kind = "open_stream", .open_group = "gjoin", .prepare = ft_connect,
		 .request = ft_req_open},
		{.kind = "open_stream/ready", .open_group = "gjoin", .prepare = ft_connect,
		 .request = ft_req_open},
	};
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 3, .credits = 2,
				     .group = "gjoin"};
	struct ft_reader first = {0};

	ft_start();
	struct feed_conn *c = h_conn_new(), *c1 = h_conn_new();
	struct feed_stream *bystander = h_tiny_open(c, 2, 2);
	first.st = h_stream_open(c1, &o);
	ck_assert_int_eq(pthread_create(&first.thread, NULL, ft_reader_run, &first), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_int_gt(ft_each_alloc(&cases[i], bystander), 0);
	atomic_store(&first.stop, true);
	ck_assert_int_eq(pthread_join(first.thread, NULL), 0);
	ck_assert_msg(!atomic_load(&first.failed), "the group's first member: %d",
		      atomic_load(&first.failed));
	ck_assert_int_gt(atomic_load(&first.batches), 0);
	ck_assert_int_eq(feed_stream_close(first.st), 0);
	ck_assert_int_eq(feed_stream_close(bystander), 0);
	feed_disconnect(c1);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

/* ------------------------------------------------------------------ */
/* Shard reads                                                         */

/* Arms the shard read faults on files whose path contains path_part,
 * after skip such reads. The path is written once per test (fault_ctl.h:
 * a pread in flight may be reading it). */
static void ft_read_arm_after(const char *path_part, enum fault_read_mode mode, int64_t skip)
{
	ck_assert_int_eq(atomic_load(&fc->read_mode), FAULT_READ_NONE);
	if (!fc->read_path[0])
		snprintf(fc->read_path, sizeof(fc->read_path), "%s", path_part);
	ck_assert_str_eq(fc->read_path, path_part);
	atomic_store(&fc->read_skip, skip);
	atomic_store_explicit(&fc->read_mode, mode, memory_order_release);  /* path first */
}

static void ft_read_arm(const char *path_part, enum fault_read_mode mode)
{
	ft_read_arm_after(path_part, mode, 0);
}

static void ft_read_disarm(void)
{
	atomic_store(&fc->read_mode, FAULT_READ_NONE);
}

/* Every read of both datasets comes back half done, from the start
 * (manifest, footers) to the last block. */
START_TEST(test_fault_read_short)
{
	ft_read_arm(h.dir, FAULT_READ_SHORT);
	ft_start();
	int64_t at_start = atomic_load(&fc->read_faults);
	ck_assert_int_gt(at_start, 0);  /* opening the datasets read through the shim */
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "other", .batch = 3, .credits = 2};
	struct feed_stream *a = h_tiny_open(c, 4, 2), *b = h_stream_open(c, &o);
	h_tiny_read(a, 6);
	h_tiny_read(b, 8);  /* two epochs: every block of "other" */
	ck_assert_int_gt(atomic_load(&fc->read_faults), at_start);
	ck_assert_int_eq(feed_stream_close(a), 0);
	ck_assert_int_eq(feed_stream_close(b), 0);
	feed_disconnect(c);
	ft_read_disarm();
	h_assert_healthy();
}
END_TEST

/* EIO on "other"'s shard while "tiny" is streamed. */
START_TEST(test_fault_read_eio)
{
	char part[200], shard[220];
	struct feed_batch *batch;

	ft_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *a = h_tiny_open(c, 2, 2);
	h_tiny_read(a, 2);
	snprintf(part, sizeof(part), "%s/shard-", other);
	ft_read_arm(part, FAULT_READ_EIO);
	struct feed_stream_opts o = {.dataset = "other", .batch = 3, .credits = 2};
	struct feed_stream *b = h_stream_open(c, &o);
	int r = feed_next(b, H_DEADLINE_MS, &batch);
	ck_assert_msg(r == -EIO, "got %d: %s", r, feed_errmsg(c));
	snprintf(shard, sizeof(shard), "%s/shard-00000.fsh: block 0: %s", other, strerror(EIO));
	ck_assert_msg(strstr(feed_errmsg(c), shard), "'%s' does not name '%s'", feed_errmsg(c),
		      shard);
	ck_assert_int_gt(atomic_load(&fc->read_faults), 0);
	ck_assert_int_eq(feed_next(b, 0, &batch), -EIO);  /* stopped for good */
	h_tiny_read(a, 4);                                /* the other goes on */
	ck_assert_int_eq(feed_stream_close(b), 0);
	/* the error was the disk's at the time: a later stream reads again */
	ft_read_disarm();
	b = h_stream_open(c, &o);
	h_tiny_read(b, 4);
	ck_assert_int_eq(feed_stream_close(b), 0);
	ck_assert_int_eq(feed_stream_close(a), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

/* EIO on "other"'s shard from the start, after letting skip reads
 * through: it is left out with the shard, what was read and the error
 * named; "tiny" is served; once the disk reads again a reload adds it. */
static void ft_eio_at_open(int64_t skip, const char *what)
{
	char part[200], why[300];
	struct feed_dataset_list *l;
	struct feed_reload_result *res;

	snprintf(part, sizeof(part), "%s/shard-", other);
	ft_read_arm_after(part, FAULT_READ_EIO, skip);
	ft_start();
	snprintf(why, sizeof(why), "%s/shard-00000.fsh: %s%s", other, what, strerror(EIO));
	ck_assert_msg(h_log_line_has("dataset 'other'", why), "no line says '%s':\n%s", why,
		      h_file_text(h.log));
	struct feed_conn *c = h_conn_new();
	struct feed_stream *a = h_tiny_open(c, 2, 2);
	ck_assert_int_eq(feed_dataset_info(c, "other", &l), -ENOENT);
	ft_read_disarm();
	ck_assert_msg(feed_reload(c, &res) == 0, "reload: %s", feed_errmsg(c));
	ck_assert_uint_eq(res->nadded, 1);
	ck_assert_str_eq(res->added[0], "other");
	feed_reload_result_free(res);
	struct feed_stream_opts o = {.dataset = "other", .batch = 3, .credits = 2};
	struct feed_stream *b = h_stream_open(c, &o);
	h_tiny_read(b, 4);
	h_tiny_read(a, 4);
	ck_assert_int_eq(feed_stream_close(b), 0);
	ck_assert_int_eq(feed_stream_close(a), 0);
	feed_disconnect(c);
	h_assert_healthy();
}

START_TEST(test_fault_read_eio_header)
{
	ft_eio_at_open(0, "");
}
END_TEST

START_TEST(test_fault_read_eio_index)
{
	ft_eio_at_open(2, "block index: ");  /* header and trailer read */
}
END_TEST

/* ------------------------------------------------------------------ */
/* Shared memory                                                       */

/* Makes feedd's next regions fail for want of shared memory, or not. The
 * name is written once (fault_ctl.h); "feedd-" is each region's: the
 * first one an open makes fails (a stream's data region, or a group
 * joiner's control region, its group's data region being made). */
static void ft_shm_arm(bool fail)
{
	if (!fc->shm_name[0])
		snprintf(fc->shm_name, sizeof(fc->shm_name), "feedd-");
	atomic_store_explicit(&fc->shm_fail, fail, memory_order_release);  /* name first */
}

/* An open that finds no shared memory for its first region is refused,
 * naming the region and the shortage. */
static void ft_shm_refused(struct feed_conn *c, const char *region, const char *group)
{
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 3, .credits = 2, .group = group};
	struct feed_stream *st;
	char why[160];

	ft_shm_arm(true);
	int r = feed_stream_open(c, &o, &st);
	ft_shm_arm(false);
	ck_assert_msg(r == -ENOSPC, "%s: got %d: %s", region, r, feed_errmsg(c));
	snprintf(why, sizeof(why), "region %s: cannot allocate", region);
	ck_assert_msg(strstr(feed_errmsg(c), why) && strstr(feed_errmsg(c), strerror(ENOSPC)),
		      "'%s' does not say '%s ...: %s'", feed_errmsg(c), why, strerror(ENOSPC));
}

/* /dev/shm full while streams open: the opens are refused, the streams
 * served before (a plain one, a group's) go on, and once there is room
 * again opens succeed. */
START_TEST(test_fault_shm_full)
{
	ft_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *a = h_tiny_open(c, 2, 2);
	struct feed_stream_opts g = {.dataset = "tiny", .batch = 3, .credits = 2, .group = "gshm"};
	struct feed_stream *first = h_stream_open(c, &g);  /* the group a joiner finds */
	int64_t before = atomic_load(&fc->shm_faults);
	ft_shm_refused(c, "feedd-data", NULL);
	ft_shm_refused(c, "feedd-data", "gnew");
	ft_shm_refused(c, "feedd-control", "gshm");
	ck_assert_int_eq(atomic_load(&fc->shm_faults), before + 3);
	h_tiny_read(first, 2);
	ck_assert_int_eq(feed_stream_close(first), 0);
	h_tiny_read(a, 4);
	struct feed_stream *b = h_tiny_open(c, 3, 2);
	h_tiny_read(b, 4);
	ck_assert_int_eq(feed_stream_close(b), 0);
	ck_assert_int_eq(feed_stream_close(a), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

static Suite *fault_suite(void)
{
	Suite *s = suite_create("fault");
	TCase *tc = tcase_create("fault");

	tcase_add_checked_fixture(tc, ft_setup, ft_teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_fault_alloc_connect);
	tcase_add_test(tc, test_fault_alloc_accept_held);
	tcase_add_test(tc, test_fault_alloc_queries);
	tcase_add_test(tc, test_fault_alloc_open_close);
	tcase_add_test(tc, test_fault_alloc_group_open);
	tcase_add_test(tc, test_fault_read_short);
	tcase_add_test(tc, test_fault_read_eio);
	tcase_add_test(tc, test_fault_read_eio_header);
	tcase_add_test(tc, test_fault_read_eio_index);
	tcase_add_test(tc, test_fault_shm_full);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
#ifndef FEEDD_TEST_SEAMS
	fprintf(stderr, "skipped: feedd built without FEED_TEST_SEAMS (no request marks)\n");
	return 77;
#else
	return h_run_suite(fault_suite()) ? 1 : 0;
#endif
}
