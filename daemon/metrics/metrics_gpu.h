/*
 * metrics_gpu.h: the GPU memory feedd's own process holds on each GPU
 * (its primary context, the kernels and any device slots), as NVML
 * reports it per process (what nvidia-smi and dcgm-exporter show), for
 * feedd_gpu_memory_bytes{gpu}. NVML is loaded at run time
 * (libnvidia-ml.so.1, or $FEED_NVML_LIBRARY): feedd links no NVIDIA
 * library, and without NVML the family is absent.
 *
 * Threads: met_gpu_open and met_gpu_close on the loop thread (start and
 * stop, when no request runs); met_gpu_text on libmicrohttpd's one thread
 * only, so NVML's calls (milliseconds each) never run on the loop.
 */
#ifndef FEEDD_METRICS_GPU_H
#define FEEDD_METRICS_GPU_H

#include <stddef.h>

struct met_gpu;

/* Loads NVML. 0 with *ret, or -ENOENT with *ret NULL and why (cap bytes)
 * saying why not (no library, or nvmlInit failed). */
int met_gpu_open(struct met_gpu **ret, char *why, size_t cap);

/* The family's text (HELP, TYPE, one line per GPU) into buf, cap bytes,
 * NUL-terminated; its length. 0 when NVML answers nothing. */
size_t met_gpu_text(struct met_gpu *g, char *buf, size_t cap);

/* Accepts NULL. */
void met_gpu_close(struct met_gpu *g);

#endif
