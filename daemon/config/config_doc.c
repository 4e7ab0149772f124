/*
 * config_doc.c: the rows `feedd --list-config-keys` prints (see
 * config_doc.h). Main thread, before anything starts. Never allocates,
 * never reads a file.
 *
 * What needs a restart is what reload.c's rld_keep_running() keeps at its
 * running value; keep the two true together.
 */
#include "config_doc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "config.h"

/* One key path. type and def NULL: a number of config.c's cfg_nums, whose
 * type, range and default come from there. */
struct cfg_doc {
	const char *key;
	const char *type;
	const char *def;
	bool restart;      /* a change needs a restart (a reload keeps the old value) */
};

static const struct cfg_doc cfg_docs[] = {
	{"socket", "path", "$FEEDD_SOCKET, else " CFG_DEFAULT_SOCKET, true},
	{"socket_group", "group", "none (feedd's own group)", true},
	{"admin_group", "group", "none (root and feedd's own user only)", false},
	{"workers", NULL, NULL, true},
	{"cache_bytes", NULL, NULL, true},
	{"cache_dir", "path", "none", true},
	{"cache_dir_bytes", NULL, NULL, true},
	{"remote_timeout_ms", NULL, NULL, false},
	{"remote_retries", NULL, NULL, false},
	{"remote_inflight", NULL, NULL, false},
	{"s3_credentials", "path", "none (the environment only)", false},
	{"group_timeout_ms", NULL, NULL, false},
	{"log_level", "error|warn|info|debug", "info", true},
	{"metrics", "ADDR:PORT", "off", true},
	{"gpus", "list of GPUs, or all", "all", true},
	{"limits.max_connections", NULL, NULL, false},
	{"limits.max_streams", NULL, NULL, false},
	{"limits.max_credits", NULL, NULL, false},
	{"limits.max_slot_bytes", NULL, NULL, false},
	{"limits.max_device_bytes", NULL, NULL, false},
	{"limits.max_pixels", NULL, NULL, false},
	{"datasets[].name", "name", "required", false},
	{"datasets[].path", "directory or URL", "required", false},
	{"datasets[].allow_users", "list of users", "none", false},
	{"datasets[].allow_groups", "list of groups", "none", false},
	{"datasets[].shared_groups", "list of group names", "none", false},
	{"pipelines[].name", "name", "required", false},
	{"pipelines[].ops", "pipeline text", "required", false},
	{"mixtures[].name", "name", "required", false},
	{"mixtures[].samples_per_epoch", "integer", "its sources' epochs together", false},
	{"mixtures[].sources[].dataset", "name", "required", false},
	{"mixtures[].sources[].weight", "number >= 0", "required", false},
	{"mixtures[].sources[].repeat", "number", "1", false},
	{"mixtures[].sources[].choose", "integer", "none (repeat applies)", false},
};
#define CFG_DOCS (sizeof(cfg_docs) / sizeof(cfg_docs[0]))

/* v as a config file may write it: a byte count with the largest suffix
 * that divides it (K, M, G, T), else plain digits. */
static void cfg_doc_num(char *buf, size_t cap, uint64_t v, bool bytes)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (bytes && v && u < 3 && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, cap, "%llu", (unsigned long long)v);
	else
		snprintf(buf, cap, "%llu%c", (unsigned long long)v, units[u]);
}

/* The cfg_nums row named key, or -EINVAL naming it. */
static int cfg_doc_find_num(const char *key, uint64_t *min, uint64_t *max, uint64_t *def,
			    bool *bytes, struct feed_err *err)
{
	const char *k;

	for (size_t i = 0; cfg_num_row(i, &k, min, max, def, bytes) == 0; i++)
		if (!strcmp(k, key))
			return 0;
	return feed_err_set(err, -EINVAL, "config key '%s': documented as a number, but "
			    "config.c has no such number", key);
}

/* Every number of config.c has its row here. */
static int cfg_doc_all_nums(struct feed_err *err)
{
	const char *k;
	uint64_t min, max, def;
	bool bytes;

	for (size_t i = 0; cfg_num_row(i, &k, &min, &max, &def, &bytes) == 0; i++) {
		size_t j = 0;
		while (j < CFG_DOCS && (cfg_docs[j].type || strcmp(cfg_docs[j].key, k)))
			j++;
		if (j == CFG_DOCS)
			return feed_err_set(err, -EINVAL, "config key '%s': a number of config.c "
					    "with no row in config_doc.c", k);
	}
	return 0;
}

static int cfg_doc_line(FILE *out, const struct cfg_doc *d, struct feed_err *err)
{
	const char *apply = d->restart ? "restart" : "reload";
	char lo[32], hi[32], def[32];
	uint64_t min, max, dv;
	bool bytes;
	int r;

	if (d->type) {
		fprintf(out, "%s\t%s\t%s\t-\t%s\n", d->key, d->type, d->def, apply);
		return 0;
	}
	if ((r = cfg_doc_find_num(d->key, &min, &max, &dv, &bytes, err)) < 0)
		return r;
	cfg_doc_num(lo, sizeof(lo), min, bytes);
	cfg_doc_num(hi, sizeof(hi), max, bytes);
	cfg_doc_num(def, sizeof(def), dv, bytes);
	fprintf(out, "%s\t%s\t%s\t%s..%s\t%s\n", d->key, bytes ? "bytes" : "integer",
		dv ? def : "online CPUs", lo, hi, apply);
	return 0;
}

int cfg_doc_print(FILE *out, struct feed_err *err)
{
	int r = cfg_doc_all_nums(err);

	for (size_t i = 0; r == 0 && i < CFG_DOCS; i++)
		r = cfg_doc_line(out, &cfg_docs[i], err);
	if (r == 0 && (fflush(out) || ferror(out)))
		r = feed_err_set(err, -EIO, "--list-config-keys: write failed");
	return r;
}
