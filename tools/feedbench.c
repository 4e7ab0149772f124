/*
 * feedbench: reads batches through feedd the way a trainer does and says
 * how fast they came, how long the reader waited, and whether each epoch
 * held every sample exactly once.
 *
 *   feedbench [--socket PATH] --dataset NAME [--pipeline P] [--batch N]
 *             [--epochs E] [--jobs K [--world]] [--group G] [--step-ms X]
 *             [--verify] [--json] [--credits C] [--order sequential|full|block|node]
 *             [--window W] [--seed S] [--wake] [--timeout-ms T] [--workers-note]
 *             [--nodes M --node K] [--node-deal rotate|fixed]
 *
 * This file: options, the shared mapping, forking and reaping the jobs, the
 * end-of-run verification, and the report. One job's loop is in
 * feedbench_job.c. Exit 0 when every job ran to the end (and verified, if
 * asked); 1 when a job or the verification failed, each failure one line
 * on stderr naming the job and what went wrong; 2 for a bad command line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedbench.h"
#include "json_out.h"

#define FB_MAX_JOBS 256

static const char usage[] =
	"usage: feedbench [--socket PATH] --dataset NAME [--pipeline P] [--batch N]\n"
	"                 [--epochs E] [--jobs K [--world]] [--group G] [--step-ms X]\n"
	"                 [--verify] [--json] [--credits C] [--order sequential|full|block|node]\n"
	"                 [--window W] [--seed S] [--wake] [--timeout-ms T] [--workers-note]\n"
	"                 [--pad-last] [--no-touch] [--on-error fail|skip [--max-bad N]]\n"
	"                 [--nodes M --node K] [--node-deal rotate|fixed]\n"
	"  --jobs K        K processes, each with its own connection and stream; each\n"
	"                  reads the whole dataset, unless --world: job j is rank j of K\n"
	"  --group G       every job joins group G: one stream of batches, built once,\n"
	"                  shared by the jobs (a job joining late starts mid-epoch;\n"
	"                  --verify then checks its epochs after that one)\n"
	"  --step-ms X     busy X ms after each batch, as a training step would\n"
	"  --verify        check that every epoch holds every sample exactly once\n"
	"  --on-error skip a sample that fails to decode is replaced by the next good\n"
	"                  one of the epoch (counted, and checked by --verify); up to\n"
	"                  --max-bad an epoch (default 0.1 percent of it). fail (the default)\n"
	"                  stops at the first\n"
	"  --pad-last      every batch full: each rank's last batch wraps around\n"
	"  --order node    node-aware: units of --window blocks (default 1) dealt to\n"
	"                  nodes, shuffled inside a node's share, split over its ranks\n"
	"  --nodes M --node K  this process is node K of M (one feedbench per node, on\n"
	"                  that node's socket): job j is rank K*L+j of M*L, L = --jobs\n"
	"                  with --world, else 1 (any order); --verify then needs M = 1\n"
	"  --node-deal D   rotate (default: a new deal every epoch) or fixed\n"
	"                  (default: DataLoader's partial last batch)\n"
	"  --no-touch      find each field but read none of its bytes: the reader's own\n"
	"                  cost per batch, to compare with another reader's (no checksum)\n"
	"  --wake          credits 1: every call sleeps until the daemon publishes, so\n"
	"                  the wake-up latency (publish -> return) is measured each time\n"
	"  --workers-note  also print the daemon's worker count, samples/s per worker\n"
	"                  and its advice on the stream\n"
	"Defaults: batch 256, epochs 1, jobs 1, order full, seed 1, credits as the\n"
	"library's (4), timeout 30000 ms per batch. The socket defaults to\n"
	"$FEEDD_SOCKET, or " FEED_DEFAULT_SOCKET ".\n";

enum { OPT_SOCKET = 256, OPT_DATASET, OPT_PIPELINE, OPT_BATCH, OPT_EPOCHS, OPT_JOBS,
       OPT_GROUP, OPT_STEP, OPT_VERIFY, OPT_JSON, OPT_CREDITS, OPT_ORDER, OPT_WINDOW,
       OPT_SEED, OPT_WAKE, OPT_TIMEOUT, OPT_NOTE, OPT_WORLD, OPT_PAD_LAST, OPT_NO_TOUCH,
       OPT_ON_ERROR, OPT_MAX_BAD, OPT_NODES, OPT_NODE, OPT_NODE_DEAL, OPT_HELP };

static const struct option longopts[] = {
	{"socket", required_argument, NULL, OPT_SOCKET},
	{"dataset", required_argument, NULL, OPT_DATASET},
	{"pipeline", required_argument, NULL, OPT_PIPELINE},
	{"batch", required_argument, NULL, OPT_BATCH},
	{"epochs", required_argument, NULL, OPT_EPOCHS},
	{"jobs", required_argument, NULL, OPT_JOBS},
	{"group", required_argument, NULL, OPT_GROUP},
	{"step-ms", required_argument, NULL, OPT_STEP},
	{"verify", no_argument, NULL, OPT_VERIFY},
	{"pad-last", no_argument, NULL, OPT_PAD_LAST},
	{"on-error", required_argument, NULL, OPT_ON_ERROR},
	{"max-bad", required_argument, NULL, OPT_MAX_BAD},
	{"no-touch", no_argument, NULL, OPT_NO_TOUCH},
	{"json", no_argument, NULL, OPT_JSON},
	{"credits", required_argument, NULL, OPT_CREDITS},
	{"order", required_argument, NULL, OPT_ORDER},
	{"window", required_argument, NULL, OPT_WINDOW},
	{"seed", required_argument, NULL, OPT_SEED},
	{"wake", no_argument, NULL, OPT_WAKE},
	{"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
	{"workers-note", no_argument, NULL, OPT_NOTE},
	{"world", no_argument, NULL, OPT_WORLD},
	{"nodes", required_argument, NULL, OPT_NODES},
	{"node", required_argument, NULL, OPT_NODE},
	{"node-deal", required_argument, NULL, OPT_NODE_DEAL},
	{"help", no_argument, NULL, OPT_HELP},
	{NULL, 0, NULL, 0},
};

static int fb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line naming what was wrong, then the usage. Returns -1. */
static int fb_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "feedbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", usage);
	return -1;
}

