/*
 * check_order.c: unit tests of core/order.c: every mode is a bijection
 * for awkward N, keys separate seeds / epochs / versions, lookups need no
 * table, block windows keep their blocks together, and the rank partitions
 * (drop_last, padding, eval) cover the epoch exactly as order.h specifies,
 * including resume at a global position with another world size.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_util.h"
#include "order.h"

static const uint64_t sizes[] = {1, 2, 3, 7, 1000, 65537, 60000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static struct ord_spec spec_of(uint64_t n, enum ord_mode mode)
{
	struct ord_spec s = {.n = n, .seed = 42, .mode = mode, .world = 1, .batch = 1};
	strcpy(s.version, "0123456789abcdef");
	return s;
}

/* Block table with sizes 1..max (and some empty blocks when max > 3). */
static uint64_t *blocks_of(uint64_t n, uint32_t max, uint64_t *ret_nblocks)
{
	uint64_t *bf = malloc((n + 2) * sizeof(*bf));
	uint64_t nb = 0, pos = 0, x = 12345;

	ck_assert_ptr_nonnull(bf);
	bf[0] = 0;
	while (pos < n) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t len = (x >> 33) % (max + 1);
		if (max <= 3 && len == 0)
			len = 1;
		if (len > n - pos)
			len = n - pos;
		pos += len;
		bf[++nb] = pos;
	}
	*ret_nblocks = nb;
	return bf;
}

/* ord_permute over [0, n) hits every sample exactly once. */
static void check_bijection(const struct ord_epoch *e, uint64_t n)
{
	uint8_t *seen = calloc(n, 1);

	ck_assert_ptr_nonnull(seen);
	for (uint64_t p = 0; p < n; p++) {
		uint64_t s = ord_permute(e, p);
		if (s >= n || seen[s])
			ck_abort_msg("n=%llu mode=%d: position %llu -> %llu (out of range or repeated)",
				     (unsigned long long)n, (int)e->spec.mode,
				     (unsigned long long)p, (unsigned long long)s);
		seen[s] = 1;
	}
	free(seen);
}

START_TEST(test_order_bijection)
{
	for (size_t k = 0; k < NSIZES; k++) {
		uint64_t n = sizes[k];
		for (int mode = ORD_SEQUENTIAL; mode <= ORD_FULL; mode++) {
			struct ord_spec s = spec_of(n, (enum ord_mode)mode);
			struct ord_epoch e;
			ck_assert_int_eq(ord_epoch_init(&e, &s, 3, NULL), 0);
			check_bijection(&e, n);
			ord_epoch_fini(&e);
		}
		static const uint32_t maxes[] = {1, 5, 100};
		static const uint32_t windows[] = {1, 3, 1000000};
		for (size_t m = 0; m < 3; m++)
			for (size_t w = 0; w < 3; w++) {
				struct ord_spec s = spec_of(n, ORD_BLOCK_WINDOW);
				s.block_first = blocks_of(n, maxes[m], &s.nblocks);
				s.window = windows[w];
				struct ord_epoch e;
				ck_assert_int_eq(ord_epoch_init(&e, &s, 1, NULL), 0);
				check_bijection(&e, n);
				ord_epoch_fini(&e);
				free((void *)s.block_first);
			}
	}
}
END_TEST

static uint64_t count_differences(const struct ord_spec *a, uint64_t ea, const struct ord_spec *b,
				  uint64_t eb)
{
	struct ord_epoch x, y;
	uint64_t diff = 0;

	ck_assert_int_eq(ord_epoch_init(&x, a, ea, NULL), 0);
	ck_assert_int_eq(ord_epoch_init(&y, b, eb, NULL), 0);
	for (uint64_t p = 0; p < a->n; p++)
		diff += ord_permute(&x, p) != ord_permute(&y, p);
	ord_epoch_fini(&x);
	ord_epoch_fini(&y);
	return diff;
}

START_TEST(test_order_keys_separate)
{
	struct ord_spec a = spec_of(1000, ORD_FULL), b = a;

	ck_assert_uint_eq(count_differences(&a, 5, &b, 5), 0);
	ck_assert_uint_gt(count_differences(&a, 5, &b, 6), 950);
	b.seed = 43;
	ck_assert_uint_gt(count_differences(&a, 5, &b, 5), 950);
	b = a;
	b.version[15] = 'e';
	ck_assert_uint_gt(count_differences(&a, 5, &b, 5), 950);
	/* sequential ignores the key */
	a.mode = b.mode = ORD_SEQUENTIAL;
	ck_assert_uint_eq(count_differences(&a, 5, &b, 9), 0);
}
END_TEST

