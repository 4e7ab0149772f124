/*
 * check_layout.c: unit tests of daemon/delivery/layout.c alone, no feedd:
 * where a stream's fields, slot headers, rings and slots sit in its three
 * regions (proto/feed_shm.h), that nothing overlaps and everything the
 * client maps is FEED_SHM_ALIGN-aligned, what the per-user limits count
 * (page-rounded regions), a group's whole-page slots, and the limits
 * layout_compute() refuses with an error naming them.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "fmt.h"
#include "layout.h"

static uint64_t page_size(void)
{
	return (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t page_up(uint64_t v)
{
	uint64_t p = page_size();
	return v ? (v + p - 1) / p * p : p;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* Appends a field of max_bytes bytes a record to s. */
static void add_field(struct fmt_schema *s, const char *name, uint32_t rank, bool variable,
		      uint64_t max_bytes)
{
	struct fmt_field *f = &s->fields[s->nfields++];

	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->rank = rank;
	f->variable = variable;
	f->max_bytes = max_bytes;
}

/* An MNIST-like schema with a variable field between two fixed ones:
 * image u8 [28, 28], caption (variable, up to 100 bytes), label i64. */
static struct fmt_schema mixed_schema(void)
{
	struct fmt_schema s = {0};

	add_field(&s, "image", 2, false, 784);
	add_field(&s, "caption", 0, true, 100);
	add_field(&s, "label", 0, false, 8);
	return s;
}

/* Each field's batch records fit between its offset and the next field's
 * (or the slot's end), every offset aligned. */
static void check_fields_tile_slot(const struct fmt_schema *s, const struct slot_layout *l)
{
	for (uint32_t f = 0; f < s->nfields; f++) {
		uint64_t end = f + 1 < s->nfields ? l->field_off[f + 1] : l->slot_bytes;
		ck_assert_uint_eq(l->field_off[f] % FEED_SHM_ALIGN, 0);
		ck_assert_uint_ge(end, l->field_off[f] + (uint64_t)l->batch * s->fields[f].max_bytes);
		/* no more than alignment padding between fields */
		ck_assert_uint_lt(end - l->field_off[f] - (uint64_t)l->batch * s->fields[f].max_bytes,
				  FEED_SHM_ALIGN);
	}
}

START_TEST(test_layout_fields_follow_each_other_aligned)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;

	ck_assert_int_eq(layout_compute(&s, 3, 4, &l, NULL), 0);
	ck_assert_uint_eq(l.batch, 3);
	ck_assert_uint_eq(l.nslots, 4);
	ck_assert_uint_eq(l.nfields, 3);
	/* 3 images of 784 = 2352 -> 2368; 3 captions of 100 = 300 -> 2688;
	 * 3 labels of 8 = 24 -> 2712 -> a slot of 2752 */
	ck_assert_uint_eq(l.field_off[0], 0);
	ck_assert_uint_eq(l.field_off[1], 2368);
	ck_assert_uint_eq(l.field_off[2], 2688);
	ck_assert_uint_eq(l.slot_bytes, 2752);
	check_fields_tile_slot(&s, &l);
	for (uint32_t batch = 1; batch <= 257; batch += 16) {
		ck_assert_int_eq(layout_compute(&s, batch, 2, &l, NULL), 0);
		check_fields_tile_slot(&s, &l);
	}
}
END_TEST

START_TEST(test_layout_slot_header_holds_samples_bitmap_failed_and_ends)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;
	const uint32_t batch = 100; /* two words of the replaced bitmap */

	add_field(&s, "tokens", 1, true, 4096); /* a second variable field */
	ck_assert_int_eq(layout_compute(&s, batch, 2, &l, NULL), 0);
	/* the header, the sample indices, the bitmap, the failed samples'
	 * indices, then each variable field's ends[batch + 1] in field order
	 * (feed_shm.h) */
	uint64_t first = sizeof(struct feed_shm_slot) + 8ull * batch +
			 8ull * FEED_SHM_REPLACED_WORDS(batch) + 8ull * FEED_SHM_FAILED_MAX;
	ck_assert_uint_eq(FEED_SHM_FAILED_END(batch), first);
	ck_assert_uint_eq(FEED_SHM_REPLACED_WORDS(batch), 2);
	ck_assert_uint_eq(l.var_off[1], first);
	ck_assert_uint_eq(l.var_off[3], first + 8ull * (batch + 1));
	ck_assert_uint_eq(l.slot_hdr_bytes % FEED_SHM_ALIGN, 0);
	ck_assert_uint_ge(l.slot_hdr_bytes, l.var_off[3] + 8ull * (batch + 1));
	ck_assert_uint_lt(l.slot_hdr_bytes, l.var_off[3] + 8ull * (batch + 1) + FEED_SHM_ALIGN);
}
END_TEST

