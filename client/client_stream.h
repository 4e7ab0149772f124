/*
 * client_stream.h: a stream's insides, shared by the files that make up
 * the stream module and by no one else:
 *
 *   client_ready.c        the ready ring's consumer (feed_next) and batches
 *   client_incarnation.c  reopening after a daemon restart, retired
 *                         incarnations
 *   client_stream.c       opening and closing
 *   client_detach.c       batches detached from their slots
 *   client_release.c      the release ring's producer (feed_release)
 *   client_region.c       checking and mapping the regions feedd sends
 *   client_resume.c       position, resume tokens
 *   client_stream_base.c  the hooks (client_internal.h), getters, st_stop
 *
 * Each file calls only files below it in this list (and client.c,
 * client_ipc.c, client_mixture.c): they form a DAG that
 * scripts/check-layers checks from the build.
 *
 * The parts above the stream (client_gpu.c) see it only through
 * client_internal.h; the device slots below it (client_ipc.h) know
 * nothing of it. Threads: client_internal.h's table; each function below
 * says which thread runs it.
 */
#ifndef FEED_CLIENT_STREAM_H
#define FEED_CLIENT_STREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client_internal.h"
#include "client_ipc.h"
#include "feed/stream.h"
#include "feed_ring.h"
#include "feed_shm.h"

#define ST_NFDS 5                /* control, data, release, ready, release doorbell */
#define ST_MAX_LEVELS 8          /* node order: core/order.h ORD_MAX_LEVELS */
#define ST_MIX_STATE_MAX 192     /* daemon/protocol/session_mix.h SES_MIX_STATE_MAX */

enum { ST_FD_CTL, ST_FD_DATA, ST_FD_REL, ST_FD_READY, ST_FD_RELEASE };

struct st_inc;

/* One per slot, allocated at open: delivering a batch fills it in. */
struct feed_batch {
	struct feed_stream *st;
	struct st_inc *inc;        /* the incarnation it came from (fixed) */
	uint32_t slot;             /* fixed at open */
	uint32_t gen;              /* generation of the current delivery */
	_Atomic bool held;         /* delivered, not yet released */
	uint32_t nsamples;
	uint32_t flags;            /* FEED_SLOT_* */
	uint64_t epoch, index;
	uint64_t publish_ns;       /* the daemon's CLOCK_MONOTONIC at publish */
	const uint64_t *samples;   /* in the control region */
	const uint64_t *replaced;  /* its bitmap there (FEED_SLOT_REPLACED), or NULL */
	const uint64_t *failed;    /* the failed samples' indices there, by position
				    * (NULL: none, or a feedd that sends none) */
	uint32_t nreplaced;        /* bits set in it below nsamples */
	uint32_t ndropped;         /* FEED_SLOT_DROPPED: bits set in it (below the
				    * stream's batch), samples left out */
	struct feed_view view[FEED_SHM_MAX_FIELDS]; /* checked at delivery */
	uint8_t *base;             /* where the slot's bytes are mapped: in the data
				    * region, or an alias of the slot once a held
				    * batch was detached from that range
				    * (client_detach.c); feed_next()'s thread and
				    * feed_batch_detach() (the caller's: one thread) */
};

/* One incarnation: what one open of the stream in feedd gave. A reopening
 * after a daemon restart makes the next; an earlier one stays mapped while
 * the caller holds batches from it (a daemon restart does not pull memory
 * from under a trainer), and its record and batches stay until close, so
 * that releasing one of them twice still finds it. Immutable once
 * published in st->cur, but for the fields marked (rel_lock). */
struct st_inc {
	struct st_inc *next;       /* the earlier ones (rel_lock) */
	uint32_t id;               /* 0, then +1 per reopening */
	uint32_t held;             /* retired: its batches still held (rel_lock) */
	bool mapped;               /* its regions are still mapped (rel_lock) */
	void *map[3];              /* control (read-only), data, release */
	size_t len[3];
	struct feed_batch *batches;/* [nslots] */
	uint32_t nslots;
	struct cl_ipc *ipc;        /* its device slots, or NULL */
	uint64_t slot_bytes;       /* its slots' size (fixed) */
	uint32_t detached;         /* detached batches not yet freed (rel_lock):
				    * their private copies lie in its mappings */
};

struct st_hook {
	struct cl_hook ops;        /* written before self is published */
	_Atomic(void *) self;      /* NULL: not registered */
};

