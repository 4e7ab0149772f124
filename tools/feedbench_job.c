/*
 * feedbench_job.c: one feedbench job, shaped like a trainer's input loop:
 * connect, open a stream, then feed_next() / touch every byte / release /
 * optional step, until the stream ends. Runs in its own process (one per
 * --jobs), single-threaded; allocates only before the loop.
 *
 * How a call is classified: feed_next(st, 0) first. If it returns a batch,
 * one was ready: the fast path, timed around that call alone. If it says
 * -ETIMEDOUT nothing was ready, and feed_next(st, timeout) sleeps on the
 * doorbell: its wake-up latency is (return time) - feed_batch_publish_ns(),
 * both CLOCK_MONOTONIC, and the time from the first call to the return is
 * stall. The poll call does not enter the kernel or set the waiting flag
 * (client_stream.c), so it costs what a ready dequeue costs.
 *
 * Timing starts once the first batch is consumed (opening and the
 * daemon's first build are excluded, as bench/dataloader_baseline.py
 * excludes its workers' start-up) and ends after the last release; the
 * batches inside that window (the second to the last) are what samples/s,
 * MB/s, stall and the latencies count.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedbench.h"

#define FB_BARRIER_MS 30000      /* longest wait for the other jobs to open */

/* The loop's state: counters and the preallocated latency arrays. */
struct fb_run {
	const struct fb_opts *o;
	uint32_t job;
	struct fb_result *res;
	struct fb_verify *vset;
	struct feed_conn *conn;
	struct feed_stream *st;
	uint64_t *fast_ns, *wake_ns;  /* one entry per batch at most */
	uint64_t *own_ns;             /* per batch: feed_next to release, no step */
	uint64_t own_n;               /* entries of own_ns */
	uint64_t cap;                 /* entries of each */
	uint64_t epoch, index;        /* the next batch expected */
	uint64_t bpe;                 /* batches per epoch for this rank */
	uint64_t t_first, t_last;     /* first batch consumed, last batch consumed */
	uint64_t cpu_first;           /* this process's CPU clock at t_first */
	uint64_t stall_ns;
};

static int fb_lib_fail(const struct fb_run *r, const char *what, int code)
{
	const char *m = feed_errmsg(r->conn);

	fprintf(stderr, "feedbench: job %u: %s: %s%s%s\n", r->job, what, feed_strerror(code),
		*m ? ": " : "", m);
	return FB_EXIT_FAIL;
}

/* Waits until every job has opened (or failed to), so they run together.
 * A job that died before arriving only costs FB_BARRIER_MS. */
static void fb_barrier(struct fb_shared *sh)
{
	struct timespec pause = {0, 200000};
	uint64_t end = fb_now_ns() + FB_BARRIER_MS * 1000000ull;

	/* relaxed: only a count; the jobs share no data through it */
	atomic_fetch_add_explicit(&sh->arrived, 1, memory_order_relaxed);
	while (atomic_load_explicit(&sh->arrived, memory_order_relaxed) < sh->jobs &&
	       fb_now_ns() < end)
		nanosleep(&pause, NULL);
}

static int fb_open(struct fb_run *r)
{
	const struct fb_opts *o = r->o;
	struct feed_stream_opts so = {0};
	struct feed_stats stats;
	int rc;

	if ((rc = feed_conn_new(&r->conn)) < 0 || (rc = feed_conn_open(r->conn, o->socket)) < 0)
		return fb_lib_fail(r, "connect", rc);
	if ((rc = feed_stats(r->conn, &stats)) < 0)
		return fb_lib_fail(r, "stats", rc);
	r->res->daemon_workers = stats.workers;
	so.dataset = o->dataset;
	so.batch = o->batch;
	so.credits = o->wake ? 1 : o->credits;
	so.epochs = o->epochs;
	so.pad_last = o->pad_last;
	so.seed = o->seed;
	so.order = o->order;
	so.window = o->window;
	so.rank = r->res->rank;
	so.world = r->res->world;
	so.nodes = o->nodes;
	so.node = o->node;
	so.node_deal = o->node_deal;
	so.pipeline = o->pipeline;
	so.group = o->group;
	so.on_error = o->on_error;
	so.max_bad = o->max_bad;
	so.reconnect_ms = -1; /* a benchmark reports a lost daemon, it does not hide it */
	if ((rc = feed_stream_open(r->conn, &so, &r->st)) < 0)
		return fb_lib_fail(r, "open stream", rc);
	const struct feed_stream_info *in = feed_stream_info(r->st);
	r->bpe = in->batches_per_epoch;
	r->res->credits = in->credits;
	/* where it starts: 0/0, or where a group's late joiner comes in */
	r->res->start_epoch = r->epoch = in->start_epoch;
	r->res->start_batch = r->index = in->start_batch;
	snprintf(r->res->note, sizeof(r->res->note), "%s", in->note);
	snprintf(r->res->pipeline, sizeof(r->res->pipeline), "%s", in->pipeline);
	r->cap = r->bpe * o->epochs + 1;
	r->fast_ns = malloc(r->cap * sizeof(uint64_t));
	r->wake_ns = malloc(r->cap * sizeof(uint64_t));
	r->own_ns = malloc(r->cap * sizeof(uint64_t));
	if (!r->fast_ns || !r->wake_ns || !r->own_ns) {
		fprintf(stderr, "feedbench: job %u: out of memory for %" PRIu64 " latencies\n",
			r->job, r->cap);
		return FB_EXIT_FAIL;
	}
	return 0;
}

