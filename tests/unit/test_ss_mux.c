/*
 * Shadowsocks over Mux.Cool (issue 9, proto/ss_mux.h): the v2ray-plugin's mux carries one
 * Shadowsocks stream per session. Whole input vs byte at a time vs odd pieces, with chunks that
 * straddle frames and frames full of tiny chunks; one user per connection; failures before and
 * after authentication; downstream Keep frames that decode to what went in; End frames.
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

#include "supervisor/proto/mux.h"
#include "supervisor/proto/ss_mux.h"
#include "supervisor/proto/ss_ops.h"

static const sv_proto_ops *const ops = &sv_ss_mux_ops;
static const sv_proto_ops *const ss = &sv_shadowsocks_ops;

static char pw_a[] = "password-a", pw_b[] = "password-b";
static sv_user k_users[] = {{.id = 7, .secret = pw_a}, {.id = 9, .secret = pw_b}};
static sv_user_set k_set = {.tag = (char *)"s", .users = k_users, .n_users = 2};
static sv_inbound_spec k_in = {.tag = (char *)"in", .protocol = SV_INBOUND_SHADOWSOCKS,
                               .ss_cipher = SV_SS_AES_128_GCM,
                               .ws = {.path = (char *)"/", .mux = true}};

/* A growing byte string. */
typedef struct bytes {
    uint8_t *p;
    size_t len;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    b->p = realloc(b->p, b->len + n + 1);
    assert_non_null(b->p);
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* Client Shadowsocks wire of @p user to 10.0.0.1:8080 carrying @p payload, sealed in pieces of
 * @p piece plaintext bytes (so chunks of at most @p piece). */
static bytes ss_wire(const void *creds, int user, const uint8_t *payload, size_t n, size_t piece)
{
    sv_ss_tcp st = {0};
    assert_int_equal(sv_ss_tcp_init(&st, k_in.ss_cipher), 0);
    st.user = user;
    bytes plain = {0}, wire = {0};
    static const uint8_t addr[] = {0x01, 10, 0, 0, 1, 0x1f, 0x90};
    put(&plain, addr, sizeof addr);
    put(&plain, payload, n);
    uint8_t *out = malloc(SV_SS_SEALED_MAX(piece));
    for (size_t off = 0; off < plain.len; off += piece) {
        size_t k = plain.len - off < piece ? plain.len - off : piece;
        ssize_t w = sv_ss_tcp_seal_to(&st, sv_ss_creds_ring(creds), plain.p + off, k, out,
                                      SV_SS_SEALED_MAX(piece));
        assert_true(w > 0);
        put(&wire, out, (size_t)w);
    }
    free(out);
    free(plain.p);
    sv_ss_tcp_deinit(&st);
    return wire;
}

/* Mux.Cool client frames (PROTOCOLS.md §7.3): New with v2ray-plugin's placeholder 127.0.0.1:0
 * (network 1 TCP, 2 UDP), Keep, End. */
static void mux_new(bytes *b, uint16_t id, uint8_t network, const uint8_t *d, size_t n)
{
    uint8_t h[] = {0, 12, (uint8_t)(id >> 8), (uint8_t)id, 1, 1, network, 0, 0, 1, 127, 0, 0, 1,
                   (uint8_t)(n >> 8), (uint8_t)n};
    put(b, h, sizeof h);
    put(b, d, n);
}

static void mux_keep(bytes *b, uint16_t id, const uint8_t *d, size_t n)
{
    uint8_t h[SV_MUX_HEAD_LEN];
    sv_mux_frame_head(id, n, h);
    put(b, h, sizeof h);
    put(b, d, n);
}

static void mux_end(bytes *b, uint16_t id)
{
    uint8_t h[SV_MUX_END_LEN];
    sv_mux_frame_end(id, false, h);
    put(b, h, sizeof h);
}

/* Session @p id's wire @p w as New + Keep frames cut at the given sizes (0-terminated), the rest
 * in one Keep; the frames go to @p out interleaved by the caller. */
static size_t mux_piece(bytes *out, uint16_t id, const bytes *w, size_t at, size_t n)
{
    if (at + n > w->len)
        n = w->len - at;
    if (at == 0)
        mux_new(out, id, 1, w->p, n);
    else
        mux_keep(out, id, w->p + at, n);
    return at + n;
}

/* What a runtime-like driver saw: non-data events as text, data per stream (1..7), client
 * bytes; keys tried as the runtime counts them (issue 13: every effect's trials, one lookup
 * each) and the scans it ran (SV_FX_SCAN: ops->scan, its answer to scan_result, unless
 * @c answer_set gives the answer). */
typedef struct seen {
    char ev[512];
    bytes data[8];
    bytes client;
    int error;
    enum sv_probe_policy policy;
    unsigned lookups, keys, scans, scan_keys;
    bool answer_set;
    int answer;
} seen;

static void seen_free(seen *s)
{
    for (int i = 0; i < 8; i++)
        free(s->data[i].p);
    free(s->client.p);
}

static void ev(seen *s, const char *fmt, ...)
{
    size_t l = strlen(s->ev);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->ev + l, sizeof s->ev - l, fmt, ap);
    va_end(ap);
}

