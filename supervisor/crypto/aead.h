/* AEAD with a little-endian 12-byte nonce counter, over OpenSSL EVP (PROTOCOLS.md §1.2, §1.3). */
#ifndef SV_CRYPTO_AEAD_H
#define SV_CRYPTO_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "supervisor/supervisor.h"

/** One direction of an AEAD stream: a cipher context keyed once, and its nonce counter. */
typedef struct sv_aead {
    EVP_CIPHER_CTX *ctx; /**< NULL until sv_aead_init() */
    uint8_t nonce[12];   /**< little-endian counter, +1 after every seal/open */
    bool encrypt;
} sv_aead;

/**
 * Key @p a for @p cipher with @p key (key_len bytes) for sealing (encrypt) or opening.
 * Reuses the context when already allocated. Resets the nonce to zero.
 * @return 0, -ENOMEM or -EINVAL.
 */
int sv_aead_init(sv_aead *a, enum sv_ss_cipher cipher, const uint8_t *key, bool encrypt);

/** Free the context. Idempotent. */
void sv_aead_deinit(sv_aead *a);

/**
 * Seal @p n bytes in place at @p p and write the 16-byte tag at p + n; advance the nonce.
 * @return 0 or -EINVAL.
 */
int sv_aead_seal(sv_aead *a, uint8_t *p, size_t n);

/**
 * Seal @p n bytes from @p in into @p out (n bytes, then the 16-byte tag); in and out may be the
 * same buffer but must not otherwise overlap. Advances the nonce. @return 0 or -EINVAL.
 */
int sv_aead_seal_to(sv_aead *a, const uint8_t *in, size_t n, uint8_t *out);

/**
 * Open @p n ciphertext bytes in place at @p p followed by their tag at p + n; advance the nonce
 * only on success. On failure the n bytes are restored to the ciphertext, so another key can be
 * tried on the same buffer. @return 0, or -EBADMSG when authentication fails.
 */
int sv_aead_open(sv_aead *a, uint8_t *p, size_t n);

/**
 * HKDF-SHA1(ikm = key, salt, info = "ss-subkey") → @p out of @p len bytes (PROTOCOLS.md §2.2).
 * @return 0 or -EINVAL.
 */
int sv_ss_subkey(const uint8_t *key, size_t len, const uint8_t *salt, uint8_t *out);

#endif
