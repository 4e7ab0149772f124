/*
 * fmt.h: the feedd dataset format (format/FORMAT.md): a directory holding
 * manifest.pb and immutable shard files of zstd-compressed, checksummed
 * blocks of records.
 *
 * Owns: reading and writing datasets. Never maps shard files (a file
 * truncated underneath a reader must be an error, not SIGBUS): blocks are
 * read with pread into buffers the caller owns, or through a store the
 * caller gives (fmt_store_ops: the daemon's HTTP and S3 reader), whose
 * bytes are checked exactly as a file's. Never links a network library
 * (feedpack, the benches and feed_core link this). Nothing here allocates per
 * sample or per block once a dataset is open.
 *
 * Threads: a struct fmt_dataset is immutable after fmt_dataset_open() and may
 * be shared by any number of threads; each thread needs its own
 * struct fmt_decoder and block buffers. A struct fmt_writer belongs to one
 * thread.
 *
 * Errors: every call returns 0 (or a count) or a negative errno-style code;
 * when given a struct feed_err it also names the file, shard, block or field:
 *   -ENOENT/-EACCES/-EIO...  from the operating system, with the path
 *   -EBADMSG  corrupt data (checksum, magic, sizes that disagree)
 *   -EINVAL   a bad argument (record shape, sample out of range)
 *   -ENOMEM, -ENOSPC, -EEXIST as usual.
 */
#ifndef FEED_FMT_H
#define FEED_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "feed_err.h"

#define FMT_MANIFEST_FILE "manifest.pb"
/* Each sample's path (feedpack imagefolder): sample i on line i. */
#define FMT_PATHS_FILE "paths.txt"
/* Token-document datasets: the flat variable field of token ids, and each
 * record's length in tokens (u32 LE, sample i at offset 4i), written
 * whenever a schema has that field (FORMAT.md "lengths.u32"). */
#define FMT_TOKENS_FIELD "tokens"
#define FMT_LENGTHS_FILE "lengths.u32"
#define FMT_FORMAT_VERSION 1
#define FMT_MAX_FIELDS 64
#define FMT_MAX_RANK 8
#define FMT_NAME_MAX 64
/* Class names: at most this many, each at most this many bytes. */
#define FMT_MAX_CLASSES (1u << 20)
#define FMT_CLASS_NAME_MAX 255
/* Largest image width or height a manifest may record (JPEG's limit). */
#define FMT_IMAGE_DIM_MAX 65500u
/* Decoded field sections inside a block start at this alignment. */
#define FMT_SECTION_ALIGN 64

/* One field of the schema (manifest Field). */
struct fmt_field {
	char name[FMT_NAME_MAX];  /* [A-Za-z0-9_.-]+, unique in the schema */
	int dtype;                /* enum feed_dtype */
	uint32_t rank;            /* number of entries in shape */
	uint32_t shape[FMT_MAX_RANK]; /* fixed: full shape; variable: element shape */
	bool variable;            /* record length varies (first axis) */
	uint64_t max_bytes;       /* largest record of the field (fixed: its size) */
	/* Encoded images (feedpack imagefolder): a variable u8 field of rank 0
	 * whose records are whole JPEG or PNG files. In a writer's schema only
	 * `image` counts (the writer tracks the maxima); an open dataset's
	 * schema has all four, maxima >= 1 (FORMAT.md "Images"). */
	bool image;               /* records are encoded images */
	uint32_t max_width;       /* image: largest width of any record */
	uint32_t max_height;      /* image: largest height of any record */
	uint64_t max_pixels;      /* image: largest width * height of any record */
};

struct fmt_schema {
	uint32_t nfields;
	struct fmt_field fields[FMT_MAX_FIELDS];
};

/* Bytes of one record of a fixed field, or of one element along the
 * variable axis of a variable field. */
size_t fmt_field_elem_bytes(const struct fmt_field *f);

/* Checks names, dtypes, ranks and shapes; returns 0 or -EINVAL naming the
 * field. */
int fmt_schema_check(const struct fmt_schema *s, struct feed_err *err);

/* Returns the index of the field called name, or -ENOENT. */
int fmt_schema_find(const struct fmt_schema *s, const char *name);

/* Whether one stream can read datasets of schemas a and b as one (a
 * mixture's sources): the same fields in the same order, each of the same
 * name, dtype, variable length, shape and encoding (record sizes may
 * differ). 0, or -EINVAL with err saying "source 'bname': field 'F'
 * differs from source 'aname''s field 'G' (dtype)" or the field counts. */
