/*
 * check_lifecycle.c: feedd as a process: SIGTERM and SIGINT stop it with
 * exit 0, SIGHUP reloads (check_reload.c has the rest), signals are read on
 * the loop (blocked in every thread, no handler), a second daemon on the
 * same socket is refused, a stale socket is replaced and anything else at
 * that path is left alone, missing and
 * corrupt datasets are left out (and none at all still serves), the
 * runtime directory and socket modes, FEEDD_SOCKET, a config file, every
 * file in configs/ loading, --check-config's deeper checks, and feedctl;
 * SIGTERM while workers are building batches drains them and ends the
 * client's stream cleanly.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/stream.h"
#include "feedd_harness.h"

static const char *fm_arg(void)
{
	static char arg[160];
	snprintf(arg, sizeof(arg), "fm=%s", h.data);
	return arg;
}

/* Runs FEED_BIN/prog with args to completion; returns its exit code and
 * leaves its output in h.dir/out.<n>. */
static int run(const char *prog, const char *const *args, char *out_path, size_t cap)
{
	static int n;
	snprintf(out_path, cap, "%s/out.%d", h.dir, n++);
	pid_t pid = h_spawn(prog, args, out_path);
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(status != -1, "%s did not finish", prog);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_lifecycle_sigterm)
{
	struct stat st;

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	h_assert_healthy();
	ck_assert_int_eq(h_stop(), 0);
	ck_assert(h_log_has("SIGTERM: stopping"));
	ck_assert(h_log_has("stopped"));
	ck_assert_int_eq(stat(h.sock, &st), -1);  /* socket removed */
}
END_TEST

/* With NOTIFY_SOCKET set, feedd tells systemd READY=1, then STOPPING=1. */
START_TEST(test_lifecycle_sd_notify)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char buf[512], got[2048] = "";

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify.sock", h.dir);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(h_stop(), 0);
	for (ssize_t n; (n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) > 0;) {
		buf[n] = '\0';
		strncat(got, buf, sizeof(got) - strlen(got) - 1);
	}
	close(fd);
	char *ready = strstr(got, "READY=1"), *stopping = strstr(got, "STOPPING=1");
	ck_assert_msg(ready && stopping && ready < stopping, "notifications: %s", got);
}
END_TEST

START_TEST(test_lifecycle_sigint)
{
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	pid_t pid = h.pid;
	h.pid = 0;
	ck_assert_int_eq(kill(pid, SIGINT), 0);
	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

/* SIGHUP reloads, and neither kills feedd nor goes unnoticed: with no
 * config file the flags are loaded again, nothing changes, and the daemon
 * keeps serving. */
START_TEST(test_lifecycle_sighup_keeps_serving)
{
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert_msg(h_log_line_has("reload of built-in defaults", "in force: 1 datasets served; "
				     "added: none; removed: none; repointed: none"), "log:\n%s",
		      h_file_text(h.log));
	h_assert_healthy();
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	h_assert_healthy();
	ck_assert_int_eq(h_stop(), 0);
	ck_assert(h_log_has("SIGTERM: stopping"));
}
END_TEST

/* The hex word of mask line key ("SigBlk:", "SigCgt:") of a
 * /proc/.../status file; false when the file is gone (a thread that
 * ended meanwhile). */
static bool proc_mask(const char *path, const char *key, unsigned long long *ret)
{
	char line[256];
	FILE *f = fopen(path, "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = !strncmp(line, key, strlen(key)) &&
			sscanf(line + strlen(key), "%llx", ret) == 1;
	fclose(f);
	return found;
}

/* Signals are read on the loop from a signalfd, never handled in a
 * signal context: every thread of feedd blocks them and no handler is
 * installed, so the kernel keeps each one pending until the loop reads
 * it (a handler's delivery was lost under the thread sanitizer in a few
 * starts out of a hundred, right after "ready"). And they still act. */
START_TEST(test_lifecycle_signals_read_on_the_loop)
{
	const int sigs[] = {SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGRTMIN + 3};
	char path[320];
	unsigned long long mask;
	int threads = 0;

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	snprintf(path, sizeof(path), "/proc/%d/status", (int)h.pid);
	ck_assert(proc_mask(path, "SigCgt:", &mask));
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		ck_assert_msg(!(mask & (1ull << (sigs[i] - 1))), "a handler for signal %d", sigs[i]);
	snprintf(path, sizeof(path), "/proc/%d/task", (int)h.pid);
	DIR *dir = opendir(path);
	ck_assert_ptr_nonnull(dir);
	for (struct dirent *e; (e = readdir(dir));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)h.pid, e->d_name);
		if (!proc_mask(path, "SigBlk:", &mask))
			continue;
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			ck_assert_msg(mask & (1ull << (sigs[i] - 1)), "thread %s lets signal %d through",
				      e->d_name, sigs[i]);
		threads++;
	}
	closedir(dir);
	ck_assert_int_ge(threads, 3);  /* the loop, the workers, ... */
	ck_assert_int_eq(kill(h.pid, SIGUSR1), 0);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert_msg(h_log_has("SIGUSR1: no meaning to feedd; ignored"), "%s", h_file_text(h.log));
	ck_assert_msg(h_log_has("SIGHUP: reloading the configuration"), "%s", h_file_text(h.log));
	h_assert_healthy();
	ck_assert_int_eq(h_stop(), 0);
	ck_assert(h_log_has("SIGTERM: stopping"));
}
END_TEST

