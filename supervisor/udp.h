/*
 * UDP associations of a worker (udp.c): a listener's datagrams and the associations carried in
 * a stream (Trojan UDP ASSOCIATE, Mux.Cool UDP sessions and XUDP), and their sweeps.
 */
#ifndef SV_UDP_H
#define SV_UDP_H

#include "supervisor/shared.h"

/**
 * A datagram source carried inside a stream (Trojan UDP ASSOCIATE; later VLESS, VMess,
 * Mux): where the UDP fan-out sends the replies of an association it does not own the socket of.
 */
typedef struct sv_dgram_source {
    /** One reply datagram from @p from (@p p, @p n bytes; borrowed for the call). */
    void (*reply)(void *ctx, const sv_dest *from, const uint8_t *p, size_t n);
    /** The association is gone (all its sub-links closed): @p ctx may go too. */
    void (*released)(void *ctx);
    /** XUDP sources only (sv__assoc_open_xudp), else NULL: the association moved to another
     *  owner (a New frame with its GlobalID); @p ctx forgets it and gets no released. */
    void (*taken)(void *ctx);
} sv_dgram_source;

typedef struct sv_assoc sv_assoc;

/**
 * Open an association of principal @p p inside a stream of worker @p w (udp.c): it shares the
 * connection's session @p sess (which must outlive it: @p src->released says when it may go),
 * routes, refuses and bills each datagram like Shadowsocks UDP, and sends replies to @p src.
 * @param l       the connection's listener (it outlives the connection): its current handler's
 *                allow_private decides each datagram
 * @param client  the connection's peer (the route's source)
 * @return the association, or NULL on allocation failure.
 */
sv_assoc *sv__assoc_open_in_stream(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                                   sv_principal *p, sv_session_rec *sess,
                                   const struct sockaddr *client, const sv_dgram_source *src,
                                   void *ctx);
/**
 * XUDP (PROTOCOLS-2.md §5.3 item 3): the association of a Mux.Cool UDP session whose
 * New frame carried GlobalID @p gid (8 bytes). All zeros: a new association, as
 * sv__assoc_open_in_stream(). Otherwise the worker's table (xudp.h) is asked for (@p l, user of
 * @p p, @p gid): a detached association, or one another sub-flow carries (that owner's
 * src->taken is called first), re-attaches to @p src / @p ctx, @p sess, @p h, @p p and
 * @p client with its sockets and sub-links (the remote peers keep the same mapping); else a
 * new one is opened and recorded. Arguments as sv__assoc_open_in_stream(); @p src must have
 * `taken`. Routing, refusal and billing stay per datagram, to the user of @p p.
 * @return the association, or NULL on allocation failure.
 */
sv_assoc *sv__assoc_open_xudp(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                              sv_principal *p, sv_session_rec *sess,
                              const struct sockaddr *client, const uint8_t *gid,
                              const sv_dgram_source *src, void *ctx);
/**
 * The owner of @p a is done with it (its sub-flow ended: End frame, connection closed). An
 * association in the XUDP table is detached: src->released(ctx) is called now, its sockets stay
 * open, replies are dropped unbilled, and it closes when re-attached and let go again, at
 * expiry (sv__udp_sweep, SV_XUDP_KEEP_MS), when evicted (SV_XUDP_DETACHED_MAX), or with its
 * listener, user or worker. Any other association is closed (sv__assoc_close).
 */
void sv__assoc_let_go(sv_assoc *a);
/** Close the detached XUDP associations of @p w older than SV_XUDP_KEEP_MS (worker sweep). */
void sv__udp_sweep(sv_worker *w);
/** Route and send one datagram of @p a to @p d (dropped silently when refused or blocked). */
void sv__assoc_send(sv_assoc *a, const sv_dest *d, const uint8_t *p, size_t n);
/** Close @p a: no reply is sent after this; src->released follows once its sockets closed. */
void sv__assoc_close(sv_assoc *a);

/** UDP receive callback of a worker's listener (udp.c). */
void sv__udp_on_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                     unsigned flags);
/** Allocation callback of a listener's UDP socket: the worker's scratch buffer. */
void sv__udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
/** The UDP counterparts of sv__conn_scan_flags / sv__conn_revoke / sv__conn_close_all. */
void sv__udp_scan_flags(sv_worker *w);
void sv__udp_revoke(sv_worker *w, sv_wlistener *l);
void sv__udp_close_all(sv_worker *w);
/** Forget the datagrams of @p w waiting for a scan (worker exit; udp.c): their scans are
 *  cancelled, their listeners released. */
void sv__udp_scans_cancel(sv_worker *w);
/**
 * End the UDP associations of a listener that stops: its socket is closed, so they can neither
 * receive from their clients nor answer them, and waiting out a shutdown grace for them is moot.
 */
void sv__udp_close_listener(sv_worker *w, sv_wlistener *l);

#endif
