/*
 * convert_fatbin.cu: the conversion kernels under plain C names, for
 * libfeedclient, which loads them through the driver API
 * (cuModuleLoadData + cuModuleGetFunction) from a fatbin built by
 * `nvcc --fatbin` (cubins for CMAKE_CUDA_ARCHITECTURES plus PTX) and
 * embedded in the library (client/client_fatbin.c). No host code: the
 * client launches these with cuLaunchKernel, parameters in this order.
 *
 * The loops are convert_kernels.cuh's and mix_kernels.cuh's, the element
 * functions convert.h's and mix.h's: the same bits as the runtime
 * launchers of convert.cu and mix.cu and the CPU twins.
 */
#include "convert_kernels.cuh"
#include "mix_kernels.cuh"

extern "C" {

__global__ void feed_k_images_f32(struct feed_convert cv, const uint8_t *src, size_t n,
				  const uint8_t *flip, float *dst)
{
	feed_k_images<float, feed_convert_px_f32>(cv, src, n, flip, dst);
}

__global__ void feed_k_images_f16(struct feed_convert cv, const uint8_t *src, size_t n,
				  const uint8_t *flip, uint16_t *dst)
{
	feed_k_images<uint16_t, feed_convert_px_f16>(cv, src, n, flip, dst);
}

__global__ void feed_k_images_bf16(struct feed_convert cv, const uint8_t *src, size_t n,
				   const uint8_t *flip, uint16_t *dst)
{
	feed_k_images<uint16_t, feed_convert_px_bf16>(cv, src, n, flip, dst);
}

__global__ void feed_k_tokens_u16(const uint16_t *src, size_t n, int64_t *dst)
{
	feed_k_tokens<uint16_t, feed_convert_tok_u16>(src, n, dst);
}

__global__ void feed_k_tokens_u32(const uint32_t *src, size_t n, int64_t *dst)
{
	feed_k_tokens<uint32_t, feed_convert_tok_u32>(src, n, dst);
}

/* The mixes of mix.h, in place on n converted images (cv's dtype). */
__global__ void feed_k_mix_f32(struct feed_convert cv, struct feed_mix_args a, size_t n,
			       float *data)
{
	feed_k_mix<float, feed_mix_f32>(cv, a, n, data);
}

__global__ void feed_k_mix_f16(struct feed_convert cv, struct feed_mix_args a, size_t n,
			       uint16_t *data)
{
	feed_k_mix<uint16_t, feed_mix_f16>(cv, a, n, data);
}

__global__ void feed_k_mix_bf16(struct feed_convert cv, struct feed_mix_args a, size_t n,
				uint16_t *data)
{
	feed_k_mix<uint16_t, feed_mix_bf16>(cv, a, n, data);
}

/* Soft labels [n, a.num_classes] fp32 from n labels of type t. */
__global__ void feed_k_mix_labels(struct feed_mix_args a, const void *labels, uint32_t t,
				  size_t n, float *dst)
{
	feed_k_mix_labels_loop(a, labels, t, n, dst);
}

} // extern "C"
