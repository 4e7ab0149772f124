/*
 * check_schedule.c: unit tests of daemon/delivery/schedule.c alone, no
 * feedd, through schedule.h's contract only: the positions a stream is
 * handed, epoch after epoch, each with the order core/order.c gives that
 * epoch; the end markers; at most two epochs alive (a third waits for the
 * oldest's positions to be done); resume at a batch or at a global
 * position, with the same or another world size and node count; the
 * block-window order tables handed out to be built and taken back; and
 * the starts sched_init() refuses.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "order.h"
#include "schedule.h"

/* The most samples a test's dataset has. */
#define MAX_N 256

static struct sched_spec spec_of(uint64_t n, enum ord_mode mode, uint32_t batch, uint32_t rank,
				 uint32_t world)
{
	struct sched_spec s = {
		.ord = {.n = n, .seed = 7, .mode = mode, .rank = rank, .world = world,
			.batch = batch, .nodes = 1, .unit = 8},
	};
	memcpy(s.ord.version, "00112233aabbccdd", 17);
	return s;
}

/* What a stream was handed, in order. */
struct run {
	uint64_t npos;
	uint64_t epoch[64], index[64];
	uint32_t nsamples[64];
	bool last_of_epoch[64], last_of_stream[64];
	uint64_t nsample;            /* samples[] used */
	uint64_t samples[4 * MAX_N]; /* every sample read, in order */
};

/* Takes positions of s until -ENODATA or max of them, each done once its
 * samples are read (ord is valid until then). Returns what the last
 * sched_next() returned. */
static int take(struct sched *s, struct run *r, uint64_t max)
{
	struct sched_pos p;
	int rc = 0;

	while (r->npos < max && (rc = sched_next(s, &p, NULL)) == 0) {
		ck_assert_uint_lt(r->npos, 64);
		uint64_t k = r->npos++;
		r->epoch[k] = p.epoch;
		r->index[k] = p.index;
		r->nsamples[k] = p.nsamples;
		r->last_of_epoch[k] = p.last_of_epoch;
		r->last_of_stream[k] = p.last_of_stream;
		ck_assert_uint_eq(ord_batch_size(p.ord, p.batch), p.nsamples);
		for (uint32_t i = 0; i < p.nsamples; i++) {
			ck_assert_uint_lt(r->nsample, 4 * MAX_N);
			r->samples[r->nsample++] = ord_sample(p.ord, p.batch, i);
		}
		sched_done(s, &p);
	}
	return rc;
}

/* A fresh schedule of spec, run to its end (epochs must be set). */
static struct run *run_all(const struct sched_spec *spec)
{
	struct run *r = calloc(1, sizeof(*r));
	struct sched s;

	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(sched_init(&s, spec, NULL), 0);
	ck_assert_int_eq(take(&s, r, UINT64_MAX), -ENODATA);
	sched_fini(&s);
	return r;
}

/* Each sample of [0, n) is counted once by the samples of runs[]. */
static void check_once(struct run *const *runs, size_t nruns, uint64_t n)
{
	uint32_t seen[MAX_N] = {0};

	for (size_t k = 0; k < nruns; k++)
		for (uint64_t i = 0; i < runs[k]->nsample; i++) {
			ck_assert_uint_lt(runs[k]->samples[i], n);
			seen[runs[k]->samples[i]]++;
		}
	for (uint64_t x = 0; x < n; x++)
		ck_assert_msg(seen[x] == 1, "sample %llu read %u times", (unsigned long long)x, seen[x]);
}

/* Positions come epoch after epoch, indices 0.. in each, the markers on
 * the last batch of each epoch and of the stream, then -ENODATA; every
 * position reads the samples its epoch's order puts there. */
START_TEST(test_schedule_positions_in_order_with_their_epochs_order)
{
	static const enum ord_mode modes[] = {ORD_SEQUENTIAL, ORD_FULL, ORD_NODE};

	for (size_t m = 0; m < 3; m++) {
		struct sched_spec sp = spec_of(100, modes[m], 8, 0, 1);
		sp.epochs = 3;
		struct run *r = run_all(&sp);
		ck_assert_uint_eq(r->npos, 3 * 13); /* 12 batches of 8 and one of 4 */
		uint64_t k = 0, next = 0;
		for (uint64_t e = 0; e < 3; e++) {
			struct ord_epoch oe;
			ck_assert_int_eq(ord_epoch_init(&oe, &sp.ord, e, NULL), 0);
			for (uint64_t b = 0; b < 13; b++, k++) {
				ck_assert_uint_eq(r->epoch[k], e);
				ck_assert_uint_eq(r->index[k], b);
				ck_assert_uint_eq(r->nsamples[k], b < 12 ? 8 : 4);
				ck_assert(r->last_of_epoch[k] == (b == 12));
				ck_assert(r->last_of_stream[k] == (e == 2 && b == 12));
				for (uint32_t i = 0; i < r->nsamples[k]; i++)
					ck_assert_uint_eq(r->samples[next++], ord_sample(&oe, b, i));
			}
			ord_epoch_fini(&oe);
		}
		free(r);
	}
}
END_TEST

