/*
 * session_group.c: the daemon's groups (see session_group.h): the list by
 * name, the join check, the group's quota and its detach timer. Loop
 * thread only. Groups are keyed by (user, name): a trainer's jobs run as
 * one user, and sharing batches across users would let one user's stalls
 * and in-place writes reach another's, so one user's group name neither
 * reaches nor blocks another user's. Only a name the config lists in its
 * dataset's shared_groups is one group for every user allowed to read
 * the dataset (its data region counts against its creator). Everything
 * the members' clients write is checked in delivery/dlv_publish.c.
 */
#include "session_group.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "catalog.h"
#include "dstate.h"
#include "fmt.h"
#include "order.h"
#include "quota.h"
#include "session.h"
#include "stats.h"

struct ses_group {
	struct ses_group *next;      /* d->groups, in creation order */
	struct dstate *d;
	char name[64];
	uid_t uid;                   /* creator: charged for the data region; its owner
				      * (with key.shared, every reader of the dataset may join) */
	struct ses_group_key key;    /* pipeline points to pipeline_text */
	char *pipeline_text;
	struct dlv *dlv;             /* owned; closed by the last reference */
	uint32_t depth;
	uint64_t data_bytes;         /* counted for uid */
	uint32_t refs;               /* members, including those still opening */
	bool started;                /* dlv_start() was called */
	const struct ses_group_member_ops *ops; /* how it looks at its members */
	struct ses_stream **members; /* open members, for reports and status */
	uint32_t nmembers, cap;
	int32_t *pids;               /* status: the members' pids (cap) */
	uint64_t *waits;             /* status: their reader_wait_ns (cap) */
	struct stats_entry stat;     /* the group's one status entry, once started */
	char job[STATS_JOB_MAX + 1]; /* its creator's OpenStream.job */
	uv_timer_t timer;            /* detaches idle members while started */
};

/* The group's counters for status (stats.h): built once, so listed once,
 * with its members' pids and each one's reader wait; the group's reader
 * wait is its members' largest. */
static void ses_group_read(struct stats_entry *en, struct stats_sample *ret)
{
	struct ses_group *g = (struct ses_group *)((char *)en - offsetof(struct ses_group, stat));
	struct dlv_stats st;
	uint64_t most = 0, detached = 0;

	dlv_stats(g->dlv, &st);
	for (uint32_t i = 0; i < g->nmembers; i++) {
		struct ses_stream_view v;
		g->ops->view(g->members[i], &v);
		g->pids[i] = (int32_t)v.pid;
		g->waits[i] = v.m.reader_wait_ns;
		if (v.m.reader_wait_ns > most)
			most = v.m.reader_wait_ns;
		detached += v.m.detached;
	}
	*ret = (struct stats_sample){
		.batches = st.batches, .samples = st.samples, .bytes = st.bytes,
		.worker_ns = st.worker_ns, .jobs = st.jobs, .reader_wait_ns = most,
		.credits = st.credits, .credits_in_use = st.credits_in_use,
		.members = g->nmembers, .member_pids = g->nmembers ? g->pids : NULL,
		.member_reader_wait_ns = g->nmembers ? g->waits : NULL,
		.replaced = st.replaced, .detached = detached,
	};
}

static const char *ses_order_name(int mode)
{
	return mode == ORD_FULL		? "full" :
	       mode == ORD_BLOCK_WINDOW ? "block_window" :
	       mode == ORD_NODE		? "node" :
					  "sequential";
}

/* The first parameter where k differs from the group's, named as a
 * person would (the stream option's name). */
static int ses_group_same(const struct ses_group *g, const struct ses_group_key *k,
			  struct feed_err *err)
{
	const struct ses_group_key *h = &g->key;
	const char *n = g->name;

