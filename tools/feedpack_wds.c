/*
 * feedpack_wds.c: `feedpack wds TAR... -o DIR`: WebDataset tar shards
 * (read with libarchive, plain or compressed) into one dataset.
 *
 * Samples are grouped as WebDataset groups them: a member's key is its path
 * up to the first dot of its base name, its extension the rest (lower-case);
 * consecutive members with one key are one sample. One field per listed
 * extension (--fields, else the first sample's), named after it: jpg, jpeg
 * and png are encoded image fields (`decode` reads them; each header is
 * probed), cls an i64 label (the member's text is an integer), txt and json
 * str fields (UTF-8), anything else variable u8 bytes. A sample missing a
 * listed extension is refused naming tar and key, or with --on-missing
 * skip left out and counted.
 *
 * Threads: the tars are read in parallel, one worker thread per tar at a
 * time, each writing its tar's samples into a part dataset of its own (its
 * own fmt_writer); the main thread then joins the parts in tar order
 * (fmt_writer_adopt), so samples come in the order of the tars and their
 * members whatever the thread count. Workers share only the next tar's
 * index and the progress counters (atomics); the main thread alone prints.
 * Parsed here (not in feedpack.c) because its options are its own.
 *
 * libarchive is loaded when wds runs (dlopen), not linked: its
 * dependencies (libxml2, ICU's 30 MB of data) would otherwise ride along
 * with every feedpack, e.g. into scripts/gpu-check's pack.
 */
#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"
#include "image.h"

#define WDS_EXT_MAX 32

#define WDS_LIBARCHIVE "libarchive.so.13"

enum wds_kind { WDS_BYTES, WDS_IMAGE, WDS_LABEL, WDS_TEXT };

/* The libarchive calls wds makes: (return type, name, parameters). */
#define WDS_LA_CALLS(X)                                                              \
	X(struct archive *, archive_read_new, (void))                                 \
	X(int, archive_read_support_filter_all, (struct archive *))                   \
	X(int, archive_read_support_format_tar, (struct archive *))                   \
	X(int, archive_read_open_filename, (struct archive *, const char *, size_t))  \
	X(int, archive_read_next_header, (struct archive *, struct archive_entry **)) \
	X(la_ssize_t, archive_read_data, (struct archive *, void *, size_t))          \
	X(int, archive_errno, (struct archive *))                                     \
	X(const char *, archive_error_string, (struct archive *))                     \
	X(int, archive_read_free, (struct archive *))                                 \
	X(mode_t, archive_entry_filetype, (struct archive_entry *))                   \
	X(const char *, archive_entry_pathname, (struct archive_entry *))             \
	X(la_int64_t, archive_entry_size, (struct archive_entry *))

/* libarchive, loaded at run time: one pointer per call, named after it. */
struct wds_la {
	void *handle;               /* dlopen()ed; closed by wds_la_close() */
#define WDS_LA_FIELD(ret, name, args) ret(*name) args;
	WDS_LA_CALLS(WDS_LA_FIELD)
#undef WDS_LA_FIELD
};

/* What the command line asked for. */
struct wds_opts {
	struct pack_opts *po;       /* the ingest options every packer shares */
	char fields[FMT_MAX_FIELDS][WDS_EXT_MAX]; /* extensions, in field order */
	uint32_t nfields;           /* 0: the first sample's */
	bool skip_missing;          /* --on-missing skip */
	bool quiet;                 /* --quiet: no progress line */
	int jobs;                   /* threads reading tars */
};

/* One tar's part, written by one worker. */
struct wds_part {
	char dir[PATH_MAX];         /* the part dataset */
	uint64_t samples, skipped;  /* written, left out */
	uint64_t bytes;             /* record bytes written */
	int rc;                     /* 0, or the error in err */
	struct feed_err err;
};

/* The whole run, shared by the workers. */
struct wds_run {
	const struct wds_opts *o;
	const struct wds_la *la;    /* libarchive's calls */
	struct fmt_schema schema;
	enum wds_kind kind[FMT_MAX_FIELDS];
	char **tars;                /* the input paths */
	int ntars;
	struct wds_part *parts;     /* one per tar */
	char tmp[PATH_MAX];         /* where the parts go */
	atomic_int next;            /* the next tar a worker takes */
	atomic_uint_fast64_t done_bytes, done_samples; /* for the progress line */
	pthread_mutex_t lock;       /* guards finished; taken by no other module */
	pthread_cond_t cond;        /* signalled when a worker finishes a tar */
	int finished;               /* tars finished */
};

