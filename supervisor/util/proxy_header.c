/* The PROXY protocol header (proxy_header.h). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/util/proxy_header.h"

/* The IPv4 address of @p sa (AF_INET, or an IPv4-mapped AF_INET6) into @p ip4 and its port;
 * @return false for anything else. */
static bool ipv4_of(const struct sockaddr *sa, uint8_t ip4[4], uint16_t *port)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        memcpy(ip4, &a->sin_addr, 4);
        *port = ntohs(a->sin_port);
        return true;
    }
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    if (sa->sa_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
        return false;
    memcpy(ip4, a->sin6_addr.s6_addr + 12, 4);
    *port = ntohs(a->sin6_port);
    return true;
}

size_t sv_proxy_header(unsigned ver, const struct sockaddr *src, const struct sockaddr *dst,
                       uint8_t out[SV_PROXY_HEADER_MAX])
{
    static const uint8_t sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                    0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
    uint8_t s4[4], d4[4];
    uint16_t sp = 0, dp = 0;
    const uint8_t *sa = NULL, *da = NULL;
    size_t alen = 0;
    if (ipv4_of(src, s4, &sp) && ipv4_of(dst, d4, &dp)) {
        sa = s4, da = d4, alen = 4;
    } else if (src->sa_family == AF_INET6 && dst->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)src;
        const struct sockaddr_in6 *d6 = (const struct sockaddr_in6 *)dst;
        sa = s6->sin6_addr.s6_addr, da = d6->sin6_addr.s6_addr, alen = 16;
        sp = ntohs(s6->sin6_port), dp = ntohs(d6->sin6_port);
    }
    if (ver == 1) {
        char st[INET6_ADDRSTRLEN], dt[INET6_ADDRSTRLEN];
        int af = alen == 4 ? AF_INET : AF_INET6;
        if (alen == 0 || inet_ntop(af, sa, st, sizeof st) == NULL ||
            inet_ntop(af, da, dt, sizeof dt) == NULL) {
            memcpy(out, "PROXY UNKNOWN\r\n", 15);
            return 15;
        }
        int n = snprintf((char *)out, SV_PROXY_HEADER_MAX, "PROXY TCP%c %s %s %u %u\r\n",
                         alen == 4 ? '4' : '6', st, dt, (unsigned)sp, (unsigned)dp);
        return n > 0 && n < SV_PROXY_HEADER_MAX ? (size_t)n : 0;
    }
    if (ver != 2)
        return 0;
    memcpy(out, sig, sizeof sig);
    out[12] = alen != 0 ? 0x21 : 0x20;                      /* version 2, PROXY or LOCAL */
    out[13] = alen == 4 ? 0x11 : alen == 16 ? 0x21 : 0x00;  /* TCP over IPv4 / IPv6, UNSPEC */
    size_t body = alen != 0 ? 2 * alen + 4 : 0;
    out[14] = (uint8_t)(body >> 8);
    out[15] = (uint8_t)body;
    if (alen != 0) {
        memcpy(out + 16, sa, alen);
        memcpy(out + 16 + alen, da, alen);
        out[16 + 2 * alen] = (uint8_t)(sp >> 8);
        out[17 + 2 * alen] = (uint8_t)sp;
        out[18 + 2 * alen] = (uint8_t)(dp >> 8);
        out[19 + 2 * alen] = (uint8_t)dp;
    }
    return 16 + body;
}
