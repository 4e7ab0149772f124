/*
 * image_decode.c: the per-worker decoder (img_decoder_*, img_decode,
 * img_scale_for; contract in image.h).
 *
 * Owns: one libjpeg decompressor per decoder, created once and reused for
 * every image (jpeg_abort_decompress between images), and the pixel
 * buffers, sized once from the limits. JPEG: the box's rows are reached
 * with jpeg_skip_scanlines (entropy-decoded, not transformed) and its
 * columns with jpeg_crop_scanline, one pixel more on each side than the
 * box (clamped at the image's edge): libjpeg's smooth chroma upsampling
 * treats a crop edge as an image edge, and that pixel keeps the box's own
 * pixels identical to a full decode. PNG: libspng decodes row by row and
 * stops at the box's bottom (interlaced images are decoded whole).
 *
 * Damage: what PIL decodes, we decode, with the same pixels; what it
 * refuses, we refuse (image_priv.h says how). libjpeg's warnings (corrupt
 * entropy data, junk between markers) let it go on, and its output is
 * what PIL returns; an error anywhere up to the last row, or in the
 * markers after the last scan when every row is read, refuses the file.
 * The box and DCT-scaled paths stop reading at the box's bottom when they
 * can: progressive and multi-scan files are read whole by
 * jpeg_start_decompress on every path, and a single-scan file whose scan
 * data runs into anything but its end-of-image marker (damage, which may
 * be an error in the markers libjpeg parses after it) is read to the
 * bottom, so every path refuses what PIL refuses.
 *
 * Colour: grayscale becomes RGB by repetition; CMYK/YCCK JPEGs become RGB
 * with PIL's formula on Adobe (inverted) CMYK, R = k - k * (255 - c) / 255
 * rounded as PIL's MULDIV255; channels=1 from colour uses PIL's
 * convert('L') weights, L = (19595 R + 38470 G + 7471 B + 32768) >> 16
 * (ITU-R 601-2). PNG 16-bit keeps the high byte, alpha is dropped (not
 * composited), palettes are expanded, no gamma is applied.
 *
 * Threads: a decoder belongs to one thread. Memory: our buffers are all
 * allocated in img_decoder_new(). libspng allocates through the
 * decoder's arena (struct png_arena: its context, zlib's window, its row
 * buffers, ancillary chunks up to PNG_CHUNK_CACHE), emptied after each
 * image: no malloc per PNG (past the arena, blocks fall back to malloc
 * and are freed with the context). libspng's allocator callbacks take no
 * user pointer, so the arena in use is a thread-local set only for the
 * span of decode_png() on that thread. libjpeg's per-image pools are its
 * own (malloc'd at jpeg_start_decompress, freed at jpeg_abort).
 */
#include "image.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>

#include "image_priv.h"

/* Ancillary PNG chunks (text, ICC profile, Exif) kept by libspng, in
 * bytes; past that it discards them (we use none). */
#define PNG_CHUNK_CACHE (64u << 10)

/* A bump allocator for one PNG decode at a time. */
struct png_arena {
	uint8_t *base; /* cap bytes, 16-aligned blocks each after a 16-byte header */
	size_t cap;    /* bytes at base */
	size_t used;   /* bytes handed out since the last reset */
};

/* The arena of the decode_png() running on this thread, else NULL. */
static _Thread_local struct png_arena *png_arena_cur;

#define ARENA_HDR 16 /* a block's header: its size, keeping 16-byte alignment */

static bool arena_owns(const struct png_arena *a, const void *p)
{
	return a && (const uint8_t *)p >= a->base && (const uint8_t *)p < a->base + a->cap;
}

static void *arena_malloc(size_t size)
{
	struct png_arena *a = png_arena_cur;
	size_t need = ARENA_HDR + ((size + 15) & ~(size_t)15);

	if (!a || size > a->cap || need > a->cap - a->used)
		return malloc(size); /* past the arena: libspng frees it with the context */
	uint8_t *p = a->base + a->used;
	memcpy(p, &size, sizeof size);
	a->used += need;
	return p + ARENA_HDR;
}

