/*
 * log.h: the daemon's log: one line per event, with its context, to stderr.
 * Two formats: "<time> feedd[<pid>]: <level>: <message>" on a terminal or
 * a file, and "<N><message>" when stderr is the journal (JOURNAL_STREAM
 * names it): the sd-daemon priority prefix, which journald turns into the
 * entry's PRIORITY (so `journalctl -p warning` filters), and no time or
 * pid of our own, which journald records itself.
 *
 * Owns: the line format and the level check. Any thread: a line is built in
 * a local buffer and written with one write(2), so lines from workers and
 * the loop never interleave. Never allocates, never blocks on anything but
 * the write itself. Call sites go through the log_*() macros, which test the
 * level before any argument is formatted.
 */
#ifndef FEEDD_LOG_H
#define FEEDD_LOG_H

#include <stdbool.h>

enum log_level {
	LOG_LEVEL_ERROR = 0,  /* the daemon or a request failed */
	LOG_LEVEL_WARN,       /* a refusal, a dataset left out, a peer misbehaving */
	LOG_LEVEL_INFO,       /* start, stop, connections */
	LOG_LEVEL_DEBUG,      /* every request */
};

/* Set once in main() before any thread starts; read-only afterwards. */
struct log {
	enum log_level level;  /* lines above this level are dropped */
	int fd;                /* where lines go: 2 */
	bool journal;          /* fd is journald's stream: "<N>" prefix, no time */
};

/* True if fd is the stream JOURNAL_STREAM ("DEV:INODE", set by systemd
 * for a service whose stderr goes to the journal) names: fstat(fd)'s
 * device and inode match. Any other value, or none, is false. */
bool log_fd_is_journal(int fd, const char *journal_stream);

/* Formats one line ("<time> feedd[<pid>]: <level>: <message>\n", or
 * "<N><message>\n" when lg->journal) and writes it. Use the macros instead, so the level is checked first. */
void log_write(const struct log *lg, enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_at(lg, lvl, ...)                                   \
	do {                                                   \
		const struct log *log_lg_ = (lg);              \
		if ((int)(lvl) <= (int)log_lg_->level)         \
			log_write(log_lg_, (lvl), __VA_ARGS__); \
	} while (0)

#define log_error(lg, ...) log_at(lg, LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(lg, ...) log_at(lg, LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(lg, ...) log_at(lg, LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(lg, ...) log_at(lg, LOG_LEVEL_DEBUG, __VA_ARGS__)

/* "error", "warn", "info", "debug". */
const char *log_level_name(enum log_level level);

/* Parses a name of log_level_name(); returns the level or -EINVAL. */
int log_level_parse(const char *name);

#endif
