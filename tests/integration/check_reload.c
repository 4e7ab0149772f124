/*
 * check_reload.c: reloading feedd's config without a restart (SIGHUP and
 * feedctl reload / feed_reload()). A stream goes on, every sample exactly
 * once per epoch, while a dataset is added; a removed dataset is refused
 * by name to new opens while the stream open on it finishes on the old
 * files, which close when it does; a repointed dataset serves the new
 * directory to new opens only; a broken file is refused with every error
 * (log and feedctl, which exits 1) and the old config stays; an access
 * list change takes effect for new opens; feedctl reload is refused to a
 * user who is neither root nor in the config's admin_group (reaching the
 * socket is not enough), and the answer to an admin names only the
 * datasets it may read. The nobody tests need root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

#define NOBODY 65534
#define NOGROUP 65534
#define BIG 600  /* samples of the datasets streams read across a reload */

/* dir/name: a dataset of n samples (image bytes i & 0xff, label i). */
static const char *make_dataset(const char *name, uint64_t n)
{
	static char path[4][160];
	static int next;
	char *p = path[next++ % 4];

	snprintf(p, sizeof(path[0]), "%s/%s", h.dir, name);
	h_make_dataset(p, n);
	return p;
}

static const char *write_config(const char *text)
{
	return h_write_file("feedd.yaml", text);
}

/* Checks b's bytes against the dataset of n samples and counts each
 * sample in seen[]. */
static void check_count(struct feed_batch *b, uint64_t n, unsigned *seen)
{
	struct feed_view img, lab;
	const uint64_t *idx = feed_batch_samples(b);

	ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
	ck_assert_int_eq(feed_batch_field(b, 1, &lab), 0);
	for (uint32_t i = 0; i < feed_batch_size(b); i++) {
		const uint8_t *px = (const uint8_t *)img.data + 16 * i;
		int64_t label;
		ck_assert_uint_lt(idx[i], n);
		for (int k = 0; k < 16; k++)
			ck_assert_uint_eq(px[k], idx[i] & 0xff);
		memcpy(&label, (const uint8_t *)lab.data + 8 * i, 8);
		ck_assert_int_eq(label, (int64_t)idx[i]);
		seen[idx[i]]++;
	}
}

/* Reads st to its end of stream (batches taken so far counted in seen,
 * for epoch `epoch` of `epochs`), asserting each epoch holds every sample
 * of n exactly once. */
static void read_to_end(struct feed_stream *st, uint64_t n, unsigned *seen, uint64_t epoch,
			uint64_t epochs)
{
	struct feed_batch *b;

	for (;;) {
		int r = feed_next(st, H_DEADLINE_MS, &b);
		if (r == FEED_END_OF_STREAM)  /* right after its last epoch's end */
			break;
		if (r == FEED_END_OF_EPOCH) {
			for (uint64_t i = 0; i < n; i++)
				ck_assert_msg(seen[i] == 1, "epoch %llu: sample %llu seen %u times",
					      (unsigned long long)epoch, (unsigned long long)i, seen[i]);
			memset(seen, 0, n * sizeof(*seen));
			epoch++;
			continue;
		}
		ck_assert_msg(r == 0, "feed_next: %s", feed_strerror(r));
		ck_assert_uint_eq(feed_batch_epoch(b), epoch);
		check_count(b, n, seen);
		ck_assert_int_eq(feed_release(b), 0);
	}
	ck_assert_uint_eq(epoch, epochs);
}

/* Takes k batches of epoch 0 of st, counting them in seen. */
static void read_some(struct feed_stream *st, uint64_t n, unsigned *seen, int k)
{
	for (int i = 0; i < k; i++) {
		struct feed_batch *b;
		ck_assert_int_eq(feed_next(st, H_DEADLINE_MS, &b), 0);
		ck_assert_uint_eq(feed_batch_epoch(b), 0);
		check_count(b, n, seen);
		ck_assert_int_eq(feed_release(b), 0);
	}
}

static struct feed_stream *open_on(struct feed_conn *c, const char *dataset, uint64_t epochs)
{
	struct feed_stream_opts o = {.dataset = dataset, .batch = 10, .credits = 2,
				     .epochs = epochs, .order = FEED_ORDER_FULL, .seed = 7};
	return h_stream_open(c, &o);
}

