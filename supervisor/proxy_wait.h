/*
 * Accepted sockets of a listener behind a load balancer (sv_inbound_spec.accept_proxy_protocol)
 * before their PROXY protocol header is read (proxy_wait.c): the connection, its session record
 * and its source exist only once the header names the client (PROTOCOLS-3.md §4.5: process
 * nothing until the whole header validates; never guess).
 */
#ifndef SV_PROXY_WAIT_H
#define SV_PROXY_WAIT_H

#include "supervisor/shared.h"

/**
 * Read the PROXY header of the accepted socket @p fd of listener @p l, at most SV_PROXY_WAIT_MS:
 * then the connection opens (sv__conn_open) with the header's client as its peer (the socket's
 * own for v1 UNKNOWN / v2 LOCAL) and the bytes read past it; a socket that ends, errs, sends no
 * valid header in time, or is the oldest of SV_PROXY_WAITS_MAX waiting on the worker is closed
 * (a debug line says why). Takes ownership of @p fd. Worker thread.
 * @return 0, or -ENOMEM (the socket is closed).
 */
int sv__proxy_wait_start(sv_wlistener *l, int fd);

/** Close every socket of @p w still waiting for its header (the worker ends). */
void sv__proxy_waits_close_all(sv_worker *w);

#endif