/* An unsigned number in [lo, hi], or -1 naming the option. */
static int fb_number(const char *name, const char *arg, uint64_t lo, uint64_t hi, uint64_t *ret)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || arg[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "feedbench: --%s '%s': expected a whole number in [%" PRIu64
			", %" PRIu64 "]\n", name, arg, lo, hi);
		return -1;
	}
	*ret = v;
	return 0;
}

static int fb_u32(const char *name, const char *arg, uint32_t lo, uint32_t hi, uint32_t *ret)
{
	uint64_t v;

	if (fb_number(name, arg, lo, hi, &v) < 0)
		return -1;
	*ret = (uint32_t)v;
	return 0;
}

static int fb_order(const char *arg, int *ret)
{
	if (!strcmp(arg, "sequential"))
		*ret = FEED_ORDER_SEQUENTIAL;
	else if (!strcmp(arg, "full"))
		*ret = FEED_ORDER_FULL;
	else if (!strcmp(arg, "block"))
		*ret = FEED_ORDER_BLOCK_WINDOW;
	else if (!strcmp(arg, "node"))
		*ret = FEED_ORDER_NODE;
	else
		return fb_usage_error("--order '%s': expected sequential, full, block or node", arg);
	return 0;
}

/* One option with its argument; -1 on a usage error, 1 for --help. */
static int fb_option(struct fb_opts *o, int c, const char *arg)
{
	uint64_t v;
	char *end;

	switch (c) {
	case OPT_SOCKET: o->socket = arg; return 0;
	case OPT_DATASET: o->dataset = arg; return 0;
	case OPT_PIPELINE: o->pipeline = arg; return 0;
	case OPT_VERIFY: o->verify = true; return 0;
	case OPT_PAD_LAST: o->pad_last = true; return 0;
	case OPT_NO_TOUCH: o->no_touch = true; return 0;
	case OPT_JSON: o->json = true; return 0;
	case OPT_WAKE: o->wake = true; return 0;
	case OPT_NOTE: o->workers_note = true; return 0;
	case OPT_WORLD: o->world = true; return 0;
	case OPT_ORDER: return fb_order(arg, &o->order);
	case OPT_ON_ERROR:
		if (strcmp(arg, "fail") && strcmp(arg, "skip"))
			return fb_usage_error("--on-error '%s': fail or skip", arg);
		o->on_error = strcmp(arg, "skip") ? FEED_ON_ERROR_FAIL : FEED_ON_ERROR_SKIP;
		return 0;
	case OPT_MAX_BAD: return fb_number("max-bad", arg, 1, UINT64_MAX, &o->max_bad);
	case OPT_HELP: return 1;
	case OPT_GROUP:
		if (!*arg || strlen(arg) > 63)
			return fb_usage_error("--group '%s': a name of 1 to 63 bytes", arg);
		o->group = arg;
		return 0;
	case OPT_STEP:
		o->step_ms = strtod(arg, &end);
		if (end == arg || *end || !(o->step_ms >= 0 && o->step_ms <= 60000))
			return fb_usage_error("--step-ms '%s': expected milliseconds in [0, 60000]",
					      arg);
		return 0;
	case OPT_BATCH: return fb_u32("batch", arg, 1, UINT32_MAX, &o->batch);
	case OPT_JOBS: return fb_u32("jobs", arg, 1, FB_MAX_JOBS, &o->jobs);
	case OPT_CREDITS: return fb_u32("credits", arg, 1, UINT32_MAX, &o->credits);
	case OPT_WINDOW: return fb_u32("window", arg, 1, UINT32_MAX, &o->window);
	case OPT_NODES: return fb_u32("nodes", arg, 1, 65536, &o->nodes);
	case OPT_NODE: return fb_u32("node", arg, 0, 65535, &o->node);
	case OPT_NODE_DEAL:
		if (strcmp(arg, "rotate") && strcmp(arg, "fixed"))
			return fb_usage_error("--node-deal '%s': expected rotate or fixed", arg);
		o->node_deal = strcmp(arg, "fixed") ? FEED_NODE_DEAL_ROTATE : FEED_NODE_DEAL_FIXED;
		return 0;
	case OPT_EPOCHS: return fb_number("epochs", arg, 1, 1000000, &o->epochs);
	case OPT_SEED: return fb_number("seed", arg, 0, UINT64_MAX, &o->seed);
	case OPT_TIMEOUT:
		if (fb_number("timeout-ms", arg, 1, INT32_MAX, &v) < 0)
			return -1;
		o->timeout_ms = (int)v;
		return 0;
	}
	return -1;
}

