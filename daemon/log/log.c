/*
 * log.c: formats and writes log lines (see log.h), in the journal's format
 * when stderr is the journal. Any thread; no locks, no allocation: one
 * stack buffer and one write(2) per line.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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

/* sd-daemon(3)'s priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG. */
static const char log_prio[] = {
	[LOG_LEVEL_ERROR] = '3',
	[LOG_LEVEL_WARN] = '4',
	[LOG_LEVEL_INFO] = '6',
	[LOG_LEVEL_DEBUG] = '7',
};

bool log_fd_is_journal(int fd, const char *journal_stream)
{
	unsigned long long dev, ino;
	struct stat st;
	int used = 0;

	if (!journal_stream ||
	    sscanf(journal_stream, "%llu:%llu%n", &dev, &ino, &used) != 2 ||
	    journal_stream[used] != '\0' || fstat(fd, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* The line's start: "<N>" for the journal, else time, pid and level. */
static size_t log_head(const struct log *lg, enum log_level level, char *buf, size_t cap)
{
	if (lg->journal) {
		buf[0] = '<';
		buf[1] = (unsigned)level <= LOG_LEVEL_DEBUG ? log_prio[level] : '6';
		buf[2] = '>';
		return 3;
	}
	size_t n = log_stamp(buf, cap);
	int m = snprintf(buf + n, cap - n, " feedd[%d]: %s: ", (int)getpid(),
			 log_level_name(level));
	return n + (m > 0 ? (size_t)m : 0);
}

void log_write(const struct log *lg, enum log_level level, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	size_t n = log_head(lg, level, line, sizeof(line));
	va_list ap;
	int m;

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
