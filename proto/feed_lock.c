/*
 * feed_lock.c: the per-thread count of locks held (feed_lock.h), kept
 * only in builds with FEED_LOCK_CHECKS.
 */
#include "feed_lock.h"

#ifdef FEED_LOCK_CHECKS
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

_Thread_local unsigned feed_locks_held;

void feed_lock_violation(const char *what)
{
	void *frames[32];
	int n = backtrace(frames, 32);

	fprintf(stderr, "lock rule broken: %s called while this thread holds %u lock(s); "
		"where (addr2line -f -e BINARY on the offsets):\n", what, feed_locks_held);
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	abort();
}
#endif
