/*
 * session_stream.c: the stream requests of a connection: open (checks,
 * per-user limits, pipeline, regions, the release doorbell's uv_poll) and
 * close, and closing every stream when the connection goes. Loop thread
 * only; building batches happens on the workers (stream.c, batch.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "feed_shm.h"
#include "catalog.h"
#include "feedd.h"
#include "fmt_pb.h"
#include "order.h"
#include "pipeline.h"
#include "session.h"
#include "stream.h"
#include "wire.h"

#define SES_DEFAULT_CREDITS 4

/* A stream as the connection sees it. */
struct ses_stream {
	struct ses_stream *next;   /* the connection's list */
	struct srv_conn *conn;
	uint32_t id;
	struct stream *st;         /* delivery; closed when this goes */
	uint64_t shm_bytes;        /* counted against the user's limit */
	uv_poll_t poll;            /* the release doorbell */
	uint64_t bad_logged;       /* refused release entries already logged */
	bool error_logged;         /* the stream's stop was logged */
};

static void ses_stream_closed(uv_handle_t *h)
{
	free(h->data);
}

/* Logs what the stream refused from its client since the last look: the
 * release region is the client's to write, so this is where its mistakes
 * (or tampering) show. Rate-limited per connection: a client that rings
 * bad entries in a loop gets a few lines, then one a second saying how
 * many were left out; "in all" keeps the full count. */
static void ses_stream_report(struct ses_stream *ss)
{
	struct srv_conn *c = ss->conn;
	struct stream_stats st;
	char note[LOG_LIMIT_NOTE_MAX];
	uint64_t dropped;

	stream_stats(ss->st, &st);
	if (st.bad_releases > ss->bad_logged &&
	    log_limit_allow(&c->release_log, uv_now(&c->d->loop), &dropped))
		log_warn(&c->d->log, SRV_CONN_FMT ": stream %u: refused %llu release entries that "
			 "name no slot the client holds at that generation (%llu in all)%s",
			 SRV_CONN_ARGS(c), ss->id,
			 (unsigned long long)(st.bad_releases - ss->bad_logged),
			 (unsigned long long)st.bad_releases, log_limit_note(dropped, note));
	ss->bad_logged = st.bad_releases;
	if (st.error && !ss->error_logged) {
		log_warn(&c->d->log, SRV_CONN_FMT ": stream %u stopped: %s", SRV_CONN_ARGS(c), ss->id,
			 st.error_msg);
		ss->error_logged = true;
	}
}

/* Stops delivery and frees the wrapper once libuv let go of the poll.
 * The poll goes first: uv_close() takes the doorbell out of epoll, which
 * it can no longer do once stream_close() has closed our descriptor, and
 * the client's copy would keep the registration alive (a client ringing
 * it would then spin the loop). */
static void ses_stream_drop(struct ses_stream *ss)
{
	ses_stream_report(ss);  /* what happened since the last doorbell */
	uv_poll_stop(&ss->poll);
	uv_close((uv_handle_t *)&ss->poll, ses_stream_closed);
	stream_close(ss->st);
	ss->st = NULL;
}

static void ses_on_release(uv_poll_t *h, int status, int events)
{
	struct ses_stream *ss = h->data;

	if (!ss->st)
		return;
	stream_on_release(ss->st);
	ses_stream_report(ss);
}

void ses_conn_closing(struct srv_conn *c)
{
	while (c->streams) {
		struct ses_stream *ss = c->streams;
		c->streams = ss->next;
		ses_stream_drop(ss);
	}
}

void ses_conn_usage(const struct srv_conn *c, uint32_t *streams, uint64_t *bytes)
{
	for (const struct ses_stream *ss = c->streams; ss; ss = ss->next) {
		(*streams)++;
		*bytes += ss->shm_bytes;
	}
}

/* The pipeline text a request names: a configured pipeline's, or its own.
 * A bare name (what a configured pipeline is called) that is neither a
 * configured pipeline nor op text is refused as a pipeline that does not
 * exist, listing those that do, not as an unknown op. */
