/*
 * check_ipc.c: CUDA IPC delivery (feed_stream_opts.device, feed_batch_device)
 * between a real feedd and this process, both loading the test double of
 * the CUDA driver (tests/gpu_double/fake_cuda.c, through FEED_CUDA_DRIVER):
 * its device memory is shared memory and its interprocess events live in
 * shared memory, so handles really cross from feedd to the client, the
 * client's stream really waits for feedd's ready event and feedd's stream
 * really waits for the client's done word (cuStreamWaitValue32 on the
 * word the client writes with cuStreamWriteValue32). A test process
 * without FAKE_CUDA_EVENTS=auto holds what it enqueues on its own CUDA
 * streams (events pending, done writes kept) until it calls
 * fake_complete(), as a consumer whose stream is still busy. feedd records with
 * FAKE_CUDA_EVENTS=auto (its copies and kernels are done when enqueued);
 * its double's counters are in a file (FAKE_CUDA_STATS) this test maps.
 * Each Check test is a fresh process: the driver is loaded anew, with the
 * environment set before the first call.
 */

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "convert.h"
#include "fake_cuda.h"
#include "feed/client.h"
#include "feed/gpu.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define N H_SAMPLES    /* samples of h_make_kinds_dataset() */
#define C 3           /* channels of its image field */

static const struct fake_cuda_stats *(*fake_stats)(void);
static void (*fake_complete)(void);
static const struct fake_cuda_stats *daemon_stats; /* feedd's double's counters */
static char stats_path[300];
static bool daemon_queue; /* feedd's double queues a stream's work behind a wait */

static bool kernels_built(void)
{
	struct feed_gpu_info gi;
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	return gi.kernels;
}

/* feedd with the double (events complete at record, counters in a file)
 * or with daemon_driver instead; then this process's double, set up by the
 * environment the caller left (read at our first driver call). */
static void ipc_start_cfg(const char *daemon_driver, const char *limits);

static void ipc_start(const char *daemon_driver)
{
	ipc_start_cfg(daemon_driver, NULL);
}

/* ipc_start(), feedd configured by a file with limits (YAML lines under
 * "limits:") when not NULL. */
static void ipc_start_cfg(const char *daemon_driver, const char *limits)
{
	static char arg[300];
	const char *lib = getenv("FEED_FAKE_CUDA");
	ck_assert_msg(lib, "FEED_FAKE_CUDA (the double's path) not set");
	snprintf(arg, sizeof(arg), "%s/ipcdata", h.dir);
	h_make_kinds_dataset(arg);
	snprintf(arg, sizeof(arg), "kinds=%s/ipcdata", h.dir);
	snprintf(stats_path, sizeof(stats_path), "%s/feedd.fake_cuda", h.dir);

	const char *ours = getenv("FAKE_CUDA_EVENTS"); /* this process's, set by the test */
	bool ours_auto = ours && !strcmp(ours, "auto");
	setenv("FEED_CUDA_DRIVER", daemon_driver ? daemon_driver : lib, 1);
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	setenv("FAKE_CUDA_STATS", stats_path, 1);
	if (daemon_queue)
		setenv("FAKE_CUDA_QUEUE", "1", 1);
	if (limits) {
		char text[600];
		snprintf(text, sizeof(text), "limits:\n%sdatasets:\n  - name: kinds\n"
			 "    path: ipcdata\n", limits);
		const char *cfg = h_write_file("feedd.yaml", text);
		h_start((const char *[]){"--config", cfg, "--workers", "2", NULL});
	} else {
		h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	}
	if (!ours_auto)
		unsetenv("FAKE_CUDA_EVENTS");
	unsetenv("FAKE_CUDA_STATS");
	unsetenv("FAKE_CUDA_QUEUE");
	setenv("FEED_CUDA_DRIVER", lib, 1);
	if (!daemon_driver) {
		ck_assert_msg(h_log_has("CUDA IPC on"), "%s", h_file_text(h.log));
		daemon_stats = fake_cuda_stats_map(stats_path);
		ck_assert_ptr_nonnull(daemon_stats);
	}
	void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL); /* the handle libfeedclient gets */
	ck_assert_msg(dl, "%s", dlerror());
	*(void **)&fake_stats = dlsym(dl, "fake_cuda_stats");
	*(void **)&fake_complete = dlsym(dl, "fake_cuda_complete_events");
	ck_assert(fake_stats && fake_complete);
}

/* feedd again, as ipc_start() made it (after a kill), the double set up
 * for it; this process's double is loaded already. */
static void ipc_restart(void)
{
	static char arg[300];
	snprintf(arg, sizeof(arg), "kinds=%s/ipcdata", h.dir);
	char *ours = getenv("FAKE_CUDA_EVENTS") ? strdup(getenv("FAKE_CUDA_EVENTS")) : NULL;
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	setenv("FAKE_CUDA_STATS", stats_path, 1);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	unsetenv("FAKE_CUDA_STATS");
	if (ours)
		setenv("FAKE_CUDA_EVENTS", ours, 1);
	else
		unsetenv("FAKE_CUDA_EVENTS");
	free(ours);
}

static const float mean[C] = {0.485f, 0.456f, 0.406f}, sd[C] = {0.229f, 0.224f, 0.225f};

static struct feed_stream_opts ipc_opts(uint32_t batch, uint32_t credits, int dtype, int layout)
{
	struct feed_stream_opts o = {.dataset = "kinds", .batch = batch, .credits = credits,
				     .epochs = 2};
	o.device = (struct feed_stream_device){.enable = true, .device = 0, .dtype = dtype,
					       .layout = layout, .nmean = C};
	memcpy(o.device.mean, mean, sizeof(mean));
	memcpy(o.device.std, sd, sizeof(sd));
	return o;
}

