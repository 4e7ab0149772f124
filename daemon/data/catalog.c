/*
 * catalog.c: opens the configured datasets and keeps their protobuf
 * descriptions ready for list replies, checks the configured pipelines
 * against them, and plans and commits a reload (see catalog.h for the
 * threads and lifetimes). Never serves a dataset that failed to open.
 */
#include "catalog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "opener.h"
#include "pipeline.h"
#include "remote.h"

/* Fills e->pb* from e->info: pointers into the dataset's own strings and
 * schema, which live as long as e->ds. */
static void cat_describe(struct cat_entry *e)
{
	const struct fmt_schema *s = e->info->schema;

	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct fmt_field *f = &s->fields[i];
		Feed__Field *pf = &e->pb_fields[i];

		feed__field__init(pf);
		pf->name = (char *)f->name;
		pf->dtype = (Feed__DType)f->dtype;
		pf->n_shape = f->rank;
		pf->shape = (uint32_t *)f->shape;
		pf->variable = f->variable;
		pf->max_bytes = f->max_bytes;
		e->pb_field_ptrs[i] = pf;
	}
	feed__schema__init(&e->pb_schema);
	e->pb_schema.n_fields = s->nfields;
	e->pb_schema.fields = e->pb_field_ptrs;
	feed__dataset_info__init(&e->pb);
	e->pb.name = e->name;
	e->pb.version = (char *)e->info->version;
	e->pb.num_samples = e->info->num_samples;
	e->pb.schema = &e->pb_schema;
	e->pb.n_classes = e->info->num_classes;
	e->pb.classes = (char **)e->info->classes;
}

/* The first sample of every block, and the sample count after the last:
 * block-window order's table, built once here and borrowed by every
 * stream over the dataset (core/order.h). */
static int cat_blocks(struct cat_entry *e)
{
	uint64_t n = e->info->num_blocks;

	e->block_first = malloc((n + 1) * sizeof(*e->block_first));
	if (!e->block_first)
		return -ENOMEM;
	for (uint64_t b = 0; b < n; b++) {
		struct fmt_block_meta m;
		fmt_dataset_block_meta(e->ds, b, &m);
		e->block_first[b] = m.first_sample;
	}
	e->block_first[n] = e->info->num_samples;
	return 0;
}

static void cat_entry_free(struct cat_entry *e)
{
	if (e->cache && e->ds)  /* no block of it is pinned: no delivery reads it any more */
		cache_forget(e->cache, e->ds);
	fmt_dataset_close(e->ds);
	free(e->block_first);
	free(e->path);
	cfg_free(e->cfg_owner);
	free(e);
}

const struct cat_entry *cat_entry_ref(const struct cat_entry *e)
{
	struct cat_entry *m = (struct cat_entry *)e;  /* the count only */

	atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
	return e;
}

void cat_entry_unref(const struct cat_entry *e)
{
	struct cat_entry *m = (struct cat_entry *)e;

	/* acq_rel: the last owner sees every write the others made */
	if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
		cat_entry_free(m);
}

/* The remote settings of config c for a dataset opened through rem. */
static struct remote_opts cat_remote_opts(const struct cfg *c, const struct cat_remote *rem)
{
	return (struct remote_opts){.timeout_ms = c->remote_timeout_ms,
				    .retries = (uint32_t)c->remote_retries, .backoff_ms = 100,
				    .inflight = (uint32_t)c->remote_inflight,
				    .s3_credentials = c->s3_credentials,
				    .tier = rem ? rem->tier : NULL,
				    .counters = rem ? rem->counters : NULL,
				    .fetcher = rem ? rem->fetcher : NULL};
}

/* Opens the dataset at path into *ret_ds: a directory, or a URL
 * (http(s):// or s3://: data/remote.c). */
static int cat_ds_open(const char *path, const struct remote_opts *ro, struct fmt_dataset **ret_ds,
		       struct feed_err *err)
{
	if (remote_is_url(path))
		return remote_open(path, ro, ret_ds, err);
	return fmt_dataset_open(path, ret_ds, err);
}

