/*
 * remote.c: a dataset read over HTTP(S) or from an S3-compatible store
 * (see remote.h). libcurl does every byte of HTTP; this file says which
 * ranges to ask for, checks what comes back, retries, and keeps verified
 * blocks in the disk tier. Worker threads (and main() at start); never the
 * loop thread.
 *
 * Several requests in flight per worker: the builder hands the blocks of
 * a batch chunk that miss the memory cache to fmt_dataset_prefetch(),
 * which reaches rem_prefetch(): one curl multi handle fetches them
 * together (at most remote_inflight at once), each verified, and parks them
 * in the disk tier (or, without one, in a small staging table) where the
 * reads that follow find them. With one request per worker a batch of
 * full-shuffle samples costs a round trip per sample; this way, about one
 * per chunk.
 */
#include "remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disktier.h"
#include "feed_lock.h"

#define REM_IDLE_MAX 32      /* curl handles kept for reuse (their connections) */
#define REM_INFLIGHT 64      /* most requests of one prefetch in flight (remote_inflight) */
#define REM_STAGE_MAX 256    /* prefetched blocks waiting for their read (no disk tier) */
#define REM_FLIGHT_MAX 256   /* blocks being fetched, tracked so none is fetched twice */
#define REM_BACKOFF_MAX_MS 2000
/* sha256 of an empty body: the payload hash of a GET or HEAD */
#define REM_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* A prefetched block waiting for its read, when there is no disk tier. */
struct rem_staged {
	uint64_t key, hash;
	void *buf;                /* owned, len bytes, verified */
	uint32_t len;
};

struct rem_store {
	char *url;                /* as configured, for messages and keys */
	bool s3;                  /* s3://: sign requests */
	struct remote_s3 s3cfg;   /* s3 only */
	struct remote_opts o;     /* a copy */
	CURLSH *share;            /* connections and DNS, shared by every handle of the
				   * store: a prefetch's multi handle goes, its
				   * connections stay for the next request */
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST]; /* libcurl's, one per kind of data */
	pthread_mutex_t mu;       /* idle, staged, flight; never held across a request */
	pthread_cond_t landed;    /* a fetch in flight ended (flight shrank) */
	CURL *idle[REM_IDLE_MAX];
	size_t nidle;
	struct rem_staged staged[REM_STAGE_MAX]; /* a ring, oldest overwritten */
	size_t nstaged_next;
	/* Keys of blocks being fetched: a prefetch skips them, and a read of
	 * one waits for it to land (in the disk tier or staged) instead of
	 * asking the server again. Two workers building batches over the same
	 * blocks would otherwise fetch each twice. Full: not tracked. */
	uint64_t flight[REM_FLIGHT_MAX];
	size_t nflight;
};

/* One transfer into a fixed buffer. */
struct rem_xfer {
	uint8_t *buf;
	size_t cap, got;
	bool overflow;            /* the body was longer than asked for */
	struct curl_slist *hdrs;
	struct remote_req req;
	const struct fmt_range *r;
	CURL *h;
};

int remote_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

bool remote_is_url(const char *path)
{
	return !strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
	       !strncmp(path, "s3://", 5);
}

/* ---- S3 settings and requests ---- */

