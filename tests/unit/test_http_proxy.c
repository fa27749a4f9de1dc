/*
 * Unit tests: HTTP proxy core (supervisor/proto/http_proxy.c) through its ops table (proto.h):
 * CONNECT, absolute-form forwarding and its rewritten head, Basic authentication
 * (PROTOCOLS-3.md §4.3), the refusals (400, 407, 431) and cut-independence. A runtime-like
 * driver keeps the unconsumed carry and feeds it again with more bytes appended.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/proto/http_proxy.h"

static const sv_proto_ops *const ops = &sv_http_proxy_ops;

/* users 0 "user-a", 1 "pa:ss" (a colon in its secret), 2 "user-c" */
static char *g_secrets[] = {"user-a", "pa:ss", "user-c"};
static void *g_creds;
static void *g_anon; /* one user "solo", proxy_no_auth */

/* "Basic base64(user-a:user-a)" and "Basic base64(pa:ss:pa:ss)" */
#define AUTH_A "Proxy-Authorization: Basic dXNlci1hOnVzZXItYQ==\r\n"
#define CONNECT_A "CONNECT a.example:443 HTTP/1.1\r\n"
#define AUTH_COLON "Proxy-Authorization: Basic cGE6c3M6cGE6c3M=\r\n"

static const char r400[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                           "Connection: close\r\n\r\n";
static const char r407[] = "HTTP/1.1 407 Proxy Authentication Required\r\n"
                           "Proxy-Authenticate: Basic realm=\"proxy\"\r\n"
                           "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char r431[] = "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                           "Content-Length: 0\r\nConnection: close\r\n\r\n";

static void *creds_of(char **secrets, size_t n, bool no_auth)
{
    sv_user u[3];
    memset(u, 0, sizeof u);
    for (size_t i = 0; i < n; i++) {
        u[i].id = i + 1;
        u[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "users", .users = u, .n_users = n};
    sv_inbound_spec in;
    memset(&in, 0, sizeof in);
    in.proxy_no_auth = no_auth;
    void *creds = NULL;
    sv_error err = {0};
    assert_int_equal(ops->creds_new(&in, &set, &creds, &err), 0);
    return creds;
}

static int setup(void **state)
{
    (void)state;
    static char *solo[] = {"solo"};
    g_creds = creds_of(g_secrets, 3, false);
    g_anon = creds_of(solo, 1, true);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ops->creds_free(g_creds);
    ops->creds_free(g_anon);
    return 0;
}

/* What a connection produced: every effect's kind and data, summed up. */
typedef struct outcome {
    int rc;          /* 0, or the error */
    int principal;   /* -1 when not authenticated */
    sv_dest dest;
    bool opened;
    char to_client[128];
    char out[20000]; /* every TO_OUTBOUND byte, NUL-terminated */
    size_t out_len;
    char answer[256];
    int policy;
    size_t unconsumed; /* bytes left in the carry at the end */
} outcome;

static void apply(outcome *o, const sv_effects *fx)
{
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            o->principal = e->principal;
            break;
        case SV_FX_OPEN:
            assert_false(o->opened);
            o->opened = true;
            o->dest = e->dest;
            break;
        case SV_FX_TO_CLIENT:
            assert_true(e->len < sizeof o->to_client);
            memcpy(o->to_client, e->data, e->len);
            break;
        case SV_FX_TO_OUTBOUND:
            assert_true(o->opened && o->out_len + e->len < sizeof o->out);
            memcpy(o->out + o->out_len, e->data, e->len);
            o->out_len += e->len;
            break;
        case SV_FX_ERROR:
            assert_int_equal(i, fx->n - 1);
            o->rc = e->error;
            o->policy = e->policy;
            assert_true(e->len < sizeof o->answer);
            if (e->len > 0)
                memcpy(o->answer, e->data, e->len);
            break;
        default:
            fail_msg("unexpected effect %d", e->kind);
        }
    }
}

