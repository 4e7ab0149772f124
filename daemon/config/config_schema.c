/*
 * config_schema.c: the libcyaml schema of feedd.yaml, one row per key, and
 * the translation of libcyaml's log into one message naming file, line and
 * key path. Runs where the config loads: main() before the loop starts, a
 * worker at each reload. Never prints: libcyaml's log goes into a buffer,
 * not to stderr.
 *
 * Every scalar is read as a string and checked by config.c and
 * config_datasets.c; the schema fixes shape (which keys exist, scalar or
 * list or mapping) and string lengths.
 */
#include <cyaml/cyaml.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config.h"
#include "config_raw.h"

#define OPT (CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL)
#define STR_MAX 4096  /* any scalar (paths, pipeline text) */

static const cyaml_schema_value_t cfg_sch_string = {
	CYAML_VALUE_STRING(CYAML_FLAG_POINTER, char, 1, 255),
};

static const cyaml_schema_field_t cfg_sch_limits[] = {
	CYAML_FIELD_STRING_PTR("max_connections", OPT, struct cfg_raw_limits, max_connections, 1, 64),
	CYAML_FIELD_STRING_PTR("max_streams", OPT, struct cfg_raw_limits, max_streams, 1, 64),
	CYAML_FIELD_STRING_PTR("max_credits", OPT, struct cfg_raw_limits, max_credits, 1, 64),
	CYAML_FIELD_STRING_PTR("max_slot_bytes", OPT, struct cfg_raw_limits, max_slot_bytes, 1, 64),
	CYAML_FIELD_STRING_PTR("max_device_bytes", OPT, struct cfg_raw_limits, max_device_bytes, 1,
			       64),
	CYAML_FIELD_STRING_PTR("max_pixels", OPT, struct cfg_raw_limits, max_pixels, 1, 64),
	CYAML_FIELD_END,
};

static const cyaml_schema_field_t cfg_sch_dataset[] = {
	CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, struct cfg_raw_dataset, name, 1, 255),
	CYAML_FIELD_STRING_PTR("path", CYAML_FLAG_POINTER, struct cfg_raw_dataset, path, 1, STR_MAX),
	CYAML_FIELD_SEQUENCE("allow_users", OPT, struct cfg_raw_dataset, allow_users, &cfg_sch_string,
			     0, 1024),
	CYAML_FIELD_SEQUENCE("allow_groups", OPT, struct cfg_raw_dataset, allow_groups, &cfg_sch_string,
			     0, 1024),
	CYAML_FIELD_SEQUENCE("shared_groups", OPT, struct cfg_raw_dataset, shared_groups,
			     &cfg_sch_string, 0, CFG_MAX_SHARED_GROUPS),
	CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg_sch_dataset_v = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct cfg_raw_dataset, cfg_sch_dataset),
};

static const cyaml_schema_field_t cfg_sch_pipeline[] = {
	CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, struct cfg_raw_pipeline, name, 1, 255),
	CYAML_FIELD_STRING_PTR("ops", CYAML_FLAG_POINTER, struct cfg_raw_pipeline, ops, 1, STR_MAX),
	CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg_sch_pipeline_v = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct cfg_raw_pipeline, cfg_sch_pipeline),
};

static const cyaml_schema_field_t cfg_sch_mix_source[] = {
	CYAML_FIELD_STRING_PTR("dataset", CYAML_FLAG_POINTER, struct cfg_raw_mixture_source, dataset,
			       1, 255),
	CYAML_FIELD_STRING_PTR("weight", CYAML_FLAG_POINTER, struct cfg_raw_mixture_source, weight,
			       1, 64),
	CYAML_FIELD_STRING_PTR("repeat", OPT, struct cfg_raw_mixture_source, repeat, 1, 64),
	CYAML_FIELD_STRING_PTR("choose", OPT, struct cfg_raw_mixture_source, choose, 1, 64),
	CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg_sch_mix_source_v = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct cfg_raw_mixture_source, cfg_sch_mix_source),
};

