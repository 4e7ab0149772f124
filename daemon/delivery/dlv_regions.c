/*
 * dlv_regions.c: a member's regions and the data region, made by a job on a
 * worker before any client sees them (dlv_join), and the first order table.
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
/* ---- regions (a worker, before any client sees them) ---- */

static void headers_init(struct dlv *d, struct dlv_member *m)
{
	struct feed_shm_ctl *c = m->ctl.map;
	struct feed_shm_rel *r = m->rel.map;

	c->magic = FEED_SHM_CTL_MAGIC;
	c->version = FEED_SHM_VERSION;
	c->ctl_bytes = m->ctl.size;
	c->data_bytes = d->data.size;
	c->rel_bytes = m->rel.size;
	c->nslots = d->lay.nslots;
	c->ring_cap = d->lay.ring_cap;
	c->ring_off = d->lay.ring_off;
	c->slots_off = d->lay.slots_off;
	c->slot_hdr_bytes = d->lay.slot_hdr_bytes;
	c->slot_bytes = d->lay.slot_bytes;
	c->nfields = d->lay.nfields;
	c->batch = d->lay.batch;
	atomic_init(&c->ready_head, 0);
	r->magic = FEED_SHM_REL_MAGIC;
	r->version = FEED_SHM_VERSION;
	r->ring_cap = d->lay.rel_cap;
	r->ring_off = d->lay.rel_off;
	atomic_init(&r->ready_tail, 0);
	atomic_init(&r->rel_head, 0);
	atomic_init(&r->client_waiting, 0);
	atomic_init(&r->daemon_waiting, 0);
	atomic_init(&r->reader_wait_ns, 0);
	atomic_init(&r->detached_batches, 0);
	m->ready = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)m->ctl.map + d->lay.ring_off),
		.head = &c->ready_head, .waiting = &r->client_waiting, .cap = d->lay.ring_cap};
	m->rel_ring = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)m->rel.map + d->lay.rel_off),
		.head = &r->rel_head, .waiting = &r->daemon_waiting, .cap = d->lay.rel_cap};
}

/* Makes the data region (and the device slots on the device), no lock
 * held: the first join's job. */
static void data_create(struct dlv *d)
{
	d->data_rc = region_create(&d->data, "feedd-data", d->lay.data_bytes, &d->data_err);
	if (d->data_rc == 0)
		d->data_rc = region_seal(&d->data, d->group ? REGION_SEALS_CONTROL :
					 REGION_SEALS_SHARED, &d->data_err);
	/* a failure here is not the stream's: it goes on with host slots */
	if (d->data_rc == 0 && d->dev && d->dev_ops->make(d->dev, &d->dev_err) < 0)
		d->dev = NULL; /* make undid it; dlv_destroy frees it */
}

/* The data region, once per delivery: the first join makes it, the
 * others wait for it (data_cv) and share its outcome. */
static int data_make(struct dlv *d, struct feed_err *err)
{
	feed_mutex_lock(&d->data_mu);
	bool mine = d->data_state == 0;
	if (mine)
		d->data_state = 1;
	while (!mine && d->data_state != 2)
		pthread_cond_wait(&d->data_cv, &d->data_mu);
	feed_mutex_unlock(&d->data_mu);
	if (mine) {
		data_create(d);
		feed_mutex_lock(&d->data_mu);
		d->data_state = 2;  /* data_rc, data_err, data, dev: final */
		pthread_cond_broadcast(&d->data_cv);
		feed_mutex_unlock(&d->data_mu);
	}
	if (d->data_rc < 0)
		return feed_err_set(err, d->data_rc, "%s", d->data_err.msg);
	return 0;
}

static int regions_make(struct dlv *d, struct dlv_member *m, struct feed_err *err)
{
	int rc;

	if ((rc = data_make(d, err)) < 0 ||
	    (rc = region_create(&m->ctl, "feedd-control", d->lay.ctl_bytes, err)) < 0 ||
	    (rc = region_create(&m->rel, "feedd-release", d->lay.rel_bytes, err)) < 0)
		return rc;
	headers_init(d, m);
	if ((rc = region_seal(&m->ctl, REGION_SEALS_CONTROL, err)) < 0 ||
	    (rc = region_seal(&m->rel, REGION_SEALS_SHARED, err)) < 0)
		return rc;
	m->ready_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	m->release_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->ready_efd < 0 || m->release_efd < 0)
		return feed_err_set(err, -errno, "stream: eventfd: %s", strerror(errno));
	return 0;
}


/* Builds the order table sched_table_want() asks for, if any, outside
 * the lock, and hands it over; frees what the schedule gave back. A
 * worker. Returns 0, or the build's error (also kept by the schedule). */
