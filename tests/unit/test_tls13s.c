/*
 * Unit tests: the TLS 1.3 server for REALITY (supervisor/transport/tls13s.c, issue 11,
 * PROTOCOLS-2.md §1.5). Every test runs a real OpenSSL 3 client (SSL over memory BIOs, no
 * verification; its default signature_algorithms include ed25519) against an sv_tls13s and
 * moves the bytes both ways in memory. The certificate is made here as §1.5 and §1.8 describe:
 * an Ed25519 key, serial 0, empty names, the zero validity of Go's time.Time.
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
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "supervisor/transport/tls13s.h"
#include "tests/unit/tls_target.h"

#define DATA_LEN (1u << 20)
#define BUF_MAX (1u << 21)

static EVP_PKEY *g_key;  /* the Ed25519 key of CertificateVerify */
static uint8_t *g_der;   /* its certificate */
static size_t g_der_len;

/* A client, the server, and the bytes each side received. */
typedef struct pair {
    SSL_CTX *ctx;
    SSL *ssl;
    BIO *rbio, *wbio;           /* the client's: rbio gets the server's bytes */
    sv_tls13s *srv;
    uint8_t *got;               /* plaintext the server unwrapped */
    size_t got_len;
    size_t piece;               /* bytes per unwrap call */
    uint8_t hello[SV_TLS_HELLO_MAX];
    size_t hello_len;
    sv_tls_hello h;
} pair;

static int make_cert(void **state)
{
    (void)state;
    g_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    X509 *x = X509_new();
    assert_non_null(g_key);
    assert_non_null(x);
    assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
    assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 0), 1);
    assert_int_equal(ASN1_TIME_set_string(X509_getm_notBefore(x), "00010101000000Z"), 1);
    assert_int_equal(ASN1_TIME_set_string(X509_getm_notAfter(x), "00010101000000Z"), 1);
    assert_int_equal(X509_set_pubkey(x, g_key), 1);
    assert_true(X509_sign(x, g_key, NULL) > 0);
    unsigned char *der = NULL;
    int n = i2d_X509(x, &der);
    assert_true(n > 64);
    g_der = malloc((size_t)n);
    memcpy(g_der, der, (size_t)n);
    g_der_len = (size_t)n;
    OPENSSL_free(der);
    X509_free(x);
    return 0;
}

static int free_cert(void **state)
{
    (void)state;
    EVP_PKEY_free(g_key);
    free(g_der);
    return 0;
}

/* Make the client (TLS 1.3 and 1.2 unless @p max says otherwise) and read its ClientHello. */
static void client_start(pair *p, const char *suites, const char *groups, int max)
{
    memset(p, 0, sizeof *p);
    p->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(p->ctx);
    SSL_CTX_set_verify(p->ctx, SSL_VERIFY_NONE, NULL);
    if (suites != NULL)
        assert_int_equal(SSL_CTX_set_ciphersuites(p->ctx, suites), 1);
    if (groups != NULL)
        assert_int_equal(SSL_CTX_set1_groups_list(p->ctx, groups), 1);
    if (max != 0)
        assert_int_equal(SSL_CTX_set_max_proto_version(p->ctx, max), 1);
    p->ssl = SSL_new(p->ctx);
    p->rbio = BIO_new(BIO_s_mem());
    p->wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(p->ssl, p->rbio, p->wbio);
    SSL_set_connect_state(p->ssl);
    assert_int_equal(SSL_set_tlsext_host_name(p->ssl, "node.test"), 1);
    assert_int_equal(SSL_do_handshake(p->ssl), -1);
    uint8_t raw[8192];
    int n = BIO_read(p->wbio, raw, sizeof raw);
    size_t used = 0;
    assert_true(n > 0);
    assert_int_equal(sv_tls_hello_collect(raw, (size_t)n, p->hello, sizeof p->hello,
                                          &p->hello_len, &used), 1);
    assert_int_equal(sv_tls_hello_parse(p->hello, p->hello_len, &p->h), 0);
    p->got = malloc(BUF_MAX);
    p->piece = 1u << 20;
}

static sv_tls13s_params params_for(const pair *p)
{
    return (sv_tls13s_params){.client_hello = p->hello, .client_hello_len = p->hello_len,
                              .hello = &p->h, .cert_der = g_der, .cert_der_len = g_der_len,
                              .sign_key = g_key};
}