/* A permutation that is shuffled: few fixed points, little locality. */
START_TEST(test_order_full_is_shuffled)
{
	struct ord_spec s = spec_of(60000, ORD_FULL);
	struct ord_epoch e;
	uint64_t fixed = 0, near = 0;

	ck_assert_int_eq(ord_epoch_init(&e, &s, 0, NULL), 0);
	for (uint64_t p = 0; p + 1 < s.n; p++) {
		uint64_t a = ord_permute(&e, p), b = ord_permute(&e, p + 1);
		fixed += a == p;
		near += (a > b ? a - b : b - a) < 100;
	}
	ck_assert_uint_lt(fixed, 10);
	ck_assert_uint_lt(near, 1000); /* ~200 expected for a random order */
	ord_epoch_fini(&e);
}
END_TEST

/* No table: a trillion samples, lookups anywhere, with no per-sample state
 * (a timing bound here failed on a loaded machine and proved nothing the
 * absent table does not). */
START_TEST(test_order_lookup_constant)
{
	struct ord_spec s = spec_of(1000000000000ull, ORD_FULL);
	struct ord_epoch e;
	uint64_t *got = malloc(200000 * sizeof(*got));

	ck_assert_int_eq(ord_epoch_init(&e, &s, 7, NULL), 0);
	ck_assert_ptr_null(e.slot_start);
	for (uint64_t k = 0; k < 200000; k++) {
		got[k] = ord_permute(&e, k * 4999999ull % s.n);
		ck_assert(got[k] < s.n);
	}
	for (uint64_t k = 1; k < 200000; k++)
		ck_assert(got[k] != got[k - 1]);
	free(got);
	ord_epoch_fini(&e);
}
END_TEST

/* Every window holds whole blocks, at most `window` of them, and its
 * samples are shuffled. */
START_TEST(test_order_block_window_locality)
{
	struct ord_spec s = spec_of(60000, ORD_BLOCK_WINDOW);
	uint64_t *owner = malloc(s.n * sizeof(*owner));
	struct ord_epoch e;

	s.block_first = blocks_of(s.n, 100, &s.nblocks);
	s.window = 4;
	for (uint64_t b = 0; b < s.nblocks; b++)
		for (uint64_t i = s.block_first[b]; i < s.block_first[b + 1]; i++)
			owner[i] = b;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 2, NULL), 0);
	uint64_t p = 0, windows = 0, sorted_windows = 0;
	while (p < s.n) {
		uint64_t first, end, blocks[64], nb = 0, covered = 0, sorted = 1;
		ord_window_of(&e, p, &first, &end);
		ck_assert_uint_eq(first, p);
		ck_assert_uint_gt(end, first);
		for (uint64_t q = first; q < end; q++) {
			uint64_t smp = ord_permute(&e, q), b = owner[smp], k = 0;
			if (q > first && smp < ord_permute(&e, q - 1))
				sorted = 0;
			while (k < nb && blocks[k] != b)
				k++;
			if (k == nb) {
				ck_assert_uint_lt(nb, s.window);
				blocks[nb++] = b;
				covered += s.block_first[b + 1] - s.block_first[b];
			}
		}
		ck_assert_uint_eq(covered, end - first); /* whole blocks only */
		sorted_windows += sorted && end - first > 8;
		windows++;
		p = end;
	}
	ck_assert_uint_ge(windows, s.nblocks / s.window / 2); /* empty windows are skipped */
	ck_assert_uint_lt(sorted_windows, 2);
	ord_epoch_fini(&e);
	free((void *)s.block_first);
	free(owner);
}
END_TEST

/* Runs every rank of (n, world, batch); returns per-sample counts and
 * checks each rank's batches and positions. */
static uint32_t *run_ranks(struct ord_spec s, uint32_t *ret_batches, uint64_t *ret_total)
{
	uint32_t *count = calloc(s.n, sizeof(*count));
	uint64_t total = 0;

	for (uint32_t r = 0; r < s.world; r++) {
		struct ord_epoch e;
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 4, NULL), 0);
		ret_batches[r] = (uint32_t)ord_batches_per_epoch(&e);
		for (uint64_t b = 0; b < ord_batches_per_epoch(&e); b++) {
			uint32_t bs = ord_batch_size(&e, b);
			ck_assert_uint_ge(bs, 1);
			ck_assert_uint_le(bs, s.batch);
			for (uint32_t i = 0; i < bs; i++) {
				uint64_t g = ord_global_position(&e, b, i);
				ck_assert_uint_eq(g, (b * s.batch + i) * s.world + r);
				uint64_t want = ord_permute(&e, g % s.n);
				ck_assert_uint_eq(ord_sample(&e, b, i), want);
				count[want]++;
				total++;
			}
		}
		ck_assert_uint_eq(ord_batch_size(&e, ord_batches_per_epoch(&e)), 0);
		ord_epoch_fini(&e);
	}
	*ret_total = total;
	return count;
}

static const uint32_t part_cases[][3] = {
	{10, 3, 2}, {10, 4, 3}, {7, 2, 5}, {1, 3, 2}, {1000, 8, 32}, {60000, 3, 256}, {17, 17, 1},
};

