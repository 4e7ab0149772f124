/*
 * pipeline.c: parses the pipeline text form, checks it against a schema
 * and plans fused stages (see pipeline.h for the language).
 *
 * Owns: the op table (names, keys, defaults, ranges), error messages that
 * name op and key, canonical text and hash, output shapes, scratch sizes.
 *
 * Threads: pure functions on the caller's thread; plans are immutable.
 * Never: allocate, touch sample bytes, depend on the locale.
 */
#include "pipeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

enum pipe_key {
	PK_SIZE = 0,
	PK_PAD,
	PK_P,
	PK_H,
	PK_W,
	PK_LEN,
	PK_FIELD,
	PK_COUNT_,
};

static const char *const pipe_key_names[PK_COUNT_] = {"size", "pad", "p", "h", "w", "len",
						       "field"};

/* One row per op: its name, the keys it takes (in canonical order), which
 * of them are required, and the defaults of the others. */
struct pipe_op_desc {
	const char *name;
	uint32_t keys[4];          /* enum pipe_key, terminated by PK_FIELD */
	uint32_t nkeys;            /* keys before field */
	uint32_t required;         /* bit mask over enum pipe_key */
};

static const struct pipe_op_desc pipe_ops[] = {
	[PIPE_IDENTITY] = {"identity", {PK_FIELD}, 0, 0},
	[PIPE_RANDOM_CROP] = {"random_crop", {PK_SIZE, PK_PAD, PK_FIELD}, 2, 1u << PK_SIZE},
	[PIPE_CENTER_CROP] = {"center_crop", {PK_SIZE, PK_FIELD}, 1, 1u << PK_SIZE},
	[PIPE_HFLIP] = {"hflip", {PK_P, PK_FIELD}, 1, 0},
	[PIPE_RESIZE] = {"resize", {PK_H, PK_W, PK_FIELD}, 2, 1u << PK_H | 1u << PK_W},
	[PIPE_RANDOM_WINDOW] = {"random_window", {PK_LEN, PK_FIELD}, 1, 1u << PK_LEN},
};
#define PIPE_NKINDS (sizeof(pipe_ops) / sizeof(pipe_ops[0]))

const char *pipe_kind_name(enum pipe_kind kind)
{
	return (unsigned)kind < PIPE_NKINDS ? pipe_ops[kind].name : "invalid";
}

/* ------------------------------------------------------------------ */
/* Scanner                                                             */

#define PIPE_TOK_MAX 64

struct pipe_scan {
	const char *s;             /* the text */
	size_t i;                  /* cursor */
	uint32_t opno;             /* 1-based op being parsed */
	const char *opname;        /* its name once known, else NULL */
	struct feed_err *err;
};

static void scan_ws(struct pipe_scan *sc)
{
	while (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' || sc->s[sc->i] == '\n' ||
	       sc->s[sc->i] == '\r')
		sc->i++;
}

