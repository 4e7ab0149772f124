/*
 * main.c: feedd's entry point. Wires the modules together: command line,
 * config, datasets, worker pool, server, signals, systemd notification,
 * then runs the loop until SIGTERM or SIGINT (SIGHUP is logged: no reload
 * yet).
 *
 * Main thread, which becomes the loop thread. The only place that exits:
 * 0 after a clean stop, 1 when it cannot start, 2 on a usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "cache.h"
#include "catalog.h"
#include "devslots.h"
#include "cmdline.h"
#include "feedd.h"
#include "pipeline.h"
#include "pool.h"
#include "server.h"

static void main_on_closed_signal(uv_handle_t *h)
{
	(void)h;
}

/* Stop: no new connections, close every one, finish and join the workers.
 * The loop then ends by itself once the last handle has closed. */
static void main_stop(struct feedd *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = true;
	log_info(&d->log, "%s: stopping", why);
	sd_notify(0, "STOPPING=1");
	if (d->srv)
		srv_stop(d->srv);
	if (d->pool)
		pool_stop(d->pool);
	uv_close((uv_handle_t *)&d->sigterm, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sigint, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sighup, main_on_closed_signal);
}

static void main_on_signal(uv_signal_t *h, int signum)
{
	main_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* SIGHUP would kill us by default (what systemctl reload and a closed
 * terminal send); until reload exists, say so and keep serving. */
static void main_on_sighup(uv_signal_t *h, int signum)
{
	struct feedd *d = h->data;

	(void)signum;
	log_warn(&d->log, "SIGHUP: reload is not supported; still serving with the configuration "
		 "loaded at start (%s)", d->cfg->file ? d->cfg->file : "built-in defaults and flags");
}

static int main_signals(struct feedd *d)
{
	uv_signal_init(&d->loop, &d->sigterm);
	uv_signal_init(&d->loop, &d->sigint);
	uv_signal_init(&d->loop, &d->sighup);
	d->sigterm.data = d->sigint.data = d->sighup.data = d;
	int r = uv_signal_start(&d->sigterm, main_on_signal, SIGTERM);
	if (r == 0)
		r = uv_signal_start(&d->sigint, main_on_signal, SIGINT);
	if (r == 0)
		r = uv_signal_start(&d->sighup, main_on_sighup, SIGHUP);
	return r;
}

/* Opens everything, serves until stopped, closes everything. */
static int main_serve(struct feedd *d)
{
	struct feed_err err = {0};
	int r, rc = 1;

	if ((r = uv_loop_init(&d->loop)) < 0) {
		log_error(&d->log, "uv_loop_init: %s", uv_strerror(r));
		return 1;
	}
	if ((r = main_signals(d)) < 0) {
		log_error(&d->log, "signals: %s", uv_strerror(r));
		goto out;
	}
	/* The socket first: a second feedd is refused before it opens anything.
	 * Nobody is served before uv_run(), when the catalog and pool exist. */
	if (srv_start(d, &d->srv, &err) < 0 ||
	    cat_open(d->cfg, &d->log, &d->cat, &err) < 0 ||
	    pool_new(&d->loop, &d->log, (unsigned)d->cfg->workers, &d->pool, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
		goto out;
	}
	pool_set_img_max_pixels(d->pool, d->cfg->limits.max_pixels);
	if (cache_new(d->cfg->cache_bytes, &d->cache) < 0) {
		log_error(&d->log, "block cache of %llu bytes: out of memory",
			  (unsigned long long)d->cfg->cache_bytes);
		goto out;
	}
	if (dsl_gpu_new(&d->gpu) < 0) {
		log_error(&d->log, "CUDA driver state: out of memory");
		goto out;
	}
	char gpu_line[1024];
	dsl_gpu_describe(d->gpu, gpu_line, sizeof(gpu_line));
	log_info(&d->log, "%s", gpu_line);
	d->start_ms = uv_now(&d->loop);
	log_info(&d->log, "feedd %s ready: %zu of %zu datasets, %u workers, socket %s",
		 FEEDD_VERSION, d->cat->n, d->cfg->ndatasets, pool_size(d->pool),
		 d->cfg->socket_path);
	sd_notifyf(0, "READY=1\nSTATUS=serving %zu datasets on %s", d->cat->n,
		   d->cfg->socket_path);
	rc = 0;
out:
	if (rc)
		main_stop(d, "startup failed");
	uv_run(&d->loop, UV_RUN_DEFAULT);
	if ((r = uv_loop_close(&d->loop)) < 0) {
		log_error(&d->log, "loop still has handles at exit: %s", uv_strerror(r));
		rc = 1;
	}
	srv_free(d->srv);
	pool_free(d->pool);
	cache_free(d->cache); /* after the pool: no worker pins a block any more */
	dsl_gpu_free(d->gpu); /* after every stream's device slots */
	cat_free(d->cat);
	quota_free(&d->quota);
	if (rc == 0)
		log_info(&d->log, "stopped");
	return rc;
}

static int main_check_config(const struct cli *cli)
{
	struct feed_err err = {0};
	struct cfg *cfg = NULL;

	if (cfg_load(cli->check_config, &cli->ov, getenv("FEEDD_SOCKET"), &cfg, &err) < 0) {
		fprintf(stderr, "feedd: %s\n", err.msg);
		return 1;
	}
	/* What a start would meet: every dataset opens, every pipeline fits one. */
	int errors = cat_check(cfg, stderr);
	if (errors) {
		if (errors < 0)
			fprintf(stderr, "feedd: %s: %s\n", cli->check_config, strerror(-errors));
		cfg_free(cfg);
		return 1;
	}
	printf("%s: ok (socket %s, %zu datasets, %zu pipelines, %llu workers)\n",
	       cli->check_config, cfg->socket_path, cfg->ndatasets, cfg->npipelines,
	       (unsigned long long)cfg->workers);
	cfg_free(cfg);
	return 0;
}

/* feedd --list-ops: every pipeline op with its keys and defaults. */
static int main_list_ops(void)
{
	char line[512];

	for (uint32_t k = 0; pipe_op_usage(k, line, sizeof(line)) >= 0; k++)
		printf("%s\n", line);
	return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct feedd d = {.log = {.level = LOG_LEVEL_INFO, .fd = 2}};
	struct feed_err err = {0};
	struct cfg *cfg = NULL;
	struct cli cli;

	if (argc == 2 && !strcmp(argv[1], "--list-ops"))
		return main_list_ops();
	if (cli_parse(argc, argv, &cli, &err) < 0) {
		fprintf(stderr, "feedd: %s\n%s", err.msg, cli_usage);
		return 2;
	}
	if (cli.help || cli.version) {
		fputs(cli.help ? cli_usage : "feedd " FEEDD_VERSION "\n", stdout);
		return 0;
	}
	if (cli.check_config)
		return main_check_config(&cli);
	if (cfg_load(cli.config, &cli.ov, getenv("FEEDD_SOCKET"), &cfg, &err) < 0) {
		log_error(&d.log, "%s", err.msg);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);  /* a vanished peer is an error code, not a death */
	d.cfg = cfg;
	d.log.level = cfg->log_level;
	d.self_uid = geteuid();
	int rc = main_serve(&d);
	cfg_free(cfg);
	return rc;
}
