/*
 * check_resume.c: a stream's position survives the stream. A resume token
 * taken at any point continues with exactly the batches an uninterrupted
 * run delivers (same samples, same augmented bytes, same epoch ends), also
 * with another world size (same global position); a token that does not
 * fit the request is refused with the reason; and a feedd killed and
 * restarted mid-epoch under a reading client loses and repeats nothing,
 * while a daemon that stays away fails the call after the bound.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define R_SAMPLES 300   /* records in the dataset of these tests */
#define R_BATCH 16      /* 19 batches an epoch, the last one of 12 */
#define R_EPOCHS 2
#define R_MAX 256       /* batches and markers a run may hold */
#define R_PIPE "random_crop(size=4, pad=1) | hflip(p=0.5)"

/* What feed_next returned, one entry per call: a batch or a marker. */
struct r_item {
	int kind;               /* 0 batch, FEED_END_OF_EPOCH, FEED_END_OF_STREAM */
	uint64_t epoch;
	uint32_t n;
	uint64_t samples[R_BATCH];
	uint64_t hash;          /* FNV-1a over every field's bytes */
};

struct r_run {
	size_t len;
	struct r_item item[R_MAX];
};

static char r_data[160];

static void r_setup(void)
{
	h_setup();
	snprintf(r_data, sizeof(r_data), "%s/r", h.dir);
	h_make_dataset(r_data, R_SAMPLES);
}

static const char *r_arg(void)
{
	static char arg[200];
	snprintf(arg, sizeof(arg), "r=%s", r_data);
	return arg;
}

static void r_start(void)
{
	h_start((const char *[]){"--dataset", r_arg(), "--workers", "2", NULL});
}

static struct feed_stream_opts r_opts(uint32_t rank, uint32_t world)
{
	struct feed_stream_opts o = {0};
	o.dataset = "r";
	o.batch = R_BATCH;
	o.credits = 3;
	o.epochs = R_EPOCHS;
	o.seed = 11;
	o.order = FEED_ORDER_FULL;
	o.pipeline = R_PIPE;
	o.rank = rank;
	o.world = world;
	return o;
}

static uint64_t r_fnv(uint64_t h0, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h0 = (h0 ^ b[i]) * 0x100000001b3ull;
	return h0;
}

/* Records b (and releases it unless keep). */
static void r_record(struct r_run *run, struct feed_stream *st, struct feed_batch *b)
{
	struct r_item *it = &run->item[run->len++];
	const struct feed_stream_info *info = feed_stream_info(st);

	ck_assert_uint_le(run->len, R_MAX);
	it->kind = 0;
	it->epoch = feed_batch_epoch(b);
	it->n = feed_batch_size(b);
	ck_assert_uint_le(it->n, R_BATCH);
	memcpy(it->samples, feed_batch_samples(b), it->n * sizeof(uint64_t));
	it->hash = 0xcbf29ce484222325ull;
	for (uint32_t f = 0; f < info->num_fields; f++) {
		struct feed_view v;
		ck_assert_int_eq(feed_batch_field(b, f, &v), 0);
		it->hash = r_fnv(it->hash, v.data, v.bytes);
	}
}

/* Reads up to max items (batches and markers) from st into run; stops
 * after END_OF_STREAM. Returns what the last feed_next returned. */
static int r_read(struct feed_conn *c, struct feed_stream *st, struct r_run *run, size_t max)
{
	for (size_t k = 0; k < max; k++) {
		struct feed_batch *b;
		int r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r >= 0, "feed_next: %s: %s", feed_strerror(r), feed_errmsg(c));
		if (r == 0) {
			r_record(run, st, b);
			ck_assert_int_eq(feed_release(b), 0);
			continue;
		}
		run->item[run->len].kind = r;
		run->len++;
		if (r == FEED_END_OF_STREAM)
			return r;
	}
	return 0;
}

