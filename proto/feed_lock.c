/*
 * feed_lock.c: the per-thread count of locks held (feed_lock.h), kept
 * only in builds with FEED_LOCK_CHECKS.
 */
#include "feed_lock.h"

#ifdef FEED_LOCK_CHECKS
#include <stdio.h>
#include <stdlib.h>

_Thread_local unsigned feed_locks_held;

void feed_lock_violation(const char *what)
{
	fprintf(stderr, "lock rule broken: %s called while this thread holds %u lock(s)\n",
		what, feed_locks_held);
	abort();
}
#endif
