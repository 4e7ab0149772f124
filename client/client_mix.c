/*
 * client_mix.c: the draws of a batch's mixup / cutmix (feed/gpu.h,
 * feed_mix_draw and feed_batch_mix_draw), from the stream's seed, the
 * batch's epoch and its batch number, through kernels/mix.h's sampler;
 * feed_batch_to_device() (client_gpu.c) then applies what they drew.
 *
 * Threads: pure apart from reading the batch's stream facts, which are
 * fixed while the batch is held; any thread. Never prints.
 */
#include <errno.h>
#include <math.h>

#include "client_internal.h"
#include "feed/gpu.h"
#include "mix.h"

FEED_API int feed_mix_draw(const struct feed_mix_spec *spec, uint64_t seed, uint64_t epoch,
			   uint64_t batch, uint32_t h, uint32_t w, struct feed_mix *ret)
{
	struct feed_mix_draw d;
	if (!spec || !ret || !(spec->label_smoothing >= 0.0) || !(spec->label_smoothing <= 1.0))
		return -EINVAL;
	int r = feed_mix_draw_batch(spec->mixup_alpha, spec->cutmix_alpha, spec->switch_prob, seed,
				    epoch, batch, h, w, &d);
	if (r < 0)
		return r;
	*ret = (struct feed_mix){
		.op = (int)d.op,
		.lam = d.lam,
		.x1 = d.x1,
		.y1 = d.y1,
		.x2 = d.x2,
		.y2 = d.y2,
		.num_classes = spec->num_classes,
		.label_smoothing = spec->label_smoothing,
	};
	return 0;
}

FEED_API int feed_batch_mix_draw(const struct feed_batch *b, const struct feed_mix_spec *spec,
				 uint32_t h, uint32_t w, struct feed_mix *ret)
{
	uint64_t seed, epoch, batch;
	if (!b)
		return -EINVAL;
	cl_batch_mix_key(b, &seed, &epoch, &batch);
	return feed_mix_draw(spec, seed, epoch, batch, h, w, ret);
}