static const cyaml_schema_field_t cfg_sch_mixture[] = {
	CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, struct cfg_raw_mixture, name, 1, 255),
	CYAML_FIELD_STRING_PTR("samples_per_epoch", OPT, struct cfg_raw_mixture, samples_per_epoch,
			       1, 64),
	CYAML_FIELD_SEQUENCE("sources", CYAML_FLAG_POINTER, struct cfg_raw_mixture, sources,
			     &cfg_sch_mix_source_v, 1, CFG_MAX_MIXTURE_SOURCES),
	CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg_sch_mixture_v = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct cfg_raw_mixture, cfg_sch_mixture),
};

static const cyaml_schema_field_t cfg_sch_top[] = {
	CYAML_FIELD_STRING_PTR("socket", OPT, struct cfg_raw, socket, 1, STR_MAX),
	CYAML_FIELD_STRING_PTR("socket_group", OPT, struct cfg_raw, socket_group, 1, 255),
	CYAML_FIELD_STRING_PTR("admin_group", OPT, struct cfg_raw, admin_group, 1, 255),
	CYAML_FIELD_STRING_PTR("workers", OPT, struct cfg_raw, workers, 1, 64),
	CYAML_FIELD_STRING_PTR("cache_bytes", OPT, struct cfg_raw, cache_bytes, 1, 64),
	CYAML_FIELD_STRING_PTR("cache_dir", OPT, struct cfg_raw, cache_dir, 1, STR_MAX),
	CYAML_FIELD_STRING_PTR("cache_dir_bytes", OPT, struct cfg_raw, cache_dir_bytes, 1, 64),
	CYAML_FIELD_STRING_PTR("remote_timeout_ms", OPT, struct cfg_raw, remote_timeout_ms, 1, 64),
	CYAML_FIELD_STRING_PTR("remote_retries", OPT, struct cfg_raw, remote_retries, 1, 64),
	CYAML_FIELD_STRING_PTR("remote_inflight", OPT, struct cfg_raw, remote_inflight, 1, 64),
	CYAML_FIELD_STRING_PTR("s3_credentials", OPT, struct cfg_raw, s3_credentials, 1, STR_MAX),
	CYAML_FIELD_STRING_PTR("group_timeout_ms", OPT, struct cfg_raw, group_timeout_ms, 1, 64),
	CYAML_FIELD_STRING_PTR("log_level", OPT, struct cfg_raw, log_level, 1, 64),
	CYAML_FIELD_STRING_PTR("metrics", OPT, struct cfg_raw, metrics, 1, 64),
	CYAML_FIELD_STRING_PTR("gpus", OPT, struct cfg_raw, gpus, 1, 256),
	CYAML_FIELD_MAPPING("limits", CYAML_FLAG_OPTIONAL, struct cfg_raw, limits, cfg_sch_limits),
	CYAML_FIELD_SEQUENCE("datasets", OPT, struct cfg_raw, datasets, &cfg_sch_dataset_v, 0,
			     CFG_MAX_DATASETS),
	CYAML_FIELD_SEQUENCE("pipelines", OPT, struct cfg_raw, pipelines, &cfg_sch_pipeline_v, 0,
			     CFG_MAX_PIPELINES),
	CYAML_FIELD_SEQUENCE("mixtures", OPT, struct cfg_raw, mixtures, &cfg_sch_mixture_v, 0,
			     CFG_MAX_MIXTURES),
	CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg_sch_top_v = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct cfg_raw, cfg_sch_top),
};

/* ------------------------------------------------------------------ */
/* libcyaml's log: the first message, then "Backtrace:" and frames,
 * innermost first ("  in mapping field 'x' (line: 3, column: 5)"). */

#define CFG_SCH_FRAMES 16

struct cfg_sch_log {
	char msg[256];
	char frames[CFG_SCH_FRAMES][128];
	int nframes;
	bool in_trace;
};