/* What an epoch holds for one rank: padding fills the last batch with
 * what is left, pad_last fills it up, drop_last cuts it. */
START_TEST(test_schedule_epoch_lengths_follow_the_partition)
{
	static const struct {
		bool drop_last, pad_last;
		uint64_t batches;
		uint32_t last;
	} cases[] = {{false, false, 13, 4}, {false, true, 13, 8}, {true, false, 12, 8}};

	for (size_t c = 0; c < 3; c++) {
		struct sched_spec sp = spec_of(100, ORD_FULL, 8, 0, 1);
		struct sched s;
		sp.ord.drop_last = cases[c].drop_last;
		sp.ord.pad_last = cases[c].pad_last;
		sp.epochs = 1;
		ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
		ck_assert_uint_eq(sched_batches_per_epoch(&s), cases[c].batches);
		sched_fini(&s);
		struct run *r = run_all(&sp);
		ck_assert_uint_eq(r->npos, cases[c].batches);
		ck_assert_uint_eq(r->nsamples[r->npos - 1], cases[c].last);
		free(r);
	}
}
END_TEST

/* The ranks of a world split every epoch between them: in eval mode each
 * sample is read by exactly one rank, and a rank may have one batch more. */
START_TEST(test_schedule_ranks_split_the_epoch)
{
	struct run *runs[3];

	for (uint32_t rank = 0; rank < 3; rank++) {
		struct sched_spec sp = spec_of(100, ORD_FULL, 8, rank, 3);
		sp.ord.eval = true;
		sp.epochs = 1;
		runs[rank] = run_all(&sp);
		ck_assert_uint_eq(runs[rank]->npos, 5); /* 34 or 33 samples */
		ck_assert(runs[rank]->last_of_stream[4]);
	}
	ck_assert_uint_eq(runs[0]->nsample, 34);
	ck_assert_uint_eq(runs[1]->nsample, 33);
	check_once(runs, 3, 100);
	for (uint32_t rank = 0; rank < 3; rank++)
		free(runs[rank]);
}
END_TEST

/* Two epochs may be alive at once; the first position of a third waits
 * (-EAGAIN) until every position of the oldest is done. */
START_TEST(test_schedule_third_epoch_waits_for_the_oldest)
{
	struct sched_spec sp = spec_of(16, ORD_FULL, 8, 0, 1);
	struct sched_pos held[4], p;
	struct sched s;
	uint64_t epoch, index;

	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0); /* epochs 0: no end */
	for (int k = 0; k < 4; k++) {
		ck_assert_int_eq(sched_next(&s, &held[k], NULL), 0);
		ck_assert_uint_eq(held[k].epoch, (uint64_t)k / 2);
	}
	ck_assert_int_eq(sched_next(&s, &p, NULL), -EAGAIN);
	ck_assert(sched_peek(&s, &epoch, &index));  /* it is still the next */
	ck_assert_uint_eq(epoch, 2);
	ck_assert_uint_eq(index, 0);
	sched_done(&s, &held[2]);  /* the younger epoch's done: no help */
	sched_done(&s, &held[0]);
	ck_assert_int_eq(sched_next(&s, &p, NULL), -EAGAIN);
	/* the positions handed out are still readable meanwhile */
	ck_assert_uint_lt(ord_sample(held[1].ord, held[1].batch, 0), 16);
	sched_done(&s, &held[1]);
	ck_assert_int_eq(sched_next(&s, &p, NULL), 0);
	ck_assert_uint_eq(p.epoch, 2);
	ck_assert_uint_eq(p.index, 0);
	sched_done(&s, &p);
	sched_done(&s, &held[3]);
	sched_fini(&s);
}
END_TEST

/* Builds the table s asks for, if any, and puts it; returns how many
 * tables the put gave back (freed here, as the owner would). */
