/*
 * Fuzz harness: Trojan server core (sv_trojan_ops: feed, frame_datagram).
 * Input: byte 0 picks the split pattern, the rest is the client's plaintext after TLS.
 * The credential table holds the vectors' password (user 1), so seeds made from the vectors go
 * past authentication into CONNECT relay and UDP packet parsing.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes; an error is the last effect of a failing call and no call succeeds
 * after it; a fallback comes before authentication and covers every byte received, nothing having
 * been consumed; the core never stalls with carry_max bytes buffered; each datagram framed back
 * gives the packet's wire bytes; the same outcome whole and split.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/trojan.h"
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

/* The datagram framed back must be the packet's own wire bytes, which end at its payload's end. */
static void check_reframe(void *st, const void *creds, const sv_effect *e, const uint8_t *buf)
{
    static uint8_t out[SV_TROJAN_UDP_PACKET_MAX];
    ssize_t w = sv_proto_datagram(&sv_trojan_ops)
                    ->frame_datagram(st, creds, 0, &e->dest, e->data, e->len, out, sizeof out);
    FUZZ_CHECK(w > 0 && (size_t)w >= e->len + 4);
    const uint8_t *end = e->data + e->len;
    FUZZ_CHECK((size_t)(end - buf) >= (size_t)w);
    FUZZ_CHECK(memcmp(out, end - w, (size_t)w) == 0);
}

typedef struct run_state {
    bool authed, tcp, udp;
} run_state;

static void check_effects(void *st, const void *creds, const sv_effects *fx, ssize_t r,
                          const uint8_t *buf, size_t have, size_t in, run_state *rs,
                          transcript *ev, transcript *out)
{
    FUZZ_CHECK(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        if (e->data != NULL)
            FUZZ_CHECK(inside(e->data, e->len, buf, have) ||
                       inside(e->data, e->len, (const uint8_t *)st, sv_trojan_ops.state_size));
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            FUZZ_CHECK(!rs->authed && i == 0 && e->principal >= 0 && e->principal < 3);
            FUZZ_CHECK(fx->n >= 2 && fx->v[1].kind == SV_FX_OPEN);
            rs->authed = true;
            tr_put(ev, "A", 1);
            tr_put(ev, &e->principal, sizeof e->principal);
            break;
        case SV_FX_OPEN:
            FUZZ_CHECK(rs->authed && !rs->tcp && !rs->udp && e->stream == 0);
            FUZZ_CHECK(e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP);
            rs->tcp = e->dest.network == SV_NET_TCP;
            rs->udp = !rs->tcp;
            tr_put(ev, "O", 1);
            tr_dest(ev, &e->dest);
            break;
        case SV_FX_TO_OUTBOUND:
            FUZZ_CHECK(rs->tcp && e->stream == 0 && e->len > 0 && e->data != NULL);
            FUZZ_CHECK(inside(e->data, e->len, buf, have));
            tr_put(out, e->data, e->len);
            break;
        case SV_FX_DATAGRAM:
            FUZZ_CHECK(rs->udp && e->stream == 0 && e->dest.network == SV_NET_UDP);
            FUZZ_CHECK(e->len <= SV_TROJAN_UDP_PAYLOAD_MAX && inside(e->data, e->len, buf, have));
            check_reframe(st, creds, e, buf);
            tr_put(ev, "D", 1);
            tr_dest(ev, &e->dest);
            tr_put(ev, &e->len, sizeof e->len);
            tr_put(ev, e->data, e->len);
            break;
        case SV_FX_ERROR:
            FUZZ_CHECK(i == fx->n - 1 && r < 0 && e->error == (int)r);
            if (e->policy == SV_PROBE_FALLBACK)
                FUZZ_CHECK(!rs->authed && e->data == buf && e->len == have && in == have);
            else
                FUZZ_CHECK(e->policy == SV_PROBE_CLOSE && rs->authed && e->data == NULL);
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

static void *g_creds;

static void creds_once(void)
{
    if (g_creds != NULL)
        return;
    static char *secrets[] = {"fuzz-user-0", "katana-trojan-pass", "fuzz-user-2"};
    sv_user users[3];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 3; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 3};
    sv_error err;
    FUZZ_CHECK(sv_trojan_ops.creds_new(NULL, &set, &g_creds, &err) == 0);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like carry buffer. */
static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, transcript *ev,
               transcript *out)
{
    const sv_proto_ops *ops = &sv_trojan_ops;
    void *st = calloc(1, ops->state_size);
    FUZZ_CHECK(st != NULL && ops->init(st, NULL) == 0);
    size_t cap = n + ops->carry_max;
    uint8_t *buf = malloc(cap ? cap : 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    int rc = 0;
    run_state rs = {0};
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        ssize_t r = ops->feed(st, g_creds, buf, have, &fx);
        check_effects(st, g_creds, &fx, r, buf, have, in, &rs, ev, out);
        if (r < 0) {
            rc = (int)r;
            /* No success after an error. */
            FUZZ_CHECK(ops->feed(st, g_creds, buf, have, &fx) < 0);
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

    transcript ev[2] = {{0}, {0}}, out[2] = {{0}, {0}};
    int rc0 = run(wire, n, n + 1, 0, &ev[0], &out[0]);
    int rc1 = run(wire, n, piece, data[0], &ev[1], &out[1]);
    FUZZ_CHECK(rc0 == rc1);
    FUZZ_CHECK(ev[0].len == ev[1].len && out[0].len == out[1].len);
    FUZZ_CHECK(ev[0].len == 0 || memcmp(ev[0].b, ev[1].b, ev[0].len) == 0);
    FUZZ_CHECK(out[0].len == 0 || memcmp(out[0].b, out[1].b, out[0].len) == 0);
    for (int i = 0; i < 2; i++) {
        free(ev[i].b);
        free(out[i].b);
    }
    return 0;
}