	if (k->e != h->e && !strcmp(k->e->name, h->e->name))  /* a reload repointed it */
		return feed_err_set(err, -ESTALE, "group '%s': dataset '%s' is version %s now; the "
				    "group reads version %s, from before a reload", n, k->e->name,
				    k->e->info->version, h->e->info->version);
	if (k->e != h->e)
		return feed_err_set(err, -EINVAL, "group '%s': dataset '%s' differs from the "
				    "group's '%s'", n, k->e->cfg->name, h->e->cfg->name);
	if (k->pipeline_hash != h->pipeline_hash || strcmp(k->pipeline, h->pipeline))
		return feed_err_set(err, -EINVAL, "group '%s': pipeline '%s' differs from the "
				    "group's '%s'", n, k->pipeline, h->pipeline);
#define SES_SAME(field, label)                                                             \
	if (k->field != h->field)                                                          \
		return feed_err_set(err, -EINVAL, "group '%s': %s %llu differs from the group's " \
				    "%llu", n, label, (unsigned long long)k->field,        \
				    (unsigned long long)h->field)
	SES_SAME(seed, "seed");
	SES_SAME(batch, "batch_size");
	if (k->order != h->order)
		return feed_err_set(err, -EINVAL, "group '%s': order %s differs from the group's %s",
				    n, ses_order_name(k->order), ses_order_name(h->order));
	SES_SAME(window, "window");
	SES_SAME(nodes, "nodes");
	SES_SAME(deal_fixed, "node_deal fixed");
	SES_SAME(rank, "rank");
	SES_SAME(world, "world_size");
	SES_SAME(drop_last, "drop_last");
	SES_SAME(pad_last, "pad_last");
	SES_SAME(eval, "eval");
	SES_SAME(on_error, "on_error");
	SES_SAME(max_bad, "max_bad");
#undef SES_SAME
	return 0;
}

int ses_group_find(struct dstate *d, const char *name, uid_t uid, const struct ses_group_key *k,
		   struct ses_group **ret, struct feed_err *err)
{
	struct ses_group *g;
	int rc;

	for (g = d->groups; g; g = g->next)
		if (!strcmp(g->name, name) && g->key.shared == k->shared &&
		    (k->shared || g->uid == uid))
			break;
	if (g && (rc = ses_group_same(g, k, err)) < 0)
		return rc;
	if (g)
		g->refs++;
	*ret = g;
	return 0;
}

static uint64_t ses_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* How often a group's timer looks for idle members: a quarter of the
 * timeout in force (ms, at least 1). */
static uint64_t ses_group_period(const struct dstate *d)
{
	uint64_t every = d->cfg->group_timeout_ms / 4;
	return every ? every : 1;
}

static void ses_group_tick(uv_timer_t *t)
{
	struct ses_group *g = t->data;
	uint64_t timeout = g->d->cfg->group_timeout_ms * 1000000ull;

	if (dlv_detach_idle(g->dlv, ses_now_ns(), timeout, g->name) == 0)
		return;
	for (uint32_t i = 0; i < g->nmembers; i++)
		g->ops->report(g->members[i]);  /* logs who was detached */
}

int ses_group_new(struct dstate *d, const char *name, uid_t uid, const struct ses_group_key *k,
		  struct dlv *dlv, uint32_t depth, uint64_t data_bytes,
		  const struct ses_group_member_ops *ops, struct ses_group **ret,
		  struct feed_err *err)
{
	struct ses_group *g = calloc(1, sizeof(*g));
	int rc;

	if (!g || !(g->pipeline_text = strdup(k->pipeline))) {
		free(g);
		return feed_err_set(err, -ENOMEM, "group '%s': out of memory", name);
	}
	if ((rc = quota_group_take(&d->quota, uid, data_bytes, &d->cfg->limits, err)) < 0) {
		feed_err_prefix(err, "group '%s'", name);
		free(g->pipeline_text);
		free(g);
		return rc;
	}
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->d = d;
	g->uid = uid;
	g->key = *k;
	g->key.pipeline = g->pipeline_text;
	g->dlv = dlv;
	g->depth = depth;
	g->data_bytes = data_bytes;
	g->ops = ops;
	g->refs = 1;
	uv_timer_init(&d->loop, &g->timer);
	g->timer.data = g;
	struct ses_group **p = &d->groups;
	while (*p)
		p = &(*p)->next;
	*p = g;
	*ret = g;
	return 0;
}

