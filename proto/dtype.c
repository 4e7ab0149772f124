/* dtype.c: element type table (see dtype.h). Pure, any thread. */
#include "dtype.h"

#include <string.h>

/* One row per dtype: its size, its short name and its numpy-style name. */
static const struct {
	size_t size;
	const char *name;
	const char *long_name;
} dtype_table[FEED_DTYPE_MAX_] = {
	[FEED_DTYPE_INVALID] = {0, "invalid", "invalid"},
	[FEED_DTYPE_U8] = {1, "u8", "uint8"},
	[FEED_DTYPE_I8] = {1, "i8", "int8"},
	[FEED_DTYPE_U16] = {2, "u16", "uint16"},
	[FEED_DTYPE_I16] = {2, "i16", "int16"},
	[FEED_DTYPE_U32] = {4, "u32", "uint32"},
	[FEED_DTYPE_I32] = {4, "i32", "int32"},
	[FEED_DTYPE_U64] = {8, "u64", "uint64"},
	[FEED_DTYPE_I64] = {8, "i64", "int64"},
	[FEED_DTYPE_F16] = {2, "f16", "float16"},
	[FEED_DTYPE_BF16] = {2, "bf16", "bfloat16"},
	[FEED_DTYPE_F32] = {4, "f32", "float32"},
	[FEED_DTYPE_F64] = {8, "f64", "float64"},
	[FEED_DTYPE_BOOL] = {1, "bool", "bool"},
	[FEED_DTYPE_STR] = {1, "str", "string"},
};

size_t feed_dtype_size(int dtype)
{
	if (dtype <= 0 || dtype >= FEED_DTYPE_MAX_)
		return 0;
	return dtype_table[dtype].size;
}

const char *feed_dtype_name(int dtype)
{
	if (dtype <= 0 || dtype >= FEED_DTYPE_MAX_)
		return "invalid";
	return dtype_table[dtype].name;
}

int feed_dtype_parse(const char *name)
{
	for (int i = 1; i < FEED_DTYPE_MAX_; i++)
		if (!strcmp(name, dtype_table[i].name) || !strcmp(name, dtype_table[i].long_name))
			return i;
	return FEED_DTYPE_INVALID;
}
