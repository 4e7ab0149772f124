/*
 * augment_mix.c: the batch op `mix` (augment_mix.h): draws the batch's
 * mix, mixes its normalized images with kernels/mix.h's CPU twin and
 * rewrites each row of the label field as its soft labels.
 *
 * Threads: pure; a daemon worker, on the batch it owns. Never allocates,
 * blocks or prints.
 */
#include "augment_mix.h"

#include <errno.h>
#include <string.h>

#include "mix.h"

/* Label of row i (a row of C floats whose first bytes hold the label). */
static int64_t row_label(const struct pipe_bmix *m, const uint8_t *labels, uint32_t i)
{
	uint8_t v[8];

	memcpy(v, labels + (size_t)i * 4 * m->num_classes, m->label_bytes);
	return feed_mix_label_at(v, m->label_type, 0);
}

/* Every label in [0, C): else -ERANGE naming the first that is not. */
static int labels_check(const struct pipe_bmix *m, const uint8_t *labels, uint32_t n,
			const uint64_t *sample, struct feed_err *err)
{
	for (uint32_t i = 0; i < n; i++) {
		int64_t v = row_label(m, labels, i);
		if (v >= 0 && v < (int64_t)m->num_classes)
			continue;
		if (sample)
			return feed_err_set(err, -ERANGE, "mix: sample %llu (row %u of the batch): "
					    "field '%s' %lld not in [0, num_classes=%u)",
					    (unsigned long long)sample[i], i, PIPE_MIX_LABEL,
					    (long long)v, m->num_classes);
		return feed_err_set(err, -ERANGE, "mix: row %u of the batch: field '%s' %lld not "
				    "in [0, num_classes=%u)", i, PIPE_MIX_LABEL, (long long)v,
				    m->num_classes);
	}
	return 0;
}

/* Soft labels in place. Row i reads its own label and row i - 1's (row
 * n - 1's for row 0), so rows are rewritten from the last down, with row
 * n - 1's label kept aside for row 0. */
static void labels_soften(const struct pipe_bmix *m, const struct feed_mix_args *a,
			  uint8_t *labels, uint32_t n)
{
	int64_t last = row_label(m, labels, n - 1);
	uint32_t C = m->num_classes;

	for (uint32_t i = n; i-- > 0;) {
		int64_t own = row_label(m, labels, i);
		int64_t partner = i ? row_label(m, labels, i - 1) : last;
		float *row = (float *)(void *)(labels + (size_t)i * 4 * C);
		for (uint32_t k = 0; k < C; k++)
			row[k] = feed_mix_label(a, own, partner, k);
	}
}

int aug_batch_mix(const struct pipe_plan *plan, uint64_t seed, uint64_t epoch, uint64_t batch,
		  void *images, void *labels, uint32_t n, const uint64_t *sample,
		  struct feed_err *err)
{
	const struct pipe_bmix *m = &plan->bmix;
	struct feed_mix_draw d = {.op = FEED_MIX_OP_NONE, .lam = 1.0};
	struct feed_mix_args a;
	int rc;

	if (!m->on || n == 0)
		return 0;
	if ((rc = labels_check(m, labels, n, sample, err)) < 0)
		return rc;
	if ((m->mixup_alpha > 0.0 || m->cutmix_alpha > 0.0) &&
	    (rc = feed_mix_draw_batch(m->mixup_alpha, m->cutmix_alpha, m->switch_prob, seed,
				      epoch, batch, m->cv.h, m->cv.w, &d)) < 0)
		return feed_err_set(err, rc, "mix: the batch's draw was refused");
	if ((rc = feed_mix_args_init(&a, &d, m->cv.h, m->cv.w, m->num_classes,
				     m->label_smoothing)) < 0 ||
	    (rc = feed_mix_images_cpu(&m->cv, &a, n, images)) < 0)
		return feed_err_set(err, rc, "mix: op %u, lambda %g refused for %ux%u images",
				    d.op, d.lam, m->cv.h, m->cv.w);
	labels_soften(m, &a, labels, n);
	return 0;
}
