/*
 * dlv_loop.c: one stream's or group's delivery (see delivery.h) as the
 * loop thread drives it: its members added, started, released, left and
 * detached, the delivery closed, its counters read. Positions come from
 * schedule.c, batches are built by work/builder.c. The delivery's
 * other files hold its lifetime (dlv_life.c), its regions
 * (dlv_regions.c), slot scheduling and the build jobs (dlv_sched.c) and
 * the members' rings and publishing (dlv_publish.c); they call each
 * other one way: loop -> regions -> sched -> publish, each -> life.
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
/* ---- loop thread ---- */

/* The group's next batch to publish: its epoch and first position. */
static bool group_next_locked(struct dlv *d, uint64_t *ret_epoch, uint64_t *ret_position)
{
	if (d->pub_seq != d->sched_seq) {
		const struct dlv_job *j = d->seq_job[d->pub_seq % d->lay.nslots];
		*ret_epoch = j->pos.epoch;
		*ret_position = j->position;
		return true;
	}
	return sched_peek_position(&d->sched, ret_epoch, ret_position);
}

/* A member resumed at its own position joins a group: at the group's next
 * batch it starts as any joiner; ahead of it, it skips until its position
 * (*epoch and *index then say where it starts); behind it (batches it
 * has not had are gone) it is refused with -EALREADY. */
static int member_from_locked(struct dlv *d, struct dlv_member *m, uint64_t *epoch,
			      uint64_t *index, struct feed_err *err)
{
	uint64_t ge, gp, fe = m->from_epoch, fp = m->from_position;

	if (!group_next_locked(d, &ge, &gp) || dlv_resume_point_locked(d, fe, fp, ge, gp)) {
		m->from_set = false;  /* at the group's position (or the group is done) */
		return 0;
	}
	if (fe < ge || (fe == ge && fp < gp))
		return feed_err_set(err, -EALREADY, "the group is at epoch %llu position %llu, past "
				    "this stream's resume position (epoch %llu position %llu); it "
				    "can resume there outside the group", (unsigned long long)ge,
				    (unsigned long long)gp, (unsigned long long)fe,
				    (unsigned long long)fp);
	*epoch = fe;
	*index = fp / dlv_stride_of(d);
	return 0;
}

void dlv_member_resume_at(struct dlv_member *m, uint64_t epoch, uint64_t position)
{
	assert_loop_thread();
	m->from_set = m->d->group;  /* a plain stream's schedule starts there itself */
	m->from_epoch = epoch;
	m->from_position = position;
}

int dlv_member_add(struct dlv_member *m, uint64_t *ret_epoch, uint64_t *ret_index,
		   struct feed_err *err)
{
	assert_loop_thread();
	struct dlv *d = m->d;
	uint64_t epoch = 0, index = 0;
	uint32_t idx;
	int rc = 0;

	feed_mutex_lock(&d->lock);
	for (idx = 0; idx < DLV_MAX_MEMBERS && d->members[idx]; idx++)
		;
	if (idx == DLV_MAX_MEMBERS) {
		rc = feed_err_set(err, -EUSERS, "the group has %d members, the most it can have",
				  DLV_MAX_MEMBERS);
		goto out;
	}
	if (d->error) {
		rc = feed_err_set(err, d->error, "%s", d->error_msg);
		goto out;
	}
	/* it starts with the next batch to publish: built already, being
	 * built, or the schedule's next */
	if (d->pub_seq != d->sched_seq) {
		const struct dlv_job *j = d->seq_job[d->pub_seq % d->lay.nslots];
		epoch = j->pos.epoch;
		index = j->pos.index;
	} else if (!sched_peek(&d->sched, &epoch, &index)) {
		epoch = sched_start_epoch(&d->sched);
		index = sched_start_index(&d->sched);
	}
	if (m->from_set && (rc = member_from_locked(d, m, &epoch, &index, err)) < 0)
		goto out;
	if (d->group && m->epochs && epoch >= m->epochs) {
		rc = feed_err_set(err, -EINVAL, "the group is at epoch %llu batch %llu; epochs %llu "
				  "ends before it", (unsigned long long)epoch,
				  (unsigned long long)index, (unsigned long long)m->epochs);
		goto out;
	}
	m->idx = idx;
	m->added = true;
	m->state = DLV_MEMBER_ACTIVE;
	m->start_epoch = epoch;
	m->start_index = index;
	d->members[idx] = m;
	d->nmembers++;
	*ret_epoch = epoch;
	*ret_index = index;
out:;
	struct pool_job *list = rc == 0 && d->started ? dlv_advance_locked(d) : NULL;
	feed_mutex_unlock(&d->lock);
	if (rc == 0)  /* its reader's wait counts for the delivery (loop thread, like leave) */
		pool_source_watch(d->src, idx, &((struct feed_shm_rel *)m->rel.map)->client_waiting);
	dlv_submit_all(d, list);
	return rc;
}

