/*
 * image_resample.c: img_resample_u8(), the antialiased bilinear resample
 * of a decoded box to the output size (contract in image.h).
 *
 * Owns: torch's upsample_bilinear2d_aa (what torchvision's
 * resized_crop(antialias=True) runs) in fixed point: for each output pixel
 * a triangle filter centred at box_x + scale * (i + 0.5) whose support
 * widens to `scale` source pixels on each side when downsampling
 * (weight(j) = tri((j + 0.5 - centre) / max(scale, 1)), normalised, taps
 * clamped to the box: torch sees only the crop), the way PIL's resample
 * does it too. Separable: a horizontal pass over only the source rows the
 * vertical taps reach, into a u8 intermediate (as PIL), then a vertical
 * pass; weights are 14-bit integers. Flip costs nothing: the horizontal
 * taps of output x are stored at out_w - 1 - x.
 *
 * Threads: pure; any number at once, each with its own scratch. Never
 * allocates: taps and the intermediate live in the caller's scratch.
 */
#include "image.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define W_BITS 14 /* weight precision: u8 x 14 bits x taps fits an int32 */

/* One output coordinate's taps: first source index and count; weights at
 * w[i * stride ...]. */
struct rs_tap {
	int32_t first; /* source index of the first tap */
	int32_t n;     /* taps used */
};

/* Most taps any output coordinate can have for a box of bn source pixels
 * scaled to on output pixels. */
static uint32_t max_taps(double bn, uint32_t on)
{
	double scale = bn / on;
	double support = scale >= 1.0 ? scale : 1.0;
	/* even, and one more: the SIMD loops take taps in pairs, the last
	 * one padded with a zero weight */
	return ((uint32_t)ceil(2.0 * support) + 4) & ~1u;
}

