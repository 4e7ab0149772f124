/*
 * quota.c: per-user counts against the limits (see quota.h). Loop thread.
 */
#include "quota.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "config.h"

static struct quota_user *find(const struct quota *q, uid_t uid)
{
	for (size_t i = 0; i < q->len; i++)
		if (q->v[i].uid == uid)
			return &q->v[i];
	return NULL;
}

/* uid's entry, made if missing; NULL when out of memory. */
static struct quota_user *get(struct quota *q, uid_t uid)
{
	struct quota_user *u = find(q, uid);

	if (u)
		return u;
	if (q->len == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 8;
		void *v = realloc(q->v, cap * sizeof(*q->v));
		if (!v)
			return NULL;
		q->v = v;
		q->cap = cap;
	}
	q->v[q->len] = (struct quota_user){.uid = uid};
	return &q->v[q->len++];
}

/* Drops u's entry once it holds nothing: the table stays as small as the
 * set of users holding something. */
static void trim(struct quota *q, struct quota_user *u)
{
	if (u->use.conns == 0 && u->use.streams == 0 && u->use.bytes == 0 && u->use.groups == 0 &&
	    u->use.device_bytes == 0)
		*u = q->v[--q->len];
}

int quota_conn_take(struct quota *q, uid_t uid, uint64_t max_conns, struct feed_err *err)
{
	struct quota_use now = quota_of(q, uid);

	if (now.conns >= max_conns)
		return feed_err_set(err, -EUSERS, "user %u already has %u connections "
				    "(limits.max_connections = %llu)", (unsigned)uid, now.conns,
				    (unsigned long long)max_conns);
	struct quota_user *u = get(q, uid);
	if (!u)
		return feed_err_set(err, -ENOMEM, "user %u: out of memory counting connections",
				    (unsigned)uid);
	u->use.conns++;
	return 0;
}

void quota_conn_give(struct quota *q, uid_t uid)
{
	struct quota_user *u = find(q, uid);

	assert(u && u->use.conns > 0);
	if (!u)
		return;
	u->use.conns--;
	trim(q, u);
}

int quota_stream_take(struct quota *q, uid_t uid, uint32_t credits, uint64_t bytes,
		      const struct cfg_limits *lim, struct feed_err *err)
{
	struct quota_use now = quota_of(q, uid);

	if (now.streams >= lim->max_streams)
		return feed_err_set(err, -EUSERS, "user %u: %u streams open, limit max_streams is %llu",
				    (unsigned)uid, now.streams,
				    (unsigned long long)lim->max_streams);
	if (credits > lim->max_credits)
		return feed_err_set(err, -EINVAL, "credits %u exceed the limit max_credits %llu",
				    credits, (unsigned long long)lim->max_credits);
	if (bytes > lim->max_slot_bytes || now.bytes > lim->max_slot_bytes - bytes)
		return feed_err_set(err, -ENOSPC, "user %u: %llu bytes of slots held, %llu more would "
				    "exceed max_slot_bytes %llu", (unsigned)uid,
				    (unsigned long long)now.bytes, (unsigned long long)bytes,
				    (unsigned long long)lim->max_slot_bytes);
	struct quota_user *u = get(q, uid);
	if (!u)
		return feed_err_set(err, -ENOMEM, "user %u: out of memory counting streams",
				    (unsigned)uid);
	u->use.streams++;
	u->use.bytes += bytes;
	return 0;
}

void quota_stream_give(struct quota *q, uid_t uid, uint64_t bytes)
{
	struct quota_user *u = find(q, uid);

	assert(u && u->use.streams > 0 && u->use.bytes >= bytes);
	if (!u)
		return;
	u->use.streams--;
	u->use.bytes -= bytes;
	trim(q, u);
}

int quota_device_take(struct quota *q, uid_t uid, uint64_t bytes, const struct cfg_limits *lim,
		      struct feed_err *err)
{
	struct quota_use now = quota_of(q, uid);
	struct quota_user *u;

	if (bytes > lim->max_device_bytes || now.device_bytes > lim->max_device_bytes - bytes)
		return feed_err_set(err, -ENOSPC, "user %u: %llu bytes of device slots held, %llu "
				    "more would exceed max_device_bytes %llu", (unsigned)uid,
				    (unsigned long long)now.device_bytes, (unsigned long long)bytes,
				    (unsigned long long)lim->max_device_bytes);
	if (!(u = get(q, uid)))
		return feed_err_set(err, -ENOMEM, "out of memory for user %u's quota", (unsigned)uid);
	u->use.device_bytes += bytes;
	return 0;
}

void quota_device_give(struct quota *q, uid_t uid, uint64_t bytes)
{
	struct quota_user *u = find(q, uid);

	assert(u && u->use.device_bytes >= bytes);
	if (!u)
		return;
	u->use.device_bytes -= bytes;
	trim(q, u);
}

int quota_group_take(struct quota *q, uid_t uid, uint64_t bytes, const struct cfg_limits *lim,
		     struct feed_err *err)
{
	struct quota_use now = quota_of(q, uid);

	if (bytes > lim->max_slot_bytes || now.bytes > lim->max_slot_bytes - bytes)
		return feed_err_set(err, -ENOSPC, "user %u: %llu bytes of slots held, a group's "
				    "%llu more would exceed max_slot_bytes %llu", (unsigned)uid,
				    (unsigned long long)now.bytes, (unsigned long long)bytes,
				    (unsigned long long)lim->max_slot_bytes);
	struct quota_user *u = get(q, uid);
	if (!u)
		return feed_err_set(err, -ENOMEM, "user %u: out of memory counting groups",
				    (unsigned)uid);
	u->use.groups++;
	u->use.bytes += bytes;
	return 0;
}

void quota_group_give(struct quota *q, uid_t uid, uint64_t bytes)
{
	struct quota_user *u = find(q, uid);

	assert(u && u->use.groups > 0 && u->use.bytes >= bytes);
	if (!u)
		return;
	u->use.groups--;
	u->use.bytes -= bytes;
	trim(q, u);
}

struct quota_use quota_of(const struct quota *q, uid_t uid)
{
	const struct quota_user *u = find(q, uid);
	return u ? u->use : (struct quota_use){0};
}

void quota_free(struct quota *q)
{
	free(q->v);
	*q = (struct quota){0};
}
