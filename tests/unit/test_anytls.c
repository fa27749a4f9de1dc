/*
 * Unit tests: AnyTLS core (supervisor/proto/anytls.c) through its ops table (proto.h), against
 * the wire format of PROTOCOLS-3.md §3. A runtime-like driver keeps the unconsumed carry, feeds
 * it again with more bytes appended, and calls again at once while the backlog's more() holds,
 * as proto.h and proto_ext.h ask; it records the effects as a transcript that does not depend
 * on how the input was cut (outbound and client bytes are concatenated per stream).
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
#include <openssl/evp.h>

#include "supervisor/proto/anytls.h"

static const sv_proto_ops *const ops = &sv_anytls_ops;
static void *g_creds; /* users 0 "pw-a", 1 "pw-b", 2 "pw-c"; the default scheme */

static const char md5_default[] = "75cff2ad89aadf5e257059ee571ebe11";

/* ---------- wire builders ---------- */

typedef struct wire {
    uint8_t b[1 << 18];
    size_t n;
} wire;

static void w_put(wire *w, const void *p, size_t n)
{
    assert_true(w->n + n <= sizeof w->b);
    if (n > 0)
        memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void w_auth(wire *w, const char *pw, size_t pad)
{
    uint8_t d[32];
    unsigned dl = 0;
    assert_int_equal(EVP_Digest(pw, strlen(pw), d, &dl, EVP_sha256(), NULL), 1);
    w_put(w, d, 32);
    uint8_t l[2] = {(uint8_t)(pad >> 8), (uint8_t)pad};
    w_put(w, l, 2);
    for (size_t i = 0; i < pad; i++)
        w_put(w, "", 1);
}

static void w_frame(wire *w, uint8_t cmd, uint32_t sid, const void *data, size_t len)
{
    uint8_t h[7] = {cmd,
                    (uint8_t)(sid >> 24),
                    (uint8_t)(sid >> 16),
                    (uint8_t)(sid >> 8),
                    (uint8_t)sid,
                    (uint8_t)(len >> 8),
                    (uint8_t)len};
    w_put(w, h, 7);
    if (len > 0)
        w_put(w, data, len);
}

static void w_settings(wire *w, const char *text)
{
    w_frame(w, SV_ANYTLS_SETTINGS, 0, text, strlen(text));
}

/* SOCKS address of @p host (a domain) and @p port. @return its length. */
static size_t socks_domain(const char *host, uint16_t port, uint8_t *out)
{
    size_t hl = strlen(host);
    out[0] = 3;
    out[1] = (uint8_t)hl;
    memcpy(out + 2, host, hl);
    out[2 + hl] = (uint8_t)(port >> 8);
    out[3 + hl] = (uint8_t)port;
    return 4 + hl;
}

/* SYN then PSH(address + @p data) of stream @p sid. */
static void w_open(wire *w, uint32_t sid, const char *host, uint16_t port, const char *data)
{
    uint8_t p[600];
    size_t a = socks_domain(host, port, p);
    size_t dl = data != NULL ? strlen(data) : 0;
    if (dl > 0)
        memcpy(p + a, data, dl);
    w_frame(w, SV_ANYTLS_SYN, sid, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, sid, p, a + dl);
}

/* ---------- a runtime-like driver ---------- */

#define OUT_STREAMS 8

typedef struct transcript {
    char ev[1 << 16];
    size_t evn;
    uint8_t cli[1 << 17];
    size_t clin;
    uint8_t out[OUT_STREAMS][1 << 17];
    size_t outn[OUT_STREAMS];
    int rc;
    unsigned calls_more; /* calls made because of more() */
} transcript;

static void ev_add(transcript *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->ev + t->evn, sizeof t->ev - t->evn, fmt, ap);
    va_end(ap);
    assert_true(k >= 0 && (size_t)k < sizeof t->ev - t->evn);
    t->evn += (size_t)k;
}

