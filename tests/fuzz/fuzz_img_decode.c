/*
 * fuzz_img_decode: an encoded image record as a worker decodes it, through
 * img_decode() (the box decode: rows skipped above the box, columns
 * cropped, DCT-scaled JPEG) and img_resample_u8() of the box it returns.
 * The first 4 bytes choose channels, scale and box; the rest is the image.
 * The box is placed inside the size img_probe() reads; when the probe
 * refuses the bytes, the whole image is asked for (the decoder reads the
 * header itself). Invariants: a refusal names what was wrong; a decode has
 * the channels asked for, a scale of 1, 2, 4 or 8 (1 for PNG), a view no
 * larger than the scaled image and the box inside the view; every pixel
 * of the view can be read.
 */
#include <string.h>

#include "fuzz.h"
#include "image.h"

#define FUZZ_SIDE_MAX 1024u  /* the decoders' limits: a dataset of small images */
#define FUZZ_OUT 24u         /* side of the resample's output */

static struct img_decoder *fuzz_dec[2];  /* channels 1 and 3, for every input */
static uint8_t *fuzz_scratch, fuzz_out[FUZZ_OUT * FUZZ_OUT * 3];

static void fuzz_init(void)
{
	struct img_limits lim = {FUZZ_SIDE_MAX, FUZZ_SIDE_MAX, FUZZ_SIDE_MAX * FUZZ_SIDE_MAX};
	struct feed_err err = {0};

	FUZZ_CHECK(img_decoder_new(&lim, 1, &fuzz_dec[0], &err) == 0, "%s", err.msg);
	FUZZ_CHECK(img_decoder_new(&lim, 3, &fuzz_dec[1], &err) == 0, "%s", err.msg);
	fuzz_scratch = malloc(img_resample_scratch_bytes(FUZZ_SIDE_MAX, FUZZ_SIDE_MAX, FUZZ_OUT,
							 FUZZ_OUT, 3));
	FUZZ_CHECK(fuzz_scratch, "scratch");
}

/* A box inside w x h from three control bytes. */
static struct img_box fuzz_box(uint32_t w, uint32_t h, const uint8_t *c)
{
	struct img_box b;

	b.x = (uint32_t)((uint64_t)w * c[0] / 256);
	b.y = (uint32_t)((uint64_t)h * c[1] / 256);
	b.w = 1 + (uint32_t)((uint64_t)(w - b.x - 1) * c[2] / 255);
	b.h = 1 + (uint32_t)((uint64_t)(h - b.y - 1) * (255 - c[2]) / 255);
	return b;
}

static void fuzz_check(const struct img_decoded *d, const struct img_info *info, bool probed,
		       uint32_t channels)
{
	const struct img_view *v = &d->view;
	uint32_t s = d->scale_denom;

	FUZZ_CHECK(v->c == channels && v->w >= 1 && v->h >= 1 && v->stride >= (size_t)v->w * v->c,
		   "view %ux%ux%u stride %zu", v->w, v->h, v->c, v->stride);
	FUZZ_CHECK(s == 1 || s == 2 || s == 4 || s == 8, "scale 1/%u", s);
	FUZZ_CHECK(!probed || info->format == IMG_FORMAT_JPEG || s == 1, "PNG at scale 1/%u", s);
	FUZZ_CHECK(!probed || (v->w <= (info->width + s - 1) / s && v->h <= (info->height + s - 1) / s),
		   "view %ux%u of a %ux%u image at 1/%u", v->w, v->h, info->width, info->height, s);
	FUZZ_CHECK(d->box_x >= 0 && d->box_y >= 0 && d->box_w > 0 && d->box_h > 0 &&
		   d->box_x + d->box_w <= v->w + 1e-6 && d->box_y + d->box_h <= v->h + 1e-6,
		   "box %g,%g %gx%g in a %ux%u view", d->box_x, d->box_y, d->box_w, d->box_h, v->w,
		   v->h);
	unsigned sum = 0;
	for (uint32_t y = 0; y < v->h; y++)
		for (size_t i = 0; i < (size_t)v->w * v->c; i++)
			sum += v->px[y * v->stride + i];
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	struct img_info info;
	struct img_decoded d;
	struct img_box box;

	if (!fuzz_dec[0])
		fuzz_init();
	if (size < 4)
		return 0;
	const uint8_t *c = data;
	uint32_t channels = c[0] & 1 ? 1 : 3, scale = 1u << ((c[0] >> 1) & 3);
	data += 4;
	size -= 4;
	bool probed = img_probe(data, size, &info, NULL) == 0;
	if (probed)
		box = fuzz_box(info.width, info.height, c + 1);
	int rc = img_decode(fuzz_dec[channels == 3], data, size, probed && !(c[0] & 8) ? &box : NULL,
			    scale, &d, &err);
	if (rc < 0) {
		FUZZ_CHECK(err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	fuzz_check(&d, &info, probed, channels);
	img_resample_u8(&d.view, d.box_x, d.box_y, d.box_w, d.box_h, fuzz_out, FUZZ_OUT, FUZZ_OUT,
			c[0] & 16, fuzz_scratch);
	return 0;
}
