/*
 * TLS server layer over OpenSSL 3 (RFC 8446, RFC 5246). See tls.h for the API.
 *
 * Each session's SSL reads and writes through one BIO of our own type whose two byte queues
 * live in the session: `in` holds ciphertext fed by the runtime, `out` the records OpenSSL
 * produced. Owning the queues lets this layer bound input (SV_TLS_IN_MAX), count the bytes a
 * handshake reads, hand out pending output by pointer, and free both queues whenever they are
 * empty, so an idle session holds only OpenSSL's state. The SSL object itself is made only once a
 * whole ClientHello is buffered: a client that connects and stalls costs the bytes it sent.
 * Hot path (the chain's unwrap of an established session with nothing queued): OpenSSL reads the
 * ciphertext in place from the caller's buffer (`lent`), so ciphertext is copied once (into
 * OpenSSL's record buffer) and plaintext once (out of it).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "supervisor/transport/tls.h"

/* TLS 1.2 suites: ECDHE with an AEAD only (forward secrecy, no CBC). TLS 1.3 keeps OpenSSL's
 * defaults (all three RFC 8446 §9.1 AEAD suites). */
#define TLS12_CIPHERS                                                                          \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                               \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                               \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

#define SELF_DAYS 365
#define QUEUE_MIN 256

/* A byte queue: data at p[off .. off+len); the buffer is freed whenever it becomes empty. */
typedef struct tls_queue {
    uint8_t *p;
    size_t off, len, cap;
} tls_queue;

struct sv_tls_ctx {
    atomic_size_t refs;
    SSL_CTX *ssl_ctx;
    BIO_METHOD *bio_method; /* per context, not a global of ours */
    enum sv_tls_cert_mode mode;
    char *cert_file, *key_file, *server_name; /* copies of the config, for reload comparisons */
    uint8_t *alpn;                            /* ALPN wire list (RFC 7301 §3.1), NULL if none */
    size_t alpn_len;
    size_t handshake_max;
    uint8_t cert_sha256[32], key_sha256[32]; /* of the PEM bytes (FILE, PEM) */
    sv_tls_cert_info info;
};

struct sv_tls_session {
    SSL *ssl;
    sv_tls_ctx *ctx; /* one reference */
    tls_queue in, out;
    size_t hs_read; /* ciphertext bytes the handshake took from `in` */
    const uint8_t *lent; /* the layer's unwrap: ciphertext OpenSSL reads in place, after `in` */
    size_t lent_len, lent_off;
    const char *err_reason;
    int err;
    bool established, peer_closed, shut, hs_over, oom;
    bool watch;   /* one record per read (SV_LAYER_WATCH) */
    bool raw_in;  /* client bytes past the record last read pass as they are (SV_LAYER_RAW_IN) */
    bool raw_out; /* our bytes go out as they are, after the records queued (SV_LAYER_RAW_OUT) */
};

/* The certificate and key bytes a context is built from, with their digests. */
typedef struct pem_source {
    const uint8_t *cert, *key;
    size_t cert_len, key_len;
    uint8_t *owned_cert, *owned_key; /* file contents read here */
    uint8_t cert_sha256[32], key_sha256[32];
} pem_source;

/* ---- byte queues ---- */

static int queue_append(tls_queue *q, const uint8_t *src, size_t n, size_t max_cap)
{
    if (n == 0)
        return 0;
    if (q->off + q->len + n > q->cap && q->off > 0) {
        memmove(q->p, q->p + q->off, q->len);
        q->off = 0;
    }
    if (q->len + n > q->cap) {
        size_t want = q->len + n;
        size_t cap = q->cap * 2 > QUEUE_MIN ? q->cap * 2 : QUEUE_MIN;
        if (cap > max_cap)
            cap = max_cap;
        if (cap < want)
            cap = want;
        uint8_t *np = OPENSSL_realloc(q->p, cap);
        if (np == NULL)
            return -ENOMEM;
        q->p = np;
        q->cap = cap;
    }
    memcpy(q->p + q->off + q->len, src, n);
    q->len += n;
    return 0;
}

static void queue_drop(tls_queue *q, size_t n)
{
    q->off += n;
    q->len -= n;
    if (q->len == 0) {
        OPENSSL_free(q->p);
        *q = (tls_queue){0};
    }
}

/* ---- the session BIO ---- */

static int bio_write_ex(BIO *b, const char *data, size_t n, size_t *written)
{
    sv_tls_session *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (s->raw_out)
        return 0; /* no record of OpenSSL's once raw (a KeyUpdate answer): the session fails */
    if (queue_append(&s->out, (const uint8_t *)data, n, SIZE_MAX) != 0) {
        s->oom = true;
        return 0;
    }
    *written = n;
    return 1;
}

/* Reads from `in`; while the handshake runs, gives it at most handshake_max bytes in total. */
static int bio_read_ex(BIO *b, char *data, size_t n, size_t *readbytes)
{
    sv_tls_session *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    size_t k = s->in.len < n ? s->in.len : n;
    if (!s->established) {
        size_t left = s->ctx->handshake_max - s->hs_read;
        if (k > left)
            k = left;
        if (k == 0 && s->in.len > 0) {
            s->hs_over = true;
            return 0; /* no retry flag: the handshake fails */
        }
        s->hs_read += k;
    }
    if (k == 0 && s->lent != NULL && s->lent_off < s->lent_len) {
        k = s->lent_len - s->lent_off < n ? s->lent_len - s->lent_off : n;
        memcpy(data, s->lent + s->lent_off, k);
        s->lent_off += k;
        *readbytes = k;
        return 1;
    }
    if (k == 0) {
        BIO_set_retry_read(b);
        return 0;
    }
    memcpy(data, s->in.p + s->in.off, k);
    queue_drop(&s->in, k);
    *readbytes = k;
    return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    sv_tls_session *s = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return s != NULL ? (long)(s->in.len + (s->lent != NULL ? s->lent_len - s->lent_off : 0))
                         : 0;
    case BIO_CTRL_WPENDING:
        return s != NULL ? (long)s->out.len : 0;
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static int bio_destroy(BIO *b)
{
    BIO_set_data(b, NULL);
    BIO_set_init(b, 0);
    return 1;
}

static BIO_METHOD *bio_method_new(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "katana tls session");
    if (m == NULL)
        return NULL;
    if (!BIO_meth_set_write_ex(m, bio_write_ex) || !BIO_meth_set_read_ex(m, bio_read_ex) ||
        !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create) ||
        !BIO_meth_set_destroy(m, bio_destroy)) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}

