/* TLS 1.3 server state machine for REALITY (tls13s.h; RFC 8446, PROTOCOLS-2.md §1.5). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "supervisor/transport/tls13s.h"

#define REC_HDR 5u
#define PLAIN_MAX 16384u              /* 2^14 (RFC 8446 §5.1) */
#define CIPHER_MAX (PLAIN_MAX + 256u) /* 2^14 + 256 (§5.2) */
#define TAG_LEN 16u
#define IV_LEN 12u
#define HASH_MAX 48u
#define HS_MAX 64u           /* client handshake messages we accept: Finished, KeyUpdate */
#define TEMPLATE_MAX 2048u   /* a target ServerHello (X25519: about 120 bytes) */
#define FLIGHT_MAX (SV_TLS13S_CERT_MAX + 1024u)

enum { CT_CCS = 20, CT_ALERT = 21, CT_HANDSHAKE = 22, CT_APPDATA = 23 };
enum { HT_SERVER_HELLO = 2, HT_EE = 8, HT_CERT = 11, HT_CV = 15, HT_FINISHED = 20,
       HT_KEY_UPDATE = 24 };
enum { AL_CLOSE_NOTIFY = 0, AL_UNEXPECTED = 10, AL_BAD_MAC = 20, AL_OVERFLOW = 22,
       AL_DECRYPT_ERROR = 51, AL_USER_CANCELED = 90 };

/** One of the three suites (RFC 8446 §B.4). */
typedef struct suite {
    uint16_t id;
    const EVP_CIPHER *(*cipher)(void);
    const EVP_MD *(*md)(void);
    size_t key_len, hash_len;
} suite;

static const suite k_suites[] = {
    {0x1301, EVP_aes_128_gcm, EVP_sha256, 16, 32},
    {0x1302, EVP_aes_256_gcm, EVP_sha384, 32, 48},
    {0x1303, EVP_chacha20_poly1305, EVP_sha256, 32, 32},
};

/** One direction's record protection (§5.3). */
typedef struct dir {
    EVP_CIPHER_CTX *ctx;
    uint8_t secret[HASH_MAX]; /* its traffic secret, for KeyUpdate */
    uint8_t iv[IV_LEN];
    uint64_t seq;
} dir;

struct sv_tls13s {
    const suite *suite;
    EVP_MD_CTX *transcript;
    dir rd, wr;
    uint8_t client_ap[HASH_MAX];       /* client application secret, in use after Finished */
    uint8_t client_finished[HASH_MAX]; /* the verify_data the client must send */
    uint8_t *sh;                       /* the ServerHello message sent */
    size_t sh_len;
    uint8_t *out;                      /* pending output: out[out_off .. out_end) */
    size_t out_off, out_end, out_cap;
    uint8_t rec[REC_HDR + CIPHER_MAX]; /* the client's record being read */
    size_t rec_len;
    size_t plain_off, plain_len;       /* decrypted application data not yet handed up */
    uint8_t hs[HS_MAX];                /* the client's handshake bytes not yet handled */
    size_t hs_len;
    bool up, eof, closed;
    bool update_asked; /* the client asked for our KeyUpdate */
    bool watch;        /* one application-data record per unwrap (SV_LAYER_WATCH) */
    bool raw_in;       /* client bytes pass through as they are (SV_LAYER_RAW_IN) */
    bool raw_out;      /* our output goes out as it is, unsealed (SV_LAYER_RAW_OUT) */
    int err;
};

/* ---------- pending output ---------- */

/* Room for @p k more bytes at the end of the pending output. @return where, or NULL. */
static uint8_t *out_room(sv_tls13s *s, size_t k)
{
    if (s->out_off > 0) {
        memmove(s->out, s->out + s->out_off, s->out_end - s->out_off);
        s->out_end -= s->out_off;
        s->out_off = 0;
    }
    if (s->out_end + k > s->out_cap) {
        size_t cap = s->out_cap * 2 > s->out_end + k ? s->out_cap * 2 : s->out_end + k + 4096;
        uint8_t *p = realloc(s->out, cap);
        if (p == NULL)
            return NULL;
        s->out = p;
        s->out_cap = cap;
    }
    return s->out + s->out_end;
}

static void put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put24(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 16);
    put16(p + 1, v);
}

static size_t get16(const uint8_t *p)
{
    return (size_t)p[0] << 8 | p[1];
}

/* ---------- key schedule (RFC 8446 §7.1, HKDF of RFC 5869 with L ≤ hash length) ---------- */

static int hmac(const sv_tls13s *s, const uint8_t *key, size_t klen, const uint8_t *data,
                size_t n, uint8_t *out)
{
    unsigned len = 0;
    if (HMAC(s->suite->md(), key, (int)klen, data, n, out, &len) == NULL)
        return -EIO;
    return 0;
}

/* HKDF-Extract(salt, IKM) = HMAC(salt, IKM). */
static int extract(const sv_tls13s *s, const uint8_t *salt, const uint8_t *ikm, size_t ikm_len,
                   uint8_t *out)
{
    return hmac(s, salt, s->suite->hash_len, ikm, ikm_len, out);
}