static void record(transcript *t, const sv_effects *fx)
{
    assert_true(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        char d[300];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            ev_add(t, "auth %d %d;", e->principal, e->multiplexed);
            break;
        case SV_FX_OPEN:
            sv_dest_format(&e->dest, d, sizeof d);
            ev_add(t, "open %u %s %s;", e->stream, e->dest.network == SV_NET_UDP ? "udp" : "tcp",
                   d);
            break;
        case SV_FX_TO_OUTBOUND:
            assert_true(e->len > 0);
            assert_true(e->stream < OUT_STREAMS);
            assert_true(t->outn[e->stream] + e->len <= sizeof t->out[0]);
            memcpy(t->out[e->stream] + t->outn[e->stream], e->data, e->len);
            t->outn[e->stream] += e->len;
            break;
        case SV_FX_DATAGRAM:
            sv_dest_format(&e->dest, d, sizeof d);
            ev_add(t, "dgram %u %s %s %.*s;", e->stream,
                   e->dest.network == SV_NET_UDP ? "udp" : "tcp", d, (int)e->len,
                   (const char *)e->data);
            break;
        case SV_FX_TO_CLIENT:
            assert_true(t->clin + e->len <= sizeof t->cli);
            memcpy(t->cli + t->clin, e->data, e->len);
            t->clin += e->len;
            break;
        case SV_FX_CLOSE:
            ev_add(t, "close %u;", e->stream);
            break;
        case SV_FX_ERROR:
            assert_int_equal(i, fx->n - 1);
            ev_add(t, "error %d %d;", e->error, (int)e->policy);
            if (e->policy == SV_PROBE_ANSWER) { /* written before the close */
                assert_true(t->clin + e->len <= sizeof t->cli);
                memcpy(t->cli + t->clin, e->data, e->len);
                t->clin += e->len;
            }
            break;
        default:
            fail_msg("unexpected effect %d", (int)e->kind);
        }
    }
}

/* Feed @p w in pieces of @p piece bytes; the state is left for frame tests when @p keep. */
static transcript *drive_state(void *st, const wire *w, size_t piece)
{
    transcript *t = calloc(1, sizeof *t);
    assert_non_null(t);
    uint8_t *buf = malloc(w->n + ops->carry_max + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    for (unsigned guard = 0;; guard++) {
        assert_true(guard < 10000000);
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        ssize_t r = ops->feed(st, g_creds, buf, have, &fx);
        record(t, &fx);
        if (r < 0) {
            t->rc = (int)r;
            break;
        }
        assert_true((size_t)r <= have);
        memmove(buf, buf + r, have - (size_t)r);
        have -= (size_t)r;
        if (sv_proto_more(ops, st)) {
            t->calls_more++;
            continue;
        }
        if (r > 0)
            continue;
        assert_int_equal(fx.n, 0);
        assert_true(have <= ops->carry_max);
        if (in == w->n)
            break;
        size_t k = piece < w->n - in ? piece : w->n - in;
        memcpy(buf + have, w->b + in, k);
        have += k;
        in += k;
    }
    free(buf);
    return t;
}

static void *state_new(void)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    return st;
}

