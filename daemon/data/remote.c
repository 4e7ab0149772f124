/*
 * remote.c: a dataset read over HTTP(S) or from an S3-compatible store
 * (see remote.h). This file says which ranges to ask for and where a
 * block may already be (the disk tier); the fetcher thread (fetcher.c)
 * makes every request, checks what comes back, retries and keeps verified
 * blocks. Reads run on workers and on the thread that opens datasets, and
 * wait for the fetcher; never the loop thread.
 *
 * Several requests in flight per dataset: the builder hands the blocks of
 * a batch chunk that miss the memory cache to fmt_dataset_prefetch(),
 * which reaches rem_prefetch(): the fetcher queues them together (at most
 * remote_inflight of the dataset at once) and stages them (or puts them
 * in the disk tier) where the reads that follow find them, or wait for
 * them. With one request at a time a batch of full-shuffle samples costs
 * a round trip per sample; this way, about one per chunk.
 */
#include "remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disktier.h"
#include "fetcher.h"

/* sha256 of an empty body: the payload hash of a GET or HEAD */
#define REM_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct rem_store {
	char *url;                /* as configured, one spelling: messages and keys */
	struct remote_s3 s3cfg;   /* s3 only */
	struct dtier *tier;       /* the disk tier, or NULL */
	struct fetcher *own;      /* a fetcher of its own (no daemon's given), or NULL */
	struct fetch_src *src;    /* its share of the fetcher */
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

/* ---- the store ---- */

static int rem_size(void *ctx, int32_t shard, const char *file, uint64_t *ret_size,
		    struct feed_err *err)
{
	struct rem_store *s = ctx;
	struct fetch_spec sp = {.file = file, .head = true};

	(void)shard;
	return fetch_get(s->src, &sp, NULL, ret_size, err);
}

static void rem_spec(const struct rem_store *s, const struct fmt_range *r, struct fetch_spec *sp)
{
	*sp = (struct fetch_spec){.file = r->file, .off = r->off, .len = r->len,
				  .has_hash = r->has_hash, .hash = r->hash, .block = r->block};
	if (r->has_hash)
		sp->key = dtier_key(s->url, r->file, r->off, r->len);
}

static int rem_read(void *ctx, const struct fmt_range *r, void *buf, struct feed_err *err)
{
	struct rem_store *s = ctx;
	struct fetch_spec sp;

	rem_spec(s, r, &sp);
	if (r->has_hash && s->tier && dtier_get(s->tier, sp.key, r->hash, buf, r->len) == 0)
		return 0;
	return fetch_get(s->src, &sp, buf, NULL, err);
}

static void rem_prefetch(void *ctx, const struct fmt_range *r, size_t n)
{
	struct rem_store *s = ctx;
	struct fetch_spec sp[64];

	while (n) {
		size_t k = n < 64 ? n : 64;
		for (size_t i = 0; i < k; i++)
			rem_spec(s, &r[i], &sp[i]);
		fetch_prefetch(s->src, sp, k);
		r += k;
		n -= k;
	}
}

static void rem_close(void *ctx)
{
	struct rem_store *s = ctx;

	if (!s)
		return;
	fetch_src_free(s->src);
	fetcher_free(s->own);  /* after its one source */
	free(s->url);
	free(s);
}

static const struct fmt_store_ops rem_ops = {
	.size = rem_size,
	.read = rem_read,
	.prefetch = rem_prefetch,
	.close = rem_close,
};

/* s->src for s->url with o's settings: requests addressed and signed as
 * remote_request() says (the URL of a file is a prefix plus its name). */
static int rem_src(struct rem_store *s, const struct remote_opts *o, struct feed_err *err)
{
	struct remote_req *q = malloc(sizeof(*q));
	int rc;

	if (!q)
		return feed_err_set(err, -ENOMEM, "%s: out of memory", s->url);
	if ((rc = remote_request(s->url, &s->s3cfg, "", q, err)) < 0)
		goto out;
	struct fetcher *f = o->fetcher;
	if (!f && (rc = fetcher_new(NULL, &s->own, err)) < 0)
		goto out;
	struct fetch_src_opts fo = {.label = s->url, .url_prefix = q->url, .sigv4 = q->sigv4,
				    .userpwd = q->userpwd, .token_hdr = q->token_hdr,
				    .sha_hdr = q->sha_hdr, .timeout_ms = o->timeout_ms,
				    .retries = o->retries, .backoff_ms = o->backoff_ms,
				    .inflight = o->inflight, .tier = o->tier,
				    .counters = o->counters};
	if ((rc = fetch_src_new(f ? f : s->own, &fo, &s->src)) < 0)
		feed_err_set(err, rc, "%s: out of memory", s->url);
out:
	free(q);
	return rc;
}

int remote_open(const char *url, const struct remote_opts *o, struct fmt_dataset **ret_ds,
		struct feed_err *err)
{
	struct rem_store *s = calloc(1, sizeof(*s));
	int rc;

	if (!s || !(s->url = strdup(url))) {
		free(s);
		return feed_err_set(err, -ENOMEM, "%s: out of memory", url);
	}
	s->tier = o->tier;
	if (!strncmp(url, "s3://", 5) &&
	    (rc = remote_s3_load(o->s3_credentials, &s->s3cfg, err)) < 0) {
		rem_close(s);
		return rc;
	}
	size_t n = strlen(s->url);
	while (n > 8 && s->url[n - 1] == '/')  /* one spelling per dataset, for its keys */
		s->url[--n] = '\0';
	if ((rc = rem_src(s, o, err)) < 0) {
		rem_close(s);
		return rc;
	}
	return fmt_dataset_open_store(s->url, &rem_ops, s, ret_ds, err);
}
