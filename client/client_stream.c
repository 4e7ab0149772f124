/*
 * client_stream.c: libfeedclient's streams (feed/stream.h): the options
 * and the open request, the open reply's schema, opening (the regions are
 * checked by client_region.c before anything uses them), closing, and a
 * batch's device slot (feed_batch_device). The other jobs of the stream
 * module have their own files (client_stream.h lists them); the hooks
 * through which the parts above a stream (client_gpu.c) keep released
 * batches and follow its regions are in client_stream_base.c.
 *
 * Threads: open and close on the caller's thread, one at a time per
 * stream (feed_next()'s); the hooks are registered there and read on any
 * thread. Takes no lock; st_free runs when no other thread may use st.
 * Must never: print, or keep a stream feedd opened for us that we will
 * not use without telling feedd.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_stream.h"
#include "dtype.h"
#include "feed_lock.h"
#include "feed_text.h"

#define ST_MAX_CREDITS 65536     /* sanity bound before asking the daemon */
#define ST_PIPELINE_MAX 4096     /* bytes of pipeline text */
#define ST_DEFAULT_CREDITS 4

/* ------------------------------------------------------------------ */
/* Options and the request                                             */

static int st_check_opts(struct feed_conn *conn, const struct feed_stream_opts *o)
{
	uint32_t world = o->world ? o->world : 1;

	/* a mixture's sources name the datasets: dataset may be NULL or "" */
	bool named = o->dataset && *o->dataset;
	if ((named || !o->nmixture) && (!named || strlen(o->dataset) > 63))
		return cl_fail(conn, -EINVAL, "option dataset: a name of 1 to 63 bytes is required");
	int r = st_mixture_check(conn, o);
	if (r < 0)
		return r;
	if (o->batch == 0)
		return cl_fail(conn, -EINVAL, "option batch: must be at least 1");
	if (o->credits > ST_MAX_CREDITS)
		return cl_fail(conn, -EINVAL, "option credits: %u exceeds %u", o->credits,
			       ST_MAX_CREDITS);
	if (o->order != FEED_ORDER_SEQUENTIAL && o->order != FEED_ORDER_FULL &&
	    o->order != FEED_ORDER_BLOCK_WINDOW && o->order != FEED_ORDER_NODE)
		return cl_fail(conn, -EINVAL, "option order: %d is not a FEED_ORDER_* value",
			       o->order);
	if (o->order == FEED_ORDER_NODE) {
		uint32_t nodes = o->nodes ? o->nodes : 1;
		if (world % nodes)
			return cl_fail(conn, -EINVAL, "option nodes: %u nodes do not divide world %u",
				       nodes, world);
		if (o->node != o->rank / (world / nodes))
			return cl_fail(conn, -EINVAL, "option node: rank %u of world %u on %u nodes "
				       "sits on node %u, not node %u", o->rank, world, nodes,
				       o->rank / (world / nodes), o->node);
		if (o->node_deal != FEED_NODE_DEAL_ROTATE && o->node_deal != FEED_NODE_DEAL_FIXED)
			return cl_fail(conn, -EINVAL, "option node_deal: %d is not a "
				       "FEED_NODE_DEAL_* value", o->node_deal);
	}
	if (o->rank >= world)
		return cl_fail(conn, -EINVAL, "option rank: %u must be below world %u", o->rank,
			       world);
	if (o->group && (!*o->group || strlen(o->group) > 63))
		return cl_fail(conn, -EINVAL, "option group: a name of 1 to 63 bytes, or NULL");
	if (o->group_depth && !o->group)
		return cl_fail(conn, -EINVAL, "option group_depth: only with a group");
	if (o->on_error != FEED_ON_ERROR_FAIL && o->on_error != FEED_ON_ERROR_SKIP)
		return cl_fail(conn, -EINVAL, "option on_error: %d is not FEED_ON_ERROR_FAIL or "
			       "FEED_ON_ERROR_SKIP", o->on_error);
	if (o->max_bad && o->on_error != FEED_ON_ERROR_SKIP)
		return cl_fail(conn, -EINVAL, "option max_bad: only with FEED_ON_ERROR_SKIP");
	if (o->pipeline && strlen(o->pipeline) > ST_PIPELINE_MAX)
		return cl_fail(conn, -EINVAL, "option pipeline: %zu bytes, at most %d",
			       strlen(o->pipeline), ST_PIPELINE_MAX);
	return 0;
}

