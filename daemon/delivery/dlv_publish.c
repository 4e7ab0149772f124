/*
 * dlv_publish.c: the members' ready rings: publishing built batches in batch order
 * (under d->lock), failing and dropping members, and reading their
 * releases (untrusted input).
 * Part of the delivery (delivery.h; shared types in dlv_int.h).
 */
#include "delivery.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "builder.h"
#include "feed_lock.h"
#include "feed_ring.h"
#include "feed_shm.h"
#include "layout.h"
#include "order.h"
#include "pipeline.h"
#include "pool.h"
#include "region.h"
#include "dlv_int.h"
/* ---- publishing (under d->lock) ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Copies a message, cut to fit. */
static void msg_copy(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);

	if (n > cap - 1)
		n = cap - 1;

	memcpy(dst, src, n);
	dst[n] = '\0';
}

struct feed_shm_slot *dlv_slot_header(struct dlv *d, uint32_t slot)
{
	return (struct feed_shm_slot *)(d->hdrs + (uint64_t)slot * d->lay.slot_hdr_bytes);
}

void dlv_ring_push(struct dlv_member *m, uint64_t entry)
{
	feed_ring_put(&m->ready, &m->ready_head, entry);
	m->pending = true;
}

/* Rings the client's doorbell; dlv_ring_publish() decided that it sleeps. */
void dlv_ring_wake(struct dlv_member *m)
{
	uint64_t one = 1;

	(void)!write(m->ready_efd, &one, sizeof(one)); /* EAGAIN: it is ringing already */
}

/* Makes m's pushed entries visible. If the client sleeps it is woken now,
 * or, with defer_wake (a plain stream's member only: it outlives the
 * lock), *defer_wake is set and the caller wakes it with dlv_ring_wake() once
 * it has nothing else to do. */
void dlv_ring_publish(struct dlv_member *m, bool *defer_wake)
{
	m->pending = false;
	/* feed_ring.h: the slot headers before the head, then the flag */
	if (feed_ring_publish(&m->ready, m->ready_head)) {
		if (defer_wake && !m->d->group)
			*defer_wake = true;
		else
			dlv_ring_wake(m);
	}
}

/* Stops m receiving with an error its client reads from its control
 * header (after what it was sent before), and rings the loop's release
 * doorbell so the stop is logged at once. The code is stored last, with
 * release: a client that sees it sees the message (a detached member's
 * client looks at it before its queue). */
void dlv_member_fail_locked(struct dlv_member *m, int code, const char *msg,
			enum dlv_member_state state)
{
	struct feed_shm_ctl *c = m->ctl.map;
	uint64_t one = 1;

	if (m->error)
		return;
	m->error = code;
	m->state = state;
	msg_copy(m->error_msg, sizeof(m->error_msg), msg);
	msg_copy(c->error_msg, sizeof(c->error_msg), msg);
	__atomic_store_n(&c->error_code, code, __ATOMIC_RELEASE);
	dlv_ring_push(m, feed_ring_entry(FEED_READY_ERROR, 0));
	dlv_ring_publish(m, NULL);
	(void)!write(m->release_efd, &one, sizeof(one));
}

/* Slot s is no longer held by m (a release, a leave, a stop). */
void dlv_member_drop_locked(struct dlv *d, struct dlv_member *m, uint32_t s)
{
	m->held &= ~(1ull << s);
	d->slots[s].members &= ~(1ull << m->idx);
	if (d->slots[s].members == 0) {
		d->slots[s].state = SLOT_FREE;
		d->free_slots[d->nfree++] = s;
	}
}

void dlv_member_drop_all_locked(struct dlv *d, struct dlv_member *m)
{
	for (uint32_t s = 0; s < d->lay.nslots; s++)
		if (m->held & (1ull << s))
			dlv_member_drop_locked(d, m, s);
}

/* Ends the delivery for every member with an error (a batch that could
 * not be built). */
static void fail_locked(struct dlv *d, int code, const char *msg)
{
	if (d->error)
		return;
	d->error = code;
	msg_copy(d->error_msg, sizeof(d->error_msg), msg);
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (m && m->state == DLV_MEMBER_ACTIVE)
			dlv_member_fail_locked(m, code, msg, DLV_MEMBER_STOPPED);
	}
}

/* Positions a batch spans: batch size times world size. */
uint64_t dlv_stride_of(const struct dlv *d)
{
	return (uint64_t)d->sched.spec.ord.batch * d->sched.spec.ord.world;
}

