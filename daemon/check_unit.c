/*
 * check_unit.c: a systemd unit as --check-config --unit sees it (see
 * check_unit.h). Main thread. Reads the unit files line by line: a
 * trailing backslash continues a line, '#' and ';' start comments, an
 * empty value resets a list.
 */
#include "check_unit.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNIT_LINE_MAX 8192
#define UNIT_DROPINS_MAX 64

/* The directories systemd makes for the unit, writable, owned by User=. */
static const struct {
	const char *key;
	const char *root;
} unit_dirs[] = {
	{"CacheDirectory", "/var/cache"},
	{"StateDirectory", "/var/lib"},
	{"RuntimeDirectory", "/run"},
	{"LogsDirectory", "/var/log"},
};

/* path with symbolic links of its longest existing prefix resolved and
 * "." and ".." of the rest dropped, in out (cap UNIT_PATH_MAX). */
static void unit_resolve(const char *path, char *out)
{
	char head[UNIT_PATH_MAX], real[PATH_MAX];
	const char *tail = "";

	snprintf(head, sizeof(head), "%s", path);
	for (;;) {
		if (realpath(head, real)) {
			int n = snprintf(out, UNIT_PATH_MAX, "%s%s%s", real,
					 *tail && strcmp(real, "/") ? "/" : "", tail);
			if (n >= UNIT_PATH_MAX)  /* too long to resolve: as given */
				snprintf(out, UNIT_PATH_MAX, "%s", path);
			return;
		}
		char *slash = strrchr(head, '/');
		if (!slash || slash == head) {
			snprintf(out, UNIT_PATH_MAX, "%s", path);
			return;
		}
		*slash = '\0';
		tail = path + (slash - head) + 1;
	}
}

static void unit_add_rule(struct unit *u, const char *path, enum unit_access a, const char *key)
{
	if (u->nrules == UNIT_PATHS_MAX || path[0] != '/')
		return;
	struct unit_rule *r = &u->rules[u->nrules++];
	unit_resolve(path, r->path);
	r->access = a;
	snprintf(r->key, sizeof(r->key), "%s", key);
}

/* Drops the rules key added (an empty assignment resets its list). */
static void unit_reset_rules(struct unit *u, const char *key)
{
	int n = 0;

	for (int i = 0; i < u->nrules; i++)
		if (strcmp(u->rules[i].key, key))
			u->rules[n++] = u->rules[i];
	u->nrules = n;
}

/* ReadWritePaths= and the like: each word, "-" and "+" prefixes dropped;
 * under root/ for the *Directory= keys. */
static void unit_paths(struct unit *u, const char *key, const char *value, enum unit_access a,
		       const char *root)
{
	char rule_key[40], buf[UNIT_LINE_MAX], path[UNIT_PATH_MAX];
	char *save = NULL;

	snprintf(rule_key, sizeof(rule_key), "%s=", key);
	if (!*value) {
		unit_reset_rules(u, rule_key);
		return;
	}
	snprintf(buf, sizeof(buf), "%s", value);
	for (char *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		while (*w == '-' || *w == '+')
			w++;
		if (root)
			snprintf(path, sizeof(path), "%s/%s", root, w);
		else
			snprintf(path, sizeof(path), "%s", w);
		unit_add_rule(u, path, a, rule_key);
	}
}

static bool unit_bool(const char *v)
{
	return !strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "on");
}

/* ProtectSystem= / ProtectHome=: "" for no, "yes" for a true boolean. */
static void unit_protect(char *out, size_t cap, const char *v)
{
	if (unit_bool(v))
		v = "yes";
	else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "off"))
		v = "";
	snprintf(out, cap, "%s", v);
}

/* IPAddressDeny= / IPAddressAllow=: appended, or reset by an empty value. */
static void unit_list(char *list, size_t cap, const char *v)
{
	size_t n = strlen(list);

	if (!*v)
		list[0] = '\0';
	else
		snprintf(list + n, cap - n, "%s%s", n ? " " : "", v);
}

static void unit_service_key(struct unit *u, const char *k, const char *v)
{
	if (!strcmp(k, "User"))
		snprintf(u->user, sizeof(u->user), "%s", v);
	else if (!strcmp(k, "Group"))
		snprintf(u->group, sizeof(u->group), "%s", v);
	else if (!strcmp(k, "ProtectSystem"))
		unit_protect(u->protect_system, sizeof(u->protect_system), v);
	else if (!strcmp(k, "ProtectHome"))
		unit_protect(u->protect_home, sizeof(u->protect_home), v);
	else if (!strcmp(k, "PrivateTmp"))
		u->private_tmp = unit_bool(v);
	else if (!strcmp(k, "ReadWritePaths"))
		unit_paths(u, k, v, UNIT_RW, NULL);
	else if (!strcmp(k, "ReadOnlyPaths"))
		unit_paths(u, k, v, UNIT_RO, NULL);
	else if (!strcmp(k, "InaccessiblePaths"))
		unit_paths(u, k, v, UNIT_HIDDEN, NULL);
	else if (!strcmp(k, "IPAddressDeny"))
		unit_list(u->ip_deny, sizeof(u->ip_deny), v);
	else if (!strcmp(k, "IPAddressAllow"))
		unit_list(u->ip_allow, sizeof(u->ip_allow), v);
	for (size_t i = 0; i < sizeof(unit_dirs) / sizeof(unit_dirs[0]); i++)
		if (!strcmp(k, unit_dirs[i].key))
			unit_paths(u, k, v, UNIT_RW, unit_dirs[i].root);
}

