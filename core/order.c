/*
 * order.c: keyed permutations of an epoch and their partition over ranks
 * (see order.h for the semantics).
 *
 * Owns: the Feistel network with cycle walking, key derivation from
 * (version, seed, epoch), the block-window position table, and the batch
 * arithmetic of drop_last / padding / eval.
 *
 * Threads: init/fini on the caller's thread; queries on any thread (the
 * epoch is immutable); ord_table_build() on any thread. Never blocks,
 * never does I/O, never allocates outside ord_epoch_init_at() and
 * ord_table_build().
 */
#include "order.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ORD_GOLDEN 0x9E3779B97F4A7C15ull
/* Domain tags: the three networks of an epoch never share keys. */
#define ORD_DOMAIN_FULL 0x46554c4cull  /* "FULL" */
#define ORD_DOMAIN_BLOCK 0x424c4b53ull /* "BLKS" */
#define ORD_DOMAIN_WIN 0x57494e44ull   /* "WIND" */
#define ORD_DOMAIN_DEAL 0x4445414cull  /* "DEAL": units to nodes, per epoch */
#define ORD_DOMAIN_FIXED 0x46495844ull /* "FIXD": units to nodes, every epoch */
#define ORD_DOMAIN_NODE 0x4e4f4445ull  /* "NODE": inside a node's share */

/* murmur3's 64-bit finaliser: a bijection with full avalanche. */
static inline uint64_t ord_fmix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

static inline uint64_t ord_mask(uint32_t bits)
{
	return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

/* Bits of the smallest power of two >= n, at least 2 (both halves >= 1). */
static uint32_t ord_bits_for(uint64_t n)
{
	uint32_t b = 2;

	while (b < 64 && (1ull << b) < n)
		b++;
	return b;
}

/* Base key of (version, seed, epoch, domain). */
static uint64_t ord_base_key(const struct ord_spec *s, uint64_t epoch, uint64_t domain)
{
	uint64_t h = ord_fmix64(s->seed ^ 0x6a09e667f3bcc908ull);
	size_t len = strnlen(s->version, sizeof(s->version));

	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = 0;
		size_t k = len - i < 8 ? len - i : 8;
		memcpy(&w, s->version + i, k);
		h = ord_fmix64(h ^ w) + ORD_GOLDEN;
	}
	h = ord_fmix64(h ^ len);
	h = ord_fmix64(h ^ (epoch * ORD_GOLDEN + 0xbb67ae8584caa73bull));
	return ord_fmix64(h ^ domain);
}

static void ord_round_keys(uint64_t base, uint64_t rk[ORD_ROUNDS])
{
	for (uint32_t r = 0; r < ORD_ROUNDS; r++)
		rk[r] = ord_fmix64(base + (r + 1) * ORD_GOLDEN);
}

/*
 * One pass of the network over `bits` bits. The state is (L, R) with R the
 * low rb bits; each round maps (L, R) -> (R, L ^ F(R)), so the widths of the
 * two halves swap every round (an unbalanced Feistel when bits is odd).
 * Every round is invertible, so the pass is a permutation of [0, 2^bits).
 */
static uint64_t ord_feistel(uint64_t x, uint32_t bits, const uint64_t rk[ORD_ROUNDS],
			    uint64_t tweak)
{
	uint32_t lb = bits / 2, rb = bits - lb;
	uint64_t l = x >> rb, r = x & ord_mask(rb);

	for (uint32_t i = 0; i < ORD_ROUNDS; i++) {
		uint64_t f = ord_fmix64(r ^ rk[i] ^ tweak) & ord_mask(lb);
		uint64_t nr = l ^ f;
		l = r;
		r = nr;
		uint32_t t = lb;
		lb = rb;
		rb = t;
	}
	return (l << rb) | r;
}

/* The inverse of ord_feistel(): the rounds undone last to first. */
static uint64_t ord_feistel_inv(uint64_t y, uint32_t bits, const uint64_t rk[ORD_ROUNDS],
				uint64_t tweak)
{
	/* an even number of rounds leaves the halves as they started */
	uint32_t lb = bits / 2, rb = bits - lb;
	uint64_t l = y >> rb, r = y & ord_mask(rb);

	for (uint32_t i = ORD_ROUNDS; i-- > 0;) {
		/* after round i: l = r0 (rb bits wide now), r = l0 ^ F(r0) (lb0 = rb) */
		uint64_t f = ord_fmix64(l ^ rk[i] ^ tweak) & ord_mask(rb);
		uint64_t nl = r ^ f;
		r = l;
		l = nl;
		uint32_t t = lb;
		lb = rb;
		rb = t;
	}
	return (l << rb) | r;
}

