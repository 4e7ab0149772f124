/*
 * bench_image.c: the image work of a training pipeline's
 * RandomResizedCrop(size) + horizontal flip as a single-threaded plain C
 * loop over a folder of JPEGs, with no daemon: core/image_*.c's box decode
 * (DCT-scaled as img_scale_for() says: 1/2 when the box is >= 4x the output) + resample + flip, and for
 * comparison a full decode + the same resample of the same box.
 *
 *   bench_image DIR [--size N] [--epochs E] [--mode box|full|both] [--margin F]
 *
 * --margin F replaces img_scale_for() in box mode by the largest DCT scale
 * 1/s (s in 1, 2, 4, 8) with box/s >= F x the output (F=0: always 1/1), to
 * weigh scale policies (bench/scale_policy.py measures their accuracy).
 * The boxes are torchvision's RandomResizedCrop sampling (scale 0.08..1,
 * ratio 3/4..4/3, 10 tries then the centre) from a fixed xorshift seed, and
 * the same in every mode and epoch. Files are read into memory first.
 * Prints per mode one line: img/s over all epochs by this thread's CPU time
 * (and by the wall clock), and the share of the CPU time spent resampling.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image.h"

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this (single) thread: on a shared machine, the work done
 * rather than the time waited for a core. */
static double now_s(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform(void)
{
	uint64_t x = rng_state;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	rng_state = x;
	return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* torchvision's RandomResizedCrop.get_params */
static struct img_box rrc_box(uint32_t w, uint32_t h)
{
	double area = (double)w * h, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);

	for (int i = 0; i < 10; i++) {
		double target = area * (0.08 + uniform() * 0.92);
		double ratio = exp(lr0 + uniform() * (lr1 - lr0));
		uint32_t bw = (uint32_t)lround(sqrt(target * ratio));
		uint32_t bh = (uint32_t)lround(sqrt(target / ratio));
		if (bw > 0 && bh > 0 && bw <= w && bh <= h) {
			uint32_t x = (uint32_t)(uniform() * (w - bw + 1));
			uint32_t y = (uint32_t)(uniform() * (h - bh + 1));
			return (struct img_box){x, y, bw, bh};
		}
	}
	double r = (double)w / h;
	uint32_t bw = w, bh = h;
	if (r < 3.0 / 4.0)
		bh = (uint32_t)lround(w / (3.0 / 4.0));
	else if (r > 4.0 / 3.0)
		bw = (uint32_t)lround(h * (4.0 / 3.0));
	return (struct img_box){(w - bw) / 2, (h - bh) / 2, bw, bh};
}

struct file {
	uint8_t *data;
	size_t len;
	struct img_info info;
	struct img_box box;
	bool flip;
};

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct file *load_dir(const char *dir, size_t *ret_n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;

	if (!d) {
		perror(dir);
		exit(1);
	}
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || (strcmp(e->d_name + l - 4, ".jpg") && strcmp(e->d_name + l - 5, ".jpeg")))
			continue;
		if (n == cap)
			names = realloc(names, (cap = cap ? cap * 2 : 256) * sizeof *names);
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmp_name);
	struct file *f = calloc(n, sizeof *f);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		FILE *fp = fopen(path, "rb");
		free(names[i]);
		if (!fp)
			continue;
		fseek(fp, 0, SEEK_END);
		f[m].len = (size_t)ftell(fp);
		fseek(fp, 0, SEEK_SET);
		f[m].data = malloc(f[m].len);
		if (fread(f[m].data, 1, f[m].len, fp) == f[m].len &&
		    img_probe(f[m].data, f[m].len, &f[m].info, NULL) == 0)
			m++;
		else
			free(f[m].data);
		fclose(fp);
	}
	free(names);
	*ret_n = m;
	return f;
}