/* Padding as DistributedSampler pads (each rank ceil(N/R) samples, the
 * last batch partial, as DataLoader gives it), and with pad_last to whole
 * batches of every rank; either way every sample comes at least once and
 * exactly the first total-N positions of the order come twice. */
START_TEST(test_order_partition_padding)
{
	for (int pad = 0; pad < 2; pad++)
	for (size_t k = 0; k < sizeof(part_cases) / sizeof(part_cases[0]); k++) {
		struct ord_spec s = spec_of(part_cases[k][0], ORD_FULL);
		uint32_t rb = part_cases[k][1] * part_cases[k][2], batches[32];
		uint64_t total;
		s.world = part_cases[k][1];
		s.batch = part_cases[k][2];
		s.pad_last = pad;
		uint32_t *count = run_ranks(s, batches, &total);
		uint64_t per_rank = (s.n + s.world - 1) / s.world;
		uint64_t want_total = pad ? (s.n + rb - 1) / rb * rb : per_rank * s.world;
		uint64_t want_batches = pad ? want_total / rb : (per_rank + s.batch - 1) / s.batch;
		ck_assert_uint_eq(total, want_total);
		for (uint32_t r = 0; r < s.world; r++)
			ck_assert_uint_eq(batches[r], want_batches);
		struct ord_epoch e;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 4, NULL), 0);
		for (uint64_t p = 0; p < s.n; p++) {
			uint64_t extra = want_total - s.n, times = 1 + extra / s.n + (p < extra % s.n);
			ck_assert_uint_eq(count[ord_permute(&e, p)], times);
		}
		ord_epoch_fini(&e);
		free(count);
	}
}
END_TEST

/* DataLoader's own figure: 60,000 samples, batch 256, one rank: 234 full
 * batches and one of 96, nothing repeated. */
START_TEST(test_order_dataloader_counts)
{
	struct ord_spec s = spec_of(60000, ORD_FULL);
	struct ord_epoch e;

	s.batch = 256;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 0, NULL), 0);
	ck_assert_uint_eq(ord_batches_per_epoch(&e), 235);
	ck_assert_uint_eq(ord_batch_size(&e, 233), 256);
	ck_assert_uint_eq(ord_batch_size(&e, 234), 96);
	ck_assert_uint_lt(ord_global_position(&e, 234, 95), 60000);
	ord_epoch_fini(&e);
	s.pad_last = true;  /* static shapes: the last batch wraps around */
	ck_assert_int_eq(ord_epoch_init(&e, &s, 0, NULL), 0);
	ck_assert_uint_eq(ord_batch_size(&e, 234), 256);
	ck_assert_uint_eq(ord_global_position(&e, 234, 255), 60159);
	ord_epoch_fini(&e);
}
END_TEST

START_TEST(test_order_partition_drop_last)
{
	for (size_t k = 0; k < sizeof(part_cases) / sizeof(part_cases[0]); k++) {
		struct ord_spec s = spec_of(part_cases[k][0], ORD_FULL);
		uint32_t rb = part_cases[k][1] * part_cases[k][2], batches[32];
		uint64_t total;
		s.world = part_cases[k][1];
		s.batch = part_cases[k][2];
		s.drop_last = true;
		uint32_t *count = run_ranks(s, batches, &total);
		ck_assert_uint_eq(total, s.n / rb * rb);
		for (uint32_t r = 0; r < s.world; r++)
			ck_assert_uint_eq(batches[r], s.n / rb);
		struct ord_epoch e;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 4, NULL), 0);
		for (uint64_t p = 0; p < s.n; p++)
			ck_assert_uint_eq(count[ord_permute(&e, p)], p < total ? 1 : 0);
		ord_epoch_fini(&e);
		free(count);
	}
}
END_TEST

/* N=10, R=3, batch 2 written out by hand, then the general cases. */
START_TEST(test_order_partition_eval)
{
	struct ord_spec s = spec_of(10, ORD_FULL);
	static const uint64_t want[3][2][2] = {{{0, 3}, {6, 9}}, {{1, 4}, {7, 99}}, {{2, 5}, {8, 99}}};

	s.world = 3;
	s.batch = 2;
	s.eval = true;
	for (uint32_t r = 0; r < 3; r++) {
		struct ord_epoch e;
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 9, NULL), 0);
		ck_assert_uint_eq(ord_batches_per_epoch(&e), 2);
		ck_assert_uint_eq(ord_batch_size(&e, 1), r == 0 ? 2 : 1);
		for (uint64_t b = 0; b < 2; b++)
			for (uint32_t i = 0; i < ord_batch_size(&e, b); i++)
				ck_assert_uint_eq(ord_sample(&e, b, i), want[r][b][i]);
		ord_epoch_fini(&e);
	}
	for (size_t k = 0; k < sizeof(part_cases) / sizeof(part_cases[0]); k++) {
		uint32_t batches[32];
		uint64_t total;
		s = spec_of(part_cases[k][0], ORD_BLOCK_WINDOW); /* eval ignores the mode */
		s.world = part_cases[k][1];
		s.batch = part_cases[k][2];
		s.eval = true;
		uint32_t *count = run_ranks(s, batches, &total);
		ck_assert_uint_eq(total, s.n);
		for (uint64_t p = 0; p < s.n; p++)
			ck_assert_uint_eq(count[p], 1);
		free(count);
	}
}
END_TEST