void dlv_start(struct dlv *d)
{
	assert_loop_thread();
	feed_mutex_lock(&d->lock);
	d->started = true;
	if (sched_empty(&d->sched)) {
		/* a token taken after the last epoch: nothing but the end */
		for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++)
			if (d->members[i]) {
				dlv_ring_push(d->members[i], feed_ring_entry(FEED_READY_STREAM_END, 0));
				dlv_ring_publish(d->members[i], NULL);
			}
		feed_mutex_unlock(&d->lock);
		return;
	}
	feed_mutex_unlock(&d->lock);
	dlv_advance(d);
}

void dlv_member_on_release(struct dlv_member *m)
{
	assert_loop_thread();
	uint64_t count;

	(void)!read(m->release_efd, &count, sizeof(count)); /* clear; we re-check anyway */
	dlv_advance(m->d);
}

void dlv_member_leave(struct dlv_member *m)
{
	assert_loop_thread();
	if (!m)
		return;
	struct dlv *d = m->d;
	struct pool_job *list = NULL;

	if (m->added)  /* before its region goes (loop thread, like add) */
		pool_source_watch(d->src, m->idx, NULL);
	feed_mutex_lock(&d->lock);
	if (m->added) {
		dlv_member_drop_all_locked(d, m);
		d->members[m->idx] = NULL;
		d->nmembers--;
		m->added = false;
		m->state = DLV_MEMBER_STOPPED;
		if (d->group)
			list = dlv_advance_locked(d);  /* the others go on */
	}
	feed_mutex_unlock(&d->lock);
	dlv_submit_all(d, list);
	if (d->group)  /* nobody rings it after the lock: it is no member any more */
		dlv_member_free(m);
}

/* The slots m was sent but had not taken (its untrusted ready tail,
 * clamped to what we sent) go back; those it took stay. */
static void detach_untaken_locked(struct dlv *d, struct dlv_member *m)
{
	struct feed_shm_rel *r = m->rel.map;
	uint64_t head = m->ready_head, cap = d->lay.ring_cap;
	uint64_t tail = atomic_load_explicit(&r->ready_tail, memory_order_relaxed);
	uint64_t oldest = head > cap ? head - cap : 0;

	if (tail > head || tail < oldest)
		tail = oldest;  /* a lie: it keeps what the ring still names */
	for (uint64_t i = tail; i != head; i++) {
		/* relaxed: our own entry, read back under the lock */
		uint64_t e = atomic_load_explicit(&m->ready.entry[i & (cap - 1)],
						  memory_order_relaxed);
		uint32_t s = feed_ring_slot(e);
		if (s < d->lay.nslots && (m->held & (1ull << s)) && d->slots[s].gen == feed_ring_gen(e))
			dlv_member_drop_locked(d, m, s);
	}
}

/* Whether m, holding slots, has made no release the timer saw for more
 * than timeout_ns of the timer's clock. Idleness is counted from the
 * timer's own readings (one thread, one clock) at which it saw m's
 * release count change, never from times other threads wrote. */
static bool member_quiet_locked(struct dlv_member *m, uint64_t now, uint64_t timeout_ns)
{
	if (!m->watched || !m->held || m->releases != m->seen_releases || now < m->quiet_since) {
		m->watched = true;
		m->seen_releases = m->releases;
		m->quiet_since = now;
		return false;
	}
	return now - m->quiet_since > timeout_ns;
}

/* Whether quiet m holds the group up: batches sent to it wait untaken
 * (its untrusted ready tail short of what we sent, or a lie), it holds
 * all it may take, or the group is stalled (no slot free, none being
 * built). A member that took everything and may take more waits for
 * the daemon's next batch: a slow build is not its idleness. */
static bool member_holds_up_locked(const struct dlv *d, const struct dlv_member *m)
{
	const struct feed_shm_rel *r = m->rel.map;
	uint64_t tail = atomic_load_explicit(&r->ready_tail, memory_order_relaxed);
	uint32_t may_take = m->credits < d->lay.nslots ? m->credits : d->lay.nslots;

	if (tail != m->ready_head)
		return true;
	if ((uint32_t)__builtin_popcountll(m->held) >= may_take)
		return true;
	return d->nfree == 0 && d->pub_seq == d->sched_seq;
}

