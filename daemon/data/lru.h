/*
 * lru.h: the one keyed table with a recency list that both cache tiers
 * stand on: the memory block cache (cache.c: decoded blocks) and the disk
 * tier (disktier.c: files of compressed blocks). A tier embeds a struct
 * lru_node in each of its entries and keeps what is its own (buffers,
 * files, pins, states); this module holds the chained hash table keyed by
 * two 64-bit words, the least-recently-used list, and the byte count
 * against a budget that eviction works down.
 *
 * No lock and no thread of its own: the tier that embeds a struct lru
 * guards it with its mutex and calls in only under it. It allocates only
 * the bucket array; nodes are the tier's, and are never freed here.
 */
#ifndef FEEDD_LRU_H
#define FEEDD_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One entry's link into the table and the list; embedded in the tier's
 * entry (LRU_ENTRY() gets the entry back). Fields private to lru.c but
 * key, set before lru_insert() and fixed while in the table. */
struct lru_node {
	uint64_t key[2];              /* what lru_find() matches */
	uint64_t bytes;               /* charged to the lru (lru_charge()) */
	struct lru_node *chain;       /* next in the bucket */
	struct lru_node *prev, *next; /* in the list, or NULL: not listed */
};

/* The table and the list. Fields are read-only outside lru.c but bytes,
 * which a tier may raise and lower for bytes it holds outside the table
 * (the cache's staged blocks) so eviction counts them too. */
struct lru {
	struct lru_node **buckets;    /* chained by lru_node.chain */
	size_t nbuckets;              /* a power of two */
	size_t nodes;                 /* in the table, listed or not */
	uint64_t bytes;               /* charged, and what the tier added */
	uint64_t budget;              /* lru_evict() works bytes down to this */
	struct lru_node list;         /* sentinel: next is the least recent */
};

/* The entry of type `type` whose member `member` is the node n. */
#define LRU_ENTRY(n, type, member) ((type *)(void *)((char *)(n) - offsetof(type, member)))

/* An empty lru under budget bytes. 0, or -ENOMEM. */
int lru_init(struct lru *l, uint64_t budget);

/* Frees the bucket array; the nodes are the tier's (lru_pop() them
 * first). Accepts an lru that lru_init() failed on, or a zeroed one. */
void lru_fini(struct lru *l);

/* The node keyed (k0, k1), listed or not, or NULL. */
struct lru_node *lru_find(const struct lru *l, uint64_t k0, uint64_t k1);

/* Adds n (key set, not in the table) to the table, unlisted and with
 * nothing charged; grows the table past one node a bucket. */
void lru_insert(struct lru *l, struct lru_node *n);

/* Takes n out of the table and the list, and its bytes out of the count. */
void lru_remove(struct lru *l, struct lru_node *n);

/* Takes out and returns any node of the table (as lru_remove()), or NULL
 * when empty: how a tier frees every entry. */
struct lru_node *lru_pop(struct lru *l);

/* Counts bytes more for n (in the table) against the budget. */
void lru_charge(struct lru *l, struct lru_node *n, uint64_t bytes);

/* Gives back every byte charged for n. */
void lru_discharge(struct lru *l, struct lru_node *n);

/* Puts n at the recent end of the list (moving it when listed): evictable. */
void lru_touch(struct lru *l, struct lru_node *n);

/* Takes n off the list (nothing when not listed): not evictable. */
void lru_unlist(struct lru_node *n);

/* Whether n is on the list. */
bool lru_listed(const struct lru_node *n);

/* While over budget, the least recently used listed node: taken off the
 * list and discharged, left in the table (the tier removes it, or keeps
 * its key a while, and frees it). NULL when within budget or nothing is
 * listed. Call it in a loop until NULL. */
struct lru_node *lru_evict(struct lru *l);

/* The listed node after n in recency order, from the least recent
 * (n NULL), or NULL past the most recent: a walk of the evictable. */
struct lru_node *lru_next(const struct lru *l, const struct lru_node *n);

#endif