/* The job this process belongs to (feed_stream_open() in stream.h says
 * which variables), into job: "" when none is set. */
static void st_job_id(char job[FEED_JOB_MAX + 1])
{
	static const char *const vars[] = {"FEED_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"};
	const char *v = NULL;
	size_t i = 0;

	for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]) && !(v && *v); k++)
		v = getenv(vars[k]);
	for (; v && v[i] && i < FEED_JOB_MAX; i++)
		job[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
	job[i] = '\0';
}

static void st_request(const struct feed_stream_opts *o, Feed__OpenStream *os)
{
	os->dataset = feed_pb_text(o->dataset);
	os->batch = o->batch;
	os->credits = o->credits ? o->credits : ST_DEFAULT_CREDITS;
	os->epochs = o->epochs;
	os->drop_last = o->drop_last;
	os->pad_last = o->pad_last;
	os->seed = o->seed;
	os->order = st_order(o->order);
	os->window = o->window;
	if (o->order == FEED_ORDER_NODE) {
		os->nodes = o->nodes;
		os->node = o->node;
		os->node_deal = o->node_deal == FEED_NODE_DEAL_FIXED ? FEED__NODE_DEAL__NODE_DEAL_FIXED :
								       FEED__NODE_DEAL__NODE_DEAL_ROTATE;
	}
	os->rank = o->rank;
	os->world = o->world;
	os->eval = o->eval;
	os->pipeline = feed_pb_text(o->pipeline);
	os->start_epoch = o->start_epoch;
	os->start_batch = o->start_batch;
	os->group = feed_pb_text(o->group);
	os->group_depth = o->group_depth;
	os->on_error = o->on_error;
	os->max_bad = o->max_bad;
}

/* Tells the daemon to drop stream id. A daemon already gone is no error:
 * it has dropped everything itself. */
static int st_tell_close(struct feed_conn *conn, uint32_t id)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__CloseStream cs = FEED__CLOSE_STREAM__INIT;
	Feed__Reply *rep = NULL;

	if (conn->sock < 0)
		return 0;
	cs.stream = id;
	req.body_case = FEED__REQUEST__BODY_CLOSE_STREAM;
	req.close_stream = &cs;
	int r = cl_call(conn, &req, &rep);
	if (r == -ECONNRESET || r == -ENOTCONN)
		return 0;
	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_STREAM_CLOSED || rep->stream_closed->stream != id)
		r = cl_bad_reply(conn, "expected stream_closed");
	feed__reply__free_unpacked(rep, NULL);
	return r;
}

/* ------------------------------------------------------------------ */
/* The open reply: info                                                */

static char *st_copy(char **pool, const char *s)
{
	char *out = *pool;
	size_t n = strlen(s) + 1;

	memcpy(out, s, n);
	*pool += n;
	return out;
}

/* One allocation holds the fields and every string of st->info. */
static int st_info(struct feed_stream *st, const Feed__StreamOpened *so)
{
	const Feed__Schema *sc = so->schema;
	size_t strings = strlen(so->pipeline) + strlen(so->dataset_version) + strlen(so->note) +
			 strlen(so->group) + 4;

	if (!sc || sc->n_fields == 0 || sc->n_fields > FEED_SHM_MAX_FIELDS)
		return cl_bad_reply(st->conn, "stream_opened with no schema or too many fields");
	for (size_t i = 0; i < sc->n_fields; i++) {
		const Feed__Field *f = sc->fields[i];
		if (f->n_shape > FEED_MAX_RANK || feed_dtype_size(f->dtype) == 0)
			return cl_bad_reply(st->conn, "stream_opened with a field out of range");
		strings += strlen(f->name) + 1;
	}
	size_t head = sc->n_fields * sizeof(struct feed_field);
	struct feed_field *fs = calloc(1, head + strings);
	if (!fs)
		return cl_fail(st->conn, -ENOMEM, "out of memory for the stream's schema");
	char *pool = (char *)fs + head;
	for (size_t i = 0; i < sc->n_fields; i++) {
		const Feed__Field *f = sc->fields[i];
		fs[i].name = st_copy(&pool, f->name);
		fs[i].dtype = f->dtype;
		fs[i].dtype_name = feed_dtype_name(f->dtype);
		fs[i].elem_size = feed_dtype_size(f->dtype);
		fs[i].rank = (uint32_t)f->n_shape;
		for (size_t k = 0; k < f->n_shape; k++)
			fs[i].shape[k] = f->shape[k];
		fs[i].variable = f->variable;
		fs[i].max_bytes = f->max_bytes;
	}
	st->info_mem = fs;
	st->info.id = so->stream;
	st->info.num_fields = (uint32_t)sc->n_fields;
	st->info.fields = fs;
	st->info.batches_per_epoch = so->batches_per_epoch;
	st->info.start_epoch = so->start_epoch;
	st->info.start_batch = so->start_batch;
	st->info.pipeline = st_copy(&pool, so->pipeline);
	st->info.pipeline_hash = so->pipeline_hash;
	st->info.dataset_version = st_copy(&pool, so->dataset_version);
	st->info.note = st_copy(&pool, so->note);
	st->info.group = st_copy(&pool, so->group);
	st->info.group_depth = so->group_depth;
	st->info.group_members = so->group_members;
	st->group = so->group[0] != '\0';
	return 0;
}

