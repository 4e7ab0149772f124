/*
 * check_isolation.c: what one client can and cannot do to feedd and to the
 * other clients (DESIGN.md "Delivery", "Security", "Failure behaviour"):
 * credits bound what it may hold; a client of our own that writes garbage
 * into the release ring, rings doorbells of closed streams and pokes at
 * every seal of the regions; clients killed while holding batches. After
 * each abuse another client is still served correctly.
 *
 * Each test starts its own feedd serving the harness's dataset as "tiny"
 * (H_SAMPLES records: image u8[4,4] filled with i, label i64 i).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/stream.h"
#include "feed_shm.h"
#include "feed_text.h"
#include "feedd_harness.h"

/* How long a stopped stream is watched for "nothing more happens": it has
 * no idle signal to wait for (daemon_idle() below is a live stream's). */
#define NAP_MS 200

/* Starts feedd serving "tiny" with two workers, extra args after. */
static void start(const char *const *extra)
{
	static char tiny[160];
	const char *args[24] = {"--dataset", tiny, "--workers", "2"};
	size_t n = 4;

	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	while (extra && *extra && n < 23)
		args[n++] = *extra++;
	args[n] = NULL;
	h_start(args);
}

/* ------------------------------------------------------------------ */
/* Test 1: credits                                                     */

/* Maps this process's only region named name read-only (found by the
 * name the daemon gives its memfds), to watch what the daemon does. */
static const void *own_region_map(const char *name, size_t *ret_len)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	const void *ctl = NULL;
	char path[300], link[256];

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		if (!strstr(link, name))
			continue;
		struct stat sb;
		int fd = atoi(e->d_name);
		ck_assert_ptr_null(ctl);  /* exactly one stream is open */
		ck_assert_int_eq(fstat(fd, &sb), 0);
		ctl = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
		ck_assert(ctl != MAP_FAILED);
		*ret_len = (size_t)sb.st_size;
	}
	closedir(d);
	ck_assert_ptr_nonnull(ctl);
	return ctl;
}

static const struct feed_shm_ctl *own_ctl_map(size_t *ret_len)
{
	return own_region_map("memfd:feedd-control", ret_len);
}

/* Waits until the daemon says it waits for a release (daemon_waiting,
 * feed_shm.h). It says so only when every credit is held and no batch of
 * the stream is being built: whatever it was going to publish is then
 * published, and nothing more comes until the client releases. */
static bool daemon_waits(void *rel)
{
	return atomic_load_explicit(&((struct feed_shm_rel *)rel)->daemon_waiting,
				    memory_order_acquire) != 0;
}

static bool daemon_idle(const struct feed_shm_rel *rel)
{
	return h_wait_until(daemon_waits, (void *)rel, H_DEADLINE_MS);
}

static uint64_t ready_head(const struct feed_shm_ctl *ctl)
{
	return atomic_load_explicit(&((struct feed_shm_ctl *)ctl)->ready_head, memory_order_acquire);
}

