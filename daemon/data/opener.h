/*
 * opener.h: the thread that opens remote datasets (catalog.c), so that
 * neither start-up (main()) nor a reload (a worker) waits on a remote host:
 * the catalog serves such a dataset as "pending" and hands its open (the
 * manifest, each shard's header, trailer and index: requests the fetcher
 * makes, data/fetcher.h) to this thread, which publishes the result on
 * the entry when it is done.
 *
 * Owns the thread and its queue (one mutex, held for list work only).
 * Jobs run one at a time, in the order queued; each open is bounded by
 * the dataset's remote_timeout_ms and retries.
 */
#ifndef FEEDD_OPENER_H
#define FEEDD_OPENER_H

#include <stdbool.h>

#include "feed_err.h"

struct opener;

/* A unit of work, the opener's from opener_submit() until run() returns;
 * run() frees it. cancelled: the opener is being freed, so the job only
 * lets go of what it holds. */
struct opener_job {
	struct opener_job *next;     /* private */
	void (*run)(struct opener_job *job, bool cancelled);
};

/* Starts the thread (signals blocked in it). -errno naming what failed. */
int opener_new(struct opener **ret, struct feed_err *err);

/* Queues job. Any thread; never blocks beyond the queue's lock. */
void opener_submit(struct opener *o, struct opener_job *job);

/* Lets the job running finish, runs every queued one cancelled, joins
 * the thread and frees. main(), after the loop ends. Accepts NULL. */
void opener_free(struct opener *o);

#endif
