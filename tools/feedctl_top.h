/*
 * feedctl_top.h: `feedctl top` (feedctl_top.c: rows, order, JSON;
 * feedctl_top_text.c: the table). feedctl's one thread.
 */
#ifndef FEEDCTL_TOP_H
#define FEEDCTL_TOP_H

#include <stdbool.h>

#include "feed/client.h"

#define TOP_REFRESH_MS 1000   /* between two views */

/* What --sort orders rows by. */
enum top_sort {
	TOP_SORT_JOB,             /* job, dataset, rank (the default) */
	TOP_SORT_USER, TOP_SORT_DATASET, TOP_SORT_RANK, TOP_SORT_PID, TOP_SORT_AGE,
	TOP_SORT_SAMPLES, TOP_SORT_WAIT, TOP_SORT_GPU, TOP_SORT_MEM, TOP_SORT_WORKER,
	TOP_SORT_N
};

struct top_opts {
	bool json;                /* one JSON object per line and view */
	bool clear;               /* clear the terminal before each view */
	bool wide;                /* never cut a name: columns as wide as their longest */
	enum top_sort sort;
	long iterations;          /* views before returning; 0: until killed */
};

/* The --sort key called name into *ret: 0, or -EINVAL (top_sort_names
 * lists the keys). */
int top_sort_parse(const char *name, enum top_sort *ret);
extern const char *const top_sort_names[TOP_SORT_N];

/* Shows the view o asks for on stdout, every TOP_REFRESH_MS. Blocks for
 * the whole run. 0, or the error of the status call that failed (the
 * daemon's message on conn). */
int feedctl_top(struct feed_conn *conn, const struct top_opts *o);

#endif
