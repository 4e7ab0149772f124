/*
 * main.c: feedd's entry point. Wires the modules together: command line,
 * config, datasets, worker pool, server, signals, systemd (service.c),
 * then runs the loop until a stop signal.
 *
 * Signals (docs/operations.md, "As a systemd service"): SIGTERM, SIGINT, SIGQUIT and SIGXCPU stop
 * cleanly (the socket, unless systemd's, and the lock file are removed);
 * SIGHUP reloads the config file (policy/reload.h); SIGPIPE is ignored (a vanished peer is an error
 * code); SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR,
 * SIGSTKFLT, SIGXFSZ and the realtime signals are logged and ignored.
 * SIGTSTP, SIGTTIN, SIGTTOU and SIGSTOP pause it and SIGCONT resumes it
 * (job control); SIGCHLD, SIGURG and SIGWINCH are ignored by default.
 * The rest are faults (SIGSEGV, SIGBUS, SIGABRT, SIGSYS from the unit's
 * SystemCallFilter=...) or cannot be caught (SIGKILL): the next start
 * removes the stale socket under the lock.
 *
 * Main thread, which becomes the loop thread. The only place that exits:
 * 0 after a clean stop, 1 when it cannot start, 2 on a usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "catalog.h"
#include "devslots.h"
#include "disktier.h"
#include "fetcher.h"
#include "hybrid.h"
#include "opener.h"
#include "remote.h"
#include "check_config.h"
#include "cmdline.h"
#include "config_doc.h"
#include "feedd.h"
#include "metrics.h"
#include "metrics_doc.h"
#include "pipeline.h"
#include "pool.h"
#include "reload.h"
#include "server.h"
#include "session.h"
#include "session_group.h"
#include "service.h"

static void main_on_closed_signal(uv_handle_t *h)
{
	(void)h;
}

/* Signals that feedd ignores after logging them (see the top). */
static const int main_ignored_fixed[] = {
	SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT, SIGXFSZ,
};

/* "SIGUSR1", "SIGRTMIN+3". */
static const char *main_signame(int signum, char *buf, size_t cap)
{
	const char *abbrev = sigabbrev_np(signum);

	if (abbrev)
		snprintf(buf, cap, "SIG%s", abbrev);
	else if (signum >= SIGRTMIN && signum <= SIGRTMAX)
		snprintf(buf, cap, "SIGRTMIN+%d", signum - SIGRTMIN);
	else
		snprintf(buf, cap, "signal %d", signum);
	return buf;
}

/* Once the handles close, libuv gives the signals their default action
 * back, which for these is death: ignore them for the rest of the stop. */
static void main_close_signals(struct feedd *d)
{
	uv_close((uv_handle_t *)&d->sigterm, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sigint, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sighup, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sigquit, main_on_closed_signal);
	uv_close((uv_handle_t *)&d->sigxcpu, main_on_closed_signal);
	for (unsigned i = 0; i < d->nsigignored; i++) {
		int signum = d->sigignored[i].signum;  /* 0 if it never started */
		uv_close((uv_handle_t *)&d->sigignored[i], main_on_closed_signal);
		if (signum > 0)
			signal(signum, SIG_IGN);
	}
}

/* Stop: no new connections, close every one, finish and join the workers.
 * The loop then ends by itself once the last handle has closed. */
static void main_stop(struct feedd *f, const char *why)
{
	struct dstate *d = &f->st;

	if (d->stopping)
		return;
	d->stopping = true;
	log_info(&d->log, "%s: stopping", why);
	svc_stopping(f->svc);
	met_stop(d->metrics);  /* first: its thread waits on the loop */
	d->metrics = NULL;
	stats_stop(&d->stats);
	if (d->srv)
		srv_stop(d->srv);
	if (d->pool)
		pool_stop(d->pool);
	main_close_signals(f);
}

static void main_on_signal(uv_signal_t *h, int signum)
{
	char name[32];

	main_stop(h->data, main_signame(signum, name, sizeof(name)));
}

