/*
 * mixture.c: the blend of a mixture's sources and each source's own epochs
 * (see mixture.h). Pure functions of an immutable mixture; any thread.
 * The session makes a mixture at an open (its period table: O(period *
 * sources), never O(dataset)); workers resolve each batch's rows with it.
 */
#include "mixture.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Whether units u (period p) hold every share w[s] / sum within 1e-9. */
static bool units_exact(const double *w, uint32_t n, double sum, uint32_t p, uint32_t *u)
{
	uint64_t tot = 0;

	for (uint32_t s = 0; s < n; s++) {
		double x = w[s] / sum * p, r = nearbyint(x);
		if (fabs(x - r) > 1e-9 * p || (w[s] > 0.0 && r < 1.0))
			return false;
		u[s] = (uint32_t)r;
		tot += u[s];
	}
	return tot == p;
}

/* Units of MIXT_PERIOD_MAX: floors, then the largest remainders rounded up
 * (ties to the lowest index). */
static void units_round(const double *w, uint32_t n, double sum, uint32_t *u)
{
	double rem[MIXT_MAX_SOURCES];
	uint64_t tot = 0;

	for (uint32_t s = 0; s < n; s++) {
		double x = w[s] / sum * MIXT_PERIOD_MAX;
		u[s] = (uint32_t)floor(x);
		rem[s] = x - u[s];
		tot += u[s];
	}
	for (; tot < MIXT_PERIOD_MAX; tot++) {
		uint32_t best = 0;
		for (uint32_t s = 1; s < n; s++)
			if (rem[s] > rem[best])
				best = s;
		u[best]++;
		rem[best] = -1.0;
	}
	/* a weight above 0 is never rounded away: its unit comes from the largest */
	for (uint32_t s = 0; s < n; s++)
		if (w[s] > 0.0 && u[s] == 0) {
			uint32_t big = 0;
			for (uint32_t k = 1; k < n; k++)
				if (u[k] > u[big])
					big = k;
			u[big]--;
			u[s] = 1;
		}
}

int mixt_units(const double *w, uint32_t n, uint32_t *ret_units, uint32_t *ret_period,
	       struct feed_err *err)
{
	uint32_t u[MIXT_MAX_SOURCES];
	double sum = 0.0;

	if (n == 0 || n > MIXT_MAX_SOURCES)
		return feed_err_set(err, -EINVAL, "mixture: %u sources, allowed 1..%d", n,
				    MIXT_MAX_SOURCES);
	for (uint32_t s = 0; s < n; s++) {
		if (!isfinite(w[s]) || w[s] < 0.0)
			return feed_err_set(err, -EINVAL, "mixture: source %u: weight %g, a finite "
					    "number >= 0 is required", s, w[s]);
		sum += w[s];
	}
	if (!(sum > 0.0) || !isfinite(sum))
		return feed_err_set(err, -EINVAL, "mixture: the weights sum to %g; at least one "
				    "must be above 0", sum);
	for (uint32_t p = 1; p <= MIXT_PERIOD_MAX; p++)
		if (units_exact(w, n, sum, p, u)) {
			memcpy(ret_units, u, n * sizeof(u[0]));
			*ret_period = p;
			return 0;
		}
	units_round(w, n, sum, u);
	memcpy(ret_units, u, n * sizeof(u[0]));
	*ret_period = MIXT_PERIOD_MAX;
	return 0;
}

/* The source of row r of a period (rows c[] given so far in it): the one
 * furthest below its share, u[s] * (r + 1) - p * c[s] largest. */
static uint32_t blend_pick(const uint32_t *u, uint32_t n, uint32_t p, uint64_t r,
			   const uint64_t *c)
{
	uint32_t best = 0;
	int64_t bd = INT64_MIN;

	/* a source of 0 units is never picked: its deficit is <= 0 while the
	 * deficits sum to p > 0 */
	for (uint32_t s = 0; s < n; s++) {
		int64_t d = (int64_t)u[s] * (int64_t)(r + 1) - (int64_t)p * (int64_t)c[s];
		if (d > bd) {
			best = s;
			bd = d;
		}
	}
	return best;
}

void mixt_blend_counts(const uint32_t *u, uint32_t n, uint64_t r, uint64_t *ret)
{
	uint32_t p = 0;

	for (uint32_t s = 0; s < n; s++)
		p += u[s];
	uint64_t q = r / p, m = r % p, c[MIXT_MAX_SOURCES] = {0};
	for (uint64_t i = 0; i < m; i++)
		c[blend_pick(u, n, p, i, c)]++;
	for (uint32_t s = 0; s < n; s++)
		ret[s] = q * u[s] + c[s];
}

