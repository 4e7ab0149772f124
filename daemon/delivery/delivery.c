/*
 * delivery.c: one stream's slots, credits, ready ring and releases (see
 * delivery.h). Positions come from schedule.c, batches are built by
 * work/builder.c; this file decides which slot a batch goes into, when it
 * is published and when the slot comes back.
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
#include "feed_shm.h"
#include "layout.h"
#include "pipeline.h"
#include "pool.h"
#include "region.h"
#include "stats.h"

enum slot_state {
	SLOT_FREE = 0,   /* in free_slots */
	SLOT_BUILDING,   /* a worker writes it */
	SLOT_CLIENT,     /* published: the client's until released */
};

struct slot_info {
	enum slot_state state;
	uint32_t gen;              /* bumped at each build; releases must match */
};

/* One batch being built: one per slot, reused (no allocation per batch). */
struct dlv_job {
	struct pool_job base;      /* first: the pool hands this back */
	struct dlv *d;
	uint32_t slot;
	uint64_t seq;              /* publication order */
	struct sched_pos pos;
	uint64_t bytes;            /* field bytes written */
	bool built;                /* finished, waiting for its turn (lock) */
};

struct dlv {
	pthread_mutex_t lock;      /* guards everything below marked (lock) */
	_Atomic int refs;          /* the loop's + one per job in flight */
	_Atomic bool closed_flag;  /* closing, readable without the lock */
	const struct fmt_dataset *ds;
	struct pipe_plan *plan;    /* our copy: the request that made it is gone */
	struct slot_layout lay;    /* immutable */
	uint64_t seed;
	struct cache *cache;
	struct pool *pool;
	struct pool_source *src;   /* our fair share of the workers */
	struct stats_flow flow;    /* published counters, lock-free (stats.h) */

	/* made by dlv_prepare() on a worker, immutable afterwards */
	struct region ctl, data, rel;
	int ready_efd, release_efd;
	uint64_t *ready_ring;             /* in ctl */
	_Atomic uint64_t *rel_ring;       /* in rel: untrusted */
	struct pool_job prep_job;
	dlv_ready_fn *ready_fn;
	void *ready_arg;
	int prep_rc;
	struct feed_err prep_err;

	/* (lock) */
	struct sched sched;
	struct slot_info slots[DLV_MAX_CREDITS];
	struct dlv_job jobs[DLV_MAX_CREDITS]; /* job i builds slot i */
	uint32_t free_slots[DLV_MAX_CREDITS];
	uint32_t nfree;
	struct dlv_job *seq_job[DLV_MAX_CREDITS]; /* by seq % nslots */
	uint64_t sched_seq, pub_seq;      /* next to schedule / to publish */
	uint64_t ready_head;              /* our copy of ctl->ready_head */
	uint64_t rel_tail;                /* private: never read from rel */
	bool want_recheck;                /* daemon_waiting was set */
	bool closing;
	int error;
	/* A batch that failed to build ends the stream only once every batch
	 * before it is published: the client gets those first, in order. */
	int fail_code;                    /* 0, or the earliest failed batch's error */
	uint64_t fail_seq;                /* its publication order */
	char fail_msg[FEED_ERR_MSG_MAX];
	struct dlv_stats st;
};

/* ---- lifetime ---- */

static void dlv_destroy(struct dlv *d)
{
	if (d->src) {  /* the pool may outlive us: it must not read our region */
		pool_source_watch(d->src, NULL);
		pool_source_put(d->src);
	}
	region_free(&d->ctl);
	region_free(&d->data);
	region_free(&d->rel);
	if (d->ready_efd >= 0)
		close(d->ready_efd);
	if (d->release_efd >= 0)
		close(d->release_efd);
	sched_fini(&d->sched);
	free(d->plan);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static void dlv_unref(struct dlv *d)
{
	/* acq_rel: the last owner sees every write the others made */
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1)
		dlv_destroy(d);
}

int dlv_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	    const struct slot_layout *lay, const struct dlv_spec *spec, struct cache *cache,
	    struct pool *pool, struct dlv **ret_dlv, struct feed_err *err)
{
	struct dlv *d = calloc(1, sizeof(*d));
	int rc;

