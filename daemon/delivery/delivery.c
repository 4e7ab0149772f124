/*
 * delivery.c: one stream's or group's slots, its members, their ready
 * rings and releases (see delivery.h). Positions come from schedule.c,
 * batches are built by work/builder.c; this file decides which slot a
 * batch goes into, when it is published and to which members, when the
 * slot comes back (every member it went to released it), and when a
 * group member is detached.
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

enum slot_state {
	SLOT_FREE = 0,   /* in free_slots */
	SLOT_BUILDING,   /* a worker writes it */
	SLOT_CLIENT,     /* published: the members' in its mask until each released it */
};

struct slot_info {
	enum slot_state state;
	uint32_t gen;              /* bumped at each build; releases must match */
	uint64_t members;          /* SLOT_CLIENT: bit i = members[i] holds it */
};

/* One batch being built: one per slot, reused (no allocation per batch). */
struct dlv_job {
	struct pool_job base;      /* first: the pool hands this back */
	struct dlv *d;
	uint32_t slot;
	uint64_t seq;              /* publication order */
	struct sched_pos pos;
	uint64_t position;         /* global position of its first sample (lock) */
	uint64_t bytes;            /* field bytes written */
	bool built;                /* finished, waiting for its turn (lock) */
	struct bld_bad bad;        /* on_error skip: what it replaced */
	/* a packed mixture: each source's stream at the batch's first row */
	struct pks_pos mpk[MIXT_MAX_SOURCES];
};

/* One reader: its control region (ready ring, copies of the slot headers),
 * its release region and doorbells. */
struct dlv_member {
	struct dlv *d;
	uint64_t epochs;           /* receives epochs < epochs; 0: no end */
	uint32_t credits;          /* what it may take at a time (the client checks) */
	/* made by the join job on a worker, immutable afterwards */
	struct region ctl, rel;
	int ready_efd, release_efd;
	struct feed_ring ready;           /* the ready ring: we produce (in ctl) */
	struct feed_ring rel_ring;        /* the release ring: we consume, untrusted */
	struct pool_job prep_job;
	dlv_ready_fn *ready_fn;
	void *ready_arg;
	int prep_rc;
	struct feed_err prep_err;

	/* (lock) */
	bool added;                       /* in d->members[idx] */
	uint32_t idx;                     /* its bit in slot masks, once added */
	enum dlv_member_state state;
	uint64_t held;                    /* bit s: slot s published to it, not released */
	uint64_t releases;                /* releases it made, plus one each time it began
					   * holding: what the detach timer watches */
	/* the detach timer's own (dlv_detach_idle, loop thread, its clock) */
	bool watched;                     /* the timer has looked at it */
	uint64_t seen_releases;           /* releases at the timer's last change seen */
	uint64_t quiet_since;             /* the timer's time of that change */
	uint64_t ready_head;              /* our copy of ctl->ready_head */
	uint64_t rel_tail;                /* private: never read from rel */
	bool pending;                     /* entries pushed, not yet published */
	uint64_t start_epoch, start_index;
	/* a group member resumed from its own token (dlv_member_resume_at):
	 * the group's batches before (from_epoch, from_position) are not its
	 * own and go past it; the first it receives must start there, or
	 * at the next epoch when its token was taken at its epoch's end */
	bool from_set;                    /* resumed: skipping until its position */
	uint64_t from_epoch, from_position;
	uint64_t batches, samples, bytes, bad_releases;
	int error;
	char error_msg[256];
};

