/*
 * check_partition.c: order, partition and randomness through a real feedd
 * (DESIGN.md "Order, partition, randomness, resume"): the same stream spec
 * gives the same bytes, run twice and with one worker or two; ranks of
 * world 2 and 3 with drop_last, with padding (DistributedSampler's, and
 * pad_last's to whole batches) and in eval mode read the
 * global positions torch's DistributedSampler gives them, with the union
 * and multiplicity it specifies; block-window order over several epochs
 * holds every sample once per epoch, in windows of whole blocks, with
 * epochs that differ and the same bytes for the same seed.
 *
 * main() packs the Fashion-MNIST test split (10 000 images) once for the
 * determinism test; the partition test writes its own small dataset.
 */
#include <errno.h>
#include <stdbool.h>
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

enum part_mode { PART_DROP_LAST, PART_PAD, PART_PAD_LAST, PART_EVAL };

static const char *const part_mode_name[] = {"drop_last", "padding", "pad_last", "eval"};

/* Global positions an epoch covers, over all ranks. */
static uint64_t part_total(enum part_mode m, uint32_t world)
{
	uint64_t rb = (uint64_t)world * PART_B;

	if (m == PART_DROP_LAST)
		return PART_N / rb * rb;
	if (m == PART_PAD)   /* DistributedSampler: ceil(N / R) per rank */
		return (PART_N + world - 1) / world * world;
	if (m == PART_PAD_LAST)  /* and on to whole batches of every rank */
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
				     .drop_last = m == PART_DROP_LAST, .pad_last = m == PART_PAD_LAST,
				     .eval = m == PART_EVAL};
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
		/* full batches, but for the last one of eval and of padding as
		 * DataLoader's (pad_last fills it) */
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
/* Node order through feedd                                            */

/* Node order, 2 nodes of 2 ranks (and 3 of 1), over PART_N samples: the
 * counts are the other modes' (part_total()), every sample is read by one
 * node only, and padding repeats samples of the node's own share (in
 * batches flagged padded). */
