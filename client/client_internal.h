/*
 * client_internal.h: libfeedclient's insides, shared by client.c (the
 * connection and its transport), client_query.c (requests and the
 * conversion of replies into the public structs) and client_stream.c
 * (streams: regions, rings, doorbells). Nothing here is exported.
 * Runs on whichever thread calls the public function; never prints.
 */
#ifndef FEED_CLIENT_INTERNAL_H
#define FEED_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed.pb-c.h"
#include "feed/client.h"

#define CL_PROTO_MIN 1              /* protocol versions this library speaks */
#define CL_PROTO_MAX 1
#define CL_REQUEST_MAX (64 * 1024)  /* the daemon's cap on a request */
#define CL_REPLY_MAX (128 * 1024)   /* the daemon's cap on a reply */
#define CL_ERRMSG_MAX 512
#define CL_MAX_FDS 8                /* descriptors one reply may carry */

struct feed_conn {
	int sock;                   /* -1 when not connected */
	int timeout_ms;             /* per call */
	uint32_t next_id;           /* request ids, from 1; replies must match */
	uint32_t version;           /* negotiated protocol version */
	char server_version[32];    /* from the hello reply */
	char errmsg[CL_ERRMSG_MAX]; /* detail of the last failure */
	uint8_t *rbuf;              /* one reply: CL_REPLY_MAX + 1 bytes */
	char path[108];             /* socket of the last successful open */
	uint32_t opens;             /* successful opens so far: a stream opened
				     * on an earlier one is gone */
};

/* Closes the socket (if open); the next call fails with -ENOTCONN. */
void cl_close(struct feed_conn *conn);

