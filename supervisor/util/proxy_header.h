/*
 * The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2) that tells a
 * relayed-to server who the client is: REALITY's xver (PROTOCOLS-2.md §1.1) sends it to the
 * target before the client's bytes. Pure: no I/O.
 */
#ifndef SV_UTIL_PROXY_HEADER_H
#define SV_UTIL_PROXY_HEADER_H

#include <stddef.h>
#include <stdint.h>

/** Longest PROXY protocol header sv_proxy_header() writes: version 1 with two IPv6 addresses
 *  ("PROXY TCP6 " + 2 × 39 + 2 × 5 + 3 spaces + CRLF = 104 bytes). */
#define SV_PROXY_HEADER_MAX 108

struct sockaddr;

/**
 * Write the PROXY protocol header (HAProxy's proxy-protocol.txt) that REALITY's xver sends to
 * the target before relaying a connection (PROTOCOLS-2.md §1.1): version 1 (text, "PROXY TCP4
 * src dst sport dport\r\n") or 2 (binary, command PROXY over TCP) for a TCP connection from
 * @p src (the client) to @p dst (the address it reached), both AF_INET or AF_INET6; IPv4 and
 * IPv4-mapped IPv6 addresses are written as IPv4. Addresses of other or mixed families give
 * "PROXY UNKNOWN\r\n" (v1) or the LOCAL command without addresses (v2).
 * @param ver  1 or 2
 * @param out  SV_PROXY_HEADER_MAX bytes
 * @return the header's length, or 0 for another @p ver.
 */
size_t sv_proxy_header(unsigned ver, const struct sockaddr *src, const struct sockaddr *dst,
                       uint8_t out[SV_PROXY_HEADER_MAX]);

#endif
