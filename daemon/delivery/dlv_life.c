/*
 * dlv_life.c: a delivery's lifetime: creation (dlv_new), its references and
 * its teardown (the last one frees it, on a worker when it is one).
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
/* ---- lifetime ---- */

void dlv_member_free(struct dlv_member *m)
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
	dlv_member_free(d->solo);
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
void dlv_submit(struct dlv *d, struct pool_job *job)
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
void dlv_unref(struct dlv *d, bool on_worker)
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
