/*
 * fault_seam.h: test builds only (FEED_TEST_SEAMS): marks the span in which
 * the loop thread handles one request, for tests/fault/fault_shim.c (a
 * library the fault-injection tests preload into feedd, which fails a
 * chosen allocation of a chosen kind of request). fault_mark(kind) says a
 * request of that kind starts, fault_mark(NULL) that it is done; marks
 * nest (a packet, then the request in it). Each file that marks looks the
 * shim's feed_fault_request up once (dlsym, NULL when it is not loaded).
 *
 * Any thread: the shim keeps each thread's marks apart (the loop's
 * requests; a worker's part of one, as a reload's load). Without
 * FEEDD_TEST_SEAMS the marks compile to nothing; with it and no shim they
 * cost two atomic loads.
 */
#ifndef FEEDD_FAULT_SEAM_H
#define FEEDD_FAULT_SEAM_H

#include "feed.pb-c.h"

#ifdef FEEDD_TEST_SEAMS
#include <dlfcn.h>
#include <stdatomic.h>

typedef void fault_mark_fn(const char *kind);

static inline void fault_mark(const char *kind)
{
	/* any thread may look first; each finds the same function. Relaxed
	 * for mark: looked's release/acquire orders it */
	static _Atomic(fault_mark_fn *) mark;
	static atomic_bool looked;
	fault_mark_fn *fn;

	if (!atomic_load_explicit(&looked, memory_order_acquire)) {
		*(void **)&fn = dlsym(RTLD_DEFAULT, "feed_fault_request");
		atomic_store_explicit(&mark, fn, memory_order_relaxed);
		atomic_store_explicit(&looked, true, memory_order_release);
	}
	if ((fn = atomic_load_explicit(&mark, memory_order_relaxed)))
		fn(kind);
}

/* Marks the start of req by its kind's name in feed.proto ("open_stream"). */
static inline void fault_mark_request(const Feed__Request *req)
{
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&feed__request__descriptor, req->body_case);

	fault_mark(f ? f->name : "unknown");
}
#else
static inline void fault_mark(const char *kind)
{
	(void)kind;
}

static inline void fault_mark_request(const Feed__Request *req)
{
	(void)req;
}
#endif

#endif
