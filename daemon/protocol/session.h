/*
 * session.h: what a packet means. The protocol state of one connection
 * (hello first, version negotiation, refusal counting), the request
 * handlers (hello, list datasets, dataset info, stats: session.c), the
 * stream requests (open, close: session_stream.c) and reload
 * (session_reload.c), over the replies they share (session_reply.c).
 * The files call one another one way only: session.c dispatches to the
 * others, session_stream.c uses session_group.c and session_mix.c, and
 * every one answers through session_reply.c, which calls none of them.
 *
 * Loop thread only. Never does socket I/O itself (replies go through
 * srv_reply*()) and never blocks: handlers answer from the catalog and
 * counters in memory, and long work (creating a stream's shared memory)
 * goes to the worker pool and finishes in a completion on the loop. The
 * server holds the connection while a handler runs, so a reply that fails
 * never frees anything under the handler (server.h, srv_conn_hold()).
 */
#ifndef FEEDD_SESSION_H
#define FEEDD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "delivery.h"
#include "log_limit.h"
#include "server.h"
#include "wire.h"

struct ses_stream;

/* The session of one connection. Private to session.c and
 * session_stream.c; the server sees it as opaque. */
struct ses {
	struct srv_conn *conn;         /* the transport; outlives the session */
	struct dstate *d;
	bool hello_done;
	uint32_t version;              /* negotiated protocol version */
	unsigned rejected;             /* malformed requests in a row */
	struct log_limit malformed_log;/* warnings about its bad requests (ses_error) */
	struct log_limit release_log;  /* warnings about its refused release entries */
	struct log_limit access_log;   /* warnings about datasets it may not read */
	struct log_limit refusal_log;  /* its refused opens (session_stream.c) */
	char client_name[WIRE_CLIENT_NAME_MAX + 1];
	struct ses_stream *streams;    /* open streams */
	struct ses_stream *opening;    /* streams whose memory a worker is making */
	uint32_t next_stream_id;
	struct ses_reload_wait *reload_wait; /* its reload in progress, or NULL */
};

/* --- what the server calls --- */

/* A session for a new connection; NULL when out of memory. */
struct ses *ses_new(struct srv_conn *conn);

/* Handles one packet that arrived: buf holds in->len bytes unless
 * in->truncated. Always answers (or closes the connection). */
void ses_packet(struct ses *se, const uint8_t *buf, const struct wire_in *in);

/* The connection is closing: closes every open stream (slots and regions
 * are freed once no worker builds into them), lets streams still being
 * opened finish and close themselves, and frees the session. Accepts NULL. */
void ses_free(struct ses *se);

/* The three above, as srv_start() takes them. */
extern const struct srv_handlers ses_handlers;

/* --- the replies every handler shares (session_reply.c) --- */

/* How a refusal weighs on the connection. */
enum ses_weight {
	SES_REFUSAL,    /* a fair request refused (access, unknown dataset): no count */
	SES_MALFORMED,  /* counts toward WIRE_MAX_REJECTED in a row */
	SES_FATAL,      /* the peer cannot be speaking this protocol: close */
};

/* Answers request id with an Error (and closes the connection as w says). */
void ses_error(struct ses *se, uint32_t id, int code, const char *msg, enum ses_weight w);

/* Encodes reply and sends it with nfds descriptors; too large: an Error. */
void ses_send_fds(struct ses *se, Feed__Reply *reply, const int *fds, unsigned nfds);

/* The served dataset a request names if the peer may read it; otherwise
 * answers the refusal and returns NULL. */
const struct cat_entry *ses_dataset(struct ses *se, uint32_t id, const char *name);

/* Whether the peer may read dataset d (its access list). */
bool ses_may_read(const struct ses *se, const struct cfg_dataset *d);

/* What status shows of one open stream (a group's member or a plain
 * stream): whose it is and how its delivery goes. Strings borrowed from
 * the stream, valid until it closes. Loop thread. */
struct ses_stream_view {
	uint32_t id;                   /* on its connection */
	uid_t uid;
	pid_t pid;                     /* the peer's, at connect */
	const char *dataset;
	const char *group;             /* "" when in no group */
	uint32_t batch, credits;       /* credits: a group's depth for a member */
	struct dlv_member_stats m;     /* delivery.h: state, batches, held, start */
};
void ses_stream_view(const struct ses_stream *ss, struct ses_stream_view *ret);

/* Logs what a stream's client did wrong since the last look, and its stop
 * (a detach from its group included), once. session_stream.c. */
void ses_stream_report(struct ses_stream *ss);

void ses_open_stream(struct ses *se, uint32_t id, const Feed__OpenStream *o);

/* Reload (session_reload.c): answered when the reload ends. Forget: the
 * connection goes, its reload answers no one. */
void ses_reload(struct ses *se, uint32_t id, const Feed__Reload *q);
void ses_reload_forget(struct ses *se);
void ses_close_stream(struct ses *se, uint32_t id, const Feed__CloseStream *q);

/* ListOps (session_ops.c): every pipeline op, answered at once. */
void ses_list_ops(struct ses *se, uint32_t id);

#endif
