/*
 * convert_fatbin.cu: the conversion kernels under plain C names, for
 * libfeedclient, which loads them through the driver API
 * (cuModuleLoadData + cuModuleGetFunction) from a fatbin built by
 * `nvcc --fatbin` (cubins for CMAKE_CUDA_ARCHITECTURES plus PTX) and
 * embedded in the library (client/client_fatbin.c). No host code: the
 * client launches these with cuLaunchKernel, parameters in this order.
 *
 * The loops are convert_kernels.cuh's, the element functions convert.h's:
 * the same bits as the runtime launchers of convert.cu and the CPU twins.
 */
#include "convert_kernels.cuh"

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

} // extern "C"
