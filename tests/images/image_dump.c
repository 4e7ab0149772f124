/*
 * image_dump.c: a test tool (built for the tests only, not installed) that
 * runs core/image_*.c on one file for tests/python/test_image_*.py:
 *
 *   image_dump FILE [-b X,Y,W,H] [-s SCALE] [-c CHANNELS] [-o WxH] [-f]
 *   image_dump -V
 *
 * decodes the box (-b, default the whole image) at scale 1/SCALE (-s, "auto"
 * for img_scale_for() of the output size) into CHANNELS (1 or 3), then, with
 * -o, resamples the box to W x H (mirrored with -f). Writes one text line
 * "w h c box_x box_y box_w box_h scale" (the decoded view and the box in
 * it; with -o the output's w h c) and then the pixels, packed rows. A
 * damaged JPEG that decodes adds "warnings N FIRST" on stderr. On
 * failure writes "error CODE MESSAGE" on stderr and exits 2.
 *
 * -V prints the version of the libjpeg-turbo this process loaded, then the
 * library's path ("2.1.5 /usr/lib/.../libjpeg.so.62"): the tests compare
 * damaged files' pixels with PIL's only when PIL's libjpeg-turbo is the
 * same (test_image_damaged.py).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, memmem */
#endif
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "image.h"

static uint8_t *slurp(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)n + 1);
	if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
		free(p);
		p = NULL;
	}
	fclose(f);
	*ret_len = (size_t)n;
	return p;
}

#define STR_(x) #x
#define STR(x) STR_(x)

/* libjpeg's API has no version call: the "libjpeg-turbo version X.Y.Z"
 * text inside the library file that holds jpeg_std_error (dladdr), or the
 * headers' version when the file has none. */
static int print_libjpeg_version(void)
{
	static const char tag[] = "libjpeg-turbo version ";
	Dl_info info;
	size_t len = 0, n = 0;
	uint8_t *lib = NULL, *at = NULL;

	if (dladdr((void *)jpeg_std_error, &info) && info.dli_fname)
		lib = slurp(info.dli_fname, &len);
	if (lib)
		at = memmem(lib, len, tag, sizeof(tag) - 1);
	if (!at) {
		free(lib);
		printf("%s headers\n", STR(LIBJPEG_TURBO_VERSION));
		return 0;
	}
	at += sizeof(tag) - 1;
	while (at + n < lib + len && (isdigit(at[n]) || at[n] == '.'))
		n++;
	printf("%.*s %s\n", (int)n, (const char *)at, info.dli_fname);
	free(lib);
	return 0;
}

int main(int argc, char **argv)
{
	struct img_box box, *boxp = NULL;
	uint32_t scale = 1, channels = 3, ow = 0, oh = 0;
	bool flip = false, autoscale = false;
	int opt;

	if (argc == 2 && strcmp(argv[1], "-V") == 0)
		return print_libjpeg_version();
	while ((opt = getopt(argc, argv, "b:s:c:o:f")) != -1) {
		switch (opt) {
		case 'b':
			if (sscanf(optarg, "%u,%u,%u,%u", &box.x, &box.y, &box.w, &box.h) != 4)
				return 1;
			boxp = &box;
			break;
		case 's':
			autoscale = strcmp(optarg, "auto") == 0;
			scale = (uint32_t)atoi(optarg);
			break;
		case 'c':
			channels = (uint32_t)atoi(optarg);
			break;
		case 'o':
			if (sscanf(optarg, "%ux%u", &ow, &oh) != 2)
				return 1;
			break;
		case 'f':
			flip = true;
			break;
		default:
			return 1;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: image_dump FILE [-b X,Y,W,H] [-s S|auto] [-c C] [-o WxH] [-f]\n");
		return 1;
	}
	size_t len;
	uint8_t *data = slurp(argv[optind], &len);
	if (!data) {
		perror(argv[optind]);
		return 1;
	}
	struct feed_err err = {0};
	struct img_info info;
	struct img_decoder *dec = NULL;
	struct img_decoded d;
	int rc = img_probe(data, len, &info, &err);
	if (rc == 0 || rc == -E2BIG) {
		struct img_limits lim = {IMG_DIM_MAX, IMG_DIM_MAX, 0};
		if (rc == 0)
			lim = (struct img_limits){info.width, info.height, 0};
		rc = img_decoder_new(&lim, channels, &dec, &err);
	}
	if (rc == 0) {
		if (autoscale) {
			uint32_t bw = boxp ? box.w : info.width, bh = boxp ? box.h : info.height;
			scale = info.format == IMG_FORMAT_JPEG ? img_scale_for(bw, bh, ow, oh) : 1;
		}
		rc = img_decode(dec, data, len, boxp, scale, &d, &err);
	}
	if (rc) {
		fprintf(stderr, "error %d %s\n", rc, err.msg);
		img_decoder_free(dec);
		free(data);
		return 2;
	}
	if (d.warnings)
		fprintf(stderr, "warnings %u %s\n", d.warnings, d.warning);
	if (ow) {
		size_t sb = img_resample_scratch_bytes(d.view.w, d.view.h, ow, oh, d.view.c);
		void *scratch = malloc(sb);
		uint8_t *out = malloc((size_t)ow * oh * d.view.c);
		img_resample_u8(&d.view, d.box_x, d.box_y, d.box_w, d.box_h, out, ow, oh, flip, scratch);
		printf("%u %u %u 0 0 %u %u %u\n", ow, oh, d.view.c, ow, oh, d.scale_denom);
		fwrite(out, 1, (size_t)ow * oh * d.view.c, stdout);
		free(out);
		free(scratch);
	} else {
		printf("%u %u %u %.17g %.17g %.17g %.17g %u\n", d.view.w, d.view.h, d.view.c, d.box_x,
		       d.box_y, d.box_w, d.box_h, d.scale_denom);
		for (uint32_t y = 0; y < d.view.h; y++)
			fwrite(d.view.px + y * d.view.stride, 1, (size_t)d.view.w * d.view.c, stdout);
	}
	img_decoder_free(dec);
	free(data);
	return 0;
}
