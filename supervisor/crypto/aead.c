/*
 * AEAD streams over OpenSSL EVP (PROTOCOLS.md §1.2, §1.3) and the Shadowsocks subkey KDF (§2.2).
 *
 * Costs: the EVP_CIPHER and EVP_KDF objects are fetched once per process. A stream holds its key,
 * not a context (1.2 KB each, two per idle connection): each thread keeps one context per
 * cipher and direction, tagged with the keying it holds; a seal/open by the stream that keyed it
 * last only resets the IV (EVP_CipherInit_ex with NULL cipher and key), another one re-keys it
 * first (once per read burst of a connection). Nothing is allocated per chunk.
 */
#include "config.h"

/* SHA1_Init/Update/Final: deprecated in OpenSSL 3 but in every distribution build; their state
 * is a plain struct, so a precomputed HMAC state is copied, not re-derived (sv_ss_kdf). */
#define OPENSSL_SUPPRESS_DEPRECATED

#include "supervisor/crypto/aead.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#define AEAD_TAG 16

static EVP_CIPHER *g_aes128, *g_aes256, *g_chacha;
static EVP_KDF *g_hkdf;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* One HKDF context per thread (freed when the thread exits), so deriving a subkey allocates
 * nothing after the first call on a thread. */
static pthread_key_t g_hkdf_key;

static void hkdf_ctx_free(void *ctx) { EVP_KDF_CTX_free(ctx); }

/* The thread's cipher contexts: one per (cipher family, direction), each with the keying it holds
 * (sv_aead.keying; 0 = none). Freed when the thread exits. */
#define AEAD_SLOTS 6
typedef struct aead_slots {
    EVP_CIPHER_CTX *ctx[AEAD_SLOTS];
    uint64_t keying[AEAD_SLOTS];
} aead_slots;
static pthread_key_t g_slots_key;
static _Atomic uint64_t g_keyings;

static void slots_free(void *p)
{
    aead_slots *s = p;
    for (size_t i = 0; i < AEAD_SLOTS; i++)
        EVP_CIPHER_CTX_free(s->ctx[i]);
    free(s);
}

/* Fetch the algorithms once; they live until exit (process-wide, read-only afterwards). */
static void aead_fetch_once(void)
{
    g_aes128 = EVP_CIPHER_fetch(NULL, "AES-128-GCM", NULL);
    g_aes256 = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    g_chacha = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    if (pthread_key_create(&g_slots_key, slots_free) != 0) {
        EVP_CIPHER_free(g_aes128);
        EVP_CIPHER_free(g_aes256);
        EVP_CIPHER_free(g_chacha);
        g_aes128 = g_aes256 = g_chacha = NULL;
    }
    g_hkdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    if (pthread_key_create(&g_hkdf_key, hkdf_ctx_free) != 0) {
        EVP_KDF_free(g_hkdf);
        g_hkdf = NULL;
    }
}

/* The EVP cipher of @p cipher and its family (0..2) in *@p family. */
static const EVP_CIPHER *aead_cipher(enum sv_ss_cipher cipher, unsigned *family)
{
    pthread_once(&g_once, aead_fetch_once);
    switch (cipher) {
    case SV_SS_AES_128_GCM:
    case SV_SS_2022_AES_128_GCM: /* a 2022 method's TCP AEAD (PROTOCOLS.md §3.1) */
        *family = 0;
        return g_aes128;
    case SV_SS_AES_256_GCM:
    case SV_SS_2022_AES_256_GCM:
        *family = 1;
        return g_aes256;
    case SV_SS_CHACHA20_POLY1305:
    case SV_SS_2022_CHACHA20_POLY1305:
        *family = 2;
        return g_chacha;
    }
    return NULL;
}

static const EVP_CIPHER *family_cipher(unsigned family)
{
    return family == 0 ? g_aes128 : family == 1 ? g_aes256 : g_chacha;
}

/* The thread's context for @p a, keyed with a's key (re-keyed when another stream used it since),
 * or NULL (out of memory, or @p a never keyed). */
