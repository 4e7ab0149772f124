/*
 * dlv_sched.c: slot scheduling: which position is built into which free slot,
 * the jobs that build batches (job_run) and order tables (table_run).
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
/* ---- scheduling ---- */

static void job_run(struct pool_job *pj, struct pool_worker *w);
static void table_run(struct pool_job *pj, struct pool_worker *w);

/* The order table the schedule wants next, as a job of the delivery's
 * source (its user's worker time), or NULL. */
static struct pool_job *table_job_locked(struct dlv *d)
{
	if (!sched_table_want(&d->sched, &d->table_epoch))
		return NULL;
	d->table_job = (struct pool_job){.run = table_run, .src = d->src};
	atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed); /* the job's */
	return &d->table_job;
}

/* True while some member receives what is built: a group with none
 * (all done, detached or gone) builds nothing until one joins. */
static bool receivers_locked(const struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++)
		if (d->members[i] && d->members[i]->state == DLV_MEMBER_ACTIVE)
			return true;
	return false;
}

/* A group builds no epoch that no active member will receive. */
static bool wanted_locked(const struct dlv *d)
{
	uint64_t epoch, index;

	if (!d->group || !sched_peek(&d->sched, &epoch, &index))
		return true;
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		const struct dlv_member *m = d->members[i];
		if (m && m->state == DLV_MEMBER_ACTIVE && (!m->epochs || epoch < m->epochs))
			return true;
	}
	return false;
}

/* Out of slots and nothing in flight: asks every member holding a slot to
 * ring when it releases. While a batch is still being built there is no
 * need: its job_run() calls dlv_advance() after publishing, and that reclaims
 * whatever was released meanwhile, without waking the loop. */
static void want_release_locked(struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (!m || !m->held || m->state == DLV_MEMBER_STOPPED)
			continue;
		/* feed_ring.h: the flag, a fence, and a re-check of the head;
		 * dlv_advance_locked() re-checks again after pumping */
		(void)feed_ring_arm(&m->rel_ring, m->rel_tail);
	}
	d->want_recheck = true;
}

/* A packed mixture's batch: where each source's stream stands at its
 * first row (the walk moves on under the lock as batches are handed out:
 * O(rows between) and the lengths of the documents passed). */
static int job_mix_start_locked(struct dlv *d, struct dlv_job *j, struct feed_err *err)
{
	uint64_t g = j->pos.epoch * d->sched.spec.ord.n +
		     ord_global_position(j->pos.ord, j->pos.batch, 0);

	return mixt_walk_to(&d->mwalk, d->mix, g, j->mpk, err);
}

/* Hands free slots to the next positions; returns the jobs to submit (once
 * the lock is dropped) as a list. */
static struct pool_job *pump_locked(struct dlv *d)
{
	struct pool_job *list = NULL;
	struct feed_err err = {0};
	bool go = !d->closing && !d->error && !d->fail_code && d->started && receivers_locked(d);

	while (go && d->nfree > 0 && !d->sched.done && wanted_locked(d)) {
		struct dlv_job *j = &d->jobs[d->free_slots[d->nfree - 1]];
		int rc = sched_next(&d->sched, &j->pos, &err);
		if (rc == -EAGAIN || rc == -ENODATA)
			break;
		if (rc == 0)  /* now: pos.ord may be another epoch's by publication */
			j->position = ord_position_of(j->pos.ord, j->pos.batch);
		if (rc == 0 && d->mix && mixt_packed(d->mix))
			rc = job_mix_start_locked(d, j, &err);
		if (rc < 0) {  /* after the batches already scheduled */
			d->fail_code = rc;
			d->fail_seq = d->sched_seq;
			snprintf(d->fail_msg, sizeof(d->fail_msg), "%s", err.msg);
			dlv_publish_ready_locked(d, NULL);
			return list;
		}
		d->nfree--;
		j->built = false;
		j->seq = d->sched_seq++;
		d->seq_job[j->seq % d->lay.nslots] = j;
		d->slots[j->slot].state = SLOT_BUILDING;
		d->slots[j->slot].gen++;
		j->base.run = job_run;
		j->base.done = NULL;
		j->base.src = d->src;
		j->base.next = list;
		list = &j->base;
		atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed); /* the job's */
	}
	if (go && d->nfree == 0 && d->pub_seq == d->sched_seq && !d->sched.done)
		want_release_locked(d);
	struct pool_job *t = go ? table_job_locked(d) : NULL;
	if (t) {  /* after the batches: the next epoch's, built ahead */
		t->next = list;
		list = t;
	}
	return list;
}

