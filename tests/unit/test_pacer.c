/*
 * Unit tests: the per-user pacer (supervisor/track/pacer.c, issue 12 "Speed limits", seed 003
 * "限速"), on a fake clock. A flow here is the runtime's loop reduced to the pacer's part: ask
 * sv_pace_gate before each transfer, sleep what it says (the clock jumps), move the bytes,
 * charge them.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "supervisor/track/pacer.h"

#define S 1000000000ull  /* one second in ns */
#define T0 (100 * S)     /* the fake clock's start */

/* Move @p n bytes in one transfer through @p p, sleeping first while in debt. @return 0 or
 * -ECONNABORTED (the flow was killed while it waited). */
static int transfer(sv_pacer *p, uint64_t n, uint64_t *now, const _Atomic bool *killed)
{
    for (;;) {
        uint32_t ms = 0;
        int g = sv_pace_gate(killed, p, *now, &ms);
        if (g < 0)
            return g;
        if (g == 0)
            break;
        *now += (uint64_t)ms * 1000000u;
    }
    sv_pacer_charge(p, n, *now);
    return 0;
}

static void a_limited_users_flow_moves_at_its_limit(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {1, 100000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *p = sv_pacers_acquire(r, 1, T0);
    uint64_t now = T0;
    assert_int_equal(transfer(p, 300000, &now, NULL), 0);
    assert_int_equal(transfer(p, 1, &now, NULL), 0);
    assert_true(now - T0 >= 2 * S);
    assert_true(now - T0 < 3 * S);

    /* the same bytes in 16 KiB pieces cost the same time: a property of bytes, not chunks */
    sv_pace_limit lim2 = {2, 100000};
    sv_pace_limit both[] = {lim, lim2};
    assert_int_equal(sv_pacers_publish(r, both, 2, now), 0);
    sv_pacer *q = sv_pacers_acquire(r, 2, now);
    uint64_t start = now;
    for (uint64_t left = 300001; left > 0;) {
        uint64_t n = left < 16384 ? left : 16384;
        assert_int_equal(transfer(q, n, &now, NULL), 0);
        left -= n;
    }
    assert_true(now - start >= 2 * S - 200000000ull); /* the last piece starts before 2 s */
    assert_true(now - start < 3 * S);
    sv_pacer_release(p);
    sv_pacer_release(q);
    sv_pacers_free(r);
}

static void an_unlimited_user_and_an_anonymous_flow_are_not_paced(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {1, 100000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *other = sv_pacers_acquire(r, 2, T0);
    assert_non_null(other);
    assert_false(sv_pacer_limited(other));
    uint64_t now = T0;
    for (int i = 0; i < 10; i++)
        assert_int_equal(transfer(other, 300000, &now, NULL), 0);
    assert_true(now == T0);
    for (int i = 0; i < 10; i++) /* an anonymous flow has no pacer */
        assert_int_equal(transfer(NULL, 300000, &now, NULL), 0);
    assert_true(now == T0);
    assert_false(sv_pacer_limited(NULL));
    sv_pacer_release(other);
    sv_pacers_free(r);
}

static void a_users_flows_share_one_limit(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {7, 100000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *up = sv_pacers_acquire(r, 7, T0);   /* an upload on one worker */
    sv_pacer *down = sv_pacers_acquire(r, 7, T0); /* a download on another */
    assert_ptr_equal(up, down);
    uint64_t now = T0;
    uint32_t ms = 0; /* both transfers start at once, on a full burst */
    assert_int_equal(sv_pace_gate(NULL, up, now, &ms), 0);
    assert_int_equal(sv_pace_gate(NULL, down, now, &ms), 0);
    sv_pacer_charge(up, 150000, now);
    sv_pacer_charge(down, 150000, now);
    assert_int_equal(sv_pace_gate(NULL, up, now, &ms), 1); /* one debt for both */
    assert_int_equal(transfer(down, 1, &now, NULL), 0);
    assert_true(now - T0 >= 2 * S && now - T0 < 3 * S);
    sv_pacer_release(up);
    sv_pacer_release(down);
    sv_pacers_free(r);
}

static void a_raised_or_removed_limit_is_felt_within_a_second(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {1, 1000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *p = sv_pacers_acquire(r, 1, T0);
    sv_pacer_charge(p, 11000, T0); /* 1000 of burst, 10 000 in debt: 10 s */
    assert_true(sv_pacer_wait(p, T0) == 10 * S);
    uint32_t ms = 0;
    assert_int_equal(sv_pace_gate(NULL, p, T0, &ms), 1);
    assert_int_equal(ms, SV_PACE_MAX_WAIT_MS); /* it checks again within a second */
    uint64_t removed = T0 + S / 10;
    assert_int_equal(sv_pacers_publish(r, NULL, 0, removed), 0);
    uint64_t woke = T0 + (uint64_t)ms * 1000000u;
    assert_int_equal(sv_pace_gate(NULL, p, woke, &ms), 0);
    assert_true(woke - removed <= S);

    /* raised: a debt of 10 000 bytes at 1 MB/s is paid in 10 ms */
    assert_int_equal(sv_pacers_publish(r, &lim, 1, woke), 0); /* limited again: a full burst */
    sv_pacer_charge(p, 11000, woke);
    sv_pace_limit raised = {1, 1000000};
    assert_int_equal(sv_pacers_publish(r, &raised, 1, woke), 0);
    uint64_t wait = sv_pacer_wait(p, woke);
    assert_true(wait >= 9000000u && wait <= 11000000u);
    sv_pacer_release(p);
    sv_pacers_free(r);
}

static void killing_a_paced_flow_fails_its_pending_write(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {1, 1000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *p = sv_pacers_acquire(r, 1, T0);
    _Atomic bool killed = false;
    uint64_t now = T0;
    assert_int_equal(transfer(p, 11000, &now, &killed), 0);
    uint32_t ms = 0;
    assert_int_equal(sv_pace_gate(&killed, p, now, &ms), 1); /* pending: ten seconds of debt */
    atomic_store(&killed, true);
    uint64_t at = now;
    assert_int_equal(transfer(p, 1, &now, &killed), -ECONNABORTED);
    assert_true(now == at); /* at once, not after the debt */
    sv_pacer_release(p);
    sv_pacers_free(r);
}

static void publishing_an_unchanged_limit_leaves_the_bucket_alone(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit lim = {1, 1000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0), 0);
    sv_pacer *p = sv_pacers_acquire(r, 1, T0);
    sv_pacer_charge(p, 6000, T0); /* 5 s of debt */
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0 + S), 0);
    assert_true(sv_pacer_wait(p, T0 + S) == 4 * S); /* no new burst, debt kept */
    sv_pace_limit half = {1, 500}; /* a change keeps the debt in bytes: 4000 at 500 B/s */
    assert_int_equal(sv_pacers_publish(r, &half, 1, T0 + S), 0);
    assert_true(sv_pacer_wait(p, T0 + S) == 8 * S);
    sv_pacer_release(p);
    sv_pacers_free(r);
}

static void a_user_in_several_user_sets_gets_the_smallest_limit(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(0);
    sv_pace_limit v[] = {{3, 5000}, {3, 0}, {3, 2000}, {4, 9000}};
    assert_int_equal(sv_pacers_publish(r, v, 4, T0), 0);
    sv_pacer *p = sv_pacers_acquire(r, 3, T0), *q = sv_pacers_acquire(r, 4, T0);
    assert_true(atomic_load(&p->rate) == 2000);
    assert_true(atomic_load(&q->rate) == 9000);
    sv_pacer_release(p);
    sv_pacer_release(q);
    sv_pacers_free(r);
}

static void sleeps_are_clamped_between_a_millisecond_and_a_second(void **state)
{
    (void)state;
    assert_int_equal(sv_pace_sleep_ms(1), 1);
    assert_int_equal(sv_pace_sleep_ms(1000000), 1);
    assert_int_equal(sv_pace_sleep_ms(2500000), 3);
    assert_int_equal(sv_pace_sleep_ms(999 * 1000000ull), 999);
    assert_int_equal(sv_pace_sleep_ms(50 * S), 1000);
}

static void the_node_cap_is_shared_fairly_by_the_active_users(void **state)
{
    (void)state;
    sv_pacers *r = sv_pacers_new(3000000);
    sv_pacer *u[4];
    for (int i = 0; i < 4; i++)
        u[i] = sv_pacers_acquire(r, (uint64_t)i + 1, T0);
    assert_true(atomic_load(&u[0]->rate) == 3000000); /* nobody active yet */
    for (int i = 0; i < 3; i++)
        sv_pacer_charge(u[i], 1000, T0 + S / 2);
    sv_pacers_rebalance(r, T0 + S);
    for (int i = 0; i < 3; i++)
        assert_true(atomic_load(&u[i]->rate) == 1000000);
    /* user 4 joins with a limit of its own below the equal share: the others split the rest */
    sv_pace_limit lim = {4, 600000};
    assert_int_equal(sv_pacers_publish(r, &lim, 1, T0 + S), 0);
    sv_pacer_charge(u[3], 1000, T0 + S);
    for (int i = 0; i < 3; i++)
        sv_pacer_charge(u[i], 1000, T0 + S);
    sv_pacers_rebalance(r, T0 + 2 * S);
    assert_true(atomic_load(&u[3]->rate) == 600000);
    for (int i = 0; i < 3; i++)
        assert_true(atomic_load(&u[i]->rate) == 800000);
    /* alone and below the cap: its own limit */
    sv_pacer_charge(u[3], 1000, T0 + 5 * S);
    sv_pacers_rebalance(r, T0 + 5 * S);
    assert_true(atomic_load(&u[3]->rate) == 600000);
    /* idle for more than a second: no longer counted, the one still pulling gets it all */
    sv_pacer_charge(u[0], 1000, T0 + 7 * S);
    sv_pacers_rebalance(r, T0 + 7 * S + S / 2);
    assert_true(atomic_load(&u[0]->rate) == 3000000);
    assert_true(atomic_load(&u[3]->rate) == 600000);
    for (int i = 0; i < 4; i++)
        sv_pacer_release(u[i]);
    sv_pacers_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_limited_users_flow_moves_at_its_limit),
        cmocka_unit_test(an_unlimited_user_and_an_anonymous_flow_are_not_paced),
        cmocka_unit_test(a_users_flows_share_one_limit),
        cmocka_unit_test(a_raised_or_removed_limit_is_felt_within_a_second),
        cmocka_unit_test(killing_a_paced_flow_fails_its_pending_write),
        cmocka_unit_test(publishing_an_unchanged_limit_leaves_the_bucket_alone),
        cmocka_unit_test(a_user_in_several_user_sets_gets_the_smallest_limit),
        cmocka_unit_test(sleeps_are_clamped_between_a_millisecond_and_a_second),
        cmocka_unit_test(the_node_cap_is_shared_fairly_by_the_active_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
