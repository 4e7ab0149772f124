/*
 * feedd.h: the one struct feedd, built in main() and handed to every
 * module that needs more than its own state. No module keeps a global.
 *
 * Threads: everything here belongs to the loop thread, except log and cfg
 * (read-only once the loop runs) and what pool.h hands to workers.
 */
#ifndef FEEDD_FEEDD_H
#define FEEDD_FEEDD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "log.h"
#include "quota.h"
#include "stats.h"

#ifndef FEEDD_VERSION
#define FEEDD_VERSION "0"
#endif

struct cat;
struct pool;
struct cache;
struct srv;
struct ses_group;
struct met;

struct feedd {
	struct log log;            /* read-only once threads start */
	const struct cfg *cfg;     /* immutable */
	uv_loop_t loop;            /* owns every handle: socket, connections, signals */
	struct cat *cat;           /* datasets served */
	struct pool *pool;         /* worker threads */
	struct cache *cache;       /* decoded blocks, shared by every stream */
	struct dsl_gpu *gpu;       /* the driver, for CUDA IPC (delivery/devslots.h):
				    * made before the workers, freed after them */
	struct srv *srv;           /* listening socket and connections */
	struct quota quota;        /* what each user holds (loop thread) */
	struct ses_group *groups;  /* groups with members (control/session_group.c, loop thread) */
	struct stats_reg stats;    /* every plain stream and group served (loop thread) */
	struct met *metrics;       /* the HTTP exposition, or NULL: off (stats/metrics.h) */
	uid_t self_uid;            /* our euid: may read datasets with no access list */
	uint64_t start_ms;         /* uv_now() when serving began */
	uint64_t requests;         /* requests answered (loop thread) */
	uint64_t rejected;         /* of those, answered with an Error (loop thread) */
	bool stopping;             /* a stop signal arrived */
	uv_signal_t sigterm;
	uv_signal_t sigint;
	uv_signal_t sighup;        /* logged: no reload yet, and not a death either */
};

#endif
