/*
 * bench_decode.c: single-thread block read + decode rate of the format
 * reader, the figure compared with `zstd -b3 -B65536` in the README.
 *
 *   bench_decode DIR [--rounds N]
 *
 * Reads and decodes every block of the dataset N times (pread from the page
 * cache, xxh64 check, zstd decode, section checks) and prints decoded MB/s
 * (1 MB = 10^6 bytes, as zstd -b prints) and blocks/s. Pin it with taskset
 * for a single-core figure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmt.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	struct fmt_dataset *ds;
	struct fmt_decoder *dec;
	struct feed_err err = {0};
	int rounds = 5;

	if (argc < 2) {
		fprintf(stderr, "usage: bench_decode DIR [--rounds N]\n");
		return 2;
	}
	if (argc == 4 && !strcmp(argv[2], "--rounds"))
		rounds = atoi(argv[3]);
	if (fmt_dataset_open(argv[1], &ds, &err) < 0 || fmt_decoder_new(&dec) < 0) {
		fprintf(stderr, "bench_decode: %s\n", err.msg);
		return 1;
	}
	const struct fmt_info *in = fmt_dataset_info(ds);
	void *comp = malloc(in->max_block_comp);
	void *raw = aligned_alloc(64, (in->max_block_raw + 63) & ~63ull);
	double best = 1e30;
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s();
		for (uint64_t b = 0; b < in->num_blocks; b++) {
			struct fmt_block blk;
			if (fmt_block_read(ds, b, dec, comp, in->max_block_comp, raw, in->max_block_raw,
					   &blk, &err) < 0) {
				fprintf(stderr, "bench_decode: %s\n", err.msg);
				return 1;
			}
		}
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	printf("{\"blocks\": %llu, \"raw_mb\": %.1f, \"best_s\": %.4f, \"decode_mb_per_s\": %.1f, "
	       "\"blocks_per_s\": %.0f, \"samples_per_s\": %.0f}\n",
	       (unsigned long long)in->num_blocks, in->bytes_raw / 1e6, best,
	       in->bytes_raw / 1e6 / best, in->num_blocks / best, in->num_samples / best);
	free(comp);
	free(raw);
	fmt_decoder_free(dec);
	fmt_dataset_close(ds);
	return 0;
}
