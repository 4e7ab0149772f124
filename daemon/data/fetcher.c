/*
 * fetcher.c: the fetcher thread (see fetcher.h). One libcurl multi handle
 * runs every remote transfer; requests wait in a table under one mutex;
 * the thread starts them (each dataset at most remote_inflight at once),
 * checks what comes back, schedules retries, puts landed blocks in the
 * disk tier and wakes the readers. Callers only queue and wait.
 *
 * Runs on its own thread; fetch_get()/fetch_prefetch() on workers and the
 * thread that opens datasets; never the loop (fetch_src_free() is the
 * exception: it only marks and returns).
 */
#include "fetcher.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "disktier.h"
#include "feed_lock.h"
#include "fmt.h"

#define FET_IDLE_MAX 32        /* easy handles kept for reuse */
#define FET_START_MAX 64       /* transfers started per turn of the thread */
#define FET_BACKOFF_MAX_MS 2000
#define FET_POLL_MS 1000       /* the thread's longest sleep with nothing due */
#define FET_URL_MAX 8192

enum fet_state { FET_QUEUED, FET_RUNNING, FET_RETRY, FET_DONE, FET_FAILED };

struct fet_req {
	struct fet_req *next;       /* f->reqs (mu) */
	struct fetch_src *src;
	struct fetch_spec sp;       /* sp.file points at file */
	char *file;                 /* owned */
	bool shared;                /* a block: findable by key (mu) */
	enum fet_state state;       /* (mu) */
	uint64_t retry_at_ms;       /* FET_RETRY: when it goes again (mu) */
	unsigned waiters;           /* fetch_get() calls holding it (mu) */
	size_t charged;             /* bytes counted in staging and the cache */
	/* the transfer: the fetcher thread's alone while queued, running or
	 * waiting for a retry; read by waiters only once done */
	uint32_t tries;
	uint8_t *buf;               /* sp.len bytes, owned */
	size_t got;
	bool overflow;              /* the body was longer than asked for */
	uint64_t size;              /* a HEAD's Content-Length */
	CURL *h;
	struct curl_slist *hdrs;
	int rc;                     /* FET_FAILED: why, with msg */
	char msg[FEED_ERR_MSG_MAX];
};

struct fetch_src {
	struct fetcher *f;
	struct fetch_src_opts o;    /* its strings owned */
	unsigned running;           /* transfers in the multi handle (mu) */
	unsigned nreqs;             /* requests in the table (mu) */
	bool closing;               /* fetch_src_free() ran: the fetcher frees it (mu) */
};

struct fetcher {
	pthread_t tid;
	pthread_mutex_t mu;         /* reqs, staged, stopping, each source's counts */
	pthread_cond_t landed;      /* a request landed or failed (CLOCK_MONOTONIC) */
	CURLM *m;                   /* the thread's; curl_multi_wakeup() from any */
	struct fet_req *reqs;       /* newest first (mu) */
	size_t staged;              /* bytes of the requests' buffers (mu) */
	size_t staged_max;          /* prefetches stop here; fixed at new */
	bool stopping;              /* (mu) */
	bool cancelled;             /* fetcher_cancel(): no more waiting (mu) */
	struct cache *cache;        /* charged for staged bytes, or NULL */
	struct fetch_hooks hooks;   /* set before any wait; read-only after */
	CURL *idle[FET_IDLE_MAX];   /* the thread's alone */
	size_t nidle;
};

static uint64_t fet_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* relaxed: counts for the metrics only */
static void fet_count(const struct fetch_src *s, size_t off, uint64_t n)
{
	if (s->o.counters)
		atomic_fetch_add_explicit((_Atomic uint64_t *)((char *)s->o.counters + off), n,
					  memory_order_relaxed);
}

#define FET_COUNT(s, field, n) fet_count(s, offsetof(struct remote_counters, field), n)

/* ---- the table ---- */

