/*
 * metrics.c: the Prometheus exposition and its HTTP server (see
 * metrics.h for the threads). met_render() and everything it calls run on
 * the loop thread; met_answer() runs on libmicrohttpd's thread and only
 * waits for, and copies, what the loop rendered.
 */
#include "metrics.h"

#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "catalog.h"
#include "disktier.h"
#include "dstate.h"
#include "feed_lock.h"
#include "log_limit.h"
#include "metrics_doc.h"
#include "metrics_gpu.h"
#include "metrics_process.h"
#include "pool.h"

struct met {
	struct dstate *d;               /* loop thread only */
	struct MHD_Daemon *mhd;        /* NULL once stopped */
	uv_async_t wake;               /* HTTP thread -> loop: render now */
	pthread_mutex_t mu;            /* guards what follows */
	pthread_cond_t rendered;       /* done moved, or stopping */
	uint64_t asked;                /* renders asked for (HTTP thread) */
	uint64_t done;                 /* of those, the last one the text answers */
	char *text;                    /* the last rendering, owned; NULL: none yet */
	size_t len;
	bool stopping;                 /* met_stop() began: wait no more */
	_Atomic unsigned open;         /* HTTP connections open now (relaxed: a gauge) */
	_Atomic uint64_t refused;      /* connections refused over a limit (log lines) */
	struct log_limit refused_log;  /* the HTTP thread's own: its refusal warnings */
	struct met_gpu *gpu;           /* NVML, or NULL: no GPU memory figures; called
					* on the HTTP thread only */
};

/* HTTP connections open now; 0 without the server. Any thread. */
static unsigned met_http_connections(const struct met *m)
{
	/* relaxed: a count shown as it is */
	return m ? atomic_load_explicit(&m->open, memory_order_relaxed) : 0;
}

/* ---- the text (loop thread) ---- */

struct met_buf {
	char *p;
	size_t len, cap;
	bool oom;                      /* an append failed: the text is unusable */
};

static void __attribute__((format(printf, 2, 3))) met_printf(struct met_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

/* A label value, escaped as the format asks (backslash, quote, newline). */
static void met_value(struct met_buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			met_printf(b, "\\%c", *s);
		else if (*s == '\n')
			met_printf(b, "\\n");
		else
			met_printf(b, "%c", *s);
	}
}

/* A family's # HELP and # TYPE, from its row in metrics_doc.c (the one
 * place its type and help are written: `feedd --list-metrics` prints the
 * same rows). */
static void met_family(struct met_buf *b, const char *name)
{
	const char *type;
	const char *help = met_doc_find(name, &type);

	assert(help);  /* every family rendered has its row */
	met_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help ? help : "", name,
		   help ? type : "untyped");
}

/* The series of the per-stream metrics, gathered once per rendering. */
struct met_series {
	struct stats_series *s;
	size_t n, cap;
};

static int met_collect(const struct stats_series *s, void *arg)
{
	struct met_series *all = arg;

	if (all->n == all->cap) {
		size_t cap = all->cap ? all->cap * 2 : 16;
		void *p = realloc(all->s, cap * sizeof(*all->s));
		if (!p)
			return -ENOMEM;
		all->s = p;
		all->cap = cap;
	}
	all->s[all->n++] = *s;
	return 0;
}

static void met_labels(struct met_buf *b, const struct stats_series *s)
{
	if (s->uid == (uid_t)-1)
		met_printf(b, "{user=\"_other\",dataset=\"");
	else
		met_printf(b, "{user=\"%u\",dataset=\"", (unsigned)s->uid);
	met_value(b, s->dataset);
	met_printf(b, "\",job=\"");
	met_value(b, s->job);
	met_printf(b, "\",group=\"");
	met_value(b, s->group);
	met_printf(b, "\"}");
}

/* One per-stream family: which field, and whether it is seconds (ns).
 * The series of one open stream are these families' (MET_STREAM_FAMILIES,
 * well under 64); a closed one's leave after the next scrape. */
struct met_stream_family {
	const char *name;
	size_t off;                    /* of a uint64_t, or of a uint32_t gauge */
	bool ns, u32;
	bool live;                     /* a gauge of open streams only: no series once
					* every stream of the labels closed */
};

