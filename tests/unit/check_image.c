/*
 * check_image.c: unit tests of core/image_*.c on the fixtures that
 * tests/images/make_fixtures.py writes into $FEED_IMAGES (a CTest fixture):
 * header probe of every variant, refusals of bad and foreign files with
 * the decoder's words; box decode against libjpeg's own full decode (done
 * here with the plain libjpeg API) bit for bit, at every DCT scale; PNG
 * variants against the 8-bit RGB PNG; limits; no memory growth over a
 * thousand decodes.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <math.h>
#include <string.h>

#include <jpeglib.h>

#include "../images/fixture_file.h"
#include "check_util.h"
#include "image.h"

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Every malloc of the process (libspng's and zlib's included) is counted
 * while `counting`: this executable's malloc interposes on glibc's
 * (exported: the build hides symbols by default, CMake adds -rdynamic). */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static bool counting;
static size_t n_allocs;

__attribute__((visibility("default"))) void *malloc(size_t n)
{
	n_allocs += counting;
	return __libc_malloc(n);
}

__attribute__((visibility("default"))) void *calloc(size_t n, size_t m)
{
	n_allocs += counting;
	return __libc_calloc(n, m);
}

__attribute__((visibility("default"))) void *realloc(void *p, size_t n)
{
	n_allocs += counting;
	return __libc_realloc(p, n);
}

__attribute__((visibility("default"))) void free(void *p)
{
	__libc_free(p);
}
#endif

static const char *const jpegs[] = {"rgb420.jpg", "rgb422.jpg", "rgb444.jpg", "progressive.jpg",
				    "gray.jpg", "small.jpg", "tiny.jpg", "photo_00.jpg",
				    "photo_01.jpg", "photo_02.jpg", "photo_03.jpg"};
#define NJPEGS (sizeof jpegs / sizeof jpegs[0])


static void probe_ok(const char *name, enum img_format fmt, uint32_t w, uint32_t h, uint32_t c,
		     uint32_t depth, bool prog, bool cmyk, bool pal)
{
	size_t len;
	uint8_t *p = fixture_file(name, &len);
	struct img_info info;
	struct feed_err err = {0};

	ck_assert_msg(img_probe(p, len, &info, &err) == 0, "%s: %s", name, err.msg);
	ck_assert_msg(info.format == fmt, "%s: format %d", name, info.format);
	ck_assert_msg(info.width == w && info.height == h, "%s: %ux%u", name, info.width,
		      info.height);
	ck_assert_msg(info.channels == c, "%s: channels %u", name, info.channels);
	ck_assert_msg(info.bit_depth == depth, "%s: depth %u", name, info.bit_depth);
	ck_assert_msg(info.progressive == prog, "%s: progressive %d", name, info.progressive);
	ck_assert_msg(info.cmyk == cmyk, "%s: cmyk %d", name, info.cmyk);
	ck_assert_msg(info.palette == pal, "%s: palette %d", name, info.palette);
	free(p);
}

START_TEST(test_image_probe_variants)
{
	probe_ok("rgb420.jpg", IMG_FORMAT_JPEG, 301, 203, 3, 8, false, false, false);
	probe_ok("rgb444.jpg", IMG_FORMAT_JPEG, 301, 203, 3, 8, false, false, false);
	probe_ok("gray.jpg", IMG_FORMAT_JPEG, 301, 203, 1, 8, false, false, false);
	probe_ok("cmyk.jpg", IMG_FORMAT_JPEG, 301, 203, 4, 8, false, true, false);
	probe_ok("progressive.jpg", IMG_FORMAT_JPEG, 301, 203, 3, 8, true, false, false);
	probe_ok("bomb.jpg", IMG_FORMAT_JPEG, 65000, 65000, 3, 8, false, false, false);
	probe_ok("rgb8.png", IMG_FORMAT_PNG, 301, 203, 3, 8, false, false, false);
	probe_ok("rgb16.png", IMG_FORMAT_PNG, 301, 203, 3, 16, false, false, false);
	probe_ok("gray8.png", IMG_FORMAT_PNG, 301, 203, 1, 8, false, false, false);
	probe_ok("gray16.png", IMG_FORMAT_PNG, 301, 203, 1, 16, false, false, false);
	probe_ok("palette.png", IMG_FORMAT_PNG, 301, 203, 3, 8, false, false, true);
	probe_ok("rgba.png", IMG_FORMAT_PNG, 301, 203, 4, 8, false, false, false);
	probe_ok("gray_alpha.png", IMG_FORMAT_PNG, 301, 203, 2, 8, false, false, false);
	probe_ok("interlaced.png", IMG_FORMAT_PNG, 301, 203, 3, 8, true, false, false);
	probe_ok("bomb.png", IMG_FORMAT_PNG, 60000, 60000, 3, 8, false, false, false);
}
END_TEST

