/*
 * TLS server layer: OpenSSL 3 driven through an in-memory BIO, so that TLS sits
 * on any lower layer (TCP today, later a WebSocket or another TLS). Sans-I/O: no sockets, no
 * clock reads, no logging; the runtime moves bytes and bounds the handshake time.
 *
 * Two objects:
 * - sv_tls_ctx: the server context (certificate, key, ALPN list, bounds). Built once, immutable,
 *   reference-counted, shared read-only by every worker thread. A certificate reload builds a new
 *   context; sessions keep the context they were created from.
 * - sv_tls_session: one connection. Ciphertext from the client goes in with sv_tls_feed(),
 *   plaintext comes out with sv_tls_read(); plaintext towards the client goes in with
 *   sv_tls_write() and the resulting ciphertext comes out with sv_tls_take_out() (or
 *   sv_tls_out_peek() + sv_tls_out_consume()). After every call, send what is pending.
 *
 * Protocol: TLS 1.2 (RFC 5246) and TLS 1.3 (RFC 8446) only; ECDHE AEAD suites for 1.2; no
 * renegotiation, no 0-RTT, no server-side session cache (stateless tickets only).
 * Bounds: the handshake may read at most handshake_max bytes from the client; the
 * OpenSSL object is made only once a whole ClientHello has arrived, so a client that stalls
 * before that costs about 100 bytes plus what it sent; the time bound is the runtime's.
 */
#ifndef SV_TRANSPORT_TLS_H
#define SV_TRANSPORT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/transport/layer.h"
#include "supervisor/util/err.h"

/** Default bound on the ciphertext bytes a handshake may read from the client. */
#define SV_TLS_HANDSHAKE_MAX_DEFAULT (16u * 1024u)
/** Largest handshake_max a context accepts. */
#define SV_TLS_HANDSHAKE_MAX_LIMIT (64u * 1024u)
/** Ciphertext from the client buffered before sv_tls_feed() refuses more: one TLS 1.2 record
 *  (5-byte header + 2^14 + 2048, RFC 5246 §6.2.3) so that any record can be completed. */
#define SV_TLS_IN_MAX (5u + 16384u + 2048u)
/** Pending ciphertext towards the client above which sv_tls_write() accepts nothing. */
#define SV_TLS_OUT_MAX (64u * 1024u)
/** Largest PEM file (certificate chain or key) read. */
#define SV_TLS_PEM_MAX (1u << 20)
/** Most ALPN protocols a context offers. */
#define SV_TLS_ALPN_MAX 8

typedef struct sv_tls_ctx sv_tls_ctx;
typedef struct sv_tls_session sv_tls_session;

/** Where the certificate comes from (agent config "cert": {"mode": ...}). */
enum sv_tls_cert_mode {
    SV_TLS_CERT_FILE, /**< "mode": "file": PEM chain (leaf first) and key read from two paths */
    SV_TLS_CERT_PEM,  /**< the same PEM content given as bytes (embedding, tests) */
    SV_TLS_CERT_SELF, /**< "mode": "self": a self-signed P-256 certificate made at build time */
};

/** Everything a context is built from. Borrowed by sv_tls_ctx_new(): the context copies it. */
typedef struct sv_tls_config {
    enum sv_tls_cert_mode mode;
    const char *cert_file;   /**< FILE: path of the PEM certificate chain, leaf first */
    const char *key_file;    /**< FILE: path of the unencrypted PEM key (may equal cert_file) */
    const uint8_t *cert_pem; /**< PEM: certificate chain bytes */
    size_t cert_pem_len;
    const uint8_t *key_pem;  /**< PEM: private key bytes */
    size_t key_pem_len;
    const char *server_name; /**< SELF: subject CN and SAN (DNS, or IP when it is an address) */
    const char *const *alpn; /**< protocols in server preference order, e.g. {"h2", "http/1.1"} */
    size_t alpn_count;       /**< 0 = no ALPN; at most SV_TLS_ALPN_MAX */
    size_t handshake_max;    /**< bytes; 0 = SV_TLS_HANDSHAKE_MAX_DEFAULT; at most
                                  SV_TLS_HANDSHAKE_MAX_LIMIT */
} sv_tls_config;

/** Facts about a context's leaf certificate, for logs and the API. */
typedef struct sv_tls_cert_info {
    int64_t not_before;     /**< Unix seconds */
    int64_t not_after;      /**< Unix seconds */
    bool expired;           /**< not_after was in the past when the context was built (accepted) */
    uint8_t sha256[32];     /**< SHA-256 of the leaf certificate's DER: changes when it changes */
} sv_tls_cert_info;

/**
 * Build a server context from @p cfg (certificates per node, mode file or self).
 * FILE reads both files (at most SV_TLS_PEM_MAX bytes each) and checks that the key matches the
 * leaf certificate; an expired certificate is accepted and reported in sv_tls_ctx_cert_info().
 * SELF generates a P-256 key and a certificate for server_name valid from one hour ago for 365
 * days, with SAN = server_name plus IP 127.0.0.1 and ::1.
 * @param out receives the context with one reference (release with sv_tls_ctx_unref()).
 * @return 0; -EINVAL for a bad configuration or PEM content, a negative errno for an unreadable
 *         file, -ENOMEM. On error @p err holds the text, e.g. "cert_file /x.pem: no certificate
 *         found", "key_file does not match cert_file", and *out is NULL.
 */
