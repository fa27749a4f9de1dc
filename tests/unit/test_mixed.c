/*
 * Unit tests: the mixed core (supervisor/proto/mixed.c: SOCKS5 or the HTTP proxy by the first
 * byte) and SOCKS5's UDP ASSOCIATE side (socks.c: the request, the relay extension and the
 * datagram framing, RFC 1928 §7), through the ops tables of proto.h and proto_ext.h.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "supervisor/proto/mixed.h"
#include "supervisor/proto/socks.h"

#define SECRET "6a1e9c2d-4b83-4f7a-a0d5-3e8c1b7f2a55"

static void *g_creds;

static int setup(void **state)
{
    (void)state;
    sv_user u = {.id = 1, .secret = SECRET};
    sv_user_set set = {.tag = "users", .users = &u, .n_users = 1};
    sv_error err = {0};
    return sv_mixed_ops.creds_new(NULL, &set, &g_creds, &err);
}

static int teardown(void **state)
{
    (void)state;
    sv_mixed_ops.creds_free(g_creds);
    return 0;
}

/* A connection of core @p ops: zeroed state, init. */
static void *conn_new(const sv_proto_ops *ops)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    return st;
}

static void conn_free(const sv_proto_ops *ops, void *st)
{
    ops->deinit(st);
    free(st);
}

/* Feed @p n bytes (copied) to @p st; @return what feed returned. */
static ssize_t feed(const sv_proto_ops *ops, void *st, const void *p, size_t n, sv_effects *fx)
{
    uint8_t buf[1024];
    assert_true(n <= sizeof buf);
    memcpy(buf, p, n);
    return ops->feed(st, g_creds, buf, n, fx);
}

/* The SOCKS5 greeting and RFC 1929 sub-negotiation with the one user's secret. */
static size_t socks_login(uint8_t *out)
{
    size_t n = 0, l = strlen(SECRET);
    memcpy(out, "\x05\x01\x02", 3);
    n = 3;
    out[n++] = 0x01;
    out[n++] = (uint8_t)l;
    memcpy(out + n, SECRET, l);
    n += l;
    out[n++] = (uint8_t)l;
    memcpy(out + n, SECRET, l);
    return n + l;
}

static void test_mixed_first_byte_socks(void **state)
{
    (void)state;
    void *st = conn_new(&sv_mixed_ops);
    uint8_t wire[600];
    size_t n = socks_login(wire);
    /* UDP ASSOCIATE 0.0.0.0:0 */
    memcpy(wire + n, "\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00", 10);
    n += 10;
    sv_effects fx;
    assert_int_equal(feed(&sv_mixed_ops, st, wire, n, &fx), (ssize_t)n);
    assert_int_equal(fx.n, 4);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_CLIENT);
    assert_memory_equal(fx.v[0].data, "\x05\x02", 2);
    assert_int_equal(fx.v[1].kind, SV_FX_TO_CLIENT);
    assert_memory_equal(fx.v[1].data, "\x01\x00", 2);
    assert_int_equal(fx.v[2].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[2].principal, 0);
    /* UDP ASSOCIATE: an open of a UDP destination, no reply yet (the runtime's relay first) */
    assert_int_equal(fx.v[3].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[3].dest.network, SV_NET_UDP);
    /* the control connection carries nothing more: bytes are dropped */
    assert_int_equal(feed(&sv_mixed_ops, st, "junk", 4, &fx), 4);
    assert_int_equal(fx.n, 0);
    conn_free(&sv_mixed_ops, st);
}

static void test_mixed_first_byte_http(void **state)
{
    (void)state;
    void *st = conn_new(&sv_mixed_ops);
    static const char req[] = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
    sv_effects fx;
    /* no credentials and no no_auth: 407 */
    assert_true(feed(&sv_mixed_ops, st, req, sizeof req - 1, &fx) < 0);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
    assert_int_equal(fx.v[0].policy, SV_PROBE_ANSWER);
    assert_true(fx.v[0].len > 12);
    assert_memory_equal(fx.v[0].data, "HTTP/1.1 407", 12);
    conn_free(&sv_mixed_ops, st);
}

