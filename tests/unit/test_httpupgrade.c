/*
 * Unit tests: the HTTPUpgrade layer (supervisor/transport/httpupgrade.c, issue 10, PROTOCOLS-2.md
 * §4) through the transport chain. Requests as Xray (§4.1, browser-like headers, early data
 * after the request) and sing-box send them; every input is also fed a byte at a time, which
 * must give the same bytes up and down.
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

#include "supervisor/transport/http_head.h"
#include "supervisor/transport/httpupgrade.h"
#include "supervisor/transport/ws.h"

/* §4.2: the answer Xray's client compares whole */
static const char k_101[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                            "Upgrade: websocket\r\n\r\n";

static const char k_xray[] =
    "GET /up HTTP/1.1\r\nHost: node.test\r\nUser-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; "
    "x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\n"
    "Sec-CH-UA: \"Chromium\";v=\"131\"\r\nSec-CH-UA-Mobile: ?0\r\nDNT: 1\r\n"
    "Accept-Language: en-US,en;q=0.9\r\nSec-Fetch-Mode: websocket\r\nSec-Fetch-Dest: empty\r\n"
    "Sec-Fetch-Site: same-origin\r\nCache-Control: no-cache\r\nPragma: no-cache\r\n"
    "Accept: */*\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";

static const char k_singbox[] = "GET /up HTTP/1.1\r\nHost: node.test:8443\r\n"
                                "User-Agent: Go-http-client/1.1\r\nConnection: Upgrade\r\n"
                                "Upgrade: websocket\r\n\r\n";

typedef struct drv {
    sv_chain ch;
    sv_layer_conf conf[1];
    sv_ws_conf *wc;
    uint8_t up[1 << 18];
    size_t up_len;
    uint8_t down[1 << 18];
    size_t down_len;
    uint8_t buf[4096];
    uint8_t stage[SV_CHAIN_STAGE_BYTES];
    int rc;
} drv;

static uint8_t *drv_alloc(void *ctx, size_t *cap)
{
    drv *d = ctx;
    *cap = sizeof d->buf;
    return d->buf;
}

static bool drv_deliver(void *ctx, uint8_t *p, size_t n)
{
    drv *d = ctx;
    assert_true(d->up_len + n <= sizeof d->up);
    memcpy(d->up + d->up_len, p, n);
    d->up_len += n;
    return true;
}

static void drv_take_down(drv *d)
{
    size_t len;
    assert_int_equal(sv_chain_pump(&d->ch), 0);
    const uint8_t *p = sv_chain_out_peek(&d->ch, &len);
    assert_true(d->down_len + len <= sizeof d->down);
    if (len > 0)
        memcpy(d->down + d->down_len, p, len);
    d->down_len += len;
    sv_chain_out_consume(&d->ch, len);
}

static drv *drv_new(const char *path, const char *host)
{
    drv *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->wc = sv_ws_conf_new(path, host);
    assert_non_null(d->wc);
    d->conf[0] = (sv_layer_conf){&sv_httpupgrade_layer_ops, d->wc};
    assert_int_equal(sv_chain_open(&d->ch, d->conf, 1), 0);
    return d;
}

static void drv_free(drv *d)
{
    sv_chain_free(&d->ch);
    sv_ws_conf_free(d->wc);
    free(d);
}

/* Feed @p n bytes whole (step 0) or in pieces of @p step. */
static int drv_feed(drv *d, const void *p, size_t n, size_t step)
{
    size_t off = 0;
    while (off < n && d->rc == 0) {
        size_t k = step == 0 || step > n - off ? n - off : step;
        d->rc = sv_chain_unwrap(&d->ch, (const uint8_t *)p + off, k, d->stage, drv_alloc,
                                drv_deliver, d);
        off += k;
        drv_take_down(d);
    }
    return d->rc;
}

/* Run @p req followed by @p tail through a layer serving @p path / @p host, whole and a byte
 * at a time; both runs must agree. @return the whole run (free with drv_free). */
static drv *run_both(const char *path, const char *host, const char *req, const void *tail,
                     size_t tail_len)
{
    size_t rl = strlen(req), n = rl + tail_len;
    uint8_t *in = malloc(n);
    assert_non_null(in);
    memcpy(in, req, rl);
    if (tail_len > 0)
        memcpy(in + rl, tail, tail_len);
    drv *whole = drv_new(path, host), *bytes = drv_new(path, host);
    assert_int_equal(drv_feed(whole, in, n, 0), 0);
    assert_int_equal(drv_feed(bytes, in, n, 1), 0);
    assert_int_equal(sv_chain_status(&whole->ch), sv_chain_status(&bytes->ch));
    assert_int_equal(whole->up_len, bytes->up_len);
    assert_memory_equal(whole->up, bytes->up, whole->up_len);
    assert_int_equal(whole->down_len, bytes->down_len);
    assert_memory_equal(whole->down, bytes->down, whole->down_len);
    drv_free(bytes);
    free(in);
    return whole;
}

static void assert_upgraded(drv *d, const void *tail, size_t tail_len)
{
    assert_int_equal(sv_chain_status(&d->ch), SV_LAYER_UP);
    assert_int_equal(d->down_len, strlen(k_101));
    assert_memory_equal(d->down, k_101, d->down_len);
    assert_int_equal(d->up_len, tail_len);
    if (tail_len > 0)
        assert_memory_equal(d->up, tail, tail_len);
}

/* Xray with early data (§4.3): the VLESS request follows the HTTP request at once. */
static void xray_request_with_early_data_upgrades(void **state)
{
    (void)state;
    static const uint8_t early[] = {0x00, 0x27, 0x84, 0x87, 0x39, 0x7e, 0x62, 0x41, 0x38,
                                    0x9f, 0xd3, 0x09, 0x8a, 0x63, 0x96, 0x4b, 0x6b, 0x00,
                                    0x01, 0x01, 0xbb, 0x01, 127, 0, 0, 1, 'h', 'i'};
    drv *d = run_both("/up", "node.test", k_xray, early, sizeof early);
    assert_upgraded(d, early, sizeof early);
    drv_free(d);
    d = run_both("/up?ed=2048", NULL, k_xray, NULL, 0); /* the query is not the path */
    assert_upgraded(d, NULL, 0);
    drv_free(d);
}

/* sing-box waits for the 101; then bytes pass raw both ways (no framing). */
static void singbox_request_then_raw_bytes_both_ways(void **state)
{
    (void)state;
    drv *d = run_both("/up", "NODE.test", k_singbox, NULL, 0); /* Host: case, port ignored */
    assert_upgraded(d, NULL, 0);
    d->down_len = 0;
    uint8_t big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7);
    assert_int_equal(drv_feed(d, big, sizeof big, 0), 0);
    assert_int_equal(d->up_len, sizeof big);
    assert_memory_equal(d->up, big, sizeof big);
    /* wrap is bounded: SV_HU_OUT_MAX now, the rest after the queue drains */
    ssize_t a = sv_chain_wrap(&d->ch, big, sizeof big);
    assert_int_equal(a, SV_HU_OUT_MAX);
    drv_take_down(d);
    assert_int_equal(sv_chain_wrap(&d->ch, big + a, sizeof big - (size_t)a),
                     (ssize_t)(sizeof big - (size_t)a));
    drv_take_down(d);
    assert_int_equal(d->down_len, sizeof big);
    assert_memory_equal(d->down, big, sizeof big);
    assert_int_equal(sv_chain_shutdown(&d->ch), 0);
    drv_free(d);
}

