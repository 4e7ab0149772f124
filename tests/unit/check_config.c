/*
 * check_config.c: unit tests of the files of daemon/config/:
 * defaults, every value of a full file, every kind of refusal (unknown
 * key, wrong type, out of range, missing required key, bad dataset entry,
 * syntax) with the file, line and key path it must name, and the command
 * line overriding the file.
 */
#include <check.h>
#include <sys/socket.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "cmdline.h"
#include "config.h"

static char tmpdir[64];
static char cfgpath[128];

static void tmp_setup(void)
{
	strcpy(tmpdir, "/tmp/check_config.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(cfgpath, sizeof(cfgpath), "%s/feedd.yaml", tmpdir);
}

static void tmp_teardown(void)
{
	unlink(cfgpath);
	rmdir(tmpdir);
}

static void write_cfg(const char *text)
{
	FILE *f = fopen(cfgpath, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* Loads text as a config file; returns the code, err holds the message. */
static int load_text(const char *text, struct cfg **ret, struct feed_err *err)
{
	write_cfg(text);
	memset(err, 0, sizeof(*err));
	return cfg_load(cfgpath, NULL, NULL, ret, err);
}

/* Asserts text is refused with a message holding "<file>:<line>: <tail>". */
static void refused(const char *text, unsigned line, const char *tail)
{
	struct feed_err err;
	struct cfg *c = NULL;
	char want[512];

	ck_assert_int_eq(load_text(text, &c, &err), -EINVAL);
	ck_assert_ptr_null(c);
	if (line)
		snprintf(want, sizeof(want), "%s:%u: %s", cfgpath, line, tail);
	else
		snprintf(want, sizeof(want), "%s", tail);
	ck_assert_msg(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

START_TEST(test_config_defaults)
{
	struct feed_err err = {0};
	struct cfg *c = NULL;

	ck_assert_int_eq(cfg_load(NULL, NULL, NULL, &c, &err), 0);
	ck_assert_ptr_null(c->file);
	ck_assert_str_eq(c->socket_path, CFG_DEFAULT_SOCKET);
	ck_assert(!c->has_socket_group);
	ck_assert_uint_ge(c->workers, 1);
	ck_assert_uint_le(c->workers, 256);
	ck_assert_uint_eq(c->workers, sysconf(_SC_NPROCESSORS_ONLN) > 256 ? 256
				      : (uint64_t)sysconf(_SC_NPROCESSORS_ONLN));
	ck_assert_uint_eq(c->cache_bytes, 1ull << 30);
	ck_assert_uint_eq(c->group_timeout_ms, 30000);
	ck_assert_int_eq(c->log_level, LOG_LEVEL_INFO);
	ck_assert_uint_eq(c->limits.max_connections, 64);
	ck_assert_uint_eq(c->limits.max_streams, 16);
	ck_assert_uint_eq(c->limits.max_credits, 64);
	ck_assert_uint_eq(c->limits.max_slot_bytes, 4ull << 30);
	ck_assert_uint_eq(c->limits.max_device_bytes, 8ull << 30);
	ck_assert_uint_eq(c->ndatasets, 0);
	ck_assert_uint_eq(c->npipelines, 0);
	cfg_free(c);
}
END_TEST

START_TEST(test_config_env_socket)
{
	struct feed_err err = {0};
	struct cfg *c = NULL;

	ck_assert_int_eq(cfg_load(NULL, NULL, "/tmp/env.sock", &c, &err), 0);
	ck_assert_str_eq(c->socket_path, "/tmp/env.sock");
	cfg_free(c);
	/* The file beats the environment. */
	write_cfg("socket: /tmp/file.sock\n");
	ck_assert_int_eq(cfg_load(cfgpath, NULL, "/tmp/env.sock", &c, &err), 0);
	ck_assert_str_eq(c->socket_path, "/tmp/file.sock");
	cfg_free(c);
}
END_TEST

START_TEST(test_config_empty_file)
{
	struct feed_err err;
	struct cfg *c = NULL;

	ck_assert_int_eq(load_text("# nothing but a comment\n", &c, &err), 0);
	ck_assert_str_eq(c->file, cfgpath);
	ck_assert_uint_eq(c->cache_bytes, 1ull << 30);
	cfg_free(c);
}
END_TEST

static const char full[] =
	"socket: /tmp/full/feedd.sock\n"
	"socket_group: nogroup\n"
	"workers: 3\n"
	"cache_bytes: 2G\n"
	"log_level: debug\n"
	"limits:\n"
	"  max_connections: 5\n"
	"  max_streams: 6\n"
	"  max_credits: 7\n"
	"  max_slot_bytes: 8M\n"
	"  max_device_bytes: 2G\n"
	"datasets:\n"
	"  - name: fm\n"
	"    path: data/fm\n"
	"    allow_users: [root, \"65534\"]\n"
	"    allow_groups: [nogroup, \"100\"]\n"
	"  - name: open.set-1\n"
	"    path: /srv/open\n"
	"    allow_users: [\"*\"]\n"
	"pipelines:\n"
	"  - name: train\n"
	"    ops: \"random_crop(size=28, pad=2) | hflip(p=0.5)\"\n";

START_TEST(test_config_full_file)
{
	struct feed_err err;
	struct cfg *c = NULL;
	char path[200];

	ck_assert_int_eq(load_text(full, &c, &err), 0);
	ck_assert_str_eq(c->socket_path, "/tmp/full/feedd.sock");
	ck_assert(c->has_socket_group);
	ck_assert_uint_eq(c->socket_gid, 65534);
	ck_assert_uint_eq(c->workers, 3);
	ck_assert_uint_eq(c->cache_bytes, 2ull << 30);
	ck_assert_int_eq(c->log_level, LOG_LEVEL_DEBUG);
	ck_assert_uint_eq(c->limits.max_connections, 5);
	ck_assert_uint_eq(c->limits.max_streams, 6);
	ck_assert_uint_eq(c->limits.max_credits, 7);
	ck_assert_uint_eq(c->limits.max_slot_bytes, 8ull << 20);
	ck_assert_uint_eq(c->limits.max_device_bytes, 2ull << 30);
	ck_assert_uint_eq(c->ndatasets, 2);
	const struct cfg_dataset *d = cfg_dataset_find(c, "fm");
	ck_assert_ptr_nonnull(d);
	snprintf(path, sizeof(path), "%s/data/fm", tmpdir);  /* relative to the file */
	ck_assert_str_eq(d->path, path);
	ck_assert(!d->acl.any);
	ck_assert_uint_eq(d->acl.nuids, 2);
	ck_assert_uint_eq(d->acl.uids[0], 0);
	ck_assert_uint_eq(d->acl.uids[1], 65534);
	ck_assert_uint_eq(d->acl.ngids, 2);
	ck_assert_uint_eq(d->acl.gids[0], 65534);
	ck_assert_uint_eq(d->acl.gids[1], 100);
	d = cfg_dataset_find(c, "open.set-1");
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(d->path, "/srv/open");
	ck_assert(d->acl.any);
	ck_assert_ptr_null(cfg_dataset_find(c, "nope"));
	ck_assert_uint_eq(c->npipelines, 1);
	ck_assert_str_eq(c->pipelines[0].name, "train");
	ck_assert_str_eq(c->pipelines[0].ops, "random_crop(size=28, pad=2) | hflip(p=0.5)");
	cfg_free(c);
}
END_TEST

START_TEST(test_config_unknown_key)
{
	refused("workers: 2\nbogus: 1\n", 2, "bogus: unknown key");
	refused("limits:\n  max_streams: 3\n  oops: 2\n", 3, "limits.oops: unknown key");
	refused("datasets:\n  - name: a\n    path: /a\n    colour: red\n", 4,
		"datasets[0].colour: unknown key");
}
END_TEST

START_TEST(test_config_wrong_type)
{
	refused("workers: four\n", 1, "workers: 'four' is not an unsigned integer");
	refused("workers: 4x\n", 1, "workers: '4x' is not an unsigned integer");
	refused("workers: -1\n", 1, "workers: '-1' is not an unsigned integer");
	refused("cache_bytes: 2Q\n", 1, "cache_bytes: '2Q' is not a byte count");
	refused("workers: [1]\n", 1, "workers: expected a scalar, got a list");
	refused("datasets:\n  name: a\n", 1, "datasets: expected a list, got a mapping");
	refused("limits: 5\n", 1, "limits: expected a mapping, got a scalar");
	refused("datasets:\n  - name: a\n    path: /a\n    allow_users: root\n", 4,
		"datasets[0].allow_users: expected a list, got a scalar");
	refused("log_level: loud\n", 1, "log_level: 'loud' is not one of error, warn, info, debug");
	refused("socket:\n", 1, "socket: must not be empty");
}
END_TEST

START_TEST(test_config_out_of_range)
{
	refused("workers: 0\n", 1, "workers: 0 out of range 1..256");
	refused("workers: 257\n", 1, "workers: 257 out of range 1..256");
	refused("cache_bytes: 99999999999999999999\n", 1, "cache_bytes: 99999999999999999999 out of range");
	refused("limits:\n  max_connections: 0\n", 2, "limits.max_connections: 0 out of range 1..65536");
	refused("limits:\n  max_slot_bytes: 1K\n", 2, "limits.max_slot_bytes: 1K out of range");
	refused("limits:\n  max_credits: 65\n", 2, "limits.max_credits: 65 out of range");
	char longpath[200] = "socket: /tmp/";
	memset(longpath + strlen(longpath), 'x', 120);
	strcat(longpath, "\n");
	refused(longpath, 1, "socket: path of");
}
END_TEST

START_TEST(test_config_missing_required)
{
	refused("datasets:\n  - name: a\n    path: /a\n  - name: b\n    allow_users: [root]\n", 4,
		"datasets[1]: missing required key 'path'");
	refused("pipelines:\n  - ops: identity\n", 2, "pipelines[0]: missing required key 'name'");
}
END_TEST

START_TEST(test_config_bad_dataset)
{
	refused("datasets:\n  - name: a/b\n    path: /a\n", 2,
		"datasets[0].name: 'a/b' is not a name");
	refused("datasets:\n  - name: a\n    path: /a\n  - name: a\n    path: /b\n", 4,
		"datasets[1].name: dataset 'a' defined twice");
	refused("datasets:\n  - name: a\n    path: /a\n    allow_users: [root, no_such_user_zq]\n",
		4, "datasets[0].allow_users[1]: no user named 'no_such_user_zq'");
	refused("datasets:\n  - name: a\n    path: /a\n    allow_groups:\n      - no_such_group_zq\n",
		5, "datasets[0].allow_groups[0]: no group named 'no_such_group_zq'");
	refused("datasets:\n  - name: a\n    path: /a\n    allow_users: [\"99999999999\"]\n", 4,
		"datasets[0].allow_users[0]: user id '99999999999' out of range");
	refused("datasets:\n  - name: a\n    path: \"\"\n", 3, "datasets[0].path: must not be empty");
	refused("socket_group: no_such_group_zq\n", 1, "socket_group: no group named");
	refused("pipelines:\n  - name: p\n    ops: identity\n  - name: p\n    ops: hflip\n", 4,
		"pipelines[1].name: pipeline 'p' defined twice");
}
END_TEST

/* admin_group and shared_groups (issue 28): resolved at load, a group that
 * does not exist or a name that is not one refused naming the key. */
START_TEST(test_config_sharing_keys)
{
	struct feed_err err = {0};
	struct cfg *c;

	ck_assert_msg(load_text("admin_group: nogroup\ndatasets:\n  - name: a\n    path: /a\n"
				"    shared_groups: [team, eval.v2]\n  - name: b\n    path: /b\n"
				"    shared_groups: [\"*\"]\n  - name: c\n    path: /c\n", &c, &err) == 0,
		      "%s", err.msg);
	ck_assert(c->has_admin_group);
	ck_assert_uint_eq(c->admin_gid, 65534);
	const struct cfg_dataset *a = cfg_dataset_find(c, "a");
	ck_assert(cfg_group_shared(a, "team") && cfg_group_shared(a, "eval.v2"));
	ck_assert(!cfg_group_shared(a, "tea") && !cfg_group_shared(a, "other"));
	ck_assert(cfg_group_shared(cfg_dataset_find(c, "b"), "anything"));
	ck_assert(!cfg_group_shared(cfg_dataset_find(c, "c"), "team"));
	cfg_free(c);
	ck_assert_int_eq(load_text("datasets: []\n", &c, &err), 0);
	ck_assert(!c->has_admin_group);  /* root alone may reload */
	cfg_free(c);
	refused("admin_group: no_such_group_zq\n", 1, "admin_group: no group named");
	refused("datasets:\n  - name: a\n    path: /a\n    shared_groups: [ok, \"a/b\"]\n", 4,
		"datasets[0].shared_groups[1]: 'a/b' is not a group name");
}
END_TEST

/* Named mixtures: sources that name datasets of the file, weights, Mosaic's
 * repeat and choose, an epoch; each mistake refused naming file, line and
 * key. */
START_TEST(test_config_mixtures)
{
	static const char ds[] = "datasets:\n  - name: web\n    path: /w\n"
				 "  - name: code\n    path: /c\n";
	char text[512];
	struct feed_err err;
	struct cfg *c = NULL;

	snprintf(text, sizeof(text), "%smixtures:\n  - name: lm\n    samples_per_epoch: 1000\n"
		 "    sources:\n      - {dataset: web, weight: 0.7}\n"
		 "      - {dataset: code, weight: 0.3, repeat: 2, choose: 50}\n", ds);
	ck_assert_msg(load_text(text, &c, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(c->nmixtures, 1);
	const struct cfg_mixture *m = &c->mixtures[0];
	ck_assert_str_eq(m->name, "lm");
	ck_assert_uint_eq(m->samples_per_epoch, 1000);
	ck_assert_uint_eq(m->nsources, 2);
	ck_assert_str_eq(m->sources[0].dataset, "web");
	ck_assert(m->sources[0].weight == 0.7 && m->sources[0].repeat == 0);
	ck_assert(m->sources[1].repeat == 2 && m->sources[1].choose == 50);
	cfg_free(c);

	snprintf(text, sizeof(text), "%smixtures:\n  - name: lm\n    sources:\n"
		 "      - {dataset: books, weight: 1}\n", ds);
	refused(text, 9, "mixtures[0].sources[0].dataset: no dataset named 'books'");
	snprintf(text, sizeof(text), "%smixtures:\n  - name: lm\n    sources:\n"
		 "      - {dataset: web, weight: -1}\n", ds);
	refused(text, 9, "mixtures[0].sources[0].weight: '-1': a finite number >= 0");
	snprintf(text, sizeof(text), "%smixtures:\n  - name: web\n    sources:\n"
		 "      - {dataset: web, weight: 1}\n", ds);
	refused(text, 7, "mixtures[0].name: 'web' is a dataset's name too");
	snprintf(text, sizeof(text), "%smixtures:\n  - name: lm\n    sources:\n"
		 "      - {dataset: web, weight: 0}\n", ds);
	refused(text, 8, "mixtures[0].sources: mixture 'lm': at least one weight");
	snprintf(text, sizeof(text), "%smixtures:\n  - name: lm\n    sources:\n"
		 "      - {dataset: web, weight: 1, choose: 0}\n", ds);
	refused(text, 9, "mixtures[0].sources[0].choose: '0'");
}
END_TEST

/* A configured pipeline is parsed at load: an unknown op or key is refused
 * naming the file, line, pipeline, op and key, at --check-config and at
 * start alike (both load the config this way). */
START_TEST(test_config_bad_pipeline)
{
	refused("pipelines:\n  - name: train\n    ops: hflip\n  - name: lm\n"
		"    ops: random_windw(len=256)\n", 5,
		"pipelines[1].ops: pipeline 'lm': op 1 'random_windw': unknown op");
	refused("pipelines:\n  - name: aug\n    ops: \"random_crop(size=28) | hflip(q=0.5)\"\n", 3,
		"pipelines[0].ops: pipeline 'aug': op 2 'hflip': unknown key 'q'");
	refused("pipelines:\n  - name: aug\n    ops: \"hflip(p=2)\"\n", 3,
		"pipelines[0].ops: pipeline 'aug': op 1 'hflip': key 'p'");
}
END_TEST

START_TEST(test_config_syntax_and_duplicates)
{
	refused("workers: 2\nworkers: 3\n", 2, "workers: duplicate key");
	refused("socket: \"unterminated\n", 0, "YAML syntax");
	refused("a: [\n", 0, "YAML syntax");
	refused("- 1\n- 2\n", 1, "expected a mapping, got a list");
	refused("x: &a 1\ny: *a\n", 0, "feedd.yaml");  /* aliases off: refused, file named */
}
END_TEST

START_TEST(test_config_missing_file)
{
	struct feed_err err = {0};
	struct cfg *c = NULL;

	ck_assert_int_eq(cfg_load("/nonexistent/feedd.yaml", NULL, NULL, &c, &err), -ENOENT);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/feedd.yaml"));
}
END_TEST

/* Parses argv through cmdline.c and loads with its overrides. */
static int load_args(char **argv, struct cfg **ret, struct feed_err *err)
{
	struct cli cli;
	int argc = 0;

	while (argv[argc])
		argc++;
	memset(err, 0, sizeof(*err));
	int r = cli_parse(argc, argv, &cli, err);
	if (r < 0)
		return r;
	return cfg_load(cli.config, &cli.ov, "/tmp/env.sock", ret, err);
}

START_TEST(test_config_flags_override)
{
	struct feed_err err;
	struct cfg *c = NULL;

	write_cfg(full);
	char *argv[] = {"feedd", "--config", cfgpath, "--workers", "7", "--cache-bytes", "512M",
			"--socket", "/tmp/flag.sock", "--log-level", "warn", "--group-timeout-ms", "250",
			"--dataset", "fm=/elsewhere/fm", "--dataset", "extra=/data/extra", NULL};
	ck_assert_int_eq(load_args(argv, &c, &err), 0);
	ck_assert_uint_eq(c->group_timeout_ms, 250);
	ck_assert_uint_eq(c->workers, 7);
	ck_assert_uint_eq(c->cache_bytes, 512ull << 20);
	ck_assert_str_eq(c->socket_path, "/tmp/flag.sock");
	ck_assert_int_eq(c->log_level, LOG_LEVEL_WARN);
	ck_assert_uint_eq(c->limits.max_connections, 5);  /* not overridden */
	ck_assert_uint_eq(c->ndatasets, 3);
	const struct cfg_dataset *d = cfg_dataset_find(c, "fm");
	ck_assert_str_eq(d->path, "/elsewhere/fm");
	ck_assert_uint_eq(d->acl.nuids, 2);  /* the directory moves, the access list stays */
	d = cfg_dataset_find(c, "extra");
	ck_assert_str_eq(d->path, "/data/extra");
	ck_assert(!d->acl.any && !d->acl.nuids && !d->acl.ngids);
	cfg_free(c);
}
END_TEST

START_TEST(test_config_flags_without_file)
{
	struct feed_err err;
	struct cfg *c = NULL;
	char *argv[] = {"feedd", "--dataset", "fm=/tmp/fm", "-w", "2", NULL};

	ck_assert_int_eq(load_args(argv, &c, &err), 0);
	ck_assert_str_eq(c->socket_path, "/tmp/env.sock");
	ck_assert_uint_eq(c->workers, 2);
	ck_assert_uint_eq(c->ndatasets, 1);
	ck_assert_str_eq(c->datasets[0].name, "fm");
	cfg_free(c);
}
END_TEST

/* Asserts argv is refused with a message holding want. */
static void args_refused(char **argv, const char *want)
{
	struct feed_err err;
	struct cfg *c = NULL;

	ck_assert_int_eq(load_args(argv, &c, &err), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
}

START_TEST(test_config_bad_flags)
{
	char *a1[] = {"feedd", "--workers", "0", NULL};
	char *a2[] = {"feedd", "--workers", "two", NULL};
	char *a3[] = {"feedd", "--cache-bytes", "1X", NULL};
	char *a4[] = {"feedd", "--log-level", "chatty", NULL};
	char *a5[] = {"feedd", "--dataset", "noequals", NULL};
	char *a6[] = {"feedd", "--dataset", "bad/name=/x", NULL};
	char *a7[] = {"feedd", "--frobnicate", NULL};
	char *a8[] = {"feedd", "--socket", NULL};
	char *a9[] = {"feedd", "stray", NULL};
	char *a10[] = {"feedd", "--dataset", "x=", NULL};

	args_refused(a1, "--workers: 0 out of range 1..256");
	args_refused(a2, "--workers: 'two' is not an unsigned integer");
	args_refused(a3, "--cache-bytes: '1X' is not a byte count");
	args_refused(a4, "--log-level: 'chatty' is not one of");
	args_refused(a5, "--dataset noequals: expected NAME=DIR");
	args_refused(a6, "'bad/name' is not a name");
	args_refused(a7, "--frobnicate: unknown option");
	args_refused(a8, "--socket: needs a value");
	args_refused(a9, "stray: unexpected argument");
	args_refused(a10, "--dataset x=: empty directory");
}
END_TEST

/* metrics: off by default; the file may name any address, --metrics only
 * a loopback one or the file's own host; bad addresses name the key. */
START_TEST(test_config_metrics_address)
{
	struct feed_err err;
	struct cfg *c = NULL;

	write_cfg("workers: 1\n");
	char *none[] = {"feedd", "--config", cfgpath, NULL};
	ck_assert_int_eq(load_args(none, &c, &err), 0);
	ck_assert_ptr_null(c->metrics);
	cfg_free(c);

	char *lo[] = {"feedd", "--config", cfgpath, "--metrics", "127.0.0.1:9400", NULL};
	ck_assert_int_eq(load_args(lo, &c, &err), 0);
	ck_assert_str_eq(c->metrics, "127.0.0.1:9400");
	ck_assert_int_eq(c->metrics_addr.ss_family, AF_INET);
	cfg_free(c);
	char *lo6[] = {"feedd", "--metrics", "[::1]:0", NULL};
	ck_assert_int_eq(load_args(lo6, &c, &err), 0);
	ck_assert_int_eq(c->metrics_addr.ss_family, AF_INET6);
	cfg_free(c);

	char *remote[] = {"feedd", "--config", cfgpath, "--metrics", "0.0.0.0:9400", NULL};
	args_refused(remote, "--metrics 0.0.0.0:9400: not a loopback address");
	write_cfg("metrics: 0.0.0.0:9100\n");
	ck_assert_int_eq(load_args(remote, &c, &err), 0);  /* the file set that host */
	ck_assert_str_eq(c->metrics, "0.0.0.0:9400");
	cfg_free(c);
	ck_assert_int_eq(load_args(none, &c, &err), 0);
	ck_assert_str_eq(c->metrics, "0.0.0.0:9100");
	cfg_free(c);

	refused("workers: 1\nmetrics: 127.0.0.1:99999\n", 2, "metrics: '127.0.0.1:99999': port");
	refused("metrics: example.com:80\n", 1, "metrics: 'example.com:80': 'example.com' is not");
	refused("metrics: 9400\n", 1, "metrics: '9400': expected ADDR:PORT");
	char *bad[] = {"feedd", "--metrics", "[::1:9400", NULL};
	args_refused(bad, "--metrics: '[::1:9400'");
}
END_TEST

START_TEST(test_config_parse_bytes)
{
	uint64_t v;

	ck_assert_int_eq(cfg_parse_bytes("0", &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(cfg_parse_bytes("10K", &v), 0);
	ck_assert_uint_eq(v, 10240);
	ck_assert_int_eq(cfg_parse_bytes("3T", &v), 0);
	ck_assert_uint_eq(v, 3ull << 40);
	ck_assert_int_eq(cfg_parse_bytes("18446744073709551615", &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(cfg_parse_bytes("18446744073709551616", &v), -ERANGE);
	ck_assert_int_eq(cfg_parse_bytes("16777216T", &v), -ERANGE);
	ck_assert_int_eq(cfg_parse_bytes("", &v), -EINVAL);
	ck_assert_int_eq(cfg_parse_bytes("K", &v), -EINVAL);
	ck_assert_int_eq(cfg_parse_bytes("1KB", &v), -EINVAL);
	ck_assert_int_eq(cfg_parse_bytes(" 1", &v), -EINVAL);
	ck_assert_int_eq(cfg_parse_bytes("+1", &v), -EINVAL);
}
END_TEST

START_TEST(test_config_yaml_line)
{
	static const char doc[] =
		"workers: 2\n"
		"limits:\n"
		"  max_streams: 3\n"
		"datasets:\n"
		"  - name: a\n"
		"    allow_users:\n"
		"      - root\n"
		"      - nobody\n"
		"  - name: b\n";

	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "workers", false), 1);
	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "limits.max_streams", false), 3);
	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "datasets[0].allow_users[1]", false), 8);
	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "datasets[1].name", false), 9);
	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "datasets[2]", false), 0);
	ck_assert_uint_eq(cfg_yaml_line(doc, strlen(doc), "nothing", false), 0);
	ck_assert_uint_eq(cfg_yaml_line("a: 1\nb: 2\na: 3\n", 15, "a", false), 1);
	ck_assert_uint_eq(cfg_yaml_line("a: 1\nb: 2\na: 3\n", 15, "a", true), 3);
}
END_TEST

/* cfg_load_all(), for a reload: every error of the file, in file order
 * within each section, the first also in err; cfg_load() stops at it. */
static const char many_errors[] =
	"workers: 0\n"
	"cache_bytes: lots\n"
	"log_level: loud\n"
	"datasets:\n"
	"  - name: a\n"
	"    path: /x\n"
	"    allow_users: [no_such_user_here, root, no_such_user_either]\n"
	"  - name: a\n"
	"    path: /y\n"
	"pipelines:\n"
	"  - name: p\n"
	"    ops: \"warp(x=1)\"\n"
	"  - name: q\n"
	"    ops: \"hflip(p=0.5)\"\n";

START_TEST(test_config_load_all_every_error)
{
	static struct cfg_errs errs;
	struct feed_err err = {0};
	struct cfg *c = NULL;
	const char *want[] = {
		"feedd.yaml:1: workers: 0 out of range 1..256",
		"feedd.yaml:2: cache_bytes: 'lots' is not a byte count",
		"feedd.yaml:3: log_level: 'loud' is not one of",
		"feedd.yaml:7: datasets[0].allow_users[0]: no user named 'no_such_user_here'",
		"feedd.yaml:7: datasets[0].allow_users[2]: no user named 'no_such_user_either'",
		"feedd.yaml:8: datasets[1].name: dataset 'a' defined twice",
		"feedd.yaml:12: pipelines[0].ops: pipeline 'p': ",
	};

	write_cfg(many_errors);
	ck_assert_int_eq(cfg_load_all(cfgpath, NULL, NULL, &c, &err, &errs), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_uint_eq(errs.n, sizeof(want) / sizeof(want[0]));
	ck_assert_uint_eq(errs.more, 0);
	for (unsigned i = 0; i < errs.n; i++)
		ck_assert_msg(strstr(errs.msg[i], want[i]), "error %u: '%s' lacks '%s'", i,
			      errs.msg[i], want[i]);
	ck_assert_str_eq(err.msg, errs.msg[0]);
	/* without a collector: the first only */
	ck_assert_int_eq(load_text(many_errors, &c, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, want[0]), "%s", err.msg);
	/* a file that is not YAML: one error, nothing past it can be read */
	memset(&errs, 0, sizeof(errs));
	write_cfg("workers: [1\n");
	ck_assert_int_eq(cfg_load_all(cfgpath, NULL, NULL, &c, &err, &errs), -EINVAL);
	ck_assert_uint_eq(errs.n, 1);
	ck_assert_msg(strstr(errs.msg[0], "YAML syntax"), "%s", errs.msg[0]);
}
END_TEST

/* A config is reference-counted: the last cfg_free() frees it. */
START_TEST(test_config_remote_keys)
{
	struct feed_err err = {0};
	struct cfg *c = NULL;
	char want[160];

	ck_assert_int_eq(load_text("datasets:\n  - name: a\n    path: /x\n", &c, &err), 0);
	ck_assert_ptr_null(c->cache_dir);  /* no disk tier unless asked */
	ck_assert_uint_eq(c->cache_dir_bytes, 16ull << 30);
	ck_assert_uint_eq(c->remote_timeout_ms, 30000);
	ck_assert_uint_eq(c->remote_retries, 4);
	ck_assert_uint_eq(c->remote_inflight, 16);
	ck_assert_ptr_null(c->s3_credentials);
	cfg_free(c);
	ck_assert_msg(load_text("cache_dir: tier\ncache_dir_bytes: 2G\nremote_timeout_ms: 500\n"
				"remote_retries: 0\nremote_inflight: 1\ns3_credentials: /etc/feedd/s3\ndatasets:\n"
				"  - name: web\n    path: https://data.example/fm\n"
				"  - name: bucket\n    path: s3://bkt/fm\n", &c, &err) == 0, "%s", err.msg);
	snprintf(want, sizeof(want), "%s/tier", tmpdir);  /* config-relative, as dataset paths */
	ck_assert_str_eq(c->cache_dir, want);
	ck_assert_uint_eq(c->cache_dir_bytes, 2ull << 30);
	ck_assert_uint_eq(c->remote_timeout_ms, 500);
	ck_assert_uint_eq(c->remote_retries, 0);
	ck_assert_uint_eq(c->remote_inflight, 1);
	ck_assert_str_eq(c->s3_credentials, "/etc/feedd/s3");
	ck_assert_str_eq(c->datasets[0].path, "https://data.example/fm");  /* a URL, as given */
	ck_assert_str_eq(c->datasets[1].path, "s3://bkt/fm");
	cfg_free(c);
	refused("remote_retries: 21\n", 1, "remote_retries: 21 out of range 0..20");
	refused("remote_timeout_ms: 10\n", 1, "remote_timeout_ms: 10 out of range");
	refused("remote_inflight: 0\n", 1, "remote_inflight: 0 out of range 1..64");
	refused("cache_dir: s3://b/x\n", 1, "cache_dir: 's3://b/x' is not a local directory");
}
END_TEST

START_TEST(test_config_ref_last_free_frees)
{
	struct feed_err err = {0};
	struct cfg *c = NULL;

	ck_assert_int_eq(load_text("datasets:\n  - name: a\n    path: /x\n", &c, &err), 0);
	ck_assert_ptr_eq(cfg_ref(c), c);
	cfg_free(c);
	ck_assert_str_eq(c->datasets[0].name, "a");  /* still held */
	cfg_free(c);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_config_defaults);
	tcase_add_test(tc, test_config_env_socket);
	tcase_add_test(tc, test_config_empty_file);
	tcase_add_test(tc, test_config_full_file);
	tcase_add_test(tc, test_config_mixtures);
	tcase_add_test(tc, test_config_unknown_key);
	tcase_add_test(tc, test_config_wrong_type);
	tcase_add_test(tc, test_config_out_of_range);
	tcase_add_test(tc, test_config_missing_required);
	tcase_add_test(tc, test_config_bad_dataset);
	tcase_add_test(tc, test_config_sharing_keys);
	tcase_add_test(tc, test_config_bad_pipeline);
	tcase_add_test(tc, test_config_syntax_and_duplicates);
	tcase_add_test(tc, test_config_missing_file);
	tcase_add_test(tc, test_config_flags_override);
	tcase_add_test(tc, test_config_flags_without_file);
	tcase_add_test(tc, test_config_bad_flags);
	tcase_add_test(tc, test_config_parse_bytes);
	tcase_add_test(tc, test_config_metrics_address);
	tcase_add_test(tc, test_config_yaml_line);
	tcase_add_test(tc, test_config_load_all_every_error);
	tcase_add_test(tc, test_config_ref_last_free_frees);
	tcase_add_test(tc, test_config_remote_keys);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(config_suite)
