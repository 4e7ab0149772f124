/*
 * config_datasets.c: the datasets and pipelines sections of the config and
 * the --dataset flags (see config.h). Runs where the config loads: main()
 * before the loop starts, a worker at each reload. Resolves user and group
 * names and parses pipeline texts once, here, so a typo is refused when
 * the file loads and never becomes a silent refusal later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_raw.h"
#include "pipeline.h"

const struct cfg_dataset *cfg_dataset_find(const struct cfg *c, const char *name)
{
	for (size_t i = 0; i < c->ndatasets; i++)
		if (!strcmp(c->datasets[i].name, name))
			return &c->datasets[i];
	return NULL;
}

char *cfg_path_join(const char *file, const char *path)
{
	const char *slash = file ? strrchr(file, '/') : NULL;
	char *out;

	if (path[0] == '/' || !slash || strstr(path, "://"))
		return strdup(path);
	int dirlen = (int)(slash - file);
	if (asprintf(&out, "%.*s/%s", dirlen, file, path) < 0)
		return NULL;
	return out;
}

static int cfg_acl_users(struct acl_list *a, const struct cfg_raw_dataset *rd, size_t i,
			 const struct cfg_src *src, struct feed_err *err)
{
	char key[96];

	a->uids = calloc(rd->allow_users_count + 1u, sizeof(*a->uids));
	if (!a->uids)
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	for (unsigned k = 0; k < rd->allow_users_count; k++) {
		struct feed_err e2 = {0};
		snprintf(key, sizeof(key), "datasets[%zu].allow_users[%u]", i, k);
		if (!strcmp(rd->allow_users[k], "*")) {
			a->any = true;
			continue;
		}
		if (acl_parse_user(rd->allow_users[k], &a->uids[a->nuids], &e2) < 0) {
			int r = cfg_key_err(src, err, key, "%s", e2.msg);
			if (!cfg_err_keep(src, r, err))
				return r;
			continue;
		}
		a->nuids++;
	}
	return 0;
}

static int cfg_acl_groups(struct acl_list *a, const struct cfg_raw_dataset *rd, size_t i,
			  const struct cfg_src *src, struct feed_err *err)
{
	char key[96];

	a->gids = calloc(rd->allow_groups_count + 1u, sizeof(*a->gids));
	if (!a->gids)
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	for (unsigned k = 0; k < rd->allow_groups_count; k++) {
		struct feed_err e2 = {0};
		snprintf(key, sizeof(key), "datasets[%zu].allow_groups[%u]", i, k);
		if (acl_parse_group(rd->allow_groups[k], &a->gids[a->ngids], &e2) < 0) {
			int r = cfg_key_err(src, err, key, "%s", e2.msg);
			if (!cfg_err_keep(src, r, err))
				return r;
			continue;
		}
		a->ngids++;
	}
	return 0;
}

static int cfg_dataset_one(struct cfg *c, const struct cfg_raw_dataset *rd, size_t i,
			   const char *file, const struct cfg_src *src, struct feed_err *err)
{
	struct cfg_dataset *d = &c->datasets[i];
	char key[64];

	snprintf(key, sizeof(key), "datasets[%zu].name", i);
	if (!cfg_name_ok(rd->name))
		return cfg_key_err(src, err, key, "'%s' is not a name of 1..%d characters "
				   "from A-Z a-z 0-9 _ . -", rd->name, CFG_NAME_MAX - 1);
	if (cfg_dataset_find(c, rd->name))
		return cfg_key_err(src, err, key, "dataset '%s' defined twice", rd->name);
	snprintf(d->name, sizeof(d->name), "%s", rd->name);
	d->path = cfg_path_join(file, rd->path);
	if (!d->path)
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	c->ndatasets = i + 1;  /* from here on cfg_free() owns d */
	int r = cfg_acl_users(&d->acl, rd, i, src, err);
	if (r < 0 && !cfg_err_keep(src, r, err))
		return r;
	return cfg_acl_groups(&d->acl, rd, i, src, err);
}

int cfg_datasets(struct cfg *c, const struct cfg_raw *raw, const char *file,
		 const struct cfg_src *src, struct feed_err *err)
{
	/* Room for the flags' datasets too, so they never move these. */
	c->datasets = calloc(raw->datasets_count + CFG_MAX_FLAG_DATASETS, sizeof(*c->datasets));
	if (!c->datasets)
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	for (size_t i = 0; i < raw->datasets_count; i++) {
		int r = cfg_dataset_one(c, &raw->datasets[i], i, file, src, err);
		if (r < 0 && !cfg_err_keep(src, r, err))
			return r;
	}
	return 0;
}