/* Feed @p wire in pieces of @p step bytes (0: a varying 1..997, SIZE_MAX: 1..70000) like the
 * runtime: the unconsumed carry is fed again with the next bytes appended. */
static void drive(void *st, const void *creds, const bytes *wire, size_t step, seen *s)
{
    uint8_t *buf = malloc(wire->len + ops->carry_max + 1);
    size_t have = 0, off = 0, turn = 0;
    while (off < wire->len && s->error == 0) {
        size_t want = step == SIZE_MAX ? 1 + (turn++ * 2654435761u) % 70000
                      : step  ? step : 1 + (turn++ * 389) % 997;
        size_t take = wire->len - off < want ? wire->len - off : want;
        memcpy(buf + have, wire->p + off, take);
        have += take;
        off += take;
        for (;;) {
            sv_effects fx;
            bool scan = false;
            int answer = -1;
            ssize_t r = ops->feed(st, creds, buf, have, &fx);
            for (unsigned i = 0; i < fx.n; i++) {
                const sv_effect *e = &fx.v[i];
                if (e->trials > 0) {
                    s->lookups++;
                    s->keys += e->trials;
                }
                switch (e->kind) {
                case SV_FX_AUTHENTICATED:
                    ev(s, "A%d%s ", e->principal, e->multiplexed ? "m" : "");
                    break;
                case SV_FX_OPEN: {
                    char d[300];
                    sv_dest_format(&e->dest, d, sizeof d);
                    ev(s, "O%u:%s ", (unsigned)e->stream, d);
                    break;
                }
                case SV_FX_TO_OUTBOUND:
                    assert_true(e->stream >= 1 && e->stream < 8);
                    put(&s->data[e->stream], e->data, e->len);
                    break;
                case SV_FX_CLOSE:
                    ev(s, "C%u ", (unsigned)e->stream);
                    break;
                case SV_FX_TO_CLIENT:
                    put(&s->client, e->data, e->len);
                    break;
                case SV_FX_ERROR:
                    s->error = e->error;
                    s->policy = e->policy;
                    break;
                case SV_FX_SCAN: {
                    unsigned t = 0;
                    assert_int_equal(i, fx.n - 1); /* its last effect */
                    ev(s, "S ");
                    scan = true;
                    answer = sv_proto_guide(ops)->scan(creds, e->data, e->len, &t);
                    s->scans++;
                    s->scan_keys += t;
                    if (s->answer_set)
                        answer = s->answer;
                    break;
                }
                default:
                    ev(s, "?%d ", (int)e->kind);
                }
            }
            if (r < 0) {
                assert_int_not_equal(s->error, 0); /* an error comes with its effect */
                break;
            }
            if (scan) /* the same bytes are fed again: the answer waits there */
                sv_proto_guide(ops)->scan_result(st, answer >= 0 ? answer : -1);
            if (r == 0 && !sv_proto_more(ops, st))
                break;
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
        }
        assert_true(have <= ops->carry_max);
    }
    free(buf);
}

