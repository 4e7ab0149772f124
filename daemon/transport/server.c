/*
 * server.c: the listening socket and connections (see server.h). Loop
 * thread only; every socket non-blocking. Never interprets a packet
 * (session.c does) and never lets a slow peer grow its memory: replies wait
 * in order while the peer does not read them, reading stops while one
 * waits (so only answers to requests already read can queue: an open's
 * or a reload's, which come later), and past SRV_OUT_MAX the connection
 * is closed.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fault_seam.h"
#include "log_limit.h"
#include "quota.h"

#define SRV_BACKLOG 128
#define SRV_READ_BURST 16          /* packets per readable event, for fairness */
#define SRV_ACCEPT_BURST 64
#define SRV_ACCEPT_PAUSE_MS 1000   /* after EMFILE: let descriptors free up */
#define SRV_OUT_MAX 64             /* replies waiting per connection, at most */
#define SRV_POLL_TABLE_MAX 65534   /* descriptors libuv's table is grown for at start
				    * (8 bytes each: 512 KiB at most) */

struct srv {
	struct dstate *d;
	const struct srv_handlers *h;  /* the protocol (session.c), static */
	int lock_fd;                   /* holds flock(LOCK_EX) while we run */
	char lock_path[CFG_SOCKET_PATH_MAX + 8]; /* <socket>.lock, removed at stop */
	int listen_fd;
	bool from_systemd;             /* listen_fd is systemd's (socket activation):
					* never chowned, chmodded or unlinked here */
	uv_poll_t listen_poll;
	uv_timer_t pause_timer;        /* resumes accepting after EMFILE */
	bool listening;                /* listen_poll initialised and open */
	bool stopped;
	struct srv_conn *conns;        /* open connections */
	uint32_t nconns;
	uint64_t next_id;
	struct log_limit refuse_log;   /* "connection refused" lines, all users together */
	uint8_t rbuf[WIRE_REQUEST_MAX];/* one packet at a time, loop thread only */
};

/* A reply waiting for room in the socket. */
struct srv_out {
	struct srv_out *next;          /* the next newer one */
	uint8_t *buf;
	size_t len;
	int fds[5];                    /* our duplicates, sent with buf */
	unsigned nfds;
	bool then_close;               /* close once it is sent */
};

static void srv_on_conn_io(uv_poll_t *h, int status, int events);
static void srv_listen_resume(struct srv *s);

/* ------------------------------------------------------------------ */
/* Connections                                                         */

static void srv_on_conn_closed(uv_handle_t *h)
{
	struct srv_conn *c = h->data;

	close(c->sock);
	while (c->out) {
		struct srv_out *o = c->out;
		c->out = o->next;
		free(o->buf);
		for (unsigned i = 0; i < o->nfds; i++)
			close(o->fds[i]);
		free(o);
	}
	acl_peer_clear(&c->peer);
	free(c);
}

static void srv_conn_close_now(struct srv_conn *c, const char *why)
{
	struct srv *s = c->d->srv;

	c->closing = true;
	log_info(&c->d->log, SRV_CONN_FMT ": closed: %s", SRV_CONN_ARGS(c), why);
	s->h->close(c->ses); /* its streams stop; their slots and regions are freed */
	c->ses = NULL;
	quota_conn_give(&c->d->quota, c->peer.uid);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	c->d->stats.connections = s->nconns;
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, srv_on_conn_closed);
}

void srv_conn_close(struct srv_conn *c, const char *why)
{
	if (c->closing || c->close_pending)
		return;
	if (c->busy) {
		c->close_pending = true;
		snprintf(c->close_why, sizeof(c->close_why), "%s", why);
		return;
	}
	srv_conn_close_now(c, why);
}

void srv_conn_hold(struct srv_conn *c)
{
	c->busy++;
}

void srv_conn_unhold(struct srv_conn *c)
{
	if (--c->busy == 0 && c->close_pending && !c->closing)
		srv_conn_close_now(c, c->close_why);
}

bool srv_conn_gone(const struct srv_conn *c)
{
	return c->closing || c->close_pending;
}

static void srv_poll(struct srv_conn *c, int events)
{
	int r = uv_poll_start(&c->poll, events, srv_on_conn_io);
	if (r < 0)
		srv_conn_close(c, uv_strerror(r));
}