static void state_free(void *st)
{
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

static transcript *drive(const wire *w, size_t piece)
{
    void *st = state_new();
    transcript *t = drive_state(st, w, piece);
    state_free(st);
    return t;
}

/* Client bytes expected: a frame. */
static void exp_frame(wire *x, uint8_t cmd, uint32_t sid, const char *text)
{
    w_frame(x, cmd, sid, text, text != NULL ? strlen(text) : 0);
}

static void assert_cli(const transcript *t, const wire *x)
{
    assert_int_equal(t->clin, x->n);
    assert_memory_equal(t->cli, x->b, x->n);
}

static wire *wire_new(void)
{
    wire *w = calloc(1, sizeof *w);
    assert_non_null(w);
    return w;
}

/* ---------- fixtures ---------- */

static void *creds_with(const char *scheme, int *rc, sv_error *err)
{
    static char *secrets[] = {"pw-a", "pw-b", "pw-c"};
    sv_user u[3];
    memset(u, 0, sizeof u);
    for (int i = 0; i < 3; i++) {
        u[i].id = (uint64_t)i + 1;
        u[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "users", .users = u, .n_users = 3};
    sv_inbound_spec in;
    memset(&in, 0, sizeof in);
    in.tag = "at";
    in.anytls_padding_scheme = (char *)scheme;
    void *creds = NULL;
    *rc = ops->creds_new(scheme != NULL ? &in : NULL, &set, &creds, err);
    return creds;
}

static int setup(void **s)
{
    (void)s;
    int rc;
    sv_error err;
    g_creds = creds_with(NULL, &rc, &err);
    return rc;
}

static int teardown(void **s)
{
    (void)s;
    ops->creds_free(g_creds);
    return 0;
}

/* ---------- tests ---------- */

static void scheme__default_is_137_bytes_with_its_md5(void **s)
{
    (void)s;
    assert_int_equal(strlen(sv_anytls_default_scheme), 137);
    uint8_t d[16];
    unsigned dl = 0;
    EVP_Digest(sv_anytls_default_scheme, 137, d, &dl, EVP_md5(), NULL);
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    assert_string_equal(hex, md5_default);
}

static void auth__good_opens_stream_and_relays(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-b", 30);
    w_settings(w, "v=2\nclient=sing-box/1.12\npadding-md5=75cff2ad89aadf5e257059ee571ebe11");
    w_open(w, 1, "example.com", 443, "GET / HTTP/1.1\r\n");
    w_frame(w, SV_ANYTLS_PSH, 1, "more", 4);
    transcript *t = drive(w, w->n);
    assert_string_equal(t->ev, "auth 1 1;open 1 tcp example.com:443;");
    assert_int_equal(t->rc, 0);
    assert_int_equal(t->outn[1], 20);
    assert_memory_equal(t->out[1], "GET / HTTP/1.1\r\nmore", 20);
    exp_frame(x, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    exp_frame(x, SV_ANYTLS_SYNACK, 1, NULL);
    assert_cli(t, x);
    free(t), free(w), free(x);
}

static void auth__unknown_falls_back_with_every_byte(void **s)
{
    (void)s;
    wire *w = wire_new();
    w_auth(w, "not-a-user", 30);
    w_settings(w, "v=2");
    void *st = state_new();
    sv_effects fx;
    ssize_t r = ops->feed(st, g_creds, w->b, w->n, &fx);
    assert_int_equal(r, -EACCES);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
    assert_int_equal(fx.v[0].policy, SV_PROBE_FALLBACK);
    assert_ptr_equal(fx.v[0].data, w->b);
    assert_int_equal(fx.v[0].len, w->n);
    /* no success after it */
    assert_int_equal(ops->feed(st, g_creds, w->b, w->n, &fx), -EACCES);
    assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
    state_free(st);
    /* fewer than 32 bytes: wait, nothing consumed; the 32nd decides */
    st = state_new();
    assert_int_equal(ops->feed(st, g_creds, w->b, 31, &fx), 0);
    assert_int_equal(fx.n, 0);
    assert_int_equal(ops->feed(st, g_creds, w->b, 32, &fx), -EACCES);
    assert_int_equal(fx.v[0].len, 32);
    state_free(st);
    free(w);
}

static void auth__short_and_long_padding(void **s)
{
    (void)s;
    wire *w = wire_new();
    w_auth(w, "pw-a", 100);
    void *st = state_new();
    sv_effects fx;
    for (size_t k = 0; k < w->n; k++) { /* a known user waits for all of its padding */
        assert_int_equal(ops->feed(st, g_creds, w->b, k, &fx), 0);
        assert_int_equal(fx.n, 0);
    }
    assert_int_equal(ops->feed(st, g_creds, w->b, w->n, &fx), (ssize_t)w->n);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[0].principal, 0);
    assert_true(fx.v[0].multiplexed);
    state_free(st);
    /* padding0_len above the bound: fallback with every byte, before the padding comes */
    wire *l = wire_new();
    w_auth(l, "pw-a", 0);
    l->b[32] = (SV_ANYTLS_PADDING0_MAX + 1) >> 8;
    l->b[33] = (SV_ANYTLS_PADDING0_MAX + 1) & 0xff;
    st = state_new();
    assert_int_equal(ops->feed(st, g_creds, l->b, 34, &fx), -EPROTO);
    assert_int_equal(fx.v[0].policy, SV_PROBE_FALLBACK);
    assert_ptr_equal(fx.v[0].data, l->b);
    assert_int_equal(fx.v[0].len, 34);
    state_free(st);
    free(w), free(l);
}

static void settings__md5_differs_sends_scheme_then_v2(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-c", 30);
    /* keys in any order; the md5 of a scheme with a trailing newline differs */
    w_settings(w, "padding-md5=305fc37916c150b282ecb61e9ee141d7\nclient=x\nv=2");
    transcript *t = drive(w, w->n);
    exp_frame(x, SV_ANYTLS_UPDATE_PADDING, 0, sv_anytls_default_scheme);
    exp_frame(x, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    assert_cli(t, x);
    free(t), free(x);
    /* equal md5, v=1: nothing at all */
    w->n = 0;
    w_auth(w, "pw-c", 30);
    w_settings(w, "v=1\npadding-md5=75cff2ad89aadf5e257059ee571ebe11");
    t = drive(w, w->n);
    assert_int_equal(t->clin, 0);
    assert_string_equal(t->ev, "auth 2 1;");
    free(t);
    /* no md5 at all: an update; v not an integer: v1 */
    w->n = 0;
    w_auth(w, "pw-c", 30);
    w_settings(w, "v=2x");
    w_open(w, 3, "a.example", 80, NULL);
    t = drive(w, w->n);
    x = wire_new();
    exp_frame(x, SV_ANYTLS_UPDATE_PADDING, 0, sv_anytls_default_scheme);
    assert_cli(t, x); /* and no SYNACK: v1 */
    assert_string_equal(t->ev, "auth 2 1;open 3 tcp a.example:80;");
    free(t), free(w), free(x);
}

static void settings__custom_scheme_is_sent_as_given(void **s)
{
    (void)s;
    int rc;
    sv_error err;
    const char *sch = "stop=2\n0=40-40\n1=100-200";
    void *c2 = creds_with(sch, &rc, &err);
    assert_int_equal(rc, 0);
    void *keep = g_creds;
    g_creds = c2;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 40);
    w_settings(w, "v=2\npadding-md5=75cff2ad89aadf5e257059ee571ebe11");
    transcript *t = drive(w, 5);
    exp_frame(x, SV_ANYTLS_UPDATE_PADDING, 0, sch);
    exp_frame(x, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    assert_cli(t, x);
    g_creds = keep;
    ops->creds_free(c2);
    free(t), free(w), free(x);
}

static void streams__interleaved_and_fin_closes(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 30);
    w_settings(w, "v=1\npadding-md5=75cff2ad89aadf5e257059ee571ebe11");
    w_open(w, 1, "one.example", 1, "a1");
    w_open(w, 2, "two.example", 2, "b1");
    w_frame(w, SV_ANYTLS_PSH, 1, "a2", 2);
    w_frame(w, SV_ANYTLS_PSH, 2, "b2", 2);
    w_frame(w, SV_ANYTLS_FIN, 1, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 1, "lost", 4); /* a closed stream: discarded */
    w_frame(w, SV_ANYTLS_PSH, 2, "b3", 2);
    w_frame(w, SV_ANYTLS_FIN, 7, NULL, 0);   /* unknown: nothing */
    w_frame(w, SV_ANYTLS_SYN, 2, NULL, 0);   /* a reused id: ignored */
    w_frame(w, SV_ANYTLS_PSH, 2, "b4", 2);
    transcript *t = drive(w, w->n);
    assert_string_equal(t->ev, "auth 0 1;open 1 tcp one.example:1;open 2 tcp two.example:2;"
                               "close 1;");
    assert_int_equal(t->outn[1], 4);
    assert_memory_equal(t->out[1], "a1a2", 4);
    assert_int_equal(t->outn[2], 8);
    assert_memory_equal(t->out[2], "b1b2b3b4", 8);
    assert_cli(t, x); /* FIN is not answered */
    free(t), free(w), free(x);
}

static void control__heartbeat_waste_unknown(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 30);
    w_frame(w, SV_ANYTLS_WASTE, 0, "\0\0\0\0\0\0\0\0\0\0", 10);
    w_frame(w, SV_ANYTLS_HEART_REQUEST, 0x01020304, NULL, 0);
    w_frame(w, SV_ANYTLS_HEART_RESPONSE, 9, NULL, 0);
    /* an unknown cmd whose data looks like a SYN: skipped whole, not parsed */
    uint8_t fake[7] = {SV_ANYTLS_SYN, 0, 0, 0, 5, 0, 0};
    w_frame(w, 42, 0, fake, sizeof fake);
    w_settings(w, "padding-md5=75cff2ad89aadf5e257059ee571ebe11");
    transcript *t = drive(w, w->n);
    exp_frame(x, SV_ANYTLS_HEART_RESPONSE, 0x01020304, NULL);
    assert_cli(t, x);
    assert_string_equal(t->ev, "auth 0 1;");
    assert_int_equal(t->rc, 0); /* had the fake SYN been read, it would have been refused */
    free(t), free(w), free(x);
}

static void syn__before_settings_alerts_and_closes(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 30);
    w_open(w, 1, "a.example", 80, "x");
    transcript *t = drive(w, w->n);
    exp_frame(x, SV_ANYTLS_ALERT, 0, "client did not send its settings");
    assert_cli(t, x);
    char want[64];
    snprintf(want, sizeof want, "auth 0 1;error %d %d;", -EPROTO, (int)SV_PROBE_ANSWER);
    assert_string_equal(t->ev, want);
    assert_int_equal(t->rc, -EPROTO);
    free(t), free(w), free(x);
}

