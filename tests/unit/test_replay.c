/* Unit tests: salt replay filter (supervisor/crypto/replay.c, PROTOCOLS.md §1.4, §2.5). */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/crypto/replay.h"

/* A distinct 32-byte token for each index (the index in the first bytes, a pattern after). */
static void token_of(uint32_t i, uint8_t out[32])
{
    for (int k = 0; k < 32; k++)
        out[k] = (uint8_t)(k * 7 + 3);
    memcpy(out, &i, sizeof i);
}

static void replay__new_token__accepted_then_refused(void **state)
{
    (void)state;
    sv_replay *r = sv_replay_new(16);
    assert_non_null(r);
    uint8_t t[32];
    token_of(1, t);
    assert_true(sv_replay_add(r, t, 32));
    assert_false(sv_replay_add(r, t, 32));
    assert_false(sv_replay_add(r, t, 32));
    token_of(2, t);
    assert_true(sv_replay_add(r, t, 32));
    sv_replay_free(r);
}

static void replay__prefix_of_a_token__is_a_different_token(void **state)
{
    (void)state;
    sv_replay *r = sv_replay_new(16);
    assert_non_null(r);
    const uint8_t t[32] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    assert_true(sv_replay_add(r, t, 16));
    assert_true(sv_replay_add(r, t, 32));
    assert_true(sv_replay_add(r, t, 1));
    assert_false(sv_replay_add(r, t, 16));
    assert_false(sv_replay_add(r, t, 32));
    assert_false(sv_replay_add(r, t, 1));
    sv_replay_free(r);
}

static void replay__bad_length__refused(void **state)
{
    (void)state;
    sv_replay *r = sv_replay_new(4);
    assert_non_null(r);
    uint8_t t[33] = {1};
    assert_false(sv_replay_add(r, t, 0));
    assert_false(sv_replay_add(r, t, 33));
    assert_true(sv_replay_add(r, t, 32));
    sv_replay_free(r);
}

/* After many insertions the last `capacity` are still refused, and old ones are forgotten. */
static void replay__rollover__keeps_the_last_capacity_tokens(void **state)
{
    (void)state;
    const uint32_t cap = 1000, total = 3 * cap + 123;
    sv_replay *r = sv_replay_new(cap);
    assert_non_null(r);
    uint8_t t[32];
    for (uint32_t i = 0; i < total; i++) {
        token_of(i, t);
        assert_true(sv_replay_add(r, t, 32));
    }
    for (uint32_t i = total - cap; i < total; i++) {
        token_of(i, t);
        assert_false(sv_replay_add(r, t, 32));
    }
    /* Memory is bounded: at most two generations are kept, so the first tokens are gone. */
    for (uint32_t i = 0; i < cap; i++) {
        token_of(i, t);
        assert_true(sv_replay_add(r, t, 32));
    }
    sv_replay_free(r);
}

/* Every token remembered for at least `capacity` further insertions, whatever the phase. */
static void replay__each_token__survives_capacity_more_inserts(void **state)
{
    (void)state;
    const uint32_t cap = 37;
    sv_replay *r = sv_replay_new(cap);
    assert_non_null(r);
    uint8_t t[32];
    for (uint32_t i = 0; i < 10 * cap; i++) {
        token_of(i, t);
        assert_true(sv_replay_add(r, t, 32));
        if (i >= cap) {
            token_of(i - cap, t);
            assert_false(sv_replay_add(r, t, 32));
        }
    }
    sv_replay_free(r);
}

static void replay__capacity_one__still_exact(void **state)
{
    (void)state;
    sv_replay *r = sv_replay_new(1);
    assert_non_null(r);
    uint8_t a[32], b[32];
    token_of(10, a);
    token_of(11, b);
    assert_true(sv_replay_add(r, a, 32));
    assert_false(sv_replay_add(r, a, 32));
    assert_true(sv_replay_add(r, b, 32));
    assert_false(sv_replay_add(r, b, 32));
    assert_false(sv_replay_add(r, a, 32)); /* previous generation */
    sv_replay_free(r);
}

/* Issue 13: the tables grow with the tokens of a generation, so a filter sized for 65 536 salts
 * that saw 10 000 holds about 1 MiB, not 10 MiB; each token stays exact through the growth, and
 * a retired generation starts small again. */
static void replay__tables__grow_with_the_tokens_seen(void **state)
{
    (void)state;
    const uint32_t cap = 65536;
    sv_replay *r = sv_replay_new(cap);
    assert_non_null(r);
    assert_true(sv_replay_bytes(r) <= 128 * 1024);
    uint8_t t[32];
    for (uint32_t i = 0; i < 10000; i++) {
        token_of(i, t);
        assert_true(sv_replay_add(r, t, 32));
    }
    size_t at_10k = sv_replay_bytes(r);
    assert_true(at_10k <= 2 * 1024 * 1024);
    for (uint32_t i = 0; i < 10000; i++) {
        token_of(i, t);
        assert_false(sv_replay_add(r, t, 32));
    }
    /* fill to the swap and past it: the full window is still remembered */
    for (uint32_t i = 10000; i < cap + 5000; i++) {
        token_of(i, t);
        assert_true(sv_replay_add(r, t, 32));
    }
    for (uint32_t i = 5000; i < cap + 5000; i += 7) {
        token_of(i, t);
        assert_false(sv_replay_add(r, t, 32));
    }
    assert_true(sv_replay_bytes(r) > at_10k);
    sv_replay_free(r);
}

#define THREAD_OWN 20000
#define THREAD_SHARED 20000

typedef struct worker {
    sv_replay *r;
    uint32_t base;
    unsigned own_new, shared_new;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    uint8_t t[32];
    for (uint32_t i = 0; i < THREAD_SHARED; i++) {
        token_of(w->base + i, t);
        w->own_new += sv_replay_add(w->r, t, 32);
        token_of(1000000 + i, t); /* both threads insert these */
        w->shared_new += sv_replay_add(w->r, t, 32);
    }
    return NULL;
}

/* Two threads: own tokens are all new, and each shared token is accepted exactly once. */
static void replay__two_threads__each_token_accepted_once(void **state)
{
    (void)state;
    sv_replay *r = sv_replay_new(2 * THREAD_OWN + THREAD_SHARED);
    assert_non_null(r);
    worker w[2] = {{r, 0, 0, 0}, {r, 500000, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(w[0].own_new, THREAD_OWN);
    assert_int_equal(w[1].own_new, THREAD_OWN);
    assert_int_equal(w[0].shared_new + w[1].shared_new, THREAD_SHARED);
    sv_replay_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replay__new_token__accepted_then_refused),
        cmocka_unit_test(replay__prefix_of_a_token__is_a_different_token),
        cmocka_unit_test(replay__bad_length__refused),
        cmocka_unit_test(replay__rollover__keeps_the_last_capacity_tokens),
        cmocka_unit_test(replay__each_token__survives_capacity_more_inserts),
        cmocka_unit_test(replay__capacity_one__still_exact),
        cmocka_unit_test(replay__two_threads__each_token_accepted_once),
        cmocka_unit_test(replay__tables__grow_with_the_tokens_seen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