static uint32_t table_round(struct sched *s, uint64_t want_epoch)
{
	uint64_t epoch, *t, *dead[SCHED_TABLES_FREED];

	ck_assert(sched_table_want(s, &epoch));
	ck_assert_uint_eq(epoch, want_epoch);
	ck_assert(!sched_table_want(s, &epoch));  /* one at a time */
	ck_assert_int_eq(ord_table_build(&s->spec.ord, epoch, &t, NULL), 0);
	uint32_t n = sched_table_put(s, epoch, t, 0, "", dead);
	for (uint32_t i = 0; i < n; i++)
		free(dead[i]);
	return n;
}

/* Block-window: nothing is handed out before its epoch's table is put
 * (built by the owner, off its lock); the next epoch's is asked for one
 * epoch ahead and taken when that epoch starts, so the turn waits for
 * nothing; the tables of epochs done are given back by a later put, and
 * the positions are those of the eagerly built order. A failed build is
 * the error of its epoch's first position. */
START_TEST(test_schedule_block_window_tables_built_ahead)
{
	uint64_t bf[9] = {0, 2, 4, 6, 8, 10, 12, 14, 16}, epoch;
	struct sched_spec sp = spec_of(16, ORD_BLOCK_WINDOW, 8, 0, 1);
	struct ord_epoch eager;
	struct sched_pos p;
	struct feed_err err;
	struct sched s;

	sp.ord.block_first = bf, sp.ord.nblocks = 8, sp.ord.window = 2;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);  /* epochs 0: no end */
	ck_assert_int_eq(sched_next(&s, &p, NULL), -EAGAIN);
	ck_assert_uint_eq(table_round(&s, 0), 0);
	ck_assert_uint_eq(table_round(&s, 1), 0);  /* ahead */
	ck_assert(!sched_table_want(&s, &epoch));  /* no further */
	for (uint64_t e = 0; e < 4; e++) {
		ck_assert_int_eq(ord_epoch_init(&eager, &sp.ord, e, NULL), 0);
		for (uint64_t b = 0; b < 2; b++) {
			ck_assert_int_eq(sched_next(&s, &p, NULL), 0);  /* never waits */
			ck_assert_uint_eq(p.epoch, e);
			for (uint32_t i = 0; i < p.nsamples; i++)
				ck_assert_uint_eq(ord_sample(p.ord, p.batch, i),
						  ord_sample(&eager, b, i));
			sched_done(&s, &p);
			/* epoch e began with the table built ahead: e+1's is
			 * wanted now, and e-2's (dropped for e) comes back */
			if (b == 0 && e >= 1)
				ck_assert_uint_eq(table_round(&s, e + 1), e >= 2 ? 1 : 0);
		}
		ord_epoch_fini(&eager);
	}
	sched_fini(&s);

	sp.epochs = 1;  /* the last epoch: nothing ahead */
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert_uint_eq(table_round(&s, 0), 0);
	ck_assert(!sched_table_want(&s, &epoch));
	sched_fini(&s);

	sp.epochs = 0;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert(sched_table_want(&s, &epoch));
	uint64_t *dead[SCHED_TABLES_FREED];
	ck_assert_uint_eq(sched_table_put(&s, 0, NULL, -ENOMEM, "order: no memory", dead), 0);
	ck_assert_int_eq(sched_next(&s, &p, &err), -ENOMEM);
	ck_assert_str_eq(err.msg, "order: no memory");
	ck_assert(!sched_table_want(&s, &epoch));
	sched_fini(&s);
}
END_TEST

/* sched_peek() names the position sched_next() hands out next, without
 * handing it out; false once every position was. */
START_TEST(test_schedule_peek_names_the_next_position)
{
	struct sched_spec sp = spec_of(24, ORD_SEQUENTIAL, 8, 0, 1);
	struct sched_pos p;
	struct sched s;
	uint64_t epoch, index;

	sp.epochs = 2;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	for (int k = 0; k < 6; k++) {
		ck_assert(sched_peek(&s, &epoch, &index));
		ck_assert(sched_peek(&s, &epoch, &index)); /* changes nothing */
		ck_assert_int_eq(sched_next(&s, &p, NULL), 0);
		ck_assert_uint_eq(p.epoch, epoch);
		ck_assert_uint_eq(p.index, index);
		sched_done(&s, &p);
	}
	epoch = index = 77;
	ck_assert(!sched_peek(&s, &epoch, &index));
	ck_assert_uint_eq(epoch, 77);  /* ret_ written only on success */
	ck_assert_int_eq(sched_next(&s, &p, NULL), -ENODATA);
	sched_fini(&s);
}
END_TEST

