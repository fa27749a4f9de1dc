/*
 * The protocol-core seam (issue 8, DESIGN.md "The data plane"): one ops table that every core
 * fills. A core is sans-I/O: the runtime feeds it client bytes (already unwrapped by the
 * transport layers) and applies the effects it returns; it never reads a core's state. A core
 * sees bytes and its credential table only: no socket, clock, log, allocator it was not given.
 *
 * One connection may carry several flows (Mux.Cool, XUDP, gRPC later): open, to_outbound,
 * datagram and close carry a stream key. Cores with one flow per connection use stream 0.
 */
#ifndef SV_PROTO_PROTO_H
#define SV_PROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/proto/core.h"
#include "supervisor/supervisor.h"

struct sv_ss_order; /* proto/shadowsocks.h: a worker's most recently matched order of users */

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
    SV_FX_SCAN,              /**< data/len: the bytes to scan (issue 13): the first guesses of a
                                  trial decryption missed; the runtime runs scan() on them off its
                                  loop (or refuses to: over budget), gives the answer to
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
     *  END_STREAM, issue 10, PROTOCOLS-2.md §3.3): the outbound gets what is held, then a
     *  half-close, and the stream's download goes on until the outbound ends (frame_end).
     *  A later SV_FX_CLOSE without it ends the stream at once. */
    bool half_close;
    /** SV_FX_OPEN of a UDP stream: the XUDP GlobalID of its New frame (PROTOCOLS-2.md §5.1);
     *  all zeros = none (never re-attached). */
    uint8_t global_id[8];
    /** Keys a trial decryption tried (Shadowsocks AEAD, issue 13), told once, on the effect
     *  that follows it (SV_FX_AUTHENTICATED, SV_FX_SCAN, SV_FX_ERROR; over Mux.Cool also a
     *  later session's SV_FX_OPEN or End): the runtime sums every effect's, one lookup each.
     *  0 when the core looks users up. */
    unsigned trials;
} sv_effect;

/** Bits of sv_proto_ops.direct (XTLS Vision, PROTOCOLS-2.md §2.6); the values of layer.h's
 *  enum sv_layer_direct, which the runtime passes to the transport chain as they are. */
enum sv_direct {
    SV_DIRECT_WATCH = 1u, /**< the client may switch to raw: deliver its records one by one */
    SV_DIRECT_IN = 2u,    /**< client bytes after the piece last fed are raw under the layer */
    SV_DIRECT_OUT = 4u,   /**< bytes framed after those given so far go raw under the layer */
};

#define SV_EFFECTS_MAX 16 /**< bound of one feed() call's effects */

/** The effects of one feed() call, in order. */
typedef struct sv_effects {
    sv_effect v[SV_EFFECTS_MAX];
    unsigned n;
} sv_effects;

