/*
 * feed/client.h: libfeedclient, the client of the feedd daemon.
 *
 * A program connects to feedd's Unix socket, says hello (protocol version
 * negotiation), and asks: which datasets may I read, what is in one, how is
 * the daemon doing. Streams of batches are in feed/stream.h.
 *
 * Conventions for every call:
 *   - Returns 0 (or a count) on success, or a negative errno-style code;
 *     feed_strerror() names the code and feed_errmsg(conn) gives the detail
 *     (the daemon's own message for a refusal, e.g. "dataset 'x': user 1000
 *     (groups 1000, 27) not allowed", or what the library saw, e.g.
 *     "connect /run/feedd/feedd.sock: No such file or directory").
 *   - Outputs go through ret parameters, written only on success.
 *   - Calls that talk to the daemon block until it answers or the
 *     connection's timeout (10 s unless set) passes: then -ETIMEDOUT, and
 *     the connection is closed, since a late answer could not be told from
 *     the next one.
 *   - The library never prints, never exits, never raises SIGPIPE, and
 *     returns -ENOMEM when memory runs out.
 *   - Threads: a struct feed_conn is used by one thread at a time (callers
 *     serialise); distinct connections are independent. feed_strerror() is
 *     safe from any thread.
 *
 * Links libprotobuf-c only. Exported names all begin with feed_.
 */
#ifndef FEED_CLIENT_H
#define FEED_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FEED_API __attribute__((visibility("default")))

/* Where feedd listens unless the caller or $FEEDD_SOCKET says otherwise. */
#define FEED_DEFAULT_SOCKET "/run/feedd/feedd.sock"
#define FEED_DEFAULT_TIMEOUT_MS 10000
#define FEED_MAX_RANK 8

/* A connection to feedd. Opaque. */
struct feed_conn;

/* ------------------------------------------------------------------ */
/* Connections                                                         */

/* Connects to the daemon at path (NULL: $FEEDD_SOCKET if set and not
 * empty, else FEED_DEFAULT_SOCKET) and says hello. On success *ret is a
 * connection the caller frees with feed_disconnect(). On failure nothing
 * is allocated and the detail is lost; to read it (e.g. the daemon's
 * refusal), use feed_conn_new() + feed_conn_open() instead.
 * Blocks up to FEED_DEFAULT_TIMEOUT_MS. Any thread. Errors: -ENOENT,
 * -ECONNREFUSED, -EACCES (no daemon or no permission on the socket),
 * -EUSERS (daemon's per-user connection limit), -EPROTONOSUPPORT (no
 * common protocol version), -ETIMEDOUT, -ENAMETOOLONG, -ENOMEM. */
FEED_API int feed_connect(const char *path, struct feed_conn **ret);

/* Allocates an unconnected connection (no I/O). *ret is freed with
 * feed_disconnect(). -ENOMEM. */
FEED_API int feed_conn_new(struct feed_conn **ret);

/* Sets how long each later call may wait for the daemon, in milliseconds
 * (> 0). Does not block. -EINVAL for timeout_ms <= 0. */
FEED_API int feed_conn_set_timeout(struct feed_conn *conn, int timeout_ms);

/* Connects conn (allocated by feed_conn_new(), not yet open, or closed by
 * an earlier failure) to path as feed_connect() does. On failure
 * feed_errmsg(conn) tells why; conn stays allocated and may be opened
 * again. -EISCONN if it is already open. Blocks up to the timeout. */
FEED_API int feed_conn_open(struct feed_conn *conn, const char *path);

/* Closes the socket (the daemon frees everything the connection held) and
 * frees conn. Never blocks. Accepts NULL. conn must not be used after. */
FEED_API void feed_disconnect(struct feed_conn *conn);

/* The detail of the last failed call on conn. When the daemon refused a
 * request it is the daemon's exact message, which names the dataset,
 * limit, field or token parameter concerned (e.g. "dataset 'x': user
 * 1000 not allowed"; bytes outside printable ASCII become '?', and it is
 * cut at 511 bytes), prefixed with "feedd at PATH: " for a refusal at
 * connect and "stream N: " when the daemon stopped a stream. Otherwise it
 * is the library's own account, with the system's words for a failed
 * system call (e.g. "cannot reach feedd at PATH: No such file or
 * directory"). Empty string if there is none. The string belongs to conn
 * and lives until its next call or feed_disconnect(). conn may be NULL
 * (then ""). Does not block. */
FEED_API const char *feed_errmsg(const struct feed_conn *conn);

