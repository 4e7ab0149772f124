/*
 * check_delivery_unit.c: the delivery's state machine (daemon/delivery/
 * dlv_*.c) alone, in one process, with no running feedd: its jobs go
 * through a struct dlv_runner of the test's, which queues them, and the
 * test runs each (on its own thread, marked loop and worker) in the order
 * it chooses. The members' regions are mapped here as a client maps them:
 * the control region read-only, the release region writable.
 *
 * Covered: batches are published in batch order however they are built;
 * a block-window epoch waits for its order table, built by a job of its
 * own one epoch ahead;
 * of two batches that fail, the one earlier in batch order is reported,
 * after every batch before it; a group's slot is reused only once every
 * member it went to has released it; a detached member keeps what it had
 * taken and gives back the rest; idleness counts releases, never clock
 * readings of other threads; a group member resumed at its own position
 * skips to it, or is refused when the group is past it; a release ring whose head moves
 * backwards or past its capacity stops that member (and a plain stream)
 * with an error, and nothing crashes; a job keeps the limits it started
 * with (a reload meanwhile changes the next job's).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "builder.h"
#include "cache.h"
#include "check_util.h"
#include "delivery.h"
#include "feed_ring.h"
#include "feed_shm.h"
#include "fmt.h"
#include "layout.h"
#include "pipeline.h"
#include "pool.h"

#define NSAMPLES 32          /* one per block */
#define BATCH 4
#define MAXQ 64

/* One test's world (Check forks each test). */
static struct {
	char dir[64];
	char data[96];
	struct fmt_dataset *ds;
	struct pipe_plan plan;
	struct cache *cache;
	uv_loop_t loop;
	struct log lg;
	struct pool *pool;        /* for the work source only: its worker stays idle */
	struct pool_worker w;     /* what the test's thread builds with */
	struct pool_job *q[MAXQ]; /* jobs submitted, not run yet, in order */
	unsigned nq;
	struct dlv_runner run;
	struct slot_layout lay;
	uint64_t block_first[NSAMPLES + 1]; /* one sample a block */
	struct bld_limits limits;  /* the daemon's (what a reload sets) */
	const struct dlv_dev_ops *dev_ops; /* device slots' ops, or NULL: none */
} t;

/* A member as a client sees it. */
struct mem {
	struct dlv_member *m;
	bool ready;
	int rc;
	struct feed_shm_ctl *ctl; /* mapped read-only */
	struct feed_shm_rel *rel; /* mapped writable */
	uint64_t rel_head;        /* what we released */
	struct feed_ring ready_ring; /* read as libfeedclient does (feed_ring.h) */
	struct feed_ring rel_ring;   /* written as libfeedclient does */
};

static int q_submit(void *arg, struct pool_job *job)
{
	(void)arg;
	ck_assert_uint_lt(t.nq, MAXQ);
	t.q[t.nq++] = job;
	return 0;
}

/* Runs queued job i (taken off first: it may queue more). */
static void q_run(unsigned i)
{
	ck_assert_uint_lt(i, t.nq);
	struct pool_job *j = t.q[i];

	void (*done)(struct pool_job *) = j->done;  /* read first: run() may free j */

	memmove(&t.q[i], &t.q[i + 1], (t.nq - i - 1) * sizeof(t.q[0]));
	t.nq--;
	j->run(j, &t.w);
	if (done)
		done(j);
}

static void q_drain(void)
{
	while (t.nq)
		q_run(0);
}

