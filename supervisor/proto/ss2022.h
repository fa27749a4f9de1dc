/*
 * Shadowsocks 2022 (SIP022) server core, TCP, sans-I/O (PROTOCOLS.md §3.1–§3.4, §3.7).
 * Single user (the PSK is the one user's key) or multi-user with identity headers (EIH): the
 * user is found in O(1) from BLAKE3(uPSK)[0:16] after one AES block decryption, never by trial
 * decryption. The core reads no clock: the runtime gives it the time through set_time.
 */
#ifndef SV_PROTO_SS2022_H
#define SV_PROTO_SS2022_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/crypto/aead.h"
#include "supervisor/crypto/replay.h"
#include "supervisor/proto/proto.h"

#define SV_SS22_KEY_MAX 32
#define SV_SS22_TAG 16
#define SV_SS22_EIH 16
#define SV_SS22_FIXED 11            /**< request fixed header: type, timestamp, length */
#define SV_SS22_CHUNK_MAX 0xFFFF    /**< largest payload of one chunk (§3.2) */
#define SV_SS22_PADDING_MAX 900     /**< largest request padding (§3.2) */
#define SV_SS22_WINDOW_S 30         /**< accepted |timestamp − now| (§3.4) */
/** Most bytes the core needs buffered to make progress: a whole chunk (or variable header). */
#define SV_SS22_CARRY_MAX (SV_SS22_CHUNK_MAX + SV_SS22_TAG)
/** Most wire bytes frame() writes for @p len payload bytes: salt, response header, chunks. */
#define SV_SS22_FRAMED_MAX(len)                                                                    \
    (SV_SS22_KEY_MAX + 1 + 8 + SV_SS22_KEY_MAX + 2 + SV_SS22_TAG +                                 \
     ((len) + SV_SS22_CHUNK_MAX - 1) / SV_SS22_CHUNK_MAX * (2 + 2 * SV_SS22_TAG) + (len))

/** Key (= salt) length of a 2022 method: 16 or 32; 0 for another cipher. */
size_t sv_ss22_key_len(enum sv_ss_cipher cipher);

/**
 * Decode a standard base64 key (with padding) of exactly @p key_len bytes (PROTOCOLS.md §3.1:
 * the password is the PSK; EVP_BytesToKey is forbidden, other lengths are refused).
 * @return 0, or -EINVAL for bad base64 or another length.
 */
int sv_ss22_key_decode(const char *b64, size_t key_len, uint8_t *out);

/**
 * A user's key from its secret: the first @p key_len bytes of the secret, as Xboard derives it
 * from the user's UUID string (PANEL.md §1.4 uuidToBase64; the client's password is their
 * base64). @return 0, or -EINVAL when the secret is shorter.
 */
int sv_ss22_user_key(const char *secret, size_t key_len, uint8_t *out);

/** Credential table: keys, user hashes and the EIH index. Immutable once built. */
typedef struct sv_ss22_creds sv_ss22_creds;

/**
 * Build the credentials of @p n user secrets for @p cipher; @p server_key (base64 iPSK) makes
 * it multi-user (EIH), NULL single-user (then @p n must be 1, or 0: nobody is served).
 * @return 0; -EINVAL with @p err naming @p tag (bad key, short secret, two users with the same
 *         key, several users without a server key, EIH with chacha20); -ENOMEM.
 */
int sv_ss22_creds_new(const char *tag, enum sv_ss_cipher cipher, const char *server_key,
                      const char *const *secrets, size_t n, sv_ss22_creds **out, sv_error *err);
/**
 * sv_ss22_creds_new() from raw keys: @p ipsk (key_len bytes; NULL = single user) and @p n user
 * keys (the first key_len bytes of each are used). Same results.
 */
int sv_ss22_creds_from_keys(const char *tag, enum sv_ss_cipher cipher, const uint8_t *ipsk,
                            const uint8_t (*keys)[SV_SS22_KEY_MAX], size_t n,
                            sv_ss22_creds **out, sv_error *err);
/** Free a table. NULL-safe. */
void sv_ss22_creds_free(sv_ss22_creds *c);
/** Use @p r (borrowed) as the request-salt replay filter (§3.4); NULL = none. */
void sv_ss22_creds_set_replay(sv_ss22_creds *c, sv_replay *r);
/** Index of the user whose BLAKE3(uPSK)[0:16] is @p hash, or -1 (multi-user tables only). */
int sv_ss22_lookup(const sv_ss22_creds *c, const uint8_t hash[16]);

enum sv_ss22_state { SV_SS22_AUTH = 0, SV_SS22_HEADER, SV_SS22_LENGTH, SV_SS22_PAYLOAD,
                     SV_SS22_FAILED };

/** Per-connection state. Zero it, then sv_ss22_tcp_init(). */
typedef struct sv_ss22_tcp {
    enum sv_ss22_state state;
    enum sv_ss_cipher cipher;
    int user;                 /**< user index once authenticated, else -1 */
    int64_t now;              /**< Unix seconds given by set_time */
    uint32_t need;            /**< HEADER: variable header length; PAYLOAD: chunk length */
    sv_aead open;             /**< client → server */
    sv_aead seal;             /**< server → client */
    bool response_sent;       /**< salt and response header written */
    uint8_t request_salt[SV_SS22_KEY_MAX];
    void (*rng)(uint8_t *buf, size_t n); /**< response salt source; NULL = RAND_bytes */
} sv_ss22_tcp;

