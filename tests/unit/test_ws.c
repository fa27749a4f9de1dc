/*
 * Unit tests: the WebSocket layer (supervisor/transport/ws.c) through its layer ops and the
 * transport chain (supervisor/transport/chain.c). Known answers from tests/unit/vectors/
 * websocket.json (captured from the v2ray 4.34 client, RFC 6455 §1.3 and §5.7); every input is
 * also fed a byte at a time, which must give the same bytes up and down.
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
#include <jansson.h>

#include "supervisor/transport/ws.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static json_t *g_vec;

static int setup(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/websocket.json", top ? top : TOP_SRCDIR);
    json_error_t jerr;
    g_vec = json_load_file(path, 0, &jerr);
    return g_vec == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_vec);
    return 0;
}

static const char *vec_str(const char *path)
{
    json_t *v = g_vec;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok != NULL; tok = strtok(NULL, "."))
        v = json_object_get(v, tok);
    assert_non_null(v);
    return json_string_value(v);
}

static size_t unhex(const char *h, uint8_t *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned b;
        sscanf(h + 2 * i, "%2x", &b);
        out[i] = (uint8_t)b;
    }
    return n;
}

/* ---- a driver: one WebSocket layer in a chain, as conn.c drives it ---- */

typedef struct drv {
    sv_chain ch;
    sv_layer_conf conf[1];
    sv_ws_conf *wc;
    uint8_t up[1 << 21];   /* everything delivered up */
    size_t up_len;
    uint8_t down[1 << 18]; /* everything sent towards TCP */
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
    d->conf[0] = (sv_layer_conf){&sv_ws_layer_ops, d->wc};
    assert_int_equal(sv_chain_open(&d->ch, d->conf, 1), 0);
    return d;
}

static void drv_free(drv *d)
{
    sv_chain_free(&d->ch);
    sv_ws_conf_free(d->wc);
    free(d);
}

/* Feed @p n bytes whole (step 0) or in pieces of @p step; stops at the first error. */
static int drv_feed(drv *d, const uint8_t *p, size_t n, size_t step)
{
    size_t off = 0;
    while (off < n && d->rc == 0) {
        size_t k = step == 0 || step > n - off ? n - off : step;
        d->rc = sv_chain_unwrap(&d->ch, p + off, k, d->stage, drv_alloc, drv_deliver, d);
        off += k;
        drv_take_down(d);
    }
    return d->rc;
}

static int drv_feed_str(drv *d, const char *s, size_t step)
{
    return drv_feed(d, (const uint8_t *)s, strlen(s), step);
}

static const char *k_req = "GET /ws HTTP/1.1\r\nHost: node.test\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n";

/* A masked client frame of @p opcode (fin as given) carrying @p n bytes. */
static size_t client_frame(uint8_t *out, uint8_t b0, const uint8_t *p, size_t n)
{
    static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
    size_t h = 0;
    out[h++] = b0;
    if (n < 126) {
        out[h++] = (uint8_t)(0x80 | n);
    } else if (n <= 0xFFFF) {
        out[h++] = 0x80 | 126;
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            out[h++] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    }
    memcpy(out + h, key, 4);
    h += 4;
    for (size_t i = 0; i < n; i++)
        out[h + i] = p[i] ^ key[i % 4];
    return h + n;
}

static void upgrade(drv *d)
{
    assert_int_equal(drv_feed_str(d, k_req, 0), 0);
    assert_true(sv_chain_status(&d->ch) & SV_LAYER_UP);
    d->down_len = 0;
}

/* ---- handshake ---- */

static void test_rfc_accept(void **state)
{
    (void)state;
    drv *d = drv_new("/ws", NULL);
    assert_int_equal(drv_feed_str(d, k_req, 0), 0);
    d->down[d->down_len] = 0;
    char want[128];
    snprintf(want, sizeof want, "Sec-WebSocket-Accept: %s\r\n",
             vec_str("rfc6455_example.sec_websocket_accept"));
    assert_non_null(strstr((char *)d->down, want));
    assert_int_equal(sv_chain_status(&d->ch), SV_LAYER_UP);
    drv_free(d);
}

