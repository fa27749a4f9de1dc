/*
 * Fuzz harness: HTTP proxy server core (sv_http_proxy_ops: feed).
 * Input: byte 0 picks the split pattern, the rest is what the client sends.
 * The credential table holds "katana-http-user" (user 1; name = password), so seeds with
 * `Proxy-Authorization: Basic a2F0YW5hLWh0dHAtdXNlcjprYXRhbmEtaHR0cC11c2Vy` go past
 * authentication into the tunnel and the rewritten head.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes but the core's own (the rewritten head, a static answer, the 200
 * line); an error is the last effect of a failing call, before authentication an answered
 * refusal with nothing consumed, and no call succeeds after it; the rewritten head is a head
 * ending with "Connection: close" and holds no Proxy-Authorization; the core never stalls with
 * carry_max bytes buffered; the same outcome whole and split.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "supervisor/proto/http_proxy.h"
#include "tests/fuzz/fuzz.h"

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

/* The rewritten head: a request line, no credentials, "Connection: close" and the empty line. */
static void check_head(const uint8_t *p, size_t n)
{
    static const char tail[] = "\r\nConnection: close\r\n\r\n";
    FUZZ_CHECK(n > sizeof tail - 1);
    FUZZ_CHECK(memcmp(p + n - (sizeof tail - 1), tail, sizeof tail - 1) == 0);
    FUZZ_CHECK(memmem(p, n, "\r\n\r\n", 4) == p + n - 4);
    FUZZ_CHECK(memchr(p, ' ', n) != NULL && ((const uint8_t *)memchr(p, ' ', n))[1] == '/');
    for (size_t i = 0; i + 21 < n; i++)
        FUZZ_CHECK(strncasecmp((const char *)p + i, "\nProxy-Authorization:", 21) != 0);
}

typedef struct run_state {
    bool authed;
} run_state;

static void check_effects(const sv_effects *fx, ssize_t r, const uint8_t *buf, size_t have,
                          run_state *rs, transcript *ev, transcript *out)
{
    FUZZ_CHECK(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            FUZZ_CHECK(!rs->authed && i == 0 && e->principal >= 0 && e->principal < 3);
            rs->authed = true;
            tr_put(ev, "A", 1);
            tr_put(ev, &e->principal, sizeof e->principal);
            break;
        case SV_FX_TO_CLIENT:
            FUZZ_CHECK(rs->authed && i == 1 && e->len > 0);
            FUZZ_CHECK(memcmp(e->data, "HTTP/1.1 200 ", 13) == 0);
            tr_put(ev, "C", 1);
            break;
        case SV_FX_OPEN: {
            FUZZ_CHECK(rs->authed && e->stream == 0 && e->dest.network == SV_NET_TCP);
            char s[300];
            int k = sv_dest_format(&e->dest, s, sizeof s);
            FUZZ_CHECK(k > 0 && (size_t)k < sizeof s && e->dest.port != 0);
            tr_put(ev, "O", 1);
            tr_put(ev, s, (size_t)k);
            break;
        }
        case SV_FX_TO_OUTBOUND:
            FUZZ_CHECK(rs->authed && e->stream == 0 && e->len > 0 && e->data != NULL);
            if (!inside(e->data, e->len, buf, have)) {
                FUZZ_CHECK(i == 2 && fx->v[1].kind == SV_FX_OPEN);
                check_head(e->data, e->len);
            }
            tr_put(out, e->data, e->len);
            break;
        case SV_FX_ERROR:
            FUZZ_CHECK(i == fx->n - 1 && r < 0 && e->error == (int)r && !rs->authed);
            FUZZ_CHECK(e->policy == SV_PROBE_ANSWER || e->policy == SV_PROBE_CLOSE);
            if (e->policy == SV_PROBE_ANSWER)
                FUZZ_CHECK(e->len > 12 && memcmp(e->data, "HTTP/1.1 4", 10) == 0);
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
    static char *secrets[] = {"fuzz-user-0", "katana-http-user", "fuzz-user-2"};
    sv_user users[3];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 3; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 3};
    sv_error err;
    FUZZ_CHECK(sv_http_proxy_ops.creds_new(NULL, &set, &g_creds, &err) == 0);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like carry buffer. */
static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, transcript *ev,
               transcript *out)
{
    const sv_proto_ops *ops = &sv_http_proxy_ops;
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
        check_effects(&fx, r, buf, have, &rs, ev, out);
        if (r < 0) {
            rc = (int)r;
            FUZZ_CHECK(ops->feed(st, g_creds, buf, have, &fx) == r);
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
        FUZZ_CHECK(have < ops->carry_max); /* never stalls with a full carry */
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