/* Rank r's first ceil(N/R) samples are DistributedSampler's indices[r::R]
 * over the same order padded by repetition. */
START_TEST(test_order_partition_matches_distributed_sampler)
{
	struct ord_spec s = spec_of(10, ORD_FULL);
	uint64_t order[12];

	s.world = 4;
	s.batch = 3;
	struct ord_epoch e;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 1, NULL), 0);
	for (uint64_t p = 0; p < 12; p++) /* torch: indices += indices[:padding] */
		order[p] = ord_permute(&e, p % 10);
	ord_epoch_fini(&e);
	for (uint32_t r = 0; r < 4; r++) {
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 1, NULL), 0);
		for (uint32_t k = 0; k < 3; k++) /* total_size / R = 3 */
			ck_assert_uint_eq(ord_sample(&e, k / 3, k % 3), order[r + 4 * k]);
		ord_epoch_fini(&e);
	}
}
END_TEST

/* Resume at a global position: same world = the rest of the run; another
 * world covers exactly the positions not consumed yet. */
START_TEST(test_order_resume_positions)
{
	struct ord_spec s = spec_of(1000, ORD_FULL);
	s.world = 4;
	s.batch = 8;
	for (uint64_t b = 0; b <= 32; b += 5) {
		uint8_t *seen = calloc(s.n, 1);
		uint64_t pos = 0;
		for (uint32_t r = 0; r < 4; r++) {
			struct ord_epoch e, e2;
			s.rank = r;
			ck_assert_int_eq(ord_epoch_init(&e, &s, 3, NULL), 0);
			pos = ord_position_of(&e, b);
			ck_assert_uint_eq(pos, b * 32);
			uint64_t back;
			ck_assert_int_eq(ord_batch_at_position(&e, pos, &back), 0);
			ck_assert_uint_eq(back, b);
			ck_assert_int_eq(ord_epoch_init_at(&e2, &s, 3, pos, NULL), 0);
			ck_assert_uint_eq(ord_batches_per_epoch(&e2), ord_batches_per_epoch(&e) - b);
			for (uint64_t k = 0; k < ord_batches_per_epoch(&e2); k++) {
				ck_assert_uint_eq(ord_batch_size(&e2, k), ord_batch_size(&e, b + k));
				for (uint32_t i = 0; i < ord_batch_size(&e2, k); i++)
					ck_assert_uint_eq(ord_sample(&e2, k, i), ord_sample(&e, b + k, i));
			}
			for (uint64_t k = 0; k < b && k < ord_batches_per_epoch(&e); k++)
				/* consumed, padding aside */
				for (uint32_t i = 0; i < ord_batch_size(&e, k); i++)
					if (ord_global_position(&e, k, i) < s.n)
						seen[ord_sample(&e, k, i)]++;
			ord_epoch_fini(&e);
			ord_epoch_fini(&e2);
		}
		/* continue with 3 ranks of batch 5 from pos */
		struct ord_spec s3 = s;
		s3.world = 3;
		s3.batch = 5;
		for (uint32_t r = 0; r < 3; r++) {
			struct ord_epoch e;
			s3.rank = r;
			ck_assert_int_eq(ord_epoch_init_at(&e, &s3, 3, pos, NULL), 0);
			for (uint64_t k = 0; k < ord_batches_per_epoch(&e); k++)
				for (uint32_t i = 0; i < ord_batch_size(&e, k); i++)
					if (ord_global_position(&e, k, i) < s.n)
						seen[ord_sample(&e, k, i)]++;
			ord_epoch_fini(&e);
		}
		for (uint64_t x = 0; x < s.n; x++)
			ck_assert_msg(seen[x] == 1, "resume at batch %llu: sample %llu seen %u times",
				      (unsigned long long)b, (unsigned long long)x, seen[x]);
		free(seen);
	}
}
END_TEST

START_TEST(test_order_batch_at_position_errors)
{
	struct ord_spec s = spec_of(100, ORD_FULL);
	struct ord_epoch e;
	uint64_t b = 77;

	s.world = 2;
	s.batch = 5;
	ck_assert_int_eq(ord_epoch_init_at(&e, &s, 0, 20, NULL), 0);
	ck_assert_uint_eq(ord_batches_per_epoch(&e), 8);
	ck_assert_int_eq(ord_batch_at_position(&e, 25, &b), -EINVAL);
	ck_assert_int_eq(ord_batch_at_position(&e, 10, &b), -EINVAL);
	ck_assert_int_eq(ord_batch_at_position(&e, 20 + 9 * 10, &b), -ERANGE);
	ck_assert_uint_eq(b, 77);
	ck_assert_int_eq(ord_batch_at_position(&e, 20 + 8 * 10, &b), 0);
	ck_assert_uint_eq(b, 8);
	ord_epoch_fini(&e);
	ck_assert_int_eq(ord_epoch_init_at(&e, &s, 0, 500, NULL), 0);
	ck_assert_uint_eq(ord_batches_per_epoch(&e), 0);
	ord_epoch_fini(&e);
}
END_TEST

