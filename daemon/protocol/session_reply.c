/*
 * session_reply.c: what every request handler of a session answers with:
 * replies, refusals (counted, and the connection closed after repeated
 * malformed ones) and the dataset a request names once access allows it.
 * The bottom of protocol/: it calls nothing else of the folder. Loop
 * thread only.
 */
#include <errno.h>
#include <stdio.h>

#include "catalog.h"
#include "dstate.h"
#include "session.h"
#include "stats.h"

/* Logs a warning about the connection through one of its log limits (so a peer that
 * misbehaves in a loop cannot flood the log); force: the line goes anyway
 * (the connection's last), with the count of those left out. */
static void ses_warn_limited(struct ses *se, struct log_limit *l, bool force,
			     const char *msg, const char *tail)
{
	char note[LOG_LIMIT_NOTE_MAX];
	uint64_t dropped;

	if (force)
		dropped = log_limit_take_suppressed(l);
	else if (!log_limit_allow(l, uv_now(&se->d->loop), &dropped))
		return;
	log_warn(&se->d->log, SRV_CONN_FMT ": %s%s%s", SRV_CONN_ARGS(se->conn), msg,
		 log_limit_note(dropped, note), tail);
}

void ses_error(struct ses *se, uint32_t id, int code, const char *msg, enum ses_weight w)
{
	char text[FEED_ERR_MSG_MAX + 64];
	uint8_t *buf;
	size_t len;
	bool close = w == SES_FATAL;

	se->d->requests++;
	se->d->rejected++;
	stats_refused(&se->d->stats, code, w != SES_REFUSAL);
	if (w == SES_MALFORMED && ++se->rejected >= WIRE_MAX_REJECTED)
		close = true;
	snprintf(text, sizeof(text), "%s%s", msg,
		 close && w != SES_FATAL ? "; closing after repeated malformed requests" : "");
	if (w != SES_REFUSAL)
		ses_warn_limited(se, &se->malformed_log, close, msg, close ? "; closing" : "");
	if (wire_error_encode(id, code, text, &buf, &len) < 0) {
		srv_conn_close(se->conn, "out of memory for an error reply");
		return;
	}
	srv_reply(se->conn, buf, len, close);
}

void ses_send_fds(struct ses *se, Feed__Reply *reply, const int *fds, unsigned nfds)
{
	struct feed_err err = {0};
	uint8_t *buf;
	size_t len;

	if (wire_reply_encode(reply, &buf, &len, &err) < 0) {
		log_error(&se->d->log, SRV_CONN_FMT ": %s", SRV_CONN_ARGS(se->conn), err.msg);
		ses_error(se, reply->id, err.code, err.msg, SES_REFUSAL);
		return;
	}
	se->d->requests++;
	se->rejected = 0;
	srv_reply_fds(se->conn, buf, len, fds, nfds);
}

bool ses_may_read(const struct ses *se, const struct cfg_dataset *d)
{
	return acl_allows(&d->acl, &se->conn->peer, se->d->self_uid);
}

/* Resolves a dataset a request names, or answers the refusal and returns
 * NULL. One log line per access refusal, rate-limited per connection (a
 * client asking in a loop must not flood the log). */
const struct cat_entry *ses_dataset(struct ses *se, uint32_t id, const char *name)
{
	const struct cfg_dataset *d = cfg_dataset_find(se->d->cfg, name);
	char msg[320];

	if (!d) {
		snprintf(msg, sizeof(msg), "dataset '%s': no such dataset", name);
		ses_error(se, id, -ENOENT, msg, SES_REFUSAL);
		return NULL;
	}
	if (!ses_may_read(se, d)) {
		char groups[160];
		acl_peer_groups_text(&se->conn->peer, groups, sizeof(groups));
		snprintf(msg, sizeof(msg), "dataset '%s': user %u (groups %s) not allowed", name,
			 (unsigned)se->conn->peer.uid, groups);
		ses_warn_limited(se, &se->access_log, false, msg, "");
		ses_error(se, id, -EACCES, msg, SES_REFUSAL);
		return NULL;
	}
	const struct cat_entry *e = cat_find_any(se->d->cat, name);
	const char *why = "at start";  /* not in the catalog: left out at start */
	enum cat_state st = e ? cat_entry_state(e, &why) : CAT_FAILED;
	if (st == CAT_PENDING) {  /* a remote one still opening: refused, not waited for */
		snprintf(msg, sizeof(msg), "dataset '%s' (%.160s): pending: its manifest and "
			 "indexes have not arrived yet; try again", name, e->path);
		ses_error(se, id, -EAGAIN, msg, SES_REFUSAL);
		return NULL;
	}
	if (st == CAT_FAILED) {
		snprintf(msg, sizeof(msg), "dataset '%s': not served (it failed to open %s%.200s; "
			 "see the daemon's log)", name, e ? "in the background: " : "", why);
		ses_error(se, id, -ENOENT, msg, SES_REFUSAL);
		return NULL;
	}
	return e;
}
