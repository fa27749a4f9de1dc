/*
 * The audit hit set (issue 12 "Audit", seed 002 detect_records_and_drains): a pair is held once
 * per period however often it is hit, a take drains the set (sorted) and starts the next period,
 * and the set is bounded (further new pairs are dropped and counted, held ones still found).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "supervisor/track/audit.h"

static void detect_records_and_drains(void **state)
{
    (void)state;
    sv_audit *a = sv_audit_new();
    assert_non_null(a);
    assert_true(sv_audit_note(a, "n1", 7, 9, 1000));
    for (int i = 0; i < 100; i++) /* a client retrying: one hit */
        assert_false(sv_audit_note(a, "n1", 7, 9, 2000 + (uint64_t)i));
    assert_true(sv_audit_note(a, "n1", 3, 9, 3000));
    assert_true(sv_audit_note(a, "n1", 7, 4, 3000));
    assert_true(sv_audit_note(a, "n0", 7, 9, 3000)); /* another node's inbound */
    sv_audit_hit *v = NULL;
    assert_int_equal(sv_audit_take(a, &v), 4);
    assert_string_equal(v[0].inbound, "n0");
    assert_string_equal(v[1].inbound, "n1");
    assert_int_equal(v[1].user, 3);
    assert_int_equal(v[2].user, 7);
    assert_int_equal(v[2].rule, 4);
    assert_int_equal(v[3].rule, 9);
    assert_int_equal(v[3].first_ms, 1000); /* the first hit of the period */
    free(v);
    assert_int_equal(sv_audit_take(a, &v), 0);
    assert_null(v);
    assert_true(sv_audit_note(a, "n1", 7, 9, 5000)); /* a new period: recorded again */
    uint64_t rec, drop;
    sv_audit_stats(a, &rec, &drop);
    assert_int_equal(rec, 5);
    assert_int_equal(drop, 0);
    sv_audit_free(a);
}

static void the_set_is_bounded(void **state)
{
    (void)state;
    sv_audit *a = sv_audit_new();
    for (uint64_t u = 0; u < SV_AUDIT_PENDING_MAX; u++)
        assert_true(sv_audit_note(a, "n", u, 1, 1));
    assert_false(sv_audit_note(a, "n", SV_AUDIT_PENDING_MAX, 1, 1)); /* dropped */
    assert_false(sv_audit_note(a, "n", 5, 1, 1));                   /* held */
    uint64_t rec, drop;
    sv_audit_stats(a, &rec, &drop);
    assert_int_equal(rec, SV_AUDIT_PENDING_MAX);
    assert_int_equal(drop, 1);
    sv_audit_hit *v = NULL;
    assert_int_equal(sv_audit_take(a, &v), SV_AUDIT_PENDING_MAX);
    free(v);
    assert_true(sv_audit_note(a, "n", SV_AUDIT_PENDING_MAX, 1, 1));
    sv_audit_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(detect_records_and_drains),
        cmocka_unit_test(the_set_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
