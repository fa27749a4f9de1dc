/* The XUDP GlobalID table (issue 10, PROTOCOLS-2.md §5.3; supervisor/xudp.h): attach, detach,
 * re-attach, expiry, the bound of detached entries, and what a key is. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/xudp.h"

static const int L1 = 1, L2 = 2; /* two listeners, compared by address */
static int assoc[8];             /* the associations are opaque to the table */

static sv_xudp_key key(const int *listener, uint64_t user, uint8_t gid0)
{
    sv_xudp_key k = {.listener = listener, .user = user, .gid = {gid0, 1, 2, 3, 4, 5, 6, 7}};
    return k;
}

/* A GlobalID of zeros means none (§5.3 item 3); any other byte makes it one. */
static void xudp__zero_gid_is_none(void **state)
{
    (void)state;
    uint8_t gid[SV_XUDP_GID_LEN] = {0};
    assert_true(sv_xudp_gid_none(gid));
    for (size_t i = 0; i < sizeof gid; i++) {
        gid[i] = 0x80;
        assert_false(sv_xudp_gid_none(gid));
        gid[i] = 0;
    }
}

/* An entry is found by (listener, user, GlobalID) only: another user or listener with the same
 * GlobalID is another session. Attached → detached → re-attached keeps the entry. */
static void xudp__attach_detach_reattach(void **state)
{
    (void)state;
    sv_xudp_table t = {0};
    sv_xudp_key k = key(&L1, 7, 0xa1);
    assert_null(sv_xudp_find(&t, &k));
    assert_int_equal(sv_xudp_add(&t, &k, &assoc[0]), 0);
    sv_xudp_entry *e = sv_xudp_find(&t, &k);
    assert_non_null(e);
    assert_ptr_equal(e->assoc, &assoc[0]);
    assert_false(e->detached);

    sv_xudp_key other_user = key(&L1, 8, 0xa1), other_l = key(&L2, 7, 0xa1),
                other_gid = key(&L1, 7, 0xa2);
    assert_null(sv_xudp_find(&t, &other_user));
    assert_null(sv_xudp_find(&t, &other_l));
    assert_null(sv_xudp_find(&t, &other_gid));

    assert_null(sv_xudp_detach(&t, &assoc[0], 1000));
    e = sv_xudp_find(&t, &k);
    assert_true(e->detached);
    assert_int_equal(e->since_ms, 1000);
    assert_int_equal(t.n_detached, 1);
    assert_null(sv_xudp_detach(&t, &assoc[0], 2000)); /* twice: no change */
    assert_int_equal(sv_xudp_find(&t, &k)->since_ms, 1000);

    sv_xudp_attach(&t, &assoc[0]);
    e = sv_xudp_find(&t, &k);
    assert_false(e->detached);
    assert_int_equal(t.n_detached, 0);
    /* attached entries never expire */
    assert_null(sv_xudp_expired(&t, 1000 + 10 * SV_XUDP_KEEP_MS));

    /* detached again later: its clock starts again */
    assert_null(sv_xudp_detach(&t, &assoc[0], 50000));
    assert_null(sv_xudp_expired(&t, 50000 + SV_XUDP_KEEP_MS - 1));
    sv_xudp_attach(&t, &assoc[0]);

    sv_xudp_remove(&t, &assoc[0]);
    assert_null(sv_xudp_find(&t, &k));
    assert_int_equal(t.n, 0);
    sv_xudp_remove(&t, &assoc[0]); /* unknown: ignored */
    assert_null(sv_xudp_detach(&t, &assoc[0], 1));
    sv_xudp_table_free(&t);
}

/* A detached entry expires SV_XUDP_KEEP_MS after it was detached, not before; each call takes
 * one out; the rest stay findable. */
