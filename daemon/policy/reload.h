/*
 * reload.h: loading the config file again without a restart (SIGHUP,
 * `systemctl reload`, `feedctl reload`).
 *
 * Owns: the one reload in progress. The file is read and checked, and
 * every dataset it adds or repoints is opened, on a worker (a pool job of
 * the pool's own, run before any batch); the loop thread then only swaps
 * pointers (cat_reload_commit(), d->cfg) and logs. What a reload changes:
 * datasets (added, removed, repointed to a new directory), access lists,
 * limits (for what is opened from then on), pipelines, group_timeout_ms,
 * admin_group (the next reload request), shared_groups (groups opened
 * from then on).
 * What needs a restart (socket, socket_group, workers, cache_bytes,
 * cache_dir, cache_dir_bytes, log_level, metrics) keeps its running
 * value, with a warning when the file changed it. A file that does not load, or a new or repointed dataset
 * that does not open, refuses the whole reload with every error logged;
 * the config in force stays.
 *
 * Loop thread only, except the job's run() on a worker, which reads the
 * config and catalog in force (neither changes until its done()).
 */
#ifndef FEEDD_RELOAD_H
#define FEEDD_RELOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "catalog.h"
#include "config.h"
#include "feed_err.h"

struct dstate;

/* The most errors and warnings a report lists (errors: the config's,
 * the catalog's and one more; warnings: the restart-only notes and the
 * catalog's). */
#define RLD_REPORT_MAX (CFG_ERRS_MAX + CAT_RELOAD_LIST + 16)

/* What one reload did, for whoever asked (valid during the callback). */
struct rld_report {
	bool applied;                 /* false: refused, the old config in force */
	const char *file;             /* the file read, or NULL (built-in defaults) */
	const struct cat_reload *cat; /* datasets added, removed, repointed */
	const struct cfg *before;     /* the config replaced (applied), else the one in
				       * force: who could read what was removed */
	size_t nerrors, nwarnings;
	const char *const *errors;    /* every reason it was refused */
	const char *const *warnings;  /* datasets left out, restart-only keys, ... */
	size_t more_errors;           /* errors past those listed */
};

/* Called on the loop thread when the reload asked for ends. */
typedef void rld_done_fn(void *arg, const struct rld_report *rep);

/* Starts a reload; done(arg, ...) is called exactly once when it ends,
 * also when the daemon stops meanwhile (then refused). -EBUSY when one
 * is in progress, -ESHUTDOWN when stopping, -ENOMEM; err says so. */
int rld_request(struct dstate *d, rld_done_fn *done, void *arg, struct feed_err *err);

/* SIGHUP: starts a reload, or one more after the one in progress. */
void rld_signal(struct dstate *d);

#endif