/* Error about the current op: "pipeline op N 'name': ..." */
static int scan_fail(struct pipe_scan *sc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int scan_fail(struct pipe_scan *sc, const char *fmt, ...)
{
	char what[FEED_ERR_MSG_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (sc->opname)
		return feed_err_set(sc->err, -EINVAL, "pipeline op %u '%s': %s", sc->opno,
				    sc->opname, what);
	return feed_err_set(sc->err, -EINVAL, "pipeline op %u: %s", sc->opno, what);
}

static bool is_ident_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* Characters a value may hold: numbers and field names. */
static bool is_value_char(char c)
{
	return is_ident_char(c, false) || c == '.' || c == '-' || c == '+';
}

/* Reads an identifier into out; returns its length (0 if none). */
static size_t scan_ident(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	size_t n = 0;

	if (!is_ident_char(sc->s[sc->i], true))
		return 0;
	while (is_ident_char(sc->s[sc->i], n == 0)) {
		if (n + 1 < PIPE_TOK_MAX)
			out[n] = sc->s[sc->i];
		n++;
		sc->i++;
	}
	out[n < PIPE_TOK_MAX ? n : PIPE_TOK_MAX - 1] = '\0';
	return n;
}

static size_t scan_value(struct pipe_scan *sc, char out[PIPE_TOK_MAX])
{
	size_t n = 0;

	while (is_value_char(sc->s[sc->i])) {
		if (n + 1 < PIPE_TOK_MAX)
			out[n] = sc->s[sc->i];
		n++;
		sc->i++;
	}
	out[n < PIPE_TOK_MAX ? n : PIPE_TOK_MAX - 1] = '\0';
	return n;
}

/* What the scanner sees at the cursor, for messages. */
static const char *scan_seen(const struct pipe_scan *sc, char buf[8])
{
	char c = sc->s[sc->i];

	if (c == '\0')
		return "end of text";
	if (c >= 0x20 && c < 0x7f)
		snprintf(buf, 8, "'%c'", c);
	else
		snprintf(buf, 8, "0x%02x", (unsigned char)c);
	return buf;
}

/* ------------------------------------------------------------------ */
/* Values                                                              */

/* Decimal integer in [lo, hi]. */
static int parse_uint(struct pipe_scan *sc, const char *key, const char *v, uint32_t lo,
		      uint32_t hi, uint32_t *ret)
{
	uint64_t x = 0;

	if (!*v)
		return scan_fail(sc, "key '%s': bad number ''", key);
	for (const char *c = v; *c; c++) {
		if (*c < '0' || *c > '9')
			return scan_fail(sc, "key '%s': bad number '%s' (want a whole number)", key,
					 v);
		if (x <= UINT32_MAX)
			x = x * 10 + (uint64_t)(*c - '0');
	}
	if (x < lo || x > hi)
		return scan_fail(sc, "key '%s': %s out of range [%u, %u]", key, v, lo, hi);
	*ret = (uint32_t)x;
	return 0;
}

/* Decimal probability in [0, 1] with at most 9 decimals, in parts per 1e9. */
static int parse_prob(struct pipe_scan *sc, const char *key, const char *v, uint32_t *ret)
{
	uint64_t whole = 0, frac = 0;
	uint32_t nfrac = 0;
	const char *c = v;
	bool digits = false;

	for (; *c >= '0' && *c <= '9'; c++, digits = true)
		whole = whole < 10 ? whole * 10 + (uint64_t)(*c - '0') : 10;
	if (*c == '.')
		for (c++; *c >= '0' && *c <= '9'; c++, digits = true) {
			if (nfrac < 9)
				frac = frac * 10 + (uint64_t)(*c - '0');
			else if (*c != '0')
				return scan_fail(sc, "key '%s': bad number '%s' (at most 9 decimals)",
						 key, v);
			nfrac++;
		}
	if (*c || !digits)
		return scan_fail(sc, "key '%s': bad number '%s'", key, v);
	for (; nfrac < 9; nfrac++)
		frac *= 10;
	uint64_t ppb = whole * PIPE_P_ONE + frac;
	if (ppb > PIPE_P_ONE)
		return scan_fail(sc, "key '%s': %s not in [0, 1]", key, v);
	*ret = (uint32_t)ppb;
	return 0;
}

static int parse_field_name(struct pipe_scan *sc, const char *v, char out[FMT_NAME_MAX])
{
	size_t len = strlen(v);

	if (len == 0 || len >= FMT_NAME_MAX)
		return scan_fail(sc, "key 'field': bad field name '%s'", v);
	for (size_t k = 0; k < len; k++)
		if (!is_ident_char(v[k], false) && v[k] != '.' && v[k] != '-')
			return scan_fail(sc, "key 'field': bad field name '%s'", v);
	memcpy(out, v, len + 1);
	return 0;
}

/* Stores value v of key into op. */
static int op_set(struct pipe_scan *sc, struct pipe_op *op, enum pipe_key key, const char *v)
{
	const char *k = pipe_key_names[key];

	switch (key) {
	case PK_SIZE:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->size);
	case PK_PAD:
		return parse_uint(sc, k, v, 0, PIPE_DIM_MAX, &op->pad);
	case PK_P:
		return parse_prob(sc, k, v, &op->p_ppb);
	case PK_H:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->h);
	case PK_W:
		return parse_uint(sc, k, v, 1, PIPE_DIM_MAX, &op->w);
	case PK_LEN:
		return parse_uint(sc, k, v, 1, PIPE_LEN_MAX, &op->len);
	case PK_FIELD:
	default:
		return parse_field_name(sc, v, op->field);
	}
}

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static int find_key(const struct pipe_op_desc *d, const char *name)
{
	for (uint32_t k = 0; k <= d->nkeys; k++)
		if (!strcmp(pipe_key_names[d->keys[k]], name))
			return (int)d->keys[k];
	return -1;
}

