/*
 * stats.c: the stream registry and the stats reply (see stats.h). Loop
 * thread only; reads counters, never waits for anything but a stream's
 * O(1) lock and the cache's copy of its counters.
 */
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "access.h"
#include "cache.h"
#include "catalog.h"
#include "pool.h"

const char *const stats_refusal_names[STATS_REFUSED_N] = {
	"access", "limit", "not_found", "invalid", "malformed", "other",
};

static uint64_t stats_max(uint64_t *seen, uint64_t v)
{
	if (v > *seen)
		*seen = v;
	return *seen;
}

void stats_read(struct stats_entry *en, uint64_t now_ms, struct stats_sample *ret)
{
	struct stats_hist *h = &en->hist;
	uint64_t age_ns = (now_ms > en->opened_ms ? now_ms - en->opened_ms : 0) * 1000000u;
	struct stats_sample x = {0};

	en->read(en, &x);
	/* the client's word: anything past the stream's age is a lie or a bug */
	if (x.reader_wait_ns > age_ns)
		x.reader_wait_ns = age_ns;
	/* likewise: a batch is detached at most once by each reader it went to */
	uint64_t most = x.batches * (x.members ? x.members : 1);
	if (x.detached > most)
		x.detached = most;
	x.batches = stats_max(&h->max_batches, x.batches);
	x.samples = stats_max(&h->max_samples, x.samples);
	x.bytes = stats_max(&h->max_bytes, x.bytes);
	x.worker_ns = stats_max(&h->max_worker_ns, x.worker_ns);
	x.jobs = stats_max(&h->max_jobs, x.jobs);
	x.reader_wait_ns = stats_max(&h->max_wait_ns, x.reader_wait_ns);
	x.detached = stats_max(&h->max_detached, x.detached);
	*ret = x;
}

static void stats_hist_push(struct stats_hist *h, uint64_t ms, const struct stats_sample *x)
{
	h->ms[h->head] = ms;
	h->samples[h->head] = x->samples;
	h->bytes[h->head] = x->bytes;
	h->wait_ns[h->head] = x->reader_wait_ns;
	h->head = (h->head + 1) % (STATS_RATE_S + 1);
	if (h->n < STATS_RATE_S + 1)
		h->n++;
}

void stats_rates(const struct stats_entry *en, const struct stats_sample *x, uint64_t now_ms,
		 struct stats_rates *ret)
{
	const struct stats_hist *h = &en->hist;
	unsigned old = (h->head + STATS_RATE_S + 1 - h->n) % (STATS_RATE_S + 1);
	uint64_t ms = h->n ? h->ms[old] : en->opened_ms;
	double s = now_ms > ms ? (double)(now_ms - ms) / 1e3 : 0.0;

	*ret = (struct stats_rates){0};
	if (!h->n || s <= 0.0)
		return;
	ret->samples_per_s = (double)(x->samples - h->samples[old]) / s;
	ret->mb_per_s = (double)(x->bytes - h->bytes[old]) / s / 1e6;
	ret->reader_wait_share = (double)(x->reader_wait_ns - h->wait_ns[old]) / (s * 1e9);
	if (ret->reader_wait_share > 1.0)
		ret->reader_wait_share = 1.0;
}

/* The wall clock, seconds since 1970 (to the microsecond). */
static double stats_wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) / 1e6;
}

static void stats_on_tick(uv_timer_t *t)
{
	struct stats_reg *r = t->data;
	uint64_t now = uv_now(r->loop);
	struct stats_sample x;

	for (struct stats_entry *en = r->first; en; en = en->next) {
		stats_read(en, now, &x);
		stats_hist_push(&en->hist, now, &x);
	}
}