static void probe_bad(const char *name, int code, const char *words)
{
	size_t len;
	uint8_t *p = fixture_file(name, &len);
	struct img_info info = {.width = 12345};
	struct feed_err err = {0};

	int rc = img_probe(p, len, &info, &err);
	ck_assert_msg(rc == code, "%s: %d (%s), expected %d", name, rc, err.msg, code);
	ck_assert_msg(err.code == code, "%s: err.code %d", name, err.code);
	ck_assert_msg(strstr(err.msg, words) != NULL, "%s: '%s' lacks '%s'", name, err.msg, words);
	ck_assert_msg(info.width == 12345, "%s: ret_info written on failure", name);
	free(p);
}

START_TEST(test_image_probe_refusals)
{
	/* libjpeg's and libspng's own words */
	probe_bad("bad_truncated_header.jpg", -EBADMSG, "JPEG: Premature end of JPEG file");
	probe_bad("bad_truncated_header.png", -EBADMSG, "PNG: ");
	probe_bad("huge_dims.png", -E2BIG, "100000x10");
	probe_bad("other.gif", -ENOTSUP, "GIF image");
	probe_bad("other.bmp", -ENOTSUP, "BMP image");
	/* a variant, not damage: libjpeg-turbo's 8-bit build has no 12-bit */
	probe_bad("precision12.jpg", -ENOTSUP, "JPEG: Unsupported JPEG data precision 12");
}
END_TEST

START_TEST(test_image_probe_short_and_foreign)
{
	struct img_info info;
	struct feed_err err = {0};

	ck_assert_int_eq(img_probe("", 0, &info, &err), -EBADMSG);
	ck_assert_int_eq(img_probe("\xff\xd8\xff", 3, &info, &err), -EBADMSG);
	ck_assert_msg(strstr(err.msg, "JPEG: ") != NULL, "%s", err.msg);
	ck_assert_int_eq(img_probe("hello, world", 12, &info, &err), -ENOTSUP);
	ck_assert_msg(strstr(err.msg, "starts 68 65 6c 6c") != NULL, "%s", err.msg);
	ck_assert_str_eq(img_format_name(IMG_FORMAT_JPEG), "JPEG");
	ck_assert_str_eq(img_format_name(IMG_FORMAT_PNG), "PNG");
	ck_assert_str_eq(img_format_name(IMG_FORMAT_UNKNOWN), "unknown");
}
END_TEST


/* ------------------------------------------------------------------ */
/* Decode                                                              */

/* libjpeg-turbo's own full decode at scale 1/s, RGB, with the plain API
 * and its default settings (what djpeg and PIL do). */
static uint8_t *full_decode(const uint8_t *data, size_t len, uint32_t s, uint32_t *ret_w,
			    uint32_t *ret_h)
{
	struct jpeg_decompress_struct ci;
	struct jpeg_error_mgr jerr;

	ci.err = jpeg_std_error(&jerr);
	jpeg_create_decompress(&ci);
	jpeg_mem_src(&ci, data, (unsigned long)len);
	jpeg_read_header(&ci, TRUE);
	ci.out_color_space = JCS_RGB;
	ci.scale_num = 1;
	ci.scale_denom = s;
	jpeg_start_decompress(&ci);
	uint8_t *px = malloc((size_t)ci.output_width * ci.output_height * 3);
	ck_assert_ptr_nonnull(px);
	while (ci.output_scanline < ci.output_height) {
		JSAMPROW r = px + (size_t)ci.output_scanline * ci.output_width * 3;
		jpeg_read_scanlines(&ci, &r, 1);
	}
	*ret_w = ci.output_width;
	*ret_h = ci.output_height;
	jpeg_finish_decompress(&ci);
	jpeg_destroy_decompress(&ci);
	return px;
}