/* Waits for the daemon's log to say a reload ended (the count-th one). */
static void wait_reloads(unsigned count)
{
	int64_t end = h_now_ms() + H_DEADLINE_MS;

	while (h_log_count(": in force: ") + h_log_count(" refused (") < count) {
		ck_assert_msg(h_now_ms() < end, "no reload ended:\n%s", h_file_text(h.log));
		h_nap_ms(5);
	}
}

START_TEST(test_reload_sighup_adds_dataset_stream_goes_on)
{
	unsigned seen[BIG] = {0};
	char text[512];

	make_dataset("big", BIG);
	make_dataset("more", 30);
	h_start((const char *[]){"--config", write_config("datasets:\n"
							 "  - name: big\n"
							 "    path: big\n"), NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on(c, "big", 2);
	read_some(st, BIG, seen, 5);  /* mid-epoch: batches built ahead wait for us */

	snprintf(text, sizeof(text), "datasets:\n  - name: big\n    path: big\n"
		 "  - name: more\n    path: more\n");
	write_config(text);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	wait_reloads(1);
	ck_assert_msg(h_log_line_has(": in force: 2 datasets served", "added: more; removed: none"),
		      "%s", h_file_text(h.log));

	/* the new dataset serves new opens, the old stream goes on untouched */
	unsigned more_seen[30] = {0};
	struct feed_conn *c2 = h_conn_new();
	struct feed_stream *st2 = open_on(c2, "more", 1);
	read_to_end(st2, 30, more_seen, 0, 1);
	ck_assert_int_eq(feed_stream_close(st2), 0);
	feed_disconnect(c2);
	read_to_end(st, BIG, seen, 0, 2);
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

/* Descriptors the daemon holds open under dir. */
static int fds_under(const char *dir)
{
	char path[64], target[512];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)h.pid);
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	for (struct dirent *de; (de = readdir(d));) {
		char link[600];
		snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (!strncmp(target, dir, strlen(dir)) && target[strlen(dir)] == '/')
			n++;
	}
	closedir(d);
	return n;
}

static bool no_fds_under(void *dir)
{
	return fds_under(dir) == 0;
}

START_TEST(test_reload_removed_dataset_stream_finishes_on_old_files)
{
	unsigned seen[BIG] = {0};
	struct feed_reload_result *res = NULL;
	struct feed_dataset_list *list;

	const char *gone = make_dataset("gone", BIG);
	h_start((const char *[]){"--config", write_config("datasets:\n"
							 "  - name: tiny\n    path: fm\n"
							 "  - name: gone\n    path: gone\n"), NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on(c, "gone", 1);
	read_some(st, BIG, seen, 3);

	write_config("datasets:\n  - name: tiny\n    path: fm\n");
	int r = feed_reload(c, &res);
	ck_assert_msg(r == 0, "feed_reload: %d: %s", r, feed_errmsg(c));
	ck_assert(res->applied);
	ck_assert_uint_eq(res->nremoved, 1);
	ck_assert_str_eq(res->removed[0], "gone");
	ck_assert_uint_eq(res->nadded + res->nrepointed + res->nerrors, 0);
	feed_reload_result_free(res);
	ck_assert(h_log_has("reload: streams still open on gone finish on the old files"));

	/* new opens: refused by name; the list no longer has it */
	struct feed_stream *x;
	struct feed_stream_opts o = {.dataset = "gone", .batch = 10};
	ck_assert_int_eq(feed_stream_open(c, &o, &x), -ENOENT);
	ck_assert_str_eq(feed_errmsg(c), "dataset 'gone': no such dataset");
	ck_assert_int_eq(feed_list_datasets(c, &list), 0);
	ck_assert_uint_eq(list->count, 1);
	ck_assert_str_eq(list->datasets[0].name, "tiny");
	feed_dataset_list_free(list);

	/* the open stream finishes its epoch on the old files, which close
	 * once it is gone */
	ck_assert_int_gt(fds_under(gone), 0);
	read_to_end(st, BIG, seen, 0, 1);
	ck_assert_int_eq(feed_stream_close(st), 0);
	ck_assert_msg(h_wait_until(no_fds_under, (void *)gone, H_DEADLINE_MS),
		      "feedd still holds %d files of the removed dataset", fds_under(gone));
	feed_disconnect(c);
	h_assert_healthy();
}
END_TEST

START_TEST(test_reload_repointed_dataset_new_opens_get_new_version)
{
	unsigned seen[BIG] = {0};
	struct feed_reload_result *res = NULL;
	struct feed_dataset_list *list;

	make_dataset("v1", BIG);
	make_dataset("v2", 40);
	h_start((const char *[]){"--config", write_config("datasets:\n  - name: d\n    path: v1\n"),
				 NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = open_on(c, "d", 1);
	read_some(st, BIG, seen, 2);
	struct feed_stream_opts go = {.dataset = "d", .batch = 10, .group = "g"};
	struct feed_stream *member = h_stream_open(c, &go), *late;

	write_config("datasets:\n  - name: d\n    path: v2\n");
	ck_assert_int_eq(feed_reload(c, &res), 0);
	ck_assert_uint_eq(res->nrepointed, 1);
	ck_assert_str_eq(res->repointed[0], "d");
	feed_reload_result_free(res);
	ck_assert_int_eq(feed_dataset_info(c, "d", &list), 0);
	ck_assert_uint_eq(list->datasets[0].num_samples, 40);
	feed_dataset_list_free(list);
	/* a group on the old version: a late joiner on the new one is told why */
	ck_assert_int_eq(feed_stream_open(c, &go, &late), -ESTALE);
	ck_assert_msg(strstr(feed_errmsg(c), "group 'g': dataset 'd' is version ") &&
		      strstr(feed_errmsg(c), "the group reads version"), "%s", feed_errmsg(c));
	ck_assert_int_eq(feed_stream_close(member), 0);

	unsigned seen2[40] = {0};
	struct feed_conn *c2 = h_conn_new();
	struct feed_stream *st2 = open_on(c2, "d", 1);
	read_to_end(st2, 40, seen2, 0, 1);
	feed_stream_close(st2);
	feed_disconnect(c2);
	read_to_end(st, BIG, seen, 0, 1);  /* still the 600 samples of v1 */
	ck_assert_int_eq(feed_stream_close(st), 0);
	feed_disconnect(c);
}
END_TEST

START_TEST(test_reload_broken_config_refused_with_every_error)
{
	struct feed_reload_result *res = NULL;
	struct feed_dataset_list *list;
	char out[200];

	h_start((const char *[]){"--config", write_config("datasets:\n  - name: tiny\n    path: fm\n"),
				 NULL});
	write_config("limits:\n"
		     "  max_streams: 0\n"
		     "datasets:\n"
		     "  - name: tiny\n"
		     "    path: fm\n"
		     "    allow_users: [no_such_user_here]\n"
		     "  - name: new\n"
		     "    path: nowhere\n"
		     "pipelines:\n"
		     "  - name: p\n"
		     "    ops: \"warp(x=1)\"\n");
	snprintf(out, sizeof(out), "%s/feedctl.out", h.dir);
	int code = h_run_tool("feedctl", (const char *[]){"--socket", h.sock, "reload", NULL}, out);
	ck_assert_msg(code == 1, "feedctl reload exited %d:\n%s", code, h_file_text(out));
	const char *said = h_file_text(out);
	ck_assert_msg(strstr(said, "refused (3 errors)") &&
		      strstr(said, "feedd.yaml:2: limits.max_streams: 0 out of range") &&
		      strstr(said, "feedd.yaml:6: datasets[0].allow_users[0]: no user named "
			     "'no_such_user_here'") &&
		      strstr(said, "feedd.yaml:11: pipelines[0].ops: pipeline 'p'"), "%s", said);
	ck_assert(h_log_line_has("error: reload of ", "refused (3 errors); the configuration in "
			     "force stays"));
	ck_assert(h_log_line_has("error: reload: ", "limits.max_streams: 0 out of range"));
	ck_assert(h_log_line_has("error: reload: ", "no user named 'no_such_user_here'"));
	ck_assert(h_log_line_has("error: reload: ", "pipelines[0].ops: pipeline 'p'"));

	/* through the client: the same, and the old config serves */
	struct feed_conn *c = h_conn_new();
	ck_assert_int_eq(feed_reload(c, &res), -EINVAL);
	ck_assert(!res->applied);
	ck_assert_uint_eq(res->nerrors, 3);
	ck_assert_msg(strstr(feed_errmsg(c), "refused (3 errors)"), "%s", feed_errmsg(c));
	feed_reload_result_free(res);
	ck_assert_int_eq(feed_list_datasets(c, &list), 0);
	ck_assert_uint_eq(list->count, 1);
	feed_dataset_list_free(list);
	struct feed_stream *st = h_tiny_open(c, 2, 2);
	h_tiny_read(st, 7);
	feed_stream_close(st);

	/* a file that loads but names a dataset that does not open: refused too */
	write_config("datasets:\n  - name: tiny\n    path: fm\n  - name: new\n    path: nowhere\n");
	ck_assert_int_eq(feed_reload(c, &res), -EINVAL);
	ck_assert_uint_eq(res->nerrors, 1);
	ck_assert_msg(strstr(res->errors[0], "dataset 'new' (") && strstr(res->errors[0], "nowhere"),
		      "%s", res->errors[0]);
	feed_reload_result_free(res);
	feed_disconnect(c);
}
END_TEST

/* Forks a child with gid (and no other group) as nobody; it runs fn (0: ok;
 * n: check n failed). Returns that. */
static int as_nobody(gid_t gid, int (*fn)(void))
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(NOBODY) < 0)
			_exit(100);
		_exit(fn());
	}
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(status != -1 && WIFEXITED(status), "child did not finish");
	return WEXITSTATUS(status);
}

/* 0: nobody lists tiny and opens it; 13: neither; else a check failed. */
static int nobody_open_tiny(void)
{
	struct feed_conn *c;
	struct feed_stream *st;
	struct feed_dataset_list *list;
	struct feed_stream_opts o = {.dataset = "tiny", .batch = 2};

	if (feed_connect(h.sock, &c) < 0)
		return 2;
	if (feed_list_datasets(c, &list) < 0)
		return 4;
	size_t listed = list->count;
	feed_dataset_list_free(list);
	int r = feed_stream_open(c, &o, &st);
	feed_disconnect(c);
	if (r == 0 && listed == 1)
		return 0;
	return r == -EACCES && listed == 0 ? 13 : 3;
}

START_TEST(test_reload_access_list_change_applies_to_new_opens)
{
	struct feed_reload_result *res = NULL;

	h_start((const char *[]){"--config", write_config("socket_group: nogroup\n"
							 "datasets:\n  - name: tiny\n    path: fm\n"
							 "    allow_users: [root]\n"), NULL});
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_open_tiny), 13);
	write_config("socket_group: nogroup\n"
		     "datasets:\n  - name: tiny\n    path: fm\n    allow_users: [\"65534\"]\n");
	struct feed_conn *c = h_conn_new();
	struct feed_stream *st = h_tiny_open(c, 2, 2);  /* root's stream, across the change */
	ck_assert_int_eq(feed_reload(c, &res), 0);
	ck_assert_uint_eq(res->nadded + res->nremoved + res->nrepointed, 0);  /* same directory */
	feed_reload_result_free(res);
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_open_tiny), 0);
	h_tiny_read(st, 12);
	/* and back: refused again */
	write_config("socket_group: nogroup\n"
		     "datasets:\n  - name: tiny\n    path: fm\n    allow_users: [root]\n");
	ck_assert_int_eq(feed_reload(c, &res), 0);
	feed_reload_result_free(res);
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_open_tiny), 13);
	feed_stream_close(st);
	feed_disconnect(c);
}
END_TEST

