/*
 * feedctl: asks a running feedd how it is and what it serves, through
 * libfeedclient only.
 *
 *   feedctl [--socket PATH] [--timeout MS] status [--json]
 *   feedctl [--socket PATH] [--timeout MS] datasets [NAME]
 *   feedctl [--socket PATH] [--timeout MS] reload [--json]
 *   feedctl [--socket PATH] [--timeout MS] top [--json] [--wide] [--sort KEY]
 *           [--once | --iterations N]
 *
 * Single-threaded command. Exit 0 on success, 1 when the daemon cannot be
 * reached or refuses, 2 on a usage error; every failure is one line on
 * stderr with the daemon's own message when it gave one.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/client.h"
#include "feedctl_top.h"
#include "json_out.h"

static const char usage[] =
	"usage: feedctl [--socket PATH] [--timeout MS] status [--json]\n"
	"       feedctl [--socket PATH] [--timeout MS] datasets [NAME]\n"
	"       feedctl [--socket PATH] [--timeout MS] reload [--json]\n"
	"       feedctl [--socket PATH] [--timeout MS] top [--json] [--wide] [--sort KEY]\n"
	"               [--once | --iterations N]\n"
	"The socket defaults to $FEEDD_SOCKET, or " FEED_DEFAULT_SOCKET ".\n"
	"status lists every stream and group over a dataset you may read; --json\n"
	"prints the same as one JSON object, for scripts. Rates show the last 10 s\n"
	"beside the average since each stream opened.\n"
	"reload makes feedd load its config file again (root or the socket's group)\n"
	"and prints what changed, or every error (exit 1: the old config stays).\n"
	"top refreshes every second: one line per stream (each rank of a job) or\n"
	"group (its members below it), with its age, epoch progress and the time\n"
	"to the epoch's end, memory, and its client's GPU utilisation through NVML\n"
	"(libnvidia-ml.so.1, or $FEED_NVML_LIBRARY) where loaded; then the totals.\n"
	"Names are fitted to the terminal (cut ones end in '+'); --wide never cuts\n"
	"them. --sort job|user|dataset|rank|pid|age|samples|wait|gpu|mem|worker\n"
	"(default job: a job's ranks in order); --json prints one object per refresh.\n";

static int fail(struct feed_conn *conn, int code, const char *what)
{
	const char *msg = feed_errmsg(conn);
	fprintf(stderr, "feedctl: %s: %s\n", what, *msg ? msg : feed_strerror(code));
	return 1;
}

static void print_streams(const struct feed_status *st)
{
	if (!st->count) {
		printf("streams:     none\n");
		return;
	}
	/* rates: the last 10 s, then (since it opened) */
	printf("%-6s %-9s %6s %7s %-12s %-12s %4s %19s %17s %7s %13s %9s  %s\n", "KIND",
	       "CONN/ID", "UID", "PID", "JOB", "DATASET", "MEMB", "SAMPLES/S 10s (all)",
	       "MB/S 10s (all)", "CREDITS", "WAIT% 10s (all)", "WORKER_S", "PIPELINE");
	for (size_t i = 0; i < st->count; i++) {
		const struct feed_stream_status *s = &st->streams[i];
		char id[32], credits[24];
		snprintf(id, sizeof(id), "%llu/%u", (unsigned long long)s->conn, s->stream);
		snprintf(credits, sizeof(credits), "%u/%u", s->credits_in_use, s->credits);
		printf("%-6s %-9s %6u %7d %-12.12s %-12s %4u %9.1f (%8.1f) %7.2f (%7.2f) %7s "
		       "%5.1f (%5.1f) %9.3f  %s%s%s\n",
		       s->kind, id, s->uid, s->pid, s->job[0] ? s->job : "-", s->dataset, s->members,
		       s->samples_per_s_10s, s->samples_per_s, s->mb_per_s_10s, s->mb_per_s, credits,
		       100.0 * s->reader_wait_share_10s, 100.0 * s->reader_wait_share,
		       s->worker_ns / 1e9,
		       s->pipeline[0] ? s->pipeline : "identity", s->group[0] ? "  group " : "",
		       s->group);
		if (!strcmp(s->device, "ipc"))
			printf("%-16s device slots (CUDA IPC): %.1f MB of GPU memory\n", "",
			       s->device_bytes / 1e6);
		else if (s->device[0])
			printf("%-16s host slots only: %s\n", "", s->device);
		if (s->jpeg_decode[0])
			printf("%-16s JPEG decode: %s\n", "", s->jpeg_decode);
		if (s->replaced)
			printf("%-16s %llu bad samples replaced (on_error skip)\n", "",
			       (unsigned long long)s->replaced);
		if (s->detached_batches)
			printf("%-16s %llu batches moved to private memory (views held past "
			       "their slot; the client's count)\n", "",
			       (unsigned long long)s->detached_batches);
	}
}

