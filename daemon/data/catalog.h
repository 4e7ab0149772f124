/*
 * catalog.h: the datasets feedd serves.
 *
 * Owns: every struct fmt_dataset, opened from the config (a missing or
 * corrupt one is logged with the reason and left out; the rest are
 * served), their prebuilt protobuf descriptions, and the check of the
 * configured pipelines against their schemas (a warning at start, for
 * --check-config too). Never reopens or rescans a directory behind the
 * config's back: a reload (cat_reload_plan()) opens only datasets whose
 * name or directory is new.
 *
 * Lifetimes: an entry is reference-counted. The catalog in force holds one
 * while it serves the entry, each stream on it one (loop thread), each
 * delivery over it one (dropped by whichever thread frees the delivery,
 * often a worker). A reload makes a new catalog that shares the entries it
 * keeps; an entry it drops (removed, or repointed to a new directory) is
 * retired, and its last reference closes the dataset and forgets its
 * blocks in the cache, on the thread that drops it. So a stream on a
 * removed dataset reads the old files until it closes.
 *
 * Threads: cat_open()/cat_reload_plan() block (manifests, shard indexes):
 * main() at start, a worker at a reload. A struct cat is immutable once
 * made. An entry's ds, info, block_first and pb never change; its cfg
 * (name, directory, access list) is read and repointed (cat_reload_commit)
 * on the loop thread only.
 */
#ifndef FEEDD_CATALOG_H
#define FEEDD_CATALOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "feed.pb-c.h"
#include "fmt.h"
#include "log.h"

struct cache;
struct dtier;
struct fetcher;
struct opener;
struct remote_counters;

/* Where remote datasets (data/remote.h) keep their blocks and counts:
 * the daemon's, outliving every catalog. */
struct cat_remote {
	struct dtier *tier;              /* the disk tier, or NULL: none */
	struct remote_counters *counters; /* for the metrics, or NULL */
	struct fetcher *fetcher;         /* makes every request, or NULL: each its own */
	struct opener *opener;           /* opens URLs in the background (the dataset is
					  * pending meanwhile), or NULL: opened at once */
	const struct log *log;           /* says when a pending one is ready or failed */
};

/* Where an entry stands. A directory, or a URL opened at once, is ready
 * from the start; a URL opened in the background is pending until its
 * manifest and indexes arrived, then ready, or failed (why says why). */
enum cat_state {
	CAT_READY = 0,
	CAT_PENDING,
	CAT_FAILED,
};

struct cat_entry {
	_Atomic unsigned refs;           /* see "Lifetimes" above */
	/* enum cat_state: set once from pending (the opener thread, release:
	 * every field below is written before it); read with cat_entry_state()
	 * (acquire). ds, info, block_first and pb are valid once ready only. */
	_Atomic int state;
	char why[FEED_ERR_MSG_MAX];      /* failed: why (written before the state) */
	const struct cfg_dataset *cfg;   /* name, directory, access list; loop thread
					  * only: a reload that keeps the dataset
					  * points it into the new config */
	struct cfg *cfg_owner;           /* a reference on the config cfg lies in */
	struct cache *cache;             /* forgets ds's blocks when the entry goes */
	bool retired;                    /* loop thread: a reload dropped it */
	char name[CFG_NAME_MAX];         /* cfg->name, never changes: any thread */
	char *path;                      /* the directory opened, owned; never changes */
	struct fmt_dataset *ds;          /* open dataset, owned */
	const struct fmt_info *info;     /* fmt_dataset_info(ds) */
	uint64_t *block_first;           /* owned: info->num_blocks + 1 entries, block b
					  * holds samples [block_first[b], block_first[b+1]) */
	Feed__DatasetInfo pb;            /* points into info and the arrays below */
	Feed__Schema pb_schema;
	Feed__Field pb_fields[FMT_MAX_FIELDS];
	Feed__Field *pb_field_ptrs[FMT_MAX_FIELDS];
};

struct cat {
	size_t n;                        /* datasets opened */
	struct cat_entry **e;            /* in config order, a reference each */
	int *left_err;                   /* per configured dataset (config order):
					  * 0 when served, else the negative errno
					  * that left it out (for the metrics) */
};

/* Opens every dataset of c: a directory, or a URL (http://, https://,
 * s3://) read through data/remote.c with the blocks it fetches kept in
 * rem's disk tier and counted in its counters (rem may be NULL: neither). Failures to open one are logged (one warning
 * each, naming dataset and directory) and skip it; only -ENOMEM fails the
 * whole catalog. Then warns of each configured pipeline that plans against
 * none of the datasets opened. Blocking (reads manifests and shard
 * indexes). */
int cat_open(const struct cfg *c, struct cache *cache, const struct cat_remote *rem, const struct log *lg,
	     struct cat **ret, struct feed_err *err);