/* ---- configuration ---- */

static const char *cert_label(const sv_tls_config *cfg)
{
    return cfg->mode == SV_TLS_CERT_FILE ? "cert_file" : "cert_pem";
}

static const char *key_label(const sv_tls_config *cfg)
{
    return cfg->mode == SV_TLS_CERT_FILE ? "key_file" : "key_pem";
}

/* A DNS name for the self-signed SAN: 1..253 bytes of letters, digits, '-', '.', '_', '*'. */
static bool is_host_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '*'))
            return false;
    }
    return true;
}

static bool is_ip_literal(const char *s)
{
    uint8_t a[16];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

static int validate_config(const sv_tls_config *cfg, sv_error *err)
{
    switch (cfg->mode) {
    case SV_TLS_CERT_FILE:
        if (cfg->cert_file == NULL || cfg->cert_file[0] == '\0')
            return sv_error_set(err, -EINVAL, "cert_file: missing");
        if (cfg->key_file == NULL || cfg->key_file[0] == '\0')
            return sv_error_set(err, -EINVAL, "key_file: missing");
        break;
    case SV_TLS_CERT_PEM:
        if (cfg->cert_pem == NULL || cfg->key_pem == NULL)
            return sv_error_set(err, -EINVAL, "cert_pem and key_pem are required");
        if (cfg->cert_pem_len > SV_TLS_PEM_MAX || cfg->key_pem_len > SV_TLS_PEM_MAX)
            return sv_error_set(err, -EINVAL, "cert_pem/key_pem: larger than %u bytes",
                                SV_TLS_PEM_MAX);
        break;
    case SV_TLS_CERT_SELF:
        if (cfg->server_name == NULL ||
            (!is_ip_literal(cfg->server_name) && !is_host_name(cfg->server_name)))
            return sv_error_set(err, -EINVAL,
                                "server_name: a host name or IP address is required for a "
                                "self-signed certificate");
        break;
    default:
        return sv_error_set(err, -EINVAL, "cert mode: unknown");
    }
    if (cfg->handshake_max > SV_TLS_HANDSHAKE_MAX_LIMIT)
        return sv_error_set(err, -EINVAL, "handshake_max: more than %u bytes",
                            SV_TLS_HANDSHAKE_MAX_LIMIT);
    if (cfg->alpn_count > SV_TLS_ALPN_MAX)
        return sv_error_set(err, -EINVAL, "alpn: more than %d protocols", SV_TLS_ALPN_MAX);
    for (size_t i = 0; i < cfg->alpn_count; i++) {
        size_t n = cfg->alpn[i] != NULL ? strlen(cfg->alpn[i]) : 0;
        if (n == 0 || n > 255)
            return sv_error_set(err, -EINVAL, "alpn: protocol %zu is empty or longer than 255 "
                                              "bytes", i + 1);
    }
    return 0;
}

/* ALPN wire form (RFC 7301 §3.1): each name prefixed by its length byte. */
static int alpn_wire(const sv_tls_config *cfg, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (cfg->alpn_count == 0)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < cfg->alpn_count; i++)
        total += 1 + strlen(cfg->alpn[i]);
    uint8_t *w = OPENSSL_malloc(total);
    if (w == NULL)
        return -ENOMEM;
    size_t at = 0;
    for (size_t i = 0; i < cfg->alpn_count; i++) {
        size_t n = strlen(cfg->alpn[i]);
        w[at++] = (uint8_t)n;
        memcpy(w + at, cfg->alpn[i], n);
        at += n;
    }
    *out = w;
    *len = total;
    return 0;
}

static size_t effective_handshake_max(const sv_tls_config *cfg)
{
    return cfg->handshake_max != 0 ? cfg->handshake_max : SV_TLS_HANDSHAKE_MAX_DEFAULT;
}

/* ---- reading and hashing the PEM source ---- */

static int read_file(const char *label, const char *path, uint8_t **out, size_t *len,
                     sv_error *err)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        return sv_error_set(err, -e, "%s %s: cannot open: %s", label, path, strerror(e));
    }
    int rc = 0;
    size_t cap = 0, n = 0;
    uint8_t *buf = NULL;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap == 0 ? 16384 : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (nb == NULL) {
                rc = sv_error_set(err, -ENOMEM, "%s %s: out of memory", label, path);
                goto out;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > SV_TLS_PEM_MAX) {
            rc = sv_error_set(err, -EINVAL, "%s %s: larger than %u bytes", label, path,
                              SV_TLS_PEM_MAX);
            goto out;
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        rc = sv_error_set(err, e > 0 ? -e : -EIO, "%s %s: cannot read: %s", label, path,
                          strerror(e > 0 ? e : EIO));
    }
out:
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return 0;
}

static void source_free(pem_source *src)
{
    free(src->owned_cert);
    free(src->owned_key);
    *src = (pem_source){0};
}

