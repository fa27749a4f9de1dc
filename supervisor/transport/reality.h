/*
 * REALITY server side (PROTOCOLS-2.md §1): the client's authentication hidden in the
 * ClientHello session id, the HMAC-signed temporary certificate, and the transport layer that
 * either hands an authenticated client to katana's own TLS 1.3 server (tls13s.h) or passes every
 * byte of anyone else through, so that the runtime relays it to the target site (the inbound's
 * fallback) and a prober sees the real site.
 *
 * With a target (sv_reality_conf.mirror), a valid client's ServerHello mirrors the target's and
 * the handshake records are padded to the target's sizes (§1.5): the layer asks the runtime for
 * the target's first flight (SV_LAYER_TARGET). Not done: the post-handshake camouflage records
 * and the CCS limit of §1.5 step 7, ML-DSA-65, X25519MLKEM768 (tls13s.h).
 */
#ifndef SV_TRANSPORT_REALITY_H
#define SV_TRANSPORT_REALITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "supervisor/transport/layer.h"
#include "supervisor/transport/tls13s.h"
#include "supervisor/util/proxy_header.h" /* xver's header, sv_proxy_header() */

/** Most short ids and server names one inbound takes. */
#define SV_REALITY_LIST_MAX 16
/** Longest accepted server name (a DNS name). */
#define SV_REALITY_NAME_MAX 253
/** Largest ClientHello handshake message the layer collects (header included). Xray's client
 *  with an X25519MLKEM768 share sends about 1.8 KiB; a larger hello is not REALITY's. */
#define SV_REALITY_HELLO_MAX (16u * 1024u)

/** What the §1.3 check compares a client against (immutable once built). */
typedef struct sv_reality_auth {
    uint8_t private_key[32];                 /**< the server's X25519 private key */
    uint8_t short_ids[SV_REALITY_LIST_MAX][8]; /**< each zero-padded on the right */
    size_t n_short_ids;
    char *server_names[SV_REALITY_LIST_MAX]; /**< accepted SNI values, exact match; owned */
    size_t n_server_names;
    uint64_t max_time_diff_ms;               /**< 0 = no time check */
    uint32_t min_client_ver, max_client_ver; /**< 24-bit x.y.z; 0 = unset */
} sv_reality_auth;

/**
 * Decode the panel's private key (PROTOCOLS-2.md §1.1: 32 raw bytes, base64url without padding;
 * a trailing '=' padding is tolerated). @return 0, or -EINVAL for any other text.
 */
int sv_reality_parse_key(const char *b64url, uint8_t out[32]);

/**
 * Decode one short id (§1.1: at most 16 hex digits, even count, zero-padded on the right to 8
 * bytes; "" is the all-zero id). @return 0, or -EINVAL.
 */
int sv_reality_parse_short_id(const char *hex, size_t len, uint8_t out[8]);

/**
 * Fill @p a from text settings: @p private_key base64url, @p short_ids and @p server_names
 * comma-separated lists (short ids may be empty: the all-zero id only, as sing-box), the time
 * window in ms (0 = off). Client versions are left unset (§1.1: sing-box reports 1.8.1).
 * @return 0, -EINVAL (with @p what naming the bad setting: "private_key", "short_ids",
 *         "server_names") or -ENOMEM. On failure nothing stays allocated.
 */
int sv_reality_auth_init(sv_reality_auth *a, const char *private_key, const char *short_ids,
                         const char *server_names, uint64_t max_time_diff_ms, const char **what);

/** Free what sv_reality_auth_init() allocated. NULL-safe, idempotent. */
void sv_reality_auth_deinit(sv_reality_auth *a);

/**
 * The §1.3 check, on primitives. The client is valid when @p sni is one of the server names,
 * the session id (32 bytes at @p sid_off of @p hello, which must be 32 long: hello[sid_off-1])
 * opens with AES-256-GCM under auth_key = HKDF-SHA256(X25519(private key, @p peer_share), salt
 * random[0..20), info "REALITY") with nonce random[20..32) and the hello with a zeroed session id
 * as AAD, and the plaintext's version, time and short id pass the bounds.
 * @param hello     the whole ClientHello handshake message (type byte first, no record header)
 * @param random    its 32-byte random
 * @param now_ms    wall clock, Unix milliseconds
 * @param auth_key  receives the auth key when valid (for the certificate's HMAC)
 * @return true when valid. Nothing is logged; no allocation survives.
 */
bool sv_reality_check(const sv_reality_auth *a, const uint8_t peer_share[32],
                      const uint8_t random[32], const uint8_t *hello, size_t hello_len,
                      size_t sid_off, const char *sni, size_t sni_len, uint64_t now_ms,
                      uint8_t auth_key[32]);

/** The temporary certificate of §1.5: one Ed25519 key and its self-signed DER. */
typedef struct sv_reality_cert {
    void *key;          /**< EVP_PKEY (Ed25519), owned */
    uint8_t pub[32];    /**< its raw public key */
    uint8_t *der;       /**< self-signed X.509, serial 0, empty names; owned */
    size_t der_len;
} sv_reality_cert;

/**
 * Make the key (from @p seed when not NULL, for tests; else random) and the certificate
 * (serial 0, empty subject and issuer, signed by the key). @return 0, -ENOMEM or -EIO.
 */
int sv_reality_cert_make(sv_reality_cert *c, const uint8_t *seed);

/** Free the key and the DER. NULL-safe, idempotent. */
void sv_reality_cert_free(sv_reality_cert *c);

/** HMAC-SHA512(@p auth_key, @p pub) into @p out: the signature value a client checks (§1.5). */
void sv_reality_cert_hmac(const uint8_t auth_key[32], const uint8_t pub[32], uint8_t out[64]);