static void pair_free(pair *p)
{
    sv_tls13s_free(p->srv);
    SSL_free(p->ssl);
    SSL_CTX_free(p->ctx);
    free(p->got);
}

/* Server output → client. */
static void to_client(pair *p)
{
    size_t len = 0;
    const uint8_t *out = sv_tls13s_out_peek(p->srv, &len);
    if (len > 0)
        assert_int_equal(BIO_write(p->rbio, out, (int)len), (int)len);
    sv_tls13s_out_consume(p->srv, len);
}

/* Client output → server in pieces of p->piece bytes. @return 0 or the server's error. */
static int to_server(pair *p)
{
    static uint8_t buf[BUF_MAX];
    int n = BIO_read(p->wbio, buf, sizeof buf);
    size_t total = n > 0 ? (size_t)n : 0, off = 0;
    for (;;) {
        size_t k = total - off < p->piece ? total - off : p->piece, used = 0;
        size_t cap = 1000 + off % 3000; /* varying plaintext room */
        if (cap > BUF_MAX - p->got_len)
            cap = BUF_MAX - p->got_len;
        ssize_t m = sv_tls13s_unwrap(p->srv, buf + off, k, &used, p->got + p->got_len, cap);
        if (m < 0)
            return (int)m;
        assert_true(used <= k);
        p->got_len += (size_t)m;
        off += used;
        if (m == 0 && used == 0) {
            assert_int_equal(k, 0); /* it never refuses bytes it could take */
            return 0;
        }
    }
}

/* Drive the handshake to its end on both sides. @return 0 or the server's error. */
static int handshake(pair *p)
{
    for (int i = 0; i < 50; i++) {
        to_client(p);
        int r = SSL_do_handshake(p->ssl);
        int rc = to_server(p);
        if (rc != 0)
            return rc;
        if (r == 1 && (sv_tls13s_status(p->srv) & SV_LAYER_UP))
            return 0;
        assert_true(r == 1 || SSL_get_error(p->ssl, r) == SSL_ERROR_WANT_READ);
    }
    fail_msg("handshake did not finish");
    return -1;
}

static void start_server(pair *p)
{
    sv_tls13s_params prm = params_for(p);
    sv_error err = {0};
    assert_int_equal(sv_tls13s_new(&prm, &p->srv, &err), 0);
    assert_int_equal(sv_tls13s_status(p->srv), 0);
}

/* The client got exactly our certificate's DER. */
static void check_peer_cert(pair *p)
{
    X509 *x = SSL_get0_peer_certificate(p->ssl);
    assert_non_null(x);
    unsigned char *der = NULL;
    int n = i2d_X509(x, &der);
    assert_int_equal(n, (int)g_der_len);
    assert_memory_equal(der, g_der, g_der_len);
    OPENSSL_free(der);
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *d = malloc(n);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i * 31 + seed + (i >> 11));
    return d;
}

/* @p n bytes client → server, then @p n bytes server → client: byte-identical. */
static void both_ways(pair *p, size_t n)
{
    uint8_t *up = pattern(n, 7), *down = pattern(n, 99), *seen = malloc(n);
    for (size_t at = 0; at < n; at += 16384)
        assert_true(SSL_write(p->ssl, up + at, n - at < 16384 ? (int)(n - at) : 16384) > 0);
    p->got_len = 0;
    assert_int_equal(to_server(p), 0);
    assert_int_equal(p->got_len, n);
    assert_memory_equal(p->got, up, n);
    size_t sent = 0, read = 0;
    while (read < n) {
        ssize_t w = sv_tls13s_wrap(p->srv, down + sent, n - sent);
        assert_true(w >= 0);
        sent += (size_t)w;
        size_t pending = 0;
        sv_tls13s_out_peek(p->srv, &pending);
        assert_true(pending <= SV_TLS13S_OUT_MAX + 16384 + 256);
        to_client(p);
        int r;
        while ((r = SSL_read(p->ssl, seen + read, (int)(n - read))) > 0)
            read += (size_t)r;
        assert_true(sent > 0);
    }
    assert_memory_equal(seen, down, n);
    free(up), free(down), free(seen);
}