static int ses_pipeline_text(const struct feedd *d, const char *asked, const char **ret,
			     struct feed_err *err)
{
	const struct cfg *cfg = d->cfg;
	struct pipe_spec spec;
	char list[320] = "";
	size_t n = 0;

	for (size_t i = 0; i < cfg->npipelines; i++)
		if (!strcmp(cfg->pipelines[i].name, asked)) {
			*ret = cfg->pipelines[i].ops;
			return 0;
		}
	if (!cfg_name_ok(asked) || pipe_parse(asked, &spec, NULL) == 0) {
		*ret = asked;  /* op text: planning says what is wrong with it */
		return 0;
	}
	for (size_t i = 0; i < cfg->npipelines && n < sizeof(list); i++) {
		int m = snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "",
				 cfg->pipelines[i].name);
		n += m > 0 ? (size_t)m : 0;
	}
	if (n >= sizeof(list))  /* cut: say so */
		strcpy(list + sizeof(list) - sizeof(", ..."), ", ...");
	return feed_err_set(err, -EINVAL, "no pipeline named '%s' (%s%s)", asked,
			    n ? "configured: " : "none configured", list);
}

static void ses_spec(const Feed__OpenStream *o, struct stream_spec *sp)
{
	memset(sp, 0, sizeof(*sp));
	sp->batch = o->batch;
	sp->credits = o->credits ? o->credits : SES_DEFAULT_CREDITS;
	sp->epochs = o->epochs;
	sp->drop_last = o->drop_last;
	sp->seed = o->seed;
	sp->order = o->order == FEED__ORDER__ORDER_FULL	 ? ORD_FULL :
		    o->order == FEED__ORDER__ORDER_BLOCK_WINDOW ? ORD_BLOCK_WINDOW :
								  ORD_SEQUENTIAL;
	sp->window = o->window ? o->window : 8;
	sp->rank = o->rank;
	sp->world = o->world ? o->world : 1;
	sp->eval = o->eval;
	sp->start_epoch = o->start_epoch;
	sp->start_batch = o->start_batch;
}

_Static_assert(CFG_MAX_CREDITS == STREAM_MAX_CREDITS && WIRE_CREDITS_MAX == STREAM_MAX_CREDITS,
	       "the config, the wire check and the stream agree on the most credits");

/* Per-user limits that can be checked before anything is built. */
static int ses_limits_before(struct srv_conn *c, const struct stream_spec *sp,
			     struct feed_err *err)
{
	const struct cfg_limits *lim = &c->d->cfg->limits;
	uint32_t streams;
	uint64_t bytes;

	srv_user_usage(c->d->srv, c->peer.uid, &streams, &bytes);
	if (streams >= lim->max_streams)
		return feed_err_set(err, -EUSERS, "user %u: %u streams open, limit max_streams is %llu",
				    (unsigned)c->peer.uid, streams,
				    (unsigned long long)lim->max_streams);
	if (sp->credits > lim->max_credits)
		return feed_err_set(err, -EINVAL, "credits %u exceed the limit max_credits %llu",
				    sp->credits, (unsigned long long)lim->max_credits);
	return 0;
}

static int ses_limits_after(struct srv_conn *c, uint64_t new_bytes, struct feed_err *err)
{
	const struct cfg_limits *lim = &c->d->cfg->limits;
	uint32_t streams;
	uint64_t bytes;

	srv_user_usage(c->d->srv, c->peer.uid, &streams, &bytes);
	if (bytes + new_bytes > lim->max_slot_bytes)
		return feed_err_set(err, -ENOSPC, "user %u: %llu bytes of slots held, %llu more would "
				    "exceed max_slot_bytes %llu", (unsigned)c->peer.uid,
				    (unsigned long long)bytes, (unsigned long long)new_bytes,
				    (unsigned long long)lim->max_slot_bytes);
	return 0;
}

/* A token's parameter that must equal the request's. */
static int ses_resume_same(const char *what, uint64_t token, uint64_t asked, struct feed_err *err)
{
	if (token == asked)
		return 0;
	return feed_err_set(err, -EINVAL, "resume token: %s is %llu in the token, %llu in the request",
			    what, (unsigned long long)token, (unsigned long long)asked);
}