static void *new_state(void)
{
    void *st = calloc(1, ops->state_size);
    assert_int_equal(ops->init(st, &k_in), 0);
    return st;
}

static void free_state(void *st)
{
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

static void *new_creds(void)
{
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, NULL), 0);
    return creds;
}

/* A table of @p n users "user-<i>" (issue 13: more than the runtime's first guesses). */
static void *new_creds_n(size_t n)
{
    char (*pw)[16] = calloc(n, sizeof *pw);
    sv_user *u = calloc(n, sizeof *u);
    for (size_t i = 0; i < n; i++) {
        snprintf(pw[i], sizeof pw[i], "user-%zu", i);
        u[i].id = (uint64_t)i + 1;
        u[i].secret = pw[i];
    }
    sv_user_set set = {.tag = (char *)"s", .users = u, .n_users = n};
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &set, &creds, NULL), 0);
    free(u);
    free(pw);
    return creds;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed + (i >> 9));
    return p;
}

/* Two sessions of user 1: session 1 in full chunks cut across Keep frames of odd sizes,
 * session 2 in 1-byte chunks (hundreds per frame); interleaved, then both ended. */
static bytes two_sessions(const void *creds, const uint8_t *p1, size_t n1, const uint8_t *p2,
                          size_t n2)
{
    bytes w1 = ss_wire(creds, 1, p1, n1, SV_SS_CHUNK_MAX);
    bytes w2 = ss_wire(creds, 1, p2, n2, 1);
    bytes out = {0};
    static const size_t cuts1[] = {100, 5000, 3, 20000, 40000, 65535};
    size_t a1 = 0, a2 = 0;
    for (size_t i = 0; a1 < w1.len || a2 < w2.len; i++) {
        if (a1 < w1.len)
            a1 = mux_piece(&out, 1, &w1, a1, cuts1[i % 6]);
        if (a2 < w2.len)
            a2 = mux_piece(&out, 2, &w2, a2, 7000);
    }
    mux_end(&out, 1);
    mux_end(&out, 2);
    free(w1.p);
    free(w2.p);
    return out;
}

static void ss_mux__whole_byte_at_a_time_and_pieces__same_effects(void **state)
{
    (void)state;
    void *creds = new_creds();
    size_t n1 = 150000, n2 = 900;
    uint8_t *p1 = pattern(n1, 1), *p2 = pattern(n2, 2);
    bytes wire = two_sessions(creds, p1, n1, p2, n2);
    static const size_t steps[] = {0, 1, 0, 4096};
    char first[512] = "";
    for (size_t i = 0; i < 4; i++) {
        size_t step = i == 2 ? wire.len : steps[i];
        void *st = new_state();
        seen s = {0};
        /* a fresh table: the salts of the same wire would be replays for one filter */
        void *c = new_creds();
        sv_replay *rp = sv_replay_new(64);
        sv_proto_replay(ss)->attach_replay(c, rp);
        drive(st, c, &wire, step, &s);
        assert_int_equal(s.error, 0);
        assert_int_equal(s.data[1].len, n1);
        assert_memory_equal(s.data[1].p, p1, n1);
        assert_int_equal(s.data[2].len, n2);
        assert_memory_equal(s.data[2].p, p2, n2);
        assert_int_equal(s.client.len, 0);
        /* session 1's New holds part of its first chunk: session 2 authenticates first */
        assert_string_equal(s.ev, "A1m O2:10.0.0.1:8080 O1:10.0.0.1:8080 C1 C2 ");
        if (i == 0)
            strcpy(first, s.ev);
        assert_string_equal(s.ev, first);
        seen_free(&s);
        free_state(st);
        ss->creds_free(c);
        sv_replay_free(rp);
    }
    free(wire.p);
    free(p1);
    free(p2);
    ss->creds_free(creds);
}

/* Three sessions of 1 MiB-scale streams (full and odd chunk sizes) cut into Keep frames of
 * pseudo-random sizes up to 65535, fed in pseudo-random pieces up to 70000 bytes: every byte
 * arrives, in order, whatever the cuts (as TLS records and WebSocket frames cut a real client's
 * stream). */
