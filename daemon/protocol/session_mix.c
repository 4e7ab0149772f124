/*
 * session_mix.c: the mixture side of an open (see session_mix.h). Loop
 * thread. Everything here is O(sources), except the blend's period
 * (mixt_new, mixt_blend_counts: O(period * sources), period <= 65536),
 * never O(dataset).
 */
#include "session_mix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "delivery.h"
#include "dstate.h"
#include "feed_shm.h"
#include "pack_stream.h"
#include "pipeline.h"
#include "session.h"

/* One source as asked for. */
struct mix_ask {
	const char *dataset;
	double weight, repeat;
	uint64_t choose;
};

/* The configured mixture named name, or NULL. */
static const struct cfg_mixture *mix_configured(const struct cfg *c, const char *name)
{
	for (size_t i = 0; i < c->nmixtures; i++)
		if (!strcmp(c->mixtures[i].name, name))
			return &c->mixtures[i];
	return NULL;
}

bool ses_mix_asked(const struct ses *se, const Feed__OpenStream *o)
{
	return o->n_mixture > 0 || (o->dataset.len && mix_configured(se->d->cfg, wire_str(o->dataset)));
}

/* The sources o asks for: its own, else the configured mixture's. */
static size_t mix_asks(const struct ses *se, const Feed__OpenStream *o,
		       struct mix_ask ask[MIXT_MAX_SOURCES + 1], uint64_t *ret_epoch_rows)
{
	const struct cfg_mixture *cm = o->n_mixture ? NULL
				       : mix_configured(se->d->cfg, wire_str(o->dataset));
	size_t n = cm ? cm->nsources : o->n_mixture;

	*ret_epoch_rows = cm && !o->samples_per_epoch ? cm->samples_per_epoch : o->samples_per_epoch;
	for (size_t i = 0; i < n && i <= MIXT_MAX_SOURCES; i++)
		ask[i] = cm ? (struct mix_ask){cm->sources[i].dataset, cm->sources[i].weight,
					       cm->sources[i].repeat, cm->sources[i].choose} :
			      (struct mix_ask){wire_str(o->mixture[i]->dataset), o->mixture[i]->weight,
					       o->mixture[i]->repeat, o->mixture[i]->choose};
	return n;
}

/* A source's own epoch: choose rows, else repeat times its samples. */
static int mix_source_rows(const struct mix_ask *a, uint64_t n, uint64_t *ret, struct feed_err *err)
{
	if (!isfinite(a->repeat) || a->repeat < 0.0 || a->repeat * (double)n > (double)ORD_MAX_SAMPLES)
		return feed_err_set(err, -EINVAL, "mixture: source '%s': repeat %g, a finite number "
				    ">= 0 is required (0 means 1)", a->dataset, a->repeat);
	if (a->choose > ORD_MAX_SAMPLES)
		return feed_err_set(err, -EINVAL, "mixture: source '%s': choose %llu is too large",
				    a->dataset, (unsigned long long)a->choose);
	double r = a->repeat > 0.0 ? nearbyint(a->repeat * (double)n) : (double)n;
	*ret = a->choose ? a->choose : r >= 1.0 ? (uint64_t)r : 1;
	return 0;
}

/* What messages call the mixture: its configured name, else its sources. */
static void mix_name(struct ses_mix *m, const Feed__OpenStream *o)
{
	char buf[sizeof(m->name)];
	size_t k;

	if (!o->n_mixture) {
		snprintf(m->name, sizeof(m->name), "mixture '%s'", wire_str(o->dataset));
		snprintf(m->label, sizeof(m->label), "%s", wire_str(o->dataset));
		return;
	}
	k = 0;
	for (uint32_t s = 0; s < m->n && k < sizeof(m->label); s++)
		k += (size_t)snprintf(m->label + k, sizeof(m->label) - k, "%s%s", s ? "+" : "",
				      m->spec.src[s].name);
	k = (size_t)snprintf(buf, sizeof(buf), "mixture (");
	for (uint32_t s = 0; s < m->n && k < sizeof(buf); s++)
		k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%s", s ? ", " : "",
				      m->spec.src[s].name);
	if (k < sizeof(buf))
		snprintf(buf + k, sizeof(buf) - k, ")");
	memcpy(m->name, buf, sizeof(buf));
}

