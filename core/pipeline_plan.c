/*
 * pipeline_plan.c: checks a parsed pipeline against a schema and plans its
 * fused stages: output shapes, scratch sizes, the canonical text and hash
 * (see pipeline.h).
 *
 * Threads: pure functions on the caller's thread; plans are immutable.
 * Never: allocate, touch sample bytes.
 */
#include "pipeline.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "mix.h"

static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int plan_fail(const struct pipe_spec *spec, uint32_t i, struct feed_err *err,
		     const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	feed_err_vset(err, -EINVAL, fmt, ap);
	va_end(ap);
	feed_err_prefix(err, "pipeline op %u '%s'", i + 1, pipe_kind_name(spec->ops[i].kind));
	return -EINVAL;
}

static bool is_pixel_op(enum pipe_kind k)
{
	return k >= PIPE_ADJUST_BRIGHTNESS && k < PIPE_MIX;
}

static bool is_image_op(enum pipe_kind k)
{
	return k == PIPE_RANDOM_CROP || k == PIPE_CENTER_CROP || k == PIPE_HFLIP ||
	       k == PIPE_RESIZE || k == PIPE_RANDOM_RESIZED_CROP || k == PIPE_NORMALIZE ||
	       k == PIPE_TO_CHW || is_pixel_op(k);
}

static bool is_image_field(const struct fmt_field *f)
{
	return !f->variable && f->dtype == FEED_DTYPE_U8 && (f->rank == 2 || f->rank == 3);
}

static bool is_sequence_field(const struct fmt_field *f)
{
	return f->dtype != FEED_DTYPE_STR &&
	       ((!f->variable && f->rank == 1) || (f->variable && f->rank == 0));
}

static bool is_token_dtype(int dt)
{
	return dt == FEED_DTYPE_U16 || dt == FEED_DTYPE_U32 || dt == FEED_DTYPE_I32 ||
	       dt == FEED_DTYPE_I64;
}

/* A field's state while planning. */
enum plan_fstate {
	FS_AS_IS = 0,     /* as the schema says, or a fixed shape after ops */
	FS_DECODED,       /* decoded: size varies, bounded by out.fields[f].shape */
	FS_SHORT,         /* decoded, then resize(short): must be center-cropped */
	FS_NORMALIZED,    /* normalize ran: the field takes no more ops */
	FS_CHW,           /* to_chw ran: likewise */
};

/* The planner's working state (on the stack: nothing allocates). */
struct plan_work {
	uint8_t st[FMT_MAX_FIELDS];       /* enum plan_fstate */
	uint32_t short_op[FMT_MAX_FIELDS]; /* FS_SHORT: the resize(short)'s op index */
	bool img_open[FMT_MAX_FIELDS];    /* field's last stage is IMAGE: hflips join it */
	uint8_t sk[PIPE_MAX_OPS];         /* op i's stage kind */
	bool join[PIPE_MAX_OPS];          /* op i joins its field's last stage */
	uint32_t norm_op[FMT_MAX_FIELDS]; /* FS_NORMALIZED: the normalize's op index */
};

static bool is_encoded_field(const struct pipe_plan *p, const struct plan_work *w, uint32_t f)
{
	const struct fmt_field *fd = &p->in.fields[f];

	return fd->image && fd->variable && fd->dtype == FEED_DTYPE_U8 && w->st[f] == FS_AS_IS &&
	       p->out.fields[f].variable;
}

/* Whether image ops see field f as an image at this point of the plan. */
static bool is_image_now(const struct pipe_plan *p, const struct plan_work *w, uint32_t f)
{
	return w->st[f] != FS_AS_IS || is_image_field(&p->out.fields[f]);
}

/* *ret_f = the field index op i applies to (-1: none, identity), or an
 * error naming key 'field'. */
static int plan_field(const struct pipe_plan *p, const struct plan_work *w, uint32_t i,
		      int *ret_f, struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct fmt_schema *in = &p->in;
	const struct pipe_op *op = &spec->ops[i];

	if (op->field[0]) {
		*ret_f = fmt_schema_find(in, op->field);
		if (*ret_f < 0)
			return plan_fail(spec, i, err, "key 'field': no field '%s' in the dataset",
					 op->field);
		return 0;
	}
	*ret_f = -1;
	if (op->kind == PIPE_IDENTITY)
		return 0;
	for (uint32_t f = 0; f < in->nfields; f++) {
		const struct fmt_field *fd = &in->fields[f];
		bool ok = op->kind == PIPE_DECODE ? is_encoded_field(p, w, f)
			  : is_image_op(op->kind) ? is_image_now(p, w, f)
						   : is_sequence_field(fd) && is_token_dtype(fd->dtype);
		if (ok) {
			*ret_f = (int)f;
			return 0;
		}
	}
	if (op->kind == PIPE_DECODE)
		return plan_fail(spec, i, err, "missing key 'field': the dataset has no field of "
				 "encoded images (feedpack imagefolder makes one)");
	if (is_image_op(op->kind))
		for (uint32_t f = 0; f < in->nfields; f++)
			if (is_encoded_field(p, w, f))
				return plan_fail(spec, i, err, "missing key 'field': field '%s' holds "
						 "encoded images: decode them first (decode | ...)",
						 in->fields[f].name);
	return plan_fail(spec, i, err,
			 is_image_op(op->kind)
				 ? "missing key 'field': the dataset has no image field "
				   "(fixed u8 HxW or HxWxC)"
				 : "missing key 'field': the dataset has no token sequence "
				   "(u16/u32/i32/i64, 1-D)");
}