static struct img_decoder *decoder(uint32_t w, uint32_t h, uint32_t c)
{
	struct img_limits lim = {w, h, 0};
	struct img_decoder *dec = NULL;
	struct feed_err err = {0};

	ck_assert_msg(img_decoder_new(&lim, c, &dec, &err) == 0, "%s", err.msg);
	return dec;
}

/* A random box of a w x h image (an xorshift: the same boxes every run). */
static struct img_box rand_box(uint64_t *st, uint32_t w, uint32_t h)
{
	struct img_box b;
	uint64_t x = *st;

	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	*st = x;
	b.w = 1 + (uint32_t)(x % w);
	b.h = 1 + (uint32_t)((x >> 16) % h);
	b.x = (uint32_t)((x >> 32) % (w - b.w + 1));
	b.y = (uint32_t)((x >> 48) % (h - b.h + 1));
	return b;
}

/* The box of every JPEG fixture and photo, at every scale, equals the same
 * pixels of libjpeg's full decode at that scale, bit for bit. */
START_TEST(test_image_decode_box_equals_full_decode)
{
	uint64_t st = 88172645463325252ull;

	for (size_t i = 0; i < NJPEGS; i++) {
		size_t len;
		uint8_t *data = fixture_file(jpegs[i], &len);
		struct img_info info;
		ck_assert_int_eq(img_probe(data, len, &info, NULL), 0);
		struct img_decoder *dec = decoder(info.width, info.height, 3);
		for (uint32_t s = 1; s <= 8; s *= 2) {
			uint32_t fw, fh;
			uint8_t *full = full_decode(data, len, s, &fw, &fh);
			for (int t = 0; t < 40; t++) {
				struct img_box b = rand_box(&st, info.width, info.height);
				struct img_decoded d;
				struct feed_err err = {0};
				ck_assert_msg(img_decode(dec, data, len, t ? &b : NULL, s, &d, &err) == 0,
					      "%s: %s", jpegs[i], err.msg);
				ck_assert_uint_eq(d.scale_denom, s);
				ck_assert_uint_eq(d.view.c, 3);
				/* the scaled box, widened to whole pixels, inside the view */
				uint32_t x0 = b.x / s, y0 = b.y / s;
				uint32_t x1 = (b.x + b.w + s - 1) / s, y1 = (b.y + b.h + s - 1) / s;
				if (!t)
					x0 = y0 = 0, x1 = fw, y1 = fh;
				double ox = d.box_x - (double)(t ? b.x : 0) / s;
				double oy = d.box_y - (double)(t ? b.y : 0) / s;
				ck_assert_msg(ox == floor(ox) && oy == floor(oy), "%s: offset %g,%g",
					      jpegs[i], ox, oy);
				int32_t vx = (int32_t)ox, vy = (int32_t)oy; /* view -> scaled image */
				ck_assert_int_ge(vx + (int32_t)x0, 0);
				ck_assert_int_ge(vy + (int32_t)y0, 0);
				ck_assert_int_le(vx + (int32_t)x1, (int32_t)d.view.w);
				ck_assert_int_le(vy + (int32_t)y1, (int32_t)d.view.h);
				for (uint32_t y = y0; y < y1; y++) {
					const uint8_t *got = d.view.px + (size_t)(y + vy) * d.view.stride +
							     (size_t)(x0 + vx) * 3;
					const uint8_t *want = full + ((size_t)y * fw + x0) * 3;
					ck_assert_msg(memcmp(got, want, (size_t)(x1 - x0) * 3) == 0,
						      "%s 1/%u box %u,%u %ux%u: row %u differs", jpegs[i], s,
						      b.x, b.y, b.w, b.h, y);
				}
			}
			free(full);
		}
		img_decoder_free(dec);
		free(data);
	}
}
END_TEST

