/*
 * session.h: what a packet means. The protocol state machine of one
 * connection (hello first, version negotiation, refusal counting) and the
 * request handlers: hello, list datasets, dataset info, stats.
 *
 * Loop thread only. Never does I/O itself (replies go through srv_reply())
 * and never blocks: handlers answer from the catalog and counters in
 * memory. Long work, when requests need it, goes to the worker pool.
 */
#ifndef FEEDD_SESSION_H
#define FEEDD_SESSION_H

#include <stdint.h>

#include "server.h"
#include "wire.h"

/* Handles one packet that arrived on c: buf holds in->len bytes unless
 * in->truncated. Always answers (or closes c). */
void ses_packet(struct srv_conn *c, const uint8_t *buf, const struct wire_in *in);

#endif