/* Makes e (opened: e->ds) ready to serve: its facts, block table and
 * description. -ENOMEM. */
static int cat_entry_fill(struct cat_entry *e, struct cache *cache)
{
	e->info = fmt_dataset_info(e->ds);
	if (cat_blocks(e) < 0)
		return -ENOMEM;
	e->cache = cache;  /* from here on its blocks may be cached */
	cat_describe(e);
	return 0;
}

/* A new entry for dataset d of config c, not opened (one reference, the
 * caller's). */
static struct cat_entry *cat_entry_alloc(const struct cfg_dataset *d, const struct cfg *c)
{
	struct cat_entry *e = calloc(1, sizeof(*e));

	if (!e || !(e->path = strdup(d->path))) {
		free(e);
		return NULL;
	}
	atomic_init(&e->refs, 1);
	atomic_init(&e->state, CAT_READY);
	snprintf(e->name, sizeof(e->name), "%s", d->name);
	e->cfg = d;
	e->cfg_owner = cfg_ref(c);
	return e;
}

/* Opens dataset d of config c into a new entry (one reference, the
 * caller's); on failure err says which dataset, where and why ("dataset
 * 'x' (DIR): ..."). */
static int cat_entry_new(const struct cfg_dataset *d, const struct cfg *c, struct cache *cache,
			 const struct cat_remote *rem, struct cat_entry **ret, struct feed_err *err)
{
	struct cat_entry *e = cat_entry_alloc(d, c);
	struct remote_opts ro = cat_remote_opts(c, rem);
	struct feed_err e2 = {0};

	if (!e)
		return feed_err_set(err, -ENOMEM, "dataset '%s': out of memory", d->name);
	int r = cat_ds_open(d->path, &ro, &e->ds, &e2);
	if (r < 0) {
		cat_entry_free(e);
		return feed_err_set(err, r, "dataset '%s' (%s): %s", d->name, d->path,
				    e2.msg[0] ? e2.msg : strerror(-r));
	}
	if (cat_entry_fill(e, cache) < 0) {
		cat_entry_free(e);
		return feed_err_set(err, -ENOMEM, "dataset '%s' (%s): out of memory for its "
				    "block table", d->name, d->path);
	}
	*ret = e;
	return 0;
}

/* ---- opening in the background (a URL, with an opener) ---- */

struct cat_open_job {
	struct opener_job job;
	struct cat_entry *e;             /* a reference, dropped when done */
	struct remote_opts ro;           /* s3_credentials points at creds */
	char *creds;                     /* owned, or NULL */
	struct cache *cache;
	const struct log *log;
};

/* The opener thread: opens e, fills it and makes it ready, or failed. */
static void cat_open_run(struct opener_job *job, bool cancelled)
{
	struct cat_open_job *j = (struct cat_open_job *)job;
	struct cat_entry *e = j->e;
	struct feed_err err = {0};
	int r = cancelled ? feed_err_set(&err, -ECANCELED, "feedd is stopping")
			  : cat_ds_open(e->path, &j->ro, &e->ds, &err);

	if (r == 0 && cat_entry_fill(e, j->cache) < 0)
		r = feed_err_set(&err, -ENOMEM, "out of memory for its block table");
	if (r == 0) {
		if (j->cache)  /* per-dataset counters for the metrics */
			cache_name(j->cache, e->ds, e->name);
		log_info(j->log, "dataset '%s' (%s): opened: %llu samples, %u fields, version %s",
			 e->name, e->path, (unsigned long long)e->info->num_samples,
			 e->info->schema->nfields, e->info->version);
	} else {
		snprintf(e->why, sizeof(e->why), "%s", err.msg[0] ? err.msg : strerror(-r));
		if (!cancelled)
			log_warn(j->log, "dataset '%s' (%s): %s; left out", e->name, e->path, e->why);
	}
	/* release: the fields written above are visible to whoever reads the
	 * state with acquire */
	atomic_store_explicit(&e->state, r == 0 ? CAT_READY : CAT_FAILED, memory_order_release);
	cat_entry_unref(e);
	free(j->creds);
	free(j);
}

