/* Internal destinations and the node's own addresses (netclass.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/netclass.h"

/** Does @p a start with the first @p bits bits of @p prefix? */
static bool has_prefix(const uint8_t *a, const uint8_t *prefix, unsigned bits)
{
    unsigned bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, prefix, bytes) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (prefix[bytes] & mask);
}

static enum sv_addr_class classify_v4(const uint8_t *a)
{
    if (a[0] == 0)
        return SV_ADDR_UNSPECIFIED;
    if (a[0] == 127)
        return SV_ADDR_LOOPBACK;
    if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168))
        return SV_ADDR_PRIVATE;
    if (a[0] == 100 && (a[1] & 0xc0) == 64)
        return SV_ADDR_SHARED;
    if (a[0] == 169 && a[1] == 254)
        return SV_ADDR_LINK_LOCAL;
    if ((a[0] & 0xf0) == 224)
        return SV_ADDR_MULTICAST;
    if ((a[0] & 0xf0) == 240)
        return SV_ADDR_RESERVED;
    return SV_ADDR_PUBLIC;
}

static enum sv_addr_class classify_v6(const uint8_t *a)
{
    static const uint8_t zero[16] = {0};
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    static const uint8_t six_to_four[2] = {0x20, 0x02};
    static const uint8_t ula[1] = {0xfc}, link[2] = {0xfe, 0x80}, site[2] = {0xfe, 0xc0};
    if (memcmp(a, zero, 15) == 0 && a[15] <= 1)
        return a[15] == 0 ? SV_ADDR_UNSPECIFIED : SV_ADDR_LOOPBACK;
    if (has_prefix(a, mapped, 96) || has_prefix(a, zero, 96) || has_prefix(a, nat64, 96))
        return classify_v4(a + 12);
    if (has_prefix(a, six_to_four, 16))
        return classify_v4(a + 2);
    if (has_prefix(a, ula, 7) || has_prefix(a, site, 10))
        return SV_ADDR_PRIVATE;
    if (has_prefix(a, link, 10))
        return SV_ADDR_LINK_LOCAL;
    if (a[0] == 0xff)
        return SV_ADDR_MULTICAST;
    return SV_ADDR_PUBLIC;
}

enum sv_addr_class sv_addr_classify(int family, const uint8_t *addr)
{
    if (family == AF_INET)
        return classify_v4(addr);
    if (family == AF_INET6)
        return classify_v6(addr);
    return SV_ADDR_PUBLIC;
}

bool sv_ip16_from(int family, const uint8_t *addr, sv_ip16 *out)
{
    if (family == AF_INET6) {
        memcpy(out->b, addr, 16);
        return true;
    }
    if (family != AF_INET)
        return false;
    memset(out->b, 0, 10);
    out->b[10] = out->b[11] = 0xff;
    memcpy(out->b + 12, addr, 4);
    return true;
}

bool sv_ip16_from_sockaddr(const struct sockaddr *sa, sv_ip16 *out)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET)
        return sv_ip16_from(AF_INET, (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr, out);
    if (sa->sa_family == AF_INET6)
        return sv_ip16_from(AF_INET6, ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr, out);
    return false;
}

/* ---- the set of own addresses ------------------------------------------------------------- */

static int cmp_ip16(const void *x, const void *y) { return memcmp(x, y, sizeof(sv_ip16)); }

sv_addrset *sv_addrset_new(const sv_ip16 *v, size_t n)
{
    if (n > (SIZE_MAX - sizeof(sv_addrset)) / sizeof(sv_ip16))
        return NULL;
    sv_addrset *s = malloc(sizeof *s + n * sizeof(sv_ip16));
    if (s == NULL)
        return NULL;
    if (n > 0)
        memcpy(s->v, v, n * sizeof(sv_ip16));
    qsort(s->v, n, sizeof(sv_ip16), cmp_ip16);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || cmp_ip16(&s->v[w - 1], &s->v[i]) != 0)
            s->v[w++] = s->v[i];
    s->n = w;
    atomic_init(&s->refs, 1);
    return s;
}

void sv_addrset_ref(sv_addrset *s) { atomic_fetch_add(&s->refs, 1); }

void sv_addrset_unref(sv_addrset *s)
{
    if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

bool sv_addrset_has(const sv_addrset *s, const sv_ip16 *ip)
{
    return s != NULL && s->n > 0 && bsearch(ip, s->v, s->n, sizeof(sv_ip16), cmp_ip16) != NULL;
}

bool sv_addrset_equal(const sv_addrset *a, const sv_addrset *b)
{
    size_t na = a != NULL ? a->n : 0, nb = b != NULL ? b->n : 0;
    return na == nb && (na == 0 || memcmp(a->v, b->v, na * sizeof(sv_ip16)) == 0);
}

/** Append the address of @p sa (if it has one) to @p v, growing it. -ENOMEM on failure. */
static int push_addr(sv_ip16 **v, size_t *n, size_t *cap, const struct sockaddr *sa)
{
    sv_ip16 ip;
    if (!sv_ip16_from_sockaddr(sa, &ip))
        return 0;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        sv_ip16 *grown = realloc(*v, c * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        *v = grown;
        *cap = c;
    }
    (*v)[(*n)++] = ip;
    return 0;
}

int sv_addrset_from_host(const char *const *extra, size_t n_extra, sv_addrset **out)
{
    *out = NULL;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return -errno;
    sv_ip16 *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (const struct ifaddrs *i = ifs; rc == 0 && i != NULL; i = i->ifa_next) {
        rc = push_addr(&v, &n, &cap, i->ifa_addr);
        if (rc == 0 && (i->ifa_flags & IFF_BROADCAST) != 0 && i->ifa_addr != NULL &&
            i->ifa_addr->sa_family == AF_INET)
            rc = push_addr(&v, &n, &cap, i->ifa_broadaddr);
    }
    freeifaddrs(ifs);
    for (size_t k = 0; rc == 0 && k < n_extra; k++) {
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
        struct sockaddr_in a4 = {.sin_family = AF_INET};
        if (extra[k] != NULL && inet_pton(AF_INET, extra[k], &a4.sin_addr) == 1)
            rc = push_addr(&v, &n, &cap, (const struct sockaddr *)&a4);
        else if (extra[k] != NULL && inet_pton(AF_INET6, extra[k], &a6.sin6_addr) == 1)
            rc = push_addr(&v, &n, &cap, (const struct sockaddr *)&a6);
    }
    if (rc == 0 && (*out = sv_addrset_new(v, n)) == NULL)
        rc = -ENOMEM;
    free(v);
    return rc;
}

bool sv_dest_refused(bool allow_private, bool names_dest, const sv_ip16 *ip, const sv_addrset *own)
{
    if (allow_private || names_dest)
        return false;
    return sv_addr_classify(AF_INET6, ip->b) != SV_ADDR_PUBLIC || sv_addrset_has(own, ip);
}