static int fet_req_new(struct fetch_src *s, const struct fetch_spec *sp, struct fet_req **ret)
{
	struct fet_req *r = calloc(1, sizeof(*r));

	if (!r || !(r->file = strdup(sp->file)) ||
	    (!sp->head && !(r->buf = malloc(sp->len ? sp->len : 1)))) {
		if (r)
			free(r->file);
		free(r);
		return -ENOMEM;
	}
	r->src = s;
	r->sp = *sp;
	r->sp.file = r->file;
	r->shared = sp->has_hash;
	r->charged = sp->head ? 0 : sp->len;
	if (s->f->cache && r->charged)
		cache_reserve(s->f->cache, r->charged);
	*ret = r;
	return 0;
}

/* Frees r (out of the table, no lock held). Accepts NULL. */
static void fet_req_free(struct fetcher *f, struct fet_req *r)
{
	if (!r)
		return;
	if (f->cache && r->charged)
		cache_release(f->cache, r->charged);
	free(r->buf);
	free(r->file);
	free(r);
}

static void fet_insert_locked(struct fetcher *f, struct fet_req *r)
{
	r->next = f->reqs;
	f->reqs = r;
	f->staged += r->charged;
	r->src->nreqs++;
}

/* Takes r out of the table; frees its source if that was the last of a
 * closing one. The caller frees r after dropping mu. */
static void fet_unlink_locked(struct fetcher *f, struct fet_req *r)
{
	struct fetch_src *s = r->src;

	for (struct fet_req **p = &f->reqs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	f->staged -= r->charged;
	if (--s->nreqs == 0 && s->closing)
		free(s);  /* its strings went at fetch_src_free() */
	r->src = NULL;
}

/* The request for sp's block that a reader may join: in flight or
 * landed, not failed. */
static struct fet_req *fet_find_locked(struct fetcher *f, const struct fetch_src *s,
				       const struct fetch_spec *sp)
{
	for (struct fet_req *r = f->reqs; r; r = r->next)
		if (r->src == s && r->shared && r->sp.key == sp->key && r->sp.hash == sp->hash &&
		    r->sp.len == sp->len && r->state != FET_FAILED)
			return r;
	return NULL;
}

/* ---- transfers (the fetcher thread) ---- */

static size_t fet_write(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct fet_req *r = ctx;
	size_t n = size * nmemb;

	if (r->got + n > r->sp.len) {
		r->overflow = true;
		return 0;  /* stops the transfer: a server that ignored the range */
	}
	memcpy(r->buf + r->got, data, n);
	r->got += n;
	return n;
}

static CURL *fet_handle_take(struct fetcher *f)
{
	if (!f->nidle)
		return curl_easy_init();
	CURL *h = f->idle[--f->nidle];
	curl_easy_reset(h);  /* keeps its connection */
	return h;
}

static void fet_handle_give(struct fetcher *f, CURL *h)
{
	if (h && f->nidle < FET_IDLE_MAX)
		f->idle[f->nidle++] = h;
	else if (h)
		curl_easy_cleanup(h);
}

/* Sets up r's transfer and adds it to the multi handle; false when it
 * could not be (out of memory, a URL too long: r->rc and msg say). */
static bool fet_start(struct fetcher *f, struct fet_req *r)
{
	const struct fetch_src_opts *o = &r->src->o;
	char url[FET_URL_MAX], range[64];
	CURL *h;

	if ((size_t)snprintf(url, sizeof(url), "%s%s", o->url_prefix, r->file) >= sizeof(url)) {
		r->rc = -EINVAL;
		snprintf(r->msg, sizeof(r->msg), "%s/%s: URL too long", o->label, r->file);
		return false;
	}
	if (!(r->h = h = fet_handle_take(f))) {
		r->rc = -ENOMEM;
		snprintf(r->msg, sizeof(r->msg), "%s/%s: out of memory", o->label, r->file);
		return false;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_PRIVATE, r);
	if (o->sigv4[0]) {
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, o->sigv4);
		curl_easy_setopt(h, CURLOPT_USERPWD, o->userpwd);
	}
	if (o->sha_hdr[0])
		r->hdrs = curl_slist_append(r->hdrs, o->sha_hdr);
	if (o->token_hdr[0])
		r->hdrs = curl_slist_append(r->hdrs, o->token_hdr);
	if (r->hdrs)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hdrs);
	if (r->sp.head) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else {
		snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->sp.off,
			 r->sp.off + r->sp.len - 1);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fet_write);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	}
	r->got = 0;
	r->overflow = false;
	r->tries++;
	FET_COUNT(r->src, requests, 1);
	if (curl_multi_add_handle(f->m, h) == CURLM_OK)
		return true;
	r->rc = -ENOMEM;
	snprintf(r->msg, sizeof(r->msg), "%s/%s: out of memory", o->label, r->file);
	return false;
}

