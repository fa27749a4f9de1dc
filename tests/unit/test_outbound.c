/*
 * The outbound seam (issue 8, supervisor/outbound/outbound.h) on a real loop and real loopback
 * sockets: blackhole refuses and closes at once; a direct stream connects, relays both ways,
 * half-closes and reports `closed` exactly once, last; a name that resolves to an internal
 * address is refused unless allowed (issue 15); a close during resolution cancels it; a direct
 * datagram link sends from the socket of the destination's family and delivers the reply.
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

#include "supervisor/outbound/outbound.h"

/* ---- a stream owner that records its events ------------------------------------------------ */

typedef struct owner {
    sv_ob_stream s;
    sv_addrset *own;
    int connected, status, closed, written, eof;
    bool closed_last;      /**< no event came after `closed` */
    uint8_t buf[256];
    uint8_t got[256];
    size_t n_got;
    uv_tcp_t *server;      /**< the echo server, closed with the link */
} owner;

static void o_connected(void *ctx, int status)
{
    owner *o = ctx;
    o->connected++;
    o->status = status;
    o->closed_last = o->closed == 0;
    if (status < 0) {
        o->s.ops->close(&o->s);
        return;
    }
    static const char hello[] = "hello";
    uv_buf_t b = uv_buf_init((char *)hello, 5);
    assert_int_equal(o->s.ops->try_write(&o->s, &b, 1), 5);
    o->s.ops->read(&o->s, true);
}

static void o_alloc(void *ctx, uv_buf_t *buf)
{
    owner *o = ctx;
    *buf = uv_buf_init((char *)o->buf, sizeof o->buf);
}

static void o_read(void *ctx, ssize_t n, const uv_buf_t *buf)
{
    owner *o = ctx;
    o->closed_last = o->closed == 0;
    if (n < 0) {
        o->eof += n == UV_EOF;
        o->s.ops->close(&o->s);
        return;
    }
    memcpy(o->got + o->n_got, buf->base, (size_t)n);
    o->n_got += (size_t)n;
    if (o->n_got == 5)
        assert_int_equal(o->s.ops->shutdown(&o->s), 0); /* the echo server closes after EOF */
}

static void o_written(void *ctx, int status)
{
    owner *o = ctx;
    o->written++;
    (void)status;
}

static void o_closed(void *ctx)
{
    owner *o = ctx;
    o->closed++;
    if (o->server != NULL && o->closed == 1)
        uv_close((uv_handle_t *)o->server, NULL);
    if (o->closed == 1) /* the link's resolver goes with it */
        sv_resolver_close(o->s.env.resolver);
}

static const sv_ob_stream_events events = {o_connected, o_alloc, o_read, o_written, o_closed};

static void owner_init(owner *o, uv_loop_t *loop, const sv_outbound_ops *ops, bool allow_internal)
{
    memset(o, 0, sizeof *o);
    o->s.ops = ops;
    o->s.ev = &events;
    o->s.owner = o;
    sv_resolver *r = NULL;
    assert_int_equal(sv_resolver_new(loop, NULL, &r), 0);
    o->s.env = (sv_ob_env){loop, &o->own, r, NULL};
    o->s.allow_internal = allow_internal;
}

/* ---- a TCP echo server on 127.0.0.1 that closes after the peer's EOF ----------------------- */

typedef struct echo_conn {
    uv_tcp_t h;
    uint8_t buf[256];
    uv_write_t wr;
} echo_conn;

static void echo_freed(uv_handle_t *h) { free(h->data); }

static void echo_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    echo_conn *e = h->data;
    *buf = uv_buf_init((char *)e->buf, sizeof e->buf);
    (void)suggested;
}

static void echo_written(uv_write_t *req, int status) { (void)req, (void)status; }

static void echo_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    echo_conn *e = s->data;
    if (n < 0) {
        uv_close((uv_handle_t *)&e->h, echo_freed);
        return;
    }
    uv_buf_t b = uv_buf_init(buf->base, (unsigned)n);
    uv_write(&e->wr, s, &b, 1, echo_written);
}

static void echo_accept(uv_stream_t *server, int status)
{
    assert_int_equal(status, 0);
    echo_conn *e = calloc(1, sizeof *e);
    assert_non_null(e);
    uv_tcp_init(server->loop, &e->h);
    e->h.data = e;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&e->h), 0);
    uv_read_start((uv_stream_t *)&e->h, echo_alloc, echo_read);
}

static uint16_t echo_listen(uv_loop_t *loop, uv_tcp_t *server)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_init(loop, server), 0);
    assert_int_equal(uv_tcp_bind(server, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)server, 8, echo_accept), 0);
    int len = sizeof a;
    uv_tcp_getsockname(server, (struct sockaddr *)&a, &len);
    return ntohs(a.sin_port);
}

static sv_dest ip4_dest(uint16_t port)
{
    sv_dest d = {.atyp = SV_ATYP_IPV4, .ip = {127, 0, 0, 1}, .port = port, .network = SV_NET_TCP};
    return d;
}

