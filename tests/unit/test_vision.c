/*
 * XTLS Vision (issue 11, PROTOCOLS-2.md §2): the flow rules (§2.2), the frame format and the
 * receiver (§2.3, §2.4; the §2.8 worked example), the sender's rules (§2.5), and the VLESS core
 * over them (request, un-padding, framing towards the client, the direct bits of §2.6).
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

#include "supervisor/proto/vision.h"
#include "supervisor/proto/vless.h"

static const sv_proto_ops *ops = &sv_vless_ops;

/* §2.8: the user 00112233-4455-6677-8899-aabbccddeeff */
static const uint8_t k_uuid[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                   0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
static char k_secret[] = "00112233-4455-6677-8899-aabbccddeeff";

/* §2.8's request: TCP to example.com:443 with the Vision addons, then one frame "hello" with 3
 * bytes of padding. */
static const uint8_t k_example[] = {
    0x00, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
    0xee, 0xff, 0x12, 0x0a, 0x10, 'x', 't', 'l', 's', '-', 'r', 'p', 'r', 'x', '-', 'v', 'i',
    's', 'i', 'o', 'n', 0x01, 0x01, 0xbb, 0x02, 0x0b, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.',
    'c', 'o', 'm',
    /* frame 1 */
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
    0xff, 0x00, 0x00, 0x05, 0x00, 0x03, 'h', 'e', 'l', 'l', 'o', 0x00, 0x00, 0x00};
#define EXAMPLE_HEADER 52

static void *creds_for(bool vision)
{
    sv_user u = {.id = 1, .secret = k_secret};
    sv_user_set set = {.tag = "users", .users = &u, .n_users = 1};
    sv_inbound_spec in = {.tag = "vr", .reality = {.vision = vision}};
    void *creds = NULL;
    sv_error err = {0};
    assert_int_equal(ops->creds_new(&in, &set, &creds, &err), 0);
    return creds;
}

static void *conn_new(void)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    return st;
}

static void conn_free(void *st)
{
    ops->deinit(st);
    free(st);
}

/* ---------- flow rules (§2.2) ---------- */

static void flow_rules__xray_table(void **state)
{
    (void)state;
    bool framed;
    static const uint8_t xudp[7] = {0, 0, 0, 0, 1, 1, 2};  /* session 0, New, network UDP */
    static const uint8_t tcpmux[7] = {0, 0, 0, 1, 1, 1, 1}; /* a TCP session */
    /* vision account, vision request */
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_VISION, 2, NULL, 0, &framed),
                     -EPROTONOSUPPORT);
    assert_string_equal(sv_vision_strerror(-EPROTONOSUPPORT, true, SV_VISION_REQ_VISION),
                        "xtls-rprx-vision doesn't support UDP");
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_VISION, 1, NULL, 0, &framed), 1);
    assert_true(framed);
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_VISION, 3, NULL, 0, &framed), 1);
    assert_true(framed);
    /* vision account, empty request flow */
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_NONE, 1, NULL, 0, &framed), -EPERM);
    assert_string_equal(sv_vision_strerror(-EPERM, true, SV_VISION_REQ_NONE),
                        "client flow is empty");
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_NONE, 3, tcpmux, 7, &framed), -EPERM);
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_NONE, 3, xudp, 6, &framed), 0);
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_NONE, 3, xudp, 7, &framed), 1);
    assert_false(framed);
    assert_int_equal(sv_vision_check(true, SV_VISION_REQ_NONE, 2, NULL, 0, &framed), 1);
    assert_false(framed);
    /* no flow on the account */
    for (uint8_t cmd = 1; cmd <= 3; cmd++) {
        assert_int_equal(sv_vision_check(false, SV_VISION_REQ_VISION, cmd, xudp, 7, &framed),
                         -EPERM);
        assert_int_equal(sv_vision_check(false, SV_VISION_REQ_NONE, cmd, tcpmux, 7, &framed), 1);
        assert_false(framed);
        assert_int_equal(sv_vision_check(true, SV_VISION_REQ_OTHER, cmd, xudp, 7, &framed),
                         -EPROTONOSUPPORT);
    }
    assert_string_equal(sv_vision_strerror(-EPERM, false, SV_VISION_REQ_VISION),
                        "not able to use the flow");
    assert_string_equal(sv_vision_strerror(-EPROTONOSUPPORT, true, SV_VISION_REQ_OTHER),
                        "unknown request flow");
}

