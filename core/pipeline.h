/*
 * pipeline.h: augmentation pipelines — the text form of DESIGN.md's
 * command-line contract, parsed, checked against a dataset schema and
 * planned into fused stages that augment.c runs per sample.
 *
 * Text form: ops joined by `|`, each `name(key=value, ...)` or a bare
 * `name`; whitespace anywhere between tokens. The empty text means
 * `identity`. Ops and keys (every op also takes `field=NAME`):
 *   identity                      no change
 *   random_crop(size, pad=0)      torchvision RandomCrop(size, padding=pad),
 *                                 zero padding; square size x size
 *   center_crop(size)             torchvision CenterCrop(size) (zero-pads when
 *                                 size exceeds the image, as torchvision does)
 *   hflip(p=0.5)                  torchvision RandomHorizontalFlip(p)
 *   resize(h, w)                  torchvision Resize((h, w)), bilinear,
 *                                 antialias=False, half-pixel centres, rounded
 *                                 to nearest (ties to even, like torch.round);
 *                                 bit-exact with torch 1.13 (aug_resize_u8())
 *   random_window(len)            a random run of len elements of a 1-D field
 * Image ops act on a fixed u8 field of shape (H, W) or (H, W, C), by default
 * the schema's first such field; random_window acts on a fixed 1-D field or
 * a variable field of scalars, by default the first one of dtype u16, u32,
 * i32 or i64, and makes it fixed [len]. Fields no op names pass through.
 * Numbers: decimal integers; p a decimal in [0, 1] with at most 9 decimals
 * (kept exactly, in parts per 10^9).
 *
 * Threads: parse and plan are pure and run on the caller's thread; a
 * finished struct pipe_plan is immutable and may be shared by any number of
 * threads. Nothing here allocates: the structs are fixed-size values.
 * Never: touch sample data (augment.c does), print, or allocate.
 *
 * Errors: -EINVAL with a message naming the op (1-based index and name)
 * and the key, e.g. "pipeline op 2 'hflip': key 'p': 1.5 not in [0, 1]".
 */
#ifndef FEED_PIPELINE_H
#define FEED_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"
#include "fmt.h"

#define PIPE_MAX_OPS 16
#define PIPE_TEXT_MAX 4096     /* longest accepted pipeline text */
#define PIPE_CANON_MAX 4096    /* room for any canonical string */
#define PIPE_DIM_MAX 65535u    /* largest size, pad, h, w */
#define PIPE_LEN_MAX (1u << 30) /* largest random_window len */
#define PIPE_P_ONE 1000000000u /* p = 1 in parts per 10^9 */

enum pipe_kind {
	PIPE_IDENTITY = 0,
	PIPE_RANDOM_CROP,
	PIPE_CENTER_CROP,
	PIPE_HFLIP,
	PIPE_RESIZE,
	PIPE_RANDOM_WINDOW,
};

/* One parsed op. Keys an op does not take stay 0. */
struct pipe_op {
	enum pipe_kind kind;
	uint32_t size;             /* random_crop, center_crop */
	uint32_t pad;              /* random_crop (default 0) */
	uint32_t p_ppb;            /* hflip: probability in parts per 10^9 */
	uint32_t h, w;             /* resize */
	uint32_t len;              /* random_window */
	char field[FMT_NAME_MAX];  /* field=NAME, "" for the default */
};

/* A parsed pipeline, independent of any dataset. */
struct pipe_spec {
	uint32_t nops;             /* 1 .. PIPE_MAX_OPS */
	struct pipe_op ops[PIPE_MAX_OPS];
};

/* Parses text (NUL-terminated, at most PIPE_TEXT_MAX bytes) into *ret_spec
 * (written only on success). Returns 0 or -EINVAL with err naming op and
 * key (err may be NULL). */
int pipe_parse(const char *text, struct pipe_spec *ret_spec, struct feed_err *err);

/* The op's name ("random_crop"); static string. */
const char *pipe_kind_name(enum pipe_kind kind);

