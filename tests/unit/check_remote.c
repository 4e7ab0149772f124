/*
 * check_remote.c: unit tests of daemon/data/remote.c's requests (the URL,
 * the SigV4 parameters and headers libcurl is given, the S3 settings from
 * the environment and the credentials file) and of daemon/data/
 * disktier.c (what it keeps, verifies, evicts, and finds again after a
 * restart, and that puts and evictions racing on one name leave the
 * index and the directory in agreement). The HTTP itself is tested against nginx in
 * tests/integration/check_remote_http.c.
 */
#include <check.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "disktier.h"
#include "fmt.h"
#include "remote.h"

static char tmp[64];

static void setup(void)
{
	static const char *const env[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"};

	for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++)
		unsetenv(env[i]);
	strcpy(tmp, "/tmp/check_remote.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_remote_http_request_is_the_file_under_the_url)
{
	struct remote_req *q = malloc(sizeof(*q));
	struct remote_s3 s3 = {0};

	ck_assert_int_eq(remote_request("http://h:8080/data/fm", &s3, "manifest.pb", q, NULL), 0);
	ck_assert_str_eq(q->url, "http://h:8080/data/fm/manifest.pb");
	ck_assert_str_eq(q->sigv4, "");
	ck_assert_str_eq(q->userpwd, "");
	ck_assert_int_eq(remote_request("https://h/fm/", &s3, "shard-00000.fsh", q, NULL), 0);
	ck_assert_str_eq(q->url, "https://h/fm/shard-00000.fsh");
	ck_assert(remote_is_url("s3://b/p") && remote_is_url("https://h") && !remote_is_url("/data"));
	free(q);
}
END_TEST

START_TEST(test_remote_s3_request_path_style_signed_for_the_region)
{
	struct remote_req *q = malloc(sizeof(*q));
	struct remote_s3 *s3 = malloc(sizeof(*s3));
	struct feed_err err = {0};

	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", 1);
	setenv("AWS_SESSION_TOKEN", "tok", 1);
	setenv("AWS_REGION", "eu-west-3", 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
	ck_assert_int_eq(remote_s3_load(NULL, s3, &err), 0);
	ck_assert_int_eq(remote_request("s3://bucket/some/prefix/", s3, "manifest.pb", q, &err), 0);
	ck_assert_str_eq(q->url, "http://127.0.0.1:9000/bucket/some/prefix/manifest.pb");
	ck_assert_str_eq(q->sigv4, "aws:amz:eu-west-3:s3");
	ck_assert_str_eq(q->userpwd, "AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
	ck_assert_str_eq(q->token_hdr, "x-amz-security-token: tok");
	/* the payload hash S3 requires: sha256 of an empty body */
	ck_assert_str_eq(q->sha_hdr, "x-amz-content-sha256: "
			 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	/* a bucket with no prefix */
	ck_assert_int_eq(remote_request("s3://bucket", s3, "manifest.pb", q, &err), 0);
	ck_assert_str_eq(q->url, "http://127.0.0.1:9000/bucket/manifest.pb");
	ck_assert_int_eq(remote_request("s3:///x", s3, "manifest.pb", q, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "no bucket"));
	free(q);
	free(s3);
}
END_TEST

START_TEST(test_remote_s3_defaults_and_anonymous)
{
	struct remote_req *q = malloc(sizeof(*q));
	struct remote_s3 *s3 = malloc(sizeof(*s3));

	setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
	ck_assert_int_eq(remote_s3_load(NULL, s3, NULL), 0);
	ck_assert_str_eq(s3->endpoint, "https://s3.ap-south-1.amazonaws.com");
	ck_assert_int_eq(remote_request("s3://b/p", s3, "x", q, NULL), 0);
	ck_assert_str_eq(q->url, "https://s3.ap-south-1.amazonaws.com/b/p/x");
	ck_assert_str_eq(q->sigv4, "");  /* no key: a public bucket, unsigned */
	ck_assert_str_eq(q->token_hdr, "");
	unsetenv("AWS_DEFAULT_REGION");
	ck_assert_int_eq(remote_s3_load(NULL, s3, NULL), 0);
	ck_assert_str_eq(s3->region, "us-east-1");
	free(q);
	free(s3);
}
END_TEST

START_TEST(test_remote_s3_credentials_file_overrides_the_environment)
{
	struct remote_s3 *s3 = malloc(sizeof(*s3));
	struct feed_err err = {0};
	char file[128];

	setenv("AWS_ACCESS_KEY_ID", "FROMENV", 1);
	setenv("AWS_REGION", "us-west-2", 1);
	snprintf(file, sizeof(file), "%s/creds", tmp);
	FILE *f = fopen(file, "w");
	fputs("# feedd\nAWS_ACCESS_KEY_ID=FROMFILE\n  AWS_SECRET_ACCESS_KEY=s=cret\n\n", f);
	fclose(f);
	ck_assert_int_eq(remote_s3_load(file, s3, &err), 0);
	ck_assert_str_eq(s3->key_id, "FROMFILE");
	ck_assert_str_eq(s3->secret, "s=cret");
	ck_assert_str_eq(s3->region, "us-west-2");  /* not in the file: the environment's */
	f = fopen(file, "a");
	fputs("oops\n", f);
	fclose(f);
	ck_assert_int_eq(remote_s3_load(file, s3, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, ":5: not KEY=VALUE"));
	ck_assert_int_eq(remote_s3_load("/nonexistent/creds", s3, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/creds"));
	free(s3);
}
END_TEST

/* ---- the disk tier ---- */

static char block_a[100], block_b[100], block_c[100], block_d[100];

static void blocks_fill(void)
{
	memset(block_a, 'a', sizeof(block_a));
	memset(block_b, 'b', sizeof(block_b));
	memset(block_c, 'c', sizeof(block_c));
	memset(block_d, 'd', sizeof(block_d));
}

static void put(struct dtier *t, uint64_t key, const char *b)
{
	ck_assert_int_eq(dtier_put(t, key, fmt_hash(b, 100), b, 100), 0);
}

static bool has(struct dtier *t, uint64_t key, const char *b)
{
	char buf[100];
	int r = dtier_get(t, key, fmt_hash(b, 100), buf, sizeof(buf));
	if (r == 0)
		ck_assert(!memcmp(buf, b, 100));
	return r == 0;
}

static char *file_of(uint64_t key, const char *b)
{
	static char p[160];
	snprintf(p, sizeof(p), "%s/tier/%016llx-%016llx.blk", tmp, (unsigned long long)key,
		 (unsigned long long)fmt_hash(b, 100));
	return p;
}

START_TEST(test_disktier_gives_back_what_it_kept)
{
	struct dtier *t;
	struct dtier_stats st;
	char dir[128];

	blocks_fill();
	snprintf(dir, sizeof(dir), "%s/tier", tmp);
	ck_assert_int_eq(dtier_open(dir, 1 << 20, &t, NULL), 0);
	ck_assert(!has(t, 1, block_a));
	put(t, 1, block_a);
	ck_assert(has(t, 1, block_a));
	ck_assert(!has(t, 1, block_b));  /* same key, other bytes: another block */
	ck_assert(dtier_has(t, 1, fmt_hash(block_a, 100)));
	ck_assert_uint_ne(dtier_key("http://h/d", "s", 64, 100), dtier_key("http://h/d", "s", 164, 100));
	dtier_stats(t, &st);
	ck_assert_uint_eq(st.files, 1);
	ck_assert_uint_eq(st.bytes, 100);
	ck_assert_uint_eq(st.hits, 1);
	ck_assert_uint_eq(st.misses, 2);
	dtier_close(t);
}
END_TEST

START_TEST(test_disktier_drops_a_file_whose_bytes_changed)
{
	struct dtier *t;
	struct dtier_stats st;
	char dir[128];

	blocks_fill();
	snprintf(dir, sizeof(dir), "%s/tier", tmp);
	ck_assert_int_eq(dtier_open(dir, 1 << 20, &t, NULL), 0);
	put(t, 7, block_a);
	int fd = open(file_of(7, block_a), O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, "X", 1, 50), 1);
	close(fd);
	ck_assert(!has(t, 7, block_a));  /* never served */
	ck_assert_int_eq(access(file_of(7, block_a), F_OK), -1);  /* and gone */
	dtier_stats(t, &st);
	ck_assert_uint_eq(st.corrupt, 1);
	ck_assert_uint_eq(st.files, 0);
	put(t, 7, block_a);  /* fetched again, kept again */
	ck_assert(has(t, 7, block_a));
	dtier_close(t);
}
END_TEST

START_TEST(test_disktier_evicts_least_recently_used)
{
	struct dtier *t;
	char dir[128];

	blocks_fill();
	snprintf(dir, sizeof(dir), "%s/tier", tmp);
	ck_assert_int_eq(dtier_open(dir, 300, &t, NULL), 0);  /* three blocks */
	put(t, 1, block_a);
	put(t, 2, block_b);
	put(t, 3, block_c);
	ck_assert(has(t, 1, block_a));  /* a is now the most recent */
	put(t, 4, block_d);              /* b goes */
	ck_assert(!has(t, 2, block_b));
	ck_assert_int_eq(access(file_of(2, block_b), F_OK), -1);
	ck_assert(has(t, 1, block_a) && has(t, 3, block_c) && has(t, 4, block_d));
	dtier_close(t);
}
END_TEST

START_TEST(test_disktier_restart_finds_files_in_lru_order)
{
	struct dtier *t;
	struct dtier_stats st;
	char dir[128], junk[160];

	blocks_fill();
	snprintf(dir, sizeof(dir), "%s/tier", tmp);
	ck_assert_int_eq(dtier_open(dir, 1 << 20, &t, NULL), 0);
	put(t, 1, block_a);
	put(t, 2, block_b);
	put(t, 3, block_c);
	dtier_close(t);
	/* ages written out, oldest a: then a read touches a */
	struct timespec ts[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
	ck_assert_int_eq(utimensat(AT_FDCWD, file_of(1, block_a), ts, 0), 0);
	ts[0].tv_sec = ts[1].tv_sec = 2000;
	ck_assert_int_eq(utimensat(AT_FDCWD, file_of(2, block_b), ts, 0), 0);
	ts[0].tv_sec = ts[1].tv_sec = 3000;
	ck_assert_int_eq(utimensat(AT_FDCWD, file_of(3, block_c), ts, 0), 0);
	snprintf(junk, sizeof(junk), "%s/.tmp-1-2", dir);  /* a write cut short */
	close(open(junk, O_WRONLY | O_CREAT, 0600));

	ck_assert_int_eq(dtier_open(dir, 1 << 20, &t, NULL), 0);
	dtier_stats(t, &st);
	ck_assert_uint_eq(st.files, 3);
	ck_assert_uint_eq(st.bytes, 300);
	ck_assert_int_eq(access(junk, F_OK), -1);
	ck_assert(has(t, 1, block_a));  /* touched: newest on disk from now on */
	dtier_close(t);

	ck_assert_int_eq(dtier_open(dir, 200, &t, NULL), 0);  /* a smaller budget: b goes */
	ck_assert(!has(t, 2, block_b));
	ck_assert(has(t, 1, block_a) && has(t, 3, block_c));
	dtier_close(t);
}
END_TEST

/* One of the racing threads: puts and reads three blocks in turn into a
 * tier that holds two, so every put evicts one that another thread puts
 * back at once. */
static void *race_puts(void *arg)
{
	struct dtier *t = arg;
	const char *blocks[3] = {block_a, block_b, block_c};
	char buf[100];

	for (unsigned i = 0; i < 4000; i++) {
		const char *b = blocks[i % 3];
		dtier_put(t, i % 3, fmt_hash(b, 100), b, 100);
		dtier_get(t, (i + 1) % 3, fmt_hash(blocks[(i + 1) % 3], 100), buf, sizeof(buf));
	}
	return NULL;
}

static unsigned blk_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".blk") != NULL;
	closedir(d);
	return n;
}

/* An eviction unlinks a file after dropping the lock; a put of the same
 * block in between used to write the file anew and index it, and the
 * unlink then took it: an indexed block with no file (read back as
 * corrupt). A name being unlinked is now still taken. */
START_TEST(test_disktier_eviction_never_unlinks_a_fresh_put)
{
	pthread_t th[4];
	struct dtier *t;
	struct dtier_stats st;
	char dir[128];

	blocks_fill();
	snprintf(dir, sizeof(dir), "%s/tier", tmp);
	ck_assert_int_eq(dtier_open(dir, 200, &t, NULL), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, race_puts, t), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	dtier_stats(t, &st);
	ck_assert_uint_gt(st.evicted, 100);  /* the race was run */
	ck_assert_uint_eq(st.corrupt, 0);    /* no indexed file went missing */
	ck_assert_uint_eq(st.files, blk_files(dir));
	ck_assert_uint_le(st.bytes, 200);
	const char *blocks[3] = {block_a, block_b, block_c};
	for (uint64_t k = 0; k < 3; k++)  /* what the index holds reads back */
		if (dtier_has(t, k, fmt_hash(blocks[k], 100)))
			ck_assert(has(t, k, blocks[k]));
	dtier_close(t);
}
END_TEST

static Suite *remote_suite(void)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("remote");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_remote_http_request_is_the_file_under_the_url);
	tcase_add_test(tc, test_remote_s3_request_path_style_signed_for_the_region);
	tcase_add_test(tc, test_remote_s3_defaults_and_anonymous);
	tcase_add_test(tc, test_remote_s3_credentials_file_overrides_the_environment);
	tcase_add_test(tc, test_disktier_gives_back_what_it_kept);
	tcase_add_test(tc, test_disktier_drops_a_file_whose_bytes_changed);
	tcase_add_test(tc, test_disktier_evicts_least_recently_used);
	tcase_add_test(tc, test_disktier_restart_finds_files_in_lru_order);
	tcase_add_test(tc, test_disktier_eviction_never_unlinks_a_fresh_put);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(remote_suite)