int fmt_schema_agree(const struct fmt_schema *a, const char *aname, const struct fmt_schema *b,
		     const char *bname, struct feed_err *err);

/* The index of s's token field: FMT_TOKENS_FIELD, variable, rank 0, of
 * dtype u16, u32 or i32; -ENOENT when s has none such. */
int fmt_schema_tokens(const struct fmt_schema *s);

/* ------------------------------------------------------------------ */
/* Reading                                                             */

struct fmt_dataset;

/* Immutable facts about an open dataset. Strings live as long as the
 * dataset. */
struct fmt_info {
	const char *name;
	const char *version;      /* content hash, 16 hex digits */
	const char *source;
	uint64_t num_samples;
	uint32_t num_shards;
	uint64_t num_blocks;
	uint64_t max_block_raw;   /* a decode buffer of this size fits any block */
	uint64_t max_block_comp;  /* a read buffer of this size fits any block */
	uint64_t block_bytes;     /* ingest's target decoded block size */
	uint32_t block_records;
	int zstd_level;
	uint64_t bytes_on_disk;   /* sum of shard file sizes */
	uint64_t bytes_raw;       /* sum of decoded block sizes */
	const struct fmt_schema *schema;
	/* Class names (feedpack imagefolder): label value i is classes[i]. */
	uint32_t num_classes;
	const char *const *classes;
};

/* Where a sample lives. */
struct fmt_loc {
	uint32_t shard;    /* index into the shard list */
	uint64_t block;    /* global block id: 0 .. num_blocks-1 */
	uint32_t record;   /* record inside the block */
};

/* Opens the dataset in dir: reads manifest.pb, then every shard's header,
 * footer and block index, and checks each file's size against both the
 * manifest and its own footer. Allocates the block table once. On success
 * *ret_ds owns the open shard descriptors; free with fmt_dataset_close(). */
int fmt_dataset_open(const char *dir, struct fmt_dataset **ret_ds, struct feed_err *err);

/* A dataset's storage other than a local directory (the daemon's HTTP and
 * S3 reader, daemon/data/remote.c): fmt_dataset_open_store() reads every
 * byte through it, and checks what it reads exactly as it checks a local
 * file. format/ itself never talks to a network.
 *
 * A range of one file of the dataset: the manifest (shard -1) or shard
 * `shard` (file is its name in the manifest). For a block, `block` is its
 * shard-local number and has_hash says `hash` is the xxh64 the bytes must
 * have (a store may check it to retry, and must never keep bytes that fail
 * it); header, trailer and index reads have no hash of their own here (the
 * reader checks them). */
struct fmt_range {
	int32_t shard;            /* -1: the manifest */
	const char *file;         /* name inside the dataset */
	uint64_t off;             /* first byte */
	uint32_t len;             /* bytes */
	bool has_hash;            /* a block: hash and block are set */
	uint64_t hash;            /* xxh64 of the len bytes */
	uint64_t block;           /* shard-local block number, for messages */
};

struct fmt_store_ops {
	/* Size of a file in *ret_size. 0 or -errno with err naming it.
	 * Blocking. */
	int (*size)(void *ctx, int32_t shard, const char *file, uint64_t *ret_size,
		    struct feed_err *err);
	/* Exactly r->len bytes at r->off into buf. 0, or -errno (-EBADMSG:
	 * short or wrong bytes) with err naming the file and block. Blocking;
	 * called from any number of threads at once. */
	int (*read)(void *ctx, const struct fmt_range *r, void *buf, struct feed_err *err);
	/* Optional: the caller is about to read these n block ranges (one
	 * after another); a store may fetch them now, together. Never fails
	 * (a read later reports what went wrong). Blocking. */
	void (*prefetch)(void *ctx, const struct fmt_range *r, size_t n);
	/* Frees ctx (fmt_dataset_close(), or a failed open). */
	void (*close)(void *ctx);
};

/* Opens a dataset whose files are read through ops (label names it in
 * every message: its URL). The dataset owns ctx from this call on, even
 * when it fails: ops->close(ctx) runs at fmt_dataset_close(), or before a
 * failed open returns. Otherwise as fmt_dataset_open(). */