/* HKDF-Expand-Label(secret, label, context, L) for L ≤ hash length: T(1) of HKDF-Expand. */
static int expand_label(const sv_tls13s *s, const uint8_t *secret, const char *label,
                        const uint8_t *ctx, size_t ctx_len, uint8_t *out, size_t len)
{
    uint8_t info[2 + 1 + 6 + 32 + 1 + HASH_MAX + 1], t[EVP_MAX_MD_SIZE];
    size_t llen = strlen(label), at = 0;
    put16(info, len);
    info[2] = (uint8_t)(6 + llen);
    memcpy(info + 3, "tls13 ", 6);
    memcpy(info + 9, label, llen);
    at = 9 + llen;
    info[at++] = (uint8_t)ctx_len;
    if (ctx_len > 0)
        memcpy(info + at, ctx, ctx_len);
    at += ctx_len;
    info[at++] = 1;
    int rc = hmac(s, secret, s->suite->hash_len, info, at, t);
    memcpy(out, t, len);
    OPENSSL_cleanse(t, sizeof t);
    return rc;
}

/* The transcript hash so far (§4.4.1) into @p out (hash length bytes). */
static int transcript_hash(const sv_tls13s *s, uint8_t *out)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c != NULL && EVP_MD_CTX_copy_ex(c, s->transcript) &&
             EVP_DigestFinal_ex(c, out, NULL);
    EVP_MD_CTX_free(c);
    return ok ? 0 : -EIO;
}

static int transcript_add(sv_tls13s *s, const uint8_t *msg, size_t len)
{
    return EVP_DigestUpdate(s->transcript, msg, len) ? 0 : -EIO;
}

/* Install @p secret as the traffic secret of @p d (§7.3: key and iv). */
static int set_traffic(sv_tls13s *s, dir *d, const uint8_t *secret, int enc)
{
    uint8_t key[32];
    memmove(d->secret, secret, s->suite->hash_len);
    int rc = expand_label(s, d->secret, "key", NULL, 0, key, s->suite->key_len);
    if (rc == 0)
        rc = expand_label(s, d->secret, "iv", NULL, 0, d->iv, IV_LEN);
    if (rc == 0 && !EVP_CipherInit_ex(d->ctx, s->suite->cipher(), NULL, key, NULL, enc))
        rc = -EIO;
    d->seq = 0;
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* Next generation of @p d's secret (§7.2: "traffic upd"). */
static int update_traffic(sv_tls13s *s, dir *d, int enc)
{
    uint8_t next[HASH_MAX];
    int rc = expand_label(s, d->secret, "traffic upd", NULL, 0, next, s->suite->hash_len);
    if (rc == 0)
        rc = set_traffic(s, d, next, enc);
    OPENSSL_cleanse(next, sizeof next);
    return rc;
}

/* ---------- record protection (§5.2, §5.3) ---------- */

/* The per-record nonce: iv XOR the 64-bit sequence number, left-padded. */
static void nonce(const dir *d, uint8_t *n)
{
    memcpy(n, d->iv, IV_LEN);
    for (int i = 0; i < 8; i++)
        n[IV_LEN - 1 - i] ^= (uint8_t)(d->seq >> (8 * i));
}

/* Queue one protected record: @p len bytes of @p type content, zero-padded so that the record
 * is @p wire bytes long (0: no padding). */
static int seal(sv_tls13s *s, uint8_t type, const uint8_t *p, size_t len, size_t wire)
{
    size_t inner = wire == 0 ? len + 1 : wire - REC_HDR - TAG_LEN;
    if (wire != 0 && (wire < REC_HDR + TAG_LEN + len + 1 || inner > PLAIN_MAX + 1))
        return -EMSGSIZE;
    uint8_t *r = out_room(s, REC_HDR + inner + TAG_LEN), n[IV_LEN];
    if (r == NULL)
        return -ENOMEM;
    r[0] = CT_APPDATA, r[1] = 3, r[2] = 3;
    put16(r + 3, inner + TAG_LEN);
    if (len > 0)
        memmove(r + REC_HDR, p, len);
    r[REC_HDR + len] = type;
    memset(r + REC_HDR + len + 1, 0, inner - len - 1);
    nonce(&s->wr, n);
    int l = 0;
    EVP_CIPHER_CTX *c = s->wr.ctx;
    if (!EVP_EncryptInit_ex(c, NULL, NULL, NULL, n) ||
        !EVP_EncryptUpdate(c, NULL, &l, r, REC_HDR) ||
        !EVP_EncryptUpdate(c, r + REC_HDR, &l, r + REC_HDR, (int)inner) ||
        !EVP_EncryptFinal_ex(c, r + REC_HDR + inner, &l) ||
        !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, TAG_LEN, r + REC_HDR + inner))
        return -EIO;
    s->wr.seq++;
    s->out_end += REC_HDR + inner + TAG_LEN;
    return 0;
}

/* Decrypt the buffered record in place. @return its inner content type with the content at
 * rec + REC_HDR, *@p len bytes long, or a negative errno. */