/* close_notify both ways. */
static void close_both(pair *p)
{
    assert_int_equal(sv_tls13s_shutdown(p->srv), 0);
    assert_int_equal(sv_tls13s_shutdown(p->srv), 0);
    assert_int_equal(sv_tls13s_wrap(p->srv, (const uint8_t *)"x", 1), -EPIPE);
    to_client(p);
    uint8_t b[16];
    assert_int_equal(SSL_read(p->ssl, b, sizeof b), 0);
    assert_int_equal(SSL_get_error(p->ssl, 0), SSL_ERROR_ZERO_RETURN);
    SSL_shutdown(p->ssl);
    assert_int_equal(to_server(p), 0);
    assert_true(sv_tls13s_status(p->srv) & SV_LAYER_EOF);
}

static void run_suite(const char *name, uint16_t id, size_t piece, size_t n)
{
    pair p;
    client_start(&p, name, NULL, 0);
    p.piece = piece;
    start_server(&p);
    assert_int_equal(sv_tls13s_suite(p.srv), id);
    assert_int_equal(sv_tls13s_wrap(p.srv, (const uint8_t *)"x", 1), -ENOTCONN);
    assert_int_equal(handshake(&p), 0);
    assert_int_equal(SSL_version(p.ssl), TLS1_3_VERSION);
    assert_int_equal(SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(p.ssl)), id);
    check_peer_cert(&p);
    both_ways(&p, n);
    close_both(&p);
    pair_free(&p);
}

static void aes128_whole(void **state)
{
    (void)state;
    run_suite("TLS_AES_128_GCM_SHA256", 0x1301, 1u << 20, DATA_LEN);
}

static void aes256_whole(void **state)
{
    (void)state;
    run_suite("TLS_AES_256_GCM_SHA384", 0x1302, 1u << 20, DATA_LEN);
}

static void chacha_whole(void **state)
{
    (void)state;
    run_suite("TLS_CHACHA20_POLY1305_SHA256", 0x1303, 1u << 20, DATA_LEN);
}

static void each_suite_byte_at_a_time(void **state)
{
    (void)state;
    run_suite("TLS_AES_128_GCM_SHA256", 0x1301, 1, 64 * 1024);
    run_suite("TLS_AES_256_GCM_SHA384", 0x1302, 1, 64 * 1024);
    run_suite("TLS_CHACHA20_POLY1305_SHA256", 0x1303, 1, 64 * 1024);
    run_suite("TLS_CHACHA20_POLY1305_SHA256", 0x1303, 7, 64 * 1024);
}

/* The first suite of the client's order that is ours. */
static void client_order_picks_the_suite(void **state)
{
    (void)state;
    pair p;
    client_start(&p, "TLS_AES_128_CCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256",
                 NULL, 0);
    start_server(&p);
    assert_int_equal(sv_tls13s_suite(p.srv), 0x1303);
    assert_int_equal(handshake(&p), 0);
    pair_free(&p);
}

static void refused(const char *suites, const char *groups, int max, const char *why)
{
    pair p;
    client_start(&p, suites, groups, max);
    sv_tls13s_params prm = params_for(&p);
    sv_error err = {0};
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, &err), -EPROTONOSUPPORT);
    assert_null(p.srv);
    assert_non_null(strstr(err.msg, why));
    pair_free(&p);
}

static void clients_without_x25519_or_tls13_are_refused(void **state)
{
    (void)state;
    refused(NULL, "P-256", 0, "X25519");
    refused(NULL, NULL, TLS1_2_VERSION, "TLS 1.3");
    refused("TLS_AES_128_CCM_SHA256", NULL, 0, "suite");
}

static void bad_params_are_refused(void **state)
{
    (void)state;
    pair p;
    client_start(&p, NULL, NULL, 0);
    sv_tls13s_params prm = params_for(&p);
    EVP_PKEY *p256 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    prm.sign_key = p256;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), -EINVAL);
    EVP_PKEY_free(p256);
    prm = params_for(&p);
    prm.cert_der_len = SV_TLS13S_CERT_MAX + 1;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), -EINVAL);
    prm = params_for(&p);
    static const uint16_t tiny[] = {30};
    prm.pad_sizes = tiny, prm.pad_count = 1;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), -EMSGSIZE);
    prm.pad_count = 3;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), -EINVAL);
    prm = params_for(&p);
    static const uint8_t not_sh[] = {1, 0, 0, 0};
    prm.server_hello = not_sh, prm.server_hello_len = sizeof not_sh;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), -EINVAL);
    assert_null(p.srv);
    pair_free(&p);
}

