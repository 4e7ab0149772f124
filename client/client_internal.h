/*
 * client_internal.h: libfeedclient's insides, shared by client.c (the
 * connection and its transport), client_query.c (requests and the
 * conversion of replies into the public structs), the stream's files
 * (client_stream.h lists them) and the parts above a stream
 * (client_gpu.c, client_mix.c), which reach it only through the hooks
 * and getters at the end of this file. Nothing here is exported.
 * Runs on whichever thread calls the public function; never prints.
 *
 * Layers, each calling only downwards: client_gpu.c, client_mix.c ->
 * the stream (client_stream.h) -> device slots (client_ipc.h) -> the
 * connection (this file, client.c).
 *
 * Locks (every one taken with feed_mutex_lock(), proto/feed_lock.h, and
 * every CUDA driver call made through FEED_CU(), which aborts a debug
 * build when the calling thread holds any of them):
 *
 *   mutex                     guards                                 file
 *   feed_stream.rel_lock      the release ring's producer side (head,  client_release.c,
 *                             doorbell), the switch to a new            client_incarnation.c
 *                             incarnation, the incarnation list and
 *                             each retired one's held count
 *   cl_ipc.mu                 device slots: ties, done-word writes in   client_ipc.c
 *                             progress, deferred batches
 *   cl_gpu_stream.lock        GPU delivery: copies' batches in flight,  client_gpu.c
 *                             batches waiting for them, registered
 *                             regions
 *   cl_pin.lock               the pinned regions                        client_gpu.c
 *
 * Nesting: none. No thread ever holds two of them, and none is held
 * across a CUDA driver call, a wait, or a call into another module: what
 * must be released, closed or unregistered is collected under the lock
 * and done after it is dropped.
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
/* What a stream offers the parts above it (client_stream_base.c)     */

struct feed_stream;
struct feed_batch;

/* The parts that may hook into a stream, in the order a release visits
 * them and a close closes them. */
enum cl_hook_id {
	CL_HOOK_GPU,               /* client_gpu.c: copies in flight (feed_batch_to_device) */
	CL_HOOK_PIN,               /* client_gpu.c: pinned regions (feed_stream_pin) */
	CL_HOOKS
};

/* A part's callbacks; any may be NULL. The stream calls them with no
 * lock held; a part never releases a batch itself: what it kept comes
 * back through done(), and the stream gives it back to feedd. */
struct cl_hook {
	/* feed_release(b) reached the part: 1 when it keeps b (copies from b
	 * in flight), 0 when not, -EINVAL when it keeps b already (released
	 * twice). Any thread. */
	int (*keep)(void *self, struct feed_batch *b);
	/* Up to cap of the batches it kept that may go back now, into out:
	 * all when all (after waiting for their copies); else those whose
	 * copies are done, waiting for the oldest first when wait_one. How
	 * many. feed_next()'s thread. */
	uint32_t (*done)(void *self, bool wait_one, bool all, struct feed_batch **out,
			 uint32_t cap);
	/* A data region was mapped (a reopening), or is about to be unmapped
	 * (its last batch was released, or close). Any thread. */
	void (*map)(void *self, void *base, size_t len);
	void (*unmap)(void *self, void *base);
	/* The stream closes: nothing is kept any more (done(all) came
	 * first); frees self. The closing thread. */
	void (*close)(void *self);
};

/* Registers the part id of st: h (copied) with self. 0, or -EEXIST when
 * id has one. feed_next()'s thread; release-published, so any thread's
 * feed_release() sees the callbacks whole. */
int cl_stream_hook(struct feed_stream *st, enum cl_hook_id id, const struct cl_hook *h,
		   void *self);
/* The self registered as id, or NULL. Any thread. */
void *cl_stream_hooked(const struct feed_stream *st, enum cl_hook_id id);

/* Getters, any thread. */
struct feed_conn *cl_stream_conn(struct feed_stream *st);
struct feed_stream *cl_batch_stream(struct feed_batch *b);
bool cl_batch_held(struct feed_batch *b);
/* The mapping of the data region b lives in (its incarnation's). */
void cl_batch_region(const struct feed_batch *b, void **ret_base, size_t *ret_len);
/* The current incarnation's data region. feed_next()'s thread. */
void cl_stream_region(const struct feed_stream *st, void **ret_base, size_t *ret_len);
/* The key of b's mix draws (feed_batch_mix_draw): the stream's seed, b's
 * epoch, and its batch number among all ranks, index * world + rank. */
void cl_batch_mix_key(const struct feed_batch *b, uint64_t *ret_seed, uint64_t *ret_epoch,
		      uint64_t *ret_batch);

#endif