START_TEST(test_order_bad_spec)
{
	struct ord_spec s = spec_of(10, ORD_FULL), t;
	struct ord_epoch e;
	struct feed_err err;
	uint64_t bf[] = {0, 4, 3, 10};

	t = s, t.n = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "dataset size"));
	t = s, t.rank = 2, t.world = 2;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "rank 2"));
	t = s, t.batch = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "batch"));
	t = s, t.mode = ORD_BLOCK_WINDOW, t.window = 2;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	t.block_first = bf, t.nblocks = 3;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "block 2"));
	bf[2] = 5, t.window = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "window"));
	t.window = 1, t.n = 11;
	ck_assert_int_eq(ord_epoch_init(&e, &t, 0, &err), -EINVAL);
	ord_epoch_fini(&e);
}
END_TEST

/* lazy_table: init leaves the position table out (O(1)); the table built
 * apart, for the spec and epoch alone, gives the eager init's samples to
 * a layout from 0 and to one resumed mid-epoch alike; a block table out
 * of order is refused when the table is built. */
START_TEST(test_order_lazy_table)
{
	struct ord_spec s = spec_of(5000, ORD_BLOCK_WINDOW), lazy;
	struct ord_epoch eager, e, at;
	struct feed_err err;
	uint64_t *t, *t2, bad[] = {0, 4, 3, 10};

	s.window = 3;
	s.batch = 7;
	s.block_first = blocks_of(s.n, 9, &s.nblocks);
	lazy = s, lazy.lazy_table = true;
	ck_assert_int_eq(ord_epoch_init(&eager, &s, 5, &err), 0);
	ck_assert(!ord_epoch_needs_table(&eager));
	ck_assert_int_eq(ord_epoch_init(&e, &lazy, 5, &err), 0);
	ck_assert_int_eq(ord_epoch_init_at(&at, &lazy, 5, 7 * 40, &err), 0);
	ck_assert(ord_epoch_needs_table(&e) && ord_epoch_needs_table(&at));
	ck_assert_uint_eq(ord_batches_per_epoch(&e), ord_batches_per_epoch(&eager));
	ck_assert_int_eq(ord_table_build(&lazy, 5, &t, &err), 0);
	ck_assert_int_eq(ord_table_build(&lazy, 5, &t2, &err), 0);
	ord_epoch_set_table(&e, t);
	ord_epoch_set_table(&at, t2);
	ck_assert(!ord_epoch_needs_table(&e));
	for (uint64_t b = 0; b < ord_batches_per_epoch(&e); b++)
		for (uint32_t i = 0; i < ord_batch_size(&e, b); i++) {
			ck_assert_uint_eq(ord_sample(&e, b, i), ord_sample(&eager, b, i));
			if (b >= 40)
				ck_assert_uint_eq(ord_sample(&at, b - 40, i), ord_sample(&eager, b, i));
		}
	ck_assert_ptr_eq(ord_epoch_take_table(&at), t2);
	ck_assert(ord_epoch_needs_table(&at));
	free(t2);
	ord_epoch_fini(&at);
	ord_epoch_fini(&e);
	ord_epoch_fini(&eager);
	free((void *)s.block_first);
	lazy = spec_of(10, ORD_BLOCK_WINDOW);
	lazy.window = 2, lazy.block_first = bad, lazy.nblocks = 3, lazy.lazy_table = true;
	ck_assert_int_eq(ord_epoch_init(&e, &lazy, 0, &err), 0);
	ck_assert_int_eq(ord_table_build(&lazy, 0, &t, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "block 2 starts before block 1"));
	ord_epoch_fini(&e);
}
END_TEST

/* ---- node order ---- */

static struct ord_spec node_spec(uint64_t n, uint32_t nodes, uint32_t local, uint64_t unit)
{
	struct ord_spec s = spec_of(n, ORD_NODE);
	s.nodes = nodes;
	s.world = nodes * local;
	s.unit = unit;
	s.batch = 3;
	return s;
}

START_TEST(test_order_node_bijection)
{
	static const uint32_t nodes[] = {1, 2, 3, 4};
	static const uint64_t units[] = {1, 7, 100};

	for (size_t i = 0; i < NSIZES; i++)
		for (size_t m = 0; m < 4; m++)
			for (size_t u = 0; u < 3; u++)
				for (int fixed = 0; fixed < 2; fixed++) {
					struct ord_spec s = node_spec(sizes[i], nodes[m], 1, units[u]);
					struct ord_epoch e;
					s.deal_fixed = fixed;
					ck_assert_int_eq(ord_epoch_init(&e, &s, 3, NULL), 0);
					check_bijection(&e, sizes[i]);
					ord_epoch_fini(&e);
				}
}
END_TEST

