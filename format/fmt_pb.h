/*
 * fmt_pb.h: a format schema as the protobuf message (feed.proto) that the
 * manifest and the daemon's stream replies carry.
 */
#ifndef FEED_FMT_PB_H
#define FEED_FMT_PB_H

#include "feed.pb-c.h"
#include "fmt.h"

/* Fills pb from s, using the caller's fields[] and ptrs[] (at least
 * s->nfields each) as storage: nothing is allocated, nothing to free. pb
 * points into s (names, shapes), so s must outlive it. Pure, any thread. */
void fmt_schema_to_pb(const struct fmt_schema *s, Feed__Schema *pb, Feed__Field *fields,
		      Feed__Field **ptrs);

#endif
