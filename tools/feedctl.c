/*
 * feedctl: asks a running feedd how it is and what it serves, through
 * libfeedclient only.
 *
 *   feedctl [--socket PATH] [--timeout MS] status [--json]
 *   feedctl [--socket PATH] [--timeout MS] datasets [NAME]
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

#include "feed/client.h"

static const char usage[] =
	"usage: feedctl [--socket PATH] [--timeout MS] status [--json]\n"
	"       feedctl [--socket PATH] [--timeout MS] datasets [NAME]\n"
	"The socket defaults to $FEEDD_SOCKET, or " FEED_DEFAULT_SOCKET ".\n"
	"status lists every stream and group over a dataset you may read; --json\n"
	"prints the same as one JSON object, for scripts.\n";

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
	printf("%-6s %-9s %6s %7s %-12s %4s %10s %8s %7s %6s %9s  %s\n", "KIND", "CONN/ID",
	       "UID", "PID", "DATASET", "MEMB", "SAMPLES/S", "MB/S", "CREDITS", "WAIT%",
	       "WORKER_S", "PIPELINE");
	for (size_t i = 0; i < st->count; i++) {
		const struct feed_stream_status *s = &st->streams[i];
		char id[32], credits[24];
		snprintf(id, sizeof(id), "%llu/%u", (unsigned long long)s->conn, s->stream);
		snprintf(credits, sizeof(credits), "%u/%u", s->credits_in_use, s->credits);
		printf("%-6s %-9s %6u %7d %-12s %4u %10.1f %8.2f %7s %5.1f%% %9.3f  %s%s%s\n",
		       s->kind, id, s->uid, s->pid, s->dataset, s->members, s->samples_per_s,
		       s->mb_per_s, credits, 100.0 * s->reader_wait_share, s->worker_ns / 1e9,
		       s->pipeline[0] ? s->pipeline : "identity", s->group[0] ? "  group " : "",
		       s->group);
		if (!strcmp(s->device, "ipc"))
			printf("%-16s device slots (CUDA IPC): %.1f MB of GPU memory\n", "",
			       s->device_bytes / 1e6);
		else if (s->device[0])
			printf("%-16s host slots only: %s\n", "", s->device);
		if (s->replaced)
			printf("%-16s %llu bad samples replaced (on_error skip)\n", "",
			       (unsigned long long)s->replaced);
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
	printf("requests:    %llu answered, %llu refused\n", (unsigned long long)st->requests,
	       (unsigned long long)st->rejected);
	printf("cache:       %.1f of %.1f MB in %llu blocks; %llu hits, %llu misses, "
	       "%llu evictions\n", c->bytes / 1e6, c->budget / 1e6, (unsigned long long)c->entries,
	       (unsigned long long)c->hits, (unsigned long long)c->misses,
	       (unsigned long long)c->evictions);
	print_streams(full);
	feed_status_free(full);
	return 0;
}

/* A JSON string: our text is printable ASCII, so only " and \ need care. */
static void json_str(const char *key, const char *v, const char *sep)
{
	printf("\"%s\": \"", key);
	for (; *v; v++)
		printf(*v == '"' || *v == '\\' ? "\\%c" : "%c", *v);
	printf("\"%s", sep);
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
	json_u64("device_bytes", s->device_bytes, ", ");
	json_u64("replaced", s->replaced, ", ");
	printf("\"reader_wait_share\": %.6f, ", s->reader_wait_share);
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
	printf("},\n  \"streams\": [\n");
	for (size_t i = 0; i < full->count; i++)
		json_stream(&full->streams[i], i + 1 < full->count ? "," : "");
	printf("  ]\n}\n");
	feed_status_free(full);
	return 0;
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *path = NULL;
	int timeout = FEED_DEFAULT_TIMEOUT_MS, opt;
	bool json = false;

	while ((opt = getopt_long(argc, argv, "s:t:jh", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			path = optarg;
			break;
		case 't':
			timeout = atoi(optarg);
			if (timeout <= 0) {
				fprintf(stderr, "feedctl: --timeout %s: not a positive number\n", optarg);
				return 2;
			}
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	const char *cmd = optind < argc ? argv[optind] : NULL;
	int nargs = argc - optind;
	if (!cmd || !((!strcmp(cmd, "status") && nargs == 1) ||
		      (!strcmp(cmd, "datasets") && nargs <= 2 && !json))) {
		fputs(usage, stderr);
		return 2;
	}

	struct feed_conn *conn;
	if (feed_conn_new(&conn) < 0) {
		fprintf(stderr, "feedctl: out of memory\n");
		return 1;
	}
	feed_conn_set_timeout(conn, timeout);
	int r = feed_conn_open(conn, path);
	int rc = r < 0 ? fail(conn, r, "connect")
		 : !strcmp(cmd, "status") ? (json ? cmd_status_json(conn) : cmd_status(conn))
		 : cmd_datasets(conn, nargs == 2 ? argv[optind + 1] : NULL);
	feed_disconnect(conn);
	return rc;
}
