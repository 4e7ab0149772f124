/*
 * check_status.c: what `feedctl status` shows of a running stream, and
 * what the cache's counters prove. feedctl status --json (parsed) and the
 * table name the stream's user, pid, dataset, credits in use, rates,
 * worker time and the time its reader waited, which libfeedclient counts
 * in the release region; a reader's count past the stream's age is
 * clamped, and the daemon serves on. A second independent stream over a
 * warm dataset decodes no block; a cache smaller than the dataset still
 * delivers every sample once per epoch; the daemon's RssAnon + RssShmem
 * stays within the cache budget + the regions + 64 MiB over a Fashion-MNIST
 * epoch. A group is listed once, with its members, their pids and reader
 * waits, and one work source's worker time.
 */
#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/gpu.h"
#include "feed/stream.h"
#include "feed_shm.h"
#include "feed_text.h"
#include "feedd_harness.h"

static char fm_dir[256];  /* Fashion-MNIST training split, packed */

static void start_tiny(const char *const *extra)
{
	char spec[200];
	const char *args[16] = {"--dataset", spec, "--workers", "1"};
	size_t n = 4;

	snprintf(spec, sizeof(spec), "tiny=%s", h.data);
	while (extra && *extra && n < 15)
		args[n++] = *extra++;
	args[n] = NULL;
	h_start(args);
}

/* Runs feedctl status with flag (or none) and returns its output (static). */
static const char *feedctl_status(const char *flag)
{
	char out[160];

	snprintf(out, sizeof(out), "%s/feedctl.out", h.dir);
	unlink(out);
	const char *args[] = {"--socket", h.sock, "status", flag, NULL};
	int rc = h_run_tool("feedctl", args, out);
	ck_assert_msg(rc == 0, "feedctl status %s: exit %d:\n%s", flag ? flag : "", rc,
		      h_file_text(out));
	return h_file_text(out);
}

static json_object *jget(json_object *o, const char *key)
{
	json_object *v = NULL;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "no \"%s\" in the JSON", key);
	return v;
}

static uint64_t ju(json_object *o, const char *key)
{
	return (uint64_t)json_object_get_int64(jget(o, key));
}

/* Everyone's view of the daemon; the caller frees it. */
static struct feed_status *status_now(void)
{
	struct feed_conn *c = h_conn_new();
	struct feed_status *st;

	ck_assert_int_eq(feed_status(c, &st), 0);
	feed_disconnect(c);
	return st;
}

/* Takes and releases every batch ready now (the daemon is stopped). */
static void drain_ready(struct feed_stream *s)
{
	struct feed_batch *b;
	int r;

	while ((r = feed_next(s, 0, &b)) != -ETIMEDOUT) {
		ck_assert_msg(r >= 0, "feed_next: %s", feed_strerror(r));
		if (r == 0)
			ck_assert_int_eq(feed_release(b), 0);
	}
}