/* Queues a reply behind those waiting (buf is taken; fds are duplicated).
 * A peer that lets more than SRV_OUT_MAX wait is closed. */
static void srv_queue(struct srv_conn *c, uint8_t *buf, size_t len, bool then_close,
		      const int *fds, unsigned nfds)
{
	char why[96];
	struct srv_out *o = c->nout < SRV_OUT_MAX ? calloc(1, sizeof(*o)) : NULL;

	if (!o) {
		free(buf);
		snprintf(why, sizeof(why), c->nout < SRV_OUT_MAX ? "out of memory for a reply" :
			 "%u replies not read by the peer", c->nout);
		srv_conn_close(c, why);
		return;
	}
	*o = (struct srv_out){.buf = buf, .len = len, .then_close = then_close};
	for (unsigned i = 0; i < nfds; i++) {
		int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			snprintf(why, sizeof(why), "cannot keep a reply's descriptors: %s",
				 strerror(errno));
			for (unsigned k = 0; k < o->nfds; k++)
				close(o->fds[k]);
			free(o);
			free(buf);
			srv_conn_close(c, why);
			return;
		}
		o->fds[o->nfds++] = fd;
	}
	if (c->out_tail)
		c->out_tail->next = o;
	else
		c->out = o;
	c->out_tail = o;
	c->nout++;
	/* Writable only: a half-closed peer must not keep waking us with
	 * RDHUP while the reply waits; a gone one shows as writable. */
	srv_poll(c, UV_WRITABLE);
}

static void srv_reply_any(struct srv_conn *c, uint8_t *buf, size_t len, bool then_close,
			  const int *fds, unsigned nfds)
{
	if (srv_conn_gone(c)) {
		free(buf);
		return;
	}
	if (c->out) {  /* in order: behind the replies waiting */
		srv_queue(c, buf, len, then_close, fds, nfds);
		return;
	}
	int r = wire_send_fds(c->sock, buf, len, fds, nfds);
	if (r == -EAGAIN) {
		srv_queue(c, buf, len, then_close, fds, nfds);
		return;
	}
	free(buf);
	if (r < 0)
		srv_conn_close(c, r == -EPIPE || r == -ECONNRESET ? "peer went away" : strerror(-r));
	else if (then_close)
		srv_conn_close(c, "after the error reply");
}

void srv_reply(struct srv_conn *c, uint8_t *buf, size_t len, bool then_close)
{
	srv_reply_any(c, buf, len, then_close, NULL, 0);
}

void srv_reply_fds(struct srv_conn *c, uint8_t *buf, size_t len, const int *fds,
		   unsigned nfds)
{
	srv_reply_any(c, buf, len, false, fds, nfds);
}

/* Sends the waiting replies, oldest first, while the socket takes them. */
static void srv_flush(struct srv_conn *c)
{
	while (c->out && !srv_conn_gone(c)) {
		struct srv_out *o = c->out;
		int r = wire_send_fds(c->sock, o->buf, o->len, o->fds, o->nfds);
		if (r == -EAGAIN)
			return;
		c->out = o->next;
		if (!c->out)
			c->out_tail = NULL;
		c->nout--;
		bool then_close = o->then_close;
		free(o->buf);
		for (unsigned i = 0; i < o->nfds; i++)
			close(o->fds[i]);
		free(o);
		if (r < 0)
			srv_conn_close(c, r == -EPIPE || r == -ECONNRESET ? "peer went away" :
					   strerror(-r));
		else if (then_close)
			srv_conn_close(c, "after the error reply");
	}
	if (!srv_conn_gone(c))
		srv_poll(c, UV_READABLE | UV_DISCONNECT);
}

static void srv_read(struct srv_conn *c)
{
	struct srv *s = c->d->srv;
	struct wire_in in;

	for (int i = 0; i < SRV_READ_BURST && !srv_conn_gone(c) && !c->out; i++) {
		int r = wire_recv(c->sock, s->rbuf, sizeof(s->rbuf), &in);
		if (r == -EAGAIN)
			return;
		if (r == 0) {
			srv_conn_close(c, "peer closed the connection");
			return;
		}
		if (r < 0) {
			srv_conn_close(c, strerror(-r));
			return;
		}
		srv_conn_hold(c);
		fault_mark("packet");  /* test builds: fault_seam.h */
		s->h->packet(c->ses, s->rbuf, &in);
		fault_mark(NULL);
		srv_conn_unhold(c);
	}
}

