/*
 * The gRPC transport ("gun", PROTOCOLS-2.md §3): an HTTP/2 server (nghttp2, sans-I/O
 * over its memory API) whose every Tun or TunMulti stream is one proxied connection with its own
 * protocol core (VLESS, VMess, Trojan).
 *
 * Where the seam sits: unlike TLS and WebSocket (one byte stream each way, an sv_layer_ops
 * layer), HTTP/2 carries many proxied connections over one TCP/TLS connection. gRPC is therefore
 * not a chain layer but a protocol core that wraps the inbound's core (sv_grpc_ops): the runtime
 * sees a multiplexed connection exactly as for Mux.Cool (SV_FX_AUTHENTICATED with multiplexed,
 * then SV_FX_OPEN / TO_OUTBOUND / DATAGRAM / CLOSE per stream; frame(stream) and
 * frame_end(stream)), so each HTTP/2 stream becomes one of conn.c's sub-flows: routed, metered,
 * listed and killable on its own. TLS (ALPN h2) stays the chain layer below.
 *
 * One H2 connection acts for one user: the first stream that authenticates names it; a stream
 * authenticating as another user is reset alone. A stream whose inner core says Mux.Cool
 * (VLESS / VMess command 3, Xray's XUDP: PROTOCOLS-2.md §5) carries sessions, each a sub-flow of
 * its own under a synthetic even ID (HTTP/2 client stream IDs are odd), framed back through
 * the inner core's session framing and then the stream's.
 */
#ifndef SV_TRANSPORT_GRPC_H
#define SV_TRANSPORT_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/proto.h"

/** Longest gRPC message a client may announce (the bytes are streamed, never buffered whole). */
#define SV_GUN_MSG_MAX (16u * 1024u * 1024u)
/** Most bytes of the header sv_gun_header() writes before a Hunk's data. */
#define SV_GUN_HDR_MAX 11u
/** Longest service name an inbound takes. */
#define SV_GRPC_SERVICE_MAX 256u

/** Streaming decoder of gun messages (PROTOCOLS-2 §3.2): zero it to start. */
typedef struct sv_gun_decoder {
    uint8_t phase;      /* prefix, tag, length, data */
    uint8_t got;        /* prefix bytes collected / varint bytes read */
    uint8_t prefix[5];
    uint32_t msg_left;  /* message bytes not yet read */
    uint64_t field_left; /* data bytes of the current field not yet read */
} sv_gun_decoder;

/**
 * Decode @p n bytes of a stream of gRPC messages carrying Hunk or MultiHunk (both are field 1,
 * bytes, repeated or not: PROTOCOLS-2 §3.2) and write the data bytes, in order, to @p out, which
 * has room for @p n bytes and may be @p in itself (data never moves forward). Every byte is
 * consumed; message boundaries mean nothing. Empty messages are accepted.
 * @return data bytes written, or -EPROTO (a compressed message, one over SV_GUN_MSG_MAX, a field
 *         other than 1/bytes, a field overrunning its message); the decoder is then spent.
 */
ssize_t sv_gun_decode(sv_gun_decoder *d, const uint8_t *in, size_t n, uint8_t *out);

/**
 * Write the header of one Hunk carrying @p len data bytes (1 ≤ len ≤ SV_GUN_MSG_MAX - 16):
 * `00 | u32 (1 + varint + len) | 0A | varint(len)`, the exact shape sing-box's lite client parses
 * (§3.2; callers never send an empty message). @return header bytes (≤ SV_GUN_HDR_MAX).
 */
size_t sv_gun_header(size_t len, uint8_t hdr[SV_GUN_HDR_MAX]);

/**
 * Build the gRPC core's credential table over the inbound's own core @p inner: the inner table
 * from @p in and @p users, and the request paths of @p service (PROTOCOLS-2 §3.1: a plain name
 * serves `/<name>/Tun` and `/<name>/TunMulti`, raw or percent-escaped; a name starting with '/'
 * is a custom path `/<service>/<tun>[|<multi>]`).
 * @return 0 with *@p out set (free with sv_grpc_ops.creds_free), -ENOMEM, or the inner core's
 *         error with @p err set.
 */
int sv_grpc_creds_new(const sv_proto_ops *inner, const char *service, const sv_inbound_spec *in,
                      const sv_user_set *users, void **out, sv_error *err);

/**
 * The gRPC core (see the top of this file): state per TCP/TLS connection, one inner core state
 * per HTTP/2 stream. Its creds come only from sv_grpc_creds_new() (creds_new refuses).
 * A client that does not open with the HTTP/2 preface gets SV_FX_ERROR with the fallback policy
 * (every byte so far). A stream on another path gets a trailers-only answer with grpc-status 12
 * (UNIMPLEMENTED), as a gRPC server answers an unknown method, and no log line.
 * Extensions (proto_ext.h): clock (given to the inner core when it has one), backlog (more,
 * queued), datagram, end; the inner core's own (datagram, end, clock) are used for its
 * sessions.
 */
extern const sv_proto_ops sv_grpc_ops;

#endif