/* Cycle walking: a permutation of [0, n) from one of [0, 2^bits). */
static uint64_t ord_perm(uint64_t x, uint64_t n, uint32_t bits, const uint64_t rk[ORD_ROUNDS],
			 uint64_t tweak)
{
	assert(x < n);
	if (n <= 1)
		return 0;
	do
		x = ord_feistel(x, bits, rk, tweak);
	while (x >= n);
	return x;
}

/* The inverse of ord_perm(): cycle walking backwards. */
static uint64_t ord_perm_inv(uint64_t y, uint64_t n, uint32_t bits,
			     const uint64_t rk[ORD_ROUNDS], uint64_t tweak)
{
	assert(y < n);
	if (n <= 1)
		return 0;
	do
		y = ord_feistel_inv(y, bits, rk, tweak);
	while (y >= n);
	return y;
}

/* Last j in [lo, hi) with tab[j] <= p (tab nondecreasing, tab[lo] <= p). */
static uint64_t ord_search(const uint64_t *tab, uint64_t lo, uint64_t hi, uint64_t p)
{
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (tab[mid] <= p)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static uint64_t ord_block_of_slot(const struct ord_epoch *e, uint64_t slot)
{
	return ord_perm(slot, e->spec.nblocks, e->bits_blocks, e->rk_block, 0);
}

static uint64_t ord_window_tweak(const struct ord_epoch *e, uint64_t w)
{
	return ord_fmix64(w * ORD_GOLDEN + e->rk_win[0]);
}

/* Block-window lookup: window of p, permuted offset inside it, then the
 * permuted block slot holding that offset. */
static uint64_t ord_permute_window(const struct ord_epoch *e, uint64_t p)
{
	const uint64_t *ss = e->slot_start;
	uint64_t nb = e->spec.nblocks, win = e->spec.window;

	assert(ss);  /* lazy_table: ord_epoch_set_table() first */
	uint64_t w = ord_search(ss, 0, nb, p) / win;
	uint64_t j0 = w * win, j1 = j0 + win < nb ? j0 + win : nb;
	uint64_t ws = ss[j0], size = ss[j1] - ws;
	uint64_t q = ord_perm(p - ws, size, ord_bits_for(size), e->rk_win,
			      ord_window_tweak(e, w));
	uint64_t p2 = ws + q;
	uint64_t j = ord_search(ss, j0, j1, p2);
	uint64_t b = ord_block_of_slot(e, j);

	return e->spec.block_first[b] + (p2 - ss[j]);
}

/* ---- node order (order.h "Node order") ---- */

/* floor(k * n / m) without overflow (n < 2^62, k <= m < 2^32 + 1). */
static inline uint64_t ord_share_lo(uint64_t k, uint64_t n, uint64_t m)
{
	return (uint64_t)((unsigned __int128)k * n / m);
}

/* Bits of the smallest power of two >= n, at least 2, in O(1). */
static inline uint32_t ord_bits_fast(uint64_t n)
{
	if (n <= 4)
		return 2;
	return 64 - (uint32_t)__builtin_clzll(n - 1);
}

/* D: the dealt units laid out one after another; x < N. */
static uint64_t ord_deal(const struct ord_epoch *e, uint64_t x)
{
	uint64_t c = e->spec.unit, ts = e->tail_slot, j, off;

	if (x < ts * c) {
		j = x / c;
		off = x % c;
	} else if (x < ts * c + e->tail) {
		j = ts;
		off = x - ts * c;
	} else {
		uint64_t y = x - ts * c - e->tail;
		j = ts + 1 + y / c;
		off = y % c;
	}
	return ord_perm(j, e->units, e->bits_units, e->rk_deal, 0) * c + off;
}

/* Y of level 0 (M0 nodes): node k's share of D, shuffled inside. */
static uint64_t ord_node_seq0(const struct ord_epoch *e, uint32_t m0, uint64_t x)
{
	uint64_t n = e->spec.n, lo = 0, hi = m0; /* node k: last with lo(k) <= x */
	uint64_t k, first, size;

	if (e->nlevels == 0 && x - e->share_lo < e->share_n) {
		/* this stream's own share: every lookup but padding's and resumes' */
		k = e->spec.rank / e->local_world;
		first = e->share_lo;
		size = e->share_n;
	} else {
		while (hi - lo > 1) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (ord_share_lo(mid, n, m0) <= x)
				lo = mid;
			else
				hi = mid;
		}
		k = lo;
		first = ord_share_lo(k, n, m0);
		size = ord_share_lo(k + 1, n, m0) - first;
	}
	uint64_t tweak = ord_fmix64((k << 32 ^ m0) * ORD_GOLDEN + e->rk_node[0]);
	uint64_t p = ord_perm(x - first, size, ord_bits_fast(size), e->rk_node, tweak);
	return ord_deal(e, first + p);
}