/* §4.2 checks: anything else is refused and passes up whole (404 or fallback above), nothing
 * answered. */
static void other_requests_are_refused_and_passed_through(void **state)
{
    (void)state;
    static const char *bad[] = {
        "GET /upx HTTP/1.1\r\nHost: node.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "GET /up HTTP/1.1\r\nHost: other.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "GET /up HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", /* no Host */
        "GET /up HTTP/1.1\r\nHost: node.test\r\nConnection: close\r\nUpgrade: websocket\r\n\r\n",
        "GET /up HTTP/1.1\r\nHost: node.test\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        "POST /up HTTP/1.1\r\nHost: node.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "GET /up HTTP/1.0\r\nHost: node.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        /* a real WebSocket request (sing-box refuses it too) */
        "GET /up HTTP/1.1\r\nHost: node.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drv *d = run_both("/up", "node.test", bad[i], "after", 5);
        assert_int_equal(sv_chain_status(&d->ch), SV_LAYER_UP | SV_LAYER_REFUSED);
        assert_int_equal(d->down_len, 0);
        assert_int_equal(d->up_len, strlen(bad[i]) + 5);
        assert_memory_equal(d->up, bad[i], strlen(bad[i]));
        assert_memory_equal(d->up + strlen(bad[i]), "after", 5);
        drv_free(d);
    }
}

