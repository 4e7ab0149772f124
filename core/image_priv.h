/*
 * image_priv.h: private to core/image_*.c. The libjpeg error manager that
 * the probe and the decoder share: errors and warnings alike (a warning is
 * corrupt data that libjpeg would paper over with grey) jump back to the
 * caller's setjmp with the library's own words. And the format sniffer.
 */
#ifndef FEED_IMAGE_PRIV_H
#define FEED_IMAGE_PRIV_H

#include <setjmp.h>
#include <stddef.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

#include "image.h"

struct img_jpeg_err {
	struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to it */
	jmp_buf jmp;               /* where error_exit and warnings jump */
	int code;                  /* -EBADMSG, or -ENOTSUP for a variant we lack */
	char msg[JMSG_LENGTH_MAX]; /* the library's message */
};

/* Installs e as cinfo's error manager (call before jpeg_create_*). */
struct jpeg_error_mgr *img_jpeg_err_init(struct img_jpeg_err *e);

/* The format the magic bytes say (IMG_FORMAT_JPEG or _PNG), or -ENOTSUP
 * naming what they are, or -EBADMSG when too short to tell. */
int img_sniff(const void *data, size_t len, struct feed_err *err);

#endif
