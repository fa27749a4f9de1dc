/*
 * Fuzz harness: Shadowsocks 2022 TCP server core (sv_ss22_tcp_feed / sv_ss22_tcp_frame).
 * Input: byte 0 picks the table (bit 0: AES-128 or AES-256; bit 1: single user or EIH with the
 * vectors' keys, so seeds made from tests/unit/vectors/shadowsocks-2022.json go deep) and
 * (bit 2) a UDP datagram instead of a TCP stream, (bit 3) the chacha20 single-user table, byte 1 the split pattern, the rest is client
 * wire bytes; the clock is the vectors' timestamp. UDP: an opened datagram's payload lies in
 * the packet, its reply seals within SV_SS22_UDP_OVERHEAD, the packet-ID window takes it once.
 * Checks (STYLE.md §11): consumed <= len; effect data inside the consumed bytes; the core never
 * keeps more than carry_max bytes; the same outcome whole and split; frame() after
 * authentication fits frame_max.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/ss2022.h"
#include "tests/fuzz/fuzz.h"

typedef struct transcript {
    uint8_t b[1 << 16];
    size_t len;
    int rc;
} transcript;

static void put(transcript *t, const void *p, size_t n)
{
    if (n > sizeof t->b - t->len)
        n = sizeof t->b - t->len;
    memcpy(t->b + t->len, p, n);
    t->len += n;
}

static sv_ss22_creds *g_creds[5];

static void hexkey(const char *hex, uint8_t *out)
{
    for (size_t i = 0; hex[2 * i]; i++) {
        unsigned v;
        FUZZ_CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (uint8_t)v;
    }
}

static void make_creds(void)
{
    if (g_creds[0] != NULL)
        return;
    sv_error err;
    uint8_t k[2][32] = {{0}}, ipsk[32] = {0};
    /* single user: tcp[0] / tcp[1] of the vectors */
    hexkey("256a639d543b9eb13a2b104daa5cd349", k[0]);
    FUZZ_CHECK(sv_ss22_creds_from_keys("f", SV_SS_2022_AES_128_GCM, NULL,
                                       (const uint8_t(*)[32])k, 1, &g_creds[0], &err) == 0);
    hexkey("925983cdb0c1a272c4f9c9f642a937aece6ab80bc4b2bb837ffb651d08605cfd", k[0]);
    FUZZ_CHECK(sv_ss22_creds_from_keys("f", SV_SS_2022_AES_256_GCM, NULL,
                                       (const uint8_t(*)[32])k, 1, &g_creds[1], &err) == 0);
    FUZZ_CHECK(sv_ss22_creds_from_keys("f", SV_SS_2022_CHACHA20_POLY1305, NULL,
                                       (const uint8_t(*)[32])k, 1, &g_creds[4], &err) == 0);
    /* EIH: tcp_eih[0] / tcp_eih[1] */
    FUZZ_CHECK(sv_ss22_key_decode("TIwPP/x/E3TqXSGwplOWJw==", 16, ipsk) == 0);
    FUZZ_CHECK(sv_ss22_key_decode("A3bIgrUbfoiTlWimvGMqAA==", 16, k[1]) == 0);
    memset(k[0], 0x11, 32);
    FUZZ_CHECK(sv_ss22_creds_from_keys("f", SV_SS_2022_AES_128_GCM, ipsk,
                                       (const uint8_t(*)[32])k, 2, &g_creds[2], &err) == 0);
    FUZZ_CHECK(sv_ss22_key_decode("EB+0U4BL7N9Cp/Zy5Rk4fJSL4RG0IWh4z5QMSyrWCNg=", 32, ipsk) == 0);
    FUZZ_CHECK(sv_ss22_key_decode("c5s4ughgJL4EYHd5+G3o8LKltDRgnyPipP/1D3WuHec=", 32, k[1]) == 0);
    FUZZ_CHECK(sv_ss22_creds_from_keys("f", SV_SS_2022_AES_256_GCM, ipsk,
                                       (const uint8_t(*)[32])k, 2, &g_creds[3], &err) == 0);
}

