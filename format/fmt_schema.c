/*
 * fmt_schema.c: schema checks, the schema <-> manifest conversion and the
 * byte layout of headers, index entries, trailers and decoded blocks
 * (FORMAT.md). Pure functions, any thread; no I/O here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fmt.h"
#include "fmt_layout.h"

size_t fmt_field_elem_bytes(const struct fmt_field *f)
{
	size_t n = feed_dtype_size(f->dtype);

	for (uint32_t i = 0; i < f->rank; i++)
		n *= f->shape[i];
	return n;
}

static int name_ok(const char *name)
{
	size_t len = strnlen(name, FMT_NAME_MAX);

	if (len == 0 || len >= FMT_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

static int field_check(const struct fmt_field *f, struct feed_err *err)
{
	if (!name_ok(f->name))
		return feed_err_set(err, -EINVAL, "field '%.*s': name must be 1-63 of [A-Za-z0-9_.-]",
				    FMT_NAME_MAX, f->name);
	if (feed_dtype_size(f->dtype) == 0)
		return feed_err_set(err, -EINVAL, "field '%s': invalid dtype %d", f->name, f->dtype);
	if (f->dtype == FEED_DTYPE_STR && !f->variable)
		return feed_err_set(err, -EINVAL, "field '%s': str fields must be variable", f->name);
	if (f->rank > FMT_MAX_RANK)
		return feed_err_set(err, -EINVAL, "field '%s': rank %u exceeds %d", f->name, f->rank,
				    FMT_MAX_RANK);
	uint64_t n = feed_dtype_size(f->dtype);
	for (uint32_t i = 0; i < f->rank; i++) {
		if (f->shape[i] == 0)
			return feed_err_set(err, -EINVAL, "field '%s': dimension %u is 0", f->name, i);
		n *= f->shape[i];
		if (n > UINT32_MAX)
			return feed_err_set(err, -EINVAL, "field '%s': record larger than 4 GiB", f->name);
	}
	return 0;
}

int fmt_schema_check(const struct fmt_schema *s, struct feed_err *err)
{
	if (s->nfields == 0 || s->nfields > FMT_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "schema has %u fields (1..%d allowed)", s->nfields,
				    FMT_MAX_FIELDS);
	for (uint32_t i = 0; i < s->nfields; i++) {
		int rc = field_check(&s->fields[i], err);
		if (rc < 0)
			return rc;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(s->fields[i].name, s->fields[j].name))
				return feed_err_set(err, -EINVAL, "field '%s' appears twice",
						    s->fields[i].name);
	}
	return 0;
}

int fmt_schema_check_images(const struct fmt_schema *s, struct feed_err *err)
{
	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct fmt_field *f = &s->fields[i];
		if (f->image && (f->dtype != FEED_DTYPE_U8 || !f->variable || f->rank != 0))
			return feed_err_set(err, -EINVAL,
					    "field '%s': an image field must be variable u8 of rank 0",
					    f->name);
	}
	return 0;
}

int fmt_schema_find(const struct fmt_schema *s, const char *name)
{
	for (uint32_t i = 0; i < s->nfields; i++)
		if (!strcmp(s->fields[i].name, name))
			return (int)i;
	return -ENOENT;
}

/* What differs between fields f and g, or NULL. */
static const char *field_differs(const struct fmt_field *f, const struct fmt_field *g)
{
	if (strcmp(f->name, g->name))
		return "name";
	if (f->dtype != g->dtype)
		return "dtype";
	if (f->variable != g->variable)
		return "variable length";
	if (f->rank != g->rank || memcmp(f->shape, g->shape, f->rank * sizeof(f->shape[0])))
		return "shape";
	if (f->image != g->image)
		return "encoded images";
	return NULL;
}

int fmt_schema_agree(const struct fmt_schema *a, const char *aname, const struct fmt_schema *b,
		     const char *bname, struct feed_err *err)
{
	if (a->nfields != b->nfields)
		return feed_err_set(err, -EINVAL, "source '%s' has %u fields, source '%s' %u: the "
				    "schemas must agree", bname, b->nfields, aname, a->nfields);
	for (uint32_t f = 0; f < a->nfields; f++) {
		const char *what = field_differs(&a->fields[f], &b->fields[f]);
		if (what)
			return feed_err_set(err, -EINVAL, "source '%s': field '%s' differs from "
					    "source '%s''s field '%s' (%s)", bname, b->fields[f].name,
					    aname, a->fields[f].name, what);
	}
	return 0;
}

