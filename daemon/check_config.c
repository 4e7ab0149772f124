/*
 * check_config.c: --check-config (see check_config.h). Main thread. The
 * permission checks read mode bits, owners and groups as the kernel would
 * for the user checked (access control lists aside); with --unit, the
 * unit's sandbox (check_unit.h) decides first what feedd may write.
 */
#include "check_config.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "check_unit.h"

#define CHK_GROUPS_MAX 256

/* Who start-up would run as. */
struct chk_who {
	uid_t uid;
	gid_t gid;                     /* primary group */
	gid_t groups[CHK_GROUPS_MAX];  /* supplementary groups */
	int ngroups;
	bool cap_chown;                /* may give a file any group (CAP_CHOWN) */
	bool cap_dac;                  /* may write any directory (CAP_DAC_OVERRIDE) */
	char name[96];                 /* "uid 999 (feedd)" */
};

/* What the check found. */
struct chk {
	const struct cfg *cfg;
	const char *file;              /* the config file, for messages */
	struct chk_who who;
	const struct unit *unit;       /* --unit: its sandbox and socket unit, or NULL */
	int errors;
	int warnings;
};

/* "feedd: FILE: [warning: ]what" on stderr, counted. */
static void __attribute__((format(printf, 3, 4)))
chk_say(struct chk *c, bool warning, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "feedd: %s: %s", c->file, warning ? "warning: " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (warning)
		c->warnings++;
	else
		c->errors++;
}

#define chk_error(c, ...) chk_say(c, false, __VA_ARGS__)
#define chk_warning(c, ...) chk_say(c, true, __VA_ARGS__)

/* Bits 0 and 1 of CapEff in /proc/self/status: CAP_CHOWN, CAP_DAC_OVERRIDE. */
static unsigned long long chk_cap_eff(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long caps = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	if (f)
		fclose(f);
	return caps;
}

static int chk_who_self(struct chk_who *w)
{
	struct passwd *pw = getpwuid(geteuid());
	unsigned long long caps = chk_cap_eff();

	w->uid = geteuid();
	w->gid = getegid();
	w->ngroups = getgroups(CHK_GROUPS_MAX, w->groups);
	if (w->ngroups < 0)
		w->ngroups = 0;
	w->cap_chown = caps & 1;
	w->cap_dac = caps & 2;
	snprintf(w->name, sizeof(w->name), "uid %u (%s)", (unsigned)w->uid,
		 pw ? pw->pw_name : "?");
	return 0;
}

/* As NAME would run: its groups from the databases; root with root's
 * capabilities, anyone else with none (a unit's CapabilityBoundingSet=). */
static int chk_who_user(struct chk_who *w, const char *name)
{
	struct passwd *pw = getpwnam(name);

	if (!pw) {
		fprintf(stderr, "feedd: --user %s: no such user\n", name);
		return -ENOENT;
	}
	w->uid = pw->pw_uid;
	w->gid = pw->pw_gid;
	w->ngroups = CHK_GROUPS_MAX;
	if (getgrouplist(name, pw->pw_gid, w->groups, &w->ngroups) < 0)
		w->ngroups = CHK_GROUPS_MAX;
	w->cap_chown = w->cap_dac = w->uid == 0;
	snprintf(w->name, sizeof(w->name), "uid %u (%s)", (unsigned)w->uid, name);
	return 0;
}

static bool chk_in_group(const struct chk_who *w, gid_t gid)
{
	if (gid == w->gid)
		return true;
	for (int i = 0; i < w->ngroups; i++)
		if (w->groups[i] == gid)
			return true;
	return false;
}

/* May w create entries in the directory st (write and search)? */
static bool chk_may_write_dir(const struct chk_who *w, const struct stat *st)
{
	unsigned m = (unsigned)st->st_mode;
	unsigned perm = st->st_uid == w->uid ? m >> 6 : chk_in_group(w, st->st_gid) ? m >> 3 : m;

	return w->cap_dac || (perm & 3) == 3;
}

/* "group 100 (users)" in a static buffer. */
static const char *chk_group_name(gid_t gid)
{
	static char buf[96];
	struct group *gr = getgrgid(gid);

	snprintf(buf, sizeof(buf), "%u (%s)", (unsigned)gid, gr ? gr->gr_name : "?");
	return buf;
}

