/*
 * config.h: feedd's configuration, parsed once into an immutable struct cfg.
 *
 * Owns: the YAML schema (libcyaml tables in config_schema.c, one row per key),
 * defaults, range checks, command-line overrides, and the file:line: key
 * messages for every refusal. Runs in main() before the loop and the
 * workers start, and on a worker at each reload (policy/reload.c); the
 * result never changes once loaded and is reference-counted: the config in
 * force holds one reference, and each served dataset (data/catalog.h) one
 * on the config its entry points into, so a reload can replace the config
 * while streams on a dataset it removed still read their entry. Never logs
 * and never exits: errors go back in a struct feed_err (cfg_load_all():
 * every error of a file, for a reload).
 *
 * Precedence, highest first: command-line flags, the config file, the
 * FEEDD_SOCKET environment variable (socket only), built-in defaults.
 */
#ifndef FEEDD_CONFIG_H
#define FEEDD_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The most credits a stream can have (its fixed slot tables hold this many). */
#define CFG_MAX_CREDITS FEED_SHM_MAX_SLOTS

#include "access.h"
#include "feed_err.h"
#include "feed_shm.h"
#include "log.h"

#define CFG_DEFAULT_SOCKET "/run/feedd/feedd.sock"
#define CFG_NAME_MAX 64          /* dataset and pipeline names: 1..63 bytes */
#define CFG_SOCKET_PATH_MAX 107  /* sun_path minus its NUL */
#define CFG_FILE_MAX (1u << 20)  /* a config file larger than this is refused */
#define CFG_MAX_DATASETS 256
#define CFG_MAX_PIPELINES 256
#define CFG_MAX_MIXTURES 256
#define CFG_MAX_MIXTURE_SOURCES 8  /* delivery/mixture.h MIXT_MAX_SOURCES */
#define CFG_MAX_FLAG_DATASETS 64 /* --dataset flags per command line */
#define CFG_MAX_SHARED_GROUPS 64 /* shared_groups per dataset */

/* Per-user limits; each user gets these. */
struct cfg_limits {
	uint64_t max_connections;  /* open connections */
	uint64_t max_streams;      /* open streams (enforced from the delivery issue on) */
	uint64_t max_credits;      /* credits per stream (idem), 1..CFG_MAX_CREDITS */
	uint64_t max_slot_bytes;   /* bytes of slots over all streams (idem) */
	uint64_t max_device_bytes; /* GPU memory of device slots over all streams
				    * (CUDA IPC); past it a stream gets host slots */
	uint64_t max_pixels;       /* width * height of the largest image a worker
				    * decodes; larger ones fail their stream
				    * (decompression bombs) */
};

struct cfg_dataset {
	char name[CFG_NAME_MAX];   /* [A-Za-z0-9_.-]+, unique */
	char *path;                /* dataset directory (config-relative paths made
				    * relative to the config file's directory), or
				    * an http://, https:// or s3:// URL, as given */
	struct acl_list acl;       /* allow_users and allow_groups, resolved */
	/* shared_groups: group names on this dataset that every user allowed
	 * to read it may join, whoever made the group (other groups belong to
	 * their user: the same name from two users is two groups) */
	char (*shared_groups)[CFG_NAME_MAX];
	size_t nshared_groups;
	bool shared_any;           /* shared_groups holds "*": every group name */
};

struct cfg_pipeline {
	char name[CFG_NAME_MAX];   /* unique */
	char *ops;                 /* pipeline text; parses (pipe_parse()), not yet
				    * planned against any dataset */
};

/* A named mixture (`mixtures:`; OpenStream.dataset may name it). */
struct cfg_mixture_source {
	char dataset[CFG_NAME_MAX]; /* a dataset of the file (checked at load) */
	double weight;             /* >= 0, finite */
	double repeat;             /* Mosaic's repeat: 0 means 1 */
	uint64_t choose;           /* Mosaic's choose: 0 means none */
};

struct cfg_mixture {
	char name[CFG_NAME_MAX];   /* unique among datasets and mixtures */
	uint64_t samples_per_epoch; /* 0: the sum of its sources' epochs */
	size_t nsources;           /* 1 .. CFG_MAX_MIXTURE_SOURCES */
	struct cfg_mixture_source *sources;
};

struct cfg {
	_Atomic unsigned refs;     /* cfg_ref()/cfg_free(); the last frees, on any thread */
	char *file;                /* the file loaded, NULL for built-in defaults */
	char *socket_path;         /* at most CFG_SOCKET_PATH_MAX bytes */
	bool has_socket_group;     /* socket_group given */
	gid_t socket_gid;          /* group owning the socket and its directory */
	bool has_admin_group;      /* admin_group given */
	gid_t admin_gid;           /* its members may reload (root always may) */
	uint64_t workers;          /* worker threads, 1..256 */
	uint64_t cache_bytes;      /* block cache budget */
	char *cache_dir;           /* the disk tier of remote datasets' blocks, or NULL:
				    * none (config-relative made absolute as paths) */
	uint64_t cache_dir_bytes;  /* its budget */
	uint64_t remote_timeout_ms; /* one HTTP request of a remote dataset */
	uint64_t remote_retries;   /* tries after the first, with backoff */
	uint64_t remote_inflight;  /* block requests one remote dataset keeps in flight */
	char *s3_credentials;      /* KEY=VALUE file for s3:// datasets, or NULL:
				    * the environment */
	uint64_t group_timeout_ms; /* a group member releasing nothing this long is detached */
	enum log_level log_level;
	struct cfg_limits limits;
	char *metrics;             /* "ADDR:PORT" as given, or NULL: no metrics served */
	struct sockaddr_storage metrics_addr; /* what it names (port 0: any free one) */
	socklen_t metrics_addr_len;
	bool has_gpus;             /* gpus: given (else every GPU the driver shows) */
	uint64_t gpus;             /* bit i: feedd may make device slots on device i */
	size_t ndatasets;
	struct cfg_dataset *datasets;   /* in file order, then flag order */
	size_t npipelines;
	struct cfg_pipeline *pipelines;
	size_t nmixtures;
	struct cfg_mixture *mixtures;   /* in file order */
};