/* Asserts b is a with item `skip` left out (SIZE_MAX: nothing). */
static void r_assert_same_but(const struct r_run *a, const struct r_run *b, size_t skip)
{
	ck_assert_uint_eq(a->len - (skip < a->len), b->len);
	for (size_t i = 0, j = 0; i < a->len; i++, j++) {
		if (i == skip && ++i == a->len)
			break;
		const struct r_item *x = &a->item[i], *y = &b->item[j];
		ck_assert_msg(x->kind == y->kind, "item %zu: kind %d vs %d", i, x->kind, y->kind);
		if (x->kind)
			continue;
		ck_assert_msg(x->epoch == y->epoch && x->n == y->n &&
			      !memcmp(x->samples, y->samples, x->n * sizeof(uint64_t)),
			      "item %zu: epoch %llu/%llu, samples differ", i,
			      (unsigned long long)x->epoch, (unsigned long long)y->epoch);
		ck_assert_msg(x->hash == y->hash, "item %zu: same samples, other bytes", i);
	}
}

static void r_assert_same(const struct r_run *a, const struct r_run *b)
{
	r_assert_same_but(a, b, SIZE_MAX);
}

/* The uninterrupted run every other run is compared with. */
static void r_reference(struct feed_conn *c, struct r_run *ref)
{
	struct feed_stream_opts o = r_opts(0, 1);
	struct feed_stream *st;

	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	ck_assert_int_eq(r_read(c, st, ref, R_MAX), FEED_END_OF_STREAM);
	ck_assert_int_eq(feed_stream_close(st), 0);
	/* 19 batches and an end each epoch, and the end of the stream */
	ck_assert_uint_eq(ref->len, R_EPOCHS * 20 + 1);
}

/* Stops after k items at several points (start, mid-epoch, just before
 * and just after an epoch's end, in the second epoch) and resumes through
 * a token in a new stream on a new connection. A token taken after an
 * epoch's last batch resumes with the next epoch's first batch: the
 * END_OF_EPOCH of the epoch the first stream finished is not delivered
 * again (the trainer's end-of-epoch work must not run twice). */
START_TEST(test_resume_token_continues_exactly)
{
	static struct r_run ref, run;
	const size_t cut[] = {0, 1, 7, 18, 19, 20, 26, 39};
	struct feed_conn *c;

	r_start();
	c = h_conn_new();
	r_reference(c, &ref);
	for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
		struct feed_stream_opts o = r_opts(0, 1);
		struct feed_stream *st;
		uint8_t tok[FEED_RESUME_MAX];
		size_t len;

		run.len = 0;
		ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
		r_read(c, st, &run, cut[i]);
		ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
		ck_assert_int_eq(feed_stream_close(st), 0);
		/* a token is portable: use it on another connection */
		struct feed_conn *c2 = h_conn_new();
		o.resume = tok;
		o.resume_len = len;
		int r = feed_stream_open(c2, &o, &st);
		ck_assert_msg(r == 0, "open at cut %zu: %s", cut[i], feed_errmsg(c2));
		ck_assert_int_eq(r_read(c2, st, &run, R_MAX), FEED_END_OF_STREAM);
		ck_assert_int_eq(feed_stream_close(st), 0);
		feed_disconnect(c2);
		bool at_end = cut[i] > 0 && ref.item[cut[i] - 1].kind == 0 &&
			      ref.item[cut[i]].kind == FEED_END_OF_EPOCH;
		r_assert_same_but(&ref, &run, at_end ? cut[i] : SIZE_MAX);
	}
	feed_disconnect(c);
}
END_TEST

/* Reads k batches of a fresh stream (and the epoch ends between them, not
 * one after the k-th) and returns its token in tok. */
static size_t r_token_after(struct feed_conn *c, int k, uint8_t *tok)
{
	struct feed_stream_opts o = r_opts(0, 1);
	struct feed_stream *st;
	size_t len;

	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	for (int i = 0; i < k;) {
		struct feed_batch *b;
		int r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r == 0 || r == FEED_END_OF_EPOCH, "feed_next: %d", r);
		if (r == 0) {
			ck_assert_int_eq(feed_release(b), 0);
			i++;
		}
	}
	ck_assert_int_eq(feed_stream_resume_token(st, tok, FEED_RESUME_MAX, &len), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	return len;
}

/* A resumed stream says where it starts, and its batches carry their true
 * epoch and index: batch 7 is batch 7 of an epoch of 19, not batch 0 of
 * one of 12; after an epoch's last batch, batch 0 of the next epoch comes
 * first, with no END_OF_EPOCH before it. */
