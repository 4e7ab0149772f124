/*
 * client_incarnation.c: a stream's incarnations (its position and resume
 * tokens are client_resume.c's): after a daemon restart the stream reconnects, reopens at
 * its position and adopts the new regions as its next incarnation, while
 * the earlier one stays mapped until the caller has released every batch
 * from it (then feed_next()'s thread unmaps it: st_reap).
 *
 * Threads: st_reopen and everything here on feed_next()'s thread, which
 * alone changes the current incarnation; feed_release() on other threads
 * reads it (st->cur, published with release) and takes st->rel_lock,
 * under which st_adopt swaps it. Nothing else happens under that lock:
 * the descriptors are closed, the old regions unmapped and its device
 * slots closed (CUDA driver calls) after it is dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_stream.h"
#include "feed_lock.h"

/* n's schema is st's: the same fields, dtypes, shapes and batch. */
static bool st_same_schema(const struct feed_stream *st, const struct feed_stream *n)
{
	const struct feed_stream_info *a = &st->info, *b = &n->info;
	bool same = a->num_fields == b->num_fields && n->batch == st->batch;

	for (uint32_t f = 0; same && f < a->num_fields; f++)
		same = a->fields[f].dtype == b->fields[f].dtype &&
		       a->fields[f].variable == b->fields[f].variable &&
		       a->fields[f].rank == b->fields[f].rank &&
		       !memcmp(a->fields[f].shape, b->fields[f].shape,
			       sizeof(a->fields[f].shape[0]) * a->fields[f].rank);
	return same;
}

/* Whether n, a group member reopened for st, starts where st stands: a
 * group shares one sequence, so a start elsewhere would lose or repeat
 * batches (node order's layouts count positions their own way: the
 * daemon checks those). */
static bool st_group_start_ok(const struct feed_stream *st, const struct feed_stream *n)
{
	if (!n->group || !st->pos_known || st->opts.order == FEED_ORDER_NODE)
		return true;
	return st_in_sequence(st, n->info.start_epoch,
			      n->info.start_batch * (uint64_t)st->batch * st->world);
}

/* Moves n's regions, ring views and descriptors into st (rel_lock). */
static void st_take_regions(struct feed_stream *st, struct feed_stream *n)
{
	st->ctl = n->ctl;
	st->ready = n->ready;
	st->tail = n->tail;
	st->nslots = n->nslots;
	st->nfields = n->nfields;
	st->stop = 0;
	atomic_store_explicit(&st->nheld, 0, memory_order_relaxed);
	st->batches = n->batches;
	st->data = n->data;
	st->slot_bytes = n->slot_bytes;
	st->slot_hdr_bytes = n->slot_hdr_bytes;
	st->slots_off = n->slots_off;
	st->rel = n->rel;
	st->release = n->release;
	st->rel_head = n->rel_head;
	memcpy(st->fd, n->fd, sizeof(st->fd));
	st->info.id = n->info.id;
	st->info.credits = n->info.credits;
	st->group = n->group;
	st->take_max = n->take_max;
	memcpy(st->dev_reason, n->dev_reason, sizeof(st->dev_reason));
	st->conn_opens = n->conn_opens;
	memcpy(st->mix_state, n->mix_state, n->mix_len);  /* the blend reopened */
	st->mix_len = n->mix_len;
	for (uint32_t i = 0; i < st->nslots; i++)
		st->batches[i].st = st;
}

/* Makes n, a fresh stream on the same connection, st's next incarnation:
 * st keeps its identity, info, options, hooks and position; the regions
 * of the old one stay mapped while batches from them are held (unmapped
 * here, after the lock, when none is). -EPROTO when n's schema differs;
 * then st is untouched (n is the caller's). n is freed on success. */