static uint8_t *decode_copy(struct img_decoder *dec, const char *name, uint32_t *ret_w,
			    uint32_t *ret_h)
{
	size_t len;
	uint8_t *data = fixture_file(name, &len);
	struct img_decoded d;
	struct feed_err err = {0};

	ck_assert_msg(img_decode(dec, data, len, NULL, 1, &d, &err) == 0, "%s: %s", name, err.msg);
	uint8_t *px = malloc((size_t)d.view.w * d.view.h * d.view.c);
	for (uint32_t y = 0; y < d.view.h; y++)
		memcpy(px + (size_t)y * d.view.w * d.view.c, d.view.px + y * d.view.stride,
		       (size_t)d.view.w * d.view.c);
	*ret_w = d.view.w;
	*ret_h = d.view.h;
	free(data);
	return px;
}

/* 16-bit keeps the high byte (the fixtures' high bytes are the 8-bit
 * images), interlaced equals plain, gray repeats into RGB, and a box of
 * a PNG is the same pixels of its whole decode. */
START_TEST(test_image_decode_png_variants)
{
	struct img_decoder *dec = decoder(301, 203, 3);
	uint32_t w, h, w2, h2;
	uint8_t *rgb = decode_copy(dec, "rgb8.png", &w, &h);
	const char *same[] = {"rgb16.png", "interlaced.png"};

	ck_assert_uint_eq(w, 301);
	ck_assert_uint_eq(h, 203);
	for (size_t i = 0; i < 2; i++) {
		uint8_t *o = decode_copy(dec, same[i], &w2, &h2);
		ck_assert_msg(w2 == w && h2 == h && memcmp(o, rgb, (size_t)w * h * 3) == 0, "%s",
			      same[i]);
		free(o);
	}
	uint8_t *g8 = decode_copy(dec, "gray8.png", &w2, &h2);
	uint8_t *g16 = decode_copy(dec, "gray16.png", &w2, &h2);
	ck_assert(memcmp(g8, g16, (size_t)w * h * 3) == 0);
	for (size_t i = 0; i < (size_t)w * h; i++)
		ck_assert(g8[3 * i] == g8[3 * i + 1] && g8[3 * i] == g8[3 * i + 2]);

	/* boxes */
	size_t len;
	uint8_t *data = fixture_file("interlaced.png", &len);
	uint64_t st = 7;
	for (int t = 0; t < 50; t++) {
		struct img_box b = rand_box(&st, w, h);
		struct img_decoded d;
		ck_assert_int_eq(img_decode(dec, data, len, &b, 4, &d, NULL), 0);
		ck_assert_uint_eq(d.scale_denom, 1); /* PNG: no scaling */
		ck_assert(d.box_x == 0 && d.box_y == 0 && d.box_w == b.w && d.box_h == b.h);
		for (uint32_t y = 0; y < b.h; y++)
			ck_assert(memcmp(d.view.px + y * d.view.stride,
					 rgb + ((size_t)(b.y + y) * w + b.x) * 3, (size_t)b.w * 3) == 0);
	}
	free(data);
	free(g8);
	free(g16);
	free(rgb);
	img_decoder_free(dec);
}
END_TEST

/* channels=1: PIL's convert('L') weights on the RGB decode; gray files
 * come out as they are. */
START_TEST(test_image_decode_gray_output)
{
	const char *names[] = {"rgb420.jpg", "cmyk.jpg", "gray.jpg", "rgb8.png", "palette.png"};
	struct img_decoder *d3 = decoder(301, 203, 3), *d1 = decoder(301, 203, 1);

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		uint32_t w, h;
		uint8_t *rgb = decode_copy(d3, names[i], &w, &h);
		uint8_t *g = decode_copy(d1, names[i], &w, &h);
		for (size_t p = 0; p < (size_t)w * h; p++) {
			const uint8_t *q = rgb + 3 * p;
			uint32_t l = (q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16;
			ck_assert_msg(g[p] == l, "%s pixel %zu: %u, want %u", names[i], p, g[p], l);
		}
		free(rgb);
		free(g);
	}
	img_decoder_free(d3);
	img_decoder_free(d1);
}
END_TEST