int ses_mix_open(struct ses *se, uint32_t id, const Feed__OpenStream *o, struct ses_mix **ret)
{
	struct mix_ask ask[MIXT_MAX_SOURCES + 1];
	uint64_t rows = 0;
	size_t n = mix_asks(se, o, ask, &rows);
	struct feed_err err = {0};
	struct ses_mix *m;

	if (n == 0 || n > MIXT_MAX_SOURCES) {
		feed_err_set(&err, -EINVAL, "mixture: %zu sources, allowed 1..%d", n, MIXT_MAX_SOURCES);
		ses_error(se, id, err.code, err.msg, SES_REFUSAL);
		return err.code;
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		ses_error(se, id, -ENOMEM, "open_stream: out of memory", SES_REFUSAL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct cat_entry *e = ses_dataset(se, id, ask[i].dataset);
		if (!e) {  /* answered */
			ses_mix_free(m);
			return -ENOENT;
		}
		m->e[m->n++] = cat_entry_ref(e);
		struct mixt_source *s = &m->spec.src[i];
		s->ds = e->ds;
		snprintf(s->name, sizeof(s->name), "%s", e->name);
		s->n = e->info->num_samples;
		snprintf(s->version, sizeof(s->version), "%s", e->info->version);
		s->weight = ask[i].weight;
		m->repeat[i] = ask[i].repeat;
		m->choose[i] = ask[i].choose;
		int rc = mix_source_rows(&ask[i], s->n, &s->epoch_rows, &err);
		if (rc == 0 && s->epoch_rows > ORD_MAX_SAMPLES - rows)
			rc = feed_err_set(&err, -EINVAL, "mixture: its sources' epochs hold more "
					  "than 2^62 rows");
		if (rc < 0) {
			ses_error(se, id, rc, err.msg, SES_REFUSAL);
			ses_mix_free(m);
			return rc;
		}
		m->epoch_rows += s->epoch_rows;
	}
	m->spec.nsrc = m->n;
	m->asked_rows = rows;
	if (rows)
		m->epoch_rows = rows;  /* samples_per_epoch */
	mix_name(m, o);
	*ret = m;
	return 0;
}

/* Source s's rows: its documents, its rows per pass, its epoch in rows. */
static int mix_source_pack(struct ses_mix *m, uint32_t s, const struct pk_spec *pk, bool shuffle,
			   struct feed_err *err)
{
	struct mixt_source *src = &m->spec.src[s];
	struct mix_ask ask = {.dataset = src->name, .repeat = m->repeat[s], .choose = m->choose[s]};
	const uint32_t *lens;
	uint64_t total;
	int rc;

	if (fmt_dataset_doc_lens(src->ds, &lens, &total) < 0)
		return feed_err_set(err, -EINVAL, "no document lengths (%s): pack it again with "
				    "this feedpack", FMT_LENGTHS_FILE);
	if ((rc = pk_source_init(&src->rows, pk, lens, src->n, total, src->version, m->spec.seed,
				 shuffle ? ORD_FULL : ORD_SEQUENTIAL, err)) < 0 ||
	    (rc = pks_spec_check(&(struct pks_spec){.src = &src->rows}, err)) < 0)
		return rc;
	if (pk->mode == PK_MODE_PACK && (ask.choose || (ask.repeat != 0.0 && ask.repeat != 1.0)))
		return pks_spec_check(&(struct pks_spec){.src = &src->rows, .cap = 1}, err);
	/* concat: rows per pass; pack: their least (a pass's count is known
	 * only once placed), its epoch one pass whatever it holds */
	src->n = pk->mode == PK_MODE_CONCAT ? (total - 1) / pk->seq_len :
					      (total + pk->seq_len - 1) / pk->seq_len;
	return mix_source_rows(&ask, src->n, &src->epoch_rows, err);
}

int ses_mix_rows(struct ses_mix *m, const struct pipe_plan *plan, struct dlv_spec *sp,
		 struct feed_err *err)
{
	bool shuffle = m->spec.shuffle && !sp->sched.ord.eval;
	uint64_t rows = 0;
	int rc;

	if (plan->pack.mode == PK_MODE_NONE)
		return 0;
	for (uint32_t s = 0; s < m->n; s++) {
		if ((rc = mix_source_pack(m, s, &plan->pack, shuffle, err)) < 0)
			return feed_err_prefix(err, "mixture: source '%s'", m->spec.src[s].name);
		if (m->spec.src[s].epoch_rows > ORD_MAX_SAMPLES - rows)
			return feed_err_set(err, -EINVAL, "mixture: its sources' epochs hold more "
					    "than 2^62 rows");
		rows += m->spec.src[s].epoch_rows;
	}
	m->epoch_rows = m->asked_rows ? m->asked_rows : rows;
	sp->sched.ord.n = m->epoch_rows;
	return 0;
}

/* The sources' schemas agree field by field (fmt_schema_agree); *ret
 * holds the largest records of each field over all of them. */
static int mix_schema(const struct ses_mix *m, struct fmt_schema *ret, struct feed_err *err)
{
	*ret = *m->e[0]->info->schema;
	for (uint32_t s = 1; s < m->n; s++) {
		const struct fmt_schema *o = m->e[s]->info->schema;
		if (fmt_schema_agree(ret, m->e[0]->name, o, m->e[s]->name, err) < 0)
			return feed_err_prefix(err, "mixture");
		for (uint32_t f = 0; f < o->nfields; f++) {
			struct fmt_field *a = &ret->fields[f];
			const struct fmt_field *b = &o->fields[f];
			a->max_bytes = b->max_bytes > a->max_bytes ? b->max_bytes : a->max_bytes;
			a->max_width = b->max_width > a->max_width ? b->max_width : a->max_width;
			a->max_height = b->max_height > a->max_height ? b->max_height : a->max_height;
			a->max_pixels = b->max_pixels > a->max_pixels ? b->max_pixels : a->max_pixels;
		}
	}
	return 0;
}

/* What a mixture does not offer (yet), refused by name. */
static int mix_options(const Feed__OpenStream *o, struct feed_err *err)
{
	if (o->order == FEED__ORDER__ORDER_BLOCK_WINDOW || o->order == FEED__ORDER__ORDER_NODE)
		return feed_err_set(err, -EINVAL, "order: a mixture reads its sources in full or "
				    "sequential order");
	if (o->group.len)
		return feed_err_set(err, -EINVAL, "group: a mixture is not shared in a group");
	if (o->on_error)
		return feed_err_set(err, -EINVAL, "on_error: a mixture stops on a sample that "
				    "fails (skip is not offered)");
	return 0;
}

/* The mixture's own "version", keying its positions: its sources'. */
static void mix_version(const struct ses_mix *m, char out[17])
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t s = 0; s < m->n; s++)
		for (const char *p = m->spec.src[s].version; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

int ses_mix_spec(struct ses_mix *m, const Feed__OpenStream *o, struct dlv_spec *sp,
		 struct fmt_schema *ret_schema, struct feed_err *err)
{
	struct ord_spec *ord = &sp->sched.ord;
	int rc;

	if ((rc = mix_options(o, err)) < 0 || (rc = mix_schema(m, ret_schema, err)) < 0)
		return rc;
	m->spec.seed = o->seed;
	m->spec.shuffle = o->order == FEED__ORDER__ORDER_FULL;
	ord->n = m->epoch_rows;
	ord->mode = ORD_SEQUENTIAL;
	mix_version(m, ord->version);
	ord->block_first = NULL;
	ord->nblocks = 0;
	ord->window = 1;
	sp->max_bad = 1;
	return 0;
}

int ses_mix_plan(struct pipe_plan *plan, uint32_t *ret_field, struct feed_err *err)
{
	struct fmt_schema *out = &plan->out;

	for (uint32_t f = 0; f < out->nfields; f++)
		if (!strcmp(out->fields[f].name, "source"))
			return feed_err_set(err, -EINVAL, "mixture: the sources have a field 'source', "
					    "the name a mixture gives each row's source");
	if (out->nfields >= FMT_MAX_FIELDS || out->nfields >= FEED_SHM_MAX_FIELDS)
		return feed_err_set(err, -EINVAL, "mixture: %u fields leave no room for 'source'",
				    out->nfields);
	struct fmt_field *f = &out->fields[out->nfields];
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "source");
	f->dtype = FEED_DTYPE_I32;
	f->max_bytes = 4;
	*ret_field = out->nfields++;
	return 0;
}

