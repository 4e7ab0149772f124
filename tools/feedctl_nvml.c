/*
 * feedctl_nvml.c: NVML at run time for `feedctl top` (see feedctl_nvml.h).
 * The few NVML types used are declared here from the library's documented
 * C ABI, so no NVIDIA header is needed to build.
 */
#include "feedctl_nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_LIBRARY "libnvidia-ml.so.1"
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_MAX_DEVICES 64
#define NVML_MAX_PROCS 256   /* compute processes read per device */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

/* nvmlUtilization_t: percent of the last sample period busy. */
struct nvml_util {
	unsigned int gpu, memory;
};

/* nvmlProcessInfo_t as the _v2 and _v3 calls fill it. */
struct nvml_proc {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};

struct nvml_api {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, struct nvml_proc *);
	nvmlReturn_t (*util)(nvmlDevice_t, struct nvml_util *);
	const char *(*errstr)(nvmlReturn_t);
};

/* One device as of the last refresh. */
struct nvml_dev {
	int util;                      /* percent, or -1: unknown */
	unsigned nprocs;
	unsigned pids[NVML_MAX_PROCS]; /* its compute processes */
};

struct nvml {
	struct nvml_api api;
	unsigned ndev;
	struct nvml_dev dev[NVML_MAX_DEVICES];
};

static void *nvml_sym(void *lib, const char *const *names)
{
	void *p = NULL;

	for (; *names && !p; names++)
		p = dlsym(lib, *names);
	return p;
}

/* Every entry point, newest version first; the name of the first missing. */
static const char *nvml_resolve(void *lib, struct nvml_api *a)
{
	static const char *const init[] = {"nvmlInit_v2", "nvmlInit", NULL};
	static const char *const shutdown[] = {"nvmlShutdown", NULL};
	static const char *const count[] = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", NULL};
	static const char *const handle[] = {"nvmlDeviceGetHandleByIndex_v2",
					     "nvmlDeviceGetHandleByIndex", NULL};
	static const char *const procs[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
					    "nvmlDeviceGetComputeRunningProcesses_v2", NULL};
	static const char *const util[] = {"nvmlDeviceGetUtilizationRates", NULL};
	static const char *const errstr[] = {"nvmlErrorString", NULL};

	if (!(a->init = (nvmlReturn_t (*)(void))nvml_sym(lib, init)))
		return init[0];
	if (!(a->shutdown = (nvmlReturn_t (*)(void))nvml_sym(lib, shutdown)))
		return shutdown[0];
	if (!(a->count = (nvmlReturn_t (*)(unsigned int *))nvml_sym(lib, count)))
		return count[0];
	if (!(a->handle = (nvmlReturn_t (*)(unsigned int, nvmlDevice_t *))nvml_sym(lib, handle)))
		return handle[0];
	if (!(a->procs = (nvmlReturn_t (*)(nvmlDevice_t, unsigned int *, struct nvml_proc *))
			      nvml_sym(lib, procs)))
		return procs[0];
	if (!(a->util = (nvmlReturn_t (*)(nvmlDevice_t, struct nvml_util *))nvml_sym(lib, util)))
		return util[0];
	a->errstr = (const char *(*)(nvmlReturn_t))nvml_sym(lib, errstr);
	return NULL;
}

int nvml_open(struct nvml **ret, char *why, size_t cap)
{
	const char *path = getenv("FEED_NVML_LIBRARY");
	struct nvml *n;
	const char *missing;

	if (!path || !*path)
		path = NVML_LIBRARY;
	/* LOCAL: its symbols stay out of our namespace; never unloaded */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(why, cap, "%s not loaded (no NVIDIA driver?): %s", path, dlerror());
		return -ENOENT;
	}
	if (!(n = calloc(1, sizeof(*n)))) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	if ((missing = nvml_resolve(lib, &n->api))) {
		snprintf(why, cap, "%s has no %s (driver too old?)", path, missing);
		free(n);
		return -ENOSYS;
	}
	nvmlReturn_t e = n->api.init();
	if (e != NVML_SUCCESS) {
		snprintf(why, cap, "nvmlInit: %s", n->api.errstr ? n->api.errstr(e) : "failed");
		free(n);
		return -EIO;
	}
	*ret = n;
	return 0;
}

/* One device's utilisation and compute processes; a device that does not
 * answer keeps util -1 and no processes. */
static void nvml_read_dev(struct nvml *n, unsigned i, struct nvml_proc *buf)
{
	struct nvml_dev *d = &n->dev[i];
	struct nvml_util u;
	nvmlDevice_t h;
	unsigned int cnt = NVML_MAX_PROCS;

	d->util = -1;
	d->nprocs = 0;
	if (n->api.handle(i, &h) != NVML_SUCCESS)
		return;
	if (n->api.util(h, &u) == NVML_SUCCESS)
		d->util = (int)(u.gpu > 100 ? 100 : u.gpu);
	nvmlReturn_t e = n->api.procs(h, &cnt, buf);
	if (e != NVML_SUCCESS && e != NVML_ERROR_INSUFFICIENT_SIZE)
		return;
	if (cnt > NVML_MAX_PROCS)
		cnt = NVML_MAX_PROCS;  /* the first ones; a node has few */
	for (unsigned k = 0; k < cnt; k++)
		d->pids[k] = buf[k].pid;
	d->nprocs = cnt;
}

int nvml_refresh(struct nvml *n)
{
	struct nvml_proc *buf = calloc(NVML_MAX_PROCS, sizeof(*buf));
	unsigned int count = 0;

	if (!buf)
		return -ENOMEM;
	if (n->api.count(&count) != NVML_SUCCESS)
		count = 0;
	n->ndev = count < NVML_MAX_DEVICES ? count : NVML_MAX_DEVICES;
	for (unsigned i = 0; i < n->ndev; i++)
		nvml_read_dev(n, i, buf);
	free(buf);
	return 0;
}

int nvml_pid_util(const struct nvml *n, pid_t pid, unsigned *ret_pct, unsigned *ret_index)
{
	int best = -1;
	unsigned at = 0;

	for (unsigned i = 0; i < n->ndev; i++)
		for (unsigned k = 0; k < n->dev[i].nprocs; k++)
			if (n->dev[i].pids[k] == (unsigned)pid && n->dev[i].util > best) {
				best = n->dev[i].util;
				at = i;
			}
	if (best < 0)
		return -ENOENT;
	*ret_pct = (unsigned)best;
	*ret_index = at;
	return 0;
}

void nvml_close(struct nvml *n)
{
	if (!n)
		return;
	n->api.shutdown();
	free(n);
}
