/*
 * check_client_gpu.c: libfeedclient's GPU path (feed/gpu.h) against a real
 * feedd, with the driver either absent or replaced by its test double
 * (tests/gpu_double/fake_cuda.c, loaded through FEED_CUDA_DRIVER; its
 * kernels run the CPU twins, its events complete when a test says so).
 * Each Check test is a fresh process, so each loads the driver anew with
 * the environment it set first.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
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

#define CU_READ_ONLY 0x08 /* CU_MEMHOSTREGISTER_READ_ONLY */

static const struct fake_cuda_stats *(*fake_stats)(void);
static void (*fake_complete)(void);

/* Points libfeedclient at the double, with its settings. */
static void use_fake(const char *version, const char *ro)
{
	const char *lib = getenv("FEED_FAKE_CUDA");
	ck_assert_msg(lib, "FEED_FAKE_CUDA (the double's path) not set");
	setenv("FEED_CUDA_DRIVER", lib, 1);
	setenv("FAKE_CUDA_VERSION", version, 1);
	setenv("FAKE_CUDA_RO", ro, 1);
	void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL); /* the handle libfeedclient gets */
	ck_assert_msg(dl, "%s", dlerror());
	*(void **)&fake_stats = dlsym(dl, "fake_cuda_stats");
	*(void **)&fake_complete = dlsym(dl, "fake_cuda_complete_events");
	ck_assert(fake_stats && fake_complete);
}

static bool kernels_built(void)
{
	struct feed_gpu_info gi;
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	return gi.kernels;
}

/* feed_gpu_query succeeds and finds the GPU path unusable, its reason containing why. */
static void expect_unusable(const char *why)
{
	struct feed_gpu_info gi;
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	ck_assert(!gi.usable);
	ck_assert_msg(strstr(gi.reason, why), "%s", gi.reason);
}

static void gpu_start(void)
{
	static char tiny[200];
	snprintf(tiny, sizeof(tiny), "tiny=%s", h.data);
	h_start((const char *[]){"--dataset", tiny, NULL});
}

/* The double (driver 13.0, read-only flag ro) loaded: whether it has kernels to run. */
static bool fake_kernels(const char *ro)
{
	use_fake("13000", ro);
	return kernels_built();
}

/* A new connection (into *ret_c) and a tiny stream on it: batch samples, 2 credits. */
static struct feed_stream *tiny_stream(struct feed_conn **ret_c, uint32_t batch)
{
	*ret_c = h_conn_new();
	return h_tiny_open(*ret_c, batch, 2);
}

/* feedd started on tiny, then tiny_stream. */
static struct feed_stream *start_tiny(struct feed_conn **ret_c, uint32_t batch)
{
	gpu_start();
	return tiny_stream(ret_c, batch);
}

/* The double loaded (driver 13.0), then start_tiny with batches of 3. */
static struct feed_stream *fake_tiny(struct feed_conn **ret_c)
{
	use_fake("13000", "0");
	return start_tiny(ret_c, 3);
}

/* Kills feedd and starts a new incarnation, logging to another file. */
static void restart_feedd(void)
{
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
	h.pid = 0;
	snprintf(h.log, sizeof(h.log), "%s/feedd.again.log", h.dir);
	gpu_start();
}

/* Releases b (if any; asserts 0), completes the double's events if asked, closes st and c. */
static void finish(struct feed_batch *b, bool complete, struct feed_stream *st, struct feed_conn *c)
{
	if (b)
		ck_assert_int_eq(feed_release(b), 0);
	if (complete)
		fake_complete();
	feed_stream_close(st);
	feed_disconnect(c);
}

/* One batch comes at once (into *b), then none: a pending copy keeps a slot. */
static void expect_one_then_no_slot(struct feed_stream *st, struct feed_batch **b)
{
	ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, b), 0);
	ck_assert_int_eq(feed_next(st, 0, b), -ENOBUFS);
}

/* ------------------------------------------------------------------ */
/* Capability                                                          */

/* This machine as it is: without libcuda.so.1 the query says so. */
START_TEST(test_client_gpu_query_this_machine)
{
	struct feed_gpu_info gi;
	unsetenv("FEED_CUDA_DRIVER");
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	ck_assert_int_eq(gi.driver_needed, 13000);
	if (!lib) {
		ck_assert(!gi.usable);
		ck_assert_msg(!strncmp(gi.reason, "libcuda.so.1 not found", 22), "%s", gi.reason);
		ck_assert_int_eq(gi.driver_version, 0);
		ck_assert_uint_eq(gi.num_devices, 0);
	} else {
		ck_assert(gi.usable || gi.reason[0]); /* a driver: usable, or why not */
	}
	ck_assert_int_eq(feed_gpu_query(NULL), -EINVAL);
}
END_TEST

