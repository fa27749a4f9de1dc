/*
 * A small TLS 1.3 server (RFC 8446) for ONE connection, on libcrypto primitives, for REALITY
 * (PROTOCOLS-2.md §1.5, §1.8): stock OpenSSL cannot sign CertificateVerify with
 * Ed25519 when the client did not offer it, mirror a target's ServerHello, or pad records.
 *
 * Sans-I/O, no clock, no logging. Started from a ClientHello collected and parsed by
 * tls_hello.h (the caller has read it already); the server's whole first flight (ServerHello,
 * a dummy ChangeCipherSpec, encrypted EncryptedExtensions, Certificate, CertificateVerify,
 * Finished) is pending output as soon as sv_tls13s_new() returns. The functions below have the
 * shape of sv_layer_ops (layer.h) so that a layer can wrap them one to one.
 *
 * Supported: TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256 (the
 * first of the client's list, in the client's order, that is one of these); group X25519 only
 * (the client must have sent an X25519 share: no HelloRetryRequest); a certificate given as DER
 * and an Ed25519 key for CertificateVerify (scheme 0x0807, whatever the client's
 * signature_algorithms say: §1.5). Not supported: PSK, session tickets, 0-RTT, client
 * certificates, HelloRetryRequest, X25519MLKEM768 (Debian's OpenSSL 3.0 has no ML-KEM: a
 * template choosing it is refused (REALITY then answers with its own ServerHello), and REALITY
 * relays a client without an X25519 share, PROTOCOLS-2.md §1.4).
 * Received KeyUpdate is honoured (and answered when asked,
 * before our next application data).
 */
#ifndef SV_TRANSPORT_TLS13S_H
#define SV_TRANSPORT_TLS13S_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "supervisor/transport/layer.h"
#include "supervisor/transport/tls_hello.h"
#include "supervisor/util/err.h"

/** Pending output above which sv_tls13s_wrap() accepts nothing more (bytes). */
#define SV_TLS13S_OUT_MAX (64u * 1024u)
/** Largest certificate DER accepted (bytes): the Certificate message fits one record. */
#define SV_TLS13S_CERT_MAX 8192u
/** Most entries of sv_tls13s_params.pad_sizes. */
#define SV_TLS13S_PAD_MAX 5u

typedef struct sv_tls13s sv_tls13s;

/** What a connection is started from. Borrowed by sv_tls13s_new() for the call only. */
typedef struct sv_tls13s_params {
    const uint8_t *client_hello; /**< the raw ClientHello handshake message (type byte, 3-byte
                                      length, body: sv_tls_hello_collect()), first transcript
                                      entry */
    size_t client_hello_len;
    const sv_tls_hello *hello;   /**< the same message parsed by sv_tls_hello_parse() */
    const uint8_t *cert_der;     /**< the leaf certificate, DER (copied; at most
                                      SV_TLS13S_CERT_MAX bytes); REALITY patches its last 64
                                      bytes per connection before calling */
    size_t cert_der_len;
    EVP_PKEY *sign_key;          /**< Ed25519 private key for CertificateVerify (not kept) */
    const uint8_t *alpn;         /**< protocol name for EncryptedExtensions, or NULL for no
                                      ALPN extension (REALITY: NULL, §1.5 step 4) */
    size_t alpn_len;             /**< 1..255 when alpn is set */
    const uint8_t *server_hello; /**< optional template: the target's ServerHello handshake
                                      message (type byte, 3-byte length, body). Sent as it is
                                      except the X25519 key_share data, which becomes ours; its
                                      cipher suite is used (the client must have offered it).
                                      NULL: our own ServerHello (§1.5 step 3) */
    size_t server_hello_len;
    const uint16_t *pad_sizes;   /**< optional wire sizes (5-byte header included) of the
                                      target's records after its ChangeCipherSpec (§1.5 step 1):
                                      1 entry: EncryptedExtensions..Finished in one record of
                                      that size; 4 entries: one record each; a 2nd (resp. 5th)
                                      entry adds an empty application-data record of that size
                                      (the target's NewSessionTicket, §1.5 step 5). Each record
                                      is padded with zeros (RFC 8446 §5.4) to its size. NULL/0:
                                      no padding, the four messages in one record */
    size_t pad_count;            /**< 0, 1, 2, 4 or 5 */
} sv_tls13s_params;

