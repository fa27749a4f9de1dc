/* VMess AEAD server core (PROTOCOLS.md §6): credential table, request header, body chunks. */
#include "config.h"

#include "supervisor/proto/vmess.h"
#include "supervisor/proto/mux.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#define TAG 16

/* ---------------------------------------------------------------------------------------- */
/* Small primitives                                                                          */
/* ---------------------------------------------------------------------------------------- */

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

uint32_t sv_vmess_fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 0x811c9dc5u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x01000193u;
    return h;
}

/* CRC-32 (IEEE, zlib's) of @p n bytes; only 12 bytes per user trial, so bitwise is enough. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/*
 * SHAKE128 with an unbounded output read two bytes at a time. OpenSSL 3.0 (Debian 12) can
 * squeeze a SHAKE context only once (EVP_DigestSqueeze came with 3.3), and a connection needs
 * four bytes per chunk for as long as it lives, so the Keccak-f[1600] permutation (FIPS 202) is
 * here. Its output is checked against OpenSSL's one-shot SHAKE128 in the unit tests.
 */
#define SHAKE128_RATE 168

static uint64_t rotl64(uint64_t x, unsigned s) { return (x << s) | (x >> ((64 - s) & 63)); }

static void keccak_f1600(uint64_t a[25])
{
    static const uint64_t rc[24] = {
        0x0000000000000001u, 0x0000000000008082u, 0x800000000000808au, 0x8000000080008000u,
        0x000000000000808bu, 0x0000000080000001u, 0x8000000080008081u, 0x8000000000008009u,
        0x000000000000008au, 0x0000000000000088u, 0x0000000080008009u, 0x000000008000000au,
        0x000000008000808bu, 0x800000000000008bu, 0x8000000000008089u, 0x8000000000008003u,
        0x8000000000008002u, 0x8000000000000080u, 0x000000000000800au, 0x800000008000000au,
        0x8000000080008081u, 0x8000000000008080u, 0x0000000080000001u, 0x8000000080008008u,
    };
    static const unsigned rho[24] = {1,  3,  6,  10, 15, 21, 28, 36, 45, 55, 2,  14,
                                     27, 41, 56, 8,  25, 43, 62, 18, 39, 61, 20, 44};
    static const unsigned pi[24] = {10, 7,  11, 17, 18, 3, 5,  16, 8,  21, 24, 4,
                                    15, 23, 19, 13, 12, 2, 20, 14, 22, 9,  6,  1};
    /* theta's and chi's indices spelled out: the generic loops with "% 5" cost several times
     * as much, and this runs once per 42 chunks of each direction */
    for (int r = 0; r < 24; r++) {
        uint64_t c0 = a[0] ^ a[5] ^ a[10] ^ a[15] ^ a[20];
        uint64_t c1 = a[1] ^ a[6] ^ a[11] ^ a[16] ^ a[21];
        uint64_t c2 = a[2] ^ a[7] ^ a[12] ^ a[17] ^ a[22];
        uint64_t c3 = a[3] ^ a[8] ^ a[13] ^ a[18] ^ a[23];
        uint64_t c4 = a[4] ^ a[9] ^ a[14] ^ a[19] ^ a[24];
        uint64_t d[5] = {c4 ^ rotl64(c1, 1), c0 ^ rotl64(c2, 1), c1 ^ rotl64(c3, 1),
                         c2 ^ rotl64(c4, 1), c3 ^ rotl64(c0, 1)};
        for (int j = 0; j < 25; j += 5) {
            a[j] ^= d[0];
            a[j + 1] ^= d[1];
            a[j + 2] ^= d[2];
            a[j + 3] ^= d[3];
            a[j + 4] ^= d[4];
        }
        uint64_t t = a[1];
        for (int i = 0; i < 24; i++) {
            uint64_t next = a[pi[i]];
            a[pi[i]] = rotl64(t, rho[i]);
            t = next;
        }
        for (int j = 0; j < 25; j += 5) {
            uint64_t b0 = a[j], b1 = a[j + 1], b2 = a[j + 2], b3 = a[j + 3], b4 = a[j + 4];
            a[j] = b0 ^ (~b1 & b2);
            a[j + 1] = b1 ^ (~b2 & b3);
            a[j + 2] = b2 ^ (~b3 & b4);
            a[j + 3] = b3 ^ (~b4 & b0);
            a[j + 4] = b4 ^ (~b0 & b1);
        }
        a[0] ^= rc[r];
    }
}

static void lane_xor_byte(uint64_t *lane, unsigned i, uint8_t b)
{
    lane[i / 8] ^= (uint64_t)b << (8 * (i % 8));
}

void sv_vmess_shake_init(sv_vmess_shake *s, const uint8_t iv[16])
{
    memset(s->lane, 0, sizeof s->lane);
    for (unsigned i = 0; i < 16; i++)
        lane_xor_byte(s->lane, i, iv[i]);
    lane_xor_byte(s->lane, 16, 0x1f);                 /* SHAKE domain bits and pad10*1 start */
    lane_xor_byte(s->lane, SHAKE128_RATE - 1, 0x80);  /* pad10*1 end */
    keccak_f1600(s->lane);
    s->pos = 0;
}

static uint8_t shake_byte(sv_vmess_shake *s)
{
    if (s->pos == SHAKE128_RATE) {
        keccak_f1600(s->lane);
        s->pos = 0;
    }
    unsigned i = s->pos++;
    return (uint8_t)(s->lane[i / 8] >> (8 * (i % 8)));
}

uint16_t sv_vmess_shake_next(sv_vmess_shake *s)
{
    uint8_t hi = shake_byte(s);
    return (uint16_t)(hi << 8 | shake_byte(s));
}

/* ---------------------------------------------------------------------------------------- */
/* KDF and keys (§6.1, §6.2)                                                                 */
/* ---------------------------------------------------------------------------------------- */

#define KDF_BLOCK 64
#define KDF_OUT 32
#define KDF_DEPTH 3

static const char kdf_root_key[] = "VMess AEAD KDF";

