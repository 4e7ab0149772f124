/*
 * augment.c: the per-sample work of a planned pipeline (see augment.h).
 *
 * Owns: composing crop / pad / flip runs into one source->destination
 * mapping, bilinear resize with torch's arithmetic, window copies, and the
 * pass-through of untouched fields.
 *
 * Threads: pure; runs on worker threads, any number at once on one plan.
 * Never allocates, blocks, prints, or reads outside the records it is
 * given (every source index is proven in range by the composed mapping).
 * Built with -ffp-contract=off: resize reproduces torch's float arithmetic
 * operation by operation (its fused multiply-adds are explicit fmaf()), so
 * the compiler must not contract anything else.
 */
#include "augment.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "augment_pixel.h"
#include "convert.h"
#include "philox.h"

/* ------------------------------------------------------------------ */
/* Draws to parameters                                                 */

void aug_random_crop_offsets(uint32_t h, uint32_t w, uint32_t size, uint32_t pad,
			     uint32_t u_top, uint32_t u_left, uint32_t *ret_top,
			     uint32_t *ret_left)
{
	assert(size <= h + 2 * pad && size <= w + 2 * pad);
	*ret_top = aug_randint(u_top, h + 2 * pad - size + 1);
	*ret_left = aug_randint(u_left, w + 2 * pad - size + 1);
}

int64_t aug_center_crop_offset(uint32_t n, uint32_t size)
{
	if (size > n)
		return -(int64_t)((size - n) / 2);
	uint32_t d = n - size, k = d / 2;
	/* d/2 = k + 0.5 when d is odd: Python's round goes to the even one */
	return (int64_t)((d & 1) && (k & 1) ? k + 1 : k);
}

/* U(a, b) from one draw, in double. */
static double aug_uniform(uint32_t u, double a, double b)
{
	return a + (b - a) * ((double)u * 0x1p-32);
}

void aug_rrc_box(uint32_t h, uint32_t w, const uint32_t scale_ppb[2], const uint64_t ratio_ppb[2],
		 const uint32_t u[22], struct img_box *ret_box)
{
	double area = (double)h * w;
	double s0 = scale_ppb[0] / 1e9, s1 = scale_ppb[1] / 1e9;
	double r0 = ratio_ppb[0] / 1e9, r1 = ratio_ppb[1] / 1e9;
	double lr0 = log(r0), lr1 = log(r1);

	for (uint32_t t = 0; t < 10; t++) {
		double target = area * aug_uniform(u[2 * t], s0, s1);
		double aspect = exp(aug_uniform(u[2 * t + 1], lr0, lr1));
		double bw = rint(sqrt(target * aspect)), bh = rint(sqrt(target / aspect));
		if (bw > 0 && bw <= w && bh > 0 && bh <= h) {
			ret_box->w = (uint32_t)bw;
			ret_box->h = (uint32_t)bh;
			ret_box->y = aug_randint(u[20], h - ret_box->h + 1);
			ret_box->x = aug_randint(u[21], w - ret_box->w + 1);
			return;
		}
	}
	/* fallback: the whole image, its aspect clamped to the ratio range */
	double in_ratio = (double)w / h;
	uint32_t bw = w, bh = h;
	if (in_ratio < r0) {
		double v = rint(bw / r0);
		bh = v < 1 ? 1 : v > h ? h : (uint32_t)v;
	} else if (in_ratio > r1) {
		double v = rint(bh * r1);
		bw = v < 1 ? 1 : v > w ? w : (uint32_t)v;
	}
	*ret_box = (struct img_box){.x = (w - bw) / 2, .y = (h - bh) / 2, .w = bw, .h = bh};
}

void aug_rrc_draws(const struct aug_ctx *ctx, uint32_t op, uint32_t u[22])
{
	uint32_t blk[4];

	for (uint32_t b = 0; b < 6; b++) {
		feed_rand_block(ctx->seed, ctx->epoch, ctx->sample, op, b, blk);
		for (uint32_t k = 0; k < 4 && 4 * b + k < 22; k++)
			u[4 * b + k] = blk[k];
	}
}

