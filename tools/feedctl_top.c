/*
 * feedctl_top.c: `feedctl top`, a live view of feedd refreshed every
 * second: one row per stream (so per rank of a job) or group (with a line
 * per member) with its job, user, dataset, rank and pid, age, epoch
 * progress and the time to the epoch's end, rates over the daemon's last
 * 10 s, its client's wait and beside it the utilisation of the client's
 * GPU (NVML, feedctl_nvml.h), credits in use, memory, the cache's hit rate
 * and its share of the workers; then a totals line. This file computes the
 * rows, orders them (--sort) and writes --json; feedctl_top_text.c lays
 * out the table.
 *
 * feedctl's one thread; asks the daemon through libfeedclient only.
 */
#include "feedctl_top.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/ioctl.h>

#include "feedctl_nvml.h"
#include "feedctl_top_row.h"
#include "json_out.h"

/* What the last refresh saw, for the shares since then. */
struct top_prev {
	struct feed_status *st;        /* NULL before the first */
};

const char *const top_sort_names[TOP_SORT_N] = {
	"job", "user", "dataset", "rank", "pid", "age", "samples", "wait", "gpu", "mem", "worker",
};

int top_sort_parse(const char *name, enum top_sort *ret)
{
	for (int i = 0; i < TOP_SORT_N; i++)
		if (!strcmp(name, top_sort_names[i])) {
			*ret = (enum top_sort)i;
			return 0;
		}
	return -EINVAL;
}

static const struct feed_stream_status *top_find(const struct feed_status *st,
						 const struct feed_stream_status *s)
{
	for (size_t i = 0; st && i < st->count; i++) {
		const struct feed_stream_status *p = &st->streams[i];
		if (p->conn == s->conn && p->stream == s->stream && !strcmp(p->kind, s->kind) &&
		    !strcmp(p->group, s->group) && !strcmp(p->dataset, s->dataset))
			return p;
	}
	return NULL;
}

/* Worker time since the last refresh (since it opened, the first time). */
static uint64_t top_worker_delta(const struct top_prev *prev, const struct feed_stream_status *s)
{
	const struct feed_stream_status *p = top_find(prev->st, s);
	return p && p->worker_ns <= s->worker_ns ? s->worker_ns - p->worker_ns : s->worker_ns;
}

/* The busiest GPU among the stream's clients (a group's members). */
static void top_gpu(const struct nvml *nv, const struct feed_stream_status *s, struct top_row *r)
{
	unsigned pct, idx;

	r->gpu_pct = r->gpu_index = -1;
	if (!nv)
		return;
	if (s->nmember_pids == 0 && nvml_pid_util(nv, s->pid, &pct, &idx) == 0) {
		r->gpu_pct = (int)pct;
		r->gpu_index = (int)idx;
	}
	for (uint32_t i = 0; i < s->nmember_pids; i++)
		if (nvml_pid_util(nv, s->member_pids[i], &pct, &idx) == 0 && (int)pct > r->gpu_pct) {
			r->gpu_pct = (int)pct;
			r->gpu_index = (int)idx;
		}
}

/* The cache's hit share since the last refresh (lifetime the first time);
 * negative when it looked up nothing. */
static double top_hit_pct(const struct top_prev *prev, const struct feed_status *st)
{
	uint64_t h = st->cache.hits, m = st->cache.misses;

	if (prev->st && prev->st->cache.hits <= h && prev->st->cache.misses <= m) {
		h -= prev->st->cache.hits;
		m -= prev->st->cache.misses;
	}
	return h + m ? 100.0 * (double)h / (double)(h + m) : -1.0;
}

/* Where the stream's builds are: the epoch and how far into it, and the
 * time to its end at the last 10 s rate. */
static void top_epoch(const struct feed_stream_status *s, struct top_row *r)
{
	uint64_t bpe = s->batches_per_epoch, pos;
	double batches_per_s;

	r->eta_s = -1.0;
	if (!bpe)
		return;
	pos = s->start_batch + s->batches;
	r->has_epoch = true;
	r->epoch = s->start_epoch + pos / bpe;
	r->progress = (double)(pos % bpe) / (double)bpe;
	if (s->epochs && r->epoch >= s->epochs) {  /* every epoch asked for is built */
		r->epoch = s->epochs - 1;
		r->progress = 1.0;
		r->eta_s = 0.0;
		return;
	}
	batches_per_s = s->batch ? s->samples_per_s_10s / s->batch : 0.0;
	if (batches_per_s > 0)
		r->eta_s = (double)(bpe - pos % bpe) / batches_per_s;
}

static void top_user(uint32_t uid, char *buf, size_t cap)
{
	struct passwd *pw = getpwuid(uid);

	if (pw)
		snprintf(buf, cap, "%s", pw->pw_name);
	else
		snprintf(buf, cap, "%u", uid);
}