START_TEST(test_lifecycle_second_daemon)
{
	char out[200], want[200];

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	int code = run("feedd", (const char *[]){"--socket", h.sock, "--dataset", fm_arg(), NULL},
		       out, sizeof(out));
	ck_assert_int_eq(code, 1);
	snprintf(want, sizeof(want), "another feedd (pid %d) is serving %s", (int)h.pid, h.sock);
	ck_assert_msg(h_file_has(out, want), "second daemon said:\n%s", h_file_text(out));
	h_assert_healthy();  /* the first one is untouched */
}
END_TEST

START_TEST(test_lifecycle_stale_socket)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	/* What a crashed daemon leaves: a socket file nobody listens on. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h.sock);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	ck_assert(h_log_has("removed stale socket"));
	h_assert_healthy();
}
END_TEST

START_TEST(test_lifecycle_not_a_socket)
{
	char out[200];

	h_write_file("feedd.sock", "precious\n");
	int code = run("feedd", (const char *[]){"--socket", h.sock, NULL}, out, sizeof(out));
	ck_assert_int_eq(code, 1);
	ck_assert(h_file_has(out, "exists and is not a socket"));
	ck_assert_str_eq(h_file_text(h.sock), "precious\n");
}
END_TEST

START_TEST(test_lifecycle_bad_datasets)
{
	char bad[160], badarg[180], gonearg[180];
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	/* A directory whose manifest is garbage. */
	snprintf(bad, sizeof(bad), "%s/bad", h.dir);
	ck_assert_int_eq(mkdir(bad, 0755), 0);
	h_write_file("bad/manifest.pb", "this is not a manifest");
	snprintf(badarg, sizeof(badarg), "bad=%s", bad);
	snprintf(gonearg, sizeof(gonearg), "gone=%s/nonexistent", h.dir);
	h_start((const char *[]){"--dataset", gonearg, "--dataset", fm_arg(), "--dataset", badarg,
				 NULL});
	ck_assert(h_log_has("dataset 'gone'"));
	ck_assert(h_log_has("dataset 'bad'"));
	ck_assert(h_log_has("ready: 1 of 3 datasets"));
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(feed_list_datasets(conn, &list), 0);
	ck_assert_uint_eq(list->count, 1);
	ck_assert_str_eq(list->datasets[0].name, "fm");
	feed_dataset_list_free(list);
	ck_assert_int_eq(feed_dataset_info(conn, "bad", &list), -ENOENT);
	ck_assert_ptr_nonnull(strstr(feed_errmsg(conn), "failed to open at start"));
	feed_disconnect(conn);
}
END_TEST

