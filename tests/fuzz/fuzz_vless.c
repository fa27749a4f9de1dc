/*
 * Fuzz harness: VLESS server core (sv_vless_ops: feed, frame, frame_datagram).
 * Input: byte 0 picks the split pattern (value % 6) and whether the inbound has a fallback
 * (value / 6 odd); the rest is the client's plaintext after TCP/TLS. The credential table holds
 * the vectors' UUID (user 1), so seeds made from the vectors go past authentication into TCP
 * relay and UDP datagram parsing.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes; an error is the last effect of a failing call and no call succeeds
 * after it; a drain or fallback comes before authentication and covers every byte received,
 * nothing having been consumed, and is a fallback exactly when the inbound has one; the core
 * never stalls with carry_max bytes buffered; each datagram framed back gives its wire bytes,
 * the first behind the response header; the same outcome whole and split.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/mux.h"
#include "supervisor/proto/vless.h"
#include "tests/fuzz/fuzz.h"

/* What a run produced, as byte strings: events, and the outbound stream (cut-independent). */
typedef struct transcript {
    uint8_t *b;
    size_t len, cap;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->b = realloc(t->b, t->cap);
        FUZZ_CHECK(t->b != NULL);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
}

static void tr_dest(transcript *t, const sv_dest *d)
{
    char s[300];
    int k = sv_dest_format(d, s, sizeof s);
    FUZZ_CHECK(k > 0 && (size_t)k < sizeof s);
    tr_put(t, s, (size_t)k);
    tr_put(t, &d->network, sizeof d->network);
}

static bool inside(const uint8_t *x, size_t len, const uint8_t *lo, size_t n)
{
    return x >= lo && x <= lo + n && len <= (size_t)(lo + n - x);
}

/* The datagram framed back must be its own wire bytes (length, payload), which end at the
 * payload's end; the first reply of a connection also carries the response header. */
static void check_reframe(void *down, const void *creds, const sv_effect *e, const uint8_t *buf,
                          bool first)
{
    static uint8_t out[2 + 2 + SV_VLESS_UDP_PAYLOAD_MAX];
    ssize_t w = sv_proto_datagram(&sv_vless_ops)
                    ->frame_datagram(down, creds, 0, &e->dest, e->data, e->len, out, sizeof out);
    size_t head = first ? SV_VLESS_RESPONSE_LEN : 0;
    FUZZ_CHECK(w > 0 && (size_t)w == head + 2 + e->len);
    FUZZ_CHECK(!first || (out[0] == 0 && out[1] == 0));
    const uint8_t *end = e->data + e->len;
    FUZZ_CHECK((size_t)(end - buf) >= e->len + 2);
    FUZZ_CHECK(memcmp(out + head, end - e->len - 2, e->len + 2) == 0);
}

typedef struct run_state {
    bool authed, tcp, udp, mux, fallback, replied;
    void *down; /* a second connection state for the downstream checks */
    transcript *answers; /* the End answers' frames, in their own order (ahead of the call's) */
} run_state;

static void check_effects(void *st, const void *creds, const sv_effects *fx, ssize_t r,
                          const uint8_t *buf, size_t have, size_t in, run_state *rs,
                          transcript *ev, transcript *out)
{
    FUZZ_CHECK(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        if (e->data != NULL && e->kind != SV_FX_TO_CLIENT)
            FUZZ_CHECK(inside(e->data, e->len, buf, have) ||
                       inside(e->data, e->len, (const uint8_t *)st, sv_vless_ops.state_size));
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            FUZZ_CHECK(!rs->authed && i == 0 && e->principal >= 0 && e->principal < 3);
            FUZZ_CHECK(e->multiplexed || (fx->n >= 2 && fx->v[1].kind == SV_FX_OPEN));
            rs->authed = true;
            rs->mux = e->multiplexed;
            tr_put(ev, "A", 1);
            tr_put(ev, &e->principal, sizeof e->principal);
            break;
        case SV_FX_OPEN:
            if (rs->mux) { /* a Mux.Cool session (command 3) */
                FUZZ_CHECK(e->stream <= 0xffff);
                tr_put(ev, "o", 1);
                tr_put(ev, &e->stream, sizeof e->stream);
                tr_dest(ev, &e->dest);
                break;
            }
            FUZZ_CHECK(rs->authed && !rs->tcp && !rs->udp && e->stream == 0);
            FUZZ_CHECK(e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP);
            rs->tcp = e->dest.network == SV_NET_TCP;
            rs->udp = !rs->tcp;
            tr_put(ev, "O", 1);
            tr_dest(ev, &e->dest);
            break;
        case SV_FX_TO_OUTBOUND:
            FUZZ_CHECK((rs->mux || (rs->tcp && e->stream == 0)) && e->len > 0 && e->data != NULL);
            FUZZ_CHECK(inside(e->data, e->len, buf, have));
            tr_put(out, e->data, e->len);
            break;
        case SV_FX_DATAGRAM:
            if (rs->mux) {
                FUZZ_CHECK(e->len <= 2048 && inside(e->data, e->len, buf, have));
                tr_put(ev, "d", 1);
                tr_put(ev, &e->len, sizeof e->len);
                tr_put(ev, e->data, e->len);
                break;
            }
            FUZZ_CHECK(rs->udp && e->stream == 0 && e->dest.network == SV_NET_UDP);
            FUZZ_CHECK(e->len <= SV_VLESS_UDP_PAYLOAD_MAX && inside(e->data, e->len, buf, have));
            check_reframe(rs->down, creds, e, buf, !rs->replied);
            rs->replied = true;
            tr_put(ev, "D", 1);
            tr_dest(ev, &e->dest);
            tr_put(ev, &e->len, sizeof e->len);
            tr_put(ev, e->data, e->len);
            break;
        case SV_FX_TO_CLIENT: { /* End frames for unknown sessions, the first after 00 00 */
            size_t head = rs->replied ? 0 : SV_VLESS_RESPONSE_LEN;
            FUZZ_CHECK(rs->mux && e->data != NULL);
            FUZZ_CHECK(e->len > head && (e->len - head) % SV_MUX_END_LEN == 0);
            FUZZ_CHECK(head == 0 || (e->data[0] == 0 && e->data[1] == 0));
            rs->replied = true;
            tr_put(rs->answers, e->data + head, e->len - head);
            break;
        }
        case SV_FX_CLOSE:
            FUZZ_CHECK(rs->mux);
            tr_put(ev, "c", 1);
            tr_put(ev, &e->stream, sizeof e->stream);
            break;
        case SV_FX_ERROR:
            FUZZ_CHECK(i == fx->n - 1 && r < 0 && e->error == (int)r);
            if (e->policy == SV_PROBE_CLOSE)
                FUZZ_CHECK(e->data == NULL && e->len == 0);
            else
                FUZZ_CHECK(!rs->authed && e->data == buf && e->len == have && in == have &&
                           e->policy == (rs->fallback ? SV_PROBE_FALLBACK : SV_PROBE_DRAIN));
            tr_put(ev, "E", 1);
            tr_put(ev, &e->error, sizeof e->error);
            tr_put(ev, &e->policy, sizeof e->policy);
            break;
        default:
            FUZZ_CHECK(!"unexpected effect");
        }
    }
    if (r < 0)
        FUZZ_CHECK(fx->n > 0 && fx->v[fx->n - 1].kind == SV_FX_ERROR);
}

