/*
 * log_limit.h: a rate limit on log lines of one kind from one source (a
 * connection's malformed requests, its refused release entries, refused
 * connections), so a client that misbehaves in a loop cannot flood the
 * log or spend the loop thread on writing it.
 *
 * Owns: a token bucket per key. A source may write LOG_LIMIT_BURST lines
 * back to back; after that one more each LOG_LIMIT_INTERVAL_MS. Lines over
 * the limit are counted, not written, and the next line written says how
 * many went ("...; 1234 more suppressed").
 *
 * Threads: none of its own and no locks. A struct log_limit belongs to the
 * thread that owns the thing it limits (in feedd: the loop thread) and must
 * not be used from two threads at once. The clock is the caller's (the
 * loop's uv_now()), so tests drive it without sleeping. Never allocates,
 * never logs by itself.
 */
#ifndef FEEDD_LOG_LIMIT_H
#define FEEDD_LOG_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_LIMIT_BURST 5            /* lines that may pass back to back */
#define LOG_LIMIT_INTERVAL_MS 1000   /* then one more per this many ms */
#define LOG_LIMIT_NOTE_MAX 48        /* room for log_limit_note()'s text */

/* One key's bucket. All zeros is a fresh limiter with the default policy
 * (LOG_LIMIT_BURST, LOG_LIMIT_INTERVAL_MS), so it can live in a calloc'ed
 * struct without an init call. */
struct log_limit {
	uint32_t burst;          /* lines back to back; 0 = LOG_LIMIT_BURST */
	uint32_t interval_ms;    /* one token per this many ms; 0 = the default */
	uint32_t tokens;         /* lines that may pass now */
	bool started;            /* tokens and last_ms are set */
	uint64_t last_ms;        /* time up to which tokens were credited */
	uint64_t suppressed;     /* lines refused since the last one allowed */
};

/* Sets a policy other than the default (tests; burst and interval >= 1). */
void log_limit_init(struct log_limit *l, uint32_t burst, uint32_t interval_ms);

/* May one more line be written at now_ms (a monotonic clock in ms)?
 * True: write it; *ret_suppressed is how many lines were refused since the
 * last one allowed (then reset to 0). False: do not write it; it is
 * counted, *ret_suppressed is left alone. */
bool log_limit_allow(struct log_limit *l, uint64_t now_ms, uint64_t *ret_suppressed);

/* Takes the count of refused lines (reset to 0), for a line that must be
 * written whatever the limit says (a connection's last words). */
uint64_t log_limit_take_suppressed(struct log_limit *l);

/* "; N more suppressed" for n > 0, "" for 0, into buf (LOG_LIMIT_NOTE_MAX
 * bytes); returns buf, for use as a "%s" argument. */
const char *log_limit_note(uint64_t n, char buf[LOG_LIMIT_NOTE_MAX]);

#endif
