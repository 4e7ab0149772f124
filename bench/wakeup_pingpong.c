/*
 * wakeup_pingpong.c: the floor under feedd's wake-up latency on this
 * machine. Two processes (fork) and two eventfds: each side sleeps on its
 * eventfd, and when it returns, writes the other's. A one-way wake-up is
 * the time from the writer's clock read just before write() to the
 * sleeper's clock read just after it returns, both CLOCK_MONOTONIC, the
 * send time passed through shared memory. feedbench's wake-up latency
 * (daemon publish -> feed_next() return) is compared with it.
 *
 *   wakeup_pingpong [--rounds N] [--warmup W] [--mode poll|read]
 *                   [--delay-us D] [--cpus A,B] [--json]
 *
 *   --mode poll   non-blocking eventfd, poll() then read(), re-checked in a
 *                 loop: what libfeedclient's feed_next() does (default)
 *   --mode read   blocking read()
 *   --delay-us D  the woken side stays busy D µs before waking the other,
 *                 so each sleeper sleeps at least D µs (feedd's client
 *                 sleeps while a worker builds the batch; a longer sleep
 *                 lets an idle virtual CPU halt deeper)
 *   --cpus A,B    pin the first side to CPU A, the other to CPU B (A = B:
 *                 both on one core, a wake-up is a context switch; A != B:
 *                 the sleeper's core is woken by an IPI). Default: unpinned,
 *                 where the scheduler places them, as it places feedd.
 *
 * Prints p50/p99 (and min, mean, max) of the 2*N one-way latencies after
 * W warm-up round trips. Single-threaded per process; the two processes
 * never touch the same latency entry.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What both sides see: each side's last send time and its latencies. */
struct pp_shared {
	_Alignas(64) _Atomic uint64_t sent_ns[2];  /* [side]: clock before its write() */
	_Alignas(64) uint64_t lat[];               /* [side * rounds + i], ns */
};

struct pp_opts {
	uint64_t rounds, warmup, delay_ns;
	int cpu[2];               /* -1: unpinned */
	bool poll_mode, json;
};

static uint64_t pp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pp_spin(uint64_t ns)
{
	uint64_t end = pp_now_ns() + ns;

	while (pp_now_ns() < end)
		;
}

/* Set by SIGCHLD (installed without SA_RESTART): the other side is gone,
 * so a wait interrupted by it must not sleep again. Lock-free: safe in a
 * signal handler. */
static _Atomic int pp_child_gone;

static void pp_on_sigchld(int sig)
{
	(void)sig;
	atomic_store_explicit(&pp_child_gone, 1, memory_order_relaxed);
}

/* Sleeps until fd has a count and consumes it. 0, or -errno (-ECHILD when
 * the other side exited first). */
static int pp_wait(int fd, bool poll_mode)
{
	uint64_t v;

	for (;;) {
		if (poll_mode) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return -errno;
		}
		ssize_t n = read(fd, &v, sizeof(v));
		if (n == (ssize_t)sizeof(v))
			return 0;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (atomic_load_explicit(&pp_child_gone, memory_order_relaxed))
			return -ECHILD;
	}
}

/* Both CPUs of --cpus exist and we may run there. */
static int pp_check_cpus(const struct pp_opts *o)
{
	cpu_set_t set;

	if (o->cpu[0] < 0)
		return 0;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return -errno;
	for (int s = 0; s < 2; s++)
		if (!CPU_ISSET(o->cpu[s], &set)) {
			fprintf(stderr, "wakeup_pingpong: --cpus: CPU %d is not one this process may "
				"use (see nproc, taskset -p $$)\n", o->cpu[s]);
			return -EINVAL;
		}
	return 0;
}

