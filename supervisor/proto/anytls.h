/*
 * AnyTLS server core, sans-I/O (PROTOCOLS-3.md §3). The runtime unwraps TLS and feeds the
 * plaintext: sha256(password) | u16 padding0_len | padding0, then frames
 * u8 cmd | u32 stream | u16 length | data, many streams per connection. Each stream starts with
 * a SOCKS address (§3.5); sp.v2.udp-over-tcp.arpa:0 makes it a sing-box UoT v2 association.
 */
#ifndef SV_PROTO_ANYTLS_H
#define SV_PROTO_ANYTLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/proto/core.h"
#include "supervisor/proto/proto.h"

/** Bytes of the auth digest: SHA-256 of the password (§3.1). */
#define SV_ANYTLS_HASH_LEN 32
/** Longest padding0 accepted in the auth part; a longer one goes to the fallback (§3.1: the
 *  default scheme's line 0 gives 30). */
#define SV_ANYTLS_PADDING0_MAX 4096
/** Bytes of a frame header (§3.2). */
#define SV_ANYTLS_HEAD_LEN 7
/** Largest data of one frame (u16 length). */
#define SV_ANYTLS_DATA_MAX 65535
/** Open streams per connection (the runtime's sub-flow bound, SV_MUX_SESSIONS_MAX); a SYN
 *  beyond is refused (SYNACK with an error text when v2, then FIN). */
#define SV_ANYTLS_STREAMS_MAX 128
/** Longest padding scheme (UpdatePaddingScheme carries it in one frame). */
#define SV_ANYTLS_SCHEME_MAX 4096
/** Most bytes feed() leaves unconsumed: a whole Settings frame (the auth part is shorter). */
#define SV_ANYTLS_CARRY_MAX (SV_ANYTLS_HEAD_LEN + SV_ANYTLS_DATA_MAX)

/** Frame commands (§3.2). */
enum sv_anytls_cmd {
    SV_ANYTLS_WASTE = 0,
    SV_ANYTLS_SYN = 1,
    SV_ANYTLS_PSH = 2,
    SV_ANYTLS_FIN = 3,
    SV_ANYTLS_SETTINGS = 4,
    SV_ANYTLS_ALERT = 5,
    SV_ANYTLS_UPDATE_PADDING = 6,
    SV_ANYTLS_SYNACK = 7,
    SV_ANYTLS_HEART_REQUEST = 8,
    SV_ANYTLS_HEART_RESPONSE = 9,
    SV_ANYTLS_SERVER_SETTINGS = 10,
};

/** The default padding scheme (§3.4): 137 bytes, no trailing newline, MD5
 *  75cff2ad89aadf5e257059ee571ebe11. */
extern const char sv_anytls_default_scheme[];

