/*
 * VLESS (version 0, no flow or XTLS Vision, encryption none) server core, sans-I/O. Wire format: PROTOCOLS.md
 * §5 (addresses in style B, §1.1). The core fills the protocol-core seam of proto.h: the runtime
 * unwraps TCP or TLS, feeds the plaintext and applies the effects.
 *
 * Request: version 0 | UUID (16) | addons length M | addons | command | port, type, address |
 * payload. Nothing is consumed before the whole request has been checked, so every byte received
 * so far can still go to the inbound's fallback. Command 1 (TCP) relays the client's bytes as
 * they are; command 2 (UDP) carries u16be length | datagram in both directions to the one
 * destination of the request (§5.3). Command 3 (Mux.Cool) is refused until the runtime has
 * several flows per connection. Downstream, the response header 00 00 goes before the first
 * byte (§5.2).
 */
#ifndef SV_PROTO_VLESS_H
#define SV_PROTO_VLESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** Bytes of a user id on the wire (§5.1). */
#define SV_VLESS_UUID_LEN 16

/** VLESS commands (§5.1). */
enum sv_vless_cmd { SV_VLESS_TCP = 0x01, SV_VLESS_UDP = 0x02, SV_VLESS_MUX = 0x03 };

/** Longest request header: version, UUID, M, 255 bytes of addons, command, port, type, the
 *  longest domain (§5.1). */
#define SV_VLESS_HEADER_MAX (1 + SV_VLESS_UUID_LEN + 1 + 255 + 1 + 2 + 1 + 1 + 255)

/**
 * Largest datagram delivered, either direction (§5.3 "bound length"): v2ray 4.34 sends at most
 * 2046 bytes and Xray about 8 KiB, so 16 KiB covers both, keeps a whole datagram within the
 * runtime's carry and a framed reply within the TLS layer's output queue. A longer one from the
 * client (up to 65535, which the wire allows) is read and dropped, a longer reply is dropped;
 * the connection goes on.
 */
#define SV_VLESS_UDP_PAYLOAD_MAX 16384

/** Most bytes feed() leaves unconsumed: a whole request header, or a length and a datagram. */
#define SV_VLESS_CARRY_MAX                                                                         \
    (2 + SV_VLESS_UDP_PAYLOAD_MAX > SV_VLESS_HEADER_MAX ? 2 + SV_VLESS_UDP_PAYLOAD_MAX           \
                                                        : SV_VLESS_HEADER_MAX)

/** The response header: version 0, addons length 0 (§5.2). */
#define SV_VLESS_RESPONSE_LEN 2

/**
 * The VLESS core (proto.h's contract), with these specifics:
 *  - creds_new: one UUID per user, the user's secret (the panel uuid) in the 8-4-4-4-12 text
 *    form or as 32 hex digits, either case. The table maps the 16 raw bytes to the user's index
 *    in @p users (open addressing; a hit is confirmed with a constant-time compare). It also
 *    records whether @p in has a fallback (@p in may be NULL: none). Errors: -EINVAL
 *    "user set T: users A and B have the same uuid", "user set T: user A has a uuid that is not
 *    a UUID", "user set T: more than SV_USERS_MAX users"; -ENOMEM.
 *  - feed: empties @p fx first. Until the UUID is known (a version byte other than 0, an unknown
 *    UUID) the request fails with SV_FX_ERROR, data/len = all @p n bytes given, and policy
 *    SV_PROBE_FALLBACK when the inbound has a fallback, else SV_PROBE_DRAIN (PROTOCOLS.md §1.4:
 *    a prober learns nothing from when or how the connection ends); errors -EPROTO (version),
 *    -EACCES (UUID). Once the UUID matched, a bad rest of the header fails with SV_PROBE_CLOSE
 *    and no data: the peer holds a user's secret, so it is a client to fail fast, not a prober:
 *    -EPROTO (malformed addons or address), -EPROTONOSUPPORT (an unknown command, a flow other
 *    than xtls-rprx-vision, Vision with command 2), -EPERM (the Vision flow on an inbound
 *    without it, or a TCP request / a Mux that is not XUDP without it on an inbound with it:
 *    PROTOCOLS-2.md §2.2, vision.h). With the Vision flow (`reality.vision` inbounds) the body
 *    of command 1 or 3 is un-padded (vision.h), frames towards the client are padded until
 *    the sender's rules stop, and the optional `direct` op gives the SV_DIRECT_* bits of
 *    §2.6; under Mux.Cool the un-padded bytes the decoder has not taken wait in the core
 *    (`more` says when effects are held). Command 3 (Mux.Cool, §7.1, no address) gives SV_FX_AUTHENTICATED
 *    with multiplexed set; the body then goes through the Mux.Cool decoder (mux.h: streams =
 *    session IDs, its -EPROTO ends the connection with SV_PROBE_CLOSE). A complete request gives SV_FX_AUTHENTICATED
 *    (principal = user index) and SV_FX_OPEN (stream 0, the request's address, network TCP or
 *    UDP); then, for TCP, every later byte is SV_FX_TO_OUTBOUND (stream 0) pointing into @p p;
 *    for UDP, each whole length-prefixed datagram of at most SV_VLESS_UDP_PAYLOAD_MAX bytes is one
 *    SV_FX_DATAGRAM (stream 0, to the request's address, payload in @p p), a longer one is
 *    consumed and dropped, and an incomplete one stays unconsumed.
 *  - carry_max: SV_VLESS_CARRY_MAX.
 *  - frame: the response header before the first bytes, then a plain copy, or under Mux.Cool
 *    Keep frames of the stream (frame_max(len) = sv_mux_frame_max(len) +
 *    SV_VLESS_RESPONSE_LEN).
 *  - frame_end: nothing, or under Mux.Cool the stream's End frame (option 0x02 with abort);
 *    the decoder forgets the session.
 *  - frame_datagram: [response header on the first] u16be length | payload; @p from is not
 *    written (the destination is the request's; under Mux.Cool one Keep frame). -EINVAL for a payload above
 *    SV_VLESS_UDP_PAYLOAD_MAX (the runtime drops that datagram), -EMSGSIZE when @p cap is too
 *    small.
 * Extensions (proto_ext.h): backlog (more), datagram, end, direct (Vision).
 */
extern const sv_proto_ops sv_vless_ops;

/**
 * Parse a user id: 36 characters 8-4-4-4-12 or 32 hex digits, either case (Xray's
 * uuid.ParseString without its name-based ids).
 * @param out  SV_VLESS_UUID_LEN bytes
 * @return 0, or -EINVAL (out is then zeroed).
 */
int sv_vless_uuid_parse(const char *text, uint8_t *out);

/**
 * Look up a user id in a table made by sv_vless_ops.creds_new.
 * @param uuid  SV_VLESS_UUID_LEN raw bytes
 * @return the user's index in the set the table was built from, or -1.
 */
int sv_vless_creds_lookup(const void *creds, const uint8_t *uuid);

#endif
