/*
 * Fuzz harness: the ClientHello collector and parser (supervisor/transport/tls_hello.c, issue
 * 11). Input: byte 0 picks a record size, the rest is what a client sends. The seeds in
 * fuzz_tls_hello.in are the OpenSSL 3 client hellos of fuzz_tls_server.in (TLS 1.3, TLS 1.2
 * only, SNI + ALPN, cut, oversized, an HTTP request) and one synthetic hello with an
 * X25519MLKEM768 share (1216 bytes of 0x11) and an X25519 share, which OpenSSL 3.0 cannot send.
 * Checks: never a crash; a collected message lies within the bounds and its raw size; the
 * message collected whole is collected again, byte for byte, from records of the picked size;
 * parse results point inside the message; the input itself is also parsed as a message.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/tls_hello.h"
#include "tests/fuzz/fuzz.h"

static bool inside(const uint8_t *msg, size_t len, const uint8_t *p, size_t n)
{
    return p == NULL ? n == 0 : p >= msg && n <= len && (size_t)(p - msg) <= len - n;
}

static void check_parse(const uint8_t *msg, size_t len)
{
    sv_tls_hello h;
    if (sv_tls_hello_parse(msg, len, &h) != 0)
        return;
    FUZZ_CHECK(inside(msg, len, h.random, 32));
    FUZZ_CHECK(h.session_id_off == SV_TLS_HELLO_SESSION_ID_OFF && h.session_id.n <= 32);
    FUZZ_CHECK(inside(msg, len, h.session_id.p, h.session_id.n));
    FUZZ_CHECK(inside(msg, len, h.cipher_suites.p, h.cipher_suites.n));
    FUZZ_CHECK(inside(msg, len, h.server_name.p, h.server_name.n));
    FUZZ_CHECK(h.x25519 == NULL || inside(msg, len, h.x25519, 32));
    FUZZ_CHECK(h.x25519mlkem768 == NULL ||
               inside(msg, len, h.x25519mlkem768, SV_TLS_MLKEM_SHARE_LEN));
    FUZZ_CHECK(inside(msg, len, h.alpn.p, h.alpn.n));
    FUZZ_CHECK(inside(msg, len, h.signature_algorithms.p, h.signature_algorithms.n));
}

/* Frame @p msg again into records of @p piece bytes and collect it: the same message. */
static void check_reframed(const uint8_t *msg, size_t len, size_t piece)
{
    static uint8_t raw[SV_TLS_HELLO_MAX * 6], again[SV_TLS_HELLO_MAX];
    size_t n = 0;
    for (size_t at = 0; at < len; at += piece) {
        size_t k = len - at < piece ? len - at : piece;
        raw[n++] = 22, raw[n++] = 3, raw[n++] = 3, raw[n++] = (uint8_t)(k >> 8);
        raw[n++] = (uint8_t)k;
        memcpy(raw + n, msg + at, k), n += k;
    }
    size_t len2 = 0, used2 = 0;
    FUZZ_CHECK(sv_tls_hello_collect(raw, n, again, sizeof again, &len2, &used2) == 1);
    FUZZ_CHECK(len2 == len && used2 == n && memcmp(again, msg, len) == 0);
    FUZZ_CHECK(sv_tls_hello_collect(raw, n - 1, again, sizeof again, &len2, &used2) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t pieces[] = {1, 2, 5, 64, 1000, 16384};
    static uint8_t msg[SV_TLS_HELLO_MAX];
    const uint8_t *raw = data + 1;
    size_t n = size - 1, len = 0, used = 0;
    int r = sv_tls_hello_collect(raw, n, msg, sizeof msg, &len, &used);
    FUZZ_CHECK(r == 1 || r == 0 || r == -EPROTO || r == -EMSGSIZE);
    if (r == 1) {
        FUZZ_CHECK(len >= 4 && len <= SV_TLS_HELLO_MAX && used <= n && used > len);
        FUZZ_CHECK(msg[0] == 1);
        check_parse(msg, len);
        check_reframed(msg, len, pieces[data[0] % 6]);
    }
    check_parse(raw, n);
    return 0;
}
