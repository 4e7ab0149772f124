/*
 * fetcher.h: the one thread that talks to remote stores. Every HTTP(S)
 * request of every remote dataset (data/remote.c: the manifest, shard
 * headers and indexes at open, and each block) is a transfer of one libcurl
 * multi handle driven by this thread; nobody else calls into libcurl's
 * transfer functions. Retries and their backoff are scheduled here too
 * (never a sleep on the caller's thread).
 *
 * Owns: the thread, the multi handle and its connections, and a table of
 * requests: queued, running, waiting to be retried, or landed (verified
 * bytes kept until their reader copies them: "staged"). A request for a
 * block has a key (dtier_key): a second read of the same block while it
 * flies waits for the same transfer, and a prefetch skips it. A landed
 * block is put in the disk tier (on this thread) before its readers wake.
 *
 * Staging is bounded and counted: every request's buffer is charged to the
 * block cache's budget (cache_reserve(), so cache_bytes covers the bytes
 * remote datasets hold in memory), and prefetches stop at a quarter of
 * that budget (a read that a batch needs is always accepted: at most one
 * per waiting thread).
 *
 * Threads: fetch_get() and fetch_prefetch() from any thread but the loop
 * (a worker, the thread that opens datasets); fetch_get() blocks on a
 * condition variable until the request lands, fails, or its deadline
 * (remote_timeout_ms x (1 + remote_retries) plus backoff, and a second)
 * passes, calling the hooks around the wait so the pool can count the
 * worker as waiting (work/pool.h pool_wait_begin()). fetcher_new() and
 * fetcher_free() in main() (or a store's own, remote.c). Lock: fetcher.mu
 * guards the table; it is never held across a libcurl call, a disk-tier
 * call, a cache call or a hook.
 */
#ifndef FEEDD_FETCHER_H
#define FEEDD_FETCHER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"

struct cache;
struct dtier;
struct fetcher;
struct fetch_src;

/* What every remote dataset did, for the metrics: one set per daemon
 * (struct dstate), bumped by the fetcher with relaxed atomics (counts for
 * people; nothing is ordered by them), read by the loop. */
struct remote_counters {
	_Atomic uint64_t requests;   /* HTTP requests made (every try) */
	_Atomic uint64_t retries;    /* tries after a failed one */
	_Atomic uint64_t failures;   /* block reads that failed after every try */
	_Atomic uint64_t bytes;      /* body bytes received */
};

/* Called around a wait of fetch_get() on the waiting thread, with no lock
 * of the fetcher held: the pool counts the caller as waiting on the
 * network, not working (pool.h). Either may be NULL. */
struct fetch_hooks {
	void (*wait_begin)(void *ctx);
	void (*wait_end)(void *ctx);
	void *ctx;
};

/* Starts the thread (signals blocked in it). cache (may be NULL) is
 * charged for the bytes staged and bounds them; it must outlive the
 * fetcher. -ENOMEM or -errno naming what failed. */
int fetcher_new(struct cache *cache, struct fetcher **ret, struct feed_err *err);

/* Sets the hooks; before any fetch_get() (main(), once the pool exists). */
void fetcher_set_hooks(struct fetcher *f, const struct fetch_hooks *hooks);

/* Ends every wait of fetch_get(), now and later, with -ECANCELED
 * ("feedd is stopping"): main() after the loop, so that a dataset still
 * opening on a hung host does not hold up the stop. Any thread. */
void fetcher_cancel(struct fetcher *f);

/* Stops and joins the thread. Every source must have been freed.
 * Accepts NULL. */
void fetcher_free(struct fetcher *f);

/* How one remote dataset's requests are made (remote.c fills it). Strings
 * are copied. */
struct fetch_src_opts {
	const char *label;          /* the dataset's URL, in every message */
	const char *url_prefix;     /* a file's URL is url_prefix + its name */
	const char *sigv4;          /* CURLOPT_AWS_SIGV4, or "" */
	const char *userpwd;        /* "KEY:SECRET", or "" */
	const char *token_hdr;      /* a header line, or "" */
	const char *sha_hdr;        /* a header line, or "" */
	uint64_t timeout_ms;        /* one try, start to end */
	uint32_t retries;           /* tries after the first */
	uint64_t backoff_ms;        /* first wait before a retry; doubles, at most 2 s */
	uint32_t inflight;          /* this dataset's transfers at once (at least 1) */
	struct dtier *tier;         /* landed blocks go here, or NULL */
	struct remote_counters *counters; /* bumped here, or NULL */
};

/* A dataset's share of f, freed with fetch_src_free(). -ENOMEM. */
int fetch_src_new(struct fetcher *f, const struct fetch_src_opts *o, struct fetch_src **ret);

/* Lets the source go: its queued and landed requests are dropped and its
 * running ones cancelled by the fetcher thread, which frees the source
 * with the last of them. Never waits (it may run on the loop thread, when
 * a reload drops a dataset). No fetch_get() on it may be waiting. Accepts
 * NULL. */
void fetch_src_free(struct fetch_src *s);

/* One request: len bytes at off of file (head: only its size). */
struct fetch_spec {
	const char *file;           /* name inside the dataset */
	uint64_t off;
	uint32_t len;
	bool head;                  /* a HEAD: the size to *ret_size */
	bool has_hash;              /* a block: hash, block and key are set */
	uint64_t hash;              /* xxh64 the bytes must have */
	uint64_t block;             /* shard-local, for messages */
	uint64_t key;               /* dtier_key(): one request per block */
};

/* Makes request sp (or joins the one in flight for the same block) and
 * waits for it: 0 with the bytes in buf (sp->len) or the size in
 * *ret_size; else -ENOENT (404), -EACCES (401/403), -EIO (transport, 5xx,
 * or no answer by the deadline), -EBADMSG (short or wrong bytes), with err
 * naming URL, file and block, and the tries. Blocking: never the loop. */
int fetch_get(struct fetch_src *s, const struct fetch_spec *sp, void *buf, uint64_t *ret_size,
	      struct feed_err *err);

/* Queues the blocks sp[0..n) (has_hash) that are neither in flight, nor
 * staged, nor in the disk tier, while staging has room; returns at once.
 * What fails is left to the reads. */
void fetch_prefetch(struct fetch_src *s, const struct fetch_spec *sp, size_t n);

/* Bytes staged now (requests' buffers), for tests and status. */
size_t fetcher_staged_bytes(struct fetcher *f);

#endif