#define MET_AT(f) offsetof(struct stats_series, f)
static const struct met_stream_family met_stream_families[] = {
	{"feedd_samples_total", MET_AT(samples), false, false, false},
	{"feedd_batches_total", MET_AT(batches), false, false, false},
	{"feedd_bytes_total", MET_AT(bytes), false,
	 false, false},
	{"feedd_reader_wait_seconds_total", MET_AT(reader_wait_ns),
	 true, false, false},
	{"feedd_worker_seconds_total", MET_AT(worker_ns), true, false, false},
	{"feedd_samples_replaced_total", MET_AT(replaced), false, false, false},
	{"feedd_batches_detached_total", MET_AT(detached), false, false, false},
	{"feedd_credits", MET_AT(credits), false, true, false},
	{"feedd_credits_in_use", MET_AT(credits_in_use), false, true, false},
	{"feedd_readers", MET_AT(readers), false, true, true},
	{"feedd_shm_bytes", MET_AT(shm_bytes), false, false, true},
	{"feedd_slot_bytes", MET_AT(slot_bytes), false, false, true},
};
#define MET_STREAM_FAMILIES (sizeof(met_stream_families) / sizeof(met_stream_families[0]))

static void met_streams(struct met_buf *b, const struct met_series *all)
{
	for (size_t f = 0; f < MET_STREAM_FAMILIES; f++) {
		const struct met_stream_family *m = &met_stream_families[f];
		met_family(b, m->name);
		for (size_t i = 0; i < all->n; i++) {
			const char *at = (const char *)&all->s[i] + m->off;
			if (m->live && !all->s[i].live)
				continue;
			uint64_t v = m->u32 ? *(const uint32_t *)at : *(const uint64_t *)at;
			met_printf(b, "%s", m->name);
			met_labels(b, &all->s[i]);
			if (m->ns)
				met_printf(b, " %.9f\n", (double)v / 1e9);
			else
				met_printf(b, " %llu\n", (unsigned long long)v);
		}
	}
}

/* The per-dataset totals: closed streams' counts for good, open ones' on
 * top, so a stream's counts outlive its own series. */
struct met_totals {
	struct stats_dataset_total *t;
	size_t n, cap;
};

static int met_collect_total(const struct stats_dataset_total *t, void *arg)
{
	struct met_totals *all = arg;

	if (all->n == all->cap) {
		size_t cap = all->cap ? all->cap * 2 : 8;
		void *p = realloc(all->t, cap * sizeof(*all->t));
		if (!p)
			return -ENOMEM;
		all->t = p;
		all->cap = cap;
	}
	all->t[all->n++] = *t;
	return 0;
}

#define MET_TOT(f) offsetof(struct stats_dataset_total, f)
static const struct met_stream_family met_dataset_families[] = {
	{"feedd_dataset_samples_total", MET_TOT(samples), false, false, false},
	{"feedd_dataset_batches_total", MET_TOT(batches), false, false, false},
	{"feedd_dataset_bytes_total", MET_TOT(bytes), false, false, false},
	{"feedd_dataset_reader_wait_seconds_total", MET_TOT(reader_wait_ns), true, false, false},
	{"feedd_dataset_worker_seconds_total", MET_TOT(worker_ns), true, false, false},
	{"feedd_dataset_samples_replaced_total", MET_TOT(replaced), false, false, false},
	{"feedd_dataset_batches_detached_total", MET_TOT(detached), false, false, false},
	{"feedd_dataset_streams_closed_total", MET_TOT(closed), false, false, false},
};

static int met_datasets_totals(struct met_buf *b, struct dstate *d)
{
	struct met_totals all = {0};
	int rc = stats_each_dataset(&d->stats, uv_now(&d->loop), met_collect_total, &all);

	if (rc < 0) {
		free(all.t);
		return rc;
	}
	for (size_t f = 0; f < sizeof(met_dataset_families) / sizeof(met_dataset_families[0]);
	     f++) {
		const struct met_stream_family *m = &met_dataset_families[f];
		met_family(b, m->name);
		for (size_t i = 0; i < all.n; i++) {
			uint64_t v = *(const uint64_t *)((const char *)&all.t[i] + m->off);
			met_printf(b, "%s{dataset=\"", m->name);
			met_value(b, all.t[i].dataset);
			if (m->ns)
				met_printf(b, "\"} %.9f\n", (double)v / 1e9);
			else
				met_printf(b, "\"} %llu\n", (unsigned long long)v);
		}
	}
	free(all.t);
	return 0;
}