/* Applies a resume token (feed.proto ResumeToken) to sp, or says why not. */
static int ses_resume(const Feed__OpenStream *o, const struct cat_entry *e,
		      const struct pipe_plan *plan, struct stream_spec *sp, struct feed_err *err)
{
	Feed__ResumeToken *t = feed__resume_token__unpack(NULL, o->resume.len, o->resume.data);
	int rc = 0;

	if (!t || t->magic != FEED_RESUME_MAGIC) {
		rc = feed_err_set(err, -EINVAL, "resume token: not a feedd resume token");
		goto out;
	}
	if (strcmp(t->dataset_version, e->info->version)) {
		rc = feed_err_set(err, -ESTALE, "resume token: taken on dataset version %.16s, the "
				  "dataset is now version %s", t->dataset_version, e->info->version);
		goto out;
	}
	if (t->pipeline_hash != plan->hash) {
		rc = feed_err_set(err, -ESTALE, "resume token: taken with another pipeline (hash "
				  "%016llx); this one is '%s' (%016llx)",
				  (unsigned long long)t->pipeline_hash, plan->canonical,
				  (unsigned long long)plan->hash);
		goto out;
	}
	if ((rc = ses_resume_same("seed", t->seed, o->seed, err)) < 0 ||
	    (rc = ses_resume_same("batch", t->batch, o->batch, err)) < 0 ||
	    (rc = ses_resume_same("order", (uint64_t)t->order, (uint64_t)o->order, err)) < 0 ||
	    (rc = ses_resume_same("drop_last", t->drop_last, o->drop_last, err)) < 0 ||
	    (rc = ses_resume_same("eval", t->eval, o->eval, err)) < 0)
		goto out;
	if (o->order == FEED__ORDER__ORDER_BLOCK_WINDOW &&
	    (rc = ses_resume_same("window", t->window, sp->window, err)) < 0)
		goto out;
	sp->start_epoch = t->epoch;
	sp->start_batch = 0;
	sp->at_position = true;
	sp->start_position = t->position;
out:
	if (t)
		feed__resume_token__free_unpacked(t, NULL);
	return rc;
}

/* Advice for people, put in the open reply. */
static void ses_note(const struct feedd *d, const struct cat_entry *e, const struct stream_spec *sp,
		     char *buf, size_t cap)
{
	buf[0] = '\0';
	if (sp->order == ORD_FULL && !sp->eval && e->info->bytes_raw > d->cfg->cache_bytes)
		snprintf(buf, cap, "full shuffle over %llu decoded bytes with a %llu byte block "
			 "cache costs one block decode per sample; use block-window order or a "
			 "larger cache_bytes", (unsigned long long)e->info->bytes_raw,
			 (unsigned long long)d->cfg->cache_bytes);
}

/* Replies StreamOpened with the stream's descriptors. */
static void ses_opened_reply(struct srv_conn *c, uint32_t id, struct ses_stream *ss,
			     const struct pipe_plan *plan, const struct cat_entry *e,
			     const struct stream_spec *sp, const char *note)
{
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__StreamOpened so = FEED__STREAM_OPENED__INIT;
	Feed__Schema schema;
	Feed__Field fields[FMT_MAX_FIELDS], *fptr[FMT_MAX_FIELDS];
	struct stream_fds fds;

	fmt_schema_to_pb(&plan->out, &schema, fields, fptr);
	so.stream = ss->id;
	so.schema = &schema;
	so.batches_per_epoch = stream_batches_per_epoch(ss->st);
	so.start_epoch = stream_start_epoch(ss->st);
	so.start_batch = sp->at_position ? 0 : sp->start_batch;
	so.pipeline = (char *)plan->canonical;
	so.pipeline_hash = plan->hash;
	so.dataset_version = (char *)e->info->version;
	so.note = (char *)note;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_STREAM_OPENED;
	reply.stream_opened = &so;
	stream_fds(ss->st, &fds);
	int list[5] = {fds.ctl, fds.data, fds.rel, fds.ready, fds.release};
	ses_send_fds(c, &reply, list, 5);
}

