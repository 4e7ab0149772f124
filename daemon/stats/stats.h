/*
 * stats.h: what `feedctl status` shows. The lock-free counters a stream's
 * hot path bumps (struct stats_flow), the registry of every stream and
 * group being served (struct stats_reg, one per daemon), and the reply to
 * a stats request gathered from both, the catalog, the pool and the cache.
 *
 * Threads: stats_flow_* any thread, without a lock (relaxed atomics: they
 * are counts for people and tests, nothing is ordered by them). The
 * registry and stats_reply() belong to the loop thread. stats_reply()
 * never blocks: it reads counters already in memory (a stream's lock is
 * taken for O(1), the cache's for a copy).
 *
 * A group (or anything else that consumes worker time for a user) shows
 * up by registering one entry with its own read() callback: it is listed
 * once, with its members.
 */
#ifndef FEEDD_STATS_H
#define FEEDD_STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "feed.pb-c.h"

/* ---- counters bumped on the hot path ---- */

struct stats_flow {
	/* relaxed: counts for display; no reader orders other memory by them */
	_Atomic uint64_t batches, samples, bytes;
};

struct stats_flow_snap {
	uint64_t batches, samples, bytes;
};

/* One batch of nsamples samples and bytes bytes was published. */
static inline void stats_flow_add(struct stats_flow *f, uint64_t nsamples, uint64_t bytes)
{
	atomic_fetch_add_explicit(&f->batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->samples, nsamples, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->bytes, bytes, memory_order_relaxed);
}

/* Each counter read once; they may disagree by a batch in flight. */
static inline void stats_flow_read(struct stats_flow *f, struct stats_flow_snap *ret)
{
	ret->batches = atomic_load_explicit(&f->batches, memory_order_relaxed);
	ret->samples = atomic_load_explicit(&f->samples, memory_order_relaxed);
	ret->bytes = atomic_load_explicit(&f->bytes, memory_order_relaxed);
}

/* ---- the registry (loop thread) ---- */

/* What a stream or group reports when asked (its read() callback). */
struct stats_sample {
	uint64_t batches, samples, bytes;
	uint64_t worker_ns, jobs;
	uint64_t reader_wait_ns;       /* as the client wrote it: stats_reply() clamps */
	uint64_t replaced;             /* samples replaced (on_error skip) */
	uint32_t credits, credits_in_use;
	uint32_t members;              /* 0 counts as 1 */
	const int32_t *member_pids;    /* members of them, or NULL; valid until the
					* reply is sent (the loop turn) */
	const uint64_t *member_reader_wait_ns; /* likewise, with member_pids */
};

struct cat_entry;

/* One stream or group being served; embedded in its owner, which fills the
 * fields, calls stats_add() once it is delivering and stats_remove()
 * before it goes. */
struct stats_entry {
	struct stats_entry *prev, *next; /* private: the registry */
	const char *kind;              /* "stream" or "group" */
	uid_t uid;
	pid_t pid;
	uint64_t conn;                 /* connection number, 0 for a group */
	uint32_t id;                   /* stream id on it */
	const struct cat_entry *e;     /* its dataset (the catalog outlives it) */
	const char *group;             /* NULL or "": not in a group */
	const char *pipeline;          /* canonical text; lives as long as the entry */
	uint32_t batch;
	uint64_t shm_bytes;            /* its regions */
	const char *device;            /* NULL or "": no device slots asked; "ipc";
				        * or why not; lives as long as the entry */
	uint64_t device_bytes;         /* GPU memory of its device slots */
	uint64_t opened_ms;            /* uv_now() when it started delivering */
	void (*read)(struct stats_entry *en, struct stats_sample *ret);
};

struct stats_reg {
	struct stats_entry *first;     /* zero-initialised: empty */
	unsigned n;
};

void stats_add(struct stats_reg *r, struct stats_entry *en);
/* Accepts an entry never added (prev and next NULL, not first). */
void stats_remove(struct stats_reg *r, struct stats_entry *en);

/* ---- the reply ---- */

struct feedd;
struct acl_peer;

/* Fills st (already holding the daemon-wide fields) with the datasets,
 * streams and groups peer may see and the cache's counters. What it
 * allocates hangs on *ret_mem, freed with stats_reply_free() once the
 * reply is encoded. -ENOMEM. Loop thread. */
int stats_reply(struct feedd *d, const struct acl_peer *peer, Feed__Stats *st,
		void **ret_mem);
void stats_reply_free(void *mem);

#endif
