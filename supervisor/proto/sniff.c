/*
 * Sniffing of TLS ClientHello server_name and HTTP/1 Host: see sniff.h. Both parsers
 * read a prefix of the stream and only ever look inside the bytes given; a length that points
 * past its enclosing structure is NONE, one that points past the bytes given is NEED_MORE.
 */
#include "config.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "supervisor/proto/sniff.h"

#define TLS_RECORD_MAX 16384 /* RFC 8446 §5.1: plaintext record length */
#define NAME_MAX_LEN 253

/* Copy a host name that is 1..253 of [A-Za-z0-9._-] (lower-cased) into @p name. */
static sv_sniff_result copy_name(const uint8_t *p, size_t n, char name[SV_SNIFF_NAME_CAP])
{
    if (n == 0 || n > NAME_MAX_LEN)
        return SV_SNIFF_NONE;
    bool alnum = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = p[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))
            alnum = true;
        else if (ch >= 'A' && ch <= 'Z')
            alnum = true;
        else if (ch != '-' && ch != '.' && ch != '_')
            return SV_SNIFF_NONE;
    }
    if (!alnum)
        return SV_SNIFF_NONE;
    for (size_t i = 0; i < n; i++)
        name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + ('a' - 'A') : p[i]);
    name[n] = '\0';
    return SV_SNIFF_FOUND;
}

/* ---- TLS ClientHello (RFC 8446 §4.1.2, §5.1; RFC 6066 §3) --------------------------------- */

typedef struct cursor {
    const uint8_t *p;
    size_t at;   /* next byte */
    size_t have; /* bytes given */
    size_t end;  /* end of the structure being read */
} cursor;

/* Step over @p n bytes (their start in *@p out when not NULL): 0, or why not. */
static int take(cursor *c, size_t n, const uint8_t **out)
{
    if (n > c->end - c->at)
        return SV_SNIFF_NONE;
    if (c->at + n > c->have)
        return SV_SNIFF_NEED_MORE;
    if (out != NULL)
        *out = c->p + c->at;
    c->at += n;
    return 0;
}

#define TAKE(c, n, out)                                                                        \
    do {                                                                                       \
        int rc_ = take((c), (n), (out));                                                       \
        if (rc_ != 0)                                                                          \
            return (sv_sniff_result)rc_;                                                       \
    } while (0)

static size_t be16(const uint8_t *q) { return (size_t)q[0] << 8 | q[1]; }

/* The server_name extension's body (RFC 6066 §3): the first host_name entry. */
static sv_sniff_result server_name(const uint8_t *q, size_t n, char name[SV_SNIFF_NAME_CAP])
{
    if (n < 2 || be16(q) > n - 2)
        return SV_SNIFF_NONE;
    size_t end = 2 + be16(q);
    for (size_t at = 2; at + 3 <= end;) {
        size_t len = be16(q + at + 1);
        if (len > end - at - 3)
            return SV_SNIFF_NONE;
        if (q[at] == 0) /* host_name */
            return copy_name(q + at + 3, len, name);
        at += 3 + len;
    }
    return SV_SNIFF_NONE;
}

static sv_sniff_result sniff_tls(const uint8_t *p, size_t len, char name[SV_SNIFF_NAME_CAP])
{
    /* record header: handshake(22), legacy version 3.x, length */
    if (len >= 2 && p[1] != 3)
        return SV_SNIFF_NONE;
    if (len < 5)
        return SV_SNIFF_NEED_MORE;
    size_t rec = be16(p + 3);
    if (rec < 4 || rec > TLS_RECORD_MAX)
        return SV_SNIFF_NONE;
    cursor c = {.p = p, .at = 5, .have = len, .end = 5 + rec};
    const uint8_t *q;
    TAKE(&c, 4, &q); /* handshake header: client_hello(1), 24-bit length within the record */
    size_t hs = (size_t)q[1] << 16 | (size_t)q[2] << 8 | q[3];
    if (q[0] != 1 || hs > rec - 4)
        return SV_SNIFF_NONE;
    c.end = c.at + hs;
    TAKE(&c, 2 + 32, NULL); /* legacy_version, random */
    TAKE(&c, 1, &q);        /* legacy_session_id <0..32> */
    if (q[0] > 32)
        return SV_SNIFF_NONE;
    TAKE(&c, q[0], NULL);
    TAKE(&c, 2, &q); /* cipher_suites <2..2^16-2> */
    TAKE(&c, be16(q), NULL);
    TAKE(&c, 1, &q); /* legacy_compression_methods <1..2^8-1> */
    TAKE(&c, q[0], NULL);
    if (c.at == c.end)
        return SV_SNIFF_NONE; /* no extensions, so no server_name */
    TAKE(&c, 2, &q);
    size_t ext = be16(q);
    if (ext > c.end - c.at)
        return SV_SNIFF_NONE;
    c.end = c.at + ext;
    while (c.at < c.end) {
        TAKE(&c, 4, &q);
        size_t type = be16(q), elen = be16(q + 2);
        TAKE(&c, elen, &q);
        if (type == 0) /* server_name */
            return server_name(q, elen, name);
    }
    return SV_SNIFF_NONE;
}

