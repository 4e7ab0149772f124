/*
 * access.h: who a peer is and what it may read.
 *
 * Owns: the peer's identity (SO_PEERCRED at accept, plus the supplementary
 * groups its process holds, SO_PEERGROUPS), dataset access lists, and user
 * and group names from the config resolved to ids (what each user holds,
 * connections included, is quota.h's). Threads: acl_peer_read() at accept
 * and acl_allows() per request, on the loop thread; acl_parse_user() and
 * acl_parse_group() wherever the config loads (main() before the loop, a
 * worker at each reload, feedd --check-config). Passwd/group lookups may
 * block on NSS: they run at config loading and, on kernels without
 * SO_PEERGROUPS, once per connection in acl_peer_read(); never per
 * request. Never trusts anything the peer says about itself.
 */
#ifndef FEEDD_ACCESS_H
#define FEEDD_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feed_err.h"

/* A connected client's identity, read once at accept. */
struct acl_peer {
	pid_t pid;        /* at connect time; for logs only */
	uid_t uid;        /* effective uid at connect */
	gid_t gid;        /* effective gid at connect */
	gid_t *groups;    /* gid first, then the other groups it holds; owned */
	size_t ngroups;
};

#define ACL_GROUPS_SHOWN 16  /* groups acl_peer_groups_text() writes out */

/* Reads SO_PEERCRED of sock and the groups the peer's process held when it
 * connected (SO_PEERGROUPS: what setgroups(), setpriv or a container gave
 * it, whatever its passwd entry says, and for uids with no entry too) into
 * *ret (cleared with acl_peer_clear()). Before Linux 4.13 (no
 * SO_PEERGROUPS) the groups are acl_peer_from_ids()'s. -errno naming the
 * call on failure. */
int acl_peer_read(int sock, struct acl_peer *ret, struct feed_err *err);

/* "65534, 4242": p's groups for a message, the first ACL_GROUPS_SHOWN then
 * ", ... (N in all)"; cut to cap bytes (NUL included). */
void acl_peer_groups_text(const struct acl_peer *p, char *buf, size_t cap);

/* Fills *ret for uid/gid/pid from the user database: groups come from
 * getgrouplist() on uid's passwd entry, or are just gid without one (the
 * fallback of acl_peer_read() on kernels without SO_PEERGROUPS). */
int acl_peer_from_ids(uid_t uid, gid_t gid, pid_t pid, struct acl_peer *ret,
		      struct feed_err *err);

/* Frees the groups; accepts a zeroed peer. */
void acl_peer_clear(struct acl_peer *p);

/* Who may read a dataset. Empty (no "*", no ids): root and the user the
 * daemon runs as only. */
struct acl_list {
	bool any;          /* allow_users held "*" */
	uid_t *uids;       /* owned */
	size_t nuids;
	gid_t *gids;       /* owned */
	size_t ngids;
};

/* True if p may read what a guards. Root always may; self is the daemon's
 * own euid. */
bool acl_allows(const struct acl_list *a, const struct acl_peer *p, uid_t self);

/* "1000" or a user name -> uid. -ENOENT "no user named 'x'", -EINVAL for
 * an out-of-range number. */
int acl_parse_user(const char *s, uid_t *ret, struct feed_err *err);

/* "100" or a group name -> gid, like acl_parse_user(). */
int acl_parse_group(const char *s, gid_t *ret, struct feed_err *err);

#endif
