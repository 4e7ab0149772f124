/*
 * feedpack_files.c: `feedpack files DIR_IN`: every regular file under
 * DIR_IN, recursively, sorted by relative path (byte order), one record each:
 * `data` (u8, variable, the file's bytes) and `name` (str, variable, the
 * relative path). Lists the files through pack_walk_dir() (symlinks and special files are
 * skipped, and counted on stderr) and reads one file at a time. The list of
 * paths is collected before the writer starts, so an output directory
 * inside DIR_IN is never packed into itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"

#define FILES_MAX_DEPTH 256

/* Relative paths of the files to pack. */
struct file_list {
	const char *root;   /* DIR_IN as given */
	char **rel;         /* relative paths, owned */
	size_t n, cap;
	uint64_t bytes;     /* sum of file sizes */
	size_t skipped;     /* entries that are neither files nor directories */
};

int pack_strv_push(char ***v, size_t *n, size_t *cap, const char *s, const char *root,
		   struct feed_err *err)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		char **p = realloc(*v, c * sizeof(*p));
		if (!p)
			return feed_err_set(err, -ENOMEM, "%s: out of memory", root);
		*v = p;
		*cap = c;
	}
	if (!((*v)[*n] = strdup(s)))
		return feed_err_set(err, -ENOMEM, "%s: out of memory", root);
	(*n)++;
	return 0;
}

static void list_free(struct file_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->rel[i]);
	free(l->rel);
}

/* pack_walk's visitor: a regular file is listed, anything else (a
 * symlink, a special file) skipped. */
static int files_visit(void *arg, const struct pack_walk_entry *e, struct feed_err *err)
{
	struct file_list *l = arg;
	int rc;

	if (!S_ISREG(e->st->st_mode)) {
		l->skipped++;
		return 0;
	}
	if ((rc = pack_strv_push(&l->rel, &l->n, &l->cap, e->rel, l->root, err)) == 0)
		l->bytes += (uint64_t)e->st->st_size;
	return rc;
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

bool pack_utf8_ok(const unsigned char *s)
{
	while (*s) {
		int n = *s < 0x80 ? 0 : (*s & 0xe0) == 0xc0 ? 1 : (*s & 0xf0) == 0xe0 ? 2 :
			(*s & 0xf8) == 0xf0 ? 3 : -1;
		if (n < 0 || (n == 1 && *s < 0xc2))
			return false;
		s++;
		for (int i = 0; i < n; i++, s++)
			if ((*s & 0xc0) != 0x80)
				return false;
	}
	return true;
}

int pack_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *ret_len,
		   struct feed_err *err)
{
	struct stat st;
	long long got;
	int fd, rc;

	if ((rc = pack_open_input(path, &fd, err)) < 0)
		return rc;
	if (fstat(fd, &st) < 0) {
		rc = feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	} else if ((uint64_t)st.st_size > PACK_MAX_RECORD) {
		rc = feed_err_set(err, -EFBIG, "%s: %lld bytes is too large for one record (1 GiB "
				  "at most)", path, (long long)st.st_size);
	} else if ((size_t)st.st_size > *cap) {
		uint8_t *p = realloc(*buf, (size_t)st.st_size);
		if (!p)
			rc = feed_err_set(err, -ENOMEM, "%s: out of memory", path);
		else
			*buf = p, *cap = (size_t)st.st_size;
	}
	if (rc == 0) {
		got = pack_read_full(fd, *buf, (size_t)st.st_size);
		if (got < 0)
			rc = feed_err_set(err, (int)got, "%s: %s", path, strerror((int)-got));
		else if (got != (long long)st.st_size)
			rc = feed_err_set(err, -EBADMSG, "%s: file changed while reading", path);
		else
			*ret_len = (size_t)got;
	}
	close(fd);
	return rc;
}

static int files_copy(struct file_list *l, struct pack_sink *sink, struct feed_err *err)
{
	char full[PATH_MAX];
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	int rc = 0;

	for (size_t i = 0; i < l->n && rc == 0; i++) {
		if ((rc = pack_path_join(full, sizeof(full), l->root, l->rel[i], err)) < 0 ||
		    (rc = pack_read_file(full, &buf, &cap, &len, err)) < 0)
			break;
		struct fmt_value v[2] = {{buf, len}, {l->rel[i], strlen(l->rel[i])}};
		rc = sink_add(sink, v, err);
	}
	free(buf);
	return rc;
}

/* Walks DIR_IN, sorts, and checks the names. */
static int files_list(struct file_list *l, struct feed_err *err)
{
	struct pack_walk w = {.root = l->root, .max_depth = FILES_MAX_DEPTH, .follow = false,
			      .visit = files_visit, .arg = l};
	int rc = pack_walk_dir(&w, "", 0, err);

	if (rc < 0)
		return rc;
	if (l->n == 0)
		return feed_err_set(err, -EINVAL, "%s: no regular files to pack", l->root);
	qsort(l->rel, l->n, sizeof(*l->rel), cmp_path);
	for (size_t i = 0; i < l->n; i++)
		if (!pack_utf8_ok((const unsigned char *)l->rel[i]))
			return feed_err_set(err, -EINVAL, "%s/%s: file name is not valid UTF-8",
					    l->root, l->rel[i]);
	return 0;
}

int pack_cmd_files(const struct pack_opts *o, struct feed_err *err)
{
	struct file_list l = {.root = o->pos[0]};
	struct fmt_schema schema = {.nfields = 2};
	struct pack_sink sink = {0};
	char source[PATH_MAX + 8];
	int rc;

	if ((rc = files_list(&l, err)) < 0)
		goto out;
	pack_field(&schema.fields[0], "data", FEED_DTYPE_U8, 0, NULL, true);
	pack_field(&schema.fields[1], "name", FEED_DTYPE_STR, 0, NULL, true);
	snprintf(source, sizeof(source), "files %s", l.root);
	if ((rc = sink_open(&sink, o, &schema, source, l.bytes, err)) == 0 &&
	    (rc = files_copy(&l, &sink, err)) == 0)
		rc = sink_finish(&sink, err);
	if (rc == 0 && l.skipped)
		fprintf(stderr, "feedpack: %s: skipped %zu entries that are neither regular files "
			"nor directories (symlinks, devices, sockets)\n", l.root, l.skipped);
out:
	sink_free(&sink);
	list_free(&l);
	return rc;
}