/* Feed @p n bytes at @p wire in pieces of @p piece bytes (0: all at once) to a new connection
 * with table @p creds. */
static void drive(const void *creds, const char *wire, size_t n, size_t piece, outcome *o)
{
    memset(o, 0, sizeof *o);
    o->principal = -1;
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    uint8_t *buf = malloc(n + 1);
    size_t have = 0, in = 0;
    for (;;) {
        size_t k = piece == 0 ? n - in : (piece < n - in ? piece : n - in);
        memcpy(buf + have, wire + in, k);
        have += k, in += k;
        sv_effects fx;
        memset(&fx, 0xa5, sizeof fx);
        ssize_t r = ops->feed(st, creds, buf, have, &fx);
        apply(o, &fx);
        if (r < 0) {
            assert_int_equal(o->rc, r);
            /* the same error after it, without an answer */
            assert_int_equal(ops->feed(st, creds, buf, have, &fx), r);
            assert_int_equal(fx.n, 1);
            assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
            break;
        }
        assert_true((size_t)r <= have);
        memmove(buf, buf + r, have - (size_t)r);
        have -= (size_t)r;
        if (in == n)
            break;
    }
    o->unconsumed = have;
    free(buf);
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

/* drive() whole, then byte by byte: both give the same outcome. */
static void drive_both(const void *creds, const char *wire, size_t n, outcome *o)
{
    static outcome one;
    drive(creds, wire, n, 0, o);
    drive(creds, wire, n, 1, &one);
    assert_int_equal(o->rc, one.rc);
    assert_int_equal(o->principal, one.principal);
    assert_int_equal(o->out_len, one.out_len);
    assert_memory_equal(o->out, one.out, o->out_len);
    assert_string_equal(o->answer, one.answer);
    assert_string_equal(o->to_client, one.to_client);
    assert_int_equal(o->opened, one.opened);
    if (o->opened)
        assert_memory_equal(&o->dest, &one.dest, sizeof o->dest);
}

static void check_dest(const outcome *o, uint8_t atyp, const char *text)
{
    char got[300];
    assert_true(o->opened);
    assert_int_equal(o->dest.atyp, atyp);
    assert_int_equal(o->dest.network, SV_NET_TCP);
    sv_dest_format(&o->dest, got, sizeof got);
    assert_string_equal(got, text);
}

#define DRIVE(creds, lit, o) drive_both((creds), (lit), sizeof(lit) - 1, (o))

static outcome g_o;

/* ---------- CONNECT ---------- */

static void connect__domain_ipv4_ipv6(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n" AUTH_A "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->principal, 0);
    check_dest(o, SV_ATYP_DOMAIN, "example.com:443");
    assert_string_equal(o->to_client, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_int_equal(o->out_len, 0);
    assert_int_equal(o->unconsumed, 0);

    DRIVE(g_creds, "CONNECT 192.0.2.7:8443 HTTP/1.0\r\n" AUTH_A "\r\n\x16\x03\x01hello", o);
    assert_int_equal(o->rc, 0);
    check_dest(o, SV_ATYP_IPV4, "192.0.2.7:8443");
    assert_int_equal(o->dest.ip[0], 192);
    assert_int_equal(o->out_len, 8);
    assert_memory_equal(o->out, "\x16\x03\x01hello", 8);

    DRIVE(g_creds, "CONNECT [2001:db8::1]:22 HTTP/1.1\r\n" AUTH_A "\r\nSSH-2.0-x\r\n", o);
    assert_int_equal(o->rc, 0);
    check_dest(o, SV_ATYP_IPV6, "[2001:db8::1]:22");
    assert_int_equal(o->dest.ip[0], 0x20);
    assert_int_equal(o->dest.ip[15], 1);
    assert_string_equal(o->out, "SSH-2.0-x\r\n");
}

/* ---------- absolute form ---------- */

static void get__rewritten_exactly(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds,
          "GET http://Example.com:8080/a/b?q=1&r=2 HTTP/1.1\r\n"
          "Host: wrong.example\r\n"
          "User-Agent: curl/8\r\n"
          "Connection: keep-alive, X-Hop\r\n"
          "X-Hop: secret\r\n"
          "Keep-Alive: timeout=5\r\n"
          "Proxy-Connection: keep-alive\r\n" AUTH_A "TE: trailers\r\n"
          "Trailer: X-T\r\n"
          "Upgrade: websocket\r\n"
          "Accept: */*\r\n"
          "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->principal, 0);
    check_dest(o, SV_ATYP_DOMAIN, "Example.com:8080");
    assert_string_equal(o->to_client, "");
    assert_string_equal(o->out, "GET /a/b?q=1&r=2 HTTP/1.1\r\n"
                                "Host: Example.com:8080\r\n"
                                "User-Agent: curl/8\r\n"
                                "Accept: */*\r\n"
                                "Connection: close\r\n\r\n");
}

static void get__host_added_default_port_empty_path(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds, "GET HTTP://example.com HTTP/1.0\r\n" AUTH_A "accept: x\r\n\r\n", o);
    assert_int_equal(o->rc, 0);
    check_dest(o, SV_ATYP_DOMAIN, "example.com:80");
    assert_string_equal(o->out, "GET / HTTP/1.0\r\naccept: x\r\nHost: example.com\r\n"
                                "Connection: close\r\n\r\n");

    DRIVE(g_creds, "HEAD http://10.1.2.3?x=y HTTP/1.1\r\n" AUTH_A "\r\n", o);
    assert_int_equal(o->rc, 0);
    check_dest(o, SV_ATYP_IPV4, "10.1.2.3:80");
    assert_string_equal(o->out, "HEAD /?x=y HTTP/1.1\r\nHost: 10.1.2.3\r\n"
                                "Connection: close\r\n\r\n");

    DRIVE(g_creds, "GET http://[::1]:8080/ HTTP/1.1\r\n" AUTH_A "\r\n", o);
    assert_int_equal(o->rc, 0);
    check_dest(o, SV_ATYP_IPV6, "[::1]:8080");
    assert_string_equal(o->out, "GET / HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n");
}

