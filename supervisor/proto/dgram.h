/*
 * The datagram seam: one ops table for a protocol's datagram framing on the
 * inbound's own UDP socket, next to the stream core interface of proto.h. The runtime's UDP
 * fan-out (udp.c) opens each client datagram through it (user, destination, payload), keeps an
 * association per client session, and seals each reply for that session; it never names a
 * protocol. A datagram core is sans-I/O as a stream core is: bytes, the credential table its
 * stream core built (the handler's, shared read-only), a caller-owned cipher context and the
 * time it is given; no socket, clock, log or global.
 *
 * An association is the runtime's: a core keeps what it needs of one client session in
 * session_size bytes the runtime allocates, zeroed, with the association, and frees with it.
 * Filled by Shadowsocks AEAD (ss_dgram.h, PROTOCOLS.md §2.4) and Shadowsocks 2022 (ss22_dgram.h,
 * §3.5, §3.6); registered by protocol in plane.c (sv_dgram_ops_for, beside sv_proto_ops_for).
 */
#ifndef SV_PROTO_DGRAM_H
#define SV_PROTO_DGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/crypto/aead.h"
#include "supervisor/proto/core.h"

/** Most bytes any datagram core's seal() puts around a reply's payload (its header, fields,
 *  tag: up to 107 bytes, and the longest address): the room the runtime keeps around a reply
 *  it reads from an outbound. A core's sv_dgram_ops.overhead is at most this. */
#define SV_DGRAM_OVERHEAD_MAX (107 + SV_DEST_WIRE_MAX)

/** Bytes of a client session ID a datagram carries (Shadowsocks 2022: 8, §3.5). */
#define SV_DGRAM_SESSION_ID 8

/**
 * How a guided core's open() walks its users in a trial decryption: given by the
 * runtime for one datagram, with trials filled back.
 */
typedef struct sv_dgram_guide {
    int hint;        /**< user index to try first, or -1 */
    void *order;     /**< the worker's most recently matched order of this credential table's
                          users, as the core's stream side takes it (its own type, which the
                          runtime keeps and never reads here), or NULL: index order */
    unsigned limit;  /**< most keys to try (0: all); past it open() says -EAGAIN */
    unsigned trials; /**< out: the keys tried */
} sv_dgram_guide;

/** One client datagram, opened. */
typedef struct sv_dgram_in {
    int user;         /**< index of its user in the credential table */
    sv_dest dest;     /**< where its payload goes (network SV_NET_UDP) */
    uint8_t *payload; /**< inside the datagram given to open() */
    size_t len;       /**< payload bytes */
    uint8_t session_id[SV_DGRAM_SESSION_ID]; /**< the client's session ID (cores with
                                                  session_match; else zero) */
    uint64_t packet_id; /**< its packet ID in that session (else 0) */
} sv_dgram_in;

/**
 * A protocol's datagram framing. Every function pointer is required unless marked optional.
 * Per datagram the runtime calls open(); then finds the client's association (session_match,
 * or the client's address); a new one gets session_size zeroed bytes and session_init(); then
 * session_accept(). Each reply of the association is sealed with seal().
 */
typedef struct sv_dgram_ops {
    const char *name;    /**< the protocol's name, as its stream core's */
    size_t session_size; /**< bytes of per-association state (0: none) */
    size_t overhead;     /**< most bytes seal() adds around a payload (≤ SV_DGRAM_OVERHEAD_MAX) */

    /**
     * Open one client datagram of @p n bytes at @p pkt in place (decrypted there), with the
     * credential table @p creds and the wall clock @p now (Unix seconds, for cores that check a
     * timestamp). @p guide: how to walk the users, for a core with scan() (NULL otherwise);
     * its trials are filled in. @p ctx: a caller-owned AEAD context, re-keyed per call.
     * @return 0 with @p out filled, or a negative errno: the core's own (e.g. -EBADMSG: no
     *         user's key opens it, -EPROTO: malformed, -ETIME: stale), and for a guided core
     *         -EAGAIN when @p guide's limit keys missed and the rest were not tried (the datagram
     *         is as it was: scan() it, then open it again with the answer as the hint, limit 1).
     */
    int (*open)(const void *creds, int64_t now, sv_dgram_guide *guide, uint8_t *pkt, size_t n,
                sv_dgram_in *out, sv_aead *ctx);
    /**
     * Optional: the full trial decryption of one datagram over @p creds, off the worker loop
     * (any thread; reads @p creds and @p in only). A core that has it is guided: the runtime
     * gives open() a guide and remembers which user each client IP was. @return the user's
     * index, or a negative errno (-EBADMSG: none); *@p trials the keys it tried.
     */
    int (*scan)(const void *creds, const uint8_t *in, size_t n, unsigned *trials);

    /**
     * Optional: does opened datagram @p in belong to the association whose state is @p session?
     * A core that has it keys associations by what the datagram carries (its session ID): the
     * association follows the client to its latest source address. Without it an association
     * is the client's (address, port), and its datagrams are opened with its own user alone.
     */
    bool (*session_match)(const void *session, const sv_dgram_in *in);
    /**
     * Optional: set up zeroed @p session for a new association from its first datagram
     * @p first (already opened), drawing random bytes from @p rng (NULL: RAND_bytes).
     * @return 0, or a negative errno (-EIO: no random bytes): the association is closed.
     */
    int (*session_init)(void *session, const sv_dgram_in *first,
                        void (*rng)(uint8_t *buf, size_t n));
    /**
     * Optional: accept opened datagram @p in of the association @p session, once (its packet
     * ID against the session's replay window). false: the datagram is dropped.
     */
    bool (*session_accept)(void *session, const sv_dgram_in *in);
    /** Optional: release what session_init() and session_accept() took. */
    void (*session_deinit)(void *session);

    /**
     * Seal one reply of the association @p session (its user @p user in @p creds) from @p from:
     * @p n payload bytes at @p payload (which may lie in @p out past overhead bytes) into
     * @p out, at most @p cap bytes; @p now the wall clock (Unix seconds), @p ctx a caller-owned
     * AEAD context, @p rng the source of salts and nonces (NULL: RAND_bytes).
     * @return wire length, or a negative errno (-EMSGSIZE when @p cap is too small).
     */
    ssize_t (*seal)(void *session, const void *creds, int user, int64_t now, const sv_dest *from,
                    const uint8_t *payload, size_t n, uint8_t *out, size_t cap, sv_aead *ctx,
                    void (*rng)(uint8_t *buf, size_t n));
} sv_dgram_ops;

#endif
