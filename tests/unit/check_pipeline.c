/*
 * check_pipeline.c: unit tests of core/pipeline_*.c: the text form with
 * any spacing, canonical text and a pinned hash, every parse and plan
 * error naming op and key, output shapes, fusion into stages and scratch
 * sizes.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "pipeline.h"

/* image u8 28x28, label i64, tokens u16 variable (<= 100), rgb u8
 * 8x6x3, vec u32 [10], name str. */
static void schema_mixed(struct fmt_schema *s)
{
	memset(s, 0, sizeof(*s));
	struct fmt_field f[] = {
		{.name = "label", .dtype = FEED_DTYPE_I64, .max_bytes = 8},
		{.name = "image", .dtype = FEED_DTYPE_U8, .rank = 2, .shape = {28, 28}, .max_bytes = 784},
		{.name = "tokens", .dtype = FEED_DTYPE_U16, .variable = true, .max_bytes = 200},
		{.name = "rgb", .dtype = FEED_DTYPE_U8, .rank = 3, .shape = {8, 6, 3}, .max_bytes = 144},
		{.name = "vec", .dtype = FEED_DTYPE_U32, .rank = 1, .shape = {10}, .max_bytes = 40},
		{.name = "name", .dtype = FEED_DTYPE_STR, .variable = true, .max_bytes = 30},
	};
	s->nfields = sizeof(f) / sizeof(f[0]);
	memcpy(s->fields, f, sizeof(f));
}

static void canon_is(const char *text, const char *want)
{
	struct pipe_spec spec;
	struct feed_err err = {0};
	char buf[PIPE_CANON_MAX];

	ck_assert_msg(pipe_parse(text, &spec, &err) == 0, "'%s': %s", text, err.msg);
	ck_assert_int_eq(pipe_spec_canonical(&spec, buf, sizeof(buf)), (int)strlen(want));
	ck_assert_str_eq(buf, want);
}

START_TEST(test_pipeline_parse_contract_example)
{
	struct pipe_spec spec;

	ck_assert_int_eq(pipe_parse("random_crop(size=28, pad=2) | hflip(p=0.5)", &spec, NULL), 0);
	ck_assert_uint_eq(spec.nops, 2);
	ck_assert_int_eq(spec.ops[0].kind, PIPE_RANDOM_CROP);
	ck_assert_uint_eq(spec.ops[0].size, 28);
	ck_assert_uint_eq(spec.ops[0].pad, 2);
	ck_assert_str_eq(spec.ops[0].field, "");
	ck_assert_int_eq(spec.ops[1].kind, PIPE_HFLIP);
	ck_assert_uint_eq(spec.ops[1].p_ppb, 500000000);
}
END_TEST

START_TEST(test_pipeline_canonical_spacing_and_defaults)
{
	canon_is("random_crop(size=28, pad=2) | hflip(p=0.5)", "random_crop(size=28, pad=2) | hflip(p=0.5)");
	canon_is("  random_crop ( size = 028 ,pad=2 )|hflip\t\n", "random_crop(size=28, pad=2) | hflip(p=0.5)");
	canon_is("random_crop(size=3)", "random_crop(size=3, pad=0)");
	canon_is("hflip()", "hflip(p=0.5)");
	canon_is("hflip(p=.50)", "hflip(p=0.5)");
	canon_is("hflip(p=1.000)", "hflip(p=1)");
	canon_is("hflip(p=0)", "hflip(p=0)");
	canon_is("hflip(p=0.125000000000)", "hflip(p=0.125)");
	canon_is("hflip(p=0.000000001)", "hflip(p=0.000000001)");
	canon_is("resize(w=4, h=3)", "resize(h=3, w=4)");
	canon_is("center_crop(field=rgb, size=4)", "center_crop(size=4, field=rgb)");
	canon_is("random_window(len=16)|identity", "random_window(len=16) | identity");
	canon_is("", "identity");
	canon_is("   ", "identity");
}
END_TEST

/* Each bad text fails with -EINVAL and a message holding every needle. */
static void refused(const char *text, const char *n1, const char *n2, const char *n3)
{
	struct pipe_spec spec;
	struct feed_err err = {0};

	ck_assert_msg(pipe_parse(text, &spec, &err) == -EINVAL, "'%s' accepted", text);
	ck_assert_int_eq(err.code, -EINVAL);
	const char *n[] = {n1, n2, n3};
	for (int k = 0; k < 3; k++)
		ck_assert_msg(!n[k] || strstr(err.msg, n[k]), "'%s': message '%s' lacks '%s'", text,
			      err.msg, n[k]);
}

START_TEST(test_pipeline_parse_errors_name_op_and_key)
{
	refused("blur(k=3)", "op 1 'blur'", "unknown op", NULL);
	refused("hflip | random_crop(sz=3)", "op 2 'random_crop'", "unknown key 'sz'", "size, pad");
	refused("random_crop(pad=2)", "op 1 'random_crop'", "missing key 'size'", NULL);
	refused("hflip | resize(h=10)", "op 2 'resize'", "missing key 'w'", NULL);
	refused("random_crop(size=2x)", "op 1 'random_crop'", "key 'size'", "bad number '2x'");
	refused("random_crop(size=-3)", "op 1 'random_crop'", "key 'size'", "bad number '-3'");
	refused("random_crop(size=0)", "op 1 'random_crop'", "key 'size'", "out of range");
	refused("resize(h=10, w=99999999999)", "op 1 'resize'", "key 'w'", "out of range");
	refused("random_window(len=0)", "op 1 'random_window'", "key 'len'", "out of range");
	refused("hflip(p=1.5)", "op 1 'hflip'", "key 'p'", "not in [0, 1]");
	refused("hflip(p=0.5.1)", "op 1 'hflip'", "key 'p'", "bad number");
	refused("hflip(p=0.1234567891)", "op 1 'hflip'", "key 'p'", "9 decimals");
	refused("hflip(p=)", "op 1 'hflip'", "key 'p'", "missing value");
	refused("hflip(p 0.5)", "op 1 'hflip'", "key 'p'", "expected '='");
	refused("hflip(p=0.5, p=0.1)", "op 1 'hflip'", "key 'p' given twice", NULL);
	refused("hflip(p=0.5,)", "op 1 'hflip'", "expected a key", NULL);
	refused("hflip(p=0.5", "op 1 'hflip'", "expected ',' or ')'", "end of text");
	refused("hflip(p=0.5) x", "op 1 'hflip'", "unexpected 'x'", "column 14");
	refused("hflip(p=0.5))", "op 1 'hflip'", "unexpected ')'", NULL);
	refused("hflip |", "op 2", "expected an op name", NULL);
	refused("| hflip", "op 1", "expected an op name", NULL);
	refused("center_crop(size=3, field=a b)", "op 1 'center_crop'", "expected ',' or ')'", NULL);
	refused("center_crop(size=3, field=a/b)", "op 1 'center_crop'", "expected ',' or ')'", NULL);
	refused("identity(field=" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa)",
		"op 1 'identity'", "key 'field'", NULL);
	refused("hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|hflip|"
		"hflip|hflip|hflip|hflip", "more than 16 ops", NULL, NULL);
}
END_TEST

