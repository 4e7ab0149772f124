/*
 * session_reload.c: the Reload request of a connection (feedctl reload).
 * Who may ask (root, or a member of the socket's group: those the
 * operator let reach the socket), starting the reload (reload.h) and
 * answering with what it did once it ends. Loop thread only; the reload's
 * loading runs on a worker, and the connection may go meanwhile: the
 * wait is then told and answers no one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedd.h"
#include "reload.h"
#include "session.h"

/* A connection waiting for its reload's end. */
struct ses_reload_wait {
	struct ses *se;            /* NULL once the connection went */
	uint32_t id;               /* the request answered */
};

/* The group that may reload: the socket file's (socket_group, or what
 * socket activation gave it), else the daemon's own. */
static gid_t ses_reload_gid(const struct feedd *d)
{
	struct stat st;

	if (stat(d->cfg->socket_path, &st) == 0)
		return st.st_gid;
	return d->cfg->has_socket_group ? d->cfg->socket_gid : getegid();
}

static bool ses_reload_allowed(const struct ses *se, gid_t gid)
{
	const struct acl_peer *p = &se->conn->peer;

	if (p->uid == 0)
		return true;
	for (size_t i = 0; i < p->ngroups; i++)
		if (p->groups[i] == gid)
			return true;
	return p->gid == gid;
}

static void ses_reload_reply(struct ses *se, uint32_t id, const struct rld_report *rep)
{
	const struct cat_reload *c = rep->cat;
	char *added[CAT_RELOAD_NAMES], *removed[CAT_RELOAD_NAMES], *repointed[CAT_RELOAD_NAMES];
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__ReloadResult rr = FEED__RELOAD_RESULT__INIT;

	rr.applied = rep->applied;
	rr.file = (char *)(rep->file ? rep->file : "");
	if (rep->applied) {
		for (size_t i = 0; i < c->nadded; i++)
			added[i] = (char *)c->added[i];
		for (size_t i = 0; i < c->nremoved; i++)
			removed[i] = (char *)c->removed[i];
		for (size_t i = 0; i < c->nrepointed; i++)
			repointed[i] = (char *)c->repointed[i];
		rr.n_added = c->nadded, rr.added = added;
		rr.n_removed = c->nremoved, rr.removed = removed;
		rr.n_repointed = c->nrepointed, rr.repointed = repointed;
	}
	rr.n_errors = rep->nerrors;
	rr.errors = (char **)rep->errors;
	rr.n_warnings = rep->nwarnings;
	rr.warnings = (char **)rep->warnings;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_RELOAD;
	reply.reload = &rr;
	ses_send_fds(se, &reply, NULL, 0);  /* too large: an Error says so */
}

static void ses_reload_done(void *arg, const struct rld_report *rep)
{
	struct ses_reload_wait *w = arg;
	struct ses *se = w->se;

	if (se) {
		struct srv_conn *c = se->conn;
		srv_conn_hold(c);  /* a failed reply closes c only once we are done */
		se->reload_wait = NULL;
		ses_reload_reply(se, w->id, rep);
		srv_conn_unhold(c);
	}
	free(w);
}

void ses_reload(struct ses *se, uint32_t id, const Feed__Reload *q)
{
	struct feed_err err = {0};
	struct ses_reload_wait *w;
	char msg[400], groups[160];
	gid_t gid = ses_reload_gid(se->d);

	(void)q;
	if (!ses_reload_allowed(se, gid)) {
		acl_peer_groups_text(&se->conn->peer, groups, sizeof(groups));
		snprintf(msg, sizeof(msg), "reload: user %u (groups %s) is neither root nor in the "
			 "socket's group %u", (unsigned)se->conn->peer.uid, groups, (unsigned)gid);
		log_warn(&se->d->log, SRV_CONN_FMT ": %s", SRV_CONN_ARGS(se->conn), msg);
		ses_error(se, id, -EPERM, msg, SES_REFUSAL);
		return;
	}
	if (se->reload_wait) {
		ses_error(se, id, -EBUSY, "reload: this connection already waits for one",
			  SES_REFUSAL);
		return;
	}
	if (!(w = calloc(1, sizeof(*w)))) {
		ses_error(se, id, -ENOMEM, "reload: out of memory", SES_REFUSAL);
		return;
	}
	*w = (struct ses_reload_wait){.se = se, .id = id};
	if (rld_request(se->d, ses_reload_done, w, &err) < 0) {
		free(w);
		ses_error(se, id, err.code, err.msg, SES_REFUSAL);
		return;
	}
	log_info(&se->d->log, SRV_CONN_FMT ": reload asked", SRV_CONN_ARGS(se->conn));
	se->reload_wait = w;
}

void ses_reload_forget(struct ses *se)
{
	if (se->reload_wait)
		se->reload_wait->se = NULL;
	se->reload_wait = NULL;
}
