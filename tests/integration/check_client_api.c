/*
 * check_client_api.c: promises of libfeedclient's public headers that
 * concern the API itself rather than delivery (check_delivery.c) or
 * resuming (check_resume.c), each against a real feedd serving the
 * harness's dataset as "tiny" (H_SAMPLES records: image u8[4,4] filled
 * with i, label i64 i).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

static void api_start(void)
{
	static char tiny[200];

	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, NULL});
}

/* A token that does not fit leaves buf and *ret_len as they were; one
 * that fits exactly is written whole. */
START_TEST(test_client_resume_token_enospc_writes_nothing)
{
	uint8_t tok[FEED_RESUME_MAX], again[FEED_RESUME_MAX];
	size_t len, small;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 3, 2);
	h_tiny_read(st, 2);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	ck_assert_uint_gt(len, 1);
	ck_assert_uint_le(len, FEED_RESUME_MAX);

	memset(again, 0xa5, sizeof(again));
	small = 12345;
	ck_assert_int_eq(feed_stream_resume_token(st, again, len - 1, &small), -ENOSPC);
	ck_assert_uint_eq(small, 12345);
	for (size_t i = 0; i < sizeof(again); i++)
		ck_assert_uint_eq(again[i], 0xa5);
	ck_assert_int_eq(feed_stream_resume_token(st, again, 0, &small), -ENOSPC);
	ck_assert_uint_eq(small, 12345);

	ck_assert_int_eq(feed_stream_resume_token(st, again, len, &small), 0);
	ck_assert_uint_eq(small, len);
	ck_assert_mem_eq(again, tok, len);
	ck_assert_int_eq(feed_stream_resume_token(NULL, again, len, &small), -EINVAL);
	ck_assert_uint_eq(small, len);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* The public FEED_DTYPE_* constants are the values fields and views
 * carry: the tiny dataset's image is u8, its label i64. */
START_TEST(test_client_dtype_constants_match_fields)
{
	struct feed_dataset_list *list;
	struct feed_batch *b;
	struct feed_view v;

	api_start();
	struct feed_conn *c = h_conn_new();
	ck_assert_int_eq(feed_dataset_info(c, "tiny", &list), 0);
	ck_assert_int_eq(list->datasets[0].fields[0].dtype, FEED_DTYPE_UINT8);
	ck_assert_int_eq(list->datasets[0].fields[1].dtype, FEED_DTYPE_INT64);
	feed_dataset_list_free(list);

	struct feed_stream *st = h_tiny_open(c, 2, 2);
	const struct feed_stream_info *in = feed_stream_info(st);
	ck_assert_int_eq(in->fields[0].dtype, FEED_DTYPE_UINT8);
	ck_assert_str_eq(in->fields[0].dtype_name, "u8");
	ck_assert_int_eq(in->fields[1].dtype, FEED_DTYPE_INT64);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
	ck_assert_int_eq(v.dtype, FEED_DTYPE_UINT8);
	ck_assert_int_eq(feed_batch_field(b, 1, &v), 0);
	ck_assert_int_eq(v.dtype, FEED_DTYPE_INT64);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);

	/* distinct, and the ones a reader of feed.proto expects */
	const int all[] = {FEED_DTYPE_UINT8,   FEED_DTYPE_INT8,    FEED_DTYPE_UINT16,
			   FEED_DTYPE_INT16,   FEED_DTYPE_UINT32,  FEED_DTYPE_INT32,
			   FEED_DTYPE_UINT64,  FEED_DTYPE_INT64,   FEED_DTYPE_FLOAT16,
			   FEED_DTYPE_BFLOAT16, FEED_DTYPE_FLOAT32, FEED_DTYPE_FLOAT64,
			   FEED_DTYPE_BOOLEAN, FEED_DTYPE_STRING};
	for (int i = 0; i < (int)(sizeof(all) / sizeof(all[0])); i++)
		ck_assert_int_eq(all[i], i + 1);
}
END_TEST

/* Fields are found by name, as feed_stream_info() lists them. */
START_TEST(test_client_batch_field_index_by_name)
{
	struct feed_batch *b;
	struct feed_view v;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_batch_field_index(b, "image"), 0);
	ck_assert_int_eq(feed_batch_field_index(b, "label"), 1);
	ck_assert_int_eq(feed_batch_field_index(b, "Label"), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, "label "), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, ""), -ENOENT);
	ck_assert_int_eq(feed_batch_field_index(b, NULL), -EINVAL);
	ck_assert_int_eq(feed_batch_field_index(NULL, "image"), -EINVAL);
	int i = feed_batch_field_index(b, "label");
	ck_assert_int_eq(feed_batch_field(b, (uint32_t)i, &v), 0);
	ck_assert_uint_eq(v.bytes, 8ull * feed_batch_size(b));
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* A daemon that hangs (SIGSTOP): feed_next(st, timeout_ms) returns
 * -ETIMEDOUT after the wait, naming the dataset, the wait and the credits
 * held, and leaves the stream usable once the daemon runs again. */
