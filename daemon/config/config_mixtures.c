/*
 * config_mixtures.c: the mixtures section of feedd.yaml: named mixtures a
 * client opens by name (OpenStream.dataset), each a list of sources (a
 * dataset of the file, its weight, Mosaic's repeat and choose). Checked
 * once, here, so a typo is refused naming the key; the datasets' schemas
 * agree or not only once they are open, at a stream's open
 * (protocol/session_mix.c). Runs where the config loads (main() at start,
 * a worker at a reload); never prints.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_raw.h"

/* A finite number >= 0 from the whole of s. */
static int mix_number(const char *s, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < 0)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* A count (decimal digits) from the whole of s. */
static int mix_count(const char *s, uint64_t *ret)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* Source k of mixture i into *d. */
static int mix_source(const struct cfg *c, const struct cfg_raw_mixture_source *rs, size_t i,
		      size_t k, struct cfg_mixture_source *d, const struct cfg_src *src,
		      struct feed_err *err)
{
	char key[96];

	snprintf(key, sizeof(key), "mixtures[%zu].sources[%zu].dataset", i, k);
	if (!cfg_dataset_find(c, rs->dataset))
		return cfg_key_err(src, err, key, "no dataset named '%s' in this file",
				   rs->dataset);
	snprintf(d->dataset, sizeof(d->dataset), "%s", rs->dataset);
	snprintf(key, sizeof(key), "mixtures[%zu].sources[%zu].weight", i, k);
	if (mix_number(rs->weight, &d->weight) < 0)
		return cfg_key_err(src, err, key, "'%s': a finite number >= 0 is required",
				   rs->weight);
	snprintf(key, sizeof(key), "mixtures[%zu].sources[%zu].repeat", i, k);
	if (rs->repeat && mix_number(rs->repeat, &d->repeat) < 0)
		return cfg_key_err(src, err, key, "'%s': a finite number >= 0 is required (0 "
				   "means 1)", rs->repeat);
	snprintf(key, sizeof(key), "mixtures[%zu].sources[%zu].choose", i, k);
	if (rs->choose && (mix_count(rs->choose, &d->choose) < 0 || d->choose == 0))
		return cfg_key_err(src, err, key, "'%s': a sample count >= 1 is required",
				   rs->choose);
	return 0;
}

/* Mixture i: its name (unique among datasets and mixtures), its epoch,
 * its sources; c->mixtures' next entry on success. */
static int mix_one(struct cfg *c, const struct cfg_raw_mixture *rm, size_t i,
		   const struct cfg_src *src, struct feed_err *err)
{
	struct cfg_mixture *m = &c->mixtures[c->nmixtures];
	double sum = 0;
	char key[64];
	int r;

	snprintf(key, sizeof(key), "mixtures[%zu].name", i);
	if (!cfg_name_ok(rm->name))
		return cfg_key_err(src, err, key, "'%s' is not a name of 1..%d characters "
				   "from A-Z a-z 0-9 _ . -", rm->name, CFG_NAME_MAX - 1);
	if (cfg_dataset_find(c, rm->name))
		return cfg_key_err(src, err, key, "'%s' is a dataset's name too", rm->name);
	for (size_t k = 0; k < c->nmixtures; k++)
		if (!strcmp(c->mixtures[k].name, rm->name))
			return cfg_key_err(src, err, key, "mixture '%s' defined twice", rm->name);
	snprintf(key, sizeof(key), "mixtures[%zu].samples_per_epoch", i);
	if (rm->samples_per_epoch && mix_count(rm->samples_per_epoch, &m->samples_per_epoch) < 0)
		return cfg_key_err(src, err, key, "'%s': a row count is required",
				   rm->samples_per_epoch);
	m->sources = calloc(rm->sources_count, sizeof(m->sources[0]));
	if (!m->sources)
		return feed_err_set(err, -ENOMEM, "mixtures: out of memory");
	for (size_t k = 0; k < rm->sources_count; k++) {
		if ((r = mix_source(c, &rm->sources[k], i, k, &m->sources[k], src, err)) < 0) {
			free(m->sources);
			m->sources = NULL;
			return r;
		}
		sum += m->sources[k].weight;
	}
	snprintf(key, sizeof(key), "mixtures[%zu].sources", i);
	if (!(sum > 0)) {
		free(m->sources);
		m->sources = NULL;
		return cfg_key_err(src, err, key, "mixture '%s': at least one weight must be above 0",
				   rm->name);
	}
	snprintf(m->name, sizeof(m->name), "%s", rm->name);
	m->nsources = rm->sources_count;
	c->nmixtures++;
	return 0;
}

int cfg_mixtures(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		 struct feed_err *err)
{
	c->mixtures = calloc(raw->mixtures_count + 1u, sizeof(*c->mixtures));
	if (!c->mixtures)
		return feed_err_set(err, -ENOMEM, "mixtures: out of memory");
	for (size_t i = 0; i < raw->mixtures_count; i++) {
		int r = mix_one(c, &raw->mixtures[i], i, src, err);
		if (r < 0 && !cfg_err_keep(src, r, err))
			return r;
	}
	return 0;
}