static int pp_ring(int fd)
{
	uint64_t one = 1;

	return write(fd, &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : -errno;
}

/* One side: side 0 sends first. Sleeps on efd[side], wakes efd[!side]. */
static int pp_side(struct pp_shared *sh, const struct pp_opts *o, int side, const int efd[2])
{
	uint64_t total = o->warmup + o->rounds;
	int r;

	if (o->cpu[side] >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(o->cpu[side], &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0) {
			fprintf(stderr, "wakeup_pingpong: pin side %d to CPU %d: %s\n", side,
				o->cpu[side], strerror(errno));
			return -errno;
		}
	}

	for (uint64_t i = 0; i < total; i++) {
		if (side == 0 || i > 0) {
			if (o->delay_ns)
				pp_spin(o->delay_ns);
			/* release: our timestamp before the other side's read of it,
			 * which the eventfd's count orders after our write() */
			atomic_store_explicit(&sh->sent_ns[side], pp_now_ns(), memory_order_release);
			if ((r = pp_ring(efd[!side])) < 0)
				return r;
		}
		if ((r = pp_wait(efd[side], o->poll_mode)) < 0)
			return r;
		uint64_t now = pp_now_ns();
		uint64_t sent = atomic_load_explicit(&sh->sent_ns[!side], memory_order_acquire);
		if (i >= o->warmup)
			sh->lat[(uint64_t)side * o->rounds + (i - o->warmup)] = now - sent;
	}
	/* side 1 answers the last ping, so side 0's last wait returns */
	if (side == 1) {
		atomic_store_explicit(&sh->sent_ns[side], pp_now_ns(), memory_order_release);
		return pp_ring(efd[0]);
	}
	return 0;
}

static int pp_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v, in µs. */
static double pp_pct(const uint64_t *v, uint64_t n, double q)
{
	uint64_t k = (uint64_t)(q * (double)n + 0.999999);

	k = k < 1 ? 1 : k > n ? n : k;
	return (double)v[k - 1] / 1000.0;
}

static void pp_report(const struct pp_opts *o, uint64_t *lat)
{
	uint64_t n = 2 * o->rounds;
	double sum = 0;
	char cpus[32] = "unpinned";

	if (o->cpu[0] >= 0)
		snprintf(cpus, sizeof(cpus), "%d,%d", o->cpu[0], o->cpu[1]);

	/* both directions are one-way wake-ups: pooled */
	qsort(lat, n, sizeof(*lat), pp_cmp);
	for (uint64_t i = 0; i < n; i++)
		sum += (double)lat[i];
	if (o->json)
		printf("{\"tool\": \"wakeup_pingpong\", \"mode\": \"%s\", \"cpus\": \"%s\", "
		       "\"rounds\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"delay_us\": %.1f, "
		       "\"min_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, \"mean_us\": %.3f, "
		       "\"max_us\": %.3f}\n", o->poll_mode ? "poll" : "read", cpus, o->rounds, n,
		       (double)o->delay_ns / 1000.0,
		       (double)lat[0] / 1000.0, pp_pct(lat, n, 0.5), pp_pct(lat, n, 0.99),
		       sum / (double)n / 1000.0, (double)lat[n - 1] / 1000.0);
	else
		printf("eventfd ping-pong (%s, cpus %s, delay %.1f us): %" PRIu64 " one-way wake-ups: "
		       "p50 %.1f us, p99 %.1f us (min %.1f, mean %.1f, max %.1f)\n",
		       o->poll_mode ? "poll" : "read", cpus, (double)o->delay_ns / 1000.0, n,
		       pp_pct(lat, n, 0.5), pp_pct(lat, n, 0.99), (double)lat[0] / 1000.0,
		       sum / (double)n / 1000.0, (double)lat[n - 1] / 1000.0);
}

static const char usage[] =
	"usage: wakeup_pingpong [--rounds N] [--warmup W] [--mode poll|read] [--delay-us D]\n"
	"                       [--cpus A,B] [--json]\n";

static int pp_parse(int argc, char **argv, struct pp_opts *o)
{
	static const struct option lo[] = {
		{"rounds", required_argument, NULL, 'n'}, {"warmup", required_argument, NULL, 'w'},
		{"mode", required_argument, NULL, 'm'}, {"delay-us", required_argument, NULL, 'd'},
		{"cpus", required_argument, NULL, 'c'}, {"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0}};
	int c;
	char *end;

	*o = (struct pp_opts){.rounds = 20000, .warmup = 1000, .cpu = {-1, -1}, .poll_mode = true};
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		errno = 0;
		switch (c) {
		case 'n': o->rounds = strtoull(optarg, &end, 10); break;
		case 'w': o->warmup = strtoull(optarg, &end, 10); break;
		case 'd': o->delay_ns = (uint64_t)(strtod(optarg, &end) * 1000.0); break;
		case 'j': o->json = true; continue;
		case 'c':
			if (sscanf(optarg, "%d,%d%c", &o->cpu[0], &o->cpu[1], &(char){0}) != 2 ||
			    o->cpu[0] < 0 || o->cpu[1] < 0 || o->cpu[0] >= CPU_SETSIZE ||
			    o->cpu[1] >= CPU_SETSIZE) {
				fprintf(stderr, "wakeup_pingpong: --cpus '%s': expected A,B (CPU numbers)"
					"\n%s", optarg, usage);
				return -1;
			}
			continue;
		case 'm':
			if (strcmp(optarg, "poll") && strcmp(optarg, "read")) {
				fprintf(stderr, "wakeup_pingpong: --mode '%s': expected poll or read\n%s",
					optarg, usage);
				return -1;
			}
			o->poll_mode = !strcmp(optarg, "poll");
			continue;
		default: fputs(usage, stderr); return -1;
		}
		if (errno || end == optarg || *end || optarg[0] == '-') {
			fprintf(stderr, "wakeup_pingpong: '%s': expected a non-negative number\n%s",
				optarg, usage);
			return -1;
		}
	}
	if (optind < argc || o->rounds == 0 || o->rounds > 100000000) {
		fprintf(stderr, "wakeup_pingpong: rounds must be 1..100000000, no other arguments\n%s",
			usage);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct pp_opts o;
	int efd[2], st, r;

	if (pp_parse(argc, argv, &o) < 0 || pp_check_cpus(&o) < 0)
		return 2;
	struct sigaction sa = {.sa_handler = pp_on_sigchld}; /* no SA_RESTART */
	sigaction(SIGCHLD, &sa, NULL);
	size_t bytes = sizeof(struct pp_shared) + 2 * o.rounds * sizeof(uint64_t);
	struct pp_shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				    -1, 0);
	int fl = o.poll_mode ? EFD_NONBLOCK : 0;
	efd[0] = eventfd(0, EFD_CLOEXEC | fl);
	efd[1] = eventfd(0, EFD_CLOEXEC | fl);
	if (sh == MAP_FAILED || efd[0] < 0 || efd[1] < 0) {
		fprintf(stderr, "wakeup_pingpong: setting up %zu bytes and two eventfds: %s\n", bytes,
			strerror(errno));
		return 1;
	}
	memset(sh->lat, 0, 2 * o.rounds * sizeof(uint64_t)); /* fault it in before timing */
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "wakeup_pingpong: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0)
		_exit(pp_side(sh, &o, 1, efd) < 0 ? 1 : 0);
	r = pp_side(sh, &o, 0, efd);
	if (r < 0 && r != -ECHILD) {
		fprintf(stderr, "wakeup_pingpong: eventfd: %s\n", strerror(-r));
		kill(pid, SIGKILL);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "wakeup_pingpong: the other side failed\n");
		return 1;
	}
	pp_report(&o, sh->lat);
	return 0;
}