static void decode_bad(struct img_decoder *dec, const char *name, int code, const char *words)
{
	size_t len;
	uint8_t *data = fixture_file(name, &len);
	struct img_decoded d = {.scale_denom = 77};
	struct feed_err err = {0};

	int rc = img_decode(dec, data, len, NULL, 1, &d, &err);
	ck_assert_msg(rc == code, "%s: %d (%s), expected %d", name, rc, err.msg, code);
	ck_assert_msg(strstr(err.msg, words) != NULL, "%s: '%s' lacks '%s'", name, err.msg, words);
	ck_assert_msg(d.scale_denom == 77, "%s: *ret written on failure", name);
	free(data);
}

/* libjpeg's warnings are not refusals (PIL decodes through them): the
 * damaged files decode, the warnings counted with the first one's words,
 * and the next clean image reports none; the probe reads junk between
 * markers too. Pixels against PIL: tests/python/test_image_damaged.py. */
START_TEST(test_image_decode_damaged_warns)
{
	static const struct {
		const char *name;
		const char *words; /* the first warning, or NULL for none */
	} cases[] = {
		{"damaged_cut_scan.jpg", "Corrupt JPEG data: premature end of data segment"},
		{"damaged_junk.jpg", "Corrupt JPEG data: 4 extraneous bytes before marker 0xdb"},
		{"damaged_progressive_first_scan.jpg", NULL},
		{"rgb420.jpg", NULL},
	};
	struct img_decoder *dec = decoder(IMG_DIM_MAX, IMG_DIM_MAX, 3);

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len;
		uint8_t *data = fixture_file(cases[i].name, &len);
		struct img_info info;
		struct img_decoded d;
		struct feed_err err = {0};
		ck_assert_msg(img_probe(data, len, &info, &err) == 0, "%s: %s", cases[i].name, err.msg);
		int rc = img_decode(dec, data, len, NULL, 1, &d, &err);
		ck_assert_msg(rc == 0, "%s: %d %s", cases[i].name, rc, err.msg);
		ck_assert_int_eq(d.view.w, 301);
		if (cases[i].words) {
			ck_assert_msg(d.warnings >= 1 && d.warning &&
					      strcmp(d.warning, cases[i].words) == 0,
				      "%s: %u '%s'", cases[i].name, d.warnings,
				      d.warning ? d.warning : "(none)");
		} else {
			ck_assert_msg(d.warnings == 0 && !d.warning, "%s: %u", cases[i].name,
				      d.warnings);
		}
		free(data);
	}
	img_decoder_free(dec);
}
END_TEST

/* Every bad image: its code and the decoder's words; the decoder keeps
 * working after each. */