static void srv_on_conn_io(uv_poll_t *h, int status, int events)
{
	struct srv_conn *c = h->data;

	if (status < 0) {
		srv_conn_close(c, uv_strerror(status));
		return;
	}
	if (c->out)
		srv_flush(c);
	else
		srv_read(c);  /* also on UV_DISCONNECT: reading finds the end */
}

/* Refuses a peer over its connection limit: one Error reply, then close.
 * A user who retries in a loop gets every refusal but not a log line each:
 * the lines are rate-limited over all users together. */
static void srv_refuse(struct srv *s, int fd, const struct acl_peer *p, const char *msg)
{
	uint8_t *buf;
	size_t len;

	uint64_t dropped;
	char note[LOG_LIMIT_NOTE_MAX];
	if (log_limit_allow(&s->refuse_log, uv_now(&s->d->loop), &dropped))
		log_warn(&s->d->log, "connection refused (uid %u pid %d): %s%s", (unsigned)p->uid,
			 (int)p->pid, msg, log_limit_note(dropped, note));
	if (wire_error_encode(0, -EUSERS, msg, &buf, &len) == 0) {
		wire_send(fd, buf, len);  /* best effort: the socket is new and empty */
		free(buf);
	}
}

/* A connection object for fd, linked and polled; NULL on failure (logged). */
static struct srv_conn *srv_conn_new(struct srv *s, int fd, const struct acl_peer *peer)
{
	struct dstate *d = s->d;
	struct srv_conn *c = calloc(1, sizeof(*c));
	int r = -ENOMEM;

	if (c) {
		c->d = d;
		c->sock = fd;
		c->peer = *peer;
		c->ses = s->h->open(c);
	}
	if (c && c->ses && (r = uv_poll_init(&d->loop, &c->poll, fd)) == 0) {
		c->id = ++s->next_id;
		c->poll.data = c;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->nconns++;
		d->stats.connections = s->nconns;
		return c;
	}
	log_error(&d->log, "connection dropped (uid %u pid %d): %s", (unsigned)peer->uid,
		  (int)peer->pid, uv_strerror(r));
	if (c)
		s->h->close(c->ses);
	free(c);
	return NULL;
}

static void srv_accept_one(struct srv *s, int fd)
{
	struct dstate *d = s->d;
	struct feed_err err = {0};
	struct acl_peer peer;
	struct srv_conn *c;

	if (acl_peer_read(fd, &peer, &err) < 0) {
		log_warn(&d->log, "connection dropped: %s", err.msg);
		close(fd);
		return;
	}
	int r = quota_conn_take(&d->quota, peer.uid, d->cfg->limits.max_connections, &err);
	if (r == -EUSERS) {
		stats_refused(&d->stats, r, false);
		srv_refuse(s, fd, &peer, err.msg);
		goto drop;
	}
	if (r < 0) {
		log_error(&d->log, "connection dropped: %s", err.msg);
		goto drop;
	}
	if (!(c = srv_conn_new(s, fd, &peer))) {
		quota_conn_give(&d->quota, peer.uid);
		goto drop;
	}
	log_debug(&d->log, SRV_CONN_FMT ": connected (gid %u)", SRV_CONN_ARGS(c), (unsigned)peer.gid);
	srv_poll(c, UV_READABLE | UV_DISCONNECT);
	return;
drop:
	acl_peer_clear(&peer);
	close(fd);
}

static void srv_on_pause_end(uv_timer_t *t)
{
	struct srv *s = t->data;

	if (!s->stopped)
		srv_listen_resume(s);
}

static void srv_on_listen(uv_poll_t *h, int status, int events)
{
	struct srv *s = h->data;

	for (int i = 0; i < SRV_ACCEPT_BURST && !s->stopped; i++) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			fault_mark("accept");  /* test builds: fault_seam.h */
			srv_accept_one(s, fd);
			fault_mark(NULL);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			log_warn(&s->d->log, "accept: %s; not accepting for %d ms", strerror(errno),
				 SRV_ACCEPT_PAUSE_MS);
			uv_poll_stop(&s->listen_poll);
			uv_timer_start(&s->pause_timer, srv_on_pause_end, SRV_ACCEPT_PAUSE_MS, 0);
		} else if (errno != EAGAIN) {
			log_error(&s->d->log, "accept: %s", strerror(errno));
		}
		return;
	}
}