/* The outcome of r's finished try: 0, or -errno with why (a short phrase)
 * and whether trying again may help. */
static int fet_outcome(struct fet_req *r, CURLcode cc, char *why, size_t cap, bool *retry)
{
	long code = 0;

	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &code);
	*retry = true;
	if (cc != CURLE_OK && !(r->overflow && cc == CURLE_WRITE_ERROR)) {
		/* -EIO, not -ETIMEDOUT: a client would read that as its own wait */
		snprintf(why, cap, "%s", curl_easy_strerror(cc));
		return -EIO;
	}
	if (code == 404 || code == 410 || code == 401 || code == 403 || code == 416) {
		*retry = false;
		snprintf(why, cap, "HTTP %ld", code);
		return code == 401 || code == 403 ? -EACCES : code == 416 ? -EBADMSG : -ENOENT;
	}
	if (r->sp.head ? code != 200 : (code != 206 && code != 200)) {
		*retry = code >= 500 || code == 408 || code == 429;
		snprintf(why, cap, "HTTP %ld", code);
		return -EIO;
	}
	if (r->sp.head) {
		curl_off_t len = -1;
		if (curl_easy_getinfo(r->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) != CURLE_OK ||
		    len < 0) {
			*retry = false;
			snprintf(why, cap, "no Content-Length");
			return -EBADMSG;
		}
		r->size = (uint64_t)len;
		return 0;
	}
	if (r->overflow || r->got != r->sp.len || (code == 200 && r->sp.off != 0)) {
		snprintf(why, cap, "%s body (%zu of %u bytes)", r->overflow || code == 200
			 ? "wrong range in the" : "short", r->got, r->sp.len);
		return -EBADMSG;
	}
	if (r->sp.has_hash && fmt_hash(r->buf, r->sp.len) != r->sp.hash) {
		snprintf(why, cap, "checksum mismatch (the server's bytes changed)");
		return -EBADMSG;
	}
	return 0;
}

static uint64_t fet_backoff(const struct fetch_src_opts *o, uint32_t attempt)
{
	uint64_t ms = o->backoff_ms << (attempt < 10 ? attempt : 10);
	return ms > FET_BACKOFF_MAX_MS ? FET_BACKOFF_MAX_MS : ms;
}

/* "URL/file: block N: why (after K tries)" into r->msg. */
static void fet_fail_msg(struct fet_req *r, const char *why)
{
	const char *label = r->src->o.label;
	const char *s = r->tries == 1 ? "y" : "ies";

	if (r->sp.has_hash)
		snprintf(r->msg, sizeof(r->msg), "%s/%s: block %" PRIu64 ": %s (after %u tr%s)",
			 label, r->file, r->sp.block, why, r->tries, s);
	else
		snprintf(r->msg, sizeof(r->msg), "%s/%s: %s (after %u tr%s)", label, r->file, why,
			 r->tries, s);
}

/* Whether a request that landed with nobody waiting leaves the table:
 * failed (the read that needs it tries again), or nobody will look for
 * it (not a block), or the disk tier holds it. Else it stays staged. */
static bool fet_drop_on_land(const struct fet_req *r)
{
	return r->state == FET_FAILED || !r->shared || r->src->o.tier;
}