static void get__connection_tokens_any_case(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds,
          "GET http://example.com/x HTTP/1.1\r\n"
          "x-a: 1\r\n"
          "Connection: ,  X-A ,x-b\r\n"
          "Cookie: c=1\r\n"
          "X-B: 2\r\n"
          "connection: content-length, host, X-C\r\n"
          "Content-Length: 0\r\n"
          "X-C: 3\r\n"
          "X-Ab: kept\r\n"
          "HOST: example.com\r\n" AUTH_A "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_string_equal(o->out, "GET /x HTTP/1.1\r\nCookie: c=1\r\nContent-Length: 0\r\n"
                                "X-Ab: kept\r\nHOST: example.com\r\nConnection: close\r\n\r\n");
}

/* A chunked body (RFC 9112 §7.1) passes to its last chunk and trailers; what follows (a
 * pipelined request with its credentials) is dropped; a malformed framing ends the
 * connection. */
static void post__chunked_body_then_nothing(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds,
          "POST http://example.com/form HTTP/1.1\r\nHost: example.com\r\n" AUTH_A
          "Transfer-Encoding: chunked\r\nConnection: Transfer-Encoding\r\n\r\n"
          "5\r\nhello\r\n0\r\n\r\nGET http://example.com/2 HTTP/1.1\r\n" AUTH_A "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_string_equal(o->out, "POST /form HTTP/1.1\r\nHost: example.com\r\n"
                                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                "5\r\nhello\r\n0\r\n\r\n");
    /* extensions, an upper-case size, trailers */
    DRIVE(g_creds,
          "POST http://example.com/f HTTP/1.1\r\n" AUTH_A "Transfer-Encoding: chunked\r\n\r\n"
          "A;name=v\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nleftover",
          o);
    assert_int_equal(o->rc, 0);
    assert_string_equal(o->out, "POST /f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                "Host: example.com\r\nConnection: close\r\n\r\n"
                                "A;name=v\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n");
    /* no size, a size of 16 digits, no CRLF after the data: the connection ends */
    static const char *const bad[] = {"\r\nxx", "1000000000000000\r\n", "1\r\nab\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char wire[512];
        int n = snprintf(wire, sizeof wire, "POST http://example.com/f HTTP/1.1\r\n" AUTH_A
                         "Transfer-Encoding: chunked\r\n\r\n%s", bad[i]);
        drive_both(g_creds, wire, (size_t)n, o);
        assert_int_equal(o->rc, -EPROTO);
        assert_int_equal(o->policy, SV_PROBE_CLOSE);
    }
}

