/*
 * hybrid.h: hybrid JPEG decode (DESIGN.md "GPU path"): a stream's images
 * decoded by nvJPEG on a GPU while the CPU workers fall behind its reader,
 * and by the CPU decoder (core/image.h) while they keep up.
 *
 * Two parts:
 *   - struct hyb_sched, one per stream: how many images of its next batch
 *     go to the GPU (hyb_sched_gpu_images), from how far its built batches
 *     stand ahead of its reader; and, once the GPU path failed for it (no
 *     nvJPEG, no driver, a device fault), that it stays on the CPU, and
 *     why (hyb_sched_reason: the stream's status says it). The share never
 *     touches a sample's draws: which image a slot holds and the crop and
 *     flip it gets are functions of (seed, epoch, sample) alone
 *     (core/augment.h), so the batches are the same order and draws on
 *     either path; only the decoder differs (IDCTs differ: see
 *     tests/gpu/check_nvjpeg_gpu.c for the bounds).
 *   - struct hyb_dec, one per worker and device it decoded for: nvJPEG's handle (the
 *     hardware backend, the JPEG engines of A100/H100/H200, where the device
 *     has one; else the CUDA backend), its batched state and per-image
 *     decode parameters (region of interest: only the crop box is decoded),
 *     a device buffer for the decoded boxes and a host one they are copied
 *     back to. hyb_decode decodes a batch of boxes; an image nvJPEG refuses
 *     is left to the CPU path (that image only); a failure of the device or
 *     the library fails the call, and the caller moves the stream to the CPU
 *     path (hyb_sched_fail).
 *
 * Threads: a hyb_sched is shared by the workers building its stream's
 * batches: atomics only, no lock (the reason is written once, before the
 * failed flag is released). A hyb_dec belongs to one worker thread, which
 * makes the device's primary context current on itself; nothing here holds
 * a lock of feedd's across a driver or nvJPEG call. Growing the device
 * buffer allocates; the buffers it outgrows are freed by hyb_dec_free (no
 * cuMemFree, which synchronises implicitly, on a worker mid-stream).
 */
#ifndef FEEDD_HYBRID_H
#define FEEDD_HYBRID_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "builder.h"
#include "feed_err.h"
#include "image.h"

struct cudrv;
struct njl;

/* ------------------------------------------------------------------ */
/* The per-stream scheduler                                            */

/* The share moves in eighths of a batch. */
#define HYB_STEPS 8u

struct hyb_sched {
	_Atomic uint32_t step;  /* images to the GPU: step / HYB_STEPS of a batch */
	_Atomic bool failed;    /* the GPU path failed for this stream: CPU for good */
	_Atomic bool claimed;   /* a hyb_sched_fail is writing the reason */
	char reason[320];       /* failed: why (written once, before failed) */
};

/* A scheduler that starts on the CPU (step 0), or failed with reason when
 * reason is not NULL (nvJPEG absent: hyb_unusable_reason()). */
void hyb_sched_init(struct hyb_sched *s, const char *reason);

/*
 * The number of the next batch's images (of batch) to decode on the GPU,
 * given how many built batches wait for the stream's reader (ready) out of
 * its credits: ready <= credits / 4 (the CPU workers fall behind the
 * reader) moves the share up by an eighth, ready >= 3 * credits / 4 (they
 * keep up) down by an eighth, in between it stays. 0 once failed. The
 * images sent are the batch's first ones, in batch order. Any worker.
 */
uint32_t hyb_sched_gpu_images(struct hyb_sched *s, uint32_t batch, uint32_t ready,
			      uint32_t credits);

/* Moves the stream to the CPU path for good, with why (the first reason
 * given wins). Any worker. */
