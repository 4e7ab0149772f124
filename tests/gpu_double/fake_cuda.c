/*
 * fake_cuda.c: a test double of the CUDA driver entry points libfeedclient
 * and feedd load (kernels/cudrv.h), for tests on machines without a GPU;
 * see fake_cuda.h for what it is and is not. Records every call in
 * struct fake_cuda_stats. Thread-safe: one mutex guards its tables, the
 * counters are atomic, and waits on another process's events are futex
 * waits on shared memory, taken without the mutex.
 */
#include "fake_cuda.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "convert.h"
#include "mix.h"

#define EXPORT __attribute__((visibility("default")))
#define ADD(field, n) __atomic_add_fetch(&st->field, (n), __ATOMIC_RELAXED)

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
	E_INVALID_VALUE = 1,
	E_OUT_OF_MEMORY = 2,
	E_INVALID_DEVICE = 101,
	E_INVALID_IMAGE = 200,
	E_INVALID_CONTEXT = 201,
	E_INVALID_HANDLE = 400,
	E_NOT_FOUND = 500,
	E_NOT_READY = 600,
};

#define IPC_MAGIC 0x46414b45u /* "FAKE" */
#define ARENA_SLOTS 4096

/* One event's state, shared with every process that opened it. */
struct ev_word {
	uint32_t state;            /* futex word: EV_* */
	int32_t recorder;          /* pid that recorded it last */
};
enum { EV_NONE, EV_PENDING, EV_COMPLETE };

/* A CUevent of this process: one it created, or one it opened. */
struct fake_event {
	struct ev_word *w;
	uint32_t slot;             /* in its arena */
	unsigned flags;
	int opened;                /* from cuIpcOpenEventHandle */
	struct fake_event *next;
};

struct ipc_blob {               /* CUipcMemHandle, CUipcEventHandle: passed by value */
	char b[64];
};

struct ipc_mem_handle {         /* CUipcMemHandle's 64 bytes */
	uint32_t magic;
	int32_t pid;
	int32_t fd;
	uint32_t pad;
	uint64_t size;
};

struct ipc_event_handle {       /* CUipcEventHandle's 64 bytes */
	uint32_t magic;
	int32_t pid;
	int32_t fd;                /* the exporter's arena */
	uint32_t slot;
};

struct mapping {               /* device memory: ours (fd >= 0) or opened */
	void *base;
	size_t size;
	int fd;                    /* ours: the memfd; opened: -1 */
};

struct remote_arena {
	int32_t pid, fd;
	struct ev_word *words;
};

struct fake_func {
	char name[64];
};

static struct fake_cuda_stats local_stats;
static struct fake_cuda_stats *st = &local_stats;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_event *events;            /* (mu) */
static struct mapping maps[256];             /* (mu) */
static int nmaps;
static struct remote_arena remotes[16];      /* (mu) */
static int nremotes;
static struct ev_word *arena;                /* this process's, made on first event */
static int arena_fd = -1;
static uint32_t arena_used;                  /* (mu) */
static int fake_version = 13000, fake_devices = 1, fake_ro, fake_init_result, fake_auto;
static int fake_queue;                       /* FAKE_CUDA_QUEUE: made streams queue */
static int fake_uuid_seed;
static long long fake_mem_limit = -1, fake_mem_used; /* (mu) */
static int fake_ctx_obj;
static __thread void *current_ctx;
static struct fake_func funcs[16];           /* (mu) */
static int nfuncs;

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

