/*
 * fuzz_seeds: writes the seed corpora of the targets that take our own
 * formats, made with the real encoders so every seed is a valid input the
 * fuzzer mutates from: control requests (protobuf-c), resume tokens as
 * libfeedclient writes them, manifests and shards from format/'s writer
 * (fuzz_dataset.h), and pipeline texts (one per op, from pipe_op_usage(),
 * and a few whole pipelines). tests/fuzz/run adds the configs and images.
 *
 * Usage: fuzz_seeds DIR: writes DIR/<target>/seed-NN for each target.
 * Exits non-zero naming what it could not write.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "feed.pb-c.h"
#include "feed_shm.h"
#include "fuzz_dataset.h"
#include "feed_text.h"
#include "pipeline.h"

static const char *seeds_dir;

/* Writes len bytes as the next seed of target. */
static void seed_write(const char *target, const void *data, size_t len)
{
	static unsigned n;
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", seeds_dir, target);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/seed-%03u", seeds_dir, target, n++);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void seed_request(const Feed__Request *r)
{
	size_t n = feed__request__get_packed_size(r);
	uint8_t *buf = malloc(n + 1);

	feed__request__pack(r, buf);
	seed_write("fuzz_wire_request_decode", buf, n);
	free(buf);
}

/* A token as client_stream.c st_token() writes one; packed into buf. */
static size_t seed_token(Feed__Order order, uint64_t epoch, uint64_t pos, uint32_t nlv,
			 uint8_t *buf)
{
	static uint32_t lv_nodes[] = {2, 4, 1};
	static uint64_t lv_pos[] = {64, 128, 300};
	Feed__ResumeToken t = FEED__RESUME_TOKEN__INIT;

	t.magic = FEED_RESUME_MAGIC;
	t.dataset_version = "00c0ffee00c0ffee";
	t.pipeline_hash = 0x1234567890abcdefull;
	t.seed = 42;
	t.batch = 8;
	t.world = 4;
	t.epoch = epoch;
	t.position = pos;
	t.order = order;
	t.window = order == FEED__ORDER__ORDER_BLOCK_WINDOW ? 4 : 0;
	if (order == FEED__ORDER__ORDER_NODE) {
		t.nodes = 2;
		t.n_level_nodes = t.n_level_positions = nlv;
		t.level_nodes = lv_nodes;
		t.level_positions = lv_pos;
	}
	size_t n = feed__resume_token__get_packed_size(&t);
	feed__resume_token__pack(&t, buf);
	return n;
}

static void seeds_resume(void)
{
	static const Feed__Order orders[] = {
		FEED__ORDER__ORDER_SEQUENTIAL, FEED__ORDER__ORDER_FULL,
		FEED__ORDER__ORDER_BLOCK_WINDOW, FEED__ORDER__ORDER_NODE};
	uint8_t buf[512];

	for (int i = 0; i < 4; i++) {
		seed_write("fuzz_wire_resume_decode", buf, seed_token(orders[i], 1, 96, 0, buf));
		seed_write("fuzz_wire_resume_decode", buf, seed_token(orders[i], 0, 0, 0, buf));
	}
	seed_write("fuzz_wire_resume_decode", buf,
		   seed_token(FEED__ORDER__ORDER_NODE, 3, 40, 2, buf));
}

