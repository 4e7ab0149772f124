/*
 * bench_pipeline.c: the batch-building work of feedd as a single-threaded
 * C loop with no daemon: order, block read + decode (through the same
 * block cache), the pipeline applied into a batch buffer. The ceiling a
 * feedd worker core is compared with.
 *
 *   bench_pipeline DIR [--pipeline P] [--batch N] [--epochs E] [--order seq|full]
 *                      [--cache-bytes N]
 *
 * Prints one JSON object: samples_per_s over all epochs after the first
 * (the first warms the cache, as in a long-running daemon). Plans that
 * decode images get one decoder per channel count, made once, as a feedd
 * worker's are (so bench/run's limit for the JPEG workloads is this loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment.h"
#include "cache.h"
#include "fmt.h"
#include "image.h"
#include "order.h"
#include "pipeline.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct opts {
	const char *dir, *pipeline, *order;
	unsigned batch, epochs;
	unsigned long long cache_bytes;
};

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.pipeline = "identity", .order = "full", .batch = 256, .epochs = 4,
			   .cache_bytes = 1ull << 30};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (a[0] != '-') {
			o->dir = a;
			continue;
		}
		if (!v)
			return -1;
		if (!strcmp(a, "--pipeline"))
			o->pipeline = v;
		else if (!strcmp(a, "--batch"))
			o->batch = (unsigned)atoi(v);
		else if (!strcmp(a, "--epochs"))
			o->epochs = (unsigned)atoi(v);
		else if (!strcmp(a, "--order"))
			o->order = v;
		else if (!strcmp(a, "--cache-bytes"))
			o->cache_bytes = strtoull(v, NULL, 0);
		else
			return -1;
		i++;
	}
	return o->dir && o->batch && o->epochs >= 2 ? 0 : -1;
}

/* One epoch: every batch built into out; returns samples. */
static uint64_t run_epoch(struct fmt_dataset *ds, struct cache *c, struct cache_worker *w,
			  const struct pipe_plan *plan, const struct ord_epoch *ep, uint8_t *out,
			  size_t rec_out, void *scratch, const struct aug_img *img, uint64_t epoch,
			  uint64_t seed)
{
	uint64_t n = 0;
	struct aug_in in[FMT_MAX_FIELDS];
	struct aug_out ao[FMT_MAX_FIELDS];
	size_t len[FMT_MAX_FIELDS];

	for (uint64_t b = 0; b < ord_batches_per_epoch(ep); b++) {
		uint64_t cur = UINT64_MAX;
		struct cache_entry *e = NULL;
		const struct fmt_block *blk = NULL;
		for (uint32_t i = 0; i < ord_batch_size(ep, b); i++, n++) {
			uint64_t idx = ord_sample(ep, b, i);
			struct fmt_loc loc;
			fmt_dataset_locate(ds, idx, &loc);
			if (loc.block != cur) {
				cache_put(c, e);
				if (cache_get(c, ds, loc.block, w, &blk, &e, NULL) < 0)
					exit(1);
				cur = loc.block;
			}
			uint8_t *dst = out + (size_t)i * rec_out;
			for (uint32_t f = 0; f < plan->in.nfields; f++) {
				in[f].data = fmt_block_field(blk, f, loc.record, &in[f].len);
				ao[f] = (struct aug_out){.dst = dst, .cap = plan->out.fields[f].max_bytes,
							 .ret_len = &len[f]};
				dst += plan->out.fields[f].max_bytes;
			}
			struct aug_ctx ctx = {.seed = seed, .epoch = epoch, .sample = idx};
			struct feed_err err = {0};
			if (aug_apply_img(plan, &ctx, in, ao, scratch, img, &err) < 0) {
				fprintf(stderr, "bench_pipeline: %s\n", err.msg);
				exit(1);
			}
		}
		cache_put(c, e);
	}
	return n;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct fmt_dataset *ds;
	struct feed_err err = {0};
	struct pipe_plan *plan = malloc(sizeof(*plan));
	struct cache *c;

	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: bench_pipeline DIR [--pipeline P] [--batch N] [--epochs E>=2] "
				"[--order seq|full] [--cache-bytes N]\n");
		return 2;
	}
	if (fmt_dataset_open(o.dir, &ds, &err) < 0 ||
	    pipe_plan_text(o.pipeline, fmt_dataset_info(ds)->schema, plan, &err) < 0) {
		fprintf(stderr, "bench_pipeline: %s\n", err.msg);
		return 1;
	}
	const struct fmt_info *in = fmt_dataset_info(ds);
	size_t rec_out = 0;
	for (uint32_t f = 0; f < plan->out.nfields; f++)
		rec_out += plan->out.fields[f].max_bytes;
	uint8_t *out = malloc(rec_out * o.batch);
	void *scratch = malloc(pipe_scratch_bytes(plan) + 64);
	struct cache_worker w = {.comp_cap = in->max_block_comp, .comp = malloc(in->max_block_comp)};
	fmt_decoder_new(&w.dec);
	cache_new(o.cache_bytes, &c);
	struct aug_img img = {0};
	if (((plan->dec_channels_mask & (1u << 1)) &&
	     img_decoder_new(&plan->dec_lim, 1, &img.dec1, &err) < 0) ||
	    ((plan->dec_channels_mask & (1u << 3)) &&
	     img_decoder_new(&plan->dec_lim, 3, &img.dec3, &err) < 0)) {
		fprintf(stderr, "bench_pipeline: %s\n", err.msg);
		return 1;
	}
	struct ord_spec spec = {.n = in->num_samples, .seed = 1, .world = 1, .batch = o.batch,
				.mode = !strcmp(o.order, "seq") ? ORD_SEQUENTIAL : ORD_FULL};
	snprintf(spec.version, sizeof(spec.version), "%s", in->version);
	double t0 = 0;
	uint64_t samples = 0;
	for (unsigned e = 0; e < o.epochs; e++) {
		struct ord_epoch ep;
		if (ord_epoch_init(&ep, &spec, e, &err) < 0) {
			fprintf(stderr, "bench_pipeline: %s\n", err.msg);
			return 1;
		}
		if (e == 1)
			t0 = now_s();
		uint64_t n = run_epoch(ds, c, &w, plan, &ep, out, rec_out, scratch, &img, e, 1);
		if (e >= 1)
			samples += n;
		ord_epoch_fini(&ep);
	}
	double dt = now_s() - t0;
	printf("{\"samples_per_s\": %.0f, \"epochs_timed\": %u, \"pipeline\": \"%s\", \"order\": \"%s\"}\n",
	       samples / dt, o.epochs - 1, plan->canonical, o.order);
	return 0;
}