START_TEST(test_status_shows_stream)
{
	start_tiny(NULL);
	struct feed_conn *c = h_conn_new();
	struct feed_stream *s = h_tiny_open(c, 2, 3);
	struct feed_batch *held;

	h_tiny_read(s, 5);
	/* The reader waits 300 ms for a batch that cannot come: the daemon is
	 * stopped. libfeedclient counts the wait in the release region. */
	h_stop_process(h.pid);
	drain_ready(s);
	ck_assert_int_eq(feed_next(s, 300, &held), -ETIMEDOUT);
	ck_assert_int_eq(kill(h.pid, SIGCONT), 0);
	ck_assert_int_eq(feed_next(s, H_DEADLINE_MS, &held), 0);  /* held: one credit in use */

	json_object *root = json_tokener_parse(feedctl_status("--json"));
	ck_assert_msg(root, "feedctl status --json is not JSON:\n%s", feedctl_status("--json"));
	ck_assert_uint_eq(ju(root, "workers"), 1);
	json_object *cache = jget(root, "cache");
	ck_assert_uint_ge(ju(cache, "misses"), 1);
	ck_assert_uint_ge(ju(cache, "bytes"), 1);
	ck_assert_uint_eq(ju(cache, "evictions"), 0);
	ck_assert_uint_eq(ju(cache, "budget"), 1ull << 30);
	(void)jget(cache, "hits");
	json_object *streams = jget(root, "streams");
	ck_assert_uint_eq(json_object_array_length(streams), 1);
	json_object *x = json_object_array_get_idx(streams, 0);
	ck_assert_str_eq(json_object_get_string(jget(x, "kind")), "stream");
	ck_assert_str_eq(json_object_get_string(jget(x, "dataset")), "tiny");
	ck_assert_str_eq(json_object_get_string(jget(x, "group")), "");
	ck_assert_uint_eq(ju(x, "uid"), getuid());
	ck_assert_int_eq((int)ju(x, "pid"), getpid());
	ck_assert_uint_eq(ju(x, "members"), 1);
	ck_assert_uint_eq(ju(x, "batch"), 2);
	ck_assert_uint_eq(ju(x, "credits"), 3);
	ck_assert_uint_ge(ju(x, "credits_in_use"), 1);
	uint64_t batches = ju(x, "batches");
	ck_assert_uint_ge(batches, 6);
	ck_assert_uint_eq(ju(x, "samples"), 2 * batches);
	ck_assert_uint_eq(ju(x, "bytes"), 24 * 2 * batches);  /* u8[4,4] + i64 */
	ck_assert_uint_ge(ju(x, "jobs"), batches);
	ck_assert_uint_gt(ju(x, "worker_ns"), 0);
	ck_assert(json_object_get_double(jget(x, "samples_per_s")) > 0);
	ck_assert(json_object_get_double(jget(x, "mb_per_s")) > 0);
	ck_assert_uint_gt(ju(x, "shm_bytes"), 0);
	uint64_t age = ju(x, "age_ms"), waited = ju(x, "reader_wait_ns");
	ck_assert_msg(waited >= 250000000ull && waited <= age * 1000000ull,
		      "reader waited %llu ns of %llu ms", (unsigned long long)waited,
		      (unsigned long long)age);
	double share = json_object_get_double(jget(x, "reader_wait_share"));
	ck_assert(share > 0 && share <= 1.0);
	ck_assert_str_eq(json_object_get_string(jget(x, "pipeline")), "identity");
	json_object_put(root);

	const char *table = feedctl_status(NULL);
	ck_assert_msg(strstr(table, "WAIT%") && strstr(table, "WORKER_S") &&
		      strstr(table, " tiny ") && strstr(table, "stream ") &&
		      strstr(table, "misses"), "feedctl status:\n%s", table);
	char pid[32];
	snprintf(pid, sizeof(pid), " %d ", (int)getpid());
	ck_assert_msg(strstr(table, pid), "no pid %s in:\n%s", pid, table);
	ck_assert_int_eq(feed_release(held), 0);
	feed_stream_close(s);
	feed_disconnect(c);
}
END_TEST

/* A group is built once, so it is listed once: one entry of kind "group"
 * naming its members and their pids, with one work source's worker time
 * (as many jobs as batches built, not one per member), and each member's
 * own reader wait, the group's being the largest. */