/* Position x of level i's sequence, as a position of level i-1's: the
 * remaining positions of level i-1, node after node. */
static uint64_t ord_level_up(const struct ord_epoch *e, uint32_t i, uint64_t x)
{
	const struct ord_level *lv = &e->levels[i - 1];
	uint64_t n = e->level_n[i - 1], m = lv->nodes, c = lv->pos / m;
	uint64_t lo = 0, hi = m; /* node k: last with lo(k) - k*c <= x */

	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (ord_share_lo(mid, n, m) - mid * c <= x)
			lo = mid;
		else
			hi = mid;
	}
	return x + (lo + 1) * c;
}

/* Y of the epoch's last level at position x < level_n[nlevels]. */
static uint64_t ord_node_seq(const struct ord_epoch *e, uint64_t x)
{
	for (uint32_t i = e->nlevels; i > 0; i--)
		x = ord_level_up(e, i, x);
	return ord_node_seq0(e, e->nlevels ? e->levels[0].nodes : e->spec.nodes, x);
}

/* Node order: the position of this layout's sequence that local position p
 * of this node reads (wrapped inside the share when past it). */
static uint64_t ord_node_x(const struct ord_epoch *e, uint64_t p)
{
	uint64_t nl = e->level_n[e->nlevels];

	if (p < e->share_n)
		return e->share_lo + p;
	if (e->share_n)
		return e->share_lo + p % e->share_n;
	return p % nl; /* a node with no share left (fewer samples than nodes) */
}

/* Node order: local position of sample i of batch b of this rank. */
static uint64_t ord_node_p(const struct ord_epoch *e, uint64_t batch, uint32_t i)
{
	return (batch * e->spec.batch + i) * e->local_world + e->local;
}

uint64_t ord_permute(const struct ord_epoch *e, uint64_t pos)
{
	assert(pos < e->spec.n);
	if (e->spec.eval)
		return pos;
	switch (e->spec.mode) {
	case ORD_FULL:
		return ord_perm(pos, e->spec.n, e->bits_n, e->rk_full, 0);
	case ORD_BLOCK_WINDOW:
		return ord_permute_window(e, pos);
	case ORD_NODE:
		return ord_node_seq(e, pos);
	case ORD_SEQUENTIAL:
	default:
		return pos;
	}
}

/* O(1): the table's ends; its order is checked as the position table is
 * built (ord_table_fill). */
static int ord_check_blocks(const struct ord_spec *s, struct feed_err *err)
{
	if (!s->block_first || s->nblocks == 0 || s->nblocks > ORD_MAX_BLOCKS)
		return feed_err_set(err, -EINVAL, "order: block-window needs 1..%llu blocks, got %llu",
				    (unsigned long long)ORD_MAX_BLOCKS,
				    (unsigned long long)(s->block_first ? s->nblocks : 0));
	if (s->window == 0)
		return feed_err_set(err, -EINVAL, "order: window must be >= 1 block");
	if (s->block_first[0] != 0 || s->block_first[s->nblocks] != s->n)
		return feed_err_set(err, -EINVAL,
				    "order: block table spans [%llu, %llu), dataset has %llu samples",
				    (unsigned long long)s->block_first[0],
				    (unsigned long long)s->block_first[s->nblocks],
				    (unsigned long long)s->n);
	return 0;
}