void aug_resize_short_dims(uint32_t h, uint32_t w, uint32_t n, uint32_t *ret_h, uint32_t *ret_w)
{
	uint32_t s = h < w ? h : w, l = h < w ? w : h;
	uint32_t nl = (uint32_t)((uint64_t)n * l / s);

	*ret_h = h < w ? n : h == w ? n : nl;
	*ret_w = h < w ? nl : n;
}

uint64_t aug_window_start(uint64_t n, uint64_t len, uint32_t u)
{
	assert(len >= 1 && len <= n && n - len < UINT32_MAX);
	return ((uint64_t)u * (n - len + 1)) >> 32;
}

/* ------------------------------------------------------------------ */
/* Crop / pad / flip runs: one mapping, one pass                       */

/* Output pixel (y, x) of the run reads source pixel (by + y, ax + sx * x)
 * when ylo <= y < yhi and xlo <= x < xhi, and is zero (padding) otherwise. */
struct aug_geo {
	int64_t by;       /* source row of output row 0 */
	int64_t ax;       /* source column of output column 0 */
	int sx;           /* +1, or -1 when flipped */
	uint32_t h, w;    /* current output size */
	uint32_t ylo, yhi; /* output rows that fall inside the source */
	uint32_t xlo, xhi; /* output columns that fall inside the source */
};

static uint32_t geo_clamp(int64_t v, uint32_t hi)
{
	return v < 0 ? 0 : v > (int64_t)hi ? hi : (uint32_t)v;
}

/* Crop nh x nw at (top, left) of the current output; negative or
 * overhanging offsets read zero padding. */
static void geo_crop(struct aug_geo *g, int64_t top, int64_t left, uint32_t nh, uint32_t nw)
{
	g->ylo = geo_clamp((int64_t)g->ylo - top, nh);
	g->yhi = geo_clamp((int64_t)g->yhi - top, nh);
	g->xlo = geo_clamp((int64_t)g->xlo - left, nw);
	g->xhi = geo_clamp((int64_t)g->xhi - left, nw);
	g->by += top;
	g->ax += g->sx * left;
	g->h = nh;
	g->w = nw;
}

static void geo_flip(struct aug_geo *g)
{
	uint32_t lo = g->w - g->xhi, hi = g->w - g->xlo;

	g->ax += g->sx * ((int64_t)g->w - 1);
	g->sx = -g->sx;
	g->xlo = lo;
	g->xhi = hi;
}

/* Short rows (28 bytes for Fashion-MNIST) cost more in libc calls than in
 * bytes: copy and clear them with fixed-size moves the compiler inlines,
 * overlapping the last one. */
static inline void row_copy(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 64) {
		memcpy(d, s, n);
	} else if (n >= 8) {
		for (size_t i = 0; i + 8 < n; i += 8)
			memcpy(d + i, s + i, 8);
		memcpy(d + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		memcpy(d, s, 4);
		memcpy(d + n - 4, s + n - 4, 4);
	} else {
		for (size_t i = 0; i < n; i++)
			d[i] = s[i];
	}
}

static inline void row_zero(uint8_t *d, size_t n)
{
	static const uint8_t zero[8];

	if (n >= 64) {
		memset(d, 0, n);
	} else if (n >= 8) {
		for (size_t i = 0; i + 8 < n; i += 8)
			memcpy(d + i, zero, 8);
		memcpy(d + n - 8, zero, 8);
	} else {
		for (size_t i = 0; i < n; i++)
			d[i] = 0;
	}
}

/* d[x] = s[-x] for x < n, eight bytes per byte swap. */
static inline void row_reverse(uint8_t *d, const uint8_t *s, size_t n)
{
	size_t x = 0;

	for (; x + 8 <= n; x += 8) {
		uint64_t v;
		memcpy(&v, s - x - 7, 8);
		v = __builtin_bswap64(v);
		memcpy(d + x, &v, 8);
	}
	for (; x < n; x++)
		d[x] = *(s - x);
}

