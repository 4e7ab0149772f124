/*
 * image_probe.c: img_probe(), the header check ingest and planning use.
 *
 * Owns: telling formats apart by their magic bytes, and reading a JPEG or
 * PNG header through the decoders' own header readers (libjpeg-turbo's
 * jpeg_read_header, libspng's IHDR), so the verdict at ingest is the one
 * decode will reach. Also the libjpeg error manager (image_priv.h).
 *
 * Threads: pure; any thread. Never reads past the header or decodes
 * pixels; the decoders' per-call state is their business (a few KB).
 */
#include "image.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <jerror.h>
#include <spng.h>

#include "image_priv.h"

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

const char *img_format_name(enum img_format f)
{
	switch (f) {
	case IMG_FORMAT_JPEG:
		return "JPEG";
	case IMG_FORMAT_PNG:
		return "PNG";
	default:
		return "unknown";
	}
}

/* ------------------------------------------------------------------ */
/* libjpeg error manager                                               */

static void jpeg_err_exit(j_common_ptr cinfo)
{
	struct img_jpeg_err *e = (struct img_jpeg_err *)cinfo->err;
	int c = e->pub.msg_code;

	e->pub.format_message(cinfo, e->msg);
	/* variants libjpeg-turbo's 8-bit build does not decode: not corrupt */
	e->code = (c == JERR_BAD_PRECISION || c == JERR_NOT_COMPILED) ? -ENOTSUP : -EBADMSG;
	longjmp(e->jmp, 1);
}

static void jpeg_err_emit(j_common_ptr cinfo, int level)
{
	struct img_jpeg_err *e = (struct img_jpeg_err *)cinfo->err;

	if (level >= 0)
		return; /* trace messages */
	e->pub.num_warnings++;
	if (e->pub.msg_code == JWRN_JPEG_EOF && !e->eof_ok) {
		/* PIL: "image file is truncated"; we say it in libjpeg's words */
		e->pub.format_message(cinfo, e->msg);
		e->code = -EBADMSG;
		longjmp(e->jmp, 1);
	}
	/* damage libjpeg fills in (with grey, or zeros) and goes on: so does PIL */
	if (e->warnings++ == 0)
		e->pub.format_message(cinfo, e->warn);
}

static void jpeg_err_output(j_common_ptr cinfo)
{
	(void)cinfo; /* never print: messages go back through feed_err */
}

struct jpeg_error_mgr *img_jpeg_err_init(struct img_jpeg_err *e)
{
	struct jpeg_error_mgr *pub = jpeg_std_error(&e->pub);

	pub->error_exit = jpeg_err_exit;
	pub->emit_message = jpeg_err_emit;
	pub->output_message = jpeg_err_output;
	img_jpeg_err_reset(e);
	return pub;
}

void img_jpeg_err_reset(struct img_jpeg_err *e)
{
	e->code = 0;
	e->msg[0] = '\0';
	e->eof_ok = false;
	e->warnings = 0;
	e->warn[0] = '\0';
	e->pub.num_warnings = 0;
}

/* ------------------------------------------------------------------ */
/* Formats                                                             */

