/*
 * fault_shim.c: an LD_PRELOAD library for the fault-injection tests (built
 * for tests only, never installed). Preloaded into feedd with
 * FEED_FAULT_CTL naming a control page (fault_ctl.h), it
 * - fails one chosen allocation of one chosen request: feedd, built with
 *   FEED_TEST_SEAMS, calls feed_fault_request(kind) on its loop thread when
 *   it starts handling a request of that kind and feed_fault_request(NULL)
 *   when it is done (daemon/policy/fault_seam.h; marks may nest). The
 *   first request of the armed kind takes the arming, and the fail_at-th
 *   allocation it makes on that thread (malloc, calloc, realloc,
 *   reallocarray, the aligned allocators, strdup, strndup) returns NULL
 *   with ENOMEM. Workers' allocations, and the loop's outside an armed
 *   request, are never touched;
 * - cuts pread() short, or fails it with EIO, on every file whose path
 *   contains read_path, while read_mode says so, after letting the first
 *   read_skip of them through;
 * - fails fallocate() with ENOSPC on a memfd whose name contains shm_name,
 *   while shm_fail says so: shared memory running out.
 * Kinds: "accept" (a new connection), "packet" (one request from its
 * bytes: decode, checks, handling, reply), the request's own kind inside
 * it ("hello", "list_datasets", "dataset_info", "stats", "open_stream",
 * "close_stream", "reload": feed.proto's field names), and
 * "open_stream/ready" (the loop's second half of an open, once a worker
 * has made the stream's regions).
 *
 * Each wrapper forwards to the next definition (dlsym RTLD_NEXT): the C
 * library's, or the sanitizer's in a sanitizer build, where this library
 * is built without instrumentation and preloaded ahead of the runtime
 * (ASAN_OPTIONS=verify_asan_link_order=0). strdup, strndup and
 * reallocarray are written here on top of malloc and realloc, so each
 * counts once whether the next library implements them through its own
 * malloc (glibc, through the PLT, so through ours) or not (ASan). The
 * calls dlsym itself makes before the next functions are known are served
 * from a static arena, never freed.
 *
 * Threads: any. The request state is per thread (the loop's); the control
 * page's fields are C11 atomics.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault_ctl.h"

#define FAULT_API __attribute__((visibility("default")))
#define FAULT_TLS __thread __attribute__((tls_model("initial-exec")))

static struct {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void (*free)(void *);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	ssize_t (*pread)(int, void *, size_t, off_t);
	ssize_t (*pread64)(int, void *, size_t, off_t);
	int (*fallocate)(int, int, off_t, off_t);
	int (*fallocate64)(int, int, off_t, off_t);
} next;

static struct fault_ctl *ctl;  /* NULL: FEED_FAULT_CTL unset or unusable */

/* The bootstrap arena: what dlsym allocates while next is being filled. */
#define ARENA_BYTES (64 * 1024)
static _Alignas(64) char arena[ARENA_BYTES];
static _Atomic size_t arena_used;
static FAULT_TLS bool t_resolving;

/* The armed request on this thread (the loop's). */
static FAULT_TLS int t_depth;        /* request marks open */
static FAULT_TLS int t_armed_depth;  /* the armed request's mark, 0: none */
static FAULT_TLS int64_t t_count;    /* allocations it made so far */
static FAULT_TLS int64_t t_fail_at;  /* the one to fail */

static void *arena_take(size_t n, size_t align)
{
	size_t at = atomic_load(&arena_used), start;

	do {
		start = (at + align - 1) & ~(align - 1);
		if (start + n > ARENA_BYTES)
			abort();  /* dlsym allocating this much: not the glibc we know */
	} while (!atomic_compare_exchange_weak(&arena_used, &at, start + n));
	return arena + start;
}

static bool arena_has(const void *p)
{
	return (const char *)p >= arena && (const char *)p < arena + ARENA_BYTES;
}

static void *fault_sym(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p) {
		static const char msg[] = "fault_shim: a function to wrap is missing\n";
		(void)!write(2, msg, sizeof(msg) - 1);
		abort();
	}
	return p;
}

static void fault_resolve(void)
{
	if (next.free || t_resolving)
		return;
	t_resolving = true;
	next.calloc = fault_sym("calloc");
	next.realloc = fault_sym("realloc");
	next.posix_memalign = fault_sym("posix_memalign");
	next.aligned_alloc = fault_sym("aligned_alloc");
	next.memalign = fault_sym("memalign");
	next.pread = fault_sym("pread");
	next.pread64 = fault_sym("pread64");
	next.fallocate = fault_sym("fallocate");
	next.fallocate64 = fault_sym("fallocate64");
	next.malloc = fault_sym("malloc");
	next.free = fault_sym("free");  /* last: its presence says all are there */
	t_resolving = false;
}