/* r's transfer ended with cc: keeps, retries or fails it. */
static void fet_finish(struct fetcher *f, struct fet_req *r, CURLcode cc)
{
	const struct fetch_src_opts *o = &r->src->o;
	char why[160];
	bool retry = false;
	int rc = fet_outcome(r, cc, why, sizeof(why), &retry);

	FET_COUNT(r->src, bytes, r->got);
	curl_multi_remove_handle(f->m, r->h);
	fet_handle_give(f, r->h);
	curl_slist_free_all(r->hdrs);
	r->h = NULL;
	r->hdrs = NULL;
	if (rc == 0 && r->sp.has_hash && o->tier)  /* verified in fet_outcome() */
		dtier_put(o->tier, r->sp.key, r->sp.hash, r->buf, r->sp.len);
	bool again = rc < 0 && retry && r->tries <= o->retries;
	if (again)
		FET_COUNT(r->src, retries, 1);
	else if (rc < 0 && r->sp.has_hash)
		FET_COUNT(r->src, failures, 1);
	if (rc < 0 && !again)
		fet_fail_msg(r, why);
	feed_mutex_lock(&f->mu);
	r->src->running--;
	if (again) {
		r->state = FET_RETRY;
		r->retry_at_ms = fet_now_ms() + fet_backoff(o, r->tries - 1);
	} else {
		r->rc = rc;
		r->state = rc == 0 ? FET_DONE : FET_FAILED;
	}
	bool drop = !again && !r->waiters && fet_drop_on_land(r);
	if (drop)
		fet_unlink_locked(f, r);
	pthread_cond_broadcast(&f->landed);
	feed_mutex_unlock(&f->mu);
	if (drop)
		fet_req_free(f, r);
}

/* r could not be started (fet_start() said why): it fails, not retried. */
static void fet_finish_unstarted(struct fetcher *f, struct fet_req *r)
{
	fet_handle_give(f, r->h);
	curl_slist_free_all(r->hdrs);
	r->h = NULL;
	r->hdrs = NULL;
	feed_mutex_lock(&f->mu);
	r->src->running--;
	r->state = FET_FAILED;
	bool drop = !r->waiters;
	if (drop)
		fet_unlink_locked(f, r);
	pthread_cond_broadcast(&f->landed);
	feed_mutex_unlock(&f->mu);
	if (drop)
		fet_req_free(f, r);
}

/* Under mu: what the thread does next. Requests due go to start[] (marked
 * running), those of a closing source to gone[] (out of the table; the
 * running ones still in the multi handle). *wait_ms: until the next retry. */
static void fet_pick_locked(struct fetcher *f, struct fet_req **start, size_t *nstart,
			    struct fet_req **gone, size_t *ngone, long *wait_ms)
{
	uint64_t now = fet_now_ms();

	for (struct fet_req *r = f->reqs, *next; r; r = next) {
		next = r->next;
		struct fetch_src *s = r->src;
		if (s->closing || f->stopping) {
			if (*ngone < FET_START_MAX) {
				if (r->state == FET_RUNNING)
					s->running--;
				gone[(*ngone)++] = r;
				fet_unlink_locked(f, r);
			}
			continue;
		}
		if (r->state == FET_RETRY && r->retry_at_ms > now) {
			long left = (long)(r->retry_at_ms - now);
			*wait_ms = left < *wait_ms ? left : *wait_ms;
			continue;
		}
		if ((r->state != FET_QUEUED && r->state != FET_RETRY) ||
		    s->running >= s->o.inflight || *nstart == FET_START_MAX)
			continue;
		r->state = FET_RUNNING;
		s->running++;
		start[(*nstart)++] = r;
	}
	if (*ngone == FET_START_MAX)
		*wait_ms = 0;  /* more to drop next turn */
}

/* One turn: start what is due, drop what is cancelled, run the multi
 * handle, finish what ended, and sleep until something happens. Returns
 * false once stopping and nothing is left. */
