/*
 * feed_err.h: the detail that goes with a negative errno-style return.
 *
 * Functions of the format, daemon and tool modules return 0 or -errno and,
 * when given a non-NULL struct feed_err, write one line a person can act on
 * ("shard-00001.fsh: block 7: checksum mismatch"). The struct is caller-owned
 * and fixed-size, so filling it never allocates. Not thread-safe per object.
 */
#ifndef FEED_ERR_H
#define FEED_ERR_H

#include <stdarg.h>
#include <stddef.h>

#define FEED_ERR_MSG_MAX 512

struct feed_err {
	int code;                    /* the negative errno also returned */
	char msg[FEED_ERR_MSG_MAX];  /* NUL-terminated, may be empty */
};

/* Sets err (if not NULL) to code and the formatted message; returns code,
 * so callers write `return feed_err_set(err, -EINVAL, "...", ...);`. */
int feed_err_set(struct feed_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* feed_err_set with the arguments as a va_list (ap is consumed; the
 * caller va_ends it): for helpers that take a format and add their own
 * context with feed_err_prefix. Returns code; never blocks, never
 * allocates. */
int feed_err_vset(struct feed_err *err, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* Prefixes the message already in err with "prefix: " (e.g. a file name
 * the inner call did not know). Returns err->code, or 0 if err is NULL. */
int feed_err_prefix(struct feed_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