static void geo_row(uint8_t *d, const uint8_t *srow, const struct aug_geo *g, uint32_t c)
{
	row_zero(d, (size_t)g->xlo * c);
	row_zero(d + (size_t)g->xhi * c, (size_t)(g->w - g->xhi) * c);
	if (g->xhi <= g->xlo)
		return;
	size_t n = g->xhi - g->xlo;
	const uint8_t *s = srow + (g->ax + g->sx * (int64_t)g->xlo) * c;
	d += (size_t)g->xlo * c;
	if (g->sx > 0) {
		row_copy(d, s, n * c);
	} else if (c == 1) {
		row_reverse(d, s, n);
	} else if (c == 3) {
		for (size_t x = 0; x < n; x++, d += 3, s -= 3) {
			d[0] = s[0];
			d[1] = s[1];
			d[2] = s[2];
		}
	} else {
		for (size_t x = 0; x < n; x++, d += c, s -= c)
			memcpy(d, s, c);
	}
}

static void geo_copy(const struct aug_geo *g, const uint8_t *src, uint32_t src_w, uint32_t c,
		     uint8_t *dst)
{
	size_t row = (size_t)g->w * c;

	for (uint32_t y = 0; y < g->h; y++, dst += row) {
		if (y < g->ylo || y >= g->yhi) {
			row_zero(dst, row);
			continue;
		}
		geo_row(dst, src + (size_t)(g->by + y) * src_w * c, g, c);
	}
}

static void geo_stage(const struct pipe_plan *p, const struct pipe_stage *st,
		      const struct aug_ctx *ctx, const uint8_t *src, uint8_t *dst)
{
	struct aug_geo g = {.sx = 1, .h = st->in_h, .w = st->in_w,
			    .yhi = st->in_h, .xhi = st->in_w};

	for (uint32_t j = 0; j < st->count; j++) {
		uint32_t i = p->stage_ops[st->first + j];
		const struct pipe_op *op = &p->spec.ops[i];
		const struct pipe_dims *dm = &p->dims[i];
		uint32_t u[4], top, left;
		if (op->kind == PIPE_CENTER_CROP) {
			geo_crop(&g, aug_center_crop_offset(dm->in_h, op->size),
				 aug_center_crop_offset(dm->in_w, op->size), op->size, op->size);
			continue;
		}
		feed_rand_block(ctx->seed, ctx->epoch, ctx->sample, i, 0, u); /* draws 0..3 */
		if (op->kind == PIPE_RANDOM_CROP) {
			aug_random_crop_offsets(dm->in_h, dm->in_w, op->size, op->pad, u[0], u[1],
						&top, &left);
			geo_crop(&g, (int64_t)top - op->pad, (int64_t)left - op->pad, op->size,
				 op->size);
		} else if (op->kind == PIPE_HFLIP && aug_hflip_decision(u[0], op->p_ppb)) {
			geo_flip(&g);
		}
	}
	assert(g.h == st->out_h && g.w == st->out_w);
	geo_copy(&g, src, st->in_w, st->c, dst);
}

/* ------------------------------------------------------------------ */
/* Bilinear resize                                                     */

/* Source indices and weights of one output coordinate, computed exactly as
 * torch's compute_source_index_and_lambda (ATen/native/UpSample.h): scale
 * in float, source index in double, weights in float. */
struct aug_lin {
	uint32_t i0, i1;  /* source indices (times channels in the table) */
	float l0, l1;     /* their weights */
};

static struct aug_lin aug_lin_of(uint32_t in, uint32_t out, uint32_t d)
{
	if (in == out)
		return (struct aug_lin){d, d, 1.0f, 0.0f};
	float scale = (float)in / (float)out;
	double real = (double)scale * ((double)d + 0.5) - 0.5;
	if (real < 0)
		real = 0;
	uint32_t i0 = (uint32_t)real;
	float l1 = (float)(real - i0);
	return (struct aug_lin){i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0f - l1, l1};
}

/* Round half to even (torch.round), clamped to [0, 255]. */
static uint8_t aug_round_u8(float v)
{
	if (!(v > 0.0f))
		return 0;
	if (v >= 255.0f)
		return 255;
	uint32_t i = (uint32_t)v;
	float frac = v - (float)i; /* exact */
	if (frac > 0.5f || (frac == 0.5f && (i & 1)))
		i++;
	return (uint8_t)i;
}

