/* SOCKS5-style destination addresses shared by the protocol cores (PROTOCOLS.md §1.1 A). */
#include "config.h"

#include "supervisor/proto/core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/*
 * Besides the contract's cases, a domain holding a NUL byte is refused with -EPROTO: host is a C
 * string, and a name cut short at the NUL would be routed as a different name.
 */
ssize_t sv_dest_parse(const uint8_t *p, size_t n, sv_dest *d)
{
    size_t need;
    if (n < 1)
        return 0;
    switch (p[0]) {
    case SV_ATYP_IPV4:
        need = 1 + 4 + 2;
        break;
    case SV_ATYP_IPV6:
        need = 1 + 16 + 2;
        break;
    case SV_ATYP_DOMAIN:
        if (n < 2)
            return 0;
        if (p[1] == 0)
            return -EPROTO;
        need = 2 + (size_t)p[1] + 2;
        break;
    default:
        return -EPROTO;
    }
    if (n < need)
        return 0;
    if (p[0] == SV_ATYP_DOMAIN && memchr(p + 2, 0, p[1]) != NULL)
        return -EPROTO;
    d->atyp = p[0];
    memset(d->ip, 0, sizeof d->ip);
    d->host[0] = '\0';
    if (p[0] == SV_ATYP_DOMAIN) {
        size_t hl = p[1];
        memcpy(d->host, p + 2, hl);
        d->host[hl] = '\0';
    } else {
        memcpy(d->ip, p + 1, need - 3);
    }
    d->port = (uint16_t)(p[need - 2] << 8 | p[need - 1]);
    return (ssize_t)need;
}

size_t sv_dest_encode(const sv_dest *d, uint8_t *out)
{
    size_t n = 0;
    out[n++] = d->atyp;
    if (d->atyp == SV_ATYP_IPV4) {
        memcpy(out + n, d->ip, 4);
        n += 4;
    } else if (d->atyp == SV_ATYP_IPV6) {
        memcpy(out + n, d->ip, 16);
        n += 16;
    } else {
        size_t hl = strnlen(d->host, 255);
        out[n++] = (uint8_t)hl;
        memcpy(out + n, d->host, hl);
        n += hl;
    }
    out[n++] = (uint8_t)(d->port >> 8);
    out[n++] = (uint8_t)(d->port & 0xff);
    return n;
}

int sv_dest_format(const sv_dest *d, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];
    switch (d->atyp) {
    case SV_ATYP_IPV4:
        inet_ntop(AF_INET, d->ip, ip, sizeof ip);
        return snprintf(buf, cap, "%s:%u", ip, (unsigned)d->port);
    case SV_ATYP_IPV6:
        inet_ntop(AF_INET6, d->ip, ip, sizeof ip);
        return snprintf(buf, cap, "[%s]:%u", ip, (unsigned)d->port);
    default:
        return snprintf(buf, cap, "%.255s:%u", d->host, (unsigned)d->port);
    }
}

int sv_dest_parse_hostport(const char *s, sv_dest *d)
{
    if (s == NULL)
        return -EINVAL;
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return -EINVAL;
    const char *ps = colon + 1;
    unsigned port = 0;
    if (*ps == '\0' || strlen(ps) > 5)
        return -EINVAL;
    for (; *ps != '\0'; ps++) {
        if (*ps < '0' || *ps > '9')
            return -EINVAL;
        port = port * 10 + (unsigned)(*ps - '0');
    }
    if (port == 0 || port > 65535)
        return -EINVAL;
    memset(d, 0, sizeof *d);
    d->port = (uint16_t)port;
    d->network = SV_NET_TCP;
    size_t hlen = (size_t)(colon - s);
    char host[256];
    if (s[0] == '[') {
        if (hlen < 3 || s[hlen - 1] != ']' || hlen - 2 >= sizeof host)
            return -EINVAL;
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
        if (inet_pton(AF_INET6, host, d->ip) != 1)
            return -EINVAL;
        d->atyp = SV_ATYP_IPV6;
        return 0;
    }
    if (hlen > 253)
        return -EINVAL;
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    if (inet_pton(AF_INET, host, d->ip) == 1) {
        d->atyp = SV_ATYP_IPV4;
        return 0;
    }
    for (size_t i = 0; i < hlen; i++) {
        char c = host[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return -EINVAL;
    }
    d->atyp = SV_ATYP_DOMAIN;
    memcpy(d->host, host, hlen + 1);
    return 0;
}

/* The NUL check is sv_dest_parse's: host is a C string, and a name cut short at the NUL would
 * be routed as a different name. */
ssize_t sv_dest_parse_b(const uint8_t *p, size_t n, sv_dest *d)
{
    size_t need;
    if (n < 3)
        return 0;
    switch (p[2]) {
    case 1:
        need = 3 + 4;
        break;
    case 3:
        need = 3 + 16;
        break;
    case 2:
        if (n < 4)
            return 0;
        if (p[3] == 0)
            return -EPROTO;
        need = 4 + (size_t)p[3];
        break;
    default:
        return -EPROTO;
    }
    if (n < need)
        return 0;
    memset(d, 0, sizeof *d);
    d->port = (uint16_t)(p[0] << 8 | p[1]);
    if (p[2] == 2) {
        if (memchr(p + 4, 0, p[3]) != NULL)
            return -EPROTO;
        d->atyp = SV_ATYP_DOMAIN;
        memcpy(d->host, p + 4, p[3]);
        d->host[p[3]] = '\0';
    } else {
        d->atyp = p[2] == 1 ? SV_ATYP_IPV4 : SV_ATYP_IPV6;
        memcpy(d->ip, p + 3, need - 3);
    }
    return (ssize_t)need;
}