static void allowed_keys(const struct pipe_op_desc *d, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t k = 0; k <= d->nkeys && n < cap; k++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? ", " : "",
				      pipe_key_names[d->keys[k]]);
}

/* One `key = value` inside the parentheses; *seen tracks duplicates. */
static int parse_arg(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		     uint32_t *seen)
{
	char key[PIPE_TOK_MAX], val[PIPE_TOK_MAX], c[8];

	scan_ws(sc);
	if (!scan_ident(sc, key))
		return scan_fail(sc, "expected a key at column %zu, found %s", sc->i + 1,
				 scan_seen(sc, c));
	int k = find_key(d, key);
	if (k < 0) {
		char allowed[64];
		allowed_keys(d, allowed, sizeof(allowed));
		return scan_fail(sc, "unknown key '%s' (takes: %s)", key, allowed);
	}
	if (*seen & (1u << k))
		return scan_fail(sc, "key '%s' given twice", key);
	*seen |= 1u << k;
	scan_ws(sc);
	if (sc->s[sc->i] != '=')
		return scan_fail(sc, "key '%s': expected '=' at column %zu, found %s", key,
				 sc->i + 1, scan_seen(sc, c));
	sc->i++;
	scan_ws(sc);
	size_t n = scan_value(sc, val);
	if (n == 0)
		return scan_fail(sc, "key '%s': missing value at column %zu", key, sc->i + 1);
	if (n >= PIPE_TOK_MAX)
		return scan_fail(sc, "key '%s': value longer than %d characters", key,
				 PIPE_TOK_MAX - 1);
	return op_set(sc, op, (enum pipe_key)k, val);
}

/* `( key=value, ... )` after the op name; the cursor is on '('. */
static int parse_args(struct pipe_scan *sc, const struct pipe_op_desc *d, struct pipe_op *op,
		      uint32_t *seen)
{
	char c[8];

	sc->i++;
	scan_ws(sc);
	if (sc->s[sc->i] == ')') {
		sc->i++;
		return 0;
	}
	for (;;) {
		int rc = parse_arg(sc, d, op, seen);
		if (rc < 0)
			return rc;
		scan_ws(sc);
		if (sc->s[sc->i] == ')') {
			sc->i++;
			return 0;
		}
		if (sc->s[sc->i] != ',')
			return scan_fail(sc, "expected ',' or ')' at column %zu, found %s",
					 sc->i + 1, scan_seen(sc, c));
		sc->i++;
	}
}

static void op_defaults(struct pipe_op *op)
{
	if (op->kind == PIPE_HFLIP)
		op->p_ppb = PIPE_P_ONE / 2;
}

