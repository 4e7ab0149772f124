/*
 * feedpack_imagefolder.c: `feedpack imagefolder DIR`: a folder of class
 * subfolders, torchvision's ImageFolder layout, one record per image:
 * `image` (u8, variable, the file's bytes as they are, marked image) and
 * `label` (i64 scalar, the class's index, as ImageFolder's int target
 * collates to int64). The class names go into the manifest.
 *
 * Which files and in which order follow torchvision.datasets.ImageFolder
 * exactly, so that sample i here is ImageFolder's sample i:
 * - classes: the entries of DIR that are directories (symlinks followed,
 *   hidden ones included), sorted by name (byte order);
 * - per class, every directory under it (recursively, symlinks followed)
 *   sorted by path, and in each its non-directory entries sorted by name;
 * - a file counts if its name ends, ignoring ASCII case, in one of
 *   ImageFolder's IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp .pgm .tif
 *   .tiff .webp); other files are ignored and counted in the summary.
 * - a class with no such file is refused, as ImageFolder refuses it.
 * Every counted file's header is read with img_probe(): anything that is
 * not a readable JPEG or PNG (including .bmp/.ppm/.tif/.webp files, which
 * feedd does not decode) is refused naming its path and the decoder's
 * words, or with --skip-bad reported on stderr and left out (its class
 * keeps its index). Each image's path relative to DIR is recorded
 * (paths.txt), so feedd's errors name the file. Reads one file at a time;
 * the list is built before the writer starts. --check writes nothing: it
 * decodes every listed file in full on every core (feedpack_check.c).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "feedpack.h"
#include "image.h"

#define IF_MAX_DEPTH 64
/*
 * Defaults unless --level / --block-bytes / --block-records are given:
 * one image per block, zstd level 1. Measured on bench/make_jpeg_set.py's
 * 5,000 JPEGs (210.8 MB, mean 42 KB): zstd shrinks them by 0.0% at level 1,
 * 0.04% at 3 and 0.15% at 9, while ingest CPU grows (0.56, 0.66, 1.49 s);
 * so level 1 (zstd stores incompressible blocks raw: decoding them is a
 * copy). Blocks: a random sample costs reading its whole block; with the
 * 64 KiB default, images under 32 KB share blocks and a random read is
 * 1.32x the mean image (55.5 KB for a 42 KB mean), with 256 KiB 5.57x, with
 * one image per block exactly 1.00x, for 40 index bytes per image.
 */
#define IF_LEVEL_DEFAULT 1

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const if_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
				      ".pgm", ".tif", ".tiff", ".webp"};

/* One candidate file. */
struct if_file {
	char *rel;          /* path relative to DIR: class/sub/.../name */
	uint32_t cls;
	uint32_t dir_len;   /* bytes of rel before the file name (sort key) */
};

struct if_list {
	const char *root;
	char **classes;
	size_t nclasses, classes_cap;
	struct if_file *files;
	size_t n, cap;
	uint64_t bytes;     /* sum of candidate sizes (progress) */
	size_t ignored;     /* files without an image extension */
};

static int if_push_file(struct if_list *l, const char *rel, uint32_t dir_len, uint32_t cls,
			uint64_t size, struct feed_err *err)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct if_file *p = realloc(l->files, cap * sizeof(*p));
		if (!p)
			return feed_err_set(err, -ENOMEM, "%s: out of memory", l->root);
		l->files = p;
		l->cap = cap;
	}
	struct if_file *f = &l->files[l->n];
	if (!(f->rel = strdup(rel)))
		return feed_err_set(err, -ENOMEM, "%s: out of memory", l->root);
	f->cls = cls;
	f->dir_len = dir_len;
	l->n++;
	l->bytes += size;
	return 0;
}

static void if_list_free(struct if_list *l)
{
	for (uint32_t i = 0; i < l->nclasses; i++)
		free(l->classes[i]);
	free(l->classes);
	for (size_t i = 0; i < l->n; i++)
		free(l->files[i].rel);
	free(l->files);
}

static bool if_has_ext(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(if_exts) / sizeof(if_exts[0]); i++) {
		size_t k = strlen(if_exts[i]);
		if (n < k)
			continue;
		size_t j = 0;
		while (j < k && tolower((unsigned char)name[n - k + j]) == if_exts[i][j])
			j++;
		if (j == k)
			return true;
	}
	return false;
}

struct if_walk_arg {
	struct if_list *l;
	uint32_t cls;
};

/* pack_walk's visitor below a class directory: a file with an image
 * extension is a sample of the class (a dangling link too: it fails when
 * read), others are ignored and counted. */
