/*
 * stats.c: the stream registry and the stats reply (see stats.h). Loop
 * thread only; reads counters, never waits for anything but a stream's
 * O(1) lock and the cache's copy of its counters.
 */
#include "stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "cache.h"
#include "catalog.h"
#include "feedd.h"

void stats_add(struct stats_reg *r, struct stats_entry *en)
{
	en->prev = NULL;
	en->next = r->first;
	if (r->first)
		r->first->prev = en;
	r->first = en;
	r->n++;
}

void stats_remove(struct stats_reg *r, struct stats_entry *en)
{
	if (!en->prev && r->first != en)
		return;  /* never added */
	if (en->prev)
		en->prev->next = en->next;
	else
		r->first = en->next;
	if (en->next)
		en->next->prev = en->prev;
	en->prev = en->next = NULL;
	r->n--;
}

/* Everything one reply allocates, freed at once. */
struct stats_mem {
	Feed__DatasetStats *ds, **dp;
	Feed__StreamStatus *ss, **sp;
	Feed__CacheStats cache;
};

void stats_reply_free(void *mem)
{
	struct stats_mem *m = mem;

	if (!m)
		return;
	free(m->ds);
	free(m->dp);
	free(m->ss);
	free(m->sp);
	free(m);
}

static double stats_rate(uint64_t n, uint64_t ms)
{
	return ms ? (double)n * 1000.0 / (double)ms : 0.0;
}

/* One entry as the reply shows it; now_ms: the loop's clock. */
static void stats_fill(struct stats_entry *en, uint64_t now_ms, Feed__StreamStatus *s)
{
	struct stats_sample x = {0};
	uint64_t age_ms = now_ms > en->opened_ms ? now_ms - en->opened_ms : 0;

	en->read(en, &x);
	feed__stream_status__init(s);
	s->kind = (char *)en->kind;
	s->uid = (uint32_t)en->uid;
	s->pid = (int32_t)en->pid;
	s->conn = en->conn;
	s->stream = en->id;
	s->dataset = (char *)en->e->cfg->name;
	s->group = (char *)(en->group ? en->group : "");
	s->pipeline = (char *)(en->pipeline ? en->pipeline : "");
	s->members = x.members ? x.members : 1;
	if (x.member_pids) {
		s->n_member_pids = x.members;
		s->member_pids = (int32_t *)x.member_pids;
	}
	if (x.member_pids && x.member_reader_wait_ns) {
		/* the clients' word, clamped as the group's is below */
		uint64_t *w = (uint64_t *)x.member_reader_wait_ns;
		for (uint32_t i = 0; i < x.members; i++)
			if (w[i] > age_ms * 1000000u)
				w[i] = age_ms * 1000000u;
		s->n_member_reader_wait_ns = x.members;
		s->member_reader_wait_ns = w;
	}
	s->batch = en->batch;
	s->shm_bytes = en->shm_bytes;
	s->device = (char *)(en->device ? en->device : "");
	s->device_bytes = en->device_bytes;
	s->credits = x.credits;
	s->credits_in_use = x.credits_in_use;
	s->age_ms = age_ms;
	s->batches = x.batches;
	s->samples = x.samples;
	s->bytes = x.bytes;
	s->samples_per_s = stats_rate(x.samples, age_ms);
	s->mb_per_s = stats_rate(x.bytes, age_ms) / 1e6;
	s->worker_ns = x.worker_ns;
	s->jobs = x.jobs;
	s->replaced = x.replaced;
	/* the client's word: anything past the stream's age is a lie or a bug */
	s->reader_wait_ns = x.reader_wait_ns < age_ms * 1000000u ? x.reader_wait_ns
								  : age_ms * 1000000u;
	s->reader_wait_share = age_ms ? (double)s->reader_wait_ns / ((double)age_ms * 1e6) : 0.0;
}

static void stats_cache(struct feedd *d, struct stats_mem *m, Feed__Stats *st)
{
	struct cache_stats cs;

	cache_stats(d->cache, &cs);
	feed__cache_stats__init(&m->cache);
	m->cache.hits = cs.hits;
	m->cache.misses = cs.misses;
	m->cache.evictions = cs.evictions;
	m->cache.bytes = cs.bytes;
	m->cache.entries = cs.entries;
	m->cache.budget = cs.budget;
	st->cache = &m->cache;
}

int stats_reply(struct feedd *d, const struct acl_peer *peer, Feed__Stats *st, void **ret_mem)
{
	struct stats_mem *m = calloc(1, sizeof(*m));
	size_t nd = d->cat->n, ns = d->stats.n;
	uint64_t now = uv_now(&d->loop);

	if (!m || !(m->ds = calloc(nd + 1, sizeof(*m->ds))) ||
	    !(m->dp = calloc(nd + 1, sizeof(*m->dp))) ||
	    !(m->ss = calloc(ns + 1, sizeof(*m->ss))) ||
	    !(m->sp = calloc(ns + 1, sizeof(*m->sp)))) {
		stats_reply_free(m);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nd; i++) {
		const struct cat_entry *e = &d->cat->e[i];
		if (!acl_allows(&e->cfg->acl, peer, d->self_uid))
			continue;
		Feed__DatasetStats *s = &m->ds[st->n_datasets];
		feed__dataset_stats__init(s);
		s->name = (char *)e->cfg->name;
		s->num_samples = e->info->num_samples;
		s->bytes_on_disk = e->info->bytes_on_disk;
		for (struct stats_entry *en = d->stats.first; en; en = en->next)
			s->streams += en->e == e;
		m->dp[st->n_datasets++] = s;
	}
	for (struct stats_entry *en = d->stats.first; en; en = en->next) {
		if (!acl_allows(&en->e->cfg->acl, peer, d->self_uid))
			continue;
		stats_fill(en, now, &m->ss[st->n_streams]);
		m->sp[st->n_streams] = &m->ss[st->n_streams];
		st->n_streams++;
	}
	st->datasets = m->dp;
	st->streams = m->sp;
	stats_cache(d, m, st);
	*ret_mem = m;
	return 0;
}