static void rem_copy(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

/* One KEY=VALUE of the credentials file, or of the environment. */
static void rem_s3_set(struct remote_s3 *s, const char *key, const char *val)
{
	if (!strcmp(key, "AWS_ACCESS_KEY_ID"))
		rem_copy(s->key_id, sizeof(s->key_id), val);
	else if (!strcmp(key, "AWS_SECRET_ACCESS_KEY"))
		rem_copy(s->secret, sizeof(s->secret), val);
	else if (!strcmp(key, "AWS_SESSION_TOKEN"))
		rem_copy(s->token, sizeof(s->token), val);
	else if (!strcmp(key, "AWS_REGION") || !strcmp(key, "AWS_DEFAULT_REGION"))
		rem_copy(s->region, sizeof(s->region), val);
	else if (!strcmp(key, "AWS_ENDPOINT_URL"))
		rem_copy(s->endpoint, sizeof(s->endpoint), val);
}

static int rem_s3_file(const char *file, struct remote_s3 *s, struct feed_err *err)
{
	FILE *f = fopen(file, "re");
	char line[8192];
	unsigned n = 0;

	if (!f)
		return feed_err_set(err, -errno, "s3_credentials %s: %s", file, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *p = line + strspn(line, " \t"), *eq;
		n++;
		p[strcspn(p, "\r\n")] = '\0';
		if (!*p || *p == '#')
			continue;
		if (!(eq = strchr(p, '=')) || eq == p) {
			fclose(f);
			return feed_err_set(err, -EINVAL, "s3_credentials %s:%u: not KEY=VALUE", file, n);
		}
		*eq = '\0';
		rem_s3_set(s, p, eq + 1);
	}
	fclose(f);
	return 0;
}

int remote_s3_load(const char *file, struct remote_s3 *ret, struct feed_err *err)
{
	static const char *const keys[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL"};
	struct remote_s3 *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s)
		return feed_err_set(err, -ENOMEM, "s3: out of memory");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (getenv(keys[i]))
			rem_s3_set(s, keys[i], getenv(keys[i]));
	if (file && (rc = rem_s3_file(file, s, err)) < 0)
		goto out;
	if (!s->region[0])
		rem_copy(s->region, sizeof(s->region), "us-east-1");
	if (!s->endpoint[0])
		snprintf(s->endpoint, sizeof(s->endpoint), "https://s3.%s.amazonaws.com", s->region);
	size_t n = strlen(s->endpoint);
	while (n && s->endpoint[n - 1] == '/')
		s->endpoint[--n] = '\0';
	*ret = *s;
out:
	free(s);
	return rc;
}

int remote_request(const char *url, const struct remote_s3 *s3, const char *file,
		   struct remote_req *ret, struct feed_err *err)
{
	struct remote_req *q = ret;
	int n;

	memset(q, 0, sizeof(*q));
	if (strncmp(url, "s3://", 5)) {
		size_t len = strlen(url);
		n = snprintf(q->url, sizeof(q->url), "%s%s%s", url,
			     len && url[len - 1] == '/' ? "" : "/", file);
		if (n < 0 || (size_t)n >= sizeof(q->url))
			return feed_err_set(err, -EINVAL, "%s: URL too long", url);
		return 0;
	}
	const char *bucket = url + 5;
	size_t blen = strcspn(bucket, "/");
	const char *prefix = bucket + blen;
	while (*prefix == '/')
		prefix++;
	size_t plen = strlen(prefix);
	while (plen && prefix[plen - 1] == '/')
		plen--;
	if (!blen)
		return feed_err_set(err, -EINVAL, "%s: no bucket (s3://BUCKET/PREFIX)", url);
	n = snprintf(q->url, sizeof(q->url), "%s/%.*s/%.*s%s%s", s3->endpoint, (int)blen, bucket,
		     (int)plen, prefix, plen ? "/" : "", file);
	if (n < 0 || (size_t)n >= sizeof(q->url))
		return feed_err_set(err, -EINVAL, "%s: URL too long", url);
	if (s3->key_id[0]) {  /* else anonymous: a public bucket */
		snprintf(q->sigv4, sizeof(q->sigv4), "aws:amz:%s:s3", s3->region);
		snprintf(q->userpwd, sizeof(q->userpwd), "%s:%s", s3->key_id, s3->secret);
		snprintf(q->sha_hdr, sizeof(q->sha_hdr), "x-amz-content-sha256: %s",
			 REM_EMPTY_SHA256);
		if (s3->token[0])
			snprintf(q->token_hdr, sizeof(q->token_hdr), "x-amz-security-token: %s",
				 s3->token);
	}
	return 0;
}

/* ---- transfers ---- */

static size_t rem_write(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct rem_xfer *x = ctx;
	size_t n = size * nmemb;

	if (x->got + n > x->cap) {
		x->overflow = true;
		return 0;  /* stops the transfer: a server that ignored the range */
	}
	memcpy(x->buf + x->got, data, n);
	x->got += n;
	return n;
}

static CURL *rem_handle_take(struct rem_store *s)
{
	CURL *h = NULL;

	feed_mutex_lock(&s->mu);
	if (s->nidle)
		h = s->idle[--s->nidle];
	feed_mutex_unlock(&s->mu);
	if (h)
		curl_easy_reset(h);  /* keeps its connection */
	else
		h = curl_easy_init();
	return h;
}

static void rem_handle_give(struct rem_store *s, CURL *h)
{
	feed_mutex_lock(&s->mu);
	if (s->nidle < REM_IDLE_MAX) {
		s->idle[s->nidle++] = h;
		h = NULL;
	}
	feed_mutex_unlock(&s->mu);
	if (h)
		curl_easy_cleanup(h);
}

/* Sets up x->h for range r of the dataset (r NULL with head: a HEAD of
 * file). Returns 0 or -EINVAL/-ENOMEM with err. */
static int rem_setup(struct rem_store *s, struct rem_xfer *x, const char *file,
		     const struct fmt_range *r, struct feed_err *err)
{
	char range[64];
	CURL *h = x->h;
	int rc = remote_request(s->url, &s->s3cfg, file, &x->req, err);

	if (rc < 0)
		return rc;
	curl_easy_setopt(h, CURLOPT_URL, x->req.url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  /* worker threads: no SIGALRM */
	if (s->share)
		curl_easy_setopt(h, CURLOPT_SHARE, s->share);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)s->o.timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)s->o.timeout_ms);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (x->req.sigv4[0]) {
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, x->req.sigv4);
		curl_easy_setopt(h, CURLOPT_USERPWD, x->req.userpwd);
	}
	struct curl_slist *l = NULL;
	if (x->req.sha_hdr[0])
		l = curl_slist_append(l, x->req.sha_hdr);
	if (x->req.token_hdr[0])
		l = curl_slist_append(l, x->req.token_hdr);
	x->hdrs = l;
	if (l)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
	if (!r) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
		return 0;
	}
	snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->off, r->off + r->len - 1);
	curl_easy_setopt(h, CURLOPT_RANGE, range);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rem_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	x->got = 0;
	x->overflow = false;
	return 0;
}

