/*
 * Fuzz harness: XUDP frames (issue 10, PROTOCOLS-2.md §5) through the Mux.Cool codec
 * (supervisor/proto/mux.c): New UDP frames with or without a GlobalID, Keep frames with or
 * without a per-datagram address, replies framed with sv_mux_frame_datagram_head. Input: byte 0
 * picks the split size, the rest is the body after a VLESS/VMess command 3.
 * Checks: never a crash; the same datagrams to the same destinations (and the same result)
 * whole and split; every datagram's destination is a well-formed UDP address (IPv4, IPv6, or
 * a name of 1..255 bytes without NUL); each datagram framed back as a reply from its
 * destination decodes, after a New for its session, as the same bytes from the same address.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/mux.h"
#include "tests/fuzz/fuzz.h"

typedef struct transcript {
    char *b;
    size_t len, cap;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2 + 64;
        t->b = realloc(t->b, t->cap);
        FUZZ_CHECK(t->b != NULL);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
}

static void check_dest(const sv_dest *d)
{
    FUZZ_CHECK(d->network == SV_NET_UDP);
    FUZZ_CHECK(d->atyp == SV_ATYP_IPV4 || d->atyp == SV_ATYP_IPV6 || d->atyp == SV_ATYP_DOMAIN);
    if (d->atyp == SV_ATYP_DOMAIN) {
        size_t n = strnlen(d->host, sizeof d->host);
        FUZZ_CHECK(n >= 1 && n <= 255);
    }
}

/* The reply the server frames for datagram @p p from @p from decodes as that datagram from
 * that address (as a client reads it: the same codec, after a New of its session). */
static void check_reply(uint16_t id, const sv_dest *from, const uint8_t *p, size_t n)
{
    static uint8_t wire[16 + SV_MUX_DGRAM_HEAD_MAX + SV_MUX_UDP_PAYLOAD_MAX];
    static const uint8_t new_udp[] = {0x00, 0x0c, 0, 0, 0x01, 0x00, 0x02, 0x00, 0x35, 0x01, 127, 0,
                                      0, 1};
    memcpy(wire, new_udp, sizeof new_udp);
    wire[2] = (uint8_t)(id >> 8);
    wire[3] = (uint8_t)id;
    size_t at = sizeof new_udp;
    at += sv_mux_frame_datagram_head(id, from, n, wire + at);
    memcpy(wire + at, p, n);
    at += n;
    sv_mux *m = sv_mux_new();
    FUZZ_CHECK(m != NULL);
    sv_effects fx = {.n = 0};
    FUZZ_CHECK(sv_mux_feed(m, wire, at, &fx) == (ssize_t)at);
    FUZZ_CHECK(fx.n == 2 && fx.v[0].kind == SV_FX_OPEN && fx.v[1].kind == SV_FX_DATAGRAM);
    char a[300], b[300];
    sv_dest_format(from, a, sizeof a);
    sv_dest_format(&fx.v[1].dest, b, sizeof b);
    FUZZ_CHECK(strcmp(a, b) == 0 && fx.v[1].len == n && memcmp(fx.v[1].data, p, n) == 0);
    sv_mux_free(m);
}

static int run(const uint8_t *in, size_t n, size_t piece, transcript *ev)
{
    sv_mux *m = sv_mux_new();
    FUZZ_CHECK(m != NULL);
    uint8_t *buf = malloc(n + SV_MUX_CARRY_MAX + 1);
    FUZZ_CHECK(buf != NULL);
    size_t have = 0, at = 0;
    int rc = 0;
    for (;;) {
        sv_effects fx = {.n = 0};
        ssize_t r = sv_mux_feed(m, buf, have, &fx);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            char line[400];
            if (e->kind == SV_FX_DATAGRAM) {
                check_dest(&e->dest);
                check_reply((uint16_t)e->stream, &e->dest, e->data, e->len);
                char d[300];
                sv_dest_format(&e->dest, d, sizeof d);
                int k = snprintf(line, sizeof line, "D %u %s %zu:", e->stream, d, e->len);
                tr_put(ev, line, (size_t)k);
                tr_put(ev, e->data, e->len);
            } else if (e->kind != SV_FX_TO_OUTBOUND) { /* TCP pieces depend on the cuts */
                int k = snprintf(line, sizeof line, "%d %u\n", (int)e->kind, e->stream);
                tr_put(ev, line, (size_t)k);
            }
        }
        if (r < 0) {
            rc = (int)r;
            break;
        }
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        FUZZ_CHECK(have <= SV_MUX_CARRY_MAX);
        if (at == n)
            break;
        size_t k = piece < n - at ? piece : n - at;
        memcpy(buf + have, in + at, k);
        have += k;
        at += k;
    }
    tr_put(ev, &rc, sizeof rc);
    free(buf);
    sv_mux_free(m);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t pieces[] = {1, 2, 5, 13, 100, 4096};
    transcript whole = {0}, split = {0};
    int rc0 = run(data + 1, size - 1, size, &whole);
    int rc1 = run(data + 1, size - 1, pieces[data[0] % 6], &split);
    FUZZ_CHECK(rc0 == rc1 && whole.len == split.len);
    FUZZ_CHECK(whole.len == 0 || memcmp(whole.b, split.b, whole.len) == 0);
    free(whole.b);
    free(split.b);
    return 0;
}
