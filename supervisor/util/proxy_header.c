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

/* ---------------------------------------------------------------------------------------- */
/* reading (sv_proxy_header_parse)                                                           */
/* ---------------------------------------------------------------------------------------- */

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                   0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static long refuse(const char **why, const char *text)
{
    *why = text;
    return -1;
}

/* A decimal port of 1..5 digits without a leading zero (or "0"), in [s, e). */
static bool v1_port(const char *s, const char *e, uint16_t *port)
{
    size_t n = (size_t)(e - s);
    if (n == 0 || n > 5 || (s[0] == '0' && n > 1))
        return false;
    unsigned v = 0;
    for (const char *c = s; c < e; c++) {
        if (*c < '0' || *c > '9')
            return false;
        v = v * 10 + (unsigned)(*c - '0');
    }
    if (v > 65535)
        return false;
    *port = (uint16_t)v;
    return true;
}

/* One address of family @p af in [s, e), canonical: it prints back as written. */
static bool v1_addr(int af, const char *s, const char *e, struct sockaddr_storage *ss,
                    uint16_t port)
{
    char text[INET6_ADDRSTRLEN], back[INET6_ADDRSTRLEN];
    size_t n = (size_t)(e - s);
    if (n == 0 || n >= sizeof text)
        return false;
    memcpy(text, s, n);
    text[n] = '\0';
    memset(ss, 0, sizeof *ss);
    if (af == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        if (inet_pton(AF_INET, text, &a->sin_addr) != 1 ||
            inet_ntop(AF_INET, &a->sin_addr, back, sizeof back) == NULL)
            return false;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        if (inet_pton(AF_INET6, text, &a->sin6_addr) != 1 ||
            inet_ntop(AF_INET6, &a->sin6_addr, back, sizeof back) == NULL)
            return false;
    }
    return strcmp(text, back) == 0;
}

/* Version 1: "PROXY TCP4|TCP6 src dst sport dport\r\n" or "PROXY UNKNOWN...\r\n". */
static long parse_v1(const uint8_t *p, size_t len, sv_proxy_info *out, const char **why)
{
    const char *s = (const char *)p;
    size_t scan = len < SV_PROXY_V1_MAX ? len : SV_PROXY_V1_MAX;
    const char *lf = memchr(s, '\n', scan);
    if (lf == NULL)
        return len < SV_PROXY_V1_MAX ? 0
                                     : refuse(why, "PROXY v1 line without CRLF in 107 bytes");
    if (lf == s || lf[-1] != '\r')
        return refuse(why, "PROXY v1 line ends with a lone LF");
    const char *end = lf - 1; /* the CR */
    if (memchr(s, '\r', (size_t)(end - s)) != NULL)
        return refuse(why, "PROXY v1 line holds a lone CR");
    long total = (long)(lf - s) + 1;
    memset(out, 0, sizeof *out);
    out->version = 1;
    const char *f = s + 6; /* after "PROXY " */
    if ((size_t)(end - f) >= 7 && memcmp(f, "UNKNOWN", 7) == 0) {
        out->local = true;
        return total;
    }
    if ((size_t)(end - f) < 5 || memcmp(f, "TCP", 3) != 0 || (f[3] != '4' && f[3] != '6') ||
        f[4] != ' ')
        return refuse(why, "PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN");
    int af = f[3] == '4' ? AF_INET : AF_INET6;
    const char *field[4], *fend[4];
    const char *c = f + 5;
    for (int i = 0; i < 4; i++) {
        field[i] = c;
        while (c < end && *c != ' ')
            c++;
        fend[i] = c;
        if (i < 3) {
            if (c >= end)
                return refuse(why, "PROXY v1 line has too few fields");
            c++;
        }
    }
    if (c != end)
        return refuse(why, "PROXY v1 line has too many fields");
    uint16_t sport, dport;
    if (!v1_port(field[2], fend[2], &sport) || !v1_port(field[3], fend[3], &dport))
        return refuse(why, "PROXY v1 port is not a decimal 0..65535 without leading zeros");
    if (!v1_addr(af, field[0], fend[0], &out->src, sport) ||
        !v1_addr(af, field[1], fend[1], &out->dst, dport))
        return refuse(why, "PROXY v1 address is not a canonical address of its family");
    return total;
}

