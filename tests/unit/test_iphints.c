/*
 * Unit tests: the client IP -> user hint table of issue 13 (supervisor/util/iphints.c): a hit,
 * a miss, the port ignored, families apart, expiry, refresh, the bound and its eviction order,
 * and the aged puts and the walk that carry hints across a restart (sv_hints_import/export).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/util/iphints.h"

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    assert_int_equal(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    return ss;
}

#define SA(x) ((const struct sockaddr *)&(x))

static int tag[8]; /* owners' tags: any stable addresses */

static void hint__put_then_get__same_user_any_port(void **state)
{
    (void)state;
    sv_iphints t;
    sv_iphints_init(&t, 64, 600, 1);
    struct sockaddr_storage a = v4("10.1.2.3", 5000), b = v4("10.1.2.3", 6000),
                            c = v4("10.1.2.4", 5000);
    int idx = -1;
    const void *who = NULL;
    assert_false(sv_iphints_get(&t, SA(a), 100, &idx, &who)); /* empty, nothing allocated */
    assert_int_equal(sv_iphints_put(&t, SA(a), 100, 9, &tag[1]), 0);
    assert_true(sv_iphints_get(&t, SA(b), 101, &idx, &who));
    assert_int_equal(idx, 9);
    assert_ptr_equal(who, &tag[1]);
    assert_false(sv_iphints_get(&t, SA(c), 101, &idx, &who));
    /* a later login from the IP replaces its user */
    assert_int_equal(sv_iphints_put(&t, SA(b), 102, 4, &tag[2]), 0);
    assert_true(sv_iphints_get(&t, SA(a), 103, &idx, &who));
    assert_int_equal(idx, 4);
    assert_ptr_equal(who, &tag[2]);
    sv_iphints_deinit(&t);
    sv_iphints_deinit(&t);
}

static void hint__families__apart(void **state)
{
    (void)state;
    sv_iphints t;
    sv_iphints_init(&t, 64, 600, 2);
    struct sockaddr_storage a4 = v4("192.0.2.1", 1), a6 = v6("2001:db8::1", 1),
                            mapped = v6("::ffff:192.0.2.1", 1), other = v6("2001:db8::2", 1);
    int idx = -1;
    const void *who = NULL;
    assert_int_equal(sv_iphints_put(&t, SA(a6), 10, 3, &tag[3]), 0);
    assert_false(sv_iphints_get(&t, SA(a4), 10, &idx, &who));
    assert_false(sv_iphints_get(&t, SA(other), 10, &idx, &who));
    assert_true(sv_iphints_get(&t, SA(a6), 10, &idx, &who));
    assert_int_equal(idx, 3);
    /* an IPv4 client is the same client as its IPv4-mapped IPv6 address (dual-stack sockets) */
    assert_int_equal(sv_iphints_put(&t, SA(a4), 10, 5, &tag[5]), 0);
    assert_true(sv_iphints_get(&t, SA(mapped), 10, &idx, &who));
    assert_int_equal(idx, 5);
    struct sockaddr_storage unix_sa;
    memset(&unix_sa, 0, sizeof unix_sa);
    unix_sa.ss_family = AF_UNIX;
    assert_int_equal(sv_iphints_put(&t, SA(unix_sa), 10, 1, NULL), -EAFNOSUPPORT);
    assert_false(sv_iphints_get(&t, SA(unix_sa), 10, &idx, &who));
    sv_iphints_deinit(&t);
}

static void hint__expiry__forgotten_after_ttl_unless_refreshed(void **state)
{
    (void)state;
    sv_iphints t;
    sv_iphints_init(&t, 16, 60, 3);
    struct sockaddr_storage a = v4("10.0.0.1", 1), b = v4("10.0.0.2", 1);
    int idx = -1;
    const void *who = NULL;
    assert_int_equal(sv_iphints_put(&t, SA(a), 1000, 1, &tag[1]), 0);
    assert_int_equal(sv_iphints_put(&t, SA(b), 1000, 2, &tag[2]), 0);
    assert_true(sv_iphints_get(&t, SA(a), 1059, &idx, &who));
    assert_int_equal(sv_iphints_put(&t, SA(b), 1050, 2, &tag[2]), 0); /* b logs in again */
    assert_false(sv_iphints_get(&t, SA(a), 1060, &idx, &who));        /* a: 60 s without */
    assert_true(sv_iphints_get(&t, SA(b), 1060, &idx, &who));
    assert_int_equal(idx, 2);
    assert_false(sv_iphints_get(&t, SA(b), 1110, &idx, &who));
    sv_iphints_deinit(&t);
}

