/*
 * WebSocket server layer (RFC 6455 server side, PROTOCOLS.md §8).
 * Sans-I/O, one layer of a transport chain (layer.h): over TCP or over TLS.
 *
 * Handshake (§8.1): the client's HTTP/1.1 upgrade request is read (at most SV_WS_HEAD_MAX bytes)
 * and checked: GET, HTTP/1.1, the configured path (its query ignored, §8.3), the configured Host
 * when one is set, Upgrade: websocket, Connection: Upgrade, Sec-WebSocket-Version: 13 and a key
 * of 16 bytes in base64. A request that fails any check is refused (SV_LAYER_REFUSED): the layer
 * then passes the request and everything after it through as it is, so that the runtime answers
 * like a web server (404) or relays it to the inbound's fallback, never with a WebSocket error.
 * Early data (§8.3): a Sec-WebSocket-Protocol value that decodes as base64url is the
 * start of the stream and is echoed in the 101 answer.
 *
 * Frames (§8.2): client frames must be masked, RSV bits 0, control frames ≤ 125 bytes and not
 * fragmented, data frames (binary or text, with continuations) at most SV_WS_FRAME_MAX bytes;
 * the stream above is the concatenation of data payloads. A ping is answered with a pong of the
 * same payload; a Close is EOF for the layer above (SV_LAYER_EOF) and is answered with a Close
 * echoing its code when this side ends (shutdown). A protocol error queues a Close (1002, or
 * 1009 for an oversized frame) and fails the layer. Frames towards the client are unmasked
 * binary frames with the shortest length encoding.
 *
 * Framing is our own rather than wslay's (wslay was the choice unless it cost more than
 * 5% CPU s/GB): wslay_frame_recv copies every payload byte into a 4 KiB buffer of its own and
 * unmasks it a byte at a time; tests/bench/ws_framer.c measured 2.6 CPU s/GB for it against
 * 0.16-0.21 s/GB for this layer (frames of 1400 to 16384 bytes), i.e. wslay would add about
 * 2.4 s/GB, twice the whole CPU cost of Trojan over TLS (about 1.1-1.5 s/GB in `make bench`).
 */
#ifndef SV_TRANSPORT_WS_H
#define SV_TRANSPORT_WS_H

#include <stddef.h>
#include <stdint.h>

#include "supervisor/transport/layer.h"

/** Largest upgrade request read (PROTOCOLS.md §8.1: a bounded head, e.g. 8 KiB). */
#define SV_WS_HEAD_MAX (8u * 1024u)
/** Largest data frame accepted (§8.2: bound frame length, close with 1009 above it). */
#define SV_WS_FRAME_MAX (1024u * 1024u)
/** Pending bytes towards the lower layer above which wrap() accepts nothing (one 64 KiB frame
 *  with its header fits). */
#define SV_WS_OUT_MAX (64u * 1024u + 10u)
/** Longest path and Host a configuration takes. */
#define SV_WS_PATH_MAX 256

/** The immutable, shared settings of one inbound's WebSocket layer. */
typedef struct sv_ws_conf {
    char *path; /**< "/ws": compared with the request path without its query */
    char *host; /**< compared with the Host header (its port ignored, case-insensitive), or NULL
                     for any */
} sv_ws_conf;

/**
 * Build a configuration. @p path must start with '/' (a query after '?' is dropped: the `?ed=`
 * form of §8.3 names the early-data size, not the path); @p host may be NULL or "" (no check).
 * @return the configuration (free with sv_ws_conf_free()), or NULL on allocation failure or a
 *         path that does not start with '/' or is longer than SV_WS_PATH_MAX.
 */
sv_ws_conf *sv_ws_conf_new(const char *path, const char *host);

/** Free a configuration (NULL-safe). Every session made from it must be gone. */
void sv_ws_conf_free(sv_ws_conf *conf);

/**
 * The WebSocket layer (layer.h): conf is an sv_ws_conf. Per connection it holds about 200 bytes
 * while idle; the request head (≤ SV_WS_HEAD_MAX) only during the handshake, the output queue
 * only while it is not empty. unwrap() fails with -EPROTO on a protocol error (a Close frame is
 * then pending: send it before closing), -EMSGSIZE on a frame above SV_WS_FRAME_MAX, -ENOMEM.
 * wrap() returns -ENOTCONN before the handshake, -EPIPE after shutdown().
 */
extern const sv_layer_ops sv_ws_layer_ops;

#endif