/* Reads every rank's batches from batch `from` on (levels as given) into
 * count[sample]; node_of[sample] = the reading node (last one). Returns the
 * batches per rank, asserted equal across ranks. */
static uint64_t node_read(struct ord_spec s, uint64_t epoch, const struct ord_level *lv,
			  uint32_t nlv, uint64_t from, uint32_t *count, int *node_of,
			  uint32_t *pad_count)
{
	uint64_t nb = UINT64_MAX;
	uint32_t lw = s.world / s.nodes;

	for (uint32_t r = 0; r < s.world; r++) {
		struct ord_epoch e;
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init_levels(&e, &s, epoch, lv, nlv, NULL), 0);
		if (nb == UINT64_MAX)
			nb = ord_batches_per_epoch(&e);
		ck_assert_uint_eq(ord_batches_per_epoch(&e), nb);
		for (uint64_t b = from; b < nb; b++)
			for (uint32_t i = 0; i < ord_batch_size(&e, b); i++) {
				uint64_t x = ord_sample(&e, b, i);
				ck_assert_uint_lt(x, s.n);
				if (ord_padding(&e, b, i)) {
					(*pad_count)++;
					continue;
				}
				count[x]++;
				if (node_of)
					node_of[x] = (int)(r / lw);
			}
		ord_epoch_fini(&e);
	}
	return nb;
}

static const uint32_t node_cases[][4] = {
	/* n, nodes, ranks per node, unit */
	{1000, 4, 2, 10}, {1003, 4, 2, 10}, {997, 3, 3, 64}, {60000, 4, 8, 83},
	{10, 4, 1, 3},    {5, 4, 2, 1},     {1000, 1, 4, 50}, {999, 2, 1, 1000},
};
#define NNODE_CASES (sizeof(node_cases) / sizeof(node_cases[0]))

START_TEST(test_order_node_partition_once)
{
	for (size_t c = 0; c < NNODE_CASES; c++)
		for (int mode = 0; mode < 3; mode++) { /* padding, drop_last, pad_last */
			const uint32_t *k = node_cases[c];
			struct ord_spec s = node_spec(k[0], k[1], k[2], k[3]);
			uint32_t *count = calloc(s.n, sizeof(*count)), pads = 0;
			uint64_t rb = (uint64_t)s.world * s.batch;
			s.drop_last = mode == 1;
			s.pad_last = mode == 2;
			uint64_t nb = node_read(s, 1, NULL, 0, 0, count, NULL, &pads);
			/* the counts of the other modes (order.h "Partition") */
			uint64_t want = mode == 1 ? s.n / rb : mode == 2 ? (s.n + rb - 1) / rb :
				       ((s.n + s.world - 1) / s.world + s.batch - 1) / s.batch;
			ck_assert_msg(nb == want, "case %zu mode %d: %llu batches, want %llu", c,
				      mode, (unsigned long long)nb, (unsigned long long)want);
			uint64_t seen = 0;
			for (uint64_t x = 0; x < s.n; x++) {
				ck_assert_uint_le(count[x], 1);
				seen += count[x];
			}
			if (mode != 1)
				ck_assert_msg(seen == s.n, "case %zu mode %d: %llu of %llu samples read",
					      c, mode, (unsigned long long)seen,
					      (unsigned long long)s.n);
			else
				ck_assert_uint_eq(seen + pads, nb * rb);
			free(count);
		}
}
END_TEST

/* The samples each node reads, as a bitmap per node. */
static uint8_t *node_sets(struct ord_spec s, uint64_t epoch)
{
	uint8_t *set = calloc((size_t)s.n * s.nodes, 1);
	uint32_t lw = s.world / s.nodes;

	for (uint32_t r = 0; r < s.world; r++) {
		struct ord_epoch e;
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &s, epoch, NULL), 0);
		for (uint64_t b = 0; b < ord_batches_per_epoch(&e); b++)
			for (uint32_t i = 0; i < ord_batch_size(&e, b); i++)
				set[(r / lw) * s.n + ord_sample(&e, b, i)] = 1;
		ord_epoch_fini(&e);
	}
	return set;
}