/* Many more clients than the bound: never more than capacity remembered, the newest kept. */
static void hint__bound__oldest_evicted_newest_kept(void **state)
{
    (void)state;
    sv_iphints t;
    sv_iphints_init(&t, 100, 1u << 30, 4);
    size_t cap = sv_iphints_capacity(&t);
    assert_true(cap >= 100 && cap <= 2 * 100 + SV_IPHINTS_WAYS);
    int idx = -1;
    const void *who = NULL;
    char ip[32];
    const unsigned n = 20000;
    for (unsigned i = 0; i < n; i++) {
        snprintf(ip, sizeof ip, "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        struct sockaddr_storage a = v4(ip, 1);
        assert_int_equal(sv_iphints_put(&t, SA(a), 1 + i, (int)i, &tag[0]), 0);
    }
    size_t found = 0, found_newest = 0;
    for (unsigned i = 0; i < n; i++) {
        snprintf(ip, sizeof ip, "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        struct sockaddr_storage a = v4(ip, 1);
        if (sv_iphints_get(&t, SA(a), n, &idx, &who)) {
            assert_int_equal(idx, (int)i); /* never another client's user */
            found++;
            found_newest += i >= n - 8;
        }
    }
    assert_true(found <= cap);
    assert_true(found >= cap / 2); /* the sets fill evenly enough */
    assert_int_equal(found_newest, 8); /* the last puts always stay */
    /* within one set, the oldest entry goes first */
    sv_iphints one;
    sv_iphints_init(&one, 1, 1000, 5); /* one set of SV_IPHINTS_WAYS */
    assert_int_equal(sv_iphints_capacity(&one), SV_IPHINTS_WAYS);
    for (int i = 0; i <= SV_IPHINTS_WAYS; i++) {
        snprintf(ip, sizeof ip, "10.9.9.%d", i);
        struct sockaddr_storage a = v4(ip, 1);
        assert_int_equal(sv_iphints_put(&one, SA(a), 10 + (uint64_t)i, i, &tag[0]), 0);
    }
    for (int i = 0; i <= SV_IPHINTS_WAYS; i++) {
        snprintf(ip, sizeof ip, "10.9.9.%d", i);
        struct sockaddr_storage a = v4(ip, 1);
        assert_int_equal(sv_iphints_get(&one, SA(a), 20, &idx, &who), i > 0);
    }
    sv_iphints_deinit(&one);
    sv_iphints_deinit(&t);
}

static bool not_idx_4(const sv_iphint *e, void *arg)
{
    (void)arg;
    return e->idx != 4;
}

/* A hint put with an age expires that much earlier, never replaces a later one, and the walk
 * gives every live entry once with its age. */
static void hint__aged_put_and_walk__carried_over(void **state)
{
    (void)state;
    sv_iphints t;
    sv_iphints_init(&t, 64, 100, 6);
    struct sockaddr_storage a = v4("10.0.0.1", 1), b = v6("2001:db8::7", 1);
    uint8_t ka[16], kb[16];
    assert_true(sv_iphints_ip_key(SA(a), ka));
    assert_true(sv_iphints_ip_key(SA(b), kb));
    int idx = -1;
    const void *who = NULL;
    size_t pos = 0;
    uint64_t age = 0;
    assert_null(sv_iphints_next(&t, 500, &pos, &age)); /* nothing allocated yet */
    assert_int_equal(sv_iphints_put_ip(&t, ka, 500, 100, 1, &tag[1]), -ESTALE);
    assert_int_equal(sv_iphints_put_ip(&t, ka, 500, 30, 1, &tag[1]), 0);
    assert_true(sv_iphints_get(&t, SA(a), 569, &idx, &who)); /* 30 s old: 70 s left */
    assert_int_equal(idx, 1);
    assert_false(sv_iphints_get(&t, SA(a), 570, &idx, &who));
    /* a fresher login of the same IP stays; an older carried-over one does not replace it */
    assert_int_equal(sv_iphints_put(&t, SA(a), 500, 2, &tag[2]), 0);
    assert_int_equal(sv_iphints_put_ip(&t, ka, 500, 10, 3, &tag[3]), 0);
    assert_true(sv_iphints_get(&t, SA(a), 550, &idx, &who));
    assert_int_equal(idx, 2);
    assert_int_equal(sv_iphints_put_ip(&t, kb, 500, 40, 4, &tag[4]), 0);
    /* the walk at 520: a 20 s old, b 60 s old */
    const sv_iphint *e;
    int seen = 0;
    while ((e = sv_iphints_next(&t, 520, &pos, &age)) != NULL) {
        if (memcmp(e->ip, ka, 16) == 0) {
            assert_int_equal(e->idx, 2);
            assert_int_equal(age, 20);
            seen |= 1;
        } else {
            assert_memory_equal(e->ip, kb, 16);
            assert_int_equal(e->idx, 4);
            assert_ptr_equal(e->who, &tag[4]);
            assert_int_equal(age, 60);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);
    /* keep: the entries whose user the owner no longer has there are forgotten */
    assert_int_equal(sv_iphints_keep(&t, not_idx_4, NULL), 1);
    assert_false(sv_iphints_get(&t, SA(b), 520, &idx, &who));
    assert_true(sv_iphints_get(&t, SA(a), 520, &idx, &who));
    assert_int_equal(sv_iphints_put_ip(&t, kb, 500, 40, 4, &tag[4]), 0);
    pos = 0; /* at 561 b has expired */
    assert_non_null(e = sv_iphints_next(&t, 561, &pos, &age));
    assert_memory_equal(e->ip, ka, 16);
    assert_null(sv_iphints_next(&t, 561, &pos, &age));
    /* a full set keeps its entries when the carried-over one is older than all of them */
    sv_iphints one;
    sv_iphints_init(&one, 1, 100, 7);
    char ip[32];
    for (int i = 0; i < SV_IPHINTS_WAYS; i++) {
        snprintf(ip, sizeof ip, "10.9.9.%d", i);
        struct sockaddr_storage c = v4(ip, 1);
        assert_int_equal(sv_iphints_put(&one, SA(c), 200, i, &tag[0]), 0);
    }
    struct sockaddr_storage old = v4("10.9.9.99", 1);
    uint8_t kold[16];
    assert_true(sv_iphints_ip_key(SA(old), kold));
    assert_int_equal(sv_iphints_put_ip(&one, kold, 200, 50, 9, &tag[0]), 0);
    assert_false(sv_iphints_get(&one, SA(old), 200, &idx, &who));
    sv_iphints_deinit(&one);
    sv_iphints_deinit(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hint__put_then_get__same_user_any_port),
        cmocka_unit_test(hint__families__apart),
        cmocka_unit_test(hint__expiry__forgotten_after_ttl_unless_refreshed),
        cmocka_unit_test(hint__bound__oldest_evicted_newest_kept),
        cmocka_unit_test(hint__aged_put_and_walk__carried_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