static void main_on_ignored(uv_signal_t *h, int signum)
{
	struct dstate *d = &((struct feedd *)h->data)->st;
	char name[32];

	log_warn(&d->log, "%s: no meaning to feedd; ignored (SIGTERM stops, SIGHUP reloads)",
		 main_signame(signum, name, sizeof(name)));
}

/* SIGHUP (systemctl reload, ExecReload=): reload the config file; the
 * outcome is logged (policy/reload.c). */
static void main_on_sighup(uv_signal_t *h, int signum)
{
	struct dstate *d = &((struct feedd *)h->data)->st;

	(void)signum;
	log_info(&d->log, "SIGHUP: reloading the configuration");
	rld_signal(d);
}

/* Every handle is initialised before any starts, so main_stop() may
 * close them all whatever failed. */
static int main_signals(struct feedd *d)
{
	uv_signal_t *stop[] = {&d->sigterm, &d->sigint, &d->sigquit, &d->sigxcpu};
	const int stop_sig[] = {SIGTERM, SIGINT, SIGQUIT, SIGXCPU};
	int sigs[FEEDD_IGNORED_SIGNALS_MAX];
	uv_loop_t *loop = &d->st.loop;
	unsigned n = 0;
	int r;

	for (size_t i = 0; i < sizeof(main_ignored_fixed) / sizeof(int); i++)
		sigs[n++] = main_ignored_fixed[i];
	for (int s = SIGRTMIN; s <= SIGRTMAX && n < FEEDD_IGNORED_SIGNALS_MAX; s++)
		sigs[n++] = s;
	for (size_t i = 0; i < 4; i++)
		uv_signal_init(loop, stop[i]);
	uv_signal_init(loop, &d->sighup);
	for (unsigned i = 0; i < n; i++)
		uv_signal_init(loop, &d->sigignored[i]);
	d->nsigignored = n;
	d->sighup.data = d;
	if ((r = uv_signal_start(&d->sighup, main_on_sighup, SIGHUP)) < 0)
		return r;
	for (size_t i = 0; i < 4; i++) {
		stop[i]->data = d;
		if ((r = uv_signal_start(stop[i], main_on_signal, stop_sig[i])) < 0)
			return r;
	}
	for (unsigned i = 0; i < n; i++) {
		d->sigignored[i].data = d;
		if ((r = uv_signal_start(&d->sigignored[i], main_on_ignored, sigs[i])) < 0)
			return r;
	}
	return 0;
}

/* The fetcher, the workers, the opener and the catalog, in that order:
 * the pool's wait hooks are on the fetcher before anything waits, and a
 * remote dataset opens on the opener (start-up never waits on a host).
 * -errno with err. */
static int main_datasets(struct dstate *d, struct feed_err *err)
{
	int r;

	if ((r = fetcher_new(d->cache, &d->fetcher, err)) < 0 ||
	    (r = pool_new(&d->loop, &d->log, (unsigned)d->cfg->workers, &d->pool, err)) < 0)
		return r;
	/* a worker waiting for the fetcher is not stuck, and a spare stands in */
	fetcher_set_hooks(d->fetcher, &(struct fetch_hooks){.wait_begin = pool_wait_begin,
							    .wait_end = pool_wait_end,
							    .ctx = d->pool});
	if ((r = opener_new(&d->opener, err)) < 0)
		return r;
	struct cat_remote rem = {.tier = d->tier, .counters = &d->remote, .fetcher = d->fetcher,
				 .opener = d->opener, .log = &d->log};
	if ((r = cat_open(d->cfg, d->cache, &rem, &d->log, &d->cat, err)) < 0)
		return r;
	bld_limits_set(&d->limits, d->cfg->limits.max_pixels);
	for (size_t i = 0; i < d->cat->n; i++)  /* per-dataset counters (a pending one: when ready) */
		if (cat_entry_state(d->cat->e[i], NULL) == CAT_READY)
			cache_name(d->cache, d->cat->e[i]->ds, d->cat->e[i]->cfg->name);
	return 0;
}