START_TEST(test_isolation_credits_bound_batches)
{
	enum { C = 3 };
	struct feed_batch *held[C], *b;
	uint64_t consumed = 0, next_index = 0;   /* ready entries we took; batch expected */
	size_t ctl_len = 0, rel_len = 0;

	start(NULL);
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 1, C);
	const struct feed_shm_ctl *ctl = own_ctl_map(&ctl_len);
	const struct feed_shm_rel *rel = own_region_map("memfd:feedd-release", &rel_len);
	ck_assert_uint_eq(ctl->nslots, C);
	ck_assert_uint_eq(feed_stream_info(st)->credits, C);

	for (int i = 0; i < C; i++) {
		ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &held[i]), 0);
		ck_assert_uint_eq(feed_batch_index(held[i]), next_index++);
		for (int k = 0; k < i; k++)
			ck_assert_ptr_ne(held[i], held[k]);  /* a slot each */
		consumed++;
	}
	/* Every credit held: no wait, -ENOBUFS, saying why. */
	int64_t t0 = h_now_ms();
	ck_assert_int_eq(feed_next(st, 0, &b), -ENOBUFS);
	ck_assert_int_eq(feed_next(st, 5000, &b), -ENOBUFS);
	ck_assert_int_lt(h_now_ms() - t0, 1000);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(c), "credits are held"));
	/* ... and the daemon built nothing more. */
	ck_assert_msg(daemon_idle(rel), "feedd never waited for a release with every credit held");
	ck_assert_uint_eq(ready_head(ctl), consumed);

	/* Release one, the next comes, into the slot given back; many times
	 * over, across epoch ends, never more than C out. */
	for (int round = 0; round < 4 * H_SAMPLES; round++) {
		int k = round % C;
		struct feed_batch *freed = held[k];
		ck_assert_int_eq(feed_release(freed), 0);
		int r;
		r = feed_next(st, H_DEADLINE_MS, &b);
		ck_assert_msg(r == 0, "round %d: %s: %s", round, feed_strerror(r), feed_errmsg(c));
		consumed++;
		ck_assert_ptr_eq(b, freed);
		ck_assert_uint_eq(feed_batch_index(b), next_index++);
		h_tiny_check(b);
		held[k] = b;
		/* the epoch's end comes with its last batch */
		if ((r = feed_next(st, 0, &b)) == FEED_END_OF_EPOCH) {
			ck_assert_uint_eq(next_index, H_SAMPLES);
			next_index = 0;
			consumed++;
			r = feed_next(st, 0, &b);
		}
		ck_assert_int_eq(r, -ENOBUFS);
		/* published = taken: with every credit held nothing else is built */
		ck_assert_uint_eq(ready_head(ctl), consumed);
	}
	ck_assert_msg(daemon_idle(rel), "feedd never waited for a release with every credit held");
	ck_assert_uint_eq(ready_head(ctl), consumed);
	munmap((void *)ctl, ctl_len);
	munmap((void *)rel, rel_len);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A client of our own: raw packets and our own mappings               */

struct rs {
	int sock;
	uint32_t id;                 /* the daemon's stream id */
	int fd[5];                   /* control, data, release; ready, release doorbells */
	size_t len[3];
	const struct feed_shm_ctl *ctl;
	const uint8_t *data;
	struct feed_shm_rel *rel;
	uint64_t tail;               /* next ready entry to read */
	uint64_t rel_head;           /* next release entry to write */
};

/* Opens a tiny stream (batch 1, sequential, endless) on a raw socket that
 * said hello, and maps its regions as a client would. */
static void rs_open(struct rs *r, int sock, uint32_t req_id, uint32_t credits)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream os = FEED__OPEN_STREAM__INIT;
	Feed__Reply *rep = NULL;
	unsigned n;
	void *p;

	memset(r, 0, sizeof(*r));
	r->sock = sock;
	os.dataset = feed_pb_text("tiny");
	os.batch = 1;
	os.credits = credits;
	os.pipeline = feed_pb_text("");
	req.id = req_id;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &os;
	h_raw_send_request(sock, &req);
	ck_assert_int_eq(h_raw_recv_fds(sock, H_DEADLINE_MS, &rep, r->fd, 5, &n), 1);
	ck_assert_msg(rep->body_case == FEED__REPLY__BODY_STREAM_OPENED, "open refused: %s",
		      rep->body_case == FEED__REPLY__BODY_ERROR ? rep->error->message : "?");
	ck_assert_uint_eq(rep->id, req_id);
	ck_assert_uint_eq(n, 5);
	r->id = rep->stream_opened->stream;
	feed__reply__free_unpacked(rep, NULL);
	for (int i = 0; i < 3; i++) {
		struct stat sb;
		ck_assert_int_eq(fstat(r->fd[i], &sb), 0);
		r->len[i] = (size_t)sb.st_size;
	}
	p = mmap(NULL, r->len[0], PROT_READ, MAP_SHARED, r->fd[0], 0);
	ck_assert(p != MAP_FAILED);
	r->ctl = p;
	p = mmap(NULL, r->len[1], PROT_READ, MAP_SHARED, r->fd[1], 0);
	ck_assert(p != MAP_FAILED);
	r->data = p;
	p = mmap(NULL, r->len[2], PROT_READ | PROT_WRITE, MAP_SHARED, r->fd[2], 0);
	ck_assert(p != MAP_FAILED);
	r->rel = p;
	ck_assert_uint_eq(r->ctl->magic, FEED_SHM_CTL_MAGIC);
	ck_assert_uint_eq(r->rel->magic, FEED_SHM_REL_MAGIC);
	ck_assert_uint_eq(r->ctl->nslots, credits);
}

