/*
 * check_cache.c: the block cache keeps within its budget when nothing is
 * pinned, never evicts a pinned block, decodes a block once however many
 * threads ask for it together, and never caches a failed decode, also for
 * a thread that waited for it; pinning many at once pins exactly the
 * cached ones, once per ask; bytes reserved outside the table count in
 * the budget.
 *
 * Linked with -Wl,--wrap=pread,--wrap=pthread_cond_wait (tests/CMakeLists.txt):
 * the wrappers below pass every call through, but let one test hold a
 * decode inside its read and see a second thread start waiting for it.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "check_util.h"

static char dir[256];
static struct fmt_dataset *ds;
static struct cache_worker wk;

static void setup(void)
{
	char tmpl[] = "/tmp/check_cache.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	snprintf(dir, sizeof(dir), "%s/ds", tmpl);
	struct fmt_schema s = {.nfields = 1};
	s.fields[0] = (struct fmt_field){.name = "x", .dtype = FEED_DTYPE_U32};
	struct fmt_writer *w;
	struct feed_err err;
	ck_assert_int_eq(fmt_writer_new(dir, &s, &(struct fmt_writer_opts){.block_records = 100}, &w,
					&err), 0);
	for (uint32_t i = 0; i < 1000; i++)
		ck_assert_int_eq(fmt_writer_add(w, &(struct fmt_value){&i, 4}, &err), 0);
	ck_assert_int_eq(fmt_writer_finish(w, &err), 0);
	fmt_writer_free(w);
	ck_assert_int_eq(fmt_dataset_open(dir, &ds, &err), 0);
	ck_assert_int_eq(fmt_decoder_new(&wk.dec), 0);
	wk.comp_cap = fmt_dataset_info(ds)->max_block_comp;
	wk.comp = malloc(wk.comp_cap);
}

static void teardown(void)
{
	char cmd[300];
	fmt_dataset_close(ds);
	fmt_decoder_free(wk.dec);
	free(wk.comp);
	snprintf(cmd, sizeof(cmd), "rm -rf %.*s", (int)(strrchr(dir, '/') - dir), dir);
	ck_assert_int_eq(system(cmd), 0);
}

static uint32_t value_at(const struct fmt_block *b, uint32_t rec)
{
	size_t len;
	uint32_t v;
	memcpy(&v, fmt_block_field(b, 0, rec, &len), 4);
	return v;
}

START_TEST(test_cache_stays_within_budget)
{
	struct cache *c;
	struct cache_stats st;
	/* each block: 100 records x 4 bytes = 400 -> 448 bytes; room for 3 */
	ck_assert_int_eq(cache_new(3 * 448, &c), 0);
	for (uint64_t b = 0; b < 10; b++) {
		const struct fmt_block *blk;
		struct cache_entry *e;
		ck_assert_int_eq(cache_get(c, ds, b, &wk, &blk, &e, NULL), 0);
		ck_assert_uint_eq(value_at(blk, 7), b * 100 + 7);
		cache_put(c, e);
	}
	cache_stats(c, &st);
	ck_assert_uint_le(st.bytes, 3 * 448);
	ck_assert_uint_eq(st.misses, 10);
	ck_assert_uint_eq(st.evictions, 7);
	/* the three most recent are hits */
	const struct fmt_block *blk;
	struct cache_entry *e;
	ck_assert_int_eq(cache_get(c, ds, 9, &wk, &blk, &e, NULL), 0);
	cache_put(c, e);
	cache_stats(c, &st);
	ck_assert_uint_eq(st.hits, 1);
	cache_free(c);
}
END_TEST

/* Bytes held outside the table (the fetcher's staged blocks) count in
 * the budget: reserving them evicts unpinned blocks, and releasing them
 * gives the room back. */
