/*
 * stats.h: what `feedctl status` and the metrics show: the registry of
 * every stream and group being served (struct stats_reg, one per daemon)
 * with a sample of each every second (the 10 s rates), what closed
 * streams counted (struct stats_series, so no counter of the metrics
 * goes backwards), and the reply to a stats request gathered from these,
 * the catalog, the pool and the cache.
 *
 * The counters a stream's hot path bumps are its delivery's own
 * (delivery/), read through each entry's read() callback.
 *
 * Threads: the
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
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "feed.pb-c.h"

/* ---- the registry (loop thread) ---- */

/* What a stream or group reports when asked (its read() callback). */
struct stats_sample {
	uint64_t batches, samples, bytes;
	uint64_t worker_ns, jobs;
	uint64_t reader_wait_ns;       /* as the client wrote it: stats_read() clamps */
	uint64_t replaced;             /* samples replaced (on_error skip) */
	uint64_t detached;             /* batches its clients moved to private memory
					* (held views), as they wrote it:
					* stats_read() clamps */
	uint32_t credits, credits_in_use;
	uint32_t members;              /* 0 counts as 1 */
	const int32_t *member_pids;    /* members of them, or NULL; valid until the
					* reply is sent (the loop turn) */
	const uint64_t *member_reader_wait_ns; /* likewise, with member_pids */
	const char *jpeg_decode;       /* hybrid JPEG decode's state, or NULL;
					* valid until the reply is sent */
};

struct cat_entry;

#define STATS_RATE_S 10           /* the window of the *_10s rates, seconds */
#define STATS_JOB_MAX 128         /* OpenStream.job: bytes at most */
#define STATS_LABEL_MAX 64        /* dataset and group names: bytes at most */

/* An entry's samples, one a second, for the rates, and the most it has
 * shown of each counter (stats_read() never shows less: a group's reader
 * wait is its members' largest, which falls when that member leaves).
 * Private to the registry (loop thread). */
struct stats_hist {
	uint64_t ms[STATS_RATE_S + 1];      /* uv_now() of each sample, a ring */
	uint64_t samples[STATS_RATE_S + 1]; /* samples published, at ms[i] */
	uint64_t bytes[STATS_RATE_S + 1];   /* bytes published, at ms[i] */
	uint64_t wait_ns[STATS_RATE_S + 1]; /* reader wait (clamped), at ms[i] */
	unsigned head;                      /* the next sample's index */
	unsigned n;                         /* samples held, 1..STATS_RATE_S + 1 */
	uint64_t max_batches, max_samples, max_bytes; /* the most shown so far */
	uint64_t max_worker_ns, max_jobs, max_wait_ns; /* likewise */
	uint64_t max_detached;              /* likewise */
};

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
	const char *label;             /* NULL, or what status and the dataset label
				        * call it instead of e (a mixture's name);
				        * lives as long as the entry */
	const char *group;             /* NULL or "": not in a group */
	const char *pipeline;          /* canonical text; lives as long as the entry */
	uint32_t batch;
	uint64_t shm_bytes;            /* its regions */
	const char *device;            /* NULL or "": no device slots asked; "ipc";
				        * or why not; lives as long as the entry */
	uint64_t device_bytes;         /* GPU memory of its device slots */
	uint64_t opened_ms;            /* uv_now() when it started delivering */
	const char *job;               /* OpenStream.job (a group: its creator's);
					* NULL or "": none; lives as long as the entry */
	uint64_t slot_bytes;           /* one data slot; 0: not known */
	uint32_t rank, world;          /* OpenStream.rank/world_size (world 0: not set) */
	uint64_t batches_per_epoch;    /* of this rank; 0: not known */
	uint64_t epochs;               /* asked for; 0: no end */
	uint64_t start_epoch, start_batch; /* where it started (resumed, or a late joiner) */
	struct stats_hist hist;        /* private: the registry's samples */
	void (*read)(struct stats_entry *en, struct stats_sample *ret);
};

/* One series of the per-stream metrics: the label set (user, dataset,
 * job, group) and what the streams with those labels counted after they
 * closed. Streams alive now add theirs on top when the metrics are read,
 * so a series' counters never go backwards when a stream closes: its
 * counts move here, under the same labels. */
struct stats_series {
	uid_t uid;                     /* label user; (uid_t)-1: "_other" */
	char dataset[STATS_LABEL_MAX]; /* label dataset: its configured name */
	char job[STATS_JOB_MAX + 1];   /* label job: "" when none */
	char group[STATS_LABEL_MAX];   /* label group: "" outside groups */
	uint64_t batches, samples, bytes; /* counters, as struct stats_sample */
	uint64_t worker_ns, reader_wait_ns; /* likewise, in ns */
	uint64_t replaced;             /* counter: samples replaced (on_error skip) */
	uint64_t detached;             /* counter: batches detached (the clients' word) */
	uint32_t credits, credits_in_use; /* gauges: the live streams' sum (0 once all closed) */
	uint32_t readers;              /* gauge: the live streams' readers (a group's members) */
	uint64_t shm_bytes;            /* gauge: the live streams' regions */
	uint64_t slot_bytes;           /* gauge: the largest slot among the live streams */
	uint32_t live;                 /* streams and groups open with these labels */
};

/* What the closed streams of one dataset counted, kept for good (the
 * per-dataset totals; a stream's own series leaves after the next scrape). */
struct stats_dataset_total {
	char dataset[STATS_LABEL_MAX]; /* its configured name (a mixture: its label); "_other" past the bound */
	uint64_t batches, samples, bytes, worker_ns, reader_wait_ns, replaced;
	uint64_t detached;             /* batches detached (the clients' word) */
	uint64_t closed;               /* streams and groups closed */
};

