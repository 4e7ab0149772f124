/*
 * order.h: the order of an epoch and its partition over ranks (DESIGN.md,
 * "Order, partition, randomness, resume").
 *
 * Owns: the global order of an epoch — a stateless permutation of the
 * dataset's N samples keyed by (dataset version, seed, epoch) — and which
 * global positions rank r of world R reads as batch b.
 *
 * Threads: ord_epoch_init*() and ord_epoch_fini() belong to the caller's
 * thread; an initialised struct ord_epoch is immutable, and every query may
 * run on any number of threads at once. Never blocks, never does I/O; only
 * block-window mode allocates, once per ord_epoch_init*() (or per
 * ord_table_build() with lazy_table).
 *
 * Global order. Position p of epoch e (0 <= p < N) holds dataset sample
 * perm_e(p):
 *   ORD_SEQUENTIAL   perm(p) = p.
 *   ORD_FULL         an 8-round keyed Feistel network over the smallest
 *                    power of two >= N (>= 4), split into two halves of
 *                    floor/ceil bits, with cycle walking to stay inside
 *                    [0, N): expected < 2 network evaluations per lookup,
 *                    O(1) memory, no table.
 *   ORD_BLOCK_WINDOW the blocks are permuted (same network over nblocks);
 *                    windows are runs of `window` consecutive permuted
 *                    blocks; positions are laid out window after window,
 *                    and inside a window a second keyed network (tweaked by
 *                    the window number) permutes the window's samples. Every
 *                    sample of a block is thus read while its window is
 *                    current, so a worker decodes each block once per window.
 *                    Cost: the epoch keeps the start position of every
 *                    permuted block, 8 * (nblocks + 1) bytes (60 000
 *                    one-record blocks: 469 KiB; 720 Fashion-MNIST 64 KiB
 *                    blocks: 5.6 KiB; 2^24 blocks: 128 MiB, 1.7 s to
 *                    build here), built in O(nblocks) at init or apart
 *                    (see "Position table"); a lookup is two binary
 *                    searches, O(log nblocks).
 *   ORD_NODE         node-aware (DESIGN.md "Node-aware order"); see "Node
 *                    order" below. O(1) memory, no table; a lookup is one
 *                    or two networks plus O(levels * log nodes) arithmetic.
 * Keys differ in every bit of the seed, every byte of the version and every
 * bit of the epoch.
 *
 * Partition (B = batch, R = world, r = rank, S = start position, 0 by
 * default). Rank r's sample i of batch b sits at global position
 *     g(b, i) = S + (b * B + i) * R + r
 * so the ranks interleave exactly like torch's DistributedSampler
 * (rank r takes r, r+R, r+2R, ...).
 *   drop_last   the epoch is cut to S + floor((N-S) / (R*B)) * R*B
 *               positions: every rank gets the same number of full batches;
 *               the cut tail (< R*B positions) changes with the epoch's
 *               order. With S = 0 this is exactly DistributedSampler
 *               (drop_last=True) followed by DataLoader(drop_last=True).
 *   padding     (drop_last false) as DistributedSampler pads: the epoch
 *               is extended to S + ceil((N-S) / R) * R positions, so every
 *               rank gets the same count, ceil((N-S) / R); a position p >= N
 *               reads position p mod N of the same order (it wraps around
 *               to the start of the epoch). Each rank's last batch holds
 *               what is left, as DataLoader's last batch does: one rank,
 *               N = 60,000, B = 256 gives 234 batches of 256 and one of 96.
 *   pad_last    (drop_last false) the epoch is extended further, to
 *               S + ceil((N-S) / (R*B)) * R*B positions, wrapping around
 *               the same way: every batch of every rank is full (static
 *               shapes for the trainer), the ranks stay in step.
 *   eval        sequential order whatever the mode, no padding, no cut:
 *               rank r gets positions S + r, S + r + R, ... < N, so every
 *               sample is read exactly once across ranks; the last batch of
 *               a rank may be short and ranks may differ by one batch.
 *
 * Resume. A rank's position is b, the next batch it has not returned. The
 * global position of that point is P = S + b * B * R (ord_position_of()):
 * the number of positions of the epoch that all ranks together have
 * consumed when every rank is at batch b, as in synchronous data-parallel
 * training. To continue:
 *   same world size  ord_epoch_init_at(..., P) and read from batch 0, or
 *                    ord_epoch_init() and read from ord_batch_at_position(P):
 *                    both give the same batches (P is a multiple of B*R);
 *   other world size ord_epoch_init_at(..., P) with the new rank/world/batch
 *                    and read from batch 0: the remaining positions
 *                    [P, N) are partitioned over the new ranks as above.
 * So a resume token only needs the epoch and P.
 *
 * Node order (ORD_NODE). The world's R ranks sit on M = spec.nodes nodes of
 * L = R / M ranks each; rank r is local rank l = r % L of node k = r / L
 * (torchrun's and Slurm's block placement: RANK = node * L + LOCAL_RANK).
 *   Units.  The dataset is cut into units of C = spec.unit consecutive
 *           samples (the daemon uses `window` blocks' worth: a unit is a run
 *           of whole blocks when records per block are constant). Fixed-size
 *           units keep position -> unit pure arithmetic: no table.
 *   Deal.   A keyed network permutes the U = ceil(N / C) units; laid out
 *           unit after unit they form a sequence D of the N samples (the
 *           one short unit, if any, sits where the permutation put it).
 *           Node k's share is D's positions [lo(k), lo(k+1)), lo(k) =
 *           floor(k * N / M): shares differ by at most one sample, at most
 *           M - 1 units are split between two nodes. deal_fixed keys the
 *           deal by (version, seed) alone, so a node keeps its share every
 *           epoch (its cache stays warm); otherwise the epoch is keyed in
 *           and the shares rotate.
 *   Shuffle. Inside its share node k reads a second keyed network (keyed
 *           by the epoch, tweaked by k and M) over [0, share): local
 *           position p reads D(lo(k) + perm_k(p)). This is the node
 *           sequence Y: Y(lo(k) + p) = D(lo(k) + perm_k(p)).
 *   Ranks.  Local rank l reads local positions l, l + L, l + 2L, ... as
 *           DistributedSampler splits an epoch. Rank r's sample i of batch
 *           b is global position g = (b * B + i) * R + r as in the other
 *           modes; it is local position p = (b * B + i) * L + l of node k.
 *   Counts. padding: ceil(ceil(N / M) / L) samples per rank, which equals
 *           ceil(N / R); a node whose share is one short pads by wrapping
 *           around inside its own share (p mod share), so padding never
 *           leaves the node. pad_last: ceil(ceil(N / M) / (L * B)) batches;
 *           drop_last: floor(floor(N / M) / (L * B)) batches — the same
 *           counts as the other modes. eval: sequential as in every mode.
 *   Global position. P = b * B * R, as in the other modes: when every rank
 *           is at batch b each node has consumed the first c = P / M
 *           positions of its share. With the same M (any L), the layout
 *           continues at P. With another node count M', the remaining
 *           positions — node k's share from c on, node after node — form a
 *           new sequence Y' of N' = N - sum(min(c, share)) samples, which
 *           the M' nodes split again into contiguous shares (read in Y'
 *           order: already shuffled) from position 0. Each such change is a
 *           level (nodes, P) of the epoch; ord_epoch_init_levels() takes
 *           them (at most ORD_MAX_LEVELS per epoch), and positions after it
 *           count from 0 of the last level's sequence. A resume token
 *           carries the epoch, P, the node count and the levels.
 */