/* The captured v2ray handshake and first frame, whole and a byte at a time. */
static void test_capture(void **state)
{
    (void)state;
    for (size_t step = 0; step <= 1; step++) {
        drv *d = drv_new("/ws", "node.test");
        const char *req = vec_str("capture.client_handshake_request");
        assert_int_equal(drv_feed_str(d, req, step), 0);
        const char *resp = vec_str("capture.server_handshake_response");
        assert_int_equal(d->down_len, strlen(resp));
        assert_memory_equal(d->down, resp, strlen(resp));
        uint8_t frames[512], want[512];
        size_t n = unhex(vec_str("capture.client_frames_hex"), frames);
        size_t wn = unhex(vec_str("capture.first_client_frame.payload_unmasked_hex"), want);
        assert_int_equal(drv_feed(d, frames, n, step), 0);
        assert_int_equal(d->up_len, wn);
        assert_memory_equal(d->up, want, wn);
        /* our answer frame */
        uint8_t sf[64];
        size_t sn = unhex(vec_str("capture.server_frame_hex"), sf);
        d->down_len = 0;
        assert_int_equal(sv_chain_wrap(&d->ch, sf + 2, sn - 2), (ssize_t)(sn - 2));
        drv_take_down(d);
        assert_int_equal(d->down_len, sn);
        assert_memory_equal(d->down, sf, sn);
        drv_free(d);
    }
}

/* Headers in another case and order, a Host with a port, token lists. */
static void test_header_forms(void **state)
{
    (void)state;
    drv *d = drv_new("/a/b", "Node.Test");
    assert_int_equal(drv_feed_str(d, "GET /a/b?x=1 HTTP/1.1\r\nsec-websocket-version: 13\r\n"
                                     "HOST: node.test:8443\r\nconnection: keep-alive, Upgrade\r\n"
                                     "upgrade: WebSocket\r\nsec-websocket-key: "
                                     "AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n", 0), 0);
    assert_true(sv_chain_status(&d->ch) & SV_LAYER_UP);
    assert_false(sv_chain_status(&d->ch) & SV_LAYER_REFUSED);
    drv_free(d);
}

/* Every refusal passes the request on as it is, then every later byte (issue 9). */
static void test_refusals(void **state)
{
    (void)state;
    static const char *const reqs[] = {
        "GET /other HTTP/1.1\r\nHost: node.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "GET /ws HTTP/1.1\r\nHost: evil.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "GET /ws HTTP/1.1\r\nHost: node.test\r\n\r\n", /* plain HTTP on the path */
        "GET /ws HTTP/1.1\r\nHost: node.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
        "GET /ws HTTP/1.1\r\nHost: node.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: c2hvcnQ=\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "GET /ws HTTP/1.0\r\nHost: node.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "POST /ws HTTP/1.1\r\nHost: node.test\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", /* a TLS ClientHello on a plain port */
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        for (size_t step = 0; step <= 1; step++) {
            drv *d = drv_new("/ws", "node.test");
            char all[1024];
            snprintf(all, sizeof all, "%sMORE", reqs[i]);
            assert_int_equal(drv_feed_str(d, all, step), 0);
            assert_true(sv_chain_status(&d->ch) & SV_LAYER_REFUSED);
            assert_int_equal(d->down_len, 0); /* no WebSocket answer */
            assert_int_equal(d->up_len, strlen(all));
            assert_memory_equal(d->up, all, strlen(all));
            /* the runtime's 404 passes down as it is */
            assert_int_equal(sv_chain_wrap(&d->ch, (const uint8_t *)"HTTP/1.1 404", 12), 12);
            drv_take_down(d);
            assert_memory_equal(d->down, "HTTP/1.1 404", 12);
            drv_free(d);
        }
    }
}