/* The rules through the VLESS core: a refusal after the UUID closes (no fallback, no drain). */
static void flow_rules__through_the_core(void **state)
{
    (void)state;
    void *vc = creds_for(true);
    uint8_t req[64];
    sv_effects fx;
    /* TCP without flow on a Vision node */
    size_t n = 0;
    req[n++] = 0;
    memcpy(req + n, k_uuid, 16), n += 16;
    req[n++] = 0;                                      /* no addons */
    memcpy(req + n, "\x01\x00\x50\x01\x7f\x00\x00\x01", 8), n += 8;
    void *st = conn_new();
    assert_int_equal(ops->feed(st, vc, req, n, &fx), -EPERM);
    assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
    assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
    conn_free(st);
    /* UDP with the Vision flow */
    memcpy(req, k_example, EXAMPLE_HEADER);
    req[36] = 0x02;
    st = conn_new();
    assert_int_equal(ops->feed(st, vc, req, EXAMPLE_HEADER, &fx), -EPROTONOSUPPORT);
    conn_free(st);
    /* XUDP (Mux without flow) on a Vision node: accepted, not framed */
    n = 0;
    req[n++] = 0;
    memcpy(req + n, k_uuid, 16), n += 16;
    req[n++] = 0;
    req[n++] = 0x03;
    static const uint8_t xudp_new[] = {0x00, 0x0c, 0x00, 0x00, 0x01, 0x00, 0x02,
                                       0x00, 0x35, 0x01, 0x7f, 0x00, 0x00, 0x01};
    memcpy(req + n, xudp_new, sizeof xudp_new), n += sizeof xudp_new;
    st = conn_new();
    assert_int_equal(ops->feed(st, vc, req, n - 8, &fx), 0); /* network byte not yet there */
    assert_int_equal(fx.n, 0);
    assert_true(ops->feed(st, vc, req, n, &fx) > 0);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_true(fx.v[0].multiplexed);
    assert_int_equal(sv_proto_direct(ops)->direct(st), 0);
    conn_free(st);
    ops->creds_free(vc);
}

/* ---------- receiver (§2.4) and the §2.8 example ---------- */

static void worked_example__through_the_core(void **state)
{
    (void)state;
    void *vc = creds_for(true);
    void *st = conn_new();
    uint8_t buf[sizeof k_example];
    memcpy(buf, k_example, sizeof buf);
    sv_effects fx;
    assert_int_equal(ops->feed(st, vc, buf, sizeof buf, &fx), (ssize_t)sizeof buf);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[0].principal, 0);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_string_equal(fx.v[1].dest.host, "example.com");
    assert_int_equal(fx.v[1].dest.port, 443);
    assert_int_equal(fx.v[2].kind, SV_FX_TO_OUTBOUND);
    assert_int_equal(fx.v[2].len, 5);
    assert_memory_equal(fx.v[2].data, "hello", 5);
    assert_int_equal(sv_proto_direct(ops)->direct(st),
                     SV_DIRECT_WATCH); /* may still switch: watch */
    /* towards the client: 00 00, then the first frame with the UUID (§2.8 check 1) */
    uint8_t out[70000];
    ssize_t w = ops->frame(st, vc, 0, (const uint8_t *)"hi", 2, out, sizeof out);
    assert_true(w >= 2 + 16 + 5 + 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 0);
    assert_memory_equal(out + 2, k_uuid, 16);
    assert_int_equal(out[18], SV_VISION_CONTINUE);
    assert_int_equal(out[19] << 8 | out[20], 2);
    assert_int_equal(w, 2 + 21 + 2 + (out[21] << 8 | out[22]));
    assert_memory_equal(out + 23, "hi", 2);
    conn_free(st);

    /* a node without flow refuses the same request: "not able to use the flow" */
    void *plain = creds_for(false);
    st = conn_new();
    memcpy(buf, k_example, sizeof buf);
    assert_int_equal(ops->feed(st, plain, buf, sizeof buf, &fx), -EPERM);
    conn_free(st);
    ops->creds_free(plain);
    ops->creds_free(vc);
}

