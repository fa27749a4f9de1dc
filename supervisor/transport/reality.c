/*
 * REALITY server side (PROTOCOLS-2.md §1). See reality.h.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/x509.h>

#include "supervisor/transport/reality.h"
#include "supervisor/transport/tls13s.h"
#include "supervisor/transport/tls_hello.h"
#include "supervisor/util/digits.h"

/* ------------------------------------------------------------------------------------------ */
/* settings                                                                                     */
/* ------------------------------------------------------------------------------------------ */

int sv_reality_parse_key(const char *b64url, uint8_t out[32])
{
    size_t len = b64url != NULL ? strlen(b64url) : 0;
    if (len == 44 && b64url[43] == '=')
        len = 43;
    if (len != 43) /* 32 bytes = 43 characters without padding */
        return -EINVAL;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int v = sv_b64_digit(b64url[i], true);
        if (v < 0)
            return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o == 32 ? 0 : -EINVAL;
}

int sv_reality_parse_short_id(const char *hex, size_t len, uint8_t out[8])
{
    memset(out, 0, 8);
    if (len > 16 || len % 2 != 0)
        return -EINVAL;
    for (size_t i = 0; i < len; i += 2) {
        int hi = sv_hex_digit(hex[i]), lo = sv_hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* Split @p list at commas into short ids. */
static int parse_short_ids(sv_reality_auth *a, const char *list)
{
    if (list == NULL || list[0] == '\0') { /* none: the all-zero id only (sing-box) */
        a->n_short_ids = 1;
        memset(a->short_ids[0], 0, 8);
        return 0;
    }
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (a->n_short_ids == SV_REALITY_LIST_MAX ||
            sv_reality_parse_short_id(p, len, a->short_ids[a->n_short_ids]) != 0)
            return -EINVAL;
        a->n_short_ids++;
        if (end == NULL)
            return 0;
        p = end + 1;
    }
}

static int parse_names(sv_reality_auth *a, const char *list)
{
    if (list == NULL || list[0] == '\0')
        return -EINVAL;
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len > SV_REALITY_NAME_MAX || a->n_server_names == SV_REALITY_LIST_MAX)
            return -EINVAL;
        char *name = strndup(p, len);
        if (name == NULL)
            return -ENOMEM;
        a->server_names[a->n_server_names++] = name;
        if (end == NULL)
            return 0;
        p = end + 1;
    }
}

int sv_reality_auth_init(sv_reality_auth *a, const char *private_key, const char *short_ids,
                         const char *server_names, uint64_t max_time_diff_ms, const char **what)
{
    memset(a, 0, sizeof *a);
    a->max_time_diff_ms = max_time_diff_ms;
    int rc = sv_reality_parse_key(private_key, a->private_key);
    *what = "private_key";
    if (rc == 0) {
        rc = parse_short_ids(a, short_ids);
        *what = "short_ids";
    }
    if (rc == 0) {
        rc = parse_names(a, server_names);
        *what = "server_names";
    }
    if (rc != 0)
        sv_reality_auth_deinit(a);
    return rc;
}

void sv_reality_auth_deinit(sv_reality_auth *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n_server_names; i++)
        free(a->server_names[i]);
    OPENSSL_cleanse(a->private_key, sizeof a->private_key);
    a->n_server_names = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the check (§1.3)                                                                             */
/* ------------------------------------------------------------------------------------------ */

static bool name_ok(const sv_reality_auth *a, const char *sni, size_t len)
{
    for (size_t i = 0; i < a->n_server_names; i++)
        if (strlen(a->server_names[i]) == len && memcmp(a->server_names[i], sni, len) == 0)
            return true;
    return false;
}

