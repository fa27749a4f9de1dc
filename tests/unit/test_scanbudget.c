/*
 * Unit tests: the CPU budget of full scans off the worker loop (issue 13 "junk",
 * supervisor/util/scanbudget.c): credit and its refill, the wait of a scan in debt, the queue
 * bound, the bound of the expected wait from the measured cost, and a scan withdrawn.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "supervisor/util/scanbudget.h"

#define MS 1000000ULL
#define S (1000 * MS)

/* Half a core, 100 ms of burst: a scan runs at once while credit lasts, then waits for it. */
static void budget__debt__waits_at_the_rate(void **state)
{
    (void)state;
    sv_scan_budget b;
    sv_scan_budget_init(&b, S / 2, 100 * MS, 2 * S, 64, 1000 * S);
    assert_true(sv_scan_budget_admit(&b, 1000 * S));
    assert_int_equal(sv_scan_budget_wait(&b, 1000 * S), 0);
    sv_scan_budget_charge(&b, 300 * MS, 1000 * S); /* a 300 ms scan: 200 ms in debt */
    assert_int_equal(b.queued, 0);
    assert_true(sv_scan_budget_admit(&b, 1000 * S));
    /* 200 ms of CPU debt paid at 0.5 CPU s per s: 400 ms and a bit */
    uint64_t w = sv_scan_budget_wait(&b, 1000 * S);
    assert_true(w >= 400 * MS && w <= 401 * MS);
    assert_true(sv_scan_budget_wait(&b, 1000 * S + 200 * MS) > 0);
    assert_int_equal(sv_scan_budget_wait(&b, 1000 * S + 401 * MS), 0);
    sv_scan_budget_charge(&b, 10 * MS, 1000 * S + 401 * MS);
    /* idle for a minute: the credit is the burst, not more */
    sv_scan_budget_wait(&b, 1060 * S);
    assert_int_equal(b.credit, (int64_t)(100 * MS));
    /* time that goes backwards refills nothing */
    sv_scan_budget_charge(&b, 150 * MS, 1060 * S);
    assert_int_equal(sv_scan_budget_wait(&b, 1000 * S) > 0, 1);
}

/* A new scan is refused when queue_max are admitted, or when the ones ahead (at the measured
 * cost) would make it wait longer than wait_max; a withdrawn one frees its place. */
static void budget__admit__queue_and_expected_wait(void **state)
{
    (void)state;
    sv_scan_budget b;
    sv_scan_budget_init(&b, S / 2, 0, 1 * S, 3, 0);
    for (int i = 0; i < 3; i++)
        assert_true(sv_scan_budget_admit(&b, 0)); /* no cost measured yet: the queue bounds */
    assert_false(sv_scan_budget_admit(&b, 0));
    sv_scan_budget_leave(&b);
    assert_int_equal(b.queued, 2);
    assert_true(sv_scan_budget_admit(&b, 0));
    sv_scan_budget_charge(&b, 100 * MS, 0); /* cost 100 ms; 100 ms in debt */
    sv_scan_budget_charge(&b, 100 * MS, 0);
    sv_scan_budget_charge(&b, 100 * MS, 0); /* 300 ms of debt, nothing queued */
    assert_int_equal(b.queued, 0);
    /* ahead: 300 ms of debt; this one 100 ms: 400 ms at 0.5 = 0.8 s <= 1 s */
    assert_true(sv_scan_budget_admit(&b, 0));
    /* the next: 500 ms = 1 s, still admitted; then 1.2 s: refused */
    assert_true(sv_scan_budget_admit(&b, 0));
    assert_false(sv_scan_budget_admit(&b, 0));
    /* half a second later 250 ms were paid: 350 ms = 0.7 s */
    assert_true(sv_scan_budget_admit(&b, S / 2));
    assert_int_equal(b.queued, 3);
    /* with no burst, a scan runs once the debt is paid (credit 0 is enough) */
    sv_scan_budget_leave(&b);
    sv_scan_budget_leave(&b);
    sv_scan_budget_leave(&b);
    sv_scan_budget_leave(&b); /* more leaves than admits: no wrap */
    assert_int_equal(b.queued, 0);
    assert_true(sv_scan_budget_wait(&b, S / 2) > 0);
    assert_int_equal(sv_scan_budget_wait(&b, S / 2 + 100 * S), 0);
}

/* The cost is a moving average of the scans measured. */
static void budget__cost__moving_average(void **state)
{
    (void)state;
    sv_scan_budget b;
    sv_scan_budget_init(&b, S / 2, 100 * MS, 2 * S, 64, 0);
    sv_scan_budget_charge(&b, 16 * MS, 0);
    assert_int_equal(b.cost, 16 * MS);
    sv_scan_budget_charge(&b, 0, 0);
    assert_int_equal(b.cost, 14 * MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budget__debt__waits_at_the_rate),
        cmocka_unit_test(budget__admit__queue_and_expected_wait),
        cmocka_unit_test(budget__cost__moving_average),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