/**
 * Start the server side of one connection: choose the suite, make an X25519 key pair, run the
 * key schedule (RFC 8446 §7.1) and queue the first flight as pending output.
 * @param p    the ClientHello and the certificate (see sv_tls13s_params)
 * @param out  receives the new state (free with sv_tls13s_free())
 * @param err  optional: a message saying why a client or the parameters were refused
 * @return 0, or
 *   -EPROTONOSUPPORT when the client does not list TLS 1.3 in supported_versions, sent no X25519
 *                    key share, or offers none of the three suites (or not the template's);
 *   -EINVAL for bad parameters (no Ed25519 key, empty or oversized certificate, a template
 *           that is not a TLS 1.3 ServerHello with an X25519 key share echoing the client's
 *           session id, a HelloRetryRequest, bad pad_count);
 *   -EMSGSIZE when a message does not fit the record size pad_sizes asks for;
 *   -ENOMEM, or -EIO when libcrypto fails.
 */
int sv_tls13s_new(const sv_tls13s_params *p, sv_tls13s **out, sv_error *err);

/** Free the state, cleansing its secrets (sends nothing). NULL-safe. */
void sv_tls13s_free(sv_tls13s *s);

/**
 * Take the client's records and produce application plaintext: consume up to @p n bytes of
 * @p in (*@p used receives how many; at most one partial record is buffered), write up to @p cap
 * plaintext bytes into @p out (@p out must not overlap @p in). A whole record whose plaintext
 * fits is decrypted from @p in straight into @p out, so bytes of @p out past the count returned
 * are scratch (a KeyUpdate's content, a record that failed authentication). Before the handshake completes this consumes the client's
 * ChangeCipherSpec and Finished (checked, RFC 8446 §4.4.4); afterwards KeyUpdate (§4.6.3) and
 * alerts. Call again with n = 0 while it returns bytes. After the client's close_notify the
 * status has SV_LAYER_EOF and further input is dropped. On an error the matching fatal alert
 * (RFC 8446 §6.2) becomes pending output: send it, then close.
 * @return plaintext bytes (0 when none now), or a terminal negative errno:
 *   -EBADMSG a record fails authentication (bad_record_mac);
 *   -EACCES the client's Finished is wrong (decrypt_error);
 *   -EMSGSIZE a record over 2^14 + 256 bytes (record_overflow);
 *   -EPROTO anything else out of place (unexpected record or message, malformed message);
 *   -ECONNRESET the client sent a fatal alert; -ENOMEM, -EIO.
 */
ssize_t sv_tls13s_unwrap(sv_tls13s *s, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                         size_t cap);

/**
 * Encrypt application data towards the client into records of at most 2^14 bytes (first our
 * KeyUpdate if the client asked for one, RFC 8446 §4.6.3).
 * @return bytes accepted (0..n: nothing more once SV_TLS13S_OUT_MAX bytes are pending),
 *         -ENOTCONN before the handshake completed, -EPIPE after sv_tls13s_shutdown(), or the
 *         terminal error of an earlier call.
 */
ssize_t sv_tls13s_wrap(sv_tls13s *s, const uint8_t *p, size_t n);

/** Queue close_notify (RFC 8446 §6.1). Idempotent. @return 0, -ENOTCONN before the
 *  handshake completed, or the terminal error. */
int sv_tls13s_shutdown(sv_tls13s *s);

/** Borrow the pending output (valid until the next call other than out_consume). */
const uint8_t *sv_tls13s_out_peek(const sv_tls13s *s, size_t *len);

/** Drop the first @p n (≤ pending) bytes of pending output. */
void sv_tls13s_out_consume(sv_tls13s *s, size_t n);

/** @return SV_LAYER_UP once the client's Finished was verified, SV_LAYER_EOF after its
 *  close_notify (layer.h). */
unsigned sv_tls13s_status(const sv_tls13s *s);

/**
 * XTLS Vision's switch to direct copy (PROTOCOLS-2.md §2.6), enum sv_layer_direct bits (RAW_IN
 * and RAW_OUT kept once given, WATCH while given): SV_LAYER_WATCH makes unwrap return after each
 * application-data record (status SV_LAYER_RECORDS until RAW_IN); SV_LAYER_RAW_IN makes every later input byte plaintext as it
 * is (any plaintext or record bytes already held go first); SV_LAYER_RAW_OUT makes wrap queue
 * bytes unsealed after the records already pending, and shutdown send nothing (no outer record
 * ever again, not even close_notify or an alert). No record is decrypted past the switch point
 * as long as WATCH was set before the record carrying the command was unwrapped.
 * @return 0, -ENOTCONN before the handshake completed, or the terminal error.
 */
int sv_tls13s_direct(sv_tls13s *s, unsigned bits);

/** The ServerHello handshake message that was sent (type byte, 3-byte length, body), e.g. for
 *  REALITY's ML-DSA-65 signature (§1.5). Valid while @p s lives. */
const uint8_t *sv_tls13s_server_hello(const sv_tls13s *s, size_t *len);

/** @return the chosen cipher suite (0x1301, 0x1302 or 0x1303). */
uint16_t sv_tls13s_suite(const sv_tls13s *s);

#endif
