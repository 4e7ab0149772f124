/*
 * check_groups.c: groups through a real feedd (DESIGN.md "Sharing between
 * jobs"): members of one group receive byte-identical batches, each built
 * once; a member killed and one stopped (SIGSTOP) mid-epoch do not stop
 * the others, and the stopped one is told it was detached when it
 * continues, its held batch intact; a mismatch is refused naming the
 * parameter; a group belongs to its user (the same name from two users is
 * two groups) unless the dataset's shared_groups lists it; a late joiner
 * starts where it is told and its partial first
 * epoch is exactly the rest of that epoch; a member writing into its batch
 * changes no other member's bytes, nor its own later batches; across
 * SIGKILL and SIGTERM restarts each member resumes from its own position
 * and sees every batch exactly once, in order; under load, members that
 * keep releasing are never detached; a reload that shortens the group
 * timeout reaches a running group at once.
 *
 * The dataset is the harness's format with GR_SAMPLES records (image
 * u8[4,4] all i & 0xff, label i64 i), so every sample's bytes are known.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/stream.h"
#include "feedd_harness.h"

#define GR_SAMPLES 1000
#define GR_BATCH 10
#define GR_BATCHES (GR_SAMPLES / GR_BATCH)  /* per epoch */

static char gr_dir[160];

/* feedd serving "g1k" (GR_SAMPLES records), with extra args. */
static void start(const char *const *extra)
{
	static char spec[200], tiny[200];
	/* tiny first: h_assert_healthy() looks for it */
	const char *args[16] = {"--dataset", tiny, "--dataset", spec, "--workers", "2"};
	size_t n = 6;

	snprintf(gr_dir, sizeof(gr_dir), "%s/g1k", h.dir);
	h_make_dataset_blocks(gr_dir, GR_SAMPLES, 50);
	snprintf(spec, sizeof(spec), "g1k=%s", gr_dir);
	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	while (extra && *extra && n < 15)
		args[n++] = *extra++;
	args[n] = NULL;
	h_start(args);
}

static struct feed_stream_opts gr_opts(const char *group, uint64_t epochs)
{
	return (struct feed_stream_opts){.dataset = "g1k", .batch = GR_BATCH, .credits = 2,
					 .epochs = epochs, .seed = 7, .order = FEED_ORDER_FULL,
					 .group = group, .group_depth = 4};
}

/* True when b holds the dataset's bytes for its samples (no assertion:
 * also used in forked children). */
static bool gr_bytes_ok(struct feed_batch *b)
{
	struct feed_view img, lab;
	const uint64_t *idx = feed_batch_samples(b);

	if (feed_batch_field(b, 0, &img) || feed_batch_field(b, 1, &lab) ||
	    img.bytes != 16ull * feed_batch_size(b))
		return false;
	for (uint32_t i = 0; i < feed_batch_size(b); i++) {
		const uint8_t *px = (const uint8_t *)img.data + 16 * i;
		int64_t label;
		if (idx[i] >= GR_SAMPLES)
			return false;
		for (int k = 0; k < 16; k++)
			if (px[k] != (uint8_t)idx[i])
				return false;
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		if (label != (int64_t)idx[i])
			return false;
	}
	return true;
}

/* Takes the next batch, stepping over END_OF_EPOCH; NULL at the end. */
static struct feed_batch *gr_next(struct feed_conn *c, struct feed_stream *st)
{
	struct feed_batch *b;
	int r;

	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == FEED_END_OF_EPOCH)
		;
	if (r == FEED_END_OF_STREAM)
		return NULL;
	ck_assert_msg(r == 0, "feed_next: %s: %s", feed_strerror(r), feed_errmsg(c));
	return b;
}

/* A batch's identity and content, to compare members. */
struct gr_seen {
	uint64_t epoch, index;
	uint32_t n;
	uint64_t samples[GR_BATCH];
	uint8_t img[16 * GR_BATCH];
};

static void gr_record(struct feed_batch *b, struct gr_seen *s)
{
	struct feed_view img;

	ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
	s->epoch = feed_batch_epoch(b);
	s->index = feed_batch_index(b);
	s->n = feed_batch_size(b);
	ck_assert_uint_le(s->n, GR_BATCH);
	memcpy(s->samples, feed_batch_samples(b), 8ull * s->n);
	memcpy(s->img, img.data, img.bytes);
}

/* The log's "batches built once, N delivered" figures of group name. */
static void gr_closed_counts(const char *name, unsigned long long *built,
			     unsigned long long *delivered)
{
	char needle[96];

	snprintf(needle, sizeof(needle), "group '%s' on 'g1k' closed: ", name);
	ck_assert_msg(h_log_has(needle), "no '%s' in the log:\n%s", needle, h_file_text(h.log));
	const char *p = strstr(h_file_text(h.log), needle);
	ck_assert_int_eq(sscanf(p + strlen(needle), "%llu batches built once, %llu delivered",
				built, delivered), 2);
}

