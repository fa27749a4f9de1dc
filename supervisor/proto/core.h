/*
 * What every protocol core shares: destinations in the SOCKS5 address style (PROTOCOLS.md §1.1 A).
 * Cores are sans-I/O: they see bytes and keys, never a socket, a clock, a log or a global.
 */
#ifndef SV_PROTO_CORE_H
#define SV_PROTO_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "supervisor/supervisor.h"

enum sv_atyp { SV_ATYP_IPV4 = 1, SV_ATYP_DOMAIN = 3, SV_ATYP_IPV6 = 4 };

/** A requested destination. host is NUL-terminated for SV_ATYP_DOMAIN (1..255 bytes). */
typedef struct sv_dest {
    uint8_t atyp;     /**< enum sv_atyp */
    uint8_t ip[16];   /**< IPv4 in ip[0..3], IPv6 in ip[0..15], network order */
    char host[256];
    uint16_t port;
    enum sv_network network;
} sv_dest;

/** Longest encoded address: ATYP + len + 255 + port. */
#define SV_DEST_WIRE_MAX (1 + 1 + 255 + 2)

/**
 * Parse a SOCKS5-style address (ATYP, ADDR, PORT) at the start of @p p.
 * @return bytes consumed (> 0); 0 when @p n is too short to tell; -EPROTO for an unknown ATYP or
 *         a zero-length domain.
 */
ssize_t sv_dest_parse(const uint8_t *p, size_t n, sv_dest *d);

/** Encode @p d in SOCKS5 style into @p out (at least SV_DEST_WIRE_MAX bytes). @return length. */
size_t sv_dest_encode(const sv_dest *d, uint8_t *out);

/**
 * Parse an operator's "HOST:PORT" (the Trojan fallback): HOST an IPv4 address, a
 * bracketed IPv6 address ("[::1]:80") or a name of 1..253 bytes of letters, digits, '-', '.',
 * '_'; PORT 1..65535. network is set to TCP.
 * @return 0, or -EINVAL with nothing else said (the caller names the setting).
 */
int sv_dest_parse_hostport(const char *s, sv_dest *d);

/** Format "host:port" ("[v6]:port" for IPv6) into @p buf. @return snprintf's result. */
int sv_dest_format(const sv_dest *d, char *buf, size_t cap);

/**
 * Parse a v2ray-style address (PROTOCOLS.md §1.1 B: PORT u16be, TYPE 1 IPv4 / 2 domain /
 * 3 IPv6, ADDR) at the start of @p p, as used by VLESS, VMess and Mux.Cool. @p d gets the SOCKS5
 * type codes of enum sv_atyp (network unset: 0).
 * @return bytes consumed (> 0); 0 when @p n is too short to tell; -EPROTO for an unknown TYPE,
 *         an empty domain or one holding a NUL.
 */
ssize_t sv_dest_parse_b(const uint8_t *p, size_t n, sv_dest *d);

#endif