static int open_record(sv_tls13s *s, size_t *len)
{
    uint8_t *r = s->rec, n[IV_LEN];
    size_t clen = s->rec_len - REC_HDR - TAG_LEN;
    nonce(&s->rd, n);
    int l = 0;
    EVP_CIPHER_CTX *c = s->rd.ctx;
    if (!EVP_DecryptInit_ex(c, NULL, NULL, NULL, n) ||
        !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, TAG_LEN, r + REC_HDR + clen) ||
        !EVP_DecryptUpdate(c, NULL, &l, r, REC_HDR) ||
        !EVP_DecryptUpdate(c, r + REC_HDR, &l, r + REC_HDR, (int)clen) ||
        EVP_DecryptFinal_ex(c, r + REC_HDR + clen, &l) <= 0)
        return -EBADMSG;
    s->rd.seq++;
    while (clen > 0 && r[REC_HDR + clen - 1] == 0) /* strip the padding (§5.4) */
        clen--;
    if (clen == 0)
        return -EPROTO; /* no content type */
    if (clen - 1 > PLAIN_MAX)
        return -EMSGSIZE;
    *len = clen - 1;
    return r[REC_HDR + clen - 1];
}

/* ---------- the server's first flight ---------- */

/* Pick the first suite of the client's list that is ours (§4.1.1: the server's choice).
 * With a template, its suite, which the client must have offered. */
static const suite *choose_suite(const sv_tls_hello *h, uint16_t want)
{
    for (size_t i = 0; i + 1 < h->cipher_suites.n; i += 2) {
        size_t id = get16(h->cipher_suites.p + i);
        for (size_t k = 0; k < sizeof k_suites / sizeof *k_suites; k++)
            if (k_suites[k].id == id && (want == 0 || want == id))
                return &k_suites[k];
    }
    return NULL;
}

/* The random of a HelloRetryRequest (§4.1.3): SHA-256 of "HelloRetryRequest". */
static const uint8_t k_hrr_random[32] = {
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};

/* Check a template ServerHello (§4.1.3): not a HelloRetryRequest, the client's session id
 * echoed, TLS 1.3 in supported_versions, an X25519 key share.
 * @return 0 with its suite and the offset of its key share data, or -EINVAL. */
static int parse_template(const uint8_t *m, size_t len, const sv_tls_hello *h,
                          uint16_t *suite_id, size_t *share_off)
{
    if (len < 4 + 2 + 32 + 1 || len > TEMPLATE_MAX || m[0] != HT_SERVER_HELLO || m[1] != 0 ||
        get16(m + 2) != len - 4 || get16(m + 4) != 0x0303 || memcmp(m + 6, k_hrr_random, 32) == 0)
        return -EINVAL;
    size_t sid_len = m[38], at = 39 + sid_len;
    if (sid_len != h->session_id.n || at + 5 > len ||
        (sid_len > 0 && memcmp(m + 39, h->session_id.p, sid_len) != 0))
        return -EINVAL;
    *suite_id = (uint16_t)get16(m + at);
    if (m[at + 2] != 0 || get16(m + at + 3) != len - at - 5)
        return -EINVAL;
    bool tls13 = false;
    *share_off = 0;
    for (at += 5; at + 4 <= len;) {
        size_t type = get16(m + at), elen = get16(m + at + 2);
        const uint8_t *e = m + at + 4;
        if (at + 4 + elen > len)
            return -EINVAL;
        if (type == SV_TLS_EXT_SUPPORTED_VERSIONS)
            tls13 = elen == 2 && get16(e) == 0x0304;
        if (type == SV_TLS_EXT_KEY_SHARE && elen == 36 && get16(e) == SV_TLS_GROUP_X25519 &&
            get16(e + 2) == 32)
            *share_off = at + 8;
        at += 4 + elen;
    }
    return at == len && tls13 && *share_off != 0 ? 0 : -EINVAL;
}

/* Our own ServerHello (§4.1.3): supported_versions 0x0304, key_share X25519 @p pub. */
static int own_server_hello(sv_tls13s *s, const sv_tls_hello *h, const uint8_t *pub)
{
    size_t sid = h->session_id.n, len = 4 + 2 + 32 + 1 + sid + 2 + 1 + 2 + 6 + 40;
    uint8_t *m = s->sh = malloc(len);
    if (m == NULL)
        return -ENOMEM;
    s->sh_len = len;
    m[0] = HT_SERVER_HELLO;
    put24(m + 1, len - 4);
    put16(m + 4, 0x0303);
    if (RAND_bytes(m + 6, 32) != 1)
        return -EIO;
    m[38] = (uint8_t)sid;
    memcpy(m + 39, h->session_id.p, sid); /* legacy_session_id_echo */
    uint8_t *p = m + 39 + sid;
    put16(p, s->suite->id);
    p[2] = 0;
    put16(p + 3, 46);
    static const uint8_t versions[] = {0, 43, 0, 2, 3, 4};
    memcpy(p + 5, versions, sizeof versions);
    static const uint8_t share[] = {0, 51, 0, 36, 0, 0x1d, 0, 32};
    memcpy(p + 11, share, sizeof share);
    memcpy(p + 19, pub, 32);
    return 0;
}

/* Make our X25519 key, the shared secret with the client's share @p peer (§7.4.2: all zero is
 * refused) and our public key @p pub. */
static int x25519(const uint8_t *peer, uint8_t *pub, uint8_t *shared)
{
    EVP_PKEY *mine = EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
    EVP_PKEY *theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer, 32);
    EVP_PKEY_CTX *c = mine != NULL ? EVP_PKEY_CTX_new(mine, NULL) : NULL;
    size_t plen = 32, slen = 32;
    int rc = -EIO;
    if (theirs != NULL && c != NULL && EVP_PKEY_get_raw_public_key(mine, pub, &plen) == 1 &&
        EVP_PKEY_derive_init(c) == 1 && EVP_PKEY_derive_set_peer(c, theirs) == 1 &&
        EVP_PKEY_derive(c, shared, &slen) == 1 && slen == 32) {
        uint8_t acc = 0;
        for (int i = 0; i < 32; i++)
            acc |= shared[i];
        rc = acc != 0 ? 0 : -EPROTO;
    }
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(theirs);
    EVP_PKEY_free(mine);
    return rc;
}

