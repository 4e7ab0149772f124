/*
 * feed/stream.h: batches from feedd (libfeedclient, part 2).
 *
 * A stream delivers batches of a dataset through shared memory: the daemon
 * builds each batch straight into a slot of a region mapped here, and
 * feed_next() hands the caller a view of it with no copy and no message on
 * the socket. The caller grants `credits`: at most that many batches are
 * built and not yet released; feed_release() gives a slot back.
 *
 * When feedd restarts under a stream, feed_next() reconnects and resumes
 * at the stream's position (opts.reconnect_ms bounds how long it tries):
 * no batch is lost or returned twice. Batches held across the restart
 * stay valid until released; the old regions are unmapped (and their
 * device resources closed) by the first feed_next() after the last of
 * them is released, on that thread, never by feed_release().
 *
 * Return codes: 0 (or the FEED_END_* values where stated) on success, a
 * negative errno-style code on failure; feed_errmsg(conn) has the detail.
 *
 * Threads: one thread at a time calls feed_next() and feed_stream_close()
 * on a stream; feed_release() may be called from any thread, concurrently
 * with feed_next() (e.g. from a garbage collector). Streams of one
 * connection share it: serialise calls that use the connection
 * (feed_stream_open, feed_stream_close, and feed_next, which reconnects it
 * after a daemon restart) with its other calls.
 *
 * Never prints, never exits, never raises a signal in the host: every
 * region is checked (magic, version, seals, sizes) before it is used, and a
 * daemon that dies makes calls fail, not crash.
 */
#ifndef FEED_STREAM_H_PUBLIC
#define FEED_STREAM_H_PUBLIC

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FEED_ORDER_SEQUENTIAL 0
#define FEED_ORDER_FULL 1
#define FEED_ORDER_BLOCK_WINDOW 2
/* Node-aware (DESIGN.md "Node-aware order"): each epoch, units of `window`
 * blocks (default 1) are dealt to the `nodes` nodes by a seeded
 * permutation, samples are shuffled inside a node's share, and the node's
 * ranks split the share as DistributedSampler splits an epoch; so a node's
 * feedd reads 1/nodes of the dataset. Ranks sit node after node: rank =
 * node * (world / nodes) + local rank, as torchrun and Slurm's block
 * distribution number them. A resume token taken with N nodes resumes
 * with M nodes from the same global position, every remaining sample
 * once. The counts (drop_last, padding, pad_last) are the other modes';
 * padding repeats samples of the node's own share; eval is sequential. */
#define FEED_ORDER_NODE 3

/* FEED_ORDER_NODE: whether a node's share changes every epoch */
#define FEED_NODE_DEAL_ROTATE 0 /* a new deal every epoch: more random; every
				 * node reads 1/nodes of the dataset anew
				 * each epoch unless its cache holds it all */
#define FEED_NODE_DEAL_FIXED 1  /* the same deal every epoch (same nodes): a
				 * cache that holds 1/nodes of the dataset
				 * serves every epoch after the first */

/* opts.on_error: what a sample the pipeline cannot take does */
#define FEED_ON_ERROR_FAIL 0  /* the stream stops naming it (DataLoader's way) */
#define FEED_ON_ERROR_SKIP 1  /* replaced by the next good sample of the epoch */

/* feed_next() results besides 0 (a batch) */
#define FEED_END_OF_EPOCH 1   /* every batch of the epoch was returned */
#define FEED_END_OF_STREAM 2  /* every requested epoch was returned */

/* Device slots (CUDA IPC, feed/gpu.h feed_batch_device): feedd copies each
 * batch to this GPU and converts it there, into memory it owns. Zero:
 * host slots only. */
struct feed_stream_device {
	bool enable;              /* ask for device slots */
	int device;               /* CUDA device ordinal, as this process numbers
				   * them (the GPU is sent by UUID) */
	int dtype;                /* what u8 image fields ([h, w] or [h, w, c],
				   * c <= 4) become: FEED_TO_F32 / F16 / BF16;
				   * u16 / u32 fields become int64, other fixed
				   * fields stay as they are, variable ones stay
				   * on the host */
	int layout;               /* FEED_TO_NCHW or FEED_TO_NHWC */
	uint32_t nmean;           /* values in mean and in std: 0 (mean 0, std 1),
				   * 1 (every channel) or one per channel */
	float mean[4], std[4];    /* torchvision's units, of x/255 */
};