/** Copy the DER into @p out (der_len bytes) with its last 64 bytes replaced by the HMAC of the
 *  public key under @p auth_key (§1.5: the per-connection certificate). */
void sv_reality_cert_patch(const sv_reality_cert *c, const uint8_t auth_key[32], uint8_t *out);

/** Client bytes the layer holds while it waits for a whole ClientHello: the largest hello
 *  and the headers of the records it may span; more without a whole hello is not REALITY's. */
#define SV_REALITY_RAW_MAX (SV_REALITY_HELLO_MAX + 1024u)
/** Pending bytes towards the client (a refused peer's relay) above which wrap() takes none. */
#define SV_REALITY_OUT_MAX (64u * 1024u)

/** An inbound's REALITY settings, shared by its connections (immutable once built). */
typedef struct sv_reality_conf {
    sv_reality_auth auth;
    sv_reality_cert cert;
    uint64_t (*now_ms)(void); /**< the wall clock (Unix ms) for the time window; tests set it */
    uint8_t xver; /**< 1 or 2: the runtime sends a PROXY protocol header of that version to the
                       target before a relayed client's bytes (§1.1 xver; sv_proxy_header()); 0 =
                       none. The layer itself does not use it */
    bool mirror; /**< a valid client waits for the target's first flight (SV_LAYER_TARGET) and
                      gets its ServerHello and record sizes (§1.5); set when the inbound has a
                      fallback (the target). false: katana's own ServerHello, no padding */
} sv_reality_conf;

/**
 * Read a target's first flight (§1.5 step 1): record 0 one whole ServerHello, record 1 a
 * 6-byte ChangeCipherSpec, then application-data records: one over 512 bytes (its encrypted
 * flight joined) or four (EncryptedExtensions, Certificate, CertificateVerify, Finished), and
 * one more whole record as the ticket's; every header with version 0x0303.
 * @param f, n       the bytes read from the target so far (record headers included)
 * @param final      no more will come
 * @param sh_len     receives the ServerHello message's length (it starts at f + 5)
 * @param pad        receives the record sizes for sv_tls13s_params.pad_sizes
 * @param pad_count  receives their count (0: the pattern broke after the ServerHello)
 * @return 1 when more bytes may complete it, 0 when the ServerHello (and pad) are usable,
 *         -1 when there is no usable ServerHello record.
 */
int sv_reality_flight_parse(const uint8_t *f, size_t n, bool final, size_t *sh_len,
                            uint16_t pad[SV_TLS13S_PAD_MAX], size_t *pad_count);

/** The time window of an inbound whose settings give none (max_time_diff 0 or absent; issue
 *  33: without one a day-old hello was served): clients' clocks within 2 minutes. */
#define SV_REALITY_TIME_DIFF_DEFAULT_MS 120000u

/**
 * Whether the sealed session id @p sid of a valid hello was seen before within the replay
 * window, remembering it if not (a replayed valid hello goes to the target like a
 * probe). Process-wide and thread-safe (one lock, once per valid hello); an id is remembered
 * for at least 2 × @p window_ms, the longest a hello passing the time check can be replayed, in
 * at most 1 MiB; with @p window_ms 0 (no time check) nothing is remembered and this is false.
 * @p now_ms is the wall clock in ms, as given to the check.
 */
bool sv_reality_replayed(const uint8_t sid[32], uint64_t now_ms, uint64_t window_ms);

/** Forget every session id sv_reality_replayed() remembers, as a restart does (for tests that
 *  feed one valid hello more than once). Thread-safe. */
void sv_reality_replay_forget(void);

/**
 * Build an inbound's REALITY settings (sv_reality_auth_init's texts) and its temporary
 * certificate: the process's one Ed25519 key, made at the first call (§1.5: once at startup, as
 * Xray), so that rebuilding an inbound on a reload does not change it.
 * @return the settings (free with sv_reality_conf_free()), or NULL with *@p rc = -EINVAL (and
 *         *@p what naming the bad setting) or -ENOMEM / -EIO.
 */
sv_reality_conf *sv_reality_conf_new(const char *private_key, const char *short_ids,
                                     const char *server_names, uint64_t max_time_diff_ms,
                                     const char **what, int *rc);

/** Free the settings. NULL-safe. */
void sv_reality_conf_free(sv_reality_conf *c);


/**
 * The REALITY layer (layer.h), the first above TCP; conf is an sv_reality_conf. It collects the
 * client's ClientHello (tls_hello.h, at most SV_REALITY_RAW_MAX raw bytes) and runs the §1.3
 * check. A valid client goes on to katana's TLS 1.3 server (tls13s.h) with the certificate
 * patched for its auth key, and the layer passes plaintext up. Anyone else is refused
 * (SV_LAYER_REFUSED): every byte it sent passes up as it is, and bytes from above pass down as
 * they are, so that the runtime relays the connection to the target (the inbound's fallback).
 * A valid client whose hello katana's server cannot serve (no X25519 share, no common suite) is
 * refused the same way. With sv_reality_conf.mirror a valid client first puts the layer in
 * SV_LAYER_TARGET: target_ask() gives the client's hello records to send to the target,
 * target_reply() takes the target's answer (sv_reality_flight_parse(); a template or sizes the
 * server refuses, or none in time, give katana's own ServerHello). A served client's TLS takes XTLS Vision's switch to raw (the layer's
 * `direct`, sv_tls13s_direct()). Per connection: about 100 bytes idle; the raw hello only while it is
 * collected or passed up; the TLS state while a client is served.
 */
extern const sv_layer_ops sv_reality_layer_ops;

#endif