/* Past this many label sets of closed streams not yet scraped, another
 * one's counts go to the series labelled "_other" everywhere: the metrics
 * stay bounded however many streams close between two scrapes. After a
 * scrape shows them (stats_scraped()), closed series leave. */
#define STATS_SERIES_MAX 4096
/* Per-dataset totals kept (distinct dataset names ever streamed); past
 * it, under dataset "_other". */
#define STATS_DATASETS_MAX 1024

/* Why a request was refused, as feedd_refusals_total{reason} names it. */
enum stats_refusal {
	STATS_REFUSED_ACCESS,          /* EACCES, EPERM: not allowed */
	STATS_REFUSED_LIMIT,           /* a per-user limit (quota.h) */
	STATS_REFUSED_NOT_FOUND,       /* no such dataset, stream, pipeline */
	STATS_REFUSED_INVALID,         /* a request with a value out of range */
	STATS_REFUSED_MALFORMED,       /* not a request at all */
	STATS_REFUSED_OTHER,           /* anything else (out of memory, ...) */
	STATS_REFUSED_N
};
extern const char *const stats_refusal_names[STATS_REFUSED_N];

struct stats_reg {
	struct stats_entry *first;     /* zero-initialised: empty */
	unsigned n;
	struct stats_series *closed;   /* what streams closed since the last scrape
					* counted, per label set */
	size_t nclosed, cap;
	struct stats_dataset_total *totals; /* closed streams, per dataset, for good */
	size_t ntotals, tcap;
	bool reload_ok;                /* the last reload (or the start) succeeded */
	double reload_ok_s;            /* wall clock (s since 1970) of the last success,
					* or of the start */
	uint64_t reloads, reloads_failed; /* reloads tried, and refused */
	uint64_t refusals[STATS_REFUSED_N]; /* requests refused, by reason */
	uint32_t connections;          /* open now (transport/server.c keeps it) */
	uv_loop_t *loop;               /* its clock; NULL before stats_start() */
	struct cache *cache;           /* names each entry's dataset for its
					* counters (cache_name()); NULL: none */
	uv_timer_t tick;               /* samples every entry each second */
	bool ticking;                  /* tick started: stats_stop() closes it */
};

/* Starts the one-second sampling on loop; from now on each entry added
 * names its dataset in cache (so a dataset added later, by a reload, has
 * its per-dataset counters from its first stream on; NULL: none). 0 or a
 * libuv error. */
struct cache;
int stats_start(struct stats_reg *r, uv_loop_t *loop, struct cache *cache);
/* Closes the timer (the loop then frees nothing of ours); idempotent. */
void stats_stop(struct stats_reg *r);
/* Frees what closed streams counted; after the loop has ended. */
void stats_free(struct stats_reg *r);

/* Lists en from now on (its counters start at 0, at en->opened_ms). */
void stats_add(struct stats_reg *r, struct stats_entry *en);
/* Takes en off the list, its counts kept under its labels (see struct
 * stats_series). Accepts an entry never added (prev and next NULL, not
 * first). */
void stats_remove(struct stats_reg *r, struct stats_entry *en);

/* A request was refused with code (a negative errno); malformed: it was
 * not a request at all. Loop thread. */
void stats_refused(struct stats_reg *r, int code, bool malformed);

/* en's counters now: read() with the reader wait clamped to the entry's
 * age and every counter at least what it was before. now_ms: uv_now(). */
void stats_read(struct stats_entry *en, uint64_t now_ms, struct stats_sample *ret);

/* Rates over the last STATS_RATE_S seconds (since it opened, if younger),
 * from en's samples and x, read at now_ms. */
struct stats_rates {
	double samples_per_s, mb_per_s, reader_wait_share;
};
void stats_rates(const struct stats_entry *en, const struct stats_sample *x, uint64_t now_ms,
		 struct stats_rates *ret);

/* Calls fn once per label set of the per-stream metrics: closed streams'
 * counts plus those of the streams alive now, summed per label set. The
 * series passed are valid for the call. -ENOMEM, or fn's first error. */
int stats_each_series(struct stats_reg *r, uint64_t now_ms,
		      int (*fn)(const struct stats_series *s, void *arg), void *arg);

/* A scrape showed the series: the closed ones no open stream shares labels
 * with leave (their counts stay in the per-dataset totals). Loop thread. */
void stats_scraped(struct stats_reg *r);

/* Calls fn once per dataset streamed: the closed streams' totals plus the
 * open ones' counts (fn's stats_dataset_total is valid for the call).
 * -ENOMEM, or fn's first error. Loop thread. */
int stats_each_dataset(struct stats_reg *r, uint64_t now_ms,
		       int (*fn)(const struct stats_dataset_total *t, void *arg), void *arg);

/* A reload ended: applied (ok) or refused. Loop thread. */
void stats_reloaded(struct stats_reg *r, bool ok);

/* ---- the reply ---- */

struct acl_peer;
struct cat;
struct cache;

/* What a reply is gathered from: the registry, the datasets served, the
 * block cache, the daemon's euid (may read datasets with no access list)
 * and the loop's uv_now(). All borrowed for the call. */
struct stats_sources {
	struct stats_reg *reg;
	const struct cat *cat;
	struct cache *cache;
	uid_t self_uid;
	uint64_t now_ms;
};

/* Fills st (already holding the daemon-wide fields) with the datasets,
 * streams and groups peer may see and the cache's counters. What it
 * allocates hangs on *ret_mem, freed with stats_reply_free() once the
 * reply is encoded. -ENOMEM. Loop thread. */
int stats_reply(const struct stats_sources *src, const struct acl_peer *peer, Feed__Stats *st,
		void **ret_mem);
void stats_reply_free(void *mem);

#endif
