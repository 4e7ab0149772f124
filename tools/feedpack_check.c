/*
 * feedpack_check.c: decodes every image in full, on every core, and lists
 * those that fail: `feedpack imagefolder DIR --check` (the files) and
 * `feedpack verify DIR --decode` (a packed dataset's first image field).
 * The verdict is feedd's own (core/image_decode.c): what fails here fails
 * in a stream, what decodes here with libjpeg warnings decodes there (and
 * in PIL) to the same pixels.
 *
 * Threads: chk_run() starts one worker per online CPU and waits for them;
 * the calling thread draws the progress bar. Work is handed out by unit
 * (a file, or a block of the dataset: its records are decoded by the
 * worker that read it) through an atomic counter; results are gathered
 * under one mutex and printed in sample order once every worker is done,
 * so the output does not depend on the thread count.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedpack.h"
#include "image.h"

#define CHK_THREADS_MAX 256

/* One image that failed, or decoded with warnings. */
struct chk_note {
	uint64_t index;            /* sample order: sorts the output */
	bool failed;               /* else: decoded with libjpeg warnings */
	char *text;                /* "NAME: words", owned */
};

/* One worker's decoder and buffers. */
struct chk_worker {
	struct chk *c;
	struct img_decoder *dec;   /* grown to the largest image seen */
	struct img_limits lim;     /* dec's */
	void *unit_state;          /* the source's per-worker state */
};

struct chk {
	const struct chk_source *src;
	void *arg;                 /* src's */
	_Atomic uint64_t next;     /* next unit to hand out */
	_Atomic uint64_t done_bytes, done_images;
	pthread_mutex_t mu;        /* guards notes and first_err */
	struct chk_note *notes;
	size_t nnotes, cap;
	uint64_t failed, warned;
	int first_err;             /* a fault that is not an image's (I/O, memory) */
	struct feed_err err;       /* its message */
};

/* ------------------------------------------------------------------ */

