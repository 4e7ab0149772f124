/*
 * dtype.h: element types shared by the dataset format, the daemon and the
 * client. The numeric values equal feed.proto's DType and are stored on disk
 * and on the wire, so they never change. Pure functions, any thread.
 */
#ifndef FEED_DTYPE_H
#define FEED_DTYPE_H

#include <stddef.h>

enum feed_dtype {
	FEED_DTYPE_INVALID = 0,
	FEED_DTYPE_U8 = 1,
	FEED_DTYPE_I8 = 2,
	FEED_DTYPE_U16 = 3,
	FEED_DTYPE_I16 = 4,
	FEED_DTYPE_U32 = 5,
	FEED_DTYPE_I32 = 6,
	FEED_DTYPE_U64 = 7,
	FEED_DTYPE_I64 = 8,
	FEED_DTYPE_F16 = 9,
	FEED_DTYPE_BF16 = 10,
	FEED_DTYPE_F32 = 11,
	FEED_DTYPE_F64 = 12,
	FEED_DTYPE_BOOL = 13,
	FEED_DTYPE_STR = 14,
	FEED_DTYPE_MAX_ = 15, /* first invalid value */
};

/* Size in bytes of one element; 0 for an invalid dtype. */
size_t feed_dtype_size(int dtype);

/* Short lowercase name ("u8", "f32", "str"); "invalid" for a bad value.
 * The string is static. */
const char *feed_dtype_name(int dtype);

/* Parses a name of feed_dtype_name() (also "uint8", "float32", ...).
 * Returns the dtype, or FEED_DTYPE_INVALID. */
int feed_dtype_parse(const char *name);

#endif
