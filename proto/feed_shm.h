/*
 * feed_shm.h: the shared-memory contract between feedd and libfeedclient
 * (DESIGN.md "Delivery"). Everything here is offsets and fixed-width
 * integers, never pointers; each region starts with a magic and a version
 * that the mapper checks.
 *
 * Three memfds per stream:
 *   control  daemon-written; the client maps it read-only (sealed SHRINK,
 *            GROW, FUTURE_WRITE, SEAL). Header, ready ring, slot headers.
 *   data     the slots (field bytes only, 64-byte aligned); sealed SHRINK,
 *            GROW, SEAL; a single stream's reader may map it writable.
 *            A group's (one data region, one control and release region
 *            per member) is also sealed FUTURE_WRITE and its slots are
 *            whole pages: members map it MAP_PRIVATE, so an in-place write
 *            copies the page for that member alone, and drop those pages
 *            (madvise MADV_DONTNEED) when they release the slot.
 *   release  client-written (sealed SHRINK, GROW, SEAL): the release ring
 *            and both waiting flags. The daemon treats all of it as
 *            untrusted input: it reads each entry once, bounds the head,
 *            and checks every (slot, generation) against its own table.
 *
 * The rings' protocol (publish, arm, take, with the fences both sides
 * need) is proto/feed_ring.h's, for the ready ring (daemon produces,
 * client consumes; the client's flag is rel->client_waiting) and the
 * release ring (client produces, daemon consumes; rel->daemon_waiting).
 * The daemon reads a client-written head as untrusted: one behind its
 * tail, or more than the capacity ahead, is tampering.
 */
#ifndef FEED_SHM_H
#define FEED_SHM_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FEED_SHM_CTL_MAGIC 0x4c544346u  /* "FCTL" */
#define FEED_SHM_REL_MAGIC 0x4c455246u  /* "FREL" */
#define FEED_SHM_VERSION 1
#define FEED_RESUME_MAGIC 0x31545246u  /* "FRT1", feed.proto ResumeToken */
#define FEED_SHM_MAX_FIELDS 16
#define FEED_SHM_MAX_RANK 6  /* batch axis + 5 */
#define FEED_SHM_ALIGN 64
/* Slots of one stream's (or group's) regions, hence the most credits a
 * stream and the deepest depth a group may have: a member's held slots
 * are one bit each of a uint64_t (daemon), and the client's and feedd's
 * per-slot tables (device slots, events) are this long. */
#define FEED_SHM_MAX_SLOTS 64
/* Members of one group, each with its own control and release region: a
 * slot's holders are one bit each of a uint64_t. */
#define FEED_SHM_MAX_MEMBERS 64

/* Ready ring entries that are not slots. */
#define FEED_READY_EPOCH_END 0xfffffff0u  /* gen = the epoch that ended */
#define FEED_READY_STREAM_END 0xfffffff1u /* every requested epoch done */
#define FEED_READY_ERROR 0xfffffff2u      /* ctl->error_* say why */

/* Ring entry: slot in the low 32 bits, generation in the high. */
static inline uint64_t feed_ring_entry(uint32_t slot, uint32_t gen)
{
	return (uint64_t)gen << 32 | slot;
}
static inline uint32_t feed_ring_slot(uint64_t e) { return (uint32_t)e; }
static inline uint32_t feed_ring_gen(uint64_t e) { return (uint32_t)(e >> 32); }