/* Sets field fd to a fixed u8 image oh x ow x c (rank 3 when c3). */
static int set_image_out(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			 struct pipe_dims *dm, uint32_t oh, uint32_t ow, uint32_t c, bool rank3,
			 struct feed_err *err)
{
	if ((uint64_t)oh * ow * c > UINT32_MAX)
		return plan_fail(spec, i, err, "output %ux%ux%u larger than 4 GiB", oh, ow, c);
	dm->out_h = oh;
	dm->out_w = ow;
	dm->c = c;
	fd->variable = false;
	fd->rank = rank3 ? 3 : 2;
	fd->shape[0] = oh;
	fd->shape[1] = ow;
	fd->shape[2] = rank3 ? c : 0;
	fd->max_bytes = (uint64_t)oh * ow * c;
	return 0;
}

/* decode on field f: its records become u8 images of varying size. */
static int plan_decode(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		       struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	const struct fmt_field *infd = &p->in.fields[f];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];

	if (w->st[f] != FS_AS_IS || (infd->image && !fd->variable))
		return plan_fail(&p->spec, i, err, "key 'field': '%s' is decoded already",
				 infd->name);
	if (!is_encoded_field(p, w, f))
		return plan_fail(&p->spec, i, err,
				 "key 'field': '%s' is not a field of encoded images", infd->name);
	if (!infd->max_width || !infd->max_height)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' records no image sizes "
				 "(max_width, max_height): pack it again with feedpack imagefolder",
				 infd->name);
	dm->in_h = dm->out_h = infd->max_height;
	dm->in_w = dm->out_w = infd->max_width;
	dm->c = op->channels;
	fd->rank = 3;
	fd->shape[0] = infd->max_height;
	fd->shape[1] = infd->max_width;
	fd->shape[2] = op->channels;
	fd->max_bytes = (uint64_t)infd->max_height * infd->max_width * op->channels;
	/* pixels from here on: the out schema carries no encoded-image facts */
	fd->image = false;
	fd->max_width = fd->max_height = 0;
	fd->max_pixels = 0;
	w->st[f] = FS_DECODED;
	w->sk[i] = PIPE_STAGE_IMAGE;
	w->img_open[f] = true;
	uint64_t px = infd->max_pixels ? infd->max_pixels
				       : (uint64_t)infd->max_width * infd->max_height;
	if (infd->max_width > p->dec_lim.max_width)
		p->dec_lim.max_width = infd->max_width;
	if (infd->max_height > p->dec_lim.max_height)
		p->dec_lim.max_height = infd->max_height;
	if (px > p->dec_lim.max_pixels)
		p->dec_lim.max_pixels = px;
	p->dec_channels_mask |= 1u << op->channels;
	return 0;
}

static const char pipe_fixers[] = "random_resized_crop, center_crop or resize(h, w)";

/* An image op on decoded images of varying size: hflip and resize(short)
 * keep them varying, random_resized_crop, center_crop and resize(h, w)
 * fix the size; every one joins the field's IMAGE stage. */
static int plan_var_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		       struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct pipe_op *op = &spec->ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t c = fd->shape[2];
	const struct pipe_op *sh = w->st[f] == FS_SHORT ? &spec->ops[w->short_op[f]] : NULL;

	dm->in_h = dm->out_h = fd->shape[0];
	dm->in_w = dm->out_w = fd->shape[1];
	dm->c = c;
	w->sk[i] = PIPE_STAGE_IMAGE;
	w->join[i] = true;
	if (op->kind == PIPE_RANDOM_CROP || op->kind == PIPE_NORMALIZE ||
	    op->kind == PIPE_TO_CHW || is_pixel_op(op->kind))
		return plan_fail(spec, i, err, "decoded images of '%s' vary in size: put %s "
				 "before %s", fd->name, pipe_fixers, pipe_kind_name(op->kind));
	if (op->kind == PIPE_HFLIP)
		return 0;
	if (op->kind == PIPE_RESIZE && op->short_side) {
		if (sh)
			return plan_fail(spec, i, err, "key 'short': '%s' was resized by op %u "
					 "already", fd->name, w->short_op[f] + 1);
		w->st[f] = FS_SHORT;
		w->short_op[f] = i;
		return 0;
	}
	if (sh && op->kind != PIPE_CENTER_CROP)
		return plan_fail(spec, i, err, "after op %u resize(short=%u), decoded images of "
				 "'%s' take center_crop", w->short_op[f] + 1, sh->short_side,
				 fd->name);
	if (sh && op->size > sh->short_side)
		return plan_fail(spec, i, err, "key 'size': crop %u larger than op %u "
				 "resize(short=%u)", op->size, w->short_op[f] + 1, sh->short_side);
	w->st[f] = FS_AS_IS;
	if (op->kind == PIPE_RESIZE)
		return set_image_out(spec, i, fd, dm, op->h, op->w, c, true, err);
	return set_image_out(spec, i, fd, dm, op->size, op->size, c, true, err);
}

/* normalize's mean and std for c channels: one value given serves all. */
static void norm_values(const struct pipe_op *op, uint32_t c, float *mean, float *sd)
{
	for (uint32_t k = 0; k < c; k++) {
		mean[k] = (float)((double)op->mean_ppb[op->nmean == 1 ? 0 : k] / PIPE_P_ONE);
		sd[k] = (float)((double)op->std_ppb[op->nstd == 1 ? 0 : k] / PIPE_P_ONE);
	}
}