/* A new pending entry for URL dataset d, its open queued on rem's opener.
 * -ENOMEM. */
static int cat_entry_pending(const struct cfg_dataset *d, const struct cfg *c, struct cache *cache,
			     const struct cat_remote *rem, struct cat_entry **ret)
{
	struct cat_open_job *j = calloc(1, sizeof(*j));
	struct cat_entry *e = j ? cat_entry_alloc(d, c) : NULL;

	if (!e || (c->s3_credentials && !(j->creds = strdup(c->s3_credentials)))) {
		cat_entry_unref(e);
		free(j);
		return -ENOMEM;
	}
	atomic_store_explicit(&e->state, CAT_PENDING, memory_order_relaxed);  /* not shared yet */
	j->job.run = cat_open_run;
	j->e = (struct cat_entry *)cat_entry_ref(e);
	j->ro = cat_remote_opts(c, rem);
	j->ro.s3_credentials = j->creds;  /* the config may go before the open runs */
	j->cache = cache;
	j->log = rem->log;
	opener_submit(rem->opener, &j->job);
	*ret = e;
	return 0;
}

/* Whether dataset d opens in the background. */
static bool cat_deferred(const struct cfg_dataset *d, const struct cat_remote *rem)
{
	return rem && rem->opener && remote_is_url(d->path);
}

enum cat_state cat_entry_state(const struct cat_entry *e, const char **ret_why)
{
	enum cat_state st = (enum cat_state)atomic_load_explicit(&e->state, memory_order_acquire);

	if (ret_why)
		*ret_why = st == CAT_FAILED ? e->why : "";
	return st;
}

size_t cat_ready_count(const struct cat *cat)
{
	size_t n = 0;

	for (size_t i = 0; i < cat->n; i++)
		n += cat_entry_state(cat->e[i], NULL) == CAT_READY;
	return n;
}

static struct cat *cat_alloc(size_t n, struct feed_err *err)
{
	struct cat *cat = calloc(1, sizeof(*cat));

	if (!cat || !(cat->e = calloc(n ? n : 1, sizeof(*cat->e))) ||
	    !(cat->left_err = calloc(n ? n : 1, sizeof(*cat->left_err)))) {
		if (cat)
			free(cat->e);
		free(cat);
		feed_err_set(err, -ENOMEM, "datasets: out of memory");
		return NULL;
	}
	return cat;
}

int cat_pipeline_fits(const struct cat *cat, const char *text, size_t *ret_n,
		      struct feed_err *why)
{
	struct pipe_plan *plan = malloc(sizeof(*plan));
	struct feed_err e2 = {0};
	size_t n = 0;

	if (!plan)
		return feed_err_set(why, -ENOMEM, "pipeline: out of memory");
	for (size_t i = 0; i < cat->n; i++) {
		if (cat_entry_state(cat->e[i], NULL) != CAT_READY)
			continue;  /* planned against when it opens: not yet */
		int r = pipe_plan_text(text, cat->e[i]->info->schema, plan, &e2);
		if (r == 0)
			n++;
		else if (i == 0)
			feed_err_set(why, r, "dataset '%s': %s", cat->e[i]->name, e2.msg);
	}
	free(plan);
	*ret_n = n;
	return 0;
}

/* Says (through say) which configured pipelines plan against none of
 * cat's datasets. With no dataset to plan against there is nothing to say
 * of each; configured datasets that all failed get one line. Returns how
 * many lines, or -ENOMEM. */
