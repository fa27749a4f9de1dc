/*
 * Fuzz harness: Mux.Cool codec (supervisor/proto/mux.c: sv_mux_feed, sv_mux_frame_data).
 * Input: byte 0 picks the split pattern, the rest is the body after a VLESS/VMess command 3.
 * Checks (STYLE.md §11): consumed <= given; a slot of the effects stays free; every data
 * pointer inside the given bytes or the decoder; streams are session IDs that were opened (data,
 * close) and never opened twice while open; a datagram is at most SV_MUX_UDP_PAYLOAD_MAX bytes;
 * the decoder never stalls with more than SV_MUX_CARRY_MAX bytes buffered; the same outcome
 * whole and split; each TCP data block framed back parses as one Keep frame of it.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/mux.h"
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

/* The TCP bytes per stream are cut-independent, so the transcript merges consecutive data. */
static void tr_event(transcript *t, char kind, uint32_t stream, const void *p, size_t n)
{
    tr_put(t, &kind, 1);
    tr_put(t, &stream, sizeof stream);
    tr_put(t, &n, sizeof n);
    tr_put(t, p, n);
}

static bool inside(const uint8_t *x, size_t len, const uint8_t *lo, size_t n)
{
    return x >= lo && x <= lo + n && len <= (size_t)(lo + n - x);
}

static void check_reframe(const sv_effect *e)
{
    static uint8_t out[SV_MUX_DATA_MAX + 16];
    ssize_t w = sv_mux_frame_data((uint16_t)e->stream, e->data, e->len, out, sizeof out);
    FUZZ_CHECK(w == (ssize_t)(e->len + 8));
    FUZZ_CHECK(out[0] == 0 && out[1] == 4 && (out[2] << 8 | out[3]) == (int)e->stream);
    FUZZ_CHECK(out[4] == SV_MUX_KEEP && out[5] == 1 && (size_t)(out[6] << 8 | out[7]) == e->len);
    FUZZ_CHECK(e->len == 0 || memcmp(out + 8, e->data, e->len) == 0);
}

static int run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed, transcript *ev)
{
    sv_mux *m = sv_mux_new();
    FUZZ_CHECK(m != NULL);
    static bool open[65536];
    memset(open, 0, sizeof open);
    uint8_t *buf = malloc(n + SV_MUX_CARRY_MAX + 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, in = 0;
    int rc = 0;
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        fx.n = 0;
        ssize_t r = sv_mux_feed(m, buf, have, &fx);
        FUZZ_CHECK(fx.n < SV_EFFECTS_MAX);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            FUZZ_CHECK(e->stream <= 0xffff);
            switch (e->kind) {
            case SV_FX_OPEN:
                FUZZ_CHECK(!open[e->stream]);
                FUZZ_CHECK(e->dest.network == SV_NET_TCP || e->dest.network == SV_NET_UDP);
                open[e->stream] = true;
                tr_event(ev, 'O', e->stream, &e->dest.network, sizeof e->dest.network);
                break;
            case SV_FX_TO_OUTBOUND:
                FUZZ_CHECK(open[e->stream] && e->len > 0 && inside(e->data, e->len, buf, have));
                check_reframe(e);
                tr_event(ev, 'T', e->stream, e->data, e->len);
                break;
            case SV_FX_DATAGRAM:
                FUZZ_CHECK(open[e->stream] && e->dest.network == SV_NET_UDP);
                FUZZ_CHECK(e->len <= SV_MUX_UDP_PAYLOAD_MAX && inside(e->data, e->len, buf, have));
                tr_event(ev, 'D', e->stream, e->data, e->len);
                break;
            case SV_FX_CLOSE:
                FUZZ_CHECK(open[e->stream]);
                open[e->stream] = false;
                tr_event(ev, 'C', e->stream, NULL, 0);
                break;
            case SV_FX_TO_CLIENT:
                FUZZ_CHECK(e->len == SV_MUX_END_LEN && e->data != NULL);
                FUZZ_CHECK(e->data[4] == SV_MUX_END);
                tr_event(ev, 'E', 0, e->data, e->len);
                break;
            default:
                FUZZ_CHECK(!"unexpected effect");
            }
        }
        if (r < 0) {
            rc = (int)r;
            break;
        }
        FUZZ_CHECK((size_t)r <= have);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        FUZZ_CHECK(fx.n == 0);
        FUZZ_CHECK(have <= SV_MUX_CARRY_MAX);
        if (in == n)
            break;
        seed = seed * 1103515245u + 12345u;
        size_t k = piece > n ? n : 1 + (seed >> 8) % piece;
        k = k < n - in ? k : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    tr_put(ev, &rc, sizeof rc);
    free(buf);
    sv_mux_free(m);
    return rc;
}

/* TCP data may come in different pieces whole and split: compare with runs of 'T' merged. */
static void merge_tcp(transcript *t)
{
    transcript out = {0};
    size_t at = 0;
    while (at < t->len && t->len - at >= 1 + sizeof(uint32_t) + sizeof(size_t)) {
        char kind = (char)t->b[at];
        uint32_t stream;
        size_t n;
        memcpy(&stream, t->b + at + 1, sizeof stream);
        memcpy(&n, t->b + at + 1 + sizeof stream, sizeof n);
        const uint8_t *p = t->b + at + 1 + sizeof stream + sizeof n;
        size_t next = at + 1 + sizeof stream + sizeof n + n;
        if (kind == 'T') {
            /* gather the following 'T' of the same stream */
            transcript run = {0};
            tr_put(&run, p, n);
            while (next < t->len && t->b[next] == 'T') {
                uint32_t s2;
                size_t n2;
                memcpy(&s2, t->b + next + 1, sizeof s2);
                if (s2 != stream)
                    break;
                memcpy(&n2, t->b + next + 1 + sizeof s2, sizeof n2);
                tr_put(&run, t->b + next + 1 + sizeof s2 + sizeof n2, n2);
                next += 1 + sizeof s2 + sizeof n2 + n2;
            }
            tr_event(&out, 'T', stream, run.b, run.len);
            free(run.b);
        } else {
            tr_event(&out, kind, stream, p, n);
        }
        at = next;
    }
    tr_put(&out, t->b + at, t->len - at); /* the result code */
    free(t->b);
    *t = out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t pieces[] = {1, 3, 17, 64, 1000, 20000};
    size_t piece = pieces[data[0] % 6];
    transcript ev[2] = {{0}, {0}};
    int rc0 = run(data + 1, size - 1, size, 0, &ev[0]);
    int rc1 = run(data + 1, size - 1, piece, data[0], &ev[1]);
    FUZZ_CHECK(rc0 == rc1);
    merge_tcp(&ev[0]);
    merge_tcp(&ev[1]);
    FUZZ_CHECK(ev[0].len == ev[1].len);
    FUZZ_CHECK(ev[0].len == 0 || memcmp(ev[0].b, ev[1].b, ev[0].len) == 0);
    free(ev[0].b);
    free(ev[1].b);
    return 0;
}
