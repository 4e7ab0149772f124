/*
 * feedbench_verify.c: --verify. The rule comes from the daemon's partition
 * (core/order.h), which is PyTorch's DistributedSampler order: rank r of
 * world R reads, as sample i of batch b, global position
 *     g = (b * B + i) * R + r
 * of the epoch's permutation of [0, N). The epoch is padded as
 * DistributedSampler pads, to ceil(N / R) * R positions (each rank's last
 * batch partial, as DataLoader's), or with --pad-last to ceil(N / (R*B)) *
 * R*B positions (every batch full); a position g >= N repeats the sample
 * at position g mod N, and its batch is flagged padded.
 *
 * So a job records, for each sample it is handed, the sample at position
 * g (each position belongs to exactly one rank: no two jobs write the same
 * entry). Per batch it checks what it can see alone (epoch, index, size,
 * the padded flag, indices < N, no position twice); once every rank of the
 * set has finished, the parent checks the whole epoch: positions [0, N)
 * hold every sample exactly once, and every padding position holds the
 * sample of the position it wraps to.
 *
 * Errors name the epoch and the sample index (and the position).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedbench.h"

#define FB_VERIFY_MAX_BYTES (4ull << 30) /* refuse --verify past this */

/* Samples of each rank in an epoch (core/order.h's partition). */
static uint64_t fb_per_rank(uint64_t n, uint32_t batch, uint32_t world, bool pad_last)
{
	uint64_t rb = (uint64_t)batch * world;

	return pad_last ? (n + rb - 1) / rb * batch : (n + world - 1) / world;
}

size_t fb_verify_bytes(uint64_t n, uint64_t epochs, uint32_t batch, uint32_t world,
		       bool pad_last)
{
	uint64_t per = fb_per_rank(n, batch, world, pad_last) * world; /* n + pad */
	uint64_t total;

	if (__builtin_mul_overflow(per, epochs, &total) ||
	    __builtin_mul_overflow(total, (uint64_t)sizeof(uint64_t), &total) ||
	    total > FB_VERIFY_MAX_BYTES)
		return 0;
	return (size_t)total;
}

void fb_verify_init(struct fb_verify *v, uint64_t *pos, uint64_t n, uint64_t epochs,
		    uint32_t batch, uint32_t world, bool pad_last)
{
	v->n = n;
	v->epochs = epochs;
	v->batch = batch;
	v->world = world;
	v->per_rank = fb_per_rank(n, batch, world, pad_last);
	v->batches = (v->per_rank + batch - 1) / batch;
	v->pad = v->per_rank * world - n;
	v->pos = pos;
	for (uint64_t i = 0; i < epochs * (n + v->pad); i++)
		pos[i] = FB_UNSEEN;
}

int fb_verify_batch(struct fb_verify *v, uint32_t rank, uint64_t epoch, uint64_t index,
		    const uint64_t *samples, uint32_t nsamples, bool padded,
		    const uint64_t *replaced, char *msg, size_t cap)
{
	bool wraps = false;

	if (epoch >= v->epochs) {
		snprintf(msg, cap, "epoch %" PRIu64 " batch %" PRIu64 ": only epochs 0..%" PRIu64
			 " were asked for", epoch, index, v->epochs - 1);
		return -1;
	}
	uint64_t want = index + 1 < v->batches ? v->batch : v->per_rank - index * v->batch;
	if (index >= v->batches || nsamples != want) {
		snprintf(msg, cap, "epoch %" PRIu64 " batch %" PRIu64 ": %u samples; expected %"
			 PRIu64 " of batches 0..%" PRIu64 " (%" PRIu64 " samples per rank)", epoch,
			 index, nsamples, index < v->batches ? want : 0, v->batches - 1,
			 v->per_rank);
		return -1;
	}
	uint64_t *pos = v->pos + epoch * (v->n + v->pad);
	for (uint32_t i = 0; i < nsamples; i++) {
		uint64_t g = (index * v->batch + i) * v->world + rank;
		if (samples[i] >= v->n) {
			snprintf(msg, cap, "epoch %" PRIu64 " batch %" PRIu64 " sample %u: dataset "
				 "index %" PRIu64 " is not below N = %" PRIu64, epoch, index, i,
				 samples[i], v->n);
			return -1;
		}
		if (pos[g] != FB_UNSEEN) {
			snprintf(msg, cap, "epoch %" PRIu64 ": global position %" PRIu64 " (sample %"
				 PRIu64 ") delivered twice", epoch, g, samples[i]);
			return -1;
		}
		pos[g] = samples[i];
		if (replaced && (replaced[i / 64] >> (i % 64) & 1))
			pos[g] |= FB_REPLACED;
		wraps |= g >= v->n;
	}
	if (wraps != padded) {
		snprintf(msg, cap, "epoch %" PRIu64 " batch %" PRIu64 ": %s wrap-around samples but "
			 "feed_batch_padded() says %s", epoch, index, wraps ? "holds" : "holds no",
			 padded ? "true" : "false");
		return -1;
	}
	return 0;
}

