/*
 * Unit tests: the ClientHello collector and parser (supervisor/transport/tls_hello.c, issue 11,
 * PROTOCOLS-2.md §1.3, §1.8). The real hellos come from an OpenSSL 3 client made here (SSL over
 * memory BIOs): its first flight is read from its write BIO. Synthetic hellos are built byte by
 * byte for the cases OpenSSL 3.0 cannot send (X25519MLKEM768, repeated extensions).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "supervisor/transport/tls_hello.h"

#define RAW_MAX 8192

/* The first flight of an OpenSSL client (TLS 1.2..1.3 unless @p tls12_only), SNI and ALPN
 * "h2","http/1.1". @return its length in @p raw. */
static size_t openssl_hello(uint8_t *raw, const char *sni, bool tls12_only)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    if (tls12_only)
        assert_int_equal(SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION), 1);
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    assert_int_equal(SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1), 0);
    SSL *ssl = SSL_new(ctx);
    BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rbio, wbio);
    SSL_set_connect_state(ssl);
    assert_int_equal(SSL_set_tlsext_host_name(ssl, sni), 1);
    assert_int_equal(SSL_do_handshake(ssl), -1); /* wants to read the ServerHello */
    int n = BIO_read(wbio, raw, RAW_MAX);
    assert_true(n > 0 && n < RAW_MAX);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return (size_t)n;
}

/* A ClientHello message with session id 32 × 0xaa, suites 1301 1302 1303, and @p exts. */
static size_t synth_hello(uint8_t *msg, const uint8_t *exts, size_t exts_len)
{
    size_t at = 4;
    msg[at++] = 3, msg[at++] = 3;
    for (int i = 0; i < 32; i++)
        msg[at++] = (uint8_t)(0x40 + i);
    msg[at++] = 32;
    memset(msg + at, 0xaa, 32), at += 32;
    static const uint8_t suites[] = {0, 6, 0x13, 1, 0x13, 2, 0x13, 3, 1, 0};
    memcpy(msg + at, suites, sizeof suites), at += sizeof suites;
    msg[at++] = (uint8_t)(exts_len >> 8), msg[at++] = (uint8_t)exts_len;
    memcpy(msg + at, exts, exts_len), at += exts_len;
    msg[0] = 1, msg[1] = (uint8_t)((at - 4) >> 16), msg[2] = (uint8_t)((at - 4) >> 8);
    msg[3] = (uint8_t)(at - 4);
    return at;
}

/* Frame @p msg into handshake records of at most @p piece bytes. @return raw length. */
static size_t frame(uint8_t *raw, const uint8_t *msg, size_t len, size_t piece)
{
    size_t out = 0;
    for (size_t at = 0; at < len; at += piece) {
        size_t k = len - at < piece ? len - at : piece;
        raw[out++] = 22, raw[out++] = 3, raw[out++] = 1;
        raw[out++] = (uint8_t)(k >> 8), raw[out++] = (uint8_t)k;
        memcpy(raw + out, msg + at, k), out += k;
    }
    return out;
}

static void openssl_hello_parses(void **state)
{
    (void)state;
    uint8_t raw[RAW_MAX], msg[SV_TLS_HELLO_MAX];
    size_t n = openssl_hello(raw, "node.example.test", false), len = 0, used = 0;
    assert_int_equal(sv_tls_hello_collect(raw, n, msg, sizeof msg, &len, &used), 1);
    assert_int_equal(used, n);
    assert_int_equal(len, n - 5);
    assert_memory_equal(msg, raw + 5, len);
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, len, &h), 0);
    assert_int_equal(h.legacy_version, 0x0303);
    assert_ptr_equal(h.random, msg + SV_TLS_HELLO_RANDOM_OFF);
    assert_int_equal(h.session_id.n, 32); /* OpenSSL's middlebox compatibility id */
    assert_int_equal(h.session_id_off, SV_TLS_HELLO_SESSION_ID_OFF);
    assert_ptr_equal(h.session_id.p, msg + SV_TLS_HELLO_SESSION_ID_OFF);
    assert_int_equal(h.server_name.n, strlen("node.example.test"));
    assert_memory_equal(h.server_name.p, "node.example.test", h.server_name.n);
    assert_true(h.has_tls13);
    assert_true(h.has_key_share);
    assert_non_null(h.x25519);
    assert_true(h.has_signature_algorithms);
    assert_int_equal(h.alpn.n, 12);
    assert_memory_equal(h.alpn.p, "\x02h2\x08http/1.1", 12);
    assert_true(sv_tls_hello_has_suite(&h, 0x1301));
    assert_true(sv_tls_hello_has_suite(&h, 0x1303));
    assert_false(sv_tls_hello_has_suite(&h, 0x0005));
}