static EVP_CIPHER_CTX *aead_ctx(const sv_aead *a)
{
    if (a->keying == 0 || a->slot >= AEAD_SLOTS)
        return NULL;
    aead_slots *s = pthread_getspecific(g_slots_key);
    if (s == NULL) {
        if ((s = calloc(1, sizeof *s)) == NULL)
            return NULL;
        if (pthread_setspecific(g_slots_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    EVP_CIPHER_CTX *ctx = s->ctx[a->slot];
    if (s->keying[a->slot] == a->keying)
        return ctx;
    s->keying[a->slot] = 0;
    if (ctx == NULL) {
        if ((ctx = EVP_CIPHER_CTX_new()) == NULL)
            return NULL;
        s->ctx[a->slot] = ctx;
        /* The default IV length of all three methods is the 12 bytes we use. */
        if (EVP_CipherInit_ex(ctx, family_cipher(a->slot / 2), NULL, a->key, NULL, a->encrypt) != 1)
            return NULL;
    } else if (EVP_CipherInit_ex(ctx, NULL, NULL, a->key, NULL, -1) != 1) {
        return NULL;
    }
    s->keying[a->slot] = a->keying;
    return ctx;
}

/* Take @p key (the slot's cipher length of it) under a new keying number; reset the nonce. */
static int aead_set_key(sv_aead *a, const uint8_t *key)
{
    const EVP_CIPHER *evp = a->slot < AEAD_SLOTS ? family_cipher(a->slot / 2) : NULL;
    size_t len = evp != NULL ? (size_t)EVP_CIPHER_get_key_length(evp) : 0;
    if (key == NULL || len == 0 || len > sizeof a->key)
        return -EINVAL;
    memcpy(a->key, key, len);
    memset(a->nonce, 0, sizeof a->nonce);
    a->keying = atomic_fetch_add_explicit(&g_keyings, 1, memory_order_relaxed) + 1;
    return 0;
}

int sv_aead_init(sv_aead *a, enum sv_ss_cipher cipher, const uint8_t *key, bool encrypt)
{
    unsigned family = 0;
    const EVP_CIPHER *evp = aead_cipher(cipher, &family);
    if (evp == NULL || key == NULL)
        return -EINVAL;
    a->slot = (uint8_t)(family * 2 + (encrypt ? 1 : 0));
    a->encrypt = encrypt;
    return aead_set_key(a, key);
}

int sv_aead_rekey(sv_aead *a, const uint8_t *key)
{
    if (a->keying == 0)
        return -EINVAL;
    return aead_set_key(a, key);
}

void sv_aead_deinit(sv_aead *a)
{
    OPENSSL_cleanse(a->key, sizeof a->key);
    a->keying = 0;
}

static void nonce_next(uint8_t nonce[12])
{
    for (size_t i = 0; i < 12; i++) {
        if (++nonce[i] != 0)
            break;
    }
}

int sv_aead_seal(sv_aead *a, uint8_t *p, size_t n) { return sv_aead_seal_to(a, p, n, p); }

int sv_aead_seal_to(sv_aead *a, const uint8_t *in, size_t n, uint8_t *out)
{
    int outl = 0, finl = 0;
    EVP_CIPHER_CTX *ctx = a->encrypt && n <= INT_MAX ? aead_ctx(a) : NULL;
    if (ctx == NULL)
        return -EINVAL;
    if (EVP_CipherInit_ex(ctx, NULL, NULL, NULL, a->nonce, -1) != 1)
        return -EINVAL;
    if (n > 0 && EVP_CipherUpdate(ctx, out, &outl, in, (int)n) != 1)
        return -EINVAL;
    if (EVP_CipherFinal_ex(ctx, out + outl, &finl) != 1)
        return -EINVAL;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, AEAD_TAG, out + n) != 1)
        return -EINVAL;
    nonce_next(a->nonce);
    return 0;
}

/*
 * On failure the bytes at p are put back as they were: the plaintext a wrong key produced is
 * XORed with the same keystream again (GCM and ChaCha20 are both stream modes), so a caller can
 * try the next key on the same buffer (trial decryption of UDP packets, §2.4).
 */
int sv_aead_open(sv_aead *a, uint8_t *p, size_t n)
{
    int outl = 0, finl = 0;
    EVP_CIPHER_CTX *ctx = !a->encrypt && n <= INT_MAX ? aead_ctx(a) : NULL;
    if (ctx == NULL)
        return -EINVAL;
    if (EVP_CipherInit_ex(ctx, NULL, NULL, NULL, a->nonce, -1) != 1)
        return -EINVAL;
    if (n > 0 && EVP_CipherUpdate(ctx, p, &outl, p, (int)n) != 1)
        return -EINVAL;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, AEAD_TAG, p + n) == 1 &&
        EVP_CipherFinal_ex(ctx, p + outl, &finl) == 1) {
        nonce_next(a->nonce);
        return 0;
    }
    if (n > 0 && EVP_CipherInit_ex(ctx, NULL, NULL, NULL, a->nonce, -1) == 1)
        (void)EVP_CipherUpdate(ctx, p, &outl, p, (int)n);
    return -EBADMSG;
}

int sv_aead_open_to(sv_aead *a, const uint8_t *in, size_t n, uint8_t *out)
{
    int outl = 0, finl = 0;
    EVP_CIPHER_CTX *ctx = !a->encrypt && n <= INT_MAX ? aead_ctx(a) : NULL;
    if (ctx == NULL)
        return -EINVAL;
    if (EVP_CipherInit_ex(ctx, NULL, NULL, NULL, a->nonce, -1) != 1)
        return -EINVAL;
    if (n > 0 && EVP_CipherUpdate(ctx, out, &outl, in, (int)n) != 1)
        return -EINVAL;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, AEAD_TAG, (void *)(in + n)) != 1 ||
        EVP_CipherFinal_ex(ctx, out + outl, &finl) != 1)
        return -EBADMSG;
    nonce_next(a->nonce);
    return 0;
}

/*
 * HKDF-SHA1 (RFC 5869) from OpenSSL's EVP_KDF "HKDF". The KDF is fetched once per process and its
 * context kept per thread: trial decryption runs this once per candidate user per connection.
 */
int sv_ss_subkey(const uint8_t *key, size_t len, const uint8_t *salt, uint8_t *out)
{
    static char digest[] = "SHA1";
    static char info[] = "ss-subkey";
    pthread_once(&g_once, aead_fetch_once);
    if (g_hkdf == NULL || key == NULL || salt == NULL || len == 0 || len > 64)
        return -EINVAL;
    EVP_KDF_CTX *ctx = pthread_getspecific(g_hkdf_key);
    if (ctx == NULL) {
        if ((ctx = EVP_KDF_CTX_new(g_hkdf)) == NULL)
            return -ENOMEM;
        if (pthread_setspecific(g_hkdf_key, ctx) != 0) {
            EVP_KDF_CTX_free(ctx);
            return -ENOMEM;
        }
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)key, len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, sizeof info - 1),
        OSSL_PARAM_construct_end(),
    };
    return EVP_KDF_derive(ctx, out, len, params) == 1 ? 0 : -EINVAL;
}