/* This library's version, "MAJOR.MINOR.PATCH": the version of the feedd
 * project it was built from (the daemon's own is in feed_stats()). The
 * string is static. Does not block; any thread. */
FEED_API const char *feed_version(void);

/* What code (a negative errno-style value; the sign is ignored) means
 * from feedd or this library, in words that fit feedd's use of it: e.g.
 * -EUSERS "Per-user limit reached (connections or streams)", -ENOSPC "Not
 * enough room (slot memory limit, shared memory or buffer size)", -ESTALE
 * "Resume token does not match the dataset version or pipeline", -EACCES
 * "Permission denied". A code without a meaning of feedd's own gets the C
 * library's description; 0 gives "Success", an unknown code "Unknown
 * error". These words name the kind of failure only; which limit, dataset
 * or field is in feed_errmsg(conn). Never NULL; the string is static.
 * Does not block; any thread. */
FEED_API const char *feed_strerror(int code);

/* ------------------------------------------------------------------ */
/* Datasets                                                            */

/* Element types, the values of struct feed_field.dtype and struct
 * feed_view.dtype: feed.proto's DType, also what feedd writes in shared
 * memory; they never change. Named as numpy names them; a field's
 * dtype_name has the short form ("u8", "i64", "f32", "bf16", "bool",
 * "str"). A string field (FEED_DTYPE_STRING) holds UTF-8 bytes and is
 * always variable-length. */
#define FEED_DTYPE_UINT8 1
#define FEED_DTYPE_INT8 2
#define FEED_DTYPE_UINT16 3
#define FEED_DTYPE_INT16 4
#define FEED_DTYPE_UINT32 5
#define FEED_DTYPE_INT32 6
#define FEED_DTYPE_UINT64 7
#define FEED_DTYPE_INT64 8
#define FEED_DTYPE_FLOAT16 9
#define FEED_DTYPE_BFLOAT16 10
#define FEED_DTYPE_FLOAT32 11
#define FEED_DTYPE_FLOAT64 12
#define FEED_DTYPE_BOOLEAN 13       /* one byte, 0 or 1 */
#define FEED_DTYPE_STRING 14

/* One field of a dataset's records. */
struct feed_field {
	const char *name;         /* unique within the dataset */
	int dtype;                /* element type: FEED_DTYPE_* */
	const char *dtype_name;   /* "u8", "f32", "str", ... */
	size_t elem_size;         /* bytes of one element */
	uint32_t rank;            /* entries in shape, <= FEED_MAX_RANK */
	uint32_t shape[FEED_MAX_RANK]; /* fixed: the record's shape; variable: one
				       * element's shape along the first axis */
	bool variable;            /* length varies per record */
	uint64_t max_bytes;       /* largest record of the field */
};

struct feed_dataset {
	const char *name;         /* what the daemon serves it as */
	const char *version;      /* content hash: same version, same records */
	uint64_t num_samples;
	uint32_t num_fields;
	const struct feed_field *fields;
	/* Class names (datasets packed by feedpack imagefolder): label value i
	 * is classes[i]; 0 and NULL for other datasets. */
	uint32_t num_classes;
	const char *const *classes;
};

/* A list of datasets. Everything it points to belongs to it and lives
 * until feed_dataset_list_free(). Read-only for the caller. */
struct feed_dataset_list {
	size_t count;
	const struct feed_dataset *datasets;
};

/* The datasets the calling user may read (others are not listed), in the
 * daemon's config order. *ret is freed with feed_dataset_list_free().
 * Blocks up to the timeout. Errors: -ENOTCONN, -ETIMEDOUT, -ECONNRESET
 * (daemon went away), -EPROTO (a reply that makes no sense), -ENOMEM. */
FEED_API int feed_list_datasets(struct feed_conn *conn, struct feed_dataset_list **ret);

/* The dataset called name, as a list of exactly one. Errors as
 * feed_list_datasets(), plus -ENOENT (no such dataset, or it failed to
 * open in the daemon) and -EACCES (the daemon refuses this user; see
 * feed_errmsg()), -EINVAL for a name that cannot be a dataset's. */
FEED_API int feed_dataset_info(struct feed_conn *conn, const char *name,
			       struct feed_dataset_list **ret);

/* The path of sample `sample` of `dataset` as feedpack imagefolder
 * recorded it (relative to the tree it packed), copied NUL-terminated
 * into ret_path[cap] (caller's; written only on success). Blocks up to the
 * timeout. Returns 0, or as feed_dataset_info(), plus -ERANGE (no such
 * sample), -ENOENT also when the dataset recorded no paths, -ENOSPC when
 * cap is too small (the size needed is in feed_errmsg()). */