/* The outcome of one finished transfer: 0, or -errno with why (a short
 * phrase) and whether trying again may help. */
static int rem_outcome(struct rem_xfer *x, CURLcode cc, bool head, char *why, size_t cap,
		       bool *retry)
{
	long code = 0;

	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
	*retry = true;
	if (cc != CURLE_OK && !(x->overflow && cc == CURLE_WRITE_ERROR)) {
		/* -EIO, not -ETIMEDOUT: a client would read that as its own wait */
		snprintf(why, cap, "%s", curl_easy_strerror(cc));
		return -EIO;
	}
	if (code == 404 || code == 410 || code == 401 || code == 403 || code == 416) {
		*retry = false;
		snprintf(why, cap, "HTTP %ld", code);
		return code == 401 || code == 403 ? -EACCES : code == 416 ? -EBADMSG : -ENOENT;
	}
	if (head ? code != 200 : (code != 206 && code != 200)) {
		*retry = code >= 500 || code == 408 || code == 429;
		snprintf(why, cap, "HTTP %ld", code);
		return -EIO;
	}
	if (head)
		return 0;
	if (x->overflow || x->got != x->cap || (code == 200 && x->r->off != 0)) {
		snprintf(why, cap, "%s body (%zu of %zu bytes)", x->overflow || code == 200
			 ? "wrong range in the" : "short", x->got, x->cap);
		return -EBADMSG;
	}
	if (x->r->has_hash && fmt_hash(x->buf, x->cap) != x->r->hash) {
		snprintf(why, cap, "checksum mismatch (the server's bytes changed)");
		return -EBADMSG;
	}
	return 0;
}

/* relaxed: counts for the metrics only */
static void rem_count(const struct rem_store *s, size_t off, uint64_t n)
{
	if (s->o.counters)
		atomic_fetch_add_explicit((_Atomic uint64_t *)((char *)s->o.counters + off), n,
					  memory_order_relaxed);
}

#define REM_COUNT(s, field, n) rem_count(s, offsetof(struct remote_counters, field), n)