/* Reads every byte of every field into the job's checksum (with
 * --no-touch, only finds each field's view, as any reader must). */
static int fb_touch(struct fb_run *r, struct feed_batch *b, uint64_t *ret_bytes)
{
	const struct feed_stream_info *in = feed_stream_info(r->st);
	uint64_t h = 0, bytes = 0;

	for (uint32_t f = 0; f < in->num_fields; f++) {
		struct feed_view v;
		int rc = feed_batch_field(b, f, &v);
		if (rc < 0)
			return fb_lib_fail(r, "batch field", rc);
		if (!r->o->no_touch)
			h = fb_hash(h + f, v.data, v.bytes);
		bytes += v.bytes;
	}
	r->res->checksum = fb_combine(r->res->checksum, h);
	*ret_bytes = bytes;
	return 0;
}

/* --verify's checks of one batch, beyond what fb_verify_batch() records. */
static int fb_check_batch(struct fb_run *r, struct feed_batch *b)
{
	char msg[FB_MSG_MAX];
	uint64_t e = feed_batch_epoch(b), i = feed_batch_index(b);

	if (e != r->epoch || i != r->index) {
		fprintf(stderr, "feedbench: job %u: verify: got epoch %" PRIu64 " batch %" PRIu64
			", expected epoch %" PRIu64 " batch %" PRIu64 "\n", r->job, e, i, r->epoch,
			r->index);
		return FB_EXIT_FAIL;
	}
	const uint64_t *rep = NULL;
	feed_batch_replaced(b, &rep);
	if (fb_verify_batch(r->vset, r->res->rank, e, i, feed_batch_samples(b), feed_batch_size(b),
			    feed_batch_padded(b), rep, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "feedbench: job %u: verify: %s\n", r->job, msg);
		return FB_EXIT_FAIL;
	}
	return 0;
}

/* End of an epoch: with --verify, it must have held every batch. */
static int fb_epoch_end(struct fb_run *r)
{
	if (r->vset && r->index != r->bpe) {
		fprintf(stderr, "feedbench: job %u: verify: epoch %" PRIu64 " ended after %" PRIu64
			" batches, the stream announced %" PRIu64 "\n", r->job, r->epoch, r->index,
			r->bpe);
		r->res->local_ok = false;
	}
	r->epoch++;
	r->index = 0;
	r->res->epochs++;
	return 0;
}

/* One batch in hand: verify, touch, release. */
static int fb_consume(struct fb_run *r, struct feed_batch *b)
{
	uint64_t bytes = 0;
	uint32_t n = feed_batch_size(b);
	int rc;

	if (r->vset && r->res->local_ok && fb_check_batch(r, b))
		r->res->local_ok = false; /* keep reading: the stream must still end */
	if ((rc = fb_touch(r, b, &bytes)))
		return rc;
	uint64_t replaced = feed_batch_replaced(b, NULL); /* b is gone once released */
	if ((rc = feed_release(b)) < 0)
		return fb_lib_fail(r, "release", rc);
	r->index++;
	r->res->batches++;
	r->res->samples += n;
	r->res->replaced += replaced;
	r->res->bytes += bytes;
	if (r->t_first) {
		r->res->timed_samples += n;
		r->res->timed_bytes += bytes;
	}
	return 0;
}

