/*
 * cudrv_fatbin.c: the conversion kernels embedded in the library that
 * launches them (libfeedclient, feedd).
 *
 * Owns: the bytes of kernels/convert_fatbin.cu compiled by `nvcc --fatbin`
 * (cubins for the data-centre architectures plus PTX), pulled in with the
 * assembler's .incbin when the build has nvcc (FEED_KERNELS_FATBIN is the
 * file's path; CMake makes this object depend on it), so the driver loads
 * them with cuModuleLoadData and no file is looked up at run time. Without
 * CUDA there is no image and the GPU path says "built without CUDA kernels".
 */
#include "cudrv.h"

#ifdef FEED_KERNELS_FATBIN
/* A fatbin must be 8-byte aligned; hidden: not exported */
__asm__(".pushsection .rodata.feed_fatbin,\"a\",@progbits\n"
	".balign 16\n"
	".globl cudrv_fatbin_image\n"
	".hidden cudrv_fatbin_image\n"
	"cudrv_fatbin_image:\n"
	".incbin \"" FEED_KERNELS_FATBIN "\"\n"
	".popsection\n");
extern const unsigned char cudrv_fatbin_image[] __attribute__((visibility("hidden")));

const void *cudrv_fatbin(void)
{
	return cudrv_fatbin_image;
}
#else
const void *cudrv_fatbin(void)
{
	return NULL;
}
#endif
