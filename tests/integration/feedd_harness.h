/*
 * feedd_harness.h: what the integration tests share: a private temporary
 * directory (mode 0755, so a child switched to nobody can reach it) holding
 * a tiny dataset written with the format library, a real feedd started on
 * a socket in it with its log in a file, raw SOCK_SEQPACKET helpers for
 * sending what libfeedclient never would (and receiving the descriptors it
 * would check), waits that poll a condition against a deadline instead of
 * sleeping, and counters of a process read from /proc.
 *
 * Runs inside a Check test (forked per test): h is that process's state;
 * h_run_tool() alone may run before any test (e.g. packing a dataset once).
 * A daemon started here gets SIGKILL if the test process dies first.
 */
#ifndef FEEDD_HARNESS_H
#define FEEDD_HARNESS_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feed.pb-c.h"

struct feed_conn;
struct feed_stream;
struct feed_stream_opts;

#define H_DEADLINE_MS 20000  /* longest any wait may take (sanitizer builds are slow) */
#define H_SAMPLES 10         /* records in the test dataset */

struct h_env {
	char dir[48];            /* the test's temporary directory */
	char sock[100];          /* dir/feedd.sock (fits sun_path) */
	char log[128];           /* dir/feedd.log: the daemon's stderr */
	char data[128];          /* dir/fm: a dataset of H_SAMPLES records */
	char bin[256];           /* $FEED_BIN */
	pid_t pid;               /* the running daemon, 0 if none */
};

extern struct h_env h;

/* Checked fixture: creates the directory and the dataset. */
void h_setup(void);
/* Checked fixture: stops the daemon (asserting it exits 0) and removes
 * the directory. */
void h_teardown(void);

/* Writes a dataset of n records (image u8[4,4] all i & 0xff, label i64 i)
 * at dir; h_make_dataset_blocks() puts at most block_records records in a
 * block (0: the writer's default, by bytes). */
void h_make_dataset(const char *dir, uint64_t n);
void h_make_dataset_blocks(const char *dir, uint64_t n, uint32_t block_records);
/* A dataset "kinds" of H_SAMPLES records with one field of each kind a
 * conversion knows: image (u8 [4, 4, 3], byte k of record i is
 * (uint8_t)(i * 37 + k * 5): no image is symmetric), tokens (u16 [5],
 * 60000 + 100 i + k), label (i64, 11 i) and note (variable u8, i + 1 bytes
 * of 'a' + i). */
void h_make_kinds_dataset(const char *dir);
/* Writes text to dir/name and returns the path in a static buffer. */
const char *h_write_file(const char *name, const char *text);
/* Milliseconds on the monotonic clock. */
int64_t h_now_ms(void);

/* Starts FEED_BIN/<prog> with args (NULL-terminated, without argv[0]),
 * stdout and stderr appended to log. Returns its pid. */
pid_t h_spawn(const char *prog, const char *const *args, const char *log);
/* Waits for pid to exit: its wait status, or -1 past timeout_ms. */
int h_wait(pid_t pid, int timeout_ms);
/* Starts feedd with "--socket h.sock" and args, and waits for its "ready"
 * log line; fails the test if it exits first. */
void h_start(const char *const *args);
/* SIGTERMs the daemon and returns its exit code (-1: killed/timeout). */
int h_stop(void);

/* Polls cond(arg) every few milliseconds: true once it holds, false if
 * it still does not after timeout_ms. What a test waits on instead of
 * sleeping. */
bool h_wait_until(bool (*cond)(void *arg), void *arg, int timeout_ms);
/* True once file contains needle (polled until the deadline). */
bool h_file_has(const char *file, const char *needle);
/* Like h_file_has(h.log, needle). */
bool h_log_has(const char *needle);
/* Lines of the daemon's log (all of it, however long) holding needle. */
unsigned h_log_count(const char *needle);
/* True once one line of the log contains first and, after it, then
 * (polled until the deadline). */
