/* AEAD with a little-endian 12-byte nonce counter, over OpenSSL EVP (PROTOCOLS.md §1.2, §1.3). */
#ifndef SV_CRYPTO_AEAD_H
#define SV_CRYPTO_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "supervisor/supervisor.h"

/**
 * One direction of an AEAD stream: its key and nonce counter. No cipher context of its own (issue
 * 13: an OpenSSL GCM context is 1.2 KB, two per connection, idle or not): each thread keeps one
 * context per cipher and direction, re-keyed only when another sv_aead used it since (once per
 * read burst of a connection at most).
 */
typedef struct sv_aead {
    uint64_t keying;     /**< this keying's process-unique number; 0 until sv_aead_init() */
    uint8_t key[32];     /**< the key (the cipher's length of it) */
    uint8_t nonce[12];   /**< little-endian counter, +1 after every seal/open */
    uint8_t slot;        /**< which of the thread's contexts: cipher family * 2 + encrypt */
    bool encrypt;
} sv_aead;

/**
 * Key @p a for @p cipher with @p key (key_len bytes) for sealing (encrypt) or opening.
 * Allocates nothing (the thread's context for the cipher and direction is keyed at the next
 * seal or open). Resets the nonce to zero.
 * @return 0, or -EINVAL for an unknown cipher or a NULL key.
 */
int sv_aead_init(sv_aead *a, enum sv_ss_cipher cipher, const uint8_t *key, bool encrypt);

/** Forget the key (cleansed). Idempotent. */
void sv_aead_deinit(sv_aead *a);

/**
 * Change the key of @p a, keyed before by sv_aead_init() for the same cipher and direction, and
 * reset its nonce, for trial decryption over many keys; the next open keys the
 * thread's context once. @return 0, or -EINVAL when @p a was never keyed.
 */
int sv_aead_rekey(sv_aead *a, const uint8_t *key);

/**
 * Open @p n ciphertext bytes at @p in (tag at in + n) into @p out (n bytes), not in place, so a
 * failure leaves @p in as it was at no cost: trial decryption of a short chunk.
 * Advances the nonce only on success. @return 0, or -EBADMSG (@p out then holds garbage).
 */
int sv_aead_open_to(sv_aead *a, const uint8_t *in, size_t n, uint8_t *out);

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
 * Whether the 16-byte tag at @p ct + @p n authenticates the @p n ciphertext bytes at @p ct under
 * @p cipher's @p key, the all-zero nonce and no associated data: a stream's first chunk or a
 * datagram (PROTOCOLS.md §2.3, §2.4). Computes the tag only, decrypts nothing, allocates
 * nothing: a filter for trial decryption over many keys, about a tenth of an EVP
 * re-key and open for AES-GCM on a CPU with AES-NI and PCLMULQDQ. A match is still to be opened
 * with sv_aead_open() or sv_aead_open_to().
 * @return 1 authentic, 0 not; -ENOTSUP when this CPU or cipher has no such check (open with EVP
 *         instead); -EINVAL for a NULL key or ciphertext.
 */
int sv_aead_check_first(enum sv_ss_cipher cipher, const uint8_t *key, const uint8_t *ct, size_t n);

/**
 * HKDF-SHA1(ikm = key, salt, info = "ss-subkey") → @p out of @p len bytes (PROTOCOLS.md §2.2).
 * @return 0 or -EINVAL.
 */
int sv_ss_subkey(const uint8_t *key, size_t len, const uint8_t *salt, uint8_t *out);

/**
 * What HKDF-SHA1 (PROTOCOLS.md §2.2) computes from the salt alone: HKDF-Extract is HMAC keyed
 * with the salt, so its inner and outer SHA1 states after the padded salt block are the same for
 * every candidate key of a trial decryption (computed once per connection or datagram,
 * not once per user). Plain data: copy or discard freely; holds no secret of a user.
 */
typedef struct sv_ss_kdf {
    SHA_CTX inner, outer;
    size_t len; /**< salt = subkey length, 16 or 32 */
} sv_ss_kdf;

/** Longest salt (= key = subkey) sv_ss_kdf serves: the methods' 16 and 32. */
#define SV_SS_KDF_MAX 32

/** Prepare @p k for the @p len-byte (1..SV_SS_KDF_MAX; more is cut) @p salt. Allocates nothing,
 * cannot fail. */
void sv_ss_kdf_init(sv_ss_kdf *k, const uint8_t *salt, size_t len);

/**
 * The subkey of master @p key (k->len bytes) under @p k's salt into @p out (k->len bytes): the
 * same bytes as sv_ss_subkey(key, k->len, salt, out), at about a twelfth of its cost: 8 SHA-1
 * compressions for a 32-byte subkey, 6 for a 16-byte one (the salt's 2 are in @p k), no KDF
 * dispatch. Allocates nothing, cannot fail.
 */
void sv_ss_kdf_derive(const sv_ss_kdf *k, const uint8_t *key, uint8_t *out);

/** Most subkeys sv_ss_kdf_derive_many() derives in one call (its vector lanes). */
#define SV_SS_KDF_LANES 16

/**
 * The subkeys of the @p count master keys @p keys[0..count) (each k->len bytes; count at most
 * SV_SS_KDF_LANES, more are ignored) under @p k's salt into @p out[0..count): the same bytes as
 * sv_ss_kdf_derive() on each, one SHA-1 per vector lane (AVX-512 or AVX2, chosen at load), for
 * trial decryption over many keys. Below a few keys, or without those vectors, it
 * derives them one by one (cheaper then). Allocates nothing, cannot fail.
 */
void sv_ss_kdf_derive_many(const sv_ss_kdf *k, const uint8_t *const *keys, size_t count,
                           uint8_t (*out)[SV_SS_KDF_MAX]);

/**
 * The ChaCha20 block function's 20 rounds (10 double rounds: column then diagonal quarter rounds,
 * RFC 8439 §2.3) on the 16-word state @p s, in place, without adding the input back: the block
 * function is this plus that addition, HChaCha20 this alone. Cannot fail.
 */
void sv_chacha20_rounds(uint32_t s[16]);

/**
 * HChaCha20 (draft-irtf-cfrg-xchacha-03 §2.2): the 32-byte subkey @p out of XChaCha20 from the
 * 32-byte @p key and the first 16 bytes @p nonce16 of its 24-byte nonce (state words 0-3 and
 * 12-15 after sv_chacha20_rounds(), little-endian). Shadowsocks 2022's UDP XChaCha20-Poly1305
 * (PROTOCOLS.md §1.2). Allocates nothing, cannot fail.
 */
void sv_hchacha20(const uint8_t key[32], const uint8_t nonce16[16], uint8_t out[32]);

#endif
