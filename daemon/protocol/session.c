/*
 * session.c: the protocol state of a connection and the request handlers
 * (see session.h; the bad-input policy is in wire.h). Loop thread only;
 * never does socket I/O and never blocks.
 */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "devslots.h"
#include "fault_seam.h"
#include "hybrid.h"
#include "pool.h"
#include "quota.h"
#include "stats.h"

/* Encodes and sends reply; a reply too large becomes an Error. */
static void ses_send(struct ses *se, Feed__Reply *reply)
{
	ses_send_fds(se, reply, NULL, 0);
}

static void ses_hello(struct ses *se, uint32_t id, const Feed__Hello *h)
{
	char msg[160];
	uint32_t lo = h->min_version > WIRE_PROTO_MIN ? h->min_version : WIRE_PROTO_MIN;
	uint32_t hi = h->max_version < WIRE_PROTO_MAX ? h->max_version : WIRE_PROTO_MAX;

	if (se->hello_done) {
		ses_error(se, id, -EPROTO, "hello: already done on this connection", SES_MALFORMED);
		return;
	}
	if (lo > hi) {
		snprintf(msg, sizeof(msg), "hello: no common protocol version: client speaks %u..%u, "
			 "feedd speaks %u..%u", h->min_version, h->max_version, WIRE_PROTO_MIN,
			 WIRE_PROTO_MAX);
		ses_error(se, id, -EPROTONOSUPPORT, msg, SES_FATAL);
		return;
	}
	se->hello_done = true;
	se->version = hi;
	snprintf(se->client_name, sizeof(se->client_name), "%s", wire_str(h->client_name));
	log_info(&se->d->log, SRV_CONN_FMT ": '%s' connected, protocol %u", SRV_CONN_ARGS(se->conn),
		 se->client_name, se->version);

	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__HelloReply hr = FEED__HELLO_REPLY__INIT;
	hr.version = se->version;
	hr.server_name = "feedd";
	hr.server_version = FEEDD_VERSION;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_HELLO;
	reply.hello = &hr;
	ses_send(se, &reply);
}

/* Replies with the datasets in list (n of them). */
static void ses_send_list(struct ses *se, uint32_t id, Feed__DatasetInfo **list, size_t n)
{
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__DatasetList dl = FEED__DATASET_LIST__INIT;

	dl.n_datasets = n;
	dl.datasets = list;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_DATASETS;
	reply.datasets = &dl;
	ses_send(se, &reply);
}

static void ses_list(struct ses *se, uint32_t id)
{
	const struct cat *cat = se->d->cat;
	Feed__DatasetInfo **list = calloc(cat->n + 1, sizeof(*list));
	size_t n = 0;

	if (!list) {
		ses_error(se, id, -ENOMEM, "list datasets: out of memory", SES_REFUSAL);
		return;
	}
	for (size_t i = 0; i < cat->n; i++)  /* a pending one has no schema to list yet */
		if (ses_may_read(se, cat->e[i]->cfg) && cat_entry_state(cat->e[i], NULL) == CAT_READY)
			list[n++] = (Feed__DatasetInfo *)&cat->e[i]->pb;
	ses_send_list(se, id, list, n);
	free(list);
}

static void ses_info(struct ses *se, uint32_t id, const Feed__DatasetQuery *q)
{
	const struct cat_entry *e = ses_dataset(se, id, wire_str(q->name));

	if (!e)
		return;
	Feed__DatasetInfo info = e->pb, *one = &info; /* shallow: points into e */
	if (q->want_path) {
		const char *path = fmt_dataset_sample_path(e->ds, q->sample);
		char msg[FEED_ERR_MSG_MAX];
		if (q->sample >= e->info->num_samples) {
			snprintf(msg, sizeof(msg), "dataset '%s': sample %llu out of range (%llu samples)",
				 e->name, (unsigned long long)q->sample,
				 (unsigned long long)e->info->num_samples);
			ses_error(se, id, -ERANGE, msg, SES_REFUSAL);
			return;
		}
		if (!path) {
			snprintf(msg, sizeof(msg), "dataset '%s': no sample paths recorded (only "
				 "feedpack imagefolder records them)", e->name);
			ses_error(se, id, -ENOENT, msg, SES_REFUSAL);
			return;
		}
		info.sample_path = (char *)path;
	}
	ses_send_list(se, id, &one, 1);
}

#define SES_MAX_GPUS 16   /* GPUs a status reply lists (the driver's CUDRV_MAX_DEVICES) */