/* One channel: torch's channels-last kernel, which a (N, 1, H, W) tensor
 * takes: four weights h_i * w_j rounded to float, one rounding of the sum
 * (the products of a u8 and a float are exact in double). */
static void resize_row_c1(const uint8_t *r0, const uint8_t *r1, const struct aug_lin *cols,
			  struct aug_lin ly, uint32_t ow, uint8_t *dst)
{
	for (uint32_t x = 0; x < ow; x++) {
		const struct aug_lin *lx = &cols[x];
		float w00 = ly.l0 * lx->l0, w01 = ly.l0 * lx->l1;
		float w10 = ly.l1 * lx->l0, w11 = ly.l1 * lx->l1;
		double v = r0[lx->i0] * (double)w00 + r0[lx->i1] * (double)w01 +
			   r1[lx->i0] * (double)w10 + r1[lx->i1] * (double)w11;
		dst[x] = aug_round_u8((float)v);
	}
}

/* Several channels: torch's separable kernel, which a contiguous
 * (N, C, H, W) tensor with C > 1 takes: each row interpolated as
 * fma(a, w0, b * w1) in float, then the two rows the same way. */
static void resize_row_sep(const uint8_t *r0, const uint8_t *r1, const struct aug_lin *cols,
			   struct aug_lin ly, uint32_t ow, uint32_t c, uint8_t *dst)
{
	for (uint32_t x = 0; x < ow; x++) {
		const struct aug_lin *lx = &cols[x];
		for (uint32_t k = 0; k < c; k++) {
			float t0 = fmaf(r0[lx->i0 + k], lx->l0, (float)r0[lx->i1 + k] * lx->l1);
			float t1 = fmaf(r1[lx->i0 + k], lx->l0, (float)r1[lx->i1 + k] * lx->l1);
			*dst++ = aug_round_u8(fmaf(t0, ly.l0, t1 * ly.l1));
		}
	}
}

void aug_resize_u8(const uint8_t *src, uint32_t h, uint32_t w, uint32_t c, uint8_t *dst,
		   uint32_t oh, uint32_t ow, void *table)
{
	struct aug_lin *cols = table;

	for (uint32_t x = 0; x < ow; x++) {
		cols[x] = aug_lin_of(w, ow, x);
		cols[x].i0 *= c;
		cols[x].i1 *= c;
	}
	for (uint32_t y = 0; y < oh; y++, dst += (size_t)ow * c) {
		struct aug_lin ly = aug_lin_of(h, oh, y);
		const uint8_t *r0 = src + (size_t)ly.i0 * w * c, *r1 = src + (size_t)ly.i1 * w * c;
		if (c == 1)
			resize_row_c1(r0, r1, cols, ly, ow, dst);
		else
			resize_row_sep(r0, r1, cols, ly, ow, c, dst);
	}
}

/* ------------------------------------------------------------------ */
/* Windows                                                             */

static int window_stage(const struct pipe_plan *p, const struct pipe_stage *st,
			const struct aug_ctx *ctx, const uint8_t *src, size_t src_len,
			uint8_t *dst, struct feed_err *err)
{
	uint64_t n = st->in_elems ? st->in_elems : src_len / st->elem_bytes, start = 0;

	for (uint32_t j = 0; j < st->count; j++) {
		uint32_t i = p->stage_ops[st->first + j];
		uint64_t len = p->spec.ops[i].len;
		if (n < len)
			return feed_err_set(err, -EINVAL,
					    "sample %" PRIu64 ": field '%s': %" PRIu64
					    " elements, shorter than op %u random_window(len=%" PRIu64 ")",
					    ctx->sample, p->in.fields[st->field].name, n, i + 1, len);
		start += aug_window_start(n, len, feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample,
								 i, 0));
		n = len;
	}
	memcpy(dst, src + start * st->elem_bytes, st->out_bytes);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Image stages: decode, random_resized_crop, resize(short)            */

/* The source region an image stage reads and how it lands in the output:
 * the output (out_h x out_w) is the box (bx, by, bw, bh) of the source
 * (full-resolution pixels) resampled to that size, mirrored when flip;
 * with copy set there is no resampling (bw = out_w, bh = out_h), and the
 * box may hang over the image's edges (zero padding, center_crop). */