/* The client's CCS, Finished and first data in one read, as a real client sends them. */
static void finished_and_data_in_one_read(void **state)
{
    (void)state;
    pair p;
    client_start(&p, "TLS_CHACHA20_POLY1305_SHA256", NULL, 0);
    start_server(&p);
    to_client(&p);
    assert_int_equal(SSL_do_handshake(p.ssl), 1);
    assert_int_equal(SSL_write(p.ssl, "GET / HTTP/1.1\r\n\r\n", 18), 18);
    assert_int_equal(to_server(&p), 0);
    assert_true(sv_tls13s_status(p.srv) & SV_LAYER_UP);
    assert_int_equal(p.got_len, 18);
    assert_memory_equal(p.got, "GET / HTTP/1.1\r\n\r\n", 18);
    pair_free(&p);
}

/* ---------- refusals of a bad client flight ---------- */

static uint8_t g_client_hs_secret[48]; /* from the client's key log */
static size_t g_client_hs_len;

static void keylog(const SSL *ssl, const char *line)
{
    (void)ssl;
    static const char tag[] = "CLIENT_HANDSHAKE_TRAFFIC_SECRET ";
    if (strncmp(line, tag, sizeof tag - 1) != 0)
        return;
    const char *hex = strchr(line + sizeof tag - 1, ' ') + 1;
    g_client_hs_len = strlen(hex) / 2;
    for (size_t i = 0; i < g_client_hs_len; i++)
        sscanf(hex + 2 * i, "%2hhx", &g_client_hs_secret[i]);
}

/* HKDF-Expand-Label with OpenSSL's own HKDF (RFC 8446 §7.1), SHA-256. */
static void expand_label(const char *label, uint8_t *out, size_t len)
{
    uint8_t info[64];
    size_t l = strlen(label);
    info[0] = 0, info[1] = (uint8_t)len, info[2] = (uint8_t)(6 + l);
    memcpy(info + 3, "tls13 ", 6);
    memcpy(info + 9, label, l);
    info[9 + l] = 0;
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *c = EVP_KDF_CTX_new(kdf);
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM prm[] = {
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, g_client_hs_secret, 32),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, 10 + l),
        OSSL_PARAM_construct_end(),
    };
    assert_int_equal(EVP_KDF_derive(c, out, len, prm), 1);
    EVP_KDF_CTX_free(c);
    EVP_KDF_free(kdf);
}

/* AES-128-GCM over the record at @p r (header, then @p n bytes with the tag) with sequence
 * number 0, in place, both ways. */
static void gcm_record(uint8_t *r, size_t n, int enc)
{
    uint8_t key[16], iv[12], tag[16];
    expand_label("key", key, 16);
    expand_label("iv", iv, 12);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int l = 0;
    assert_int_equal(EVP_CipherInit_ex(c, EVP_aes_128_gcm(), NULL, key, iv, enc), 1);
    if (!enc)
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, r + 5 + n - 16);
    assert_int_equal(EVP_CipherUpdate(c, NULL, &l, r, 5), 1);
    assert_int_equal(EVP_CipherUpdate(c, r + 5, &l, r + 5, (int)(n - 16)), 1);
    assert_int_equal(EVP_CipherFinal_ex(c, tag, &l), 1);
    if (enc)
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, r + 5 + n - 16);
    EVP_CIPHER_CTX_free(c);
}

/* The client's Finished, decrypted with its logged key, changed and encrypted again: the
 * record authenticates, the verify_data does not (RFC 8446 §4.4.4). */
static void wrong_finished_is_refused(void **state)
{
    (void)state;
    pair p;
    client_start(&p, "TLS_AES_128_GCM_SHA256", NULL, 0);
    SSL_CTX_set_keylog_callback(p.ctx, keylog);
    start_server(&p);
    to_client(&p);
    assert_int_equal(SSL_do_handshake(p.ssl), 1);
    uint8_t flight[512];
    int n = BIO_read(p.wbio, flight, sizeof flight);
    assert_true(n > 6 + 5);
    assert_memory_equal(flight, "\x14\x03\x03\x00\x01\x01", 6); /* its dummy CCS */
    uint8_t *r = flight + 6;
    size_t len = (size_t)r[3] << 8 | r[4];
    assert_int_equal(len, 4 + 32 + 1 + 16);
    gcm_record(r, len, 0);
    assert_int_equal(r[5], 20); /* Finished */
    r[5 + 4] ^= 1;
    gcm_record(r, len, 1);
    assert_int_equal(BIO_write(p.wbio, flight, n), n);
    assert_int_equal(to_server(&p), -EACCES);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_UP);
    size_t pending = 0;
    sv_tls13s_out_peek(p.srv, &pending);
    assert_true(pending > 0); /* the decrypt_error alert */
    size_t used = 0;
    uint8_t b[8];
    assert_int_equal(sv_tls13s_unwrap(p.srv, b, 0, &used, b, sizeof b), -EACCES); /* sticky */
    pair_free(&p);
}

