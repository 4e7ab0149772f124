/*
 * feed/gpu.h: batches to the GPU (libfeedclient, part 3).
 *
 * Batches travel as their smallest dtype (u8 pixels, u16/u32 tokens): one
 * byte per pixel crosses PCIe, and the conversion to fp32 / fp16 / bf16
 * (images, normalized per channel) or int64 (tokens) runs on the device,
 * with the kernels of kernels/ embedded in this library. The library links
 * no CUDA library: it loads the driver (libcuda.so.1) on first use, so the
 * same binary runs on nodes with no GPU, no driver or too old a driver,
 * where feed_gpu_query() says why and the same conversion runs on the CPU
 * (the kernels' CPU twins give the same bits).
 *
 * Never prints: an older driver's notice is feed_gpu_query()'s reason.
 */
#ifndef FEED_GPU_H_PUBLIC
#define FEED_GPU_H_PUBLIC

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"
#include "feed/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FEED_GPU_MAX_DEVICES 16

/* One CUDA device, as the driver names it. */
struct feed_gpu_device {
	char name[128];           /* e.g. "NVIDIA H100 80GB HBM3" */
	int cc_major, cc_minor;   /* compute capability, e.g. 9.0 */
	uint8_t uuid[16];         /* the GPU's UUID (nvidia-smi -L shows it), the
				   * same in every process whatever
				   * CUDA_VISIBLE_DEVICES renumbers */
};

/* What the GPU path can do on this machine. All fields public. */
struct feed_gpu_info {
	bool usable;              /* feed_batch_to_device() can reach a device */
	bool kernels;             /* this build embeds the CUDA kernels */
	int driver_version;       /* cuDriverGetVersion(): 1000*major + 10*minor,
				   * e.g. 13000; 0 when no driver was loaded */
	int driver_needed;        /* the least driver_version the kernels need */
	uint32_t num_devices;     /* devices the driver reports (all of them) */
	struct feed_gpu_device devices[FEED_GPU_MAX_DEVICES]; /* the first ones */
	char reason[256];         /* when !usable, why, in words, e.g.
				   * "libcuda.so.1 not found: ..." or "driver
				   * 12.4 too old: the kernels need 13.0 (r580)
				   * or newer; converting on the CPU"; else "" */
	bool ipc;                 /* usable, and CUDA IPC too (feedd's device
				   * slots, feed_stream_opts.device) */
	char ipc_reason[256];     /* when usable && !ipc, why; else "" */
};

/*
 * Fills *ret with this machine's GPU facts. The first call (of the
 * process) loads the driver and asks it, which may take a while (cuInit);
 * later calls copy what it found. Returns 0, or -EINVAL for NULL. An
 * unusable GPU path is not an error: ret->usable says it. Any thread.
 */
FEED_API int feed_gpu_query(struct feed_gpu_info *ret);

#define FEED_DEVICE_CPU (-1)      /* feed_to_device.device: host memory */

#define FEED_TO_F32 0             /* feed_to_device.dtype */
#define FEED_TO_F16 1
#define FEED_TO_BF16 2
#define FEED_TO_SAME 3            /* any fixed field, delivered as it is */

#define FEED_TO_NCHW 0            /* feed_to_device.layout */
#define FEED_TO_NHWC 1

#define FEED_MIX_NONE 0           /* feed_mix.op: images as they are */
#define FEED_MIX_MIXUP 1          /* blended with the partner */
#define FEED_MIX_CUTMIX 2         /* the partner's box pasted in */

/*
 * Mixup / cutmix for a stream's batches, as torchvision's classification
 * references and timm's Mixup do them. Zero-initialise, then set; read by
 * feed_mix_draw() and feed_batch_mix_draw().
 */
struct feed_mix_spec {
	double mixup_alpha;       /* > 0: mixup, lambda ~ Beta(alpha, alpha); 0: off */
	double cutmix_alpha;      /* > 0: cutmix, lambda ~ Beta(alpha, alpha); 0: off */
	double switch_prob;       /* with both on: the probability that a batch
				   * gets cutmix (timm's switch_prob; 0.5 is
				   * torchvision's RandomChoice of the two) */
	uint32_t num_classes;     /* soft labels: [n, num_classes]; 0: no labels */
	double label_smoothing;   /* in [0, 1]: timm's, off = s / num_classes,
				   * on = 1 - s + off */
};

/*
 * One batch's mix, as feed_batch_mix_draw() draws it (or as a caller sets
 * it), for feed_to_device.mix. Sample i is mixed with its partner, sample
 * i - 1 (sample n - 1 for sample 0): the batch rolled by one, as
 * torchvision's x.roll(1, 0).
 */
struct feed_mix {
	int op;                   /* FEED_MIX_NONE / MIXUP / CUTMIX */
	double lam;               /* the sample's own weight, in [0, 1]; the
				   * partner's is 1 - lam. Cutmix: 1 - box area /
				   * image area */
	uint32_t x1, y1, x2, y2;  /* cutmix: the partner's columns [x1, x2) and
				   * rows [y1, y2) replace the sample's */
	uint32_t num_classes;     /* soft labels' columns */
	double label_smoothing;   /* as in feed_mix_spec */
};