struct aug_frame {
	uint32_t src_h, src_w;   /* the source image */
	uint32_t h, w;           /* the current frame (the output once done) */
	double bx, by, bw, bh;   /* the frame's extent in source pixels */
	bool flip;               /* the frame is the source mirrored */
	bool copy;               /* no resampling so far */
};

/* Crops nh x nw at (top, left) of the current frame (which may be
 * mirrored) and maps it to source coordinates. */
static void frame_crop(struct aug_frame *fr, int64_t top, int64_t left, uint32_t nh, uint32_t nw)
{
	double kx = fr->bw / fr->w, ky = fr->bh / fr->h;

	if (fr->flip)
		left = (int64_t)fr->w - left - nw;
	fr->bx += (double)left * kx;
	fr->by += (double)top * ky;
	fr->bw = nw * kx;
	fr->bh = nh * ky;
	fr->h = nh;
	fr->w = nw;
}

/* Works out the stage's box and flip from the source size alone. */
static void frame_plan(const struct pipe_plan *p, const struct pipe_stage *st,
		       const struct aug_ctx *ctx, struct aug_frame *fr)
{
	for (uint32_t j = 0; j < st->count; j++) {
		uint32_t i = p->stage_ops[st->first + j];
		const struct pipe_op *op = &p->spec.ops[i];
		if (op->kind == PIPE_HFLIP) {
			if (aug_hflip_decision(feed_rand_u32(ctx->seed, ctx->epoch, ctx->sample, i, 0),
					       op->p_ppb))
				fr->flip = !fr->flip;
		} else if (op->kind == PIPE_RANDOM_RESIZED_CROP) {
			uint32_t u[22];
			struct img_box b;
			aug_rrc_draws(ctx, i, u);
			aug_rrc_box(fr->h, fr->w, op->scale_ppb, op->ratio_ppb, u, &b);
			frame_crop(fr, b.y, b.x, b.h, b.w);
			fr->h = fr->w = op->size;
			fr->copy = false;
		} else if (op->kind == PIPE_CENTER_CROP) {
			frame_crop(fr, aug_center_crop_offset(fr->h, op->size),
				   aug_center_crop_offset(fr->w, op->size), op->size, op->size);
		} else if (op->kind == PIPE_RESIZE) {
			if (op->short_side)
				aug_resize_short_dims(fr->h, fr->w, op->short_side, &fr->h, &fr->w);
			else {
				fr->h = op->h;
				fr->w = op->w;
			}
			fr->copy = false;
		}
	}
}

/* Copies the (integer, possibly overhanging) box of the decoded view v,
 * whose pixel (0, 0) is source pixel (x0, y0), to dst, zero outside the
 * source, mirrored when flip. */
static void frame_copy(const struct aug_frame *fr, const struct img_view *v, uint32_t x0,
		       uint32_t y0, uint8_t *dst)
{
	int64_t bx = (int64_t)floor(fr->bx + 0.5), by = (int64_t)floor(fr->by + 0.5);
	struct aug_geo g = {.sx = 1, .h = fr->h, .w = fr->w};
	size_t row = (size_t)fr->w * v->c;

	/* the box relative to the view, as a crop of the view */
	g.ylo = geo_clamp((int64_t)y0 - by, fr->h);
	g.yhi = geo_clamp((int64_t)y0 + v->h - by, fr->h);
	g.xlo = geo_clamp((int64_t)x0 - bx, fr->w);
	g.xhi = geo_clamp((int64_t)x0 + v->w - bx, fr->w);
	g.by = by - y0;
	g.ax = bx - x0;
	if (fr->flip)
		geo_flip(&g);
	for (uint32_t y = 0; y < g.h; y++, dst += row) {
		if (y < g.ylo || y >= g.yhi) {
			row_zero(dst, row);
			continue;
		}
		geo_row(dst, v->px + (size_t)(g.by + y) * v->stride, &g, v->c);
	}
}

static int image_fail(const struct pipe_plan *p, const struct pipe_stage *st,
		      const struct aug_ctx *ctx, int rc, struct feed_err *err)
{
	if (err && err->code == rc && err->msg[0])
		return feed_err_prefix(err, "sample %" PRIu64 ": field '%s'", ctx->sample,
				       p->in.fields[st->field].name);
	return feed_err_set(err, rc, "sample %" PRIu64 ": field '%s': not a readable image",
			    ctx->sample, p->in.fields[st->field].name);
}

