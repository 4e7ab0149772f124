/*
 * feedctl_top_text.c: `feedctl top`'s table (see feedctl_top_row.h). Each
 * name column is as wide as its longest name with --wide; otherwise the
 * table fits the terminal: the columns that matter least (priority) are
 * left out until the rest fit, names take what width is left, and a name
 * cut short ends in '+'. No line is longer than the terminal then.
 *
 * feedctl's one thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedctl_top_row.h"

enum top_col {
	C_JOB, C_USER, C_DATASET, C_GROUP, C_RANK, C_PID, C_AGE, C_EPOCH, C_DONE, C_ETA,
	C_SAMPLES, C_MBS, C_WAIT, C_GPU, C_CREDITS, C_MEM, C_HIT, C_WORKER, C_N
};

static const struct {
	const char *head;
	unsigned width;                /* fixed columns: their width; names: 0 */
	unsigned prio;                 /* 0: always shown; higher goes first */
	bool left;                     /* left-aligned */
} top_cols[C_N] = {
	[C_JOB] = {"JOB", 0, 0, true},       [C_USER] = {"USER", 0, 4, true},
	[C_DATASET] = {"DATASET", 0, 1, true}, [C_GROUP] = {"GROUP", 0, 5, true},
	[C_RANK] = {"RANK", 5, 0, false},    [C_PID] = {"PID", 7, 0, false},
	[C_AGE] = {"AGE", 6, 3, false},      [C_EPOCH] = {"EPOCH", 7, 2, false},
	[C_DONE] = {"DONE%", 5, 2, false},   [C_ETA] = {"ETA", 6, 6, false},
	[C_SAMPLES] = {"SAMPLES/S", 9, 1, false}, [C_MBS] = {"MB/S", 7, 8, false},
	[C_WAIT] = {"WAIT%", 5, 1, false},   [C_GPU] = {"GPU%", 4, 2, false},
	[C_CREDITS] = {"CREDITS", 7, 5, false}, [C_MEM] = {"MEM", 6, 3, false},
	[C_HIT] = {"HIT%", 5, 9, false},     [C_WORKER] = {"WORKER%", 7, 7, false},
};

#define TOP_NAME_MIN 6      /* a name column narrower than this says too little */
#define TOP_CELL_MAX 512    /* job names are 128 bytes at most, others 64 */

/* The layout: which columns show, and how wide. */
struct top_layout {
	bool show[C_N];
	unsigned width[C_N];
};

static const char *top_name(const struct top_row *r, enum top_col c)
{
	const struct feed_stream_status *s = r->s;

	switch (c) {
	case C_JOB: return s->job[0] ? s->job : "-";
	case C_USER: return r->user;
	case C_DATASET: return s->dataset;
	case C_GROUP: return s->group[0] ? s->group : "-";
	default: return "";
	}
}