static void rs_unmap(struct rs *r)
{
	munmap((void *)r->ctl, r->len[0]);
	munmap((void *)r->data, r->len[1]);
	munmap(r->rel, r->len[2]);
	for (int i = 0; i < 5; i++)
		close(r->fd[i]);
}

static uint64_t rs_head(const struct rs *r)
{
	return ready_head(r->ctl);
}

/* The next ready entry, waiting up to ms: 1 with *ret, or 0. */
static int rs_next(struct rs *r, int ms, uint64_t *ret)
{
	int64_t end = h_now_ms() + ms;
	const uint64_t *ring = (const uint64_t *)((const uint8_t *)r->ctl + r->ctl->ring_off);

	while (rs_head(r) == r->tail) {
		if (h_now_ms() >= end)
			return 0;
		h_nap_ms(1);
	}
	*ret = ring[r->tail++ & (r->ctl->ring_cap - 1)];
	return 1;
}

/* The next ready entry, which must name a slot; checks its header and
 * bytes against the tiny dataset. */
static uint64_t rs_take(struct rs *r)
{
	uint64_t e;

	do
		ck_assert_msg(rs_next(r, H_DEADLINE_MS, &e), "no batch from feedd");
	while (feed_ring_slot(e) == FEED_READY_EPOCH_END);
	uint32_t slot = feed_ring_slot(e);
	ck_assert_msg(slot < r->ctl->nslots, "ready entry names slot 0x%x (error %d: %s)", slot,
		      r->ctl->error_code, slot == FEED_READY_ERROR ? r->ctl->error_msg : "");
	const struct feed_shm_slot *sh = (const struct feed_shm_slot *)(
		(const uint8_t *)r->ctl + r->ctl->slots_off + slot * r->ctl->slot_hdr_bytes);
	ck_assert_uint_eq(sh->gen, feed_ring_gen(e));
	ck_assert_uint_eq(sh->nsamples, 1);
	ck_assert_uint_lt(sh->sample[0], H_SAMPLES);
	for (int k = 0; k < 16; k++)
		ck_assert_uint_eq(r->data[sh->field[0].offset + k], sh->sample[0]);
	return e;
}

static void rs_ring(struct rs *r)
{
	uint64_t one = 1;
	ck_assert_int_eq(write(r->fd[4], &one, sizeof(one)), sizeof(one));
}

/* Writes entries into the release ring, moves the head past them and
 * rings the daemon (always, whatever daemon_waiting said; the flag is
 * cleared as a client clears it, so rs_expect_quiet() sees it set anew). */
