/*
 * check_partition.c: order, partition and randomness through a real feedd
 * (DESIGN.md "Order, partition, randomness, resume"): the same stream spec
 * gives the same bytes, run twice and with one worker or two; ranks of
 * world 2 and 3 with drop_last, with padding and in eval mode read the
 * global positions torch's DistributedSampler gives them, with the union
 * and multiplicity it specifies.
 *
 * main() packs the Fashion-MNIST test split (10 000 images) once for the
 * determinism test; the partition test writes its own small dataset.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/stream.h"
#include "feedd_harness.h"

static char fm_dir[128];   /* the packed test split */

/* ------------------------------------------------------------------ */
/* Test 7: determinism                                                 */

#define DET_PIPELINE "random_crop(size=28, pad=2) | hflip(p=0.5)"
#define DET_EPOCHS 2
#define DET_MAX_BATCHES 128

/* FNV-1a, 64 bits: enough to tell batches apart. */
static uint64_t fnv(uint64_t x, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		x = (x ^ b[i]) * 0x100000001b3ull;
	return x;
}

struct det_run {
	uint64_t n;                          /* batches */
	uint64_t hash[DET_MAX_BATCHES];      /* position, samples and bytes */
	uint64_t samples[DET_MAX_BATCHES];   /* samples only */
};

/* Streams DET_EPOCHS epochs of the spec and hashes every batch. */
static void det_read(uint64_t seed, const char *pipeline, struct det_run *out)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "fashion", .batch = 256, .epochs = DET_EPOCHS,
				     .seed = seed, .order = FEED_ORDER_FULL, .pipeline = pipeline};
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_batch *b;
	int r;

	memset(out, 0, sizeof(*out));
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		ck_assert_uint_lt(out->n, DET_MAX_BATCHES);
		uint64_t pos[2] = {feed_batch_epoch(b), feed_batch_index(b)};
		uint32_t n = feed_batch_size(b);
		uint64_t hs = fnv(0xcbf29ce484222325ull, feed_batch_samples(b), 8ull * n);
		uint64_t x = fnv(hs, pos, sizeof(pos));
		for (uint32_t f = 0; f < feed_stream_info(st)->num_fields; f++) {
			struct feed_view v;
			ck_assert_int_eq(feed_batch_field(b, f, &v), 0);
			x = fnv(x, v.data, v.bytes);
		}
		out->samples[out->n] = hs;
		out->hash[out->n++] = x;
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(out->n, DET_EPOCHS * ((10000 + 255) / 256));
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}

static void det_start(const char *workers)
{
	static char arg[160];

	snprintf(arg, sizeof(arg), "fashion=%s", fm_dir);
	h_start((const char *[]){"--dataset", arg, "--workers", workers, NULL});
}

static void det_same(const struct det_run *a, const struct det_run *b, const char *what)
{
	ck_assert_uint_eq(a->n, b->n);
	for (uint64_t i = 0; i < a->n; i++)
		ck_assert_msg(a->hash[i] == b->hash[i], "%s: batch %llu differs", what,
			      (unsigned long long)i);
}

START_TEST(test_partition_same_spec_same_bytes)
{
	static struct det_run a, b, other_seed, plain, one_worker;
	char old[160];
	uint64_t differ = 0;

	det_start("2");
	det_read(1234, DET_PIPELINE, &a);
	det_read(1234, DET_PIPELINE, &b);
	det_same(&a, &b, "the same spec twice");
	/* The draws depend on the seed, and the pipeline does change bytes:
	 * the same order without it gives other bytes. */
	det_read(1235, DET_PIPELINE, &other_seed);
	for (uint64_t i = 0; i < a.n; i++)
		differ += a.hash[i] != other_seed.hash[i];
	ck_assert_uint_eq(differ, a.n);
	det_read(1234, NULL, &plain);
	differ = 0;
	for (uint64_t i = 0; i < a.n; i++) {
		ck_assert_uint_eq(a.samples[i], plain.samples[i]);
		differ += a.hash[i] != plain.hash[i];
	}
	ck_assert_uint_eq(differ, a.n);
	/* One worker instead of two: the same bytes. */
	ck_assert_int_eq(h_stop(), 0);
	snprintf(old, sizeof(old), "%s.1", h.log);
	ck_assert_int_eq(rename(h.log, old), 0);
	det_start("1");
	det_read(1234, DET_PIPELINE, &one_worker);
	det_same(&a, &one_worker, "--workers 1 against --workers 2");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 8: ranks                                                       */

#define PART_N 103   /* a prime: no world size or batch divides it */
#define PART_B 8

enum part_mode { PART_DROP_LAST, PART_PAD, PART_EVAL };

static const char *const part_mode_name[] = {"drop_last", "padding", "eval"};

/* Global positions an epoch covers, over all ranks. */
static uint64_t part_total(enum part_mode m, uint32_t world)
{
	uint64_t rb = (uint64_t)world * PART_B;

	if (m == PART_DROP_LAST)
		return PART_N / rb * rb;
	if (m == PART_PAD)
		return (PART_N + rb - 1) / rb * rb;
	return PART_N;
}

/* Reads every batch of epochs [0, 2) of rank `rank` into at[epoch][global
 * position], checking sizes, flags and bytes on the way. */
static void part_rank(struct feed_conn *c, enum part_mode m, int order, uint32_t rank,
		      uint32_t world, int64_t at[2][PART_N * 2])
{
	struct feed_stream_opts o = {.dataset = "part", .batch = PART_B, .epochs = 2, .seed = 9,
				     .order = order, .rank = rank, .world = world,
				     .drop_last = m == PART_DROP_LAST, .eval = m == PART_EVAL};
	struct feed_stream *st = h_stream_open(c, &o);
	uint64_t total = part_total(m, world);
	/* this rank's samples: positions rank, rank + world, ... below total */
	uint64_t mine = (total - rank + world - 1) / world;
	uint64_t nb = (mine + PART_B - 1) / PART_B, got = 0;
	struct feed_batch *b;
	int r;

	ck_assert_uint_eq(feed_stream_info(st)->batches_per_epoch, nb);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(got % nb, 0);
			continue;
		}
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		uint64_t e = got / nb, bi = got % nb;
		uint32_t n = feed_batch_size(b);
		const uint64_t *idx = feed_batch_samples(b);
		struct feed_view img, lab;
		bool padded = false;
		ck_assert_uint_eq(feed_batch_epoch(b), e);
		ck_assert_uint_eq(feed_batch_index(b), bi);
		/* full batches, but for eval's last one */
		ck_assert_uint_eq(n, bi + 1 < nb ? PART_B : mine - bi * PART_B);
		ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
		ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
		for (uint32_t i = 0; i < n; i++) {
			/* DistributedSampler: rank r takes r, r + R, r + 2R, ... */
			uint64_t g = (bi * PART_B + i) * world + rank;
			int64_t label;
			ck_assert_uint_lt(g, total);
			ck_assert_int_eq(at[e][g], -1);
			ck_assert_uint_lt(idx[i], PART_N);
			at[e][g] = (int64_t)idx[i];
			padded |= g >= PART_N;
			ck_assert_uint_eq(((const uint8_t *)img.data)[16 * i], idx[i] & 0xff);
			memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
			ck_assert_int_eq(label, (int64_t)idx[i]);
		}
		ck_assert_int_eq(feed_batch_padded(b), padded);
		ck_assert_int_eq(feed_release(b), 0);
		got++;
	}
	ck_assert_uint_eq(got, 2 * nb);
	ck_assert_int_eq(feed_stream_close(st), 0);
}