/* What to open. Zero-initialise, then set what you need. */
struct feed_stream_opts {
	const char *dataset;      /* required: a name from feed_list_datasets() */
	uint32_t batch;           /* required: samples per batch */
	uint32_t credits;         /* batches built ahead and held; 0 = 4 */
	uint64_t epochs;          /* the last epoch delivered is epochs-1 (counted
				   * from 0, also when resuming); 0 = until closed */
	bool drop_last;           /* each rank's share cut to whole batches, as
				   * DistributedSampler(drop_last=True) with
				   * DataLoader(drop_last=True) */
	bool pad_last;            /* without drop_last: fill each rank's last
				   * batch by wrap-around, so every batch is
				   * full (static shapes). Default (both false):
				   * DataLoader's counts, each rank's share
				   * padded to equal counts as DistributedSampler
				   * does, its last batch partial */
	uint64_t seed;            /* order and augmentation randomness */
	int order;                /* FEED_ORDER_* */
	uint32_t window;          /* FEED_ORDER_BLOCK_WINDOW: blocks per window
				   * (0 = 8); FEED_ORDER_NODE: blocks per dealt
				   * unit (0 = 1) */
	uint32_t rank, world;     /* this process's share; world 0 = 1 */
	bool eval;                /* sequential, each sample once across ranks */
	const char *pipeline;     /* "random_crop(size=28, pad=2) | hflip(p=0.5)",
				   * a configured pipeline's name, or NULL;
				   * "concat(seq_len=L)" or "pack(seq_len=L, ...)"
				   * on a token-document dataset: samples are rows
				   * (fields input_ids, labels, position_ids,
				   * document_ids, and cu_seqlens, variable int32:
				   * the field's bytes are the batch's flattened
				   * cu_seqlens, rows * L last) */
	uint64_t start_epoch;     /* first batch to deliver */
	uint64_t start_batch;
	const void *resume;       /* a token from feed_stream_resume_token():
				   * continue exactly where it was taken
				   * (start_* are then ignored); the daemon
				   * refuses a token whose dataset version,
				   * pipeline, seed, batch or order differ */
	size_t resume_len;
	int reconnect_ms;         /* when feedd goes away (a restart),
				   * feed_next() reconnects to the same socket
				   * and resumes at the stream's position,
				   * retrying for this long, to the
				   * millisecond (the last attempt is made at
				   * the deadline); 0 = 30000,
				   * negative = never (fail with -ECONNRESET) */
	const char *group;        /* NULL, or a group name (1 to 63 of A-Z a-z
				   * 0-9 _ . -): streams of one user opened
				   * with the same group and the same dataset,
				   * pipeline, seed, batch, order, window, rank,
				   * world, drop_last, pad_last, eval, on_error
				   * and max_bad receive
				   * the same batches, built once. A mismatch is
				   * refused naming the option (-EINVAL); another
				   * user's group, -EACCES. A stream joining a
				   * group that runs starts at its next batch
				   * (feed_stream_group_start(); start_*, resume
				   * choose nothing then) and stops after epoch
				   * epochs-1 as any stream. The batches are
				   * copy-on-write: writing into one changes it
				   * for this process only. A member that
				   * releases nothing for the daemon's group
				   * timeout (30 s by default) is detached: its
				   * next feed_next() fails with FEED_EDETACHED,
				   * the batches it holds stay valid until
				   * released. credits is what it may hold at a
				   * time. After a daemon restart a member
				   * rejoins where the group then is (the first
				   * to come back starts it at its own position):
				   * unlike a plain stream's, its batches may
				   * skip or repeat across the restart. */
	uint32_t group_depth;     /* with a new group: slots the fastest member
				   * may run ahead of the slowest, up to the
				   * daemon's max_credits; 0 = twice credits
				   * (within max_credits). A joiner's is the
				   * group's */
	struct feed_stream_device device; /* CUDA IPC: see feed/gpu.h. When
				   * feedd or this process cannot serve it (no
				   * GPU, another PID namespace, a group, ...)
				   * the stream opens with host slots alone and
				   * feed_stream_device() says why */
	int on_error;             /* FEED_ON_ERROR_*. With SKIP, a sample that
				   * fails (an image that does not decode) is
				   * replaced by the sample at the next position
				   * of the epoch's global order that builds (the
				   * same on every run, for any worker count and
				   * after a resume); the batch keeps its size and
				   * says where (feed_batch_replaced()); feedctl
				   * status counts them. Under eval the sample is
				   * dropped instead, the batch shorter
				   * (feed_batch_dropped()). With FAIL, feed_next()
				   * returns the error (-EBADMSG, ...), naming the
				   * sample, once the batches before it are read */
	uint64_t max_bad;         /* SKIP: past this many replaced samples in an
				   * epoch the stream stops (-EBADMSG naming
				   * them); 0 = 0.1% of the epoch, at least 1 */
	uint32_t nodes;           /* FEED_ORDER_NODE: nodes of the job, dividing
				   * world; 0 = 1. The client reads no
				   * environment: the Python Loader derives
				   * nodes and node from torchrun or Slurm */
	uint32_t node;            /* FEED_ORDER_NODE: this rank's node, which
				   * must be rank / (world / nodes) (-EINVAL
				   * naming both otherwise) */
	int node_deal;            /* FEED_ORDER_NODE: FEED_NODE_DEAL_* */
	/* A mixture (DESIGN.md "Mixtures"): nmixture sources (1 to
	 * FEED_MIXTURE_MAX) read as one stream, or NULL / 0. Each row comes
	 * from one source, the next going to the source furthest below its
	 * share (weight / sum of weights) of the rows so far; each batch has
	 * an int32 field "source" (the row's source index here), and
	 * feed_batch_samples() gives each row's sample in its source. Each
	 * source keeps its own epochs (a source that runs out starts its
	 * next, reshuffled); the mixture's epoch holds samples_per_epoch
	 * rows (0: its sources' epochs together). dataset may then be NULL,
	 * or a configured mixture's name with nmixture 0. The sources'
	 * schemas must agree (a mismatch is refused naming source and
	 * field); order FULL or SEQUENTIAL; no group, on_error FAIL. A
	 * resume token carries every source's position: opened with other
	 * weights it continues each source from there under the new shares.
	 * The array and its strings are copied at the open. */
	const struct feed_mixture_source *mixture;
	uint32_t nmixture;
	uint64_t samples_per_epoch;
};