/* Run the wire through a fresh connection, @p step bytes per read (0 = whole). */
static void run(const sv_ss22_creds *c, enum sv_ss_cipher ci, const uint8_t *wire, size_t n,
                size_t step, transcript *tr)
{
    static uint8_t buf[2 * SV_SS22_CARRY_MAX + 64];
    sv_ss22_tcp t = {0};
    sv_ss22_tcp_init(&t, ci);
    t.now = 1700000000;
    size_t have = 0, off = 0;
    tr->len = 0;
    tr->rc = 0;
    while (off < n && tr->rc == 0) {
        size_t take = step == 0 ? n - off : (n - off < step ? n - off : step);
        memcpy(buf + have, wire + off, take);
        have += take;
        off += take;
        size_t used = 0;
        while (tr->rc == 0) {
            sv_effects fx;
            ssize_t k = sv_ss22_tcp_feed(&t, c, buf + used, have - used, &fx);
            FUZZ_CHECK(k <= (ssize_t)(have - used));
            for (unsigned i = 0; i < fx.n; i++) {
                const sv_effect *e = &fx.v[i];
                char kind = (char)('0' + e->kind);
                put(tr, &kind, 1);
                if (e->kind == SV_FX_TO_OUTBOUND) {
                    /* inside the consumed bytes; after an error (effects of earlier steps of
                     * the same call stand) inside the input */
                    size_t bound = k > 0 ? (size_t)k : have - used;
                    FUZZ_CHECK(e->data >= buf + used && e->data + e->len <= buf + used + bound);
                    put(tr, e->data, e->len);
                } else if (e->kind == SV_FX_OPEN) {
                    char d[300];
                    int dl = sv_dest_format(&e->dest, d, sizeof d);
                    FUZZ_CHECK(dl > 0 && (size_t)dl < sizeof d);
                    put(tr, d, (size_t)dl);
                }
            }
            if (k < 0)
                tr->rc = (int)k;
            if (k <= 0)
                break;
            used += (size_t)k;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
        FUZZ_CHECK(tr->rc != 0 || have <= SV_SS22_CARRY_MAX);
    }
    if (t.user >= 0 && tr->rc == 0) {
        static uint8_t out[SV_SS22_FRAMED_MAX(70000)];
        static const uint8_t payload[70000];
        ssize_t w = sv_ss22_tcp_frame(&t, c, payload, sizeof payload, out, sizeof out);
        FUZZ_CHECK(w > 0 && (size_t)w <= SV_SS22_FRAMED_MAX(sizeof payload));
    }
    sv_ss22_tcp_deinit(&t);
}

static void run_udp(const sv_ss22_creds *c, const uint8_t *data, size_t n)
{
    static uint8_t pkt[1 << 16], out[(1 << 16) + SV_SS22_UDP_OVERHEAD];
    if (n > sizeof pkt)
        return;
    memcpy(pkt, data, n);
    sv_aead ctx = {0};
    sv_ss22_udp_in in;
    if (sv_ss22_udp_open(c, 1700000000, pkt, n, &in, &ctx) == 0) {
        FUZZ_CHECK(in.payload >= pkt && in.payload + in.len <= pkt + n);
        sv_ss22_window w;
        memset(&w, 0, sizeof w);
        FUZZ_CHECK(sv_ss22_window_accept(&w, in.packet_id) == (in.packet_id != UINT64_MAX));
        FUZZ_CHECK(!sv_ss22_window_accept(&w, in.packet_id));
        static const uint8_t sid[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        ssize_t len = sv_ss22_udp_seal(c, in.user, sid, 0, in.session_id, 1700000000, &in.dest,
                                       in.payload, in.len, out, sizeof out, &ctx, NULL);
        FUZZ_CHECK(len > 0 && (size_t)len <= in.len + SV_SS22_UDP_OVERHEAD);
    }
    sv_aead_deinit(&ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    make_creds();
    unsigned pick = data[0] & 8 ? 4 : data[0] & 3;
    if (data[0] & 4) {
        run_udp(g_creds[pick], data + 2, size - 2);
        return 0;
    }
    size_t step = 1 + data[1] % 64;
    enum sv_ss_cipher ci = pick == 4 ? SV_SS_2022_CHACHA20_POLY1305
                           : pick & 1 ? SV_SS_2022_AES_256_GCM
                                      : SV_SS_2022_AES_128_GCM;
    static transcript whole, split;
    uint8_t *a = malloc(size), *b = malloc(size);
    FUZZ_CHECK(a != NULL && b != NULL);
    memcpy(a, data + 2, size - 2);
    memcpy(b, data + 2, size - 2);
    run(g_creds[pick], ci, a, size - 2, 0, &whole);
    run(g_creds[pick], ci, b, size - 2, step, &split);
    FUZZ_CHECK(whole.rc == split.rc && whole.len == split.len &&
               memcmp(whole.b, split.b, whole.len) == 0);
    free(a);
    free(b);
    return 0;
}