bool h_log_line_has(const char *first, const char *then);
/* The whole file, NUL-terminated, in a static buffer. */
const char *h_file_text(const char *file);

/* Raw protocol. */
int h_raw_connect(void);
void h_raw_send(int fd, const void *buf, size_t len);
void h_raw_send_request(int fd, Feed__Request *req);
/* 1 with *ret set, 0 at end of stream, -ETIMEDOUT. */
int h_raw_recv(int fd, int timeout_ms, Feed__Reply **ret);
/* Reads one reply and asserts it is an Error with code, id, and a message
 * containing needle. */
void h_expect_error(int fd, uint32_t id, int code, const char *needle);
/* Asserts the daemon closes fd. */
void h_expect_eof(int fd);
/* Says hello on fd and asserts the reply. */
void h_raw_hello(int fd);

/* Like h_raw_recv(), also taking the descriptors passed with the packet
 * (SCM_RIGHTS, close-on-exec) into fds[0..cap); *ret_nfds says how many.
 * More than cap, or a truncated control message, fails the test. */
int h_raw_recv_fds(int fd, int timeout_ms, Feed__Reply **ret, int *fds, unsigned cap,
		   unsigned *ret_nfds);

/* Runs $FEED_BIN/prog with args (NULL-terminated, without argv[0]) to
 * completion, its output appended to log. Usable outside a Check test (no
 * assertions, h need not be set up): returns its exit code, or -1 when it
 * could not run or died of a signal. */
int h_run_tool(const char *prog, const char *const *args, const char *log);

/* Debian's dataset-fashion-mnist: the IDX files (gzip). */
#define H_FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Packs one split of it ("train" or "t10k") with feedpack into a fresh
 * world-readable directory under /tmp and copies the packed dataset's path
 * to ret_dir. Usable outside a Check test: -1, with the reason on stderr,
 * when it fails. h_fashion_remove() deletes what it made. */
int h_fashion_pack(const char *split, char *ret_dir, size_t cap);
int h_fashion_remove(void);

/* A libfeedclient connection to h's feedd, and a stream opened on it; a
 * refusal fails the test with the daemon's words. */
struct feed_conn *h_conn_new(void);
struct feed_stream *h_stream_open(struct feed_conn *c, const struct feed_stream_opts *o);

/* The harness's dataset as a stream: sequential, endless, batch and credits
 * as given. h_tiny_check() asserts that every sample of b holds that
 * dataset's bytes; h_tiny_read() takes n batches (stepping over epoch
 * ends), checks and releases each. */
struct feed_batch;
struct feed_stream *h_tiny_open(struct feed_conn *c, uint32_t batch, uint32_t credits);
void h_tiny_check(struct feed_batch *b);
void h_tiny_read(struct feed_stream *st, int n);
/* The next batch of st, past epoch ends; fails the test on anything else
 * (waits up to H_DEADLINE_MS). */
struct feed_batch *h_next_batch(struct feed_stream *st);

/* Sleeps ms milliseconds. */
void h_nap_ms(int ms);

/* Runs every test of s (its suite is freed); returns how many failed. */
int h_run_suite(Suite *s);

/* Sends pid SIGSTOP and returns once every thread of it is stopped (kill()
 * returns before a thread running on another CPU has stopped: it could
 * still publish a batch). Fails the test past H_DEADLINE_MS. */
void h_stop_process(pid_t pid);

/* What /proc says about a process: its open descriptors, the lines of its
 * maps that contain needle, and its CPU time (user + system, in clock
 * ticks). -1 if it cannot be read. */
int h_proc_fds(pid_t pid);
int h_proc_maps_count(pid_t pid, const char *needle);
long h_proc_cpu_ticks(pid_t pid);

/* A fresh libfeedclient connection is served: it lists the test dataset
 * (under whatever name) first. */
void h_assert_healthy(void);

#endif