START_TEST(test_order_node_share_is_local)
{
	/* 4 nodes, units of 50 samples: a node's share is whole units but for
	 * the two it may split with its neighbours, and 1/4 of the dataset */
	struct ord_spec s = node_spec(10000, 4, 2, 50);
	uint8_t *set = node_sets(s, 2);

	for (uint32_t k = 0; k < 4; k++) {
		uint64_t samples = 0, units = 0;
		for (uint64_t u = 0; u < s.n / s.unit; u++) {
			uint64_t in = 0;
			for (uint64_t x = u * s.unit; x < (u + 1) * s.unit; x++)
				in += set[k * s.n + x];
			samples += in;
			units += in > 0;
		}
		ck_assert_uint_eq(samples, s.n / 4);
		ck_assert_uint_le(units, s.n / 4 / s.unit + 2);
	}
	/* and its samples are shuffled: rank 0's first batch is not one unit */
	struct ord_epoch e;
	s.rank = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 2, NULL), 0);
	uint64_t u0 = ord_sample(&e, 0, 0) / s.unit, same = 0;
	for (uint32_t i = 1; i < s.batch; i++)
		same += ord_sample(&e, 0, i) / s.unit == u0;
	ck_assert_uint_lt(same, s.batch - 1);
	ord_epoch_fini(&e);
	free(set);
}
END_TEST

START_TEST(test_order_node_deal_fixed_or_rotating)
{
	struct ord_spec s = node_spec(4000, 4, 1, 20);

	for (int fixed = 0; fixed < 2; fixed++) {
		s.deal_fixed = fixed;
		uint8_t *a = node_sets(s, 0), *b = node_sets(s, 1);
		uint64_t moved = 0;
		for (uint64_t x = 0; x < s.n * s.nodes; x++)
			moved += a[x] != b[x];
		if (fixed)
			ck_assert_uint_eq(moved, 0);
		else
			ck_assert_uint_gt(moved, s.n); /* most samples change node */
		free(a);
		free(b);
		/* the order inside a node changes with the epoch either way */
		struct ord_epoch e0, e1;
		ck_assert_int_eq(ord_epoch_init(&e0, &s, 0, NULL), 0);
		ck_assert_int_eq(ord_epoch_init(&e1, &s, 1, NULL), 0);
		uint64_t same = 0;
		for (uint64_t bt = 0; bt < 50; bt++)
			same += ord_sample(&e0, bt, 0) == ord_sample(&e1, bt, 0);
		ck_assert_uint_lt(same, 10);
		ord_epoch_fini(&e0);
		ord_epoch_fini(&e1);
	}
}
END_TEST

/* Reads batches [0, at) of layout `a`, then the rest under layout `b`
 * (levels lv + {a's nodes, P}); every sample must come exactly once (not
 * counting padding). */
static void node_resume(struct ord_spec a, uint64_t at, struct ord_spec b, bool fixed)
{
	uint32_t *count = calloc(a.n, sizeof(*count)), pads = 0;
	struct ord_epoch e;

	a.deal_fixed = b.deal_fixed = fixed;
	/* the first part: batches < at of every rank of a */
	for (uint32_t r = 0; r < a.world; r++) {
		a.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &a, 5, NULL), 0);
		for (uint64_t bb = 0; bb < at; bb++)
			for (uint32_t i = 0; i < ord_batch_size(&e, bb); i++)
				if (!ord_padding(&e, bb, i))
					count[ord_sample(&e, bb, i)]++;
		ord_epoch_fini(&e);
	}
	a.rank = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &a, 5, NULL), 0);
	struct ord_level lv = {.nodes = a.nodes, .pos = ord_position_of(&e, at)};
	ord_epoch_fini(&e);
	node_read(b, 5, &lv, 1, 0, count, NULL, &pads);
	for (uint64_t x = 0; x < a.n; x++)
		ck_assert_msg(count[x] == 1, "%u nodes -> %u nodes at batch %llu: sample %llu read "
			      "%u times", a.nodes, b.nodes, (unsigned long long)at,
			      (unsigned long long)x, count[x]);
	free(count);
}

START_TEST(test_order_node_resume_other_nodes)
{
	struct ord_spec four = node_spec(1003, 4, 2, 10);
	struct ord_spec two = node_spec(1003, 2, 2, 10), three = node_spec(1003, 3, 1, 10);
	struct ord_spec four_wide = node_spec(1003, 4, 3, 10);

	for (int fixed = 0; fixed < 2; fixed++)
		for (uint64_t at = 0; at <= 42; at += 7) {
			node_resume(four, at, two, fixed);
			node_resume(four, at, three, fixed);
			node_resume(four, at, four_wide, fixed); /* same nodes, more ranks */
			node_resume(two, at, four, fixed);
		}
}
END_TEST

