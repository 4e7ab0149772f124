/*
 * access.c: peer identity, access lists and name resolution (see
 * access.h; what each user holds is quota.c's). Loop thread (and config
 * loading before the loop starts). Never logs: callers log a refusal
 * once, where they handle it.
 */
#include "access.h"

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACL_NSS_BUF 16384  /* getpwnam_r/getgrnam_r scratch; retried larger */

/* Parses a decimal id below (uid_t)-1 (which means "no change" to the
 * kernel). Returns 1 if s is a number, 0 if not, -EINVAL if out of range. */
static int acl_parse_id(const char *s, unsigned long *ret)
{
	char *end;

	if (!*s || strspn(s, "0123456789") != strlen(s))
		return 0;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || v >= (unsigned long)(uid_t)-1)
		return -EINVAL;
	*ret = v;
	return 1;
}

/* One name-service lookup into buf: 0 with *ret_found (and *ret_id when
 * found), or the errno getpwnam_r/getgrnam_r returned. */
typedef int acl_nss_fn(const char *name, char *buf, size_t cap, unsigned long *ret_id,
		       bool *ret_found);

static int acl_nss_user(const char *name, char *buf, size_t cap, unsigned long *ret_id,
			bool *ret_found)
{
	struct passwd pw, *res = NULL;
	int r = getpwnam_r(name, &pw, buf, cap, &res);

	*ret_found = r == 0 && res;
	if (*ret_found)
		*ret_id = pw.pw_uid;
	return r;
}

static int acl_nss_group(const char *name, char *buf, size_t cap, unsigned long *ret_id,
			 bool *ret_found)
{
	struct group gr, *res = NULL;
	int r = getgrnam_r(name, &gr, buf, cap, &res);

	*ret_found = r == 0 && res;
	if (*ret_found)
		*ret_id = gr.gr_gid;
	return r;
}

/* "1000" or a name of `kind` ("user", "group") -> its id, through lookup,
 * growing the scratch buffer while it says ERANGE. */
static int acl_parse_name(const char *kind, const char *s, acl_nss_fn *lookup,
			  unsigned long *ret, struct feed_err *err)
{
	int r = acl_parse_id(s, ret);

	if (r < 0)
		return feed_err_set(err, r, "%s id '%s' out of range", kind, s);
	if (r > 0)
		return 0;
	for (size_t cap = ACL_NSS_BUF;; cap *= 4) {
		bool found = false;
		char *buf = malloc(cap);
		if (!buf)
			return feed_err_set(err, -ENOMEM, "%s '%s': out of memory", kind, s);
		r = lookup(s, buf, cap, ret, &found);
		free(buf);
		if (r == ERANGE && cap < (1u << 24))
			continue;
		if (r)
			return feed_err_set(err, -r, "%s '%s': %s", kind, s, strerror(r));
		return found ? 0 : feed_err_set(err, -ENOENT, "no %s named '%s'", kind, s);
	}
}

int acl_parse_user(const char *s, uid_t *ret, struct feed_err *err)
{
	unsigned long id;
	int r = acl_parse_name("user", s, acl_nss_user, &id, err);

	if (r == 0)
		*ret = (uid_t)id;
	return r;
}

int acl_parse_group(const char *s, gid_t *ret, struct feed_err *err)
{
	unsigned long id;
	int r = acl_parse_name("group", s, acl_nss_group, &id, err);

	if (r == 0)
		*ret = (gid_t)id;
	return r;
}

/* The groups of user name with primary group base, grown until they fit. */
static int acl_grouplist(const char *name, gid_t base, gid_t **ret, size_t *ret_n)
{
	int n = 32;

	for (int tries = 0; tries < 8; tries++) {
		gid_t *g = malloc(sizeof(*g) * (size_t)n);
		int got = n;
		if (!g)
			return -ENOMEM;
		if (getgrouplist(name, base, g, &got) >= 0) {
			*ret = g;
			*ret_n = (size_t)got;
			return 0;
		}
		free(g);
		n = got > n ? got : n * 2;  /* got: the size it needs */
	}
	return -E2BIG;
}

/* The passwd entry's groups of uid into p (none if it has no entry). */
static int acl_peer_groups(struct acl_peer *p, struct feed_err *err)
{
	char buf[ACL_NSS_BUF];
	struct passwd pw, *res = NULL;

	int r = getpwuid_r(p->uid, &pw, buf, sizeof(buf), &res);
	if (r || !res)
		return 0;  /* no entry (or NSS failing): the credential gid only */
	r = acl_grouplist(pw.pw_name, pw.pw_gid, &p->groups, &p->ngroups);
	if (r < 0)
		return feed_err_set(err, r, "groups of user %u: %s", (unsigned)p->uid, strerror(-r));
	return 0;
}

