/*
 * client_ready.c: the ready ring's consumer (feed_next) with its eventfd
 * doorbell (proto/feed_ring.h), the check of each delivered batch's
 * header, and the batch accessors (feed/stream.h; feed_batch_field,
 * which the files below use too, is client_stream_base.c's).
 *
 * Threads: feed_next() on the caller's thread, one at a time per stream;
 * the accessors on any thread that holds the batch. Takes no lock: the
 * ring's consumer side is this thread's alone. A stream with GPU
 * delivery or device slots first gives back the batches those kept and
 * are done with (client_release.c), and feed_next() with every credit
 * held by batches the device slots keep waits for one in slices, within
 * its timeout; a hang-up of feedd ends that wait.
 *
 * Must never: allocate or enter the kernel when a batch is ready (the
 * fast path of feed_next), or crash the host on a daemon bug: each
 * batch's header is checked once at delivery, and what fails is -EPROTO
 * naming the check.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_stream.h"
#include "dtype.h"

#define ST_SLICE_MIN_NS 20000    /* st_wait_converted's first look, then doubling */
#define ST_SLICE_MAX_NS 2000000  /* to this: a conversion takes well under a ms */

_Static_assert(FEED_EDETACHED == -ENOLINK, "feed/stream.h spells ENOLINK out");

/* off + len fits in size, without overflow. */
/* Adds ns to the reader wait feedd displays, and to what
 * feed_stream_note_next() tops up. feed_next()'s thread. */
static void st_add_wait(struct feed_stream *st, uint64_t ns)
{
	/* relaxed: a count the daemon only displays; we are its one writer
	 * per thread and fetch_add keeps concurrent readers' sums whole */
	atomic_fetch_add_explicit(&st->rel->reader_wait_ns, ns, memory_order_relaxed);
	st->wait_unnoted_ns += ns;
}