/* The directory dir would be made in: dir's parent, "/" or ".". */
static void chk_parent(const char *dir, char *parent, size_t cap)
{
	snprintf(parent, cap, "%s", dir);
	char *slash = strrchr(parent, '/');
	if (slash == parent)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	else
		snprintf(parent, cap, ".");
}

/* The socket's directory: there and writable, or makeable (start-up
 * makes only its last component). *ret_made: it would be made (and
 * chowned to socket_group). */
static void chk_socket_dir(struct chk *c, const char *dir, bool *ret_made)
{
	char parent[CFG_SOCKET_PATH_MAX + 1], mode[16];
	struct stat st;

	*ret_made = false;
	if (stat(dir, &st) == 0) {
		snprintf(mode, sizeof(mode), "%04o", (unsigned)(st.st_mode & 07777));
		if (!S_ISDIR(st.st_mode))
			chk_error(c, "socket directory %s: not a directory", dir);
		else if (!chk_may_write_dir(&c->who, &st))
			chk_error(c, "socket directory %s (mode %s): %s may not make the socket "
				  "there (deploy/feedd.tmpfiles makes it, or use feedd.socket)",
				  dir, mode, c->who.name);
		return;
	}
	if (errno != ENOENT) {
		chk_error(c, "socket directory %s: %s", dir, strerror(errno));
		return;
	}
	chk_parent(dir, parent, sizeof(parent));
	if (stat(parent, &st) < 0)
		chk_error(c, "socket directory %s: cannot be made: %s: %s (only the last "
			  "component is made)", dir, parent, strerror(errno));
	else if (!chk_may_write_dir(&c->who, &st))
		chk_error(c, "socket directory %s: cannot be made: %s may not write %s", dir,
			  c->who.name, parent);
	else
		*ret_made = true;
}

/* socket_group: membership or CAP_CHOWN gives the socket its group; the
 * directory must let the group's members in. */
static void chk_socket_group(struct chk *c, const char *dir, bool made)
{
	const struct cfg *cfg = c->cfg;
	char group[96];
	struct stat st;

	if (!cfg->has_socket_group)
		return;
	snprintf(group, sizeof(group), "%s", chk_group_name(cfg->socket_gid));
	if (!c->who.cap_chown && !chk_in_group(&c->who, cfg->socket_gid))
		chk_error(c, "socket_group %s: %s is not a member and lacks CAP_CHOWN, so "
			  "start-up cannot give the socket that group (add the user to it, e.g. "
			  "the unit's SupplementaryGroups=; under feedd.socket, SocketGroup= "
			  "does it instead)", group, c->who.name);
	if (made || !*dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return;  /* one start-up makes is 0750 and of socket_group */
	bool enter = (st.st_mode & 0001) || (st.st_gid == cfg->socket_gid && (st.st_mode & 0010));
	if (!enter)
		chk_warning(c, "socket directory %s (group %s): members of socket_group %s "
			    "cannot enter it, so cannot connect", dir,
			    chk_group_name(st.st_gid), group);
}

/* What start-up's srv_start() would refuse on the socket's side. */
static void chk_socket(struct chk *c)
{
	const char *path = c->cfg->socket_path;
	char dir[CFG_SOCKET_PATH_MAX + 1] = "";
	bool made = false;
	struct stat st;

	const char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
		chk_socket_dir(c, dir, &made);
	}
	chk_socket_group(c, dir, made);
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
		chk_error(c, "socket %s: exists and is not a socket", path);
}

/* cache_dir: start-up creates it (mode 0700) if missing and refuses to
 * start when it cannot (disktier.c). Checked as the caller, without
 * creating or evicting anything. */
static void chk_cache_dir(struct chk *c)
{
	const char *dir = c->cfg->cache_dir;
	struct stat st;

	if (!dir)
		return;
	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			chk_error(c, "cache_dir %s: not a directory", dir);
		else if (access(dir, W_OK | X_OK) < 0)
			chk_error(c, "cache_dir %s: %s", dir, strerror(errno));
		return;
	}
	char parent[4096];
	chk_parent(dir, parent, sizeof(parent));
	const char *why = NULL;
	if (stat(parent, &st) < 0)
		why = strerror(errno);
	else if (!S_ISDIR(st.st_mode))
		why = "not a directory";
	else if (access(parent, W_OK | X_OK) < 0)
		why = strerror(errno);
	if (why)
		chk_error(c, "cache_dir %s: cannot be created (%s: %s)", dir, parent, why);
}