#ifndef FEED_ORDER_H
#define FEED_ORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"

#define ORD_ROUNDS 8
/* The largest N accepted (positions and padding never overflow). */
#define ORD_MAX_SAMPLES ((uint64_t)1 << 62)
/* The most blocks block-window mode accepts (a 2 GiB position table). */
#define ORD_MAX_BLOCKS ((uint64_t)1 << 28)

enum ord_mode {
	ORD_SEQUENTIAL = 0, /* dataset order */
	ORD_FULL = 1,       /* one permutation of all samples */
	ORD_BLOCK_WINDOW = 2, /* blocks permuted, samples permuted inside windows */
	ORD_NODE = 3,         /* units dealt to nodes, shuffled inside a node's share */
};

/* Node order: node-count changes within one epoch a layout may follow. */
#define ORD_MAX_LEVELS 8

/* Node order: a layout the epoch was read under before a change of node
 * count: `nodes` nodes read it up to global position `pos` (a multiple of
 * nodes: every node consumed pos / nodes positions of its share). */
struct ord_level {
	uint32_t nodes;            /* >= 1 */
	uint64_t pos;              /* global position reached */
};

/* What a stream asks for; copied by ord_epoch_init*() except block_first. */
struct ord_spec {
	uint64_t n;                /* dataset samples, 1 .. ORD_MAX_SAMPLES */
	uint64_t seed;             /* the stream's seed */
	char version[17];          /* dataset version (16 hex digits), hashed into the key */
	enum ord_mode mode;        /* ignored in eval mode (always sequential) */
	uint32_t window;           /* block-window: blocks per window, >= 1 */
	const uint64_t *block_first; /* block-window: nblocks+1 entries, block b holds
				      * samples [block_first[b], block_first[b+1]);
				      * block_first[0] = 0, block_first[nblocks] = n.
				      * Borrowed: must outlive every epoch built on it.
				      * May be NULL in the other modes. */
	uint64_t nblocks;          /* block-window: number of blocks, 1 .. ORD_MAX_BLOCKS */
	uint32_t rank, world;      /* 0 <= rank < world */
	uint32_t batch;            /* samples per batch, >= 1 */
	bool drop_last;            /* cut the epoch instead of padding it */
	bool pad_last;             /* pad every rank's last batch to full size */
	bool eval;                 /* sequential, every sample once, no padding */
	uint32_t nodes;            /* node: nodes, >= 1, dividing world */
	uint64_t unit;             /* node: samples per dealt unit, >= 1 */
	bool deal_fixed;           /* node: the same deal every epoch (else rotates) */
	bool lazy_table;           /* block-window: ord_epoch_init*() leave the
				    * position table out (see "Position table") */
};

