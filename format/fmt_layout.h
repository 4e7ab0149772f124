/*
 * fmt_layout.h: the on-disk byte layout of a shard (FORMAT.md), private to
 * format/. Encoding and decoding go through these helpers so the byte
 * offsets are written down once. Pure functions, any thread.
 */
#ifndef FEED_FMT_LAYOUT_H
#define FEED_FMT_LAYOUT_H

#include <stdint.h>
#include <string.h>

#include "feed.pb-c.h"
#include "fmt.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "feedd's format code assumes a little-endian host"
#endif

#define FMT_SHARD_MAGIC "FEEDSHD1"
#define FMT_TRAILER_MAGIC "FEEDEND1"
#define FMT_HEADER_SIZE 64
#define FMT_TRAILER_SIZE 64
#define FMT_INDEX_ENTRY_SIZE 40

/* Shard header, bytes 0..63. */
struct fmt_header {
	uint32_t version;
	uint32_t nfields;
	uint64_t first_sample;
	uint64_t num_records;
	uint64_t num_blocks;
};

/* One block index entry. */
struct fmt_index_entry {
	uint64_t offset;
	uint64_t first_record;
	uint32_t num_records;
	uint32_t comp_size;
	uint32_t raw_size;
	uint64_t hash;  /* xxh64 of the compressed bytes */
};

/* Shard trailer, the last 64 bytes. */
struct fmt_trailer {
	uint64_t index_offset;
	uint64_t num_blocks;
	uint64_t num_records;
	uint64_t index_hash;
};

static inline uint32_t fmt_get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t fmt_get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline void fmt_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void fmt_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static inline uint64_t fmt_align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* Encoders fill exactly FMT_*_SIZE bytes; decoders return 0 or -EBADMSG
 * (wrong magic or checksum). Implemented in fmt_schema.c. */
void fmt_header_encode(const struct fmt_header *h, uint8_t out[FMT_HEADER_SIZE]);
int fmt_header_decode(const uint8_t in[FMT_HEADER_SIZE], struct fmt_header *ret_h);
void fmt_trailer_encode(const struct fmt_trailer *t, uint8_t out[FMT_TRAILER_SIZE]);
int fmt_trailer_decode(const uint8_t in[FMT_TRAILER_SIZE], struct fmt_trailer *ret_t);
void fmt_index_encode(const struct fmt_index_entry *e, uint8_t out[FMT_INDEX_ENTRY_SIZE]);
void fmt_index_decode(const uint8_t in[FMT_INDEX_ENTRY_SIZE], struct fmt_index_entry *ret_e);

/* Section layout of a decoded block of n records: fills section[] and
 * data_start[] (as in struct fmt_block) given each variable field's total
 * data bytes in var_bytes[f] (ignored for fixed fields); returns raw_size,
 * or 0 if it would not fit in 32 bits. */
struct fmt_schema;
uint64_t fmt_block_layout(const struct fmt_schema *s, uint32_t n, const uint64_t *var_bytes,
			  uint32_t *section, uint32_t *data_start);

/* Fields marked image in a dataset's schema must be variable u8 of rank 0
 * (FORMAT.md "Images"); -EINVAL naming the field. Not part of
 * fmt_schema_check(): a pipeline's output schema may describe decoded
 * pixels of such a field. */
int fmt_schema_check_images(const struct fmt_schema *s, struct feed_err *err);

/* Class names: each 1..FMT_CLASS_NAME_MAX bytes without control
 * characters, all distinct. -EINVAL (-ENOMEM) naming the class. */
int fmt_classes_check(uint32_t n, const char *const *names, struct feed_err *err);

/* Converting between struct fmt_schema and the manifest's Schema message. */
int fmt_schema_from_pb(const Feed__Schema *pb, struct fmt_schema *ret_s,
		       struct feed_err *err);

#endif
