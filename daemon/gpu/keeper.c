/*
 * keeper.c: the GPU keeper's thread and queue (keeper.h).
 */
#include "keeper.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "feed_lock.h"

static void gk_deadline(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_nsec += GK_TICK_MS * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Takes the next job, or NULL with *ret_tick saying whether to tick (the
 * wait for one ended with ticking asked) and *ret_done whether to end. */
static struct gk_job *gk_next(struct gk *k, bool *ret_tick, bool *ret_done)
{
	struct gk_job *j;
	feed_mutex_lock(&k->mu);
	if (!k->head && !k->stop) {
		if (k->ticking) {
			struct timespec ts;
			gk_deadline(&ts);
			pthread_cond_timedwait(&k->cv, &k->mu, &ts);
		} else {
			pthread_cond_wait(&k->cv, &k->mu);
		}
	}
	j = k->head;
	if (j) {
		k->head = j->next;
		if (!k->head)
			k->tail = NULL;
	}
	*ret_tick = !j && k->ticking;
	*ret_done = !j && k->stop;
	feed_mutex_unlock(&k->mu);
	return j;
}

static void *gk_main(void *arg)
{
	struct gk *k = arg;
	for (;;) {
		bool tick, done;
		struct gk_job *j = gk_next(k, &tick, &done);
		if (j)
			j->run(j);  /* may free j */
		else if (tick && k->tick)
			k->tick(k->arg);
		if (done)
			break;
	}
	if (k->tick)
		k->tick(k->arg); /* a last reap: what finished meanwhile */
	return NULL;
}

int gk_start(struct gk *k, void (*tick)(void *arg), void *arg, struct feed_err *err)
{
	memset(k, 0, sizeof(*k));
	k->tick = tick;
	k->arg = arg;
	pthread_mutex_init(&k->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cv, &ca);
	pthread_condattr_destroy(&ca);
	int r = pthread_create(&k->tid, NULL, gk_main, k);
	if (r) {
		pthread_cond_destroy(&k->cv);
		pthread_mutex_destroy(&k->mu);
		return feed_err_set(err, -r, "GPU keeper thread: pthread_create: %s", strerror(r));
	}
	k->started = true;
	return 0;
}

void gk_submit(struct gk *k, struct gk_job *j)
{
	/* started changes only on the main thread while nobody submits
	 * (before the workers start, after they are joined) */
	if (!k->started) {
		j->run(j);
		return;
	}
	j->next = NULL;
	feed_mutex_lock(&k->mu);
	if (k->tail)
		k->tail->next = j;
	else
		k->head = j;
	k->tail = j;
	pthread_cond_signal(&k->cv);
	feed_mutex_unlock(&k->mu);
}

void gk_ticking(struct gk *k, bool on)
{
	if (!k->started)
		return;
	feed_mutex_lock(&k->mu);
	if (on && !k->ticking)
		pthread_cond_signal(&k->cv);
	k->ticking = on;
	feed_mutex_unlock(&k->mu);
}

void gk_stop(struct gk *k)
{
	if (!k->started)
		return;
	feed_mutex_lock(&k->mu);
	k->stop = true;
	pthread_cond_signal(&k->cv);
	feed_mutex_unlock(&k->mu);
	pthread_join(k->tid, NULL);
	k->started = false;
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mu);
}