static void *g_creds[2]; /* without and with a fallback */

static void creds_once(void)
{
    if (g_creds[0] != NULL)
        return;
    static char *secrets[] = {"0b8e57f4-3e7c-4d6a-9c11-5f2b7e9a0c01",
                              "27848739-7e62-4138-9fd3-098a63964b6b",
                              "0b8e57f4-3e7c-4d6a-9c11-5f2b7e9a0c03"};
    sv_user users[3];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 3; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 3};
    sv_inbound_spec in = {.tag = "fuzz", .fallback = "127.0.0.1:80"};
    sv_error err;
    FUZZ_CHECK(sv_vless_ops.creds_new(NULL, &set, &g_creds[0], &err) == 0);
    FUZZ_CHECK(sv_vless_ops.creds_new(&in, &set, &g_creds[1], &err) == 0);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like carry buffer. */
static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, bool fallback,
               transcript *ev, transcript *out, transcript *answers)
{
    const void *creds = g_creds[fallback];
    const sv_proto_ops *ops = &sv_vless_ops;
    void *st = calloc(1, ops->state_size);
    FUZZ_CHECK(st != NULL && ops->init(st, NULL) == 0);
    size_t cap = n + ops->carry_max;
    uint8_t *buf = malloc(cap ? cap : 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    int rc = 0;
    run_state rs = {.fallback = fallback, .down = calloc(1, ops->state_size),
                    .answers = answers};
    FUZZ_CHECK(rs.down != NULL && ops->init(rs.down, NULL) == 0);
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        ssize_t r = ops->feed(st, creds, buf, have, &fx);
        check_effects(st, creds, &fx, r, buf, have, in, &rs, ev, out);
        if (r < 0) {
            rc = (int)r;
            /* No success after an error. */
            FUZZ_CHECK(ops->feed(st, creds, buf, have, &fx) < 0);
            FUZZ_CHECK(fx.n == 1 && fx.v[0].kind == SV_FX_ERROR);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (r > 0) {
            FUZZ_CHECK(rs.authed);
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        FUZZ_CHECK(fx.n == 0);
        FUZZ_CHECK(have <= ops->carry_max); /* never stalls with a full carry */
        if (in == n)
            break;
        seed = seed * 1103515245u + 12345u;
        size_t k = piece > n ? n : 1 + (seed >> 8) % piece;
        k = k < n - in ? k : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    tr_put(ev, "R", 1);
    tr_put(ev, &rc, sizeof rc);
    free(buf);
    ops->deinit(st);
    free(st);
    ops->deinit(rs.down);
    free(rs.down);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    creds_once();
    static const size_t pieces[] = {1, 3, 17, 64, 1000, 20000};
    size_t piece = pieces[data[0] % 6];
    const uint8_t *wire = data + 1;
    size_t n = size - 1;

    transcript ev[2] = {{0}, {0}}, out[2] = {{0}, {0}}, ans[2] = {{0}, {0}};
    bool fallback = (data[0] / 6) & 1;
    int rc0 = run(wire, n, n + 1, 0, fallback, &ev[0], &out[0], &ans[0]);
    int rc1 = run(wire, n, piece, data[0], fallback, &ev[1], &out[1], &ans[1]);
    FUZZ_CHECK(rc0 == rc1);
    FUZZ_CHECK(ev[0].len == ev[1].len && out[0].len == out[1].len);
    FUZZ_CHECK(ev[0].len == 0 || memcmp(ev[0].b, ev[1].b, ev[0].len) == 0);
    FUZZ_CHECK(out[0].len == 0 || memcmp(out[0].b, out[1].b, out[0].len) == 0);
    FUZZ_CHECK(ans[0].len == ans[1].len &&
               (ans[0].len == 0 || memcmp(ans[0].b, ans[1].b, ans[0].len) == 0));
    for (int i = 0; i < 2; i++) {
        free(ev[i].b);
        free(out[i].b);
        free(ans[i].b);
    }
    return 0;
}
