/*
 * philox.h: the counter-based generator behind every augmentation draw.
 *
 * In kernels/ because both core/ (per-sample ops) and the batch mixes of
 * mix.h (the client's, keyed by batch: feed_mix_draw) take it from here:
 * one generator, one place.
 *
 * Owns: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11; the Random123 reference) and the mapping of
 * (seed, epoch, sample, op, draw) onto its counter and key. A draw is a pure
 * function of those five numbers: it never depends on worker count, timing,
 * restarts or the order in which samples are built.
 *
 * Threads: header-only pure functions, any thread, no state.
 * Never: keep state, read the clock, or call a libc generator.
 */
#ifndef FEED_PHILOX_H
#define FEED_PHILOX_H

#include <stdint.h>

#define PHILOX_M0 0xD2511F53u /* multiplier of words 0 and 1 */
#define PHILOX_M1 0xCD9E8D57u /* multiplier of words 2 and 3 */
#define PHILOX_W0 0x9E3779B9u /* key schedule: golden ratio */
#define PHILOX_W1 0xBB67AE85u /* key schedule: sqrt(3) - 1 */

/* Philox4x32 with 10 rounds: out = philox(ctr, key). out may alias ctr. */
static inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];

	for (int r = 0; r < 10; r++) {
		if (r) {
			k0 += PHILOX_W0;
			k1 += PHILOX_W1;
		}
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

/*
 * The four words of draw block `block` for (seed, epoch, sample, op): draws
 * 4*block .. 4*block+3. Counter = {sample lo, sample hi, epoch lo, op << 24 |
 * block}, key = {seed lo, seed hi}. Distinct inputs give distinct counters
 * while epoch < 2^32, op < 256 and block < 2^24 (draw < 2^26); larger values
 * wrap (still a pure function, but may repeat another epoch's draws).
 */
static inline void feed_rand_block(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t op,
				   uint32_t block, uint32_t out[4])
{
	const uint32_t ctr[4] = {(uint32_t)sample, (uint32_t)(sample >> 32), (uint32_t)epoch,
				 (op & 0xffu) << 24 | (block & 0xffffffu)};
	const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};

	philox4x32_10(ctr, key, out);
}

/* Draw number `draw` of op `op` for this sample: a uniform 32-bit word. */
static inline uint32_t feed_rand_u32(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t op,
				     uint32_t draw)
{
	uint32_t w[4];

	feed_rand_block(seed, epoch, sample, op, draw >> 2, w);
	return w[draw & 3];
}

/* A word as a float in [0, 1): its top 24 bits times 2^-24 (exact). */
static inline float feed_rand_unit_of(uint32_t u)
{
	return (float)(u >> 8) * 0x1p-24f;
}

/* Draw `draw` of op `op` as a float in [0, 1). */
static inline float feed_rand_unit(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t op,
				   uint32_t draw)
{
	return feed_rand_unit_of(feed_rand_u32(seed, epoch, sample, op, draw));
}

#endif
