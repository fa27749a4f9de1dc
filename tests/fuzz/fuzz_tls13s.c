/*
 * Fuzz harness: the TLS 1.3 server for REALITY (supervisor/transport/tls13s.c, issue 11) fed
 * arbitrary client bytes after a fixed ClientHello (built below: TLS 1.3, the three suites, the
 * X25519 share of PROTOCOLS-2.md §1.7). Input: byte 0 picks the split pattern, the rest is what
 * the client sends after its hello. The server's X25519 key is fresh per run, so no input can
 * authenticate a record: the harness covers record framing, the plaintext records (CCS, alerts,
 * handshake), bounds and the refusal of records that do not open. The seeds in
 * fuzz_tls13s.in are: empty; a dummy CCS; a CCS of 2 bytes; CCS then an application-data
 * record of 53 bytes (the size of a SHA-256 Finished); plaintext close_notify and fatal alerts;
 * a plaintext KeyUpdate; a record header over 2^14 + 256; an HTTP request.
 * Checks: never a crash; unwrap takes at most what it was given and never returns plaintext
 * before the handshake; pending output stays within the first flight plus one alert; an error
 * is terminal and sticky; the same outcome whole or in pieces.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/x509.h>

#include "supervisor/transport/tls13s.h"
#include "tests/fuzz/fuzz.h"

#define OUT_BOUND 2048 /* the first flight with a ~150-byte certificate is under 1 KB */

static uint8_t g_hello[256];
static size_t g_hello_len;
static sv_tls_hello g_h;
static EVP_PKEY *g_key;
static uint8_t g_der[1024];
static size_t g_der_len;

/* The fixed ClientHello and an Ed25519 certificate, made once per process. */
static void setup(void)
{
    static const uint8_t exts[] = {
        0, 43, 0, 3, 2, 3, 4,                        /* supported_versions: TLS 1.3 */
        0, 51, 0, 38, 0, 36, 0, 0x1d, 0, 32,         /* key_share: X25519 (§1.7) */
        0x58, 0x69, 0xaf, 0xf4, 0x50, 0x54, 0x97, 0x32, 0xcb, 0xaa, 0xed, 0x5e, 0x5d, 0xf9,
        0xb3, 0x0a, 0x6d, 0xa3, 0x1c, 0xb0, 0xe5, 0x74, 0x2b, 0xad, 0x5a, 0xd4, 0xa1, 0xa7,
        0x68, 0xf1, 0xa6, 0x7b};
    uint8_t *m = g_hello;
    size_t at = 4;
    m[at++] = 3, m[at++] = 3;
    memset(m + at, 0x40, 32), at += 32;
    m[at++] = 0;
    static const uint8_t suites[] = {0, 6, 0x13, 1, 0x13, 2, 0x13, 3, 1, 0};
    memcpy(m + at, suites, sizeof suites), at += sizeof suites;
    m[at++] = 0, m[at++] = sizeof exts;
    memcpy(m + at, exts, sizeof exts), at += sizeof exts;
    m[0] = 1, m[1] = 0, m[2] = 0, m[3] = (uint8_t)(at - 4);
    g_hello_len = at;
    FUZZ_CHECK(sv_tls_hello_parse(g_hello, g_hello_len, &g_h) == 0);
    g_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    X509 *x = X509_new();
    FUZZ_CHECK(g_key != NULL && x != NULL && X509_set_pubkey(x, g_key) == 1);
    FUZZ_CHECK(X509_sign(x, g_key, NULL) > 0);
    unsigned char *der = g_der;
    int n = i2d_X509(x, &der);
    FUZZ_CHECK(n > 0 && (size_t)n <= sizeof g_der);
    g_der_len = (size_t)n;
    X509_free(x);
}

typedef struct outcome {
    int err;
    unsigned status;
} outcome;

static outcome run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed)
{
    sv_tls13s_params p = {.client_hello = g_hello, .client_hello_len = g_hello_len,
                          .hello = &g_h, .cert_der = g_der, .cert_der_len = g_der_len,
                          .sign_key = g_key};
    sv_tls13s *s;
    FUZZ_CHECK(sv_tls13s_new(&p, &s, NULL) == 0);
    size_t at = 0, len = 0;
    int err = 0;
    while (at < n && err == 0) {
        seed = seed * 1103515245u + 12345u;
        size_t k = piece >= n ? n - at : 1 + (seed >> 8) % piece, used = 0;
        k = k < n - at ? k : n - at;
        uint8_t plain[512];
        ssize_t r = sv_tls13s_unwrap(s, wire + at, k, &used, plain, sizeof plain);
        FUZZ_CHECK(used <= k);
        FUZZ_CHECK(r <= 0); /* nothing authenticates, so nothing comes up */
        sv_tls13s_out_peek(s, &len);
        FUZZ_CHECK(len <= OUT_BOUND);
        at += used;
        err = (int)r;
        if (r == 0 && used == 0)
            FUZZ_CHECK(sv_tls13s_status(s) & SV_LAYER_EOF);
        if (r == 0 && used == 0)
            break;
    }
    if (err != 0) {
        FUZZ_CHECK(err == -EPROTO || err == -EBADMSG || err == -EMSGSIZE || err == -ECONNRESET);
        size_t used = 0;
        uint8_t b[1];
        FUZZ_CHECK(sv_tls13s_unwrap(s, wire, n, &used, b, 1) == err);
        FUZZ_CHECK(sv_tls13s_wrap(s, wire, n) == err);
    } else {
        FUZZ_CHECK(sv_tls13s_wrap(s, wire, n) == -ENOTCONN);
    }
    outcome o = {err, sv_tls13s_status(s)};
    sv_tls13s_free(s);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_key == NULL)
        setup();
    if (size < 1)
        return 0;
    static const size_t pieces[] = {1, 2, 5, 64, 1000, 20000};
    outcome whole = run(data + 1, size - 1, size, 0);
    outcome split = run(data + 1, size - 1, pieces[data[0] % 6], data[0]);
    FUZZ_CHECK(whole.err == split.err && whole.status == split.status);
    return 0;
}