void hyb_sched_fail(struct hyb_sched *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "" while the GPU path is open to the stream, else why not. Any thread. */
const char *hyb_sched_reason(const struct hyb_sched *s);

/* Why the process cannot decode JPEGs on a GPU (no driver, no nvJPEG), or
 * NULL when it can: what status shows daemon-wide. Any thread (loads the
 * driver and nvJPEG on first use). */
const char *hyb_unusable_reason(void);

/* What status shows daemon-wide, in buf (cap bytes; returns buf): "nvJPEG
 * <version> (<library>)" where the GPU path can decode JPEGs, else "CPU
 * only: " and hyb_unusable_reason(). Any thread. */
const char *hyb_describe(char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* The per-worker decoder                                              */

/* One image to decode: its encoded bytes (borrowed for the call), the box
 * to decode (full-resolution coordinates) and its channels (1 or 3; every
 * image of one call has the same). */
struct hyb_image {
	const void *data;
	size_t len;
	struct img_box box;
};

/* What became of one image: decoded (view: the box's pixels, box.w x
 * box.h x channels, borrowed until the decoder's next call), or left to
 * the CPU path (!ok; why: nvJPEG's words). */
struct hyb_result {
	bool ok;
	struct img_view view;
	char why[96];
};

struct hyb_dec;

/* A decoder on device ordinal dev with nv's nvJPEG and cu's driver
 * (both usable): makes dev's primary context current on the calling
 * thread (made if it was not), a stream, and nvJPEG's handle (hardware
 * backend first) and state. 0, or -ENODEV / -EIO / -ENOMEM with err
 * naming the call that failed. */
int hyb_dec_new(const struct njl *nv, const struct cudrv *cu, int dev, struct hyb_dec **ret,
		struct feed_err *err);
/* Frees (on the thread that made it). Accepts NULL. */
void hyb_dec_free(struct hyb_dec *d);
/* Whether it decodes on the JPEG engines (the hardware backend). */
bool hyb_dec_hardware(const struct hyb_dec *d);

/*
 * Decodes the n boxes of im as `channels` (1 or 3) u8 channels: one
 * batched nvJPEG call (each image decoded only over its box: region of
 * interest), then one copy of every box back to the host. An image nvJPEG
 * refuses (bad, truncated, unsupported: njl_status_is_image) is found by
 * decoding the batch's images one by one and left to the CPU (out[i].ok
 * false). Returns 0 (out[0..n) filled), or a negative errno-style code
 * with err naming what failed when the device or the library did (-EIO:
 * a device fault, an nvJPEG failure not of an image; -ENOMEM): then no
 * out[i] is usable, and the caller decodes the batch on the CPU.
 */
int hyb_decode(struct hyb_dec *d, const struct hyb_image *im, uint32_t n, uint32_t channels,
	       struct hyb_result *out, struct feed_err *err);

/* ------------------------------------------------------------------ */
/* A stream's hybrid decode, as the builder's decode dispatch calls it  */

/* One stream converted on the GPU: its scheduler and its device. */
struct hyb_stream {
	struct hyb_sched sched;
	int dev;                   /* the device ordinal its conversions use */
};

/* Starts s on device dev: on the CPU, or failed with the process's reason
 * (hyb_unusable_reason) when JPEGs cannot decode on a GPU here. Counts s
 * among dev's hybrid streams until hyb_stream_fini. Any thread; never
 * blocks. A dev past CUDRV_MAX_DEVICES is refused at its first decode
 * (the stream goes to the CPU, saying why). */
void hyb_stream_init(struct hyb_stream *s, int dev);
/* s is gone (no worker decodes for it any more): once dev has no hybrid
 * stream left, each worker frees its decoder for dev at its next decode
 * for another device, or at its end; a worker that decodes nothing more
 * keeps it until then. Any thread; never blocks. */
void hyb_stream_fini(struct hyb_stream *s);

/* s in words, into buf (cap bytes; returns buf): "CPU: <why>" once
 * failed, else "nvJPEG: N/8 of each batch" (the share sent now). Any
 * thread. */
const char *hyb_stream_describe(const struct hyb_stream *s, char *buf, size_t cap);

/* The builder's hook (struct bld_predecode.run; arg: the hyb_stream): the
 * n images decoded by the calling worker's decoder for the stream's device
 * (one per worker and device, made on first use: see hyb_stream_fini for
 * when it goes), out[k].view set
 * for each one decoded. A decoder that cannot be made, or a call the
 * device or nvJPEG fails, moves the stream to the CPU for good
 * (hyb_sched_fail, with why) and decodes nothing: the samples decode
 * their images themselves. Worker thread, no lock held. */
uint32_t hyb_stream_run(void *arg, const struct bld_pre_image *im, uint32_t n, uint32_t c,
			struct aug_pre *out);

#endif /* FEEDD_HYBRID_H */