START_TEST(test_client_gpu_query_driver_absent)
{
	setenv("FEED_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	expect_unusable("/nonexistent/libcuda.so.1 not found");
}
END_TEST

/* A library that loads but is no CUDA driver names the missing entry point. */
START_TEST(test_client_gpu_query_not_a_driver)
{
	setenv("FEED_CUDA_DRIVER", "libm.so.6", 1);
	expect_unusable("libm.so.6 has no cuInit");
}
END_TEST

START_TEST(test_client_gpu_query_old_driver)
{
	struct feed_gpu_info gi;
	use_fake("12040", "0");
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	ck_assert(!gi.usable);
	ck_assert_int_eq(gi.driver_version, 12040);
	ck_assert_uint_eq(gi.num_devices, 1);
	ck_assert_msg(strstr(gi.reason, "driver 12.4 too old") && strstr(gi.reason, "13.0"), "%s",
		      gi.reason);
}
END_TEST

START_TEST(test_client_gpu_query_init_error)
{
	use_fake("13000", "0");
	setenv("FAKE_CUDA_INIT", "100", 1);
	expect_unusable("cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
}
END_TEST

START_TEST(test_client_gpu_query_fake_device)
{
	struct feed_gpu_info gi;
	use_fake("13020", "0");
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	ck_assert_int_eq(gi.driver_version, 13020);
	ck_assert_uint_eq(gi.num_devices, 1);
	ck_assert_str_eq(gi.devices[0].name, "Fake GPU 0 (test double)");
	ck_assert_int_eq(gi.devices[0].cc_major, 9);
	ck_assert_int_eq(gi.devices[0].cc_minor, 0);
	if (gi.kernels) {
		ck_assert_msg(gi.usable, "%s", gi.reason);
		ck_assert_str_eq(gi.reason, "");
	} else {
		ck_assert(!gi.usable);
		ck_assert_msg(strstr(gi.reason, "built without CUDA kernels"), "%s", gi.reason);
	}
}
END_TEST

/* ------------------------------------------------------------------ */
/* Conversion                                                          */

/* The tiny dataset's image of sample i is 16 bytes of i: normalized,
 * (i/255 - mean)/std, within a few ulp of the float formula. */
static void expect_images(const float *out, const struct feed_batch *b, float mean, float std)
{
	const uint64_t *idx = feed_batch_samples(b);
	for (uint32_t s = 0; s < feed_batch_size(b); s++)
		for (int k = 0; k < 16; k++) {
			float want = ((float)idx[s] / 255.0f - mean) / std;
			ck_assert_msg(fabsf(out[s * 16 + k] - want) <= 1e-6f * (1 + fabsf(want)),
				      "sample %u px %d: %g, not %g", s, k, out[s * 16 + k], want);
		}
}

START_TEST(test_client_gpu_cpu_path_converts)
{
	struct feed_conn *c;
	struct feed_stream *st = start_tiny(&c, 3);
	struct feed_batch *b = h_next_batch(st);
	float mean = 0.25f, sd = 0.5f, out[3 * 16];
	int64_t bad[3];
	struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = FEED_TO_F32,
				    .mean = &mean, .std = &sd, .dst_bytes = sizeof(out)};

	ck_assert_int_eq(feed_batch_to_device(b, 0, out, &to, NULL), 0);
	expect_images(out, b, mean, sd);
	/* too small a destination, a field that is no image, no such field */
	to.dst_bytes = sizeof(out) - 1;
	ck_assert_int_eq(feed_batch_to_device(b, 0, out, &to, NULL), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "dst holds 191 bytes, the output needs 192"), "%s",
		      feed_errmsg(c));
	to.dst_bytes = sizeof(bad);
	ck_assert_int_eq(feed_batch_to_device(b, 1, bad, &to, NULL), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "field 1: dtype"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_batch_to_device(b, 7, out, &to, NULL), -EINVAL);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(feed_batch_to_device(b, 0, out, &to, NULL), -EINVAL); /* released */
	finish(NULL, false, st, c);
}
END_TEST