	assert(spec->credits >= 1 && spec->credits <= DLV_MAX_CREDITS);
	assert(lay->nslots == spec->credits && lay->batch == spec->sched.ord.batch);
	if (!d || !(d->plan = malloc(sizeof(*plan)))) {
		free(d);
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	}
	memcpy(d->plan, plan, sizeof(*plan));
	d->ds = ds;
	d->lay = *lay;
	d->seed = spec->seed;
	d->cache = cache;
	d->pool = pool;
	d->ready_efd = d->release_efd = -1;
	atomic_init(&d->refs, 1);
	pthread_mutex_init(&d->lock, NULL);
	if ((rc = sched_init(&d->sched, &spec->sched, err)) < 0) {
		dlv_destroy(d);
		return rc;
	}
	if ((rc = pool_source_new(pool, spec->uid, &d->src)) < 0) {
		dlv_destroy(d);
		return feed_err_set(err, rc, "stream: out of memory");
	}
	for (uint32_t i = 0; i < lay->nslots; i++) {
		d->free_slots[d->nfree++] = lay->nslots - 1 - i;
		d->jobs[i].d = d;
		d->jobs[i].slot = i;
	}
	*ret_dlv = d;
	return 0;
}

/* ---- regions (a worker, before any client sees them) ---- */

static void headers_init(struct dlv *d)
{
	struct feed_shm_ctl *c = d->ctl.map;
	struct feed_shm_rel *r = d->rel.map;

	c->magic = FEED_SHM_CTL_MAGIC;
	c->version = FEED_SHM_VERSION;
	c->ctl_bytes = d->ctl.size;
	c->data_bytes = d->data.size;
	c->rel_bytes = d->rel.size;
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
	atomic_init(&r->rel_head, 0);
	atomic_init(&r->client_waiting, 0);
	atomic_init(&r->daemon_waiting, 0);
	atomic_init(&r->reader_wait_ns, 0);
	d->ready_ring = (uint64_t *)((uint8_t *)d->ctl.map + d->lay.ring_off);
	d->rel_ring = (_Atomic uint64_t *)((uint8_t *)d->rel.map + d->lay.rel_off);
}

static int regions_make(struct dlv *d, struct feed_err *err)
{
	int rc;

	if ((rc = region_create(&d->ctl, "feedd-control", d->lay.ctl_bytes, err)) < 0 ||
	    (rc = region_create(&d->data, "feedd-data", d->lay.data_bytes, err)) < 0 ||
	    (rc = region_create(&d->rel, "feedd-release", d->lay.rel_bytes, err)) < 0)
		return rc;
	headers_init(d);
	if ((rc = region_seal(&d->ctl, REGION_SEALS_CONTROL, err)) < 0 ||
	    (rc = region_seal(&d->data, REGION_SEALS_SHARED, err)) < 0 ||
	    (rc = region_seal(&d->rel, REGION_SEALS_SHARED, err)) < 0)
		return rc;
	d->ready_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->release_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->ready_efd < 0 || d->release_efd < 0)
		return feed_err_set(err, -errno, "stream: eventfd: %s", strerror(errno));
	return 0;
}

static void prep_run(struct pool_job *j, struct pool_worker *w)
{
	struct dlv *d = (struct dlv *)((char *)j - offsetof(struct dlv, prep_job));

	(void)w;
	d->prep_rc = regions_make(d, &d->prep_err);
	if (d->prep_rc == 0)
		pool_source_watch(d->src, &((struct feed_shm_rel *)d->rel.map)->client_waiting);
}

static void prep_done(struct pool_job *j)
{
	struct dlv *d = (struct dlv *)((char *)j - offsetof(struct dlv, prep_job));

	d->ready_fn(d->ready_arg, d->prep_rc, d->prep_err.msg);
}

void dlv_prepare(struct dlv *d, dlv_ready_fn *ready, void *arg)
{
	d->ready_fn = ready;
	d->ready_arg = arg;
	d->prep_job.run = prep_run;
	d->prep_job.done = prep_done;
	d->prep_job.src = NULL;  /* the pool's own: an open is served before batches */
	pool_submit(d->pool, &d->prep_job);
}

void dlv_fds(const struct dlv *d, struct dlv_fds *ret_fds)
{
	*ret_fds = (struct dlv_fds){.ctl = d->ctl.fd, .data = d->data.fd, .rel = d->rel.fd,
				    .ready = d->ready_efd, .release = d->release_efd};
}

