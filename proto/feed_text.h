/*
 * feed_text.h: a request's text field from a C string. feed.proto sends
 * the text a client writes (names, the pipeline, the job) as bytes, so
 * the daemon sees its length; this fills one, borrowing s (NULL: ""),
 * which must outlive the request's packing.
 */
#ifndef FEED_TEXT_H
#define FEED_TEXT_H

#include <stdint.h>
#include <string.h>

#include "feed.pb-c.h"

static inline ProtobufCBinaryData feed_pb_text(const char *s)
{
	return (ProtobufCBinaryData){.len = s ? strlen(s) : 0, .data = (uint8_t *)s};
}

#endif
