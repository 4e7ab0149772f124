/*
 * cache.c: the block cache (see cache.h): entries keyed by (dataset,
 * block) in the tiers' table and recency list (lru.h), the unpinned ones
 * listed for eviction, all under one mutex.
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
#include "lru.h"

struct cache_entry {
	struct lru_node node;           /* key: (ds, block); listed while unpinned */
	const struct fmt_dataset *ds;   /* key */
	uint64_t block;                 /* key */
	struct fmt_block blk;           /* views into raw once ready */
	void *raw;                      /* decoded bytes, 64-byte aligned */
	size_t bytes;                   /* raw's size, charged once ready */
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
	struct lru lru;                 /* the entries; bytes: ready ones and staged */
	uint64_t hits, misses, evictions, staged; /* as in struct cache_stats */
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

int cache_new(size_t budget, struct cache **ret_cache)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	if (lru_init(&c->lru, budget) < 0) {
		free(c);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->loaded, NULL);
	*ret_cache = c;
	return 0;
}

static struct cache_entry *entry_of(struct lru_node *n)
{
	return n ? LRU_ENTRY(n, struct cache_entry, node) : NULL;
}

/* Takes e out of the table; its bytes leave the counts. Under the lock. */
static void table_remove(struct cache *c, struct cache_entry *e)
{
	lru_remove(&c->lru, &e->node);
	if (e->t && e->ready)
		e->t->bytes -= e->bytes;
}

static void entry_destroy(struct cache_entry *e)
{
	free(e->raw);
	free(e);
}

/* Evicts unpinned entries, oldest first, until within budget. */
static void evict(struct cache *c)
{
	struct cache_entry *e;

	while ((e = entry_of(lru_evict(&c->lru)))) {
		table_remove(c, e);
		c->evictions++;
		if (e->t)
			e->t->evictions++;
		entry_destroy(e);
	}
}

static struct cache_entry *lookup(struct cache *c, const struct fmt_dataset *ds, uint64_t block)
{
	return entry_of(lru_find(&c->lru, (uint64_t)(uintptr_t)ds, block));
}

/* Pins e, found ready, as a hit. Under the lock. */
static void entry_pin(struct cache *c, struct cache_entry *e)
{
	if (e->pins++ == 0)
		lru_unlist(&e->node);
	c->hits++;
	if (e->t)
		e->t->hits++;
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

/* A new entry for (ds, block), pinned and not ready, in the table and
 * counted as a miss: this thread decodes it. Under the lock. */
static struct cache_entry *entry_claim(struct cache *c, const struct fmt_dataset *ds, uint64_t block)
{
	struct cache_entry *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->node.key[0] = (uint64_t)(uintptr_t)ds;
	e->node.key[1] = block;
	e->ds = ds;
	e->block = block;
	e->pins = 1;
	lru_insert(&c->lru, &e->node);
	c->misses++;
	if ((e->t = tally_of(c, ds)))
		e->t->misses++;
	return e;
}

/* Ends the decode of e by this thread: ready and charged, or (rc < 0)
 * gone. Wakes the threads waiting for it. Takes the lock. */
static void entry_loaded(struct cache *c, struct cache_entry *e, int rc)
{
	feed_mutex_lock(&c->lock);
	if (rc < 0) {
		table_remove(c, e);
		entry_destroy(e);
	} else {
		e->ready = true;
		lru_charge(&c->lru, &e->node, e->bytes);
		if (e->t)
			e->t->bytes += e->bytes;
		evict(c);
	}
	pthread_cond_broadcast(&c->loaded);
	feed_mutex_unlock(&c->lock);
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
		entry_pin(c, e);
		feed_mutex_unlock(&c->lock);
		*ret_blk = &e->blk;
		*ret_entry = e;
		return 0;
	}
	e = entry_claim(c, ds, block);
	feed_mutex_unlock(&c->lock);
	if (!e)
		return feed_err_set(err, -ENOMEM, "block cache: out of memory");
	rc = entry_load(e, w, err);
	entry_loaded(c, e, rc);
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
		lru_touch(&c->lru, &e->node);
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
		entry_pin(c, e);
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
			lru_touch(&c->lru, &e->node);
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
	c->lru.bytes += bytes;
	c->staged += bytes;
	evict(c);
	feed_mutex_unlock(&c->lock);
}

void cache_release(struct cache *c, size_t bytes)
{
	feed_mutex_lock(&c->lock);
	assert(c->staged >= bytes);
	c->lru.bytes -= bytes;
	c->staged -= bytes;
	feed_mutex_unlock(&c->lock);
}

void cache_forget(struct cache *c, const struct fmt_dataset *ds)
{
	feed_mutex_lock(&c->lock);
	for (struct lru_node *n = lru_next(&c->lru, NULL), *next; n; n = next) {
		struct cache_entry *e = entry_of(n);
		next = lru_next(&c->lru, n);
		if (e->ds != ds)
			continue;
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
	*ret_stats = (struct cache_stats){
		.hits = c->hits, .misses = c->misses, .evictions = c->evictions,
		.bytes = c->lru.bytes, .entries = c->lru.nodes, .budget = c->lru.budget,
		.staged = c->staged,
	};
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
	struct lru_node *n;

	if (!c)
		return;
	while ((n = lru_pop(&c->lru)))
		entry_destroy(entry_of(n));
	lru_fini(&c->lru);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->loaded);
	free(c);
}
