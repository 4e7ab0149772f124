/*
 * nvjpeg_load.c: nvJPEG loaded at run time (nvjpeg_load.h).
 *
 * Owns: the search for libnvjpeg (the test double, the dynamic loader's
 * sonames, the toolkit's folder, the wheels' folders), the process's one
 * load of it, and the table of the entry points feedd calls.
 *
 * Threads: njl_get() loads once (pthread_once); the result is read-only
 * afterwards. A library found stays loaded for the life of the process.
 * Never prints: the reason goes to status.
 */
#include "nvjpeg_load.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudrv.h"

static struct njl njl_state;
static pthread_once_t njl_once = PTHREAD_ONCE_INIT;

struct njl_sym {
	const char *name;
	size_t off;
};
#define S(field, name) {name, offsetof(struct njl_api, field)}

/* Every call feedd makes. */
static const struct njl_sym njl_syms[] = {
	S(GetProperty, "nvjpegGetProperty"),
	S(CreateEx, "nvjpegCreateEx"),
	S(Destroy, "nvjpegDestroy"),
	S(JpegStateCreate, "nvjpegJpegStateCreate"),
	S(JpegStateDestroy, "nvjpegJpegStateDestroy"),
	S(GetImageInfo, "nvjpegGetImageInfo"),
	S(DecodeParamsCreate, "nvjpegDecodeParamsCreate"),
	S(DecodeParamsDestroy, "nvjpegDecodeParamsDestroy"),
	S(DecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat"),
	S(DecodeParamsSetROI, "nvjpegDecodeParamsSetROI"),
	S(DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize"),
	S(DecodeBatchedEx, "nvjpegDecodeBatchedEx"),
};
#undef S
#define NJL_NSYMS (sizeof(njl_syms) / sizeof(njl_syms[0]))

/* The sonames, newest first: CUDA 13's, then 12's. A library newer than
 * the driver's CUDA cannot run (nvjpegCreateEx fails): njl_search skips
 * those, and njl_load refuses one found otherwise, naming both versions. */
static const char *const njl_sonames[] = {"libnvjpeg.so.13", "libnvjpeg.so.12"};

/* Folders the dynamic loader may not search: the toolkit's, and where the
 * nvidia-nvjpeg wheels put the library (cu13: nvidia/cu13/lib; cu12:
 * nvidia/nvjpeg/lib). "%s" is a site-packages root. */
static const char *const njl_wheel_dirs[] = {"%s/nvidia/cu13/lib", "%s/nvidia/nvjpeg/lib"};
static const char *const njl_site_globs[] = {
	"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
	"/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
};

const char *njl_status_name(nvjpegStatus_t s)
{
	static const char *const names[] = {
		"NVJPEG_STATUS_SUCCESS (0)", "NVJPEG_STATUS_NOT_INITIALIZED (1)",
		"NVJPEG_STATUS_INVALID_PARAMETER (2)", "NVJPEG_STATUS_BAD_JPEG (3)",
		"NVJPEG_STATUS_JPEG_NOT_SUPPORTED (4)", "NVJPEG_STATUS_ALLOCATOR_FAILURE (5)",
		"NVJPEG_STATUS_EXECUTION_FAILED (6)", "NVJPEG_STATUS_ARCH_MISMATCH (7)",
		"NVJPEG_STATUS_INTERNAL_ERROR (8)", "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED (9)",
		"NVJPEG_STATUS_INCOMPLETE_BITSTREAM (10)",
	};
	if (s >= 0 && (size_t)s < sizeof(names) / sizeof(names[0]))
		return names[s];
	return "NVJPEG_STATUS_UNKNOWN";
}

bool njl_status_is_image(nvjpegStatus_t s)
{
	return s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
	       s == NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
}

/* dlopen of path; appends its error to tried (room cap) when it fails. */
static void *njl_open(const char *path, char *tried, size_t cap)
{
	/* LOCAL: its symbols stay out of the daemon's namespace */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	size_t used = strlen(tried);
	if (!lib && used + 1 < cap)
		snprintf(tried + used, cap - used, "%s%s", used ? ", " : "", path);
	return lib;
}

/* The wheels' folders under one site-packages root. */
static void *njl_open_wheel(const char *root, char *path, size_t pcap, char *tried, size_t cap)
{
	for (size_t d = 0; d < sizeof(njl_wheel_dirs) / sizeof(njl_wheel_dirs[0]); d++)
		for (size_t s = 0; s < sizeof(njl_sonames) / sizeof(njl_sonames[0]); s++) {
			char dir[200];
			snprintf(dir, sizeof(dir), njl_wheel_dirs[d], root);
			snprintf(path, pcap, "%s/%s", dir, njl_sonames[s]);
			glob_t g;
			/* only folders that exist: the reason lists what could have been */
			if (glob(dir, GLOB_NOSORT, NULL, &g) != 0)
				continue;
			globfree(&g);
			void *lib = njl_open(path, tried, cap);
			if (lib)
				return lib;
		}
	/* torchvision's wheels carry their own copy, under a hashed name */
	char pat[240];
	glob_t g;
	void *lib = NULL;
	snprintf(pat, sizeof(pat), "%s/torchvision.libs/libnvjpeg*.so*", root);
	if (glob(pat, 0, NULL, &g) != 0)
		return NULL;
	for (size_t i = 0; i < g.gl_pathc && !lib; i++) {
		snprintf(path, pcap, "%s", g.gl_pathv[i]);
		lib = njl_open(path, tried, cap);
	}
	globfree(&g);
	return lib;
}

/* Steps 2-4 of the search (nvjpeg_load.h); the path opened into path. */
static void *njl_search(char *path, size_t pcap, char *tried, size_t cap, int max_major)
{
	void *lib;
	for (size_t s = 0; s < sizeof(njl_sonames) / sizeof(njl_sonames[0]); s++) {
		if (max_major && atoi(njl_sonames[s] + strlen("libnvjpeg.so.")) > max_major)
			continue;
		snprintf(path, pcap, "%s", njl_sonames[s]);
		if ((lib = njl_open(path, tried, cap)))
			return lib;
		snprintf(path, pcap, "/usr/local/cuda/lib64/%s", njl_sonames[s]);
		if ((lib = njl_open(path, tried, cap)))
			return lib;
	}
	const char *venv = getenv("VIRTUAL_ENV");
	if (venv && *venv) {
		char pat[200];
		snprintf(pat, sizeof(pat), "%s/lib/python3*/site-packages", venv);
		glob_t g;
		if (glob(pat, 0, NULL, &g) == 0) {
			for (size_t i = 0; i < g.gl_pathc; i++)
				if ((lib = njl_open_wheel(g.gl_pathv[i], path, pcap, tried, cap))) {
					globfree(&g);
					return lib;
				}
			globfree(&g);
		}
	}
	for (size_t p = 0; p < sizeof(njl_site_globs) / sizeof(njl_site_globs[0]); p++) {
		glob_t g;
		if (glob(njl_site_globs[p], 0, NULL, &g) != 0)
			continue;
		for (size_t i = 0; i < g.gl_pathc; i++)
			if ((lib = njl_open_wheel(g.gl_pathv[i], path, pcap, tried, cap))) {
				globfree(&g);
				return lib;
			}
		globfree(&g);
	}
	return NULL;
}

/* Resolves every entry point into a; the name of the first one missing
 * (then a is untouched), or NULL. */
static const char *njl_resolve(void *lib, struct njl_api *a)
{
	void *p[NJL_NSYMS];
	for (size_t i = 0; i < NJL_NSYMS; i++)
		if (!(p[i] = dlsym(lib, njl_syms[i].name)))
			return njl_syms[i].name;
	/* POSIX: a data pointer from dlsym converts to a function pointer */
	for (size_t i = 0; i < NJL_NSYMS; i++)
		memcpy((char *)a + njl_syms[i].off, &p[i], sizeof(p[i]));
	return NULL;
}

int njl_load(struct njl *ret)
{
	char tried[200] = "";
	const char *forced = getenv("FEED_NVJPEG_LIBRARY");
	int drv = cudrv_get()->info.driver_version;   /* 0: no driver (nothing to match) */
	void *lib;

	memset(ret, 0, sizeof(*ret));
	if (forced && *forced) {
		snprintf(ret->path, sizeof(ret->path), "%s", forced);
		lib = njl_open(forced, tried, sizeof(tried));
	} else {
		lib = njl_search(ret->path, sizeof(ret->path), tried, sizeof(tried), drv / 1000);
	}
	if (!lib) {
		const char *why = dlerror();
		snprintf(ret->reason, sizeof(ret->reason),
			 "nvJPEG not found (tried %s; install the CUDA toolkit's libnvjpeg or the "
			 "nvidia-nvjpeg wheel): %s",
			 tried, why ? why : "dlopen failed");
		ret->path[0] = '\0';
		return -ENOENT;
	}
	const char *missing = njl_resolve(lib, &ret->api);
	if (missing) {
		snprintf(ret->reason, sizeof(ret->reason), "%s has no %s (nvJPEG older than 11.6?)",
			 ret->path, missing);
		return -ENOSYS;
	}
	int v[3] = {0, 0, 0};
	for (int i = 0; i < 3; i++) {
		nvjpegStatus_t s = ret->api.GetProperty(NJL_MAJOR_VERSION + i, &v[i]);
		if (s != NVJPEG_STATUS_SUCCESS) {
			memset(&ret->api, 0, sizeof(ret->api));
			snprintf(ret->reason, sizeof(ret->reason),
				 "%s: nvjpegGetProperty failed: %s", ret->path, njl_status_name(s));
			return -ENOSYS;
		}
	}
	ret->version = v[0] * 1000 + v[1] * 10 + v[2];
	if (drv && v[0] > drv / 1000) {
		memset(&ret->api, 0, sizeof(ret->api));
		snprintf(ret->reason, sizeof(ret->reason),
			 "%.160s is nvJPEG %d.%d, which needs a CUDA %d driver; this driver runs "
			 "CUDA %d.%d (FEED_NVJPEG_LIBRARY may name a libnvjpeg.so.%d)", ret->path, v[0],
			 v[1], v[0], drv / 1000, drv % 1000 / 10, drv / 1000);
		return -ENOTSUP;
	}
	ret->usable = true;
	return 0;
}

static void njl_load_once(void)
{
	(void)njl_load(&njl_state);
}

const struct njl *njl_get(void)
{
	pthread_once(&njl_once, njl_load_once);
	return &njl_state;
}
