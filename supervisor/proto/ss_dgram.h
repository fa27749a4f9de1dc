/*
 * Shadowsocks AEAD UDP (PROTOCOLS.md §2.4) on the datagram seam of dgram.h.
 */
#ifndef SV_PROTO_SS_DGRAM_H
#define SV_PROTO_SS_DGRAM_H

#include "supervisor/proto/dgram.h"

/**
 * Shadowsocks AEAD datagrams over the credential table of sv_shadowsocks_ops (ss_ops.h; also
 * Shadowsocks over Mux.Cool's, which is the same table):
 *  - open: sv_ss_udp_open_guided() over the table's keyring (a trial decryption as the guide
 *    says): -EBADMSG when no key opens it, -EPROTO for a bad address or a datagram
 *    shorter than salt + tag, -EAGAIN past the guide's limit; @p now is not used.
 *  - scan: sv_ss_scan() over the keyring (guided).
 *  - no session state, no session_match: an association is the client's (address, port), bound
 *    to the user whose key opened its first datagram.
 *  - seal: sv_ss_udp_seal_ctx() with that user's master key: salt | AEAD(address ‖ payload).
 */
extern const sv_dgram_ops sv_shadowsocks_dgram_ops;

#endif
