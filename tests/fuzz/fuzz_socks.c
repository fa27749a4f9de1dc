/*
 * Fuzz harness: SOCKS5 server core (sv_socks_ops: feed, frame).
 * Input: byte 0 picks the split pattern and the credential table (bit 7: the one-user table
 * with no_auth, else two users "fuzz-user-0" / "katana-socks-pass"); the rest is the client's
 * bytes. Seeds log in as those users, so they reach the request and the CONNECT relay.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes or the connection state (TO_CLIENT and answers in the state, outbound
 * bytes in the input); replies are the RFC 1928 / 1929 ones; an error is the last effect of a
 * failing call and every later call fails the same way with no answer; authentication comes
 * once, before OPEN; the core never stalls with carry_max bytes buffered; frame is a copy; the
 * same outcome whole and split.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/socks.h"
#include "tests/fuzz/fuzz.h"

/* What a run produced, as byte strings: events, and the outbound stream (cut-independent). */
typedef struct transcript {
    uint8_t *b;
    size_t len, cap;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->b = realloc(t->b, t->cap);
        FUZZ_CHECK(t->b != NULL);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
}

static bool inside(const uint8_t *x, size_t len, const void *lo, size_t n)
{
    const uint8_t *b = lo;
    return x >= b && x <= b + n && len <= (size_t)(b + n - x);
}

/* The bytes the core may write to the client, whole: 05 00 / 05 02, 01 00, the CONNECT reply. */
static bool known_reply(const uint8_t *p, size_t n)
{
    static const uint8_t ok[SV_SOCKS_REPLY_LEN] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    if (n == 2)
        return (p[0] == 5 && (p[1] == 0 || p[1] == 2)) || (p[0] == 1 && p[1] == 0);
    return n == sizeof ok && memcmp(p, ok, n) == 0;
}

/* The refusals the core may answer: 05 FF, 01 01, 05 07 / 05 08 with a zero IPv4 BND. */
static bool known_answer(int error, const uint8_t *p, size_t n)
{
    static const uint8_t zeros[6] = {0};
    if (n == 2)
        return error == -EACCES && ((p[0] == 5 && p[1] == 0xff) || (p[0] == 1 && p[1] == 1));
    return n == SV_SOCKS_REPLY_LEN && p[0] == 5 && p[2] == 0 && p[3] == 1 &&
           memcmp(p + 4, zeros, 6) == 0 &&
           ((p[1] == 7 && error == -EPROTONOSUPPORT) || (p[1] == 8 && error == -EAFNOSUPPORT));
}

typedef struct run_state {
    bool authed, open, udp;
} run_state;

static void check_effect(void *st, const sv_effect *e, bool last, ssize_t r, const uint8_t *buf,
                         size_t have, run_state *rs, transcript *ev, transcript *out)
{
    FUZZ_CHECK(e->stream == 0);
    switch (e->kind) {
    case SV_FX_TO_CLIENT:
        FUZZ_CHECK(!rs->open && inside(e->data, e->len, st, sv_socks_ops.state_size));
        FUZZ_CHECK(known_reply(e->data, e->len));
        tr_put(ev, "C", 1);
        tr_put(ev, e->data, e->len);
        break;
    case SV_FX_AUTHENTICATED:
        FUZZ_CHECK(!rs->authed && e->principal >= 0 && e->principal < 2 && !e->multiplexed);
        rs->authed = true;
        tr_put(ev, "A", 1);
        tr_put(ev, &e->principal, sizeof e->principal);
        break;
    case SV_FX_OPEN: {
        FUZZ_CHECK(rs->authed && !rs->open &&
                   (e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP));
        rs->open = true;
        rs->udp = e->dest.network == SV_NET_UDP;
        char s[300];
        int k = sv_dest_format(&e->dest, s, sizeof s);
        FUZZ_CHECK(k > 0 && (size_t)k < sizeof s);
        tr_put(ev, "O", 1);
        tr_put(ev, s, (size_t)k);
        break;
    }
    case SV_FX_TO_OUTBOUND:
        FUZZ_CHECK(rs->open && !rs->udp && e->len > 0 && inside(e->data, e->len, buf, have));
        tr_put(out, e->data, e->len);
        break;
    case SV_FX_ERROR:
        FUZZ_CHECK(last && r < 0 && e->error == (int)r);
        if (e->policy == SV_PROBE_ANSWER)
            FUZZ_CHECK(inside(e->data, e->len, st, sv_socks_ops.state_size) &&
                       known_answer(e->error, e->data, e->len));
        else
            FUZZ_CHECK(e->policy == SV_PROBE_CLOSE && e->len == 0 && e->error == -EPROTO);
        tr_put(ev, "E", 1);
        tr_put(ev, &e->error, sizeof e->error);
        tr_put(ev, &e->policy, sizeof e->policy);
        tr_put(ev, e->data, e->len);
        break;
    default:
        FUZZ_CHECK(!"unexpected effect");
    }
}