static void rem_sleep_ms(uint64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static uint64_t rem_backoff(const struct rem_store *s, uint32_t attempt)
{
	uint64_t ms = s->o.backoff_ms << (attempt < 10 ? attempt : 10);
	return ms > REM_BACKOFF_MAX_MS ? REM_BACKOFF_MAX_MS : ms;
}

/* Names the thing in err: "URL/file: block N: why after K tries". */
static int rem_fail(struct rem_store *s, const char *file, const struct fmt_range *r, int rc,
		    const char *why, uint32_t tries, struct feed_err *err)
{
	if (r && r->has_hash)
		return feed_err_set(err, rc, "%s/%s: block %" PRIu64 ": %s (after %u tr%s)", s->url,
				    file, r->block, why, tries, tries == 1 ? "y" : "ies");
	return feed_err_set(err, rc, "%s/%s: %s (after %u tr%s)", s->url, file, why, tries,
			    tries == 1 ? "y" : "ies");
}

/* One request (GET of range r into buf, or with r NULL a HEAD whose
 * length goes to *ret_size), retried with backoff. */
static int rem_fetch(struct rem_store *s, const char *file, const struct fmt_range *r, void *buf,
		     uint64_t *ret_size, struct feed_err *err)
{
	char why[160] = "no try";
	uint32_t tries = 0;
	bool retry = true;
	int rc = -EIO;

	while (retry && tries <= s->o.retries) {
		struct rem_xfer x = {.buf = buf, .cap = r ? r->len : 0, .r = r};
		if (tries) {
			rem_sleep_ms(rem_backoff(s, tries - 1));
			REM_COUNT(s, retries, 1);
		}
		tries++;
		REM_COUNT(s, requests, 1);
		if (!(x.h = rem_handle_take(s)))
			return feed_err_set(err, -ENOMEM, "%s/%s: out of memory", s->url, file);
		rc = rem_setup(s, &x, file, r, err);
		if (rc == 0) {
			CURLcode cc = curl_easy_perform(x.h);
			rc = rem_outcome(&x, cc, !r, why, sizeof(why), &retry);
			REM_COUNT(s, bytes, x.got);
			curl_off_t len = -1;
			if (rc == 0 && !r &&
			    (curl_easy_getinfo(x.h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) != CURLE_OK ||
			     len < 0)) {
				snprintf(why, sizeof(why), "no Content-Length");
				rc = -EBADMSG;
				retry = false;
			}
			if (rc == 0 && ret_size)
				*ret_size = (uint64_t)len;
		}
		curl_slist_free_all(x.hdrs);
		rem_handle_give(s, x.h);
		if (rc == 0 || rc == -EINVAL)  /* -EINVAL: rem_setup() said why */
			return rc;
	}
	if (r && r->has_hash)  /* not a 404 of an optional file at open */
		REM_COUNT(s, failures, 1);
	return rem_fail(s, file, r, rc, why, tries, err);
}

/* ---- the store ---- */

static int rem_size(void *ctx, int32_t shard, const char *file, uint64_t *ret_size,
		    struct feed_err *err)
{
	(void)shard;
	return rem_fetch(ctx, file, NULL, NULL, ret_size, err);
}

static uint64_t rem_key(const struct rem_store *s, const struct fmt_range *r)
{
	return dtier_key(s->url, r->file, r->off, r->len);
}

/* The staged (prefetched) copy of r, taken out of the ring, or NULL.
 * Under mu. */
static void *rem_unstage_locked(struct rem_store *s, uint64_t key, const struct fmt_range *r)
{
	for (size_t i = 0; i < REM_STAGE_MAX; i++) {
		struct rem_staged *st = &s->staged[i];
		if (st->buf && st->key == key && st->hash == r->hash && st->len == r->len) {
			void *found = st->buf;
			st->buf = NULL;
			return found;
		}
	}
	return NULL;
}

static bool rem_flying_locked(const struct rem_store *s, uint64_t key)
{
	for (size_t i = 0; i < s->nflight; i++)
		if (s->flight[i] == key)
			return true;
	return false;
}

/* Marks key in flight (under mu); false when the table is full. */
static bool rem_fly_locked(struct rem_store *s, uint64_t key)
{
	if (s->nflight == REM_FLIGHT_MAX)
		return false;
	s->flight[s->nflight++] = key;
	return true;
}

/* Keys landed (under mu): out of the table, and waiters woken. */
static void rem_land_locked(struct rem_store *s, const uint64_t *keys, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < s->nflight; i++)
			if (s->flight[i] == keys[k]) {
				s->flight[i] = s->flight[--s->nflight];
				break;
			}
	pthread_cond_broadcast(&s->landed);
}

/* Finds block r where a fetch already put it (the disk tier, the staging
 * ring), waiting for one in flight; else marks it in flight for the
 * caller (*ret_mine) and returns false. */
