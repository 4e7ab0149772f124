/*
 * catalog.c: opens the configured datasets once and keeps their protobuf
 * descriptions ready for list replies, and checks the configured pipelines
 * against them (see catalog.h). Main thread at start; read-only afterwards.
 * Never serves a dataset that failed to open.
 */
#include "catalog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"

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
	e->pb.name = (char *)e->cfg->name;
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

/* Opens dataset d into the next entry of cat; on failure err says which
 * dataset, where and why ("dataset 'x' (DIR): ..."). */
static int cat_add(struct cat *cat, const struct cfg_dataset *d, struct feed_err *err)
{
	struct cat_entry *e = &cat->e[cat->n];
	struct feed_err e2 = {0};

	int r = fmt_dataset_open(d->path, &e->ds, &e2);
	if (r < 0)
		return feed_err_set(err, r, "dataset '%s' (%s): %s", d->name, d->path,
				    e2.msg[0] ? e2.msg : strerror(-r));
	e->cfg = d;
	e->info = fmt_dataset_info(e->ds);
	if (cat_blocks(e) < 0) {
		fmt_dataset_close(e->ds);
		return feed_err_set(err, -ENOMEM, "dataset '%s' (%s): out of memory for its "
				    "block table", d->name, d->path);
	}
	cat_describe(e);
	cat->n++;
	return 0;
}

static struct cat *cat_alloc(const struct cfg *c, struct feed_err *err)
{
	struct cat *cat = calloc(1, sizeof(*cat));

	if (!cat || !(cat->e = calloc(c->ndatasets ? c->ndatasets : 1, sizeof(*cat->e)))) {
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
		int r = pipe_plan_text(text, cat->e[i].info->schema, plan, &e2);
		if (r == 0)
			n++;
		else if (i == 0)
			feed_err_set(why, r, "dataset '%s': %s", cat->e[i].cfg->name, e2.msg);
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

	if (cat->n == 0) {
		if (!c->npipelines || !c->ndatasets)
			return 0;
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

int cat_open(const struct cfg *c, const struct log *lg, struct cat **ret, struct feed_err *err)
{
	struct cat *cat = cat_alloc(c, err);

	if (!cat)
		return err->code;
	for (size_t i = 0; i < c->ndatasets; i++) {
		const struct cfg_dataset *d = &c->datasets[i];
		struct feed_err e2 = {0};

		int r = cat_add(cat, d, &e2);
		if (r == -ENOMEM) {
			cat_free(cat);
			return feed_err_set(err, r, "%s", e2.msg);
		}
		if (r < 0) {
			log_warn(lg, "%s; left out", e2.msg);
			continue;
		}
		const struct cat_entry *e = &cat->e[cat->n - 1];
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

int cat_check(const struct cfg *c, FILE *out)
{
	struct cat_say_file sf = {.out = out, .file = c->file ? c->file : "config"};
	struct feed_err err = {0};
	struct cat *cat = cat_alloc(c, &err);
	int warnings = 0;

	if (!cat)
		return err.code;
	for (size_t i = 0; i < c->ndatasets; i++) {
		int r = cat_add(cat, &c->datasets[i], &err);
		if (r == -ENOMEM) {
			cat_free(cat);
			return r;
		}
		if (r < 0) {
			fprintf(out, "feedd: %s: warning: %s; left out\n", sf.file, err.msg);
			warnings++;
		}
	}
	int r = cat_unfit_pipelines(cat, c, cat_say_warning, &sf);
	cat_free(cat);
	return r < 0 ? r : warnings + r;
}

const struct cat_entry *cat_find(const struct cat *cat, const char *name)
{
	for (size_t i = 0; i < cat->n; i++)
		if (!strcmp(cat->e[i].cfg->name, name))
			return &cat->e[i];
	return NULL;
}

void cat_free(struct cat *cat)
{
	if (!cat)
		return;
	for (size_t i = 0; i < cat->n; i++) {
		fmt_dataset_close(cat->e[i].ds);
		free(cat->e[i].block_first);
	}
	free(cat->e);
	free(cat);
}