/* Why a configured dataset is not served, as a label of a small fixed
 * set. "pending": a remote dataset whose manifest has not arrived yet
 * (the fetcher's state; never chosen from an errno here). */
static const char *const met_left_reasons[] = {
	"missing", "access", "invalid", "unreachable", "pending", "other",
};
#define MET_LEFT_N (sizeof(met_left_reasons) / sizeof(met_left_reasons[0]))

static size_t met_left_reason(int err)
{
	switch (err) {
	case -ENOENT: case -ENOTDIR:
		return 0;
	case -EACCES: case -EPERM:
		return 1;
	case -EBADMSG: case -EINVAL: case -EPROTO: case -EILSEQ: case -EFBIG: case -ESTALE:
	case -ENOTSUP:
		return 2;
	case -EHOSTUNREACH: case -ECONNREFUSED: case -ETIMEDOUT: case -ENETUNREACH:
	case -ECONNRESET: case -EIO: case -EREMOTEIO: case -EHOSTDOWN:
		return 3;
	case -EINPROGRESS:  /* the fetcher's "pending" */
		return 4;
	default:
		return 5;
	}
}

/* Datasets the config names, served, and left out by reason. */
static void met_datasets(struct met_buf *b, struct dstate *d)
{
	const struct cfg *c = d->cfg;
	const struct cat *cat = d->cat;
	uint64_t left[MET_LEFT_N] = {0};

	met_family(b, "feedd_datasets_configured");
	met_printf(b, "feedd_datasets_configured %zu\n", c->ndatasets);
	met_family(b, "feedd_datasets_open");
	met_printf(b, "feedd_datasets_open %zu\n", cat ? cat->n : 0);
	met_family(b, "feedd_dataset_left_out");
	for (size_t i = 0; cat && cat->left_err && i < c->ndatasets; i++) {
		if (!cat->left_err[i])
			continue;
		size_t why = met_left_reason(cat->left_err[i]);
		left[why]++;
		met_printf(b, "feedd_dataset_left_out{dataset=\"");
		met_value(b, c->datasets[i].name);
		met_printf(b, "\",reason=\"%s\"} 1\n", met_left_reasons[why]);
	}
	met_family(b, "feedd_datasets_left_out");
	for (size_t i = 0; i < MET_LEFT_N; i++)
		met_printf(b, "feedd_datasets_left_out{reason=\"%s\"} %llu\n", met_left_reasons[i],
			   (unsigned long long)left[i]);
}

/* Reloads, as Prometheus reports its own config's. */
static void met_config(struct met_buf *b, const struct stats_reg *r)
{
	met_family(b, "feedd_config_last_reload_successful");
	met_printf(b, "feedd_config_last_reload_successful %d\n", r->reload_ok ? 1 : 0);
	met_family(b, "feedd_config_last_reload_success_timestamp_seconds");
	met_printf(b, "feedd_config_last_reload_success_timestamp_seconds %.6f\n",
		   r->reload_ok_s);
	met_family(b, "feedd_config_reloads_total");
	met_printf(b, "feedd_config_reloads_total %llu\n", (unsigned long long)r->reloads);
	met_family(b, "feedd_config_reload_failures_total");
	met_printf(b, "feedd_config_reload_failures_total %llu\n",
		   (unsigned long long)r->reloads_failed);
}

