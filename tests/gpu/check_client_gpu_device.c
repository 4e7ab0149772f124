/*
 * check_client_gpu_device.c: libfeedclient's GPU path (feed/gpu.h) on a
 * real device, against a real feedd: the checks check_client_gpu.c makes
 * against the driver's test double, with the real driver. Capability is
 * usable; feed_batch_to_device() into device memory gives bit for bit what
 * the CPU path gives, also with a mix (the embedded mix kernels against
 * their twins); a batch released while its copy cannot yet run (the
 * caller's stream is held by a host function waiting on a flag) keeps its
 * slot until the copy ran; a consumer killed with copies in flight leaves
 * the daemon serving.
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

static void dev_start(void)
{
	static char tiny[200];
	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, NULL});
	unsetenv("FEED_CUDA_DRIVER");
}

START_TEST(test_gpu_device_query_usable)
{
	struct feed_gpu_info gi;
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	ck_assert_msg(gi.usable, "%s", gi.reason);
	ck_assert_uint_ge(gi.num_devices, 1);
	ck_assert_int_ge(gi.driver_version, gi.driver_needed);
	ck_assert(gi.devices[0].name[0]);
}
END_TEST

/* Device bits equal the CPU path's, for each dtype and layout. */
START_TEST(test_gpu_device_bits_equal_cpu)
{
	dev_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 3, 2);
	struct feed_batch *b = h_next_batch(st);
	const float mean = 0.485f, sd = 0.229f;
	uint8_t host[3 * 16 * 4], back[3 * 16 * 4];
	void *dev;
	cudaStream_t s;
	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreate(&s));
	CK_CUDA(cudaMalloc(&dev, sizeof(back)));
	for (int dt = FEED_TO_F32; dt <= FEED_TO_BF16; dt++)
		for (int lay = FEED_TO_NCHW; lay <= FEED_TO_NHWC; lay++) {
			struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = dt,
						    .layout = lay, .mean = &mean, .std = &sd,
						    .dst_bytes = sizeof(host)};
			size_t bytes = 3 * 16 * (dt == FEED_TO_F32 ? 4 : 2);
			ck_assert_int_eq(feed_batch_to_device(b, 0, host, &to, NULL), 0);
			to.device = 0;
			ck_assert_msg(feed_batch_to_device(b, 0, dev, &to, s) == 0, "%s", feed_errmsg(c));
			CK_CUDA(cudaMemcpyAsync(back, dev, bytes, cudaMemcpyDeviceToHost, s));
			CK_CUDA(cudaStreamSynchronize(s));
			ck_assert_msg(!memcmp(host, back, bytes), "dtype %d layout %d differs", dt, lay);
		}
	ck_assert_int_eq(feed_release(b), 0);
	feed_stream_close(st);
	cudaFree(dev);
	cudaStreamDestroy(s);
	feed_disconnect(c);
}
END_TEST

/* Mixup and cutmix of the images and the soft labels: device bits equal
 * the CPU path's (the embedded kernels against their twins). */
