/*
 * stream.c: delivery of one stream (see stream.h): region layout, the
 * ownership table, the schedule, publishing in batch order and reading
 * the untrusted release ring. Building a batch is batch.c's job.
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "feed_shm.h"
#include "pool.h"
#include "stream_impl.h"

/* ---- layout ---- */

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

/* Computes every offset and size from the plan's output schema. */
static int layout_plan(struct stream *s, struct feed_err *err)
{
	const struct fmt_schema *out = &s->plan->out;
	uint64_t pos = 0, hdr = sizeof(struct feed_shm_slot) + 8ull * s->spec.batch;

	if (out->nfields > FEED_SHM_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "pipeline output has %u fields, at most %d",
				    out->nfields, FEED_SHM_MAX_FIELDS);
	for (uint32_t f = 0; f < out->nfields; f++) {
		const struct fmt_field *fd = &out->fields[f];
		if (fd->rank + 1 + fd->variable > FEED_SHM_MAX_RANK)
			return feed_err_set(err, -EINVAL, "field '%s': rank %u too high", fd->name,
					    fd->rank);
		s->field_off[f] = pos;
		pos = feed_shm_align(pos + (uint64_t)s->spec.batch * fd->max_bytes);
		if (fd->variable) {
			s->var_off[f] = hdr;
			hdr += 8ull * (s->spec.batch + 1);
		}
	}
	s->slot_bytes = pos ? pos : FEED_SHM_ALIGN;
	s->slot_hdr_bytes = feed_shm_align(hdr);
	s->nslots = s->spec.credits;
	/* Unconsumed ready entries: at most one per held slot plus one epoch
	 * marker per batch, plus the end marker (feed_shm.h). */
	s->ring_cap = pow2_at_least(2 * s->nslots + 2);
	s->rel_cap = pow2_at_least(2 * s->nslots);
	s->ring_off = feed_shm_align(sizeof(struct feed_shm_ctl));
	s->slots_off = feed_shm_align(s->ring_off + 8ull * s->ring_cap);
	s->ctl_bytes = s->slots_off + (uint64_t)s->nslots * s->slot_hdr_bytes;
	s->data_bytes = (uint64_t)s->nslots * s->slot_bytes;
	s->rel_off = feed_shm_align(sizeof(struct feed_shm_rel));
	s->rel_bytes = s->rel_off + 8ull * s->rel_cap;
	if (s->data_bytes > (1ull << 40))
		return feed_err_set(err, -EINVAL, "%u slots of %llu bytes is too large", s->nslots,
				    (unsigned long long)s->slot_bytes);
	return 0;
}

static void headers_init(struct stream *s)
{
	struct feed_shm_ctl *c = s->ctl.map;
	struct feed_shm_rel *r = s->rel.map;

	c->magic = FEED_SHM_CTL_MAGIC;
	c->version = FEED_SHM_VERSION;
	c->ctl_bytes = s->ctl.size;
	c->data_bytes = s->data.size;
	c->rel_bytes = s->rel.size;
	c->nslots = s->nslots;
	c->ring_cap = s->ring_cap;
	c->ring_off = s->ring_off;
	c->slots_off = s->slots_off;
	c->slot_hdr_bytes = s->slot_hdr_bytes;
	c->slot_bytes = s->slot_bytes;
	c->nfields = s->plan->out.nfields;
	c->batch = s->spec.batch;
	atomic_init(&c->ready_head, 0);
	r->magic = FEED_SHM_REL_MAGIC;
	r->version = FEED_SHM_VERSION;
	r->ring_cap = s->rel_cap;
	r->ring_off = s->rel_off;
	atomic_init(&r->rel_head, 0);
	atomic_init(&r->client_waiting, 0);
	atomic_init(&r->daemon_waiting, 0);
	s->ready_ring = (uint64_t *)((uint8_t *)s->ctl.map + s->ring_off);
	s->rel_ring = (_Atomic uint64_t *)((uint8_t *)s->rel.map + s->rel_off);
}