struct feed_stream {
	/* consumer side, read on every feed_next() (its thread only) */
	const struct feed_shm_ctl *ctl;  /* read-only mapping */
	struct feed_ring ready;    /* the ready ring, we consume */
	uint64_t tail;             /* private: next ready entry to take */
	uint32_t nslots;           /* = credits granted */
	uint32_t nfields;
	uint32_t batch;            /* largest sample count */
	int stop;                  /* 0; FEED_END_OF_STREAM; or a sticky error */
	_Atomic uint64_t ndetached; /* batches feed_batch_detach() moved (a count) */
	_Atomic uint32_t nheld;    /* this incarnation's batches delivered and not
				    * released */
	struct feed_batch *batches;/* [nslots], the current incarnation's */
	uint8_t *data;             /* the data region, read-write (a group's: private,
				    * copy-on-write) */
	bool group;                /* a group member: drop written pages at release */
	uint32_t take_max;         /* batches it may hold: nslots, or a member's credits */
	uint64_t slot_bytes, slot_hdr_bytes, slots_off;

	/* producer side of the release ring, and the incarnations (rel_lock) */
	pthread_mutex_t rel_lock;
	struct feed_shm_rel *rel;  /* client-writable mapping */
	struct feed_ring release;  /* the release ring, we produce */
	uint64_t wait_unnoted_ns;  /* feed_next()'s blocked time added to
				    * rel->reader_wait_ns since the last
				    * feed_stream_note_next() (its thread only) */
	uint64_t rel_head;         /* private copy of rel->rel_head */
	int fd[ST_NFDS];           /* the current incarnation's */
	/* the current incarnation (head of the list of all of them): swapped
	 * under rel_lock by st_adopt, read by feed_release without it */
	_Atomic(struct st_inc *) cur;
	/* a retired incarnation's last batch was released: feed_next()'s
	 * thread unmaps it (st_reap), so that a release never calls the
	 * driver nor switches the releasing thread's context */
	_Atomic bool reap;

	struct feed_conn *conn;
	char stop_msg[256];        /* the sticky error's detail */
	struct feed_stream_info info;
	void *info_mem;            /* fields and strings of info */
	struct st_hook hook[CL_HOOKS]; /* the parts above (client_internal.h) */

	/* position and reopening after a daemon restart (feed_next's thread) */
	uint64_t pos_epoch;        /* the next batch not yet returned: its epoch */
	uint64_t pos_position;     /* and the global position of its first sample */
	bool pos_known;            /* from a batch taken or a resume token: a group
				    * member's next batch must start there (a fresh
				    * late joiner takes the group's next) */
	/* node order: the earlier layouts of epoch lv_epoch (feed.proto
	 * ResumeToken.level_*), which pos_position counts after */
	uint64_t lv_epoch;
	uint32_t nlv;
	uint32_t lv_nodes[ST_MAX_LEVELS];
	uint64_t lv_pos[ST_MAX_LEVELS];
	uint32_t world;
	uint32_t conn_opens;       /* conn->opens of the connection it lives on */
	int64_t reopen_deadline;   /* reconnecting: st_now_ms() when reconnect_ms
				    * runs out; 0 when not reconnecting */
	struct feed_stream_opts opts; /* as opened; strings in opts_mem, a
				    * mixture's sources in mix_mem */
	char *opts_mem;
	void *mix_mem;
	/* a mixture's blend as the daemon last said (StreamOpened.mixture),
	 * copied into each token (client_mixture.c); mix_len 0: none */
	uint8_t mix_state[ST_MIX_STATE_MAX];
	size_t mix_len;
	char dev_reason[512];      /* without device slots, why ("" when not asked) */
};

/* The current incarnation, for feed_next()'s thread (open, reopen and
 * close run there), the only one that stores it. */
static inline struct st_inc *st_inc_now(const struct feed_stream *st)
{
	/* relaxed: this thread's own store */
	return atomic_load_explicit((_Atomic(struct st_inc *) *)&st->cur, memory_order_relaxed);
}

/* ---- client_stream_base.c ---- */

