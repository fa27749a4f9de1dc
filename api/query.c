/*
 * Pure parsers of the API's outside bytes (api/api.h): request target, listen address, bearer
 * token, plus time formatting. No I/O, no allocation.
 */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "api/api.h"
#include "supervisor/util/digits.h"

/*
 * Decode [s, s+n) into dst (cap bytes incl. the NUL). plus: '+' means space (query).
 * @return decoded length, -1 malformed escape or NUL, -2 too long.
 */
static long decode(const char *s, size_t n, bool plus, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = sv_hex_digit(s[i + 1]), lo = sv_hex_digit(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (plus && c == '+') {
            c = ' ';
        }
        if (c == '\0')
            return -1;
        if (o + 1 >= cap)
            return -2;
        dst[o++] = c;
    }
    dst[o] = '\0';
    return (long)o;
}

static int parse_path(const char *p, size_t n, api_uri *out, sv_error *err)
{
    if (n == 0 || p[0] != '/')
        return sv_error_set(err, -EINVAL, "path: must start with '/'");
    size_t i = 1;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '/')
            j++;
        if (j > i) {
            if (out->n_segments == API_PATH_SEGMENTS_MAX)
                return sv_error_set(err, -EINVAL, "path: more than %d segments",
                                    API_PATH_SEGMENTS_MAX);
            long r = decode(p + i, j - i, false, out->segments[out->n_segments],
                            API_SEGMENT_MAX + 1);
            if (r == -2)
                return sv_error_set(err, -EINVAL, "path: a segment is longer than %d bytes",
                                    API_SEGMENT_MAX);
            if (r < 0)
                return sv_error_set(err, -EINVAL, "path: bad percent escape");
            out->n_segments++;
        }
        i = j + 1;
    }
    return 0;
}

static int parse_param(const char *s, size_t n, api_uri *out, sv_error *err)
{
    if (n == 0)
        return 0; /* "a=1&&b=2" */
    if (out->n_params == API_QUERY_MAX)
        return sv_error_set(err, -EINVAL, "query: more than %d parameters", API_QUERY_MAX);
    const char *eq = memchr(s, '=', n);
    size_t kn = eq != NULL ? (size_t)(eq - s) : n;
    char *key = out->params[out->n_params].key, *val = out->params[out->n_params].value;
    long r = decode(s, kn, true, key, API_QUERY_KEY_MAX + 1);
    if (r == -2)
        return sv_error_set(err, -EINVAL, "query: a key is longer than %d bytes",
                            API_QUERY_KEY_MAX);
    if (r < 0)
        return sv_error_set(err, -EINVAL, "query: bad percent escape");
    if (r == 0)
        return sv_error_set(err, -EINVAL, "query: empty key");
    r = eq != NULL ? decode(eq + 1, n - kn - 1, true, val, API_QUERY_VALUE_MAX + 1)
                   : decode("", 0, true, val, API_QUERY_VALUE_MAX + 1);
    if (r == -2)
        return sv_error_set(err, -EINVAL, "query: value of \"%s\" is longer than %d bytes", key,
                            API_QUERY_VALUE_MAX);
    if (r < 0)
        return sv_error_set(err, -EINVAL, "query: bad percent escape");
    for (size_t i = 0; i < out->n_params; i++)
        if (strcmp(out->params[i].key, key) == 0)
            return sv_error_set(err, -EINVAL, "query: key \"%s\" repeated", key);
    out->n_params++;
    return 0;
}

int api_uri_parse(const char *target, size_t len, api_uri *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    if (len > API_URI_MAX)
        return sv_error_set(err, -EINVAL, "request target longer than %d bytes", API_URI_MAX);
    const char *q = memchr(target, '?', len);
    size_t plen = q != NULL ? (size_t)(q - target) : len;
    const char *hash = memchr(target, '#', len);
    if (hash != NULL)
        return sv_error_set(err, -EINVAL, "request target: fragment not allowed");
    int rc = parse_path(target, plen, out, err);
    if (rc != 0 || q == NULL)
        return rc;
    const char *s = q + 1, *end = target + len;
    while (s <= end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp != NULL ? amp : end;
        rc = parse_param(s, (size_t)(e - s), out, err);
        if (rc != 0)
            return rc;
        s = e + 1;
    }
    return 0;
}

int api_uri_check_keys(const api_uri *uri, const char *const *allowed, sv_error *err)
{
    for (size_t i = 0; i < uri->n_params; i++) {
        const char *const *a = allowed;
        while (*a != NULL && strcmp(*a, uri->params[i].key) != 0)
            a++;
        if (*a == NULL)
            return sv_error_set(err, -EINVAL, "unknown query key \"%s\"", uri->params[i].key);
    }
    return 0;
}

