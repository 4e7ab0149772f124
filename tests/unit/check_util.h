/*
 * check_util.h: the main() every unit test binary of tests/unit shares.
 *
 * A binary's tests are one or more suite functions (Suite *x_suite(void));
 * CHECK_MAIN(x_suite, ...) is its main(). Check runs each test in a child
 * process of its own (CK_FORK: a crash or an assert fails that test
 * alone; CK_FORK=no in the environment runs them in-process, for a
 * debugger), each under the timeout its TCase sets, else under
 * CK_DEFAULT_TIMEOUT (tests/CMakeLists.txt sets it). The binary exits 0
 * when every test passed, 1 otherwise. A binary whose main() does more
 * (check_augment's probe modes) calls check_run() itself.
 */
#ifndef FEED_CHECK_UTIL_H
#define FEED_CHECK_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>

typedef Suite *check_suite_fn(void);

/* Runs every test of the n suites fns() build, in order, printing Check's
 * summary; the runner frees the suites. Returns EXIT_SUCCESS when all
 * passed, else EXIT_FAILURE. */
static inline int check_run_all(check_suite_fn *const *fns, size_t n)
{
	SRunner *sr = srunner_create(fns[0]());

	for (size_t i = 1; i < n; i++)
		srunner_add_suite(sr, fns[i]());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* check_run_all() of one suite function. */
static inline int check_run(check_suite_fn *fn)
{
	return check_run_all(&fn, 1);
}

/* main() of a binary whose tests are those of the suite functions named. */
#define CHECK_MAIN(...)                                                         \
	int main(void)                                                          \
	{                                                                       \
		check_suite_fn *const fns_[] = {__VA_ARGS__};                   \
		return check_run_all(fns_, sizeof(fns_) / sizeof(fns_[0]));     \
	}

#endif
