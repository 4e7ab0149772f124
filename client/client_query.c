/*
 * client_query.c: libfeedclient's requests about datasets and the daemon's
 * status, and the conversion of their replies into the public structs of
 * feed/client.h. Caller's thread. Never trusts a reply's sizes: every count
 * and length is checked before it is used to size or index anything.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "dtype.h"
#include "feed_text.h"

/* The public constants are the wire's DType (feed_field.dtype comes from
 * it) and proto/dtype.h's enum (what slot headers carry, feed_view.dtype):
 * the three spellings must not drift apart. The public names differ from
 * dtype.h's so that code of this tree may include both headers. */
#define CL_SAME_DTYPE(pub, wire, shm)                                                  \
	_Static_assert(pub == FEED__DTYPE__DTYPE_##wire && pub == FEED_DTYPE_##shm,      \
		       #pub " must be DTYPE_" #wire " in feed.proto and " #shm " in dtype.h")
CL_SAME_DTYPE(FEED_DTYPE_UINT8, U8, U8);
CL_SAME_DTYPE(FEED_DTYPE_INT8, I8, I8);
CL_SAME_DTYPE(FEED_DTYPE_UINT16, U16, U16);
CL_SAME_DTYPE(FEED_DTYPE_INT16, I16, I16);
CL_SAME_DTYPE(FEED_DTYPE_UINT32, U32, U32);
CL_SAME_DTYPE(FEED_DTYPE_INT32, I32, I32);
CL_SAME_DTYPE(FEED_DTYPE_UINT64, U64, U64);
CL_SAME_DTYPE(FEED_DTYPE_INT64, I64, I64);
CL_SAME_DTYPE(FEED_DTYPE_FLOAT16, F16, F16);
CL_SAME_DTYPE(FEED_DTYPE_BFLOAT16, BF16, BF16);
CL_SAME_DTYPE(FEED_DTYPE_FLOAT32, F32, F32);
CL_SAME_DTYPE(FEED_DTYPE_FLOAT64, F64, F64);
CL_SAME_DTYPE(FEED_DTYPE_BOOLEAN, BOOL, BOOL);
CL_SAME_DTYPE(FEED_DTYPE_STRING, STR, STR);
_Static_assert(FEED_DTYPE_MAX_ == FEED_DTYPE_STRING + 1, "a dtype without a public constant");

#define CL_MAX_DATASETS 4096
#define CL_MAX_FIELDS 64
#define CL_MAX_CLASSES (1u << 20) /* the format's own cap (FMT_MAX_CLASSES) */
#define CL_NAME_MAX 255

/* Bytes a list needs beyond its structs (strings with their NULs), or -1
 * if the reply is not a sane one. */
static long cl_list_check(const Feed__DatasetList *dl, size_t *ret_fields,
			  size_t *ret_classes)
{
	size_t strings = 0, fields = 0, classes = 0;

	if (dl->n_datasets > CL_MAX_DATASETS)
		return -1;
	for (size_t i = 0; i < dl->n_datasets; i++) {
		const Feed__DatasetInfo *d = dl->datasets[i];
		if (!d->schema || d->schema->n_fields > CL_MAX_FIELDS ||
		    strlen(d->name) > CL_NAME_MAX || strlen(d->version) > CL_NAME_MAX)
			return -1;
		strings += strlen(d->name) + strlen(d->version) + 2;
		for (size_t k = 0; k < d->schema->n_fields; k++) {
			const Feed__Field *f = d->schema->fields[k];
			if (f->n_shape > FEED_MAX_RANK || strlen(f->name) > CL_NAME_MAX ||
			    feed_dtype_size(f->dtype) == 0)
				return -1;
			strings += strlen(f->name) + 1;
		}
		fields += d->schema->n_fields;
		if (d->n_classes > CL_MAX_CLASSES)
			return -1;
		for (size_t k = 0; k < d->n_classes; k++) {
			if (strlen(d->classes[k]) > CL_NAME_MAX)
				return -1;
			strings += strlen(d->classes[k]) + 1;
		}
		classes += d->n_classes;
	}
	*ret_fields = fields;
	*ret_classes = classes;
	return (long)strings;
}

static char *cl_copy(char **pool, const char *s)
{
	char *out = *pool;
	size_t n = strlen(s) + 1;
	memcpy(out, s, n);
	*pool += n;
	return out;
}

static void cl_field(struct feed_field *out, const Feed__Field *f, char **pool)
{
	out->name = cl_copy(pool, f->name);
	out->dtype = f->dtype;
	out->dtype_name = feed_dtype_name(f->dtype);
	out->elem_size = feed_dtype_size(f->dtype);
	out->rank = (uint32_t)f->n_shape;
	for (size_t i = 0; i < f->n_shape; i++)
		out->shape[i] = f->shape[i];
	out->variable = f->variable;
	out->max_bytes = f->max_bytes;
}

/* One allocation holds the list, its datasets, fields and strings, so
 * feed_dataset_list_free() is a single free(). */
static int cl_list_build(struct feed_conn *conn, const Feed__DatasetList *dl,
			 struct feed_dataset_list **ret)
{
	size_t nfields, nclasses;
	long strings = cl_list_check(dl, &nfields, &nclasses);

	if (strings < 0)
		return cl_bad_reply(conn, "dataset list out of range");
	size_t head = sizeof(struct feed_dataset_list) + dl->n_datasets * sizeof(struct feed_dataset) +
		      nfields * sizeof(struct feed_field) + nclasses * sizeof(char *);
	struct feed_dataset_list *list = calloc(1, head + (size_t)strings);
	if (!list)
		return cl_fail(conn, -ENOMEM, "out of memory for %zu datasets", dl->n_datasets);
	struct feed_dataset *ds = (struct feed_dataset *)(list + 1);
	struct feed_field *fs = (struct feed_field *)(ds + dl->n_datasets);
	const char **cs = (const char **)(fs + nfields);
	char *pool = (char *)list + head;

	for (size_t i = 0; i < dl->n_datasets; i++) {
		const Feed__DatasetInfo *d = dl->datasets[i];
		ds[i].name = cl_copy(&pool, d->name);
		ds[i].version = cl_copy(&pool, d->version);
		ds[i].num_samples = d->num_samples;
		ds[i].num_fields = (uint32_t)d->schema->n_fields;
		ds[i].fields = fs;
		for (size_t k = 0; k < d->schema->n_fields; k++)
			cl_field(fs++, d->schema->fields[k], &pool);
		ds[i].num_classes = (uint32_t)d->n_classes;
		ds[i].classes = d->n_classes ? cs : NULL;
		for (size_t k = 0; k < d->n_classes; k++)
			*cs++ = cl_copy(&pool, d->classes[k]);
	}
	list->count = dl->n_datasets;
	list->datasets = ds;
	*ret = list;
	return 0;
}

static int cl_datasets_call(struct feed_conn *conn, Feed__Request *req, size_t want,
			    struct feed_dataset_list **ret)
{
	Feed__Reply *rep = NULL;
	int r = cl_call(conn, req, &rep);

	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_DATASETS)
		r = cl_bad_reply(conn, "expected a dataset list");
	else if (want && rep->datasets->n_datasets != want)
		r = cl_bad_reply(conn, "dataset list of the wrong length");
	else
		r = cl_list_build(conn, rep->datasets, ret);
	feed__reply__free_unpacked(rep, NULL);
	return r;
}