/* Whether position (epoch, pos) is where a member resumed at (fe, fp)
 * starts: the same, or the next epoch's start when its token was taken
 * at or past its epoch's end. */
bool dlv_resume_point_locked(struct dlv *d, uint64_t fe, uint64_t fp, uint64_t epoch,
			 uint64_t pos)
{
	if (epoch == fe && pos == fp)
		return true;
	return epoch == fe + 1 && pos == 0 &&
	       fp >= sched_batches_per_epoch(&d->sched) * dlv_stride_of(d);
}

/* Whether m receives job j. A member resumed from its own token (after a
 * restart, ahead of the group) lets the group's batches before its
 * position go past it; the first one it receives must start exactly at
 * its position, or it is stopped: never a batch out of sequence. */
static bool member_wants_locked(struct dlv *d, struct dlv_member *m, const struct dlv_job *j)
{
	char msg[200];
	uint64_t e = j->pos.epoch, p = j->position;

	if (!m->from_set)
		return true;
	if (e < m->from_epoch || (e == m->from_epoch && p < m->from_position))
		return false;
	m->from_set = false;
	if (dlv_resume_point_locked(d, m->from_epoch, m->from_position, e, p))
		return true;
	snprintf(msg, sizeof(msg), "the group has no batch at this stream's resume position "
		 "(epoch %llu position %llu): its next starts at epoch %llu position %llu",
		 (unsigned long long)m->from_epoch, (unsigned long long)m->from_position,
		 (unsigned long long)e, (unsigned long long)p);
	dlv_member_fail_locked(m, -ESPIPE, msg, DLV_MEMBER_STOPPED);
	return false;
}

/* Hands built batch j to every active member. */
static void publish_one_locked(struct dlv *d, struct dlv_job *j, uint64_t now)
{
	struct feed_shm_slot *h = dlv_slot_header(d, j->slot);
	uint32_t s = j->slot, gen = d->slots[s].gen;
	uint64_t mask = 0;

	h->publish_ns = now;
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (!m || m->state != DLV_MEMBER_ACTIVE || !member_wants_locked(d, m, j))
			continue;
		memcpy((uint8_t *)m->ctl.map + layout_hdr_off(&d->lay, s), h, d->lay.slot_hdr_bytes);
		dlv_ring_push(m, feed_ring_entry(s, gen));
		if (!m->held)
			m->releases++;  /* holding from now: idle from now */
		m->held |= 1ull << s;
		mask |= 1ull << i;
		m->batches++;
		d->st.delivered++;
		m->samples += h->nsamples;  /* what was built: less any dropped */
		m->bytes += j->bytes;
		if (j->pos.last_of_epoch)
			dlv_ring_push(m, feed_ring_entry(FEED_READY_EPOCH_END, (uint32_t)j->pos.epoch));
		if (j->pos.last_of_stream ||
		    (j->pos.last_of_epoch && m->epochs && j->pos.epoch + 1 >= m->epochs)) {
			dlv_ring_push(m, feed_ring_entry(FEED_READY_STREAM_END, 0));
			m->state = DLV_MEMBER_DONE;
		}
	}
	atomic_fetch_add_explicit(&d->pub_batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&d->pub_samples, h->nsamples, memory_order_relaxed);
	atomic_fetch_add_explicit(&d->pub_bytes, j->bytes, memory_order_relaxed);
	d->slots[s].members = mask;
	if (mask) {
		d->slots[s].state = SLOT_CLIENT;
	} else {  /* nobody receives it (the group's members are done or detached) */
		d->slots[s].state = SLOT_FREE;
		d->free_slots[d->nfree++] = s;
	}
}

/* Counts job j's replaced samples into its epoch's; true when that goes
 * past max_bad (the message, naming what failed, is in fail_msg). */
static bool bad_over_locked(struct dlv *d, const struct dlv_job *j)
{
	if (d->bad_epoch != j->pos.epoch) {
		d->bad_epoch = j->pos.epoch;
		d->bad_count = 0;
		d->bad_what[0] = '\0';
	}
	if (!j->bad.n)
		return false;
	d->bad_count += j->bad.n;
	size_t used = strlen(d->bad_what), add = strlen(j->bad.what);
	if (used + add + 3 < sizeof(d->bad_what)) {
		memcpy(d->bad_what + used, used ? "; " : "", used ? 2 : 0);
		memcpy(d->bad_what + used + (used ? 2 : 0), j->bad.what, add + 1);
	}
	if (d->bad_count <= d->max_bad)
		return false;
	snprintf(d->fail_msg, sizeof(d->fail_msg),
		 "epoch %llu: %llu samples failed, past max_bad %llu: %.400s",
		 (unsigned long long)j->pos.epoch, (unsigned long long)d->bad_count,
		 (unsigned long long)d->max_bad, d->bad_what);
	return true;
}

