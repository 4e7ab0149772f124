/*
 * gpu_convert: the conversion kernels' throughput as a share of the
 * device's memory bandwidth (issue 14's target: >= 80%).
 *
 *   gpu_convert [--images N] [--size S]   (defaults: 256 images of 224x224x3)
 *
 * Converts N u8 HWC images of SxSx3 to fp32, fp16 and bf16 NCHW with
 * ImageNet's mean/std through kernels/convert.cu (the launchers the daemon
 * and tests use; libfeedclient embeds the same loops), timed with CUDA
 * events over repeated launches after a warm-up. Bytes moved per launch:
 * the u8 read plus the output written. Printed next to two bandwidths:
 * the device's theoretical peak (2 x memory clock x bus width) and a
 * device-to-device cudaMemcpy of the same output size (the practical
 * peak). Also prints, on paper, bytes over PCIe per pixel for u8 shipped
 * and converted here (1) against fp32 prepared on the CPU (4).
 *
 * Without a GPU (or driver) it says "no GPU" with the runtime's reason and
 * exits 0, so scripts can run it anywhere.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "convert.h"

#define REPS 50

static int check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "gpu_convert: %s: %s\n", what, cudaGetErrorString(e));
	return -1;
}

/* Milliseconds per run of fn over REPS runs, after one warm-up. */
template <typename F>
static float time_ms(F fn)
{
	cudaEvent_t a, b;
	float ms = 0;
	cudaEventCreate(&a);
	cudaEventCreate(&b);
	fn();
	cudaEventRecord(a);
	for (int i = 0; i < REPS; i++)
		fn();
	cudaEventRecord(b);
	cudaEventSynchronize(b);
	cudaEventElapsedTime(&ms, a, b);
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms / REPS;
}

int main(int argc, char **argv)
{
	size_t n = 256, s = 224;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--images"))
			n = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--size"))
			s = strtoull(argv[i + 1], NULL, 10);
	}
	printf("PCIe bytes per pixel (on paper): 1 for u8 converted on the GPU, 4 for fp32 "
	       "prepared on the CPU (2 for fp16/bf16)\n");
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		printf("no GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
		return 0;
	}
	cudaDeviceProp prop;
	int clock_khz = 0, bus_bits = 0;
	cudaGetDeviceProperties(&prop, 0);
	cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
	cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
	double peak = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0); /* bytes/s, DDR */

	size_t px = n * s * s * 3;
	uint8_t *src;
	void *dst, *copy;
	if (check(cudaMalloc((void **)&src, px), "cudaMalloc") ||
	    check(cudaMalloc(&dst, px * 4), "cudaMalloc") ||
	    check(cudaMalloc(&copy, px * 4), "cudaMalloc"))
		return 1;
	{
		/* varied pixels, not a constant: a constant input can time faster
		 * than real data and hides unwritten outputs */
		uint8_t *h = (uint8_t *)malloc(px);
		if (!h)
			return 1;
		uint32_t x = 2463534242u;
		for (size_t i = 0; i < px; i++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			h[i] = (uint8_t)x;
		}
		int rc = check(cudaMemcpy(src, h, px, cudaMemcpyHostToDevice), "cudaMemcpy");
		free(h);
		if (rc)
			return 1;
	}
	const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
	printf("device: %s (cc %d.%d), theoretical memory bandwidth %.0f GB/s\n", prop.name,
	       prop.major, prop.minor, peak / 1e9);
	printf("%zu images of %zux%zux3 u8 -> NCHW, ImageNet mean/std, %d runs each\n", n, s, s,
	       REPS);
	static const struct {
		enum feed_convert_dtype dt;
		const char *name;
		size_t bytes;
	} kinds[] = {{FEED_CONVERT_F32, "fp32", 4}, {FEED_CONVERT_F16, "fp16", 2},
		     {FEED_CONVERT_BF16, "bf16", 2}};
	for (const auto &k : kinds) {
		struct feed_convert cv;
		if (feed_convert_init(&cv, (uint32_t)s, (uint32_t)s, 3, k.dt, FEED_CONVERT_NCHW, mean,
				      sd) < 0)
			return 1;
		int rc = 0;
		float ms = time_ms([&] { rc |= feed_convert_images_cuda(&cv, src, n, NULL, dst, 0); });
		if (rc || check(cudaGetLastError(), "kernel"))
			return 1;
		size_t out = px * k.bytes;
		float cms = time_ms([&] { cudaMemcpyAsync(copy, dst, out, cudaMemcpyDeviceToDevice); });
		double moved = (double)(px + out), rate = moved / (ms / 1e3);
		double crate = 2.0 * out / (cms / 1e3);
		printf("%s: %.3f ms, %.0f GB/s moved = %.0f%% of theoretical, %.0f%% of a D2D "
		       "memcpy (%.0f GB/s)\n",
		       k.name, ms, rate / 1e9, 100 * rate / peak, 100 * rate / crate, crate / 1e9);
	}
	cudaFree(src);
	cudaFree(dst);
	cudaFree(copy);
	return 0;
}