/* Handshake secrets (§7.1): install the server handshake key for writing and the client
 * handshake key for reading; *@p master receives the Master Secret. */
static int schedule_handshake(sv_tls13s *s, const uint8_t *shared, uint8_t *master)
{
    size_t hl = s->suite->hash_len;
    uint8_t zeros[HASH_MAX] = {0}, empty[HASH_MAX], early[HASH_MAX], derived[HASH_MAX];
    uint8_t hs[HASH_MAX], th[HASH_MAX], c_hs[HASH_MAX], s_hs[HASH_MAX];
    int rc = EVP_Digest(NULL, 0, empty, NULL, s->suite->md(), NULL) ? 0 : -EIO;
    if (rc == 0)
        rc = extract(s, zeros, zeros, hl, early);
    if (rc == 0)
        rc = expand_label(s, early, "derived", empty, hl, derived, hl);
    if (rc == 0)
        rc = extract(s, derived, shared, 32, hs);
    if (rc == 0)
        rc = transcript_hash(s, th);
    if (rc == 0)
        rc = expand_label(s, hs, "c hs traffic", th, hl, c_hs, hl);
    if (rc == 0)
        rc = expand_label(s, hs, "s hs traffic", th, hl, s_hs, hl);
    if (rc == 0)
        rc = expand_label(s, hs, "derived", empty, hl, derived, hl);
    if (rc == 0)
        rc = extract(s, derived, zeros, hl, master);
    if (rc == 0)
        rc = set_traffic(s, &s->rd, c_hs, 0);
    if (rc == 0)
        rc = set_traffic(s, &s->wr, s_hs, 1);
    OPENSSL_cleanse(early, sizeof early);
    OPENSSL_cleanse(hs, sizeof hs);
    OPENSSL_cleanse(c_hs, sizeof c_hs);
    OPENSSL_cleanse(s_hs, sizeof s_hs);
    OPENSSL_cleanse(derived, sizeof derived);
    return rc;
}

