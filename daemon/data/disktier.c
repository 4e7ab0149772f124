/*
 * disktier.c: the disk tier (see disktier.h): one file per block,
 * "<key>-<xxh64>.blk", indexed in the tiers' table and recency list
 * (lru.h) under one mutex. Worker threads and the fetcher (and main() at
 * start); never the loop thread.
 *
 * A name is touched by one thread at a time: an entry is in the table
 * from the moment a put claims its name (writing) until its file is
 * unlinked (dying), not only while it is readable. A put finds a name
 * being written or unlinked taken and does nothing, so an eviction can
 * never unlink a file that a put of the same block has just renamed into
 * place (it did, when the entry left the table before its unlink).
 */
#include "disktier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed_lock.h"
#include "fmt.h"
#include "lru.h"

#define DT_NAME_MAX 64     /* "<16 hex>-<16 hex>.blk" and temporaries */
#define DT_EVICT_MAX 64    /* files unlinked per put, at most */

enum dt_state {
	DT_READY,                     /* on disk, readable, in the LRU */
	DT_WRITING,                   /* a put is writing it: not readable yet */
	DT_DYING,                     /* evicted or bad: being unlinked */
};

struct dt_file {
	struct lru_node node;         /* key: (key, hash); listed while ready */
	uint64_t key, hash;           /* the file's name */
	uint64_t size;                /* bytes */
	enum dt_state state;
	uint64_t seq;                 /* which entry of this name: a later put's differs */
};

struct dtier {
	pthread_mutex_t mu;           /* guards everything below */
	char *dir;
	int dfd;                      /* the directory, for openat/unlinkat */
	struct lru lru;               /* the names; bytes: ready and being written */
	struct dtier_stats st;        /* but bytes and budget: lru's */
	uint64_t tmp_seq;             /* temporary names */
	uint64_t entry_seq;           /* the last dt_file.seq given */
};

static void dt_name(char *buf, uint64_t key, uint64_t hash)
{
	snprintf(buf, DT_NAME_MAX, "%016" PRIx64 "-%016" PRIx64 ".blk", key, hash);
}

static struct dt_file *dt_of(struct lru_node *n)
{
	return n ? LRU_ENTRY(n, struct dt_file, node) : NULL;
}

static struct dt_file *dt_lookup(struct dtier *t, uint64_t key, uint64_t hash)
{
	return dt_of(lru_find(&t->lru, key, hash));
}

/* Adds f (a new name, in f->state) to the table; its bytes count from
 * now on. Under mu. */
static void dt_insert(struct dtier *t, struct dt_file *f)
{
	f->seq = ++t->entry_seq;
	f->node.key[0] = f->key;
	f->node.key[1] = f->hash;
	lru_insert(&t->lru, &f->node);
	lru_charge(&t->lru, &f->node, f->size);
	if (f->state == DT_READY)
		lru_touch(&t->lru, &f->node);
	t->st.files++;
}

/* Takes f out of the table (the caller frees it). Under mu. */
static void dt_forget(struct dtier *t, struct dt_file *f)
{
	lru_remove(&t->lru, &f->node);
}

/* f, ready, is to be unlinked: out of the LRU and the counts, its name
 * kept in the table until dt_unlink_files() is done with it. Under mu. */
static void dt_retire(struct dtier *t, struct dt_file *f)
{
	lru_unlist(&f->node);
	lru_discharge(&t->lru, &f->node);
	f->state = DT_DYING;
	t->st.files--;
}

/* Retires the oldest files until within budget, at most max of them,
 * into out[] (the caller unlinks them outside mu). Under mu. */
static size_t dt_evict(struct dtier *t, struct dt_file **out, size_t max)
{
	struct dt_file *f;
	size_t n = 0;

	while (n < max && (f = dt_of(lru_evict(&t->lru)))) {
		dt_retire(t, f);  /* already off the list and discharged */
		t->st.evicted++;
		out[n++] = f;
	}
	return n;
}

/* Unlinks retired files (no lock held), then lets their names go. */
static void dt_unlink_files(struct dtier *t, struct dt_file **f, size_t n)
{
	char name[DT_NAME_MAX];

	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		dt_name(name, f[i]->key, f[i]->hash);
		unlinkat(t->dfd, name, 0);
	}
	feed_mutex_lock(&t->mu);
	for (size_t i = 0; i < n; i++)
		dt_forget(t, f[i]);
	feed_mutex_unlock(&t->mu);
	for (size_t i = 0; i < n; i++)
		free(f[i]);
}

/* One directory entry found at start, with its time for the LRU order. */
struct dt_found {
	struct dt_file *f;
	struct timespec mtime;
};

