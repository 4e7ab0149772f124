/*
 * check_config.h: feedd --check-config FILE [--strict] [--user NAME]: what
 * start-up would refuse, checked without starting, every error reported.
 *
 * Owns: the checks start-up would make on the socket's side as the user
 * feedd will run as (NAME, or whoever runs the check): the socket
 * directory exists and is writable, or can be made; the socket's group
 * (socket_group) can be given to it (membership, or CAP_CHOWN); nothing
 * that is not a socket sits at the socket's path; every user and group
 * named resolves. Warnings, as at start-up: a dataset that does not open,
 * a pipeline that fits none, a directory that socket_group's members
 * cannot enter. Main thread; prints to stdout and stderr; never starts
 * anything. Under feedd.socket, systemd makes the socket: the socket
 * checks do not apply there (the messages say so).
 */
#ifndef FEEDD_CHECK_CONFIG_H
#define FEEDD_CHECK_CONFIG_H

#include "cmdline.h"

/* Runs the check; returns the exit code: 0 when start-up would go ahead
 * (warnings allowed, unless cli->strict), 1 otherwise. */
int chk_run(const struct cli *cli);

#endif