int stats_start(struct stats_reg *r, uv_loop_t *loop, struct cache *cache)
{
	int rc;

	r->loop = loop;
	r->cache = cache;
	r->reload_ok = true;  /* the config in force loaded: as Prometheus says at start */
	r->reload_ok_s = stats_wall_s();
	if ((rc = uv_timer_init(loop, &r->tick)) < 0)
		return rc;
	r->tick.data = r;
	r->ticking = true;
	return uv_timer_start(&r->tick, stats_on_tick, 1000, 1000);
}

void stats_stop(struct stats_reg *r)
{
	if (!r->ticking)
		return;
	r->ticking = false;
	uv_close((uv_handle_t *)&r->tick, NULL);
}

void stats_free(struct stats_reg *r)
{
	free(r->closed);
	r->closed = NULL;
	r->nclosed = r->cap = 0;
	free(r->totals);
	r->totals = NULL;
	r->ntotals = r->tcap = 0;
}

void stats_reloaded(struct stats_reg *r, bool ok)
{
	r->reloads++;
	r->reload_ok = ok;
	if (ok)
		r->reload_ok_s = stats_wall_s();
	else
		r->reloads_failed++;
}

void stats_refused(struct stats_reg *r, int code, bool malformed)
{
	enum stats_refusal why = malformed ? STATS_REFUSED_MALFORMED :
		code == -EACCES || code == -EPERM ? STATS_REFUSED_ACCESS :
		code == -EUSERS || code == -ENOSPC || code == -EDQUOT || code == -EMFILE ||
		code == -EBUSY ? STATS_REFUSED_LIMIT :
		code == -ENOENT ? STATS_REFUSED_NOT_FOUND :
		code == -EINVAL || code == -ERANGE || code == -E2BIG ? STATS_REFUSED_INVALID :
		STATS_REFUSED_OTHER;
	r->refusals[why]++;
}

/* The dataset label of en's series and totals: a mixture's own label
 * (every source together), else its dataset's name. */
static const char *stats_dataset_of(const struct stats_entry *en)
{
	return en->label ? en->label : en->e->cfg->name;
}

/* en's labels in *ret, counters zero. */
static void stats_labels(const struct stats_entry *en, struct stats_series *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->uid = en->uid;
	snprintf(ret->dataset, sizeof(ret->dataset), "%s", stats_dataset_of(en));
	snprintf(ret->job, sizeof(ret->job), "%s", en->job ? en->job : "");
	snprintf(ret->group, sizeof(ret->group), "%s", en->group ? en->group : "");
}

static bool stats_same(const struct stats_series *a, const struct stats_series *b)
{
	return a->uid == b->uid && !strcmp(a->dataset, b->dataset) && !strcmp(a->job, b->job) &&
	       !strcmp(a->group, b->group);
}

/* The series in arr[0..*n) labelled as key, added (zero) when missing and
 * there is room below max; else NULL. */
static struct stats_series *stats_find(struct stats_series **arr, size_t *n, size_t *cap,
				       size_t max, const struct stats_series *key)
{
	for (size_t i = 0; i < *n; i++)
		if (stats_same(&(*arr)[i], key))
			return &(*arr)[i];
	if (*n >= max)
		return NULL;
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *p = realloc(*arr, c * sizeof(**arr));
		if (!p)
			return NULL;
		*arr = p;
		*cap = c;
	}
	(*arr)[*n] = *key;
	return &(*arr)[(*n)++];
}

static void stats_series_add(struct stats_series *s, const struct stats_sample *x)
{
	s->batches += x->batches;
	s->samples += x->samples;
	s->bytes += x->bytes;
	s->worker_ns += x->worker_ns;
	s->reader_wait_ns += x->reader_wait_ns;
	s->replaced += x->replaced;
	s->detached += x->detached;
}

/* The gauges a live entry adds to its series. */
static void stats_series_live(struct stats_series *s, const struct stats_entry *en,
			      const struct stats_sample *x)
{
	s->credits += x->credits;
	s->credits_in_use += x->credits_in_use;
	s->readers += x->members ? x->members : 1;
	s->shm_bytes += en->shm_bytes;
	if (en->slot_bytes > s->slot_bytes)
		s->slot_bytes = en->slot_bytes;
	s->live++;
}

