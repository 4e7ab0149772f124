/*
 * augment_draw.c: a random draw (one 32-bit word of the sample's Philox
 * stream) to a parameter, as torch computes it: an integer in [0, n), a
 * probability test, a point of torch.linspace. Every augment file below
 * augment.c uses these, so they stand below them all and call nothing.
 *
 * Threads: pure. Never allocates, blocks or prints. Built with
 * -ffp-contract=off (aug_linspace reproduces torch's float32 arithmetic).
 */
#include <assert.h>
#include <math.h>

#include "augment.h"
#include "augment_pixel.h"

uint32_t aug_randint(uint32_t u, uint32_t n)
{
	assert(n >= 1);
	return (uint32_t)(((uint64_t)u * n) >> 32);
}

bool aug_hflip_decision(uint32_t u, uint32_t p_ppb)
{
	/* u>>8 < p * 2^24  <=>  u>>8 < ceil(p_ppb * 2^24 / 1e9) (integers) */
	uint64_t thr = ((uint64_t)p_ppb * (1u << 24) + PIPE_P_ONE - 1) / PIPE_P_ONE;
	return (uint64_t)(u >> 8) < thr;
}

/* torch.linspace(start, end, n)[k] in float32, from the two ends.
 * PLAIN rounds the product and the sum: torch 2.x's scalar kernel (a CPU
 * without AVX2), and torch 1.13's bins where TrivialAugmentWide,
 * RandAugment, AutoAugment and AugMix truncate them (1.13's AVX2 kernel
 * mixes fused and plain steps by position: its other bits may differ in
 * the last place). FMA rounds once: torch 2.x's vectorised kernel (AVX2,
 * AVX-512), bit for bit. */
float aug_linspace_v(float start, float end, uint32_t n, uint32_t k, uint32_t variant)
{
	if (n == 1)
		return start;
	float step = (end - start) / (float)(n - 1);
	if (variant == AUG_LINSPACE_FMA)
		return k < n / 2 ? fmaf(step, (float)k, start) : fmaf(-step, (float)(n - 1 - k), end);
	return k < n / 2 ? start + step * (float)k : end - step * (float)(n - 1 - k);
}

float aug_linspace(float start, float end, uint32_t n, uint32_t k)
{
	return aug_linspace_v(start, end, n, k, AUG_LINSPACE_PLAIN);
}
