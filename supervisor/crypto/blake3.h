/*
 * BLAKE3 (the BLAKE3 specification, 2020-01-09), portable C, one thread: the hash, keyed_hash
 * and derive_key modes with extendable output. Written for Shadowsocks 2022 (PROTOCOLS.md §3.1:
 * session and identity subkeys, the EIH user hash); checked on the official test vectors
 * (tests/unit/vectors/blake3.json).
 */
#ifndef SV_CRYPTO_BLAKE3_H
#define SV_CRYPTO_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#define SV_BLAKE3_KEY_LEN 32
#define SV_BLAKE3_OUT_LEN 32   /**< default output length */
#define SV_BLAKE3_BLOCK_LEN 64
#define SV_BLAKE3_CHUNK_LEN 1024
#define SV_BLAKE3_STACK_MAX 54 /**< chaining values on the merge stack: 2^54 chunks = 2^64 bytes */

/** An incremental hasher. Plain data: copy it to fork a state. */
typedef struct sv_blake3 {
    uint32_t key[8];          /**< IV, the key, or the derived context key */
    uint32_t flags;           /**< mode flags added to every compression */
    uint32_t cv[8];           /**< chaining value of the current chunk so far */
    uint64_t chunk_counter;   /**< index of the current chunk */
    uint8_t block[SV_BLAKE3_BLOCK_LEN];
    uint8_t block_len;        /**< bytes buffered in block */
    uint8_t blocks_done;      /**< blocks of the current chunk already compressed */
    uint8_t stack_len;
    uint32_t stack[SV_BLAKE3_STACK_MAX][8]; /**< chaining values of completed subtrees */
} sv_blake3;

/** Start a plain hash (spec mode "hash"). */
void sv_blake3_init(sv_blake3 *h);
/** Start a keyed hash with the 32-byte @p key (mode "keyed_hash"). */
void sv_blake3_init_keyed(sv_blake3 *h, const uint8_t key[SV_BLAKE3_KEY_LEN]);
/**
 * Start derive_key with the context string @p context (NUL-terminated; hardcoded and globally
 * unique, e.g. "shadowsocks 2022 session subkey"); then feed the key material.
 */
void sv_blake3_init_derive_key(sv_blake3 *h, const char *context);
/** Absorb @p n bytes of @p in. */
void sv_blake3_update(sv_blake3 *h, const void *in, size_t n);
/**
 * Write @p n output bytes (any length: the output is extendable) to @p out. Does not change the
 * state: more input may follow, and finalizing again gives the same prefix.
 */
void sv_blake3_final(const sv_blake3 *h, uint8_t *out, size_t n);

/** derive_key in one call: @p n_out bytes from @p context and @p n bytes of @p material. */
void sv_blake3_derive_key(const char *context, const void *material, size_t n, uint8_t *out,
                          size_t n_out);

/** Plain hash in one call: @p n_out bytes of BLAKE3(@p in). */
void sv_blake3_hash(const void *in, size_t n, uint8_t *out, size_t n_out);

#endif