/* Frames: continue "abc" (pad 2), continue "" (pad 4), direct "de" (pad 0), then plain "fg". */
static const uint8_t k_frames[] = {
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
    0x00, 0x00, 0x03, 0x00, 0x02, 'a', 'b', 'c', 0, 0,
    0x00, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 0,
    0x02, 0x00, 0x02, 0x00, 0x00, 'd', 'e',
    'f', 'g'};

/* Un-pad @p in fed in pieces of @p piece bytes (0 = whole), keeping what is not consumed as
 * the runtime does. @return the content, its length in *@p len. */
static uint8_t *unpad_in_pieces(sv_vision *v, const uint8_t *in, size_t n, size_t piece,
                                size_t *len)
{
    uint8_t *got = malloc(n + 1), *carry = malloc(n + 1);
    size_t carry_len = 0, at = 0;
    *len = 0;
    while (at < n) {
        size_t k = piece == 0 || n - at < piece ? n - at : piece;
        memcpy(carry + carry_len, in + at, k);
        carry_len += k;
        at += k;
        size_t out = 0;
        ssize_t r = sv_vision_unpad(v, carry, carry_len, &out);
        assert_true(r == 0 || r == (ssize_t)carry_len);
        memcpy(got + *len, carry, out);
        *len += out;
        if (r > 0)
            carry_len = 0;
    }
    free(carry);
    return got;
}

static void unpad__whole_vs_byte_at_a_time(void **state)
{
    (void)state;
    for (size_t piece = 0; piece <= 9; piece++) {
        sv_vision v;
        sv_vision_init(&v, k_uuid, true, 1);
        size_t len = 0;
        uint8_t *got = unpad_in_pieces(&v, k_frames, sizeof k_frames, piece, &len);
        assert_int_equal(len, 7);
        assert_memory_equal(got, "abcdefg", 7);
        assert_true(sv_vision_rx_direct(&v));
        assert_false(sv_vision_rx_watch(&v));
        free(got);
    }
}

static void unpad__end_command_and_plain_start(void **state)
{
    (void)state;
    sv_vision v;
    uint8_t b[64];
    size_t out;
    /* command 1 (end): plain afterwards, no direct */
    sv_vision_init(&v, k_uuid, true, 1);
    memcpy(b, k_uuid, 16);
    memcpy(b + 16, "\x01\x00\x01\x00\x01" "x\x00" "yz", 9);
    assert_int_equal(sv_vision_unpad(&v, b, 25, &out), 25);
    assert_int_equal(out, 3);
    assert_memory_equal(b, "xyz", 3);
    assert_false(sv_vision_rx_direct(&v));
    assert_false(sv_vision_rx_watch(&v));
    /* fewer than 16 bytes: need more; 16 that are not the UUID: plain (padding is optional) */
    sv_vision_init(&v, k_uuid, true, 1);
    memcpy(b, "GET / HTTP/1.1\r\n", 16);
    assert_int_equal(sv_vision_unpad(&v, b, 15, &out), 0);
    assert_int_equal(sv_vision_unpad(&v, b, 16, &out), 16);
    assert_int_equal(out, 16);
    assert_memory_equal(b, "GET / HTTP/1.1\r\n", 16);
    assert_false(sv_vision_rx_watch(&v));
}

static void unpad__malformed_command(void **state)
{
    (void)state;
    sv_vision v;
    uint8_t b[32];
    size_t out;
    sv_vision_init(&v, k_uuid, true, 1);
    memcpy(b, k_uuid, 16);
    memcpy(b + 16, "\x03\x00\x00\x00\x00", 5);
    assert_int_equal(sv_vision_unpad(&v, b, 21, &out), -EPROTO);
    /* through the core: the connection closes */
    void *vc = creds_for(true);
    void *st = conn_new();
    uint8_t buf[sizeof k_example];
    memcpy(buf, k_example, sizeof buf);
    buf[EXAMPLE_HEADER + 16] = 7;
    sv_effects fx;
    assert_int_equal(ops->feed(st, vc, buf, sizeof buf, &fx), -EPROTO);
    assert_int_equal(fx.v[fx.n - 1].kind, SV_FX_ERROR);
    assert_int_equal(fx.v[fx.n - 1].policy, SV_PROBE_CLOSE);
    conn_free(st);
    ops->creds_free(vc);
}