/* One source of a mixture (feed_stream_opts.mixture). */
#define FEED_MIXTURE_MAX 8
struct feed_mixture_source {
	const char *dataset;      /* a name from feed_list_datasets() */
	double weight;            /* >= 0, finite; at least one above 0 */
	double repeat;            /* Mosaic's repeat: the source's epoch is
				   * repeat x its samples; 0 = 1 */
	uint64_t choose;          /* Mosaic's choose: its epoch is this many
				   * rows (overrides repeat); 0 = none */
};

/* feed_next() on a group member the daemon detached (it released nothing
 * for the group timeout); feed_errmsg() names the group and the timeout. */
#define FEED_EDETACHED (-67) /* -ENOLINK */

/* Facts about an open stream; owned by it, valid until it is closed. */
struct feed_stream_info {
	uint32_t id;
	uint32_t num_fields;
	const struct feed_field *fields;  /* each batch's fields, sample axis not
					   * included in shape */
	uint64_t batches_per_epoch;       /* for this rank, in the start epoch: the
					   * whole epoch's count, also when the
					   * stream resumed in its middle */
	uint64_t start_epoch, start_batch;/* the first batch delivered: its epoch
					   * and feed_batch_index() */
	uint32_t credits;
	uint32_t batch;
	const char *pipeline;             /* canonical text */
	uint64_t pipeline_hash;
	const char *dataset_version;
	const char *note;                 /* advice from the daemon, may be "" */
	const char *group;                /* the group joined, or "" */
	uint32_t group_depth;             /* its slots (a group: may exceed credits) */
	uint32_t group_members;           /* members when this one joined, itself included */
};