static void frame__psh_split_and_fin_exact(void **s)
{
    (void)s;
    void *st = state_new();
    static uint8_t in[70000], out[70100];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)i;
    assert_int_equal(ops->frame_max(1), 8);
    assert_int_equal(ops->frame_max(65535), 65542);
    assert_int_equal(ops->frame_max(70000), 70014);
    assert_int_equal(ops->frame(st, g_creds, 3, in, 5, out, 11), -EMSGSIZE);
    assert_int_equal(ops->frame(st, g_creds, 0x0a0b0c0d, in, 5, out, 12), 12);
    static const uint8_t f5[7] = {2, 0x0a, 0x0b, 0x0c, 0x0d, 0, 5};
    assert_memory_equal(out, f5, 7);
    assert_memory_equal(out + 7, in, 5);
    assert_int_equal(ops->frame(st, g_creds, 1, in, 70000, out, sizeof out), 70014);
    static const uint8_t h1[7] = {2, 0, 0, 0, 1, 0xff, 0xff};
    static const uint8_t h2[7] = {2, 0, 0, 0, 1, (70000 - 65535) >> 8, (70000 - 65535) & 0xff};
    assert_memory_equal(out, h1, 7);
    assert_memory_equal(out + 7, in, 65535);
    assert_memory_equal(out + 65542, h2, 7);
    assert_memory_equal(out + 65549, in + 65535, 70000 - 65535);
    const sv_proto_ext_end *end = sv_proto_end(ops);
    assert_int_equal(end->frame_end(st, g_creds, 9, true, out, 6), -EMSGSIZE);
    assert_int_equal(end->frame_end(st, g_creds, 9, false, out, 7), 7);
    static const uint8_t fin[7] = {3, 0, 0, 0, 9, 0, 0};
    assert_memory_equal(out, fin, 7);
    state_free(st);
}

