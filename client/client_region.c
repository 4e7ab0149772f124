/*
 * client_region.c: checking and mapping the regions feedd sends with a
 * stream (feed_shm.h): each memfd's seals and size, each doorbell's kind,
 * the control and release headers' layout against those sizes, once, at
 * open; and unmapping an incarnation's regions when nothing uses them.
 *
 * Threads: st_map and st_batches_new on the thread opening the stream;
 * st_inc_unmap on feed_next()'s thread (st_reap, st_adopt) or at close,
 * with no lock held (the hooks' unmap calls the CUDA driver). Must never: trust a field before checking it against
 * what fstat said, or leave a partly mapped stream for the caller to
 * free other than through st_free.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_stream.h"
#include "feed_lock.h"

static const char *const st_region_name[3] = {"control region", "data region",
					      "release region"};

/* off + len fits in size, without overflow. */
static bool st_fits(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static bool st_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

static int st_bad(struct feed_stream *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int st_bad(struct feed_stream *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int st_bad(struct feed_stream *st, const char *fmt, ...)
{
	char what[CL_ERRMSG_MAX - 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return cl_fail(st->conn, -EPROTO, "stream %u from feedd: %s", st->info.id, what);
}

/* A memfd with at least the seals want; its size in *ret_size. */
static int st_check_memfd(struct feed_stream *st, int i, int want, size_t *ret_size)
{
	struct stat sb;
	int seals;

	if (fstat(st->fd[i], &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0)
		return st_bad(st, "%s: not a memory file of non-zero size", st_region_name[i]);
	seals = fcntl(st->fd[i], F_GET_SEALS);
	if (seals < 0)
		return st_bad(st, "%s: F_GET_SEALS: %s", st_region_name[i], cl_os_strerror(errno));
	if ((seals & want) != want)
		return st_bad(st, "%s: seals 0x%x lack 0x%x (SHRINK, GROW, SEAL%s)",
			      st_region_name[i], (unsigned)seals, (unsigned)(want & ~seals),
			      want & F_SEAL_FUTURE_WRITE ? ", FUTURE_WRITE" : "");
	*ret_size = (size_t)sb.st_size;
	return 0;
}

/* An eventfd (as far as /proc tells), made non-blocking. */
static int st_check_eventfd(struct feed_stream *st, int i)
{
	const char *name = i == ST_FD_READY ? "ready doorbell" : "release doorbell";
	char path[64], link[64];
	int fd = st->fd[i];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n >= 0) {
		link[n] = '\0';
		if (strcmp(link, "anon_inode:[eventfd]"))
			return st_bad(st, "%s: not an eventfd (%s)", name, link);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return st_bad(st, "%s: fcntl: %s", name, cl_os_strerror(errno));
	return 0;
}

static int st_map_one(struct feed_stream *st, int i, int prot, void **ret)
{
	/* a group's data: private, so a write copies the page for us alone */
	int flags = i == ST_FD_DATA && st->group ? MAP_PRIVATE : MAP_SHARED;
	struct st_inc *inc = st_inc_now(st);
	void *p = mmap(NULL, inc->len[i], prot, flags, st->fd[i], 0);

	if (p == MAP_FAILED) {
		int e = errno;
		return cl_fail(st->conn, -e, "stream %u: mmap %s of %zu bytes: %s", st->info.id,
			       st_region_name[i], inc->len[i], cl_os_strerror(e));
	}
	inc->map[i] = p; /* unmapped by st_inc_unmap, even if a check fails next */
	inc->mapped = true;
	*ret = p;
	return 0;
}

/* The control header's layout, against the sizes fstat gave. */
static int st_check_ctl(struct feed_stream *st, const struct feed_shm_ctl *c, uint32_t batch,
			uint32_t credits)
{
	const size_t *len = st_inc_now(st)->len;
	uint64_t ring_end, slot_min;

	if (c->magic != FEED_SHM_CTL_MAGIC || c->version != FEED_SHM_VERSION)
		return st_bad(st, "control region: magic 0x%x version %u, expected 0x%x version %d",
			      c->magic, c->version, FEED_SHM_CTL_MAGIC, FEED_SHM_VERSION);
	if (c->ctl_bytes != len[0] || c->data_bytes != len[1] || c->rel_bytes != len[2])
		return st_bad(st, "control region: sizes %llu/%llu/%llu, the memfds have %zu/%zu/%zu",
			      (unsigned long long)c->ctl_bytes, (unsigned long long)c->data_bytes,
			      (unsigned long long)c->rel_bytes, len[0], len[1], len[2]);
	if (c->nslots == 0 || c->nslots > (st->group ? FEED_SHM_MAX_SLOTS : credits))
		return st_bad(st, "control region: %u slots for %u credits", c->nslots, credits);
	if (c->batch != batch || c->nfields != st->info.num_fields ||
	    c->nfields > FEED_SHM_MAX_FIELDS)
		return st_bad(st, "control region: batch %u, %u fields; expected %u, %u", c->batch,
			      c->nfields, batch, st->info.num_fields);
	if (!st_pow2(c->ring_cap) || c->ring_cap <= c->nslots)
		return st_bad(st, "control region: ring_cap %u is not a power of two above %u slots",
			      c->ring_cap, c->nslots);
	ring_end = c->ring_off + 8ull * c->ring_cap;
	if (c->ring_off % 8 || c->ring_off < sizeof(*c) || !st_fits(c->ring_off, 8ull * c->ring_cap,
								     c->ctl_bytes))
		return st_bad(st, "control region: ready ring at %llu is outside it",
			      (unsigned long long)c->ring_off);
	slot_min = sizeof(struct feed_shm_slot) + 8ull * c->batch;
	if (c->slot_hdr_bytes < slot_min || c->slot_hdr_bytes % 8 || c->slots_off % 8 ||
	    c->slots_off < sizeof(*c) || (c->slots_off < ring_end && c->slots_off +
					  c->nslots * c->slot_hdr_bytes > c->ring_off) ||
	    !st_fits(c->slots_off, c->nslots * c->slot_hdr_bytes, c->ctl_bytes))
		return st_bad(st, "control region: %u slot headers of %llu bytes at %llu do not fit",
			      c->nslots, (unsigned long long)c->slot_hdr_bytes,
			      (unsigned long long)c->slots_off);
	if (c->slot_bytes == 0 || c->slot_bytes > c->data_bytes / c->nslots)
		return st_bad(st, "control region: %u data slots of %llu bytes exceed %llu",
			      c->nslots, (unsigned long long)c->slot_bytes,
			      (unsigned long long)c->data_bytes);
	return 0;
}

static int st_check_rel(struct feed_stream *st, const struct feed_shm_rel *r)
{
	if (r->magic != FEED_SHM_REL_MAGIC || r->version != FEED_SHM_VERSION)
		return st_bad(st, "release region: magic 0x%x version %u, expected 0x%x version %d",
			      r->magic, r->version, FEED_SHM_REL_MAGIC, FEED_SHM_VERSION);
	if (!st_pow2(r->ring_cap) || r->ring_cap < st->nslots)
		return st_bad(st, "release region: ring_cap %u is not a power of two of at least %u",
			      r->ring_cap, st->nslots);
	if (r->ring_off % 8 || r->ring_off < sizeof(*r) ||
	    !st_fits(r->ring_off, 8ull * r->ring_cap, st_inc_now(st)->len[2]))
		return st_bad(st, "release region: ring at %llu is outside it",
			      (unsigned long long)r->ring_off);
	if (atomic_load_explicit(&r->rel_head, memory_order_relaxed) != 0)
		return st_bad(st, "release region: head is not 0 at open");
	return 0;
}

int st_map(struct feed_stream *st, uint32_t batch, uint32_t credits)
{
	const int shared = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	void *ctl = NULL, *data = NULL, *rel = NULL;
	size_t *len = st_inc_now(st)->len;
	int r;

	if ((r = st_check_memfd(st, ST_FD_CTL, shared | F_SEAL_FUTURE_WRITE, &len[0])) < 0 ||
	    (r = st_check_memfd(st, ST_FD_DATA, st->group ? shared | F_SEAL_FUTURE_WRITE : shared,
				&len[1])) < 0 ||
	    (r = st_check_memfd(st, ST_FD_REL, shared, &len[2])) < 0 ||
	    (r = st_check_eventfd(st, ST_FD_READY)) < 0 ||
	    (r = st_check_eventfd(st, ST_FD_RELEASE)) < 0)
		return r;
	if (len[0] < sizeof(struct feed_shm_ctl) || len[2] < sizeof(struct feed_shm_rel))
		return st_bad(st, "control or release region smaller than its header");
	if ((r = st_map_one(st, ST_FD_CTL, PROT_READ, &ctl)) < 0)
		return r;
	st->ctl = ctl;
	if ((r = st_check_ctl(st, ctl, batch, credits)) < 0)
		return r;
	/* the stream's only reader may write its batches (in-place ops); a
	 * group member writes its private copy */
	if (st->group && st->ctl->slot_bytes % (uint64_t)sysconf(_SC_PAGESIZE))
		return st_bad(st, "data region: a group's slots of %llu bytes are not whole pages",
			      (unsigned long long)st->ctl->slot_bytes);
	if ((r = st_map_one(st, ST_FD_DATA, PROT_READ | PROT_WRITE, &data)) < 0)
		return r;
	st->data = data;
	if ((r = st_map_one(st, ST_FD_REL, PROT_READ | PROT_WRITE, &rel)) < 0)
		return r;
	st->rel = rel;
	st->nslots = st->ctl->nslots;
	if ((r = st_check_rel(st, rel)) < 0)
		return r;
	/* the ring is read-only here: a consumer only loads through it */
	st->ready = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)ctl + st->ctl->ring_off),
		.head = (_Atomic uint64_t *)&st->ctl->ready_head,
		.waiting = &st->rel->client_waiting,
		.cap = st->ctl->ring_cap};
	st->nfields = st->ctl->nfields;
	st->batch = st->ctl->batch;
	st->slot_bytes = st->ctl->slot_bytes;
	st->slot_hdr_bytes = st->ctl->slot_hdr_bytes;
	st->slots_off = st->ctl->slots_off;
	st->release = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)rel + st->rel->ring_off),
		.head = &st->rel->rel_head,
		.waiting = &st->rel->daemon_waiting,
		.cap = st->rel->ring_cap};
	st->take_max = st->group && credits < st->nslots ? credits : st->nslots;
	st->info.credits = st->take_max;
	st->info.batch = st->batch;
	return 0;
}