static int cat_unfit_pipelines(const struct cat *cat, const struct cfg *c,
			       void (*say)(void *ctx, const char *msg), void *ctx)
{
	char msg[FEED_ERR_MSG_MAX + 128];
	int unfit = 0;

	if (cat_ready_count(cat) == 0) {
		if (!c->npipelines || !c->ndatasets || cat->n)
			return 0;  /* none configured, or some still opening */
		snprintf(msg, sizeof(msg), "none of the %zu datasets opened: the %zu pipelines "
			 "were planned against no schema", c->ndatasets, c->npipelines);
		say(ctx, msg);
		return 1;
	}
	for (size_t i = 0; i < c->npipelines; i++) {
		const struct cfg_pipeline *p = &c->pipelines[i];
		struct feed_err why = {0};
		size_t n;

		if (cat_pipeline_fits(cat, p->ops, &n, &why) < 0)
			return -ENOMEM;
		if (n)
			continue;
		snprintf(msg, sizeof(msg), "pipeline '%s' plans against none of the %zu datasets (%s)",
			 p->name, cat->n, why.msg);
		say(ctx, msg);
		unfit++;
	}
	return unfit;
}

static void cat_say_log(void *ctx, const char *msg)
{
	log_warn((const struct log *)ctx, "%s", msg);
}

int cat_open(const struct cfg *c, struct cache *cache, const struct cat_remote *rem, const struct log *lg,
	     struct cat **ret, struct feed_err *err)
{
	struct cat *cat = cat_alloc(c->ndatasets, err);

	if (!cat)
		return err->code;
	for (size_t i = 0; i < c->ndatasets; i++) {
		const struct cfg_dataset *d = &c->datasets[i];
		struct feed_err e2 = {0};
		struct cat_entry *e;

		if (cat_deferred(d, rem)) {  /* start-up never waits on a remote host */
			if (cat_entry_pending(d, c, cache, rem, &e) < 0) {
				cat_free(cat);
				return feed_err_set(err, -ENOMEM, "dataset '%s': out of memory",
						    d->name);
			}
			cat->e[cat->n++] = e;
			log_info(lg, "dataset '%s' (%s): pending: opening in the background",
				 d->name, d->path);
			continue;
		}
		int r = cat_entry_new(d, c, cache, rem, &e, &e2);
		if (r == -ENOMEM) {
			cat_free(cat);
			return feed_err_set(err, r, "%s", e2.msg);
		}
		if (r < 0) {
			log_warn(lg, "%s; left out", e2.msg);
			cat->left_err[i] = r;
			continue;
		}
		cat->e[cat->n++] = e;
		log_info(lg, "dataset '%s' (%s): %llu samples, %u fields, version %s", d->name,
			 d->path, (unsigned long long)e->info->num_samples,
			 e->info->schema->nfields, e->info->version);
	}
	if (cat_unfit_pipelines(cat, c, cat_say_log, (void *)lg) < 0) {
		cat_free(cat);
		return feed_err_set(err, -ENOMEM, "pipelines: out of memory");
	}
	*ret = cat;
	return 0;
}

/* cat_check()'s output: "feedd: FILE: warning: ..." lines. */
struct cat_say_file {
	FILE *out;
	const char *file;
};

static void cat_say_warning(void *ctx, const char *msg)
{
	const struct cat_say_file *sf = ctx;
	fprintf(sf->out, "feedd: %s: warning: %s\n", sf->file, msg);
}

/* The opened entry of cat called name, or NULL. */
static const struct cat_entry *cat_ready_named(const struct cat *cat, const char *name)
{
	for (size_t i = 0; i < cat->n; i++)
		if (!strcmp(cat->e[i]->name, name) && cat_entry_state(cat->e[i], NULL) == CAT_READY)
			return cat->e[i];
	return NULL;
}

/* Says (through say) which configured mixtures have a source whose schema
 * disagrees with the first's (fmt_schema_agree: the source and the field),
 * which every open of it would be refused for; sources left out were said
 * already. Returns how many lines. */
static int cat_mixture_schemas(const struct cat *cat, const struct cfg *c,
			       void (*say)(void *ctx, const char *msg), void *ctx)
{
	char msg[FEED_ERR_MSG_MAX + 128];
	int bad = 0;

	for (size_t i = 0; i < c->nmixtures; i++) {
		const struct cfg_mixture *m = &c->mixtures[i];
		const struct cat_entry *first = NULL;
		for (size_t s = 0; s < m->nsources; s++) {
			const struct cat_entry *e = cat_ready_named(cat, m->sources[s].dataset);
			struct feed_err err = {0};
			if (!e || !first) {
				first = first ? first : e;
				continue;
			}
			if (fmt_schema_agree(first->info->schema, first->name, e->info->schema, e->name,
					     &err) == 0)
				continue;
			snprintf(msg, sizeof(msg), "mixture '%s': %s; every open of it is refused",
				 m->name, err.msg);
			say(ctx, msg);
			bad++;
			break;
		}
	}
	return bad;
}

