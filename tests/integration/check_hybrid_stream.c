/*
 * check_hybrid_stream.c: hybrid JPEG decode in a real feedd (issue 33 item
 * 4), on the doubles of the CUDA driver and of nvJPEG (tests/gpu_double:
 * device memory is host memory; nvJPEG decodes with core/image.h at full
 * scale). A stream with device slots over a JPEG dataset, pipeline
 * `decode(exact=true) | random_resized_crop(size=32) | hflip(p=0.5)`
 * (full-scale decodes on both paths, so both give the same bits):
 * - its images go to the GPU while its reader drains the ready batches
 *   (feedd's nvJPEG double decoded some), and every sample of every batch
 *   is what core's aug_apply_img() makes of its record for the stream's
 *   seed, epoch and sample: the same order and draws either way;
 * - with nvJPEG failing every decode (a device fault), the stream moves
 *   to the CPU once, its batches are the same, and its status says why
 *   (StreamStatus.jpeg_decode; "nvJPEG: N/8 of each batch" otherwise).
 * Skipped (passes, saying so) where this build has no kernels: the driver
 * double is then not usable and no stream gets device slots.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../images/fixture_file.h"
#include "augment.h"
#include "dtype.h"
#include "feed/client.h"
#include "feed/gpu.h"
#include "feed/stream.h"
#include "feedd_harness.h"
#include "fmt.h"
#include "image.h"
#include "pipeline.h"

#define PIPE "decode(exact=true) | random_resized_crop(size=32) | hflip(p=0.5)"
#define OUT_BYTES (32 * 32 * 3)
#define SEED 5
#define EPOCHS 2

static const char *const files[] = {"photo_00.jpg", "photo_01.jpg", "photo_02.jpg",
				    "photo_03.jpg", "photo_04.jpg", "photo_05.jpg",
				    "rgb420.jpg",   "rgb444.jpg",   "gray.jpg",
				    "cmyk.jpg",     "progressive.jpg", "small.jpg"};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* fake_nvjpeg.c's counters (same layout), mapped from feedd's file */
struct fake_nvjpeg_stats {
	int creates, hardware_creates, batched_calls, images_decoded, roi_decodes, bad_images,
	    device_faults;
};

