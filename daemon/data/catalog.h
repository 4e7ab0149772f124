/*
 * catalog.h: the datasets feedd serves.
 *
 * Owns: every struct fmt_dataset, opened once at start from the config (a
 * missing or corrupt one is logged with the reason and left out; the rest
 * are served), their prebuilt protobuf descriptions, and the check of the
 * configured pipelines against their schemas (a warning at start, for
 * --check-config too). Opened in main()
 * before the loop runs; afterwards immutable, so any thread may read it.
 * Never reopens or rescans a directory behind the config's back.
 */
#ifndef FEEDD_CATALOG_H
#define FEEDD_CATALOG_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "feed.pb-c.h"
#include "fmt.h"
#include "log.h"

struct cat_entry {
	const struct cfg_dataset *cfg;   /* name, directory, access list */
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
	struct cat_entry *e;             /* in config order */
};

/* Opens every dataset of c. Failures to open one are logged (one warning
 * each, naming dataset and directory) and skip it; only -ENOMEM fails the
 * whole catalog. Then warns of each configured pipeline that plans against
 * none of the datasets opened. Blocking (reads manifests and shard
 * indexes). */
int cat_open(const struct cfg *c, const struct log *lg, struct cat **ret, struct feed_err *err);

/* For --check-config: opens every dataset of c as cat_open() would and
 * plans every configured pipeline against those that opened, keeping
 * nothing. Writes one line per problem to out: "feedd: FILE: warning:
 * dataset 'x' (DIR): why; left out" for a dataset that does not open
 * (start-up leaves it out too), "feedd: FILE: warning: pipeline 'p' plans
 * against none of ..." for a pipeline that fits none of the datasets that
 * opened. Returns the number of warnings, or -ENOMEM. Blocking. */
int cat_check(const struct cfg *c, FILE *out);

/* How many of cat's datasets the pipeline text plans against, in *ret_n;
 * when none (and cat has some), why says why not for the first dataset
 * ("dataset 'x': ..."). Returns 0, or -ENOMEM. */
int cat_pipeline_fits(const struct cat *cat, const char *text, size_t *ret_n,
		      struct feed_err *why);

/* The served dataset called name, or NULL. */
const struct cat_entry *cat_find(const struct cat *cat, const char *name);

/* Closes every dataset. Accepts NULL. */
void cat_free(struct cat *cat);

#endif
