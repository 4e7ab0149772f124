/*
 * check_ring.c: unit tests of proto/feed_ring.h, the shared-memory ring
 * protocol of feedd and libfeedclient. Both rings of a stream, in one
 * mmap'ed page laid out as feed_shm.h says, run between two threads of
 * this process with eventfd doorbells: a producer publishes millions of
 * (slot, generation) entries on the ready ring, holding at most the
 * credits it has, and a consumer takes them and gives each slot back on
 * the release ring; every entry arrives once, in order, and neither side
 * sleeps for good (a missed wake-up fails the test after a bounded wait,
 * not by hanging). Alone: the arm/publish handshake, and heads that moved
 * behind the tail or past the capacity rejected. Run under ThreadSanitizer
 * too (scripts/test's TSan build).
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_util.h"
#include "feed_ring.h"
#include "feed_shm.h"

#if defined(__SANITIZE_THREAD__)
#define RING_ENTRIES (1u << 21) /* ThreadSanitizer runs it ~10x slower */
#else
#define RING_ENTRIES (1u << 22)
#endif
#define RING_CAP 8              /* small: both sides run dry and arm often */
#define RING_CREDITS 8          /* slots: at most this many unreleased */
#define RING_WAKE_MS 10000      /* a doorbell that never rings fails here */

/* Two rings and their doorbells in one shared mapping, as a stream has. */
struct ring_pair {
	void *map;
	size_t len;
	struct feed_shm_ctl *ctl;  /* ready_head */
	struct feed_shm_rel *rel;  /* rel_head, both waiting flags */
	struct feed_ring ready;    /* producer -> consumer */
	struct feed_ring release;  /* consumer -> producer: the credits back */
	int ready_efd, release_efd;
	uint32_t n;                /* entries to send */
	/* what each side saw, for the asserts after the join */
	uint64_t got, arms, sleeps;
	char err[160];             /* the consumer's first failure, or "" */
	char perr[160];            /* the producer's */
};