/* The device copy of b's image field equals the CPU twin's conversion of
 * its host copy, bit for bit (the double's kernels are the twins: what is
 * checked is that the right bytes went to the right slot, converted with
 * the stream's parameters). */
/* The CPU twin's conversion of b's image field (malloc'd), its size in
 * *ret_bytes. */
static uint8_t *want_image(struct feed_batch *b, int dtype, int layout, size_t *ret_bytes)
{
	struct feed_view hv;
	struct feed_convert cv;
	ck_assert_int_eq(feed_batch_field(b, 0, &hv), 0);
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, C, (enum feed_convert_dtype)dtype,
					   (enum feed_convert_layout)layout, mean, sd), 0);
	size_t n = feed_batch_size(b), bytes = n * feed_convert_sample_bytes(&cv);
	uint8_t *want = malloc(bytes);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, hv.data, n, NULL, want), 0);
	*ret_bytes = bytes;
	return want;
}

static void expect_image(struct feed_batch *b, const struct feed_view *dv, int dtype, int layout)
{
	size_t n = feed_batch_size(b), bytes;
	uint8_t *want = want_image(b, dtype, layout, &bytes);
	ck_assert_uint_eq(dv->bytes, bytes);
	ck_assert_int_eq(dv->dtype, dtype == FEED_TO_F32 ? FEED_DTYPE_FLOAT32 :
				    dtype == FEED_TO_F16 ? FEED_DTYPE_FLOAT16 : FEED_DTYPE_BFLOAT16);
	ck_assert_uint_eq(dv->rank, 4);
	ck_assert_uint_eq(dv->shape[0], n);
	if (layout == FEED_TO_NCHW)
		ck_assert(dv->shape[1] == C && dv->shape[2] == 4 && dv->shape[3] == 4);
	else
		ck_assert(dv->shape[1] == 4 && dv->shape[2] == 4 && dv->shape[3] == C);
	ck_assert_msg(!memcmp(dv->data, want, bytes), "batch %llu: device image differs",
		      (unsigned long long)feed_batch_index(b));
	free(want);
}

static void expect_rest(struct feed_conn *c, struct feed_batch *b, void *stream)
{
	struct feed_view hv, dv;
	size_t n = feed_batch_size(b);

	ck_assert_int_eq(feed_batch_device(b, 1, stream, &dv), 0);
	ck_assert_int_eq(feed_batch_field(b, 1, &hv), 0);
	ck_assert_int_eq(dv.dtype, FEED_DTYPE_INT64);
	ck_assert_uint_eq(dv.bytes, n * 5 * 8);
	for (size_t k = 0; k < n * 5; k++)
		ck_assert_int_eq(((const int64_t *)dv.data)[k], ((const uint16_t *)hv.data)[k]);
	ck_assert_int_eq(feed_batch_device(b, 2, stream, &dv), 0);
	ck_assert_int_eq(feed_batch_field(b, 2, &hv), 0);
	ck_assert_uint_eq(dv.bytes, n * 8);
	ck_assert(!memcmp(dv.data, hv.data, n * 8));
	ck_assert_int_eq(feed_batch_device(b, 3, stream, &dv), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "variable-length, on the host only"), "%s",
		      feed_errmsg(c));
}

/* What feedctl status shows of the one stream open: device as given. */
static void expect_status(struct feed_conn *c, const char *device, bool bytes)
{
	struct feed_status *full;
	ck_assert_int_eq(feed_status(c, &full), 0);
	ck_assert_uint_eq(full->count, 1);
	ck_assert_msg(strstr(full->streams[0].device, device), "status device '%s' lacks '%s'",
		      full->streams[0].device, device);
	ck_assert(bytes == (full->streams[0].device_bytes > 0));
	feed_status_free(full);
}

/* ipc_start(NULL), our events auto when events_auto; false without kernels. */
static bool ipc_begin(bool events_auto)
{
	if (events_auto)
		setenv("FAKE_CUDA_EVENTS", "auto", 1);
	ipc_start(NULL);
	return kernels_built();
}

/* A stream opened on c with device slots (asserted), as ipc_opts() makes it. */
static struct feed_stream *open_on_device(struct feed_conn *c, uint32_t batch, int dtype,
					  int layout, int epochs)
{
	struct feed_stream_opts o = ipc_opts(batch, 2, dtype, layout);
	o.epochs = epochs;
	struct feed_stream *st = h_stream_open(c, &o);
	ck_assert_int_eq(feed_stream_device(st, NULL), 1);
	return st;
}

/* st's next batch, its image field on the device tied to stream, in *dv. */
static struct feed_batch *next_on_device(struct feed_stream *st, void *stream,
					 struct feed_view *dv)
{
	struct feed_batch *b = h_next_batch(st);
	ck_assert_int_eq(feed_batch_device(b, 0, stream, dv), 0);
	return b;
}

/* n batches of st checked on the device and released (each completed if asked). */
static void take_on_device(struct feed_stream *st, int n, void *stream, int dtype, int layout,
			   bool complete)
{
	for (int i = 0; i < n; i++) {
		struct feed_view dv;
		struct feed_batch *b = next_on_device(st, stream, &dv);
		expect_image(b, &dv, dtype, layout);
		ck_assert_int_eq(feed_release(b), 0);
		if (complete)
			fake_complete(); /* its work on the batch has run */
	}
}

