/*
 * check_fetcher.c: unit tests of daemon/data/fetcher.c against a small
 * Python HTTP server on loopback (whole files, no ranges): blocks come
 * back byte for byte; prefetches stage at most a quarter of the block
 * cache's budget and the cache counts every staged byte; a block read
 * hands its staged copy over once; a wrong body, a missing file and a
 * server that is not there fail after the configured tries, naming URL,
 * file and block, with the tries counted. Remote datasets end to end:
 * tests/integration/check_remote_http.c.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "check_util.h"
#include "fetcher.h"
#include "fmt.h"
#include "remote.h"

#define NBLOCKS 16
#define BLOCK 1000

static char tmp[64];
static pid_t server;
static int port;
static char blocks[NBLOCKS][BLOCK];

static const char server_py[] =
	"import functools, http.server, os, sys\n"
	"class H(http.server.SimpleHTTPRequestHandler):\n"
	"    def log_message(self, *a): pass\n"
	"h = functools.partial(H, directory=sys.argv[1])\n"
	"s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n"
	"open(sys.argv[2] + '.tmp', 'w').write('%d' % s.server_address[1])\n"
	"os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
	"s.serve_forever()\n";

/* The server's port, once it wrote it (10 s at most). */
static int server_port(const char *file)
{
	struct timespec nap = {.tv_nsec = 10000000};

	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(file, "r");
		int p = 0;
		if (f && fscanf(f, "%d", &p) == 1) {
			fclose(f);
			return p;
		}
		if (f)
			fclose(f);
		nanosleep(&nap, NULL);
	}
	ck_abort_msg("the test's HTTP server did not start");
	return 0;
}

static void setup(void)
{
	char path[128], portf[128];

	strcpy(tmp, "/tmp/check_fetcher.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	for (int b = 0; b < NBLOCKS; b++) {
		for (int i = 0; i < BLOCK; i++)
			blocks[b][i] = (char)(b * 31 + i);
		snprintf(path, sizeof(path), "%s/b%02d", tmp, b);
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		ck_assert_uint_eq(fwrite(blocks[b], 1, BLOCK, f), BLOCK);
		fclose(f);
	}
	snprintf(portf, sizeof(portf), "%s/port", tmp);
	pid_t parent = getpid();
	server = fork();
	ck_assert_int_ge(server, 0);
	if (server == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		execl("/usr/bin/python3", "python3", "-c", server_py, tmp, portf, (char *)NULL);
		_exit(127);
	}
	port = server_port(portf);
	ck_assert_int_eq(remote_global_init(), 0);
}