int fmt_dataset_open_store(const char *label, const struct fmt_store_ops *ops, void *ctx,
			   struct fmt_dataset **ret_ds, struct feed_err *err);

/* Tells the store that blocks[0..n) of ds (global ids) are about to be
 * read: a remote store fetches them together (several requests in
 * flight). Does nothing for a local directory. Blocking. */
void fmt_dataset_prefetch(const struct fmt_dataset *ds, const uint64_t *blocks, size_t n);

/* xxh64 (seed 0) of len bytes, the hash of every block (FORMAT.md), for a
 * store that checks what it fetched or keeps. */
uint64_t fmt_hash(const void *data, size_t len);

/* Closes the shard files and frees. Accepts NULL. */
void fmt_dataset_close(struct fmt_dataset *ds);

/* The dataset's facts; valid until fmt_dataset_close(). Never NULL. */
const struct fmt_info *fmt_dataset_info(const struct fmt_dataset *ds);

/* Shard i's file name (no directory), or NULL past the last shard. */
const char *fmt_dataset_shard_file(const struct fmt_dataset *ds, uint32_t shard);

/* Where sample (global index) came from: its path as ingest recorded it
 * (feedpack imagefolder: relative to the folder it packed), valid until
 * fmt_dataset_close(); NULL when the dataset records no paths or past the
 * end. Any thread. */
const char *fmt_dataset_sample_path(const struct fmt_dataset *ds, uint64_t sample);

/* A token-document dataset's lengths (FMT_LENGTHS_FILE, read at open:
 * 4 bytes per document, shared by every reader of ds): *ret_lens[i] is
 * document i's length in tokens, *ret_total their sum. -ENOENT when ds
 * has no token field or was written before lengths were kept. Any
 * thread; the array lives until fmt_dataset_close(). */
int fmt_dataset_doc_lens(const struct fmt_dataset *ds, const uint32_t **ret_lens,
			 uint64_t *ret_total);

/* Finds sample (global index) in O(log blocks). -EINVAL past the end. */
int fmt_dataset_locate(const struct fmt_dataset *ds, uint64_t sample, struct fmt_loc *ret_loc);

/* Block metadata from the footer index. */
struct fmt_block_meta {
	uint32_t shard;
	uint64_t first_sample;  /* global index of the block's first record */
	uint32_t num_records;
	uint32_t comp_size;
	uint32_t raw_size;
};
int fmt_dataset_block_meta(const struct fmt_dataset *ds, uint64_t block, struct fmt_block_meta *ret_meta);

/* A per-thread zstd decompression context. */
struct fmt_decoder;
int fmt_decoder_new(struct fmt_decoder **ret_dec);
void fmt_decoder_free(struct fmt_decoder *dec);  /* accepts NULL */

/* A decoded block: views into the caller's raw buffer. */
struct fmt_block {
	const struct fmt_schema *schema;  /* the dataset's, for field sizes */
	uint64_t id;              /* global block id */
	uint64_t first_sample;
	uint32_t num_records;
	const uint8_t *raw;       /* the caller's buffer */
	uint32_t raw_size;
	/* Per field: start of the section inside raw, and for variable fields
	 * the offsets table (num_records + 1 little-endian u32 values). */
	uint32_t section[FMT_MAX_FIELDS];
	uint32_t data_start[FMT_MAX_FIELDS];
};

/* Reads block id with pread into comp_buf (>= max_block_comp bytes),
 * verifies its xxh64, decodes it into raw_buf (>= max_block_raw bytes,
 * FMT_SECTION_ALIGN-aligned for aligned views), checks every section and
 * offset table, and fills *ret_blk with views into raw_buf. Blocking (disk
 * read). Thread-safe for distinct dec/buffers. A checksum mismatch or a
 * short read is -EBADMSG naming shard file and block; wrong bytes are never
 * returned. */
int fmt_block_read(const struct fmt_dataset *ds, uint64_t block, struct fmt_decoder *dec,
		   void *comp_buf, size_t comp_cap, void *raw_buf, size_t raw_cap,
		   struct fmt_block *ret_blk, struct feed_err *err);

/* View of field f of record rec (block-local) inside a decoded block. The
 * pointer lives as long as the caller's raw buffer is unchanged. No checks
 * beyond asserts: fmt_block_read() validated the block. */
static inline const void *fmt_block_field(const struct fmt_block *b, uint32_t f, uint32_t rec,
					  size_t *ret_len);