static size_t arena_size(const void *p)
{
	size_t size;
	memcpy(&size, (const uint8_t *)p - ARENA_HDR, sizeof size);
	return size;
}

static void arena_free(void *p)
{
	struct png_arena *a = png_arena_cur;

	if (!p)
		return;
	if (!arena_owns(a, p)) {
		free(p);
		return;
	}
	/* the last block handed out is given back; others wait for the reset */
	uint8_t *blk = (uint8_t *)p - ARENA_HDR;
	if (blk + ARENA_HDR + ((arena_size(p) + 15) & ~(size_t)15) == a->base + a->used)
		a->used = (size_t)(blk - a->base);
}

static void *arena_realloc(void *p, size_t size)
{
	struct png_arena *a = png_arena_cur;

	if (!p)
		return arena_malloc(size);
	if (!arena_owns(a, p))
		return realloc(p, size);
	size_t old = arena_size(p);
	void *q = arena_malloc(size);
	if (q) {
		memcpy(q, p, old < size ? old : size);
		arena_free(p);
	}
	return q;
}

static void *arena_calloc(size_t count, size_t size)
{
	if (size && count > SIZE_MAX / size)
		return NULL;
	void *p = arena_malloc(count * size);
	if (p)
		memset(p, 0, count * size);
	return p;
}

static struct spng_alloc png_alloc = {arena_malloc, arena_realloc, arena_calloc, arena_free};

struct img_decoder {
	struct img_limits lim;                /* as given, max_pixels filled in */
	uint32_t channels;                    /* 1 or 3 */
	struct jpeg_decompress_struct cinfo;  /* created once, aborted between images */
	struct img_jpeg_err jerr;             /* its error manager */
	uint8_t *px;                          /* decoded pixels: pixel cap x 3 bytes */
	size_t px_cap;                        /* bytes at px */
	uint8_t *row;                         /* one full row of up to 4 channels (CMYK, PNG rows) */
	size_t row_cap;                       /* bytes at row */
	struct png_arena arena;               /* libspng's memory, emptied after each PNG */
};

uint32_t img_scale_for(uint32_t box_w, uint32_t box_h, uint32_t out_w, uint32_t out_h)
{
	uint32_t s = 8;

	/* box/s >= 2 x out: see image.h for why 2 */
	while (s > 1 && ((uint64_t)box_w < (uint64_t)out_w * 2 * s ||
			 (uint64_t)box_h < (uint64_t)out_h * 2 * s))
		s /= 2;
	return s;
}

int img_decoder_new(const struct img_limits *lim, uint32_t channels, struct img_decoder **ret_dec,
		    struct feed_err *err)
{
	struct img_decoder *dec;

	if (!lim || lim->max_width == 0 || lim->max_height == 0 || lim->max_width > IMG_DIM_MAX ||
	    lim->max_height > IMG_DIM_MAX)
		return feed_err_set(err, -EINVAL, "image limits: sides must be 1..%u", IMG_DIM_MAX);
	if (channels != 1 && channels != 3)
		return feed_err_set(err, -EINVAL, "image decoder: channels %" PRIu32 " is not 1 or 3",
				    channels);
	dec = calloc(1, sizeof *dec);
	if (!dec)
		goto nomem;
	dec->lim = *lim;
	if (dec->lim.max_pixels == 0)
		dec->lim.max_pixels = IMG_MAX_PIXELS_DEFAULT;
	uint64_t pixels = (uint64_t)lim->max_width * lim->max_height;
	if (pixels > dec->lim.max_pixels)
		pixels = dec->lim.max_pixels;
	/* 3 bytes a pixel whatever the output (RGB is converted to gray in
	 * place); + a row of slack for libjpeg's iMCU-aligned crop */
	dec->px_cap = (size_t)(pixels + lim->max_width + 16) * 3;
	dec->row_cap = ((size_t)lim->max_width + 16) * 4;
	/* libspng: context and zlib (~48K), three rows of up to 16-bit RGBA
	 * (interlaced: a fourth), kept chunks, and room for its small blocks */
	dec->arena.cap = (256u << 10) + PNG_CHUNK_CACHE + 4 * (8 * (size_t)lim->max_width + 64);
	dec->px = malloc(dec->px_cap);
	dec->row = malloc(dec->row_cap);
	dec->arena.base = malloc(dec->arena.cap);
	if (!dec->px || !dec->row || !dec->arena.base)
		goto nomem;
	dec->channels = channels;
	dec->cinfo.err = img_jpeg_err_init(&dec->jerr);
	if (setjmp(dec->jerr.jmp)) {
		feed_err_set(err, -ENOMEM, "image decoder: libjpeg: %s", dec->jerr.msg);
		free(dec->px);
		free(dec->row);
		free(dec->arena.base);
		free(dec);
		return -ENOMEM;
	}
	jpeg_create_decompress(&dec->cinfo);
	*ret_dec = dec;
	return 0;
nomem:
	if (dec) {
		free(dec->px);
		free(dec->row);
		free(dec->arena.base);
		free(dec);
	}
	return feed_err_set(err, -ENOMEM, "image decoder for %" PRIu32 "x%" PRIu32 ": out of memory",
			    lim->max_width, lim->max_height);
}

