/*
 * region.h: one memfd-backed shared memory region of the daemon.
 *
 * Owns the memfd and the daemon's own read-write mapping of it. Regions are
 * created, sized and faulted in (fallocate) before any descriptor leaves
 * the daemon, so a memory shortage is an error here, never a SIGBUS in a
 * trainer; then sealed so no client can shrink, grow or (for the control
 * region) write them. memfd only: nothing is left in /dev/shm after a
 * crash. No thread of its own and no lock: delivery creates a stream's
 * regions on a worker (the join job, before any descriptor leaves) and
 * frees them on the loop thread (a group member leaving) or on whichever
 * thread drops the delivery's last reference (the loop or a worker);
 * workers write into the mapping meanwhile.
 */
#ifndef FEED_REGION_H
#define FEED_REGION_H

#include <stddef.h>

#include "feed_err.h"

struct region {
	int fd;       /* memfd, -1 when unused */
	void *map;    /* the daemon's PROT_READ|PROT_WRITE MAP_SHARED mapping */
	size_t size;  /* bytes, fixed for life */
};

/* Seal sets applied by region_seal(). */
#define REGION_SEALS_CONTROL 1  /* SHRINK | GROW | FUTURE_WRITE | SEAL */
#define REGION_SEALS_SHARED 2   /* SHRINK | GROW | SEAL */

/* Creates a memfd named name of size bytes (rounded up to the page size),
 * allocates its pages and maps it. Returns 0, -ENOSPC/-ENOMEM naming the
 * region and size when memory is short, or another -errno. On failure *r
 * holds nothing. */
int region_create(struct region *r, const char *name, size_t size, struct feed_err *err);

/* Applies a seal set (REGION_SEALS_*). Call once the daemon has written
 * what must be there before a client maps it. Returns 0 or -errno. */
int region_seal(struct region *r, int which, struct feed_err *err);

/* Unmaps and closes. Accepts a zeroed or already-freed region. */
void region_free(struct region *r);

#endif