int fmt_schema_tokens(const struct fmt_schema *s)
{
	int f = fmt_schema_find(s, FMT_TOKENS_FIELD);

	if (f < 0)
		return -ENOENT;
	const struct fmt_field *fd = &s->fields[f];
	if (!fd->variable || fd->rank != 0 ||
	    (fd->dtype != FEED_DTYPE_U16 && fd->dtype != FEED_DTYPE_U32 &&
	     fd->dtype != FEED_DTYPE_I32))
		return -ENOENT;
	return f;
}

/* The image facts of a field read from a manifest (FORMAT.md "Images"). */
static int image_facts_check(const struct fmt_field *f, struct feed_err *err)
{
	uint64_t w = f->max_width, h = f->max_height;

	if (!f->image) {
		if (w || h || f->max_pixels)
			return feed_err_set(err, -EBADMSG,
					    "field '%s': image dimensions on a field not marked image",
					    f->name);
		return 0;
	}
	if (w < 1 || h < 1 || w > FMT_IMAGE_DIM_MAX || h > FMT_IMAGE_DIM_MAX)
		return feed_err_set(err, -EBADMSG,
				    "field '%s': image max_width %llu, max_height %llu outside 1..%u",
				    f->name, (unsigned long long)w, (unsigned long long)h,
				    FMT_IMAGE_DIM_MAX);
	if (f->max_pixels < (w > h ? w : h) || f->max_pixels > w * h)
		return feed_err_set(err, -EBADMSG,
				    "field '%s': image max_pixels %llu impossible for at most %llux%llu",
				    f->name, (unsigned long long)f->max_pixels, (unsigned long long)w,
				    (unsigned long long)h);
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int fmt_classes_check(uint32_t n, const char *const *names, struct feed_err *err)
{
	if (n > FMT_MAX_CLASSES)
		return feed_err_set(err, -EINVAL, "%u class names (at most %u)", n, FMT_MAX_CLASSES);
	for (uint32_t i = 0; i < n; i++) {
		const char *c = names[i];
		size_t len = c ? strlen(c) : 0;
		if (len == 0 || len > FMT_CLASS_NAME_MAX)
			return feed_err_set(err, -EINVAL, "class %u: name must be 1..%d bytes", i,
					    FMT_CLASS_NAME_MAX);
		for (size_t k = 0; k < len; k++)
			if ((unsigned char)c[k] < 0x20 || c[k] == 0x7f)
				return feed_err_set(err, -EINVAL,
						    "class %u: name has a control character", i);
	}
	if (n < 2)
		return 0;
	const char **sorted = malloc((size_t)n * sizeof(*sorted));
	if (!sorted)
		return feed_err_set(err, -ENOMEM, "out of memory for %u class names", n);
	memcpy(sorted, names, (size_t)n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), str_cmp);
	int rc = 0;
	for (uint32_t i = 1; i < n && rc == 0; i++)
		if (!strcmp(sorted[i - 1], sorted[i]))
			rc = feed_err_set(err, -EINVAL, "class name '%s' appears twice", sorted[i]);
	free(sorted);
	return rc;
}

int fmt_schema_from_pb(const Feed__Schema *pb, struct fmt_schema *ret_s, struct feed_err *err)
{
	struct fmt_schema s;

	memset(&s, 0, sizeof(s));
	if (!pb || pb->n_fields == 0 || pb->n_fields > FMT_MAX_FIELDS)
		return feed_err_set(err, -EBADMSG, "schema has %zu fields (1..%d allowed)",
				    pb ? pb->n_fields : 0, FMT_MAX_FIELDS);
	s.nfields = (uint32_t)pb->n_fields;
	for (size_t i = 0; i < pb->n_fields; i++) {
		const Feed__Field *pf = pb->fields[i];
		struct fmt_field *f = &s.fields[i];
		if (strlen(pf->name) >= FMT_NAME_MAX || pf->n_shape > FMT_MAX_RANK)
			return feed_err_set(err, -EBADMSG, "field %zu: name or rank too long", i);
		strcpy(f->name, pf->name);
		f->dtype = pf->dtype;
		f->rank = (uint32_t)pf->n_shape;
		if (pf->n_shape) /* protobuf-c leaves shape NULL for scalars */
			memcpy(f->shape, pf->shape, pf->n_shape * sizeof(uint32_t));
		f->variable = pf->variable;
		f->max_bytes = pf->max_bytes;
		f->image = pf->image;
		f->max_width = pf->max_width;
		f->max_height = pf->max_height;
		f->max_pixels = pf->max_pixels;
	}
	int rc = fmt_schema_check(&s, err);
	if (rc == 0)
		rc = fmt_schema_check_images(&s, err);
	if (rc < 0)
		return err ? (err->code = -EBADMSG) : -EBADMSG;
	for (uint32_t i = 0; i < s.nfields; i++) {
		const struct fmt_field *f = &s.fields[i];
		if (!f->variable && f->max_bytes != fmt_field_elem_bytes(f))
			return feed_err_set(err, -EBADMSG, "field '%s': max_bytes %llu != record size %zu",
					    f->name, (unsigned long long)f->max_bytes,
					    fmt_field_elem_bytes(f));
		if (f->max_bytes > UINT32_MAX)
			return feed_err_set(err, -EBADMSG, "field '%s': max_bytes too large", f->name);
		if ((rc = image_facts_check(f, err)) < 0)
			return rc;
	}
	*ret_s = s;
	return 0;
}