/* ---------- sender (§2.3, §2.5) ---------- */

/* A TLS 1.3 ServerHello record with suite @p suite (session id of 32 bytes). */
static size_t server_hello(uint8_t *p, uint16_t suite)
{
    size_t n = 0;
    memcpy(p, "\x16\x03\x03\x00\x00\x02\x00\x00\x00\x03\x03", 11), n = 11;
    memset(p + n, 0xab, 32), n += 32; /* random */
    p[n++] = 32;
    memset(p + n, 0xcd, 32), n += 32; /* session id */
    p[n++] = (uint8_t)(suite >> 8);
    p[n++] = (uint8_t)suite;
    p[n++] = 0;                       /* compression */
    memcpy(p + n, "\x00\x06\x00\x2b\x00\x02\x03\x04", 8), n += 8;
    p[3] = (uint8_t)((n - 5) >> 8), p[4] = (uint8_t)(n - 5);
    p[6] = 0, p[7] = (uint8_t)((n - 9) >> 8), p[8] = (uint8_t)(n - 9);
    return n;
}

/* Parse our frames back with a receiver: the content, the last command, frame bounds. */
static void check_frames(const sv_vision *tx, const uint8_t *w, size_t wn, const uint8_t *want,
                         size_t want_n, bool first)
{
    size_t at = first ? 16 : 0, content = 0;
    if (first)
        assert_memory_equal(w, tx->uuid, 16);
    while (at < wn) {
        size_t len = (size_t)w[at + 1] << 8 | w[at + 2], pad = (size_t)w[at + 3] << 8 | w[at + 4];
        assert_true(len + pad <= SV_VISION_BODY_MAX);
        assert_memory_equal(w + at + 5, want + content, len);
        content += len;
        at += 5 + len + pad;
        if (w[at - 5 - len - pad] != SV_VISION_CONTINUE) {
            assert_memory_equal(w + at, want + content, want_n - content); /* plain rest */
            content = want_n, at = wn;
        }
    }
    assert_int_equal(at, wn);
    assert_int_equal(content, want_n);
}

static void pad__tls13_switches_to_direct(void **state)
{
    (void)state;
    static uint8_t in[20000], out[40000];
    sv_vision v;
    sv_vision_init(&v, k_uuid, true, 42);
    /* the inner ClientHello passes upstream: TLS, long padding for short content */
    sv_vision_filter(&v, (const uint8_t *)"\x16\x03\x01\x02\x00\x01", 6);
    assert_true(v.is_tls);
    memcpy(in, "\x16\x03\x03\x00\x10", 5);
    ssize_t w = sv_vision_pad(&v, in, 21, out, sizeof out);
    assert_true(w > 0);
    size_t body = (size_t)(out[17] << 8 | out[18]) + (size_t)(out[19] << 8 | out[20]);
    assert_true(body >= 900 && body <= 1399); /* §2.8 check 2 */
    check_frames(&v, out, (size_t)w, in, 21, true);
    assert_false(sv_vision_tx_direct(&v));
    /* the server's flight: ServerHello (TLS 1.3, AES-128-GCM) and more, still padded */
    size_t n = server_hello(in, 0x1301);
    memcpy(in + n, "\x14\x03\x03\x00\x01\x01", 6), n += 6;
    w = sv_vision_pad(&v, in, n, out, sizeof out);
    assert_true(w > 0);
    assert_int_equal(out[0], SV_VISION_CONTINUE);
    assert_true(v.xtls);
    /* whole application-data records, over one frame's size: the last frame says direct */
    memcpy(in, "\x17\x03\x03\x40\x00", 5);
    memset(in + 5, 0x5a, 16384);
    memcpy(in + 16389, "\x17\x03\x03\x00\x03xyz", 8);
    w = sv_vision_pad(&v, in, 16397, out, sizeof out);
    assert_true(w > 0 && (size_t)w <= sv_vision_pad_max(16397));
    check_frames(&v, out, (size_t)w, in, 16397, false);
    assert_true(sv_vision_tx_direct(&v));
    /* then plain copies */
    assert_int_equal(sv_vision_pad(&v, in, 100, out, sizeof out), 100);
    assert_memory_equal(out, in, 100);
}

