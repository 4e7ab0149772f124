/*
 * config.c: loading feedd.yaml into struct cfg (see config.h; the schema
 * is config_schema.c's). Runs in main() before any thread starts, and on a
 * worker at each reload (policy/reload.c). Never logs, never exits; every
 * refusal names the file, the line (when the document has it) and the key
 * path.
 *
 * The libcyaml schema reads every scalar as a string: libcyaml 1.3 takes
 * "4x" for 4 and "010" for 8, so numbers are parsed here, strictly, with
 * the ranges of cfg_nums (one row per numeric key, like redis config.c).
 */
#include "config.h"

#include <cyaml/cyaml.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_raw.h"
#include "image.h"

/* ------------------------------------------------------------------ */
/* Numbers                                                             */

#define RAW_AT(m) offsetof(struct cfg_raw, m)
#define CFG_AT(m) offsetof(struct cfg, m)
#define OV_AT(m) offsetof(struct cfg_overrides, m)
#define NO_FLAG ((size_t)-1)

/* One row per numeric key: where the text is, where the value goes, its
 * range and default (workers: 0 = the number of online CPUs). */
static const struct cfg_num {
	const char *key;    /* key path in the file */
	const char *flag;   /* the command-line flag overriding it, or NULL */
	size_t raw_off;     /* char * in struct cfg_raw */
	size_t cfg_off;     /* uint64_t in struct cfg */
	size_t ov_off;      /* const char * in struct cfg_overrides, or NO_FLAG */
	bool bytes;         /* a byte count: K, M, G, T suffixes allowed */
	uint64_t min, max, def;
} cfg_nums[] = {
	{"workers", "--workers", RAW_AT(workers), CFG_AT(workers), OV_AT(workers), false,
	 1, 256, 0},
	{"cache_bytes", "--cache-bytes", RAW_AT(cache_bytes), CFG_AT(cache_bytes),
	 OV_AT(cache_bytes), true, 0, 1ull << 50, 1ull << 30},
	{"cache_dir_bytes", NULL, RAW_AT(cache_dir_bytes), CFG_AT(cache_dir_bytes), NO_FLAG,
	 true, 1ull << 20, 1ull << 50, 16ull << 30},
	{"remote_timeout_ms", NULL, RAW_AT(remote_timeout_ms), CFG_AT(remote_timeout_ms),
	 NO_FLAG, false, 100, 600000, 30000},
	{"remote_retries", NULL, RAW_AT(remote_retries), CFG_AT(remote_retries), NO_FLAG,
	 false, 0, 20, 4},
	{"remote_inflight", NULL, RAW_AT(remote_inflight), CFG_AT(remote_inflight), NO_FLAG,
	 false, 1, 64, 16},
	{"group_timeout_ms", "--group-timeout-ms", RAW_AT(group_timeout_ms),
	 CFG_AT(group_timeout_ms), OV_AT(group_timeout_ms), false, 1, 86400000, 30000},
	{"limits.max_connections", NULL, RAW_AT(limits.max_connections),
	 CFG_AT(limits.max_connections), NO_FLAG, false, 1, 65536, 64},
	{"limits.max_streams", NULL, RAW_AT(limits.max_streams), CFG_AT(limits.max_streams),
	 NO_FLAG, false, 1, 4096, 16},
	{"limits.max_credits", NULL, RAW_AT(limits.max_credits), CFG_AT(limits.max_credits),
	 NO_FLAG, false, 1, CFG_MAX_CREDITS, CFG_MAX_CREDITS},
	{"limits.max_slot_bytes", NULL, RAW_AT(limits.max_slot_bytes),
	 CFG_AT(limits.max_slot_bytes), NO_FLAG, true, 1ull << 20, 1ull << 40, 4ull << 30},
	{"limits.max_device_bytes", NULL, RAW_AT(limits.max_device_bytes),
	 CFG_AT(limits.max_device_bytes), NO_FLAG, true, 0, 1ull << 44, 8ull << 30},
	{"limits.max_pixels", NULL, RAW_AT(limits.max_pixels), CFG_AT(limits.max_pixels),
	 NO_FLAG, false, 1, (uint64_t)IMG_DIM_MAX * IMG_DIM_MAX, IMG_MAX_PIXELS_DEFAULT},
};