/* A stream started at (epoch, batch) delivers the same batches, with the
 * same true indices, as one started at 0 from that batch on. */
START_TEST(test_schedule_start_at_a_batch)
{
	struct sched_spec sp = spec_of(100, ORD_FULL, 8, 0, 1);
	sp.epochs = 3;
	struct run *whole = run_all(&sp);
	struct sched s;

	sp.start_epoch = 1;
	sp.start_batch = 5;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert_uint_eq(sched_start_epoch(&s), 1);
	ck_assert_uint_eq(sched_start_index(&s), 5);
	ck_assert_uint_eq(sched_batches_per_epoch(&s), 13); /* the whole epoch */
	ck_assert(!sched_empty(&s));
	sched_fini(&s);
	struct run *rest = run_all(&sp);
	uint64_t skip = 13 + 5;
	ck_assert_uint_eq(rest->npos, whole->npos - skip);
	for (uint64_t k = 0; k < rest->npos; k++) {
		ck_assert_uint_eq(rest->epoch[k], whole->epoch[skip + k]);
		ck_assert_uint_eq(rest->index[k], whole->index[skip + k]);
	}
	uint64_t before = (13 * 8 - 4) + 5 * 8;  /* samples of epoch 0 and 5 batches */
	ck_assert_mem_eq(rest->samples, whole->samples + before, rest->nsample * sizeof(uint64_t));
	free(rest);
	free(whole);
}
END_TEST

/* A resume token's global position P = b * batch * world on the same
 * layout: the stream goes on at batch b, as if it had never stopped. */
START_TEST(test_schedule_resume_at_a_position_on_the_same_layout)
{
	for (uint32_t rank = 0; rank < 2; rank++) {
		struct sched_spec sp = spec_of(100, ORD_FULL, 8, rank, 2);
		sp.epochs = 2;
		struct run *whole = run_all(&sp);
		sp.at_position = true;
		sp.start_position = 3 * 8 * 2;
		struct run *rest = run_all(&sp);
		ck_assert_uint_eq(rest->epoch[0], 0);
		ck_assert_uint_eq(rest->index[0], 3);
		ck_assert_uint_eq(rest->npos, whole->npos - 3);
		ck_assert_mem_eq(rest->samples, whole->samples + 3 * 8,
				 rest->nsample * sizeof(uint64_t));
		free(rest);
		free(whole);
	}
}
END_TEST

/* A token taken with 2 ranks, resumed with 3: the positions left are laid
 * out over the 3, indices counting on from the batch P falls in; what the
 * 2 read before and the 3 read after is the epoch, each sample once. P on
 * a batch boundary of the 3's layout (48 = 2 * 24) goes on in it; off one
 * (64), the rest is laid out again from P. */
START_TEST(test_schedule_resume_at_a_position_with_another_world)
{
	/* n - P = 3 ranks * 8 batches of 8 in both; n = 2 ranks * whole batches */
	static const struct {
		uint64_t n, batches_before;
	} cases[] = {{240, 3}, {256, 4}};

	for (int c = 0; c < 2; c++) {
		const uint64_t n = cases[c].n, pos = cases[c].batches_before * 8 * 2;
		struct run *runs[5];
		for (uint32_t rank = 0; rank < 2; rank++) {
			struct sched_spec sp = spec_of(n, ORD_FULL, 8, rank, 2);
			sp.epochs = 1;
			runs[rank] = run_all(&sp);
			runs[rank]->nsample = pos / 2;  /* what it read before the token */
		}
		for (uint32_t rank = 0; rank < 3; rank++) {
			struct sched_spec sp = spec_of(n, ORD_FULL, 8, rank, 3);
			struct sched s;
			sp.epochs = 1;
			sp.at_position = true;
			sp.start_position = pos;
			ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
			ck_assert_uint_eq(sched_start_index(&s), pos / (8 * 3));
			ck_assert_uint_eq(sched_batches_per_epoch(&s), pos / (8 * 3) + 8);
			uint64_t epoch, index;
			ck_assert(sched_peek(&s, &epoch, &index));
			ck_assert_uint_eq(epoch, 0);
			ck_assert_uint_eq(index, pos / (8 * 3));
			sched_fini(&s);
			runs[2 + rank] = run_all(&sp);
			ck_assert_uint_eq(runs[2 + rank]->npos, 8);
			ck_assert_uint_eq(runs[2 + rank]->index[0], 2);
			ck_assert_uint_eq(runs[2 + rank]->index[7], 9);
		}
		check_once(runs, 5, n);
		for (int k = 0; k < 5; k++)
			free(runs[k]);
	}
}
END_TEST