static void tls12_hello_has_no_tls13(void **state)
{
    (void)state;
    uint8_t raw[RAW_MAX], msg[SV_TLS_HELLO_MAX];
    size_t n = openssl_hello(raw, "a.test", true), len = 0, used = 0;
    assert_int_equal(sv_tls_hello_collect(raw, n, msg, sizeof msg, &len, &used), 1);
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, len, &h), 0);
    assert_false(h.has_tls13);
    assert_null(h.x25519);
    assert_int_equal(h.session_id.n, 0);
}

/* Every prefix is "more", the whole is complete with the same message, whatever the split. */
static void collect_whole_and_split(void **state)
{
    (void)state;
    uint8_t raw[RAW_MAX], msg[SV_TLS_HELLO_MAX], ref[SV_TLS_HELLO_MAX];
    size_t n = openssl_hello(raw, "split.test", false), len = 0, used = 0;
    assert_int_equal(sv_tls_hello_collect(raw, n, ref, sizeof ref, &len, &used), 1);
    size_t ref_len = len;
    static const size_t pieces[] = {1, 2, 3, 4, 5, 7, 100, 16384};
    for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
        uint8_t framed[RAW_MAX * 6];
        size_t fn = frame(framed, ref, ref_len, pieces[p]);
        for (size_t cut = 0; cut < fn; cut++) /* byte at a time: every prefix wants more */
            assert_int_equal(sv_tls_hello_collect(framed, cut, msg, sizeof msg, &len, &used), 0);
        memset(msg, 0, sizeof msg);
        assert_int_equal(sv_tls_hello_collect(framed, fn, msg, sizeof msg, &len, &used), 1);
        assert_int_equal(len, ref_len);
        assert_int_equal(used, fn);
        assert_memory_equal(msg, ref, len);
    }
}

/* Bytes after the hello's last record stay with the caller (raw_used stops before them). */
static void collect_leaves_following_records(void **state)
{
    (void)state;
    uint8_t raw[RAW_MAX + 16], msg[SV_TLS_HELLO_MAX];
    size_t n = openssl_hello(raw, "x.test", false), len = 0, used = 0;
    static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
    memcpy(raw + n, ccs, sizeof ccs);
    assert_int_equal(sv_tls_hello_collect(raw, n + sizeof ccs, msg, sizeof msg, &len, &used), 1);
    assert_int_equal(used, n);
}

static void collect_refuses(void **state)
{
    (void)state;
    uint8_t msg[SV_TLS_HELLO_MAX], raw[RAW_MAX];
    size_t len = 0, used = 0;
    static const uint8_t appdata[] = {23, 3, 3, 0, 4, 1, 0, 0, 0};
    static const uint8_t tls10hdr_bad[] = {22, 3, 4, 0, 4, 1, 0, 0, 0};
    static const uint8_t empty_rec[] = {22, 3, 1, 0, 0};
    static const uint8_t server_hello[] = {22, 3, 3, 0, 4, 2, 0, 0, 0};
    static const uint8_t http[] = "GET / HTTP/1.1\r\n";
    static const uint8_t huge[] = {22, 3, 1, 0, 4, 1, 0, 0x40, 1};   /* 16 KiB + 1 body */
    static const uint8_t too_long_rec[] = {22, 3, 1, 0x40, 1, 1};   /* 2^14 + 1 */
    static const uint8_t trailing[] = {22, 3, 1, 0, 5, 1, 0, 0, 0, 9};
    assert_int_equal(sv_tls_hello_collect(appdata, 1, msg, sizeof msg, &len, &used), -EPROTO);
    assert_int_equal(sv_tls_hello_collect(appdata, 9, msg, sizeof msg, &len, &used), -EPROTO);
    assert_int_equal(sv_tls_hello_collect(tls10hdr_bad, 3, msg, sizeof msg, &len, &used),
                     -EPROTO);
    assert_int_equal(sv_tls_hello_collect(empty_rec, 5, msg, sizeof msg, &len, &used), -EPROTO);
    assert_int_equal(sv_tls_hello_collect(server_hello, 6, msg, sizeof msg, &len, &used),
                     -EPROTO);
    assert_int_equal(sv_tls_hello_collect(http, 16, msg, sizeof msg, &len, &used), -EPROTO);
    assert_int_equal(sv_tls_hello_collect(huge, 9, msg, sizeof msg, &len, &used), -EMSGSIZE);
    assert_int_equal(sv_tls_hello_collect(too_long_rec, 6, msg, sizeof msg, &len, &used),
                     -EPROTO);
    assert_int_equal(sv_tls_hello_collect(trailing, 10, msg, sizeof msg, &len, &used), -EPROTO);
    size_t n = openssl_hello(raw, "small.test", false);
    assert_int_equal(sv_tls_hello_collect(raw, n, msg, 100, &len, &used), -EMSGSIZE);
}