static int if_visit(void *arg, const struct pack_walk_entry *e, struct feed_err *err)
{
	struct if_walk_arg *a = arg;

	if (!if_has_ext(e->name)) {
		a->l->ignored++;
		return 0;
	}
	return if_push_file(a->l, e->rel, (uint32_t)e->dir_len, a->cls,
			    e->st && S_ISREG(e->st->st_mode) ? (uint64_t)e->st->st_size : 0, err);
}

static int if_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ImageFolder's order: class, then directory path, then file name. */
static int if_cmp_file(const void *pa, const void *pb)
{
	const struct if_file *a = pa, *b = pb;

	if (a->cls != b->cls)
		return a->cls < b->cls ? -1 : 1;
	int c = strncmp(a->rel, b->rel, a->dir_len < b->dir_len ? a->dir_len : b->dir_len);
	if (c == 0 && a->dir_len != b->dir_len)
		return a->dir_len < b->dir_len ? -1 : 1;
	if (c)
		return c;
	return strcmp(a->rel + a->dir_len + 1, b->rel + b->dir_len + 1);
}

/* What a manifest accepts as a class name (fmt.h, fmt_writer_opts). */
static bool if_class_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > FMT_CLASS_NAME_MAX || !pack_utf8_ok((const unsigned char *)name))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return false;
	return true;
}

static int if_list_build(struct if_list *l, struct feed_err *err)
{
	struct dirent *e;
	DIR *d = opendir(l->root);
	int rc = 0;

	if (!d)
		return feed_err_set(err, -errno, "%s: %s", l->root, strerror(errno));
	while (rc == 0 && (errno = 0, e = readdir(d))) {
		char full[PATH_MAX];
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if ((rc = pack_path_join(full, sizeof(full), l->root, e->d_name, err)) == 0 &&
		    stat(full, &st) == 0 && S_ISDIR(st.st_mode))
			rc = pack_strv_push(&l->classes, &l->nclasses, &l->classes_cap, e->d_name,
					    l->root, err);
	}
	if (rc == 0 && errno)
		rc = feed_err_set(err, -errno, "%s: %s", l->root, strerror(errno));
	closedir(d);
	if (rc < 0)
		return rc;
	if (l->nclasses == 0)
		return feed_err_set(err, -EINVAL, "%s: no class folders (ImageFolder layout: "
				    "DIR/CLASS/IMAGE)", l->root);
	qsort(l->classes, l->nclasses, sizeof(*l->classes), if_cmp_str);
	for (uint32_t c = 0; c < l->nclasses; c++) {
		if (!if_class_name_ok(l->classes[c]))
			return feed_err_set(err, -EINVAL, "%s/%s: class folder name is not 1..%d "
					    "bytes of UTF-8 without control characters",
					    l->root, l->classes[c], FMT_CLASS_NAME_MAX);
		size_t before = l->n;
		struct if_walk_arg arg = {.l = l, .cls = c};
		struct pack_walk w = {.root = l->root, .max_depth = IF_MAX_DEPTH, .follow = true,
				      .visit = if_visit, .arg = &arg};
		if ((rc = pack_walk_dir(&w, l->classes[c], 0, err)) < 0)
			return rc;
		if (l->n == before)
			return feed_err_set(err, -EINVAL, "%s/%s: no image files in class folder "
					    "(.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)",
					    l->root, l->classes[c]);
	}
	qsort(l->files, l->n, sizeof(*l->files), if_cmp_file);
	return 0;
}

/* Reads and probes one file; a failure is a bad file, named in err. */
static int if_load(const char *path, uint8_t **buf, size_t *cap, size_t *len,
		   struct img_info *info, struct feed_err *err)
{
	int rc = pack_read_file(path, buf, cap, len, err);

	if (rc < 0)
		return rc;
	if ((rc = img_probe(*buf, *len, info, err)) < 0)
		return feed_err_prefix(err, "%s", path);
	return 0;
}

struct if_stats {
	size_t skipped;
	uint32_t max_w, max_h;
	uint64_t max_px;
};

static int if_copy(struct if_list *l, bool skip_bad, struct pack_sink *sink, struct if_stats *st,
		   struct feed_err *err)
{
	char full[PATH_MAX];
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	int rc = 0;