void dlv_submit_all(struct dlv *d, struct pool_job *list)
{
	while (list) {
		struct pool_job *next = list->next;
		dlv_submit(d, list);
		list = next;
	}
}

static struct pool_job *list_join(struct pool_job *a, struct pool_job *b)
{
	while (b) {
		struct pool_job *n = b->next;
		b->next = a;
		a = b;
		b = n;
	}
	return a;
}

/* A member released something since our last look. */
static bool released_since_locked(struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (m && m->state != DLV_MEMBER_STOPPED &&
		    feed_ring_head(&m->rel_ring) != m->rel_tail)
			return true;
	}
	return false;
}

/* Reclaims and schedules, with d->lock held; returns the jobs to submit.
 * When out of slots pump_locked() has set daemon_waiting (with a fence):
 * one more look at the release heads catches a release that raced with
 * it; otherwise the client will ring. */
struct pool_job *dlv_advance_locked(struct dlv *d)
{
	struct pool_job *list = NULL;

	for (;;) {
		dlv_reclaim_locked(d);
		list = list_join(list, pump_locked(d));
		if (!d->want_recheck)
			break;
		d->want_recheck = false;
		if (!released_since_locked(d))
			break;
	}
	return list;
}

void dlv_advance(struct dlv *d)
{
	feed_mutex_lock(&d->lock);
	struct pool_job *list = dlv_advance_locked(d);
	feed_mutex_unlock(&d->lock);
	dlv_submit_all(d, list);
}

/* The builder's view of job j: where its slot is. */
static void job_batch(struct dlv *d, struct dlv_job *j, struct bld_batch *b)
{
	*b = (struct bld_batch){
		.ds = d->ds, .plan = d->plan, .lay = &d->lay, .cache = d->cache, .seed = d->seed,
		/* the job starts: its limits are these until it ends, whatever a
		 * reload sets meanwhile */
		.lim = bld_limits_snap(d->limits),
		.epoch = j->pos.epoch, .index = j->pos.index, .ord = j->pos.ord,
		.ord_batch = j->pos.batch, .nsamples = j->pos.nsamples,
		.mix_batch = j->pos.index * d->sched.spec.ord.world + d->sched.spec.ord.rank,
		.data = (uint8_t *)d->data.map + layout_slot_off(&d->lay, j->slot),
		.data_off = layout_slot_off(&d->lay, j->slot),
		/* built in our copy, copied into each member's control region at publish */
		.hdr = dlv_slot_header(d, j->slot),
		.hdr_off = layout_hdr_off(&d->lay, j->slot),
		/* only this job changes the generation while the slot is BUILDING */
		.gen = d->slots[j->slot].gen,
		/* eval delivers each sample once: a failed one is dropped, not replaced */
		.on_error = d->on_error == BLD_ON_ERROR_SKIP && d->sched.spec.ord.eval
				    ? BLD_ON_ERROR_DROP : (enum bld_on_error)d->on_error,
		.max_search = d->max_bad + 1,
		.bad = &j->bad,
		/* immutable after sched_init(): read without the lock */
		.rows = &d->sched.spec.rows,
		.pk = j->pos.pk,
	};
}

/* A mixture's batch: which source and sample each row reads (mixture.h),
 * into the slot's rows. Worker, no lock: the mixture is immutable and the
 * slot's rows are this job's. */
static int job_rows(struct dlv *d, struct dlv_job *j, struct bld_batch *b, struct feed_err *err)
{
	struct bld_row *rows = d->rows + (size_t)j->slot * d->lay.batch;
	uint64_t base = j->pos.epoch * d->sched.spec.ord.n;
	struct mixt_cursor c;
	bool packed = mixt_packed(d->mix);
	int rc = 0;

	memset(c.valid, 0, sizeof(c.valid));
	for (uint32_t i = 0; i < j->pos.nsamples && rc == 0; i++) {
		/* padding past the epoch's end reads the rows after it: a repeat */
		uint64_t k, g = base + ord_global_position(j->pos.ord, j->pos.batch, i);
		rows[i].source = mixt_row(d->mix, g, &k);
		if (packed)  /* the row of its source's stream: the builder cuts it */
			rows[i].sample = k;
		else
			rc = mixt_sample(d->mix, &c, rows[i].source, k, &rows[i].sample, err);
	}
	mixt_cursor_fini(&c);
	b->mix_rows = rows;
	b->srcs = d->srcs;
	b->nsrcs = d->mix->spec.nsrc;
	b->src_field = d->mix_field;
	if (packed) {
		b->mix_pk_spec = d->mpk_spec;
		b->mix_pk = j->mpk;
	}
	return rc;
}