START_TEST(test_resume_positions_are_true)
{
	struct feed_conn *c;
	uint8_t tok[FEED_RESUME_MAX];
	const struct {
		int read;
		uint64_t epoch, index;
	} cases[] = {{7, 0, 7}, {19, 1, 0}, {19 + 3, 1, 3}};

	r_start();
	c = h_conn_new();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct feed_stream_opts o = r_opts(0, 1);
		struct feed_stream *st;
		struct feed_batch *b;

		o.resume = tok;
		o.resume_len = r_token_after(c, cases[i].read, tok);
		ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
		const struct feed_stream_info *info = feed_stream_info(st);
		ck_assert_uint_eq(info->batches_per_epoch, 19);
		ck_assert_uint_eq(info->start_epoch, cases[i].epoch);
		ck_assert_uint_eq(info->start_batch, cases[i].index);
		int r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r == 0, "case %zu: feed_next gave %d", i, r);
		ck_assert_uint_eq(feed_batch_epoch(b), cases[i].epoch);
		ck_assert_uint_eq(feed_batch_index(b), cases[i].index);
		ck_assert_int_eq(feed_release(b), 0);
		ck_assert_int_eq(feed_stream_close(st), 0);
	}
	/* after the last epoch's last batch there is nothing but the end */
	struct feed_stream_opts o = r_opts(0, 1);
	struct feed_stream *st;
	struct feed_batch *b;
	o.resume = tok;
	o.resume_len = r_token_after(c, 2 * 19, tok);
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), FEED_END_OF_STREAM);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* A token from a world-1 stream, opened by 2 ranks: together they deliver
 * the rest of the epoch from the same global position. */
START_TEST(test_resume_other_world_size)
{
	static struct r_run ref;
	struct feed_conn *c;
	uint8_t tok[FEED_RESUME_MAX];
	size_t len, cut = 5;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);
	uint8_t want[R_SAMPLES] = {0}, got[R_SAMPLES] = {0};

	r_start();
	c = h_conn_new();
	r_reference(c, &ref);
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	static struct r_run head;
	r_read(c, st, &head, cut);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	for (size_t i = cut; ref.item[i].kind == 0; i++)
		for (uint32_t k = 0; k < ref.item[i].n; k++)
			if (ref.item[i].samples[k] < R_SAMPLES)
				want[ref.item[i].samples[k]] = 1;
	for (uint32_t rank = 0; rank < 2; rank++) {
		o = r_opts(rank, 2);
		o.resume = tok;
		o.resume_len = len;
		int r = feed_stream_open(c, &o, &st);
		ck_assert_msg(r == 0, "rank %u: %s", rank, feed_errmsg(c));
		/* the rest of epoch 0 only */
		for (;;) {
			struct feed_batch *b;
			r = feed_next(st, H_DEADLINE_MS, &b);
			ck_assert_int_ge(r, 0);
			if (r != 0)
				break;
			ck_assert_uint_eq(feed_batch_epoch(b), 0);
			for (uint32_t k = 0; k < feed_batch_size(b); k++) {
				uint64_t s = feed_batch_samples(b)[k];
				ck_assert_uint_lt(s, R_SAMPLES);
				got[s] = 1;
			}
			feed_release(b);
		}
		ck_assert_int_eq(r, FEED_END_OF_EPOCH);
		feed_stream_close(st);
	}
	/* every sample the world-1 run had left is delivered by the ranks;
	 * nothing from before the cut comes back except as padding */
	size_t extra = 0;
	for (uint32_t s = 0; s < R_SAMPLES; s++) {
		ck_assert_msg(!want[s] || got[s], "sample %u is lost", s);
		extra += got[s] && !want[s];
	}
	ck_assert_uint_le(extra, 2 * R_BATCH);
	feed_disconnect(c);
}
END_TEST

/* The samples of run's batches one after another, epoch by epoch. */
static size_t r_flat(const struct r_run *run, uint64_t *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < run->len; i++)
		for (uint32_t k = 0; run->item[i].kind == 0 && k < run->item[i].n; k++) {
			ck_assert_uint_lt(n, cap);
			out[n++] = run->item[i].samples[k];
		}
	return n;
}