static const char *feedctl_out;

/* feedctl reload as the child: exit code, output in feedctl_out. */
static int nobody_feedctl_reload(void)
{
	char path[300];
	int fd = open(feedctl_out, O_WRONLY | O_APPEND);

	if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
		return 90;
	snprintf(path, sizeof(path), "%s/feedctl", h.bin);
	execl(path, "feedctl", "--socket", h.sock, "reload", (char *)NULL);
	return 91;
}

START_TEST(test_reload_only_root_and_admin_group)
{
	char out[200];

	h_start((const char *[]){"--config", write_config("socket_group: nogroup\n"
							 "datasets:\n  - name: tiny\n    path: fm\n"),
				 NULL});
	snprintf(out, sizeof(out), "%s/feedctl.out", h.dir);
	int fd = open(out, O_CREAT | O_WRONLY | O_TRUNC, 0666);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fchmod(fd, 0666), 0);  /* the child, nobody, appends */
	close(fd);
	feedctl_out = out;
	/* the socket file lets anyone connect: the request itself is refused,
	 * also to a member of the socket's group when no admin_group is set */
	ck_assert_int_eq(chmod(h.sock, 0666), 0);
	ck_assert_int_eq(as_nobody(4242, nobody_feedctl_reload), 1);
	ck_assert_msg(strstr(h_file_text(out), "reload: user 65534 (groups 4242) is neither root "
			     "nor in the config's admin_group (none configured)"), "%s",
		      h_file_text(out));
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_feedctl_reload), 1);
	ck_assert(h_log_has("reload: user 65534 (groups 65534) is neither root"));
	ck_assert_uint_eq(h_log_count("reload of "), 0);  /* nothing was started */
	/* root may; then the admin_group it configures may */
	write_config("socket_group: nogroup\nadmin_group: nogroup\n"
		     "datasets:\n  - name: tiny\n    path: fm\n");
	struct feed_conn *c = h_conn_new();
	struct feed_reload_result *res;
	ck_assert_int_eq(feed_reload(c, &res), 0);
	ck_assert(res->applied);
	feed_reload_result_free(res);
	feed_disconnect(c);
	ck_assert_int_eq(as_nobody(4242, nobody_feedctl_reload), 1);
	ck_assert_msg(strstr(h_file_text(out), "admin_group 65534"), "%s", h_file_text(out));
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_feedctl_reload), 0);
	ck_assert_msg(strstr(h_file_text(out), "reloaded "), "%s", h_file_text(out));
}
END_TEST

