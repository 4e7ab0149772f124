/*
 * feedctl: asks a running feedd how it is and what it serves, through
 * libfeedclient only.
 *
 *   feedctl [--socket PATH] [--timeout MS] status
 *   feedctl [--socket PATH] [--timeout MS] datasets [NAME]
 *
 * Single-threaded command. Exit 0 on success, 1 when the daemon cannot be
 * reached or refuses, 2 on a usage error; every failure is one line on
 * stderr with the daemon's own message when it gave one.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/client.h"

static const char usage[] =
	"usage: feedctl [--socket PATH] [--timeout MS] status\n"
	"       feedctl [--socket PATH] [--timeout MS] datasets [NAME]\n"
	"The socket defaults to $FEEDD_SOCKET, or " FEED_DEFAULT_SOCKET ".\n";

static int fail(struct feed_conn *conn, int code, const char *what)
{
	const char *msg = feed_errmsg(conn);
	fprintf(stderr, "feedctl: %s: %s\n", what, *msg ? msg : feed_strerror(code));
	return 1;
}

static int cmd_status(struct feed_conn *conn)
{
	struct feed_stats st;
	int r = feed_stats(conn, &st);

	if (r < 0)
		return fail(conn, r, "status");
	printf("feedd %s, protocol %u, up %llu.%03llu s\n", st.server_version,
	       st.protocol_version, (unsigned long long)(st.uptime_ms / 1000),
	       (unsigned long long)(st.uptime_ms % 1000));
	printf("connections: %u (%u yours)\n", st.connections, st.user_connections);
	printf("workers:     %u\n", st.workers);
	printf("datasets:    %u readable by you\n", st.datasets);
	printf("requests:    %llu answered, %llu refused\n", (unsigned long long)st.requests,
	       (unsigned long long)st.rejected);
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
	}
	feed_dataset_list_free(list);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *path = NULL;
	int timeout = FEED_DEFAULT_TIMEOUT_MS, opt;

	while ((opt = getopt_long(argc, argv, "s:t:h", opts, NULL)) != -1) {
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
		      (!strcmp(cmd, "datasets") && nargs <= 2))) {
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
		 : !strcmp(cmd, "status") ? cmd_status(conn)
		 : cmd_datasets(conn, nargs == 2 ? argv[optind + 1] : NULL);
	feed_disconnect(conn);
	return rc;
}