/* A session with all kinds of frames, TCP and UoT streams. */
static void w_session(wire *w)
{
    w_auth(w, "pw-b", 30);
    w_frame(w, SV_ANYTLS_WASTE, 0, "pad", 3);
    w_settings(w, "v=2\npadding-md5=00");
    w_open(w, 1, "example.com", 443, "hello");
    w_frame(w, SV_ANYTLS_HEART_REQUEST, 0, NULL, 0);
    /* stream 2: UoT v2 connect to 9.9.9.9:53, request split over two PSH frames */
    uint8_t p[300];
    size_t a = socks_domain("sp.v2.udp-over-tcp.arpa", 0, p);
    w_frame(w, SV_ANYTLS_SYN, 2, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 2, p, a - 3);
    uint8_t req[] = {1, 1, 9, 9, 9, 9, 0, 53, 0, 3, 'q', '1', '!', 0, 2, 'q'};
    memmove(p, p + a - 3, 3);
    memcpy(p + 3, req, sizeof req);
    w_frame(w, SV_ANYTLS_PSH, 2, p, 3 + sizeof req);
    w_frame(w, SV_ANYTLS_PSH, 2, "2", 1);
    w_frame(w, SV_ANYTLS_PSH, 1, " world", 6);
    /* stream 3: UoT v2 non-connect; packets with UoT address codes */
    a = socks_domain("sp.v2.udp-over-tcp.arpa", 0, p);
    uint8_t r3[] = {0, 1, 1, 2, 3, 4, 0, 80,              /* isConnect 0, SOCKS 1.2.3.4:80 */
                    0, 5, 6, 7, 8, 0, 81, 0, 2, 'u', '1', /* UoT IPv4 5.6.7.8:81 */
                    2, 3, 'd', '.', 'e', 0, 82, 0, 1, 'u'};
    memcpy(p + a, r3, sizeof r3);
    w_frame(w, SV_ANYTLS_SYN, 3, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 3, p, a + sizeof r3);
    w_frame(w, SV_ANYTLS_FIN, 2, NULL, 0);
    w_frame(w, SV_ANYTLS_FIN, 1, NULL, 0);
}

