/*
 * client_stream.c: libfeedclient's streams (feed/stream.h): opening one
 * (every region is checked before it is used), the ready ring consumer
 * with its eventfd doorbell, the release ring producer, and closing. The
 * protocol of both rings is proto/feed_shm.h's, fences included.
 *
 * Threads: feed_next(), open and close run on the caller's thread, one at
 * a time per stream; feed_release() runs on any thread. The only lock is
 * st->rel_lock, around the release ring's producer side and the switch to
 * a new incarnation after a daemon restart (which swaps that ring); it is
 * never held while waiting and nothing else is taken under it but the GPU
 * state's lock (client_gpu.c: cl_gpu_forget, before a retired region is
 * unmapped). A stream with GPU delivery checks its copies' events
 * (cuEventQuery, no system call) at each feed_next(), and feed_release()
 * of a batch with copies in flight is deferred until they are done. A
 * stream with device slots likewise gives a released batch's host slot
 * back only once feedd's conversion of it has run (client_ipc.c says
 * why); feed_next() with every credit held by such batches waits for one
 * in slices, within its timeout, and a hang-up of feedd ends that wait.
 *
 * Must never: allocate or enter the kernel when a batch is ready (the
 * fast path of feed_next), print, or crash the host on a daemon bug: the
 * regions' layout is checked once at open, each batch's header once at
 * delivery, and what fails is -EPROTO naming the check.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "dtype.h"
#include "feed/stream.h"
#include "feed_shm.h"

#define ST_NFDS 5                /* control, data, release, ready, release doorbell */
#define ST_MAX_CREDITS 65536     /* sanity bound before asking the daemon */
#define ST_PIPELINE_MAX 4096     /* bytes of pipeline text */
#define ST_DEFAULT_CREDITS 4
#define ST_MAX_GROUP_SLOTS 64    /* a group's depth: the daemon's most credits */
#define ST_MAX_LEVELS 8          /* node order: core/order.h ORD_MAX_LEVELS */
#define ST_SLICE_MIN_NS 20000    /* st_wait_converted's first look, then doubling */
#define ST_SLICE_MAX_NS 2000000  /* to this: a conversion takes well under a ms */

enum { ST_FD_CTL, ST_FD_DATA, ST_FD_REL, ST_FD_READY, ST_FD_RELEASE };

_Static_assert(FEED_EDETACHED == -ENOLINK, "feed/stream.h spells ENOLINK out");

/* One per slot, allocated at open: delivering a batch fills it in. */
struct feed_batch {
	struct feed_stream *st;
	uint32_t slot;             /* fixed at open */
	uint32_t gen;              /* generation of the current delivery */
	uint32_t inc;              /* the stream's incarnation it came from */
	_Atomic bool held;         /* delivered, not yet released */
	uint32_t nsamples;
	uint32_t flags;            /* FEED_SLOT_* */
	uint64_t epoch, index;
	uint64_t publish_ns;       /* the daemon's CLOCK_MONOTONIC at publish */
	const uint64_t *samples;   /* in the control region */
	const uint64_t *replaced;  /* its bitmap there (FEED_SLOT_REPLACED), or NULL */
	uint32_t nreplaced;        /* bits set in it below nsamples */
	struct feed_view view[FEED_SHM_MAX_FIELDS]; /* checked at delivery */
};

struct feed_stream {
	/* consumer side, read on every feed_next() */
	const struct feed_shm_ctl *ctl;  /* read-only mapping */
	const uint64_t *ready;     /* the ready ring, in ctl */
	uint64_t tail;             /* private: next ready entry to take */
	uint32_t ring_cap;
	uint32_t nslots;           /* = credits granted */
	uint32_t nfields;
	uint32_t batch;            /* largest sample count */
	int stop;                  /* 0; FEED_END_OF_STREAM; or a sticky error */
	_Atomic uint32_t nheld;    /* this incarnation's batches delivered and not
				    * released */
	struct feed_batch *batches;/* [nslots] */
	uint8_t *data;             /* the data region, read-write (a group's: private,
				    * copy-on-write) */
	bool group;                /* a group member: drop written pages at release */
	uint32_t take_max;         /* batches it may hold: nslots, or a member's credits */
	uint64_t slot_bytes, slot_hdr_bytes, slots_off;

	/* producer side of the release ring (rel_lock) */
	pthread_mutex_t rel_lock;
	struct feed_shm_rel *rel;  /* client-writable mapping */
	_Atomic uint64_t *rel_ring;
	uint32_t rel_cap;
	uint64_t rel_head;         /* private copy of rel->rel_head */

	struct feed_conn *conn;
	int fd[ST_NFDS];
	size_t len[3];             /* mapped bytes of ctl, data, rel */
	char stop_msg[256];        /* the sticky error's detail */
	struct feed_stream_info info;
	void *info_mem;            /* fields and strings of info */

	/* position and reopening after a daemon restart */
	uint64_t pos_epoch;        /* the next batch not yet returned: its epoch */
	uint64_t pos_position;     /* and the global position of its first sample */
	/* node order: the earlier layouts of epoch lv_epoch (feed.proto
	 * ResumeToken.level_*), which pos_position counts after */
	uint64_t lv_epoch;
	uint32_t nlv;
	uint32_t lv_nodes[ST_MAX_LEVELS];
	uint64_t lv_pos[ST_MAX_LEVELS];
	uint32_t world;
	uint32_t inc;              /* incarnation: 0, then +1 per reopening */
	uint32_t conn_opens;       /* conn->opens of the connection it lives on */
	struct st_retired *retired;/* earlier incarnations, until close (rel_lock) */
	struct feed_stream_opts opts; /* as opened; strings in opts_mem */
	char *opts_mem;
	struct cl_gpu_stream *gpu; /* GPU delivery (client_gpu.c), NULL until asked */
	struct cl_pin *pin;        /* feed_stream_pin (client_gpu.c), NULL until asked */
	struct cl_ipc *ipc;        /* device slots (client_ipc.c) of this
				    * incarnation, or NULL: dev_reason says why */
	char dev_reason[512];
};

