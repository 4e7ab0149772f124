/*
 * client.c: libfeedclient's connections: connect, hello, and one
 * request/reply exchange with a deadline (see feed/client.h). Runs on the
 * caller's thread; one connection is used by one thread at a time. Never
 * prints, never exits, never raises SIGPIPE, never keeps a descriptor the
 * daemon did not mean to send.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "feed_text.h"

int cl_fail(struct feed_conn *conn, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(conn->errmsg, sizeof(conn->errmsg), fmt, ap);
	va_end(ap);
	return code;
}

void cl_close(struct feed_conn *conn)
{
	if (conn->sock >= 0)
		close(conn->sock);
	conn->sock = -1;
}

/* A failure after which the connection cannot go on. */
static int cl_fatal(struct feed_conn *conn, int code, const char *what)
{
	cl_close(conn);
	return cl_fail(conn, code, "%s", what);
}

int cl_bad_reply(struct feed_conn *conn, const char *what)
{
	char msg[CL_ERRMSG_MAX];
	snprintf(msg, sizeof(msg), "unexpected reply from feedd: %s", what);
	return cl_fatal(conn, -EPROTO, msg);
}

static int64_t cl_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on the socket until deadline: 1 ready, -ETIMEDOUT, or
 * poll's -errno. */
static int cl_wait(struct feed_conn *conn, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - cl_now_ms();
		struct pollfd p = {.fd = conn->sock, .events = events};
		if (left <= 0)
			return -ETIMEDOUT;
		int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int cl_send(struct feed_conn *conn, const uint8_t *buf, size_t len, int64_t deadline)
{
	for (;;) {
		ssize_t n = send(conn->sock, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n >= 0)
			return (size_t)n == len ? 0 : -EIO;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int r = cl_wait(conn, POLLOUT, deadline);
		if (r < 0)
			return r;
	}
}

/* Takes the descriptors in mh: up to cap of them into fds (in order, *ret_n
 * counts them); any beyond cap, or all of them when fds is NULL, are
 * closed. Returns how many were closed. */
static unsigned cl_take_fds(struct msghdr *mh, int *fds, unsigned cap, unsigned *ret_n)
{
	unsigned closed = 0, n = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && n < cap) {
				fds[n++] = fd;
			} else {
				close(fd);
				closed++;
			}
		}
	}
	*ret_n = n;
	return closed;
}

static void cl_close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

/* Receives one packet into conn->rbuf: its length, or -errno (0 = closed).
 * Descriptors with it go to fds (room for CL_MAX_FDS, *ret_n of them) if
 * fds is not NULL; otherwise any descriptor is closed and refused
 * (-EBADF), as is a packet whose descriptors did not all fit. */