/* The slots published and not yet released (ready, or held by the
 * reader): how far the builders stand ahead of the reader. Slots being
 * built do not count: while the workers fall behind, they are many. */
static uint32_t job_ready(struct dlv *d)
{
	uint32_t n = 0;
	feed_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < d->lay.nslots; i++)
		n += d->slots[i].state == SLOT_CLIENT;
	feed_mutex_unlock(&d->lock);
	return n;
}

static void job_run(struct pool_job *pj, struct pool_worker *w)
{
	struct dlv_job *j = (struct dlv_job *)pj;
	struct dlv *d = j->d;
	struct feed_err err = {0};
	struct bld_batch b;
	bool wake = false;
	int rc = -ECANCELED;

	/* relaxed: a stale false only builds one batch nobody will read; no
	 * worker (w NULL: run after the pool stopped) builds nothing either */
	if (w && !atomic_load_explicit(&d->closed_flag, memory_order_relaxed)) {
		assert_worker();
		job_batch(d, j, &b);
		struct bld_predecode pre;
		if (d->dev && d->dev_ops->predecode &&
		    d->dev_ops->predecode(d->dev, b.nsamples, job_ready(d), &pre))
			b.pre = &pre;
		/* with device slots: the device has read the slot's last batch
		 * before we overwrite it, and reads this one before it is published */
		rc = d->mix ? job_rows(d, j, &b, &err) : 0;
		if (rc == 0 && (!d->dev || (rc = d->dev_ops->before_build(d->dev, j->slot, &err)) == 0))
			rc = bld_build(&b, w, &j->bytes, &err);
		if (rc == 0 && d->dev)
			rc = d->dev_ops->after_build(d->dev, j->slot, b.hdr, d->data.map,
						     d->data.size, &err);
	}
	feed_mutex_lock(&d->lock);
	sched_done(&d->sched, &j->pos);
	if (rc == 0) {
		j->built = true;
	} else if (rc != -ECANCELED && (!d->fail_code || j->seq < d->fail_seq)) {
		d->fail_code = rc;
		d->fail_seq = j->seq;
		snprintf(d->fail_msg, sizeof(d->fail_msg), "%s", err.msg);
	}
	if (!d->error && !d->closing)
		dlv_publish_ready_locked(d, &wake);
	feed_mutex_unlock(&d->lock);
	if (rc == 0)
		dlv_advance(d);
	/* The reader's wake-up comes last: a reader on this CPU then runs as
	 * soon as we are done, not while we reclaim and schedule. Only a plain
	 * stream defers it (its member lives as long as d, which we hold). */
	if (wake)
		dlv_ring_wake(d->solo);
	dlv_unref(d, true);
}

/* Builds the order table asked for (table_job_locked) off the lock, puts
 * it and schedules what waited for it. */
static void table_run(struct pool_job *pj, struct pool_worker *w)
{
	struct dlv *d = (struct dlv *)((char *)pj - offsetof(struct dlv, table_job));
	uint64_t *t = NULL, *dead[SCHED_TABLES_FREED];
	uint64_t epoch = d->table_epoch;  /* written before the submit; ours till the put */
	struct feed_err err = {0};
	int rc = 0;

	/* relaxed: a stale false builds one table nobody reads */
	if (w && !atomic_load_explicit(&d->closed_flag, memory_order_relaxed)) {
		assert_worker();
		rc = ord_table_build(&d->sched.spec.ord, epoch, &t, &err);
	}
	feed_mutex_lock(&d->lock);
	uint32_t n = sched_table_put(&d->sched, epoch, t, rc, err.msg, dead);
	struct pool_job *list = dlv_advance_locked(d);
	feed_mutex_unlock(&d->lock);
	while (n)
		free(dead[--n]);
	dlv_submit_all(d, list);
	dlv_unref(d, true);
}