/*
 * HKDF-SHA1 on precomputed HMAC states (RFC 2104, RFC 5869), for trial decryption over many keys:
 * Extract = HMAC(salt, key) starts from the salt's states; Expand = HMAC(PRK, T(i-1) | info | i).
 * Every message after an HMAC pad block fits one SHA-1 block (key <= 32, digest 20, T | info | i
 * 30 bytes), so each hash is one SHA1_Transform() on a block padded here (FIPS 180-4 §5.1.1):
 * 8 compressions per 32-byte subkey, 6 per 16-byte one, and no buffering or finalisation.
 */
#define HMAC_BLOCK 64
#define SHA1_PAD_AT 56 /* the message's bit length goes in the block's last 8 bytes */

/* SHA-1 of @p st's state followed by the @p n (<= 55) bytes at @p blk[0..n), the HMAC pad block
 * being already in @p st: pads @p blk in place (64 bytes) and writes the digest to @p md. */
static void sha1_last_block(const SHA_CTX *st, uint8_t blk[HMAC_BLOCK], size_t n,
                            uint8_t md[SHA_DIGEST_LENGTH])
{
    SHA_CTX c; /* SHA1_Transform() reads and writes the chaining value h0..h4 alone */
    c.h0 = st->h0;
    c.h1 = st->h1;
    c.h2 = st->h2;
    c.h3 = st->h3;
    c.h4 = st->h4;
    uint64_t bits = htobe64((uint64_t)(HMAC_BLOCK + n) * 8);
    blk[n] = 0x80;
    memset(blk + n + 1, 0, SHA1_PAD_AT - n - 1);
    memcpy(blk + SHA1_PAD_AT, &bits, sizeof bits);
    SHA1_Transform(&c, blk);
    const uint32_t h[5] = {htobe32(c.h0), htobe32(c.h1), htobe32(c.h2), htobe32(c.h3),
                           htobe32(c.h4)};
    memcpy(md, h, sizeof h);
}

/* The SHA-1 states after HMAC's inner and outer pad blocks of @p key (@p len <= 64 bytes). */
static void hmac_states(SHA_CTX *inner, SHA_CTX *outer, const uint8_t *key, size_t len,
                        uint8_t pad[HMAC_BLOCK])
{
    memset(pad, 0x36, HMAC_BLOCK);
    for (size_t i = 0; i < len; i++)
        pad[i] ^= key[i];
    SHA1_Init(inner);
    SHA1_Transform(inner, pad);
    for (size_t i = 0; i < HMAC_BLOCK; i++)
        pad[i] ^= 0x36 ^ 0x5c;
    SHA1_Init(outer);
    SHA1_Transform(outer, pad);
}

/* HMAC of the @p n (<= 55) bytes at @p blk[0..n) (the block is clobbered) from the key's states. */
static void hmac_block(const SHA_CTX *inner, const SHA_CTX *outer, uint8_t blk[HMAC_BLOCK],
                       size_t n, uint8_t mac[SHA_DIGEST_LENGTH])
{
    sha1_last_block(inner, blk, n, mac);
    memmove(blk, mac, SHA_DIGEST_LENGTH);
    sha1_last_block(outer, blk, SHA_DIGEST_LENGTH, mac);
}

void sv_ss_kdf_init(sv_ss_kdf *k, const uint8_t *salt, size_t len)
{
    uint8_t pad[HMAC_BLOCK];
    k->len = len > SV_SS_KDF_MAX ? SV_SS_KDF_MAX : len;
    hmac_states(&k->inner, &k->outer, salt, k->len, pad);
    OPENSSL_cleanse(pad, sizeof pad);
}

void sv_ss_kdf_derive(const sv_ss_kdf *k, const uint8_t *key, uint8_t *out)
{
    static const char info[] = "ss-subkey";
    struct {
        uint8_t blk[HMAC_BLOCK], prk[SHA_DIGEST_LENGTH], t[SHA_DIGEST_LENGTH];
        SHA_CTX pi, po;
    } w; /* every secret of the derivation, cleansed once at the end */
    memcpy(w.blk, key, k->len);
    hmac_block(&k->inner, &k->outer, w.blk, k->len, w.prk);
    hmac_states(&w.pi, &w.po, w.prk, sizeof w.prk, w.blk);
    size_t have = 0, tlen = 0;
    for (uint8_t i = 1; have < k->len; i++) {
        memcpy(w.blk, w.t, tlen); /* T(i) = HMAC(PRK, T(i-1) | info | i), T(0) empty */
        memcpy(w.blk + tlen, info, sizeof info - 1);
        w.blk[tlen + sizeof info - 1] = i;
        hmac_block(&w.pi, &w.po, w.blk, tlen + sizeof info, w.t);
        tlen = SHA_DIGEST_LENGTH;
        size_t take = k->len - have < tlen ? k->len - have : tlen;
        memcpy(out + have, w.t, take);
        have += take;
    }
    OPENSSL_cleanse(&w, sizeof w);
}