/* ---- HTTP/1 request (RFC 9112 §3, §3.2; RFC 9110 §7.2) ------------------------------------- */

static const char *const methods[] = {"GET ",    "POST ",  "HEAD ",    "PUT ",   "DELETE ",
                                      "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "};

/* 1: starts with a method and a space; 0: could still (a prefix of one); -1: cannot. */
static int http_method(const uint8_t *p, size_t len)
{
    int best = -1;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        size_t m = strlen(methods[i]);
        size_t n = len < m ? len : m;
        if (memcmp(p, methods[i], n) != 0)
            continue;
        if (len >= m)
            return 1;
        best = 0;
    }
    return best;
}

static bool ends_with(const uint8_t *p, size_t n, const char *s)
{
    size_t m = strlen(s);
    return n >= m && memcmp(p + n - m, s, m) == 0;
}

static bool is_ows(uint8_t ch) { return ch == ' ' || ch == '\t'; }

/* A Host value (uri-host [":" port]) to a name; an IPv6 literal is not a name. */
static sv_sniff_result host_value(const uint8_t *v, size_t n, char name[SV_SNIFF_NAME_CAP])
{
    while (n > 0 && is_ows(v[0])) {
        v++;
        n--;
    }
    while (n > 0 && is_ows(v[n - 1]))
        n--;
    if (n == 0 || v[0] == '[')
        return SV_SNIFF_NONE;
    const uint8_t *colon = memchr(v, ':', n);
    if (colon != NULL) {
        size_t host = (size_t)(colon - v), port = n - host - 1;
        if (port == 0 || port > 5)
            return SV_SNIFF_NONE;
        for (size_t i = 0; i < port; i++)
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                return SV_SNIFF_NONE;
        n = host;
    }
    return copy_name(v, n, name);
}

static sv_sniff_result sniff_http(const uint8_t *p, size_t len, char name[SV_SNIFF_NAME_CAP])
{
    int m = http_method(p, len);
    if (m < 0)
        return SV_SNIFF_NONE;
    if (m == 0)
        return SV_SNIFF_NEED_MORE;
    bool first = true;
    for (size_t at = 0;;) {
        const uint8_t *nl = memchr(p + at, '\n', len - at);
        if (nl == NULL)
            return SV_SNIFF_NEED_MORE;
        size_t n = (size_t)(nl - (p + at));
        const uint8_t *line = p + at;
        at += n + 1;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (first) { /* request-line: method SP target SP HTTP/1.x */
            if (!ends_with(line, n, " HTTP/1.1") && !ends_with(line, n, " HTTP/1.0"))
                return SV_SNIFF_NONE;
            first = false;
            continue;
        }
        if (n == 0)
            return SV_SNIFF_NONE; /* end of the header section without a Host */
        const uint8_t *colon = memchr(line, ':', n);
        if (colon == NULL)
            return SV_SNIFF_NONE;
        size_t field = (size_t)(colon - line);
        if (field == 4 && strncasecmp((const char *)line, "host", 4) == 0)
            return host_value(colon + 1, n - field - 1, name);
    }
}

sv_sniff_result sv_sniff(const uint8_t *p, size_t len, char name[SV_SNIFF_NAME_CAP])
{
    if (len == 0)
        return SV_SNIFF_NEED_MORE;
    if (p[0] == 0x16) /* TLS handshake record */
        return sniff_tls(p, len, name);
    return sniff_http(p, len, name);
}