unsigned dlv_detach_idle(struct dlv *d, uint64_t now, uint64_t timeout_ns, const char *name)
{
	assert_loop_thread();
	struct pool_job *list = NULL;
	uint64_t detached = 0;
	unsigned n = 0;
	char msg[200];

	feed_mutex_lock(&d->lock);
	dlv_reclaim_locked(d);  /* a release waiting in the ring is no idleness */
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (!m || !member_quiet_locked(m, now, timeout_ns) ||
		    (m->state != DLV_MEMBER_ACTIVE && m->state != DLV_MEMBER_DONE) ||
		    !member_holds_up_locked(d, m))
			continue;
		snprintf(msg, sizeof(msg), "group '%s': detached after releasing nothing for %llu ms "
			 "(the group timeout); the batches it holds stay valid until released, "
			 "the other members went on", name,
			 (unsigned long long)(timeout_ns / 1000000));
		detach_untaken_locked(d, m);
		dlv_member_fail_locked(m, -ENOLINK, msg, DLV_MEMBER_DETACHED);
		detached |= 1ull << i;
		n++;
	}
	if (n)
		list = dlv_advance_locked(d);
	feed_mutex_unlock(&d->lock);
	for (uint64_t b = detached; b; b &= b - 1)  /* no longer waited for */
		pool_source_watch(d->src, (unsigned)__builtin_ctzll(b), NULL);
	dlv_submit_all(d, list);
	return n;
}

void dlv_close(struct dlv *d)
{
	assert_loop_thread();
	if (!d)
		return;
	feed_mutex_lock(&d->lock);
	d->closing = true;
	feed_mutex_unlock(&d->lock);
	atomic_store_explicit(&d->closed_flag, true, memory_order_relaxed);
	/* its client is gone: feedd writes the done words it would have, so
	 * no conversion waits for it any longer (a dead client's never come) */
	if (d->dev_own)
		d->dev_ops->abandon(d->dev_own);
	dlv_unref(d, false);
}

void dlv_stats(struct dlv *d, struct dlv_stats *ret_stats)
{
	feed_mutex_lock(&d->lock);
	*ret_stats = d->st;
	dlv_counters(d, ret_stats);
	ret_stats->credits_in_use = d->lay.nslots - d->nfree;
	ret_stats->members = d->nmembers;
	ret_stats->error = d->error;
	snprintf(ret_stats->error_msg, sizeof(ret_stats->error_msg), "%s",
		 d->error ? d->error_msg : "");
	feed_mutex_unlock(&d->lock);
}

void dlv_member_stats(struct dlv_member *m, struct dlv_member_stats *ret_stats)
{
	struct dlv *d = m->d;

	feed_mutex_lock(&d->lock);
	*ret_stats = (struct dlv_member_stats){
		.state = m->state, .batches = m->batches, .samples = m->samples,
		.bytes = m->bytes, .bad_releases = m->bad_releases,
		.held = (uint32_t)__builtin_popcountll(m->held),
		.start_epoch = m->start_epoch, .start_index = m->start_index,
		.error = m->error,
		/* relaxed: the client's counter, shown as it is; rel is mapped
		 * once the member is prepared */
		.reader_wait_ns = m->rel.map ? atomic_load_explicit(
			&((struct feed_shm_rel *)m->rel.map)->reader_wait_ns, memory_order_relaxed) : 0,
		/* relaxed, likewise */
		.detached = m->rel.map ? atomic_load_explicit(
			&((struct feed_shm_rel *)m->rel.map)->detached_batches, memory_order_relaxed) : 0,
	};
	snprintf(ret_stats->error_msg, sizeof(ret_stats->error_msg), "%s", m->error_msg);
	feed_mutex_unlock(&d->lock);
}

void dlv_counters(struct dlv *d, struct dlv_stats *ret_stats)
{
	struct pool_source_stats ps;

	/* each read once: they may disagree by a batch in flight */
	pool_source_stats(d->src, &ps);
	ret_stats->batches = atomic_load_explicit(&d->pub_batches, memory_order_relaxed);
	ret_stats->samples = atomic_load_explicit(&d->pub_samples, memory_order_relaxed);
	ret_stats->bytes = atomic_load_explicit(&d->pub_bytes, memory_order_relaxed);
	ret_stats->worker_ns = ps.worker_ns;
	ret_stats->jobs = ps.jobs;
	ret_stats->credits = d->lay.nslots;
}