static void pair_init(struct ring_pair *p, uint32_t n)
{
	memset(p, 0, sizeof(*p));
	p->len = 4096;
	p->map = mmap(NULL, p->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(p->map, MAP_FAILED);
	p->ctl = p->map;
	p->rel = (struct feed_shm_rel *)((uint8_t *)p->map + sizeof(struct feed_shm_ctl));
	_Atomic uint64_t *ready_ring = (_Atomic uint64_t *)((uint8_t *)p->rel + sizeof(*p->rel));
	_Atomic uint64_t *rel_ring = ready_ring + RING_CAP;
	p->ready = (struct feed_ring){ready_ring, &p->ctl->ready_head, &p->rel->client_waiting,
				      RING_CAP};
	p->release = (struct feed_ring){rel_ring, &p->rel->rel_head, &p->rel->daemon_waiting,
					RING_CAP};
	p->ready_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	p->release_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(p->ready_efd, 0);
	ck_assert_int_ge(p->release_efd, 0);
	p->n = n;
}

static void pair_free(struct ring_pair *p)
{
	close(p->ready_efd);
	close(p->release_efd);
	munmap(p->map, p->len);
}

static void ring_bell(int efd)
{
	uint64_t one = 1;
	(void)!write(efd, &one, sizeof(one));
}

/* Nothing to take: clear the doorbell, arm, and sleep unless something
 * came. false when no wake-up came within RING_WAKE_MS (a lost one). */
static bool ring_wait(const struct feed_ring *r, uint64_t tail, int efd, uint64_t *arms,
		      uint64_t *sleeps)
{
	uint64_t count;
	(void)!read(efd, &count, sizeof(count));
	(*arms)++;
	if (feed_ring_arm(r, tail))
		return true;
	(*sleeps)++;
	struct pollfd pf = {.fd = efd, .events = POLLIN};
	return poll(&pf, 1, RING_WAKE_MS) == 1 || feed_ring_head(r) != tail;
}

/* The producer (feedd's part): publishes entry seq into a free slot while
 * it has one, takes the released slots back, sleeps when it has none. */
static void *producer(void *arg)
{
	struct ring_pair *p = arg;
	uint32_t free_slots[RING_CREDITS], nfree = RING_CREDITS;
	uint64_t head = 0, rel_tail = 0, arms = 0, sleeps = 0;

	for (uint32_t i = 0; i < RING_CREDITS; i++)
		free_slots[i] = i;
	for (uint32_t seq = 0; seq < p->n;) {
		uint64_t rh = feed_ring_head(&p->release);
		if (feed_ring_check(rh, rel_tail, RING_CAP) < 0) {
			strcpy(p->perr, "producer: release head out of range");
			break;
		}
		while (rel_tail != rh)
			free_slots[nfree++] = feed_ring_slot(feed_ring_take(&p->release, &rel_tail));
		if (nfree == 0) {
			if (!ring_wait(&p->release, rel_tail, p->release_efd, &arms, &sleeps)) {
				strcpy(p->perr, "producer: no release rang the doorbell");
				break;
			}
			continue;
		}
		while (nfree && seq < p->n) {
			feed_ring_put(&p->ready, &head, feed_ring_entry(free_slots[--nfree], seq));
			seq++;
		}
		if (feed_ring_publish(&p->ready, head))
			ring_bell(p->ready_efd);
	}
	__atomic_fetch_add(&p->arms, arms, __ATOMIC_RELAXED);
	__atomic_fetch_add(&p->sleeps, sleeps, __ATOMIC_RELAXED);
	return NULL;
}

/* The consumer (the client's part): takes every entry in order, checks
 * it names a slot it does not hold and the next generation; gives the
 * slots back after each look (holding them meanwhile, as a trainer does). */
static void *consumer(void *arg)
{
	struct ring_pair *p = arg;
	uint64_t tail = 0, rel_head = 0, arms = 0, sleeps = 0, held = 0;
	uint32_t want = 0;

	while (want < p->n && !p->err[0]) {
		uint64_t h = feed_ring_head(&p->ready);
		if (feed_ring_check(h, tail, RING_CAP) < 0) {
			strcpy(p->err, "consumer: ready head out of range");
			break;
		}
		if (h == tail) {
			if (!ring_wait(&p->ready, tail, p->ready_efd, &arms, &sleeps))
				strcpy(p->err, "consumer: no publish rang the doorbell");
			continue;
		}
		while (tail != h && !p->err[0]) {
			uint64_t e = feed_ring_take(&p->ready, &tail);
			uint32_t slot = feed_ring_slot(e);
			if (feed_ring_gen(e) != want || slot >= RING_CREDITS || (held >> slot & 1))
				snprintf(p->err, sizeof(p->err), "entry %u: slot %u gen %u", want,
					 slot, feed_ring_gen(e));
			held |= 1ull << slot;
			want++;
		}
		/* done with what this look took: those slots go back */
		for (uint32_t s = 0; s < RING_CREDITS; s++)
			if (held >> s & 1)
				feed_ring_put(&p->release, &rel_head, feed_ring_entry(s, 0));
		held = 0;
		if (feed_ring_publish(&p->release, rel_head))
			ring_bell(p->release_efd);
	}
	p->got = want;
	__atomic_fetch_add(&p->arms, arms, __ATOMIC_RELAXED);
	__atomic_fetch_add(&p->sleeps, sleeps, __ATOMIC_RELAXED);
	return NULL;
}

START_TEST(test_ring_two_threads_in_order_no_loss)
{
	struct ring_pair p;
	pthread_t tp, tc;

	pair_init(&p, RING_ENTRIES);
	ck_assert_int_eq(pthread_create(&tc, NULL, consumer, &p), 0);
	ck_assert_int_eq(pthread_create(&tp, NULL, producer, &p), 0);
	pthread_join(tp, NULL);
	pthread_join(tc, NULL);
	ck_assert_msg(!p.err[0], "%s", p.err);
	ck_assert_msg(!p.perr[0], "%s", p.perr);
	ck_assert_uint_eq(p.got, RING_ENTRIES);
	/* every entry was taken and given back: both heads say all of them */
	ck_assert_uint_eq(feed_ring_head(&p.ready), RING_ENTRIES);
	ck_assert_uint_eq(feed_ring_head(&p.release), RING_ENTRIES);
	/* the sleeping path ran (a ring of 8 runs dry on one side or the other) */
	ck_assert_uint_gt(p.arms, 0);
	pair_free(&p);
}
END_TEST

/* A consumer that armed on an empty ring is told by the next publish
 * (which clears its flag, so the one after does not ring again); one that
 * arms with an entry already there is told not to sleep. */
START_TEST(test_ring_arm_then_publish_rings_once)
{
	struct ring_pair p;
	uint64_t head = 0, tail = 0;

	pair_init(&p, 0);
	ck_assert(!feed_ring_arm(&p.ready, tail));
	ck_assert_uint_eq(atomic_load(&p.rel->client_waiting), 1);
	feed_ring_put(&p.ready, &head, feed_ring_entry(3, 7));
	ck_assert(feed_ring_publish(&p.ready, head));
	ck_assert_uint_eq(atomic_load(&p.rel->client_waiting), 0);
	feed_ring_put(&p.ready, &head, feed_ring_entry(4, 8));
	ck_assert(!feed_ring_publish(&p.ready, head));
	/* armed again with two entries waiting: take them, do not sleep */
	ck_assert(feed_ring_arm(&p.ready, tail));
	ck_assert_int_eq(feed_ring_check(feed_ring_head(&p.ready), tail, RING_CAP), 0);
	ck_assert_uint_eq(feed_ring_take(&p.ready, &tail), feed_ring_entry(3, 7));
	ck_assert_uint_eq(feed_ring_take(&p.ready, &tail), feed_ring_entry(4, 8));
	ck_assert_uint_eq(tail, 2);
	pair_free(&p);
}
END_TEST

/* The other side's head is untrusted: behind the tail, or more than the
 * capacity ahead (entries that would have been overwritten), is refused;
 * up to the capacity ahead, across the 2^64 wrap too, is fine. */
START_TEST(test_ring_tampered_head_rejected)
{
	ck_assert_int_eq(feed_ring_check(10, 10, 8), 0);
	ck_assert_int_eq(feed_ring_check(18, 10, 8), 0);
	ck_assert_int_eq(feed_ring_check(19, 10, 8), -EOVERFLOW);
	ck_assert_int_eq(feed_ring_check(9, 10, 8), -ERANGE);
	ck_assert_int_eq(feed_ring_check(0, 10, 8), -ERANGE);
	ck_assert_int_eq(feed_ring_check(UINT64_MAX, 0, 8), -ERANGE);
	ck_assert_int_eq(feed_ring_check(2, UINT64_MAX - 1, 8), 0);
	ck_assert_int_eq(feed_ring_check(UINT64_MAX / 2, 0, 8), -EOVERFLOW);
}
END_TEST

/* The same through the mapping: a peer that rewrites the published head
 * is caught by the consumer's check of what it loaded. */
START_TEST(test_ring_tampered_head_in_memory)
{
	struct ring_pair p;
	uint64_t head = 0, tail = 0;

	pair_init(&p, 0);
	for (int i = 0; i < 3; i++)
		feed_ring_put(&p.release, &head, feed_ring_entry((uint32_t)i, 1));
	feed_ring_publish(&p.release, head);
	ck_assert_int_eq(feed_ring_check(feed_ring_head(&p.release), tail, RING_CAP), 0);
	tail = 3;
	atomic_store(&p.rel->rel_head, 1); /* moved backwards */
	ck_assert_int_eq(feed_ring_check(feed_ring_head(&p.release), tail, RING_CAP), -ERANGE);
	atomic_store(&p.rel->rel_head, tail + RING_CAP + 1); /* past what the ring holds */
	ck_assert_int_eq(feed_ring_check(feed_ring_head(&p.release), tail, RING_CAP), -EOVERFLOW);
	pair_free(&p);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("ring");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_ring_two_threads_in_order_no_loss);
	tcase_add_test(tc, test_ring_arm_then_publish_rings_once);
	tcase_add_test(tc, test_ring_tampered_head_rejected);
	tcase_add_test(tc, test_ring_tampered_head_in_memory);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(ring_suite)