/* One op: a name and optional arguments; the cursor ends after them. */
static int parse_op(struct pipe_scan *sc, struct pipe_op *op)
{
	char name[PIPE_TOK_MAX], c[8];
	uint32_t seen = 0;

	memset(op, 0, sizeof(*op));
	sc->opname = NULL;
	scan_ws(sc);
	if (!scan_ident(sc, name))
		return scan_fail(sc, "expected an op name at column %zu, found %s", sc->i + 1,
				 scan_seen(sc, c));
	uint32_t kind = 0;
	while (kind < PIPE_NKINDS && strcmp(pipe_ops[kind].name, name))
		kind++;
	if (kind == PIPE_NKINDS)
		return feed_err_set(sc->err, -EINVAL,
				    "pipeline op %u '%s': unknown op (identity, random_crop, "
				    "center_crop, hflip, resize, random_window)",
				    sc->opno, name);
	const struct pipe_op_desc *d = &pipe_ops[kind];
	sc->opname = d->name;
	op->kind = (enum pipe_kind)kind;
	op_defaults(op);
	scan_ws(sc);
	if (sc->s[sc->i] == '(') {
		int rc = parse_args(sc, d, op, &seen);
		if (rc < 0)
			return rc;
	}
	for (uint32_t k = 0; k < PK_COUNT_; k++)
		if ((d->required & (1u << k)) && !(seen & (1u << k)))
			return scan_fail(sc, "missing key '%s'", pipe_key_names[k]);
	return 0;
}

int pipe_parse(const char *text, struct pipe_spec *ret_spec, struct feed_err *err)
{
	struct pipe_spec spec = {0};
	struct pipe_scan sc = {.s = text, .err = err};
	char c[8];

	if (strnlen(text, PIPE_TEXT_MAX + 1) > PIPE_TEXT_MAX)
		return feed_err_set(err, -EINVAL, "pipeline: longer than %d characters",
				    PIPE_TEXT_MAX);
	scan_ws(&sc);
	if (text[sc.i] == '\0') {
		spec.nops = 1; /* the empty pipeline is identity */
		*ret_spec = spec;
		return 0;
	}
	for (;;) {
		if (spec.nops == PIPE_MAX_OPS)
			return feed_err_set(err, -EINVAL, "pipeline: more than %d ops", PIPE_MAX_OPS);
		sc.opno = spec.nops + 1;
		int rc = parse_op(&sc, &spec.ops[spec.nops]);
		if (rc < 0)
			return rc;
		spec.nops++;
		scan_ws(&sc);
		if (text[sc.i] == '\0')
			break;
		if (text[sc.i] != '|')
			return scan_fail(&sc, "unexpected %s at column %zu (ops are joined by '|')",
					 scan_seen(&sc, c), sc.i + 1);
		sc.i++;
	}
	*ret_spec = spec;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Canonical text                                                      */

/* p in parts per 1e9 as the shortest decimal: 0, 1, 0.5, 0.125. */
static void format_prob(uint32_t ppb, char out[16])
{
	if (ppb == 0 || ppb == PIPE_P_ONE) {
		snprintf(out, 16, "%u", ppb ? 1u : 0u);
		return;
	}
	snprintf(out, 16, "0.%09u", ppb);
	size_t n = strlen(out);
	while (out[n - 1] == '0')
		out[--n] = '\0';
}

static void format_key(const struct pipe_op *op, enum pipe_key k, char out[80])
{
	char p[16];

	switch (k) {
	case PK_SIZE: snprintf(out, 80, "size=%u", op->size); break;
	case PK_PAD: snprintf(out, 80, "pad=%u", op->pad); break;
	case PK_P: format_prob(op->p_ppb, p); snprintf(out, 80, "p=%s", p); break;
	case PK_H: snprintf(out, 80, "h=%u", op->h); break;
	case PK_W: snprintf(out, 80, "w=%u", op->w); break;
	case PK_LEN: snprintf(out, 80, "len=%u", op->len); break;
	case PK_FIELD:
	default: snprintf(out, 80, "field=%s", op->field); break;
	}
}

static bool canon_put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static bool canon_put(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= cap - *n)
		return false;
	*n += (size_t)w;
	return true;
}

