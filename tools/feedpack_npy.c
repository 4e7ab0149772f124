/*
 * feedpack_npy.c: `feedpack npy NAME=FILE.npy ...`: one field per .npy
 * array, the first axis being the sample axis. Owns the .npy header parser
 * (format versions 1.0, 2.0 and 3.0; the header is a Python dict literal
 * with 'descr', 'fortran_order' and 'shape', parsed here without Python)
 * and the dtype mapping. Arrays are streamed side by side, a chunk of
 * samples at a time. Anything that is not a little-endian numeric or bool,
 * C-order array of at least one dimension is refused naming the file.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20)  /* numpy itself stays far below this */
#define NPY_MAX_DIMS (FMT_MAX_RANK + 1)

/* One input array. */
struct npy_array {
	char name[FMT_NAME_MAX];  /* field name */
	const char *path;         /* as given, for messages */
	int fd;                   /* open on the file, positioned at the data */
	int dtype;                /* enum feed_dtype */
	uint32_t ndim;            /* dims in the file, >= 1 */
	uint64_t dims[NPY_MAX_DIMS];
	uint64_t rec;             /* bytes per sample */
	uint8_t *buf;             /* one chunk of samples */
};

/* The parts of the header dict we use. */
struct npy_header {
	char descr[64];           /* e.g. "<f4"; "[...]" text if structured */
	bool structured;          /* descr was a list */
	bool fortran;             /* fortran_order */
	uint32_t ndim;
	uint64_t dims[NPY_MAX_DIMS];
};

/* ---- dict literal parsing ---------------------------------------- */

struct npy_cur {
	const char *p, *end;
};

static void cur_ws(struct npy_cur *c)
{
	while (c->p < c->end && isspace((unsigned char)*c->p))
		c->p++;
}

static bool cur_eat(struct npy_cur *c, char ch)
{
	cur_ws(c);
	if (c->p < c->end && *c->p == ch)
		return c->p++, true;
	return false;
}

static bool cur_word(struct npy_cur *c, const char *w)
{
	size_t n = strlen(w);

	cur_ws(c);
	if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n))
		return c->p += n, true;
	return false;
}

/* A quoted Python string (no escapes; numpy never writes them). */
static int cur_str(struct npy_cur *c, char *buf, size_t cap)
{
	size_t i = 0;
	char q;

	cur_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return -1;
	q = *c->p++;
	while (c->p < c->end && *c->p != q) {
		if (i + 1 >= cap)
			return -1;
		buf[i++] = *c->p++;
	}
	if (c->p >= c->end)
		return -1;
	c->p++;
	buf[i] = '\0';
	return 0;
}

/* A tuple of non-negative ints, e.g. "(3, 4)", "(3,)", "()". Returns -2
 * when it has more than NPY_MAX_DIMS entries. */
static int cur_shape(struct npy_cur *c, uint64_t *dims, uint32_t *ret_ndim)
{
	uint32_t n = 0;

	if (!cur_eat(c, '('))
		return -1;
	while (!cur_eat(c, ')')) {
		char *e;
		cur_ws(c);
		if (n == NPY_MAX_DIMS)
			return -2;
		if (c->p >= c->end || !isdigit((unsigned char)*c->p))
			return -1;
		errno = 0;
		dims[n++] = strtoull(c->p, &e, 10);
		if (errno || e > c->end)
			return -1;
		c->p = e;
		if (c->p < c->end && *c->p == 'L')  /* Python 2 longs */
			c->p++;
		if (!cur_eat(c, ',')) {
			if (!cur_eat(c, ')'))
				return -1;
			break;
		}
	}
	*ret_ndim = n;
	return 0;
}

/* A structured dtype's descr is a list; keep (some of) its text for the
 * message. */
