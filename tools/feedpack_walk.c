/*
 * feedpack_walk.c: the directory walk that `feedpack files` and `feedpack
 * imagefolder` share (feedpack.h, pack_walk()): depth first, entries in
 * readdir order (the callers sort), paths kept relative to the root.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "feedpack.h"

int pack_path_join(char *buf, size_t cap, const char *a, const char *b, struct feed_err *err)
{
	int n = !*a ? snprintf(buf, cap, "%s", b) : !*b ? snprintf(buf, cap, "%s", a) :
		snprintf(buf, cap, "%s/%s", a, b);

	if (n < 0 || (size_t)n >= cap)
		return feed_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", a, b);
	return 0;
}

/* One entry of directory rel: descends into a directory, else visits. */
static int walk_entry(const struct pack_walk *w, const char *rel, const char *name, int depth,
		      struct feed_err *err)
{
	char child[PATH_MAX], full[PATH_MAX];
	struct stat st;
	int rc;

	if ((rc = pack_path_join(child, sizeof(child), rel, name, err)) < 0 ||
	    (rc = pack_path_join(full, sizeof(full), w->root, child, err)) < 0)
		return rc;
	bool ok = (w->follow ? stat(full, &st) : lstat(full, &st)) == 0;
	if (!ok && !w->follow)
		return feed_err_set(err, -errno, "%s: %s", full, strerror(errno));
	if (ok && S_ISDIR(st.st_mode))
		return pack_walk_dir(w, child, depth + 1, err);
	struct pack_walk_entry e = {.rel = child, .name = name, .dir_len = strlen(rel),
				    .st = ok ? &st : NULL};
	return w->visit(w->arg, &e, err);
}

int pack_walk_dir(const struct pack_walk *w, const char *rel, int depth, struct feed_err *err)
{
	char dir[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int rc;

	if ((rc = pack_path_join(dir, sizeof(dir), w->root, rel, err)) < 0)
		return rc;
	if (depth > w->max_depth)
		return feed_err_set(err, -ELOOP, "%s: directories nested too deep%s", dir,
				    w->follow ? " (a symlink loop?)" : "");
	if (!(d = opendir(dir)))
		return feed_err_set(err, -errno, "%s: %s", dir, strerror(errno));
	while (rc == 0 && (errno = 0, e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = walk_entry(w, rel, e->d_name, depth, err);
	if (rc == 0 && errno)
		rc = feed_err_set(err, -errno, "%s: %s", dir, strerror(errno));
	closedir(d);
	return rc;
}
