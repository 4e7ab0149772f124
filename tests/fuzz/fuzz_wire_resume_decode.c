/*
 * fuzz_wire_resume_decode: OpenStream.resume, the opaque token a client
 * hands back, through wire_resume_decode() and then, as session_stream.c
 * ses_spec()/ses_resume() do for a request asking what the token says
 * (the fields the daemon requires equal), into the schedule: sched_init()
 * at the token's epoch and position, and a few sched_next() after it
 * (with the block-window tables it asks for built and put, as the
 * delivery does off its lock). The request's own numbers (world, rank,
 * nodes) and the dataset's size come from the token's bytes too, within
 * what wire_request_check() lets through. Invariants: a refusal names its
 * reason; every position handed out has 1..batch samples, each inside the
 * dataset, and the epoch never goes backwards.
 */
#include <string.h>

#include "feed.pb-c.h"
#include "fuzz.h"
#include "order.h"
#include "schedule.h"
#include "wire.h"

#define FUZZ_BLOCKS_MAX 64   /* the made-up dataset's blocks, at most */
#define FUZZ_WORLD_MAX 64    /* the request's world (the wire allows 65536) */

static uint64_t fuzz_block_first[FUZZ_BLOCKS_MAX + 1];

/* The dataset the request opens: 1..FUZZ_BLOCKS_MAX blocks of 1..16. */
static void fuzz_dataset(const Feed__ResumeToken *t, struct ord_spec *o)
{
	uint64_t nblocks = 1 + t->pipeline_hash % FUZZ_BLOCKS_MAX;
	uint64_t per = 1 + (t->pipeline_hash >> 8) % 16;

	for (uint64_t b = 0; b <= nblocks; b++)
		fuzz_block_first[b] = b * per;
	o->n = nblocks * per;
	o->block_first = fuzz_block_first;
	o->nblocks = nblocks;
	snprintf(o->version, sizeof(o->version), "%s", "00c0ffee00c0ffee");
}

/* ses_spec() and ses_resume() for a request that matches the token. */
static bool fuzz_spec(const Feed__ResumeToken *t, struct sched_spec *sp)
{
	struct ord_spec *o = &sp->ord;

	memset(sp, 0, sizeof(*sp));
	if ((unsigned)t->order > FEED__ORDER__ORDER_NODE || t->batch < 1 ||
	    t->batch > WIRE_BATCH_MAX || t->window > WIRE_WINDOW_MAX || (t->pad_last && (t->eval || t->drop_last)))
		return false;  /* a request asking this is refused by wire_request_check() */
	fuzz_dataset(t, o);
	o->seed = t->seed;
	o->mode = t->order == FEED__ORDER__ORDER_FULL ? ORD_FULL :
		  t->order == FEED__ORDER__ORDER_BLOCK_WINDOW ? ORD_BLOCK_WINDOW :
		  t->order == FEED__ORDER__ORDER_NODE ? ORD_NODE : ORD_SEQUENTIAL;
	o->window = t->window ? t->window : o->mode == ORD_NODE ? 1 : 8;
	o->world = 1 + t->world % FUZZ_WORLD_MAX;
	o->rank = (uint32_t)(t->seed % o->world);
	o->batch = t->batch;
	o->drop_last = t->drop_last;
	o->pad_last = t->pad_last;
	o->eval = t->eval;
	if (o->mode == ORD_NODE) {
		o->nodes = t->nodes && o->world % t->nodes == 0 ? t->nodes : 1;
		o->deal_fixed = t->node_deal == FEED__NODE_DEAL__NODE_DEAL_FIXED;
		o->unit = (o->n / o->nblocks) * o->window;
		if (t->nodes == 0 || t->n_level_nodes != t->n_level_positions ||
		    t->n_level_nodes > ORD_MAX_LEVELS)
			return false;  /* ses_resume_node() refuses it */
		sp->start_nodes = t->nodes;
		sp->nlevels = (uint32_t)t->n_level_nodes;
		for (uint32_t i = 0; i < sp->nlevels; i++)
			sp->levels[i] = (struct ord_level){t->level_nodes[i], t->level_positions[i]};
	}
	/* no end, or two epochs on */
	sp->epochs = t->drop_last || t->epoch > UINT64_MAX - 2 ? 0 : t->epoch + 2;
	sp->start_epoch = t->epoch;
	sp->at_position = true;
	sp->start_position = t->position;
	return true;
}

/* One position from sched_next(): its samples are inside the dataset. */
static void fuzz_check_pos(const struct sched_spec *sp, const struct sched_pos *p,
			   uint64_t *epoch)
{
	FUZZ_CHECK(p->nsamples >= 1 && p->nsamples <= sp->ord.batch, "%u samples in a batch of %u",
		   p->nsamples, sp->ord.batch);
	FUZZ_CHECK(p->epoch >= *epoch, "epoch %llu after %llu", (unsigned long long)p->epoch,
		   (unsigned long long)*epoch);
	*epoch = p->epoch;
	for (uint32_t i = 0; i < p->nsamples; i++) {
		uint64_t s = ord_sample(p->ord, p->batch, i);
		FUZZ_CHECK(s < sp->ord.n, "sample %llu of %llu", (unsigned long long)s,
			   (unsigned long long)sp->ord.n);
	}
}

/* What the delivery does off its lock: builds the block-window table the
 * schedule asks for, puts it, and frees the tables it gives back. */
static void fuzz_tables(struct sched *s)
{
	uint64_t epoch, *t = NULL, *dead[SCHED_TABLES_FREED];
	struct feed_err err = {0};

	while (sched_table_want(s, &epoch)) {
		int rc = ord_table_build(&s->spec.ord, epoch, &t, &err);
		uint32_t n = sched_table_put(s, epoch, rc < 0 ? NULL : t, rc, err.msg, dead);
		for (uint32_t i = 0; i < n; i++)
			free(dead[i]);
	}
}

static void fuzz_schedule(const struct sched_spec *sp)
{
	struct feed_err err = {0};
	struct sched s;
	int rc = sched_init(&s, sp, &err);

	FUZZ_CHECK(rc == 0 || err.msg[0], "sched_init refused (%d) without a message", rc);
	uint64_t epoch = rc == 0 ? sched_start_epoch(&s) : 0;
	for (int i = 0; rc == 0 && i < 8; i++) {
		struct sched_pos p;
		fuzz_tables(&s);
		if ((rc = sched_next(&s, &p, &err)) < 0)
			break;
		fuzz_check_pos(sp, &p, &epoch);
		sched_done(&s, &p);
	}
	sched_fini(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct feed_err err = {0};
	Feed__ResumeToken *t = NULL;
	struct sched_spec sp;

	if (size > WIRE_RESUME_MAX)
		return 0;  /* wire_request_check() refuses it first */
	int rc = wire_resume_decode(data, size, &t, &err);
	if (rc < 0) {
		FUZZ_CHECK(!t && err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	if (fuzz_spec(t, &sp))
		fuzz_schedule(&sp);
	wire_resume_free(t);
	return 0;
}
