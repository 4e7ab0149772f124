/*
 * pack_lib.h: libfeedpack, the dataset writer (format/'s fmt_writer) as a
 * small C API for callers outside this tree's C code: the Python package's
 * feedclient.pack binds it with ctypes, and the wheel carries it beside
 * libfeedclient. A separate library because it links zstd, xxhash and the
 * image probe, which libfeedclient must never pull into a trainer.
 *
 * Threads: a struct feed_pack belongs to one thread at a time; distinct
 * writers may run on distinct threads at once (ctypes drops the GIL, so
 * Python threads write parts in parallel).
 *
 * Errors: calls return 0 (or a count) or a negative errno-style code; the
 * message naming the record, field or file is kept on the writer
 * (feed_pack_errmsg()); feed_pack_new() writes it into the caller's
 * buffer. Nothing here prints or exits.
 */
#ifndef FEED_PACK_LIB_H
#define FEED_PACK_LIB_H

#include <stddef.h>
#include <stdint.h>

#define FEED_PACK_MAX_RANK 8

/* One field of the dataset to write. */
struct feed_pack_field {
	const char *name;          /* [A-Za-z0-9_.-], 1..63 bytes, unique */
	int dtype;                 /* FEED_DTYPE_* (proto/dtype.h; 14 = str) */
	uint32_t rank;             /* entries in shape */
	uint32_t shape[FEED_PACK_MAX_RANK]; /* fixed: the shape; variable: element shape */
	int variable;              /* non-zero: records vary along a first axis */
	int image;                 /* non-zero: records are whole JPEG or PNG files */
};

/* How to write it; zero means the format's default. */
struct feed_pack_opts {
	const char *name;          /* dataset name in the manifest */
	const char *source;        /* free text for people; may be NULL */
	uint64_t block_bytes;      /* target decoded block size */
	uint32_t block_records;    /* cap on records per block */
	int zstd_level;            /* 1..19 */
	uint64_t shard_bytes;      /* a new shard past this size */
	uint32_t num_classes;      /* class names for the manifest ... */
	const char *const *classes; /* ... copied */
	uint64_t record_base;      /* added to record numbers in messages (a part's
				    * first record in the whole dataset) */
};

struct feed_pack;

/* Starts a dataset that appears at out_dir on feed_pack_finish(). On
 * failure writes the reason (naming the field or path) into errbuf
 * (errcap bytes) and leaves nothing on disk. *ret owns everything; free
 * with feed_pack_free(). */
int feed_pack_new(const char *out_dir, const struct feed_pack_field *fields, uint32_t nfields,
		  const struct feed_pack_opts *opts, struct feed_pack **ret, char *errbuf,
		  size_t errcap);

/* Appends one record: field i's lens[i] bytes at data[i] (copied). An image
 * field's bytes are probed: anything but a readable JPEG or PNG header is
 * refused. -EINVAL naming the record and field. Blocking (compresses and
 * writes a block when one fills). */
int feed_pack_add(struct feed_pack *p, const void *const *data, const size_t *lens);

/* Appends n records at once, as n feed_pack_add() calls would: field f's
 * bytes are contiguous at data[f]; record j of a fixed field is at
 * j * size, of a variable field at offs[f][j] .. offs[f][j + 1] (n + 1
 * byte offsets; offs[f] is NULL for fixed fields). One C call per batch,
 * so a Python caller pays its overhead once. -EINVAL names the record
 * (counted from the first record of the dataset) and field; the records
 * before it stay added. */
int feed_pack_add_batch(struct feed_pack *p, uint64_t n, const void *const *data,
			const uint64_t *const *offs);

/* Appends every record of the finished dataset in part_dir (same fields,
 * written by another feed_pack), consuming it (fmt_writer_adopt()). */
int feed_pack_adopt(struct feed_pack *p, const char *part_dir);

/* Records so far. */
uint64_t feed_pack_count(const struct feed_pack *p);

/* Writes the last block, the manifest, and renames the dataset into
 * place. Blocking (fsync). */
int feed_pack_finish(struct feed_pack *p);

/* The message of the last failed call; "" if none. Lives until the next
 * call on p. */
const char *feed_pack_errmsg(const struct feed_pack *p);

/* Frees; an unfinished dataset's temporary directory is removed. Accepts
 * NULL. */
void feed_pack_free(struct feed_pack *p);

#endif
