/*
 * augment_ctx.h: which sample is being built, the key every random draw of
 * the augment ops is made from. Its own header because both the pipeline's
 * driver (augment.h) and the pixel ops below it (augment_pixel.h) take it,
 * and the pixel ops must not include the driver that calls them.
 */
#ifndef FEED_AUGMENT_CTX_H
#define FEED_AUGMENT_CTX_H

#include <stdint.h>

/* Which sample is being built: the draws' key. */
struct aug_ctx {
	uint64_t seed;    /* the stream's seed */
	uint64_t epoch;   /* epoch number */
	uint64_t sample;  /* dataset sample index (not the position) */
};

#endif