/* bench_image's stand-in for img_scale_for() under --margin F */
static uint32_t scale_with_margin(uint32_t bw, uint32_t bh, uint32_t out, double margin)
{
	uint32_t s = 8;

	if (margin <= 0)
		return 1;
	while (s > 1 && (bw < margin * out * s || bh < margin * out * s))
		s /= 2;
	return s;
}

int main(int argc, char **argv)
{
	double margin = -1; /* < 0: img_scale_for() */
	const char *dir = NULL, *mode = "both";
	uint32_t size = 224, epochs = 3;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
			epochs = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			mode = argv[++i];
		else if (!strcmp(argv[i], "--margin") && i + 1 < argc)
			margin = atof(argv[++i]);
		else if (!dir && argv[i][0] != '-')
			dir = argv[i];
		else {
			fprintf(stderr, "usage: bench_image DIR [--size N] [--epochs E] "
					"[--mode box|full|both] [--margin F]\n");
			return 1;
		}
	}
	if (!dir) {
		fprintf(stderr, "usage: bench_image DIR [--size N] [--epochs E] [--mode box|full|both] [--margin F]\n");
		return 1;
	}
	size_t n;
	struct file *f = load_dir(dir, &n);
	if (!n) {
		fprintf(stderr, "%s: no readable JPEGs\n", dir);
		return 1;
	}
	struct img_limits lim = {1, 1, 0};
	for (size_t i = 0; i < n; i++) {
		lim.max_width = f[i].info.width > lim.max_width ? f[i].info.width : lim.max_width;
		lim.max_height = f[i].info.height > lim.max_height ? f[i].info.height : lim.max_height;
		f[i].box = rrc_box(f[i].info.width, f[i].info.height);
		f[i].flip = uniform() < 0.5;
	}
	struct img_decoder *dec;
	struct feed_err err = {0};
	if (img_decoder_new(&lim, 3, &dec, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	void *scratch = malloc(img_resample_scratch_bytes(lim.max_width, lim.max_height, size, size, 3));
	uint8_t *out = malloc((size_t)size * size * 3);
	uint64_t sum = 0;

	for (int m = 0; m < 2; m++) {
		bool box = m == 0;
		if (strcmp(mode, "both") && strcmp(mode, box ? "box" : "full"))
			continue;
		double t_rs = 0, t0 = now_s(), w0 = clock_s(CLOCK_MONOTONIC);
		for (uint32_t e = 0; e < epochs; e++) {
			for (size_t i = 0; i < n; i++) {
				struct img_decoded d;
				const struct img_box *b = &f[i].box;
				uint32_t s = !box	    ? 1
					     : margin < 0 ? img_scale_for(b->w, b->h, size, size)
							  : scale_with_margin(b->w, b->h, size, margin);
				if (img_decode(dec, f[i].data, f[i].len, box ? b : NULL, s, &d, &err)) {
					fprintf(stderr, "image %zu: %s\n", i, err.msg);
					return 1;
				}
				double t1 = now_s();
				if (box)
					img_resample_u8(&d.view, d.box_x, d.box_y, d.box_w, d.box_h, out,
							size, size, f[i].flip, scratch);
				else
					img_resample_u8(&d.view, b->x, b->y, b->w, b->h, out, size, size,
							f[i].flip, scratch);
				t_rs += now_s() - t1;
				sum += out[(i * 7919) % ((size_t)size * size * 3)];
			}
		}
		double t = now_s() - t0, wall = clock_s(CLOCK_MONOTONIC) - w0;
		printf("%-4s decode: %zu images x %u epochs, %.0f img/s CPU (%.0f wall), "
		       "resample %.1f%% (%.3f ms/img)\n",
		       box ? "box" : "full", n, epochs, n * epochs / t, n * epochs / wall,
		       100 * t_rs / t, 1e3 * t_rs / (n * epochs));
	}
	fprintf(stderr, "checksum %llu\n", (unsigned long long)sum);
	img_decoder_free(dec);
	free(scratch);
	free(out);
	for (size_t i = 0; i < n; i++)
		free(f[i].data);
	free(f);
	return 0;
}