static void pad__ccm8_or_mux_end_without_direct(void **state)
{
    (void)state;
    static uint8_t in[4096], out[16384];
    for (int k = 0; k < 2; k++) {
        sv_vision v;
        sv_vision_init(&v, k_uuid, k == 1, 7); /* k = 1: direct allowed, but CCM_8 */
        size_t n = server_hello(in, k == 0 ? 0x1301 : 0x1305);
        assert_true(sv_vision_pad(&v, in, n, out, sizeof out) > 0);
        memcpy(in, "\x17\x03\x03\x00\x02hi", 7);
        ssize_t w = sv_vision_pad(&v, in, 7, out, sizeof out);
        assert_true(w > 0);
        assert_int_equal(out[0], SV_VISION_END); /* §2.8 check 4 */
        assert_false(sv_vision_tx_direct(&v));
        assert_false(v.tx_padding);
    }
}

static void pad__non_tls_ends_within_the_filter(void **state)
{
    (void)state;
    static uint8_t out[4096];
    sv_vision v;
    sv_vision_init(&v, k_uuid, true, 3);
    int writes = 0;
    while (v.tx_padding && writes < 20) {
        ssize_t w = sv_vision_pad(&v, (const uint8_t *)"HTTP/1.1 200 OK\r\n", 17, out, sizeof out);
        assert_true(w > 0);
        writes++;
    }
    assert_true(writes <= 8); /* §2.8 check 5 */
    assert_false(sv_vision_tx_direct(&v));
}

static void pad__bounds(void **state)
{
    (void)state;
    static uint8_t in[65536], out[80000];
    sv_vision v;
    sv_vision_init(&v, k_uuid, true, 9);
    memset(in, 0x33, sizeof in);
    assert_int_equal(sv_vision_pad(&v, in, sizeof in, out, sv_vision_pad_max(sizeof in) - 1),
                     -EMSGSIZE);
    ssize_t w = sv_vision_pad(&v, in, sizeof in, out, sv_vision_pad_max(sizeof in));
    assert_true(w > 0 && (size_t)w <= sv_vision_pad_max(sizeof in));
    check_frames(&v, out, (size_t)w, in, sizeof in, true);
    /* the VLESS core's whole framing of one remote read fits the runtime's buffer */
    assert_true(ops->frame_max(64 * 1024) <= 64 * 1024 + 4096);
    /* input in the output's tail (the core's Mux.Cool path) */
    sv_vision_init(&v, k_uuid, true, 9);
    size_t cap = sv_vision_pad_max(30000);
    memset(out + cap - 30000, 0x44, 30000);
    memset(in, 0x44, 30000);
    w = sv_vision_pad(&v, out + cap - 30000, 30000, out, cap);
    assert_true(w > 0);
    check_frames(&v, out, (size_t)w, in, 30000, true);
}

/* ---------- the core: direct bits (§2.6) ---------- */

static void core__direct_bits_follow_the_frames(void **state)
{
    (void)state;
    void *vc = creds_for(true);
    void *st = conn_new();
    uint8_t buf[256];
    memcpy(buf, k_example, EXAMPLE_HEADER);
    sv_effects fx;
    assert_int_equal(ops->feed(st, vc, buf, EXAMPLE_HEADER, &fx), EXAMPLE_HEADER);
    assert_int_equal(sv_proto_direct(ops)->direct(st), SV_DIRECT_WATCH);
    memcpy(buf, k_frames, sizeof k_frames);
    assert_int_equal(ops->feed(st, vc, buf, sizeof k_frames, &fx), (ssize_t)sizeof k_frames);
    size_t got = 0;
    for (unsigned i = 0; i < fx.n; i++)
        if (fx.v[i].kind == SV_FX_TO_OUTBOUND)
            got += fx.v[i].len;
    assert_int_equal(got, 7);
    assert_int_equal(sv_proto_direct(ops)->direct(st), SV_DIRECT_IN);
    /* downstream: ServerHello, then application data → command 2, then raw out */
    static uint8_t in[512], out[70000];
    size_t n = server_hello(in, 0x1302);
    assert_true(ops->frame(st, vc, 0, in, n, out, sizeof out) > 0);
    memcpy(in, "\x17\x03\x03\x00\x02ok", 7);
    ssize_t w = ops->frame(st, vc, 0, in, 7, out, sizeof out);
    assert_true(w > 0);
    assert_int_equal(out[0], SV_VISION_DIRECT);
    assert_int_equal(sv_proto_direct(ops)->direct(st), SV_DIRECT_IN | SV_DIRECT_OUT);
    assert_int_equal(ops->frame(st, vc, 0, in, 7, out, sizeof out), 7);
    conn_free(st);
    ops->creds_free(vc);
}

