/*
 * The PROXY protocol header (HAProxy's proxy-protocol.txt, versions 1 and 2) that tells a
 * relayed-to server who the client is: REALITY's xver (PROTOCOLS-2.md §1.1) sends it to the
 * target before the client's bytes, and a listener behind a load balancer reads it
 * (accept_proxy_protocol, PROTOCOLS-3.md §4.4-4.6). Pure: no I/O.
 */
#ifndef SV_UTIL_PROXY_HEADER_H
#define SV_UTIL_PROXY_HEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

/** Longest PROXY protocol header sv_proxy_header() writes: version 1 with two IPv6 addresses
 *  ("PROXY TCP6 " + 2 × 39 + 2 × 5 + 3 spaces + CRLF = 104 bytes). */
#define SV_PROXY_HEADER_MAX 108

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

/** Longest version 1 line, CRLF included (proxy-protocol.txt §2.1). */
#define SV_PROXY_V1_MAX 107
/** Longest header sv_proxy_header_parse() accepts: version 2's 16 bytes plus addresses and
 *  TLVs. The format allows 16 + 65535; what load balancers send (addresses, ALPN, authority, a
 *  unique id, SSL facts) fits well within this, and a listener holds no more before routing. */
#define SV_PROXY_READ_MAX 4096

/** What a received PROXY header says. */
typedef struct sv_proxy_info {
    unsigned version;            /**< 1 or 2 */
    bool local;                  /**< no client address given (v1 UNKNOWN, v2 LOCAL, UNSPEC or
                                  *   UNIX): the connection's own endpoints stand */
    bool datagram;               /**< v2 UDP4 / UDP6 (the sender relays datagrams) */
    struct sockaddr_storage src; /**< the client, when !local (AF_INET or AF_INET6) */
    struct sockaddr_storage dst; /**< the address the client reached, when !local */
} sv_proxy_info;

/**
 * Read the PROXY protocol header at the start of what a connection sent (proxy-protocol.txt
 * §2.1 version 1, §2.2 version 2; receiver rules PROTOCOLS-3.md §4.5): version 2 is told by
 * its 12-byte signature and version nibble 2, version 1 by "PROXY "; anything else is refused
 * as soon as its first bytes differ from both (a listener that requires the header never
 * guesses). Version 1: single spaces, canonical addresses of the named family, ports without
 * leading zeros, CRLF within SV_PROXY_V1_MAX bytes; "UNKNOWN" ignores the rest of the line.
 * Version 2: the whole 16 + L bytes skipped. LOCAL is taken whatever its family and block
 * hold (proxy-protocol.txt 2.2); for PROXY the family must be known, TLVs are walked to the end
 * (a TLV past the header is an error) and a CRC32C TLV is checked.
 * @param p    the first @p len bytes received (not owned)
 * @param out  filled when a header is returned
 * @param why  set to a static text on an error
 * @return the header's length (the bytes to skip), 0 when @p len is too short to decide yet,
 *         or -1 for bytes that are not a valid header (never more than SV_PROXY_READ_MAX).
 */
long sv_proxy_header_parse(const uint8_t *p, size_t len, sv_proxy_info *out, const char **why);

#endif