static long futex(uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

EXPORT const struct fake_cuda_stats *fake_cuda_stats(void)
{
	return st;
}

/* Completes e's word (the caller recorded it) and wakes its waiters. */
static void ev_complete(struct ev_word *w)
{
	uint32_t pend = EV_PENDING;
	if (__atomic_compare_exchange_n(&w->state, &pend, EV_COMPLETE, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		ADD(events_pending, -1);
		futex(&w->state, FUTEX_WAKE, INT32_MAX, NULL);
	}
}

/* Waits until another process completes w: for ever if it died first
 * (the real driver never completes a record a dead process left queued;
 * this is what made feedd's old done events hang). */
static void ev_wait_foreign(struct ev_word *w)
{
	const struct timespec tick = {0, 50 * 1000 * 1000};
	while (__atomic_load_n(&w->state, __ATOMIC_ACQUIRE) == EV_PENDING)
		futex(&w->state, FUTEX_WAIT, EV_PENDING, &tick);
}

/* ---- values written by stream memory operations ---- */

static bool q_holds_event_locked(const struct ev_word *w);

/* A write kept behind a caller's stream's work, stored when it runs; or
 * (wait set) a wait there for another process's event, which the held
 * work after it waits for when it runs. */
struct held_write {
	uint32_t *addr;
	uint32_t value;
	struct ev_word *wait;
	struct held_write *next;
};
static struct held_write *held, **held_tail = &held; /* (mu), in order */

static void value_store(uint32_t *addr, uint32_t value)
{
	__atomic_store_n(addr, value, __ATOMIC_RELEASE);
	futex(addr, FUTEX_WAKE, INT32_MAX, NULL); /* shared memory: not private */
	ADD(value_writes, 1);
}

/* This process's held work has run: its kept writes land, in order. */
static void held_run(void)
{
	pthread_mutex_lock(&mu);
	struct held_write *h = held;
	held = NULL;
	held_tail = &held;
	pthread_mutex_unlock(&mu);
	while (h) {
		struct held_write *n = h->next;
		if (h->wait)
			ev_wait_foreign(h->wait);
		else
			value_store(h->addr, h->value);
		free(h);
		h = n;
	}
}

/* Appends h to the held work (in order). */
static void held_push(struct held_write *h)
{
	pthread_mutex_lock(&mu);
	*held_tail = h;
	held_tail = &h->next;
	pthread_mutex_unlock(&mu);
}

EXPORT void fake_cuda_complete_events(void)
{
	held_run();
	pthread_mutex_lock(&mu);
	for (struct fake_event *e = events; e; e = e->next)
		if (__atomic_load_n(&e->w->recorder, __ATOMIC_RELAXED) == getpid() &&
		    !(fake_queue && q_holds_event_locked(e->w)))
			ev_complete(e->w);
	pthread_mutex_unlock(&mu);
}

static void stats_to_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (ftruncate(fd, sizeof(*st)) == 0) {
		void *p = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED)
			st = p;
	}
	close(fd);
}

EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	const char *stats_path = getenv("FAKE_CUDA_STATS");
	if (stats_path && *stats_path && st == &local_stats)
		stats_to_file(stats_path);
	ADD(inits, 1);
	fake_version = env_int("FAKE_CUDA_VERSION", 13000);
	fake_devices = env_int("FAKE_CUDA_DEVICES", 1);
	fake_ro = env_int("FAKE_CUDA_RO", 0);
	fake_init_result = env_int("FAKE_CUDA_INIT", 0);
	fake_uuid_seed = env_int("FAKE_CUDA_UUID_SEED", 0);
	const char *lim = getenv("FAKE_CUDA_MEM_LIMIT");
	fake_mem_limit = lim && *lim ? atoll(lim) : -1;
	const char *ev = getenv("FAKE_CUDA_EVENTS");
	fake_auto = ev && !strcmp(ev, "auto");
	fake_queue = env_int("FAKE_CUDA_QUEUE", 0);
	return fake_init_result;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = env_int("FAKE_CUDA_VERSION", 13000);
	return 0;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
	switch (e) {
	case 0: *s = "CUDA_SUCCESS"; return 0;
	case E_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
	case E_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
	case E_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; return 0;
	case 999: *s = "CUDA_ERROR_UNKNOWN"; return 0;
	default: return 1;
	}
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = fake_devices;
	return 0;
}

EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= fake_devices)
		return E_INVALID_DEVICE;
	*d = ordinal;
	return 0;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int d)
{
	snprintf(name, (size_t)len, "Fake GPU %d (test double)", d);
	return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
	(void)d;
	switch (attr) {
	case 75: *v = 9; return 0;  /* compute capability 9.0 */
	case 76: *v = 0; return 0;
	case 41: *v = 1; return 0;  /* unified addressing */
	case 113: *v = fake_ro; return 0;
	case 125: *v = 1; return 0; /* IPC events */
	default: *v = 0; return 0;
	}
}

EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *u, int d)
{
	if (d < 0 || d >= fake_devices)
		return E_INVALID_DEVICE;
	memset(u, 0, 16);
	memcpy(u, "FAKE", 4);
	memcpy(u + 4, &fake_uuid_seed, sizeof(fake_uuid_seed));
	memcpy(u + 8, &d, sizeof(d));
	return 0;
}

EXPORT CUresult cuCtxGetCurrent(void **c)
{
	*c = current_ctx;
	return 0;
}

EXPORT CUresult cuCtxSetCurrent(void *c)
{
	current_ctx = c;
	return 0;
}

EXPORT CUresult cuCtxGetDevice(int *d)
{
	*d = 0;
	return current_ctx ? 0 : E_INVALID_CONTEXT;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **c, int d)
{
	(void)d;
	ADD(primary_retains, 1);
	*c = &fake_ctx_obj;
	return 0;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
	(void)d;
	ADD(primary_releases, 1);
	return 0;
}