static void ss_mux__random_frames_and_pieces__every_byte(void **state)
{
    (void)state;
    uint32_t rnd = 12345;
    for (int round = 0; round < 6; round++) {
        void *creds = new_creds();
        static const size_t sizes[3] = {400000, 250000, 90000};
        static const size_t pieces[3] = {SV_SS_CHUNK_MAX, 5000, 777};
        uint8_t *p[3];
        bytes w[3];
        size_t at[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            p[k] = pattern(sizes[k], (unsigned)(k + round));
            w[k] = ss_wire(creds, 1, p[k], sizes[k], pieces[(k + round) % 3]);
        }
        bytes wire = {0};
        while (at[0] < w[0].len || at[1] < w[1].len || at[2] < w[2].len) {
            rnd = rnd * 1103515245u + 12345u;
            int k = (int)((rnd >> 16) % 3);
            if (at[k] >= w[k].len)
                continue;
            rnd = rnd * 1103515245u + 12345u;
            size_t n = 1 + (rnd >> 8) % (round % 2 ? 65535 : 3000);
            at[k] = mux_piece(&wire, (uint16_t)(k + 1), &w[k], at[k], n);
        }
        void *st = new_state();
        seen s = {0};
        drive(st, creds, &wire, round % 3 == 2 ? 1 + rnd % 70000 : SIZE_MAX, &s);
        assert_int_equal(s.error, 0);
        assert_int_equal(s.client.len, 0);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(s.data[k + 1].len, sizes[k]);
            assert_memory_equal(s.data[k + 1].p, p[k], sizes[k]);
            free(p[k]);
            free(w[k].p);
        }
        seen_free(&s);
        free_state(st);
        free(wire.p);
        ss->creds_free(creds);
    }
}

/* The same salt twice: the second session is a replay (after authentication: it alone ends). */
static void ss_mux__replayed_salt_after_auth__session_ended(void **state)
{
    (void)state;
    void *creds = new_creds();
    sv_replay *rp = sv_replay_new(64);
    sv_proto_replay(ss)->attach_replay(creds, rp);
    uint8_t p[10] = "0123456789";
    bytes w = ss_wire(creds, 0, p, sizeof p, 64), wire = {0};
    mux_new(&wire, 1, 1, w.p, w.len);
    mux_new(&wire, 2, 1, w.p, w.len);
    void *st = new_state();
    seen s = {0};
    drive(st, creds, &wire, 0, &s);
    assert_int_equal(s.error, 0);
    assert_string_equal(s.ev, "A0m O1:10.0.0.1:8080 ");
    static const uint8_t end2[] = {0, 4, 0, 2, 3, 2};
    assert_int_equal(s.client.len, sizeof end2);
    assert_memory_equal(s.client.p, end2, sizeof end2);
    seen_free(&s);
    free_state(st);
    free(w.p);
    free(wire.p);
    ss->creds_free(creds);
    sv_replay_free(rp);
}

/* A chunk straddles two frames, and a later chunk in the same frame is corrupt: the chunks
 * before it reach the outbound (their plaintext is read after feed() returned, while the
 * session has ended), then the session alone ends. */
static void ss_mux__corrupt_chunk_after_carried_ones__data_then_end(void **state)
{
    (void)state;
    void *creds = new_creds();
    uint8_t *p = pattern(60, 4);
    bytes w = ss_wire(creds, 1, p, 60, 10), wire = {0};
    w.p[w.len - 1] ^= 1; /* the last chunk's tag */
    size_t first = 16 + 18 + 10 + 16 + 5; /* salt, length, 10 bytes, tag; 5 of the next */
    mux_new(&wire, 1, 1, w.p, first);
    mux_keep(&wire, 1, w.p + first, w.len - first);
    for (size_t step = 0; step <= 1; step++) {
        void *st = new_state();
        seen s = {0};
        drive(st, creds, &wire, step ? 1 : wire.len, &s);
        assert_int_equal(s.error, 0);
        assert_string_equal(s.ev, "A1m O1:10.0.0.1:8080 C1 ");
        assert_int_equal(s.data[1].len, 3 + 5 * 10);
        assert_memory_equal(s.data[1].p, p, 3 + 5 * 10);
        static const uint8_t end1[] = {0, 4, 0, 1, 3, 2};
        assert_int_equal(s.client.len, sizeof end1);
        assert_memory_equal(s.client.p, end1, sizeof end1);
        seen_free(&s);
        free_state(st);
    }
    free(p);
    free(w.p);
    free(wire.p);
    ss->creds_free(creds);
}

