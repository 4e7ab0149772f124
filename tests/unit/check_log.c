/*
 * check_log.c: unit tests of daemon/log.c's two line formats: the plain
 * one (time, pid, level word) for a terminal or a file, and the journal's
 * ("<N>" sd-daemon priority, no time of our own) when JOURNAL_STREAM names
 * the descriptor written to; and that naming test itself.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "log.h"

/* What lines logged at each level through lg look like: logs one line
 * per level into a temporary file and returns its text (static). */
static const char *log_lines(bool journal)
{
	static char text[4096];
	FILE *f = tmpfile();
	struct log lg = {.level = LOG_LEVEL_DEBUG, .fd = fileno(f), .journal = journal};

	ck_assert_ptr_nonnull(f);
	log_error(&lg, "e %d", 1);
	log_warn(&lg, "w %d", 2);
	log_info(&lg, "i %d", 3);
	log_debug(&lg, "d %d", 4);
	rewind(f);
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

START_TEST(test_log_journal_lines_carry_priority)
{
	ck_assert_str_eq(log_lines(true), "<3>e 1\n<4>w 2\n<6>i 3\n<7>d 4\n");
}
END_TEST

/* Elsewhere: "<time> feedd[<pid>]: <level>: <message>", no "<N>". */
START_TEST(test_log_plain_lines_keep_time_and_level)
{
	const char *t = log_lines(false);
	char want[64];

	ck_assert_msg(t[0] >= '0' && t[0] <= '9' && t[4] == '-' && t[10] == 'T', "%s", t);
	snprintf(want, sizeof(want), " feedd[%d]: error: e 1\n", (int)getpid());
	ck_assert_msg(strstr(t, want), "%s", t);
	ck_assert_ptr_nonnull(strstr(t, ": warn: w 2\n"));
	ck_assert_ptr_nonnull(strstr(t, ": info: i 3\n"));
	ck_assert_ptr_nonnull(strstr(t, ": debug: d 4\n"));
	ck_assert_ptr_null(strchr(t, '<'));
}
END_TEST

/* JOURNAL_STREAM is "DEV:INODE" of the stream; only an exact match of the
 * descriptor's own counts. */
START_TEST(test_log_journal_stream_names_the_fd)
{
	FILE *f = tmpfile(), *g = tmpfile();
	struct stat st;
	char v[64];

	ck_assert_int_eq(fstat(fileno(f), &st), 0);
	snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	ck_assert(log_fd_is_journal(fileno(f), v));
	ck_assert(!log_fd_is_journal(fileno(g), v));  /* another file */
	ck_assert(!log_fd_is_journal(fileno(f), NULL));
	ck_assert(!log_fd_is_journal(fileno(f), ""));
	snprintf(v, sizeof(v), "%llu:%llux", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	ck_assert(!log_fd_is_journal(fileno(f), v));
	snprintf(v, sizeof(v), "%llu", (unsigned long long)st.st_ino);
	ck_assert(!log_fd_is_journal(fileno(f), v));
	fclose(f);
	fclose(g);
}
END_TEST

static Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_log_journal_lines_carry_priority);
	tcase_add_test(tc, test_log_plain_lines_keep_time_and_level);
	tcase_add_test(tc, test_log_journal_stream_names_the_fd);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(log_suite)