START_TEST(test_layout_control_region_header_ring_then_slot_headers)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;

	for (uint32_t nslots = 1; nslots <= 64; nslots++) {
		ck_assert_int_eq(layout_compute(&s, 32, nslots, &l, NULL), 0);
		ck_assert_uint_ge(l.ring_off, sizeof(struct feed_shm_ctl));
		ck_assert_uint_eq(l.ring_off % FEED_SHM_ALIGN, 0);
		ck_assert_uint_ge(l.slots_off, l.ring_off + 8ull * l.ring_cap);
		ck_assert_uint_eq(l.slots_off % FEED_SHM_ALIGN, 0);
		for (uint32_t i = 0; i < nslots; i++)
			ck_assert_uint_eq(layout_hdr_off(&l, i), l.slots_off + i * l.slot_hdr_bytes);
		/* the last header ends the region */
		ck_assert_uint_eq(l.ctl_bytes, layout_hdr_off(&l, nslots - 1) + l.slot_hdr_bytes);
		/* the release region: its header, then its ring */
		ck_assert_uint_ge(l.rel_off, sizeof(struct feed_shm_rel));
		ck_assert_uint_eq(l.rel_off % FEED_SHM_ALIGN, 0);
		ck_assert_uint_eq(l.rel_bytes, l.rel_off + 8ull * l.rel_cap);
	}
}
END_TEST

/* The ready ring holds, unconsumed, one entry per slot, one epoch marker
 * per batch and the end marker; the release ring two per slot: each the
 * smallest power of two that does. */
START_TEST(test_layout_ring_capacities_smallest_power_of_two)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;

	for (uint32_t nslots = 1; nslots <= 64; nslots++) {
		ck_assert_int_eq(layout_compute(&s, 8, nslots, &l, NULL), 0);
		ck_assert(is_pow2(l.ring_cap));
		ck_assert_uint_ge(l.ring_cap, 2 * nslots + 2);
		ck_assert_uint_lt(l.ring_cap / 2, 2 * nslots + 2);
		ck_assert(is_pow2(l.rel_cap));
		ck_assert_uint_ge(l.rel_cap, 2 * nslots);
		ck_assert_uint_lt(l.rel_cap / 2, 2 * nslots);
	}
}
END_TEST

START_TEST(test_layout_slots_tile_the_data_region)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;

	ck_assert_int_eq(layout_compute(&s, 17, 9, &l, NULL), 0);
	ck_assert_uint_eq(l.slot_bytes % FEED_SHM_ALIGN, 0);
	ck_assert_uint_eq(l.data_bytes, 9 * l.slot_bytes);
	for (uint32_t i = 0; i < 9; i++)
		ck_assert_uint_eq(layout_slot_off(&l, i), i * l.slot_bytes);
	ck_assert_uint_eq(layout_slot_off(&l, 8) + l.slot_bytes, l.data_bytes);
}
END_TEST

/* What the limits count is what the regions will take: each region
 * rounded up to whole pages; a group member adds its own control and
 * release regions, the group's data region counted once. */