static void srv_listen_resume(struct srv *s)
{
	int r = uv_poll_start(&s->listen_poll, UV_READABLE, srv_on_listen);
	if (r < 0)
		log_error(&s->d->log, "listen: uv_poll_start: %s", uv_strerror(r));
}

/* ------------------------------------------------------------------ */
/* Socket, directory, lock                                             */

/* An existing socket directory that socket_group's members cannot enter
 * locks them out whatever the socket's mode: say so (a warning, as in
 * --check-config). */
static void srv_rundir_warn(struct srv *s, const char *dir, const struct stat *st)
{
	const struct cfg *cfg = s->d->cfg;

	if (!cfg->has_socket_group || (st->st_mode & 0001) ||
	    (st->st_gid == cfg->socket_gid && (st->st_mode & 0010)))
		return;
	log_warn(&s->d->log, "socket directory %s (mode %04o, group %u): members of "
		 "socket_group %u cannot enter it, so cannot connect", dir,
		 (unsigned)(st->st_mode & 07777), (unsigned)st->st_gid, (unsigned)cfg->socket_gid);
}

/* Creates the socket's directory (only its last component) 0750, group
 * from the config, if it does not exist; an existing one is left as is. */
static int srv_rundir(struct srv *s, struct feed_err *err)
{
	const struct cfg *cfg = s->d->cfg;
	char dir[CFG_SOCKET_PATH_MAX + 1];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", cfg->socket_path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;  /* the current directory or / */
	*slash = '\0';
	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			return feed_err_set(err, -ENOTDIR, "socket directory %s: not a directory",
					    dir);
		srv_rundir_warn(s, dir, &st);
		return 0;
	}
	if (errno != ENOENT || mkdir(dir, 0750) < 0)
		return feed_err_set(err, -errno, "socket directory %s: %s", dir, strerror(errno));
	/* mkdir honoured the umask; chown before chmod keeps no window where
	 * the directory is open to a group it should not be. */
	if (cfg->has_socket_group && chown(dir, (uid_t)-1, cfg->socket_gid) < 0)
		return feed_err_set(err, -errno, "socket directory %s: chown to group %u: %s", dir,
				    (unsigned)cfg->socket_gid, strerror(errno));
	if (chmod(dir, 0750) < 0)
		return feed_err_set(err, -errno, "socket directory %s: chmod: %s", dir,
				    strerror(errno));
	log_info(&s->d->log, "created socket directory %s (mode 0750)", dir);
	return 0;
}

/* The holder's pid as written in its lock file, or "" (static buffer). */
static const char *srv_lock_holder(int fd)
{
	static char pid[32];
	ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);

	pid[n > 0 ? n : 0] = '\0';
	pid[strcspn(pid, "\n")] = '\0';
	return pid;
}

/* Opens and flocks path (the lock of socket sock): 0 when held; 1 if the
 * lock is ours but path no longer names the file locked (its holder
 * removed it on stopping: retry). */
static int srv_lock_once(const char *sock, const char *path, int *ret_fd, struct feed_err *err)
{
	struct stat a, b;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);

	if (fd < 0)
		return feed_err_set(err, -errno, "lock file %s: %s", path, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		const char *pid = srv_lock_holder(fd);
		close(fd);
		if (e == EWOULDBLOCK)
			return feed_err_set(err, -EBUSY, "another feedd%s%s%s is serving %s "
					    "(it holds %s); not starting", pid[0] ? " (pid " : "",
					    pid, pid[0] ? ")" : "", sock, path);
		return feed_err_set(err, -e, "lock file %s: flock: %s", path, strerror(e));
	}
	if (fstat(fd, &a) < 0 || stat(path, &b) < 0 || a.st_dev != b.st_dev ||
	    a.st_ino != b.st_ino) {
		close(fd);
		return 1;
	}
	*ret_fd = fd;
	return 0;
}

/* Takes <sock>.lock, or refuses naming the holder's pid. A stopping
 * feedd removes the file while it still holds the lock, so a lock won on
 * a file no longer at the path is worthless: try again on the new one. */
