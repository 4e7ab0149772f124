/*
 * fault_ctl.h: the control page shared by a fault-injection test and
 * fault_shim.c preloaded into the feedd it starts. The test creates the
 * file (FEED_FAULT_CTL names it) before it starts feedd; both map it
 * MAP_SHARED. The test writes kind only while fail_at is 0, then arms
 * with a release store; the shim reads kind after an acquire load of
 * fail_at. read_path and shm_name are written once, before their first
 * arming, and never again: a pread or fallocate in flight may read them
 * at any time after (disarming stores only the mode). The counters are
 * written by the shim only.
 */
#ifndef FEED_FAULT_CTL_H
#define FEED_FAULT_CTL_H

#include <stdatomic.h>
#include <stdint.h>

#define FAULT_CTL_MAGIC 0x4c544346u  /* "FCTL" */
#define FAULT_KIND_MAX 32            /* a request kind's name, with its NUL */
#define FAULT_PATH_MAX 200           /* a path substring, with its NUL */

/* What fault_shim.c does to pread() on a file whose path contains
 * read_path (resolved through /proc/self/fd at each call). */
enum fault_read_mode {
	FAULT_READ_NONE,   /* nothing */
	FAULT_READ_SHORT,  /* returns half of what was asked (at least 1 byte) */
	FAULT_READ_EIO,    /* fails with EIO */
};

struct fault_ctl {
	uint32_t magic;                /* FAULT_CTL_MAGIC: the test made this file */
	/* Allocations: one shot. The next request of kind `kind` handled on
	 * feedd's loop takes fail_at (setting it back to 0), and its
	 * fail_at-th allocation (1-based) returns NULL with ENOMEM. */
	char kind[FAULT_KIND_MAX];     /* e.g. "open_stream" (fault_shim.c lists them) */
	_Atomic int64_t fail_at;       /* 0: nothing armed */
	_Atomic int64_t armed_done;    /* armed requests that have ended */
	_Atomic int64_t last_allocs;   /* allocations the last armed request made (tried) */
	_Atomic int64_t fired;         /* allocations failed, in all */
	/* Shard reads: from the moment read_mode is stored, until it is
	 * stored back to FAULT_READ_NONE. */
	char read_path[FAULT_PATH_MAX];
	_Atomic int32_t read_mode;     /* enum fault_read_mode */
	_Atomic int64_t read_skip;     /* matching preads let through first (counts down) */
	_Atomic int64_t read_faults;   /* preads cut short or failed, in all */
	/* Shared memory: while shm_fail is 1, fallocate() on a memfd whose
	 * name contains shm_name fails with ENOSPC (/dev/shm full). */
	char shm_name[FAULT_KIND_MAX];
	_Atomic int32_t shm_fail;
	_Atomic int64_t shm_faults;    /* fallocates failed, in all */
};

#endif