static int ord_check_spec(const struct ord_spec *s, struct feed_err *err)
{
	if (s->n == 0 || s->n > ORD_MAX_SAMPLES)
		return feed_err_set(err, -EINVAL, "order: dataset size %llu out of range [1, 2^62]",
				    (unsigned long long)s->n);
	if (s->world == 0 || s->rank >= s->world)
		return feed_err_set(err, -EINVAL, "order: rank %u not in world of %u", s->rank,
				    s->world);
	if (s->batch == 0)
		return feed_err_set(err, -EINVAL, "order: batch size must be >= 1");
	if (s->mode != ORD_SEQUENTIAL && s->mode != ORD_FULL && s->mode != ORD_BLOCK_WINDOW &&
	    s->mode != ORD_NODE)
		return feed_err_set(err, -EINVAL, "order: unknown mode %d", (int)s->mode);
	if (s->mode == ORD_NODE) {
		if (s->nodes == 0 || s->world % s->nodes)
			return feed_err_set(err, -EINVAL,
					    "order: %u nodes do not divide a world of %u ranks",
					    s->nodes, s->world);
		if (s->unit == 0)
			return feed_err_set(err, -EINVAL, "order: node unit must be >= 1 sample");
	}
	if (s->mode == ORD_BLOCK_WINDOW && !s->eval)
		return ord_check_blocks(s, err);
	return 0;
}

/* The permuted blocks' start positions into ss (nblocks + 1 entries):
 * slot j holds block perm(j), keyed by rk. Every block is visited once
 * (perm is a permutation), so its order is checked here. */
static int ord_table_fill(const struct ord_spec *s, uint64_t *ss, const uint64_t rk[ORD_ROUNDS],
			  struct feed_err *err)
{
	uint64_t nb = s->nblocks, pos = 0;
	uint32_t bits = ord_bits_for(nb);

	for (uint64_t j = 0; j < nb; j++) {
		uint64_t b = ord_perm(j, nb, bits, rk, 0);
		if (s->block_first[b + 1] < s->block_first[b])
			return feed_err_set(err, -EINVAL, "order: block %llu starts before block %llu",
					    (unsigned long long)b + 1, (unsigned long long)b);
		ss[j] = pos;
		pos += s->block_first[b + 1] - s->block_first[b];
	}
	ss[nb] = pos;
	assert(pos == s->n);
	return 0;
}

int ord_table_build(const struct ord_spec *s, uint64_t epoch, uint64_t **ret,
		    struct feed_err *err)
{
	uint64_t rk[ORD_ROUNDS], *ss;
	int rc;

	assert(s->mode == ORD_BLOCK_WINDOW && !s->eval);
	if ((rc = ord_check_blocks(s, err)) < 0)
		return rc;
	if (!(ss = malloc((s->nblocks + 1) * sizeof(uint64_t))))
		return feed_err_set(err, -ENOMEM, "order: no memory for %llu block positions",
				    (unsigned long long)s->nblocks);
	ord_round_keys(ord_base_key(s, epoch, ORD_DOMAIN_BLOCK), rk);
	if ((rc = ord_table_fill(s, ss, rk, err)) < 0) {
		free(ss);
		return rc;
	}
	*ret = ss;
	return 0;
}

bool ord_epoch_needs_table(const struct ord_epoch *e)
{
	return e->spec.mode == ORD_BLOCK_WINDOW && !e->spec.eval && !e->slot_start;
}

void ord_epoch_set_table(struct ord_epoch *e, uint64_t *t)
{
	assert(ord_epoch_needs_table(e));
	e->slot_start = t;
}

uint64_t *ord_epoch_take_table(struct ord_epoch *e)
{
	uint64_t *t = e->slot_start;

	e->slot_start = NULL;
	return t;
}

/* Batches and samples of this rank for layout start S. */
static void ord_layout(struct ord_epoch *e)
{
	const struct ord_spec *s = &e->spec;
	uint64_t n = s->n, st = e->start, rb = (uint64_t)s->world * s->batch;

	if (s->eval) {
		uint64_t first = st + s->rank;
		e->rank_count = first < n ? (n - first + s->world - 1) / s->world : 0;
		e->batches = (e->rank_count + s->batch - 1) / s->batch;
		return;
	}
	if (s->mode == ORD_NODE) {
		/* every node's share is floor or ceil of N'/M; ranks split it */
		uint64_t nl = e->level_n[e->nlevels], lw = e->local_world;
		uint64_t most = (nl + s->nodes - 1) / s->nodes, least = nl / s->nodes;
		if (s->drop_last)
			e->batches = least / (lw * s->batch);
		else if (s->pad_last)
			e->batches = (most + lw * s->batch - 1) / (lw * s->batch);
		if (s->drop_last || s->pad_last) {
			e->rank_count = e->batches * s->batch;
			return;
		}
		e->rank_count = (most + lw - 1) / lw;
		e->batches = (e->rank_count + s->batch - 1) / s->batch;
		return;
	}
	uint64_t rem = st < n ? n - st : 0;
	if (s->drop_last || s->pad_last) {
		e->batches = s->drop_last ? rem / rb : (rem + rb - 1) / rb;
		e->rank_count = e->batches * s->batch;
		return;
	}
	/* DistributedSampler's equal share, DataLoader's partial last batch */
	e->rank_count = (rem + s->world - 1) / s->world;
	e->batches = (e->rank_count + s->batch - 1) / s->batch;
}

