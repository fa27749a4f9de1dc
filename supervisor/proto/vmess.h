/*
 * VMess AEAD (alterId 0) server core, sans-I/O. Wire format: PROTOCOLS.md §6 (addresses in style
 * B, §1.1). The core fills the protocol-core seam of proto.h: the runtime unwraps TCP or TLS,
 * feeds the plaintext, tells the core the wall clock (set_time) and applies the effects.
 *
 * Request: auth_id | AEAD(u16be L) | conn_nonce | AEAD(header[L]), then body chunks (§6.3-6.5).
 * The user is found by trial: the auth ID is decrypted with every user's auth key until one has a
 * valid CRC32 and a timestamp within ±SV_VMESS_AUTH_WINDOW_S of now (O(users) AES blocks, §6.3).
 * Every failure before the header is accepted asks the runtime to drain (§6.9); later ones close.
 */
#ifndef SV_PROTO_VMESS_H
#define SV_PROTO_VMESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** The auth ID's timestamp must be within this many seconds of now (§6.3). */
#define SV_VMESS_AUTH_WINDOW_S 120
/** Fixed part of the request before the header ciphertext: auth ID, AEAD length, nonce (§6.3). */
#define SV_VMESS_PREFIX (16 + 2 + 16 + 8)
/** Longest header plaintext accepted (the longest real one is 38 + 259 + 15 + 4 = 316 bytes). */
#define SV_VMESS_HEADER_MAX 512
/**
 * Largest body chunk accepted from a client (the size field's value). §6.5 allows 65535; real
 * clients send at most 2048 (v2ray 4.34 AEAD), 8192 (v2ray none) or about 8 KiB (Xray), and a
 * chunk must fit the runtime's carry (SV_CARRY_MAX) to be authenticated whole. A larger one
 * closes the connection with -EMSGSIZE.
 */
#define SV_VMESS_CHUNK_MAX 16384
/** Size of the response header on the wire: AEAD(u16be 4) ‖ AEAD(V 0 0 0) (§6.6). */
#define SV_VMESS_RESP_HEADER (18 + 20)
/** Payload of one downstream chunk: a whole chunk (size field, tag, padding) stays ≤ 8192. */
#define SV_VMESS_DOWN_PAYLOAD (8192 - 18 - 16 - 64)
/** Largest datagram payload framed to the client (one chunk, §6.7). */
#define SV_VMESS_UDP_PAYLOAD_MAX (SV_VMESS_CHUNK_MAX - 16 - 63)
/** Most bytes feed() leaves unconsumed: an authenticated size field and a whole chunk. */
#define SV_VMESS_CARRY_MAX (18 + SV_VMESS_CHUNK_MAX)

/** Body security, the low nibble of header byte 35 (§6.4). */
enum sv_vmess_security {
    SV_VMESS_SEC_AES_128_GCM = 3,
    SV_VMESS_SEC_CHACHA20_POLY1305 = 4,
    SV_VMESS_SEC_NONE = 5,
    SV_VMESS_SEC_ZERO = 6,
};

/** Option bits, header byte 34 (§6.4). */
enum sv_vmess_option {
    SV_VMESS_OPT_CHUNK_STREAM = 0x01,
    SV_VMESS_OPT_CHUNK_MASKING = 0x04,
    SV_VMESS_OPT_GLOBAL_PADDING = 0x08,
    SV_VMESS_OPT_AUTH_LENGTH = 0x10,
};