/* A token taken after 3 batches of 16 (global position 48) resumes with
 * another per-rank batch size: one that divides 48 (8, 12: a batch
 * boundary of the new layout) and one that does not (10: the rest of the
 * epoch laid out from 48). Each continues with the samples an
 * uninterrupted run reads from position 48 on, epoch after epoch; the
 * batch's own augmentation bytes follow the sample (checked by the
 * continuation test), so the samples say it all. */
START_TEST(test_resume_other_batch_size)
{
	static struct r_run ref, head, run;
	static uint64_t want[R_EPOCHS * R_SAMPLES], got[R_EPOCHS * R_SAMPLES];
	static const uint32_t batches[] = {8, 12, 10};
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);
	uint8_t tok[FEED_RESUME_MAX];
	size_t len;

	r_start();
	c = h_conn_new();
	r_reference(c, &ref);
	size_t nwant = r_flat(&ref, want, sizeof(want) / sizeof(want[0]));
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	r_read(c, st, &head, 3);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	feed_stream_close(st);
	for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
		struct feed_stream_opts m = o;
		m.batch = batches[i];
		m.resume = tok;
		m.resume_len = len;
		int r = feed_stream_open(c, &m, &st);
		ck_assert_msg(r == 0, "batch %u: %s: %s", batches[i], feed_strerror(r), feed_errmsg(c));
		memset(&run, 0, sizeof(run));
		ck_assert_int_eq(r_read(c, st, &run, R_MAX), FEED_END_OF_STREAM);
		feed_stream_close(st);
		size_t n = r_flat(&run, got, sizeof(got) / sizeof(got[0]));
		ck_assert_uint_eq(n, nwant - 48);
		ck_assert_msg(!memcmp(got, want + 48, n * sizeof(got[0])),
			      "batch %u continues from global position 48", batches[i]);
	}
	feed_disconnect(c);
}
END_TEST

static void r_expect_refused(struct feed_conn *c, const struct feed_stream_opts *o, int code,
			     const char *needle)
{
	struct feed_stream *st = NULL;
	int r = feed_stream_open(c, o, &st);
	ck_assert_msg(r == code, "expected %s, got %s (%s)", feed_strerror(code), feed_strerror(r),
		      feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), needle), "message '%s' lacks '%s'", feed_errmsg(c),
		      needle);
}

START_TEST(test_resume_mismatch_refused)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);
	uint8_t tok[FEED_RESUME_MAX], junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	size_t len;

	r_start();
	c = h_conn_new();
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	static struct r_run run;
	r_read(c, st, &run, 3);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, 4, &len), -ENOSPC);
	ck_assert_int_eq(feed_stream_resume_token(st, tok, sizeof(tok), &len), 0);
	feed_stream_close(st);

	struct feed_stream_opts m = o;
	m.resume = tok;
	m.resume_len = len;
	m.seed = 12;
	r_expect_refused(c, &m, -EINVAL, "seed");
	m = o;
	m.resume = tok;
	m.resume_len = len;
	m.pipeline = "hflip(p=0.5)";
	r_expect_refused(c, &m, -ESTALE, "pipeline");
	m = o;
	m.resume = junk;
	m.resume_len = sizeof(junk);
	r_expect_refused(c, &m, -EINVAL, "not a feedd resume token");
	/* the connection still serves */
	m = o;
	m.resume = tok;
	m.resume_len = len;
	ck_assert_int_eq(feed_stream_open(c, &m, &st), 0);
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

/* SIGKILLs the daemon and starts a new one on the same socket, with a
 * fresh log (h_start waits for "ready:" in it). */
static void r_restart(int nth)
{
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.%d.log", h.dir, nth);
	r_start();
}

/* A client reading (and holding a batch) while feedd is killed and
 * restarted twice gets exactly the uninterrupted sequence; the batch it
 * held across the restart stays readable. */
