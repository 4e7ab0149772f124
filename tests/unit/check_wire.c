/*
 * check_wire.c: unit tests of daemon/transport/wire.c, the daemon's side of the
 * control protocol: the size caps, undecodable and truncated requests,
 * unknown request kinds, field range checks, NUL bytes inside strings,
 * reply size limit, and the
 * packet layer on a real SOCK_SEQPACKET pair (oversized packets, attached
 * descriptors closed, end of stream, no SIGPIPE).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_util.h"
#include "feed_text.h"
#include "wire.h"

/* Packs a hello request into a new buffer. */
static uint8_t *pack_hello(const char *name, uint32_t lo, uint32_t hi, size_t *ret_len)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__Hello h = FEED__HELLO__INIT;

	h.client_name = feed_pb_text(name);
	h.min_version = lo;
	h.max_version = hi;
	req.id = 5;
	req.body_case = FEED__REQUEST__BODY_HELLO;
	req.hello = &h;
	*ret_len = feed__request__get_packed_size(&req);
	uint8_t *buf = malloc(*ret_len);
	ck_assert_ptr_nonnull(buf);
	feed__request__pack(&req, buf);
	return buf;
}

/* Decodes and checks buf as ses_packet() does; returns the first failing
 * code (or 0). */
static int decode_check(const void *buf, size_t len, struct feed_err *err)
{
	Feed__Request *req = NULL;

	memset(err, 0, sizeof(*err));
	int r = wire_request_decode(buf, len, &req, err);
	if (r == 0)
		r = wire_request_check(req, err);
	wire_request_free(req);
	return r;
}

START_TEST(test_wire_hello_roundtrip)
{
	struct feed_err err = {0};
	Feed__Request *req = NULL;
	size_t len;
	uint8_t *buf = pack_hello("trainer", 1, 3, &len);

	ck_assert_int_eq(wire_request_decode(buf, len, &req, &err), 0);
	ck_assert_int_eq(wire_request_check(req, &err), 0);
	ck_assert_uint_eq(req->id, 5);
	ck_assert_int_eq(req->body_case, FEED__REQUEST__BODY_HELLO);
	ck_assert_str_eq(wire_str(req->hello->client_name), "trainer");
	ck_assert_uint_eq(req->hello->max_version, 3);
	wire_request_free(req);
	free(buf);
}
END_TEST

START_TEST(test_wire_oversized)
{
	struct feed_err err;
	uint8_t *big = calloc(1, WIRE_REQUEST_MAX + 1);

	ck_assert_int_eq(decode_check(big, WIRE_REQUEST_MAX + 1, &err), -EMSGSIZE);
	ck_assert_ptr_nonnull(strstr(err.msg, "65537 bytes exceeds the 65536 byte limit"));
	free(big);
}
END_TEST

START_TEST(test_wire_truncated)
{
	struct feed_err err;
	size_t len;
	uint8_t *buf = pack_hello("a-client-name", 1, 1, &len);

	/* Every cut inside the hello sub-message leaves a length running past
	 * the end. */
	for (size_t cut = 3; cut < len; cut++)
		ck_assert_int_eq(decode_check(buf, cut, &err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err.msg, "undecodable request"));
	free(buf);
}
END_TEST

START_TEST(test_wire_garbage)
{
	static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					  0xff, 0xff, 0xff, 0xff};
	struct feed_err err;

	ck_assert_int_eq(decode_check(garbage, sizeof(garbage), &err), -EBADMSG);
}
END_TEST

START_TEST(test_wire_unknown_kind)
{
	/* id = 7, then field 15 (a request kind from the future), empty. */
	static const uint8_t future[] = {0x08, 0x07, 0x7a, 0x00};
	static const uint8_t empty[] = {0x08, 0x07};
	struct feed_err err;

	ck_assert_int_eq(decode_check(future, sizeof(future), &err), -EOPNOTSUPP);
	ck_assert_str_eq(err.msg, "unknown request (field 15)");
	ck_assert_int_eq(decode_check(empty, sizeof(empty), &err), -EOPNOTSUPP);
	ck_assert_ptr_nonnull(strstr(err.msg, "empty request"));
}
END_TEST