START_TEST(test_cache_reserve_counts_staged_bytes)
{
	struct cache *c;
	struct cache_stats st;

	ck_assert_int_eq(cache_new(3 * 448, &c), 0);
	for (uint64_t b = 0; b < 3; b++) {
		const struct fmt_block *blk;
		struct cache_entry *e;
		ck_assert_int_eq(cache_get(c, ds, b, &wk, &blk, &e, NULL), 0);
		cache_put(c, e);
	}
	cache_reserve(c, 2 * 448);
	cache_stats(c, &st);
	ck_assert_uint_eq(st.staged, 2 * 448);
	ck_assert_uint_eq(st.entries, 1);  /* two blocks made room */
	ck_assert_uint_le(st.bytes, 3 * 448);
	cache_release(c, 2 * 448);
	cache_stats(c, &st);
	ck_assert_uint_eq(st.staged, 0);
	ck_assert_uint_eq(st.bytes, 448);
	cache_free(c);
}
END_TEST

/* Counters per dataset name: a second dataset opened under the same name
 * adds to the same counters (a reopened dataset's metrics go on), one
 * never named counts in the totals only, and bytes follow evictions. */
START_TEST(test_cache_tally_per_name)
{
	struct cache *c;
	struct cache_tally t[4];
	struct fmt_dataset *again, *other;
	const struct fmt_block *blk;
	struct cache_entry *e;
	struct feed_err err;

	ck_assert_int_eq(cache_new(2 * 448, &c), 0);
	ck_assert_int_eq(fmt_dataset_open(dir, &again, &err), 0);
	ck_assert_int_eq(fmt_dataset_open(dir, &other, &err), 0);
	ck_assert_int_eq(cache_name(c, ds, "mnist"), 0);
	ck_assert_int_eq(cache_name(c, ds, "mnist"), -EEXIST);
	for (uint64_t b = 0; b < 3; b++) {   /* 3 misses, 1 eviction */
		ck_assert_int_eq(cache_get(c, ds, b, &wk, &blk, &e, NULL), 0);
		cache_put(c, e);
	}
	ck_assert_int_eq(cache_get(c, ds, 2, &wk, &blk, &e, NULL), 0); /* a hit */
	cache_put(c, e);
	ck_assert_int_eq(cache_name(c, again, "mnist"), 0);
	ck_assert_int_eq(cache_get(c, again, 0, &wk, &blk, &e, NULL), 0); /* a miss */
	cache_put(c, e);
	ck_assert_int_eq(cache_get(c, other, 5, &wk, &blk, &e, NULL), 0); /* unnamed */
	cache_put(c, e);
	ck_assert_uint_eq(cache_tallies(c, t, 4), 1);
	ck_assert_str_eq(t[0].name, "mnist");
	ck_assert_uint_eq(t[0].misses, 4);
	ck_assert_uint_eq(t[0].hits, 1);
	/* 2 blocks fit: of 5 loaded, 3 evicted (2 of mnist's), the other's one held */
	ck_assert_uint_eq(t[0].evictions, 3);
	ck_assert_uint_eq(t[0].bytes, 448);
	/* forgotten, ds may be named anew (a dataset at the same address) */
	cache_forget(c, ds);
	ck_assert_int_eq(cache_name(c, ds, "other"), 0);
	ck_assert_int_eq(cache_get(c, ds, 7, &wk, &blk, &e, NULL), 0);
	cache_put(c, e);
	ck_assert_uint_eq(cache_tallies(c, t, 4), 2);
	ck_assert_uint_eq(t[0].misses, 4);
	ck_assert_uint_eq(t[1].misses, 1);
	cache_free(c);
	fmt_dataset_close(again);
	fmt_dataset_close(other);
}
END_TEST

START_TEST(test_cache_pinned_block_survives)
{
	struct cache *c;
	const struct fmt_block *pinned, *blk;
	struct cache_entry *pe, *e;
	ck_assert_int_eq(cache_new(1, &c), 0); /* smaller than any block */
	ck_assert_int_eq(cache_get(c, ds, 4, &wk, &pinned, &pe, NULL), 0);
	for (uint64_t b = 0; b < 10; b++) {
		ck_assert_int_eq(cache_get(c, ds, b, &wk, &blk, &e, NULL), 0);
		cache_put(c, e);
	}
	/* still readable and right while pinned, though over budget */
	ck_assert_uint_eq(value_at(pinned, 99), 499);
	cache_put(c, pe);
	struct cache_stats st;
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 0);
	cache_free(c);
}
END_TEST

