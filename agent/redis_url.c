/* redis.url of the local config (ag_redis_url_parse, agent_config.h):
 * redis://[[user]:password@]host[:port][/db]. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "agent/agent_config.h"

/* %XX-decode @p n bytes of @p s into @p out (cap bytes with the NUL). @return false when a
 * sequence is malformed, decodes to NUL, or the result does not fit. */
static bool url_unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '%') {
            unsigned v = 0;
            for (int j = 1; j <= 2; j++) {
                char h = i + (size_t)j < n ? s[i + (size_t)j] : '\0';
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0)
                    return false;
                v = v * 16 + (unsigned)d;
            }
            if (v == 0)
                return false;
            ch = (unsigned char)v;
            i += 2;
        }
        if (k + 1 >= cap)
            return false;
        out[k++] = (char)ch;
    }
    out[k] = '\0';
    return true;
}

/* The host part of a redis URL, [@p hp, @p end): an IPv4 literal, [IPv6] or localhost (no
 * name is resolved) into out->host; *@p port: the digits after its ':', or NULL. */
static int redis_url_host(const char *hp, const char *end, sv_redis_options *out,
                          const char **port, sv_error *err)
{
    char host[SV_REDIS_HOST_LEN];
    uint8_t buf[16];
    *port = NULL;
    size_t hlen;
    if (*hp == '[') {
        const char *close = memchr(hp, ']', (size_t)(end - hp));
        if (close == NULL)
            return sv_error_set(err, -EINVAL, "redis.url: unclosed [ in the host");
        hlen = (size_t)(close - hp - 1);
        if (hlen >= sizeof host)
            return sv_error_set(err, -EINVAL, "redis.url: host too long");
        memcpy(host, hp + 1, hlen);
        host[hlen] = '\0';
        if (inet_pton(AF_INET6, host, buf) != 1)
            return sv_error_set(err, -EINVAL, "redis.url: bad IPv6 address");
        if (close + 1 < end && close[1] != ':')
            return sv_error_set(err, -EINVAL, "redis.url: expected :port after ]");
        *port = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = memchr(hp, ':', (size_t)(end - hp));
        hlen = (size_t)((colon != NULL ? colon : end) - hp);
        if (hlen == 0 || hlen >= sizeof host)
            return sv_error_set(err, -EINVAL, "redis.url: missing or too long host");
        memcpy(host, hp, hlen);
        host[hlen] = '\0';
        if (strcmp(host, "localhost") == 0)
            snprintf(host, sizeof host, "127.0.0.1");
        else if (inet_pton(AF_INET, host, buf) != 1)
            return sv_error_set(err, -EINVAL, "redis.url: the host must be an IPv4 address, "
                                "[IPv6] or localhost (no name is resolved)");
        *port = colon != NULL ? colon + 1 : NULL;
    }
    snprintf(out->host, sizeof out->host, "%s", host);
    return 0;
}

int ag_redis_url_parse(const char *url, sv_redis_options *out, sv_error *err)
{
    static const char scheme[] = "redis://";
    if (strncmp(url, "rediss://", 9) == 0)
        return sv_error_set(err, -EINVAL, "redis.url: TLS (rediss://) is not supported");
    if (strncmp(url, scheme, sizeof scheme - 1) != 0)
        return sv_error_set(err, -EINVAL, "redis.url: expected redis://[[user]:password@]"
                            "host[:port][/db]");
    const char *auth = url + sizeof scheme - 1;
    const char *end = auth + strcspn(auth, "/?#");
    if (*end == '?' || *end == '#')
        return sv_error_set(err, -EINVAL, "redis.url: no query or fragment is taken");
    const char *at = NULL;
    for (const char *p = auth; p < end; p++)
        if (*p == '@')
            at = p;
    out->user[0] = out->password[0] = '\0';
    const char *hp = auth;
    if (at != NULL) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (colon == NULL)
            return sv_error_set(err, -EINVAL, "redis.url: user info must be [user]:password");
        if (!url_unescape(auth, (size_t)(colon - auth), out->user, sizeof out->user) ||
            !url_unescape(colon + 1, (size_t)(at - colon - 1), out->password,
                          sizeof out->password))
            return sv_error_set(err, -EINVAL, "redis.url: bad user or password (at most %u "
                                "bytes each, %%XX escapes)", SV_REDIS_SECRET_LEN - 1);
        if (out->password[0] == '\0')
            return sv_error_set(err, -EINVAL, "redis.url: empty password");
        hp = at + 1;
    }
    const char *port;
    int rc = redis_url_host(hp, end, out, &port, err);
    if (rc != 0)
        return rc;
    out->port = 6379;
    if (port != NULL) {
        unsigned long v = 0;
        const char *p = port;
        for (; p < end && *p >= '0' && *p <= '9' && v <= 65535; p++)
            v = v * 10 + (unsigned)(*p - '0');
        if (p == port || p != end || v < 1 || v > 65535)
            return sv_error_set(err, -EINVAL, "redis.url: port must be 1..65535");
        out->port = (uint16_t)v;
    }
    out->db = 0;
    if (*end == '/' && end[1] != '\0') {
        unsigned long v = 0;
        const char *p = end + 1;
        for (; *p >= '0' && *p <= '9' && v <= AG_CONFIG_REDIS_DB_MAX; p++)
            v = v * 10 + (unsigned)(*p - '0');
        if (p == end + 1 || *p != '\0' || v > AG_CONFIG_REDIS_DB_MAX)
            return sv_error_set(err, -EINVAL, "redis.url: database must be 0..%u",
                                AG_CONFIG_REDIS_DB_MAX);
        out->db = (unsigned)v;
    }
    return 0;
}