/*
 * The mix of batch number `batch` of epoch `epoch` of a stream seeded
 * `seed`, for images of h x w: a pure function of these (the same on every
 * machine, after a resume, for any worker count), through the Philox
 * generator of the stream's augmentations keyed apart from them. Draw
 * numbers (kernels/mix.h, feed_mix_draw_batch): word 0 picks the op (cutmix
 * when word * 2^-32 < switch_prob, with both on), words 1 and 2 cutmix's
 * centre, streams 1 and 2 the two Gamma(alpha) draws of lambda = X / (X +
 * Y) (Marsaglia-Tsang). Cutmix's box is torchvision's: half sizes
 * (int)(0.5 sqrt(1 - lambda) w) and (... h) around the centre, clamped to
 * the image; lambda is then 1 - box area / image area. With both alphas 0
 * the op is FEED_MIX_NONE and lam 1 (labels only smoothed).
 *
 * Returns 0, or -EINVAL for NULL, h or w 0, an alpha < 0 or not finite,
 * switch_prob or label_smoothing outside [0, 1]. *ret written only on
 * success. Pure; any thread.
 */
FEED_API int feed_mix_draw(const struct feed_mix_spec *spec, uint64_t seed, uint64_t epoch,
			   uint64_t batch, uint32_t h, uint32_t w, struct feed_mix *ret);

/*
 * feed_mix_draw() for batch b: its stream's seed, its epoch, and batch
 * number feed_batch_index(b) * world + rank (each rank of a job mixes
 * differently; a resume with the same world size mixes the same). Returns
 * as feed_mix_draw(). Any thread while b is held.
 */
FEED_API int feed_batch_mix_draw(const struct feed_batch *b, const struct feed_mix_spec *spec,
				 uint32_t h, uint32_t w, struct feed_mix *ret);

/* A conversion for feed_batch_to_device(). Zero-initialise, then set. */
struct feed_to_device {
	int device;               /* CUDA device ordinal (the caller's stream's),
				   * or FEED_DEVICE_CPU: dst is host memory and
				   * the CPU twin converts */
	int dtype;                /* FEED_TO_F32 / F16 / BF16: what u8 image
				   * fields become (token fields, u16 and u32,
				   * always become int64); FEED_TO_SAME: the
				   * field's bytes as they are, any fixed field
				   * (labels, say), no conversion */
	int layout;               /* FEED_TO_NCHW or FEED_TO_NHWC (images) */
	const float *mean, *std;  /* per channel, in units of x/255 (torchvision's
				   * Normalize after ToTensor); NULL: 0 and 1.
				   * Borrowed for the call. */
	size_t dst_bytes;         /* bytes at dst; checked against the output */
	const uint8_t *flip;      /* images: n flags in host memory, image i
				   * mirrored left-right when flip[i] != 0
				   * (torchvision's hflip); NULL: none. Borrowed
				   * for the call (copied before it returns).
				   * Refused for anything but an image
				   * conversion */
	/* Added after the above (a caller built against an older feed/gpu.h
	 * must be rebuilt before it sets it). */
	const struct feed_mix *mix; /* NULL: none. An image conversion: after it,
				   * the images in dst are mixed in place as
				   * *mix says (its box must fit them). An
				   * integer field of shape [n] or [n, 1] (u8 to
				   * i64) with dtype FEED_TO_F32: its labels, each
				   * in [0, mix->num_classes), become soft labels
				   * in dst, [n, num_classes] fp32, one-hot
				   * smoothed and mixed with the same lambda and
				   * partner. Borrowed for the call */
};

