/*
 * Shadowsocks AEAD (PROTOCOLS.md §2) on the protocol-core seam of proto.h.
 */
#ifndef SV_PROTO_SS_OPS_H
#define SV_PROTO_SS_OPS_H

#include "supervisor/proto/proto.h"
#include "supervisor/proto/shadowsocks.h"

/**
 * The Shadowsocks core (proto.h's contract) over the sv_ss_tcp API:
 *  - creds_new: one master key per user from its secret (§2.2); -ENOMEM, or -EIO with a message
 *    naming the inbound when OpenSSL cannot compute MD5 (no key is made up then).
 *  - attach_replay: the inbound's salt filter, checked after the first chunk authenticates.
 *  - set_guide: the hint, order and limit of the first chunk's trial decryption;
 *    past the limit feed gives SV_FX_SCAN (the salt and length chunk), scan is sv_ss_scan()
 *    over the keyring, scan_result sv_ss_tcp_scan_result(), and more() is true while an
 *    answer waits for the next feed.
 *  - feed: one chunk per inner step, decrypted in place; SV_FX_AUTHENTICATED (principal = key
 *    index), SV_FX_OPEN (stream 0, TCP), SV_FX_TO_OUTBOUND pointing into @p p. A failure before
 *    the relay (wrong key, probe, replayed salt, bad address) is SV_FX_ERROR with
 *    SV_PROBE_DRAIN (PROTOCOLS.md §1.4 (b)); a failure while relaying has SV_PROBE_CLOSE.
 *  - frame: sv_ss_tcp_seal_to() (salt on the first call, chunks of at most 0x3FFF bytes);
 *    frame_max(len) = SV_SS_SEALED_MAX(len). No datagram framing inside the stream: datagrams on
 *    the inbound's own UDP socket are the datagram core's (ss_dgram.h), over the same table.
 * Extensions (proto_ext.h): reload (creds_new_from), replay, guide, backlog (more).
 */
extern const sv_proto_ops sv_shadowsocks_ops;

/** The keyring inside a credential table made by sv_shadowsocks_ops.creds_new (its datagram
 *  core, ss_dgram.h). */
const sv_ss_keyring *sv_ss_creds_ring(const void *creds);

/** sv_ss_scan() over such a table's keyring (any thread): a datagram's scan off the loop.
 * @return the user's index, or a negative errno; *@p trials the keys tried. */
int sv_ss_creds_scan(const void *creds, const uint8_t *in, size_t n, unsigned *trials);

/** The salt filter attached to such a table (attach_replay), or NULL (Shadowsocks over
 *  Mux.Cool, ss_mux.h). */
sv_replay *sv_ss_creds_replay(const void *creds);

#endif