/* The regions of an earlier incarnation, kept mapped while the caller
 * holds batches from them (a daemon restart does not pull memory from
 * under a trainer). The release of the last one unmaps them; the record
 * and its batches are freed at close, so that releasing one of them twice
 * still finds it. */
struct st_retired {
	struct st_retired *next;
	uint32_t inc;
	uint32_t held;
	void *map[3];
	size_t len[3];
	struct feed_batch *batches;
	struct cl_ipc *ipc;        /* its device slots: closed with its regions */
};

static void st_retired_free(struct st_retired *r);
/* Stops the stream for good: every later feed_next() returns code. */
static int st_stop(struct feed_stream *st, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static const char *const st_region_name[3] = {"control region", "data region",
					      "release region"};

static int64_t st_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t st_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* off + len fits in size, without overflow. */
static bool st_fits(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static bool st_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* ------------------------------------------------------------------ */
/* Options and the request                                             */

static int st_check_opts(struct feed_conn *conn, const struct feed_stream_opts *o)
{
	uint32_t world = o->world ? o->world : 1;

	if (!o->dataset || !*o->dataset || strlen(o->dataset) > 63)
		return cl_fail(conn, -EINVAL, "option dataset: a name of 1 to 63 bytes is required");
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

static Feed__Order st_order(int order)
{
	return order == FEED_ORDER_FULL	       ? FEED__ORDER__ORDER_FULL :
	       order == FEED_ORDER_BLOCK_WINDOW ? FEED__ORDER__ORDER_BLOCK_WINDOW :
	       order == FEED_ORDER_NODE		? FEED__ORDER__ORDER_NODE :
						  FEED__ORDER__ORDER_SEQUENTIAL;
}

static void st_request(const struct feed_stream_opts *o, Feed__OpenStream *os)
{
	os->dataset = (char *)o->dataset;
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
	os->pipeline = (char *)(o->pipeline ? o->pipeline : "");
	os->start_epoch = o->start_epoch;
	os->start_batch = o->start_batch;
	os->group = (char *)(o->group ? o->group : "");
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

/* ------------------------------------------------------------------ */
/* Checking and mapping the regions                                    */

static int st_bad(struct feed_stream *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int st_bad(struct feed_stream *st, const char *fmt, ...)
{
	char what[CL_ERRMSG_MAX - 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return cl_fail(st->conn, -EPROTO, "stream %u from feedd: %s", st->info.id, what);
}

/* A memfd with at least the seals want; its size in *ret_size. */
static int st_check_memfd(struct feed_stream *st, int i, int want, size_t *ret_size)
{
	struct stat sb;
	int seals;

	if (fstat(st->fd[i], &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0)
		return st_bad(st, "%s: not a memory file of non-zero size", st_region_name[i]);
	seals = fcntl(st->fd[i], F_GET_SEALS);
	if (seals < 0)
		return st_bad(st, "%s: F_GET_SEALS: %s", st_region_name[i], cl_os_strerror(errno));
	if ((seals & want) != want)
		return st_bad(st, "%s: seals 0x%x lack 0x%x (SHRINK, GROW, SEAL%s)",
			      st_region_name[i], (unsigned)seals, (unsigned)(want & ~seals),
			      want & F_SEAL_FUTURE_WRITE ? ", FUTURE_WRITE" : "");
	*ret_size = (size_t)sb.st_size;
	return 0;
}

/* An eventfd (as far as /proc tells), made non-blocking. */
static int st_check_eventfd(struct feed_stream *st, int i)
{
	const char *name = i == ST_FD_READY ? "ready doorbell" : "release doorbell";
	char path[64], link[64];
	int fd = st->fd[i];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n >= 0) {
		link[n] = '\0';
		if (strcmp(link, "anon_inode:[eventfd]"))
			return st_bad(st, "%s: not an eventfd (%s)", name, link);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return st_bad(st, "%s: fcntl: %s", name, cl_os_strerror(errno));
	return 0;
}

static int st_map_one(struct feed_stream *st, int i, int prot, void **ret)
{
	/* a group's data: private, so a write copies the page for us alone */
	int flags = i == ST_FD_DATA && st->group ? MAP_PRIVATE : MAP_SHARED;
	void *p = mmap(NULL, st->len[i], prot, flags, st->fd[i], 0);

	if (p == MAP_FAILED) {
		int e = errno;
		return cl_fail(st->conn, -e, "stream %u: mmap %s of %zu bytes: %s", st->info.id,
			       st_region_name[i], st->len[i], cl_os_strerror(e));
	}
	*ret = p;
	return 0;
}

/* The control header's layout, against the sizes fstat gave. */
static int st_check_ctl(struct feed_stream *st, const struct feed_shm_ctl *c, uint32_t batch,
			uint32_t credits)
{
	uint64_t ring_end, slot_min;

	if (c->magic != FEED_SHM_CTL_MAGIC || c->version != FEED_SHM_VERSION)
		return st_bad(st, "control region: magic 0x%x version %u, expected 0x%x version %d",
			      c->magic, c->version, FEED_SHM_CTL_MAGIC, FEED_SHM_VERSION);
	if (c->ctl_bytes != st->len[0] || c->data_bytes != st->len[1] ||
	    c->rel_bytes != st->len[2])
		return st_bad(st, "control region: sizes %llu/%llu/%llu, the memfds have %zu/%zu/%zu",
			      (unsigned long long)c->ctl_bytes, (unsigned long long)c->data_bytes,
			      (unsigned long long)c->rel_bytes, st->len[0], st->len[1], st->len[2]);
	if (c->nslots == 0 || c->nslots > (st->group ? ST_MAX_GROUP_SLOTS : credits))
		return st_bad(st, "control region: %u slots for %u credits", c->nslots, credits);
	if (c->batch != batch || c->nfields != st->info.num_fields ||
	    c->nfields > FEED_SHM_MAX_FIELDS)
		return st_bad(st, "control region: batch %u, %u fields; expected %u, %u", c->batch,
			      c->nfields, batch, st->info.num_fields);
	if (!st_pow2(c->ring_cap) || c->ring_cap <= c->nslots)
		return st_bad(st, "control region: ring_cap %u is not a power of two above %u slots",
			      c->ring_cap, c->nslots);
	ring_end = c->ring_off + 8ull * c->ring_cap;
	if (c->ring_off % 8 || c->ring_off < sizeof(*c) || !st_fits(c->ring_off, 8ull * c->ring_cap,
								     c->ctl_bytes))
		return st_bad(st, "control region: ready ring at %llu is outside it",
			      (unsigned long long)c->ring_off);
	slot_min = sizeof(struct feed_shm_slot) + 8ull * c->batch;
	if (c->slot_hdr_bytes < slot_min || c->slot_hdr_bytes % 8 || c->slots_off % 8 ||
	    c->slots_off < sizeof(*c) || (c->slots_off < ring_end && c->slots_off +
					  c->nslots * c->slot_hdr_bytes > c->ring_off) ||
	    !st_fits(c->slots_off, c->nslots * c->slot_hdr_bytes, c->ctl_bytes))
		return st_bad(st, "control region: %u slot headers of %llu bytes at %llu do not fit",
			      c->nslots, (unsigned long long)c->slot_hdr_bytes,
			      (unsigned long long)c->slots_off);
	if (c->slot_bytes == 0 || c->slot_bytes > c->data_bytes / c->nslots)
		return st_bad(st, "control region: %u data slots of %llu bytes exceed %llu",
			      c->nslots, (unsigned long long)c->slot_bytes,
			      (unsigned long long)c->data_bytes);
	return 0;
}

static int st_check_rel(struct feed_stream *st, const struct feed_shm_rel *r)
{
	if (r->magic != FEED_SHM_REL_MAGIC || r->version != FEED_SHM_VERSION)
		return st_bad(st, "release region: magic 0x%x version %u, expected 0x%x version %d",
			      r->magic, r->version, FEED_SHM_REL_MAGIC, FEED_SHM_VERSION);
	if (!st_pow2(r->ring_cap) || r->ring_cap < st->nslots)
		return st_bad(st, "release region: ring_cap %u is not a power of two of at least %u",
			      r->ring_cap, st->nslots);
	if (r->ring_off % 8 || r->ring_off < sizeof(*r) ||
	    !st_fits(r->ring_off, 8ull * r->ring_cap, st->len[2]))
		return st_bad(st, "release region: ring at %llu is outside it",
			      (unsigned long long)r->ring_off);
	if (atomic_load_explicit(&r->rel_head, memory_order_relaxed) != 0)
		return st_bad(st, "release region: head is not 0 at open");
	return 0;
}

static int st_map(struct feed_stream *st, uint32_t batch, uint32_t credits)
{
	const int shared = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	void *ctl = NULL, *data = NULL, *rel = NULL;
	int r;

	if ((r = st_check_memfd(st, ST_FD_CTL, shared | F_SEAL_FUTURE_WRITE, &st->len[0])) < 0 ||
	    (r = st_check_memfd(st, ST_FD_DATA, st->group ? shared | F_SEAL_FUTURE_WRITE : shared,
				&st->len[1])) < 0 ||
	    (r = st_check_memfd(st, ST_FD_REL, shared, &st->len[2])) < 0 ||
	    (r = st_check_eventfd(st, ST_FD_READY)) < 0 ||
	    (r = st_check_eventfd(st, ST_FD_RELEASE)) < 0)
		return r;
	if (st->len[0] < sizeof(struct feed_shm_ctl) || st->len[2] < sizeof(struct feed_shm_rel))
		return st_bad(st, "control or release region smaller than its header");
	if ((r = st_map_one(st, ST_FD_CTL, PROT_READ, &ctl)) < 0)
		return r;
	st->ctl = ctl;
	if ((r = st_check_ctl(st, ctl, batch, credits)) < 0)
		return r;
	/* the stream's only reader may write its batches (in-place ops); a
	 * group member writes its private copy */
	if (st->group && st->ctl->slot_bytes % (uint64_t)sysconf(_SC_PAGESIZE))
		return st_bad(st, "data region: a group's slots of %llu bytes are not whole pages",
			      (unsigned long long)st->ctl->slot_bytes);
	if ((r = st_map_one(st, ST_FD_DATA, PROT_READ | PROT_WRITE, &data)) < 0)
		return r;
	st->data = data;
	if ((r = st_map_one(st, ST_FD_REL, PROT_READ | PROT_WRITE, &rel)) < 0)
		return r;
	st->rel = rel;
	st->nslots = st->ctl->nslots;
	if ((r = st_check_rel(st, rel)) < 0)
		return r;
	st->ready = (const uint64_t *)((const uint8_t *)ctl + st->ctl->ring_off);
	st->ring_cap = st->ctl->ring_cap;
	st->nfields = st->ctl->nfields;
	st->batch = st->ctl->batch;
	st->slot_bytes = st->ctl->slot_bytes;
	st->slot_hdr_bytes = st->ctl->slot_hdr_bytes;
	st->slots_off = st->ctl->slots_off;
	st->rel_ring = (_Atomic uint64_t *)((uint8_t *)rel + st->rel->ring_off);
	st->rel_cap = st->rel->ring_cap;
	st->take_max = st->group && credits < st->nslots ? credits : st->nslots;
	st->info.credits = st->take_max;
	st->info.batch = st->batch;
	return 0;
}

static int st_batches_new(struct feed_stream *st)
{
	st->batches = calloc(st->nslots, sizeof(*st->batches));
	if (!st->batches)
		return cl_fail(st->conn, -ENOMEM, "out of memory for %u batches", st->nslots);
	for (uint32_t i = 0; i < st->nslots; i++) {
		st->batches[i].st = st;
		st->batches[i].slot = i;
		atomic_init(&st->batches[i].held, false);
	}
	return 0;
}

/* Unmaps, closes and frees; st may be partly built. */
static void st_free(struct feed_stream *st)
{
	void *maps[3] = {(void *)st->ctl, st->data, st->rel};

	for (int i = 0; i < 3; i++)
		if (maps[i])
			munmap(maps[i], st->len[i]);
	for (int i = 0; i < ST_NFDS; i++)
		if (st->fd[i] >= 0)
			close(st->fd[i]);
	while (st->retired) {
		struct st_retired *r = st->retired;
		st->retired = r->next;
		st_retired_free(r);
	}
	cl_ipc_close(st->ipc);
	pthread_mutex_destroy(&st->rel_lock);
	free(st->batches);
	free(st->info_mem);
	free(st->opts_mem);
	free(st);
}

/* The open reply's answer to a device request: st->ipc when granted and
 * the handles open here (0); else why (feedd's or this process's words)
 * and 0, or 1 when feedd granted slots this process cannot open (the
 * caller reopens without them); -EPROTO / -ENOMEM. */
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
	int r = cl_ipc_open(st->conn, &opts->device, so->device, st->nslots, st->nfields,
			    st->batch, &st->ipc, why, cap);
	return r < 0 ? r : st->ipc ? 0 : 1;
}

/* Opens a stream on conn: the request, the reply, the regions; no copy of
 * opts is kept (feed_stream_open keeps one, which a reopening reuses). */
static int st_open(struct feed_conn *conn, const struct feed_stream_opts *opts,
		   struct feed_stream **ret)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream os = FEED__OPEN_STREAM__INIT;
	Feed__DeviceRequest dr = FEED__DEVICE_REQUEST__INIT;
	Feed__Reply *rep = NULL;
	struct feed_stream *st;
	uint8_t uuid[16];
	char why[512] = "", job[FEED_JOB_MAX + 1];
	int fds[ST_NFDS], r;

	if (!conn || !opts || !ret)
		return -EINVAL;
	if ((r = st_check_opts(conn, opts)) < 0)
		return r;
	st_request(opts, &os);
	st_job_id(job);
	os.job = job;
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
	st = calloc(1, sizeof(*st));
	if (!st) {
		for (int i = 0; i < ST_NFDS; i++)
			close(fds[i]);
		r = cl_fail(conn, -ENOMEM, "out of memory for a stream");
		goto refuse;
	}
	memcpy(st->fd, fds, sizeof(fds));
	st->conn = conn;
	st->info.id = rep->stream_opened->stream;
	pthread_mutex_init(&st->rel_lock, NULL);
	if ((r = st_info(st, rep->stream_opened)) < 0 || (r = st_map(st, os.batch, os.credits)) < 0 ||
	    (r = st_batches_new(st)) < 0) {
		st_free(st);
		goto refuse;
	}
	st->conn_opens = conn->opens;
	st->world = opts->world ? opts->world : 1;
	st->pos_epoch = st->info.start_epoch;
	st->pos_position = st->info.start_batch * st->batch * st->world;
	if ((r = st_device(st, opts, &os, rep->stream_opened, why, sizeof(why))) < 0) {
		st_free(st);
		goto refuse;
	}
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
refuse: {
	/* the daemon holds a stream we will not use: tell it, keep our message */
	char msg[CL_ERRMSG_MAX];
	uint32_t id = rep->stream_opened->stream;
	feed__reply__free_unpacked(rep, NULL);
	memcpy(msg, conn->errmsg, sizeof(msg));
	st_tell_close(conn, id);
	memcpy(conn->errmsg, msg, sizeof(msg));
	return r;
}
}

/* ------------------------------------------------------------------ */
/* Position, resume tokens, reopening                                  */

/* The token of the stream's position (feed.proto ResumeToken) into buf,
 * its length into *ret_len; -ENOSPC (nothing written) past cap. */
static int st_token(const struct feed_stream *st, void *buf, size_t cap, size_t *ret_len)
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

/* Keeps opts (and its strings) for reopening. */
static int st_keep_opts(struct feed_stream *st, const struct feed_stream_opts *o)
{
	size_t nd = strlen(o->dataset) + 1, np = o->pipeline ? strlen(o->pipeline) + 1 : 0;
	size_t ng = o->group ? strlen(o->group) + 1 : 0;

	st->opts_mem = malloc(nd + np + ng);
	if (!st->opts_mem)
		return cl_fail(st->conn, -ENOMEM, "out of memory for the stream's options");
	st->opts = *o;
	st->opts.resume = NULL;
	st->opts.resume_len = 0;
	st->opts.dataset = memcpy(st->opts_mem, o->dataset, nd);
	st->opts.pipeline = np ? memcpy(st->opts_mem + nd, o->pipeline, np) : NULL;
	st->opts.group = ng ? memcpy(st->opts_mem + nd + np, o->group, ng) : NULL;
	return 0;
}

/* Node order: the layouts the daemon reads the token's epoch under, as
 * daemon/delivery/schedule.c decides: the token's own when it was taken
 * with this node count at a batch boundary of this layout, else those
 * plus the token's (nodes, position), counting again from position 0. */
static void st_resume_levels(struct feed_stream *st, const Feed__ResumeToken *t)
{
	uint32_t nodes = st->opts.nodes ? st->opts.nodes : 1;
	uint64_t stride = (uint64_t)st->batch * st->world;

	st->lv_epoch = t->epoch;
	st->nlv = 0;
	for (size_t i = 0; i < t->n_level_nodes && i < t->n_level_positions &&
			   st->nlv < ST_MAX_LEVELS; i++) {
		st->lv_nodes[st->nlv] = t->level_nodes[i];
		st->lv_pos[st->nlv++] = t->level_positions[i];
	}
	if (t->nodes == nodes && t->position % stride == 0)
		return;
	if (st->nlv < ST_MAX_LEVELS) { /* else the daemon refused it */
		st->lv_nodes[st->nlv] = t->nodes;
		st->lv_pos[st->nlv++] = t->position;
	}
	st->pos_position = 0;
}

/* A stream opened with a token starts at the token's position (one taken
 * after an epoch's last batch first delivers that epoch's end). */
static void st_resume_position(struct feed_stream *st, const void *token, size_t len)
{
	Feed__ResumeToken *t = feed__resume_token__unpack(NULL, len, token);

	if (!t)
		return; /* the daemon accepted it, so this does not happen */
	st->pos_epoch = t->epoch;
	st->pos_position = t->position;
	if (st->opts.order == FEED_ORDER_NODE)
		st_resume_levels(st, t);
	feed__resume_token__free_unpacked(t, NULL);
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
	if (opts->resume && st->info.group_members <= 1) /* a joiner starts where told */
		st_resume_position(st, opts->resume, opts->resume_len);
	*ret = st;
	return 0;
}

/* Unmaps a retired incarnation's regions (once: the maps are cleared). */
static void st_retired_unmap(struct st_retired *r)
{
	cl_ipc_close(r->ipc);
	r->ipc = NULL;
	for (int i = 0; i < 3; i++)
		if (r->map[i])
			munmap(r->map[i], r->len[i]);
	memset(r->map, 0, sizeof(r->map));
}

/* Unmaps (if still mapped) and frees a retired incarnation. */
static void st_retired_free(struct st_retired *r)
{
	st_retired_unmap(r);
	free(r->batches);
	free(r);
}

/* The release of a batch of an earlier incarnation: nothing to tell the
 * daemon that built it (it is gone). Returns the incarnation when this was
 * its last batch held: the caller unmaps its regions (st_retired_drop)
 * after dropping rel_lock, since forgetting them unregisters pinned memory
 * in the CUDA driver. The batches stay allocated until close, so releasing
 * one twice is -EINVAL, as for any batch. Under rel_lock. */
static struct st_retired *st_retired_put(struct feed_stream *st, uint32_t inc)
{
	for (struct st_retired *r = st->retired; r; r = r->next)
		if (r->inc == inc)
			return --r->held == 0 ? r : NULL;
	return NULL;
}

/* Unregisters and unmaps what st_retired_put() said is no longer held.
 * Not under rel_lock: nothing else touches r any more (held is 0 and no
 * batch of it is left to release); close frees it later. */
static void st_retired_drop(struct feed_stream *st, struct st_retired *r)
{
	cl_gpu_forget(st, r->map[1]);
	st_retired_unmap(r);
}

/* Makes n, a fresh stream on the same connection, st's next incarnation:
 * st keeps its identity, info, options and position; the regions of the
 * old one stay mapped while batches from them are held. -EPROTO when n's
 * schema differs, -ENOMEM; on failure st is untouched (n is the caller's). */
static int st_adopt(struct feed_stream *st, struct feed_stream *n)
{
	const struct feed_stream_info *a = &st->info, *b = &n->info;
	struct st_retired *old;
	bool same = a->num_fields == b->num_fields && n->batch == st->batch;

	for (uint32_t f = 0; same && f < a->num_fields; f++)
		same = a->fields[f].dtype == b->fields[f].dtype &&
		       a->fields[f].variable == b->fields[f].variable &&
		       a->fields[f].rank == b->fields[f].rank &&
		       !memcmp(a->fields[f].shape, b->fields[f].shape,
			       sizeof(a->fields[f].shape[0]) * a->fields[f].rank);
	if (!same)
		return -EPROTO;
	/* before anything of st changes: without this record the held
	 * batches' regions and tables could not be kept, so st stays as it was */
	old = calloc(1, sizeof(*old));
	if (!old)
		return -ENOMEM;
	pthread_mutex_lock(&st->rel_lock);
	uint32_t held = atomic_load_explicit(&st->nheld, memory_order_relaxed);
	/* kept until close even when nothing is held: a second release of
	 * an old batch must find it */
	old->inc = st->inc;
	old->held = held;
	old->map[0] = (void *)st->ctl;
	old->map[1] = st->data;
	old->map[2] = st->rel;
	memcpy(old->len, st->len, sizeof(old->len));
	old->batches = st->batches;
	old->ipc = st->ipc;
	old->next = st->retired;
	st->retired = old;
	if (!held) {
		cl_gpu_forget(st, old->map[1]);
		st_retired_unmap(old);
	}
	for (int i = 0; i < ST_NFDS; i++)
		close(st->fd[i]);
	st->ctl = n->ctl;
	st->ready = n->ready;
	st->tail = n->tail;
	st->ring_cap = n->ring_cap;
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
	st->rel_ring = n->rel_ring;
	st->rel_cap = n->rel_cap;
	st->rel_head = n->rel_head;
	memcpy(st->fd, n->fd, sizeof(st->fd));
	memcpy(st->len, n->len, sizeof(st->len));
	st->info.id = n->info.id;
	st->info.credits = n->info.credits;
	st->group = n->group;
	st->take_max = n->take_max;
	st->ipc = n->ipc;
	memcpy(st->dev_reason, n->dev_reason, sizeof(st->dev_reason));
	st->conn_opens = n->conn_opens;
	st->inc++;
	for (uint32_t i = 0; i < st->nslots; i++) {
		st->batches[i].st = st;
		st->batches[i].inc = st->inc;
	}
	pthread_mutex_unlock(&st->rel_lock);
	pthread_mutex_destroy(&n->rel_lock);
	free(n->info_mem);
	free(n);
	return 0;
}

static void st_sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Failures of a reopening attempt that a later attempt may not meet: the
 * daemon not (yet) there, or gone again. */
static bool st_transient(int r)
{
	return r == -ECONNRESET || r == -ECONNREFUSED || r == -ENOENT || r == -ENOTCONN ||
	       r == -EPIPE || r == -ETIMEDOUT || r == -EAGAIN;
}

/* The daemon went away under st (every batch it published has been
 * returned): reconnects to the same socket and reopens the stream at its
 * position, retrying for up to opts.reconnect_ms. 0, FEED_END_OF_STREAM
 * when nothing was left to deliver, -ENOMEM with st unchanged (the next
 * call tries again), or a sticky error. */
static int st_reopen(struct feed_stream *st)
{
	struct feed_conn *conn = st->conn;
	int limit = st->opts.reconnect_ms ? st->opts.reconnect_ms : 30000;
	uint8_t token[FEED_RESUME_MAX];
	char last[CL_ERRMSG_MAX];
	size_t len;
	int r, delay = 20;

	/* feedd is gone: nothing will convert (or rebuild) a deferred slot */
	if (st->ipc)
		cl_ipc_poll(st->ipc, true, NULL);
	if (st->opts.epochs && st->pos_epoch >= st->opts.epochs) {
		st->stop = FEED_END_OF_STREAM;
		return FEED_END_OF_STREAM;
	}
	/* the detail without its "stream N: ", which st_stop puts back once */
	char pre[32];
	int npre = snprintf(pre, sizeof(pre), "stream %u: ", st->info.id);
	snprintf(last, sizeof(last), "%s",
		 strncmp(conn->errmsg, pre, (size_t)npre) ? conn->errmsg : conn->errmsg + npre);
	if (st->opts.reconnect_ms < 0)
		return st_stop(st, -ECONNRESET, "%s; reconnecting is off (reconnect_ms < 0)", last);
	if (!conn->path[0])
		return st_stop(st, -ECONNRESET, "feedd went away (%s)", last);
	if ((r = st_token(st, token, sizeof(token), &len)) < 0)
		return st_stop(st, r, "resume token does not fit");
	struct feed_stream_opts o = st->opts;
	o.resume = token;
	o.resume_len = len;
	int64_t deadline = st_now_ms() + limit;
	for (;;) {
		/* our connection is dead; another stream may have reconnected it */
		if (conn->opens == st->conn_opens)
			cl_close(conn);
		r = conn->sock >= 0 ? 0 : feed_conn_open(conn, conn->path);
		if (r == 0) {
			struct feed_stream *n;
			r = st_open(conn, &o, &n);
			if (r == 0) {
				r = st_adopt(st, n);
				if (r == 0) {
					/* pinned: the new data region too (else pageable, still correct) */
					(void)cl_pin_region(st, st->data, st->len[1]);
					return 0;
				}
				feed_stream_close(n);
				if (r == -ENOMEM)
					return cl_fail(conn, r, "stream %u: out of memory to keep the "
						       "held batches while reopening it after feedd "
						       "came back", st->info.id);
				return st_stop(st, -EPROTO, "feedd came back with another schema for "
					       "dataset '%s'", st->opts.dataset);
			}
			if (r != -ENOMEM && !st_transient(r))
				return st_stop(st, r, "feedd came back but the stream could not be "
					       "reopened: %s", conn->errmsg);
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
		/* the last attempt is made at the deadline, not a delay before it */
		st_sleep_ms(left < delay ? (int)left : delay);
		delay = delay < 500 ? delay * 2 : 1000;
	}
}

FEED_API const struct feed_stream_info *feed_stream_info(const struct feed_stream *st)
{
	return st ? &st->info : NULL;
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

/* ------------------------------------------------------------------ */
/* Consuming the ready ring                                            */

static int st_stop(struct feed_stream *st, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->stop_msg, sizeof(st->stop_msg), fmt, ap);
	va_end(ap);
	st->stop = code;
	return cl_fail(st->conn, code, "stream %u: %s", st->info.id, st->stop_msg);
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
	v->data = st->data + sf->offset;
	v->bytes = sf->bytes;
	v->dtype = (int)sf->dtype;
	v->rank = sf->rank;
	memcpy(v->shape, sf->shape, sizeof(sf->shape));
	memset(v->shape + FEED_SHM_MAX_RANK, 0,
	       sizeof(v->shape) - FEED_SHM_MAX_RANK * sizeof(v->shape[0]));
	return 0;
}

/* The positions of slot's batch that hold replacements (on_error skip):
 * the bitmap after the sample list, checked to lie inside the header. */
static int st_replaced(struct feed_stream *st, uint32_t slot, const struct feed_shm_slot *h,
		       struct feed_batch *b)
{
	uint64_t words = FEED_SHM_REPLACED_WORDS(st->batch);

	b->replaced = NULL;
	b->nreplaced = 0;
	if (!(h->flags & FEED_SLOT_REPLACED))
		return 0;
	if (sizeof(*h) + 8ull * st->batch + 8 * words > st->slot_hdr_bytes)
		return st_stop(st, -EPROTO, "slot %u: replaced bitmap past its %llu-byte header",
			       slot, (unsigned long long)st->slot_hdr_bytes);
	b->replaced = &h->sample[st->batch];
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
	if (h->nsamples == 0 || h->nsamples > st->batch || h->nfields != st->nfields)
		return st_stop(st, -EPROTO, "slot %u: %u samples, %u fields (batch %u, %u fields)",
			       slot, h->nsamples, h->nfields, st->batch, st->nfields);
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
	atomic_store_explicit(&b->held, true, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->nheld, 1, memory_order_relaxed);
	*ret = b;
	return 0;
}

/* Takes the entry at the tail; head != tail. */
static int st_take(struct feed_stream *st, uint64_t head, struct feed_batch **ret)
{
	if (head - st->tail > st->ring_cap)
		return st_stop(st, -EPROTO, "ready queue head moved %llu entries past ours (capacity %u)",
			       (unsigned long long)(head - st->tail), st->ring_cap);
	uint64_t e = st->ready[st->tail & (st->ring_cap - 1)];
	uint32_t slot = feed_ring_slot(e);

	st->tail++;
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
	/* relaxed: the fence below orders it before the re-check */
	atomic_store_explicit(&st->rel->client_waiting, 1, memory_order_relaxed);
	/* seq_cst: pairs with the daemon's "store head, fence, exchange flag";
	 * with acquire/release alone both sides may miss each other */
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(&st->ctl->ready_head, memory_order_acquire) != st->tail;
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
	while (cl_ipc_poll(st->ipc, false, &left) == 0) {
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
			cl_ipc_poll(st->ipc, true, NULL); /* feedd is gone */
			break;
		}
		slice = slice * 2 < ST_SLICE_MAX_NS ? slice * 2 : ST_SLICE_MAX_NS;
	}
	/* relaxed: a count the daemon only displays (see st_wait) */
	atomic_fetch_add_explicit(&st->rel->reader_wait_ns, (uint64_t)(st_now_ns() - t0),
				  memory_order_relaxed);
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

	if (held >= st->take_max && st->ipc && timeout_ms != 0)
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
	/* relaxed: a count the daemon only displays; we are its one writer
	 * per thread and fetch_add keeps concurrent readers' sums whole */
	atomic_fetch_add_explicit(&st->rel->reader_wait_ns, (uint64_t)(st_now_ns() - t0),
				  memory_order_relaxed);
	if (n < 0 && errno != EINTR)
		return cl_fail(conn, -errno, "stream %u: poll: %s", st->info.id,
			       cl_os_strerror(errno));
	if (n <= 0)
		return 0;
	if (p[0].revents & (POLLERR | POLLNVAL))
		return st_stop(st, -EPROTO, "ready doorbell failed");
	if ((p[1].revents & (POLLHUP | POLLERR)) &&
	    atomic_load_explicit(&st->ctl->ready_head, memory_order_acquire) == st->tail)
		return cl_fail(conn, -ECONNRESET, "stream %u: feedd went away", st->info.id);
	return 0;
}

FEED_API int feed_next(struct feed_stream *st, int timeout_ms, struct feed_batch **ret)
{
	int64_t deadline = -1;

	if (!st || !ret)
		return -EINVAL;
	if (st->ipc) /* slots released before feedd converted them go back now */
		cl_ipc_poll(st->ipc, false, NULL);
	if (st->gpu) /* slots released while their copies ran go back now */
		cl_gpu_poll(st, timeout_ms != 0 && atomic_load_explicit(&st->nheld, memory_order_relaxed) ==
						       st->nslots);
	if (st->stop)
		return st_stopped(st);
	for (;;) {
		/* acquire: the entries and slot headers written before the head */
		uint64_t head = atomic_load_explicit(&st->ctl->ready_head, memory_order_acquire);
		/* detached from the group: told now, not after what is queued
		 * (acquire: the daemon stores the code last, after the message) */
		if (head != st->tail && st->group &&
		    __atomic_load_n(&st->ctl->error_code, __ATOMIC_ACQUIRE) == FEED_EDETACHED)
			return st_daemon_error(st);
		if (head != st->tail)
			return st_take(st, head, ret);
		int r = st_wait(st, timeout_ms, &deadline);
		if (r == -ECONNRESET)
			r = st_reopen(st); /* every published batch was taken */
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

FEED_API uint64_t feed_batch_publish_ns(const struct feed_batch *b)
{
	return b->publish_ns;
}

FEED_API int feed_batch_field(const struct feed_batch *b, uint32_t i, struct feed_view *ret)
{
	if (!b || !ret || i >= b->st->nfields)
		return -EINVAL;
	*ret = b->view[i];
	return 0;
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

FEED_API int feed_release(struct feed_batch *b)
{
	if (!b)
		return -EINVAL;
	/* its device slot's reader is done once the tied stream gets here
	 * (the done word then says so to feedd); the host slot goes back once
	 * feedd's conversion of b has run (client_ipc.c: it still reads the
	 * slot's staging area, which a rebuild overwrites); a batch of an
	 * earlier incarnation has no feedd to tell */
	struct cl_ipc *ipc = b->st->ipc;
	if (ipc && b->inc == b->st->inc && cl_batch_held(b)) {
		int d = cl_ipc_release(ipc, b, b->slot, b->gen);
		if (d)
			return d > 0 ? 0 : d;
	}
	return cl_release_host(b);
}

int cl_release_host(struct feed_batch *b)
{
	/* copies from b in flight: the slot goes back when they are done */
	/* acquire: set by the first feed_batch_to_device(), maybe on another thread */
	struct cl_gpu_stream *g = __atomic_load_n(&b->st->gpu, __ATOMIC_ACQUIRE);
	int d = g ? cl_gpu_defer_release(g, b) : 0;
	if (d)
		return d > 0 ? 0 : d;
	return cl_release_now(b);
}

int cl_release_now(struct feed_batch *b)
{
	struct feed_stream *st = b->st;
	/* read before held is cleared: once it is, the next delivery of this
	 * slot may rewrite gen (st_deliver's acquire load of held pairs with
	 * the exchange below, so that write comes after this read) */
	uint64_t entry = feed_ring_entry(b->slot, b->gen);
	pthread_mutex_lock(&st->rel_lock);
	/* under the lock, so a reopening sees held and nheld agree */
	if (!atomic_exchange_explicit(&b->held, false, memory_order_acq_rel)) {
		pthread_mutex_unlock(&st->rel_lock);
		return -EINVAL;
	}
	if (b->inc != st->inc) {
		struct st_retired *dead = st_retired_put(st, b->inc);
		pthread_mutex_unlock(&st->rel_lock);
		if (dead)
			st_retired_drop(st, dead);
		return 0;
	}
	if (st->group)  /* our written pages go; the shared ones come back */
		(void)madvise(st->data + (uint64_t)b->slot * st->slot_bytes, st->slot_bytes,
			      MADV_DONTNEED);
	uint64_t head = st->rel_head++;
	/* relaxed: published by the release store of the head */
	atomic_store_explicit(&st->rel_ring[head & (st->rel_cap - 1)], entry,
			      memory_order_relaxed);
	/* release: the entry before the head */
	atomic_store_explicit(&st->rel->rel_head, head + 1, memory_order_release);
	/* seq_cst: pairs with the daemon's "set daemon_waiting, fence, re-check" */
	atomic_thread_fence(memory_order_seq_cst);
	bool ring = atomic_exchange_explicit(&st->rel->daemon_waiting, 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&st->nheld, 1, memory_order_relaxed);
	if (ring) {
		/* under the lock: a reopening closes this descriptor */
		uint64_t one = 1;
		(void)!write(st->fd[ST_FD_RELEASE], &one, sizeof(one)); /* EAGAIN: rung already */
	}
	pthread_mutex_unlock(&st->rel_lock);
	return 0;
}

FEED_API int feed_stream_close(struct feed_stream *st)
{
	if (!st)
		return 0;
	/* released batches whose conversion has not run: nothing rebuilds
	 * their slots now (their copies, if any, are waited for next) */
	if (st->ipc)
		cl_ipc_poll(st->ipc, true, NULL);
	cl_gpu_close(st); /* copies done, deferred releases made, unregistered */
	cl_pin_close(st);
	for (uint32_t i = 0; i < st->nslots; i++)
		feed_release(&st->batches[i]); /* -EINVAL for those not held */
	cl_ipc_close(st->ipc); /* before feedd frees what the handles map */
	st->ipc = NULL;
	int r = st_tell_close(st->conn, st->info.id);
	st_free(st);
	return r;
}

/* ------------------------------------------------------------------ */
/* For the GPU path (client_internal.h)                                */

struct cl_gpu_stream **cl_stream_gpu(struct feed_stream *st)
{
	return &st->gpu;
}

struct cl_pin **cl_stream_pin(struct feed_stream *st)
{
	return &st->pin;
}

void cl_stream_region(const struct feed_stream *st, void **ret_base, size_t *ret_len)
{
	*ret_base = st->data;
	*ret_len = st->len[1];
}

struct cl_ipc *cl_stream_ipc(struct feed_stream *st)
{
	return st->ipc;
}

const char *cl_stream_device_reason(const struct feed_stream *st)
{
	return st->dev_reason;
}

uint32_t cl_batch_slot(const struct feed_batch *b)
{
	return b->slot;
}

bool cl_batch_current(const struct feed_batch *b)
{
	return b->inc == b->st->inc;
}

void cl_batch_mix_key(const struct feed_batch *b, uint64_t *ret_seed, uint64_t *ret_epoch,
		      uint64_t *ret_batch)
{
	*ret_seed = b->st->opts.seed;
	*ret_epoch = b->epoch;
	*ret_batch = b->index * b->st->world + b->st->opts.rank;
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
	const struct feed_stream *st = b->st;
	*ret_base = st->data;
	*ret_len = st->len[1];
	for (const struct st_retired *r = st->retired; r && b->inc != st->inc; r = r->next)
		if (r->inc == b->inc) {
			*ret_base = r->map[1];
			*ret_len = r->len[1];
		}
}