/* What the command line says; NULL/0 means "not given". Strings are the
 * flag values as typed, checked by cfg_load() with the same rules as the
 * file (errors name the flag). */
struct cfg_overrides {
	const char *socket_path;   /* --socket */
	const char *workers;       /* --workers */
	const char *cache_bytes;   /* --cache-bytes */
	const char *group_timeout_ms; /* --group-timeout-ms */
	const char *log_level;     /* --log-level */
	const char *metrics;       /* --metrics ADDR:PORT (loopback, or the config's) */
	size_t ndatasets;          /* --dataset NAME=DIR|URL, in order */
	struct cfg_flag_dataset {
		const char *name;
		const char *path;
	} datasets[CFG_MAX_FLAG_DATASETS];
};

/* Loads file (NULL: built-in defaults only), applies ov (may be NULL) and
 * env_socket (the FEEDD_SOCKET value or NULL), and on success gives the
 * caller an immutable config to free with cfg_free(). Reads the file and
 * the user/group databases (blocking). Errors: -EINVAL with
 * "FILE:LINE: KEY.PATH: what is wrong" (or "--flag: ..."), -ENOENT etc.
 * from opening the file, -ENOMEM. */
int cfg_load(const char *file, const struct cfg_overrides *ov, const char *env_socket,
	     struct cfg **ret, struct feed_err *err);

/* Like cfg_load(), but goes on past an error to find the others: every
 * refusal lands in errs (the first in err too), at most CFG_ERRS_MAX of
 * them, the rest counted. A file that is not YAML has one error; one
 * that libcyaml's schema refuses has its unknown keys (every one) and
 * then that refusal: nothing past it can be read. */
#define CFG_ERRS_MAX 32
struct cfg_errs {
	unsigned n;                /* messages in msg */
	unsigned more;             /* errors past CFG_ERRS_MAX, not kept */
	char msg[CFG_ERRS_MAX][FEED_ERR_MSG_MAX];
};
int cfg_load_all(const char *file, const struct cfg_overrides *ov, const char *env_socket,
		 struct cfg **ret, struct feed_err *err, struct cfg_errs *errs);

/* Takes one more reference on c (the refcount is not configuration: the
 * content stays immutable). Any thread. Returns c. */
struct cfg *cfg_ref(const struct cfg *c);

/* Parses "ADDR:PORT" (an IPv4 address, "[IPv6]", or "localhost"; port
 * 0..65535, 0: any free one) into *ret / *ret_len, and whether the
 * address is a loopback one. -EINVAL with why in err. */
int cfg_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len,
		     bool *ret_loopback, struct feed_err *err);

/* Drops a reference; the last frees. Any thread. Accepts NULL. */
void cfg_free(struct cfg *c);

/* For --check-config: writes "feedd: FILE:LINE: KEY: ..." to out for every
 * socket_group, allow_users and allow_groups name in file that does not
 * resolve (cfg_load() stops at the first), except a line equal to skip
 * (the message cfg_load() gave, already printed; may be NULL). Returns
 * how many lines it wrote: 0 also when the file does not read or parse
 * (cfg_load() says why). Blocking (user and group databases). */
int cfg_check_names(const char *file, const struct cfg_errs *said, FILE *out);

/* Finds a dataset by name, or NULL. */
const struct cfg_dataset *cfg_dataset_find(const struct cfg *c, const char *name);

/* Whether group name `group` on dataset d is shared across users
 * (shared_groups). Any thread that holds the config. */
bool cfg_group_shared(const struct cfg_dataset *d, const char *group);

/* True if name is a valid dataset or pipeline name. */
bool cfg_name_ok(const char *name);

/* Row i of the numeric keys' table (for feedd --list-config-keys): its
 * key path, range, default (0 for workers: the online CPUs) and whether
 * it is a byte count. 0, or -ENOENT past the last row. Any thread. */
int cfg_num_row(size_t i, const char **ret_key, uint64_t *ret_min, uint64_t *ret_max,
		uint64_t *ret_def, bool *ret_bytes);

/* Parses a byte count: decimal digits, optionally followed by K, M, G or T
 * (powers of 1024). -EINVAL if not a number, -ERANGE past UINT64_MAX. */
int cfg_parse_bytes(const char *s, uint64_t *ret);

/* config_yaml.c: libyaml helpers for messages. */

/* Checks that text is well-formed YAML. On a syntax error returns -EINVAL
 * and sets the 1-based line and column and msg to libyaml's problem;
 * -ENOMEM (nothing set) when libyaml ran out of memory. */
int cfg_yaml_check(const char *text, size_t len, unsigned *ret_line, unsigned *ret_col,
		   char *msg, size_t msg_cap);

/* The 1-based line of the node at key path ("limits.max_streams",
 * "datasets[1].allow_users[0]"; a mapping key's own line), or 0 if the
 * path is not in the document. A key given twice: its first line, or its
 * last if last. */
unsigned cfg_yaml_line(const char *text, size_t len, const char *path, bool last);

#endif