static void write_dataset(void)
{
	struct fmt_schema s = {.nfields = 2};
	struct fmt_writer *w;
	struct feed_err err = {0};

	s.fields[0] = (struct fmt_field){.name = "image", .dtype = FEED_DTYPE_U8, .rank = 2,
					 .shape = {4, 4}};
	s.fields[1] = (struct fmt_field){.name = "label", .dtype = FEED_DTYPE_I64};
	ck_assert_msg(fmt_writer_new(t.data, &s, &(struct fmt_writer_opts){.name = "unit",
						       .block_records = 1}, &w, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < NSAMPLES; i++) {
		uint8_t image[16];
		int64_t label = (int64_t)i;
		for (int k = 0; k < 16; k++)  /* not compressible to nothing */
			image[k] = (uint8_t)(i * 31 + k * 7);
		struct fmt_value v[2] = {{image, sizeof(image)}, {&label, sizeof(label)}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
}

static void setup(void)
{
	struct feed_err err = {0};

	memset(&t, 0, sizeof(t));
	snprintf(t.dir, sizeof(t.dir), "/tmp/feedd-dlv-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(t.dir));
	snprintf(t.data, sizeof(t.data), "%s/ds", t.dir);
	write_dataset();
	ck_assert_msg(fmt_dataset_open(t.data, &t.ds, &err) == 0, "%s", err.msg);
	ck_assert_msg(pipe_plan_text("", fmt_dataset_info(t.ds)->schema, &t.plan, &err) == 0,
		      "%s", err.msg);
	ck_assert_int_eq(cache_new(1 << 20, &t.cache), 0);
	ck_assert_int_eq(uv_loop_init(&t.loop), 0);
	t.lg = (struct log){.level = LOG_LEVEL_ERROR, .fd = 2};
	ck_assert_int_eq(pool_new(&t.loop, &t.lg, 1, &t.pool, &err), 0);
	pool_thread_roles(POOL_ROLE_LOOP | POOL_ROLE_WORKER);  /* we run the jobs */
	ck_assert_int_eq(fmt_decoder_new(&t.w.dec), 0);
	bld_limits_init(&t.limits);
	t.run = (struct dlv_runner){.submit = q_submit};
	for (uint64_t b = 0; b <= NSAMPLES; b++)
		t.block_first[b] = b;
}

static void teardown(void)
{
	char cmd[128];

	ck_assert_uint_eq(t.nq, 0);
	pool_stop(t.pool);
	uv_run(&t.loop, UV_RUN_DEFAULT);
	pool_free(t.pool);
	uv_loop_close(&t.loop);
	fmt_decoder_free(t.w.dec);
	if (t.w.ctx_free)
		t.w.ctx_free(t.w.ctx);
	free(t.w.comp);
	free(t.w.scratch);
	cache_free(t.cache);
	fmt_dataset_close(t.ds);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t.dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* A delivery of `credits` slots of BATCH samples, sequential order,
 * epochs (0: no end). */
static struct dlv *open_dlv_order(uint32_t credits, bool group, uint64_t epochs,
				  enum ord_mode mode)
{
	const struct fmt_info *in = fmt_dataset_info(t.ds);
	struct feed_err err = {0};
	struct dlv *d;

	ck_assert_msg(layout_compute(&t.plan.out, BATCH, credits, &t.lay, &err) == 0, "%s",
		      err.msg);
	if (group)
		ck_assert_int_eq(layout_page_slots(&t.lay, &err), 0);
	struct dlv_spec sp = {
		.credits = credits, .seed = 1, .group = group, .uid = getuid(), .max_bad = 1,
		.sched = {.ord = {.n = in->num_samples, .seed = 1, .mode = mode,
				  .rank = 0, .world = 1, .batch = BATCH, .window = 2,
				  .block_first = t.block_first, .nblocks = NSAMPLES},
			  .epochs = epochs},
		.runner = &t.run,
		.limits = &t.limits,
		/* any non-NULL pointer: the test's ops never look at it */
		.dev = t.dev_ops ? (struct dsl *)&t : NULL,
		.dev_ops = t.dev_ops,
	};
	snprintf(sp.sched.ord.version, sizeof(sp.sched.ord.version), "%s", in->version);
	ck_assert_msg(dlv_new(t.ds, &t.plan, &t.lay, &sp, t.cache, t.pool, &d, &err) == 0, "%s",
		      err.msg);
	return d;
}

static struct dlv *open_dlv(uint32_t credits, bool group, uint64_t epochs)
{
	return open_dlv_order(credits, group, epochs, ORD_SEQUENTIAL);
}

static void on_ready(void *arg, int rc, const char *msg)
{
	struct mem *m = arg;

	m->ready = true;
	m->rc = rc;
	ck_assert_msg(rc == 0, "ready: %s", msg);
}

/* Maps an added member's regions as a client does. */
static void map_member(struct mem *m)
{
	struct dlv_fds fds;

	dlv_member_fds(m->m, &fds);
	m->ctl = mmap(NULL, t.lay.ctl_bytes, PROT_READ, MAP_SHARED, fds.ctl, 0);
	m->rel = mmap(NULL, t.lay.rel_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds.rel, 0);
	ck_assert(m->ctl != MAP_FAILED && m->rel != MAP_FAILED);
	m->ready_ring = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)m->ctl + t.lay.ring_off),
		.head = (_Atomic uint64_t *)&m->ctl->ready_head,
		.waiting = &m->rel->client_waiting,
		.cap = t.lay.ring_cap};
	m->rel_ring = (struct feed_ring){
		.entry = (_Atomic uint64_t *)((uint8_t *)m->rel + t.lay.rel_off),
		.head = &m->rel->rel_head,
		.waiting = &m->rel->daemon_waiting,
		.cap = t.lay.rel_cap};
}

/* Joins d (its regions made by the queued job, run here), adds the
 * member and maps its regions. */
static void join(struct dlv *d, struct mem *m, uint64_t epochs, uint32_t credits)
{
	struct feed_err err = {0};
	uint64_t epoch, index;

	memset(m, 0, sizeof(*m));
	ck_assert_int_eq(dlv_join(d, epochs, credits, on_ready, m, &m->m, &err), 0);
	q_drain();
	ck_assert(m->ready);
	ck_assert_msg(dlv_member_add(m->m, &epoch, &index, &err) == 0, "%s", err.msg);
	map_member(m);
}

static void unmap(struct mem *m)
{
	munmap(m->ctl, t.lay.ctl_bytes);
	munmap(m->rel, t.lay.rel_bytes);
}

static uint64_t head(const struct mem *m)
{
	return feed_ring_head(&m->ready_ring);
}

/* Ready entry i (below head()), read through the client's protocol. */
static uint64_t entry(const struct mem *m, uint64_t i)
{
	uint64_t tail = i;

	return feed_ring_take(&m->ready_ring, &tail);
}

static const struct feed_shm_slot *header(const struct mem *m, uint32_t slot)
{
	return (const struct feed_shm_slot *)((const uint8_t *)m->ctl +
					      layout_hdr_off(&t.lay, slot));
}

/* Releases the batch of ready entry i, as libfeedclient would. */
static void release(struct mem *m, uint64_t i)
{
	feed_ring_put(&m->rel_ring, &m->rel_head, entry(m, i));
	feed_ring_publish(&m->rel_ring, m->rel_head);
	dlv_member_on_release(m->m);
}

static void close_dlv(struct dlv *d, struct mem *ms, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		dlv_member_leave(ms[i].m);
		unmap(&ms[i]);
	}
	dlv_close(d);
	q_drain();  /* the batches in flight, then the teardown job */
}

/* Built newest first (the delivery queues a turn's jobs in batch order:
 * the test runs the last queued first), published oldest first, each with
 * its own header. */
START_TEST(test_delivery_unit_publish_order)
{
	struct dlv *d = open_dlv(4, false, 1);
	struct mem m;

	join(d, &m, 1, 4);
	dlv_start(d);
	ck_assert_uint_eq(t.nq, 4);
	for (int k = 0; k < 3; k++) {
		q_run(t.nq - 1);
		ck_assert_msg(head(&m) == 0, "published after %d builds, batch 0 not built", k + 1);
	}
	q_run(0);
	ck_assert_uint_eq(head(&m), 4);
	for (uint64_t i = 0; i < 4; i++) {
		uint64_t e = entry(&m, i);
		const struct feed_shm_slot *h = header(&m, feed_ring_slot(e));
		ck_assert_uint_eq(h->index, i);
		ck_assert_uint_eq(h->epoch, 0);
		ck_assert_uint_eq(h->gen, feed_ring_gen(e));
		ck_assert_uint_eq(h->sample[0], i * BATCH);
	}
	for (uint64_t i = 0; i < 4; i++)
		release(&m, i);
	ck_assert_uint_eq(t.nq, 4);
	q_run(2);  /* 6, 4, 7, 5 */
	q_run(0);
	ck_assert_uint_eq(head(&m), 5);
	q_run(1);
	ck_assert_uint_eq(head(&m), 5);
	q_run(0);
	ck_assert_uint_eq(head(&m), 10);  /* 8 batches, the epoch's end, the stream's */
	for (uint64_t i = 4; i < 8; i++)
		ck_assert_uint_eq(header(&m, feed_ring_slot(entry(&m, i)))->index, i);
	ck_assert_uint_eq(feed_ring_slot(entry(&m, 8)), FEED_READY_EPOCH_END);
	ck_assert_uint_eq(feed_ring_slot(entry(&m, 9)), FEED_READY_STREAM_END);
	close_dlv(d, &m, 1);
}
END_TEST

/* Block-window: the open's job lays the first epoch out (the member is
 * ready with it); the next epoch's table is a job of its own, queued with
 * the first batches, and the epoch turn waits for it: with it held back,
 * epoch 0 is delivered whole and nothing more is built; once it runs,
 * epoch 1 follows. Each epoch reads every sample once. */
START_TEST(test_delivery_unit_block_window_table_ahead)
{
	struct dlv *d = open_dlv_order(4, false, 2, ORD_BLOCK_WINDOW);
	bool seen[2][NSAMPLES] = {{false}};
	struct mem m;
	uint64_t next = 0;

	join(d, &m, 2, 4);
	dlv_start(d);
	ck_assert_uint_eq(t.nq, 5);  /* 4 batches and epoch 1's table */
	void (*batch_run)(struct pool_job *, struct pool_worker *) = t.q[0]->run;
	unsigned table = 0;
	while (table < t.nq && t.q[table]->run == batch_run)
		table++;
	ck_assert_uint_lt(table, t.nq);
	struct pool_job *tj = t.q[table];
	memmove(&t.q[table], &t.q[table + 1], (t.nq - table - 1) * sizeof(t.q[0]));
	t.nq--;
	for (int round = 0; round < 2; round++) {
		while (t.nq) {
			q_run(0);
			for (; next < head(&m); next++) {
				uint64_t e = entry(&m, next);
				if (feed_ring_slot(e) >= FEED_READY_EPOCH_END)
					continue;
				const struct feed_shm_slot *h = header(&m, feed_ring_slot(e));
				for (uint32_t i = 0; i < h->nsamples; i++) {
					ck_assert(!seen[h->epoch][h->sample[i]]);
					seen[h->epoch][h->sample[i]] = true;
				}
				release(&m, next);
			}
		}
		if (round == 0) {  /* epoch 0 whole, then the wait */
			ck_assert_uint_eq(head(&m), 9);
			ck_assert_uint_eq(feed_ring_slot(entry(&m, 8)), FEED_READY_EPOCH_END);
			t.q[t.nq++] = tj;
		}
	}
	ck_assert_uint_eq(head(&m), 19);  /* 16 batches, two epoch ends, the stream end */
	for (int e = 0; e < 2; e++)
		for (int i = 0; i < NSAMPLES; i++)
			ck_assert_msg(seen[e][i], "epoch %d: sample %d never read", e, i);
	close_dlv(d, &m, 1);
}
END_TEST

/* Flips a byte inside block b's compressed bytes in the shard (one shard:
 * blocks follow its 64-byte header back to back, format/FORMAT.md). */
static void corrupt_block(uint64_t b)
{
	char path[256];
	uint64_t off = 64;
	struct fmt_block_meta bm;
	uint8_t byte;

	for (uint64_t i = 0; i < b; i++) {
		ck_assert_int_eq(fmt_dataset_block_meta(t.ds, i, &bm), 0);
		off += bm.comp_size;
	}
	ck_assert_int_eq(fmt_dataset_block_meta(t.ds, b, &bm), 0);
	off += bm.comp_size / 2;
	snprintf(path, sizeof(path), "%s/%s", t.data, fmt_dataset_shard_file(t.ds, 0));
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &byte, 1, (off_t)off), 1);
	byte ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)off), 1);
	close(fd);
}