/* normalize on a fixed u8 image: float output, CHW or HWC. */
static int plan_normalize(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			  struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;
	float mean[PIPE_MAX_C], sd[PIPE_MAX_C];
	struct feed_convert cv;

	if (c > PIPE_MAX_C)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' has %u channels (at most %d)",
				 fd->name, c, PIPE_MAX_C);
	/* one value serves every channel, as torchvision's Normalize broadcasts it */
	if (op->nmean != c && op->nmean != 1)
		return plan_fail(&p->spec, i, err, "key 'mean': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nmean, c, c == 1 ? "" : "s", fd->name, c);
	if (op->nstd != c && op->nstd != 1)
		return plan_fail(&p->spec, i, err, "key 'std': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nstd, c, c == 1 ? "" : "s", fd->name, c);
	norm_values(op, c, mean, sd);
	enum feed_convert_dtype dt = op->dtype == FEED_DTYPE_F16    ? FEED_CONVERT_F16
				     : op->dtype == FEED_DTYPE_BF16 ? FEED_CONVERT_BF16
								    : FEED_CONVERT_F32;
	if (feed_convert_init(&cv, h, wd, c, dt, (enum feed_convert_layout)op->layout, mean, sd) < 0)
		return plan_fail(&p->spec, i, err, "key 'std': mean and std give outputs that are "
				 "not finite floats");
	dm->in_h = dm->out_h = h;
	dm->in_w = dm->out_w = wd;
	dm->c = c;
	fd->dtype = op->dtype;
	fd->rank = 3;
	if (op->layout == PIPE_LAYOUT_CHW) {
		fd->shape[0] = c;
		fd->shape[1] = h;
		fd->shape[2] = wd;
	} else {
		fd->shape[2] = c;
	}
	fd->max_bytes = (uint64_t)h * wd * c * feed_dtype_size(op->dtype);
	w->st[f] = FS_NORMALIZED;
	w->norm_op[f] = i;
	w->sk[i] = PIPE_STAGE_NORMALIZE;
	return 0;
}

/* to_chw on a fixed u8 h x w (x c) image: c x h x w, the field's last op
 * (a 2-d image becomes 1 x h x w, as PILToTensor makes it). */
static int plan_to_chw(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f)
{
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;

	dm->in_h = dm->out_h = h;
	dm->in_w = dm->out_w = wd;
	dm->in_c = dm->c = c;
	fd->rank = 3;
	fd->shape[0] = c;
	fd->shape[1] = h;
	fd->shape[2] = wd;
	w->st[f] = FS_CHW;
	w->img_open[f] = false;
	w->sk[i] = PIPE_STAGE_CHW;
	return 0;
}

/* pad on a fixed u8 h x w x c image: (h + top + bottom) x (w + left +
 * right); reflect needs each padding below the side, symmetric at most
 * the side (as torch's pads). */
static int plan_pad(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		    struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;
	const uint32_t *pd = op->padding; /* left, top, right, bottom */

	for (uint32_t k = 0; k < 4; k++) {
		uint32_t side = k & 1 ? h : wd;
		if (op->padding_mode == PIPE_PAD_REFLECT && pd[k] >= side)
			return plan_fail(&p->spec, i, err, "key 'padding': %u not below the side %u of "
					 "'%s' (reflect)", pd[k], side, fd->name);
		if (op->padding_mode == PIPE_PAD_SYMMETRIC && pd[k] > side)
			return plan_fail(&p->spec, i, err, "key 'padding': %u above the side %u of "
					 "'%s' (symmetric)", pd[k], side, fd->name);
	}
	uint64_t oh = (uint64_t)h + pd[1] + pd[3], ow = (uint64_t)wd + pd[0] + pd[2];
	if (oh > PIPE_DIM_MAX || ow > PIPE_DIM_MAX)
		return plan_fail(&p->spec, i, err, "key 'padding': %ux%u padded to a side above %u",
				 h, wd, PIPE_DIM_MAX);
	w->sk[i] = PIPE_STAGE_PIXEL;
	w->img_open[f] = false;
	dm->in_h = h;
	dm->in_w = wd;
	dm->in_c = c;
	return set_image_out(&p->spec, i, fd, dm, (uint32_t)oh, (uint32_t)ow, c, fd->rank == 3, err);
}

/* random_erasing after normalize: on the floats, in normalised units (0
 * is the mean colour), as torchvision's RandomErasing after Normalize;
 * it joins normalize's stage. */
static int plan_erase_normalized(struct pipe_plan *p, struct plan_work *w, uint32_t i,
				 uint32_t f, struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	const struct pipe_dims *nd = &p->dims[w->norm_op[f]];
	struct pipe_dims *dm = &p->dims[i];

	if (!op->value_random && op->nevalue != 1 && op->nevalue != nd->c)
		return plan_fail(&p->spec, i, err, "key 'value': %u values for the %u channel%s of "
				 "'%s' (give 1 or %u)", op->nevalue, nd->c, nd->c == 1 ? "" : "s",
				 p->out.fields[f].name, nd->c);
	*dm = *nd;
	dm->in_c = nd->c;
	w->sk[i] = PIPE_STAGE_NORMALIZE;
	w->join[i] = true;
	return 0;
}

/* A pixel op on a fixed u8 image: the shape stays (rgb_to_grayscale may
 * drop to one channel); gaussian_blur's reflect padding needs the kernel's
 * half below each side. */
static int plan_pixel_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			 struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1], c = fd->rank == 3 ? fd->shape[2] : 1;

	if (c != 1 && c != 3)
		return plan_fail(&p->spec, i, err, "key 'field': '%s' has %u channels (%s takes 1 "
				 "or 3)", fd->name, c, pipe_kind_name(op->kind));
	for (uint32_t k = 0; k <= op->nsub; k++) {
		const struct pipe_op *b = op + k; /* the op, then a container's transforms */
		if (b->kind == PIPE_GAUSSIAN_BLUR && (b->ksize / 2 >= h || b->ksize / 2 >= wd))
			return plan_fail(&p->spec, i + k, err, "key 'kernel_size': %u too large for "
					 "the %ux%u images of '%s' (reflect padding needs "
					 "kernel_size / 2 below each side)", b->ksize, h, wd, fd->name);
	}
	if (op->kind == PIPE_PAD)
		return plan_pad(p, w, i, f, err);
	w->sk[i] = PIPE_STAGE_PIXEL;
	w->img_open[f] = false;
	dm->in_h = h;
	dm->in_w = wd;
	dm->in_c = c;
	uint32_t oc = op->kind == PIPE_RGB_TO_GRAYSCALE && op->out_c == 1 ? 1 : c;
	return set_image_out(&p->spec, i, fd, dm, h, wd, oc, fd->rank == 3, err);
}