START_TEST(test_wire_hello_ranges)
{
	struct feed_err err;
	char longname[80];
	size_t len;
	uint8_t *buf;

	memset(longname, 'n', 65);
	longname[65] = '\0';
	buf = pack_hello("x", 0, 1, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "version range 0..1"));
	free(buf);
	buf = pack_hello("x", 3, 2, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	free(buf);
	buf = pack_hello(longname, 1, 1, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "hello.client_name: 65 bytes"));
	free(buf);
	buf = pack_hello("tab\there", 1, 1, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	free(buf);
	longname[64] = '\0';
	buf = pack_hello(longname, 1, 1, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), 0);
	free(buf);
}
END_TEST

static int check_info(const char *name, struct feed_err *err)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;
	uint8_t buf[256];

	q.name = feed_pb_text(name);
	req.body_case = FEED__REQUEST__BODY_DATASET_INFO;
	req.dataset_info = &q;
	size_t len = feed__request__pack(&req, buf);
	return decode_check(buf, len, err);
}

START_TEST(test_wire_dataset_name)
{
	struct feed_err err;
	char long64[65];

	memset(long64, 'a', 64);
	long64[64] = '\0';
	ck_assert_int_eq(check_info("fashion-mnist_1.0", &err), 0);
	ck_assert_int_eq(check_info("", &err), -EINVAL);
	ck_assert_int_eq(check_info("../etc", &err), -EINVAL);
	ck_assert_int_eq(check_info("a b", &err), -EINVAL);
	ck_assert_int_eq(check_info(long64, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "dataset_info.name"));
}
END_TEST

/* An open_stream with device request d, through the decoder and checks. */
static int check_device(Feed__DeviceRequest *d, struct feed_err *err)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;
	uint8_t buf[512];

	o.dataset = feed_pb_text("ds");
	o.batch = 4;
	o.device = d;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &o;
	size_t len = feed__request__pack(&req, buf);
	return decode_check(buf, len, err);
}

/* Every number of a device request is in range, and each refusal names it. */
START_TEST(test_wire_device_request)
{
	struct feed_err err;
	uint8_t uuid[17] = {0};
	float mean[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, sd[5] = {1, 1, 1, 1, 1};
	Feed__DeviceRequest d = FEED__DEVICE_REQUEST__INIT;

	d.uuid = (ProtobufCBinaryData){16, uuid};
	d.pid = 1234;
	d.mean = mean;
	d.std = sd;
	d.n_mean = d.n_std = 3;
	ck_assert_int_eq(check_device(&d, &err), 0);
	d.uuid.len = 17;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.device.uuid: 17 bytes, a GPU's UUID has 16");
	d.uuid.len = 16;
	d.dtype = 3;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "open_stream.device.dtype: 3"));
	d.dtype = 2;
	d.layout = 2;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "open_stream.device.layout: 2"));
	d.layout = 1;
	d.n_mean = 5;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "at most 4 each"));
	d.n_mean = 3;
	sd[2] = 0;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.device.std[2]: must be finite and not 0");
	sd[2] = 1;
	mean[1] = NAN;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.device.mean[1]: not finite");
	mean[1] = 0.5f;
	d.pid = 0;
	ck_assert_int_eq(check_device(&d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "open_stream.device.pid: 0"));
}
END_TEST

/* Packs req and turns every '#' of the packed bytes into a NUL: the way
 * to put a NUL inside a string protobuf-c would pack only up to it. */
static uint8_t *pack_with_nuls(const Feed__Request *req, size_t *ret_len)
{
	size_t len = feed__request__get_packed_size(req);
	uint8_t *buf = malloc(len);

	ck_assert_ptr_nonnull(buf);
	feed__request__pack(req, buf);
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '#')
			buf[i] = '\0';
	*ret_len = len;
	return buf;
}

