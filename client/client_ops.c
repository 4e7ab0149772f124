/*
 * client_ops.c: feed_list_ops(), the daemon's pipeline ops (its ListOps
 * reply: name, usage line and summary of each), copied into one block the
 * caller frees. The daemon's own tables answer, so a client never keeps a
 * list of its own that could drift from what that daemon accepts.
 * The thread that owns the connection; never prints.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define CL_OPS_MAX 1024   /* ops a reply may list: far more than feedd has */

/* Copies s (NULL: "") into *at, printable ASCII only; returns the copy. */
static const char *ops_text(char **at, const char *s)
{
	char *out = *at;
	size_t i = 0;

	for (; s && s[i]; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
	*at = out + i + 1;
	return out;
}

static size_t ops_len(const char *s)
{
	return (s ? strlen(s) : 0) + 1;
}

/* The list of reply l in one allocation: the struct, the ops, the text. */
static int ops_build(struct feed_conn *conn, const Feed__OpList *l, struct feed_op_list **ret)
{
	size_t text = 0;

	if (l->n_ops > CL_OPS_MAX)
		return cl_bad_reply(conn, "more ops than any feedd has");
	for (size_t i = 0; i < l->n_ops; i++)
		text += ops_len(l->ops[i]->name) + ops_len(l->ops[i]->usage) +
			ops_len(l->ops[i]->summary);
	struct feed_op_list *list = malloc(sizeof(*list) + l->n_ops * sizeof(struct feed_op) + text);
	if (!list)
		return cl_fail(conn, -ENOMEM, "ops: out of memory");
	struct feed_op *ops = (struct feed_op *)(list + 1);
	char *at = (char *)(ops + l->n_ops);
	for (size_t i = 0; i < l->n_ops; i++) {
		ops[i].name = ops_text(&at, l->ops[i]->name);
		ops[i].usage = ops_text(&at, l->ops[i]->usage);
		ops[i].summary = ops_text(&at, l->ops[i]->summary);
	}
	list->count = l->n_ops;
	list->ops = ops;
	*ret = list;
	return 0;
}

FEED_API int feed_list_ops(struct feed_conn *conn, struct feed_op_list **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__ListOps q = FEED__LIST_OPS__INIT;
	Feed__Reply *rep = NULL;

	if (!conn || !ret)
		return -EINVAL;
	req.body_case = FEED__REQUEST__BODY_LIST_OPS;
	req.list_ops = &q;
	int r = cl_call(conn, &req, &rep);
	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_OPS)
		r = cl_bad_reply(conn, "expected the list of ops");
	else
		r = ops_build(conn, rep->ops, ret);
	feed__reply__free_unpacked(rep, NULL);
	return r;
}

FEED_API void feed_op_list_free(struct feed_op_list *list)
{
	free(list);
}
