/*
 * check_convert_gpu.cu: the kernels of kernels/convert.cu and kernels/mix.cu
 * against their CPU twins, bit for bit, on a real device: every dtype and
 * layout, flip on some samples, several mean/std, odd sizes; the token
 * kernels; mixup and cutmix in place on converted batches (every dtype
 * and layout, drawn lambdas and boxes, batches of 1 to 67 samples) and the
 * soft labels of every label type.
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
#include "mix.h"

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

/* ramp: pixel x of each row holds x & 255 in every channel, so a row of 256
 * takes every u8 input through every channel's scale and bias; else a
 * pattern that mixes neighbouring bytes. */
static void check_images_fill(uint32_t h, uint32_t w, uint32_t c, int dtype, int layout,
			      const float *mean, const float *std, int ramp)
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
		img[i] = ramp ? (uint8_t)((i / c) % w) : (uint8_t)(i * 131 + (i >> 7));
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

static void check_images(uint32_t h, uint32_t w, uint32_t c, int dtype, int layout,
			 const float *mean, const float *std)
{
	check_images_fill(h, w, c, dtype, layout, mean, std, 0);
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

/* A converted batch of n samples (the twin's), mixed as d says on the
 * device and by the twin: the same bytes. */
static void check_mix(uint32_t h, uint32_t w, uint32_t c, int dtype, int layout, size_t n,
		      const struct feed_mix_draw *d)
{
	struct feed_convert cv;
	struct feed_mix_args a;
	static const float mean[4] = { 0.485f, 0.456f, 0.406f, 0.5f }; /* both signs */
	static const float sd[4] = { 0.229f, 0.224f, 0.225f, 0.5f };
	if (feed_convert_init(&cv, h, w, c, (enum feed_convert_dtype)dtype,
			      (enum feed_convert_layout)layout, mean, sd) ||
	    feed_mix_args_init(&a, d, h, w, 10, 0.1)) {
		fprintf(stderr, "feed_convert_init / feed_mix_args_init failed\n");
		exit(1);
	}
	size_t in = (size_t)h * w * c * n, out = feed_convert_sample_bytes(&cv) * n;
	uint8_t *img = (uint8_t *)malloc(in);
	unsigned char *twin = (unsigned char *)malloc(out), *got = (unsigned char *)malloc(out);
	for (size_t i = 0; i < in; i++)
		img[i] = (uint8_t)(i * 197 + (i >> 5));
	feed_convert_images_cpu(&cv, img, n, NULL, twin);
	void *d_data;
	CUDA_OK(cudaMalloc(&d_data, out));
	CUDA_OK(cudaMemcpy(d_data, twin, out, cudaMemcpyHostToDevice));
	feed_mix_images_cpu(&cv, &a, n, twin);
	int r = feed_mix_images_cuda(&cv, &a, n, d_data, NULL);
	if (r) {
		fprintf(stderr, "feed_mix_images_cuda: %d\n", r);
		exit(1);
	}
	CUDA_OK(cudaDeviceSynchronize());
	CUDA_OK(cudaMemcpy(got, d_data, out, cudaMemcpyDeviceToHost));
	if (memcmp(got, twin, out)) {
		size_t i = 0;
		while (got[i] == twin[i])
			i++;
		fprintf(stderr, "FAIL mix op %u lam %.17g box %u,%u-%u,%u %ux%ux%u dtype %d layout %d "
			"n %zu: first differing byte %zu\n", d->op, d->lam, d->x1, d->y1, d->x2, d->y2,
			h, w, c, dtype, layout, n, i);
		failures++;
	}
	cudaFree(d_data);
	free(img);
	free(twin);
	free(got);
}

static void check_mix_labels(void)
{
	enum { N = 257, CLS = 1000 };
	struct feed_mix_draw d = { FEED_MIX_OP_MIXUP, 0.6180339887498949, 0, 0, 0, 0 };
	int64_t lab[N];
	float *twin = (float *)malloc(sizeof(float) * N * CLS), *got = (float *)malloc(sizeof(float) * N * CLS);
	for (size_t i = 0; i < N; i++)
		lab[i] = (int64_t)((i * 7919) % 128); /* fits every type */
	for (uint32_t op = FEED_MIX_OP_NONE; op <= FEED_MIX_OP_CUTMIX; op++)
		for (uint32_t t = 0; t <= FEED_MIX_LABEL_I64; t++) {
			static const size_t size[] = { 1, 1, 2, 2, 4, 4, 8, 8 };
			unsigned char typed[N * 8];
			for (size_t i = 0; i < N; i++)
				memcpy(typed + i * size[t], &lab[i], size[t]); /* little-endian */
			struct feed_mix_args a;
			d.op = op;
			if (feed_mix_args_init(&a, &d, 1, 1, CLS, 0.1))
				exit(1);
			void *d_lab;
			float *d_out;
			CUDA_OK(cudaMalloc(&d_lab, N * 8));
			CUDA_OK(cudaMalloc((void **)&d_out, sizeof(float) * N * CLS));
			CUDA_OK(cudaMemcpy(d_lab, typed, N * size[t], cudaMemcpyHostToDevice));
			if (feed_mix_labels_cpu(&a, typed, t, N, twin) ||
			    feed_mix_labels_cuda(&a, d_lab, t, N, d_out, NULL))
				exit(1);
			CUDA_OK(cudaMemcpy(got, d_out, sizeof(float) * N * CLS, cudaMemcpyDeviceToHost));
			if (memcmp(got, twin, sizeof(float) * N * CLS)) {
				fprintf(stderr, "FAIL soft labels op %u type %u\n", op, t);
				failures++;
			}
			cudaFree(d_lab);
			cudaFree(d_out);
		}
	free(twin);
	free(got);
}

static void check_mixes(void)
{
	static const size_t ns[] = { 1, 2, 5, 67 };
	for (int dtype = 0; dtype < 3; dtype++)
		for (int layout = 0; layout < 2; layout++)
			for (size_t k = 0; k < 4; k++) {
				/* drawn as a stream would draw them: mixup and cutmix */
				for (uint64_t batch = 0; batch < 6; batch++) {
					struct feed_mix_draw d;
					feed_mix_draw_batch(0.2, 1.0, 0.5, 1234, 1, batch, 13, 17, &d);
					check_mix(13, 17, 3, dtype, layout, ns[k], &d);
				}
				struct feed_mix_draw whole = { FEED_MIX_OP_CUTMIX, 0.0, 0, 0, 17, 13 };
				check_mix(13, 17, 3, dtype, layout, ns[k], &whole);
				struct feed_mix_draw edge = { FEED_MIX_OP_MIXUP, 1e-7, 0, 0, 0, 0 };
				check_mix(13, 17, 1, dtype, layout, ns[k], &edge);
			}
	struct feed_mix_draw big;
	feed_mix_draw_batch(0.0, 1.0, 0.5, 5, 0, 3, 224, 224, &big);
	check_mix(224, 224, 3, FEED_CONVERT_BF16, FEED_CONVERT_NCHW, 32, &big);
	struct feed_mix_draw mixup = { FEED_MIX_OP_MIXUP, 0.3, 0, 0, 0, 0 };
	check_mix(224, 224, 3, FEED_CONVERT_F16, FEED_CONVERT_NHWC, 16, &mixup);
	check_mix_labels();
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
					/* width a multiple of 4: quads */
					check_images(5, 16, c, d, l, mean[p], std[p]);
					/* every u8 input through every channel: the
					 * device's own fp16 / bf16 rounding against the
					 * twin's bit arithmetic */
					check_images_fill(1, 256, c, d, l, mean[p], std[p], 1);
				}
	check_images(224, 224, 3, FEED_CONVERT_BF16, FEED_CONVERT_NCHW, mean[0], std[0]);
	check_tokens();
	check_mixes();
	printf("%s\n", failures ? "FAILED" : "kernels equal their twins");
	return failures ? 1 : 0;
}