void img_decoder_free(struct img_decoder *dec)
{
	if (!dec)
		return;
	jpeg_destroy_decompress(&dec->cinfo);
	free(dec->px);
	free(dec->row);
	free(dec->arena.base);
	free(dec);
}

/* ------------------------------------------------------------------ */
/* Colour                                                              */

/* PIL's MULDIV255: a * b / 255 rounded, as Convert.c computes it. */
static inline uint32_t muldiv255(uint32_t a, uint32_t b)
{
	uint32_t t = a * b + 128;
	return ((t >> 8) + t) >> 8;
}

/* n pixels of CMYK as libjpeg returns them (Adobe: inverted when
 * inverted) to RGB, as PIL's cmyk2rgb after its "CMYK;I" unpacking. */
static void cmyk_to_rgb(uint8_t *dst, const uint8_t *src, uint32_t n, bool inverted)
{
	uint8_t x = inverted ? 255 : 0;

	for (uint32_t i = 0; i < n; i++, src += 4, dst += 3) {
		uint32_t c = src[0] ^ x, m = src[1] ^ x, y = src[2] ^ x, k = src[3] ^ x;
		uint32_t nk = 255 - k;
		/* nk - muldiv255(c, nk) never goes below 0 or above 255 */
		dst[0] = (uint8_t)(nk - muldiv255(c, nk));
		dst[1] = (uint8_t)(nk - muldiv255(m, nk));
		dst[2] = (uint8_t)(nk - muldiv255(y, nk));
	}
}

/* n RGB pixels to gray with PIL's convert('L') weights; dst may be src. */
static void rgb_to_gray(uint8_t *dst, const uint8_t *src, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++, src += 3)
		dst[i] = (uint8_t)((src[0] * 19595u + src[1] * 38470u + src[2] * 7471u + 0x8000u) >> 16);
}

/* ------------------------------------------------------------------ */
/* Checks                                                              */

static int check_limits(const struct img_decoder *dec, const char *fmt, uint32_t w, uint32_t h,
			struct feed_err *err)
{
	if (w == 0 || h == 0)
		return feed_err_set(err, -EBADMSG, "%s: empty image (%" PRIu32 "x%" PRIu32 ")", fmt, w,
				    h);
	if ((uint64_t)w * h > dec->lim.max_pixels)
		return feed_err_set(err, -E2BIG,
				    "%s: %" PRIu32 "x%" PRIu32 " is past max_pixels %" PRIu64, fmt, w,
				    h, dec->lim.max_pixels);
	if (w > dec->lim.max_width || h > dec->lim.max_height)
		return feed_err_set(err, -E2BIG,
				    "%s: %" PRIu32 "x%" PRIu32 " is past the decoder's largest image %" PRIu32
				    "x%" PRIu32,
				    fmt, w, h, dec->lim.max_width, dec->lim.max_height);
	return 0;
}

