/*
 * session_stream.c: the stream requests of a connection. Open: access,
 * pipeline, resume token, layout, and every per-user limit checked against
 * the layout's bytes before any memory exists (quota.h); then a worker
 * creates the stream's regions (delivery.h, dlv_join) and the reply goes
 * out from the completion on the loop. Close, and closing every stream when
 * the connection goes, including those still being opened. Loop thread
 * only; building batches happens on the workers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "delivery.h"
#include "devslots.h"
#include "dstate.h"
#include "fault_seam.h"
#include "feed_shm.h"
#include "fmt_pb.h"
#include "layout.h"
#include "order.h"
#include "pipeline.h"
#include "quota.h"
#include "session.h"
#include "session_group.h"
#include "session_mix.h"
#include "stats.h"
#include "wire.h"

#define SES_DEFAULT_CREDITS 4

/* A stream as the session sees it, from the open request on. */
struct ses_stream {
	struct ses_stream *next;   /* the session's streams or opening list */
	struct ses *se;            /* NULL once the connection went during the open */
	struct dstate *d;
	uid_t uid;                 /* whose quota holds it */
	uint64_t shm_bytes;        /* counted against the user's limit */
	uint32_t req_id;           /* the open request, answered when ready */
	uint32_t id;               /* stream id on the connection, once open */
	uint32_t batch, credits;   /* for the log */
	struct dlv *dlv;           /* delivery; closed when this goes, unless grp's */
	struct dlv_member *mem;    /* our member of it (a plain stream's only one) */
	struct ses_group *grp;     /* the group it joined (a reference), or NULL */
	bool listed;               /* in grp's open members */
	uint32_t group_members;    /* members when it joined, itself included */
	uint64_t start_epoch;      /* its first batch (a group's late joiner: mid-epoch) */
	uint64_t start_index;
	bool resumed;              /* opened with a resume token: a group member then
				    * starts at its own position (dlv_member_resume_at) */
	uint64_t resume_epoch, resume_position;
	bool joined;               /* dlv is a group's that was there before us */
	struct pipe_plan *plan;    /* owned until the reply is sent */
	const struct cat_entry *e; /* the dataset: a reference (a reload may retire it:
				    * we go on reading its files); a mixture's first source */
	struct ses_mix *mix;       /* a mixture (session_mix.h), or NULL */
	char note[256];            /* advice for the open reply */
	uv_poll_t poll;            /* the release doorbell, once open */
	bool poll_live;            /* poll initialised: uv_close() frees us */
	uint64_t bad_logged;       /* refused release entries already logged */
	uint64_t replaced_logged;  /* replaced samples (on_error skip) already logged */
	struct log_limit replaced_log; /* their warnings */
	bool error_logged;         /* the stream's stop was logged */
	struct stats_entry stat;   /* in the daemon's registry while open */
	char *pipeline;            /* canonical text, for stats (NULL: out of memory) */
	char job[WIRE_JOB_MAX + 1];/* OpenStream.job, for status and metrics */
	bool dev_asked;            /* OpenStream.device came */
	uint64_t dev_bytes;        /* device memory counted against the user's limit */
	struct dsl *dev;           /* its device slots (the delivery's), or NULL:
				    * dev_reason says why */
	char dev_reason[FEED_ERR_MSG_MAX];
	char jpeg[200];            /* its hybrid JPEG decode in words (ses_stream_read) */
	uint64_t slot_bytes;       /* one data slot, for status and metrics */
	uint32_t rank, world;      /* OpenStream's, for status */
	uint64_t epochs;           /* OpenStream.epochs (0: no end), for status */
};

/* Leaves the delivery: our member goes, then a plain stream's delivery
 * closes, or the group loses a reference (its last closes it). */
static void ses_stream_leave(struct ses_stream *ss)
{
	if (ss->grp && ss->listed)
		ses_group_member_gone(ss->grp, ss);
	ss->listed = false;
	dlv_member_leave(ss->mem);
	ss->mem = NULL;
	if (ss->grp)
		ses_group_unref(ss->grp);
	else
		dlv_close(ss->dlv);
	ss->grp = NULL;
	ss->dlv = NULL;
}

static void ses_stream_free(struct ses_stream *ss)
{
	stats_remove(&ss->d->stats, &ss->stat);  /* a member was never added */
	ses_stream_leave(ss);
	quota_stream_give(&ss->d->quota, ss->uid, ss->shm_bytes);
	if (ss->dev_bytes)
		quota_device_give(&ss->d->quota, ss->uid, ss->dev_bytes);
	free(ss->pipeline);
	free(ss->plan);
	ses_mix_free(ss->mix);
	cat_entry_unref(ss->e);  /* after the group's last word, which names it */
	free(ss);
}

static void ses_stream_closed(uv_handle_t *h)
{
	ses_stream_free(h->data);
}

/* Logs the samples replaced (on_error skip) since the last look, naming
 * the last batch's files; rate-limited like the release warnings. */
static void ses_stream_report_replaced(struct ses_stream *ss)
{
	struct dlv_stats st;
	char note[LOG_LIMIT_NOTE_MAX];
	uint64_t dropped;

	dlv_stats(ss->dlv, &st);
	if (st.replaced <= ss->replaced_logged)
		return;
	if (log_limit_allow(&ss->replaced_log, uv_now(&ss->d->loop), &dropped))
		log_warn(&ss->d->log, SRV_CONN_FMT ": stream %u: replaced %llu samples that failed "
			 "(%llu in all, on_error skip): %s%s", SRV_CONN_ARGS(ss->se->conn), ss->id,
			 (unsigned long long)(st.replaced - ss->replaced_logged),
			 (unsigned long long)st.replaced, st.replaced_what,
			 log_limit_note(dropped, note));
	ss->replaced_logged = st.replaced;
}

