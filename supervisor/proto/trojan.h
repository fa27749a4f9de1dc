/*
 * Trojan (trojan-gfw protocol) server core, sans-I/O. Wire format: PROTOCOLS.md §4 (addresses
 * in style A, §1.1). The core fills the protocol-core seam of proto.h: the runtime unwraps TLS,
 * feeds the plaintext, and applies the effects.
 *
 * Request: hex(SHA-224(password)) CRLF CMD ATYP ADDR PORT CRLF [payload]. Nothing is consumed
 * before the whole request has been checked, so on any failure every byte received so far is
 * still in the runtime's carry and goes to the fallback (§4.4). CONNECT then relays the client's
 * bytes as they are; UDP ASSOCIATE carries packets ATYP ADDR PORT | length u16be | CRLF | payload
 * in both directions (§4.3).
 */
#ifndef SV_PROTO_TROJAN_H
#define SV_PROTO_TROJAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** Bytes of the password field: lowercase hex of a SHA-224 digest (§4.2). */
#define SV_TROJAN_HASH_HEX 56

/** Trojan commands (§4.2); 0x7f (trojan-go mux) is refused. */
enum sv_trojan_cmd { SV_TROJAN_CONNECT = 0x01, SV_TROJAN_UDP_ASSOCIATE = 0x03 };

/** Longest request header: hash, CRLF, CMD, the longest address, CRLF (§4.2). */
#define SV_TROJAN_HEADER_MAX (SV_TROJAN_HASH_HEX + 2 + 1 + SV_DEST_WIRE_MAX + 2)

/**
 * Largest payload of one UDP packet, either direction (§4.3 "bound length"). 8 KiB is what the
 * reference implementations use: trojan-gfw's client reads datagrams into an 8192-byte buffer,
 * and v2ray's Trojan reader refuses a longer packet, so a longer reply would kill its session.
 */
#define SV_TROJAN_UDP_PAYLOAD_MAX 8192

/** Longest UDP packet on the wire: address, length, CRLF, payload. */
#define SV_TROJAN_UDP_PACKET_MAX (SV_DEST_WIRE_MAX + 2 + 2 + SV_TROJAN_UDP_PAYLOAD_MAX)

/** Most bytes feed() leaves unconsumed: a whole request header, or a whole UDP packet. */
#define SV_TROJAN_CARRY_MAX                                                                        \
    (SV_TROJAN_UDP_PACKET_MAX > SV_TROJAN_HEADER_MAX ? SV_TROJAN_UDP_PACKET_MAX                    \
                                                     : SV_TROJAN_HEADER_MAX)

/**
 * The Trojan core (proto.h's contract), with these specifics:
 *  - creds_new: one password per user, the user's secret (the panel uuid, §4.2). The table maps
 *    the 56-byte lowercase hex SHA-224 to the user's index in @p users (open addressing over a
 *    hash of all 56 bytes; a hit is confirmed with a constant-time compare). Errors: -EINVAL
 *    "user set T: users A and B have the same password" (both user ids), "user set T: user A has
 *    an empty secret", "user set T: more than SV_USERS_MAX users"; -ENOMEM; -EIO when OpenSSL has
 *    no SHA-224. @p in is not used and may be NULL.
 *  - feed: empties @p fx first (its effects are those of this call). Request failures, decided at
 *    the first byte that proves them (a byte that is not lowercase hex among the first 56, no
 *    CRLF after them, an unknown hash, a CMD other than CONNECT / UDP ASSOCIATE, a bad address, no
 *    CRLF after it) give SV_FX_ERROR with SV_PROBE_FALLBACK and data/len = all @p n bytes given;
 *    errors -EPROTO (malformed), -EACCES (unknown password), -EPROTONOSUPPORT (CMD). A complete
 *    request gives SV_FX_AUTHENTICATED (principal = user index) and SV_FX_OPEN (stream 0, network
 *    TCP for CONNECT, UDP for UDP ASSOCIATE, with the request's address); then, for CONNECT, every
 *    byte after the header is SV_FX_TO_OUTBOUND (stream 0) pointing into @p p; for UDP, each whole
 *    packet is one SV_FX_DATAGRAM (stream 0, its destination, payload in @p p) and an incomplete
 *    packet stays unconsumed. After authentication every error has SV_PROBE_CLOSE and no data:
 *    -EPROTO for a bad packet address or missing CRLF, -EMSGSIZE for a length above
 *    SV_TROJAN_UDP_PAYLOAD_MAX.
 *  - carry_max: SV_TROJAN_CARRY_MAX.
 *  - frame: no downstream framing for CONNECT, a plain copy (frame_max(len) = len).
 *  - frame_datagram: ATYP ADDR PORT | length | CRLF | payload with @p from the remote's source
 *    address; -EINVAL for a bad address or a payload above SV_TROJAN_UDP_PAYLOAD_MAX (the runtime
 *    drops that datagram), -EMSGSIZE when @p cap is too small.
 * Extensions (proto_ext.h): datagram.
 */
extern const sv_proto_ops sv_trojan_ops;

/**
 * Write the Trojan password field for @p password: lowercase hex of SHA-224 over its @p len
 * bytes (§4.2), NUL-terminated.
 * @param out  SV_TROJAN_HASH_HEX + 1 bytes
 * @return 0, or -EIO when the digest fails (out is then the empty string).
 */
int sv_trojan_password_hex(const void *password, size_t len, char *out);

/**
 * Look up a password field in a table made by sv_trojan_ops.creds_new.
 * @param hex  SV_TROJAN_HASH_HEX bytes (not NUL-terminated; any bytes)
 * @return the user's index in the set the table was built from, or -1.
 */
int sv_trojan_creds_lookup(const void *creds, const uint8_t *hex);

#endif