static int st_adopt(struct feed_stream *st, struct feed_stream *n)
{
	struct st_inc *old = st_inc_now(st), *inc = st_inc_now(n);
	int old_fd[ST_NFDS];

	if (!st_same_schema(st, n))
		return -EPROTO;
	feed_mutex_lock(&st->rel_lock);
	/* from now on each release of an old batch counts down */
	old->held = atomic_load_explicit(&st->nheld, memory_order_relaxed);
	memcpy(old_fd, st->fd, sizeof(old_fd));
	st_take_regions(st, n);
	inc->id = old->id + 1;
	inc->next = old;
	/* release: feed_release() on another thread sees inc whole (its ipc) */
	atomic_store_explicit(&st->cur, inc, memory_order_release);
	bool unused = old->held == 0 && old->detached == 0; /* detached copies lie in it */
	feed_mutex_unlock(&st->rel_lock);
	/* after the lock: closing, unmapping and the driver's unregistering */
	for (int i = 0; i < ST_NFDS; i++)
		close(old_fd[i]);
	if (unused)
		st_inc_unmap(st, old);
	pthread_mutex_destroy(&n->rel_lock);
	free(n->info_mem);
	free(n);
	return 0;
}

/* A new data region is mapped: the hooks that want it (pinning) see it. */
static void st_hooks_map(struct feed_stream *st)
{
	struct st_inc *inc = st_inc_now(st);

	for (int id = 0; id < CL_HOOKS; id++) {
		struct cl_hook h;
		void *self = st_hook_get(st, (enum cl_hook_id)id, &h);
		if (self && h.map)
			h.map(self, inc->map[1], inc->len[1]);
	}
}

