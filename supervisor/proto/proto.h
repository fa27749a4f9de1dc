/*
 * The protocol-core seam (DESIGN.md "The data plane"): one ops table that every core
 * fills. A core is sans-I/O: the runtime feeds it client bytes (already unwrapped by the
 * transport layers) and applies the effects it returns; it never reads a core's state. A core
 * sees bytes and its credential table only: no socket, clock, log, allocator it was not given.
 *
 * One connection may carry several flows (Mux.Cool, XUDP, gRPC): open, to_outbound, datagram
 * and close carry a stream key. Cores with one flow per connection use stream 0.
 *
 * sv_proto_ops is what every core has; what only some have (a reload that keeps derived keys, a
 * replay filter, a clock, a guided trial decryption, a backlog, datagrams or end bytes inside
 * the stream, direct copy) are the extensions of proto_ext.h, which the runtime asks for by
 * capability (sv_proto_ext()).
 */
#ifndef SV_PROTO_PROTO_H
#define SV_PROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/proto/core.h"
#include "supervisor/proto/proto_ext.h"
#include "supervisor/supervisor.h"

enum sv_effect_kind {
    SV_FX_AUTHENTICATED = 1, /**< principal: index of the user in the credential table;
                                  multiplexed: the connection carries several streams (Mux.Cool) */
    SV_FX_OPEN,              /**< stream, dest (dest.network TCP, or UDP for an association) */
    SV_FX_TO_OUTBOUND,       /**< stream, data/len: bytes for that stream's outbound */
    SV_FX_DATAGRAM,          /**< stream, dest, data/len: one datagram of a UDP association */
    SV_FX_TO_CLIENT,         /**< data/len: bytes to send to the client as they are */
    SV_FX_CLOSE,             /**< stream: that flow ends (the connection stays when multiplexed,
                                  else it ends) */
    SV_FX_FINISH,            /**< the client ended the connection cleanly */
    SV_FX_ERROR,             /**< error (negative errno) and policy: what the runtime does next */
    SV_FX_SCAN,              /**< data/len: the bytes to scan (a core with
                                  SV_PROTO_CAP_GUIDE only): the first guesses of a trial
                                  decryption missed; the runtime runs the guide's scan() on them
                                  off its loop (or refuses to: over budget), gives the answer to
                                  scan_result() and feeds the same bytes again; feed consumed
                                  nothing of them, and this is its last effect */
};

/** What the runtime does with a client that failed (PROTOCOLS.md §1.4, §4.4). */
enum sv_probe_policy {
    SV_PROBE_CLOSE = 1, /**< close now (a failure after authentication) */
    SV_PROBE_DRAIN,     /**< read and discard for a random time, then close (Shadowsocks) */
    SV_PROBE_FALLBACK,  /**< relay every byte received so far, then both ways, to the fallback.
                             A core that may ask for it consumes nothing before it has decided
                             (feed returns 0), so "every byte so far" is the unconsumed input,
                             which the error effect's data/len also point at. */
    SV_PROBE_ANSWER,    /**< send data/len to the client as they are (a refusal the protocol
                             defines: SOCKS5's failure reply, HTTP's 407), then close once it
                             is written or after SV_REFUSE_LINGER_MS */
};

/**
 * One effect. data points into the buffer given to feed() or into the core's state, and stays
 * valid until the next call on the same connection state.
 */
typedef struct sv_effect {
    enum sv_effect_kind kind;
    uint32_t stream;
    int principal;
    sv_dest dest;
    uint8_t *data;
    size_t len;
    int error;
    enum sv_probe_policy policy;
    /** SV_FX_AUTHENTICATED: streams come and go with SV_FX_OPEN / SV_FX_CLOSE (Mux.Cool,
     *  PROTOCOLS.md §7): the runtime keeps one sub-flow per stream and ends one towards the
     *  client with frame_end(). Otherwise one flow, stream 0. */
    bool multiplexed;
    /** SV_FX_CLOSE of a multiplexed stream: the client ended only its direction (gRPC's
     *  END_STREAM, PROTOCOLS-2.md §3.3): the outbound gets what is held, then a
     *  half-close, and the stream's download goes on until the outbound ends (frame_end).
     *  A later SV_FX_CLOSE without it ends the stream at once. */
    bool half_close;
    /** SV_FX_OPEN of a UDP stream: the XUDP GlobalID of its New frame (PROTOCOLS-2.md §5.1);
     *  all zeros = none (never re-attached). */
    uint8_t global_id[8];
    /** Keys a trial decryption tried (Shadowsocks AEAD), told once, on the effect
     *  that follows it (SV_FX_AUTHENTICATED, SV_FX_SCAN, SV_FX_ERROR; over Mux.Cool also a
     *  later session's SV_FX_OPEN or End): the runtime sums every effect's, one lookup each.
     *  0 when the core looks users up. */
    unsigned trials;
} sv_effect;

#define SV_EFFECTS_MAX 16 /**< bound of one feed() call's effects */

/** The effects of one feed() call, in order. */
typedef struct sv_effects {
    sv_effect v[SV_EFFECTS_MAX];
    unsigned n;
} sv_effects;

/**
 * A protocol core: what every core has. Every member is required; the extensions a core offers
 * are in ext.
 *
 * Lifecycle: creds_new() once per (inbound settings, user set) on the control loop; the
 * credential table is then immutable and shared read-only by every worker. Per connection:
 * state_size bytes zeroed, init(), feed() any number of times, deinit().
 */