/* Unknown key on the first session: drain, nothing answered. */
static void ss_mux__wrong_key__drain_without_answer(void **state)
{
    (void)state;
    void *creds = new_creds();
    uint8_t p[100] = {0};
    bytes w = ss_wire(creds, 0, p, sizeof p, 64), wire = {0};
    w.p[20] ^= 1; /* the first length chunk no longer opens */
    mux_new(&wire, 1, 1, w.p, w.len);
    for (size_t step = 0; step <= 1; step++) {
        void *st = new_state();
        seen s = {0};
        drive(st, creds, &wire, step ? 1 : wire.len, &s);
        assert_int_equal(s.error, -EBADMSG);
        assert_int_equal(s.policy, SV_PROBE_DRAIN);
        assert_string_equal(s.ev, "");
        assert_int_equal(s.client.len, 0);
        seen_free(&s);
        free_state(st);
    }
    free(w.p);
    free(wire.p);
    ss->creds_free(creds);
}

/* One user per connection: a session of another user gets End (error) and no open; a UDP
 * session too; a Keep for an unknown session gets End. Before authentication nothing answers. */
static void ss_mux__other_user_udp_unknown__ended(void **state)
{
    (void)state;
    void *creds = new_creds();
    uint8_t p[50] = {1};
    bytes wa = ss_wire(creds, 0, p, sizeof p, 64), wb = ss_wire(creds, 1, p, sizeof p, 64);
    bytes wire = {0};
    mux_new(&wire, 9, 2, p, 5);     /* UDP before authentication: ended in silence */
    mux_new(&wire, 1, 1, wa.p, wa.len);
    mux_new(&wire, 2, 1, wb.p, wb.len);
    mux_new(&wire, 3, 2, p, 5);     /* UDP */
    mux_keep(&wire, 4, p, 3);       /* unknown */
    mux_keep(&wire, 1, p, 0);       /* still open: nothing */
    void *st = new_state();
    seen s = {0};
    drive(st, creds, &wire, 0, &s);
    assert_int_equal(s.error, 0);
    assert_string_equal(s.ev, "A0m O1:10.0.0.1:8080 ");
    static const uint8_t ends[] = {0, 4, 0, 2, 3, 2, 0, 4, 0, 3, 3, 2, 0, 4, 0, 4, 3, 0};
    assert_int_equal(s.client.len, sizeof ends);
    assert_memory_equal(s.client.p, ends, sizeof ends);
    assert_int_equal(s.data[1].len, sizeof p);
    seen_free(&s);
    free_state(st);
    free(wa.p);
    free(wb.p);
    free(wire.p);
    ss->creds_free(creds);
}

/* More unauthenticated sessions than SV_SS_MUX_UNAUTH_MAX: a probe, drained. */
static void ss_mux__too_many_sessions_before_auth__drain(void **state)
{
    (void)state;
    void *creds = new_creds();
    bytes wire = {0};
    uint8_t b = 0;
    for (uint16_t id = 1; id <= SV_SS_MUX_UNAUTH_MAX + 1; id++)
        mux_new(&wire, id, 1, &b, 1);
    void *st = new_state();
    seen s = {0};
    drive(st, creds, &wire, 0, &s);
    assert_int_equal(s.policy, SV_PROBE_DRAIN);
    assert_int_equal(s.client.len, 0);
    seen_free(&s);
    free_state(st);
    free(wire.p);
    ss->creds_free(creds);
}

/* Downstream: Keep frames of at most 65535 bytes whose Shadowsocks stream (the user's key)
 * decodes to the bytes framed; frame_end gives End and forgets the stream. */