int cfg_num_row(size_t i, const char **ret_key, uint64_t *ret_min, uint64_t *ret_max,
		uint64_t *ret_def, bool *ret_bytes)
{
	if (i >= sizeof(cfg_nums) / sizeof(cfg_nums[0]))
		return -ENOENT;
	*ret_key = cfg_nums[i].key;
	*ret_min = cfg_nums[i].min;
	*ret_max = cfg_nums[i].max;
	*ret_def = cfg_nums[i].def;
	*ret_bytes = cfg_nums[i].bytes;
	return 0;
}

int cfg_parse_bytes(const char *s, uint64_t *ret)
{
	static const char units[] = "KMGT";
	uint64_t v = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p) {
		const char *u = strchr(units, *p);
		if (!u || p[1])
			return -EINVAL;
		unsigned shift = 10 * (unsigned)(u - units + 1);
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
	}
	*ret = v;
	return 0;
}

/* Parses text for row n: the name in messages is the flag or key. */
static int cfg_num_set(struct cfg *c, const struct cfg_num *n, const char *text, bool flag,
		       const struct cfg_src *src, struct feed_err *err)
{
	uint64_t v;
	int r = cfg_parse_bytes(text, &v);
	bool bytes = n->bytes;

	if (r == 0 && !bytes && strspn(text, "0123456789") != strlen(text))
		r = -EINVAL;  /* K/M/G/T suffixes only for byte counts */
	if (r == 0 && (v < n->min || v > n->max))
		r = -ERANGE;
	if (r == -EINVAL && flag)
		return feed_err_set(err, r, "%s: '%s' is not %s", n->flag, text,
				    bytes ? "a byte count" : "an unsigned integer");
	if (r == -EINVAL)
		return cfg_key_err(src, err, n->key, "'%s' is not %s", text,
				   bytes ? "a byte count (digits, optional K, M, G or T)"
					 : "an unsigned integer");
	if (r && flag)
		return feed_err_set(err, -EINVAL, "%s: %s out of range %llu..%llu", n->flag,
				    text, (unsigned long long)n->min, (unsigned long long)n->max);
	if (r)
		return cfg_key_err(src, err, n->key, "%s out of range %llu..%llu", text,
				   (unsigned long long)n->min, (unsigned long long)n->max);
	*(uint64_t *)((char *)c + n->cfg_off) = v;
	return 0;
}

/* cache_dir and s3_credentials: paths, relative ones joined to the
 * config file's directory as dataset paths are. */
static int cfg_remote(struct cfg *c, const struct cfg_raw *raw, const char *file,
		      const struct cfg_src *src, struct feed_err *err)
{
	if (raw->cache_dir && !(c->cache_dir = cfg_path_join(file, raw->cache_dir)))
		return feed_err_set(err, -ENOMEM, "cache_dir: out of memory");
	if (raw->cache_dir && strstr(raw->cache_dir, "://"))
		return cfg_key_err(src, err, "cache_dir", "'%s' is not a local directory",
				   raw->cache_dir);
	if (raw->s3_credentials && !(c->s3_credentials = cfg_path_join(file, raw->s3_credentials)))
		return feed_err_set(err, -ENOMEM, "s3_credentials: out of memory");
	return 0;
}

static uint64_t cfg_online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 256 ? 256 : (uint64_t)n;
}

