/*
 * pool.c: worker threads and their job queue (see pool.h). pool_* calls run
 * on the loop thread; pool_main() runs on each worker. The single mutex
 * mu guards queue, done and stopping; nothing blocks while holding it.
 */
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"

struct pool_thread {
	pthread_t tid;
	struct pool *pool;
	struct pool_worker w;
};

struct pool {
	const struct log *log;
	uv_async_t async;             /* loop thread's handle, woken by workers */
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* signalled when queue grows or stopping is set */
	struct pool_job *head, *tail; /* queued jobs (mu) */
	struct pool_job *done;        /* finished jobs, newest first (mu) */
	bool stopping;                /* workers exit once queue is empty (mu) */
	bool stopped;                 /* pool_stop() ran (loop thread) */
	bool closed;                  /* the async handle's close completed */
	unsigned n;                   /* threads running */
	unsigned size;                /* threads asked for */
	struct pool_thread *threads;
};

static void *pool_main(void *arg)
{
	struct pool_thread *t = arg;
	struct pool *p = t->pool;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->cv, &p->mu);
		struct pool_job *job = p->head;
		if (!job)
			break;  /* stopping and drained */
		p->head = job->next;
		if (!p->head)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);
		bool notify = job->done != NULL;  /* read before run(): job may die in it */
		job->run(job, &t->w);
		pthread_mutex_lock(&p->mu);
		if (notify) {
			job->next = p->done;
			p->done = job;
			pthread_mutex_unlock(&p->mu);
			uv_async_send(&p->async);  /* coalesced; the loop drains the list */
			pthread_mutex_lock(&p->mu);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Runs done() of every finished job, oldest first (loop thread). */
static void pool_drain(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	struct pool_job *list = p->done;
	p->done = NULL;
	pthread_mutex_unlock(&p->mu);

	struct pool_job *fifo = NULL;
	while (list) {  /* reverse: done was pushed newest first */
		struct pool_job *next = list->next;
		list->next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo) {
		struct pool_job *next = fifo->next;
		fifo->done(fifo);
		fifo = next;
	}
}

static void pool_on_async(uv_async_t *h)
{
	pool_drain(h->data);
}

static void pool_on_close(uv_handle_t *h)
{
	struct pool *p = h->data;
	p->closed = true;
}

static void pool_join(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n; i++) {
		pthread_join(p->threads[i].tid, NULL);
		fmt_decoder_free(p->threads[i].w.dec);
		img_decoder_free(p->threads[i].w.img_dec[0]);
		img_decoder_free(p->threads[i].w.img_dec[1]);
		free(p->threads[i].w.comp);
		free(p->threads[i].w.scratch);
	}
	p->n = 0;
}

/* Starts thread i with every signal blocked, so signals reach the loop. */
static int pool_spawn(struct pool *p, unsigned i, struct feed_err *err)
{
	struct pool_thread *t = &p->threads[i];
	sigset_t all, old;

	t->pool = p;
	t->w.index = i;
	t->w.img_max_pixels = IMG_MAX_PIXELS_DEFAULT;
	int r = fmt_decoder_new(&t->w.dec);
	if (r < 0)
		return feed_err_set(err, r, "worker %u: decoder: %s", i, strerror(-r));
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t->tid, NULL, pool_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		fmt_decoder_free(t->w.dec);
		return feed_err_set(err, -r, "worker %u: pthread_create: %s", i, strerror(r));
	}
	return 0;
}

int pool_new(uv_loop_t *loop, const struct log *lg, unsigned n, struct pool **ret,
	     struct feed_err *err)
{
	struct pool *p = calloc(1, sizeof(*p));
	int r = 0;

	if (!p || !(p->threads = calloc(n ? n : 1, sizeof(*p->threads)))) {
		free(p);
		return feed_err_set(err, -ENOMEM, "worker pool: out of memory");
	}
	p->log = lg;
	p->size = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	/* Threads first: idle ones never touch the async handle, so a failure
	 * below is undone by joining them, with no handle to close. */
	for (unsigned i = 0; i < n && r == 0; i++)
		if ((r = pool_spawn(p, i, err)) == 0)
			p->n++;
	if (r == 0 && (r = uv_async_init(loop, &p->async, pool_on_async)) < 0)
		feed_err_set(err, r, "worker pool: uv_async_init: %s", uv_strerror(r));
	if (r < 0) {
		pool_join(p);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p->threads);
		free(p);
		return r;
	}
	p->async.data = p;
	log_debug(lg, "worker pool: %u threads started", n);
	*ret = p;
	return 0;
}

void pool_submit(struct pool *p, struct pool_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = job;
	else
		p->head = job;
	p->tail = job;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void pool_stop(struct pool *p)
{
	if (p->stopped)
		return;
	p->stopped = true;
	pool_join(p);
	pool_drain(p);
	uv_close((uv_handle_t *)&p->async, pool_on_close);
	log_debug(p->log, "worker pool: %u threads joined", p->size);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	assert(p->stopped && p->closed && !p->head && !p->done);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->threads);
	free(p);
}

void pool_set_img_max_pixels(struct pool *p, uint64_t max_pixels)
{
	pthread_mutex_lock(&p->mu);
	for (unsigned i = 0; i < p->n; i++)
		p->threads[i].w.img_max_pixels = max_pixels;
	pthread_mutex_unlock(&p->mu);
}

unsigned pool_size(const struct pool *p)
{
	return p->size;
}