START_TEST(test_layout_shm_bytes_are_the_page_rounded_regions)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l;

	ck_assert_int_eq(layout_compute(&s, 5, 3, &l, NULL), 0);
	uint64_t shm = layout_shm_bytes(&l);
	ck_assert_uint_eq(shm, page_up(l.ctl_bytes) + page_up(l.data_bytes) + page_up(l.rel_bytes));
	ck_assert_uint_eq(shm % page_size(), 0);
	ck_assert_uint_ge(shm, l.ctl_bytes + l.data_bytes + l.rel_bytes);
	ck_assert_uint_eq(layout_member_bytes(&l), page_up(l.ctl_bytes) + page_up(l.rel_bytes));
	ck_assert_uint_eq(layout_data_bytes(&l), page_up(l.data_bytes));
	ck_assert_uint_eq(layout_member_bytes(&l) + layout_data_bytes(&l), shm);
}
END_TEST

START_TEST(test_layout_group_slots_own_whole_pages)
{
	struct fmt_schema s = mixed_schema();
	struct slot_layout l, before;

	ck_assert_int_eq(layout_compute(&s, 3, 5, &l, NULL), 0);
	before = l;
	ck_assert_uint_ne(before.slot_bytes % page_size(), 0); /* else nothing to test */
	ck_assert_int_eq(layout_page_slots(&l, NULL), 0);
	ck_assert_uint_eq(l.slot_bytes % page_size(), 0);
	ck_assert_uint_ge(l.slot_bytes, before.slot_bytes);
	ck_assert_uint_lt(l.slot_bytes, before.slot_bytes + page_size());
	ck_assert_uint_eq(l.data_bytes, 5 * l.slot_bytes);
	for (uint32_t i = 0; i < 5; i++)
		ck_assert_uint_eq(layout_slot_off(&l, i) % page_size(), 0);
	/* within a slot and in the control region nothing moves */
	ck_assert_mem_eq(l.field_off, before.field_off, sizeof(l.field_off));
	ck_assert_uint_eq(l.ctl_bytes, before.ctl_bytes);
	ck_assert_uint_eq(l.slot_hdr_bytes, before.slot_hdr_bytes);
}
END_TEST

START_TEST(test_layout_too_many_fields_refused)
{
	struct fmt_schema s = {0};
	struct slot_layout l, untouched;
	struct feed_err err = {0};

	for (int f = 0; f < FEED_SHM_MAX_FIELDS; f++)
		add_field(&s, "f", 0, false, 4);
	ck_assert_int_eq(layout_compute(&s, 2, 2, &l, NULL), 0); /* the most there may be */
	add_field(&s, "one_more", 0, false, 4);
	memset(&l, 0xa5, sizeof(l));
	untouched = l;
	ck_assert_int_eq(layout_compute(&s, 2, 2, &l, &err), -EINVAL);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_msg(strstr(err.msg, "17 fields") && strstr(err.msg, "at most 16"),
		      "message names the count and the limit: %s", err.msg);
	ck_assert_mem_eq(&l, &untouched, sizeof(l)); /* *ret written only on success */
}
END_TEST

/* The batch axis, and a variable field's own axis, count against
 * FEED_SHM_MAX_RANK. */
START_TEST(test_layout_rank_too_high_refused)
{
	struct fmt_schema s = {0};
	struct slot_layout l;
	struct feed_err err = {0};

	add_field(&s, "fixed", FEED_SHM_MAX_RANK - 1, false, 4);
	add_field(&s, "var", FEED_SHM_MAX_RANK - 2, true, 4);
	ck_assert_int_eq(layout_compute(&s, 2, 2, &l, NULL), 0);
	s.fields[0].rank = FEED_SHM_MAX_RANK;
	ck_assert_int_eq(layout_compute(&s, 2, 2, &l, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "'fixed'") && strstr(err.msg, "rank 6"),
		      "message names the field and its rank: %s", err.msg);
	s.fields[0].rank = FEED_SHM_MAX_RANK - 1;
	s.fields[1].rank = FEED_SHM_MAX_RANK - 1;
	ck_assert_int_eq(layout_compute(&s, 2, 2, &l, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "'var'"), "message names the field: %s", err.msg);
}
END_TEST

/* LAYOUT_MAX_BYTES is the most one stream may hold: exactly that is laid
 * out, a byte more per slot is -EFBIG naming the sizes. */