/* A malloc'd copy of dv's bytes. */
static uint8_t *copy_view(const struct feed_view *dv)
{
	uint8_t *saved = malloc(dv->bytes);
	ck_assert_ptr_nonnull(saved);
	memcpy(saved, dv->data, dv->bytes);
	return saved;
}

/* feedd stops cleanly, having freed every device allocation it made. */
static void expect_stop_all_freed(void)
{
	ck_assert_int_eq(h_stop(), 0);
	ck_assert_int_eq(daemon_stats->allocs, daemon_stats->frees);
}

/* feedd stops cleanly, having allocated nothing on the device. */
static void expect_stop_no_allocs(void)
{
	ck_assert_int_eq(h_stop(), 0);
	ck_assert_int_eq(daemon_stats->allocs, 0);
}

/* ------------------------------------------------------------------ */

/* Two epochs, every batch on the device, converted as asked, for each
 * dtype and layout; closing frees everything on both sides. */
START_TEST(test_ipc_batches_on_device)
{
	if (!ipc_begin(true))
		return; /* no fatbin: the GPU path is unusable by design */
	struct feed_conn *c = h_conn_new();
	static const int dt[3] = {FEED_TO_F32, FEED_TO_F16, FEED_TO_BF16};
	for (int t = 0; t < 3; t++) {
		int layout = t == 1 ? FEED_TO_NHWC : FEED_TO_NCHW;
		struct feed_stream_opts o = ipc_opts(3, 2, dt[t], layout);
		struct feed_stream *st = h_stream_open(c, &o);
		const char *why = NULL;
		ck_assert_int_eq(feed_stream_device(st, &why), 1);
		ck_assert_str_eq(why, "");
		int nb = 0;
		struct feed_batch *b;
		int r;
		while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
			if (r == FEED_END_OF_EPOCH)
				continue;
			ck_assert_msg(r == 0, "feed_next: %d", r);
			struct feed_view dv;
			ck_assert_int_eq(feed_batch_device(b, 0, NULL, &dv), 0);
			expect_image(b, &dv, dt[t], layout);
			expect_rest(c, b, NULL);
			ck_assert_int_eq(feed_release(b), 0);
			nb++;
		}
		ck_assert_int_eq(nb, 2 * 4); /* 10 samples in batches of 3, twice */
		ck_assert_int_eq(feed_stream_close(st), 0);
	}
	feed_disconnect(c);
	ck_assert_int_eq(fake_stats()->ipc_mem_opens, 3);
	ck_assert_int_eq(fake_stats()->ipc_mem_closes, 3);
	/* feedd freed each stream's slots and staging when it closed */
	expect_stop_all_freed();
	ck_assert_int_ge(daemon_stats->allocs, 6);
}
END_TEST

static bool daemon_blocked(void *arg)
{
	return __atomic_load_n(&daemon_stats->value_waits_blocked, __ATOMIC_ACQUIRE) >= *(int *)arg;
}

/* feedd has freed every device allocation it made (no stream holds any). */
static bool daemon_freed_all(void *arg)
{
	(void)arg;
	return __atomic_load_n(&daemon_stats->frees, __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(&daemon_stats->allocs, __ATOMIC_ACQUIRE);
}

/* Asserts that feedd's stream comes to wait for n done words (msg if not). */
static void expect_daemon_waits(int n, const char *msg)
{
	ck_assert_msg(h_wait_until(daemon_blocked, &n, H_DEADLINE_MS), "%s", msg);
}

/* Forks a consumer that ties (and releases) a device batch, signals, then pauses. */
static pid_t fork_consumer(uint32_t batch, int dtype, bool release)
{
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct feed_conn *c = NULL;
		struct feed_stream *st = NULL;
		struct feed_batch *b;
		struct feed_view dv;
		struct feed_stream_opts o = ipc_opts(batch, 2, dtype, FEED_TO_NCHW);
		o.epochs = 0;
		if (feed_connect(h.sock, &c) < 0 || feed_stream_open(c, &o, &st) < 0 ||
		    feed_stream_device(st, NULL) != 1 || feed_next(st, H_DEADLINE_MS, &b) < 0 ||
		    feed_batch_device(b, 0, (void *)0x77, &dv) < 0 ||
		    (release && (feed_release(b) < 0 || fake_stats()->value_writes_held != 1)))
			_exit(1);
		(void)!write(ready[1], "x", 1);
		pause(); /* killed here, holding b and its handles (or b's done write unrun) */
		_exit(2);
	}
	char x;
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &x, 1), 1);
	return pid;
}

/* Kills the consumer pid and reaps it, asserting it died of the signal. */
static void kill_consumer(pid_t pid)
{
	kill(pid, SIGKILL);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
}

/* feedd writes a device slot again only after the consumer's work on its
 * last batch has run: the done word the client writes, on the device,
 * behind that work at release. */