static bool fet_turn(struct fetcher *f)
{
	struct fet_req *start[FET_START_MAX], *gone[FET_START_MAX];
	size_t nstart = 0, ngone = 0;
	long wait_ms = FET_POLL_MS;
	int running = 0;

	feed_mutex_lock(&f->mu);
	fet_pick_locked(f, start, &nstart, gone, &ngone, &wait_ms);
	bool more = !f->stopping || f->reqs;
	feed_mutex_unlock(&f->mu);
	for (size_t i = 0; i < ngone; i++) {
		if (gone[i]->h) {
			curl_multi_remove_handle(f->m, gone[i]->h);
			fet_handle_give(f, gone[i]->h);
			curl_slist_free_all(gone[i]->hdrs);
		}
		fet_req_free(f, gone[i]);
	}
	for (size_t i = 0; i < nstart; i++)
		if (!fet_start(f, start[i]))
			fet_finish_unstarted(f, start[i]);
	curl_multi_perform(f->m, &running);
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(f->m, &left))) {
		struct fet_req *r = NULL;
		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
		fet_finish(f, r, msg->data.result);
	}
	if (!more)
		return false;
	curl_multi_poll(f->m, NULL, 0, wait_ms > 0 ? (int)wait_ms : 0, NULL);
	return true;
}

static void *fet_main(void *arg)
{
	struct fetcher *f = arg;

	while (fet_turn(f))
		;
	return NULL;
}

/* ---- the API ---- */

int fetcher_new(struct cache *cache, struct fetcher **ret, struct feed_err *err)
{
	struct fetcher *f = calloc(1, sizeof(*f));
	pthread_condattr_t ca;
	sigset_t all, old;

	if (!f || !(f->m = curl_multi_init())) {
		free(f);
		return feed_err_set(err, -ENOMEM, "fetcher: out of memory");
	}
	f->cache = cache;
	if (cache) {
		struct cache_stats st;
		cache_stats(cache, &st);
		f->staged_max = (size_t)(st.budget / 4);
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->landed, &ca);
	pthread_condattr_destroy(&ca);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);  /* signals reach the loop */
	int r = pthread_create(&f->tid, NULL, fet_main, f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		curl_multi_cleanup(f->m);
		pthread_cond_destroy(&f->landed);
		pthread_mutex_destroy(&f->mu);
		free(f);
		return feed_err_set(err, -r, "fetcher: pthread_create: %s", strerror(r));
	}
	*ret = f;
	return 0;
}

void fetcher_set_hooks(struct fetcher *f, const struct fetch_hooks *hooks)
{
	f->hooks = *hooks;
}