/* The per-dataset total called name, added (zero) when missing: under
 * "_other" past STATS_DATASETS_MAX; NULL only out of memory. */
static struct stats_dataset_total *stats_total(struct stats_dataset_total **arr, size_t *n,
					       size_t *cap, const char *name)
{
	for (int pass = 0; pass < 2; pass++, name = "_other") {
		for (size_t i = 0; i < *n; i++)
			if (!strcmp((*arr)[i].dataset, name))
				return &(*arr)[i];
		if (*n >= STATS_DATASETS_MAX - 1 && strcmp(name, "_other"))
			continue;  /* one slot is kept for "_other" */
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 8;
			void *p = realloc(*arr, c * sizeof(**arr));
			if (!p)
				return NULL;
			*arr = p;
			*cap = c;
		}
		struct stats_dataset_total *t = &(*arr)[(*n)++];
		memset(t, 0, sizeof(*t));
		snprintf(t->dataset, sizeof(t->dataset), "%s", name);
		return t;
	}
	return NULL;
}

static void stats_total_add(struct stats_dataset_total *t, const struct stats_sample *x)
{
	t->batches += x->batches;
	t->samples += x->samples;
	t->bytes += x->bytes;
	t->worker_ns += x->worker_ns;
	t->reader_wait_ns += x->reader_wait_ns;
	t->replaced += x->replaced;
	t->detached += x->detached;
}

/* Keeps what en counted under its labels: "_other" past STATS_SERIES_MAX
 * (that one always has room: one slot is kept for it). */
static void stats_retire(struct stats_reg *r, struct stats_entry *en)
{
	struct stats_series key, *s;
	struct stats_sample x;
	uint64_t now = r->loop ? uv_now(r->loop) : en->opened_ms;

	stats_read(en, now, &x);
	stats_labels(en, &key);
	s = stats_find(&r->closed, &r->nclosed, &r->cap, STATS_SERIES_MAX - 1, &key);
	if (!s) {
		key = (struct stats_series){.uid = (uid_t)-1};
		snprintf(key.dataset, sizeof(key.dataset), "_other");
		snprintf(key.job, sizeof(key.job), "_other");
		s = stats_find(&r->closed, &r->nclosed, &r->cap, STATS_SERIES_MAX, &key);
	}
	if (s)  /* NULL: out of memory; the series stops where it was */
		stats_series_add(s, &x);
	struct stats_dataset_total *t = stats_total(&r->totals, &r->ntotals, &r->tcap,
						    stats_dataset_of(en));
	if (t) {  /* NULL: out of memory; the total stops where it was */
		stats_total_add(t, &x);
		t->closed++;
	}
}