/* Batches 1 and 2 fail (a corrupt block each), built 2 first: the members
 * get batch 0, then batch 1's error, never batch 2's. */
START_TEST(test_delivery_unit_first_failure_in_batch_order)
{
	struct dlv *d = open_dlv(4, false, 1);
	struct dlv_stats st;
	struct mem m;

	corrupt_block(1 * BATCH + 1);  /* sample 5: batch 1 */
	corrupt_block(2 * BATCH + 1);  /* sample 9: batch 2 */
	join(d, &m, 1, 4);
	dlv_start(d);
	ck_assert_uint_eq(t.nq, 4);
	q_run(3);  /* batch 3 (queued in batch order) */
	q_run(2);  /* batch 2: fails */
	ck_assert_uint_eq(head(&m), 0);
	q_run(1);  /* batch 1: fails, earlier */
	ck_assert_uint_eq(head(&m), 0);
	q_run(0);  /* batch 0 */
	ck_assert_uint_eq(head(&m), 2);
	ck_assert_uint_eq(header(&m, feed_ring_slot(entry(&m, 0)))->index, 0);
	ck_assert_uint_eq(feed_ring_slot(entry(&m, 1)), FEED_READY_ERROR);
	ck_assert_int_eq(m.ctl->error_code, -EBADMSG);
	ck_assert_msg(strstr(m.ctl->error_msg, "block 5:") && !strstr(m.ctl->error_msg, "block 9"),
		      "reported: %s", m.ctl->error_msg);
	dlv_stats(d, &st);
	ck_assert_int_eq(st.error, -EBADMSG);
	ck_assert_ptr_nonnull(strstr(st.error_msg, "block 5:"));
	ck_assert_uint_eq(t.nq, 0);  /* nothing more is built */
	close_dlv(d, &m, 1);
}
END_TEST