START_TEST(test_ipc_done_gates_reuse)
{
	if (!ipc_begin(false)) /* this process: events complete when the test says */
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on_device(c, 2, FEED_TO_F32, FEED_TO_NCHW, 1);
	expect_status(c, "ipc", true);
	void *stream = (void *)0x5157; /* a CUstream of the double: any value */

	struct feed_view dv0;
	struct feed_batch *b0 = next_on_device(st, stream, &dv0);
	expect_image(b0, &dv0, FEED_TO_F32, FEED_TO_NCHW);
	size_t bytes = dv0.bytes;
	uint8_t *saved = copy_view(&dv0);
	/* released with the consumer's work still pending on stream: the
	 * done write waits behind it */
	ck_assert_int_eq(feed_release(b0), 0);
	ck_assert_int_eq(fake_stats()->value_writes_held, 1);
	ck_assert_int_eq(fake_stats()->value_writes, 0);

	/* feedd builds batch 2 into b0's host slot, then its stream must wait */
	expect_daemon_waits(1, "feedd never waited for the consumer's done word");
	ck_assert_msg(!memcmp(dv0.data, saved, bytes), "device slot overwritten before the "
		      "consumer's work ran");
	struct feed_batch *b1 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_index(b1), 1);
	ck_assert_int_eq(feed_release(b1), 0); /* never tied: written at once */
	ck_assert_int_eq(fake_stats()->value_writes, 1);
	ck_assert_int_eq(fake_stats()->value_writes_held, 1);
	ck_assert_msg(!memcmp(dv0.data, saved, bytes), "device slot overwritten before the "
		      "consumer's work ran");

	fake_complete(); /* the consumer's work on b0 has run, then its write */
	struct feed_view dv2;
	struct feed_batch *b2 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_index(b2), 2);
	ck_assert_int_eq(feed_batch_device(b2, 0, stream, &dv2), 0);
	ck_assert_ptr_eq(dv2.data, dv0.data); /* the same device slot, rewritten */
	expect_image(b2, &dv2, FEED_TO_F32, FEED_TO_NCHW);
	ck_assert_int_eq(daemon_stats->value_waits_blocked, 1); /* b1's slot: not waited */
	ck_assert_int_eq(feed_release(b2), 0);
	fake_complete();
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	free(saved);
}
END_TEST

/* A batch released before feedd's conversion of it has run (on the
 * device, that conversion waits for the done word of the slot's last
 * batch, written behind the consumer's work) keeps its host slot until it
 * has run. Given back at once, the slot would be rebuilt with the next
 * batch, whose copy overwrites the staging area the pending conversion
 * still reads: the device slot would hold the next batch's images under
 * this one's name. feedd's double queues its convert stream's work behind
 * the wait (FAKE_CUDA_QUEUE), as a device does, instead of blocking the
 * worker, so feedd publishes batches whose conversion has not run. */
START_TEST(test_ipc_release_before_conversion)
{
	daemon_queue = true;
	if (!ipc_begin(false)) /* this process: its callers' streams hold their work */
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on_device(c, 2, FEED_TO_F32, FEED_TO_NCHW, 0);
	void *held = (void *)0x5157; /* a caller's CUstream: runs at fake_complete() */
	struct feed_batch *x;
	struct feed_view dv0, dv2, dv3;

	struct feed_batch *b0 = next_on_device(st, held, &dv0);
	expect_image(b0, &dv0, FEED_TO_F32, FEED_TO_NCHW);
	size_t bytes = dv0.bytes, bytes2;
	uint8_t *saved = copy_view(&dv0);
	ck_assert_int_eq(feed_release(b0), 0); /* converted: back now; its word held */
	expect_daemon_waits(1, "feedd's conversion of batch 2 never waited for b0's done word");
	struct feed_batch *b1 = h_next_batch(st); /* held: b2 can only be in b0's slot */
	struct feed_batch *b2 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_index(b2), 2);
	int copies = __atomic_load_n(&daemon_stats->copies, __ATOMIC_ACQUIRE);
	ck_assert_int_eq(feed_batch_device(b2, 0, held, &dv2), 0); /* the wait is held's */
	ck_assert_ptr_eq(dv2.data, dv0.data);
	ck_assert_msg(!memcmp(dv2.data, saved, bytes), "batch 2 converted before b0's done word");
	uint8_t *want2 = want_image(b2, FEED_TO_F32, FEED_TO_NCHW, &bytes2);
	ck_assert_msg(memcmp(want2, saved, bytes), "b0 and b2 hold the same images: the test "
		      "could not see the slot rewritten");

	ck_assert_int_eq(feed_release(b2), 0); /* does not wait */
	ck_assert_int_eq(fake_stats()->value_writes_held, 2);
	/* its host slot is not back: every credit is still held and feedd
	 * has not rebuilt the slot (no copy into its staging area) */
	ck_assert_int_eq(feed_next(st, 0, &x), -ENOBUFS);
	ck_assert_int_eq(feed_next(st, 50, &x), -ETIMEDOUT);
	ck_assert_msg(strstr(feed_errmsg(c), "conversion on the device has not run"), "%s",
		      feed_errmsg(c));
	ck_assert_int_eq(feed_release(b2), -EINVAL); /* released already */
	ck_assert_int_eq(feed_batch_device(b2, 0, held, &dv2), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "already released"), "%s", feed_errmsg(c));
	ck_assert_int_eq(__atomic_load_n(&daemon_stats->copies, __ATOMIC_ACQUIRE), copies);

	fake_complete(); /* the consumer's work ran: b0's word lands, feedd converts b2 */
	ck_assert_msg(!memcmp(dv2.data, want2, bytes2), "batch 2's device slot holds other images");
	struct feed_batch *b3 = h_next_batch(st); /* b2's slot went back: rebuilt */
	ck_assert_int_eq(feed_batch_index(b3), 3);
	ck_assert_int_eq(feed_batch_device(b3, 0, NULL, &dv3), 0);
	ck_assert_ptr_eq(dv3.data, dv0.data);
	expect_image(b3, &dv3, FEED_TO_F32, FEED_TO_NCHW);
	ck_assert_int_gt(daemon_stats->copies, copies);
	ck_assert_int_eq(feed_release(b3), 0);
	ck_assert_int_eq(feed_release(b1), 0);
	fake_complete();
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	free(saved);
	free(want2);
	expect_stop_all_freed();
}
END_TEST

