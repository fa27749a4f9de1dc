/*
 * Transport layers and the chain a connection's client side is built from (the models are curl's
 * connection filters and knot-resolver's protocol layers, STYLE.md).
 *
 * TCP is the bottom of every chain: the client socket that conn.c reads and writes, the only
 * part that touches libuv. Above it sit sans-I/O layers in the inbound's order (TLS, WebSocket,
 * later gRPC, HTTPUpgrade, REALITY): each unwraps the bytes coming up from below and wraps the
 * bytes going down towards the client, and reports handshake done, peer EOF, refusal and errors
 * through its status. A layer never knows which layers sit above or below it.
 *
 * A new layer is one file filling sv_layer_ops plus one table entry where the handler builds its
 * layer list (plane.c); conn.c drives every chain through the functions below.
 */
#ifndef SV_TRANSPORT_LAYER_H
#define SV_TRANSPORT_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Most layers above TCP in one chain. */
#define SV_CHAIN_MAX 4
/** Most bytes of a target's first flight a layer is given (PROTOCOLS-2.md §1.5 step 1). */
#define SV_LAYER_TARGET_MAX 8192u
/** Bytes of stage buffer a chain needs per layer boundary (unwrapped bytes between two layers
 *  are moved in pieces of at most this size: one TLS record and more). As large as a TCP read
 *  (SV_SCRATCH), so that a read under TLS and WebSocket reaches the protocol in one piece and
 *  leaves in one write, not one per 16 KiB. */
#define SV_CHAIN_STAGE (64u * 1024u + 256u)
/** Stage buffer for sv_chain_unwrap(): one piece per boundary. */
#define SV_CHAIN_STAGE_BYTES ((SV_CHAIN_MAX - 1) * SV_CHAIN_STAGE)

/** Status bits of a layer (and of a chain: sv_chain_status()). */
enum sv_layer_status {
    SV_LAYER_UP = 1u,      /**< its handshake is done: bytes pass both ways */
    SV_LAYER_EOF = 2u,     /**< the peer ended its direction at this layer (TLS close_notify,
                                WebSocket Close): EOF for the layers above */
    SV_LAYER_REFUSED = 4u, /**< the peer does not speak this layer (e.g. a WebSocket upgrade on
                                the wrong path): from now on the layer passes bytes through
                                as they are, every byte it was given first, so that the runtime
                                can relay them to the inbound's fallback or answer 404 */
    SV_LAYER_RECORDS = 8u, /**< deliver each unwrapped piece before unwrapping more (a layer
                                watching for a switch to raw, SV_LAYER_WATCH) */
    SV_LAYER_TARGET = 16u, /**< the layer waits for the target's first flight (REALITY,
                                PROTOCOLS-2.md §1.5 step 1): the runtime sends target_ask()'s
                                bytes to the inbound's fallback and gives the answer to
                                target_reply(); the layer reads and answers nothing meanwhile */
    SV_LAYER_PASS = 32u,   /**< raw both ways (SV_LAYER_RAW_IN and RAW_OUT) with nothing held
                                either way and no end seen: the bytes below are the bytes above,
                                so the runtime may relay the socket itself (splice) */
};

/** Bits of sv_layer_ops.direct (XTLS Vision's switch to direct copy, PROTOCOLS-2.md §2.6). */
enum sv_layer_direct {
    SV_LAYER_WATCH = 1u,   /**< unwrap one record per piece (status SV_LAYER_RECORDS), so that
                                the protocol above sees each before the next is decrypted */
    SV_LAYER_RAW_IN = 2u,  /**< the peer's bytes after the piece last delivered pass up as they
                                are (what the layer already holds first) */
    SV_LAYER_RAW_OUT = 4u, /**< bytes wrapped from now on go down as they are, after the output
                                already pending; no end of stream of the layer's own any more */
};

/**
 * One kind of layer. Every function takes the per-connection state made by open(). Sizes are
 * bytes; a negative result is a negative errno and terminal for the connection.
 */