static void corrupt_records_are_refused(void **state)
{
    (void)state;
    pair p;
    client_start(&p, NULL, NULL, 0);
    start_server(&p);
    to_client(&p);
    assert_int_equal(SSL_do_handshake(p.ssl), 1);
    uint8_t flight[512];
    int n = BIO_read(p.wbio, flight, sizeof flight);
    flight[n - 3] ^= 0x40; /* in the Finished record's tag */
    assert_int_equal(BIO_write(p.wbio, flight, n), n);
    assert_int_equal(to_server(&p), -EBADMSG);
    pair_free(&p);

    client_start(&p, NULL, NULL, 0); /* after the handshake: one application data record */
    start_server(&p);
    assert_int_equal(handshake(&p), 0);
    assert_int_equal(SSL_write(p.ssl, "hello, server", 13), 13);
    n = BIO_read(p.wbio, flight, sizeof flight);
    flight[8] ^= 1;
    assert_int_equal(BIO_write(p.wbio, flight, n), n);
    assert_int_equal(to_server(&p), -EBADMSG);
    pair_free(&p);

    client_start(&p, NULL, NULL, 0); /* a plaintext handshake record where none may come */
    start_server(&p);
    assert_int_equal(handshake(&p), 0);
    static const uint8_t hs[] = {22, 3, 3, 0, 5, 24, 0, 0, 1, 0};
    assert_int_equal(BIO_write(p.wbio, hs, sizeof hs), (int)sizeof hs);
    assert_int_equal(to_server(&p), -EPROTO);
    pair_free(&p);

    client_start(&p, NULL, NULL, 0); /* a record over 2^14 + 256 */
    start_server(&p);
    static const uint8_t big[] = {23, 3, 3, 0x41, 0x01};
    assert_int_equal(BIO_write(p.wbio, big, sizeof big), (int)sizeof big);
    assert_int_equal(to_server(&p), -EMSGSIZE);
    pair_free(&p);
}

/* A client that cannot use our flight answers with a plaintext fatal alert. */
static void client_alert_ends_the_handshake(void **state)
{
    (void)state;
    pair p;
    client_start(&p, NULL, NULL, 0);
    start_server(&p);
    static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
    assert_int_equal(BIO_write(p.wbio, alert, sizeof alert), (int)sizeof alert);
    assert_int_equal(to_server(&p), -ECONNRESET);
    pair_free(&p);
}

/* KeyUpdate with update_requested (RFC 8446 §4.6.3): the server reads under the client's new
 * key and answers with its own KeyUpdate; data passes both ways afterwards. */
static void key_update_is_answered(void **state)
{
    (void)state;
    pair p;
    client_start(&p, "TLS_AES_256_GCM_SHA384", NULL, 0);
    start_server(&p);
    assert_int_equal(handshake(&p), 0);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(SSL_key_update(p.ssl, SSL_KEY_UPDATE_REQUESTED), 1);
        assert_int_equal(SSL_write(p.ssl, "ping", 4), 4);
        p.got_len = 0;
        assert_int_equal(to_server(&p), 0);
        assert_int_equal(p.got_len, 4);
        assert_memory_equal(p.got, "ping", 4);
        assert_int_equal(sv_tls13s_wrap(p.srv, (const uint8_t *)"pong", 4), 4);
        size_t pending = 0;
        sv_tls13s_out_peek(p.srv, &pending);
        assert_int_equal(pending, (5 + 5 + 1 + 16) + (5 + 4 + 1 + 16)); /* KeyUpdate, pong */
        to_client(&p);
        char b[8];
        assert_int_equal(SSL_read(p.ssl, b, sizeof b), 4);
        assert_memory_equal(b, "pong", 4);
    }
    both_ways(&p, 100000);
    pair_free(&p);
}

/* ---------- XTLS Vision's switch to raw (PROTOCOLS-2.md §2.6) ---------- */