static void ss_mux__frame__keep_frames_decode_and_end(void **state)
{
    (void)state;
    void *creds = new_creds();
    uint8_t p[20] = {0};
    bytes w = ss_wire(creds, 1, p, sizeof p, 64), wire = {0};
    mux_new(&wire, 5, 1, w.p, w.len);
    void *st = new_state();
    seen s = {0};
    drive(st, creds, &wire, 0, &s);
    assert_string_equal(s.ev, "A1m O5:10.0.0.1:8080 ");

    /* the downstream starts with an address so that a server-side core decodes it */
    size_t n = 65536;
    uint8_t *down = pattern(n, 3);
    static const uint8_t addr[] = {0x01, 1, 2, 3, 4, 0, 80};
    memcpy(down, addr, sizeof addr);
    assert_true(ops->frame_max(n) <= n + 4096);
    uint8_t *out = malloc(ops->frame_max(n));
    ssize_t len = ops->frame(st, creds, 5, down, n, out, ops->frame_max(n));
    assert_true(len > 0 && (size_t)len <= ops->frame_max(n));
    assert_int_equal(ops->frame(st, creds, 5, down, n, out, ops->frame_max(n) - 1), -EMSGSIZE);
    assert_int_equal(ops->frame(st, creds, 6, down, n, out, ops->frame_max(n)), 0);
    bytes inner = {0};
    for (size_t at = 0; at < (size_t)len;) {
        assert_true(at + SV_MUX_HEAD_LEN <= (size_t)len);
        const uint8_t *h = out + at;
        assert_int_equal(h[0] << 8 | h[1], 4);
        assert_int_equal(h[2] << 8 | h[3], 5);
        assert_int_equal(h[4], SV_MUX_KEEP);
        assert_int_equal(h[5], 1);
        size_t dl = (size_t)(h[6] << 8 | h[7]);
        put(&inner, h + SV_MUX_HEAD_LEN, dl);
        at += SV_MUX_HEAD_LEN + dl;
        assert_true(at <= (size_t)len);
    }
    sv_ss_tcp dec = {0};
    assert_int_equal(sv_ss_tcp_init(&dec, k_in.ss_cipher), 0);
    bytes plain = {0};
    for (size_t at = 0; at < inner.len;) {
        sv_ss_out o = {0};
        ssize_t r = sv_ss_tcp_feed(&dec, sv_ss_creds_ring(creds), NULL, inner.p + at,
                                   inner.len - at, &o);
        assert_true(r > 0);
        put(&plain, o.data, o.len);
        at += (size_t)r;
    }
    assert_int_equal(dec.user, 1);
    assert_int_equal(plain.len, n - sizeof addr);
    assert_memory_equal(plain.p, down + sizeof addr, n - sizeof addr);
    sv_ss_tcp_deinit(&dec);

    uint8_t end[SV_MUX_END_LEN];
    static const uint8_t want[] = {0, 4, 0, 5, 3, 2};
    assert_int_equal(sv_proto_end(ops)->frame_end(st, creds, 5, true, end, sizeof end),
                     SV_MUX_END_LEN);
    assert_memory_equal(end, want, sizeof want);
    assert_int_equal(sv_proto_end(ops)->frame_end(st, creds, 5, true, end, sizeof end), 0);
    assert_int_equal(ops->frame(st, creds, 5, down, n, out, ops->frame_max(n)), 0);
    free(inner.p);
    free(plain.p);
    free(out);
    free(down);
    seen_free(&s);
    free_state(st);
    free(w.p);
    free(wire.p);
    ss->creds_free(creds);
}

/* issue 13: the runtime's first guesses (no hint yet, SV_SS_GUESSES keys) */
#define GUESSES 16
#define MANY 40 /* users: more than the guesses */
#define LAST 30 /* a user past them in index order */

/* Sessions 1..@p n of a connection, session i of user @p users[i - 1], each whole in its New
 * frame (@p split: session 1's salt and length chunk cut over its New and a Keep frame). */