/*
 * Subkeys of many master keys under one salt at once (a never-seen client's scan): the same HKDF
 * blocks as sv_ss_kdf_derive(), with one SHA-1 per vector lane (FIPS 180-4 §6.1.2) in GCC vector
 * types, compiled for AVX-512, AVX2 and the baseline and chosen at load (target_clones), so 16
 * subkeys cost about what 2 or 3 cost one by one on SHA-NI (AVX-512; AVX2: about 10).
 */
/* Fewer keys than this are derived one by one (the lanes cost the same for 1 key as for 16). */
#define KDF_LANES_MIN 4

typedef uint32_t kdf_lanes __attribute__((vector_size(SV_SS_KDF_LANES * 4)));

#define ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

/* @p h (5 words per lane) compressed with the block whose word t is @p w[t] in every lane; @p w
 * is left as it was. Inlined into each clone of its caller. */
static inline __attribute__((always_inline)) void sha1_lanes(kdf_lanes *h, kdf_lanes *wp)
{
    kdf_lanes a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], w[16];
    memcpy(w, wp, sizeof w); /* in registers, not behind a pointer */
#pragma GCC unroll 80
    for (int t = 0; t < 80; t++) {
        if (t >= 16) {
            kdf_lanes x = w[(t - 3) & 15] ^ w[(t - 8) & 15] ^ w[(t - 14) & 15] ^ w[t & 15];
            w[t & 15] = ROL(x, 1);
        }
        kdf_lanes f;
        uint32_t k;
        if (t < 20) {
            f = d ^ (b & (c ^ d));
            k = 0x5a827999;
        } else if (t < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (t < 60) {
            f = (b & c) | (d & (b | c));
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        kdf_lanes tmp = ROL(a, 5) + f + e + k + w[t & 15];
        e = d;
        d = c;
        c = ROL(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

/* The padding of a message of @p bytes (<= 55) after one pad block into @p w: 0x80 after the
 * message, zeros, the bit length. */
static inline __attribute__((always_inline)) void sha1_lanes_pad(kdf_lanes *w, size_t bytes)
{
    uint32_t end = 0x80000000u >> (8 * (bytes % 4));
    w[bytes / 4] = bytes % 4 != 0 ? w[bytes / 4] | end : (kdf_lanes){0} + end;
    for (size_t t = bytes / 4 + 1; t < 15; t++)
        w[t] = (kdf_lanes){0};
    w[15] = (kdf_lanes){0} + (uint32_t)((HMAC_BLOCK + bytes) * 8);
}

/* The HMAC of the block in @p w (message @p bytes long) under the states @p in, @p out into
 * @p mac (5 words per lane); @p w is clobbered. */
static inline __attribute__((always_inline)) void hmac_lanes(const kdf_lanes *in,
                                                             const kdf_lanes *out, kdf_lanes *w,
                                                             size_t bytes, kdf_lanes *mac)
{
    kdf_lanes h[5];
    sha1_lanes_pad(w, bytes);
    memcpy(h, in, sizeof h);
    sha1_lanes(h, w);
    memcpy(w, h, sizeof h);
    sha1_lanes_pad(w, SHA_DIGEST_LENGTH);
    memcpy(mac, out, sizeof h);
    sha1_lanes(mac, w);
}

/* The lanes pay on AVX2 (~300 ns per 32-byte subkey here) and AVX-512 (~100 ns); on 128-bit
 * vectors they cost more than one SHA-NI hash at a time (~700 against ~460 ns), so elsewhere the
 * keys are derived one by one. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KDF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
static bool kdf_lanes_pay(void)
{
    static _Atomic int wide = -1; /* every thread that asks first computes the same answer */
    int w = atomic_load_explicit(&wide, memory_order_relaxed);
    if (w < 0) {
        __builtin_cpu_init();
        w = __builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx512f");
        atomic_store_explicit(&wide, w, memory_order_relaxed);
    }
    return w == 1;
}
#endif
#endif
#ifndef KDF_CLONES
#define KDF_CLONES
static bool kdf_lanes_pay(void) { return false; }
#endif

struct kdf_lanes_work {
    kdf_lanes w[16], prk[5], pi[5], po[5], t[5], iv[5], salt_in[5], salt_out[5];
};

KDF_CLONES static void kdf_derive_lanes(const sv_ss_kdf *k, const uint8_t *const *keys,
                                        size_t count, uint8_t (*out)[SV_SS_KDF_MAX],
                                        struct kdf_lanes_work *x)
{
    static const char info[] = "ss-subkey";
    const uint32_t salt_in[5] = {k->inner.h0, k->inner.h1, k->inner.h2, k->inner.h3, k->inner.h4};
    const uint32_t salt_out[5] = {k->outer.h0, k->outer.h1, k->outer.h2, k->outer.h3, k->outer.h4};
    const uint32_t iv[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    size_t words = k->len / 4;
    for (int q = 0; q < 5; q++) {
        x->salt_in[q] = (kdf_lanes){0} + salt_in[q];
        x->salt_out[q] = (kdf_lanes){0} + salt_out[q];
        x->iv[q] = (kdf_lanes){0} + iv[q];
    }
    /* Extract: PRK = HMAC(salt, key) */
    for (size_t t = 0; t < words; t++) {
        x->w[t] = (kdf_lanes){0};
        for (size_t j = 0; j < count; j++) {
            uint32_t be;
            memcpy(&be, keys[j] + 4 * t, 4);
            x->w[t][j] = be32toh(be);
        }
    }
    hmac_lanes(x->salt_in, x->salt_out, x->w, k->len, x->prk);
    /* Expand's HMAC states under PRK */
    for (int q = 0; q < 16; q++)
        x->w[q] = (q < 5 ? x->prk[q] : (kdf_lanes){0}) ^ 0x36363636u;
    memcpy(x->pi, x->iv, sizeof x->pi);
    sha1_lanes(x->pi, x->w);
    for (int q = 0; q < 16; q++)
        x->w[q] = (q < 5 ? x->prk[q] : (kdf_lanes){0}) ^ 0x5c5c5c5cu;
    memcpy(x->po, x->iv, sizeof x->po);
    sha1_lanes(x->po, x->w);
    /* T(i) = HMAC(PRK, T(i-1) | "ss-subkey" | i) */
    size_t have = 0, tw = 0;
    for (uint32_t i = 1; have < words; i++) {
        memcpy(x->w, x->t, tw * sizeof *x->w);
        x->w[tw] = (kdf_lanes){0} + 0x73732d73u;                   /* "ss-s" */
        x->w[tw + 1] = (kdf_lanes){0} + 0x75626b65u;               /* "ubke" */
        x->w[tw + 2] = (kdf_lanes){0} + (0x79000000u | i << 16);   /* "y", i */
        hmac_lanes(x->pi, x->po, x->w, tw * 4 + sizeof info, x->t);
        tw = 5;
        size_t take = words - have < tw ? words - have : tw;
        for (size_t j = 0; j < count; j++) {
            for (size_t q = 0; q < take; q++) {
                uint32_t be = htobe32(x->t[q][j]);
                memcpy(out[j] + 4 * (have + q), &be, 4);
            }
        }
        have += take;
    }
}

void sv_ss_kdf_derive_many(const sv_ss_kdf *k, const uint8_t *const *keys, size_t count,
                           uint8_t (*out)[SV_SS_KDF_MAX])
{
    if (count > SV_SS_KDF_LANES)
        count = SV_SS_KDF_LANES;
    if (count < KDF_LANES_MIN || k->len % 4 != 0 || !kdf_lanes_pay()) {
        for (size_t j = 0; j < count; j++)
            sv_ss_kdf_derive(k, keys[j], out[j]);
        return;
    }
    struct kdf_lanes_work x;
    kdf_derive_lanes(k, keys, count, out, &x);
    explicit_bzero(&x, sizeof x); /* 3 KB: OPENSSL_cleanse stores byte by byte */
}

/*
 * The tag check of a first AEAD (all-zero nonce, no associated data) for trial decryption:
 * AES-GCM computed directly with AES-NI and PCLMULQDQ (NIST SP 800-38D §7.2:
 * H = E(K, 0^128), J0 = nonce | 1, T = E(K, J0) xor GHASH_H(C | pad | [0]64 | [len(C)]64)). An
 * EVP re-key and open costs ~650 ns, most of it provider dispatch; this ~130 ns for a short
 * chunk (the key schedule's latency, mostly). Nothing is decrypted: a match is opened again
 * with EVP (sv_aead_open), so this is a filter, never the last word.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define GCM_TARGET __attribute__((target("aes,pclmul,ssse3")))

/* One step of the AES key schedule (FIPS 197 §5.2) on the previous round key @p k and the
 * broadcast SubWord/RotWord word @p t from AESKEYGENASSIST. */
GCM_TARGET static inline __m128i aes_key_step(__m128i k, __m128i t)
{
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    return _mm_xor_si128(k, t);
}

#define AES128_ROUND(i, rcon)                                                                      \
    rk[i] = aes_key_step(rk[(i) - 1],                                                              \
                         _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[(i) - 1], rcon), 0xff))
#define AES256_EVEN(i, rcon)                                                                       \
    rk[i] = aes_key_step(rk[(i) - 2],                                                              \
                         _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[(i) - 1], rcon), 0xff))