START_TEST(test_cache_pin_many)
{
	struct cache *c;
	struct cache_stats st;
	const struct fmt_block *blk[6], *b1;
	struct cache_entry *ent[6], *e1;
	/* 2 twice, 9 and 3 cached; 5 and 7 not */
	const uint64_t want[6] = {2, 5, 9, 2, 7, 3};

	ck_assert_int_eq(cache_new(4 * 448, &c), 0); /* room for 4 blocks */
	const uint64_t warm[3] = {2, 9, 3};
	for (int k = 0; k < 3; k++) {
		ck_assert_int_eq(cache_get(c, ds, warm[k], &wk, &b1, &e1, NULL), 0);
		cache_put(c, e1);
	}
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 3);
	ck_assert_uint_eq(cache_pin_many(c, ds, want, 6, blk, ent), 4);
	for (int k = 0; k < 6; k++) {
		bool cached = want[k] != 5 && want[k] != 7;
		ck_assert_msg((ent[k] != NULL) == cached, "block %llu", (unsigned long long)want[k]);
		if (cached)
			ck_assert_uint_eq(value_at(blk[k], 42), want[k] * 100 + 42);
	}
	ck_assert_ptr_eq(ent[0], ent[3]);  /* one entry, pinned twice */
	/* the misses through cache_get, as batch building does */
	ck_assert_int_eq(cache_get(c, ds, 5, &wk, &blk[1], &ent[1], NULL), 0);
	ck_assert_int_eq(cache_get(c, ds, 7, &wk, &blk[4], &ent[4], NULL), 0);
	/* five blocks pinned in a cache with room for four: none evicted */
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 5);
	ck_assert_uint_eq(st.evictions, 0);
	/* one of block 2's two pins dropped: still pinned, still not evicted */
	cache_put(c, ent[0]);
	ent[0] = NULL;
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 5);
	ck_assert_uint_eq(value_at(blk[3], 99), 299);
	cache_put_many(c, ent, 6);
	/* all unpinned: back within budget */
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 4);
	ck_assert_uint_eq(st.evictions, 1);
	ck_assert_uint_le(st.bytes, 4 * 448);
	cache_free(c);
}
END_TEST

struct race { struct cache *c; uint32_t got; };

static void *racer(void *arg)
{
	struct race *r = arg;
	struct cache_worker w = {.comp_cap = wk.comp_cap, .comp = malloc(wk.comp_cap)};
	const struct fmt_block *blk;
	struct cache_entry *e;
	fmt_decoder_new(&w.dec);
	if (cache_get(r->c, ds, 3, &w, &blk, &e, NULL) == 0) {
		r->got = value_at(blk, 1);
		cache_put(r->c, e);
	}
	fmt_decoder_free(w.dec);
	free(w.comp);
	return NULL;
}