static void top_rows(const struct top_prev *prev, const struct feed_status *st,
		     const struct nvml *nv, struct top_view *v)
{
	uint64_t total = 0;

	for (size_t i = 0; i < st->count; i++)
		total += top_worker_delta(prev, &st->streams[i]);
	for (size_t i = 0; i < st->count; i++) {
		const struct feed_stream_status *s = &st->streams[i];
		struct top_row *r = &v->rows[i];
		r->s = s;
		r->worker_share = total ? (double)top_worker_delta(prev, s) / (double)total : 0.0;
		r->mem_bytes = s->shm_bytes + s->device_bytes;
		top_user(s->uid, r->user, sizeof(r->user));
		top_gpu(nv, s, r);
		top_epoch(s, r);
		v->samples_per_s += s->samples_per_s_10s;
		v->mb_per_s += s->mb_per_s_10s;
		v->mem_bytes += r->mem_bytes;
		v->credits += s->credits;
		v->credits_in_use += s->credits_in_use;
		v->readers += s->members ? s->members : 1;
	}
}

/* ---- order ---- */

static int top_cmp_num(double a, double b)
{
	return a < b ? 1 : a > b ? -1 : 0;  /* the largest first */
}

/* <0, 0, >0: a before, with, after b in key's order. */
static int top_cmp(const struct top_row *a, const struct top_row *b, enum top_sort key)
{
	const struct feed_stream_status *x = a->s, *y = b->s;
	int c = 0;

	switch (key) {
	case TOP_SORT_USER: c = strcmp(a->user, b->user); break;
	case TOP_SORT_DATASET: c = strcmp(x->dataset, y->dataset); break;
	case TOP_SORT_RANK: c = (x->rank > y->rank) - (x->rank < y->rank); break;
	case TOP_SORT_PID: c = (x->pid > y->pid) - (x->pid < y->pid); break;
	case TOP_SORT_AGE: c = top_cmp_num((double)x->age_ms, (double)y->age_ms); break;
	case TOP_SORT_SAMPLES: c = top_cmp_num(x->samples_per_s_10s, y->samples_per_s_10s); break;
	case TOP_SORT_WAIT: c = top_cmp_num(x->reader_wait_share_10s, y->reader_wait_share_10s); break;
	case TOP_SORT_GPU: c = top_cmp_num(a->gpu_pct, b->gpu_pct); break;
	case TOP_SORT_MEM: c = top_cmp_num((double)a->mem_bytes, (double)b->mem_bytes); break;
	case TOP_SORT_WORKER: c = top_cmp_num(a->worker_share, b->worker_share); break;
	case TOP_SORT_JOB: case TOP_SORT_N: break;
	}
	/* then job, dataset, rank: the ranks of a job line up */
	if (!c)
		c = strcmp(x->job, y->job);
	if (!c)
		c = strcmp(x->dataset, y->dataset);
	if (!c)
		c = (x->rank > y->rank) - (x->rank < y->rank);
	if (!c)
		c = (x->conn > y->conn) - (x->conn < y->conn);
	return c ? c : (x->stream > y->stream) - (x->stream < y->stream);
}

/* Insertion sort: a view has tens of rows, and the key rides along. */
static void top_sort_rows(struct top_row *rows, size_t n, enum top_sort key)
{
	for (size_t i = 1; i < n; i++) {
		struct top_row r = rows[i];
		size_t j = i;
		for (; j > 0 && top_cmp(&rows[j - 1], &r, key) > 0; j--)
			rows[j] = rows[j - 1];
		rows[j] = r;
	}
}

/* ---- JSON ---- */

/* "key": v, with v escaped (json_out.h). */
static void top_json_str(const char *key, const char *v)
{
	jout_member(stdout, key, v, ", ");
}

static void top_json_members(const struct feed_stream_status *s)
{
	printf("\"pids\": [");
	for (uint32_t i = 0; i < s->nmember_pids; i++)
		printf("%s%d", i ? ", " : "", s->member_pids[i]);
	printf("], \"members\": [");
	for (uint32_t i = 0; i < s->nmember_pids; i++) {
		double w = s->age_ms ? (double)s->member_reader_wait_ns[i] / ((double)s->age_ms * 1e6)
				     : 0.0;
		printf("%s{\"pid\": %d, \"wait_pct\": %.3f}", i ? ", " : "", s->member_pids[i],
		       100.0 * (w > 1.0 ? 1.0 : w));
	}
	printf("], ");
}