struct dlv {
	pthread_mutex_t lock;      /* guards everything below marked (lock) */
	_Atomic int refs;          /* the loop's + one per job in flight */
	_Atomic bool closed_flag;  /* closing, readable without the lock */
	const struct fmt_dataset *ds;
	struct mixture *mix;       /* a mixture's blend (owned, immutable), or NULL */
	const struct fmt_dataset *srcs[MIXT_MAX_SOURCES]; /* its sources' datasets */
	uint32_t mix_field;        /* the out field `source` */
	struct bld_row *rows;      /* a mixture: batch rows per slot, each the
				    * job's of that slot while it builds */
	/* a packed mixture (mixt_packed()): its sources' streams, and the walk
	 * that starts each batch's (lock), in the order batches are handed out */
	struct pks_spec mpk_spec[MIXT_MAX_SOURCES];
	struct mixt_walk mwalk;
	struct pipe_plan *plan;    /* our copy: the request that made it is gone */
	void (*on_free)(void *arg);/* spec->on_free, called when we are gone */
	void *on_free_arg;
	struct slot_layout lay;    /* immutable */
	uint64_t seed;
	bool group;                /* several members: see dlv_spec */
	uint32_t on_error;         /* enum bld_on_error */
	const struct bld_limits *limits; /* spec's: each job's snapshot (builder.h) */
	uint64_t max_bad;          /* skip: replaced samples an epoch, at most */
	struct cache *cache;
	struct dlv_runner run;     /* where its jobs go (delivery.h) */
	struct pool_source *src;   /* our fair share of the workers: one for
				    * every member (a group counts once) */
	/* published, for status and metrics (dlv_counters): relaxed atomics,
	 * counts for people and tests that order no other memory */
	_Atomic uint64_t pub_batches, pub_samples, pub_bytes;
	uint8_t *hdrs;             /* the slot headers as built, copied to each
				    * member at publish (nslots * slot_hdr_bytes) */

	/* the data region, made once by the first join's job with no lock
	 * held (a region of gigabytes, a device's allocations); data_mu (a
	 * leaf, never held with d->lock) guards data_state, and a later join
	 * waits on data_cv until it is 2; immutable afterwards */
	pthread_mutex_t data_mu;
	pthread_cond_t data_cv;
	int data_state;            /* 0 not begun, 1 being made, 2 made (or failed) */
	int data_rc;
	struct feed_err data_err;
	struct region data;
	struct dsl *dev;           /* device slots (CUDA IPC), or NULL: made on
				    * the device with the data region, NULL from
				    * there (dev_err says why) if that fails */
	const struct dlv_dev_ops *dev_ops; /* drives dev_own (delivery.h) */
	struct dsl *dev_own;       /* the planned device slots, or NULL: ours,
				    * immutable, freed with us (dlv_close may
				    * abandon them while a join makes them) */
	struct feed_err dev_err;

	/* (lock) */
	struct sched sched;
	struct slot_info slots[DLV_MAX_CREDITS];
	struct dlv_job jobs[DLV_MAX_CREDITS]; /* job i builds slot i */
	uint32_t free_slots[DLV_MAX_CREDITS];
	uint32_t nfree;
	struct dlv_job *seq_job[DLV_MAX_CREDITS]; /* by seq % nslots */
	uint64_t sched_seq, pub_seq;      /* next to schedule / to publish */
	struct dlv_member *members[DLV_MAX_MEMBERS]; /* added, not yet left */
	uint32_t nmembers;
	struct dlv_member *solo;          /* a plain stream's member: freed with us, so
					   * a worker may ring it after the lock */
	bool want_recheck;                /* daemon_waiting was set */
	bool started;
	bool closing;
	int error;
	char error_msg[256];
	/* A batch that failed to build ends the delivery only once every batch
	 * before it is published: the members get those first, in order. */
	int fail_code;                    /* 0, or the earliest failed batch's error */
	uint64_t fail_seq;                /* its publication order */
	char fail_msg[FEED_ERR_MSG_MAX];
	/* samples replaced (skip) in the epoch being published, counted in
	 * publication order so the stop past max_bad is the same batch on
	 * every run (from where the stream started) */
	uint64_t bad_epoch;               /* the epoch bad_count counts */
	uint64_t bad_count;
	char bad_what[FEED_ERR_MSG_MAX];  /* what failed in it, cut */
	struct dlv_stats st;
	/* an order table being built (sched_table_want): one at a time */
	struct pool_job table_job;
	uint64_t table_epoch;             /* (lock) set before it is submitted */
	struct pool_job free_job;         /* the last teardown, on a worker */
#ifdef FEEDD_TEST_SEAMS
	uint64_t *seam_blocks;     /* FEEDD_TEST_ORDER_BLOCKS's block table, or NULL */
#endif
};

/* ---- lifetime ---- */

static void member_free(struct dlv_member *m)
{
	if (!m)
		return;
	region_free(&m->ctl);
	region_free(&m->rel);
	if (m->ready_efd >= 0)
		close(m->ready_efd);
	if (m->release_efd >= 0)
		close(m->release_efd);
	free(m);
}

