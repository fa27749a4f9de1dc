/*
 * The optional extensions of the protocol-core seam (proto.h): what only some cores have, each a
 * small table of its own that a core offers by capability (sv_proto_ops.ext[cap]). The runtime
 * asks for a capability, never for a protocol, and a new core fills only the extensions it has.
 * A core that offers an extension fills every member of it not marked optional.
 *
 *  capability               | table                     | offered by
 *  -------------------------+---------------------------+-----------------------------------------
 *  SV_PROTO_CAP_RELOAD      | sv_proto_ext_reload       | Shadowsocks
 *  SV_PROTO_CAP_REPLAY      | sv_proto_ext_replay       | Shadowsocks (also over Mux.Cool), SS2022,
 *                           |                           | VMess
 *  SV_PROTO_CAP_CLOCK       | sv_proto_ext_clock        | VMess, SS2022, gRPC (for its inner core)
 *  SV_PROTO_CAP_GUIDE       | sv_proto_ext_guide        | Shadowsocks (also over Mux.Cool)
 *  SV_PROTO_CAP_BACKLOG     | sv_proto_ext_backlog      | Shadowsocks (also over Mux.Cool), VLESS,
 *                           |                           | gRPC (with queued)
 *  SV_PROTO_CAP_DATAGRAM    | sv_proto_ext_datagram     | Trojan, VLESS, VMess, gRPC
 *  SV_PROTO_CAP_END         | sv_proto_ext_end          | VLESS, VMess, Shadowsocks over Mux.Cool,
 *                           |                           | gRPC
 *  SV_PROTO_CAP_DIRECT      | sv_proto_ext_direct       | VLESS (XTLS Vision); SOCKS5 and HTTP
 *                           |                           | tunnels in clear (no layer: spliced)
 *  SV_PROTO_CAP_RELAY       | sv_proto_ext_relay        | SOCKS5 (also in mixed)
 */
#ifndef SV_PROTO_PROTO_EXT_H
#define SV_PROTO_PROTO_EXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/proto/core.h"
#include "supervisor/supervisor.h"

/** What a core may offer beyond the core interface: the index of its table in
 *  sv_proto_ops.ext. */
enum sv_proto_cap {
    SV_PROTO_CAP_RELOAD,   /**< sv_proto_ext_reload */
    SV_PROTO_CAP_REPLAY,   /**< sv_proto_ext_replay */
    SV_PROTO_CAP_CLOCK,    /**< sv_proto_ext_clock */
    SV_PROTO_CAP_GUIDE,    /**< sv_proto_ext_guide */
    SV_PROTO_CAP_BACKLOG,  /**< sv_proto_ext_backlog */
    SV_PROTO_CAP_DATAGRAM, /**< sv_proto_ext_datagram */
    SV_PROTO_CAP_END,      /**< sv_proto_ext_end */
    SV_PROTO_CAP_DIRECT,   /**< sv_proto_ext_direct */
    SV_PROTO_CAP_RELAY,    /**< sv_proto_ext_relay */
    SV_PROTO_CAP_COUNT
};

/**
 * A worker's most recently matched order of one credential table's users, for a core that
 * walks its users in a trial decryption (SV_PROTO_CAP_GUIDE). The runtime makes, touches and
 * frees it (plane.h sv__order_*) and only passes it to the core; its layout is the guided
 * core's (proto/shadowsocks.h).
 */
struct sv_order;

/** Rebuild a credential table from the one it replaces (a reload). */
typedef struct sv_proto_ext_reload {
    /**
     * creds_new() for a reload:
     * @p was_creds is the credential table of the handler being replaced (same core, same
     * inbound tag; borrowed), @p from[i] the index there of new user i when it is the same user
     * with the same secret, else -1. A core copies what it derived for such users instead of
     * deriving it again, when its own settings (e.g. the cipher) are unchanged.
     * @return as creds_new().
     */
    int (*creds_new_from)(const sv_inbound_spec *in, const sv_user_set *users,
                          const void *was_creds, const int *from, void **out, sv_error *err);
} sv_proto_ext_reload;

/** A core whose handshakes carry a salt or an ID that must not be seen twice. */
typedef struct sv_proto_ext_replay {
    /** Share the inbound's replay filter @p filter (borrowed; it outlives the table) with the
     *  credential table @p creds. */
    void (*attach_replay)(void *creds, sv_replay *filter);
} sv_proto_ext_replay;

/** A core that checks client timestamps. */
typedef struct sv_proto_ext_clock {
    /**
     * The wall clock (VMess auth ID window, PROTOCOLS.md §6.3; Shadowsocks 2022 ±30 s, §3.4),
     * in Unix seconds. The runtime calls it before every feed() until the connection is
     * authenticated (on a multiplexed connection, before every feed()); a core reads no clock
     * of its own, so tests drive time here.
     */
    void (*set_time)(void *state, int64_t unix_s);
} sv_proto_ext_clock;