/* verify_data = HMAC(finished_key(base), transcript hash) (§4.4.4). */
static int finished_mac(sv_tls13s *s, const uint8_t *base, uint8_t *out)
{
    size_t hl = s->suite->hash_len;
    uint8_t key[HASH_MAX], th[HASH_MAX];
    int rc = expand_label(s, base, "finished", NULL, 0, key, hl);
    if (rc == 0)
        rc = transcript_hash(s, th);
    if (rc == 0)
        rc = hmac(s, key, hl, th, hl, out);
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* Append handshake message @p type with @p body to @p m (at *@p at) and the transcript. */
static int add_message(sv_tls13s *s, uint8_t *m, size_t *at, uint8_t type, const uint8_t *body,
                       size_t len)
{
    uint8_t *p = m + *at;
    p[0] = type;
    put24(p + 1, len);
    memmove(p + 4, body, len);
    *at += 4 + len;
    return transcript_add(s, p, 4 + len);
}

/* CertificateVerify content (§4.4.3): 64 spaces, the context string, 0, the transcript hash;
 * signed with Ed25519 (scheme 0x0807, RFC 8032: no pre-hash). @p body receives scheme,
 * length and the 64-byte signature. */
static int certificate_verify(sv_tls13s *s, EVP_PKEY *key, uint8_t *body)
{
    static const char ctx[] = "TLS 1.3, server CertificateVerify";
    uint8_t tbs[64 + sizeof ctx + HASH_MAX];
    memset(tbs, 0x20, 64);
    memcpy(tbs + 64, ctx, sizeof ctx); /* with its terminating 0, the separator byte */
    int rc = transcript_hash(s, tbs + 64 + sizeof ctx);
    size_t siglen = 64;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (rc == 0 && (c == NULL || EVP_DigestSignInit(c, NULL, NULL, NULL, key) != 1 ||
                    EVP_DigestSign(c, body + 4, &siglen, tbs,
                                   64 + sizeof ctx + s->suite->hash_len) != 1 ||
                    siglen != 64))
        rc = -EIO;
    EVP_MD_CTX_free(c);
    put16(body, 0x0807);
    put16(body + 2, 64);
    return rc;
}

/* EncryptedExtensions, Certificate, CertificateVerify, Finished into @p m; @p ends receives
 * where each ends. */
static int build_messages(sv_tls13s *s, const sv_tls13s_params *p, uint8_t *m, size_t *ends)
{
    uint8_t body[4 + 255 + 8], fin[HASH_MAX];
    size_t at = 0, n = 2;
    memset(body, 0, sizeof body); /* EE: empty extension list unless ALPN (RFC 7301 §3.1) */
    if (p->alpn != NULL) {
        static const uint8_t alpn_ext[] = {0, 16};
        memcpy(body + 2, alpn_ext, 2);
        put16(body + 4, p->alpn_len + 3);
        put16(body + 6, p->alpn_len + 1);
        body[8] = (uint8_t)p->alpn_len;
        memcpy(body + 9, p->alpn, p->alpn_len);
        n = 9 + p->alpn_len;
        put16(body, n - 2);
    }
    int rc = add_message(s, m, &at, HT_EE, body, n);
    ends[0] = at;
    uint8_t *c = m + at + 4; /* Certificate (§4.4.2): empty context, one entry, no extensions */
    c[0] = 0;
    put24(c + 1, 3 + p->cert_der_len + 2);
    put24(c + 4, p->cert_der_len);
    memcpy(c + 7, p->cert_der, p->cert_der_len);
    put16(c + 7 + p->cert_der_len, 0);
    if (rc == 0)
        rc = add_message(s, m, &at, HT_CERT, c, 9 + p->cert_der_len);
    ends[1] = at;
    if (rc == 0)
        rc = certificate_verify(s, p->sign_key, body);
    if (rc == 0)
        rc = add_message(s, m, &at, HT_CV, body, 4 + 64);
    ends[2] = at;
    if (rc == 0)
        rc = finished_mac(s, s->wr.secret, fin); /* server handshake secret */
    if (rc == 0)
        rc = add_message(s, m, &at, HT_FINISHED, fin, s->suite->hash_len);
    ends[3] = at;
    return rc;
}

/* Plaintext records of the flight: the ServerHello and the dummy ChangeCipherSpec (§D.4). */
static int queue_plain(sv_tls13s *s)
{
    uint8_t *r = out_room(s, REC_HDR + s->sh_len + 6);
    if (r == NULL)
        return -ENOMEM;
    r[0] = CT_HANDSHAKE, r[1] = 3, r[2] = 3;
    put16(r + 3, s->sh_len);
    memcpy(r + REC_HDR, s->sh, s->sh_len);
    static const uint8_t ccs[] = {CT_CCS, 3, 3, 0, 1, 1};
    memcpy(r + REC_HDR + s->sh_len, ccs, sizeof ccs);
    s->out_end += REC_HDR + s->sh_len + sizeof ccs;
    return 0;
}

/* The encrypted messages m[0 .. ends[3]) in records: one per message with 4 pad sizes, else
 * one record (padded to pad[0] when given). */
static int queue_encrypted(sv_tls13s *s, const uint8_t *m, const size_t *ends,
                           const uint16_t *pad, size_t pad_count)
{
    if (pad_count < 4)
        return seal(s, CT_HANDSHAKE, m, ends[3], pad_count > 0 ? pad[0] : 0);
    size_t from = 0;
    for (int i = 0; i < 4; i++) {
        int rc = seal(s, CT_HANDSHAKE, m + from, ends[i] - from, pad[i]);
        if (rc != 0)
            return rc;
        from = ends[i];
    }
    return 0;
}

/* After the server Finished (§7.1): application secrets; the client's Finished to expect. */
static int schedule_application(sv_tls13s *s, const uint8_t *master)
{
    size_t hl = s->suite->hash_len;
    uint8_t th[HASH_MAX], s_ap[HASH_MAX];
    int rc = finished_mac(s, s->rd.secret, s->client_finished); /* client handshake secret */
    if (rc == 0)
        rc = transcript_hash(s, th);
    if (rc == 0)
        rc = expand_label(s, master, "c ap traffic", th, hl, s->client_ap, hl);
    if (rc == 0)
        rc = expand_label(s, master, "s ap traffic", th, hl, s_ap, hl);
    if (rc == 0)
        rc = set_traffic(s, &s->wr, s_ap, 1);
    OPENSSL_cleanse(s_ap, sizeof s_ap);
    return rc;
}

/* Check the client and the parameters; choose the suite. */
static int check_params(const sv_tls13s_params *p, const suite **su, size_t *share_off,
                        sv_error *err)
{
    const sv_tls_hello *h = p->hello;
    uint16_t want = 0;
    *share_off = 0;
    if (p->sign_key == NULL || EVP_PKEY_get_id(p->sign_key) != EVP_PKEY_ED25519)
        return sv_error_set(err, -EINVAL, "tls13s: the signing key is not Ed25519");
    if (p->cert_der_len == 0 || p->cert_der_len > SV_TLS13S_CERT_MAX)
        return sv_error_set(err, -EINVAL, "tls13s: empty or oversized certificate");
    if (p->alpn != NULL && (p->alpn_len == 0 || p->alpn_len > 255))
        return sv_error_set(err, -EINVAL, "tls13s: bad ALPN protocol length");
    if (p->pad_count > SV_TLS13S_PAD_MAX || p->pad_count == 3 ||
        (p->pad_count > 0 && p->pad_sizes == NULL))
        return sv_error_set(err, -EINVAL, "tls13s: pad_count must be 0, 1, 2, 4 or 5");
    if (p->server_hello != NULL &&
        parse_template(p->server_hello, p->server_hello_len, h, &want, share_off) != 0)
        return sv_error_set(err, -EINVAL, "tls13s: the template is not a TLS 1.3 ServerHello "
                                          "to this ClientHello with an X25519 key share");
    if (!h->has_tls13)
        return sv_error_set(err, -EPROTONOSUPPORT, "tls13s: the client does not offer TLS 1.3");
    if (h->x25519 == NULL)
        return sv_error_set(err, -EPROTONOSUPPORT,
                            "tls13s: the client sent no X25519 key share");
    *su = choose_suite(h, want);
    if (*su == NULL)
        return sv_error_set(err, -EPROTONOSUPPORT,
                            "tls13s: the client offers no AES-GCM or ChaCha20-Poly1305 suite%s",
                            want != 0 ? " that the template chose" : "");
    return 0;
}

/* The ServerHello: the template with our key share, or our own. */
static int make_server_hello(sv_tls13s *s, const sv_tls13s_params *p, size_t share_off,
                             const uint8_t *pub)
{
    if (p->server_hello == NULL)
        return own_server_hello(s, p->hello, pub);
    s->sh = malloc(p->server_hello_len);
    if (s->sh == NULL)
        return -ENOMEM;
    s->sh_len = p->server_hello_len;
    memcpy(s->sh, p->server_hello, s->sh_len);
    memcpy(s->sh + share_off, pub, 32);
    return 0;
}

/* Run the handshake up to the server Finished and queue the flight. */
static int start(sv_tls13s *s, const sv_tls13s_params *p, size_t share_off)
{
    uint8_t pub[32], shared[32], master[HASH_MAX], *m = malloc(FLIGHT_MAX);
    size_t ends[4];
    int rc = m != NULL ? x25519(p->hello->x25519, pub, shared) : -ENOMEM;
    if (rc == 0)
        rc = make_server_hello(s, p, share_off, pub);
    if (rc == 0 && !EVP_DigestInit_ex(s->transcript, s->suite->md(), NULL))
        rc = -EIO;
    if (rc == 0)
        rc = transcript_add(s, p->client_hello, p->client_hello_len);
    if (rc == 0)
        rc = transcript_add(s, s->sh, s->sh_len);
    if (rc == 0)
        rc = schedule_handshake(s, shared, master);
    if (rc == 0)
        rc = build_messages(s, p, m, ends);
    if (rc == 0)
        rc = queue_plain(s);
    if (rc == 0)
        rc = queue_encrypted(s, m, ends, p->pad_sizes, p->pad_count);
    if (rc == 0)
        rc = schedule_application(s, master);
    if (rc == 0 && (p->pad_count == 2 || p->pad_count == 5)) /* the target's ticket record */
        rc = seal(s, CT_APPDATA, NULL, 0, p->pad_sizes[p->pad_count - 1]);
    OPENSSL_cleanse(shared, sizeof shared);
    OPENSSL_cleanse(master, sizeof master);
    free(m);
    return rc;
}

int sv_tls13s_new(const sv_tls13s_params *p, sv_tls13s **out, sv_error *err)
{
    const suite *su = NULL;
    size_t share_off = 0;
    *out = NULL;
    int rc = check_params(p, &su, &share_off, err);
    if (rc != 0)
        return rc;
    sv_tls13s *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sv_error_set(err, -ENOMEM, "tls13s: out of memory");
    s->suite = su;
    s->transcript = EVP_MD_CTX_new();
    s->rd.ctx = EVP_CIPHER_CTX_new();
    s->wr.ctx = EVP_CIPHER_CTX_new();
    rc = s->transcript != NULL && s->rd.ctx != NULL && s->wr.ctx != NULL ? start(s, p, share_off)
                                                                          : -ENOMEM;
    if (rc != 0) {
        sv_tls13s_free(s);
        return sv_error_set(err, rc, rc == -EMSGSIZE ? "tls13s: a message exceeds its padded "
                                                       "record size"
                                                     : "tls13s: handshake setup failed");
    }
    *out = s;
    return 0;
}

void sv_tls13s_free(sv_tls13s *s)
{
    if (s == NULL)
        return;
    EVP_MD_CTX_free(s->transcript);
    EVP_CIPHER_CTX_free(s->rd.ctx);
    EVP_CIPHER_CTX_free(s->wr.ctx);
    free(s->sh);
    free(s->out);
    OPENSSL_cleanse(s, sizeof *s); /* secrets, and the last plaintext record */
    free(s);
}

/* ---------- the client's records ---------- */

/* A fatal error: queue its alert (§6.2) under the current write key and keep it. */
static int fail(sv_tls13s *s, int rc)
{
    uint8_t desc = rc == -EBADMSG ? AL_BAD_MAC : rc == -EACCES ? AL_DECRYPT_ERROR
                 : rc == -EMSGSIZE ? AL_OVERFLOW : AL_UNEXPECTED;
    if (s->err == 0 && rc != -ECONNRESET && rc != -ENOMEM && rc != -EIO && !s->closed &&
        !s->raw_out) {
        uint8_t alert[2] = {2, desc};
        (void)seal(s, CT_ALERT, alert, 2, 0);
    }
    s->closed = true;
    s->err = rc;
    return rc;
}

static int on_alert(sv_tls13s *s, const uint8_t *a, size_t len)
{
    if (len != 2)
        return -EPROTO;
    if (a[1] == AL_CLOSE_NOTIFY)
        s->eof = true;
    else if (a[1] != AL_USER_CANCELED)
        return -ECONNRESET; /* every other alert is fatal in TLS 1.3 (§6.2) */
    return 0;
}

/* KeyUpdate (§4.6.3): a new read key. When the client asks, ours changes before our next
 * application data (sv_tls13s_wrap()): one answer however many requests came meanwhile, so
 * that a client cannot make output grow without reading it. */
static int on_key_update(sv_tls13s *s, const uint8_t *body, size_t len)
{
    if (len != 1 || body[0] > 1)
        return -EPROTO;
    s->update_asked |= body[0] == 1;
    return update_traffic(s, &s->rd, 0);
}

/* Our KeyUpdate (update_not_requested) under the old key, then the new write key. */
static int answer_key_update(sv_tls13s *s)
{
    static const uint8_t answer[] = {HT_KEY_UPDATE, 0, 0, 1, 0};
    int rc = seal(s, CT_HANDSHAKE, answer, sizeof answer, 0);
    if (rc == 0)
        rc = update_traffic(s, &s->wr, 1);
    s->update_asked = false;
    return rc;
}

/* The client's Finished (§4.4.4): then its application key (§7.1). */
static int on_finished(sv_tls13s *s, const uint8_t *body, size_t len)
{
    size_t hl = s->suite->hash_len;
    if (len != hl || CRYPTO_memcmp(body, s->client_finished, hl) != 0)
        return -EACCES;
    int rc = set_traffic(s, &s->rd, s->client_ap, 0);
    OPENSSL_cleanse(s->client_ap, sizeof s->client_ap);
    OPENSSL_cleanse(s->client_finished, sizeof s->client_finished);
    s->up = rc == 0;
    return rc;
}

/* Handle the whole handshake messages in s->hs. A key change must end the record (§5.1). */
static int handle_messages(sv_tls13s *s, bool record_ends)
{
    while (s->hs_len >= 4) {
        size_t len = (size_t)s->hs[1] << 16 | get16(s->hs + 2);
        if (len > HS_MAX - 4)
            return -EPROTO;
        if (s->hs_len < 4 + len)
            return 0;
        int rc = -EPROTO;
        if (!s->up && s->hs[0] == HT_FINISHED)
            rc = on_finished(s, s->hs + 4, len);
        else if (s->up && s->hs[0] == HT_KEY_UPDATE)
            rc = on_key_update(s, s->hs + 4, len);
        if (rc != 0)
            return rc;
        s->hs_len -= 4 + len;
        memmove(s->hs, s->hs + 4 + len, s->hs_len);
        if (s->hs_len != 0 || !record_ends)
            return -EPROTO; /* more after a key change in the same record */
    }
    return 0;
}

static int on_handshake(sv_tls13s *s, const uint8_t *p, size_t len)
{
    if (len == 0)
        return -EPROTO;
    while (len > 0) {
        size_t k = len < HS_MAX - s->hs_len ? len : HS_MAX - s->hs_len;
        if (k == 0)
            return -EPROTO;
        memcpy(s->hs + s->hs_len, p, k);
        s->hs_len += k;
        p += k;
        len -= k;
        int rc = handle_messages(s, len == 0);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Handle the record buffered in s->rec (§5): application data becomes pending plaintext. */
static int on_record(sv_tls13s *s)
{
    uint8_t type = s->rec[0];
    size_t len = s->rec_len - REC_HDR;
    const uint8_t *p = s->rec + REC_HDR;
    if (type == CT_CCS) /* dropped until the client's Finished (§5) */
        return !s->up && len == 1 && p[0] == 1 ? 0 : -EPROTO;
    if (type == CT_ALERT && !s->up) /* a client that could not read our flight */
        return on_alert(s, p, len);
    if (type != CT_APPDATA)
        return -EPROTO;
    if (len < TAG_LEN + 1)
        return -EBADMSG;
    int inner = open_record(s, &len);
    if (inner < 0)
        return inner;
    if (inner == CT_ALERT)
        return on_alert(s, p, len);
    if (inner == CT_HANDSHAKE)
        return on_handshake(s, p, len);
    if (inner != CT_APPDATA || !s->up)
        return -EPROTO;
    s->plain_off = REC_HDR;
    s->plain_len = len;
    return 0;
}

/* Take bytes of @p in into s->rec up to one whole record. @return 1 when it is whole, 0 when
 * more is needed, or a negative errno for a bad header. */
static int fill_record(sv_tls13s *s, const uint8_t *in, size_t n, size_t *used)
{
    size_t want = REC_HDR;
    if (s->rec_len >= REC_HDR)
        want = REC_HDR + get16(s->rec + 3);
    size_t k = want - s->rec_len < n ? want - s->rec_len : n;
    memcpy(s->rec + s->rec_len, in, k);
    s->rec_len += k;
    *used += k;
    if (s->rec_len < REC_HDR)
        return 0;
    if (s->rec_len == REC_HDR && want == REC_HDR) {
        size_t len = get16(s->rec + 3);
        if (s->rec[0] < CT_CCS || s->rec[0] > CT_APPDATA || s->rec[1] != 3)
            return -EPROTO;
        if (len > CIPHER_MAX)
            return -EMSGSIZE;
        if (len == 0)
            return -EPROTO;
        return fill_record(s, in + k, n - k, used);
    }
    return s->rec_len == want;
}

/* Hand up pending plaintext. @return bytes copied. */
static size_t take_plain(sv_tls13s *s, uint8_t *out, size_t cap)
{
    size_t k = s->plain_len < cap ? s->plain_len : cap;
    memcpy(out, s->rec + s->plain_off, k);
    s->plain_off += k;
    s->plain_len -= k;
    return k;
}

ssize_t sv_tls13s_unwrap(sv_tls13s *s, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                         size_t cap)
{
    size_t w = 0;
    *used = 0;
    if (s->err != 0)
        return s->err;
    if (s->raw_in) { /* what was decrypted or buffered first, then the bytes as they are */
        w = take_plain(s, out, cap);
        size_t k = n < cap - w ? n : cap - w;
        if (k > 0)
            memcpy(out + w, in, k);
        *used = k;
        return (ssize_t)(w + k);
    }
    while (!s->eof) {
        w += take_plain(s, out + w, cap - w);
        if (s->plain_len > 0 || w == cap || (s->watch && w > 0))
            break;
        int rc = fill_record(s, in + *used, n - *used, used);
        if (rc == 0)
            break;
        if (rc > 0)
            rc = on_record(s);
        s->rec_len = 0; /* its plaintext, if any, stays in s->rec until taken */
        if (rc < 0) {
            fail(s, rc);
            return w > 0 ? (ssize_t)w : rc; /* the plaintext before the error goes up first */
        }
    }
    if (s->eof)
        *used = n; /* nothing counts after close_notify (§6.1) */
    return (ssize_t)w;
}

/* ---------- application data towards the client, status ---------- */

ssize_t sv_tls13s_wrap(sv_tls13s *s, const uint8_t *p, size_t n)
{
    if (s->err != 0)
        return s->err;
    if (!s->up)
        return -ENOTCONN;
    if (s->closed)
        return -EPIPE;
    size_t acc = 0;
    if (s->raw_out) {
        size_t pending = s->out_end - s->out_off;
        acc = pending < SV_TLS13S_OUT_MAX ? SV_TLS13S_OUT_MAX - pending : 0;
        if (acc > n)
            acc = n;
        uint8_t *dst = acc > 0 ? out_room(s, acc) : NULL;
        if (acc > 0 && dst == NULL)
            return fail(s, -ENOMEM);
        if (acc > 0) {
            memcpy(dst, p, acc);
            s->out_end += acc;
        }
        return (ssize_t)acc;
    }
    if (n > 0 && s->update_asked) {
        int rc = answer_key_update(s);
        if (rc != 0)
            return fail(s, rc);
    }
    while (acc < n && s->out_end - s->out_off < SV_TLS13S_OUT_MAX) {
        size_t k = n - acc < PLAIN_MAX ? n - acc : PLAIN_MAX;
        int rc = seal(s, CT_APPDATA, p + acc, k, 0);
        if (rc != 0)
            return fail(s, rc);
        acc += k;
    }
    return (ssize_t)acc;
}

int sv_tls13s_shutdown(sv_tls13s *s)
{
    if (s->err != 0)
        return s->err;
    if (!s->up)
        return -ENOTCONN;
    if (s->closed)
        return 0;
    if (s->raw_out) { /* no outer record ever again, not even close_notify (§2.6): TCP ends */
        s->closed = true;
        return 0;
    }
    static const uint8_t close_notify[] = {1, AL_CLOSE_NOTIFY};
    int rc = seal(s, CT_ALERT, close_notify, sizeof close_notify, 0);
    s->closed = true;
    return rc != 0 ? fail(s, rc) : 0;
}

const uint8_t *sv_tls13s_out_peek(const sv_tls13s *s, size_t *len)
{
    *len = s->out_end - s->out_off;
    return s->out != NULL ? s->out + s->out_off : NULL;
}

void sv_tls13s_out_consume(sv_tls13s *s, size_t n)
{
    s->out_off += n;
    if (s->out_off < s->out_end)
        return;
    s->out_off = s->out_end = 0;
    if (s->out_cap > PLAIN_MAX + 1024) { /* an idle connection keeps no large buffer */
        free(s->out);
        s->out = NULL;
        s->out_cap = 0;
    }
}

unsigned sv_tls13s_status(const sv_tls13s *s)
{
    bool pass = s->raw_in && s->raw_out && s->err == 0 && !s->eof && !s->closed &&
                s->plain_len == 0 && s->out_end == s->out_off;
    return (s->up ? SV_LAYER_UP : 0u) | (s->eof ? SV_LAYER_EOF : 0u) |
           (s->watch && !s->raw_in ? SV_LAYER_RECORDS : 0u) | (pass ? SV_LAYER_PASS : 0u);
}

int sv_tls13s_direct(sv_tls13s *s, unsigned bits)
{
    if (s->err != 0)
        return s->err;
    if (bits != 0 && !s->up)
        return -ENOTCONN;
    s->watch = (bits & SV_LAYER_WATCH) != 0;
    if ((bits & SV_LAYER_RAW_IN) && !s->raw_in) {
        s->raw_in = true;
        if (s->rec_len > 0 && s->plain_len == 0) { /* raw bytes already taken: they go first */
            s->plain_off = 0;
            s->plain_len = s->rec_len;
            s->rec_len = 0;
        }
    }
    if ((bits & SV_LAYER_RAW_OUT) && !s->raw_out) {
        s->update_asked = false; /* no record of ours any more: a KeyUpdate stays unanswered */
        s->raw_out = true;
    }
    return 0;
}

const uint8_t *sv_tls13s_server_hello(const sv_tls13s *s, size_t *len)
{
    *len = s->sh_len;
    return s->sh;
}

uint16_t sv_tls13s_suite(const sv_tls13s *s)
{
    return s->suite->id;
}