/**
 * The AnyTLS core (proto.h's contract), with these specifics:
 *  - creds_new: one password per user, the user's secret (Xboard: the UUID string, §3.1); the
 *    table maps SHA-256(secret) to the user's index (open addressing, constant-time confirm).
 *    It keeps the padding scheme, @p in->anytls_padding_scheme or the default when @p in or the
 *    field is NULL, and its lower-case hex MD5. Errors: -EINVAL "user set T: users A and B have
 *    the same password", "user set T: user A has an empty secret", "user set T: more than
 *    SV_USERS_MAX users", "inbound T: anytls padding scheme has no valid stop line" or "...is
 *    longer than SV_ANYTLS_SCHEME_MAX bytes"; -ENOMEM; -EIO when OpenSSL has no SHA-256/MD5.
 *  - feed, before authentication: nothing is consumed until the auth part is decided. Fewer
 *    than 32 bytes: 0 (need more). An unknown digest, or padding0_len above
 *    SV_ANYTLS_PADDING0_MAX, gives SV_FX_ERROR -EACCES (resp. -EPROTO) with SV_PROBE_FALLBACK
 *    and data/len = all @p n bytes given. A known digest waits for 34 + padding0_len bytes, then
 *    gives SV_FX_AUTHENTICATED (principal = user index, multiplexed = true) and reads frames.
 *  - feed, frames (stream ids as on the wire; session frames use 0):
 *    Waste, Alert, UpdatePaddingScheme, SYNACK, ServerSettings, HeartResponse, any unknown cmd:
 *      their data is skipped (consumed as it comes).
 *    Settings (consumed whole, so up to SV_ANYTLS_CARRY_MAX bytes wait): key=value lines as a
 *      set; padding-md5 missing or not the scheme's → SV_FX_TO_CLIENT with an
 *      UpdatePaddingScheme frame header then SV_FX_TO_CLIENT with the scheme bytes (pointing into
 *      the credential table); v an integer ≥ 2 → SV_FX_TO_CLIENT ServerSettings "v=2" and the
 *      connection is v2.
 *    SYN before any Settings: SV_FX_ERROR -EPROTO SV_PROBE_ANSWER whose data is the Alert
 *      "client did not send its settings" (written, then the connection closes). A SYN whose id is not above every earlier SYN's
 *      (ids rise, §3.2) is ignored. Beyond SV_ANYTLS_STREAMS_MAX open streams: SV_FX_TO_CLIENT
 *      with (v2: SYNACK "too many streams", then) a FIN frame. Otherwise the stream is
 *      recorded and, when v2, SV_FX_TO_CLIENT SYNACK with empty data goes at once: the core
 *      cannot report the dial's result, which §3.3 allows ("a server that cannot report may
 *      send it right after SYN"); the client's 3 s SYNACK timer then never fires.
 *    PSH of an unknown stream: its data is skipped. The first bytes of a stream are a SOCKS
 *      address (split over frames or not): then SV_FX_OPEN (stream, network TCP, that
 *      address) and every later byte is SV_FX_TO_OUTBOUND (stream), delivered as it arrives,
 *      pointing into @p p or the core's state. The address sp.v2.udp-over-tcp.arpa port 0
 *      starts UoT v2 (§3.5): the request u8 isConnect | SOCKS address gives SV_FX_OPEN
 *      (network UDP, the request's address); each packet (isConnect 1: u16 length | data;
 *      0: UoT address | u16 length | data) is one SV_FX_DATAGRAM (stream, its destination,
 *      network UDP, payload). A malformed address, request or packet ends the stream:
 *      SV_FX_TO_CLIENT FIN and, when it was opened, SV_FX_CLOSE.
 *    FIN of an open stream: SV_FX_CLOSE (stream), not answered (§3.2); the core forgets it.
 *    HeartRequest: SV_FX_TO_CLIENT HeartResponse with the same stream id.
 *    After authentication an error (-ENOMEM, or SYN before Settings) is SV_FX_ERROR with
 *    SV_PROBE_CLOSE and no data; every later feed() repeats it.
 *    One call keeps within SV_EFFECTS_MAX effects: when it stops early with work left, the
 *    backlog extension's more() is true and the runtime calls again.
 *  - carry_max: SV_ANYTLS_CARRY_MAX (a partial frame header or a whole Settings frame).
 *  - frame: PSH frames of @p stream, data split at SV_ANYTLS_DATA_MAX; frame_max(len) = len +
 *    7 per started 65535 bytes. The server sends no padding (§3.2).
 *  - frame_end: one FIN frame of @p stream (7 bytes; @p abort makes no difference, AnyTLS has
 *    no abort); the core forgets the stream.
 *  - frame_datagram: one reply of the UoT stream @p stream in its format (connect: u16 length |
 *    payload; else UoT address of @p from | u16 length | payload), in one PSH frame; -EINVAL for
 *    an unknown or non-UoT stream, a bad address or a payload that does not fit one frame,
 *    -EMSGSIZE when @p cap is too small.
 * Extensions (proto_ext.h): backlog (more), datagram, end.
 */
extern const sv_proto_ops sv_anytls_ops;

#endif
