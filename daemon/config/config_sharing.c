/*
 * config_sharing.c: who shares what beyond a dataset's readers: the
 * `admin_group` whose members may reload feedd (root always may), and each
 * dataset's `shared_groups`, the group names on it that every user allowed
 * to read it may join (other groups belong to the user who made them).
 * Runs where the config loads: main() before the loop starts, a worker at
 * each reload; resolves the group name once, so a typo is refused when
 * the file loads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_raw.h"

static int cfg_admin_group(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
			   struct feed_err *err)
{
	struct feed_err e2 = {0};

	if (!raw->admin_group)
		return 0;
	if (acl_parse_group(raw->admin_group, &c->admin_gid, &e2) < 0)
		return cfg_key_err(src, err, "admin_group", "%s", e2.msg);
	c->has_admin_group = true;
	return 0;
}

/* Dataset i's shared_groups: names as clients give them, or "*". */
static int cfg_shared_one(struct cfg_dataset *d, const struct cfg_raw_dataset *rd, size_t i,
			  const struct cfg_src *src, struct feed_err *err)
{
	char key[96];
	int rc = 0;

	if (!rd->shared_groups_count)
		return 0;
	d->shared_groups = calloc(rd->shared_groups_count, sizeof(*d->shared_groups));
	if (!d->shared_groups)
		return feed_err_set(err, -ENOMEM, "datasets: out of memory");
	for (unsigned k = 0; k < rd->shared_groups_count; k++) {
		const char *g = rd->shared_groups[k];
		snprintf(key, sizeof(key), "datasets[%zu].shared_groups[%u]", i, k);
		if (!strcmp(g, "*")) {
			d->shared_any = true;
		} else if (!cfg_name_ok(g)) {
			rc = cfg_key_err(src, err, key, "'%s' is not a group name of 1..%d characters "
					 "from A-Z a-z 0-9 _ . - (or '*': every group)", g,
					 CFG_NAME_MAX - 1);
			if (!cfg_err_keep(src, rc, err))
				return rc;
		} else {
			snprintf(d->shared_groups[d->nshared_groups++], CFG_NAME_MAX, "%s", g);
		}
	}
	return 0;
}

int cfg_sharing(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		struct feed_err *err)
{
	int rc = cfg_admin_group(c, raw, src, err);

	if (rc < 0 && !cfg_err_keep(src, rc, err))
		return rc;
	/* datasets[i] is raw->datasets[i] for those loaded (flags come after) */
	for (size_t i = 0; i < raw->datasets_count && i < c->ndatasets; i++) {
		if (strcmp(c->datasets[i].name, raw->datasets[i].name))
			continue;  /* refused by cfg_datasets(): its error says so */
		rc = cfg_shared_one(&c->datasets[i], &raw->datasets[i], i, src, err);
		if (rc < 0 && !cfg_err_keep(src, rc, err))
			return rc;
	}
	return 0;
}

bool cfg_group_shared(const struct cfg_dataset *d, const char *group)
{
	if (d->shared_any)
		return true;
	for (size_t i = 0; i < d->nshared_groups; i++)
		if (!strcmp(d->shared_groups[i], group))
			return true;
	return false;
}