START_TEST(test_cache_one_decode_for_many_threads)
{
	struct cache *c;
	pthread_t t[8];
	struct race r[8];
	ck_assert_int_eq(cache_new(1 << 20, &c), 0);
	for (int i = 0; i < 8; i++) {
		r[i] = (struct race){.c = c};
		pthread_create(&t[i], NULL, racer, &r[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		ck_assert_uint_eq(r[i].got, 301);
	}
	struct cache_stats st;
	cache_stats(c, &st);
	ck_assert_uint_eq(st.misses, 1);
	ck_assert_uint_eq(st.hits, 7);
	cache_free(c);
}
END_TEST

START_TEST(test_cache_failed_decode_not_cached)
{
	struct cache *c;
	const struct fmt_block *blk;
	struct cache_entry *e;
	struct feed_err err = {0};
	struct fmt_block_meta m;
	char path[300];
	ck_assert_int_eq(cache_new(1 << 20, &c), 0);
	/* flip a byte inside block 0 */
	fmt_dataset_block_meta(ds, 0, &m);
	snprintf(path, sizeof(path), "%s/shard-00000.fsh", dir);
	int fd = open(path, O_RDWR);
	uint8_t x;
	ck_assert_int_eq(pread(fd, &x, 1, 64 + m.comp_size / 2), 1);
	x ^= 1;
	ck_assert_int_eq(pwrite(fd, &x, 1, 64 + m.comp_size / 2), 1);
	ck_assert_int_eq(cache_get(c, ds, 0, &wk, &blk, &e, &err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err.msg, "block 0"));
	struct cache_stats st;
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 0);
	ck_assert_uint_eq(st.bytes, 0);
	/* still an error the second time: nothing was cached */
	ck_assert_int_eq(cache_get(c, ds, 0, &wk, &blk, &e, &err), -EBADMSG);
	x ^= 1;
	ck_assert_int_eq(pwrite(fd, &x, 1, 64 + m.comp_size / 2), 1);
	close(fd);
	ck_assert_int_eq(cache_get(c, ds, 0, &wk, &blk, &e, &err), 0);
	cache_put(c, e);
	cache_free(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A thread waiting for a decode that fails                            */

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
int __real_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);

/* What the wrappers let a test see and hold (all under hk.mu). */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;           /* any field below changed */
	bool hold_read;              /* the next pread waits for release_read */
	bool in_read;                /* a pread is being held */
	bool release_read;
	int waits;                   /* cond waits by threads marked hk_watched */
	int finished;                /* test threads done with cache_get */
} hk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static __thread bool hk_watched;   /* this thread's cond waits are counted */

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
	pthread_mutex_lock(&hk.mu);
	if (hk.hold_read) {
		hk.hold_read = false;
		hk.in_read = true;
		pthread_cond_broadcast(&hk.cv);
		while (!hk.release_read)
			__real_pthread_cond_wait(&hk.cv, &hk.mu);
		hk.in_read = false;
	}
	pthread_mutex_unlock(&hk.mu);
	return __real_pread(fd, buf, n, off);
}

/* Counts the wait before making it: the caller still holds its mutex, so
 * whatever it waits for cannot be signalled before it really waits (a
 * signaller must take that mutex first). */
int __wrap_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
	if (hk_watched) {
		pthread_mutex_lock(&hk.mu);
		hk.waits++;
		pthread_cond_broadcast(&hk.cv);
		pthread_mutex_unlock(&hk.mu);
	}
	return __real_pthread_cond_wait(cv, mu);
}

/* Waits up to 10 s (under hk.mu) until *what is at least want. */
static bool hk_await(const int *what, int want)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	while (*what < want)
		if (pthread_cond_timedwait(&hk.cv, &hk.mu, &until) != 0)
			return false;
	return true;
}

struct getter {
	struct cache *c;
	bool watched;                /* count this thread's cond waits */
	int rc;
	struct feed_err err;
	uint32_t value;              /* record 5 of block 0, on success */
	pthread_t tid;
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;
	struct cache_worker w = {.comp_cap = wk.comp_cap, .comp = malloc(wk.comp_cap)};
	const struct fmt_block *blk;
	struct cache_entry *e;

	hk_watched = g->watched;
	fmt_decoder_new(&w.dec);
	g->rc = cache_get(g->c, ds, 0, &w, &blk, &e, &g->err);
	if (g->rc == 0) {
		g->value = value_at(blk, 5);
		cache_put(g->c, e);
	}
	hk_watched = false;
	fmt_decoder_free(w.dec);
	free(w.comp);
	pthread_mutex_lock(&hk.mu);
	hk.finished++;
	pthread_cond_broadcast(&hk.cv);
	pthread_mutex_unlock(&hk.mu);
	return NULL;
}

/* Flips one bit in the middle of block 0's compressed bytes (the block's
 * frame starts at byte 64 of the shard). */