static void unit_socket_key(struct unit *u, const char *k, const char *v)
{
	if (!strcmp(k, "ListenSequentialPacket"))
		snprintf(u->listen, sizeof(u->listen), "%s", v);
	else if (!strcmp(k, "SocketGroup"))
		snprintf(u->socket_group, sizeof(u->socket_group), "%s", v);
}

static char *unit_trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

/* One logical line (continuations joined) of section `section`. */
static void unit_line(struct unit *u, char *line, char *cur, size_t cur_cap, bool socket)
{
	char *s = unit_trim(line);

	if (!*s || *s == '#' || *s == ';')
		return;
	if (*s == '[') {
		snprintf(cur, cur_cap, "%s", s);
		return;
	}
	char *eq = strchr(s, '=');
	if (!eq)
		return;
	*eq = '\0';
	char *k = unit_trim(s), *v = unit_trim(eq + 1);
	if (!socket && !strcmp(cur, "[Service]"))
		unit_service_key(u, k, v);
	else if (socket && !strcmp(cur, "[Socket]"))
		unit_socket_key(u, k, v);
}

/* Reads one unit file or drop-in; -errno if it cannot be opened. */
static int unit_file(struct unit *u, const char *path, bool socket)
{
	FILE *f = fopen(path, "re");
	char line[UNIT_LINE_MAX], part[UNIT_LINE_MAX], cur[64] = "";

	if (!f)
		return -errno;
	line[0] = '\0';
	while (fgets(part, sizeof(part), f)) {
		char *p = unit_trim(part);
		size_t n = strlen(p), have = strlen(line);
		bool more = n && p[n - 1] == '\\';
		if (more)
			p[n - 1] = ' ';
		snprintf(line + have, sizeof(line) - have, "%s", p);
		if (more)
			continue;
		unit_line(u, line, cur, sizeof(cur), socket);
		line[0] = '\0';
	}
	if (line[0])
		unit_line(u, line, cur, sizeof(cur), socket);
	fclose(f);
	return 0;
}

static int unit_cmp_base(const void *a, const void *b)
{
	const char *x = strrchr(*(char *const *)a, '/'), *y = strrchr(*(char *const *)b, '/');

	return strcmp(x, y);
}

/* Adds dir's *.conf to names (a later directory's file of the same name
 * replaces an earlier's); returns the new count. */
static int unit_dropin_dir(const char *dir, char **names, int n)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)) && n < UNIT_DROPINS_MAX) {
		size_t len = strlen(e->d_name);
		if (len < 6 || strcmp(e->d_name + len - 5, ".conf"))
			continue;
		char *path = NULL;
		if (asprintf(&path, "%s/%s", dir, e->d_name) < 0)
			break;
		int i = 0;
		while (i < n && strcmp(strrchr(names[i], '/') + 1, e->d_name))
			i++;
		if (i < n)
			free(names[i]);
		else
			n++;
		names[i] = path;
	}
	if (d)
		closedir(d);
	return n;
}