/* random_erasing's values are u8 levels (whole numbers 0..255). */
static bool erase_values_u8(const struct pipe_op *op)
{
	for (uint32_t k = 0; k < op->nevalue; k++) {
		int64_t x = op->evalue_ppb[k];
		if (x < 0 || x > 255 * (int64_t)PIPE_P_ONE || x % PIPE_P_ONE)
			return false;
	}
	return true;
}

/* antialias= as given against what op i does: resize(h, w) of a fixed u8
 * image is torch's antialias=False arithmetic; random_resized_crop,
 * resize(short) and any resize of decoded images resample with
 * antialiasing (torchvision's PIL path, and v2's default). */
static int plan_antialias(const struct pipe_spec *spec, uint32_t i, bool decoded,
			  struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	bool aa = decoded || op->kind == PIPE_RANDOM_RESIZED_CROP || op->short_side;

	if (op->antialias == 2 && !aa)
		return plan_fail(spec, i, err, "key 'antialias': resize(h, w) of a fixed u8 image "
				 "is antialias=False (decode the images, or use resize(short=N))");
	if (op->antialias == 1 && aa)
		return plan_fail(spec, i, err, "key 'antialias': %s resamples with antialiasing "
				 "here (antialias=False only for resize(h, w) of fixed u8 images)",
				 pipe_kind_name(op->kind));
	return 0;
}

/* The image shape op i sees on field f (updated by earlier ops) and the
 * shape it leaves. */
/* A crop, resize or hflip of a fixed image: its stage kind and output. */
static int plan_geo_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
		       struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct pipe_op *op = &spec->ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	struct pipe_dims *dm = &p->dims[i];
	uint32_t h = fd->shape[0], wd = fd->shape[1];
	uint32_t c = fd->rank == 3 ? fd->shape[2] : 1, oh = h, ow = wd;
	dm->in_h = h;
	dm->in_w = wd;
	w->sk[i] = op->kind == PIPE_RESIZE && !op->short_side ? PIPE_STAGE_RESIZE : PIPE_STAGE_GEO;
	if (op->kind == PIPE_HFLIP) {
		w->join[i] = w->img_open[f];
		if (w->join[i])
			w->sk[i] = PIPE_STAGE_IMAGE;
	} else {
		w->img_open[f] = false;
	}
	if (op->kind == PIPE_RANDOM_CROP) {
		uint64_t ph = (uint64_t)h + 2ull * op->pad, pw = (uint64_t)wd + 2ull * op->pad;
		if (op->size > ph || op->size > pw)
			return plan_fail(spec, i, err,
					 "key 'size': crop %u larger than the padded image "
					 "%" PRIu64 "x%" PRIu64 " (%ux%u + pad %u)",
					 op->size, ph, pw, h, wd, op->pad);
		oh = ow = op->size;
	} else if (op->kind == PIPE_CENTER_CROP || op->kind == PIPE_RANDOM_RESIZED_CROP) {
		oh = ow = op->size;
	} else if (op->kind == PIPE_RESIZE && op->short_side) {
		/* torchvision: short side N, long side int(N * long / short) */
		uint32_t s = h < wd ? h : wd, l = h < wd ? wd : h;
		uint64_t nl = (uint64_t)op->short_side * l / s;
		if (nl > PIPE_DIM_MAX)
			return plan_fail(spec, i, err, "key 'short': %ux%u resized to a side of "
					 "%" PRIu64 " (above %u)", h, wd, nl, PIPE_DIM_MAX);
		oh = h <= wd ? op->short_side : (uint32_t)nl;
		ow = h <= wd ? (h == wd ? op->short_side : (uint32_t)nl) : op->short_side;
	} else if (op->kind == PIPE_RESIZE) {
		oh = op->h;
		ow = op->w;
	}
	if (op->kind == PIPE_RANDOM_RESIZED_CROP || (op->kind == PIPE_RESIZE && op->short_side)) {
		w->sk[i] = PIPE_STAGE_IMAGE;
		w->img_open[f] = true;
	}
	return set_image_out(spec, i, fd, dm, oh, ow, c, fd->rank == 3, err);
}

