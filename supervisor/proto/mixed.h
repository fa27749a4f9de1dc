/*
 * The mixed inbound's core: SOCKS5 and the HTTP proxy on one port (sing-box's and Clash's
 * "mixed"), told apart by the connection's first byte: 0x05 is SOCKS5 (RFC 1928's version),
 * anything else an HTTP request line.
 */
#ifndef SV_PROTO_MIXED_H
#define SV_PROTO_MIXED_H

#include "supervisor/proto/proto.h"

/**
 * The mixed core. Credentials: the table of sv_socks_ops (sv_userpass, shared with
 * sv_http_proxy_ops). Per connection the first byte picks the inner core, whose state is
 * allocated then (-ENOMEM: an SV_FX_ERROR with SV_PROBE_CLOSE); every call after that is the
 * inner core's, effects, errors and framing alike (socks.h, http_proxy.h), and so are the
 * datagram and relay extensions (SOCKS5's UDP ASSOCIATE).
 * carry_max: the larger of the two cores'.
 */
extern const sv_proto_ops sv_mixed_ops;

#endif
