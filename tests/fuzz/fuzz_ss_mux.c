/*
 * Fuzz harness: Shadowsocks over Mux.Cool (sv_ss_mux_ops, proto/ss_mux.h; issue 9).
 * Input: byte 0 picks the cipher (% 3) and whether the runtime's guide is set ((/ 3) % 2: no
 * hint, a limit of one key, so a session of the second user asks for a scan, which the harness
 * runs and answers as the runtime does; issue 13), byte 1 the split pattern, the rest is client
 * wire bytes (Mux.Cool frames whose sessions carry Shadowsocks streams). The users' passwords
 * are "fuzz-user-0" and "katana-test-pass", so seeds built with them go deep. Checks (STYLE.md
 * §11): consumed <= given; the carry never passes carry_max; an error comes with its effect; a
 * scan is the last effect and nothing of its bytes is consumed; every frame fits frame_max; the
 * same effects whole and split.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/ss_mux.h"
#include "tests/fuzz/fuzz.h"

/* What a run produced, as one byte string, plus the final return code. */
typedef struct transcript {
    uint8_t *b;
    size_t len, cap;
    int rc;
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

static char g_pw0[] = "fuzz-user-0", g_pw1[] = "katana-test-pass";
static sv_user g_users[] = {{.id = 1, .secret = g_pw0}, {.id = 2, .secret = g_pw1}};
static sv_user_set g_set = {.tag = (char *)"f", .users = g_users, .n_users = 2};

/* The effects of one feed() call into @p t; downstream frames for each opened stream; a
 * scan's answer to scan_result(). */
static void tr_effects(transcript *t, const sv_proto_ops *ops, void *st, const void *creds,
                       const sv_effects *fx)
{
    int answer = -2;
    static uint8_t out[70000];
    static const uint8_t down[1000];
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        uint8_t k = (uint8_t)e->kind;
        tr_put(t, &k, 1);
        tr_put(t, &e->stream, sizeof e->stream);
        if (e->kind == SV_FX_AUTHENTICATED)
            tr_put(t, &e->principal, sizeof e->principal);
        if (e->kind == SV_FX_OPEN) {
            char d[300];
            int dl = sv_dest_format(&e->dest, d, sizeof d);
            FUZZ_CHECK(dl > 0 && (size_t)dl < sizeof d);
            tr_put(t, d, (size_t)dl);
        }
        if (e->kind == SV_FX_TO_OUTBOUND || e->kind == SV_FX_TO_CLIENT) {
            FUZZ_CHECK(e->len > 0);
            tr_put(t, e->data, e->len);
        }
        if (e->kind == SV_FX_ERROR)
            tr_put(t, &e->policy, sizeof e->policy);
        if (e->kind == SV_FX_SCAN) {
            FUZZ_CHECK(i == fx->n - 1 && e->data != NULL && e->len > 0);
            unsigned trials = 0;
            answer = sv_proto_guide(ops)->scan(creds, e->data, e->len, &trials);
            tr_put(t, &answer, sizeof answer);
        }
    }
    /* after the effects are used: answer an open stream (what the runtime does on a read) */
    for (unsigned i = 0; i < fx->n; i++)
        if (fx->v[i].kind == SV_FX_OPEN) {
            size_t len = 1 + fx->v[i].stream % sizeof down;
            ssize_t w = ops->frame(st, creds, fx->v[i].stream, down, len, out, sizeof out);
            FUZZ_CHECK(w >= 0 && (size_t)w <= ops->frame_max(len)); /* 0: ended since */
        }
    if (answer != -2)
        sv_proto_guide(ops)->scan_result(st, answer >= 0 ? answer : -1);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like buffer. */
static void run(enum sv_ss_cipher cipher, bool guided, const uint8_t *wire, size_t n,
                size_t piece, uint32_t seed, transcript *t)
{
    const sv_proto_ops *ops = &sv_ss_mux_ops;
    sv_inbound_spec in = {.tag = (char *)"f", .protocol = SV_INBOUND_SHADOWSOCKS,
                          .ss_cipher = cipher, .ws = {.path = (char *)"/", .mux = true}};
    void *creds = NULL;
    FUZZ_CHECK(ops->creds_new(&in, &g_set, &creds, NULL) == 0);
    sv_replay *rp = sv_replay_new(64);
    FUZZ_CHECK(rp != NULL);
    sv_proto_replay(ops)->attach_replay(creds, rp);
    void *st = calloc(1, ops->state_size);
    FUZZ_CHECK(st != NULL && ops->init(st, &in) == 0);
    if (guided)
        sv_proto_guide(ops)->set_guide(st, -1, NULL, 1);
    uint8_t *buf = malloc(n + ops->carry_max + 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, at = 0;
    t->rc = 0;
    while (t->rc == 0) {
        sv_effects fx;
        ssize_t r = ops->feed(st, creds, buf, have, &fx);
        tr_effects(t, ops, st, creds, &fx);
        if (r < 0) {
            t->rc = (int)r;
            FUZZ_CHECK(fx.n > 0 && fx.v[fx.n - 1].kind == SV_FX_ERROR);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        if (sv_proto_backlog(ops)->more(st)) /* a scan's answer: the same bytes again */
            continue;
        FUZZ_CHECK(have <= ops->carry_max);
        if (at == n)
            break;
        seed = seed * 1103515245u + 12345u;
        size_t k = piece > n ? n : 1 + (seed >> 8) % piece;
        k = k < n - at ? k : n - at;
        memcpy(buf + have, wire + at, k);
        have += k;
        at += k;
    }
    uint8_t end[16];
    for (uint32_t id = 0; id < 4; id++) /* frame_end for open or unknown streams */
        FUZZ_CHECK(sv_proto_end(ops)->frame_end(st, creds, id, id & 1, end, sizeof end) >= 0);
    free(buf);
    ops->deinit(st);
    free(st);
    ops->creds_free(creds);
    sv_replay_free(rp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const enum sv_ss_cipher ciphers[] = {SV_SS_AES_128_GCM, SV_SS_AES_256_GCM,
                                                SV_SS_CHACHA20_POLY1305};
    static const size_t pieces[] = {1, 3, 17, 64, 1000, 20000};
    enum sv_ss_cipher cipher = ciphers[data[0] % 3];
    bool guided = (data[0] / 3) % 2;
    size_t piece = pieces[data[1] % 6];
    const uint8_t *wire = data + 2;
    size_t n = size - 2;

    transcript whole = {0}, split = {0};
    run(cipher, guided, wire, n, n + 1, 0, &whole);
    run(cipher, guided, wire, n, piece, data[1], &split);
    FUZZ_CHECK(whole.rc == split.rc);
    FUZZ_CHECK(whole.len == split.len);
    FUZZ_CHECK(whole.len == 0 || memcmp(whole.b, split.b, whole.len) == 0);
    free(whole.b);
    free(split.b);
    return 0;
}
