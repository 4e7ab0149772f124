/*
 * catalog.c: opens the configured datasets once and keeps their protobuf
 * descriptions ready for list replies (see catalog.h). Main thread at
 * start; read-only afterwards. Never serves a dataset that failed to open.
 */
#include "catalog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

int cat_open(const struct cfg *c, const struct log *lg, struct cat **ret, struct feed_err *err)
{
	struct cat *cat = calloc(1, sizeof(*cat));

	if (!cat || !(cat->e = calloc(c->ndatasets ? c->ndatasets : 1, sizeof(*cat->e)))) {
		free(cat);
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	}
	for (size_t i = 0; i < c->ndatasets; i++) {
		const struct cfg_dataset *d = &c->datasets[i];
		struct cat_entry *e = &cat->e[cat->n];
		struct feed_err e2 = {0};

		int r = fmt_dataset_open(d->path, &e->ds, &e2);
		if (r == -ENOMEM) {
			cat_free(cat);
			return feed_err_set(err, r, "dataset '%s' (%s): out of memory", d->name,
					    d->path);
		}
		if (r < 0) {
			log_warn(lg, "dataset '%s' (%s) left out: %s", d->name, d->path,
				 e2.msg[0] ? e2.msg : strerror(-r));
			continue;
		}
		e->cfg = d;
		e->info = fmt_dataset_info(e->ds);
		if (cat_blocks(e) < 0) {
			fmt_dataset_close(e->ds);
			cat_free(cat);
			return feed_err_set(err, -ENOMEM, "dataset '%s' (%s): out of memory for its "
					    "block table", d->name, d->path);
		}
		cat_describe(e);
		cat->n++;
		log_info(lg, "dataset '%s' (%s): %llu samples, %u fields, version %s", d->name,
			 d->path, (unsigned long long)e->info->num_samples,
			 e->info->schema->nfields, e->info->version);
	}
	*ret = cat;
	return 0;
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
