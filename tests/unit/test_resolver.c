/*
 * The worker's resolver (issue 13 "DNS", supervisor/dns/resolver.h) against a tiny DNS server
 * on 127.0.0.1 run on the same loop: one query however many wait for a name, answers cached
 * until their TTL, negative answers cached, a bounded cache, cancellation; and the Happy Eyeballs
 * v2 order (RFC 8305 §4) of sv_dns_order.
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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "supervisor/dns/resolver.h"

/* ---- a DNS server: "nx*" names do not exist, others have one A record 127.0.0.7 ------------ */

typedef struct server {
    uv_udp_t h;
    uint8_t buf[512];
    unsigned a_queries;   /* A questions received */
    uint32_t ttl;
    uint16_t port;
} server;

static void srv_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    server *s = h->data;
    *buf = uv_buf_init((char *)s->buf, sizeof s->buf);
    (void)suggested;
}

static void srv_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                     unsigned flags)
{
    server *s = h->data;
    (void)flags;
    if (n < 12 || from == NULL)
        return;
    uint8_t *p = (uint8_t *)buf->base;
    size_t q = 12;
    while (q < (size_t)n && p[q] != 0)
        q += 1u + p[q];
    if (q + 5 > (size_t)n)
        return;
    uint16_t qtype = (uint16_t)(p[q + 1] << 8 | p[q + 2]);
    size_t qend = q + 5;
    bool nx = p[12] >= 2 && p[13] == 'n' && p[14] == 'x';
    static uint8_t out[600];
    memcpy(out, p, qend);
    out[2] = 0x81; /* QR, RD */
    out[3] = nx ? 0x83 : 0x80; /* RA, NXDOMAIN or NOERROR */
    out[6] = out[7] = 0;
    memset(out + 8, 0, 4);
    size_t len = qend;
    if (qtype == 1)
        s->a_queries++;
    if (qtype == 1 && !nx) {
        out[7] = 1;
        uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1, (uint8_t)(s->ttl >> 24), (uint8_t)(s->ttl >> 16),
                        (uint8_t)(s->ttl >> 8), (uint8_t)s->ttl, 0, 4, 127, 0, 0, 7};
        memcpy(out + len, rr, sizeof rr);
        len += sizeof rr;
    }
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)len);
    uv_udp_try_send(h, &b, 1, from);
}

static void server_start(uv_loop_t *loop, server *s, uint32_t ttl)
{
    memset(s, 0, sizeof *s);
    s->ttl = ttl;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_udp_init(loop, &s->h), 0);
    s->h.data = s;
    assert_int_equal(uv_udp_bind(&s->h, (struct sockaddr *)&a, 0), 0);
    int len = sizeof a;
    uv_udp_getsockname(&s->h, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    uv_udp_recv_start(&s->h, srv_alloc, srv_recv);
}

static sv_resolver *resolver_for(uv_loop_t *loop, const server *s, enum sv_dns_strategy st)
{
    sv_dns_options o = {.n_servers = 1, .timeout_ms = 2000, .strategy = st};
    snprintf(o.servers[0], sizeof o.servers[0], "127.0.0.1:%u", s->port);
    sv_resolver *r = NULL;
    assert_int_equal(sv_resolver_new(loop, &o, &r), 0);
    return r;
}

/* ---- waiters --------------------------------------------------------------------------------- */

typedef struct waiter {
    sv_dns_req req;
    int calls, status;
    sv_dns_result res;
} waiter;

static void on_done(sv_dns_req *req, int status, const sv_dns_result *res)
{
    waiter *w = (waiter *)req;
    w->calls++;
    w->status = status;
    if (status == 0)
        w->res = *res;
}