/* A head that does not end within SV_HU_HEAD_MAX bytes is refused and passed up whole. */
static void oversized_head_is_refused(void **state)
{
    (void)state;
    size_t n = SV_HU_HEAD_MAX + 100;
    char *req = malloc(n + 1);
    assert_non_null(req);
    memset(req, 'a', n);
    memcpy(req, "GET /up HTTP/1.1\r\nX: ", 21);
    req[n] = '\0';
    drv *d = run_both("/up", NULL, req, NULL, 0);
    assert_int_equal(sv_chain_status(&d->ch), SV_LAYER_UP | SV_LAYER_REFUSED);
    assert_int_equal(d->up_len, n);
    assert_memory_equal(d->up, req, n);
    assert_int_equal(d->down_len, 0);
    drv_free(d);
    free(req);
}

/* Nothing is sent or wrapped before the request has been read. */
static void no_wrap_before_the_upgrade(void **state)
{
    (void)state;
    drv *d = drv_new("/up", NULL);
    assert_int_equal(drv_feed(d, "GET /up HTTP/1.1\r\n", 18, 0), 0);
    assert_int_equal(sv_chain_status(&d->ch), 0);
    assert_int_equal(d->up_len, 0);
    assert_int_equal(sv_chain_wrap(&d->ch, (const uint8_t *)"x", 1), -ENOTCONN);
    drv_free(d);
}

/* The address a forwarding proxy named: X-Forwarded-For's right-most element of its last line,
 * else X-Real-IP; kept by the layer once upgraded (nodes[].trusted_forwarders). */
static void forwarded_headers_are_kept(void **state)
{
    (void)state;
    static const char two[] = "GET /up HTTP/1.1\r\nHost: node.test\r\nX-Real-IP: 198.51.100.1\r\n"
                              "x-forwarded-for: 10.9.9.9, 192.0.2.1\r\n"
                              "X-Forwarded-For: 10.8.8.8 ,\t[2001:db8::7]:4433 \r\n"
                              "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    sv_http_upgrade_req r;
    char out[SV_HTTP_FORWARDED_MAX];
    assert_true(sv_http_parse_upgrade(two, strlen(two), &r));
    assert_true(r.has_xff && r.has_real_ip);
    assert_true(sv_http_forwarded(&r, out));
    assert_string_equal(out, "[2001:db8::7]:4433");
    drv *d = run_both("/up", "node.test", two, NULL, 0);
    assert_upgraded(d, NULL, 0);
    assert_string_equal(sv_chain_forwarded(&d->ch), "[2001:db8::7]:4433");
    drv_free(d);
    static const char real[] = "GET /up HTTP/1.1\r\nX-Real-IP:  198.51.100.1\r\n"
                               "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    assert_true(sv_http_parse_upgrade(real, strlen(real), &r));
    assert_true(sv_http_forwarded(&r, out));
    assert_string_equal(out, "198.51.100.1");
    d = run_both("/up", NULL, k_singbox, NULL, 0); /* no header: none */
    assert_null(sv_chain_forwarded(&d->ch));
    drv_free(d);
    char longv[256];
    snprintf(longv, sizeof longv, "GET / HTTP/1.1\r\nX-Forwarded-For: %070d\r\n\r\n", 1);
    assert_true(sv_http_parse_upgrade(longv, strlen(longv), &r));
    assert_false(sv_http_forwarded(&r, out)); /* does not fit: none */
    assert_string_equal(out, "");
    static const char empty[] = "GET / HTTP/1.1\r\nX-Forwarded-For: 10.0.0.1,\r\n\r\n";
    assert_true(sv_http_parse_upgrade(empty, strlen(empty), &r));
    assert_false(sv_http_forwarded(&r, out)); /* the right-most element is empty */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xray_request_with_early_data_upgrades),
        cmocka_unit_test(singbox_request_then_raw_bytes_both_ways),
        cmocka_unit_test(other_requests_are_refused_and_passed_through),
        cmocka_unit_test(oversized_head_is_refused),
        cmocka_unit_test(no_wrap_before_the_upgrade),
        cmocka_unit_test(forwarded_headers_are_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
