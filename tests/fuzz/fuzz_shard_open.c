/*
 * fuzz_shard_open: a shard file, through what fmt_dataset_open_store()
 * runs on it (format/fmt_reader.c shard_open_store(), shard_check(),
 * shard_index_load(): header, footer, block index), then fmt_block_read()
 * of its blocks (checksum, zstd, record sections and offset tables). The
 * manifest is fuzz_dataset.h's, cut to one shard whose size, counts and
 * largest block agree with the input's own header, so inputs are judged
 * by the shard's checks, not refused at the manifest. The checksums
 * (header, footer, index, blocks) are made to match the bytes unless the
 * first byte has bit 0 set, so mutations reach the checks behind them;
 * the first byte is not part of the shard.
 * Invariants: as fuzz_manifest_load.
 */
#include <xxhash.h>

#include "feed.pb-c.h"
#include "fmt_layout.h"
#include "fuzz.h"
#include "fuzz_dataset.h"

#define FUZZ_RAW_MAX (64u << 10) /* max_block_raw the manifest gives (blocks: 4 KiB) */

static Feed__Manifest *fuzz_man;  /* the dataset's manifest, unpacked once */

/* Rewrites the block hashes, index hash and the header's and footer's
 * checksums of shard p (len bytes) to match what it holds. */
static void fuzz_fix_sums(uint8_t *p, size_t len)
{
	uint8_t *t = p + len - FMT_TRAILER_SIZE;
	uint64_t idx = fmt_get64(t), nb = fmt_get64(t + 8);

	fmt_put64(p + 56, XXH64(p, 56, 0));
	if (idx <= len - FMT_TRAILER_SIZE && nb <= (len - FMT_TRAILER_SIZE - idx) / FMT_INDEX_ENTRY_SIZE) {
		for (uint64_t b = 0; b < nb; b++) {
			uint8_t *e = p + idx + b * FMT_INDEX_ENTRY_SIZE;
			uint64_t off = fmt_get64(e), n = fmt_get32(e + 20);
			if (off <= len && n <= len - off)
				fmt_put64(e + 32, XXH64(p + off, n, 0));
		}
		fmt_put64(t + 24, XXH64(p + idx, nb * FMT_INDEX_ENTRY_SIZE, 0));
	}
	fmt_put64(t + 48, XXH64(t, 48, 0));
}

/* The manifest for shard p (len bytes): fuzz_man's first shard, with the
 * counts its header claims. Packed into a malloc'd buffer. */
static uint8_t *fuzz_manifest(const uint8_t *p, size_t len, size_t *ret_len)
{
	Feed__Manifest m = *fuzz_man;
	Feed__ShardInfo s = *fuzz_man->shards[0], *sp = &s;

	s.size = len;
	s.first_sample = 0;
	s.num_samples = fmt_get64(p + 24);
	s.num_blocks = fmt_get64(p + 32);
	m.n_shards = 1;
	m.shards = &sp;
	m.num_samples = s.num_samples;
	m.max_block_comp = len;
	m.max_block_raw = FUZZ_RAW_MAX;
	size_t n = feed__manifest__get_packed_size(&m);
	uint8_t *buf = malloc(n + 1);
	FUZZ_CHECK(buf, "malloc");
	feed__manifest__pack(&m, buf);
	*ret_len = n;
	return buf;
}

static void fuzz_init(void)
{
	struct fuzz_store ds;

	FUZZ_CHECK(fuzz_dataset_make(23, 5, 0, &ds) == 0, "making the dataset");
	fuzz_man = feed__manifest__unpack(NULL, ds.manifest_len, ds.manifest);
	FUZZ_CHECK(fuzz_man && fuzz_man->n_shards >= 1, "the dataset's manifest");
	fuzz_dataset_free(&ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_store store = {.shard_name = {"shard-00000.fsh"}};
	struct feed_err err = {0};
	struct fmt_dataset *ds = NULL;

	if (!fuzz_man)
		fuzz_init();
	if (size < 1 + FMT_HEADER_SIZE + FMT_TRAILER_SIZE)
		return 0;
	uint8_t *shard = malloc(size - 1);
	FUZZ_CHECK(shard, "malloc");
	memcpy(shard, data + 1, size - 1);
	if (!(data[0] & 1))
		fuzz_fix_sums(shard, size - 1);
	store.shard[0] = shard;
	store.shard_len[0] = size - 1;
	store.manifest = fuzz_manifest(shard, size - 1, &store.manifest_len);
	int rc = fmt_dataset_open_store("fuzz://shard", &fuzz_store_ops, &store, &ds, &err);
	if (rc < 0) {
		FUZZ_CHECK(!ds && err.msg[0], "refused (%d) without a message", rc);
	} else {
		fuzz_dataset_walk(ds);
		fmt_dataset_close(ds);
	}
	free((void *)store.manifest);
	free(shard);
	return 0;
}