FEED_API int feed_sample_path(struct feed_conn *conn, const char *dataset, uint64_t sample,
			     char *ret_path, size_t cap);

/* Accepts NULL. */
FEED_API void feed_dataset_list_free(struct feed_dataset_list *list);

/* One pipeline op the daemon knows. */
struct feed_op {
	const char *name;         /* "hflip" */
	const char *usage;        /* its keys with their defaults, as `feedd
				   * --list-ops` prints it: "hflip(p=0.5, field)" */
	const char *summary;      /* one line saying what it does */
};

/* The daemon's pipeline ops. Everything it points to belongs to it and
 * lives until feed_op_list_free(). Read-only for the caller. */
struct feed_op_list {
	size_t count;
	const struct feed_op *ops;
};

/* Every pipeline op the daemon on conn accepts, in its own order (that of
 * `feedd --list-ops`), text printable ASCII. *ret (written only on
 * success) is freed with feed_op_list_free(). Blocks up to the timeout.
 * Returns 0, -EINVAL for NULL arguments, -ENOMEM, -EPROTO (a malformed
 * reply), -EOPNOTSUPP (a feedd too old to know the request), or the
 * connection's errors as feed_list_datasets(); feed_errmsg() says more.
 * The thread that owns conn. */
FEED_API int feed_list_ops(struct feed_conn *conn, struct feed_op_list **ret);

/* Accepts NULL. */
FEED_API void feed_op_list_free(struct feed_op_list *list);

/* ------------------------------------------------------------------ */
/* Daemon status                                                       */

struct feed_stats {
	char server_version[32];  /* feedd's version, e.g. "0.1.0" */
	uint32_t protocol_version;/* negotiated at hello */
	uint64_t uptime_ms;
	uint32_t connections;     /* every client's */
	uint32_t user_connections;/* the calling user's, this one included */
	uint32_t workers;         /* worker threads */
	uint32_t datasets;        /* datasets the calling user may read */
	uint64_t requests;        /* requests the daemon answered */
	uint64_t rejected;        /* of those, refused */
};

/* Fills *ret (caller-owned) with the daemon's counters. Blocks up to the
 * timeout. Errors as feed_list_datasets(). */
FEED_API int feed_stats(struct feed_conn *conn, struct feed_stats *ret);

/* One stream, or one group of streams built once ("group"), as the daemon
 * serves it. Text is printable ASCII (anything else becomes '?'), cut to
 * fit. Rates are averages since it opened. This struct, struct feed_status
 * and struct feed_gpu_status gain members at their ends from one release
 * to the next (the library allocates them): a program indexing
 * status->streams[i] must be built against the header of the library it
 * runs with. */
struct feed_stream_status {
	char kind[8];             /* "stream" or "group" */
	uint32_t uid;             /* whose share of the workers builds it */
	int32_t pid;              /* its client's, at connect */
	uint64_t conn;            /* the daemon's connection number (as in its log) */
	uint32_t stream;          /* stream id on that connection */
	char dataset[64];
	char group[64];           /* "" outside any group */
	uint32_t members;         /* streams served: 1 for a lone stream */
	uint32_t batch, credits, credits_in_use;
	uint64_t age_ms;          /* since it opened */
	uint64_t batches, samples, bytes;   /* published */
	double samples_per_s, mb_per_s;     /* MB: 10^6 bytes */
	uint64_t worker_ns;       /* worker CPU time spent building it */
	uint64_t jobs;            /* worker jobs run for it */
	uint64_t reader_wait_ns;  /* its reader's own report of time blocked waiting */
	double reader_wait_share; /* that over age_ms, 0..1 */
	char pipeline[256];       /* canonical text */
	uint64_t shm_bytes;       /* its shared memory regions */
	char device[256];         /* "" without device slots asked for, "ipc" with
				   * them (CUDA IPC), else why it has host slots */
	uint64_t device_bytes;    /* GPU memory its device slots take */
	/* a group: its first nmember_pids members (of members) */
#define FEED_STATUS_MEMBERS 64
	uint32_t nmember_pids;
	int32_t member_pids[FEED_STATUS_MEMBERS];
	uint64_t member_reader_wait_ns[FEED_STATUS_MEMBERS]; /* each one's reader_wait_ns */
	/* over the last 10 s (since it opened, when younger), as sampled by
	 * the daemon each second; beside the lifetime figures above */
	double samples_per_s_10s, mb_per_s_10s, reader_wait_share_10s;
#define FEED_JOB_MAX 128
	char job[FEED_JOB_MAX + 1]; /* the job its client named (feed_stream_open());
				     * "" none; a group's: its creator's */
	uint64_t replaced;        /* samples replaced (on_error skip) so far */
	uint32_t rank, world;     /* the rank it reads of world (a group: its members') */
	uint64_t slot_bytes;      /* one data slot */
	uint64_t batches_per_epoch; /* of this rank; 0: not known */
	uint64_t epochs;          /* asked for; 0: no end */
	uint64_t start_epoch, start_batch; /* where it started (resumed, or joined late) */
	uint64_t detached_batches; /* batches its readers moved into private memory
				    * (feed_batch_detach(): held views), as their
				    * clients report it; display only */
	char jpeg_decode[200];    /* with device slots: "nvJPEG: N/8 of each batch"
				   * decode on the GPU now, or "CPU: " and why
				   * only there; "" without device slots */
};

