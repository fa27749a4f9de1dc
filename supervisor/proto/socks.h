/*
 * SOCKS5 server core (RFC 1928, user name / password of RFC 1929), sans-I/O. Wire format:
 * PROTOCOLS-3.md §4.1. The core fills the protocol-core seam of proto.h: the runtime feeds the
 * client's bytes and applies the effects.
 *
 * A connection goes greeting (05 NMETHODS METHODS), then, when the client offers user name /
 * password, the sub-negotiation (01 ULEN UNAME PLEN PASSWD), then one request
 * (05 CMD 00 ATYP ADDR PORT). CONNECT and UDP ASSOCIATE (§4.2, through the runtime's relay
 * socket: proto_ext.h sv_proto_ext_relay) are served; BIND is refused with "command not
 * supported".
 */
#ifndef SV_PROTO_SOCKS_H
#define SV_PROTO_SOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** SOCKS version byte of the greeting, the request and the replies (RFC 1928 §3). */
#define SV_SOCKS_VERSION 0x05
/** Version byte of the user name / password sub-negotiation (RFC 1929 §2). */
#define SV_SOCKS_AUTH_VERSION 0x01

/** Methods of the greeting (RFC 1928 §3). */
enum sv_socks_method {
    SV_SOCKS_METHOD_NONE = 0x00,     /**< no authentication */
    SV_SOCKS_METHOD_USERPASS = 0x02, /**< user name / password (RFC 1929) */
    SV_SOCKS_METHOD_REFUSED = 0xff,  /**< no acceptable method */
};

/** Request commands (RFC 1928 §4). */
enum sv_socks_cmd { SV_SOCKS_CONNECT = 0x01, SV_SOCKS_BIND = 0x02, SV_SOCKS_UDP_ASSOCIATE = 0x03 };

/** Reply codes the core sends (RFC 1928 §6). */
enum sv_socks_rep {
    SV_SOCKS_REP_OK = 0x00,
    SV_SOCKS_REP_FAILURE = 0x01, /**< general failure (the UDP relay could not be opened) */
    SV_SOCKS_REP_CMD_UNSUPPORTED = 0x07,
    SV_SOCKS_REP_ATYP_UNSUPPORTED = 0x08,
};

/** Longest greeting: VER NMETHODS and 255 methods. */
#define SV_SOCKS_GREETING_MAX (2 + 255)
/** Longest sub-negotiation: VER ULEN UNAME(255) PLEN PASSWD(255). */
#define SV_SOCKS_AUTH_MAX (3 + 255 + 255)
/** Longest request: VER CMD RSV, ATYP, a 255-byte domain with its length byte, PORT. */
#define SV_SOCKS_REQUEST_MAX (4 + 1 + 255 + 2)
/** Largest payload of one relayed datagram (an IPv4 UDP datagram's). */
#define SV_SOCKS_UDP_PAYLOAD_MAX 65507

/** Length of every reply the core writes: VER REP RSV ATYP(IPv4) 0.0.0.0 port 0. */
#define SV_SOCKS_REPLY_LEN 10

/** Most bytes feed() leaves unconsumed: the longest of one greeting, sub-negotiation or
 *  request (the sub-negotiation's 513 bytes). */
#define SV_SOCKS_CARRY_MAX SV_SOCKS_AUTH_MAX