/* Whether the unit's sandbox lets feedd write under path (the value of
 * key); an error naming key, path and the unit's setting when not. */
static bool chk_sandbox_write(struct chk *c, const char *key, const char *path, const char *instead)
{
	char why[64];

	if (!c->unit || !path || path[0] != '/')
		return true;
	enum unit_access a = unit_access_of(c->unit, path, why, sizeof(why));
	if (a == UNIT_RW) {
		if (!strcmp(key, "socket") && !strcmp(why, "PrivateTmp=yes"))
			chk_warning(c, "socket %s: in the unit's private /tmp (%s): clients "
				    "outside the unit cannot reach it", path, why);
		return true;
	}
	chk_error(c, "%s %s: %s under %s (%s), so start-up cannot write there: add "
		  "ReadWritePaths=%s to the unit (a drop-in)%s%s", key, path,
		  a == UNIT_RO ? "read-only" : "hidden", c->unit->file, why, path,
		  instead ? ", or " : "", instead ? instead : "");
	return false;
}

/* Under feedd.socket: systemd makes the socket and gives it SocketGroup=;
 * feedd keeps its lock file beside the socket passed to it and warns when
 * the config names another socket or group (as start-up does). */
static void chk_socket_activated(struct chk *c)
{
	const struct unit *u = c->unit;
	const struct cfg *cfg = c->cfg;
	char dir[UNIT_PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", u->listen);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	chk_sandbox_write(c, "socket (feedd.socket's ListenSequentialPacket=, for the lock file)",
			  dir, NULL);
	if (strcmp(cfg->socket_path, u->listen))
		chk_warning(c, "socket %s: under %s feedd serves the socket systemd passes, %s "
			    "(ListenSequentialPacket=); make the two agree", cfg->socket_path,
			    u->socket_file, u->listen);
	if (!cfg->has_socket_group)
		return;
	struct group *gr = u->socket_group[0] ? getgrnam(u->socket_group) : NULL;
	if (!gr || gr->gr_gid != cfg->socket_gid)
		chk_warning(c, "socket_group %s: under %s its SocketGroup=%s decides the socket's "
			    "group, not socket_group; leave socket_group out or name the same group",
			    chk_group_name(cfg->socket_gid), u->socket_file,
			    u->socket_group[0] ? u->socket_group : "(none: root's)");
}

/* Datasets the sandbox hides, and network use the unit forbids. */
static void chk_unit_reach(struct chk *c)
{
	const struct cfg *cfg = c->cfg;
	char why[64];

	for (size_t i = 0; i < cfg->ndatasets; i++) {
		const char *path = cfg->datasets[i].path;
		bool url = strstr(path, "://") != NULL;
		if (url && c->unit->loopback_only)
			chk_warning(c, "datasets[%zu].path %s: %s allows loopback only (IPAddressDeny=any): "
				    "enable the drop-in feedd-network.conf", i, path, c->unit->file);
		if (!url && unit_access_of(c->unit, path, why, sizeof(why)) == UNIT_HIDDEN)
			chk_warning(c, "datasets[%zu].path %s: hidden under %s (%s): dataset '%s' "
				    "will not open", i, path, c->unit->file, why,
				    cfg->datasets[i].name);
	}
	const char *m = cfg->metrics;
	if (m && c->unit->loopback_only && strncmp(m, "127.", 4) && strncmp(m, "[::1]", 5) &&
	    strncmp(m, "localhost:", 10))
		chk_warning(c, "metrics %s: %s allows loopback only (IPAddressDeny=any), so no "
			    "other host can scrape it: enable the drop-in feedd-network.conf", m,
			    c->unit->file);
}

/* The config did not load: every error cfg_load_all() found, then every
 * name that does not resolve that it did not already say. */
static int chk_load_failed(const struct cli *cli, const struct cfg_errs *errs)
{
	for (unsigned i = 0; i < errs->n; i++)
		fprintf(stderr, "feedd: %s\n", errs->msg[i]);
	if (errs->more)
		fprintf(stderr, "feedd: %s: and %u more errors\n", cli->check_config, errs->more);
	int n = (int)(errs->n + errs->more) + cfg_check_names(cli->check_config, errs, stderr);
	fprintf(stderr, "feedd: %s: %d error%s; start-up would refuse it\n", cli->check_config,
		n, n == 1 ? "" : "s");
	return 1;
}

/* Who start-up would run as (--user, else the unit's User=, else the
 * caller) and the unit (--unit, into *u); -1 after saying why not. */
static int chk_setup(struct chk *c, const struct cli *cli, struct unit *u)
{
	if (cli->check_unit) {
		if (unit_read(u, cli->check_unit) < 0)
			return -1;
		c->unit = u;
	}
	const char *user = cli->check_user;
	if (!user && c->unit && c->unit->user[0])
		user = c->unit->user;  /* a unit without User= runs as root */
	else if (!user && c->unit)
		user = "root";
	if (cli->check_user && c->unit && c->unit->user[0] && strcmp(cli->check_user, c->unit->user))
		fprintf(stderr, "feedd: %s: warning: --user %s, but %s runs as User=%s\n", c->file,
			cli->check_user, c->unit->file, c->unit->user);
	return (user ? chk_who_user(&c->who, user) : chk_who_self(&c->who)) < 0 ? -1 : 0;
}

/* What start-up would meet, with the config loaded. */
static void chk_checks(struct chk *c)
{
	const struct cfg *cfg = c->cfg;

	if (c->unit && c->unit->has_socket) {
		chk_socket_activated(c);
	} else {
		const char *slash = strrchr(cfg->socket_path, '/');
		char dir[CFG_SOCKET_PATH_MAX + 1];
		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - cfg->socket_path) : 0,
			 cfg->socket_path);
		if (chk_sandbox_write(c, "socket", dir[0] ? dir : "/", NULL))
			chk_socket(c);
	}
	/* a directory the unit makes (CacheDirectory=) is feedd's at start */
	if (chk_sandbox_write(c, "cache_dir", cfg->cache_dir,
			      "a directory under the unit's CacheDirectory=") &&
	    !(c->unit && cfg->cache_dir && unit_makes_dir(c->unit, cfg->cache_dir)))
		chk_cache_dir(c);
	if (c->unit)
		chk_unit_reach(c);
	int w = cat_check(cfg, stderr);  /* every dataset opens, every pipeline fits one */
	if (w < 0) {
		fprintf(stderr, "feedd: %s: %s\n", c->file, strerror(-w));
		c->errors++;
	} else {
		c->warnings += w;
	}
}