/* HMAC-SHA256 keyed "VMess AEAD KDF" over @p m: a copy of @p root (already keyed, read only:
 * EVP_MAC_CTX_dup takes it const) when given, which skips fetching HMAC and SHA-256 by name
 * on each of a handshake's 40 calls, else OpenSSL's one-shot HMAC(). */
static int kdf_root(const EVP_MAC_CTX *root, const uint8_t *m, size_t mlen, uint8_t out[KDF_OUT])
{
    if (root == NULL) {
        unsigned ol = 0;
        return HMAC(EVP_sha256(), kdf_root_key, (int)(sizeof kdf_root_key - 1), m, mlen, out,
                    &ol) != NULL && ol == KDF_OUT ? 0 : -EIO;
    }
    EVP_MAC_CTX *d = EVP_MAC_CTX_dup(root);
    size_t ol = 0;
    int ok = d != NULL && EVP_MAC_update(d, m, mlen) == 1 &&
             EVP_MAC_final(d, out, &ol, KDF_OUT) == 1 && ol == KDF_OUT;
    EVP_MAC_CTX_free(d);
    return ok ? 0 : -EIO;
}

/* Level @p level of the nested HMAC over @p m: level 0 is HMAC-SHA256 keyed with the constant,
 * level i is the HMAC construction (RFC 2104) over level i - 1 keyed with path[i - 1]. */