static int cmd_status(struct feed_conn *conn)
{
	struct feed_status *full;
	int r = feed_status(conn, &full);

	if (r < 0)
		return fail(conn, r, "status");
	const struct feed_stats *st = &full->stats;
	const struct feed_cache_status *c = &full->cache;
	printf("feedd %s, protocol %u, up %llu.%03llu s\n", st->server_version,
	       st->protocol_version, (unsigned long long)(st->uptime_ms / 1000),
	       (unsigned long long)(st->uptime_ms % 1000));
	printf("connections: %u (%u yours)\n", st->connections, st->user_connections);
	printf("workers:     %u\n", st->workers);
	printf("datasets:    %u readable by you\n", st->datasets);
	for (size_t i = 0; i < full->npending; i++)
		printf("%s%s%s", i ? ", " : "pending:     ", full->pending[i],
		       i + 1 == full->npending ? " (remote, still opening)\n" : "");
	printf("requests:    %llu answered, %llu refused\n", (unsigned long long)st->requests,
	       (unsigned long long)st->rejected);
	printf("cache:       %.1f of %.1f MB in %llu blocks; %llu hits, %llu misses, "
	       "%llu evictions\n", c->bytes / 1e6, c->budget / 1e6, (unsigned long long)c->entries,
	       (unsigned long long)c->hits, (unsigned long long)c->misses,
	       (unsigned long long)c->evictions);
	for (size_t i = 0; i < full->ngpus; i++) {
		const struct feed_gpu_status *g = &full->gpus[i];
		printf("gpu %u:       %s: %s\n", g->ordinal, g->name,
		       !g->allowed ? "not in gpus:" : g->failed ? "context failed" :
		       g->context ? "context made" : "no context (no stream asked for one)");
		if (g->context)
			printf("             device slots %.1f MB\n", g->slot_bytes / 1e6);
	}
	if (full->jpeg_decode[0])
		printf("jpeg decode: %s\n", full->jpeg_decode);
	print_streams(full);
	feed_status_free(full);
	return 0;
}

/* "key": v as JSON (json_out.h escapes v), then sep. */
static void json_str(const char *key, const char *v, const char *sep)
{
	jout_member(stdout, key, v, sep);
}

static void json_u64(const char *key, unsigned long long v, const char *sep)
{
	printf("\"%s\": %llu%s", key, v, sep);
}