#define AES256_ODD(i)                                                                              \
    rk[i] = aes_key_step(rk[(i) - 2],                                                              \
                         _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[(i) - 1], 0), 0xaa))

/* The round keys of a 16- or 32-byte AES key into @p rk; @return the number of rounds. */
GCM_TARGET static int aes_expand(const uint8_t *key, size_t len, __m128i rk[15])
{
    rk[0] = _mm_loadu_si128((const __m128i *)key);
    if (len == 16) {
        AES128_ROUND(1, 0x01);
        AES128_ROUND(2, 0x02);
        AES128_ROUND(3, 0x04);
        AES128_ROUND(4, 0x08);
        AES128_ROUND(5, 0x10);
        AES128_ROUND(6, 0x20);
        AES128_ROUND(7, 0x40);
        AES128_ROUND(8, 0x80);
        AES128_ROUND(9, 0x1b);
        AES128_ROUND(10, 0x36);
        return 10;
    }
    rk[1] = _mm_loadu_si128((const __m128i *)(key + 16));
    AES256_EVEN(2, 0x01);
    AES256_ODD(3);
    AES256_EVEN(4, 0x02);
    AES256_ODD(5);
    AES256_EVEN(6, 0x04);
    AES256_ODD(7);
    AES256_EVEN(8, 0x08);
    AES256_ODD(9);
    AES256_EVEN(10, 0x10);
    AES256_ODD(11);
    AES256_EVEN(12, 0x20);
    AES256_ODD(13);
    AES256_EVEN(14, 0x40);
    return 14;
}