	for (size_t i = 0; i < l->n && rc == 0; i++) {
		struct img_info info;
		if ((rc = pack_path_join(full, sizeof(full), l->root, l->files[i].rel, err)) < 0)
			break;
		if ((rc = if_load(full, &buf, &cap, &len, &info, err)) < 0) {
			if (!skip_bad || rc == -ENOMEM)
				break;
			progress_end(&sink->prog);
			fprintf(stderr, "feedpack: skipped %s\n", err->msg);
			st->skipped++;
			*err = (struct feed_err){0};
			rc = 0;
			continue;
		}
		int64_t label = l->files[i].cls;
		struct fmt_value v[2] = {{buf, len}, {&label, sizeof(label)}};
		if ((rc = sink_add(sink, v, err)) < 0 ||
		    (rc = fmt_writer_note_image(sink->w, 0, info.width, info.height, err)) < 0 ||
		    (rc = fmt_writer_note_path(sink->w, l->files[i].rel, err)) < 0)
			break;
		uint64_t px = (uint64_t)info.width * info.height;
		st->max_w = info.width > st->max_w ? info.width : st->max_w;
		st->max_h = info.height > st->max_h ? info.height : st->max_h;
		st->max_px = px > st->max_px ? px : st->max_px;
	}
	free(buf);
	return rc;
}

/* --check: each file a unit, read into the worker's buffer. */
struct if_buf {
	uint8_t *p;
	size_t cap;
};

static int if_check_init(void *arg, void **ret_state, struct feed_err *err)
{
	(void)arg;
	if (!(*ret_state = calloc(1, sizeof(struct if_buf))))
		return feed_err_set(err, -ENOMEM, "out of memory");
	return 0;
}

static void if_check_fini(void *arg, void *state)
{
	struct if_buf *b = state;
	(void)arg;
	if (b)
		free(b->p);
	free(b);
}

static int if_check_unit(void *arg, struct chk_worker *w, uint64_t i, struct feed_err *err)
{
	const struct if_list *l = arg;
	struct if_buf *b = chk_state(w);
	struct feed_err e = {0};
	char full[PATH_MAX];
	size_t len;
	int rc;

	if ((rc = pack_path_join(full, sizeof(full), l->root, l->files[i].rel, err)) < 0)
		return rc;
	if ((rc = pack_read_file(full, &b->p, &b->cap, &len, &e)) == -ENOMEM)
		return feed_err_set(err, rc, "%s", e.msg);
	if (rc < 0)
		chk_fail(w, i, l->files[i].rel, e.msg);
	else
		chk_image(w, i, l->files[i].rel, b->p, len);
	return 0;
}

static int if_check(struct if_list *l, struct feed_err *err)
{
	struct chk_source src = {.units = l->n, .total_bytes = l->bytes,
				 .worker_init = if_check_init, .worker_fini = if_check_fini,
				 .unit = if_check_unit};
	return chk_run(&src, l, l->root, err);
}

int pack_cmd_imagefolder(const struct pack_opts *o, struct feed_err *err)
{
	struct if_list l = {.root = o->pos[0]};
	struct fmt_schema schema = {.nfields = 2};
	struct pack_sink sink = {0};
	struct if_stats st = {0};
	char source[PATH_MAX + 16];
	int rc;

	if ((rc = if_list_build(&l, err)) < 0)
		goto out;
	if (o->check) {
		rc = if_check(&l, err);
		goto out;
	}
	pack_field(&schema.fields[0], "image", FEED_DTYPE_U8, 0, NULL, true);
	schema.fields[0].image = true;
	pack_field(&schema.fields[1], "label", FEED_DTYPE_I64, 0, NULL, false);
	snprintf(source, sizeof(source), "imagefolder %s", l.root);
	struct pack_opts *io = malloc(sizeof(*io));
	if (!io) {
		rc = feed_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	*io = *o;
	if (!o->level_set)
		io->level = IF_LEVEL_DEFAULT;
	if (!o->block_records && !o->block_bytes_set)
		io->block_records = 1;
	rc = sink_open_classes(&sink, io, &schema, source, l.bytes, l.nclasses,
			       (const char *const *)l.classes, err);
	free(io);
	if (rc < 0)
		goto out;
	if ((rc = if_copy(&l, o->skip_bad, &sink, &st, err)) < 0)
		goto out;
	if (fmt_writer_count(sink.w) == 0) {
		rc = feed_err_set(err, -EINVAL, "%s: every image file was bad (%zu skipped)", l.root,
				  st.skipped);
		goto out;
	}
	if ((rc = sink_finish(&sink, err)) < 0)
		goto out;
	printf("%zu classes; largest image %ux%u, at most %llu pixels; %zu bad files skipped; "
	       "%zu files without an image extension ignored\n",
	       l.nclasses, st.max_w, st.max_h, (unsigned long long)st.max_px, st.skipped,
	       l.ignored);
out:
	sink_free(&sink);
	if_list_free(&l);
	return rc;
}