static bytes sessions_of(const void *creds, const int *users, uint16_t n, bool split)
{
    uint8_t p[40];
    memset(p, 'x', sizeof p);
    bytes wire = {0};
    for (uint16_t id = 1; id <= n; id++) {
        bytes w = ss_wire(creds, users[id - 1], p, sizeof p, 64);
        size_t cut = id == 1 && split ? 20 : w.len;
        mux_new(&wire, id, 1, w.p, cut);
        if (cut < w.len)
            mux_keep(&wire, id, w.p + cut, w.len - cut);
        free(w.p);
    }
    return wire;
}

/* With the runtime's guide, a never-seen client's first session asks for a scan (SV_FX_SCAN
 * after the first guesses), whose answer is checked with no further trial; every later session
 * tries the connection's user's key alone: one trial each, never a scan. Whole, byte at a time
 * (the first chunk then straddles the session's carry) and in odd pieces. */
static void ss_mux__later_sessions__one_trial_each(void **state)
{
    (void)state;
    void *creds = new_creds_n(MANY);
    static const int users[] = {LAST, LAST, LAST, LAST};
    for (int split = 0; split <= 1; split++) {
        bytes wire = sessions_of(creds, users, 4, split);
        for (size_t step = 0; step <= 2; step++) {
            void *st = new_state();
            assert_non_null(sv_proto_guide(ops));
            sv_proto_guide(ops)->set_guide(st, -1, NULL, GUESSES);
            seen s = {0};
            drive(st, creds, &wire, step == 2 ? wire.len : step, &s);
            assert_int_equal(s.error, 0);
            assert_string_equal(s.ev, "S A30m O1:10.0.0.1:8080 O2:10.0.0.1:8080 "
                                      "O3:10.0.0.1:8080 O4:10.0.0.1:8080 ");
            assert_int_equal(s.scans, 1);
            assert_int_equal(s.scan_keys, LAST + 1);
            assert_int_equal(s.lookups, 1 + 3);
            assert_int_equal(s.keys, GUESSES + 3);
            assert_int_equal(s.client.len, 0);
            for (int k = 1; k <= 4; k++)
                assert_int_equal(s.data[k].len, 40);
            seen_free(&s);
            free_state(st);
        }
        free(wire.p);
    }
    ss->creds_free(creds);
}

/* A later session of another user (one the first guesses would not even reach) is ended with
 * End (error) after one trial, with no scan; the connection's user goes on. */
static void ss_mux__later_session_of_other_user__ended_without_scan(void **state)
{
    (void)state;
    void *creds = new_creds_n(MANY);
    static const int users[] = {3, LAST, 3};
    bytes wire = sessions_of(creds, users, 3, false);
    for (size_t step = 0; step <= 1; step++) {
        void *st = new_state();
        assert_non_null(sv_proto_guide(ops));
        sv_proto_guide(ops)->set_guide(st, -1, NULL, GUESSES);
        seen s = {0};
        drive(st, creds, &wire, step ? 1 : wire.len, &s);
        assert_int_equal(s.error, 0);
        assert_string_equal(s.ev, "A3m O1:10.0.0.1:8080 O3:10.0.0.1:8080 ");
        static const uint8_t end2[] = {0, 4, 0, 2, 3, 2};
        assert_int_equal(s.client.len, sizeof end2);
        assert_memory_equal(s.client.p, end2, sizeof end2);
        assert_int_equal(s.scans, 0);
        assert_int_equal(s.lookups, 3);
        assert_int_equal(s.keys, 4 + 1 + 1); /* users 0..3 in index order, then one each */
        assert_int_equal(s.data[2].len, 0);
        seen_free(&s);
        free_state(st);
    }
    free(wire.p);
    ss->creds_free(creds);
}

/* The first session and the scan: the IP's hint finds it in one trial (no scan); a scan's
 * answer "none" (or refused over its budget) and a wrong answer fail the client as a wrong key
 * does (drain, nothing answered, no user named); the right answer authenticates, also when the
 * scanned bytes straddled two frames. */