/* Cut the body at every offset (fixing the outer length): only the cut right before the
 * extensions is still a well-formed (extension-less) hello. */
static void parse_truncations(void **state)
{
    (void)state;
    uint8_t raw[RAW_MAX], msg[SV_TLS_HELLO_MAX], cut[SV_TLS_HELLO_MAX];
    size_t n = openssl_hello(raw, "cut.test", false), len = 0, used = 0;
    assert_int_equal(sv_tls_hello_collect(raw, n, msg, sizeof msg, &len, &used), 1);
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, len, &h), 0);
    size_t ext_start = (size_t)(h.extensions.p - msg) - 2;
    for (size_t i = 0; i < len; i++) {
        memcpy(cut, msg, i);
        if (i >= 4) {
            cut[1] = (uint8_t)((i - 4) >> 16), cut[2] = (uint8_t)((i - 4) >> 8);
            cut[3] = (uint8_t)(i - 4);
        }
        int want = i == ext_start ? 0 : -EPROTO;
        assert_int_equal(sv_tls_hello_parse(cut, i, &h), want);
        assert_int_equal(sv_tls_hello_parse(msg, i, &h), -EPROTO); /* outer length wrong */
    }
}

static void synthetic_mlkem_share(void **state)
{
    (void)state;
    static uint8_t exts[2048], msg[4096];
    size_t at = 0;
    /* key_share: X25519MLKEM768 (1216 bytes of 0x11) then X25519 (32 bytes of 0x22) */
    size_t body = 2 + 4 + SV_TLS_MLKEM_SHARE_LEN + 4 + 32;
    exts[at++] = 0, exts[at++] = 51, exts[at++] = (uint8_t)(body >> 8), exts[at++] = (uint8_t)body;
    exts[at++] = (uint8_t)((body - 2) >> 8), exts[at++] = (uint8_t)(body - 2);
    exts[at++] = 0x11, exts[at++] = 0xec, exts[at++] = SV_TLS_MLKEM_SHARE_LEN >> 8;
    exts[at++] = SV_TLS_MLKEM_SHARE_LEN & 0xff;
    memset(exts + at, 0x11, SV_TLS_MLKEM_SHARE_LEN), at += SV_TLS_MLKEM_SHARE_LEN;
    exts[at++] = 0, exts[at++] = 0x1d, exts[at++] = 0, exts[at++] = 32;
    memset(exts + at, 0x22, 32), at += 32;
    /* supported_versions: 0x0304 */
    static const uint8_t sv[] = {0, 43, 0, 3, 2, 3, 4};
    memcpy(exts + at, sv, sizeof sv), at += sizeof sv;
    size_t len = synth_hello(msg, exts, at);
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, len, &h), 0);
    assert_non_null(h.x25519mlkem768);
    assert_int_equal(h.x25519mlkem768[0], 0x11);
    assert_non_null(h.x25519);
    assert_int_equal(h.x25519[0], 0x22);
    assert_true(h.has_tls13);
    assert_null(h.server_name.p);
    assert_false(h.has_signature_algorithms);
    assert_memory_equal(h.session_id.p, "\xaa\xaa\xaa\xaa", 4);
}

