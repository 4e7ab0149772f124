/*
 * metrics.h: the Prometheus text exposition (format 0.0.4) of feedd's
 * counters, served over HTTP by libmicrohttpd at /metrics when the config
 * or --metrics names an address (off by default). See daemon/README.md
 * "Metrics" for the names and labels.
 *
 * Threads: libmicrohttpd runs its own thread (MHD_USE_INTERNAL_POLLING_
 * THREAD) that accepts, parses and answers requests. It never touches the
 * registry, a stream or a libuv handle: the registry and the groups'
 * member tables belong to the loop thread, so a request wakes the loop
 * (uv_async_send) and waits, at most METRICS_WAIT_MS, for the loop to
 * render the text from the same counters `feedctl status` reads (the
 * lock-free stream counters, the cache's copy, the pool's busy count).
 * The two threads share only struct met's mutex-guarded text and
 * generation numbers; the loop holds that mutex to swap a pointer, never
 * while rendering, so a slow scraper never stalls the loop. met.mu is a
 * leaf: nothing else is taken while it is held.
 */
#ifndef FEEDD_METRICS_H
#define FEEDD_METRICS_H

#include <stddef.h>

#include "feed_err.h"

/* How long a request waits for the loop before serving the last text
 * rendered (or 503 when there is none yet). */
#define METRICS_WAIT_MS 2000

/* The HTTP server's bounds, so idle or half-open clients cannot starve a
 * scraper: connections at once (libmicrohttpd polls them all with epoll,
 * none holds a thread), from one address, and the seconds a connection
 * may sit idle (no request, or a request never finished) before it is
 * closed. A Prometheus scraping every 15 s reconnects each time: cheap. */
#define METRICS_MAX_CONNECTIONS 128
#define METRICS_MAX_PER_PEER 16
#define METRICS_IDLE_TIMEOUT_S 5

struct dstate;
struct met;

/* Starts serving d's metrics on d->cfg->metrics_addr and logs the URL
 * (with the port bound, for port 0). Loop thread, before uv_run(). 0 with
 * *ret (NULL when no address is configured), or -EADDRINUSE and friends
 * naming the address in err. */
int met_start(struct dstate *d, struct met **ret, struct feed_err *err);

/* Stops the HTTP thread (a request waiting for the loop is answered with
 * the last text) and closes the wake-up handle; the struct is freed by its
 * close callback. Loop thread. Accepts NULL. */
void met_stop(struct met *m);

/* The whole exposition of d now, NUL-terminated, in *ret (the caller's,
 * free()) and its length in *ret_len. Loop thread. -ENOMEM. */
int met_render(struct dstate *d, char **ret, size_t *ret_len);

#endif
