/*
 * check_json_out.c: the tools' JSON string writer (tools/json_out.h):
 * quotes, backslashes and every control character come out escaped, so
 * json-c parses back the very bytes written; ordinary text comes out as
 * it went in; a string cut to fit a buffer is cut between escapes, never
 * inside one, and stays valid JSON.
 */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "json_out.h"

/* What jout_string() writes for s, in a malloc()ed string. */
static char *written(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	jout_string(f, s);
	fclose(f);
	return buf;
}

/* Parses j (a JSON string) and checks it holds exactly s. */
static void ck_parses_to(const char *j, const char *s)
{
	json_object *o = json_tokener_parse(j);

	ck_assert_msg(o && json_object_is_type(o, json_type_string), "not a JSON string: %s", j);
	ck_assert_str_eq(json_object_get_string(o), s);
	json_object_put(o);
}

START_TEST(test_json_out_escapes_quotes_and_controls)
{
	char s[40] = "a\"b\\c/d";
	size_t n = strlen(s);
	for (int c = 1; c < 0x20; c++)
		s[n++] = (char)c;
	s[n] = '\0';
	char *j = written(s);
	for (const char *p = j; *p; p++)
		ck_assert_msg((unsigned char)*p >= 0x20, "raw control byte 0x%02x in %s", *p, j);
	ck_parses_to(j, s);
	free(j);
}
END_TEST

START_TEST(test_json_out_ordinary_text_unchanged)
{
	char *j = written("resnet50-job_1.2 decode|resize(224)");
	ck_assert_str_eq(j, "\"resnet50-job_1.2 decode|resize(224)\"");
	free(j);
	j = written("");
	ck_assert_str_eq(j, "\"\"");
	free(j);
}
END_TEST

START_TEST(test_json_out_member)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	jout_member(f, "job", "a\tb", ", ");
	fclose(f);
	ck_assert_str_eq(buf, "\"job\": \"a\\tb\", ");
	free(buf);
}
END_TEST

START_TEST(test_json_out_buf_cut_between_escapes)
{
	const char *s = "\x01\x02\x03\"\"\\\\abc";   /* 6, 6, 6, 2, 2, 2, 2, 1... bytes escaped */
	char full[128], out[16];

	jout_string_buf(full, sizeof(full), s);
	ck_parses_to(full, s);
	for (size_t cap = 3; cap < sizeof(out); cap++) {
		jout_string_buf(out, cap, s);
		ck_assert_uint_lt(strlen(out), cap);
		json_object *o = json_tokener_parse(out);
		ck_assert_msg(o != NULL, "cap %zu: not JSON: %s", cap, out);
		const char *got = json_object_get_string(o);
		ck_assert_msg(!strncmp(got, s, strlen(got)), "cap %zu: not a prefix: %s", cap, out);
		json_object_put(o);
	}
}
END_TEST

static Suite *json_out_suite(void)
{
	Suite *s = suite_create("json_out");
	TCase *tc = tcase_create("json_out");
	tcase_add_test(tc, test_json_out_escapes_quotes_and_controls);
	tcase_add_test(tc, test_json_out_ordinary_text_unchanged);
	tcase_add_test(tc, test_json_out_member);
	tcase_add_test(tc, test_json_out_buf_cut_between_escapes);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(json_out_suite)