/* As an admin (nobody in nogroup): the reload that drops "mine" and
 * "secret" and adds "mine2" and "secret2" answers with the two nobody may
 * read alone. 0, or the check that failed. */
static int nobody_reload_sees_own(void)
{
	struct feed_conn *c;
	struct feed_reload_result *res;

	if (feed_connect(h.sock, &c))
		return 1;
	if (feed_reload(c, &res) || !res->applied)
		return 2;
	if (res->nadded != 1 || strcmp(res->added[0], "mine2"))
		return 3;
	if (res->nremoved != 1 || strcmp(res->removed[0], "mine"))
		return 4;
	feed_reload_result_free(res);
	feed_disconnect(c);
	return 0;
}

START_TEST(test_reload_reply_lists_only_readable_datasets)
{
	static const char *names[] = {"mine", "secret", "mine2", "secret2"};
	char dir[300], text[1024];
	struct feed_reload_result *res;

	for (int i = 0; i < 4; i++) {
		snprintf(dir, sizeof(dir), "%s/%s", h.dir, names[i]);
		h_make_dataset_blocks(dir, 20, 10);
	}
	const char *head = "socket_group: nogroup\nadmin_group: nogroup\n"
			   "datasets:\n  - name: tiny\n    path: fm\n";
	snprintf(text, sizeof(text), "%s  - name: mine\n    path: mine\n    allow_users: [\"65534\"]\n"
		 "  - name: secret\n    path: secret\n    allow_users: [root]\n", head);
	h_start((const char *[]){"--config", write_config(text), NULL});
	ck_assert_int_eq(chmod(h.sock, 0666), 0);
	snprintf(text, sizeof(text), "%s  - name: mine2\n    path: mine2\n    allow_users: [\"65534\"]\n"
		 "  - name: secret2\n    path: secret2\n    allow_users: [root]\n", head);
	write_config(text);
	ck_assert_int_eq(as_nobody(NOGROUP, nobody_reload_sees_own), 0);
	/* root reads every dataset: back again, it is told of all four */
	snprintf(text, sizeof(text), "%s  - name: mine\n    path: mine\n    allow_users: [\"65534\"]\n"
		 "  - name: secret\n    path: secret\n    allow_users: [root]\n", head);
	write_config(text);
	struct feed_conn *c = h_conn_new();
	ck_assert_int_eq(feed_reload(c, &res), 0);
	ck_assert(res->applied);
	ck_assert_uint_eq(res->nadded, 2);
	ck_assert_uint_eq(res->nremoved, 2);
	feed_reload_result_free(res);
	feed_disconnect(c);
}
END_TEST

static Suite *reload_suite(void)
{
	Suite *s = suite_create("reload");
	TCase *tc = tcase_create("reload");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reload_sighup_adds_dataset_stream_goes_on);
	tcase_add_test(tc, test_reload_removed_dataset_stream_finishes_on_old_files);
	tcase_add_test(tc, test_reload_repointed_dataset_new_opens_get_new_version);
	tcase_add_test(tc, test_reload_broken_config_refused_with_every_error);
	if (geteuid() == 0) {
		tcase_add_test(tc, test_reload_access_list_change_applies_to_new_opens);
		tcase_add_test(tc, test_reload_only_root_and_admin_group);
		tcase_add_test(tc, test_reload_reply_lists_only_readable_datasets);
	} else {
		fprintf(stderr, "check_reload: not root: the nobody tests are left out\n");
	}
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return h_run_suite(reload_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