/* Node order: a token of 4 ranks on 2 nodes after 2 batches, resumed on
 * 2 nodes (the layout goes on) or on 1 (the rest is laid out again as a
 * level more): with what was read before, the epoch, each sample once. */
START_TEST(test_schedule_node_order_resumes_on_other_node_counts)
{
	const uint64_t n = 192, pos = 2 * 4 * 4;
	static const uint32_t new_world[] = {2, 2}, new_nodes[] = {2, 1};

	for (int c = 0; c < 2; c++) {
		struct run *runs[6];
		for (uint32_t rank = 0; rank < 4; rank++) {
			struct sched_spec sp = spec_of(n, ORD_NODE, 4, rank, 4);
			sp.ord.nodes = 2;
			sp.epochs = 1;
			runs[rank] = run_all(&sp);
			runs[rank]->nsample = 2 * 4;
		}
		for (uint32_t rank = 0; rank < new_world[c]; rank++) {
			struct sched_spec sp = spec_of(n, ORD_NODE, 4, rank, new_world[c]);
			sp.ord.nodes = new_nodes[c];
			sp.epochs = 1;
			sp.at_position = true;
			sp.start_position = pos;
			sp.start_nodes = 2;  /* the token's */
			runs[4 + rank] = run_all(&sp);
			/* indices go on from the batch P falls in on this layout */
			ck_assert_uint_eq(runs[4 + rank]->index[0], pos / (4 * new_world[c]));
		}
		check_once(runs, 4 + new_world[c], n);
		for (uint32_t k = 0; k < 4 + new_world[c]; k++)
			free(runs[k]);
	}
}
END_TEST

/* The open reply's resume layout (sched_resume_layout): a token of 2
 * nodes resumed on 2 nodes at a batch boundary goes on in the token's
 * layouts from its position; on 1 node its position becomes a level more
 * and positions count from 0; without node order, from the position. */
START_TEST(test_schedule_resume_layout_says_where_positions_count_from)
{
	const uint64_t n = 192, pos = 2 * 4 * 4;
	struct ord_level lv[ORD_MAX_LEVELS];
	uint32_t nlv = 99;
	struct sched s;

	for (uint32_t nodes = 2; nodes >= 1; nodes--) {
		struct sched_spec sp = spec_of(n, ORD_NODE, 4, 0, 4);
		sp.ord.nodes = nodes;
		sp.epochs = 1;
		sp.at_position = true;
		sp.start_position = pos;
		sp.start_nodes = 2;  /* the token's */
		sp.nlevels = 1;      /* and one earlier layout of its epoch */
		sp.levels[0] = (struct ord_level){.nodes = 4, .pos = 16};
		ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
		uint64_t from = sched_resume_layout(&s, lv, &nlv);
		ck_assert_uint_eq(from, nodes == 2 ? pos : 0);
		ck_assert_uint_eq(nlv, nodes == 2 ? 1 : 2);
		ck_assert_uint_eq(lv[0].nodes, 4);
		ck_assert_uint_eq(lv[0].pos, 16);
		if (nodes == 1) {
			ck_assert_uint_eq(lv[1].nodes, 2);
			ck_assert_uint_eq(lv[1].pos, pos);
		}
		sched_fini(&s);
	}
	struct sched_spec sp = spec_of(n, ORD_FULL, 4, 0, 1);
	sp.at_position = true;
	sp.start_position = 12;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert_uint_eq(sched_resume_layout(&s, lv, &nlv), 12);
	ck_assert_uint_eq(nlv, 0);
	sched_fini(&s);
}
END_TEST

/* A token taken once an epoch was done starts the next epoch with no
 * END_OF_EPOCH first; after the last epoch asked for, the stream is empty. */
START_TEST(test_schedule_resume_at_an_epoch_end)
{
	struct sched_spec sp = spec_of(96, ORD_FULL, 8, 0, 1);
	struct sched_pos p;
	struct sched s;

	sp.epochs = 3;
	sp.start_epoch = 1;
	sp.at_position = true;
	sp.start_position = 96;
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert(!sched_empty(&s));
	ck_assert_uint_eq(sched_start_epoch(&s), 2);
	ck_assert_uint_eq(sched_start_index(&s), 0);
	ck_assert_int_eq(sched_next(&s, &p, NULL), 0);
	ck_assert_uint_eq(p.epoch, 2);
	ck_assert_uint_eq(p.index, 0);
	ck_assert(!p.last_of_epoch);
	sched_done(&s, &p);
	sched_fini(&s);

	sp.start_epoch = 2;  /* the last epoch's end */
	ck_assert_int_eq(sched_init(&s, &sp, NULL), 0);
	ck_assert(sched_empty(&s));
	ck_assert_int_eq(sched_next(&s, &p, NULL), -ENODATA);
	sched_fini(&s);
}
END_TEST

