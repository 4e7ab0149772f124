/*
 * session.h: what a packet means. The protocol state machine of one
 * connection (hello first, version negotiation, refusal counting) and the
 * request handlers: hello, list datasets, dataset info, stats.
 *
 * Loop thread only. Never does I/O itself (replies go through srv_reply())
 * and never blocks: handlers answer from the catalog and counters in
 * memory. Long work, when requests need it, goes to the worker pool.
 */
#ifndef FEEDD_SESSION_H
#define FEEDD_SESSION_H

#include <stdint.h>

#include "server.h"
#include "wire.h"

/* Handles one packet that arrived on c: buf holds in->len bytes unless
 * in->truncated. Always answers (or closes c). */
void ses_packet(struct srv_conn *c, const uint8_t *buf, const struct wire_in *in);

/* c is closing: closes every stream opened on it (session_stream.c). */
void ses_conn_closing(struct srv_conn *c);

/* Adds c's open streams and their shared-memory bytes to the counters. */
void ses_conn_usage(const struct srv_conn *c, uint32_t *streams, uint64_t *bytes);

/* --- shared by session.c and session_stream.c --- */

/* How a refusal weighs on the connection. */
enum ses_weight {
	SES_REFUSAL,    /* a fair request refused (access, unknown dataset): no count */
	SES_MALFORMED,  /* counts toward WIRE_MAX_REJECTED in a row */
	SES_FATAL,      /* the peer cannot be speaking this protocol: close */
};

/* Answers request id with an Error (and closes c as w says). */
void ses_error(struct srv_conn *c, uint32_t id, int code, const char *msg, enum ses_weight w);

/* Encodes reply and sends it with nfds descriptors; too large: an Error. */
void ses_send_fds(struct srv_conn *c, Feed__Reply *reply, const int *fds, unsigned nfds);

/* The served dataset a request names if c's peer may read it; otherwise
 * answers the refusal and returns NULL. */
const struct cat_entry *ses_dataset(struct srv_conn *c, uint32_t id, const char *name);

void ses_open_stream(struct srv_conn *c, uint32_t id, const Feed__OpenStream *o);
void ses_close_stream(struct srv_conn *c, uint32_t id, const Feed__CloseStream *q);

#endif