/* A stream closed with a released batch still waiting for its conversion:
 * the close does not hang, and feedd serves on and frees the slots. */
START_TEST(test_ipc_close_with_conversion_pending)
{
	daemon_queue = true;
	if (!ipc_begin(false))
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = ipc_opts(2, 2, FEED_TO_F32, FEED_TO_NCHW);
	o.epochs = 0;
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_view dv;
	ck_assert_int_eq(feed_release(next_on_device(st, (void *)0x5157, &dv)), 0);
	expect_daemon_waits(1, "feedd never waited for b0's done word");
	struct feed_batch *b1 = h_next_batch(st);
	struct feed_batch *b2 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_index(b2), 2);
	ck_assert_int_eq(feed_release(b2), 0); /* deferred: its conversion waits */
	ck_assert_int_eq(feed_next(st, 0, &b2), -ENOBUFS);
	(void)b1;
	/* close waits for our done writes (letting the held work run), gives
	 * the deferred slot up with the rest, and closes */
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	h_assert_healthy();
	expect_stop_all_freed();
}
END_TEST

/* feedd killed and started again under a stream with device slots: the
 * stream reconnects and has device slots again (new handles, opened
 * once); a batch held across the restart keeps its host copy, its device
 * slot is gone (-ENODEV), and after its release the next feed_next()
 * closes the old handles (the releasing thread makes no such driver call). */