static void xudp__expiry(void **state)
{
    (void)state;
    sv_xudp_table t = {0};
    for (int i = 0; i < 4; i++) {
        sv_xudp_key k = key(&L1, 1, (uint8_t)(0x10 + i));
        assert_int_equal(sv_xudp_add(&t, &k, &assoc[i]), 0);
    }
    assert_null(sv_xudp_detach(&t, &assoc[0], 0));
    assert_null(sv_xudp_detach(&t, &assoc[1], 5000));
    assert_null(sv_xudp_detach(&t, &assoc[2], 5000));
    /* assoc[3] stays attached */
    assert_null(sv_xudp_expired(&t, SV_XUDP_KEEP_MS - 1));
    assert_ptr_equal(sv_xudp_expired(&t, SV_XUDP_KEEP_MS), &assoc[0]);
    assert_null(sv_xudp_expired(&t, SV_XUDP_KEEP_MS));
    sv_xudp_key k0 = key(&L1, 1, 0x10), k1 = key(&L1, 1, 0x11);
    assert_null(sv_xudp_find(&t, &k0));
    assert_non_null(sv_xudp_find(&t, &k1));
    void *a = sv_xudp_expired(&t, 5000 + SV_XUDP_KEEP_MS);
    void *b = sv_xudp_expired(&t, 5000 + SV_XUDP_KEEP_MS);
    assert_true((a == &assoc[1] && b == &assoc[2]) || (a == &assoc[2] && b == &assoc[1]));
    assert_null(sv_xudp_expired(&t, UINT64_MAX / 2));
    assert_int_equal(t.n, 1);
    assert_int_equal(t.n_detached, 0);
    sv_xudp_table_free(&t);
}

/* Detached entries are bounded: one more than the bound evicts the oldest detached one (the
 * caller closes it); attached entries are not counted and never evicted. */
static void xudp__bound_evicts_oldest_detached(void **state)
{
    (void)state;
    sv_xudp_table t = {.max_detached = 3};
    for (int i = 0; i < 6; i++) {
        sv_xudp_key k = key(&L1, 2, (uint8_t)(0x20 + i));
        assert_int_equal(sv_xudp_add(&t, &k, &assoc[i]), 0);
    }
    assert_null(sv_xudp_detach(&t, &assoc[2], 300));
    assert_null(sv_xudp_detach(&t, &assoc[0], 100));
    assert_null(sv_xudp_detach(&t, &assoc[1], 200));
    assert_ptr_equal(sv_xudp_detach(&t, &assoc[3], 400), &assoc[0]);
    assert_int_equal(t.n_detached, 3);
    assert_int_equal(t.n, 5);
    sv_xudp_key k0 = key(&L1, 2, 0x20);
    assert_null(sv_xudp_find(&t, &k0));
    /* a re-attach frees a place: the next detach evicts nothing */
    sv_xudp_attach(&t, &assoc[1]);
    assert_null(sv_xudp_detach(&t, &assoc[4], 500));
    assert_ptr_equal(sv_xudp_detach(&t, &assoc[1], 600), &assoc[2]);
    sv_xudp_key k5 = key(&L1, 2, 0x25);
    assert_false(sv_xudp_find(&t, &k5)->detached);
    sv_xudp_table_free(&t);

    /* the default bound */
    sv_xudp_table big = {0};
    static int many[SV_XUDP_DETACHED_MAX + 1];
    for (unsigned i = 0; i <= SV_XUDP_DETACHED_MAX; i++) {
        sv_xudp_key k = {.listener = &L2, .user = i, .gid = {1}};
        assert_int_equal(sv_xudp_add(&big, &k, &many[i]), 0);
    }
    for (unsigned i = 0; i < SV_XUDP_DETACHED_MAX; i++)
        assert_null(sv_xudp_detach(&big, &many[i], 10 + i));
    assert_ptr_equal(sv_xudp_detach(&big, &many[SV_XUDP_DETACHED_MAX], 100000), &many[0]);
    assert_int_equal(big.n_detached, SV_XUDP_DETACHED_MAX);
    sv_xudp_table_free(&big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xudp__zero_gid_is_none),
        cmocka_unit_test(xudp__attach_detach_reattach),
        cmocka_unit_test(xudp__expiry),
        cmocka_unit_test(xudp__bound_evicts_oldest_detached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