static ssize_t cl_recv(struct feed_conn *conn, int flags, int *fds, unsigned *ret_n)
{
	union {
		char buf[CMSG_SPACE(CL_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = conn->rbuf, .iov_len = CL_REPLY_MAX + 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	unsigned n = 0;
	ssize_t len;

	*ret_n = 0;
	do
		len = recvmsg(conn->sock, &mh, flags | MSG_CMSG_CLOEXEC | MSG_TRUNC);
	while (len < 0 && errno == EINTR);
	/* A daemon that answers and closes before reading our request makes
	 * the kernel report ECONNRESET once, ahead of the answer still queued
	 * (e.g. a connection-limit refusal): look once more. */
	if (len < 0 && errno == ECONNRESET) {
		len = recvmsg(conn->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC);
		if (len < 0)
			return -ECONNRESET;
	}
	if (len < 0)
		return -errno;
	if (cl_take_fds(&mh, fds, CL_MAX_FDS, &n) || (mh.msg_flags & MSG_CTRUNC)) {
		cl_close_fds(fds, n);
		return -EBADF;
	}
	if ((mh.msg_flags & MSG_TRUNC) || len > CL_REPLY_MAX) {
		cl_close_fds(fds, n);
		return -EMSGSIZE;
	}
	*ret_n = n;
	return len;
}

/* Copies a string from the daemon, truncated, with anything but printable
 * ASCII replaced: callers print these. */
static void cl_copy_text(char *out, size_t cap, const char *in)
{
	size_t i;

	for (i = 0; in[i] && i < cap - 1; i++)
		out[i] = in[i] >= 0x20 && in[i] < 0x7f ? in[i] : '?';
	out[i] = '\0';
}

/* An Error reply: its code (checked to be a negative errno) and message. */
static int cl_take_error(struct feed_conn *conn, const Feed__Reply *rep)
{
	int code = rep->error->code;

	if (code >= 0 || code < -4095)
		return cl_bad_reply(conn, "error reply with an invalid code");
	cl_copy_text(conn->errmsg, sizeof(conn->errmsg), rep->error->message);
	return code;
}

/* Decodes the packet in rbuf: 1 = the reply to id (in *ret), 0 = not for
 * us (skip), < 0 = an Error reply's code or a protocol failure. */
static int cl_decode(struct feed_conn *conn, size_t n, uint32_t id, Feed__Reply **ret)
{
	char msg[80];
	Feed__Reply *rep = feed__reply__unpack(NULL, n, conn->rbuf);

	if (!rep) {
		snprintf(msg, sizeof(msg), "undecodable reply (%zu bytes)", n);
		return cl_bad_reply(conn, msg);
	}
	if (rep->body_case == FEED__REPLY__BODY_ERROR && (rep->id == id || rep->id == 0)) {
		int r = cl_take_error(conn, rep);
		feed__reply__free_unpacked(rep, NULL);
		return r;
	}
	if (rep->id != id) {  /* an answer to a request given up on: stale */
		feed__reply__free_unpacked(rep, NULL);
		return 0;
	}
	*ret = rep;
	return 1;
}

/* Turns a failed receive into the connection's end. */
static int cl_recv_fail(struct feed_conn *conn, ssize_t n)
{
	char msg[CL_ERRMSG_MAX];

	if (n == 0 || n == -ECONNRESET)
		return cl_fatal(conn, -ECONNRESET, "feedd closed the connection");
	if (n == -EBADF)
		return cl_fatal(conn, -EPROTO, "feedd sent an unexpected file descriptor");
	if (n == -EMSGSIZE)
		return cl_bad_reply(conn, "reply larger than the protocol allows");
	snprintf(msg, sizeof(msg), "receive from feedd: %s", cl_os_strerror((int)n));
	return cl_fatal(conn, (int)n, msg);
}

/* Reads until the reply to id. With fds, that reply must carry exactly
 * nfds descriptors (stored in fds); descriptors with other packets (an
 * Error, a stale answer) are closed. */
static int cl_read_reply(struct feed_conn *conn, uint32_t id, int64_t deadline,
			 Feed__Reply **ret, int *fds, unsigned nfds)
{
	int got[CL_MAX_FDS];
	char msg[120];
	unsigned ngot;

	for (;;) {
		int r = cl_wait(conn, POLLIN, deadline);
		if (r == -ETIMEDOUT) {
			snprintf(msg, sizeof(msg), "no reply from feedd within %d ms; connection closed",
				 conn->timeout_ms);
			return cl_fatal(conn, r, msg);
		}
		if (r < 0)
			return cl_fatal(conn, r, "poll on the feedd socket failed");
		ssize_t n = cl_recv(conn, MSG_DONTWAIT, fds ? got : NULL, &ngot);
		if (n == -EAGAIN)
			continue;
		if (n <= 0)
			return cl_recv_fail(conn, n);
		r = cl_decode(conn, (size_t)n, id, ret);
		if (r == 1 && fds && ngot != nfds) {
			cl_close_fds(got, ngot);
			feed__reply__free_unpacked(*ret, NULL);
			*ret = NULL;
			snprintf(msg, sizeof(msg), "%u file descriptors with the reply, %u expected",
				 ngot, nfds);
			return cl_bad_reply(conn, msg);
		}
		if (r == 1) {
			if (fds)
				memcpy(fds, got, nfds * sizeof(int));
			return 0;
		}
		if (fds)
			cl_close_fds(got, ngot);
		if (r < 0)
			return r;
	}
}

/* After the daemon hung up on a send: it may have said why first (e.g. a
 * connection limit, answered at accept). */
static int cl_hung_up(struct feed_conn *conn, uint32_t id)
{
	Feed__Reply *rep = NULL;
	unsigned nfds;
	ssize_t n = cl_recv(conn, MSG_DONTWAIT, NULL, &nfds);
	int r = n > 0 ? cl_decode(conn, (size_t)n, id, &rep) : 0;

	if (rep)
		feed__reply__free_unpacked(rep, NULL);
	if (r < 0) {
		cl_close(conn);
		return r;
	}
	return cl_fatal(conn, -ECONNRESET, "feedd closed the connection");
}

int cl_call(struct feed_conn *conn, Feed__Request *req, Feed__Reply **ret)
{
	return cl_call_fds(conn, req, ret, NULL, 0);
}

int cl_call_fds(struct feed_conn *conn, Feed__Request *req, Feed__Reply **ret, int *fds,
		unsigned nfds)
{
	if (fds && (nfds == 0 || nfds > CL_MAX_FDS))
		return cl_fail(conn, -EINVAL, "cannot receive %u descriptors with a reply", nfds);
	if (conn->sock < 0)
		return cl_fail(conn, -ENOTCONN, "not connected to feedd");
	if (++conn->next_id == 0)
		conn->next_id = 1;  /* 0 marks replies that answer no request */
	req->id = conn->next_id;
	size_t len = feed__request__get_packed_size(req);
	if (len > CL_REQUEST_MAX)
		return cl_fail(conn, -EMSGSIZE, "request of %zu bytes exceeds %d", len,
			       CL_REQUEST_MAX);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return cl_fail(conn, -ENOMEM, "out of memory");
	feed__request__pack(req, buf);
	int64_t deadline = cl_now_ms() + conn->timeout_ms;
	int r = cl_send(conn, buf, len, deadline);
	free(buf);
	if (r == -EPIPE || r == -ECONNRESET)
		return cl_hung_up(conn, req->id);
	if (r == -ETIMEDOUT)
		return cl_fatal(conn, r, "feedd did not take the request in time; connection closed");
	if (r < 0)
		return cl_fatal(conn, r, "send to feedd failed");
	return cl_read_reply(conn, req->id, deadline, ret, fds, nfds);
}

/* ------------------------------------------------------------------ */
/* Connecting                                                          */

static const char *cl_socket_path(const char *path)
{
	const char *env = getenv("FEEDD_SOCKET");

	if (path)
		return path;
	return env && *env ? env : FEED_DEFAULT_SOCKET;
}

static int cl_connect(struct feed_conn *conn, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = conn->timeout_ms / 1000,
			     .tv_usec = (conn->timeout_ms % 1000) * 1000};

	if (strlen(path) >= sizeof(sa.sun_path))
		return cl_fail(conn, -ENAMETOOLONG, "socket path %s is longer than %zu bytes", path,
			       sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cl_fail(conn, -errno, "socket: %s", cl_os_strerror(errno));
	/* A full listen backlog makes connect wait; bound it by the timeout. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno == EINPROGRESS || errno == EAGAIN ? ETIMEDOUT : errno;
		close(fd);
		return cl_fail(conn, -e, "cannot reach feedd at %s: %s", path, cl_os_strerror(e));
	}
	conn->sock = fd;
	return 0;
}

/* Printable ASCII, at most 64 bytes: what the daemon accepts as a name. */
static void cl_client_name(char *out, size_t cap)
{
	const char *name = program_invocation_short_name;
	size_t i;

	for (i = 0; name && name[i] && i < cap - 1 && i < 64; i++)
		out[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	out[i] = '\0';
}

static int cl_hello(struct feed_conn *conn)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello h = FEED__HELLO__INIT;
	Feed__Reply *rep = NULL;
	char name[65];

	cl_client_name(name, sizeof(name));
	h.client_name = feed_pb_text(name);
	h.min_version = CL_PROTO_MIN;
	h.max_version = CL_PROTO_MAX;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &h;
	int r = cl_call(conn, &req, &rep);
	if (r < 0)
		return r;
	if (rep->body_case != FEED__REPLY__BODY_HELLO || rep->hello->version < CL_PROTO_MIN ||
	    rep->hello->version > CL_PROTO_MAX) {
		feed__reply__free_unpacked(rep, NULL);
		return cl_bad_reply(conn, "hello answered without a version this library speaks");
	}
	conn->version = rep->hello->version;
	cl_copy_text(conn->server_version, sizeof(conn->server_version),
		     rep->hello->server_version);
	feed__reply__free_unpacked(rep, NULL);
	return 0;
}

FEED_API int feed_conn_new(struct feed_conn **ret)
{
	struct feed_conn *conn = calloc(1, sizeof(*conn));

	if (!conn || !(conn->rbuf = malloc(CL_REPLY_MAX + 1))) {
		free(conn);
		return -ENOMEM;
	}
	conn->sock = -1;
	conn->timeout_ms = FEED_DEFAULT_TIMEOUT_MS;
	*ret = conn;
	return 0;
}

FEED_API int feed_conn_set_timeout(struct feed_conn *conn, int timeout_ms)
{
	if (!conn || timeout_ms <= 0)
		return -EINVAL;
	conn->timeout_ms = timeout_ms;
	return 0;
}

FEED_API int feed_conn_open(struct feed_conn *conn, const char *path)
{
	if (!conn)
		return -EINVAL;
	if (conn->sock >= 0)
		return cl_fail(conn, -EISCONN, "already connected");
	conn->errmsg[0] = '\0';
	path = cl_socket_path(path);
	int r = cl_connect(conn, path);
	if (r < 0)
		return r;
	r = cl_hello(conn);
	if (r < 0) {
		char detail[CL_ERRMSG_MAX];
		snprintf(detail, sizeof(detail), "%s", conn->errmsg);
		cl_close(conn);
		return cl_fail(conn, r, "feedd at %s: %s", path, detail);
	}
	if (path != conn->path) /* a reopening passes conn->path itself */
		snprintf(conn->path, sizeof(conn->path), "%s", path);
	conn->opens++;
	conn->errmsg[0] = '\0';
	return 0;
}

FEED_API int feed_connect(const char *path, struct feed_conn **ret)
{
	struct feed_conn *conn;
	int r = feed_conn_new(&conn);

	if (r < 0)
		return r;
	r = feed_conn_open(conn, path);
	if (r < 0) {
		feed_disconnect(conn);
		return r;
	}
	*ret = conn;
	return 0;
}

FEED_API void feed_disconnect(struct feed_conn *conn)
{
	if (!conn)
		return;
	cl_close(conn);
	free(conn->rbuf);
	free(conn);
}

FEED_API const char *feed_errmsg(const struct feed_conn *conn)
{
	return conn ? conn->errmsg : "";
}

FEED_API const char *feed_version(void)
{
	return FEED_CLIENT_VERSION;
}

/* What the codes mean coming from feedd or this library, where the C
 * library's words would mislead: -ENOSPC is never a full disk here, nor
 * -ESTALE a file handle. One row per code feedd sends (daemon/control) or
 * the library returns for a reason of its own. */
static const struct {
	int code;
	const char *words;
} cl_words[] = {
	{EUSERS, "Per-user limit reached (connections or streams)"},
	{ENOSPC, "Not enough room (slot memory limit, shared memory or buffer size)"},
	{ESTALE, "Resume token does not match the dataset version or pipeline"},
	{ENOENT, "No such dataset, stream or feedd socket"},
	{EPROTO, "Protocol error between feedd and the client"},
	{EINVAL, "Invalid argument or option"},
	{EMSGSIZE, "Message larger than the protocol allows"},
	{EPROTONOSUPPORT, "No protocol version in common with feedd"},
	{EOPNOTSUPP, "Request not supported by feedd"},
	{EBADMSG, "Corrupt data (a dataset block or a message)"},
	{ENOBUFS, "No buffer left (every credit held, or a slot too small)"},
	{ECONNRESET, "feedd closed the connection"},
	{ECONNREFUSED, "No feedd listening on the socket"},
	{ENOTCONN, "Not connected to feedd"},
	{EISCONN, "Already connected to feedd"},
	{ETIMEDOUT, "Timed out waiting for feedd"},
	{ENOMEM, "Out of memory"},
	{ENOLINK, "Detached from its group (released nothing within the group timeout)"},
};

const char *cl_os_strerror(int code)
{
	const char *s = strerrordesc_np(code < 0 ? -code : code);
	return s ? s : "Unknown error";
}

FEED_API const char *feed_strerror(int code)
{
	int e = code < 0 ? -code : code;

	if (code == 0)
		return "Success";
	for (size_t i = 0; i < sizeof(cl_words) / sizeof(cl_words[0]); i++)
		if (cl_words[i].code == e)
			return cl_words[i].words;
	return cl_os_strerror(code);
}
