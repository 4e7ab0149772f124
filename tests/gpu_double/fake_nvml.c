/*
 * fake_nvml.c: a test double of the NVML entry points `feedctl top` loads
 * (tools/feedctl_nvml.c), for tests on machines without a GPU. Point
 * FEED_NVML_LIBRARY at this library; what it reports comes from the
 * environment, read at nvmlInit:
 *
 *   FAKE_NVML_GPUS   utilisation percent of each GPU, comma-separated
 *                    ("87,12": two GPUs); unset: one GPU at 0%
 *   FAKE_NVML_PROCS  compute processes, "PID@GPU,..." ("4242@1"); the PID
 *                    "self" is the process that loaded the library (feedd's
 *                    own GPU memory), each process holding 1 GiB
 *   FAKE_NVML_INIT   an NVML error code nvmlInit_v2 returns instead of 0
 *
 * It does nothing else a driver does: no devices beyond these, no memory
 * figure but that 1 GiB. Single-threaded use, as feedctl's and feedd's
 * metrics thread's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define FAKE_MAX 16

typedef int nvmlReturn_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

/* nvmlUtilization_t and nvmlProcessInfo_t (the _v2/_v3 layout). */
typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* A device handle is a pointer to its entry here. */
struct fake_gpu {
	unsigned util;
	unsigned nprocs;
	unsigned pids[FAKE_MAX];
};
typedef struct fake_gpu *nvmlDevice_t;

static struct fake_gpu gpus[FAKE_MAX];
static unsigned ngpus;
static int inited;

static void fake_read_env(void)
{
	const char *g = getenv("FAKE_NVML_GPUS"), *p = getenv("FAKE_NVML_PROCS");
	char *end;

	memset(gpus, 0, sizeof(gpus));
	ngpus = 1;
	if (g && *g)
		for (ngpus = 0; *g && ngpus < FAKE_MAX; g = *end ? end + 1 : end) {
			gpus[ngpus++].util = (unsigned)strtoul(g, &end, 10);
			if (end == g)
				break;
		}
	while (p && *p) {
		unsigned long pid, gpu;
		if (!strncmp(p, "self", 4)) {
			pid = (unsigned long)getpid();
			end = (char *)p + 4;
		} else {
			pid = strtoul(p, &end, 10);
		}
		if (*end != '@')
			break;
		gpu = strtoul(end + 1, &end, 10);
		if (gpu < ngpus && gpus[gpu].nprocs < FAKE_MAX)
			gpus[gpu].pids[gpus[gpu].nprocs++] = (unsigned)pid;
		p = *end ? end + 1 : end;
	}
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	const char *fail = getenv("FAKE_NVML_INIT");

	if (fail && atoi(fail))
		return atoi(fail);
	fake_read_env();
	inited = 1;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	inited = 0;
	return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	return r == NVML_SUCCESS ? "Success" : "fake NVML error";
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!inited)
		return NVML_ERROR_UNINITIALIZED;
	*count = ngpus;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *ret)
{
	if (!inited)
		return NVML_ERROR_UNINITIALIZED;
	if (i >= ngpus)
		return NVML_ERROR_INVALID_ARGUMENT;
	*ret = &gpus[i];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *ret)
{
	if (!inited || !d)
		return NVML_ERROR_UNINITIALIZED;
	ret->gpu = d->util;
	ret->memory = d->util / 2;
	return NVML_SUCCESS;
}

/* As the driver: *count in, the room of infos; out, the processes. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
							    nvmlProcessInfo_t *infos)
{
	if (!inited || !d)
		return NVML_ERROR_UNINITIALIZED;
	unsigned room = *count;
	*count = d->nprocs;
	if (room < d->nprocs)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	for (unsigned k = 0; k < d->nprocs; k++)
		infos[k] = (nvmlProcessInfo_t){.pid = d->pids[k], .usedGpuMemory = 1ull << 30};
	return NVML_SUCCESS;
}
