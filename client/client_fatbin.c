/*
 * client_fatbin.c: the conversion kernels embedded in libfeedclient.
 *
 * Owns: the bytes of kernels/convert_fatbin.cu compiled by `nvcc --fatbin`
 * (cubins for the data-centre architectures plus PTX), pulled in with the
 * assembler's .incbin when the build has CUDA (FEED_CLIENT_FATBIN is the
 * file's path; CMake makes this object depend on it), so the driver loads
 * them with cuModuleLoadData and no file is looked up at run time. Without
 * CUDA there is no image and the GPU path says "built without CUDA kernels".
 */
#include "client_cuda.h"

#ifdef FEED_CLIENT_FATBIN
/* A fatbin must be 8-byte aligned; hidden: not exported */
__asm__(".pushsection .rodata.feed_fatbin,\"a\",@progbits\n"
	".balign 16\n"
	".globl cl_fatbin_image\n"
	".hidden cl_fatbin_image\n"
	"cl_fatbin_image:\n"
	".incbin \"" FEED_CLIENT_FATBIN "\"\n"
	".popsection\n");
extern const unsigned char cl_fatbin_image[] __attribute__((visibility("hidden")));

const void *cl_cuda_fatbin(void)
{
	return cl_fatbin_image;
}
#else
const void *cl_cuda_fatbin(void)
{
	return NULL;
}
#endif