/**
 * The SOCKS5 core (proto.h's contract), with these specifics:
 *  - creds_new: sv_userpass_new(@p users, no_auth, ...) with no_auth = @p in != NULL &&
 *    @p in->proxy_no_auth: each user's secret is its user name and its password (PROTOCOLS-3.md
 *    §4.1, Xboard-Node's user = pass = uuid); sv_userpass_new's errors. creds_free:
 *    sv_userpass_free.
 *  - feed: empties @p fx first. Handles as many whole phases as @p p holds, in one call: each
 *    whole greeting / sub-negotiation / request is consumed; a phase whose bytes are not all
 *    there is not consumed at all (the return value counts the whole phases before it, 0 when
 *    there is none). Fields are checked in wire order as soon as their byte is there, so whole
 *    and piecewise input give the same effects. Every TO_CLIENT and refusal's data point into
 *    the connection state and stay valid until deinit.
 *    - greeting: a first byte other than 05 (SOCKS4 included) or NMETHODS 0: SV_FX_ERROR -EPROTO,
 *      SV_PROBE_CLOSE. Method 02 offered: SV_FX_TO_CLIENT "05 02", then the sub-negotiation.
 *      Else method 00 offered and the table admits anonymous clients (sv_userpass_anonymous >= 0):
 *      SV_FX_TO_CLIENT "05 00", SV_FX_AUTHENTICATED (principal = that user). Else SV_FX_ERROR
 *      -EACCES, SV_PROBE_ANSWER, data "05 FF".
 *    - sub-negotiation: a version byte other than 01: -EPROTO, SV_PROBE_CLOSE. The name and
 *      password found (sv_userpass_lookup): SV_FX_TO_CLIENT "01 00", SV_FX_AUTHENTICATED
 *      (principal = the user's index). Else SV_FX_ERROR -EACCES, SV_PROBE_ANSWER, data "01 01"
 *      (RFC 1929 §2: the server closes after a failure).
 *    - request: VER other than 05 or RSV other than 00: -EPROTO, SV_PROBE_CLOSE. CMD BIND or
 *      unknown (decided at the CMD byte): -EPROTONOSUPPORT, SV_PROBE_ANSWER, data
 *      "05 07 00 01 00 00 00 00 00 00". ATYP not 01/03/04: -EAFNOSUPPORT, SV_PROBE_ANSWER, data
 *      "05 08 00 01 00 00 00 00 00 00". A zero-length domain or one holding a NUL: -EPROTO,
 *      SV_PROBE_CLOSE. CONNECT: SV_FX_TO_CLIENT "05 00 00 01 00 00 00 00 00 00" (success is
 *      replied before the dial, as Xray does; a failed dial just closes), SV_FX_OPEN (stream 0,
 *      network TCP, the request's address), then the bytes after the request as one
 *      SV_FX_TO_OUTBOUND (stream 0, pointing into @p p).
 *      UDP ASSOCIATE: SV_FX_OPEN (stream 0, network UDP, the request's address, which the
 *      runtime does not use); no reply: the runtime opens the relay and sends relay_ready()'s.
 *    - after CONNECT every byte given is one SV_FX_TO_OUTBOUND and all are consumed; after UDP
 *      ASSOCIATE every byte is consumed and dropped (the control connection carries none).
 *    - after a failure every call returns the same error with one SV_FX_ERROR, SV_PROBE_CLOSE,
 *      no data (the refusal is answered once).
 *    One call gives at most 6 effects (greeting, sub-negotiation, request and data pipelined).
 *  - carry_max: SV_SOCKS_CARRY_MAX.
 *  - frame: no downstream framing, a plain copy (frame_max(len) = len).
 *  - relay (UDP ASSOCIATE): relay_ready "05 00 00 ATYP BND.ADDR BND.PORT" with the relay's
 *    address; relay_failed "05 01 00 01 0*6"; relay_open takes "00 00 FRAG ATYP ADDR PORT DATA",
 *    -EOPNOTSUPP for FRAG ≠ 0 (not reassembled), -EPROTO for a bad RSV or address.
 *  - frame_datagram: "00 00 00 ATYP ADDR PORT" (the remote's) and the payload; -EINVAL for a bad
 *    address or a payload above SV_SOCKS_UDP_PAYLOAD_MAX, -EMSGSIZE when @p cap is too small.
 * Extensions (proto_ext.h): datagram, relay, and direct: SV_DIRECT_IN | SV_DIRECT_OUT for a
 * CONNECT tunnel on an inbound without TLS (the runtime may splice it), else 0.
 */
extern const sv_proto_ops sv_socks_ops;

#endif
