/*
 * check_hybrid.c: hybrid JPEG decode (daemon/gpu/hybrid.c, nvjpeg_load.c)
 * against the doubles of the CUDA driver (FEED_FAKE_CUDA: device memory is
 * host memory) and of nvJPEG (FEED_FAKE_NVJPEG: decodes with core/image.h,
 * so the GPU path's pixels are checked bit for bit against the CPU
 * decoder's full-scale decode of the same box). Fixtures: $FEED_IMAGES
 * (tests/images/make_fixtures.py).
 *
 * The loader and the scheduler run everywhere; the decode tests need the
 * driver double to be usable, which needs this build's embedded kernels
 * (a build without nvcc has none, as check_ipc's device tests say).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "check_util.h"
#include "dtype.h"
#include "pipeline.h"
#include "cudrv.h"
#include "fake_cuda.h"
#include "hybrid.h"
#include "image.h"
#include "nvjpeg_load.h"

/* fake_nvjpeg.c's counters (same layout) */
struct fake_nvjpeg_stats {
	int creates, hardware_creates, batched_calls, images_decoded, roi_decodes, bad_images,
	    device_faults, destroys;
};

static void use_doubles(void)
{
	const char *cu = getenv("FEED_FAKE_CUDA"), *nv = getenv("FEED_FAKE_NVJPEG");
	ck_assert_msg(cu && nv, "FEED_FAKE_CUDA and FEED_FAKE_NVJPEG must be set (ctest does)");
	setenv("FEED_CUDA_DRIVER", cu, 1);
	setenv("FEED_NVJPEG_LIBRARY", nv, 1);
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
}

static const struct fake_nvjpeg_stats *nv_stats(void)
{
	void *lib = dlopen(getenv("FEED_FAKE_NVJPEG"), RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(lib);
	const struct fake_nvjpeg_stats *(*fn)(void) =
		(const struct fake_nvjpeg_stats *(*)(void))dlsym(lib, "fake_nvjpeg_stats");
	ck_assert_ptr_nonnull(fn);
	return fn();
}

static const struct fake_cuda_stats *cu_stats(void)
{
	void *lib = dlopen(getenv("FEED_FAKE_CUDA"), RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(lib);
	const struct fake_cuda_stats *(*fn)(void) =
		(const struct fake_cuda_stats *(*)(void))dlsym(lib, "fake_cuda_stats");
	ck_assert_ptr_nonnull(fn);
	return fn();
}

static uint8_t *fixture(const char *name, size_t *ret_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", getenv("FEED_IMAGES"), name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "fixture %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)n);
	ck_assert(p && fread(p, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*ret_len = (size_t)n;
	return p;
}

#ifndef FEED_TEST_FATBIN
#define FEED_TEST_FATBIN 0
#endif

/* Whether the driver double is usable; false only in a build without
 * kernels (no nvcc: FEED_TEST_FATBIN 0), where the test is skipped, saying
 * so: with the fatbin embedded, not usable is a failure. */
static bool double_usable(void)
{
	if (cudrv_get()->info.usable)
		return true;
	ck_assert_msg(!FEED_TEST_FATBIN, "the driver double is not usable in a build with "
		      "kernels: %s", cudrv_get()->info.reason);
	fprintf(stderr, "skipped: %s\n", cudrv_get()->info.reason);
	return false;
}

/* A decoder on the doubles, or NULL (skip) when this build's driver double
 * is not usable (no kernels). */
static struct hyb_dec *dec_new(void)
{
	struct feed_err err = {0};
	struct hyb_dec *d = NULL;
	use_doubles();
	if (!double_usable())
		return NULL;
	ck_assert_ptr_null(hyb_unusable_reason());
	ck_assert_int_eq(hyb_dec_new(njl_get(), cudrv_get(), 0, &d, &err), 0);
	return d;
}

/* The CPU decoder's full-scale decode of box equals view, bit for bit. */
static void same_as_cpu(const uint8_t *data, size_t len, const struct img_box *box, uint32_t c,
			const struct img_view *v)
{
	struct img_info info;
	struct feed_err err = {0};
	struct img_decoder *dec;
	struct img_decoded d;
	ck_assert_int_eq(img_probe(data, len, &info, &err), 0);
	struct img_limits lim = {info.width, info.height, 0};
	ck_assert_int_eq(img_decoder_new(&lim, c, &dec, &err), 0);
	ck_assert_int_eq(img_decode(dec, data, len, box, 1, &d, &err), 0);
	ck_assert_uint_eq(v->w, box->w);
	ck_assert_uint_eq(v->h, box->h);
	ck_assert_uint_eq(v->c, c);
	const uint8_t *src = d.view.px + (size_t)d.box_y * d.view.stride + (size_t)d.box_x * c;
	for (uint32_t r = 0; r < box->h; r++)
		ck_assert_msg(!memcmp(v->px + r * v->stride, src + r * d.view.stride, (size_t)box->w * c),
			      "row %u differs", r);
	img_decoder_free(dec);
}

/* ------------------------------------------------------------------ */
/* The scheduler                                                       */

START_TEST(test_hybrid_sched_follows_the_backlog)
{
	struct hyb_sched s;
	hyb_sched_init(&s, NULL);
	ck_assert_str_eq(hyb_sched_reason(&s), "");
	/* the reader has drained the queue (0 of 8 ready): an eighth more each batch */
	for (uint32_t k = 1; k <= HYB_STEPS; k++)
		ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 0, 8), 64 * k / HYB_STEPS);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 2, 8), 64); /* at most the whole batch */
	/* half full: it stays */
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 4, 8), 64);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 5, 8), 64);
	/* the CPU keeps ahead (6 of 8 ready): back an eighth a batch, to none */
	for (uint32_t k = HYB_STEPS; k-- > 0;)
		ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 6, 8), 64 * k / HYB_STEPS);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 8, 8), 0);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 64, 3, 8), 0);
}
END_TEST