/* Control region header, at offset 0 of the control memfd. */
struct feed_shm_ctl {
	uint32_t magic;           /* FEED_SHM_CTL_MAGIC */
	uint32_t version;         /* FEED_SHM_VERSION */
	uint64_t ctl_bytes;       /* size of the control memfd */
	uint64_t data_bytes;      /* size of the data memfd */
	uint64_t rel_bytes;       /* size of the release memfd */
	uint32_t nslots;          /* = credits granted */
	uint32_t ring_cap;        /* ready ring entries, a power of two */
	uint64_t ring_off;        /* offset of uint64_t ring[ring_cap] */
	uint64_t slots_off;       /* offset of the first slot header */
	uint64_t slot_hdr_bytes;  /* stride between slot headers */
	uint64_t slot_bytes;      /* stride between data slots */
	uint32_t nfields;         /* output fields of every batch */
	uint32_t batch;           /* largest sample count of a batch */
	int32_t error_code;       /* with FEED_READY_ERROR: negative errno */
	uint32_t reserved0;
	char error_msg[256];      /* with FEED_READY_ERROR: NUL-terminated */
	uint8_t pad0[64];
	/* Written by the daemon as it publishes; on its own cache line. */
	_Alignas(64) _Atomic uint64_t ready_head;
	uint8_t pad1[56];
};

/* One output field of one batch, inside a slot header. */
struct feed_shm_field {
	uint32_t dtype;           /* enum feed_dtype */
	uint32_t rank;            /* entries of shape, batch axis first */
	uint64_t shape[FEED_SHM_MAX_RANK]; /* variable fields: shape[1] = 0 */
	uint64_t offset;          /* bytes from the start of the data region */
	uint64_t bytes;           /* bytes used at offset */
	uint64_t var_off;         /* variable fields: offset in the control
				   * region of uint64_t ends[n+1] (byte
				   * offsets relative to `offset`); else 0 */
};

/* Header of slot i, at ctl->slots_off + i * ctl->slot_hdr_bytes; followed
 * by uint64_t sample[batch] (dataset index of every sample), then
 * uint64_t replaced[FEED_SHM_REPLACED_WORDS(batch)] (bit i of word i / 64:
 * position i holds a replacement for a sample that failed, on_error skip;
 * meaningful only with FEED_SLOT_REPLACED, and sample[i] is then the
 * replacement's index; with FEED_SLOT_DROPPED instead, position i's
 * sample was dropped), then uint64_t failed[FEED_SHM_FAILED_MAX] (the
 * indices of the batch's first samples that failed, in position order:
 * the k-th replaced position's failed sample is failed[k], what a
 * trainer's warning names), then the variable fields' ends tables. */
struct feed_shm_slot {
	uint32_t gen;             /* matches the ready entry's generation */
	uint32_t nsamples;
	uint64_t epoch;
	uint64_t index;           /* batch number within the epoch */
	uint32_t flags;           /* FEED_SLOT_* */
	uint32_t nfields;
	uint64_t publish_ns;      /* CLOCK_MONOTONIC when published (latency figures) */
	uint64_t position;        /* global position of the first sample: where a
				   * resume token continues from */
	struct feed_shm_field field[FEED_SHM_MAX_FIELDS];
	uint64_t sample[];        /* nsamples used of batch */
};
#define FEED_SLOT_PADDED 1u        /* holds wrap-around padding samples */
#define FEED_SLOT_REPLACED 2u      /* some positions hold replacements (bitmap) */
/* Eval with on_error skip: samples that failed were left out (a
 * replacement would deliver a sample twice). nsamples counts those built
 * (0 when all failed); the bitmap marks the positions dropped, of the
 * batch as it was laid out (ctl->batch bits at most, beyond nsamples
 * too), and failed[k] is the k-th dropped sample's index. */
#define FEED_SLOT_DROPPED 4u
#define FEED_SHM_REPLACED_WORDS(batch) (((uint64_t)(batch) + 63) / 64)

/* The replaced bitmap of a slot header of a stream of `batch` samples. */
static inline uint64_t *feed_shm_replaced(struct feed_shm_slot *h, uint32_t batch)
{
	return &h->sample[batch];
}

/* The failed samples' indices, after the bitmap: FEED_SHM_FAILED_MAX of
 * them at most per batch (the rest are counted by the bitmap, unnamed),
 * so a large batch's headers grow by 512 bytes only. FEED_SHM_FAILED_END:
 * the header's bytes up to their end. */