/* A sized body passes for its Content-Length; what follows it, and anything after a request
 * without a body (a pipelined request with its credentials), never reaches the origin. */
static void post__sized_body_then_nothing(void **state)
{
    (void)state;
    outcome *o = &g_o;
    DRIVE(g_creds,
          "POST http://example.com/f HTTP/1.1\r\n" AUTH_A "Content-Length: 5\r\n\r\n"
          "hello" "GET http://example.com/2 HTTP/1.1\r\n" AUTH_A "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_string_equal(o->out, "POST /f HTTP/1.1\r\nContent-Length: 5\r\n"
                                "Host: example.com\r\nConnection: close\r\n\r\nhello");
    DRIVE(g_creds,
          "GET http://example.com/1 HTTP/1.1\r\n" AUTH_A "\r\n"
          "GET http://example.com/2 HTTP/1.1\r\n" AUTH_A "\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_string_equal(o->out, "GET /1 HTTP/1.1\r\nHost: example.com\r\n"
                                "Connection: close\r\n\r\n");
    assert_int_equal(o->unconsumed, 0);
    DRIVE(g_creds,
          "POST http://example.com/f HTTP/1.1\r\n" AUTH_A "Content-Length: 5x\r\n\r\n", o);
    assert_int_equal(o->rc, -EPROTO);
    DRIVE(g_creds,
          "POST http://example.com/f HTTP/1.1\r\n" AUTH_A
          "Content-Length: 5\r\nContent-Length: 5\r\n\r\n",
          o);
    assert_int_equal(o->rc, -EPROTO);
}

/* ---------- authentication ---------- */

static void auth__refusals_407(void **state)
{
    (void)state;
    outcome *o = &g_o;
    static const char *const bad[] = {
        "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", /* none */
        /* user-a:wrong */
        "GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: Basic dXNlci1hOndyb25n\r\n\r\n",
        /* nobody:user-a */
        CONNECT_A "Proxy-Authorization: Basic bm9ib2R5OnVzZXItYQ==\r\n\r\n",
        /* no colon: "user-a" */
        CONNECT_A "Proxy-Authorization: Basic dXNlci1h\r\n\r\n",
        /* not base64 */
        CONNECT_A "Proxy-Authorization: Basic dXNlci1h*Oj\r\n\r\n",
        /* another scheme */
        CONNECT_A "Proxy-Authorization: Bearer dXNlci1hOnVzZXItYQ==\r\n\r\n",
        /* "pa:ss": name "pa", password "ss", no such user (user 1 is "pa:ss" / "pa:ss") */
        CONNECT_A "Proxy-Authorization: Basic cGE6c3M=\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drive_both(g_creds, bad[i], strlen(bad[i]), o);
        assert_int_equal(o->rc, -EACCES);
        assert_int_equal(o->policy, SV_PROBE_ANSWER);
        assert_string_equal(o->answer, r407);
        assert_int_equal(o->principal, -1);
        assert_false(o->opened);
        assert_int_equal(o->unconsumed, strlen(bad[i])); /* nothing consumed */
    }
}