/* For --check-config: opens every dataset of c as cat_open() would (a
 * remote one is fetched: one that cannot be reached is a warning) and
 * plans every configured pipeline against those that opened, keeping
 * nothing. Writes one line per problem to out: "feedd: FILE: warning:
 * dataset 'x' (DIR): why; left out" for a dataset that does not open
 * (start-up leaves it out too), "feedd: FILE: warning: pipeline 'p' plans
 * against none of ..." for a pipeline that fits none of the datasets that
 * opened, "feedd: FILE: warning: mixture 'm': source 's': field 'f'
 * differs from ..." for a configured mixture whose sources' schemas
 * disagree (every open of it is refused). Returns the number of warnings,
 * or -ENOMEM. Blocking. */
int cat_check(const struct cfg *c, FILE *out);

/* How many of cat's datasets the pipeline text plans against, in *ret_n;
 * when none (and cat has some), why says why not for the first dataset
 * ("dataset 'x': ..."). Returns 0, or -ENOMEM. */
int cat_pipeline_fits(const struct cat *cat, const char *text, size_t *ret_n,
		      struct feed_err *why);

/* The served dataset called name, ready, or NULL. */
const struct cat_entry *cat_find(const struct cat *cat, const char *name);

/* The dataset called name whatever its state (pending, failed), or NULL. */
const struct cat_entry *cat_find_any(const struct cat *cat, const char *name);

/* e's state (acquire: a ready entry's fields are visible after it); with
 * ret_why, a failed one's reason ("" otherwise). Any thread. */
enum cat_state cat_entry_state(const struct cat_entry *e, const char **ret_why);

/* How many of cat's datasets are ready. */
size_t cat_ready_count(const struct cat *cat);

/* Drops the catalog's reference on each entry (the last closes it) and
 * frees the catalog. Accepts NULL. */
void cat_free(struct cat *cat);

/* One more reference on e (any thread). Returns e. */
const struct cat_entry *cat_entry_ref(const struct cat_entry *e);

/* Drops one (any thread); the last closes the dataset, forgets its cached
 * blocks and drops the config it pointed into. Accepts NULL. */
void cat_entry_unref(const struct cat_entry *e);

/* ---- reload ---- */

/* What a reload would change, made on a worker by cat_reload_plan() and
 * put in force on the loop by cat_reload_commit(). Lists hold dataset
 * names; errors and warnings one message each. */
#define CAT_RELOAD_LIST 64          /* errors, warnings */
#define CAT_RELOAD_NAMES (CFG_MAX_DATASETS + CFG_MAX_FLAG_DATASETS) /* every dataset */
struct cat_reload {
	struct cat *next;                /* the catalog to serve, entries shared
					  * with the one in force where kept */
	const struct cfg *cfg;           /* the config next was made from */
	size_t nadded, nremoved, nrepointed, nerrors, nwarnings;
	size_t more_errors, more_warnings; /* past CAT_RELOAD_LIST, not kept */
	char added[CAT_RELOAD_NAMES][CFG_NAME_MAX];
	char removed[CAT_RELOAD_NAMES][CFG_NAME_MAX];
	char repointed[CAT_RELOAD_NAMES][CFG_NAME_MAX];
	char errors[CAT_RELOAD_LIST][FEED_ERR_MSG_MAX];
	char warnings[CAT_RELOAD_LIST][FEED_ERR_MSG_MAX];
	size_t nbusy;                    /* commit: retired with streams still on them */
	char busy[CAT_RELOAD_NAMES][CFG_NAME_MAX];
};

/* Plans serving c in place of cur (made from old): a dataset of the same
 * name and directory is kept as it is (its entry shared: its streams go
 * on untouched); a new name or a new directory is opened now. A new or
 * repointed dataset that does not open is an error (the operator asked for
 * it; the reload is refused); one that failed before at the same
 * directory and still fails is a warning, as at start. A pipeline that
 * plans against no dataset is a warning. Fills *r (caller's, zeroed here);
 * r->next is NULL when r->nerrors. Returns 0 or -ENOMEM. Blocking: a worker.
 * cur and its entries' cfg must not change meanwhile (one reload at a
 * time; commits are on the loop). */
int cat_reload_plan(const struct cat *cur, const struct cfg *old, const struct cfg *c,
		    struct cache *cache, const struct cat_remote *rem, struct cat_reload *r);

/* Puts r->next in force: kept entries point into r->cfg, those cur served
 * and next does not are retired, and cur is freed (an entry no stream
 * holds closes here: close(2) of its files and dropping its cached
 * blocks, on the loop; accepted, it is short). Returns next. Loop thread. */
struct cat *cat_reload_commit(struct cat *cur, struct cat_reload *r);

/* Frees what a plan that is not committed holds. Accepts a zeroed r. */
void cat_reload_drop(struct cat_reload *r);

#endif
