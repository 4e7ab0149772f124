/*
 * convert_rate.c: the CPU twin's conversion rate on one core (issue 14,
 * Measure): a batch of u8 images (default 64 x 224x224x3) to bf16 NCHW with
 * ImageNet's mean/std, next to memcpy of the same output bytes, each the
 * best of several timed runs on this thread.
 *
 *   convert_rate [BATCH [REPEATS]]
 *
 * Prints one line per measure (GB/s of output written, and Mpixel/s of
 * input for the conversion) and their ratio. Single-threaded: pin it
 * (taskset -c 0) for a per-core figure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "convert.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
	int reps = argc > 2 ? atoi(argv[2]) : 10;
	const float mean[3] = { 0.485f, 0.456f, 0.406f }, std[3] = { 0.229f, 0.224f, 0.225f };
	struct feed_convert cv;
	if (!n || reps < 1 ||
	    feed_convert_init(&cv, 224, 224, 3, FEED_CONVERT_BF16, FEED_CONVERT_NCHW, mean, std)) {
		fprintf(stderr, "usage: %s [BATCH [REPEATS]]\n", argv[0]);
		return 2;
	}
	size_t in = (size_t)224 * 224 * 3 * n, out = feed_convert_sample_bytes(&cv) * n;
	uint8_t *src = malloc(in);
	void *dst = malloc(out), *copy = malloc(out);
	if (!src || !dst || !copy)
		return 1;
	for (size_t i = 0; i < in; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 24);
	memset(dst, 1, out); /* fault the pages in before timing */
	memset(copy, 2, out);

	double best_cv = 1e30, best_cp = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		feed_convert_images_cpu(&cv, src, n, NULL, dst);
		double t1 = now_s();
		memcpy(copy, dst, out);
		double t2 = now_s();
		if (t1 - t0 < best_cv)
			best_cv = t1 - t0;
		if (t2 - t1 < best_cp)
			best_cp = t2 - t1;
	}
	printf("batch %zu x 224x224x3 u8 -> bf16 NCHW: %zu bytes out, best of %d\n", n, out, reps);
	printf("convert (twin): %8.2f ms  %6.2f GB/s out  %7.1f Mpixel/s\n", best_cv * 1e3,
	       out / best_cv / 1e9, (double)n * 224 * 224 / best_cv / 1e6);
	printf("memcpy:         %8.2f ms  %6.2f GB/s out\n", best_cp * 1e3, out / best_cp / 1e9);
	printf("convert / memcpy time: %.1fx\n", best_cv / best_cp);
	free(src);
	free(dst);
	free(copy);
	return 0;
}