static void cfg_sch_log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list ap)
{
	struct cfg_sch_log *lg = ctx;
	char line[256];

	if (level < CYAML_LOG_ERROR)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	const char *s = strncmp(line, "Load: ", 6) ? line : line + 6;
	if (!strcmp(s, "Backtrace:")) {
		lg->in_trace = true;
	} else if (lg->in_trace && !strncmp(s, "  in ", 5)) {
		if (lg->nframes < CFG_SCH_FRAMES)
			snprintf(lg->frames[lg->nframes++], sizeof(lg->frames[0]), "%s", s + 5);
	} else if (!lg->msg[0]) {
		snprintf(lg->msg, sizeof(lg->msg), "%s", s);
	}
}

/* Appends frame f ("mapping field 'k' (...)", "sequence entry '2' (...)")
 * to path; libcyaml counts sequence entries from 1. */
static void cfg_sch_frame_path(const char *f, char *path, size_t cap)
{
	char name[100];
	unsigned idx;
	size_t n = strlen(path);

	if (sscanf(f, "mapping field '%99[^']'", name) == 1)
		snprintf(path + n, cap - n, "%s%s", n ? "." : "", name);
	else if (sscanf(f, "sequence entry '%u'", &idx) == 1 && idx > 0)
		snprintf(path + n, cap - n, "[%u]", idx - 1);
}

static unsigned cfg_sch_frame_line(const char *f)
{
	const char *l = strstr(f, "(line: ");
	return l ? (unsigned)strtoul(l + 7, NULL, 10) : 0;
}

static const char *cfg_sch_event_name(const char *ev)
{
	if (!strncmp(ev, "MAPPING", 7))
		return "a mapping";
	if (!strncmp(ev, "SEQUENCE", 8))
		return "a list";
	if (!strncmp(ev, "SCALAR", 6))
		return "a scalar";
	return ev;
}

/* Rewrites libcyaml's message into words of this config; may extend the
 * path with the key it names. */
static void cfg_sch_what(const char *msg, char *path, size_t cap, char *what, size_t what_cap)
{
	char a[100], b[100];
	size_t n = strlen(path);
	unsigned len;

	if (sscanf(msg, "Unexpected key: %99s", a) == 1) {
		snprintf(path + n, cap - n, "%s%s", n ? "." : "", a);
		snprintf(what, what_cap, "unknown key");
	} else if (sscanf(msg, "Missing required mapping field: %99s", a) == 1) {
		snprintf(what, what_cap, "missing required key '%s'", a);
	} else if (sscanf(msg, "Mapping field already seen: %99s", a) == 1) {
		snprintf(what, what_cap, "duplicate key");
	} else if (sscanf(msg, "Expecting %99[A-Z], got event: %99s", a, b) == 2) {
		snprintf(what, what_cap, "expected %s, got %s",
			 !strcmp(a, "STRING") ? "a scalar" : cfg_sch_event_name(a), cfg_sch_event_name(b));
	} else if (sscanf(msg, "STRING length < %u", &len) == 1) {
		snprintf(what, what_cap, "must not be empty");
	} else if (sscanf(msg, "STRING length > %u", &len) == 1) {
		snprintf(what, what_cap, "longer than %u bytes", len);
	} else {
		snprintf(what, what_cap, "%s", msg);
	}
}

static int cfg_sch_error(const struct cfg_sch_log *lg, cyaml_err_t e, const char *text, size_t len,
		    const char *file, struct feed_err *err)
{
	char path[512] = "", what[300];
	int frames = lg->nframes;
	unsigned line = 0;

	/* libyaml fails to start only for want of memory, and text passed
	 * cfg_yaml_check() (config_raw.h): libyaml failing on it now is memory */
	if (e == CYAML_ERR_OOM || e == CYAML_ERR_LIBYAML_PARSER_INIT ||
	    e == CYAML_ERR_LIBYAML_PARSER)
		return feed_err_set(err, -ENOMEM, "%s: out of memory", file);
	/* A missing key is reported inside the last key the mapping had:
	 * drop that frame so the path names the mapping itself. */
	if (e == CYAML_ERR_MAPPING_FIELD_MISSING && frames &&
	    !strncmp(lg->frames[0], "mapping field", 13))
		frames--;
	for (int i = lg->nframes - 1; i >= lg->nframes - frames; i--)
		cfg_sch_frame_path(lg->frames[i], path, sizeof(path));
	if (lg->nframes - frames < lg->nframes)
		line = cfg_sch_frame_line(lg->frames[lg->nframes - frames]);
	cfg_sch_what(lg->msg[0] ? lg->msg : cyaml_strerror(e), path, sizeof(path), what, sizeof(what));
	/* A duplicate key is wrong where it is repeated, not where it began. */
	unsigned exact = cfg_yaml_line(text, len, path, strstr(lg->msg, "already seen"));
	if (exact)
		line = exact;
	if (!path[0])
		return feed_err_set(err, -EINVAL, "%s:%u: %s", file, line, what);
	if (line)
		return feed_err_set(err, -EINVAL, "%s:%u: %s: %s", file, line, path, what);
	return feed_err_set(err, -EINVAL, "%s: %s: %s", file, path, what);
}

