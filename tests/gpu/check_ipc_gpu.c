/*
 * check_ipc_gpu.c: CUDA IPC delivery (feed_stream_opts.device,
 * feed_batch_device) on a real device between a real feedd and this
 * process: the checks tests/integration/check_ipc.c makes against the
 * driver's test double, with the real driver. The device slots hold, bit
 * for bit, what the CPU path gives; feedd's copy into a device slot waits
 * on the device for the consumer's work on the slot's last batch (the
 * consumer's stream held by a host function; the done word the client
 * writes behind it, cuStreamWriteValue32, gates feedd's stream,
 * cuStreamWaitValue32); a batch released before that conversion ran
 * keeps its host slot until it has; a consumer killed while it holds
 * handles, or with its done write behind work that never runs, leaves
 * feedd serving the next one on the device.
 *
 * Exits 77 (ctest: skipped) when `nvidia-smi -L` lists no GPU. CUDA is
 * touched only inside the tests (Check forks each), never before a fork.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/gpu.h"
#include "feed/stream.h"
#include "feedd_harness.h"
#include "gpu_device.h"

static void ipc_start(void)
{
	static char tiny[200];
	unsetenv("FEED_CUDA_DRIVER");
	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, NULL});
	ck_assert_msg(h_log_has("CUDA IPC on"), "%s", h_file_text(h.log));
}

static const float mean = 0.485f, sd = 0.229f;

static struct feed_stream *ipc_open(struct feed_conn *c, uint32_t batch, uint32_t credits,
				    int dtype)
{
	struct feed_stream_opts o = {.dataset = "tiny", .batch = batch, .credits = credits};
	o.device = (struct feed_stream_device){.enable = true, .device = 0, .dtype = dtype,
					       .layout = FEED_TO_NCHW, .nmean = 1};
	o.device.mean[0] = mean;
	o.device.std[0] = sd;
	struct feed_stream *st = h_stream_open(c, &o);
	const char *why = NULL;
	ck_assert_msg(feed_stream_device(st, &why) == 1, "no device slots: %s", why);
	return st;
}

/* b's device image, read back on s, equals the CPU path's conversion. */
static void expect_bits(struct feed_conn *c, struct feed_batch *b, int dtype, cudaStream_t s)
{
	uint8_t want[16 * 16 * 4], back[16 * 16 * 4];
	struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = dtype,
				    .layout = FEED_TO_NCHW, .mean = &mean, .std = &sd,
				    .dst_bytes = sizeof(want)};
	struct feed_view dv;
	ck_assert_int_eq(feed_batch_to_device(b, 0, want, &to, NULL), 0);
	ck_assert_msg(feed_batch_device(b, 0, s, &dv) == 0, "%s", feed_errmsg(c));
	ck_assert_uint_le(dv.bytes, sizeof(back));
	CK_CUDA(cudaMemcpyAsync(back, dv.data, dv.bytes, cudaMemcpyDeviceToHost, s));
	CK_CUDA(cudaStreamSynchronize(s));
	ck_assert_msg(!memcmp(want, back, dv.bytes), "batch %llu dtype %d differs",
		      (unsigned long long)feed_batch_index(b), dtype);
}

START_TEST(test_gpu_ipc_bits_equal_cpu)
{
	ipc_start();
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t s;
	CK_CUDA(cudaStreamCreate(&s));
	struct feed_conn *c = h_conn_new();
	for (int dt = FEED_TO_F32; dt <= FEED_TO_BF16; dt++) {
		struct feed_stream *st = ipc_open(c, 3, 2, dt);
		for (int i = 0; i < 8; i++) { /* two epochs and more: every slot reused */
			struct feed_batch *b = h_next_batch(st);
			expect_bits(c, b, dt, s);
			struct feed_view hv, dv;
			int64_t labels[16];
			ck_assert_int_eq(feed_batch_field(b, 1, &hv), 0);
			ck_assert_int_eq(feed_batch_device(b, 1, s, &dv), 0);
			CK_CUDA(cudaMemcpyAsync(labels, dv.data, dv.bytes, cudaMemcpyDeviceToHost, s));
			CK_CUDA(cudaStreamSynchronize(s));
			ck_assert(!memcmp(labels, hv.data, hv.bytes));
			ck_assert_int_eq(feed_release(b), 0);
		}
		feed_stream_close(st);
	}
	feed_disconnect(c);
	cudaStreamDestroy(s);
}
END_TEST