static sv_dest name_dest(const char *host, uint16_t port)
{
    sv_dest d = {.atyp = SV_ATYP_DOMAIN, .port = port, .network = SV_NET_TCP};
    snprintf(d.host, sizeof d.host, "%s", host);
    return d;
}

/* Run until nothing is left (the echo server closes with the link), then close the loop. */
static void run_and_close(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0); /* nothing of the link is left */
}

/* ---- tests --------------------------------------------------------------------------------- */

static void blackhole_refuses_and_closes_at_once(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    owner o;
    owner_init(&o, &loop, sv_outbound_ops_for(SV_OUTBOUND_BLACKHOLE), false);
    sv_dest d = ip4_dest(9);
    assert_int_equal(o.s.ops->open(&o.s, &d), -ECONNREFUSED);
    o.s.ops->close(&o.s);
    assert_int_equal(o.closed, 1);
    o.s.ops->close(&o.s); /* a second close is nothing */
    assert_int_equal(o.closed, 1);
    assert_null(o.s.ops->dgram_open); /* no datagrams: the fan-out drops them */
    assert_null(o.s.ops->dgram_send);
    run_and_close(&loop);
    assert_int_equal(o.connected, 0);
    (void)state;
}

static void direct_relays_both_ways_and_closes_once(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_tcp_t server;
    uint16_t port = echo_listen(&loop, &server);
    owner o;
    owner_init(&o, &loop, sv_outbound_ops_for(SV_OUTBOUND_DIRECT), false);
    o.server = &server;
    sv_dest d = ip4_dest(port);
    assert_int_equal(o.s.ops->open(&o.s, &d), 0);
    run_and_close(&loop);
    assert_int_equal(o.connected, 1);
    assert_int_equal(o.status, 0);
    assert_int_equal(o.n_got, 5);
    assert_memory_equal(o.got, "hello", 5);
    assert_int_equal(o.eof, 1);
    assert_int_equal(o.closed, 1);
    assert_true(o.closed_last);
    (void)state;
}

static void a_name_resolving_to_an_internal_address_is_refused_unless_allowed(void **state)
{
    for (int allow = 0; allow < 2; allow++) {
        uv_loop_t loop;
        uv_loop_init(&loop);
        uv_tcp_t server;
        uint16_t port = echo_listen(&loop, &server);
        owner o;
        owner_init(&o, &loop, &sv_ob_direct, allow);
        o.server = &server;
        sv_dest d = name_dest("localhost", port);
        assert_int_equal(o.s.ops->open(&o.s, &d), 0);
        run_and_close(&loop);
        assert_int_equal(o.connected, 1);
        assert_int_equal(o.closed, 1);
        if (allow) {
            assert_int_equal(o.status, 0);
            assert_int_equal(o.n_got, 5);
        } else {
            assert_int_equal(o.status, -EACCES);
            assert_int_equal(o.n_got, 0);
        }
    }
    (void)state;
}

static void a_close_during_resolution_reports_only_closed(void **state)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    owner o;
    owner_init(&o, &loop, &sv_ob_direct, true);
    sv_dest d = name_dest("localhost", 9);
    assert_int_equal(o.s.ops->open(&o.s, &d), 0);
    o.s.ops->close(&o.s);
    run_and_close(&loop);
    assert_int_equal(o.connected, 0);
    assert_int_equal(o.closed, 1);
    (void)state;
}

/* ---- datagrams ----------------------------------------------------------------------------- */

typedef struct downer {
    sv_ob_dgram g;
    sv_addrset *own;
    uint8_t buf[256];
    int replies, closed;
    size_t sent;
    int from_family;
    char reply[16];
} downer;

static void d_alloc(void *ctx, uv_buf_t *buf)
{
    downer *o = ctx;
    *buf = uv_buf_init((char *)o->buf, sizeof o->buf);
}

static void d_recv(void *ctx, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    downer *o = ctx;
    o->replies++;
    o->from_family = from->sa_family;
    snprintf(o->reply, sizeof o->reply, "%.*s", (int)n, (const char *)p);
    o->g.ops->dgram_close(&o->g);
}

static void d_sent(void *ctx, size_t n)
{
    downer *o = ctx;
    o->sent += n;
}

static void d_closed(void *ctx)
{
    downer *o = ctx;
    o->closed++;
    if (o->closed == 1)
        sv_resolver_close(o->g.env.resolver);
}

static const sv_ob_dgram_events devents = {d_alloc, d_recv, d_sent, d_closed};

typedef struct udp_echo {
    uv_udp_t h;
    uint8_t buf[256];
} udp_echo;

static void uecho_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    udp_echo *e = h->data;
    *buf = uv_buf_init((char *)e->buf, sizeof e->buf);
    (void)suggested;
}