static void ses_stats(struct ses *se, uint32_t id)
{
	struct dstate *d = se->d;
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__Stats st = FEED__STATS__INIT;
	struct stats_sources src = {.reg = &d->stats, .cat = d->cat, .cache = d->cache,
				    .self_uid = d->self_uid, .now_ms = uv_now(&d->loop)};
	void *mem;

	if (stats_reply(&src, &se->conn->peer, &st, &mem) < 0) {
		ses_error(se, id, -ENOMEM, "stats: out of memory", SES_REFUSAL);
		return;
	}
	st.server_version = FEEDD_VERSION;
	st.protocol_version = se->version;
	st.uptime_ms = uv_now(&d->loop) - d->start_ms;
	st.connections = srv_connections(d->srv);
	st.user_connections = quota_of(&d->quota, se->conn->peer.uid).conns;
	st.workers = pool_size(d->pool);
	st.requests = d->requests;
	st.rejected = d->rejected;
	char *pending[CFG_MAX_DATASETS];
	for (size_t i = 0; i < d->cat->n && st.n_pending < CFG_MAX_DATASETS; i++)
		if (ses_may_read(se, d->cat->e[i]->cfg) &&
		    cat_entry_state(d->cat->e[i], NULL) == CAT_PENDING)
			pending[st.n_pending++] = (char *)d->cat->e[i]->cfg->name;
	st.pending = pending;
	struct dsl_dev_info dev[SES_MAX_GPUS];
	Feed__GpuStatus gs[SES_MAX_GPUS], *gp[SES_MAX_GPUS];
	st.n_gpus = (size_t)dsl_gpu_devices(d->gpu, dev, SES_MAX_GPUS);
	for (size_t i = 0; i < st.n_gpus; i++) {
		feed__gpu_status__init(&gs[i]);
		gs[i].ordinal = (uint32_t)dev[i].ordinal;
		gs[i].name = (char *)dev[i].name;
		gs[i].allowed = dev[i].allowed;
		gs[i].context = dev[i].context;
		gs[i].failed = dev[i].failed;
		gs[i].slot_bytes = dev[i].slot_bytes;
		gp[i] = &gs[i];
	}
	st.gpus = gp;
	char jpeg[400];
	hyb_describe(jpeg, sizeof(jpeg));
	st.jpeg_decode = jpeg;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_STATS;
	reply.stats = &st;
	ses_send(se, &reply);
	stats_reply_free(mem);
}

static void ses_dispatch(struct ses *se, const Feed__Request *req)
{
	log_debug(&se->d->log, SRV_CONN_FMT ": request %u kind %d", SRV_CONN_ARGS(se->conn), req->id,
		  (int)req->body_case);
	if (!se->hello_done && req->body_case != FEED__REQUEST__BODY_HELLO) {
		ses_error(se, req->id, -EPROTO, "hello first: no request is served before hello",
			  SES_MALFORMED);
		return;
	}
	switch (req->body_case) {
	case FEED__REQUEST__BODY_HELLO:
		ses_hello(se, req->id, req->hello);
		break;
	case FEED__REQUEST__BODY_LIST_DATASETS:
		ses_list(se, req->id);
		break;
	case FEED__REQUEST__BODY_DATASET_INFO:
		ses_info(se, req->id, req->dataset_info);
		break;
	case FEED__REQUEST__BODY_STATS:
		ses_stats(se, req->id);
		break;
	case FEED__REQUEST__BODY_OPEN_STREAM:
		ses_open_stream(se, req->id, req->open_stream);
		break;
	case FEED__REQUEST__BODY_CLOSE_STREAM:
		ses_close_stream(se, req->id, req->close_stream);
		break;
	case FEED__REQUEST__BODY_RELOAD:
		ses_reload(se, req->id, req->reload);
		break;
	case FEED__REQUEST__BODY_LIST_OPS:
		ses_list_ops(se, req->id);
		break;
	default:  /* wire_request_check() let an unknown kind through: a bug */
		ses_error(se, req->id, -EOPNOTSUPP, "unknown request", SES_MALFORMED);
		break;
	}
}

struct ses *ses_new(struct srv_conn *conn)
{
	struct ses *se = calloc(1, sizeof(*se));

	if (se) {
		se->conn = conn;
		se->d = conn->d;
	}
	return se;
}

void ses_packet(struct ses *se, const uint8_t *buf, const struct wire_in *in)
{
	struct feed_err err = {0};
	Feed__Request *req = NULL;
	char msg[120];

	if (in->truncated) {
		snprintf(msg, sizeof(msg), "request of %zu bytes exceeds the %d byte limit",
			 in->len, WIRE_REQUEST_MAX);
		ses_error(se, 0, -EMSGSIZE, msg, SES_FATAL);
		return;
	}
	int r = wire_request_decode(buf, in->len, &req, &err);
	uint32_t id = r == 0 ? req->id : 0;
	if (in->nfds || in->ctrunc) {
		snprintf(msg, sizeof(msg), "unexpected file descriptor%s (%u closed); request ignored",
			 in->ctrunc ? "s, more than fit" : "", in->nfds);
		ses_error(se, id, -EPROTO, msg, SES_MALFORMED);
	} else if (r < 0) {  /* out of memory: a refusal, the connection lives on */
		ses_error(se, 0, r, err.msg, r == -ENOMEM ? SES_REFUSAL : SES_FATAL);
	} else if (wire_request_check(req, &err) < 0) {
		ses_error(se, id, err.code, err.msg, SES_MALFORMED);
	} else {
		fault_mark_request(req);  /* test builds: fault_seam.h */
		ses_dispatch(se, req);
		fault_mark(NULL);
	}
	wire_request_free(req);
}

const struct srv_handlers ses_handlers = {
	.open = ses_new,
	.packet = ses_packet,
	.close = ses_free,
};