static void teardown(void)
{
	char cmd[128];

	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static struct remote_counters counters;

/* A source on the test's server (or on port p), 2 tries. */
static struct fetch_src *src_on(struct fetcher *f, int p)
{
	static char label[64], prefix[64];
	struct fetch_src *s;

	snprintf(label, sizeof(label), "http://127.0.0.1:%d", p);
	snprintf(prefix, sizeof(prefix), "http://127.0.0.1:%d/", p);
	struct fetch_src_opts o = {.label = label, .url_prefix = prefix, .timeout_ms = 5000,
				   .retries = 1, .backoff_ms = 10, .inflight = 4,
				   .counters = &counters};
	memset(&counters, 0, sizeof(counters));
	ck_assert_int_eq(fetch_src_new(f, &o, &s), 0);
	return s;
}

static struct fetch_spec spec(int b, char *file)
{
	snprintf(file, 8, "b%02d", b);
	return (struct fetch_spec){.file = file, .len = BLOCK, .has_hash = true,
				   .hash = fmt_hash(blocks[b], BLOCK), .block = (uint64_t)b,
				   .key = 100 + (uint64_t)b};
}

START_TEST(test_fetcher_stages_within_a_quarter_of_the_cache)
{
	struct cache *c;
	struct fetcher *f;
	struct cache_stats st;
	struct fetch_spec sp[NBLOCKS];
	char files[NBLOCKS][8], buf[BLOCK];

	ck_assert_int_eq(cache_new(16 * BLOCK, &c), 0);  /* staging: 4 blocks at most */
	ck_assert_int_eq(fetcher_new(c, &f, NULL), 0);
	struct fetch_src *s = src_on(f, port);
	for (int b = 0; b < NBLOCKS; b++)
		sp[b] = spec(b, files[b]);
	fetch_prefetch(s, sp, NBLOCKS);
	size_t staged = fetcher_staged_bytes(f);
	cache_stats(c, &st);
	ck_assert_uint_eq(staged, 4 * BLOCK);  /* the rest are left to the reads */
	ck_assert_uint_eq(st.staged, staged);  /* counted in cache_bytes */
	for (int b = 0; b < NBLOCKS; b++) {
		struct feed_err err = {0};
		memset(buf, 0, sizeof(buf));
		ck_assert_msg(fetch_get(s, &sp[b], buf, NULL, &err) == 0, "%s", err.msg);
		ck_assert(!memcmp(buf, blocks[b], BLOCK));
		ck_assert_uint_le(fetcher_staged_bytes(f), 4 * BLOCK);
	}
	ck_assert_uint_eq(fetcher_staged_bytes(f), 0);  /* each handed over once */
	cache_stats(c, &st);
	ck_assert_uint_eq(st.staged, 0);
	ck_assert_uint_eq(atomic_load(&counters.requests), NBLOCKS);  /* none twice */
	fetch_src_free(s);
	fetcher_free(f);
	cache_free(c);
}
END_TEST

START_TEST(test_fetcher_failures_name_url_file_and_block)
{
	struct fetcher *f;
	struct feed_err err = {0};
	char file[8], want[160], buf[BLOCK];

	ck_assert_int_eq(fetcher_new(NULL, &f, NULL), 0);
	struct fetch_src *s = src_on(f, port);
	struct fetch_spec sp = spec(3, file);
	sp.hash ^= 1;  /* the server's bytes are not the block's */
	ck_assert_int_eq(fetch_get(s, &sp, buf, NULL, &err), -EBADMSG);
	snprintf(want, sizeof(want), "http://127.0.0.1:%d/b03: block 3: checksum mismatch", port);
	ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
	ck_assert_msg(strstr(err.msg, "(after 2 tries)"), "%s", err.msg);
	ck_assert_uint_eq(atomic_load(&counters.retries), 1);
	ck_assert_uint_eq(atomic_load(&counters.failures), 1);

	sp = spec(3, file);
	sp.file = "nothing";  /* 404: not tried again */
	ck_assert_int_eq(fetch_get(s, &sp, buf, NULL, &err), -ENOENT);
	ck_assert_msg(strstr(err.msg, "/nothing: block 3: HTTP 404 (after 1 try)"), "%s", err.msg);

	uint64_t size = 0;
	struct fetch_spec head = {.file = "b05", .head = true};
	ck_assert_int_eq(fetch_get(s, &head, NULL, &size, &err), 0);
	ck_assert_uint_eq(size, BLOCK);
	fetch_src_free(s);
	fetcher_free(f);
}
END_TEST

START_TEST(test_fetcher_server_gone_fails_after_its_tries)
{
	struct fetcher *f;
	struct feed_err err = {0};
	char file[8], buf[BLOCK];

	kill(server, SIGKILL);  /* nothing listens on port now */
	waitpid(server, NULL, 0);
	ck_assert_int_eq(fetcher_new(NULL, &f, NULL), 0);
	struct fetch_src *s = src_on(f, port);
	struct fetch_spec sp = spec(1, file);
	ck_assert_int_eq(fetch_get(s, &sp, buf, NULL, &err), -EIO);
	ck_assert_msg(strstr(err.msg, ": block 1: ") && strstr(err.msg, "(after 2 tries)"), "%s",
		      err.msg);
	ck_assert_uint_eq(atomic_load(&counters.requests), 2);
	fetch_src_free(s);
	fetcher_free(f);
}
END_TEST

static Suite *fetcher_suite(void)
{
	Suite *s = suite_create("fetcher");
	TCase *tc = tcase_create("fetcher");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fetcher_stages_within_a_quarter_of_the_cache);
	tcase_add_test(tc, test_fetcher_failures_name_url_file_and_block);
	tcase_add_test(tc, test_fetcher_server_gone_fails_after_its_tries);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(fetcher_suite)