START_TEST(test_image_decode_refusals)
{
	struct img_decoder *dec = decoder(IMG_DIM_MAX, IMG_DIM_MAX, 3);
	uint32_t w, h;

	decode_bad(dec, "bad_truncated.jpg", -EBADMSG, "JPEG: truncated: no end-of-image marker");
	{	/* a box in the rows that are still there: the cut is found anyway */
		size_t len;
		uint8_t *data = fixture_file("bad_truncated.jpg", &len);
		struct img_box top = {0, 0, 16, 8};
		struct img_decoded d;
		struct feed_err err = {0};
		ck_assert_int_eq(img_decode(dec, data, len, &top, 1, &d, &err), -EBADMSG);
		ck_assert_msg(strstr(err.msg, "no end-of-image marker"), "%s", err.msg);
		free(data);
	}
	decode_bad(dec, "bad_garbage.jpg", -EBADMSG, "JPEG: Bogus marker length");
	decode_bad(dec, "bad_truncated_header.jpg", -EBADMSG, "JPEG: Premature end of JPEG file");
	decode_bad(dec, "bad_truncated.png", -EBADMSG, "PNG: end of stream");
	decode_bad(dec, "bad_crc.png", -EBADMSG, "PNG: invalid chunk checksum");
	decode_bad(dec, "bomb.jpg", -E2BIG, "65000x65000 is past max_pixels 67108864");
	decode_bad(dec, "bomb.png", -E2BIG, "60000x60000 is past max_pixels 67108864");
	decode_bad(dec, "huge_dims.png", -E2BIG, "100000x10");
	decode_bad(dec, "other.gif", -ENOTSUP, "GIF image");
	decode_bad(dec, "other.bmp", -ENOTSUP, "BMP image");
	decode_bad(dec, "precision12.jpg", -ENOTSUP, "JPEG: Unsupported JPEG data precision 12");
	free(decode_copy(dec, "rgb420.jpg", &w, &h));
	free(decode_copy(dec, "rgb8.png", &w, &h));
	img_decoder_free(dec);

	/* the decoder's own limits, and bad arguments */
	dec = decoder(300, 300, 3);
	decode_bad(dec, "rgb420.jpg", -E2BIG, "301x203 is past the decoder's largest image 300x300");
	decode_bad(dec, "rgb8.png", -E2BIG, "301x203 is past the decoder's largest image 300x300");
	img_decoder_free(dec);
	struct img_limits lim = {1000, 1000, 50000};
	struct feed_err err = {0};
	ck_assert_int_eq(img_decoder_new(&lim, 3, &dec, &err), 0);
	decode_bad(dec, "rgb444.jpg", -E2BIG, "301x203 is past max_pixels 50000");
	size_t len;
	uint8_t *data = fixture_file("small.jpg", &len);
	struct img_decoded d;
	struct img_box b = {60, 0, 5, 5};
	ck_assert_int_eq(img_decode(dec, data, len, &b, 1, &d, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "box 60,0 5x5 is not inside the 64x48 image"), "%s", err.msg);
	ck_assert_int_eq(img_decode(dec, data, len, NULL, 3, &d, &err), -EINVAL);
	img_decoder_free(dec);
	free(data);
	ck_assert_int_eq(img_decoder_new(&lim, 2, &dec, &err), -EINVAL);
	lim.max_width = 0;
	ck_assert_int_eq(img_decoder_new(&lim, 3, &dec, &err), -EINVAL);
}
END_TEST

START_TEST(test_image_scale_for)
{
	ck_assert_uint_eq(img_scale_for(224, 224, 224, 224), 1);
	/* box/s must stay >= 2 x out on both sides */
	ck_assert_uint_eq(img_scale_for(448, 448, 224, 224), 1);
	ck_assert_uint_eq(img_scale_for(895, 1000, 224, 224), 1);
	ck_assert_uint_eq(img_scale_for(896, 896, 224, 224), 2);
	ck_assert_uint_eq(img_scale_for(2000, 1791, 224, 224), 2);
	ck_assert_uint_eq(img_scale_for(1792, 1792, 224, 224), 4);
	ck_assert_uint_eq(img_scale_for(3584, 3584, 224, 224), 8);
	ck_assert_uint_eq(img_scale_for(9000, 3583, 224, 224), 4);
	ck_assert_uint_eq(img_scale_for(900, 300, 224, 100), 1); /* 300 < 2 x 2 x 100 */
	ck_assert_uint_eq(img_scale_for(900, 400, 224, 100), 2);
	ck_assert_uint_eq(img_scale_for(10, 10, 224, 224), 1); /* upsampling */
}
END_TEST

/* A thousand decodes of every kind (good, box, bad) leave the heap as it
 * was after the first rounds: nothing grows per image. */