static bool acl_has_gid(const gid_t *g, size_t n, gid_t gid)
{
	for (size_t i = 0; i < n; i++)
		if (g[i] == gid)
			return true;
	return false;
}

int acl_peer_from_ids(uid_t uid, gid_t gid, pid_t pid, struct acl_peer *ret,
		      struct feed_err *err)
{
	struct acl_peer p = {.pid = pid, .uid = uid, .gid = gid};

	int r = acl_peer_groups(&p, err);
	if (r < 0)
		return r;
	if (!acl_has_gid(p.groups, p.ngroups, gid)) {
		gid_t *g = realloc(p.groups, sizeof(*g) * (p.ngroups + 1));
		if (!g) {
			acl_peer_clear(&p);
			return feed_err_set(err, -ENOMEM, "groups of user %u: out of memory",
					    (unsigned)uid);
		}
		g[p.ngroups++] = gid;
		p.groups = g;
	}
	*ret = p;
	return 0;
}

/* The supplementary groups the peer's process held at connect
 * (SO_PEERGROUPS, Linux 4.13), into a new array; the buffer grows to the
 * size the kernel asks for on ERANGE. -ENOPROTOOPT on older kernels. */
static int acl_sock_groups(int sock, gid_t **ret, size_t *ret_n)
{
	socklen_t len = 32 * sizeof(gid_t);

	for (int tries = 0; tries < 4; tries++) {
		gid_t *g = malloc(len ? len : sizeof(gid_t));
		socklen_t got = len;
		if (!g)
			return -ENOMEM;
		if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, g, &got) == 0) {
			*ret = g;
			*ret_n = got / sizeof(gid_t);
			return 0;
		}
		int e = errno;
		free(g);
		if (e != ERANGE)
			return -e;
		len = got > len ? got : len * 2;  /* got: the size it needs */
	}
	return -E2BIG;  /* the groups kept changing size: cannot happen once connected */
}

int acl_peer_read(int sock, struct acl_peer *ret, struct feed_err *err)
{
	struct acl_peer p = {0};
	struct ucred cr;
	socklen_t len = sizeof(cr);
	gid_t *g = NULL;
	size_t n = 0;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return feed_err_set(err, -errno, "SO_PEERCRED: %s", strerror(errno));
	int r = acl_sock_groups(sock, &g, &n);
	if (r == -ENOPROTOOPT)  /* before Linux 4.13: what the passwd entry says */
		return acl_peer_from_ids(cr.uid, cr.gid, cr.pid, ret, err);
	if (r < 0)
		return feed_err_set(err, r, "SO_PEERGROUPS of uid %u: %s", (unsigned)cr.uid,
				    strerror(-r));
	/* The primary group first, then the supplementary ones not already it. */
	p.groups = malloc(sizeof(*p.groups) * (n + 1));
	if (!p.groups) {
		free(g);
		return feed_err_set(err, -ENOMEM, "groups of uid %u: out of memory",
				    (unsigned)cr.uid);
	}
	p.pid = cr.pid;
	p.uid = cr.uid;
	p.gid = cr.gid;
	p.groups[p.ngroups++] = cr.gid;
	for (size_t i = 0; i < n; i++)
		if (!acl_has_gid(p.groups, p.ngroups, g[i]))
			p.groups[p.ngroups++] = g[i];
	free(g);
	*ret = p;
	return 0;
}

void acl_peer_groups_text(const struct acl_peer *p, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < p->ngroups && n < cap; i++) {
		int m = i < ACL_GROUPS_SHOWN
			? snprintf(buf + n, cap - n, "%s%u", i ? ", " : "", (unsigned)p->groups[i])
			: snprintf(buf + n, cap - n, ", ... (%zu in all)", p->ngroups);
		if (m < 0)
			break;
		n += (size_t)m;
		if (i >= ACL_GROUPS_SHOWN)
			break;
	}
}

void acl_peer_clear(struct acl_peer *p)
{
	free(p->groups);
	p->groups = NULL;
	p->ngroups = 0;
}

bool acl_allows(const struct acl_list *a, const struct acl_peer *p, uid_t self)
{
	if (p->uid == 0 || a->any)
		return true;
	if (!a->nuids && !a->ngids)
		return p->uid == self;
	for (size_t i = 0; i < a->nuids; i++)
		if (a->uids[i] == p->uid)
			return true;
	for (size_t i = 0; i < a->ngids; i++)
		if (acl_has_gid(p->groups, p->ngroups, a->gids[i]))
			return true;
	return false;
}
