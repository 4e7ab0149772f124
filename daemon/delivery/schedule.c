/*
 * schedule.c: a stream's positions (see schedule.h). Called by delivery
 * under its lock; O(1) per call: block-window position tables are built
 * by the owner off the lock (sched_table_want/put) and freed by it too.
 */
#include "schedule.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps table t to give back at the next sched_table_put() (freeing it
 * here would unmap it under the owner's lock). */
static void table_retire(struct sched *s, uint64_t *t)
{
	if (!t)
		return;
	if (s->nretired < SCHED_TABLES_FREED)
		s->retired[s->nretired++] = t;
	else
		free(t);  /* never: one epoch is made per table put */
}

/* Drops e's layout, keeping its table for the owner to free. */
static void epoch_drop(struct sched *s, struct sched_epoch *e)
{
	if (e->valid) {
		table_retire(s, ord_epoch_take_table(&e->ord));
		ord_epoch_fini(&e->ord);
	}
	e->valid = false;
}

/* Lays epoch `epoch` out from position 0 into its half of s->ep, with the
 * table built ahead for it if there is one. */
static int epoch_make(struct sched *s, uint64_t epoch, struct feed_err *err)
{
	struct sched_epoch *e = &s->ep[epoch & 1];
	int rc;

	epoch_drop(s, e);
	memset(e, 0, sizeof(*e));
	if ((rc = ord_epoch_init(&e->ord, &s->spec.ord, epoch, err)) < 0)
		return rc;
	e->valid = true;
	e->epoch = epoch;
	if (s->ahead && s->ahead_epoch == epoch && ord_epoch_needs_table(&e->ord)) {
		ord_epoch_set_table(&e->ord, s->ahead);
		s->ahead = NULL;
	}
	return 0;
}

/* Whether the layout e holds starts a batch at global position pos: then
 * s->next_batch is that batch (1), or *ret_end when pos is at or past the
 * epoch's end (1 too); else 0, and e's layout is dropped for a new one. */
static int epoch_seek(struct sched *s, struct sched_epoch *e, uint64_t pos, bool *ret_end)
{
	uint64_t b;

	*ret_end = pos >= ord_position_of(&e->ord, ord_batches_per_epoch(&e->ord));
	if (*ret_end)
		return 1;
	if (ord_batch_at_position(&e->ord, pos, &b) == 0) {
		s->next_batch = b;
		return 1;
	}
	epoch_drop(s, e);
	return 0;
}

/* The start epoch of a resume at global position P: the whole epoch's
 * layout when P starts one of its batches (true indices), else the rest of
 * the epoch laid out from P. *ret_end is set when P is at or past the
 * epoch's end. */
static int epoch_make_at(struct sched *s, uint64_t epoch, uint64_t pos, bool *ret_end,
			 struct feed_err *err)
{
	struct sched_epoch *e = &s->ep[epoch & 1];
	uint64_t stride = (uint64_t)s->spec.ord.batch * s->spec.ord.world;
	int rc = epoch_make(s, epoch, err);

	if (rc < 0)
		return rc;
	if (epoch_seek(s, e, pos, ret_end))
		return 0;
	if ((rc = ord_epoch_init_at(&e->ord, &s->spec.ord, epoch, pos, err)) < 0)
		return rc;
	e->valid = true;
	e->base = pos / stride;
	s->next_batch = 0;
	*ret_end = ord_batches_per_epoch(&e->ord) == 0;
	return 0;
}

/* Node order: the start epoch of a resume. The token's layouts (its
 * earlier levels) go on as they are when it was taken on this node count
 * at a batch boundary of this layout; otherwise the remaining positions
 * are laid out again over this stream's nodes from position 0 (a level
 * more: core/order.h "Node order"), indices counting on from the batch
 * the position falls in. The open reply tells the client
 * (sched_resume_layout()). */
static int epoch_make_node_at(struct sched *s, uint64_t epoch, uint64_t pos, bool *ret_end,
			      struct feed_err *err)
{
	const struct sched_spec *sp = &s->spec;
	struct sched_epoch *e = &s->ep[epoch & 1];
	struct ord_level lv[ORD_MAX_LEVELS + 1];
	uint64_t stride = (uint64_t)sp->ord.batch * sp->ord.world;
	int rc;