START_TEST(test_image_decode_no_growth)
{
	const char *names[] = {"photo_00.jpg", "cmyk.jpg", "progressive.jpg", "rgba.png",
			       "interlaced.png", "bad_garbage.jpg", "bad_crc.png", "bomb.jpg"};
	enum { N = sizeof names / sizeof names[0] };
	uint8_t *data[N];
	size_t len[N];
	struct img_decoder *dec = decoder(1000, 1000, 3);

	for (size_t i = 0; i < N; i++)
		data[i] = fixture_file(names[i], &len[i]);
	size_t before = 0;
	uint64_t st = 3;
	for (int round = 0; round < 1000 / N + 1; round++) {
		if (round == 4) /* every box and scale seen once */
			before = mallinfo2().uordblks;
		for (size_t i = 0; i < N; i++) {
			struct img_decoded d;
			struct img_box b = rand_box(&st, 64, 48);
			img_decode(dec, data[i], len[i], round % 2 ? &b : NULL, 1 + round % 4 / 2 * 3,
				   &d, NULL);
		}
	}
	size_t after = mallinfo2().uordblks;
	ck_assert_msg(after == before, "heap in use grew from %zu to %zu bytes", before, after);
	for (size_t i = 0; i < N; i++)
		free(data[i]);
	img_decoder_free(dec);
}
END_TEST


/* Random damage (bytes changed, files cut) to every kind of file: each
 * decode ends with 0 or a refusal, never a crash (run under ASan too),
 * and the decoder keeps working. */
START_TEST(test_image_decode_damaged_never_crashes)
{
	const char *names[] = {"rgb420.jpg", "progressive.jpg", "cmyk.jpg", "gray.jpg",
			       "rgb8.png", "interlaced.png", "palette.png", "rgb16.png"};
	struct img_decoder *dec = decoder(1000, 1000, 3);
	uint64_t st = 99;
	int refused = 0;

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		size_t len;
		uint8_t *good = fixture_file(names[i], &len);
		uint8_t *bad = malloc(len);
		for (int t = 0; t < 150; t++) {
			memcpy(bad, good, len);
			size_t n = len;
			st ^= st << 13, st ^= st >> 7, st ^= st << 17;
			if (t % 3 == 0) {
				n = 1 + (size_t)(st % len);
			} else {
				for (int k = 0; k < 1 + t % 8; k++) {
					st ^= st << 13, st ^= st >> 7, st ^= st << 17;
					bad[st % len] = (uint8_t)(st >> 40);
				}
			}
			struct img_decoded d;
			struct img_box b = rand_box(&st, 64, 48);
			struct feed_err err = {0};
			int rc = img_decode(dec, bad, n, t % 2 ? &b : NULL, 1 + t % 4, &d, &err);
			ck_assert_msg(rc == 0 || rc == -EBADMSG || rc == -ENOTSUP || rc == -E2BIG ||
					      rc == -EINVAL,
				      "%s damage %d: %d %s", names[i], t, rc, err.msg);
			ck_assert_msg(rc == 0 || err.msg[0], "%s damage %d: no message", names[i], t);
			refused += rc != 0;
		}
		free(bad);
		free(good);
	}
	ck_assert_int_gt(refused, 100);
	uint32_t w, h;
	free(decode_copy(dec, "rgb420.jpg", &w, &h));
	img_decoder_free(dec);
}
END_TEST

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* PNG decodes allocate nothing: libspng (and zlib under it) get their
 * memory from the decoder's arena. */
START_TEST(test_image_decode_png_no_malloc)
{
	const char *names[] = {"rgb8.png", "rgb16.png", "gray8.png", "gray16.png", "palette.png",
			       "rgba.png", "gray_alpha.png", "interlaced.png", "bad_crc.png",
			       "bad_truncated.png"};
	enum { N = sizeof names / sizeof names[0] };
	uint8_t *data[N];
	size_t len[N];
	struct img_decoder *dec = decoder(301, 203, 3);
	uint64_t st = 11;

	for (size_t i = 0; i < N; i++)
		data[i] = fixture_file(names[i], &len[i]);
	for (int round = 0; round < 20; round++) {
		counting = round > 0;
		for (size_t i = 0; i < N; i++) {
			struct img_decoded d;
			struct img_box b = rand_box(&st, 301, 203);
			img_decode(dec, data[i], len[i], round % 2 ? &b : NULL, 1, &d, NULL);
		}
	}
	counting = false;
	ck_assert_msg(n_allocs == 0, "%zu allocations in %d PNG decodes", n_allocs, 19 * N);
	for (size_t i = 0; i < N; i++)
		free(data[i]);
	img_decoder_free(dec);
}
END_TEST
#endif