FEED_API int feed_list_datasets(struct feed_conn *conn, struct feed_dataset_list **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__ListDatasets ld = FEED__LIST_DATASETS__INIT;

	if (!conn || !ret)
		return -EINVAL;
	req.body_case = FEED__REQUEST__BODY_LIST_DATASETS;
	req.list_datasets = &ld;
	return cl_datasets_call(conn, &req, 0, ret);
}

FEED_API int feed_dataset_info(struct feed_conn *conn, const char *name,
			       struct feed_dataset_list **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;

	if (!conn || !name || !ret)
		return -EINVAL;
	if (!*name || strlen(name) > 63)
		return cl_fail(conn, -EINVAL, "dataset name of %zu bytes (1..63 allowed)",
			       strlen(name));
	q.name = feed_pb_text(name);
	req.body_case = FEED__REQUEST__BODY_DATASET_INFO;
	req.dataset_info = &q;
	return cl_datasets_call(conn, &req, 1, ret);
}

FEED_API int feed_sample_path(struct feed_conn *conn, const char *dataset, uint64_t sample,
			     char *ret_path, size_t cap)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;
	Feed__Reply *rep = NULL;

	if (!conn || !dataset || !ret_path || !cap)
		return -EINVAL;
	if (!*dataset || strlen(dataset) > 63)
		return cl_fail(conn, -EINVAL, "dataset name of %zu bytes (1..63 allowed)",
			       strlen(dataset));
	q.name = feed_pb_text(dataset);
	q.sample = sample;
	q.want_path = true;
	req.body_case = FEED__REQUEST__BODY_DATASET_INFO;
	req.dataset_info = &q;
	int r = cl_call(conn, &req, &rep);
	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_DATASETS || rep->datasets->n_datasets != 1)
		r = cl_bad_reply(conn, "expected one dataset");
	else if (strlen(rep->datasets->datasets[0]->sample_path) >= cap)
		r = cl_fail(conn, -ENOSPC, "sample %llu's path is %zu bytes, the buffer holds %zu",
			    (unsigned long long)sample,
			    strlen(rep->datasets->datasets[0]->sample_path), cap);
	else
		strcpy(ret_path, rep->datasets->datasets[0]->sample_path);
	feed__reply__free_unpacked(rep, NULL);
	return r;
}