static void json_stream(const struct feed_stream_status *s, const char *sep)
{
	printf("    {");
	json_str("kind", s->kind, ", ");
	json_u64("uid", s->uid, ", ");
	printf("\"pid\": %d, ", s->pid);
	json_u64("conn", s->conn, ", ");
	json_u64("stream", s->stream, ", ");
	json_str("dataset", s->dataset, ", ");
	json_str("group", s->group, ", ");
	json_str("job", s->job, ", ");
	json_u64("members", s->members, ", ");
	printf("\"member_pids\": [");
	for (uint32_t i = 0; i < s->nmember_pids; i++)
		printf("%s%d", i ? ", " : "", s->member_pids[i]);
	printf("], \"member_reader_wait_ns\": [");
	for (uint32_t i = 0; i < s->nmember_pids; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)s->member_reader_wait_ns[i]);
	printf("], ");
	json_u64("batch", s->batch, ", ");
	json_u64("credits", s->credits, ", ");
	json_u64("credits_in_use", s->credits_in_use, ", ");
	json_u64("age_ms", s->age_ms, ", ");
	json_u64("batches", s->batches, ", ");
	json_u64("samples", s->samples, ", ");
	json_u64("bytes", s->bytes, ", ");
	printf("\"samples_per_s\": %.3f, \"mb_per_s\": %.6f, ", s->samples_per_s, s->mb_per_s);
	json_u64("worker_ns", s->worker_ns, ", ");
	json_u64("jobs", s->jobs, ", ");
	json_u64("reader_wait_ns", s->reader_wait_ns, ", ");
	json_u64("shm_bytes", s->shm_bytes, ", ");
	json_str("device", s->device, ", ");
	json_str("jpeg_decode", s->jpeg_decode, ", ");
	json_u64("device_bytes", s->device_bytes, ", ");
	json_u64("replaced", s->replaced, ", ");
	json_u64("detached_batches", s->detached_batches, ", ");
	printf("\"reader_wait_share\": %.6f, ", s->reader_wait_share);
	printf("\"samples_per_s_10s\": %.3f, \"mb_per_s_10s\": %.6f, "
	       "\"reader_wait_share_10s\": %.6f, ", s->samples_per_s_10s, s->mb_per_s_10s,
	       s->reader_wait_share_10s);
	json_str("pipeline", s->pipeline, "");
	printf("}%s\n", sep);
}

static int cmd_status_json(struct feed_conn *conn)
{
	struct feed_status *full;
	int r = feed_status(conn, &full);

	if (r < 0)
		return fail(conn, r, "status");
	const struct feed_stats *st = &full->stats;
	const struct feed_cache_status *c = &full->cache;
	printf("{\n  ");
	json_str("server_version", st->server_version, ", ");
	json_u64("protocol_version", st->protocol_version, ", ");
	json_u64("uptime_ms", st->uptime_ms, ", ");
	json_u64("connections", st->connections, ", ");
	json_u64("user_connections", st->user_connections, ",\n  ");
	json_u64("workers", st->workers, ", ");
	json_u64("datasets", st->datasets, ", ");
	json_u64("requests", st->requests, ", ");
	json_u64("rejected", st->rejected, ",\n  ");
	printf("\"cache\": {");
	json_u64("hits", c->hits, ", ");
	json_u64("misses", c->misses, ", ");
	json_u64("evictions", c->evictions, ", ");
	json_u64("bytes", c->bytes, ", ");
	json_u64("entries", c->entries, ", ");
	json_u64("budget", c->budget, "");
	printf("},\n  \"gpus\": [");
	for (size_t i = 0; i < full->ngpus; i++) {
		const struct feed_gpu_status *g = &full->gpus[i];
		printf("%s{", i ? ", " : "");
		json_u64("ordinal", g->ordinal, ", ");
		json_str("name", g->name, ", ");
		printf("\"allowed\": %s, \"context\": %s, \"failed\": %s, ",
		       g->allowed ? "true" : "false", g->context ? "true" : "false",
		       g->failed ? "true" : "false");
		json_u64("slot_bytes", g->slot_bytes, "}");
	}
	printf("],\n  \"pending\": [");
	for (size_t i = 0; i < full->npending; i++) {
		printf("%s", i ? ", " : "");
		jout_string(stdout, full->pending[i]);
	}
	printf("],\n  \"jpeg_decode\": ");
	jout_string(stdout, full->jpeg_decode);
	printf(",\n  \"streams\": [\n");
	for (size_t i = 0; i < full->count; i++)
		json_stream(&full->streams[i], i + 1 < full->count ? "," : "");
	printf("  ]\n}\n");
	feed_status_free(full);
	return 0;
}

static int cmd_top(struct feed_conn *conn, const struct top_opts *o)
{
	int r = feedctl_top(conn, o);
	return r < 0 ? fail(conn, r, "top") : 0;
}

static void print_field(const struct feed_field *f)
{
	printf(" %s:%s", f->name, f->dtype_name);
	if (f->variable || f->rank) {
		printf("[%s", f->variable ? "*" : "");
		for (uint32_t i = 0; i < f->rank; i++)
			printf("%s%u", i || f->variable ? "," : "", f->shape[i]);
		printf("]");
	}
}