/* Two records and raw bytes in one read: with WATCH each unwrap stops after one record, so
 * that RAW_IN set after the second passes the raw bytes up as they are (never decrypted);
 * RAW_OUT puts later output after the pending records unsealed, and shutdown sends nothing.
 * PASS (issue 11: the runtime may splice) holds only raw both ways with nothing held. */
static void direct_switch_at_the_record_boundary(void **state)
{
    (void)state;
    pair p;
    client_start(&p, "TLS_AES_128_GCM_SHA256", NULL, 0);
    p.piece = 1u << 20;
    start_server(&p);
    assert_int_equal(sv_tls13s_direct(p.srv, SV_LAYER_RAW_IN), -ENOTCONN); /* not up yet */
    assert_int_equal(handshake(&p), 0);
    assert_int_equal(sv_tls13s_direct(p.srv, SV_LAYER_WATCH), 0);
    assert_true(sv_tls13s_status(p.srv) & SV_LAYER_RECORDS);
    assert_int_equal(SSL_write(p.ssl, "first", 5), 5);
    assert_int_equal(SSL_write(p.ssl, "second", 6), 6);
    static uint8_t in[4096];
    int n = BIO_read(p.wbio, in, sizeof in);
    assert_true(n > 0);
    static const char raw[] = "\x17\x03\x03\x00\x05inner"; /* not ours to decrypt */
    memcpy(in + n, raw, sizeof raw - 1);
    size_t total = (size_t)n + sizeof raw - 1, off = 0, used = 0;
    uint8_t out[256];
    ssize_t m = sv_tls13s_unwrap(p.srv, in, total, &used, out, sizeof out);
    assert_int_equal(m, 5);
    assert_memory_equal(out, "first", 5);
    off += used;
    m = sv_tls13s_unwrap(p.srv, in + off, total - off, &used, out, sizeof out);
    assert_int_equal(m, 6);
    assert_memory_equal(out, "second", 6);
    off += used;
    assert_int_equal(off, (size_t)n); /* the raw bytes are untouched */
    assert_int_equal(sv_tls13s_direct(p.srv, SV_LAYER_RAW_IN), 0);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_RECORDS);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_PASS); /* raw in only */
    m = sv_tls13s_unwrap(p.srv, in + off, total - off, &used, out, sizeof out);
    assert_int_equal(m, (ssize_t)(sizeof raw - 1));
    assert_memory_equal(out, raw, sizeof raw - 1);
    /* towards the client: one sealed record, then raw bytes behind it */
    assert_int_equal(sv_tls13s_wrap(p.srv, (const uint8_t *)"sealed", 6), 6);
    assert_int_equal(sv_tls13s_direct(p.srv, SV_LAYER_RAW_IN | SV_LAYER_RAW_OUT), 0);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_PASS); /* the sealed record waits */
    assert_int_equal(sv_tls13s_wrap(p.srv, (const uint8_t *)"plain!", 6), 6);
    size_t len = 0;
    const uint8_t *o = sv_tls13s_out_peek(p.srv, &len);
    assert_int_equal(len, 5 + 6 + 1 + 16 + 6);
    assert_memory_equal(o + len - 6, "plain!", 6);
    assert_int_equal(BIO_write(p.rbio, o, (int)(len - 6)), (int)(len - 6));
    char b[16];
    assert_int_equal(SSL_read(p.ssl, b, sizeof b), 6);
    assert_memory_equal(b, "sealed", 6);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_PASS);
    sv_tls13s_out_consume(p.srv, len);
    assert_true(sv_tls13s_status(p.srv) & SV_LAYER_PASS); /* raw both ways, nothing held */
    assert_int_equal(sv_tls13s_shutdown(p.srv), 0);
    assert_false(sv_tls13s_status(p.srv) & SV_LAYER_PASS); /* ended */
    sv_tls13s_out_peek(p.srv, &len);
    assert_int_equal(len, 0); /* no close_notify once raw */
    pair_free(&p);
}

/* ---------- ServerHello template and record padding (PROTOCOLS-2.md §1.5) ---------- */

/* The REALITY target (tls_target.c) answers the same ClientHello, in one record. @return its
 * first flight's length in @p out. */