/* Fill @p src from cfg (FILE reads, PEM borrows) and hash both; SELF gives an empty source. */
static int source_load(const sv_tls_config *cfg, pem_source *src, sv_error *err)
{
    *src = (pem_source){0};
    if (cfg->mode == SV_TLS_CERT_SELF)
        return 0;
    if (cfg->mode == SV_TLS_CERT_FILE) {
        int rc = read_file("cert_file", cfg->cert_file, &src->owned_cert, &src->cert_len, err);
        if (rc == 0)
            rc = read_file("key_file", cfg->key_file, &src->owned_key, &src->key_len, err);
        if (rc != 0) {
            source_free(src);
            return rc;
        }
        src->cert = src->owned_cert;
        src->key = src->owned_key;
    } else {
        src->cert = cfg->cert_pem;
        src->cert_len = cfg->cert_pem_len;
        src->key = cfg->key_pem;
        src->key_len = cfg->key_pem_len;
    }
    if (!EVP_Digest(src->cert, src->cert_len, src->cert_sha256, NULL, EVP_sha256(), NULL) ||
        !EVP_Digest(src->key, src->key_len, src->key_sha256, NULL, EVP_sha256(), NULL)) {
        ERR_clear_error();
        source_free(src);
        return sv_error_set(err, -ENOMEM, "%s: cannot hash", cert_label(cfg));
    }
    return 0;
}

/* ---- certificates ---- */

static int no_password(char *buf, int size, int rwflag, void *u)
{
    return -1;
}

static bool last_error_is(int lib, int reason)
{
    unsigned long e = ERR_peek_last_error();
    return ERR_GET_LIB(e) == lib && ERR_GET_REASON(e) == reason;
}

static const char *last_error_text(void)
{
    const char *r = ERR_reason_error_string(ERR_peek_last_error());
    return r != NULL ? r : "unknown error";
}