static void top_human_bytes(uint64_t b, char *buf, size_t cap)
{
	static const char units[] = "BKMGTP";
	double v = (double)b;
	int u = 0;

	while (v >= 1000.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f%c" : "%.0f%c", v, units[u]);
}

static void top_duration(double s, char *buf, size_t cap)
{
	unsigned long t = (unsigned long)(s + 0.5);

	if (s < 0)
		snprintf(buf, cap, "-");
	else if (t < 60)
		snprintf(buf, cap, "%lus", t);
	else if (t < 3600)
		snprintf(buf, cap, "%lum%02lu", t / 60, t % 60);
	else if (t < 360000)
		snprintf(buf, cap, "%luh%02lu", t / 3600, t / 60 % 60);
	else
		snprintf(buf, cap, "%lud", t / 86400);
}

/* The text of row r's column c. */
static void top_cell(const struct top_view *v, const struct top_row *r, enum top_col c,
		     char *buf, size_t cap)
{
	const struct feed_stream_status *s = r->s;

	switch (c) {
	case C_JOB: case C_USER: case C_DATASET: case C_GROUP:
		snprintf(buf, cap, "%s", top_name(r, c));
		break;
	case C_RANK: snprintf(buf, cap, "%u/%u", s->rank, s->world ? s->world : 1); break;
	case C_PID:
		if (s->nmember_pids || !s->pid)
			snprintf(buf, cap, "-");  /* a group: its members' below */
		else
			snprintf(buf, cap, "%d", s->pid);
		break;
	case C_AGE: top_duration((double)s->age_ms / 1e3, buf, cap); break;
	case C_EPOCH:
		if (!r->has_epoch)
			snprintf(buf, cap, "-");
		else if (s->epochs)
			snprintf(buf, cap, "%llu/%llu", (unsigned long long)r->epoch + 1,
				 (unsigned long long)s->epochs);
		else
			snprintf(buf, cap, "%llu", (unsigned long long)r->epoch + 1);
		break;
	case C_DONE:
		if (r->has_epoch)
			snprintf(buf, cap, "%.0f", 100.0 * r->progress);
		else
			snprintf(buf, cap, "-");
		break;
	case C_ETA: top_duration(r->eta_s, buf, cap); break;
	case C_SAMPLES: snprintf(buf, cap, "%.1f", s->samples_per_s_10s); break;
	case C_MBS: snprintf(buf, cap, "%.2f", s->mb_per_s_10s); break;
	case C_WAIT: snprintf(buf, cap, "%.1f", 100.0 * s->reader_wait_share_10s); break;
	case C_GPU:
		if (r->gpu_pct < 0)
			snprintf(buf, cap, "-");
		else
			snprintf(buf, cap, "%d", r->gpu_pct);
		break;
	case C_CREDITS: snprintf(buf, cap, "%u/%u", s->credits_in_use, s->credits); break;
	case C_MEM: top_human_bytes(r->mem_bytes, buf, cap); break;
	case C_HIT:
		if (v->hit_pct < 0)
			snprintf(buf, cap, "-");
		else
			snprintf(buf, cap, "%.1f", v->hit_pct);
		break;
	case C_WORKER: snprintf(buf, cap, "%.1f", 100.0 * r->worker_share); break;
	case C_N: buf[0] = '\0'; break;
	}
}

/* Every cell's natural width (names: their longest, at least the head). */
static void top_natural(const struct top_view *v, unsigned *w)
{
	char cell[TOP_CELL_MAX];

	for (int c = 0; c < C_N; c++) {
		w[c] = (unsigned)strlen(top_cols[c].head);
		if (top_cols[c].width > w[c])
			w[c] = top_cols[c].width;
		for (size_t i = 0; i < v->st->count; i++) {
			top_cell(v, &v->rows[i], (enum top_col)c, cell, sizeof(cell));
			if (strlen(cell) > w[c])
				w[c] = (unsigned)strlen(cell);
		}
	}
}

static unsigned top_used(const struct top_layout *l)
{
	unsigned n = 0, used = 0;

	for (int c = 0; c < C_N; c++)
		if (l->show[c]) {
			used += l->width[c];
			n++;
		}
	return used + (n ? n - 1 : 0);
}

static bool top_is_name(int c)
{
	return top_cols[c].width == 0;
}

/* Fits the columns to cols: names start narrow, columns of the lowest
 * priority go until the rest fit, then names widen toward their longest. */
static void top_fit(const unsigned *natural, unsigned cols, struct top_layout *l)
{
	unsigned most = 0;

	for (int c = 0; c < C_N; c++) {
		l->show[c] = true;
		l->width[c] = natural[c];
		if (top_is_name(c) && natural[c] > TOP_NAME_MIN) {
			unsigned head = (unsigned)strlen(top_cols[c].head);
			l->width[c] = head > TOP_NAME_MIN ? head : TOP_NAME_MIN;
		}
		if (top_cols[c].prio > most)
			most = top_cols[c].prio;
	}
	for (unsigned p = most; p > 0 && top_used(l) > cols; p--)
		for (int c = C_N - 1; c >= 0 && top_used(l) > cols; c--)
			if (top_cols[c].prio == p)
				l->show[c] = false;
	for (bool grew = true; grew && top_used(l) < cols;) {
		grew = false;
		for (int c = 0; c < C_N && top_used(l) < cols; c++)
			if (l->show[c] && top_is_name(c) && l->width[c] < natural[c]) {
				l->width[c]++;
				grew = true;
			}
	}
}

/* s into a line at most cols wide (0: no limit). */
static void top_line(const char *s, unsigned cols)
{
	if (cols && strlen(s) > cols)
		printf("%.*s\n", (int)cols, s);
	else
		printf("%s\n", s);
}

/* One row (or the head when r is NULL) of the layout into line. */
static void top_format(const struct top_view *v, const struct top_row *r,
		       const struct top_layout *l, char *line, size_t cap)
{
	char cell[TOP_CELL_MAX];
	size_t at = 0;

	line[0] = '\0';
	for (int c = 0; c < C_N && at < cap; c++) {
		if (!l->show[c])
			continue;
		if (r)
			top_cell(v, r, (enum top_col)c, cell, sizeof(cell));
		else
			snprintf(cell, sizeof(cell), "%s", top_cols[c].head);
		size_t n = strlen(cell);
		if (n > l->width[c] && l->width[c] > 0) {  /* cut: say so */
			cell[l->width[c] - 1] = '+';
			cell[l->width[c]] = '\0';
		}
		int w = (int)l->width[c];
		at += (size_t)snprintf(line + at, cap - at, top_cols[c].left ? "%s%-*s" : "%s%*s",
				       at ? " " : "", w, cell);
	}
	while (at > 0 && at < cap && line[at - 1] == ' ')  /* no trailing blanks */
		line[--at] = '\0';
}

/* A group's members, one line each under its row. */
static void top_members(const struct feed_stream_status *s, unsigned cols)
{
	char line[256];

	for (uint32_t i = 0; i < s->nmember_pids; i++) {
		double w = s->age_ms ? (double)s->member_reader_wait_ns[i] / ((double)s->age_ms * 1e6)
				     : 0.0;
		snprintf(line, sizeof(line), "  member pid %d: waited %.1f%% since it joined",
			 s->member_pids[i], 100.0 * (w > 1.0 ? 1.0 : w));
		top_line(line, cols);
	}
	if (s->nmember_pids && s->members > s->nmember_pids)
		printf("  and %u more members\n", s->members - s->nmember_pids);
}

void top_text(const struct top_view *v, bool wide, unsigned cols)
{
	unsigned natural[C_N];
	struct top_layout l;
	char hits[16], mem[16], *line;
	size_t cap = C_N * (TOP_CELL_MAX + 1) + 1;

	if (!(line = malloc(cap)))
		return;
	top_natural(v, natural);
	if (wide) {
		for (int c = 0; c < C_N; c++) {
			l.show[c] = true;
			l.width[c] = natural[c];
		}
	} else {
		top_fit(natural, cols, &l);
	}
	if (v->hit_pct < 0)
		snprintf(hits, sizeof(hits), "-");
	else
		snprintf(hits, sizeof(hits), "%.1f%%", v->hit_pct);
	snprintf(line, cap, "feedd %s: %zu streams and groups, %u workers, cache hit %s; GPU: %s",
		 v->st->stats.server_version, v->st->count, v->st->stats.workers, hits,
		 v->nvml_why ? v->nvml_why : "NVML");
	top_line(line, wide ? 0 : cols);
	top_format(v, NULL, &l, line, cap);
	top_line(line, wide ? 0 : cols);
	for (size_t i = 0; i < v->st->count; i++) {
		top_format(v, &v->rows[i], &l, line, cap);
		top_line(line, wide ? 0 : cols);
		top_members(v->rows[i].s, wide ? 0 : cols);
	}
	top_human_bytes(v->mem_bytes, mem, sizeof(mem));
	snprintf(line, cap, "TOTAL %zu streams and groups, %llu readers: %.1f samples/s, "
		 "%.2f MB/s, credits %llu/%llu, memory %s", v->st->count,
		 (unsigned long long)v->readers, v->samples_per_s, v->mb_per_s,
		 (unsigned long long)v->credits_in_use, (unsigned long long)v->credits, mem);
	top_line(line, wide ? 0 : cols);
	free(line);
}