static const char session_events[] =
    "auth 1 1;open 1 tcp example.com:443;open 2 udp 9.9.9.9:53;dgram 2 udp 9.9.9.9:53 q1!;"
    "dgram 2 udp 9.9.9.9:53 q2;open 3 udp 1.2.3.4:80;dgram 3 udp 5.6.7.8:81 u1;"
    "dgram 3 udp d.e:82 u;close 2;close 1;";

static void uot__connect_and_not_and_reply_framing(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_session(w);
    void *st = state_new();
    transcript *t = drive_state(st, w, w->n);
    assert_string_equal(t->ev, session_events);
    assert_int_equal(t->outn[1], 11);
    assert_memory_equal(t->out[1], "hello world", 11);
    exp_frame(x, SV_ANYTLS_UPDATE_PADDING, 0, sv_anytls_default_scheme);
    exp_frame(x, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    exp_frame(x, SV_ANYTLS_SYNACK, 1, NULL);
    exp_frame(x, SV_ANYTLS_HEART_RESPONSE, 0, NULL);
    exp_frame(x, SV_ANYTLS_SYNACK, 2, NULL);
    exp_frame(x, SV_ANYTLS_SYNACK, 3, NULL);
    assert_cli(t, x);
    free(t);
    /* stream 3 is still open (non-connect): replies carry the source in UoT codes */
    const sv_proto_ext_datagram *dg = sv_proto_datagram(ops);
    sv_dest from;
    memset(&from, 0, sizeof from);
    from.atyp = SV_ATYP_IPV6;
    from.ip[15] = 1;
    from.port = 53;
    uint8_t out[100];
    assert_int_equal(dg->frame_datagram(st, g_creds, 3, &from, (const uint8_t *)"ok", 2, out,
                                        sizeof out),
                     7 + 1 + 16 + 2 + 2 + 2);
    static const uint8_t h[8] = {2, 0, 0, 0, 3, 0, 23, 1};
    assert_memory_equal(out, h, 8);
    assert_int_equal(out[7 + 17], 0);
    assert_int_equal(out[7 + 18], 53);
    assert_memory_equal(out + 7 + 19, "\0\2ok", 4);
    assert_int_equal(dg->frame_datagram(st, g_creds, 3, &from, (const uint8_t *)"ok", 2, out, 20),
                     -EMSGSIZE);
    /* stream 2 ended: -EINVAL; a TCP stream too */
    assert_int_equal(dg->frame_datagram(st, g_creds, 2, &from, out, 2, out, sizeof out), -EINVAL);
    state_free(st);
    free(w), free(x);
}

static void uot__connect_reply_is_length_and_data(void **s)
{
    (void)s;
    wire *w = wire_new();
    w_auth(w, "pw-a", 30);
    w_settings(w, "padding-md5=75cff2ad89aadf5e257059ee571ebe11");
    uint8_t p[300];
    size_t a = socks_domain("sp.v2.udp-over-tcp.arpa", 0, p);
    uint8_t req[] = {1, 1, 8, 8, 4, 4, 0, 53};
    memcpy(p + a, req, sizeof req);
    w_frame(w, SV_ANYTLS_SYN, 5, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 5, p, a + sizeof req);
    void *st = state_new();
    transcript *t = drive_state(st, w, 1);
    assert_string_equal(t->ev, "auth 0 1;open 5 udp 8.8.4.4:53;");
    sv_dest from;
    memset(&from, 0, sizeof from);
    from.atyp = SV_ATYP_IPV4;
    uint8_t out[64];
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(st, g_creds, 5, &from,
                                                            (const uint8_t *)"abc", 3, out,
                                                            sizeof out),
                     12);
    static const uint8_t want[12] = {2, 0, 0, 0, 5, 0, 5, 0, 3, 'a', 'b', 'c'};
    assert_memory_equal(out, want, 12);
    state_free(st);
    free(t), free(w);
}

/* A packet put together from two PSH frames is delivered from the core's held bytes; a FIN in
 * the same read, or frame_end before the next feed(), must leave them readable (ASan). */