static void dlv_destroy(struct dlv *d)
{
	void (*on_free)(void *arg) = d->on_free;
	void *on_free_arg = d->on_free_arg;

	/* first: the pool may outlive us and must not read the member's
	 * region (the put drops every watch) */
	pool_source_put(d->src);
	member_free(d->solo);
	if (d->dev_own)        /* takes the region it registered, unmaps it after */
		d->dev_ops->free(d->dev_own, &d->data);
	region_free(&d->data); /* left empty by the device's free */
	sched_fini(&d->sched);
#ifdef FEEDD_TEST_SEAMS
	free(d->seam_blocks);  /* after the schedule, which borrowed it */
#endif
	free(d->hdrs);
	free(d->rows);
	mixt_walk_fini(&d->mwalk);
	mixt_free(d->mix);
	free(d->plan);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->data_mu);
	pthread_cond_destroy(&d->data_cv);
	free(d);
	if (on_free)  /* last: nothing of ours reads the dataset any more */
		on_free(on_free_arg);
}

/* Queues job through the delivery's runner; once no worker runs jobs
 * (the pool stopped) runs it here instead. */
static void dlv_submit(struct dlv *d, struct pool_job *job)
{
	if (d->run.submit(d->run.arg, job) == -ESHUTDOWN) {
		void (*done)(struct pool_job *) = job->done;  /* run() may free job */
		job->run(job, NULL);
		if (done)
			done(job);
	}
}

static void free_run(struct pool_job *j, struct pool_worker *w)
{
	(void)w;
	dlv_destroy((struct dlv *)((char *)j - offsetof(struct dlv, free_job)));
}

/* Drops a reference. The last one frees d: at once on a worker, else
 * (the loop thread) in a job of the pool's own, since freeing unmaps the
 * data region, frees the device slots (which may wait for the device) and
 * the order's tables (nblocks * 8 bytes each). */
static void dlv_unref(struct dlv *d, bool on_worker)
{
	/* acq_rel: the last owner sees every write the others made */
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (on_worker) {
		dlv_destroy(d);
		return;
	}
	d->free_job = (struct pool_job){.run = free_run};  /* src NULL: first in line */
	dlv_submit(d, &d->free_job);
}

static int dlv_pool_submit(void *arg, struct pool_job *job)
{
	return pool_try_submit(arg, job);
}

#ifdef FEEDD_TEST_SEAMS
/* Test builds only (FEED_TEST_SEAMS): with FEEDD_TEST_ORDER_BLOCKS=N, a
 * block-window stream's order counts N blocks: empty ones, then the
 * dataset's own. Its samples are the dataset's, in an order that is a
 * true block-window order over N blocks, so laying an epoch out costs
 * what it costs a dataset of N blocks (the loop-latency test's 2^24
 * blocks, without packing 2^24 of them). The empty blocks lead so that
 * their entries are calloc's zero pages: making the padded table here,
 * on the loop, costs nothing until an epoch is laid out over it. */
static int seam_order_blocks(struct dlv *d, struct sched_spec *sp, struct feed_err *err)
{
	const char *v = getenv("FEEDD_TEST_ORDER_BLOCKS");
	uint64_t n = v ? strtoull(v, NULL, 10) : 0;

	if (!n || sp->ord.mode != ORD_BLOCK_WINDOW || sp->ord.eval || n <= sp->ord.nblocks ||
	    n > ORD_MAX_BLOCKS)
		return 0;
	if (!(d->seam_blocks = calloc(n + 1, sizeof(uint64_t))))
		return feed_err_set(err, -ENOMEM, "FEEDD_TEST_ORDER_BLOCKS: out of memory");
	uint64_t pad = n - sp->ord.nblocks;  /* block_first[0..pad] = 0: empty blocks */
	memcpy(d->seam_blocks + pad, sp->ord.block_first, (sp->ord.nblocks + 1) * sizeof(uint64_t));
	sp->ord.block_first = d->seam_blocks;
	sp->ord.nblocks = n;
	return 0;
}
#endif

/* A delivery with its copy of plan and lay and what it keeps of spec
 * (nothing it would own: that comes once nothing can fail), one
 * reference; NULL: out of memory. */