/**
 * A protocol core. Every function pointer is required unless marked optional.
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
    /**
     * Optional: creds_new() for a reload (issue 13 "a reload that changes one user of 50 000"):
     * @p was_creds is the credential table of the handler being replaced (same core, same
     * inbound tag; borrowed), @p from[i] the index there of new user i when it is the same user
     * with the same secret, else -1. A core copies what it derived for such users instead of
     * deriving it again, when its own settings (e.g. the cipher) are unchanged.
     */
    int (*creds_new_from)(const sv_inbound_spec *in, const sv_user_set *users,
                          const void *was_creds, const int *from, void **out, sv_error *err);
    /**
     * Optional: share the inbound's replay filter @p filter (borrowed; it outlives the table)
     * with the credential table, for protocols whose handshakes carry a salt (Shadowsocks).
     */
    void (*attach_replay)(void *creds, sv_replay *filter);

    /**
     * Optional: the wall clock for a core that checks client timestamps (VMess auth ID window,
     * PROTOCOLS.md §6.3; Shadowsocks 2022 ±30 s, §3.4), in Unix seconds. The runtime calls it
     * before every feed() until the connection is authenticated; a core reads no clock of its
     * own, so tests drive time here.
     */
    void (*set_time)(void *state, int64_t unix_s);

    /**
     * Optional: how the first feed() walks the users in a trial decryption (issue 13): try
     * index @p hint first (-1: none), then the others in @p order (the worker's most recently
     * matched order for this credential table, borrowed for the connection's life; NULL: index
     * order), at most @p limit keys (0: all). Called after init() and before the first feed().
     * A wrong hint costs one trial, never a wrong user. When @p limit keys missed, feed() gives
     * SV_FX_SCAN instead of trying the rest. Shadowsocks AEAD (shadowsocks.h).
     */
    void (*set_guide)(void *state, int hint, struct sv_ss_order *order, unsigned limit);
    /**
     * Optional (with set_guide): the full scan of SV_FX_SCAN's bytes @p in (@p n bytes) over
     * the credential table: any thread, reads @p creds and @p in only. @return the user's index,
     * or a negative errno (-EBADMSG: no user); *@p trials the keys it tried.
     */
    int (*scan)(const void *creds, const uint8_t *in, size_t n, unsigned *trials);
    /**
     * Optional (with scan): the scan's answer, @p user (its index, or -1: none found, or the
     * scan was refused over its budget). The next feed() with the same bytes checks it by a
     * trial of that key alone: a wrong answer fails the client, never names a wrong user.
     */
    void (*scan_result)(void *state, int user);

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
     * Optional: after a feed(), does the core have effects to give before it takes more bytes
     * (a core around many streams, gRPC: one client read may carry more messages than one
     * effect list holds; issue 10)? The runtime then calls feed() again at once with the
     * unconsumed rest of its input, which may be empty, even when feed() returned 0.
     */
    bool (*more)(const void *state);
    /**
     * Optional: bytes of stream @p stream's output the core holds because the client's flow
     * control does not let them go yet (gRPC: the HTTP/2 windows). The runtime stops reading
     * that stream's outbound while more than SV_SUB_QUEUED_HIGH are held, and reads it again
     * once a feed() (which may carry the client's window update) brings it under
     * SV_SUB_QUEUED_LOW. 0 for a stream the core does not know.
     */
    size_t (*queued)(void *state, uint32_t stream);

    /**
     * Frame @p len bytes (> 0) from stream @p stream's outbound for the client into @p out.
     * @return wire length, or -EMSGSIZE when @p cap < frame_max(len).
     */
    ssize_t (*frame)(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap);
    /** Most wire bytes frame() writes for @p len payload bytes (the declared overhead). */
    size_t (*frame_max)(size_t len);

    /**
     * Optional: frame one reply datagram of a UDP association carried in the stream, from
     * @p from. @return wire length, or -EMSGSIZE.
     */
    ssize_t (*frame_datagram)(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap);

    /**
     * Optional: the bytes that end stream @p stream's downstream once its outbound has closed,
     * written before the runtime half-closes the client (VMess: the response header if none went
     * yet, then the end-of-stream chunk, PROTOCOLS.md §6.6). On a multiplexed connection: the
     * stream's End frame (Mux.Cool, §7.3), written when its outbound ended, failed or was killed
     * or its pending bytes overflowed (@p abort: it did not end cleanly, option 0x02, so the
     * client drops the stream at once); the core forgets the stream, the connection goes on.
     * @return wire length (0 = nothing), or a negative errno (-EMSGSIZE when @p cap <
     *         frame_max(0)); the runtime then closes the connection.
     */
    ssize_t (*frame_end)(void *state, const void *creds, uint32_t stream, bool abort,
                         uint8_t *out, size_t cap);

    /**
     * Optional: the SV_DIRECT_* bits the core wants from the transport chain under it now (XTLS
     * Vision: watch from the request on, raw in after the client's command 2 frame, raw out
     * after ours). The runtime asks after every feed() and frame() and passes new bits to
     * sv_chain_direct(); a chain that cannot ends the connection. IN and OUT stay once set;
     * WATCH holds while the client may still switch.
     */
    unsigned (*direct)(const void *state);
} sv_proto_ops;

/** Append an effect to @p fx. @return the new effect (zeroed but for kind), or NULL when full. */
sv_effect *sv_effects_push(sv_effects *fx, enum sv_effect_kind kind);

#endif