/* process_* as client libraries name them, and feedd's own memory figure. */
static void met_process(struct met_buf *b)
{
	struct met_process p;

	met_process_read(&p);
	met_family(b, "process_cpu_seconds_total");
	met_printf(b, "process_cpu_seconds_total %.6f\n", p.cpu_s);
	if (p.has_rss) {
		met_family(b, "process_resident_memory_bytes");
		met_printf(b, "process_resident_memory_bytes %llu\n",
			   (unsigned long long)p.rss_bytes);
		met_family(b, "process_virtual_memory_bytes");
		met_printf(b, "process_virtual_memory_bytes %llu\n", (unsigned long long)p.vm_bytes);
	}
	if (p.has_start) {
		met_family(b, "process_start_time_seconds");
		met_printf(b, "process_start_time_seconds %.2f\n", p.start_s);
	}
	if (p.has_fds) {
		met_family(b, "process_open_fds");
		met_printf(b, "process_open_fds %llu\n", (unsigned long long)p.open_fds);
	}
	met_family(b, "process_max_fds");
	met_printf(b, "process_max_fds %llu\n", (unsigned long long)p.max_fds);
	if (p.has_anon) {
		met_family(b, "feedd_memory_bytes");
		met_printf(b, "feedd_memory_bytes %llu\n", (unsigned long long)p.anon_shmem_bytes);
	}
	met_family(b, "feedd_memory_limit_bytes");
	met_printf(b, "feedd_memory_limit_bytes %llu\n",
		   (unsigned long long)(p.has_limit ? p.mem_limit_bytes : 0));
}

static void met_cache(struct met_buf *b, struct cache *c)
{
	struct cache_tally t[CACHE_TALLY_MAX];
	size_t n = cache_tallies(c, t, CACHE_TALLY_MAX);
	static const struct {
		const char *name;
		size_t off;
	} fam[] = {
		{"feedd_cache_hits_total", offsetof(struct cache_tally, hits)},
		{"feedd_cache_misses_total", offsetof(struct cache_tally, misses)},
		{"feedd_cache_evictions_total", offsetof(struct cache_tally, evictions)},
		{"feedd_cache_bytes", offsetof(struct cache_tally, bytes)},
	};

	struct cache_stats cs;

	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		met_family(b, fam[f].name);
		for (size_t i = 0; i < n; i++) {
			met_printf(b, "%s{dataset=\"", fam[f].name);
			met_value(b, t[i].name);
			met_printf(b, "\"} %llu\n", (unsigned long long)*(const uint64_t *)(
					   (const char *)&t[i] + fam[f].off));
		}
	}
	cache_stats(c, &cs);
	met_family(b, "feedd_cache_capacity_bytes");
	met_printf(b, "feedd_cache_capacity_bytes %llu\n", (unsigned long long)cs.budget);
	met_family(b, "feedd_cache_entries");
	met_printf(b, "feedd_cache_entries %llu\n", (unsigned long long)cs.entries);
}

static void met_disk_tier(struct met_buf *b, struct dstate *d);

/* Remote datasets' requests (every dataset together) and the disk tier
 * (only with cache_dir). */
static void met_remote(struct met_buf *b, struct dstate *d)
{
	static const struct {
		const char *name;
		size_t off;
	} rf[] = {
		{"feedd_remote_requests_total", offsetof(struct remote_counters, requests)},
		{"feedd_remote_retries_total", offsetof(struct remote_counters, retries)},
		{"feedd_remote_failures_total", offsetof(struct remote_counters, failures)},
		{"feedd_remote_bytes_total", offsetof(struct remote_counters, bytes)},
	};

	met_family(b, "feedd_dataset_state");
	static const char *const states[] = {"ready", "pending", "failed"};  /* enum cat_state */
	for (size_t i = 0; d->cat && i < d->cat->n; i++) {
		enum cat_state st = cat_entry_state(d->cat->e[i], NULL);
		for (int k = 0; k < 3; k++) {
			met_printf(b, "feedd_dataset_state{dataset=\"");
			met_value(b, d->cat->e[i]->name);
			met_printf(b, "\",state=\"%s\"} %d\n", states[k], (int)st == k);
		}
	}
	met_family(b, "feedd_remote_staged_bytes");
	met_printf(b, "feedd_remote_staged_bytes %zu\n",
		   d->fetcher ? fetcher_staged_bytes(d->fetcher) : (size_t)0);
	for (size_t i = 0; i < sizeof(rf) / sizeof(rf[0]); i++) {
		/* relaxed: counts; the fetcher bumps them without a lock */
		uint64_t v = atomic_load_explicit((_Atomic uint64_t *)((char *)&d->remote + rf[i].off),
						  memory_order_relaxed);
		met_family(b, rf[i].name);
		met_printf(b, "%s %llu\n", rf[i].name, (unsigned long long)v);
	}
	if (d->tier)
		met_disk_tier(b, d);
}