static void test_mixed_nothing_yet(void **state)
{
    (void)state;
    void *st = conn_new(&sv_mixed_ops);
    sv_effects fx;
    assert_int_equal(sv_mixed_ops.feed(st, g_creds, NULL, 0, &fx), 0);
    assert_int_equal(fx.n, 0);
    uint8_t out[8];
    assert_true(sv_mixed_ops.frame(st, g_creds, 0, (const uint8_t *)"x", 1, out, 8) < 0);
    conn_free(&sv_mixed_ops, st);
}

static void test_socks_relay_ready(void **state)
{
    (void)state;
    const sv_proto_ext_relay *x = sv_proto_relay(&sv_socks_ops);
    assert_non_null(x);
    assert_non_null(sv_proto_datagram(&sv_socks_ops));
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(4242)};
    inet_pton(AF_INET, "127.0.0.9", &a4.sin_addr);
    uint8_t out[64];
    ssize_t n = x->relay_ready(NULL, (struct sockaddr *)&a4, out, sizeof out);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "\x05\x00\x00\x01\x7f\x00\x00\x09\x10\x92", 10);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(1)};
    inet_pton(AF_INET6, "::1", &a6.sin6_addr);
    n = x->relay_ready(NULL, (struct sockaddr *)&a6, out, sizeof out);
    assert_int_equal(n, 22);
    assert_memory_equal(out, "\x05\x00\x00\x04", 4);
    assert_int_equal(out[19], 1);
    assert_memory_equal(out + 20, "\x00\x01", 2);
    assert_int_equal(x->relay_ready(NULL, (struct sockaddr *)&a6, out, 21), -EMSGSIZE);
    n = x->relay_failed(NULL, out, sizeof out);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00", 10);
}

static void test_socks_relay_open(void **state)
{
    (void)state;
    const sv_proto_ext_relay *x = sv_proto_relay(&sv_socks_ops);
    sv_dest d;
    size_t off = 0;
    static const uint8_t good[] = "\x00\x00\x00\x03\x07" "example" "\x00\x35" "DATA";
    assert_int_equal(x->relay_open(good, sizeof good - 1, &d, &off), 0);
    assert_int_equal(d.atyp, SV_ATYP_DOMAIN);
    assert_string_equal(d.host, "example");
    assert_int_equal(d.port, 53);
    assert_int_equal(d.network, SV_NET_UDP);
    assert_int_equal(off, sizeof good - 1 - 4);
    static const uint8_t frag[] = "\x00\x00\x01\x01\x7f\x00\x00\x01\x00\x35" "x";
    assert_int_equal(x->relay_open(frag, sizeof frag - 1, &d, &off), -EOPNOTSUPP);
    static const uint8_t rsv[] = "\x00\x01\x00\x01\x7f\x00\x00\x01\x00\x35" "x";
    assert_int_equal(x->relay_open(rsv, sizeof rsv - 1, &d, &off), -EPROTO);
    static const uint8_t atyp[] = "\x00\x00\x00\x09\x7f\x00\x00\x01\x00\x35";
    assert_int_equal(x->relay_open(atyp, sizeof atyp - 1, &d, &off), -EPROTO);
    static const uint8_t shortv4[] = "\x00\x00\x00\x01\x7f\x00";
    assert_int_equal(x->relay_open(shortv4, sizeof shortv4 - 1, &d, &off), -EPROTO);
    assert_int_equal(x->relay_open(good, 3, &d, &off), -EPROTO);
}