static void st_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Failures of a reopening attempt that a later attempt may not meet: the
 * daemon not (yet) there, or gone again. An answer from feedd itself
 * (the connection still up: an Error reply) is its word and final, "no
 * such dataset" after a reload and restart among them, except -EAGAIN
 * (try again), -ESHUTDOWN (a feedd on its way out) and -ENOMEM (the
 * caller's next call tries again). */
static bool st_transient(const struct feed_conn *conn, int r)
{
	if (conn->sock >= 0)
		return r == -EAGAIN || r == -ESHUTDOWN;  /* not yet, or one stopping */
	return r == -ECONNRESET || r == -ECONNREFUSED || r == -ENOENT || r == -ENOTCONN ||
	       r == -EPIPE || r == -ETIMEDOUT || r == -EAGAIN;
}

/* Reconnecting past the caller's deadline: -ETIMEDOUT, not sticky. */
static int st_reopen_later(struct feed_stream *st, const char *last)
{
	return cl_fail(st->conn, -ETIMEDOUT, "stream %u: reconnecting to feedd at %s, not back "
		       "yet (%lld ms of reconnect_ms left): %s", st->info.id, st->conn->path,
		       (long long)(st->reopen_deadline - st_now_ms()), last);
}

/* One reopening on conn, connected: 0 with n adopted, or a failure;
 * *ret_final when that is st's answer (sticky), not one to retry. */
static int st_reopen_once(struct feed_stream *st, struct feed_stream_opts *o, bool *ret_final)
{
	struct feed_conn *conn = st->conn;
	struct feed_stream *n;
	int r = st_open(conn, o, &n);

	if (r == -EALREADY && o->group) {
		/* the group is past our position: resume there on our own
		 * (the same batches); the next reopen tries the group again */
		o->group = NULL;
		o->group_depth = 0;
		r = st_open(conn, o, &n);
	}
	*ret_final = true;
	if (r == 0 && !st_group_start_ok(st, n)) {
		uint64_t e = n->info.start_epoch, b = n->info.start_batch;
		feed_stream_close(n);
		return st_stop(st, -EPROTO, "feedd came back with group '%s' at epoch %llu "
			       "batch %llu, not at this stream's position (epoch %llu "
			       "position %llu): batches would be lost or repeated",
			       st->opts.group, (unsigned long long)e, (unsigned long long)b,
			       (unsigned long long)st->pos_epoch,
			       (unsigned long long)st->pos_position);
	}
	if (r == 0) {
		if (st_adopt(st, n) == 0) {
			/* pinned: the new data region too (else pageable, still correct) */
			st_hooks_map(st);
			st->reopen_deadline = 0;
			return 0;
		}
		feed_stream_close(n);
		return st_stop(st, -EPROTO, "feedd came back with another schema for "
			       "dataset '%s'", st->opts.dataset);
	}
	if (r != -ENOMEM && !st_transient(conn, r))
		return st_stop(st, r, "feedd came back but the stream could not be "
			       "reopened: %s", conn->errmsg);
	*ret_final = false;
	return r;
}

/* The connection's last error into buf without its "stream N: ", which
 * st_stop puts back once. */
static void st_last_error(const struct feed_stream *st, char *buf, size_t cap)
{
	const char *msg = st->conn->errmsg;
	char pre[32];
	int npre = snprintf(pre, sizeof(pre), "stream %u: ", st->info.id);

	snprintf(buf, cap, "%s", strncmp(msg, pre, (size_t)npre) ? msg : msg + npre);
}

/* The daemon went away under st (every batch it published has been
 * returned): reconnects to the same socket and reopens the stream at its
 * position, retrying for up to opts.reconnect_ms. 0, FEED_END_OF_STREAM
 * when nothing was left to deliver, -ENOMEM with st unchanged (the next
 * call tries again), or a sticky error. */
int st_reopen(struct feed_stream *st, int64_t until_ms)
{
	struct feed_conn *conn = st->conn;
	int limit = st->opts.reconnect_ms ? st->opts.reconnect_ms : 30000;
	uint8_t token[FEED_RESUME_MAX];
	char last[CL_ERRMSG_MAX];
	size_t len;
	int r, delay = 20;

	/* feedd is gone: nothing will convert (or rebuild) a deferred slot */
	st_poll_ipc(st, true, NULL);
	if (st->opts.epochs && st->pos_epoch >= st->opts.epochs) {
		st->stop = FEED_END_OF_STREAM;
		return FEED_END_OF_STREAM;
	}
	st_last_error(st, last, sizeof(last));
	if (st->opts.reconnect_ms < 0)
		return st_stop(st, -ECONNRESET, "%s; reconnecting is off (reconnect_ms < 0)", last);
	if (!conn->path[0])
		return st_stop(st, -ECONNRESET, "feedd went away (%s)", last);
	if ((r = st_token(st, token, sizeof(token), &len)) < 0)
		return st_stop(st, r, "resume token does not fit");
	struct feed_stream_opts o = st->opts;
	o.resume = token;
	o.resume_len = len;
	if (st->reopen_deadline == 0) /* the first call of this reconnection */
		st->reopen_deadline = st_now_ms() + limit;
	int64_t deadline = st->reopen_deadline;
	for (;;) {
		/* our connection is dead; another stream may have reconnected it */
		if (conn->opens == st->conn_opens)
			cl_close(conn);
		r = conn->sock >= 0 ? 0 : feed_conn_open(conn, conn->path);
		if (r == 0) {
			bool final = false;
			r = st_reopen_once(st, &o, &final);
			if (final)
				return r;
		}
		if (r == -ENOMEM) {
			/* not sticky: st is as it was, so the next call tries again */
			snprintf(last, sizeof(last), "%s", conn->errmsg);
			return cl_fail(conn, r, "stream %u: reopening it after feedd came back: %s",
				       st->info.id, last);
		}
		snprintf(last, sizeof(last), "%s", conn->errmsg);
		int64_t left = deadline - st_now_ms();
		if (left <= 0)
			return st_stop(st, -ECONNRESET, "feedd at %s went away and was not back "
				       "within %d ms (reconnect_ms) (%s)", conn->path, limit, last);
		int64_t mine = until_ms < 0 ? left : until_ms - st_now_ms();
		if (mine <= 0 && left > 0)
			return st_reopen_later(st, last);
		/* the last attempt is made at the deadline, not a delay before it */
		left = mine < left ? mine : left;
		st_sleep_ms(left < delay ? (int)left : delay);
		delay = delay < 500 ? delay * 2 : 1000;
	}
}

