/*
 * mix.h: the batch ops that need floats, after the conversion of convert.h:
 * mixup and cutmix of a converted batch (fp32, fp16 or bf16; NCHW or NHWC;
 * in place) and the soft labels that go with them, as torchvision's
 * classification references (RandomMixup, RandomCutmix) and timm's Mixup
 * make them.
 *
 * Owns: the draws of one batch (which op, lambda from Beta(alpha, alpha),
 * cutmix's box), a pure function of the stream's seed, the epoch and the
 * batch through the Philox generator of philox.h (so a resume, any worker
 * count and any device give the same mix); one element function per mix,
 * written once below as `static inline FEED_HD` code that nvcc compiles for
 * the device (mix_kernels.cuh) and the C compiler for the CPU twins
 * (mix_cpu.c), so a kernel and its twin give the same bits by construction.
 *
 * Partner: sample i is mixed with sample i - 1 (sample n - 1 for sample
 * 0), the batch rolled by one, x.roll(1, 0), as torchvision does.
 *
 * Rounding: the element functions do torchvision's float operations one
 * by one, each rounded as torch rounds it: mixup is
 * x * lam + x_partner * (1 - lam), two products and a sum, each rounded
 * to the tensor's dtype (torch computes fp16 / bf16 ops in fp32 and rounds
 * each result), with lam and 1 - lam computed in double and rounded once to
 * fp32 (torch's scalar). Nothing fuses (no fmaf: torch's mul_ and add_ do
 * not), so the twins equal torchvision's reference bit for bit; on the
 * device the operations are __fmul_rn / __fadd_rn, which never contract.
 * Cutmix copies the partner's elements inside the box (no arithmetic).
 *
 * Soft labels (fp32, [n, num_classes]): timm's one-hot with label
 * smoothing s (off = s / C, on = 1 - s + off, computed in double, rounded
 * once to fp32), mixed with the partner's by the same element function
 * and the same lambda (cutmix's corrected by the box area).
 *
 * Threads: pure functions; any number of threads at once. Nothing here
 * allocates, blocks or prints; the CUDA launchers enqueue on the caller's
 * stream and return.
 */
#ifndef FEED_MIX_H
#define FEED_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "convert.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which op a batch gets. */
enum feed_mix_op {
	FEED_MIX_OP_NONE = 0,   /* images as they are, labels one-hot (smoothed) */
	FEED_MIX_OP_MIXUP = 1,  /* blend with the partner */
	FEED_MIX_OP_CUTMIX = 2, /* the partner's box pasted */
};

/* The draws of one batch (feed_mix_draw_batch). */
struct feed_mix_draw {
	uint32_t op;               /* enum feed_mix_op */
	double lam;                /* the sample's own weight, in [0, 1]; cutmix:
				    * 1 - box area / image area */
	uint32_t x1, y1, x2, y2;   /* cutmix: columns [x1, x2), rows [y1, y2) */
};

/*
 * What a mix kernel takes, made by feed_mix_args_init and read-only after;
 * a plain value passed by value to the kernels. Fields public, read-only.
 */
struct feed_mix_args {
	uint32_t op;               /* enum feed_mix_op */
	uint32_t x1, y1, x2, y2;   /* cutmix's box */
	uint32_t num_classes;      /* soft labels: columns */
	float lam;                 /* lam rounded once from double */
	float oml;                 /* 1 - lam, in double, rounded once */
	float on, off;             /* a soft label's own class and the others */
};

/* The label dtypes the soft-label kernel reads: element size and sign. */
enum feed_mix_label_type {
	FEED_MIX_LABEL_U8 = 0, FEED_MIX_LABEL_I8, FEED_MIX_LABEL_U16, FEED_MIX_LABEL_I16,
	FEED_MIX_LABEL_U32, FEED_MIX_LABEL_I32, FEED_MIX_LABEL_U64, FEED_MIX_LABEL_I64,
};

/* ------------------------------------------------------------------ */
/* Element functions (shared by the twins and the kernels)             */

/* The float of a bfloat16's bits (exact). */
static inline FEED_HD float feed_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
#ifdef __CUDA_ARCH__
	f = __uint_as_float(u);
#else
	memcpy(&f, &u, sizeof(f));
#endif
	return f;
}

/* The float of an IEEE binary16's bits (exact; subnormals, inf, NaN). */
static inline FEED_HD float feed_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
	if (e == 0x1fu) {
		u = sign | 0x7f800000u | m << 13;
	} else if (e) {
		u = sign | (e + 112u) << 23 | m << 13;
	} else if (!m) {
		u = sign;
	} else { /* subnormal: m * 2^-24, normalized */
		e = 113u;
		while (!(m & 0x400u)) {
			m <<= 1;
			e--;
		}
		u = sign | e << 23 | (m & 0x3ffu) << 13;
	}
	float f;