static int check_box(const struct img_box *b, uint32_t w, uint32_t h, struct feed_err *err)
{
	if (b->w == 0 || b->h == 0 || b->x >= w || b->y >= h || b->w > w - b->x || b->h > h - b->y)
		return feed_err_set(err, -EINVAL,
				    "box %" PRIu32 ",%" PRIu32 " %" PRIu32 "x%" PRIu32
				    " is not inside the %" PRIu32 "x%" PRIu32 " image",
				    b->x, b->y, b->w, b->h, w, h);
	return 0;
}

/* ------------------------------------------------------------------ */
/* JPEG                                                                */

/* Reads rows [y0, y1) of the started decompressor into dec->px, cw pixels
 * a row, as dec->channels channels. */
static void jpeg_rows(struct img_decoder *dec, uint32_t y0, uint32_t y1, uint32_t cw)
{
	struct jpeg_decompress_struct *ci = &dec->cinfo;
	size_t stride = (size_t)cw * dec->channels;
	uint32_t comps = (uint32_t)ci->out_color_components;

	if (y0 > 0)
		jpeg_skip_scanlines(ci, y0);
	if (comps == dec->channels) {
		/* straight into px, as many rows as libjpeg gives at once */
		JSAMPROW rows[16];
		for (uint32_t y = y0; y < y1;) {
			uint32_t n = y1 - y < 16 ? y1 - y : 16;
			for (uint32_t i = 0; i < n; i++)
				rows[i] = dec->px + (size_t)(y - y0 + i) * stride;
			y += jpeg_read_scanlines(ci, rows, n);
		}
		return;
	}
	/* CMYK -> RGB (-> gray), or RGB -> gray: one row at a time via row */
	bool inverted = ci->saw_Adobe_marker;
	for (uint32_t y = y0; y < y1;) {
		JSAMPROW r = comps == 4 ? dec->row : dec->px + (size_t)(y - y0) * cw * 3;
		uint8_t *out = dec->px + (size_t)(y - y0) * stride;
		if (jpeg_read_scanlines(ci, &r, 1) != 1)
			continue;
		if (comps == 4) {
			cmyk_to_rgb(dec->channels == 3 ? out : dec->row, dec->row, cw, inverted);
			if (dec->channels == 1)
				rgb_to_gray(out, dec->row, cw);
		} else {
			rgb_to_gray(out, r, cw);
		}
		y++;
	}
}

/* Where the box [b0, b0 + bn) of a side of n full-resolution pixels lies
 * at scale 1/s on a side of sn pixels: the first and one-past-last scaled
 * pixels to decode, with one more on each side, clamped. */
static void span(uint32_t b0, uint32_t bn, uint32_t s, uint32_t sn, uint32_t *ret_lo,
		 uint32_t *ret_hi)
{
	uint32_t lo = b0 / s, hi = (b0 + bn + s - 1) / s;

	*ret_lo = lo > 0 ? lo - 1 : 0;
	*ret_hi = hi + 1 < sn ? hi + 1 : sn;
}

/* Whether libjpeg will smooth blocks (a progressive file whose scans stop
 * before the AC coefficients are whole: cut, or written so): libjpeg-turbo
 * then estimates the missing coefficients from the neighbouring blocks,
 * and next to a jpeg_crop_scanline() edge it takes the wrong neighbours
 * (a box's pixels differed from PIL's full decode by up to a whole block),
 * so such a file is decoded full width. Conservative: any coefficient of
 * the first ten not yet at full precision counts. */
static bool jpeg_smooths(const struct jpeg_decompress_struct *ci)
{
	if (!ci->progressive_mode || !ci->do_block_smoothing || !ci->coef_bits)
		return false;
	for (int c = 0; c < ci->num_components; c++)
		for (int k = 0; k < 10; k++)
			if (ci->coef_bits[c][k] != 0)
				return true;
	return false;
}