static int cfg_numbers(struct cfg *c, const struct cfg_raw *raw, const struct cfg_overrides *ov,
		       const struct cfg_src *src, struct feed_err *err)
{
	for (size_t i = 0; i < sizeof(cfg_nums) / sizeof(cfg_nums[0]); i++) {
		const struct cfg_num *n = &cfg_nums[i];
		const char *text = *(char *const *)((const char *)raw + n->raw_off);
		const char *flag = ov && n->ov_off != NO_FLAG
			? *(const char *const *)((const char *)ov + n->ov_off) : NULL;
		int r = 0;

		*(uint64_t *)((char *)c + n->cfg_off) = n->def ? n->def : cfg_online_cpus();
		if (text)
			r = cfg_num_set(c, n, text, false, src, err);
		if (r == 0 && flag)
			r = cfg_num_set(c, n, flag, true, src, err);
		if (r && !cfg_err_keep(src, r, err))
			return r;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Strings                                                             */

static int cfg_socket(struct cfg *c, const struct cfg_raw *raw, const struct cfg_overrides *ov,
		      const char *env_socket, const struct cfg_src *src, struct feed_err *err)
{
	const char *path = CFG_DEFAULT_SOCKET, *from = NULL;

	if (env_socket && *env_socket)
		path = env_socket, from = "FEEDD_SOCKET";
	if (raw->socket)
		path = raw->socket, from = "socket";
	if (ov && ov->socket_path)
		path = ov->socket_path, from = "--socket";
	if (!*path || strlen(path) > CFG_SOCKET_PATH_MAX) {
		if (from && !strcmp(from, "socket"))
			return cfg_key_err(src, err, "socket", "path of %zu bytes (1..%d allowed)",
					   strlen(path), CFG_SOCKET_PATH_MAX);
		return feed_err_set(err, -EINVAL, "%s: path of %zu bytes (1..%d allowed)", from,
				    strlen(path), CFG_SOCKET_PATH_MAX);
	}
	c->socket_path = strdup(path);
	if (!c->socket_path)
		return feed_err_set(err, -ENOMEM, "socket: out of memory");
	if (raw->socket_group) {
		struct feed_err e2 = {0};
		if (acl_parse_group(raw->socket_group, &c->socket_gid, &e2) < 0)
			return cfg_key_err(src, err, "socket_group", "%s", e2.msg);
		c->has_socket_group = true;
	}
	return 0;
}

static int cfg_log_level(struct cfg *c, const struct cfg_raw *raw,
			 const struct cfg_overrides *ov, const struct cfg_src *src,
			 struct feed_err *err)
{
	int lv = LOG_LEVEL_INFO;

	if (raw->log_level && (lv = log_level_parse(raw->log_level)) < 0)
		return cfg_key_err(src, err, "log_level",
				   "'%s' is not one of error, warn, info, debug", raw->log_level);
	if (ov && ov->log_level && (lv = log_level_parse(ov->log_level)) < 0)
		return feed_err_set(err, -EINVAL,
				    "--log-level: '%s' is not one of error, warn, info, debug",
				    ov->log_level);
	c->log_level = (enum log_level)lv;
	return 0;
}

/* The port after the address: 0..65535, digits only. */
/* gpus: "all", or device ordinals (as CUDA_VISIBLE_DEVICES leaves them)
 * separated by commas, each 0..63, e.g. "0,2". */
static int cfg_gpus(struct cfg *c, const struct cfg_raw *raw, const struct cfg_src *src,
		    struct feed_err *err)
{
	if (!raw->gpus || !strcmp(raw->gpus, "all"))
		return 0;
	uint64_t mask = 0;
	const char *p = raw->gpus;
	for (;;) {
		char *end;
		while (*p == ' ')
			p++;
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p || *p == '-' || errno || v > 63)
			return cfg_key_err(src, err, "gpus", "'%s': give \"all\" or device ordinals "
					   "0..63 separated by commas, e.g. \"0,2\"", raw->gpus);
		mask |= (uint64_t)1 << v;
		for (p = end; *p == ' '; p++)
			;
		if (!*p)
			break;
		if (*p++ != ',')
			return cfg_key_err(src, err, "gpus", "'%s': give \"all\" or device ordinals "
					   "0..63 separated by commas, e.g. \"0,2\"", raw->gpus);
	}
	c->has_gpus = true;
	c->gpus = mask;
	return 0;
}

static int cfg_port(const char *s, const char *what, uint16_t *ret, struct feed_err *err)
{
	char *end;
	unsigned long p;

	errno = 0;
	p = *s >= '0' && *s <= '9' ? strtoul(s, &end, 10) : 70000;
	if (p > 65535 || errno || *end)
		return feed_err_set(err, -EINVAL, "'%s': port '%s' is not 0..65535", what, s);
	*ret = (uint16_t)p;
	return 0;
}

int cfg_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len,
		     bool *ret_loopback, struct feed_err *err)
{
	const char *colon = strrchr(s, ':');
	char host[64];
	uint16_t port;
	size_t n = colon ? (size_t)(colon - s) : 0;

	if (!colon || n == 0 || n >= sizeof(host))
		return feed_err_set(err, -EINVAL, "'%s': expected ADDR:PORT (127.0.0.1:9400, "
				    "[::1]:9400, localhost:9400)", s);
	memcpy(host, s, n);
	host[n] = '\0';
	if (cfg_port(colon + 1, s, &port, err) < 0)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	if (host[0] == '[' && host[n - 1] == ']') {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ret;
		host[n - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1)
			return feed_err_set(err, -EINVAL, "'%s': '%s' is not an IPv6 address", s,
					    host + 1);
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		*ret_len = sizeof(*a6);
		*ret_loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
		return 0;
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)ret;
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
		return feed_err_set(err, -EINVAL, "'%s': '%s' is not an IPv4 address, [IPv6] or "
				    "localhost", s, host);
	a4->sin_family = AF_INET;
	a4->sin_port = htons(port);
	*ret_len = sizeof(*a4);
	*ret_loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	return 0;
}