typedef struct sv_layer_ops {
    const char *name; /**< "tls", "ws" ... (for counters and errors) */
    /** Make the per-connection state from the layer's immutable, shared @p conf (e.g. a TLS
     *  context). @return 0 with *@p state set, or -ENOMEM. */
    int (*open)(const void *conf, void **state);
    /** Free the state (sends nothing). NULL-safe. */
    void (*free)(void *state);
    /**
     * Take bytes from below and produce bytes for above: consume up to @p n bytes of @p in
     * (*@p used receives how many; the layer buffers what it needs, bounded) and write up to
     * @p cap unwrapped bytes into @p out. Called again with n = 0 while it produces bytes.
     * Answers of the layer itself (handshake, pong) become pending output.
     * @return unwrapped bytes (0 when none now), or a negative errno.
     */
    ssize_t (*unwrap)(void *state, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                      size_t cap);
    /** Wrap @p n bytes from above into pending output. @return bytes accepted (0..n: the
     *  output is bounded; take it and wrap the rest), or a negative errno. */
    ssize_t (*wrap)(void *state, const uint8_t *p, size_t n);
    /** Queue this layer's end of stream (TLS close_notify, WebSocket Close). Idempotent.
     *  @return 0, or a negative errno when no clean end is possible (just close). */
    int (*shutdown)(void *state);
    /** Borrow the pending output (valid until the next call other than out_consume). */
    const uint8_t *(*out_peek)(const void *state, size_t *len);
    /** Drop the first @p n bytes of pending output. */
    void (*out_consume)(void *state, size_t n);
    /** @return the SV_LAYER_* bits that hold now. */
    unsigned (*status)(const void *state);
    /** Optional: switch directions to raw (SV_LAYER_WATCH / RAW_IN / RAW_OUT bits: WATCH holds
     *  while given, RAW_IN and RAW_OUT stay once given; idempotent). @return 0, or a negative errno (e.g. -ENOTCONN before the
     *  handshake): the connection ends. NULL: the layer cannot (sv_chain_direct fails). */
    int (*direct)(void *state, unsigned bits);
    /** Optional (SV_LAYER_TARGET): borrow the bytes to send to the target (valid until
     *  target_reply). @return them, *@p len their number. */
    const uint8_t *(*target_ask)(const void *state, size_t *len);
    /** Optional (SV_LAYER_TARGET): the target's answer so far, @p p[0 .. n) (everything read
     *  since the ask, at most SV_LAYER_TARGET_MAX bytes); @p final when no more will come
     *  (timeout, EOF, error, bound reached; n may be 0). @return 1 to be given more, 0 when the
     *  layer went on (the target connection may close), or a negative errno. */
    int (*target_reply)(void *state, const uint8_t *p, size_t n, bool final);
    /** Optional (NULL for layers without an HTTP handshake): the client address text a
     *  forwarding proxy named in this layer's handshake (X-Forwarded-For's right-most element,
     *  else X-Real-IP), NUL-terminated and owned by the state, or NULL when none came (or the
     *  handshake is not done). Not checked to be an address. */
    const char *(*forwarded)(const void *state);
} sv_layer_ops;

/** One layer of an inbound's list: its kind and its immutable, shared configuration. */
typedef struct sv_layer_conf {
    const sv_layer_ops *ops;
    const void *conf;
} sv_layer_conf;

/** The layers of one connection, bottom (next to TCP) first. Zero layers = plain TCP. */
typedef struct sv_chain {
    const sv_layer_conf *conf; /**< borrowed from the inbound's handler, which outlives it */
    void *state[SV_CHAIN_MAX];
    uint8_t n;
} sv_chain;

/**
 * Open a layer state for each of @p conf[0 .. n) (n ≤ SV_CHAIN_MAX; @p conf must outlive the
 * chain). @return 0, -EINVAL for too many layers, or -ENOMEM (nothing stays open).
 */
int sv_chain_open(sv_chain *ch, const sv_layer_conf *conf, unsigned n);