/* Install the chain of @p pem (leaf first) in @p sc; *leaf gets a reference to the leaf. */
static int use_cert_chain(SSL_CTX *sc, const sv_tls_config *cfg, const pem_source *src,
                          X509 **leaf, sv_error *err)
{
    const char *label = cert_label(cfg);
    const char *name = cfg->mode == SV_TLS_CERT_FILE ? cfg->cert_file : "";
    const char *sep = cfg->mode == SV_TLS_CERT_FILE ? " " : "";
    *leaf = NULL;
    BIO *b = BIO_new_mem_buf(src->cert, (int)src->cert_len);
    if (b == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", label);
    int rc = 0;
    X509 *x = PEM_read_bio_X509(b, NULL, no_password, NULL);
    if (x == NULL) {
        if (src->cert_len == 0 || last_error_is(ERR_LIB_PEM, PEM_R_NO_START_LINE))
            rc = sv_error_set(err, -EINVAL, "%s%s%s: no certificate found", label, sep, name);
        else
            rc = sv_error_set(err, -EINVAL, "%s%s%s: invalid certificate: %s", label, sep, name,
                              last_error_text());
        goto out;
    }
    if (!SSL_CTX_use_certificate(sc, x)) {
        rc = sv_error_set(err, -EINVAL, "%s%s%s: certificate refused: %s", label, sep, name,
                          last_error_text());
        goto out;
    }
    for (int i = 2;; i++) {
        X509 *c = PEM_read_bio_X509(b, NULL, no_password, NULL);
        if (c == NULL) {
            if (last_error_is(ERR_LIB_PEM, PEM_R_NO_START_LINE))
                break;
            rc = sv_error_set(err, -EINVAL, "%s%s%s: certificate %d is invalid: %s", label, sep,
                              name, i, last_error_text());
            goto out;
        }
        if (!SSL_CTX_add0_chain_cert(sc, c)) {
            X509_free(c);
            rc = sv_error_set(err, -EINVAL, "%s%s%s: certificate %d refused: %s", label, sep,
                              name, i, last_error_text());
            goto out;
        }
    }
out:
    BIO_free(b);
    ERR_clear_error();
    if (rc != 0)
        X509_free(x);
    else
        *leaf = x;
    return rc;
}

static int use_key(SSL_CTX *sc, const sv_tls_config *cfg, const pem_source *src, X509 *leaf,
                   sv_error *err)
{
    const char *label = key_label(cfg);
    const char *name = cfg->mode == SV_TLS_CERT_FILE ? cfg->key_file : "";
    const char *sep = cfg->mode == SV_TLS_CERT_FILE ? " " : "";
    BIO *b = BIO_new_mem_buf(src->key, (int)src->key_len);
    if (b == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", label);
    int rc = 0;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(b, NULL, no_password, NULL);
    if (key == NULL) {
        if (last_error_is(ERR_LIB_PEM, PEM_R_BAD_PASSWORD_READ) ||
            last_error_is(ERR_LIB_PEM, PEM_R_BAD_DECRYPT))
            rc = sv_error_set(err, -EINVAL, "%s%s%s: the key is encrypted (not supported)", label,
                              sep, name);
        else
            rc = sv_error_set(err, -EINVAL, "%s%s%s: no private key found", label, sep, name);
        goto out;
    }
    if (!X509_check_private_key(leaf, key)) {
        rc = sv_error_set(err, -EINVAL, "%s does not match %s", label, cert_label(cfg));
        goto out;
    }
    if (!SSL_CTX_use_PrivateKey(sc, key))
        rc = sv_error_set(err, -EINVAL, "%s%s%s: key refused: %s", label, sep, name,
                          last_error_text());
out:
    EVP_PKEY_free(key);
    BIO_free(b);
    ERR_clear_error();
    return rc;
}

static int add_ip_san(GENERAL_NAMES *gens, const uint8_t *addr, int len)
{
    GENERAL_NAME *g = GENERAL_NAME_new();
    ASN1_OCTET_STRING *ip = ASN1_OCTET_STRING_new();
    if (g == NULL || ip == NULL || !ASN1_OCTET_STRING_set(ip, addr, len)) {
        GENERAL_NAME_free(g);
        ASN1_OCTET_STRING_free(ip);
        return -ENOMEM;
    }
    GENERAL_NAME_set0_value(g, GEN_IPADD, ip);
    if (!sk_GENERAL_NAME_push(gens, g)) {
        GENERAL_NAME_free(g);
        return -ENOMEM;
    }
    return 0;
}

static int add_dns_san(GENERAL_NAMES *gens, const char *name)
{
    GENERAL_NAME *g = GENERAL_NAME_new();
    ASN1_IA5STRING *s = ASN1_IA5STRING_new();
    if (g == NULL || s == NULL || !ASN1_STRING_set(s, name, (int)strlen(name))) {
        GENERAL_NAME_free(g);
        ASN1_IA5STRING_free(s);
        return -ENOMEM;
    }
    GENERAL_NAME_set0_value(g, GEN_DNS, s);
    if (!sk_GENERAL_NAME_push(gens, g)) {
        GENERAL_NAME_free(g);
        return -ENOMEM;
    }
    return 0;
}

/* SAN = the server name (DNS or IP) plus 127.0.0.1 and ::1 unless it is one of them. */
static int add_self_sans(X509 *x, const char *name)
{
    static const uint8_t v4_loop[4] = {127, 0, 0, 1};
    static const uint8_t v6_loop[16] = {[15] = 1};
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    if (gens == NULL)
        return -ENOMEM;
    uint8_t a[16];
    int rc;
    bool v4 = inet_pton(AF_INET, name, a) == 1, v6 = !v4 && inet_pton(AF_INET6, name, a) == 1;
    if (v4 || v6)
        rc = add_ip_san(gens, a, v4 ? 4 : 16);
    else
        rc = add_dns_san(gens, name);
    if (rc == 0 && !(v4 && memcmp(a, v4_loop, 4) == 0))
        rc = add_ip_san(gens, v4_loop, 4);
    if (rc == 0 && !(v6 && memcmp(a, v6_loop, 16) == 0))
        rc = add_ip_san(gens, v6_loop, 16);
    if (rc == 0 && !X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT))
        rc = -ENOMEM;
    GENERAL_NAMES_free(gens);
    return rc;
}

static int set_random_serial(X509 *x)
{
    uint8_t b[16];
    if (RAND_bytes(b, sizeof b) != 1)
        return -EIO;
    b[0] = (uint8_t)((b[0] & 0x7f) | 0x40); /* positive, 16 bytes (RFC 5280 §4.1.2.2) */
    BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
    int ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
    BN_free(bn);
    return ok ? 0 : -ENOMEM;
}

/* "mode": "self": a P-256 key and a self-signed certificate for @p name. */
static int use_self_signed(SSL_CTX *sc, const char *name, X509 **leaf, sv_error *err)
{
    *leaf = NULL;
    int rc = -ENOMEM;
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    if (key == NULL || x == NULL)
        goto out;
    /* The subject CN holds at most 64 characters (RFC 5280 ub-common-name); the SAN matters. */
    const char *cn = strlen(name) <= 64 ? name : "katana self-signed";
    X509_NAME *subject = X509_get_subject_name(x);
    if (!X509_set_version(x, X509_VERSION_3) || (rc = set_random_serial(x)) != 0 ||
        X509_gmtime_adj(X509_getm_notBefore(x), -3600) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), (long)SELF_DAYS * 86400) == NULL ||
        !X509_set_pubkey(x, key) ||
        !X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1,
                                    -1, 0) ||
        !X509_set_issuer_name(x, subject) || (rc = add_self_sans(x, name)) != 0 ||
        !X509_sign(x, key, EVP_sha256()) || !SSL_CTX_use_certificate(sc, x) ||
        !SSL_CTX_use_PrivateKey(sc, key)) {
        rc = rc != 0 ? rc : -ENOMEM;
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) {
        sv_error_set(err, rc, "server_name %s: cannot make a self-signed certificate: %s", name,
                     last_error_text());
        X509_free(x);
    } else {
        *leaf = x;
    }
    EVP_PKEY_free(key);
    ERR_clear_error();
    return rc;
}

static int64_t asn1_time_unix(const ASN1_TIME *t)
{
    struct tm tm;
    if (t == NULL || !ASN1_TIME_to_tm(t, &tm))
        return 0;
    return (int64_t)timegm(&tm);
}

static void fill_info(sv_tls_cert_info *info, X509 *leaf)
{
    info->not_before = asn1_time_unix(X509_get0_notBefore(leaf));
    info->not_after = asn1_time_unix(X509_get0_notAfter(leaf));
    info->expired = info->not_after < (int64_t)time(NULL);
    unsigned int len = 0;
    if (!X509_digest(leaf, EVP_sha256(), info->sha256, &len))
        memset(info->sha256, 0, sizeof info->sha256);
    ERR_clear_error();
}

/* ---- context ---- */

/* ALPN (RFC 7301 §3.2): the server's first preference the client offered, else none (the
 * handshake continues without ALPN rather than failing with no_application_protocol). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    const sv_tls_ctx *c = arg;
    for (size_t i = 0; i < c->alpn_len; i += 1 + (size_t)c->alpn[i]) {
        const uint8_t *want = c->alpn + i + 1;
        uint8_t want_len = c->alpn[i];
        for (unsigned j = 0; j < inlen; j += 1u + in[j]) {
            if (in[j] == want_len && j + 1u + in[j] <= inlen &&
                memcmp(in + j + 1, want, want_len) == 0) {
                *out = want;
                *outlen = want_len;
                return SSL_TLSEXT_ERR_OK;
            }
        }
    }
    return SSL_TLSEXT_ERR_NOACK;
}

/* Every server name is accepted (one certificate per context); accepting it makes OpenSSL keep
 * the name in TLS 1.2 sessions too, so sv_tls_sni() reports it for both versions. */
