/*
 * server.h: the listening socket and the connections.
 *
 * Owns: the runtime directory (created 0750 if missing), the lock file
 * (<socket>.lock, flock: one feedd per socket), the socket (0660, group
 * from the config), accept with SO_PEERCRED, the per-user connection limit,
 * one uv_poll per connection, and reply sending with back-pressure (a peer
 * that does not read is not read from either). Loop thread only. Never
 * blocks: every socket is non-blocking; what a packet means is session.c's.
 */
#ifndef FEEDD_SERVER_H
#define FEEDD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "access.h"
#include "feedd.h"
#include "log_limit.h"
#include "wire.h"

struct srv_conn {
	struct feedd *d;
	struct srv_conn *prev, *next;  /* srv's list */
	uv_poll_t poll;
	int sock;
	uint64_t id;                   /* "conn N" in logs */
	struct acl_peer peer;          /* who connected, read at accept */
	/* Protocol state, session.c's. */
	bool hello_done;
	uint32_t version;              /* negotiated protocol version */
	unsigned rejected;             /* malformed requests in a row */
	struct log_limit malformed_log;/* warnings about its bad requests (ses_error) */
	struct log_limit release_log;  /* warnings about its refused release entries */
	struct log_limit access_log;   /* warnings about datasets it may not read */
	char client_name[WIRE_CLIENT_NAME_MAX + 1];
	/* Streams opened on this connection (session_stream.c). */
	struct ses_stream *streams;
	uint32_t next_stream_id;
	/* Reply waiting for room in the socket; reading stops meanwhile. */
	uint8_t *out;
	size_t out_len;
	int out_fds[5];                /* our duplicates, sent with out */
	unsigned out_nfds;
	bool close_after_out;          /* close once out is sent */
	bool closing;                  /* uv_close() called; c dies in its callback */
};

/* "conn N (uid U pid P)": how every log line names a connection. */
#define SRV_CONN_FMT "conn %llu (uid %u pid %d)"
#define SRV_CONN_ARGS(c) (unsigned long long)(c)->id, (unsigned)(c)->peer.uid, (int)(c)->peer.pid

struct srv;

/* Creates the runtime directory if needed, takes the lock, replaces a stale
 * socket, binds, sets mode and group, listens. -EBUSY "another feedd ..." if
 * the lock is held; -errno naming the path otherwise. */
int srv_start(struct feedd *d, struct srv **ret, struct feed_err *err);

/* Stops accepting, removes the socket, closes every connection. Handles
 * finish closing when the loop runs. Idempotent. */
void srv_stop(struct srv *s);

/* Releases the lock and frees, once the loop has closed the handles.
 * Accepts NULL. */
void srv_free(struct srv *s);

/* Sends buf (len bytes, ownership taken) to c, or queues it until the
 * socket has room; closes c afterwards if then_close. */
void srv_reply(struct srv_conn *c, uint8_t *buf, size_t len, bool then_close);

/* Like srv_reply(), sending nfds descriptors with the packet (the caller
 * keeps its own; they are duplicated if the reply must wait). */
void srv_reply_fds(struct srv_conn *c, uint8_t *buf, size_t len, const int *fds,
		   unsigned nfds);

/* Streams and shared-memory bytes held by every connection of uid. */
void srv_user_usage(const struct srv *s, uid_t uid, uint32_t *ret_streams,
		    uint64_t *ret_bytes);

/* Closes c (logging why, at info level); safe to call twice. */
void srv_conn_close(struct srv_conn *c, const char *why);

uint32_t srv_connections(const struct srv *s);
uint32_t srv_user_connections(const struct srv *s, uid_t uid);

#endif