/* The block cache shared by every stream. */
struct feed_cache_status {
	uint64_t hits, misses, evictions;   /* blocks found / decoded / dropped */
	uint64_t bytes, entries, budget;    /* decoded bytes held, blocks, cache_bytes */
};

/* A GPU the daemon's driver shows. feedd makes a GPU's context only when
 * a stream first asks for device slots there. */
struct feed_gpu_status {
	uint32_t ordinal;         /* as the daemon's CUDA_VISIBLE_DEVICES leaves them */
	char name[64];
	bool allowed;             /* in the daemon's `gpus:` (or it has none) */
	bool context;             /* the daemon holds a context (and memory) there */
	bool failed;              /* making it failed; streams were told why */
	uint64_t slot_bytes;      /* device memory open streams' slots hold there */
};

/* What feedctl status shows. Everything belongs to it until
 * feed_status_free(). */
struct feed_status {
	struct feed_stats stats;
	struct feed_cache_status cache;
	size_t count;                       /* streams and groups */
	const struct feed_stream_status *streams;
	size_t ngpus;                       /* GPUs (0 with no driver) */
	const struct feed_gpu_status *gpus;
	size_t npending;                    /* remote datasets you may read that are
					     * still opening (not in count's streams
					     * nor in feed_list_datasets() yet) */
	const char *const *pending;         /* their names */
	/* where the daemon can decode JPEGs: "nvJPEG 13.0.1 (libnvjpeg.so.13)",
	 * or "CPU only: " and why not ("" from a daemon that does not say) */
	char jpeg_decode[320];
};

/* The daemon's counters with every stream and group over a dataset the
 * calling user may read, and the cache's. *ret is freed with
 * feed_status_free(). Blocks up to the timeout. Errors as
 * feed_list_datasets(). */
FEED_API int feed_status(struct feed_conn *conn, struct feed_status **ret);

/* Accepts NULL. */
FEED_API void feed_status_free(struct feed_status *st);

/* ------------------------------------------------------------------ */
/* Reloading the daemon's config                                       */

/* What a reload did. Everything belongs to it until
 * feed_reload_result_free(); read-only for the caller. */
struct feed_reload_result {
	bool applied;               /* false: refused; the daemon's config is unchanged */
	const char *file;           /* the file the daemon read ("" for none) */
	size_t nadded, nremoved, nrepointed; /* datasets, by name: */
	const char *const *added;   /* served now, and not before */
	const char *const *removed; /* no longer served (open streams go on) */
	const char *const *repointed; /* served from a new directory (version) */
	size_t nerrors;             /* applied false: every reason, one each */
	const char *const *errors;
	size_t nwarnings;           /* a dataset left out, a key that needs a restart, ... */
	const char *const *warnings;
};

/* Asks feedd to load its config file again, as SIGHUP does: datasets
 * added, removed or repointed, access lists, limits, pipelines; streams
 * on unchanged datasets are untouched. Allowed to root and to members of
 * the socket's group. Blocks until the daemon has loaded the file and
 * opened what it adds (up to the timeout; past it the reload goes on in
 * the daemon, whose log says how it ended). Returns 0 when the new config
 * is in force, with *ret; -EINVAL when the daemon refused the file: *ret
 * is written then too (its errors say why) and feed_errmsg() names the
 * first; -EPERM (not allowed), -EBUSY (a reload in progress), and the
 * errors of feed_list_datasets(), with nothing written. *ret is freed
 * with feed_reload_result_free(). Any thread that owns conn. */
FEED_API int feed_reload(struct feed_conn *conn, struct feed_reload_result **ret);

/* Accepts NULL. */
FEED_API void feed_reload_result_free(struct feed_reload_result *r);

#ifdef __cplusplus
}
#endif

#endif