static struct dlv *dlv_alloc(const struct pipe_plan *plan, const struct slot_layout *lay,
			     const struct dlv_spec *spec, struct pool *pool)
{
	struct dlv *d = calloc(1, sizeof(*d));

	assert(spec->credits >= 1 && spec->credits <= DLV_MAX_CREDITS);
	assert(lay->nslots == spec->credits && lay->batch == spec->sched.ord.batch);
	if (!d || !(d->plan = malloc(sizeof(*plan))) ||
	    !(d->hdrs = calloc(lay->nslots, lay->slot_hdr_bytes))) {
		if (d)
			free(d->plan);
		free(d);
		return NULL;
	}
	memcpy(d->plan, plan, sizeof(*plan));
	d->lay = *lay;
	d->seed = spec->seed;
	d->group = spec->group;
	d->on_error = spec->on_error;
	d->limits = spec->limits;
	d->max_bad = spec->max_bad ? spec->max_bad : 1;
	d->run = spec->runner ? *spec->runner :
				(struct dlv_runner){.submit = dlv_pool_submit, .arg = pool};
	d->data.fd = -1;
	atomic_init(&d->refs, 1);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->data_mu, NULL);
	pthread_cond_init(&d->data_cv, NULL);
	return d;
}

int dlv_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	    const struct slot_layout *lay, const struct dlv_spec *spec, struct cache *cache,
	    struct pool *pool, struct dlv **ret_dlv, struct feed_err *err)
{
	assert_loop_thread();
	struct dlv *d = dlv_alloc(plan, lay, spec, pool);
	int rc;

	if (!d)
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	d->ds = ds;
	d->cache = cache;
	struct sched_spec sp = spec->sched;
#ifdef FEEDD_TEST_SEAMS
	if ((rc = seam_order_blocks(d, &sp, err)) < 0) {
		dlv_destroy(d);
		return rc;
	}
#endif
	if ((rc = sched_init(&d->sched, &sp, err)) < 0) {
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
	if (spec->mix && !(d->rows = calloc((size_t)lay->nslots * lay->batch, sizeof(d->rows[0])))) {
		dlv_destroy(d);
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	}
	d->mix = spec->mix;
	d->mix_field = spec->mix_field;
	for (uint32_t s = 0; d->mix && s < d->mix->spec.nsrc; s++) {
		d->srcs[s] = d->mix->spec.src[s].ds;
		mixt_pks_spec(d->mix, s, &d->mpk_spec[s]);
	}
	d->dev = d->dev_own = spec->dev; /* ours from here: nothing fails after */
	d->dev_ops = spec->dev_ops;
	d->on_free = spec->on_free;
	d->on_free_arg = spec->on_free_arg;
	*ret_dlv = d;
	return 0;
}

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

static struct pool_job *advance_locked(struct dlv *d);
static void submit_all(struct dlv *d, struct pool_job *list);

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
	struct pool_job *list = advance_locked(d);
	feed_mutex_unlock(&d->lock);
	while (n)
		free(dead[--n]);
	submit_all(d, list);
	return rc;
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

uint64_t dlv_batches_per_epoch(struct dlv *d)
{
	/* under the lock: a group's workers move the schedule to its next
	 * epoch while a joiner's open is answered */
	feed_mutex_lock(&d->lock);
	uint64_t n = sched_batches_per_epoch(&d->sched);
	feed_mutex_unlock(&d->lock);
	return n;
}

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

static struct feed_shm_slot *slot_header(struct dlv *d, uint32_t slot)
{
	return (struct feed_shm_slot *)(d->hdrs + (uint64_t)slot * d->lay.slot_hdr_bytes);
}

static void ring_push(struct dlv_member *m, uint64_t entry)
{
	feed_ring_put(&m->ready, &m->ready_head, entry);
	m->pending = true;
}

/* Rings the client's doorbell; ring_publish() decided that it sleeps. */
static void ring_wake(struct dlv_member *m)
{
	uint64_t one = 1;

	(void)!write(m->ready_efd, &one, sizeof(one)); /* EAGAIN: it is ringing already */
}

/* Makes m's pushed entries visible. If the client sleeps it is woken now,
 * or, with defer_wake (a plain stream's member only: it outlives the
 * lock), *defer_wake is set and the caller wakes it with ring_wake() once
 * it has nothing else to do. */
static void ring_publish(struct dlv_member *m, bool *defer_wake)
{
	m->pending = false;
	/* feed_ring.h: the slot headers before the head, then the flag */
	if (feed_ring_publish(&m->ready, m->ready_head)) {
		if (defer_wake && !m->d->group)
			*defer_wake = true;
		else
			ring_wake(m);
	}
}

/* Stops m receiving with an error its client reads from its control
 * header (after what it was sent before), and rings the loop's release
 * doorbell so the stop is logged at once. The code is stored last, with
 * release: a client that sees it sees the message (a detached member's
 * client looks at it before its queue). */
static void member_fail_locked(struct dlv_member *m, int code, const char *msg,
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
	ring_push(m, feed_ring_entry(FEED_READY_ERROR, 0));
	ring_publish(m, NULL);
	(void)!write(m->release_efd, &one, sizeof(one));
}

/* Slot s is no longer held by m (a release, a leave, a stop). */
static void member_drop_locked(struct dlv *d, struct dlv_member *m, uint32_t s)
{
	m->held &= ~(1ull << s);
	d->slots[s].members &= ~(1ull << m->idx);
	if (d->slots[s].members == 0) {
		d->slots[s].state = SLOT_FREE;
		d->free_slots[d->nfree++] = s;
	}
}

static void member_drop_all_locked(struct dlv *d, struct dlv_member *m)
{
	for (uint32_t s = 0; s < d->lay.nslots; s++)
		if (m->held & (1ull << s))
			member_drop_locked(d, m, s);
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
			member_fail_locked(m, code, msg, DLV_MEMBER_STOPPED);
	}
}