static int cmd_datasets(struct feed_conn *conn, const char *name)
{
	struct feed_dataset_list *list;
	int r = name ? feed_dataset_info(conn, name, &list) : feed_list_datasets(conn, &list);

	if (r < 0)
		return fail(conn, r, "datasets");
	if (!list->count)
		printf("no datasets readable by you\n");
	else
		printf("%-20s %12s  %-16s  %s\n", "NAME", "SAMPLES", "VERSION", "FIELDS");
	for (size_t i = 0; i < list->count; i++) {
		const struct feed_dataset *d = &list->datasets[i];
		printf("%-20s %12llu  %-16s ", d->name, (unsigned long long)d->num_samples,
		       d->version);
		for (uint32_t k = 0; k < d->num_fields; k++)
			print_field(&d->fields[k]);
		printf("\n");
		if (d->num_classes) {
			/* label i is classes[i]: the first few, and how many */
			printf("%-20s %u classes:", "", d->num_classes);
			for (uint32_t k = 0; k < d->num_classes && k < 8; k++)
				printf(" %u=%s", k, d->classes[k]);
			printf("%s\n", d->num_classes > 8 ? " ..." : "");
		}
	}
	feed_dataset_list_free(list);
	return 0;
}

static void print_names(const char *what, const char *const *names, size_t n)
{
	printf("%-10s", what);
	for (size_t i = 0; i < n; i++)
		printf("%s%s", i ? ", " : " ", names[i]);
	printf("%s\n", n ? "" : " none");
}

static void json_list(const char *key, const char *const *v, size_t n, const char *sep)
{
	printf("\"%s\": [", key);
	for (size_t i = 0; i < n; i++) {
		printf("%s", i ? ", " : "");
		jout_string(stdout, v[i]);
	}
	printf("]%s", sep);
}

static void print_reload_json(const struct feed_reload_result *r)
{
	printf("{\n  \"applied\": %s, ", r->applied ? "true" : "false");
	json_str("file", r->file, ",\n  ");
	json_list("added", r->added, r->nadded, ", ");
	json_list("removed", r->removed, r->nremoved, ", ");
	json_list("repointed", r->repointed, r->nrepointed, ",\n  ");
	json_list("errors", r->errors, r->nerrors, ",\n  ");
	json_list("warnings", r->warnings, r->nwarnings, "\n}\n");
}

/* Exit 0 when the new config is in force; 1 (errors on stderr) when not. */
static int cmd_reload(struct feed_conn *conn, bool json)
{
	struct feed_reload_result *r = NULL;
	int rc = feed_reload(conn, &r);

	if (rc < 0 && !r && !strncmp(feed_errmsg(conn), "reload: ", 8)) {
		fprintf(stderr, "feedctl: %s\n", feed_errmsg(conn));  /* names itself */
		return 1;
	}
	if (rc < 0 && !r)
		return fail(conn, rc, "reload");
	if (json) {
		print_reload_json(r);
	} else if (r->applied) {
		printf("reloaded %s\n", r->file[0] ? r->file : "(no config file)");
		print_names("added:", r->added, r->nadded);
		print_names("removed:", r->removed, r->nremoved);
		print_names("repointed:", r->repointed, r->nrepointed);
	}
	if (!r->applied) {
		fprintf(stderr, "feedctl: reload of %s refused (%zu errors); the config in force "
			"stays\n", r->file[0] ? r->file : "the config", r->nerrors);
		for (size_t i = 0; i < r->nerrors; i++)
			fprintf(stderr, "feedctl: %s\n", r->errors[i]);
	}
	for (size_t i = 0; i < r->nwarnings; i++)
		fprintf(stderr, "feedctl: warning: %s\n", r->warnings[i]);
	rc = r->applied ? 0 : 1;
	feed_reload_result_free(r);
	return rc;
}