/* A growable byte buffer for one member. */
struct wds_buf {
	uint8_t *p;
	size_t len, cap;
	bool set;                   /* the sample has this extension */
	char member[256];           /* its member name, for messages */
};

/* The sample being gathered in a worker. */
struct wds_sample {
	char key[PATH_MAX];         /* "" before the first member */
	struct wds_buf val[FMT_MAX_FIELDS];
};

static enum wds_kind wds_kind_of(const char *ext)
{
	if (!strcmp(ext, "jpg") || !strcmp(ext, "jpeg") || !strcmp(ext, "png"))
		return WDS_IMAGE;
	if (!strcmp(ext, "cls"))
		return WDS_LABEL;
	if (!strcmp(ext, "txt") || !strcmp(ext, "json"))
		return WDS_TEXT;
	return WDS_BYTES;
}

/* Splits a member path into key and lower-case extension, as WebDataset
 * does; false for a member with no extension (WebDataset skips those). */
static bool wds_split(const char *path, char *key, size_t kcap, char *ext, size_t ecap)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	const char *dot = strchr(base, '.');

	if (!dot || dot == base || !dot[1] || (size_t)(dot - path) >= kcap || strlen(dot + 1) >= ecap)
		return false;
	memcpy(key, path, (size_t)(dot - path));
	key[dot - path] = '\0';
	for (size_t i = 0; dot[1 + i]; i++)
		ext[i] = (char)tolower((unsigned char)dot[1 + i]);
	ext[strlen(dot + 1)] = '\0';
	return true;
}

/* Fills the schema from the extensions. */
static int wds_schema(struct wds_run *r, struct feed_err *err)
{
	const struct wds_opts *o = r->o;

	r->schema.nfields = o->nfields;
	for (uint32_t f = 0; f < o->nfields; f++) {
		struct fmt_field *fd = &r->schema.fields[f];
		r->kind[f] = wds_kind_of(o->fields[f]);
		if (r->kind[f] == WDS_LABEL)
			pack_field(fd, o->fields[f], FEED_DTYPE_I64, 0, NULL, false);
		else
			pack_field(fd, o->fields[f], r->kind[f] == WDS_TEXT ? FEED_DTYPE_STR : FEED_DTYPE_U8,
				   0, NULL, true);
		fd->image = r->kind[f] == WDS_IMAGE;
	}
	return fmt_schema_check(&r->schema, err);
}