/* X25519(@p priv, @p pub) into @p out. @return 0, or -1 (also for a low-order point). */
static int x25519(const uint8_t priv[32], const uint8_t pub[32], uint8_t out[32])
{
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, 32);
    EVP_PKEY *p = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, pub, 32);
    EVP_PKEY_CTX *ctx = k != NULL ? EVP_PKEY_CTX_new(k, NULL) : NULL;
    size_t len = 32;
    int rc = ctx != NULL && p != NULL && EVP_PKEY_derive_init(ctx) > 0 &&
                     EVP_PKEY_derive_set_peer(ctx, p) > 0 &&
                     EVP_PKEY_derive(ctx, out, &len) > 0 && len == 32
                 ? 0
                 : -1;
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(p);
    EVP_PKEY_free(k);
    return rc;
}

/* HKDF-SHA256(ikm, salt, info) → 32 bytes. */
static int hkdf_sha256(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
                       const char *info, uint8_t out[32])
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *ctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, strlen(info)),
        OSSL_PARAM_construct_end(),
    };
    int rc = ctx != NULL && EVP_KDF_derive(ctx, out, 32, params) > 0 ? 0 : -1;
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    return rc;
}

/* Open the 32-byte sealed session id: AAD = hello with 32 zero bytes at @p sid_off. */
static int open_session_id(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *hello,
                           size_t hello_len, size_t sid_off, uint8_t plain[16])
{
    static const uint8_t zeros[32];
    const uint8_t *sid = hello + sid_off;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0;
    int ok = ctx != NULL && EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, nonce) > 0 &&
             EVP_DecryptUpdate(ctx, NULL, &len, hello, (int)sid_off) > 0 &&
             EVP_DecryptUpdate(ctx, NULL, &len, zeros, 32) > 0 &&
             EVP_DecryptUpdate(ctx, NULL, &len, hello + sid_off + 32,
                               (int)(hello_len - sid_off - 32)) > 0 &&
             EVP_DecryptUpdate(ctx, plain, &len, sid, 16) > 0 && len == 16 &&
             EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, (void *)(sid + 16)) > 0 &&
             EVP_DecryptFinal_ex(ctx, plain + 16, &len) > 0;
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -1;
}

bool sv_reality_check(const sv_reality_auth *a, const uint8_t peer_share[32],
                      const uint8_t random[32], const uint8_t *hello, size_t hello_len,
                      size_t sid_off, const char *sni, size_t sni_len, uint64_t now_ms,
                      uint8_t auth_key[32])
{
    uint8_t shared[32], key[32], p[16];
    bool valid = false;
    if (sni == NULL || !name_ok(a, sni, sni_len))
        return false;
    if (sid_off < 1 || sid_off + 32 > hello_len || hello[sid_off - 1] != 32 ||
        hello_len > SV_REALITY_HELLO_MAX)
        return false;
    if (x25519(a->private_key, peer_share, shared) != 0)
        return false;
    if (hkdf_sha256(shared, 32, random, 20, "REALITY", key) != 0 ||
        open_session_id(key, random + 20, hello, hello_len, sid_off, p) != 0)
        goto out;
    uint32_t ver = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    uint64_t t_ms = (uint64_t)((uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 |
                               (uint32_t)p[6] << 8 | p[7]) * 1000u;
    uint64_t diff = now_ms > t_ms ? now_ms - t_ms : t_ms - now_ms;
    if ((a->min_client_ver != 0 && ver < a->min_client_ver) ||
        (a->max_client_ver != 0 && ver > a->max_client_ver) ||
        (a->max_time_diff_ms != 0 && diff > a->max_time_diff_ms))
        goto out;
    for (size_t i = 0; i < a->n_short_ids && !valid; i++)
        valid = CRYPTO_memcmp(a->short_ids[i], p + 8, 8) == 0;
    if (valid)
        memcpy(auth_key, key, 32);
out:
    OPENSSL_cleanse(shared, sizeof shared);
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(p, sizeof p);
    return valid;
}

/* ------------------------------------------------------------------------------------------ */
/* the temporary certificate (§1.5)                                                             */
/* ------------------------------------------------------------------------------------------ */

int sv_reality_cert_make(sv_reality_cert *c, const uint8_t *seed)
{
    memset(c, 0, sizeof *c);
    EVP_PKEY *k = NULL;
    if (seed != NULL) {
        k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
    } else {
        EVP_PKEY_CTX *kc = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
        if (kc != NULL && EVP_PKEY_keygen_init(kc) > 0)
            (void)EVP_PKEY_keygen(kc, &k);
        EVP_PKEY_CTX_free(kc);
    }
    size_t publen = 32;
    if (k == NULL || EVP_PKEY_get_raw_public_key(k, c->pub, &publen) <= 0 || publen != 32) {
        EVP_PKEY_free(k);
        return -EIO;
    }
    int rc = -EIO;
    X509 *x = X509_new();
    ASN1_INTEGER *serial = ASN1_INTEGER_new();
    if (x == NULL || serial == NULL || ASN1_INTEGER_set(serial, 0) <= 0 ||
        X509_set_version(x, X509_VERSION_3) <= 0 || X509_set_serialNumber(x, serial) <= 0 ||
        X509_gmtime_adj(X509_getm_notBefore(x), 0) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), 0) == NULL || X509_set_pubkey(x, k) <= 0 ||
        X509_sign(x, k, NULL) <= 0)
        goto out;
    int len = i2d_X509(x, NULL);
    if (len < 64)
        goto out;
    c->der = malloc((size_t)len);
    if (c->der == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    uint8_t *w = c->der;
    if (i2d_X509(x, &w) != len) {
        free(c->der);
        c->der = NULL;
        goto out;
    }
    c->der_len = (size_t)len;
    c->key = k;
    k = NULL;
    rc = 0;
out:
    ASN1_INTEGER_free(serial);
    X509_free(x);
    EVP_PKEY_free(k);
    return rc;
}