int st_batches_new(struct feed_stream *st)
{
	struct st_inc *inc = st_inc_now(st);

	st->batches = calloc(st->nslots, sizeof(*st->batches));
	if (!st->batches)
		return cl_fail(st->conn, -ENOMEM, "out of memory for %u batches", st->nslots);
	for (uint32_t i = 0; i < st->nslots; i++) {
		st->batches[i].st = st;
		st->batches[i].inc = inc;
		st->batches[i].slot = i;
		st->batches[i].base = st->data + (uint64_t)i * st->slot_bytes;
		atomic_init(&st->batches[i].held, false);
	}
	inc->batches = st->batches;
	inc->nslots = st->nslots;
	inc->slot_bytes = st->slot_bytes;
	return 0;
}


/* Unmaps inc's regions (once: mapped is cleared under rel_lock, so a
 * close racing a last release does it once). No lock held. */
void st_inc_unmap(struct feed_stream *st, struct st_inc *inc)
{
	feed_mutex_lock(&st->rel_lock);
	bool mapped = inc->mapped;
	inc->mapped = false;
	feed_mutex_unlock(&st->rel_lock);
	if (!mapped)
		return;
	/* unregistered (pinned, GPU copies) before the memory goes */
	for (int id = 0; id < CL_HOOKS; id++) {
		struct cl_hook h;
		void *self = st_hook_get(st, (enum cl_hook_id)id, &h);
		if (self && h.unmap && inc->map[1])
			h.unmap(self, inc->map[1]);
	}
	cl_ipc_close(inc->ipc);
	inc->ipc = NULL;
	if (inc->map[1] && inc->batches)
		st_unmap_aliases(inc);
	for (int i = 0; i < 3; i++)
		if (inc->map[i])
			munmap(inc->map[i], inc->len[i]);
	memset(inc->map, 0, sizeof(inc->map));
}

void st_inc_free(struct feed_stream *st, struct st_inc *inc)
{
	st_inc_unmap(st, inc);
	free(inc->batches);
	free(inc);
}

void st_unmap_aliases(struct st_inc *inc)
{
	for (uint32_t i = 0; i < inc->nslots; i++) {
		uint8_t *home = (uint8_t *)inc->map[1] + (uint64_t)i * inc->slot_bytes;
		if (inc->batches[i].base != home)
			munmap(inc->batches[i].base, (size_t)inc->slot_bytes);
		inc->batches[i].base = home;
	}
}