static const char *make_dataset(void)
{
	static char dir[200];
	struct fmt_schema s = {.nfields = 2};
	struct fmt_writer *w;
	struct feed_err err = {0};

	if (dir[0])
		return dir;  /* made once per test (each runs in its own process) */
	snprintf(dir, sizeof(dir), "%s/jpegs", h.dir);
	strcpy(s.fields[0].name, "image");
	s.fields[0].dtype = FEED_DTYPE_U8;
	s.fields[0].variable = true;
	s.fields[0].image = true;
	s.fields[0].max_bytes = 1;
	strcpy(s.fields[1].name, "label");
	s.fields[1].dtype = FEED_DTYPE_I64;
	s.fields[1].max_bytes = 8;
	struct fmt_writer_opts o = {.name = "jpegs", .block_records = 3};
	ck_assert_msg(fmt_writer_new(dir, &s, &o, &w, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < NFILES; i++) {
		size_t len;
		uint8_t *p = fixture_file(files[i], &len);
		int64_t label = (int64_t)i;
		struct fmt_value v[2] = {{p, len}, {&label, 8}};
		struct img_info info;
		ck_assert_msg(fmt_writer_add(w, v, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(img_probe(p, len, &info, NULL), 0);
		ck_assert_int_eq(fmt_writer_note_image(w, 0, info.width, info.height, &err), 0);
		free(p);
	}
	ck_assert_msg(fmt_writer_finish(w, &err) == 0, "%s", err.msg);
	fmt_writer_free(w);
	return dir;
}

#ifndef FEED_TEST_FATBIN
#define FEED_TEST_FATBIN 0   /* no nvcc: no kernels, the tests skip */
#endif

/* feedd on both doubles, its nvJPEG counters in a file; false (skip) when
 * the driver double is not usable in this build. */
static bool start(const struct fake_nvjpeg_stats **ret_stats)
{
	static char arg[300], stats[300];
	const char *cu = getenv("FEED_FAKE_CUDA"), *nv = getenv("FEED_FAKE_NVJPEG");
	struct feed_gpu_info gi;

	ck_assert_msg(cu && nv, "FEED_FAKE_CUDA and FEED_FAKE_NVJPEG must be set (ctest does)");
	setenv("FEED_CUDA_DRIVER", cu, 1);
	setenv("FAKE_CUDA_EVENTS", "auto", 1);
	ck_assert_int_eq(feed_gpu_query(&gi), 0);
	if (!gi.kernels) {
		ck_assert_msg(!FEED_TEST_FATBIN, "the driver double is not usable in a build with "
			      "kernels: %s", gi.reason);
		fprintf(stderr, "skipped: %s\n", gi.reason);
		return false;
	}
	snprintf(arg, sizeof(arg), "jpegs=%s", make_dataset());
	snprintf(stats, sizeof(stats), "%s/feedd.fake_nvjpeg", h.dir);
	setenv("FEED_NVJPEG_LIBRARY", nv, 1);
	setenv("FAKE_NVJPEG_STATS", stats, 1);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	ck_assert_msg(h_log_has("jpeg decode: nvJPEG 13.0.1"), "%s", h_file_text(h.log));
	int fd = open(stats, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	void *m = mmap(NULL, sizeof(**ret_stats), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	ck_assert(m != MAP_FAILED);
	*ret_stats = m;
	return true;
}

/* The stream's jpeg_decode in feed_status() starts with want. */
static void expect_status(struct feed_conn *c, const char *want)
{
	struct feed_status *fs;
	ck_assert_int_eq(feed_status(c, &fs), 0);
	ck_assert_uint_eq(fs->count, 1);
	ck_assert_msg(!strncmp(fs->streams[0].jpeg_decode, want, strlen(want)),
		      "jpeg_decode '%s', want '%s...'", fs->streams[0].jpeg_decode, want);
	feed_status_free(fs);
}

/* Reads every batch of EPOCHS epochs of a device-slot stream and checks
 * each sample's host copy against core's own build of it; then that its
 * status says want_status. */
static void read_and_check(const char *want_status)
{
	struct feed_conn *c = h_conn_new();
	struct feed_stream_opts o = {.dataset = "jpegs", .batch = 4, .credits = 4,
				     .epochs = EPOCHS, .seed = SEED, .pipeline = PIPE};
	o.device = (struct feed_stream_device){.enable = true, .device = 0, .dtype = FEED_TO_F32,
					       .layout = FEED_TO_NCHW, .nmean = 3,
					       .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}};
	struct feed_stream *st = h_stream_open(c, &o);
	const char *why = NULL;
	ck_assert_int_eq(feed_stream_device(st, &why), 1);

	struct fmt_dataset *ds;
	struct pipe_plan *plan = calloc(1, sizeof(*plan));
	struct feed_err err = {0};
	struct aug_img ai = {0};
	ck_assert_int_eq(fmt_dataset_open(make_dataset(), &ds, &err), 0);
	ck_assert_msg(pipe_plan_text(PIPE, fmt_dataset_info(ds)->schema, plan, &err) == 0, "%s",
		      err.msg);
	ck_assert_int_eq(img_decoder_new(&plan->dec_lim, 3, &ai.dec3, NULL), 0);
	void *scratch = malloc(pipe_scratch_bytes(plan) + 64);
	uint8_t *rec[NFILES];
	size_t len[NFILES];
	for (uint64_t i = 0; i < NFILES; i++)
		rec[i] = fixture_file(files[i], &len[i]);

	struct feed_batch *b;
	uint64_t epoch = 0, checked = 0;
	int r;
	while ((r = feed_next(st, H_DEADLINE_MS, &b)) != FEED_END_OF_STREAM) {
		if (r == FEED_END_OF_EPOCH) {
			epoch++;
			continue;
		}
		ck_assert_msg(r == 0, "%s: %s", feed_strerror(r), feed_errmsg(c));
		struct feed_view img;
		ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
		const uint64_t *smp = feed_batch_samples(b);
		for (uint32_t i = 0; i < feed_batch_size(b); i++) {
			uint8_t want[OUT_BYTES];
			int64_t label;
			size_t got = 0;
			struct aug_ctx ctx = {.seed = SEED, .epoch = epoch, .sample = smp[i]};
			struct aug_in in[2] = {{rec[smp[i]], len[smp[i]]}, {&smp[i], 8}};
			struct aug_out out[2] = {{want, OUT_BYTES, &got}, {&label, 8, NULL}};
			ck_assert_msg(aug_apply_img(plan, &ctx, in, out, scratch, &ai, &err) == 0,
				      "%s", err.msg);
			ck_assert_msg(!memcmp((const uint8_t *)img.data + (size_t)i * OUT_BYTES, want,
					      OUT_BYTES),
				      "epoch %llu sample %llu (%s) differs", (unsigned long long)epoch,
				      (unsigned long long)smp[i], files[smp[i]]);
			checked++;
		}
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(checked, EPOCHS * NFILES);
	expect_status(c, want_status);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
	for (uint64_t i = 0; i < NFILES; i++)
		free(rec[i]);
	img_decoder_free(ai.dec3);
	free(scratch);
	free(plan);
	fmt_dataset_close(ds);
}

START_TEST(test_hybrid_stream_same_batches_with_gpu_decode)
{
	const struct fake_nvjpeg_stats *nv;
	if (!start(&nv))
		return;
	read_and_check("nvJPEG: ");
	/* the reader drained the queue at the start: images went to the GPU */
	ck_assert_int_ge(__atomic_load_n(&nv->images_decoded, __ATOMIC_ACQUIRE), 1);
	ck_assert_int_ge(__atomic_load_n(&nv->roi_decodes, __ATOMIC_ACQUIRE), 1);
	ck_assert_int_eq(__atomic_load_n(&nv->device_faults, __ATOMIC_ACQUIRE), 0);
}
END_TEST

START_TEST(test_hybrid_stream_device_fault_goes_on_on_cpu)
{
	const struct fake_nvjpeg_stats *nv;
	setenv("FAKE_NVJPEG_FAIL_AFTER", "0", 1);
	if (!start(&nv))
		return;
	read_and_check("CPU: nvJPEG on GPU 0: nvjpegDecodeBatchedEx failed: "
		       "NVJPEG_STATUS_EXECUTION_FAILED (6)");
	/* each worker's first call failed, then the stream stayed on the CPU */
	int faults = __atomic_load_n(&nv->device_faults, __ATOMIC_ACQUIRE);
	ck_assert_int_ge(faults, 1);
	ck_assert_int_le(faults, 2);
	ck_assert_int_eq(__atomic_load_n(&nv->images_decoded, __ATOMIC_ACQUIRE), 0);
}
END_TEST

static Suite *hybrid_stream_suite(void)
{
	Suite *s = suite_create("hybrid_stream");
	TCase *tc = tcase_create("hybrid_stream");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_hybrid_stream_same_batches_with_gpu_decode);
	tcase_add_test(tc, test_hybrid_stream_device_fault_goes_on_on_cpu);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(hybrid_stream_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