static struct pipe_plan *plan_new(void)
{
	struct pipe_plan *p = calloc(1, sizeof(*p));
	ck_assert_ptr_nonnull(p);
	return p;
}

static void plan_refused(const struct fmt_schema *s, const char *text, const char *n1,
			 const char *n2, const char *n3)
{
	struct pipe_plan *p = plan_new();
	struct feed_err err = {0};

	ck_assert_msg(pipe_plan_text(text, s, p, &err) == -EINVAL, "'%s' accepted", text);
	const char *n[] = {n1, n2, n3};
	for (int k = 0; k < 3; k++)
		ck_assert_msg(!n[k] || strstr(err.msg, n[k]), "'%s': message '%s' lacks '%s'", text,
			      err.msg, n[k]);
	ck_assert_uint_eq(p->spec.nops, 0); /* zeroed on failure */
	free(p);
}

START_TEST(test_pipeline_plan_errors_name_op_and_key)
{
	struct fmt_schema s, plain;

	schema_mixed(&s);
	plan_refused(&s, "random_crop(size=33, pad=2)", "op 1 'random_crop'", "key 'size'",
		     "larger than the padded image 32x32");
	plan_refused(&s, "hflip | random_crop(size=8, field=rgb, pad=0)", "op 2 'random_crop'",
		     "key 'size'", "8x6 (8x6 + pad 0)");
	plan_refused(&s, "hflip(field=label)", "op 1 'hflip'", "key 'field'", "'label' is not an image");
	plan_refused(&s, "resize(h=2, w=2, field=vec)", "op 1 'resize'", "key 'field'", "not an image");
	plan_refused(&s, "identity | hflip(field=nope)", "op 2 'hflip'", "key 'field'", "no field 'nope'");
	plan_refused(&s, "identity(field=nope)", "op 1 'identity'", "key 'field'", "no field 'nope'");
	plan_refused(&s, "random_window(len=101)", "op 1 'random_window'", "key 'len'",
		     "longer than the sequence 'tokens' (at most 100");
	plan_refused(&s, "random_window(len=11, field=vec)", "op 1 'random_window'", "key 'len'",
		     "(10 elements)");
	plan_refused(&s, "random_window(len=3, field=label)", "op 1 'random_window'", "key 'field'",
		     "not a sequence");
	plan_refused(&s, "random_window(len=3, field=name)", "key 'field'", "not a sequence", NULL);
	plan_refused(&s, "random_window(len=4, field=tokens) | random_window(len=5, field=tokens)",
		     "op 2 'random_window'", "key 'len'", "(4 elements)");
	plan_refused(&s, "resize(h=65535, w=65535, field=rgb)", "op 1 'resize'", "4 GiB", NULL);
	memset(&plain, 0, sizeof(plain));
	plain.nfields = 1;
	plain.fields[0] = s.fields[0];
	plan_refused(&plain, "hflip", "op 1 'hflip'", "missing key 'field'", "no image field");
	plan_refused(&plain, "random_window(len=2)", "op 1 'random_window'", "missing key 'field'",
		     "no token sequence");
}
END_TEST

/* to_chw: the u8 image's channels first, in a stage of its own, and
 * nothing after it on that field; a 2-d image gets one channel. */
START_TEST(test_pipeline_plan_to_chw)
{
	struct fmt_schema s;
	struct pipe_plan *p = plan_new();
	struct feed_err err = {0};

	schema_mixed(&s);
	ck_assert_msg(pipe_plan_text("center_crop(size=5, field=rgb) | to_chw(field=rgb) | "
				     "to_chw", &s, p, &err) == 0, "%s", err.msg);
	const struct fmt_field *rgb = &p->out.fields[3], *img = &p->out.fields[1];
	ck_assert_uint_eq(rgb->rank, 3);
	ck_assert_uint_eq(rgb->shape[0], 3);
	ck_assert_uint_eq(rgb->shape[1], 5);
	ck_assert_uint_eq(rgb->shape[2], 5);
	ck_assert_uint_eq(rgb->max_bytes, 75);
	ck_assert_uint_eq(img->rank, 3);
	ck_assert_uint_eq(img->shape[0], 1);
	ck_assert_int_eq(p->stages[p->field_stage[3] + 1].kind, PIPE_STAGE_CHW);
	ck_assert_uint_eq(p->field_nstages[3], 2);
	ck_assert_int_eq(pipe_plan_text("to_chw(field=rgb) | hflip(field=rgb)", &s, p, &err),
			 -EINVAL);
	ck_assert_msg(strstr(err.msg, "'rgb' is CHW already"), "%s", err.msg);
	free(p);
}
END_TEST

