/*
 * HTTPUpgrade server layer (PROTOCOLS-2.md §4). Sans-I/O, one layer of a transport
 * chain (layer.h): over TCP or over TLS.
 *
 * Handshake (§4.1, §4.2): the client's HTTP/1.1 upgrade request (at most SV_HU_HEAD_MAX bytes,
 * parsed by http_head.h as the WebSocket layer's) must be a GET on the configured path (its query
 * ignored), with the configured Host when one is set, `Upgrade: websocket`, `Connection:
 * Upgrade`, and no `Sec-WebSocket-Key` (a real WebSocket request, refused as sing-box does). The
 * answer is exactly "HTTP/1.1 101 Switching Protocols" with `Connection: Upgrade` and `Upgrade:
 * websocket`, the reason phrase Xray's client compares whole. A request that fails a check is
 * refused (SV_LAYER_REFUSED): the layer then passes the request and everything after it through
 * as it is, so that the runtime answers 404 or relays it to the inbound's fallback.
 *
 * After the request the stream is raw bytes both ways: no framing. Early data (§4.3): the bytes
 * that follow the request's empty line (Xray sends its first proxied bytes without waiting for
 * the 101) are the start of the stream.
 *
 * The configuration is the WebSocket layer's (sv_ws_conf: path and Host).
 */
#ifndef SV_TRANSPORT_HTTPUPGRADE_H
#define SV_TRANSPORT_HTTPUPGRADE_H

#include "supervisor/transport/layer.h"

/** Largest upgrade request read (Xray's server takes 12288 bytes, §4.2; its client's
 *  browser-like headers take well under 1 KiB). */
#define SV_HU_HEAD_MAX (8u * 1024u)
/** Pending bytes towards the lower layer above which wrap() accepts nothing. */
#define SV_HU_OUT_MAX (64u * 1024u)

/**
 * The HTTPUpgrade layer (layer.h): conf is an sv_ws_conf (ws.h). Per connection it holds about
 * 64 bytes while idle; the request head only during the handshake (and, when refused, until it
 * has passed up), the output queue only while it is not empty. unwrap() fails only with -ENOMEM;
 * wrap() returns -ENOTCONN before the handshake.
 */
extern const sv_layer_ops sv_httpupgrade_layer_ops;

#endif