/* Positions a batch spans: batch size times world size. */
static uint64_t stride_of(const struct dlv *d)
{
	return (uint64_t)d->sched.spec.ord.batch * d->sched.spec.ord.world;
}

/* Whether position (epoch, pos) is where a member resumed at (fe, fp)
 * starts: the same, or the next epoch's start when its token was taken
 * at or past its epoch's end. */
static bool resume_point_locked(struct dlv *d, uint64_t fe, uint64_t fp, uint64_t epoch,
				uint64_t pos)
{
	if (epoch == fe && pos == fp)
		return true;
	return epoch == fe + 1 && pos == 0 &&
	       fp >= sched_batches_per_epoch(&d->sched) * stride_of(d);
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
	if (resume_point_locked(d, m->from_epoch, m->from_position, e, p))
		return true;
	snprintf(msg, sizeof(msg), "the group has no batch at this stream's resume position "
		 "(epoch %llu position %llu): its next starts at epoch %llu position %llu",
		 (unsigned long long)m->from_epoch, (unsigned long long)m->from_position,
		 (unsigned long long)e, (unsigned long long)p);
	member_fail_locked(m, -ESPIPE, msg, DLV_MEMBER_STOPPED);
	return false;
}

/* Hands built batch j to every active member. */
static void publish_one_locked(struct dlv *d, struct dlv_job *j, uint64_t now)
{
	struct feed_shm_slot *h = slot_header(d, j->slot);
	uint32_t s = j->slot, gen = d->slots[s].gen;
	uint64_t mask = 0;

	h->publish_ns = now;
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (!m || m->state != DLV_MEMBER_ACTIVE || !member_wants_locked(d, m, j))
			continue;
		memcpy((uint8_t *)m->ctl.map + layout_hdr_off(&d->lay, s), h, d->lay.slot_hdr_bytes);
		ring_push(m, feed_ring_entry(s, gen));
		if (!m->held)
			m->releases++;  /* holding from now: idle from now */
		m->held |= 1ull << s;
		mask |= 1ull << i;
		m->batches++;
		d->st.delivered++;
		m->samples += h->nsamples;  /* what was built: less any dropped */
		m->bytes += j->bytes;
		if (j->pos.last_of_epoch)
			ring_push(m, feed_ring_entry(FEED_READY_EPOCH_END, (uint32_t)j->pos.epoch));
		if (j->pos.last_of_stream ||
		    (j->pos.last_of_epoch && m->epochs && j->pos.epoch + 1 >= m->epochs)) {
			ring_push(m, feed_ring_entry(FEED_READY_STREAM_END, 0));
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
static void publish_ready_locked(struct dlv *d, bool *defer_wake)
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
			ring_publish(d->members[i], defer_wake);
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
	member_drop_locked(d, m, slot);
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
		member_fail_locked(m, -EPROTO, msg, DLV_MEMBER_STOPPED);
		member_drop_all_locked(d, m);
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

static void reclaim_locked(struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++)
		if (d->members[i])
			reclaim_member_locked(d, d->members[i]);
}

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
 * need: its job_run() calls advance() after publishing, and that reclaims
 * whatever was released meanwhile, without waking the loop. */
static void want_release_locked(struct dlv *d)
{
	for (uint32_t i = 0; i < DLV_MAX_MEMBERS; i++) {
		struct dlv_member *m = d->members[i];
		if (!m || !m->held || m->state == DLV_MEMBER_STOPPED)
			continue;
		/* feed_ring.h: the flag, a fence, and a re-check of the head;
		 * advance_locked() re-checks again after pumping */
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
			publish_ready_locked(d, NULL);
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

static void submit_all(struct dlv *d, struct pool_job *list)
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
static struct pool_job *advance_locked(struct dlv *d)
{
	struct pool_job *list = NULL;

	for (;;) {
		reclaim_locked(d);
		list = list_join(list, pump_locked(d));
		if (!d->want_recheck)
			break;
		d->want_recheck = false;
		if (!released_since_locked(d))
			break;
	}
	return list;
}

static void advance(struct dlv *d)
{
	feed_mutex_lock(&d->lock);
	struct pool_job *list = advance_locked(d);
	feed_mutex_unlock(&d->lock);
	submit_all(d, list);
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
		.hdr = slot_header(d, j->slot),
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
		publish_ready_locked(d, &wake);
	feed_mutex_unlock(&d->lock);
	if (rc == 0)
		advance(d);
	/* The reader's wake-up comes last: a reader on this CPU then runs as
	 * soon as we are done, not while we reclaim and schedule. Only a plain
	 * stream defers it (its member lives as long as d, which we hold). */
	if (wake)
		ring_wake(d->solo);
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
	struct pool_job *list = advance_locked(d);
	feed_mutex_unlock(&d->lock);
	while (n)
		free(dead[--n]);
	submit_all(d, list);
	dlv_unref(d, true);
}

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

	if (!group_next_locked(d, &ge, &gp) || resume_point_locked(d, fe, fp, ge, gp)) {
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
	*index = fp / stride_of(d);
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
	struct pool_job *list = rc == 0 && d->started ? advance_locked(d) : NULL;
	feed_mutex_unlock(&d->lock);
	if (rc == 0)  /* its reader's wait counts for the delivery (loop thread, like leave) */
		pool_source_watch(d->src, idx, &((struct feed_shm_rel *)m->rel.map)->client_waiting);
	submit_all(d, list);
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
				ring_push(d->members[i], feed_ring_entry(FEED_READY_STREAM_END, 0));
				ring_publish(d->members[i], NULL);
			}
		feed_mutex_unlock(&d->lock);
		return;
	}
	feed_mutex_unlock(&d->lock);
	advance(d);
}

void dlv_member_on_release(struct dlv_member *m)
{
	assert_loop_thread();
	uint64_t count;

	(void)!read(m->release_efd, &count, sizeof(count)); /* clear; we re-check anyway */
	advance(m->d);
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
		member_drop_all_locked(d, m);
		d->members[m->idx] = NULL;
		d->nmembers--;
		m->added = false;
		m->state = DLV_MEMBER_STOPPED;
		if (d->group)
			list = advance_locked(d);  /* the others go on */
	}
	feed_mutex_unlock(&d->lock);
	submit_all(d, list);
	if (d->group)  /* nobody rings it after the lock: it is no member any more */
		member_free(m);
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
			member_drop_locked(d, m, s);
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
	reclaim_locked(d);  /* a release waiting in the ring is no idleness */
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
		member_fail_locked(m, -ENOLINK, msg, DLV_MEMBER_DETACHED);
		detached |= 1ull << i;
		n++;
	}
	if (n)
		list = advance_locked(d);
	feed_mutex_unlock(&d->lock);
	for (uint64_t b = detached; b; b &= b - 1)  /* no longer waited for */
		pool_source_watch(d->src, (unsigned)__builtin_ctzll(b), NULL);
	submit_all(d, list);
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