static size_t target_flight(const pair *p, uint8_t *out, size_t cap)
{
    uint8_t rec[5 + SV_TLS_HELLO_MAX] = {22, 3, 1, (uint8_t)(p->hello_len >> 8),
                                         (uint8_t)p->hello_len};
    memcpy(rec + 5, p->hello, p->hello_len);
    return tls_target_answer("target.example.test", rec, 5 + p->hello_len, out, cap);
}

static void template_and_padding_mirror_the_target(void **state)
{
    (void)state;
    pair p;
    client_start(&p, NULL, NULL, 0);
    uint8_t target[16384], ours[16384];
    size_t tn = target_flight(&p, target, sizeof target), tsize[16] = {0};
    size_t tcount = tls_record_sizes(target, tn, tsize, 16);
    assert_true(tcount == 3 || tcount == 6); /* SH, CCS, then 1 or 4 encrypted records */
    assert_int_equal(target[0], 22);
    assert_int_equal(tsize[1], 6);
    uint16_t pad[SV_TLS13S_PAD_MAX];
    size_t pad_count = 0;
    for (size_t i = 2; i < tcount; i++)
        pad[pad_count++] = (uint16_t)tsize[i];
    pad[pad_count++] = 250; /* as if the target had sent a ticket of that size */
    sv_tls13s_params prm = params_for(&p);
    prm.server_hello = target + 5;
    prm.server_hello_len = tsize[0] - 5;
    uint8_t bad[SV_TLS_HELLO_MAX];
    memcpy(bad, target + 5, tsize[0] - 5);
    bad[39] ^= 1; /* a session id that is not the client's */
    sv_tls13s_params bad_prm = prm;
    bad_prm.server_hello = bad;
    assert_int_equal(sv_tls13s_new(&bad_prm, &p.srv, NULL), -EINVAL);
    bad[39] ^= 1;
    assert_int_equal(sv_tls13s_new(&bad_prm, &p.srv, NULL), 0);
    sv_tls13s_free(p.srv);
    static const uint8_t hrr[32] = {0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d,
                                    0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16,
                                    0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8,
                                    0x33, 0x9c};
    memcpy(bad + 6, hrr, 32);
    assert_int_equal(sv_tls13s_new(&bad_prm, &p.srv, NULL), -EINVAL);
    prm.pad_sizes = pad;
    prm.pad_count = pad_count;
    assert_int_equal(sv_tls13s_new(&prm, &p.srv, NULL), 0);
    size_t on = 0;
    const uint8_t *flight = sv_tls13s_out_peek(p.srv, &on);
    assert_true(on <= sizeof ours);
    memcpy(ours, flight, on);
    size_t osize[16] = {0}, ocount = tls_record_sizes(ours, on, osize, 16);
    assert_int_equal(ocount, tcount + 1);
    for (size_t i = 0; i < tcount; i++)
        assert_int_equal(osize[i], tsize[i]); /* same wire sizes */
    assert_int_equal(osize[tcount], 250);
    size_t differ = 0, first = 0, last = 0; /* the ServerHello: only the key share changed */
    for (size_t i = 0; i < tsize[0]; i++)
        if (ours[i] != target[i])
            last = i, first = differ++ == 0 ? i : first;
    assert_true(differ > 0 && last - first < 32);
    assert_true(first > 5 + 4 + 2 + 32 + 1 + 32 + 3); /* random, session id, suite kept */
    size_t shl = 0;
    assert_memory_equal(sv_tls13s_server_hello(p.srv, &shl), ours + 5, tsize[0] - 5);
    assert_int_equal(handshake(&p), 0);
    check_peer_cert(&p);
    both_ways(&p, 200000);
    close_both(&p);
    pair_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(aes128_whole),
        cmocka_unit_test(aes256_whole),
        cmocka_unit_test(chacha_whole),
        cmocka_unit_test(each_suite_byte_at_a_time),
        cmocka_unit_test(client_order_picks_the_suite),
        cmocka_unit_test(clients_without_x25519_or_tls13_are_refused),
        cmocka_unit_test(bad_params_are_refused),
        cmocka_unit_test(finished_and_data_in_one_read),
        cmocka_unit_test(wrong_finished_is_refused),
        cmocka_unit_test(corrupt_records_are_refused),
        cmocka_unit_test(client_alert_ends_the_handshake),
        cmocka_unit_test(key_update_is_answered),
        cmocka_unit_test(direct_switch_at_the_record_boundary),
        cmocka_unit_test(template_and_padding_mirror_the_target),
    };
    return cmocka_run_group_tests(tests, make_cert, free_cert);
}