static void test_head_bound(void **state)
{
    (void)state;
    drv *d = drv_new("/ws", NULL);
    char *big = malloc(SV_WS_HEAD_MAX + 100);
    assert_non_null(big);
    memcpy(big, "GET /ws HTTP/1.1\r\nX: ", 21);
    memset(big + 21, 'a', SV_WS_HEAD_MAX + 100 - 21);
    assert_int_equal(drv_feed(d, (uint8_t *)big, SV_WS_HEAD_MAX + 100, 0), 0);
    assert_true(sv_chain_status(&d->ch) & SV_LAYER_REFUSED);
    assert_int_equal(d->up_len, SV_WS_HEAD_MAX + 100);
    free(big);
    drv_free(d);
}

/* §8.3: the path's ?ed= is not part of it; Sec-WebSocket-Protocol is the stream's start and is
 * echoed; then frames follow. */
static void test_early_data(void **state)
{
    (void)state;
    for (size_t step = 0; step <= 1; step++) {
        drv *d = drv_new("/ws?ed=2048", NULL);
        /* base64url("hello, early world?>") without padding */
        const char *req = "GET /ws?ed=2048 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          "Sec-WebSocket-Version: 13\r\n"
                          "Sec-WebSocket-Protocol: aGVsbG8sIGVhcmx5IHdvcmxkPz4\r\n\r\n";
        uint8_t all[1024], fr[64];
        size_t rn = strlen(req);
        memcpy(all, req, rn);
        size_t fn = client_frame(fr, 0x82, (const uint8_t *)"+more", 5);
        memcpy(all + rn, fr, fn);
        assert_int_equal(drv_feed(d, all, rn + fn, step), 0);
        d->down[d->down_len] = 0;
        assert_non_null(strstr((char *)d->down,
                               "Sec-WebSocket-Protocol: aGVsbG8sIGVhcmx5IHdvcmxkPz4\r\n"));
        assert_int_equal(d->up_len, 25);
        assert_memory_equal(d->up, "hello, early world?>+more", 25);
        drv_free(d);
    }
}

/* ---- frames ---- */

/* RFC 6455 §5.7: a fragmented text message with a ping between its fragments, a 256-byte and a
 * 65536-byte binary frame, whole and byte at a time. */
static void test_frames(void **state)
{
    (void)state;
    static uint8_t in[70000 + 64 * 4], big[65536], want[65536 + 256 + 5];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 31 + 7);
    size_t n = 0;
    n += client_frame(in + n, 0x01, (const uint8_t *)"Hel", 3);
    n += client_frame(in + n, 0x89, (const uint8_t *)"Hello", 5);
    n += client_frame(in + n, 0x80, (const uint8_t *)"lo", 2);
    n += client_frame(in + n, 0x82, big, 256);
    n += client_frame(in + n, 0x82, big, 65536);
    n += client_frame(in + n, 0x82, big, 0);
    memcpy(want, "Hello", 5);
    memcpy(want + 5, big, 256);
    memcpy(want + 261, big, 65536);
    for (size_t step = 0; step <= 1; step++) {
        drv *d = drv_new("/ws", NULL);
        upgrade(d);
        assert_int_equal(drv_feed(d, in, n, step), 0);
        assert_int_equal(d->up_len, sizeof want);
        assert_memory_equal(d->up, want, sizeof want);
        uint8_t pong[16];
        size_t pn = unhex("890548656c6c6f", pong); /* the ping's payload, opcode A, unmasked */
        pong[0] = 0x8a;
        assert_int_equal(d->down_len, pn);
        assert_memory_equal(d->down, pong, pn);
        drv_free(d);
    }
}

