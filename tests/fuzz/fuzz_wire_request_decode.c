/*
 * fuzz_wire_request_decode: a control packet as a client would send it,
 * through what session.c runs on every packet: wire_request_decode(), then
 * wire_request_check() on what decoded (its text first: no NUL byte).
 * Invariants: a refusal names what was wrong; what decoded packs, that
 * packing decodes again to the same bytes, and the check says the same of
 * it (nothing the daemon reads depends on how the bytes were spelt).
 */
#include <stdbool.h>
#include <string.h>

#include "feed.pb-c.h"
#include "fuzz.h"
#include "wire.h"

/* Fields protobuf-c kept without knowing them, in m or a message in it:
 * it packs them back as they came, field number 0 included, which it
 * then refuses to unpack (it lets an overlong key varint 0x85 0x00 spell
 * field 0 in, not a one-byte 0x05). No request the daemon acts on is
 * ever packed again, so those are left out of the round trip. */
static bool fuzz_unknown(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	if (m->n_unknown_fields)
		return true;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *at = (const char *)m + f->offset;
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			/* a stream's mixture sources (repeated MixtureSource) */
			size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
			const ProtobufCMessage *const *each = *(const ProtobufCMessage *const *const *)at;
			for (size_t k = 0; k < n; k++)
				if (each[k] && fuzz_unknown(each[k]))
					return true;
			continue;
		}
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
		    *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			continue;
		const ProtobufCMessage *const *sub = (const void *)at;
		if (*sub && fuzz_unknown(*sub))
			return true;
	}
	return false;
}

/* Packs req, unpacks and packs that again: the two packings must agree. */
static void fuzz_repack(const Feed__Request *req, int check_rc)
{
	size_t n = feed__request__get_packed_size(req);
	uint8_t *a = malloc(n + 1), *b = NULL;
	struct feed_err err = {0};

	FUZZ_CHECK(a, "malloc %zu", n + 1);
	FUZZ_CHECK(feed__request__pack(req, a) == n, "pack wrote other than %zu bytes", n);
	Feed__Request *again = NULL;
	FUZZ_CHECK(wire_request_decode(a, n, &again, &err) == 0 || n > WIRE_REQUEST_MAX,
		   "a packed request does not decode: %s", err.msg);
	if (again) {
		size_t m = feed__request__get_packed_size(again);
		FUZZ_CHECK(m == n, "repacked %zu bytes, first packed %zu", m, n);
		b = malloc(m + 1);
		FUZZ_CHECK(b, "malloc %zu", m + 1);
		feed__request__pack(again, b);
		FUZZ_CHECK(!memcmp(a, b, n), "repacking changed the bytes");
		int rc = wire_request_check(again, &err);
		FUZZ_CHECK(rc == check_rc, "check says %d of the repacked request, %d first", rc,
			   check_rc);
		wire_request_free(again);
	}
	free(b);
	free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	Feed__Request *req = NULL;
	int rc = wire_request_decode(data, size, &req, &err);

	if (rc < 0) {
		FUZZ_CHECK(!req && err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	rc = wire_request_check(req, &err);
	FUZZ_CHECK(rc == 0 || (rc < 0 && err.msg[0]), "check refused (%d) without a message", rc);
	if (!fuzz_unknown(&req->base))
		fuzz_repack(req, rc);
	wire_request_free(req);
	return 0;
}