/* One epoch's order and this rank's share of it. Fields are private: use
 * the functions below. Immutable after init; fini frees. */
struct ord_epoch {
	struct ord_spec spec;      /* copy (block_first still borrowed) */
	uint64_t epoch;            /* the epoch number keyed in */
	uint64_t start;            /* S: first global position of this layout */
	uint64_t batches;          /* batches of this rank */
	uint64_t rank_count;       /* samples of this rank (eval: may be uneven) */
	uint32_t bits_n, bits_blocks; /* network widths over n and nblocks */
	uint64_t rk_full[ORD_ROUNDS];  /* round keys: samples (full mode) */
	uint64_t rk_block[ORD_ROUNDS]; /* round keys: blocks (block-window) */
	uint64_t rk_win[ORD_ROUNDS];   /* round keys: inside a window (block-window) */
	uint64_t *slot_start;      /* block-window: nblocks+1 start positions of the
				    * permuted blocks, owned; NULL otherwise */
	/* node order */
	uint64_t rk_deal[ORD_ROUNDS];  /* round keys: units (the deal) */
	uint64_t rk_node[ORD_ROUNDS];  /* round keys: inside a node's share */
	uint64_t units, tail, tail_slot; /* U; samples of unit U-1; its slot in D */
	uint32_t bits_units;       /* network width over units */
	uint32_t nlevels;          /* earlier layouts of this epoch */
	struct ord_level levels[ORD_MAX_LEVELS];
	uint64_t level_n[ORD_MAX_LEVELS + 1]; /* samples of each level's sequence */
	uint64_t share_lo, share_n; /* this node's share of the last sequence */
	uint32_t local, local_world; /* l and L */
};

/*
 * Builds epoch `epoch` of spec s for s->rank, starting at global position 0.
 * Returns 0, or -EINVAL naming the bad parameter in err (may be NULL), or
 * -ENOMEM (block-window). On failure *e is left finalised (fini is safe).
 * e must be finalised with ord_epoch_fini() even on success.
 */
int ord_epoch_init(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
		   struct feed_err *err);

/* As ord_epoch_init() but the rank's layout starts at global position
 * `start` (see "Resume" above); start >= N gives an epoch with no batches. */
int ord_epoch_init_at(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
		      uint64_t start, struct feed_err *err);

/* Node order: as ord_epoch_init() for an epoch read before under the
 * nlevels (<= ORD_MAX_LEVELS) layouts lv, oldest first (see "Node order"):
 * this layout is the remaining positions' sequence, from its position 0.
 * nlevels 0 is ord_epoch_init(). -EINVAL naming a bad level (a position
 * not a multiple of its nodes). An epoch with nothing left has no batches. */
int ord_epoch_init_levels(struct ord_epoch *e, const struct ord_spec *s, uint64_t epoch,
			  const struct ord_level *lv, uint32_t nlevels, struct feed_err *err);

/* Node order: samples left in this layout's sequence (N without levels). */
uint64_t ord_level_samples(const struct ord_epoch *e);