/* Logs what the stream refused from its client since the last look: the
 * release region is the client's to write, so this is where its mistakes
 * (or tampering) show. Rate-limited per connection: a client that rings
 * bad entries in a loop gets a few lines, then one a second saying how
 * many were left out; "in all" keeps the full count. */
void ses_stream_report(struct ses_stream *ss)
{
	struct srv_conn *c = ss->se->conn;
	struct dlv_member_stats st;
	char note[LOG_LIMIT_NOTE_MAX];
	uint64_t dropped;

	if (!ss->mem)
		return;
	dlv_member_stats(ss->mem, &st);
	if (st.bad_releases > ss->bad_logged &&
	    log_limit_allow(&ss->se->release_log, uv_now(&ss->d->loop), &dropped))
		log_warn(&ss->d->log, SRV_CONN_FMT ": stream %u: refused %llu release entries that "
			 "name no slot the client holds at that generation (%llu in all)%s",
			 SRV_CONN_ARGS(c), ss->id,
			 (unsigned long long)(st.bad_releases - ss->bad_logged),
			 (unsigned long long)st.bad_releases, log_limit_note(dropped, note));
	ss->bad_logged = st.bad_releases;
	ses_stream_report_replaced(ss);
	if (st.error && !ss->error_logged) {
		log_warn(&ss->d->log, SRV_CONN_FMT ": stream %u stopped: %s", SRV_CONN_ARGS(c),
			 ss->id, st.error_msg);
		ss->error_logged = true;
	}
}

void ses_stream_view(const struct ses_stream *ss, struct ses_stream_view *ret)
{
	*ret = (struct ses_stream_view){
		.id = ss->id, .uid = ss->uid, .pid = ss->se ? ss->se->conn->peer.pid : 0,
		.dataset = ss->e->cfg->name, .group = ss->grp ? ses_group_name(ss->grp) : "",
		.batch = ss->batch, .credits = ss->credits,
	};
	if (ss->mem)
		dlv_member_stats(ss->mem, &ret->m);
}

/* How a group looks at its streams (session_group.h). */
static const struct ses_group_member_ops ses_member_ops = {
	.view = ses_stream_view,
	.report = ses_stream_report,
};

/* Stops delivery at once, and frees the stream once libuv let go of the
 * poll. The poll goes first: uv_close() takes the doorbell out of epoll
 * right away, which it could no longer do once dlv_close() has closed our
 * descriptor, and the client's copy would keep the registration alive (a
 * client ringing it would then spin the loop). dlv_close() must not wait
 * for the close callback: on a stop, pool_stop() runs before the loop
 * turns again, and a delivery still open would keep its workers building
 * for a client that keeps releasing. */
static void ses_stream_drop(struct ses_stream *ss)
{
	ses_stream_report(ss);  /* what happened since the last doorbell */
	stats_remove(&ss->d->stats, &ss->stat);
	if (ss->poll_live) {
		uv_poll_stop(&ss->poll);
		uv_close((uv_handle_t *)&ss->poll, ses_stream_closed);
	}
	ses_stream_leave(ss);
	if (!ss->poll_live)
		ses_stream_free(ss);
}

static void ses_on_release(uv_poll_t *h, int status, int events)
{
	struct ses_stream *ss = h->data;

	dlv_member_on_release(ss->mem);
	ses_stream_report(ss);
}

void ses_free(struct ses *se)
{
	if (!se)
		return;
	ses_reload_forget(se);
	while (se->streams) {
		struct ses_stream *ss = se->streams;
		se->streams = ss->next;
		ses_stream_drop(ss);
	}
	/* their completion finds no session and frees them (ses_open_ready) */
	for (struct ses_stream *ss = se->opening; ss; ss = ss->next)
		ss->se = NULL;
	free(se);
}

/* The pipeline text a request names: a configured pipeline's, or its own.
 * A bare name (what a configured pipeline is called) that is neither a
 * configured pipeline nor op text is refused as a pipeline that does not
 * exist, listing those that do, not as an unknown op. */