/* Unmaps, closes and frees; st may be partly built. */
void st_free(struct feed_stream *st)
{
	struct st_inc *inc = st_inc_now(st);

	for (int i = 0; i < ST_NFDS; i++)
		if (st->fd[i] >= 0)
			close(st->fd[i]);
	while (inc) {
		struct st_inc *next = inc->next;
		st_inc_free(st, inc);
		inc = next;
	}
	pthread_mutex_destroy(&st->rel_lock);
	free(st->info_mem);
	free(st->opts_mem);
	free(st->mix_mem);
	free(st);
}

/* A stream for conn's reply of fds, with its first incarnation; NULL when
 * out of memory (then the fds are closed). */
static struct feed_stream *st_new(struct feed_conn *conn, const int fds[ST_NFDS], uint32_t id)
{
	struct feed_stream *st = calloc(1, sizeof(*st));
	struct st_inc *inc = calloc(1, sizeof(*inc));

	if (!st || !inc) {
		free(st);
		free(inc);
		for (int i = 0; i < ST_NFDS; i++)
			close(fds[i]);
		return NULL;
	}
	memcpy(st->fd, fds, sizeof(st->fd));
	st->conn = conn;
	st->info.id = id;
	pthread_mutex_init(&st->rel_lock, NULL);
	atomic_init(&st->cur, inc);
	atomic_init(&st->reap, false);
	return st;
}

/* The open reply's answer to a device request: the incarnation's ipc
 * when granted and the handles open here (0); else why (feedd's or this
 * process's words) and 0, or 1 when feedd granted slots this process
 * cannot open (the caller reopens without them); -EPROTO / -ENOMEM. */
static int st_device(struct feed_stream *st, const struct feed_stream_opts *opts,
		     const Feed__OpenStream *os, const Feed__StreamOpened *so, char *why,
		     size_t cap)
{
	if (!os->device)
		return 0; /* not asked, or why says this process cannot */
	if (!so->device)
		return cl_bad_reply(st->conn, "stream_opened without the device slots asked for");
	if (!so->device->ipc) {
		snprintf(why, cap, "feedd: %s", so->device->reason);
		return 0;
	}
	struct st_inc *inc = st_inc_now(st);
	int r = cl_ipc_open(st->conn, &opts->device, so->device, st->nslots, st->nfields,
			    st->batch, &inc->ipc, why, cap);
	return r < 0 ? r : inc->ipc ? 0 : 1;
}

/* The stream of the open reply rep with its descriptors fds (owned from
 * here): schema, regions, batches, device slots. st_device's 0 or 1 with
 * *ret set, or a negative code with nothing left. */