static int srv_lock(struct srv *s, const char *sock, struct feed_err *err)
{
	char pid[32];
	int fd = -1, r = 1;

	snprintf(s->lock_path, sizeof(s->lock_path), "%s.lock", sock);
	for (int tries = 0; r == 1 && tries < 100; tries++)
		r = srv_lock_once(sock, s->lock_path, &fd, err);
	if (r == 1)
		return feed_err_set(err, -EBUSY, "lock file %s: replaced under us 100 times",
				    s->lock_path);
	if (r < 0)
		return r;
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		log_warn(&s->d->log, "lock file %s: cannot record our pid: %s", s->lock_path,
			 strerror(errno));
	s->lock_fd = fd;
	return 0;
}

/* Removes a socket file left by a daemon that died (we hold the lock, so
 * nobody serves it); refuses to remove anything that is not a socket. */
static int srv_unlink_stale(const char *path, const struct log *lg, struct feed_err *err)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0
			: feed_err_set(err, -errno, "socket %s: %s", path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return feed_err_set(err, -EEXIST, "socket %s: exists and is not a socket", path);
	if (unlink(path) < 0)
		return feed_err_set(err, -errno, "socket %s: unlink: %s", path, strerror(errno));
	log_info(lg, "removed stale socket %s", path);
	return 0;
}

/* Binds and listens; mode and group are set before listen(), so no
 * client can connect while the socket is more open than configured. */
static int srv_bind(struct srv *s, struct feed_err *err)
{
	const struct cfg *cfg = s->d->cfg;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *path = cfg->socket_path;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return feed_err_set(err, -errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		feed_err_set(err, -errno, "socket %s: bind: %s", path, strerror(errno));
		goto fail;
	}
	if (cfg->has_socket_group && chown(path, (uid_t)-1, cfg->socket_gid) < 0) {
		feed_err_set(err, -errno, "socket %s: chown to group %u (socket_group): %s", path,
			     (unsigned)cfg->socket_gid, strerror(errno));
		goto fail_unlink;
	}
	if (chmod(path, 0660) < 0) {
		feed_err_set(err, -errno, "socket %s: chmod: %s", path, strerror(errno));
		goto fail_unlink;
	}
	if (listen(fd, SRV_BACKLOG) < 0) {
		feed_err_set(err, -errno, "socket %s: listen: %s", path, strerror(errno));
		goto fail_unlink;
	}
	s->listen_fd = fd;
	return 0;
fail_unlink:
	unlink(path);
fail:
	close(fd);
	return err->code;
}

/* The socket systemd passed: what path, mode and group it has is
 * feedd.socket's business (ListenSequentialPacket=, SocketMode=,
 * SocketGroup=); say what they are, and where they differ from the
 * config. The lock is taken when the directory lets us (a feedd started
 * by hand on the same path is then refused); systemd runs one of us. */
static int srv_adopt(struct srv *s, int fd, struct feed_err *err)
{
	const struct cfg *cfg = s->d->cfg;
	struct sockaddr_un sa = {0};
	socklen_t len = sizeof(sa);
	struct stat st;

	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || !sa.sun_path[0] ||
	    strlen(sa.sun_path) > CFG_SOCKET_PATH_MAX)
		return feed_err_set(err, -EINVAL, "socket from systemd (fd %d): not bound to a "
				    "path: feedd.socket needs ListenSequentialPacket=/PATH", fd);
	int r = srv_lock(s, sa.sun_path, err);
	if (r == -EBUSY)
		return r;
	if (r < 0)
		log_warn(&s->d->log, "%s; going on without it (systemd runs one feedd per socket)",
			 err->msg);
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return feed_err_set(err, -errno, "socket from systemd (fd %d): fcntl: %s", fd,
				    strerror(errno));
	if (strcmp(sa.sun_path, cfg->socket_path))
		log_warn(&s->d->log, "socket from systemd is %s, the config says %s; serving %s",
			 sa.sun_path, cfg->socket_path, sa.sun_path);
	if (stat(sa.sun_path, &st) < 0) {
		log_info(&s->d->log, "listening on %s (from systemd)", sa.sun_path);
	} else {
		log_info(&s->d->log, "listening on %s (from systemd: mode %04o, group %u)",
			 sa.sun_path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_gid);
		if (cfg->has_socket_group && st.st_gid != cfg->socket_gid)
			log_warn(&s->d->log, "socket_group is %u but systemd made the socket's "
				 "group %u: feedd.socket's SocketGroup= decides",
				 (unsigned)cfg->socket_gid, (unsigned)st.st_gid);
	}
	s->listen_fd = fd;
	s->from_systemd = true;
	return 0;
}