/*
 * Converts field `field` of b into dst. A u8 field of shape [n, h, w, c]
 * (or [n, h, w]: c = 1; c <= 4) becomes n images in to->dtype and
 * to->layout, normalized, each mirrored where to->flip says; a u16 / u32
 * field becomes int64; with FEED_TO_SAME any fixed field is copied as it
 * is (on a device: one copy from the registered region straight into dst,
 * no staging, no kernel).
 *
 * to->device >= 0: stream is the caller's CUstream / cudaStream_t (NULL:
 * the legacy default stream) on that device, whose context is current (or
 * none is: then the device's primary context is used); dst is device
 * memory there, owned by the caller. The first call on a stream registers
 * its data region for DMA (once per region: cuMemHostRegister) and
 * allocates staging memory; the driver may make either wait for work
 * already queued on the device, so never make that first call while one
 * of your streams is held behind something only this thread can let go
 * (tests/gpu/check_client_gpu_device.c hung on a GPU doing that); each call
 * enqueues on stream a copy of the field's bytes into a device staging
 * buffer the library owns (one per batch and field), the conversion
 * kernel, and an event, and returns without waiting. Converting the same
 * field of a batch again on another stream first waits (on the CPU) for
 * that batch's copies in flight, since they share the staging buffer; on
 * the same stream the stream orders them. The batch stays valid for the caller; when the
 * caller releases it (feed_release, which then does not wait either), the
 * slot goes back to the daemon only once every conversion enqueued from
 * it has run (its event completed, as seen by the next feed_next(),
 * feed_batch_to_device() or feed_stream_close() on the stream), never
 * earlier. dst must stay allocated until the caller's stream has run the
 * work, as for any kernel.
 *
 * to->device == FEED_DEVICE_CPU: converts on the calling thread into host
 * memory dst and returns when done; stream is ignored.
 *
 * to->mix: mixup or cutmix (kernels/mix.h) after the conversion, on the
 * device (kernels launched on stream after the conversion's) or on the CPU
 * (their twins: the same bits), in every dtype and layout; each product and
 * sum is rounded as torch rounds torchvision's reference
 * (x.mul_(lam).add_(x.roll(1, 0).mul_(1 - lam))), so the result equals
 * it bit for bit. Labels are checked on the host before anything is
 * enqueued: one outside [0, num_classes) is -ERANGE naming it.
 *
 * Returns 0, or: -EINVAL naming what was wrong in feed_errmsg() of the
 * stream's connection (field, dtype, shape, mean/std, dst_bytes too
 * small, a mix that does not fit); -ERANGE for a label outside
 * [0, mix->num_classes) (named); -ENODEV when the GPU path is not usable (the reason is
 * feed_gpu_query()'s, also in feed_errmsg()); -EIO when the driver fails
 * a call (named in feed_errmsg()); -ENOMEM. Call it from the thread that
 * calls feed_next() on b's stream.
 */
FEED_API int feed_batch_to_device(struct feed_batch *b, uint32_t field, void *dst,
				  const struct feed_to_device *to, void *stream);

/*
 * Whether stream st has device slots (opened with opts.device.enable and
 * granted CUDA IPC): 1, or 0 with *ret_reason (when not NULL) saying why
 * not, e.g. "feedd: the client is in another PID namespace ...", "this
 * process: libcuda.so.1 not found ..." or "" when device slots were not
 * asked for. The reason is the stream's, valid until it is closed. Any
 * thread.
 */
FEED_API int feed_stream_device(const struct feed_stream *st, const char **ret_reason);

/*
 * Field `field` of batch b as feedd put it in the batch's device slot:
 * ret->data is a device pointer (on opts.device.device, in the context
 * the stream opened it in: the one current at feed_stream_open() if it was
 * that device's, else the device's primary context, which PyTorch uses),
 * ret->dtype, rank, shape (batch axis first; images [n, c, h, w] for NCHW,
 * [n, h, w, c] for NHWC) and bytes describe it; ret->ends is NULL.
 *
 * Enqueues on `stream` (a CUstream / cudaStream_t of that context; NULL:
 * the legacy default stream) a wait for feedd's conversion of this batch:
 * work enqueued on stream afterwards sees it; the CPU does not wait. The
 * batch is then tied to stream: feed_release(b) enqueues on stream the
 * write of the slot's done word (cuStreamWriteValue32, in feedd's
 * memory), after which feedd may overwrite the device slot, so release b
 * after enqueueing the last work that reads ret->data (on stream, or on
 * streams stream waits for), not after it runs; neither waits on the CPU.
 * A batch never tied is released with the word written on the stream's
 * own internal stream (behind its previous write of that word): feedd
 * reuses its slot without waiting for any work of the caller's. Each call
 * may name the same stream again; another stream for the same batch is
 * -EINVAL. The host slot (b's host views, its credit) goes back to feedd
 * later than the word: only once feedd's conversion of b into its device
 * slot has run (the batch's ready event completed; feedd's conversion
 * reads a staging area that rebuilding the host slot overwrites), which
 * can be after the release when the conversion still waits for the done
 * word of the slot's previous batch, behind your work. Until then the
 * batch holds its credit: each feed_next() checks without waiting, and
 * one that finds every credit held so waits for the oldest conversion
 * within its timeout (feed/stream.h). feed_stream_close() gives them up
 * without waiting. feed_stream_close() waits (on the CPU) for the writes enqueued
 * that way (so for the work before them) before it closes the handles:
 * feedd frees the memory after. A process that dies with writes queued
 * behind work that never runs holds nothing: feedd writes the words
 * itself when the connection goes.
 *
 * Returns 0, or: -ENODEV when st has no device slots (feed_stream_device
 * says why), or when b came from before a daemon restart (its device slot
 * is gone: read the host copy); -EINVAL for no such field, a
 * variable-length field (host only), a released batch, a second stream;
 * -EIO when the driver fails (named in feed_errmsg()). Call it from the
 * thread that calls feed_next() on b's stream.
 */
FEED_API int feed_batch_device(struct feed_batch *b, uint32_t field, void *stream,
			       struct feed_view *ret);

#ifdef __cplusplus
}
#endif

#endif
