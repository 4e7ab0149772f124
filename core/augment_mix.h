/*
 * augment_mix.h: the pipeline's batch op `mix` (pipeline.h): once every
 * sample of a batch is in place, mixup / cutmix of the normalized image
 * field and the field `label` made soft labels, in the batch's own bytes.
 *
 * Owns: nothing but the order of the work; the draws, the element
 * arithmetic and the soft labels are kernels/mix.h's (feed_mix_draw_batch,
 * feed_mix_images_cpu, feed_mix_label), so a batch mixed here has the bits
 * the Loader's conversion gives the same batch (feed_batch_to_device with
 * a mix) and the GPU kernels give.
 *
 * Threads: a pure function of its arguments; a daemon worker calls it on
 * the batch it built, before the slot header is written. Never allocates,
 * blocks or prints.
 */
#ifndef FEED_AUGMENT_MIX_H
#define FEED_AUGMENT_MIX_H

#include <stdint.h>

#include "feed_err.h"
#include "pipeline.h"

/*
 * Mixes the n samples of a built batch in place, as plan->bmix says (a
 * no-op returning 0 when plan has no mix). images: the image field's n
 * samples, plan->out's max_bytes each; labels: the label field's n rows of
 * 4 * num_classes bytes, each holding the sample's integer label in its
 * first label_bytes (as the pipeline copied it), overwritten by its soft
 * labels. The draws are the stream's: seed, epoch and its batch number
 * (index * world + rank: the number the Loader's feed_batch_mix_draw
 * uses). sample (may be NULL): the rows' dataset indices, for the message.
 * Returns 0, or -ERANGE naming the first label outside [0, num_classes),
 * its sample and its row (the batch then holds garbage), -EINVAL when the
 * draw or its arguments are refused.
 */
int aug_batch_mix(const struct pipe_plan *plan, uint64_t seed, uint64_t epoch, uint64_t batch,
		  void *images, void *labels, uint32_t n, const uint64_t *sample,
		  struct feed_err *err);

#endif