int sv_tls_ctx_new(const sv_tls_config *cfg, sv_tls_ctx **out, sv_error *err);

/** Take one more reference on @p ctx (thread-safe). @return @p ctx. */
sv_tls_ctx *sv_tls_ctx_ref(sv_tls_ctx *ctx);

/** Drop one reference (thread-safe); the last one frees the context. NULL-safe. */
void sv_tls_ctx_unref(sv_tls_ctx *ctx);

/** @return the leaf certificate's facts; valid as long as @p ctx is. */
const sv_tls_cert_info *sv_tls_ctx_cert_info(const sv_tls_ctx *ctx);

/**
 * Certificate reload (files re-read on SIGHUP and on every panel sync, "when their
 * content changed"; a bad new pair is refused and the old one stays). Compares @p cfg with what
 * built @p old: the same settings (mode, paths or server name, ALPN, bound) and, for FILE and
 * PEM, the same SHA-256 of the certificate and key bytes mean "unchanged". SELF with the same
 * server name is unchanged (no new key on every sync). Files are read once, and the new context
 * is built from the bytes that were hashed.
 * Sessions already made from @p old keep it (they hold a reference); the caller swaps its
 * pointer and unrefs @p old when the result is 1.
 * @param old the current context (borrowed), or NULL to always build.
 * @param out receives the new context (one reference) when the result is 1, else NULL.
 * @return 0 unchanged, 1 a new context in *out, or a negative errno with @p err filled as for
 *         sv_tls_ctx_new() (then @p old is still the one to use).
 */
int sv_tls_ctx_reload_if_changed(const sv_tls_ctx *old, const sv_tls_config *cfg, sv_tls_ctx **out,
                                 sv_error *err);

/**
 * Make a server session for one connection. Takes a reference on @p ctx until
 * sv_tls_session_free(). Memory (measured by tests/unit/test_tls.c, OpenSSL 3.0): about 100
 * bytes until a whole ClientHello has arrived (the SSL object is made only then; a partial
 * ClientHello costs the bytes received, at most SV_TLS_IN_MAX); about 44 KB while the handshake
 * waits for the client's Finished (OpenSSL's handshake buffers); about 14 KB for an established
 * idle session (OpenSSL's record buffers are released when empty at the end of each read burst
 * and after each write, and this layer's own queues whenever empty).
 * Time bound: none here; the runtime drops a session whose handshake is not done in its time,
 * without a log line per session.
 * @return 0 with *out set, or -ENOMEM.
 */
int sv_tls_session_new(sv_tls_ctx *ctx, sv_tls_session **out);

/** Free a session and drop its context reference. Sends nothing (call sv_tls_shutdown() and
 *  take the output first for a clean close). NULL-safe. */
void sv_tls_session_free(sv_tls_session *s);

/**
 * Give ciphertext received from the client. Copies at most what fits in SV_TLS_IN_MAX bytes of
 * buffered input and, while the handshake runs, advances it (its replies become pending output).
 * A return below @p n means: read plaintext with sv_tls_read(), then feed the rest.
 * Handshake size bound: a handshake that needs more than the context's handshake_max bytes from
 * the client fails with -EMSGSIZE, a ClientHello announcing more as soon as its length
 * arrives; bytes after the client's Finished do not count.
 * @return bytes consumed (0..n), or a negative errno, terminal for the session: -EPROTO (the
 *         first record is not a handshake record with a ClientHello, e.g. plain HTTP; a bad
 *         record; a failed handshake; an alert from the peer), -EMSGSIZE, -ENOMEM. After an error
 *         the pending output may hold a fatal alert: send it or drop it, then close.
 */
ssize_t sv_tls_feed(sv_tls_session *s, const uint8_t *p, size_t n)
    __attribute__((warn_unused_result));

/**
 * Decrypt buffered input into @p buf (capacity @p cap bytes). Also advances a handshake that
 * still runs, and answers post-handshake messages (their replies become pending output).
 * @return bytes of plaintext (> 0); 0 when there is none now: more input is needed, the
 *         handshake is not done, or the client sent close_notify (sv_tls_is_peer_closed(): EOF
 *         for the layer above, RFC 8446 §6.1); or a negative errno as for sv_tls_feed().
 */
ssize_t sv_tls_read(sv_tls_session *s, uint8_t *buf, size_t cap)
    __attribute__((warn_unused_result));

/**
 * Encrypt @p n bytes of plaintext towards the client; the records become pending output.
 * Accepts at most SV_TLS_OUT_MAX minus the pending output (backpressure: take the output, then
 * write the rest).
 * @return bytes accepted (0..n); -ENOTCONN before the handshake is done; -EPIPE after
 *         sv_tls_shutdown(); the session's error if it failed; -EPROTO or -ENOMEM (terminal).
 */
