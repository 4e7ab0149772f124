/*
 * session_group.h: the groups of the daemon (DESIGN.md "Sharing between
 * jobs"): by user and name (a name the config shares: by name), the canonical
 * spec every member must match, the group's delivery (delivery.h: one data
 * region, one control and release region per member) and the timer that
 * detaches members idle past the group timeout.
 *
 * A group lives while it has members, counting those still opening: the
 * first open creates it (and counts its data region against its creator's
 * limits, quota.h), the last member to leave closes its delivery. Loop
 * thread only; a leaf of the session (session_stream.c opens and closes
 * members): it calls no other file of protocol/, and looks at its members
 * only through the struct ses_group_member_ops it is given.
 */
#ifndef FEEDD_SESSION_GROUP_H
#define FEEDD_SESSION_GROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "delivery.h"
#include "feed_err.h"

struct dstate;
struct cat_entry;
struct ses_group;
struct ses_stream;
struct ses_stream_view;

/* How a group looks at its members, supplied by the streams above it. */
struct ses_group_member_ops {
	/* What status shows of the member (session.h). */
	void (*view)(const struct ses_stream *ss, struct ses_stream_view *ret);
	/* Logs what the member's client did wrong, and its detach. */
	void (*report)(struct ses_stream *ss);
};

/* What every member of a group must have asked for: the stream's
 * canonical spec. Strings are borrowed for the call. */
struct ses_group_key {
	const struct cat_entry *e;   /* the dataset (its name and version) */
	const char *pipeline;        /* canonical text */
	uint64_t pipeline_hash;
	uint64_t seed;
	uint32_t batch;
	int order;                   /* enum ord_mode */
	uint32_t window;             /* effective: block-window and node order only */
	uint32_t nodes;              /* node order only, else 0 */
	bool deal_fixed;             /* node order only */
	uint32_t rank, world;
	bool drop_last, pad_last, eval;
	uint32_t on_error;           /* a sample that fails: its batch is the group's */
	uint64_t max_bad;            /* effective (the default filled in) */
	bool shared;                 /* the config shares this name on the dataset
				      * across users (cfg_group_shared()) */
};

/* The group called name of user uid (k->shared: the one group of that
 * name shared across users). A group belongs to its user: the same name
 * from two users is two groups. Returns 0 with *ret the group
 * (referenced: the caller's member), or 0 with *ret NULL when there is
 * none; -EINVAL naming the first parameter of k that differs
 * ("batch_size 128 differs from the group's 256"). */
int ses_group_find(struct dstate *d, const char *name, uid_t uid, const struct ses_group_key *k,
		   struct ses_group **ret, struct feed_err *err);

/* A new group over dlv (made with spec.group), its data region of
 * data_bytes counted for uid (quota_group_take()); ops (static, outliving
 * the group) is how it looks at its members. On success the group
 * owns dlv and the caller holds one reference. On failure the caller
 * still owns dlv. -EUSERS/-ENOSPC naming the limit, -ENOMEM. */
int ses_group_new(struct dstate *d, const char *name, uid_t uid, const struct ses_group_key *k,
		  struct dlv *dlv, uint32_t depth, uint64_t data_bytes,
		  const struct ses_group_member_ops *ops, struct ses_group **ret,
		  struct feed_err *err);

/* The last reference closes the delivery, gives the quota back and frees
 * the group (its timer first). Accepts NULL. */
void ses_group_unref(struct ses_group *g);

struct dlv *ses_group_dlv(const struct ses_group *g);
const char *ses_group_name(const struct ses_group *g);
uint32_t ses_group_depth(const struct ses_group *g);
/* The job status and metrics show for the group (its creator's). */
void ses_group_set_job(struct ses_group *g, const char *job);

/* A reload was applied (dstate.reloaded): every running group's timer
 * looks for idle members at the new group_timeout_ms's period from now. */
void ses_groups_reloaded(struct dstate *d);

/* A member's delivery began: starts the group's delivery and its
 * detach timer at the first. ss is listed until ses_group_member_gone().
 * Returns the members now listed. */
uint32_t ses_group_member_open(struct ses_group *g, struct ses_stream *ss);
void ses_group_member_gone(struct ses_group *g, struct ses_stream *ss);

#endif
