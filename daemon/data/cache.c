/*
 * cache.c: the block cache (see cache.h): a chained hash table keyed by
 * (dataset, block) plus an LRU list of unpinned entries, under one mutex.
 * Worker threads only; never on the loop thread (a miss reads and decodes).
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "feed_lock.h"

struct cache_entry {
	const struct fmt_dataset *ds;   /* key */
	uint64_t block;                 /* key */
	struct cache_entry *chain;      /* next in the hash bucket */
	struct cache_entry *lru_prev, *lru_next; /* linked while unpinned */
	struct fmt_block blk;           /* views into raw once ready */
	void *raw;                      /* decoded bytes, 64-byte aligned */
	size_t bytes;
	uint32_t pins;
	bool ready;                     /* false while one thread decodes */
	struct cache_tally *t;          /* its dataset's counters, or NULL: unnamed */
};

/* A dataset pointer given a name by cache_name(). */
struct cache_named {
	const struct fmt_dataset *ds;
	struct cache_tally *t;          /* into cache.tally: never moves */
};

struct cache {
	pthread_mutex_t lock;
	pthread_cond_t loaded;          /* an entry became ready or failed */
	struct cache_entry **buckets;
	size_t nbuckets;                /* a power of two */
	struct cache_entry lru;         /* sentinel: next = oldest */
	struct cache_stats st;
	struct cache_tally tally[CACHE_TALLY_MAX]; /* per dataset name, ntally used */
	size_t ntally;
	struct cache_named named[CACHE_TALLY_MAX * 2]; /* ds -> tally, nnamed used */
	size_t nnamed;
};

/* The counters of ds's name, or NULL when it has none. Under the lock;
 * O(datasets named), a handful. */
static struct cache_tally *tally_of(struct cache *c, const struct fmt_dataset *ds)
{
	for (size_t i = 0; i < c->nnamed; i++)
		if (c->named[i].ds == ds)
			return c->named[i].t;
	return NULL;
}

static size_t key_hash(const struct fmt_dataset *ds, uint64_t block)
{
	uint64_t h = (uint64_t)(uintptr_t)ds * 0x9e3779b97f4a7c15ull ^ block * 0xc2b2ae3d27d4eb4full;
	return (size_t)(h ^ h >> 29);
}

int cache_new(size_t budget, struct cache **ret_cache)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->nbuckets = 1024;
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	if (!c->buckets) {
		free(c);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->loaded, NULL);
	c->lru.lru_next = c->lru.lru_prev = &c->lru;
	c->st.budget = budget;
	*ret_cache = c;
	return 0;
}

static void lru_unlink(struct cache_entry *e)
{
	if (!e->lru_next)
		return;
	e->lru_prev->lru_next = e->lru_next;
	e->lru_next->lru_prev = e->lru_prev;
	e->lru_next = e->lru_prev = NULL;
}

static void lru_push(struct cache *c, struct cache_entry *e)
{
	e->lru_prev = c->lru.lru_prev;
	e->lru_next = &c->lru;
	c->lru.lru_prev->lru_next = e;
	c->lru.lru_prev = e;
}

static struct cache_entry **bucket_of(struct cache *c, const struct fmt_dataset *ds, uint64_t block)
{
	return &c->buckets[key_hash(ds, block) & (c->nbuckets - 1)];
}

static void table_remove(struct cache *c, struct cache_entry *e)
{
	struct cache_entry **p = bucket_of(c, e->ds, e->block);

	while (*p != e)
		p = &(*p)->chain;
	*p = e->chain;
	c->st.entries--;
	c->st.bytes -= e->bytes;
	if (e->t)
		e->t->bytes -= e->bytes;
}