static void uot__held_packet_survives_fin_and_frame_end(void **s)
{
    (void)s;
    for (int how = 0; how < 2; how++) {
        wire *w = wire_new();
        w_auth(w, "pw-a", 30);
        w_settings(w, "padding-md5=75cff2ad89aadf5e257059ee571ebe11");
        uint8_t p[300];
        size_t a = socks_domain("sp.v2.udp-over-tcp.arpa", 0, p);
        uint8_t req[] = {1, 1, 8, 8, 4, 4, 0, 53, 0, 6, 'h', 'e', 'l'};
        memcpy(p + a, req, sizeof req);
        w_frame(w, SV_ANYTLS_SYN, 1, NULL, 0);
        w_frame(w, SV_ANYTLS_PSH, 1, p, a + sizeof req);
        w_frame(w, SV_ANYTLS_PSH, 1, "d!!", 3);
        if (how == 0)
            w_frame(w, SV_ANYTLS_FIN, 1, NULL, 0);
        void *st = state_new();
        sv_effects fx;
        ssize_t r = ops->feed(st, g_creds, w->b, w->n, &fx);
        assert_int_equal(r, (ssize_t)w->n);
        unsigned i = 0;
        while (i < fx.n && fx.v[i].kind != SV_FX_DATAGRAM)
            i++;
        assert_true(i < fx.n);
        assert_true(fx.v[i].data < w->b || fx.v[i].data >= w->b + w->n); /* held bytes */
        if (how == 1) {
            uint8_t out[16];
            assert_int_equal(sv_proto_end(ops)->frame_end(st, g_creds, 1, false, out, 16), 7);
        } else {
            assert_int_equal(fx.v[fx.n - 1].kind, SV_FX_CLOSE);
        }
        assert_int_equal(fx.v[i].len, 6);
        assert_memory_equal(fx.v[i].data, "held!!", 6);
        while (sv_proto_more(ops, st))
            assert_true(ops->feed(st, g_creds, w->b, 0, &fx) >= 0);
        assert_int_equal(ops->feed(st, g_creds, w->b, 0, &fx), 0);
        state_free(st);
        free(w);
    }
}

static void feed__byte_by_byte_equals_whole(void **s)
{
    (void)s;
    wire *w = wire_new();
    w_session(w);
    static const size_t pieces[] = {1, 2, 3, 7, 8, 13, 64};
    transcript *whole = drive(w, w->n);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        transcript *t = drive(w, pieces[i]);
        assert_string_equal(t->ev, whole->ev);
        assert_int_equal(t->clin, whole->clin);
        assert_memory_equal(t->cli, whole->cli, t->clin);
        assert_int_equal(t->outn[1], whole->outn[1]);
        assert_memory_equal(t->out[1], whole->out[1], t->outn[1]);
        assert_int_equal(t->rc, whole->rc);
        free(t);
    }
    free(whole), free(w);
}

static void streams__cap_refuses_beyond_and_backlog_delivers_all(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 30);
    w_settings(w, "v=2\npadding-md5=75cff2ad89aadf5e257059ee571ebe11");
    exp_frame(x, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    for (uint32_t i = 1; i <= SV_ANYTLS_STREAMS_MAX + 1; i++) {
        w_open(w, i, "h.example", (uint16_t)i, NULL);
        if (i <= SV_ANYTLS_STREAMS_MAX) {
            exp_frame(x, SV_ANYTLS_SYNACK, i, NULL);
        } else {
            exp_frame(x, SV_ANYTLS_SYNACK, i, "too many streams");
            exp_frame(x, SV_ANYTLS_FIN, i, NULL);
        }
    }
    transcript *t = drive(w, w->n);
    assert_true(t->calls_more > 0); /* one read held more than SV_EFFECTS_MAX effects */
    assert_cli(t, x);
    char last[64];
    snprintf(last, sizeof last, "open %d tcp h.example:%d;", SV_ANYTLS_STREAMS_MAX,
             SV_ANYTLS_STREAMS_MAX);
    size_t ll = strlen(last);
    assert_true(t->evn > ll && memcmp(t->ev + t->evn - ll, last, ll) == 0);
    unsigned opens = 0;
    for (const char *p = t->ev; (p = strstr(p, "open ")) != NULL; p++)
        opens++;
    assert_int_equal(opens, SV_ANYTLS_STREAMS_MAX);
    free(t), free(w), free(x);
}