void sv_reality_cert_free(sv_reality_cert *c)
{
    if (c == NULL)
        return;
    EVP_PKEY_free(c->key);
    free(c->der);
    memset(c, 0, sizeof *c);
}

void sv_reality_cert_hmac(const uint8_t auth_key[32], const uint8_t pub[32], uint8_t out[64])
{
    unsigned len = 64;
    (void)HMAC(EVP_sha512(), auth_key, 32, pub, 32, out, &len);
}

void sv_reality_cert_patch(const sv_reality_cert *c, const uint8_t auth_key[32], uint8_t *out)
{
    memcpy(out, c->der, c->der_len);
    sv_reality_cert_hmac(auth_key, c->pub, out + c->der_len - 64);
}

/* ------------------------------------------------------------------------------------------ */
/* the layer                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The process's temporary certificate (§1.5: Xray makes its key once at startup): made at the
 * first inbound build, shared by every later one, so that a reload keeps the key. */
static sv_reality_cert process_cert;
static int process_cert_rc;
static pthread_once_t process_cert_once = PTHREAD_ONCE_INIT;

static void make_process_cert(void) { process_cert_rc = sv_reality_cert_make(&process_cert, NULL); }

/* Give @p c its own reference to the process's key and a copy of its DER. */
static int share_process_cert(sv_reality_cert *c)
{
    memset(c, 0, sizeof *c);
    (void)pthread_once(&process_cert_once, make_process_cert);
    if (process_cert_rc != 0)
        return process_cert_rc;
    c->der = malloc(process_cert.der_len);
    if (c->der == NULL)
        return -ENOMEM;
    if (EVP_PKEY_up_ref(process_cert.key) <= 0) {
        free(c->der);
        c->der = NULL;
        return -EIO;
    }
    memcpy(c->der, process_cert.der, process_cert.der_len);
    c->der_len = process_cert.der_len;
    memcpy(c->pub, process_cert.pub, sizeof c->pub);
    c->key = process_cert.key;
    return 0;
}

sv_reality_conf *sv_reality_conf_new(const char *private_key, const char *short_ids,
                                     const char *server_names, uint64_t max_time_diff_ms,
                                     const char **what, int *rc)
{
    sv_reality_conf *c = calloc(1, sizeof *c);
    *what = NULL;
    if (c == NULL) {
        *rc = -ENOMEM;
        return NULL;
    }
    *rc = sv_reality_auth_init(&c->auth, private_key, short_ids, server_names, max_time_diff_ms,
                               what);
    if (*rc != 0) {
        free(c);
        return NULL;
    }
    *rc = share_process_cert(&c->cert);
    if (*rc != 0) {
        sv_reality_auth_deinit(&c->auth);
        free(c);
        return NULL;
    }
    c->now_ms = wall_ms;
    return c;
}

