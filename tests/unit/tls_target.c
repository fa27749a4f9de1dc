/* A TLS target for unit tests (tls_target.h). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tests/unit/tls_target.h"

size_t tls_target_answer(const char *cn, const uint8_t *records, size_t len, uint8_t *out,
                         size_t cap)
{
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(key);
    X509 *x = X509_new();
    X509_NAME *name = X509_get_subject_name(x);
    assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                                (const unsigned char *)cn, -1, -1, 0), 1);
    X509_set_issuer_name(x, name);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, key);
    assert_true(X509_sign(x, key, EVP_sha256()) > 0);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
    SSL *ssl = SSL_new(ctx);
    BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rbio, wbio);
    SSL_set_accept_state(ssl);
    BIO_write(rbio, records, (int)len);
    assert_int_equal(SSL_do_handshake(ssl), -1); /* waiting for the client's Finished */
    int n = BIO_read(wbio, out, (int)cap);
    assert_true(n > 0);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    X509_free(x);
    EVP_PKEY_free(key);
    return (size_t)n;
}

size_t tls_record_sizes(const uint8_t *f, size_t n, size_t *sizes, size_t max)
{
    size_t count = 0;
    for (size_t at = 0; at + 5 <= n && count < max; count++) {
        sizes[count] = 5 + ((size_t)f[at + 3] << 8 | f[at + 4]);
        at += sizes[count];
    }
    return count;
}