static void implicit_sync(void);

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	implicit_sync();
	ADD(registers, 1);
	st->last_register_ptr = p;
	st->last_register_bytes = n;
	st->last_register_flags = flags;
	return 0;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	implicit_sync();
	(void)p;
	ADD(unregisters, 1);
	return 0;
}

/* ---- device memory ---- */

static struct mapping *map_find(uintptr_t base)
{
	for (int i = 0; i < nmaps; i++)
		if ((uintptr_t)maps[i].base == base)
			return &maps[i];
	return NULL;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	size_t size = n ? n : 1;
	pthread_mutex_lock(&mu);
	bool full = fake_mem_limit >= 0 && fake_mem_used + (long long)size > fake_mem_limit;
	pthread_mutex_unlock(&mu);
	if (full)
		return E_OUT_OF_MEMORY;
	int fd = memfd_create("fake_cuda_device", MFD_CLOEXEC);
	if (fd < 0)
		return E_OUT_OF_MEMORY;
	void *m = ftruncate(fd, (off_t)size) == 0 ?
			  mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
	if (m == MAP_FAILED) {
		close(fd);
		return E_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mu);
	if (nmaps == (int)(sizeof(maps) / sizeof(maps[0]))) {
		pthread_mutex_unlock(&mu);
		munmap(m, size);
		close(fd);
		return E_OUT_OF_MEMORY;
	}
	maps[nmaps++] = (struct mapping){m, size, fd};
	fake_mem_used += (long long)size;
	pthread_mutex_unlock(&mu);
	ADD(allocs, 1);
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	implicit_sync();
	pthread_mutex_lock(&mu);
	struct mapping *m = map_find((uintptr_t)p);
	if (!m || m->fd < 0) {
		pthread_mutex_unlock(&mu);
		return E_INVALID_VALUE;
	}
	struct mapping gone = *m;
	*m = maps[--nmaps];
	fake_mem_used -= (long long)gone.size;
	pthread_mutex_unlock(&mu);
	munmap(gone.base, gone.size);
	close(gone.fd);
	ADD(frees, 1);
	return 0;
}

EXPORT CUresult cuIpcGetMemHandle(void *h, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct mapping *m = map_find((uintptr_t)p);
	struct ipc_mem_handle ih = {IPC_MAGIC, getpid(), m ? m->fd : -1, 0, m ? m->size : 0};
	pthread_mutex_unlock(&mu);
	if (!m || ih.fd < 0)
		return E_INVALID_VALUE;
	memset(h, 0, 64);
	memcpy(h, &ih, sizeof(ih));
	ADD(ipc_mem_exports, 1);
	return 0;
}