/* 0, or FB_EXIT_USAGE after saying why (0 with *help for --help). */
static int fb_parse(int argc, char **argv, struct fb_opts *o, bool *help)
{
	int c;

	*o = (struct fb_opts){.batch = 256, .epochs = 1, .jobs = 1, .seed = 1,
			      .order = FEED_ORDER_FULL, .timeout_ms = 30000, .nodes = 1};
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == '?') {
			fb_usage_error("unknown option or missing value: '%s'", argv[optind - 1]);
			return FB_EXIT_USAGE;
		}
		int r = fb_option(o, c, optarg);
		if (r)
			return r > 0 ? (*help = true, 0) : FB_EXIT_USAGE;
	}
	if (optind < argc) {
		fb_usage_error("unexpected argument '%s'", argv[optind]);
		return FB_EXIT_USAGE;
	}
	if (!o->dataset) {
		fb_usage_error("--dataset NAME is required");
		return FB_EXIT_USAGE;
	}
	if (o->wake && o->credits > 1) {
		fb_usage_error("--wake reads with one credit; --credits %u contradicts it", o->credits);
		return FB_EXIT_USAGE;
	}
	if (o->max_bad && o->on_error != FEED_ON_ERROR_SKIP) {
		fb_usage_error("--max-bad counts replaced samples: only with --on-error skip");
		return FB_EXIT_USAGE;
	}
	if (o->world && o->group) {
		fb_usage_error("--group shares one stream of batches; --world gives each job "
			       "another rank's");
		return FB_EXIT_USAGE;
	}
	if (o->node >= o->nodes) {
		fb_usage_error("--nodes %u --node %u: node K of M nodes needs K < M", o->nodes,
			       o->node);
		return FB_EXIT_USAGE;
	}
	if (o->nodes > 1 && o->verify) {
		fb_usage_error("--verify checks every sample of an epoch; with --nodes %u this "
			       "process reads one node's share", o->nodes);
		return FB_EXIT_USAGE;
	}
	if (o->world && o->jobs < 2) {
		fb_usage_error("--world splits the epoch over --jobs K: K must be at least 2");
		return FB_EXIT_USAGE;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* The shared mapping: header, results, verification sets              */

struct fb_layout {
	struct fb_shared *sh;
	struct fb_result *res;     /* [jobs] */
	struct fb_verify *sets;    /* [nsets], private memory; pos arrays shared */
	uint32_t nsets;            /* --world: 1 (all ranks together); else jobs */
	void *map;
	size_t map_bytes;
};

/* Asks the daemon for N (and so checks the dataset name before forking). */
static int fb_dataset_size(const struct fb_opts *o, uint64_t *ret_n)
{
	struct feed_conn *conn = NULL;
	struct feed_dataset_list *dl = NULL;
	int r;

	if ((r = feed_conn_new(&conn)) < 0 || (r = feed_conn_open(conn, o->socket)) < 0 ||
	    (r = feed_dataset_info(conn, o->dataset, &dl)) < 0) {
		const char *m = feed_errmsg(conn);
		fprintf(stderr, "feedbench: dataset '%s': %s%s%s\n", o->dataset, feed_strerror(r),
			*m ? ": " : "", m);
		feed_disconnect(conn);
		return FB_EXIT_FAIL;
	}
	*ret_n = dl->datasets[0].num_samples;
	feed_dataset_list_free(dl);
	feed_disconnect(conn);
	return 0;
}

static int fb_layout_new(const struct fb_opts *o, struct fb_layout *l)
{
	uint32_t world = o->world ? o->jobs : 1;
	size_t head = (sizeof(struct fb_shared) + 63) / 64 * 64;
	size_t res_bytes = (o->jobs * sizeof(struct fb_result) + 63) / 64 * 64;
	size_t set_bytes = 0;
	uint64_t n = 0;

	memset(l, 0, sizeof(*l));
	l->nsets = o->verify ? (o->world ? 1 : o->jobs) : 0;
	if (o->verify) {
		if (fb_dataset_size(o, &n))
			return FB_EXIT_FAIL;
		set_bytes = fb_verify_bytes(n, o->epochs, o->batch, world, o->pad_last);
		if (set_bytes == 0 || set_bytes > SIZE_MAX / l->nsets / 2) {
			fprintf(stderr, "feedbench: --verify: %" PRIu64 " samples x %" PRIu64
				" epochs needs more than 4 GiB per job of records; use fewer epochs\n",
				n, o->epochs);
			return FB_EXIT_USAGE;
		}
	}
	l->map_bytes = head + res_bytes + set_bytes * l->nsets;
	l->map = mmap(NULL, l->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
		      0);
	l->sets = l->nsets ? calloc(l->nsets, sizeof(*l->sets)) : NULL;
	if (l->map == MAP_FAILED || (l->nsets && !l->sets)) {
		fprintf(stderr, "feedbench: no memory for %zu bytes of results and records: %s\n",
			l->map_bytes, strerror(errno));
		return FB_EXIT_FAIL;
	}
	l->sh = l->map;
	l->sh->jobs = o->jobs;
	l->res = (struct fb_result *)((char *)l->map + head);
	for (uint32_t s = 0; s < l->nsets; s++)
		fb_verify_init(&l->sets[s], (uint64_t *)((char *)l->map + head + res_bytes +
							 s * set_bytes),
			       n, o->epochs, o->batch, world, o->pad_last);
	return 0;
}

static void fb_layout_free(struct fb_layout *l)
{
	if (l->map && l->map != MAP_FAILED)
		munmap(l->map, l->map_bytes);
	free(l->sets);
}

static struct fb_verify *fb_set_of(const struct fb_opts *o, struct fb_layout *l, uint32_t j)
{
	return l->nsets ? &l->sets[o->world ? 0 : j] : NULL;
}

/* ------------------------------------------------------------------ */
/* Running the jobs                                                    */

/* Forks every job and reaps them; returns how many failed. */
static uint32_t fb_run_jobs(const struct fb_opts *o, struct fb_layout *l)
{
	pid_t pid[FB_MAX_JOBS];
	uint32_t failed = 0;

	if (o->jobs == 1)
		return fb_job_run(o, 0, l->sh, &l->res[0], fb_set_of(o, l, 0)) != 0;
	fflush(NULL);
	for (uint32_t j = 0; j < o->jobs; j++) {
		pid[j] = fork();
		if (pid[j] == 0) {
			int rc = fb_job_run(o, j, l->sh, &l->res[j], fb_set_of(o, l, j));
			fflush(NULL);
			_exit(rc);
		}
		if (pid[j] < 0) {
			fprintf(stderr, "feedbench: fork job %u: %s\n", j, strerror(errno));
			/* the jobs already started must not wait for this one */
			atomic_fetch_add_explicit(&l->sh->arrived, 1, memory_order_relaxed);
			failed++;
		}
	}
	for (uint32_t j = 0; j < o->jobs; j++) {
		int st;
		if (pid[j] <= 0)
			continue;
		while (waitpid(pid[j], &st, 0) < 0 && errno == EINTR)
			;
		if (WIFSIGNALED(st))
			fprintf(stderr, "feedbench: job %u: killed by signal %d (%s)\n", j,
				WTERMSIG(st), strsignal(WTERMSIG(st)));
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
	}
	return failed;
}

/* The end-of-run check of every set; marks the jobs of a failed one. */
static uint32_t fb_check_sets(const struct fb_opts *o, struct fb_layout *l, bool *set_ok)
{
	uint32_t failed = 0;

	for (uint32_t s = 0; s < l->nsets; s++) {
		char msg[FB_MSG_MAX];
		set_ok[s] = true;
		/* a set whose jobs did not finish was reported already */
		for (uint32_t j = 0; j < o->jobs; j++)
			if (fb_set_of(o, l, j) == &l->sets[s] && !l->res[j].done)
				set_ok[s] = false;
		if (!set_ok[s])
			continue;
		if (!o->world && (l->res[s].start_epoch || l->res[s].start_batch))
			/* a group's late joiner: its first epoch is partial */
			l->sets[s].first_epoch = l->res[s].start_epoch + !!l->res[s].start_batch;
		if (fb_verify_check(&l->sets[s], msg, sizeof(msg)) < 0) {
			if (o->world)
				fprintf(stderr, "feedbench: verify (ranks 0..%u together): %s\n",
					o->jobs - 1, msg);
			else
				fprintf(stderr, "feedbench: job %u: verify: %s\n", s, msg);
			set_ok[s] = false;
			failed++;
		}
	}
	return failed;
}

/* ------------------------------------------------------------------ */
/* Output                                                              */

static double fb_rate(double x, double wall)
{
	return wall > 0 ? x / wall : 0.0;
}

/* A latency in µs as JSON: null when there were no calls of that kind. */
static void fb_json_us(char *out, size_t cap, double us)
{
	if (us < 0)
		snprintf(out, cap, "null");
	else
		snprintf(out, cap, "%.3f", us);
}

static void fb_print_json(const struct fb_opts *o, uint32_t j, const struct fb_result *r,
			  const char *verified)
{
	char ds[160], pipe[2 * FB_MSG_MAX], note[2 * FB_MSG_MAX], lat[5][32];

	jout_string_buf(ds, sizeof(ds), o->dataset);
	jout_string_buf(pipe, sizeof(pipe), r->pipeline);
	jout_string_buf(note, sizeof(note), r->note);
	fb_json_us(lat[0], sizeof(lat[0]), r->p50_us);
	fb_json_us(lat[1], sizeof(lat[1]), r->p99_us);
	fb_json_us(lat[2], sizeof(lat[2]), r->wake_p50_us);
	fb_json_us(lat[3], sizeof(lat[3]), r->wake_p99_us);
	fb_json_us(lat[4], sizeof(lat[4]), r->own_p50_us);
	printf("{\"job\": %u, \"rank\": %u, \"world\": %u, \"dataset\": %s, \"pipeline\": %s, "
	       "\"batch\": %u, \"credits\": %u, \"wake_mode\": %s, \"step_ms\": %g, "
	       "\"epochs\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", "
	       "\"bytes\": %" PRIu64 ", \"wall_s\": %.6f, \"samples_per_s\": %.1f, "
	       "\"mb_per_s\": %.3f, \"stall_pct\": %.3f, \"cpu_s\": %.6f, "
	       "\"own_p50_us\": %s, \"p50_us\": %s, \"p99_us\": %s, "
	       "\"fast_calls\": %" PRIu64 ", \"wake_p50_us\": %s, \"wake_p99_us\": %s, "
	       "\"wake_calls\": %" PRIu64 ", \"clock_ns\": %.1f, \"checksum\": \"%016" PRIx64 "\", "
	       "\"verified\": %s, \"replaced\": %" PRIu64 ", \"daemon_workers\": %u, "
	       "\"note\": %s}\n",
	       j, r->rank, r->world, ds, pipe, o->batch, r->credits, o->wake ? "true" : "false",
	       o->step_ms, r->epochs, r->batches, r->samples, r->bytes, r->wall_s,
	       fb_rate((double)r->timed_samples, r->wall_s),
	       fb_rate((double)r->timed_bytes / 1e6, r->wall_s),
	       r->wall_s > 0 ? 100.0 * r->stall_s / r->wall_s : 0.0, r->cpu_s,
	       lat[4], lat[0], lat[1],
	       r->fast_calls, lat[2], lat[3], r->wake_calls, r->clock_ns, r->checksum, verified,
	       r->replaced, r->daemon_workers, note);
}

static void fb_print_text(const struct fb_opts *o, uint32_t j, const struct fb_result *r,
			  const char *verified)
{
	double sps = fb_rate((double)r->timed_samples, r->wall_s);

	printf("job %u (rank %u of %u): %" PRIu64 " samples in %" PRIu64 " batches, %" PRIu64
	       " epoch%s, checksum %016" PRIx64 ", verified %s\n", j, r->rank, r->world,
	       r->samples, r->batches, r->epochs, r->epochs == 1 ? "" : "s", r->checksum,
	       verified);
	printf("  %.0f samples/s, %.1f MB/s, stall %.2f%% of %.3f s\n", sps,
	       fb_rate((double)r->timed_bytes / 1e6, r->wall_s),
	       r->wall_s > 0 ? 100.0 * r->stall_s / r->wall_s : 0.0, r->wall_s);
	if (r->fast_calls)
		printf("  batch ready: %" PRIu64 " calls, dequeue p50 %.3f us, p99 %.3f us "
		       "(a clock read pair costs %.0f ns)\n", r->fast_calls, r->p50_us, r->p99_us,
		       r->clock_ns);
	else
		printf("  batch ready: no calls\n");
	if (r->wake_calls)
		printf("  slept:       %" PRIu64 " calls, wake-up (publish -> return) p50 %.1f us, "
		       "p99 %.1f us\n", r->wake_calls, r->wake_p50_us, r->wake_p99_us);
	else
		printf("  slept:       no calls\n");
	if (r->replaced)
		printf("  replaced:    %" PRIu64 " samples that failed (--on-error skip)\n",
		       r->replaced);
	if (o->workers_note)
		printf("  daemon: %u workers, %.0f samples/s per worker; credits %u; note: %s\n",
		       r->daemon_workers, r->daemon_workers ? sps / r->daemon_workers : 0.0,
		       r->credits, *r->note ? r->note : "(none)");
}

static void fb_report(const struct fb_opts *o, const struct fb_layout *l, const bool *set_ok)
{
	double total = 0;

	for (uint32_t j = 0; j < o->jobs; j++) {
		const struct fb_result *r = &l->res[j];
		const char *verified = !o->verify ? (o->json ? "null" : "not asked") :
				       r->local_ok && set_ok[o->world ? 0 : j] ? (o->json ? "true" : "yes") :
				       (o->json ? "false" : "NO");
		if (!r->done) {
			if (!o->json)
				printf("job %u: failed (see above)\n", j);
			continue;
		}
		total += fb_rate((double)r->timed_samples, r->wall_s);
		if (o->json)
			fb_print_json(o, j, r, verified);
		else
			fb_print_text(o, j, r, verified);
	}
	if (!o->json && o->jobs > 1)
		printf("all %u jobs: %.0f samples/s together\n", o->jobs, total);
}

int main(int argc, char **argv)
{
	struct fb_opts o;
	struct fb_layout l = {0};
	bool help = false, set_ok[FB_MAX_JOBS] = {false};
	int rc = fb_parse(argc, argv, &o, &help);

	if (rc || help) {
		if (help)
			fputs(usage, stdout);
		return rc;
	}
	if ((rc = fb_layout_new(&o, &l)) != 0) {
		fb_layout_free(&l);
		return rc;
	}
	uint32_t failed = fb_run_jobs(&o, &l);
	failed += fb_check_sets(&o, &l, set_ok);
	for (uint32_t j = 0; j < o.jobs && o.verify; j++)
		failed += l.res[j].done && !l.res[j].local_ok;
	fb_report(&o, &l, set_ok);
	fb_layout_free(&l);
	return failed ? FB_EXIT_FAIL : 0;
}
