/*
 * client_reload.c: libfeedclient's Reload request (feed/client.h,
 * feed_reload()) and the conversion of its reply. Caller's thread. Never
 * trusts the reply's counts: each is bounded before it sizes anything.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

#define CL_RELOAD_MAX 4096  /* entries of any one list */

/* Bytes the strings of list take (with their NULs), or -1 if too many. */
static long cl_strings(char **list, size_t n)
{
	size_t bytes = 0;

	if (n > CL_RELOAD_MAX)
		return -1;
	for (size_t i = 0; i < n; i++)
		bytes += strlen(list[i]) + 1;
	return (long)bytes;
}

/* Copies list into *slots (pointers) and *pool (strings); returns the
 * slots' start. */
static const char *const *cl_copy_list(char **list, size_t n, const char ***slots, char **pool)
{
	const char **out = *slots;

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(list[i]) + 1;
		memcpy(*pool, list[i], len);
		out[i] = *pool;
		*pool += len;
	}
	*slots += n;
	return out;
}

/* One allocation: the struct, then every pointer, then every string. */
static int cl_reload_build(struct feed_conn *conn, const Feed__ReloadResult *rr,
			   struct feed_reload_result **ret)
{
	char **lists[5] = {rr->added, rr->removed, rr->repointed, rr->errors, rr->warnings};
	size_t ns[5] = {rr->n_added, rr->n_removed, rr->n_repointed, rr->n_errors, rr->n_warnings};
	size_t nptr = 0, strings = strlen(rr->file) + 1;

	for (int k = 0; k < 5; k++) {
		long b = cl_strings(lists[k], ns[k]);
		if (b < 0)
			return cl_bad_reply(conn, "reload result out of range");
		strings += (size_t)b;
		nptr += ns[k];
	}
	struct feed_reload_result *r = calloc(1, sizeof(*r) + nptr * sizeof(char *) + strings);
	if (!r)
		return cl_fail(conn, -ENOMEM, "out of memory for a reload result");
	const char **slots = (const char **)(r + 1);
	char *pool = (char *)(slots + nptr);
	size_t flen = strlen(rr->file) + 1;
	memcpy(pool, rr->file, flen);
	r->file = pool;
	pool += flen;
	r->applied = rr->applied;
	r->nadded = ns[0], r->added = cl_copy_list(lists[0], ns[0], &slots, &pool);
	r->nremoved = ns[1], r->removed = cl_copy_list(lists[1], ns[1], &slots, &pool);
	r->nrepointed = ns[2], r->repointed = cl_copy_list(lists[2], ns[2], &slots, &pool);
	r->nerrors = ns[3], r->errors = cl_copy_list(lists[3], ns[3], &slots, &pool);
	r->nwarnings = ns[4], r->warnings = cl_copy_list(lists[4], ns[4], &slots, &pool);
	*ret = r;
	return 0;
}

FEED_API int feed_reload(struct feed_conn *conn, struct feed_reload_result **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Reload q = FEED__RELOAD__INIT;
	Feed__Reply *rep = NULL;
	struct feed_reload_result *r = NULL;

	if (!conn || !ret)
		return -EINVAL;
	req.body_case = FEED__REQUEST__BODY_RELOAD;
	req.reload = &q;
	int rc = cl_call(conn, &req, &rep);
	if (rc < 0)
		return rc;
	if (rep->body_case != FEED__REPLY__BODY_RELOAD)
		rc = cl_bad_reply(conn, "expected a reload result");
	else if ((rc = cl_reload_build(conn, rep->reload, &r)) == 0 && !r->applied)
		rc = cl_fail(conn, -EINVAL, "reload of %s refused (%zu errors)%s%s",
			     r->file[0] ? r->file : "the config", r->nerrors,
			     r->nerrors ? ": " : "", r->nerrors ? r->errors[0] : "");
	feed__reply__free_unpacked(rep, NULL);
	if (r)
		*ret = r;
	return rc;
}

FEED_API void feed_reload_result_free(struct feed_reload_result *r)
{
	free(r);
}
