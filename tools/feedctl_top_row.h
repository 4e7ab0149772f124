/*
 * feedctl_top_row.h: what one refresh of `feedctl top` shows of one
 * stream or group, computed by feedctl_top.c and laid out as a table by
 * feedctl_top_text.c (private to the two).
 */
#ifndef FEEDCTL_TOP_ROW_H
#define FEEDCTL_TOP_ROW_H

#include <stdbool.h>
#include <stdint.h>

#include "feed/client.h"

struct top_row {
	const struct feed_stream_status *s;
	char user[64];                 /* its user's name, or the uid */
	double worker_share;           /* of the workers' time since the last refresh */
	int gpu_pct;                   /* its client's GPU busy, or -1: unknown */
	int gpu_index;                 /* that GPU's NVML index, or -1 */
	uint64_t mem_bytes;            /* its shared memory and device slots */
	bool has_epoch;                /* batches_per_epoch known: what follows is */
	uint64_t epoch;                /* the epoch its builds are in, from 0 */
	double progress;               /* of that epoch, 0..1 */
	double eta_s;                  /* to that epoch's end at the 10 s rate; < 0: none */
};

/* The whole view: rows in the order asked, and what they add up to. */
struct top_view {
	const struct feed_status *st;
	struct top_row *rows;
	double hit_pct;                /* the cache's since the last refresh; < 0: none */
	const char *nvml_why;          /* NULL: NVML loaded; else why not */
	double samples_per_s, mb_per_s; /* totals over the rows */
	uint64_t mem_bytes, credits, credits_in_use, readers;
};

/* The table (feedctl_top_text.c): fitted to cols columns, or never
 * cutting a name when wide. */
void top_text(const struct top_view *v, bool wide, unsigned cols);

#endif