static int sni_accept(SSL *ssl, int *alert, void *arg)
{
    return SSL_TLSEXT_ERR_OK;
}

static void ctx_free(sv_tls_ctx *c)
{
    SSL_CTX_free(c->ssl_ctx);
    BIO_meth_free(c->bio_method);
    OPENSSL_free(c->cert_file);
    OPENSSL_free(c->key_file);
    OPENSSL_free(c->server_name);
    OPENSSL_free(c->alpn);
    OPENSSL_free(c);
}

static int ssl_ctx_setup(sv_tls_ctx *c)
{
    SSL_CTX *sc = SSL_CTX_new(TLS_server_method());
    c->ssl_ctx = sc;
    if (sc == NULL || !SSL_CTX_set_min_proto_version(sc, TLS1_2_VERSION) ||
        !SSL_CTX_set_max_proto_version(sc, TLS1_3_VERSION) ||
        !SSL_CTX_set_cipher_list(sc, TLS12_CIPHERS))
        return -ENOMEM;
    SSL_CTX_set_options(sc, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    /* Record buffers are freed when empty at the end of each burst (release_buffers()), not
     * after every record as SSL_MODE_RELEASE_BUFFERS would; without partial writes SSL_write()
     * encrypts all it is given (our BIO never refuses output). */
    SSL_CTX_clear_mode(sc, SSL_MODE_ENABLE_PARTIAL_WRITE);
    /* No server-side cache: it would be shared, locked state across workers; resumption works
     * through stateless tickets. */
    SSL_CTX_set_session_cache_mode(sc, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_tlsext_servername_callback(sc, sni_accept);
    if (c->alpn_len > 0)
        SSL_CTX_set_alpn_select_cb(sc, alpn_select, c);
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? OPENSSL_strdup(s) : NULL;
}

/* Build a context from @p cfg (validated) and the loaded @p src. */
static int ctx_build(const sv_tls_config *cfg, const pem_source *src, sv_tls_ctx **out,
                     sv_error *err)
{
    *out = NULL;
    sv_tls_ctx *c = OPENSSL_zalloc(sizeof *c);
    if (c == NULL)
        return sv_error_set(err, -ENOMEM, "tls: out of memory");
    atomic_init(&c->refs, 1);
    c->mode = cfg->mode;
    c->handshake_max = effective_handshake_max(cfg);
    memcpy(c->cert_sha256, src->cert_sha256, 32);
    memcpy(c->key_sha256, src->key_sha256, 32);
    X509 *leaf = NULL;
    int rc = -ENOMEM;
    if (alpn_wire(cfg, &c->alpn, &c->alpn_len) != 0 || (c->bio_method = bio_method_new()) == NULL)
        goto oom;
    if (cfg->mode == SV_TLS_CERT_FILE &&
        ((c->cert_file = dup_or_null(cfg->cert_file)) == NULL ||
         (c->key_file = dup_or_null(cfg->key_file)) == NULL))
        goto oom;
    if (cfg->mode == SV_TLS_CERT_SELF && (c->server_name = dup_or_null(cfg->server_name)) == NULL)
        goto oom;
    if (ssl_ctx_setup(c) != 0)
        goto oom;
    if (cfg->mode == SV_TLS_CERT_SELF)
        rc = use_self_signed(c->ssl_ctx, cfg->server_name, &leaf, err);
    else if ((rc = use_cert_chain(c->ssl_ctx, cfg, src, &leaf, err)) == 0)
        rc = use_key(c->ssl_ctx, cfg, src, leaf, err);
    if (rc != 0)
        goto fail;
    fill_info(&c->info, leaf);
    X509_free(leaf);
    *out = c;
    return 0;
oom:
    rc = sv_error_set(err, -ENOMEM, "tls: out of memory");
fail:
    ERR_clear_error();
    X509_free(leaf);
    ctx_free(c);
    return rc;
}

int sv_tls_ctx_new(const sv_tls_config *cfg, sv_tls_ctx **out, sv_error *err)
{
    *out = NULL;
    int rc = validate_config(cfg, err);
    if (rc != 0)
        return rc;
    pem_source src;
    rc = source_load(cfg, &src, err);
    if (rc != 0)
        return rc;
    rc = ctx_build(cfg, &src, out, err);
    source_free(&src);
    return rc;
}

sv_tls_ctx *sv_tls_ctx_ref(sv_tls_ctx *ctx)
{
    atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
    return ctx;
}

void sv_tls_ctx_unref(sv_tls_ctx *ctx)
{
    if (ctx != NULL && atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1)
        ctx_free(ctx);
}

const sv_tls_cert_info *sv_tls_ctx_cert_info(const sv_tls_ctx *ctx)
{
    return &ctx->info;
}

static bool str_eq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* Same settings apart from the certificate content. */
static bool same_settings(const sv_tls_ctx *old, const sv_tls_config *cfg)
{
    if (old->mode != cfg->mode || old->handshake_max != effective_handshake_max(cfg))
        return false;
    if (cfg->mode == SV_TLS_CERT_FILE &&
        (!str_eq(old->cert_file, cfg->cert_file) || !str_eq(old->key_file, cfg->key_file)))
        return false;
    if (cfg->mode == SV_TLS_CERT_SELF && !str_eq(old->server_name, cfg->server_name))
        return false;
    size_t at = 0;
    for (size_t i = 0; i < cfg->alpn_count; i++) {
        size_t n = strlen(cfg->alpn[i]);
        if (at + 1 + n > old->alpn_len || old->alpn[at] != n ||
            memcmp(old->alpn + at + 1, cfg->alpn[i], n) != 0)
            return false;
        at += 1 + n;
    }
    return at == old->alpn_len;
}

int sv_tls_ctx_reload_if_changed(const sv_tls_ctx *old, const sv_tls_config *cfg, sv_tls_ctx **out,
                                 sv_error *err)
{
    *out = NULL;
    int rc = validate_config(cfg, err);
    if (rc != 0)
        return rc;
    bool same = old != NULL && same_settings(old, cfg);
    if (same && cfg->mode == SV_TLS_CERT_SELF)
        return 0;
    pem_source src;
    rc = source_load(cfg, &src, err);
    if (rc != 0)
        return rc;
    if (same && memcmp(src.cert_sha256, old->cert_sha256, 32) == 0 &&
        memcmp(src.key_sha256, old->key_sha256, 32) == 0) {
        source_free(&src);
        return 0;
    }
    rc = ctx_build(cfg, &src, out, err);
    source_free(&src);
    return rc == 0 ? 1 : rc;
}

/* ---- session ---- */

int sv_tls_session_new(sv_tls_ctx *ctx, sv_tls_session **out)
{
    *out = NULL;
    sv_tls_session *s = OPENSSL_zalloc(sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->ctx = sv_tls_ctx_ref(ctx);
    *out = s;
    return 0;
}

/* Make the SSL object, once a whole ClientHello is buffered (see scan_client_hello()). */
static int session_attach_ssl(sv_tls_session *s)
{
    s->ssl = SSL_new(s->ctx->ssl_ctx);
    BIO *b = s->ssl != NULL ? BIO_new(s->ctx->bio_method) : NULL;
    if (b == NULL) {
        SSL_free(s->ssl);
        s->ssl = NULL;
        return -ENOMEM;
    }
    BIO_set_data(b, s);
    SSL_set_bio(s->ssl, b, b); /* one reference, owned by the SSL */
    SSL_set_accept_state(s->ssl);
    return 0;
}

void sv_tls_session_free(sv_tls_session *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl);
    OPENSSL_free(s->in.p);
    OPENSSL_free(s->out.p);
    sv_tls_ctx_unref(s->ctx);
    OPENSSL_free(s);
}

/* Empty this thread's OpenSSL error queue before an SSL call (SSL_get_error needs it empty).
 * ERR_clear_error() walks all of the queue's slots; the peek only looks at its ends, and on the
 * hot path (a record per 2 KiB from v2ray clients) the queue is nearly always empty already. */
static void errors_clear(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* Record a terminal error; buffered input is dropped (pending output may hold an alert). */
static int session_fail(sv_tls_session *s, int code, const char *reason)
{
    s->err = code;
    s->err_reason = reason;
    OPENSSL_free(s->in.p);
    s->in = (tls_queue){0};
    ERR_clear_error();
    return code;
}

/* Interpret a failed SSL call: 0 when it only waits for input, else the terminal error. */
static int ssl_failure(sv_tls_session *s, int ret)
{
    switch (SSL_get_error(s->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errors_clear();
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        s->peer_closed = true;
        ERR_clear_error();
        return 0;
    default:
        break;
    }
    if (s->hs_over)
        return session_fail(s, -EMSGSIZE, "handshake too large");
    if (s->oom || ERR_GET_REASON(ERR_peek_last_error()) == ERR_R_MALLOC_FAILURE)
        return session_fail(s, -ENOMEM, "out of memory");
    return session_fail(s, -EPROTO, ERR_reason_error_string(ERR_peek_last_error()));
}

enum hello_scan { HELLO_PARTIAL, HELLO_READY, HELLO_BAD, HELLO_TOO_BIG };

/*
 * Does @p p (the client's first @p n bytes) hold a whole ClientHello yet? Handshake records
 * (RFC 8446 §5.1: type 22, version 3.x, 1..2^14 bytes) are walked and the first handshake
 * message's type and length read (§4). Until the answer is READY no SSL object exists, so a
 * client that stalls before its ClientHello is complete costs only the bytes it sent; anything
 * else (an HTTP request, an SSLv2-style hello, another record type) is BAD at once instead of
 * making OpenSSL wait for a record that may never end.
 */
static enum hello_scan scan_client_hello(const uint8_t *p, size_t n, size_t max)
{
    uint8_t head[4];
    size_t head_len = 0, body = 0, need = 0, pos = 0;
    while (n - pos >= 5) {
        const uint8_t *r = p + pos;
        size_t rlen = (size_t)r[3] << 8 | r[4];
        if (r[0] != 0x16 || r[1] != 0x03 || rlen == 0 || rlen > 16384)
            return HELLO_BAD;
        size_t frag = rlen < n - pos - 5 ? rlen : n - pos - 5;
        for (size_t i = 0; i < frag && head_len < 4; i++)
            head[head_len++] = r[5 + i];
        body += frag;
        if (head_len == 4 && need == 0) {
            if (head[0] != 1) /* not client_hello */
                return HELLO_BAD;
            need = 4 + ((size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3]);
            if (need + 5 > max) /* cannot fit in the handshake byte bound */
                return HELLO_TOO_BIG;
        }
        if (need != 0 && body >= need)
            return HELLO_READY;
        if (pos + 5 + frag >= max) /* incomplete, and the bound is reached (many tiny records) */
            return HELLO_TOO_BIG;
        if (frag < rlen)
            break;
        pos += 5 + rlen;
    }
    /* A full queue (a bound above SV_TLS_IN_MAX): OpenSSL takes and bounds the rest. */
    return n >= SV_TLS_IN_MAX ? HELLO_READY : HELLO_PARTIAL;
}

static int advance_handshake(sv_tls_session *s)
{
    if (s->ssl == NULL) {
        const uint8_t *in = s->in.len > 0 ? s->in.p + s->in.off : NULL;
        switch (scan_client_hello(in, s->in.len, s->ctx->handshake_max)) {
        case HELLO_PARTIAL:
            return 0;
        case HELLO_BAD:
            return session_fail(s, -EPROTO, "not a TLS ClientHello");
        case HELLO_TOO_BIG:
            s->hs_over = true;
            return session_fail(s, -EMSGSIZE, "handshake too large");
        case HELLO_READY:
            break;
        }
        if (session_attach_ssl(s) != 0)
            return session_fail(s, -ENOMEM, "out of memory");
    }
    ERR_clear_error();
    int r = SSL_do_handshake(s->ssl);
    if (r == 1) {
        s->established = true;
        return 0;
    }
    return ssl_failure(s, r);
}

/* Free OpenSSL's record buffers when they hold nothing (an idle session keeps none): called
 * at the end of every read burst and after every write, so that a burst of records reuses one
 * buffer instead of allocating it per record. */
static void release_buffers(sv_tls_session *s)
{
    if (s->ssl != NULL && s->established)
        (void)SSL_free_buffers(s->ssl); /* 0 when a buffer still holds a partial record */
}

ssize_t sv_tls_feed(sv_tls_session *s, const uint8_t *p, size_t n)
{
    if (s->err != 0)
        return s->err;
    size_t room = SV_TLS_IN_MAX - s->in.len;
    size_t k = n < room ? n : room;
    if (queue_append(&s->in, p, k, SV_TLS_IN_MAX) != 0)
        return session_fail(s, -ENOMEM, "out of memory");
    if (!s->established) {
        int rc = advance_handshake(s);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)k;
}

/* Raw input (PROTOCOLS-2.md §2.4 step 4): the plaintext OpenSSL still holds of the record it
 * read last, then the ciphertext it never read, as it is. No record is read any more. */
static ssize_t raw_read(sv_tls_session *s, uint8_t *buf, size_t cap)
{
    int pending = SSL_pending(s->ssl);
    if (pending > 0) {
        size_t got = 0;
        errors_clear();
        int r = SSL_read_ex(s->ssl, buf, cap < (size_t)pending ? cap : (size_t)pending, &got);
        if (r == 1)
            return (ssize_t)got;
        int rc = ssl_failure(s, r);
        return rc < 0 ? rc : session_fail(s, -EPROTO, "plaintext held but not read");
    }
    size_t k = s->in.len < cap ? s->in.len : cap;
    if (k > 0) {
        memcpy(buf, s->in.p + s->in.off, k);
        queue_drop(&s->in, k);
    }
    return (ssize_t)k;
}

ssize_t sv_tls_read(sv_tls_session *s, uint8_t *buf, size_t cap)
{
    if (s->err != 0)
        return s->err;
    if (!s->established) {
        int rc = advance_handshake(s);
        if (rc < 0 || !s->established)
            return rc;
    }
    if (s->peer_closed || cap == 0)
        return 0;
    if (s->raw_in)
        return raw_read(s, buf, cap);
    size_t got = 0;
    errors_clear();
    int r = SSL_read_ex(s->ssl, buf, cap, &got);
    if (r == 1)
        return (ssize_t)got;
    int rc = ssl_failure(s, r);
    if (rc == 0 && s->in.len == 0 && (s->lent == NULL || s->lent_off == s->lent_len))
        release_buffers(s); /* the burst is over */
    return rc;
}

ssize_t sv_tls_write(sv_tls_session *s, const uint8_t *p, size_t n)
{
    if (s->err != 0)
        return s->err;
    if (!s->established)
        return -ENOTCONN;
    if (s->shut)
        return -EPIPE;
    size_t room = s->out.len < SV_TLS_OUT_MAX ? SV_TLS_OUT_MAX - s->out.len : 0;
    size_t k = n < room ? n : room;
    if (k == 0)
        return 0;
    if (s->raw_out) /* as it is, behind the records already queued */
        return queue_append(&s->out, p, k, SIZE_MAX) == 0
                   ? (ssize_t)k
                   : session_fail(s, -ENOMEM, "out of memory");
    size_t done = 0;
    errors_clear();
    int r = SSL_write_ex(s->ssl, p, k, &done);
    if (r == 1) {
        release_buffers(s);
        return (ssize_t)done;
    }
    int rc = ssl_failure(s, r);
    return rc < 0 ? rc : 0;
}

int sv_tls_shutdown(sv_tls_session *s)
{
    if (s->err != 0)
        return s->err;
    if (!s->established)
        return -ENOTCONN;
    if (s->shut)
        return 0;
    s->shut = true;
    if (s->raw_out) /* no outer record ever again, not even close_notify (§2.6): TCP ends */
        return 0;
    ERR_clear_error();
    int r = SSL_shutdown(s->ssl); /* 0: close_notify queued; 1: the peer's was already read */
    if (r >= 0)
        return 0;
    int rc = ssl_failure(s, r);
    return rc < 0 ? rc : 0;
}

size_t sv_tls_out_pending(const sv_tls_session *s)
{
    return s->out.len;
}

const uint8_t *sv_tls_out_peek(const sv_tls_session *s, size_t *len)
{
    *len = s->out.len;
    return s->out.len > 0 ? s->out.p + s->out.off : NULL;
}

void sv_tls_out_consume(sv_tls_session *s, size_t n)
{
    if (n > s->out.len)
        n = s->out.len;
    if (n > 0)
        queue_drop(&s->out, n);
}

size_t sv_tls_take_out(sv_tls_session *s, uint8_t *buf, size_t cap)
{
    size_t n = s->out.len < cap ? s->out.len : cap;
    if (n > 0) {
        memcpy(buf, s->out.p + s->out.off, n);
        queue_drop(&s->out, n);
    }
    return n;
}

size_t sv_tls_buffered(const sv_tls_session *s)
{
    return s->in.len + s->out.len;
}

bool sv_tls_is_established(const sv_tls_session *s)
{
    return s->established;
}

bool sv_tls_is_peer_closed(const sv_tls_session *s)
{
    return s->peer_closed;
}

int sv_tls_error(const sv_tls_session *s)
{
    return s->err;
}

const char *sv_tls_error_reason(const sv_tls_session *s)
{
    return s->err != 0 ? s->err_reason : NULL;
}

const uint8_t *sv_tls_alpn(const sv_tls_session *s, size_t *len)
{
    const unsigned char *p = NULL;
    unsigned int n = 0;
    if (s->established)
        SSL_get0_alpn_selected(s->ssl, &p, &n);
    *len = n;
    return n > 0 ? p : NULL;
}

const char *sv_tls_sni(const sv_tls_session *s)
{
    return s->established ? SSL_get_servername(s->ssl, TLSEXT_NAMETYPE_host_name) : NULL;
}

unsigned sv_tls_version(const sv_tls_session *s)
{
    return s->established ? (unsigned)SSL_version(s->ssl) : 0;
}

int sv_tls_direct(sv_tls_session *s, unsigned bits)
{
    if (bits == 0) { /* not Vision, or no more watching: IN and OUT stay once given */
        s->watch = false;
        return 0;
    }
    if (s->err != 0)
        return s->err;
    if (!s->established)
        return -ENOTCONN;
    if (SSL_version(s->ssl) != TLS1_3_VERSION) /* PROTOCOLS-2.md §2.1, as Xray's server */
        return session_fail(s, -EPROTONOSUPPORT, "XTLS Vision needs TLS 1.3");
    s->watch = (bits & SV_LAYER_WATCH) != 0;
    if ((bits & SV_LAYER_RAW_IN) && !s->raw_in) {
        /* OpenSSL reads one record at a time (no read_ahead): past the record read last, it
         * holds at most that record's plaintext, never ciphertext behind it */
        if (SSL_has_pending(s->ssl) && SSL_pending(s->ssl) == 0)
            return session_fail(s, -EPROTO, "ciphertext read past the switch to raw");
        s->raw_in = true;
    }
    if (bits & SV_LAYER_RAW_OUT)
        s->raw_out = true; /* SSL_write gave all its records to `out` (no partial writes) */
    if (s->raw_in && s->raw_out && !SSL_has_pending(s->ssl))
        release_buffers(s); /* OpenSSL's record buffers are not used again */
    return 0;
}

/* ---- the TLS layer of a transport chain (layer.h) ---- */

static int layer_open(const void *conf, void **state)
{
    /* the context is shared read-only; the session only takes a reference on it */
    return sv_tls_session_new((sv_tls_ctx *)(uintptr_t)conf, (sv_tls_session **)state);
}

static void layer_free(void *state) { sv_tls_session_free(state); }

static ssize_t layer_unwrap(void *state, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                            size_t cap)
{
    sv_tls_session *s = state;
    *used = 0;
    if (s->raw_in && s->err == 0 && s->in.len == 0 && SSL_pending(s->ssl) == 0) {
        size_t k = n < cap ? n : cap; /* raw, nothing held: the bytes as they are */
        memcpy(out, in, k);
        *used = k;
        return (ssize_t)k;
    }
    if (s->raw_in) /* what is held goes first */
        return s->err != 0 ? s->err : sv_tls_read(s, out, cap);
    if (s->established && s->err == 0 && !s->peer_closed && s->in.len == 0 && n > 0) {
        /* OpenSSL reads the ciphertext straight from @p in (no copy into `in`); what it takes
         * of a partial record waits in its own record buffer */
        s->lent = in;
        s->lent_len = n;
        s->lent_off = 0;
        ssize_t m = sv_tls_read(s, out, cap);
        *used = s->lent_off;
        s->lent = NULL;
        return m;
    }
    if (n > 0) {
        ssize_t r = sv_tls_feed(state, in, n);
        if (r < 0)
            return r;
        *used = (size_t)r;
    }
    return sv_tls_read(state, out, cap);
}

static ssize_t layer_wrap(void *state, const uint8_t *p, size_t n)
{
    return sv_tls_write(state, p, n);
}

static int layer_shutdown(void *state) { return sv_tls_shutdown(state); }

static const uint8_t *layer_out_peek(const void *state, size_t *len)
{
    return sv_tls_out_peek(state, len);
}

static void layer_out_consume(void *state, size_t n) { sv_tls_out_consume(state, n); }

static unsigned layer_status(const void *state)
{
    const sv_tls_session *s = state;
    bool pass = s->raw_in && s->raw_out && s->err == 0 && !s->peer_closed && !s->shut &&
                s->in.len == 0 && s->out.len == 0 && !SSL_has_pending(s->ssl);
    return (s->established ? SV_LAYER_UP : 0u) | (s->peer_closed ? SV_LAYER_EOF : 0u) |
           (s->watch && !s->raw_in ? SV_LAYER_RECORDS : 0u) | (pass ? SV_LAYER_PASS : 0u);
}

static int layer_direct(void *state, unsigned bits) { return sv_tls_direct(state, bits); }

const sv_layer_ops sv_tls_layer_ops = {
    .name = "tls",
    .open = layer_open,
    .free = layer_free,
    .unwrap = layer_unwrap,
    .wrap = layer_wrap,
    .shutdown = layer_shutdown,
    .out_peek = layer_out_peek,
    .out_consume = layer_out_consume,
    .status = layer_status,
    .direct = layer_direct,
};