int stats_each_series(struct stats_reg *r, uint64_t now_ms,
		      int (*fn)(const struct stats_series *s, void *arg), void *arg)
{
	assert_loop_thread();
	size_t n = r->nclosed, cap = r->nclosed + r->n;
	struct stats_series *all = malloc((cap ? cap : 1) * sizeof(*all));
	int rc = 0;

	if (!all)
		return -ENOMEM;
	if (n)  /* r->closed is NULL until a stream has closed */
		memcpy(all, r->closed, n * sizeof(*all));
	for (struct stats_entry *en = r->first; en; en = en->next) {
		struct stats_series key, *s;
		struct stats_sample x;
		stats_read(en, now_ms, &x);
		stats_labels(en, &key);
		if ((s = stats_find(&all, &n, &cap, cap, &key))) {
			stats_series_add(s, &x);
			stats_series_live(s, en, &x);
		}
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(&all[i], arg);
	free(all);
	return rc;
}

void stats_scraped(struct stats_reg *r)
{
	assert_loop_thread();
	struct stats_series *open = NULL;
	size_t kept = 0, nopen = 0;

	if (!r->nclosed)
		return;
	/* the open entries' labels once, not once per closed series */
	if (r->n && (open = malloc(r->n * sizeof(*open))))
		for (struct stats_entry *en = r->first; en; en = en->next)
			stats_labels(en, &open[nopen++]);
	for (size_t i = 0; i < r->nclosed; i++) {
		bool live = r->n && !open;  /* out of memory: keep everything, as before */
		for (size_t j = 0; j < nopen && !live; j++)
			live = stats_same(&open[j], &r->closed[i]);
		if (live)  /* its labels go on: the series keeps what they counted */
			r->closed[kept++] = r->closed[i];
	}
	free(open);
	r->nclosed = kept;
	if (!kept) {  /* 5,000 streams closed between two scrapes leave no big array */
		free(r->closed);
		r->closed = NULL;
		r->cap = 0;
	}
}

int stats_each_dataset(struct stats_reg *r, uint64_t now_ms,
		       int (*fn)(const struct stats_dataset_total *t, void *arg), void *arg)
{
	assert_loop_thread();
	size_t n = r->ntotals, cap = r->ntotals;
	struct stats_dataset_total *all = malloc((n ? n : 1) * sizeof(*all));
	int rc = 0;

	if (!all)
		return -ENOMEM;
	if (n)
		memcpy(all, r->totals, n * sizeof(*all));
	for (struct stats_entry *en = r->first; en; en = en->next) {
		struct stats_sample x;
		struct stats_dataset_total *t;
		stats_read(en, now_ms, &x);
		if (!(t = stats_total(&all, &n, &cap, stats_dataset_of(en)))) {
			free(all);
			return -ENOMEM;
		}
		stats_total_add(t, &x);
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = fn(&all[i], arg);
	free(all);
	return rc;
}

void stats_add(struct stats_reg *r, struct stats_entry *en)
{
	assert_loop_thread();
	struct stats_sample zero = {0};

	memset(&en->hist, 0, sizeof(en->hist));
	stats_hist_push(&en->hist, en->opened_ms, &zero);
	if (r->cache)  /* -EEXIST when named already: the usual case */
		cache_name(r->cache, en->e->ds, en->e->cfg->name);
	en->prev = NULL;
	en->next = r->first;
	if (r->first)
		r->first->prev = en;
	r->first = en;
	r->n++;
}

void stats_remove(struct stats_reg *r, struct stats_entry *en)
{
	assert_loop_thread();
	if (!en->prev && r->first != en)
		return;  /* never added */
	stats_retire(r, en);
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

/* A group's members as the reply shows them: their pids and their
 * reader waits (the clients' word, clamped to the entry's age as the
 * group's is). */
static void stats_fill_members(const struct stats_sample *x, uint64_t age_ms,
			       Feed__StreamStatus *s)
{
	s->members = x->members ? x->members : 1;
	if (x->member_pids) {
		s->n_member_pids = x->members;
		s->member_pids = (int32_t *)x->member_pids;
	}
	if (x->member_pids && x->member_reader_wait_ns) {
		uint64_t *w = (uint64_t *)x->member_reader_wait_ns;
		for (uint32_t i = 0; i < x->members; i++)
			if (w[i] > age_ms * 1000000u)
				w[i] = age_ms * 1000000u;
		s->n_member_reader_wait_ns = x->members;
		s->member_reader_wait_ns = w;
	}
}

/* One entry as the reply shows it; now_ms: the loop's clock. */
static void stats_fill(struct stats_entry *en, uint64_t now_ms, Feed__StreamStatus *s)
{
	struct stats_sample x;
	struct stats_rates r10;
	uint64_t age_ms = now_ms > en->opened_ms ? now_ms - en->opened_ms : 0;

	stats_read(en, now_ms, &x);
	stats_rates(en, &x, now_ms, &r10);
	feed__stream_status__init(s);
	s->job = (char *)(en->job ? en->job : "");
	s->samples_per_s_10s = r10.samples_per_s;
	s->mb_per_s_10s = r10.mb_per_s;
	s->reader_wait_share_10s = r10.reader_wait_share;
	s->kind = (char *)en->kind;
	s->uid = (uint32_t)en->uid;
	s->pid = (int32_t)en->pid;
	s->conn = en->conn;
	s->stream = en->id;
	s->dataset = (char *)stats_dataset_of(en);
	s->group = (char *)(en->group ? en->group : "");
	s->pipeline = (char *)(en->pipeline ? en->pipeline : "");
	stats_fill_members(&x, age_ms, s);
	s->batch = en->batch;
	s->shm_bytes = en->shm_bytes;
	s->device = (char *)(en->device ? en->device : "");
	s->jpeg_decode = (char *)(x.jpeg_decode ? x.jpeg_decode : "");
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
	s->reader_wait_ns = x.reader_wait_ns;  /* clamped by stats_read() */
	s->replaced = x.replaced;
	s->detached_batches = x.detached;  /* clamped by stats_read() */
	s->reader_wait_share = age_ms ? (double)s->reader_wait_ns / ((double)age_ms * 1e6) : 0.0;
	s->rank = en->rank;
	s->world = en->world;
	s->slot_bytes = en->slot_bytes;
	s->batches_per_epoch = en->batches_per_epoch;
	s->epochs = en->epochs;
	s->start_epoch = en->start_epoch;
	s->start_batch = en->start_batch;
}

static void stats_cache(struct cache *c, struct stats_mem *m, Feed__Stats *st)
{
	struct cache_stats cs;

	cache_stats(c, &cs);
	feed__cache_stats__init(&m->cache);
	m->cache.hits = cs.hits;
	m->cache.misses = cs.misses;
	m->cache.evictions = cs.evictions;
	m->cache.bytes = cs.bytes;
	m->cache.entries = cs.entries;
	m->cache.budget = cs.budget;
	st->cache = &m->cache;
}

int stats_reply(const struct stats_sources *src, const struct acl_peer *peer, Feed__Stats *st,
		void **ret_mem)
{
	assert_loop_thread();
	struct stats_mem *m = calloc(1, sizeof(*m));
	size_t nd = src->cat->n, ns = src->reg->n;
	uint64_t now = src->now_ms;

	if (!m || !(m->ds = calloc(nd + 1, sizeof(*m->ds))) ||
	    !(m->dp = calloc(nd + 1, sizeof(*m->dp))) ||
	    !(m->ss = calloc(ns + 1, sizeof(*m->ss))) ||
	    !(m->sp = calloc(ns + 1, sizeof(*m->sp)))) {
		stats_reply_free(m);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nd; i++) {
		const struct cat_entry *e = src->cat->e[i];
		if (!acl_allows(&e->cfg->acl, peer, src->self_uid) ||
		    cat_entry_state(e, NULL) != CAT_READY)
			continue;  /* a pending one has no facts yet */
		Feed__DatasetStats *s = &m->ds[st->n_datasets];
		feed__dataset_stats__init(s);
		s->name = (char *)e->cfg->name;
		s->num_samples = e->info->num_samples;
		s->bytes_on_disk = e->info->bytes_on_disk;
		for (struct stats_entry *en = src->reg->first; en; en = en->next)
			s->streams += en->e == e;
		m->dp[st->n_datasets++] = s;
	}
	for (struct stats_entry *en = src->reg->first; en; en = en->next) {
		if (!acl_allows(&en->e->cfg->acl, peer, src->self_uid))
			continue;
		stats_fill(en, now, &m->ss[st->n_streams]);
		m->sp[st->n_streams] = &m->ss[st->n_streams];
		st->n_streams++;
	}
	st->datasets = m->dp;
	st->streams = m->sp;
	stats_cache(src->cache, m, st);
	*ret_mem = m;
	return 0;
}