/* A box above the missing rows of a cut file decodes cleanly, so the end
 * is checked before any row: the end-of-image marker (FF D9) must follow
 * the first scan's start. PIL refuses such a file too ("image file is
 * truncated": libjpeg asks for the bytes past the end, for the last MCU
 * or, progressive, for the scans still to come); a cut file that ends with
 * an EOI of its own decodes in both, the missing data filled in (warning
 * "premature end of data segment"). Entropy-coded data cannot hold it (an FF byte
 * there is always followed by 00 or a restart marker), and a thumbnail's
 * EOI sits in APP1, before the scan; so finding it past the scan's start
 * means the scans are whole, and the backward search stops at once for
 * every file that ends where it should. */
static int jpeg_check_end(const struct jpeg_decompress_struct *ci, const void *data, size_t len,
			  struct feed_err *err)
{
	const uint8_t *lo = ci->src->next_input_byte, *p = (const uint8_t *)data + len;

	assert(lo >= (const uint8_t *)data && lo <= p);
	for (; p - lo >= 2; p--)
		if (p[-2] == 0xFF && p[-1] == 0xD9)
			return 0;
	return feed_err_set(err, -EBADMSG,
			    "JPEG: truncated: no end-of-image marker after the image data "
			    "(%zu bytes)", len);
}

/* Whether a single-scan file's scan data ends at its end-of-image marker,
 * as every undamaged file's does: the first marker after the scan's start
 * (FF then neither 00, the stuffing, nor a restart marker; fill FFs
 * skipped, as libjpeg reads them) is EOI. Otherwise libjpeg parses more
 * markers after the last row, and an error there refuses the file in PIL:
 * the box path then reads to the bottom too. One memchr pass over the
 * compressed bytes (an FF about every 256 of them): 2 us on a 76 KB photo
 * whose middle-quarter box decodes in 465 us, only when the box stops
 * short of the bottom. */
static bool jpeg_tail_is_eoi(const uint8_t *scan, const void *data, size_t len)
{
	const uint8_t *p = scan, *end = (const uint8_t *)data + len;

	while ((p = memchr(p, 0xFF, (size_t)(end - p))) != NULL) {
		while (p < end && *p == 0xFF)
			p++;
		if (p == end)
			return false;
		uint8_t c = *p++;
		if (c != 0 && (c < 0xD0 || c > 0xD7))
			return c == 0xD9;
	}
	return false;
}

/* Reads the rest of the scan: skipped, but the last row read, for
 * jpeg_skip_scanlines() to the very end decodes nothing (it marks the
 * input done), and the markers after the data are what we want read. */
static void jpeg_read_to_end(struct img_decoder *dec)
{
	struct jpeg_decompress_struct *ci = &dec->cinfo;
	JSAMPROW row = dec->row;

	if (ci->output_height - ci->output_scanline > 1)
		jpeg_skip_scanlines(ci, ci->output_height - ci->output_scanline - 1);
	while (ci->output_scanline < ci->output_height)
		jpeg_read_scanlines(ci, &row, 1);
}

/* What libjpeg should output for the file's colour space: channels=1 from
 * gray stays gray, CMYK/YCCK come out as CMYK (converted as PIL does), the
 * rest as RGB. */
static J_COLOR_SPACE jpeg_out_space(J_COLOR_SPACE in, uint32_t channels)
{
	switch (in) {
	case JCS_GRAYSCALE:
		return channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
	case JCS_CMYK:
	case JCS_YCCK:
		return JCS_CMYK;
	default:
		return JCS_RGB;
	}
}

/* After the box's rows: reads the rest when the scan data (from scan)
 * is damaged (see jpeg_tail_is_eoi(); a multi-scan file was read whole
 * already), then, when every row was read, the markers after the last
 * scan as PIL reads them: an error there refuses the file, a missing end
 * is no error by now. Else stops. */
static void jpeg_end(struct img_decoder *dec, const uint8_t *scan, const void *data, size_t len)
{
	struct jpeg_decompress_struct *ci = &dec->cinfo;

	if (ci->output_scanline < ci->output_height && !jpeg_has_multiple_scans(ci) &&
	    !jpeg_tail_is_eoi(scan, data, len))
		jpeg_read_to_end(dec);
	if (ci->output_scanline == ci->output_height) {
		dec->jerr.eof_ok = true;
		jpeg_finish_decompress(ci);
	} else {
		jpeg_abort_decompress(ci);
	}
}

