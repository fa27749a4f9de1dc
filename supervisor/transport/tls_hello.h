/*
 * The client's first flight, read outside any TLS library (PROTOCOLS-2.md §1.3 and
 * §1.8): collect the ClientHello handshake message from the TLS records the client sent, then
 * parse the fields REALITY and the TLS 1.3 server (tls13s.h) need. Sans-I/O, no allocation;
 * the parsed fields point into the caller's message buffer.
 *
 * REALITY authenticates the exact raw handshake message (type byte, 3-byte length, body: the
 * AAD of §1.2 step 6), so the collector hands it back contiguous and byte for byte, and tells
 * how many raw record bytes it took so that the caller can relay exactly those to the target.
 */
#ifndef SV_TRANSPORT_TLS_HELLO_H
#define SV_TRANSPORT_TLS_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Largest ClientHello handshake message accepted, header included (16 KiB; a Chrome hello with
 *  an X25519MLKEM768 share is about 1.8 KB). */
#define SV_TLS_HELLO_MAX (16u * 1024u)
/** Offset of legacy_session_id in a ClientHello handshake message (type 1, length 3,
 *  legacy_version 2, random 32, session id length 1: PROTOCOLS-2.md §1.2 step 2). */
#define SV_TLS_HELLO_SESSION_ID_OFF 39u
/** Offset of the random in a ClientHello handshake message. */
#define SV_TLS_HELLO_RANDOM_OFF 6u
/** Bytes of an X25519MLKEM768 client key share: ML-KEM-768 encapsulation key (1184) then the
 *  X25519 share (32) (draft-ietf-tls-ecdhe-mlkem; PROTOCOLS-2.md §1.3 step 3). */
#define SV_TLS_MLKEM_SHARE_LEN 1216u

/** Named groups and extension types used here (RFC 8446 §4.2, §4.2.7). */
enum {
    SV_TLS_GROUP_X25519 = 0x001d,
    SV_TLS_GROUP_X25519MLKEM768 = 0x11ec,
    SV_TLS_EXT_SERVER_NAME = 0,
    SV_TLS_EXT_SIGNATURE_ALGORITHMS = 13,
    SV_TLS_EXT_ALPN = 16,
    SV_TLS_EXT_SUPPORTED_VERSIONS = 43,
    SV_TLS_EXT_KEY_SHARE = 51,
};

/**
 * Find a whole ClientHello in the raw bytes a client sent so far. The records must be handshake
 * records (content type 22) with version 0x0301, 0x0302 or 0x0303 in the header, non-empty and
 * at most 2^14 bytes (RFC 8446 §5.1); the message may span several records, and the record
 * carrying its end must end with it (nothing else may be in the client's first flight).
 * Stateless: call again with all the bytes so far (the prefix is scanned again; headers only).
 *
 * @param raw      the client's bytes from the start of the connection, @p n of them
 * @param msg      where the contiguous handshake message (type 0x01, 3-byte length, body) is
 *                 written once complete; @p cap bytes (SV_TLS_HELLO_MAX is always enough)
 * @param msg_len  receives the message's length when complete (4 + body)
 * @param raw_used receives how many bytes of @p raw (record headers included) it took
 * @return 1 when the message is complete, 0 when more bytes are needed (nothing written),
 *         -EPROTO when the bytes are not TLS handshake records, an empty or oversized record,
 *         a first message that is not a ClientHello, or bytes after it in its last record,
 *         -EMSGSIZE when the message is longer than SV_TLS_HELLO_MAX or @p cap.
 */
int sv_tls_hello_collect(const uint8_t *raw, size_t n, uint8_t *msg, size_t cap,
                         size_t *msg_len, size_t *raw_used);

/** A run of bytes inside the parsed message; NULL/0 when absent. */
typedef struct sv_tls_span {
    const uint8_t *p;
    size_t n;
} sv_tls_span;

/** The ClientHello fields this code uses (RFC 8446 §4.1.2); pointers into the message. */
typedef struct sv_tls_hello {
    uint16_t legacy_version;   /**< 0x0303 for TLS 1.2 and 1.3 clients */
    const uint8_t *random;     /**< 32 bytes, at SV_TLS_HELLO_RANDOM_OFF */
    sv_tls_span session_id;    /**< legacy_session_id, 0..32 bytes */
    size_t session_id_off;     /**< its offset in the message (SV_TLS_HELLO_SESSION_ID_OFF) */
    sv_tls_span cipher_suites; /**< the list's bytes (2 per suite, client order), no length */
    sv_tls_span extensions;    /**< all extension bytes, without their 2-byte length */
    sv_tls_span server_name;   /**< the first host_name of extension 0 (not NUL-terminated) */
    bool has_tls13;            /**< supported_versions (43) lists 0x0304 */
    bool has_key_share;        /**< extension 51 came (maybe without a usable share) */
    const uint8_t *x25519;     /**< the first X25519 share of 32 bytes, or NULL */
    const uint8_t *x25519mlkem768; /**< the first X25519MLKEM768 share of 1216 bytes, or NULL;
                                        its last 32 bytes are an X25519 share */
    bool has_signature_algorithms; /**< extension 13 came */
    sv_tls_span signature_algorithms; /**< its list (2 bytes per scheme), no length */
    sv_tls_span alpn;          /**< ALPN (16) ProtocolNameList without its 2-byte length:
                                    1-byte length + name, repeated; NULL/0 when absent */
} sv_tls_hello;

/**
 * Parse a ClientHello handshake message (as sv_tls_hello_collect() produced it): strict bounds,
 * every length must fit exactly, a repeated extension type is an error (RFC 8446 §4.2), the
 * extensions named above are checked for well-formedness, others are skipped. Key share
 * entries of other groups or sizes are skipped; of several of one group, the first counts.
 * @param msg the message, @p len bytes; it must outlive *@p out, whose pointers point into it
 * @param out filled on success (zeroed first)
 * @return 0, or -EPROTO for a malformed message (then *@p out is unspecified).
 */
int sv_tls_hello_parse(const uint8_t *msg, size_t len, sv_tls_hello *out);

/** Does @p h offer the cipher suite @p suite (e.g. 0x1301)? */
bool sv_tls_hello_has_suite(const sv_tls_hello *h, uint16_t suite);

#endif