static int st_from_reply(struct feed_conn *conn, const struct feed_stream_opts *opts,
			 const Feed__OpenStream *os, const Feed__StreamOpened *so,
			 const int fds[ST_NFDS], char *why, size_t cap, struct feed_stream **ret)
{
	struct feed_stream *st = st_new(conn, fds, so->stream);
	int r;

	if (!st)
		return cl_fail(conn, -ENOMEM, "out of memory for a stream");
	if ((r = st_info(st, so)) < 0 || (r = st_mixture_state(st, so)) < 0 ||
	    (r = st_map(st, os->batch, os->credits)) < 0 ||
	    (r = st_batches_new(st)) < 0)
		goto fail;
	st->conn_opens = conn->opens;
	st->world = opts->world ? opts->world : 1;
	st->pos_epoch = st->info.start_epoch;
	st->pos_position = st->info.start_batch * st->batch * st->world;
	if (so->resumed && st->info.group_members <= 1) /* a joiner starts where told */
		st_resume_position(st, so);
	if ((r = st_device(st, opts, os, so, why, cap)) < 0)
		goto fail;
	*ret = st;
	return r;
fail:
	st_free(st);
	return r;
}

/* The daemon holds the stream of rep, which failed here with r: tells it
 * to close it, keeping our message; frees rep, returns r. */
static int st_refuse(struct feed_conn *conn, Feed__Reply *rep, int r)
{
	char msg[CL_ERRMSG_MAX];
	uint32_t id = rep->stream_opened->stream;

	feed__reply__free_unpacked(rep, NULL);
	memcpy(msg, conn->errmsg, sizeof(msg));
	st_tell_close(conn, id);
	memcpy(conn->errmsg, msg, sizeof(msg));
	return r;
}

/* Opens a stream on conn: the request, the reply, the regions; no copy of
 * opts is kept (feed_stream_open keeps one, which a reopening reuses). */
int st_open(struct feed_conn *conn, const struct feed_stream_opts *opts, struct feed_stream **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream os = FEED__OPEN_STREAM__INIT;
	Feed__DeviceRequest dr = FEED__DEVICE_REQUEST__INIT;
	Feed__MixtureSource ms[FEED_MIXTURE_MAX], *mp[FEED_MIXTURE_MAX];
	Feed__Reply *rep = NULL;
	struct feed_stream *st = NULL;
	uint8_t uuid[16];
	char why[512] = "", job[FEED_JOB_MAX + 1];
	int fds[ST_NFDS], r;

	if (!conn || !opts || !ret)
		return -EINVAL;
	if ((r = st_check_opts(conn, opts)) < 0)
		return r;
	st_request(opts, &os);
	st_mixture_request(opts, &os, ms, mp);
	st_job_id(job);
	os.job = feed_pb_text(job);
	if (opts->device.enable &&
	    (r = cl_ipc_request(conn, &opts->device, &dr, uuid, why, sizeof(why))) < 0)
		return r;
	if (opts->device.enable && r == 1)
		os.device = &dr;
	if (opts->resume) {
		os.resume.data = (uint8_t *)opts->resume;
		os.resume.len = opts->resume_len;
	}
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &os;
	if ((r = cl_call_fds(conn, &req, &rep, fds, ST_NFDS)) < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_STREAM_OPENED) {
		for (int i = 0; i < ST_NFDS; i++)
			close(fds[i]);
		feed__reply__free_unpacked(rep, NULL);
		return cl_bad_reply(conn, "expected stream_opened");
	}
	if ((r = st_from_reply(conn, opts, &os, rep->stream_opened, fds, why, sizeof(why), &st)) < 0)
		return st_refuse(conn, rep, r);
	feed__reply__free_unpacked(rep, NULL);
	if (r == 1) {
		/* granted, but the handles would not open here: feedd must not
		 * convert for nobody. The same stream again, host slots only. */
		struct feed_stream_opts host = *opts;
		host.device.enable = false;
		st_tell_close(conn, st->info.id);
		st_free(st);
		if ((r = st_open(conn, &host, &st)) < 0)
			return r;
	}
	memcpy(st->dev_reason, why, sizeof(st->dev_reason));
	*ret = st;
	return 0;
}

FEED_API int feed_stream_open(struct feed_conn *conn, const struct feed_stream_opts *opts,
			      struct feed_stream **ret)
{
	struct feed_stream *st;
	int r;

	if (!conn || !opts || !ret)
		return -EINVAL;
	if (opts->resume && (opts->resume_len == 0 || opts->resume_len > FEED_RESUME_MAX))
		return cl_fail(conn, -EINVAL, "option resume: a token of 1 to %d bytes is required",
			       FEED_RESUME_MAX);
	if ((r = st_open(conn, opts, &st)) < 0)
		return r;
	if ((r = st_keep_opts(st, opts)) < 0) {
		feed_stream_close(st);
		return r;
	}
	*ret = st;
	return 0;
}

