/*
 * A worker's TCP connections as the worker sees them (conn.c): open one on an accepted socket,
 * and close them by flag, revocation, idleness, age before authentication, or all.
 */
#ifndef SV_CONN_H
#define SV_CONN_H

#include "supervisor/shared.h"

/**
 * Start serving the accepted client socket @p fd on listener @p l (conn.c): the connection
 * counts in l->w->n_conns and sv_shared.n_conns until its last handle closes, and is pre-auth
 * (sv_worker.preauth) until its core authenticates it or it closes. Takes ownership of @p fd.
 * @param peer   the client's address (AF_INET or AF_INET6), or NULL: the socket's peer. A
 *               PROXY protocol header's client (proxy_wait.c) is the session's source, the
 *               address device limits, audit and the API see
 * @param first  @p first_len bytes the client sent already (read past a PROXY header; at most
 *               SV_PROXY_READ_MAX), served before the socket's, or NULL
 * @return 0, or -ENOMEM (the socket is closed: the client sees the connection end).
 */
int sv__conn_open(sv_wlistener *l, int fd, const struct sockaddr *peer, const uint8_t *first,
                  size_t first_len);
/**
 * Close the oldest connection of @p w that is not authenticated (nor closing), in
 * accept order (conn.c). @return false when there is none.
 */
bool sv__conn_evict_oldest(sv_worker *w);
/**
 * Close the connections of @p w not authenticated (nor closing) that were accepted
 * before @p before_ms (sv__wall_ms), oldest first (conn.c). @return how many.
 */
unsigned sv__conn_preauth_expire(sv_worker *w, uint64_t before_ms);

/** Close every connection whose session/flow was asked to close (conn.c). */
void sv__conn_scan_flags(sv_worker *w);
/** Close every TCP connection of @p l whose user is no longer in l->handler (conn.c). */
void sv__conn_revoke(sv_worker *w, sv_wlistener *l);
/** Close every established relay that moved no byte for SV_TCP_IDLE_MS (conn.c). */
void sv__conn_sweep_idle(sv_worker *w);
/** Close every TCP connection (shutdown / exit). */
void sv__conn_close_all(sv_worker *w);

#endif