/* Server frames: the shortest length forms of the vectors. */
static void test_server_headers(void **state)
{
    (void)state;
    static uint8_t payload[65536];
    static const struct {
        size_t n;
        const char *hdr;
    } cases[] = {{256, "827e0100"}, {65536, "827f0000000000010000"}, {125, "827d"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        drv *d = drv_new("/ws", NULL);
        upgrade(d);
        assert_int_equal(sv_chain_wrap(&d->ch, payload, cases[i].n), (ssize_t)cases[i].n);
        drv_take_down(d);
        uint8_t h[16];
        size_t hn = unhex(cases[i].hdr, h);
        assert_int_equal(d->down_len, hn + cases[i].n);
        assert_memory_equal(d->down, h, hn);
        drv_free(d);
    }
}

/* The close handshake: the peer's Close is EOF; our end echoes its code (or 1000). */
static void test_close(void **state)
{
    (void)state;
    drv *d = drv_new("/ws", NULL);
    upgrade(d);
    uint8_t fr[32], code[2] = {0x03, 0xe9}; /* 1001 */
    size_t n = client_frame(fr, 0x88, code, 2);
    assert_int_equal(drv_feed(d, fr, n, 0), 0);
    assert_true(sv_chain_status(&d->ch) & SV_LAYER_EOF);
    n = client_frame(fr, 0x82, (const uint8_t *)"late", 4); /* ignored after Close */
    assert_int_equal(drv_feed(d, fr, n, 0), 0);
    assert_int_equal(d->up_len, 0);
    assert_int_equal(sv_chain_shutdown(&d->ch), 0);
    drv_take_down(d);
    uint8_t want[4];
    unhex("880203e9", want);
    assert_int_equal(d->down_len, 4);
    assert_memory_equal(d->down, want, 4);
    assert_int_equal(sv_chain_wrap(&d->ch, (const uint8_t *)"x", 1), -EPIPE);
    drv_free(d);

    d = drv_new("/ws", NULL); /* our end first: a normal closure */
    upgrade(d);
    assert_int_equal(sv_chain_shutdown(&d->ch), 0);
    drv_take_down(d);
    uint8_t normal[4];
    unhex("880203e8", normal); /* the vectors' "server close 1000" */
    assert_int_equal(d->down_len, 4);
    assert_memory_equal(d->down, normal, 4);
    drv_free(d);
}

/* Every protocol error fails the layer with a pending Close of the right code. */
static void test_errors(void **state)
{
    (void)state;
    static uint8_t big_hdr[16];
    size_t big_n = 0;
    big_hdr[big_n++] = 0x82;
    big_hdr[big_n++] = 0x80 | 127;
    uint64_t too_big = SV_WS_FRAME_MAX + 1;
    for (int i = 0; i < 8; i++)
        big_hdr[big_n++] = (uint8_t)(too_big >> (56 - 8 * i));
    memcpy(big_hdr + big_n, "\1\2\3\4", 4);
    big_n += 4;
    static const struct {
        const char *hex;
        int rc;
        const char *close;
    } cases[] = {
        {"810548656c6c6f", -EPROTO, "880203ea"},                 /* unmasked client frame */
        {"c28037fa213d", -EPROTO, "880203ea"},                   /* RSV1 set */
        {"838037fa213d", -EPROTO, "880203ea"},                   /* opcode 3 */
        {"808037fa213d", -EPROTO, "880203ea"},                   /* continuation without start */
        {"09 8037fa213d", -EPROTO, "880203ea"},                  /* fragmented ping */
        {"89fe007e37fa213d", -EPROTO, "880203ea"},               /* control frame of 126 bytes */
        {"028037fa213d828037fa213d", -EPROTO, "880203ea"},       /* new message inside another */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] + 1; i++) {
        for (size_t step = 0; step <= 1; step++) {
            drv *d = drv_new("/ws", NULL);
            upgrade(d);
            uint8_t in[64], want[8];
            size_t n;
            int rc;
            const char *close;
            if (i < sizeof cases / sizeof cases[0]) {
                char hex[64];
                size_t h = 0;
                for (const char *p = cases[i].hex; *p; p++)
                    if (*p != ' ')
                        hex[h++] = *p;
                hex[h] = 0;
                n = unhex(hex, in);
                rc = cases[i].rc;
                close = cases[i].close;
            } else {
                memcpy(in, big_hdr, big_n);
                n = big_n;
                rc = -EMSGSIZE;
                close = "880203f1";
            }
            assert_int_equal(drv_feed(d, in, n, step), rc);
            size_t wn = unhex(close, want);
            assert_int_equal(d->down_len, wn);
            assert_memory_equal(d->down, want, wn);
            assert_int_equal(sv_chain_status(&d->ch) & SV_LAYER_UP, 0);
            assert_true(sv_chain_wrap(&d->ch, (const uint8_t *)"x", 1) < 0);
            drv_free(d);
        }
    }
}

