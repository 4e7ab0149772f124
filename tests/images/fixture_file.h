/*
 * fixture_file.h: reads one file of the image fixtures
 * (tests/images/make_fixtures.py, made by the image_fixtures CTest
 * fixture into $FEED_IMAGES) for the Check tests that decode them.
 */
#ifndef FEED_TEST_FIXTURE_FILE_H
#define FEED_TEST_FIXTURE_FILE_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* $FEED_IMAGES/name, whole, in memory the caller frees; *ret_len its size.
 * Fails the test when the variable is unset or the file unreadable. */
static inline uint8_t *fixture_file(const char *name, size_t *ret_len)
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

#endif