/* feedd's next copy into b0's device slot waits, on the device, for the
 * work the consumer enqueued before releasing b0. b1 is held until b2
 * came, so b2 can only be in b0's slot (released together, the two slots
 * could come back in either order, and b2 land in b1's, which nothing
 * gates: one way this test passed s2 early with the old done events). */
START_TEST(test_gpu_ipc_done_gates_reuse)
{
	ipc_start();
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t held, s2;
	CK_CUDA(cudaStreamCreate(&held));
	CK_CUDA(cudaStreamCreate(&s2));
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_F32);
	struct feed_view dv;
	uint8_t *back; /* pinned: a copy into pageable memory would block this thread */
	CK_CUDA(cudaMallocHost((void **)&back, 2 * 16 * 4));

	atomic_store(&gate, 0);
	struct feed_batch *b0 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_device(b0, 0, held, &dv), 0);
	void *slot0 = dv.data;
	CK_CUDA(cudaLaunchHostFunc(held, hold_stream, NULL)); /* "the consumer's work" */
	ck_assert_int_eq(feed_release(b0), 0);                /* done written behind it */
	struct feed_batch *b1 = h_next_batch(st);               /* held: its slot is busy */
	struct feed_batch *b2 = h_next_batch(st);               /* so: b0's slot again */
	ck_assert_int_eq(feed_batch_device(b2, 0, s2, &dv), 0);
	ck_assert_ptr_eq(dv.data, slot0);
	CK_CUDA(cudaMemcpyAsync(back, dv.data, dv.bytes, cudaMemcpyDeviceToHost, s2));
	ck_assert_int_eq(feed_release(b1), 0);
	/* s2 waits for feedd's copy, which waits for the held stream: give a
	 * copy that did not wait ample time to land, then see none did */
	usleep(200 * 1000);
	ck_assert_int_eq(cudaStreamQuery(s2), cudaErrorNotReady);
	atomic_store(&gate, 1);
	CK_CUDA(cudaStreamSynchronize(s2));
	expect_bits(c, b2, FEED_TO_F32, s2);
	feed_release(b2);
	feed_stream_close(st);
	feed_disconnect(c);
	cudaFreeHost(back);
	cudaStreamDestroy(held);
	cudaStreamDestroy(s2);
}
END_TEST

/* A batch released before feedd's conversion of it has run keeps its host
 * slot until it has: b2 (in b0's slot, b1 held) is converted only after
 * b0's done word, held behind a host function; released then (no wait),
 * its slot must not be rebuilt (feedd's copy would overwrite the staging
 * area the pending conversion reads, and b2's device slot get b3's
 * images) until the hold is lifted. Then b2's device bits, and every later
 * batch's, equal the CPU conversion of their host bits. */
START_TEST(test_gpu_ipc_release_before_conversion)
{
	ipc_start();
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t held, s2, s3;
	CK_CUDA(cudaStreamCreate(&held));
	CK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CK_CUDA(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_F32);
	struct feed_batch *x;
	struct feed_view dv;
	uint8_t *back, want2[2 * 16 * 16 * 4];
	CK_CUDA(cudaMallocHost((void **)&back, sizeof(want2)));

	atomic_store(&gate, 0);
	struct feed_batch *b0 = h_next_batch(st);
	expect_bits(c, b0, FEED_TO_F32, held);
	ck_assert_int_eq(feed_batch_device(b0, 0, held, &dv), 0);
	void *slot0 = dv.data;
	CK_CUDA(cudaLaunchHostFunc(held, hold_stream, NULL)); /* "the consumer's work" */
	ck_assert_int_eq(feed_release(b0), 0);                /* done written behind it */
	struct feed_batch *b1 = h_next_batch(st);               /* held: its slot is busy */
	struct feed_batch *b2 = h_next_batch(st);               /* so: b0's slot again */
	struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = FEED_TO_F32,
				    .layout = FEED_TO_NCHW, .mean = &mean, .std = &sd,
				    .dst_bytes = sizeof(want2)};
	ck_assert_int_eq(feed_batch_to_device(b2, 0, want2, &to, NULL), 0);
	ck_assert_int_eq(feed_batch_device(b2, 0, s2, &dv), 0);
	ck_assert_ptr_eq(dv.data, slot0);
	ck_assert_uint_le(dv.bytes, sizeof(want2));
	size_t bytes = dv.bytes;
	/* read back once converted (s2 waits for that), behind it the done word */
	CK_CUDA(cudaMemcpyAsync(back, dv.data, bytes, cudaMemcpyDeviceToHost, s2));
	ck_assert_int_eq(feed_release(b2), 0); /* does not wait */
	/* its conversion waits for the held stream: give a slot that went
	 * back ample time to be rebuilt, then see it was not */
	ck_assert_int_eq(feed_next(st, 200, &x), -ETIMEDOUT);
	ck_assert_msg(strstr(feed_errmsg(c), "conversion on the device has not run"), "%s",
		      feed_errmsg(c));
	ck_assert_int_eq(feed_next(st, 0, &x), -ENOBUFS);
	ck_assert_int_eq(cudaStreamQuery(s2), cudaErrorNotReady);
	atomic_store(&gate, 1);
	CK_CUDA(cudaStreamSynchronize(s2));
	ck_assert_msg(!memcmp(back, want2, bytes), "batch %llu's device slot holds other images",
		      (unsigned long long)feed_batch_index(b2));
	struct feed_batch *b3 = h_next_batch(st); /* b2's slot went back: rebuilt */
	ck_assert_int_eq(feed_batch_device(b3, 0, s3, &dv), 0);
	ck_assert_ptr_eq(dv.data, slot0);
	expect_bits(c, b3, FEED_TO_F32, s3);
	ck_assert_int_eq(feed_release(b3), 0);
	ck_assert_int_eq(feed_release(b1), 0);
	for (int i = 0; i < 4; i++) { /* and it goes on */
		struct feed_batch *b = h_next_batch(st);
		expect_bits(c, b, FEED_TO_F32, s3);
		feed_release(b);
	}
	CK_CUDA(cudaStreamSynchronize(held));
	feed_stream_close(st);
	feed_disconnect(c);
	cudaFreeHost(back);
	cudaStreamDestroy(held);
	cudaStreamDestroy(s2);
	cudaStreamDestroy(s3);
}
END_TEST