/* The integer box enclosing the frame's source box, clipped to the image;
 * false when it is empty. */
static bool frame_enclosing(const struct aug_frame *fr, struct img_box *b)
{
	double x0 = fr->copy ? floor(fr->bx + 0.5) : floor(fr->bx);
	double y0 = fr->copy ? floor(fr->by + 0.5) : floor(fr->by);
	double x1 = fr->copy ? x0 + fr->w : ceil(fr->bx + fr->bw);
	double y1 = fr->copy ? y0 + fr->h : ceil(fr->by + fr->bh);

	x0 = x0 < 0 ? 0 : x0;
	y0 = y0 < 0 ? 0 : y0;
	x1 = x1 > fr->src_w ? fr->src_w : x1;
	y1 = y1 > fr->src_h ? fr->src_h : y1;
	if (x1 <= x0 || y1 <= y0)
		return false;
	*b = (struct img_box){(uint32_t)x0, (uint32_t)y0, (uint32_t)(x1 - x0), (uint32_t)(y1 - y0)};
	return true;
}

/* An encoded source: its decoder (for the stage's channels) and its size
 * into v. */
static int image_probe(const struct pipe_plan *p, const struct pipe_stage *st,
		       const struct aug_ctx *ctx, const uint8_t *src, size_t len,
		       const struct aug_img *img, struct img_view *v, struct img_decoder **ret_dec,
		       struct feed_err *err)
{
	struct img_decoder *dec = img ? (st->c == 1 ? img->dec1 : img->dec3) : NULL;
	struct img_info info;
	int rc;

	if (!dec)
		return feed_err_set(err, -EINVAL, "field '%s': no %u-channel image decoder",
				    p->in.fields[st->field].name, st->c);
	if ((rc = img_probe(src, len, &info, err)) < 0)
		return image_fail(p, st, ctx, rc, err);
	v->w = info.width;
	v->h = info.height;
	*ret_dec = dec;
	return 0;
}

/* A fixed u8 source: v the box ib of it to copy, or (a resample) the whole
 * image with the frame's box in its coordinates. */
static void fixed_view(const struct pipe_stage *st, const uint8_t *src,
		       const struct aug_frame *fr, const struct img_box *ib, struct img_view *v,
		       double *bx, double *by)
{
	v->px += (size_t)ib->y * v->stride + (size_t)ib->x * v->c;
	v->w = ib->w;
	v->h = ib->h;
	if (!fr->copy) {
		/* resample from the whole image: the box in its coordinates */
		*v = (struct img_view){.px = src, .w = st->in_w, .h = st->in_h, .c = st->c,
				       .stride = (size_t)st->in_w * st->c};
		*bx = fr->bx;
		*by = fr->by;
	}
}

