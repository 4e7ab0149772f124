/*
 * wire.h: the control protocol on the daemon's side of the socket: one
 * protobuf-c message per SOCK_SEQPACKET packet (proto/feed.proto, Request
 * and Reply), size caps, descriptor hygiene, field checks.
 *
 * Owns: recvmsg/sendmsg on a connection and the encoding and checking of
 * messages. Loop thread; every call is non-blocking. Never trusts a byte
 * from the peer: packets are capped, descriptors that arrive are closed at
 * once, and every field is checked before anyone reads it.
 *
 * Policy on bad input (see session.c): a packet that does not decode
 * (garbage, truncated protobuf) or is oversized gets an Error reply and the
 * connection is closed, since the peer cannot be speaking this protocol; a
 * well-formed but refused request (unknown kind, a field out of range,
 * anything before hello, a descriptor attached) gets an Error reply and the
 * connection stays, until WIRE_MAX_REJECTED of them in a row close it.
 */
#ifndef FEEDD_WIRE_H
#define FEEDD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed.pb-c.h"
#include "feed_err.h"
#include "feed_shm.h"

#define WIRE_PROTO_MIN 1             /* protocol versions this daemon speaks */
#define WIRE_PROTO_MAX 1
#define WIRE_REQUEST_MAX (64 * 1024) /* bytes of one request packet */
#define WIRE_REPLY_MAX (128 * 1024)  /* bytes of one reply packet */
#define WIRE_MAX_REJECTED 8          /* refused requests in a row before closing */
#define WIRE_CLIENT_NAME_MAX 64
#define WIRE_FDS_MAX 16              /* descriptors one recvmsg can see (and close) */
#define WIRE_BATCH_MAX 65536         /* open_stream limits */
#define WIRE_CREDITS_MAX FEED_SHM_MAX_SLOTS
#define WIRE_WORLD_MAX 65536
#define WIRE_WINDOW_MAX (1 << 20)
#define WIRE_PIPELINE_MAX 4096
#define WIRE_RESUME_MAX 1024
#define WIRE_MIXTURE_MAX 8          /* sources of a mixture (delivery/mixture.h MIXT_MAX_SOURCES) */
#define WIRE_JOB_MAX 128             /* open_stream.job: printable ASCII bytes */

/* What one wire_recv() saw besides the bytes. */
struct wire_in {
	size_t len;        /* the packet's real length (may exceed the buffer) */
	bool truncated;    /* len > buffer: the packet is lost (MSG_TRUNC) */
	bool ctrunc;       /* more control data than fits (MSG_CTRUNC) */
	unsigned nfds;     /* descriptors that came with it, already closed */
};

/* Receives one packet into buf (cap bytes) without blocking. Returns 1 with
 * *ret filled, 0 at end of stream (peer closed), -EAGAIN when nothing is
 * waiting, -errno on a socket error. Descriptors are closed before return. */
int wire_recv(int sock, void *buf, size_t cap, struct wire_in *ret);

/* Sends one packet without blocking and without SIGPIPE. Returns 0,
 * -EAGAIN when the peer's queue is full, or -errno. */
int wire_send(int sock, const void *buf, size_t len);

/* Sends one packet with nfds descriptors (SCM_RIGHTS; the caller keeps
 * its own copies). Same returns as wire_send(), -EINVAL past WIRE_FDS_MAX. */
int wire_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds);

/* Decodes a request. *ret is freed with wire_request_free(). -EMSGSIZE past
 * WIRE_REQUEST_MAX, -EBADMSG if it is not a Request, -ENOMEM when memory
 * for it ran out (not the client's doing). */
int wire_request_decode(const void *buf, size_t len, Feed__Request **ret,
			struct feed_err *err);
void wire_request_free(Feed__Request *req);  /* accepts NULL */

/* Decodes a resume token (OpenStream.resume: feed.proto ResumeToken as
 * libfeedclient writes it). *ret is freed with wire_resume_free(). -EINVAL
 * "resume token: not a feedd resume token" when it does not unpack or
 * lacks FEED_RESUME_MAGIC; whether its fields fit the request is the
 * session's to say (session_stream.c). */
int wire_resume_decode(const void *buf, size_t len, Feed__ResumeToken **ret,
		       struct feed_err *err);
void wire_resume_free(Feed__ResumeToken *t);  /* accepts NULL */

/* Checks a decoded request: its kind is known and every field is in range.
 * First its text (the bytes fields feed.proto marks as text: names, the
 * pipeline, the job): a NUL byte in one is -EINVAL naming the field and
 * where ("open_stream.dataset: a NUL byte at offset 2 (a string may not
 * hold one)"); then -EOPNOTSUPP for an unknown or missing kind, -EINVAL
 * naming the field. */
int wire_request_check(const Feed__Request *req, struct feed_err *err);

/* A text field of a request that wire_request_check() accepted, as the C
 * string it holds ("" when empty): it holds no NUL, and
 * wire_request_decode() ends every block it unpacks with one. */
static inline const char *wire_str(ProtobufCBinaryData b)
{
	return b.len ? (const char *)b.data : "";
}

/* Encodes reply into a new buffer (*ret_buf, freed by the caller).
 * -EMSGSIZE past WIRE_REPLY_MAX, -ENOMEM. */
int wire_reply_encode(const Feed__Reply *reply, uint8_t **ret_buf, size_t *ret_len,
		      struct feed_err *err);

/* Encodes an Error reply for request id. Never fails except -ENOMEM. */
int wire_error_encode(uint32_t id, int code, const char *msg, uint8_t **ret_buf,
		      size_t *ret_len);

#endif