/* decode_jpeg()'s work; any libjpeg error or warning longjmps out of it. */
static __attribute__((noinline)) int jpeg_run(struct img_decoder *dec, const void *data,
					      size_t len, const struct img_box *box, uint32_t s,
					      struct img_decoded *ret, struct feed_err *err)
{
	struct jpeg_decompress_struct *ci = &dec->cinfo;
	int rc;

	jpeg_mem_src(ci, data, (unsigned long)len);
	jpeg_read_header(ci, TRUE);
	rc = check_limits(dec, "JPEG", ci->image_width, ci->image_height, err);
	if (rc)
		goto out;
	rc = jpeg_check_end(ci, data, len, err);
	if (rc)
		goto out;
	const uint8_t *scan = ci->src->next_input_byte; /* the first scan's data */
	if (ci->data_precision != 8) {
		rc = feed_err_set(err, -ENOTSUP, "JPEG: %d-bit samples (only 8-bit are decoded)",
				  ci->data_precision);
		goto out;
	}
	struct img_box full = {0, 0, ci->image_width, ci->image_height};
	if (!box)
		box = &full;
	rc = check_box(box, ci->image_width, ci->image_height, err);
	if (rc)
		goto out;

	ci->out_color_space = jpeg_out_space(ci->jpeg_color_space, dec->channels);
	ci->scale_num = 1;
	ci->scale_denom = s;
	jpeg_start_decompress(ci);

	uint32_t x0, x1, y0, y1;
	span(box->x, box->w, s, ci->output_width, &x0, &x1);
	span(box->y, box->h, s, ci->output_height, &y0, &y1);
	JDIMENSION xoff = x0, cw = x1 - x0;
	if (jpeg_smooths(ci)) {
		xoff = 0; /* libjpeg's block smoothing is wrong next to a crop's edge */
		cw = ci->output_width;
	} else if (xoff > 0 || cw < ci->output_width)
		jpeg_crop_scanline(ci, &xoff, &cw); /* widens to whole iMCUs */
	assert(xoff <= x0 && xoff + cw >= x1 && cw <= dec->lim.max_width + 16);
	jpeg_rows(dec, y0, y1, cw);
	jpeg_end(dec, scan, data, len);

	ret->view = (struct img_view){dec->px, cw, y1 - y0, dec->channels,
				      (size_t)cw * dec->channels};
	ret->box_x = (double)box->x / s - xoff;
	ret->box_y = (double)box->y / s - y0;
	ret->box_w = (double)box->w / s;
	ret->box_h = (double)box->h / s;
	ret->scale_denom = s;
	ret->warnings = dec->jerr.warnings;
	ret->warning = dec->jerr.warnings ? dec->jerr.warn : NULL;
	return 0;
out:
	jpeg_abort_decompress(ci);
	return rc;
}

static int decode_jpeg(struct img_decoder *dec, const void *data, size_t len,
		       const struct img_box *box, uint32_t s, struct img_decoded *ret,
		       struct feed_err *err)
{
	img_jpeg_err_reset(&dec->jerr);
	if (setjmp(dec->jerr.jmp)) {
		jpeg_abort_decompress(&dec->cinfo);
		return feed_err_set(err, dec->jerr.code, "JPEG: %s", dec->jerr.msg);
	}
	return jpeg_run(dec, data, len, box, s, ret, err);
}

/* ------------------------------------------------------------------ */
/* PNG                                                                 */

/* Decodes the rows down to box's last into dec->px (box's rows from its
 * top, at ihdr's full width in RGB; the rows above it into dec->row). */