typedef struct sv_proto_ops {
    const char *name; /**< "shadowsocks", "trojan", ... (the spec's protocol name) */

    /**
     * Build the credential table of @p users for inbound @p in (keys, hashes, lookup index).
     * @return 0, -ENOMEM, or -EINVAL/-EIO with @p err set (e.g. a secret the protocol cannot use,
     *         a digest OpenSSL cannot compute).
     */
    int (*creds_new)(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err);
    void (*creds_free)(void *creds);

    size_t state_size; /**< bytes of per-connection state */
    /** Prepare zeroed @p state for a connection of inbound @p in. @return 0 or -ENOMEM. */
    int (*init)(void *state, const sv_inbound_spec *in);
    /** Release what init() and feed() allocated. Idempotent. */
    void (*deinit)(void *state);

    /**
     * Feed client bytes. Empties @p fx first, then appends this call's effects in order. May
     * modify @p p in place (decryption). Stops early when @p fx is full.
     * @return bytes consumed (0 = need more: keep the unconsumed tail and call again with more
     *         appended; the core never needs more than carry_max bytes buffered), or a negative
     *         errno after which the core takes no more input (an SV_FX_ERROR effect says why and
     *         what to do).
     */
    ssize_t (*feed)(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx);
    size_t carry_max; /**< most bytes feed() may leave unconsumed */

    /**
     * Frame @p len bytes (> 0) from stream @p stream's outbound for the client into @p out.
     * @return wire length, or -EMSGSIZE when @p cap < frame_max(len).
     */
    ssize_t (*frame)(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap);
    /** Most wire bytes frame() writes for @p len payload bytes (the declared overhead). */
    size_t (*frame_max)(size_t len);

    /** The extensions the core offers: ext[cap] points at the table of capability cap
     *  (proto_ext.h: SV_PROTO_CAP_GUIDE -> sv_proto_ext_guide, ...), NULL when it has not that
     *  capability. */
    const void *ext[SV_PROTO_CAP_COUNT];
} sv_proto_ops;

/** The table of capability @p cap that core @p ops offers, or NULL. */
static inline const void *sv_proto_ext(const sv_proto_ops *ops, enum sv_proto_cap cap)
{
    return ops->ext[cap];
}

/* Typed views of sv_proto_ext(): the table, or NULL when the core has not the capability. */
/** SV_PROTO_CAP_RELOAD. */
static inline const sv_proto_ext_reload *sv_proto_reload(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_RELOAD];
}
/** SV_PROTO_CAP_REPLAY. */
static inline const sv_proto_ext_replay *sv_proto_replay(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_REPLAY];
}
/** SV_PROTO_CAP_CLOCK. */
static inline const sv_proto_ext_clock *sv_proto_clock(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_CLOCK];
}
/** SV_PROTO_CAP_GUIDE. */
static inline const sv_proto_ext_guide *sv_proto_guide(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_GUIDE];
}
/** SV_PROTO_CAP_BACKLOG. */
static inline const sv_proto_ext_backlog *sv_proto_backlog(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_BACKLOG];
}
/** SV_PROTO_CAP_DATAGRAM. */
static inline const sv_proto_ext_datagram *sv_proto_datagram(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_DATAGRAM];
}
/** SV_PROTO_CAP_END. */
static inline const sv_proto_ext_end *sv_proto_end(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_END];
}
/** SV_PROTO_CAP_DIRECT. */
static inline const sv_proto_ext_direct *sv_proto_direct(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_DIRECT];
}
/** SV_PROTO_CAP_RELAY. */
static inline const sv_proto_ext_relay *sv_proto_relay(const sv_proto_ops *ops)
{
    return ops->ext[SV_PROTO_CAP_RELAY];
}

/** Does the core of @p ops, in @p state, have effects to give before it takes more bytes
 *  (sv_proto_ext_backlog.more)? false for a core without a backlog. */
static inline bool sv_proto_more(const sv_proto_ops *ops, const void *state)
{
    const sv_proto_ext_backlog *b = sv_proto_backlog(ops);
    return b != NULL && b->more(state);
}

/** Bytes of stream @p stream's output the core holds back (sv_proto_ext_backlog.queued); 0 for
 *  a core that holds none. */
static inline size_t sv_proto_queued(const sv_proto_ops *ops, void *state, uint32_t stream)
{
    const sv_proto_ext_backlog *b = sv_proto_backlog(ops);
    return b != NULL && b->queued != NULL ? b->queued(state, stream) : 0;
}

/** The SV_DIRECT_* bits the core wants now (sv_proto_ext_direct.direct); 0 for a core without
 *  direct copy. */
static inline unsigned sv_proto_direct_bits(const sv_proto_ops *ops, const void *state)
{
    const sv_proto_ext_direct *d = sv_proto_direct(ops);
    return d != NULL ? d->direct(state) : 0;
}

/** Append an effect to @p fx. @return the new effect (zeroed but for kind), or NULL when full. */
sv_effect *sv_effects_push(sv_effects *fx, enum sv_effect_kind kind);

/** frame() of a core without downstream framing (Trojan, SOCKS5, the HTTP proxy): the
 *  outbound's @p len bytes copied to @p out as they are. @return @p len, or -EMSGSIZE when
 *  @p cap < @p len. */
ssize_t sv_frame_copy(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                      size_t len, uint8_t *out, size_t cap);
/** frame_max() of such a core: @p len. */
size_t sv_frame_copy_max(size_t len);

#endif