static void rs_push(struct rs *r, const uint64_t *entries, size_t n)
{
	_Atomic uint64_t *ring = (_Atomic uint64_t *)((uint8_t *)r->rel + r->rel->ring_off);

	for (size_t i = 0; i < n; i++)
		atomic_store_explicit(&ring[r->rel_head++ & (r->rel->ring_cap - 1)], entries[i],
				      memory_order_relaxed);
	atomic_store_explicit(&r->rel->rel_head, r->rel_head, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	atomic_exchange_explicit(&r->rel->daemon_waiting, 0, memory_order_relaxed);
	rs_ring(r);
}

/* Nothing more is published: once the daemon waits for a release with
 * every credit of this live stream held, nothing was left unpublished. */
static void rs_expect_quiet(struct rs *r)
{
	ck_assert_msg(daemon_idle(r->rel), "stream %u: feedd never waited for a release", r->id);
	ck_assert_msg(rs_head(r) == r->tail, "feedd published %llu entries unasked",
		      (unsigned long long)(rs_head(r) - r->tail));
}

/* A round trip on the stream's socket: once the daemon answers, its loop
 * has handled every doorbell rung before the request. */
static void rs_round_trip(struct rs *r, uint32_t req_id)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__StatsQuery q = FEED__STATS_QUERY__INIT;
	Feed__Reply *rep = NULL;

	req.id = req_id;
	req.body_case = FEED__REQUEST__BODY_STATS;
	req.stats = &q;
	h_raw_send_request(r->sock, &req);
	ck_assert_int_eq(h_raw_recv(r->sock, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STATS);
	ck_assert_uint_eq(rep->id, req_id);
	feed__reply__free_unpacked(rep, NULL);
}

/* A stopped stream publishes nothing more: the daemon has handled the
 * doorbell, and then nothing comes for NAP_MS (a stopped stream never
 * says it is idle, so this one watch is a sleep). */
static void rs_expect_stopped_quiet(struct rs *r, uint32_t req_id)
{
	rs_round_trip(r, req_id);
	h_nap_ms(NAP_MS);
	ck_assert_msg(rs_head(r) == r->tail, "stopped stream %u published %llu entries", r->id,
		      (unsigned long long)(rs_head(r) - r->tail));
}

/* After batches already published, the daemon's error: code and message. */
static void rs_expect_error(struct rs *r, int code, const char *needle)
{
	uint64_t e;

	do
		ck_assert_msg(rs_next(r, H_DEADLINE_MS, &e), "stream %u: no error from feedd", r->id);
	while (feed_ring_slot(e) < r->ctl->nslots);
	ck_assert_uint_eq(feed_ring_slot(e), FEED_READY_ERROR);
	ck_assert_int_eq(r->ctl->error_code, code);
	ck_assert_msg(strstr(r->ctl->error_msg, needle), "error '%s' lacks '%s'",
		      r->ctl->error_msg, needle);
}

static void raw_close_stream(int sock, uint32_t req_id, uint32_t stream)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__CloseStream cs = FEED__CLOSE_STREAM__INIT;
	Feed__Reply *rep = NULL;

	cs.stream = stream;
	req.id = req_id;
	req.body_case = FEED__REQUEST__BODY_CLOSE_STREAM;
	req.close_stream = &cs;
	h_raw_send_request(sock, &req);
	ck_assert_int_eq(h_raw_recv(sock, H_DEADLINE_MS, &rep), 1);
	ck_assert_int_eq(rep->body_case, FEED__REPLY__BODY_STREAM_CLOSED);
	ck_assert_uint_eq(rep->stream_closed->stream, stream);
	feed__reply__free_unpacked(rep, NULL);
}

/* ------------------------------------------------------------------ */
/* Test 2: the release ring is untrusted                               */