/* A source's version as the token holds it. */
static uint64_t mix_version_num(const char *v)
{
	return strtoull(v, NULL, 16);
}

/* The token's blend, checked: it is the client's to write. */
static int mix_state_check(const Feed__MixtureState *st, struct feed_err *err)
{
	uint64_t period = 0;

	if (st->n_versions == 0 || st->n_versions > MIXT_MAX_SOURCES ||
	    st->n_given != st->n_versions || st->n_units != st->n_versions || !st->epoch_rows)
		return feed_err_set(err, -EINVAL, "resume token: its mixture is malformed");
	for (size_t i = 0; i < st->n_units; i++)
		period += st->units[i];
	if (period == 0 || period > MIXT_PERIOD_MAX)
		return feed_err_set(err, -EINVAL, "resume token: its mixture's period %llu is out "
				    "of range", (unsigned long long)period);
	return 0;
}

/* Whether the token's blend is this mixture's: then it goes on as it was. */
static bool mix_same(const struct ses_mix *m, const Feed__MixtureState *st, const uint32_t *units)
{
	if (st->n_versions != m->n || st->epoch_rows != m->epoch_rows)
		return false;
	for (uint32_t s = 0; s < m->n; s++)
		if (st->versions[s] != mix_version_num(m->spec.src[s].version) ||
		    st->units[s] != units[s])
			return false;
	return true;
}

