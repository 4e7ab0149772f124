/*
 * check_unit.h: what --check-config --unit FILE needs to know of a
 * systemd service unit: the user it runs as, the file-system view its
 * sandbox gives (which paths feedd may write, read, or not see), whether
 * it may reach hosts beyond loopback, and the socket unit beside it
 * (socket activation: the socket's path and group).
 *
 * Owns: reading the unit file, its drop-ins (FILE.d/ *.conf beside it and
 * in /etc/systemd/system/NAME.d/, in name order) and NAME.socket beside
 * it, the way systemd would for the keys below; any other key is ignored.
 * The model of the sandbox follows systemd.exec(5): ProtectSystem= (yes,
 * full, strict), ProtectHome= (yes, read-only, tmpfs), PrivateTmp=,
 * ReadWritePaths=, ReadOnlyPaths=, InaccessiblePaths=, and the
 * directories systemd makes writable for the unit (CacheDirectory=,
 * StateDirectory=, RuntimeDirectory=, LogsDirectory=): the longest
 * matching path decides. Paths resolve through symbolic links that exist.
 * Main thread, --check-config only; reads files, starts nothing.
 */
#ifndef FEEDD_CHECK_UNIT_H
#define FEEDD_CHECK_UNIT_H

#include <stdbool.h>
#include <stddef.h>

#define UNIT_PATHS_MAX 64
#define UNIT_PATH_MAX 4096

/* What the sandbox lets feedd do under a path. */
enum unit_access {
	UNIT_RW,      /* read and write */
	UNIT_RO,      /* read only */
	UNIT_HIDDEN,  /* not there (inaccessible, or an empty tmpfs) */
};

/* One rule of the file-system view: under path, access, because of key. */
struct unit_rule {
	char path[UNIT_PATH_MAX];
	enum unit_access access;
	char key[40];              /* "ReadWritePaths=", "ProtectHome=yes", ... */
};

struct unit {
	char file[UNIT_PATH_MAX];  /* the service unit read */
	char user[64];             /* User=, "" if none (root) */
	char group[64];            /* Group= */
	char protect_system[16];   /* ProtectSystem=: "", yes, full, strict */
	char protect_home[16];     /* ProtectHome=: "", yes, read-only, tmpfs */
	bool private_tmp;          /* PrivateTmp= */
	bool loopback_only;        /* IPAddressDeny=any and nothing but localhost allowed */
	char ip_deny[512];         /* IPAddressDeny= as read (space-separated) */
	char ip_allow[512];        /* IPAddressAllow= as read */
	struct unit_rule rules[UNIT_PATHS_MAX]; /* ReadWritePaths= and the like */
	int nrules;
	/* The socket unit beside it: socket activation. */
	bool has_socket;
	char socket_file[UNIT_PATH_MAX];
	char listen[UNIT_PATH_MAX];  /* ListenSequentialPacket= */
	char socket_group[64];       /* SocketGroup=, "" if none */
};

/* Reads the service unit at file (and its drop-ins and socket unit) into
 * *u. 0, or -errno with a line on stderr naming the file. */
int unit_read(struct unit *u, const char *file);

/* The access the unit's sandbox gives feedd to path (absolute), and the
 * key that decides it in key ("ProtectSystem=strict" when nothing more
 * specific matches, "ReadWritePaths=", ...). */
enum unit_access unit_access_of(const struct unit *u, const char *path, char *key, size_t cap);

/* A path made writable for feedd by systemd at start (CacheDirectory= and
 * the like) that is path or its parent: systemd makes it, owned by User=. */
bool unit_makes_dir(const struct unit *u, const char *path);

#endif