static int dt_found_cmp(const void *a, const void *b)
{
	const struct timespec *x = &((const struct dt_found *)a)->mtime;
	const struct timespec *y = &((const struct dt_found *)b)->mtime;

	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Whether name is "<16 hex>-<16 hex>.blk"; fills key and hash. */
static bool dt_parse(const char *name, uint64_t *key, uint64_t *hash)
{
	char tail[8];

	if (strlen(name) != 37 || sscanf(name, "%16" SCNx64 "-%16" SCNx64 "%7s", key, hash, tail) != 3)
		return false;
	return !strcmp(tail, ".blk") && name[16] == '-';
}

/* Indexes the directory's files, oldest first; removes temporaries. */
static int dt_scan(struct dtier *t, struct feed_err *err)
{
	int fd = dup(t->dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dt_found *found = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return feed_err_set(err, -errno, "cache_dir %s: %s", t->dir, strerror(errno));
	}
	while ((de = readdir(d))) {
		uint64_t key, hash;
		struct stat st;
		if (!strncmp(de->d_name, ".tmp-", 5)) {  /* a write cut short */
			unlinkat(t->dfd, de->d_name, 0);
			continue;
		}
		if (!dt_parse(de->d_name, &key, &hash) ||
		    fstatat(t->dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;  /* not ours: left alone */
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 256;
			struct dt_found *g = realloc(found, nc * sizeof(*g));
			if (!g)
				goto nomem;
			found = g;
			cap = nc;
		}
		struct dt_file *f = calloc(1, sizeof(*f));
		if (!f)
			goto nomem;
		*f = (struct dt_file){.key = key, .hash = hash, .size = (uint64_t)st.st_size};
		found[n++] = (struct dt_found){.f = f, .mtime = st.st_mtim};
	}
	closedir(d);
	if (n)  /* found is NULL when the directory held no block */
		qsort(found, n, sizeof(*found), dt_found_cmp);
	for (size_t i = 0; i < n; i++)
		dt_insert(t, found[i].f);
	free(found);
	return 0;
nomem:
	closedir(d);
	for (size_t i = 0; i < n; i++)
		free(found[i].f);
	free(found);
	return feed_err_set(err, -ENOMEM, "cache_dir %s: out of memory for its index", t->dir);
}

int dtier_open(const char *dir, uint64_t budget, struct dtier **ret, struct feed_err *err)
{
	struct dtier *t = calloc(1, sizeof(*t));
	int rc;

	if (!t || !(t->dir = strdup(dir)) || lru_init(&t->lru, budget) < 0) {
		if (t)
			free(t->dir);
		free(t);
		return feed_err_set(err, -ENOMEM, "cache_dir %s: out of memory", dir);
	}
	t->dfd = -1;
	pthread_mutex_init(&t->mu, NULL);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = feed_err_set(err, -errno, "cache_dir %s: %s", dir, strerror(errno));
		goto fail;
	}
	t->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dfd < 0) {
		rc = feed_err_set(err, -errno, "cache_dir %s: %s", dir, strerror(errno));
		goto fail;
	}
	if ((rc = dt_scan(t, err)) < 0)
		goto fail;
	for (;;) {  /* a smaller budget than last time */
		struct dt_file *gone[DT_EVICT_MAX];
		feed_mutex_lock(&t->mu);
		size_t k = dt_evict(t, gone, DT_EVICT_MAX);
		feed_mutex_unlock(&t->mu);
		if (!k)
			break;
		dt_unlink_files(t, gone, k);
	}
	*ret = t;
	return 0;
fail:
	dtier_close(t);
	return rc;
}

void dtier_close(struct dtier *t)
{
	struct lru_node *n;

	if (!t)
		return;
	while ((n = lru_pop(&t->lru)))  /* no put or get runs */
		free(dt_of(n));
	if (t->dfd >= 0)
		close(t->dfd);
	pthread_mutex_destroy(&t->mu);
	lru_fini(&t->lru);
	free(t->dir);
	free(t);
}

