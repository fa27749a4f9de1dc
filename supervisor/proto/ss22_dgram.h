/*
 * Shadowsocks 2022 UDP (PROTOCOLS.md §3.5, §3.6) on the datagram seam of dgram.h.
 */
#ifndef SV_PROTO_SS22_DGRAM_H
#define SV_PROTO_SS22_DGRAM_H

#include "supervisor/proto/dgram.h"

/**
 * Shadowsocks 2022 datagrams over the credential table of sv_ss2022_ops (ss2022.h):
 *  - open: sv_ss22_udp_open() at @p now (no guide: the identity header or the single user
 *    names the user): -EBADMSG (no user, the AEAD fails), -ETIME (timestamp beyond ±30 s),
 *    -EPROTO (short, type, padding, address); session_id and packet_id are the client's.
 *  - session_match: an association per client session ID (§3.5); it follows the client to its
 *    latest source address.
 *  - session_init: the client's session ID and our own, 8 random bytes (never the client's).
 *  - session_accept: the packet ID passes the session's sliding window (SV_SS22_UDP_WINDOW);
 *    a replayed or too old one is dropped.
 *  - seal: sv_ss22_udp_seal() with our session ID and the next packet ID (from 0), the
 *    client's session ID and @p now.
 */
extern const sv_dgram_ops sv_ss2022_dgram_ops;

#endif