/* ---------- the core under Mux (§2.7) ---------- */

/* The Mux.Cool decoder's End answer to a Keep for an unknown session goes out like every
 * downstream frame under Vision with Mux: after the response header, in a padding frame (the
 * first, with the UUID); the next frame continues the same padded stream. */
static void core__mux_end_answer_is_padded(void **state)
{
    (void)state;
    void *vc = creds_for(true);
    void *st = conn_new();
    static uint8_t buf[256], out[16384];
    memcpy(buf, k_example, 36); /* the §2.8 request up to its addons, then command 3 */
    size_t n = 36;
    buf[n++] = 0x03;
    memcpy(buf + n, k_uuid, 16), n += 16;
    static const uint8_t keep9[] = {0x00, 0x04, 0x00, 0x09, 0x02, 0x00}; /* never opened */
    memcpy(buf + n, "\x00\x00\x06\x00\x00", 5), n += 5; /* continue, 6 bytes, no padding */
    memcpy(buf + n, keep9, sizeof keep9), n += sizeof keep9;
    sv_effects fx;
    assert_int_equal(ops->feed(st, vc, buf, n, &fx), (ssize_t)n);
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_true(fx.v[0].multiplexed);
    assert_int_equal(fx.v[1].kind, SV_FX_TO_CLIENT);
    const uint8_t *d = fx.v[1].data;
    size_t dl = fx.v[1].len;
    assert_true(dl > 2 + 16);
    assert_int_equal(d[0], 0);
    assert_int_equal(d[1], 0);
    assert_memory_equal(d + 2, k_uuid, 16);
    sv_vision rx;
    sv_vision_init(&rx, k_uuid, false, 1);
    memcpy(out, d + 2, dl - 2);
    size_t k = 0;
    assert_int_equal(sv_vision_unpad(&rx, out, dl - 2, &k), (ssize_t)(dl - 2));
    static const uint8_t end9[] = {0x00, 0x04, 0x00, 0x09, 0x03, 0x00};
    assert_int_equal(k, sizeof end9);
    assert_memory_equal(out, end9, sizeof end9);
    ssize_t w = ops->frame(st, vc, 1, (const uint8_t *)"xy", 2, out, sizeof out);
    assert_true(w > 0);
    assert_int_equal(sv_vision_unpad(&rx, out, (size_t)w, &k), w);
    static const uint8_t keep1[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x02, 'x', 'y'};
    assert_int_equal(k, sizeof keep1);
    assert_memory_equal(out, keep1, sizeof keep1);
    conn_free(st);
    ops->creds_free(vc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flow_rules__xray_table),
        cmocka_unit_test(flow_rules__through_the_core),
        cmocka_unit_test(worked_example__through_the_core),
        cmocka_unit_test(unpad__whole_vs_byte_at_a_time),
        cmocka_unit_test(unpad__end_command_and_plain_start),
        cmocka_unit_test(unpad__malformed_command),
        cmocka_unit_test(pad__tls13_switches_to_direct),
        cmocka_unit_test(pad__ccm8_or_mux_end_without_direct),
        cmocka_unit_test(pad__non_tls_ends_within_the_filter),
        cmocka_unit_test(pad__bounds),
        cmocka_unit_test(core__direct_bits_follow_the_frames),
        cmocka_unit_test(core__mux_end_answer_is_padded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
