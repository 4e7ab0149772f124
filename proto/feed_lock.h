/*
 * feed_lock.h: the lock rule made checkable. feedd and libfeedclient never
 * hold a lock across a call into the CUDA driver or into another module
 * that takes its own lock. Every mutex of both is taken through
 * feed_mutex_lock()/feed_mutex_unlock(), which keep a per-thread count of
 * locks held; feed_assert_unlocked() aborts, naming the call, when that
 * count is not zero, and so does taking a second lock: no thread of
 * either ever holds two. FEED_CU() below makes a CUDA driver call (through
 * cudrv.h's table) after that assertion.
 *
 * The count is kept only where FEED_LOCK_CHECKS is defined (the test
 * builds: CMake option FEED_LOCK_CHECKS); elsewhere these are the plain
 * pthread calls and the assertion is nothing.
 *
 * Threads: any; the count is the calling thread's own.
 */
#ifndef FEED_LOCK_H
#define FEED_LOCK_H

#include <pthread.h>

#ifdef FEED_LOCK_CHECKS
/* Locks the calling thread holds now (feed_lock.c). */
extern _Thread_local unsigned feed_locks_held;

/* Aborts with "what called under N lock(s)" when this thread holds a lock. */
void feed_lock_violation(const char *what);

static inline void feed_mutex_lock(pthread_mutex_t *m)
{
	/* the nesting order is empty (daemon/README.md "Locks"): a second
	 * lock is itself a violation */
	if (feed_locks_held)
		feed_lock_violation("feed_mutex_lock (a second lock)");
	pthread_mutex_lock(m);
	feed_locks_held++;
}

static inline void feed_mutex_unlock(pthread_mutex_t *m)
{
	feed_locks_held--;
	pthread_mutex_unlock(m);
}

/* Before a call that may block for long (the CUDA driver): no lock held. */
static inline void feed_assert_unlocked(const char *what)
{
	if (feed_locks_held)
		feed_lock_violation(what);
}
#else
static inline void feed_mutex_lock(pthread_mutex_t *m) { pthread_mutex_lock(m); }
static inline void feed_mutex_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
static inline void feed_assert_unlocked(const char *what) { (void)what; }
#endif

/* FEED_CU(api, Fn, args...): the driver entry point api->Fn (a struct
 * cudrv_api *), called once this thread is known to hold no lock. */
#define FEED_CU(api, fn, ...) (feed_assert_unlocked("cu" #fn), (api)->fn(__VA_ARGS__))

#endif