static void node_world(struct feed_conn *c, enum part_mode m, uint32_t nodes, uint32_t per)
{
	uint32_t world = nodes * per;
	uint64_t total = part_total(m, world), mine = total / world;
	int node_of[PART_N];
	uint32_t count[PART_N] = {0}, in_padded[PART_N] = {0};
	uint64_t reads = 0;

	for (int s = 0; s < PART_N; s++)
		node_of[s] = -1;
	for (uint32_t r = 0; r < world; r++) {
		struct feed_stream_opts o = {.dataset = "part", .batch = PART_B, .epochs = 1,
					     .seed = 9, .order = FEED_ORDER_NODE, .rank = r,
					     .world = world, .nodes = nodes, .node = r / per,
					     .drop_last = m == PART_DROP_LAST,
					     .pad_last = m == PART_PAD_LAST};
		struct feed_stream *st = h_stream_open(c, &o);
		struct feed_batch *b;
		uint64_t got = 0;
		int rc;

		ck_assert_uint_eq(feed_stream_info(st)->batches_per_epoch,
				  (mine + PART_B - 1) / PART_B);
		while ((rc = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
			if (rc == FEED_END_OF_EPOCH)
				continue;
			ck_assert_msg(rc == 0, "%s: %s", feed_strerror(rc), feed_errmsg(c));
			const uint64_t *idx = feed_batch_samples(b);
			for (uint32_t i = 0; i < feed_batch_size(b); i++) {
				ck_assert_uint_lt(idx[i], PART_N);
				ck_assert_msg(node_of[idx[i]] < 0 || node_of[idx[i]] == (int)(r / per),
					      "%s: sample %llu read on nodes %d and %u",
					      part_mode_name[m], (unsigned long long)idx[i],
					      node_of[idx[i]], r / per);
				node_of[idx[i]] = (int)(r / per);
				count[idx[i]]++;
				in_padded[idx[i]] += feed_batch_padded(b);
			}
			got += feed_batch_size(b);
			ck_assert_int_eq(feed_release(b), 0);
		}
		ck_assert_uint_eq(got, mine);
		reads += got;
		ck_assert_int_eq(feed_stream_close(st), 0);
	}
	uint64_t distinct = 0;
	for (int s = 0; s < PART_N; s++) {
		distinct += count[s] > 0;
		/* every repeat is read in a batch flagged padded */
		ck_assert_uint_le(count[s], 1 + in_padded[s]);
	}
	ck_assert_uint_eq(reads, total);
	ck_assert_uint_eq(distinct, total < PART_N ? total : PART_N);
}

START_TEST(test_partition_node_order)
{
	static char arg[160];
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/part", h.dir);
	h_make_dataset(dir, PART_N);
	snprintf(arg, sizeof(arg), "part=%s", dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	struct feed_conn *c = h_conn_new();
	for (int m = PART_DROP_LAST; m <= PART_PAD_LAST; m++) {
		node_world(c, (enum part_mode)m, 2, 2);
		node_world(c, (enum part_mode)m, 3, 1);
	}
	/* a node that is not rank / (world / nodes) is refused, naming both */
	struct feed_stream_opts o = {.dataset = "part", .batch = PART_B, .order = FEED_ORDER_NODE,
				     .rank = 3, .world = 4, .nodes = 2, .node = 0};
	struct feed_stream *st;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(c), "sits on node 1, not node 0"));
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Block-window order over epochs                                      */

#define BW_N 1003     /* 41 blocks: 40 of 25 records and one of 3 */
#define BW_BLOCK 25
#define BW_NBLOCKS ((BW_N + BW_BLOCK - 1) / BW_BLOCK)
#define BW_WINDOW 4
#define BW_BATCH 17    /* 1003 = 59 x 17: no batch padded by wrap-around */
#define BW_EPOCHS 4

struct bw_run {
	uint64_t order[BW_EPOCHS][BW_N];   /* sample at each position of each epoch */
	uint64_t hash;                     /* positions, samples and bytes of every batch */
};

/* Reads a whole BW_EPOCHS-epoch block-window stream of seed: checks each
 * sample's bytes, and records the order and a hash of everything. */
static void bw_read(struct feed_conn *c, uint64_t seed, struct bw_run *out)
{
	struct feed_stream_opts o = {.dataset = "bw", .batch = BW_BATCH, .epochs = BW_EPOCHS,
				     .seed = seed, .order = FEED_ORDER_BLOCK_WINDOW,
				     .window = BW_WINDOW};
	struct feed_stream *st = h_stream_open(c, &o);
	uint64_t got[BW_EPOCHS] = {0}, ends = 0;
	struct feed_batch *b;
	int r;

	memset(out, 0, sizeof(*out));
	out->hash = 0xcbf29ce484222325ull;
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(got[ends], BW_N);
			ends++;
			continue;
		}
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		uint64_t e = feed_batch_epoch(b), n = feed_batch_size(b);
		const uint64_t *idx = feed_batch_samples(b);
		struct feed_view img, lab;
		ck_assert_uint_eq(e, ends);
		ck_assert_uint_le(got[e] + n, BW_N);
		ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
		ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
		for (uint64_t i = 0; i < n; i++) {
			int64_t label;
			ck_assert_uint_lt(idx[i], BW_N);
			ck_assert_uint_eq(((const uint8_t *)img.data)[16 * i + 15], idx[i] & 0xff);
			memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
			ck_assert_int_eq(label, (int64_t)idx[i]);
			out->order[e][got[e]++] = idx[i];
		}
		uint64_t pos[2] = {e, feed_batch_index(b)};
		out->hash = fnv(out->hash, pos, sizeof(pos));
		out->hash = fnv(out->hash, idx, 8 * n);
		out->hash = fnv(out->hash, img.data, img.bytes);
		out->hash = fnv(out->hash, lab.data, lab.bytes);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(ends, BW_EPOCHS);
	ck_assert_int_eq(feed_stream_close(st), 0);
}

