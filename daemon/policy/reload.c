/*
 * reload.c: one reload of the config file (see reload.h). The loading and
 * the opening of datasets run as a job of the pool's own on a worker; its
 * done() on the loop thread puts the result in force by swapping two
 * pointers (d->cat, d->cfg), logs what changed (or every error), and tells
 * whoever asked. Never blocks the loop; never touches a stream: streams
 * hold their own references on their datasets (catalog.h).
 */
#include "reload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_seam.h"
#include "dstate.h"
#include "pool.h"

#define RLD_NOTES 9  /* restart-only keys: socket, its group, workers, cache, cache_dir
		      * and its bytes, log level, metrics, gpus */

/* The report's lists: pointers into the reload, errs then plan order. */
struct rld_lists {
	const char *errors[CFG_ERRS_MAX + CAT_RELOAD_LIST + 1];
	const char *warnings[RLD_NOTES + CAT_RELOAD_LIST];
};
_Static_assert(RLD_NOTES + CAT_RELOAD_LIST <= RLD_REPORT_MAX &&
	       CFG_ERRS_MAX + CAT_RELOAD_LIST + 1 <= RLD_REPORT_MAX,
	       "a report's lines fit what session_reload.c answers with");

struct rld {
	struct pool_job job;       /* the pool's own: runs before any batch */
	struct dstate *d;
	rld_done_fn *done;         /* the requester, or NULL (SIGHUP) */
	void *arg;
	struct cfg *cfg;           /* the new config, ours until put in force; NULL
				    * when it did not load */
	struct feed_err err;       /* why, when errs has nothing (out of memory) */
	struct cfg_errs errs;      /* every error of the file */
	struct cat_reload plan;    /* what it changes in the catalog */
	int rc;                    /* 0, or -ENOMEM from the plan */
	size_t nnotes;             /* restart-only keys the file changed */
	char notes[RLD_NOTES][FEED_ERR_MSG_MAX];
	struct rld_lists lists;    /* the report's */
};

/* A restart-only key the file changed: keep the running value, say so. */
static void rld_note(struct rld *r, const char *key, const char *file_val, const char *run_val)
{
	if (r->nnotes < RLD_NOTES)
		snprintf(r->notes[r->nnotes++], sizeof(r->notes[0]), "%s: %s in the file, still %s "
			 "until a restart", key, file_val, run_val);
}

static void rld_note_num(struct rld *r, const char *key, uint64_t file_val, uint64_t run_val)
{
	char a[24], b[24];

	if (file_val == run_val)
		return;
	snprintf(a, sizeof(a), "%llu", (unsigned long long)file_val);
	snprintf(b, sizeof(b), "%llu", (unsigned long long)run_val);
	rld_note(r, key, a, b);
}

/* metrics: the exposition listens where start-up put it (main()); a
 * changed address is said, and the running one kept. -ENOMEM. */
static int rld_keep_metrics(struct rld *r, struct cfg *c, const struct cfg *old)
{
	const char *was = old->metrics ? old->metrics : "off";

	if (strcmp(c->metrics ? c->metrics : "off", was))
		rld_note(r, "metrics", c->metrics ? c->metrics : "off", was);
	free(c->metrics);
	c->metrics = NULL;
	if (old->metrics && !(c->metrics = strdup(old->metrics)))
		return -ENOMEM;
	return 0;
}

/* Gives the new config the running values of what only a restart changes
 * (the socket is bound, the workers and the cache are made, the log level
 * is read without a lock by every thread). c is still ours alone. */
