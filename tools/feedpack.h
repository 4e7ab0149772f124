/*
 * feedpack.h: what feedpack's command files share, private to tools/.
 *
 * feedpack.c parses the command line into a struct pack_opts and calls one
 * command (pack_cmd_*). Ingest commands read their input in chunks and feed
 * records one by one to a struct pack_sink (feedpack_sink.c), which owns the
 * fmt_writer, the progress bar and the summary line. One thread; nothing
 * here is shared.
 *
 * Errors: every function returns 0 or a negative errno and fills a
 * struct feed_err whose message starts with the file it concerns, so main()
 * prints it as "feedpack: <msg>". -PACK_EUSAGE means a command-line mistake
 * (exit 2 with a usage hint) rather than bad input (exit 1).
 */
#ifndef FEED_FEEDPACK_H
#define FEED_FEEDPACK_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "feed_err.h"
#include "fmt.h"

/* Not an errno value (those stay below 200 on Linux). */
#define PACK_EUSAGE 1000

/* Records are read in chunks of about this many bytes. */
#define PACK_CHUNK_BYTES (1u << 20)
/* Largest single record an ingest command accepts. */
#define PACK_MAX_RECORD (1ull << 30)

/* Parsed command line (feedpack.c). Strings point into argv or into the
 * buffers below, and live as long as the struct. */
struct pack_opts {
	const char *out_dir;       /* -o DIR, trailing slashes removed; NULL if absent */
	const char *name;          /* --name, else the last component of out_dir */
	uint64_t block_bytes;      /* --block-bytes, target decoded block size */
	uint32_t block_records;    /* --block-records, 0 = no cap */
	int level;                 /* --level, zstd level */
	uint64_t shard_bytes;      /* --shard-bytes, 0 = format default */
	int tok_dtype;             /* tokens --dtype; FEED_DTYPE_INVALID if absent */
	uint64_t seq_len;          /* tokens --seq-len; 0 if absent */
	uint64_t doc_sep;          /* tokens --doc-sep: the separator token */
	bool doc_sep_set;          /* --doc-sep was given */
	uint64_t vocab_size;       /* tokens --vocab-size; 0 = no check */
	bool skip_bad;             /* imagefolder --skip-bad */
	bool check;                /* imagefolder --check: decode all, write nothing */
	bool decode;               /* verify --decode: decode every image too */
	bool level_set;            /* --level was given */
	bool block_bytes_set;      /* --block-bytes was given */
	bool quiet;                /* --quiet: no progress line, even on a terminal */
	int npos;                  /* positional arguments */
	char **pos;                /* ... and their values (argv) */
	char out_buf[PATH_MAX];    /* storage for out_dir */
	char name_buf[PATH_MAX];   /* storage for the default name */
};

/* ------------------------------------------------------------------ */
/* Progress bar (feedpack_progress.c): stderr only, only on a terminal,
 * redrawn at most 10 times a second. */

struct pack_progress {
	bool on;                   /* stderr is a terminal */
	const char *what;          /* label, e.g. "packing" or "verifying" */
	const char *unit;          /* what count counts, e.g. "samples" */
	uint64_t total;            /* expected bytes (0 = unknown) */
	struct timespec start;     /* when progress_start() ran */
	struct timespec last;      /* last redraw */
	bool drawn;                /* a line is on screen and must be cleared */
};

void progress_start(struct pack_progress *p, const char *what, const char *unit,
		    uint64_t total_bytes);
/* Cheap unless a redraw is due. */
void progress_tick(struct pack_progress *p, uint64_t done_bytes, uint64_t count);
/* Clears the line, if one was drawn. */
void progress_end(struct pack_progress *p);
/* Seconds since a clock_gettime(CLOCK_MONOTONIC) reading. */
double progress_elapsed(const struct timespec *since);

/* ------------------------------------------------------------------ */
/* Decoding every image (feedpack_check.c): one thread per CPU, each with
 * its own image decoder; failures listed in sample order on stdout. */

struct chk_worker;

/* What to decode: units (files, blocks) handed to workers one at a time. */
struct chk_source {
	uint64_t units;            /* unit(arg, w, u, err) is called for u < units */
	uint64_t total_bytes;      /* for the progress bar (0 = unknown) */
	/* optional: per-worker state (w's unit_state), made on the worker */
	int (*worker_init)(void *arg, void **ret_state, struct feed_err *err);
	void (*worker_fini)(void *arg, void *state);
	/* calls chk_image() or chk_fail() for each image of unit u; an error
	 * returned (I/O, memory: not an image's fault) stops the run */
	int (*unit)(void *arg, struct chk_worker *w, uint64_t u, struct feed_err *err);
};

/* Inside unit(): decodes image `index` (named name: a path, or "sample
 * N") in full and notes it when it fails or decodes with warnings. */
void chk_image(struct chk_worker *w, uint64_t index, const char *name, const void *data,
	       size_t len);
/* Inside unit(): notes image `index` as failing with words. */
void chk_fail(struct chk_worker *w, uint64_t index, const char *name, const char *words);
/* Inside unit(): the worker's state from worker_init(). */
void *chk_state(struct chk_worker *w);