/* Replaces the test's dataset by NSAMPLES encoded 64x48 JPEGs (the
 * small.jpg fixture, 3072 pixels) and its plan by one that decodes them. */
static void use_images(void)
{
	struct fmt_schema s = {.nfields = 2,
			       .fields = {{.name = "image", .dtype = FEED_DTYPE_U8,
					   .variable = true, .image = true},
					  {.name = "label", .dtype = FEED_DTYPE_I64}}};
	struct fmt_writer *w;
	struct feed_err err = {0};
	char path[512];
	static uint8_t jpg[1 << 16];

	snprintf(path, sizeof(path), "%s/small.jpg", getenv("FEED_IMAGES"));
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "fixture %s", path);
	size_t len = fread(jpg, 1, sizeof(jpg), f);
	fclose(f);
	ck_assert(len > 0 && len < sizeof(jpg));
	snprintf(t.data, sizeof(t.data), "%s/imgs", t.dir);
	ck_assert_msg(fmt_writer_new(t.data, &s, &(struct fmt_writer_opts){.name = "imgs",
						       .block_records = 1}, &w, &err) == 0, "%s", err.msg);
	for (int64_t i = 0; i < NSAMPLES; i++) {
		struct fmt_value v[2] = {{jpg, len}, {&i, sizeof(i)}};
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(fmt_writer_note_image(w, 0, 64, 48, &err), 0);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
	fmt_dataset_close(t.ds);
	ck_assert_msg(fmt_dataset_open(t.data, &t.ds, &err) == 0, "%s", err.msg);
	ck_assert_msg(pipe_plan_text("decode | center_crop(size=16)",
				     fmt_dataset_info(t.ds)->schema, &t.plan, &err) == 0, "%s",
		      err.msg);
}