FEED_API void feed_dataset_list_free(struct feed_dataset_list *list)
{
	free(list);
}

/* Asks for the daemon's stats; *ret is the Stats reply's to free. */
static int cl_stats_call(struct feed_conn *conn, Feed__Reply **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__StatsQuery q = FEED__STATS_QUERY__INIT;
	Feed__Reply *rep = NULL;

	req.body_case = FEED__REQUEST__BODY_STATS;
	req.stats = &q;
	int r = cl_call(conn, &req, &rep);
	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_STATS) {
		feed__reply__free_unpacked(rep, NULL);
		return cl_bad_reply(conn, "expected stats");
	}
	*ret = rep;
	return 0;
}

/* Copies text s into out[cap], printable ASCII only, cut to fit. */
static void cl_text(char *out, size_t cap, const char *s)
{
	size_t i = 0;

	for (; s && s[i] && i < cap - 1; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
}

static void cl_stats_convert(const Feed__Stats *s, struct feed_stats *st)
{
	*st = (struct feed_stats){
		.protocol_version = s->protocol_version,
		.uptime_ms = s->uptime_ms,
		.connections = s->connections,
		.user_connections = s->user_connections,
		.workers = s->workers,
		.datasets = (uint32_t)s->n_datasets,
		.requests = s->requests,
		.rejected = s->rejected,
	};
	cl_text(st->server_version, sizeof(st->server_version), s->server_version);
}

FEED_API int feed_stats(struct feed_conn *conn, struct feed_stats *ret)
{
	Feed__Reply *rep = NULL;
	struct feed_stats st;

	if (!conn || !ret)
		return -EINVAL;
	int r = cl_stats_call(conn, &rep);
	if (r < 0)
		return r;
	cl_stats_convert(rep->stats, &st);
	feed__reply__free_unpacked(rep, NULL);
	*ret = st;
	return 0;
}

static void cl_stream_status(const Feed__StreamStatus *s, struct feed_stream_status *o)
{
	cl_text(o->kind, sizeof(o->kind), s->kind);
	o->uid = s->uid;
	o->pid = s->pid;
	o->conn = s->conn;
	o->stream = s->stream;
	cl_text(o->dataset, sizeof(o->dataset), s->dataset);
	cl_text(o->group, sizeof(o->group), s->group);
	o->members = s->members;
	o->batch = s->batch;
	o->credits = s->credits;
	o->credits_in_use = s->credits_in_use;
	o->age_ms = s->age_ms;
	o->batches = s->batches;
	o->samples = s->samples;
	o->bytes = s->bytes;
	o->samples_per_s = s->samples_per_s;
	o->mb_per_s = s->mb_per_s;
	o->worker_ns = s->worker_ns;
	o->jobs = s->jobs;
	o->reader_wait_ns = s->reader_wait_ns;
	o->reader_wait_share = s->reader_wait_share;
	cl_text(o->pipeline, sizeof(o->pipeline), s->pipeline);
	o->shm_bytes = s->shm_bytes;
	cl_text(o->device, sizeof(o->device), s->device);
	cl_text(o->jpeg_decode, sizeof(o->jpeg_decode), s->jpeg_decode);
	o->device_bytes = s->device_bytes;
	o->samples_per_s_10s = s->samples_per_s_10s;
	o->mb_per_s_10s = s->mb_per_s_10s;
	o->reader_wait_share_10s = s->reader_wait_share_10s;
	cl_text(o->job, sizeof(o->job), s->job);
	o->replaced = s->replaced;
	o->detached_batches = s->detached_batches;
	o->rank = s->rank;
	o->world = s->world;
	o->slot_bytes = s->slot_bytes;
	o->batches_per_epoch = s->batches_per_epoch;
	o->epochs = s->epochs;
	o->start_epoch = s->start_epoch;
	o->start_batch = s->start_batch;
	o->nmember_pids = 0;
	for (size_t i = 0; i < s->n_member_pids && i < FEED_STATUS_MEMBERS; i++) {
		o->member_pids[i] = s->member_pids[i];
		o->member_reader_wait_ns[i] = i < s->n_member_reader_wait_ns ?
						      s->member_reader_wait_ns[i] : 0;
		o->nmember_pids++;
	}
}

/* st->pending: s's names, each cut to a dataset name's size, in one block. */
static int cl_status_pending(struct feed_status *st, const Feed__Stats *s)
{
	enum { NAME = 64 };
	size_t n = s->n_pending > 256 ? 256 : s->n_pending;
	char **names = calloc(1, n * (sizeof(char *) + NAME));
	if (!names)
		return -ENOMEM;
	char *text = (char *)(names + n);
	for (size_t i = 0; i < n; i++) {
		names[i] = text + i * NAME;
		cl_text(names[i], NAME, s->pending[i]);
	}
	st->npending = n;
	st->pending = (const char *const *)names;
	return 0;
}

/* st's GPUs from the stats s; -ENOMEM. */
static int cl_status_gpus(struct feed_status *st, const Feed__Stats *s)
{
	struct feed_gpu_status *g = calloc(s->n_gpus, sizeof(*g));

	if (!g)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_gpus; i++) {
		const Feed__GpuStatus *in = s->gpus[i];
		g[i] = (struct feed_gpu_status){
			.ordinal = in->ordinal, .allowed = in->allowed,
			.context = in->context, .failed = in->failed,
			.slot_bytes = in->slot_bytes,
		};
		cl_text(g[i].name, sizeof(g[i].name), in->name);
	}
	st->ngpus = s->n_gpus;
	st->gpus = g;
	return 0;
}