static void auth__case_colon_and_no_auth(void **state)
{
    (void)state;
    outcome *o = &g_o;
    /* lowercase name and scheme, unpadded base64 of user-a:user-a */
    DRIVE(g_creds,
          CONNECT_A "proxy-authorization:  basic dXNlci1hOnVzZXItYQ\r\n\r\n",
          o);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->principal, 0);
    /* RFC 7617 §2: the first colon splits, so the password keeps its colons: a secret "pa:ss"
     * (name = password = secret) sent as "pa:ss:pa:ss" is name "pa", password "ss:pa:ss",
     * and no user; "user-a:user-a:x" is user-a with password "user-a:x", a wrong one */
    DRIVE(g_creds, "CONNECT a.example:443 HTTP/1.1\r\n" AUTH_COLON "\r\n", o);
    assert_int_equal(o->rc, -EACCES);
    DRIVE(g_creds,
          CONNECT_A "Proxy-Authorization: Basic dXNlci1hOnVzZXItYTp4\r\n\r\n",
          o);
    assert_int_equal(o->rc, -EACCES);

    /* no_auth: no credentials is the one user */
    DRIVE(g_anon, "CONNECT a.example:443 HTTP/1.1\r\n\r\n", o);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->principal, 0);
    /* no_auth: wrong credentials still refused, right ones admitted */
    DRIVE(g_anon, CONNECT_A "Proxy-Authorization: Basic c29sbzpzb2xv\r\n\r\n",
          o);
    assert_int_equal(o->rc, 0);
    DRIVE(g_anon, CONNECT_A "Proxy-Authorization: Basic c29sbzp4\r\n\r\n",
          o);
    assert_int_equal(o->rc, -EACCES);
}

/* ---------- 400, 431 ---------- */

static void refuse__bad_requests_400(void **state)
{
    (void)state;
    outcome *o = &g_o;
    static const char *const bad[] = {
        "GET / HTTP/1.1\r\nHost: example.com\r\n" AUTH_A "\r\n",
        "GET https://example.com/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET ftp://example.com/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://user@example.com/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http:///x HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://example.com:0/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://example.com:65536/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://example.com:/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "CONNECT example.com HTTP/1.1\r\n" AUTH_A "\r\n",
        "CONNECT example.com:99999 HTTP/1.1\r\n" AUTH_A "\r\n",
        "CONNECT [::1:443 HTTP/1.1\r\n" AUTH_A "\r\n",
        "CONNECT [zz::1]:443 HTTP/1.1\r\n" AUTH_A "\r\n",
        "CONNECT http://example.com:443 HTTP/1.1\r\n" AUTH_A "\r\n",
        "OPTIONS * HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/2.0\r\n" AUTH_A "\r\n",
        "GET  http://example.com/ HTTP/1.1\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1 \r\n" AUTH_A "\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nBad Name: x\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\nName : x\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\nNoColon\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\nX: a\r\n folded\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\nX: a\rb\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n" AUTH_A "\r\n",
        "GET http://example.com/ HTTP/1.1\r\n" AUTH_A AUTH_A "\r\n",
        "POST http://example.com/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
            AUTH_A "\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drive_both(g_creds, bad[i], strlen(bad[i]), o);
        if (o->rc != -EPROTO)
            fail_msg("case %zu: rc %d", i, o->rc);
        assert_int_equal(o->policy, SV_PROBE_ANSWER);
        assert_string_equal(o->answer, r400);
        assert_false(o->opened);
    }
    /* a bad request line is refused before the head is complete */
    static const char early[] = "GET / HTTP/1.1\r\nHost: exa";
    drive(g_creds, early, sizeof early - 1, 0, o);
    assert_int_equal(o->rc, -EPROTO);
}