/* ------------------------------------------------------------------ */
/* Test 1: three members, identical batches, built once                */

START_TEST(test_groups_members_identical_built_once)
{
	enum { M = 3, EPOCHS = 2, TOTAL = EPOCHS * GR_BATCHES };
	static struct gr_seen seen[M][TOTAL];
	struct feed_conn *c[M];
	struct feed_stream *st[M];
	unsigned n[M] = {0};
	bool open[M];

	start(NULL);
	for (int m = 0; m < M; m++) {
		struct feed_stream_opts o = gr_opts("g", EPOCHS);
		c[m] = h_conn_new();
		st[m] = h_stream_open(c[m], &o);
		open[m] = true;
		ck_assert_str_eq(feed_stream_info(st[m])->group, "g");
		ck_assert_uint_eq(feed_stream_info(st[m])->group_members, (unsigned)m + 1);
	}
	/* round robin: nobody runs more than the depth ahead */
	for (int left = M; left > 0;)
		for (int m = 0; m < M; m++) {
			if (!open[m])
				continue;
			struct feed_batch *b = gr_next(c[m], st[m]);
			if (!b) {
				open[m] = false;
				left--;
				continue;
			}
			ck_assert_msg(gr_bytes_ok(b), "member %d: wrong bytes", m);
			ck_assert_uint_lt(n[m], TOTAL);
			gr_record(b, &seen[m][n[m]++]);
			ck_assert_int_eq(feed_release(b), 0);
		}
	/* every member got a consecutive run ending at the last batch, and
	 * where runs overlap the batches are the same, byte for byte */
	for (int m = 0; m < M; m++) {
		uint64_t start_e, start_b;
		ck_assert_int_eq(feed_stream_group_start(st[m], &start_e, &start_b), 0);
		uint64_t first = start_e * GR_BATCHES + start_b;
		ck_assert_uint_eq(first + n[m], TOTAL);
		ck_assert_uint_ge(n[m], TOTAL - 8);  /* joined within the first few */
		for (unsigned i = 0; i < n[m]; i++) {
			const struct gr_seen *s = &seen[m][i], *r = &seen[0][first + i - 0];
			ck_assert_uint_eq(s->epoch * GR_BATCHES + s->index, first + i);
			ck_assert_uint_eq(r->epoch * GR_BATCHES + r->index, first + i);
			ck_assert_uint_eq(s->n, r->n);
			ck_assert(!memcmp(s->samples, r->samples, 8ull * s->n));
			ck_assert(!memcmp(s->img, r->img, 16ull * s->n));
		}
	}
	ck_assert_uint_eq(n[0], TOTAL);
	for (int m = 0; m < M; m++) {
		ck_assert_int_eq(feed_stream_close(st[m]), 0);
		feed_disconnect(c[m]);
	}
	unsigned long long built, delivered;
	gr_closed_counts("g", &built, &delivered);
	ck_assert_uint_eq(built, TOTAL);  /* once, not once per member */
	ck_assert_uint_eq(delivered, n[0] + n[1] + n[2]);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 2: a member killed and one stopped mid-epoch                   */

/* A child member: reads `before` batches, tells the parent (one byte on
 * fd), then takes one more and holds it; `stop` stops itself there. When
 * it continues it expects FEED_EDETACHED naming the detach, then checks
 * that its held batch is intact. Exit 0 when all was as expected. */
static void gr_child(int fd, int before, bool stop)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_batch *b;
	struct feed_stream_opts o = gr_opts("g", 2);
	int r;

	if (feed_connect(h.sock, &c) || feed_stream_open(c, &o, &st))
		_exit(10);
	for (int i = 0; i < before; i++) {
		while ((r = feed_next(st, H_DEADLINE_MS, &b)) == FEED_END_OF_EPOCH)
			;
		if (r || !gr_bytes_ok(b) || feed_release(b))
			_exit(11);
	}
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == FEED_END_OF_EPOCH)
		;
	if (r)
		_exit(12);
	if (write(fd, "x", 1) != 1)
		_exit(13);
	if (!stop) {
		pause();  /* until killed */
		_exit(14);
	}
	raise(SIGSTOP);
	/* continued: the daemon detached us meanwhile */
	struct feed_batch *more;
	r = feed_next(st, H_DEADLINE_MS, &more);
	if (r != FEED_EDETACHED)
		_exit(15);
	if (!strstr(feed_errmsg(c), "group 'g': detached after releasing nothing for 300 ms"))
		_exit(16);
	if (strcmp(feed_strerror(r), "Detached from its group (released nothing within the "
				     "group timeout)"))
		_exit(17);
	if (!gr_bytes_ok(b) || feed_release(b))  /* what it held was not overwritten */
		_exit(18);
	feed_stream_close(st);
	feed_disconnect(c);
	_exit(0);
}

