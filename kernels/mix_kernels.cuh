/*
 * mix_kernels.cuh: the device loops of the mixes (mix.h), shared by the
 * runtime-API launchers (mix.cu, for tests/gpu) and the driver-API kernels
 * embedded in libfeedclient and feedd (convert_fatbin.cu), so both walk a
 * batch the same way with the element functions of mix.h.
 *
 * Device code only; grid-stride, any grid size covers any batch.
 */
#ifndef FEED_MIX_KERNELS_CUH
#define FEED_MIX_KERNELS_CUH

#include "mix.h"

/*
 * In place: one thread per element e of a sample, walking every sample of
 * the batch in order with the previous sample's original value in a
 * register (sample 0 starts from sample n - 1's), so no thread reads what
 * another wrote. A warp takes consecutive elements: each sample's reads
 * and writes are contiguous. Cutmix threads outside the box return at
 * once. MIX is feed_mix_f32 / f16 / bf16 on the stored bits.
 */
template <typename T, T (*MIX)(T, T, float, float)>
__device__ inline void feed_k_mix(const struct feed_convert &cv, const struct feed_mix_args &a,
				  size_t n, T *__restrict__ data)
{
	const size_t per = (size_t)cv.h * cv.w * cv.c;
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	if (!n || a.op == FEED_MIX_OP_NONE)
		return;
	for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < per; e += stride) {
		if (a.op == FEED_MIX_OP_CUTMIX && !feed_mix_in_box(&cv, &a, e))
			continue;
		T prev = data[(n - 1) * per + e];
		for (size_t i = 0; i < n; i++) {
			T cur = data[i * per + e];
			data[i * per + e] = a.op == FEED_MIX_OP_CUTMIX ? prev : MIX(cur, prev, a.lam, a.oml);
			prev = cur;
		}
	}
}

/* One thread per soft label element (i, k): row i of n, class k. */
__device__ inline void feed_k_mix_labels_loop(const struct feed_mix_args &a,
					      const void *__restrict__ labels, uint32_t t, size_t n,
					 float *__restrict__ dst)
{
	const size_t C = a.num_classes, total = n * C;
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < total; u += stride) {
		size_t i = u / C;
		uint32_t k = (uint32_t)(u - i * C);
		int64_t own = feed_mix_label_at(labels, t, i);
		int64_t partner = feed_mix_label_at(labels, t, i ? i - 1 : n - 1);
		dst[u] = feed_mix_label(&a, own, partner, k);
	}
}

#endif