/* One field of a batch: a view into shared memory. */
struct feed_view {
	void *data;               /* writable for a stream's only reader */
	size_t bytes;             /* bytes at data */
	int dtype;                /* FEED_DTYPE_* */
	uint32_t rank;            /* entries of shape; shape[0] = samples */
	uint64_t shape[FEED_MAX_RANK]; /* variable fields: shape[1] = 0 */
	const uint64_t *ends;     /* variable fields: shape[0]+1 byte offsets
				   * into data, sample i is ends[i]..ends[i+1];
				   * NULL for fixed fields */
};

struct feed_stream;
struct feed_batch;

/* Opens a stream on conn. Blocks up to the connection's timeout while the
 * daemon creates the regions. *ret is freed by feed_stream_close(); conn
 * must outlive it. Errors: -EINVAL naming the option, -ENOENT (dataset),
 * -EACCES, -EUSERS/-ENOSPC (a per-user limit, named), -ENOSPC (shared
 * memory short in the daemon), -EPROTO (regions failed their checks), and
 * those of feed_list_datasets().
 * The stream is labelled with the job it belongs to, for `feedctl status`
 * and the daemon's metrics: the environment's FEED_JOB_ID, else
 * SLURM_JOB_ID, else TORCHELASTIC_RUN_ID (the first set and not empty),
 * read at each open (a reopening after a daemon restart too); its first
 * FEED_JOB_MAX bytes, anything but printable ASCII sent as '?'. */
FEED_API int feed_stream_open(struct feed_conn *conn, const struct feed_stream_opts *opts,
			      struct feed_stream **ret);

/* The stream's facts (NULL for NULL). Owned by st, valid until
 * feed_stream_close(); not changed by a reconnection. Does not block; any
 * thread. */
FEED_API const struct feed_stream_info *feed_stream_info(const struct feed_stream *st);

/* Waits up to timeout_ms (-1: forever, 0: poll) for the next batch.
 * Returns 0 with *ret set, FEED_END_OF_EPOCH or FEED_END_OF_STREAM (once
 * each, *ret untouched), or: -ETIMEDOUT when no batch came within
 * timeout_ms, counted from the call (feed_errmsg() names the stream, its
 * dataset, the wait and the credits held here; the stream is unchanged and
 * the next call waits again: a caller that wants a deadline for a daemon
 * that hangs passes it here, as feedclient.Loader(timeout=) does); -ENOBUFS when every credit is held
 * by batches not yet released (release one first); -ECONNRESET when the
 * daemon went away; the daemon's code when it stopped the stream (e.g.
 * -EBADMSG for a corrupt shard, with shard and block in feed_errmsg()).
 * Does not block when a batch is ready. When the daemon goes away, it
 * reconnects for up to opts.reconnect_ms, counted from the first attempt,
 * within timeout_ms too: past timeout_ms it returns -ETIMEDOUT (feed_errmsg()
 * says it is reconnecting and how long reconnect_ms has left) and the next
 * call goes on reconnecting, so a caller that passes short waits stays
 * responsive (Ctrl-C); it returns -ECONNRESET only if the daemon did not
 * come back within reconnect_ms, or
 * -ENOMEM if memory ran out while reopening: then the stream and every
 * batch held stay as they were, and the next call tries again. With device
 * slots (feed/gpu.h), a released batch keeps its credit until feedd's
 * conversion of it has run; when every credit is held so and timeout_ms
 * is not 0, it waits for that conversion (polling, within timeout_ms:
 * -ETIMEDOUT, naming them, past it); with timeout_ms 0 it is -ENOBUFS. */
