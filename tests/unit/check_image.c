/*
 * check_image.c: unit tests of core/image_*.c on the fixtures that
 * tests/images/make_fixtures.py writes into $FEED_IMAGES (a CTest fixture):
 * header probe of every variant, refusals of bad and foreign files with
 * the decoder's words.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

/* Reads $FEED_IMAGES/name whole; *ret_len its size. */
static uint8_t *load(const char *name, size_t *ret_len)
{
	const char *dir = getenv("FEED_IMAGES");
	char path[4096];

	ck_assert_msg(dir != NULL, "FEED_IMAGES is not set (run through ctest)");
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s: cannot open", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*ret_len = (size_t)n;
	return p;
}

static void probe_ok(const char *name, enum img_format fmt, uint32_t w, uint32_t h, uint32_t c,
		     uint32_t depth, bool prog, bool cmyk, bool pal)
{
	size_t len;
	uint8_t *p = load(name, &len);
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
	uint8_t *p = load(name, &len);
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

static Suite *image_suite(void)
{
	Suite *s = suite_create("image");
	TCase *tc = tcase_create("probe");

	tcase_add_test(tc, test_image_probe_variants);
	tcase_add_test(tc, test_image_probe_refusals);
	tcase_add_test(tc, test_image_probe_short_and_foreign);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(image_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