/* The bilinear (triangle) filter. */
static inline double tri(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

size_t img_resample_scratch_bytes(uint32_t src_w, uint32_t src_h, uint32_t out_w,
				  uint32_t out_h, uint32_t c)
{
	uint32_t th = max_taps(src_w, out_w), tv = max_taps(src_h, out_h);

	return align64(out_w * sizeof(struct rs_tap)) + align64((size_t)out_w * th * 2) +
	       align64(out_h * sizeof(struct rs_tap)) + align64((size_t)out_h * tv * 2) +
	       align64((size_t)src_h * out_w * c + 16) + align64((size_t)out_w * c * 4) + 64;
}

/* Gives every one of on slots the same even number of taps (kmax, the
 * most any has, rounded up), windows moved left at the side's right edge
 * (n pixels) and zero weights padding; returns that number, or 0 (taps
 * left as they are) when the side is too short. */
static uint32_t taps_even(uint32_t n, uint32_t on, uint32_t maxt, uint32_t kmax,
			  struct rs_tap *tap, int16_t *w)
{
	uint32_t even = (kmax + 1) & ~1u;

	if (even > n)
		return 0;
	for (uint32_t i = 0; i < on; i++) {
		int32_t f = tap[i].first, nf = (int32_t)(n - even);
		if (f > nf) { /* the window would leave the side: move it left */
			int16_t *ws = w + (size_t)i * maxt;
			int32_t shift = f - nf;
			memmove(ws + shift, ws, (size_t)tap[i].n * sizeof *ws);
			memset(ws, 0, (size_t)shift * sizeof *ws);
			tap[i].first = nf;
		}
		tap[i].n = (int32_t)even;
	}
	return even;
}

/*
 * Taps of on output pixels over the box [b0, b0 + bn) of a side of n
 * source pixels, torch's _compute_indices_weights_aa on the box: weights
 * normalised in double, then rounded to W_BITS. Output i's taps go to
 * slot (flip ? on - 1 - i : i). Returns the taps' source range [lo, hi).
 * With ret_even, every slot gets the same even number of taps, *ret_even
 * (windows moved left at the right edge, zero weights padding): the
 * horizontal SIMD loop's fixed trip count; 0 when the side is too short.
 */
static void taps(double b0, double bn, uint32_t n, uint32_t on, bool flip, uint32_t maxt,
		 struct rs_tap *tap, int16_t *w, int32_t *ret_lo, int32_t *ret_hi,
		 uint32_t *ret_even)
{
	double scale = bn / on;
	double support = scale >= 1.0 ? scale : 1.0;
	double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
	int32_t lo = (int32_t)floor(b0), hi = (int32_t)ceil(b0 + bn);
	int32_t all_lo = INT32_MAX, all_hi = 0;
	uint32_t kmax = 0;

	if (lo < 0)
		lo = 0;
	if (hi > (int32_t)n)
		hi = (int32_t)n;
	for (uint32_t i = 0; i < on; i++) {
		double centre = b0 + scale * (i + 0.5);
		int32_t x0 = (int32_t)floor(centre - support + 0.5);
		int32_t x1 = (int32_t)floor(centre + support + 0.5);
		x0 = x0 < lo ? lo : x0;
		x1 = x1 > hi ? hi : x1;
		if (x1 <= x0) /* a box thinner than a pixel: its nearest pixel */
			x1 = x0 + 1 <= hi ? x0 + 1 : hi, x0 = x1 - 1;
		uint32_t k = (uint32_t)(x1 - x0);
		assert(k + 2 <= maxt);
		double total = 0;
		for (uint32_t j = 0; j < k; j++)
			total += tri((x0 + j + 0.5 - centre) * inv);
		uint32_t slot = flip ? on - 1 - i : i;
		int16_t *ws = w + (size_t)slot * maxt;
		for (uint32_t j = 0; j < maxt; j++)
			ws[j] = (int16_t)(j < k && total > 0 ? lrint(tri((x0 + j + 0.5 - centre) * inv) /
								   total * (1 << W_BITS))
							    : 0);
		if (total == 0)
			ws[0] = 1 << W_BITS;
		tap[slot] = (struct rs_tap){x0, (int32_t)k};
		all_lo = x0 < all_lo ? x0 : all_lo;
		all_hi = x1 > all_hi ? x1 : all_hi;
		kmax = k > kmax ? k : kmax;
	}
	*ret_lo = all_lo;
	*ret_hi = all_hi;
	if (ret_even)
		*ret_even = taps_even(n, on, maxt, kmax, tap, w);
}

static inline uint8_t clamp_u8(int32_t acc)
{
	acc = (acc + (1 << (W_BITS - 1))) >> W_BITS;
	return (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
}

/* Output pixel x of a 3-channel row, scalar. */
static inline void hpass_px3(const uint8_t *src, uint8_t *dst, const struct rs_tap *t,
			     const int16_t *ws)
{
	const uint8_t *s = src + (size_t)t->first * 3;
	int32_t a0 = 0, a1 = 0, a2 = 0;

	for (int32_t j = 0; j < t->n; j++, s += 3) {
		a0 += s[0] * ws[j];
		a1 += s[1] * ws[j];
		a2 += s[2] * ws[j];
	}
	dst[0] = clamp_u8(a0);
	dst[1] = clamp_u8(a1);
	dst[2] = clamp_u8(a2);
}

#ifdef __SSE2__
/* 4 bytes at p as the low lanes of a vector of i16 */
static inline __m128i load4_i16(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());
}

/* Output pixel x of a 3-channel row: taps in pairs (np of them), each
 * pair's two pixels interleaved channel by channel for pmaddwd. Reads 4
 * bytes a pixel: one past the window's last pixel. */
static inline __attribute__((always_inline)) __m128i hpass_px3_sse2(const uint8_t *s,
								    const int16_t *ws, int np)
{
	__m128i acc = _mm_set1_epi32(1 << (W_BITS - 1));

	for (int p = 0; p < np; p++, s += 6, ws += 2) {
		int32_t w2;
		memcpy(&w2, ws, 4);
		__m128i px = _mm_unpacklo_epi16(load4_i16(s), load4_i16(s + 3));
		acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_set1_epi32(w2)));
	}
	acc = _mm_srai_epi32(acc, W_BITS);
	acc = _mm_packs_epi32(acc, acc);
	return _mm_packus_epi16(acc, acc);
}

