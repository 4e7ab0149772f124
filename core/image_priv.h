/*
 * image_priv.h: private to core/image_*.c. The libjpeg error manager that
 * the probe and the decoder share, and the format sniffer.
 *
 * What is refused is what PIL refuses (its JpegDecode.c installs an error
 * manager that longjmps on errors and prints nothing for warnings, over a
 * suspending source that ImageFile.load() turns into "image file is
 * truncated" when libjpeg asks for bytes past the end): an error jumps
 * back to the caller's setjmp with the library's own words; a warning
 * (damaged entropy data, junk between markers: libjpeg fills in and goes
 * on) is counted, its first words kept, and decoding goes on; libjpeg
 * asking for data past the end (JWRN_JPEG_EOF from jpeg_mem_src) is a
 * refusal, except once every row has been read (PIL's decoder returns
 * then, whatever jpeg_finish_decompress still wanted). These are PIL's
 * defaults, which torchvision's ImageFolder loader uses; with
 * ImageFile.LOAD_TRUNCATED_IMAGES = True PIL would also decode cut files
 * (it feeds libjpeg a fake EOI), which feedd does not.
 */
#ifndef FEED_IMAGE_PRIV_H
#define FEED_IMAGE_PRIV_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

#include "image.h"

struct img_jpeg_err {
	struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to it */
	jmp_buf jmp;               /* where error_exit and warnings jump */
	int code;                  /* -EBADMSG, or -ENOTSUP for a variant we lack */
	char msg[JMSG_LENGTH_MAX]; /* the library's message */
	bool eof_ok;               /* every row read: running out of data is no error */
	unsigned warnings;         /* warnings since the last img_jpeg_err_reset() */
	char warn[JMSG_LENGTH_MAX]; /* the first of them, in the library's words */
};

/* Installs e as cinfo's error manager (call before jpeg_create_*). */
struct jpeg_error_mgr *img_jpeg_err_init(struct img_jpeg_err *e);

/* Forgets the last image's warnings and message (call before each image). */
void img_jpeg_err_reset(struct img_jpeg_err *e);

/* The format the magic bytes say (IMG_FORMAT_JPEG or _PNG), or -ENOTSUP
 * naming what they are, or -EBADMSG when too short to tell. */
int img_sniff(const void *data, size_t len, struct feed_err *err);

#endif
