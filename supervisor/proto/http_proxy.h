/*
 * HTTP proxy server core, sans-I/O (PROTOCOLS-3.md §4.3): CONNECT tunnels (RFC 9110 §9.3.6) and
 * plain forwarding of absolute-form requests (RFC 9112 §3.2.2), with Basic authentication
 * (RFC 9110 §11.7.1, RFC 7617). The core fills the protocol-core seam of proto.h: the runtime
 * feeds the client's bytes and applies the effects.
 *
 * One request per connection: the first request head decides the destination. After a CONNECT
 * every later byte goes to the outbound as it is; after a forwarded request only its body does
 * (for its Content-Length, or to its last chunk and trailers), and later requests are dropped.
 */
#ifndef SV_PROTO_HTTP_PROXY_H
#define SV_PROTO_HTTP_PROXY_H

#include <stddef.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** Longest request head, request line to the empty line included (the answer beyond is 431). */
#define SV_HTTP_PROXY_HEAD_MAX 16384

/** Most header lines of a request head (the answer beyond is 431). */
#define SV_HTTP_PROXY_FIELDS_MAX 128

/** Longest base64 credential of Proxy-Authorization: a name and a password of
 *  SV_USERPASS_FIELD_MAX bytes each and their colon (a longer one is refused with 407). */
#define SV_HTTP_PROXY_TOKEN_MAX 684

/**
 * The HTTP proxy core (proto.h's contract), with these specifics:
 *  - creds_new: sv_userpass_new(users, in != NULL && in->proxy_no_auth): a user's name and
 *    password are both its secret (PROTOCOLS-3.md §4.1); its errors.
 *  - feed: empties @p fx first. Consumes nothing until the whole request head (up to CRLF CRLF)
 *    is there. Every refusal is SV_FX_ERROR with SV_PROBE_ANSWER, data/len = a static answer
 *    ending with "Connection: close" (valid for the life of the program), as its last effect:
 *     - 400 Bad Request, -EPROTO: decided as soon as the request line is complete when the line
 *       is at fault: not `METHOD SP target SP HTTP/1.0|1.1`, CONNECT without an authority-form
 *       `host:port` (IPv6 in brackets, port 1..65535 required), another method without an
 *       absolute-form `http://host[:port][/path][?query]` target (scheme case-insensitive;
 *       https, other schemes, user info, origin-form, `*` refused), a host that is not an IP
 *       literal or a name of letters, digits, '-', '.', '_' (1..255 bytes); HTTP/2's preface
 *       is such a line. Then, with the whole head: a header line without a colon, with
 *       space before it or a name that is not a token, a folded line, CR, LF or NUL in a value,
 *       two Host or two Proxy-Authorization lines, Content-Length with Transfer-Encoding.
 *     - 407 Proxy Authentication Required with `Proxy-Authenticate: Basic realm="proxy"`,
 *       -EACCES: no Proxy-Authorization when the table has no anonymous user, or one that is
 *       not `Basic` (case-insensitive) and a base64 (RFC 4648 §4, padding optional) of
 *       `user:pass` split at the first colon, a known user and its password.
 *     - 431 Request Header Fields Too Large, -EMSGSIZE: no end of head within
 *       SV_HTTP_PROXY_HEAD_MAX bytes, or more than SV_HTTP_PROXY_FIELDS_MAX header lines.
 *    -ENOMEM (SV_PROBE_CLOSE, no data) when the rewritten head cannot be allocated.
 *    An accepted request gives SV_FX_AUTHENTICATED (principal = user index, or
 *    sv_userpass_anonymous() without credentials) and SV_FX_OPEN (stream 0, network TCP,
 *    SV_ATYP_IPV4 / SV_ATYP_IPV6 with ip for a literal, else SV_ATYP_DOMAIN; port 80 by default
 *    for http). CONNECT then gives SV_FX_TO_CLIENT "HTTP/1.1 200 Connection established" and an
 *    empty line (static), and the bytes after the head as SV_FX_TO_OUTBOUND. Plain forwarding
 *    gives one SV_FX_TO_OUTBOUND holding the rewritten head (in the core's state, freed at the
 *    next call): the request line in origin form (`METHOD /path?query HTTP/1.x`, "/" for an
 *    empty path), every header line as it came and in order but for the hop-by-hop ones
 *    (RFC 9110 §7.6.1: Proxy-Authorization, Proxy-Connection, Connection, Keep-Alive, TE,
 *    Trailer, Upgrade, and every field Connection names but Host, Content-Length and
 *    Transfer-Encoding, which frame the request and are kept), the Host line's value replaced
 *    by the target's `host[:port]` (RFC 9112 §3.2.2) or such a line added at the end when
 *    there was none, then `Connection: close` and the empty line; then the bytes after the
 *    head as SV_FX_TO_OUTBOUND, as far as the body goes. The body: with Content-Length (1 to 18
 *    digits, one such line; else 400) that many bytes are SV_FX_TO_OUTBOUND as they are, and
 *    every later byte is consumed and dropped (a pipelined request never reaches the origin
 *    with its Proxy-Authorization); without Content-Length or Transfer-Encoding, nothing
 *    after the head passes; with Transfer-Encoding the chunked body (RFC 9112 §7.1: hex size,
 *    extensions, data, CRLF; the last chunk and the trailers) passes as it is and later bytes
 *    are dropped; a malformed framing (no size or one of 16 digits or more, no CRLF after the
 *    data) ends the connection: -EPROTO, SV_PROBE_CLOSE.
 *    After a refusal every call returns the same error (SV_PROBE_CLOSE, no data).
 *  - carry_max: SV_HTTP_PROXY_HEAD_MAX.
 *  - frame: a plain copy (frame_max(len) = len).
 * Per-connection state: a few bytes; the rewritten head is allocated only between the call that
 * makes it and the next one (or deinit). Extension (proto_ext.h): direct, SV_DIRECT_IN |
 * SV_DIRECT_OUT in a CONNECT tunnel on an inbound without TLS (the
 * runtime may splice it), else 0.
 */
extern const sv_proto_ops sv_http_proxy_ops;

#endif