static int rld_keep_running(struct rld *r, struct cfg *c, const struct cfg *old)
{
	char a[24], b[24];

	if (strcmp(c->socket_path, old->socket_path)) {
		rld_note(r, "socket", c->socket_path, old->socket_path);
		free(c->socket_path);
		if (!(c->socket_path = strdup(old->socket_path)))
			return -ENOMEM;
	}
	if (c->has_socket_group != old->has_socket_group || c->socket_gid != old->socket_gid) {
		snprintf(a, sizeof(a), c->has_socket_group ? "%u" : "none", (unsigned)c->socket_gid);
		snprintf(b, sizeof(b), old->has_socket_group ? "%u" : "none",
			 (unsigned)old->socket_gid);
		rld_note(r, "socket_group", a, b);
		c->has_socket_group = old->has_socket_group;
		c->socket_gid = old->socket_gid;
	}
	rld_note_num(r, "workers", c->workers, old->workers);
	rld_note_num(r, "cache_bytes", c->cache_bytes, old->cache_bytes);
	rld_note_num(r, "cache_dir_bytes", c->cache_dir_bytes, old->cache_dir_bytes);
	if (strcmp(c->cache_dir ? c->cache_dir : "none", old->cache_dir ? old->cache_dir : "none"))
		rld_note(r, "cache_dir", c->cache_dir ? c->cache_dir : "none",
			 old->cache_dir ? old->cache_dir : "none");
	if (c->has_gpus != old->has_gpus || c->gpus != old->gpus) {
		snprintf(a, sizeof(a), c->has_gpus ? "0x%llx" : "all", (unsigned long long)c->gpus);
		snprintf(b, sizeof(b), old->has_gpus ? "0x%llx" : "all",
			 (unsigned long long)old->gpus);
		rld_note(r, "gpus", a, b);
		c->has_gpus = old->has_gpus;
		c->gpus = old->gpus;
	}
	if (c->log_level != old->log_level)
		rld_note(r, "log_level", log_level_name(c->log_level), log_level_name(old->log_level));
	c->workers = old->workers;
	c->cache_bytes = old->cache_bytes;
	c->cache_dir_bytes = old->cache_dir_bytes;
	free(c->cache_dir);
	c->cache_dir = NULL;
	if (old->cache_dir && !(c->cache_dir = strdup(old->cache_dir)))
		return -ENOMEM;
	c->log_level = old->log_level;
	return rld_keep_metrics(r, c, old);
}

/* Loads the file and opens what it adds or repoints, into r. */
static void rld_load(struct rld *r, const struct cfg *old)
{
	if (cfg_load_all(old->file, r->d->ov, r->d->env_socket, &r->cfg, &r->err, &r->errs) < 0)
		return;
	if ((r->rc = rld_keep_running(r, r->cfg, old)) == 0) {
		struct cat_remote rem = {.tier = r->d->tier, .counters = &r->d->remote,
					 .fetcher = r->d->fetcher, .opener = r->d->opener,
					 .log = &r->d->log};
		r->rc = cat_reload_plan(r->d->cat, old, r->cfg, r->d->cache, &rem, &r->plan);
	}
	if (r->rc < 0)
		feed_err_set(&r->err, r->rc, "reload: out of memory");
}

/* Worker: rld_load(). The config and catalog in force do not change until
 * rld_done(). */
static void rld_run(struct pool_job *job, struct pool_worker *w)
{
	struct rld *r = (struct rld *)job;

	(void)w;
	fault_mark("reload/run");  /* test builds: fault_seam.h */
	rld_load(r, r->d->cfg);
	fault_mark(NULL);
}

/* "a, b, c" from a list of names. */
static void rld_join(char *buf, size_t cap, const char (*names)[CFG_NAME_MAX], size_t n)
{
	size_t k = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && k < cap; i++) {
		int m = snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", names[i]);
		k += m > 0 ? (size_t)m : 0;
	}
}

static void rld_log_applied(const struct dstate *d, const struct rld_report *rep)
{
	const struct cat_reload *c = rep->cat;
	char added[512], removed[512], repointed[512];

	rld_join(added, sizeof(added), c->added, c->nadded);
	rld_join(removed, sizeof(removed), c->removed, c->nremoved);
	rld_join(repointed, sizeof(repointed), c->repointed, c->nrepointed);
	log_info(&d->log, "reload of %s: in force: %zu datasets served; added: %s; removed: %s; "
		 "repointed: %s", rep->file ? rep->file : "built-in defaults", d->cat->n,
		 c->nadded ? added : "none", c->nremoved ? removed : "none",
		 c->nrepointed ? repointed : "none");
	for (size_t i = 0; i < c->nadded + c->nrepointed; i++) {
		const char *name = i < c->nadded ? c->added[i] : c->repointed[i - c->nadded];
		const struct cat_entry *e = cat_find(d->cat, name);
		if (e)
			log_info(&d->log, "dataset '%s' (%s): %llu samples, %u fields, version %s",
				 e->name, e->path, (unsigned long long)e->info->num_samples,
				 e->info->schema->nfields, e->info->version);
	}
	if (c->nbusy) {
		char busy[512];
		rld_join(busy, sizeof(busy), c->busy, c->nbusy);
		log_info(&d->log, "reload: streams still open on %s finish on the old files; "
			 "new opens get the new configuration", busy);
	}
	for (size_t i = 0; i < rep->nwarnings; i++)
		log_warn(&d->log, "reload: %s", rep->warnings[i]);
}

static void rld_log_refused(const struct dstate *d, const struct rld_report *rep)
{
	log_error(&d->log, "reload of %s refused (%zu errors); the configuration in force stays",
		  rep->file ? rep->file : "built-in defaults", rep->nerrors + rep->more_errors);
	for (size_t i = 0; i < rep->nerrors; i++)
		log_error(&d->log, "reload: %s", rep->errors[i]);
	if (rep->more_errors)
		log_error(&d->log, "reload: and %zu more errors", rep->more_errors);
}

