/*
 * config_doc.h: feedd.yaml's keys as the docs show them, printed by
 * `feedd --list-config-keys` for scripts/gen-docs, which writes the table
 * into README.md, daemon/README.md and feedd.yaml(5).
 *
 * Owns: one row per key path (type, default where it is not a number,
 * whether a reload applies a change or it needs a restart). Numeric
 * defaults and ranges are not written here: they come from config.c's
 * own table (cfg_num_row), so the docs cannot drift from what a load does.
 * Main thread, before anything starts; never allocates.
 */
#ifndef FEEDD_CONFIG_DOC_H
#define FEEDD_CONFIG_DOC_H

#include <stdio.h>

#include "feed_err.h"

/* Writes one tab-separated line per key to out: key path, type, default,
 * range ("-" where none), and "reload" or "restart" (what puts a change in
 * force). 0; -EINVAL (err says which key) when a numeric key of config.c
 * has no row here or a row names a number config.c lacks; -EIO when out
 * fails. */
int cfg_doc_print(FILE *out, struct feed_err *err);

#endif
