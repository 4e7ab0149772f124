/*
 * service.h: what feedd and systemd say to each other: the listening
 * socket systemd passes (socket activation, sd_listen_fds), and what feedd
 * tells it over NOTIFY_SOCKET (READY=1, STATUS= every few seconds,
 * WATCHDOG=1 while the loop and the workers make progress, RELOADING=1
 * and READY=1 around a reload, STOPPING=1).
 *
 * Owns: the notify timer and the watchdog's judgement of the workers.
 * Loop thread only (part of the feedd executable, which alone links
 * libsystemd). Never blocks: sd_notify is one datagram; the workers are
 * judged from relaxed loads (pool_longest_job). Without NOTIFY_SOCKET it
 * does nothing at all.
 */
#ifndef FEEDD_SERVICE_H
#define FEEDD_SERVICE_H

#include "dstate.h"

/* Seconds between STATUS= lines when no watchdog asks for more often. */
#define SVC_STATUS_MS 5000

struct svc;

/* Socket activation: the listening AF_UNIX SOCK_SEQPACKET socket among
 * those systemd passed (LISTEN_FDS, LISTEN_PID ours), in *ret_fd, or -1
 * when none was passed; the variables are removed either way. Logs which
 * descriptor it took and any it left alone. -EINVAL naming what was passed
 * if systemd passed sockets and none is one feedd can serve. Main thread,
 * before anything else opens a descriptor. */
int svc_listen_fd(const struct log *lg, int *ret_fd, struct feed_err *err);

/* Tells systemd READY=1 with a first STATUS=, and starts the timer that
 * refreshes STATUS= every SVC_STATUS_MS (or a third of WatchdogSec=, if
 * shorter) and sends WATCHDOG=1 with it while no worker has been in one
 * job for WatchdogSec= or longer (a stuck worker is logged, once, and
 * again when it moves on); and sets d->reload_notify, so each reload says
 * RELOADING=1 (with MONOTONIC_USEC=) as it starts and READY=1 as it ends,
 * applied or refused. Call once d->cat and d->pool exist. -ENOMEM. */
int svc_ready(struct dstate *d, struct svc **ret);

/* Tells systemd STOPPING=1 and closes the timer (freed when the loop has
 * closed it). Accepts NULL. */
void svc_stopping(struct svc *s);

#endif
