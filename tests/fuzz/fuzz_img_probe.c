/*
 * fuzz_img_probe: an encoded image record as ingest and planning see it,
 * through img_probe() (the JPEG and PNG header probe). Invariants: a
 * refusal names what was wrong; an accepted header is JPEG or PNG with
 * both sides in 1..IMG_DIM_MAX, 1..4 channels and a bit depth the format
 * has (JPEG 8; PNG 1, 2, 4, 8 or 16), CMYK only in a JPEG, a palette only
 * in a PNG; and probing is a pure function of the bytes.
 */
#include <string.h>

#include "fuzz.h"
#include "image.h"

static void fuzz_check_info(const struct img_info *in)
{
	FUZZ_CHECK(in->format == IMG_FORMAT_JPEG || in->format == IMG_FORMAT_PNG, "format %d",
		   (int)in->format);
	FUZZ_CHECK(in->width >= 1 && in->width <= IMG_DIM_MAX && in->height >= 1 &&
		   in->height <= IMG_DIM_MAX, "%ux%u", in->width, in->height);
	FUZZ_CHECK(in->channels >= 1 && in->channels <= 4, "%u channels", in->channels);
	if (in->format == IMG_FORMAT_JPEG) {
		FUZZ_CHECK(in->bit_depth == 8 && !in->palette, "JPEG: %u bits, palette %d",
			   in->bit_depth, in->palette);
	} else {
		uint32_t d = in->bit_depth;
		FUZZ_CHECK((d == 1 || d == 2 || d == 4 || d == 8 || d == 16) && !in->cmyk,
			   "PNG: %u bits, cmyk %d", d, in->cmyk);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	struct img_info info, again;
	int rc = img_probe(data, size, &info, &err);

	if (rc < 0) {
		FUZZ_CHECK(err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	fuzz_check_info(&info);
	FUZZ_CHECK(img_probe(data, size, &again, NULL) == 0 && !memcmp(&info, &again, sizeof(info)),
		   "a second probe of the same bytes differs");
	return 0;
}