/* Whether two listen strings name the same address (ports aside). */
static bool cfg_same_host(const char *a, const char *b)
{
	const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
	return ca && cb && ca - a == cb - b && !strncmp(a, b, (size_t)(ca - a));
}

/* metrics: off unless the file or --metrics names an address. The file
 * may name any address (whoever writes it decides to publish); the flag
 * only a loopback one, or the host the file names: a command line, which
 * wrappers and drop-ins also write, never opens the port to the network
 * on its own. */
static int cfg_metrics(struct cfg *c, const struct cfg_raw *raw, const struct cfg_overrides *ov,
		       const struct cfg_src *src, struct feed_err *err)
{
	struct feed_err e2 = {0};
	bool loopback;

	if (raw->metrics && cfg_parse_listen(raw->metrics, &c->metrics_addr, &c->metrics_addr_len,
					     &loopback, &e2) < 0)
		return cfg_key_err(src, err, "metrics", "%s", e2.msg);
	const char *text = raw->metrics;
	if (ov && ov->metrics) {
		if (cfg_parse_listen(ov->metrics, &c->metrics_addr, &c->metrics_addr_len,
				     &loopback, &e2) < 0)
			return feed_err_set(err, -EINVAL, "--metrics: %s", e2.msg);
		if (!loopback && !(raw->metrics && cfg_same_host(raw->metrics, ov->metrics)))
			return feed_err_set(err, -EINVAL, "--metrics %s: not a loopback address; "
					    "an address other hosts reach must be set by the "
					    "config file's 'metrics' key", ov->metrics);
		text = ov->metrics;
	}
	if (text && !(c->metrics = strdup(text)))
		return feed_err_set(err, -ENOMEM, "metrics: out of memory");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */

static int cfg_read_file(const char *file, char **ret, size_t *ret_len, struct feed_err *err)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	int r;

	if (fd < 0)
		return feed_err_set(err, -errno, "%s: %s", file, strerror(errno));
	if (fstat(fd, &st) < 0) {
		r = feed_err_set(err, -errno, "%s: %s", file, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > CFG_FILE_MAX) {
		r = feed_err_set(err, -EINVAL, "%s: not a regular file of at most %u bytes", file,
				 CFG_FILE_MAX);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		r = feed_err_set(err, -ENOMEM, "%s: out of memory", file);
		goto out;
	}
	ssize_t n = read(fd, buf, (size_t)st.st_size);
	if (n != st.st_size) {
		r = feed_err_set(err, n < 0 ? -errno : -EIO, "%s: short read", file);
		free(buf);
		goto out;
	}
	buf[n] = '\0';
	*ret = buf;
	*ret_len = (size_t)n;
	r = 0;
out:
	close(fd);
	return r;
}

static int cfg_parse_file(const char *file, struct cfg_src *src, char **ret_text,
			  struct cfg_raw **ret_raw, struct feed_err *err)
{
	char msg[200];
	unsigned line, col;
	int r = cfg_read_file(file, ret_text, &src->len, err);

	if (r < 0)
		return r;
	src->file = file;
	src->text = *ret_text;
	r = cfg_yaml_check(src->text, src->len, &line, &col, msg, sizeof(msg));
	if (r == -ENOMEM)
		return feed_err_set(err, r, "%s: out of memory reading its YAML", file);
	if (r < 0)
		return feed_err_set(err, -EINVAL, "%s:%u:%u: YAML syntax: %s", file, line, col,
				    msg);
	return cfg_raw_load_all(src->text, src->len, ret_raw, src, err);
}

int cfg_load(const char *file, const struct cfg_overrides *ov, const char *env_socket,
	     struct cfg **ret, struct feed_err *err)
{
	return cfg_load_all(file, ov, env_socket, ret, err, NULL);
}

/* Runs one stage of loading; false: stop (err holds why). */
static bool cfg_stage(int r, const struct cfg_src *src, struct feed_err *err)
{
	return r == 0 || cfg_err_keep(src, r, err);
}

int cfg_load_all(const char *file, const struct cfg_overrides *ov, const char *env_socket,
		 struct cfg **ret, struct feed_err *err, struct cfg_errs *errs)
{
	struct cfg_src src = {.all = errs};
	struct cfg_raw *raw = NULL, empty = {0};
	char *text = NULL;
	struct cfg *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return feed_err_set(err, -ENOMEM, "config: out of memory");
	atomic_init(&c->refs, 1);
	if (file) {
		r = cfg_parse_file(file, &src, &text, &raw, err);
		if (r < 0) {
			/* unknown keys found before libcyaml refused: they come first */
			if (cfg_err_keep(&src, r, err) && errs->n > 1)
				feed_err_set(err, r, "%s", errs->msg[0]);
			goto fail;
		}
		c->file = strdup(file);
		if (!c->file) {
			r = feed_err_set(err, -ENOMEM, "config: out of memory");
			goto fail;
		}
	}
	const struct cfg_raw *rw = raw ? raw : &empty;  /* an empty file is all defaults */
	/* each stage runs even after another's error when errs collects them */
	if (!cfg_stage(r = cfg_numbers(c, rw, ov, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_socket(c, rw, ov, env_socket, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_remote(c, rw, file, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_log_level(c, rw, ov, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_metrics(c, rw, ov, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_gpus(c, rw, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_datasets(c, rw, file, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_flag_datasets(c, ov, err), &src, err) ||
	    !cfg_stage(r = cfg_sharing(c, rw, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_pipelines(c, rw, &src, err), &src, err) ||
	    !cfg_stage(r = cfg_mixtures(c, rw, &src, err), &src, err))
		goto fail;
	if (errs && (errs->n || errs->more)) {
		r = feed_err_set(err, -EINVAL, "%s", errs->msg[0]);
		goto fail;
	}
	cfg_raw_free(raw);
	free(text);
	*ret = c;
	return 0;
fail:
	cfg_raw_free(raw);
	free(text);
	cfg_free(c);
	return r;
}

struct cfg *cfg_ref(const struct cfg *c)
{
	struct cfg *m = (struct cfg *)c;  /* the count only: the content stays */

	atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
	return m;
}

void cfg_free(struct cfg *c)
{
	/* acq_rel: the last owner sees every write made before the others let go */
	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < c->ndatasets; i++) {
		free(c->datasets[i].path);
		free(c->datasets[i].acl.uids);
		free(c->datasets[i].acl.gids);
		free(c->datasets[i].shared_groups);
	}
	free(c->datasets);
	for (size_t i = 0; i < c->npipelines; i++)
		free(c->pipelines[i].ops);
	free(c->pipelines);
	for (size_t i = 0; i < c->nmixtures; i++)
		free(c->mixtures[i].sources);
	free(c->mixtures);
	free(c->socket_path);
	free(c->metrics);
	free(c->cache_dir);
	free(c->s3_credentials);
	free(c->file);
	free(c);
}