/* CRC32C (Castagnoli, reflected 0x82F63B78) of @p n bytes, bit by bit: headers are short. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* Walk the TLVs of a version 2 header [16 + skip, total); check a CRC32C TLV over the whole. */
static long v2_tlvs(const uint8_t *p, size_t at, size_t total, const char **why)
{
    while (at < total) {
        if (total - at < 3)
            return refuse(why, "PROXY v2 TLV runs past the header");
        size_t vlen = (size_t)p[at + 1] << 8 | p[at + 2];
        if (vlen > total - at - 3)
            return refuse(why, "PROXY v2 TLV runs past the header");
        if (p[at] == 0x03) { /* PP2_TYPE_CRC32C */
            if (vlen != 4)
                return refuse(why, "PROXY v2 CRC32C TLV is not 4 bytes");
            uint8_t copy[SV_PROXY_READ_MAX];
            memcpy(copy, p, total);
            memset(copy + at + 3, 0, 4);
            uint32_t want = (uint32_t)p[at + 3] << 24 | (uint32_t)p[at + 4] << 16 |
                            (uint32_t)p[at + 5] << 8 | p[at + 6];
            if (crc32c(copy, total) != want)
                return refuse(why, "PROXY v2 CRC32C does not match the header");
        }
        at += 3 + vlen;
    }
    return (long)total;
}

static long parse_v2(const uint8_t *p, size_t len, sv_proxy_info *out, const char **why)
{
    if (len < 16)
        return 0;
    if ((p[12] >> 4) != 2)
        return refuse(why, "PROXY v2 version is not 2");
    unsigned cmd = p[12] & 0x0f;
    if (cmd > 1)
        return refuse(why, "PROXY v2 command is neither LOCAL nor PROXY");
    size_t total = 16 + ((size_t)p[14] << 8 | p[15]);
    if (total > SV_PROXY_READ_MAX)
        return refuse(why, "PROXY v2 header is longer than 4096 bytes");
    if (len < total)
        return 0;
    memset(out, 0, sizeof *out);
    out->version = 2;
    if (cmd == 0) { /* LOCAL (the sender's own, e.g. a health check): the block and its family
                     * are ignored, the connection keeps its endpoints (proxy-protocol.txt 2.2) */
        out->local = true;
        return (long)total;
    }
    size_t alen = 0;
    switch (p[13]) {
    case 0x00: break;                           /* UNSPEC */
    case 0x11: case 0x12: alen = 12; break;    /* TCP4, UDP4 */
    case 0x21: case 0x22: alen = 36; break;    /* TCP6, UDP6 */
    case 0x31: case 0x32: alen = 216; break;   /* UNIX stream, datagram */
    default: return refuse(why, "PROXY v2 family and protocol are unknown");
    }
    if (total - 16 < alen)
        return refuse(why, "PROXY v2 addresses are longer than the header");
    long rc = v2_tlvs(p, 16 + alen, total, why);
    if (rc < 0)
        return rc;
    out->local = alen == 0 || alen == 216;
    if (out->local)
        return rc;
    out->datagram = (p[13] & 0x0f) == 0x02;
    const uint8_t *a = p + 16;
    if (alen == 12) {
        struct sockaddr_in *s = (struct sockaddr_in *)&out->src, *d = (struct sockaddr_in *)&out->dst;
        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, a, 4);
        memcpy(&d->sin_addr, a + 4, 4);
        memcpy(&s->sin_port, a + 8, 2);
        memcpy(&d->sin_port, a + 10, 2);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&out->src;
        struct sockaddr_in6 *d = (struct sockaddr_in6 *)&out->dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a, 16);
        memcpy(&d->sin6_addr, a + 16, 16);
        memcpy(&s->sin6_port, a + 32, 2);
        memcpy(&d->sin6_port, a + 34, 2);
    }
    return rc;
}

long sv_proxy_header_parse(const uint8_t *p, size_t len, sv_proxy_info *out, const char **why)
{
    size_t n1 = len < 6 ? len : 6, n2 = len < sizeof v2_sig ? len : sizeof v2_sig;
    if (memcmp(p, "PROXY ", n1) == 0)
        return len < 6 ? 0 : parse_v1(p, len, out, why);
    if (memcmp(p, v2_sig, n2) == 0)
        return len < sizeof v2_sig ? 0 : parse_v2(p, len, out, why);
    return refuse(why, "no PROXY protocol header (the listener requires one)");
}