static int wds_reserve(struct wds_buf *b, size_t need)
{
	if (b->cap >= need)
		return 0;
	/* a member's size is known before it is read: grow to it (plus half,
	 * so that members of about one size settle after a few) */
	size_t cap = need + need / 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Checks and converts value f of the sample; *v is what the record holds. */
static int wds_value(struct wds_run *r, const char *tar, struct wds_buf *b, uint32_t f,
		     int64_t *label, struct img_info *info, struct fmt_value *v, struct feed_err *err)
{
	char *end;

	b->p[b->len] = '\0'; /* wds_read_member left room */
	*v = (struct fmt_value){.data = b->p, .len = b->len};
	switch (r->kind[f]) {
	case WDS_LABEL:
		errno = 0;
		*label = strtoll((const char *)b->p, &end, 10);
		while (end && isspace((unsigned char)*end))
			end++;
		if (errno || end == (char *)b->p || (size_t)(end - (char *)b->p) != b->len)
			return feed_err_set(err, -EINVAL, "%s: member %s: '%.40s' is not an integer "
					    "class label", tar, b->member, (const char *)b->p);
		*v = (struct fmt_value){.data = label, .len = sizeof(*label)};
		return 0;
	case WDS_TEXT:
		if (memchr(b->p, '\0', b->len) || !pack_utf8_ok(b->p))
			return feed_err_set(err, -EINVAL, "%s: member %s: not UTF-8 text", tar,
					    b->member);
		return 0;
	case WDS_IMAGE:
		if (img_probe(b->p, b->len, info, err) < 0)
			return feed_err_prefix(err, "%s: member %s", tar, b->member);
		return 0;
	default:
		return 0;
	}
}

/* Writes the gathered sample as a record of w (or skips it), then clears it. */
static int wds_emit(struct wds_run *r, const char *tar, struct wds_sample *s,
		    struct fmt_writer *w, struct wds_part *part, struct feed_err *err)
{
	struct fmt_value v[FMT_MAX_FIELDS] = {{0}};
	struct img_info info[FMT_MAX_FIELDS];
	int64_t label[FMT_MAX_FIELDS];
	uint32_t n = r->schema.nfields, f;
	int rc = 0;

	for (f = 0; f < n && s->val[f].set; f++)
		;
	if (f < n && !r->o->skip_missing)
		return feed_err_set(err, -EINVAL, "%s: sample '%s': no member with extension '%s' "
				    "(--on-missing skip leaves such samples out)", tar, s->key,
				    r->schema.fields[f].name);
	if (f < n) {
		part->skipped++;
		goto clear;
	}
	for (f = 0; f < n && rc == 0; f++)
		rc = wds_value(r, tar, &s->val[f], f, &label[f], &info[f], &v[f], err);
	if (rc == 0)
		rc = fmt_writer_add(w, v, err);
	for (f = 0; f < n && rc == 0; f++)
		if (r->kind[f] == WDS_IMAGE)
			rc = fmt_writer_note_image(w, f, info[f].width, info[f].height, err);
	if (rc < 0)
		return rc;
	part->samples++;
	for (f = 0; f < n; f++)
		part->bytes += v[f].len;
	atomic_fetch_add_explicit(&r->done_samples, 1, memory_order_relaxed); /* display only */
clear:
	for (f = 0; f < n; f++)
		s->val[f].set = false, s->val[f].len = 0;
	return 0;
}

/* Reads the current member's data into b, whole; a short member is an error. */
static int wds_read_member(struct wds_run *r, struct archive *a, struct archive_entry *e,
			   struct wds_buf *b, const char *tar, const char *name,
			   struct feed_err *err)
{
	const struct wds_la *la = r->la;
	int64_t size = la->archive_entry_size(e), got = 0;

	if (size < 0 || (uint64_t)size > PACK_MAX_RECORD)
		return feed_err_set(err, -EFBIG, "%s: member %s: size %lld outside 0..%llu", tar,
				    name, (long long)size, PACK_MAX_RECORD);
	if (wds_reserve(b, (size_t)size + 1) < 0)
		return feed_err_set(err, -ENOMEM, "%s: member %s: out of memory", tar, name);
	while (got < size) {
		la_ssize_t n = la->archive_read_data(a, b->p + got, (size_t)(size - got));
		if (n < 0)
			return feed_err_set(err, -EBADMSG, "%s: member %s: truncated or unreadable "
					    "after %lld of %lld bytes: %s", tar, name, (long long)got,
					    (long long)size, la->archive_error_string(a));
		if (n == 0)
			break;
		got += n;
	}
	if (got < size)
		return feed_err_set(err, -EBADMSG, "%s: member %s: truncated: %lld of %lld bytes",
				    tar, name, (long long)got, (long long)size);
	b->len = (size_t)size;
	b->set = true;
	snprintf(b->member, sizeof(b->member), "%s", name);
	atomic_fetch_add_explicit(&r->done_bytes, (uint64_t)size, memory_order_relaxed);
	return 0;
}

/* Opens a tar (any compression libarchive knows). */
static int wds_open(const struct wds_la *la, const char *tar, struct archive **ret,
		    struct feed_err *err)
{
	struct archive *a = la->archive_read_new();

	if (!a)
		return feed_err_set(err, -ENOMEM, "%s: out of memory", tar);
	la->archive_read_support_filter_all(a);
	la->archive_read_support_format_tar(a);
	if (la->archive_read_open_filename(a, tar, 1 << 20) != ARCHIVE_OK) {
		int rc = feed_err_set(err, la->archive_errno(a) > 0 ? -la->archive_errno(a) : -EBADMSG,
				      "%s: %s", tar, la->archive_error_string(a));
		la->archive_read_free(a);
		return rc;
	}
	*ret = a;
	return 0;
}

/* The next regular member with an extension; 1 at the end of the tar. */
static int wds_next(const struct wds_la *la, struct archive *a, const char *tar,
		    const char *prev, char *key, char *ext, struct archive_entry **ret_e,
		    struct feed_err *err)
{
	for (;;) {
		int rc = la->archive_read_next_header(a, ret_e);
		if (rc == ARCHIVE_EOF)
			return 1;
		if (rc < ARCHIVE_WARN)
			return feed_err_set(err, -EBADMSG, "%s: after member %s: %s", tar,
					    prev[0] ? prev : "(none)", la->archive_error_string(a));
		if (la->archive_entry_filetype(*ret_e) != AE_IFREG)
			continue;
		const char *name = la->archive_entry_pathname(*ret_e);
		if (name && wds_split(name, key, PATH_MAX, ext, WDS_EXT_MAX))
			return 0;
	}
}

/* Loads libarchive and every call wds makes; -ENOENT saying how to get it. */
static int wds_la_open(struct wds_la *la, struct feed_err *err)
{
	*la = (struct wds_la){.handle = dlopen(WDS_LIBARCHIVE, RTLD_NOW | RTLD_LOCAL)};
	if (!la->handle)
		return feed_err_set(err, -ENOENT, "wds needs %s (apt install libarchive13): %s",
				    WDS_LIBARCHIVE, dlerror());
#define WDS_LA_SYM(ret, name, args)                                                  \
	if (!(*(void **)&la->name = dlsym(la->handle, #name)))                         \
		return feed_err_set(err, -ENOENT, "%s: no %s", WDS_LIBARCHIVE, #name);
	WDS_LA_CALLS(WDS_LA_SYM)
#undef WDS_LA_SYM
	return 0;
}

static void wds_la_close(struct wds_la *la)
{
	if (la->handle)
		dlclose(la->handle);
	la->handle = NULL;
}

static int wds_field_of(const struct wds_run *r, const char *ext)
{
	for (uint32_t f = 0; f < r->schema.nfields; f++)
		if (!strcmp(r->schema.fields[f].name, ext))
			return (int)f;
	return -1;
}

/* Reads the members of an open tar into w, a sample at a time. */
static int wds_members(struct wds_run *r, struct archive *a, const char *tar,
		       struct wds_sample *s, struct fmt_writer *w, struct wds_part *part,
		       struct feed_err *err)
{
	char key[PATH_MAX], ext[WDS_EXT_MAX], prev[256];
	struct archive_entry *e;
	int rc;

	prev[0] = '\0';
	while ((rc = wds_next(r->la, a, tar, prev, key, ext, &e, err)) == 0) {
		const char *name = r->la->archive_entry_pathname(e);
		snprintf(prev, sizeof(prev), "%s", name);
		if (strcmp(key, s->key)) {
			if (s->key[0] && (rc = wds_emit(r, tar, s, w, part, err)) < 0)
				return rc;
			snprintf(s->key, sizeof(s->key), "%s", key);
		}
		int f = wds_field_of(r, ext);
		if (f < 0)
			continue;
		if (s->val[f].set)
			return feed_err_set(err, -EINVAL, "%s: sample '%s': members %s and %s both have "
					    "extension '%s'", tar, s->key, s->val[f].member, name, ext);
		if ((rc = wds_read_member(r, a, e, &s->val[f], tar, name, err)) < 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	return s->key[0] ? wds_emit(r, tar, s, w, part, err) : 0;
}

/* Writes tar t's samples into its part dataset. */
static int wds_tar(struct wds_run *r, int t, struct wds_sample *s)
{
	struct wds_part *part = &r->parts[t];
	const struct pack_opts *po = r->o->po;
	struct fmt_writer_opts wo = {.name = "part", .block_bytes = po->block_bytes,
				     .block_records = po->block_records, .zstd_level = po->level,
				     .shard_bytes = po->shard_bytes};
	struct fmt_writer *w = NULL;
	struct archive *a = NULL;
	int rc;

	if (snprintf(part->dir, sizeof(part->dir), "%s/part-%06d", r->tmp, t) >= (int)sizeof(part->dir))
		return feed_err_set(&part->err, -ENAMETOOLONG, "%s: path too long", r->tmp);
	memset(s->key, 0, sizeof(s->key));
	for (uint32_t f = 0; f < FMT_MAX_FIELDS; f++)
		s->val[f].set = false;
	if ((rc = wds_open(r->la, r->tars[t], &a, &part->err)) < 0)
		return rc;
	if ((rc = fmt_writer_new(part->dir, &r->schema, &wo, &w, &part->err)) < 0) {
		w = NULL;
		goto out;
	}
	rc = wds_members(r, a, r->tars[t], s, w, part, &part->err);
	if (rc == 0 && part->samples)
		rc = fmt_writer_finish(w, &part->err);
out:
	fmt_writer_free(w);
	if (a)
		r->la->archive_read_free(a);
	return rc;
}

static void *wds_worker(void *arg)
{
	struct wds_run *r = arg;
	struct wds_sample *s = calloc(1, sizeof(*s));
	int t;

	while ((t = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed)) < r->ntars) {
		struct wds_part *part = &r->parts[t];
		part->rc = s ? wds_tar(r, t, s) : feed_err_set(&part->err, -ENOMEM, "out of memory");
		pthread_mutex_lock(&r->lock);
		r->finished++;
		pthread_cond_signal(&r->cond);
		pthread_mutex_unlock(&r->lock);
	}
	for (uint32_t f = 0; s && f < FMT_MAX_FIELDS; f++)
		free(s->val[f].p);
	free(s);
	return NULL;
}

/* --fields absent: the extensions of the first tar's first sample. */
static int wds_first_exts(const struct wds_la *la, struct wds_opts *o, const char *tar,
			  struct feed_err *err)
{
	char key[PATH_MAX], first[PATH_MAX] = "", ext[WDS_EXT_MAX];
	struct archive_entry *e;
	struct archive *a = NULL;
	int rc = wds_open(la, tar, &a, err);

	while (rc == 0 && (rc = wds_next(la, a, tar, "", key, ext, &e, err)) == 0) {
		if (first[0] && strcmp(first, key))
			break;
		snprintf(first, sizeof(first), "%s", key);
		bool seen = false;
		for (uint32_t f = 0; f < o->nfields; f++)
			seen |= !strcmp(o->fields[f], ext);
		if (!seen && o->nfields < FMT_MAX_FIELDS)
			snprintf(o->fields[o->nfields++], WDS_EXT_MAX, "%s", ext);
	}
	if (rc >= 0 && o->nfields == 0)
		rc = feed_err_set(err, -EINVAL, "%s: no member with an extension", tar);
	if (a)
		la->archive_read_free(a);
	return rc < 0 ? rc : 0;
}

static int wds_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

/* Waits for the workers, drawing the progress line meanwhile. */
static void wds_wait(struct wds_run *r, struct pack_sink *sink)
{
	pthread_mutex_lock(&r->lock);
	while (r->finished < r->ntars) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&r->cond, &r->lock, &ts);
		pthread_mutex_unlock(&r->lock);
		progress_tick(&sink->prog,
			      atomic_load_explicit(&r->done_bytes, memory_order_relaxed),
			      atomic_load_explicit(&r->done_samples, memory_order_relaxed));
		pthread_mutex_lock(&r->lock);
	}
	pthread_mutex_unlock(&r->lock);
}

/* Reads every tar on the workers, then joins the parts in tar order. */
static int wds_parts(struct wds_run *r, struct pack_sink *sink, uint64_t *ret_skipped,
		     struct feed_err *err)
{
	int nthreads = r->o->jobs < r->ntars ? r->o->jobs : r->ntars, started = 0, rc = 0;
	pthread_t *th = calloc((size_t)nthreads, sizeof(*th));

	if (!th)
		return feed_err_set(err, -ENOMEM, "out of memory");
	for (; started < nthreads; started++)
		if (pthread_create(&th[started], NULL, wds_worker, r) != 0)
			break;
	if (started == 0)
		rc = feed_err_set(err, -EAGAIN, "cannot start a thread");
	else
		wds_wait(r, sink);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	*ret_skipped = 0;
	for (int t = 0; t < r->ntars && rc == 0; t++) {
		struct wds_part *p = &r->parts[t];
		if (p->rc < 0) {
			*err = p->err;
			rc = p->rc;
		} else if (p->samples && (rc = fmt_writer_adopt(sink->w, p->dir, err)) == 0) {
			sink->bytes_in += p->bytes;
			*ret_skipped += p->skipped;
		} else if (!p->samples) {
			*ret_skipped += p->skipped;
		}
	}
	return rc;
}

static int wds_pack(struct wds_opts *o, char **tars, int ntars, struct feed_err *err)
{
	struct wds_run *r = calloc(1, sizeof(*r));
	struct pack_sink sink = {0};
	struct wds_la la = {0};
	uint64_t total = 0, skipped = 0;
	char source[128];
	int rc;

	if (!r || !(r->parts = calloc((size_t)ntars, sizeof(*r->parts))))
		return free(r), feed_err_set(err, -ENOMEM, "out of memory");
	*r = (struct wds_run){.o = o, .la = &la, .tars = tars, .ntars = ntars, .parts = r->parts};
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	for (int t = 0; t < ntars; t++) {
		struct stat st;
		if (stat(tars[t], &st) < 0) {
			rc = feed_err_set(err, -errno, "%s: %s", tars[t], strerror(errno));
			goto out;
		}
		total += (uint64_t)st.st_size;
	}
	if ((rc = wds_la_open(&la, err)) < 0 ||
	    (o->nfields == 0 && (rc = wds_first_exts(&la, o, tars[0], err)) < 0) ||
	    (rc = wds_schema(r, err)) < 0)
		goto out;
	snprintf(source, sizeof(source), "feedpack wds: %d tar%s", ntars, ntars == 1 ? "" : "s");
	if ((rc = sink_open(&sink, o->po, &r->schema, source, total, err)) < 0)
		goto out;
	sink.prog.on = sink.prog.on && !o->quiet;
	snprintf(r->tmp, sizeof(r->tmp), "%s.parts-XXXXXX", o->po->out_dir);
	if (!mkdtemp(r->tmp)) {
		r->tmp[0] = '\0';
		rc = feed_err_set(err, -errno, "%s: cannot create a working directory: %s",
				  o->po->out_dir, strerror(errno));
		goto out;
	}
	if ((rc = wds_parts(r, &sink, &skipped, err)) == 0 && (rc = sink_finish(&sink, err)) == 0 &&
	    skipped)
		printf("skipped %llu samples missing one of the fields (--on-missing skip)\n",
		       (unsigned long long)skipped);
out:
	if (r->tmp[0])
		nftw(r->tmp, wds_rm, 16, FTW_DEPTH | FTW_PHYS);
	sink_free(&sink);
	wds_la_close(&la);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r->parts);
	free(r);
	return rc;
}

static const char wds_usage[] =
	"usage: feedpack wds TAR... -o DIR [options]\n\n"
	"Packs WebDataset tar shards (plain, .gz, .zst...) into one dataset. Members\n"
	"are grouped into samples by key (the path up to the first dot of the base\n"
	"name), as WebDataset does; one field per extension, named after it: jpg,\n"
	"jpeg and png are encoded images (feedd's decode op reads them), cls an i64\n"
	"label, txt and json str, anything else bytes. Samples come in the order of\n"
	"the tars and their members; the tars are read in parallel.\n\n"
	"options:\n"
	"  -o, --output DIR       dataset directory to create (must not exist)\n"
	"      --fields E,E,...   extensions to keep (default: the first sample's)\n"
	"      --on-missing fail|skip  a sample without one of them: an error\n"
	"                         naming it (default), or left out and counted\n"
	"  -j, --jobs N           tars read at once (default: the CPUs)\n"
	"      --quiet            no progress line\n"
	"      --name NAME, --block-bytes N, --block-records N, --level L,\n"
	"      --shard-bytes N    as for the other ingest commands\n";

enum { WDS_FIELDS = 300, WDS_MISSING, WDS_QUIET, WDS_NAME, WDS_BB, WDS_BR, WDS_LEVEL, WDS_SB };

static const struct option wds_long[] = {
	{"output", required_argument, NULL, 'o'}, {"jobs", required_argument, NULL, 'j'},
	{"fields", required_argument, NULL, WDS_FIELDS},
	{"on-missing", required_argument, NULL, WDS_MISSING},
	{"quiet", no_argument, NULL, WDS_QUIET}, {"name", required_argument, NULL, WDS_NAME},
	{"block-bytes", required_argument, NULL, WDS_BB},
	{"block-records", required_argument, NULL, WDS_BR},
	{"level", required_argument, NULL, WDS_LEVEL},
	{"shard-bytes", required_argument, NULL, WDS_SB},
	{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
};

/* A count with an optional k/M/G suffix in [lo, hi]. */
static bool wds_count(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
	char *end;
	unsigned shift = 0;

	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	shift = *end == 'k' || *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	end += shift != 0;
	if (errno || *end || v > (UINT64_MAX >> shift) || (v << shift) < lo || (v << shift) > hi)
		return false;
	*ret = v << shift;
	return true;
}

/* --fields E,E,...: lower-case, unique extensions. */
static bool wds_fields(struct wds_opts *o, const char *arg)
{
	const char *p = arg;

	o->nfields = 0;
	while (*p) {
		size_t n = strcspn(p, ",");
		if (n == 0 || n >= WDS_EXT_MAX || o->nfields == FMT_MAX_FIELDS)
			return false;
		char *f = o->fields[o->nfields];
		for (size_t i = 0; i < n; i++)
			f[i] = (char)tolower((unsigned char)p[i]);
		f[n] = '\0';
		for (uint32_t i = 0; i < o->nfields; i++)
			if (!strcmp(o->fields[i], f))
				return false;
		o->nfields++;
		p += n + (p[n] == ',');
	}
	return o->nfields > 0;
}

/* One option; false for a bad value. */
static bool wds_opt(struct wds_opts *o, int opt, const char *arg)
{
	struct pack_opts *po = o->po;
	uint64_t v;

	switch (opt) {
	case 'o': po->out_dir = arg; return true;
	case WDS_NAME: po->name = arg; return true;
	case WDS_QUIET: o->quiet = true; return true;
	case WDS_FIELDS: return wds_fields(o, arg);
	case WDS_MISSING:
		o->skip_missing = !strcmp(arg, "skip");
		return o->skip_missing || !strcmp(arg, "fail");
	case 'j': return wds_count(arg, 1, 1024, &v) && (o->jobs = (int)v, true);
	case WDS_BB: return wds_count(arg, 1, 1ull << 30, &po->block_bytes);
	case WDS_BR: return wds_count(arg, 1, UINT32_MAX, &v) && (po->block_records = (uint32_t)v, true);
	case WDS_LEVEL: return wds_count(arg, 1, 19, &v) && (po->level = (int)v, true);
	case WDS_SB: return wds_count(arg, 1, UINT64_MAX, &po->shard_bytes);
	}
	return false;
}

/* Parses argv; 0, 1 for --help, 2 after printing a usage error. */
static int wds_args(struct wds_opts *o, int argc, char **argv)
{
	int opt;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":o:j:h", wds_long, NULL)) != -1) {
		if (opt == 'h')
			return 1;
		if (opt == '?' || opt == ':' || !wds_opt(o, opt, optarg)) {
			fprintf(stderr, "feedpack: wds: %s '%s'\nTry 'feedpack wds --help'.\n",
				opt == '?' ? "unknown option" : opt == ':' ? "option needs a value" :
				"invalid value for", argv[optind - 1]);
			return 2;
		}
	}
	struct pack_opts *po = o->po;
	if (optind >= argc || !po->out_dir || !*po->out_dir) {
		fprintf(stderr, "feedpack: wds: %s\nTry 'feedpack wds --help'.\n",
			optind >= argc ? "no tar given" : "missing -o DIR");
		return 2;
	}
	snprintf(po->out_buf, sizeof(po->out_buf), "%s", po->out_dir);
	for (size_t n = strlen(po->out_buf); n > 1 && po->out_buf[n - 1] == '/';)
		po->out_buf[--n] = '\0';
	po->out_dir = po->out_buf;
	if (!po->name) {
		const char *slash = strrchr(po->out_buf, '/');
		snprintf(po->name_buf, sizeof(po->name_buf), "%s", slash ? slash + 1 : po->out_buf);
		po->name = po->name_buf;
	}
	return 0;
}

int pack_wds_main(int argc, char **argv)
{
	struct wds_opts *o = calloc(1, sizeof(*o));
	struct pack_opts *po = calloc(1, sizeof(*po));
	struct feed_err err = {0};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int rc;

	if (!o || !po)
		return free(o), free(po), fprintf(stderr, "feedpack: out of memory\n"), 1;
	o->po = po;
	o->jobs = cpus > 0 ? (int)cpus : 1;
	po->level = 3;
	po->block_bytes = 64 * 1024;
	rc = wds_args(o, argc, argv);
	if (rc == 1)
		rc = (fputs(wds_usage, stdout), 0);
	else if (rc == 0 && wds_pack(o, argv + optind, argc - optind, &err) < 0)
		rc = (fprintf(stderr, "feedpack: %s\n", err.msg), 1);
	free(o);
	free(po);
	return rc;
}
