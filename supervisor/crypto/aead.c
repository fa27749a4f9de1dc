/*
 * AEAD streams over OpenSSL EVP (PROTOCOLS.md §1.2, §1.3) and the Shadowsocks subkey KDF (§2.2).
 *
 * Costs: the EVP_CIPHER and EVP_MD objects are fetched once per process; a context is keyed once
 * per direction; each seal/open only resets the IV (EVP_CipherInit_ex with NULL cipher and key),
 * so nothing is allocated per chunk.
 */
#include "config.h"

#include "supervisor/crypto/aead.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>

#define AEAD_TAG 16

static EVP_CIPHER *g_aes128, *g_aes256, *g_chacha;
static EVP_MD *g_sha1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Fetch the algorithms once; they live until exit (process-wide, read-only afterwards). */
static void aead_fetch_once(void)
{
    g_aes128 = EVP_CIPHER_fetch(NULL, "AES-128-GCM", NULL);
    g_aes256 = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    g_chacha = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    g_sha1 = EVP_MD_fetch(NULL, "SHA1", NULL);
}

static const EVP_CIPHER *aead_cipher(enum sv_ss_cipher cipher)
{
    pthread_once(&g_once, aead_fetch_once);
    switch (cipher) {
    case SV_SS_AES_128_GCM:
        return g_aes128;
    case SV_SS_AES_256_GCM:
        return g_aes256;
    case SV_SS_CHACHA20_POLY1305:
        return g_chacha;
    }
    return NULL;
}

int sv_aead_init(sv_aead *a, enum sv_ss_cipher cipher, const uint8_t *key, bool encrypt)
{
    const EVP_CIPHER *evp = aead_cipher(cipher);
    if (evp == NULL || key == NULL)
        return -EINVAL;
    if (a->ctx == NULL) {
        a->ctx = EVP_CIPHER_CTX_new();
        if (a->ctx == NULL)
            return -ENOMEM;
    }
    memset(a->nonce, 0, sizeof a->nonce);
    a->encrypt = encrypt;
    /* The default IV length of all three methods is the 12 bytes we use. */
    if (EVP_CipherInit_ex(a->ctx, evp, NULL, key, NULL, encrypt ? 1 : 0) != 1)
        return -EINVAL;
    return 0;
}

void sv_aead_deinit(sv_aead *a)
{
    EVP_CIPHER_CTX_free(a->ctx);
    a->ctx = NULL;
}

static void nonce_next(uint8_t nonce[12])
{
    for (size_t i = 0; i < 12; i++) {
        if (++nonce[i] != 0)
            break;
    }
}

int sv_aead_seal(sv_aead *a, uint8_t *p, size_t n)
{
    int outl = 0, finl = 0;
    if (a->ctx == NULL || !a->encrypt || n > INT_MAX)
        return -EINVAL;
    if (EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, a->nonce, -1) != 1)
        return -EINVAL;
    if (n > 0 && EVP_CipherUpdate(a->ctx, p, &outl, p, (int)n) != 1)
        return -EINVAL;
    if (EVP_CipherFinal_ex(a->ctx, p + outl, &finl) != 1)
        return -EINVAL;
    if (EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_GET_TAG, AEAD_TAG, p + n) != 1)
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
    if (a->ctx == NULL || a->encrypt || n > INT_MAX)
        return -EINVAL;
    if (EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, a->nonce, -1) != 1)
        return -EINVAL;
    if (n > 0 && EVP_CipherUpdate(a->ctx, p, &outl, p, (int)n) != 1)
        return -EINVAL;
    if (EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_AEAD_SET_TAG, AEAD_TAG, p + n) == 1 &&
        EVP_CipherFinal_ex(a->ctx, p + outl, &finl) == 1) {
        nonce_next(a->nonce);
        return 0;
    }
    if (n > 0 && EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, a->nonce, -1) == 1)
        (void)EVP_CipherUpdate(a->ctx, p, &outl, p, (int)n);
    return -EBADMSG;
}

/* HMAC-SHA1 (RFC 2104) of a ‖ b ‖ c under @p key (at most one 64-byte block). */
static int hmac_sha1(EVP_MD_CTX *md, const uint8_t *key, size_t klen, const void *a, size_t na,
                     const void *b, size_t nb, const void *c, size_t nc, uint8_t out[20])
{
    uint8_t pad[64], inner[20];
    unsigned l = 0;
    memset(pad, 0x36, sizeof pad);
    for (size_t i = 0; i < klen; i++)
        pad[i] ^= key[i];
    int ok = EVP_DigestInit_ex(md, g_sha1, NULL) == 1 && EVP_DigestUpdate(md, pad, 64) == 1 &&
             EVP_DigestUpdate(md, a, na) == 1 && EVP_DigestUpdate(md, b, nb) == 1 &&
             EVP_DigestUpdate(md, c, nc) == 1 && EVP_DigestFinal_ex(md, inner, &l) == 1;
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] ^= 0x36 ^ 0x5c;
    ok = ok && EVP_DigestInit_ex(md, g_sha1, NULL) == 1 && EVP_DigestUpdate(md, pad, 64) == 1 &&
         EVP_DigestUpdate(md, inner, sizeof inner) == 1 && EVP_DigestFinal_ex(md, out, &l) == 1;
    OPENSSL_cleanse(pad, sizeof pad);
    return ok ? 0 : -EINVAL;
}

/*
 * HKDF-SHA1 (RFC 5869) written over OpenSSL's SHA-1 rather than EVP_KDF "HKDF": the EVP_KDF path
 * costs about 3 us per call (context and parameter handling), this one about 1 us, and trial
 * decryption runs it once per candidate user per connection. The unit test checks it against
 * EVP_KDF "HKDF" as well as against the captured vectors.
 */
int sv_ss_subkey(const uint8_t *key, size_t len, const uint8_t *salt, uint8_t *out)
{
    static const char info[] = "ss-subkey";
    pthread_once(&g_once, aead_fetch_once);
    if (g_sha1 == NULL || key == NULL || salt == NULL || len == 0 || len > 64)
        return -EINVAL;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL)
        return -ENOMEM;
    uint8_t prk[20], t[20];
    size_t tl = 0, got = 0;
    int rc = hmac_sha1(md, salt, len, key, len, NULL, 0, NULL, 0, prk); /* extract */
    for (uint8_t i = 1; rc == 0 && got < len; i++) {                       /* expand */
        rc = hmac_sha1(md, prk, sizeof prk, t, tl, info, sizeof info - 1, &i, 1, t);
        tl = sizeof t;
        size_t take = len - got < tl ? len - got : tl;
        memcpy(out + got, t, take);
        got += take;
    }
    EVP_MD_CTX_free(md);
    OPENSSL_cleanse(prk, sizeof prk);
    OPENSSL_cleanse(t, sizeof t);
    return rc;
}