/* One IMAGE stage: source bytes (encoded, or a fixed u8 image) to dst. */
static int image_stage(const struct pipe_plan *p, const struct pipe_stage *st,
		       const struct aug_ctx *ctx, const uint8_t *src, size_t len, uint8_t *dst,
		       uint8_t *iscratch, const struct aug_img *img, struct feed_err *err)
{
	struct aug_frame fr = {.copy = true};
	struct img_view v = {.px = src, .w = st->in_w, .h = st->in_h, .c = st->c,
			     .stride = (size_t)st->in_w * st->c};
	struct img_decoder *dec = NULL;
	struct img_box ib;
	int rc;

	if (st->decode && (rc = image_probe(p, st, ctx, src, len, img, &v, &dec, err)) < 0)
		return rc;
	fr.src_w = fr.w = v.w;
	fr.src_h = fr.h = v.h;
	fr.bw = v.w;
	fr.bh = v.h;
	frame_plan(p, st, ctx, &fr);
	assert(fr.h == st->out_h && fr.w == st->out_w);
	if (!frame_enclosing(&fr, &ib)) {
		memset(dst, 0, st->out_bytes); /* a crop wholly in the padding */
		return 0;
	}
	double bx = fr.bx - ib.x, by = fr.by - ib.y, bw = fr.bw, bh = fr.bh;
	const struct aug_pre *pre = img ? img->pre : NULL;
	if (dec && pre && pre->field == st->field && pre->box.x == ib.x && pre->box.y == ib.y &&
	    pre->box.w == ib.w && pre->box.h == ib.h && pre->view.c == st->c) {
		/* decoded ahead, at full scale: the view is the box, as a
		 * scale-1 decode's once offset to it (below) */
		v = pre->view;
	} else if (dec) {
		struct img_decoded d;
		/* decode(exact=true): full scale, never a reduced DCT scale */
		bool exact = p->spec.ops[p->stage_ops[st->first]].exact;
		uint32_t scale = fr.copy || exact ? 1 : img_scale_for(ib.w, ib.h, fr.w, fr.h);
		if ((rc = img_decode(dec, src, len, &ib, scale, &d, err)) < 0)
			return image_fail(p, st, ctx, rc, err);
		double kx = d.box_w / ib.w, ky = d.box_h / ib.h;
		v = d.view;
		if (fr.copy) {
			/* scale 1: the box starts at an integer offset of the view */
			v.px += (size_t)d.box_y * v.stride + (size_t)d.box_x * v.c;
			v.w = ib.w;
			v.h = ib.h;
		}
		bx = d.box_x + bx * kx;
		by = d.box_y + by * ky;
		bw *= kx;
		bh *= ky;
	} else {
		fixed_view(st, src, &fr, &ib, &v, &bx, &by);
	}
	if (fr.copy)
		frame_copy(&fr, &v, ib.x, ib.y, dst);
	else
		img_resample_u8(&v, bx, by, bw, bh, dst, fr.w, fr.h, fr.flip, iscratch);
	return 0;
}