static void ss_mux__scan_result_first_session(void **state)
{
    (void)state;
    void *creds = new_creds_n(MANY);
    static const int users[] = {LAST, LAST};
    for (int split = 0; split <= 1; split++) {
        bytes wire = sessions_of(creds, users, 2, split);
        static const struct {
            int hint;
            bool answer_set;
            int answer;
            const char *ev;
            unsigned scans, keys;
            int error;
        } cases[] = {
            {LAST, false, 0, "A30m O1:10.0.0.1:8080 O2:10.0.0.1:8080 ", 0, 1 + 1, 0},
            {-1, true, -1, "S ", 1, GUESSES, -EBADMSG},
            {-1, true, 7, "S ", 1, GUESSES, -EBADMSG},
            {5, true, LAST, "S A30m O1:10.0.0.1:8080 O2:10.0.0.1:8080 ", 1, GUESSES + 1, 0},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            void *st = new_state();
            assert_non_null(sv_proto_guide(ops));
            sv_proto_guide(ops)->set_guide(st, cases[i].hint, NULL, GUESSES);
            seen s = {.answer_set = cases[i].answer_set, .answer = cases[i].answer};
            drive(st, creds, &wire, split ? 7 : wire.len, &s);
            assert_string_equal(s.ev, cases[i].ev);
            assert_int_equal(s.error, cases[i].error);
            if (cases[i].error != 0)
                assert_int_equal(s.policy, SV_PROBE_DRAIN);
            assert_int_equal(s.client.len, 0);
            assert_int_equal(s.scans, cases[i].scans);
            assert_int_equal(s.keys, cases[i].keys);
            seen_free(&s);
            free_state(st);
        }
        free(wire.p);
    }
    ss->creds_free(creds);
}

/* A first session whose key was found (here by a scan) but whose header has not come yet: a
 * second session starting meanwhile tries that key first (one trial, no second scan), and
 * authenticates the connection with its own header. */
static void ss_mux__second_session_before_first_header__no_second_scan(void **state)
{
    (void)state;
    void *creds = new_creds_n(MANY);
    uint8_t p[40];
    memset(p, 'x', sizeof p);
    bytes w1 = ss_wire(creds, LAST, p, sizeof p, 64), w2 = ss_wire(creds, LAST, p, sizeof p, 64);
    size_t cut = sv_ss_key_len(k_in.ss_cipher) + 2 + SV_SS_TAG + 3; /* into the header chunk */
    bytes wire = {0};
    mux_new(&wire, 1, 1, w1.p, cut);
    mux_new(&wire, 2, 1, w2.p, w2.len);
    mux_keep(&wire, 1, w1.p + cut, w1.len - cut);
    for (size_t step = 0; step <= 1; step++) {
        void *st = new_state();
        sv_proto_guide(ops)->set_guide(st, -1, NULL, GUESSES);
        seen s = {0};
        drive(st, creds, &wire, step ? 1 : wire.len, &s);
        assert_int_equal(s.error, 0);
        assert_string_equal(s.ev, "S A30m O2:10.0.0.1:8080 O1:10.0.0.1:8080 ");
        assert_int_equal(s.scans, 1);
        assert_int_equal(s.keys, GUESSES + 1);
        assert_int_equal(s.data[1].len, 40);
        assert_int_equal(s.data[2].len, 40);
        seen_free(&s);
        free_state(st);
    }
    free(w1.p);
    free(w2.p);
    free(wire.p);
    ss->creds_free(creds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ss_mux__whole_byte_at_a_time_and_pieces__same_effects),
        cmocka_unit_test(ss_mux__random_frames_and_pieces__every_byte),
        cmocka_unit_test(ss_mux__replayed_salt_after_auth__session_ended),
        cmocka_unit_test(ss_mux__corrupt_chunk_after_carried_ones__data_then_end),
        cmocka_unit_test(ss_mux__wrong_key__drain_without_answer),
        cmocka_unit_test(ss_mux__other_user_udp_unknown__ended),
        cmocka_unit_test(ss_mux__too_many_sessions_before_auth__drain),
        cmocka_unit_test(ss_mux__frame__keep_frames_decode_and_end),
        cmocka_unit_test(ss_mux__later_sessions__one_trial_each),
        cmocka_unit_test(ss_mux__later_session_of_other_user__ended_without_scan),
        cmocka_unit_test(ss_mux__scan_result_first_session),
        cmocka_unit_test(ss_mux__second_session_before_first_header__no_second_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