/* Makes the directory, takes the lock and binds the socket ourselves. */
static int srv_own_socket(struct srv *s, struct feed_err *err)
{
	struct dstate *d = s->d;
	int r;

	if ((r = srv_rundir(s, err)) < 0 || (r = srv_lock(s, d->cfg->socket_path, err)) < 0 ||
	    (r = srv_unlink_stale(d->cfg->socket_path, &d->log, err)) < 0 ||
	    (r = srv_bind(s, err)) < 0)
		return r;
	log_info(&d->log, "listening on %s (mode 0660%s)", d->cfg->socket_path,
		 d->cfg->has_socket_group ? ", group from socket_group" : "");
	return 0;
}

/* Moves the listening socket to the highest descriptor feedd may hold (up
 * to SRV_POLL_TABLE_MAX). libuv keeps its polled descriptors in a table
 * indexed by number, grows it when a higher one is first polled, and
 * aborts the process when that allocation fails (uv__io_start): a
 * connection accepted or a stream opened while memory is short would end
 * feedd. Polling the listening socket at the top grows the table once, at
 * start, for every descriptor below it. */
static void srv_listen_high(struct srv *s)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 2)
		return;
	rlim_t top = rl.rlim_cur < SRV_POLL_TABLE_MAX ? rl.rlim_cur : SRV_POLL_TABLE_MAX;
	int fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, (int)top - 1);
	if (fd < 0)
		return;  /* it stays where it was; only a shortage later may cost more */
	close(s->listen_fd);
	s->listen_fd = fd;
}

int srv_start(struct dstate *d, int sd_fd, const struct srv_handlers *h, struct srv **ret,
	      struct feed_err *err)
{
	struct srv *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return feed_err_set(err, -ENOMEM, "server: out of memory");
	s->d = d;
	s->h = h;
	s->lock_fd = s->listen_fd = -1;
	r = sd_fd >= 0 ? srv_adopt(s, sd_fd, err) : srv_own_socket(s, err);
	if (r < 0)
		goto fail;
	srv_listen_high(s);
	if ((r = uv_poll_init(&d->loop, &s->listen_poll, s->listen_fd)) < 0) {
		feed_err_set(err, r, "listen: uv_poll_init: %s", uv_strerror(r));
		if (!s->from_systemd) {
			unlink(d->cfg->socket_path);
			close(s->listen_fd);
		}
		goto fail;
	}
	s->listen_poll.data = s;
	uv_timer_init(&d->loop, &s->pause_timer);
	s->pause_timer.data = s;
	s->listening = true;
	srv_listen_resume(s);
	*ret = s;
	return 0;
fail:
	if (s->lock_fd >= 0) {
		unlink(s->lock_path);
		close(s->lock_fd);
	}
	free(s);
	return r;
}

/* Our descriptor of the socket goes; systemd's own copy stays open, so
 * under socket activation clients go on queueing in the backlog for the
 * next feedd. */
static void srv_on_listen_closed(uv_handle_t *h)
{
	struct srv *s = h->data;
	close(s->listen_fd);
	s->listen_fd = -1;
}

void srv_stop(struct srv *s)
{
	if (s->stopped)
		return;
	s->stopped = true;
	if (s->listening) {
		uv_close((uv_handle_t *)&s->listen_poll, srv_on_listen_closed);
		uv_close((uv_handle_t *)&s->pause_timer, NULL);
		if (!s->from_systemd)
			unlink(s->d->cfg->socket_path);
	}
	/* Removed while still held: a feedd starting now makes a new file
	 * (srv_lock() sees the difference), and none is left behind if a
	 * second signal ends us before srv_free(). */
	if (s->lock_fd >= 0)
		unlink(s->lock_path);
	while (s->conns)
		srv_conn_close(s->conns, "daemon stopping");
}

void srv_free(struct srv *s)
{
	if (!s)
		return;
	if (s->lock_fd >= 0)
		close(s->lock_fd);  /* releases the lock; srv_stop() removed the file */
	free(s);
}

uint32_t srv_connections(const struct srv *s)
{
	return s->nconns;
}