FEED_API int feed_stream_group_start(const struct feed_stream *st, uint64_t *ret_epoch,
				     uint64_t *ret_batch)
{
	if (!st || !ret_epoch || !ret_batch)
		return -EINVAL;
	if (!st->group)
		return -ENOENT;
	*ret_epoch = st->info.start_epoch;
	*ret_batch = st->info.start_batch;
	return 0;
}

FEED_API int feed_stream_fd(const struct feed_stream *st)
{
	return st ? st->fd[ST_FD_READY] : -EINVAL;
}

FEED_API int feed_stream_close(struct feed_stream *st)
{
	struct cl_hook h[CL_HOOKS];
	void *self[CL_HOOKS];

	if (!st)
		return 0;
	/* released batches whose conversion has not run: nothing rebuilds
	 * their slots now; then those with copies in flight, after them */
	st_poll_ipc(st, true, NULL);
	st_poll_hooks(st, false, true);
	/* unhooked before they close: the releases below go straight back */
	for (int id = 0; id < CL_HOOKS; id++) {
		self[id] = st_hook_get(st, (enum cl_hook_id)id, &h[id]);
		atomic_store_explicit(&st->hook[id].self, NULL, memory_order_relaxed);
	}
	for (int id = 0; id < CL_HOOKS; id++)
		if (self[id] && h[id].close)
			h[id].close(self[id]); /* copies done, unregistered */
	st_release_all(st);
	struct st_inc *inc = st_inc_now(st);
	cl_ipc_close(inc->ipc); /* before feedd frees what the handles map */
	inc->ipc = NULL;
	int r = st_tell_close(st->conn, st->info.id);
	st_free(st);
	return r;
}

/* ------------------------------------------------------------------ */
/* Device slots (feed/gpu.h), through client_ipc.h                     */

FEED_API int feed_batch_device(struct feed_batch *b, uint32_t field, void *stream,
			       struct feed_view *ret)
{
	struct feed_view v;

	if (!b || !ret)
		return -EINVAL;
	struct feed_stream *st = b->st;
	struct cl_ipc *ipc = st_inc_now(st)->ipc;
	if (!ipc)
		return cl_fail(st->conn, -ENODEV, "stream %u has no device slots: %s", st->info.id,
			       st->dev_reason);
	if (!cl_batch_held(b))
		return cl_fail(st->conn, -EINVAL, "batch already released");
	if (b->inc != st_inc_now(st))
		return cl_fail(st->conn, -ENODEV, "batch from before feedd restarted: its device "
			       "slot is gone (its host copy is still there)");
	if (feed_batch_field(b, field, &v) < 0)
		return cl_fail(st->conn, -EINVAL, "no field %u (the stream has %u)", field,
			       st->info.num_fields);
	return cl_ipc_tie(ipc, st->conn, b, b->slot, field, st->info.fields[field].name, &v, stream,
			  ret);
}

/* Keeps opts (and its strings) for reopening. */
int st_keep_opts(struct feed_stream *st, const struct feed_stream_opts *o)
{
	const char *ds = o->dataset ? o->dataset : "";  /* NULL: a mixture's sources */
	size_t nd = strlen(ds) + 1, np = o->pipeline ? strlen(o->pipeline) + 1 : 0;
	size_t ng = o->group ? strlen(o->group) + 1 : 0;

	st->opts_mem = malloc(nd + np + ng);
	if (!st->opts_mem)
		return cl_fail(st->conn, -ENOMEM, "out of memory for the stream's options");
	st->opts = *o;
	st->opts.resume = NULL;
	st->opts.resume_len = 0;
	st->opts.dataset = memcpy(st->opts_mem, ds, nd);
	st->opts.mixture = NULL;
	st->opts.nmixture = 0;
	st->opts.pipeline = np ? memcpy(st->opts_mem + nd, o->pipeline, np) : NULL;
	st->opts.group = ng ? memcpy(st->opts_mem + nd + np, o->group, ng) : NULL;
	if (st_mixture_keep(st, o) < 0)
		return -ENOMEM;
	st->opts.nmixture = o->nmixture;
	return 0;
}