ssize_t sv_tls_write(sv_tls_session *s, const uint8_t *p, size_t n)
    __attribute__((warn_unused_result));

/**
 * Queue a close_notify alert (RFC 8446 §6.1) as pending output; later writes get -EPIPE.
 * Reading stays possible until the peer's close_notify. Idempotent.
 * @return 0; -ENOTCONN before the handshake is done (just close the connection); the session's
 *         error if it failed.
 */
int sv_tls_shutdown(sv_tls_session *s);

/** @return the number of ciphertext bytes pending towards the client. */
size_t sv_tls_out_pending(const sv_tls_session *s);

/**
 * Borrow the pending ciphertext without copying. The pointer is valid until the next call on
 * @p s other than the queries and sv_tls_out_consume().
 * @param len receives the number of bytes (0 when nothing is pending; the result is then NULL).
 */
const uint8_t *sv_tls_out_peek(const sv_tls_session *s, size_t *len);

/** Drop the first @p n bytes of pending ciphertext (n is clamped to what is pending). */
void sv_tls_out_consume(sv_tls_session *s, size_t n);

/** Move up to @p cap bytes of pending ciphertext into @p buf. @return the bytes moved. */
size_t sv_tls_take_out(sv_tls_session *s, uint8_t *buf, size_t cap);

/** @return the ciphertext bytes buffered by this layer (input not yet decrypted plus pending
 *  output); OpenSSL's own record buffers are not included. */
size_t sv_tls_buffered(const sv_tls_session *s);

/** @return true once the handshake completed (the layer above may start). */
bool sv_tls_is_established(const sv_tls_session *s);

/** @return true once the client's close_notify was read: EOF for the layer above. */
bool sv_tls_is_peer_closed(const sv_tls_session *s);

/** @return 0, or the terminal negative errno the session failed with. */
int sv_tls_error(const sv_tls_session *s);

/** @return OpenSSL's reason for the failure (static text, e.g. "wrong version number"), or NULL.
 *  For counters and debugging; never logged per connection. */
const char *sv_tls_error_reason(const sv_tls_session *s);

/**
 * The ALPN protocol selected (RFC 7301): the server's first preference that the client offered.
 * No overlap, or no ALPN on either side, selects none and the handshake goes on.
 * @param len receives its length (0 when none).
 * @return the name (not NUL-terminated, valid as long as @p s), or NULL when none or before the
 *         handshake is done.
 */
const uint8_t *sv_tls_alpn(const sv_tls_session *s, size_t *len);

/** @return the server name the client sent (SNI, RFC 6066 §3), NUL-terminated and valid as long
 *  as @p s, or NULL when none was sent or before the handshake is done. */
const char *sv_tls_sni(const sv_tls_session *s);

/** @return the negotiated version (0x0303 TLS 1.2, 0x0304 TLS 1.3), or 0 before the handshake
 *  is done. */
unsigned sv_tls_version(const sv_tls_session *s);

/**
 * XTLS Vision's switch to direct copy over this layer (PROTOCOLS-2.md §2.6), enum
 * sv_layer_direct bits (RAW_IN and RAW_OUT kept once given, WATCH while given). Vision needs
 * outer TLS 1.3 (§2.1): any bit on a TLS 1.2 session fails it with -EPROTONOSUPPORT, so the
 * runtime closes the connection, as Xray's server refuses it.
 * - SV_LAYER_WATCH: sv_tls_read() gives at most one record per call (it always does: OpenSSL
 *   reads without read_ahead, one record at a time); the layer's status says SV_LAYER_RECORDS.
 * - SV_LAYER_RAW_IN: no record is read any more; sv_tls_read() gives the plaintext OpenSSL still
 *   holds of the record read last, then the buffered input and every later byte as they are.
 *   Fails the session (-EPROTO) if OpenSSL holds ciphertext beyond that record.
 * - SV_LAYER_RAW_OUT: sv_tls_write() queues bytes as they are behind the records already
 *   pending; sv_tls_shutdown() sends nothing (no outer record again, not even close_notify);
 *   a record OpenSSL would still write (a KeyUpdate answer) fails the session.
 * The layer's status says SV_LAYER_PASS while raw both ways with nothing held or pending, no
 * end seen and no error: the runtime may then relay the socket itself (splice).
 * @return 0 (always for no bits); -ENOTCONN before the handshake is done; -EPROTONOSUPPORT
 *         (TLS 1.2); -EPROTO; or the session's earlier error.
 */
int sv_tls_direct(sv_tls_session *s, unsigned bits);

/**
 * The TLS layer of a transport chain (layer.h): its conf is the inbound's sv_tls_ctx, each
 * connection gets a session (sv_tls_session_new); unwrap = sv_tls_feed + sv_tls_read, wrap =
 * sv_tls_write, shutdown = close_notify, direct = sv_tls_direct (XTLS Vision); UP once the
 * handshake is done, EOF on close_notify.
 */
extern const sv_layer_ops sv_tls_layer_ops;

#endif
