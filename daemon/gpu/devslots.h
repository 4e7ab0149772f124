/*
 * devslots.h: a stream's device slots, the CUDA IPC delivery of DESIGN.md
 * "GPU path". feedd owns, on the client's GPU, one device slot per host
 * slot. After a worker has built host slot i, it enqueues the copy of the
 * slot's fields to a device staging area (on a copy stream that waits for
 * nothing a client does), then, on a convert stream behind a wait until
 * the slot's "done" word (a uint32 per slot after the last device slot,
 * in the same allocation) holds the generation of the batch the device
 * slot last held (the client writes it there on the device,
 * cuStreamWriteValue32, when it released that batch), the conversion of images (u8 [n,h,w(,c)] to
 * fp32 / fp16 / bf16, NCHW or NHWC, per-channel mean/std: kernels/) and
 * tokens (u16 / u32 to int64), the other fixed fields copied as they are,
 * and the slot's interprocess "ready" event; then the batch is published
 * as always. The client opens the memory and event handles once
 * (StreamOpened.device: done_offset says where the words are) and makes
 * its stream wait on ready[i]. The CPU never waits for anything a
 * client's work gates: a worker about to rebuild host slot i waits at
 * most for its previous copy to the device (a DMA). That copy overwrites
 * staging i, which the slot's last conversion may still have to read
 * (queued behind the done word): the client gives host slot i back only
 * once ready[i] of its batch has completed (client/client_ipc.c), so a
 * slot feedd rebuilds has been converted. When the client
 * leaves, dsl_abandon() writes the words itself (a client that died with
 * its writes queued behind work that never runs never writes them), so
 * the convert stream drains and dsl_free() frees; a stream whose device
 * work has still not finished then goes to a graveyard, reaped later.
 *
 * struct dsl_gpu is the daemon's driver (kernels/cudrv.h, loaded at run
 * time: feedd links no CUDA library, and with no GPU or no driver it
 * serves host slots, saying why) with, per device that can serve CUDA
 * IPC, its primary context and the embedded kernels, made once, on
 * demand: by the first stream that asks for device slots on that device
 * (dsl_make, on a worker, no lock held), never at start.
 *
 * Threads: dsl_gpu_new on the main thread before the workers start and
 * the loop runs (loads the driver; makes no context); dsl_gpu_devices on
 * any thread; dsl_gpu_free on the main thread after the
 * workers have been joined (main.c main_serve()); dsl_plan and dsl_reply
 * on the loop thread, dsl_make on a worker (the delivery's first join);
 * dsl_before_build / dsl_after_build on workers, for different slots at
 * once (a slot is one worker's while it builds it); dsl_free on a worker
 * (the delivery's last teardown; a plan never made may be freed on the
 * loop: no driver call then); dsl_abandon on the loop thread, at any time
 * (atomics: devslots.c). Slots have their own staging areas and events,
 * so workers enqueue without a lock; the one registration of the host
 * region is claimed with an atomic; the graveyard's mutex (the only one)
 * guards its list and is never held across a driver call.
 */
#ifndef FEEDD_DEVSLOTS_H
#define FEEDD_DEVSLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "feed.pb-c.h"
#include "feed_err.h"
#include "feed_shm.h"

#define DSL_MAX_SLOTS FEED_SHM_MAX_SLOTS

struct dsl_gpu;
struct dsl;
struct fmt_schema;
struct slot_layout;
struct region;

/* What a client asked for (OpenStream.device, checked by wire.c). */
struct dsl_request {
	uint8_t uuid[16];          /* its GPU */
	int dtype;                 /* FEED_CONVERT_F32 / F16 / BF16 (images) */
	int layout;                /* FEED_CONVERT_NCHW / NHWC */
	uint32_t nmean, nstd;      /* 0..4 each: 0 means 0 and 1 */
	float mean[4], std[4];
	uint64_t max_bytes;        /* device memory it may take (slots, done
				    * words, staging): more is -ENODEV naming it */
};

/* Which GPUs feedd may use (config `gpus:`); CUDA_VISIBLE_DEVICES has
 * already hidden the others from the driver. */
struct dsl_gpu_opts {
	bool has_gpus;             /* false: every device the driver shows */
	uint64_t gpus;             /* bit i: device ordinal i */
};

/* Loads the driver (FEED_CUDA_DRIVER or libcuda.so.1) and learns its
 * devices; makes no context (dsl_make makes a device's context and loads
 * its kernels the first time a stream asks for it; one that fails is
 * named to every stream that asks). A daemon that cannot serve CUDA IPC
 * is still made: dsl_gpu_describe() says why, and dsl_plan() refuses each
 * stream with it. opts may be NULL (every device). Returns 0 or -ENOMEM.
 * Main thread, before the workers start; holds no lock. */