START_TEST(test_status_group_listed_once)
{
	enum { MEMBERS = 3, DEPTH = 4 };
	struct feed_conn *c[MEMBERS];
	struct feed_stream *s[MEMBERS];
	struct feed_batch *held;

	start_tiny(NULL);
	for (int m = 0; m < MEMBERS; m++) {
		struct feed_stream_opts o = {.dataset = "tiny", .batch = 2, .credits = 2,
					     .seed = 5, .order = FEED_ORDER_FULL, .group = "g",
					     .group_depth = DEPTH};
		c[m] = h_conn_new();
		s[m] = h_stream_open(c[m], &o);
	}
	for (int i = 0; i < 5; i++)  /* in step: the group waits for its slowest */
		for (int m = 0; m < MEMBERS; m++)
			h_tiny_read(s[m], 1);
	/* member 0's reader waits 300 ms for a batch that cannot come */
	h_stop_process(h.pid);
	drain_ready(s[0]);
	ck_assert_int_eq(feed_next(s[0], 300, &held), -ETIMEDOUT);
	ck_assert_int_eq(kill(h.pid, SIGCONT), 0);

	const char *text = feedctl_status("--json");
	json_object *root = json_tokener_parse(text);
	ck_assert_msg(root, "feedctl status --json is not JSON:\n%s", text);
	json_object *streams = jget(root, "streams");
	ck_assert_msg(json_object_array_length(streams) == 1, "a group of %d listed as:\n%s",
		      MEMBERS, text);
	json_object *x = json_object_array_get_idx(streams, 0);
	ck_assert_str_eq(json_object_get_string(jget(x, "kind")), "group");
	ck_assert_str_eq(json_object_get_string(jget(x, "group")), "g");
	ck_assert_str_eq(json_object_get_string(jget(x, "dataset")), "tiny");
	ck_assert_uint_eq(ju(x, "uid"), getuid());
	ck_assert_uint_eq(ju(x, "members"), MEMBERS);
	ck_assert_uint_eq(ju(x, "credits"), DEPTH);
	json_object *pids = jget(x, "member_pids"), *waits = jget(x, "member_reader_wait_ns");
	ck_assert_uint_eq(json_object_array_length(pids), MEMBERS);
	ck_assert_uint_eq(json_object_array_length(waits), MEMBERS);
	uint64_t most = 0;
	int waiting = 0;
	for (int m = 0; m < MEMBERS; m++) {
		ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(pids, m)), getpid());
		uint64_t w = (uint64_t)json_object_get_int64(json_object_array_get_idx(waits, m));
		most = w > most ? w : most;
		waiting += w >= 250000000ull;
	}
	ck_assert_int_ge(waiting, 1);  /* member 0's, counted in its own region */
	ck_assert_uint_eq(ju(x, "reader_wait_ns"), most);
	/* built once from one source: one job a batch, whatever the members
	 * (one worker publishes each batch in order inside its job, and
	 * counts the job after it: at most one behind) */
	uint64_t batches = ju(x, "batches"), jobs = ju(x, "jobs");
	ck_assert_uint_ge(batches, 5);
	ck_assert_msg(jobs + 1 >= batches && jobs <= batches,
		      "%llu jobs for %llu batches built once", (unsigned long long)jobs,
		      (unsigned long long)batches);
	ck_assert_uint_eq(ju(x, "samples"), 2 * batches);
	ck_assert_uint_gt(ju(x, "worker_ns"), 0);
	json_object_put(root);

	struct feed_status *st = status_now();
	ck_assert_uint_eq(st->count, 1);
	ck_assert_uint_eq(st->streams[0].nmember_pids, MEMBERS);
	ck_assert_int_eq(st->streams[0].member_pids[MEMBERS - 1], getpid());
	feed_status_free(st);
	for (int m = 0; m < MEMBERS; m++) {
		feed_stream_close(s[m]);
		feed_disconnect(c[m]);
	}
	st = status_now();
	ck_assert_uint_eq(st->count, 0);  /* gone with its last member */
	feed_status_free(st);
}
END_TEST

/* A raw client writes a wait longer than the stream has existed: the
 * daemon shows at most the stream's age and serves on. */
START_TEST(test_status_reader_wait_clamped)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream os = FEED__OPEN_STREAM__INIT;
	Feed__Reply *rep = NULL;
	int fd[5];
	unsigned n;
	struct stat sb;

	start_tiny(NULL);
	int sock = h_raw_connect();
	h_raw_hello(sock);
	os.dataset = feed_pb_text("tiny");
	os.batch = 1;
	os.credits = 2;
	os.pipeline = feed_pb_text("");
	req.id = 7;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &os;
	h_raw_send_request(sock, &req);
	ck_assert_int_eq(h_raw_recv_fds(sock, H_DEADLINE_MS, &rep, fd, 5, &n), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STREAM_OPENED);
	feed__reply__free_unpacked(rep, NULL);
	ck_assert_int_eq(fstat(fd[2], &sb), 0);
	struct feed_shm_rel *rel = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
					MAP_SHARED, fd[2], 0);
	ck_assert(rel != MAP_FAILED);
	atomic_store(&rel->reader_wait_ns, UINT64_MAX);

	struct feed_status *st = status_now();
	ck_assert_uint_eq(st->count, 1);
	const struct feed_stream_status *x = &st->streams[0];
	ck_assert_uint_le(x->reader_wait_ns, x->age_ms * 1000000ull);
	ck_assert(x->reader_wait_share <= 1.0);
	feed_status_free(st);
	h_assert_healthy();
	munmap(rel, (size_t)sb.st_size);
	for (int i = 0; i < 5; i++)
		close(fd[i]);
	close(sock);
}
END_TEST