	epoch_drop(s, e);
	memset(e, 0, sizeof(*e));
	memcpy(lv, sp->levels, sp->nlevels * sizeof(lv[0]));
	if (sp->start_nodes == sp->ord.nodes) {
		if ((rc = ord_epoch_init_levels(&e->ord, &sp->ord, epoch, lv, sp->nlevels, err)) < 0)
			return rc;
		e->valid = true;
		e->epoch = epoch;
		s->resume_nlevels = sp->nlevels;
		memcpy(s->resume_levels, lv, sp->nlevels * sizeof(lv[0]));
		if (epoch_seek(s, e, pos, ret_end))
			return 0;
	}
	lv[sp->nlevels] = (struct ord_level){.nodes = sp->start_nodes, .pos = pos};
	if ((rc = ord_epoch_init_levels(&e->ord, &sp->ord, epoch, lv, sp->nlevels + 1, err)) < 0)
		return rc;
	s->resume_from = 0;  /* ord_epoch_init_levels took at most ORD_MAX_LEVELS */
	s->resume_nlevels = sp->nlevels + 1;
	memcpy(s->resume_levels, lv, s->resume_nlevels * sizeof(lv[0]));
	e->valid = true;
	e->epoch = epoch;
	e->base = pos / stride;
	s->next_batch = 0;
	*ret_end = ord_batches_per_epoch(&e->ord) == 0;
	return 0;
}

/* The start position, resolved; *ret_empty when nothing is left. */
static int sched_start(struct sched *s, bool *ret_empty, struct feed_err *err)
{
	const struct sched_spec *sp = &s->spec;
	bool end = false;
	int rc;

	*ret_empty = false;
	s->next_epoch = sp->start_epoch;
	s->next_batch = sp->start_batch;
	if (!sp->at_position)
		return epoch_make(s, sp->start_epoch, err);
	s->resume_from = sp->start_position;
	if (sp->ord.mode == ORD_NODE && !sp->ord.eval)
		rc = epoch_make_node_at(s, sp->start_epoch, sp->start_position, &end, err);
	else
		rc = epoch_make_at(s, sp->start_epoch, sp->start_position, &end, err);
	if (rc < 0 || !end)
		return rc;
	/* taken once the epoch was done: the next one starts, with no END_OF_EPOCH */
	s->next_epoch = sp->start_epoch + 1;
	s->next_batch = 0;
	if (sp->epochs && s->next_epoch >= sp->epochs) {
		*ret_empty = true;
		return 0;
	}
	return epoch_make(s, s->next_epoch, err);
}

int sched_init(struct sched *s, const struct sched_spec *spec, struct feed_err *err)
{
	bool empty;
	int rc;

	memset(s, 0, sizeof(*s));
	s->spec = *spec;
	s->spec.ord.lazy_table = true;  /* sched_table_want(): built off the lock */
	/* epoch numbers count up without end (epochs 0): a start this near
	 * 2^64 (a request's start_epoch, a token's epoch) would wrap to 0 */
	if (spec->start_epoch >= SCHED_EPOCH_MAX)
		return feed_err_set(err, -EINVAL, "start epoch %llu: epochs are numbered below 2^63",
				    (unsigned long long)spec->start_epoch);
	if ((rc = sched_start(s, &empty, err)) < 0)
		return rc;
	s->first_epoch = s->next_epoch;
	if (empty) {
		s->empty = s->done = true;
		return 0;
	}
	const struct sched_epoch *e = &s->ep[s->next_epoch & 1];
	s->first_index = e->base + s->next_batch;
	uint64_t nb = ord_batches_per_epoch(&e->ord);
	if (spec->epochs && s->next_epoch >= spec->epochs)
		return feed_err_set(err, -EINVAL, "start epoch %llu is past the %llu epochs asked for",
				    (unsigned long long)s->next_epoch,
				    (unsigned long long)spec->epochs);
	if (nb == 0)
		return feed_err_set(err, -EINVAL, "rank %u of %u gets no batch of %u samples in an epoch",
				    spec->ord.rank, spec->ord.world, spec->ord.batch);
	if (s->next_batch >= nb)
		return feed_err_set(err, -EINVAL, "start batch %llu is past the epoch's %llu batches",
				    (unsigned long long)s->next_batch, (unsigned long long)nb);
	return 0;
}

void sched_fini(struct sched *s)
{
	ord_epoch_fini(&s->pk_order);
	s->pk_valid = false;
	pk_window_free(&s->pk_win);
	pk_window_free(&s->pk_win_ahead);
	for (int i = 0; i < 2; i++)
		if (s->ep[i].valid)
			ord_epoch_fini(&s->ep[i].ord);
	memset(s->ep, 0, sizeof(s->ep));
	free(s->ahead);
	s->ahead = NULL;
	for (uint32_t i = 0; i < s->nretired; i++)
		free(s->retired[i]);
	s->nretired = 0;
}

/* Whether epoch `epoch`'s table is somewhere already: in its layout or
 * built ahead. */
static bool table_have(const struct sched *s, uint64_t epoch)
{
	const struct sched_epoch *e = &s->ep[epoch & 1];

	if (e->valid && e->epoch == epoch)
		return !ord_epoch_needs_table(&e->ord);
	return s->ahead && s->ahead_epoch == epoch;
}

