/*
 * check_nvjpeg_gpu.c DIR [PREFIX]: hybrid JPEG decode's pixels against the CPU
 * path's on a real GPU (daemon/gpu/hybrid.c with the real nvJPEG, loaded at
 * run time as feedd loads it). Every *.jpg under DIR (the pack's held-out
 * set, data/jpeg_files; ctest: the fixtures' photo_*.jpg, PREFIX photo_)
 * is decoded twice,
 * over its whole image and over a RandomResizedCrop-like box (the centre
 * 56% of the area, odd offsets), on the GPU (batches of 32, region of
 * interest) and by core/image.h (libjpeg-turbo's accurate integer IDCT,
 * fancy upsampling) at full scale; then both boxes are resampled to 224 x
 * 224 by the same img_resample_u8, as the pipeline would.
 *
 * IDCTs and chroma upsampling differ, so the pixels do too. Asserted
 * bounds, in u8 levels (| GPU - CPU | per channel):
 *   decoded boxes:  mean <= 1.5 over the set, mean <= 3 per image, max <= 96
 *   resized 224^2:  mean <= 1.0 over the set, max <= 64
 * (a wrong box, a channel order or a chroma plane misplaced gives means of
 * tens of levels). It prints each figure (and the p99.9 of the decoded
 * differences), the backend (the JPEG engines or CUDA) and both paths'
 * decode rates on this one thread: figures for the report, never asserted.
 *
 * Exit: 0 within the bounds, 1 outside them or when the GPU is there but
 * the driver or nvJPEG cannot be used (the reason printed), 77 (SKIP) where
 * nvidia-smi lists no GPU.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudrv.h"
#include "gpu_listed.h"
#include "hybrid.h"
#include "image.h"
#include "nvjpeg_load.h"

#define MAX_FILES 4096
#define BATCH 32
#define OUT 224

struct file {
	uint8_t *data;
	size_t len;
	uint32_t w, h;
};

struct diff {
	uint64_t sum, n;        /* sum of |a - b| over n values */
	uint32_t max;
	uint64_t hist[256];     /* for the p99.9 */
};

static struct file files[MAX_FILES];
static uint32_t nfiles;
static const char *prefix = ""; /* only files whose name starts so */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void add_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct img_info info;
	struct feed_err err = {0};
	if (!f || nfiles == MAX_FILES)
		goto out;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)n);
	if (!p || fread(p, 1, (size_t)n, f) != (size_t)n ||
	    img_probe(p, (size_t)n, &info, &err) < 0 || info.format != IMG_FORMAT_JPEG ||
	    info.channels != 3 || (uint64_t)info.width * info.height > IMG_MAX_PIXELS_DEFAULT) {
		free(p);
		goto out;
	}
	files[nfiles++] = (struct file){p, (size_t)n, info.width, info.height};
out:
	if (f)
		fclose(f);
}

/* Every *.jpg under dir (sorted within each folder: the same order on
 * every run). */
static void walk(const char *dir)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		char path[4096];
		const char *name = ents[i]->d_name;
		size_t len = strlen(name);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (name[0] != '.' && ents[i]->d_type == DT_DIR)
			walk(path);
		else if (len > 4 && !strcasecmp(name + len - 4, ".jpg") &&
			 !strncmp(name, prefix, strlen(prefix)))
			add_file(path);
		free(ents[i]);
	}
	if (n >= 0)
		free(ents);
}

static struct img_box box_of(const struct file *f, int crop)
{
	if (!crop)
		return (struct img_box){0, 0, f->w, f->h};
	uint32_t w = f->w * 3 / 4 | 1, h = f->h * 3 / 4 | 1;
	return (struct img_box){(f->w - w) / 2 | 1, (f->h - h) / 2 | 1, w, h};
}

/* Adds |a - b| of one image (w x h x 3, rows stride apart); its mean. */
static double diff_add(struct diff *d, const uint8_t *a, size_t sa, const uint8_t *b, size_t sb,
		       uint32_t w, uint32_t h)
{
	uint64_t sum = 0;
	for (uint32_t y = 0; y < h; y++)
		for (uint32_t x = 0; x < w * 3; x++) {
			int v = a[y * sa + x] - b[y * sb + x];
			uint32_t e = (uint32_t)(v < 0 ? -v : v);
			sum += e;
			d->hist[e]++;
			if (e > d->max)
				d->max = e;
		}
	d->sum += sum;
	d->n += (uint64_t)w * h * 3;
	return (double)sum / ((double)w * h * 3);
}

static uint32_t p999(const struct diff *d)
{
	uint64_t seen = 0;
	for (uint32_t e = 0; e < 256; e++)
		if ((seen += d->hist[e]) * 1000 >= d->n * 999)
			return e;
	return 255;
}

struct ctx {
	struct hyb_dec *dec;
	struct img_decoder *cpu;
	uint8_t *ra, *rb;           /* the two resized outputs */
	void *scratch;
	struct diff dec_diff, out_diff;
	double worst_mean;          /* decoded, per image */
	double gpu_s, cpu_s;
	uint32_t images;
};