START_TEST(test_restart_loses_and_repeats_nothing)
{
	static struct r_run ref, run;
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);

	r_start();
	c = h_conn_new();
	r_reference(c, &ref);
	o.reconnect_ms = H_DEADLINE_MS;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	r_read(c, st, &run, 6);

	/* hold one batch across the first restart */
	struct feed_batch *held;
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &held), 0);
	r_record(&run, st, held);
	uint64_t held_hash = run.item[run.len - 1].hash;
	r_restart(1);
	r_read(c, st, &run, 20);
	struct feed_view v;
	ck_assert_int_eq(feed_batch_field(held, 0, &v), 0);
	uint64_t again = r_fnv(0xcbf29ce484222325ull, v.data, v.bytes);
	ck_assert_int_eq(feed_batch_field(held, 1, &v), 0);
	again = r_fnv(again, v.data, v.bytes);
	ck_assert_msg(again == held_hash, "a batch held across the restart changed");
	ck_assert_int_eq(feed_release(held), 0);
	ck_assert_int_eq(feed_release(held), -EINVAL);

	r_restart(2);
	ck_assert_int_eq(r_read(c, st, &run, R_MAX), FEED_END_OF_STREAM);
	ck_assert_int_eq(feed_stream_close(st), 0);
	r_assert_same(&ref, &run);
	feed_disconnect(c);
}
END_TEST

/* A daemon that does not come back: feed_next fails after the bound, with
 * a message that says so, and keeps failing. */
START_TEST(test_restart_bound)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);
	struct feed_batch *b;
	static struct r_run run;

	r_start();
	c = h_conn_new();
	o.reconnect_ms = 400;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	r_read(c, st, &run, 2);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	/* batches published before the kill are still delivered */
	int r;
	int64_t t0 = h_now_ms();
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH)
		if (r == 0)
			feed_release(b);
	int64_t took = h_now_ms() - t0;
	ck_assert_msg(r == -ECONNRESET, "got %s: %s", feed_strerror(r), feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "was not back within 400 ms"), "message: %s",
		      feed_errmsg(c));
	/* the whole deadline is waited out (it gave up a back-off step early) */
	ck_assert_msg(took >= 400 && took < 10000, "gave up after %lld ms",
		      (long long)took);
	ck_assert_int_eq(feed_next(st, 0, &b), -ECONNRESET);

	/* with reconnecting off, the first failure is final */
	snprintf(h.log, sizeof(h.log), "%s/feedd.again.log", h.dir);
	r_start();
	feed_stream_close(st);
	feed_disconnect(c);
	c = h_conn_new();
	o.reconnect_ms = -1;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH)
		if (r == 0)
			feed_release(b);
	ck_assert_int_eq(r, -ECONNRESET);
	ck_assert_msg(strstr(feed_errmsg(c), "reconnecting is off"), "message: %s",
		      feed_errmsg(c));
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

/* feedd comes back without the stream's dataset (a reload removed it,
 * then feedd restarted): its refusal is final, so feed_next fails at once
 * with feedd's own words instead of retrying for the whole reconnect
 * window and then blaming a feedd that "was not back". */
START_TEST(test_restart_refusal_is_final)
{
	static struct r_run run;
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_stream_opts o = r_opts(0, 1);
	struct feed_batch *b;
	char other[200];
	int r;

	r_start();
	c = h_conn_new();
	o.reconnect_ms = 120000;  /* far longer than the test may take */
	ck_assert_int_eq(feed_stream_open(c, &o, &st), 0);
	r_read(c, st, &run, 2);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.without.log", h.dir);
	snprintf(other, sizeof(other), "other=%s", r_data);
	h_start((const char *[]){"--dataset", other, "--workers", "2", NULL});
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH)
		if (r == 0)
			feed_release(b);
	ck_assert_msg(r == -ENOENT, "got %s: %s", feed_strerror(r), feed_errmsg(c));
	ck_assert_msg(strstr(feed_errmsg(c), "feedd came back but the stream could not be "
			     "reopened: dataset 'r': no such dataset"), "message: %s", feed_errmsg(c));
	ck_assert_int_eq(feed_next(st, 0, &b), -ENOENT);  /* sticky */
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("resume");
	TCase *tc = tcase_create("resume");

	tcase_add_checked_fixture(tc, r_setup, h_teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_resume_token_continues_exactly);
	tcase_add_test(tc, test_resume_other_world_size);
	tcase_add_test(tc, test_resume_positions_are_true);
	tcase_add_test(tc, test_resume_mismatch_refused);
	tcase_add_test(tc, test_resume_other_batch_size);
	tcase_add_test(tc, test_restart_loses_and_repeats_nothing);
	tcase_add_test(tc, test_restart_bound);
	tcase_add_test(tc, test_restart_refusal_is_final);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