int mixt_new(const struct mixt_spec *spec, struct mixture **ret, struct feed_err *err)
{
	struct mixture *m = calloc(1, sizeof(*m));
	double w[MIXT_MAX_SOURCES];
	int rc;

	if (!m)
		return feed_err_set(err, -ENOMEM, "mixture: out of memory");
	m->spec = *spec;
	for (uint32_t s = 0; s < spec->nsrc && s < MIXT_MAX_SOURCES; s++)
		w[s] = spec->src[s].weight;
	if ((rc = mixt_units(w, spec->nsrc, m->units, &m->period, err)) < 0)
		goto fail;
	for (uint32_t s = 0; s < spec->nsrc; s++) {
		const struct mixt_source *src = &spec->src[s];
		if (src->n == 0 || src->epoch_rows == 0) {
			rc = feed_err_set(err, -EINVAL, "mixture: source '%s' has no sample", src->name);
			goto fail;
		}
		m->passes[s] = src->epoch_rows / src->n + (src->epoch_rows % src->n != 0);
	}
	m->pick = malloc(m->period);
	m->rank = malloc(m->period * sizeof(m->rank[0]));
	if (!m->pick || !m->rank) {
		rc = feed_err_set(err, -ENOMEM, "mixture: out of memory");
		goto fail;
	}
	uint64_t c[MIXT_MAX_SOURCES] = {0};
	for (uint32_t r = 0; r < m->period; r++) {
		uint32_t s = blend_pick(m->units, spec->nsrc, m->period, r, c);
		m->pick[r] = (uint8_t)s;
		m->rank[r] = (uint32_t)c[s]++;
	}
	*ret = m;
	return 0;
fail:
	mixt_free(m);
	return rc;
}

void mixt_free(struct mixture *m)
{
	if (!m)
		return;
	free(m->pick);
	free(m->rank);
	free(m);
}

uint32_t mixt_row(const struct mixture *m, uint64_t g, uint64_t *ret_k)
{
	uint64_t r = g - m->spec.base_row, q = r / m->period, i = r % m->period;
	uint32_t s = m->pick[i];

	*ret_k = m->spec.src[s].base + q * m->units[s] + m->rank[i];
	return s;
}

void mixt_counts(const struct mixture *m, uint64_t g, uint64_t *ret)
{
	mixt_blend_counts(m->units, m->spec.nsrc, g - m->spec.base_row, ret);
	for (uint32_t s = 0; s < m->spec.nsrc; s++)
		ret[s] += m->spec.src[s].base;
}

int mixt_sample(const struct mixture *m, struct mixt_cursor *c, uint32_t s, uint64_t k,
		uint64_t *ret_sample, struct feed_err *err)
{
	const struct mixt_source *src = &m->spec.src[s];
	uint64_t epoch = k / src->epoch_rows, j = k % src->epoch_rows;
	/* each pass of each source epoch is an order of its own */
	uint64_t key = epoch * m->passes[s] + j / src->n;
	int rc;

	if (!c->valid[s] || c->key[s] != key) {
		struct ord_spec o = {
			.n = src->n, .seed = m->spec.seed,
			.mode = m->spec.shuffle ? ORD_FULL : ORD_SEQUENTIAL,
			.rank = 0, .world = 1, .batch = 1, .drop_last = true,
		};
		memcpy(o.version, src->version, sizeof(o.version));
		if (c->valid[s])
			ord_epoch_fini(&c->ord[s]);
		c->valid[s] = false;
		if ((rc = ord_epoch_init(&c->ord[s], &o, key, err)) < 0)
			return feed_err_prefix(err, "mixture: source '%s'", src->name);
		c->valid[s] = true;
		c->key[s] = key;
	}
	*ret_sample = ord_permute(&c->ord[s], j % src->n);
	return 0;
}

void mixt_cursor_fini(struct mixt_cursor *c)
{
	for (uint32_t s = 0; s < MIXT_MAX_SOURCES; s++)
		if (c->valid[s])
			ord_epoch_fini(&c->ord[s]);
	memset(c->valid, 0, sizeof(c->valid));
}

bool mixt_packed(const struct mixture *m)
{
	return m->spec.src[0].rows.spec.mode != PK_MODE_NONE;
}

void mixt_pks_spec(const struct mixture *m, uint32_t s, struct pks_spec *ret)
{
	const struct mixt_source *src = &m->spec.src[s];

	*ret = (struct pks_spec){.src = &src->rows,
				 .cap = src->rows.spec.mode == PK_MODE_CONCAT ? src->epoch_rows : 0};
}

/* w's counts moved to row g: row by row when g is within a period ahead,
 * else computed afresh. */
static void walk_counts(struct mixt_walk *w, const struct mixture *m, uint64_t g)
{
	if (w->valid && g >= w->g && g - w->g <= m->period) {
		for (uint64_t r = w->g; r < g; r++) {
			uint64_t k;
			uint32_t s = mixt_row(m, r, &k);
			w->k[s] = k + 1;
		}
	} else {
		mixt_counts(m, g, w->k);
	}
	w->g = g;
	w->valid = true;
}

int mixt_walk_to(struct mixt_walk *w, const struct mixture *m, uint64_t g, struct pks_pos *ret,
		 struct feed_err *err)
{
	int rc;

	walk_counts(w, m, g);
	for (uint32_t s = 0; s < m->spec.nsrc; s++) {
		struct pks_spec sp;
		mixt_pks_spec(m, s, &sp);
		pks_stream_use(&w->st[s], &sp);
		if ((rc = pks_seek(&w->st[s], &w->pos[s], w->k[s], err)) < 0) {
			w->valid = false;
			return feed_err_prefix(err, "mixture: source '%s'", m->spec.src[s].name);
		}
		ret[s] = w->pos[s];
	}
	return 0;
}

void mixt_walk_fini(struct mixt_walk *w)
{
	for (uint32_t s = 0; s < MIXT_MAX_SOURCES; s++)
		pks_stream_fini(&w->st[s]);
	memset(w, 0, sizeof(*w));
}