uint64_t dlv_batches_per_epoch(const struct dlv *d)
{
	return sched_batches_per_epoch(&d->sched);
}

uint64_t dlv_start_epoch(const struct dlv *d)
{
	return sched_start_epoch(&d->sched);
}

uint64_t dlv_start_index(const struct dlv *d)
{
	return sched_start_index(&d->sched);
}

/* ---- publishing (under d->lock) ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct feed_shm_slot *slot_header(struct dlv *d, uint32_t slot)
{
	return (struct feed_shm_slot *)((uint8_t *)d->ctl.map + layout_hdr_off(&d->lay, slot));
}

static void ring_push(struct dlv *d, uint64_t entry)
{
	d->ready_ring[d->ready_head & (d->lay.ring_cap - 1)] = entry;
	d->ready_head++;
}

/* Rings the client's doorbell; ring_publish() decided that it sleeps. */
static void ring_wake(struct dlv *d)
{
	uint64_t one = 1;

	(void)!write(d->ready_efd, &one, sizeof(one)); /* EAGAIN: it is ringing already */
}

/* Makes the pushed entries visible. If the client sleeps it is woken now,
 * or, with defer_wake, *defer_wake is set and the caller wakes it with
 * ring_wake() once it has nothing else to do. */
static void ring_publish(struct dlv *d, bool *defer_wake)
{
	struct feed_shm_ctl *c = d->ctl.map;
	struct feed_shm_rel *r = d->rel.map;

	/* release: the entries and slot headers before the head */
	atomic_store_explicit(&c->ready_head, d->ready_head, memory_order_release);
	/* seq_cst: pairs with the client's "set waiting, fence, re-check head" */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_exchange_explicit(&r->client_waiting, 0, memory_order_relaxed)) {
		if (defer_wake)
			*defer_wake = true;
		else
			ring_wake(d);
	}
}

/* Ends the stream with an error the client reads from the control header,
 * and rings the loop's release doorbell so the stop is logged at once. */
static void fail_locked(struct dlv *d, int code, const char *msg)
{
	struct feed_shm_ctl *c = d->ctl.map;
	uint64_t one = 1;

	if (d->error)
		return;
	d->error = code;
	c->error_code = code;
	snprintf(c->error_msg, sizeof(c->error_msg), "%s", msg);
	ring_push(d, feed_ring_entry(FEED_READY_ERROR, 0));
	ring_publish(d, NULL);
	(void)!write(d->release_efd, &one, sizeof(one));
}

/* Publishes every built batch that is next in order, and a failed
 * batch's error when its turn comes. */
static void publish_ready_locked(struct dlv *d, bool *defer_wake)
{
	bool any = false;

	for (;;) {
		if (d->fail_code && d->pub_seq == d->fail_seq) {
			if (any)
				ring_publish(d, defer_wake);
			fail_locked(d, d->fail_code, d->fail_msg);
			return;
		}
		if (d->pub_seq == d->sched_seq)
			break;
		struct dlv_job *j = d->seq_job[d->pub_seq % d->lay.nslots];
		if (!j || !j->built)
			break;
		d->seq_job[d->pub_seq % d->lay.nslots] = NULL;
		j->built = false;
		d->slots[j->slot].state = SLOT_CLIENT;
		slot_header(d, j->slot)->publish_ns = now_ns();
		ring_push(d, feed_ring_entry(j->slot, d->slots[j->slot].gen));
		stats_flow_add(&d->flow, j->pos.nsamples, j->bytes);
		if (j->pos.last_of_epoch)
			ring_push(d, feed_ring_entry(FEED_READY_EPOCH_END, (uint32_t)j->pos.epoch));
		if (j->pos.last_of_stream)
			ring_push(d, feed_ring_entry(FEED_READY_STREAM_END, 0));
		d->pub_seq++;
		any = true;
	}
	if (any)
		ring_publish(d, defer_wake);
}

/* ---- releases (untrusted input) ---- */