/* Runs src over every unit; prints each failing (and warning) image and a
 * summary on stdout. 0 when every image decodes; -EBADMSG naming `what`
 * and the count when some do not; another error when a unit failed. */
int chk_run(const struct chk_source *src, void *arg, const char *what, struct feed_err *err);

/* verify DIR --decode: every image of ds's first image field. */
int chk_verify_decode(const char *dir, const struct fmt_dataset *ds, struct feed_err *err);

/* ------------------------------------------------------------------ */
/* Ingest sink (feedpack_sink.c): one fmt_writer plus accounting. */

struct pack_sink {
	struct fmt_writer *w;      /* owned; NULL once finished or freed */
	const char *out_dir;       /* the final directory (opts) */
	uint32_t nfields;          /* values per record */
	uint64_t bytes_in;         /* raw record bytes added so far */
	struct pack_progress prog; /* stderr progress bar */
};

/* Checks that out_dir can be created (names the path when not), then
 * starts a writer. source is free text stored in the manifest; total_in is the expected raw byte
 * count for the progress bar. On failure nothing is left on disk. */
int sink_open(struct pack_sink *s, const struct pack_opts *o, const struct fmt_schema *schema,
	      const char *source, uint64_t total_in, struct feed_err *err);

/* sink_open() with class names for the manifest (fmt_writer_opts). */
int sink_open_classes(struct pack_sink *s, const struct pack_opts *o,
		      const struct fmt_schema *schema, const char *source, uint64_t total_in,
		      uint32_t num_classes, const char *const *classes, struct feed_err *err);

/* Adds one record (a value per schema field). */
int sink_add(struct pack_sink *s, const struct fmt_value *values, struct feed_err *err);

/* Finishes the dataset and prints the one-line summary on stdout. */
int sink_finish(struct pack_sink *s, struct feed_err *err);

/* Frees; an unfinished dataset's temporary directory is removed. */
void sink_free(struct pack_sink *s);

/* ------------------------------------------------------------------ */
/* Shared helpers (feedpack_sink.c). */

/* Reads exactly len bytes from fd (retrying short reads). Returns the
 * bytes read (< len only at end of file) or a negative errno. */
long long pack_read_full(int fd, void *buf, size_t len);

/* Opens path read-only; on failure fills err naming path. */
int pack_open_input(const char *path, int *ret_fd, struct feed_err *err);

/* Reads the whole of path into *buf (grown as needed); sets *ret_len. At
 * most PACK_MAX_RECORD bytes. Errors name path (feedpack_files.c). */
int pack_read_file(const char *path, uint8_t **buf, size_t *cap, size_t *ret_len,
		   struct feed_err *err);

/* Appends a copy of s to the string array *v of *n entries (*cap
 * allocated; the array doubles from 64 when full). -ENOMEM naming root
 * (the input directory) on failure, *v unchanged (feedpack_files.c). */
int pack_strv_push(char ***v, size_t *n, size_t *cap, const char *s, const char *root,
		   struct feed_err *err);

/* Joins a and b with a '/' into buf; an empty side is left out.
 * -ENAMETOOLONG naming both when buf is too short (feedpack_walk.c). */
int pack_path_join(char *buf, size_t cap, const char *a, const char *b, struct feed_err *err);

/* A directory walk (feedpack_walk.c): pack_walk_dir() calls visit for
 * every entry below w->root/rel that is not a directory it descends into,
 * depth first, in readdir order. follow: stat() (symlinks followed, as
 * os.walk(followlinks=True); a dangling one is visited with st NULL), else
 * lstat() (symlinks visited as links; a failed lstat is an error). Deeper
 * than max_depth: -ELOOP. Errors name the path. */
struct stat;
struct pack_walk_entry {
	const char *rel;        /* the path below the root */
	const char *name;       /* its last component */
	size_t dir_len;         /* the length of rel's directory part */
	const struct stat *st;  /* NULL: a dangling symlink (follow) */
};
struct pack_walk {
	const char *root;
	int max_depth;
	bool follow;
	int (*visit)(void *arg, const struct pack_walk_entry *e, struct feed_err *err);
	void *arg;
};
int pack_walk_dir(const struct pack_walk *w, const char *rel, int depth, struct feed_err *err);

/* True if the NUL-terminated s is valid UTF-8 (feedpack_files.c). */
bool pack_utf8_ok(const unsigned char *s);

/* Fills f (shape values must fit in u32; fixed fields get max_bytes). */
void pack_field(struct fmt_field *f, const char *name, int dtype, uint32_t rank,
		const uint64_t *shape, bool variable);

/* ------------------------------------------------------------------ */
/* Commands. Positional arguments are in o->pos. */

int pack_cmd_idx(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_npy(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_tokens(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_megatron(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_files(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_imagefolder(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_inspect(const struct pack_opts *o, struct feed_err *err);
int pack_cmd_verify(const struct pack_opts *o, struct feed_err *err);
/* wds parses its own options (feedpack_wds.c): argv[0] is "wds". */
int pack_wds_main(int argc, char **argv);

#endif
