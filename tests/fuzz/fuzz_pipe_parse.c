/*
 * fuzz_pipe_parse: a pipeline's text (OpenStream.pipeline, a config's
 * pipelines), through pipe_parse(), then pipe_plan() against the schemas
 * datasets have (a fixed 28x28 image and a label, a 32x32 RGB image, a
 * variable field of encoded images, token sequences), then aug_apply() of
 * every plan over fixed fields on one patterned record, when its buffers
 * are small. Invariants: a refusal names what was wrong; the canonical
 * text parses again to the same canonical text; a plan's out schema is a
 * valid schema, its hash and scratch are what the getters say, and the
 * sample it builds fits the caps the plan gave.
 */
#include <errno.h>
#include <string.h>

#include "augment.h"
#include "fuzz.h"
#include "pipeline.h"

#define FUZZ_NSCHEMAS 4
#define FUZZ_APPLY_MAX (4u << 20)  /* bytes of outputs plus scratch aug_apply() gets */

static struct fmt_schema fuzz_schemas[FUZZ_NSCHEMAS];

static void fuzz_field(struct fmt_field *f, const char *name, int dtype, uint32_t rank,
		       const uint32_t *shape, bool variable)
{
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->dtype = dtype;
	f->rank = rank;
	if (rank)
		memcpy(f->shape, shape, rank * sizeof(shape[0]));
	f->variable = variable;
	f->max_bytes = fmt_field_elem_bytes(f) * (variable ? 512 : 1);
}

static void fuzz_schemas_make(void)
{
	static const uint32_t mnist[] = {28, 28}, rgb[] = {32, 32, 3}, seq[] = {64};
	struct fmt_schema *s = fuzz_schemas;

	fuzz_field(&s[0].fields[0], "image", FEED_DTYPE_U8, 2, mnist, false);
	fuzz_field(&s[0].fields[1], "label", FEED_DTYPE_I64, 0, NULL, false);
	fuzz_field(&s[1].fields[0], "image", FEED_DTYPE_U8, 3, rgb, false);
	fuzz_field(&s[1].fields[1], "label", FEED_DTYPE_I64, 0, NULL, false);
	fuzz_field(&s[2].fields[0], "image", FEED_DTYPE_U8, 0, NULL, true);
	s[2].fields[0].image = true;
	s[2].fields[0].max_bytes = 1 << 20;
	s[2].fields[0].max_width = 640;
	s[2].fields[0].max_height = 480;
	s[2].fields[0].max_pixels = 640 * 480;
	fuzz_field(&s[2].fields[1], "label", FEED_DTYPE_I64, 0, NULL, false);
	fuzz_field(&s[3].fields[0], "tokens", FEED_DTYPE_U16, 1, seq, false);
	fuzz_field(&s[3].fields[1], "text", FEED_DTYPE_U32, 0, NULL, true);
	for (int i = 0; i < FUZZ_NSCHEMAS; i++) {
		s[i].nfields = 2;
		FUZZ_CHECK(fmt_schema_check(&s[i], NULL) == 0, "schema %d of the target", i);
	}
}

/* The canonical text is a fixed point of parse + canonical. */
static void fuzz_canonical(const struct pipe_spec *spec)
{
	static char a[PIPE_CANON_MAX], b[PIPE_CANON_MAX];
	struct feed_err err = {0};
	struct pipe_spec again;

	FUZZ_CHECK(pipe_spec_canonical(spec, a, sizeof(a)) >= 0, "canonical text too long");
	FUZZ_CHECK(pipe_parse(a, &again, &err) == 0, "canonical '%s' does not parse: %s", a,
		   err.msg);
	FUZZ_CHECK(pipe_spec_canonical(&again, b, sizeof(b)) >= 0, "canonical text too long");
	FUZZ_CHECK(!strcmp(a, b), "canonical '%s' parses to '%s'", a, b);
}

/* One sample through a plan over fixed fields: patterned bytes in. */
static void fuzz_apply(const struct pipe_plan *p)
{
	size_t total = (p->scratch_bytes + 63) & ~(size_t)63, len[FMT_MAX_FIELDS];
	struct aug_in in[FMT_MAX_FIELDS];
	struct aug_out out[FMT_MAX_FIELDS];

	for (uint32_t f = 0; f < p->in.nfields; f++)
		total += p->in.fields[f].max_bytes + p->out.fields[f].max_bytes;
	if (total > FUZZ_APPLY_MAX)
		return;
	/* scratch first: it must be aligned (pipeline.h) */
	uint8_t *mem = aligned_alloc(64, (total + 64) & ~(size_t)63);
	uint8_t *scratch = p->scratch_bytes ? mem : NULL, *m = mem + ((p->scratch_bytes + 63) & ~(size_t)63);
	FUZZ_CHECK(mem, "aligned_alloc %zu", total + 64);
	for (size_t i = 0; i < total; i++)
		mem[i] = (uint8_t)(i * 131 + 7);
	for (uint32_t f = 0; f < p->in.nfields; f++) {
		in[f] = (struct aug_in){m, p->in.fields[f].max_bytes};
		m += in[f].len;
		out[f] = (struct aug_out){m, p->out.fields[f].max_bytes, &len[f]};
		m += out[f].cap;
	}
	struct aug_ctx ctx = {.seed = 7, .epoch = 1, .sample = 3};
	struct feed_err err = {0};
	int rc = aug_apply(p, &ctx, in, out, scratch, &err);
	FUZZ_CHECK(rc == 0, "a planned pipeline fails on a record of its schema: %s", err.msg);
	for (uint32_t f = 0; f < p->in.nfields; f++)
		FUZZ_CHECK(len[f] <= out[f].cap, "field %u: %zu bytes written, cap %zu", f, len[f],
			   out[f].cap);
	free(mem);
}

static void fuzz_plan(const struct pipe_spec *spec, const struct fmt_schema *s, bool apply)
{
	static struct pipe_plan plan;
	struct feed_err err = {0};
	int rc = pipe_plan(spec, s, &plan, &err);

	if (rc < 0) {
		FUZZ_CHECK(err.msg[0], "plan refused (%d) without a message", rc);
		return;
	}
	FUZZ_CHECK(fmt_schema_check(&plan.out, &err) == 0, "out schema: %s", err.msg);
	FUZZ_CHECK(pipe_hash(&plan) == plan.hash, "hash");
	FUZZ_CHECK(pipe_scratch_bytes(&plan) == plan.scratch_bytes, "scratch");
	if (apply)
		fuzz_apply(&plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char text[PIPE_TEXT_MAX + 1];
	struct feed_err err = {0};
	struct pipe_spec spec;

	if (!fuzz_schemas[0].nfields)
		fuzz_schemas_make();
	if (size > PIPE_TEXT_MAX)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	int rc = pipe_parse(text, &spec, &err);
	if (rc < 0) {
		FUZZ_CHECK(err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	fuzz_canonical(&spec);
	for (int i = 0; i < FUZZ_NSCHEMAS; i++)
		fuzz_plan(&spec, &fuzz_schemas[i], i != 2);
	return 0;
}