static void top_json_row(const struct top_row *r, double hit)
{
	const struct feed_stream_status *s = r->s;

	printf("{");
	top_json_str("kind", s->kind);
	top_json_str("job", s->job);
	printf("\"uid\": %u, ", s->uid);
	top_json_str("user", r->user);
	top_json_str("dataset", s->dataset);
	top_json_str("group", s->group);
	printf("\"rank\": %u, \"world\": %u, \"pid\": %d, ", s->rank, s->world, s->pid);
	top_json_members(s);
	printf("\"age_ms\": %llu, ", (unsigned long long)s->age_ms);
	if (r->has_epoch)
		printf("\"epoch\": %llu, \"epoch_progress\": %.4f, ", (unsigned long long)r->epoch,
		       r->progress);
	else
		printf("\"epoch\": null, \"epoch_progress\": null, ");
	printf("\"epochs\": %llu, ", (unsigned long long)s->epochs);
	if (r->eta_s >= 0)
		printf("\"eta_s\": %.1f, ", r->eta_s);
	else
		printf("\"eta_s\": null, ");
	printf("\"samples_per_s\": %.3f, \"mb_per_s\": %.6f, \"client_wait_pct\": %.3f, ",
	       s->samples_per_s_10s, s->mb_per_s_10s, 100.0 * s->reader_wait_share_10s);
	printf("\"credits_in_use\": %u, \"credits\": %u, \"mem_bytes\": %llu, ",
	       s->credits_in_use, s->credits, (unsigned long long)r->mem_bytes);
	if (hit < 0)
		printf("\"cache_hit_pct\": null, ");
	else
		printf("\"cache_hit_pct\": %.3f, ", hit);
	printf("\"worker_share\": %.6f, ", r->worker_share);
	if (r->gpu_pct < 0)
		printf("\"gpu_util_pct\": null, \"gpu_index\": null}");
	else
		printf("\"gpu_util_pct\": %d, \"gpu_index\": %d}", r->gpu_pct, r->gpu_index);
}

/* One line of JSON per refresh. */
static void top_json(const struct top_view *v, long iteration)
{
	printf("{\"iteration\": %ld, ", iteration);
	top_json_str("server_version", v->st->stats.server_version);
	if (v->nvml_why) {
		printf("\"nvml\": false, ");
		top_json_str("nvml_reason", v->nvml_why);
	} else {
		printf("\"nvml\": true, ");
	}
	printf("\"streams\": [");
	for (size_t i = 0; i < v->st->count; i++) {
		printf("%s", i ? ", " : "");
		top_json_row(&v->rows[i], v->hit_pct);
	}
	printf("], \"totals\": {\"streams\": %zu, \"readers\": %llu, \"samples_per_s\": %.3f, "
	       "\"mb_per_s\": %.6f, \"credits_in_use\": %llu, \"credits\": %llu, "
	       "\"mem_bytes\": %llu}}\n", v->st->count, (unsigned long long)v->readers,
	       v->samples_per_s, v->mb_per_s, (unsigned long long)v->credits_in_use,
	       (unsigned long long)v->credits, (unsigned long long)v->mem_bytes);
}

/* ---- the loop ---- */

/* The terminal's width: stdout's window, else $COLUMNS, else 80. */
static unsigned top_columns(void)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (env && atoi(env) > 0)
		return (unsigned)atoi(env);
	return 80;
}

/* One refresh: ask, compute, print. Keeps what it asked in prev. */
static int top_once(struct feed_conn *conn, const struct top_opts *o, struct top_prev *prev,
		    struct nvml *nv, const char *nvml_why, long iteration)
{
	struct feed_status *st;
	struct top_view v = {.nvml_why = nvml_why};
	int r = feed_status(conn, &st);

	if (r < 0)
		return r;
	if (!(v.rows = calloc(st->count + 1, sizeof(*v.rows)))) {
		feed_status_free(st);
		return -ENOMEM;
	}
	if (nv)
		nvml_refresh(nv);
	v.st = st;
	top_rows(prev, st, nv, &v);
	v.hit_pct = top_hit_pct(prev, st);
	top_sort_rows(v.rows, st->count, o->sort);
	if (o->json) {
		top_json(&v, iteration);
	} else {
		if (o->clear)
			printf("\033[H\033[J");
		top_text(&v, o->wide, top_columns());
	}
	fflush(stdout);
	free(v.rows);
	feed_status_free(prev->st);
	prev->st = st;
	return 0;
}

int feedctl_top(struct feed_conn *conn, const struct top_opts *o)
{
	struct top_prev prev = {0};
	struct nvml *nv = NULL;
	char why[512];
	int r = 0;

	if (nvml_open(&nv, why, sizeof(why)) < 0)
		nv = NULL;
	for (long i = 0; o->iterations == 0 || i < o->iterations; i++) {
		if (i) {
			struct timespec t = {.tv_sec = TOP_REFRESH_MS / 1000,
					     .tv_nsec = TOP_REFRESH_MS % 1000 * 1000000L};
			nanosleep(&t, NULL);  /* the refresh period, not a wait for a condition */
		}
		if ((r = top_once(conn, o, &prev, nv, nv ? NULL : why, i)) < 0)
			break;
	}
	feed_status_free(prev.st);
	nvml_close(nv);
	return r;
}