/* Opens /proc/pid/fd/fd, the exporter's descriptor. */
static int open_remote(int32_t pid, int32_t fd)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)fd);
	return open(path, O_RDWR | O_CLOEXEC);
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, struct ipc_blob h, unsigned flags)
{
	struct ipc_mem_handle ih;
	memcpy(&ih, h.b, sizeof(ih));
	if (flags != 1 || ih.magic != IPC_MAGIC)
		return E_INVALID_VALUE;
	int fd = open_remote(ih.pid, ih.fd);
	if (fd < 0)
		return E_INVALID_HANDLE;
	void *m = mmap(NULL, ih.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return E_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	if (nmaps == (int)(sizeof(maps) / sizeof(maps[0]))) {
		pthread_mutex_unlock(&mu);
		munmap(m, ih.size);
		return E_OUT_OF_MEMORY;
	}
	maps[nmaps++] = (struct mapping){m, ih.size, -1};
	pthread_mutex_unlock(&mu);
	ADD(ipc_mem_opens, 1);
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct mapping *m = map_find((uintptr_t)p);
	if (!m || m->fd >= 0) {
		pthread_mutex_unlock(&mu);
		return E_INVALID_VALUE;
	}
	struct mapping gone = *m;
	*m = maps[--nmaps];
	pthread_mutex_unlock(&mu);
	munmap(gone.base, gone.size);
	ADD(ipc_mem_closes, 1);
	return 0;
}

/* ---- streams: work is done at enqueue ---- */

#define MAX_STREAMS 4096
static char stream_objs[MAX_STREAMS]; /* cuStreamCreate's: one byte each */
static int nstreams;                   /* (mu); never reused: tests make few */

/* s was made by cuStreamCreate here (runs at once), not a caller's. */
static bool stream_made(const void *s)
{
	return (const char *)s >= stream_objs && (const char *)s < stream_objs + MAX_STREAMS;
}

/* ---- FAKE_CUDA_QUEUE: a made stream behind a wait it cannot pass ----
 * holds the work enqueued on it after that wait, in order, as a device
 * does, instead of blocking the thread that enqueues; a thread of the
 * double runs it once the wait passes (the word written, by any process,
 * or the event complete). Kernels and copies read their sources then, so
 * what a copy on another stream overwrites meanwhile is what they see. */

struct kernel_args {           /* a launch, decoded (its params die with the call) */
	const struct fake_func *f;
	struct feed_convert cv;    /* images */
	CUdeviceptr src, flip, dst;
	size_t n;
};

enum q_kind { Q_WAIT_VALUE, Q_WAIT_EVENT, Q_WRITE, Q_COPY, Q_KERNEL, Q_RECORD };

struct q_op {
	enum q_kind kind;
	uint32_t *addr;            /* WAIT_VALUE, WRITE */
	uint32_t value;
	unsigned flags;
	struct ev_word *ev;        /* WAIT_EVENT, RECORD */
	void *dst;                 /* COPY */
	const void *src;
	size_t n;
	struct kernel_args k;      /* KERNEL */
	struct q_op *next;
};

static struct q_op *qhead[MAX_STREAMS], *qlast[MAX_STREAMS]; /* (mu) */
static bool q_runner;                                         /* (mu) started */
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;         /* queued work ran */

static bool value_ok(const uint32_t *w, uint32_t value, unsigned flags);
static CUresult kernel_run(const struct kernel_args *k);

/* The queue index of s, or -1: not a made stream, or queueing is off. */
static int q_index(const void *s)
{
	return fake_queue && stream_made(s) ? (int)((const char *)s - stream_objs) : -1;
}

static bool q_ready(const struct q_op *o)
{
	if (o->kind == Q_WAIT_VALUE)
		return value_ok(o->addr, o->value, o->flags);
	if (o->kind == Q_WAIT_EVENT)
		return __atomic_load_n(&o->ev->state, __ATOMIC_ACQUIRE) != EV_PENDING;
	return true;
}

static void q_run(const struct q_op *o)
{
	switch (o->kind) {
	case Q_WAIT_VALUE:
	case Q_WAIT_EVENT:
		break;
	case Q_WRITE:
		value_store(o->addr, o->value);
		break;
	case Q_COPY:
		memmove(o->dst, o->src, o->n);
		break;
	case Q_KERNEL:
		(void)kernel_run(&o->k); /* a failure was the enqueuer's to see: none here */
		break;
	case Q_RECORD:
		ev_complete(o->ev);
		break;
	}
}

/* Runs every queue's work up to its next wait that cannot pass (mu held). */
static void q_drain_locked(void)
{
	bool ran = false;
	for (int i = 0; i < nstreams; i++)
		while (qhead[i] && q_ready(qhead[i])) {
			struct q_op *o = qhead[i];
			qhead[i] = o->next;
			q_run(o);
			free(o);
			ran = true;
		}
	if (ran)
		pthread_cond_broadcast(&q_cv);
}

/* Some made stream of this process still holds queued work (mu held). */
static bool q_busy_locked(void)
{
	for (int i = 0; i < nstreams; i++)
		if (qhead[i])
			return true;
	return false;
}

/* What cuMemFree, cuMemHostRegister and cuMemHostUnregister do on a
 * device: wait until the context's queued work has run, whoever's wait
 * holds it (with FAKE_CUDA_QUEUE: every made stream's queue empty). */
static void implicit_sync(void)
{
	if (!fake_queue)
		return;
	pthread_mutex_lock(&mu);
	if (q_busy_locked()) {
		ADD(implicit_syncs_blocked, 1);
		while (q_busy_locked())
			pthread_cond_wait(&q_cv, &mu);
	}
	pthread_mutex_unlock(&mu);
}

static void *q_thread(void *arg)
{
	(void)arg;
	const struct timespec tick = {0, 200 * 1000};
	for (;;) {
		pthread_mutex_lock(&mu);
		q_drain_locked();
		bool busy = false;
		for (int i = 0; i < nstreams && !busy; i++)
			busy = qhead[i] != NULL;
		if (!busy)
			q_runner = false; /* the next queued op starts another */
		pthread_mutex_unlock(&mu);
		if (!busy)
			return NULL;
		nanosleep(&tick, NULL);
	}
}

/* Appends op to queue i (mu held): E_OUT_OF_MEMORY or 0. */
static CUresult q_push_locked(int i, const struct q_op *op)
{
	struct q_op *o = malloc(sizeof(*o));
	if (!o)
		return E_OUT_OF_MEMORY;
	*o = *op;
	o->next = NULL;
	if (qhead[i])
		qlast[i]->next = o;
	else
		qhead[i] = o;
	qlast[i] = o;
	if (!q_runner) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		q_runner = pthread_create(&t, &a, q_thread, NULL) == 0;
		pthread_attr_destroy(&a);
	}
	return 0;
}