START_TEST(test_hybrid_sched_failed_stays_on_cpu)
{
	struct hyb_sched s;
	hyb_sched_init(&s, NULL);
	for (int i = 0; i < 4; i++)
		(void)hyb_sched_gpu_images(&s, 32, 0, 8);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 32, 0, 8), 20);
	hyb_sched_fail(&s, "device fault: %s", "NVJPEG_STATUS_EXECUTION_FAILED (6)");
	hyb_sched_fail(&s, "a later reason");
	ck_assert_str_eq(hyb_sched_reason(&s), "device fault: NVJPEG_STATUS_EXECUTION_FAILED (6)");
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(hyb_sched_gpu_images(&s, 32, 0, 8), 0);

	struct hyb_sched t;
	hyb_sched_init(&t, "nvJPEG not found");
	ck_assert_str_eq(hyb_sched_reason(&t), "nvJPEG not found");
	ck_assert_uint_eq(hyb_sched_gpu_images(&t, 32, 0, 8), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The loader                                                          */

START_TEST(test_hybrid_nvjpeg_absent_says_why)
{
	struct njl nv;
	use_doubles();
	setenv("FEED_NVJPEG_LIBRARY", "/nonexistent/libnvjpeg.so.13", 1);
	ck_assert_int_eq(njl_load(&nv), -ENOENT);
	ck_assert(!nv.usable);
	ck_assert_msg(strstr(nv.reason, "nvJPEG not found (tried /nonexistent/libnvjpeg.so.13"),
		      "%s", nv.reason);
	/* status: the daemon-wide reason is nvJPEG's (the driver double is there) */
	if (cudrv_get()->info.usable)
		ck_assert_str_eq(hyb_unusable_reason(), njl_get()->reason);
}
END_TEST

START_TEST(test_hybrid_nvjpeg_without_entry_point_refused)
{
	struct njl nv;
	use_doubles();
	/* a library that is not nvJPEG: the driver's double */
	setenv("FEED_NVJPEG_LIBRARY", getenv("FEED_FAKE_CUDA"), 1);
	ck_assert_int_eq(njl_load(&nv), -ENOSYS);
	ck_assert(!nv.usable);
	ck_assert_msg(strstr(nv.reason, "has no nvjpegGetProperty"), "%s", nv.reason);
}
END_TEST

START_TEST(test_hybrid_nvjpeg_loads_the_double)
{
	struct njl nv;
	use_doubles();
	setenv("FAKE_NVJPEG_VERSION", "12.4.1", 1);
	ck_assert_int_eq(njl_load(&nv), 0);
	ck_assert(nv.usable);
	ck_assert_int_eq(nv.version, 12041);
	ck_assert_str_eq(nv.path, getenv("FEED_FAKE_NVJPEG"));
	ck_assert_str_eq(nv.reason, "");
}
END_TEST

START_TEST(test_hybrid_nvjpeg_newer_than_the_driver_refused)
{
	struct njl nv;
	use_doubles();
	setenv("FAKE_CUDA_VERSION", "12040", 1);   /* a CUDA 12.4 driver */
	setenv("FAKE_NVJPEG_VERSION", "13.0.1", 1);
	ck_assert_msg(cudrv_get()->info.driver_version == 12040, "the driver double: %s",
		      cudrv_get()->info.reason);
	ck_assert_int_eq(njl_load(&nv), -ENOTSUP);
	ck_assert(!nv.usable);
	ck_assert_msg(strstr(nv.reason, "is nvJPEG 13.0, which needs a CUDA 13 driver; this driver "
			     "runs CUDA 12.4"), "%s", nv.reason);
}
END_TEST

START_TEST(test_hybrid_no_driver_says_no_gpu)
{
	use_doubles();
	setenv("FEED_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
	const char *why = hyb_unusable_reason();
	ck_assert_ptr_nonnull(why);
	ck_assert_msg(!strncmp(why, "no GPU: /nonexistent/libcuda.so.1 not found", 43), "%s", why);
}
END_TEST

START_TEST(test_hybrid_create_failure_names_the_call)
{
	struct feed_err err = {0};
	struct hyb_dec *d = NULL;
	use_doubles();
	setenv("FAKE_NVJPEG_CREATE", "8", 1);
	if (!double_usable())
		return;
	ck_assert_int_eq(hyb_dec_new(njl_get(), cudrv_get(), 0, &d, &err), -EIO);
	ck_assert_ptr_null(d);
	ck_assert_str_eq(err.msg, "nvjpegCreateEx failed: NVJPEG_STATUS_INTERNAL_ERROR (8)");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Decoding                                                            */

static const char *const photos[] = {"photo_00.jpg", "photo_01.jpg", "rgb420.jpg", "gray.jpg"};
#define NPHOTOS (sizeof(photos) / sizeof(photos[0]))

START_TEST(test_hybrid_decode_regions_equal_cpu_decoder)
{
	struct hyb_dec *d = dec_new();
	if (!d)
		return;
	ck_assert(!hyb_dec_hardware(d)); /* the double has no JPEG engines by default */
	struct hyb_image im[NPHOTOS];
	struct hyb_result out[NPHOTOS];
	struct feed_err err = {0};
	for (uint32_t i = 0; i < NPHOTOS; i++) {
		im[i].data = fixture(photos[i], &im[i].len);
		/* a RandomResizedCrop-like box, odd offsets and sizes */
		im[i].box = (struct img_box){7 + 13 * i, 5 + 3 * i, 101 + 17 * i, 77 + 9 * i};
	}
	for (uint32_t c = 1; c <= 3; c += 2) {
		ck_assert_int_eq(hyb_decode(d, im, NPHOTOS, c, out, &err), 0);
		for (uint32_t i = 0; i < NPHOTOS; i++) {
			ck_assert_msg(out[i].ok, "%s: %s", photos[i], out[i].why);
			same_as_cpu(im[i].data, im[i].len, &im[i].box, c, &out[i].view);
		}
	}
	const struct fake_nvjpeg_stats *st = nv_stats();
	ck_assert_int_eq(st->batched_calls, 2);  /* one call per batch */
	ck_assert_int_eq(st->roi_decodes, 2 * (int)NPHOTOS); /* only the boxes */
	ck_assert_int_eq(cu_stats()->dtoh_copies, 2); /* one copy back per batch */
	for (uint32_t i = 0; i < NPHOTOS; i++)
		free((void *)im[i].data);
	hyb_dec_free(d);
}
END_TEST

START_TEST(test_hybrid_decode_uses_the_jpeg_engines)
{
	setenv("FAKE_NVJPEG_HARDWARE", "1", 1);
	struct hyb_dec *d = dec_new();
	if (!d)
		return;
	ck_assert(hyb_dec_hardware(d));
	ck_assert_int_eq(nv_stats()->hardware_creates, 1);
	/* a progressive image is left to the CPU up front, not found by
	 * failing the batch on the engines */
	const char *names[] = {"photo_00.jpg", "progressive.jpg", "rgb444.jpg"};
	struct hyb_image im[3];
	struct hyb_result out[3];
	struct feed_err err = {0};
	for (uint32_t i = 0; i < 3; i++) {
		im[i].data = fixture(names[i], &im[i].len);
		im[i].box = (struct img_box){3, 2, 90, 70};
	}
	ck_assert_int_eq(hyb_decode(d, im, 3, 3, out, &err), 0);
	ck_assert(out[0].ok && !out[1].ok && out[2].ok);
	ck_assert_msg(strstr(out[1].why, "progressive"), "%s", out[1].why);
	ck_assert_int_eq(nv_stats()->batched_calls, 1);
	ck_assert_int_eq(nv_stats()->bad_images, 0);
	same_as_cpu(im[2].data, im[2].len, &im[2].box, 3, &out[2].view);
	for (uint32_t i = 0; i < 3; i++)
		free((void *)im[i].data);
	hyb_dec_free(d);
}
END_TEST

START_TEST(test_hybrid_decode_bad_image_left_to_cpu)
{
	struct hyb_dec *d = dec_new();
	if (!d)
		return;
	/* a good one, one whose header is bad, one that fails mid-decode, a
	 * box outside its image, a good one */
	const char *names[] = {"photo_00.jpg", "bad_garbage.jpg", "bad_truncated.jpg",
			       "photo_01.jpg", "photo_02.jpg"};
	struct hyb_image im[5];
	struct hyb_result out[5];
	struct feed_err err = {0};
	for (uint32_t i = 0; i < 5; i++) {
		im[i].data = fixture(names[i], &im[i].len);
		im[i].box = (struct img_box){0, 0, 64, 48};
	}
	im[3].box = (struct img_box){0, 0, 60000, 48};
	ck_assert_int_eq(hyb_decode(d, im, 5, 3, out, &err), 0);
	ck_assert(out[0].ok && out[4].ok);
	ck_assert(!out[1].ok && !out[2].ok && !out[3].ok);
	ck_assert_msg(strstr(out[2].why, "NVJPEG_STATUS_BAD_JPEG"), "%s", out[2].why);
	ck_assert_msg(strstr(out[3].why, "box outside"), "%s", out[3].why);
	ck_assert_msg(out[1].why[0], "no reason for bad_garbage.jpg");
	same_as_cpu(im[0].data, im[0].len, &im[0].box, 3, &out[0].view);
	same_as_cpu(im[4].data, im[4].len, &im[4].box, 3, &out[4].view);
	for (uint32_t i = 0; i < 5; i++)
		free((void *)im[i].data);
	hyb_dec_free(d);
}
END_TEST

START_TEST(test_hybrid_decode_device_fault_moves_stream_to_cpu)
{
	setenv("FAKE_NVJPEG_FAIL_AFTER", "1", 1);
	struct hyb_dec *d = dec_new();
	if (!d)
		return;
	struct hyb_sched s;
	struct hyb_image im;
	struct hyb_result out;
	struct feed_err err = {0};
	hyb_sched_init(&s, NULL);
	im.data = fixture("photo_00.jpg", &im.len);
	im.box = (struct img_box){0, 0, 32, 32};
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 8, 0, 8), 1);
	ck_assert_int_eq(hyb_decode(d, &im, 1, 3, &out, &err), 0);
	ck_assert(out.ok);
	ck_assert_int_eq(hyb_decode(d, &im, 1, 3, &out, &err), -EIO);
	ck_assert_str_eq(err.msg, "nvjpegDecodeBatchedEx failed: NVJPEG_STATUS_EXECUTION_FAILED (6)");
	/* what the builder does with it: the stream goes to the CPU, saying why */
	hyb_sched_fail(&s, "nvJPEG: %s", err.msg);
	ck_assert_uint_eq(hyb_sched_gpu_images(&s, 8, 0, 8), 0);
	ck_assert_msg(strstr(hyb_sched_reason(&s), "EXECUTION_FAILED"), "%s", hyb_sched_reason(&s));
	free((void *)im.data);
	hyb_dec_free(d);
}
END_TEST

/* A worker building for streams on two GPUs in turn keeps a decoder for
 * each (nvJPEG's handle, state and buffers are not remade at every
 * switch), and lets one go once no stream of its device is left. */
START_TEST(test_hybrid_worker_keeps_a_decoder_per_device)
{
	setenv("FAKE_CUDA_DEVICES", "2", 1);
	use_doubles();
	if (!double_usable())
		return;
	struct hyb_stream a, b;
	struct bld_pre_image im = {.box = {3, 5, 40, 24}};
	struct aug_pre out;
	im.data = fixture("photo_01.jpg", &im.len);
	hyb_stream_init(&a, 0);
	hyb_stream_init(&b, 1);
	ck_assert_str_eq(hyb_sched_reason(&a.sched), "");
	const struct fake_nvjpeg_stats *nv = nv_stats();
	for (int round = 0; round < 3; round++) {
		struct hyb_stream *s[2] = {&a, &b};
		for (int k = 0; k < 2; k++) {
			memset(&out, 0, sizeof(out));
			ck_assert_uint_eq(hyb_stream_run(s[k], &im, 1, 3, &out), 1);
			same_as_cpu(im.data, im.len, &im.box, 3, &out.view);
		}
	}
	ck_assert_int_eq(nv->creates, 2);   /* one per device, not one per switch */
	ck_assert_int_eq(nv->destroys, 0);
	ck_assert_str_eq(hyb_sched_reason(&b.sched), "");
	/* device 1 has no stream left: its decoder goes at the next decode */
	hyb_stream_fini(&b);
	ck_assert_uint_eq(hyb_stream_run(&a, &im, 1, 3, &out), 1);
	ck_assert_int_eq(nv->destroys, 1);
	ck_assert_int_eq(nv->creates, 2);
	/* a new stream there makes one again */
	hyb_stream_init(&b, 1);
	ck_assert_uint_eq(hyb_stream_run(&b, &im, 1, 3, &out), 1);
	same_as_cpu(im.data, im.len, &im.box, 3, &out.view);
	ck_assert_int_eq(nv->creates, 3);
	ck_assert_int_eq(nv->destroys, 1);
	/* a device past those feedd tracks: the stream goes to the CPU, saying why */
	struct hyb_stream far;
	hyb_stream_init(&far, CUDRV_MAX_DEVICES);
	ck_assert_uint_eq(hyb_stream_run(&far, &im, 1, 3, &out), 0);
	ck_assert_msg(strstr(hyb_sched_reason(&far.sched), "feedd decodes on the first"), "%s",
		      hyb_sched_reason(&far.sched));
	ck_assert_int_eq(nv->creates, 3);
	hyb_stream_fini(&far);
	hyb_stream_fini(&a);
	hyb_stream_fini(&b);
	free((void *)im.data);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The decode dispatch's seam (core/augment.h: aug_image_box, aug_pre)  */

static struct pipe_plan *plan_for(const char *text, uint32_t w, uint32_t h)
{
	struct fmt_schema s;
	struct feed_err err = {0};
	struct pipe_plan *p = calloc(1, sizeof(*p));
	memset(&s, 0, sizeof(s));
	s.nfields = 1;
	strcpy(s.fields[0].name, "image");
	s.fields[0].dtype = FEED_DTYPE_U8;
	s.fields[0].variable = true;
	s.fields[0].max_bytes = 1u << 24;
	s.fields[0].image = true;
	s.fields[0].max_width = w;
	s.fields[0].max_height = h;
	s.fields[0].max_pixels = (uint64_t)w * h;
	ck_assert_msg(pipe_plan_text(text, &s, p, &err) == 0, "'%s': %s", text, err.msg);
	return p;
}

static void apply(const struct pipe_plan *p, const struct aug_ctx *ctx, const uint8_t *src,
		  size_t len, const struct aug_pre *pre, uint8_t *dst, size_t cap)
{
	struct aug_img ai = {.pre = pre};
	struct feed_err err = {0};
	void *scratch = malloc(pipe_scratch_bytes(p) + 1);
	struct aug_in in = {src, len};
	struct aug_out out = {dst, cap, NULL};
	ck_assert_int_eq(img_decoder_new(&p->dec_lim, 3, &ai.dec3, NULL), 0);
	ck_assert_msg(aug_apply_img(p, ctx, &in, &out, scratch, &ai, &err) == 0, "%s", err.msg);
	img_decoder_free(ai.dec3);
	free(scratch);
}

/* An image decoded ahead over aug_image_box's box at full scale gives the
 * sample what the CPU path gives at full scale (decode(exact=true)): same
 * box, same flip, same pixels; a box that is not the stage's is ignored;
 * the pixels handed are the ones used. */
START_TEST(test_hybrid_predecoded_image_is_the_samples)
{
	static const char *const files[] = {"photo_00.jpg", "photo_02.jpg", "rgb420.jpg"};
	enum { S = 64, B = S * S * 3 };
	for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
		size_t len;
		uint8_t *src = fixture(files[k], &len);
		struct img_info info;
		ck_assert_int_eq(img_probe(src, len, &info, NULL), 0);
		struct pipe_plan *p = plan_for("decode | random_resized_crop(size=64) | hflip",
					       info.width, info.height);
		struct pipe_plan *px = plan_for("decode(exact=true) | random_resized_crop(size=64) | hflip",
						info.width, info.height);
		struct img_decoder *dec;
		ck_assert_int_eq(img_decoder_new(&p->dec_lim, 3, &dec, NULL), 0);
		for (uint64_t smp = 0; smp < 6; smp++) {
			struct aug_ctx ctx = {.seed = 5, .epoch = 1, .sample = smp};
			struct aug_pre pre = {.field = 0};
			struct img_decoded d;
			uint32_t c = 0;
			uint8_t got[B], want[B], cpu[B], zero[B];
			ck_assert_int_eq(aug_image_box(p, 0, &ctx, src, len, &pre.box, &c), 1);
			ck_assert_uint_eq(c, 3);
			ck_assert_int_eq(img_decode(dec, src, len, &pre.box, 1, &d, NULL), 0);
			pre.view = d.view;
			pre.view.px += (size_t)d.box_y * d.view.stride + (size_t)d.box_x * 3;
			pre.view.w = pre.box.w;
			pre.view.h = pre.box.h;
			apply(p, &ctx, src, len, &pre, got, B);
			apply(px, &ctx, src, len, NULL, want, B);
			ck_assert_msg(!memcmp(got, want, B), "%s sample %u", files[k], (unsigned)smp);
			/* not the stage's box: ignored, the sample decodes itself */
			apply(p, &ctx, src, len, NULL, cpu, B);
			pre.box.x++;
			apply(p, &ctx, src, len, &pre, got, B);
			ck_assert(!memcmp(got, cpu, B));
			pre.box.x--;
			/* the pixels handed are the ones used */
			uint8_t *blank = calloc((size_t)pre.box.w * pre.box.h, 3);
			pre.view.px = blank;
			pre.view.stride = (size_t)pre.box.w * 3;
			apply(p, &ctx, src, len, &pre, got, B);
			memset(zero, 0, B);
			ck_assert(!memcmp(got, zero, B));
			free(blank);
		}
		img_decoder_free(dec);
		free(p);
		free(px);
		free(src);
	}
}
END_TEST

static Suite *hybrid_suite(void)
{
	Suite *s = suite_create("hybrid");
	TCase *t = tcase_create("hybrid");
	tcase_add_test(t, test_hybrid_sched_follows_the_backlog);
	tcase_add_test(t, test_hybrid_sched_failed_stays_on_cpu);
	tcase_add_test(t, test_hybrid_nvjpeg_absent_says_why);
	tcase_add_test(t, test_hybrid_nvjpeg_without_entry_point_refused);
	tcase_add_test(t, test_hybrid_nvjpeg_loads_the_double);
	tcase_add_test(t, test_hybrid_nvjpeg_newer_than_the_driver_refused);
	tcase_add_test(t, test_hybrid_no_driver_says_no_gpu);
	tcase_add_test(t, test_hybrid_create_failure_names_the_call);
	tcase_add_test(t, test_hybrid_decode_regions_equal_cpu_decoder);
	tcase_add_test(t, test_hybrid_decode_uses_the_jpeg_engines);
	tcase_add_test(t, test_hybrid_decode_bad_image_left_to_cpu);
	tcase_add_test(t, test_hybrid_decode_device_fault_moves_stream_to_cpu);
	tcase_add_test(t, test_hybrid_worker_keeps_a_decoder_per_device);
	tcase_add_test(t, test_hybrid_predecoded_image_is_the_samples);
	suite_add_tcase(s, t);
	return s;
}

CHECK_MAIN(hybrid_suite)