FEED_API int feed_next(struct feed_stream *st, int timeout_ms, struct feed_batch **ret);
/* When the END_* values come: FEED_END_OF_EPOCH right after the last batch
 * of every epoch this stream delivered, FEED_END_OF_STREAM right after the
 * last epoch's (opts.epochs). A stream opened with a token taken after an
 * epoch's last batch begins with the next epoch's first batch, with no
 * FEED_END_OF_EPOCH before it (the epoch ended in the stream that delivered
 * its last batch, so end-of-epoch work does not run twice); a token taken
 * after the last epoch's last batch gives FEED_END_OF_STREAM at once. A
 * reconnection after a daemon restart loses and repeats no batch and no
 * END_* value. */

/* Position and content of a batch; valid until it is released. They do
 * not block; any thread that holds b. feed_batch_samples() points to
 * feed_batch_size() entries, owned by the batch. */
FEED_API uint64_t feed_batch_epoch(const struct feed_batch *b);
/* The batch's number within its epoch, from 0 at the epoch's first batch,
 * also after a resume token or a reconnection (batch 37 is 37). Only when
 * a token taken with another world or batch size resumes in the middle of
 * an epoch (no batch of this stream starts exactly there) do the rest of
 * that epoch's batches count on from the batch the position falls in. */
FEED_API uint64_t feed_batch_index(const struct feed_batch *b);
FEED_API uint32_t feed_batch_size(const struct feed_batch *b);    /* samples */
FEED_API const uint64_t *feed_batch_samples(const struct feed_batch *b); /* dataset indices */
FEED_API bool feed_batch_padded(const struct feed_batch *b);      /* holds wrap-around repeats */
/* How many positions of b hold a replacement for a sample that failed
 * (opts.on_error FEED_ON_ERROR_SKIP); feed_batch_samples() names what is
 * there. With ret_bits, *ret_bits is set to the bitmap (bit i % 64 of
 * word i / 64: position i), owned by the batch, or NULL when none. */
FEED_API uint32_t feed_batch_replaced(const struct feed_batch *b, const uint64_t **ret_bits);
/* The dataset index of the sample that failed at replaced position i
 * into *ret (feed_batch_replaced() says which positions), to name its
 * file. Returns 0; -ENOENT when position i holds no replacement, -ERANGE
 * past the batch's first 64 failures (counted, not named), -ENOTSUP from a
 * feedd that does not send them, -EINVAL for a bad argument. Any thread
 * that holds b; does not block. */
FEED_API int feed_batch_failed(const struct feed_batch *b, uint32_t i, uint64_t *ret);
/* The samples left out of b (Eval with FEED_ON_ERROR_SKIP: a sample that
 * fails is dropped, never replaced, so the batch holds fewer, possibly
 * none, and every good sample of the epoch exactly once). Returns their
 * count (0 outside eval skip). Any thread that holds b; does not block. */
FEED_API uint32_t feed_batch_dropped(const struct feed_batch *b);
/* The dataset index of b's k-th dropped sample (0 .. feed_batch_dropped()
 * - 1, in the order they were laid out) into *ret, to name its file.
 * Returns 0; -ENOENT past the count, -ERANGE past the batch's first 64
 * failures (counted, not named), -ENOTSUP from a feedd that does not send
 * them, -EINVAL for a bad argument. Any thread that holds b; does not
 * block. */
FEED_API int feed_batch_dropped_sample(const struct feed_batch *b, uint32_t k, uint64_t *ret);
/* The daemon's CLOCK_MONOTONIC (ns) when it published the batch. */
FEED_API uint64_t feed_batch_publish_ns(const struct feed_batch *b);

/* View of field i (0 .. num_fields-1). Returns 0 or -EINVAL. */
FEED_API int feed_batch_field(const struct feed_batch *b, uint32_t i, struct feed_view *ret);

/* The index of b's field called name (exactly, as feed_stream_info()
 * lists it), for feed_batch_field(). Every batch of a stream has the same
 * fields, so one look-up serves them all. Returns the index (>= 0),
 * -ENOENT if there is no such field, -EINVAL for NULL. name stays the
 * caller's. Does not block; any thread that holds b. */