static int plan_image_op(struct pipe_plan *p, struct plan_work *w, uint32_t i, uint32_t f,
			 struct feed_err *err)
{
	const struct pipe_spec *spec = &p->spec;
	const struct pipe_op *op = &spec->ops[i];
	struct fmt_field *fd = &p->out.fields[f];
	uint32_t h = fd->shape[0], wd = fd->shape[1];

	if (w->st[f] == FS_NORMALIZED && op->kind == PIPE_RANDOM_ERASING)
		return plan_erase_normalized(p, w, i, f, err);
	if (w->st[f] == FS_NORMALIZED)
		return plan_fail(spec, i, err, "key 'field': '%s' is normalized already "
				 "(only random_erasing may follow normalize)", fd->name);
	if (w->st[f] == FS_CHW)
		return plan_fail(spec, i, err, "key 'field': '%s' is CHW already (to_chw is a "
				 "field's last op)", fd->name);
	if (op->kind == PIPE_RANDOM_ERASING && !op->value_random && !erase_values_u8(op))
		return plan_fail(spec, i, err, "key 'value': not u8 levels 0..255 (before "
				 "normalize; after it values are in normalised units)");
	if (op->kind == PIPE_RANDOM_ERASING && op->nevalue > 1 &&
	    op->nevalue != (fd->rank == 3 ? fd->shape[2] : 1))
		return plan_fail(spec, i, err, "key 'value': %u values for the %u channel%s of '%s'",
				 op->nevalue, fd->rank == 3 ? fd->shape[2] : 1,
				 fd->rank == 3 && fd->shape[2] == 1 ? "" : "s", fd->name);
	int rc = plan_antialias(spec, i, w->st[f] != FS_AS_IS, err);
	if (rc < 0)
		return rc;
	if (w->st[f] != FS_AS_IS)
		return plan_var_op(p, w, i, f, err);
	if (!is_image_field(fd))
		return plan_fail(spec, i, err,
				 is_encoded_field(p, w, f)
					 ? "key 'field': '%s' holds encoded images: decode them first"
					 : "key 'field': '%s' is not an image (fixed u8 HxW or HxWxC)",
				 fd->name);
	if (h > PIPE_DIM_MAX || wd > PIPE_DIM_MAX)
		return plan_fail(spec, i, err, "key 'field': image '%s' is %ux%u, sides above %u "
				 "are not supported", fd->name, h, wd, PIPE_DIM_MAX);
	if (op->kind == PIPE_NORMALIZE)
		return plan_normalize(p, w, i, f, err);
	if (op->kind == PIPE_TO_CHW)
		return plan_to_chw(p, w, i, f);
	if (is_pixel_op(op->kind))
		return plan_pixel_op(p, w, i, f, err);
	return plan_geo_op(p, w, i, f, err);
}

static int plan_window_op(const struct pipe_spec *spec, uint32_t i, struct fmt_field *fd,
			  struct pipe_dims *dm, struct feed_err *err)
{
	const struct pipe_op *op = &spec->ops[i];
	size_t elem = feed_dtype_size(fd->dtype);

	if (!is_sequence_field(fd))
		return plan_fail(spec, i, err,
				 "key 'field': '%s' is not a sequence (fixed 1-D or variable flat)",
				 fd->name);
	uint64_t longest = fd->variable ? fd->max_bytes / elem : fd->shape[0];
	if (op->len > longest)
		return plan_fail(spec, i, err,
				 "key 'len': window %u longer than the sequence '%s' (%s%" PRIu64
				 " elements)",
				 op->len, fd->name, fd->variable ? "at most " : "", longest);
	dm->in_elems = fd->variable ? 0 : longest;
	dm->out_elems = op->len;
	fd->variable = false;
	fd->rank = 1;
	fd->shape[0] = op->len;
	fd->max_bytes = (uint64_t)op->len * elem;
	return 0;
}

/* Opens a stage for op i on its field, or extends the field's last stage:
 * runs of geometric ops, runs of windows, and the ops that join an IMAGE
 * stage (resize never fuses). */
static void plan_add_to_stage(struct pipe_plan *p, const struct plan_work *w, uint32_t i,
			      uint32_t *nops)
{
	uint32_t f = (uint32_t)p->op_field[i];
	const struct pipe_op *op = &p->spec.ops[i];
	enum pipe_stage_kind k = op->kind == PIPE_RANDOM_WINDOW ? PIPE_STAGE_WINDOW
							       : (enum pipe_stage_kind)w->sk[i];
	struct pipe_stage *last = p->nstages ? &p->stages[p->nstages - 1] : NULL;
	bool same = last && last->field == f;

	p->stage_ops[*nops] = i;
	(*nops)++;
	if (same && (w->join[i] || (last->kind == k && (k == PIPE_STAGE_GEO ||
							    k == PIPE_STAGE_WINDOW ||
							    k == PIPE_STAGE_PIXEL)))) {
		last->count++;
	} else {
		last = &p->stages[p->nstages++];
		*last = (struct pipe_stage){.kind = k, .field = f, .first = *nops - 1, .count = 1};
		last->in_h = p->dims[i].in_h;
		last->in_w = p->dims[i].in_w;
		last->in_elems = p->dims[i].in_elems;
		last->in_c = p->dims[i].in_c;
		last->decode = op->kind == PIPE_DECODE;
		last->elem_bytes = k == PIPE_STAGE_WINDOW ? feed_dtype_size(p->in.fields[f].dtype)
				   : k == PIPE_STAGE_NORMALIZE ? feed_dtype_size(op->dtype)
							       : 1;
	}
	last->out_h = p->dims[i].out_h;
	last->out_w = p->dims[i].out_w;
	last->c = p->dims[i].c;
	last->out_elems = p->dims[i].out_elems;
	last->out_bytes = k == PIPE_STAGE_WINDOW
				  ? (size_t)last->out_elems * last->elem_bytes
				  : (size_t)last->out_h * last->out_w * last->c * last->elem_bytes;
}