static void release_one_locked(struct dlv *d, uint64_t entry)
{
	uint32_t slot = feed_ring_slot(entry), gen = feed_ring_gen(entry);

	if (slot >= d->lay.nslots || d->slots[slot].state != SLOT_CLIENT ||
	    d->slots[slot].gen != gen) {
		d->st.bad_releases++;
		return;
	}
	d->slots[slot].state = SLOT_FREE;
	d->free_slots[d->nfree++] = slot;
}

/* Reads the release ring from our private tail up to its head. */
static void reclaim_locked(struct dlv *d)
{
	struct feed_shm_rel *r = d->rel.map;
	uint64_t head = atomic_load_explicit(&r->rel_head, memory_order_acquire);
	char msg[160];

	if ((int64_t)(head - d->rel_tail) < 0) {
		snprintf(msg, sizeof(msg), "release queue head moved backwards (from %llu to %llu): "
			 "stream stopped", (unsigned long long)d->rel_tail, (unsigned long long)head);
		fail_locked(d, -EPROTO, msg);
		return;
	}
	if (head - d->rel_tail > d->lay.rel_cap) {
		snprintf(msg, sizeof(msg), "release queue head moved %llu entries past the %u it "
			 "holds: stream stopped", (unsigned long long)(head - d->rel_tail),
			 d->lay.rel_cap);
		fail_locked(d, -EPROTO, msg);
		return;
	}
	while (d->rel_tail != head) {
		/* read once: the client may rewrite the entry under us */
		uint64_t e = atomic_load_explicit(&d->rel_ring[d->rel_tail & (d->lay.rel_cap - 1)],
						  memory_order_relaxed);
		release_one_locked(d, e);
		d->rel_tail++;
	}
}

/* ---- scheduling ---- */

static void job_run(struct pool_job *pj, struct pool_worker *w);

/* Hands free slots to the next positions; returns the jobs to submit (once
 * the lock is dropped) as a list. */
static struct pool_job *pump_locked(struct dlv *d)
{
	struct pool_job *list = NULL;
	struct feed_err err = {0};