static int ses_pipeline_text(const struct dstate *d, const char *asked, const char **ret,
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

/* Node order: nodes, deal, and the dealt unit: `window` blocks' worth of
 * samples, counted on the first block (every block holds as many records
 * when records have a fixed size, as feedpack packs them; with variable
 * records a unit may straddle a block boundary). */
static void ses_node_spec(const Feed__OpenStream *o, const struct cat_entry *e,
			  struct ord_spec *ord)
{
	uint64_t per_block = e->info->num_blocks ? e->block_first[1] - e->block_first[0] : 1;

	ord->nodes = o->nodes ? o->nodes : 1;
	ord->deal_fixed = o->node_deal == FEED__NODE_DEAL__NODE_DEAL_FIXED;
	ord->unit = (per_block ? per_block : 1) * ord->window;
}

static void ses_spec(const struct ses *se, const Feed__OpenStream *o, const struct cat_entry *e,
		     struct dlv_spec *sp)
{
	struct ord_spec *ord = &sp->sched.ord;

	memset(sp, 0, sizeof(*sp));
	sp->uid = se->conn->peer.uid;
	sp->credits = o->credits ? o->credits : SES_DEFAULT_CREDITS;
	sp->seed = o->seed;
	ord->n = e->info->num_samples;
	ord->seed = o->seed;
	snprintf(ord->version, sizeof(ord->version), "%s", e->info->version);
	ord->mode = o->order == FEED__ORDER__ORDER_FULL	 ? ORD_FULL :
		    o->order == FEED__ORDER__ORDER_BLOCK_WINDOW ? ORD_BLOCK_WINDOW :
		    o->order == FEED__ORDER__ORDER_NODE	 ? ORD_NODE :
								  ORD_SEQUENTIAL;
	ord->window = o->window ? o->window : ord->mode == ORD_NODE ? 1 : 8;
	if (ord->mode == ORD_NODE)
		ses_node_spec(o, e, ord);
	ord->block_first = e->block_first;
	ord->nblocks = e->info->num_blocks;
	ord->rank = o->rank;
	ord->world = o->world ? o->world : 1;
	ord->batch = o->batch;
	ord->drop_last = o->drop_last;
	ord->pad_last = o->pad_last;
	ord->eval = o->eval;
	sp->sched.epochs = o->epochs;
	sp->sched.start_epoch = o->start_epoch;
	sp->sched.start_batch = o->start_batch;
	sp->on_error = o->on_error;
	/* default: 0.1% of the epoch, at least 1 */
	sp->max_bad = o->max_bad ? o->max_bad : ord->n / 1000 > 0 ? ord->n / 1000 : 1;
}

_Static_assert(CFG_MAX_CREDITS == DLV_MAX_CREDITS && WIRE_CREDITS_MAX == DLV_MAX_CREDITS,
	       "the config, the wire check and the delivery agree on the most credits");

/* A token's parameter that must equal the request's. */
static int ses_resume_same(const char *what, uint64_t token, uint64_t asked, struct feed_err *err)
{
	if (token == asked)
		return 0;
	return feed_err_set(err, -EINVAL, "resume token: %s is %llu in the token, %llu in the request",
			    what, (unsigned long long)token, (unsigned long long)asked);
}

/* Node order: the token's deal must match; its node count and levels go
 * to the schedule (which may lay the rest out over another node count). */
static int ses_resume_node(const Feed__ResumeToken *t, struct dlv_spec *sp, struct feed_err *err)
{
	struct sched_spec *ss = &sp->sched;
	int rc;

	if ((rc = ses_resume_same("node_deal fixed", t->node_deal == FEED__NODE_DEAL__NODE_DEAL_FIXED,
				  ss->ord.deal_fixed, err)) < 0)
		return rc;
	if (t->nodes == 0 || t->n_level_nodes != t->n_level_positions ||
	    t->n_level_nodes > ORD_MAX_LEVELS)
		return feed_err_set(err, -EINVAL, "resume token: %zu node-count changes in its "
				    "epoch (at most %d), taken on %u nodes", t->n_level_nodes,
				    ORD_MAX_LEVELS, t->nodes);
	ss->start_nodes = t->nodes;
	ss->nlevels = (uint32_t)t->n_level_nodes;
	for (uint32_t i = 0; i < ss->nlevels; i++)
		ss->levels[i] = (struct ord_level){t->level_nodes[i], t->level_positions[i]};
	return 0;
}

/* Applies a resume token (feed.proto ResumeToken) to sp, or says why not. */
static int ses_resume(const Feed__OpenStream *o, const struct cat_entry *e, struct ses_mix *mix,
		      const struct pipe_plan *plan, struct dlv_spec *sp, struct feed_err *err)
{
	Feed__ResumeToken *t = NULL;
	int rc = wire_resume_decode(o->resume.data, o->resume.len, &t, err);

	if (rc < 0)
		return rc;
	if (!mix && t->mixture.len) {
		rc = feed_err_set(err, -EINVAL, "resume token: taken on a mixture, not a dataset");
		goto out;
	}
	if (mix && (rc = ses_mix_resume(mix, t, err)) < 0)
		goto out;
	if (!mix && strcmp(t->dataset_version, e->info->version)) {
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
	/* another batch size, like another world size, continues from the
	 * token's global position (schedule.h lays the rest of its epoch out
	 * from there when it is not a batch boundary) */
	if ((rc = ses_resume_same("seed", t->seed, o->seed, err)) < 0 ||
	    (rc = ses_resume_same("order", (uint64_t)t->order, (uint64_t)o->order, err)) < 0 ||
	    (rc = ses_resume_same("drop_last", t->drop_last, o->drop_last, err)) < 0 ||
	    (rc = ses_resume_same("pad_last", t->pad_last, o->pad_last, err)) < 0 ||
	    (rc = ses_resume_same("eval", t->eval, o->eval, err)) < 0)
		goto out;
	/* the token holds the window asked for; 0 is the mode's default */
	uint32_t twin = t->window ? t->window : o->order == FEED__ORDER__ORDER_NODE ? 1 : 8;
	if ((o->order == FEED__ORDER__ORDER_BLOCK_WINDOW || o->order == FEED__ORDER__ORDER_NODE) &&
	    (rc = ses_resume_same("window", twin, sp->sched.ord.window, err)) < 0)
		goto out;
	if (o->order == FEED__ORDER__ORDER_NODE && (rc = ses_resume_node(t, sp, err)) < 0)
		goto out;
	sp->sched.start_epoch = t->epoch;
	sp->sched.start_batch = 0;
	sp->sched.at_position = true;
	sp->sched.start_position = t->position;
out:
	wire_resume_free(t);
	return rc;
}

/* Advice for people, put in the open reply. */
static void ses_note(const struct dstate *d, const struct cat_entry *e, const struct dlv_spec *sp,
		     char *buf, size_t cap)
{
	buf[0] = '\0';
	if (sp->sched.ord.mode == ORD_FULL && !sp->sched.ord.eval && e->info->bytes_raw > d->cfg->cache_bytes)
		snprintf(buf, cap, "full shuffle over %llu decoded bytes with a %llu byte block "
			 "cache costs one block decode per sample; use block-window order or a "
			 "larger cache_bytes", (unsigned long long)e->info->bytes_raw,
			 (unsigned long long)d->cfg->cache_bytes);
	if (sp->sched.ord.mode == ORD_NODE && !sp->sched.ord.eval &&
	    e->info->bytes_raw / sp->sched.ord.nodes > d->cfg->cache_bytes)
		snprintf(buf, cap, "node order: this node's share is about %llu decoded bytes, more "
			 "than the %llu byte block cache; blocks will be read again within an "
			 "epoch; raise cache_bytes", (unsigned long long)(e->info->bytes_raw /
									 sp->sched.ord.nodes),
			 (unsigned long long)d->cfg->cache_bytes);
}

/* A resumed stream's position as its schedule counts it (schedule.h
 * sched_resume_layout(), the one place that decides), for the client's
 * tokens and sequence checks; a joiner's schedule is the group's. */
static void ses_opened_resume(struct ses_stream *ss, Feed__StreamOpened *so, uint32_t *nodes,
			      uint64_t *pos)
{
	struct ord_level lv[ORD_MAX_LEVELS];
	uint32_t n = 0;

	so->resumed = true;
	so->resume_epoch = ss->resume_epoch;
	so->resume_position = ss->resume_position;
	if (!ss->joined)
		so->resume_position = dlv_resume_layout(ss->dlv, lv, &n);
	for (uint32_t i = 0; i < n; i++) {
		nodes[i] = lv[i].nodes;
		pos[i] = lv[i].pos;
	}
	so->n_level_nodes = so->n_level_positions = n;
	so->level_nodes = nodes;
	so->level_positions = pos;
}

/* Replies StreamOpened with the stream's descriptors. */
static void ses_opened_reply(struct ses *se, struct ses_stream *ss)
{
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__StreamOpened so = FEED__STREAM_OPENED__INIT;
	Feed__Schema schema;
	Feed__Field fields[FMT_MAX_FIELDS], *fptr[FMT_MAX_FIELDS];
	struct dlv_fds fds;

	fmt_schema_to_pb(&ss->plan->out, &schema, fields, fptr);
	so.stream = ss->id;
	so.schema = &schema;
	so.batches_per_epoch = dlv_batches_per_epoch(ss->dlv);
	so.start_epoch = ss->start_epoch;
	so.start_batch = ss->start_index;
	if (ss->grp) {
		so.group = (char *)ses_group_name(ss->grp);
		so.group_depth = ses_group_depth(ss->grp);
		so.group_members = ss->group_members;
	}
	so.pipeline = (char *)ss->plan->canonical;
	so.pipeline_hash = ss->plan->hash;
	so.dataset_version = (char *)ss->e->info->version;
	so.note = ss->note;
	uint32_t lv_nodes[ORD_MAX_LEVELS];
	uint64_t lv_pos[ORD_MAX_LEVELS];
	if (ss->resumed)
		ses_opened_resume(ss, &so, lv_nodes, lv_pos);
	if (ss->mix) {
		so.mixture.data = ss->mix->state;
		so.mixture.len = ss->mix->state_len;
	}
	Feed__DeviceSlots ds = FEED__DEVICE_SLOTS__INIT;
	if (ss->dev_asked) {
		if (ss->dev)
			dsl_reply(ss->dev, &ds);
		else
			ds.reason = ss->dev_reason;
		so.device = &ds;
	}
	reply.id = ss->req_id;
	reply.body_case = FEED__REPLY__BODY_STREAM_OPENED;
	reply.stream_opened = &so;
	dlv_member_fds(ss->mem, &fds);
	int list[5] = {fds.ctl, fds.data, fds.rel, fds.ready, fds.release};
	ses_send_fds(se, &reply, list, 5);
}

/* The stream's counters, for the stats reply (stats.h). */
static void ses_stream_read(struct stats_entry *en, struct stats_sample *ret)
{
	struct ses_stream *ss = (struct ses_stream *)((char *)en - offsetof(struct ses_stream, stat));
	struct dlv_stats st;
	struct dlv_member_stats ms;

	dlv_stats(ss->dlv, &st);
	dlv_member_stats(ss->mem, &ms);
	*ret = (struct stats_sample){
		.batches = st.batches, .samples = st.samples, .bytes = st.bytes,
		.worker_ns = st.worker_ns, .jobs = st.jobs, .reader_wait_ns = ms.reader_wait_ns,
		.credits = st.credits, .credits_in_use = st.credits_in_use, .members = 1,
		.replaced = st.replaced, .detached = ms.detached,
		/* the device slots are the delivery's, alive while it is */
		.jpeg_decode = ss->dev ? dsl_jpeg_describe(ss->dev, ss->jpeg, sizeof(ss->jpeg)) : NULL,
	};
}

/* Lists the stream in the daemon's registry, from now until it goes. */
static void ses_stream_register(struct ses *se, struct ses_stream *ss)
{
	ss->pipeline = strdup(ss->plan->canonical);
	ss->stat = (struct stats_entry){
		.kind = "stream", .uid = ss->uid, .pid = se->conn->peer.pid, .conn = se->conn->id,
		.id = ss->id, .e = ss->e, .label = ss->mix ? ss->mix->label : NULL,
		.pipeline = ss->pipeline, .batch = ss->batch,
		.shm_bytes = ss->shm_bytes, .opened_ms = uv_now(&ss->d->loop), .read = ses_stream_read,
		.device = !ss->dev_asked ? "" : ss->dev ? "ipc" : ss->dev_reason,
		.device_bytes = ss->dev_bytes, .job = ss->job, .slot_bytes = ss->slot_bytes,
		.rank = ss->rank, .world = ss->world, .epochs = ss->epochs,
		.batches_per_epoch = dlv_batches_per_epoch(ss->dlv),
		.start_epoch = ss->start_epoch, .start_batch = ss->start_index,
	};
	stats_add(&ss->d->stats, &ss->stat);
}

/* Starts listening to the stream's release doorbell. */
static int ses_stream_poll(struct ses_stream *ss, struct feed_err *err)
{
	struct dlv_fds fds;
	int r;

	dlv_member_fds(ss->mem, &fds);
	if ((r = uv_poll_init(&ss->d->loop, &ss->poll, fds.release)) < 0)
		return feed_err_set(err, r, "release doorbell: uv_poll_init: %s", uv_strerror(r));
	ss->poll.data = ss;
	ss->poll_live = true;
	if ((r = uv_poll_start(&ss->poll, UV_READABLE, ses_on_release)) < 0)
		return feed_err_set(err, r, "release doorbell: uv_poll_start: %s", uv_strerror(r));
	return 0;
}

static void ses_unlink_opening(struct ses *se, struct ses_stream *ss)
{
	for (struct ses_stream **p = &se->opening; *p; p = &(*p)->next)
		if (*p == ss) {
			*p = ss->next;
			return;
		}
}

/* Logs a refused open at warning (a limit or access refusal is what an
 * operator looks for), rate-limited per connection: a client retrying a
 * refused open in a loop gets every answer, not a log line each. */
static void ses_log_refusal(struct ses *se, const char *msg)
{
	char note[LOG_LIMIT_NOTE_MAX];
	uint64_t dropped;

	if (log_limit_allow(&se->refusal_log, uv_now(&se->d->loop), &dropped))
		log_warn(&se->d->log, SRV_CONN_FMT ": open_stream refused: %s%s",
			 SRV_CONN_ARGS(se->conn), msg, log_limit_note(dropped, note));
}

/* Refuses an open: logs, answers, frees what the stream held. */
static void ses_open_refuse(struct ses *se, struct ses_stream *ss, int rc, const char *msg)
{
	char text[FEED_ERR_MSG_MAX + 80];

	if (ss->mix)
		snprintf(text, sizeof(text), "%s: %s", ss->mix->name, msg);
	else
		snprintf(text, sizeof(text), "dataset '%s': %s", ss->e->cfg->name, msg);
	ses_log_refusal(se, text);
	ses_error(se, ss->req_id, rc, text, SES_REFUSAL);
	ses_stream_drop(ss);
}

/* Logs a stream that just opened: the group it joined, or its own
 * delivery. */
static void ses_log_opened(const struct ses_stream *ss, const struct srv_conn *c)
{
	if (ss->grp)
		log_info(&ss->d->log, SRV_CONN_FMT ": stream %u on '%s' joins group '%s' (%u members) "
			 "at epoch %llu batch %llu: batch %u, depth %u, pipeline '%s'",
			 SRV_CONN_ARGS(c), ss->id, ss->e->cfg->name, ses_group_name(ss->grp),
			 ss->group_members, (unsigned long long)ss->start_epoch,
			 (unsigned long long)ss->start_index, ss->batch, ss->credits,
			 ss->plan->canonical);
	else
		log_info(&ss->d->log, SRV_CONN_FMT ": stream %u on '%s': batch %u, credits %u, "
			 "pipeline '%s'%s%s%s", SRV_CONN_ARGS(c), ss->id,
			 ss->mix ? ss->mix->label : ss->e->cfg->name, ss->batch,
			 ss->credits, ss->plan->canonical,
			 ss->dev ? ", device slots (CUDA IPC)" : "",
			 ss->dev_asked && !ss->dev ? ", host slots only: " : "",
			 ss->dev_asked && !ss->dev ? ss->dev_reason : "");
}

/* The stream's regions are made (or could not be): answer the open. Loop
 * thread, from the pool's completion. */
static void ses_open_answer(void *arg, int rc, const char *msg)
{
	struct ses_stream *ss = arg;
	struct ses *se = ss->se;
	struct feed_err err = {0};

	if (!se) {  /* the connection went meanwhile */
		ses_stream_free(ss);
		return;
	}
	struct srv_conn *c = se->conn;
	srv_conn_hold(c);  /* a failed reply closes c only once we are done */
	ses_unlink_opening(se, ss);
	if (rc == 0 && ss->resumed)  /* a group member: its own position, not the group's */
		dlv_member_resume_at(ss->mem, ss->resume_epoch, ss->resume_position);
	if (rc == 0 && ((rc = dlv_member_add(ss->mem, &ss->start_epoch, &ss->start_index, &err)) < 0 ||
			(rc = ses_stream_poll(ss, &err)) < 0))
		msg = err.msg;
	if (rc < 0) {
		ses_open_refuse(se, ss, rc, msg);
		srv_conn_unhold(c);
		return;
	}
	if (ss->dev_bytes) {  /* planned: made on the device, or why not */
		const char *why;
		if (!(ss->dev = dlv_device(ss->dlv, &why))) {
			snprintf(ss->dev_reason, sizeof(ss->dev_reason), "%s", why);
			quota_device_give(&ss->d->quota, ss->uid, ss->dev_bytes);
			ss->dev_bytes = 0;
		}
	}
	ss->id = ++se->next_stream_id;
	ss->next = se->streams;
	se->streams = ss;
	if (ss->grp) {  /* the first member starts the group */
		ss->group_members = ses_group_member_open(ss->grp, ss);
		ss->listed = true;
	}
	ses_opened_reply(se, ss);
	ses_log_opened(ss, c);
	if (!ss->grp)  /* a group is listed once, by its own entry (session_group.c) */
		ses_stream_register(se, ss);
	free(ss->plan);
	ss->plan = NULL;
	if (!ss->grp)
		dlv_start(ss->dlv);
	srv_conn_unhold(c);
}

/* dlv_join's completion: ses_open_answer(), marked for the tests. */
static void ses_open_ready(void *arg, int rc, const char *msg)
{
	fault_mark("open_stream/ready");  /* test builds: fault_seam.h */
	ses_open_answer(arg, rc, msg);
	fault_mark(NULL);
}

/* A group open: the canonical spec every member must match. */
static void ses_group_key_of(const Feed__OpenStream *o, const struct ses_stream *ss,
			     const struct dlv_spec *sp, struct ses_group_key *k)
{
	const struct ord_spec *ord = &sp->sched.ord;

	*k = (struct ses_group_key){
		.e = ss->e, .pipeline = ss->plan->canonical, .pipeline_hash = ss->plan->hash,
		.seed = o->seed, .batch = o->batch, .order = ord->mode,
		.window = ord->mode == ORD_BLOCK_WINDOW || ord->mode == ORD_NODE ? ord->window : 0,
		.nodes = ord->mode == ORD_NODE ? ord->nodes : 0,
		.deal_fixed = ord->mode == ORD_NODE && ord->deal_fixed,
		.rank = ord->rank, .world = ord->world, .drop_last = ord->drop_last,
		.pad_last = ord->pad_last, .eval = ord->eval, .on_error = sp->on_error,
		.max_bad = sp->max_bad, .shared = cfg_group_shared(ss->e->cfg, wire_str(o->group)),
	};
}

/* Packing: the stream's positions become rows, cut from the dataset's
 * documents in an order of its own (shuffled unless the stream reads in
 * order). concat: rows per epoch from the token count. pack: the count is
 * known once the epoch is placed, so the layout takes a bound (a piece
 * per document and per L tokens) laid out as eval, and the schedule ends
 * the epoch at the world's last whole batch (schedule.h). */
static int ses_rows(const struct cat_entry *e, const struct pipe_plan *plan, struct dlv_spec *sp,
		    struct feed_err *err)
{
	struct ord_spec *ord = &sp->sched.ord;
	const uint32_t *lens;
	uint64_t total;
	int rc;

	if (plan->pack.mode == PK_MODE_NONE)
		return 0;
	if (fmt_dataset_doc_lens(e->ds, &lens, &total) < 0)
		return feed_err_set(err, -EINVAL, "dataset '%s': no document lengths (%s): pack it "
				    "again with this feedpack", e->name, FMT_LENGTHS_FILE);
	rc = pk_source_init(&sp->sched.rows, &plan->pack, lens, e->info->num_samples, total,
			    e->info->version, ord->seed, ord->eval ? ORD_SEQUENTIAL : ord->mode,
			    err);
	if (rc < 0)
		return feed_err_prefix(err, "dataset '%s'", e->name);
	ord->mode = ORD_SEQUENTIAL;
	if (plan->pack.mode == PK_MODE_CONCAT) {
		ord->n = pk_concat_rows(&(struct pk_docs){.total = total}, plan->pack.seq_len);
		return 0;
	}
	ord->n = e->info->num_samples + total / plan->pack.seq_len + 1;
	ord->eval = true;
	ord->drop_last = ord->pad_last = false;
	return 0;
}

/* A group member's open: finds the group (ss->grp, or NULL when this
 * member creates it) and sets the spec to the group's. */
static int ses_open_group(struct ses *se, const Feed__OpenStream *o, struct ses_stream *ss,
			  struct dlv_spec *sp, struct feed_err *err)
{
	struct ses_group_key k;
	int rc;

	ses_group_key_of(o, ss, sp, &k);
	if ((rc = ses_group_find(se->d, wire_str(o->group), ss->uid, &k, &ss->grp, err)) < 0)
		return rc;
	/* the group's depth is its creator's: a joiner's says nothing.
	 * By default twice the credits: a member holding all it may
	 * take (or one detached, keeping what it took) then leaves the
	 * others room to go on. */
	uint64_t twice = 2ull * sp->credits, most = se->d->cfg->limits.max_credits;
	sp->credits = ss->grp ? ses_group_depth(ss->grp) :
		      o->group_depth ? o->group_depth :
		      (uint32_t)(twice < most ? twice : most > sp->credits ? most : sp->credits);
	sp->group = true;
	sp->sched.epochs = 0;  /* each member ends at its own epochs */
	return 0;
}

/* Everything an open needs before memory: plan, resume, group, layout,
 * limits. On success the user's quota holds the stream (a group member:
 * its own regions; ss->grp, when the group exists, holds a reference). */
static int ses_open_check(struct ses *se, const Feed__OpenStream *o, struct ses_stream *ss,
			  struct dlv_spec *sp, struct slot_layout *lay, struct feed_err *err)
{
	int rc;

	const char *text = NULL;

	struct fmt_schema mixed;
	const struct fmt_schema *schema = ss->e->info->schema;

	ses_spec(se, o, ss->e, sp);
	if (!ss->mix && o->samples_per_epoch)
		return feed_err_set(err, -EINVAL, "samples_per_epoch: only a mixture's epoch is "
				    "set so");
	if (ss->mix && (rc = ses_mix_spec(ss->mix, o, sp, &mixed, err)) < 0)
		return rc;
	if (ss->mix)
		schema = &mixed;
	if ((rc = ses_pipeline_text(se->d, wire_str(o->pipeline), &text, err)) < 0)
		return rc;
	if ((rc = pipe_plan_text(text, schema, ss->plan, err)) < 0) {
		/* the planner's own "pipeline: ..." messages say so already */
		if (strncmp(err->msg, "pipeline", 8))
			feed_err_prefix(err, "pipeline");
		return rc;
	}
	/* a mixture's sources are packed each over its own documents */
	rc = ss->mix ? ses_mix_rows(ss->mix, ss->plan, sp, err) : ses_rows(ss->e, ss->plan, sp, err);
	if (rc < 0)
		return rc;
	if (ss->mix && (rc = ses_mix_plan(ss->plan, &sp->mix_field, err)) < 0)
		return rc;
	if (o->resume.len && (rc = ses_resume(o, ss->e, ss->mix, ss->plan, sp, err)) < 0)
		return rc;
	ss->resumed = o->resume.len > 0;
	ss->resume_epoch = sp->sched.start_epoch;
	ss->resume_position = sp->sched.start_position;
	if (o->group.len && (rc = ses_open_group(se, o, ss, sp, err)) < 0)
		return rc;
	/* page-sized slots for every stream: a group's members map them
	 * copy-on-write, and a client detaches a held batch from its slot by
	 * replacing the slot's pages (client_detach.c) */
	if ((rc = layout_compute(&ss->plan->out, o->batch, sp->credits, lay, err)) < 0 ||
	    (rc = layout_page_slots(lay, err)) < 0)
		return rc;
	ss->shm_bytes = sp->group ? layout_member_bytes(lay) : layout_shm_bytes(lay);
	ss->batch = o->batch;
	ss->credits = sp->credits;
	return quota_stream_take(&se->d->quota, ss->uid, sp->credits, ss->shm_bytes,
				 &se->d->cfg->limits, err);
}

/* The stream's device slots (OpenStream.device) into *ret, or NULL with
 * ss->dev_reason saying why CUDA IPC cannot serve it: the stream then
 * opens with host slots alone. Only a request that does not fit the
 * batches (mean/std against their channels) refuses the open. */
static int ses_device(struct ses *se, const Feed__DeviceRequest *q, struct ses_stream *ss,
		      const struct dlv_spec *sp, const struct slot_layout *lay, struct dsl **ret,
		      struct feed_err *err)
{
	struct dsl_request r = {.dtype = (int)q->dtype, .layout = (int)q->layout};
	struct feed_err why = {0};
	int rc = 0;

	*ret = NULL;
	ss->dev_asked = true;
	if (sp->group) {
		feed_err_set(&why, -ENODEV, "a group's batches are shared host slots: CUDA IPC "
			     "serves streams outside groups");
	} else if (q->pid != se->conn->peer.pid) {
		feed_err_set(&why, -ENODEV, "the client is in another PID namespace (it is pid %d "
			     "to itself, %d to feedd): CUDA IPC needs one", q->pid,
			     (int)se->conn->peer.pid);
	} else {
		memcpy(r.uuid, q->uuid.data, sizeof(r.uuid)); /* 16 bytes: wire.c */
		r.nmean = (uint32_t)q->n_mean;
		r.nstd = (uint32_t)q->n_std;
		if (q->n_mean) /* protobuf-c leaves an empty array NULL */
			memcpy(r.mean, q->mean, q->n_mean * sizeof(float));
		if (q->n_std)
			memcpy(r.std, q->std, q->n_std * sizeof(float));
		uint64_t lim = se->d->cfg->limits.max_device_bytes;
		uint64_t held = quota_of(&se->d->quota, ss->uid).device_bytes;
		r.max_bytes = held < lim ? lim - held : 0;
		rc = dsl_plan(se->d->gpu, &r, &ss->plan->out, lay, ret, &why);
		if (rc == -EINVAL)
			return feed_err_set(err, rc, "device: %s", why.msg);
		/* counted now, before any device memory exists (as shared memory
		 * is): two opens at once cannot both slip under the limit */
		if (rc == 0 && quota_device_take(&se->d->quota, ss->uid, dsl_device_bytes(*ret),
						 &se->d->cfg->limits, &why) < 0) {
			dsl_free(*ret, NULL); /* only out of memory: max_bytes kept it within */
			*ret = NULL;
		} else if (rc == 0) {
			ss->dev_bytes = dsl_device_bytes(*ret);
		}
	}
	if (!*ret)
		snprintf(ss->dev_reason, sizeof(ss->dev_reason), "%s", why.msg);
	return 0;
}

/* dlv_spec.on_free: a delivery's dataset reference goes with it (any thread). */
static void ses_entry_unref(void *e)
{
	cat_entry_unref(e);
}

/* A mixture's delivery: its blend, and a reference on every source
 * (instead of the one dataset's) until it goes. */
static int ses_open_mix(struct ses_stream *ss, struct dlv_spec *sp, struct feed_err *err)
{
	void *refs = ses_mix_refs_get(ss->mix);
	int rc;

	if (!refs)
		return feed_err_set(err, -ENOMEM, "open_stream: out of memory");
	if ((rc = ses_mix_make(ss->mix, sp, err)) < 0) {
		ses_mix_refs_put(refs);
		return rc;
	}
	cat_entry_unref(ss->e);  /* the one ses_open_delivery took: refs hold it */
	sp->on_free = ses_mix_refs_put;
	sp->on_free_arg = refs;
	return 0;
}

/* The delivery the stream joins: its own, a group's that exists, or a new
 * group's. On failure the caller refuses (ses_open_refuse frees it). */
static int ses_open_delivery(struct ses *se, const Feed__OpenStream *o, struct ses_stream *ss,
			     const struct dlv_spec *spec, const struct slot_layout *lay,
			     struct feed_err *err)
{
	struct ses_group_key k;
	struct dlv_spec sp_dev = *spec, *sp = &sp_dev;
	int rc;

	if (o->device && (rc = ses_device(se, o->device, ss, sp, lay, &sp->dev, err)) < 0)
		return rc;
	sp->dev_ops = &dsl_dlv_ops;
	sp->limits = &se->d->limits;
	if (ss->grp) {
		ss->dlv = ses_group_dlv(ss->grp);
		ss->joined = true;
		return 0;
	}
	sp->on_free = ses_entry_unref;  /* the delivery's own reference on the dataset */
	sp->on_free_arg = (void *)cat_entry_ref(ss->e);
	if (ss->mix && (rc = ses_open_mix(ss, sp, err)) < 0) {
		cat_entry_unref(ss->e);
		dsl_free(sp->dev, NULL);
		return rc;
	}
	if ((rc = dlv_new(ss->e->ds, ss->plan, lay, sp, se->d->cache, se->d->pool, &ss->dlv,
			  err)) < 0) {
		sp->on_free(sp->on_free_arg);
		mixt_free(sp->mix);
		dsl_free(sp->dev, NULL);
		return rc;
	}
	if (!sp->group)
		return rc;
	ses_group_key_of(o, ss, sp, &k);
	if ((rc = ses_group_new(se->d, wire_str(o->group), ss->uid, &k, ss->dlv, sp->credits,
				layout_data_bytes(lay), &ses_member_ops, &ss->grp, err)) < 0) {
		dlv_close(ss->dlv);
		ss->dlv = NULL;
	} else {
		ses_group_set_job(ss->grp, ss->job);  /* a group is its creator's job */
	}
	return rc;
}

void ses_open_stream(struct ses *se, uint32_t id, const Feed__OpenStream *o)
{
	struct feed_err err = {0};
	struct dlv_spec sp;
	struct slot_layout lay;
	struct ses_mix *mix = NULL;
	const struct cat_entry *e = NULL;
	struct ses_stream *ss;

	if (ses_mix_asked(se, o) ? ses_mix_open(se, id, o, &mix) < 0 :
				   !(e = ses_dataset(se, id, wire_str(o->dataset))))
		return;  /* answered */
	if (mix)
		e = mix->e[0];
	if (!(ss = calloc(1, sizeof(*ss))) || !(ss->plan = malloc(sizeof(*ss->plan)))) {
		free(ss);
		ses_mix_free(mix);
		ses_error(se, id, -ENOMEM, "open_stream: out of memory", SES_REFUSAL);
		return;
	}
	ss->mix = mix;
	ss->se = se;
	ss->d = se->d;
	ss->e = cat_entry_ref(e);
	ss->req_id = id;
	ss->uid = se->conn->peer.uid;
	snprintf(ss->job, sizeof(ss->job), "%s", wire_str(o->job));  /* checked by wire.c */
	int rc = ses_open_check(se, o, ss, &sp, &lay, &err);
	if (rc < 0) {
		ses_group_unref(ss->grp);
		ss->shm_bytes = 0;
		if (ss->mix)
			feed_err_prefix(&err, "%s", ss->mix->name);
		else
			feed_err_prefix(&err, "dataset '%s'", ss->e->name);
		ses_log_refusal(se, err.msg);
		ses_error(se, id, rc, err.msg, SES_REFUSAL);
		free(ss->plan);
		ses_mix_free(ss->mix);
		cat_entry_unref(ss->e);
		free(ss);
		return;
	}
	ss->slot_bytes = lay.slot_bytes;
	ss->rank = o->rank;
	ss->world = o->world ? o->world : 1;
	ss->epochs = o->epochs;
	/* from here the quota holds it: ses_stream_free() gives it back */
	uint32_t credits = o->credits ? o->credits : SES_DEFAULT_CREDITS;
	if ((rc = ses_open_delivery(se, o, ss, &sp, &lay, &err)) < 0 ||
	    (rc = dlv_join(ss->dlv, o->epochs, credits, ses_open_ready, ss, &ss->mem, &err)) < 0) {
		ses_open_refuse(se, ss, rc, err.msg);
		return;
	}
	ses_note(se->d, e, &sp, ss->note, sizeof(ss->note));
	ss->next = se->opening;
	se->opening = ss;
}

void ses_close_stream(struct ses *se, uint32_t id, const Feed__CloseStream *q)
{
	char msg[80];

	for (struct ses_stream **p = &se->streams; *p; p = &(*p)->next) {
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
		ses_send_fds(se, &reply, NULL, 0);
		return;
	}
	snprintf(msg, sizeof(msg), "close_stream: no stream %u on this connection", q->stream);
	ses_error(se, id, -ENOENT, msg, SES_REFUSAL);
}