START_TEST(test_pipeline_plan_shapes)
{
	struct fmt_schema s;
	struct pipe_plan *p = plan_new();
	struct feed_err err = {0};

	schema_mixed(&s);
	ck_assert_msg(pipe_plan_text("random_crop(size=24, pad=2) | resize(h=10, w=12) | "
				     "center_crop(size=5, field=rgb) | random_window(len=16)",
				     &s, p, &err) == 0, "%s", err.msg);
	const struct fmt_field *img = &p->out.fields[1], *rgb = &p->out.fields[3],
			       *tok = &p->out.fields[2];
	ck_assert_uint_eq(img->rank, 2);
	ck_assert_uint_eq(img->shape[0], 10);
	ck_assert_uint_eq(img->shape[1], 12);
	ck_assert_uint_eq(img->max_bytes, 120);
	ck_assert_uint_eq(rgb->rank, 3);
	ck_assert_uint_eq(rgb->shape[0], 5);
	ck_assert_uint_eq(rgb->shape[1], 5);
	ck_assert_uint_eq(rgb->shape[2], 3);
	ck_assert_uint_eq(rgb->max_bytes, 75);
	ck_assert(!tok->variable);
	ck_assert_uint_eq(tok->rank, 1);
	ck_assert_uint_eq(tok->shape[0], 16);
	ck_assert_uint_eq(tok->max_bytes, 32);
	/* untouched fields pass through unchanged */
	ck_assert_mem_eq(&p->out.fields[0], &s.fields[0], sizeof(s.fields[0]));
	ck_assert_mem_eq(&p->out.fields[4], &s.fields[4], sizeof(s.fields[4]));
	ck_assert_mem_eq(&p->out.fields[5], &s.fields[5], sizeof(s.fields[5]));
	ck_assert_int_eq(fmt_schema_check(&p->out, NULL), 0);
	free(p);
}
END_TEST

START_TEST(test_pipeline_plan_fuses_stages)
{
	struct fmt_schema s;
	struct pipe_plan *p = plan_new();

	schema_mixed(&s);
	ck_assert_int_eq(pipe_plan_text("random_crop(size=28, pad=2) | hflip(p=0.5) | identity | "
					"center_crop(size=20)", &s, p, NULL), 0);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_int_eq(p->stages[0].kind, PIPE_STAGE_GEO);
	ck_assert_uint_eq(p->stages[0].count, 3);
	ck_assert_uint_eq(p->stages[0].field, 1);
	ck_assert_uint_eq(p->stages[0].in_h, 28);
	ck_assert_uint_eq(p->stages[0].out_w, 20);
	ck_assert_uint_eq(p->field_nstages[1], 1);
	ck_assert_uint_eq(p->field_nstages[0], 0);
	ck_assert_uint_eq(pipe_scratch_bytes(p), 0); /* straight to the slot */

	/* crop | resize | flip: three stages, two intermediates on field 1;
	 * the rgb flip interleaved in the text still fuses with its crop */
	ck_assert_int_eq(pipe_plan_text("random_crop(size=20) | hflip(field=rgb) | resize(h=30, w=31) "
					"| center_crop(size=4, field=rgb) | hflip",
					&s, p, NULL), 0);
	ck_assert_uint_eq(p->nstages, 4);
	ck_assert_uint_eq(p->field_nstages[1], 3);
	ck_assert_uint_eq(p->field_nstages[3], 1);
	ck_assert_uint_eq(p->stages[3].count, 2);
	ck_assert_uint_eq(p->inter_bytes, 30 * 31);
	ck_assert_uint_ge(pipe_scratch_bytes(p), 2 * 30 * 31 + 16 * 31);
	ck_assert_int_eq(pipe_plan_text("random_window(len=50) | random_window(len=10)", &s, p, NULL), 0);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_int_eq(p->stages[0].kind, PIPE_STAGE_WINDOW);
	ck_assert_uint_eq(p->stages[0].in_elems, 0);
	ck_assert_uint_eq(p->stages[0].out_elems, 10);
	free(p);
}
END_TEST