/** Prepare @p t for a connection. @return 0. */
int sv_ss22_tcp_init(sv_ss22_tcp *t, enum sv_ss_cipher cipher);
/** Release cipher contexts. Idempotent. */
void sv_ss22_tcp_deinit(sv_ss22_tcp *t);

/**
 * Feed client bytes (proto.h feed contract), decrypting in place. Effects: SV_FX_AUTHENTICATED
 * once the fixed header opened with a fresh timestamp and salt; SV_FX_OPEN (stream 0, TCP) and
 * the initial payload from the variable header; SV_FX_TO_OUTBOUND per chunk.
 * Errors (with SV_FX_ERROR, SV_PROBE_DRAIN before the relay, SV_PROBE_CLOSE after):
 * -EBADMSG (no AEAD opens: wrong key, probe, unknown identity header), -ETIME (timestamp more
 * than 30 s off), -EEXIST (replayed salt), -EPROTO (bad type, address, lengths, padding).
 */
ssize_t sv_ss22_tcp_feed(sv_ss22_tcp *t, const sv_ss22_creds *c, uint8_t *p, size_t n,
                         sv_effects *fx);

/**
 * Frame @p len (> 0) bytes for the client into @p out: on the first call the salt and the
 * response header (type 1, timestamp, request salt, first chunk length, §3.3) with the first
 * chunk; then length/payload chunks of at most 0xFFFF bytes.
 * @return wire length; -EMSGSIZE when @p cap < SV_SS22_FRAMED_MAX(len); -EINVAL.
 */
ssize_t sv_ss22_tcp_frame(sv_ss22_tcp *t, const sv_ss22_creds *c, const uint8_t *in, size_t len,
                          uint8_t *out, size_t cap);

/* ---- UDP (§3.5–§3.7) ------------------------------------------------------------------- */

#define SV_SS22_UDP_WINDOW 2048 /**< packet IDs remembered below the highest seen (§3.5) */
/** Bytes of a reply around its payload: header, body fields, address, tag. */
#define SV_SS22_UDP_OVERHEAD (24 + 8 + 8 + 1 + 8 + 8 + 2 + SV_DEST_WIRE_MAX + SV_SS22_TAG)

/** Sliding window over one session's packet IDs (WireGuard style). Zero it to start. */
typedef struct sv_ss22_window {
    uint64_t top;  /**< highest accepted ID + 1; 0 = none yet */
    uint64_t bits[SV_SS22_UDP_WINDOW / 64];
} sv_ss22_window;

/**
 * Accept packet ID @p id once: false for a duplicate or an ID SV_SS22_UDP_WINDOW or more below
 * the highest accepted (§3.5). Call only after the packet authenticated.
 */
bool sv_ss22_window_accept(sv_ss22_window *w, uint64_t id);

/** One client datagram, opened. */
typedef struct sv_ss22_udp_in {
    int user;                /**< user index */
    uint8_t session_id[8];   /**< the client's session ID */
    uint64_t packet_id;
    sv_dest dest;            /**< destination (network UDP) */
    uint8_t *payload;        /**< inside the packet */
    size_t len;
} sv_ss22_udp_in;

/**
 * Open one client datagram in place. AES methods: separate header with AES(iPSK or the PSK),
 * the EIH to find the user (multi-user), the body with derive_key(uPSK ‖ session ID) and nonce
 * header[4:16]; type 0, timestamp within ±30 s of @p now. The packet ID is not checked here
 * (the caller's per-session window). chacha20 (§3.6, single user): a 24-byte nonce, the body
 * with XChaCha20-Poly1305 under the PSK, the session and packet IDs inside it. @p ctx is a
 * caller-owned AEAD context (zeroed the first time, re-keyed on every call, freed with
 * sv_aead_deinit()).
 * @return 0; -EBADMSG (no user, AEAD fails), -ETIME, -EPROTO (short, type, padding, address).
 */
int sv_ss22_udp_open(const sv_ss22_creds *c, int64_t now, uint8_t *pkt, size_t n,
                     sv_ss22_udp_in *out, sv_aead *ctx);

/**
 * Seal one reply of user @p user (server → client): body type 1, timestamp @p now, the client's
 * session ID, no padding, the address of @p from, the payload. AES methods (§3.5): separate
 * header (server session ID, packet ID) with AES(uPSK), key derive_key(uPSK ‖ server session
 * ID). chacha20 (§3.6): a random 24-byte nonce from @p rng (NULL = RAND_bytes), XChaCha20-
 * Poly1305 under the PSK over server session ID, packet ID and the body. @p payload may lie in
 * @p out past the header room.
 * @return wire length; -EMSGSIZE when @p cap < n + SV_SS22_UDP_OVERHEAD; -EINVAL.
 */
ssize_t sv_ss22_udp_seal(const sv_ss22_creds *c, int user, const uint8_t server_sid[8],
                         uint64_t packet_id, const uint8_t client_sid[8], int64_t now,
                         const sv_dest *from, const uint8_t *payload, size_t n, uint8_t *out,
                         size_t cap, sv_aead *ctx, void (*rng)(uint8_t *buf, size_t n));

/** The core on the proto.h seam, with the clock (set_time) and replay (attach_replay)
 *  extensions of proto_ext.h; no datagram framing inside the stream: datagrams on the inbound's
 *  own UDP socket are ss22_dgram.h's, over the same table. */
extern const sv_proto_ops sv_ss2022_ops;

#endif