/* Node order: the levels' sequence sizes, the deal's keys and this node's
 * share of the last sequence. */
static int ord_node_init(struct ord_epoch *e, const struct ord_level *lv, uint32_t nlevels,
			 struct feed_err *err)
{
	const struct ord_spec *s = &e->spec;

	if (nlevels > ORD_MAX_LEVELS)
		return feed_err_set(err, -EINVAL, "order: %u node-count changes in one epoch, at most %d",
				    nlevels, ORD_MAX_LEVELS);
	e->level_n[0] = s->n;
	for (uint32_t i = 0; i < nlevels; i++) {
		uint64_t n = e->level_n[i], m = lv[i].nodes;
		if (m == 0 || lv[i].pos % m)
			return feed_err_set(err, -EINVAL, "order: level %u: position %llu is not a "
					    "multiple of its %llu nodes", i,
					    (unsigned long long)lv[i].pos, (unsigned long long)m);
		uint64_t c = lv[i].pos / m;
		/* shares are floor or ceil of n/m: c >= ceil consumes them all */
		e->level_n[i + 1] = c >= (n + m - 1) / m ? 0 : n - c * m;
		e->levels[i] = lv[i];
	}
	e->nlevels = nlevels;
	e->units = (s->n + s->unit - 1) / s->unit;
	e->tail = s->n - (e->units - 1) * s->unit;
	e->bits_units = ord_bits_for(e->units);
	ord_round_keys(s->deal_fixed ? ord_base_key(s, 0, ORD_DOMAIN_FIXED) :
				       ord_base_key(s, e->epoch, ORD_DOMAIN_DEAL), e->rk_deal);
	ord_round_keys(ord_base_key(s, e->epoch, ORD_DOMAIN_NODE), e->rk_node);
	e->tail_slot = ord_perm_inv(e->units - 1, e->units, e->bits_units, e->rk_deal, 0);
	e->local_world = s->world / s->nodes;
	e->local = s->rank % e->local_world;
	uint64_t nl = e->level_n[nlevels], k = s->rank / e->local_world;
	e->share_lo = ord_share_lo(k, nl, s->nodes);
	e->share_n = ord_share_lo(k + 1, nl, s->nodes) - e->share_lo;
	return 0;
}

int ord_epoch_init_levels(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
			  const struct ord_level *lv, uint32_t nlevels, struct feed_err *err)
{
	memset(e, 0, sizeof(*e));
	int rc = ord_check_spec(s, err);
	if (rc < 0)
		return rc;
	if (s->mode != ORD_NODE || s->eval) {
		if (nlevels)
			return feed_err_set(err, -EINVAL, "order: node-count levels need node order");
		return ord_epoch_init_at(e, s, epoch, 0, err);
	}
	e->spec = *s;
	e->epoch = epoch;
	e->bits_n = ord_bits_for(s->n);
	if ((rc = ord_node_init(e, lv, nlevels, err)) < 0) {
		ord_epoch_fini(e);
		return rc;
	}
	ord_layout(e);
	return 0;
}

uint64_t ord_level_samples(const struct ord_epoch *e)
{
	return e->spec.mode == ORD_NODE && !e->spec.eval ? e->level_n[e->nlevels] : e->spec.n;
}