static void seeds_requests(void)
{
	Feed__Request r = FEED__REQUEST__INIT;
	Feed__Hello h = FEED__HELLO__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;
	Feed__DeviceRequest dev = FEED__DEVICE_REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;
	Feed__CloseStream c = FEED__CLOSE_STREAM__INIT;
	Feed__ListDatasets l = FEED__LIST_DATASETS__INIT;
	Feed__StatsQuery st = FEED__STATS_QUERY__INIT;
	Feed__Reload rl = FEED__RELOAD__INIT;
	Feed__ListOps lo = FEED__LIST_OPS__INIT;
	static uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	static float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
	uint8_t tok[512];

	r.id = 1;
	h.client_name = feed_pb_text("fuzz");
	h.min_version = h.max_version = 1;
	r.body_case = FEED__REQUEST__BODY_HELLO, r.hello = &h;
	seed_request(&r);
	r.body_case = FEED__REQUEST__BODY_LIST_DATASETS, r.list_datasets = &l;
	seed_request(&r);
	r.body_case = FEED__REQUEST__BODY_STATS, r.stats = &st;
	seed_request(&r);
	r.body_case = FEED__REQUEST__BODY_RELOAD, r.reload = &rl;
	seed_request(&r);
	r.body_case = FEED__REQUEST__BODY_LIST_OPS, r.list_ops = &lo;
	seed_request(&r);
	q.name = feed_pb_text("mnist"), q.sample = 3, q.want_path = true;
	r.body_case = FEED__REQUEST__BODY_DATASET_INFO, r.dataset_info = &q;
	seed_request(&r);
	c.stream = 2;
	r.body_case = FEED__REQUEST__BODY_CLOSE_STREAM, r.close_stream = &c;
	seed_request(&r);
	o.dataset = feed_pb_text("mnist"), o.batch = 64, o.credits = 4, o.epochs = 2, o.seed = 7;
	o.order = FEED__ORDER__ORDER_BLOCK_WINDOW, o.window = 8, o.world = 2, o.rank = 1;
	o.pipeline = feed_pb_text("random_crop(size=28, pad=2) | hflip(p=0.5)");
	o.job = feed_pb_text("job-1");
	r.body_case = FEED__REQUEST__BODY_OPEN_STREAM, r.open_stream = &o;
	seed_request(&r);
	o.group = feed_pb_text("g1"), o.group_depth = 8, o.on_error = 1, o.max_bad = 3;
	o.resume.data = tok;
	o.resume.len = seed_token(FEED__ORDER__ORDER_BLOCK_WINDOW, 1, 64, 0, tok);
	seed_request(&r);
	dev.uuid.data = uuid, dev.uuid.len = 16, dev.dtype = 2, dev.pid = 1234;
	dev.n_mean = dev.n_std = 3, dev.mean = mean, dev.std = std;
	o.device = &dev;
	o.order = FEED__ORDER__ORDER_NODE, o.nodes = 2, o.node = 1, o.world = 4, o.rank = 2;
	seed_request(&r);
}

static void seeds_dataset(const char *manifest_target, uint32_t per_block, uint64_t shard_bytes)
{
	struct fuzz_store s;

	if (fuzz_dataset_make(23, per_block, shard_bytes, &s) < 0) {
		fprintf(stderr, "fuzz_seeds: could not make the dataset\n");
		exit(1);
	}
	if (manifest_target)
		seed_write(manifest_target, s.manifest, s.manifest_len);
	uint8_t *shard = malloc(s.shard_len[0] + 1);
	shard[0] = 0;  /* fuzz_shard_open's control byte: fix the checksums */
	memcpy(shard + 1, s.shard[0], s.shard_len[0]);
	seed_write("fuzz_shard_open", shard, s.shard_len[0] + 1);
	free(shard);
	fuzz_dataset_free(&s);
}

/* One seed per op (its usage line without the bare `field` key), and a
 * few pipelines of several ops. */
static void seeds_pipelines(void)
{
	static const char *const whole[] = {
		"",
		"random_crop(size=24, pad=2) | hflip(p=0.5)",
		("decode(channels=3) | random_resized_crop(size=64) | hflip | "
		 "normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype=bf16)"),
		"decode(channels=1) | resize(short=32) | center_crop(size=24)",
		"random_window(len=16, field=tokens)",
		"resize(h=14, w=10) | adjust_brightness(factor=1.5) | rotate(angle=30)",
		"trivial_augment_wide | random_erasing(p=0.5)",
	};
	char line[512];

	for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++)
		seed_write("fuzz_pipe_parse", whole[i], strlen(whole[i]));
	for (uint32_t k = 0; pipe_op_usage(k, line, sizeof(line)) >= 0; k++) {
		char *f;
		if ((f = strstr(line, ", field)")))
			memmove(f, f + 7, strlen(f + 7) + 1);
		else if ((f = strstr(line, "(field)")))
			*f = '\0';
		seed_write("fuzz_pipe_parse", line, strlen(line));
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_seeds DIR\n");
		return 2;
	}
	seeds_dir = argv[1];
	if (mkdir(seeds_dir, 0755) < 0 && errno != EEXIST) {
		perror(seeds_dir);
		return 1;
	}
	seeds_requests();
	seeds_resume();
	seeds_dataset("fuzz_manifest_load", 5, 700);  /* fuzz_manifest_load's own */
	seeds_dataset("fuzz_manifest_load", 1, 0);
	seeds_dataset(NULL, 0, 0);
	seeds_pipelines();
	return 0;
}
