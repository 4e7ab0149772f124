/*
 * feedctl_top.c: `feedctl top`, a live view of feedd refreshed every
 * second: one line per stream or group with its job, user, dataset, rates
 * over the daemon's last 10 s, its client's wait, credits in use, the
 * cache's hit rate and its share of the workers, and beside the wait the
 * utilisation of the client's GPU (NVML, feedctl_nvml.h): the data wait
 * and the GPU-Util it explains on one screen.
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

#include "feedctl_nvml.h"

/* What one refresh shows of one stream or group. */
struct top_row {
	const struct feed_stream_status *s;
	double worker_share;           /* of the workers' time since the last refresh */
	int gpu_pct;                   /* its client's GPU busy, or -1: unknown */
	int gpu_index;                 /* that GPU's NVML index, or -1 */
};

/* What the last refresh saw, for the shares since then. */
struct top_prev {
	struct feed_status *st;        /* NULL before the first */
};

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

static void top_rows(const struct top_prev *prev, const struct feed_status *st,
		     const struct nvml *nv, struct top_row *rows)
{
	uint64_t total = 0;

	for (size_t i = 0; i < st->count; i++)
		total += top_worker_delta(prev, &st->streams[i]);
	for (size_t i = 0; i < st->count; i++) {
		rows[i].s = &st->streams[i];
		rows[i].worker_share = total ? (double)top_worker_delta(prev, &st->streams[i]) /
						       (double)total : 0.0;
		top_gpu(nv, &st->streams[i], &rows[i]);
	}
}

static const char *top_user(uint32_t uid, char *buf, size_t cap)
{
	struct passwd *pw = getpwuid(uid);

	if (pw)
		snprintf(buf, cap, "%s", pw->pw_name);
	else
		snprintf(buf, cap, "%u", uid);
	return buf;
}

static void top_text(const struct feed_status *st, const struct top_row *rows, double hit,
		     const char *nvml_why)
{
	char user[64], gpu[16], hits[16], credits[24];

	if (hit < 0)
		snprintf(hits, sizeof(hits), "-");
	else
		snprintf(hits, sizeof(hits), "%.1f", hit);
	printf("feedd %s: %zu streams and groups, %u workers, cache hit %s%%; GPU: %s\n",
	       st->stats.server_version, st->count, st->stats.workers, hits,
	       nvml_why ? nvml_why : "NVML");
	printf("%-16s %-10s %-14s %-10s %10s %8s %6s %5s %8s %5s %7s\n", "JOB", "USER", "DATASET",
	       "GROUP", "SAMPLES/S", "MB/S", "WAIT%", "GPU%", "CREDITS", "HIT%", "WORKER%");
	for (size_t i = 0; i < st->count; i++) {
		const struct top_row *r = &rows[i];
		const struct feed_stream_status *s = r->s;
		if (r->gpu_pct < 0)
			snprintf(gpu, sizeof(gpu), "-");
		else
			snprintf(gpu, sizeof(gpu), "%d", r->gpu_pct);
		snprintf(credits, sizeof(credits), "%u/%u", s->credits_in_use, s->credits);
		printf("%-16.16s %-10.10s %-14.14s %-10.10s %10.1f %8.2f %6.1f %5s %8s %5s %7.1f\n",
		       s->job[0] ? s->job : "-", top_user(s->uid, user, sizeof(user)), s->dataset,
		       s->group[0] ? s->group : "-", s->samples_per_s_10s, s->mb_per_s_10s,
		       100.0 * s->reader_wait_share_10s, gpu, credits, hits,
		       100.0 * r->worker_share);
	}
}

/* A JSON string: the daemon's text is printable ASCII. */
static void top_json_str(const char *key, const char *v)
{
	printf("\"%s\": \"", key);
	for (; *v; v++)
		printf(*v == '"' || *v == '\\' ? "\\%c" : "%c", *v);
	printf("\", ");
}

static void top_json_row(const struct top_row *r, double hit)
{
	const struct feed_stream_status *s = r->s;
	char user[64];

	printf("{");
	top_json_str("kind", s->kind);
	top_json_str("job", s->job);
	printf("\"uid\": %u, ", s->uid);
	top_json_str("user", top_user(s->uid, user, sizeof(user)));
	top_json_str("dataset", s->dataset);
	top_json_str("group", s->group);
	printf("\"pid\": %d, \"pids\": [", s->pid);
	for (uint32_t i = 0; i < s->nmember_pids; i++)
		printf("%s%d", i ? ", " : "", s->member_pids[i]);
	printf("], \"samples_per_s\": %.3f, \"mb_per_s\": %.6f, \"client_wait_pct\": %.3f, ",
	       s->samples_per_s_10s, s->mb_per_s_10s, 100.0 * s->reader_wait_share_10s);
	printf("\"credits_in_use\": %u, \"credits\": %u, ", s->credits_in_use, s->credits);
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
static void top_json(const struct feed_status *st, const struct top_row *rows, double hit,
		     const char *nvml_why, long iteration)
{
	printf("{\"iteration\": %ld, \"server_version\": \"%s\", ", iteration,
	       st->stats.server_version);
	if (nvml_why) {
		printf("\"nvml\": false, ");
		top_json_str("nvml_reason", nvml_why);
	} else {
		printf("\"nvml\": true, ");
	}
	printf("\"streams\": [");
	for (size_t i = 0; i < st->count; i++) {
		printf("%s", i ? ", " : "");
		top_json_row(&rows[i], hit);
	}
	printf("]}\n");
}

/* One refresh: ask, compute, print. Keeps what it asked in prev. */
static int top_once(struct feed_conn *conn, const struct top_opts *o, struct top_prev *prev,
		    struct nvml *nv, const char *nvml_why, long iteration)
{
	struct feed_status *st;
	struct top_row *rows;
	int r = feed_status(conn, &st);

	if (r < 0)
		return r;
	if (!(rows = calloc(st->count + 1, sizeof(*rows)))) {
		feed_status_free(st);
		return -ENOMEM;
	}
	if (nv)
		nvml_refresh(nv);
	top_rows(prev, st, nv, rows);
	double hit = top_hit_pct(prev, st);
	if (o->json) {
		top_json(st, rows, hit, nvml_why, iteration);
	} else {
		if (o->clear)
			printf("\033[H\033[J");
		top_text(st, rows, hit, nvml_why);
	}
	fflush(stdout);
	free(rows);
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