#define FEED_SHM_FAILED_MAX 64
static inline uint64_t *feed_shm_failed(struct feed_shm_slot *h, uint32_t batch)
{
	return &h->sample[batch + FEED_SHM_REPLACED_WORDS(batch)];
}
#define FEED_SHM_FAILED_END(batch) \
	(sizeof(struct feed_shm_slot) + 8ull * (batch) + 8ull * FEED_SHM_REPLACED_WORDS(batch) + \
	 8ull * FEED_SHM_FAILED_MAX)

/* Release region header, at offset 0 of the release memfd; the ring of
 * uint64_t entries follows at rel_off. Client-writable: never trusted. */
struct feed_shm_rel {
	uint32_t magic;           /* FEED_SHM_REL_MAGIC */
	uint32_t version;
	uint32_t ring_cap;        /* a power of two */
	uint32_t reserved0;
	uint64_t ring_off;
	/* The client's ready-ring tail, stored as it takes each entry: in a
	 * group, which delivered slots a detached member had already taken
	 * (those stay intact for it; the rest go back). Untrusted, clamped. */
	_Atomic uint64_t ready_tail;
	/* Nanoseconds the client's readers spent blocked waiting for a batch,
	 * cumulative; the client adds, the daemon only shows it (untrusted).
	 * Each group member has its own release region, hence its own. */
	_Atomic uint64_t reader_wait_ns;
	/* Batches the client moved off their slots into private memory
	 * (feed_batch_detach: held views), cumulative; the client adds, the
	 * daemon only shows it, clamped to the batches published (untrusted). */
	_Atomic uint64_t detached_batches;
	uint8_t pad0[16];
	_Alignas(64) _Atomic uint64_t rel_head;      /* client bumps */
	uint8_t pad1[56];
	_Alignas(64) _Atomic uint32_t client_waiting; /* client sets, daemon clears */
	uint8_t pad2[60];
	_Alignas(64) _Atomic uint32_t daemon_waiting; /* daemon sets, client clears */
	uint8_t pad3[60];
};

/* Two programs built apart (perhaps by other compilers) map these structs:
 * their layout is the contract, so any change to it fails here, not as a
 * wrong read in a trainer. The atomics must be lock-free, or they would not
 * work across processes at all. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && sizeof(_Atomic uint64_t) == 8,
	       "64-bit atomics in shared memory must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && sizeof(_Atomic uint32_t) == 4,
	       "32-bit atomics in shared memory must be lock-free");
_Static_assert(sizeof(struct feed_shm_ctl) == 512 &&
	       offsetof(struct feed_shm_ctl, error_msg) == 88 &&
	       offsetof(struct feed_shm_ctl, ready_head) == 448,
	       "feed_shm_ctl layout (FEED_SHM_VERSION 1)");
_Static_assert(sizeof(struct feed_shm_field) == 80 &&
	       offsetof(struct feed_shm_field, offset) == 56,
	       "feed_shm_field layout (FEED_SHM_VERSION 1)");
_Static_assert(offsetof(struct feed_shm_slot, field) == 48 &&
	       offsetof(struct feed_shm_slot, sample) == 48 + 80 * FEED_SHM_MAX_FIELDS &&
	       offsetof(struct feed_shm_slot, sample) % 8 == 0,
	       "feed_shm_slot layout (FEED_SHM_VERSION 1)");
_Static_assert(sizeof(struct feed_shm_rel) == 256 &&
	       offsetof(struct feed_shm_rel, ready_tail) == 24 &&
	       offsetof(struct feed_shm_rel, reader_wait_ns) == 32 &&
	       offsetof(struct feed_shm_rel, detached_batches) == 40 &&
	       offsetof(struct feed_shm_rel, rel_head) == 64 &&
	       offsetof(struct feed_shm_rel, client_waiting) == 128 &&
	       offsetof(struct feed_shm_rel, daemon_waiting) == 192,
	       "feed_shm_rel layout (FEED_SHM_VERSION 1): each flag on its own cache line");

static inline uint64_t feed_shm_align(uint64_t x)
{
	return (x + FEED_SHM_ALIGN - 1) & ~(uint64_t)(FEED_SHM_ALIGN - 1);
}

#endif