/* The last line; the exit code. */
static int chk_report(const struct chk *c, bool strict)
{
	const struct cfg *cfg = c->cfg;
	char under[UNIT_PATH_MAX + 64] = "";
	int rc = c->errors || (strict && c->warnings);

	if (c->unit)
		snprintf(under, sizeof(under), " under %s%s", c->unit->file,
			 c->unit->has_socket ? " with its socket unit" : "");
	if (rc)
		fprintf(stderr, "feedd: %s: %d error%s, %d warning%s; %s\n", c->file, c->errors,
			c->errors == 1 ? "" : "s", c->warnings, c->warnings == 1 ? "" : "s",
			c->errors ? "start-up would refuse it" : "refused: --strict");
	else
		printf("%s: ok (socket %s, %zu datasets, %zu pipelines, %llu workers, %d warning%s, "
		       "checked as %s%s)\n", c->file, cfg->socket_path, cfg->ndatasets,
		       cfg->npipelines, (unsigned long long)cfg->workers, c->warnings,
		       c->warnings == 1 ? "" : "s", c->who.name, under);
	return rc;
}

int chk_run(const struct cli *cli)
{
	struct feed_err err = {0};
	struct cfg *cfg = NULL;
	struct chk c = {.file = cli->check_config};
	struct unit *u = calloc(1, sizeof(*u));
	struct cfg_errs *errs = calloc(1, sizeof(*errs));
	int rc = 1;

	if (!u || !errs) {
		fprintf(stderr, "feedd: --check-config: out of memory\n");
		goto out;
	}
	if (chk_setup(&c, cli, u) < 0)
		goto out;
	if (cfg_load_all(cli->check_config, &cli->ov, getenv("FEEDD_SOCKET"), &cfg, &err,
			 errs) < 0) {
		if (!errs->n) /* not YAML, or out of memory: the one error */
			snprintf(errs->msg[errs->n++], sizeof(errs->msg[0]), "%s", err.msg);
		rc = chk_load_failed(cli, errs);
		goto out;
	}
	c.cfg = cfg;
	chk_checks(&c);
	rc = chk_report(&c, cli->strict);
out:
	cfg_free(cfg);
	free(errs);
	free(u);
	return rc;
}