int aug_image_box(const struct pipe_plan *p, uint32_t f, const struct aug_ctx *ctx,
		  const void *src, size_t len, struct img_box *ret_box, uint32_t *ret_c)
{
	if (f >= p->in.nfields || !p->field_nstages[f])
		return 0;
	const struct pipe_stage *st = &p->stages[p->field_stage[f]];
	struct aug_frame fr = {.copy = true};
	struct img_info info;
	struct img_box ib;
	struct feed_err err;

	if (st->kind != PIPE_STAGE_IMAGE || !st->decode ||
	    img_probe(src, len, &info, &err) < 0 || info.format != IMG_FORMAT_JPEG)
		return 0;
	/* as image_stage plans it */
	fr.src_w = fr.w = fr.bw = info.width;
	fr.src_h = fr.h = fr.bh = info.height;
	frame_plan(p, st, ctx, &fr);
	if (!frame_enclosing(&fr, &ib))
		return 0;
	*ret_box = ib;
	*ret_c = st->c;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Fields                                                              */

static int check_in(const struct pipe_plan *p, uint32_t f, const struct aug_in *in,
		    const struct aug_ctx *ctx, struct feed_err *err)
{
	const struct fmt_field *fd = &p->in.fields[f];
	size_t elem = fmt_field_elem_bytes(fd);

	if ((!fd->variable && in->len != fd->max_bytes) || (fd->variable && elem && in->len % elem))
		return feed_err_set(err, -EINVAL,
				    "sample %" PRIu64 ": field '%s': %zu bytes, want %s%zu",
				    ctx->sample, fd->name, in->len,
				    fd->variable ? "a multiple of " : "", elem);
	if (in->len && !in->data)
		return feed_err_set(err, -EINVAL, "sample %" PRIu64 ": field '%s': no data",
				    ctx->sample, fd->name);
	return 0;
}

static int no_room(const struct pipe_plan *p, uint32_t f, size_t need, size_t cap,
		   struct feed_err *err)
{
	return feed_err_set(err, -ENOBUFS, "field '%s': output needs %zu bytes, slot has %zu",
			    p->in.fields[f].name, need, cap);
}

/* to_chw: u8 h x w x c into c x h x w. */
static void chw_stage(const struct pipe_stage *st, const uint8_t *src, uint8_t *dst)
{
	size_t hw = (size_t)st->out_h * st->out_w;

	for (uint32_t ch = 0; ch < st->c; ch++)
		for (size_t k = 0; k < hw; k++)
			dst[ch * hw + k] = src[k * st->c + ch];
}

/* Runs field f's stages: the last one writes out->dst, the others
 * alternate between the two scratch buffers (the plan sized them, and
 * scratch is only touched when a field has more than one stage or a
 * resize). */
static int run_field(const struct pipe_plan *p, uint32_t f, const struct aug_ctx *ctx,
		     const struct aug_in *in, const struct aug_out *out, uint8_t *scratch,
		     const struct aug_img *img, struct feed_err *err)
{
	size_t inter = (p->inter_bytes + 63) & ~(size_t)63;
	/* no arithmetic on a NULL scratch (allowed when the plan needs none) */
	uint8_t *iscratch = scratch ? scratch + 2 * inter + ((p->table_bytes + 63) & ~(size_t)63)
				    : NULL;
	const uint8_t *src = in->data;
	size_t src_len = in->len;
	uint32_t s0 = p->field_stage[f], n = p->field_nstages[f];
	const struct pipe_stage *last = &p->stages[s0 + n - 1];

	if (out->cap < last->out_bytes)
		return no_room(p, f, last->out_bytes, out->cap, err);
	for (uint32_t k = 0; k < n; k++) {
		const struct pipe_stage *st = &p->stages[s0 + k];
		uint8_t *dst = k + 1 == n ? out->dst : k & 1 ? scratch + inter : scratch;
		if (st->kind == PIPE_STAGE_GEO) {
			geo_stage(p, st, ctx, src, dst);
		} else if (st->kind == PIPE_STAGE_RESIZE) {
			aug_resize_u8(src, st->in_h, st->in_w, st->c, dst, st->out_h, st->out_w,
				      scratch + 2 * inter);
		} else if (st->kind == PIPE_STAGE_IMAGE) {
			int rc = image_stage(p, st, ctx, src, src_len, dst, iscratch, img, err);
			if (rc < 0)
				return rc;
		} else if (st->kind == PIPE_STAGE_NORMALIZE) {
			feed_convert_images_cpu(&st->cv, src, 1, NULL, dst);
			for (uint32_t j = 1; j < st->count; j++) /* random_erasing after it */
				aug_erase_normalized(p, st, p->stage_ops[st->first + j], ctx, dst);
		} else if (st->kind == PIPE_STAGE_CHW) {
			chw_stage(st, src, dst);
		} else if (st->kind == PIPE_STAGE_PIXEL) {
			aug_pixel_stage(p, st, ctx, src, dst,
					iscratch + ((p->img_scratch_bytes + 63) & ~(size_t)63));
		} else {
			int rc = window_stage(p, st, ctx, src, src_len, dst, err);
			if (rc < 0)
				return rc;
		}
		src = dst;
		src_len = st->out_bytes;
	}
	if (out->ret_len)
		*out->ret_len = last->out_bytes;
	return 0;
}

int aug_apply(const struct pipe_plan *plan, const struct aug_ctx *ctx, const struct aug_in *in,
	      const struct aug_out *out, void *scratch, struct feed_err *err)
{
	return aug_apply_img(plan, ctx, in, out, scratch, NULL, err);
}

int aug_apply_img(const struct pipe_plan *plan, const struct aug_ctx *ctx,
		  const struct aug_in *in, const struct aug_out *out, void *scratch,
		  const struct aug_img *img, struct feed_err *err)
{
	for (uint32_t f = 0; f < plan->in.nfields; f++) {
		int rc = check_in(plan, f, &in[f], ctx, err);
		if (rc < 0)
			return rc;
		if (plan->field_nstages[f]) {
			rc = run_field(plan, f, ctx, &in[f], &out[f], scratch, img, err);
			if (rc < 0)
				return rc;
			continue;
		}
		if (in[f].len > out[f].cap)
			return no_room(plan, f, in[f].len, out[f].cap, err);
		if (in[f].len)
			memcpy(out[f].dst, in[f].data, in[f].len);
		if (out[f].ret_len)
			*out[f].ret_len = in[f].len;
	}
	return 0;
}