#ifdef __CUDA_ARCH__
	f = __uint_as_float(u);
#else
	memcpy(&f, &u, sizeof(f));
#endif
	return f;
}

/* a * b and a + b, each rounded once, never contracted. */
static inline FEED_HD float feed_mix_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b; /* mix_cpu.c is built with -ffp-contract=off */
#endif
}

static inline FEED_HD float feed_mix_add(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

/* Mixup of one fp32 element x with its partner's xr: torchvision's
 * x.mul_(lam).add_(xr.mul_(1 - lam)). */
static inline FEED_HD float feed_mix_f32(float x, float xr, float lam, float oml)
{
	return feed_mix_add(feed_mix_mul(x, lam), feed_mix_mul(xr, oml));
}

/* The same on fp16 / bf16 bits: each product and the sum rounded to the
 * type, as torch's ops on such tensors round them. */
static inline FEED_HD uint16_t feed_mix_f16(uint16_t x, uint16_t xr, float lam, float oml)
{
	float a = feed_f16_to_f32(feed_f32_to_f16(feed_mix_mul(feed_f16_to_f32(x), lam)));
	float b = feed_f16_to_f32(feed_f32_to_f16(feed_mix_mul(feed_f16_to_f32(xr), oml)));
	return feed_f32_to_f16(feed_mix_add(a, b));
}

static inline FEED_HD uint16_t feed_mix_bf16(uint16_t x, uint16_t xr, float lam, float oml)
{
	float a = feed_bf16_to_f32(feed_f32_to_bf16(feed_mix_mul(feed_bf16_to_f32(x), lam)));
	float b = feed_bf16_to_f32(feed_f32_to_bf16(feed_mix_mul(feed_bf16_to_f32(xr), oml)));
	return feed_f32_to_bf16(feed_mix_add(a, b));
}

/* Whether element e of a converted sample (cv's layout) lies in the box. */
static inline FEED_HD int feed_mix_in_box(const struct feed_convert *cv,
					  const struct feed_mix_args *a, size_t e)
{
	size_t x, y;
	if (cv->layout == FEED_CONVERT_NCHW) {
		x = e % cv->w;
		y = (e / cv->w) % cv->h;
	} else {
		x = (e / cv->c) % cv->w;
		y = e / ((size_t)cv->c * cv->w);
	}
	return x >= a->x1 && x < a->x2 && y >= a->y1 && y < a->y2;
}

/* Label i of n labels of type t at p, as a signed number. */
static inline FEED_HD int64_t feed_mix_label_at(const void *p, uint32_t t, size_t i)
{
	switch (t) {
	case FEED_MIX_LABEL_U8: return ((const uint8_t *)p)[i];
	case FEED_MIX_LABEL_I8: return ((const int8_t *)p)[i];
	case FEED_MIX_LABEL_U16: return ((const uint16_t *)p)[i];
	case FEED_MIX_LABEL_I16: return ((const int16_t *)p)[i];
	case FEED_MIX_LABEL_U32: return ((const uint32_t *)p)[i];
	case FEED_MIX_LABEL_I32: return ((const int32_t *)p)[i];
	case FEED_MIX_LABEL_U64: {
		uint64_t v = ((const uint64_t *)p)[i];
		return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
	}
	default: return ((const int64_t *)p)[i];
	}
}

/* Soft label of class k for a sample of label own whose partner's is
 * partner. */
static inline FEED_HD float feed_mix_label(const struct feed_mix_args *a, int64_t own,
					   int64_t partner, uint32_t k)
{
	float y = own == (int64_t)k ? a->on : a->off;
	if (a->op == FEED_MIX_OP_NONE)
		return y;
	float yr = partner == (int64_t)k ? a->on : a->off;
	return feed_mix_f32(y, yr, a->lam, a->oml);
}

/* ------------------------------------------------------------------ */
/* Draws, set-up and CPU twins (kernels/mix_cpu.c, library feed_kernels) */

/*
 * The draws of batch `batch` (the stream's batch number: for rank r of
 * world R, index * R + r) of epoch `epoch` of a stream seeded `seed`, for
 * images of h x w. mixup_alpha / cutmix_alpha > 0 enable each op; with both,
 * cutmix is taken with probability switch_prob (timm's switch_prob; 0.5 is
 * torchvision's RandomChoice of the two); with neither the op is NONE.
 *
 * Draw numbers: Philox words feed_rand_u32(seed, epoch, FEED_MIX_BATCH_TAG
 * | batch, stream, draw) (philox.h), the tag keeping them apart from every
 * sample's draws:
 *   stream 0, draw 0: the switch, u = word * 2^-32; cutmix when u <
 *     switch_prob (only when both ops are on);
 *   stream 0, draws 1 and 2: cutmix's centre r_x = floor(word * w / 2^32),
 *     r_y = floor(word * h / 2^32) (torch.randint(W), randint(H));
 *   streams 1 and 2: lambda = X / (X + Y), X and Y ~ Gamma(alpha) of the
 *     op drawn, each from its stream's words in order (feed_mix_gamma_log).
 * Cutmix's box is torchvision's: r = 0.5 * sqrt(1 - lambda), half sizes
 * (int)(r * w) and (int)(r * h), clamped to the image, and lambda becomes
 * 1 - box area / (w * h).
 *
 * Returns 0, or -EINVAL for an alpha that is negative or not finite, a
 * switch_prob outside [0, 1], h or w 0. *ret written only on success. Pure.
 */
#define FEED_MIX_BATCH_TAG (1ull << 63)
int feed_mix_draw_batch(double mixup_alpha, double cutmix_alpha, double switch_prob,
			uint64_t seed, uint64_t epoch, uint64_t batch, uint32_t h, uint32_t w,
			struct feed_mix_draw *ret);

/*
 * The natural log of a Gamma(alpha, 1) variate from Philox stream
 * `stream` of (seed, epoch, tagged batch): Marsaglia and Tsang's method
 * ("A simple method for generating gamma variables", 2000). Each try takes
 * a standard normal (Box-Muller, cosine branch, from two uniforms) and a
 * uniform; a uniform in (0, 1) is 53 bits from two words,
 * (hi >> 5 << 26 | lo >> 6) + 0.5 times 2^-53. For alpha < 1 the first
 * uniform u boosts: Gamma(alpha + 1) * u^(1/alpha), kept in logs so
 * tiny values do not underflow. Pure.
 */
double feed_mix_gamma_log(double alpha, uint64_t seed, uint64_t epoch, uint64_t batch,
			  uint32_t stream);

/*
 * Fills *ret from a draw for images of h x w and soft labels of
 * num_classes classes smoothed by label_smoothing. Returns 0, or -EINVAL
 * when the op is unknown, lam is outside [0, 1] or not a number, a cutmix
 * box does not fit h x w (x1 <= x2 <= w, y1 <= y2 <= h), label_smoothing is
 * outside [0, 1]. num_classes 0 is allowed (no labels). Pure.
 */
int feed_mix_args_init(struct feed_mix_args *ret, const struct feed_mix_draw *d, uint32_t h,
		       uint32_t w, uint32_t num_classes, double label_smoothing);

/*
 * CPU twin of feed_mix_images_cuda: mixes n converted samples at data
 * (feed_convert_sample_bytes(cv) each, cv's dtype and layout) in place as a
 * says. cv->h and cv->w must be those a was made for. Returns 0, or
 * -EINVAL for NULL pointers (data with n > 0). Pure; any thread.
 */
int feed_mix_images_cpu(const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
			void *data);

/*
 * CPU twin of feed_mix_labels_cuda: the soft labels of n labels of type t
 * at labels into dst, n x a->num_classes fp32, row by row. Every label
 * must be in [0, num_classes): returns -ERANGE otherwise (dst then
 * undefined), -EINVAL for NULL pointers, an unknown t or num_classes 0.
 */
int feed_mix_labels_cpu(const struct feed_mix_args *a, const void *labels, uint32_t t, size_t n,
			float *dst);

/* Whether all n labels of type t lie in [0, num_classes): 0, or -ERANGE
 * with *ret_bad (when not NULL) the first that does not and *ret_at its
 * position. */
int feed_mix_labels_check(const void *labels, uint32_t t, size_t n, uint32_t num_classes,
			  int64_t *ret_bad, size_t *ret_at);

/* ------------------------------------------------------------------ */
/* CUDA launchers (kernels/mix.cu, library feed_kernels_cuda)          */

/*
 * Enqueues on stream the twins' work: data, labels and dst are device
 * pointers valid until the work ran. Labels are not checked on the device
 * (check them first: feed_mix_labels_check); one out of range gives a row
 * of off values. Returns 0 once enqueued, -EINVAL for the twins' argument
 * errors, -ENODEV with no usable device, -EIO when the launch fails.
 */
int feed_mix_images_cuda(const struct feed_convert *cv, const struct feed_mix_args *a, size_t n,
			 void *data, struct CUstream_st *stream);
int feed_mix_labels_cuda(const struct feed_mix_args *a, const void *labels, uint32_t t, size_t n,
			 float *dst, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* FEED_MIX_H */