/*
 * a * b in GF(2^128) as GCM defines it, both operands and the product byte-reversed (so GCM's
 * reflected bit order becomes a left shift by one after the carry-less product): gf_mul_wide()
 * is the schoolbook carry-less product of the 64-bit halves into hi:lo, gf_reduce() the shift and
 * the reduction modulo x^128 + x^7 + x^2 + x + 1 (Gueron and Kounavis, "Intel Carry-Less
 * Multiplication Instruction and its Usage for Computing the GCM Mode", algorithms 1 and 5).
 * Both steps are linear, so several wide products are summed before one reduction.
 */
GCM_TARGET static inline void gf_mul_wide(__m128i a, __m128i b, __m128i *lo, __m128i *hi)
{
    __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
    *lo = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x00), _mm_slli_si128(mid, 8));
    *hi = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x11), _mm_srli_si128(mid, 8));
}

/* The 256-bit carry-less product hi:lo of gf_mul_wide() (or a xor of several) reduced to a
 * field element. */
GCM_TARGET static inline __m128i gf_reduce(__m128i lo, __m128i hi)
{
    /* the product shifted left by one bit (the reflected bit order) */
    __m128i lo_carry = _mm_srli_epi32(lo, 31), hi_carry = _mm_srli_epi32(hi, 31);
    lo = _mm_or_si128(_mm_slli_epi32(lo, 1), _mm_slli_si128(lo_carry, 4));
    hi = _mm_or_si128(_mm_or_si128(_mm_slli_epi32(hi, 1), _mm_slli_si128(hi_carry, 4)),
                      _mm_srli_si128(lo_carry, 12));
    /* fold lo into hi with the polynomial's x^7 + x^2 + x + 1 (bit-reflected) */
    __m128i t = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)),
                              _mm_slli_epi32(lo, 25));
    __m128i t_hi = _mm_srli_si128(t, 4);
    lo = _mm_xor_si128(lo, _mm_slli_si128(t, 12));
    __m128i u = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)),
                              _mm_srli_epi32(lo, 7));
    u = _mm_xor_si128(u, t_hi);
    return _mm_xor_si128(hi, _mm_xor_si128(lo, u));
}

GCM_TARGET static inline __m128i gf_mul(__m128i a, __m128i b)
{
    __m128i lo, hi;
    gf_mul_wide(a, b, &lo, &hi);
    return gf_reduce(lo, hi);
}

/* Block @p i of @p ct byte-reversed. */
GCM_TARGET static inline __m128i ghash_load(const uint8_t *ct, size_t i, __m128i swap)
{
    return _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(ct + i)), swap);
}

/* 1 when @p tag is AES-GCM's tag of @p n bytes at @p ct under @p key (@p len 16 or 32 bytes) and
 * the all-zero nonce, else 0. */
GCM_TARGET static int gcm_check_zero_nonce(const uint8_t *key, size_t len, const uint8_t *ct,
                                           size_t n, const uint8_t *tag)
{
    const __m128i swap = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m128i rk[15];
    int rounds = aes_expand(key, len, rk);
    __m128i h = _mm_xor_si128(_mm_setzero_si128(), rk[0]);
    __m128i j0 = _mm_xor_si128(_mm_set_epi32(0x01000000, 0, 0, 0), rk[0]); /* nonce 0 | BE32 1 */
    for (int r = 1; r < rounds; r++) {
        h = _mm_aesenc_si128(h, rk[r]);
        j0 = _mm_aesenc_si128(j0, rk[r]);
    }
    h = _mm_shuffle_epi8(_mm_aesenclast_si128(h, rk[rounds]), swap);
    j0 = _mm_aesenclast_si128(j0, rk[rounds]);
    __m128i x = _mm_setzero_si128();
    size_t i = 0;
    if (n >= 64) { /* 4 blocks per reduction: X' = (X + B0) H^4 + B1 H^3 + B2 H^2 + B3 H */
        __m128i h2 = gf_mul(h, h), h3 = gf_mul(h2, h), h4 = gf_mul(h2, h2);
        for (; i + 64 <= n; i += 64) {
            __m128i lo, hi, l, u;
            gf_mul_wide(_mm_xor_si128(x, ghash_load(ct, i, swap)), h4, &lo, &hi);
            gf_mul_wide(ghash_load(ct, i + 16, swap), h3, &l, &u);
            lo = _mm_xor_si128(lo, l), hi = _mm_xor_si128(hi, u);
            gf_mul_wide(ghash_load(ct, i + 32, swap), h2, &l, &u);
            lo = _mm_xor_si128(lo, l), hi = _mm_xor_si128(hi, u);
            gf_mul_wide(ghash_load(ct, i + 48, swap), h, &l, &u);
            x = gf_reduce(_mm_xor_si128(lo, l), _mm_xor_si128(hi, u));
        }
    }
    for (; i + 16 <= n; i += 16)
        x = gf_mul(_mm_xor_si128(x, ghash_load(ct, i, swap)), h);
    if (i < n) {
        uint8_t last[16] = {0};
        memcpy(last, ct + i, n - i);
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)last), swap)),
                   h);
    }
    /* the lengths block [0]64 | [8n]64, byte-reversed: 8n in the low half */
    x = gf_mul(_mm_xor_si128(x, _mm_set_epi64x(0, (long long)(n * 8))), h);
    __m128i want = _mm_xor_si128(_mm_shuffle_epi8(x, swap), j0);
    __m128i eq = _mm_cmpeq_epi8(want, _mm_loadu_si128((const __m128i *)tag));
    for (int r = 0; r <= rounds; r++) /* the subkey's schedule is a secret */
        rk[r] = _mm_setzero_si128();
    __asm__ volatile("" : : "m"(rk) : "memory");
    return _mm_movemask_epi8(eq) == 0xFFFF;
}

