/*
 * cmdline.h: feedd's command line (DESIGN.md "Command-line contract").
 *
 * Owns: turning argv into struct cli; values are checked later by
 * cfg_load() with the config file's rules. Main thread, once. Never prints
 * and never exits: main() decides what to say.
 */
#ifndef FEEDD_CMDLINE_H
#define FEEDD_CMDLINE_H

#include <stdbool.h>

#include "config.h"

struct cli {
	const char *config;        /* --config FILE */
	const char *check_config;  /* --check-config FILE: check, report, exit */
	bool strict;               /* --strict: with --check-config, warnings are errors */
	const char *check_user;    /* --user NAME: with --check-config, check as NAME */
	const char *check_unit;    /* --unit FILE: with --check-config, under that unit */
	bool help;                 /* --help */
	bool version;              /* --version */
	struct cfg_overrides ov;   /* every other flag */
	char names[CFG_MAX_FLAG_DATASETS][CFG_NAME_MAX]; /* storage for ov.datasets[].name */
};

/* Parses argv (pointers into argv are kept, so argv must outlive *ret).
 * -EINVAL naming the option on a usage error. Resets getopt's state, so it
 * may be called more than once. */
int cli_parse(int argc, char **argv, struct cli *ret, struct feed_err *err);

/* The usage text. */
extern const char cli_usage[];

#endif
