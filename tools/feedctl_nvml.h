/*
 * feedctl_nvml.h: the GPU utilisation `feedctl top` shows beside each
 * client's data wait, through NVML loaded at run time: dlopen of
 * FEED_NVML_LIBRARY when set (tests point it at tests/gpu_double's
 * fake_nvml), else libnvidia-ml.so.1. feedctl links no NVML: on a node
 * without the driver every figure is absent ("-", null in JSON).
 *
 * Single-threaded (feedctl's one thread). Never prints: top says why
 * NVML is absent from the reason this module gives.
 */
#ifndef FEEDCTL_NVML_H
#define FEEDCTL_NVML_H

#include <stddef.h>
#include <sys/types.h>

struct nvml;

/* Loads and initialises NVML. 0 with *ret, or -ENOENT (no library),
 * -ENOSYS (a symbol missing), -EIO (nvmlInit failed) with why filled. */
int nvml_open(struct nvml **ret, char *why, size_t cap);

/* Reads every GPU's utilisation and compute processes once: what
 * nvml_pid_util() answers until the next refresh. 0 or -ENOMEM. */
int nvml_refresh(struct nvml *n);

/* The GPU utilisation (percent, 0..100) of the device pid runs compute
 * work on, as of the last refresh (the busiest when it has several);
 * *ret_index: that device's NVML index. -ENOENT when pid runs on none. */
int nvml_pid_util(const struct nvml *n, pid_t pid, unsigned *ret_pct, unsigned *ret_index);

/* nvmlShutdown; the library stays loaded. Accepts NULL. */
void nvml_close(struct nvml *n);

#endif