static void refuse__head_too_large_431(void **state)
{
    (void)state;
    outcome *o = &g_o;
    size_t n = SV_HTTP_PROXY_HEAD_MAX + 100;
    char *big = malloc(n + 1);
    strcpy(big, "GET http://example.com/ HTTP/1.1\r\nX-Pad: ");
    memset(big + strlen(big), 'a', n - strlen(big));
    drive(g_creds, big, n, 0, o);
    assert_int_equal(o->rc, -EMSGSIZE);
    assert_int_equal(o->policy, SV_PROBE_ANSWER);
    assert_string_equal(o->answer, r431);
    drive(g_creds, big, n, 1000, o);
    assert_int_equal(o->rc, -EMSGSIZE);
    /* one byte short of the bound still waits */
    drive(g_creds, big, SV_HTTP_PROXY_HEAD_MAX - 1, 0, o);
    assert_int_equal(o->rc, 0);
    assert_int_equal(o->unconsumed, SV_HTTP_PROXY_HEAD_MAX - 1);
    /* a head of exactly the bound is taken */
    size_t pre = strlen(AUTH_A) + 4;
    memcpy(big + SV_HTTP_PROXY_HEAD_MAX - pre, "\r\n" AUTH_A "\r\n", pre);
    drive(g_creds, big, SV_HTTP_PROXY_HEAD_MAX, 0, o);
    assert_int_equal(o->rc, 0);
    assert_true(o->opened);
    free(big);

    /* too many header lines */
    char many[8192] = "GET http://example.com/ HTTP/1.1\r\n" AUTH_A;
    for (int i = 0; i < SV_HTTP_PROXY_FIELDS_MAX; i++)
        strcat(many, "X: y\r\n");
    strcat(many, "\r\n");
    drive_both(g_creds, many, strlen(many), o);
    assert_int_equal(o->rc, -EMSGSIZE);
    assert_string_equal(o->answer, r431);
}

static void wait__incomplete_head_consumes_nothing(void **state)
{
    (void)state;
    outcome *o = &g_o;
    static const char part[] = "CONNECT example.com:443 HTTP/1.1\r\n" AUTH_A;
    drive(g_creds, part, sizeof part - 1, 0, o);
    assert_int_equal(o->rc, 0);
    assert_false(o->opened);
    assert_int_equal(o->unconsumed, sizeof part - 1);
    drive(g_creds, part, sizeof part - 1, 1, o);
    assert_int_equal(o->unconsumed, sizeof part - 1);
}

static void frame__plain_copy(void **state)
{
    (void)state;
    uint8_t out[8];
    assert_int_equal(ops->frame(NULL, g_creds, 0, (const uint8_t *)"abc", 3, out, sizeof out), 3);
    assert_memory_equal(out, "abc", 3);
    assert_int_equal(ops->frame(NULL, g_creds, 0, (const uint8_t *)"abc", 3, out, 2), -EMSGSIZE);
    assert_int_equal(ops->frame_max(1234), 1234);
    assert_true(ops->state_size <= 32);
    assert_int_equal(ops->carry_max, SV_HTTP_PROXY_HEAD_MAX);
    for (int i = 0; i < SV_PROTO_CAP_COUNT; i++) /* only the splice's (test_mixed) */
        if (i == SV_PROTO_CAP_DIRECT)
            assert_non_null(ops->ext[i]);
        else
            assert_null(ops->ext[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(connect__domain_ipv4_ipv6),
        cmocka_unit_test(get__rewritten_exactly),
        cmocka_unit_test(get__host_added_default_port_empty_path),
        cmocka_unit_test(get__connection_tokens_any_case),
        cmocka_unit_test(post__chunked_body_then_nothing),
        cmocka_unit_test(post__sized_body_then_nothing),
        cmocka_unit_test(auth__refusals_407),
        cmocka_unit_test(auth__case_colon_and_no_auth),
        cmocka_unit_test(refuse__bad_requests_400),
        cmocka_unit_test(refuse__head_too_large_431),
        cmocka_unit_test(wait__incomplete_head_consumes_nothing),
        cmocka_unit_test(frame__plain_copy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