int cat_check(const struct cfg *c, FILE *out)
{
	struct cat_say_file sf = {.out = out, .file = c->file ? c->file : "config"};
	struct feed_err err = {0};
	struct cat *cat = cat_alloc(c->ndatasets, &err);
	int warnings = 0;

	if (!cat)
		return err.code;
	for (size_t i = 0; i < c->ndatasets; i++) {
		int r = cat_entry_new(&c->datasets[i], c, NULL, NULL, &cat->e[cat->n], &err);
		if (r == -ENOMEM) {
			cat_free(cat);
			return r;
		}
		if (r < 0) {
			fprintf(out, "feedd: %s: warning: %s; left out\n", sf.file, err.msg);
			warnings++;
		} else {
			cat->n++;
		}
	}
	int r = cat_unfit_pipelines(cat, c, cat_say_warning, &sf);
	if (r >= 0)
		r += cat_mixture_schemas(cat, c, cat_say_warning, &sf);
	cat_free(cat);
	return r < 0 ? r : warnings + r;
}

/* The entry of cat called name (its own copy: any thread), or NULL. */
static struct cat_entry *cat_lookup(const struct cat *cat, const char *name)
{
	for (size_t i = 0; i < cat->n; i++)
		if (!strcmp(cat->e[i]->name, name))
			return cat->e[i];
	return NULL;
}

const struct cat_entry *cat_find(const struct cat *cat, const char *name)
{
	const struct cat_entry *e = cat_lookup(cat, name);

	return e && cat_entry_state(e, NULL) == CAT_READY ? e : NULL;
}

const struct cat_entry *cat_find_any(const struct cat *cat, const char *name)
{
	return cat_lookup(cat, name);
}

void cat_free(struct cat *cat)
{
	if (!cat)
		return;
	for (size_t i = 0; i < cat->n; i++)
		cat_entry_unref(cat->e[i]);
	free(cat->e);
	free(cat->left_err);
	free(cat);
}

/* ---- reload ---- */

/* Appends msg to one of r's message lists (n entries), or counts it in
 * *more when full. */
static void cat_note(char (*list)[FEED_ERR_MSG_MAX], size_t *n, size_t *more, const char *msg)
{
	if (*n < CAT_RELOAD_LIST) {  /* cut to fit */
		size_t len = strnlen(msg, FEED_ERR_MSG_MAX - 1);
		memcpy(list[*n], msg, len);
		list[(*n)++][len] = '\0';
	} else
		(*more)++;
}

static void cat_name(char (*list)[CFG_NAME_MAX], size_t *n, const char *name)
{
	if (*n < CAT_RELOAD_NAMES)
		snprintf(list[(*n)++], CFG_NAME_MAX, "%s", name);
}

static void cat_say_reload(void *ctx, const char *msg)
{
	struct cat_reload *r = ctx;
	cat_note(r->warnings, &r->nwarnings, &r->more_warnings, msg);
}

/* Dataset d of the new config into r->next: kept, opened, or refused. */
static int cat_plan_one(const struct cat *cur, const struct cfg *old, const struct cfg *c,
			const struct cfg_dataset *d, struct cache *cache, const struct cat_remote *rem,
			struct cat_reload *r)
{
	struct cat_entry *k = cat_lookup(cur, d->name), *e;
	struct feed_err err = {0};
	char msg[FEED_ERR_MSG_MAX + 64];