void fmt_header_encode(const struct fmt_header *h, uint8_t out[FMT_HEADER_SIZE])
{
	memset(out, 0, FMT_HEADER_SIZE);
	memcpy(out, FMT_SHARD_MAGIC, 8);
	fmt_put32(out + 8, h->version);
	fmt_put32(out + 12, h->nfields);
	fmt_put64(out + 16, h->first_sample);
	fmt_put64(out + 24, h->num_records);
	fmt_put64(out + 32, h->num_blocks);
	fmt_put64(out + 56, XXH64(out, 56, 0));
}

int fmt_header_decode(const uint8_t in[FMT_HEADER_SIZE], struct fmt_header *ret_h)
{
	if (memcmp(in, FMT_SHARD_MAGIC, 8) || fmt_get64(in + 56) != XXH64(in, 56, 0))
		return -EBADMSG;
	ret_h->version = fmt_get32(in + 8);
	ret_h->nfields = fmt_get32(in + 12);
	ret_h->first_sample = fmt_get64(in + 16);
	ret_h->num_records = fmt_get64(in + 24);
	ret_h->num_blocks = fmt_get64(in + 32);
	return 0;
}

void fmt_trailer_encode(const struct fmt_trailer *t, uint8_t out[FMT_TRAILER_SIZE])
{
	memset(out, 0, FMT_TRAILER_SIZE);
	fmt_put64(out, t->index_offset);
	fmt_put64(out + 8, t->num_blocks);
	fmt_put64(out + 16, t->num_records);
	fmt_put64(out + 24, t->index_hash);
	fmt_put64(out + 48, XXH64(out, 48, 0));
	memcpy(out + 56, FMT_TRAILER_MAGIC, 8);
}

int fmt_trailer_decode(const uint8_t in[FMT_TRAILER_SIZE], struct fmt_trailer *ret_t)
{
	if (memcmp(in + 56, FMT_TRAILER_MAGIC, 8) || fmt_get64(in + 48) != XXH64(in, 48, 0))
		return -EBADMSG;
	ret_t->index_offset = fmt_get64(in);
	ret_t->num_blocks = fmt_get64(in + 8);
	ret_t->num_records = fmt_get64(in + 16);
	ret_t->index_hash = fmt_get64(in + 24);
	return 0;
}

void fmt_index_encode(const struct fmt_index_entry *e, uint8_t out[FMT_INDEX_ENTRY_SIZE])
{
	memset(out, 0, FMT_INDEX_ENTRY_SIZE);
	fmt_put64(out, e->offset);
	fmt_put64(out + 8, e->first_record);
	fmt_put32(out + 16, e->num_records);
	fmt_put32(out + 20, e->comp_size);
	fmt_put32(out + 24, e->raw_size);
	fmt_put64(out + 32, e->hash);
}

void fmt_index_decode(const uint8_t in[FMT_INDEX_ENTRY_SIZE], struct fmt_index_entry *ret_e)
{
	ret_e->offset = fmt_get64(in);
	ret_e->first_record = fmt_get64(in + 8);
	ret_e->num_records = fmt_get32(in + 16);
	ret_e->comp_size = fmt_get32(in + 20);
	ret_e->raw_size = fmt_get32(in + 24);
	ret_e->hash = fmt_get64(in + 32);
}

uint64_t fmt_block_layout(const struct fmt_schema *s, uint32_t n, const uint64_t *var_bytes,
			  uint32_t *section, uint32_t *data_start)
{
	uint64_t pos = 0;

	for (uint32_t f = 0; f < s->nfields; f++) {
		const struct fmt_field *fd = &s->fields[f];
		pos = fmt_align64(pos);
		if (pos > UINT32_MAX)
			return 0;
		section[f] = (uint32_t)pos;
		if (!fd->variable) {
			pos += (uint64_t)n * fd->max_bytes;
			data_start[f] = section[f];
			continue;
		}
		pos = fmt_align64(pos + 4 * ((uint64_t)n + 1));
		if (pos > UINT32_MAX)
			return 0;
		data_start[f] = (uint32_t)pos;
		pos += var_bytes[f];
	}
	return pos > UINT32_MAX ? 0 : pos;
}