/* One epoch's order: every sample exactly once, laid out window after
 * window, each window the samples of BW_WINDOW whole blocks (the last may
 * have fewer). Returns how many windows are not simply blocks 4k..4k+3. */
static int bw_check_epoch(const uint64_t *order, int epoch)
{
	static uint8_t seen[BW_N];
	uint32_t left[BW_NBLOCKS];      /* samples of each block not yet read */
	uint32_t win[BW_WINDOW];        /* blocks of the current window */
	uint32_t nwin = 0, windows = 0, blocks_done = 0;
	int moved = 0;

	memset(seen, 0, sizeof(seen));
	for (uint32_t k = 0; k < BW_NBLOCKS; k++)
		left[k] = k + 1 < BW_NBLOCKS ? BW_BLOCK : BW_N - k * BW_BLOCK;
	for (uint64_t p = 0; p < BW_N; p++) {
		uint64_t s = order[p];
		uint32_t blk = (uint32_t)(s / BW_BLOCK), k;
		ck_assert_msg(!seen[s], "epoch %d: sample %llu twice", epoch, (unsigned long long)s);
		seen[s] = 1;
		for (k = 0; k < nwin && win[k] != blk; k++)
			;
		if (k == nwin) {   /* a block the window has not started */
			ck_assert_msg(nwin < BW_WINDOW, "epoch %d, position %llu: sample %llu of block "
				      "%u while the window's %d blocks are unfinished", epoch,
				      (unsigned long long)p, (unsigned long long)s, blk, BW_WINDOW);
			ck_assert_msg(left[blk] > 0, "epoch %d: block %u again", epoch, blk);
			win[nwin++] = blk;
		}
		left[blk]--;
		bool whole = nwin == BW_WINDOW || blocks_done + nwin == BW_NBLOCKS;
		for (k = 0; k < nwin && whole; k++)
			whole = left[win[k]] == 0;
		if (whole) {   /* the window is done: its blocks were read whole */
			for (k = 0; k < nwin; k++)
				moved += win[k] / BW_WINDOW != windows;
			blocks_done += nwin;
			windows++;
			nwin = 0;
		}
	}
	ck_assert_uint_eq(blocks_done, BW_NBLOCKS);
	ck_assert_uint_eq(windows, (BW_NBLOCKS + BW_WINDOW - 1) / BW_WINDOW);
	return moved;
}

START_TEST(test_partition_block_window_epochs)
{
	static struct bw_run a, again, other;
	static char arg[160];
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/bw", h.dir);
	h_make_dataset_blocks(dir, BW_N, BW_BLOCK);
	snprintf(arg, sizeof(arg), "bw=%s", dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	struct feed_conn *c = h_conn_new();
	bw_read(c, 77, &a);
	for (int e = 0; e < BW_EPOCHS; e++) {
		int in_place = 0;
		/* blocks are permuted, not only samples inside fixed windows */
		ck_assert_msg(bw_check_epoch(a.order[e], e) > 0, "epoch %d: blocks not permuted", e);
		for (int p = 0; p < BW_N; p++)
			in_place += a.order[e][p] == (uint64_t)p;
		ck_assert_int_lt(in_place, BW_N / 4);
		for (int f = 0; f < e; f++)
			ck_assert_msg(memcmp(a.order[e], a.order[f], sizeof(a.order[e])),
				      "epochs %d and %d in the same order", f, e);
	}
	/* the same seed again: the same bytes; another seed: another order */
	bw_read(c, 77, &again);
	ck_assert_msg(a.hash == again.hash, "seed 77 twice: different batches");
	bw_read(c, 78, &other);
	ck_assert(memcmp(a.order, other.order, sizeof(a.order)));
	ck_assert(a.hash != other.hash);
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
	tcase_add_test(tc, test_partition_block_window_epochs);
	tcase_add_test(tc, test_partition_node_order);
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