static bool gcm_fast(void)
{
    static _Atomic int have = -1; /* every thread that asks first computes the same answer */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
            __builtin_cpu_supports("ssse3");
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h == 1;
}
#endif

/*
 * The same for ChaCha20-Poly1305 (RFC 8439 §2.8), in portable C: the one-time Poly1305 key is
 * ChaCha20 block 0 under the key and the zero nonce (§2.6); the tag is Poly1305 (§2.5) of the
 * ciphertext padded to 16 bytes and the lengths block [0]64 | [n]64 little-endian. 26-bit limbs
 * ("poly1305-donna" layout). About a quarter of an EVP re-key and open for a short chunk.
 */
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                                (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

#define CHACHA_QR(a, b, c, d)                                                                      \
    do {                                                                                           \
        a += b, d ^= a, d = d << 16 | d >> 16;                                                     \
        c += d, b ^= c, b = b << 12 | b >> 20;                                                     \
        a += b, d ^= a, d = d << 8 | d >> 24;                                                      \
        c += d, b ^= c, b = b << 7 | b >> 25;                                                      \
    } while (0)

void sv_chacha20_rounds(uint32_t s[16])
{
    for (int r = 0; r < 10; r++) {
        CHACHA_QR(s[0], s[4], s[8], s[12]);
        CHACHA_QR(s[1], s[5], s[9], s[13]);
        CHACHA_QR(s[2], s[6], s[10], s[14]);
        CHACHA_QR(s[3], s[7], s[11], s[15]);
        CHACHA_QR(s[0], s[5], s[10], s[15]);
        CHACHA_QR(s[1], s[6], s[11], s[12]);
        CHACHA_QR(s[2], s[7], s[8], s[13]);
        CHACHA_QR(s[3], s[4], s[9], s[14]);
    }
}

/* The state of RFC 8439 §2.3 before the rounds: the constants, @p key, counter and nonce zero. */
static void chacha_state(const uint8_t key[32], uint32_t s[16])
{
    static const uint32_t sigma[4] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};
    memcpy(s, sigma, sizeof sigma);
    for (int i = 0; i < 8; i++)
        s[4 + i] = le32(key + 4 * i);
    memset(s + 12, 0, 4 * sizeof *s);
}

void sv_hchacha20(const uint8_t key[32], const uint8_t nonce16[16], uint8_t out[32])
{
    uint32_t s[16];
    chacha_state(key, s);
    for (int i = 0; i < 4; i++)
        s[12 + i] = le32(nonce16 + 4 * i);
    sv_chacha20_rounds(s);
    static const int pick[8] = {0, 1, 2, 3, 12, 13, 14, 15};
    for (int i = 0; i < 8; i++) {
        uint32_t v = s[pick[i]];
        out[4 * i] = (uint8_t)v;
        out[4 * i + 1] = (uint8_t)(v >> 8);
        out[4 * i + 2] = (uint8_t)(v >> 16);
        out[4 * i + 3] = (uint8_t)(v >> 24);
    }
    OPENSSL_cleanse(s, sizeof s);
}

/* ChaCha20 block 0 under @p key and the all-zero nonce, its first 32 bytes as 8 words. */
static void chacha_block0(const uint8_t key[32], uint32_t out[8])
{
    uint32_t x[16], in[16];
    chacha_state(key, in);
    memcpy(x, in, sizeof x);
    sv_chacha20_rounds(x);
    for (int i = 0; i < 8; i++)
        out[i] = x[i] + in[i];
    OPENSSL_cleanse(x, sizeof x);
    OPENSSL_cleanse(in, sizeof in);
}

typedef struct poly1305 {
    uint32_t r[5], s4[4], h[5]; /* s4[i] = r[i + 1] * 5 */
} poly1305;

static void poly_block(poly1305 *p, const uint8_t m[16])
{
    const uint32_t mask = 0x3ffffff, *r = p->r, *s = p->s4;
    uint32_t *h = p->h;
    h[0] += le32(m) & mask;
    h[1] += (le32(m + 3) >> 2) & mask;
    h[2] += (le32(m + 6) >> 4) & mask;
    h[3] += (le32(m + 9) >> 6) & mask;
    h[4] += (le32(m + 12) >> 8) | 1u << 24; /* every block is whole: the 2^128 bit */
    uint64_t d0 = (uint64_t)h[0] * r[0] + (uint64_t)h[1] * s[3] + (uint64_t)h[2] * s[2] +
                  (uint64_t)h[3] * s[1] + (uint64_t)h[4] * s[0];
    uint64_t d1 = (uint64_t)h[0] * r[1] + (uint64_t)h[1] * r[0] + (uint64_t)h[2] * s[3] +
                  (uint64_t)h[3] * s[2] + (uint64_t)h[4] * s[1];
    uint64_t d2 = (uint64_t)h[0] * r[2] + (uint64_t)h[1] * r[1] + (uint64_t)h[2] * r[0] +
                  (uint64_t)h[3] * s[3] + (uint64_t)h[4] * s[2];
    uint64_t d3 = (uint64_t)h[0] * r[3] + (uint64_t)h[1] * r[2] + (uint64_t)h[2] * r[1] +
                  (uint64_t)h[3] * r[0] + (uint64_t)h[4] * s[3];
    uint64_t d4 = (uint64_t)h[0] * r[4] + (uint64_t)h[1] * r[3] + (uint64_t)h[2] * r[2] +
                  (uint64_t)h[3] * r[1] + (uint64_t)h[4] * r[0];
    d1 += d0 >> 26;
    d2 += d1 >> 26;
    d3 += d2 >> 26;
    d4 += d3 >> 26;
    h[0] = (uint32_t)d0 & mask;
    h[1] = (uint32_t)d1 & mask;
    h[2] = (uint32_t)d2 & mask;
    h[3] = (uint32_t)d3 & mask;
    h[4] = (uint32_t)d4 & mask;
    h[0] += (uint32_t)(d4 >> 26) * 5;
    h[1] += h[0] >> 26;
    h[0] &= mask;
}

