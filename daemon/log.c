/*
 * log.c: formats and writes log lines (see log.h). Any thread; no locks, no
 * allocation: one stack buffer and one write(2) per line.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 1024

static const char *const log_names[] = {
	[LOG_LEVEL_ERROR] = "error",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_DEBUG] = "debug",
};

const char *log_level_name(enum log_level level)
{
	if ((unsigned)level > LOG_LEVEL_DEBUG)
		return "?";
	return log_names[level];
}

int log_level_parse(const char *name)
{
	for (int i = LOG_LEVEL_ERROR; i <= LOG_LEVEL_DEBUG; i++)
		if (!strcmp(name, log_names[i]))
			return i;
	return -EINVAL;
}

/* "2025-01-31T12:00:00.123" in local time. */
static size_t log_stamp(char *buf, size_t cap)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	int m = snprintf(buf + n, cap - n, ".%03ld", ts.tv_nsec / 1000000);
	return n + (m > 0 ? (size_t)m : 0);
}

void log_write(const struct log *lg, enum log_level level, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	size_t n = log_stamp(line, sizeof(line));
	va_list ap;
	int m;

	m = snprintf(line + n, sizeof(line) - n, " feedd[%d]: %s: ", (int)getpid(),
		     log_level_name(level));
	if (m > 0)
		n += (size_t)m;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (m > 0)
		n += (size_t)m;
	if (n > sizeof(line) - 2) {  /* truncated: mark it, keep one line */
		n = sizeof(line) - 2;
		memcpy(line + n - 3, "...", 3);
	}
	line[n++] = '\n';
	/* One write so concurrent lines never interleave; a failed log write
	 * has nowhere to be reported. */
	ssize_t w = write(lg->fd, line, n);
	(void)w;
}