void sv_reality_conf_free(sv_reality_conf *c)
{
    if (c == NULL)
        return;
    sv_reality_auth_deinit(&c->auth);
    sv_reality_cert_free(&c->cert);
    free(c);
}

enum r_phase { R_HELLO, R_TARGET, R_TLS, R_REFUSED };

typedef struct r_session {
    const sv_reality_conf *conf;
    enum r_phase phase;
    uint8_t *raw;  /* HELLO: the client's bytes so far; TARGET: the same, the hello's records
                      first (hello_raw bytes); TLS: those after the hello, for the server;
                      REFUSED: those still to pass up; from raw_off to raw_len */
    size_t raw_len, raw_off, raw_cap;
    sv_tls13s *tls;
    uint8_t *out;  /* REFUSED: bytes towards the client, out[out_off .. +out_len) */
    size_t out_off, out_len;
    uint8_t *hello; /* TARGET: the valid client's ClientHello message, and its auth key */
    size_t hello_len, hello_raw;
    uint8_t key[32];
} r_session;

static void drop_raw(r_session *s)
{
    free(s->raw);
    s->raw = NULL;
    s->raw_len = s->raw_off = s->raw_cap = 0;
}

static void drop_hello(r_session *s)
{
    free(s->hello);
    s->hello = NULL;
    s->hello_len = 0;
    OPENSSL_cleanse(s->key, sizeof s->key);
}

static void refuse(r_session *s)
{
    drop_hello(s);
    s->phase = R_REFUSED;
    s->raw_off = 0;
    if (s->raw_len == 0)
        drop_raw(s);
}

/* Append what fits of @p in to the raw buffer (growing it up to SV_REALITY_RAW_MAX).
 * @return bytes taken, or -ENOMEM. */
static ssize_t raw_append(r_session *s, const uint8_t *in, size_t n)
{
    size_t room = SV_REALITY_RAW_MAX - s->raw_len;
    size_t k = n < room ? n : room;
    if (s->raw_len + k > s->raw_cap) {
        size_t cap = s->raw_cap != 0 ? s->raw_cap : 2048;
        while (cap < s->raw_len + k)
            cap *= 2;
        if (cap > SV_REALITY_RAW_MAX)
            cap = SV_REALITY_RAW_MAX;
        uint8_t *p = realloc(s->raw, cap);
        if (p == NULL)
            return -ENOMEM;
        s->raw = p;
        s->raw_cap = cap;
    }
    memcpy(s->raw + s->raw_len, in, k);
    s->raw_len += k;
    return (ssize_t)k;
}

/* Start katana's TLS 1.3 server for the valid client of hello @p msg and auth key @p key, with
 * the target's ServerHello @p sh and record sizes @p pad when given (§1.5); a template or sizes
 * the server refuses are dropped (our own ServerHello, no padding) rather than the client.
 * @return 0 (phase TLS, the client's bytes after its hello records, @p raw_used, kept for the
 *         server), 1 when the server cannot serve this client, or -ENOMEM. */