/* ------------------------------------------------------------------ */
/* Writing                                                             */

struct fmt_writer_opts {
	const char *name;        /* dataset name written in the manifest */
	const char *source;      /* free text for people, may be NULL */
	uint64_t block_bytes;    /* target decoded block size; 0 = 64 KiB */
	uint32_t block_records;  /* cap on records per block; 0 = none, 1 = one each */
	int zstd_level;          /* 1..19; 0 = 3 */
	uint64_t shard_bytes;    /* start a new shard past this size; 0 = 256 MiB */
	/* Class names written in the manifest (label value i is classes[i]):
	 * each 1..FMT_CLASS_NAME_MAX bytes of UTF-8 without control characters,
	 * all distinct, at most FMT_MAX_CLASSES; checked by fmt_writer_new
	 * (-EINVAL). Copied. */
	uint32_t num_classes;
	const char *const *classes;
};

struct fmt_writer;

/* Starts a dataset that will appear at out_dir only when fmt_writer_finish()
 * succeeds: everything is written into a temporary sibling directory first.
 * -EEXIST if out_dir exists. The schema is copied. */
int fmt_writer_new(const char *out_dir, const struct fmt_schema *schema,
		   const struct fmt_writer_opts *opts, struct fmt_writer **ret_w,
		   struct feed_err *err);

/* One field value of a record: len bytes at data. Fixed fields must have
 * exactly their size; variable fields a multiple of the element size. */
struct fmt_value {
	const void *data;
	size_t len;
};

/* Appends a record (values[i] for schema field i). Copies the bytes. */
int fmt_writer_add(struct fmt_writer *w, const struct fmt_value *values, struct feed_err *err);

/* Records the dimensions of the image just added (the last record) in
 * field f, which the schema marks `image`: the writer keeps the largest
 * width, height and width * height for the manifest. Every record of an
 * image field must be noted (finish refuses an image field whose records
 * were never noted). -EINVAL if f is not an image field or a dimension is
 * outside 1..FMT_IMAGE_DIM_MAX. */
int fmt_writer_note_image(struct fmt_writer *w, uint32_t f, uint32_t width, uint32_t height,
			  struct feed_err *err);

/* Records where the record just added came from (a path, for error
 * messages: 1..4095 bytes, no newline): either every record notes one or
 * none does (finish refuses a partial list). They go to FMT_PATHS_FILE. */
int fmt_writer_note_path(struct fmt_writer *w, const char *path, struct feed_err *err);

/* Appends every record of the finished dataset in dir (a part written
 * by another writer with the same schema, e.g. on another thread) after
 * the records added so far: its shard files are moved into this dataset,
 * their headers rewritten to their new first sample, so dir is consumed
 * (only its manifest is left). The current block and shard are closed
 * first, so the result depends only on the sequence of adds and adopts.
 * -EINVAL naming dir if the schemas differ, -ENOTSUP if either side noted
 * paths. On failure the writer can only be freed. Blocking (reads the
 * part's footers, fsyncs). */
int fmt_writer_adopt(struct fmt_writer *w, const char *dir, struct feed_err *err);

/* Records added so far. */
uint64_t fmt_writer_count(const struct fmt_writer *w);

/* Flushes the last block and shard, writes the manifest, fsyncs and renames
 * the temporary directory to out_dir. A dataset with no records is
 * refused (-EINVAL). */
int fmt_writer_finish(struct fmt_writer *w, struct feed_err *err);

/* Frees; if not finished, removes the temporary directory. Accepts NULL. */
void fmt_writer_free(struct fmt_writer *w);

/* ------------------------------------------------------------------ */

static inline const void *fmt_block_field(const struct fmt_block *b, uint32_t f, uint32_t rec,
					  size_t *ret_len)
{
	const struct fmt_field *fd = &b->schema->fields[f];
	const uint8_t *sec = b->raw + b->section[f];

	if (!fd->variable) {
		size_t n = fd->max_bytes;
		*ret_len = n;
		return sec + (size_t)rec * n;
	}
	const uint8_t *offs = sec;  /* little-endian u32, aligned to 4 */
	uint32_t lo, hi;
	__builtin_memcpy(&lo, offs + 4 * (size_t)rec, 4);
	__builtin_memcpy(&hi, offs + 4 * ((size_t)rec + 1), 4);
	*ret_len = hi - lo;
	return b->raw + b->data_start[f] + lo;
}

#endif
