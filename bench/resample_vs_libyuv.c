/*
 * resample_vs_libyuv.c: the resample of RandomResizedCrop boxes to 224x224,
 * ours (img_resample_u8) against libyuv's scalers on the same decoded
 * boxes (issue 12 asks to keep the faster one that passes the tests).
 *
 *   resample_vs_libyuv DIR
 *       CPU ms per image of each method over the JPEGs in DIR (2 passes);
 *   resample_vs_libyuv --dump FILE X Y W H
 *       decodes that box at scale 1 and writes each method's 224x224x3
 *       output, one after the other (bench/resample_vs_libyuv.py compares
 *       them with torchvision).
 *
 * libyuv takes integer boxes only: the fractional box of a DCT-scaled
 * decode is rounded for it (ours takes it as it is).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libyuv/convert_argb.h>
#include <libyuv/convert_from_argb.h>
#include <libyuv/scale_argb.h>
#include <libyuv/scale_rgb.h>

#include "image.h"

#define OUT 224
#define NMETHODS 5
#define MAX_SIDE 4000

static const char *const method_names[NMETHODS] = {
	"ours: img_resample_u8 (antialiased bilinear, SSE2)",
	"libyuv RGBScale kFilterBox",
	"libyuv RGBScale kFilterBilinear",
	"libyuv RGB24ToARGB + ARGBScale kFilterBox + ARGBToRGB24",
	"libyuv RGB24ToARGB + ARGBScale kFilterBilinear + ARGBToRGB24",
};

static uint8_t argb_in[MAX_SIDE * MAX_SIDE * 4], argb_out[OUT * OUT * 4];

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double uniform(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

/* torchvision's RandomResizedCrop.get_params (whole image as fallback) */
static struct img_box rrc_box(uint32_t w, uint32_t h)
{
	for (int i = 0; i < 10; i++) {
		double t = (double)w * h * (0.08 + uniform() * 0.92);
		double r = exp(log(0.75) + uniform() * (log(4.0 / 3.0) - log(0.75)));
		uint32_t bw = (uint32_t)lround(sqrt(t * r)), bh = (uint32_t)lround(sqrt(t / r));
		if (bw && bh && bw <= w && bh <= h)
			return (struct img_box){(uint32_t)(uniform() * (w - bw + 1)),
						(uint32_t)(uniform() * (h - bh + 1)), bw, bh};
	}
	return (struct img_box){0, 0, w, h};
}

static void run(int m, const struct img_decoded *d, uint8_t *out, void *scratch)
{
	int bx = (int)lround(d->box_x), by = (int)lround(d->box_y);
	int bw = (int)lround(d->box_w), bh = (int)lround(d->box_h);
	if (bx + bw > (int)d->view.w)
		bw = (int)d->view.w - bx;
	if (by + bh > (int)d->view.h)
		bh = (int)d->view.h - by;
	const uint8_t *p = d->view.px + (size_t)by * d->view.stride + (size_t)bx * 3;
	int st = (int)d->view.stride;
	enum FilterMode f = m == 1 || m == 3 ? kFilterBox : kFilterBilinear;

	switch (m) {
	case 0:
		img_resample_u8(&d->view, d->box_x, d->box_y, d->box_w, d->box_h, out, OUT, OUT,
				false, scratch);
		break;
	case 1:
	case 2:
		RGBScale(p, st, bw, bh, out, OUT * 3, OUT, OUT, f);
		break;
	default:
		RGB24ToARGB(p, st, argb_in, bw * 4, bw, bh);
		ARGBScale(argb_in, bw * 4, bw, bh, argb_out, OUT * 4, OUT, OUT, f);
		ARGBToRGB24(argb_out, OUT * 4, out, OUT * 3, OUT, OUT);
		break;
	}
}

static uint8_t *slurp(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	size_t n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc(n);
	if (p && fread(p, 1, n, f) != n) {
		free(p);
		p = NULL;
	}
	fclose(f);
	*ret_len = n;
	return p;
}

int main(int argc, char **argv)
{
	struct img_limits lim = {MAX_SIDE, MAX_SIDE, 0};
	struct img_decoder *dec;
	static uint8_t out[OUT * OUT * 3];
	struct img_decoded d;

	if (argc != 2 && !(argc == 7 && !strcmp(argv[1], "--dump"))) {
		fprintf(stderr, "usage: resample_vs_libyuv DIR | --dump FILE X Y W H\n");
		return 1;
	}
	if (img_decoder_new(&lim, 3, &dec, NULL))
		return 1;
	void *scratch = malloc(img_resample_scratch_bytes(MAX_SIDE, MAX_SIDE, OUT, OUT, 3));
	if (argc == 7) {
		size_t len;
		uint8_t *data = slurp(argv[2], &len);
		struct img_box b = {(uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]),
				    (uint32_t)atoi(argv[5]), (uint32_t)atoi(argv[6])};
		if (!data || img_decode(dec, data, len, &b, 1, &d, NULL))
			return 1;
		for (int m = 0; m < NMETHODS; m++) {
			run(m, &d, out, scratch);
			fwrite(out, 1, sizeof out, stdout);
		}
		return 0;
	}
	DIR *dir = opendir(argv[1]);
	struct dirent *e;
	double t[NMETHODS] = {0};
	size_t n = 0;
	while (dir && (e = readdir(dir))) {
		char path[4096];
		size_t len;
		struct img_info info;
		if (!strstr(e->d_name, ".jpg"))
			continue;
		snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
		uint8_t *data = slurp(path, &len);
		if (!data || img_probe(data, len, &info, NULL)) {
			free(data);
			continue;
		}
		for (int pass = 0; pass < 2; pass++) {
			struct img_box b = rrc_box(info.width, info.height);
			if (img_decode(dec, data, len, &b, img_scale_for(b.w, b.h, OUT, OUT), &d, NULL))
				break;
			for (int m = 0; m < NMETHODS; m++) {
				double t0 = cpu_s();
				run(m, &d, out, scratch);
				t[m] += cpu_s() - t0;
			}
			n++;
		}
		free(data);
	}
	if (dir)
		closedir(dir);
	for (int m = 0; m < NMETHODS; m++)
		printf("%-62s %.3f ms/img\n", method_names[m], n ? t[m] * 1e3 / n : 0.0);
	free(scratch);
	img_decoder_free(dec);
	return 0;
}
