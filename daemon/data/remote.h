/*
 * remote.h: datasets on a web server or an S3-compatible store: the same
 * packed files (manifest.pb and shards) read by HTTP range requests
 * through libcurl, plugged into format/ as a store (fmt.h
 * fmt_store_ops), so every byte is checked as a local file's is.
 *
 * Owns: one store per remote dataset (its URL, its S3 signing, its share
 * of the fetcher). The manifest and every shard's header, trailer and
 * index are read once, at open; then each block by one range request,
 * which the fetcher thread (fetcher.h) makes and retries with backoff on a
 * timeout, a reset, a 5xx, a short body or bytes that fail the block's
 * xxh64; after the last try the read fails naming the URL, the file and
 * the block (the streams of that dataset get the error; nothing else is
 * touched). With a disk tier (disktier.h) a block is looked for there
 * first and kept there once verified.
 *
 * Threads: remote_open() where datasets are opened (main() at start, a
 * worker at a reload, --check-config); reads and prefetches on workers,
 * any number at once, each waiting on a condition variable for the
 * fetcher, bounded. Never the loop thread: every read may wait on the
 * network. remote_global_init() once in main() before any thread.
 */
#ifndef FEEDD_REMOTE_H
#define FEEDD_REMOTE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "feed_err.h"
#include "fetcher.h"  /* struct remote_counters */
#include "fmt.h"

struct dtier;

/* How remote datasets are read (the config's remote keys). */
struct remote_opts {
	uint64_t timeout_ms;         /* one request, start to end */
	uint32_t retries;            /* tries after the first */
	uint64_t backoff_ms;         /* first wait between tries; doubles, at most 2 s */
	uint32_t inflight;           /* the dataset's requests in flight at once (1: one at a time) */
	const char *s3_credentials;  /* a file of KEY=VALUE lines, or NULL: the environment */
	struct dtier *tier;          /* the disk tier, or NULL */
	struct remote_counters *counters; /* the daemon's, or NULL: not counted */
	struct fetcher *fetcher;     /* the daemon's, or NULL: the dataset starts its own */
};

/* S3 addressing and credentials, from the environment (AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (else
 * AWS_DEFAULT_REGION, else us-east-1), AWS_ENDPOINT_URL (else
 * https://s3.REGION.amazonaws.com)), each overridden by the same key in
 * the credentials file when one is named. */
#define REMOTE_S3_FIELD 1024
struct remote_s3 {
	char key_id[REMOTE_S3_FIELD];
	char secret[REMOTE_S3_FIELD];
	char token[4 * REMOTE_S3_FIELD];  /* session token, may be empty */
	char region[64];
	char endpoint[REMOTE_S3_FIELD];   /* scheme://host[:port], no trailing '/' */
};

/* One request as libcurl is told to make it (remote_s3_request()). */
struct remote_req {
	char url[8192];
	char sigv4[128];          /* CURLOPT_AWS_SIGV4, "" for plain HTTP */
	char userpwd[2 * REMOTE_S3_FIELD + 2]; /* "KEY:SECRET", "" for plain HTTP */
	char token_hdr[4 * REMOTE_S3_FIELD + 32]; /* "x-amz-security-token: ...", or "" */
	char sha_hdr[128];        /* "x-amz-content-sha256: <sha256 of no body>", or "" */
};

/* Once, in main() (and tests) before any thread: libcurl's global init.
 * 0 or -ENOMEM. */
int remote_global_init(void);

/* Whether a dataset path is a URL this module reads (http://, https://,
 * s3://), rather than a directory. */
bool remote_is_url(const char *path);

/* Loads the S3 settings into *ret: the environment, then the file (may be
 * NULL). -EINVAL naming the file and line, or -errno. No check that the
 * credentials are there (a public bucket needs none). */
int remote_s3_load(const char *file, struct remote_s3 *ret, struct feed_err *err);

/* The request for file (a name inside the dataset) of the dataset at url:
 * http(s)://.../DIR -> DIR/file; s3://BUCKET/PREFIX -> path-style
 * ENDPOINT/BUCKET/PREFIX/file, signed "aws:amz:REGION:s3" with the key
 * pair (when s3 holds a key), the session token header when there is one,
 * and the payload hash header S3 wants. s3 is unused for http(s). Pure.
 * -EINVAL for a URL it cannot address (no bucket, too long). */
int remote_request(const char *url, const struct remote_s3 *s3, const char *file,
		   struct remote_req *ret, struct feed_err *err);

/* Opens the dataset at url (manifest, shard headers, trailers and
 * indexes: a few requests per shard) into *ret_ds, closed with
 * fmt_dataset_close(). o is copied; o->tier must outlive the dataset.
 * Errors name the URL (and file, and block): -ENOENT for 404, -EACCES for
 * 401/403, -EIO for a transport failure (timeout, reset, refused, 5xx;
 * libcurl's words in the message), -EBADMSG for wrong bytes (short,
 * checksum) as fmt_dataset_open(). Reads later fail the same way.
 * Blocking. */
int remote_open(const char *url, const struct remote_opts *o, struct fmt_dataset **ret_ds,
		struct feed_err *err);

#endif
