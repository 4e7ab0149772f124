/*
 * metrics_process.c: the process_* figures of feedd itself (see
 * metrics_process.h). Loop thread; small reads of /proc and cgroupfs.
 */
#include "metrics_process.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The line of text that starts with key: its number (kB), in bytes. */
static bool mp_status_kb(const char *text, const char *key, uint64_t *ret)
{
	const char *p = strstr(text, key);

	if (!p || (p != text && p[-1] != '\n'))
		return false;
	*ret = strtoull(p + strlen(key), NULL, 10) * 1024u;
	return true;
}

static size_t mp_slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return 0;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n;
}

static void mp_memory(struct met_process *m)
{
	char buf[4096];
	unsigned long long vm, rss;
	uint64_t anon, shmem;
	long page = sysconf(_SC_PAGESIZE);

	if (mp_slurp("/proc/self/statm", buf, sizeof(buf)) &&
	    sscanf(buf, "%llu %llu", &vm, &rss) == 2 && page > 0) {
		m->vm_bytes = vm * (uint64_t)page;
		m->rss_bytes = rss * (uint64_t)page;
		m->has_rss = true;
	}
	if (mp_slurp("/proc/self/status", buf, sizeof(buf)) &&
	    mp_status_kb(buf, "RssAnon:", &anon) && mp_status_kb(buf, "RssShmem:", &shmem)) {
		m->anon_shmem_bytes = anon + shmem;
		m->has_anon = true;
	}
}

/* Start time: field 22 of /proc/self/stat (ticks after boot) + btime. */
static void mp_start(struct met_process *m)
{
	char buf[4096], *p;
	unsigned long long ticks = 0, btime = 0;
	long hz = sysconf(_SC_CLK_TCK);

	if (!mp_slurp("/proc/self/stat", buf, sizeof(buf)) || !(p = strrchr(buf, ')')))
		return;
	/* after the name: field 3 (state) is first; 22 is the 20th from there */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
		   "%*d %*d %llu", &ticks) != 1 || hz <= 0)
		return;
	if (!mp_slurp("/proc/stat", buf, sizeof(buf)) || !(p = strstr(buf, "\nbtime ")) ||
	    sscanf(p + 7, "%llu", &btime) != 1)
		return;
	m->start_s = (double)btime + (double)ticks / (double)hz;
	m->has_start = true;
}

static void mp_fds(struct met_process *m)
{
	DIR *dir = opendir("/proc/self/fd");
	struct rlimit rl;
	struct dirent *de;
	uint64_t n = 0;

	if (dir) {
		while ((de = readdir(dir)))
			n += de->d_name[0] != '.';
		closedir(dir);
		m->open_fds = n ? n - 1 : 0;  /* less the directory's own */
		m->has_fds = true;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		m->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

/* The memory limit of our cgroup: v2 ("0::/path"), else v1's memory
 * controller. "max" (or v1's huge number) is no limit. */
static void mp_limit(struct met_process *m)
{
	char buf[4096], path[4200], val[64];
	char *line, *save = NULL;

	if (!mp_slurp("/proc/self/cgroup", buf, sizeof(buf)))
		return;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *rel = NULL, *file = NULL;
		if (!strncmp(line, "0::", 3)) {
			rel = line + 3;
			file = "memory.max";
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", rel, file);
		} else if ((rel = strstr(line, ":memory:"))) {
			rel += 8;
			file = "memory.limit_in_bytes";
			snprintf(path, sizeof(path), "/sys/fs/cgroup/memory%s/%s", rel, file);
		} else {
			continue;
		}
		if (!mp_slurp(path, val, sizeof(val)) || !strncmp(val, "max", 3))
			continue;
		unsigned long long v = strtoull(val, NULL, 10);
		if (v > 0 && v < (1ull << 62)) {  /* v1 says "none" with about 2^63 */
			m->mem_limit_bytes = v;
			m->has_limit = true;
			return;
		}
	}
}

void met_process_read(struct met_process *ret)
{
	struct rusage ru;

	memset(ret, 0, sizeof(*ret));
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		ret->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
			     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	mp_memory(ret);
	mp_start(ret);
	mp_fds(ret);
	mp_limit(ret);
}