	if (k && !strcmp(k->path, d->path) && cat_entry_state(k, NULL) != CAT_FAILED) {
		/* unchanged (ready, or still opening): its streams go on */
		r->next->e[r->next->n++] = (struct cat_entry *)cat_entry_ref(k);
		return 0;
	}
	if (cat_deferred(d, rem)) {  /* a reload never waits on a remote host */
		if (cat_entry_pending(d, c, cache, rem, &e) < 0)
			return -ENOMEM;
		r->next->e[r->next->n++] = e;
		if (k && strcmp(k->path, d->path))
			cat_name(r->repointed, &r->nrepointed, d->name);
		else if (!k)
			cat_name(r->added, &r->nadded, d->name);
		snprintf(msg, sizeof(msg), "dataset '%s' (%s): pending: opening in the background",
			 d->name, d->path);
		cat_note(r->warnings, &r->nwarnings, &r->more_warnings, msg);
		return 0;
	}
	int rc = cat_entry_new(d, c, cache, rem, &e, &err);
	if (rc == -ENOMEM)
		return rc;
	if (rc == 0) {
		r->next->e[r->next->n++] = e;
		if (k)
			cat_name(r->repointed, &r->nrepointed, d->name);
		else
			cat_name(r->added, &r->nadded, d->name);
		return 0;
	}
	const struct cfg_dataset *od = cfg_dataset_find(old, d->name);
	if (!k && od && !strcmp(od->path, d->path)) {  /* left out before, and still */
		r->next->left_err[d - c->datasets] = rc;
		snprintf(msg, sizeof(msg), "%s; still left out", err.msg);
		cat_note(r->warnings, &r->nwarnings, &r->more_warnings, msg);
	} else {
		cat_note(r->errors, &r->nerrors, &r->more_errors, err.msg);
	}
	return 0;
}

int cat_reload_plan(const struct cat *cur, const struct cfg *old, const struct cfg *c,
		    struct cache *cache, const struct cat_remote *rem, struct cat_reload *r)
{
	struct feed_err err = {0};

	memset(r, 0, sizeof(*r));
	r->cfg = c;
	if (!(r->next = cat_alloc(c->ndatasets, &err)))
		return -ENOMEM;
	for (size_t i = 0; i < c->ndatasets; i++)
		if (cat_plan_one(cur, old, c, &c->datasets[i], cache, rem, r) < 0)
			goto nomem;
	for (size_t i = 0; i < cur->n; i++)
		if (!cfg_dataset_find(c, cur->e[i]->name))
			cat_name(r->removed, &r->nremoved, cur->e[i]->name);
	if (cat_unfit_pipelines(r->next, c, cat_say_reload, r) < 0)
		goto nomem;
	if (r->nerrors) {
		cat_free(r->next);
		r->next = NULL;
	}
	return 0;
nomem:
	cat_free(r->next);
	r->next = NULL;
	return -ENOMEM;
}

static bool cat_holds(const struct cat *cat, const struct cat_entry *e)
{
	for (size_t i = 0; i < cat->n; i++)
		if (cat->e[i] == e)
			return true;
	return false;
}

struct cat *cat_reload_commit(struct cat *cur, struct cat_reload *r)
{
	struct cat *next = r->next;

	for (size_t i = 0; i < next->n; i++) {
		struct cat_entry *e = next->e[i];
		if (e->cfg_owner == r->cfg)
			continue;  /* opened by the plan */
		struct cfg *was = e->cfg_owner;
		e->cfg = cfg_dataset_find(r->cfg, e->name);  /* same name: the new access list */
		e->cfg_owner = cfg_ref(r->cfg);
		cfg_free(was);
	}
	for (size_t i = 0; i < cur->n; i++) {
		struct cat_entry *e = cur->e[i];
		if (cat_holds(next, e))
			continue;
		e->retired = true;
		/* relaxed: a hint for the log; only the loop adds stream references */
		if (atomic_load_explicit(&e->refs, memory_order_relaxed) > 1)
			cat_name(r->busy, &r->nbusy, e->name);
	}
	cat_free(cur);
	r->next = NULL;
	return next;
}

void cat_reload_drop(struct cat_reload *r)
{
	cat_free(r->next);
	r->next = NULL;
}
