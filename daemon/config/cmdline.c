/*
 * cmdline.c: argv to struct cli (see cmdline.h). Main thread, before
 * anything starts; getopt's globals are its only state and it resets them.
 */
#include "cmdline.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

const char cli_usage[] =
	"usage: feedd [--config FILE] [--socket PATH] [--dataset NAME=DIR|URL]...\n"
	"             [--workers N] [--cache-bytes N] [--log-level error|warn|info|debug]\n"
	"             [--group-timeout-ms N] [--metrics ADDR:PORT]\n"
	"       feedd --check-config FILE [--strict] [--user NAME] [--unit UNIT] [flags]\n"
	"             (check what start-up would refuse, as NAME or as yourself, under\n"
	"             the systemd unit file UNIT's sandbox, user and socket unit; every\n"
	"             error is reported; warnings too, which --strict makes errors)\n"
	"       feedd --list-ops   (the pipeline ops, their keys and defaults)\n"
	"       feedd --list-config-keys | --list-metrics   (feedd.yaml's keys, the\n"
	"             metrics: the tables the docs print)\n"
	"Flags override the config file; without one, built-in defaults apply.\n"
	"The default socket is $FEEDD_SOCKET, or " CFG_DEFAULT_SOCKET ".\n";

enum { OPT_CHECK = 256, OPT_CACHE, OPT_LOG, OPT_VERSION, OPT_GROUP_TIMEOUT, OPT_STRICT,
       OPT_USER, OPT_METRICS, OPT_UNIT };

static const struct option cli_opts[] = {
	{"config", required_argument, NULL, 'c'},
	{"socket", required_argument, NULL, 's'},
	{"dataset", required_argument, NULL, 'd'},
	{"workers", required_argument, NULL, 'w'},
	{"cache-bytes", required_argument, NULL, OPT_CACHE},
	{"group-timeout-ms", required_argument, NULL, OPT_GROUP_TIMEOUT},
	{"log-level", required_argument, NULL, OPT_LOG},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{"check-config", required_argument, NULL, OPT_CHECK},
	{"strict", no_argument, NULL, OPT_STRICT},
	{"user", required_argument, NULL, OPT_USER},
	{"unit", required_argument, NULL, OPT_UNIT},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{NULL, 0, NULL, 0},
};

static int cli_dataset(struct cli *c, const char *arg, struct feed_err *err)
{
	const char *eq = strchr(arg, '=');
	struct cfg_overrides *ov = &c->ov;

	if (!eq || eq == arg)
		return feed_err_set(err, -EINVAL, "--dataset %s: expected NAME=DIR or NAME=URL", arg);
	if ((size_t)(eq - arg) >= CFG_NAME_MAX)
		return feed_err_set(err, -EINVAL, "--dataset %s: name longer than %d bytes", arg,
				    CFG_NAME_MAX - 1);
	if (ov->ndatasets == CFG_MAX_FLAG_DATASETS)
		return feed_err_set(err, -EINVAL, "--dataset: more than %d given",
				    CFG_MAX_FLAG_DATASETS);
	char *name = c->names[ov->ndatasets];
	memcpy(name, arg, (size_t)(eq - arg));
	name[eq - arg] = '\0';
	ov->datasets[ov->ndatasets].name = name;
	ov->datasets[ov->ndatasets].path = eq + 1;
	ov->ndatasets++;
	return 0;
}

static int cli_one(struct cli *c, int opt, int argc, char **argv, struct feed_err *err)
{
	switch (opt) {
	case 'c': c->config = optarg; return 0;
	case 's': c->ov.socket_path = optarg; return 0;
	case 'd': return cli_dataset(c, optarg, err);
	case 'w': c->ov.workers = optarg; return 0;
	case OPT_CACHE: c->ov.cache_bytes = optarg; return 0;
	case OPT_GROUP_TIMEOUT: c->ov.group_timeout_ms = optarg; return 0;
	case OPT_LOG: c->ov.log_level = optarg; return 0;
	case OPT_METRICS: c->ov.metrics = optarg; return 0;
	case OPT_CHECK: c->check_config = optarg; return 0;
	case OPT_STRICT: c->strict = true; return 0;
	case OPT_USER: c->check_user = optarg; return 0;
	case OPT_UNIT: c->check_unit = optarg; return 0;
	case 'h': c->help = true; return 0;
	case OPT_VERSION: c->version = true; return 0;
	case ':':
		return feed_err_set(err, -EINVAL, "%s: needs a value", argv[optind - 1]);
	default:
		return feed_err_set(err, -EINVAL, "%s: unknown option",
				    optind - 1 < argc ? argv[optind - 1] : "?");
	}
}

int cli_parse(int argc, char **argv, struct cli *ret, struct feed_err *err)
{
	int opt, r;

	memset(ret, 0, sizeof(*ret));
	optind = 0;  /* GNU: full reset, so tests may parse twice */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":c:s:d:w:h", cli_opts, NULL)) != -1)
		if ((r = cli_one(ret, opt, argc, argv, err)) < 0)
			return r;
	if (optind < argc)
		return feed_err_set(err, -EINVAL, "%s: unexpected argument", argv[optind]);
	if (ret->check_config && ret->config)
		return feed_err_set(err, -EINVAL, "--check-config and --config: give one");
	if (!ret->check_config && (ret->strict || ret->check_user || ret->check_unit))
		return feed_err_set(err, -EINVAL, "%s: only with --check-config",
				    ret->strict ? "--strict" : ret->check_user ? "--user" : "--unit");
	return 0;
}