/** Free every layer state (sends nothing). Safe on a zeroed or already freed chain. */
void sv_chain_free(sv_chain *ch);

/** Where the top layer writes unwrapped bytes: returns a buffer and its capacity (> 0). */
typedef uint8_t *(*sv_chain_alloc_cb)(void *ctx, size_t *cap);
/** Unwrapped bytes for the protocol above: @p n bytes at @p p, the buffer the alloc callback
 *  gave. @return false to stop unwrapping (the connection is closing). */
typedef bool (*sv_chain_deliver_cb)(void *ctx, uint8_t *p, size_t n);

/**
 * Push @p n bytes read from TCP up through every layer; each piece that leaves the top layer
 * goes to @p deliver, in a buffer from @p alloc. @p stage holds SV_CHAIN_STAGE_BYTES bytes of
 * scratch for the boundaries between layers. Pending output the layers produced is not sent:
 * call sv_chain_pump() and send sv_chain_out_peek() afterwards.
 * @return 0 (also when @p deliver stopped), or a layer's negative errno.
 */
int sv_chain_unwrap(sv_chain *ch, const uint8_t *in, size_t n, uint8_t *stage,
                    sv_chain_alloc_cb alloc, sv_chain_deliver_cb deliver, void *ctx);

/** Wrap @p n bytes from the protocol into the top layer and pump them down.
 *  @return bytes accepted (0..n), or a negative errno. */
ssize_t sv_chain_wrap(sv_chain *ch, const uint8_t *p, size_t n);

/** Move pending output of every layer into the layer below it, as far as each accepts.
 *  @return 0, or a negative errno. */
int sv_chain_pump(sv_chain *ch);

/** End the stream at every layer, top first (each end is wrapped by the layers below).
 *  @return 0, or a negative errno when a layer cannot end cleanly (then just close). */
int sv_chain_shutdown(sv_chain *ch);

/**
 * Pass @p bits (enum sv_layer_direct) to the chain's one layer (XTLS Vision sits directly on
 * REALITY or TLS, PROTOCOLS-2.md §2.1). @return 0 (also for no bits, and for a chain of no
 * layer: its bytes are raw already), -EOPNOTSUPP when the chain has layers but not exactly one
 * that can, or the layer's negative errno.
 */
int sv_chain_direct(sv_chain *ch, unsigned bits);

/**
 * The bytes a layer of the chain waiting for its target (status SV_LAYER_TARGET) wants sent
 * there. @return them (*@p len their number), or NULL when no layer waits.
 */
const uint8_t *sv_chain_target_ask(const sv_chain *ch, size_t *len);

/**
 * Give the target's answer to the layer waiting for it (layer.h target_reply: @p p, @p n,
 * @p final). @return 1 when it wants more, 0 when it went on (also when none waits), or its
 * negative errno.
 */
int sv_chain_target_reply(sv_chain *ch, const uint8_t *p, size_t n, bool final);

/**
 * The client address text a forwarding proxy named in the chain's handshakes: the first answer
 * of a layer's forwarded() op, bottom layer first (layer.h). Borrowed from the layer's state
 * (valid while the chain is open). @return it, or NULL when no layer has one.
 */
const char *sv_chain_forwarded(const sv_chain *ch);

/** Borrow the bytes the bottom layer has for TCP. @param len receives their number. */
const uint8_t *sv_chain_out_peek(const sv_chain *ch, size_t *len);

/** Drop the first @p n bytes of the bottom layer's output (TCP took them). */
void sv_chain_out_consume(sv_chain *ch, size_t n);

/**
 * @return the chain's status: SV_LAYER_UP when every layer is up (or one refused, which ends the
 *         handshakes), SV_LAYER_EOF when any layer saw the peer's end, SV_LAYER_REFUSED when any
 *         layer refused the peer, SV_LAYER_TARGET when a layer waits for its target,
 *         SV_LAYER_PASS when there are layers and every one passes bytes as they are, holding
 *         none (and none saw an end, refused or waits).
 */
unsigned sv_chain_status(const sv_chain *ch);

#endif