START_TEST(test_order_node_resume_twice)
{
	/* 4 nodes to 3 at batch 10, then 3 to 2 at batch 5 of that layout */
	struct ord_spec a = node_spec(2000, 4, 2, 16), b = node_spec(2000, 3, 2, 16);
	struct ord_spec c = node_spec(2000, 2, 1, 16);
	uint32_t *count = calloc(a.n, sizeof(*count)), pads = 0;
	struct ord_level lv[2] = {{4, 10 * 3 * 8}, {3, 5 * 3 * 6}};
	struct ord_epoch e;

	for (uint32_t r = 0; r < a.world; r++) {
		a.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &a, 0, NULL), 0);
		for (uint64_t bb = 0; bb < 10; bb++)
			for (uint32_t i = 0; i < a.batch; i++)
				count[ord_sample(&e, bb, i)]++;
		ord_epoch_fini(&e);
	}
	for (uint32_t r = 0; r < b.world; r++) {
		b.rank = r;
		ck_assert_int_eq(ord_epoch_init_levels(&e, &b, 0, lv, 1, NULL), 0);
		ck_assert_uint_eq(ord_level_samples(&e), a.n - lv[0].pos);
		ck_assert_uint_eq(ord_position_of(&e, 5), lv[1].pos);
		for (uint64_t bb = 0; bb < 5; bb++)
			for (uint32_t i = 0; i < b.batch; i++)
				count[ord_sample(&e, bb, i)]++;
		ord_epoch_fini(&e);
	}
	node_read(c, 0, lv, 2, 0, count, NULL, &pads);
	for (uint64_t x = 0; x < a.n; x++)
		ck_assert_uint_eq(count[x], 1);
	free(count);
}
END_TEST

START_TEST(test_order_node_bad_spec)
{
	struct ord_spec s = node_spec(100, 3, 2, 10);
	struct ord_epoch e;
	struct feed_err err = {0};
	struct ord_level lv = {.nodes = 4, .pos = 6};

	s.world = 5;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "3 nodes do not divide a world of 5"));
	s.world = 6;
	s.unit = 0;
	ck_assert_int_eq(ord_epoch_init(&e, &s, 0, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "unit"));
	s.unit = 10;
	ck_assert_int_eq(ord_epoch_init_levels(&e, &s, 0, &lv, 1, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a multiple of its 4 nodes"));
	/* a level past every share leaves nothing: no batches */
	lv.pos = 200;
	ck_assert_int_eq(ord_epoch_init_levels(&e, &s, 0, &lv, 1, &err), 0);
	ck_assert_uint_eq(ord_batches_per_epoch(&e), 0);
	ord_epoch_fini(&e);
}
END_TEST

START_TEST(test_order_node_sample_after_stays_on_node)
{
	/* on_error skip's replacement: node order's stays in the node's share,
	 * the other modes' is the next global position's sample */
	struct ord_spec s = node_spec(1000, 4, 2, 10);
	uint8_t *set = node_sets(s, 3);
	struct ord_epoch e;

	for (uint32_t r = 0; r < s.world; r++) {
		s.rank = r;
		ck_assert_int_eq(ord_epoch_init(&e, &s, 3, NULL), 0);
		uint64_t g = ord_global_position(&e, 2, 1);
		ck_assert_uint_eq(ord_sample_after(&e, g, 0), ord_sample(&e, 2, 1));
		for (uint64_t k = 1; k < 600; k++)
			ck_assert(set[(r / 2) * s.n + ord_sample_after(&e, g, k)]);
		/* the next local position is the next local rank's sample */
		if (r % 2 == 0) {
			struct ord_epoch e1;
			s.rank = r + 1;
			ck_assert_int_eq(ord_epoch_init(&e1, &s, 3, NULL), 0);
			ck_assert_uint_eq(ord_sample_after(&e, g, 1), ord_sample(&e1, 2, 1));
			ord_epoch_fini(&e1);
		}
		ord_epoch_fini(&e);
	}
	free(set);
	struct ord_spec f = spec_of(1000, ORD_FULL);
	f.world = 3;
	ck_assert_int_eq(ord_epoch_init(&e, &f, 3, NULL), 0);
	ck_assert_uint_eq(ord_sample_after(&e, 998, 5), ord_permute(&e, 3));
	ord_epoch_fini(&e);
}
END_TEST

static Suite *order_suite(void)
{
	Suite *s = suite_create("order");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_order_bijection);
	tcase_add_test(tc, test_order_keys_separate);
	tcase_add_test(tc, test_order_full_is_shuffled);
	tcase_add_test(tc, test_order_lookup_constant);
	tcase_add_test(tc, test_order_block_window_locality);
	tcase_add_test(tc, test_order_partition_padding);
	tcase_add_test(tc, test_order_dataloader_counts);
	tcase_add_test(tc, test_order_partition_drop_last);
	tcase_add_test(tc, test_order_partition_eval);
	tcase_add_test(tc, test_order_partition_matches_distributed_sampler);
	tcase_add_test(tc, test_order_resume_positions);
	tcase_add_test(tc, test_order_batch_at_position_errors);
	tcase_add_test(tc, test_order_bad_spec);
	tcase_add_test(tc, test_order_lazy_table);
	tcase_add_test(tc, test_order_node_bijection);
	tcase_add_test(tc, test_order_node_partition_once);
	tcase_add_test(tc, test_order_node_share_is_local);
	tcase_add_test(tc, test_order_node_deal_fixed_or_rotating);
	tcase_add_test(tc, test_order_node_resume_other_nodes);
	tcase_add_test(tc, test_order_node_resume_twice);
	tcase_add_test(tc, test_order_node_bad_spec);
	tcase_add_test(tc, test_order_node_sample_after_stays_on_node);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(order_suite)
