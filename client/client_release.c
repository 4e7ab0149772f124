/*
 * client_release.c: giving batches back (feed_release), the producer side
 * of the release ring (proto/feed_ring.h), and the batches the device
 * slots (client_ipc.h) or a hooked part (client_internal.h: CL_HOOK_GPU)
 * keep after the caller released them until their work is done.
 *
 * A release visits, in order: the device slots of the batch's
 * incarnation when it is the current one (the done word; kept until
 * feedd's conversion ran), then the hooks (kept while copies from it are
 * in flight), then the ring. What was kept comes back through
 * st_poll_ipc / st_poll_hooks on feed_next()'s thread and continues from
 * the next step.
 *
 * Threads: feed_release() on any thread; st_poll_* on feed_next()'s.
 * st->rel_lock is held only around the ring's producer side and the
 * incarnation's held count (client_internal.h's table): never across a
 * driver call or another module's lock, so what a release of a retired
 * incarnation's last batch must unmap is unmapped after it is dropped.
 * Must never: wait or call the CUDA driver in feed_release() beyond the
 * device slots' enqueue and query (a garbage collector's thread releases
 * too: a retired incarnation's unmapping, which unregisters memory and
 * waits for its done words, is left to feed_next()'s thread), or write
 * the ring for a batch of a retired incarnation (its feedd is gone).
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_stream.h"
#include "feed_lock.h"

/* Gives b's slot back to feedd now (or, from a retired incarnation, to
 * no one: when it was the last held, st_reap unmaps the incarnation).
 * -EINVAL when b is not held. */
static int st_release_now(struct feed_batch *b)
{
	struct feed_stream *st = b->st;
	/* read before held is cleared: once it is, the next delivery of this
	 * slot may rewrite gen (st_deliver's acquire load of held pairs with
	 * the exchange below, so that write comes after this read) */
	uint64_t entry = feed_ring_entry(b->slot, b->gen);

	feed_mutex_lock(&st->rel_lock);
	/* under the lock, so a reopening sees held and nheld agree */
	if (!atomic_exchange_explicit(&b->held, false, memory_order_acq_rel)) {
		feed_mutex_unlock(&st->rel_lock);
		return -EINVAL;
	}
	/* relaxed: st_adopt stores it under this lock */
	if (b->inc != atomic_load_explicit(&st->cur, memory_order_relaxed)) {
		/* kept until close even when nothing is held: a second
		 * release of an old batch must find it */
		if (--b->inc->held == 0) /* release: pairs with st_reap's acquire */
			atomic_store_explicit(&st->reap, true, memory_order_release);
		feed_mutex_unlock(&st->rel_lock);
		return 0;
	}
	if (st->group) /* our written pages go; the shared ones come back */
		(void)madvise(st->data + (uint64_t)b->slot * st->slot_bytes, st->slot_bytes,
			      MADV_DONTNEED);
	feed_ring_put(&st->release, &st->rel_head, entry);
	bool ring = feed_ring_publish(&st->release, st->rel_head);
	atomic_fetch_sub_explicit(&st->nheld, 1, memory_order_relaxed);
	if (ring) {
		/* under the lock: a reopening closes this descriptor */
		uint64_t one = 1;
		(void)!write(st->fd[ST_FD_RELEASE], &one, sizeof(one)); /* EAGAIN: rung already */
	}
	feed_mutex_unlock(&st->rel_lock);
	return 0;
}

/* b past the device slots and the hooks before first: the hooks from
 * first on, then the ring. */
static int st_release_from(struct feed_batch *b, int first)
{
	for (int id = first; id < CL_HOOKS; id++) {
		struct cl_hook h;
		void *self = st_hook_get(b->st, (enum cl_hook_id)id, &h);
		int d = self && h.keep ? h.keep(self, b) : 0;
		if (d) /* kept: st_poll_hooks() gives it back */
			return d > 0 ? 0 : d;
	}
	return st_release_now(b);
}

FEED_API int feed_release(struct feed_batch *b)
{
	if (!b)
		return -EINVAL;
	/* acquire: st_adopt publishes an incarnation whole (its ipc); a batch
	 * of an earlier one has no feedd to tell */
	struct st_inc *cur = atomic_load_explicit(&b->st->cur, memory_order_acquire);
	/* its device slot's reader is done once the tied stream gets here
	 * (the done word then says so to feedd); the host slot goes back once
	 * feedd's conversion of b has run (client_ipc.c: it still reads the
	 * slot's staging area, which a rebuild overwrites) */
	if (b->inc == cur && cur->ipc && cl_batch_held(b)) {
		int d = cl_ipc_release(cur->ipc, b, b->slot, b->gen);
		if (d)
			return d > 0 ? 0 : d;
	}
	return st_release_from(b, 0);
}

uint32_t st_poll_ipc(struct feed_stream *st, bool all, uint32_t *ret_left)
{
	struct feed_batch *done[FEED_SHM_MAX_SLOTS];
	struct cl_ipc *ipc = st_inc_now(st)->ipc;
	uint32_t n = 0;

	if (!ipc) {
		if (ret_left)
			*ret_left = 0;
		return 0;
	}
	n = cl_ipc_poll(ipc, all, done, ret_left);
	for (uint32_t i = 0; i < n; i++)
		st_release_from(done[i], 0);
	return n;
}

void st_poll_hooks(struct feed_stream *st, bool wait_one, bool all)
{
	struct feed_batch *done[FEED_SHM_MAX_SLOTS];

	for (int id = 0; id < CL_HOOKS; id++) {
		struct cl_hook h;
		void *self = st_hook_get(st, (enum cl_hook_id)id, &h);
		uint32_t n;
		if (!self || !h.done)
			continue;
		do {
			n = h.done(self, wait_one, all, done, FEED_SHM_MAX_SLOTS);
			/* past this hook: the later ones, then the ring */
			for (uint32_t i = 0; i < n; i++)
				st_release_from(done[i], id + 1);
			wait_one = false;
		} while (n == FEED_SHM_MAX_SLOTS);
	}
}

/* The first retired incarnation still mapped with nothing held, or NULL. */
static struct st_inc *st_unused(struct feed_stream *st)
{
	struct st_inc *found = NULL;

	feed_mutex_lock(&st->rel_lock);
	for (struct st_inc *inc = st_inc_now(st)->next; inc && !found; inc = inc->next)
		if (inc->mapped && inc->held == 0 && inc->detached == 0)
			found = inc;
	feed_mutex_unlock(&st->rel_lock);
	return found;
}

void st_reap(struct feed_stream *st)
{
	struct st_inc *inc;

	/* relaxed first: feed_next()'s fast path */
	if (!atomic_load_explicit(&st->reap, memory_order_relaxed) ||
	    !atomic_exchange_explicit(&st->reap, false, memory_order_acquire))
		return;
	/* one at a time, each unmapped with no lock held (st_inc_unmap) */
	while ((inc = st_unused(st)))
		st_inc_unmap(st, inc);
}

void st_release_all(struct feed_stream *st)
{
	for (uint32_t i = 0; i < st->nslots; i++)
		feed_release(&st->batches[i]); /* -EINVAL for those not held */
}