START_TEST(test_gpu_ipc_consumer_killed)
{
	ipc_start();
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct feed_conn *c = h_conn_new();
		struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_BF16);
		struct feed_view dv;
		cudaStream_t s;
		char ok = cudaStreamCreate(&s) == cudaSuccess;
		struct feed_batch *b = h_next_batch(st);
		ok = ok && !feed_batch_device(b, 0, s, &dv);
		(void)!write(pipefd[1], &ok, 1);
		pause(); /* killed holding b, its handles and its context */
		_exit(0);
	}
	char ok = 0;
	ck_assert_int_eq(read(pipefd[0], &ok, 1), 1);
	ck_assert(ok);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_ne(h_wait(pid, H_DEADLINE_MS), -1);
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t s;
	CK_CUDA(cudaStreamCreate(&s));
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_BF16);
	for (int i = 0; i < 6; i++) {
		struct feed_batch *b = h_next_batch(st);
		expect_bits(c, b, FEED_TO_BF16, s);
		feed_release(b);
	}
	feed_stream_close(st);
	feed_disconnect(c);
	cudaStreamDestroy(s);
}
END_TEST

/* A batch released without being tied, in a slot whose last batch's done
 * write still waits behind the consumer's work: its own write must land
 * after that one (the client's stream waits for it), or feedd's wait for
 * the earlier generation would pass at once and the slot be rewritten
 * under the work still reading it. b2 (b0's slot: b1 is held) is released
 * untied while b0's work is held; the slot, read with a copy that waits
 * for nothing, still holds b0's batch. */
