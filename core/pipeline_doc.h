/*
 * pipeline_doc.h: one line saying what each pipeline op does, for the
 * people who pick them (`feedd --list-ops`, the ListOps request that
 * feedclient.ops() sends), defined in pipeline_ops.c beside the op table
 * (names, keys and defaults: pipe_op_usage()).
 *
 * Pure data, any thread.
 */
#ifndef FEED_PIPELINE_DOC_H
#define FEED_PIPELINE_DOC_H

#include <stdint.h>

/* What op kind k (enum pipe_kind) does, in one line ("" for a kind that
 * has no line yet, NULL past the last kind). Static string. */
const char *pipe_op_summary(uint32_t k);

#endif
