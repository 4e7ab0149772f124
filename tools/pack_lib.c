/*
 * pack_lib.c: libfeedpack (pack_lib.h), a thin exported shell over
 * fmt_writer: turns the caller's field list into a struct fmt_schema,
 * probes image records (core/image_probe.c) to note their dimensions, and
 * keeps each call's error message on the writer. No format logic of its
 * own: every byte is laid out by format/fmt_writer.c. One thread per
 * writer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "image.h"
#include "pack_lib.h"

#define FEED_PACK_API __attribute__((visibility("default")))

struct feed_pack {
	struct fmt_writer *w;      /* owned */
	uint32_t nfields;          /* values per record */
	struct fmt_schema schema;  /* as given, for names in messages */
	uint64_t base;             /* opts->record_base */
	struct fmt_value *vals;    /* scratch: one value per field */
	struct feed_err err;       /* the last failure */
};

/* Fills s from the caller's fields; -EINVAL naming the field. */
static int schema_fill(struct fmt_schema *s, const struct feed_pack_field *fields, uint32_t n,
		       struct feed_err *err)
{
	if (n == 0 || n > FMT_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "%u fields: 1..%d allowed", n, FMT_MAX_FIELDS);
	memset(s, 0, sizeof(*s));
	s->nfields = n;
	for (uint32_t i = 0; i < n; i++) {
		const struct feed_pack_field *in = &fields[i];
		struct fmt_field *f = &s->fields[i];
		if (!in->name || strlen(in->name) >= FMT_NAME_MAX)
			return feed_err_set(err, -EINVAL, "field %u: name missing or too long", i);
		if (in->rank > FMT_MAX_RANK)
			return feed_err_set(err, -EINVAL, "field '%s': rank %u above %d", in->name,
					    in->rank, FMT_MAX_RANK);
		snprintf(f->name, sizeof(f->name), "%s", in->name);
		f->dtype = in->dtype;
		f->rank = in->rank;
		memcpy(f->shape, in->shape, sizeof(f->shape[0]) * in->rank);
		f->variable = in->variable != 0;
		f->image = in->image != 0;
		f->max_bytes = f->variable ? 0 : fmt_field_elem_bytes(f);
	}
	return 0;
}

FEED_PACK_API int feed_pack_new(const char *out_dir, const struct feed_pack_field *fields,
				uint32_t nfields, const struct feed_pack_opts *opts,
				struct feed_pack **ret, char *errbuf, size_t errcap)
{
	struct feed_pack *p = calloc(1, sizeof(*p));
	struct fmt_writer_opts wo = {0};
	int rc;

	if (!p || !(p->vals = calloc(FMT_MAX_FIELDS, sizeof(*p->vals)))) {
		if (errbuf && errcap)
			snprintf(errbuf, errcap, "out of memory");
		free(p);
		return -ENOMEM;
	}
	if ((rc = schema_fill(&p->schema, fields, nfields, &p->err)) < 0)
		goto fail;
	if (opts)
		wo = (struct fmt_writer_opts){
			.name = opts->name, .source = opts->source, .block_bytes = opts->block_bytes,
			.block_records = opts->block_records, .zstd_level = opts->zstd_level,
			.shard_bytes = opts->shard_bytes, .num_classes = opts->num_classes,
			.classes = opts->classes};
	if ((rc = fmt_writer_new(out_dir, &p->schema, &wo, &p->w, &p->err)) < 0) {
		p->w = NULL;
		goto fail;
	}
	p->nfields = nfields;
	p->base = opts ? opts->record_base : 0;
	*ret = p;
	return 0;
fail:
	if (errbuf && errcap)
		snprintf(errbuf, errcap, "%s", p->err.msg);
	feed_pack_free(p);
	return rc;
}

/* Probes the image records of the record about to be added. */
static int probe_images(struct feed_pack *p, struct img_info *info)
{
	uint64_t rec = p->base + fmt_writer_count(p->w);

	for (uint32_t f = 0; f < p->nfields; f++) {
		if (!p->schema.fields[f].image)
			continue;
		int rc = img_probe(p->vals[f].data, p->vals[f].len, &info[f], &p->err);
		if (rc < 0)
			return feed_err_prefix(&p->err, "sample %llu: field '%s'",
					       (unsigned long long)rec, p->schema.fields[f].name);
	}
	return 0;
}

FEED_PACK_API int feed_pack_add(struct feed_pack *p, const void *const *data, const size_t *lens)
{
	struct img_info info[FMT_MAX_FIELDS];
	int rc;

	p->err.msg[0] = '\0';
	for (uint32_t f = 0; f < p->nfields; f++)
		p->vals[f] = (struct fmt_value){.data = data[f], .len = lens[f]};
	if ((rc = probe_images(p, info)) < 0)
		return rc;
	if ((rc = fmt_writer_add(p->w, p->vals, &p->err)) < 0)
		return rc;
	for (uint32_t f = 0; f < p->nfields; f++)
		if (p->schema.fields[f].image &&
		    (rc = fmt_writer_note_image(p->w, f, info[f].width, info[f].height, &p->err)) < 0)
			return rc;
	return 0;
}

FEED_PACK_API int feed_pack_add_batch(struct feed_pack *p, uint64_t n, const void *const *data,
				      const uint64_t *const *offs)
{
	const void *ptr[FMT_MAX_FIELDS];
	size_t len[FMT_MAX_FIELDS];

	for (uint64_t j = 0; j < n; j++) {
		for (uint32_t f = 0; f < p->nfields; f++) {
			const uint8_t *base = data[f];
			if (offs[f]) {
				if (offs[f][j + 1] < offs[f][j])
					return feed_err_set(&p->err, -EINVAL,
							    "sample %llu: field '%s': offsets go backwards",
							    (unsigned long long)(p->base +
										 feed_pack_count(p)),
							    p->schema.fields[f].name);
				ptr[f] = base + offs[f][j];
				len[f] = (size_t)(offs[f][j + 1] - offs[f][j]);
			} else {
				len[f] = (size_t)p->schema.fields[f].max_bytes;
				ptr[f] = base + j * len[f];
			}
		}
		int rc = feed_pack_add(p, ptr, len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

FEED_PACK_API int feed_pack_adopt(struct feed_pack *p, const char *part_dir)
{
	p->err.msg[0] = '\0';
	return fmt_writer_adopt(p->w, part_dir, &p->err);
}

FEED_PACK_API uint64_t feed_pack_count(const struct feed_pack *p)
{
	return fmt_writer_count(p->w);
}

FEED_PACK_API int feed_pack_finish(struct feed_pack *p)
{
	p->err.msg[0] = '\0';
	return fmt_writer_finish(p->w, &p->err);
}

FEED_PACK_API const char *feed_pack_errmsg(const struct feed_pack *p)
{
	return p->err.msg;
}

FEED_PACK_API void feed_pack_free(struct feed_pack *p)
{
	if (!p)
		return;
	fmt_writer_free(p->w);
	free(p->vals);
	free(p);
}
