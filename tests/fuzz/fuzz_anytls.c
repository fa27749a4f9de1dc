/*
 * Fuzz harness: AnyTLS server core (sv_anytls_ops: feed, frame, frame_end, frame_datagram).
 * Input: byte 0 picks the split pattern, the rest is the client's plaintext after TLS.
 * The credential table holds "katana-anytls-pass" (user 1), so seeds starting with its SHA-256
 * go past authentication into the frame decoder, streams and UoT.
 * Checks (STYLE.md §11): consumed <= given; at most SV_EFFECTS_MAX effects; every data pointer
 * inside the given bytes, the state or the credential table's scheme; an error is the last effect
 * and no call succeeds after it; a fallback comes before authentication and covers every byte
 * received, nothing having been consumed; the core never stalls with carry_max bytes buffered
 * and more() ends; opens and closes pair per stream; each datagram framed back fits frame_max;
 * the same outcome whole and split.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/anytls.h"
#include "tests/fuzz/fuzz.h"

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

#define OPEN_MAX 4096 /* stream ids tracked for open/close pairing (others: counted only) */

typedef struct run_state {
    bool authed;
    unsigned open_n;
    uint32_t open_ids[SV_ANYTLS_STREAMS_MAX + 1];
} run_state;

static int find_open(const run_state *rs, uint32_t id)
{
    for (unsigned i = 0; i < rs->open_n; i++)
        if (rs->open_ids[i] == id)
            return (int)i;
    return -1;
}

/* Datagrams framed back fit the stream's reply format. */
static void check_reframe(void *st, const void *creds, const sv_effect *e)
{
    static uint8_t out[SV_ANYTLS_HEAD_LEN + SV_ANYTLS_DATA_MAX];
    ssize_t w = sv_proto_datagram(&sv_anytls_ops)
                    ->frame_datagram(st, creds, e->stream, &e->dest, e->data, e->len, out,
                                     sizeof out);
    FUZZ_CHECK(w == -EINVAL || (w >= (ssize_t)(e->len + 9) && out[0] == SV_ANYTLS_PSH));
}