START_TEST(test_isolation_release_ring_abuse_refused)
{
	struct rs r, r2, r3;
	char line[160];

	start(NULL);
	struct feed_conn *good = h_conn_new();
	struct feed_stream *gst = h_tiny_open(good, 2, 2);
	h_tiny_read(gst, 3);

	int sock = h_raw_connect();
	h_raw_hello(sock);
	rs_open(&r, sock, 2, 8);   /* a release ring of 16 */
	uint64_t e0 = rs_take(&r), e1 = rs_take(&r);
	uint32_t s0 = feed_ring_slot(e0), g0 = feed_ring_gen(e0);
	uint32_t s1 = feed_ring_slot(e1), g1 = feed_ring_gen(e1);
	ck_assert_uint_ne(s0, s1);
	uint64_t rest[6];
	for (int i = 0; i < 6; i++)
		rest[i] = rs_take(&r);
	rs_expect_quiet(&r);   /* every credit held */

	/* Entries that name no slot we hold at that generation are ignored:
	 * had one freed s1, or freed s0 twice, more than one batch would come. */
	const uint64_t bad[] = {
		0xdeadbeefcafef00dull,                       /* garbage */
		feed_ring_entry(s1, g1 + 1),                 /* a generation not yet built */
		feed_ring_entry(s1, g1 - 1),                 /* a stale generation */
		feed_ring_entry(s1, 0),
		feed_ring_entry(8, g0),                      /* slot == nslots */
		feed_ring_entry(FEED_READY_EPOCH_END, g0),   /* a ready marker */
		UINT64_MAX,
		feed_ring_entry(s0, g0),                     /* the one good release */
		feed_ring_entry(s0, g0),                     /* released twice */
	};
	rs_push(&r, bad, sizeof(bad) / sizeof(bad[0]));
	uint64_t e2 = rs_take(&r);
	ck_assert_uint_eq(feed_ring_slot(e2), s0);
	ck_assert_uint_eq(feed_ring_gen(e2), g0 + 1);
	rs_expect_quiet(&r);
	snprintf(line, sizeof(line), "stream %u: refused 8 release entries", r.id);
	ck_assert_msg(h_log_has(line), "no '%s' in the log:\n%s", line, h_file_text(h.log));
	/* s1's old generation after it was refused, and a release of a slot
	 * being rebuilt, are still no good. */
	const uint64_t stale[] = {feed_ring_entry(s0, g0)};
	rs_push(&r, stale, 1);
	rs_expect_quiet(&r);
	h_tiny_read(gst, 3);

	/* The stream still works: good releases bring batches in order. */
	const uint64_t good2[] = {feed_ring_entry(s1, g1), e2};
	rs_push(&r, good2, 2);
	uint64_t e3 = rs_take(&r), e4 = rs_take(&r);
	ck_assert_uint_ne(feed_ring_slot(e3), feed_ring_slot(e4));
	rs_expect_quiet(&r);
	rs_push(&r, rest, 6);
	for (int i = 0; i < 6; i++)
		rest[i] = rs_take(&r);
	rs_expect_quiet(&r);

	/* A head moved past the ring's capacity stops the stream, with the
	 * reason in the control region and in the log. */
	r.rel_head += r.rel->ring_cap + 1;
	atomic_store_explicit(&r.rel->rel_head, r.rel_head, memory_order_release);
	rs_ring(&r);
	char why[120];
	snprintf(why, sizeof(why), "release queue head moved %u entries past the %u it holds",
		 r.rel->ring_cap + 1, r.rel->ring_cap);
	rs_expect_error(&r, -EPROTO, why);
	snprintf(line, sizeof(line), "stream %u stopped: %s", r.id, why);
	ck_assert_msg(h_log_has(line), "no '%s' in the log:\n%s", line, h_file_text(h.log));
	const uint64_t late[] = {e3, e4};
	rs_push(&r, late, 2);
	rs_expect_stopped_quiet(&r, 20);  /* stopped for good */

	/* A head moved backwards is the same tampering. */
	rs_open(&r2, sock, 3, 2);
	uint64_t f[2] = {rs_take(&r2), rs_take(&r2)};
	rs_push(&r2, f, 2);
	(void)rs_take(&r2);   /* built after the daemon read both releases */
	r2.rel_head -= 1;
	atomic_store_explicit(&r2.rel->rel_head, r2.rel_head, memory_order_release);
	rs_ring(&r2);
	/* named as what it is, not as a head past the capacity */
	rs_expect_error(&r2, -EPROTO, "release queue head moved backwards");

	/* The abuser's connection still opens streams, and closes the
	 * stopped ones; the other client never noticed. */
	rs_open(&r3, sock, 4, 2);
	uint64_t h0 = rs_take(&r3);
	rs_push(&r3, &h0, 1);
	(void)rs_take(&r3);
	(void)rs_take(&r3);   /* built into the slot released */
	raw_close_stream(sock, 5, r.id);
	raw_close_stream(sock, 6, r2.id);
	h_tiny_read(gst, 2 * H_SAMPLES);
	h_assert_healthy();
	rs_unmap(&r);
	rs_unmap(&r2);
	rs_unmap(&r3);
	close(sock);
	ck_assert_int_eq(feed_stream_close(gst), 0);
	feed_disconnect(good);
}
END_TEST

/* A client that writes a bad release entry and rings the doorbell in a
 * loop (paced by a good release, so the ring never overflows) gets each
 * one refused, but the log gets a few lines and how many it left out. */
START_TEST(test_isolation_release_abuse_log_bounded)
{
	struct rs r;
	unsigned rounds = 0;

	start(NULL);
	int sock = h_raw_connect();
	h_raw_hello(sock);
	rs_open(&r, sock, 2, 2);
	uint64_t e = rs_take(&r);
	(void)rs_take(&r);
	for (int64_t end = h_now_ms() + 1500; h_now_ms() < end; rounds++) {
		const uint64_t two[] = {0xdeadbeefcafef00dull, e};
		rs_push(&r, two, 2);
		e = rs_take(&r);  /* built after the daemon read both */
	}
	ck_assert_uint_gt(rounds, 100);
	unsigned lines = h_log_count("release entries that name no slot");
	ck_assert_msg(lines <= 12, "%u lines logged for %u refused entries", lines, rounds);
	ck_assert(h_log_has(" more suppressed"));
	rs_unmap(&r);
	close(sock);
	h_assert_healthy();
}
END_TEST

/* A closed stream's release doorbell, still held by the client, rung
 * forever: the daemon must not spin on it (or on a descriptor it closed). */
