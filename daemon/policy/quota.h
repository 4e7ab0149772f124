/*
 * quota.h: what each user holds of the daemon — connections, streams,
 * credits and slot bytes — against the config's per-user limits.
 *
 * Counts change in one place each: a connection is counted at accept and
 * given back when it closes; a stream (with its shared-memory bytes) is
 * counted before any of its memory exists and given back when it closes
 * or fails to open, so two opens racing cannot both slip under a limit.
 * Loop thread only; never blocks; allocates one small entry per user
 * holding anything.
 */
#ifndef FEEDD_QUOTA_H
#define FEEDD_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feed_err.h"

struct cfg_limits;

/* What one user holds. */
struct quota_use {
	uint32_t conns;            /* open connections */
	uint32_t streams;          /* open streams, and opens being prepared */
	uint64_t bytes;            /* shared memory of those streams and groups */
	uint32_t groups;           /* groups created (their data regions) */
	uint64_t device_bytes;     /* GPU memory of their device slots (CUDA IPC) */
};

/* Zero-initialise; free with quota_free(). */
struct quota {
	struct quota_user { uid_t uid; struct quota_use use; } *v;  /* owned; users holding anything */
	size_t len, cap;
};

/* Counts a connection of uid unless it holds max_conns already: then
 * -EUSERS with err naming the user and the limit, and nothing changes.
 * -ENOMEM. */
int quota_conn_take(struct quota *q, uid_t uid, uint64_t max_conns, struct feed_err *err);
void quota_conn_give(struct quota *q, uid_t uid);

/* Counts a stream of `credits` slots holding `bytes` of shared memory for
 * uid, unless that breaks a limit of lim: -EUSERS (max_streams), -EINVAL
 * (max_credits) or -ENOSPC (max_slot_bytes), err naming the user, what
 * they hold and the limit; nothing changes then. -ENOMEM. */
int quota_stream_take(struct quota *q, uid_t uid, uint32_t credits, uint64_t bytes,
		      const struct cfg_limits *lim, struct feed_err *err);
void quota_stream_give(struct quota *q, uid_t uid, uint64_t bytes);

/* Counts a group's data region (bytes) for uid, its creator, until the
 * group ends (it outlives any one member); each membership counts as a
 * stream (quota_stream_take, with the member's own regions' bytes).
 * -ENOSPC (max_slot_bytes) naming the limit; -ENOMEM. */
int quota_group_take(struct quota *q, uid_t uid, uint64_t bytes, const struct cfg_limits *lim,
		     struct feed_err *err);
void quota_group_give(struct quota *q, uid_t uid, uint64_t bytes);

/* Counts `bytes` of device slots (GPU memory feedd allocates for a stream
 * of uid, delivery/devslots.h) unless that exceeds lim->max_device_bytes:
 * then -ENOSPC naming the user, what they hold and the limit. -ENOMEM. */
int quota_device_take(struct quota *q, uid_t uid, uint64_t bytes, const struct cfg_limits *lim,
		      struct feed_err *err);
void quota_device_give(struct quota *q, uid_t uid, uint64_t bytes);

/* What uid holds (zeros for a user holding nothing). */
struct quota_use quota_of(const struct quota *q, uid_t uid);

void quota_free(struct quota *q);

#endif