int ord_epoch_init_at(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
		      uint64_t start, struct feed_err *err)
{
	if (s->mode == ORD_NODE && !s->eval) {
		/* the same nodes laid out again from `start` */
		struct ord_level lv = {.nodes = s->nodes, .pos = start};
		return ord_epoch_init_levels(e, s, epoch, &lv, start ? 1 : 0, err);
	}
	memset(e, 0, sizeof(*e));
	int rc = ord_check_spec(s, err);
	if (rc < 0)
		return rc;
	e->spec = *s;
	e->epoch = epoch;
	e->start = start < s->n ? start : s->n;
	e->bits_n = ord_bits_for(s->n);
	ord_round_keys(ord_base_key(s, epoch, ORD_DOMAIN_FULL), e->rk_full);
	if (s->mode == ORD_BLOCK_WINDOW && !s->eval) {
		e->bits_blocks = ord_bits_for(s->nblocks);
		ord_round_keys(ord_base_key(s, epoch, ORD_DOMAIN_BLOCK), e->rk_block);
		ord_round_keys(ord_base_key(s, epoch, ORD_DOMAIN_WIN), e->rk_win);
		if (!s->lazy_table && (rc = ord_table_build(s, epoch, &e->slot_start, err)) < 0) {
			ord_epoch_fini(e);
			return rc;
		}
	}
	ord_layout(e);
	return 0;
}

int ord_epoch_init(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
		   struct feed_err *err)
{
	return ord_epoch_init_at(e, s, epoch, 0, err);
}

void ord_epoch_fini(struct ord_epoch *e)
{
	if (!e)
		return;
	free(e->slot_start);
	memset(e, 0, sizeof(*e));
}

uint64_t ord_batches_per_epoch(const struct ord_epoch *e)
{
	return e->batches;
}

uint32_t ord_batch_size(const struct ord_epoch *e, uint64_t batch)
{
	if (batch >= e->batches)
		return 0;
	uint64_t left = e->rank_count - batch * e->spec.batch;
	return left < e->spec.batch ? (uint32_t)left : e->spec.batch;
}

uint64_t ord_global_position(const struct ord_epoch *e, uint64_t batch, uint32_t i)
{
	assert(batch < e->batches && i < ord_batch_size(e, batch));
	return e->start + (batch * e->spec.batch + i) * e->spec.world + e->spec.rank;
}

uint64_t ord_sample(const struct ord_epoch *e, uint64_t batch, uint32_t i)
{
	uint64_t g = ord_global_position(e, batch, i);

	if (e->spec.mode == ORD_NODE && !e->spec.eval)
		return ord_node_seq(e, ord_node_x(e, ord_node_p(e, batch, i)));

	return ord_permute(e, g < e->spec.n ? g : g % e->spec.n);
}

uint64_t ord_sample_after(const struct ord_epoch *e, uint64_t g, uint64_t k)
{
	if (e->spec.mode == ORD_NODE && !e->spec.eval) {
		uint64_t p = g / e->spec.world * e->local_world + e->local;
		return ord_node_seq(e, ord_node_x(e, p + k));
	}
	return ord_permute(e, (g + k) % e->spec.n);
}

bool ord_padding(const struct ord_epoch *e, uint64_t batch, uint32_t i)
{
	if (e->spec.mode == ORD_NODE && !e->spec.eval) {
		assert(batch < e->batches && i < ord_batch_size(e, batch));
		return ord_node_p(e, batch, i) >= e->share_n;
	}
	return ord_global_position(e, batch, i) >= e->spec.n;
}

uint64_t ord_position_of(const struct ord_epoch *e, uint64_t batch)
{
	return e->start + batch * e->spec.batch * e->spec.world;
}

int ord_batch_at_position(const struct ord_epoch *e, uint64_t pos, uint64_t *ret_batch)
{
	uint64_t rb = (uint64_t)e->spec.batch * e->spec.world;

	if (pos < e->start || (pos - e->start) % rb)
		return -EINVAL;
	uint64_t b = (pos - e->start) / rb;
	if (b > e->batches)
		return -ERANGE;
	*ret_batch = b;
	return 0;
}

void ord_window_of(const struct ord_epoch *e, uint64_t pos, uint64_t *ret_first,
		   uint64_t *ret_end)
{
	assert(pos < e->spec.n);
	if (e->spec.eval || e->spec.mode != ORD_BLOCK_WINDOW) {
		*ret_first = 0;
		*ret_end = e->spec.n;
		return;
	}
	uint64_t nb = e->spec.nblocks, win = e->spec.window;
	assert(e->slot_start);
	uint64_t j0 = ord_search(e->slot_start, 0, nb, pos) / win * win;
	uint64_t j1 = j0 + win < nb ? j0 + win : nb;
	*ret_first = e->slot_start[j0];
	*ret_end = e->slot_start[j1];
}