static void test_socks_frame_datagram(void **state)
{
    (void)state;
    const sv_proto_ext_datagram *x = sv_proto_datagram(&sv_socks_ops);
    sv_dest from = {.atyp = SV_ATYP_IPV4, .ip = {8, 8, 4, 4}, .port = 53,
                    .network = SV_NET_UDP};
    uint8_t out[64];
    ssize_t n = x->frame_datagram(NULL, g_creds, 0, &from, (const uint8_t *)"hey", 3, out,
                                  sizeof out);
    assert_int_equal(n, 3 + 7 + 3);
    assert_memory_equal(out, "\x00\x00\x00\x01\x08\x08\x04\x04\x00\x35hey", 13);
    assert_int_equal(x->frame_datagram(NULL, g_creds, 0, &from, (const uint8_t *)"hey", 3,
                                       out, 12),
                     -EMSGSIZE);
    sv_dest bad = {.atyp = 9};
    assert_int_equal(x->frame_datagram(NULL, g_creds, 0, &bad, (const uint8_t *)"x", 1, out,
                                       sizeof out),
                     -EINVAL);
}

/* Direct bits (the runtime's splice): a tunnel in clear only; nothing over TLS, nothing for a
 * forwarded request, nothing before the tunnel. */
static unsigned direct_after(const sv_inbound_spec *in, const char *wire, size_t n)
{
    void *st = calloc(1, sv_mixed_ops.state_size);
    assert_non_null(st);
    assert_int_equal(sv_mixed_ops.init(st, in), 0);
    sv_effects fx;
    unsigned before = sv_proto_direct(&sv_mixed_ops)->direct(st);
    assert_int_equal(before, 0);
    feed(&sv_mixed_ops, st, wire, n, &fx);
    unsigned bits = sv_proto_direct(&sv_mixed_ops)->direct(st);
    conn_free(&sv_mixed_ops, st);
    return bits;
}

static void test_direct_tunnels_in_clear(void **state)
{
    (void)state;
    sv_inbound_spec clear = {.tls = {.cert = SV_CERT_NONE}};
    sv_inbound_spec tls = {.tls = {.cert = SV_CERT_SELF}};
    const unsigned both = SV_DIRECT_IN | SV_DIRECT_OUT;
    static const char connect[] = "CONNECT a.example:443 HTTP/1.1\r\nProxy-Authorization: "
                                  "Basic NmExZTljMmQtNGI4My00ZjdhLWEwZDUtM2U4YzFiN2YyYTU1OjZhMW"
                                  "U5YzJkLTRiODMtNGY3YS1hMGQ1LTNlOGMxYjdmMmE1NQ==\r\n\r\n";
    static const char get[] = "GET http://a.example/ HTTP/1.1\r\nProxy-Authorization: "
                              "Basic NmExZTljMmQtNGI4My00ZjdhLWEwZDUtM2U4YzFiN2YyYTU1OjZhMW"
                              "U5YzJkLTRiODMtNGY3YS1hMGQ1LTNlOGMxYjdmMmE1NQ==\r\n\r\n";
    assert_int_equal(direct_after(&clear, connect, sizeof connect - 1), both);
    assert_int_equal(direct_after(&tls, connect, sizeof connect - 1), 0);
    assert_int_equal(direct_after(&clear, get, sizeof get - 1), 0);
    uint8_t wire[600];
    size_t n = socks_login(wire);
    memcpy(wire + n, "\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50", 10);
    assert_int_equal(direct_after(&clear, (const char *)wire, n + 10), both);
    assert_int_equal(direct_after(&tls, (const char *)wire, n + 10), 0);
    assert_int_equal(direct_after(&clear, (const char *)wire, n), 0); /* logged in, no request */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_first_byte_socks),
        cmocka_unit_test(test_mixed_first_byte_http),
        cmocka_unit_test(test_mixed_nothing_yet),
        cmocka_unit_test(test_socks_relay_ready),
        cmocka_unit_test(test_socks_relay_open),
        cmocka_unit_test(test_socks_frame_datagram),
        cmocka_unit_test(test_direct_tunnels_in_clear),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
