/*
 * server.h: the listening socket and the connections.
 *
 * Owns: the runtime directory (created 0750 if missing), the lock file
 * (<socket>.lock, flock: one feedd per socket, removed at stop), the
 * socket (0660, group from the config; or the one systemd passed), accept with SO_PEERCRED, the per-user connection limit,
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
#include "dstate.h"
#include "wire.h"

struct ses;
struct srv_conn;

/* What the server calls for each connection: the protocol above it
 * (session.c's ses_handlers), so the transport never names the session
 * module. Loop thread. */
struct srv_handlers {
	/* a session for a new connection; NULL when out of memory */
	struct ses *(*open)(struct srv_conn *conn);
	/* one packet arrived: buf holds in->len bytes unless in->truncated */
	void (*packet)(struct ses *se, const uint8_t *buf, const struct wire_in *in);
	/* the connection is closing; accepts NULL */
	void (*close)(struct ses *se);
};

/* One connection. The server is its transport: it reads packets, sends
 * replies and closes; what a packet means is the session's (c->ses). */
struct srv_conn {
	struct dstate *d;
	struct srv_conn *prev, *next;  /* srv's list */
	uv_poll_t poll;
	int sock;
	uint64_t id;                   /* "conn N" in logs */
	struct acl_peer peer;          /* who connected, read at accept */
	struct ses *ses;               /* protocol state, opaque here (session.h) */
	/* Replies waiting for room in the socket, oldest first; reading stops
	 * while any waits. Answers that come later (an open's, a reload's)
	 * queue behind them, SRV_OUT_MAX at most (server.c). */
	struct srv_out *out, *out_tail;
	unsigned nout;
	/* A close asked for while a handler runs on c waits until it returns,
	 * so nothing a handler stands on is freed under it. */
	unsigned busy;                 /* handlers running on c (srv_conn_hold) */
	bool close_pending;            /* srv_conn_close() came while busy */
	char close_why[96];            /* its reason, logged when it happens */
	bool closing;                  /* uv_close() called; c dies in its callback */
};

/* "conn N (uid U pid P)": how every log line names a connection. */
#define SRV_CONN_FMT "conn %llu (uid %u pid %d)"
#define SRV_CONN_ARGS(c) (unsigned long long)(c)->id, (unsigned)(c)->peer.uid, (int)(c)->peer.pid

struct srv;

/* With sd_fd -1: creates the runtime directory if needed, takes the lock,
 * replaces a stale socket, binds, sets mode and group, listens. With
 * sd_fd a listening AF_UNIX SOCK_SEQPACKET socket that systemd passed
 * (main.c checks it): takes the lock if the directory allows, and serves
 * sd_fd as it is (its path, mode and group are feedd.socket's). -EBUSY
 * "another feedd ..." if the lock is held; -errno naming the path
 * otherwise. h (static) handles each connection's packets. */
int srv_start(struct dstate *d, int sd_fd, const struct srv_handlers *h, struct srv **ret,
	      struct feed_err *err);

/* Stops accepting, removes the socket (never one systemd passed: its
 * backlog keeps clients for the next feedd) and the lock file, closes
 * every connection. Handles finish closing when the loop runs.
 * Idempotent. */
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

/* Closes c (logging why, at info level): its session is freed and every
 * stream on it closed. While a handler holds c the close is only marked
 * and happens when the last holder lets go; no more replies are sent
 * meanwhile. Safe to call twice. */
void srv_conn_close(struct srv_conn *c, const char *why);

/* Brackets work on c from outside its own read handler (e.g. a worker's
 * completion): c stays alive until the matching srv_conn_unhold(), which
 * carries out a close asked for meanwhile. Loop thread. */
void srv_conn_hold(struct srv_conn *c);
void srv_conn_unhold(struct srv_conn *c);

/* True once c is closed or a close is pending: send nothing more. */
bool srv_conn_gone(const struct srv_conn *c);

uint32_t srv_connections(const struct srv *s);

#endif