/* An open_stream request for dataset and pipeline, '#' turned into NUL. */
static int check_open_nul(const char *dataset, const char *pipeline, const char *resume,
			  struct feed_err *err)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;
	size_t len;

	o.dataset = feed_pb_text(dataset);
	o.pipeline = feed_pb_text(pipeline);
	o.batch = 4;
	o.resume.data = (uint8_t *)resume;
	o.resume.len = strlen(resume);
	req.id = 3;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &o;
	uint8_t *buf = pack_with_nuls(&req, &len);
	int r = decode_check(buf, len, err);
	free(buf);
	return r;
}

/* open_stream.job: printable ASCII of at most WIRE_JOB_MAX bytes, or "". */
START_TEST(test_wire_open_job)
{
	struct feed_err err;
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;
	char job[WIRE_JOB_MAX + 2];

	o.dataset = feed_pb_text("fmnist");
	o.batch = 4;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &o;
	ck_assert_int_eq(wire_request_check(&req, &err), 0);
	o.job = feed_pb_text("slurm-4242.0");
	ck_assert_int_eq(wire_request_check(&req, &err), 0);
	memset(job, 'j', WIRE_JOB_MAX);
	job[WIRE_JOB_MAX] = '\0';
	o.job = feed_pb_text(job);
	ck_assert_int_eq(wire_request_check(&req, &err), 0);
	job[WIRE_JOB_MAX] = 'j';
	job[WIRE_JOB_MAX + 1] = '\0';
	o.job = feed_pb_text(job);  /* a bytes field holds its length: set it again */
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.job: 129 bytes; at most 128 printable ASCII allowed");
	o.job = feed_pb_text("job\nfake_metric 1");
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "open_stream.job"));
}
END_TEST

START_TEST(test_wire_open_node_order)
{
	struct feed_err err;
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;

	o.dataset = feed_pb_text("fmnist");
	o.batch = 4;
	o.order = FEED__ORDER__ORDER_NODE;
	o.rank = 5;
	o.world = 8;
	o.nodes = 4;
	o.node = 2; /* 2 ranks a node: rank 5 is on node 2 */
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &o;
	ck_assert_int_eq(wire_request_check(&req, &err), 0);
	o.node = 1;
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "rank 5 of world 8 on 4 nodes"));
	ck_assert_ptr_nonnull(strstr(err.msg, "not node 1"));
	o.node = 1;
	o.nodes = 3; /* 3 nodes do not divide 8 ranks */
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
	o.nodes = 4;
	o.node = 2;
	o.node_deal = 7;
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "open_stream.node_deal"));
	o.node_deal = FEED__NODE_DEAL__NODE_DEAL_FIXED;
	ck_assert_int_eq(wire_request_check(&req, &err), 0);
	o.order = 4;
	ck_assert_int_eq(wire_request_check(&req, &err), -EINVAL);
}
END_TEST

static int check_on_error(uint32_t on_error, uint64_t max_bad, struct feed_err *err)
{
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__OpenStream o = FEED__OPEN_STREAM__INIT;
	uint8_t buf[512];

	o.dataset = feed_pb_text("ds");
	o.batch = 4;
	o.on_error = on_error;
	o.max_bad = max_bad;
	req.body_case = FEED__REQUEST__BODY_OPEN_STREAM;
	req.open_stream = &o;
	size_t len = feed__request__pack(&req, buf);
	return decode_check(buf, len, err);
}

