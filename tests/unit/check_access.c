/*
 * check_access.c: unit tests of daemon/control/access.c: names and ids resolved,
 * peer credentials and the groups the peer's process holds from a real
 * socket, the groups of a passwd entry, who an access list admits (root,
 * the daemon's own user, "*", uids, groups).
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "access.h"
#include "check_util.h"

START_TEST(test_access_parse_names)
{
	struct feed_err err = {0};
	uid_t uid;
	gid_t gid;

	ck_assert_int_eq(acl_parse_user("root", &uid, &err), 0);
	ck_assert_uint_eq(uid, 0);
	ck_assert_int_eq(acl_parse_user("nobody", &uid, &err), 0);
	ck_assert_uint_eq(uid, 65534);
	ck_assert_int_eq(acl_parse_user("4242", &uid, &err), 0);  /* need not exist */
	ck_assert_uint_eq(uid, 4242);
	ck_assert_int_eq(acl_parse_user("no_such_user_zq", &uid, &err), -ENOENT);
	ck_assert_str_eq(err.msg, "no user named 'no_such_user_zq'");
	ck_assert_int_eq(acl_parse_user("4294967295", &uid, &err), -EINVAL);
	ck_assert_int_eq(acl_parse_group("nogroup", &gid, &err), 0);
	ck_assert_uint_eq(gid, 65534);
	ck_assert_int_eq(acl_parse_group("0", &gid, &err), 0);
	ck_assert_uint_eq(gid, 0);
	ck_assert_int_eq(acl_parse_group("no_such_group_zq", &gid, &err), -ENOENT);
	ck_assert_str_eq(err.msg, "no group named 'no_such_group_zq'");
}
END_TEST

START_TEST(test_access_peer_read)
{
	struct feed_err err = {0};
	struct acl_peer p;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(acl_peer_read(sv[0], &p, &err), 0);
	ck_assert_uint_eq(p.uid, geteuid());
	ck_assert_uint_eq(p.gid, getegid());
	ck_assert_int_eq(p.pid, getpid());
	bool has_gid = false;
	for (size_t i = 0; i < p.ngroups; i++)
		has_gid |= p.groups[i] == getegid();
	ck_assert(has_gid);
	acl_peer_clear(&p);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* The peer's groups are the ones its process holds (SO_PEERGROUPS), not
 * those of its passwd entry: a process given extra groups (setpriv,
 * containers) is seen with them, and many of them fit. Root only (this
 * forked test process changes its own groups). */
START_TEST(test_access_peer_read_process_groups)
{
	struct feed_err err = {0};
	struct acl_peer p;
	gid_t extra[200];
	int sv[2];

	for (size_t i = 0; i < 200; i++)
		extra[i] = (gid_t)(70000 + i);
	ck_assert_int_eq(setgroups(200, extra), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(acl_peer_read(sv[0], &p, &err), 0);
	ck_assert_uint_eq(p.ngroups, 201);
	ck_assert_uint_eq(p.groups[0], getegid());  /* the primary group first */
	for (size_t i = 0; i < 200; i++)
		ck_assert_uint_eq(p.groups[i + 1], 70000 + i);
	acl_peer_clear(&p);
	close(sv[0]);
	close(sv[1]);
	/* none at all: the primary group alone */
	ck_assert_int_eq(setgroups(0, NULL), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	ck_assert_int_eq(acl_peer_read(sv[0], &p, &err), 0);
	ck_assert_uint_eq(p.ngroups, 1);
	ck_assert_uint_eq(p.groups[0], getegid());
	acl_peer_clear(&p);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(test_access_peer_groups)
{
	struct feed_err err = {0};
	struct acl_peer p;

	/* nobody's passwd entry has group nogroup (65534). */
	ck_assert_int_eq(acl_peer_from_ids(65534, 65534, 1, &p, &err), 0);
	ck_assert_uint_ge(p.ngroups, 1);
	ck_assert_uint_eq(p.groups[0], 65534);
	acl_peer_clear(&p);
	/* A uid with no passwd entry: its credential gid only. */
	ck_assert_int_eq(acl_peer_from_ids(4242424, 777, 1, &p, &err), 0);
	ck_assert_uint_eq(p.ngroups, 1);
	ck_assert_uint_eq(p.groups[0], 777);
	acl_peer_clear(&p);
}
END_TEST

START_TEST(test_access_groups_text)
{
	gid_t two[] = {65534, 4242}, many[40];
	struct acl_peer p = {.uid = 65534, .groups = two, .ngroups = 2};
	char buf[200], tiny[8];

	acl_peer_groups_text(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "65534, 4242");
	for (size_t i = 0; i < 40; i++)
		many[i] = (gid_t)i;
	p.groups = many;
	p.ngroups = 40;
	acl_peer_groups_text(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... (40 in all)");
	acl_peer_groups_text(&p, tiny, sizeof(tiny));
	ck_assert_str_eq(tiny, "0, 1, 2");  /* cut, still terminated */
}
END_TEST

START_TEST(test_access_allows)
{
	uid_t uids[] = {1000};
	gid_t gids[] = {200};
	gid_t in_200[] = {100, 200}, not_200[] = {100};
	struct acl_list empty = {0}, any = {.any = true};
	struct acl_list list = {.uids = uids, .nuids = 1, .gids = gids, .ngids = 1};
	struct acl_peer root = {.uid = 0}, self = {.uid = 500}, u1000 = {.uid = 1000};
	struct acl_peer member = {.uid = 2000, .groups = in_200, .ngroups = 2};
	struct acl_peer other = {.uid = 2001, .groups = not_200, .ngroups = 1};

	ck_assert(acl_allows(&empty, &root, 500));
	ck_assert(acl_allows(&empty, &self, 500));
	ck_assert(!acl_allows(&empty, &u1000, 500));
	ck_assert(acl_allows(&any, &other, 500));
	ck_assert(acl_allows(&list, &root, 500));
	ck_assert(acl_allows(&list, &u1000, 500));
	ck_assert(acl_allows(&list, &member, 500));
	ck_assert(!acl_allows(&list, &other, 500));
	ck_assert(!acl_allows(&list, &self, 500));  /* a list replaces the default */
}
END_TEST

static Suite *access_suite(void)
{
	Suite *s = suite_create("access");
	TCase *tc = tcase_create("access");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_access_parse_names);
	tcase_add_test(tc, test_access_peer_read);
	tcase_add_test(tc, test_access_peer_groups);
	if (geteuid() == 0)
		tcase_add_test(tc, test_access_peer_read_process_groups);
	else
		fprintf(stderr, "check_access: not root: the setgroups test is left out\n");
	tcase_add_test(tc, test_access_groups_text);
	tcase_add_test(tc, test_access_allows);
	suite_add_tcase(s, tc);
	return s;
}

CHECK_MAIN(access_suite)
