/* feed_err.c: error detail helpers (see feed_err.h). No allocation. */
#include "feed_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int feed_err_vset(struct feed_err *err, int code, const char *fmt, va_list ap)
{
	if (err) {
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		err->code = code;
	}
	return code;
}

int feed_err_set(struct feed_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	feed_err_vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int feed_err_prefix(struct feed_err *err, const char *fmt, ...)
{
	char old[FEED_ERR_MSG_MAX];
	va_list ap;
	int n;

	if (!err)
		return 0;
	memcpy(old, err->msg, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n + 2 < sizeof(err->msg)) {
		/* append ": old", cut to fit */
		size_t room = sizeof(err->msg) - (size_t)n - 3;
		size_t len = strnlen(old, room);
		memcpy(err->msg + n, ": ", 2);
		memcpy(err->msg + n + 2, old, len);
		err->msg[n + 2 + len] = '\0';
	}
	return err->code;
}