static void cur_list(struct npy_cur *c, struct npy_header *h)
{
	const char *start = c->p;
	int depth = 0;

	do {
		depth += *c->p == '[' ? 1 : *c->p == ']' ? -1 : 0;
		c->p++;
	} while (c->p < c->end && depth > 0);
	int n = (int)(c->p - start);
	if ((size_t)n < sizeof(h->descr))
		snprintf(h->descr, sizeof(h->descr), "%.*s", n, start);
	else
		snprintf(h->descr, sizeof(h->descr), "%.40s...", start);
	h->structured = true;
}

/* One "key: value" of the dict; sets a bit of *seen. */
static int parse_item(struct npy_cur *c, struct npy_header *h, unsigned *seen)
{
	char key[32];

	if (cur_str(c, key, sizeof(key)) < 0 || !cur_eat(c, ':'))
		return -1;
	if (!strcmp(key, "descr")) {
		cur_ws(c);
		if (c->p < c->end && *c->p == '[')
			cur_list(c, h);
		else if (cur_str(c, h->descr, sizeof(h->descr)) < 0)
			return -1;
		*seen |= 1;
	} else if (!strcmp(key, "fortran_order")) {
		if (cur_word(c, "True"))
			h->fortran = true;
		else if (!cur_word(c, "False"))
			return -1;
		*seen |= 2;
	} else if (!strcmp(key, "shape")) {
		int rc = cur_shape(c, h->dims, &h->ndim);
		if (rc < 0)
			return rc;
		*seen |= 4;
	} else {
		return -1;
	}
	return 0;
}

static int parse_dict(const char *path, const char *text, size_t len, struct npy_header *h,
		      struct feed_err *err)
{
	struct npy_cur c = {text, text + len};
	unsigned seen = 0;
	int rc = 0;

	if (!cur_eat(&c, '{'))
		rc = -1;
	while (rc == 0 && !cur_eat(&c, '}')) {
		if ((rc = parse_item(&c, h, &seen)) < 0)
			break;
		if (!cur_eat(&c, ',') && !cur_eat(&c, '}'))
			rc = -1;
		else if (c.p[-1] == '}')
			break;
	}
	if (rc == -2)
		return feed_err_set(err, -EINVAL, "%s: more than %d dimensions", path, NPY_MAX_DIMS);
	if (rc < 0)
		return feed_err_set(err, -EBADMSG, "%s: malformed .npy header near '%.20s'", path,
				    c.p < c.end ? c.p : "");
	if (seen != 7)
		return feed_err_set(err, -EBADMSG, "%s: .npy header lacks 'descr', 'fortran_order' "
				    "or 'shape'", path);
	return 0;
}

/* ---- header checks ------------------------------------------------ */

/* descr code (after the byte-order character) -> dtype. */
static const struct {
	const char *code;
	int dtype;
} npy_dtypes[] = {
	{"b1", FEED_DTYPE_BOOL}, {"u1", FEED_DTYPE_U8},  {"i1", FEED_DTYPE_I8},
	{"u2", FEED_DTYPE_U16},  {"i2", FEED_DTYPE_I16}, {"u4", FEED_DTYPE_U32},
	{"i4", FEED_DTYPE_I32},  {"u8", FEED_DTYPE_U64}, {"i8", FEED_DTYPE_I64},
	{"f2", FEED_DTYPE_F16},  {"f4", FEED_DTYPE_F32}, {"f8", FEED_DTYPE_F64},
};

static int npy_dtype(const char *path, const struct npy_header *h, int *ret,
		     struct feed_err *err)
{
	char order = h->descr[0];

	if (!h->structured && order && strchr("<>|=", order)) {
		for (size_t i = 0; i < sizeof(npy_dtypes) / sizeof(npy_dtypes[0]); i++) {
			int dt = npy_dtypes[i].dtype;
			if (strcmp(h->descr + 1, npy_dtypes[i].code))
				continue;
			if (feed_dtype_size(dt) > 1 && order == '>')
				return feed_err_set(err, -EINVAL, "%s: big-endian dtype '%s' is not "
						    "supported; save arr.astype('<%s')", path,
						    h->descr, h->descr + 1);
			if (feed_dtype_size(dt) > 1 && order == '|')
				break;
			*ret = dt;
			return 0;
		}
	}
	return feed_err_set(err, -EINVAL, "%s: unsupported dtype '%s' (numeric or bool, "
			    "little-endian only)", path, h->descr);
}