int dsl_gpu_new(const struct dsl_gpu_opts *opts, struct dsl_gpu **ret);
/* After every dsl_free(). Accepts NULL. */
void dsl_gpu_free(struct dsl_gpu *g);
/* One line for the log: devices and driver, or why there is no GPU. */
void dsl_gpu_describe(const struct dsl_gpu *g, char *buf, size_t cap);

/* One device as status shows it. name is the driver's, valid while g is. */
struct dsl_dev_info {
	int ordinal;
	const char *name;
	bool allowed;              /* in `gpus:` (or no `gpus:`) */
	bool context;              /* a stream made its context: feedd holds memory there */
	bool failed;               /* making it failed (the streams were told why) */
	uint64_t slot_bytes;       /* device memory the open streams' slots hold */
};

/* Fills ret[0..cap) with the devices the driver shows; returns how many
 * (0 for g NULL). Any thread (atomics). */
int dsl_gpu_devices(const struct dsl_gpu *g, struct dsl_dev_info *ret, int cap);

/* Plans device slots for lay->nslots batches of schema out (laid out as
 * lay) on the GPU named req->uuid: no device memory yet, only what they
 * would take (dsl_device_bytes). Returns 0; -ENODEV with err naming why
 * CUDA IPC cannot serve this stream (no usable GPU here, a GPU feedd does
 * not see, one without IPC, no field to put on the device, more than
 * req->max_bytes) — the stream then goes on with host slots alone and
 * the client is told; -EINVAL (mean/std or an image the conversion
 * refuses); -ENOMEM. *ret is the caller's: dsl_free(). Loop thread; cheap. */
int dsl_plan(struct dsl_gpu *g, const struct dsl_request *req, const struct fmt_schema *out,
	     const struct slot_layout *lay, struct dsl **ret, struct feed_err *err);

/* Makes what s planned on the device (its context and kernels first, if
 * no stream has made them yet): the slots, staging, streams, events and IPC
 * handles. Returns 0, or a negative code with err naming the call
 * that failed (the stream then goes on with host slots; s holds nothing
 * on the device and is still to be freed). A worker: making a context can
 * take long (allocations, the done words' first write). */
int dsl_make(struct dsl *s, struct feed_err *err);

/* After dsl_make: fills ret (DeviceSlots with ipc true) with pointers into
 * s, valid while s lives. Loop thread. */
void dsl_reply(struct dsl *s, Feed__DeviceSlots *ret);

/* Bytes of device memory s holds (slots, their done words and staging),
 * for stats and the user's limit. */
uint64_t dsl_device_bytes(const struct dsl *s);

/* Before host slot `slot` is rebuilt: waits until the device has read its
 * previous contents (the copy's event: a DMA, which waits for nothing a
 * client does). 0 or -EIO naming the call. Worker. */
int dsl_before_build(struct dsl *s, uint32_t slot, struct feed_err *err);

/* After host slot `slot` (header hdr, the data region at data/data_bytes)
 * is built and before it is published: enqueues its copy and conversion
 * into device slot `slot` and records ready[slot]; the first one asks
 * the keeper to register the region for DMA (copies read pageable memory
 * until it has). Never makes an implicitly synchronising call. 0 or -EIO
 * naming the call (the batch then fails as a build would). Worker. */
int dsl_after_build(struct dsl *s, uint32_t slot, const struct feed_shm_slot *hdr,
		    uint8_t *data, uint64_t data_bytes, struct feed_err *err);

/* The client is gone (the stream closes): feedd writes every done word
 * the convert stream may wait for, on a stream of its own that waits for
 * nothing, so whatever the client left behind (writes behind work that
 * never runs, in a process that died) holds nothing; no wait is queued
 * after this. Enqueues only, never waits. Safe while a worker makes or
 * converts into s. Accepts NULL. Loop thread. */
void dsl_abandon(struct dsl *s);

/* Frees s and takes the host data region it copied from (*data is left
 * empty): the GPU keeper (keeper.h) waits for s's copies out of the
 * region (cuStreamSynchronize: they wait for nothing a client does),
 * unregisters and unmaps it, then frees the device memory, events and
 * streams when the conversions have run, else puts s on the graveyard,
 * which it reaps every GK_TICK_MS (never waiting for the device). The
 * caller never waits: unregistering and freeing synchronise implicitly,
 * with every stream's queued device work, on the keeper alone. A plan
 * never made is freed at once (no driver call); data may be NULL then.
 * s NULL: only *data is unmapped. */
void dsl_free(struct dsl *s, struct region *data);

/* The table a delivery drives device slots through (delivery.h): the
 * functions above. */
extern const struct dlv_dev_ops dsl_dlv_ops;

/* The stream's hybrid JPEG decode in words, in buf (cap bytes; returns
 * buf): "nvJPEG: N/8 of each batch", or "CPU: " and why (hybrid.h). Any
 * thread, while the device slots live. */
const char *dsl_jpeg_describe(const struct dsl *s, char *buf, size_t cap);

#endif