/* Sets conn->errmsg and returns code. */
int cl_fail(struct feed_conn *conn, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Sends req (its id is set here) and waits for the reply to it. On success
 * *ret is the reply (free with feed__reply__free_unpacked(*ret, NULL)); an
 * Error reply is returned as its code, with its message in errmsg. A
 * transport failure closes the connection. */
int cl_call(struct feed_conn *conn, Feed__Request *req, Feed__Reply **ret);

/* cl_call() for a reply that carries descriptors (SCM_RIGHTS): it must
 * carry exactly nfds (1..CL_MAX_FDS), stored in fds in the order sent and
 * owned by the caller from then on; otherwise they are closed and the
 * call fails with -EPROTO. An Error reply carries none. */
int cl_call_fds(struct feed_conn *conn, Feed__Request *req, Feed__Reply **ret, int *fds,
		unsigned nfds);

/* The C library's description of an errno value (either sign), for
 * messages about a system call: feed_strerror() gives feedd's meaning of a
 * code, which would misname what the kernel said (ENOENT from connect()
 * is a missing socket file, not a missing dataset). Static; never NULL. */
const char *cl_os_strerror(int code);

/* A reply of the wrong kind: -EPROTO, closes the connection. */
int cl_bad_reply(struct feed_conn *conn, const char *what);

/* ------------------------------------------------------------------ */
/* Between streams (client_stream.c) and the GPU path (client_gpu.c)    */

struct feed_stream;
struct feed_batch;
struct cl_gpu_stream;

/* The stream's GPU state (NULL until its first device call); owned by the
 * stream, freed by cl_gpu_close(). */
struct cl_gpu_stream **cl_stream_gpu(struct feed_stream *st);
struct feed_conn *cl_stream_conn(struct feed_stream *st);
struct feed_stream *cl_batch_stream(struct feed_batch *b);
bool cl_batch_held(struct feed_batch *b);
/* The mapping of the data region b lives in (its incarnation's). */
void cl_batch_region(const struct feed_batch *b, void **ret_base, size_t *ret_len);
/* The key of b's mix draws (feed_batch_mix_draw): the stream's seed, b's
 * epoch, and its batch number among all ranks, index * world + rank. */
void cl_batch_mix_key(const struct feed_batch *b, uint64_t *ret_seed, uint64_t *ret_epoch,
		      uint64_t *ret_batch);
/* Gives b's slot back now (feed_release without the GPU's deferral). */
int cl_release_now(struct feed_batch *b);
/* Gives b's slot back once the copies from it (feed_batch_to_device) are
 * done: feed_release() after the device slots' part (cl_ipc_release). 0,
 * or -EINVAL when b is not held. Any thread; no lock held. */
int cl_release_host(struct feed_batch *b);

/* feed_release(b) while copies from b are in flight: 1 when the release is
 * deferred until they are done, 0 when b has none, -EINVAL when b's
 * release was already deferred. Any thread; takes no stream lock. */
int cl_gpu_defer_release(struct cl_gpu_stream *g, struct feed_batch *b);
/* Releases the deferred batches whose copies are done; when wait_one and
 * none is, waits for the oldest copy first. feed_next()'s thread. */
void cl_gpu_poll(struct feed_stream *st, bool wait_one);
/* Unregisters the region at base before it is unmapped. Under rel_lock. */
void cl_gpu_forget(struct feed_stream *st, void *base);
/* Waits for every copy, releases the deferred batches, unregisters, frees
 * the GPU state. Before the stream's regions are unmapped. */
void cl_gpu_close(struct feed_stream *st);

struct cl_pin;
/* The stream's pinning state (feed_stream_pin), NULL until pinned; owned by
 * the stream, freed by cl_pin_close(). */
struct cl_pin **cl_stream_pin(struct feed_stream *st);
/* The current incarnation's data region. */
void cl_stream_region(const struct feed_stream *st, void **ret_base, size_t *ret_len);
/* Registers the region at base of a pinned stream (no-op for others):
 * after a reconnection maps a new one. feed_next()'s thread. */
int cl_pin_region(struct feed_stream *st, void *base, size_t len);
/* Unregisters every pinned region, frees the state. Before unmapping. */
void cl_pin_close(struct feed_stream *st);

/* ------------------------------------------------------------------ */
/* Between streams (client_stream.c) and device slots (client_ipc.c)   */

struct cl_ipc;
struct feed_stream_device;
struct Feed__DeviceRequest;
struct Feed__DeviceSlots;

/* The stream's device slots (NULL: none) and, without them, why ("" when
 * not asked). Any thread. */
struct cl_ipc *cl_stream_ipc(struct feed_stream *st);
const char *cl_stream_device_reason(const struct feed_stream *st);
uint32_t cl_batch_slot(const struct feed_batch *b);
/* b comes from the stream's current incarnation (not from before a
 * reconnection). */
bool cl_batch_current(const struct feed_batch *b);

/* Before an open: fills dr (uuid is its storage) from o and returns 1; or
 * returns 0 with why (this process cannot use CUDA IPC: ask nothing);
 * or -EINVAL naming the bad option. */
int cl_ipc_request(struct feed_conn *conn, const struct feed_stream_device *o,
		   struct Feed__DeviceRequest *dr, uint8_t uuid[16], char *why, size_t cap);
/* After a reply granting device slots: opens the handles into *ret; or
 * returns 0 with *ret NULL and why (they would not open here: the stream
 * should not use them); -EPROTO for a reply that does not fit the stream,
 * -ENOMEM. */
int cl_ipc_open(struct feed_conn *conn, const struct feed_stream_device *o,
		const struct Feed__DeviceSlots *ds, uint32_t nslots, uint32_t nfields,
		uint32_t batch, struct cl_ipc **ret, char *why, size_t cap);
/* feed_release() of b, the batch in slot, of generation gen: enqueues the
 * write of gen into the slot's done word on the stream it was tied to
 * (feed_batch_device), or, never tied, on the device slots' own stream
 * behind the slot's last write. Then returns 0 when feedd's conversion of
 * b has run (its ready event completed): give the host slot back now;
 * 1 when it has not: b is deferred, its host slot goes back later
 * (cl_ipc_poll), since feedd's rebuild of it would overwrite the staging
 * area the conversion still reads; -EINVAL when b is deferred already
 * (released twice). Never waits. Any thread. */
int cl_ipc_release(struct cl_ipc *ipc, struct feed_batch *b, uint32_t slot, uint32_t gen);
/* Gives back (cl_release_host) the deferred batches whose conversion has
 * run, or every deferred one when all (feedd is gone, or the stream
 * closes: nothing will rebuild their slots); how many it gave back, and
 * in *ret_left (when not NULL) how many are still deferred. Never waits;
 * takes the stream's lock only after dropping ipc's. A retired ipc may be
 * closed by the time it returns. feed_next()'s thread. */
int cl_ipc_poll(struct cl_ipc *ipc, bool all, uint32_t *ret_left);
/* Waits for the work tied to the slots, closes every handle. No batch may
 * be deferred (cl_ipc_poll with all first). Accepts NULL. */
void cl_ipc_close(struct cl_ipc *ipc);

#endif
