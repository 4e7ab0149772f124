/*
 * builder.h: builds one batch into one destination: its samples located in
 * the dataset, their blocks pinned from the cache (decoded on a miss), the
 * pipeline applied straight into the destination's bytes, and the slot
 * header written last. Knows no stream, no slot table and no lock: whoever
 * owns the destination (delivery) hands it over for the build and takes it
 * back when bld_build() returns.
 *
 * Worker thread. Never allocates per batch or per sample (the worker's
 * buffers grow once to the largest need seen).
 */
#ifndef FEEDD_BUILDER_H
#define FEEDD_BUILDER_H

#include <stdatomic.h>
#include <stdint.h>

#include "augment.h"
#include "feed_err.h"
#include "pack_stream.h"
#include "packing.h"

struct cache;
struct feed_shm_slot;
struct fmt_dataset;
struct ord_epoch;
struct pipe_plan;
struct pool_worker;
struct slot_layout;

/* ---- limits a job reads ----
 *
 * The reloadable limits a build uses (the config's limits.*), kept where
 * the loop sets them at start and at each reload (struct dstate's). A job
 * takes a snapshot when it starts (bld_limits_snap(), into bld_batch.lim)
 * and reads only that: a reload mid-job never changes a limit under it;
 * lowering one takes effect at the next job (its decoders are made again
 * for the lower cap). */
struct bld_limits {
	/* width * height cap on any image decoded: past it, -E2BIG (relaxed:
	 * a value read once per job, nothing ordered by it) */
	_Atomic uint64_t img_max_pixels;
};

/* One job's copy of the limits. */
struct bld_snap {
	uint64_t img_max_pixels;
};

/* The defaults (IMG_MAX_PIXELS_DEFAULT). Before any thread reads l. */
void bld_limits_init(struct bld_limits *l);
/* Sets the limits for jobs that start from now on. Loop thread. */
void bld_limits_set(struct bld_limits *l, uint64_t img_max_pixels);
/* The limits now, for a job starting (l NULL: the defaults). Any thread. */
struct bld_snap bld_limits_snap(const struct bld_limits *l);

/* What a sample that the pipeline cannot take does to its batch. */
enum bld_on_error {
	BLD_ON_ERROR_FAIL = 0, /* the build fails naming it (DataLoader's way) */
	BLD_ON_ERROR_SKIP = 1, /* replaced by the next good sample of the epoch */
	BLD_ON_ERROR_DROP = 2, /* skip under eval: dropped, the batch shorter */
};

/* The samples of one batch that failed and were replaced (skip) or
 * dropped (drop). */
struct bld_bad {
	uint32_t n;                  /* positions replaced or dropped */
	char what[FEED_ERR_MSG_MAX]; /* "sample N: <decoder's words>; ..." (cut) */
};

/* A row of a mixture's batch: which source, which of its samples. */
struct bld_row {
	uint32_t source;             /* index into bld_batch.srcs */
	uint64_t sample;             /* in that source */
};

