/*
 * check_convert_gpu.cu: the kernels of kernels/convert.cu against their CPU
 * twins, bit for bit, on a real device: every dtype and layout, flip on some
 * samples, several mean/std, odd sizes; and the token kernels.
 *
 * Exits 77 (ctest: skipped) when `nvidia-smi -L` lists no GPU; any CUDA
 * error after that is a failure. Not a Check suite: Check's fork per test
 * and a CUDA context do not mix.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "gpu_listed.h"

static int failures;

#define CUDA_OK(call)                                                                      \
	do {                                                                               \
		cudaError_t e_ = (call);                                                   \
		if (e_ != cudaSuccess) {                                                   \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
				cudaGetErrorString(e_));                                   \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

static void check_images(uint32_t h, uint32_t w, uint32_t c, int dtype, int layout,
			 const float *mean, const float *std)
{
	enum { N = 5 };
	struct feed_convert cv;
	if (feed_convert_init(&cv, h, w, c, (enum feed_convert_dtype)dtype,
			      (enum feed_convert_layout)layout, mean, std)) {
		fprintf(stderr, "feed_convert_init failed\n");
		exit(1);
	}
	size_t in = (size_t)h * w * c * N, out = feed_convert_sample_bytes(&cv) * N;
	uint8_t *img = (uint8_t *)malloc(in), flip[N] = { 0, 1, 1, 0, 1 };
	unsigned char *twin = (unsigned char *)malloc(out), *got = (unsigned char *)malloc(out);
	for (size_t i = 0; i < in; i++)
		img[i] = (uint8_t)(i * 131 + (i >> 7));
	feed_convert_images_cpu(&cv, img, N, flip, twin);

	uint8_t *d_img, *d_flip;
	void *d_out;
	cudaStream_t st;
	CUDA_OK(cudaStreamCreate(&st));
	CUDA_OK(cudaMalloc((void **)&d_img, in));
	CUDA_OK(cudaMalloc((void **)&d_flip, N));
	CUDA_OK(cudaMalloc(&d_out, out));
	CUDA_OK(cudaMemcpy(d_img, img, in, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(d_flip, flip, N, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemset(d_out, 0xff, out));
	int r = feed_convert_images_cuda(&cv, d_img, N, d_flip, d_out, st);
	if (r) {
		fprintf(stderr, "feed_convert_images_cuda: %d\n", r);
		exit(1);
	}
	CUDA_OK(cudaStreamSynchronize(st));
	CUDA_OK(cudaMemcpy(got, d_out, out, cudaMemcpyDeviceToHost));
	if (memcmp(got, twin, out)) {
		size_t i = 0;
		while (got[i] == twin[i])
			i++;
		fprintf(stderr, "FAIL %ux%ux%u dtype %d layout %d: first differing byte %zu\n", h, w,
			c, dtype, layout, i);
		failures++;
	}
	cudaFree(d_img);
	cudaFree(d_flip);
	cudaFree(d_out);
	cudaStreamDestroy(st);
	free(img);
	free(twin);
	free(got);
}

static void check_tokens(void)
{
	enum { N = 100003 };
	uint16_t *a = (uint16_t *)malloc(N * 2);
	uint32_t *b = (uint32_t *)malloc(N * 4);
	int64_t *ta = (int64_t *)malloc(N * 8), *tb = (int64_t *)malloc(N * 8), *got = (int64_t *)malloc(N * 8);
	for (uint32_t i = 0; i < N; i++) {
		a[i] = (uint16_t)(i * 40503u);
		b[i] = i * 2654435761u;
	}
	feed_convert_tokens_u16_cpu(a, N, ta);
	feed_convert_tokens_u32_cpu(b, N, tb);
	uint16_t *da;
	uint32_t *db;
	int64_t *dout;
	CUDA_OK(cudaMalloc((void **)&da, N * 2));
	CUDA_OK(cudaMalloc((void **)&db, N * 4));
	CUDA_OK(cudaMalloc((void **)&dout, N * 8));
	CUDA_OK(cudaMemcpy(da, a, N * 2, cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(db, b, N * 4, cudaMemcpyHostToDevice));
	if (feed_convert_tokens_u16_cuda(da, N, dout, NULL))
		exit(1);
	CUDA_OK(cudaMemcpy(got, dout, N * 8, cudaMemcpyDeviceToHost));
	if (memcmp(got, ta, N * 8)) {
		fprintf(stderr, "FAIL tokens u16\n");
		failures++;
	}
	if (feed_convert_tokens_u32_cuda(db, N, dout, NULL))
		exit(1);
	CUDA_OK(cudaMemcpy(got, dout, N * 8, cudaMemcpyDeviceToHost));
	if (memcmp(got, tb, N * 8)) {
		fprintf(stderr, "FAIL tokens u32\n");
		failures++;
	}
	cudaFree(da);
	cudaFree(db);
	cudaFree(dout);
	free(a);
	free(b);
	free(ta);
	free(tb);
	free(got);
}

int main(void)
{
	if (!gpu_listed()) {
		printf("skipped: nvidia-smi -L lists no GPU\n");
		return SKIP;
	}
	static const float mean[][4] = { { 0.485f, 0.456f, 0.406f, 0.5f }, { 0, 0, 0, 0 },
					 { 0.5f, -3.0f, 100.0f, 1.0f } };
	static const float std[][4] = { { 0.229f, 0.224f, 0.225f, 0.5f }, { 1, 1, 1, 1 },
					 { 1e-3f, 7.0f, 0.01f, 1e-6f } };
	for (int p = 0; p < 3; p++)
		for (uint32_t c = 1; c <= 4; c++)
			for (int d = 0; d < 3; d++)
				for (int l = 0; l < 2; l++)
				{
					/* odd h*w: a pixel a thread; even h*w, odd w:
					 * pairs that wrap to the next row (NCHW) */
					check_images(13, 17, c, d, l, mean[p], std[p]);
					check_images(12, 17, c, d, l, mean[p], std[p]);
				}
	check_images(224, 224, 3, FEED_CONVERT_BF16, FEED_CONVERT_NCHW, mean[0], std[0]);
	check_tokens();
	printf("%s\n", failures ? "FAILED" : "kernels equal their twins");
	return failures ? 1 : 0;
}