	while (!d->closing && !d->error && !d->fail_code && d->nfree > 0 && !d->sched.done) {
		struct dlv_job *j = &d->jobs[d->free_slots[d->nfree - 1]];
		int rc = sched_next(&d->sched, &j->pos, &err);
		if (rc == -EAGAIN || rc == -ENODATA)
			break;
		if (rc < 0) {  /* after the batches already scheduled */
			d->fail_code = rc;
			d->fail_seq = d->sched_seq;
			snprintf(d->fail_msg, sizeof(d->fail_msg), "%s", err.msg);
			publish_ready_locked(d, NULL);
			break;
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
	if (d->nfree == 0 && d->pub_seq == d->sched_seq && !d->sched.done && !d->closing &&
	    !d->error && !d->fail_code) {
		/* Out of credits and nothing in flight: ask the client to ring when
		 * it releases. While a batch is still being built there is no need:
		 * its job_run() calls advance() after publishing, and that reclaims
		 * whatever the client released meanwhile, without waking the loop. */
		struct feed_shm_rel *r = d->rel.map;
		atomic_store_explicit(&r->daemon_waiting, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		d->want_recheck = true;
	}
	return list;
}

static void submit_all(struct dlv *d, struct pool_job *list)
{
	while (list) {
		struct pool_job *next = list->next;
		pool_submit(d->pool, list);
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

/* Reclaims and schedules. When out of credits pump_locked() has set
 * daemon_waiting (with a fence): one more look at the release head catches
 * a release that raced with it; otherwise the client will ring. */
static void advance(struct dlv *d)
{
	struct pool_job *list = NULL;
	struct feed_shm_rel *r = d->rel.map;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		reclaim_locked(d);
		list = list_join(list, pump_locked(d));
		if (!d->want_recheck)
			break;
		d->want_recheck = false;
		if (atomic_load_explicit(&r->rel_head, memory_order_acquire) == d->rel_tail)
			break;
	}
	pthread_mutex_unlock(&d->lock);
	submit_all(d, list);
}

/* The builder's view of job j: where its slot is. */
static void job_batch(struct dlv *d, struct dlv_job *j, struct bld_batch *b)
{
	*b = (struct bld_batch){
		.ds = d->ds, .plan = d->plan, .lay = &d->lay, .cache = d->cache, .seed = d->seed,
		.epoch = j->pos.epoch, .index = j->pos.index, .ord = j->pos.ord,
		.ord_batch = j->pos.batch, .nsamples = j->pos.nsamples,
		.data = (uint8_t *)d->data.map + layout_slot_off(&d->lay, j->slot),
		.data_off = layout_slot_off(&d->lay, j->slot),
		.hdr = slot_header(d, j->slot),
		.hdr_off = layout_hdr_off(&d->lay, j->slot),
		/* only this job changes the generation while the slot is BUILDING */
		.gen = d->slots[j->slot].gen,
	};
}

static void job_run(struct pool_job *pj, struct pool_worker *w)
{
	struct dlv_job *j = (struct dlv_job *)pj;
	struct dlv *d = j->d;
	struct feed_err err = {0};
	struct bld_batch b;
	bool wake = false;
	int rc = -ECANCELED;

	/* relaxed: a stale false only builds one batch nobody will read */
	if (!atomic_load_explicit(&d->closed_flag, memory_order_relaxed)) {
		job_batch(d, j, &b);
		rc = bld_build(&b, w, &j->bytes, &err);
	}
	pthread_mutex_lock(&d->lock);
	sched_done(&d->sched, &j->pos);
	if (rc == 0) {
		j->built = true;
	} else if (rc != -ECANCELED && (!d->fail_code || j->seq < d->fail_seq)) {
		d->fail_code = rc;
		d->fail_seq = j->seq;
		snprintf(d->fail_msg, sizeof(d->fail_msg), "%s", err.msg);
	}
	if (!d->error && !d->closing)
		publish_ready_locked(d, &wake);
	pthread_mutex_unlock(&d->lock);
	if (rc == 0)
		advance(d);
	/* The reader's wake-up comes last: a reader on this CPU then runs as
	 * soon as we are done, not while we reclaim and schedule. */
	if (wake)
		ring_wake(d);
	dlv_unref(d);
}

/* ---- loop thread ---- */

void dlv_start(struct dlv *d)
{
	if (sched_empty(&d->sched)) {
		/* a token taken after the last epoch: nothing but the end */
		pthread_mutex_lock(&d->lock);
		ring_push(d, feed_ring_entry(FEED_READY_STREAM_END, 0));
		ring_publish(d, NULL);
		pthread_mutex_unlock(&d->lock);
		return;
	}
	advance(d);
}

void dlv_on_release(struct dlv *d)
{
	uint64_t count;

	(void)!read(d->release_efd, &count, sizeof(count)); /* clear; we re-check anyway */
	advance(d);
}

void dlv_close(struct dlv *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->closing = true;
	pthread_mutex_unlock(&d->lock);
	atomic_store_explicit(&d->closed_flag, true, memory_order_relaxed);
	dlv_unref(d);
}

void dlv_stats(struct dlv *d, struct dlv_stats *ret_stats)
{
	pthread_mutex_lock(&d->lock);
	*ret_stats = d->st;
	dlv_counters(d, ret_stats);
	ret_stats->credits_in_use = d->lay.nslots - d->nfree;
	ret_stats->error = d->error;
	/* ours alone to write (sealed FUTURE_WRITE), set once under the lock */
	snprintf(ret_stats->error_msg, sizeof(ret_stats->error_msg), "%s",
		 d->error ? ((struct feed_shm_ctl *)d->ctl.map)->error_msg : "");
	pthread_mutex_unlock(&d->lock);
}

void dlv_counters(struct dlv *d, struct dlv_stats *ret_stats)
{
	struct pool_source_stats ps;
	struct stats_flow_snap f;

	stats_flow_read(&d->flow, &f);
	pool_source_stats(d->src, &ps);
	ret_stats->batches = f.batches;
	ret_stats->samples = f.samples;
	ret_stats->bytes = f.bytes;
	ret_stats->worker_ns = ps.worker_ns;
	ret_stats->jobs = ps.jobs;
	ret_stats->credits = d->lay.nslots;
	/* relaxed: the client's counter, shown as it is; rel is mapped once
	 * prepared (before that the client has not seen the stream) */
	ret_stats->reader_wait_ns = d->rel.map ? atomic_load_explicit(
		&((struct feed_shm_rel *)d->rel.map)->reader_wait_ns, memory_order_relaxed) : 0;
}