/* Each replaced position of epoch e holds the sample of the next position
 * (cyclically) that is not replaced. */
static int fb_verify_replacements(const struct fb_verify *v, uint64_t e, char *msg, size_t cap)
{
	const uint64_t *pos = v->pos + e * (v->n + v->pad);

	for (uint64_t g = 0; g < v->n; g++) {
		if (!(pos[g] & FB_REPLACED))
			continue;
		uint64_t q = (g + 1) % v->n;
		while (q != g && (pos[q] & FB_REPLACED))
			q = (q + 1) % v->n;
		if ((pos[g] & ~FB_REPLACED) != pos[q]) {
			snprintf(msg, cap, "epoch %" PRIu64 ": position %" PRIu64 " holds sample %"
				 PRIu64 " in place of a bad one; the next good one, at %" PRIu64
				 ", is %" PRIu64, e, g, pos[g] & ~FB_REPLACED, q, pos[q]);
			return -1;
		}
	}
	return 0;
}

/* One epoch of a finished set. seen[s] = 1 + the position of sample s. */
static int fb_verify_epoch(const struct fb_verify *v, uint64_t e, uint64_t *seen, char *msg,
			   size_t cap)
{
	const uint64_t *pos = v->pos + e * (v->n + v->pad);

	uint64_t nrep = 0, missing = 0;

	memset(seen, 0, v->n * sizeof(*seen));
	for (uint64_t g = 0; g < v->n; g++) {
		uint64_t s = pos[g];
		if (s == FB_UNSEEN) {
			snprintf(msg, cap, "epoch %" PRIu64 ": global position %" PRIu64 " (rank %"
				 PRIu64 ") was never delivered", e, g, g % v->world);
			return -1;
		}
		if (s & FB_REPLACED) {
			nrep++;
			continue;
		}
		if (seen[s]) {
			snprintf(msg, cap, "epoch %" PRIu64 ": duplicate sample %" PRIu64 " at global "
				 "positions %" PRIu64 " and %" PRIu64, e, s, seen[s] - 1, g);
			return -1;
		}
		seen[s] = g + 1;
	}
	for (uint64_t s = 0; s < v->n; s++)
		if (!seen[s] && ++missing > nrep) {  /* the bad ones are replaced */
			snprintf(msg, cap, "epoch %" PRIu64 ": missing sample %" PRIu64, e, s);
			return -1;
		}
	if (missing != nrep) {
		snprintf(msg, cap, "epoch %" PRIu64 ": %" PRIu64 " positions replaced, %" PRIu64
			 " samples missing", e, nrep, missing);
		return -1;
	}
	if (nrep && fb_verify_replacements(v, e, msg, cap) < 0)
		return -1;
	for (uint64_t k = 0; k < v->pad; k++) {
		uint64_t g = v->n + k, want = pos[g % v->n] & ~FB_REPLACED;
		if ((pos[g] & ~FB_REPLACED) != want) {
			if (pos[g] == FB_UNSEEN)
				snprintf(msg, cap, "epoch %" PRIu64 ": padding position %" PRIu64
					 " was never delivered", e, g);
			else
				snprintf(msg, cap, "epoch %" PRIu64 ": padding position %" PRIu64
					 " holds sample %" PRIu64 ", expected sample %" PRIu64
					 " (the wrap-around of position %" PRIu64 ")", e, g, pos[g],
					 want, g % v->n);
			return -1;
		}
	}
	return 0;
}

int fb_verify_check(const struct fb_verify *v, char *msg, size_t cap)
{
	uint64_t *seen = malloc(v->n * sizeof(*seen));
	int r = 0;

	if (!seen) {
		snprintf(msg, cap, "out of memory for %" PRIu64 " samples' check", v->n);
		return -1;
	}
	for (uint64_t e = v->first_epoch; e < v->epochs && r == 0; e++)
		r = fb_verify_epoch(v, e, seen, msg, cap);
	free(seen);
	return r;
}
