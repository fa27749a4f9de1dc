/*
 * Fuzz harness: VMess AEAD server core (sv_vmess_ops: feed, frame, frame_datagram, frame_end).
 * Input: byte 0 picks the split pattern, the rest is the client's bytes. The credential table
 * holds the vectors' UUID (user 1) and the clock is set to the seeds' timestamp (captured from
 * v2ray 4.34, PROTOCOLS.md §6), so seeds go past authentication into body chunk parsing; no
 * replay filter is attached so the same request runs twice.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes; an error is the last effect of a failing call and no call succeeds
 * after it; failures before authentication drain, later ones close (Mux.Cool excepted); the core
 * never stalls with carry_max bytes buffered; framing stays within frame_max; the same outcome
 * whole and split.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/vmess.h"
#include "tests/fuzz/fuzz.h"

/* The seeds' clock: the vectors' first timestamp (captures span 1796013465..1796013472). */
#define FUZZ_NOW 1796013468

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

static bool inside(const uint8_t *x, size_t len, const uint8_t *lo, size_t n)
{
    return x >= lo && x <= lo + n && len <= (size_t)(lo + n - x);
}

typedef struct run_state {
    bool authed, udp;
} run_state;

static void check_effects(const sv_effects *fx, ssize_t r, const uint8_t *buf, size_t have,
                          run_state *rs, transcript *ev, transcript *out)
{
    FUZZ_CHECK(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            FUZZ_CHECK(!rs->authed && i == 0 && e->principal == 1);
            FUZZ_CHECK(fx->n >= 2 && fx->v[1].kind == SV_FX_OPEN);
            rs->authed = true;
            tr_put(ev, "A", 1);
            break;
        case SV_FX_OPEN: {
            FUZZ_CHECK(rs->authed && i == 1 && e->stream == 0);
            FUZZ_CHECK(e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP);
            rs->udp = e->dest.network == SV_NET_UDP;
            char s[300];
            int k = sv_dest_format(&e->dest, s, sizeof s);
            FUZZ_CHECK(k > 0 && (size_t)k < sizeof s);
            tr_put(ev, "O", 1);
            tr_put(ev, s, (size_t)k);
            break;
        }
        case SV_FX_TO_OUTBOUND:
            FUZZ_CHECK(rs->authed && !rs->udp && e->len > 0 && inside(e->data, e->len, buf, have));
            tr_put(out, e->data, e->len);
            break;
        case SV_FX_DATAGRAM:
            FUZZ_CHECK(rs->authed && rs->udp && e->len > 0 && e->len <= SV_VMESS_CHUNK_MAX);
            FUZZ_CHECK(inside(e->data, e->len, buf, have));
            tr_put(ev, "D", 1);
            tr_put(ev, &e->len, sizeof e->len);
            tr_put(ev, e->data, e->len);
            break;
        case SV_FX_ERROR:
            FUZZ_CHECK(i == fx->n - 1 && r < 0 && e->error == (int)r && e->data == NULL);
            if (!rs->authed)
                FUZZ_CHECK(e->policy == SV_PROBE_DRAIN ||
                           (e->policy == SV_PROBE_CLOSE && e->error == -EPROTONOSUPPORT));
            else
                FUZZ_CHECK(e->policy == SV_PROBE_CLOSE);
            tr_put(ev, "E", 1);
            tr_put(ev, &e->error, sizeof e->error);
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
    static char *uuids[] = {"0b3f4f6e-2f0a-4a7e-9d8e-5e6f1d2c3b4a",
                            "27848739-7e62-4138-9fd3-098a63964b6b",
                            "a1b2c3d4-0000-4000-8000-00000000000f"};
    sv_user users[3];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 3; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = uuids[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 3};
    sv_error err;
    FUZZ_CHECK(sv_vmess_ops.creds_new(NULL, &set, &g_creds, &err) == 0);
}

/* Frame a reply after authentication: within frame_max, and the end once. */
static void check_frames(void *st)
{
    static uint8_t out[SV_VMESS_RESP_HEADER + 3 * 8192];
    static const uint8_t reply[9000];
    const sv_proto_ops *ops = &sv_vmess_ops;
    sv_dest from = {.atyp = SV_ATYP_IPV4, .port = 53};
    ssize_t w =
        sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &from, reply, 100, out, sizeof out);
    FUZZ_CHECK(w == -EINVAL || (w > 0 && (size_t)w <= ops->frame_max(100)));
    w = ops->frame(st, g_creds, 0, reply, sizeof reply, out, sizeof out);
    FUZZ_CHECK(w > 0 && (size_t)w <= ops->frame_max(sizeof reply));
    w = sv_proto_end(ops)->frame_end(st, g_creds, 0, false, out, sizeof out);
    FUZZ_CHECK(w >= 0 && (size_t)w <= ops->frame_max(0));
}

static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, transcript *ev,
               transcript *out)
{
    const sv_proto_ops *ops = &sv_vmess_ops;
    void *st = calloc(1, ops->state_size);
    FUZZ_CHECK(st != NULL && ops->init(st, NULL) == 0);
    sv_proto_clock(ops)->set_time(st, FUZZ_NOW);
    size_t cap = n + ops->carry_max;
    uint8_t *buf = malloc(cap ? cap : 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    int rc = 0;
    run_state rs = {0};
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        fx.n = 0;
        ssize_t r = have > 0 ? ops->feed(st, g_creds, buf, have, &fx) : 0;
        check_effects(&fx, r, buf, have, &rs, ev, out);
        if (r < 0) {
            rc = (int)r;
            FUZZ_CHECK(ops->feed(st, g_creds, buf, have, &fx) < 0);
            FUZZ_CHECK(fx.n == 1 && fx.v[0].kind == SV_FX_ERROR);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        FUZZ_CHECK(fx.n == 0);
        FUZZ_CHECK(have <= ops->carry_max);
        if (in == n)
            break;
        seed = seed * 1103515245u + 12345u;
        size_t k = piece > n ? n : 1 + (seed >> 8) % piece;
        k = k < n - in ? k : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    if (rs.authed && rc == 0)
        check_frames(st);
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
