/*
 * Shadowsocks over Mux.Cool: the SIP003 v2ray-plugin with mux (its default, mux=N for
 * N > 0) wraps its WebSocket stream in Mux.Cool (PROTOCOLS.md §7), and each sub-connection
 * carries one Shadowsocks AEAD stream (§2) of its own. A New frame's address is a placeholder
 * (v2ray-plugin's dokodemo-door target, 127.0.0.1:0 seen from ss-v2ray-plugin 1.3.1): the
 * destination is the one in that stream's Shadowsocks header.
 */
#ifndef SV_PROTO_SS_MUX_H
#define SV_PROTO_SS_MUX_H

#include "supervisor/proto/proto.h"

/** Sessions a connection may open before one of them authenticated (its header read; a New
 *  beyond is refused as a probe); v2ray-plugin opens at most mux (N) at once. */
#define SV_SS_MUX_UNAUTH_MAX 16

/**
 * The core (proto.h's contract): a Mux.Cool decoder (mux.h) whose TCP sessions each run a
 * Shadowsocks core (shadowsocks.h) with its own salt, keys and chunk carry.
 *  - creds_new / creds_free / attach_replay: those of sv_shadowsocks_ops (the same table, so the
 *    inbound's SS-UDP and salt filter are shared).
 *  - set_guide / scan / scan_result / more: those of sv_shadowsocks_ops for the
 *    sessions before the connection authenticated: a session's first chunk walks the guide
 *    (the IP's hint, the worker's order) and past its limit feed gives SV_FX_SCAN (that
 *    session's salt and length chunk; what follows in the input is not consumed), scan is
 *    sv_ss_scan() over the keyring, scan_result gives the answer to that session, more() is
 *    true until the next feed (the same bytes). A key found for a session whose header has not
 *    come yet becomes the guide's hint, so a session starting meanwhile tries it first (no second
 *    scan). A session after the connection authenticated tries the connection's user's key
 *    alone: one trial, never a scan. Every effect that follows a trial decryption carries its
 *    keys tried (proto.h `trials`).
 *  - feed: the first session whose Shadowsocks header (address) is read gives
 *    SV_FX_AUTHENTICATED (principal = key index, multiplexed); each session then gives
 *    SV_FX_OPEN (stream = session ID, the destination of its header) and SV_FX_TO_OUTBOUND
 *    (its plaintext, decrypted in place in @p p or in the session's carry). One user per
 *    connection (a client's mux carries one ss-local, one password): a session of another user
 *    is ended (End with error; at its first chunk, or at its header when it began before the
 *    connection authenticated), as is one whose stream fails after the connection
 *    authenticated; a client End gives SV_FX_CLOSE. UDP sessions are ended. Before the connection
 *    authenticated nothing is answered: a failure (bad frame, wrong key, replayed salt, more than
 *    SV_SS_MUX_UNAUTH_MAX sessions) is SV_FX_ERROR with SV_PROBE_DRAIN (§1.4 (b)); after, a
 *    connection-level failure is SV_PROBE_CLOSE.
 *  - frame(stream): the stream's Shadowsocks chunks in Keep frames; nothing (0) for a stream
 *    that ended here. frame_end(stream): its End frame (0 when it already ended).
 * Extensions (proto_ext.h): replay, guide, backlog (more), end.
 */
extern const sv_proto_ops sv_ss_mux_ops;

#endif
