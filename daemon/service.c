/*
 * service.c: socket activation and sd_notify (see service.h). Loop
 * thread; the watchdog reads the workers' progress without a lock.
 */
#include "service.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "catalog.h"
#include "pool.h"

struct svc {
	struct dstate *d;
	uv_timer_t timer;          /* one tick: STATUS=, and WATCHDOG=1 if healthy */
	uint64_t watchdog_ms;      /* WatchdogSec=, 0 when systemd watches nothing */
	uint64_t stuck_ms;         /* a worker in one job this long stops the pings */
	uint64_t last_samples;     /* samples served at the last tick, for samples/s */
	uint64_t last_ms;          /* uv_now() at the last tick */
	bool stuck;                /* a stuck worker was logged and has not moved on */
};

int svc_listen_fd(const struct log *lg, int *ret_fd, struct feed_err *err)
{
	int n = sd_listen_fds(1), fd = -1;

	if (n < 0)
		return feed_err_set(err, n, "LISTEN_FDS: %s", strerror(-n));
	for (int i = 0; i < n; i++) {
		int cand = SD_LISTEN_FDS_START + i;
		if (fd < 0 && sd_is_socket(cand, AF_UNIX, SOCK_SEQPACKET, 1) > 0) {
			fd = cand;
			log_info(lg, "socket activation: serving fd %d (AF_UNIX SOCK_SEQPACKET, "
				 "listening) of the %d systemd passed", fd, n);
		} else {
			log_warn(lg, "socket activation: fd %d is not a listening AF_UNIX "
				 "SOCK_SEQPACKET socket (or a second one); left alone", cand);
		}
	}
	if (n > 0 && fd < 0)
		return feed_err_set(err, -EINVAL, "socket activation: none of the %d sockets "
				    "systemd passed (LISTEN_FDS) is a listening AF_UNIX "
				    "SOCK_SEQPACKET socket: feedd.socket needs "
				    "ListenSequentialPacket= (systemd-socket-activate: "
				    "--seqpacket)", n);
	*ret_fd = fd;
	return 0;
}

/* Datasets, streams (a group's members each count) and samples served. */
static void svc_count(struct svc *s, unsigned *ret_streams, uint64_t *ret_samples)
{
	unsigned streams = 0;
	uint64_t samples = 0;

	for (struct stats_entry *en = s->d->stats.first; en; en = en->next) {
		struct stats_sample sm = {0};
		en->read(en, &sm);
		streams += sm.members ? sm.members : 1;
		samples += sm.samples;
	}
	*ret_streams = streams;
	*ret_samples = samples;
}

/* "serving N datasets, M streams, X samples/s", X since the last call
 * (a stream that closed takes its count with it: never below 0). */
static void svc_status(struct svc *s, char *buf, size_t cap)
{
	uint64_t now = uv_now(&s->d->loop), samples;
	unsigned streams;

	svc_count(s, &streams, &samples);
	uint64_t dt = now - s->last_ms;
	double rate = dt && samples > s->last_samples
		? (double)(samples - s->last_samples) * 1000.0 / (double)dt : 0.0;
	size_t ready = cat_ready_count(s->d->cat), opening = 0;
	for (size_t i = 0; i < s->d->cat->n; i++)
		opening += cat_entry_state(s->d->cat->e[i], NULL) == CAT_PENDING;
	int n = snprintf(buf, cap, "serving %zu datasets, %u streams, %.0f samples/s", ready,
			 streams, rate);
	if (opening && n > 0 && (size_t)n < cap)  /* remote ones still opening */
		snprintf(buf + n, cap - (size_t)n, ", %zu pending", opening);
	s->last_samples = samples;
	s->last_ms = now;
}

/* True while no worker has been in one job for stuck_ms; logs the change
 * either way, once. */
static bool svc_workers_ok(struct svc *s)
{
	unsigned idx;
	uint64_t ms;
	bool stuck = pool_longest_job(s->d->pool, &idx, &ms) == 1 && ms >= s->stuck_ms;

	if (stuck && !s->stuck)
		log_error(&s->d->log, "watchdog: worker %u has been in one job for %llu ms "
			  "(limit %llu ms, WatchdogSec=): no more WATCHDOG=1 until it moves on",
			  idx, (unsigned long long)ms, (unsigned long long)s->stuck_ms);
	else if (!stuck && s->stuck)
		log_info(&s->d->log, "watchdog: workers make progress again; WATCHDOG=1 resumes");
	s->stuck = stuck;
	return !stuck;
}

static void svc_on_tick(uv_timer_t *t)
{
	struct svc *s = t->data;
	char status[160];

	svc_status(s, status, sizeof(status));
	if (s->watchdog_ms && svc_workers_ok(s))
		sd_notifyf(0, "WATCHDOG=1\nSTATUS=%s", status);
	else
		sd_notifyf(0, "STATUS=%s", status);
}

/* RELOADING=1 with the monotonic time (systemd 253 and later require it
 * with RELOADING=1; older ones ignore it), then READY=1 when it ends,
 * refused or applied: the service is back to running either way. */
static void svc_reload_notify(struct dstate *d, bool done)
{
	struct timespec ts;

	if (done) {
		sd_notify(0, "READY=1");
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
		   (unsigned long long)ts.tv_sec * 1000000ULL +
		   (unsigned long long)ts.tv_nsec / 1000ULL);
}

int svc_ready(struct dstate *d, struct svc **ret)
{
	uint64_t usec = 0;
	char status[160];

	*ret = NULL;
	if (!getenv("NOTIFY_SOCKET"))
		return 0;  /* nobody to tell */
	struct svc *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->d = d;
	s->last_ms = uv_now(&d->loop);
	/* 0: the variables stay (no child inherits them; workers already run
	 * and may read the environment) */
	if (sd_watchdog_enabled(0, &usec) > 0 && usec >= 1000) {
		s->watchdog_ms = usec / 1000;
		s->stuck_ms = s->watchdog_ms;
		log_info(&d->log, "watchdog: WatchdogSec=%llu ms; WATCHDOG=1 every %llu ms while "
			 "no worker spends %llu ms in one job", (unsigned long long)s->watchdog_ms,
			 (unsigned long long)(s->watchdog_ms / 3 ? s->watchdog_ms / 3 : 1),
			 (unsigned long long)s->stuck_ms);
	}
	uint64_t tick = SVC_STATUS_MS;
	if (s->watchdog_ms && s->watchdog_ms / 3 < tick)
		tick = s->watchdog_ms / 3 ? s->watchdog_ms / 3 : 1;
	uv_timer_init(&d->loop, &s->timer);
	s->timer.data = s;
	svc_status(s, status, sizeof(status));
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
	d->reload_notify = svc_reload_notify;
	uv_timer_start(&s->timer, svc_on_tick, tick, tick);
	*ret = s;
	return 0;
}

static void svc_on_closed(uv_handle_t *h)
{
	free(h->data);
}

void svc_stopping(struct svc *s)
{
	sd_notify(0, "STOPPING=1");
	if (s)
		uv_close((uv_handle_t *)&s->timer, svc_on_closed);
}