/* --dataset NAME=DIR: replaces the directory of a configured dataset of
 * that name (its access list stays), or adds one readable by root and the
 * daemon's own user. */
int cfg_flag_datasets(struct cfg *c, const struct cfg_overrides *ov, struct feed_err *err)
{
	for (size_t i = 0; ov && i < ov->ndatasets; i++) {
		const struct cfg_flag_dataset *f = &ov->datasets[i];
		struct cfg_dataset *d = (struct cfg_dataset *)cfg_dataset_find(c, f->name);

		if (!cfg_name_ok(f->name))
			return feed_err_set(err, -EINVAL, "--dataset %s=%s: '%s' is not a name of "
					    "1..%d characters from A-Z a-z 0-9 _ . -", f->name,
					    f->path, f->name, CFG_NAME_MAX - 1);
		if (!*f->path)
			return feed_err_set(err, -EINVAL, "--dataset %s=: empty directory", f->name);
		char *path = strdup(f->path);
		if (!path)
			return feed_err_set(err, -ENOMEM, "--dataset: out of memory");
		if (!d) {
			d = &c->datasets[c->ndatasets++];
			snprintf(d->name, sizeof(d->name), "%s", f->name);
		}
		free(d->path);
		d->path = path;
	}
	return 0;
}

/* Parses a pipeline's ops: an unknown op or key, or a value out of range,
 * is refused naming the pipeline, the op and the key. Planning against a
 * dataset's schema needs the dataset, so it waits for the catalog. */
static int cfg_pipeline_parse(const struct cfg_raw_pipeline *rp, size_t i,
			      const struct cfg_src *src, struct feed_err *err)
{
	struct feed_err e2 = {0};
	struct pipe_spec spec;
	char key[64];

	if (pipe_parse(rp->ops, &spec, &e2) == 0)
		return 0;
	/* "pipeline op 1 'x': ..." / "pipeline: ..." read as "pipeline 'NAME': ..." */
	const char *what = e2.msg;
	if (!strncmp(what, "pipeline ", 9))
		what += 9;
	else if (!strncmp(what, "pipeline: ", 10))
		what += 10;
	snprintf(key, sizeof(key), "pipelines[%zu].ops", i);
	return cfg_key_err(src, err, key, "pipeline '%s': %s", rp->name, what);
}

/* Pipeline i: its name, then its ops. On success it is c->pipelines'
 * next entry; a refused one takes no entry. */
static int cfg_pipeline_one(struct cfg *c, const struct cfg_raw_pipeline *rp, size_t i,
			    const struct cfg_src *src, struct feed_err *err)
{
	struct cfg_pipeline *p = &c->pipelines[c->npipelines];
	char key[64];

	snprintf(key, sizeof(key), "pipelines[%zu].name", i);
	if (!cfg_name_ok(rp->name))
		return cfg_key_err(src, err, key, "'%s' is not a name of 1..%d characters "
				   "from A-Z a-z 0-9 _ . -", rp->name, CFG_NAME_MAX - 1);
	for (size_t k = 0; k < c->npipelines; k++)
		if (!strcmp(c->pipelines[k].name, rp->name))
			return cfg_key_err(src, err, key, "pipeline '%s' defined twice", rp->name);
	int r = cfg_pipeline_parse(rp, i, src, err);
	if (r < 0)
		return r;
	snprintf(p->name, sizeof(p->name), "%s", rp->name);
	p->ops = strdup(rp->ops);
	if (!p->ops)
		return feed_err_set(err, -ENOMEM, "pipelines: out of memory");
	c->npipelines++;
	return 0;
}

int cfg_pipelines(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		  struct feed_err *err)
{
	c->pipelines = calloc(raw->pipelines_count + 1u, sizeof(*c->pipelines));
	if (!c->pipelines)
		return feed_err_set(err, -ENOMEM, "pipelines: out of memory");
	for (size_t i = 0; i < raw->pipelines_count; i++) {
		int r = cfg_pipeline_one(c, &raw->pipelines[i], i, src, err);
		if (r < 0 && !cfg_err_keep(src, r, err))
			return r;
	}
	return 0;
}