static void ses_group_closed(uv_handle_t *h)
{
	struct ses_group *g = h->data;

	free(g->members);
	free(g->pids);
	free(g->waits);
	free(g->pipeline_text);
	free(g);
}

void ses_group_unref(struct ses_group *g)
{
	if (!g || --g->refs > 0)
		return;
	for (struct ses_group **p = &g->d->groups; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	stats_remove(&g->d->stats, &g->stat);
	struct dlv_stats st;
	dlv_stats(g->dlv, &st);
	log_info(&g->d->log, "group '%s' on '%s' closed: %llu batches built once, %llu delivered "
		 "to its members", g->name, g->key.e->cfg->name, (unsigned long long)st.batches,
		 (unsigned long long)st.delivered);
	dlv_close(g->dlv);
	quota_group_give(&g->d->quota, g->uid, g->data_bytes);
	uv_close((uv_handle_t *)&g->timer, ses_group_closed);
}

struct dlv *ses_group_dlv(const struct ses_group *g)
{
	return g->dlv;
}

const char *ses_group_name(const struct ses_group *g)
{
	return g->name;
}

uint32_t ses_group_depth(const struct ses_group *g)
{
	return g->depth;
}

void ses_group_set_job(struct ses_group *g, const char *job)
{
	snprintf(g->job, sizeof(g->job), "%s", job);
}

/* Room for one more listed member; -ENOMEM leaves the lists as they were
 * (each one kept at its old size or grown, cap still the smallest). */
static int ses_group_grow(struct ses_group *g)
{
	uint32_t cap = g->cap ? g->cap * 2 : 4;
	void *v = realloc(g->members, cap * sizeof(*g->members));

	if (v)
		g->members = v;
	void *p = v ? realloc(g->pids, cap * sizeof(*g->pids)) : NULL;
	if (p)
		g->pids = p;
	void *w = p ? realloc(g->waits, cap * sizeof(*g->waits)) : NULL;
	if (w)
		g->waits = w;
	if (!w)
		return -ENOMEM;
	g->cap = cap;
	return 0;
}

uint32_t ses_group_member_open(struct ses_group *g, struct ses_stream *ss)
{
	uint32_t n = g->nmembers + 1;

	/* out of memory, it still receives batches (the first member too:
	 * the group starts all the same); only reports and status miss it */
	if (g->nmembers < g->cap || ses_group_grow(g) == 0)
		g->members[g->nmembers++] = ss;
	if (!g->started) {
		uint64_t every = ses_group_period(g->d);
		g->started = true;
		g->stat = (struct stats_entry){
			.kind = "group", .uid = g->uid, .e = g->key.e, .group = g->name,
			.pipeline = g->pipeline_text, .batch = g->key.batch,
			.shm_bytes = g->data_bytes, .opened_ms = uv_now(&g->d->loop),
			.read = ses_group_read, .job = g->job,
			.slot_bytes = g->depth ? g->data_bytes / g->depth : 0,
			.rank = g->key.rank, .world = g->key.world,
			.batches_per_epoch = dlv_batches_per_epoch(g->dlv),
		};
		stats_add(&g->d->stats, &g->stat);
		dlv_start(g->dlv);
		uv_timer_start(&g->timer, ses_group_tick, every, every);
	}
	return n;
}

void ses_groups_reloaded(struct dstate *d)
{
	uint64_t every = ses_group_period(d);

	/* a shorter timeout must not wait for a tick at the old period (a
	 * quarter of 30 s by default); a longer one must not detach early */
	for (struct ses_group *g = d->groups; g; g = g->next)
		if (g->started && uv_timer_get_repeat(&g->timer) != every)
			uv_timer_start(&g->timer, ses_group_tick, every, every);
}

void ses_group_member_gone(struct ses_group *g, struct ses_stream *ss)
{
	for (uint32_t i = 0; i < g->nmembers; i++)
		if (g->members[i] == ss) {
			g->members[i] = g->members[--g->nmembers];
			return;
		}
}
