/*
 * opener.c: the thread that opens remote datasets (see opener.h). A queue
 * under one mutex and a condition variable; the thread runs each job with
 * no lock held.
 */
#include "opener.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "feed_lock.h"

struct opener {
	pthread_t tid;
	pthread_mutex_t mu;          /* head, tail, stopping */
	pthread_cond_t cv;           /* a job came, or stopping */
	struct opener_job *head, *tail;
	bool stopping;
};

static void *opener_main(void *arg)
{
	struct opener *o = arg;

	feed_mutex_lock(&o->mu);
	for (;;) {
		while (!o->head && !o->stopping)
			pthread_cond_wait(&o->cv, &o->mu);
		struct opener_job *job = o->head;
		if (!job)
			break;  /* stopping, nothing queued */
		o->head = job->next;
		if (!o->head)
			o->tail = NULL;
		bool cancelled = o->stopping;
		feed_mutex_unlock(&o->mu);
		job->run(job, cancelled);
		feed_mutex_lock(&o->mu);
	}
	feed_mutex_unlock(&o->mu);
	return NULL;
}

int opener_new(struct opener **ret, struct feed_err *err)
{
	struct opener *o = calloc(1, sizeof(*o));
	sigset_t all, old;

	if (!o)
		return feed_err_set(err, -ENOMEM, "dataset opener: out of memory");
	pthread_mutex_init(&o->mu, NULL);
	pthread_cond_init(&o->cv, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);  /* signals reach the loop */
	int r = pthread_create(&o->tid, NULL, opener_main, o);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		pthread_cond_destroy(&o->cv);
		pthread_mutex_destroy(&o->mu);
		free(o);
		return feed_err_set(err, -r, "dataset opener: pthread_create: %s", strerror(r));
	}
	*ret = o;
	return 0;
}

void opener_submit(struct opener *o, struct opener_job *job)
{
	job->next = NULL;
	feed_mutex_lock(&o->mu);
	if (o->tail)
		o->tail->next = job;
	else
		o->head = job;
	o->tail = job;
	pthread_cond_signal(&o->cv);
	feed_mutex_unlock(&o->mu);
}

void opener_free(struct opener *o)
{
	if (!o)
		return;
	feed_mutex_lock(&o->mu);
	o->stopping = true;
	pthread_cond_signal(&o->cv);
	feed_mutex_unlock(&o->mu);
	pthread_join(o->tid, NULL);
	pthread_cond_destroy(&o->cv);
	pthread_mutex_destroy(&o->mu);
	free(o);
}
