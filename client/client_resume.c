/*
 * client_resume.c: a stream's position as a resume token (feed.proto
 * ResumeToken), the position a stream opened with one starts at (the
 * daemon's word, from the open reply: the client computes no layout), and
 * which batch may come next (st_in_sequence). Used by opening
 * (client_stream.c), reopening (client_incarnation.c) and feed_next
 * (client_ready.c); calls none of them.
 *
 * Threads: feed_next()'s thread (the stream's position is its own).
 * Takes no lock.
 */
#include <errno.h>
#include <string.h>

#include "client_stream.h"

/* The token of the stream's position (feed.proto ResumeToken) into buf,
 * its length into *ret_len; -ENOSPC (nothing written) past cap. */
int st_token(const struct feed_stream *st, void *buf, size_t cap, size_t *ret_len)
{
	Feed__ResumeToken t = FEED__RESUME_TOKEN__INIT;

	t.magic = FEED_RESUME_MAGIC;
	t.dataset_version = (char *)st->info.dataset_version;
	t.pipeline_hash = st->info.pipeline_hash;
	t.seed = st->opts.seed;
	t.batch = st->opts.batch;
	t.world = st->world;
	t.epoch = st->pos_epoch;
	t.position = st->pos_position;
	t.order = st_order(st->opts.order);
	t.window = st->opts.window;
	t.drop_last = st->opts.drop_last;
	t.pad_last = st->opts.pad_last;
	t.eval = st->opts.eval;
	t.mixture.data = (uint8_t *)st->mix_state;  /* the daemon's, carried back */
	t.mixture.len = st->mix_len;
	if (st->opts.order == FEED_ORDER_NODE) {
		t.nodes = st->opts.nodes ? st->opts.nodes : 1;
		t.node_deal = st->opts.node_deal == FEED_NODE_DEAL_FIXED ?
				      FEED__NODE_DEAL__NODE_DEAL_FIXED : FEED__NODE_DEAL__NODE_DEAL_ROTATE;
		if (st->nlv && st->lv_epoch == st->pos_epoch) {
			t.n_level_nodes = t.n_level_positions = st->nlv;
			t.level_nodes = (uint32_t *)st->lv_nodes;
			t.level_positions = (uint64_t *)st->lv_pos;
		}
	}
	size_t n = feed__resume_token__get_packed_size(&t);
	if (n > cap)
		return -ENOSPC;
	feed__resume_token__pack(&t, buf);
	*ret_len = n;
	return 0;
}

FEED_API int feed_stream_resume_token(const struct feed_stream *st, void *buf, size_t cap,
				      size_t *ret_len)
{
	if (!st || !buf || !ret_len)
		return -EINVAL;
	return st_token(st, buf, cap, ret_len);
}

/* A stream opened with a token starts at its position as the daemon's
 * schedule counts it (feed.proto StreamOpened.resume_*: one taken after
 * an epoch's last batch first delivers that epoch's end; node order's
 * layouts, which the token carries on, are the schedule's word too). */
void st_resume_position(struct feed_stream *st, const Feed__StreamOpened *so)
{
	st->pos_epoch = so->resume_epoch;
	st->pos_position = so->resume_position;
	st->pos_known = true;
	st->lv_epoch = so->resume_epoch;
	st->nlv = 0;
	for (size_t i = 0; i < so->n_level_nodes && i < so->n_level_positions &&
			   st->nlv < ST_MAX_LEVELS; i++) {
		st->lv_nodes[st->nlv] = so->level_nodes[i];
		st->lv_pos[st->nlv++] = so->level_positions[i];
	}
}

/* Whether a batch at (epoch, position) may come next for st: its
 * position, or the next epoch's start when st's position is at its
 * epoch's end (a token taken after the last batch). */
bool st_in_sequence(const struct feed_stream *st, uint64_t epoch, uint64_t position)
{
	uint64_t stride = (uint64_t)st->batch * st->world;

	if (epoch == st->pos_epoch && position == st->pos_position)
		return true;
	return epoch == st->pos_epoch + 1 && position == 0 &&
	       st->pos_position >= st->info.batches_per_epoch * stride;
}
