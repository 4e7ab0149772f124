/*
 * disktier.h: the node-local disk tier: compressed blocks of remote
 * datasets (data/remote.c) kept as files under one directory (config
 * cache_dir) within a byte budget (cache_dir_bytes), so a block crosses
 * the network once per node, not once per epoch. The memory block cache
 * (cache.h) sits above it: the disk tier is asked only on a memory miss.
 *
 * Owns the directory's *.blk files and an index of them (a hash table and
 * an LRU list under one mutex). Each file holds one block's compressed
 * bytes, named by its key and its xxh64: a file is verified against that
 * hash every time it is read back, and a file that fails is deleted and
 * counted as a miss, so a torn or altered file is never served. Files are
 * written to a temporary name and renamed, never rewritten. The index is
 * rebuilt from the directory at dtier_open() (a daemon restart keeps what
 * was fetched), oldest modification time first; a hit touches the file's
 * time, so the order survives a restart too.
 *
 * Threads: any worker and the fetcher (data/fetcher.h). The lock is held
 * for table and list work only, never across open, read, write or unlink
 * (what eviction removes is gathered under the lock and unlinked after
 * it). A block's name stays in the index while a put writes it and while
 * an eviction unlinks it, so no two threads ever write and unlink one
 * name at once (a put meanwhile does nothing).
 */
#ifndef FEEDD_DISKTIER_H
#define FEEDD_DISKTIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed_err.h"

struct dtier;

struct dtier_stats {
	uint64_t hits, misses;   /* dtier_get() found a verified file, or not */
	uint64_t corrupt;        /* files that failed their hash, deleted */
	uint64_t stored, evicted; /* files written, files evicted */
	uint64_t bytes, files, budget; /* held now, and the budget */
};

/* Opens (creating, mode 0700) the directory dir, indexes the *.blk files
 * in it, removes leftover temporary files, and evicts down to budget
 * bytes. *ret is the caller's, freed with dtier_close(). Blocking (reads
 * the directory): main() at start. -errno naming dir. */
int dtier_open(const char *dir, uint64_t budget, struct dtier **ret, struct feed_err *err);

/* Frees the index; the files stay for the next start. Accepts NULL. */
void dtier_close(struct dtier *t);

/* The key of a block: a hash of where it lives (the dataset's URL, the
 * file, the offset and length). */
uint64_t dtier_key(const char *url, const char *file, uint64_t off, uint32_t len);

/* Reads the block (key, hash) of len bytes into buf. 0: present and its
 * bytes hash to `hash`; -ENOENT: absent, or its file was bad (deleted).
 * Blocking (a file read); any thread. */
int dtier_get(struct dtier *t, uint64_t key, uint64_t hash, void *buf, size_t len);

/* Whether the block (key, hash) is held (not read, not verified). */
bool dtier_has(struct dtier *t, uint64_t key, uint64_t hash);

/* Keeps len bytes that the caller has verified against hash, evicting the
 * least recently used files past the budget (a block larger than the
 * budget is not kept). 0, or -errno when the file could not be written
 * (the caller goes on without it). Blocking (a file write); any thread. */
int dtier_put(struct dtier *t, uint64_t key, uint64_t hash, const void *buf, size_t len);

/* A copy of the counters (under the lock). */
void dtier_stats(struct dtier *t, struct dtier_stats *ret);

#endif