/* The block cache, the remote datasets' disk tier (cache_dir) and the
 * driver's state. 0, or -1 with the error logged. */
static int main_caches(struct dstate *d)
{
	struct feed_err err = {0};

	if (cache_new(d->cfg->cache_bytes, &d->cache) < 0) {
		log_error(&d->log, "block cache of %llu bytes: out of memory",
			  (unsigned long long)d->cfg->cache_bytes);
		return -1;
	}
	if (d->cfg->cache_dir &&
	    dtier_open(d->cfg->cache_dir, d->cfg->cache_dir_bytes, &d->tier, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
		return -1;
	}
	if (d->tier) {
		struct dtier_stats ts;
		dtier_stats(d->tier, &ts);
		log_info(&d->log, "cache_dir %s: %llu blocks, %llu of %llu bytes kept from before",
			 d->cfg->cache_dir, (unsigned long long)ts.files,
			 (unsigned long long)ts.bytes, (unsigned long long)ts.budget);
	}
	/* The driver, loaded once here; no GPU context: the first stream that
	 * asks for device slots on a GPU makes that one's, on a worker
	 * (daemon/README.md "Locks"). */
	struct dsl_gpu_opts gopts = {.has_gpus = d->cfg->has_gpus, .gpus = d->cfg->gpus};
	if (dsl_gpu_new(&gopts, &d->gpu) < 0) {
		log_error(&d->log, "CUDA driver state: out of memory");
		return -1;
	}
	char gpu_line[1024];
	dsl_gpu_describe(d->gpu, gpu_line, sizeof(gpu_line));
	log_info(&d->log, "%s", gpu_line);
	/* nvJPEG, loaded once here too: status says where JPEGs can decode */
	char jpeg_line[400];
	log_info(&d->log, "jpeg decode: %s", hyb_describe(jpeg_line, sizeof(jpeg_line)));
	return 0;
}

/* Opens everything, in order, on the loop: 0, or -1 with the error
 * logged. sd_fd: the socket systemd passed, or -1. */
static int main_open(struct feedd *f, int sd_fd)
{
	struct dstate *d = &f->st;
	struct feed_err err = {0};
	int r;

	if ((r = main_signals(f)) < 0) {
		log_error(&d->log, "signals: %s", uv_strerror(r));
		return -1;
	}
	/* The socket first: a second feedd is refused before it opens anything.
	 * Nobody is served before uv_run(), when the catalog and pool exist. */
	if (srv_start(d, sd_fd, &ses_handlers, &d->srv, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
		return -1;
	}
	d->reloaded = ses_groups_reloaded;
	if (main_caches(d) < 0)
		return -1;
	if (main_datasets(d, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
		return -1;
	}
	if ((r = stats_start(&d->stats, &d->loop, d->cache)) < 0) {
		log_error(&d->log, "stats timer: %s", uv_strerror(r));
		return -1;
	}
	if (met_start(d, &d->metrics, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
		return -1;
	}
	d->start_ms = uv_now(&d->loop);
	log_info(&d->log, "feedd %s ready: %zu of %zu datasets (%zu pending), %u workers, "
		 "socket %s", FEEDD_VERSION, cat_ready_count(d->cat), d->cfg->ndatasets,
		 d->cat->n - cat_ready_count(d->cat), pool_size(d->pool), d->cfg->socket_path);
	if (svc_ready(d, &f->svc) < 0) {
		log_error(&d->log, "systemd notification: out of memory");
		return -1;
	}
	return 0;
}

/* Closes what main_open() opened (any part of it), once the loop ended. */
static void main_close(struct dstate *d)
{
	srv_free(d->srv);
	pool_free(d->pool);
	if (d->fetcher)       /* a dataset still opening on a hung host ends now */
		fetcher_cancel(d->fetcher);
	opener_free(d->opener); /* before the catalog: its jobs hold entries */
	cat_free(d->cat);     /* before the cache: the last entries forget their blocks */
	fetcher_free(d->fetcher); /* after the datasets: every request of theirs gone */
	cache_free(d->cache); /* after the pool: no worker pins a block any more */
	dtier_close(d->tier); /* after the datasets that put blocks in it */
	dsl_gpu_free(d->gpu); /* after every stream's device slots */
	quota_free(&d->quota);
	stats_free(&d->stats);
}

/* Opens everything, serves until stopped, closes everything. sd_fd: the
 * socket systemd passed, or -1. */
static int main_serve(struct feedd *f, int sd_fd)
{
	struct dstate *d = &f->st;
	int r, rc;

	if ((r = uv_loop_init(&d->loop)) < 0) {
		log_error(&d->log, "uv_loop_init: %s", uv_strerror(r));
		return 1;
	}
	rc = main_open(f, sd_fd) < 0 ? 1 : 0;
	if (rc)
		main_stop(f, "startup failed");
	uv_run(&d->loop, UV_RUN_DEFAULT);
	if ((r = uv_loop_close(&d->loop)) < 0) {
		log_error(&d->log, "loop still has handles at exit: %s", uv_strerror(r));
		rc = 1;
	}
	main_close(d);
	if (rc == 0)
		log_info(&d->log, "stopped");
	return rc;
}

/* feedd --list-ops: every pipeline op with its keys and defaults. */
static int main_list_ops(void)
{
	char line[512];

	for (uint32_t k = 0; pipe_op_usage(k, line, sizeof(line)) >= 0; k++)
		printf("%s\n", line);
	return fflush(stdout) ? 1 : 0;
}

/* feedd --list-config-keys: every key of feedd.yaml, its default and
 * whether a reload applies it (scripts/gen-docs writes the docs' tables). */
static int main_list_config_keys(void)
{
	struct feed_err err = {0};

	if (cfg_doc_print(stdout, &err) < 0) {
		fprintf(stderr, "feedd: %s\n", err.msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct feedd d = {.st.log = {.level = LOG_LEVEL_INFO, .fd = 2}};
	struct feed_err err = {0};
	struct cfg *cfg = NULL;
	struct cli cli;

	if (argc == 2 && !strcmp(argv[1], "--list-ops"))
		return main_list_ops();
	if (argc == 2 && !strcmp(argv[1], "--list-config-keys"))
		return main_list_config_keys();
	if (argc == 2 && !strcmp(argv[1], "--list-metrics"))
		return met_doc_print(stdout) < 0 ? 1 : 0;
	if (cli_parse(argc, argv, &cli, &err) < 0) {
		fprintf(stderr, "feedd: %s\n%s", err.msg, cli_usage);
		return 2;
	}
	if (cli.help || cli.version) {
		fputs(cli.help ? cli_usage : "feedd " FEEDD_VERSION "\n", stdout);
		return 0;
	}
	if (remote_global_init() < 0) {  /* libcurl, before any thread */
		fprintf(stderr, "feedd: libcurl: out of memory\n");
		return 1;
	}
	if (cli.check_config)
		return chk_run(&cli);
	d.st.log.journal = log_fd_is_journal(2, getenv("JOURNAL_STREAM"));
	int sd_fd = -1;
	if (svc_listen_fd(&d.st.log, &sd_fd, &err) < 0 ||
	    cfg_load(cli.config, &cli.ov, getenv("FEEDD_SOCKET"), &cfg, &err) < 0) {
		log_error(&d.st.log, "%s", err.msg);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);  /* a vanished peer is an error code, not a death */
	d.st.cfg = cfg;
	d.st.ov = &cli.ov;
	d.st.env_socket = getenv("FEEDD_SOCKET");
	d.st.log.level = cfg->log_level;
	d.st.self_uid = geteuid();
	int rc = main_serve(&d, sd_fd);
	cfg_free(d.st.cfg);  /* the one in force: the first, or a reload's */
	return rc;
}
