/*
 * image.h: encoded images (JPEG through libjpeg-turbo, PNG through libspng):
 * the header probe ingest and planning use, the per-worker decoder that
 * decodes only the rows and columns a crop box needs (with libjpeg's DCT
 * scaling when the box is much larger than the output), and the
 * antialiased bilinear resample that turns a decoded box into the output.
 *
 * Owns: everything that touches encoded bytes or resamples decoded pixels.
 * Knows no pipeline, no stream and no randomness: augment.c decides the box
 * and the scale, image.c carries them out.
 *
 * Threads: img_probe() and img_resample_u8() are pure. A struct
 * img_decoder belongs to one thread (a pool worker) for its whole life.
 *
 * Memory: img_decoder_new() allocates every buffer a decode will need,
 * sized from the largest image the decoder will accept (the dataset's
 * largest, recorded at ingest); decoding and resampling allocate nothing
 * of ours. libspng allocates from the decoder's arena (no malloc per
 * PNG); libjpeg's own per-image pools are its business (a baseline JPEG:
 * 6 blocks, ~30 KB; progressive: its coefficients too), freed before
 * img_decode() returns.
 *
 * Errors: 0 or a negative errno-style code with a feed_err naming what was
 * wrong in the decoder's own words:
 *   -EBADMSG  not a readable image: truncated or corrupt past what PIL
 *             reads (libjpeg's warnings are not errors: the damaged
 *             file decodes to PIL's pixels, and img_decoded says so)
 *   -ENOTSUP  a format or variant we do not decode (GIF, 12-bit JPEG, ...)
 *   -E2BIG    dimensions past the decoder's limits (a decompression bomb)
 *   -EINVAL   a bad argument (box outside the image, bad scale)
 */
#ifndef FEED_IMAGE_H
#define FEED_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"

/* The default max_pixels: 64 Mpx. */
#define IMG_MAX_PIXELS_DEFAULT (64ull << 20)
/* Largest width or height accepted by any path (JPEG's own limit). */
#define IMG_DIM_MAX 65500u

enum img_format {
	IMG_FORMAT_UNKNOWN = 0,
	IMG_FORMAT_JPEG = 1,
	IMG_FORMAT_PNG = 2,
};

/* What the header says. */
struct img_info {
	enum img_format format;
	uint32_t width, height;
	uint32_t channels;   /* in the file: 1 gray, 2 gray+alpha, 3 RGB/YCbCr, 4 RGBA/CMYK */
	uint32_t bit_depth;  /* 8 for JPEG; PNG 1, 2, 4, 8 or 16 */
	bool progressive;    /* JPEG: progressive scan; PNG: interlaced */
	bool cmyk;           /* JPEG: CMYK or YCCK (becomes RGB when decoded) */
	bool palette;        /* PNG: indexed colour (becomes RGB when decoded) */
};

/* Reads only the header of the len bytes at data and fills *ret_info
 * (written only on success). Checks that the format is one we decode and
 * that the dimensions are within 1..IMG_DIM_MAX; does not decode pixels
 * (a corrupt body is found by decoding). */
int img_probe(const void *data, size_t len, struct img_info *ret_info, struct feed_err *err);

/* "JPEG", "PNG" or "unknown"; static string. */
const char *img_format_name(enum img_format f);

/* ------------------------------------------------------------------ */
/* Decoding                                                            */

/* What a decoder accepts; images outside are -E2BIG. */
struct img_limits {
	uint32_t max_width, max_height; /* largest of each (the dataset's largest) */
	uint64_t max_pixels;            /* width * height cap; 0 = IMG_MAX_PIXELS_DEFAULT */
};

/* A crop box in the image's full-resolution pixel coordinates. */
struct img_box {
	uint32_t x, y;  /* left, top */
	uint32_t w, h;  /* >= 1; x + w <= width, y + h <= height */
};

/* Decoded pixels: h rows of w pixels of c u8 channels, rows stride bytes
 * apart. Borrowed from the decoder until its next call. */
struct img_view {
	const uint8_t *px;
	uint32_t w, h, c;
	size_t stride;
};

