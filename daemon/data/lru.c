/*
 * lru.c: the keyed table and recency list of both cache tiers (see
 * lru.h). Called only under the embedding tier's mutex; allocates only
 * its bucket array.
 */
#include "lru.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#define LRU_BUCKETS_MIN 1024

static size_t lru_hash(uint64_t k0, uint64_t k1)
{
	uint64_t h = k0 * 0x9e3779b97f4a7c15ull ^ k1 * 0xc2b2ae3d27d4eb4full;
	return (size_t)(h ^ h >> 29);
}

static struct lru_node **lru_bucket(const struct lru *l, uint64_t k0, uint64_t k1)
{
	return &l->buckets[lru_hash(k0, k1) & (l->nbuckets - 1)];
}

int lru_init(struct lru *l, uint64_t budget)
{
	*l = (struct lru){.nbuckets = LRU_BUCKETS_MIN, .budget = budget};
	l->buckets = calloc(l->nbuckets, sizeof(*l->buckets));
	if (!l->buckets) {
		l->nbuckets = 0;
		return -ENOMEM;
	}
	l->list.next = l->list.prev = &l->list;
	return 0;
}

void lru_fini(struct lru *l)
{
	free(l->buckets);
	l->buckets = NULL;
	l->nbuckets = 0;
}

struct lru_node *lru_find(const struct lru *l, uint64_t k0, uint64_t k1)
{
	for (struct lru_node *n = *lru_bucket(l, k0, k1); n; n = n->chain)
		if (n->key[0] == k0 && n->key[1] == k1)
			return n;
	return NULL;
}

/* Doubles the table. Under the tier's lock. */
static void lru_grow(struct lru *l)
{
	size_t nb = l->nbuckets * 2;
	struct lru_node **b = calloc(nb, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < l->nbuckets; i++)
		for (struct lru_node *n = l->buckets[i], *next; n; n = next) {
			next = n->chain;
			size_t k = lru_hash(n->key[0], n->key[1]) & (nb - 1);
			n->chain = b[k];
			b[k] = n;
		}
	free(l->buckets);
	l->buckets = b;
	l->nbuckets = nb;
}

void lru_insert(struct lru *l, struct lru_node *n)
{
	struct lru_node **b = lru_bucket(l, n->key[0], n->key[1]);

	n->bytes = 0;
	n->prev = n->next = NULL;
	n->chain = *b;
	*b = n;
	if (++l->nodes > l->nbuckets)
		lru_grow(l);
}

void lru_remove(struct lru *l, struct lru_node *n)
{
	struct lru_node **p = lru_bucket(l, n->key[0], n->key[1]);

	while (*p != n)
		p = &(*p)->chain;
	*p = n->chain;
	n->chain = NULL;
	lru_unlist(n);
	lru_discharge(l, n);
	l->nodes--;
}

struct lru_node *lru_pop(struct lru *l)
{
	for (size_t i = 0; i < l->nbuckets && l->nodes; i++)
		if (l->buckets[i]) {
			struct lru_node *n = l->buckets[i];
			lru_remove(l, n);
			return n;
		}
	return NULL;
}

void lru_charge(struct lru *l, struct lru_node *n, uint64_t bytes)
{
	n->bytes += bytes;
	l->bytes += bytes;
}

void lru_discharge(struct lru *l, struct lru_node *n)
{
	assert(l->bytes >= n->bytes);
	l->bytes -= n->bytes;
	n->bytes = 0;
}

void lru_unlist(struct lru_node *n)
{
	if (!n->next)
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
}

void lru_touch(struct lru *l, struct lru_node *n)
{
	lru_unlist(n);
	n->prev = l->list.prev;
	n->next = &l->list;
	l->list.prev->next = n;
	l->list.prev = n;
}

bool lru_listed(const struct lru_node *n)
{
	return n->next != NULL;
}

struct lru_node *lru_evict(struct lru *l)
{
	struct lru_node *n = l->list.next;

	if (l->bytes <= l->budget || n == &l->list)
		return NULL;
	lru_unlist(n);
	lru_discharge(l, n);
	return n;
}

struct lru_node *lru_next(const struct lru *l, const struct lru_node *n)
{
	const struct lru_node *next = n ? n->next : l->list.next;

	return next == &l->list ? NULL : (struct lru_node *)next;
}