/* Appends op's canonical text at buf + *n; returns false when out of room. */
static bool canon_op(const struct pipe_op *op, char *buf, size_t cap, size_t *n)
{
	const struct pipe_op_desc *d = &pipe_ops[op->kind];
	uint32_t nk = d->nkeys + (op->field[0] ? 1 : 0);
	char kv[80];
	bool ok = canon_put(buf, cap, n, "%s", d->name);

	for (uint32_t k = 0; ok && k < nk; k++) {
		format_key(op, (enum pipe_key)d->keys[k], kv);
		ok = canon_put(buf, cap, n, "%s%s", k ? ", " : "(", kv);
	}
	return ok && (nk == 0 || canon_put(buf, cap, n, ")"));
}

int pipe_spec_canonical(const struct pipe_spec *spec, char *buf, size_t cap)
{
	size_t n = 0;

	if (cap == 0)
		return -ENOSPC;
	buf[0] = '\0';
	for (uint32_t i = 0; i < spec->nops; i++) {
		if ((i && !canon_put(buf, cap, &n, " | ")) || !canon_op(&spec->ops[i], buf, cap, &n))
			return -ENOSPC;
	}
	return (int)n;
}

/* ------------------------------------------------------------------ */
/* Planning                                                            */

static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...)
{
	char what[FEED_ERR_MSG_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return feed_err_set(err, -EINVAL, "pipeline op %u '%s': %s", i + 1,
			    pipe_kind_name(spec->ops[i].kind), what);
}

static bool is_image_op(enum pipe_kind k)
{
	return k == PIPE_RANDOM_CROP || k == PIPE_CENTER_CROP || k == PIPE_HFLIP ||
	       k == PIPE_RESIZE;
}

static bool is_image_field(const struct fmt_field *f)
{
	return !f->variable && f->dtype == FEED_DTYPE_U8 && (f->rank == 2 || f->rank == 3);
}

static bool is_sequence_field(const struct fmt_field *f)
{
	return f->dtype != FEED_DTYPE_STR &&
	       ((!f->variable && f->rank == 1) || (f->variable && f->rank == 0));
}

static bool is_token_dtype(int dt)
{
	return dt == FEED_DTYPE_U16 || dt == FEED_DTYPE_U32 || dt == FEED_DTYPE_I32 ||
	       dt == FEED_DTYPE_I64;
}

/* *ret_f = the field index op i applies to (-1: none, identity), or an
 * error naming key 'field'. */
static int plan_field(const struct pipe_spec *spec, uint32_t i, const struct fmt_schema *in,
		      int *ret_f, struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];

	if (op->field[0]) {
		*ret_f = fmt_schema_find(in, op->field);
		if (*ret_f < 0)
			return plan_fail(spec, i, err, "key 'field': no field '%s' in the dataset",
					 op->field);
		return 0;
	}
	*ret_f = -1;
	if (op->kind == PIPE_IDENTITY)
		return 0;
	for (uint32_t f = 0; f < in->nfields; f++) {
		const struct fmt_field *fd = &in->fields[f];
		if (is_image_op(op->kind) ? is_image_field(fd)
					  : is_sequence_field(fd) && is_token_dtype(fd->dtype)) {
			*ret_f = (int)f;
			return 0;
		}
	}
	return plan_fail(spec, i, err,
			 is_image_op(op->kind)
				 ? "missing key 'field': the dataset has no image field "
				   "(fixed u8 HxW or HxWxC)"
				 : "missing key 'field': the dataset has no token sequence "
				   "(u16/u32/i32/i64, 1-D)");
}

/* The image shape op i sees on field fd (updated by earlier ops) and the
 * shape it leaves. */