static int kdf_level(const EVP_MAC_CTX *root, const sv_vmess_bytes *path, size_t level,
                     const uint8_t *m, size_t mlen, uint8_t out[KDF_OUT])
{
    if (level == 0)
        return kdf_root(root, m, mlen, out);
    uint8_t buf[KDF_BLOCK + KDF_BLOCK * KDF_DEPTH + KDF_OUT];
    uint8_t inner[KDF_OUT];
    const sv_vmess_bytes *k = &path[level - 1];
    if (mlen > sizeof buf - KDF_BLOCK)
        return -EINVAL;
    for (int pass = 0; pass < 2; pass++) {
        uint8_t pad = pass == 0 ? 0x36 : 0x5c;
        memset(buf, pad, KDF_BLOCK);
        for (size_t i = 0; i < k->len; i++)
            buf[i] ^= ((const uint8_t *)k->p)[i];
        const uint8_t *tail = pass == 0 ? m : inner;
        size_t tl = pass == 0 ? mlen : KDF_OUT;
        memcpy(buf + KDF_BLOCK, tail, tl);
        int rc = kdf_level(root, path, level - 1, buf, KDF_BLOCK + tl, pass == 0 ? inner : out);
        if (rc != 0)
            return rc;
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

int sv_vmess_kdf(const uint8_t *key, size_t key_len, const sv_vmess_bytes *path, size_t n,
                 uint8_t out[32])
{
    if (n > KDF_DEPTH || key_len > KDF_OUT)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (path[i].len > KDF_BLOCK)
            return -EINVAL;
    return kdf_level(NULL, path, n, key, key_len, out);
}

/* KDF (with @p root, see kdf_root) of a text element and up to two byte strings; writes
 * @p out_len (≤ 32) bytes. */
static int kdf_text(const EVP_MAC_CTX *root, const uint8_t *key, size_t key_len, const char *p1,
                    const void *p2, size_t l2, const void *p3, size_t l3, uint8_t *out,
                    size_t out_len)
{
    sv_vmess_bytes path[3] = {{p1, strlen(p1)}, {p2, l2}, {p3, l3}};
    size_t n = p3 != NULL ? 3 : p2 != NULL ? 2 : 1;
    uint8_t full[KDF_OUT];
    int rc = kdf_level(root, path, n, key, key_len, full);
    memcpy(out, full, out_len);
    OPENSSL_cleanse(full, sizeof full);
    return rc;
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sv_vmess_cmd_key(const char *uuid, uint8_t out[16])
{
    static const char salt[] = "c48619fe-8f02-49e0-b9e9-edf763e17e21";
    uint8_t m[16 + sizeof salt - 1];
    size_t at = 0;
    if (uuid == NULL || strlen(uuid) != 36)
        return -EINVAL;
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (uuid[i] != '-')
                return -EINVAL;
            continue;
        }
        int hi = hex_nibble(uuid[i]), lo = hex_nibble(uuid[i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        m[at++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    memcpy(m + 16, salt, sizeof salt - 1);
    unsigned ol = 0;
    return EVP_Digest(m, sizeof m, out, &ol, EVP_md5(), NULL) == 1 && ol == 16 ? 0 : -EIO;
}

/* ---------------------------------------------------------------------------------------- */
/* Credential table                                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef struct vmess_user {
    uint8_t cmd_key[16];
    uint8_t auth_key[16]; /* KDF16(cmd_key, "AES Auth ID Encryption") */
} vmess_user;

typedef struct vmess_creds {
    size_t n;
    vmess_user *users;
    sv_replay *replay; /* the inbound's filter of auth IDs (borrowed), or NULL */
    EVP_CIPHER *ecb, *gcm, *chacha;
    EVP_MAC_CTX *kdf_root; /* HMAC-SHA256 keyed "VMess AEAD KDF", copied for each use */
} vmess_creds;

static void creds_free(void *creds)
{
    vmess_creds *t = creds;
    if (t == NULL)
        return;
    if (t->users != NULL)
        OPENSSL_cleanse(t->users, t->n * sizeof *t->users);
    free(t->users);
    EVP_CIPHER_free(t->ecb);
    EVP_CIPHER_free(t->gcm);
    EVP_CIPHER_free(t->chacha);
    EVP_MAC_CTX_free(t->kdf_root);
    free(t);
}

static int cmp_key(const void *a, const void *b)
{
    return memcmp(((const vmess_user *)a)->cmd_key, ((const vmess_user *)b)->cmd_key, 16);
}

/* Refuse two users with one UUID: the trial would always pick the first. */
static int check_duplicates(const vmess_creds *t, const sv_user_set *users, sv_error *err)
{
    if (t->n < 2)
        return 0;
    vmess_user *sorted = malloc(t->n * sizeof *sorted);
    if (sorted == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    memcpy(sorted, t->users, t->n * sizeof *sorted);
    qsort(sorted, t->n, sizeof *sorted, cmp_key);
    int rc = 0;
    for (size_t i = 1; i < t->n && rc == 0; i++) {
        if (memcmp(sorted[i - 1].cmd_key, sorted[i].cmd_key, 16) != 0)
            continue;
        size_t a = SIZE_MAX, b = SIZE_MAX;
        for (size_t j = 0; j < t->n; j++) {
            if (memcmp(t->users[j].cmd_key, sorted[i].cmd_key, 16) != 0)
                continue;
            if (a == SIZE_MAX)
                a = j;
            else if (b == SIZE_MAX)
                b = j;
        }
        rc = sv_error_set(err, -EINVAL,
                          "user set %s: users %" PRIu64 " and %" PRIu64 " have the same UUID",
                          users->tag != NULL ? users->tag : "", users->users[a].id,
                          users->users[b].id);
    }
    OPENSSL_cleanse(sorted, t->n * sizeof *sorted);
    free(sorted);
    return rc;
}

/* The keyed HMAC of the KDF's level 0, or NULL. */
static EVP_MAC_CTX *kdf_root_new(void)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context keeps its own reference */
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    if (ctx != NULL && EVP_MAC_init(ctx, (const unsigned char *)kdf_root_key,
                                    sizeof kdf_root_key - 1, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    (void)in;
    *out = NULL;
    const char *set = users->tag != NULL ? users->tag : "";
    size_t n = users->n_users;
    if (n > SV_USERS_MAX)
        return sv_error_set(err, -EINVAL, "user set %s: more than %d users", set, SV_USERS_MAX);
    vmess_creds *t = calloc(1, sizeof *t);
    if (t != NULL)
        t->users = calloc(n > 0 ? n : 1, sizeof *t->users);
    if (t == NULL || t->users == NULL) {
        creds_free(t);
        return sv_error_set(err, -ENOMEM, "user set %s: out of memory", set);
    }
    t->n = n;
    int rc = 0;
    t->ecb = EVP_CIPHER_fetch(NULL, "AES-128-ECB", NULL);
    t->gcm = EVP_CIPHER_fetch(NULL, "AES-128-GCM", NULL);
    t->chacha = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    t->kdf_root = kdf_root_new();
    if (t->ecb == NULL || t->gcm == NULL || t->chacha == NULL || t->kdf_root == NULL)
        rc = sv_error_set(err, -EIO, "user set %s: AES-128-GCM or ChaCha20-Poly1305 is not "
                          "available", set);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const sv_user *u = &users->users[i];
        vmess_user *v = &t->users[i];
        int r = sv_vmess_cmd_key(u->secret, v->cmd_key);
        if (r == -EINVAL)
            rc = sv_error_set(err, -EINVAL, "user set %s: user %" PRIu64 " has no valid UUID",
                              set, u->id);
        else if (r != 0 || kdf_text(t->kdf_root, v->cmd_key, 16, "AES Auth ID Encryption", NULL,
                                    0, NULL, 0, v->auth_key, 16) != 0)
            rc = sv_error_set(err, -EIO, "user set %s: key derivation failed", set);
    }
    if (rc == 0)
        rc = check_duplicates(t, users, err);
    if (rc != 0) {
        creds_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void attach_replay(void *creds, sv_replay *filter)
{
    ((vmess_creds *)creds)->replay = filter;
}

/* ---------------------------------------------------------------------------------------- */
/* AEAD helpers                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* One-shot AES-128-GCM seal (@p enc) or open of @p n bytes at @p in into @p out (tag after the
 * ciphertext). @return 0, -EBADMSG (open: bad tag) or -EIO. */
static int gcm_once(const EVP_CIPHER *gcm, const uint8_t key[16], const uint8_t nonce[12],
                    const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t n, uint8_t *out,
                    bool enc)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int ol = 0, ok = ctx != NULL && EVP_CipherInit_ex2(ctx, gcm, key, nonce, enc ? 1 : 0, NULL);
    if (ok && aad_len > 0)
        ok = EVP_CipherUpdate(ctx, NULL, &ol, aad, (int)aad_len);
    if (ok && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, (void *)(in + n));
    if (ok && n > 0)
        ok = EVP_CipherUpdate(ctx, out, &ol, in, (int)n);
    int rc = ok ? 0 : -EIO;
    if (ok && EVP_CipherFinal_ex(ctx, out + n, &ol) != 1)
        rc = enc ? -EIO : -EBADMSG;
    if (rc == 0 && enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG, out + n) != 1)
        rc = -EIO;
    EVP_CIPHER_CTX_free(ctx);
    return rc;
}

/* One direction of the body: the chunk AEAD keyed once, its nonce counter, the size AEAD
 * (option A) and the SHAKE stream of sizes and paddings. */
typedef struct vmess_dir {
    EVP_CIPHER_CTX *body; /* NULL: security none or zero */
    EVP_CIPHER_CTX *len;  /* option A only */
    uint8_t iv[16];
    uint16_t count, len_count;
    sv_vmess_shake shake;
} vmess_dir;

static void dir_deinit(vmess_dir *d)
{
    EVP_CIPHER_CTX_free(d->body);
    EVP_CIPHER_CTX_free(d->len);
    d->body = d->len = NULL;
}

/* Key for @p sec from 16 bytes: AES-128-GCM uses them, ChaCha20-Poly1305 MD5(k) ‖ MD5(MD5(k)). */
static int body_key(int sec, const uint8_t k[16], uint8_t out[32])
{
    if (sec == SV_VMESS_SEC_AES_128_GCM) {
        memcpy(out, k, 16);
        return 0;
    }
    unsigned l1 = 0, l2 = 0;
    if (EVP_Digest(k, 16, out, &l1, EVP_md5(), NULL) != 1 ||
        EVP_Digest(out, 16, out + 16, &l2, EVP_md5(), NULL) != 1)
        return -EIO;
    return 0;
}

static EVP_CIPHER_CTX *keyed_ctx(const vmess_creds *k, int sec, const uint8_t k16[16], bool enc)
{
    uint8_t key[32];
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    const EVP_CIPHER *cipher = sec == SV_VMESS_SEC_AES_128_GCM ? k->gcm : k->chacha;
    if (ctx == NULL || body_key(sec, k16, key) != 0 ||
        EVP_CipherInit_ex2(ctx, cipher, key, NULL, enc ? 1 : 0, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        ctx = NULL;
    }
    OPENSSL_cleanse(key, sizeof key);
    return ctx;
}

/* Seal (ctx keyed for encryption) or open @p n bytes at @p in into @p out with nonce
 * u16be(*count) ‖ iv[2:12]; the counter advances on success (§6.5). */
static int chunk_crypt(EVP_CIPHER_CTX *ctx, const uint8_t iv[16], uint16_t *count,
                       const uint8_t *in, size_t n, uint8_t *out, bool enc)
{
    uint8_t nonce[12];
    put16(nonce, *count);
    memcpy(nonce + 2, iv + 2, 10);
    int ol = 0;
    if (EVP_CipherInit_ex2(ctx, NULL, NULL, nonce, enc ? 1 : 0, NULL) != 1)
        return -EIO;
    if (!enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, (void *)(in + n)) != 1)
        return -EIO;
    if (n > 0 && EVP_CipherUpdate(ctx, out, &ol, in, (int)n) != 1)
        return -EIO;
    if (EVP_CipherFinal_ex(ctx, out + n, &ol) != 1)
        return enc ? -EIO : -EBADMSG;
    if (enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG, out + n) != 1)
        return -EIO;
    (*count)++;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state                                                                      */
/* ---------------------------------------------------------------------------------------- */

enum vmess_phase { PH_AUTH = 0, PH_HEADER, PH_BODY, PH_END, PH_FAILED };
enum vmess_mode { MODE_AEAD = 1, MODE_NONE, MODE_RAW };

typedef struct vmess_conn {
    uint8_t phase, mode, sec;
    bool masking, padding, authlen, udp;
    bool have_size;   /* the current chunk's size field was read */
    bool resp_sent;
    int error;        /* PH_FAILED: what ended the connection */
    int user;
    int64_t now;      /* Unix seconds, from set_time */
    uint16_t hlen;    /* header plaintext length */
    uint16_t size, pad; /* current chunk: bytes after the size field, padding among them */
    uint8_t auth_id[16], conn_nonce[8];
    uint8_t resp[SV_VMESS_RESP_HEADER];
    sv_dest dest;
    vmess_dir up, down;
    sv_mux *mux;      /* command 3: the Mux.Cool decoder of the body (§7) */
    uint8_t *mbuf;    /* mux, chunked modes: decrypted body bytes not decoded yet (MBUF_CAP) */
    uint8_t *answers; /* mux: the last feed's End answers, sealed (seal_answers), or NULL */
    uint32_t moff, mlen; /* mbuf[moff, mlen) is undecoded; [0, moff) went out last call */
} vmess_conn;

/* Plaintext held for the Mux.Cool decoder: what it left (a frame header, a datagram, or the
 * rest of a chunk when the effects were full) and one more chunk. */
#define MBUF_CAP (SV_MUX_CARRY_MAX + 2 * SV_VMESS_CHUNK_MAX)

static int conn_init(void *state, const sv_inbound_spec *in)
{
    (void)in;
    vmess_conn *c = state;
    memset(c, 0, sizeof *c);
    c->phase = PH_AUTH;
    c->user = -1;
    return 0;
}

static void conn_deinit(void *state)
{
    vmess_conn *c = state;
    dir_deinit(&c->up);
    dir_deinit(&c->down);
    sv_mux_free(c->mux);
    c->mux = NULL;
    free(c->mbuf);
    c->mbuf = NULL;
    free(c->answers);
    c->answers = NULL;
}

static void set_time(void *state, int64_t unix_s) { ((vmess_conn *)state)->now = unix_s; }

static ssize_t fail(vmess_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy)
{
    c->phase = PH_FAILED;
    c->error = error;
    dir_deinit(&c->up);
    dir_deinit(&c->down);
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e == NULL) { /* full: the last slot says it */
        e = &fx->v[SV_EFFECTS_MAX - 1];
        memset(e, 0, sizeof *e);
        e->kind = SV_FX_ERROR;
    }
    e->error = error;
    e->policy = policy;
    return error;
}

/*
 * §6.3 steps 1-3 on the first SV_VMESS_PREFIX bytes: find the user by trial, open the length
 * (AAD = auth ID), then remember the auth ID. @return 0 with user, hlen, auth_id and conn_nonce
 * set, or -EACCES, -ETIME, -EBADMSG, -EALREADY, -EPROTO, -EIO.
 */
static int check_auth(vmess_conn *c, const vmess_creds *k, const uint8_t *p)
{
    EVP_CIPHER_CTX *ecb = EVP_CIPHER_CTX_new();
    if (ecb == NULL || EVP_DecryptInit_ex2(ecb, k->ecb, NULL, NULL, NULL) != 1) {
        EVP_CIPHER_CTX_free(ecb);
        return -EIO;
    }
    EVP_CIPHER_CTX_set_padding(ecb, 0);
    int rc = -EACCES;
    for (size_t i = 0; i < k->n && rc != 0; i++) {
        uint8_t b[16];
        int ol = 0;
        if (EVP_DecryptInit_ex2(ecb, NULL, k->users[i].auth_key, NULL, NULL) != 1 ||
            EVP_DecryptUpdate(ecb, b, &ol, p, 16) != 1 || ol != 16) {
            rc = -EIO;
            break;
        }
        if (crc32_ieee(b, 12) != be32(b + 12))
            continue;
        uint64_t ts = (uint64_t)be32(b) << 32 | be32(b + 4);
        if (ts > INT64_MAX || (int64_t)ts > c->now + SV_VMESS_AUTH_WINDOW_S ||
            (int64_t)ts < c->now - SV_VMESS_AUTH_WINDOW_S) {
            rc = -ETIME;
            continue;
        }
        c->user = (int)i;
        rc = 0;
    }
    EVP_CIPHER_CTX_free(ecb);
    if (rc != 0)
        return rc;

    const uint8_t *cmd_key = k->users[c->user].cmd_key;
    memcpy(c->auth_id, p, 16);
    memcpy(c->conn_nonce, p + 34, 8);
    uint8_t key[16], nonce[12], len[2];
    rc = kdf_text(k->kdf_root, cmd_key, 16, "VMess Header AEAD Key_Length", c->auth_id, 16,
                  c->conn_nonce, 8, key, 16);
    if (rc == 0)
        rc = kdf_text(k->kdf_root, cmd_key, 16, "VMess Header AEAD Nonce_Length", c->auth_id, 16,
                      c->conn_nonce, 8, nonce, 12);
    if (rc == 0)
        rc = gcm_once(k->gcm, key, nonce, c->auth_id, 16, p + 16, 2, len, false);
    OPENSSL_cleanse(key, sizeof key);
    if (rc != 0)
        return rc;
    c->hlen = be16(len);
    if (k->replay != NULL && !sv_replay_add(k->replay, c->auth_id, 16))
        return -EALREADY;
    if (c->hlen < 38 + 4 || c->hlen > SV_VMESS_HEADER_MAX)
        return -EPROTO;
    return 0;
}

/* Address in style B (§1.1) at @p p (n bytes) into @p d. @return its length or -EPROTO. */
static ssize_t parse_addr(const uint8_t *p, size_t n, sv_dest *d)
{
    static const uint8_t atyp_a[4] = {0, SV_ATYP_IPV4, SV_ATYP_DOMAIN, SV_ATYP_IPV6};
    uint8_t a[SV_DEST_WIRE_MAX];
    if (n < 3 || p[2] < 1 || p[2] > 3)
        return -EPROTO;
    size_t alen = p[2] == 1 ? 4 : p[2] == 3 ? 16 : (size_t)1 + (n > 3 ? p[3] : 0);
    if (n < 3 + alen)
        return -EPROTO;
    a[0] = atyp_a[p[2]];
    memcpy(a + 1, p + 3, alen);
    memcpy(a + 1 + alen, p, 2);
    if (sv_dest_parse(a, 1 + alen + 2, d) <= 0)
        return -EPROTO;
    return (ssize_t)(3 + alen);
}

/* Response header (§6.6): AEAD(u16be 4) ‖ AEAD(V 0 0 0) under keys from resp key and IV. */
static int make_response(vmess_conn *c, const vmess_creds *k, const uint8_t rkey[16],
                         const uint8_t riv[16], uint8_t v)
{
    uint8_t key[16], nonce[12], len[2] = {0, 4}, hdr[4] = {v, 0, 0, 0};
    int rc = kdf_text(k->kdf_root, rkey, 16, "AEAD Resp Header Len Key", NULL, 0, NULL, 0, key,
                      16);
    if (rc == 0)
        rc = kdf_text(k->kdf_root, riv, 16, "AEAD Resp Header Len IV", NULL, 0, NULL, 0, nonce,
                      12);
    if (rc == 0)
        rc = gcm_once(k->gcm, key, nonce, NULL, 0, len, 2, c->resp, true);
    if (rc == 0)
        rc = kdf_text(k->kdf_root, rkey, 16, "AEAD Resp Header Key", NULL, 0, NULL, 0, key, 16);
    if (rc == 0)
        rc = kdf_text(k->kdf_root, riv, 16, "AEAD Resp Header IV", NULL, 0, NULL, 0, nonce, 12);
    if (rc == 0)
        rc = gcm_once(k->gcm, key, nonce, NULL, 0, hdr, 4, c->resp + 18, true);
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* Key one direction for the body from its 16-byte key and IV. @return 0 or -EIO. */
static int dir_init(vmess_conn *c, const vmess_creds *k, vmess_dir *d, const uint8_t key[16],
                    const uint8_t iv[16], bool enc)
{
    memcpy(d->iv, iv, 16);
    sv_vmess_shake_init(&d->shake, iv);
    if (c->mode != MODE_AEAD)
        return 0;
    d->body = keyed_ctx(k, c->sec, key, enc);
    if (d->body == NULL)
        return -EIO;
    if (c->authlen) {
        uint8_t lk[16];
        if (kdf_text(k->kdf_root, key, 16, "auth_len", NULL, 0, NULL, 0, lk, 16) != 0)
            return -EIO;
        d->len = keyed_ctx(k, c->sec, lk, enc);
        OPENSSL_cleanse(lk, sizeof lk);
        if (d->len == NULL)
            return -EIO;
    }
    return 0;
}

/* Check the options and security of an authenticated header (§6.4) and set the body mode.
 * @return 0 or -EPROTONOSUPPORT. */
static int choose_mode(vmess_conn *c, uint8_t opt, uint8_t sec)
{
    bool stream = opt & SV_VMESS_OPT_CHUNK_STREAM;
    c->sec = sec;
    c->masking = opt & SV_VMESS_OPT_CHUNK_MASKING;
    c->padding = opt & SV_VMESS_OPT_GLOBAL_PADDING;
    c->authlen = opt & SV_VMESS_OPT_AUTH_LENGTH;
    switch (sec) {
    case SV_VMESS_SEC_AES_128_GCM:
    case SV_VMESS_SEC_CHACHA20_POLY1305:
        if (!stream || (c->padding && (!c->masking || c->authlen)))
            return -EPROTONOSUPPORT;
        c->mode = MODE_AEAD;
        if (c->authlen)
            c->masking = false;
        return 0;
    case SV_VMESS_SEC_NONE:
        c->mode = stream ? MODE_NONE : MODE_RAW;
        break;
    case SV_VMESS_SEC_ZERO:
        c->mode = MODE_RAW;
        break;
    default:
        return -EPROTONOSUPPORT;
    }
    c->padding = c->authlen = false; /* v2ray uses neither without an AEAD */
    if (c->mode == MODE_RAW && c->udp)
        return -EPROTONOSUPPORT;   /* datagrams need chunks */
    return 0;
}

/*
 * Open and check the header (§6.3 step 3, §6.4) at @p p (hlen + 16 bytes, decrypted in place),
 * then key both directions. @return 0, or -EBADMSG, -EPROTO, -EPROTONOSUPPORT, -EIO.
 */
static int open_header(vmess_conn *c, const vmess_creds *k, uint8_t *p, bool *mux)
{
    const uint8_t *cmd_key = k->users[c->user].cmd_key;
    uint8_t key[16], nonce[12];
    int rc = kdf_text(k->kdf_root, cmd_key, 16, "VMess Header AEAD Key", c->auth_id, 16,
                      c->conn_nonce, 8, key, 16);
    if (rc == 0)
        rc = kdf_text(k->kdf_root, cmd_key, 16, "VMess Header AEAD Nonce", c->auth_id, 16,
                      c->conn_nonce, 8, nonce, 12);
    if (rc == 0)
        rc = gcm_once(k->gcm, key, nonce, c->auth_id, 16, p, c->hlen, p, false);
    OPENSSL_cleanse(key, sizeof key);
    if (rc != 0)
        return rc;
    const uint8_t *h = p;
    size_t L = c->hlen, at = 38;
    uint8_t cmd = h[37], plen = h[35] >> 4;
    if (h[0] != 1)
        return -EPROTO;
    if (cmd == 1 || cmd == 2) {
        ssize_t a = parse_addr(h + at, L - 4 - at, &c->dest);
        if (a < 0)
            return (int)a;
        at += (size_t)a;
    } else if (cmd != 3) {
        return -EPROTONOSUPPORT;
    }
    if (at + plen + 4 != L || sv_vmess_fnv1a(h, at + plen) != be32(h + at + plen))
        return -EPROTO;
    c->udp = cmd == 2;
    c->dest.network = c->udp ? SV_NET_UDP : SV_NET_TCP;
    rc = choose_mode(c, h[34], h[35] & 0x0f);
    if (rc != 0)
        return rc;
    if (cmd == 3) { /* Mux.Cool (§7.1): the body is frames, each session a stream */
        *mux = true;
        c->mux = sv_mux_new();
        c->mbuf = c->mode == MODE_RAW ? NULL : malloc(MBUF_CAP);
        if (c->mux == NULL || (c->mode != MODE_RAW && c->mbuf == NULL))
            return -ENOMEM;
    }
    /* response key and IV: SHA-256 truncations (§6.6) */
    uint8_t rk[32], riv[32];
    unsigned l1 = 0, l2 = 0;
    if (EVP_Digest(h + 17, 16, rk, &l1, EVP_sha256(), NULL) != 1 ||
        EVP_Digest(h + 1, 16, riv, &l2, EVP_sha256(), NULL) != 1)
        return -EIO;
    rc = make_response(c, k, rk, riv, h[33]);
    if (rc == 0)
        rc = dir_init(c, k, &c->up, h + 17, h + 1, false);
    if (rc == 0)
        rc = dir_init(c, k, &c->down, rk, riv, true);
    OPENSSL_cleanse(rk, sizeof rk);
    OPENSSL_cleanse(p, c->hlen);
    return rc;
}

/* Read the size field of the next chunk (§6.5, §6.8) at @p p. @return 0, -EBADMSG, -EMSGSIZE,
 * -EPROTO, -EIO. */
static int read_size(vmess_conn *c, uint8_t *p)
{
    size_t size;
    c->pad = 0;
    if (c->authlen) {
        int rc = chunk_crypt(c->up.len, c->up.iv, &c->up.len_count, p, 2, p, false);
        if (rc != 0)
            return rc;
        size = (size_t)be16(p) + TAG;
    } else {
        if (c->padding)
            c->pad = sv_vmess_shake_next(&c->up.shake) % 64;
        uint16_t mask = c->masking ? sv_vmess_shake_next(&c->up.shake) : 0;
        size = be16(p) ^ mask;
    }
    if (size > SV_VMESS_CHUNK_MAX)
        return -EMSGSIZE;
    if (c->mode == MODE_AEAD && size < (size_t)TAG + c->pad)
        return -EPROTO;
    c->size = (uint16_t)size;
    return 0;
}

/* Body chunks from @p p + @p at while @p fx has room. Each chunk's plaintext becomes an effect,
 * or under Mux.Cool is appended to mbuf (@p to_mbuf) and one chunk at most is opened.
 * @return bytes consumed or an error. */
static ssize_t feed_chunks(vmess_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx,
                           bool to_mbuf);

static ssize_t seal_answers(vmess_conn *c, sv_effects *fx, unsigned first, ssize_t consumed);

/* The Mux.Cool decoder failed with @p rc after putting effects among fx->v[first ...]: its End
 * answers still go out sealed (as a feed split before the bad bytes sends them), never raw,
 * then the connection fails. */
static ssize_t mux_failed(vmess_conn *c, sv_effects *fx, unsigned first, int rc)
{
    ssize_t w = seal_answers(c, fx, first, 0);
    return w < 0 ? w : fail(c, fx, rc, SV_PROBE_CLOSE);
}

/* The body under Mux.Cool: decode what mbuf holds, then one more chunk at a time while the
 * effects have room. A chunk holding more frames than one call's effects leaves the rest in
 * mbuf until the client's next bytes (v2ray puts a few frames in a chunk).
 * @return bytes of @p p consumed or an error. */
static ssize_t feed_mux(vmess_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    unsigned first = fx->n;
    if (c->mode == MODE_RAW) { /* the body is the frames: decode in place */
        ssize_t r = sv_mux_feed(c->mux, p + at, n - at, fx);
        return r < 0 ? mux_failed(c, fx, first, (int)r)
                     : seal_answers(c, fx, first, (ssize_t)at + r);
    }
    if (c->moff > 0) { /* the last call's effects are applied: drop what they pointed at */
        memmove(c->mbuf, c->mbuf + c->moff, c->mlen - c->moff);
        c->mlen -= c->moff;
        c->moff = 0;
    }
    for (;;) {
        if (c->moff < c->mlen) {
            ssize_t r = sv_mux_feed(c->mux, c->mbuf + c->moff, c->mlen - c->moff, fx);
            if (r < 0)
                return mux_failed(c, fx, first, (int)r);
            c->moff += (uint32_t)r;
            if (fx->n + 3 > SV_EFFECTS_MAX)
                break;
        }
        if (c->phase != PH_BODY || c->mlen + SV_VMESS_CHUNK_MAX > MBUF_CAP)
            break;
        size_t before = at;
        uint32_t had = c->mlen;
        ssize_t r = feed_chunks(c, p, n, at, fx, true);
        if (r < 0)
            return r;
        at = (size_t)r;
        if (at == before || (c->mlen == had && c->phase != PH_BODY))
            break;
    }
    if (c->phase == PH_END && at < n)
        return fail(c, fx, -EPROTO, SV_PROBE_CLOSE);
    return seal_answers(c, fx, first, (ssize_t)at);
}

static ssize_t feed_body(vmess_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    if (c->mux != NULL)
        return feed_mux(c, p, n, at, fx);
    return feed_chunks(c, p, n, at, fx, false);
}

static ssize_t feed_chunks(vmess_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx,
                           bool to_mbuf)
{
    if (c->mode == MODE_RAW) {
        if (n > at) {
            sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
            e->data = p + at;
            e->len = n - at;
        }
        return (ssize_t)n;
    }
    size_t sb = c->authlen ? 2 + TAG : 2;
    while (fx->n < SV_EFFECTS_MAX) {
        if (c->phase == PH_END) {
            if (at < n)
                return fail(c, fx, -EPROTO, SV_PROBE_CLOSE);
            break;
        }
        if (!c->have_size) {
            if (n - at < sb)
                break;
            int rc = read_size(c, p + at);
            if (rc != 0)
                return fail(c, fx, rc, SV_PROBE_CLOSE);
            at += sb;
            c->have_size = true;
        }
        if (n - at < c->size)
            break;
        uint8_t *chunk = p + at;
        size_t plen = c->size;
        if (c->mode == MODE_AEAD) {
            plen = (size_t)c->size - c->pad - TAG;
            int rc = chunk_crypt(c->up.body, c->up.iv, &c->up.count, chunk, plen, chunk, false);
            if (rc != 0)
                return fail(c, fx, rc, SV_PROBE_CLOSE);
        }
        at += c->size;
        c->have_size = false;
        if (plen == 0) { /* end of stream; the client half-closes next */
            c->phase = PH_END;
            if (to_mbuf)
                break;
            continue;
        }
        if (to_mbuf) { /* one chunk for the Mux.Cool decoder */
            memcpy(c->mbuf + c->mlen, chunk, plen);
            c->mlen += (uint32_t)plen;
            break;
        }
        sv_effect *e = sv_effects_push(fx, c->udp ? SV_FX_DATAGRAM : SV_FX_TO_OUTBOUND);
        if (c->udp)
            e->dest = c->dest;
        e->data = chunk;
        e->len = plen;
    }
    return (ssize_t)at;
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    vmess_conn *c = state;
    const vmess_creds *k = creds;
    size_t at = 0;
    fx->n = 0;
    free(c->answers); /* the last call's effects are applied */
    c->answers = NULL;
    if (c->phase == PH_FAILED)
        return fail(c, fx, c->error, SV_PROBE_CLOSE);
    if (c->phase == PH_AUTH) {
        if (n < SV_VMESS_PREFIX)
            return 0;
        int rc = check_auth(c, k, p);
        if (rc != 0)
            return fail(c, fx, rc, SV_PROBE_DRAIN);
        at = SV_VMESS_PREFIX;
        c->phase = PH_HEADER;
    }
    if (c->phase == PH_HEADER) {
        if (n - at < (size_t)c->hlen + TAG)
            return (ssize_t)at;
        bool mux = false;
        int rc = open_header(c, k, p + at, &mux);
        if (rc != 0)
            return fail(c, fx, rc, mux ? SV_PROBE_CLOSE : SV_PROBE_DRAIN);
        at += (size_t)c->hlen + TAG;
        c->phase = PH_BODY;
        sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
        e->principal = c->user;
        e->multiplexed = c->mux != NULL;
        if (c->mux == NULL)
            sv_effects_push(fx, SV_FX_OPEN)->dest = c->dest;
    }
    return feed_body(c, p, n, at, fx);
}

/* ---------------------------------------------------------------------------------------- */
/* Downstream (§6.6)                                                                         */
/* ---------------------------------------------------------------------------------------- */

static size_t frame_max(size_t len)
{
    /* room for Mux.Cool: a Keep header, sealed as a chunk of its own, per data block */
    size_t blocks = len / SV_MUX_DATA_MAX + 1;
    size_t chunks = len / SV_VMESS_DOWN_PAYLOAD + 1 + blocks;
    return SV_VMESS_RESP_HEADER + chunks * (2 + TAG + TAG + 63) + len + blocks * SV_MUX_HEAD_LEN;
}

/* The response header, once, before anything else. @return its length written (0 or 38). */
static size_t put_response(vmess_conn *c, uint8_t *out)
{
    if (c->resp_sent)
        return 0;
    c->resp_sent = true;
    memcpy(out, c->resp, SV_VMESS_RESP_HEADER);
    return SV_VMESS_RESP_HEADER;
}

/* One downstream chunk of @p len payload bytes (0: end of stream) at @p out.
 * @return its wire length, or -EIO. */
static ssize_t seal_chunk(vmess_conn *c, const uint8_t *in, size_t len, uint8_t *out)
{
    vmess_dir *d = &c->down;
    size_t pad = c->padding ? sv_vmess_shake_next(&d->shake) % 64 : 0;
    size_t total = c->mode == MODE_AEAD ? len + TAG + pad : len;
    size_t sb = 2;
    if (c->authlen) {
        uint8_t sz[2];
        put16(sz, (uint16_t)(total - TAG));
        if (chunk_crypt(d->len, d->iv, &d->len_count, sz, 2, out, true) != 0)
            return -EIO;
        sb = 2 + TAG;
    } else {
        uint16_t mask = c->masking ? sv_vmess_shake_next(&d->shake) : 0;
        put16(out, (uint16_t)(total ^ mask));
    }
    if (c->mode != MODE_AEAD) {
        if (len > 0)
            memmove(out + sb, in, len);
        return (ssize_t)(sb + len);
    }
    if (chunk_crypt(d->body, d->iv, &d->count, in, len, out + sb, true) != 0)
        return -EIO;
    if (pad > 0 && RAND_bytes(out + sb + len + TAG, (int)pad) != 1)
        return -EIO;
    return (ssize_t)(sb + total);
}

/* @p len body bytes at @p out (chunks, or a copy without chunking). @return wire length or
 * -EIO. */
static ssize_t seal_body(vmess_conn *c, const uint8_t *in, size_t len, uint8_t *out)
{
    if (c->mode == MODE_RAW) {
        memmove(out, in, len);
        return (ssize_t)len;
    }
    size_t at = 0;
    for (size_t off = 0; off < len;) {
        size_t piece = len - off < SV_VMESS_DOWN_PAYLOAD ? len - off : SV_VMESS_DOWN_PAYLOAD;
        ssize_t w = seal_chunk(c, in + off, piece, out + at);
        if (w < 0)
            return w;
        at += (size_t)w;
        off += piece;
    }
    return (ssize_t)at;
}

/* sv_mux_answer_fn: an End answer as the downstream's next chunk, after the response header
 * when it has not gone out (the client reads it in the order of the chunks' nonces). */
static ssize_t seal_answer(void *core, const uint8_t *frame, size_t len, uint8_t *out, size_t cap)
{
    vmess_conn *c = core;
    if (cap < frame_max(len))
        return -EMSGSIZE;
    size_t head = put_response(c, out);
    ssize_t w = seal_body(c, frame, len, out + head);
    return w < 0 ? w : (ssize_t)head + w;
}

/* The Mux.Cool decoder's End answers (a Keep for a session that ended here while the client was
 * still sending, e.g. killed; a New beyond SV_MUX_SESSIONS_MAX) among fx->v[first ...], sealed
 * (sv_mux_answers_write). @return @p consumed, or an error (the connection fails). */
static ssize_t seal_answers(vmess_conn *c, sv_effects *fx, unsigned first, ssize_t consumed)
{
    int rc = sv_mux_answers_write(fx, first, frame_max(SV_MUX_END_LEN), seal_answer, c,
                                  &c->answers);
    return rc < 0 ? fail(c, fx, rc, SV_PROBE_CLOSE) : consumed;
}

static ssize_t frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap)
{
    (void)creds;
    vmess_conn *c = state;
    if (c->phase != PH_BODY && c->phase != PH_END)
        return -EINVAL;
    if (cap < frame_max(len))
        return -EMSGSIZE;
    size_t at = put_response(c, out);
    if (c->mux == NULL) {
        ssize_t w = seal_body(c, in, len, out + at);
        return w < 0 ? w : (ssize_t)at + w;
    }
    size_t off = 0;
    do { /* Keep frames of the stream (§7.3): header, then its data sealed from @p in */
        size_t k = len - off < SV_MUX_DATA_MAX ? len - off : SV_MUX_DATA_MAX;
        uint8_t head[SV_MUX_HEAD_LEN];
        ssize_t w = seal_body(c, head, sv_mux_frame_head((uint16_t)stream, k, head), out + at);
        if (w < 0)
            return w;
        at += (size_t)w;
        w = seal_body(c, in + off, k, out + at);
        if (w < 0)
            return w;
        at += (size_t)w;
        off += k;
    } while (off < len);
    return (ssize_t)at;
}

static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    vmess_conn *c = state;
    if (c->mux != NULL) { /* one Keep frame per datagram with its source (XUDP full cone) */
        if (len > SV_MUX_UDP_PAYLOAD_MAX || (c->phase != PH_BODY && c->phase != PH_END))
            return -EINVAL;
        if (cap < frame_max(len) + SV_MUX_DGRAM_HEAD_MAX)
            return -EMSGSIZE;
        size_t at = put_response(c, out);
        uint8_t head[SV_MUX_DGRAM_HEAD_MAX];
        size_t hl = sv_mux_frame_datagram_head((uint16_t)stream, from, len, head);
        ssize_t w = seal_body(c, head, hl, out + at);
        if (w < 0)
            return w;
        at += (size_t)w;
        w = seal_body(c, payload, len, out + at);
        return w < 0 ? w : (ssize_t)(at + (size_t)w);
    }
    if (!c->udp || len > SV_VMESS_UDP_PAYLOAD_MAX || len == 0)
        return -EINVAL;
    return frame(state, creds, stream, payload, len, out, cap);
}

static ssize_t frame_end(void *state, const void *creds, uint32_t stream, bool abort,
                         uint8_t *out, size_t cap)
{
    (void)creds;
    vmess_conn *c = state;
    if (c->phase != PH_BODY && c->phase != PH_END)
        return 0;
    if (cap < frame_max(0))
        return -EMSGSIZE;
    size_t at = put_response(c, out);
    if (c->mux != NULL) { /* the stream's End frame (§7.3); the decoder forgets it */
        uint8_t end[SV_MUX_END_LEN];
        sv_mux_session_gone(c->mux, (uint16_t)stream);
        ssize_t w = seal_body(c, end, sv_mux_frame_end((uint16_t)stream, abort, end), out + at);
        return w < 0 ? w : (ssize_t)at + w;
    }
    if (c->mode == MODE_RAW)
        return (ssize_t)at;
    ssize_t w = seal_chunk(c, NULL, 0, out + at);
    return w < 0 ? w : (ssize_t)at + w;
}

static const sv_proto_ext_replay vmess_replay = {.attach_replay = attach_replay};
static const sv_proto_ext_clock vmess_clock = {.set_time = set_time};
static const sv_proto_ext_datagram vmess_datagram = {.frame_datagram = frame_datagram};
static const sv_proto_ext_end vmess_end = {.frame_end = frame_end};

const sv_proto_ops sv_vmess_ops = {
    .name = "vmess",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(vmess_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_VMESS_CARRY_MAX,
    .frame = frame,
    .frame_max = frame_max,
    .ext =
        {
            [SV_PROTO_CAP_REPLAY] = &vmess_replay,
            [SV_PROTO_CAP_CLOCK] = &vmess_clock,
            [SV_PROTO_CAP_DATAGRAM] = &vmess_datagram,
            [SV_PROTO_CAP_END] = &vmess_end,
        },
};
