/*
 * client_detach.c: a held batch that would keep its slot from feedd is
 * detached instead (feed_batch_detach): its slot's pages are replaced, at
 * the same addresses, by a private copy, so every view of it stays valid,
 * and the slot goes back to feedd. The slot's next deliveries come through
 * an alias: a fresh mapping of the slot's part of the data memfd (struct
 * feed_batch.base). The copy lives until feed_detached_free(), which
 * gives the pages back and keeps the addresses reserved (PROT_NONE) when
 * they lie inside the data region, so nothing else is ever mapped into
 * the region's range before it is unmapped whole.
 *
 * Threads: feed_batch_detach() on the thread that calls feed_next() (it
 * changes the slot's base, which deliveries read); feed_detached_free()
 * on any thread. st->rel_lock guards the incarnation's count of detached
 * copies (a retired incarnation is unmapped only when none is left) and
 * the release ring, as in client_release.c. Must never: detach a batch
 * whose memory another party registered (pinned, device copies in flight,
 * device slots) or a group member's copy-on-write view.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_stream.h"
#include "feed_lock.h"

struct feed_detached {
	struct feed_stream *st;
	struct st_inc *inc;        /* the incarnation whose count it is in */
	uint8_t *addr;             /* the private copy, where the slot was */
	size_t len;
	bool in_region;            /* addr lies in inc's data region (else an alias) */
};

/* Why b cannot be detached, or 0. */
static int dt_check(const struct feed_batch *b, long page)
{
	struct feed_stream *st = b->st;

	if (!atomic_load_explicit(&b->held, memory_order_acquire))
		return -EINVAL;
	if (b->inc != st_inc_now(st) || st->group || b->inc->ipc)
		return -ENOTSUP; /* retired, copy-on-write, or feedd's device slots */
	for (int id = 0; id < CL_HOOKS; id++) {
		struct cl_hook h;
		if (st_hook_get(st, (enum cl_hook_id)id, &h))
			return -EBUSY; /* pinned or watched by the GPU parts */
	}
	if ((uintptr_t)b->base % (uintptr_t)page || st->slot_bytes % (uint64_t)page)
		return -ENOTSUP; /* slots that share pages (an older feedd) */
	return 0;
}

/* Replaces [base, base + len) by a private copy of its bytes, atomically
 * (mremap over the range: no moment without the bytes). */
static int dt_copy_in_place(uint8_t *base, size_t len)
{
	void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (copy == MAP_FAILED)
		return -errno;
	memcpy(copy, base, len);
	if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, base) == MAP_FAILED) {
		int e = -errno;
		munmap(copy, len);
		return e;
	}
	return 0;
}

int feed_batch_detach(struct feed_batch *b, struct feed_detached **ret)
{
	long page = sysconf(_SC_PAGESIZE);

	if (!b || !ret)
		return -EINVAL;
	int r = dt_check(b, page);
	if (r < 0)
		return r;
	struct feed_stream *st = b->st;
	struct st_inc *inc = b->inc;
	size_t len = (size_t)st->slot_bytes;
	struct feed_detached *d = calloc(1, sizeof(*d));
	/* the slot's bytes in the memfd, for its next deliveries */
	void *alias = d ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
			       st->fd[ST_FD_DATA], (off_t)b->slot * (off_t)len)
			: MAP_FAILED;
	if (alias == MAP_FAILED) {
		r = d ? -errno : -ENOMEM;
		free(d);
		return r;
	}
	if ((r = dt_copy_in_place(b->base, len)) < 0) {
		munmap(alias, len);
		free(d);
		return r;
	}
	uint8_t *region = inc->map[1];
	*d = (struct feed_detached){.st = st, .inc = inc, .addr = b->base, .len = len,
				    .in_region = b->base >= region && b->base < region + inc->len[1]};
	b->base = alias;
	feed_mutex_lock(&st->rel_lock);
	inc->detached++;
	feed_mutex_unlock(&st->rel_lock);
	atomic_fetch_add_explicit(&st->ndetached, 1, memory_order_relaxed);
	/* relaxed: a count feedd only displays (status, metrics) */
	atomic_fetch_add_explicit(&st->rel->detached_batches, 1, memory_order_relaxed);
	r = feed_release(b); /* the slot to feedd; its views now read the copy */
	*ret = d;
	return r < 0 ? r : 0;
}

void feed_detached_free(struct feed_detached *d)
{
	if (!d)
		return;
	struct feed_stream *st = d->st;
	/* inside the region the range stays reserved until the region goes */
	if (d->in_region)
		(void)mmap(d->addr, d->len, PROT_NONE,
			   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	else
		munmap(d->addr, d->len);
	feed_mutex_lock(&st->rel_lock);
	/* relaxed: st_adopt stores it under this lock */
	bool retired = d->inc != atomic_load_explicit(&st->cur, memory_order_relaxed);
	if (--d->inc->detached == 0 && retired && d->inc->held == 0)
		atomic_store_explicit(&st->reap, true, memory_order_release); /* st_reap unmaps */
	feed_mutex_unlock(&st->rel_lock);
	free(d);
}

uint64_t feed_stream_detached(const struct feed_stream *st)
{
	return st ? atomic_load_explicit(&((struct feed_stream *)st)->ndetached,
					 memory_order_relaxed)
		  : 0;
}