START_TEST(test_pipeline_canonical_hash_stable)
{
	struct fmt_schema s;
	struct pipe_plan *a = plan_new(), *b = plan_new();

	schema_mixed(&s);
	ck_assert_int_eq(pipe_plan_text("random_crop(size=28, pad=2) | hflip(p=0.5)", &s, a, NULL), 0);
	ck_assert_str_eq(a->canonical,
			 "random_crop(size=28, pad=2, field=image) | hflip(p=0.5, field=image)");
	/* pinned: resume tokens from older builds must keep matching */
	ck_assert_uint_eq(pipe_hash(a), 0x1892f3c251185374ull); /* python xxhash agrees */
	ck_assert_int_eq(pipe_plan_text(" random_crop(pad=2,size=28,field=image)|hflip ", &s, b,
					NULL), 0);
	ck_assert_str_eq(b->canonical, a->canonical);
	ck_assert_uint_eq(pipe_hash(b), pipe_hash(a));
	ck_assert_int_eq(pipe_plan_text("random_crop(size=28, pad=2) | hflip(p=0.25)", &s, b, NULL), 0);
	ck_assert_uint_ne(pipe_hash(b), pipe_hash(a));
	ck_assert_int_eq(pipe_plan_text("random_crop(size=28, pad=2) | identity | hflip", &s, b, NULL), 0);
	ck_assert_uint_ne(pipe_hash(b), pipe_hash(a)); /* op indices key the draws */
	free(a);
	free(b);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Image ops                                                           */

/* image: encoded JPEG/PNG bytes (largest 640x480), label i64. */
static void schema_encoded(struct fmt_schema *s)
{
	memset(s, 0, sizeof(*s));
	s->nfields = 2;
	struct fmt_field *f = &s->fields[0];
	strcpy(f->name, "image");
	f->dtype = FEED_DTYPE_U8;
	f->variable = true;
	f->max_bytes = 200000;
	f->image = true;
	f->max_width = 640;
	f->max_height = 480;
	f->max_pixels = 640 * 400;
	strcpy(s->fields[1].name, "label");
	s->fields[1].dtype = FEED_DTYPE_I64;
	s->fields[1].max_bytes = 8;
}

START_TEST(test_pipeline_image_ops_canonical)
{
	canon_is("decode", "decode(channels=3)");
	canon_is("decode(channels=1)", "decode(channels=1)");
	canon_is("random_resized_crop(size=224)",
		 "random_resized_crop(size=224, scale_min=0.08, scale_max=1, ratio_min=0.75, "
		 "ratio_max=1.3333)");
	canon_is("random_resized_crop(ratio_max=2.50, size=8, scale_min=.5, scale_max=0.75, "
		 "ratio_min=0.5)",
		 "random_resized_crop(size=8, scale_min=0.5, scale_max=0.75, ratio_min=0.5, "
		 "ratio_max=2.5)");
	canon_is("resize(short=256)", "resize(short=256)");
	canon_is("resize(h=3, w=4)", "resize(h=3, w=4)");
	canon_is("normalize(mean=(0.485,0.456,0.406), std=(0.229, 0.224, 0.225,))",
		 "normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype=f32, "
		 "layout=chw)");
	canon_is("normalize(layout=hwc, dtype=bf16, std=0.25, mean=-0.5)",
		 "normalize(mean=-0.5, std=0.25, dtype=bf16, layout=hwc)");
	canon_is("normalize(mean=(1), std=(2.0), dtype=f16)",
		 "normalize(mean=1, std=2, dtype=f16, layout=chw)");

	struct pipe_spec spec;
	ck_assert_int_eq(pipe_parse("normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, "
				    "0.225)) | decode(channels=1) | random_resized_crop(size=7)",
				    &spec, NULL), 0);
	ck_assert_uint_eq(spec.ops[0].nmean, 3);
	ck_assert_int_eq(spec.ops[0].mean_ppb[1], 456000000);
	ck_assert_int_eq(spec.ops[0].std_ppb[2], 225000000);
	ck_assert_int_eq(spec.ops[0].dtype, FEED_DTYPE_F32);
	ck_assert_uint_eq(spec.ops[0].layout, PIPE_LAYOUT_CHW);
	ck_assert_uint_eq(spec.ops[1].channels, 1);
	ck_assert_uint_eq(spec.ops[2].scale_ppb[0], 80000000);
	ck_assert_uint_eq(spec.ops[2].ratio_ppb[1], 1333300000);
}
END_TEST

START_TEST(test_pipeline_image_ops_parse_errors)
{
	refused("decode(channels=2)", "op 1 'decode'", "key 'channels'", "1 (gray) or 3");
	refused("decode(channels=4)", "op 1 'decode'", "key 'channels'", "out of range");
	refused("decode(size=3)", "op 1 'decode'", "unknown key 'size'", "channels");
	refused("random_resized_crop()", "op 1 'random_resized_crop'", "missing key 'size'", NULL);
	refused("random_resized_crop(size=0)", "op 1 'random_resized_crop'", "key 'size'", NULL);
	refused("random_resized_crop(size=9, scale_min=1.5)", "op 1 'random_resized_crop'",
		"key 'scale_min'", "not in [0, 1]");
	refused("random_resized_crop(size=9, scale_max=0)", "op 1 'random_resized_crop'",
		"key 'scale_max'", "not in [0.000000001, 1]");
	refused("random_resized_crop(size=9, scale_min=0.9, scale_max=0.5)",
		"op 1 'random_resized_crop'", "key 'scale_min'", "above scale_max 0.5");
	refused("random_resized_crop(size=9, ratio_min=0)", "op 1 'random_resized_crop'",
		"key 'ratio_min'", "not in");
	refused("random_resized_crop(size=9, ratio_max=101)", "op 1 'random_resized_crop'",
		"key 'ratio_max'", "not in");
	refused("random_resized_crop(size=9, ratio_min=2, ratio_max=1)", "key 'ratio_min'",
		"above ratio_max 1", NULL);
	refused("random_resized_crop(size=9, ratio_max=abc)", "key 'ratio_max'", "bad number 'abc'",
		NULL);
	refused("resize(short=0)", "op 1 'resize'", "key 'short'", "out of range");
	refused("resize(short=10, h=3, w=4)", "op 1 'resize'", "key 'short'", "either short or h and w");
	refused("hflip | resize(w=3)", "op 2 'resize'", "missing key 'h'", NULL);
	refused("resize()", "op 1 'resize'", "missing key 'h' and 'w' (or 'short')", NULL);
	refused("normalize(std=(1, 1, 1))", "op 1 'normalize'", "missing key 'mean'", NULL);
	refused("normalize(mean=(0.5, 0.5, 0.5))", "op 1 'normalize'", "missing key 'std'", NULL);
	refused("normalize(mean=(1, 2, 3, 4, 5), std=1)", "op 1 'normalize'", "key 'mean'",
		"more than 4 values");
	refused("normalize(mean=0.5, std=0)", "op 1 'normalize'", "key 'std'", "not in");
	refused("normalize(mean=1001, std=1)", "op 1 'normalize'", "key 'mean'", "not in");
	refused("normalize(mean=(), std=1)", "op 1 'normalize'", "key 'mean'", "missing value");
	refused("normalize(mean=(0.5 0.5), std=1)", "op 1 'normalize'", "key 'mean'",
		"expected ',' or ')'");
	refused("normalize(mean=0.5, std=1, dtype=f64)", "op 1 'normalize'", "key 'dtype'",
		"f32, f16, bf16");
	refused("normalize(mean=0.5, std=1, layout=nchw)", "op 1 'normalize'", "key 'layout'",
		"chw, hwc");
	refused("hflip(p=(0.5))", "op 1 'hflip'", "key 'p'", "takes one value, not a tuple");
}
END_TEST

START_TEST(test_pipeline_image_plan)
{
	struct fmt_schema s, m;
	struct pipe_plan *p = plan_new();
	struct feed_err err = {0};

	schema_encoded(&s);
	ck_assert_msg(pipe_plan_text("decode | random_resized_crop(size=224) | hflip(p=0.5)", &s,
				     p, &err) == 0, "%s", err.msg);
	const struct fmt_field *o = &p->out.fields[0];
	ck_assert(!o->variable);
	ck_assert_int_eq(o->dtype, FEED_DTYPE_U8);
	ck_assert_uint_eq(o->rank, 3);
	ck_assert_uint_eq(o->shape[0], 224);
	ck_assert_uint_eq(o->shape[1], 224);
	ck_assert_uint_eq(o->shape[2], 3);
	ck_assert_uint_eq(o->max_bytes, 224 * 224 * 3);
	ck_assert_int_eq(fmt_schema_check(&p->out, NULL), 0);
	ck_assert_uint_eq(p->nstages, 1); /* decode, crop and flip in one pass */
	ck_assert_int_eq(p->stages[0].kind, PIPE_STAGE_IMAGE);
	ck_assert(p->stages[0].decode);
	ck_assert_uint_eq(p->stages[0].count, 3);
	ck_assert_uint_eq(p->stages[0].in_w, 640);
	ck_assert_uint_eq(p->stages[0].in_h, 480);
	ck_assert_uint_eq(p->dec_lim.max_width, 640);
	ck_assert_uint_eq(p->dec_lim.max_height, 480);
	ck_assert_uint_eq(p->dec_lim.max_pixels, 640 * 400);
	ck_assert_uint_eq(p->dec_channels_mask, 1u << 3);
	ck_assert_uint_eq(p->inter_bytes, 0);
	ck_assert_uint_ge(pipe_scratch_bytes(p), p->img_scratch_bytes);
	ck_assert_str_eq(p->canonical, "decode(channels=3, field=image) | random_resized_crop("
			 "size=224, scale_min=0.08, scale_max=1, ratio_min=0.75, ratio_max=1.3333, "
			 "field=image) | hflip(p=0.5, field=image)");
	ck_assert_mem_eq(&p->out.fields[1], &s.fields[1], sizeof(s.fields[1]));

	/* evaluation: gray, short side then centre crop */
	ck_assert_msg(pipe_plan_text("decode(channels=1) | resize(short=256) | center_crop(size=224)",
				     &s, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(p->out.fields[0].shape[2], 1);
	ck_assert_uint_eq(p->out.fields[0].max_bytes, 224 * 224);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_uint_eq(p->stages[0].count, 3);
	ck_assert_uint_eq(p->dec_channels_mask, 1u << 1);

	/* normalize after the pass: a stage of its own, float CHW out */
	ck_assert_msg(pipe_plan_text("decode | hflip | center_crop(size=100) | hflip | normalize("
				     "mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), dtype=f16)",
				     &s, p, &err) == 0, "%s", err.msg);
	o = &p->out.fields[0];
	ck_assert_int_eq(o->dtype, FEED_DTYPE_F16);
	ck_assert_uint_eq(o->shape[0], 3);
	ck_assert_uint_eq(o->shape[1], 100);
	ck_assert_uint_eq(o->shape[2], 100);
	ck_assert_uint_eq(o->max_bytes, 3 * 100 * 100 * 2);
	ck_assert_uint_eq(p->nstages, 2);
	ck_assert_uint_eq(p->stages[0].count, 4);
	ck_assert_int_eq(p->stages[1].kind, PIPE_STAGE_NORMALIZE);
	ck_assert_uint_eq(p->stages[1].cv.dtype, FEED_CONVERT_F16);
	ck_assert_uint_eq(p->inter_bytes, 100 * 100 * 3);

	/* one mean and one std serve every channel, as torchvision broadcasts them */
	struct feed_convert one;
	ck_assert_msg(pipe_plan_text("decode | center_crop(size=8) | normalize(mean=0.5, std=0.25)",
				     &s, p, &err) == 0, "%s", err.msg);
	one = p->stages[p->nstages - 1].cv;
	ck_assert_msg(pipe_plan_text("decode | center_crop(size=8) | normalize(mean=(0.5, 0.5, 0.5), "
				     "std=(0.25, 0.25, 0.25))", &s, p, &err) == 0, "%s", err.msg);
	ck_assert(!memcmp(&one, &p->stages[p->nstages - 1].cv, sizeof(one)));

	/* fixed by resize(h, w), then today's ops on a fixed image */
	ck_assert_msg(pipe_plan_text("decode | resize(h=32, w=48) | random_crop(size=30) | hflip",
				     &s, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(p->nstages, 2);
	ck_assert_int_eq(p->stages[1].kind, PIPE_STAGE_GEO);
	ck_assert_uint_eq(p->stages[1].count, 2);
	ck_assert_uint_eq(p->inter_bytes, 32 * 48 * 3);
	ck_assert_uint_eq(p->out.fields[0].shape[0], 30);

	/* on fixed u8 images: random_resized_crop, resize(short), normalize */
	schema_mixed(&m);
	ck_assert_msg(pipe_plan_text("random_resized_crop(size=20) | hflip | resize(short=14, "
				     "field=rgb) | normalize(mean=0.5, std=0.5, layout=hwc)",
				     &m, p, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(p->out.fields[1].rank, 3);
	ck_assert_int_eq(p->out.fields[1].dtype, FEED_DTYPE_F32);
	ck_assert_uint_eq(p->out.fields[1].shape[0], 20);
	ck_assert_uint_eq(p->out.fields[1].shape[2], 1);
	ck_assert_uint_eq(p->out.fields[1].max_bytes, 20 * 20 * 4);
	ck_assert_uint_eq(p->out.fields[3].shape[0], 18); /* int(14 * 8 / 6) */
	ck_assert_uint_eq(p->out.fields[3].shape[1], 14);
	ck_assert_uint_eq(p->field_nstages[1], 2);
	ck_assert_int_eq(p->stages[p->field_stage[1]].kind, PIPE_STAGE_IMAGE);
	ck_assert(!p->stages[p->field_stage[1]].decode);
	ck_assert_uint_eq(p->stages[p->field_stage[1]].count, 2);
	ck_assert_uint_eq(p->dec_channels_mask, 0);
	free(p);
}
END_TEST

START_TEST(test_pipeline_image_plan_errors)
{
	struct fmt_schema s, m;

	schema_encoded(&s);
	plan_refused(&s, "random_resized_crop(size=224)", "op 1 'random_resized_crop'",
		     "field 'image' holds encoded images", "decode them first");
	plan_refused(&s, "center_crop(size=3, field=image)", "op 1 'center_crop'",
		     "'image' holds encoded images", NULL);
	plan_refused(&s, "decode", "field 'image': decoded images vary in size",
		     "end with random_resized_crop, center_crop or resize(h, w)", NULL);
	plan_refused(&s, "decode | hflip", "field 'image'", "vary in size", NULL);
	plan_refused(&s, "decode | resize(short=256)", "field 'image'",
		     "op 2 resize(short=256) leaves sizes varying", "follow it with center_crop");
	plan_refused(&s, "decode | random_crop(size=10)", "op 2 'random_crop'", "vary in size",
		     "put random_resized_crop, center_crop or resize(h, w) before random_crop");
	plan_refused(&s, "decode | normalize(mean=(0, 0, 0), std=(1, 1, 1))", "op 2 'normalize'",
		     "vary in size", NULL);
	plan_refused(&s, "decode | resize(short=10) | center_crop(size=20)", "op 3 'center_crop'",
		     "key 'size'", "larger than op 2 resize(short=10)");
	plan_refused(&s, "decode | resize(short=10) | random_resized_crop(size=5)",
		     "op 3 'random_resized_crop'", "take center_crop", NULL);
	plan_refused(&s, "decode | resize(short=10) | resize(short=9)", "op 3 'resize'",
		     "key 'short'", "by op 2 already");
	plan_refused(&s, "decode | center_crop(size=5) | decode", "op 3 'decode'",
		     "missing key 'field'", "no field of encoded images");
	plan_refused(&s, "decode | center_crop(size=5) | decode(field=image)", "op 3 'decode'",
		     "key 'field'", "decoded already");
	plan_refused(&s, "decode(field=label)", "op 1 'decode'", "key 'field'",
		     "'label' is not a field of encoded images");
	plan_refused(&s, "decode | center_crop(size=8) | normalize(mean=(0.5, 0.5), std=(1, 1, 1))",
		     "op 3 'normalize'", "key 'mean'", "2 values for the 3 channels");
	plan_refused(&s, "decode | center_crop(size=8) | normalize(mean=(0.5, 0.5, 0.5), "
		     "std=(1, 1))", "op 3 'normalize'", "key 'std'", "2 values for the 3 channels");
	plan_refused(&s, "decode | center_crop(size=8) | normalize(mean=(0, 0, 0), std=(1, 1, 1)) "
		     "| hflip", "op 4 'hflip'", "normalized already", NULL);
	plan_refused(&s, "decode | center_crop(size=8) | random_window(len=2, field=image)",
		     "op 3 'random_window'", "not a sequence", NULL);
	s.fields[0].max_width = 0;
	plan_refused(&s, "decode | center_crop(size=8)", "op 1 'decode'", "records no image sizes",
		     NULL);
	schema_mixed(&m);
	plan_refused(&m, "decode", "op 1 'decode'", "missing key 'field'", NULL);
	plan_refused(&m, "resize(short=60000, field=rgb)", "op 1 'resize'", "key 'short'",
		     "above 65535");
	plan_refused(&m, "normalize(mean=0, std=1) | hflip", "op 2 'hflip'", "normalized already",
		     NULL);
}
END_TEST

/* concat and pack: parsed with defaults, planned into the rows' schema on
 * a token-document dataset, refused elsewhere naming why. */
START_TEST(test_pipeline_packing_ops)
{
	struct fmt_schema s;
	struct pipe_plan *p = malloc(sizeof(*p));
	struct feed_err err = {0};

	canon_is("concat( seq_len = 2048 )", "concat(seq_len=2048)");
	canon_is("pack(seq_len=512)", "pack(seq_len=512, pad_id=0, window=1000)");
	canon_is("pack(seq_len=8, pad_id=50256, window=7)", "pack(seq_len=8, pad_id=50256, window=7)");
	schema_mixed(&s);
	ck_assert_int_eq(pipe_plan_text("pack(seq_len=64, pad_id=3, window=9)", &s, p, &err), 0);
	ck_assert_int_eq(p->pack.mode, PK_MODE_PACK);
	ck_assert_uint_eq(p->pack.seq_len, 64);
	ck_assert_uint_eq(p->pack.pad_id, 3);
	ck_assert_uint_eq(p->pack.window, 9);
	ck_assert_uint_eq(p->pack_field, 2);
	ck_assert_uint_eq(p->out.nfields, 5);
	ck_assert_str_eq(p->out.fields[0].name, "input_ids");
	ck_assert_int_eq(p->out.fields[0].dtype, FEED_DTYPE_U16);
	ck_assert_uint_eq(p->out.fields[0].shape[0], 64);
	ck_assert_str_eq(p->out.fields[1].name, "labels");
	ck_assert_int_eq(p->out.fields[1].dtype, FEED_DTYPE_I64);
	ck_assert_str_eq(p->out.fields[4].name, "cu_seqlens");
	ck_assert(p->out.fields[4].variable);
	ck_assert_uint_eq(p->out.fields[4].max_bytes, 65 * 4);
	ck_assert_uint_ge(pipe_scratch_bytes(p), pk_scratch_bytes(64));
	ck_assert_int_eq(pipe_plan_text("concat(seq_len=8) | hflip", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "only op"));
	ck_assert_int_eq(pipe_plan_text("concat(seq_len=0)", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "seq_len"));
	ck_assert_int_eq(pipe_plan_text("pack", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "missing key 'seq_len'"));
	s.fields[2].dtype = FEED_DTYPE_I64;  /* not a token dtype */
	ck_assert_int_eq(pipe_plan_text("concat(seq_len=8)", &s, p, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "token-document dataset"));
	free(p);
}
END_TEST

/* ------------------------------------------------------------------ */
/* torchvision's forms, the ops of augment_tv.c, containers            */

START_TEST(test_pipeline_torchvision_forms)
{
	/* positional first arguments and tuples map onto the keys */
	canon_is("resize(256)", "resize(short=256)");
	canon_is("resize((3, 4))", "resize(h=3, w=4)");
	canon_is("resize(size=[3, 4], interpolation=InterpolationMode.BILINEAR, antialias=True)",
		 "resize(h=3, w=4)");
	canon_is("center_crop(224)", "center_crop(size=224)");
	canon_is("center_crop((224, 224))", "center_crop(size=224)");
	canon_is("random_resized_crop(176, scale=(0.08, 1.0), ratio=(0.75, 1.3333), "
		 "interpolation=bilinear, antialias=true)",
		 "random_resized_crop(size=176, scale_min=0.08, scale_max=1, ratio_min=0.75, "
		 "ratio_max=1.3333)");
	canon_is("hflip(0.25)", "hflip(p=0.25)");
	canon_is("random_horizontal_flip(p=0.5)", "hflip(p=0.5)");
	canon_is("random_vertical_flip", "vflip(p=0.5)");
	canon_is("normalize((0.5, 0.25), (0.5, 0.5))",
		 "normalize(mean=(0.5, 0.25), std=(0.5, 0.5), dtype=f32, layout=chw)");
	canon_is("gaussian_blur(5, (0.1, 2.0))",
		 "gaussian_blur(kernel_size=5, sigma_min=0.1, sigma_max=2)");
	canon_is("gaussian_blur((3, 3), sigma=1)", "gaussian_blur(kernel_size=3, sigma=1)");
	canon_is("random_rotation((-30, 30), fill=(0, 0, 0))",
		 "random_rotation(degrees=30, interpolation=nearest, fill=0)");
	canon_is("random_affine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=(-5, 5))",
		 "random_affine(degrees=10, translate=0.1, scale_min=0.9, scale_max=1.1, shear=5, "
		 "interpolation=nearest, fill=0)");
	canon_is("random_erasing(0.1, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=(0, 0, 0))",
		 "random_erasing(p=0.1, scale_min=0.02, scale_max=0.33, ratio_min=0.3, "
		 "ratio_max=3.3, value=0)");
	/* rotate's fill as F.rotate's: absent unless given */
	canon_is("rotate(30, interpolation=BILINEAR)", "rotate(angle=30, interpolation=bilinear)");
	canon_is("rotate(30, fill=7)", "rotate(angle=30, interpolation=nearest, fill=7)");

	struct pipe_spec spec;
	ck_assert_int_eq(pipe_parse("rotate(30) | rotate(30, fill=0) | resize(8, antialias=false)",
				    &spec, NULL), 0);
	ck_assert(!spec.ops[0].fill_set);
	ck_assert(spec.ops[1].fill_set);
	ck_assert_uint_eq(spec.ops[2].antialias, 1);
	ck_assert_uint_eq(spec.ops[2].short_side, 8);
}
END_TEST

START_TEST(test_pipeline_torchvision_forms_refused)
{
	refused("center_crop((224, 200))", "op 1 'center_crop'", "key 'size'", "square");
	refused("resize((1, 2, 3))", "op 1 'resize'", "key 'size'", "(h, w)");
	refused("resize(8, 9)", "op 1 'resize'", "argument 2", "needs a key");
	refused("resize(8, short=9)", "op 1 'resize'", "key 'short' given twice", NULL);
	refused("resize(8, interpolation=nearest)", "op 1 'resize'", "key 'interpolation'",
		"bilinear only");
	refused("rotate(30, interpolation=bicubic)", "op 1 'rotate'", "key 'interpolation'",
		"nearest, bilinear");
	refused("random_resized_crop(8, scale=(0.5,))", "op 1 'random_resized_crop'",
		"key 'scale'", "(min, max)");
	refused("random_rotation((-10, 20))", "op 1 'random_rotation'", "key 'degrees'",
		"(-a, a)");
	refused("random_rotation(10, fill=(1, 2, 3))", "key 'fill'", "values differ", NULL);
	refused("hflip(p=(0.5, 0.5))", "op 1 'hflip'", "key 'p'", "not a tuple");
	refused("resize(8, antialias=maybe)", "key 'antialias'", "true, false", NULL);
	refused("hflip(0.5, 0.5)", "op 1 'hflip'", "argument 2", "needs a key");
	refused("hflip(p=0.5, 0.5)", "op 1 'hflip'", "expected a key", NULL);
}
END_TEST

START_TEST(test_pipeline_tv_ops_parse)
{
	canon_is("decode(exact=true)", "decode(channels=3, exact=true)");
	canon_is("decode(exact=false)", "decode(channels=3)"); /* the default, as before */
	canon_is("pad(4)", "pad(padding=4, fill=0, padding_mode=constant)");
	canon_is("pad((1, 2), fill=9, padding_mode=reflect)",
		 "pad(padding=(1, 2, 1, 2), fill=9, padding_mode=reflect)");
	canon_is("pad(padding=[1, 2, 3, 4], padding_mode=symmetric)",
		 "pad(padding=(1, 2, 3, 4), fill=0, padding_mode=symmetric)");
	canon_is("random_perspective",
		 "random_perspective(distortion_scale=0.5, p=0.5, interpolation=bilinear, fill=0)");
	canon_is("gaussian_noise(sigma=0.2, clip=False)",
		 "gaussian_noise(mean=0, sigma=0.2, clip=false)");
	canon_is("random_apply([invert, rotate(10, fill=0)], p=0.3) | hflip",
		 "random_apply(transforms=[invert, rotate(angle=10, interpolation=nearest, fill=0)], "
		 "p=0.3) | hflip(p=0.5)");
	canon_is("random_choice(transforms=[equalize, posterize(4)], p=(0.2, 0.8))",
		 "random_choice(transforms=[equalize, posterize(bits=4)], p=(0.2, 0.8))");
	canon_is("random_choice([equalize, invert])",
		 "random_choice(transforms=[equalize, invert])");
	canon_is("random_order([invert, vflip(1)])",
		 "random_order(transforms=[invert, vflip(p=1)])");

	struct pipe_spec spec;
	ck_assert_int_eq(pipe_parse("random_apply([invert, equalize]) | vflip", &spec, NULL), 0);
	ck_assert_uint_eq(spec.nops, 4); /* the container, its two transforms, vflip */
	ck_assert_uint_eq(spec.ops[0].nsub, 2);
	ck_assert(spec.ops[1].sub && spec.ops[2].sub && !spec.ops[3].sub);
	ck_assert_int_eq(spec.ops[3].kind, PIPE_VFLIP);

	refused("pad(padding=(1, 2, 3))", "op 1 'pad'", "key 'padding'", "1, 2 or 4");
	refused("pad(2, padding_mode=wrap)", "key 'padding_mode'", "reflect", NULL);
	refused("random_apply([hflip])", "op 2 'hflip'", "transforms", "cannot be one");
	refused("random_apply([pad(2)])", "op 2 'pad'", "cannot be one", NULL);
	refused("random_apply([random_order([invert])])", "containers do not nest", NULL, NULL);
	refused("random_apply(p=0.5)", "op 1 'random_apply'", "missing key 'transforms'", NULL);
	refused("random_choice([invert, equalize], p=(1,))", "key 'p'", "1 values for 2", NULL);
	refused("random_choice([invert, equalize], p=(0, 0))", "key 'p'", "every weight is 0",
		NULL);
	refused("random_apply([invert(field=x)])", "field= goes on the container", NULL, NULL);
	refused("random_apply([rand_augment(num_ops=16), invert])", "more than 16 basic ops", NULL,
		NULL);
	refused("gaussian_noise(mean=(0.1, 0.2))", "key 'mean'", "one value", NULL);
	canon_is("random_erasing(value=(0.5, -1, 2.25))",
		 "random_erasing(p=0.5, scale_min=0.02, scale_max=0.33, ratio_min=0.3, "
		 "ratio_max=3.3, value=(0.5, -1, 2.25))");
}
END_TEST

static struct pipe_plan *plan_for(const char *text, const struct fmt_schema *s)
{
	struct pipe_plan *p = plan_new();
	struct feed_err err = {0};

	ck_assert_msg(pipe_plan_text(text, s, p, &err) == 0, "'%s': %s", text, err.msg);
	return p;
}

START_TEST(test_pipeline_tv_ops_plan)
{
	struct fmt_schema s;
	schema_mixed(&s);
	/* pad grows the image; the pixel stage's buffers hold the largest */
	struct pipe_plan *p = plan_for("pad((1, 2, 3, 4), field=rgb) | invert(field=rgb)", &s);
	const struct fmt_field *f = &p->out.fields[3];
	ck_assert_uint_eq(f->shape[0], 8 + 2 + 4);
	ck_assert_uint_eq(f->shape[1], 6 + 1 + 3);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_uint_eq(p->stages[0].px_img_bytes, 14 * 10 * 3);
	free(p);
	/* a container's transforms run inside it: one op with a field */
	p = plan_for("random_apply([invert, equalize], field=image) | vflip(field=image)", &s);
	ck_assert_int_eq(p->op_field[0], 1);
	ck_assert_int_eq(p->op_field[1], -1);
	ck_assert_int_eq(p->op_field[2], -1);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_uint_eq(p->stages[0].count, 2);
	free(p);
	plan_refused(&s, "pad(8, padding_mode=reflect, field=rgb)", "op 1 'pad'", "key 'padding'",
		     "not below the side 6");
	plan_refused(&s, "random_apply([gaussian_blur(kernel_size=13)], field=rgb)",
		     "op 2 'gaussian_blur'", "kernel_size", "too large");
	/* random_erasing follows normalize on its floats; values per channel */
	p = plan_for("normalize(mean=0.5, std=0.25, field=rgb) | random_erasing(value=(0, -1, 1), "
		     "field=rgb)", &s);
	ck_assert_uint_eq(p->nstages, 1);
	ck_assert_uint_eq(p->stages[0].kind, PIPE_STAGE_NORMALIZE);
	ck_assert_uint_eq(p->stages[0].count, 2);
	free(p);
	plan_refused(&s, "normalize(mean=0.5, std=0.25, field=rgb) | random_erasing(value=(0, 1), "
		     "field=rgb)", "op 2 'random_erasing'", "2 values for the 3 channels", NULL);
	plan_refused(&s, "random_erasing(value=-1, field=rgb)", "op 1 'random_erasing'",
		     "key 'value'", "not u8 levels");
	/* before normalize: u8 levels, one per channel allowed */
	p = plan_for("random_erasing(value=(1, 2, 3), field=rgb)", &s);
	free(p);
	plan_refused(&s, "random_erasing(value=(1, 2), field=rgb)", "op 1 'random_erasing'",
		     "2 values for the 3 channels", NULL);
	plan_refused(&s, "normalize(mean=0.5, std=0.25, field=rgb) | invert(field=rgb)",
		     "op 2 'invert'", "only random_erasing may follow normalize", NULL);
	plan_refused(&s, "resize(h=4, w=4, antialias=true, field=image)", "op 1 'resize'",
		     "key 'antialias'", "antialias=False");
	struct fmt_schema e;
	schema_encoded(&e);
	plan_refused(&e, "decode | random_resized_crop(8, antialias=false)",
		     "op 2 'random_resized_crop'", "key 'antialias'", "with antialiasing");
}
END_TEST

static Suite *pipeline_suite(void)
{
	Suite *s = suite_create("pipeline");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_pipeline_parse_contract_example);
	tcase_add_test(tc, test_pipeline_canonical_spacing_and_defaults);
	tcase_add_test(tc, test_pipeline_parse_errors_name_op_and_key);
	tcase_add_test(tc, test_pipeline_plan_errors_name_op_and_key);
	tcase_add_test(tc, test_pipeline_plan_shapes);
	tcase_add_test(tc, test_pipeline_plan_to_chw);
	tcase_add_test(tc, test_pipeline_plan_fuses_stages);
	tcase_add_test(tc, test_pipeline_canonical_hash_stable);
	tcase_add_test(tc, test_pipeline_image_ops_canonical);
	tcase_add_test(tc, test_pipeline_image_ops_parse_errors);
	tcase_add_test(tc, test_pipeline_image_plan);
	tcase_add_test(tc, test_pipeline_image_plan_errors);
	tcase_add_test(tc, test_pipeline_packing_ops);
	tcase_add_test(tc, test_pipeline_torchvision_forms);
	tcase_add_test(tc, test_pipeline_torchvision_forms_refused);
	tcase_add_test(tc, test_pipeline_tv_ops_parse);
	tcase_add_test(tc, test_pipeline_tv_ops_plan);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(pipeline_suite)
