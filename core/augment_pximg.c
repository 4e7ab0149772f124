/*
 * augment_pximg.c: the buffers of the image a PIXEL stage works on (struct
 * aug_px_img, augment_pixel.h): where a pass writes (the stage's
 * destination when the shape fits, else the scratch image that is not the
 * current one), and applying a pending colour table. Every pixel op calls
 * these; they call nothing.
 *
 * Threads: pure, the caller's buffers. Never allocates, blocks or prints.
 */
#include "augment_pixel.h"

uint8_t *px_target(struct aug_px_img *im, bool in_place)
{
	size_t need = (size_t)im->h * im->w * im->c;

	if (need <= im->dst_bytes && (in_place || im->dst != im->cur))
		return im->dst;
	if (in_place && (im->cur == im->buf[0] || im->cur == im->buf[1]))
		return (uint8_t *)im->cur;
	return im->cur == im->buf[0] ? im->buf[1] : im->buf[0];
}

void px_flush(struct aug_px_img *im)
{
	if (!im->lut_on)
		return;
	size_t n = (size_t)im->h * im->w;
	const uint8_t *s = im->cur;
	uint8_t *d = px_target(im, true);

	if (im->c == 1)
		for (size_t i = 0; i < n; i++)
			d[i] = im->lut[0][s[i]];
	else
		for (size_t i = 0; i < 3 * n; i += 3) {
			d[i] = im->lut[0][s[i]];
			d[i + 1] = im->lut[1][s[i + 1]];
			d[i + 2] = im->lut[2][s[i + 2]];
		}
	im->cur = d;
	im->lut_on = false;
}