/* Without a driver a device request is refused with the query's reason. */
START_TEST(test_client_gpu_device_refused_without_driver)
{
	setenv("FEED_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	struct feed_conn *c;
	struct feed_stream *st = start_tiny(&c, 3);
	struct feed_batch *b = h_next_batch(st);
	float out[3 * 16];
	struct feed_to_device to = {.device = 0, .dst_bytes = sizeof(out)};

	ck_assert_int_eq(feed_batch_to_device(b, 0, out, &to, NULL), -ENODEV);
	ck_assert_msg(strstr(feed_errmsg(c), "GPU path not usable: /nonexistent/libcuda.so.1 not found"),
		      "%s", feed_errmsg(c));
	finish(b, false, st, c);
}
END_TEST

/* feed_stream_pin: the stream's data region registered once (PORTABLE),
 * the batch's memory inside it, the primary context retained until close,
 * which undoes both; a build without kernels pins too (only the driver's
 * entry points are needed). */
START_TEST(test_client_gpu_pin_registers_the_data_region)
{
	struct feed_conn *c;
	struct feed_stream *st = fake_tiny(&c);
	const struct fake_cuda_stats *fs = fake_stats();

	ck_assert_int_eq(feed_stream_pin(NULL, 0), -EINVAL);
	ck_assert_int_eq(feed_stream_pin(st, 7), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "no CUDA device 7"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_pin(st, 0), 0);
	ck_assert_int_eq(feed_stream_pin(st, 0), 0); /* again: nothing more */
	ck_assert_int_eq(fs->registers, 1);
	ck_assert_uint_eq(fs->last_register_flags & 0x01, 0x01); /* PORTABLE */
	ck_assert_int_eq(fs->primary_retains, 1);
	struct feed_batch *b = h_next_batch(st);
	struct feed_view v;
	ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
	uintptr_t lo = (uintptr_t)fs->last_register_ptr, p = (uintptr_t)v.data;
	ck_assert(lo <= p && p + v.bytes <= lo + fs->last_register_bytes);
	ck_assert_int_eq(feed_release(b), 0);
	ck_assert_int_eq(fs->unregisters, 0);
	feed_stream_close(st);
	ck_assert_int_eq(fs->unregisters, 1);
	ck_assert_int_eq(fs->primary_releases, 1);
	feed_disconnect(c);
}
END_TEST

/* After feedd restarts, the new data region is pinned too; the old one is
 * unregistered once its last batch went, by the next feed_next() (before
 * it is unmapped): the thread that released it calls no driver. */
START_TEST(test_client_gpu_pin_follows_a_reconnection)
{
	struct feed_conn *c;
	struct feed_stream *st = fake_tiny(&c);
	const struct fake_cuda_stats *fs = fake_stats();

	ck_assert_int_eq(feed_stream_pin(st, 0), 0);
	struct feed_batch *old = h_next_batch(st);
	restart_feedd();
	for (int i = 0; i < 4; i++) /* what was published before, then the new incarnation's */
		ck_assert_int_eq(feed_release(h_next_batch(st)), 0);
	ck_assert_int_eq(fs->registers, 2);
	ck_assert_int_eq(fs->unregisters, 0);   /* the old region is mapped: a batch holds it */
	ck_assert_int_eq(feed_release(old), 0); /* its last batch */
	ck_assert_int_eq(fs->unregisters, 0);   /* not on the releasing thread */
	ck_assert_int_eq(feed_release(h_next_batch(st)), 0);
	ck_assert_int_eq(fs->unregisters, 1);   /* feed_next unregistered and unmapped it */
	feed_stream_close(st);
	ck_assert_int_eq(fs->unregisters, 2);
	feed_disconnect(c);
}
END_TEST

/* A reconnection while no batch of the old incarnation is held unmaps it
 * at once, on feed_next()'s thread: its pinned region is unregistered
 * after the stream's lock is dropped (the lock checks of this build abort
 * on a driver call under a lock), and the new region is pinned. */
START_TEST(test_client_gpu_pin_reconnection_nothing_held)
{
	struct feed_conn *c;
	struct feed_stream *st = fake_tiny(&c);
	const struct fake_cuda_stats *fs = fake_stats();

	ck_assert_int_eq(feed_stream_pin(st, 0), 0);
	ck_assert_int_eq(feed_release(h_next_batch(st)), 0);
	restart_feedd();
	/* what was published before, then the first of the new incarnation */
	for (int i = 0; i < 8 && fs->registers < 2; i++)
		ck_assert_int_eq(feed_release(h_next_batch(st)), 0);
	ck_assert_int_eq(fs->registers, 2);
	ck_assert_int_eq(fs->unregisters, 1); /* the old one, nothing held in it */
	feed_stream_close(st);
	ck_assert_int_eq(fs->unregisters, 2);
	ck_assert_int_eq(fs->primary_releases, 1);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_client_gpu_pin_without_driver)
{
	setenv("FEED_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	struct feed_conn *c;
	struct feed_stream *st = start_tiny(&c, 3);

	ck_assert_int_eq(feed_stream_pin(st, 0), -ENODEV);
	ck_assert_msg(strstr(feed_errmsg(c), "no CUDA driver to pin with: "
				  "/nonexistent/libcuda.so.1 not found"), "%s", feed_errmsg(c));
	struct feed_batch *b = h_next_batch(st); /* the stream is as it was */
	finish(b, false, st, c);
}
END_TEST

/* Through the double: one registration per region (flags as the device
 * takes them), a copy and a launch per call, the kernel's output the
 * twin's, and everything undone at close. */
static void device_converts(const char *ro, unsigned want_flags)
{
	if (!fake_kernels(ro))
		return; /* without nvcc there is nothing to launch */
	struct feed_conn *c;
	struct feed_stream *st = start_tiny(&c, 3);
	float mean = 0.5f, sd = 0.25f;
	float *dev = malloc(3 * 16 * sizeof(float)); /* the double's device memory is host memory */
	struct feed_to_device to = {.device = 0, .dtype = FEED_TO_F32, .mean = &mean, .std = &sd,
				    .dst_bytes = 3 * 16 * sizeof(float)};
	const struct fake_cuda_stats *fs = fake_stats();

	for (int i = 0; i < 4; i++) {
		struct feed_batch *b = h_next_batch(st);
		ck_assert_int_eq(feed_batch_to_device(b, 0, dev, &to, NULL), 0);
		expect_images(dev, b, mean, sd);
		ck_assert_int_eq(feed_release(b), 0);
		fake_complete();
	}
	ck_assert_int_eq(fs->registers, 1);
	ck_assert_uint_eq(fs->last_register_flags, want_flags);
	ck_assert_int_eq(fs->module_loads, 1);
	ck_assert_int_eq(fs->copies, 4);
	ck_assert_int_eq(fs->launches, 4);
	ck_assert_int_eq(fs->unregisters, 0);
	feed_stream_close(st);
	ck_assert_int_eq(fs->unregisters, 1);
	ck_assert_int_eq(fs->allocs, fs->frees);
	ck_assert_int_eq(fs->events_created, fs->events_destroyed);
	free(dev);
	feed_disconnect(c);
}

START_TEST(test_client_gpu_register_once)
{
	device_converts("0", 0);
}
END_TEST

START_TEST(test_client_gpu_register_read_only_where_taken)
{
	device_converts("1", CU_READ_ONLY);
}
END_TEST

/* A batch released while its copy is in flight keeps its slot until the
 * event completes: with both credits held, no third batch comes. */
START_TEST(test_client_gpu_release_waits_for_event)
{
	if (!fake_kernels("0"))
		return;
	struct feed_conn *c;
	struct feed_stream *st = start_tiny(&c, 2);
	const struct fake_cuda_stats *fs = fake_stats();
	float dev[2 * 16];
	struct feed_to_device to = {.device = 0, .dtype = FEED_TO_BF16, .dst_bytes = sizeof(dev)};
	struct feed_batch *b1 = h_next_batch(st), *b2 = h_next_batch(st), *b3;

	ck_assert_int_eq(feed_batch_to_device(b1, 0, dev, &to, NULL), 0);
	ck_assert_int_eq(fs->events_pending, 1);
	ck_assert_int_eq(feed_release(b1), 0);      /* deferred, does not wait */
	ck_assert_int_eq(feed_release(b1), -EINVAL); /* still once only */
	ck_assert_int_eq(feed_release(b2), 0);       /* no copy: goes back now */
	expect_one_then_no_slot(st, &b3); /* b2's slot; b1's is not back */
	ck_assert_int_eq(fs->syncs, 0);
	fake_complete();
	struct feed_batch *b4 = h_next_batch(st);     /* now it is */
	ck_assert_int_eq(fs->events_destroyed, 1);
	ck_assert_int_eq(fs->syncs, 0);
	/* with every credit held and a copy pending, a waiting feed_next waits
	 * for the copy (cuEventSynchronize), not for a daemon that cannot send */
	ck_assert_int_eq(feed_batch_to_device(b4, 0, dev, &to, NULL), 0);
	ck_assert_int_eq(feed_release(b4), 0);
	struct feed_batch *b5 = h_next_batch(st);
	ck_assert_int_eq(fs->syncs, 1);
	ck_assert_int_eq(fs->events_pending, 0);
	feed_release(b5);
	feed_stream_close(st);
	ck_assert_int_eq(fs->events_created, fs->events_destroyed);
	feed_disconnect(c);
}
END_TEST

/* A consumer killed with its region registered and copies in flight: the
 * daemon reclaims its slots as for any client and serves the next one. */
START_TEST(test_client_gpu_consumer_killed)
{
	if (!fake_kernels("0"))
		return;
	gpu_start();
	int pipefd[2];
	ck_assert_int_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct feed_conn *c;
		struct feed_stream *st = tiny_stream(&c, 2);
		float dev[2 * 16];
		struct feed_to_device to = {.device = 0, .dst_bytes = sizeof(dev)};
		for (int i = 0; i < 2; i++) {
			struct feed_batch *b = h_next_batch(st);
			if (feed_batch_to_device(b, 0, dev, &to, NULL) || feed_release(b))
				_exit(1);
		}
		char ok = fake_stats()->registers == 1 && fake_stats()->events_pending == 2;
		(void)!write(pipefd[1], &ok, 1);
		pause();
		_exit(0);
	}
	char ok = 0;
	ck_assert_int_eq(read(pipefd[0], &ok, 1), 1);
	ck_assert_msg(ok, "the child did not register once with two copies pending");
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_ne(h_wait(pid, H_DEADLINE_MS), -1);
	struct feed_conn *c;
	struct feed_stream *st = tiny_stream(&c, 2);
	h_tiny_read(st, 6);
	finish(NULL, false, st, c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Per-sample flip, delivery as it is, two streams                     */

/* feedd on the "kinds" dataset (asymmetric 4x4x3 images, tokens, labels). */
static struct feed_stream *kinds_open(struct feed_conn **ret_c, uint32_t batch)
{
	static char arg[300];
	snprintf(arg, sizeof(arg), "%s/kinds", h.dir);
	h_make_kinds_dataset(arg);
	snprintf(arg, sizeof(arg), "kinds=%s/kinds", h.dir);
	h_start((const char *[]){"--dataset", arg, NULL});
	*ret_c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "kinds", .batch = batch, .credits = 2};
	return h_stream_open(*ret_c, &o);
}

/* n images of b's field 0, mirrored by hand where flip says, then
 * converted without flip by the twin: what a flip must give. */
static void *flipped_by_hand(struct feed_batch *b, const uint8_t *flip, int dtype, int layout,
			     const float *mean, const float *sd, size_t *ret_bytes)
{
	struct feed_view v;
	struct feed_convert cv;
	size_t n = feed_batch_size(b);
	ck_assert_int_eq(feed_batch_field(b, 0, &v), 0);
	uint8_t *img = malloc(v.bytes);
	ck_assert_ptr_nonnull(img);
	for (size_t i = 0; i < n; i++)
		for (int y = 0; y < 4; y++)
			for (int x = 0; x < 4; x++)
				for (int ch = 0; ch < 3; ch++) {
					int sx = flip[i] ? 3 - x : x;
					img[((i * 4 + y) * 4 + x) * 3 + ch] =
						((const uint8_t *)v.data)[((i * 4 + y) * 4 + sx) * 3 + ch];
				}
	ck_assert_int_eq(feed_convert_init(&cv, 4, 4, 3, (enum feed_convert_dtype)dtype,
					   (enum feed_convert_layout)layout, mean, sd), 0);
	*ret_bytes = n * feed_convert_sample_bytes(&cv);
	void *out = malloc(*ret_bytes);
	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(feed_convert_images_cpu(&cv, img, n, NULL, out), 0);
	free(img);
	return out;
}

/* Per-sample flip flags, on the CPU and on the (double's) device, for both
 * layouts, equal mirroring by hand; flags on anything but an image
 * conversion are refused. */
START_TEST(test_client_gpu_flip)
{
	if (!fake_kernels("0"))
		return;
	struct feed_conn *c;
	struct feed_stream *st = kinds_open(&c, 3);
	static const float mean[3] = {0.4f, 0.5f, 0.6f}, sd[3] = {0.2f, 0.25f, 0.3f};
	static const uint8_t flip[3] = {1, 0, 7};
	uint8_t out[3 * 48 * 4];
	struct feed_batch *b = h_next_batch(st);
	for (int layout = FEED_TO_NCHW; layout <= FEED_TO_NHWC; layout++)
		for (int device = FEED_DEVICE_CPU; device <= 0; device++) {
			size_t bytes;
			void *want = flipped_by_hand(b, flip, FEED_TO_BF16, layout, mean, sd, &bytes);
			struct feed_to_device to = {.device = device, .dtype = FEED_TO_BF16,
						    .layout = layout, .mean = mean, .std = sd,
						    .dst_bytes = sizeof(out), .flip = flip};
			memset(out, 0, sizeof(out));
			ck_assert_msg(feed_batch_to_device(b, 0, out, &to, NULL) == 0, "%s",
				      feed_errmsg(c));
			ck_assert_msg(!memcmp(out, want, bytes), "layout %d device %d: not mirrored",
				      layout, device);
			free(want);
		}
	int64_t tok[3 * 5];
	struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dst_bytes = sizeof(tok),
				    .flip = flip};
	ck_assert_int_eq(feed_batch_to_device(b, 1, tok, &to, NULL), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "field 1: flip is for u8 images"), "%s", feed_errmsg(c));
	finish(b, true, st, c);
}
END_TEST