static void *g_creds[2];

static void creds_once(void)
{
    if (g_creds[0] != NULL)
        return;
    static char *secrets[] = {"fuzz-user-0", "katana-socks-pass"};
    sv_user users[2];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 2; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 2};
    sv_inbound_spec in = {.proxy_no_auth = false};
    sv_error err;
    FUZZ_CHECK(sv_socks_ops.creds_new(&in, &set, &g_creds[0], &err) == 0);
    set.n_users = 1;
    in.proxy_no_auth = true;
    FUZZ_CHECK(sv_socks_ops.creds_new(&in, &set, &g_creds[1], &err) == 0);
}

/* After CONNECT: the outbound's bytes come back as they are. */
static void check_frame(void *st, const void *creds, const uint8_t *p, size_t n)
{
    static uint8_t out[4096];
    size_t len = n < sizeof out ? n : sizeof out;
    if (len == 0)
        return;
    FUZZ_CHECK(sv_socks_ops.frame_max(len) == len);
    FUZZ_CHECK(sv_socks_ops.frame(st, creds, 0, p, len, out, sizeof out) == (ssize_t)len);
    FUZZ_CHECK(memcmp(out, p, len) == 0);
    FUZZ_CHECK(sv_socks_ops.frame(st, creds, 0, p, len, out, len - 1) == -EMSGSIZE);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like carry buffer. */
static int run(const void *creds, const uint8_t *wire, size_t n, size_t piece, uint32_t seed,
               transcript *ev, transcript *out)
{
    const sv_proto_ops *ops = &sv_socks_ops;
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
        ssize_t r = ops->feed(st, creds, buf, have, &fx);
        FUZZ_CHECK(fx.n <= SV_EFFECTS_MAX);
        for (unsigned i = 0; i < fx.n; i++)
            check_effect(st, &fx.v[i], i == fx.n - 1, r, buf, have, &rs, ev, out);
        if (r < 0) {
            FUZZ_CHECK(fx.n > 0 && fx.v[fx.n - 1].kind == SV_FX_ERROR);
            rc = (int)r;
            /* No success after an error, and no second answer. */
            FUZZ_CHECK(ops->feed(st, creds, buf, have, &fx) == r);
            FUZZ_CHECK(fx.n == 1 && fx.v[0].kind == SV_FX_ERROR &&
                       fx.v[0].policy == SV_PROBE_CLOSE && fx.v[0].len == 0);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (rs.open)
            check_frame(st, creds, buf, have);
        if (r > 0) {
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
    static const size_t pieces[] = {1, 2, 3, 7, 64, 1000};
    size_t piece = pieces[(data[0] & 0x7f) % 6];
    const void *creds = g_creds[data[0] >> 7];
    const uint8_t *wire = data + 1;
    size_t n = size - 1;

    /* the same bytes as a datagram on the UDP relay (RFC 1928 §7), and a reply framed back */
    sv_dest d;
    size_t off = 0;
    if (sv_proto_relay(&sv_socks_ops)->relay_open(wire, n, &d, &off) == 0) {
        FUZZ_CHECK(off <= n && d.network == SV_NET_UDP && wire[2] == 0);
        uint8_t framed[SV_DEST_WIRE_MAX + 3 + 64];
        size_t len = n - off < 64 ? n - off : 64;
        ssize_t w = sv_proto_datagram(&sv_socks_ops)
                        ->frame_datagram(NULL, creds, 0, &d, wire + off, len, framed,
                                         sizeof framed);
        sv_dest back;
        size_t boff = 0;
        FUZZ_CHECK(w > 0 && sv_proto_relay(&sv_socks_ops)
                                    ->relay_open(framed, (size_t)w, &back, &boff) == 0);
        FUZZ_CHECK(boff + len == (size_t)w && memcmp(framed + boff, wire + off, len) == 0);
    }

    transcript ev[2] = {{0}, {0}}, out[2] = {{0}, {0}};
    int rc0 = run(creds, wire, n, n + 1, 0, &ev[0], &out[0]);
    int rc1 = run(creds, wire, n, piece, data[0], &ev[1], &out[1]);
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