/* The token's source that source s continues: the one at its index when
 * of the same dataset version, else the first unused one of that version;
 * -1 for none (a new source). */
static int mix_match(const struct ses_mix *m, const Feed__MixtureState *st, uint32_t s,
		     const bool *used)
{
	uint64_t v = mix_version_num(m->spec.src[s].version);

	if (s < st->n_versions && st->versions[s] == v && !used[s])
		return (int)s;
	for (size_t i = 0; i < st->n_versions; i++)
		if (st->versions[i] == v && !used[i])
			return (int)i;
	return -1;
}

/* Each source's rows before the token's row g, under the token's blend,
 * taken over by the source of the same dataset version (0 for a new one). */
static void mix_carry(struct ses_mix *m, const Feed__MixtureState *st, uint64_t g)
{
	uint64_t c[MIXT_MAX_SOURCES];
	bool used[MIXT_MAX_SOURCES] = {false};

	mixt_blend_counts(st->units, (uint32_t)st->n_units, g - st->base_row, c);
	for (uint32_t s = 0; s < m->n; s++) {
		int i = mix_match(m, st, s, used);
		m->spec.src[s].base = i < 0 ? 0 : st->given[i] + c[i];
		if (i >= 0)
			used[i] = true;
	}
}

int ses_mix_resume(struct ses_mix *m, const Feed__ResumeToken *t, struct feed_err *err)
{
	Feed__MixtureState *st;
	uint32_t units[MIXT_MAX_SOURCES], period;
	double w[MIXT_MAX_SOURCES];
	int rc;

	if (!t->mixture.len)
		return feed_err_set(err, -EINVAL, "resume token: taken on a dataset, not a mixture");
	if (!(st = feed__mixture_state__unpack(NULL, t->mixture.len, t->mixture.data)))
		return feed_err_set(err, -EINVAL, "resume token: its mixture is malformed");
	if ((rc = mix_state_check(st, err)) < 0)
		goto out;
	uint64_t g = t->epoch * st->epoch_rows + t->position;
	if (t->position > ORD_MAX_SAMPLES || t->epoch > (ORD_MAX_SAMPLES << 1) / st->epoch_rows ||
	    g < st->base_row) {
		rc = feed_err_set(err, -EINVAL, "resume token: its position is not in its mixture");
		goto out;
	}
	for (uint32_t s = 0; s < m->n; s++)
		w[s] = m->spec.src[s].weight;
	if ((rc = mixt_units(w, m->n, units, &period, err)) < 0)
		goto out;
	if (mix_same(m, st, units)) {  /* the same blend: exactly what would have come */
		for (uint32_t s = 0; s < m->n; s++)
			m->spec.src[s].base = st->given[s];
		m->spec.base_row = st->base_row;
	} else if (t->position > m->epoch_rows) {
		rc = feed_err_set(err, -EINVAL, "resume token: position %llu is past this "
				  "mixture's epoch of %llu rows", (unsigned long long)t->position,
				  (unsigned long long)m->epoch_rows);
	} else {  /* new shares from here, each source from its position */
		mix_carry(m, st, g);
		m->spec.base_row = t->epoch * m->epoch_rows + t->position;
	}
out:
	feed__mixture_state__free_unpacked(st, NULL);
	return rc;
}

