/*
 * The outbound seam (DESIGN.md "The data plane"): what carries a flow once
 * the connector has routed it. The connector is route → the target's ops → open; it never asks
 * which kind of outbound it holds.
 *
 *  - direct (direct.c): dials the destination (a name is resolved first), and sends datagrams
 *    from one socket per address family (seed 002 "直连出站的 UDP socket").
 *  - blackhole (blackhole.c): refuses every stream and carries no datagram.
 *  - a proxy outbound (later issues) is one more file filling sv_outbound_ops and one entry in
 *    sv_outbound_ops_for() (outbound.c).
 *
 * A stream or datagram link is embedded in its owner (a connection, a UDP sub-link), lives on one
 * worker loop and reports back through an events table. Nothing is copied or allocated per read
 * or write: reads land where the owner's alloc event points (the worker's scratch buffer), writes
 * take the owner's buffers. Include direction: this header sits below runtime.h (it knows
 * destinations and the node's own addresses, not workers, planes or connections).
 */
#ifndef SV_OUTBOUND_OUTBOUND_H
#define SV_OUTBOUND_OUTBOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/dns/resolver.h"
#include "supervisor/netclass.h"
#include "supervisor/proto/core.h"
#include "supervisor/supervisor.h"

typedef struct sv_outbound_ops sv_outbound_ops;

/** Where a link runs: the worker's loop, its current own addresses and its resolver. */
typedef struct sv_ob_env {
    uv_loop_t *loop;
    sv_addrset *const *own_addrs; /**< the worker's field: read at each check, may hold NULL */
    sv_resolver *resolver;        /**< the worker's; names are resolved here */
    /** The outbound's socket policy, owned by its target (which the owner holds);
     *  NULL = none (the operator's fallback). */
    const sv_socket_policy *sock;
} sv_ob_env;

/**
 * Apply socket policy @p p (NULL: nothing) to @p fd, a new socket of @p family (AF_INET or
 * AF_INET6) not yet bound or connected: SO_MARK, SO_BINDTODEVICE, then for a stream (@p stream)
 * TCP keepalive and, when @p p has a source address of @p family, a bind to it with port 0
 * (IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect). A datagram socket binds itself to
 * sv_socket_policy_source(). TCP_NODELAY is set by the owner once connected. (sockopt.c)
 * @return 0 or -errno of the first option the kernel refused.
 */
int sv_socket_policy_apply(const sv_socket_policy *p, int fd, int family, bool stream);

/**
 * The source address (port 0) of @p p for sockets of @p family into @p ss: the family's address
 * and true, else the family's any address and false (seed 001: a bind address applies only to
 * sockets of its family). @p p may be NULL (false).
 */
bool sv_socket_policy_source(const sv_socket_policy *p, int family, struct sockaddr_storage *ss);

/**
 * Prepare's host check of outbound @p tag's policy @p p (refused at apply, not at the
 * first flow): the interface exists, and a scratch TCP socket of each family with a source
 * address (IPv4 when none, IPv6 if IPv4 is unavailable) takes every option and binds to the
 * address.
 * @return 0, or -EINVAL with @p err naming the option and the reason, e.g. "outbound direct:
 *         bind address 192.0.2.7 is not an address of this host", "outbound direct: mark 7:
 *         SO_MARK needs CAP_NET_ADMIN, which this process lacks", "outbound direct: interface
 *         eth9: no such interface on this host".
 */
int sv_socket_policy_check(const sv_socket_policy *p, const char *tag, sv_error *err);

/** Happy Eyeballs v2 "Connection Attempt Delay" (RFC 8305 §5, recommended 250 ms). */
#define SV_OB_ATTEMPT_DELAY_MS 250

/** What a stream reports to its owner (all on the worker loop). */
typedef struct sv_ob_stream_events {
    /** Once after a successful open(): 0 = ready for bytes, < 0 = dial failed or refused. */
    void (*connected)(void *owner, int status);
    /** Where the next read lands (the owner's buffer; never allocated per read). */
    void (*alloc)(void *owner, uv_buf_t *buf);
    /** @p n > 0 bytes in @p buf, UV_EOF at the peer's half-close, or another negative error. */
    void (*read)(void *owner, ssize_t n, const uv_buf_t *buf);
    /** The one write() in flight completed (< 0: failed or cancelled by close). */
    void (*written)(void *owner, int status);
    /** After close(): nothing of the stream is in flight any more; its memory may go. */
    void (*closed)(void *owner);
} sv_ob_stream_events;

/**
 * One outbound stream. The owner zeroes it, sets ops/ev/owner/env and calls ops->open; the
 * fields below `allow_internal` belong to the implementation.
 */
typedef struct sv_ob_stream {
    const sv_outbound_ops *ops;
    const sv_ob_stream_events *ev;
    void *owner;
    sv_ob_env env;
    /** A name that resolves to an internal address may be dialled (the inbound's
     *  allow_private, a route that named the destination, or the operator's fallback). */
    bool allow_internal;
    /** Set by the outbound before its connected event reports a refusal because a name
     *  resolved to an internal address that allow_internal did not allow (direct); the owner
     *  reads it there (the operator's count of refusals, sv__connector_refused_name). */
    bool refused_internal;
    bool closing, tcp_inited;
    int pending;  /**< handles and requests in flight */
    uv_tcp_t tcp;           /**< an IP destination's socket, or a name's first attempt */
    uv_tcp_t *sock;         /**< the connected socket: &tcp, or a later attempt's that won */
    /** A name's resolution and connection attempts (direct.c), only while it dials
     * (nothing of it stays with an idle connection). The connect and write requests are
     *  allocated while in flight, for the same reason. */
    struct sv_ob_eyeballs *he;
    uv_shutdown_t *sd; /**< allocated at shutdown (once per stream), freed when it completes */
    void *impl;   /**< an implementation's own state (a proxy's cipher); NULL for direct */
} sv_ob_stream;

