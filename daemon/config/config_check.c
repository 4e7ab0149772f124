/*
 * config_check.c: for --check-config, every user and group name of a
 * config file that does not resolve, not just the first that cfg_load()
 * stops at (see config.h, cfg_check_names). Main thread, before anything
 * starts; reads the file and the user and group databases.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_raw.h"

/* The file's text, NUL-terminated, or NULL (cfg_load() says why). */
static char *cfg_check_read(const char *file, size_t *ret_len)
{
	FILE *f = fopen(file, "re");
	char *text = f ? malloc(CFG_FILE_MAX + 1) : NULL;
	size_t n = text ? fread(text, 1, CFG_FILE_MAX + 1, f) : 0;

	if (f)
		fclose(f);
	if (!text || n > CFG_FILE_MAX) {
		free(text);
		return NULL;
	}
	text[n] = '\0';
	*ret_len = n;
	return text;
}

/* Whether said holds msg. */
static bool cfg_said(const struct cfg_errs *said, const char *msg)
{
	for (unsigned i = 0; said && i < said->n; i++)
		if (!strcmp(said->msg[i], msg))
			return true;
	return false;
}

/* Reports name at key unless it resolves or said has it already; 1 if
 * reported. */
static int cfg_check_one(const struct cfg_src *src, const char *key, const char *name,
			 bool group, const struct cfg_errs *said, FILE *out)
{
	struct feed_err e = {0}, e2 = {0};
	uid_t uid;
	gid_t gid;

	if (!name || (!group && !strcmp(name, "*")))
		return 0;
	if ((group ? acl_parse_group(name, &gid, &e) : acl_parse_user(name, &uid, &e)) == 0)
		return 0;
	cfg_key_err(src, &e2, key, "%s", e.msg);
	if (cfg_said(said, e2.msg))
		return 0;
	fprintf(out, "feedd: %s\n", e2.msg);
	return 1;
}

int cfg_check_names(const char *file, const struct cfg_errs *said, FILE *out)
{
	struct cfg_src src = {.file = file};
	struct cfg_raw *raw = NULL;
	struct feed_err err = {0};
	unsigned line, col;
	char key[96], msg[200];
	int n = 0;

	char *text = cfg_check_read(file, &src.len);
	if (!text)
		return 0;
	src.text = text;
	if (cfg_yaml_check(text, src.len, &line, &col, msg, sizeof(msg)) < 0 ||
	    cfg_raw_load(text, src.len, &raw, file, &err) < 0 || !raw) {
		free(text);
		return 0;
	}
	n += cfg_check_one(&src, "socket_group", raw->socket_group, true, said, out);
	n += cfg_check_one(&src, "admin_group", raw->admin_group, true, said, out);
	for (unsigned i = 0; i < raw->datasets_count; i++) {
		const struct cfg_raw_dataset *d = &raw->datasets[i];
		for (unsigned k = 0; k < d->allow_users_count; k++) {
			snprintf(key, sizeof(key), "datasets[%u].allow_users[%u]", i, k);
			n += cfg_check_one(&src, key, d->allow_users[k], false, said, out);
		}
		for (unsigned k = 0; k < d->allow_groups_count; k++) {
			snprintf(key, sizeof(key), "datasets[%u].allow_groups[%u]", i, k);
			n += cfg_check_one(&src, key, d->allow_groups[k], true, said, out);
		}
	}
	cfg_raw_free(raw);
	free(text);
	return n;
}