/* A 3-channel row with np pairs of taps for every pixel; dst has a byte
 * of slack after the row. */
static inline __attribute__((always_inline)) void hrow3_sse2(const uint8_t *src, uint8_t *dst,
							     uint32_t out_w,
							     const struct rs_tap *tap,
							     const int16_t *wt, uint32_t maxt,
							     int np)
{
	for (uint32_t x = 0; x < out_w; x++, dst += 3) {
		int32_t v = _mm_cvtsi128_si32(
			hpass_px3_sse2(src + (size_t)tap[x].first * 3, wt + (size_t)x * maxt, np));
		memcpy(dst, &v, 4); /* byte 3 is the next pixel's, rewritten */
	}
}
#endif

/* One row of the horizontal pass: out_w pixels of c channels. even: the
 * taps' common even count (0: none); tail_ok: a byte after the row may
 * be read; dst has a byte of slack after the row. */
static void hpass_row(const uint8_t *src, uint8_t *dst, uint32_t out_w, uint32_t c,
		      const struct rs_tap *tap, const int16_t *wt, uint32_t maxt, uint32_t even,
		      bool tail_ok)
{
	if (c == 3) {
#ifdef __SSE2__
		if (even && tail_ok) {
			switch (even / 2) { /* constant trip counts, unrolled */
			case 1:
				hrow3_sse2(src, dst, out_w, tap, wt, maxt, 1);
				return;
			case 2:
				hrow3_sse2(src, dst, out_w, tap, wt, maxt, 2);
				return;
			case 3:
				hrow3_sse2(src, dst, out_w, tap, wt, maxt, 3);
				return;
			case 4:
				hrow3_sse2(src, dst, out_w, tap, wt, maxt, 4);
				return;
			default:
				hrow3_sse2(src, dst, out_w, tap, wt, maxt, (int)(even / 2));
				return;
			}
		}
#endif
		(void)tail_ok;
		for (uint32_t x = 0; x < out_w; x++, dst += 3)
			hpass_px3(src, dst, &tap[x], wt + (size_t)x * maxt);
		return;
	}
	for (uint32_t x = 0; x < out_w; x++, dst += c) {
		const int16_t *ws = wt + (size_t)x * maxt;
		for (uint32_t ch = 0; ch < c; ch++) {
			const uint8_t *s = src + (size_t)tap[x].first * c + ch;
			int32_t a = 0;
			for (int32_t j = 0; j < tap[x].n; j++, s += c)
				a += *s * ws[j];
			dst[ch] = clamp_u8(a);
		}
	}
}

#ifdef __SSE2__
/* 16 bytes of the vertical pass at offset x: rows in pairs, interleaved
 * byte by byte for pmaddwd. */
static inline void vpass_16(const uint8_t *r, size_t n, int32_t taps, const int16_t *ws,
			    uint8_t *dst)
{
	const __m128i z = _mm_setzero_si128();
	__m128i a0 = _mm_set1_epi32(1 << (W_BITS - 1)), a1 = a0, a2 = a0, a3 = a0;

	for (int32_t j = 0; j < taps; j += 2, r += 2 * n) {
		int32_t w2;
		memcpy(&w2, ws + j, 4);
		__m128i w = _mm_set1_epi32(w2);
		__m128i p = _mm_loadu_si128((const __m128i *)r);
		/* the pair's second row: the first again when there is none (weight 0) */
		__m128i q = _mm_loadu_si128((const __m128i *)(j + 1 < taps ? r + n : r));
		__m128i lo = _mm_unpacklo_epi8(p, q), hi = _mm_unpackhi_epi8(p, q);
		a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, z), w));
		a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, z), w));
		a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, z), w));
		a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, z), w));
	}
	a0 = _mm_packs_epi32(_mm_srai_epi32(a0, W_BITS), _mm_srai_epi32(a1, W_BITS));
	a2 = _mm_packs_epi32(_mm_srai_epi32(a2, W_BITS), _mm_srai_epi32(a3, W_BITS));
	_mm_storeu_si128((__m128i *)dst, _mm_packus_epi16(a0, a2));
}
#endif