/* The unit at path, then its drop-ins in name order. */
static int unit_with_dropins(struct unit *u, const char *path, bool socket)
{
	char dir[UNIT_PATH_MAX + 64];
	char *names[UNIT_DROPINS_MAX];
	int r = unit_file(u, path, socket);

	if (r < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s.d", path);
	int n = unit_dropin_dir(dir, names, 0);
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	snprintf(dir, sizeof(dir), "/etc/systemd/system/%s.d", base);
	n = unit_dropin_dir(dir, names, n);
	qsort(names, (size_t)n, sizeof(names[0]), unit_cmp_base);
	for (int i = 0; i < n; i++) {
		unit_file(u, names[i], socket);
		free(names[i]);
	}
	return 0;
}

/* True when every word of allow is a loopback address. */
static bool unit_allow_local(const char *allow)
{
	char buf[512], *save = NULL;
	static const char *const local[] = {"localhost", "127.0.0.1", "127.0.0.0/8", "::1",
					    "::1/128", "127.0.0.1/32"};

	snprintf(buf, sizeof(buf), "%s", allow);
	for (char *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
		bool ok = false;
		for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
			ok |= !strcmp(w, local[i]);
		if (!ok)
			return false;
	}
	return true;
}

int unit_read(struct unit *u, const char *file)
{
	memset(u, 0, sizeof(*u));
	snprintf(u->file, sizeof(u->file), "%s", file);
	int r = unit_with_dropins(u, file, false);
	if (r < 0) {
		fprintf(stderr, "feedd: --unit %s: %s\n", file, strerror(-r));
		return r;
	}
	char deny[520];
	snprintf(deny, sizeof(deny), " %s ", u->ip_deny);
	u->loopback_only = strstr(deny, " any ") && unit_allow_local(u->ip_allow);
	size_t n = strlen(file);
	if (n > 8 && !strcmp(file + n - 8, ".service")) {
		snprintf(u->socket_file, sizeof(u->socket_file), "%.*s.socket", (int)(n - 8), file);
		u->has_socket = unit_with_dropins(u, u->socket_file, true) == 0 && u->listen[0];
	}
	return 0;
}

/* Length of rule path rp when it is path p or a directory above it, else -1. */
static int unit_match(const char *p, const char *rp)
{
	size_t n = strlen(rp);

	if (!strcmp(rp, "/"))
		return 1;
	if (strncmp(p, rp, n) || (p[n] && p[n] != '/'))
		return -1;
	return (int)n;
}

/* The rules that ProtectSystem=, ProtectHome= and PrivateTmp= make. */
static int unit_base_rules(const struct unit *u, struct unit_rule *out)
{
	static const char *const sys_yes[] = {"/usr", "/boot", "/efi"};
	static const char *const home[] = {"/home", "/root", "/run/user"};
	static const char *const api[] = {"/dev", "/proc", "/sys"};
	int n = 0;

#define UNIT_BASE(p, a, k) \
	(snprintf(out[n].path, UNIT_PATH_MAX, "%s", p), out[n].access = (a), \
	 snprintf(out[n].key, sizeof(out[n].key), "%s", k), n++)
	const char *ps = u->protect_system;
	if (!strcmp(ps, "strict")) {
		UNIT_BASE("/", UNIT_RO, "ProtectSystem=strict");
		for (int i = 0; i < 3; i++)
			UNIT_BASE(api[i], UNIT_RW, "ProtectSystem=strict");
	}
	if (!strcmp(ps, "yes") || !strcmp(ps, "full"))
		for (int i = 0; i < 3; i++)
			UNIT_BASE(sys_yes[i], UNIT_RO, !strcmp(ps, "yes") ? "ProtectSystem=yes"
									 : "ProtectSystem=full");
	if (!strcmp(ps, "full"))
		UNIT_BASE("/etc", UNIT_RO, "ProtectSystem=full");
	const char *ph = u->protect_home;
	if (*ph) {
		char key[40];
		snprintf(key, sizeof(key), "ProtectHome=%s", ph);
		for (int i = 0; i < 3; i++)
			UNIT_BASE(home[i], strcmp(ph, "read-only") ? UNIT_HIDDEN : UNIT_RO, key);
	}
	if (u->private_tmp) {
		UNIT_BASE("/tmp", UNIT_RW, "PrivateTmp=yes");
		UNIT_BASE("/var/tmp", UNIT_RW, "PrivateTmp=yes");
	}
#undef UNIT_BASE
	return n;
}

enum unit_access unit_access_of(const struct unit *u, const char *path, char *key, size_t cap)
{
	struct unit_rule base[16];
	char p[UNIT_PATH_MAX];
	enum unit_access a = UNIT_RW;
	int best = -1;

	unit_resolve(path, p);
	snprintf(key, cap, "no ProtectSystem=");
	int nb = unit_base_rules(u, base);
	for (int i = 0; i < nb + u->nrules; i++) {
		const struct unit_rule *r = i < nb ? &base[i] : &u->rules[i - nb];
		int m = unit_match(p, r->path);
		if (m >= 0 && m >= best) {  /* longest wins; the unit's own lists after */
			best = m;
			a = r->access;
			snprintf(key, cap, "%s", r->key);
		}
	}
	return a;
}

bool unit_makes_dir(const struct unit *u, const char *path)
{
	char p[UNIT_PATH_MAX];

	unit_resolve(path, p);
	char *slash = strrchr(p, '/');
	for (int i = 0; i < u->nrules; i++) {
		const struct unit_rule *r = &u->rules[i];
		if (!strstr(r->key, "Directory="))
			continue;
		if (!strcmp(p, r->path))
			return true;
		if (slash && slash != p && (size_t)(slash - p) == strlen(r->path) &&
		    !strncmp(p, r->path, (size_t)(slash - p)))
			return true;
	}
	return false;
}