static void flip_block0(void)
{
	struct fmt_block_meta m;
	char path[300];
	uint8_t x;

	fmt_dataset_block_meta(ds, 0, &m);
	snprintf(path, sizeof(path), "%s/shard-00000.fsh", dir);
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &x, 1, 64 + m.comp_size / 2), 1);
	x ^= 1;
	ck_assert_int_eq(pwrite(fd, &x, 1, 64 + m.comp_size / 2), 1);
	close(fd);
}

/* A decodes block 0, which fails its checksum; B asks for block 0 while
 * A's read is held and waits for it. Both get -EBADMSG naming shard and
 * block; nothing stays cached or pinned; once the file is right again a
 * get decodes it afresh. */
START_TEST(test_cache_waiter_on_failed_decode)
{
	struct cache *c;
	struct cache_stats st;
	struct getter a = {0}, b = {0};

	ck_assert_int_eq(cache_new(1 << 20, &c), 0);
	flip_block0();
	a.c = b.c = c;
	b.watched = true;

	pthread_mutex_lock(&hk.mu);
	hk.hold_read = true;
	hk.release_read = false;
	hk.waits = hk.finished = 0;
	pthread_create(&a.tid, NULL, getter_main, &a);
	/* A has made the entry and is reading the block */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	while (!hk.in_read)
		ck_assert_msg(pthread_cond_timedwait(&hk.cv, &hk.mu, &until) == 0,
			      "A never read the block (is pread wrapped?)");
	pthread_mutex_unlock(&hk.mu);
	pthread_create(&b.tid, NULL, getter_main, &b);
	pthread_mutex_lock(&hk.mu);
	/* B waits for A's decode: it found the entry not ready */
	ck_assert_msg(hk_await(&hk.waits, 1), "B never waited for A's decode");
	ck_assert_int_eq(hk.finished, 0);
	hk.release_read = true;
	pthread_cond_broadcast(&hk.cv);
	ck_assert_msg(hk_await(&hk.finished, 2), "%d of 2 gets returned after the failed decode",
		      hk.finished);
	pthread_mutex_unlock(&hk.mu);
	pthread_join(a.tid, NULL);
	pthread_join(b.tid, NULL);

	ck_assert_int_eq(a.rc, -EBADMSG);
	ck_assert_int_eq(b.rc, -EBADMSG);
	ck_assert_msg(strstr(a.err.msg, "shard-00000.fsh: block 0: checksum mismatch"), "A: %s",
		      a.err.msg);
	ck_assert_msg(strstr(b.err.msg, "shard-00000.fsh: block 0: checksum mismatch"), "B: %s",
		      b.err.msg);
	/* B waited once: woken by A's failure it read the block itself */
	ck_assert_int_eq(hk.waits, 1);
	cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 0);
	ck_assert_uint_eq(st.bytes, 0);
	ck_assert_uint_eq(st.hits, 0);
	ck_assert_uint_eq(st.misses, 2);

	/* The block made right again: the next get decodes it. */
	flip_block0();
	a = (struct getter){.c = c};
	pthread_create(&a.tid, NULL, getter_main, &a);
	pthread_join(a.tid, NULL);
	ck_assert_int_eq(a.rc, 0);
	ck_assert_uint_eq(a.value, 5);
	cache_stats(c, &st);
	ck_assert_uint_eq(st.misses, 3);
	ck_assert_uint_eq(st.entries, 1);
	cache_free(c);
}
END_TEST

static Suite *cache_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("cache");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cache_stays_within_budget);
	tcase_add_test(tc, test_cache_reserve_counts_staged_bytes);
	tcase_add_test(tc, test_cache_pinned_block_survives);
	tcase_add_test(tc, test_cache_pin_many);
	tcase_add_test(tc, test_cache_tally_per_name);
	tcase_add_test(tc, test_cache_one_decode_for_many_threads);
	tcase_add_test(tc, test_cache_failed_decode_not_cached);
	tcase_add_test(tc, test_cache_waiter_on_failed_decode);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(cache_suite)
