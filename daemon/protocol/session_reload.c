/*
 * session_reload.c: the Reload request of a connection (feedctl reload).
 * Who may ask (root, feedd's own user, or a member of the config's
 * admin_group: reaching
 * the socket is what every trainer may do, reloading is not), starting
 * the reload (reload.h) and answering with what it did once it ends,
 * naming only the datasets the asker may read (the rest are counted).
 * Loop thread only; the reload's
 * loading runs on a worker, and the connection may go meanwhile: the
 * wait is then told and answers no one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstate.h"
#include "reload.h"
#include "session.h"

/* A connection waiting for its reload's end. */
struct ses_reload_wait {
	struct ses *se;            /* NULL once the connection went */
	uint32_t id;               /* the request answered */
};

/* Root, feedd's own user (which may signal it with SIGHUP anyway: a
 * unit's ExecReload or a pod's reloader running as that user), or a
 * member of admin_group (none configured: those two alone). */
static bool ses_reload_allowed(const struct ses *se)
{
	const struct acl_peer *p = &se->conn->peer;
	const struct cfg *c = se->d->cfg;

	if (p->uid == 0 || p->uid == se->d->self_uid)
		return true;
	if (!c->has_admin_group)
		return false;
	for (size_t i = 0; i < p->ngroups; i++)
		if (p->groups[i] == c->admin_gid)
			return true;
	return p->gid == c->admin_gid;
}

/* Whether the asker may read dataset name in c (absent from c: no). */
static bool ses_reload_sees(const struct ses *se, const struct cfg *c, const char *name)
{
	const struct cfg_dataset *ds = c ? cfg_dataset_find(c, name) : NULL;

	return ds && acl_allows(&ds->acl, &se->conn->peer, se->d->self_uid);
}

/* Whether msg names ('NAME') a dataset of before or now the asker may
 * not read in either: such a line is left out of the answer. */
static bool ses_reload_hides(const struct ses *se, const struct rld_report *rep, const char *msg)
{
	const struct cfg *cs[2] = {rep->before, se->d->cfg};
	char quoted[CFG_NAME_MAX + 2];

	for (int k = 0; k < 2; k++)
		for (size_t i = 0; cs[k] && i < cs[k]->ndatasets; i++) {
			const char *name = cs[k]->datasets[i].name;
			snprintf(quoted, sizeof(quoted), "'%s'", name);
			if (strstr(msg, quoted) && !ses_reload_sees(se, rep->before, name) &&
			    !ses_reload_sees(se, se->d->cfg, name))
				return true;
		}
	return false;
}

/* The names of list (n) that c lets the asker read, into out; the count. */
static size_t ses_reload_names(const struct ses *se, const struct cfg *c,
			       const char (*list)[CFG_NAME_MAX], size_t n, char **out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (ses_reload_sees(se, c, list[i]))
			out[k++] = (char *)list[i];
	return k;
}

/* The lines of in (n) that name no dataset hidden from the asker, into
 * out, with one line at the end counting those left out. */
static size_t ses_reload_lines(const struct ses *se, const struct rld_report *rep,
			       const char *const *in, size_t n, char **out, char *note,
			       size_t cap)
{
	size_t k = 0, hidden = 0;

	for (size_t i = 0; i < n; i++)
		if (ses_reload_hides(se, rep, in[i]))
			hidden++;
		else
			out[k++] = (char *)in[i];
	if (hidden) {
		snprintf(note, cap, "%zu more about datasets user %u may not read (see feedd's log)",
			 hidden, (unsigned)se->conn->peer.uid);
		out[k++] = note;
	}
	return k;
}

static void ses_reload_reply(struct ses *se, uint32_t id, const struct rld_report *rep)
{
	const struct cat_reload *c = rep->cat;
	char *added[CAT_RELOAD_NAMES], *removed[CAT_RELOAD_NAMES], *repointed[CAT_RELOAD_NAMES];
	char *errors[RLD_REPORT_MAX + 1], *warnings[RLD_REPORT_MAX + 1];
	char enote[96], wnote[96];
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__ReloadResult rr = FEED__RELOAD_RESULT__INIT;

	rr.applied = rep->applied;
	rr.file = (char *)(rep->file ? rep->file : "");
	if (rep->applied) {
		rr.n_added = ses_reload_names(se, se->d->cfg, c->added, c->nadded, added);
		rr.n_removed = ses_reload_names(se, rep->before, c->removed, c->nremoved, removed);
		rr.n_repointed = ses_reload_names(se, se->d->cfg, c->repointed, c->nrepointed,
						  repointed);
		rr.added = added, rr.removed = removed, rr.repointed = repointed;
	}
	rr.n_errors = ses_reload_lines(se, rep, rep->errors, rep->nerrors, errors, enote,
				       sizeof(enote));
	rr.errors = errors;
	rr.n_warnings = ses_reload_lines(se, rep, rep->warnings, rep->nwarnings, warnings, wnote,
					 sizeof(wnote));
	rr.warnings = warnings;
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
	char msg[400], groups[160], admin[48];

	(void)q;
	if (!ses_reload_allowed(se)) {
		acl_peer_groups_text(&se->conn->peer, groups, sizeof(groups));
		if (se->d->cfg->has_admin_group)
			snprintf(admin, sizeof(admin), "admin_group %u", (unsigned)se->d->cfg->admin_gid);
		else
			snprintf(admin, sizeof(admin), "admin_group (none configured)");
		snprintf(msg, sizeof(msg), "reload: user %u (groups %s) is neither root nor in the "
			 "config's %s", (unsigned)se->conn->peer.uid, groups, admin);
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