START_TEST(test_isolation_closed_stream_doorbell_ignored)
{
	struct rs r;

	start(NULL);
	int sock = h_raw_connect();
	h_raw_hello(sock);
	rs_open(&r, sock, 2, 2);
	(void)rs_take(&r);
	raw_close_stream(sock, 3, r.id);
	rs_ring(&r);   /* the eventfd stays readable: nobody reads it now */
	rs_round_trip(&r, 4);   /* the loop has seen it, were it still polled */
	long t0 = h_proc_cpu_ticks(h.pid);
	/* The scenario's measure: CPU used over half a second of nothing to do
	 * (a loop spinning on the doorbell would use all of it). */
	h_nap_ms(500);
	long used = h_proc_cpu_ticks(h.pid) - t0;
	ck_assert_int_ge(t0, 0);
	ck_assert_msg(used < 10, "feedd used %ld CPU ticks in 500 ms with nothing to do", used);
	h_assert_healthy();
	rs_unmap(&r);
	close(sock);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 3: seals, tried from the client                                */

/* An operation that must fail with EPERM (or EACCES where the kernel
 * says so for mappings). */
#define EXPECT_DENIED(call, what)                                                        \
	do {                                                                             \
		errno = 0;                                                               \
		long r_ = (long)(call);                                                  \
		ck_assert_msg(r_ == -1 && (errno == EPERM || errno == EACCES),          \
			      "%s: got %ld (%s), expected EPERM", what, r_, strerror(errno)); \
	} while (0)

static void expect_map_denied(int fd, size_t len, int prot, const char *what)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);

	ck_assert_msg(p == MAP_FAILED && (errno == EPERM || errno == EACCES),
		      "%s: mapped (%s)", what, p == MAP_FAILED ? strerror(errno) : "ok");
}

/* Size seals: no shrinking, growing, or allocating past the end. */
static void expect_size_sealed(int fd, size_t len, const char *name)
{
	char what[96];
	struct stat sb;

	snprintf(what, sizeof(what), "%s: ftruncate shrink", name);
	EXPECT_DENIED(ftruncate(fd, (off_t)len / 2), what);
	EXPECT_DENIED(ftruncate(fd, 0), what);
	snprintf(what, sizeof(what), "%s: ftruncate grow", name);
	EXPECT_DENIED(ftruncate(fd, (off_t)len + 4096), what);
	snprintf(what, sizeof(what), "%s: fallocate past the end", name);
	EXPECT_DENIED(fallocate(fd, 0, (off_t)len, 4096), what);
	EXPECT_DENIED(fallocate(fd, 0, 0, (off_t)len + 1), what);
	snprintf(what, sizeof(what), "%s: F_ADD_SEALS", name);
	EXPECT_DENIED(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), what);
	ck_assert_int_eq(fstat(fd, &sb), 0);
	ck_assert_int_eq(sb.st_size, (off_t)len);
}

