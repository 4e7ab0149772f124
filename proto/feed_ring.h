/*
 * feed_ring.h: the shared-memory ring protocol, written once for both
 * rings and both sides (DESIGN.md "Delivery"; feed_shm.h has the layout).
 *
 *   ready ring    feedd produces (delivery/dlv_publish.c), libfeedclient consumes
 *   release ring  libfeedclient produces, feedd consumes
 *
 * A ring is an array of 64-bit entries (feed_ring_entry()), a head the
 * producer publishes, a tail the consumer keeps private, and the
 * consumer's "I am going to sleep" flag, which the producer clears when it
 * rings the consumer's eventfd doorbell:
 *
 *   producer: feed_ring_put() each entry; feed_ring_publish(): release
 *             store of the head, seq_cst fence, exchange the flag to 0;
 *             ring the doorbell when it was set.
 *   consumer: feed_ring_head() (acquire) and feed_ring_check() (a head
 *             behind the tail or more than cap ahead is tampering: the
 *             other side's memory is never trusted); feed_ring_take()
 *             each entry up to the head; when none is left,
 *             feed_ring_arm(): set the flag, seq_cst fence, re-check the
 *             head; sleep on the doorbell only when nothing came, and
 *             look again after every wake-up (counts left in an eventfd
 *             wake spuriously).
 *
 * Why both fences: each side does "write mine, then read the other's"
 * (head then flag; flag then head). Release/acquire alone lets both reads
 * see the old values, so the producer does not ring and the consumer
 * sleeps on an entry already there: a prototype deadlocked in 4 of 17
 * long runs that way. The seq_cst fences forbid that outcome.
 *
 * Threads: one producer and one consumer per ring at a time (each side
 * serialises its own calls); the functions keep no state of their own.
 */
#ifndef FEED_RING_H
#define FEED_RING_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* One side's view of a ring in mapped memory. The consumer of the ready
 * ring maps it read-only: it only loads through entry and head. */
struct feed_ring {
	_Atomic uint64_t *entry;   /* [cap] */
	_Atomic uint64_t *head;    /* the producer's published head */
	_Atomic uint32_t *waiting; /* the consumer's flag: set before it sleeps */
	uint32_t cap;              /* entries, a power of two */
};

/* Producer: writes e at *head (its private copy) and advances it; nothing
 * is visible to the consumer before feed_ring_publish(). */
static inline void feed_ring_put(const struct feed_ring *r, uint64_t *head, uint64_t e)
{
	/* relaxed: published by the release store of the head */
	atomic_store_explicit(&r->entry[*head & (r->cap - 1)], e, memory_order_relaxed);
	(*head)++;
}

/* Producer: makes every entry before head visible; true when the consumer
 * had said it sleeps (the caller rings its doorbell, once). */
static inline bool feed_ring_publish(const struct feed_ring *r, uint64_t head)
{
	/* release: the entries (and what they name) before the head */
	atomic_store_explicit(r->head, head, memory_order_release);
	/* seq_cst: pairs with feed_ring_arm's fence ("flag, then re-check") */
	atomic_thread_fence(memory_order_seq_cst);
	/* relaxed: the fence above orders it after the head; the exchange
	 * (not a load) clears the flag so only one publish rings for it */
	return atomic_exchange_explicit(r->waiting, 0, memory_order_relaxed) != 0;
}

/* Consumer: the published head. */
static inline uint64_t feed_ring_head(const struct feed_ring *r)
{
	/* acquire: the entries (and what they name) written before it */
	return atomic_load_explicit(r->head, memory_order_acquire);
}

/* Consumer: head, as loaded, against the private tail. 0 when it is
 * within [tail, tail + cap]; -ERANGE when it moved behind the tail,
 * -EOVERFLOW when more than cap ahead: the other side broke the protocol
 * (the entries past cap would be overwritten ones). */
static inline int feed_ring_check(uint64_t head, uint64_t tail, uint32_t cap)
{
	if ((int64_t)(head - tail) < 0)
		return -ERANGE;
	if (head - tail > cap)
		return -EOVERFLOW;
	return 0;
}

/* Consumer: the entry at *tail, which must be before a checked head;
 * advances *tail. Read once: a client-written ring may change under us. */
static inline uint64_t feed_ring_take(const struct feed_ring *r, uint64_t *tail)
{
	/* relaxed: feed_ring_head()'s acquire ordered the entry before it */
	uint64_t e = atomic_load_explicit(&r->entry[*tail & (r->cap - 1)], memory_order_relaxed);
	(*tail)++;
	return e;
}

/* Consumer, with nothing left to take: says it is going to sleep. True
 * when an entry came meanwhile (take it: nothing rings for it); false
 * when it may sleep on the doorbell, which the next publish rings. */
static inline bool feed_ring_arm(const struct feed_ring *r, uint64_t tail)
{
	/* relaxed: the fence below orders it before the re-check */
	atomic_store_explicit(r->waiting, 1, memory_order_relaxed);
	/* seq_cst: pairs with feed_ring_publish's fence ("head, then flag") */
	atomic_thread_fence(memory_order_seq_cst);
	return feed_ring_head(r) != tail;
}

#endif