/* Doubles the table when it holds more entries than buckets. */
static void table_grow(struct cache *c)
{
	size_t n = c->nbuckets * 2;
	struct cache_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < c->nbuckets; i++) {
		for (struct cache_entry *e = c->buckets[i], *next; e; e = next) {
			next = e->chain;
			size_t k = key_hash(e->ds, e->block) & (n - 1);
			e->chain = b[k];
			b[k] = e;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = n;
}

static void entry_destroy(struct cache_entry *e)
{
	free(e->raw);
	free(e);
}

/* Evicts unpinned entries, oldest first, until within budget. */
static void evict(struct cache *c)
{
	while (c->st.bytes > c->st.budget && c->lru.lru_next != &c->lru) {
		struct cache_entry *e = c->lru.lru_next;
		lru_unlink(e);
		table_remove(c, e);
		c->st.evictions++;
		if (e->t)
			e->t->evictions++;
		entry_destroy(e);
	}
}

static struct cache_entry *lookup(struct cache *c, const struct fmt_dataset *ds, uint64_t block)
{
	for (struct cache_entry *e = *bucket_of(c, ds, block); e; e = e->chain)
		if (e->ds == ds && e->block == block)
			return e;
	return NULL;
}

/* Reads and decodes into a new buffer, outside the lock. */
static int entry_load(struct cache_entry *e, struct cache_worker *w, struct feed_err *err)
{
	struct fmt_block_meta m;

	fmt_dataset_block_meta(e->ds, e->block, &m);
	size_t cap = ((size_t)m.raw_size + 63) & ~(size_t)63;
	e->raw = aligned_alloc(64, cap ? cap : 64);
	if (!e->raw)
		return feed_err_set(err, -ENOMEM, "block cache: out of memory for %u bytes", m.raw_size);
	e->bytes = cap;
	return fmt_block_read(e->ds, e->block, w->dec, w->comp, w->comp_cap, e->raw, cap, &e->blk, err);
}

int cache_get(struct cache *c, const struct fmt_dataset *ds, uint64_t block, struct cache_worker *w,
	      const struct fmt_block **ret_blk, struct cache_entry **ret_entry, struct feed_err *err)
{
	struct cache_entry *e;
	int rc;

	feed_mutex_lock(&c->lock);
	while ((e = lookup(c, ds, block)) && !e->ready)
		pthread_cond_wait(&c->loaded, &c->lock); /* another worker decodes it */
	if (e) {
		if (e->pins++ == 0)
			lru_unlink(e);
		c->st.hits++;
		if (e->t)
			e->t->hits++;
		feed_mutex_unlock(&c->lock);
		*ret_blk = &e->blk;
		*ret_entry = e;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		feed_mutex_unlock(&c->lock);
		return feed_err_set(err, -ENOMEM, "block cache: out of memory");
	}
	e->ds = ds;
	e->block = block;
	e->pins = 1;
	struct cache_entry **b = bucket_of(c, ds, block);
	e->chain = *b;
	*b = e;
	c->st.entries++;
	c->st.misses++;
	if ((e->t = tally_of(c, ds)))
		e->t->misses++;
	feed_mutex_unlock(&c->lock);

	rc = entry_load(e, w, err);

	feed_mutex_lock(&c->lock);
	if (rc < 0) {
		e->bytes = 0;
		table_remove(c, e);
		entry_destroy(e);
	} else {
		e->ready = true;
		c->st.bytes += e->bytes;
		if (e->t)
			e->t->bytes += e->bytes;
		if (c->st.entries > c->nbuckets)
			table_grow(c);
		evict(c);
	}
	pthread_cond_broadcast(&c->loaded);
	feed_mutex_unlock(&c->lock);
	if (rc < 0)
		return rc;
	*ret_blk = &e->blk;
	*ret_entry = e;
	return 0;
}

void cache_put(struct cache *c, struct cache_entry *e)
{
	if (!e)
		return;
	feed_mutex_lock(&c->lock);
	if (--e->pins == 0) {
		lru_push(c, e);
		evict(c);
	}
	feed_mutex_unlock(&c->lock);
}

size_t cache_pin_many(struct cache *c, const struct fmt_dataset *ds, const uint64_t *blocks,
		      size_t n, const struct fmt_block **ret_blks, struct cache_entry **ret_entries)
{
	size_t pinned = 0;

	feed_mutex_lock(&c->lock);
	for (size_t k = 0; k < n; k++) {
		struct cache_entry *e = lookup(c, ds, blocks[k]);
		if (!e || !e->ready) {
			ret_entries[k] = NULL;
			continue;
		}
		if (e->pins++ == 0)
			lru_unlink(e);
		c->st.hits++;
		if (e->t)
			e->t->hits++;
		ret_blks[k] = &e->blk;
		ret_entries[k] = e;
		pinned++;
	}
	feed_mutex_unlock(&c->lock);
	return pinned;
}

void cache_put_many(struct cache *c, struct cache_entry *const *entries, size_t n)
{
	bool any = false;

	feed_mutex_lock(&c->lock);
	for (size_t k = 0; k < n; k++) {
		struct cache_entry *e = entries[k];
		if (e && --e->pins == 0) {
			lru_push(c, e);
			any = true;
		}
	}
	if (any)
		evict(c);
	feed_mutex_unlock(&c->lock);
}

void cache_reserve(struct cache *c, size_t bytes)
{
	feed_mutex_lock(&c->lock);
	c->st.bytes += bytes;
	c->st.staged += bytes;
	evict(c);
	feed_mutex_unlock(&c->lock);
}

void cache_release(struct cache *c, size_t bytes)
{
	feed_mutex_lock(&c->lock);
	assert(c->st.staged >= bytes);
	c->st.bytes -= bytes;
	c->st.staged -= bytes;
	feed_mutex_unlock(&c->lock);
}

void cache_forget(struct cache *c, const struct fmt_dataset *ds)
{
	feed_mutex_lock(&c->lock);
	for (struct cache_entry *e = c->lru.lru_next, *next; e != &c->lru; e = next) {
		next = e->lru_next;
		if (e->ds != ds)
			continue;
		lru_unlink(e);
		table_remove(c, e);
		entry_destroy(e);
	}
	/* its name goes: another dataset may come to live at the same address */
	for (size_t i = 0; i < c->nnamed; i++)
		if (c->named[i].ds == ds) {
			c->named[i] = c->named[--c->nnamed];
			break;
		}
	feed_mutex_unlock(&c->lock);
}

void cache_stats(struct cache *c, struct cache_stats *ret_stats)
{
	feed_mutex_lock(&c->lock);
	*ret_stats = c->st;
	feed_mutex_unlock(&c->lock);
}

int cache_name(struct cache *c, const struct fmt_dataset *ds, const char *name)
{
	struct cache_tally *t = NULL;
	int rc = 0;

	feed_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->ntally && !t; i++)
		if (!strcmp(c->tally[i].name, name))
			t = &c->tally[i];
	if (!t && c->ntally < CACHE_TALLY_MAX) {
		t = &c->tally[c->ntally++];
		snprintf(t->name, sizeof(t->name), "%s", name);
	}
	if (!t || tally_of(c, ds) || c->nnamed == sizeof(c->named) / sizeof(c->named[0]))
		rc = tally_of(c, ds) ? -EEXIST : -ENOSPC;
	else
		c->named[c->nnamed++] = (struct cache_named){.ds = ds, .t = t};
	feed_mutex_unlock(&c->lock);
	return rc;
}

size_t cache_tallies(struct cache *c, struct cache_tally *ret, size_t max)
{
	size_t n;

	feed_mutex_lock(&c->lock);
	n = c->ntally < max ? c->ntally : max;
	memcpy(ret, c->tally, n * sizeof(*ret));
	feed_mutex_unlock(&c->lock);
	return n;
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct cache_entry *e = c->buckets[i], *next; e; e = next) {
			next = e->chain;
			entry_destroy(e);
		}
	free(c->buckets);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->loaded);
	free(c);
}