/* Backpressure: wrap takes at most SV_WS_OUT_MAX pending bytes; before the upgrade, nothing. */
static void test_backpressure(void **state)
{
    (void)state;
    static uint8_t p[200000];
    drv *d = drv_new("/ws", NULL);
    assert_int_equal(sv_chain_wrap(&d->ch, p, 10), -ENOTCONN);
    upgrade(d);
    ssize_t a = sv_chain_wrap(&d->ch, p, sizeof p);
    assert_int_equal(a, SV_WS_OUT_MAX - 10);
    assert_int_equal(sv_chain_wrap(&d->ch, p, sizeof p), 0);
    drv_take_down(d);
    assert_int_equal(d->down_len, SV_WS_OUT_MAX);
    drv_free(d);
}

/* ---- two layers: WebSocket over a stand-in lower layer ---- */

/* An identity layer that moves at most 7 bytes per unwrap and holds at most 100 bytes of
 * output, so that the chain's loops, stage buffer and pump run in small pieces. */
typedef struct slow {
    uint8_t out[100];
    size_t len;
    bool eof_seen;
} slow;

static int slow_open(const void *conf, void **st)
{
    (void)conf;
    *st = calloc(1, sizeof(slow));
    return *st != NULL ? 0 : -ENOMEM;
}
static void slow_free(void *st) { free(st); }
static ssize_t slow_unwrap(void *st, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                           size_t cap)
{
    (void)st;
    size_t k = n < 7 ? n : 7;
    if (k > cap)
        k = cap;
    memcpy(out, in, k);
    *used = k;
    return (ssize_t)k;
}
static ssize_t slow_wrap(void *st, const uint8_t *p, size_t n)
{
    slow *s = st;
    size_t k = n < sizeof s->out - s->len ? n : sizeof s->out - s->len;
    memcpy(s->out + s->len, p, k);
    s->len += k;
    return (ssize_t)k;
}
static int slow_shutdown(void *st)
{
    ((slow *)st)->eof_seen = true;
    return 0;
}
static const uint8_t *slow_peek(const void *st, size_t *len)
{
    const slow *s = st;
    *len = s->len;
    return s->out;
}
static void slow_consume(void *st, size_t n)
{
    slow *s = st;
    memmove(s->out, s->out + n, s->len - n);
    s->len -= n;
}
static unsigned slow_status(const void *st)
{
    (void)st;
    return SV_LAYER_UP;
}
static const sv_layer_ops slow_ops = {"slow", slow_open, slow_free, slow_unwrap, slow_wrap,
                                      slow_shutdown, slow_peek, slow_consume, slow_status, NULL,
                                      NULL, NULL, NULL};

/* The same bytes come up through two layers as through one, whole and byte at a time; bytes
 * going down pass the lower layer's bound through the pump; shutdown ends both, top first. */
static void test_two_layers(void **state)
{
    (void)state;
    static uint8_t in[4096], big[3000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 13);
    size_t n = strlen(k_req);
    memcpy(in, k_req, n);
    n += client_frame(in + n, 0x02, big, 1000);
    n += client_frame(in + n, 0x89, (const uint8_t *)"pi", 2);
    n += client_frame(in + n, 0x80, big + 1000, 2000);
    for (size_t step = 0; step <= 1; step++) {
        drv *d = drv_new("/ws", NULL);
        sv_chain_free(&d->ch);
        sv_layer_conf two[2] = {{&slow_ops, NULL}, {&sv_ws_layer_ops, d->wc}};
        assert_int_equal(sv_chain_open(&d->ch, two, 2), 0);
        size_t off = 0;
        while (off < n) { /* drain the lower layer's output as TCP would, between reads */
            size_t k = step == 0 ? n : 1;
            if (k > n - off)
                k = n - off;
            assert_int_equal(sv_chain_unwrap(&d->ch, in + off, k, d->stage, drv_alloc,
                                             drv_deliver, d), 0);
            off += k;
            for (int i = 0; i < 10; i++)
                drv_take_down(d);
        }
        assert_int_equal(d->up_len, sizeof big);
        assert_memory_equal(d->up, big, sizeof big);
        assert_true(d->down_len > 100); /* the 101 answer passed the 100-byte bound in pieces */
        assert_memory_equal(d->down, "HTTP/1.1 101 ", 13);
        assert_memory_equal(d->down + d->down_len - 4, "\x8a\x02pi", 4);
        d->down_len = 0;
        size_t sent = 0;
        while (sent < sizeof big) {
            ssize_t a = sv_chain_wrap(&d->ch, big + sent, sizeof big - sent);
            assert_true(a >= 0);
            sent += (size_t)a;
            drv_take_down(d);
        }
        for (int i = 0; i < 100; i++)
            drv_take_down(d);
        assert_int_equal(d->down_len, 4 + sizeof big); /* one 126-form header per wrap */
        assert_int_equal(sv_chain_shutdown(&d->ch), 0);
        for (int i = 0; i < 10; i++)
            drv_take_down(d);
        assert_memory_equal(d->down + d->down_len - 4, "\x88\x02\x03\xe8", 4);
        assert_true(((slow *)d->ch.state[0])->eof_seen);
        drv_free(d);
    }
}

