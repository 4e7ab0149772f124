/*
 * region.c: memfd regions (see region.h). Any thread (delivery's workers
 * create them); never maps files.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region.h"

int region_create(struct region *r, const char *name, size_t size, struct feed_err *err)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int rc;

	r->fd = -1;
	r->map = NULL;
	r->size = (size + page - 1) / page * page;
	if (r->size == 0)
		r->size = page;
	r->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->fd < 0)
		return feed_err_set(err, -errno, "region %s: memfd_create: %s", name, strerror(errno));
	if (ftruncate(r->fd, (off_t)r->size) < 0) {
		rc = feed_err_set(err, -errno, "region %s: size %zu: %s", name, r->size, strerror(errno));
		goto fail;
	}
	/* Allocate every page now: a shortage fails here, in the daemon. */
	if (fallocate(r->fd, 0, 0, (off_t)r->size) < 0) {
		rc = feed_err_set(err, -errno, "region %s: cannot allocate %zu bytes of shared memory: %s",
				  name, r->size, strerror(errno));
		goto fail;
	}
	r->map = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->map == MAP_FAILED) {
		r->map = NULL;
		rc = feed_err_set(err, -errno, "region %s: mmap %zu bytes: %s", name, r->size,
				  strerror(errno));
		goto fail;
	}
	return 0;
fail:
	region_free(r);
	return rc;
}

int region_seal(struct region *r, int which, struct feed_err *err)
{
	int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

	if (which == REGION_SEALS_CONTROL)
		seals |= F_SEAL_FUTURE_WRITE;
	if (fcntl(r->fd, F_ADD_SEALS, seals) < 0)
		return feed_err_set(err, -errno, "region: F_ADD_SEALS: %s", strerror(errno));
	return 0;
}

void region_free(struct region *r)
{
	if (r->size == 0) /* zeroed or already freed */
		return;
	if (r->map)
		munmap(r->map, r->size);
	if (r->fd >= 0)
		close(r->fd);
	r->map = NULL;
	r->fd = -1;
	r->size = 0;
}
