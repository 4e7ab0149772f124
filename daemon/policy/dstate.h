/*
 * dstate.h: the daemon's state the layers below main() share: the one
 * struct dstate, part of struct feedd (daemon/feedd.h, built in main())
 * and handed to every module that needs more than its own state. No
 * module keeps a global.
 *
 * Threads: everything here belongs to the loop thread, except log (read-only
 * once the loop runs) and what pool.h hands to workers. cfg and cat change
 * only at a reload, on the loop thread (policy/reload.h), which reads them
 * from a worker meanwhile: so a worker may read them while d->reload runs.
 */
#ifndef FEEDD_DSTATE_H
#define FEEDD_DSTATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "builder.h"
#include "config.h"
#include "log.h"
#include "quota.h"
#include "remote.h"
#include "stats.h"

#ifndef FEEDD_VERSION
#define FEEDD_VERSION "0"
#endif

struct cat;
struct pool;
struct cache;
struct srv;
struct ses_group;
struct rld;
struct met;

struct dstate {
	struct log log;            /* read-only once threads start */
	struct cfg *cfg;           /* in force (our reference); immutable, replaced
				    * whole by a reload */
	const struct cfg_overrides *ov; /* the command line's, applied at each reload */
	const char *env_socket;    /* FEEDD_SOCKET at start, likewise */
	struct rld *reload;        /* the reload in progress, or NULL */
	bool reload_again;         /* SIGHUP during it: one more after it */
	uv_loop_t loop;            /* owns every handle: socket, connections, signals */
	struct cat *cat;           /* datasets served; replaced by a reload */
	struct pool *pool;         /* worker threads */
	struct bld_limits limits;  /* what jobs read of cfg->limits (work/builder.h):
				    * set at start and at each reload */
	struct cache *cache;       /* decoded blocks, shared by every stream */
	struct dtier *tier;        /* remote datasets' blocks on local disk (cache_dir),
				    * or NULL */
	struct remote_counters remote; /* what remote datasets fetched (metrics) */
	struct fetcher *fetcher;   /* the one thread of every remote request (data/fetcher.h) */
	struct opener *opener;     /* opens remote datasets in the background (data/opener.h) */
	struct dsl_gpu *gpu;       /* the driver, for CUDA IPC (delivery/devslots.h):
				    * made after the workers start, before the loop
				    * runs; freed after the workers are joined */
	struct srv *srv;           /* listening socket and connections */
	struct quota quota;        /* what each user holds (loop thread) */
	struct ses_group *groups;  /* groups with members (protocol/session_group.c, loop thread) */
	struct stats_reg stats;    /* every plain stream and group served (loop thread) */
	struct met *metrics;       /* the HTTP exposition, or NULL: off (stats/metrics.h) */
	uid_t self_uid;            /* our euid: may read datasets with no access list */
	uint64_t start_ms;         /* uv_now() when serving began */
	uint64_t requests;         /* requests answered (loop thread) */
	uint64_t rejected;         /* of those, answered with an Error (loop thread) */
	bool stopping;             /* a stop signal arrived */
	void (*reloaded)(struct dstate *d); /* main.c: a reload was applied; what runs
				    * on the config's figures follows them at once
				    * (the groups' detach timers:
				    * ses_groups_reloaded); NULL: none (loop thread) */
	void (*reload_notify)(struct dstate *d, bool done); /* service.c, while it tells
				    * systemd: RELOADING=1 as a reload starts,
				    * READY=1 as it ends; NULL otherwise (loop thread) */
};

#endif
