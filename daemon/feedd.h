/*
 * feedd.h: the one struct feedd, built in main(): the state every layer
 * below shares (struct dstate, policy/dstate.h), and what only main.c and
 * service.c use: the signalfd and what systemd is told. Loop thread.
 */
#ifndef FEEDD_FEEDD_H
#define FEEDD_FEEDD_H

#include <stdbool.h>
#include <uv.h>

#include "dstate.h"

struct svc;

struct feedd {
	struct dstate st;          /* what the layers below are handed */
	struct svc *svc;           /* what systemd is told (service.h), or NULL */
	/* signals, read on the loop from a signalfd (main.c): SIGTERM, SIGINT,
	 * SIGQUIT, SIGXCPU stop; SIGHUP reloads (policy/reload.h); those with
	 * no meaning to feedd that would otherwise end it (SIGUSR1, the
	 * realtime ones, ...) are logged and ignored */
	int sigfd;                 /* the signalfd, or -1 */
	uv_poll_t sigpoll;         /* its watcher on the loop */
	bool sig_polling;          /* sigpoll initialised (closed at the stop) */
	bool sig_closing;          /* a stop began: no more signals read */
};

#endif