START_TEST(test_client_next_timeout_names_the_wait)
{
	struct feed_batch *b, *held;
	int r;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &held), 0);
	h_stop_process(h.pid);
	/* what was published before the stop still comes */
	while ((r = feed_next(st, 200, &b)) == 0 || r == FEED_END_OF_EPOCH)
		if (r == 0)
			feed_release(b);
	ck_assert_int_eq(r, -ETIMEDOUT);
	ck_assert_msg(strstr(feed_errmsg(c), "of dataset 'tiny': no batch within 200 ms "
				  "(1 of 2 credits held here)"), "%s", feed_errmsg(c));
	ck_assert_int_eq(kill(h.pid, SIGCONT), 0);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_release(held), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* The library says which version it is: the project's, which CMake also
 * gave the shared object's file name. */
START_TEST(test_client_version_is_the_projects)
{
	const char *lib = getenv("FEED_LIB");
	char path[512];

	ck_assert_ptr_nonnull(feed_version());
	ck_assert_str_eq(feed_version(), API_PROJECT_VERSION);
	ck_assert_ptr_eq(feed_version(), feed_version()); /* static */
	ck_assert_msg(lib != NULL, "FEED_LIB is not set (ctest sets it)");
	snprintf(path, sizeof(path), "%s/libfeedclient.so.%s", lib, feed_version());
	ck_assert_msg(access(path, F_OK) == 0, "%s does not exist", path);
}
END_TEST

/* feed_strerror() names a code in feedd's terms (a per-user limit is not
 * "Too many users", a stale resume token not a "Stale file handle");
 * feed_errmsg() has the daemon's words exactly, and the operating system's
 * for what the operating system refused. */