static void uecho_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                       unsigned flags)
{
    if (n <= 0 || from == NULL)
        return;
    uv_buf_t b = uv_buf_init(buf->base, (unsigned)n);
    uv_udp_try_send(h, &b, 1, from);
    uv_close((uv_handle_t *)h, NULL);
    (void)flags;
}

static void a_direct_datagram_link_answers_from_the_destination_family(void **state)
{
    static const struct {
        const char *ip;
        int family;
    } cases[] = {{"127.0.0.1", AF_INET}, {"::1", AF_INET6}};
    for (size_t i = 0; i < 2; i++) {
        uv_loop_t loop;
        uv_loop_init(&loop);
        udp_echo e;
        struct sockaddr_storage ss;
        if (cases[i].family == AF_INET)
            uv_ip4_addr(cases[i].ip, 0, (struct sockaddr_in *)&ss);
        else
            uv_ip6_addr(cases[i].ip, 0, (struct sockaddr_in6 *)&ss);
        uv_udp_init(&loop, &e.h);
        e.h.data = &e;
        if (uv_udp_bind(&e.h, (struct sockaddr *)&ss, 0) != 0) { /* no IPv6 on this host */
            uv_close((uv_handle_t *)&e.h, NULL);
            run_and_close(&loop);
            continue;
        }
        int len = sizeof ss;
        uv_udp_getsockname(&e.h, (struct sockaddr *)&ss, &len);
        uv_udp_recv_start(&e.h, uecho_alloc, uecho_recv);
        downer o = {0};
        o.g.ops = &sv_ob_direct;
        o.g.ev = &devents;
        o.g.owner = &o;
        sv_resolver *r = NULL;
        assert_int_equal(sv_resolver_new(&loop, NULL, &r), 0);
        o.g.env = (sv_ob_env){&loop, &o.own, r, NULL};
        assert_int_equal(o.g.ops->dgram_open(&o.g), 0);
        assert_true(o.g.has[cases[i].family == AF_INET ? 0 : 1]);
        sv_dest d = {.network = SV_NET_UDP};
        if (cases[i].family == AF_INET) {
            d.atyp = SV_ATYP_IPV4;
            memcpy(d.ip, &((struct sockaddr_in *)&ss)->sin_addr, 4);
            d.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else {
            d.atyp = SV_ATYP_IPV6;
            memcpy(d.ip, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
            d.port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
        o.g.ops->dgram_send(&o.g, &d, (const uint8_t *)"ping", 4, false);
        run_and_close(&loop);
        assert_int_equal(o.sent, 4);
        assert_int_equal(o.replies, 1);
        assert_string_equal(o.reply, "ping");
        assert_int_equal(o.from_family, cases[i].family);
        assert_int_equal(o.closed, 1);
    }
    (void)state;
}

/* Issue 13: prepare's host check of a socket policy names what the host refuses. */
static void a_socket_policy_is_checked_on_the_host(void **state)
{
    (void)state;
    sv_error err = {0};
    sv_socket_policy ok = {.has_addr4 = true, .addr4 = {127, 0, 0, 2}, .interface = "lo",
                           .keepalive_idle_s = 30};
    if (sv_socket_policy_check(&ok, "direct", &err) != 0) {
        /* SO_BINDTODEVICE needs CAP_NET_RAW before Linux 5.7: then the refusal must say so */
        assert_non_null(strstr(err.msg, "SO_BINDTODEVICE needs CAP_NET_RAW"));
        ok.interface[0] = '\0';
        assert_int_equal(sv_socket_policy_check(&ok, "direct", &err), 0);
    }
    sv_socket_policy foreign = {.has_addr4 = true, .addr4 = {192, 0, 2, 1}};
    assert_int_equal(sv_socket_policy_check(&foreign, "direct", &err), -EINVAL);
    assert_string_equal(err.msg,
                        "outbound direct: bind address 192.0.2.1 is not an address of this host");
    sv_socket_policy noif = {.interface = "nosuchif0"};
    assert_int_equal(sv_socket_policy_check(&noif, "x", &err), -EINVAL);
    assert_string_equal(err.msg, "outbound x: interface nosuchif0: no such interface on this host");
    sv_socket_policy mark = {.mark = 7};
    int rc = sv_socket_policy_check(&mark, "direct", &err);
    if (geteuid() != 0)
        assert_string_equal(err.msg, "outbound direct: mark 7: SO_MARK needs CAP_NET_ADMIN, "
                                     "which this process lacks");
    else
        assert_int_equal(rc, 0);
}

int main(void)
{
    alarm(60); /* bounded: a lost event must not hang the suite */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blackhole_refuses_and_closes_at_once),
        cmocka_unit_test(a_socket_policy_is_checked_on_the_host),
        cmocka_unit_test(direct_relays_both_ways_and_closes_once),
        cmocka_unit_test(a_name_resolving_to_an_internal_address_is_refused_unless_allowed),
        cmocka_unit_test(a_close_during_resolution_reports_only_closed),
        cmocka_unit_test(a_direct_datagram_link_answers_from_the_destination_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
