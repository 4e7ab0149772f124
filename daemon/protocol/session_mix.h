/*
 * session_mix.h: opening a mixture (OpenStream.mixture, or a configured
 * mixture's name in OpenStream.dataset): its sources resolved and checked
 * (access, schemas that agree), the positions it is read at, its resume
 * token's blend, and the delivery's mixture (delivery/mixture.h). Loop
 * thread; session_stream.c calls it at each step of an open.
 */
#ifndef FEEDD_SESSION_MIX_H
#define FEEDD_SESSION_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "feed.pb-c.h"
#include "feed_err.h"
#include "fmt.h"
#include "mixture.h"

struct cat_entry;
struct dlv_spec;
struct pipe_plan;
struct ses;

#define SES_MIX_STATE_MAX 192   /* a packed MixtureState of MIXT_MAX_SOURCES */

struct ses_mix {
	char name[96];              /* for messages: "mixture 'lm'", "mixture (web, code)" */
	char label[64];             /* for status and metrics: "lm", "web+code" (cut) */
	uint32_t n;
	const struct cat_entry *e[MIXT_MAX_SOURCES]; /* a reference each */
	struct mixt_spec spec;      /* sources' ds borrowed from e[] */
	uint64_t epoch_rows;        /* the mixture's epoch */
	uint64_t asked_rows;        /* samples_per_epoch, 0: the sources' sum */
	double repeat[MIXT_MAX_SOURCES]; /* each source's caps as asked */
	uint64_t choose[MIXT_MAX_SOURCES];
	uint8_t state[SES_MIX_STATE_MAX]; /* StreamOpened.mixture, once made */
	size_t state_len;
};

/* Whether o opens a mixture: sources given, or a configured mixture's name. */
bool ses_mix_asked(const struct ses *se, const Feed__OpenStream *o);

/* Resolves a mixture's sources (access as for a dataset). 0 with *ret, or
 * < 0 once the refusal is answered (naming the source). */
int ses_mix_open(struct ses *se, uint32_t id, const Feed__OpenStream *o, struct ses_mix **ret);

/* Checks the options a mixture allows, the sources' schemas (a mismatch
 * names the source and the field) and fills sp's positions (sequential
 * over the mixture's epoch rows) and *ret_schema (the fields' largest
 * records over every source) to plan the pipeline on. */
int ses_mix_spec(struct ses_mix *m, const Feed__OpenStream *o, struct dlv_spec *sp,
		 struct fmt_schema *ret_schema, struct feed_err *err);

/* Packing (plan->pack concat or pack; else nothing): each source's rows
 * cut from its own documents (its lengths.u32) over its own passes, its
 * epoch counted in rows (concat: its rows per pass times repeat, or
 * choose; pack: the least rows a pass holds, every row full, and no
 * repeat or choose), and sp's positions over the mixture's rows. -EINVAL
 * naming the source. O(sources). */
int ses_mix_rows(struct ses_mix *m, const struct pipe_plan *plan, struct dlv_spec *sp,
		 struct feed_err *err);

/* Appends the int32 field `source` to plan's out schema (*ret_field). */
int ses_mix_plan(struct pipe_plan *plan, uint32_t *ret_field, struct feed_err *err);

/* A token's blend (ResumeToken.mixture): each source continues from its
 * position, under this request's weights from there. */
int ses_mix_resume(struct ses_mix *m, const Feed__ResumeToken *t, struct feed_err *err);

/* The delivery's mixture into sp (sp->mix: the delivery's once dlv_new()
 * succeeds) and the reply's state. */
int ses_mix_make(struct ses_mix *m, struct dlv_spec *sp, struct feed_err *err);

/* A reference on every source for the delivery (dlv_spec.on_free_arg),
 * dropped by ses_mix_refs_put (its on_free). NULL when out of memory. */
void *ses_mix_refs_get(const struct ses_mix *m);
void ses_mix_refs_put(void *refs);

void ses_mix_free(struct ses_mix *m);  /* drops its references; NULL is fine */

#endif