/* Device slots that do nothing but stand for a reload arriving while a
 * job runs: before_build, called after the job started and before it
 * builds, lowers limits.max_pixels under the image's 3072 pixels. */
static int dev_make(struct dsl *s, struct feed_err *err)
{
	(void)s;
	(void)err;
	return 0;
}

static int dev_reload_mid_job(struct dsl *s, uint32_t slot, struct feed_err *err)
{
	(void)s;
	(void)slot;
	(void)err;
	bld_limits_set(&t.limits, 1000);
	return 0;
}

static int dev_after(struct dsl *s, uint32_t slot, const struct feed_shm_slot *hdr,
		     uint8_t *data, uint64_t data_bytes, struct feed_err *err)
{
	(void)s, (void)slot, (void)hdr, (void)data, (void)data_bytes, (void)err;
	return 0;
}

static void dev_abandon(struct dsl *s)
{
	(void)s;
}

static void dev_free(struct dsl *s, struct region *data)
{
	(void)s;
	(void)data;  /* the delivery unmaps it */
}

static const struct dlv_dev_ops reload_ops = {
	.make = dev_make, .before_build = dev_reload_mid_job, .after_build = dev_after,
	.abandon = dev_abandon, .free = dev_free};

/* A job takes the limits when it starts: batch 0, started under the
 * default cap, is built whole although a reload lowered the cap under
 * the image's size while it ran; batch 1, started after the reload, fails
 * with -E2BIG naming the limit. */
START_TEST(test_delivery_unit_job_keeps_limits_it_started_with)
{
	struct mem m;

	use_images();
	t.dev_ops = &reload_ops;
	struct dlv *d = open_dlv(2, false, 1);
	join(d, &m, 1, 2);
	dlv_start(d);
	ck_assert_uint_eq(t.nq, 2);
	q_run(0);  /* batch 0 */
	ck_assert_uint_eq(bld_limits_snap(&t.limits).img_max_pixels, 1000);
	ck_assert_uint_eq(head(&m), 1);
	ck_assert_msg(feed_ring_slot(entry(&m, 0)) < t.lay.nslots, "batch 0 failed: %s",
		      m.ctl->error_msg);
	const struct feed_shm_slot *h = header(&m, feed_ring_slot(entry(&m, 0)));
	ck_assert_uint_eq(h->index, 0);
	ck_assert_uint_eq(h->nsamples, BATCH);
	q_run(0);  /* batch 1 */
	ck_assert_uint_eq(head(&m), 2);
	ck_assert_uint_eq(feed_ring_slot(entry(&m, 1)), FEED_READY_ERROR);
	ck_assert_int_eq(m.ctl->error_code, -E2BIG);
	ck_assert_msg(strstr(m.ctl->error_msg, "max_pixels"), "reported: %s", m.ctl->error_msg);
	close_dlv(d, &m, 1);
}
END_TEST

