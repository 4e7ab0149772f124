/*
 * client_mixture.c: a mixture's side of a stream (feed_stream_opts.mixture):
 * its options checked, sent, kept for reopening, and the daemon's blend
 * state kept for the resume tokens (which carry it back untouched: the
 * client never reads it). feed_next()'s thread (open and reopen); never
 * prints.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "client_stream.h"
#include "feed_text.h"

int st_mixture_check(struct feed_conn *conn, const struct feed_stream_opts *o)
{
	if (o->nmixture > FEED_MIXTURE_MAX || (o->nmixture && !o->mixture))
		return cl_fail(conn, -EINVAL, "option mixture: %u sources, allowed 1 to %d",
			       o->nmixture, FEED_MIXTURE_MAX);
	for (uint32_t i = 0; i < o->nmixture; i++) {
		const struct feed_mixture_source *s = &o->mixture[i];
		if (!s->dataset || !*s->dataset || strlen(s->dataset) > 63)
			return cl_fail(conn, -EINVAL, "option mixture[%u].dataset: a name of 1 to 63 "
				       "bytes is required", i);
		if (!isfinite(s->weight) || s->weight < 0)
			return cl_fail(conn, -EINVAL, "option mixture[%u] ('%s'): weight %g, a finite "
				       "number >= 0 is required", i, s->dataset, s->weight);
		if (!isfinite(s->repeat) || s->repeat < 0)
			return cl_fail(conn, -EINVAL, "option mixture[%u] ('%s'): repeat %g, a finite "
				       "number >= 0 is required (0 means 1)", i, s->dataset, s->repeat);
	}
	return 0;
}

void st_mixture_request(const struct feed_stream_opts *o, Feed__OpenStream *os,
			Feed__MixtureSource *srcs, Feed__MixtureSource **ptrs)
{
	for (uint32_t i = 0; i < o->nmixture; i++) {
		feed__mixture_source__init(&srcs[i]);
		srcs[i].dataset = feed_pb_text(o->mixture[i].dataset);
		srcs[i].weight = o->mixture[i].weight;
		srcs[i].repeat = o->mixture[i].repeat;
		srcs[i].choose = o->mixture[i].choose;
		ptrs[i] = &srcs[i];
	}
	os->n_mixture = o->nmixture;
	os->mixture = o->nmixture ? ptrs : NULL;
	os->samples_per_epoch = o->samples_per_epoch;
}

int st_mixture_keep(struct feed_stream *st, const struct feed_stream_opts *o)
{
	size_t head = o->nmixture * sizeof(struct feed_mixture_source), strings = 0;

	if (!o->nmixture)
		return 0;
	for (uint32_t i = 0; i < o->nmixture; i++)
		strings += strlen(o->mixture[i].dataset) + 1;
	struct feed_mixture_source *m = malloc(head + strings);
	if (!m)
		return cl_fail(st->conn, -ENOMEM, "out of memory for the stream's mixture");
	char *pool = (char *)m + head;
	for (uint32_t i = 0; i < o->nmixture; i++) {
		size_t n = strlen(o->mixture[i].dataset) + 1;
		m[i] = o->mixture[i];
		m[i].dataset = memcpy(pool, o->mixture[i].dataset, n);
		pool += n;
	}
	st->mix_mem = m;
	st->opts.mixture = m;
	return 0;
}

int st_mixture_state(struct feed_stream *st, const Feed__StreamOpened *so)
{
	if (so->mixture.len > sizeof(st->mix_state))
		return cl_bad_reply(st->conn, "stream_opened with a mixture state too large");
	if (so->mixture.len)
		memcpy(st->mix_state, so->mixture.data, so->mixture.len);
	st->mix_len = so->mixture.len;
	return 0;
}