static bool rem_find(struct rem_store *s, uint64_t key, const struct fmt_range *r, void *buf,
		     bool *ret_mine)
{
	struct timespec until;
	void *found = NULL;
	bool waited = false;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(s->o.timeout_ms / 1000) + 1;
	*ret_mine = false;
	for (;;) {
		if (s->o.tier && dtier_get(s->o.tier, key, r->hash, buf, r->len) == 0)
			return true;
		feed_mutex_lock(&s->mu);
		if ((found = rem_unstage_locked(s, key, r)) || waited || !rem_flying_locked(s, key)) {
			if (!found)
				*ret_mine = rem_fly_locked(s, key);
			feed_mutex_unlock(&s->mu);
			break;
		}
		/* another worker's fetch of it: wait for it once, bounded */
		while (rem_flying_locked(s, key) &&
		       pthread_cond_timedwait(&s->landed, &s->mu, &until) == 0)
			;
		waited = true;
		feed_mutex_unlock(&s->mu);
	}
	if (!found)
		return false;
	memcpy(buf, found, r->len);
	free(found);
	return true;
}

static int rem_read(void *ctx, const struct fmt_range *r, void *buf, struct feed_err *err)
{
	struct rem_store *s = ctx;
	uint64_t key = r->has_hash ? rem_key(s, r) : 0;
	bool mine = false;

	if (r->has_hash && rem_find(s, key, r, buf, &mine))
		return 0;
	int rc = rem_fetch(s, r->file, r, buf, NULL, err);
	if (rc == 0 && r->has_hash && s->o.tier)
		dtier_put(s->o.tier, key, r->hash, buf, r->len);  /* verified above */
	if (mine) {
		feed_mutex_lock(&s->mu);
		rem_land_locked(s, &key, 1);
		feed_mutex_unlock(&s->mu);
	}
	return rc;
}

/* Keeps a verified prefetched block: the disk tier, else the staging ring
 * (taking ownership of buf). */
static void rem_keep(struct rem_store *s, const struct fmt_range *r, uint8_t *buf)
{
	uint64_t key = rem_key(s, r);
	void *old;

	if (s->o.tier) {
		dtier_put(s->o.tier, key, r->hash, buf, r->len);
		free(buf);
		return;
	}
	feed_mutex_lock(&s->mu);
	struct rem_staged *st = &s->staged[s->nstaged_next++ % REM_STAGE_MAX];
	old = st->buf;
	*st = (struct rem_staged){.key = key, .hash = r->hash, .buf = buf, .len = r->len};
	feed_mutex_unlock(&s->mu);
	free(old);
}

/* Whether r needs fetching: not staged, not in flight, not in the disk
 * tier. If so it is marked in flight for the caller. */
static bool rem_claim(struct rem_store *s, const struct fmt_range *r, uint64_t key)
{
	bool have = false;

	if (s->o.tier && dtier_has(s->o.tier, key, r->hash))
		return false;
	feed_mutex_lock(&s->mu);
	for (size_t i = 0; i < REM_STAGE_MAX && !have; i++)
		have = s->staged[i].buf && s->staged[i].key == key && s->staged[i].hash == r->hash;
	have = have || rem_flying_locked(s, key) || !rem_fly_locked(s, key);
	feed_mutex_unlock(&s->mu);
	return !have;
}

/* Adds transfer x for r to m; false when it could not be set up. */
static bool rem_start(struct rem_store *s, CURLM *m, struct rem_xfer *x, const struct fmt_range *r)
{
	*x = (struct rem_xfer){.cap = r->len, .r = r};
	if (!(x->buf = malloc(r->len ? r->len : 1)) || !(x->h = rem_handle_take(s))) {
		free(x->buf);
		x->buf = NULL;
		return false;
	}
	if (rem_setup(s, x, r->file, r, NULL) < 0 || curl_multi_add_handle(m, x->h) != CURLM_OK) {
		curl_slist_free_all(x->hdrs);
		rem_handle_give(s, x->h);
		free(x->buf);
		x->buf = NULL;
		return false;
	}
	curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
	return true;
}

/* Runs m until every transfer ends, or the deadline. Each that succeeds
 * and verifies is kept; failures are left to the reads (which retry). */
static void rem_multi_run(struct rem_store *s, CURLM *m, int running)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t end = (uint64_t)t0.tv_sec * 1000 + (uint64_t)t0.tv_nsec / 1000000 + s->o.timeout_ms;

	while (running > 0) {
		struct timespec now;
		if (curl_multi_perform(m, &running) != CURLM_OK)
			break;
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left))) {
			struct rem_xfer *x = NULL;
			char why[160];
			bool retry;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			REM_COUNT(s, requests, 1);
			REM_COUNT(s, bytes, x->got);
			if (rem_outcome(x, msg->data.result, false, why, sizeof(why), &retry) == 0) {
				rem_keep(s, x->r, x->buf);
				x->buf = NULL;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000 >= end)
			break;  /* bounded: the reads take over */
		if (running > 0)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
}