/* What to build. Every pointer is borrowed for the call. */
struct bld_batch {
	const struct fmt_dataset *ds;
	const struct pipe_plan *plan;
	const struct slot_layout *lay;
	struct cache *cache;         /* shared by every stream over ds */
	uint64_t seed;               /* the stream's: augmentation draws */
	struct bld_snap lim;         /* the limits as the job started */
	/* position (schedule.h's struct sched_pos) */
	uint64_t epoch, index;       /* written in the header */
	const struct ord_epoch *ord; /* which samples */
	uint64_t ord_batch;          /* batch in ord's layout */
	uint64_t mix_batch;          /* the pipeline's mix draws for batch number
				      * index * world + rank (augment_mix.h) */
	uint32_t nsamples;
	/* destination */
	uint8_t *data;               /* the slot's bytes (lay->slot_bytes) */
	uint64_t data_off;           /* their offset in the data region */
	struct feed_shm_slot *hdr;   /* the slot header (lay->slot_hdr_bytes) */
	uint64_t hdr_off;            /* its offset in the control region */
	uint32_t gen;                /* the slot's generation, written last */
	/* bad samples */
	enum bld_on_error on_error;
	uint64_t max_search;         /* skip: positions tried for one replacement */
	struct bld_bad *bad;         /* filled in (n = 0 when none); required
				      * with skip and drop, may be NULL with fail */
	/* packing (plan->pack.mode): ord's samples are rows */
	const struct pk_source *rows; /* the stream's documents and their order */
	struct pk_cursor pk;         /* at the batch's first row (schedule.h) */
	/* a mixture (delivery/mixture.h): row i reads mix_rows[i].sample of
	 * srcs[mix_rows[i].source] (ds is srcs[0]), and out field src_field (int32,
	 * one per row) gets mix_rows[i].source; NULL: every row from ds at ord's
	 * sample. Skip is not offered with rows. */
	const struct bld_row *mix_rows;
	const struct fmt_dataset *const *srcs;
	uint32_t nsrcs;
	uint32_t src_field;
	/* a packed mixture (with mix_rows and plan->pack): source s's rows are
	 * mix_pk_spec[s]'s stream, mix_pk[s] where it stands at the batch's
	 * first row, and mix_rows[i].sample the row's index in that stream */
	const struct pks_spec *mix_pk_spec;
	const struct pks_pos *mix_pk;
	/* hybrid JPEG decode (the decode dispatch): the batch's first images
	 * decoded elsewhere, ahead of their samples; NULL: none */
	const struct bld_predecode *pre;
};

/* An image to decode ahead: its encoded bytes (borrowed for the call) and
 * the box its sample's image stage decodes (aug_image_box). */
struct bld_pre_image {
	const void *data;
	size_t len;
	struct img_box box;
};

/* Decoding ahead of the samples, supplied from above (daemon/gpu/
 * hybrid.c, through the delivery): run decodes n images as c channels on
 * the calling worker and fills out[k].view for those it decoded, returning
 * how many (out[k].view.px NULL: decoded by the sample itself, as ever);
 * it never fails the batch. The samples at positions < n_first of the
 * batch are sent, chunk by chunk. */
struct bld_predecode {
	uint32_t (*run)(void *arg, const struct bld_pre_image *im, uint32_t n, uint32_t c,
			struct aug_pre *out);
	void *arg;
	uint32_t n_first;
};

/* Builds b. Returns 0 with *ret_bytes the field bytes written, or an error
 * naming the sample and shard/block (-EBADMSG), the field, or the worker
 * (-ENOMEM). A record the pipeline cannot take (an image that does not
 * decode: -EBADMSG, -ENOTSUP, -E2BIG) reads "dataset 'D': sample N: field
 * 'F': " and the decoder's words. Plans that decode use the worker's image
 * decoders (this module's state in pool_worker.ctx), made or grown here
 * when the plan needs larger limits, their pixel cap b->lim's.
 * On error the destination holds garbage.
 *
 * With BLD_ON_ERROR_SKIP, a sample at global position g that fails so is
 * replaced by the sample at the first position g+1, g+2, ... (mod the
 * dataset's size, every rank's positions: the epoch's global order) that
 * builds, built as it is in its own place (same draws): a pure function
 * of the epoch's order, so the same for any worker count, run or resume.
 * Its header marks the position (FEED_SLOT_REPLACED, the bitmap) and
 * b->bad lists what failed; past max_search positions tried, the build
 * fails naming the sample.
 *
 * With BLD_ON_ERROR_DROP (skip in an eval stream, where a replacement
 * would be a sample delivered twice), a sample that fails so is left out:
 * the samples after it move up, the header's nsamples is what was built
 * (0 when every sample failed), FEED_SLOT_DROPPED is set, the bitmap
 * marks the positions dropped (of the batch as laid out, b->nsamples of
 * them) and failed[] names them in order (a mixture's source field
 * keeps to the rows built).
 *
 * With packing (plan->pack), sample i is row ord_sample(i) of the epoch's
 * concat or pack stream, walked to from b->pk: its documents' tokens are read one
 * block pin at a time, and the fields are the rows' (pipeline.h); a
 * document whose record disagrees with its recorded length fails the
 * build (-EBADMSG naming it); on_error skip does not apply to rows. */
int bld_build(const struct bld_batch *b, struct pool_worker *w, uint64_t *ret_bytes,
	      struct feed_err *err);

#endif
