/*
 * check_lock.c: the lock rule's debug check (proto/feed_lock.h). A CUDA
 * driver call made through FEED_CU() while the calling thread holds a lock
 * taken with feed_mutex_lock() aborts, naming the call, and so does a
 * second lock; with no lock held it goes through; the count is per thread. Built with FEED_LOCK_CHECKS
 * (the default): without it the check is compiled out, and these tests
 * say so and pass nothing off as checked.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "feed_lock.h"

/* A stand-in for struct cudrv_api: one entry point, counting its calls. */
struct fake_api {
	int (*Synchronize)(int stream);
};

static int calls;

static int fake_synchronize(int stream)
{
	calls++;
	return stream;
}

static const struct fake_api api = {.Synchronize = fake_synchronize};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

START_TEST(test_lock_driver_call_without_lock_goes_through)
{
	calls = 0;
	feed_mutex_lock(&mu);
	feed_mutex_unlock(&mu);
	ck_assert_int_eq(FEED_CU(&api, Synchronize, 7), 7);
	ck_assert_int_eq(calls, 1);
}
END_TEST

#ifdef FEED_LOCK_CHECKS
/* Aborts: the fork Check runs this in dies by SIGABRT (tcase_add_test_raise_signal). */
START_TEST(test_lock_driver_call_under_lock_aborts)
{
	feed_mutex_lock(&mu);
	FEED_CU(&api, Synchronize, 1);
	ck_abort_msg("FEED_CU ran the driver call under a lock");
}
END_TEST

START_TEST(test_lock_count_follows_lock_and_unlock)
{
	pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;

	ck_assert_uint_eq(feed_locks_held, 0);
	feed_mutex_lock(&a);
	ck_assert_uint_eq(feed_locks_held, 1);
	feed_mutex_unlock(&a);
	feed_mutex_lock(&b);
	ck_assert_uint_eq(feed_locks_held, 1);
	feed_mutex_unlock(&b);
	ck_assert_uint_eq(feed_locks_held, 0);
}
END_TEST

/* The nesting order is empty: a second lock aborts (SIGABRT, as above). */
START_TEST(test_lock_second_lock_aborts)
{
	pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;

	feed_mutex_lock(&a);
	feed_mutex_lock(&b);
	ck_abort_msg("a second lock was taken");
}
END_TEST

static void *other_thread_calls(void *arg)
{
	(void)arg;
	/* this thread holds nothing, whatever the main thread holds */
	return (void *)(long)(feed_locks_held == 0 && FEED_CU(&api, Synchronize, 3) == 3);
}

START_TEST(test_lock_count_is_per_thread)
{
	pthread_t t;
	void *ok;

	feed_mutex_lock(&mu);
	ck_assert_int_eq(pthread_create(&t, NULL, other_thread_calls, NULL), 0);
	ck_assert_int_eq(pthread_join(t, &ok), 0);
	feed_mutex_unlock(&mu);
	ck_assert_msg(ok, "a thread holding no lock was refused its driver call");
}
END_TEST

/* The message names the call and the count, for whoever reads the abort. */
START_TEST(test_lock_violation_names_the_call)
{
	int fds[2];

	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		signal(SIGABRT, SIG_DFL);
		feed_mutex_lock(&mu);
		FEED_CU(&api, Synchronize, 1);
		_exit(0);
	}
	close(fds[1]);
	char buf[256] = {0};
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d", status);
	ck_assert_int_gt(n, 0);
	ck_assert_msg(strstr(buf, "cuSynchronize") && strstr(buf, "1 lock"), "message: %s", buf);
}
END_TEST
#endif

static Suite *lock_suite(void)
{
	Suite *s = suite_create("lock");
	TCase *tc = tcase_create("lock");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_lock_driver_call_without_lock_goes_through);
#ifdef FEED_LOCK_CHECKS
	tcase_add_test_raise_signal(tc, test_lock_driver_call_under_lock_aborts, SIGABRT);
	tcase_add_test(tc, test_lock_count_follows_lock_and_unlock);
	tcase_add_test_raise_signal(tc, test_lock_second_lock_aborts, SIGABRT);
	tcase_add_test(tc, test_lock_count_is_per_thread);
	tcase_add_test(tc, test_lock_violation_names_the_call);
#else
	fprintf(stderr, "check_lock: built without FEED_LOCK_CHECKS: only the plain call is tested\n");
#endif
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(lock_suite)
