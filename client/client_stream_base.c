/*
 * client_stream_base.c: what the stream module's files use and that uses
 * none of them: the hooks and getters (client_internal.h), the stream's
 * and a batch's plain accessors, the clock and st_stop. It calls only
 * client.c, so the stream's files form a DAG above it
 * (scripts/check-layers).
 *
 * Threads: the getters and hooks on any thread (the hooks' self is
 * published with release); st_stop on feed_next()'s thread. Takes no lock.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "client_stream.h"

int st_order(int order)
{
	return order == FEED_ORDER_FULL	       ? FEED__ORDER__ORDER_FULL :
	       order == FEED_ORDER_BLOCK_WINDOW ? FEED__ORDER__ORDER_BLOCK_WINDOW :
	       order == FEED_ORDER_NODE		? FEED__ORDER__ORDER_NODE :
						  FEED__ORDER__ORDER_SEQUENTIAL;
}

FEED_API const struct feed_stream_info *feed_stream_info(const struct feed_stream *st)
{
	return st ? &st->info : NULL;
}

int cl_stream_hook(struct feed_stream *st, enum cl_hook_id id, const struct cl_hook *h,
		   void *self)
{
	if (atomic_load_explicit(&st->hook[id].self, memory_order_relaxed))
		return -EEXIST;
	st->hook[id].ops = *h;
	/* release: a reader that sees self sees ops whole */
	atomic_store_explicit(&st->hook[id].self, self, memory_order_release);
	return 0;
}

void *cl_stream_hooked(const struct feed_stream *st, enum cl_hook_id id)
{
	/* acquire: pairs with cl_stream_hook's release */
	return atomic_load_explicit((_Atomic(void *) *)&st->hook[id].self, memory_order_acquire);
}

void *st_hook_get(const struct feed_stream *st, enum cl_hook_id id, struct cl_hook *ret_ops)
{
	void *self = cl_stream_hooked(st, id);
	if (self)
		*ret_ops = st->hook[id].ops;
	return self;
}

struct feed_conn *cl_stream_conn(struct feed_stream *st)
{
	return st->conn;
}

struct feed_stream *cl_batch_stream(struct feed_batch *b)
{
	return b->st;
}

bool cl_batch_held(struct feed_batch *b)
{
	return atomic_load_explicit(&b->held, memory_order_acquire);
}

void cl_batch_region(const struct feed_batch *b, void **ret_base, size_t *ret_len)
{
	/* b's incarnation is mapped while b is held */
	*ret_base = b->inc->map[1];
	*ret_len = b->inc->len[1];
}

void cl_stream_region(const struct feed_stream *st, void **ret_base, size_t *ret_len)
{
	*ret_base = st->data;
	*ret_len = st_inc_now(st)->len[1];
}

void cl_batch_mix_key(const struct feed_batch *b, uint64_t *ret_seed, uint64_t *ret_epoch,
		      uint64_t *ret_batch)
{
	*ret_seed = b->st->opts.seed;
	*ret_epoch = b->epoch;
	*ret_batch = b->index * b->st->world + b->st->opts.rank;
}

FEED_API int feed_stream_device(const struct feed_stream *st, const char **ret_reason)
{
	if (!st)
		return -EINVAL;
	bool on = st_inc_now(st)->ipc != NULL;
	if (ret_reason)
		*ret_reason = on ? "" : st->dev_reason;
	return on ? 1 : 0;
}

int64_t st_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t st_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int st_stop(struct feed_stream *st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->stop_msg, sizeof(st->stop_msg), fmt, ap);
	va_end(ap);
	st->stop = code;
	return cl_fail(st->conn, code, "stream %u: %s", st->info.id, st->stop_msg);
}

FEED_API int feed_batch_field(const struct feed_batch *b, uint32_t i, struct feed_view *ret)
{
	if (!b || !ret || i >= b->st->nfields)
		return -EINVAL;
	*ret = b->view[i];
	return 0;
}