static int cfg_raw_load_flags(const char *text, size_t len, struct cfg_raw **ret,
			      const char *file, cyaml_cfg_flags_t flags, struct feed_err *err)
{
	struct cfg_sch_log lg = {.nframes = 0};
	const cyaml_config_t cc = {
		.log_fn = cfg_sch_log_fn,
		.log_ctx = &lg,
		.mem_fn = cyaml_mem,
		.log_level = CYAML_LOG_ERROR,
		.flags = CYAML_CFG_NO_ALIAS | flags,
	};
	cyaml_data_t *data = NULL;

	cyaml_err_t e = cyaml_load_data((const uint8_t *)text, len, &cc, &cfg_sch_top_v, &data, NULL);
	if (e != CYAML_OK)
		return cfg_sch_error(&lg, e, text, len, file, err);
	*ret = data;
	return 0;
}

int cfg_raw_load(const char *text, size_t len, struct cfg_raw **ret, const char *file,
		 struct feed_err *err)
{
	return cfg_raw_load_flags(text, len, ret, file, 0, err);
}

/* ------------------------------------------------------------------ */
/* Every unknown key, for --check-config: libcyaml stops at the first, so
 * the document is walked beside the schema with libyaml, and then loaded
 * with unknown keys ignored, so the checks of every other key still run. */

#define CFG_UNK_DEPTH 32

/* One open mapping or sequence of the document. */
struct cfg_unk_frame {
	const cyaml_schema_value_t *v; /* its schema; NULL: under an unknown key */
	bool is_map;                   /* a mapping, else a sequence */
	bool want_key;                 /* mapping: the next scalar is a key */
	unsigned index;                /* sequence: the next entry's index */
	size_t base;                   /* path length of the collection itself */
};

struct cfg_unk {
	const struct cfg_src *src;
	struct cfg_unk_frame st[CFG_UNK_DEPTH];
	int depth;
	const cyaml_schema_value_t *next; /* schema of the value after a key */
	char path[512];
	int found;                     /* unknown keys reported */
	bool stop;                     /* memory ran out recording one */
};

static const cyaml_schema_value_t *cfg_unk_field(const cyaml_schema_value_t *map,
						 const char *key)
{
	for (const cyaml_schema_field_t *f = map->mapping.fields; f && f->key; f++)
		if (!strcmp(f->key, key))
			return &f->value;
	return NULL;
}

/* The path of the node starting now, and its schema (NULL: unknown). */
static const cyaml_schema_value_t *cfg_unk_enter(struct cfg_unk *u)
{
	struct cfg_unk_frame *f = u->depth ? &u->st[u->depth - 1] : NULL;
	size_t cap = sizeof(u->path);

	if (!f)
		return &cfg_sch_top_v;
	if (f->is_map)
		return u->next;  /* the key set path and next */
	snprintf(u->path + f->base, cap - f->base, "[%u]", f->index++);
	return f->v ? f->v->sequence.entry : NULL;
}