/* One batch: files [i0, i0 + n) over their box (crop or whole). */
static int run_batch(struct ctx *c, uint32_t i0, uint32_t n, int crop)
{
	struct hyb_image im[BATCH];
	struct hyb_result res[BATCH];
	struct feed_err err = {0};
	for (uint32_t k = 0; k < n; k++)
		im[k] = (struct hyb_image){files[i0 + k].data, files[i0 + k].len,
					   box_of(&files[i0 + k], crop)};
	double t0 = now_s();
	if (hyb_decode(c->dec, im, n, 3, res, &err) < 0) {
		fprintf(stderr, "hyb_decode: %s\n", err.msg);
		return -1;
	}
	c->gpu_s += now_s() - t0;
	for (uint32_t k = 0; k < n; k++) {
		struct img_decoded d;
		if (!res[k].ok) {
			fprintf(stderr, "file %u: left to the CPU: %s\n", i0 + k, res[k].why);
			return -1;
		}
		t0 = now_s();
		if (img_decode(c->cpu, im[k].data, im[k].len, &im[k].box, 1, &d, &err) < 0) {
			fprintf(stderr, "file %u: CPU decode: %s\n", i0 + k, err.msg);
			return -1;
		}
		c->cpu_s += now_s() - t0;
		const uint8_t *cpu = d.view.px + (size_t)d.box_y * d.view.stride + (size_t)d.box_x * 3;
		struct img_view cv = {cpu, im[k].box.w, im[k].box.h, 3, d.view.stride};
		double m = diff_add(&c->dec_diff, res[k].view.px, res[k].view.stride, cpu, cv.stride,
				    cv.w, cv.h);
		if (m > c->worst_mean)
			c->worst_mean = m;
		img_resample_u8(&res[k].view, 0, 0, cv.w, cv.h, c->ra, OUT, OUT, false, c->scratch);
		img_resample_u8(&cv, 0, 0, cv.w, cv.h, c->rb, OUT, OUT, false, c->scratch);
		diff_add(&c->out_diff, c->ra, OUT * 3, c->rb, OUT * 3, OUT, OUT);
		c->images++;
	}
	return 0;
}

static int setup(struct ctx *c)
{
	struct feed_err err = {0};
	const char *why = hyb_unusable_reason();
	uint32_t mw = 0, mh = 0;
	if (why) {
		fprintf(stderr, "check_nvjpeg_gpu: a GPU is listed but JPEGs cannot decode there: %s\n",
			why);
		return -1;
	}
	if (hyb_dec_new(njl_get(), cudrv_get(), 0, &c->dec, &err) < 0) {
		fprintf(stderr, "check_nvjpeg_gpu: %s\n", err.msg);
		return -1;
	}
	for (uint32_t i = 0; i < nfiles; i++) {
		mw = files[i].w > mw ? files[i].w : mw;
		mh = files[i].h > mh ? files[i].h : mh;
	}
	struct img_limits lim = {mw, mh, 0};
	c->ra = malloc(OUT * OUT * 3);
	c->rb = malloc(OUT * OUT * 3);
	c->scratch = malloc(img_resample_scratch_bytes(mw, mh, OUT, OUT, 3));
	if (!c->ra || !c->rb || !c->scratch || img_decoder_new(&lim, 3, &c->cpu, &err) < 0) {
		fprintf(stderr, "check_nvjpeg_gpu: out of memory\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ctx c = {0};
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: check_nvjpeg_gpu DIR_OF_JPEGS [NAME_PREFIX]\n");
		return 2;
	}
	if (argc == 3)
		prefix = argv[2];
	if (!gpu_listed()) {
		printf("check_nvjpeg_gpu: no GPU listed: skipped\n");
		return SKIP;
	}
	walk(argv[1]);
	if (nfiles == 0) {
		fprintf(stderr, "check_nvjpeg_gpu: no colour JPEG under %s\n", argv[1]);
		return 1;
	}
	if (setup(&c) < 0)
		return 1;
	for (int crop = 0; crop <= 1; crop++)
		for (uint32_t i = 0; i < nfiles; i += BATCH)
			if (run_batch(&c, i, nfiles - i < BATCH ? nfiles - i : BATCH, crop) < 0)
				return 1;
	double dmean = (double)c.dec_diff.sum / c.dec_diff.n;
	double omean = (double)c.out_diff.sum / c.out_diff.n;
	printf("nvjpeg: %s, backend %s, %u files, %u decodes (whole + crop)\n", njl_get()->path,
	       hyb_dec_hardware(c.dec) ? "hardware (JPEG engines)" : "CUDA", nfiles, c.images);
	printf("nvjpeg: decoded |GPU-CPU|: mean %.3f, worst image mean %.3f, p99.9 %u, max %u "
	       "(bounds: mean <= 1.5, image mean <= 3, max <= 96)\n",
	       dmean, c.worst_mean, p999(&c.dec_diff), c.dec_diff.max);
	printf("nvjpeg: resized %ux%u |GPU-CPU|: mean %.3f, max %u (bounds: mean <= 1.0, max <= 64)\n",
	       OUT, OUT, omean, c.out_diff.max);
	printf("nvjpeg: decode rate on one thread: GPU %.0f images/s (batches of %d, with the copy "
	       "back), CPU %.0f images/s\n",
	       c.images / c.gpu_s, BATCH, c.images / c.cpu_s);
	int ok = dmean <= 1.5 && c.worst_mean <= 3.0 && c.dec_diff.max <= 96 && omean <= 1.0 &&
		 c.out_diff.max <= 64;
	printf("nvjpeg: %s\n", ok ? "within the bounds" : "OUTSIDE THE BOUNDS");
	hyb_dec_free(c.dec);
	img_decoder_free(c.cpu);
	return ok ? 0 : 1;
}