static int serve(r_session *s, const uint8_t *msg, size_t msg_len, size_t raw_used,
                 const uint8_t key[32], const uint8_t *sh, size_t sh_len, const uint16_t *pad,
                 size_t pad_count)
{
    const sv_reality_conf *cf = s->conf;
    sv_tls_hello h;
    if (sv_tls_hello_parse(msg, msg_len, &h) != 0)
        return 1;
    uint8_t der[SV_TLS13S_CERT_MAX];
    sv_reality_cert_patch(&cf->cert, key, der);
    sv_tls13s_params p = {
        .client_hello = msg,
        .client_hello_len = msg_len,
        .hello = &h,
        .cert_der = der,
        .cert_der_len = cf->cert.der_len,
        .sign_key = cf->cert.key,
        .server_hello = sh,
        .server_hello_len = sh_len,
        .pad_sizes = pad,
        .pad_count = pad_count,
    };
    int rc = sv_tls13s_new(&p, &s->tls, NULL);
    if ((rc == -EINVAL || rc == -EMSGSIZE) && pad_count > 0) {
        p.pad_sizes = NULL, p.pad_count = 0;
        rc = sv_tls13s_new(&p, &s->tls, NULL);
    }
    if ((rc == -EINVAL || rc == -EPROTONOSUPPORT) && sh != NULL) {
        p.server_hello = NULL, p.server_hello_len = 0;
        rc = sv_tls13s_new(&p, &s->tls, NULL);
    }
    if (rc == -ENOMEM)
        return rc;
    if (rc != 0) {
        s->tls = NULL;
        return 1;
    }
    s->phase = R_TLS;
    s->raw_off = raw_used; /* anything after the hello is the server's to read */
    if (s->raw_off == s->raw_len)
        drop_raw(s);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* replayed hellos                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Sealed session ids of valid hellos, process-wide (every worker and inbound: a session id is
 * 32 random bytes), in two generations of an open-addressed table of 8-byte fingerprints. A
 * generation turns over after twice the time window or when half full, so an id stays known
 * for at least twice the window: the longest a hello inside the window can be replayed. */
#define REPLAY_SLOTS 65536u /* per generation, a power of two: 512 KiB each */
static struct {
    pthread_mutex_t lock;
    uint64_t *gen[2];
    unsigned cur;
    size_t used;       /* fingerprints in gen[cur] */
    uint64_t since_ms; /* when gen[cur] began */
} replay = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool replay_probe(uint64_t *t, uint64_t fp, bool insert)
{
    for (size_t i = (size_t)(fp * 0x9e3779b97f4a7c15u >> 48) & (REPLAY_SLOTS - 1);;
         i = (i + 1) & (REPLAY_SLOTS - 1)) {
        if (t[i] == fp)
            return true;
        if (t[i] == 0) {
            if (insert)
                t[i] = fp;
            return false;
        }
    }
}

void sv_reality_replay_forget(void)
{
    pthread_mutex_lock(&replay.lock);
    free(replay.gen[0]);
    free(replay.gen[1]);
    replay.gen[0] = replay.gen[1] = NULL;
    replay.used = 0;
    pthread_mutex_unlock(&replay.lock);
}

bool sv_reality_replayed(const uint8_t sid[32], uint64_t now_ms, uint64_t window_ms)
{
    if (window_ms == 0)
        return false;
    uint64_t fp = 0;
    memcpy(&fp, sid + 24, sizeof fp); /* the GCM tag's tail: as random as the rest */
    fp |= 1; /* 0 marks an empty slot */
    pthread_mutex_lock(&replay.lock);
    bool seen = false;
    if (replay.gen[0] == NULL) {
        replay.gen[0] = calloc(REPLAY_SLOTS, sizeof *replay.gen[0]);
        replay.gen[1] = calloc(REPLAY_SLOTS, sizeof *replay.gen[1]);
        replay.since_ms = now_ms;
    }
    if (replay.gen[0] == NULL || replay.gen[1] == NULL) { /* out of memory: not seen */
        free(replay.gen[0]);
        free(replay.gen[1]);
        replay.gen[0] = replay.gen[1] = NULL;
        pthread_mutex_unlock(&replay.lock);
        return false;
    }
    if (now_ms - replay.since_ms >= 2 * window_ms || replay.used >= REPLAY_SLOTS / 2) {
        replay.cur ^= 1u; /* the older generation is forgotten */
        memset(replay.gen[replay.cur], 0, REPLAY_SLOTS * sizeof *replay.gen[0]);
        replay.used = 0;
        replay.since_ms = now_ms;
    }
    seen = replay_probe(replay.gen[replay.cur ^ 1u], fp, false) ||
           replay_probe(replay.gen[replay.cur], fp, true);
    replay.used += !seen;
    pthread_mutex_unlock(&replay.lock);
    return seen;
}

/* The §1.3 check on a whole hello @p msg; a valid client waits for the target's flight when
 * the settings mirror it, else is served at once. A valid hello seen before is a replay: to the
 * target like any probe. @return 0 (phase decided), or -ENOMEM. */
static int decide(r_session *s, const uint8_t *msg, size_t msg_len, size_t raw_used)
{
    const sv_reality_conf *cf = s->conf;
    sv_tls_hello h;
    uint8_t key[32];
    if (sv_tls_hello_parse(msg, msg_len, &h) != 0 || !h.has_tls13 ||
        h.session_id.n != 32 || h.server_name.p == NULL)
        return refuse(s), 0;
    const uint8_t *share = h.x25519 != NULL ? h.x25519
                           : h.x25519mlkem768 != NULL
                               ? h.x25519mlkem768 + SV_TLS_MLKEM_SHARE_LEN - 32
                               : NULL;
    uint64_t now = cf->now_ms();
    if (share == NULL ||
        !sv_reality_check(&cf->auth, share, h.random, msg, msg_len, h.session_id_off,
                          (const char *)h.server_name.p, h.server_name.n, now, key))
        return refuse(s), 0;
    if (sv_reality_replayed(msg + h.session_id_off, now, cf->auth.max_time_diff_ms)) {
        OPENSSL_cleanse(key, sizeof key);
        return refuse(s), 0;
    }
    if (cf->mirror && h.x25519 != NULL) { /* §1.5 step 1: the target answers it first
                                              (without an X25519 share: refused below) */
        s->hello = malloc(msg_len);
        if (s->hello == NULL) {
            OPENSSL_cleanse(key, sizeof key);
            return -ENOMEM;
        }
        memcpy(s->hello, msg, msg_len);
        s->hello_len = msg_len;
        s->hello_raw = raw_used;
        memcpy(s->key, key, sizeof key);
        OPENSSL_cleanse(key, sizeof key);
        s->phase = R_TARGET;
        return 0;
    }
    int rc = serve(s, msg, msg_len, raw_used, key, NULL, 0, NULL, 0);
    OPENSSL_cleanse(key, sizeof key);
    if (rc == 1) /* a client katana cannot serve: to the target, as Xray does (§1.4) */
        refuse(s);
    return rc < 0 ? rc : 0;
}

/* The wire size of the record at @p at of @p f[0 .. n) when its header has type @p type and
 * version 0x0303 (0 when it has not, SIZE_MAX when the header is not all there yet). */
static size_t record_at(const uint8_t *f, size_t n, size_t at, uint8_t type)
{
    if (at + 5 > n)
        return SIZE_MAX;
    if (f[at] != type || f[at + 1] != 3 || f[at + 2] != 3)
        return 0;
    return 5 + ((size_t)f[at + 3] << 8 | f[at + 4]);
}

int sv_reality_flight_parse(const uint8_t *f, size_t n, bool final, size_t *sh_len,
                            uint16_t pad[SV_TLS13S_PAD_MAX], size_t *pad_count)
{
    *sh_len = 0, *pad_count = 0;
    size_t sh = record_at(f, n, 0, 22);
    if (sh == SIZE_MAX || (sh != 0 && sh > n))
        return final ? -1 : 1;
    /* record 0: one whole ServerHello message (type 2, its length filling the record) */
    if (sh < 5 + 4 || f[5] != 2 || ((size_t)f[6] << 16 | (size_t)f[7] << 8 | f[8]) != sh - 9)
        return -1;
    *sh_len = sh - 5;
    size_t ccs = record_at(f, n, sh, 20);
    if (ccs == SIZE_MAX || (ccs == 6 && sh + ccs > n))
        return final ? 0 : 1;
    if (ccs != 6)
        return 0; /* no CCS as the pattern wants: the ServerHello alone, no padding */
    size_t at = sh + ccs, sizes[SV_TLS13S_PAD_MAX], k = 0;
    bool more = false; /* the next record is not all there yet */
    for (; k < SV_TLS13S_PAD_MAX; k++) {
        size_t r = record_at(f, n, at, 23);
        more = r == SIZE_MAX || (r != 0 && at + r > n);
        if (more || r == 0)
            break; /* not there yet, or not application data: the pattern ends */
        sizes[k] = r;
        at += r;
    }
    /* one record over 512 bytes: EncryptedExtensions..Finished joined, else one record each;
     * one more whole record is the ticket's (§1.5 steps 1, 5) */
    size_t want = k > 0 && sizes[0] > 512 ? 1 : 4;
    if (k < want)
        return more && !final ? 1 : 0;
    *pad_count = k > want ? want + 1 : want;
    for (size_t i = 0; i < *pad_count; i++)
        pad[i] = (uint16_t)sizes[i];
    return 0;
}

/* HELLO: take bytes until the ClientHello is whole, then decide. */
static ssize_t unwrap_hello(r_session *s, const uint8_t *in, size_t n, size_t *used)
{
    if (n == 0)
        return 0;
    ssize_t k = raw_append(s, in, n);
    if (k < 0)
        return k;
    *used = (size_t)k;
    uint8_t *msg = malloc(SV_TLS_HELLO_MAX);
    if (msg == NULL)
        return -ENOMEM;
    size_t msg_len = 0, raw_used = 0;
    int rc = sv_tls_hello_collect(s->raw, s->raw_len, msg, SV_TLS_HELLO_MAX, &msg_len,
                                  &raw_used);
    if (rc == 1)
        rc = decide(s, msg, msg_len, raw_used);
    else if (rc < 0 || s->raw_len == SV_REALITY_RAW_MAX)
        rc = (refuse(s), 0); /* not a TLS hello, or none within the bound */
    free(msg);
    return rc;
}

/* Give the server what came after the hello, then the new bytes. */
static ssize_t unwrap_tls(r_session *s, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                          size_t cap)
{
    if (s->raw != NULL) {
        size_t u = 0;
        ssize_t m = sv_tls13s_unwrap(s->tls, s->raw + s->raw_off, s->raw_len - s->raw_off, &u,
                                     out, cap);
        if (m < 0)
            return m;
        s->raw_off += u;
        if (s->raw_off == s->raw_len)
            drop_raw(s);
        if (m > 0 || u > 0 || s->raw != NULL)
            return m;
    }
    return sv_tls13s_unwrap(s->tls, in, n, used, out, cap);
}

static int r_open(const void *conf, void **state)
{
    r_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->conf = conf;
    *state = s;
    return 0;
}

static void r_free(void *state)
{
    r_session *s = state;
    if (s == NULL)
        return;
    sv_tls13s_free(s->tls);
    drop_hello(s);
    free(s->raw);
    free(s->out);
    free(s);
}

static ssize_t r_unwrap(void *state, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                        size_t cap)
{
    r_session *s = state;
    *used = 0;
    if (s->phase == R_HELLO)
        return unwrap_hello(s, in, n, used);
    if (s->phase == R_TLS)
        return unwrap_tls(s, in, n, used, out, cap);
    if (s->phase == R_TARGET) { /* kept for the server, which starts after the target's flight */
        ssize_t k = n > 0 ? raw_append(s, in, n) : 0;
        if (k < 0)
            return k;
        *used = (size_t)k;
        return 0;
    }
    if (s->raw != NULL) { /* REFUSED: what was collected goes up first */
        size_t k = s->raw_len - s->raw_off < cap ? s->raw_len - s->raw_off : cap;
        memcpy(out, s->raw + s->raw_off, k);
        s->raw_off += k;
        if (s->raw_off == s->raw_len)
            drop_raw(s);
        return (ssize_t)k;
    }
    *used = n < cap ? n : cap;
    if (*used > 0)
        memcpy(out, in, *used);
    return (ssize_t)*used;
}

static ssize_t r_wrap(void *state, const uint8_t *p, size_t n)
{
    r_session *s = state;
    if (s->phase == R_TLS)
        return sv_tls13s_wrap(s->tls, p, n);
    if (s->phase == R_HELLO || s->phase == R_TARGET)
        return -ENOTCONN;
    size_t room = SV_REALITY_OUT_MAX - s->out_len;
    size_t k = n < room ? n : room;
    if (k == 0)
        return 0;
    if (s->out == NULL) {
        s->out = malloc(SV_REALITY_OUT_MAX);
        if (s->out == NULL)
            return -ENOMEM;
        s->out_off = 0;
    }
    if (s->out_off + s->out_len + k > SV_REALITY_OUT_MAX) {
        memmove(s->out, s->out + s->out_off, s->out_len);
        s->out_off = 0;
    }
    memcpy(s->out + s->out_off + s->out_len, p, k);
    s->out_len += k;
    return (ssize_t)k;
}

static int r_shutdown(void *state)
{
    r_session *s = state;
    if (s->phase == R_TLS)
        return sv_tls13s_shutdown(s->tls);
    return s->phase == R_REFUSED ? 0 : -ENOTCONN; /* refused: the end is TCP's */
}

static const uint8_t *r_out_peek(const void *state, size_t *len)
{
    const r_session *s = state;
    if (s->phase == R_TLS)
        return sv_tls13s_out_peek(s->tls, len);
    *len = s->out_len;
    return s->out_len > 0 ? s->out + s->out_off : NULL;
}

static void r_out_consume(void *state, size_t n)
{
    r_session *s = state;
    if (s->phase == R_TLS) {
        sv_tls13s_out_consume(s->tls, n);
        return;
    }
    if (n > s->out_len)
        n = s->out_len;
    s->out_off += n;
    s->out_len -= n;
    if (s->out_len == 0) { /* an idle session holds no buffer */
        free(s->out);
        s->out = NULL;
        s->out_off = 0;
    }
}

static unsigned r_status(const void *state)
{
    const r_session *s = state;
    if (s->phase == R_TLS)
        return sv_tls13s_status(s->tls);
    return s->phase == R_REFUSED ? SV_LAYER_UP | SV_LAYER_REFUSED
           : s->phase == R_TARGET ? SV_LAYER_TARGET
                                  : 0;
}

static const uint8_t *r_target_ask(const void *state, size_t *len)
{
    const r_session *s = state;
    *len = s->phase == R_TARGET ? s->hello_raw : 0;
    return *len > 0 ? s->raw : NULL;
}

static int r_target_reply(void *state, const uint8_t *p, size_t n, bool final)
{
    r_session *s = state;
    if (s->phase != R_TARGET)
        return 0;
    size_t sh_len = 0, pad_count = 0;
    uint16_t pad[SV_TLS13S_PAD_MAX];
    int got = sv_reality_flight_parse(p, n, final, &sh_len, pad, &pad_count);
    if (got == 1)
        return 1;
    uint8_t *msg = s->hello;
    s->hello = NULL; /* serve() may keep raw; the hello copy and key go */
    int rc = serve(s, msg, s->hello_len, s->hello_raw, s->key, got == 0 ? p + 5 : NULL,
                   got == 0 ? sh_len : 0, pad, pad_count);
    free(msg);
    drop_hello(s);
    if (rc == 1)
        refuse(s);
    return rc < 0 ? rc : 0;
}

static int r_direct(void *state, unsigned bits)
{
    r_session *s = state;
    if (s->phase == R_TLS)
        return sv_tls13s_direct(s->tls, bits);
    return bits == 0 ? 0 : -ENOTCONN;
}

const sv_layer_ops sv_reality_layer_ops = {
    .name = "reality",
    .open = r_open,
    .free = r_free,
    .unwrap = r_unwrap,
    .wrap = r_wrap,
    .shutdown = r_shutdown,
    .out_peek = r_out_peek,
    .out_consume = r_out_consume,
    .status = r_status,
    .direct = r_direct,
    .target_ask = r_target_ask,
    .target_reply = r_target_reply,
};