static void rem_prefetch(void *ctx, const struct fmt_range *r, size_t n)
{
	struct rem_store *s = ctx;
	size_t most = s->o.inflight < REM_INFLIGHT ? s->o.inflight : REM_INFLIGHT;
	struct rem_xfer *x;  /* ~15 KiB each (the request's text): not on the stack */
	CURLM *m;

	if (n < 2 || most < 2)
		return;  /* one block, or one request at a time: the reads fetch */
	if (!(x = calloc(most, sizeof(*x))))
		return;
	if (!(m = curl_multi_init())) {
		free(x);
		return;
	}
	for (size_t i = 0; i < n;) {
		uint64_t keys[REM_INFLIGHT];
		size_t k = 0, nkeys = 0;
		for (; i < n && k < most; i++) {
			uint64_t key = rem_key(s, &r[i]);
			if (!rem_claim(s, &r[i], key))
				continue;  /* held, or another fetch has it (a duplicate too) */
			keys[nkeys++] = key;
			if (rem_start(s, m, &x[k], &r[i]))
				k++;
		}
		rem_multi_run(s, m, (int)k);
		for (size_t j = 0; j < k; j++) {
			curl_multi_remove_handle(m, x[j].h);
			curl_slist_free_all(x[j].hdrs);
			rem_handle_give(s, x[j].h);
			free(x[j].buf);
		}
		feed_mutex_lock(&s->mu);
		rem_land_locked(s, keys, nkeys);
		feed_mutex_unlock(&s->mu);
	}
	curl_multi_cleanup(m);
	free(x);
}

/* libcurl's share locks: taken inside libcurl calls, never with mu.
 * libcurl nests them itself (it holds one kind while taking another,
 * under curl_easy_perform), in its own order, and runs none of our code
 * under them; so they are plain pthread locks, outside the count of
 * feed_lock.h, whose rule (no thread holds two of ours) they would
 * otherwise break by design. */
static void rem_share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *ctx)
{
	(void)h;
	(void)a;
	pthread_mutex_lock(&((struct rem_store *)ctx)->share_mu[d]);
}

static void rem_share_unlock(CURL *h, curl_lock_data d, void *ctx)
{
	(void)h;
	pthread_mutex_unlock(&((struct rem_store *)ctx)->share_mu[d]);
}

/* The share; without one (out of memory) each handle keeps its own. */
static void rem_share_new(struct rem_store *s)
{
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_mu[i], NULL);
	if (!(s->share = curl_share_init()))
		return;
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, rem_share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, rem_share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
}

static void rem_close(void *ctx)
{
	struct rem_store *s = ctx;

	if (!s)
		return;
	for (size_t i = 0; i < s->nidle; i++)
		curl_easy_cleanup(s->idle[i]);
	if (s->share)
		curl_share_cleanup(s->share);  /* after every handle that used it */
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_mu[i]);
	for (size_t i = 0; i < REM_STAGE_MAX; i++)
		free(s->staged[i].buf);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->landed);
	free(s->url);
	free(s);
}

static const struct fmt_store_ops rem_ops = {
	.size = rem_size,
	.read = rem_read,
	.prefetch = rem_prefetch,
	.close = rem_close,
};

int remote_open(const char *url, const struct remote_opts *o, struct fmt_dataset **ret_ds,
		struct feed_err *err)
{
	struct rem_store *s = calloc(1, sizeof(*s));
	int rc;

	if (!s || !(s->url = strdup(url))) {
		free(s);
		return feed_err_set(err, -ENOMEM, "%s: out of memory", url);
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->landed, NULL);
	rem_share_new(s);
	s->o = *o;
	s->o.s3_credentials = NULL;  /* read now; not kept */
	s->s3 = !strncmp(url, "s3://", 5);
	if (s->s3 && (rc = remote_s3_load(o->s3_credentials, &s->s3cfg, err)) < 0) {
		rem_close(s);
		return rc;
	}
	size_t n = strlen(s->url);
	while (n > 8 && s->url[n - 1] == '/')  /* one spelling per dataset, for its keys */
		s->url[--n] = '\0';
	return fmt_dataset_open_store(s->url, &rem_ops, s, ret_ds, err);
}
