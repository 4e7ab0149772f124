/*
 * config_yaml.c: libyaml passes over a config file that only serve its
 * error messages: a syntax check with libyaml's own line and column, and
 * the line of a key path (libcyaml's backtrace lines point at the last
 * event read, not at the offending key). Runs where the config loads:
 * main() before the loop, a worker at each reload; never allocates beyond
 * libyaml's parser.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#define CFG_WALK_PATH_MAX 512
#define CFG_WALK_DEPTH_MAX 64

int cfg_yaml_check(const char *text, size_t len, unsigned *ret_line, unsigned *ret_col,
		   char *msg, size_t msg_cap)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int r = 0;

	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	for (;;) {
		if (!yaml_parser_parse(&p, &ev)) {
			if (p.error == YAML_MEMORY_ERROR) {
				r = -ENOMEM;  /* not the file's fault: no line to name */
				break;
			}
			*ret_line = (unsigned)p.problem_mark.line + 1;
			*ret_col = (unsigned)p.problem_mark.column + 1;
			snprintf(msg, msg_cap, "%s%s%s", p.problem ? p.problem : "syntax error",
				 p.context ? " " : "", p.context ? p.context : "");
			r = -EINVAL;
			break;
		}
		bool end = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
		if (end)
			break;
	}
	yaml_parser_delete(&p);
	return r;
}

/* One open mapping or sequence while walking. */
struct cfg_walk_frame {
	bool is_map;
	bool want_key;   /* mapping: the next node is a key */
	unsigned index;  /* sequence: the next entry's index */
	size_t base;     /* path length of the collection itself */
};

struct cfg_walk {
	char path[CFG_WALK_PATH_MAX];
	size_t len;
	struct cfg_walk_frame st[CFG_WALK_DEPTH_MAX];
	int depth;       /* frames in st; 0 at document level */
};

/* Extends the path for a node that starts now; returns false if a mapping
 * key was consumed (a key is not a node of its own). */
static bool cfg_walk_enter(struct cfg_walk *w, const yaml_event_t *ev)
{
	struct cfg_walk_frame *f = w->depth ? &w->st[w->depth - 1] : NULL;
	int n = 0;

	if (f && f->is_map && f->want_key) {
		const char *key = ev->type == YAML_SCALAR_EVENT
			? (const char *)ev->data.scalar.value : "?";
		n = snprintf(w->path + f->base, sizeof(w->path) - f->base, "%s%s",
			     f->base ? "." : "", key);
		f->want_key = false;
		w->len = f->base + (n > 0 ? (size_t)n : 0);
		return false;
	}
	if (f && !f->is_map) {
		n = snprintf(w->path + f->base, sizeof(w->path) - f->base, "[%u]", f->index++);
		w->len = f->base + (n > 0 ? (size_t)n : 0);
	}
	if (w->len >= sizeof(w->path))
		w->len = sizeof(w->path) - 1;
	return true;
}

/* A value finished: back to the parent's path, which wants a key next. */
static void cfg_walk_leave(struct cfg_walk *w)
{
	struct cfg_walk_frame *f = w->depth ? &w->st[w->depth - 1] : NULL;

	if (!f)
		return;
	w->len = f->base;
	w->path[w->len] = '\0';
	if (f->is_map)
		f->want_key = true;
}

/* Feeds one event; returns true when the node or key at target starts. */
static bool cfg_walk_step(struct cfg_walk *w, const yaml_event_t *ev, const char *target)
{
	bool hit;

	switch (ev->type) {
	case YAML_SCALAR_EVENT:
	case YAML_ALIAS_EVENT:
		if (!cfg_walk_enter(w, ev))
			return !strcmp(w->path, target);
		hit = !strcmp(w->path, target);
		cfg_walk_leave(w);
		return hit;
	case YAML_MAPPING_START_EVENT:
	case YAML_SEQUENCE_START_EVENT:
		cfg_walk_enter(w, ev);
		hit = !strcmp(w->path, target);
		if (w->depth < CFG_WALK_DEPTH_MAX)
			w->st[w->depth++] = (struct cfg_walk_frame){
				.is_map = ev->type == YAML_MAPPING_START_EVENT,
				.want_key = true,
				.base = w->len,
			};
		return hit;
	case YAML_MAPPING_END_EVENT:
	case YAML_SEQUENCE_END_EVENT:
		if (w->depth)
			w->depth--;
		cfg_walk_leave(w);
		return false;
	default:
		return false;
	}
}

unsigned cfg_yaml_line(const char *text, size_t len, const char *path, bool last)
{
	yaml_parser_t p;
	yaml_event_t ev;
	struct cfg_walk w = {.len = 0};
	unsigned line = 0;

	if (!yaml_parser_initialize(&p))
		return 0;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while ((last || !line) && yaml_parser_parse(&p, &ev)) {
		bool end = ev.type == YAML_STREAM_END_EVENT;
		if (cfg_walk_step(&w, &ev, path))
			line = (unsigned)ev.start_mark.line + 1;
		yaml_event_delete(&ev);
		if (end)
			break;
	}
	yaml_parser_delete(&p);
	return line;
}