START_TEST(test_lifecycle_no_datasets)
{
	char gonearg[180];
	struct feed_conn *conn;
	struct feed_dataset_list *list;

	snprintf(gonearg, sizeof(gonearg), "gone=%s/nonexistent", h.dir);
	h_start((const char *[]){"--dataset", gonearg, NULL});
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(feed_list_datasets(conn, &list), 0);
	ck_assert_uint_eq(list->count, 0);
	feed_dataset_list_free(list);
	feed_disconnect(conn);
}
END_TEST

START_TEST(test_lifecycle_runtime_dir)
{
	struct stat st;
	char dir[160], lock[200];

	snprintf(dir, sizeof(dir), "%s/run", h.dir);
	snprintf(h.sock, sizeof(h.sock), "%s/run/feedd.sock", h.dir);
	snprintf(lock, sizeof(lock), "%s.lock", h.sock);
	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0750);
	ck_assert_int_eq(stat(h.sock, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0660);
	ck_assert_int_eq(stat(lock, &st), 0);
	h_assert_healthy();
}
END_TEST

START_TEST(test_lifecycle_env_socket)
{
	struct feed_conn *conn;

	setenv("FEEDD_SOCKET", h.sock, 1);
	/* No --socket: h_start's own flag is overridden by starting directly. */
	h.pid = h_spawn("feedd", (const char *[]){"--dataset", fm_arg(), NULL}, h.log);
	ck_assert(h_log_has("ready:"));
	ck_assert(h_log_has(h.sock));
	ck_assert_int_eq(feed_connect(NULL, &conn), 0);  /* the client reads it too */
	feed_disconnect(conn);
}
END_TEST

START_TEST(test_lifecycle_config_file)
{
	char text[600];
	struct feed_conn *conn;
	struct feed_stats st;
	struct feed_dataset_list *list;

	snprintf(text, sizeof(text),
		 "# relative paths are relative to this file\n"
		 "workers: 3\n"
		 "log_level: debug\n"
		 "limits:\n"
		 "  max_connections: 4\n"
		 "datasets:\n"
		 "  - name: tiny\n"
		 "    path: fm\n"
		 "pipelines:\n"
		 "  - name: train\n"
		 "    ops: \"hflip(p=0.5)\"\n");
	const char *cfg = h_write_file("feedd.yaml", text);
	h_start((const char *[]){"--config", cfg, NULL});
	ck_assert_int_eq(feed_connect(h.sock, &conn), 0);
	ck_assert_int_eq(feed_stats(conn, &st), 0);
	ck_assert_uint_eq(st.workers, 3);
	ck_assert_int_eq(feed_list_datasets(conn, &list), 0);
	ck_assert_uint_eq(list->count, 1);
	ck_assert_str_eq(list->datasets[0].name, "tiny");
	feed_dataset_list_free(list);
	feed_disconnect(conn);
	ck_assert(h_log_has("debug: "));
}
END_TEST

START_TEST(test_lifecycle_bad_config)
{
	char out[200], want[300];
	const char *cfg = h_write_file("bad.yaml", "workers: 2\nlimits:\n  max_conections: 3\n");

	int code = run("feedd", (const char *[]){"--config", cfg, NULL}, out, sizeof(out));
	ck_assert_int_eq(code, 1);
	snprintf(want, sizeof(want), "%s:3: limits.max_conections: unknown key", cfg);
	ck_assert_msg(h_file_has(out, want), "feedd said:\n%s", h_file_text(out));
	code = run("feedd", (const char *[]){"--check-config", cfg, NULL}, out, sizeof(out));
	ck_assert_int_eq(code, 1);
	ck_assert(h_file_has(out, want));
	code = run("feedd", (const char *[]){"--bogus", NULL}, out, sizeof(out));
	ck_assert_int_eq(code, 2);
	ck_assert(h_file_has(out, "--bogus: unknown option"));
}
END_TEST

