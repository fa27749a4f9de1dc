/*
 * Fuzz harness: Shadowsocks AEAD UDP (sv_ss_udp_open / sv_ss_udp_seal), PROTOCOLS.md §2.4.
 * Input: byte 0 picks the cipher, the rest is one client datagram. The keyring holds the
 * vectors' password as user 1. Checks: the payload lies inside the packet; a packet no key opens
 * is left unchanged; an opened packet re-sealed with the same user's key opens to the same user,
 * destination and payload; opening is deterministic, and a hint and an order (issue 13; byte 0
 * picks the hint) never change its result.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/shadowsocks.h"
#include "tests/fuzz/fuzz.h"

static void fixed_salt(uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(0xa0 + i);
}

static const char *const g_passwords[] = {"fuzz-user-0", "katana-test-pass", "fuzz-user-2"};

/* Re-seal what was opened and open it again: same user, destination and payload. */
static void check_round_trip(const sv_ss_keyring *ring, int user, const sv_dest *dest,
                             const uint8_t *payload, size_t plen)
{
    size_t cap = SV_SS_SALT_MAX + SV_DEST_WIRE_MAX + plen + SV_SS_TAG;
    uint8_t *pkt = malloc(cap);
    FUZZ_CHECK(pkt != NULL);
    ssize_t w = sv_ss_udp_seal(ring->cipher, ring->keys[user], dest, payload, plen, pkt, cap,
                               fixed_salt);
    FUZZ_CHECK(w > 0 && (size_t)w <= cap);
    FUZZ_CHECK(sv_ss_udp_seal(ring->cipher, ring->keys[user], dest, payload, plen, pkt,
                              (size_t)w - 1, fixed_salt) == -EMSGSIZE);
    w = sv_ss_udp_seal(ring->cipher, ring->keys[user], dest, payload, plen, pkt, cap, fixed_salt);
    int user2 = -1;
    sv_dest d2;
    uint8_t *p2 = NULL;
    ssize_t r = sv_ss_udp_open(ring, pkt, (size_t)w, &user2, &d2, &p2);
    FUZZ_CHECK(r == (ssize_t)plen && user2 == user);
    FUZZ_CHECK(d2.atyp == dest->atyp && d2.port == dest->port);
    FUZZ_CHECK(memcmp(d2.ip, dest->ip, sizeof d2.ip) == 0 && strcmp(d2.host, dest->host) == 0);
    FUZZ_CHECK(plen == 0 || memcmp(p2, payload, plen) == 0);
    free(pkt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const enum sv_ss_cipher ciphers[] = {SV_SS_AES_128_GCM, SV_SS_AES_256_GCM,
                                                SV_SS_CHACHA20_POLY1305};
    sv_ss_keyring ring;
    FUZZ_CHECK(sv_ss_keyring_init(&ring, ciphers[data[0] % 3], g_passwords, 3) == 0);
    size_t n = size - 1;
    uint8_t *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
    FUZZ_CHECK(a != NULL && b != NULL);
    memcpy(a, data + 1, n);
    memcpy(b, data + 1, n);

    int ua = -1, ub = -1;
    sv_dest da, db;
    uint8_t *pa = NULL, *pb = NULL;
    ssize_t ra = sv_ss_udp_open(&ring, a, n, &ua, &da, &pa);
    sv_ss_order order;
    FUZZ_CHECK(sv_ss_order_init(&order, ring.n) == 0);
    sv_ss_order_touch(&order, data[0] % 3);
    sv_ss_guide g = {.hint = (int)(data[0] / 3 % 5) - 1, .order = data[0] & 0x80 ? &order : NULL};
    sv_aead ctx = {0};
    ssize_t rb = sv_ss_udp_open_guided(&ring, &g, b, n, &ub, &db, &pb, &ctx);
    sv_aead_deinit(&ctx);
    sv_ss_order_deinit(&order);
    FUZZ_CHECK(g.trials <= ring.n);
    FUZZ_CHECK(ra == rb && ua == ub);
    FUZZ_CHECK(ra == -EBADMSG || ra == -EPROTO || ra >= 0);
    if (ra == -EBADMSG)
        FUZZ_CHECK(memcmp(a, data + 1, n) == 0); /* untouched after every failed key */
    if (ra >= 0) {
        FUZZ_CHECK(ua >= 0 && (size_t)ua < ring.n);
        FUZZ_CHECK(pa >= a && pa + ra <= a + n && pa - a == pb - b);
        FUZZ_CHECK(ra == 0 || memcmp(pa, pb, (size_t)ra) == 0);
        check_round_trip(&ring, ua, &da, pa, (size_t)ra);
    }
    free(a);
    free(b);
    sv_ss_keyring_deinit(&ring);
    return 0;
}