/* Counts job j's replaced samples and rings each member's release
 * doorbell, so the loop logs them (naming the files) at once; only
 * batches with replacements pay for the write. */
static void replaced_note_locked(struct dlv *d, const struct dlv_job *j)
{
	uint64_t one = 1;

	d->st.replaced += j->bad.n;
	msg_copy(d->st.replaced_what, sizeof(d->st.replaced_what), j->bad.what);
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (m && m->state == DLV_MEMBER_ACTIVE)
			(void)!write(m->release_efd, &one, sizeof(one));
	}
}

/* Publishes every built batch that is next in order, and a failed
 * batch's error when its turn comes. */
void dlv_publish_ready_locked(struct dlv *d, bool *defer_wake)
{
	uint64_t now = 0;

	for (;;) {
		if (d->fail_code && d->pub_seq == d->fail_seq) {
			fail_locked(d, d->fail_code, d->fail_msg);
			break;
		}
		if (d->pub_seq == d->sched_seq)
			break;
		struct dlv_job *j = d->seq_job[d->pub_seq % d->lay.nslots];
		if (!j || !j->built)
			break;
		if (d->on_error == BLD_ON_ERROR_SKIP && bad_over_locked(d, j)) {
			fail_locked(d, -EBADMSG, d->fail_msg);
			break;
		}
		if (j->bad.n)
			replaced_note_locked(d, j);
		d->seq_job[d->pub_seq % d->lay.nslots] = NULL;
		j->built = false;
		if (!now)
			now = now_ns();
		publish_one_locked(d, j, now);
		d->pub_seq++;
	}
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++)
		if (d->members[i] && d->members[i]->pending)
			dlv_ring_publish(d->members[i], defer_wake);
}

/* ---- releases (untrusted input) ---- */

static void release_one_locked(struct dlv *d, struct dlv_member *m, uint64_t entry)
{
	uint32_t slot = feed_ring_slot(entry), gen = feed_ring_gen(entry);

	if (slot >= d->lay.nslots || d->slots[slot].state != SLOT_CLIENT ||
	    d->slots[slot].gen != gen || !(m->held & (1ull << slot))) {
		m->bad_releases++;
		d->st.bad_releases++;
		return;
	}
	m->releases++;
	dlv_member_drop_locked(d, m, slot);
}

/* Reads m's release ring from our private tail up to its head. A head
 * that moved backwards or too far stops m (and gives back what it held:
 * it broke the protocol, its views are its own problem). */
static void reclaim_member_locked(struct dlv *d, struct dlv_member *m)
{
	uint64_t head = feed_ring_head(&m->rel_ring);
	char msg[160];
	int bad;

	if (m->state == DLV_MEMBER_STOPPED || head == m->rel_tail)
		return;
	if ((bad = feed_ring_check(head, m->rel_tail, d->lay.rel_cap)) < 0) {
		if (bad == -ERANGE)
			snprintf(msg, sizeof(msg), "release queue head moved backwards (from %llu to "
				 "%llu): stream stopped", (unsigned long long)m->rel_tail,
				 (unsigned long long)head);
		else
			snprintf(msg, sizeof(msg), "release queue head moved %llu entries past the "
				 "%u it holds: stream stopped",
				 (unsigned long long)(head - m->rel_tail), d->lay.rel_cap);
		dlv_member_fail_locked(m, -EPROTO, msg, DLV_MEMBER_STOPPED);
		dlv_member_drop_all_locked(d, m);
		if (!d->group && !d->error) {
			d->error = -EPROTO;
			msg_copy(d->error_msg, sizeof(d->error_msg), msg);
		}
		return;
	}
	while (m->rel_tail != head) {
		/* read once: the client may rewrite the entry under us */
		uint64_t e = feed_ring_take(&m->rel_ring, &m->rel_tail);
		release_one_locked(d, m, e);
	}
}

void dlv_reclaim_locked(struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++)
		if (d->members[i])
			reclaim_member_locked(d, d->members[i]);
}