/*
 * Position table (block-window). Laying an epoch out takes a table of
 * nblocks + 1 positions, O(nblocks) to build: with spec.lazy_table the
 * ord_epoch_init*() functions stay O(1) and leave it out; the caller
 * builds it with ord_table_build() (on any thread: it reads only the spec)
 * and hands it to the epoch with ord_epoch_set_table() before the first
 * lookup (ord_sample(), ord_permute(), ord_sample_after(), ord_window_of()
 * assert it). The table depends on the spec and the epoch alone, not on
 * the layout's start: one table serves ord_epoch_init() and
 * ord_epoch_init_at() of the same epoch. Without lazy_table, init builds
 * it as ever. The block table's order (block_first nondecreasing) is
 * checked while the table is built.
 */

/* Builds epoch `epoch`'s position table of block-window spec s into a new
 * array (*ret, the caller's: free(), or ord_epoch_set_table()). Returns 0,
 * -EINVAL naming a block that starts before the one before it, -ENOMEM.
 * Any thread. */
int ord_table_build(const struct ord_spec *s, uint64_t epoch, uint64_t **ret,
		    struct feed_err *err);

/* True when e is block-window, made with lazy_table, and has no table yet. */
bool ord_epoch_needs_table(const struct ord_epoch *e);

/* e takes table t (from ord_table_build() of e's spec and epoch): freed by
 * ord_epoch_fini(), or given back by ord_epoch_take_table(). */
void ord_epoch_set_table(struct ord_epoch *e, uint64_t *t);

/* Gives e's table (or NULL) to the caller, who frees it where freeing
 * nblocks * 8 bytes costs nobody (munmap of a large block); e must not be
 * looked up afterwards. */
uint64_t *ord_epoch_take_table(struct ord_epoch *e);

/* Frees what init allocated and zeroes e. Accepts a zeroed or failed e. */
void ord_epoch_fini(struct ord_epoch *e);

/* Batches of this rank in this epoch (the same for every rank unless eval). */
uint64_t ord_batches_per_epoch(const struct ord_epoch *e);

/* Samples in batch `batch` of this rank: spec.batch, except eval's last
 * batch of a rank (may be shorter); 0 when batch >= ord_batches_per_epoch(). */
uint32_t ord_batch_size(const struct ord_epoch *e, uint64_t batch);

/* Global position of sample i of batch `batch` of this rank, before the
 * wrap-around of padding (may be >= N in padding; node order pads inside
 * each node's share, so ask ord_padding() whether a sample repeats). Requires batch <
 * batches and i < ord_batch_size(batch) (asserted). */
uint64_t ord_global_position(const struct ord_epoch *e, uint64_t batch, uint32_t i);

/* The dataset sample index read as sample i of batch `batch` of this rank.
 * Same preconditions as ord_global_position(). O(1) expected (full mode),
 * O(log nblocks) (block-window). */
uint64_t ord_sample(const struct ord_epoch *e, uint64_t batch, uint32_t i);

/* The epoch's permutation: dataset sample at global position pos, pos < N
 * (asserted). Eval epochs are sequential: returns pos. Node order: the
 * sample at position pos of this layout's node sequence Y (its nodes'
 * shares one after another, each shuffled), pos < ord_level_samples(). */
uint64_t ord_permute(const struct ord_epoch *e, uint64_t pos);

/* Whether sample i of batch `batch` repeats one for padding (a position
 * past the end, wrapped around). Same preconditions as ord_sample(). */
bool ord_padding(const struct ord_epoch *e, uint64_t batch, uint32_t i);

/* The sample read k positions after global position g (this rank's, as
 * ord_global_position() gives it), wrapping around the epoch: what
 * on_error skip builds in place of a sample that fails. Node order steps
 * through the node's local order and wraps inside its share, so a
 * replacement never leaves the node's share. */
uint64_t ord_sample_after(const struct ord_epoch *e, uint64_t g, uint64_t k);

/* Global resume position of "this rank is at batch `batch`": start +
 * batch * batch_size * world. batch may equal ord_batches_per_epoch(). */
uint64_t ord_position_of(const struct ord_epoch *e, uint64_t batch);

/* Inverse of ord_position_of() for this layout: *ret_batch = the batch at
 * which global position pos starts. -EINVAL if pos is not start plus a
 * multiple of batch * world (re-layout with ord_epoch_init_at(pos)
 * instead), -ERANGE if it lies past the epoch's last batch. */
int ord_batch_at_position(const struct ord_epoch *e, uint64_t pos, uint64_t *ret_batch);

/* Block-window: the window holding global position pos (< N): its
 * positions [*ret_first, *ret_end). Other modes: the whole epoch [0, N). */
void ord_window_of(const struct ord_epoch *e, uint64_t pos, uint64_t *ret_first,
		   uint64_t *ret_end);

#endif