/* One row of the vertical pass over n = out_w * c bytes: rows of mid
 * from tap->first on, weighted. */
static void vpass_row(const uint8_t *mid, size_t n, const struct rs_tap *tap, const int16_t *ws,
		      int32_t *acc, uint8_t *dst)
{
	const uint8_t *r = mid + (size_t)tap->first * n;

#ifdef __SSE2__
	if (n >= 16) {
		size_t x = 0;
		for (; x + 16 <= n; x += 16)
			vpass_16(r + x, n, tap->n, ws, dst + x);
		if (x < n) /* the last 16 again: the same bytes, rewritten */
			vpass_16(r + n - 16, n, tap->n, ws, dst + n - 16);
		return;
	}
#endif
	for (size_t x = 0; x < n; x++)
		acc[x] = r[x] * ws[0];
	for (int32_t j = 1; j < tap->n; j++) {
		r += n;
		int32_t wj = ws[j];
		for (size_t x = 0; x < n; x++)
			acc[x] += r[x] * wj;
	}
	for (size_t x = 0; x < n; x++)
		dst[x] = clamp_u8(acc[x]);
}

void img_resample_u8(const struct img_view *src, double bx, double by, double bw, double bh,
		     uint8_t *dst, uint32_t out_w, uint32_t out_h, bool flip, void *scratch)
{
	uint32_t c = src->c;
	uint32_t th = max_taps(src->w, out_w), tv = max_taps(src->h, out_h);
	uint8_t *p = scratch;
	struct rs_tap *htap = (struct rs_tap *)p;
	p += align64(out_w * sizeof(struct rs_tap));
	int16_t *hw = (int16_t *)p;
	p += align64((size_t)out_w * th * 2);
	struct rs_tap *vtap = (struct rs_tap *)p;
	p += align64(out_h * sizeof(struct rs_tap));
	int16_t *vw = (int16_t *)p;
	p += align64((size_t)out_h * tv * 2);
	uint8_t *mid = p;
	p += align64((size_t)src->h * out_w * c + 16); /* + slack for 4-byte stores */
	int32_t *acc = (int32_t *)p;
	int32_t hlo, hhi, vlo, vhi;

	assert(bw > 0 && bh > 0 && bx >= 0 && by >= 0);
	assert(bx + bw <= src->w + 1e-9 && by + bh <= src->h + 1e-9);
	uint32_t even;
	taps(bx, bw, src->w, out_w, flip, th, htap, hw, &hlo, &hhi, &even);
	taps(by, bh, src->h, out_h, false, tv, vtap, vw, &vlo, &vhi, NULL);
	(void)hlo, (void)hhi;

	/* horizontal: only rows [vlo, vhi), stored from mid's row 0 */
	size_t n = (size_t)out_w * c;
	for (int32_t y = vlo; y < vhi; y++)
		hpass_row(src->px + (size_t)y * src->stride, mid + (size_t)(y - vlo) * n, out_w, c,
			  htap, hw, th, even,
			  (uint32_t)y + 1 < src->h || src->stride > (size_t)src->w * c);
	for (uint32_t y = 0; y < out_h; y++) {
		struct rs_tap t = {vtap[y].first - vlo, vtap[y].n};
		vpass_row(mid, n, &t, vw + (size_t)y * tv, acc, dst + (size_t)y * n);
	}
}
