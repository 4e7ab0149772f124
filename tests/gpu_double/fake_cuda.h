/*
 * fake_cuda.h: the test double of the CUDA driver (fake_cuda.c), a shared
 * library exporting the driver entry points libfeedclient and feedd
 * dlopen() (kernels/cudrv.h), loaded in their place through
 * FEED_CUDA_DRIVER. It is not a driver: device memory is shared host
 * memory (memfd), copies happen at once, kernels run the CPU twins, and an
 * event completes only when the process that recorded it says so
 * (fake_cuda_complete_events) or waits for it itself.
 *
 * Across processes (CUDA IPC), as the real driver does it in spirit:
 *   - cuMemAlloc memory is a memfd mapping; cuIpcGetMemHandle names it by
 *     the exporter's pid and descriptor, and cuIpcOpenMemHandle maps the
 *     same memory through /proc/<pid>/fd (an exporter gone: 400).
 *   - Every event's state is a word in a per-process shared arena;
 *     cuIpcOpenEventHandle maps the exporter's arena, so an event recorded
 *     in one process is seen, waited for and completed in the other.
 *   - Waiting (cuEventSynchronize, cuStreamWaitEvent) for an event this
 *     process recorded completes it (the wait lets our own work run);
 *     waiting for one another process recorded blocks (a futex on the
 *     shared word) until that process completes it, for ever if it died
 *     first: as with the real driver, an interprocess event recorded by a
 *     process that dies before the record runs never completes.
 *     cuStreamWaitEvent counts stream_waits_blocked before it blocks.
 *   - Stream memory operations on device memory (shared, so across
 *     processes): cuStreamWriteValue32_v2 stores the word and wakes its
 *     waiters; cuStreamWaitValue32_v2 (GEQ, cyclic, or EQ) blocks the
 *     calling thread until the word matches (work is done at enqueue, so
 *     the wait holds back whatever that thread enqueues next), counting
 *     value_waits_blocked before it blocks: how a test sees feedd wait
 *     for a client's done word.
 *   - A caller's stream (any CUstream the process did not make with
 *     cuStreamCreate, NULL included) holds its work until the test says
 *     it ran, unless FAKE_CUDA_EVENTS=auto: a write of a value there is
 *     kept (value_writes_held) and stored when this process completes its
 *     events (fake_cuda_complete_events) or waits for one of its own
 *     pending events (the wait lets its work run); a process that dies
 *     first never stores it. Streams made with cuStreamCreate run at
 *     once: an event recorded there completes as recorded. A caller's
 *     stream (without FAKE_CUDA_EVENTS=auto) waiting for another process's
 *     pending event does not block the caller: the wait joins the work
 *     held there, and the writes after it land only once that event has
 *     completed.
 *   - With FAKE_CUDA_QUEUE=1, a made stream behind a wait it cannot pass
 *     (cuStreamWaitValue32 on a word not there yet, cuStreamWaitEvent on
 *     a pending event) does not block the thread either: it queues the
 *     work enqueued after it (copies, kernels, writes, records) in order,
 *     as a device would, and a thread of the double runs it once the
 *     wait passes (counting value_waits_blocked when a value wait
 *     queues). Kernels and copies read their sources when they run, so a
 *     copy on another stream that overwrites a source meanwhile shows, as
 *     on a GPU. An event recorded behind such a wait completes when the
 *     record runs (waiting for it waits for that). cuMemFree,
 *     cuMemHostRegister and cuMemHostUnregister then synchronise
 *     implicitly, as a device's do: they block until every made stream's
 *     queue has run (counting implicit_syncs_blocked), however long a
 *     client's work holds one.
 *
 * Like the driver, cuEventRecord and cuStreamWaitEvent on the legacy
 * default stream (NULL) fail with CUDA_ERROR_INVALID_CONTEXT on a thread
 * with no current context (the current context is per thread).
 *
 * Set up through the environment, read at cuInit:
 *   FAKE_CUDA_VERSION   cuDriverGetVersion's value (default 13000)
 *   FAKE_CUDA_DEVICES   device count (default 1)
 *   FAKE_CUDA_RO        READ_ONLY_HOST_REGISTER_SUPPORTED of device 0 (default 0)
 *   FAKE_CUDA_INIT      cuInit's result code (default 0)
 *   FAKE_CUDA_EVENTS    "auto": every cuEventRecord completes at once (a
 *                       process standing in for feedd, whose copies and
 *                       kernels are done when enqueued); default manual
 *   FAKE_CUDA_UUID_SEED devices' UUIDs differ with it (default 0): a client
 *                       with another seed sees "another GPU" than feedd
 *   FAKE_CUDA_MEM_LIMIT bytes of device memory cuMemAlloc gives in all, then
 *                       CUDA_ERROR_OUT_OF_MEMORY (default: no limit)
 *   FAKE_CUDA_QUEUE     1: made streams queue work behind a wait (above);
 *                       default 0: the enqueuing thread blocks in the wait
 *   FAKE_CUDA_STATS     a file: this process's counters live there (created
 *                       and zeroed at cuInit), for another process to read
 *                       with fake_cuda_stats_map()
 * A test reaches the functions below with dlopen() of the same path (the
 * same handle) and dlsym().
 */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

/* What the double saw (counters updated atomically: feedd calls from
 * several threads). */
struct fake_cuda_stats {
	int inits;
	int registers, unregisters;   /* cuMemHostRegister / Unregister calls */
	unsigned last_register_flags;
	void *last_register_ptr;
	size_t last_register_bytes;
	int copies;                   /* cuMemcpyHtoDAsync */
	size_t copied_bytes;
	int launches;                 /* cuLaunchKernel */
	int module_loads;             /* cuModuleLoadData with a fatbin image */
	int events_created, events_destroyed, events_pending; /* recorded by us, not complete */
	int syncs;                    /* cuEventSynchronize */
	int allocs, frees;            /* cuMemAlloc / cuMemFree */
	int primary_retains, primary_releases;
	int ipc_mem_exports, ipc_mem_opens, ipc_mem_closes;
	int ipc_event_exports, ipc_event_opens;
	int stream_waits_blocked;     /* cuStreamWaitEvent on another process's pending event */
	int streams_created, streams_destroyed;
	int dtod_copies;              /* cuMemcpyDtoDAsync */
	int dtoh_copies;              /* cuMemcpyDtoHAsync (feedd's nvJPEG decode) */
	int value_writes;             /* cuStreamWriteValue32_v2 stored */
	int value_writes_held;        /* ... kept behind a caller's stream's work */
	int value_waits_blocked;      /* cuStreamWaitValue32_v2 that had to block (or queue) */
	int implicit_syncs_blocked;   /* cuMemFree / cuMemHostRegister / Unregister that
				       * waited for queued work (FAKE_CUDA_QUEUE) */
};

const struct fake_cuda_stats *fake_cuda_stats(void);
/* Completes every event this process recorded that is still pending, and
 * stores the values its callers' streams held. */
void fake_cuda_complete_events(void);

/* Another process's counters (its FAKE_CUDA_STATS file), mapped read-only,
 * or NULL. Read fields with __atomic_load_n. */
static inline const struct fake_cuda_stats *fake_cuda_stats_map(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	void *p = mmap(NULL, sizeof(struct fake_cuda_stats), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : (const struct fake_cuda_stats *)p;
}

#endif