/* Forks a child member; *ret_fd is where it says it holds its batch. */
static pid_t gr_fork_child(int before, bool stop, int *ret_fd)
{
	int p[2];

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		gr_child(p[1], before, stop);
	}
	close(p[1]);
	*ret_fd = p[0];
	return pid;
}

START_TEST(test_groups_killed_and_stopped_members)
{
	int status;

	start((const char *[]){"--group-timeout-ms", "300", NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = gr_opts("g", 2);
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_batch *b;
	unsigned n = 0;

	/* the parent reads a few batches, the children join mid-epoch 0 */
	for (int i = 0; i < 10; i++) {
		ck_assert_ptr_nonnull(b = gr_next(c, st));
		ck_assert(gr_bytes_ok(b));
		ck_assert_int_eq(feed_release(b), 0);
		n++;
	}
	int fk, fs;
	pid_t killed = gr_fork_child(3, false, &fk);
	pid_t stopped = gr_fork_child(5, true, &fs);
	/* the parent reads on (the group moves only as fast as its slowest
	 * member) until both children hold their batch, mid-epoch 0 */
	struct pollfd pf[2] = {{.fd = fk, .events = POLLIN}, {.fd = fs, .events = POLLIN}};
	int holding = 0;
	while (holding < 2) {
		char k;
		int64_t t0 = h_now_ms();
		int r = poll(pf, 2, 10);  /* a batch or a child's word, whichever comes */
		ck_assert_int_ge(r, 0);
		for (int i = 0; i < 2; i++)
			if (pf[i].revents) {
				ck_assert_msg(read(pf[i].fd, &k, 1) == 1, "child %d failed early", i);
				pf[i].fd = -1;
				holding++;
			}
		ck_assert_int_lt(h_now_ms() - t0, H_DEADLINE_MS);
		if (holding < 2 && feed_next(st, 0, &b) == 0) {
			ck_assert(gr_bytes_ok(b));
			ck_assert_int_eq(feed_release(b), 0);
			n++;
		}
	}
	close(fk);
	close(fs);
	ck_assert_uint_lt(n, GR_BATCHES);  /* still in epoch 0 */
	ck_assert_int_eq(waitpid(stopped, &status, WUNTRACED), stopped);
	ck_assert(WIFSTOPPED(status));
	ck_assert_int_eq(kill(killed, SIGKILL), 0);
	ck_assert_int_eq(waitpid(killed, &status, 0), killed);
	/* the others go on: the parent finishes both epochs */
	while ((b = gr_next(c, st))) {
		ck_assert(gr_bytes_ok(b));
		ck_assert_int_eq(feed_release(b), 0);
		n++;
	}
	ck_assert_uint_eq(n, 2 * GR_BATCHES);
	ck_assert_msg(h_log_line_has("stopped", "group 'g': detached after releasing nothing"),
		      "no detach in the log:\n%s", h_file_text(h.log));
	/* told when it continues, its held batch intact */
	ck_assert_int_eq(kill(stopped, SIGCONT), 0);
	ck_assert_int_eq(waitpid(stopped, &status, 0), stopped);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "stopped member: status 0x%x", status);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 3: a mismatch is refused naming the parameter                  */

static void gr_refused(struct feed_conn *c, const struct feed_stream_opts *o, int code,
		       const char *needle)
{
	struct feed_stream *st;
	int r = feed_stream_open(c, o, &st);

	ck_assert_msg(r == code, "open: %d (%s), expected %d", r, feed_errmsg(c), code);
	ck_assert_msg(strstr(feed_errmsg(c), needle), "'%s' lacks '%s'", feed_errmsg(c), needle);
}

START_TEST(test_groups_mismatch_refused)
{
	start(NULL);
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = gr_opts("g", 0);
	struct feed_stream *st = h_stream_open(c, &o);

	o.batch = 20;
	gr_refused(c, &o, -EINVAL, "group 'g': batch_size 20 differs from the group's 10");
	o = gr_opts("g", 0);
	o.seed = 8;
	gr_refused(c, &o, -EINVAL, "group 'g': seed 8 differs from the group's 7");
	o = gr_opts("g", 0);
	o.pipeline = "hflip(p=0.5)";
	gr_refused(c, &o, -EINVAL, "group 'g': pipeline 'hflip(p=0.5, field=image)' differs from the "
		   "group's 'identity'");
	o = gr_opts("g", 0);
	o.order = FEED_ORDER_SEQUENTIAL;
	gr_refused(c, &o, -EINVAL, "group 'g': order sequential differs from the group's full");
	o = gr_opts("g", 0);
	o.world = 2;
	gr_refused(c, &o, -EINVAL, "group 'g': world_size 2 differs from the group's 1");
	/* the group still serves its member */
	struct feed_batch *b = gr_next(c, st);
	ck_assert(gr_bytes_ok(b));
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 4: a late joiner's partial first epoch                         */

START_TEST(test_groups_late_joiner_partial_epoch)
{
	static struct gr_seen a[GR_BATCHES];
	uint64_t e, first;
	unsigned na = 0, nb = 0;
	struct feed_batch *b;

	start(NULL);
	struct feed_conn *ca = h_conn_new(), *cb = h_conn_new();
	struct feed_stream_opts o = gr_opts("late", 1);
	struct feed_stream *sa = h_stream_open(ca, &o);
	ck_assert_int_eq(feed_stream_group_start(sa, &e, &first), 0);
	ck_assert_uint_eq(e, 0);
	ck_assert_uint_eq(first, 0);
	for (; na < 30; na++) {
		ck_assert_ptr_nonnull(b = gr_next(ca, sa));
		gr_record(b, &a[na]);
		ck_assert_int_eq(feed_release(b), 0);
	}
	struct feed_stream *sb = h_stream_open(cb, &o);
	ck_assert_uint_eq(feed_stream_info(sb)->group_members, 2);
	ck_assert_int_eq(feed_stream_group_start(sb, &e, &first), 0);
	ck_assert_uint_eq(e, 0);
	/* it starts at the group's next batch: after what A took, within the depth */
	ck_assert_uint_ge(first, 30);
	ck_assert_uint_le(first, 30 + 4);
	ck_assert_uint_eq(feed_stream_info(sb)->start_batch, first);
	bool seen[GR_SAMPLES] = {false};
	int r;
	for (;;) {
		if (na < GR_BATCHES) {
			ck_assert_ptr_nonnull(b = gr_next(ca, sa));
			gr_record(b, &a[na++]);
			ck_assert_int_eq(feed_release(b), 0);
		}
		r = feed_next(sb, H_DEADLINE_MS, &b);
		if (r == FEED_END_OF_EPOCH)
			break;
		ck_assert_msg(r == 0, "joiner: %s: %s", feed_strerror(r), feed_errmsg(cb));
		ck_assert(gr_bytes_ok(b));
		ck_assert_uint_eq(feed_batch_epoch(b), 0);
		ck_assert_uint_eq(feed_batch_index(b), first + nb);
		for (uint32_t i = 0; i < feed_batch_size(b); i++) {
			uint64_t s = feed_batch_samples(b)[i];
			ck_assert_msg(!seen[s], "sample %llu twice", (unsigned long long)s);
			seen[s] = true;
		}
		nb++;
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(feed_next(sb, H_DEADLINE_MS, &b), FEED_END_OF_STREAM);
	while ((b = gr_next(ca, sa))) {
		gr_record(b, &a[na++]);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(na, GR_BATCHES);
	ck_assert_uint_eq(first + nb, GR_BATCHES);
	/* exactly the rest of the epoch: the samples of A's batches first.. */
	bool rest[GR_SAMPLES] = {false};
	for (unsigned i = first; i < GR_BATCHES; i++)
		for (uint32_t k = 0; k < a[i].n; k++)
			rest[a[i].samples[k]] = true;
	for (unsigned s = 0; s < GR_SAMPLES; s++)
		ck_assert_msg(seen[s] == rest[s], "sample %u: joiner %d, rest of epoch %d", s,
			      seen[s], rest[s]);
	ck_assert_int_eq(feed_stream_close(sa), 0);
	ck_assert_int_eq(feed_stream_close(sb), 0);
	feed_disconnect(ca);
	feed_disconnect(cb);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 5: a member's in-place write stays its own                     */

START_TEST(test_groups_write_stays_private)
{
	struct feed_batch *ba, *bb;
	struct feed_view va, vb;

	start(NULL);
	struct feed_conn *ca = h_conn_new(), *cb = h_conn_new();
	struct feed_stream_opts o = gr_opts("w", 0);
	o.credits = 1;
	struct feed_stream *sa = h_stream_open(ca, &o);
	struct feed_stream *sb = h_stream_open(cb, &o);
	uint64_t e, first;
	ck_assert_int_eq(feed_stream_group_start(sb, &e, &first), 0);
	/* A steps to where B starts */
	for (;;) {
		ck_assert_ptr_nonnull(ba = gr_next(ca, sa));
		if (feed_batch_epoch(ba) == e && feed_batch_index(ba) == first)
			break;
		ck_assert_int_eq(feed_release(ba), 0);
	}
	/* the same batches, many times round the group's 4 slots */
	for (int i = 0; i < 40; i++) {
		ck_assert_ptr_nonnull(bb = gr_next(cb, sb));
		ck_assert_uint_eq(feed_batch_index(ba), feed_batch_index(bb));
		ck_assert_msg(gr_bytes_ok(ba), "A's batch %d is stale (its private pages were kept)", i);
		ck_assert_int_eq(feed_batch_field(ba, 0, &va), 0);
		ck_assert_int_eq(feed_batch_field(bb, 0, &vb), 0);
		memset(va.data, 0xab, va.bytes);  /* A writes in place: no crash */
		ck_assert_uint_eq(((uint8_t *)va.data)[0], 0xab);
		ck_assert_msg(gr_bytes_ok(bb), "batch %d: A's write reached B", i);
		ck_assert_int_eq(feed_release(ba), 0);
		ck_assert_int_eq(feed_release(bb), 0);
		ck_assert_ptr_nonnull(ba = gr_next(ca, sa));
	}
	ck_assert_int_eq(feed_release(ba), 0);
	ck_assert_int_eq(feed_stream_close(sa), 0);
	ck_assert_int_eq(feed_stream_close(sb), 0);
	feed_disconnect(ca);
	feed_disconnect(cb);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 6: who may join, and the limits that cover a group             */

#define NOBODY 65534

/* Starts feedd with g1k readable by everyone and the given limits (and
 * any other top-level keys or dataset keys in extra, indented for g1k). */
static void start_open_to_all_with(const char *limits, const char *extra)
{
	char text[768];

	snprintf(gr_dir, sizeof(gr_dir), "%s/g1k", h.dir);
	h_make_dataset_blocks(gr_dir, GR_SAMPLES, 50);
	snprintf(text, sizeof(text), "%sdatasets:\n  - name: tiny\n    path: %s\n"
		 "  - name: g1k\n    path: %s\n    allow_users: [\"*\"]\n%s", limits, h.data,
		 gr_dir, extra);
	const char *cfg = h_write_file("feedd.yaml", text);
	h_start((const char *[]){"--config", cfg, NULL});
}

static void start_open_to_all(const char *limits)
{
	start_open_to_all_with(limits, "");
}

/* The members a group open of name found (itself included), or -1 with
 * the open refused. */
static int gr_members_when_joined(struct feed_conn *c, const char *name, struct feed_stream **st)
{
	struct feed_stream_opts o = gr_opts(name, 0);

	if (feed_stream_open(c, &o, st))
		return -1;
	return (int)feed_stream_info(*st)->group_members;
}

/* In a child that became nobody: root's group "g" is not nobody's: its
 * own "g" is another group (1 member), which root's does not see either;
 * the shared "team" is one group for both (2). 0, or the check failed. */
static int gr_nobody_joins(void)
{
	struct feed_conn *c;
	struct feed_stream *st, *st2;

	if (feed_connect(h.sock, &c))
		return 1;
	if (gr_members_when_joined(c, "g", &st) != 1)
		return 2;
	if (gr_members_when_joined(c, "g", &st2) != 2)  /* nobody's own, joined */
		return 3;
	feed_stream_close(st2);
	if (gr_members_when_joined(c, "team", &st2) != 2)
		return 4;
	feed_stream_close(st2);
	feed_stream_close(st);
	feed_disconnect(c);
	return 0;
}

/* Groups per user (issue 28): the same name from two users is two
 * groups, and a name only one of them took denies the other nothing; a
 * name the dataset's shared_groups lists is one group for every reader. */
START_TEST(test_groups_per_user_and_shared)
{
	start_open_to_all_with("socket_group: nogroup\n", "    shared_groups: [team]\n");
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st, *team;
	ck_assert_int_eq(gr_members_when_joined(c, "g", &st), 1);
	ck_assert_int_eq(gr_members_when_joined(c, "team", &team), 1);
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(100);
		_exit(gr_nobody_joins());
	}
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "nobody: status 0x%x",
		      status);
	struct feed_stream *st2;  /* root's "g" is still root's alone, with its one member */
	ck_assert_int_eq(gr_members_when_joined(c, "g", &st2), 2);
	ck_assert_int_eq(feed_stream_close(st2), 0);
	ck_assert_int_eq(feed_stream_close(team), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_groups_limits_cover_groups)
{
	struct feed_stream *st, *st2;

	start_open_to_all("limits:\n  max_streams: 2\n  max_slot_bytes: 1M\n");
	struct feed_conn *c = h_conn_new();
	/* 64 slots of 1000 samples (24 000 bytes, 6 pages each): 1.5 MiB of region */
	struct feed_stream_opts o = gr_opts("big", 0);
	o.batch = 1000;
	o.group_depth = 64;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -ENOSPC);
	ck_assert_msg(strstr(feed_errmsg(c), "group 'big'") &&
		      strstr(feed_errmsg(c), "max_slot_bytes 1048576"), "%s", feed_errmsg(c));
	/* each membership is a stream */
	o = gr_opts("g", 0);
	st = h_stream_open(c, &o);
	st2 = h_stream_open(c, &o);
	struct feed_stream *st3;
	ck_assert_int_eq(feed_stream_open(c, &o, &st3), -EUSERS);
	ck_assert_msg(strstr(feed_errmsg(c), "max_streams is 2"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(st2), 0);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 8: members resume from their own tokens across restarts        */

enum { RS_EPOCHS = 2, RS_TOTAL = RS_EPOCHS * GR_BATCHES };

/* One member's run: every batch it took, in order. */
struct rs_member {
	struct feed_conn *c;
	struct feed_stream *st;
	unsigned n;
	bool ended;
	struct gr_seen seen[RS_TOTAL + 1];
};

/* Takes one batch of m within a short wait: 1 when one came (recorded and
 * released), 0 when none came in time or the stream ended. */
static int rs_take(struct rs_member *m)
{
	struct feed_batch *b;
	int r;

	if (m->ended)
		return 0;
	while ((r = feed_next(m->st, 50, &b)) == FEED_END_OF_EPOCH)
		;
	if (r == -ETIMEDOUT)
		return 0;
	if (r == FEED_END_OF_STREAM) {
		m->ended = true;
		return 0;
	}
	ck_assert_msg(r == 0, "feed_next: %s: %s", feed_strerror(r), feed_errmsg(m->c));
	ck_assert_msg(gr_bytes_ok(b), "wrong bytes");
	ck_assert_uint_lt(m->n, RS_TOTAL);
	gr_record(b, &m->seen[m->n++]);
	ck_assert_int_eq(feed_release(b), 0);
	return 1;
}

/* Reads a until it took want_a and b until want_b (or each ended), round
 * robin; a member that waits for the other (the group's depth, or the
 * group behind its position) lets the other take one more. */
static void rs_pump(struct rs_member *a, unsigned want_a, struct rs_member *b, unsigned want_b)
{
	int64_t end = h_now_ms() + 4 * H_DEADLINE_MS;

	while ((a->n < want_a && !a->ended) || (b->n < want_b && !b->ended)) {
		ck_assert_msg(h_now_ms() < end, "stuck at %u and %u batches", a->n, b->n);
		if (a->n < want_a && !a->ended && !rs_take(a))
			rs_take(b);
		if (b->n < want_b && !b->ended && !rs_take(b))
			rs_take(a);
	}
}

/* Ends feedd with sig and starts it again on the same socket. */
static void rs_restart(int sig, int nth)
{
	static char spec[200], tiny[200];

	ck_assert_int_eq(kill(h.pid, sig), 0);
	ck_assert_int_eq(h_wait(h.pid, H_DEADLINE_MS) != -1, 1);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.%d.log", h.dir, nth);
	snprintf(spec, sizeof(spec), "g1k=%s", gr_dir);
	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, "--dataset", spec, "--workers", "2", NULL});
}

/* Two members of a group read at their own pace across a SIGKILL, a
 * SIGTERM and a SIGKILL of feedd. After each restart they reconnect at
 * different times and positions: the first recreates the group at its
 * position; one that finds the group past it resumes on its own; one
 * ahead of the group skips to its own position. Each sees every batch of
 * each epoch exactly once, in order: the sequence of an ungrouped stream
 * of the same spec, byte for byte. */
START_TEST(test_groups_restart_members_resume_own_positions)
{
	static struct rs_member ref, a, b;
	struct feed_stream_opts o = gr_opts("rs", RS_EPOCHS);

	start(NULL);
	o.group = NULL;
	o.group_depth = 0;
	ref.c = h_conn_new();
	ref.st = h_stream_open(ref.c, &o);
	while (!ref.ended)
		rs_take(&ref);
	ck_assert_uint_eq(ref.n, RS_TOTAL);
	o = gr_opts("rs", RS_EPOCHS);
	o.reconnect_ms = H_DEADLINE_MS;
	a.c = h_conn_new();
	a.st = h_stream_open(a.c, &o);
	b.c = h_conn_new();
	b.st = h_stream_open(b.c, &o);
	rs_pump(&a, 20, &b, 20);
	rs_restart(SIGKILL, 1);
	rs_pump(&a, 50, &b, 0);   /* a reconnects first: the group at its position */
	rs_pump(&a, 0, &b, 50);   /* b finds it past its own */
	rs_pump(&a, 70, &b, 55);
	rs_restart(SIGTERM, 2);
	rs_pump(&a, 0, &b, 60);   /* b first now, behind a */
	rs_pump(&a, 100, &b, 0);  /* a ahead of the group: it skips to its position */
	rs_restart(SIGKILL, 3);
	rs_pump(&a, RS_TOTAL + 1, &b, RS_TOTAL + 1);
	const struct rs_member *m[2] = {&a, &b};
	for (int k = 0; k < 2; k++) {
		/* a late joiner's first epoch starts where it joined (b opened
		 * second: the group may have published to a already) */
		unsigned first = (unsigned)(m[k]->seen[0].epoch * GR_BATCHES + m[k]->seen[0].index);
		ck_assert_uint_lt(first, 8);
		ck_assert_msg(m[k]->n + first == RS_TOTAL, "member %d took %u batches from batch "
			      "%u, of %u", k, m[k]->n, first, RS_TOTAL);
		for (unsigned i = 0; i < m[k]->n; i++) {
			const struct gr_seen *s = &m[k]->seen[i], *r = &ref.seen[first + i];
			ck_assert_msg(s->epoch == r->epoch && s->index == r->index,
				      "member %d: batch %u is epoch %llu batch %llu, not epoch %llu "
				      "batch %llu", k, i, (unsigned long long)s->epoch,
				      (unsigned long long)s->index, (unsigned long long)r->epoch,
				      (unsigned long long)r->index);
			ck_assert_uint_eq(s->n, r->n);
			ck_assert(!memcmp(s->samples, r->samples, 8ull * s->n));
			ck_assert(!memcmp(s->img, r->img, 16ull * s->n));
		}
	}
	/* the paths taken: behind the group (on its own), ahead of it (skips) */
	char log[300];
	snprintf(log, sizeof(log), "%s/feedd.1.log", h.dir);
	ck_assert_msg(h_file_has(log, "past this stream's resume position"), "%s",
		      h_file_text(log));
	snprintf(log, sizeof(log), "%s/feedd.2.log", h.dir);
	ck_assert_msg(h_file_has(log, "joins group 'rs' (2 members)"), "%s", h_file_text(log));
	for (int k = 0; k < 2; k++) {
		feed_stream_close(m[k]->st);
		feed_disconnect(m[k]->c);
	}
	feed_stream_close(ref.st);
	feed_disconnect(ref.c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 9: no detach under load while every member releases            */

/* A busy plain stream in a child: reads and releases g1k without end
 * until killed. */
static void gr_busy_child(void)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_batch *b;
	struct feed_stream_opts o = {.dataset = "g1k", .batch = 50, .credits = 4,
				     .order = FEED_ORDER_FULL, .seed = 3};
	int r;

	if (feed_connect(h.sock, &c) || feed_stream_open(c, &o, &st))
		_exit(1);
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH)
		if (r == 0)
			feed_release(b);
	_exit(2);
}

/* Issue 28 item 1: under load, members that kept releasing were detached
 * ("releasing nothing for N ms" while the group advanced): the timer read
 * its clock before the lock and releases were stamped after it. A group
 * of two, one member stepping 5 ms a batch (a trainer's step), beside
 * busy streams, with a 200 ms group timeout checked every 50 ms (many
 * checks; the old code detached a member within the run every time):
 * neither is ever detached, and both get every batch. */
START_TEST(test_groups_no_detach_under_load)
{
	enum { BUSY = 4, EPOCHS = 3, TOTAL = EPOCHS * GR_BATCHES };
	pid_t busy[BUSY];
	struct feed_conn *c[2];
	struct feed_stream *st[2];
	unsigned n[2] = {0};

	start((const char *[]){"--group-timeout-ms", "200", NULL});
	for (int i = 0; i < BUSY; i++) {
		busy[i] = fork();
		ck_assert_int_ge(busy[i], 0);
		if (busy[i] == 0)
			gr_busy_child();
	}
	for (int m = 0; m < 2; m++) {
		struct feed_stream_opts o = gr_opts("load", EPOCHS);
		c[m] = h_conn_new();
		st[m] = h_stream_open(c[m], &o);
	}
	for (bool more = true; more;) {
		more = false;
		for (int m = 0; m < 2; m++) {
			struct feed_batch *b = gr_next(c[m], st[m]);  /* fails on a detach */
			if (!b)
				continue;
			more = true;
			n[m]++;
			if (m == 1)
				h_nap_ms(5);  /* the slow member's step, holding the batch */
			ck_assert_int_eq(feed_release(b), 0);
		}
	}
	for (int i = 0; i < BUSY; i++) {
		ck_assert_int_eq(kill(busy[i], SIGKILL), 0);
		ck_assert_int_ne(h_wait(busy[i], H_DEADLINE_MS), -1);
	}
	ck_assert_uint_eq(n[0], TOTAL);
	ck_assert_uint_ge(n[1], TOTAL - 8);  /* joined a few batches late at most */
	ck_assert_uint_eq(h_log_count("detached after"), 0);
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(feed_stream_close(st[m]), 0);
		feed_disconnect(c[m]);
	}
}
END_TEST

/* ------------------------------------------------------------------ */
/* A reload that shortens group_timeout_ms reaches a running group at    */
/* once                                                                 */

/* The group's timer looked for idle members every quarter of the timeout
 * it started with (30 s here) and took a reload's period only at its next
 * tick: a member that stopped taking batches held the others up that long
 * after a reload to 300 ms. Now the first reader goes on within its
 * deadline (RL_WAIT_MS, far below 30 s) and the idle member is detached
 * and told. */
#define RL_WAIT_MS 8000

START_TEST(test_groups_reload_shortens_timeout_at_once)
{
	char text[400];
	struct feed_conn *c[2];
	struct feed_stream *st[2];
	struct feed_batch *b;
	struct feed_reload_result *res = NULL;
	int r;

	snprintf(gr_dir, sizeof(gr_dir), "%s/g1k", h.dir);
	h_make_dataset_blocks(gr_dir, GR_SAMPLES, 50);
	snprintf(text, sizeof(text), "group_timeout_ms: 120000\ndatasets:\n  - name: g1k\n"
		 "    path: %s\n", gr_dir);
	const char *cfg = h_write_file("groups.yaml", text);
	h_start((const char *[]){"--config", cfg, "--workers", "2", NULL});
	for (int m = 0; m < 2; m++) {
		struct feed_stream_opts o = gr_opts("slow", 1);
		c[m] = h_conn_new();
		st[m] = h_stream_open(c[m], &o);
	}
	/* member 1 never takes a batch: the group soon waits for it (member 0
	 * gets what the group builds ahead, a few batches). The 300 ms is no
	 * condition the test relies on: however many came before the reload,
	 * the rest of the epoch must come after it without a long wait. */
	unsigned n = 0;
	while ((r = feed_next(st[0], 300, &b)) == 0) {
		ck_assert(gr_bytes_ok(b));
		ck_assert_int_eq(feed_release(b), 0);
		ck_assert_uint_lt(++n, GR_BATCHES / 2);
	}
	ck_assert_msg(r == -ETIMEDOUT, "feed_next: %s: %s", feed_strerror(r), feed_errmsg(c[0]));

	snprintf(text, sizeof(text), "group_timeout_ms: 300\ndatasets:\n  - name: g1k\n"
		 "    path: %s\n", gr_dir);
	h_write_file("groups.yaml", text);
	ck_assert_msg(feed_reload(c[0], &res) == 0, "feed_reload: %s", feed_errmsg(c[0]));
	feed_reload_result_free(res);
	/* member 0 reads the epoch to its end, none of its waits long */
	while ((r = feed_next(st[0], RL_WAIT_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "batch %u: feed_next: %s: %s", n, feed_strerror(r),
			      feed_errmsg(c[0]));
		ck_assert(gr_bytes_ok(b));
		ck_assert_int_eq(feed_release(b), 0);
		n++;
	}
	ck_assert_uint_eq(n, GR_BATCHES);
	ck_assert_msg(h_log_has("group 'slow': detached after releasing nothing"), "%s",
		      h_file_text(h.log));
	ck_assert_int_eq(feed_next(st[1], 0, &b), FEED_EDETACHED);
	ck_assert_msg(strstr(feed_errmsg(c[1]), "slow"), "%s", feed_errmsg(c[1]));
	for (int m = 0; m < 2; m++) {
		(void)feed_stream_close(st[m]);
		feed_disconnect(c[m]);
	}
}
END_TEST

static Suite *groups_suite(void)
{
	Suite *s = suite_create("groups");
	TCase *tc = tcase_create("groups");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_groups_members_identical_built_once);
	tcase_add_test(tc, test_groups_killed_and_stopped_members);
	tcase_add_test(tc, test_groups_mismatch_refused);
	tcase_add_test(tc, test_groups_late_joiner_partial_epoch);
	tcase_add_test(tc, test_groups_write_stays_private);
	tcase_add_test(tc, test_groups_limits_cover_groups);
	tcase_add_test(tc, test_groups_restart_members_resume_own_positions);
	tcase_add_test(tc, test_groups_no_detach_under_load);
	tcase_add_test(tc, test_groups_reload_shortens_timeout_at_once);
	if (geteuid() == 0)
		tcase_add_test(tc, test_groups_per_user_and_shared);
	else
		fprintf(stderr, "check_groups: not root: the other-user test is left out\n");
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(groups_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