START_TEST(test_gpu_device_mix_equals_cpu)
{
	dev_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 3, 2);
	struct feed_batch *b = h_next_batch(st);
	const float mean = 0.485f, sd = 0.229f;
	uint8_t host[3 * 16 * 4], back[3 * 16 * 4];
	float lhost[3 * 16], lback[3 * 16]; /* tiny's labels are below H_SAMPLES */
	void *dev, *ldev;
	cudaStream_t s;
	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreate(&s));
	CK_CUDA(cudaMalloc(&dev, sizeof(back)));
	CK_CUDA(cudaMalloc(&ldev, sizeof(lback)));
	struct feed_mix mixes[] = {
		{.op = FEED_MIX_MIXUP, .lam = 0.3141592653589793, .num_classes = 16,
		 .label_smoothing = 0.1},
		{.op = FEED_MIX_CUTMIX, .lam = 1.0 - 6.0 / 16, .x1 = 1, .y1 = 0, .x2 = 3, .y2 = 3,
		 .num_classes = 16},
	};
	for (int m = 0; m < 2; m++) {
		for (int dt = FEED_TO_F32; dt <= FEED_TO_BF16; dt++)
			for (int lay = FEED_TO_NCHW; lay <= FEED_TO_NHWC; lay++) {
				struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = dt,
							    .layout = lay, .mean = &mean, .std = &sd,
							    .dst_bytes = sizeof(host), .mix = &mixes[m]};
				size_t bytes = 3 * 16 * (dt == FEED_TO_F32 ? 4 : 2);
				ck_assert_int_eq(feed_batch_to_device(b, 0, host, &to, NULL), 0);
				to.device = 0;
				ck_assert_msg(feed_batch_to_device(b, 0, dev, &to, s) == 0, "%s",
					      feed_errmsg(c));
				CK_CUDA(cudaMemcpyAsync(back, dev, bytes, cudaMemcpyDeviceToHost, s));
				CK_CUDA(cudaStreamSynchronize(s));
				ck_assert_msg(!memcmp(host, back, bytes), "mix %d dtype %d layout %d "
					      "differs", m, dt, lay);
			}
		struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = FEED_TO_F32,
					    .dst_bytes = sizeof(lhost), .mix = &mixes[m]};
		ck_assert_msg(feed_batch_to_device(b, 1, lhost, &to, NULL) == 0, "%s", feed_errmsg(c));
		to.device = 0;
		ck_assert_msg(feed_batch_to_device(b, 1, ldev, &to, s) == 0, "%s", feed_errmsg(c));
		CK_CUDA(cudaMemcpyAsync(lback, ldev, sizeof(lback), cudaMemcpyDeviceToHost, s));
		CK_CUDA(cudaStreamSynchronize(s));
		ck_assert_msg(!memcmp(lhost, lback, sizeof(lback)), "mix %d: soft labels differ", m);
	}
	ck_assert_int_eq(feed_release(b), 0);
	feed_stream_close(st);
	cudaFree(dev);
	cudaFree(ldev);
	cudaStreamDestroy(s);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_gpu_device_release_waits_for_copy)
{
	dev_start();
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	void *dev;
	cudaStream_t s;
	struct feed_batch *b1 = h_next_batch(st), *b2 = h_next_batch(st), *b3;
	struct feed_to_device to = {.device = 0, .dst_bytes = 2 * 16 * 4};
	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreate(&s));
	CK_CUDA(cudaMalloc(&dev, to.dst_bytes));
	/* the stream's first copy registers its region for DMA and allocates
	 * staging, which the driver may make wait for queued work (gpu.h):
	 * done before s is held, or it could wait for the gate this thread
	 * opens (it hung so on an H200) */
	ck_assert_int_eq(feed_batch_to_device(b2, 0, dev, &to, s), 0);
	CK_CUDA(cudaStreamSynchronize(s));
	atomic_store(&gate, 0);
	CK_CUDA(cudaLaunchHostFunc(s, hold_stream, NULL)); /* nothing after it runs yet */
	ck_assert_int_eq(feed_batch_to_device(b1, 0, dev, &to, s), 0);
	ck_assert_int_eq(feed_release(b1), 0);
	ck_assert_int_eq(feed_release(b2), 0);
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b3), 0); /* b2's slot */
	ck_assert_int_eq(feed_next(st, 0, &b3), -ENOBUFS);     /* b1's is not back */
	atomic_store(&gate, 1);
	CK_CUDA(cudaStreamSynchronize(s));
	struct feed_batch *b4 = h_next_batch(st);               /* now it is */
	feed_release(b3);
	feed_release(b4);
	feed_stream_close(st);
	cudaFree(dev);
	cudaStreamDestroy(s);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_gpu_device_consumer_killed)
{
	dev_start();
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct feed_conn *c = h_conn_new();
		struct feed_stream *st = h_tiny_open(c, 2, 2);
		struct feed_to_device to = {.device = 0, .dst_bytes = 2 * 16 * 4};
		void *dev;
		char ok = cudaMalloc(&dev, to.dst_bytes) == cudaSuccess;
		for (int i = 0; ok && i < 2; i++) {
			struct feed_batch *b = h_next_batch(st);
			ok = !feed_batch_to_device(b, 0, dev, &to, NULL) && !feed_release(b);
		}
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
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	h_tiny_read(st, 6);
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

int main(void)
{
	if (!gpu_listed()) {
		printf("skipped: nvidia-smi -L lists no GPU\n");
		return SKIP;
	}
	Suite *s = suite_create("client_gpu_device");
	TCase *tc = tcase_create("client_gpu_device");
	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gpu_device_query_usable);
	tcase_add_test(tc, test_gpu_device_bits_equal_cpu);
	tcase_add_test(tc, test_gpu_device_mix_equals_cpu);
	tcase_add_test(tc, test_gpu_device_release_waits_for_copy);
	tcase_add_test(tc, test_gpu_device_consumer_killed);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
