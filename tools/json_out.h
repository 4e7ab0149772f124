/*
 * json_out.h: the tools' one JSON string writer (feedctl status/reload/top
 * --json, feedbench --json). json-c escapes the text: quotes, backslashes
 * and every control character, so a name the daemon or the environment
 * hands over never breaks a line of JSON. The rest of a document (keys,
 * numbers, layout) the tools print themselves, unchanged.
 *
 * Any thread; no state. Allocates only while it writes.
 */
#ifndef FEED_JSON_OUT_H
#define FEED_JSON_OUT_H

#include <stddef.h>
#include <stdio.h>

/* Writes s to f as a JSON string, its quotes included; `null` when out of
 * memory (still valid JSON). s: NUL-terminated, not kept. */
void jout_string(FILE *f, const char *s);

/* Writes "key": followed by s as jout_string() writes it, then sep. key is
 * one of the tool's own (printed as it is). */
void jout_member(FILE *f, const char *key, const char *s, const char *sep);

/* Writes s as a JSON string, its quotes included, into out (cap >= 3
 * bytes), NUL-terminated: s cut short (never inside an escape) when the
 * whole does not fit, `""` when out of memory. */
void jout_string_buf(char *out, size_t cap, const char *s);

#endif