/* --check-config checks what a start would meet: a pipeline with an
 * unknown op is an error naming pipeline and op (and start refuses it
 * with the same words), a missing dataset directory is a warning naming
 * the dataset and the path (start leaves it out too; --strict refuses
 * it), a pipeline that plans against none of the datasets is a warning
 * (at start too). */
START_TEST(test_lifecycle_check_config_deep)
{
	char out[200], want[300], gone[200];
	const char *cfg = h_write_file("bad.yaml", "datasets:\n  - name: tiny\n    path: fm\n"
				       "pipelines:\n  - name: lm\n    ops: random_windw(len=256)\n");

	int code = run("feedd", (const char *[]){"--check-config", cfg, NULL}, out, sizeof(out));
	ck_assert_msg(code == 1, "exit %d: %s", code, h_file_text(out));
	snprintf(want, sizeof(want), "%s:6: pipelines[0].ops: pipeline 'lm': op 1 'random_windw': "
		 "unknown op", cfg);
	ck_assert_msg(h_file_has(out, want), "feedd said:\n%s", h_file_text(out));
	code = run("feedd", (const char *[]){"--socket", h.sock, "--config", cfg, NULL}, out,
		   sizeof(out));
	ck_assert_int_eq(code, 1);
	ck_assert_msg(h_file_has(out, want), "feedd said:\n%s", h_file_text(out));

	cfg = h_write_file("gone.yaml", "datasets:\n  - name: tiny\n    path: fm\n"
			   "  - name: gone\n    path: nonexistent\n");
	code = run("feedd", (const char *[]){"--check-config", cfg, NULL}, out, sizeof(out));
	ck_assert_msg(code == 0, "exit %d: %s", code, h_file_text(out));
	snprintf(gone, sizeof(gone), "warning: dataset 'gone' (%s/nonexistent): ", h.dir);
	ck_assert_msg(h_file_has(out, gone), "feedd said:\n%s", h_file_text(out));
	ck_assert(h_file_has(out, ": ok ("));
	code = run("feedd", (const char *[]){"--check-config", cfg, "--strict", NULL}, out,
		   sizeof(out));
	ck_assert_msg(code == 1, "exit %d: %s", code, h_file_text(out));
	ck_assert(h_file_has(out, "0 errors, 1 warning; refused: --strict"));

	cfg = h_write_file("unfit.yaml", "datasets:\n  - name: tiny\n    path: fm\n"
			   "pipelines:\n  - name: lm\n    ops: random_window(len=4)\n"
			   "  - name: flip\n    ops: hflip\n");
	code = run("feedd", (const char *[]){"--check-config", cfg, NULL}, out, sizeof(out));
	ck_assert_msg(code == 0, "exit %d: %s", code, h_file_text(out));
	ck_assert(h_file_has(out, ": ok ("));
	ck_assert_msg(h_file_has(out, "warning: pipeline 'lm' plans against none of the 1 "
				      "datasets (dataset 'tiny': "), "feedd said:\n%s",
		      h_file_text(out));
	ck_assert_ptr_null(strstr(h_file_text(out), "pipeline 'flip'"));
	h_start((const char *[]){"--config", cfg, NULL});
	ck_assert(h_log_has("warn: pipeline 'lm' plans against none of the 1 datasets"));
	h_assert_healthy();
}
END_TEST

/* Every file in configs/ must load: the default and each example (whose
 * datasets may be missing here: warnings, and nothing else may be wrong). */
START_TEST(test_lifecycle_configs_load)
{
	const char *src = getenv("FEED_SRC");
	char dirpath[300], file[600], out[200];
	int loaded = 0;

	ck_assert_ptr_nonnull(src);
	snprintf(dirpath, sizeof(dirpath), "%s/configs", src);
	DIR *dir = opendir(dirpath);
	ck_assert_ptr_nonnull(dir);
	for (struct dirent *e; (e = readdir(dir));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s", dirpath, e->d_name);
		int code = run("feedd", (const char *[]){"--check-config", file, NULL}, out,
			       sizeof(out));
		ck_assert_msg(code == 0, "%s: %s", file, h_file_text(out));
		ck_assert(h_file_has(out, ": ok ("));
		loaded++;
	}
	closedir(dir);
	ck_assert_int_ge(loaded, 2);  /* feedd.yaml and at least one example */
}
END_TEST