static void rld_report_of(struct rld *r, struct rld_lists *l, struct rld_report *rep)
{
	*rep = (struct rld_report){.file = r->d->cfg->file, .cat = &r->plan,
				   .errors = l->errors, .warnings = l->warnings};
	for (unsigned i = 0; i < r->errs.n; i++)
		l->errors[rep->nerrors++] = r->errs.msg[i];
	rep->more_errors = r->errs.more + r->plan.more_errors;
	for (size_t i = 0; i < r->plan.nerrors; i++)
		l->errors[rep->nerrors++] = r->plan.errors[i];
	if (!rep->nerrors && (!r->cfg || r->rc < 0))
		l->errors[rep->nerrors++] = r->err.msg[0] ? r->err.msg : "reload: out of memory";
	for (size_t i = 0; i < r->nnotes; i++)
		l->warnings[rep->nwarnings++] = r->notes[i];
	for (size_t i = 0; i < r->plan.nwarnings; i++)
		l->warnings[rep->nwarnings++] = r->plan.warnings[i];
}

static int rld_start(struct dstate *d, rld_done_fn *done, void *arg, struct feed_err *err);

/* Puts the new config in force (or not), logs, tells the requester. */
static void rld_done(struct pool_job *job)
{
	struct rld *r = (struct rld *)job;
	struct dstate *d = r->d;
	struct rld_report rep;

	if (d->stopping && r->plan.next)  /* pool_stop() ran the last done()s */
		r->rc = feed_err_set(&r->err, -ESHUTDOWN, "reload: feedd is stopping");
	rld_report_of(r, &r->lists, &rep);
	rep.applied = r->cfg && r->rc == 0 && r->plan.next;
	struct cfg *was = NULL;
	rep.before = d->cfg;
	if (rep.applied) {
		was = d->cfg;
		d->cat = cat_reload_commit(d->cat, &r->plan);
		d->cfg = r->cfg;
		r->cfg = NULL;
		rep.file = d->cfg->file;  /* the same path */
		bld_limits_set(&d->limits, d->cfg->limits.max_pixels);
		if (d->reloaded)
			d->reloaded(d);
		rld_log_applied(d, &rep);
	} else {
		rld_log_refused(d, &rep);
	}
	if (d->reload_notify)
		d->reload_notify(d, true);
	stats_reloaded(&d->stats, rep.applied);  /* feedd_config_last_reload_successful */
	if (r->done)
		r->done(r->arg, &rep);
	cfg_free(was);  /* after the answer, which reads it; entries in it hold it */
	cat_reload_drop(&r->plan);
	cfg_free(r->cfg);
	free(r);
	d->reload = NULL;
	if (d->reload_again && !d->stopping) {
		struct feed_err e2 = {0};
		d->reload_again = false;
		if (rld_start(d, NULL, NULL, &e2) < 0)
			log_error(&d->log, "%s", e2.msg);
	}
}

/* rld_done(), marked for the tests (fault_seam.h). */
static void rld_done_marked(struct pool_job *job)
{
	fault_mark("reload/done");
	rld_done(job);
	fault_mark(NULL);
}

static int rld_start(struct dstate *d, rld_done_fn *done, void *arg, struct feed_err *err)
{
	struct rld *r;

	if (d->stopping)
		return feed_err_set(err, -ESHUTDOWN, "reload: feedd is stopping");
	if (d->reload)
		return feed_err_set(err, -EBUSY, "reload: one is in progress; ask again when it "
				    "ends");
	if (!(r = calloc(1, sizeof(*r))))
		return feed_err_set(err, -ENOMEM, "reload: out of memory");
	r->d = d;
	r->done = done;
	r->arg = arg;
	r->job.run = rld_run;
	r->job.done = rld_done_marked;
	d->reload = r;
	if (d->reload_notify)
		d->reload_notify(d, false);
	log_info(&d->log, "reload of %s: loading", d->cfg->file ? d->cfg->file
							  : "built-in defaults and flags");
	pool_submit(d->pool, &r->job);
	return 0;
}

int rld_request(struct dstate *d, rld_done_fn *done, void *arg, struct feed_err *err)
{
	return rld_start(d, done, arg, err);
}

void rld_signal(struct dstate *d)
{
	struct feed_err err = {0};

	if (d->reload) {  /* the file may have changed after it was read */
		d->reload_again = true;
		return;
	}
	if (rld_start(d, NULL, NULL, &err) < 0)
		log_error(&d->log, "SIGHUP: %s", err.msg);
}