/* FEED_TO_SAME: any fixed field as it is, on the device with one copy
 * straight from the region (no staging buffer, no kernel), the slot still
 * kept until the copy's event completes. */
START_TEST(test_client_gpu_same)
{
	if (!fake_kernels("0"))
		return;
	struct feed_conn *c;
	struct feed_stream *st = kinds_open(&c, 2);
	const struct fake_cuda_stats *fs = fake_stats();
	struct feed_batch *b1 = h_next_batch(st), *b2 = h_next_batch(st), *b3;
	int64_t labels[2];
	uint8_t images[2 * 48], note[64];
	struct feed_view hv;
	struct feed_to_device to = {.device = 0, .dtype = FEED_TO_SAME, .dst_bytes = sizeof(labels)};

	ck_assert_int_eq(feed_batch_to_device(b1, 2, labels, &to, NULL), 0);
	to.dst_bytes = sizeof(images);
	ck_assert_int_eq(feed_batch_to_device(b1, 0, images, &to, NULL), 0);
	ck_assert_int_eq(fs->launches, 0);
	ck_assert_int_eq(fs->allocs, 0);   /* no staging */
	ck_assert_int_eq(fs->copies, 2);
	ck_assert_int_eq(feed_batch_field(b1, 2, &hv), 0);
	ck_assert(!memcmp(labels, hv.data, sizeof(labels)));
	ck_assert_int_eq(feed_batch_field(b1, 0, &hv), 0);
	ck_assert(!memcmp(images, hv.data, sizeof(images)));
	/* too small, variable-length */
	to.dst_bytes = sizeof(labels) - 1;
	ck_assert_int_eq(feed_batch_to_device(b1, 2, labels, &to, NULL), -EINVAL);
	to.dst_bytes = sizeof(note);
	ck_assert_int_eq(feed_batch_to_device(b1, 3, note, &to, NULL), -EINVAL);
	ck_assert_msg(strstr(feed_errmsg(c), "field 3: variable-length"), "%s", feed_errmsg(c));
	/* the CPU path copies too */
	int64_t cpu_labels[2];
	to = (struct feed_to_device){.device = FEED_DEVICE_CPU, .dtype = FEED_TO_SAME,
				     .dst_bytes = sizeof(cpu_labels)};
	ck_assert_int_eq(feed_batch_to_device(b2, 2, cpu_labels, &to, NULL), 0);
	ck_assert_int_eq(feed_batch_field(b2, 2, &hv), 0);
	ck_assert(!memcmp(cpu_labels, hv.data, sizeof(cpu_labels)));
	/* b1's copies pending: its slot stays out */
	ck_assert_int_eq(feed_release(b1), 0);
	ck_assert_int_eq(feed_release(b2), 0);
	expect_one_then_no_slot(st, &b3);
	fake_complete();
	struct feed_batch *b4 = h_next_batch(st);
	feed_release(b3);
	feed_release(b4);
	finish(NULL, false, st, c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Mixup and cutmix                                                    */

/* A batch's mix on the (double's) device gives the CPU path's bits, for
 * images in every dtype and layout and for the soft labels, and changes
 * the images; feed_batch_mix_draw is feed_mix_draw of the stream's seed,
 * epoch and batch number; labels out of range, a box that does not fit
 * and a mix on a field that is neither images nor labels are refused. */
START_TEST(test_client_gpu_mix)
{
	if (!fake_kernels("0"))
		return;
	struct feed_conn *c;
	struct feed_stream *st = kinds_open(&c, 3);
	struct feed_batch *b = h_next_batch(st);
	const uint32_t C = 11 * H_SAMPLES; /* labels are 11 i */
	const struct fake_cuda_stats *fs = fake_stats();
	for (int op = FEED_MIX_MIXUP; op <= FEED_MIX_CUTMIX; op++) {
		struct feed_mix_spec spec = {.switch_prob = 0.5, .num_classes = C,
					     .label_smoothing = 0.1};
		struct feed_mix m, want;
		*(op == FEED_MIX_MIXUP ? &spec.mixup_alpha : &spec.cutmix_alpha) = 0.7;
		ck_assert_int_eq(feed_batch_mix_draw(b, &spec, 4, 4, &m), 0);
		ck_assert_int_eq(feed_mix_draw(&spec, 0, feed_batch_epoch(b), feed_batch_index(b), 4,
					       4, &want), 0);
		ck_assert(m.op == op && m.lam == want.lam && m.x1 == want.x1 && m.y2 == want.y2);
		if (op == FEED_MIX_CUTMIX) { /* a box that surely changes something */
			m.x1 = 1, m.y1 = 0, m.x2 = 3, m.y2 = 2;
			m.lam = 1.0 - 4.0 / 16;
		}
		for (int dtype = FEED_TO_F32; dtype <= FEED_TO_BF16; dtype++)
			for (int layout = FEED_TO_NCHW; layout <= FEED_TO_NHWC; layout++) {
				uint8_t cpu[3 * 48 * 4], dev[3 * 48 * 4], plain[3 * 48 * 4];
				size_t bytes = 3 * 48 * (dtype == FEED_TO_F32 ? 4 : 2);
				struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = dtype,
							    .layout = layout, .dst_bytes = sizeof(cpu)};
				ck_assert_int_eq(feed_batch_to_device(b, 0, plain, &to, NULL), 0);
				to.mix = &m;
				ck_assert_msg(feed_batch_to_device(b, 0, cpu, &to, NULL) == 0, "%s",
					      feed_errmsg(c));
				int launches = fs->launches;
				to.device = 0;
				memset(dev, 0xee, sizeof(dev));
				ck_assert_msg(feed_batch_to_device(b, 0, dev, &to, NULL) == 0, "%s",
					      feed_errmsg(c));
				ck_assert_int_eq(fs->launches, launches + 2); /* conversion, mix */
				ck_assert_msg(!memcmp(cpu, dev, bytes), "op %d dtype %d layout %d", op,
					      dtype, layout);
				ck_assert_msg(memcmp(cpu, plain, bytes), "op %d: nothing mixed", op);
			}
		float lc[3 * C], ld[3 * C];
		struct feed_to_device to = {.device = FEED_DEVICE_CPU, .dtype = FEED_TO_F32,
					    .dst_bytes = sizeof(lc), .mix = &m};
		ck_assert_msg(feed_batch_to_device(b, 2, lc, &to, NULL) == 0, "%s", feed_errmsg(c));
		to.device = 0;
		ck_assert_msg(feed_batch_to_device(b, 2, ld, &to, NULL) == 0, "%s", feed_errmsg(c));
		ck_assert(!memcmp(lc, ld, sizeof(lc)));
		for (int i = 0; i < 3; i++) {
			double sum = 0;
			for (uint32_t k = 0; k < C; k++)
				sum += lc[i * C + k];
			ck_assert_msg(fabs(sum - 1.0) < 1e-5, "row %d sums to %g", i, sum);
		}
		/* refusals */
		struct feed_mix bad = m;
		bad.num_classes = 5;
		to.device = FEED_DEVICE_CPU;
		to.mix = &bad;
		ck_assert_int_eq(feed_batch_to_device(b, 2, lc, &to, NULL), -ERANGE);
		ck_assert_msg(strstr(feed_errmsg(c), "not in [0, num_classes 5)"), "%s", feed_errmsg(c));
		bad = m;
		bad.op = FEED_MIX_CUTMIX, bad.x2 = 5;
		to = (struct feed_to_device){.device = 0, .dtype = FEED_TO_F32, .dst_bytes = 3 * 48 * 4,
					     .mix = &bad};
		ck_assert_int_eq(feed_batch_to_device(b, 0, lc, &to, NULL), -EINVAL);
		ck_assert_msg(strstr(feed_errmsg(c), "does not fit images of 4x4"), "%s", feed_errmsg(c));
		to.mix = &m;
		to.dst_bytes = sizeof(lc);
		ck_assert_int_eq(feed_batch_to_device(b, 1, lc, &to, NULL), -EINVAL);
		ck_assert_msg(strstr(feed_errmsg(c), "field 1: mix makes soft labels"), "%s",
			      feed_errmsg(c));
	}
	finish(b, true, st, c);
}
END_TEST

/* The same field of one batch converted on two streams: the second waits
 * for the first's copy, which read the same staging buffer; on one stream
 * the stream orders them and nothing waits. */
START_TEST(test_client_gpu_two_streams)
{
	if (!fake_kernels("0"))
		return;
	struct feed_conn *c;
	struct feed_stream *st = kinds_open(&c, 2);
	const struct fake_cuda_stats *fs = fake_stats();
	struct feed_batch *b = h_next_batch(st);
	float a[2 * 48], bb[2 * 48], want[2 * 48];
	struct feed_to_device to = {.device = 0, .dtype = FEED_TO_F32, .dst_bytes = sizeof(a)};
	struct feed_to_device cpu = to;
	cpu.device = FEED_DEVICE_CPU;

	ck_assert_int_eq(feed_batch_to_device(b, 0, want, &cpu, NULL), 0);
	ck_assert_int_eq(feed_batch_to_device(b, 0, a, &to, (void *)0x1), 0);
	ck_assert_int_eq(feed_batch_to_device(b, 0, a, &to, (void *)0x1), 0);
	ck_assert_int_eq(fs->syncs, 0);    /* same stream: ordered by it */
	ck_assert_int_eq(feed_batch_to_device(b, 0, bb, &to, (void *)0x2), 0);
	ck_assert_int_eq(fs->syncs, 2);    /* both copies on stream 1 waited for */
	ck_assert(!memcmp(a, want, sizeof(a)));
	ck_assert(!memcmp(bb, want, sizeof(bb)));
	finish(b, true, st, c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client_gpu");
	TCase *tc = tcase_create("client_gpu");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_client_gpu_query_this_machine);
	tcase_add_test(tc, test_client_gpu_query_driver_absent);
	tcase_add_test(tc, test_client_gpu_query_not_a_driver);
	tcase_add_test(tc, test_client_gpu_query_old_driver);
	tcase_add_test(tc, test_client_gpu_query_init_error);
	tcase_add_test(tc, test_client_gpu_query_fake_device);
	tcase_add_test(tc, test_client_gpu_cpu_path_converts);
	tcase_add_test(tc, test_client_gpu_device_refused_without_driver);
	tcase_add_test(tc, test_client_gpu_register_once);
	tcase_add_test(tc, test_client_gpu_register_read_only_where_taken);
	tcase_add_test(tc, test_client_gpu_release_waits_for_event);
	tcase_add_test(tc, test_client_gpu_consumer_killed);
	tcase_add_test(tc, test_client_gpu_flip);
	tcase_add_test(tc, test_client_gpu_same);
	tcase_add_test(tc, test_client_gpu_two_streams);
	tcase_add_test(tc, test_client_gpu_mix);
	tcase_add_test(tc, test_client_gpu_pin_registers_the_data_region);
	tcase_add_test(tc, test_client_gpu_pin_follows_a_reconnection);
	tcase_add_test(tc, test_client_gpu_pin_reconnection_nothing_held);
	tcase_add_test(tc, test_client_gpu_pin_without_driver);
	suite_add_tcase(s, tc);
	return h_run_suite(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