void fetcher_free(struct fetcher *f)
{
	if (!f)
		return;
	feed_mutex_lock(&f->mu);
	f->stopping = true;
	feed_mutex_unlock(&f->mu);
	curl_multi_wakeup(f->m);
	pthread_join(f->tid, NULL);
	for (size_t i = 0; i < f->nidle; i++)
		curl_easy_cleanup(f->idle[i]);
	curl_multi_cleanup(f->m);
	pthread_cond_destroy(&f->landed);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

static char *fet_dup(const char *s)
{
	return strdup(s ? s : "");
}

static void fet_src_strings_free(struct fetch_src *s)
{
	free((char *)s->o.label);
	free((char *)s->o.url_prefix);
	free((char *)s->o.sigv4);
	free((char *)s->o.userpwd);
	free((char *)s->o.token_hdr);
	free((char *)s->o.sha_hdr);
}

int fetch_src_new(struct fetcher *f, const struct fetch_src_opts *o, struct fetch_src **ret)
{
	struct fetch_src *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->f = f;
	s->o = *o;
	s->o.label = fet_dup(o->label);
	s->o.url_prefix = fet_dup(o->url_prefix);
	s->o.sigv4 = fet_dup(o->sigv4);
	s->o.userpwd = fet_dup(o->userpwd);
	s->o.token_hdr = fet_dup(o->token_hdr);
	s->o.sha_hdr = fet_dup(o->sha_hdr);
	if (!s->o.inflight)
		s->o.inflight = 1;
	if (!s->o.label || !s->o.url_prefix || !s->o.sigv4 || !s->o.userpwd ||
	    !s->o.token_hdr || !s->o.sha_hdr) {
		fet_src_strings_free(s);
		free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

void fetch_src_free(struct fetch_src *s)
{
	if (!s)
		return;
	struct fetcher *f = s->f;
	fet_src_strings_free(s);
	feed_mutex_lock(&f->mu);
	bool now = s->nreqs == 0;
	s->closing = true;  /* else the fetcher frees it with its last request */
	feed_mutex_unlock(&f->mu);
	if (now)
		free(s);
	else
		curl_multi_wakeup(f->m);
}

/* How long a reader waits at most: every try, every backoff, a second. */
static uint64_t fet_bound_ms(const struct fetch_src_opts *o)
{
	uint64_t ms = o->timeout_ms * (1 + (uint64_t)o->retries) + 1000;

	for (uint32_t i = 0; i < o->retries; i++)
		ms += fet_backoff(o, i);
	return ms;
}

/* The request for sp with one more waiter: joined, or made and queued. */
static int fet_join(struct fetch_src *s, const struct fetch_spec *sp, struct fet_req **ret)
{
	struct fetcher *f = s->f;
	struct fet_req *r = NULL, *fresh = NULL;

	if (sp->has_hash) {
		feed_mutex_lock(&f->mu);
		if ((r = fet_find_locked(f, s, sp)))
			r->waiters++;
		feed_mutex_unlock(&f->mu);
		if (r) {
			*ret = r;
			return 0;
		}
	}
	if (fet_req_new(s, sp, &fresh) < 0)
		return -ENOMEM;
	feed_mutex_lock(&f->mu);
	if (!sp->has_hash || !(r = fet_find_locked(f, s, sp))) {  /* one came meanwhile? */
		r = fresh;
		fresh = NULL;
		fet_insert_locked(f, r);
	}
	r->waiters++;
	feed_mutex_unlock(&f->mu);
	if (fresh)
		fet_req_free(f, fresh);
	else
		curl_multi_wakeup(f->m);
	*ret = r;
	return 0;
}

/* Waits for r until deadline (CLOCK_MONOTONIC ms); its state then. */
static enum fet_state fet_wait(struct fetcher *f, struct fet_req *r, uint64_t deadline)
{
	struct timespec until = {.tv_sec = (time_t)(deadline / 1000),
				 .tv_nsec = (long)(deadline % 1000) * 1000000};
	enum fet_state st;

	if (f->hooks.wait_begin)
		f->hooks.wait_begin(f->hooks.ctx);
	feed_mutex_lock(&f->mu);
	while (r->state != FET_DONE && r->state != FET_FAILED && !f->cancelled &&
	       pthread_cond_timedwait(&f->landed, &f->mu, &until) != ETIMEDOUT)
		;
	st = r->state;
	feed_mutex_unlock(&f->mu);
	if (f->hooks.wait_end)
		f->hooks.wait_end(f->hooks.ctx);
	return st;
}

static bool fet_cancelled(struct fetcher *f)
{
	feed_mutex_lock(&f->mu);
	bool c = f->cancelled;
	feed_mutex_unlock(&f->mu);
	return c;
}

void fetcher_cancel(struct fetcher *f)
{
	feed_mutex_lock(&f->mu);
	f->cancelled = true;
	pthread_cond_broadcast(&f->landed);
	feed_mutex_unlock(&f->mu);
}

int fetch_get(struct fetch_src *s, const struct fetch_spec *sp, void *buf, uint64_t *ret_size,
	      struct feed_err *err)
{
	struct fetcher *f = s->f;
	uint64_t bound = fet_bound_ms(&s->o);
	struct fet_req *r;
	int rc = 0;

	if (fet_join(s, sp, &r) < 0)
		return feed_err_set(err, -ENOMEM, "%s/%s: out of memory", s->o.label, sp->file);
	enum fet_state st = fet_wait(f, r, fet_now_ms() + bound);
	/* done or failed: immutable now, and ours while we wait on it */
	if (st == FET_DONE && sp->head)
		*ret_size = r->size;
	else if (st == FET_DONE)
		memcpy(buf, r->buf, sp->len);
	else if (st == FET_FAILED)
		rc = feed_err_set(err, r->rc, "%s", r->msg);
	else if (fet_cancelled(f))
		rc = feed_err_set(err, -ECANCELED, "%s/%s: feedd is stopping", s->o.label, sp->file);
	else if (sp->has_hash)
		rc = feed_err_set(err, -EIO, "%s/%s: block %" PRIu64 ": no answer within %" PRIu64
				  " ms", s->o.label, sp->file, sp->block, bound);
	else
		rc = feed_err_set(err, -EIO, "%s/%s: no answer within %" PRIu64 " ms", s->o.label,
				  sp->file, bound);
	feed_mutex_lock(&f->mu);
	bool drop = --r->waiters == 0 && (r->state == FET_DONE || r->state == FET_FAILED);
	if (drop)  /* read once: a staged block goes to its reader */
		fet_unlink_locked(f, r);
	feed_mutex_unlock(&f->mu);
	if (drop)
		fet_req_free(f, r);
	return rc;
}

/* Whether a prefetch of sp is worth queueing (1, with staging room
 * taken for it), not (0: in flight or staged) or cannot be (-1: staging
 * full). Under mu. Blocks landed and never read make room first, into
 * old[] (*nold of them, freed by the caller after mu). */
static int fet_want_locked(struct fetcher *f, struct fetch_src *s, const struct fetch_spec *sp,
			    struct fet_req **old, size_t *nold)
{
	if (fet_find_locked(f, s, sp))
		return 0;
	for (struct fet_req *r = f->reqs, *next; r && f->staged + sp->len > f->staged_max &&
	     *nold < FET_START_MAX; r = next) {
		next = r->next;
		if (r->state == FET_DONE && !r->waiters) {
			fet_unlink_locked(f, r);
			old[(*nold)++] = r;
		}
	}
	if (f->staged + sp->len > f->staged_max)
		return -1;
	f->staged += sp->len;  /* held until the insert, which counts it again */
	return 1;
}

void fetch_prefetch(struct fetch_src *s, const struct fetch_spec *sp, size_t n)
{
	struct fetcher *f = s->f;
	struct fet_req *old[FET_START_MAX];
	bool any = false;

	for (size_t i = 0; i < n; i++) {
		struct fet_req *r;
		size_t nold = 0;
		if (!sp[i].has_hash || (s->o.tier && dtier_has(s->o.tier, sp[i].key, sp[i].hash)))
			continue;
		feed_mutex_lock(&f->mu);
		int want = fet_want_locked(f, s, &sp[i], old, &nold);
		feed_mutex_unlock(&f->mu);
		for (size_t k = 0; k < nold; k++)
			fet_req_free(f, old[k]);
		if (want < 0)
			break;  /* staging is full: the reads fetch the rest */
		if (!want)
			continue;
		int rc = fet_req_new(s, &sp[i], &r);
		feed_mutex_lock(&f->mu);
		f->staged -= sp[i].len;
		if (rc == 0 && fet_find_locked(f, s, &sp[i])) {  /* a read made it meanwhile */
			feed_mutex_unlock(&f->mu);
			fet_req_free(f, r);
			continue;
		}
		if (rc == 0)
			fet_insert_locked(f, r);
		feed_mutex_unlock(&f->mu);
		any = any || rc == 0;
	}
	if (any)
		curl_multi_wakeup(f->m);
}

size_t fetcher_staged_bytes(struct fetcher *f)
{
	feed_mutex_lock(&f->mu);
	size_t n = f->staged;
	feed_mutex_unlock(&f->mu);
	return n;
}