/* A mapping key: reported when the mapping's schema lacks it. */
static void cfg_unk_key(struct cfg_unk *u, struct cfg_unk_frame *f, const yaml_event_t *ev)
{
	const char *key = (const char *)ev->data.scalar.value;
	size_t cap = sizeof(u->path);

	snprintf(u->path + f->base, cap - f->base, "%s%s", f->base ? "." : "", key);
	f->want_key = false;
	u->next = f->v ? cfg_unk_field(f->v, key) : NULL;
	if (!f->v || u->next)
		return;
	struct feed_err e = {0};
	unsigned line = (unsigned)ev->start_mark.line + 1;
	int r = feed_err_set(&e, -EINVAL, "%s:%u: %s: unknown key", u->src->file, line, u->path);
	u->found++;
	if (!cfg_err_keep(u->src, r, &e))
		u->stop = true;
}

/* A value ended: the parent wants a key (mapping) or an entry next. */
static void cfg_unk_leave(struct cfg_unk *u)
{
	struct cfg_unk_frame *f = u->depth ? &u->st[u->depth - 1] : NULL;

	if (!f)
		return;
	u->path[f->base] = '\0';
	f->want_key = true;
}

static void cfg_unk_step(struct cfg_unk *u, const yaml_event_t *ev)
{
	struct cfg_unk_frame *f = u->depth ? &u->st[u->depth - 1] : NULL;
	const cyaml_schema_value_t *v;

	switch (ev->type) {
	case YAML_SCALAR_EVENT:
	case YAML_ALIAS_EVENT:
		if (f && f->is_map && f->want_key) {
			if (ev->type == YAML_SCALAR_EVENT)
				cfg_unk_key(u, f, ev);
			else
				f->want_key = false;
			return;
		}
		cfg_unk_enter(u);
		cfg_unk_leave(u);
		return;
	case YAML_MAPPING_START_EVENT:
	case YAML_SEQUENCE_START_EVENT:
		v = cfg_unk_enter(u);
		if (u->depth == CFG_UNK_DEPTH) {
			u->stop = true;  /* deeper than any schema: libcyaml says what is wrong */
			return;
		}
		/* a shape the schema does not expect is libcyaml's error to report */
		if (v && v->type != (ev->type == YAML_MAPPING_START_EVENT ? CYAML_MAPPING
									 : CYAML_SEQUENCE))
			v = NULL;
		u->st[u->depth++] = (struct cfg_unk_frame){
			.v = v,
			.is_map = ev->type == YAML_MAPPING_START_EVENT,
			.want_key = true,
			.base = strlen(u->path),
		};
		return;
	case YAML_MAPPING_END_EVENT:
	case YAML_SEQUENCE_END_EVENT:
		if (u->depth)
			u->depth--;
		cfg_unk_leave(u);
		return;
	default:
		return;
	}
}

/* Reports every unknown key of text into src->all; the count, or -ENOMEM. */
static int cfg_unknown_keys(const char *text, size_t len, const struct cfg_src *src)
{
	struct cfg_unk u = {.src = src};
	yaml_parser_t p;
	yaml_event_t ev;

	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!u.stop && yaml_parser_parse(&p, &ev)) {
		bool end = ev.type == YAML_STREAM_END_EVENT;
		cfg_unk_step(&u, &ev);
		yaml_event_delete(&ev);
		if (end)
			break;
	}
	bool oom = p.error == YAML_MEMORY_ERROR;
	yaml_parser_delete(&p);
	return oom ? -ENOMEM : u.found;
}

int cfg_raw_load_all(const char *text, size_t len, struct cfg_raw **ret,
		     const struct cfg_src *src, struct feed_err *err)
{
	if (!src->all)
		return cfg_raw_load(text, len, ret, src->file, err);
	int n = cfg_unknown_keys(text, len, src);
	if (n < 0)
		return feed_err_set(err, n, "%s: out of memory", src->file);
	return cfg_raw_load_flags(text, len, ret, src->file, CYAML_CFG_IGNORE_UNKNOWN_KEYS, err);
}

void cfg_raw_free(struct cfg_raw *raw)
{
	const cyaml_config_t cc = {.mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR};

	if (raw)
		cyaml_free(&cc, &cfg_sch_top_v, raw, 0);
}