/* A group's slot goes back (a new batch is built into it) only when both
 * members it went to released it. */
START_TEST(test_delivery_unit_group_masks)
{
	struct dlv *d = open_dlv(2, true, 0);
	struct dlv_member_stats ms;
	struct mem m[2];

	join(d, &m[0], 0, 2);
	join(d, &m[1], 0, 2);
	dlv_start(d);
	q_drain();
	ck_assert_uint_eq(head(&m[0]), 2);
	ck_assert_uint_eq(head(&m[1]), 2);
	ck_assert_uint_eq(entry(&m[0], 0), entry(&m[1], 0));
	release(&m[0], 0);
	ck_assert_uint_eq(t.nq, 0);  /* member 1 still holds it */
	dlv_member_stats(m[0].m, &ms);
	ck_assert_uint_eq(ms.held, 1);
	dlv_member_stats(m[1].m, &ms);
	ck_assert_uint_eq(ms.held, 2);
	release(&m[1], 0);
	ck_assert_uint_eq(t.nq, 1);  /* free: the next batch goes into it */
	q_drain();
	ck_assert_uint_eq(head(&m[0]), 3);
	ck_assert_uint_eq(head(&m[1]), 3);
	ck_assert_uint_eq(feed_ring_slot(entry(&m[0], 2)), feed_ring_slot(entry(&m[0], 0)));
	ck_assert_uint_eq(header(&m[1], feed_ring_slot(entry(&m[1], 2)))->index, 2);
	close_dlv(d, m, 2);
}
END_TEST

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Member 0 took one of its two batches and released nothing; member 1
 * released both. Past the timeout member 0 is detached: it keeps the one
 * it took (never rebuilt under it), the other goes back, it receives
 * nothing more, and its control region says why; member 1 goes on. */
START_TEST(test_delivery_unit_detach)
{
	struct dlv *d = open_dlv(2, true, 0);
	struct dlv_member_stats ms;
	struct mem m[2];

	join(d, &m[0], 0, 2);
	join(d, &m[1], 0, 2);
	dlv_start(d);
	q_drain();
	uint32_t kept = feed_ring_slot(entry(&m[0], 0));
	atomic_store(&m[0].rel->ready_tail, 1);  /* took entry 0, not entry 1 */
	release(&m[1], 0);
	release(&m[1], 1);
	ck_assert_uint_eq(t.nq, 0);
	uint64_t now = mono_ns();
	ck_assert_uint_eq(dlv_detach_idle(d, now, 5000000000ull, "g"), 0);  /* samples only */
	ck_assert_uint_eq(dlv_detach_idle(d, now + 5000000000ull, 5000000000ull, "g"), 0);
	ck_assert_uint_eq(dlv_detach_idle(d, now + 5000000001ull, 5000000000ull, "g"), 1);
	dlv_member_stats(m[0].m, &ms);
	ck_assert_int_eq(ms.state, DLV_MEMBER_DETACHED);
	ck_assert_int_eq(ms.error, -ENOLINK);
	ck_assert_uint_eq(ms.held, 1);
	ck_assert_int_eq(m[0].ctl->error_code, -ENOLINK);
	ck_assert_ptr_nonnull(strstr(m[0].ctl->error_msg, "group 'g'"));
	ck_assert_uint_eq(t.nq, 1);  /* the slot it had not taken */
	uint64_t h0 = head(&m[0]);
	q_drain();
	ck_assert_uint_eq(head(&m[0]), h0);
	ck_assert_uint_eq(head(&m[1]), 3);
	ck_assert_uint_ne(feed_ring_slot(entry(&m[1], 2)), kept);
	dlv_member_stats(m[1].m, &ms);
	ck_assert_int_eq(ms.state, DLV_MEMBER_ACTIVE);
	close_dlv(d, m, 2);
}
END_TEST

/* Releases ready entry i without ringing the doorbell: the release waits
 * in the ring until the detach timer's own look (dlv_detach_idle). */