/* normalize's conversion, which plan_normalize() checked. */
static void plan_convert(struct pipe_plan *p, struct pipe_stage *st)
{
	const struct pipe_op *op = &p->spec.ops[p->stage_ops[st->first]];
	float mean[PIPE_MAX_C], sd[PIPE_MAX_C];

	norm_values(op, st->c, mean, sd);
	enum feed_convert_dtype dt = op->dtype == FEED_DTYPE_F16    ? FEED_CONVERT_F16
				     : op->dtype == FEED_DTYPE_BF16 ? FEED_CONVERT_BF16
								    : FEED_CONVERT_F32;
	int rc = feed_convert_init(&st->cv, st->in_h, st->in_w, st->c, dt,
				   (enum feed_convert_layout)op->layout, mean, sd);
	assert(rc == 0);
	(void)rc;
}

/* The largest image a pixel stage's ops read or write, in bytes. */
static size_t plan_pixel_image(const struct pipe_plan *p, const struct pipe_stage *st)
{
	size_t most = 0;

	for (uint32_t j = 0; j < st->count; j++) {
		const struct pipe_dims *dm = &p->dims[p->stage_ops[st->first + j]];
		size_t in = (size_t)dm->in_h * dm->in_w * dm->in_c;
		size_t out = (size_t)dm->out_h * dm->out_w * dm->c;
		most = in > most ? in : most;
		most = out > most ? out : most;
	}
	return most;
}

/* Whether stage st runs an op of kind k. */
static bool plan_stage_has(const struct pipe_plan *p, const struct pipe_stage *st,
			   enum pipe_kind k)
{
	for (uint32_t j = 0; j < st->count; j++)
		if (p->spec.ops[p->stage_ops[st->first + j]].kind == k)
			return true;
	return false;
}

/* The widest image of a pixel stage. */
static size_t plan_pixel_width(const struct pipe_plan *p, const struct pipe_stage *st)
{
	size_t most = 0;

	for (uint32_t j = 0; j < st->count; j++) {
		const struct pipe_dims *dm = &p->dims[p->stage_ops[st->first + j]];
		most = dm->in_w > most ? dm->in_w : most;
		most = dm->out_w > most ? dm->out_w : most;
	}
	return most;
}

/* Stages grouped by field (ops keep their order within a field), then the
 * scratch: two ping-pong buffers for intermediate outputs, the resize
 * column table, and the resample scratch of the IMAGE stages. */
static void plan_stages(struct pipe_plan *p, const struct plan_work *w)
{
	uint32_t nops = 0;
	size_t maxw = 0;

	for (uint32_t f = 0; f < p->in.nfields; f++) {
		p->field_stage[f] = p->nstages;
		for (uint32_t i = 0; i < p->spec.nops; i++)
			if (p->op_field[i] == (int)f && p->spec.ops[i].kind != PIPE_IDENTITY &&
			    p->spec.ops[i].kind != PIPE_MIX)
				plan_add_to_stage(p, w, i, &nops);
		p->field_nstages[f] = p->nstages - p->field_stage[f];
		for (uint32_t s = p->field_stage[f]; s + 1 < p->nstages; s++)
			if (p->stages[s].out_bytes > p->inter_bytes)
				p->inter_bytes = p->stages[s].out_bytes;
	}
	for (uint32_t s = 0; s < p->nstages; s++) {
		struct pipe_stage *st = &p->stages[s];
		if (st->kind == PIPE_STAGE_RESIZE && st->out_w > maxw)
			maxw = st->out_w;
		if (st->kind == PIPE_STAGE_NORMALIZE)
			plan_convert(p, st);
		if (st->kind == PIPE_STAGE_PIXEL) {
			size_t n = plan_pixel_image(p, st), wmax = plan_pixel_width(p, st);
			size_t nf = n > 2 * wmax ? n : 2 * wmax;
			st->px_img_bytes = n;
			size_t al = (n + 63) & ~(size_t)63;
			n = 2 * al + ((4 * nf + 63) & ~(size_t)63);
			if (plan_stage_has(p, st, PIPE_AUG_MIX)) { /* its chains and sum */
				st->px_mix_off = n;
				n += 3 * al + ((4 * st->px_img_bytes + 63) & ~(size_t)63);
			}
			if (n > p->pix_scratch_bytes)
				p->pix_scratch_bytes = n;
		}
		if (st->kind == PIPE_STAGE_IMAGE) {
			size_t n = img_resample_scratch_bytes(st->in_w, st->in_h, st->out_w,
							      st->out_h, st->c);
			if (n > p->img_scratch_bytes)
				p->img_scratch_bytes = n;
		}
	}
	p->table_bytes = maxw * 16;
	size_t inter = (p->inter_bytes + 63) & ~(size_t)63;
	p->scratch_bytes = 2 * inter + ((p->table_bytes + 63) & ~(size_t)63) +
			   ((p->img_scratch_bytes + 63) & ~(size_t)63) + p->pix_scratch_bytes;
}

