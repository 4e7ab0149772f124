/*
 * check_client_nomem.c: libfeedclient when memory runs out while
 * feed_next() reconnects after a feedd restart, with a batch held. The
 * header promises that batches held across a restart stay valid until
 * released, and that the library returns -ENOMEM rather than failing its
 * host: so whichever allocation of the reconnection fails, the held batch
 * keeps its bytes, releases once, and the stream goes on where it was.
 *
 * How: this program defines calloc(), which the dynamic linker binds
 * libfeedclient's calls to (as it would an LD_PRELOAD allocator); it
 * forwards to the next calloc (the C library's, or the sanitizer's) and,
 * when armed, fails the k-th call. The library itself has no test hook.
 * The test fails the 1st, 2nd, ... call of the reconnection until one
 * reconnection makes fewer calls than that.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define NM_BATCH 3      /* 4 batches an epoch of the H_SAMPLES dataset */
#define NM_MAX_K 64     /* more callocs than a reconnection could make */

static void *(*nm_next_calloc)(size_t, size_t);
static _Atomic long nm_calls;    /* callocs since nm_arm() */
static _Atomic long nm_fail_at;  /* the call to fail (1-based); 0: none */
static _Atomic bool nm_failed;   /* the armed call came and failed */

/* Replaces the C library's calloc for this whole process (exported: the
 * build hides symbols by default, and a hidden one binds nobody else). */
__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
	if (!nm_next_calloc) {
		/* dlsym does not allocate on success (glibc >= 2.34), so this
		 * does not recurse */
		nm_next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
		if (!nm_next_calloc)
			abort();
	}
	long fail_at = atomic_load(&nm_fail_at);
	if (fail_at > 0 && atomic_fetch_add(&nm_calls, 1) + 1 == fail_at) {
		atomic_store(&nm_failed, true);
		errno = ENOMEM;
		return NULL;
	}
	return nm_next_calloc(n, size);
}

static void nm_arm(long k)
{
	atomic_store(&nm_calls, 0);
	atomic_store(&nm_failed, false);
	atomic_store(&nm_fail_at, k);
}

static void nm_disarm(void)
{
	atomic_store(&nm_fail_at, 0);
}

/* Where the stream is: the epoch and the number of batches delivered in
 * it, which in sequential order fixes each sample of the next batch. */
struct nm_pos {
	uint64_t epoch, index, per_epoch;
};

/* feed_next, stepping over epoch ends (which must come exactly after an
 * epoch's last batch); a batch must hold the samples due at *p, which
 * then moves on. */
static int nm_next(struct feed_stream *st, struct nm_pos *p, struct feed_batch **ret)
{
	for (;;) {
		int r = feed_next(st, H_DEADLINE_MS, ret);
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(p->index, p->per_epoch);
			p->epoch++;
			p->index = 0;
			continue;
		}
		if (r != 0)
			return r;
		const uint64_t *s = feed_batch_samples(*ret);
		ck_assert_uint_eq(feed_batch_epoch(*ret), p->epoch);
		ck_assert_uint_eq(feed_batch_size(*ret), NM_BATCH);
		for (uint32_t i = 0; i < NM_BATCH; i++)
			ck_assert_msg(s[i] == (NM_BATCH * p->index + i) % H_SAMPLES,
				      "epoch %llu batch %llu: sample %llu where %llu was due",
				      (unsigned long long)p->epoch, (unsigned long long)p->index,
				      (unsigned long long)s[i],
				      (unsigned long long)((NM_BATCH * p->index + i) % H_SAMPLES));
		p->index++;
		return 0;
	}
}

/* One round: hold a batch, restart feedd, fail the k-th calloc of the
 * reconnection. True when the reconnection made fewer than k callocs
 * (nothing failed: every allocation of the path has been failed once). */
static bool nm_round(long k, const char *tiny_arg)
{
	/* pad_last: every batch full, so each sample due is (batch * index + i) mod N */
	struct feed_stream_opts o = {.dataset = "tiny", .batch = NM_BATCH, .credits = 2,
				     .pad_last = true,
				     .reconnect_ms = H_DEADLINE_MS};
	struct feed_batch *held, *b;
	bool complete = false;
	int r;

	snprintf(h.log, sizeof(h.log), "%s/feedd.k%ld.log", h.dir, k);
	h_start((const char *[]){"--dataset", tiny_arg, NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_stream_open(c, &o);
	struct nm_pos pos = {.per_epoch = feed_stream_info(st)->batches_per_epoch};
	ck_assert_uint_eq(pos.per_epoch, (H_SAMPLES + NM_BATCH - 1) / NM_BATCH);

	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(nm_next(st, &pos, &b), 0);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(nm_next(st, &pos, &held), 0);
	h_tiny_check(held);

	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.k%ld.again.log", h.dir, k);
	h_start((const char *[]){"--dataset", tiny_arg, NULL});

	/* batches published before the kill come first, without allocating;
	 * the call that reconnects is the one that allocates */
	nm_arm(k);
	for (int taken = 0;; taken++) {
		/* the dead daemon published at most one more batch than held */
		ck_assert_msg(taken < 2, "feed_next delivered %d batches without reconnecting",
			      taken);
		r = nm_next(st, &pos, &b);
		h_tiny_check(held); /* its regions must still be mapped */
		if (atomic_load(&nm_failed) || r != 0)
			break;
		h_tiny_check(b);
		ck_assert_int_eq(feed_release(b), 0);
		if (atomic_load(&nm_calls) > 0) {
			complete = true; /* reconnected, and calloc #k never came */
			break;
		}
	}
	nm_disarm();
	if (!complete) {
		ck_assert_msg(atomic_load(&nm_failed), "feed_next: %s: %s", feed_strerror(r),
			      feed_errmsg(c));
		ck_assert_msg(r == -ENOMEM, "calloc #%ld failed: feed_next gave %s: %s", k,
			      feed_strerror(r), feed_errmsg(c));
		ck_assert_msg(strstr(feed_errmsg(c), "out of memory"), "message: %s",
			      feed_errmsg(c));
	}
	h_tiny_check(held);
	ck_assert_int_eq(feed_release(held), 0);
	ck_assert_int_eq(feed_release(held), -EINVAL);
	if (!complete) {
		/* memory is back: the next call reconnects, at the same place */
		r = nm_next(st, &pos, &b);
		ck_assert_msg(r == 0, "after calloc #%ld failed: %s: %s", k, feed_strerror(r),
			      feed_errmsg(c));
		h_tiny_check(b);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(nm_next(st, &pos, &b), 0);
	h_tiny_check(b);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	ck_assert_int_eq(h_stop(), 0);
	return complete;
}

START_TEST(test_client_reconnect_nomem_keeps_held_batches)
{
	char tiny_arg[200];
	long k;

	snprintf(tiny_arg, sizeof(tiny_arg), "tiny=%s", h.data);
	for (k = 1; k < NM_MAX_K; k++)
		if (nm_round(k, tiny_arg))
			break;
	/* the stream, its schema and its batches at least */
	ck_assert_msg(k > 3 && k < NM_MAX_K, "a reconnection made %ld callocs", k - 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client_nomem");
	TCase *tc = tcase_create("client_nomem");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_client_reconnect_nomem_keeps_held_batches);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
