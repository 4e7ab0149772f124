/*
 * feedd.h: the one struct feedd, built in main(): the state every layer
 * below shares (struct dstate, policy/dstate.h), and what only main.c and
 * service.c use: the signal handles and what systemd is told. Loop thread.
 */
#ifndef FEEDD_FEEDD_H
#define FEEDD_FEEDD_H

#include <uv.h>

#include "dstate.h"

struct svc;

/* Signals with no meaning to feedd that would otherwise end it: each is
 * logged and ignored (main.c), the realtime ones included. */
#define FEEDD_IGNORED_SIGNALS_MAX 48

struct feedd {
	struct dstate st;          /* what the layers below are handed */
	struct svc *svc;           /* what systemd is told (service.h), or NULL */
	uv_signal_t sigterm;       /* stop */
	uv_signal_t sigint;        /* stop */
	uv_signal_t sighup;        /* reloads the config file (policy/reload.h) */
	uv_signal_t sigquit;       /* stop, like SIGTERM (no core dump) */
	uv_signal_t sigxcpu;       /* stop: RLIMIT_CPU's soft limit, before SIGKILL */
	uv_signal_t sigignored[FEEDD_IGNORED_SIGNALS_MAX]; /* logged, ignored */
	unsigned nsigignored;      /* of sigignored, initialised */
};

#endif