/* What the magic bytes say, for a refusal. */
static const char *magic_name(const uint8_t *p, size_t n)
{
	static const struct {
		const char *magic;
		size_t off, len;
		const char *name;
	} tab[] = {
		{"GIF8", 0, 4, "GIF"},
		{"BM", 0, 2, "BMP"},
		{"WEBP", 8, 4, "WebP"},
		{"II*\0", 0, 4, "TIFF"},
		{"MM\0*", 0, 4, "TIFF"},
		{"\0\0\0\x0cjP  ", 0, 8, "JPEG 2000"},
		{"\xff\x4f\xff\x51", 0, 4, "JPEG 2000 codestream"},
		{"\xff\x0a", 0, 2, "JPEG XL"},
		{"\0\0\0\x0cJXL ", 0, 8, "JPEG XL"},
		{"ftypavif", 4, 8, "AVIF"},
		{"ftyphei", 4, 7, "HEIF"},
		{"ftypmif1", 4, 8, "HEIF"},
		{"8BPS", 0, 4, "Photoshop"},
		{"qoif", 0, 4, "QOI"},
		{"\0\0\1\0", 0, 4, "ICO"},
		{"P6", 0, 2, "PPM"},
		{"P5", 0, 2, "PGM"},
		{"%PDF", 0, 4, "PDF"},
		{"\x1f\x8b", 0, 2, "gzip"},
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (n >= tab[i].off + tab[i].len &&
		    memcmp(p + tab[i].off, tab[i].magic, tab[i].len) == 0)
			return tab[i].name;
	return NULL;
}

static int check_dims(const char *fmt, uint32_t w, uint32_t h, struct feed_err *err)
{
	if (w == 0 || h == 0)
		return feed_err_set(err, -EBADMSG, "%s: empty image (%" PRIu32 "x%" PRIu32 ")",
				    fmt, w, h);
	if (w > IMG_DIM_MAX || h > IMG_DIM_MAX)
		return feed_err_set(err, -E2BIG,
				    "%s: %" PRIu32 "x%" PRIu32 " is past the largest side %u",
				    fmt, w, h, IMG_DIM_MAX);
	return 0;
}

static int probe_jpeg(const void *data, size_t len, struct img_info *info, struct feed_err *err)
{
	struct jpeg_decompress_struct cinfo;
	struct img_jpeg_err jerr;
	int rc;

	cinfo.err = img_jpeg_err_init(&jerr);
	if (setjmp(jerr.jmp)) {
		rc = feed_err_set(err, jerr.code, "JPEG: %s", jerr.msg);
		jpeg_destroy_decompress(&cinfo);
		return rc;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, data, (unsigned long)len);
	jpeg_read_header(&cinfo, TRUE);

	memset(info, 0, sizeof *info);
	info->format = IMG_FORMAT_JPEG;
	info->width = cinfo.image_width;
	info->height = cinfo.image_height;
	info->channels = (uint32_t)cinfo.num_components;
	info->bit_depth = (uint32_t)cinfo.data_precision;
	info->progressive = cinfo.progressive_mode;
	info->cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
	rc = 0;
	if (cinfo.num_components != 1 && cinfo.num_components != 3 && !info->cmyk)
		rc = feed_err_set(err, -ENOTSUP, "JPEG: %d components in colour space %d",
				  cinfo.num_components, (int)cinfo.jpeg_color_space);
	jpeg_destroy_decompress(&cinfo);
	return rc;
}

static int probe_png(const void *data, size_t len, struct img_info *info, struct feed_err *err)
{
	spng_ctx *ctx = spng_ctx_new(0);
	struct spng_ihdr ihdr;
	int rc;

	if (!ctx)
		return feed_err_set(err, -ENOMEM, "PNG: out of memory");
	/* the sizes are checked here with our own words, not libspng's */
	spng_set_image_limits(ctx, 0x7fffffff, 0x7fffffff);
	rc = spng_set_png_buffer(ctx, data, len);
	if (rc == 0)
		rc = spng_get_ihdr(ctx, &ihdr);
	spng_ctx_free(ctx);
	if (rc)
		return feed_err_set(err, -EBADMSG, "PNG: %s", spng_strerror(rc));

	memset(info, 0, sizeof *info);
	info->format = IMG_FORMAT_PNG;
	info->width = ihdr.width;
	info->height = ihdr.height;
	info->bit_depth = ihdr.bit_depth;
	info->progressive = ihdr.interlace_method != 0;
	switch (ihdr.color_type) {
	case SPNG_COLOR_TYPE_GRAYSCALE:
		info->channels = 1;
		break;
	case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
		info->channels = 2;
		break;
	case SPNG_COLOR_TYPE_INDEXED:
		info->channels = 3;
		info->palette = true;
		break;
	case SPNG_COLOR_TYPE_TRUECOLOR:
		info->channels = 3;
		break;
	default:
		info->channels = 4;
		break;
	}
	return 0;
}

int img_sniff(const void *data, size_t len, struct feed_err *err)
{
	const uint8_t *p = data;
	const char *what;

	if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
		return IMG_FORMAT_JPEG;
	if (len >= sizeof png_sig && memcmp(p, png_sig, sizeof png_sig) == 0)
		return IMG_FORMAT_PNG;
	if ((what = magic_name(p, len)))
		return feed_err_set(err, -ENOTSUP, "%s image: only JPEG and PNG are decoded", what);
	if (len < 8)
		return feed_err_set(err, -EBADMSG, "%zu bytes: too short for an image", len);
	return feed_err_set(err, -ENOTSUP, "not a JPEG or PNG image (starts %02x %02x %02x %02x)",
			    p[0], p[1], p[2], p[3]);
}

int img_probe(const void *data, size_t len, struct img_info *ret_info, struct feed_err *err)
{
	struct img_info info;
	int rc = img_sniff(data, len, err);

	if (rc < 0)
		return rc;
	if (rc == IMG_FORMAT_JPEG)
		rc = probe_jpeg(data, len, &info, err);
	else
		rc = probe_png(data, len, &info, err);
	if (rc)
		return rc;
	rc = check_dims(img_format_name(info.format), info.width, info.height, err);
	if (rc)
		return rc;
	*ret_info = info;
	return 0;
}
