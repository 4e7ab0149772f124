/*
 * wire.c: packets and messages of the control protocol (see wire.h). Loop
 * thread, non-blocking calls only. Never keeps a received descriptor and
 * never reads a field it has not checked.
 */
#include "wire.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "feed_shm.h"

static void wire_close_fds(struct msghdr *mh, struct wire_in *in)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			close(fd);
			in->nfds++;
		}
	}
}

int wire_recv(int sock, void *buf, size_t cap, struct wire_in *ret)
{
	union {
		char buf[CMSG_SPACE(WIRE_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	struct wire_in in = {0};
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	wire_close_fds(&mh, &in);
	/* A zero-length read with no descriptors is the end of the stream: an
	 * empty packet is never sent by a client of this protocol. */
	if (n == 0 && !in.nfds && !(mh.msg_flags & MSG_CTRUNC))
		return 0;
	in.len = (size_t)n;
	in.truncated = (mh.msg_flags & MSG_TRUNC) || (size_t)n > cap;
	in.ctrunc = (mh.msg_flags & MSG_CTRUNC) != 0;
	*ret = in;
	return 1;
}

int wire_send(int sock, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = send(sock, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (size_t)n == len ? 0 : -EIO;  /* a packet goes whole or not at all */
}

int wire_send_fds(int sock, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	union {
		char buf[CMSG_SPACE(WIRE_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (nfds == 0)
		return wire_send(sock, buf, len);
	if (nfds > WIRE_FDS_MAX)
		return -EINVAL;
	memset(&ctl, 0, sizeof(ctl));
	mh.msg_control = ctl.buf;
	mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	do
		n = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (size_t)n == len ? 0 : -EIO;
}

/* protobuf-c's allocator (malloc), noting in *data when one failed: unpack
 * returns NULL for bytes that do not decode and for memory it could not
 * get alike, and only the first is the client's doing. Each block ends
 * with one NUL byte more than asked for, so a bytes field's data is a C
 * string once wire_request_check() found no NUL inside it (wire_str()). */
static void *wire_alloc(void *data, size_t size)
{
	char *p = malloc(size + 1);

	if (!p) {
		*(bool *)data = true;
		return NULL;
	}
	p[size] = '\0';
	return p;
}

static void wire_free(void *data, void *p)
{
	free(p);
}

int wire_request_decode(const void *buf, size_t len, Feed__Request **ret,
			struct feed_err *err)
{
	bool nomem = false;
	ProtobufCAllocator a = {.alloc = wire_alloc, .free = wire_free, .allocator_data = &nomem};

	if (len > WIRE_REQUEST_MAX)
		return feed_err_set(err, -EMSGSIZE, "request of %zu bytes exceeds the %d byte limit",
				    len, WIRE_REQUEST_MAX);
	Feed__Request *req = feed__request__unpack(&a, len, buf);
	if (!req && nomem)
		return feed_err_set(err, -ENOMEM, "out of memory decoding a request of %zu bytes",
				    len);
	if (!req)
		return feed_err_set(err, -EBADMSG, "undecodable request (%zu bytes)", len);
	*ret = req;
	return 0;
}

void wire_request_free(Feed__Request *req)
{
	if (req)
		feed__request__free_unpacked(req, NULL);
}

int wire_resume_decode(const void *buf, size_t len, Feed__ResumeToken **ret,
		       struct feed_err *err)
{
	Feed__ResumeToken *t = feed__resume_token__unpack(NULL, len, buf);

	if (!t || t->magic != FEED_RESUME_MAGIC) {
		wire_resume_free(t);
		return feed_err_set(err, -EINVAL, "resume token: not a feedd resume token");
	}
	*ret = t;
	return 0;
}

void wire_resume_free(Feed__ResumeToken *t)
{
	if (t)
		feed__resume_token__free_unpacked(t, NULL);
}

static bool wire_printable(const char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			return false;
	return true;
}

/* [A-Za-z0-9_.-], 1..63 bytes: what the config allows for a dataset name. */
static bool wire_name_ok(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n <= 63 &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

static int wire_hello_check(const Feed__Hello *h, struct feed_err *err)
{
	size_t n = h->client_name.len;

	if (n > WIRE_CLIENT_NAME_MAX || !wire_printable(wire_str(h->client_name)))
		return feed_err_set(err, -EINVAL, "hello.client_name: %zu bytes; at most %d "
				    "printable ASCII allowed", n, WIRE_CLIENT_NAME_MAX);
	if (h->min_version < 1 || h->max_version < h->min_version)
		return feed_err_set(err, -EINVAL, "hello: version range %u..%u is empty or "
				    "starts below 1", h->min_version, h->max_version);
	return 0;
}

/* The numbers a device request carries; whether feedd can serve it is
 * the session's (a refusal there is a reason, never an error). */
static int wire_device_check(const Feed__DeviceRequest *d, struct feed_err *err)
{
	if (d->uuid.len != 16)
		return feed_err_set(err, -EINVAL, "open_stream.device.uuid: %zu bytes, a GPU's "
				    "UUID has 16", d->uuid.len);
	if (d->dtype > 2)
		return feed_err_set(err, -EINVAL, "open_stream.device.dtype: %u, allowed 0 (fp32), "
				    "1 (fp16), 2 (bf16)", d->dtype);
	if (d->layout > 1)
		return feed_err_set(err, -EINVAL, "open_stream.device.layout: %u, allowed 0 (NCHW), "
				    "1 (NHWC)", d->layout);
	if (d->n_mean > 4 || d->n_std > 4)
		return feed_err_set(err, -EINVAL, "open_stream.device.mean/std: %zu and %zu values, "
				    "at most 4 each (channels)", d->n_mean, d->n_std);
	for (size_t i = 0; i < d->n_mean; i++)
		if (!isfinite(d->mean[i]))
			return feed_err_set(err, -EINVAL, "open_stream.device.mean[%zu]: not finite", i);
	for (size_t i = 0; i < d->n_std; i++)
		if (!isfinite(d->std[i]) || d->std[i] == 0.0f)
			return feed_err_set(err, -EINVAL, "open_stream.device.std[%zu]: must be "
					    "finite and not 0", i);
	if (d->pid <= 0)
		return feed_err_set(err, -EINVAL, "open_stream.device.pid: %d, the client's pid "
				    "is required", d->pid);
	return 0;
}

/* OpenStream's dataset or mixture, batch, credits and where the stream
 * stands: rank, world, order, nodes. */
static int wire_open_where_check(const Feed__OpenStream *o, struct feed_err *err)
{
	uint32_t world = o->world ? o->world : 1;

	if ((o->dataset.len || !o->n_mixture) && !wire_name_ok(wire_str(o->dataset)))
		return feed_err_set(err, -EINVAL, "open_stream.dataset: not a dataset name "
				    "(1..63 of A-Z a-z 0-9 _ . -)");
	if (o->n_mixture > WIRE_MIXTURE_MAX)
		return feed_err_set(err, -EINVAL, "open_stream.mixture: %zu sources, at most %d",
				    o->n_mixture, WIRE_MIXTURE_MAX);
	for (size_t i = 0; i < o->n_mixture; i++)
		if (!wire_name_ok(wire_str(o->mixture[i]->dataset)))
			return feed_err_set(err, -EINVAL, "open_stream.mixture[%zu].dataset: not a "
					    "dataset name (1..63 of A-Z a-z 0-9 _ . -)", i);
	if (o->batch < 1 || o->batch > WIRE_BATCH_MAX)
		return feed_err_set(err, -EINVAL, "open_stream.batch: %u, allowed 1..%d", o->batch,
				    WIRE_BATCH_MAX);
	if (o->credits > WIRE_CREDITS_MAX)
		return feed_err_set(err, -EINVAL, "open_stream.credits: %u, allowed 0..%d (0 = 4)",
				    o->credits, WIRE_CREDITS_MAX);
	if (world > WIRE_WORLD_MAX || o->rank >= world)
		return feed_err_set(err, -EINVAL, "open_stream.rank/world: rank %u of world %u "
				    "(world 1..%d, rank < world)", o->rank, world, WIRE_WORLD_MAX);
	if ((unsigned)o->order > FEED__ORDER__ORDER_NODE)
		return feed_err_set(err, -EINVAL, "open_stream.order: unknown order %d", (int)o->order);
	if (o->order == FEED__ORDER__ORDER_NODE) {
		uint32_t nodes = o->nodes ? o->nodes : 1;
		if (world % nodes || o->node != o->rank / (world / nodes))
			return feed_err_set(err, -EINVAL, "open_stream.nodes/node: rank %u of world "
					    "%u on %u nodes must be on node rank / (world / nodes), "
					    "not node %u (nodes must divide world)", o->rank, world,
					    nodes, o->node);
		if ((unsigned)o->node_deal > FEED__NODE_DEAL__NODE_DEAL_FIXED)
			return feed_err_set(err, -EINVAL, "open_stream.node_deal: unknown deal %d",
					    (int)o->node_deal);
	}
	return 0;
}

/* OpenStream's window, pipeline, resume, group, job, and what a failed
 * sample does; then its device request. */
static int wire_open_rest_check(const Feed__OpenStream *o, struct feed_err *err)
{
	if (o->window > WIRE_WINDOW_MAX)
		return feed_err_set(err, -EINVAL, "open_stream.window: %u blocks, at most %d",
				    o->window, WIRE_WINDOW_MAX);
	if (o->pipeline.len > WIRE_PIPELINE_MAX || !wire_printable(wire_str(o->pipeline)))
		return feed_err_set(err, -EINVAL, "open_stream.pipeline: at most %d printable "
				    "ASCII bytes", WIRE_PIPELINE_MAX);
	if (o->resume.len > WIRE_RESUME_MAX)
		return feed_err_set(err, -EINVAL, "open_stream.resume: %zu bytes, at most %d",
				    o->resume.len, WIRE_RESUME_MAX);
	if (o->group.len && !wire_name_ok(wire_str(o->group)))
		return feed_err_set(err, -EINVAL, "open_stream.group: not a group name "
				    "(1..63 of A-Z a-z 0-9 _ . -)");
	if (o->group_depth > WIRE_CREDITS_MAX || (o->group_depth && !o->group.len))
		return feed_err_set(err, -EINVAL, "open_stream.group_depth: %u, allowed 0..%d "
				    "(0 = twice the credits), and only with a group", o->group_depth,
				    WIRE_CREDITS_MAX);
	if (o->job.len > WIRE_JOB_MAX || !wire_printable(wire_str(o->job)))
		return feed_err_set(err, -EINVAL, "open_stream.job: %zu bytes; at most %d "
				    "printable ASCII allowed", o->job.len, WIRE_JOB_MAX);
	if (o->pad_last && (o->eval || o->drop_last))
		return feed_err_set(err, -EINVAL, "open_stream.pad_last: not with %s (%s)",
				    o->eval ? "eval" : "drop_last",
				    o->eval ? "eval delivers every sample once, unpadded"
					    : "drop_last leaves no partial batch to pad");
	if (o->on_error > 1)
		return feed_err_set(err, -EINVAL, "open_stream.on_error: %u, allowed 0 (fail) or "
				    "1 (skip)", o->on_error);
	if (o->max_bad && o->on_error != 1)
		return feed_err_set(err, -EINVAL, "open_stream.max_bad: only with on_error skip");
	return o->device ? wire_device_check(o->device, err) : 0;
}

static int wire_open_stream_check(const Feed__OpenStream *o, struct feed_err *err)
{
	int rc = wire_open_where_check(o, err);

	return rc < 0 ? rc : wire_open_rest_check(o, err);
}

/* A NUL byte in the text field b, named by path. */
static int wire_text_check(ProtobufCBinaryData b, const char *path, struct feed_err *err)
{
	const uint8_t *nul = b.len ? memchr(b.data, '\0', b.len) : NULL;

	if (nul)
		return feed_err_set(err, -EINVAL, "%s: a NUL byte at offset %zu (a string may not "
				    "hold one)", path, (size_t)(nul - b.data));
	return 0;
}

/* OpenStream's text fields, in field order. */
static int wire_open_text_check(const Feed__OpenStream *o, struct feed_err *err)
{
	int rc;

	if ((rc = wire_text_check(o->dataset, "open_stream.dataset", err)) < 0 ||
	    (rc = wire_text_check(o->pipeline, "open_stream.pipeline", err)) < 0 ||
	    (rc = wire_text_check(o->group, "open_stream.group", err)) < 0 ||
	    (rc = wire_text_check(o->job, "open_stream.job", err)) < 0)
		return rc;
	for (size_t i = 0; i < o->n_mixture; i++)
		if ((rc = wire_text_check(o->mixture[i]->dataset, "open_stream.mixture.dataset",
					  err)) < 0)
			return rc;
	return 0;
}

/* The text a request carries: protobuf-c hands bytes on with their
 * length, so "fm\0/../x" is refused here rather than read as "fm". */
static int wire_request_text_check(const Feed__Request *req, struct feed_err *err)
{
	switch (req->body_case) {
	case FEED__REQUEST__BODY_HELLO:
		return wire_text_check(req->hello->client_name, "hello.client_name", err);
	case FEED__REQUEST__BODY_DATASET_INFO:
		return wire_text_check(req->dataset_info->name, "dataset_info.name", err);
	case FEED__REQUEST__BODY_OPEN_STREAM:
		return wire_open_text_check(req->open_stream, err);
	default:
		return 0;
	}
}

int wire_request_check(const Feed__Request *req, struct feed_err *err)
{
	int rc = wire_request_text_check(req, err);

	if (rc < 0)
		return rc;
	switch (req->body_case) {
	case FEED__REQUEST__BODY_HELLO:
		return wire_hello_check(req->hello, err);
	case FEED__REQUEST__BODY_LIST_DATASETS:
	case FEED__REQUEST__BODY_STATS:
		return 0;
	case FEED__REQUEST__BODY_OPEN_STREAM:
		return wire_open_stream_check(req->open_stream, err);
	case FEED__REQUEST__BODY_CLOSE_STREAM:
	case FEED__REQUEST__BODY_RELOAD:
	case FEED__REQUEST__BODY_LIST_OPS:
		return 0;
	case FEED__REQUEST__BODY_DATASET_INFO:
		if (!wire_name_ok(wire_str(req->dataset_info->name)))
			return feed_err_set(err, -EINVAL, "dataset_info.name: not a dataset name "
					    "(1..63 of A-Z a-z 0-9 _ . -)");
		return 0;
	default:
		break;
	}
	if (req->base.n_unknown_fields)
		return feed_err_set(err, -EOPNOTSUPP, "unknown request (field %u)",
				    (unsigned)req->base.unknown_fields[0].tag);
	return feed_err_set(err, -EOPNOTSUPP, "empty request: no request kind set");
}

int wire_reply_encode(const Feed__Reply *reply, uint8_t **ret_buf, size_t *ret_len,
		      struct feed_err *err)
{
	size_t n = feed__reply__get_packed_size(reply);

	if (n > WIRE_REPLY_MAX)
		return feed_err_set(err, -EMSGSIZE, "reply of %zu bytes exceeds the %d byte limit",
				    n, WIRE_REPLY_MAX);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return feed_err_set(err, -ENOMEM, "reply of %zu bytes: out of memory", n);
	feed__reply__pack(reply, buf);
	*ret_buf = buf;
	*ret_len = n;
	return 0;
}

int wire_error_encode(uint32_t id, int code, const char *msg, uint8_t **ret_buf,
		      size_t *ret_len)
{
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__Error e = FEED__ERROR__INIT;

	e.code = code;
	e.message = (char *)msg;
	reply.id = id;
	reply.body_case = FEED__REPLY__BODY_ERROR;
	reply.error = &e;
	return wire_reply_encode(&reply, ret_buf, ret_len, NULL);
}