bool sched_table_want(struct sched *s, uint64_t *ret_epoch)
{
	const struct ord_spec *o = &s->spec.ord;
	uint64_t epoch = s->next_epoch;

	if (o->mode != ORD_BLOCK_WINDOW || o->eval || s->done || s->building || s->table_rc)
		return false;
	if (table_have(s, epoch)) {
		epoch++;  /* ahead: the one after the epoch being handed out */
		if ((s->spec.epochs && epoch >= s->spec.epochs) || s->ahead || table_have(s, epoch))
			return false;
	}
	s->building = true;
	*ret_epoch = epoch;
	return true;
}

uint32_t sched_table_put(struct sched *s, uint64_t epoch, uint64_t *t, int rc, const char *msg,
			 uint64_t *ret_free[SCHED_TABLES_FREED])
{
	struct sched_epoch *e = &s->ep[epoch & 1];
	uint32_t n = 0;

	s->building = false;
	if (rc < 0) {
		s->table_rc = rc;
		s->table_err_epoch = epoch;
		snprintf(s->table_msg, sizeof(s->table_msg), "%s", msg);
	} else if (t && e->valid && e->epoch == epoch && ord_epoch_needs_table(&e->ord)) {
		ord_epoch_set_table(&e->ord, t);
	} else if (t && !s->ahead && epoch >= s->next_epoch) {
		s->ahead = t;
		s->ahead_epoch = epoch;
	} else {
		table_retire(s, t);  /* not wanted any more */
	}
	while (s->nretired)
		ret_free[n++] = s->retired[--s->nretired];
	return n;
}

/* Packing: a new epoch's document order, its cursors at its start. */
static int sched_rows_epoch(struct sched *s, uint64_t epoch, struct feed_err *err)
{
	int rc;

	ord_epoch_fini(&s->pk_order);
	s->pk_valid = false;
	if ((rc = pk_source_epoch(&s->spec.rows, epoch, &s->pk_order, &s->pk_docs, err)) < 0)
		return rc;
	s->pk_valid = true;
	s->pk_epoch = epoch;
	s->pk_cur = s->pk_ahead = (struct pk_cursor){0};
	s->pk_win.index = s->pk_win_ahead.index = UINT64_MAX;  /* placed for another epoch */
	s->pk_win.nsegs = s->pk_win_ahead.nsegs = 0;
	return 0;
}

/* pack: whether the world's batch starting at global row `base` is whole
 * (1) or past the epoch's rows (0); -ENOMEM. */
static int sched_pack_whole(struct sched *s, uint64_t base, uint64_t world)
{
	return pk_pack_seek(&s->pk_docs, &s->spec.rows.spec, &s->pk_ahead, &s->pk_win_ahead,
			    base + world - 1);
}

/* pack: p is a whole batch of the world's (else the epoch has none: an
 * error); it is the epoch's last when the next one is not whole. */
static int sched_pack_pos(struct sched *s, struct sched_pos *p, struct feed_err *err)
{
	const struct pk_spec *sp = &s->spec.rows.spec;
	uint64_t world = (uint64_t)s->spec.ord.batch * s->spec.ord.world;
	uint64_t base = ord_position_of(p->ord, p->batch);
	int rc = sched_pack_whole(s, base, world), next = 0;

	if (rc == 0)
		return feed_err_set(err, -EINVAL, "pack(seq_len=%u): epoch %llu has %llu rows, not "
				    "a batch of %u for each of %u ranks", sp->seq_len,
				    (unsigned long long)p->epoch, (unsigned long long)s->pk_ahead.row,
				    s->spec.ord.batch, s->spec.ord.world);
	if (rc > 0)
		rc = next = sched_pack_whole(s, base + world, world);
	if (rc >= 0)
		rc = pk_pack_seek(&s->pk_docs, sp, &s->pk_cur, &s->pk_win,
				  ord_sample(p->ord, p->batch, 0));
	if (rc < 0)
		return feed_err_set(err, rc, "pack: out of memory for a window");
	p->nsamples = s->spec.ord.batch;
	p->last_of_epoch = next == 0;
	return 0;
}

/* Packing: p's cursor, walked on from the last position's. */
static int sched_rows_seek(struct sched *s, struct sched_pos *p, struct feed_err *err)
{
	const struct pk_source *src = &s->spec.rows;
	int rc;

	if ((!s->pk_valid || s->pk_epoch != p->epoch) &&
	    (rc = sched_rows_epoch(s, p->epoch, err)) < 0)
		return rc;
	if (src->spec.mode == PK_MODE_PACK) {
		if ((rc = sched_pack_pos(s, p, err)) < 0)
			return rc;
	} else {
		pk_concat_seek(&s->pk_docs, src->spec.seq_len, &s->pk_cur,
			       ord_sample(p->ord, p->batch, 0));
	}
	p->pk = s->pk_cur;
	return 0;
}