/* What the command line asked for. */
struct ctl_args {
	const char *path;         /* --socket, or NULL: the default */
	int timeout;              /* --timeout, ms */
	bool json;                /* --json */
	bool top_flags;           /* a flag only top takes was given */
	struct top_opts top;      /* --once/--iterations, --wide, --sort */
};

/* One option into *a: 0, or the exit status to leave with (0 after
 * --help, 2 on a bad value, named on stderr). */
static int parse_opt(int opt, const char *arg, struct ctl_args *a, bool *ret_exit)
{
	*ret_exit = true;
	switch (opt) {
	case 's': a->path = arg; break;
	case 'j': a->json = true; break;
	case 'o': a->top.iterations = 1; break;
	case 'w': a->top.wide = a->top_flags = true; break;
	case 't':
		if ((a->timeout = atoi(arg)) <= 0) {
			fprintf(stderr, "feedctl: --timeout %s: not a positive number\n", arg);
			return 2;
		}
		break;
	case 'n':
		if ((a->top.iterations = atol(arg)) <= 0) {
			fprintf(stderr, "feedctl: --iterations %s: not a positive number\n", arg);
			return 2;
		}
		break;
	case 'S':
		if (top_sort_parse(arg, &a->top.sort) < 0) {
			fprintf(stderr, "feedctl: --sort %s: not a key (job, user, dataset, "
				"rank, pid, age, samples, wait, gpu, mem, worker)\n", arg);
			return 2;
		}
		a->top_flags = true;
		break;
	case 'h':
		fputs(usage, stdout);
		return 0;
	default:
		fputs(usage, stderr);
		return 2;
	}
	*ret_exit = false;
	return 0;
}

/* Parses the options into *a. -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct ctl_args *a)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"once", no_argument, NULL, 'o'},
		{"iterations", required_argument, NULL, 'n'},
		{"wide", no_argument, NULL, 'w'},
		{"sort", required_argument, NULL, 'S'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int opt;

	*a = (struct ctl_args){.timeout = FEED_DEFAULT_TIMEOUT_MS,
			       .top = {.sort = TOP_SORT_JOB, .iterations = 0 /* until killed */}};
	while ((opt = getopt_long(argc, argv, "s:t:jh", opts, NULL)) != -1) {
		bool leave;
		int rc = parse_opt(opt, optarg, a, &leave);
		if (leave)
			return rc;
	}
	return -1;
}

/* Whether the words after the options name a command feedctl has, with
 * flags that command takes. */
static bool command_ok(const char *cmd, int nargs, const struct ctl_args *a)
{
	bool top = cmd && !strcmp(cmd, "top") && nargs == 1;

	if (!cmd || ((a->top.iterations || a->top_flags) && !top))
		return false;
	return top || (!strcmp(cmd, "status") && nargs == 1) ||
	       (!strcmp(cmd, "reload") && nargs == 1) ||
	       (!strcmp(cmd, "datasets") && nargs <= 2 && !a->json);
}

int main(int argc, char **argv)
{
	struct ctl_args a;
	int rc = parse_args(argc, argv, &a);

	if (rc >= 0)
		return rc;
	const char *cmd = optind < argc ? argv[optind] : NULL;
	int nargs = argc - optind;
	if (!command_ok(cmd, nargs, &a)) {
		fputs(usage, stderr);
		return 2;
	}

	struct feed_conn *conn;
	if (feed_conn_new(&conn) < 0) {
		fprintf(stderr, "feedctl: out of memory\n");
		return 1;
	}
	feed_conn_set_timeout(conn, a.timeout);
	int r = feed_conn_open(conn, a.path);
	a.top.json = a.json;
	a.top.clear = isatty(1) && !a.json;
	rc = r < 0 ? fail(conn, r, "connect")
	     : !strcmp(cmd, "top") ? cmd_top(conn, &a.top)
	     : !strcmp(cmd, "status") ? (a.json ? cmd_status_json(conn) : cmd_status(conn))
	     : !strcmp(cmd, "reload") ? cmd_reload(conn, a.json)
	     : cmd_datasets(conn, nargs == 2 ? argv[optind + 1] : NULL);
	feed_disconnect(conn);
	return rc;
}