/* The blend as StreamOpened.mixture carries it. */
static int mix_state_pack(struct ses_mix *m, const struct mixture *x, struct feed_err *err)
{
	Feed__MixtureState st = FEED__MIXTURE_STATE__INIT;
	uint64_t ver[MIXT_MAX_SOURCES], base[MIXT_MAX_SOURCES];
	uint32_t units[MIXT_MAX_SOURCES];

	for (uint32_t s = 0; s < m->n; s++) {
		ver[s] = mix_version_num(m->spec.src[s].version);
		base[s] = m->spec.src[s].base;
		units[s] = x->units[s];
	}
	st.n_versions = st.n_given = st.n_units = m->n;
	st.versions = ver;
	st.given = base;
	st.units = units;
	st.base_row = m->spec.base_row;
	st.epoch_rows = m->epoch_rows;
	size_t len = feed__mixture_state__get_packed_size(&st);
	if (len > sizeof(m->state))
		return feed_err_set(err, -E2BIG, "mixture: its state takes %zu bytes, more than a "
				    "resume token holds", len);
	m->state_len = feed__mixture_state__pack(&st, m->state);
	return 0;
}

int ses_mix_make(struct ses_mix *m, struct dlv_spec *sp, struct feed_err *err)
{
	struct mixture *x;
	int rc = mixt_new(&m->spec, &x, err);

	if (rc < 0)
		return rc;
	if ((rc = mix_state_pack(m, x, err)) < 0) {
		mixt_free(x);
		return rc;
	}
	sp->mix = x;
	return 0;
}

/* A delivery's references on a mixture's sources. */
struct mix_refs {
	uint32_t n;
	const struct cat_entry *e[MIXT_MAX_SOURCES];
};

void *ses_mix_refs_get(const struct ses_mix *m)
{
	struct mix_refs *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	for (uint32_t s = 0; s < m->n; s++)
		r->e[r->n++] = cat_entry_ref(m->e[s]);
	return r;
}

void ses_mix_refs_put(void *refs)
{
	struct mix_refs *r = refs;

	for (uint32_t s = 0; r && s < r->n; s++)
		cat_entry_unref(r->e[s]);
	free(r);
}

void ses_mix_free(struct ses_mix *m)
{
	if (!m)
		return;
	for (uint32_t s = 0; s < m->n; s++)
		cat_entry_unref(m->e[s]);
	free(m);
}
