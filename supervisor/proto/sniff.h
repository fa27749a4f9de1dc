/*
 * Sniffing ("Sniffing"; Xray's `sniffing` with `routeOnly`): the host name a client
 * names in its first bytes — the server_name of a TLS ClientHello (RFC 8446 §4.1.2, RFC 6066 §3)
 * or the Host header of an HTTP/1 request (RFC 9112 §3, RFC 9110 §7.2). Pure and sans-I/O: no
 * socket, clock, log or allocation. The runtime routes on the name as an extra domain candidate
 * while it still dials the destination the client asked for.
 */
#ifndef SV_PROTO_SNIFF_H
#define SV_PROTO_SNIFF_H

#include <stddef.h>
#include <stdint.h>

/** Room for a sniffed name and its NUL (a DNS name has at most 253 characters). */
#define SV_SNIFF_NAME_CAP 256

/** Bytes the runtime waits for at most before it gives up on a name (one ClientHello fits). */
#define SV_SNIFF_MAX 8192

/** Time (ms) the runtime waits at most for the client's first bytes (servers-speak-first). */
#define SV_SNIFF_MS 300

typedef enum sv_sniff_result {
    SV_SNIFF_FOUND = 0,     /**< a name was found */
    SV_SNIFF_NEED_MORE = 1, /**< the bytes so far are a prefix of TLS or HTTP/1 without a name */
    SV_SNIFF_NONE = 2,      /**< not a ClientHello or HTTP/1 request, or one without a valid name */
} sv_sniff_result;

/**
 * Look for the host name in the first @p len bytes @p p a client sent on a stream.
 * @param name  receives the name, lower-cased and NUL-terminated, on SV_SNIFF_FOUND (an HTTP
 *              Host's port is dropped); left untouched otherwise
 * @return SV_SNIFF_FOUND, SV_SNIFF_NEED_MORE (call again with more bytes, the same prefix
 *         first; the caller bounds how long, e.g. SV_SNIFF_MAX and SV_SNIFF_MS) or SV_SNIFF_NONE.
 *         The answer for a prefix never contradicts the answer for the whole: FOUND and NONE
 *         are final. A name must be 1..253 characters of letters, digits, '-', '_' and '.';
 *         an IPv6 literal Host is NONE. Only the first TLS record is read (a ClientHello split
 *         over records is NONE).
 */
sv_sniff_result sv_sniff(const uint8_t *p, size_t len, char name[SV_SNIFF_NAME_CAP]);

#endif