/* 1 when @p tag is ChaCha20-Poly1305's tag of @p n bytes at @p ct under @p key and nonce 0. */
static int chacha_check_zero_nonce(const uint8_t key[32], const uint8_t *ct, size_t n,
                                   const uint8_t *tag)
{
    const uint32_t mask = 0x3ffffff;
    uint32_t otk[8];
    chacha_block0(key, otk);
    poly1305 p = {{0}, {0}, {0}};
    /* r clamped (§2.5.1), split into 26-bit limbs */
    uint32_t t0 = otk[0] & 0x0fffffff, t1 = otk[1] & 0x0ffffffc, t2 = otk[2] & 0x0ffffffc,
             t3 = otk[3] & 0x0ffffffc;
    p.r[0] = t0 & mask;
    p.r[1] = (t0 >> 26 | t1 << 6) & mask;
    p.r[2] = (t1 >> 20 | t2 << 12) & mask;
    p.r[3] = (t2 >> 14 | t3 << 18) & mask;
    p.r[4] = t3 >> 8;
    for (int i = 0; i < 4; i++)
        p.s4[i] = p.r[i + 1] * 5;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        poly_block(&p, ct + i);
    uint8_t blk[16] = {0};
    if (i < n) {
        memcpy(blk, ct + i, n - i);
        poly_block(&p, blk);
    }
    uint64_t bits = htole64((uint64_t)n);
    memset(blk, 0, 8);
    memcpy(blk + 8, &bits, 8);
    poly_block(&p, blk);
    /* full carry, then h mod 2^130 - 5 by a constant-time select of h or h - p */
    uint32_t *h = p.h, g[5], c;
    c = h[1] >> 26, h[1] &= mask, h[2] += c;
    c = h[2] >> 26, h[2] &= mask, h[3] += c;
    c = h[3] >> 26, h[3] &= mask, h[4] += c;
    c = h[4] >> 26, h[4] &= mask, h[0] += c * 5;
    c = h[0] >> 26, h[0] &= mask, h[1] += c;
    g[0] = h[0] + 5, c = g[0] >> 26, g[0] &= mask;
    g[1] = h[1] + c, c = g[1] >> 26, g[1] &= mask;
    g[2] = h[2] + c, c = g[2] >> 26, g[2] &= mask;
    g[3] = h[3] + c, c = g[3] >> 26, g[3] &= mask;
    g[4] = h[4] + c - (1u << 26);
    uint32_t use_g = (g[4] >> 31) - 1; /* all ones when h >= p */
    for (int k = 0; k < 5; k++)
        h[k] = (h[k] & ~use_g) | (g[k] & use_g);
    /* h mod 2^128, plus s (the block's second 16 bytes), as 4 little-endian words */
    uint32_t w[4] = {h[0] | h[1] << 26, h[1] >> 6 | h[2] << 20, h[2] >> 12 | h[3] << 14,
                     h[3] >> 18 | h[4] << 8};
    uint64_t f = 0;
    uint32_t diff = 0;
    for (int k = 0; k < 4; k++) {
        f += (uint64_t)w[k] + otk[4 + k];
        diff |= (uint32_t)f ^ le32(tag + 4 * k);
        f >>= 32;
    }
    OPENSSL_cleanse(otk, sizeof otk);
    OPENSSL_cleanse(&p, sizeof p);
    return diff == 0;
}

int sv_aead_check_first(enum sv_ss_cipher cipher, const uint8_t *key, const uint8_t *ct, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (key == NULL || (ct == NULL && n > 0))
        return -EINVAL;
    size_t len = cipher == SV_SS_AES_128_GCM || cipher == SV_SS_2022_AES_128_GCM   ? 16
                 : cipher == SV_SS_AES_256_GCM || cipher == SV_SS_2022_AES_256_GCM ? 32
                                                                                   : 0;
    if (len != 0 && gcm_fast())
        return gcm_check_zero_nonce(key, len, ct, n, ct + n);
#endif
    if (key == NULL || (ct == NULL && n > 0))
        return -EINVAL;
    if (cipher == SV_SS_CHACHA20_POLY1305 || cipher == SV_SS_2022_CHACHA20_POLY1305)
        return chacha_check_zero_nonce(key, ct, n, ct + n);
    return -ENOTSUP;
}