/* Starts that cannot be served are refused, naming what is wrong. */
START_TEST(test_schedule_impossible_starts_refused)
{
	struct sched_spec sp = spec_of(100, ORD_FULL, 8, 0, 1);
	struct feed_err err = {0};
	struct sched s;

	sp.epochs = 2;
	sp.start_epoch = 2;
	ck_assert_int_eq(sched_init(&s, &sp, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "start epoch 2") && strstr(err.msg, "2 epochs"),
		      "names the epoch and the count: %s", err.msg);
	sched_fini(&s);

	sp.start_epoch = 0;
	sp.start_batch = 13;
	ck_assert_int_eq(sched_init(&s, &sp, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "start batch 13") && strstr(err.msg, "13 batches"),
		      "names the batch and the count: %s", err.msg);
	sched_fini(&s);

	/* drop_last over 4 ranks of 30 samples: no full batch of 8 for anyone */
	sp = spec_of(30, ORD_FULL, 8, 3, 4);
	sp.ord.drop_last = true;
	ck_assert_int_eq(sched_init(&s, &sp, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "rank 3 of 4") && strstr(err.msg, "8 samples"),
		      "names the rank and the batch: %s", err.msg);
	sched_fini(&s);
}
END_TEST

/* A stream with no end resumed at epoch 2^64 - 2 (a token's epoch, which
 * a client writes) would count 2^64 - 1 and then 0: its epoch went
 * backwards. Starts at or past SCHED_EPOCH_MAX are refused; the last one
 * below goes on counting up. */
START_TEST(test_schedule_start_epoch_near_wrap_refused)
{
	struct sched_spec sp = spec_of(16, ORD_SEQUENTIAL, 8, 0, 1);
	struct feed_err err = {0};
	struct run r = {0};
	struct sched s;

	sp.at_position = true;
	sp.start_position = 8;
	sp.start_epoch = UINT64_MAX - 1;
	ck_assert_int_eq(sched_init(&s, &sp, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "start epoch 18446744073709551614") && strstr(err.msg, "2^63"),
		      "names the epoch and the limit: %s", err.msg);
	sched_fini(&s);

	sp.start_epoch = SCHED_EPOCH_MAX - 1;
	ck_assert_int_eq(sched_init(&s, &sp, &err), 0);
	ck_assert_int_eq(take(&s, &r, 3), 0);
	ck_assert_uint_eq(r.epoch[0], SCHED_EPOCH_MAX - 1);
	ck_assert_uint_eq(r.epoch[1], SCHED_EPOCH_MAX);
	ck_assert_uint_eq(r.epoch[2], SCHED_EPOCH_MAX);
	sched_fini(&s);
}
END_TEST

static Suite *schedule_suite(void)
{
	Suite *s = suite_create("schedule");
	TCase *tc = tcase_create("schedule");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_schedule_positions_in_order_with_their_epochs_order);
	tcase_add_test(tc, test_schedule_epoch_lengths_follow_the_partition);
	tcase_add_test(tc, test_schedule_ranks_split_the_epoch);
	tcase_add_test(tc, test_schedule_third_epoch_waits_for_the_oldest);
	tcase_add_test(tc, test_schedule_block_window_tables_built_ahead);
	tcase_add_test(tc, test_schedule_peek_names_the_next_position);
	tcase_add_test(tc, test_schedule_start_at_a_batch);
	tcase_add_test(tc, test_schedule_resume_at_a_position_on_the_same_layout);
	tcase_add_test(tc, test_schedule_resume_at_a_position_with_another_world);
	tcase_add_test(tc, test_schedule_node_order_resumes_on_other_node_counts);
	tcase_add_test(tc, test_schedule_resume_layout_says_where_positions_count_from);
	tcase_add_test(tc, test_schedule_resume_at_an_epoch_end);
	tcase_add_test(tc, test_schedule_impossible_starts_refused);
	tcase_add_test(tc, test_schedule_start_epoch_near_wrap_refused);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(schedule_suite)