static int plan_image_op(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			 struct pipe_dims *dm, struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	uint32_t h = fd->shape[0], w = fd->shape[1];

	if (!is_image_field(fd))
		return plan_fail(spec, i, err,
				 "key 'field': '%s' is not an image (fixed u8 HxW or HxWxC)",
				 fd->name);
	if (h > PIPE_DIM_MAX || w > PIPE_DIM_MAX)
		return plan_fail(spec, i, err, "key 'field': image '%s' is %ux%u, sides above %u "
				 "are not supported", fd->name, h, w, PIPE_DIM_MAX);
	dm->in_h = dm->out_h = h;
	dm->in_w = dm->out_w = w;
	if (op->kind == PIPE_RANDOM_CROP) {
		uint64_t ph = (uint64_t)h + 2ull * op->pad, pw = (uint64_t)w + 2ull * op->pad;
		if (op->size > ph || op->size > pw)
			return plan_fail(spec, i, err,
					 "key 'size': crop %u larger than the padded image "
					 "%" PRIu64 "x%" PRIu64 " (%ux%u + pad %u)",
					 op->size, ph, pw, h, w, op->pad);
		dm->out_h = dm->out_w = op->size;
	} else if (op->kind == PIPE_CENTER_CROP) {
		dm->out_h = dm->out_w = op->size;
	} else if (op->kind == PIPE_RESIZE) {
		dm->out_h = op->h;
		dm->out_w = op->w;
	}
	uint64_t c = fd->rank == 3 ? fd->shape[2] : 1;
	if ((uint64_t)dm->out_h * dm->out_w * c > UINT32_MAX)
		return plan_fail(spec, i, err, "output %ux%ux%" PRIu64 " larger than 4 GiB",
				 dm->out_h, dm->out_w, c);
	fd->shape[0] = dm->out_h;
	fd->shape[1] = dm->out_w;
	fd->max_bytes = (uint64_t)dm->out_h * dm->out_w * c;
	return 0;
}

static int plan_window_op(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			  struct pipe_dims *dm, struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	size_t elem = feed_dtype_size(fd->dtype);

	if (!is_sequence_field(fd))
		return plan_fail(spec, i, err,
				 "key 'field': '%s' is not a sequence (fixed 1-D or variable flat)",
				 fd->name);
	uint64_t longest = fd->variable ? fd->max_bytes / elem : fd->shape[0];
	if (op->len > longest)
		return plan_fail(spec, i, err,
				 "key 'len': window %u longer than the sequence '%s' (%s%" PRIu64
				 " elements)",
				 op->len, fd->name, fd->variable ? "at most " : "", longest);
	dm->in_elems = fd->variable ? 0 : longest;
	dm->out_elems = op->len;
	fd->variable = false;
	fd->rank = 1;
	fd->shape[0] = op->len;
	fd->max_bytes = (uint64_t)op->len * elem;
	return 0;
}

static enum pipe_stage_kind stage_kind_of(enum pipe_kind k)
{
	return k == PIPE_RESIZE ? PIPE_STAGE_RESIZE
	       : k == PIPE_RANDOM_WINDOW ? PIPE_STAGE_WINDOW
					 : PIPE_STAGE_GEO;
}

/* Opens a stage for op i on its field, or extends the field's last stage
 * when both are geometric runs or window runs (resize never fuses). */
static void plan_add_to_stage(struct pipe_plan *p, uint32_t i, uint32_t *nops)
{
	uint32_t f = (uint32_t)p->op_field[i];
	const struct fmt_field *fd = &p->in.fields[f];
	enum pipe_stage_kind k = stage_kind_of(p->spec.ops[i].kind);
	struct pipe_stage *last = p->nstages ? &p->stages[p->nstages - 1] : NULL;

	p->stage_ops[*nops] = i;
	(*nops)++;
	if (last && last->field == f && last->kind == k && k != PIPE_STAGE_RESIZE) {
		last->count++;
	} else {
		last = &p->stages[p->nstages++];
		*last = (struct pipe_stage){.kind = k, .field = f, .first = *nops - 1, .count = 1};
		last->in_h = p->dims[i].in_h;
		last->in_w = p->dims[i].in_w;
		last->c = fd->rank == 3 ? fd->shape[2] : 1;
		last->in_elems = p->dims[i].in_elems;
		last->elem_bytes = feed_dtype_size(fd->dtype);
	}
	last->out_h = p->dims[i].out_h;
	last->out_w = p->dims[i].out_w;
	last->out_elems = p->dims[i].out_elems;
	last->out_bytes = k == PIPE_STAGE_WINDOW
				  ? (size_t)last->out_elems * last->elem_bytes
				  : (size_t)last->out_h * last->out_w * last->c;
}

