/*
 * fuzz_cfg_load_all: a config file, through cfg_load_all() (the reload's
 * load, which goes on past an error to report them all: every stage runs)
 * and cfg_check_names() (feedd --check-config). The bytes go into a memfd
 * read back by path (/proc/self/fd/N), so the file reading runs as well.
 * Invariants: a refusal names what was wrong and is the first of the
 * errors collected; a config that loads has every value in its range,
 * valid unique names, and pipelines that parse.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "pipeline.h"

static int fuzz_fd = -1;
static char fuzz_path[64];
static FILE *fuzz_null;

static void fuzz_open(void)
{
	fuzz_fd = memfd_create("fuzz_cfg.yaml", MFD_CLOEXEC);
	FUZZ_CHECK(fuzz_fd >= 0, "memfd_create");
	snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
	fuzz_null = fopen("/dev/null", "w");
	FUZZ_CHECK(fuzz_null, "/dev/null");
}

static void fuzz_check_cfg(const struct cfg *c)
{
	FUZZ_CHECK(c->workers >= 1 && c->workers <= 256, "workers %llu",
		   (unsigned long long)c->workers);
	FUZZ_CHECK(c->socket_path && strlen(c->socket_path) <= CFG_SOCKET_PATH_MAX, "socket_path");
	FUZZ_CHECK(c->limits.max_credits >= 1 && c->limits.max_credits <= CFG_MAX_CREDITS,
		   "max_credits %llu", (unsigned long long)c->limits.max_credits);
	FUZZ_CHECK(c->ndatasets <= CFG_MAX_DATASETS && c->npipelines <= CFG_MAX_PIPELINES,
		   "%zu datasets, %zu pipelines", c->ndatasets, c->npipelines);
	for (size_t i = 0; i < c->ndatasets; i++) {
		FUZZ_CHECK(cfg_name_ok(c->datasets[i].name) && c->datasets[i].path, "dataset %zu", i);
		FUZZ_CHECK(cfg_dataset_find(c, c->datasets[i].name) == &c->datasets[i],
			   "dataset name '%s' twice", c->datasets[i].name);
	}
	for (size_t i = 0; i < c->npipelines; i++) {
		struct pipe_spec spec;
		FUZZ_CHECK(cfg_name_ok(c->pipelines[i].name), "pipeline %zu name", i);
		FUZZ_CHECK(pipe_parse(c->pipelines[i].ops, &spec, NULL) == 0,
			   "pipeline '%s' loaded but does not parse", c->pipelines[i].name);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	struct cfg_errs errs;
	struct cfg *c = NULL;

	if (fuzz_fd < 0)
		fuzz_open();
	FUZZ_CHECK(ftruncate(fuzz_fd, 0) == 0 && pwrite(fuzz_fd, data, size, 0) == (ssize_t)size,
		   "writing %zu bytes to the memfd", size);
	memset(&errs, 0, sizeof(errs));
	int rc = cfg_load_all(fuzz_path, NULL, NULL, &c, &err, &errs);
	if (rc < 0) {
		FUZZ_CHECK(!c && err.msg[0], "refused (%d) without a message", rc);
		FUZZ_CHECK(rc == -ENOMEM || (errs.n >= 1 && !strcmp(errs.msg[0], err.msg)),
			   "the refusal '%s' is not the first error collected", err.msg);
		cfg_check_names(fuzz_path, &errs, fuzz_null);
		return 0;
	}
	FUZZ_CHECK(errs.n == 0 && errs.more == 0, "loaded with %u errors", errs.n);
	fuzz_check_cfg(c);
	cfg_free(c);
	return 0;
}