static void synthetic_malformed_extensions(void **state)
{
    (void)state;
    uint8_t msg[512];
    static const uint8_t dup[] = {0, 43, 0, 3, 2, 3, 4, 0, 43, 0, 3, 2, 3, 4};
    static const uint8_t dup_unknown[] = {0xfe, 0xfe, 0, 0, 0xfe, 0xfe, 0, 0};
    static const uint8_t sni_empty_name[] = {0, 0, 0, 5, 0, 3, 0, 0, 0};
    static const uint8_t sni_two[] = {0, 0, 0, 12, 0, 10, 1, 0, 2, 'z', 'z', 0, 0, 2, 'a', 'b'};
    static const uint8_t versions_odd[] = {0, 43, 0, 2, 1, 3};
    static const uint8_t alpn_empty_name[] = {0, 16, 0, 3, 0, 1, 0};
    static const uint8_t share_short[] = {0, 51, 0, 6, 0, 4, 0, 0x1d, 0, 3};
    static const uint8_t share_x25519_31[] = {0, 51, 0, 37, 0, 35, 0, 0x1d, 0, 31,
                                              1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                              16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
                                              29, 30, 31};
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, dup, sizeof dup), &h), -EPROTO);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, dup_unknown, 8), &h), -EPROTO);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, dup_unknown, 4), &h), 0);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, sni_empty_name, 9), &h), -EPROTO);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, sni_two, sizeof sni_two), &h), 0);
    assert_int_equal(h.server_name.n, 2);
    assert_memory_equal(h.server_name.p, "ab", 2); /* the first host_name (type 0) */
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, versions_odd, 6), &h), -EPROTO);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, alpn_empty_name, 7), &h), -EPROTO);
    assert_int_equal(sv_tls_hello_parse(msg, synth_hello(msg, share_short, 10), &h), -EPROTO);
    assert_int_equal(
        sv_tls_hello_parse(msg, synth_hello(msg, share_x25519_31, sizeof share_x25519_31), &h),
        0);
    assert_true(h.has_key_share);
    assert_null(h.x25519); /* a 31-byte X25519 share is not usable */
}

/* The 79-byte ClientHello of the PROTOCOLS-2.md §1.7 vector (session id zeroed, no
 * extensions but their empty length): REALITY's AAD. */
static void protocols_vector_hello(void **state)
{
    (void)state;
    uint8_t msg[79] = {1, 0, 0, 0x4b, 3, 3};
    for (int i = 0; i < 32; i++)
        msg[6 + i] = (uint8_t)(0x40 + i);
    msg[38] = 32;
    static const uint8_t tail[] = {0, 2, 0x13, 1, 1, 0, 0, 0};
    memcpy(msg + 71, tail, sizeof tail);
    sv_tls_hello h;
    assert_int_equal(sv_tls_hello_parse(msg, sizeof msg, &h), 0);
    assert_int_equal(h.session_id_off, 39);
    assert_int_equal(h.session_id.n, 32);
    assert_int_equal(h.random[0], 0x40);
    assert_int_equal(h.random[31], 0x5f);
    assert_true(sv_tls_hello_has_suite(&h, 0x1301));
    assert_false(h.has_tls13);
    assert_int_equal(h.extensions.n, 0);
    uint8_t raw[5 + 79] = {22, 3, 1, 0, 79}, out[SV_TLS_HELLO_MAX];
    memcpy(raw + 5, msg, sizeof msg);
    size_t len = 0, used = 0;
    assert_int_equal(sv_tls_hello_collect(raw, sizeof raw, out, sizeof out, &len, &used), 1);
    assert_int_equal(len, 79);
    assert_memory_equal(out, msg, 79);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(openssl_hello_parses),
        cmocka_unit_test(tls12_hello_has_no_tls13),
        cmocka_unit_test(collect_whole_and_split),
        cmocka_unit_test(collect_leaves_following_records),
        cmocka_unit_test(collect_refuses),
        cmocka_unit_test(parse_truncations),
        cmocka_unit_test(synthetic_mlkem_share),
        cmocka_unit_test(synthetic_malformed_extensions),
        cmocka_unit_test(protocols_vector_hello),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