/* The disk tier (cache_dir). */
static void met_disk_tier(struct met_buf *b, struct dstate *d)
{
	struct dtier_stats t;
	dtier_stats(d->tier, &t);  /* a copy under its lock: short, on the loop */
	const struct {
		const char *name;
		uint64_t v;
	} tf[] = {
		{"feedd_disk_tier_hits_total", t.hits},
		{"feedd_disk_tier_misses_total", t.misses},
		{"feedd_disk_tier_corrupt_total", t.corrupt},
		{"feedd_disk_tier_stored_total", t.stored},
		{"feedd_disk_tier_evictions_total", t.evicted},
		{"feedd_disk_tier_bytes", t.bytes},
		{"feedd_disk_tier_files", t.files},
	};
	for (size_t i = 0; i < sizeof(tf) / sizeof(tf[0]); i++) {
		met_family(b, tf[i].name);
		met_printf(b, "%s %llu\n", tf[i].name, (unsigned long long)tf[i].v);
	}
	met_family(b, "feedd_disk_tier_capacity_bytes");
	met_printf(b, "feedd_disk_tier_capacity_bytes %llu\n",
		   (unsigned long long)d->cfg->cache_dir_bytes);
}

static void met_daemon(struct met_buf *b, struct dstate *d)
{
	met_family(b, "feedd_build_info");
	met_printf(b, "feedd_build_info{version=\"");
	met_value(b, FEEDD_VERSION);
	met_printf(b, "\"} 1\n");
	met_family(b, "feedd_connections");
	met_printf(b, "feedd_connections %u\n", d->stats.connections);
	met_family(b, "feedd_streams");
	met_printf(b, "feedd_streams %u\n", d->stats.n);
	met_family(b, "feedd_refusals_total");
	for (int i = 0; i < STATS_REFUSED_N; i++)
		met_printf(b, "feedd_refusals_total{reason=\"%s\"} %llu\n", stats_refusal_names[i],
			   (unsigned long long)d->stats.refusals[i]);
	met_family(b, "feedd_workers");
	met_printf(b, "feedd_workers %u\n", d->pool ? pool_size(d->pool) : 0);
	met_family(b, "feedd_workers_busy");
	met_printf(b, "feedd_workers_busy %u\n", d->pool ? pool_busy(d->pool) : 0);
	met_family(b, "feedd_uptime_seconds");
	met_printf(b, "feedd_uptime_seconds %.3f\n",
		   (double)(uv_now(&d->loop) - d->start_ms) / 1e3);
	unsigned idx;
	uint64_t ms = 0;
	if (!d->pool || pool_longest_job(d->pool, &idx, &ms) <= 0)
		ms = 0;
	met_family(b, "feedd_worker_oldest_job_seconds");
	met_printf(b, "feedd_worker_oldest_job_seconds %.3f\n", (double)ms / 1e3);
	met_family(b, "feedd_metrics_connections");
	met_printf(b, "feedd_metrics_connections %u\n", met_http_connections(d->metrics));
}