START_TEST(test_isolation_region_seals_hold)
{
	struct rs r;
	char path[64];

	start(NULL);
	int sock = h_raw_connect();
	h_raw_hello(sock);
	rs_open(&r, sock, 2, 2);
	uint64_t e = rs_take(&r);
	int cfd = r.fd[0];
	size_t clen = r.len[0];

	/* Control region: no write of any kind. */
	EXPECT_DENIED(write(cfd, "x", 1), "control: write");
	EXPECT_DENIED(pwrite(cfd, "x", 1, 0), "control: pwrite");
	expect_map_denied(cfd, clen, PROT_READ | PROT_WRITE, "control: mmap shared writable");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", cfd);
	int rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw >= 0) {   /* reopening is allowed; writing through it is not */
		EXPECT_DENIED(write(rw, "x", 1), "control reopened O_RDWR: write");
		expect_map_denied(rw, clen, PROT_WRITE, "control reopened O_RDWR: mmap");
		EXPECT_DENIED(ftruncate(rw, 0), "control reopened O_RDWR: ftruncate");
		close(rw);
	}
	EXPECT_DENIED(fallocate(cfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
		      "control: punch a hole");
	expect_size_sealed(cfd, clen, "control");
	EXPECT_DENIED(mprotect((void *)r.ctl, clen, PROT_READ | PROT_WRITE),
		      "control: mprotect(PROT_WRITE) of the read-only mapping");
	/* A private copy may be written, and changes nothing shared. */
	uint32_t *priv = mmap(NULL, clen, PROT_READ | PROT_WRITE, MAP_PRIVATE, cfd, 0);
	ck_assert(priv != MAP_FAILED);
	priv[0] = 0;
	ck_assert_uint_eq(r.ctl->magic, FEED_SHM_CTL_MAGIC);
	munmap(priv, clen);

	/* Data and release regions: fixed size, seals final. */
	expect_size_sealed(r.fd[1], r.len[1], "data");
	expect_size_sealed(r.fd[2], r.len[2], "release");

	/* Nothing of it reached the daemon: the stream goes on. */
	rs_push(&r, &e, 1);
	for (int i = 0; i < 2 * H_SAMPLES; i++) {
		e = rs_take(&r);
		rs_push(&r, &e, 1);
	}
	h_assert_healthy();
	rs_unmap(&r);
	close(sock);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Test 4: clients killed while holding batches                        */

/* In the child: open a stream, hold every credit, say so, wait to die. */
static void holder_child(int wfd)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_batch *b;
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 2, .credits = 3};

	if (feed_connect(h.sock, &c) < 0)
		_exit(1);
	if (feed_stream_open(c, &o, &st) < 0)
		_exit(2);
	for (int i = 0; i < 3; i++)
		if (feed_next(st, H_DEADLINE_MS, &b) != 0)
			_exit(3);
	if (write(wfd, "k", 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

static bool daemon_holds_fds(void *want)
{
	return h_proc_fds(h.pid) == *(int *)want;
}

/* Waits until the daemon holds want descriptors. */
static bool daemon_fds_settle(int want)
{
	return h_wait_until(daemon_holds_fds, &want, H_DEADLINE_MS);
}

START_TEST(test_isolation_killed_client_freed)
{
	char line[96];

	/* two streams per user: a stream left behind would refuse the next */
	const char *cfg = h_write_file("feedd.yaml", "limits:\n  max_streams: 2\n");
	start((const char *[]){"--config", cfg, NULL});
	struct feed_conn *good = h_conn_new();
	struct feed_stream *gst = h_tiny_open(good, 3, 2);
	h_tiny_read(gst, 2);
	int fds0 = h_proc_fds(h.pid), maps0 = h_proc_maps_count(h.pid, "memfd:feedd-");
	ck_assert_int_gt(fds0, 0);
	ck_assert_int_eq(maps0, 3);

	for (int round = 0; round < 5; round++) {
		int p[2];
		char k;
		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(p[0]);
			holder_child(p[1]);
		}
		close(p[1]);
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		ck_assert_int_eq(poll(&pf, 1, H_DEADLINE_MS), 1);
		ck_assert_msg(read(p[0], &k, 1) == 1, "round %d: the child failed", round);
		close(p[0]);
		/* the child's socket, three memfds and two eventfds */
		ck_assert_int_eq(h_proc_fds(h.pid), fds0 + 6);
		ck_assert_int_eq(h_proc_maps_count(h.pid, "memfd:feedd-"), maps0 + 3);
		h_tiny_read(gst, 2);   /* served while the other holds its batches */
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
		snprintf(line, sizeof(line), "pid %d): closed", (int)pid);
		ck_assert_msg(h_log_has(line), "no '%s' in the log:\n%s", line, h_file_text(h.log));
		ck_assert_msg(daemon_fds_settle(fds0), "round %d: feedd holds %d descriptors, had %d",
			      round, h_proc_fds(h.pid), fds0);
		ck_assert_int_eq(h_proc_maps_count(h.pid, "memfd:feedd-"), maps0);
		h_tiny_read(gst, 2);
	}
	ck_assert_int_eq(feed_stream_close(gst), 0);
	feed_disconnect(good);
	h_assert_healthy();
}
END_TEST

static Suite *isolation_suite(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("isolation");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_isolation_credits_bound_batches);
	tcase_add_test(tc, test_isolation_release_ring_abuse_refused);
	tcase_add_test(tc, test_isolation_release_abuse_log_bounded);
	tcase_add_test(tc, test_isolation_closed_stream_doorbell_ignored);
	tcase_add_test(tc, test_isolation_region_seals_hold);
	tcase_add_test(tc, test_isolation_killed_client_freed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(isolation_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
