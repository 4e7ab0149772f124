/*
 * log_limit.c: per-key token buckets for log lines (see log_limit.h). Any
 * thread, one thread per bucket; no locks, no allocation, no clock of its
 * own.
 */
#include "log_limit.h"

#include <assert.h>
#include <stdio.h>

void log_limit_init(struct log_limit *l, uint32_t burst, uint32_t interval_ms)
{
	assert(burst >= 1 && interval_ms >= 1);
	*l = (struct log_limit){.burst = burst, .interval_ms = interval_ms};
}

/* Credits the tokens earned since last_ms, keeping the part of an interval
 * not yet earned; a full bucket earns nothing more. */
static void log_limit_refill(struct log_limit *l, uint64_t now_ms)
{
	uint32_t burst = l->burst ? l->burst : LOG_LIMIT_BURST;
	uint32_t every = l->interval_ms ? l->interval_ms : LOG_LIMIT_INTERVAL_MS;

	if (!l->started) {
		l->started = true;
		l->tokens = burst;
		l->last_ms = now_ms;
		return;
	}
	if (now_ms <= l->last_ms)  /* a clock that stood still (or a caller's went back) */
		return;
	uint64_t earned = (now_ms - l->last_ms) / every;
	if (earned >= burst - l->tokens) {
		l->tokens = burst;
		l->last_ms = now_ms;
	} else {
		l->tokens += (uint32_t)earned;
		l->last_ms += earned * every;
	}
}

bool log_limit_allow(struct log_limit *l, uint64_t now_ms, uint64_t *ret_suppressed)
{
	log_limit_refill(l, now_ms);
	if (l->tokens == 0) {
		l->suppressed++;
		return false;
	}
	l->tokens--;
	*ret_suppressed = log_limit_take_suppressed(l);
	return true;
}

uint64_t log_limit_take_suppressed(struct log_limit *l)
{
	uint64_t n = l->suppressed;

	l->suppressed = 0;
	return n;
}

const char *log_limit_note(uint64_t n, char buf[LOG_LIMIT_NOTE_MAX])
{
	buf[0] = '\0';
	if (n)
		snprintf(buf, LOG_LIMIT_NOTE_MAX, "; %llu more suppressed", (unsigned long long)n);
	return buf;
}
