/*
 * metrics_doc.h: the Prometheus families feedd exports, as the docs show
 * them, printed by `feedd --list-metrics` for scripts/gen-docs (which
 * writes the table into README.md, daemon/README.md and feedd(8)).
 *
 * Owns: one row per family (name, type, labels, when it is shown, help).
 * A test scrapes a real feedd and compares every family with these rows,
 * so a family added to metrics.c without its row fails there.
 * met_doc_print(): main thread, before anything starts.
 */
#ifndef FEEDD_METRICS_DOC_H
#define FEEDD_METRICS_DOC_H

#include <stdio.h>

/* Writes one tab-separated line per family to out: name, type, labels
 * (comma-separated, "-" for none), when it is shown, help. 0, or -EIO when
 * out fails. */
int met_doc_print(FILE *out);

/* The help text of family `name` (as # HELP says it) and its type
 * (*ret_type: "gauge" or "counter"); NULL when feedd has no such family.
 * What metrics.c and metrics_gpu.c render: these rows are the only place
 * a family's type and help are written. Any thread (a constant table). */
const char *met_doc_find(const char *name, const char **ret_type);

#endif
