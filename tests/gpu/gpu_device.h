/*
 * gpu_device.h: what the C tests of tests/gpu share: whether a GPU is
 * there (gpu_listed.h), a CUDA call checked, and a
 * host function that holds a stream until the test opens a gate (work
 * queued behind it cannot run yet). Header-only: each test is one file.
 */
#ifndef FEED_TESTS_GPU_DEVICE_H
#define FEED_TESTS_GPU_DEVICE_H

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gpu_listed.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

/* Set to 1 to let hold_stream() return. */
static atomic_int gate;

/* cudaLaunchHostFunc(s, hold_stream, NULL): s runs nothing after it until
 * gate is 1 (the host function polls it: a GPU-side wait has no other way
 * to be held from the host). */
static void CUDART_CB hold_stream(void *arg)
{
	(void)arg;
	while (!atomic_load(&gate))
		usleep(1000);
}

#endif