static int table_make(struct dlv *d, struct feed_err *err)
{
	uint64_t epoch, *t = NULL, *dead[SCHED_TABLES_FREED];

	feed_mutex_lock(&d->lock);
	bool want = sched_table_want(&d->sched, &epoch);
	feed_mutex_unlock(&d->lock);
	if (!want)
		return 0;
	/* spec is immutable after sched_init(): read without the lock */
	int rc = ord_table_build(&d->sched.spec.ord, epoch, &t, err);
	feed_mutex_lock(&d->lock);
	uint32_t n = sched_table_put(&d->sched, epoch, t, rc, err->msg, dead);
	/* a group started by another member meanwhile waited for this table */
	struct pool_job *list = dlv_advance_locked(d);
	feed_mutex_unlock(&d->lock);
	while (n)
		free(dead[--n]);
	dlv_submit_all(d, list);
	return rc;
}

/* A packed mixture resumed far into its rows: the walk to its first batch
 * (O(rows before it): pack places every window it passes) done here, on a
 * worker with no lock held, so the first pump (loop thread, under the lock)
 * finds it done. A plain stream's only: nothing reads d->mwalk until
 * dlv_start(), which comes after this job (a group's members may join
 * meanwhile: its first pump walks). A failure leaves the walk to the pump,
 * which reports it. */
static void mix_prime(struct dlv *d)
{
	struct pks_pos pos[MIXT_MAX_SOURCES];
	struct feed_err err = {0};
	uint64_t g;

	if (!d->mix || !mixt_packed(d->mix))
		return;
	feed_mutex_lock(&d->lock);
	bool want = !d->started && d->solo && sched_peek_row(&d->sched, &g);
	feed_mutex_unlock(&d->lock);
	if (want)
		(void)mixt_walk_to(&d->mwalk, d->mix, g, pos, &err);
}

static void prep_run(struct pool_job *j, struct pool_worker *w)
{
	struct dlv_member *m = (struct dlv_member *)((char *)j - offsetof(struct dlv_member, prep_job));

	if (w)  /* NULL: run after the pool stopped (dlv_submit) */
		assert_worker();
	m->prep_rc = regions_make(m->d, m, &m->prep_err);  /* watched once added */
	/* the start epoch's table (the first join's): the reply waits for it */
	if (m->prep_rc == 0)
		m->prep_rc = table_make(m->d, &m->prep_err);
	if (m->prep_rc == 0 && m->d->solo == m)
		mix_prime(m->d);
}

static void prep_done(struct pool_job *j)
{
	struct dlv_member *m = (struct dlv_member *)((char *)j - offsetof(struct dlv_member, prep_job));
	struct dlv *d = m->d;

	/* ready() may leave m, and close d: touch neither afterwards */
	m->ready_fn(m->ready_arg, m->prep_rc, m->prep_err.msg);
	dlv_unref(d, false);
}

int dlv_join(struct dlv *d, uint64_t epochs, uint32_t credits, dlv_ready_fn *ready, void *arg,
	     struct dlv_member **ret, struct feed_err *err)
{
	assert_loop_thread();
	struct dlv_member *m = calloc(1, sizeof(*m));

	if (!m)
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	m->d = d;
	m->epochs = epochs;
	m->credits = credits;
	m->ready_efd = m->release_efd = -1;
	m->ctl.fd = m->rel.fd = -1;
	m->state = DLV_MEMBER_JOINING;
	m->ready_fn = ready;
	m->ready_arg = arg;
	m->prep_job.run = prep_run;
	m->prep_job.done = prep_done;
	m->prep_job.src = NULL;  /* the pool's own: an open is served before batches */
	if (!d->group)
		d->solo = m;
	atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed); /* the job's */
	*ret = m;
	dlv_submit(d, &m->prep_job);
	return 0;
}

void dlv_member_fds(const struct dlv_member *m, struct dlv_fds *ret_fds)
{
	*ret_fds = (struct dlv_fds){.ctl = m->ctl.fd, .data = m->d->data.fd, .rel = m->rel.fd,
				    .ready = m->ready_efd, .release = m->release_efd};
}

struct dsl *dlv_device(const struct dlv *d, const char **ret_why)
{
	if (ret_why)
		*ret_why = d->dev_err.msg;
	return d->dev;
}

uint64_t dlv_resume_layout(struct dlv *d, struct ord_level *lv, uint32_t *ret_n)
{
	return sched_resume_layout(&d->sched, lv, ret_n);  /* set by sched_init(): no lock */
}

uint64_t dlv_batches_per_epoch(struct dlv *d)
{
	/* under the lock: a group's workers move the schedule to its next
	 * epoch while a joiner's open is answered */
	feed_mutex_lock(&d->lock);
	uint64_t n = sched_batches_per_epoch(&d->sched);
	feed_mutex_unlock(&d->lock);
	return n;
}