/* Builds the stream and its doorbell poll; on failure err says why. */
static int ses_stream_make(struct srv_conn *c, const struct cat_entry *e,
			   const struct pipe_plan *plan, const struct stream_spec *sp,
			   struct ses_stream **ret, struct feed_err *err)
{
	struct ses_stream *ss = calloc(1, sizeof(*ss));
	struct stream_fds fds;
	int rc;

	if (!ss)
		return feed_err_set(err, -ENOMEM, "open_stream: out of memory");
	rc = stream_new(e->ds, plan, sp, c->d->cache, c->d->pool, &ss->st, err);
	if (rc == 0)
		rc = ses_limits_after(c, stream_shm_bytes(ss->st), err);
	if (rc < 0) {
		stream_close(ss->st);
		free(ss);
		return rc;
	}
	ss->conn = c;
	ss->id = ++c->next_stream_id;
	ss->shm_bytes = stream_shm_bytes(ss->st);
	stream_fds(ss->st, &fds);
	uv_poll_init(&c->d->loop, &ss->poll, fds.release);
	ss->poll.data = ss;
	uv_poll_start(&ss->poll, UV_READABLE, ses_on_release);
	ss->next = c->streams;
	c->streams = ss;
	*ret = ss;
	return 0;
}

void ses_open_stream(struct srv_conn *c, uint32_t id, const Feed__OpenStream *o)
{
	struct feed_err err = {0};
	struct stream_spec sp;
	struct ses_stream *ss = NULL;
	char note[256];
	const struct cat_entry *e = ses_dataset(c, id, o->dataset);

	if (!e)
		return;
	ses_spec(o, &sp);
	struct pipe_plan *plan = malloc(sizeof(*plan));
	if (!plan) {
		ses_error(c, id, -ENOMEM, "open_stream: out of memory", SES_REFUSAL);
		return;
	}
	const char *text = NULL;
	int rc = ses_limits_before(c, &sp, &err);
	if (rc == 0)
		rc = ses_pipeline_text(c->d, o->pipeline, &text, &err);
	if (rc == 0 && (rc = pipe_plan_text(text, e->info->schema, plan, &err)) < 0)
		feed_err_prefix(&err, "pipeline");
	if (rc == 0 && o->resume.len)
		rc = ses_resume(o, e, plan, &sp, &err);
	if (rc == 0)
		rc = ses_stream_make(c, e, plan, &sp, &ss, &err);
	if (rc < 0) {
		feed_err_prefix(&err, "dataset '%s'", o->dataset);
		log_info(&c->d->log, SRV_CONN_FMT ": open_stream refused: %s", SRV_CONN_ARGS(c), err.msg);
		ses_error(c, id, rc, err.msg, SES_REFUSAL);
		free(plan);
		return;
	}
	ses_note(c->d, e, &sp, note, sizeof(note));
	ses_opened_reply(c, id, ss, plan, e, &sp, note);
	log_info(&c->d->log, SRV_CONN_FMT ": stream %u on '%s': batch %u, credits %u, pipeline '%s'",
		 SRV_CONN_ARGS(c), ss->id, o->dataset, sp.batch, sp.credits, plan->canonical);
	free(plan);
	stream_start(ss->st);
}

void ses_close_stream(struct srv_conn *c, uint32_t id, const Feed__CloseStream *q)
{
	char msg[80];

	for (struct ses_stream **p = &c->streams; *p; p = &(*p)->next) {
		struct ses_stream *ss = *p;
		if (ss->id != q->stream)
			continue;
		*p = ss->next;
		ses_stream_drop(ss);
		Feed__Reply reply = FEED__REPLY__INIT;
		Feed__StreamClosed sc = FEED__STREAM_CLOSED__INIT;
		sc.stream = q->stream;
		reply.id = id;
		reply.body_case = FEED__REPLY__BODY_STREAM_CLOSED;
		reply.stream_closed = &sc;
		ses_send_fds(c, &reply, NULL, 0);
		return;
	}
	snprintf(msg, sizeof(msg), "close_stream: no stream %u on this connection", q->stream);
	ses_error(c, id, -ENOENT, msg, SES_REFUSAL);
}