/* Formats a shape as Python prints it, for messages. */
static const char *shape_str(const struct npy_array *a, char *buf, size_t cap)
{
	size_t n = snprintf(buf, cap, "(");

	for (uint32_t i = 0; i < a->ndim && n < cap; i++)
		n += snprintf(buf + n, cap - n, "%s%llu", i ? ", " : "",
			      (unsigned long long)a->dims[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "%s)", a->ndim == 1 ? "," : "");
	return buf;
}

/* Checks the parsed header and fills a's dtype, dims and record size. */
static int npy_check(struct npy_array *a, const struct npy_header *h, struct feed_err *err)
{
	char s[160];
	int rc;

	if ((rc = npy_dtype(a->path, h, &a->dtype, err)) < 0)
		return rc;
	if (h->fortran)
		return feed_err_set(err, -EINVAL, "%s: Fortran-order array; save "
				    "np.ascontiguousarray(arr) instead", a->path);
	if (h->ndim == 0)
		return feed_err_set(err, -EINVAL, "%s: 0-d array has no sample axis", a->path);
	a->ndim = h->ndim;
	memcpy(a->dims, h->dims, sizeof(a->dims));
	a->rec = feed_dtype_size(a->dtype);
	for (uint32_t i = 1; i < a->ndim; i++) {
		if (a->dims[i] == 0 || a->dims[i] > PACK_MAX_RECORD / a->rec)
			return feed_err_set(err, -EINVAL, "%s: unsupported sample shape in %s",
					    a->path, shape_str(a, s, sizeof(s)));
		a->rec *= a->dims[i];
	}
	if (a->dims[0] == 0)
		return feed_err_set(err, -EINVAL, "%s: no samples (shape %s)", a->path,
				    shape_str(a, s, sizeof(s)));
	return 0;
}

/* ---- file reading ------------------------------------------------- */

/* Reads the preamble: magic, version, header length. */
static int npy_preamble(struct npy_array *a, uint64_t *ret_hlen, uint64_t *ret_off,
			struct feed_err *err)
{
	uint8_t pre[12];
	long long n = pack_read_full(a->fd, pre, sizeof(pre));

	if (n < 0)
		return feed_err_set(err, (int)n, "%s: %s", a->path, strerror((int)-n));
	if (n < 10 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN))
		return feed_err_set(err, -EBADMSG, "%s: not a .npy file (bad magic)", a->path);
	if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
		return feed_err_set(err, -EBADMSG, "%s: unsupported .npy version %u.%u", a->path,
				    pre[6], pre[7]);
	if (pre[6] == 1) {
		*ret_hlen = pre[8] | (uint64_t)pre[9] << 8;
		*ret_off = 10;
	} else if (n < 12) {
		return feed_err_set(err, -EBADMSG, "%s: truncated .npy header", a->path);
	} else {
		*ret_hlen = pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
			    (uint64_t)pre[11] << 24;
		*ret_off = 12;
	}
	if (*ret_hlen > NPY_MAX_HEADER)
		return feed_err_set(err, -EBADMSG, "%s: .npy header of %llu bytes is too long",
				    a->path, (unsigned long long)*ret_hlen);
	return 0;
}