START_TEST(test_client_strerror_speaks_feedd)
{
	static const struct {
		int code;
		const char *words;
	} want[] = {
		{-EUSERS, "Per-user limit reached (connections or streams)"},
		{-ENOSPC, "Not enough room (slot memory limit, shared memory or buffer size)"},
		{-ESTALE, "Resume token does not match the dataset version or pipeline"},
		{-ENOENT, "No such dataset, stream or feedd socket"},
		{-EPROTO, "Protocol error between feedd and the client"},
		{-EINVAL, "Invalid argument or option"},
		{-EMSGSIZE, "Message larger than the protocol allows"},
		{-EPROTONOSUPPORT, "No protocol version in common with feedd"},
		{-EOPNOTSUPP, "Request not supported by feedd"},
		{-EBADMSG, "Corrupt data (a dataset block or a message)"},
		{-ENOBUFS, "No buffer left (every credit held, or a slot too small)"},
		{-ECONNRESET, "feedd closed the connection"},
		{-ECONNREFUSED, "No feedd listening on the socket"},
		{-ENOTCONN, "Not connected to feedd"},
		{-EISCONN, "Already connected to feedd"},
		{-ETIMEDOUT, "Timed out waiting for feedd"},
		{-ENOMEM, "Out of memory"},
		{-EACCES, "Permission denied"},
		{-EIO, "Input/output error"}, /* no meaning of feedd's own */
		{0, "Success"},
	};
	struct feed_dataset_list *list;
	struct feed_conn *c;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_str_eq(feed_strerror(want[i].code), want[i].words);
	ck_assert_str_eq(feed_strerror(-99999), "Unknown error");
	ck_assert_str_eq(feed_strerror(ESTALE), feed_strerror(-ESTALE));

	/* the operating system's words for its own refusal */
	ck_assert_int_eq(feed_conn_new(&c), 0);
	ck_assert_int_eq(feed_conn_open(c, h.sock), -ENOENT);
	ck_assert_msg(strstr(feed_errmsg(c), "No such file or directory"), "message: %s",
		      feed_errmsg(c));
	feed_disconnect(c);

	/* the daemon's, exactly */
	api_start();
	c = h_conn_new();
	ck_assert_int_eq(feed_dataset_info(c, "nope", &list), -ENOENT);
	ck_assert_str_eq(feed_errmsg(c), "dataset 'nope': no such dataset");
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* feed_release() on one thread while feed_next() runs on another       */

#define CR_SAMPLES 400  /* records of this test's dataset */
#define CR_BATCH 4      /* 100 batches an epoch, none padded */
#define CR_EPOCHS 3
#define CR_CREDITS 4
/* Batches one worker takes a while to build, so that the reader waits in
 * feed_next() for nearly every one while the releaser gives the previous
 * one back (with quick builds the next batch is mostly ready, and the two
 * calls seldom meet). */
#define CR_PIPE "resize(h=96, w=96)"
#define CR_BATCHES (CR_SAMPLES / CR_BATCH * CR_EPOCHS)


/* feed_batch_detach (issue 31): a held batch moves to private memory at
 * the same addresses and its slot goes back, so a reader that keeps views
 * of every batch never runs out of credits; every kept view reads what it
 * read, and the slot's later deliveries (through its alias) are right. */
START_TEST(test_client_detach_keeps_views_and_frees_the_slot)
{
	enum { N = 3 * H_SAMPLES / 2 };
	struct feed_detached *d[N];
	const uint8_t *img[N];
	const int64_t *lab[N];
	int64_t want[N];
	struct feed_batch *b;
	struct feed_view v;
	int n = 0;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 1);
	while (n < N) {
		int r = feed_next(st, H_DEADLINE_MS, &b);
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_int_eq(r, 0);
		ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
		img[n] = v.data;
		ck_assert_int_eq(feed_batch_field(b, 1, &v), 0);
		lab[n] = v.data;
		want[n] = lab[n][0];
		ck_assert_int_eq(img[n][0], (uint8_t)want[n]);
		ck_assert_int_eq(feed_batch_detach(b, &d[n]), 0);
		ck_assert_int_eq(feed_release(b), -EINVAL); /* released by the detach */
		ck_assert_int_eq(feed_batch_detach(b, &d[n]) == -EINVAL, 1);
		n++;
	}
	ck_assert_uint_eq(feed_stream_detached(st), N);
	for (int k = 0; k < N; k++) {
		ck_assert_int_eq(lab[k][0], want[k]);
		for (int i = 0; i < 16; i++)
			ck_assert_int_eq(img[k][i], (uint8_t)want[k]);
		for (int i = 0; i < 16; i++)
			ck_assert_int_eq(img[k][16 + i], (uint8_t)lab[k][1]);
		feed_detached_free(d[k]);
	}
	feed_detached_free(NULL);
	ck_assert_int_eq(feed_batch_detach(NULL, &d[0]), -EINVAL);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* feed_next_desc() gives what feed_next() and the accessors give, in one
 * call; a slot's fields stay where they were from one delivery to the
 * next; an end of epoch and a refused call write nothing. */
START_TEST(test_client_next_desc_matches_the_accessors)
{
	struct feed_batch_desc d, untouched;
	struct feed_field_span sp[3];
	uint64_t seen[2] = {0, 0};
	struct feed_batch *b;
	struct feed_view v;
	int batches = 0;

	api_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 3, 2);
	ck_assert_int_eq(feed_next_desc(st, H_DEADLINE_MS, 0, &b, &d, sp, 3), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "3 fields asked, the stream has 2"), "%s",
		      feed_errmsg(c));
	ck_assert_int_eq(feed_next_desc(st, H_DEADLINE_MS, 0, &b, &d, NULL, 2), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "NULL ret_fields"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_next_desc(st, H_DEADLINE_MS, 0, &b, NULL, sp, 2), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "NULL ret_desc"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_next_desc(NULL, H_DEADLINE_MS, 0, &b, &d, sp, 2), -EINVAL);
	for (;;) {
		memset(&d, 0xa5, sizeof(d));
		untouched = d;
		int r = feed_next_desc(st, H_DEADLINE_MS, 1000 * (uint64_t)(batches + 1), &b, &d,
				       sp, 2);
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_mem_eq(&d, &untouched, sizeof(d));
			break;
		}
		ck_assert_int_eq(r, 0);
		ck_assert_uint_eq(d.epoch, feed_batch_epoch(b));
		ck_assert_uint_eq(d.index, feed_batch_index(b));
		ck_assert_uint_eq(d.index, (uint64_t)batches);
		ck_assert_uint_eq(d.nsamples, feed_batch_size(b));
		ck_assert_uint_eq(d.padded, feed_batch_padded(b));
		ck_assert_uint_eq(d.nreplaced, feed_batch_replaced(b, NULL));
		ck_assert_uint_eq(d.ndropped, feed_batch_dropped(b));
		ck_assert_uint_lt(d.slot, 2);
		for (uint32_t f = 0; f < 2; f++) {
			ck_assert_int_eq(feed_batch_field(b, f, &v), 0);
			ck_assert_uint_eq(sp[f].data, (uintptr_t)v.data);
			ck_assert_uint_eq(sp[f].bytes, v.bytes);
		}
		ck_assert_uint_eq(sp[1].bytes, 8 * d.nsamples);
		ck_assert_int_eq(((const int64_t *)(uintptr_t)sp[1].data)[0],
				 (int64_t)feed_batch_samples(b)[0]);
		if (seen[d.slot]) /* the same slot, the same address */
			ck_assert_uint_eq(seen[d.slot], sp[0].data);
		seen[d.slot] = sp[0].data;
		ck_assert_int_eq(feed_release(b), 0);
		batches++;
	}
	ck_assert_int_eq(batches, (H_SAMPLES + 2) / 3);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* The batches the reading thread handed to the releasing one. */