START_TEST(test_gpu_ipc_untied_release_keeps_order)
{
	ipc_start();
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t held, s3;
	CK_CUDA(cudaStreamCreate(&held));
	CK_CUDA(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_F32);
	struct feed_view dv;
	uint8_t *saved, *now, want2[2 * 16 * 16 * 4];
	CK_CUDA(cudaMallocHost((void **)&saved, sizeof(want2)));
	CK_CUDA(cudaMallocHost((void **)&now, sizeof(want2)));

	atomic_store(&gate, 0);
	struct feed_batch *b0 = h_next_batch(st);
	ck_assert_int_eq(feed_batch_device(b0, 0, held, &dv), 0);
	ck_assert_uint_le(dv.bytes, sizeof(want2));
	void *slot0 = dv.data;
	size_t bytes = dv.bytes;
	CK_CUDA(cudaMemcpyAsync(saved, slot0, bytes, cudaMemcpyDeviceToHost, held));
	CK_CUDA(cudaStreamSynchronize(held));
	CK_CUDA(cudaLaunchHostFunc(held, hold_stream, NULL)); /* "the consumer's work" */
	ck_assert_int_eq(feed_release(b0), 0);
	struct feed_batch *b1 = h_next_batch(st);               /* held: its slot is busy */
	struct feed_batch *b2 = h_next_batch(st);               /* so: b0's slot again */
	struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = FEED_TO_F32,
				    .layout = FEED_TO_NCHW, .mean = &mean, .std = &sd,
				    .dst_bytes = sizeof(want2)};
	ck_assert_int_eq(feed_batch_to_device(b2, 0, want2, &to, NULL), 0);
	ck_assert_msg(memcmp(want2, saved, bytes), "b0 and b2 hold the same images: the "
		      "test could not see the slot rewritten");
	ck_assert_int_eq(feed_release(b2), 0);                /* never tied */
	/* give a rewrite that did not wait ample time to land, then see none did */
	usleep(200 * 1000);
	CK_CUDA(cudaMemcpyAsync(now, slot0, bytes, cudaMemcpyDeviceToHost, s3));
	CK_CUDA(cudaStreamSynchronize(s3));
	ck_assert_msg(!memcmp(now, saved, bytes), "b0's device slot rewritten while the "
		      "consumer's work on it was held");
	atomic_store(&gate, 1);
	CK_CUDA(cudaStreamSynchronize(held));
	ck_assert_int_eq(feed_release(b1), 0);
	for (int i = 0; i < 4; i++) { /* and it goes on */
		struct feed_batch *b = h_next_batch(st);
		expect_bits(c, b, FEED_TO_F32, s3);
		feed_release(b);
	}
	feed_stream_close(st);
	feed_disconnect(c);
	cudaFreeHost(saved);
	cudaFreeHost(now);
	cudaStreamDestroy(held);
	cudaStreamDestroy(s3);
}
END_TEST

/* Status lists no stream: feedd has dropped the killed consumer's. */
static bool no_streams(void *arg)
{
	struct feed_status *full;
	if (feed_status(arg, &full) < 0)
		return false;
	bool none = full->count == 0;
	feed_status_free(full);
	return none;
}

/* A consumer killed after releasing a batch whose done write sits behind
 * work that never runs (its stream held by a host function when it dies),
 * feedd's stream waiting for it: when the connection goes, feedd writes
 * the word itself, so its stream drains, the dead stream's device memory
 * is freed (on the loop thread: had anything there waited for the stuck
 * stream, the daemon would stop answering) and the next consumer is
 * served on the device. */
START_TEST(test_gpu_ipc_consumer_killed_done_pending)
{
	ipc_start();
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct feed_conn *c = h_conn_new();
		struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_F32);
		struct feed_view dv;
		cudaStream_t s;
		atomic_store(&gate, 0);
		char ok = cudaStreamCreate(&s) == cudaSuccess;
		struct feed_batch *b = h_next_batch(st);
		ok = ok && !feed_batch_device(b, 0, s, &dv) &&
		     cudaLaunchHostFunc(s, hold_stream, NULL) == cudaSuccess && !feed_release(b);
		(void)!write(pipefd[1], &ok, 1);
		pause();
		_exit(0);
	}
	char ok = 0;
	ck_assert_int_eq(read(pipefd[0], &ok, 1), 1);
	ck_assert(ok);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_ne(h_wait(pid, H_DEADLINE_MS), -1);
	struct feed_conn *c = h_conn_new();
	ck_assert_msg(h_wait_until(no_streams, c, H_DEADLINE_MS),
		      "feedd never dropped the killed consumer's stream");
	h_assert_healthy(); /* the loop freed it and goes on */
	CK_CUDA(cudaSetDevice(0));
	cudaStream_t s;
	CK_CUDA(cudaStreamCreate(&s));
	struct feed_stream *st = ipc_open(c, 2, 2, FEED_TO_F32);
	for (int i = 0; i < 6; i++) {
		struct feed_batch *b = h_next_batch(st);
		expect_bits(c, b, FEED_TO_F32, s);
		feed_release(b);
	}
	feed_stream_close(st);
	feed_disconnect(c);
	cudaStreamDestroy(s);
	h_assert_healthy();
}
END_TEST

int main(void)
{
	if (!gpu_listed()) {
		printf("skipped: nvidia-smi -L lists no GPU\n");
		return SKIP;
	}
	Suite *s = suite_create("ipc_gpu");
	TCase *tc = tcase_create("ipc_gpu");
	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gpu_ipc_bits_equal_cpu);
	tcase_add_test(tc, test_gpu_ipc_done_gates_reuse);
	tcase_add_test(tc, test_gpu_ipc_untied_release_keeps_order);
	tcase_add_test(tc, test_gpu_ipc_release_before_conversion);
	tcase_add_test(tc, test_gpu_ipc_consumer_killed);
	tcase_add_test(tc, test_gpu_ipc_consumer_killed_done_pending);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