/* The integer field `label` mix makes soft labels of: its index, or an
 * error naming it. */
static int plan_mix_label(struct pipe_plan *p, uint32_t i, struct feed_err *err)
{
	static const int types[][2] = {
		{FEED_DTYPE_U8, FEED_MIX_LABEL_U8},   {FEED_DTYPE_I8, FEED_MIX_LABEL_I8},
		{FEED_DTYPE_U16, FEED_MIX_LABEL_U16}, {FEED_DTYPE_I16, FEED_MIX_LABEL_I16},
		{FEED_DTYPE_U32, FEED_MIX_LABEL_U32}, {FEED_DTYPE_I32, FEED_MIX_LABEL_I32},
		{FEED_DTYPE_U64, FEED_MIX_LABEL_U64}, {FEED_DTYPE_I64, FEED_MIX_LABEL_I64},
	};
	int f = fmt_schema_find(&p->in, PIPE_MIX_LABEL);
	const struct fmt_field *fd = f < 0 ? NULL : &p->in.fields[f];

	if (!fd)
		return plan_fail(&p->spec, i, err, "soft labels are made from the field '%s', "
				 "which the dataset lacks", PIPE_MIX_LABEL);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		if (fd->dtype != types[t][0] || fd->variable ||
		    !(fd->rank == 0 || (fd->rank == 1 && fd->shape[0] == 1)))
			continue;
		p->bmix.label_type = (uint32_t)types[t][1];
		p->bmix.label_bytes = (uint32_t)feed_dtype_size(fd->dtype);
		return f;
	}
	return plan_fail(&p->spec, i, err, "soft labels are made from the field '%s', which is "
			 "%s%s, not one integer per sample", PIPE_MIX_LABEL,
			 feed_dtype_name(fd->dtype), fd->variable ? " (variable)" : "");
}

/* mix: the last op, on a field normalize made; `label` becomes f32
 * [num_classes]. */
static int plan_mix(struct pipe_plan *p, struct plan_work *w, uint32_t i, struct feed_err *err)
{
	struct pipe_op *op = &p->spec.ops[i];
	int f = -1;

	if (i + 1 != p->spec.nops)
		return plan_fail(&p->spec, i, err, "a batch op: it must be the pipeline's last");
	if (op->field[0] && (f = fmt_schema_find(&p->in, op->field)) < 0)
		return plan_fail(&p->spec, i, err, "key 'field': no field '%s' in the dataset",
				 op->field);
	for (uint32_t k = 0; f < 0 && k < p->in.nfields; k++)
		if (w->st[k] == FS_NORMALIZED)
			f = (int)k;
	if (f < 0 || w->st[f] != FS_NORMALIZED)
		return plan_fail(&p->spec, i, err, "mixes normalized images: put normalize(...) "
				 "on %s%s%s before it", f < 0 ? "the image field" : "'",
				 f < 0 ? "" : p->in.fields[f].name, f < 0 ? "" : "'");
	int lf = plan_mix_label(p, i, err);
	if (lf < 0)
		return lf;
	if (p->bmix.label_bytes > 4ull * op->num_classes)
		return plan_fail(&p->spec, i, err, "key 'num_classes': %u soft labels are smaller "
				 "than the %u-byte label they replace", op->num_classes,
				 p->bmix.label_bytes);
	struct fmt_field *lo = &p->out.fields[lf];
	lo->dtype = FEED_DTYPE_F32;
	lo->rank = 1;
	lo->shape[0] = op->num_classes;
	lo->max_bytes = 4ull * op->num_classes;
	strcpy(op->field, p->in.fields[f].name);
	p->op_field[i] = f;
	p->bmix = (struct pipe_bmix){
		.on = true, .op = i, .img_field = (uint32_t)f, .label_field = (uint32_t)lf,
		.label_type = p->bmix.label_type, .label_bytes = p->bmix.label_bytes,
		.mixup_alpha = (double)op->mixup_ppb / PIPE_P_ONE,
		.cutmix_alpha = (double)op->cutmix_ppb / PIPE_P_ONE,
		.switch_prob = (double)op->switch_ppb / PIPE_P_ONE,
		.label_smoothing = (double)op->smoothing_ppb / PIPE_P_ONE,
		.num_classes = op->num_classes,
	};
	return 0;
}

/* Resolves every op's field and shapes, in op order; then refuses fields
 * whose images still vary in size. */
/* One output field of a packed batch. */
static void pack_out_field(struct fmt_field *fd, const char *name, int dtype, uint32_t L,
			   bool variable)
{
	*fd = (struct fmt_field){.dtype = dtype, .rank = 1, .shape = {L}, .variable = variable};
	snprintf(fd->name, sizeof(fd->name), "%s", name);
	if (variable) {
		fd->rank = 0;
		fd->max_bytes = ((uint64_t)L + 1) * 4;  /* a segment per token, and the end */
	} else {
		fd->max_bytes = (uint64_t)L * feed_dtype_size(dtype);
	}
}

/* concat / pack: the only op, on the dataset's token field; the batch
 * schema is the rows' (pipeline.h). */