/* on_error is fail (0) or skip (1); max_bad only with skip. */
START_TEST(test_wire_on_error)
{
	struct feed_err err;

	ck_assert_int_eq(check_on_error(0, 0, &err), 0);
	ck_assert_int_eq(check_on_error(1, 0, &err), 0);
	ck_assert_int_eq(check_on_error(1, 5, &err), 0);
	ck_assert_int_eq(check_on_error(2, 0, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.on_error: 2, allowed 0 (fail) or 1 (skip)");
	ck_assert_int_eq(check_on_error(0, 5, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.max_bad: only with on_error skip");
}
END_TEST

START_TEST(test_wire_string_nul_refused)
{
	struct feed_err err;
	Feed__Request req = FEED__REQUEST__INIT;
	Feed__DatasetQuery q = FEED__DATASET_QUERY__INIT;
	size_t len;
	uint8_t *buf;

	/* the name checks alone would see "fmnist" and pass it */
	ck_assert_int_eq(check_open_nul("fmnist#/../x", "", "", &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.dataset: a NUL byte at offset 6 (a string may "
				  "not hold one)");
	ck_assert_int_eq(check_open_nul("fmnist", "hflip#", "", &err), -EINVAL);
	ck_assert_str_eq(err.msg, "open_stream.pipeline: a NUL byte at offset 5 (a string may "
				  "not hold one)");
	/* bytes fields may hold anything; a clean request passes */
	ck_assert_int_eq(check_open_nul("fmnist", "hflip", "a#b", &err), 0);
	ck_assert_int_eq(check_open_nul("fmnist", "", "", &err), 0);

	buf = pack_hello("trainer#evil", 1, 1, &len);
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '#')
			buf[i] = '\0';
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "hello.client_name: a NUL byte"));
	free(buf);

	q.name = feed_pb_text("#");
	req.body_case = FEED__REQUEST__BODY_DATASET_INFO;
	req.dataset_info = &q;
	buf = pack_with_nuls(&req, &len);
	ck_assert_int_eq(decode_check(buf, len, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "dataset_info.name: a NUL byte at offset 0"));
	free(buf);
}
END_TEST

/* A request cut inside a field (its length, a text inside a message, a
 * varint) or holding a group is refused by the decoder itself, -EBADMSG,
 * before any check reads its text; an empty packet decodes to an empty
 * request, which the check refuses. */
START_TEST(test_wire_cut_request_refused)
{
	struct feed_err err = {0};
	static const uint8_t cut_len[] = {0x32, 0x05, 0x0a, 0x03, 'a'};   /* open_stream of 5, 2 there */
	static const uint8_t cut_inner[] = {0x32, 0x02, 0x0a, 0x09};      /* dataset of 9, none there */
	static const uint8_t cut_varint[] = {0x08, 0xff, 0xff};           /* id's varint never ends */
	static const uint8_t group[] = {0x0b, 0x0c};                      /* a group: not proto3 */

	ck_assert_int_eq(decode_check(cut_len, sizeof(cut_len), &err), -EBADMSG);
	ck_assert_int_eq(decode_check(cut_inner, sizeof(cut_inner), &err), -EBADMSG);
	ck_assert_int_eq(decode_check(cut_varint, sizeof(cut_varint), &err), -EBADMSG);
	ck_assert_int_eq(decode_check(group, sizeof(group), &err), -EBADMSG);
	ck_assert_int_eq(decode_check("", 0, &err), -EOPNOTSUPP);
	ck_assert_str_eq(err.msg, "empty request: no request kind set");
}
END_TEST

START_TEST(test_wire_reply_limit)
{
	struct feed_err err = {0};
	char *msg = malloc(WIRE_REPLY_MAX + 1);
	uint8_t *buf = NULL;
	size_t len;

	memset(msg, 'm', WIRE_REPLY_MAX);
	msg[WIRE_REPLY_MAX] = '\0';
	Feed__Reply reply = FEED__REPLY__INIT;
	Feed__Error e = FEED__ERROR__INIT;
	e.code = -EINVAL;
	e.message = msg;
	reply.body_case = FEED__REPLY__BODY_ERROR;
	reply.error = &e;
	ck_assert_int_eq(wire_reply_encode(&reply, &buf, &len, &err), -EMSGSIZE);
	ck_assert_ptr_null(buf);
	msg[100] = '\0';
	ck_assert_int_eq(wire_error_encode(9, -EACCES, msg, &buf, &len), 0);
	Feed__Reply *back = feed__reply__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(back);
	ck_assert_uint_eq(back->id, 9);
	ck_assert_int_eq(back->body_case, FEED__REPLY__BODY_ERROR);
	ck_assert_int_eq(back->error->code, -EACCES);
	ck_assert_uint_eq(strlen(back->error->message), 100);
	feed__reply__free_unpacked(back, NULL);
	free(buf);
	free(msg);
}
END_TEST

static void seqpair(int sv[2])
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

START_TEST(test_wire_recv_packets)
{
	int sv[2];
	uint8_t buf[64];
	struct wire_in in;

	seqpair(sv);
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), -EAGAIN);
	ck_assert_int_eq(wire_send(sv[1], "hello", 5), 0);
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), 1);
	ck_assert_uint_eq(in.len, 5);
	ck_assert(!in.truncated && !in.ctrunc && in.nfds == 0);
	ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
	/* Larger than the buffer: the real size, and marked truncated. */
	uint8_t big[100] = {0};
	ck_assert_int_eq(wire_send(sv[1], big, sizeof(big)), 0);
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), 1);
	ck_assert_uint_eq(in.len, 100);
	ck_assert(in.truncated);
	close(sv[1]);
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), 0);
	close(sv[0]);
}
END_TEST