/* The order of the Feed__Order enum for a FEED_ORDER_* value. */
int st_order(int order);
/* The hook id's callbacks and self, when registered (acquire). */
void *st_hook_get(const struct feed_stream *st, enum cl_hook_id id, struct cl_hook *ret_ops);
/* Stops the stream for good: every later feed_next() returns code. */
int st_stop(struct feed_stream *st, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int64_t st_now_ms(void);
int64_t st_now_ns(void);

/* ---- client_stream.c ---- */

/* Opens a stream on conn: the request, the reply, the regions; no copy of
 * opts is kept. The caller's thread. */
int st_open(struct feed_conn *conn, const struct feed_stream_opts *opts,
	    struct feed_stream **ret);
/* Frees a stream that st_adopt() emptied, or one partly built. */
void st_free(struct feed_stream *st);
/* Keeps opts (and its strings) for reopening. -ENOMEM. */
int st_keep_opts(struct feed_stream *st, const struct feed_stream_opts *o);

/* ---- client_region.c ---- */

/* Checks st->fd's memfds and eventfds against what a stream of batch and
 * credits needs, maps the regions into st->cur, and fills in the stream's
 * view of them. -EPROTO naming the check, or mmap's error. Open's thread. */
int st_map(struct feed_stream *st, uint32_t batch, uint32_t credits);
/* The per-slot batch table of st's incarnation. -ENOMEM. */
int st_batches_new(struct feed_stream *st);
/* Unmaps inc's regions and closes its device slots (once). No lock held:
 * the hooks' unmap runs first (it unregisters pinned memory in the CUDA
 * driver). */
void st_inc_unmap(struct feed_stream *st, struct st_inc *inc);
/* st_inc_unmap() if still mapped, then frees inc and its batches. */
void st_inc_free(struct feed_stream *st, struct st_inc *inc);
/* Unmaps the aliases inc's slots moved to (client_detach.c makes them).
 * Before the region goes; no lock held. */
void st_unmap_aliases(struct st_inc *inc);

/* ---- client_resume.c ---- */

/* Whether a batch at (epoch, position: its first sample's global
 * position) is the one st expects next. */
bool st_in_sequence(const struct feed_stream *st, uint64_t epoch, uint64_t position);
/* The token of st's position into buf (-ENOSPC past cap). */
int st_token(const struct feed_stream *st, void *buf, size_t cap, size_t *ret_len);
/* A stream opened with a token starts where the open reply so says. */
void st_resume_position(struct feed_stream *st, const Feed__StreamOpened *so);

/* ---- client_mixture.c ---- */

/* Mixtures: the options checked (-EINVAL naming the source); the
 * request's sources (in caller storage of FEED_MIXTURE_MAX); a copy of
 * the sources for reopening (st->mix_mem, freed by st_free); the reply's
 * blend kept for the tokens (-EPROTO when too large). */
int st_mixture_check(struct feed_conn *conn, const struct feed_stream_opts *o);
void st_mixture_request(const struct feed_stream_opts *o, Feed__OpenStream *os,
			Feed__MixtureSource *srcs, Feed__MixtureSource **ptrs);
int st_mixture_keep(struct feed_stream *st, const struct feed_stream_opts *o);
int st_mixture_state(struct feed_stream *st, const Feed__StreamOpened *so);

/* ---- client_incarnation.c ---- */

/* The daemon went away under st: reconnects and reopens the stream at
 * its position within opts.reconnect_ms of the first attempt, and returns
 * -ETIMEDOUT (not sticky: the next call goes on where this one stopped)
 * when the caller's deadline until_ms (st_now_ms() clock; -1: none) comes
 * first (client_incarnation.c says how). feed_next()'s thread. */
int st_reopen(struct feed_stream *st, int64_t until_ms);

/* ---- client_release.c ---- */

/* Gives back the batches the device slots kept whose conversion has run,
 * or all of them when all (feedd is gone, or the stream closes); returns
 * how many went back, and in *ret_left (when not NULL) how many are
 * still kept. feed_next()'s thread, no lock held. */
uint32_t st_poll_ipc(struct feed_stream *st, bool all, uint32_t *ret_left);
/* Gives back the batches the hooks (CL_HOOK_GPU) kept and are done with:
 * all when all; else those done, waiting for the oldest first when
 * wait_one. feed_next()'s thread, no lock held. */
void st_poll_hooks(struct feed_stream *st, bool wait_one, bool all);
/* Unmaps the retired incarnations nothing is held from any more (their
 * last release set st->reap). feed_next()'s thread, no lock held. */
void st_reap(struct feed_stream *st);
/* Gives every batch the caller still holds back (close). */
void st_release_all(struct feed_stream *st);

#endif