/** What a datagram link reports to its owner (all on the worker loop). */
typedef struct sv_ob_dgram_events {
    /** Where the next reply lands (the owner's buffer). */
    void (*alloc)(void *owner, uv_buf_t *buf);
    /** One reply of @p n bytes from @p from (borrowed for the call). */
    void (*recv)(void *owner, const struct sockaddr *from, const uint8_t *p, size_t n);
    /** A datagram of @p n payload bytes was handed to the kernel (billing, seed 002). */
    void (*sent)(void *owner, size_t n);
    /** After dgram_close(): nothing of the link is in flight any more; its memory may go. */
    void (*closed)(void *owner);
} sv_ob_dgram_events;

/** Datagrams (and their bytes) a direct link holds while a name resolves (waiting
 *  instead of dropped); past either bound a datagram is dropped. */
#define SV_OB_DGRAM_QUEUE_MAX 32
#define SV_OB_DGRAM_QUEUE_BYTES 65536

/**
 * One outbound datagram link (a UDP sub-link's carrier). The owner zeroes it, sets
 * ops/ev/owner/env and calls ops->dgram_open; the fields below `env` belong to the
 * implementation.
 */
typedef struct sv_ob_dgram {
    const sv_outbound_ops *ops;
    const sv_ob_dgram_events *ev;
    void *owner;
    sv_ob_env env;
    int pending;       /**< open handles and requests */
    bool closing, resolving;
    uv_udp_t sock[2];  /**< [0] AF_INET, [1] AF_INET6 */
    bool inited[2];    /**< that socket's handle is initialised (closed by dgram_close) */
    bool has[2];       /**< that family's socket is bound and receiving: it can send */
    sv_dns_req dns;    /**< the one query in flight (seed 002: one per sub-link) */
    struct sv_ob_held *held, *held_tail; /**< datagrams waiting for a name, in order */
    size_t n_held, held_bytes;
    void *impl;
} sv_ob_dgram;

/**
 * The ops table every outbound fills. Streams: open, then (once connected) any of
 * read/try_write/write/shutdown, then close exactly once whatever open returned. Datagrams:
 * dgram_open, dgram_send, then dgram_close exactly once whatever dgram_open returned. No event
 * but `closed` follows close; `closed` may come from inside close when nothing was in flight.
 * An outbound that carries no datagram leaves the three dgram ops NULL: the fan-out drops what is
 * routed to it, unbilled (seed 002).
 */
struct sv_outbound_ops {
    const char *name;
    /** it refuses every stream and carries no datagram (blackhole): the connector counts a
     *  flow routed to it as refused (sv_refusal), whatever kind it is */
    bool refuses_all;
    /**
     * Open a stream to @p d (borrowed for the call). @return 0: ev->connected follows once;
     * < 0: refused or failed now (-ECONNREFUSED for a blackhole); close it all the same.
     */
    int (*open)(sv_ob_stream *s, const sv_dest *d);
    /** Start (@p on) or stop delivering reads; starting after EOF or close does nothing. */
    void (*read)(sv_ob_stream *s, bool on);
    /** Write what the kernel takes now. @return bytes taken (0..total), or < 0 (failed). */
    int (*try_write)(sv_ob_stream *s, const uv_buf_t *iov, unsigned n);
    /** Queue @p n buffers (kept alive by the owner until ev->written). One at a time. @return 0
     *  or < 0 (then no event follows). */
    int (*write)(sv_ob_stream *s, const uv_buf_t *iov, unsigned n);
    /** Half-close after the queued write. @return 0 or < 0. */
    int (*shutdown)(sv_ob_stream *s);
    /** Close: cancel a pending dial or resolution; ev->closed follows once. */
    void (*close)(sv_ob_stream *s);
    /**
     * Optional (Vision's direct copy by splice(2)): the connected socket of a stream
     * whose bytes pass to the destination as they are, for the owner to relay in the kernel.
     * The owner may use it only while no read or write of the stream is active, does its own
     * half-close on it (shutdown(2)) and never closes it: close() does. @return the descriptor,
     * or < 0 when the stream has none (not connected, closing) or transforms its bytes; NULL:
     * never (a proxy's cipher).
     */
    int (*fileno)(const sv_ob_stream *s);
    /** Open a datagram link. @return 0, or < 0 (seed 002: direct fails only when no address
     *  family binds, -EADDRNOTAVAIL); close it all the same. */
    int (*dgram_open)(sv_ob_dgram *g);
    /**
     * Send @p n bytes to @p d; dropped silently when no socket can reach it, when a name
     * resolves to an internal address and @p allow_internal is false, or when the
     * queue of datagrams waiting for a name is full. ev->sent reports what left.
     */
    void (*dgram_send)(sv_ob_dgram *g, const sv_dest *d, const uint8_t *p, size_t n,
                       bool allow_internal);
    /** Close the link; ev->closed follows once. */
    void (*dgram_close)(sv_ob_dgram *g);
};

/** direct (direct.c) and blackhole (blackhole.c). */
extern const sv_outbound_ops sv_ob_direct;
extern const sv_outbound_ops sv_ob_blackhole;

/** The implementation of outbounds of @p kind, or NULL for a kind no file implements. */
const sv_outbound_ops *sv_outbound_ops_for(enum sv_outbound_kind kind);

#endif