/* Maps the test's control page; ctl stays NULL without a usable one. */
__attribute__((constructor)) static void fault_init(void)
{
	const char *path = getenv("FEED_FAULT_CTL");

	fault_resolve();
	if (!path)
		return;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	void *p = mmap(NULL, sizeof(struct fault_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED && ((struct fault_ctl *)p)->magic == FAULT_CTL_MAGIC)
		ctl = p;
}

FAULT_API void feed_fault_request(const char *kind)
{
	if (!kind) {
		if (t_depth > 0 && t_depth == t_armed_depth) {
			atomic_store(&ctl->last_allocs, t_count);
			t_armed_depth = 0;
			atomic_fetch_add_explicit(&ctl->armed_done, 1, memory_order_release);
		}
		t_depth -= t_depth > 0;
		return;
	}
	t_depth++;
	if (t_armed_depth || !ctl)
		return;
	/* acquire: the test wrote kind before it stored fail_at */
	int64_t n = atomic_load_explicit(&ctl->fail_at, memory_order_acquire);
	if (n <= 0 || strncmp(ctl->kind, kind, FAULT_KIND_MAX) != 0 ||
	    !atomic_compare_exchange_strong(&ctl->fail_at, &n, 0))
		return;
	t_armed_depth = t_depth;
	t_count = 0;
	t_fail_at = n;
}

/* Counts one allocation of the armed request: true for the one to fail. */
static bool fault_alloc_fails(void)
{
	if (!t_armed_depth || ++t_count != t_fail_at)
		return false;
	atomic_fetch_add(&ctl->fired, 1);
	errno = ENOMEM;
	return true;
}

FAULT_API void *malloc(size_t n)
{
	if (!next.malloc) {
		fault_resolve();
		if (!next.malloc)
			return arena_take(n ? n : 1, 16);
	}
	return fault_alloc_fails() ? NULL : next.malloc(n);
}

FAULT_API void *calloc(size_t k, size_t n)
{
	if (!next.calloc) {
		fault_resolve();
		if (!next.calloc) {  /* the arena is static memory never reused: zero */
			if (n && k > SIZE_MAX / n)
				return NULL;
			return arena_take(k * n > 0 ? k * n : 1, 16);
		}
	}
	return fault_alloc_fails() ? NULL : next.calloc(k, n);
}

FAULT_API void free(void *p)
{
	if (!p || arena_has(p))
		return;
	if (!next.free)
		fault_resolve();
	next.free(p);
}

FAULT_API void *realloc(void *p, size_t n)
{
	if (p && arena_has(p)) {  /* its size is unknown: copy what may be there */
		void *q = malloc(n);
		if (q)
			memcpy(q, p, n < (size_t)(arena + ARENA_BYTES - (char *)p) ?
				     n : (size_t)(arena + ARENA_BYTES - (char *)p));
		return q;
	}
	if (!next.realloc)
		fault_resolve();
	if (n && fault_alloc_fails())
		return NULL;
	return next.realloc(p, n);
}

FAULT_API void *reallocarray(void *p, size_t k, size_t n)
{
	if (n && k > SIZE_MAX / n) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, k * n);
}

FAULT_API int posix_memalign(void **ret, size_t align, size_t n)
{
	if (!next.posix_memalign)
		fault_resolve();
	return fault_alloc_fails() ? ENOMEM : next.posix_memalign(ret, align, n);
}

FAULT_API void *aligned_alloc(size_t align, size_t n)
{
	if (!next.aligned_alloc)
		fault_resolve();
	return fault_alloc_fails() ? NULL : next.aligned_alloc(align, n);
}

FAULT_API void *memalign(size_t align, size_t n)
{
	if (!next.memalign)
		fault_resolve();
	return fault_alloc_fails() ? NULL : next.memalign(align, n);
}

FAULT_API char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = malloc(n);

	return p ? memcpy(p, s, n) : NULL;
}

FAULT_API char *strndup(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

/* True when fd is open on a path (a memfd: "/memfd:NAME (deleted)")
 * containing part. */
static bool fault_fd_matches(int fd, const char *part)
{
	char link[64], path[4096];

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n < 0)
		return false;
	path[n] = 0;
	return strstr(path, part) != NULL;
}

static ssize_t fault_pread(ssize_t (*real)(int, void *, size_t, off_t), int fd, void *buf,
			   size_t len, off_t off)
{
	/* acquire: the test wrote read_path before it stored read_mode */
	int mode = ctl ? atomic_load_explicit(&ctl->read_mode, memory_order_acquire) :
			 FAULT_READ_NONE;

	if (mode == FAULT_READ_NONE || !fault_fd_matches(fd, ctl->read_path))
		return real(fd, buf, len, off);
	int64_t skip = atomic_load(&ctl->read_skip);
	while (skip > 0 && !atomic_compare_exchange_weak(&ctl->read_skip, &skip, skip - 1))
		;
	if (skip > 0)
		return real(fd, buf, len, off);
	atomic_fetch_add(&ctl->read_faults, 1);
	if (mode == FAULT_READ_EIO) {
		errno = EIO;
		return -1;
	}
	return real(fd, buf, len > 1 ? len / 2 : len, off);
}

FAULT_API ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	if (!next.pread)
		fault_resolve();
	return fault_pread(next.pread, fd, buf, len, off);
}

FAULT_API ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	if (!next.pread64)
		fault_resolve();
	return fault_pread(next.pread64, fd, buf, len, off);
}

static int fault_fallocate(int (*real)(int, int, off_t, off_t), int fd, int mode, off_t off,
			   off_t len)
{
	/* acquire: the test wrote shm_name before it stored shm_fail */
	if (!ctl || !atomic_load_explicit(&ctl->shm_fail, memory_order_acquire) ||
	    !fault_fd_matches(fd, "/memfd:") || !fault_fd_matches(fd, ctl->shm_name))
		return real(fd, mode, off, len);
	atomic_fetch_add(&ctl->shm_faults, 1);
	errno = ENOSPC;
	return -1;
}

FAULT_API int fallocate(int fd, int mode, off_t off, off_t len)
{
	if (!next.fallocate)
		fault_resolve();
	return fault_fallocate(next.fallocate, fd, mode, off, len);
}

FAULT_API int fallocate64(int fd, int mode, off_t off, off_t len)
{
	if (!next.fallocate64)
		fault_resolve();
	return fault_fallocate(next.fallocate64, fd, mode, off, len);
}