struct cr_hand {
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* a batch handed over, one released, or done */
	struct feed_batch *q[CR_CREDITS]; /* at most every credit's batch */
	unsigned head, tail;
	bool done;                    /* the reader is finished */
	uint64_t released;            /* feed_release() calls that returned */
	int error;                    /* the first that did not return 0 */
	_Atomic bool in_next;         /* the reader is inside feed_next() */
	_Atomic uint64_t overlaps;    /* releases that began and ended with it set */
};

static void *cr_releaser(void *arg)
{
	struct cr_hand *hd = arg;

	pthread_mutex_lock(&hd->lock);
	for (;;) {
		while (hd->head == hd->tail && !hd->done)
			pthread_cond_wait(&hd->cond, &hd->lock);
		if (hd->head == hd->tail)
			break;
		struct feed_batch *b = hd->q[hd->tail++ % CR_CREDITS];
		pthread_mutex_unlock(&hd->lock);
		bool inside = atomic_load(&hd->in_next);
		int r = feed_release(b);
		if (inside && atomic_load(&hd->in_next))
			atomic_fetch_add(&hd->overlaps, 1);
		pthread_mutex_lock(&hd->lock);
		hd->released++;
		if (r != 0 && hd->error == 0)
			hd->error = r;
		pthread_cond_broadcast(&hd->cond);
	}
	pthread_mutex_unlock(&hd->lock);
	return NULL;
}

static struct timespec cr_deadline(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += H_DEADLINE_MS / 1000;
	return ts;
}

/* SIGKILLs feedd and starts it again on the same socket (a fresh log). */
static void cr_restart(const char *arg)
{
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.again.log", h.dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "1", NULL});
}

/* b is batch in_epoch of epoch, in order, each label its sample's index;
 * counts its samples in seen. */
static void cr_check_batch(struct feed_batch *b, uint64_t epoch, uint64_t in_epoch,
			   uint8_t seen[CR_SAMPLES])
{
	struct feed_view lab;
	int li = feed_batch_field_index(b, "label");

	ck_assert_uint_eq(feed_batch_epoch(b), epoch);
	ck_assert_uint_eq(feed_batch_index(b), in_epoch);
	ck_assert_uint_eq(feed_batch_size(b), CR_BATCH);
	ck_assert_int_ge(li, 0);
	ck_assert_int_eq(feed_batch_field(b, (uint32_t)li, &lab), 0);
	for (uint32_t i = 0; i < CR_BATCH; i++) {
		uint64_t s = feed_batch_samples(b)[i];
		int64_t label;
		ck_assert_uint_eq(s, in_epoch * CR_BATCH + i);
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		ck_assert_int_eq(label, (int64_t)s);
		seen[s]++;
	}
}

/* Every batch of every epoch comes exactly once (samples, epoch ends and
 * labels checked) while another thread releases each as it comes; the
 * reader never waits past the deadline, so a lost wake-up fails the test
 * instead of hanging it. After restart_after batches (when below
 * CR_BATCHES) feedd is killed and started again: the stream reconnects
 * while the other thread releases batches of the incarnation it leaves. */