const char *api_uri_param(const api_uri *uri, const char *key)
{
    for (size_t i = 0; i < uri->n_params; i++)
        if (strcmp(uri->params[i].key, key) == 0)
            return uri->params[i].value;
    return NULL;
}

int api_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (s == NULL || *s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_port(const char *s, uint16_t *port)
{
    uint64_t v;
    if (api_parse_u64(s, &v) != 0 || v == 0 || v > 65535 || strlen(s) > 5)
        return -EINVAL;
    *port = (uint16_t)v;
    return 0;
}

int api_listen_parse(const char *text, struct sockaddr_storage *sa, bool *loopback,
                     sv_error *err)
{
    char host[64];
    const char *colon, *hs;
    size_t hn;
    uint16_t port;
    struct sockaddr_storage tmp;
    if (sa == NULL)
        sa = &tmp;
    memset(sa, 0, sizeof *sa);
    if (text == NULL || strlen(text) > 70)
        return sv_error_set(err, -EINVAL, "api.listen: expected \"ip:port\"");
    if (text[0] == '[') {
        const char *rb = strchr(text, ']');
        if (rb == NULL || rb[1] != ':')
            return sv_error_set(err, -EINVAL, "api.listen: expected \"[ipv6]:port\"");
        hs = text + 1;
        hn = (size_t)(rb - hs);
        colon = rb + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL)
            return sv_error_set(err, -EINVAL, "api.listen: expected \"ip:port\"");
        hs = text;
        hn = (size_t)(colon - text);
    }
    if (hn == 0 || hn >= sizeof host || parse_port(colon + 1, &port) != 0)
        return sv_error_set(err, -EINVAL, "api.listen: expected \"ip:port\" with a port 1..65535");
    memcpy(host, hs, hn);
    host[hn] = '\0';
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (text[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
        return 0;
    }
    if (text[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
        return 0;
    }
    return sv_error_set(err, -EINVAL, "api.listen: \"%.64s\" is not an IP address", host);
}

bool api_auth_ok(const char *header, const char *token)
{
    static const char scheme[] = "Bearer ";
    if (header == NULL || token == NULL || strncmp(header, scheme, sizeof scheme - 1) != 0)
        return false;
    const unsigned char *got = (const unsigned char *)header + sizeof scheme - 1;
    const unsigned char *want = (const unsigned char *)token;
    size_t gn = strlen((const char *)got), wn = strlen(token);
    /* every byte of the presented token is compared, against the token cycled when shorter,
     * so the time depends on the lengths only */
    unsigned diff = (unsigned)(gn ^ wn) | (wn == 0);
    for (size_t i = 0; i < gn; i++)
        diff |= (unsigned)(got[i] ^ (wn != 0 ? want[i % wn] : 0));
    return diff == 0;
}

/* @p n as @p width decimal digits at @p p (leading zeros). */
static void put_digits(char *p, unsigned n, int width)
{
    for (int i = width - 1; i >= 0; i--, n /= 10)
        p[i] = (char)('0' + n % 10);
}

/* Plain arithmetic rather than gmtime_r + snprintf: GET /v1/connections formats one time per
 * flow, and libc's time zone lock and format parsing were a fifth of it. Days to a
 * proleptic Gregorian date through 400-year eras of 146 097 days, years starting on 1 March so
 * that the leap day ends the year. */
void api_time_rfc3339(uint64_t ms, char *buf, size_t cap)
{
    static const uint64_t max_ms = 253402300799999ull; /* 9999-12-31T23:59:59.999Z */
    char out[25] = "0000-00-00T00:00:00.000Z";
    if (ms > max_ms)
        ms = max_ms;
    uint64_t secs = ms / 1000, days = secs / 86400;
    unsigned sod = (unsigned)(secs % 86400);
    uint64_t z = days + 719468; /* days since 0000-03-01 */
    uint64_t era = z / 146097;
    unsigned doe = (unsigned)(z - era * 146097);                           /* [0, 146096] */
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  /* [0, 399] */
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                /* [0, 365] */
    unsigned mp = (5 * doy + 2) / 153;                                     /* March = 0 */
    unsigned day = doy - (153 * mp + 2) / 5 + 1;
    unsigned month = mp < 10 ? mp + 3 : mp - 9;
    unsigned year = (unsigned)(era * 400) + yoe + (month <= 2);
    put_digits(out, year, 4);
    put_digits(out + 5, month, 2);
    put_digits(out + 8, day, 2);
    put_digits(out + 11, sod / 3600, 2);
    put_digits(out + 14, sod / 60 % 60, 2);
    put_digits(out + 17, sod % 60, 2);
    put_digits(out + 20, (unsigned)(ms % 1000), 3);
    if (cap > 0) {
        size_t n = cap - 1 < sizeof out - 1 ? cap - 1 : sizeof out - 1;
        memcpy(buf, out, n);
        buf[n] = '\0';
    }
}