static int regions_make(struct stream *s, struct feed_err *err)
{
	int rc;

	if ((rc = region_create(&s->ctl, "feedd-control", s->ctl_bytes, err)) < 0 ||
	    (rc = region_create(&s->data, "feedd-data", s->data_bytes, err)) < 0 ||
	    (rc = region_create(&s->rel, "feedd-release", s->rel_bytes, err)) < 0)
		return rc;
	headers_init(s);
	if ((rc = region_seal(&s->ctl, REGION_SEALS_CONTROL, err)) < 0 ||
	    (rc = region_seal(&s->data, REGION_SEALS_SHARED, err)) < 0 ||
	    (rc = region_seal(&s->rel, REGION_SEALS_SHARED, err)) < 0)
		return rc;
	s->ready_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->release_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->ready_efd < 0 || s->release_efd < 0)
		return feed_err_set(err, -errno, "stream: eventfd: %s", strerror(errno));
	return 0;
}

static void stream_destroy(struct stream *s)
{
	region_free(&s->ctl);
	region_free(&s->data);
	region_free(&s->rel);
	if (s->ready_efd >= 0)
		close(s->ready_efd);
	if (s->release_efd >= 0)
		close(s->release_efd);
	batch_order_fini(s);
	free(s->slots);
	free(s->jobs);
	free(s->plan_own);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void stream_unref(struct stream *s)
{
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		stream_destroy(s);
}

static void ring_push(struct stream *s, uint64_t entry);
static void ring_publish(struct stream *s, bool *defer_wake);

int stream_new(const struct fmt_dataset *ds, const struct pipe_plan *plan,
	       const struct stream_spec *spec, struct cache *cache, struct pool *pool,
	       struct stream **ret_stream, struct feed_err *err)
{
	struct stream *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	s->ds = ds;
	s->plan = s->plan_own = malloc(sizeof(*plan));
	if (!s->plan_own) {
		free(s);
		return feed_err_set(err, -ENOMEM, "stream: out of memory");
	}
	memcpy(s->plan_own, plan, sizeof(*plan));
	s->spec = *spec;
	s->cache = cache;
	s->pool = pool;
	s->ready_efd = s->release_efd = -1;
	atomic_init(&s->refs, 1);
	pthread_mutex_init(&s->lock, NULL);
	if ((rc = layout_plan(s, err)) < 0 || (rc = batch_order_init(s, err)) < 0 ||
	    (rc = regions_make(s, err)) < 0)
		goto fail;
	s->slots = calloc(s->nslots, sizeof(*s->slots));
	s->jobs = calloc(s->nslots, sizeof(*s->jobs));
	if (!s->slots || !s->jobs) {
		rc = feed_err_set(err, -ENOMEM, "stream: out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < s->nslots; i++) {
		s->free_slots[s->nfree++] = s->nslots - 1 - i;
		s->jobs[i].stream = s;
		s->jobs[i].slot = i;
	}
	if (s->lead_epoch_end)
		ring_push(s, feed_ring_entry(FEED_READY_EPOCH_END, (uint32_t)s->lead_epoch));
	if (s->lead_stream_end)
		ring_push(s, feed_ring_entry(FEED_READY_STREAM_END, 0));
	if (s->lead_epoch_end)
		ring_publish(s, NULL);
	*ret_stream = s;
	return 0;
fail:
	stream_destroy(s);
	return rc;
}

void stream_fds(const struct stream *s, struct stream_fds *ret_fds)
{
	*ret_fds = (struct stream_fds){.ctl = s->ctl.fd, .data = s->data.fd, .rel = s->rel.fd,
				       .ready = s->ready_efd, .release = s->release_efd};
}

uint64_t stream_batches_per_epoch(const struct stream *s)
{
	return ord_batches_per_epoch(&s->ep[s->spec.start_epoch & 1].ord);
}

uint64_t stream_start_epoch(const struct stream *s)
{
	return s->spec.start_epoch;
}

uint64_t stream_shm_bytes(const struct stream *s)
{
	return s->ctl.size + s->data.size + s->rel.size;
}

/* ---- publishing (worker threads, under s->lock) ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct feed_shm_slot *stream_slot_header(struct stream *s, uint32_t slot)
{
	return (struct feed_shm_slot *)((uint8_t *)s->ctl.map + s->slots_off +
					(uint64_t)slot * s->slot_hdr_bytes);
}

static void ring_push(struct stream *s, uint64_t entry)
{
	s->ready_ring[s->ready_head & (s->ring_cap - 1)] = entry;
	s->ready_head++;
}

/* Makes everything pushed visible and rings the client if it sleeps. */
static void ring_wake(struct stream *s)
{
	uint64_t one = 1;

	(void)!write(s->ready_efd, &one, sizeof(one));
}

/* Makes the pushed entries visible. If the client sleeps it is woken now,
 * or, with defer_wake, *defer_wake is set and the caller wakes it with
 * ring_wake() once it has nothing else to do. */
static void ring_publish(struct stream *s, bool *defer_wake)
{
	struct feed_shm_ctl *c = s->ctl.map;
	struct feed_shm_rel *r = s->rel.map;

	/* release: the entries and slot headers before the head */
	atomic_store_explicit(&c->ready_head, s->ready_head, memory_order_release);
	/* seq_cst: pairs with the client's "set waiting, fence, re-check head" */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_exchange_explicit(&r->client_waiting, 0, memory_order_relaxed)) {
		if (defer_wake)
			*defer_wake = true;
		else
			ring_wake(s);
	}
}

/* Ends the stream with an error the client reads from the control header. */
void stream_fail_locked(struct stream *s, int code, const char *msg)
{
	struct feed_shm_ctl *c = s->ctl.map;

	if (s->error)
		return;
	s->error = code;
	c->error_code = code;
	snprintf(c->error_msg, sizeof(c->error_msg), "%s", msg);
	ring_push(s, feed_ring_entry(FEED_READY_ERROR, 0));
	ring_publish(s, NULL);
	/* and the loop, which logs the stop when its release doorbell rings */
	uint64_t one = 1;
	(void)!write(s->release_efd, &one, sizeof(one));
}

/* Publishes every built batch that is next in order. */
static void publish_ready_locked(struct stream *s, bool *defer_wake)
{
	bool any = false;

	while (s->pub_seq < s->sched_seq) {
		struct stream_job *j = s->seq_job[s->pub_seq % s->nslots];
		if (!j || !j->built)
			break;
		s->seq_job[s->pub_seq % s->nslots] = NULL;
		j->built = false;
		s->slots[j->slot].state = SLOT_CLIENT;
		stream_slot_header(s, j->slot)->publish_ns = now_ns();
		ring_push(s, feed_ring_entry(j->slot, s->slots[j->slot].gen));
		s->st.batches++;
		s->st.samples += j->nsamples;
		s->st.bytes += j->bytes;
		if (j->last_of_epoch)
			ring_push(s, feed_ring_entry(FEED_READY_EPOCH_END, (uint32_t)j->epoch));
		if (j->last_of_stream)
			ring_push(s, feed_ring_entry(FEED_READY_STREAM_END, 0));
		s->pub_seq++;
		any = true;
	}
	if (any)
		ring_publish(s, defer_wake);
}

/* ---- releases (untrusted input) ---- */

static void release_one_locked(struct stream *s, uint64_t entry)
{
	uint32_t slot = feed_ring_slot(entry), gen = feed_ring_gen(entry);

	if (slot >= s->nslots || s->slots[slot].state != SLOT_CLIENT || s->slots[slot].gen != gen) {
		s->st.bad_releases++;
		return;
	}
	s->slots[slot].state = SLOT_FREE;
	s->free_slots[s->nfree++] = slot;
}

/* Reads the release ring from our private tail up to its head. */
static void reclaim_locked(struct stream *s)
{
	struct feed_shm_rel *r = s->rel.map;
	uint64_t head = atomic_load_explicit(&r->rel_head, memory_order_acquire);

	if (head - s->rel_tail > s->rel_cap) {
		stream_fail_locked(s, -EPROTO,
				  "release queue head moved past its capacity: stream stopped");
		return;
	}
	while (s->rel_tail != head) {
		/* read once: the client may rewrite the slot under us */
		uint64_t e = atomic_load_explicit(&s->rel_ring[s->rel_tail & (s->rel_cap - 1)],
						  memory_order_relaxed);
		release_one_locked(s, e);
		s->rel_tail++;
	}
}

/* ---- scheduling ---- */

static void job_run(struct pool_job *pj, struct pool_worker *w);

/* Hands free slots to the next batches; returns jobs to submit in *ret. */
static struct pool_job *pump_locked(struct stream *s)
{
	struct pool_job *list = NULL;

	while (!s->closing && !s->error && s->nfree > 0 && !s->sched_done) {
		struct stream_job *j;
		if (batch_next_locked(s, &j) < 0)
			break;
		j->seq = s->sched_seq++;
		s->seq_job[j->seq % s->nslots] = j;
		s->slots[j->slot].state = SLOT_BUILDING;
		s->slots[j->slot].gen++;
		j->base.run = job_run;
		j->base.done = NULL;
		j->base.next = list;
		list = &j->base;
		atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
	}
	if (s->nfree == 0 && s->pub_seq == s->sched_seq && !s->sched_done && !s->closing &&
	    !s->error) {
		/* Out of credits and nothing in flight: ask the client to ring when
		 * it releases. While a batch is still being built there is no need:
		 * its job_run() calls advance() after publishing, and that reclaims
		 * whatever the client released meanwhile, without waking the loop. */
		struct feed_shm_rel *r = s->rel.map;
		atomic_store_explicit(&r->daemon_waiting, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		s->want_recheck = true;
	}
	return list;
}

static void submit_all(struct stream *s, struct pool_job *list)
{
	while (list) {
		struct pool_job *next = list->next;
		pool_submit(s->pool, list);
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
static void advance(struct stream *s)
{
	struct pool_job *list = NULL;
	struct feed_shm_rel *r = s->rel.map;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		reclaim_locked(s);
		list = list_join(list, pump_locked(s));
		if (!s->want_recheck)
			break;
		s->want_recheck = false;
		if (atomic_load_explicit(&r->rel_head, memory_order_acquire) == s->rel_tail)
			break;
	}
	pthread_mutex_unlock(&s->lock);
	submit_all(s, list);
}

static void job_run(struct pool_job *pj, struct pool_worker *w)
{
	struct stream_job *j = (struct stream_job *)pj;
	struct stream *s = j->stream;
	struct feed_err err = {0};
	bool wake = false;
	int rc = 0;

	if (atomic_load_explicit(&s->closed_flag, memory_order_relaxed)) {
		batch_job_done(s, j);
		stream_unref(s);
		return;
	}
	rc = batch_build(s, j, w, &err);
	pthread_mutex_lock(&s->lock);
	batch_job_done(s, j);
	if (rc < 0)
		stream_fail_locked(s, rc, err.msg);
	else
		j->built = true;
	if (!s->error && !s->closing)
		publish_ready_locked(s, &wake);
	pthread_mutex_unlock(&s->lock);
	if (rc == 0)
		advance(s);
	/* The reader's wake-up comes last: a reader on this CPU then runs as
	 * soon as we are done, not while we reclaim and schedule. */
	if (wake)
		ring_wake(s);
	stream_unref(s);
}

/* ---- loop thread ---- */

void stream_start(struct stream *s)
{
	advance(s);
}

void stream_on_release(struct stream *s)
{
	uint64_t count;

	(void)!read(s->release_efd, &count, sizeof(count)); /* clear; we re-check anyway */
	advance(s);
}

void stream_close(struct stream *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	pthread_mutex_unlock(&s->lock);
	atomic_store_explicit(&s->closed_flag, true, memory_order_relaxed);
	stream_unref(s);
}

void stream_stats(struct stream *s, struct stream_stats *ret_stats)
{
	pthread_mutex_lock(&s->lock);
	*ret_stats = s->st;
	ret_stats->credits_in_use = s->nslots - s->nfree;
	ret_stats->error = s->error;
	/* ours alone to write (sealed FUTURE_WRITE), set once under the lock */
	snprintf(ret_stats->error_msg, sizeof(ret_stats->error_msg), "%s",
		 s->error ? ((struct feed_shm_ctl *)s->ctl.map)->error_msg : "");
	pthread_mutex_unlock(&s->lock);
}