static void cr_run(uint64_t restart_after)
{
	static uint8_t seen[CR_EPOCHS][CR_SAMPLES];
	struct cr_hand hd = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	char dir[160], arg[200];
	pthread_t th;
	uint64_t delivered = 0, epoch = 0, in_epoch = 0;
	int r;

	snprintf(dir, sizeof(dir), "%s/cr", h.dir);
	h_make_dataset(dir, CR_SAMPLES);
	snprintf(arg, sizeof(arg), "cr=%s", dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "1", NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "cr", .batch = CR_BATCH, .credits = CR_CREDITS,
				     .epochs = CR_EPOCHS, .pipeline = CR_PIPE,
				     .reconnect_ms = H_DEADLINE_MS};
	struct feed_stream *st = h_stream_open(c, &o);
	ck_assert_uint_eq(feed_stream_info(st)->credits, CR_CREDITS);
	ck_assert_int_eq(pthread_create(&th, NULL, cr_releaser, &hd), 0);

	for (;;) {
		struct feed_batch *b;
		atomic_store(&hd.in_next, true);
		int64_t t0 = h_now_ms();
		r = feed_next(st, H_DEADLINE_MS, &b);
		atomic_store(&hd.in_next, false);
		/* a batch found only when the wait ran out was never rung for */
		ck_assert_msg(h_now_ms() - t0 < H_DEADLINE_MS,
			      "feed_next waited its whole %d ms (then gave %d): a lost wake-up",
			      H_DEADLINE_MS, r);
		if (r == -ENOBUFS) {
			/* right only while every credit is with the releaser (one it
			 * gave back counts once feed_release returned): wait for one */
			struct timespec dl = cr_deadline();
			int w = 0;
			pthread_mutex_lock(&hd.lock);
			ck_assert_msg(delivered - hd.released >= CR_CREDITS,
				      "-ENOBUFS with %llu of %d credits held",
				      (unsigned long long)(delivered - hd.released), CR_CREDITS);
			while (delivered - hd.released >= CR_CREDITS && w != ETIMEDOUT)
				w = pthread_cond_timedwait(&hd.cond, &hd.lock, &dl);
			pthread_mutex_unlock(&hd.lock);
			ck_assert_msg(w != ETIMEDOUT, "no release within %d ms", H_DEADLINE_MS);
			continue;
		}
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(in_epoch, CR_SAMPLES / CR_BATCH);
			epoch++;
			in_epoch = 0;
			continue;
		}
		if (r == FEED_END_OF_STREAM)
			break;
		ck_assert_msg(r == 0, "batch %llu: %s: %s", (unsigned long long)delivered,
			      feed_strerror(r), feed_errmsg(c));
		cr_check_batch(b, epoch, in_epoch, seen[epoch]);
		in_epoch++;
		pthread_mutex_lock(&hd.lock);
		hd.q[hd.head++ % CR_CREDITS] = b; /* b is the releaser's from here on */
		delivered++;
		pthread_cond_broadcast(&hd.cond);
		pthread_mutex_unlock(&hd.lock);
		if (delivered == restart_after)
			cr_restart(arg);
	}
	pthread_mutex_lock(&hd.lock);
	hd.done = true;
	pthread_cond_broadcast(&hd.cond);
	pthread_mutex_unlock(&hd.lock);
	struct timespec dl = cr_deadline();
	ck_assert_msg(pthread_timedjoin_np(th, NULL, &dl) == 0, "the releaser is stuck");

	ck_assert_uint_eq(epoch, CR_EPOCHS);
	ck_assert_uint_eq(delivered, CR_BATCHES);
	ck_assert_uint_eq(hd.released, delivered);
	ck_assert_msg(hd.error == 0, "feed_release: %s", feed_strerror(hd.error));
	for (int e = 0; e < CR_EPOCHS; e++)
		for (int s = 0; s < CR_SAMPLES; s++)
			ck_assert_msg(seen[e][s] == 1, "epoch %d sample %d came %u times", e, s,
				      seen[e][s]);
	/* the case named came: releases that began and ended while the reader
	 * was in feed_next (nearly all of them, as measured) */
	ck_assert_uint_gt(atomic_load(&hd.overlaps), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}

START_TEST(test_client_release_from_another_thread_during_next)
{
	cr_run(UINT64_MAX);
}
END_TEST

/* The same across a daemon restart: the releasing thread gives back
 * batches of the old incarnation (the last one unmaps it) while the
 * reader reconnects and swaps in the new one (ThreadSanitizer checks the
 * incarnation's hand-over between the two). */
START_TEST(test_client_release_from_another_thread_across_a_restart)
{
	cr_run(CR_BATCHES / 3);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client_api");
	TCase *tc = tcase_create("client_api");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_client_resume_token_enospc_writes_nothing);
	tcase_add_test(tc, test_client_dtype_constants_match_fields);
	tcase_add_test(tc, test_client_batch_field_index_by_name);
	tcase_add_test(tc, test_client_next_timeout_names_the_wait);
	tcase_add_test(tc, test_client_version_is_the_projects);
	tcase_add_test(tc, test_client_strerror_speaks_feedd);
	tcase_add_test(tc, test_client_detach_keeps_views_and_frees_the_slot);
	tcase_add_test(tc, test_client_next_desc_matches_the_accessors);
	tcase_add_test(tc, test_client_release_from_another_thread_during_next);
	tcase_add_test(tc, test_client_release_from_another_thread_across_a_restart);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
