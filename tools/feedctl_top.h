/*
 * feedctl_top.h: `feedctl top` (feedctl_top.c). feedctl's one thread.
 */
#ifndef FEEDCTL_TOP_H
#define FEEDCTL_TOP_H

#include <stdbool.h>

#include "feed/client.h"

#define TOP_REFRESH_MS 1000   /* between two views */

struct top_opts {
	bool json;                /* one JSON object per line and view */
	bool clear;               /* clear the terminal before each view */
	long iterations;          /* views before returning; 0: until killed */
};

/* Shows the view o asks for on stdout, every TOP_REFRESH_MS. Blocks for
 * the whole run. 0, or the error of the status call that failed (the
 * daemon's message on conn). */
int feedctl_top(struct feed_conn *conn, const struct top_opts *o);

#endif