uint64_t dtier_key(const char *url, const char *file, uint64_t off, uint32_t len)
{
	char buf[4096 + 128];
	int n = snprintf(buf, sizeof(buf), "%s/%s@%" PRIu64 "+%" PRIu32, url, file, off, len);

	return fmt_hash(buf, n < (int)sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* Reads exactly len bytes of the file name; false on any shortfall. */
static bool dt_read_file(struct dtier *t, const char *name, void *buf, size_t len)
{
	int fd = openat(t->dfd, name, O_RDONLY | O_CLOEXEC);
	uint8_t *p = buf;
	size_t got = 0;
	struct stat st;

	if (fd < 0)
		return false;
	bool ok = fstat(fd, &st) == 0 && (uint64_t)st.st_size == len;
	while (ok && got < len) {
		ssize_t n = pread(fd, p + got, len - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ok = false;
		else
			got += (size_t)n;
	}
	if (ok)
		futimens(fd, NULL);  /* recently used, across a restart too */
	close(fd);
	return ok;
}

int dtier_get(struct dtier *t, uint64_t key, uint64_t hash, void *buf, size_t len)
{
	char name[DT_NAME_MAX];
	struct dt_file *f;
	uint64_t seq = 0;

	feed_mutex_lock(&t->mu);
	f = dt_lookup(t, key, hash);
	if (f && f->state == DT_READY) {  /* most recently used from now on */
		lru_touch(&t->lru, &f->node);
		seq = f->seq;
	} else {
		f = NULL;  /* absent, or being written or unlinked */
		t->st.misses++;
	}
	feed_mutex_unlock(&t->mu);
	if (!f)
		return -ENOENT;
	dt_name(name, key, hash);
	bool ok = dt_read_file(t, name, buf, len) && fmt_hash(buf, len) == hash;
	feed_mutex_lock(&t->mu);
	if (ok) {
		t->st.hits++;
	} else {
		t->st.misses++;
		/* may have been evicted meanwhile, and put again since: only the
		 * entry that was read is bad, never a later put's fresh file */
		f = dt_lookup(t, key, hash);
		if (f && f->state == DT_READY && f->seq == seq) {
			t->st.corrupt++;
			dt_retire(t, f);
		} else {
			f = NULL;
		}
	}
	feed_mutex_unlock(&t->mu);
	if (ok)
		return 0;
	if (f)  /* bad bytes on disk: gone, fetched again */
		dt_unlink_files(t, &f, 1);
	return -ENOENT;
}

bool dtier_has(struct dtier *t, uint64_t key, uint64_t hash)
{
	feed_mutex_lock(&t->mu);
	struct dt_file *f = dt_lookup(t, key, hash);
	bool have = f && f->state != DT_DYING;  /* ready, or being written */
	feed_mutex_unlock(&t->mu);
	return have;
}

/* Writes buf to a temporary file and renames it to name. */
static int dt_write_file(struct dtier *t, const char *name, const void *buf, size_t len)
{
	char tmp[DT_NAME_MAX];
	const uint8_t *p = buf;
	size_t done = 0;

	feed_mutex_lock(&t->mu);
	snprintf(tmp, sizeof(tmp), ".tmp-%d-%" PRIu64, (int)getpid(), t->tmp_seq++);
	feed_mutex_unlock(&t->mu);
	int fd = openat(t->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int rc = n < 0 ? -errno : -EIO;
			close(fd);
			unlinkat(t->dfd, tmp, 0);
			return rc;
		}
		done += (size_t)n;
	}
	/* no fsync: a cache; a file torn by a crash fails its hash and goes */
	if (close(fd) < 0 || renameat(t->dfd, tmp, t->dfd, name) < 0) {
		int rc = -errno;
		unlinkat(t->dfd, tmp, 0);
		return rc;
	}
	return 0;
}

int dtier_put(struct dtier *t, uint64_t key, uint64_t hash, const void *buf, size_t len)
{
	char name[DT_NAME_MAX];
	struct dt_file *gone[DT_EVICT_MAX];
	struct dt_file *f;
	bool have;

	if (len > t->lru.budget)
		return 0;  /* budget is fixed at open: read without the lock */
	if (!(f = calloc(1, sizeof(*f))))
		return -ENOMEM;
	*f = (struct dt_file){.key = key, .hash = hash, .size = len, .state = DT_WRITING};
	feed_mutex_lock(&t->mu);
	have = dt_lookup(t, key, hash) != NULL;
	if (!have)
		dt_insert(t, f);  /* the name is this put's until it is ready */
	feed_mutex_unlock(&t->mu);
	if (have) {  /* kept, being kept, or being unlinked: not ours to touch */
		free(f);
		return 0;
	}
	dt_name(name, key, hash);
	int rc = dt_write_file(t, name, buf, len);
	feed_mutex_lock(&t->mu);
	size_t k = 0;
	if (rc < 0) {
		dt_forget(t, f);
		t->st.files--;
	} else {
		f->state = DT_READY;
		lru_touch(&t->lru, &f->node);
		t->st.stored++;
		k = dt_evict(t, gone, DT_EVICT_MAX);
	}
	feed_mutex_unlock(&t->mu);
	if (rc < 0)
		free(f);
	dt_unlink_files(t, gone, k);
	return rc;
}

void dtier_stats(struct dtier *t, struct dtier_stats *ret)
{
	feed_mutex_lock(&t->mu);
	*ret = t->st;
	ret->bytes = t->lru.bytes;
	ret->budget = t->lru.budget;
	feed_mutex_unlock(&t->mu);
}