/* Sends "x" with fd attached. */
static void send_with_fd(int sock, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = "x", .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ck_assert_int_eq(sendmsg(sock, &mh, 0), 1);
}

START_TEST(test_wire_recv_closes_fds)
{
	int sv[2], pipefd[2];
	uint8_t buf[64];
	struct wire_in in;
	char ch;

	seqpair(sv);
	ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	send_with_fd(sv[1], pipefd[1]);
	close(pipefd[1]);  /* now only the copy in flight holds the write end */
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), 1);
	ck_assert_uint_eq(in.nfds, 1);
	ck_assert_uint_eq(in.len, 1);
	/* End of file on the pipe: the received copy was closed. */
	struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	ck_assert_int_eq(read(pipefd[0], &ch, 1), 0);
	close(pipefd[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* More descriptors than wire_recv() has room for: MSG_CTRUNC, those it saw
 * closed by it, the rest discarded by the kernel: none survive. */
START_TEST(test_wire_recv_ctrunc)
{
	enum { N = WIRE_FDS_MAX + 4 };
	int sv[2], pipefd[2], fds[N];
	union {
		char buf[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = "x", .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	uint8_t buf[64];
	struct wire_in in;
	char ch;

	seqpair(sv);
	ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_ge(fds[i] = dup(pipefd[1]), 0);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	ck_assert_int_eq(sendmsg(sv[1], &mh, 0), 1);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	close(pipefd[1]);
	ck_assert_int_eq(wire_recv(sv[0], buf, sizeof(buf), &in), 1);
	ck_assert(in.ctrunc);
	ck_assert_uint_eq(in.nfds, WIRE_FDS_MAX);
	struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	ck_assert_int_eq(read(pipefd[0], &ch, 1), 0);
	close(pipefd[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_wire_send_no_sigpipe)
{
	int sv[2];

	seqpair(sv);
	close(sv[0]);
	/* With SIGPIPE at its default, a raised signal would kill the test. */
	ck_assert_int_eq(wire_send(sv[1], "x", 1), -EPIPE);
	close(sv[1]);
}
END_TEST

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("wire");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_wire_hello_roundtrip);
	tcase_add_test(tc, test_wire_oversized);
	tcase_add_test(tc, test_wire_truncated);
	tcase_add_test(tc, test_wire_garbage);
	tcase_add_test(tc, test_wire_unknown_kind);
	tcase_add_test(tc, test_wire_hello_ranges);
	tcase_add_test(tc, test_wire_dataset_name);
	tcase_add_test(tc, test_wire_device_request);
	tcase_add_test(tc, test_wire_on_error);
	tcase_add_test(tc, test_wire_string_nul_refused);
	tcase_add_test(tc, test_wire_open_job);
	tcase_add_test(tc, test_wire_open_node_order);
	tcase_add_test(tc, test_wire_cut_request_refused);
	tcase_add_test(tc, test_wire_reply_limit);
	tcase_add_test(tc, test_wire_recv_packets);
	tcase_add_test(tc, test_wire_recv_closes_fds);
	tcase_add_test(tc, test_wire_recv_ctrunc);
	tcase_add_test(tc, test_wire_send_no_sigpipe);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(wire_suite)