FEED_API int feed_status(struct feed_conn *conn, struct feed_status **ret)
{
	Feed__Reply *rep = NULL;
	struct feed_status *st;
	struct feed_stream_status *list;

	if (!conn || !ret)
		return -EINVAL;
	int r = cl_stats_call(conn, &rep);
	if (r < 0)
		return r;
	const Feed__Stats *s = rep->stats;
	if (s->n_streams > CL_MAX_DATASETS * 64) {
		feed__reply__free_unpacked(rep, NULL);
		return cl_bad_reply(conn, "stats: too many streams");
	}
	st = calloc(1, sizeof(*st));
	list = calloc(s->n_streams + 1, sizeof(*list));
	if (!st || !list) {
		free(st);
		free(list);
		feed__reply__free_unpacked(rep, NULL);
		return -ENOMEM;
	}
	cl_stats_convert(s, &st->stats);
	if (s->cache)
		st->cache = (struct feed_cache_status){
			.hits = s->cache->hits, .misses = s->cache->misses,
			.evictions = s->cache->evictions, .bytes = s->cache->bytes,
			.entries = s->cache->entries, .budget = s->cache->budget,
		};
	for (size_t i = 0; i < s->n_streams; i++)
		cl_stream_status(s->streams[i], &list[i]);
	st->count = s->n_streams;
	st->streams = list;
	cl_text(st->jpeg_decode, sizeof(st->jpeg_decode), s->jpeg_decode);
	if ((s->n_gpus && cl_status_gpus(st, s) < 0) ||
	    (s->n_pending && cl_status_pending(st, s) < 0)) {
		feed__reply__free_unpacked(rep, NULL);
		feed_status_free(st);
		return -ENOMEM;
	}
	feed__reply__free_unpacked(rep, NULL);
	*ret = st;
	return 0;
}

FEED_API void feed_status_free(struct feed_status *st)
{
	if (!st)
		return;
	free((void *)st->streams);
	free((void *)st->gpus);
	free((void *)st->pending);
	free(st);
}