START_TEST(test_lifecycle_feedctl)
{
	char out[200], nosock[200];

	h_start((const char *[]){"--dataset", fm_arg(), NULL});
	ck_assert_int_eq(run("feedctl", (const char *[]){"--socket", h.sock, "status", NULL}, out,
			     sizeof(out)), 0);
	ck_assert(h_file_has(out, "feedd 0.1.0, protocol 1"));
	ck_assert(h_file_has(out, "datasets:    1 readable by you"));
	ck_assert_int_eq(run("feedctl", (const char *[]){"--socket", h.sock, "datasets", NULL},
			     out, sizeof(out)), 0);
	ck_assert(h_file_has(out, "image:u8[4,4] label:i64"));
	ck_assert_int_eq(run("feedctl", (const char *[]){"--socket", h.sock, "datasets", "nope",
							 NULL}, out, sizeof(out)), 1);
	ck_assert(h_file_has(out, "feedctl: datasets: dataset 'nope': no such dataset"));
	snprintf(nosock, sizeof(nosock), "%s/none.sock", h.dir);
	ck_assert_int_eq(run("feedctl", (const char *[]){"--socket", nosock, "status", NULL}, out,
			     sizeof(out)), 1);
	ck_assert(h_file_has(out, "feedctl: connect: cannot reach feedd at"));
	ck_assert_int_eq(run("feedctl", (const char *[]){"frobnicate", NULL}, out, sizeof(out)), 2);
	ck_assert(h_file_has(out, "usage: feedctl"));
}
END_TEST


/* A heavy pipeline: each 4x4 image is blown up to 1024x1024 and shrunk
 * back to 64x64, about a million pixels of work per sample for 4 KiB of
 * output, so a batch keeps a worker busy for tens of milliseconds (ten
 * times that under a sanitizer) and BUILD_CREDITS of them for a good part
 * of a second, in little memory. The dataset has BUILD_SAMPLES records so
 * that an epoch holds more batches than there are credits: the credits,
 * not the epoch, bound what is queued. */
#define BUILD_PIPELINE "resize(h=1024, w=1024) | resize(h=64, w=64)"
#define BUILD_SAMPLES 200
#define BUILD_BATCH 8
#define BUILD_CREDITS 16

/* Every sample of a batch of the heavy pipeline: a constant image (the
 * harness's sample i is all i & 0xff, and so is any resize of it). */
static void build_check(struct feed_batch *b)
{
	struct feed_view img;
	const uint64_t *idx = feed_batch_samples(b);

	ck_assert_int_eq(feed_batch_size(b), BUILD_BATCH);
	ck_assert_int_eq(feed_batch_field(b, 0, &img), 0);
	ck_assert_uint_eq(img.bytes, 64ull * 64 * BUILD_BATCH);
	for (uint32_t i = 0; i < BUILD_BATCH; i++) {
		const uint8_t *px = (const uint8_t *)img.data + 64 * 64 * i;
		ck_assert_uint_lt(idx[i], BUILD_SAMPLES);
		for (int k = 0; k < 64 * 64; k++)
			ck_assert_uint_eq(px[k], idx[i] & 0xff);
	}
}

/* SIGTERM while the workers build: the stream has BUILD_CREDITS credits,
 * all free but one, and the daemon fills them as fast as it can. feedd
 * finishes or drops the builds under way, exits 0 in time, says so and
 * removes its socket; the client gets what was published, whole, then
 * -ECONNRESET, at once rather than at its timeout. */