FEED_API int feed_batch_field_index(const struct feed_batch *b, const char *name);

/* Gives the batch's slot back to the daemon; b is invalid afterwards, and
 * so is every view of it (in a group, the pages this process wrote are
 * dropped: madvise, so a release may enter the kernel). Does not wait: a
 * slot whose copies (feed_batch_to_device) or whose conversion into a
 * device slot (feed_batch_device) have not run yet goes back once they
 * have (feed/gpu.h). Any thread. Returns 0, or -EINVAL for a batch
 * already released. */
FEED_API int feed_release(struct feed_batch *b);

/* A batch detached from its slot (feed_batch_detach); opaque. */
struct feed_detached;

/*
 * Detaches held batch b from its slot: the pages under b's views are
 * replaced, at the same addresses, by a private copy of their bytes (so
 * every pointer into b stays valid and reads what it read), and the slot
 * goes back to feedd as by feed_release(b), which b then is. For a trainer
 * that keeps small views of many batches (a row for logging) without
 * running out of credits. Costs one copy of the slot.
 * On success *ret owns the copy until feed_detached_free(*ret), which must
 * come before feed_stream_close() of b's stream (the copy lies in the
 * stream's mapping). Call it on the thread that calls feed_next(), not
 * concurrently with feed_release(b). Returns 0; -EINVAL (b not held or
 * NULL), -ENOTSUP (a group member's batch, one from before a daemon
 * restart, feedd's device slots, or slots that share pages: an older
 * feedd), -EBUSY (the stream's memory is pinned or has device copies
 * registered: feed/gpu.h), or mmap's error; on failure b is still held.
 */
FEED_API int feed_batch_detach(struct feed_batch *b, struct feed_detached **ret);

/* Frees the copy feed_batch_detach() made: every view of that batch is
 * invalid afterwards. Any thread; NULL is a no-op. */
FEED_API void feed_detached_free(struct feed_detached *d);

/* How many batches of st feed_batch_detach() has detached so far (for
 * status lines and metrics). Any thread. */
FEED_API uint64_t feed_stream_detached(const struct feed_stream *st);

/* The stream's position as an opaque token (at most FEED_RESUME_MAX
 * bytes): the next batch not yet returned by feed_next(). Does not block
 * and talks to nobody; call it from the thread that calls feed_next(),
 * whose position it reads. The caller owns buf. Opening a stream
 * with it (opts.resume) continues with exactly the batches that would have
 * come, also in another process, after a daemon restart, or with another
 * world size (the same global position). Writes the token to buf and its
 * length to *ret_len. Returns 0, -ENOSPC when cap is too small (a buf of
 * FEED_RESUME_MAX bytes never is), or -EINVAL for a NULL argument; on
 * failure neither buf nor *ret_len is written. */
#define FEED_RESUME_MAX 256
FEED_API int feed_stream_resume_token(const struct feed_stream *st, void *buf, size_t cap,
				      size_t *ret_len);

/* Where a group member starts: the epoch and feed_batch_index() of the
 * first batch it receives (a late joiner's first epoch is the rest of
 * that epoch). Writes both and returns 0, -ENOENT for a stream in no
 * group, -EINVAL for NULL. Does not block; any thread. */
FEED_API int feed_stream_group_start(const struct feed_stream *st, uint64_t *ret_epoch,
				     uint64_t *ret_batch);

/* For callers with their own event loop: an eventfd that becomes readable
 * when a batch may be ready, once feed_next(st, 0, ...) has returned
 * -ETIMEDOUT (that call asks the daemon to ring it). When it is readable,
 * call feed_next(st, 0, ...) until it returns -ETIMEDOUT again; it clears
 * the descriptor. Owned by the stream; it changes when feed_next()
 * reconnects after a daemon restart, so fetch it again after each call.
 * feed_next() with timeout 0 neither reconnects nor notices a daemon that
 * went away: call it with a timeout now and then to find out. */