/* One feed_next() as described at the top. Returns 0 with *ret set, a
 * FEED_END_* value, or a negative code. */
static int fb_next(struct fb_run *r, struct feed_batch **ret)
{
	uint64_t t0 = fb_now_ns();
	int rc = feed_next(r->st, 0, ret);
	uint64_t t1 = fb_now_ns();

	if (rc == 0 && r->t_first && r->res->fast_calls < r->cap)
		r->fast_ns[r->res->fast_calls++] = t1 - t0;
	if (rc != -ETIMEDOUT)
		return rc;
	rc = feed_next(r->st, r->o->timeout_ms, ret);
	uint64_t t2 = fb_now_ns();
	if (rc != 0)
		return rc;
	if (r->t_first) {
		uint64_t pub = feed_batch_publish_ns(*ret);
		r->stall_ns += t2 - t0;
		if (r->res->wake_calls < r->cap)
			r->wake_ns[r->res->wake_calls++] = t2 > pub ? t2 - pub : 0;
	}
	return 0;
}

static int fb_loop(struct fb_run *r)
{
	for (;;) {
		struct feed_batch *b;
		uint64_t t0 = fb_now_ns();
		int rc = fb_next(r, &b);
		if (rc == FEED_END_OF_STREAM)
			return 0;
		if (rc == FEED_END_OF_EPOCH) {
			fb_epoch_end(r);
			continue;
		}
		if (rc < 0)
			return fb_lib_fail(r, "feed_next", rc);
		if ((rc = fb_consume(r, b)))
			return rc;
		r->t_last = fb_now_ns();
		if (!r->t_first) {
			r->t_first = r->t_last; /* the timed window starts here */
			r->cpu_first = fb_cpu_ns();
		} else if (r->own_n < r->cap) {
			r->own_ns[r->own_n++] = r->t_last - t0;
		}
		if (r->o->step_ms > 0)
			fb_spin_ns((uint64_t)(r->o->step_ms * 1e6));
	}
}

static void fb_summarise(struct fb_run *r)
{
	struct fb_result *res = r->res;

	res->wall_s = (double)(r->t_last - r->t_first) * 1e-9;
	res->cpu_s = r->t_first ? (double)(fb_cpu_ns() - r->cpu_first) * 1e-9 : 0.0;
	res->stall_s = (double)r->stall_ns * 1e-9;
	res->p50_us = fb_percentile_us(r->fast_ns, res->fast_calls, 0.50);
	res->p99_us = fb_percentile_us(r->fast_ns, res->fast_calls, 0.99);
	res->wake_p50_us = fb_percentile_us(r->wake_ns, res->wake_calls, 0.50);
	res->wake_p99_us = fb_percentile_us(r->wake_ns, res->wake_calls, 0.99);
	res->own_p50_us = fb_percentile_us(r->own_ns, r->own_n, 0.50);
	res->clock_ns = fb_clock_cost_ns();
}

int fb_job_run(const struct fb_opts *o, uint32_t j, struct fb_shared *sh, struct fb_result *res,
	       struct fb_verify *vset)
{
	struct fb_run r = {.o = o, .job = j, .res = res, .vset = vset};
	int rc;

	memset(res, 0, sizeof(*res));
	res->rank = o->node * (o->world ? o->jobs : 1) + (o->world ? j : 0);
	res->world = o->nodes * (o->world ? o->jobs : 1);
	res->local_ok = true;
	rc = fb_open(&r);
	fb_barrier(sh);
	if (rc == 0 && (rc = fb_loop(&r)) == 0) {
		if (vset && res->epochs != o->epochs) {
			fprintf(stderr, "feedbench: job %u: verify: the stream ended after %" PRIu64
				" epochs, %" PRIu64 " were asked for\n", j, res->epochs, o->epochs);
			res->local_ok = false;
		}
		fb_summarise(&r);
		res->done = true;
	}
	if (r.st) {
		int c = feed_stream_close(r.st);
		if (c < 0 && rc == 0)
			rc = fb_lib_fail(&r, "close stream", c);
	}
	feed_disconnect(r.conn);
	free(r.fast_ns);
	free(r.wake_ns);
	free(r.own_ns);
	return rc;
}
