/*
 * check_lru.c: the table and recency list both cache tiers stand on
 * (daemon/data/lru.h): a node is found by its two-word key and by no
 * other; eviction takes the least recently touched listed node while the
 * bytes are over budget, never an unlisted one, and discharges it; the
 * table keeps every node findable as it grows; lru_pop drains it.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "check_util.h"
#include "lru.h"

struct item {
	int tag;                       /* something of the tier's own before the node */
	struct lru_node node;
};

static struct item *item_new(uint64_t k0, uint64_t k1)
{
	struct item *it = calloc(1, sizeof(*it));
	ck_assert_ptr_nonnull(it);
	it->node.key[0] = k0;
	it->node.key[1] = k1;
	return it;
}

START_TEST(test_lru_find_by_both_words)
{
	struct lru l;
	ck_assert_int_eq(lru_init(&l, 100), 0);
	struct item *a = item_new(1, 2), *b = item_new(2, 1);
	lru_insert(&l, &a->node);
	lru_insert(&l, &b->node);
	ck_assert_ptr_eq(lru_find(&l, 1, 2), &a->node);
	ck_assert_ptr_eq(LRU_ENTRY(lru_find(&l, 2, 1), struct item, node), b);
	ck_assert_ptr_null(lru_find(&l, 1, 1));
	ck_assert_uint_eq(l.nodes, 2);
	lru_remove(&l, &a->node);
	ck_assert_ptr_null(lru_find(&l, 1, 2));
	ck_assert_ptr_eq(lru_find(&l, 2, 1), &b->node);
	ck_assert_uint_eq(l.nodes, 1);
	lru_remove(&l, &b->node);
	free(a);
	free(b);
	lru_fini(&l);
}
END_TEST

START_TEST(test_lru_evicts_least_recent_listed_by_bytes)
{
	struct lru l;
	struct item *it[4];
	ck_assert_int_eq(lru_init(&l, 250), 0);
	for (int i = 0; i < 4; i++) {
		it[i] = item_new((uint64_t)i, 7);
		lru_insert(&l, &it[i]->node);
		lru_charge(&l, &it[i]->node, 100);
		lru_touch(&l, &it[i]->node);
	}
	ck_assert_uint_eq(l.bytes, 400);
	lru_touch(&l, &it[0]->node);   /* 0 is now the most recent: 1, 2, 3, 0 */
	lru_unlist(&it[1]->node);      /* 1 is pinned: never evicted */
	ck_assert(!lru_listed(&it[1]->node));
	ck_assert_ptr_eq(lru_evict(&l), &it[2]->node);
	ck_assert_uint_eq(l.bytes, 300);
	ck_assert_uint_eq(it[2]->node.bytes, 0);
	ck_assert(!lru_listed(&it[2]->node));
	ck_assert_ptr_eq(lru_find(&l, 2, 7), &it[2]->node); /* still in the table */
	ck_assert_ptr_eq(lru_evict(&l), &it[3]->node);
	ck_assert_uint_eq(l.bytes, 200);
	ck_assert_ptr_null(lru_evict(&l));                   /* within budget */
	l.bytes += 100;                                      /* held outside the table */
	ck_assert_ptr_eq(lru_evict(&l), &it[0]->node);
	ck_assert_ptr_null(lru_evict(&l));                   /* only 1 left, unlisted */
	ck_assert_uint_eq(l.bytes, 200);
	for (struct lru_node *n; (n = lru_pop(&l));)
		free(LRU_ENTRY(n, struct item, node));
	ck_assert_uint_eq(l.nodes, 0);
	ck_assert_uint_eq(l.bytes, 100);                     /* what was added outside */
	lru_fini(&l);
}
END_TEST

START_TEST(test_lru_walk_in_recency_order)
{
	struct lru l;
	struct item *it[3];
	ck_assert_int_eq(lru_init(&l, 0), 0);
	for (int i = 0; i < 3; i++) {
		it[i] = item_new((uint64_t)i, 0);
		lru_insert(&l, &it[i]->node);
	}
	lru_touch(&l, &it[2]->node);
	lru_touch(&l, &it[0]->node);   /* it[1] never listed */
	struct lru_node *n = lru_next(&l, NULL);
	ck_assert_ptr_eq(n, &it[2]->node);
	n = lru_next(&l, n);
	ck_assert_ptr_eq(n, &it[0]->node);
	ck_assert_ptr_null(lru_next(&l, n));
	for (int i = 0; i < 3; i++)
		lru_remove(&l, &it[i]->node);
	ck_assert_ptr_null(lru_next(&l, NULL));
	for (int i = 0; i < 3; i++)
		free(it[i]);
	lru_fini(&l);
}
END_TEST

START_TEST(test_lru_grows_and_drains)
{
	enum { N = 5000 };             /* several doublings past 1024 buckets */
	struct lru l;
	ck_assert_int_eq(lru_init(&l, UINT64_MAX), 0);
	for (uint64_t i = 0; i < N; i++) {
		struct item *x = item_new(i * 4096, i);
		lru_insert(&l, &x->node);
		lru_charge(&l, &x->node, 1);
	}
	ck_assert_uint_gt(l.nbuckets, 1024);
	for (uint64_t i = 0; i < N; i++) {
		struct lru_node *n = lru_find(&l, i * 4096, i);
		ck_assert_ptr_nonnull(n);
		ck_assert_uint_eq(n->key[1], i);
	}
	size_t popped = 0;
	for (struct lru_node *n; (n = lru_pop(&l)); popped++)
		free(LRU_ENTRY(n, struct item, node));
	ck_assert_uint_eq(popped, N);
	ck_assert_uint_eq(l.bytes, 0);
	ck_assert_uint_eq(l.nodes, 0);
	lru_fini(&l);
}
END_TEST

static Suite *lru_suite(void)
{
	Suite *s = suite_create("lru");
	TCase *tc = tcase_create("lru");
	tcase_add_test(tc, test_lru_find_by_both_words);
	tcase_add_test(tc, test_lru_evicts_least_recent_listed_by_bytes);
	tcase_add_test(tc, test_lru_walk_in_recency_order);
	tcase_add_test(tc, test_lru_grows_and_drains);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(lru_suite)
