/*
 * config_raw.h: internal to the config module (config*.c). The document as
 * libcyaml fills it (every scalar a string, NULL when absent), where a
 * value came from, and the steps of cfg_load(). Main thread, before the
 * loop starts.
 */
#ifndef FEEDD_CONFIG_RAW_H
#define FEEDD_CONFIG_RAW_H

#include <stdbool.h>
#include <stddef.h>

#include "feed_err.h"

struct cfg;                /* config.h */
struct cfg_overrides;      /* config.h */
struct cfg_errs;           /* config.h */

struct cfg_raw_limits {
	char *max_connections;
	char *max_streams;
	char *max_credits;
	char *max_slot_bytes;
	char *max_device_bytes;
	char *max_pixels;
};

struct cfg_raw_dataset {
	char *name;
	char *path;
	char **allow_users;
	unsigned allow_users_count;
	char **allow_groups;
	unsigned allow_groups_count;
	char **shared_groups;
	unsigned shared_groups_count;
};

struct cfg_raw_pipeline {
	char *name;
	char *ops;
};

struct cfg_raw_mixture_source {
	char *dataset;
	char *weight;
	char *repeat;
	char *choose;
};

struct cfg_raw_mixture {
	char *name;
	char *samples_per_epoch;
	struct cfg_raw_mixture_source *sources;
	unsigned sources_count;
};

struct cfg_raw {
	char *socket;
	char *socket_group;
	char *admin_group;
	char *workers;
	char *cache_bytes;
	char *cache_dir;
	char *cache_dir_bytes;
	char *remote_timeout_ms;
	char *remote_retries;
	char *remote_inflight;
	char *s3_credentials;
	char *group_timeout_ms;
	char *log_level;
	char *metrics;
	char *gpus;
	struct cfg_raw_limits limits;   /* all NULL when the key is absent */
	struct cfg_raw_dataset *datasets;
	unsigned datasets_count;
	struct cfg_raw_pipeline *pipelines;
	unsigned pipelines_count;
	struct cfg_raw_mixture *mixtures;
	unsigned mixtures_count;
};

/* Where values come from, for messages. */
struct cfg_src {
	const char *file;   /* NULL: no file */
	const char *text;   /* the file's bytes */
	size_t len;
	struct cfg_errs *all; /* NULL: stop at the first error; else every
			       * error goes here and loading goes on */
};

/* Loading goes on past error r (in err) when src collects every error:
 * records it and returns true. -ENOMEM always stops. */
bool cfg_err_keep(const struct cfg_src *src, int r, const struct feed_err *err);

/* Sets err to -EINVAL "FILE:LINE: KEY: what" (the line of key in the
 * document, when found) and returns -EINVAL. */
int cfg_key_err(const struct cfg_src *src, struct feed_err *err, const char *key,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* config_schema.c: runs libcyaml over text with the schema. *ret is NULL
 * for a document with no keys. Errors name file, line and key path;
 * -ENOMEM says memory ran out. text must have passed cfg_yaml_check():
 * libyaml failing on it here is taken for want of memory. */
int cfg_raw_load(const char *text, size_t len, struct cfg_raw **ret, const char *file,
		 struct feed_err *err);
void cfg_raw_free(struct cfg_raw *raw);  /* accepts NULL */

/* cfg_raw_load(), but when src->all collects every error (--check-config)
 * each unknown key goes there ("FILE:LINE: PATH: unknown key") and the
 * rest loads without them, so the other keys are checked too; the
 * collected errors still refuse the file (cfg_load_all()). */
int cfg_raw_load_all(const char *text, size_t len, struct cfg_raw **ret,
		     const struct cfg_src *src, struct feed_err *err);

/* path as given when absolute or a URL, else joined to the config file's
 * directory. NULL: out of memory. */
char *cfg_path_join(const char *file, const char *path);

/* config_datasets.c: the datasets and pipelines sections, and --dataset. */
int cfg_datasets(struct cfg *c, const struct cfg_raw *raw, const char *file,
		 const struct cfg_src *src, struct feed_err *err);
int cfg_flag_datasets(struct cfg *c, const struct cfg_overrides *ov, struct feed_err *err);
int cfg_pipelines(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		  struct feed_err *err);

/* config_sharing.c: admin_group and the datasets' shared_groups (after
 * cfg_datasets(): a dataset that failed there has no sharing). */
int cfg_sharing(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		struct feed_err *err);

/* config_mixtures.c: the mixtures section (after the datasets: each
 * source must name one). */
int cfg_mixtures(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		 struct feed_err *err);

#endif