static int png_rows(struct img_decoder *dec, spng_ctx *ctx, const struct spng_ihdr *ihdr,
		    const struct img_box *box, struct feed_err *err)
{
	struct spng_row_info ri;
	size_t row_bytes = (size_t)ihdr->width * 3;
	uint32_t y_end = box->y + box->h;
	bool interlaced = ihdr->interlace_method != 0;
	int rc = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);

	while (rc == 0) {
		rc = spng_get_row_info(ctx, &ri);
		if (rc)
			break;
		if (!interlaced && ri.row_num >= y_end)
			break; /* the rows below the box are not needed */
		uint8_t *dst = ri.row_num >= box->y && ri.row_num < y_end
				       ? dec->px + (size_t)(ri.row_num - box->y) * row_bytes
				       : dec->row;
		rc = spng_decode_row(ctx, dst, row_bytes);
	}
	if (rc == SPNG_EOI)
		rc = 0;
	if (rc)
		rc = feed_err_set(err, -EBADMSG, "PNG: %s", spng_strerror(rc));
	return rc;
}

/* The box's columns of the decoded rows, packed, in the output's channels;
 * *ret describes them. */
static void png_out(struct img_decoder *dec, const struct img_box *box, size_t row_bytes,
		    struct img_decoded *ret)
{
	size_t stride = (size_t)box->w * dec->channels;

	for (uint32_t r = 0; r < box->h; r++) {
		uint8_t *src = dec->px + r * row_bytes + (size_t)box->x * 3;
		uint8_t *dst = dec->px + r * stride;
		if (dec->channels == 1)
			rgb_to_gray(dst, src, box->w);
		else
			memmove(dst, src, (size_t)box->w * 3);
	}
	ret->view = (struct img_view){dec->px, box->w, box->h, dec->channels, stride};
	ret->box_x = 0;
	ret->box_y = 0;
	ret->box_w = box->w;
	ret->box_h = box->h;
	ret->scale_denom = 1;
	ret->warnings = 0;
	ret->warning = NULL;
}

static int png_run(struct img_decoder *dec, spng_ctx *ctx, const void *data, size_t len,
		   const struct img_box *box, struct img_decoded *ret, struct feed_err *err)
{
	struct spng_ihdr ihdr;
	int rc;

	spng_set_image_limits(ctx, 0x7fffffff, 0x7fffffff); /* ours below */
	spng_set_chunk_limits(ctx, 0x7fffffff, PNG_CHUNK_CACHE);
	rc = spng_set_png_buffer(ctx, data, len);
	if (rc == 0)
		rc = spng_get_ihdr(ctx, &ihdr);
	if (rc) {
		rc = feed_err_set(err, -EBADMSG, "PNG: %s", spng_strerror(rc));
		goto out;
	}
	rc = check_limits(dec, "PNG", ihdr.width, ihdr.height, err);
	if (rc)
		goto out;
	struct img_box full = {0, 0, ihdr.width, ihdr.height};
	if (!box)
		box = &full;
	rc = check_box(box, ihdr.width, ihdr.height, err);
	if (rc)
		goto out;

	rc = png_rows(dec, ctx, &ihdr, box, err);
	if (rc)
		goto out;
	png_out(dec, box, (size_t)ihdr.width * 3, ret);
out:
	return rc;
}

static int decode_png(struct img_decoder *dec, const void *data, size_t len,
		      const struct img_box *box, struct img_decoded *ret, struct feed_err *err)
{
	int rc;

	png_arena_cur = &dec->arena;
	dec->arena.used = 0;
	spng_ctx *ctx = spng_ctx_new2(&png_alloc, 0);
	if (ctx) {
		rc = png_run(dec, ctx, data, len, box, ret, err);
		spng_ctx_free(ctx);
	} else {
		rc = feed_err_set(err, -ENOMEM, "PNG: out of memory");
	}
	dec->arena.used = 0;
	png_arena_cur = NULL;
	return rc;
}

int img_decode(struct img_decoder *dec, const void *data, size_t len, const struct img_box *box,
	       uint32_t scale_denom, struct img_decoded *ret, struct feed_err *err)
{
	int fmt;

	if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
		return feed_err_set(err, -EINVAL, "scale 1/%" PRIu32 " is not 1/1, 1/2, 1/4 or 1/8",
				    scale_denom);
	fmt = img_sniff(data, len, err);
	if (fmt < 0)
		return fmt;
	if (fmt == IMG_FORMAT_JPEG)
		return decode_jpeg(dec, data, len, box, scale_denom, ret, err);
	return decode_png(dec, data, len, box, ret, err);
}