FEED_API int feed_stream_fd(const struct feed_stream *st);

/* Tells feedd how long the caller's own next() took, from its entry to
 * its return, ns, around one or more feed_next() calls: the stream's
 * reader wait (status' reader_wait_ns, `feedctl top`'s WAIT%) then counts
 * the whole of it, as the loop's own measure does (time in next() over
 * wall time), not only the time feed_next() slept: what feed_next()
 * counted since the last note is topped up to ns (never taken back).
 * Without calls, the reader wait is feed_next()'s sleeps alone. Returns 0,
 * or -EINVAL for a NULL st. The thread that calls feed_next(). */
FEED_API int feed_stream_note_next(struct feed_stream *st, uint64_t ns);

/* One delivered batch as feed_next_desc() describes it. Every member is
 * 64 bits wide, in this order, so a binding may read it as uint64_t[7]. */
struct feed_batch_desc {
	uint64_t epoch;     /* feed_batch_epoch() */
	uint64_t index;     /* feed_batch_index() */
	uint64_t nsamples;  /* feed_batch_size() */
	uint64_t slot;      /* the slot it fills (0 .. credits - 1): a slot's
			     * fields lie at the same addresses from one
			     * delivery to the next, until it is detached
			     * (feed_batch_detach) or feedd restarts */
	uint64_t padded;    /* feed_batch_padded(): 1 or 0 */
	uint64_t nreplaced; /* feed_batch_replaced()'s count */
	uint64_t ndropped;  /* feed_batch_dropped() */
};

/* Where one field of a batch lies: feed_batch_field()'s data and bytes
 * (a fixed field's shape is its schema's with feed_batch_size() rows). */
struct feed_field_span {
	uint64_t data;      /* the address, as uintptr_t */
	uint64_t bytes;
};

/* feed_next() for bindings that pay per call: first, when note_ns is not
 * 0, feed_stream_note_next(st, note_ns) (the caller's previous next(),
 * told one call late so that nothing runs after its batch is in hand);
 * then feed_next(st, timeout_ms, ret); on a batch (0), also writes
 * *ret_desc and the span of fields 0 .. nfields - 1 into ret_fields
 * (caller-owned; nfields may be fewer than the stream's). Returns what
 * feed_next() returns, and writes nothing else unless it is 0; -EINVAL
 * for NULL st, ret or ret_desc, a NULL ret_fields with nfields, or
 * nfields past the stream's fields. Blocks as feed_next() does; the
 * thread that calls feed_next(). */
FEED_API int feed_next_desc(struct feed_stream *st, int timeout_ms, uint64_t note_ns,
			    struct feed_batch **ret, struct feed_batch_desc *ret_desc,
			    struct feed_field_span *ret_fields, uint32_t nfields);

/* Pins the stream's data region for the caller's own copies: registers
 * it with the CUDA driver loaded at run time (cuMemHostRegister, PORTABLE,
 * in device's primary context, which the stream retains until closed), so
 * that a copy from a batch's memory to the GPU (torch's
 * .to("cuda", non_blocking=True), cudaMemcpyAsync) is a real asynchronous
 * DMA. The region after a reconnection is registered in turn; each is
 * unregistered before it is unmapped. Calling it again does nothing more.
 * Not needed for feed_batch_to_device(), which registers what it reads.
 * Returns 0; -ENODEV when no CUDA driver is found (feed_errmsg() says why:
 * the driver library, cuInit, no device); -EINVAL for a device the driver
 * does not have; -EIO when the driver refuses (named); -ENOMEM. Blocks
 * while the driver registers (milliseconds per GiB). The thread that calls
 * feed_next(). */
FEED_API int feed_stream_pin(struct feed_stream *st, int device);

/* Tells the daemon, unmaps and frees. Batches not released are released.
 * Accepts NULL. Blocks up to the connection's timeout while telling the
 * daemon. Returns 0 or the error of telling the daemon (the stream is
 * freed anyway). */
FEED_API int feed_stream_close(struct feed_stream *st);

#ifdef __cplusplus
}
#endif

#endif
