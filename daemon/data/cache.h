/*
 * cache.h: the block cache: decoded blocks in one byte budget, shared by
 * every stream over the same open dataset.
 *
 * Owns the decoded block buffers. Any worker thread calls cache_get() /
 * cache_put(), or the batched cache_pin_many() / cache_put_many() that take
 * the lock once for many samples; one mutex guards the table and the LRU
 * list, and decoding happens outside it. A worker pins at most
 * CACHE_PIN_MAX blocks at a time and waits only for blocks another worker
 * is decoding, so a cache smaller than the working set never deadlocks:
 * when every entry is pinned the cache goes over budget (by at most
 * 3 x workers x CACHE_PIN_MAX blocks: a worker may run a second job
 * between the samples of its first, pool_yield(), and a spare thread one
 * while a worker waits on the network) until the pins are dropped.
 * Locks: the cache's mutex is the only lock a thread holds while in
 * here, and none is held when calling in (no thread of feedd ever holds
 * two: proto/feed_lock.h); this module calls nothing that takes another
 * lock.
 */
#ifndef FEED_CACHE_H
#define FEED_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "fmt.h"

struct cache;
struct cache_entry;

/* Per-worker scratch for misses: a decoder and a compressed-block buffer of
 * at least the largest max_block_comp of any dataset it reads. */
struct cache_worker {
	struct fmt_decoder *dec;
	void *comp;
	size_t comp_cap;
};

/* Counters, read with cache_stats(). */
struct cache_stats {
	uint64_t hits, misses, evictions;
	uint64_t bytes, entries, budget; /* bytes: decoded blocks and staged ones */
	uint64_t staged;                 /* of bytes: held outside the table (cache_reserve) */
};

/* One dataset name's share of the counters (cache_name()): kept for the
 * daemon's life, so a count per dataset never goes backwards, even when
 * a dataset of that name is reopened. */
#define CACHE_TALLY_MAX 64
struct cache_tally {
	char name[64];                 /* the dataset's configured name */
	uint64_t hits, misses, evictions; /* as in struct cache_stats */
	uint64_t bytes;                /* decoded bytes held for it now */
};

/* budget: bytes of decoded blocks kept when unpinned. Returns 0 or -ENOMEM. */
int cache_new(size_t budget, struct cache **ret_cache);

/* Frees every entry. No entry may be pinned. Accepts NULL. */
void cache_free(struct cache *c);

/* Returns block `block` of ds decoded and pinned in *ret_blk / *ret_entry:
 * from the cache, or decoded now with w's decoder (a second thread asking
 * for a block being decoded waits for it). Blocking (disk read, decode).
 * Errors (-EBADMSG naming shard and block, -ENOMEM) leave nothing pinned
 * and nothing cached. The views stay valid until cache_put(). */
int cache_get(struct cache *c, const struct fmt_dataset *ds, uint64_t block, struct cache_worker *w,
	      const struct fmt_block **ret_blk, struct cache_entry **ret_entry, struct feed_err *err);

/* Unpins an entry from cache_get(). Accepts NULL. */
void cache_put(struct cache *c, struct cache_entry *e);

/* The most blocks one worker should hold pinned at once. */
#define CACHE_PIN_MAX 32

/* Pins, under one lock hold, each of blocks[0..n) of ds that is cached and
 * decoded: ret_blks[k] / ret_entries[k] as cache_get() would give; NULL in
 * ret_entries[k] for the others (get those with cache_get()). Any thread;
 * takes the cache's lock once and never waits for a decode or the disk.
 * Each pinned entry is the caller's until cache_put_many() / cache_put().
 * Returns how many were pinned. */
size_t cache_pin_many(struct cache *c, const struct fmt_dataset *ds, const uint64_t *blocks,
		      size_t n, const struct fmt_block **ret_blks, struct cache_entry **ret_entries);

/* Unpins entries[0..n) under one lock hold (any thread; evicts to the
 * budget if something became unpinned); NULL entries are skipped. */
void cache_put_many(struct cache *c, struct cache_entry *const *entries, size_t n);

/* Counts bytes held outside the table against the budget: the remote
 * fetcher's staged blocks (fetcher.h), so cache_bytes bounds them too.
 * Evicts unpinned blocks to make room (never waits; like pins, what
 * cannot be evicted leaves the cache over budget until released). Any
 * thread, takes the lock. */
void cache_reserve(struct cache *c, size_t bytes);

/* Gives back bytes of cache_reserve(). Any thread, takes the lock. */
void cache_release(struct cache *c, size_t bytes);

/* Drops every unpinned block of ds (a dataset being closed) and its name
 * (cache_name()); the name's counters stay. */
void cache_forget(struct cache *c, const struct fmt_dataset *ds);

void cache_stats(struct cache *c, struct cache_stats *ret_stats);

/* Counts what ds does from now on under name (one name may have several
 * datasets: the same name reopened). Any thread, takes the lock.
 * -EEXIST: ds has a name already; -ENOSPC: past CACHE_TALLY_MAX names
 * (ds goes uncounted per dataset; the totals still count it). */
int cache_name(struct cache *c, const struct fmt_dataset *ds, const char *name);

/* Copies up to max names' counters into ret, in the order first named;
 * returns how many. Any thread, takes the lock for the copy. */
size_t cache_tallies(struct cache *c, struct cache_tally *ret, size_t max);

#endif