/**
 * The VMess core (proto.h's contract), with these specifics:
 *  - creds_new: one UUID per user, the user's secret (the panel uuid, 36 characters with dashes,
 *    any case). The table keeps each user's cmd_key and auth key (§6.1, §6.2), built once.
 *    Errors: -EINVAL "user set T: user A has no valid UUID", "user set T: users A and B have the
 *    same UUID", "user set T: more than SV_USERS_MAX users"; -ENOMEM; -EIO when OpenSSL lacks a
 *    primitive. @p in is not used and may be NULL.
 *  - attach_replay: the inbound's filter remembers each auth ID whose length opened (§6.3 step
 *    2, after the first AEAD proved the key). The filter forgets by count, not time (replay.h):
 *    an auth ID stays for at least the filter's capacity (65536, plane.c) further handshakes of
 *    the inbound, which covers its 240 s of validity below about 270 handshakes per second.
 *    Without a filter (unit tests may leave it out) no replay is detected.
 *  - set_time: the Unix time in seconds that the auth window is checked against. Until it is
 *    called, now is 0 and every real client is stale.
 *  - feed: waits for SV_VMESS_PREFIX bytes, finds the user, opens the length (then remembers the
 *    auth ID), waits for the header, opens and checks it. Failures, all SV_FX_ERROR with
 *    SV_PROBE_DRAIN and no data: -EACCES (no user's key gives a valid CRC32), -ETIME (a user's
 *    key does, but the timestamp is outside the window), -EBADMSG (length or header AEAD),
 *    -EALREADY (auth ID seen before), -EPROTO (version, length, address, FNV-1a),
 *    -EPROTONOSUPPORT (security 0-2 or above 6, a command other than 1-3, chunk stream off for an
 *    AEAD security, padding without masking or with authenticated length, UDP with security
 *    zero). Command 3 (Mux.Cool, §7.1, no address) gives SV_FX_AUTHENTICATED with multiplexed
 *    set and no SV_FX_OPEN: the body's plaintext goes through the Mux.Cool decoder (mux.h,
 *    streams = session IDs; its -EPROTO ends the connection, SV_PROBE_CLOSE). A good
 *    header gives SV_FX_AUTHENTICATED (principal = user index) and SV_FX_OPEN (stream 0, the
 *    header's address; network UDP for command 2); then each body chunk gives SV_FX_TO_OUTBOUND
 *    (TCP) or one SV_FX_DATAGRAM to that address (UDP), decrypted in place in @p p. Security zero
 *    (and none without chunk stream) relays the body as it is. After the header every error has
 *    SV_PROBE_CLOSE: -EBADMSG (chunk AEAD), -EMSGSIZE (chunk above SV_VMESS_CHUNK_MAX), -EPROTO
 *    (a chunk shorter than its tag and padding, or bytes after the end-of-stream chunk).
 *  - carry_max: SV_VMESS_CARRY_MAX.
 *  - frame / frame_datagram / frame_end: the response header before the first bytes, then chunks
 *    of at most SV_VMESS_DOWN_PAYLOAD (one per datagram, the source address is not sent), then
 *    the end-of-stream chunk; padding bytes are random. Under Mux.Cool the chunks carry Keep
 *    frames of @p stream (each header sealed as a chunk of its own) and frame_end the stream's
 *    End frame (option 0x02 with abort). -EINVAL before the header was accepted
 *    or for a datagram above SV_VMESS_UDP_PAYLOAD_MAX, -EMSGSIZE when @p cap is too small, -EIO
 *    when the cipher fails.
 * Extensions (proto_ext.h): replay, clock, datagram, end.
 */
extern const sv_proto_ops sv_vmess_ops;

/** One KDF path element (§6.2): @p len bytes at @p p. */
typedef struct sv_vmess_bytes {
    const void *p;
    size_t len;
} sv_vmess_bytes;

/**
 * VMess KDF (§6.2): HMAC-SHA256 keyed "VMess AEAD KDF", wrapped by one HMAC per path element
 * (each ≤ 64 bytes, the last outermost), over @p key. @p n ≤ 3.
 * @return 0 with 32 bytes in @p out, or -EINVAL (n or an element too long), -EIO.
 */
int sv_vmess_kdf(const uint8_t *key, size_t key_len, const sv_vmess_bytes *path, size_t n,
                 uint8_t out[32]);

/**
 * cmd_key = MD5(uuid ‖ "c48619fe-8f02-49e0-b9e9-edf763e17e21") of a UUID in text form (§6.1).
 * @return 0, -EINVAL when @p uuid is not 8-4-4-4-12 hex digits, -EIO.
 */
int sv_vmess_cmd_key(const char *uuid, uint8_t out[16]);

/** A SHAKE128 output stream read two bytes at a time (the chunk size masks, §6.5). */
typedef struct sv_vmess_shake {
    uint64_t lane[25];
    unsigned pos; /**< bytes of the current block already read (168 = none left) */
} sv_vmess_shake;

/** Seed @p s with the 16-byte body IV (SHAKE128 of the IV). */
void sv_vmess_shake_init(sv_vmess_shake *s, const uint8_t iv[16]);
/** The next two output bytes as u16be. */
uint16_t sv_vmess_shake_next(sv_vmess_shake *s);

/** FNV-1a 32-bit of @p n bytes (§6.4 header check). */
uint32_t sv_vmess_fnv1a(const uint8_t *p, size_t n);

#endif