/* Every rank of a world: the union of an epoch and each sample's count. */
static void part_world(struct feed_conn *c, enum part_mode m, int order, uint32_t world,
		       int64_t at[2][PART_N * 2])
{
	uint64_t total = part_total(m, world);

	memset(at, 0xff, 2 * sizeof(at[0]));   /* -1: no rank read it */
	for (uint32_t r = 0; r < world; r++)
		part_rank(c, m, order, r, world, at);
	for (int e = 0; e < 2; e++) {
		uint32_t count[PART_N] = {0};
		for (uint64_t g = 0; g < total; g++) {
			ck_assert_msg(at[e][g] >= 0, "%s world %u: position %llu read by no rank",
				      part_mode_name[m], world, (unsigned long long)g);
			if (g < PART_N)
				count[at[e][g]]++;
			else   /* padding repeats the epoch's start */
				ck_assert_int_eq(at[e][g], at[e][g - PART_N]);
			if (order == FEED_ORDER_SEQUENTIAL || m == PART_EVAL)
				ck_assert_int_eq(at[e][g], (int64_t)(g % PART_N));
		}
		/* before padding no sample twice; drop_last leaves out < R*B */
		uint64_t distinct = 0;
		for (int s = 0; s < PART_N; s++) {
			ck_assert_uint_le(count[s], 1);
			distinct += count[s];
		}
		ck_assert_uint_eq(distinct, total < PART_N ? total : PART_N);
		if (m == PART_DROP_LAST)
			ck_assert_uint_gt(distinct + world * PART_B, PART_N);
	}
}

START_TEST(test_partition_ranks_like_distributed_sampler)
{
	static int64_t at[2][PART_N * 2], full[4][2][PART_N * 2];
	static char arg[160];
	char dir[128];
	int k = 0;

	snprintf(dir, sizeof(dir), "%s/part", h.dir);
	h_make_dataset(dir, PART_N);
	snprintf(arg, sizeof(arg), "part=%s", dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	struct feed_conn *c = h_conn_new();
	for (uint32_t world = 2; world <= 3; world++) {
		for (int m = PART_DROP_LAST; m <= PART_EVAL; m++)
			part_world(c, (enum part_mode)m, FEED_ORDER_SEQUENTIAL, world, at);
		part_world(c, PART_DROP_LAST, FEED_ORDER_FULL, world, full[k++]);
		part_world(c, PART_PAD, FEED_ORDER_FULL, world, full[k++]);
		part_world(c, PART_EVAL, FEED_ORDER_FULL, world, at);
	}
	/* The shuffled order is the epoch's, whatever the world size and
	 * mode: positions read under both agree; epochs differ. */
	for (int e = 0; e < 2; e++)
		for (int g = 0; g < PART_N; g++) {
			int64_t s = full[1][e][g];  /* world 2, padding: every position */
			ck_assert_int_eq(full[3][e][g], s);
			if (full[0][e][g] >= 0)
				ck_assert_int_eq(full[0][e][g], s);
			if (full[2][e][g] >= 0)
				ck_assert_int_eq(full[2][e][g], s);
		}
	ck_assert(memcmp(full[1][0], full[1][1], PART_N * sizeof(int64_t)));
	int in_place = 0;
	for (int g = 0; g < PART_N; g++)
		in_place += full[1][0][g] == g;
	ck_assert_int_lt(in_place, PART_N / 4);   /* shuffled */
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */

static Suite *partition_suite(void)
{
	Suite *s = suite_create("partition");
	TCase *tc = tcase_create("partition");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_partition_same_spec_same_bytes);
	tcase_add_test(tc, test_partition_ranks_like_distributed_sampler);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	int failed = 1;

	if (h_fashion_pack("t10k", fm_dir, sizeof(fm_dir)) == 0)
		failed = h_run_suite(partition_suite());
	if (h_fashion_remove() < 0)
		failed = 1;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