static void uot__many_packets_in_one_read_use_backlog(void **s)
{
    (void)s;
    wire *w = wire_new();
    w_auth(w, "pw-a", 30);
    w_settings(w, "padding-md5=75cff2ad89aadf5e257059ee571ebe11");
    uint8_t p[1000];
    size_t a = socks_domain("sp.v2.udp-over-tcp.arpa", 0, p);
    uint8_t req[] = {1, 1, 8, 8, 4, 4, 0, 53};
    memcpy(p + a, req, sizeof req);
    a += sizeof req;
    for (int i = 0; i < 40; i++) {
        p[a++] = 0;
        p[a++] = 1;
        p[a++] = (uint8_t)('A' + i % 26);
    }
    w_frame(w, SV_ANYTLS_SYN, 1, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 1, p, 20);          /* the address held over frames, */
    w_frame(w, SV_ANYTLS_PSH, 1, p + 20, a - 20); /* then 40 packets at once */
    transcript *whole = drive(w, w->n);
    unsigned n = 0;
    for (const char *q = whole->ev; (q = strstr(q, "dgram ")) != NULL; q++)
        n++;
    assert_int_equal(n, 40);
    assert_true(whole->calls_more > 0);
    transcript *t = drive(w, 1);
    assert_string_equal(t->ev, whole->ev);
    free(t), free(whole), free(w);
}

static void stream__bad_address_ends_stream_only(void **s)
{
    (void)s;
    wire *w = wire_new(), *x = wire_new();
    w_auth(w, "pw-a", 30);
    w_settings(w, "padding-md5=75cff2ad89aadf5e257059ee571ebe11");
    w_frame(w, SV_ANYTLS_SYN, 1, NULL, 0);
    w_frame(w, SV_ANYTLS_PSH, 1, "\x09zz", 3); /* ATYP 9 */
    w_open(w, 2, "ok.example", 1, "fine");
    transcript *t = drive(w, 2);
    exp_frame(x, SV_ANYTLS_FIN, 1, NULL);
    assert_cli(t, x);
    assert_string_equal(t->ev, "auth 0 1;open 2 tcp ok.example:1;");
    assert_memory_equal(t->out[2], "fine", 4);
    free(t), free(w), free(x);
}

static void creds__errors(void **s)
{
    (void)s;
    int rc;
    sv_error err;
    assert_null(creds_with("0=30-30\nstop=x", &rc, &err));
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err.msg, "padding_scheme: no valid \"stop=N\" line"));
    sv_user u[2];
    memset(u, 0, sizeof u);
    u[0].id = 7;
    u[0].secret = "same";
    u[1].id = 8;
    u[1].secret = "same";
    sv_user_set set = {.tag = "t", .users = u, .n_users = 2};
    void *c = NULL;
    assert_int_equal(ops->creds_new(NULL, &set, &c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "users 7 and 8 have the same password"));
    u[1].secret = "";
    assert_int_equal(ops->creds_new(NULL, &set, &c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "user 8 has an empty secret"));
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scheme__default_is_137_bytes_with_its_md5),
        cmocka_unit_test(auth__good_opens_stream_and_relays),
        cmocka_unit_test(auth__unknown_falls_back_with_every_byte),
        cmocka_unit_test(auth__short_and_long_padding),
        cmocka_unit_test(settings__md5_differs_sends_scheme_then_v2),
        cmocka_unit_test(settings__custom_scheme_is_sent_as_given),
        cmocka_unit_test(streams__interleaved_and_fin_closes),
        cmocka_unit_test(control__heartbeat_waste_unknown),
        cmocka_unit_test(syn__before_settings_alerts_and_closes),
        cmocka_unit_test(frame__psh_split_and_fin_exact),
        cmocka_unit_test(uot__connect_and_not_and_reply_framing),
        cmocka_unit_test(uot__connect_reply_is_length_and_data),
        cmocka_unit_test(uot__held_packet_survives_fin_and_frame_end),
        cmocka_unit_test(feed__byte_by_byte_equals_whole),
        cmocka_unit_test(streams__cap_refuses_beyond_and_backlog_delivers_all),
        cmocka_unit_test(uot__many_packets_in_one_read_use_backlog),
        cmocka_unit_test(stream__bad_address_ends_stream_only),
        cmocka_unit_test(creds__errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
