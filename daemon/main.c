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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
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

/* The stop signals: the first stops feedd; once a stop began, another
 * one ends it at once (their default action). */
static const int main_stop_signals[] = {SIGTERM, SIGINT, SIGQUIT, SIGXCPU};

/* Every signal feedd reads on its loop (stop_only: the stop signals). */
static void main_sigset(sigset_t *set, bool stop_only)
{
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(main_stop_signals) / sizeof(int); i++)
		sigaddset(set, main_stop_signals[i]);
	if (stop_only)
		return;
	sigaddset(set, SIGHUP);
	for (size_t i = 0; i < sizeof(main_ignored_fixed) / sizeof(int); i++)
		sigaddset(set, main_ignored_fixed[i]);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaddset(set, sig);
}

static void main_on_closed_signals(uv_handle_t *h)
{
	struct feedd *f = h->data;

	close(f->sigfd);  /* after its watcher: never closed while polled */
	f->sigfd = -1;
}

/* The stop has begun: no more reading of signals. The stop signals are
 * let through again, so a second one ends feedd at once (default action);
 * the others stay blocked, unread: ignored for the rest of the stop. */
static void main_close_signals(struct feedd *f)
{
	sigset_t stop;

	if (f->sig_closing || f->sigfd < 0)
		return;
	f->sig_closing = true;
	if (f->sig_polling) {
		uv_close((uv_handle_t *)&f->sigpoll, main_on_closed_signals);
	} else {
		close(f->sigfd);
		f->sigfd = -1;
	}
	for (size_t i = 0; i < sizeof(main_stop_signals) / sizeof(int); i++)
		signal(main_stop_signals[i], SIG_DFL);  /* also where the parent ignored them */
	main_sigset(&stop, true);
	pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
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

/* One signal read from the signalfd: SIGHUP (systemctl reload,
 * ExecReload=) reloads the config file, the outcome logged
 * (policy/reload.c); a stop signal stops; any other is logged, ignored. */
static void main_on_signal(struct feedd *f, int signum)
{
	struct dstate *d = &f->st;
	char name[32];

	main_signame(signum, name, sizeof(name));
	if (signum == SIGHUP) {
		log_info(&d->log, "SIGHUP: reloading the configuration");
		rld_signal(d);
		return;
	}
	for (size_t i = 0; i < sizeof(main_stop_signals) / sizeof(int); i++)
		if (signum == main_stop_signals[i]) {
			main_stop(f, name);
			return;
		}
	log_warn(&d->log, "%s: no meaning to feedd; ignored (SIGTERM stops, SIGHUP reloads)",
		 name);
}

/* The signalfd is readable: each signal pending (the kernel's order, the
 * lowest number first; a standard signal sent twice before a read comes
 * once), until a stop closes it. */
static void main_on_signals(uv_poll_t *h, int status, int events)
{
	struct feedd *f = h->data;
	struct signalfd_siginfo si[8];

	(void)events;
	if (status < 0) {
		log_error(&f->st.log, "reading signals: %s", uv_strerror(status));
		return;
	}
	while (!f->sig_closing) {
		ssize_t n = read(f->sigfd, si, sizeof(si));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			log_error(&f->st.log, "reading signals: %s", strerror(errno));
		if (n < (ssize_t)sizeof(si[0]))
			return;  /* EAGAIN: none left */
		for (size_t i = 0; i < (size_t)n / sizeof(si[0]) && !f->sig_closing; i++)
			main_on_signal(f, (int)si[i].ssi_signo);
	}
}

/*
 * Signals are read on the loop from a signalfd, never handled
 * asynchronously: they are blocked in this thread before any other
 * thread starts (every later thread inherits the mask; the pool's,
 * the fetcher's and the opener's block all), so the kernel keeps each
 * one pending until the loop reads it. No handler runs in a signal
 * context, and none can be lost in between (a handler-based delivery
 * under the thread sanitizer lost one in ~1 of 13 starts right after
 * "ready"). 0, or a negative errno-style code with err naming the call
 * that failed (main_stop then closes what was made).
 */
static int main_signals(struct feedd *f, struct feed_err *err)
{
	sigset_t set;
	int r, fd;

	f->sigfd = -1;
	main_sigset(&set, false);
	if ((r = pthread_sigmask(SIG_BLOCK, &set, NULL)) != 0)
		return feed_err_set(err, -r, "signals: pthread_sigmask: %s", strerror(r));
	if ((fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		r = -errno;
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
		return feed_err_set(err, r, "signals: signalfd: %s", strerror(-r));
	}
	f->sigfd = fd;
	if ((r = uv_poll_init(&f->st.loop, &f->sigpoll, fd)) < 0)
		return feed_err_set(err, r, "signals: uv_poll_init: %s", uv_strerror(r));
	f->sigpoll.data = f;
	f->sig_polling = true;
	if ((r = uv_poll_start(&f->sigpoll, UV_READABLE, main_on_signals)) < 0)
		return feed_err_set(err, r, "signals: uv_poll_start: %s", uv_strerror(r));
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

	if (main_signals(f, &err) < 0) {
		log_error(&d->log, "%s", err.msg);
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
	struct feedd d = {.st.log = {.level = LOG_LEVEL_INFO, .fd = 2}, .sigfd = -1};
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