/* Stages grouped by field (ops keep their order within a field), then the
 * scratch: two ping-pong buffers for intermediate outputs, and the resize
 * column table. */
static void plan_stages(struct pipe_plan *p)
{
	uint32_t nops = 0;
	size_t maxw = 0;

	for (uint32_t f = 0; f < p->in.nfields; f++) {
		p->field_stage[f] = p->nstages;
		for (uint32_t i = 0; i < p->spec.nops; i++)
			if (p->op_field[i] == (int)f && p->spec.ops[i].kind != PIPE_IDENTITY)
				plan_add_to_stage(p, i, &nops);
		p->field_nstages[f] = p->nstages - p->field_stage[f];
		for (uint32_t s = p->field_stage[f]; s + 1 < p->nstages; s++)
			if (p->stages[s].out_bytes > p->inter_bytes)
				p->inter_bytes = p->stages[s].out_bytes;
	}
	for (uint32_t s = 0; s < p->nstages; s++)
		if (p->stages[s].kind == PIPE_STAGE_RESIZE && p->stages[s].out_w > maxw)
			maxw = p->stages[s].out_w;
	p->table_bytes = maxw * 16;
	size_t inter = (p->inter_bytes + 63) & ~(size_t)63;
	p->scratch_bytes = 2 * inter + ((p->table_bytes + 63) & ~(size_t)63);
}

/* Resolves every op's field and shapes, in op order. */
static int plan_ops(struct pipe_plan *p, struct feed_err *err)
{
	for (uint32_t i = 0; i < p->spec.nops; i++) {
		struct pipe_op *op = &p->spec.ops[i];
		int f;
		int rc = plan_field(&p->spec, i, &p->in, &f, err);
		if (rc < 0)
			return rc;
		p->op_field[i] = f;
		if (f < 0)
			continue;
		strcpy(op->field, p->in.fields[f].name);
		struct fmt_field *fd = &p->out.fields[f];
		if (is_image_op(op->kind))
			rc = plan_image_op(&p->spec, i, fd, &p->dims[i], err);
		else if (op->kind == PIPE_RANDOM_WINDOW)
			rc = plan_window_op(&p->spec, i, fd, &p->dims[i], err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int pipe_plan(const struct pipe_spec *spec, const struct fmt_schema *in,
	      struct pipe_plan *ret_plan, struct feed_err *err)
{
	struct pipe_plan *p = ret_plan;

	if (spec->nops == 0 || spec->nops > PIPE_MAX_OPS)
		return feed_err_set(err, -EINVAL, "pipeline: %u ops (1..%d allowed)", spec->nops,
				    PIPE_MAX_OPS);
	int rc = fmt_schema_check(in, err);
	if (rc < 0)
		return rc;
	memset(p, 0, sizeof(*p));
	p->spec = *spec;
	p->in = *in;
	p->out = *in;
	rc = plan_ops(p, err);
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return rc;
	}
	plan_stages(p);
	rc = pipe_spec_canonical(&p->spec, p->canonical, sizeof(p->canonical));
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return feed_err_set(err, -EINVAL, "pipeline: canonical text too long");
	}
	p->hash = XXH64(p->canonical, (size_t)rc, 0);
	return 0;
}

int pipe_plan_text(const char *text, const struct fmt_schema *in, struct pipe_plan *ret_plan,
		   struct feed_err *err)
{
	struct pipe_spec spec;
	int rc = pipe_parse(text, &spec, err);

	return rc < 0 ? rc : pipe_plan(&spec, in, ret_plan, err);
}

size_t pipe_scratch_bytes(const struct pipe_plan *plan)
{
	return plan->scratch_bytes;
}

uint64_t pipe_hash(const struct pipe_plan *plan)
{
	return plan->hash;
}
