/*
 * Who holds a port ("Two instances on one port"). katana binds its listeners with
 * SO_REUSEPORT, which lets a second process with the same user bind the same port silently and
 * take a share of new connections. Before binding, callers ask here whether a socket of another
 * process already holds the address; Linux only (/proc).
 */
#ifndef SV_UTIL_HOLDER_H
#define SV_UTIL_HOLDER_H

#include <stddef.h>
#include <sys/socket.h>

/**
 * Probe whether a socket of another process holds @p addr.
 *
 * A probe socket without SO_REUSEPORT is bound to @p addr (SO_REUSEADDR for TCP, so connections
 * in TIME_WAIT do not count). When the kernel refuses it with EADDRINUSE, the listening (TCP) or
 * bound (UDP) sockets on the port are read from /proc/net/{tcp,tcp6,udp,udp6}; sockets that are
 * this process's own descriptors (/proc/self/fd) are ignored, so a reload that rebinds a port
 * katana already holds passes.
 *
 * @param addr  an AF_INET or AF_INET6 address with its port
 * @param type  SOCK_STREAM or SOCK_DGRAM
 * @param who   filled with "pid N (comm)" when another process holds it and /proc names it,
 *              else "another process"; may be NULL
 * @return 0 when the address is free or held only by this process (or the probe could not run:
 *         the real bind then reports its own error); -EADDRINUSE when another process holds it.
 */
int sv_addr_held_elsewhere(const struct sockaddr *addr, int type, char *who, size_t cap);

#endif