START_TEST(test_layout_past_max_bytes_refused)
{
	struct fmt_schema s = {0};
	struct slot_layout l;
	struct feed_err err = {0};

	add_field(&s, "big", 0, false, LAYOUT_MAX_BYTES / 64);
	ck_assert_int_eq(layout_compute(&s, 1, 64, &l, &err), 0);
	ck_assert_uint_eq(l.data_bytes, LAYOUT_MAX_BYTES);
	s.fields[0].max_bytes++;
	ck_assert_int_eq(layout_compute(&s, 1, 64, &l, &err), -EFBIG);
	ck_assert_int_eq(err.code, -EFBIG);
	ck_assert_msg(strstr(err.msg, "64 slots") && strstr(err.msg, "1099511627776 bytes"),
		      "message names the slots and the limit: %s", err.msg);
	/* one slot alone too big */
	s.fields[0].max_bytes = LAYOUT_MAX_BYTES + 1;
	ck_assert_int_eq(layout_compute(&s, 1, 1, &l, NULL), -EFBIG);
}
END_TEST

/* Sizes that overflow 64 bits are refused, never wrapped into small ones. */
START_TEST(test_layout_overflowing_sizes_refused)
{
	struct fmt_schema s = {0};
	struct slot_layout l;

	add_field(&s, "huge", 0, false, UINT64_MAX);
	ck_assert_int_eq(layout_compute(&s, 1, 1, &l, NULL), -EFBIG);
	/* 2 * 2^63 wraps to 0 */
	s.fields[0].max_bytes = 1ull << 63;
	ck_assert_int_eq(layout_compute(&s, 2, 1, &l, NULL), -EFBIG);
	/* each slot fits, 2^25 of them (2^65 bytes) would wrap to 0 */
	s.fields[0].max_bytes = LAYOUT_MAX_BYTES;
	ck_assert_int_eq(layout_compute(&s, 1, 1, &l, NULL), 0);
	ck_assert_int_eq(layout_compute(&s, 1, 1u << 25, &l, NULL), -EFBIG);
}
END_TEST

/* Whole pages can push a group past LAYOUT_MAX_BYTES where 64-byte slots
 * fitted: refused too, and the refused layout is left as it was. */
START_TEST(test_layout_group_pages_past_max_bytes_refused)
{
	struct fmt_schema s = {0};
	struct slot_layout l;
	struct feed_err err = {0};
	/* three slots as large as fit, each a few bytes short of a page boundary */
	uint64_t slot = LAYOUT_MAX_BYTES / 3 / FEED_SHM_ALIGN * FEED_SHM_ALIGN;

	ck_assert_uint_gt(3 * page_up(slot), LAYOUT_MAX_BYTES);
	add_field(&s, "big", 0, false, slot);
	ck_assert_int_eq(layout_compute(&s, 1, 3, &l, NULL), 0);
	struct slot_layout before = l;
	ck_assert_int_eq(layout_page_slots(&l, &err), -EFBIG);
	ck_assert_msg(strstr(err.msg, "3 slots"), "message names the slots: %s", err.msg);
	ck_assert_uint_eq(l.slot_bytes, before.slot_bytes);
	ck_assert_uint_eq(l.data_bytes, before.data_bytes);
}
END_TEST

static Suite *layout_suite(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("layout");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_layout_fields_follow_each_other_aligned);
	tcase_add_test(tc, test_layout_slot_header_holds_samples_bitmap_failed_and_ends);
	tcase_add_test(tc, test_layout_control_region_header_ring_then_slot_headers);
	tcase_add_test(tc, test_layout_ring_capacities_smallest_power_of_two);
	tcase_add_test(tc, test_layout_slots_tile_the_data_region);
	tcase_add_test(tc, test_layout_shm_bytes_are_the_page_rounded_regions);
	tcase_add_test(tc, test_layout_group_slots_own_whole_pages);
	tcase_add_test(tc, test_layout_too_many_fields_refused);
	tcase_add_test(tc, test_layout_rank_too_high_refused);
	tcase_add_test(tc, test_layout_past_max_bytes_refused);
	tcase_add_test(tc, test_layout_overflowing_sizes_refused);
	tcase_add_test(tc, test_layout_group_pages_past_max_bytes_refused);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(layout_suite)