/* Writes spec's canonical text into buf (NUL-terminated): ops joined by
 * " | ", keys in a fixed order with defaults filled, numbers canonical
 * ("p=0.5"), field=NAME only where the text gave one. Returns its length,
 * or -ENOSPC if cap is too small (PIPE_CANON_MAX always suffices). */
int pipe_spec_canonical(const struct pipe_spec *spec, char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* Planning                                                            */

enum pipe_stage_kind {
	PIPE_STAGE_GEO = 0,   /* a run of random_crop / center_crop / hflip: one pass */
	PIPE_STAGE_RESIZE,    /* one bilinear resize */
	PIPE_STAGE_WINDOW,    /* a run of random_window: one copy */
};

/* Shape of a field before and after one op (images: h, w, c; windows:
 * elems, 0 = variable length). */
struct pipe_dims {
	uint32_t in_h, in_w, out_h, out_w;
	uint64_t in_elems, out_elems;
};

/* Consecutive ops of one field run as one stage. */
struct pipe_stage {
	enum pipe_stage_kind kind;
	uint32_t field;            /* schema field index */
	uint32_t first, count;     /* plan->stage_ops[first .. first+count) */
	uint32_t in_h, in_w;       /* images: stage input */
	uint32_t out_h, out_w;     /* images: stage output */
	uint32_t c;                /* images: channels (1 for rank 2) */
	uint64_t in_elems;         /* windows: input elements, 0 = variable */
	uint64_t out_elems;        /* windows: output elements */
	size_t elem_bytes;         /* windows: bytes per element */
	size_t out_bytes;          /* bytes the stage writes */
};

/* A pipeline checked against a schema. Read-only for users (all fields
 * public for augment.c and tests); about 23 KiB; immutable once planned. */
struct pipe_plan {
	struct pipe_spec spec;     /* as parsed, every op's field resolved */
	int op_field[PIPE_MAX_OPS];  /* field index of op i, -1 = none (identity) */
	struct pipe_dims dims[PIPE_MAX_OPS]; /* shape around op i */
	struct fmt_schema in;      /* the dataset's schema */
	struct fmt_schema out;     /* the batch schema: shapes after the ops;
				    * out.fields[f].max_bytes = largest output */
	uint32_t nstages;
	struct pipe_stage stages[PIPE_MAX_OPS]; /* grouped by field, in op order */
	uint32_t stage_ops[PIPE_MAX_OPS]; /* op indices, by stage */
	uint32_t field_stage[FMT_MAX_FIELDS];  /* first stage of field f */
	uint32_t field_nstages[FMT_MAX_FIELDS]; /* 0 = passthrough */
	size_t inter_bytes;        /* largest intermediate stage output */
	size_t table_bytes;        /* resize column table */
	size_t scratch_bytes;      /* = pipe_scratch_bytes() */
	char canonical[PIPE_CANON_MAX]; /* canonical text, fields resolved */
	uint64_t hash;             /* xxh64(canonical), seed 0 */
};

/* Checks spec against schema `in` and plans it into *ret_plan (about
 * 23 KiB: better on the heap than on a small stack; zeroed on failure).
 * Returns 0 or -EINVAL naming op and key: field missing or not image-like
 * / not a sequence, crop larger than the padded image, window longer than
 * the longest sequence, output larger than 4 GiB. */
int pipe_plan(const struct pipe_spec *spec, const struct fmt_schema *in,
	      struct pipe_plan *ret_plan, struct feed_err *err);

/* Parse + plan in one call. */
int pipe_plan_text(const char *text, const struct fmt_schema *in, struct pipe_plan *ret_plan,
		   struct feed_err *err);

/* Scratch a worker passes to aug_apply() for this plan, in bytes (0 when
 * no op needs it); 64-byte aligned memory is best. */
size_t pipe_scratch_bytes(const struct pipe_plan *plan);

/* The 64-bit hash resume tokens and groups compare: xxh64 of the
 * canonical text with fields resolved. */
uint64_t pipe_hash(const struct pipe_plan *plan);

#endif
