/*
 * feedbench_measure.c: what feedbench measures with: the monotonic clock,
 * a checksum that reads every byte it is given, and percentiles (JSON
 * strings: json_out.h). Pure functions over caller memory; any thread; nothing
 * here allocates (percentiles sort the caller's array in place).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feedbench.h"

static inline uint64_t fb_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fb_now_ns(void)
{
	return fb_clock_ns(CLOCK_MONOTONIC);
}

/* This process's CPU time (user and system, all threads). A system call,
 * unlike fb_now_ns(): read twice a run, never per batch. */
uint64_t fb_cpu_ns(void)
{
	return fb_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

/* Median cost of two back-to-back clock reads: the floor under every
 * fast-path latency feedbench reports. */
double fb_clock_cost_ns(void)
{
	uint64_t d[101];

	for (int i = 0; i < 101; i++) {
		uint64_t a = fb_now_ns();
		d[i] = fb_now_ns() - a;
	}
	return fb_percentile_us(d, 101, 0.5) * 1000.0;
}

/* Busy-waits: a training step keeps its core, it does not sleep. */
void fb_spin_ns(uint64_t ns)
{
	uint64_t end = fb_now_ns() + ns;

	while (fb_now_ns() < end)
		;
}

/* ------------------------------------------------------------------ */
/* Checksum: four independent multiply-rotate lanes over 8-byte words, so
 * the loop runs near memory speed yet depends on every byte, in order
 * within a lane. Not a standard hash; only compared with itself.        */

#define FB_K1 0x9e3779b97f4a7c15ull
#define FB_K2 0xbf58476d1ce4e5b9ull
#define FB_K3 0x94d049bb133111ebull

static inline uint64_t fb_rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t fb_lane(uint64_t acc, uint64_t w)
{
	return fb_rotl(acc + w * FB_K2, 31) * FB_K1;
}

static inline uint64_t fb_load64(const unsigned char *p)
{
	uint64_t w;

	memcpy(&w, p, sizeof(w)); /* unaligned-safe; compiles to one load */
	return w;
}

/* Final avalanche (a bijection), so nearby inputs give unrelated sums. */
static inline uint64_t fb_fmix(uint64_t h)
{
	h ^= h >> 31;
	h *= FB_K3;
	h ^= h >> 29;
	h *= FB_K2;
	h ^= h >> 32;
	return h;
}

uint64_t fb_hash(uint64_t seed, const void *data, size_t len)
{
	const unsigned char *p = data, *end = p + len;
	uint64_t a = seed + FB_K1, b = seed + FB_K2, c = seed, d = seed - FB_K1;

	while (end - p >= 32) {
		a = fb_lane(a, fb_load64(p));
		b = fb_lane(b, fb_load64(p + 8));
		c = fb_lane(c, fb_load64(p + 16));
		d = fb_lane(d, fb_load64(p + 24));
		p += 32;
	}
	uint64_t h = fb_rotl(a, 1) + fb_rotl(b, 7) + fb_rotl(c, 12) + fb_rotl(d, 18);
	while (end - p >= 8) {
		h = fb_lane(h, fb_load64(p));
		p += 8;
	}
	while (p < end)
		h = (h ^ *p++) * FB_K1;
	return fb_fmix(h ^ len);
}

/* Order-dependent: the same batches in another order give another sum. */
uint64_t fb_combine(uint64_t acc, uint64_t h)
{
	return fb_fmix(fb_rotl(acc, 17) ^ h);
}

/* ------------------------------------------------------------------ */

static int fb_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile q (0 < q <= 1) of n values in ns, in µs. Sorts
 * ns in place (cheap when already sorted: call it again for another q).
 * n = 0 gives -1, which callers print as "none" / null. */
double fb_percentile_us(uint64_t *ns, uint64_t n, double q)
{
	if (n == 0)
		return -1.0;
	qsort(ns, n, sizeof(*ns), fb_cmp_u64);
	uint64_t rank = (uint64_t)(q * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return (double)ns[rank - 1] / 1000.0;
}
