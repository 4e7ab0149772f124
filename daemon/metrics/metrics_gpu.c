/*
 * metrics_gpu.c: feedd's GPU memory per GPU through NVML loaded with
 * dlopen (see metrics_gpu.h). Only the few entry points it needs, with
 * NVML's own types written out (no NVIDIA header at build time).
 */
#include "metrics_gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics_doc.h"

#define MG_MAX_GPUS 64
#define MG_MAX_PROCS 256

/* nvmlProcessInfo_t as the _v3 call fills it. */
struct mg_proc {
	unsigned int pid;
	unsigned long long used;       /* usedGpuMemory; ULLONG_MAX: not available */
	unsigned int gi, ci;
};

struct met_gpu {
	void *lib;
	int (*init)(void);
	int (*shutdown)(void);
	int (*count)(unsigned int *n);
	int (*handle)(unsigned int i, void **dev);
	int (*procs)(void *dev, unsigned int *n, struct mg_proc *infos);
	struct mg_proc infos[MG_MAX_PROCS]; /* the HTTP thread's scratch */
};

static int mg_fail(struct met_gpu *g, char *why, size_t cap, const char *what)
{
	snprintf(why, cap, "%s", what);
	if (g->lib)
		dlclose(g->lib);
	free(g);
	return -ENOENT;
}

int met_gpu_open(struct met_gpu **ret, char *why, size_t cap)
{
	const char *path = getenv("FEED_NVML_LIBRARY");
	struct met_gpu *g = calloc(1, sizeof(*g));
	char msg[512];

	*ret = NULL;
	if (!g)
		return -ENOMEM;
	if (!path || !*path)
		path = "libnvidia-ml.so.1";
	if (!(g->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(msg, sizeof(msg), "%s not loaded: %s", path, dlerror());
		return mg_fail(g, why, cap, msg);
	}
	*(void **)&g->init = dlsym(g->lib, "nvmlInit_v2");
	*(void **)&g->shutdown = dlsym(g->lib, "nvmlShutdown");
	*(void **)&g->count = dlsym(g->lib, "nvmlDeviceGetCount_v2");
	*(void **)&g->handle = dlsym(g->lib, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&g->procs = dlsym(g->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!g->init || !g->shutdown || !g->count || !g->handle || !g->procs) {
		snprintf(msg, sizeof(msg), "%s: lacks an NVML entry point feedd needs", path);
		return mg_fail(g, why, cap, msg);
	}
	int rc = g->init();
	if (rc != 0) {
		snprintf(msg, sizeof(msg), "%s: nvmlInit_v2 failed (NVML error %d)", path, rc);
		return mg_fail(g, why, cap, msg);
	}
	*ret = g;
	return 0;
}

/* This process's memory on device i; 0 when it is not listed there, -1
 * when NVML does not say. */
static long long mg_mine(struct met_gpu *g, unsigned i)
{
	void *dev;
	unsigned n = MG_MAX_PROCS;
	pid_t self = getpid();

	if (g->handle(i, &dev) != 0 || g->procs(dev, &n, g->infos) != 0)
		return -1;
	for (unsigned k = 0; k < n && k < MG_MAX_PROCS; k++)
		if ((pid_t)g->infos[k].pid == self)
			return g->infos[k].used == ~0ull ? -1 : (long long)g->infos[k].used;
	return 0;
}

size_t met_gpu_text(struct met_gpu *g, char *buf, size_t cap)
{
	unsigned n = 0;
	size_t at = 0;
	int w;

	buf[0] = '\0';
	if (!g || g->count(&n) != 0 || n == 0)
		return 0;
	const char *type, *help = met_doc_find("feedd_gpu_memory_bytes", &type);
	w = snprintf(buf, cap, "# HELP feedd_gpu_memory_bytes %s\n# TYPE feedd_gpu_memory_bytes %s\n",
		     help, type);
	if (w < 0 || (size_t)w >= cap)
		return 0;
	at = (size_t)w;
	for (unsigned i = 0; i < n && i < MG_MAX_GPUS; i++) {
		long long v = mg_mine(g, i);
		if (v < 0)
			continue;
		w = snprintf(buf + at, cap - at, "feedd_gpu_memory_bytes{gpu=\"%u\"} %lld\n", i, v);
		if (w < 0 || (size_t)w >= cap - at)
			break;
		at += (size_t)w;
	}
	return at;
}

void met_gpu_close(struct met_gpu *g)
{
	if (!g)
		return;
	g->shutdown();
	dlclose(g->lib);
	free(g);
}
