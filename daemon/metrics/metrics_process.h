/*
 * metrics_process.h: what feedd's own process uses, read from /proc and
 * the kernel the way Prometheus client libraries and node_exporter read
 * theirs (process_* names), plus the memory figure feedd's docs mean
 * (RssAnon + RssShmem) and the cgroup's memory limit it runs under (0:
 * none).
 *
 * Threads: the loop thread, at each scrape. Reads a few small files of
 * /proc and /sys/fs/cgroup (in memory, never a disk): short, never
 * blocking on anything but the kernel.
 */
#ifndef FEEDD_METRICS_PROCESS_H
#define FEEDD_METRICS_PROCESS_H

#include <stdbool.h>
#include <stdint.h>

struct met_process {
	double cpu_s;                  /* user + system CPU time, seconds */
	double start_s;                /* process start, seconds since 1970 */
	uint64_t rss_bytes;            /* resident set (statm) */
	uint64_t vm_bytes;             /* virtual size (statm) */
	uint64_t anon_shmem_bytes;     /* RssAnon + RssShmem (status) */
	uint64_t open_fds;             /* entries of /proc/self/fd */
	uint64_t max_fds;              /* RLIMIT_NOFILE's soft limit */
	uint64_t mem_limit_bytes;      /* the cgroup's memory.max (v2) or
					* memory.limit_in_bytes (v1) */
	bool has_start, has_rss, has_anon, has_fds, has_limit; /* each read */
};

/* Fills *ret with what could be read (the has_* flags say which); never
 * fails as a whole. Loop thread. */
void met_process_read(struct met_process *ret);

#endif