/* ------------------------------------------------------------------ */
/* Resample                                                            */

/* Same size, whole box: the identity; flipped: the mirror. */
START_TEST(test_image_resample_identity_and_flip)
{
	enum { W = 37, H = 11, C = 3 };
	static uint8_t src[H][W][C], dst[H][W][C];
	uint64_t st = 5;

	for (size_t i = 0; i < sizeof src; i++) {
		st ^= st << 13, st ^= st >> 7, st ^= st << 17;
		((uint8_t *)src)[i] = (uint8_t)st;
	}
	struct img_view v = {&src[0][0][0], W, H, C, W * C};
	void *scratch = malloc(img_resample_scratch_bytes(W, H, W, H, C));
	img_resample_u8(&v, 0, 0, W, H, &dst[0][0][0], W, H, false, scratch);
	ck_assert(memcmp(src, dst, sizeof src) == 0);
	img_resample_u8(&v, 0, 0, W, H, &dst[0][0][0], W, H, true, scratch);
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			ck_assert(memcmp(dst[y][x], src[y][W - 1 - x], C) == 0);
	free(scratch);
}
END_TEST

/* Hand-computed: 4 -> 2 (scale 2: support 2 source pixels each side,
 * weights tri(d / 2)), and a fractional box. */
START_TEST(test_image_resample_hand)
{
	const uint8_t src[4] = {0, 100, 200, 255};
	struct img_view v = {src, 4, 1, 1, 4};
	uint8_t out[2];
	void *scratch = malloc(img_resample_scratch_bytes(4, 1, 2, 1, 1));

	/* out 0: centre 1.0, pixels 0..2 at distances .5, .5, 1.5 -> weights
	 * .75 .75 .25: (0 * .75 + 100 * .75 + 200 * .25) / 1.75 = 71.43;
	 * out 1: centre 3.0, pixels 1..3: (100 * .25 + 200 * .75 + 255 * .75) / 1.75 = 209.3 */
	img_resample_u8(&v, 0, 0, 4, 1, out, 2, 1, false, scratch);
	ck_assert_uint_eq(out[0], 71);
	ck_assert_uint_eq(out[1], 209);
	img_resample_u8(&v, 0, 0, 4, 1, out, 2, 1, true, scratch);
	ck_assert_uint_eq(out[0], 209);
	ck_assert_uint_eq(out[1], 71);
	/* box [0.5, 3.5) -> 3 pixels: scale 1, centres 1.0 2.0 3.0, each the
	 * mean of its two neighbours */
	uint8_t o3[3];
	img_resample_u8(&v, 0.5, 0, 3, 1, o3, 3, 1, false, scratch);
	ck_assert_uint_eq(o3[0], 50);
	ck_assert_uint_eq(o3[1], 150);
	ck_assert_uint_eq(o3[2], 228); /* 227.5 rounds up */
	free(scratch);
}
END_TEST

static Suite *image_suite(void)
{
	Suite *s = suite_create("image");
	TCase *tc = tcase_create("probe");

	tcase_add_test(tc, test_image_probe_variants);
	tcase_add_test(tc, test_image_probe_refusals);
	tcase_add_test(tc, test_image_probe_short_and_foreign);
	suite_add_tcase(s, tc);
	tc = tcase_create("decode");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_image_decode_box_equals_full_decode);
	tcase_add_test(tc, test_image_decode_png_variants);
	tcase_add_test(tc, test_image_decode_gray_output);
	tcase_add_test(tc, test_image_decode_refusals);
	tcase_add_test(tc, test_image_decode_damaged_warns);
	tcase_add_test(tc, test_image_scale_for);
	tcase_add_test(tc, test_image_decode_no_growth);
	tcase_add_test(tc, test_image_decode_damaged_never_crashes);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	tcase_add_test(tc, test_image_decode_png_no_malloc);
#endif
	suite_add_tcase(s, tc);
	tc = tcase_create("resample");
	tcase_add_test(tc, test_image_resample_identity_and_flip);
	tcase_add_test(tc, test_image_resample_hand);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(image_suite)