static void chk_note_add(struct chk *c, uint64_t index, bool failed, const char *name,
			 const char *words)
{
	size_t n = strlen(name) + strlen(words) + 16;
	char *text = malloc(n);

	pthread_mutex_lock(&c->mu);
	if (failed)
		c->failed++;
	else
		c->warned++;
	if (c->nnotes == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct chk_note *p = realloc(c->notes, cap * sizeof(*p));
		if (p)
			c->notes = p, c->cap = cap;
	}
	if (text && c->nnotes < c->cap) {
		snprintf(text, n, "%s: %s%s", name, failed ? "" : "warning: ", words);
		c->notes[c->nnotes++] = (struct chk_note){index, failed, text};
		text = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	free(text);
}

/* Grows w's decoder for a w x h image (not past max_pixels: such an image
 * is refused by the decode, as feedd refuses it, without the memory). */
static int chk_grow(struct chk_worker *w, uint32_t width, uint32_t height, struct feed_err *err)
{
	if (w->dec && width <= w->lim.max_width && height <= w->lim.max_height)
		return 0;
	struct img_limits lim = {
		.max_width = width > w->lim.max_width ? width : w->lim.max_width,
		.max_height = height > w->lim.max_height ? height : w->lim.max_height,
	};
	if ((uint64_t)width * height > IMG_MAX_PIXELS_DEFAULT) {
		if (w->dec)
			return 0;
		lim = (struct img_limits){.max_width = 64, .max_height = 64};
	}
	/* the pixel buffer is capped at max_pixels (image.h) whatever the sides */
	struct img_decoder *dec;
	int rc = img_decoder_new(&lim, 3, &dec, err);
	if (rc < 0)
		return rc;
	img_decoder_free(w->dec);
	w->dec = dec;
	w->lim = lim;
	return 0;
}

void chk_fail(struct chk_worker *w, uint64_t index, const char *name, const char *words)
{
	chk_note_add(w->c, index, true, name, words);
	atomic_fetch_add_explicit(&w->c->done_images, 1, memory_order_relaxed);
}

void *chk_state(struct chk_worker *w)
{
	return w->unit_state;
}

void chk_image(struct chk_worker *w, uint64_t index, const char *name, const void *data,
	       size_t len)
{
	struct feed_err e = {0};
	struct img_info info;
	struct img_decoded d;
	int rc = img_probe(data, len, &info, &e);

	if (rc == 0 && (rc = chk_grow(w, info.width, info.height, &e)) == -ENOMEM) {
		pthread_mutex_lock(&w->c->mu);
		if (!w->c->first_err)
			w->c->first_err = rc, w->c->err = e;
		pthread_mutex_unlock(&w->c->mu);
		return;
	}
	if (rc == 0)
		rc = img_decode(w->dec, data, len, NULL, 1, &d, &e);
	if (rc < 0)
		chk_note_add(w->c, index, true, name, e.msg);
	else if (d.warnings)
		chk_note_add(w->c, index, false, name, d.warning);
	atomic_fetch_add_explicit(&w->c->done_images, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->c->done_bytes, len, memory_order_relaxed);
}

static void *chk_thread(void *p)
{
	struct chk_worker *w = p;
	struct chk *c = w->c;
	struct feed_err e = {0};
	int rc = c->src->worker_init ? c->src->worker_init(c->arg, &w->unit_state, &e) : 0;

	for (uint64_t u; rc == 0 && (u = atomic_fetch_add_explicit(&c->next, 1,
								    memory_order_relaxed)) <
					 c->src->units;) {
		if ((rc = c->src->unit(c->arg, w, u, &e)) < 0)
			break;
		pthread_mutex_lock(&c->mu);
		rc = c->first_err;  /* another worker's fault stops us too */
		pthread_mutex_unlock(&c->mu);
	}
	if (rc < 0 && e.msg[0]) {
		pthread_mutex_lock(&c->mu);
		if (!c->first_err)
			c->first_err = rc, c->err = e;
		pthread_mutex_unlock(&c->mu);
	}
	if (c->src->worker_fini)
		c->src->worker_fini(c->arg, w->unit_state);
	return NULL;
}

static int chk_note_cmp(const void *a, const void *b)
{
	const struct chk_note *x = a, *y = b;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Prints the notes in sample order and the summary; returns the verdict. */
static int chk_report(struct chk *c, const char *what, unsigned nthreads, struct feed_err *err)
{
	uint64_t n = atomic_load(&c->done_images);

	if (c->nnotes) /* notes is NULL when nothing was noted: qsort must not see it */
		qsort(c->notes, c->nnotes, sizeof(*c->notes), chk_note_cmp);
	for (size_t i = 0; i < c->nnotes; i++)
		printf("%s\n", c->notes[i].text);
	printf("%" PRIu64 " images decoded in full on %u threads: %" PRIu64 " fail, %" PRIu64
	       " decode with warnings (damage PIL decodes too)\n",
	       n, nthreads, c->failed, c->warned);
	fflush(stdout);
	if (c->failed)
		return feed_err_set(err, -EBADMSG, "%s: %" PRIu64 " of %" PRIu64
				    " images do not decode (listed above)", what, c->failed, n);
	return 0;
}

int chk_run(const struct chk_source *src, void *arg, const char *what, struct feed_err *err)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = cpus < 1 ? 1 : cpus > CHK_THREADS_MAX ? CHK_THREADS_MAX : (unsigned)cpus;
	struct chk c = {.src = src, .arg = arg};
	struct chk_worker w[CHK_THREADS_MAX];
	pthread_t t[CHK_THREADS_MAX];
	struct pack_progress prog;
	unsigned started = 0;
	int rc = 0;

	pthread_mutex_init(&c.mu, NULL);
	memset(w, 0, sizeof(w[0]) * n);
	progress_start(&prog, "decoding", "images", src->total_bytes);
	for (unsigned i = 0; i < n; i++) {
		w[i].c = &c;
		if (pthread_create(&t[i], NULL, chk_thread, &w[i]) != 0)
			break;
		started++;
	}
	if (started == 0) {
		rc = feed_err_set(err, -EAGAIN, "%s: cannot start a thread", what);
		goto out;
	}
	/* the bar, until every unit is handed out; then wait for the last */
	while (atomic_load_explicit(&c.next, memory_order_relaxed) < src->units) {
		progress_tick(&prog, atomic_load(&c.done_bytes), atomic_load(&c.done_images));
		usleep(50 * 1000); /* a redraw interval, not a wait for a condition */
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	progress_end(&prog);
	if (c.first_err) {
		*err = c.err;
		rc = c.first_err;
	} else {
		rc = chk_report(&c, what, started, err);
	}
out:
	for (unsigned i = 0; i < n; i++)
		img_decoder_free(w[i].dec);
	for (size_t i = 0; i < c.nnotes; i++)
		free(c.notes[i].text);
	free(c.notes);
	pthread_mutex_destroy(&c.mu);
	return rc;
}

/* ------------------------------------------------------------------ */
/* feedpack verify DIR --decode                                        */

/* A worker's block buffers. */
struct vd_state {
	struct fmt_decoder *dec;
	uint8_t *comp, *raw;
};

struct vd {
	const char *dir;
	const struct fmt_dataset *ds;
	uint32_t field;            /* the first image field */
	size_t comp_cap, raw_cap;
};

static void vd_fini(void *arg, void *state)
{
	struct vd_state *s = state;
	(void)arg;
	if (!s)
		return;
	fmt_decoder_free(s->dec);
	free(s->comp);
	free(s->raw);
	free(s);
}

static int vd_init(void *arg, void **ret_state, struct feed_err *err)
{
	struct vd *v = arg;
	struct vd_state *s = calloc(1, sizeof(*s));

	if (!s || fmt_decoder_new(&s->dec) < 0 || !(s->comp = malloc(v->comp_cap)) ||
	    !(s->raw = aligned_alloc(FMT_SECTION_ALIGN, v->raw_cap))) {
		vd_fini(arg, s);
		return feed_err_set(err, -ENOMEM, "verify %s: out of memory", v->dir);
	}
	*ret_state = s;
	return 0;
}

static int vd_unit(void *arg, struct chk_worker *w, uint64_t block, struct feed_err *err)
{
	struct vd *v = arg;
	struct vd_state *s = w->unit_state;
	struct fmt_block blk;
	char name[48];
	int rc = fmt_block_read(v->ds, block, s->dec, s->comp, v->comp_cap, s->raw, v->raw_cap,
				&blk, err);

	if (rc < 0)
		return feed_err_prefix(err, "verify %s", v->dir);
	for (uint32_t r = 0; r < blk.num_records; r++) {
		uint64_t i = blk.first_sample + r;
		size_t len;
		const void *p = fmt_block_field(&blk, v->field, r, &len);
		const char *path = fmt_dataset_sample_path(v->ds, i);
		if (!path) {
			snprintf(name, sizeof(name), "sample %" PRIu64, i);
			path = name;
		}
		chk_image(w, i, path, p, len);
	}
	return 0;
}

int chk_verify_decode(const char *dir, const struct fmt_dataset *ds, struct feed_err *err)
{
	const struct fmt_info *info = fmt_dataset_info(ds);
	struct vd v = {.dir = dir, .ds = ds, .field = UINT32_MAX};

	for (uint32_t f = 0; f < info->schema->nfields && v.field == UINT32_MAX; f++)
		if (info->schema->fields[f].image)
			v.field = f;
	if (v.field == UINT32_MAX)
		return feed_err_set(err, -EINVAL, "verify %s: --decode: the dataset has no image "
				    "field", dir);
	v.comp_cap = info->max_block_comp ? info->max_block_comp : 1;
	v.raw_cap = (info->max_block_raw + FMT_SECTION_ALIGN) & ~(size_t)(FMT_SECTION_ALIGN - 1);
	struct chk_source src = {.units = info->num_blocks, .total_bytes = info->bytes_raw,
				 .worker_init = vd_init, .worker_fini = vd_fini, .unit = vd_unit};
	return chk_run(&src, &v, dir, err);
}