START_TEST(test_ipc_daemon_restart)
{
	if (!ipc_begin(true))
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = ipc_opts(2, 2, FEED_TO_F16, FEED_TO_NHWC);
	o.epochs = 0;
	o.reconnect_ms = H_DEADLINE_MS;
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_view dv, hv;
	take_on_device(st, 1, NULL, FEED_TO_F16, FEED_TO_NHWC, false);
	struct feed_batch *held = next_on_device(st, NULL, &dv);
	ck_assert_int_eq(feed_batch_field(held, 2, &hv), 0);
	int64_t held_labels[2];
	memcpy(held_labels, hv.data, sizeof(held_labels));

	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.again.log", h.dir);
	ipc_restart();

	take_on_device(st, 4, NULL, FEED_TO_F16, FEED_TO_NHWC, false);
	ck_assert_int_eq(feed_stream_device(st, NULL), 1);
	ck_assert_int_eq(fake_stats()->ipc_mem_opens, 2);
	ck_assert_int_eq(feed_batch_device(held, 0, NULL, &dv), -ENODEV);
	ck_assert_msg(strstr(feed_errmsg(c), "before feedd restarted"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_batch_field(held, 2, &hv), 0);
	ck_assert(!memcmp(hv.data, held_labels, sizeof(held_labels)));
	ck_assert_int_eq(fake_stats()->ipc_mem_closes, 0);
	ck_assert_int_eq(feed_release(held), 0);
	ck_assert_int_eq(fake_stats()->ipc_mem_closes, 0); /* not on the releasing thread */
	ck_assert_int_eq(feed_release(h_next_batch(st)), 0);
	ck_assert_int_eq(fake_stats()->ipc_mem_closes, 1); /* the old incarnation's */
	ck_assert_int_eq(feed_stream_close(st), 0);
	ck_assert_int_eq(fake_stats()->ipc_mem_closes, 2);
	feed_disconnect(c);
}
END_TEST

/* One stream per batch: its release records on it. */
START_TEST(test_ipc_one_stream_per_batch)
{
	if (!ipc_begin(true))
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = ipc_opts(2, 2, FEED_TO_BF16, FEED_TO_NCHW);
	struct feed_stream *st = h_stream_open(c, &o);
	struct feed_view dv;
	struct feed_batch *b = next_on_device(st, (void *)0xa, &dv);
	ck_assert_int_eq(feed_batch_device(b, 2, (void *)0xa, &dv), 0); /* the same: fine */
	ck_assert_int_eq(feed_batch_device(b, 0, (void *)0xb, &dv), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "tied to another CUDA stream"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_batch_device(b, 9, (void *)0xa, &dv), -EINVAL);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_batch_device(b, 0, (void *)0xa, &dv), -EINVAL); /* released */
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

/* A consumer killed while it holds a batch tied to its stream: feedd
 * frees that stream's device slots and serves the next consumer. */
START_TEST(test_ipc_consumer_killed)
{
	if (!ipc_begin(true))
		return;
	pid_t pid = fork_consumer(3, FEED_TO_F16, false);
	int allocs = daemon_stats->allocs;
	ck_assert_int_gt(allocs, daemon_stats->frees);
	kill_consumer(pid);

	/* the next consumer is served, on the device */
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on_device(c, 3, FEED_TO_F16, FEED_TO_NCHW, 2);
	take_on_device(st, 5, NULL, FEED_TO_F16, FEED_TO_NCHW, false);
	feed_stream_close(st);
	feed_disconnect(c);
	/* and everything the dead one had is gone */
	expect_stop_all_freed();
}
END_TEST

/* A batch released without ever being used on the device (never tied to
 * a stream): its done word is written at once, on the client's own
 * stream, so feedd reuses its slot without waiting, however busy the
 * consumer's streams are. */
START_TEST(test_ipc_untied_release_not_waited)
{
	if (!ipc_begin(false)) /* this process: its callers' streams hold their work */
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on_device(c, 2, FEED_TO_F32, FEED_TO_NCHW, 0);
	for (int i = 0; i < 8; i++) { /* each of the 2 slots 4 times */
		struct feed_batch *b = h_next_batch(st);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_int_eq(fake_stats()->value_writes, 8);
	ck_assert_int_eq(fake_stats()->value_writes_held, 0);
	ck_assert_int_eq(daemon_stats->value_waits_blocked, 0);
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

/* A consumer killed after releasing a batch whose done write sits behind
 * work that never runs (its stream held when it dies), with feedd's
 * stream waiting for that write: feedd writes the word itself when the
 * consumer's connection goes, so the stream's device memory is freed and
 * the next consumer is served on the device at once. (With the old done
 * events, the dead process's record never completed: the conversion, and
 * whatever waited for it, hung for ever.) */
START_TEST(test_ipc_consumer_killed_done_pending)
{
	if (!ipc_begin(false)) /* this process and its child: callers' streams hold work */
		return;
	pid_t pid = fork_consumer(2, FEED_TO_F32, true);
	expect_daemon_waits(1, "feedd never waited for the consumer's done word");
	ck_assert_int_gt(daemon_stats->allocs, daemon_stats->frees);
	kill_consumer(pid);

	/* everything the dead one had on the device is freed, with feedd running */
	ck_assert_msg(h_wait_until(daemon_freed_all, NULL, H_DEADLINE_MS),
		      "feedd still holds %d device allocations of the dead consumer",
		      daemon_stats->allocs - daemon_stats->frees);
	/* and the next consumer is served, on the device */
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on_device(c, 2, FEED_TO_F32, FEED_TO_NCHW, 0);
	take_on_device(st, 5, (void *)0x78, FEED_TO_F32, FEED_TO_NCHW, true);
	feed_stream_close(st);
	feed_disconnect(c);
	h_assert_healthy();
	expect_stop_all_freed();
}
END_TEST

/* The reason a stream got host slots only, from feed_stream_device(). */
static void expect_host_only(struct feed_conn *c, struct feed_stream_opts *o, const char *needle)
{
	struct feed_stream *st = h_stream_open(c, o);
	const char *why = NULL;
	struct feed_view dv;
	ck_assert_int_eq(feed_stream_device(st, &why), 0);
	ck_assert_msg(strstr(why, needle), "reason '%s' lacks '%s'", why, needle);
	if (!strncmp(needle, "feedd: ", 7) && !o->group) /* a group is listed as one */
		expect_status(c, needle + 7, false);
	/* the host slots serve as ever */
	struct feed_batch *b = h_next_batch(st);
	struct feed_view hv;
	ck_assert_int_eq(feed_batch_field(b, 2, &hv), 0);
	ck_assert_int_eq(feed_batch_device(b, 0, NULL, &dv), -ENODEV);
	ck_assert_msg(strstr(feed_errmsg(c), needle), "%s", feed_errmsg(c));
	feed_release(b);
	feed_stream_close(st);
}

/* expect_host_only() times on a new connection, batches of 3, in group if set. */
static void host_only_conn(const char *group, const char *needle, int times)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = ipc_opts(3, 2, FEED_TO_F32, FEED_TO_NCHW);
	o.group = group;
	for (int i = 0; i < times; i++)
		expect_host_only(c, &o, needle);
	feed_disconnect(c);
}

/* The implicitly synchronising driver calls (cuMemHostRegister at a
 * stream's first batch, cuMemHostUnregister and cuMemFree at its close)
 * wait, on a device, for every queued conversion of feedd's, and one
 * stream's conversion can wait behind its consumer's work for as long as
 * that consumer likes. feedd's double models it (FAKE_CUDA_QUEUE: those
 * calls block until every queue has run). While one consumer holds its
 * work, other streams open, register, close and stream on: only the GPU
 * keeper waits. */
START_TEST(test_ipc_held_work_delays_nobody)
{
	daemon_queue = true;
	if (!ipc_begin(false)) /* this process: its callers' streams hold their work */
		return;
	struct feed_conn *c = h_conn_new();
	void *held = (void *)0x5157;
	struct feed_stream *a = open_on_device(c, 2, FEED_TO_F32, FEED_TO_NCHW, 0);
	struct feed_view dv;
	ck_assert_int_eq(feed_release(next_on_device(a, held, &dv)), 0);
	struct feed_batch *a1 = h_next_batch(a);
	/* a's conversion into b0's slot waits for b0's done word, held here */
	expect_daemon_waits(1, "feedd's conversion never waited for a's done word");

	/* new streams with device slots: their first batches need the region
	 * registered; each reads as many batches as it has credits */
	struct feed_stream *b[2];
	for (int i = 0; i < 2; i++) {
		b[i] = open_on_device(c, 3, FEED_TO_BF16, FEED_TO_NCHW, 0);
		struct feed_batch *x[2];
		for (int k = 0; k < 2; k++) {
			x[k] = h_next_batch(b[i]);
			ck_assert_int_eq(feed_batch_index(x[k]), (uint64_t)k);
		}
		for (int k = 0; k < 2; k++)
			ck_assert_int_eq(feed_release(x[k]), 0);
	}
	/* their teardowns unregister and free: the keeper's, not a worker's */
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(feed_stream_close(b[i]), 0);
	struct feed_stream_opts plain = {.dataset = "kinds", .batch = 3, .credits = 2, .epochs = 3};
	struct feed_stream *hs = h_stream_open(c, &plain);
	int n = 0, r;
	struct feed_batch *x;
	while ((r = feed_next(hs, H_DEADLINE_MS, &x)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH)
			continue;
		ck_assert_msg(r == 0, "a host stream stalled while a consumer held its work: %d", r);
		ck_assert_int_eq(feed_release(x), 0);
		n++;
	}
	ck_assert_int_eq(n, 3 * 4);
	ck_assert_int_eq(feed_stream_close(hs), 0);
	/* the double did block those calls: on the keeper, meanwhile */
	ck_assert_int_ge(__atomic_load_n(&daemon_stats->implicit_syncs_blocked, __ATOMIC_ACQUIRE),
			 1);

	fake_complete(); /* a's consumer's work runs: everything drains */
	ck_assert_int_eq(feed_release(a1), 0);
	fake_complete();
	ck_assert_int_eq(feed_stream_close(a), 0);
	feed_disconnect(c);
	ck_assert(h_wait_until(daemon_freed_all, NULL, H_DEADLINE_MS));
	expect_stop_all_freed();
}
END_TEST

/* The GPU as status shows it: feedd's context on device 0 (made or not)
 * and the device memory streams' slots hold there. */
static void expect_gpu_status(struct feed_conn *c, bool context, bool some_bytes)
{
	struct feed_status *st;
	ck_assert_int_eq(feed_status(c, &st), 0);
	ck_assert_uint_eq(st->ngpus, 1);
	ck_assert_uint_eq(st->gpus[0].ordinal, 0);
	ck_assert(st->gpus[0].allowed);
	ck_assert(!st->gpus[0].failed);
	ck_assert_msg(st->gpus[0].context == context, "context %d", st->gpus[0].context);
	ck_assert_msg((st->gpus[0].slot_bytes > 0) == some_bytes, "slot bytes %llu",
		      (unsigned long long)st->gpus[0].slot_bytes);
	feed_status_free(st);
}

/* No GPU context at start (memory on no card, no clash with
 * EXCLUSIVE_PROCESS): the first stream with device slots makes device 0's,
 * once; a second stream reuses it; status says so. */
START_TEST(test_ipc_context_on_demand)
{
	if (!ipc_begin(true))
		return;
	struct feed_conn *c = h_conn_new();
	ck_assert_int_eq(daemon_stats->primary_retains, 0);
	ck_assert_int_eq(daemon_stats->module_loads, 0);
	expect_gpu_status(c, false, false);
	/* a stream without device slots makes none either */
	struct feed_stream_opts plain = {.dataset = "kinds", .batch = 2, .credits = 2, .epochs = 1};
	struct feed_stream *hs = h_stream_open(c, &plain);
	ck_assert_int_eq(feed_stream_device(hs, NULL), 0);
	ck_assert_int_eq(feed_stream_close(hs), 0);
	ck_assert_int_eq(daemon_stats->primary_retains, 0);

	struct feed_stream *a = open_on_device(c, 3, FEED_TO_F32, FEED_TO_NCHW, 1);
	struct feed_stream *b = open_on_device(c, 2, FEED_TO_BF16, FEED_TO_NCHW, 1);
	ck_assert_int_eq(daemon_stats->primary_retains, 1);
	ck_assert_int_eq(daemon_stats->module_loads, 1);
	expect_gpu_status(c, true, true);
	ck_assert_int_eq(feed_stream_close(a), 0);
	ck_assert_int_eq(feed_stream_close(b), 0);
	ck_assert(h_wait_until(daemon_freed_all, NULL, H_DEADLINE_MS));
	feed_disconnect(c);
	expect_stop_all_freed();
	ck_assert_int_eq(daemon_stats->primary_retains, 1);
	ck_assert_int_eq(daemon_stats->primary_releases, 1);
}
END_TEST

/* `gpus:` leaves device 0 out: a stream asking for it gets host slots and
 * the reason, and feedd makes no context. */
START_TEST(test_ipc_gpus_config)
{
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	ipc_start_cfg(NULL, "  max_streams: 8\ngpus: \"1\"\n");
	unsetenv("FAKE_CUDA_DEVICES");
	if (!kernels_built())
		return;
	host_only_conn(NULL, "feedd: device 0 (", 1);
	ck_assert_int_eq(daemon_stats->primary_retains, 0);
	expect_stop_no_allocs();
}
END_TEST

START_TEST(test_ipc_daemon_without_gpu)
{
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	ipc_start("/nonexistent/libcuda.so.1");
	if (!kernels_built())
		return;
	ck_assert(h_log_has("CUDA IPC off (feedd has no usable GPU: /nonexistent/libcuda.so.1 "
			    "not found"));
	host_only_conn(NULL, "feedd: feedd has no usable GPU: /nonexistent/libcuda.so.1 not found",
		       1);
}
END_TEST

START_TEST(test_ipc_another_gpu)
{
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	ipc_start(NULL);
	setenv("FAKE_CUDA_UUID_SEED", "7", 1); /* this process's GPU is not feedd's */
	if (!kernels_built())
		return;
	host_only_conn(NULL, "feedd: feedd does not see the client's GPU (UUID ", 1);
	expect_stop_no_allocs();
}
END_TEST

/* Past the user's limits.max_device_bytes: host slots, the limit named,
 * and nothing allocated on the device. */
START_TEST(test_ipc_device_limit)
{
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	ipc_start_cfg(NULL, "  max_device_bytes: 1K\n");
	if (!kernels_built())
		return;
	host_only_conn(NULL, "more than the 1024 left to this user (limits.max_device_bytes)", 1);
	expect_stop_no_allocs();
}
END_TEST

/* Device memory that cannot be had (made on a worker, after the open was
 * counted): host slots with the driver's words, and the user's count given
 * back, so the next stream that fits gets device slots. */
START_TEST(test_ipc_device_memory_refused)
{
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	setenv("FAKE_CUDA_MEM_LIMIT", "100", 1); /* feedd's double: too little for any slots */
	ipc_start_cfg(NULL, "  max_device_bytes: 6K\n"); /* one stream (4K) fits, two do not */
	unsetenv("FAKE_CUDA_MEM_LIMIT");
	if (!kernels_built())
		return;
	/* twice: were the first one's bytes still counted, the second would
	 * be refused by the limit instead */
	host_only_conn(NULL, "feedd: device 0: cuMemAlloc of ", 2);
	expect_stop_no_allocs();
}
END_TEST

START_TEST(test_ipc_group_gets_host_slots)
{
	if (!ipc_begin(true))
		return;
	host_only_conn("g1", "feedd: a group's batches are shared host slots", 1);
}
END_TEST

START_TEST(test_ipc_client_without_driver)
{
	ipc_start(NULL);
	setenv("FEED_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	host_only_conn(NULL, "this process: /nonexistent/libcuda.so.1 not found", 1);
	expect_stop_no_allocs(); /* nothing was asked of feedd */
}
END_TEST

/* A client in a PID namespace of its own (CUDA IPC needs feedd to see the
 * client's pid as the client does) is told so. */
START_TEST(test_ipc_other_pid_namespace)
{
	if (!ipc_begin(true))
		return;
	pid_t outer = fork(); /* unshares, so that this process keeps its namespace */
	ck_assert_int_ge(outer, 0);
	if (outer == 0) {
		if (unshare(CLONE_NEWPID) < 0) {
			fprintf(stderr, "test_ipc_other_pid_namespace: not run: "
				"unshare(CLONE_NEWPID): %s\n", strerror(errno));
			_exit(0);
		}
		pid_t inner = fork(); /* pid 1 of the new namespace */
		if (inner < 0)
			_exit(3);
		if (inner > 0) {
			int status;
			_exit(waitpid(inner, &status, 0) == inner && WIFEXITED(status) ?
				      WEXITSTATUS(status) : 4);
		}
		struct feed_conn *c = NULL;
		struct feed_stream *st = NULL;
		const char *why = "";
		struct feed_stream_opts o = ipc_opts(3, 2, FEED_TO_F32, FEED_TO_NCHW);
		if (getpid() != 1 || feed_connect(h.sock, &c) < 0 || feed_stream_open(c, &o, &st) < 0)
			_exit(1);
		if (feed_stream_device(st, &why) != 0 ||
		    !strstr(why, "feedd: the client is in another PID namespace (it is pid 1 to "
				 "itself"))
			_exit(2);
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(outer, &status, 0), outer);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}
END_TEST

/* Options that cannot be right are refused, naming them. */
START_TEST(test_ipc_bad_options)
{
	if (!ipc_begin(true))
		return;
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st;
	struct feed_stream_opts o = ipc_opts(3, 2, 7, FEED_TO_NCHW);
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "option device.dtype: 7"), "%s", feed_errmsg(c));
	o = ipc_opts(3, 2, FEED_TO_F32, FEED_TO_NCHW);
	o.device.std[1] = 0;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "option device.mean/std[1]"), "%s", feed_errmsg(c));
	o = ipc_opts(3, 2, FEED_TO_F32, FEED_TO_NCHW);
	o.device.device = 3;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "no CUDA device 3 (1 found)"), "%s", feed_errmsg(c));
	/* two values of mean/std for three channels: feedd says which field */
	o = ipc_opts(3, 2, FEED_TO_F32, FEED_TO_NCHW);
	o.device.nmean = 2;
	ck_assert_int_eq(feed_stream_open(c, &o, &st), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "device: field 'image': 3 channels, but mean has 2"),
		      "%s", feed_errmsg(c));
	/* and it goes on serving */
	st = open_on_device(c, 3, FEED_TO_F32, FEED_TO_NCHW, 2);
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ipc");
	TCase *tc = tcase_create("ipc");
	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ipc_batches_on_device);
	tcase_add_test(tc, test_ipc_done_gates_reuse);
	tcase_add_test(tc, test_ipc_release_before_conversion);
	tcase_add_test(tc, test_ipc_close_with_conversion_pending);
	tcase_add_test(tc, test_ipc_one_stream_per_batch);
	tcase_add_test(tc, test_ipc_daemon_restart);
	tcase_add_test(tc, test_ipc_consumer_killed);
	tcase_add_test(tc, test_ipc_untied_release_not_waited);
	tcase_add_test(tc, test_ipc_consumer_killed_done_pending);
	tcase_add_test(tc, test_ipc_context_on_demand);
	tcase_add_test(tc, test_ipc_held_work_delays_nobody);
	tcase_add_test(tc, test_ipc_gpus_config);
	tcase_add_test(tc, test_ipc_daemon_without_gpu);
	tcase_add_test(tc, test_ipc_another_gpu);
	tcase_add_test(tc, test_ipc_group_gets_host_slots);
	tcase_add_test(tc, test_ipc_device_limit);
	tcase_add_test(tc, test_ipc_device_memory_refused);
	tcase_add_test(tc, test_ipc_client_without_driver);
	tcase_add_test(tc, test_ipc_other_pid_namespace);
	tcase_add_test(tc, test_ipc_bad_options);
	suite_add_tcase(s, tc);
	return h_run_suite(s);
}