int met_render(struct dstate *d, char **ret, size_t *ret_len)
{
	struct met_buf b = {0};
	struct met_series all = {0};
	int rc = stats_each_series(&d->stats, uv_now(&d->loop), met_collect, &all);

	if (rc == 0) {
		met_daemon(&b, d);
		met_process(&b);
		met_config(&b, &d->stats);
		met_datasets(&b, d);
		met_streams(&b, &all);
		rc = met_datasets_totals(&b, d);
		if (d->cache)
			met_cache(&b, d->cache);
		met_remote(&b, d);
		met_printf(&b, "%s", "");  /* a buffer, even when empty */
	}
	free(all.s);
	if (rc < 0 || b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	*ret = b.p;
	*ret_len = b.len;
	return 0;
}

/* ---- the hand-off ---- */

/* Loop thread: render for every request asked so far. */
static void met_on_wake(uv_async_t *h)
{
	struct met *m = h->data;
	char *text = NULL, *old;
	size_t len = 0;
	uint64_t gen;

	feed_mutex_lock(&m->mu);
	gen = m->asked;
	feed_mutex_unlock(&m->mu);
	if (met_render(m->d, &text, &len) < 0)
		log_warn(&m->d->log, "metrics: out of memory rendering; serving the last text");
	if (text)  /* shown once: closed streams' series may go now */
		stats_scraped(&m->d->stats);
	feed_mutex_lock(&m->mu);
	old = text ? m->text : NULL;
	if (text) {
		m->text = text;
		m->len = len;
	}
	m->done = gen;  /* answered, with the last text if this one failed */
	pthread_cond_broadcast(&m->rendered);
	feed_mutex_unlock(&m->mu);
	free(old);
}

/* HTTP thread: text (of *len bytes, owned) with the GPU memory family
 * after it, asked of NVML here rather than on the loop (milliseconds a
 * call); text as it was when there is none or no memory for it. */
static char *met_gpu_append(struct met *m, char *text, size_t *len)
{
	char gpu[8192];
	size_t n = m->gpu ? met_gpu_text(m->gpu, gpu, sizeof(gpu)) : 0;
	char *more;

	if (!n || !(more = realloc(text, *len + n + 1)))
		return text;
	memcpy(more + *len, gpu, n + 1);
	*len += n;
	return more;
}

/* HTTP thread: a copy of a rendering made after the request came, or of
 * the last one when the loop does not answer in time; NULL when none. */
static char *met_fresh_text(struct met *m, size_t *ret_len)
{
	struct timespec until;
	char *copy = NULL;
	uint64_t want;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += METRICS_WAIT_MS / 1000;
	until.tv_nsec += (METRICS_WAIT_MS % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	feed_mutex_lock(&m->mu);
	want = ++m->asked;
	feed_mutex_unlock(&m->mu);
	uv_async_send(&m->wake);
	feed_mutex_lock(&m->mu);
	while (m->done < want && !m->stopping)
		if (pthread_cond_timedwait(&m->rendered, &m->mu, &until) == ETIMEDOUT)
			break;
	if (m->text && (copy = malloc(m->len + 1))) {
		memcpy(copy, m->text, m->len + 1);
		*ret_len = m->len;
	}
	feed_mutex_unlock(&m->mu);
	return copy ? met_gpu_append(m, copy, ret_len) : NULL;
}

static enum MHD_Result met_reply(struct MHD_Connection *c, unsigned status, const char *type,
				 void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ok;

	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

/* HTTP thread: GET /metrics; 404 elsewhere, 405 for other methods. */
static enum MHD_Result met_answer(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **req_cls)
{
	static const char not_found[] = "not found: feedd serves /metrics\n";
	static const char not_allowed[] = "only GET and HEAD\n";
	static const char busy[] = "feedd's loop did not answer in time\n";
	struct met *m = cls;
	size_t len = 0;
	char *text;

	(void)version, (void)upload, (void)upload_size, (void)req_cls;
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return met_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", (void *)not_allowed,
				 sizeof(not_allowed) - 1, MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics"))
		return met_reply(c, MHD_HTTP_NOT_FOUND, "text/plain", (void *)not_found,
				 sizeof(not_found) - 1, MHD_RESPMEM_PERSISTENT);
	if (!(text = met_fresh_text(m, &len)))
		return met_reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", (void *)busy,
				 sizeof(busy) - 1, MHD_RESPMEM_PERSISTENT);
	return met_reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len,
			 MHD_RESPMEM_MUST_FREE);
}

static uint64_t met_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* libmicrohttpd's own complaints, into our log: its thread, so its own
 * rate limit (a flood of refused connections writes a few lines and a
 * count, never one line each). */
static void met_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct met *m = cls;
	char line[512], note[LOG_LIMIT_NOTE_MAX];
	uint64_t gone = 0;

	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	if (strstr(line, "limit"))  /* "reached (per-IP) connection limit" */
		atomic_fetch_add_explicit(&m->refused, 1, memory_order_relaxed); /* a count */
	if (!log_limit_allow(&m->refused_log, met_now_ms(), &gone))
		return;
	log_warn(&m->d->log, "metrics: %s (at most %u connections, %u from one address, "
		 "idle ones closed after %u s)%s", line, METRICS_MAX_CONNECTIONS,
		 METRICS_MAX_PER_PEER, METRICS_IDLE_TIMEOUT_S, log_limit_note(gone, note));
}