static bool st_fits(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static int st_stopped(struct feed_stream *st)
{
	if (st->stop < 0)
		cl_fail(st->conn, st->stop, "stream %u: %s", st->info.id, st->stop_msg);
	return st->stop;
}

/* FEED_READY_ERROR: the daemon stopped the stream and said why. */
static int st_daemon_error(struct feed_stream *st)
{
	const char *m = st->ctl->error_msg;
	int code = st->ctl->error_code;
	char msg[sizeof(st->ctl->error_msg)];
	size_t i;

	for (i = 0; i < sizeof(msg) - 1 && m[i]; i++)
		msg[i] = m[i] >= 0x20 && m[i] < 0x7f ? m[i] : '?';
	msg[i] = '\0';
	if (code >= 0 || code < -4095)
		return st_stop(st, -EPROTO, "feedd stopped the stream with code %d: %s", code, msg);
	return st_stop(st, code, "%s", msg);
}

static int st_bad_field(struct feed_stream *st, uint32_t slot, uint32_t f, const char *what)
{
	return st_stop(st, -EPROTO, "slot %u field %u from feedd: %s", slot, f, what);
}

/* Checks field f of a delivered slot header and writes its view. */
static int st_field(struct feed_stream *st, uint32_t slot, const struct feed_shm_slot *h,
		    uint32_t f, struct feed_view *v)
{
	const struct feed_shm_field *sf = &h->field[f];
	const struct feed_field *want = &st->info.fields[f];
	uint64_t lo = (uint64_t)slot * st->slot_bytes, n = h->nsamples;
	uint64_t el = feed_dtype_size((int)sf->dtype);

	if (sf->dtype != (uint32_t)want->dtype || sf->rank < 1u + want->variable ||
	    sf->rank > FEED_SHM_MAX_RANK || sf->shape[0] != n || !!sf->var_off != want->variable)
		return st_bad_field(st, slot, f, "dtype, rank or sample count differs from the schema");
	if (sf->offset < lo || !st_fits(sf->offset - lo, sf->bytes, st->slot_bytes))
		return st_bad_field(st, slot, f, "bytes outside the slot's data");
	v->ends = NULL;
	if (sf->var_off) {
		uint64_t hdr = st->slots_off + (uint64_t)slot * st->slot_hdr_bytes;
		if (sf->shape[1] != 0 || sf->var_off % 8 ||
		    sf->var_off < hdr + sizeof(*h) + 8 * n ||
		    !st_fits(sf->var_off - hdr, 8 * (n + 1), st->slot_hdr_bytes))
			return st_bad_field(st, slot, f, "ends table outside the slot header");
		const uint64_t *ends = (const uint64_t *)((const uint8_t *)st->ctl + sf->var_off);
		uint64_t prev = 0;
		if (ends[0] != 0)
			return st_bad_field(st, slot, f, "ends table does not start at 0");
		for (uint64_t i = 1; i <= n; i++) {
			if (ends[i] < prev)
				return st_bad_field(st, slot, f, "ends table not monotonic");
			prev = ends[i];
		}
		if (prev > sf->bytes)
			return st_bad_field(st, slot, f, "ends table past the field's bytes");
		v->ends = ends;
	} else {
		uint64_t total = el;
		for (uint32_t d = 0; d < sf->rank; d++)
			if (__builtin_mul_overflow(total, sf->shape[d], &total))
				return st_bad_field(st, slot, f, "shape overflows");
		if (total != sf->bytes)
			return st_bad_field(st, slot, f, "bytes do not match the shape");
	}
	/* the slot's mapping: the data region, or its alias (client_detach.c) */
	v->data = st->batches[slot].base + (sf->offset - lo);
	v->bytes = sf->bytes;
	v->dtype = (int)sf->dtype;
	v->rank = sf->rank;
	memcpy(v->shape, sf->shape, sizeof(sf->shape));
	memset(v->shape + FEED_SHM_MAX_RANK, 0,
	       sizeof(v->shape) - FEED_SHM_MAX_RANK * sizeof(v->shape[0]));
	return 0;
}

/* The positions of slot's batch that hold replacements (on_error skip)
 * or whose samples were dropped (skip under eval): the bitmap after the
 * sample list, checked to lie inside the header. */
static int st_replaced(struct feed_stream *st, uint32_t slot, const struct feed_shm_slot *h,
		       struct feed_batch *b)
{
	uint64_t words = FEED_SHM_REPLACED_WORDS(st->batch);
	bool dropped = h->flags & FEED_SLOT_DROPPED;

	b->replaced = NULL;
	b->failed = NULL;
	b->nreplaced = 0;
	b->ndropped = 0;
	if (!(h->flags & FEED_SLOT_REPLACED) && !dropped)
		return 0;
	if ((h->flags & FEED_SLOT_REPLACED) && dropped)
		return st_stop(st, -EPROTO, "slot %u: both replaced and dropped samples", slot);
	if (FEED_SHM_FAILED_END(st->batch) <= st->slot_hdr_bytes) /* else an older feedd */
		b->failed = feed_shm_failed((struct feed_shm_slot *)h, st->batch);
	if (sizeof(*h) + 8ull * st->batch + 8 * words > st->slot_hdr_bytes)
		return st_stop(st, -EPROTO, "slot %u: replaced bitmap past its %llu-byte header",
			       slot, (unsigned long long)st->slot_hdr_bytes);
	b->replaced = &h->sample[st->batch];
	if (dropped) { /* positions of the batch as laid out: up to batch */
		for (uint32_t i = 0; i < st->batch; i++)
			b->ndropped += (b->replaced[i / 64] >> (i % 64)) & 1;
		if (b->ndropped == 0 || h->nsamples + b->ndropped > st->batch)
			return st_stop(st, -EPROTO, "slot %u: %u samples and %u dropped (batch %u)",
				       slot, h->nsamples, b->ndropped, st->batch);
		return 0;
	}
	for (uint32_t i = 0; i < h->nsamples; i++)
		b->nreplaced += (b->replaced[i / 64] >> (i % 64)) & 1;
	return 0;
}

/* A ready entry naming a slot: check its header once, hand it out. */
static int st_deliver(struct feed_stream *st, uint32_t slot, uint32_t gen, struct feed_batch **ret)
{
	struct feed_batch *b = &st->batches[slot];
	const struct feed_shm_slot *h = (const struct feed_shm_slot *)(
		(const uint8_t *)st->ctl + st->slots_off + (uint64_t)slot * st->slot_hdr_bytes);
	int r;

	/* acquire: the daemon's reclaim already orders the releasing thread's
	 * reads of this batch before the publish we acquired, but through
	 * another process; pairing with feed_release's exchange says so
	 * within ours (ThreadSanitizer sees only this one) */
	if (atomic_load_explicit(&b->held, memory_order_acquire))
		return st_stop(st, -EPROTO, "feedd delivered slot %u again while it is held", slot);
	if (h->gen != gen)
		return st_stop(st, -EPROTO, "slot %u: header generation %u, ready entry %u", slot,
			       h->gen, gen);
	/* no sample at all only when every one failed and was dropped */
	if ((h->nsamples == 0 && !(h->flags & FEED_SLOT_DROPPED)) || h->nsamples > st->batch ||
	    h->nfields != st->nfields)
		return st_stop(st, -EPROTO, "slot %u: %u samples, %u fields (batch %u, %u fields)",
			       slot, h->nsamples, h->nfields, st->batch, st->nfields);
	/* a group shares one sequence: a batch elsewhere than where this
	 * member stands would lose or repeat batches (node order's layouts
	 * count positions their own way) */
	if (st->group && st->pos_known && st->opts.order != FEED_ORDER_NODE &&
	    !st_in_sequence(st, h->epoch, h->position))
		return st_stop(st, -EPROTO, "feedd delivered epoch %llu batch %llu (position %llu) "
			       "where epoch %llu position %llu was next: batches would be lost or "
			       "repeated", (unsigned long long)h->epoch, (unsigned long long)h->index,
			       (unsigned long long)h->position, (unsigned long long)st->pos_epoch,
			       (unsigned long long)st->pos_position);
	for (uint32_t f = 0; f < st->nfields; f++)
		if ((r = st_field(st, slot, h, f, &b->view[f])) < 0)
			return r;
	if ((r = st_replaced(st, slot, h, b)) < 0)
		return r;
	b->gen = gen;
	b->nsamples = h->nsamples;
	b->flags = h->flags;
	b->epoch = h->epoch;
	b->index = h->index;
	b->publish_ns = h->publish_ns;
	b->samples = h->sample;
	st->pos_epoch = h->epoch;
	st->pos_position = h->position + (uint64_t)st->batch * st->world;
	st->pos_known = true;
	atomic_store_explicit(&b->held, true, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->nheld, 1, memory_order_relaxed);
	*ret = b;
	return 0;
}

/* Takes the entry at the tail; head != tail, as loaded (untrusted). */
static int st_take(struct feed_stream *st, uint64_t head, struct feed_batch **ret)
{
	int bad = feed_ring_check(head, st->tail, st->ready.cap);
	if (bad == -ERANGE)
		return st_stop(st, -EPROTO, "ready queue head moved backwards, %llu entries behind "
			       "ours", (unsigned long long)(st->tail - head));
	if (bad < 0)
		return st_stop(st, -EPROTO, "ready queue head moved %llu entries past ours (capacity %u)",
			       (unsigned long long)(head - st->tail), st->ready.cap);
	uint64_t e = feed_ring_take(&st->ready, &st->tail);
	uint32_t slot = feed_ring_slot(e);

	/* relaxed: read only when the daemon detaches us, to know what we took */
	atomic_store_explicit(&st->rel->ready_tail, st->tail, memory_order_relaxed);
	if (slot < st->nslots)
		return st_deliver(st, slot, feed_ring_gen(e), ret);
	switch (slot) {
	case FEED_READY_EPOCH_END:
		st->pos_epoch++;
		st->pos_position = 0;
		return FEED_END_OF_EPOCH;
	case FEED_READY_STREAM_END:
		st->stop = FEED_END_OF_STREAM;
		return FEED_END_OF_STREAM;
	case FEED_READY_ERROR:
		return st_daemon_error(st);
	default:
		return st_stop(st, -EPROTO, "ready queue entry names slot %u of %u", slot,
			       st->nslots);
	}
}

/* Asks the daemon to ring the ready doorbell at its next publish; true if
 * a batch came meanwhile (take it rather than sleep: published before the
 * flag was seen, nothing rings for it). The doorbell is
 * cleared here, before asking, not after waking: the wake-up path is then
 * poll() alone. A ring from an earlier wait is dropped here; one for this
 * wait can only come after the flag is set. */
static bool st_arm(struct feed_stream *st)
{
	uint64_t count;

	(void)!read(st->fd[ST_FD_READY], &count, sizeof(count));
	/* feed_ring.h: the flag, a seq_cst fence, the head again */
	return feed_ring_arm(&st->ready, st->tail);
}

/* Every credit is held, maybe some by released batches whose conversion
 * has not run (client_ipc.c): waits for one of them to go back, looking
 * in slices that grow to ST_SLICE_MAX_NS (the conversion waits on the
 * device for this process's own work: no event to sleep on that a
 * timeout bounds), until *deadline (set here at the call's first wait)
 * when timeout_ms > 0. feedd hanging up ends the wait: nothing will
 * convert them, so every one goes back. 0: look again; -ENOBUFS when none
 * is deferred; -ETIMEDOUT. */
static int st_wait_converted(struct feed_stream *st, int timeout_ms, int64_t *deadline)
{
	struct feed_conn *conn = st->conn;
	int64_t slice = ST_SLICE_MIN_NS, t0 = st_now_ns();
	uint32_t left;
	int r = 0;

	if (timeout_ms > 0 && *deadline < 0)
		*deadline = st_now_ms() + timeout_ms;
	while (st_poll_ipc(st, false, &left) == 0) {
		if (left == 0) {
			r = cl_fail(conn, -ENOBUFS, "stream %u: all %u credits are held by "
				    "unreleased batches; release one first", st->info.id,
				    st->take_max);
			break;
		}
		int64_t ns = slice;
		if (timeout_ms > 0) {
			int64_t ms = *deadline - st_now_ms();
			if (ms <= 0) {
				r = cl_fail(conn, -ETIMEDOUT, "stream %u: no batch within %d ms: "
					    "every credit is held, %u by released batches whose "
					    "conversion on the device has not run (feedd's conversion "
					    "waits for the done word of the slot's last batch, behind "
					    "the work of yours it was tied to)", st->info.id, timeout_ms,
					    left);
				break;
			}
			ns = ns < ms * 1000000 ? ns : ms * 1000000;
		}
		struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
		struct pollfd p = {.fd = conn->sock, .events = 0}; /* 0: hang-up only */
		int n = conn->sock >= 0 && conn->opens == st->conn_opens ? ppoll(&p, 1, &ts, NULL) : 1;
		if (n > 0 && (conn->sock < 0 || conn->opens != st->conn_opens ||
			      (p.revents & (POLLHUP | POLLERR | POLLNVAL)))) {
			st_poll_ipc(st, true, NULL); /* feedd is gone */
			break;
		}
		slice = slice * 2 < ST_SLICE_MAX_NS ? slice * 2 : ST_SLICE_MAX_NS;
	}
	st_add_wait(st, (uint64_t)(st_now_ns() - t0));
	return r;
}

/* Nothing was ready. -ENOBUFS if every credit is held (with device slots
 * and timeout_ms != 0, first st_wait_converted). With timeout_ms 0:
 * arms the doorbell (st_arm, so feed_stream_fd() wakes a poller) and
 * returns -ETIMEDOUT unless a batch came meanwhile. Otherwise -ECONNRESET
 * if the connection is gone, -ETIMEDOUT past *deadline (set at the call's
 * first wait), else arms the doorbell and sleeps on it and on the socket's
 * hang-up until the deadline. 0: look again (spurious wake-ups are
 * normal); -ECONNRESET when the daemon hung up with nothing left to take. */
static int st_wait(struct feed_stream *st, int timeout_ms, int64_t *deadline)
{
	struct feed_conn *conn = st->conn;
	uint32_t held = atomic_load_explicit(&st->nheld, memory_order_relaxed);
	int left = -1;

	if (held >= st->take_max && st_inc_now(st)->ipc && timeout_ms != 0)
		return st_wait_converted(st, timeout_ms, deadline);
	if (held >= st->take_max)
		return cl_fail(conn, -ENOBUFS, "stream %u: all %u credits are held by unreleased "
			       "batches; release one first", st->info.id, st->take_max);
	if (timeout_ms == 0) {
		/* armed: feed_stream_fd() becomes readable at the next publish */
		if (st_arm(st))
			return 0;
		strcpy(conn->errmsg, "no batch ready");
		return -ETIMEDOUT;
	}
	if (conn->sock < 0 || conn->opens != st->conn_opens)
		return cl_fail(conn, -ECONNRESET, "stream %u: connection to feedd is closed",
			       st->info.id);
	if (timeout_ms > 0) {
		if (*deadline < 0)
			*deadline = st_now_ms() + timeout_ms;
		int64_t ms = *deadline - st_now_ms();
		if (ms <= 0)
			return cl_fail(conn, -ETIMEDOUT, "stream %u of dataset '%s': no batch within "
				       "%d ms (%u of %u credits held here); feedctl status shows the "
				       "stream", st->info.id, st->opts.dataset, timeout_ms, held,
				       st->take_max);
		left = (int)ms;
	}
	if (st_arm(st))
		return 0;
	struct pollfd p[2] = {{.fd = st->fd[ST_FD_READY], .events = POLLIN},
			      {.fd = conn->sock, .events = 0}}; /* 0: hang-up only */
	int64_t t0 = st_now_ns();
	int n = poll(p, 2, left);
	st_add_wait(st, (uint64_t)(st_now_ns() - t0));
	if (n < 0 && errno != EINTR)
		return cl_fail(conn, -errno, "stream %u: poll: %s", st->info.id,
			       cl_os_strerror(errno));
	if (n <= 0)
		return 0;
	if (p[0].revents & (POLLERR | POLLNVAL))
		return st_stop(st, -EPROTO, "ready doorbell failed");
	if ((p[1].revents & (POLLHUP | POLLERR)) &&
	    feed_ring_head(&st->ready) == st->tail)
		return cl_fail(conn, -ECONNRESET, "stream %u: feedd went away", st->info.id);
	return 0;
}

FEED_API int feed_stream_note_next(struct feed_stream *st, uint64_t ns)
{
	if (!st)
		return -EINVAL;
	if (ns > st->wait_unnoted_ns)
		st_add_wait(st, ns - st->wait_unnoted_ns);
	st->wait_unnoted_ns = 0;
	return 0;
}

FEED_API int feed_next(struct feed_stream *st, int timeout_ms, struct feed_batch **ret)
{
	int64_t deadline = -1;

	if (!st || !ret)
		return -EINVAL;
	/* slots released before feedd converted them, or while copies from
	 * them ran, go back now (with every credit held, after the oldest copy) */
	st_poll_ipc(st, false, NULL);
	st_reap(st); /* incarnations whose last batch another thread released */
	st_poll_hooks(st, timeout_ms != 0 &&
			  atomic_load_explicit(&st->nheld, memory_order_relaxed) == st->nslots,
		      false);
	if (st->stop)
		return st_stopped(st);
	for (;;) {
		/* feed_ring.h: acquire, the entries and slot headers before it */
		uint64_t head = feed_ring_head(&st->ready);
		/* detached from the group: told now, not after what is queued
		 * (acquire: the daemon stores the code last, after the message) */
		if (head != st->tail && st->group &&
		    __atomic_load_n(&st->ctl->error_code, __ATOMIC_ACQUIRE) == FEED_EDETACHED)
			return st_daemon_error(st);
		if (head != st->tail)
			return st_take(st, head, ret);
		int r = st_wait(st, timeout_ms, &deadline);
		if (r == -ECONNRESET) {
			/* every published batch was taken; reconnecting stays within
			 * timeout_ms (st_reopen goes on at the next call) */
			if (timeout_ms >= 0 && deadline < 0)
				deadline = st_now_ms() + timeout_ms;
			r = st_reopen(st, timeout_ms < 0 ? -1 : deadline);
		}
		if (r != 0)
			return r;
	}
}

/* ------------------------------------------------------------------ */
/* Batches                                                             */

FEED_API uint64_t feed_batch_epoch(const struct feed_batch *b)
{
	return b->epoch;
}

FEED_API uint64_t feed_batch_index(const struct feed_batch *b)
{
	return b->index;
}

FEED_API uint32_t feed_batch_size(const struct feed_batch *b)
{
	return b->nsamples;
}

FEED_API const uint64_t *feed_batch_samples(const struct feed_batch *b)
{
	return b->samples;
}

FEED_API bool feed_batch_padded(const struct feed_batch *b)
{
	return b->flags & FEED_SLOT_PADDED;
}

FEED_API uint32_t feed_batch_replaced(const struct feed_batch *b, const uint64_t **ret_bits)
{
	if (ret_bits)
		*ret_bits = b->nreplaced ? b->replaced : NULL;
	return b->nreplaced;
}

FEED_API int feed_batch_failed(const struct feed_batch *b, uint32_t i, uint64_t *ret)
{
	if (!b || !ret || i >= b->nsamples)
		return -EINVAL;
	if (!b->replaced || b->ndropped || !((b->replaced[i / 64] >> (i % 64)) & 1))
		return -ENOENT; /* dropped samples: feed_batch_dropped_sample() */
	if (!b->failed)
		return -ENOTSUP;
	uint32_t k = 0; /* i is the k-th replaced position */
	for (uint32_t j = 0; j < i; j++)
		k += (b->replaced[j / 64] >> (j % 64)) & 1;
	if (k >= FEED_SHM_FAILED_MAX)
		return -ERANGE;
	*ret = b->failed[k];
	return 0;
}

FEED_API uint32_t feed_batch_dropped(const struct feed_batch *b)
{
	return b ? b->ndropped : 0;
}

FEED_API int feed_batch_dropped_sample(const struct feed_batch *b, uint32_t k, uint64_t *ret)
{
	if (!b || !ret)
		return -EINVAL;
	if (k >= b->ndropped)
		return -ENOENT;
	if (!b->failed)
		return -ENOTSUP;
	if (k >= FEED_SHM_FAILED_MAX)
		return -ERANGE;
	*ret = b->failed[k];
	return 0;
}

FEED_API uint64_t feed_batch_publish_ns(const struct feed_batch *b)
{
	return b->publish_ns;
}

FEED_API int feed_batch_field_index(const struct feed_batch *b, const char *name)
{
	if (!b || !name)
		return -EINVAL;
	/* the stream's info for good: a reconnection does not change it */
	const struct feed_stream_info *in = &b->st->info;
	for (uint32_t i = 0; i < in->num_fields; i++)
		if (!strcmp(in->fields[i].name, name))
			return (int)i;
	return -ENOENT;
}