/* The file must hold exactly the bytes its shape says. */
static int npy_check_size(struct npy_array *a, uint64_t data_off, struct feed_err *err)
{
	struct stat st;
	char s[160];
	uint64_t need = a->dims[0] * a->rec;

	if (a->dims[0] > UINT64_MAX / a->rec)
		return feed_err_set(err, -EINVAL, "%s: shape %s is too large", a->path,
				    shape_str(a, s, sizeof(s)));
	if (fstat(a->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;  /* a pipe: reading will tell */
	uint64_t have = (uint64_t)st.st_size - data_off;
	if (have < need)
		return feed_err_set(err, -EBADMSG, "%s: truncated: shape %s needs %llu data bytes, "
				    "the file holds %llu", a->path, shape_str(a, s, sizeof(s)),
				    (unsigned long long)need, (unsigned long long)have);
	if (have > need)
		return feed_err_set(err, -EBADMSG, "%s: %llu unexpected bytes after the array data",
				    a->path, (unsigned long long)(have - need));
	return 0;
}

/* Opens a->path, parses and checks its header, leaves fd at the data. */
static int npy_open(struct npy_array *a, struct feed_err *err)
{
	struct npy_header h = {0};
	uint64_t hlen = 0, off = 0;
	char *text = NULL;
	long long n;
	int rc;

	if ((rc = pack_open_input(a->path, &a->fd, err)) < 0)
		return rc;
	if ((rc = npy_preamble(a, &hlen, &off, err)) < 0)
		return rc;
	if (!(text = malloc(hlen + 1)))
		return feed_err_set(err, -ENOMEM, "%s: out of memory", a->path);
	text[hlen] = '\0';  /* strtoull in cur_shape stops here at the latest */
	n = pread(a->fd, text, hlen, (off_t)off);
	if (n < 0)
		rc = feed_err_set(err, -errno, "%s: %s", a->path, strerror(errno));
	else if ((uint64_t)n < hlen)
		rc = feed_err_set(err, -EBADMSG, "%s: truncated .npy header", a->path);
	else
		rc = parse_dict(a->path, text, hlen, &h, err);
	free(text);
	if (rc == 0)
		rc = npy_check(a, &h, err);
	if (rc == 0)
		rc = npy_check_size(a, off + hlen, err);
	if (rc == 0 && lseek(a->fd, (off_t)(off + hlen), SEEK_SET) < 0)
		rc = feed_err_set(err, -errno, "%s: %s", a->path, strerror(errno));
	return rc;
}

/* ---- arguments and streaming --------------------------------------- */

/* Splits NAME=FILE into arrays[i]; a bad or repeated NAME is a usage error. */
static int npy_args(const struct pack_opts *o, struct npy_array *arrays, struct feed_err *err)
{
	for (int i = 0; i < o->npos; i++) {
		struct fmt_field f = {0};
		const char *arg = o->pos[i], *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : 0;

		if (!eq || len == 0 || len >= FMT_NAME_MAX || !eq[1])
			return feed_err_set(err, -PACK_EUSAGE, "bad argument '%s': expected "
					    "NAME=FILE.npy", arg);
		memcpy(arrays[i].name, arg, len);
		arrays[i].path = eq + 1;
		pack_field(&f, arrays[i].name, FEED_DTYPE_U8, 0, NULL, false);
		struct fmt_schema one = {.nfields = 1, .fields = {f}};
		if (fmt_schema_check(&one, NULL) < 0)
			return feed_err_set(err, -PACK_EUSAGE, "bad field name '%s': use 1-63 of "
					    "[A-Za-z0-9_.-]", arrays[i].name);
		for (int j = 0; j < i; j++)
			if (!strcmp(arrays[j].name, arrays[i].name))
				return feed_err_set(err, -PACK_EUSAGE, "field '%s' given twice",
						    arrays[i].name);
	}
	return 0;
}

/* Reads k samples of every array into its buffer. */
static int npy_read_chunk(struct npy_array *arrays, int n, uint64_t k, struct feed_err *err)
{
	for (int i = 0; i < n; i++) {
		struct npy_array *a = &arrays[i];
		long long got = pack_read_full(a->fd, a->buf, k * a->rec);
		if (got < 0)
			return feed_err_set(err, (int)got, "%s: %s", a->path, strerror((int)-got));
		if ((uint64_t)got < k * a->rec)
			return feed_err_set(err, -EBADMSG, "%s: truncated while reading", a->path);
		if (a->dtype != FEED_DTYPE_BOOL)
			continue;
		for (uint64_t j = 0; j < k * a->rec; j++)
			if (a->buf[j] > 1)
				return feed_err_set(err, -EBADMSG, "%s: bool byte 0x%02x is not 0 or 1",
						    a->path, a->buf[j]);
	}
	return 0;
}

static int npy_copy(struct npy_array *arrays, int n, struct pack_sink *sink,
		    struct feed_err *err)
{
	struct fmt_value v[FMT_MAX_FIELDS];
	uint64_t rec_sum = 0, chunk, count = arrays[0].dims[0];
	int rc = 0;

	for (int i = 0; i < n; i++)
		rec_sum += arrays[i].rec;
	chunk = PACK_CHUNK_BYTES / rec_sum ? PACK_CHUNK_BYTES / rec_sum : 1;
	for (int i = 0; i < n; i++)
		if (!(arrays[i].buf = malloc(chunk * arrays[i].rec)))
			return feed_err_set(err, -ENOMEM, "%s: out of memory", arrays[i].path);
	for (uint64_t done = 0; done < count && rc == 0; done += chunk) {
		uint64_t k = count - done < chunk ? count - done : chunk;
		if ((rc = npy_read_chunk(arrays, n, k, err)) < 0)
			break;
		for (uint64_t j = 0; j < k && rc == 0; j++) {
			for (int i = 0; i < n; i++)
				v[i] = (struct fmt_value){arrays[i].buf + j * arrays[i].rec, arrays[i].rec};
			rc = sink_add(sink, v, err);
		}
	}
	return rc;
}

/* Builds the schema and the source text; checks equal lengths. */
static int npy_schema(const struct pack_opts *o, struct npy_array *arrays,
		      struct fmt_schema *schema, char *source, size_t cap, struct feed_err *err)
{
	size_t used = snprintf(source, cap, "npy");

	schema->nfields = (uint32_t)o->npos;
	for (int i = 0; i < o->npos; i++) {
		struct npy_array *a = &arrays[i];
		if (a->dims[0] != arrays[0].dims[0])
			return feed_err_set(err, -EINVAL, "%s: %llu samples, but %s has %llu",
					    a->path, (unsigned long long)a->dims[0], arrays[0].path,
					    (unsigned long long)arrays[0].dims[0]);
		pack_field(&schema->fields[i], a->name, a->dtype, a->ndim - 1, a->dims + 1, false);
		if (used < cap)
			used += snprintf(source + used, cap - used, " %s", o->pos[i]);
	}
	return fmt_schema_check(schema, err);
}

int pack_cmd_npy(const struct pack_opts *o, struct feed_err *err)
{
	struct npy_array *arrays = calloc((size_t)o->npos, sizeof(*arrays));
	struct fmt_schema *schema = calloc(1, sizeof(*schema));
	struct pack_sink sink = {0};
	char source[1024];
	uint64_t total = 0;
	int rc;

	if (!arrays || !schema) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < o->npos; i++)
		arrays[i].fd = -1;
	if (o->npos > FMT_MAX_FIELDS) {
		rc = feed_err_set(err, -PACK_EUSAGE, "at most %d arrays", FMT_MAX_FIELDS);
		goto out;
	}
	if ((rc = npy_args(o, arrays, err)) < 0)
		goto out;
	for (int i = 0; i < o->npos && rc == 0; i++)
		rc = npy_open(&arrays[i], err);
	if (rc == 0)
		rc = npy_schema(o, arrays, schema, source, sizeof(source), err);
	for (int i = 0; i < o->npos && rc == 0; i++)
		total += arrays[i].dims[0] * arrays[i].rec;
	if (rc == 0 && (rc = sink_open(&sink, o, schema, source, total, err)) == 0 &&
	    (rc = npy_copy(arrays, o->npos, &sink, err)) == 0)
		rc = sink_finish(&sink, err);
out:
	sink_free(&sink);
	for (int i = 0; arrays && i < o->npos; i++) {
		if (arrays[i].fd >= 0)
			close(arrays[i].fd);
		free(arrays[i].buf);
	}
	free(arrays);
	free(schema);
	return rc;
}