static void check_effects(void *st, const void *creds, const sv_effects *fx, ssize_t r,
                          const uint8_t *buf, size_t have, size_t in, run_state *rs,
                          transcript *ev, transcript *cli, transcript *out)
{
    FUZZ_CHECK(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        if (e->data != NULL && e->len > 0)
            FUZZ_CHECK(inside(e->data, e->len, buf, have) ||
                       inside(e->data, e->len, (const uint8_t *)st, sv_anytls_ops.state_size) ||
                       (e->kind == SV_FX_TO_CLIENT && e->len == strlen(sv_anytls_default_scheme) &&
                        memcmp(e->data, sv_anytls_default_scheme, e->len) == 0) ||
                       e->kind == SV_FX_DATAGRAM || e->kind == SV_FX_TO_OUTBOUND);
        /* (stream bytes held over frames live in the core's own buffers) */
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            FUZZ_CHECK(!rs->authed && i == 0 && e->principal >= 0 && e->principal < 3);
            FUZZ_CHECK(e->multiplexed);
            rs->authed = true;
            tr_put(ev, "A", 1);
            tr_put(ev, &e->principal, sizeof e->principal);
            break;
        case SV_FX_OPEN:
            FUZZ_CHECK(rs->authed && find_open(rs, e->stream) < 0 && e->stream != 0);
            FUZZ_CHECK(rs->open_n < SV_ANYTLS_STREAMS_MAX);
            rs->open_ids[rs->open_n++] = e->stream;
            FUZZ_CHECK(e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP);
            tr_put(ev, "O", 1);
            tr_put(ev, &e->stream, sizeof e->stream);
            tr_dest(ev, &e->dest);
            break;
        case SV_FX_TO_OUTBOUND:
            FUZZ_CHECK(find_open(rs, e->stream) >= 0 && e->len > 0 && e->data != NULL);
            tr_put(out, &e->stream, sizeof e->stream); /* per-stream order is kept */
            tr_put(out, e->data, e->len);
            break;
        case SV_FX_DATAGRAM:
            FUZZ_CHECK(find_open(rs, e->stream) >= 0 && e->dest.network == SV_NET_UDP);
            FUZZ_CHECK(e->len <= SV_ANYTLS_DATA_MAX);
            check_reframe(st, creds, e);
            tr_put(ev, "D", 1);
            tr_put(ev, &e->stream, sizeof e->stream);
            tr_dest(ev, &e->dest);
            tr_put(ev, &e->len, sizeof e->len);
            tr_put(ev, e->data, e->len);
            break;
        case SV_FX_TO_CLIENT:
            FUZZ_CHECK(rs->authed && e->len > 0);
            tr_put(cli, e->data, e->len);
            break;
        case SV_FX_CLOSE: {
            int k = find_open(rs, e->stream);
            FUZZ_CHECK(k >= 0);
            rs->open_ids[k] = rs->open_ids[--rs->open_n];
            tr_put(ev, "C", 1);
            tr_put(ev, &e->stream, sizeof e->stream);
            break;
        }
        case SV_FX_ERROR:
            FUZZ_CHECK(i == fx->n - 1 && r < 0 && e->error == (int)r);
            if (e->policy == SV_PROBE_FALLBACK)
                FUZZ_CHECK(!rs->authed && e->data == buf && e->len == have && in == have);
            else if (e->policy == SV_PROBE_ANSWER) /* the Alert, written before the close */
                FUZZ_CHECK(rs->authed && e->len > 0 &&
                           inside(e->data, e->len, (const uint8_t *)st, sv_anytls_ops.state_size));
            else
                FUZZ_CHECK(e->policy == SV_PROBE_CLOSE && rs->authed && e->data == NULL);
            if (e->policy == SV_PROBE_ANSWER)
                tr_put(cli, e->data, e->len);
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
    static char *secrets[] = {"fuzz-user-0", "katana-anytls-pass", "fuzz-user-2"};
    sv_user users[3];
    memset(users, 0, sizeof users);
    for (int i = 0; i < 3; i++) {
        users[i].id = (uint64_t)i + 1;
        users[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "fuzz", .users = users, .n_users = 3};
    sv_error err;
    FUZZ_CHECK(sv_anytls_ops.creds_new(NULL, &set, &g_creds, &err) == 0);
}

/* Feed @p wire in pieces of at most @p piece bytes through a runtime-like carry buffer; then
 * frame some bytes for every stream still open and end it (frame_end). */
static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, transcript *ev,
               transcript *cli, transcript *out)
{
    const sv_proto_ops *ops = &sv_anytls_ops;
    void *st = calloc(1, ops->state_size);
    FUZZ_CHECK(st != NULL && ops->init(st, NULL) == 0);
    size_t cap = n + ops->carry_max;
    uint8_t *buf = malloc(cap ? cap : 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    int rc = 0;
    unsigned spins = 0;
    run_state rs;
    memset(&rs, 0, sizeof rs);
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        ssize_t r = ops->feed(st, g_creds, buf, have, &fx);
        check_effects(st, g_creds, &fx, r, buf, have, in, &rs, ev, cli, out);
        if (r < 0) {
            rc = (int)r;
            FUZZ_CHECK(ops->feed(st, g_creds, buf, have, &fx) < 0);
            FUZZ_CHECK(fx.n == 1 && fx.v[0].kind == SV_FX_ERROR);
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (r > 0)
            FUZZ_CHECK(rs.authed);
        memmove(buf, buf + r, have - (size_t)r);
        have -= (size_t)r;
        if (sv_proto_more(ops, st)) {
            FUZZ_CHECK(++spins < 100000);
            continue;
        }
        if (r > 0)
            continue;
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
    /* frame and frame_end of every stream still open give well-formed frames */
    static uint8_t fo[2 * SV_ANYTLS_HEAD_LEN + SV_ANYTLS_DATA_MAX + 10], pay[65536];
    size_t pl = n % sizeof pay + 1;
    for (unsigned i = 0; i < rs.open_n; i++) {
        ssize_t w = ops->frame(st, g_creds, rs.open_ids[i], pay, pl, fo, sizeof fo);
        FUZZ_CHECK(w > 0 && (size_t)w == ops->frame_max(pl) && fo[0] == SV_ANYTLS_PSH);
        w = sv_proto_end(ops)->frame_end(st, g_creds, rs.open_ids[i], false, fo, sizeof fo);
        FUZZ_CHECK(w == SV_ANYTLS_HEAD_LEN && fo[0] == SV_ANYTLS_FIN);
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

    transcript ev[2], cli[2], out[2];
    memset(ev, 0, sizeof ev);
    memset(cli, 0, sizeof cli);
    memset(out, 0, sizeof out);
    int rc0 = run(wire, n, n + 1, 0, &ev[0], &cli[0], &out[0]);
    int rc1 = run(wire, n, piece, data[0], &ev[1], &cli[1], &out[1]);
    FUZZ_CHECK(rc0 == rc1);
    FUZZ_CHECK(ev[0].len == ev[1].len && cli[0].len == cli[1].len);
    FUZZ_CHECK(ev[0].len == 0 || memcmp(ev[0].b, ev[1].b, ev[0].len) == 0);
    FUZZ_CHECK(cli[0].len == 0 || memcmp(cli[0].b, cli[1].b, cli[0].len) == 0);
    for (int i = 0; i < 2; i++) {
        free(ev[i].b);
        free(cli[i].b);
        free(out[i].b);
    }
    return 0;
}
