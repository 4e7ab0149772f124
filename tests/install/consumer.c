/*
 * consumer.c: the smallest program a user builds against an installed
 * libfeedclient (tests/install/check_install.sh builds it with pkg-config
 * and with CMake's find_package against a staged prefix, nothing else).
 *
 *   consumer SOCKET DATASET BATCH
 *
 * Reads the first batch of DATASET in sequential order and prints, one per
 * line: the path of the libfeedclient it runs on, the library's version,
 * the batch size, and the batch's labels (field "label") separated by
 * spaces, for the test to compare with the source file. Exit 0 on success,
 * 1 with a message naming the failing call otherwise.
 */
#define _GNU_SOURCE  /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <feed/stream.h>

static int fail(struct feed_conn *conn, const char *what, int r)
{
	const char *msg = conn ? feed_errmsg(conn) : "";
	fprintf(stderr, "consumer: %s: %s\n", what, msg && *msg ? msg : feed_strerror(r));
	return 1;
}

static int print_batch(struct feed_batch *b)
{
	struct feed_view lab;
	int i = feed_batch_field_index(b, "label");

	if (i < 0 || feed_batch_field(b, (uint32_t)i, &lab) < 0) {
		fprintf(stderr, "consumer: the batch has no field 'label'\n");
		return 1;
	}
	printf("%u\n", feed_batch_size(b));
	const uint8_t *l = lab.data;
	for (uint32_t k = 0; k < feed_batch_size(b); k++)
		printf("%s%u", k ? " " : "", l[k]);
	printf("\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct feed_conn *conn = NULL;
	struct feed_stream *st;
	struct feed_batch *b;
	Dl_info where;
	int r;

	if (argc != 4) {
		fprintf(stderr, "usage: consumer SOCKET DATASET BATCH\n");
		return 2;
	}
	if (!dladdr((void *)feed_version, &where) || !where.dli_fname)
		return fail(NULL, "dladdr(feed_version)", -ENOENT);
	printf("%s\n%s\n", where.dli_fname, feed_version());
	if ((r = feed_connect(argv[1], &conn)) < 0)
		return fail(NULL, argv[1], r);
	struct feed_stream_opts o = {
		.dataset = argv[2], .batch = (uint32_t)atoi(argv[3]), .credits = 2, .epochs = 1,
		.order = FEED_ORDER_SEQUENTIAL,
	};
	if ((r = feed_stream_open(conn, &o, &st)) < 0)
		return fail(conn, "feed_stream_open", r);
	if ((r = feed_next(st, 30000, &b)) != 0)
		return fail(conn, "feed_next", r < 0 ? r : -EPROTO);
	int rc = print_batch(b);
	feed_release(b);
	feed_stream_close(st);
	feed_disconnect(conn);
	return rc;
}
