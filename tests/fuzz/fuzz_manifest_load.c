/*
 * fuzz_manifest_load: a dataset's manifest.pb, through what
 * fmt_dataset_open_store() runs on it (format/fmt_reader.c manifest_load()
 * and manifest_check(): protobuf decode, schema, shard list, counts, class
 * names), with the shard files of fuzz_dataset.h's dataset behind it, so
 * a manifest close to the real one goes on into the shard headers, footers
 * and block indexes; a dataset that opens is read block by block.
 * Invariants: a refusal names what was wrong; an opened dataset's schema
 * is valid, every sample is found in the block that holds it, and its
 * blocks read or are refused with a reason (fuzz_dataset_walk()).
 */
#include "fuzz.h"
#include "fuzz_dataset.h"

static struct fuzz_store fuzz_ds;  /* the shards; the manifest is each input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	struct fmt_dataset *ds = NULL;

	if (!fuzz_ds.shard[0])
		FUZZ_CHECK(fuzz_dataset_make(23, 5, 700, &fuzz_ds) == 0, "making the dataset");
	struct fuzz_store store = fuzz_ds;
	store.manifest = data;
	store.manifest_len = size;
	int rc = fmt_dataset_open_store("fuzz://manifest", &fuzz_store_ops, &store, &ds, &err);
	if (rc < 0) {
		FUZZ_CHECK(!ds && err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	fuzz_dataset_walk(ds);
	fmt_dataset_close(ds);
	return 0;
}