/* Queues op on made stream s when work is queued there already (always,
 * when force): 1 when queued, 0 when the caller should do it now, or an
 * error. */
static CUresult q_maybe_push(const void *s, const struct q_op *op, bool force, int *ret_queued)
{
	int i = q_index(s);
	CUresult r = 0;
	*ret_queued = 0;
	if (i < 0)
		return 0;
	pthread_mutex_lock(&mu);
	if (qhead[i] || force) {
		r = q_push_locked(i, op);
		*ret_queued = r == 0;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

/* An event whose last record waits in a queue (mu held). */
static bool q_holds_event_locked(const struct ev_word *w)
{
	for (int i = 0; i < nstreams; i++)
		for (const struct q_op *o = qhead[i]; o; o = o->next)
			if (o->kind == Q_RECORD && o->ev == w)
				return true;
	return false;
}

static bool q_holds_event(const struct ev_word *w)
{
	if (!fake_queue)
		return false;
	pthread_mutex_lock(&mu);
	bool r = q_holds_event_locked(w);
	pthread_mutex_unlock(&mu);
	return r;
}

/* A copy on stream: now, or queued behind what waits there. */
static CUresult copy_on(void *dst, const void *src, size_t n, void *stream)
{
	struct q_op op = {.kind = Q_COPY, .dst = dst, .src = src, .n = n};
	int queued;
	CUresult r = q_maybe_push(stream, &op, false, &queued);
	if (!r && !queued)
		memmove(dst, src, n);
	return r;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream)
{
	ADD(copies, 1);
	ADD(copied_bytes, n);
	return copy_on((void *)(uintptr_t)dst, src, n, stream);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream)
{
	ADD(dtoh_copies, 1);
	return copy_on(dst, (const void *)(uintptr_t)src, n, stream);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream)
{
	ADD(dtod_copies, 1);
	return copy_on((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, stream);
}

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
	(void)flags;
	pthread_mutex_lock(&mu);
	int i = nstreams < MAX_STREAMS ? nstreams++ : -1;
	pthread_mutex_unlock(&mu);
	if (i < 0)
		return E_OUT_OF_MEMORY;
	ADD(streams_created, 1);
	*s = &stream_objs[i];
	return 0;
}

EXPORT CUresult cuStreamDestroy_v2(void *s)
{
	if (!stream_made(s))
		return E_INVALID_HANDLE;
	int i = q_index(s);
	if (i >= 0) { /* what never ran goes with it (its memory may go next) */
		pthread_mutex_lock(&mu);
		while (qhead[i]) {
			struct q_op *o = qhead[i];
			qhead[i] = o->next;
			free(o);
		}
		pthread_mutex_unlock(&mu);
	}
	ADD(streams_destroyed, 1);
	return 0;
}

EXPORT CUresult cuStreamWriteValue32_v2(void *s, CUdeviceptr addr, uint32_t value,
					unsigned flags)
{
	if (flags || !addr || addr % 4)
		return E_INVALID_VALUE;
	if (!s && !current_ctx)
		return E_INVALID_CONTEXT;
	uint32_t *w = (uint32_t *)(uintptr_t)addr;
	if (fake_auto || stream_made(s)) {
		struct q_op op = {.kind = Q_WRITE, .addr = w, .value = value};
		int queued;
		CUresult r = q_maybe_push(s, &op, false, &queued);
		if (!r && !queued)
			value_store(w, value);
		return r;
	}
	struct held_write *h = malloc(sizeof(*h));
	if (!h)
		return E_OUT_OF_MEMORY;
	*h = (struct held_write){w, value, NULL, NULL};
	held_push(h);
	ADD(value_writes_held, 1);
	return 0;
}

static bool value_ok(const uint32_t *w, uint32_t value, unsigned flags)
{
	uint32_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	return flags == 1 ? v == value : (int32_t)(v - value) >= 0;
}

EXPORT CUresult cuStreamWaitValue32_v2(void *s, CUdeviceptr addr, uint32_t value,
				       unsigned flags)
{
	const struct timespec tick = {0, 50 * 1000 * 1000};
	if (flags > 1 || !addr || addr % 4) /* GEQ (0) and EQ (1) only */
		return E_INVALID_VALUE;
	if (!s && !current_ctx)
		return E_INVALID_CONTEXT;
	uint32_t *w = (uint32_t *)(uintptr_t)addr;
	if (q_index(s) >= 0) { /* queued behind what waits there, or this wait */
		struct q_op op = {.kind = Q_WAIT_VALUE, .addr = w, .value = value, .flags = flags};
		bool ok = value_ok(w, value, flags);
		int queued;
		CUresult r = q_maybe_push(s, &op, !ok, &queued);
		if (queued && !ok) /* not a wait that passes, queued behind others */
			ADD(value_waits_blocked, 1);
		return r;
	}
	if (value_ok(w, value, flags))
		return 0;
	ADD(value_waits_blocked, 1);
	while (!value_ok(w, value, flags))
		futex(w, FUTEX_WAIT, __atomic_load_n(w, __ATOMIC_ACQUIRE), &tick);
	return 0;
}

EXPORT CUresult cuStreamSynchronize(void *s)
{
	const struct timespec tick = {0, 200 * 1000};
	int i = q_index(s);
	for (;;) {
		pthread_mutex_lock(&mu);
		bool busy = i >= 0 && qhead[i];
		pthread_mutex_unlock(&mu);
		if (!busy)
			return 0;
		nanosleep(&tick, NULL);
	}
}

/* ---- events ---- */

/* A new word in this process's arena (mu held). */
static struct ev_word *arena_take(uint32_t *ret_slot)
{
	if (!arena) {
		arena_fd = memfd_create("fake_cuda_events", MFD_CLOEXEC);
		if (arena_fd < 0 || ftruncate(arena_fd, ARENA_SLOTS * sizeof(struct ev_word)) < 0)
			return NULL;
		void *p = mmap(NULL, ARENA_SLOTS * sizeof(struct ev_word), PROT_READ | PROT_WRITE,
			       MAP_SHARED, arena_fd, 0);
		if (p == MAP_FAILED)
			return NULL;
		arena = p;
	}
	if (arena_used == ARENA_SLOTS)
		return NULL; /* never reused: a test makes far fewer */
	*ret_slot = arena_used;
	return &arena[arena_used++];
}

static CUresult event_add(struct ev_word *w, uint32_t slot, unsigned flags, int opened,
			  struct fake_event **ret)
{
	struct fake_event *ev = calloc(1, sizeof(*ev));
	if (!ev)
		return E_OUT_OF_MEMORY;
	*ev = (struct fake_event){w, slot, flags, opened, events};
	events = ev;
	*ret = ev;
	return 0;
}

EXPORT CUresult cuEventCreate(struct fake_event **e, unsigned flags)
{
	if ((flags & 4) && !(flags & 2))
		return E_INVALID_VALUE; /* INTERPROCESS needs DISABLE_TIMING */
	pthread_mutex_lock(&mu);
	uint32_t slot;
	struct ev_word *w = arena_take(&slot);
	CUresult r = w ? event_add(w, slot, flags, 0, e) : E_OUT_OF_MEMORY;
	if (r == 0)
		*w = (struct ev_word){EV_NONE, 0};
	pthread_mutex_unlock(&mu);
	if (r == 0)
		ADD(events_created, 1);
	return r;
}

EXPORT CUresult cuIpcGetEventHandle(void *h, struct fake_event *e)
{
	if (!e || e->opened || !(e->flags & 4))
		return E_INVALID_VALUE;
	struct ipc_event_handle ih = {IPC_MAGIC, getpid(), arena_fd, e->slot};
	memset(h, 0, 64);
	memcpy(h, &ih, sizeof(ih));
	ADD(ipc_event_exports, 1);
	return 0;
}

EXPORT CUresult cuIpcOpenEventHandle(struct fake_event **e, struct ipc_blob h)
{
	struct ipc_event_handle ih;
	memcpy(&ih, h.b, sizeof(ih));
	if (ih.magic != IPC_MAGIC || ih.slot >= ARENA_SLOTS)
		return E_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct ev_word *words = NULL;
	for (int i = 0; i < nremotes; i++)
		if (remotes[i].pid == ih.pid && remotes[i].fd == ih.fd)
			words = remotes[i].words;
	if (!words && nremotes < (int)(sizeof(remotes) / sizeof(remotes[0]))) {
		int fd = open_remote(ih.pid, ih.fd);
		void *p = fd < 0 ? MAP_FAILED :
				   mmap(NULL, ARENA_SLOTS * sizeof(struct ev_word),
					PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (fd >= 0)
			close(fd);
		if (p != MAP_FAILED) {
			words = p;
			remotes[nremotes++] = (struct remote_arena){ih.pid, ih.fd, words};
		}
	}
	CUresult r = words ? event_add(&words[ih.slot], ih.slot, 6, 1, e) : E_INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	if (r == 0)
		ADD(ipc_event_opens, 1);
	return r;
}

EXPORT CUresult cuEventRecord(struct fake_event *e, void *stream)
{
	if (!stream && !current_ctx)
		return E_INVALID_CONTEXT; /* the legacy default stream is the current context's */
	struct ev_word *w = e->w;
	uint32_t was = __atomic_exchange_n(&w->state, EV_PENDING, __ATOMIC_ACQ_REL);
	bool ours = __atomic_load_n(&w->recorder, __ATOMIC_RELAXED) == getpid();
	__atomic_store_n(&w->recorder, getpid(), __ATOMIC_RELEASE);
	if (!(was == EV_PENDING && ours))
		ADD(events_pending, 1);
	struct q_op op = {.kind = Q_RECORD, .ev = w};
	int queued;
	CUresult r = q_maybe_push(stream, &op, false, &queued);
	if (!r && !queued && (fake_auto || stream_made(stream))) /* nothing held before it */
		ev_complete(w);
	return r;
}

EXPORT CUresult cuEventQuery(struct fake_event *e)
{
	return __atomic_load_n(&e->w->state, __ATOMIC_ACQUIRE) == EV_PENDING ? E_NOT_READY : 0;
}

/* A wait for e: ours completes it, another process's blocks until it is
 * complete. Returns whether it had to block. */
static bool event_wait(struct fake_event *e)
{
	struct ev_word *w = e->w;
	if (__atomic_load_n(&w->state, __ATOMIC_ACQUIRE) != EV_PENDING)
		return false;
	if (__atomic_load_n(&w->recorder, __ATOMIC_ACQUIRE) == getpid() && !q_holds_event(w)) {
		held_run(); /* the work before it runs too */
		ev_complete(w);
		return false;
	}
	return true;
}

EXPORT CUresult cuEventSynchronize(struct fake_event *e)
{
	ADD(syncs, 1);
	if (event_wait(e))
		ev_wait_foreign(e->w);
	return 0;
}

EXPORT CUresult cuStreamWaitEvent(void *s, struct fake_event *e, unsigned flags)
{
	if (flags)
		return E_INVALID_VALUE;
	if (!s && !current_ctx)
		return E_INVALID_CONTEXT;
	if (q_index(s) >= 0) { /* a made stream, queueing: the device waits */
		struct q_op op = {.kind = Q_WAIT_EVENT, .ev = e->w};
		int queued;
		return q_maybe_push(s, &op, __atomic_load_n(&e->w->state, __ATOMIC_ACQUIRE) ==
						   EV_PENDING, &queued);
	}
	bool foreign = __atomic_load_n(&e->w->recorder, __ATOMIC_ACQUIRE) != getpid();
	if (!fake_auto && !stream_made(s) && foreign &&
	    __atomic_load_n(&e->w->state, __ATOMIC_ACQUIRE) == EV_PENDING) {
		/* a caller's stream holds its work anyway: the wait joins it */
		struct held_write *h = malloc(sizeof(*h));
		if (!h)
			return E_OUT_OF_MEMORY;
		*h = (struct held_write){NULL, 0, e->w, NULL};
		held_push(h);
		return 0;
	}
	if (event_wait(e)) {
		ADD(stream_waits_blocked, 1);
		ev_wait_foreign(e->w);
	}
	return 0;
}

EXPORT CUresult cuEventDestroy_v2(struct fake_event *e)
{
	pthread_mutex_lock(&mu);
	struct fake_event **p = &events;
	while (*p && *p != e)
		p = &(*p)->next;
	if (!*p) {
		pthread_mutex_unlock(&mu);
		return E_INVALID_HANDLE;
	}
	*p = e->next;
	pthread_mutex_unlock(&mu);
	if (!e->opened) {
		/* a pending event of ours goes with its pending count */
		uint32_t pend = EV_PENDING;
		if (__atomic_load_n(&e->w->recorder, __ATOMIC_RELAXED) == getpid() &&
		    __atomic_compare_exchange_n(&e->w->state, &pend, EV_NONE, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			ADD(events_pending, -1);
		ADD(events_destroyed, 1);
	}
	free(e);
	return 0;
}

/* ---- modules and kernels ---- */

EXPORT CUresult cuModuleLoadData(void **m, const void *image)
{
	uint32_t magic;
	if (!image)
		return E_INVALID_VALUE;
	memcpy(&magic, image, sizeof(magic));
	if (magic != 0xBA55ED50u) /* a fatbin's header */
		return E_INVALID_IMAGE;
	ADD(module_loads, 1);
	*m = &local_stats;
	return 0;
}

EXPORT CUresult cuModuleUnload(void *m)
{
	(void)m;
	return 0;
}

EXPORT CUresult cuModuleGetFunction(struct fake_func **f, void *m, const char *name)
{
	(void)m;
	CUresult r = 0;
	pthread_mutex_lock(&mu);
	int i = 0;
	while (i < nfuncs && strcmp(funcs[i].name, name))
		i++;
	if (i == nfuncs) {
		if (nfuncs == 16 || strlen(name) >= sizeof(funcs[0].name))
			r = E_NOT_FOUND;
		else
			snprintf(funcs[nfuncs++].name, sizeof(funcs[0].name), "%s", name);
	}
	if (!r)
		*f = &funcs[i];
	pthread_mutex_unlock(&mu);
	return r;
}

/* Runs the CPU twin of the kernel k names on "device" (host) memory. */
static CUresult kernel_run(const struct kernel_args *k)
{
	const char *name = k->f->name;
	if (!strncmp(name, "feed_k_images_", 14)) {
		static const char *const dt[] = {"f32", "f16", "bf16"};
		if ((unsigned)k->cv.dtype > 2 || strcmp(name + 14, dt[k->cv.dtype]))
			return 1; /* the kernel does not match the conversion */
		return feed_convert_images_cpu(&k->cv, (const uint8_t *)(uintptr_t)k->src, k->n,
					       (const uint8_t *)(uintptr_t)k->flip,
					       (void *)(uintptr_t)k->dst) ? 1 : 0;
	}
	const void *src = (const void *)(uintptr_t)k->src;
	int64_t *dst = (int64_t *)(uintptr_t)k->dst;
	if (!strcmp(name, "feed_k_tokens_u16"))
		return feed_convert_tokens_u16_cpu(src, k->n, dst) ? 1 : 0;
	if (!strcmp(name, "feed_k_tokens_u32"))
		return feed_convert_tokens_u32_cpu(src, k->n, dst) ? 1 : 0;
	return 1;
}

/* Decodes the launch; runs it now, or queued behind what waits on stream. */
EXPORT CUresult cuLaunchKernel(struct fake_func *f, unsigned gx, unsigned gy, unsigned gz,
			       unsigned bx, unsigned by, unsigned bz, unsigned shmem, void *stream,
			       void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
	ADD(launches, 1);
	/* the client's batch mixes (never on a stream the queue holds): now */
	if (!strncmp(f->name, "feed_k_mix_", 11) && strcmp(f->name, "feed_k_mix_labels")) {
		const struct feed_convert *cv = params[0];
		const struct feed_mix_args *a = params[1];
		size_t n = *(size_t *)params[2];
		void *data = (void *)(uintptr_t) * (CUdeviceptr *)params[3];
		static const char *const dt[] = {"f32", "f16", "bf16"};
		if ((unsigned)cv->dtype > 2 || strcmp(f->name + 11, dt[cv->dtype]))
			return 1;
		return feed_mix_images_cpu(cv, a, n, data) ? 1 : 0;
	}
	if (!strcmp(f->name, "feed_k_mix_labels")) {
		const struct feed_mix_args *a = params[0];
		const void *labels = (const void *)(uintptr_t) * (CUdeviceptr *)params[1];
		uint32_t t = *(uint32_t *)params[2];
		size_t n = *(size_t *)params[3];
		float *dst = (float *)(uintptr_t) * (CUdeviceptr *)params[4];
		return feed_mix_labels_cpu(a, labels, t, n, dst) ? 1 : 0;
	}
	struct q_op op = {.kind = Q_KERNEL, .k.f = f};
	if (!strncmp(f->name, "feed_k_images_", 14)) {
		op.k.cv = *(const struct feed_convert *)params[0];
		op.k.src = *(CUdeviceptr *)params[1];
		op.k.n = *(size_t *)params[2];
		op.k.flip = *(CUdeviceptr *)params[3];
		op.k.dst = *(CUdeviceptr *)params[4];
	} else {
		op.k.src = *(CUdeviceptr *)params[0];
		op.k.n = *(size_t *)params[1];
		op.k.dst = *(CUdeviceptr *)params[2];
	}
	int queued;
	CUresult r = q_maybe_push(stream, &op, false, &queued);
	return r || queued ? r : kernel_run(&op.k);
}