/* A decoded box: the pixels decoded (which may extend past the box: libjpeg
 * crops to whole iMCUs, and one extra pixel on each side keeps chroma
 * upsampling identical to a full decode), and where the requested box lies
 * in them, in the decoded (possibly scaled) pixel grid. With scale 1/s the
 * box [x, x+w) maps to [x/s, (x+w)/s): fractional, which the resample takes
 * as it is. */
struct img_decoded {
	struct img_view view;
	double box_x, box_y, box_w, box_h; /* the box inside view, in view pixels */
	uint32_t scale_denom;              /* the scale used: 1, 2, 4 or 8 */
	uint32_t warnings;                 /* libjpeg's warnings (damage it filled in) */
	const char *warning;               /* the first, its words; NULL if none; borrowed */
};

struct img_decoder;

/* A decoder for images within lim, producing `channels` (1 or 3) u8
 * channels: every buffer it needs is allocated here, once. -ENOMEM, or
 * -EINVAL for bad limits. */
int img_decoder_new(const struct img_limits *lim, uint32_t channels,
		    struct img_decoder **ret_dec, struct feed_err *err);

/* Frees. Accepts NULL. */
void img_decoder_free(struct img_decoder *dec);

/*
 * Decodes the box of the image (full-resolution coordinates, or NULL for
 * the whole image) at scale 1/scale_denom (1, 2, 4 or 8; JPEG only: PNG
 * and any image libjpeg cannot scale use 1, and *ret reports the scale
 * used). Decodes only what the box needs: JPEG rows above the box are
 * skipped (entropy-decoded but not transformed), columns outside it are
 * cropped; PNG decodes rows up to the box's bottom. At scale 1 the box's
 * pixels equal those of libjpeg-turbo's own full decode bit for bit.
 * Grayscale, CMYK/YCCK, palette, 16-bit and alpha images all come out as
 * `channels` u8 channels (16-bit: the high byte; alpha dropped; CMYK as
 * PIL's convert('RGB'); channels=1 from colour with PIL's convert('L')
 * weights, (19595 R + 38470 G + 7471 B + 32768) >> 16).
 * A damaged JPEG that PIL decodes decodes here to the same pixels, its
 * libjpeg warnings counted in *ret; one PIL refuses is refused.
 * The result is borrowed until the next call on dec.
 */
int img_decode(struct img_decoder *dec, const void *data, size_t len, const struct img_box *box,
	       uint32_t scale_denom, struct img_decoded *ret, struct feed_err *err);

/* The largest DCT scale denominator s in {1, 2, 4, 8} for which the box,
 * scaled by 1/s, is still at least twice out_w x out_h on each side (so
 * the resample after a DCT-scaled decode still averages >= 2 decoded
 * pixels per output pixel). With a margin of 1 (box/s >= out) the output
 * was up to 3.7 levels mean |diff| from torchvision's resized_crop on the
 * full-resolution box; with 2 it stays <= 0.94 and >= 44 dB PSNR against
 * a full decode + the same resample (bench/scale_policy.py, 300 photos,
 * outputs 64..224; issue 12 asks <= 1.5 and >= 30 dB). */
uint32_t img_scale_for(uint32_t box_w, uint32_t box_h, uint32_t out_w, uint32_t out_h);

/* ------------------------------------------------------------------ */
/* Resampling                                                          */

/* Scratch img_resample_u8() needs for these sizes, in bytes. For the
 * views of a decoder, src_w and src_h are its limits' max_width and
 * max_height (a view never exceeds the image). */
size_t img_resample_scratch_bytes(uint32_t src_w, uint32_t src_h, uint32_t out_w,
				  uint32_t out_h, uint32_t c);

/*
 * Resamples the box (bx, by, bw, bh) of src (fractional, in src pixels) to
 * out_w x out_h x src->c u8 pixels at dst (rows out_w * c bytes apart),
 * mirrored left-right when flip: torchvision's
 * resized_crop(..., antialias=True) on that box, i.e. separable bilinear
 * (triangle) filtering whose support widens by the scale when
 * downsampling, half-pixel centres, done in fixed point. scratch holds
 * img_resample_scratch_bytes() bytes. Never allocates.
 */
void img_resample_u8(const struct img_view *src, double bx, double by, double bw, double bh,
		     uint8_t *dst, uint32_t out_w, uint32_t out_h, bool flip, void *scratch);

#endif
