/*
 * feedpack_sink.c: the end of every ingest command. Owns the fmt_writer
 * (checking first that the output directory can be created, so a bad -o is
 * reported by path before any input is read), the byte accounting, the
 * progress bar and the one summary line on stdout. Also the small input
 * helpers the commands share. One thread; never leaves a temporary
 * directory behind on an error path it controls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedpack.h"

long long pack_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long long)got;
}

int pack_open_input(const char *path, int *ret_fd, struct feed_err *err)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return feed_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		close(fd);
		return feed_err_set(err, -EISDIR, "%s: is a directory", path);
	}
	*ret_fd = fd;
	return 0;
}

void pack_field(struct fmt_field *f, const char *name, int dtype, uint32_t rank,
		const uint64_t *shape, bool variable)
{
	*f = (struct fmt_field){.dtype = dtype, .rank = rank, .variable = variable};
	snprintf(f->name, sizeof(f->name), "%s", name);
	for (uint32_t i = 0; i < rank; i++)
		f->shape[i] = (uint32_t)shape[i];
	f->max_bytes = variable ? 0 : fmt_field_elem_bytes(f);
}

/* Makes sure an error about the output names the output directory. */
static int blame_output(struct feed_err *err, int rc, const char *out_dir)
{
	if (!err->msg[0])
		snprintf(err->msg, sizeof(err->msg), "%s", strerror(-rc));
	err->code = rc;
	if (!strstr(err->msg, out_dir))
		feed_err_prefix(err, "%s", out_dir);
	return rc;
}

/* out_dir must not exist and its parent must be a writable directory. */
static int check_output(const char *out_dir, struct feed_err *err)
{
	char buf[PATH_MAX];
	struct stat st;
	const char *parent;

	if (lstat(out_dir, &st) == 0)
		return feed_err_set(err, -EEXIST, "%s: already exists", out_dir);
	snprintf(buf, sizeof(buf), "%s", out_dir);
	parent = dirname(buf);
	if (stat(parent, &st) < 0)
		return feed_err_set(err, -errno, "%s: cannot create: parent directory '%s': %s", out_dir,
				    parent, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return feed_err_set(err, -ENOTDIR, "%s: cannot create: '%s' is not a directory",
				    out_dir, parent);
	if (access(parent, W_OK | X_OK) < 0)
		return feed_err_set(err, -errno, "%s: cannot create in '%s': %s", out_dir, parent,
				    strerror(errno));
	return 0;
}

int sink_open(struct pack_sink *s, const struct pack_opts *o, const struct fmt_schema *schema,
	      const char *source, uint64_t total_in, struct feed_err *err)
{
	return sink_open_classes(s, o, schema, source, total_in, 0, NULL, err);
}

int sink_open_classes(struct pack_sink *s, const struct pack_opts *o,
		      const struct fmt_schema *schema, const char *source, uint64_t total_in,
		      uint32_t num_classes, const char *const *classes, struct feed_err *err)
{
	struct fmt_writer_opts wo = {
		.num_classes = num_classes,
		.classes = classes,
		.name = o->name,
		.source = source,
		.block_bytes = o->block_bytes,
		.block_records = o->block_records,
		.zstd_level = o->level,
		.shard_bytes = o->shard_bytes,
	};
	int rc;

	*s = (struct pack_sink){.out_dir = o->out_dir, .nfields = schema->nfields};
	if ((rc = check_output(o->out_dir, err)) < 0)
		return rc;
	if ((rc = fmt_writer_new(o->out_dir, schema, &wo, &s->w, err)) < 0) {
		s->w = NULL;
		return blame_output(err, rc, o->out_dir);
	}
	progress_start(&s->prog, "packing", "samples", total_in);
	s->prog.on = s->prog.on && !o->quiet;
	return 0;
}

int sink_add(struct pack_sink *s, const struct fmt_value *values, struct feed_err *err)
{
	int rc = fmt_writer_add(s->w, values, err);

	if (rc < 0)
		return blame_output(err, rc, s->out_dir);
	for (uint32_t i = 0; i < s->nfields; i++)
		s->bytes_in += values[i].len;
	progress_tick(&s->prog, s->bytes_in, fmt_writer_count(s->w));
	return 0;
}

/* Sum of the sizes of the regular files in dir (the dataset on disk). */
static int dir_bytes(const char *dir, uint64_t *ret, struct feed_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t sum = 0;

	if (!d)
		return feed_err_set(err, -errno, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_size;
	}
	closedir(d);
	*ret = sum;
	return 0;
}

int sink_finish(struct pack_sink *s, struct feed_err *err)
{
	uint64_t n = fmt_writer_count(s->w), on_disk = 0;
	int rc = fmt_writer_finish(s->w, err);

	progress_end(&s->prog);
	if (rc < 0)
		return blame_output(err, rc, s->out_dir);
	fmt_writer_free(s->w);
	s->w = NULL;
	if ((rc = dir_bytes(s->out_dir, &on_disk, err)) < 0)
		return rc;
	double secs = progress_elapsed(&s->prog.start);
	double mb_in = (double)s->bytes_in / 1e6, mb_out = (double)on_disk / 1e6;
	printf("packed %llu samples into %s: %.1f MB in, %.1f MB on disk, ratio %.2f, "
	       "%.2f s, %.1f MB/s\n",
	       (unsigned long long)n, s->out_dir, mb_in, mb_out,
	       on_disk ? (double)s->bytes_in / (double)on_disk : 0.0, secs,
	       secs > 0 ? mb_in / secs : 0.0);
	fflush(stdout);
	return 0;
}

void sink_free(struct pack_sink *s)
{
	if (!s)
		return;
	progress_end(&s->prog);
	fmt_writer_free(s->w);
	s->w = NULL;
}