int sched_next(struct sched *s, struct sched_pos *ret, struct feed_err *err)
{
	struct sched_epoch *e = &s->ep[s->next_epoch & 1];
	int rc;

	if (s->done)
		return -ENODATA;
	if (!e->valid || e->epoch != s->next_epoch) {
		if (e->valid && e->inflight > 0)
			return -EAGAIN; /* epoch - 2 still has batches being built */
		if ((rc = epoch_make(s, s->next_epoch, err)) < 0)
			return rc;
	}
	if (ord_epoch_needs_table(&e->ord)) {
		if (s->table_rc && s->table_err_epoch == s->next_epoch)
			return feed_err_set(err, s->table_rc, "%s", s->table_msg);
		return -EAGAIN;  /* its table is being built (sched_table_want) */
	}
	uint64_t nb = ord_batches_per_epoch(&e->ord);
	if (s->next_batch >= nb)
		return feed_err_set(err, -EINVAL, "epoch %llu has no batch %llu for rank %u",
				    (unsigned long long)s->next_epoch,
				    (unsigned long long)s->next_batch, s->spec.ord.rank);
	*ret = (struct sched_pos){
		.epoch = s->next_epoch,
		.index = e->base + s->next_batch,
		.batch = s->next_batch,
		.ord = &e->ord,
		.nsamples = ord_batch_size(&e->ord, s->next_batch),
		.last_of_epoch = s->next_batch + 1 == nb,
	};
	if (s->spec.rows.spec.mode != PK_MODE_NONE && (rc = sched_rows_seek(s, ret, err)) < 0)
		return rc;
	ret->last_of_stream = ret->last_of_epoch && s->spec.epochs &&
			      s->next_epoch + 1 >= s->spec.epochs;
	e->inflight++;
	if (ret->last_of_stream)
		s->done = true;
	if (ret->last_of_epoch) {
		s->next_epoch++;
		s->next_batch = 0;
	} else {
		s->next_batch++;
	}
	return 0;
}

bool sched_peek(const struct sched *s, uint64_t *ret_epoch, uint64_t *ret_index)
{
	const struct sched_epoch *e = &s->ep[s->next_epoch & 1];

	if (s->done)
		return false;
	*ret_epoch = s->next_epoch;
	/* an epoch not made yet starts at its batch 0: only a resumed one has a base */
	*ret_index = (e->valid && e->epoch == s->next_epoch ? e->base : 0) + s->next_batch;
	return true;
}

bool sched_peek_position(const struct sched *s, uint64_t *ret_epoch, uint64_t *ret_position)
{
	const struct sched_epoch *e = &s->ep[s->next_epoch & 1];

	if (s->done)
		return false;
	*ret_epoch = s->next_epoch;
	*ret_position = e->valid && e->epoch == s->next_epoch ?
				ord_position_of(&e->ord, s->next_batch) : 0;
	return true;
}

bool sched_peek_row(const struct sched *s, uint64_t *ret_g)
{
	const struct sched_epoch *e = &s->ep[s->next_epoch & 1];

	if (s->done || !e->valid || e->epoch != s->next_epoch ||
	    s->next_batch >= ord_batches_per_epoch(&e->ord))
		return false;
	*ret_g = s->next_epoch * s->spec.ord.n + ord_global_position(&e->ord, s->next_batch, 0);
	return true;
}

void sched_done(struct sched *s, const struct sched_pos *p)
{
	struct sched_epoch *e = &s->ep[p->epoch & 1];

	if (e->valid && e->epoch == p->epoch && e->inflight > 0)
		e->inflight--;
}

uint64_t sched_batches_per_epoch(const struct sched *s)
{
	const struct sched_epoch *e = &s->ep[s->first_epoch & 1];
	const struct pk_source *src = &s->spec.rows;

	if (src->spec.mode == PK_MODE_PACK) {
		/* unknown until the epoch is placed: its least, every row full */
		uint64_t rows = (src->total + src->spec.seq_len - 1) / src->spec.seq_len;
		return s->empty ? 0 : rows / ((uint64_t)s->spec.ord.batch * s->spec.ord.world);
	}
	return s->empty || !e->valid ? 0 : e->base + ord_batches_per_epoch(&e->ord);
}

uint64_t sched_start_epoch(const struct sched *s)
{
	return s->first_epoch;
}

uint64_t sched_start_index(const struct sched *s)
{
	return s->first_index;
}

uint64_t sched_resume_layout(const struct sched *s, struct ord_level *lv, uint32_t *ret_n)
{
	memcpy(lv, s->resume_levels, s->resume_nlevels * sizeof(lv[0]));
	*ret_n = s->resume_nlevels;
	return s->resume_from;
}

bool sched_empty(const struct sched *s)
{
	return s->empty;
}