/** A core that finds its user by trial decryption, guided by the runtime. */
typedef struct sv_proto_ext_guide {
    /**
     * How the first feed() walks the users: try index @p hint first (-1: none), then the others
     * in @p order (the worker's most recently matched order for this credential table, borrowed
     * for the connection's life; NULL: index order), at most @p limit keys (0: all). Called
     * after init() and before the first feed(). A wrong hint costs one trial, never a wrong
     * user. When @p limit keys missed, feed() gives SV_FX_SCAN instead of trying the rest.
     */
    void (*set_guide)(void *state, int hint, struct sv_order *order, unsigned limit);
    /**
     * The full scan of SV_FX_SCAN's bytes @p in (@p n bytes) over the credential table: any
     * thread, reads @p creds and @p in only. @return the user's index, or a negative errno
     * (-EBADMSG: no user); *@p trials the keys it tried.
     */
    int (*scan)(const void *creds, const uint8_t *in, size_t n, unsigned *trials);
    /**
     * The scan's answer, @p user (its index, or -1: none found, or the scan was refused over
     * its budget). The next feed() with the same bytes checks it by a trial of that key alone:
     * a wrong answer fails the client, never names a wrong user.
     */
    void (*scan_result)(void *state, int user);
} sv_proto_ext_guide;

/** A core that holds effects or output beyond one call. */
typedef struct sv_proto_ext_backlog {
    /**
     * After a feed(), does the core have effects to give before it takes more bytes (a scan's
     * answer waiting; a core around many streams, gRPC: one client read may carry more
     * messages than one effect list holds)? The runtime then calls feed() again at
     * once with the unconsumed rest of its input, which may be empty, even when feed()
     * returned 0.
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
} sv_proto_ext_backlog;

/** A core that carries UDP associations inside the stream. */
typedef struct sv_proto_ext_datagram {
    /** Frame one reply datagram of the UDP association carried in stream @p stream, from
     *  @p from. @return wire length, or -EMSGSIZE. */
    ssize_t (*frame_datagram)(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap);
} sv_proto_ext_datagram;

/** A core whose streams end with bytes of their own. */
typedef struct sv_proto_ext_end {
    /**
     * The bytes that end stream @p stream's downstream once its outbound has closed, written
     * before the runtime half-closes the client (VMess: the response header if none went yet,
     * then the end-of-stream chunk, PROTOCOLS.md §6.6). On a multiplexed connection: the
     * stream's End frame (Mux.Cool, §7.3), written when its outbound ended, failed or was killed
     * or its pending bytes overflowed (@p abort: it did not end cleanly, option 0x02, so the
     * client drops the stream at once); the core forgets the stream, the connection goes on.
     * @return wire length (0 = nothing), or a negative errno (-EMSGSIZE when @p cap <
     *         frame_max(0)); the runtime then closes the connection.
     */
    ssize_t (*frame_end)(void *state, const void *creds, uint32_t stream, bool abort,
                         uint8_t *out, size_t cap);
} sv_proto_ext_end;

/** Bits of sv_proto_ext_direct.direct (XTLS Vision, PROTOCOLS-2.md §2.6); the values of
 *  layer.h's enum sv_layer_direct, which the runtime passes to the transport chain as they
 *  are. */
enum sv_direct {
    SV_DIRECT_WATCH = 1u, /**< the client may switch to raw: deliver its records one by one */
    SV_DIRECT_IN = 2u,    /**< client bytes after the piece last fed are raw under the layer */
    SV_DIRECT_OUT = 4u,   /**< bytes framed after those given so far go raw under the layer */
};

/** A core that may switch the transport under it to direct copy. */
typedef struct sv_proto_ext_direct {
    /**
     * The SV_DIRECT_* bits the core wants from the transport chain under it now (XTLS Vision:
     * watch from the request on, raw in after the client's command 2 frame, raw out after ours).
     * The runtime asks after every feed() and frame() and passes new bits to sv_chain_direct();
     * a chain that cannot ends the connection. IN and OUT stay once set; WATCH holds while the
     * client may still switch.
     */
    unsigned (*direct)(const void *state);
} sv_proto_ext_direct;

struct sockaddr;

/**
 * A core whose UDP association travels beside the stream, on a relay socket of its own
 * (SOCKS5's UDP ASSOCIATE, RFC 1928 §7): its SV_FX_OPEN of a UDP destination opens the relay
 * (a UDP socket on the address the client reached, a port of the kernel's choice) and the
 * association, then sends the client relay_ready()'s bytes. Datagrams reach the relay only from
 * the connection's client address (the first one's port then holds); each is opened with
 * relay_open(); replies are framed with the core's sv_proto_ext_datagram, which it must offer
 * too, and sent from the relay to the client. The association ends with the connection.
 */
typedef struct sv_proto_ext_relay {
    /** The answer that tells the client where to send (@p bound: the relay's address).
     *  @return its length (≤ @p cap), or -EMSGSIZE. */
    ssize_t (*relay_ready)(void *state, const struct sockaddr *bound, uint8_t *out, size_t cap);
    /** The answer when the relay cannot be opened (no socket): sent, then the connection
     *  closes. @return its length (≤ @p cap), or -EMSGSIZE. */
    ssize_t (*relay_failed)(void *state, uint8_t *out, size_t cap);
    /** Open client datagram @p p (@p n bytes): its destination (network UDP) and where its
     *  payload starts. @return 0; -EPROTO (malformed) or -EOPNOTSUPP (a fragment, which a
     *  server that does not reassemble drops): the datagram is dropped. */
    int (*relay_open)(const uint8_t *p, size_t n, sv_dest *dest, size_t *payload_off);
} sv_proto_ext_relay;

#endif