static void finish(uv_loop_t *loop, server *s, sv_resolver *r)
{
    sv_resolver_close(r);
    uv_close((uv_handle_t *)&s->h, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void run_until(uv_loop_t *loop, const int *flag)
{
    while (*flag == 0)
        uv_run(loop, UV_RUN_ONCE);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void many_waiters_share_one_query_and_the_answer_is_cached_until_its_ttl(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server s;
    server_start(&loop, &s, 1);
    sv_resolver *r = resolver_for(&loop, &s, SV_DNS_IPV4_ONLY);
    waiter w[3] = {0};
    sv_dns_result now;
    for (int i = 0; i < 3; i++)
        assert_int_equal(sv_dns_resolve(r, &w[i].req, "www.example.test", on_done, &now), 1);
    run_until(&loop, &w[2].calls);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w[i].calls, 1);
        assert_int_equal(w[i].status, 0);
        assert_int_equal(w[i].res.n, 1);
        assert_int_equal(w[i].res.addrs[0].family, AF_INET);
        assert_memory_equal(w[i].res.addrs[0].ip, ((uint8_t[]){127, 0, 0, 7}), 4);
    }
    assert_int_equal(s.a_queries, 1);
    assert_int_equal(sv_resolver_queries(r), 1);
    /* cached: answered at once, no query */
    waiter x = {0};
    memset(&now, 0, sizeof now);
    assert_int_equal(sv_dns_resolve(r, &x.req, "www.example.test", on_done, &now), 0);
    assert_int_equal(now.n, 1);
    assert_int_equal(s.a_queries, 1);
    /* past the TTL (1 s) the name is asked again */
    usleep(1100 * 1000);
    uv_update_time(&loop);
    assert_int_equal(sv_dns_resolve(r, &x.req, "www.example.test", on_done, &now), 1);
    run_until(&loop, &x.calls);
    assert_int_equal(x.status, 0);
    assert_int_equal(s.a_queries, 2);
    finish(&loop, &s, r);
    (void)state;
}

static void a_name_that_does_not_exist_is_cached_as_such(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server s;
    server_start(&loop, &s, 60);
    sv_resolver *r = resolver_for(&loop, &s, SV_DNS_IPV4_ONLY);
    waiter w = {0};
    sv_dns_result now;
    assert_int_equal(sv_dns_resolve(r, &w.req, "nx.example.test", on_done, &now), 1);
    run_until(&loop, &w.calls);
    assert_int_equal(w.status, -ENOENT);
    unsigned asked = s.a_queries;
    assert_true(asked >= 1);
    waiter x = {0};
    assert_int_equal(sv_dns_resolve(r, &x.req, "nx.example.test", on_done, &now), -ENOENT);
    assert_int_equal(s.a_queries, asked);
    assert_int_equal(x.calls, 0);
    finish(&loop, &s, r);
    (void)state;
}

static void the_cache_is_bounded(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server s;
    server_start(&loop, &s, 600);
    sv_resolver *r = resolver_for(&loop, &s, SV_DNS_IPV4_ONLY);
    enum { N = SV_DNS_CACHE_MAX + 50, BATCH = 100 };
    static waiter w[N];
    memset(w, 0, sizeof w);
    for (int i = 0; i < N; i += BATCH) {
        int last = -1;
        for (int j = i; j < i + BATCH && j < N; j++) {
            char name[64];
            snprintf(name, sizeof name, "n%d.example.test", j);
            sv_dns_result now;
            assert_int_equal(sv_dns_resolve(r, &w[j].req, name, on_done, &now), 1);
            last = j;
        }
        for (int j = i; j <= last; j++)
            run_until(&loop, &w[j].calls);
        assert_true(sv_resolver_cached(r) <= SV_DNS_CACHE_MAX);
    }
    assert_int_equal(sv_resolver_cached(r), SV_DNS_CACHE_MAX);
    for (int j = 0; j < N; j++)
        assert_int_equal(w[j].status, 0);
    /* the least recently used went first: n0 is asked again, the last one is not */
    unsigned asked = s.a_queries;
    waiter x = {0};
    sv_dns_result now;
    char last[64];
    snprintf(last, sizeof last, "n%d.example.test", N - 1);
    assert_int_equal(sv_dns_resolve(r, &x.req, last, on_done, &now), 0);
    assert_int_equal(sv_dns_resolve(r, &x.req, "n0.example.test", on_done, &now), 1);
    run_until(&loop, &x.calls);
    assert_int_equal(s.a_queries, asked + 1);
    finish(&loop, &s, r);
    (void)state;
}

static void a_cancelled_waiter_hears_nothing_and_close_cancels_the_rest(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server s;
    server_start(&loop, &s, 60);
    uv_udp_recv_stop(&s.h); /* a server that never answers */
    sv_resolver *r = resolver_for(&loop, &s, SV_DNS_IPV4_ONLY);
    waiter a = {0}, b = {0};
    sv_dns_result now;
    assert_int_equal(sv_dns_resolve(r, &a.req, "slow.example.test", on_done, &now), 1);
    assert_int_equal(sv_dns_resolve(r, &b.req, "slow.example.test", on_done, &now), 1);
    sv_dns_cancel(&a.req);
    sv_dns_cancel(&a.req); /* twice is nothing */
    sv_resolver_close(r);
    assert_int_equal(a.calls, 0);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.status, -ECANCELED);
    uv_close((uv_handle_t *)&s.h, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    (void)state;
}

static void a_silent_server_costs_one_timeout_for_all_waiters(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    server s;
    server_start(&loop, &s, 60);
    uv_udp_recv_stop(&s.h);
    sv_dns_options o = {.n_servers = 1, .timeout_ms = 300, .strategy = SV_DNS_IPV4_ONLY};
    snprintf(o.servers[0], sizeof o.servers[0], "127.0.0.1:%u", s.port);
    sv_resolver *r = NULL;
    assert_int_equal(sv_resolver_new(&loop, &o, &r), 0);
    waiter a = {0}, b = {0};
    sv_dns_result now;
    assert_int_equal(sv_dns_resolve(r, &a.req, "slow.example.test", on_done, &now), 1);
    assert_int_equal(sv_dns_resolve(r, &b.req, "slow.example.test", on_done, &now), 1);
    run_until(&loop, &b.calls);
    assert_int_equal(a.status, -ETIMEDOUT);
    assert_int_equal(b.status, -ETIMEDOUT);
    assert_int_equal(sv_resolver_queries(r), 1);
    /* the failure is remembered for a while: no second timeout */
    assert_int_equal(sv_dns_resolve(r, &a.req, "slow.example.test", on_done, &now), -ETIMEDOUT);
    finish(&loop, &s, r);
    (void)state;
}

/* Every server form the agent config accepts (agent_config.c dns_server_ok) starts a resolver. */
static void every_configured_server_form_is_taken(void **state)
{
    static const char *const forms[] = {"127.0.0.53", "127.0.0.1:5353", "::1", "[::1]:53"};
    sv_dns_options o = {.n_servers = 4};
    for (size_t i = 0; i < 4; i++)
        snprintf(o.servers[i], sizeof o.servers[i], "%s", forms[i]);
    uv_loop_t loop;
    uv_loop_init(&loop);
    sv_resolver *r = NULL;
    assert_int_equal(sv_resolver_new(&loop, &o, &r), 0);
    sv_resolver_close(r);
    snprintf(o.servers[0], sizeof o.servers[0], "not-an-ip");
    o.n_servers = 1;
    assert_int_equal(sv_resolver_new(&loop, &o, &r), -EINVAL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    (void)state;
}

static sv_dns_addr v4(uint8_t last) { return (sv_dns_addr){AF_INET, {10, 0, 0, last}}; }
static sv_dns_addr v6(uint8_t last)
{
    sv_dns_addr a = {AF_INET6, {0x20, 0x01, 0x0d, 0xb8}};
    a.ip[15] = last;
    return a;
}

static void check_order(sv_dns_result r, enum sv_dns_strategy st, const char *want)
{
    sv_dns_order(&r, st);
    char got[64] = "";
    for (size_t i = 0; i < r.n; i++) {
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "%s%c%u", i ? " " : "",
                 r.addrs[i].family == AF_INET ? '4' : '6', r.addrs[i].ip[r.addrs[i].family ==
                                                                         AF_INET ? 3 : 15]);
    }
    assert_string_equal(got, want);
}

static void happy_eyeballs_alternates_families_from_the_preferred_one(void **state)
{
    sv_dns_result r = {.n = 5, .addrs = {v6(1), v6(2), v6(3), v4(1), v4(2)}};
    check_order(r, SV_DNS_PREFER_IPV4, "41 61 42 62 63");
    check_order(r, SV_DNS_PREFER_IPV6, "61 41 62 42 63");
    check_order(r, SV_DNS_IPV4_ONLY, "41 42");
    check_order(r, SV_DNS_IPV6_ONLY, "61 62 63");
    sv_dns_result only6 = {.n = 2, .addrs = {v6(1), v6(2)}};
    check_order(only6, SV_DNS_PREFER_IPV4, "61 62");
    check_order(only6, SV_DNS_IPV4_ONLY, "");
    (void)state;
}

int main(void)
{
    alarm(60); /* bounded: a lost event must not hang the suite */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_waiters_share_one_query_and_the_answer_is_cached_until_its_ttl),
        cmocka_unit_test(a_name_that_does_not_exist_is_cached_as_such),
        cmocka_unit_test(the_cache_is_bounded),
        cmocka_unit_test(a_cancelled_waiter_hears_nothing_and_close_cancels_the_rest),
        cmocka_unit_test(a_silent_server_costs_one_timeout_for_all_waiters),
        cmocka_unit_test(happy_eyeballs_alternates_families_from_the_preferred_one),
        cmocka_unit_test(every_configured_server_form_is_taken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