static int plan_packing(struct pipe_plan *p, uint32_t i, struct feed_err *err)
{
	const struct pipe_op *op = &p->spec.ops[i];
	int f = fmt_schema_tokens(&p->in);
	uint32_t L = op->seq_len;

	if (p->spec.nops != 1)
		return plan_fail(&p->spec, i, err, "packing is the pipeline's only op");
	if (f < 0 || (op->field[0] && strcmp(op->field, FMT_TOKENS_FIELD)))
		return plan_fail(&p->spec, i, err, "needs a token-document dataset: a variable "
				 "'tokens' field of u16, u32 or i32 (feedpack tokens --doc-sep, "
				 "feedpack megatron)");
	p->op_field[i] = f;
	p->pack = (struct pk_spec){.mode = op->kind == PIPE_CONCAT ? PK_MODE_CONCAT : PK_MODE_PACK,
				   .seq_len = L, .pad_id = op->pad_id, .window = op->window};
	p->pack_field = (uint32_t)f;
	memset(&p->out, 0, sizeof(p->out));
	p->out.nfields = 5;
	pack_out_field(&p->out.fields[0], "input_ids", p->in.fields[f].dtype, L, false);
	pack_out_field(&p->out.fields[1], "labels", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[2], "position_ids", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[3], "document_ids", FEED_DTYPE_I64, L, false);
	pack_out_field(&p->out.fields[4], "cu_seqlens", FEED_DTYPE_I32, L, true);
	p->scratch_bytes = pk_scratch_bytes(L);
	return 0;
}

static int plan_ops(struct pipe_plan *p, struct plan_work *w, struct feed_err *err)
{
	for (uint32_t i = 0; i < p->spec.nops; i++) {
		struct pipe_op *op = &p->spec.ops[i];
		int f;
		if (op->kind == PIPE_CONCAT || op->kind == PIPE_PACK)
			return plan_packing(p, i, err);
		if (op->sub) {
			p->op_field[i] = -1; /* runs inside its container */
			continue;
		}
		if (op->kind == PIPE_MIX) {
			int rc = plan_mix(p, w, i, err);
			if (rc < 0)
				return rc;
			continue;
		}
		int rc = plan_field(p, w, i, &f, err);
		if (rc < 0)
			return rc;
		p->op_field[i] = f;
		if (f < 0)
			continue;
		strcpy(op->field, p->in.fields[f].name);
		struct fmt_field *fd = &p->out.fields[f];
		if (op->kind == PIPE_DECODE) {
			rc = plan_decode(p, w, i, (uint32_t)f, err);
		} else if (is_image_op(op->kind)) {
			rc = plan_image_op(p, w, i, (uint32_t)f, err);
		} else if (op->kind == PIPE_RANDOM_WINDOW) {
			w->img_open[f] = false;
			rc = w->st[f] == FS_AS_IS ? plan_window_op(&p->spec, i, fd, &p->dims[i], err)
				: plan_fail(&p->spec, i, err, "key 'field': '%s' is not a sequence "
					    "(fixed 1-D or variable flat)", fd->name);
		}
		if (rc < 0)
			return rc;
	}
	for (uint32_t f = 0; f < p->in.nfields; f++) {
		if (w->st[f] == FS_DECODED)
			return feed_err_set(err, -EINVAL, "pipeline: field '%s': decoded images vary "
					    "in size: end with %s", p->in.fields[f].name,
					    pipe_fixers);
		if (w->st[f] == FS_SHORT)
			return feed_err_set(err, -EINVAL, "pipeline: field '%s': op %u "
					    "resize(short=%u) leaves sizes varying: follow it with "
					    "center_crop", p->in.fields[f].name, w->short_op[f] + 1,
					    p->spec.ops[w->short_op[f]].short_side);
	}
	return 0;
}

int pipe_plan(const struct pipe_spec *spec, const struct fmt_schema *in,
	      struct pipe_plan *ret_plan, struct feed_err *err)
{
	struct pipe_plan *p = ret_plan;
	struct plan_work w;

	if (spec->nops == 0 || spec->nops > PIPE_MAX_OPS)
		return feed_err_set(err, -EINVAL, "pipeline: %u ops (1..%d allowed)", spec->nops,
				    PIPE_MAX_OPS);
	int rc = fmt_schema_check(in, err);
	if (rc < 0)
		return rc;
	memset(p, 0, sizeof(*p));
	memset(&w, 0, sizeof(w));
	p->spec = *spec;
	p->in = *in;
	p->out = *in;
	rc = plan_ops(p, &w, err);
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return rc;
	}
	if (p->pack.mode == PK_MODE_NONE)
		plan_stages(p, &w);
	if (p->bmix.on) {
		uint32_t f = p->bmix.img_field;
		p->bmix.cv = p->stages[p->field_stage[f] + p->field_nstages[f] - 1].cv;
	}
	rc = pipe_spec_canonical(&p->spec, p->canonical, sizeof(p->canonical));
	if (rc < 0) {
		memset(p, 0, sizeof(*p));
		return feed_err_set(err, -EINVAL, "pipeline: canonical text too long");
	}
	p->hash = XXH64(p->canonical, (size_t)rc, 0);
	return 0;
}

int pipe_plan_text(const char *text, const struct fmt_schema *in, struct pipe_plan *ret_plan,
		   struct feed_err *err)
{
	struct pipe_spec spec;
	int rc = pipe_parse(text, &spec, err);

	return rc < 0 ? rc : pipe_plan(&spec, in, ret_plan, err);
}

size_t pipe_scratch_bytes(const struct pipe_plan *plan)
{
	return plan->scratch_bytes;
}

uint64_t pipe_hash(const struct pipe_plan *plan)
{
	return plan->hash;
}