static void release_quiet(struct mem *m, uint64_t i)
{
	feed_ring_put(&m->rel_ring, &m->rel_head, entry(m, i));
	feed_ring_publish(&m->rel_ring, m->rel_head);
}

/* Idleness counts the member's releases, never clock readings of other
 * threads: a member that releases before each tick of the timer is never
 * detached, whatever the times passed, even when its releases are read
 * by the tick itself (issue 28: a time read before the lock, a release
 * stamped after it, and the difference wrapped); one that releases
 * nothing is detached once the timer saw it quiet for the timeout. */
START_TEST(test_delivery_unit_detach_counts_releases)
{
	struct dlv *d = open_dlv(4, true, 0);
	struct dlv_member_stats ms;
	struct mem m[2];
	const uint64_t timeout = 4000000000ull, step = timeout / 2;

	join(d, &m[0], 0, 4);
	join(d, &m[1], 0, 4);
	dlv_start(d);
	q_drain();
	ck_assert_uint_eq(head(&m[1]), 4);
	uint64_t t0 = mono_ns();  /* read before the release that tick 0 reads */
	for (uint64_t k = 0; k <= 4; k++) {
		if (k < 4)
			release_quiet(&m[1], k);
		unsigned n = dlv_detach_idle(d, t0 + k * step, timeout, "g");
		dlv_member_stats(m[1].m, &ms);
		ck_assert_msg(ms.state == DLV_MEMBER_ACTIVE, "tick %llu: member 1 released before "
			      "it and was detached: %s", (unsigned long long)k, ms.error_msg);
		dlv_member_stats(m[0].m, &ms);
		/* member 0 quiet since tick 0: detached once more than the timeout passed */
		ck_assert_int_eq(ms.state, k * step > timeout ? DLV_MEMBER_DETACHED : DLV_MEMBER_ACTIVE);
		ck_assert_uint_eq(n, k * step > timeout && (k - 1) * step <= timeout ? 1 : 0);
	}
	q_drain();
	close_dlv(d, m, 2);
}
END_TEST

/* A member that took every batch sent to it and may take more waits for
 * the daemon: however slow the next build (here: queued, not run), it is
 * not idle, even holding a batch (the client keeps its last while asking
 * for the next; issue 28's CI: a build slowed past the group timeout
 * detached the member waiting for it). Once built batches wait untaken
 * for it, the same quiet time detaches it. */
START_TEST(test_delivery_unit_detach_spares_member_waiting_for_build)
{
	struct dlv *d = open_dlv(4, true, 0);
	struct dlv_member_stats ms;
	struct mem m[1];
	const uint64_t timeout = 1000000000ull;

	join(d, &m[0], 0, 4);
	dlv_start(d);
	q_drain();
	ck_assert_uint_eq(head(&m[0]), 4);
	atomic_store(&m[0].rel->ready_tail, 4);  /* took all four */
	for (uint64_t i = 0; i < 3; i++)
		release(&m[0], i);  /* keeps the last */
	ck_assert_uint_eq(t.nq, 3);  /* three builds under way, none done */
	uint64_t now = mono_ns();
	for (uint64_t k = 0; k <= 4; k++)
		ck_assert_uint_eq(dlv_detach_idle(d, now + k * timeout, timeout, "g"), 0);
	dlv_member_stats(m[0].m, &ms);
	ck_assert_int_eq(ms.state, DLV_MEMBER_ACTIVE);
	q_drain();  /* built: three batches wait for it, untaken */
	ck_assert_uint_eq(head(&m[0]), 7);
	ck_assert_uint_eq(dlv_detach_idle(d, now + 5 * timeout, timeout, "g"), 1);
	dlv_member_stats(m[0].m, &ms);
	ck_assert_int_eq(ms.state, DLV_MEMBER_DETACHED);
	close_dlv(d, m, 1);
}
END_TEST

/* A group member resumed from its own token: ahead of the group it lets
 * the group's batches before its position go past it and receives from
 * exactly there; behind the group it is refused (those batches are gone),
 * naming both positions. */