/* libmicrohttpd's thread: a connection opened or closed. */
static void met_mhd_conn(void *cls, struct MHD_Connection *c, void **socket_ctx,
			 enum MHD_ConnectionNotificationCode why)
{
	struct met *m = cls;

	(void)c, (void)socket_ctx;
	/* relaxed: a gauge */
	if (why == MHD_CONNECTION_NOTIFY_STARTED)
		atomic_fetch_add_explicit(&m->open, 1, memory_order_relaxed);
	else if (why == MHD_CONNECTION_NOTIFY_CLOSED)
		atomic_fetch_sub_explicit(&m->open, 1, memory_order_relaxed);
}

/* ---- start and stop (loop thread) ---- */

static void met_free(struct met *m)
{
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->rendered);
	free(m->text);
	free(m);
}

static void met_on_closed(uv_handle_t *h)
{
	met_free(h->data);
}

static int met_listen(struct met *m, struct feed_err *err)
{
	const struct cfg *cfg = m->d->cfg;
	const struct sockaddr_storage *sa = &cfg->metrics_addr;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
	uint16_t port = ntohs(sa->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
						       : ((const struct sockaddr_in *)sa)->sin_port);

	if (sa->ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->mhd = MHD_start_daemon(flags, port, NULL, NULL, met_answer, m,
				  MHD_OPTION_EXTERNAL_LOGGER, met_mhd_log, m,
				  MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)sa,
				  MHD_OPTION_NOTIFY_CONNECTION, met_mhd_conn, m,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNECTIONS,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)METRICS_MAX_PER_PEER,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_TIMEOUT_S,
				  MHD_OPTION_END);
	if (!m->mhd)
		return feed_err_set(err, -EADDRNOTAVAIL, "metrics %s: cannot listen there (in use, "
				    "or not an address of this host)", cfg->metrics);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_BIND_PORT);
	char host[64];
	snprintf(host, sizeof(host), "%.*s", (int)(strrchr(cfg->metrics, ':') - cfg->metrics),
		 cfg->metrics);
	log_info(&m->d->log, "metrics: serving http://%s:%u/metrics", host,
		 info ? (unsigned)info->port : (unsigned)port);
	return 0;
}

int met_start(struct dstate *d, struct met **ret, struct feed_err *err)
{
	struct met *m;
	int rc;

	*ret = NULL;
	if (!d->cfg->metrics)
		return 0;
	if (!(m = calloc(1, sizeof(*m))))
		return feed_err_set(err, -ENOMEM, "metrics: out of memory");
	m->d = d;
	log_limit_init(&m->refused_log, LOG_LIMIT_BURST, 10000);
	pthread_mutex_init(&m->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->rendered, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = uv_async_init(&d->loop, &m->wake, met_on_wake)) < 0) {
		met_free(m);
		return feed_err_set(err, rc, "metrics: uv_async_init: %s", uv_strerror(rc));
	}
	m->wake.data = m;
	char why[600];
	if (met_gpu_open(&m->gpu, why, sizeof(why)) < 0)
		log_debug(&d->log, "metrics: no GPU memory figures: %s", why);
	if ((rc = met_listen(m, err)) < 0) {
		met_gpu_close(m->gpu);
		m->gpu = NULL;
		uv_close((uv_handle_t *)&m->wake, met_on_closed);
		return rc;
	}
	*ret = m;
	return 0;
}

void met_stop(struct met *m)
{
	if (!m)
		return;
	feed_mutex_lock(&m->mu);
	m->stopping = true;
	pthread_cond_broadcast(&m->rendered);
	feed_mutex_unlock(&m->mu);
	MHD_stop_daemon(m->mhd);  /* joins its thread: nothing sends to wake after */
	m->mhd = NULL;
	met_gpu_close(m->gpu);    /* its one caller, the HTTP thread, is gone */
	m->gpu = NULL;
	uv_close((uv_handle_t *)&m->wake, met_on_closed);
}