/* nodes[].trusted_forwarders: the upgraded layer keeps the address a proxy named (right-most
 * X-Forwarded-For element of the last line, else X-Real-IP); a chain asks each layer, past one
 * without the op; a refused request names none. */
static void test_forwarded(void **state)
{
    (void)state;
    static const char req[] =
        "GET /ws HTTP/1.1\r\nHost: node.test\r\nX-Forwarded-For: 10.0.0.1\r\n"
        "X-Forwarded-For: 10.0.0.2, 198.51.100.4:5123\r\nX-Real-IP: 192.0.2.9\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    for (size_t step = 0; step <= 1; step++) {
        drv *d = drv_new("/ws", NULL);
        assert_null(sv_chain_forwarded(&d->ch)); /* nothing yet */
        assert_int_equal(drv_feed_str(d, req, step), 0);
        assert_true(sv_chain_status(&d->ch) & SV_LAYER_UP);
        assert_string_equal(sv_chain_forwarded(&d->ch), "198.51.100.4:5123");
        drv_free(d);
    }
    drv *d = drv_new("/ws", NULL);
    sv_chain_free(&d->ch);
    sv_layer_conf two[2] = {{&slow_ops, NULL}, {&sv_ws_layer_ops, d->wc}};
    assert_int_equal(sv_chain_open(&d->ch, two, 2), 0);
    assert_int_equal(drv_feed_str(d, req, 0), 0);
    assert_string_equal(sv_chain_forwarded(&d->ch), "198.51.100.4:5123");
    drv_free(d);
    d = drv_new("/other", NULL); /* refused: passed on, no address */
    assert_int_equal(drv_feed_str(d, req, 0), 0);
    assert_true(sv_chain_status(&d->ch) & SV_LAYER_REFUSED);
    assert_null(sv_chain_forwarded(&d->ch));
    drv_free(d);
    d = drv_new("/ws", NULL); /* no header: none */
    upgrade(d);
    assert_null(sv_chain_forwarded(&d->ch));
    drv_free(d);
}

static void test_conf(void **state)
{
    (void)state;
    assert_null(sv_ws_conf_new("ws", NULL));
    assert_null(sv_ws_conf_new(NULL, NULL));
    sv_ws_conf *c = sv_ws_conf_new("/p?ed=2048", "");
    assert_non_null(c);
    assert_string_equal(c->path, "/p");
    assert_null(c->host);
    sv_ws_conf_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc_accept),     cmocka_unit_test(test_capture),
        cmocka_unit_test(test_header_forms),   cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_head_bound),     cmocka_unit_test(test_early_data),
        cmocka_unit_test(test_frames),         cmocka_unit_test(test_server_headers),
        cmocka_unit_test(test_close),          cmocka_unit_test(test_errors),
        cmocka_unit_test(test_backpressure),   cmocka_unit_test(test_conf),
        cmocka_unit_test(test_two_layers),     cmocka_unit_test(test_forwarded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