START_TEST(test_delivery_unit_resumed_member_own_position)
{
	struct dlv *d = open_dlv(2, true, 0);
	struct feed_err err = {0};
	struct mem m[2], late;
	uint64_t epoch, index;

	join(d, &m[0], 0, 2);
	dlv_start(d);
	q_drain();
	ck_assert_uint_eq(head(&m[0]), 2);  /* batches 0 and 1 */
	/* resumed at batch 4 (position 4 * BATCH): skips 2 and 3 */
	memset(&m[1], 0, sizeof(m[1]));
	ck_assert_int_eq(dlv_join(d, 0, 2, on_ready, &m[1], &m[1].m, &err), 0);
	q_drain();
	dlv_member_resume_at(m[1].m, 0, 4 * BATCH);
	ck_assert_msg(dlv_member_add(m[1].m, &epoch, &index, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(epoch, 0);
	ck_assert_uint_eq(index, 4);
	map_member(&m[1]);
	for (uint64_t i = 0; i < 4; i++) {  /* member 0 reads batches 0..3 */
		release(&m[0], i);
		q_drain();
	}
	ck_assert_uint_ge(head(&m[1]), 1);
	const struct feed_shm_slot *h = header(&m[1], feed_ring_slot(entry(&m[1], 0)));
	ck_assert_uint_eq(h->index, 4);  /* its first: exactly its own position */
	ck_assert_uint_eq(h->position, 4 * BATCH);
	/* resumed at batch 1: the group published past it */
	memset(&late, 0, sizeof(late));
	ck_assert_int_eq(dlv_join(d, 0, 2, on_ready, &late, &late.m, &err), 0);
	q_drain();
	dlv_member_resume_at(late.m, 0, 1 * BATCH);
	ck_assert_int_eq(dlv_member_add(late.m, &epoch, &index, &err), -EALREADY);
	ck_assert_msg(strstr(err.msg, "past this stream's resume position (epoch 0 position 4)"),
		      "%s", err.msg);
	dlv_member_leave(late.m);
	close_dlv(d, m, 2);
}
END_TEST

/* A plain stream whose client writes its release head backwards, or past
 * the ring's capacity, is stopped with an error naming it. */
static void tampered(uint64_t (*bad)(uint64_t cap), const char *needle)
{
	struct dlv *d = open_dlv(2, false, 0);
	struct dlv_member_stats ms;
	struct dlv_stats st;
	struct mem m;

	join(d, &m, 0, 2);
	dlv_start(d);
	q_drain();
	release(&m, 0);
	q_drain();
	atomic_store(&m.rel->rel_head, bad(t.lay.rel_cap));
	dlv_member_on_release(m.m);
	dlv_member_on_release(m.m);  /* again: still stopped, nothing breaks */
	dlv_member_stats(m.m, &ms);
	ck_assert_int_eq(ms.state, DLV_MEMBER_STOPPED);
	ck_assert_int_eq(ms.error, -EPROTO);
	ck_assert_msg(strstr(ms.error_msg, needle), "%s", ms.error_msg);
	ck_assert_int_eq(m.ctl->error_code, -EPROTO);
	dlv_stats(d, &st);
	ck_assert_int_eq(st.error, -EPROTO);
	ck_assert_uint_eq(t.nq, 0);
	close_dlv(d, &m, 1);
}

static uint64_t head_backwards(uint64_t cap)
{
	(void)cap;
	return 0;  /* one was released: the daemon's tail is 1 */
}

static uint64_t head_too_far(uint64_t cap)
{
	return 1 + cap + 1;
}

START_TEST(test_delivery_unit_tampered_heads)
{
	tampered(head_backwards, "moved backwards");
}
END_TEST

START_TEST(test_delivery_unit_tampered_heads_past_capacity)
{
	tampered(head_too_far, "past the");
}
END_TEST

static Suite *delivery_unit_suite(void)
{
	Suite *s = suite_create("delivery_unit");
	TCase *tc = tcase_create("delivery_unit");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_delivery_unit_publish_order);
	tcase_add_test(tc, test_delivery_unit_first_failure_in_batch_order);
	tcase_add_test(tc, test_delivery_unit_job_keeps_limits_it_started_with);
	tcase_add_test(tc, test_delivery_unit_block_window_table_ahead);
	tcase_add_test(tc, test_delivery_unit_group_masks);
	tcase_add_test(tc, test_delivery_unit_detach);
	tcase_add_test(tc, test_delivery_unit_detach_counts_releases);
	tcase_add_test(tc, test_delivery_unit_detach_spares_member_waiting_for_build);
	tcase_add_test(tc, test_delivery_unit_resumed_member_own_position);
	tcase_add_test(tc, test_delivery_unit_tampered_heads);
	tcase_add_test(tc, test_delivery_unit_tampered_heads_past_capacity);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(delivery_unit_suite)