START_TEST(test_lifecycle_sigterm_while_building)
{
	struct feed_stream_opts o = {.dataset = "big", .batch = BUILD_BATCH,
				     .credits = BUILD_CREDITS, .pipeline = BUILD_PIPELINE,
				     .reconnect_ms = -1};
	char dir[128], arg[160];
	struct feed_batch *held, *b;
	struct stat st;
	int r, got = 0;

	snprintf(dir, sizeof(dir), "%s/big", h.dir);
	h_make_dataset(dir, BUILD_SAMPLES);
	snprintf(arg, sizeof(arg), "big=%s", dir);
	h_start((const char *[]){"--dataset", arg, "--workers", "2", NULL});
	struct feed_conn *c = h_conn_new();
	struct feed_stream *fs = h_stream_open(c, &o);
	ck_assert_int_eq(feed_next(fs, H_DEADLINE_MS, &held), 0);
	build_check(held);
	got++;

	pid_t pid = h.pid;
	h.pid = 0;
	int64_t t0 = h_now_ms();
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	/* what was published comes, then the end; a hang would be -ETIMEDOUT */
	while ((r = feed_next(fs, H_DEADLINE_MS, &b)) == 0 || r == FEED_END_OF_EPOCH) {
		if (r == 0) {
			build_check(b);
			ck_assert_int_eq(feed_release(b), 0);
			got++;
		}
	}
	int64_t ended = h_now_ms() - t0;
	ck_assert_msg(r == -ECONNRESET, "feed_next after SIGTERM: %s: %s", feed_strerror(r),
		      feed_errmsg(c));
	ck_assert_msg(ended < H_DEADLINE_MS / 2, "the stream ended %lld ms after SIGTERM",
		      (long long)ended);
	/* the daemon stopped with batches still to build: the scenario held */
	ck_assert_msg(got < BUILD_CREDITS, "all %d credits were built before SIGTERM", got);

	int status = h_wait(pid, H_DEADLINE_MS);
	ck_assert_msg(status != -1, "feedd still running %d ms after SIGTERM", H_DEADLINE_MS);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fputs(h_file_text(h.log), stderr);  /* a sanitizer's report is longer than
						     * a Check message may be */
		ck_abort_msg("feedd ended with status 0x%x; its log is on stderr", status);
	}
	/* it has exited: its log is whole, no need to wait for a line */
	const char *log = h_file_text(h.log);
	ck_assert_msg(strstr(log, "SIGTERM: stopping") && strstr(log, "info: stopped"),
		      "no stop in the log:\n%s", log);
	ck_assert_int_eq(stat(h.sock, &st), -1);
	ck_assert_int_eq(errno, ENOENT);
	build_check(held);   /* a batch held across the daemon's exit stays whole */
	feed_stream_close(fs);
	feed_disconnect(c);
}
END_TEST

static Suite *lifecycle_suite(void)
{
	Suite *s = suite_create("lifecycle");
	TCase *tc = tcase_create("lifecycle");

	tcase_add_checked_fixture(tc, h_setup, h_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_lifecycle_sigterm);
	tcase_add_test(tc, test_lifecycle_sd_notify);
	tcase_add_test(tc, test_lifecycle_sigint);
	tcase_add_test(tc, test_lifecycle_sighup_keeps_serving);
	tcase_add_test(tc, test_lifecycle_signals_read_on_the_loop);
	tcase_add_test(tc, test_lifecycle_sigterm_while_building);
	tcase_add_test(tc, test_lifecycle_second_daemon);
	tcase_add_test(tc, test_lifecycle_stale_socket);
	tcase_add_test(tc, test_lifecycle_not_a_socket);
	tcase_add_test(tc, test_lifecycle_bad_datasets);
	tcase_add_test(tc, test_lifecycle_no_datasets);
	tcase_add_test(tc, test_lifecycle_runtime_dir);
	tcase_add_test(tc, test_lifecycle_env_socket);
	tcase_add_test(tc, test_lifecycle_config_file);
	tcase_add_test(tc, test_lifecycle_bad_config);
	tcase_add_test(tc, test_lifecycle_check_config_deep);
	tcase_add_test(tc, test_lifecycle_configs_load);
	tcase_add_test(tc, test_lifecycle_feedctl);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lifecycle_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