/* Reads two whole epochs of a stream of batch 8 over the 64-record set,
 * asserting every label once in each, and closes it. */
static void read_two_epochs(uint64_t seed, int order)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 8, .credits = 4, .epochs = 2,
				     .seed = seed, .order = order};
	struct feed_stream *s = h_stream_open(c, &o);
	struct feed_batch *b;
	int r, epochs = 0;
	unsigned char seen[64] = {0};

	while ((r = feed_next(s, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		ck_assert_msg(r >= 0, "feed_next: %s", feed_errmsg(c));
		if (r == FEED_END_OF_EPOCH) {
			for (int i = 0; i < 64; i++)
				ck_assert_msg(seen[i] == 1, "epoch %d: sample %d seen %d times", epochs,
					      i, seen[i]);
			memset(seen, 0, sizeof(seen));
			epochs++;
			continue;
		}
		struct feed_view lab;
		ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
		const int64_t *l = lab.data;
		for (uint32_t i = 0; i < feed_batch_size(b); i++) {
			ck_assert(l[i] >= 0 && l[i] < 64);
			seen[l[i]]++;
		}
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(epochs, 2);
	feed_stream_close(s);
	feed_disconnect(c);
}

static void start_blocks(const char *cache_bytes)
{
	char dir[160], spec[200];

	snprintf(dir, sizeof(dir), "%s/blocks", h.dir);
	h_make_dataset_blocks(dir, 64, 4);  /* 16 blocks of 4 records */
	snprintf(spec, sizeof(spec), "tiny=%s", dir);
	h_start((const char *[]){"--dataset", spec, "--workers", "2", "--cache-bytes",
				 cache_bytes, NULL});
}

START_TEST(test_status_warm_dataset_decodes_nothing)
{
	start_blocks("1048576");
	read_two_epochs(1, FEED_ORDER_FULL);
	struct feed_status *a = status_now();
	ck_assert_uint_eq(a->cache.misses, 16);  /* each block decoded once */
	ck_assert_uint_eq(a->count, 0);          /* the stream is gone */
	/* an independent stream, another order: every block from the cache */
	read_two_epochs(2, FEED_ORDER_SEQUENTIAL);
	struct feed_status *b = status_now();
	ck_assert_uint_eq(b->cache.misses, a->cache.misses);
	ck_assert_uint_ge(b->cache.hits, a->cache.hits + 16);
	ck_assert_uint_eq(b->cache.evictions, 0);
	feed_status_free(a);
	feed_status_free(b);
}
END_TEST

START_TEST(test_status_small_cache_every_sample_once)
{
	start_blocks("256");  /* two or three of the 16 decoded blocks */
	read_two_epochs(3, FEED_ORDER_FULL);
	struct feed_status *st = status_now();
	ck_assert_uint_gt(st->cache.evictions, 0);
	ck_assert_uint_gt(st->cache.misses, 16);  /* blocks decoded again */
	ck_assert_uint_eq(st->cache.budget, 256);
	feed_status_free(st);
}
END_TEST

/* RssAnon + RssShmem of pid in bytes, from /proc. */
static uint64_t rss_anon_shmem(pid_t pid)
{
	char path[64], line[256];
	uint64_t kb, sum = 0;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %llu kB", (unsigned long long *)&kb) == 1 ||
		    sscanf(line, "RssShmem: %llu kB", (unsigned long long *)&kb) == 1) {
			sum += kb * 1024;
			found++;
		}
	fclose(f);
	ck_assert_int_eq(found, 2);
	return sum;
}

START_TEST(test_status_memory_within_budget)
{
	char spec[300];
	const uint64_t budget = 16ull << 20;  /* Fashion-MNIST decodes to ~47 MB */

	snprintf(spec, sizeof(spec), "fm=%s", fm_dir);
	h_start((const char *[]){"--dataset", spec, "--workers", "2", "--cache-bytes", "16777216",
				 NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "fm", .batch = 256, .credits = 8, .epochs = 1,
				     .order = FEED_ORDER_BLOCK_WINDOW,
				     .pipeline = "random_crop(size=28, pad=2) | hflip(p=0.5)"};
	struct feed_stream *s = h_stream_open(c, &o);
	struct feed_batch *b;
	uint64_t peak = 0, shm = 0;
	int r, n = 0;

	while ((r = feed_next(s, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		ck_assert_msg(r >= 0, "feed_next: %s", feed_errmsg(c));
		if (r == 0)
			ck_assert_int_eq(feed_release(b), 0);
		if (++n % 40 == 0 || n == 2) {
			uint64_t rss = rss_anon_shmem(h.pid);
			peak = rss > peak ? rss : peak;
			struct feed_status *st = status_now();
			ck_assert_uint_eq(st->count, 1);
			shm = st->streams[0].shm_bytes;
			feed_status_free(st);
		}
	}
	uint64_t rss = rss_anon_shmem(h.pid);
	peak = rss > peak ? rss : peak;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
	peak = 0;  /* the sanitizer's shadow memory is anonymous memory too */
#endif
	ck_assert_msg(peak <= budget + shm + (64ull << 20),
		      "RssAnon + RssShmem %llu > cache %llu + regions %llu + 64 MiB",
		      (unsigned long long)peak, (unsigned long long)budget, (unsigned long long)shm);
	feed_stream_close(s);
	feed_disconnect(c);
}
END_TEST

/* Where JPEGs can decode (daemon/gpu/hybrid.c): with the driver's double
 * and no nvJPEG, status says CPU only and why; with nvJPEG's double, its
 * version and library. A build without kernels has no usable driver: then
 * that is the reason given. */
START_TEST(test_status_jpeg_decode_says_where)
{
	const char *cu = getenv("FEED_FAKE_CUDA"), *nv = getenv("FEED_FAKE_NVJPEG");
	struct feed_gpu_info gi;
	char want[400];

	ck_assert_msg(cu && nv, "FEED_FAKE_CUDA and FEED_FAKE_NVJPEG must be set (ctest does)");
	setenv("FEED_CUDA_DRIVER", cu, 1);
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	setenv("FEED_NVJPEG_LIBRARY", "/nonexistent/libnvjpeg.so.13", 1);
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	start_tiny(NULL);
	const char *t = feedctl_status(NULL);
	ck_assert_msg(strstr(t, gi.kernels ? "\njpeg decode: CPU only: nvJPEG not found (tried "
					     "/nonexistent/libnvjpeg.so.13" :
					     "\njpeg decode: CPU only: no GPU: built without CUDA kernels"),
		      "feedctl status:\n%s", t);
	json_object *root = json_tokener_parse(feedctl_status("--json"));
	ck_assert_ptr_nonnull(root);
	ck_assert_msg(!strncmp(json_object_get_string(jget(root, "jpeg_decode")), "CPU only: ", 10),
		      "%s", json_object_get_string(jget(root, "jpeg_decode")));
	json_object_put(root);
	ck_assert_int_eq(h_stop(), 0);

	setenv("FEED_NVJPEG_LIBRARY", nv, 1);
	ck_assert_int_eq(truncate(h.log, 0), 0); /* h_start waits for a new "ready:" */
	start_tiny(NULL);
	t = feedctl_status(NULL);
	snprintf(want, sizeof(want), "\njpeg decode: nvJPEG 13.0.1 (%s)\n", nv);
	if (gi.kernels)
		ck_assert_msg(strstr(t, want), "feedctl status:\n%s", t);
}
END_TEST

static Suite *status_suite(void)
{
	Suite *s = suite_create("status");
	TCase *tc = tcase_create("status");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_status_shows_stream);
	tcase_add_test(tc, test_status_reader_wait_clamped);
	tcase_add_test(tc, test_status_group_listed_once);
	tcase_add_test(tc, test_status_warm_dataset_decodes_nothing);
	tcase_add_test(tc, test_status_small_cache_every_sample_once);
	tcase_add_test(tc, test_status_memory_within_budget);
	tcase_add_test(tc, test_status_jpeg_decode_says_where);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	int failed = 1;

	if (h_fashion_pack("train", fm_dir, sizeof(fm_dir)) == 0)
		failed = h_run_suite(status_suite());
	if (h_fashion_remove() < 0)
		failed = 1;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
