/* The HTTP/1.1 upgrade request parser shared by the ws and httpupgrade layers (http_head.h). */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "supervisor/transport/http_head.h"

#include <errno.h>
#include <stdlib.h>

bool sv_http_span_ieq(sv_http_span a, const char *b)
{
    return a.n == strlen(b) && strncasecmp(a.p, b, a.n) == 0;
}

static sv_http_span trim(sv_http_span v)
{
    while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t'))
        v.p++, v.n--;
    while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
        v.n--;
    return v;
}

bool sv_http_has_token(sv_http_span v, const char *token)
{
    while (v.n > 0) {
        size_t k = 0;
        while (k < v.n && v.p[k] != ',')
            k++;
        if (sv_http_span_ieq(trim((sv_http_span){v.p, k}), token))
            return true;
        v.p += k < v.n ? k + 1 : k;
        v.n -= k < v.n ? k + 1 : k;
    }
    return false;
}

bool sv_http_host_matches(sv_http_span v, const char *want)
{
    size_t end = v.n;
    const char *colon = NULL;
    if (v.n > 0 && v.p[0] == '[') {
        const char *rb = memchr(v.p, ']', v.n);
        if (rb != NULL)
            end = (size_t)(rb - v.p) + 1;
    } else if ((colon = memchr(v.p, ':', v.n)) != NULL) {
        end = (size_t)(colon - v.p);
    }
    return sv_http_span_ieq((sv_http_span){v.p, end}, want);
}

/* The part of the list @p v after its last comma, trimmed. */
static sv_http_span last_element(sv_http_span v)
{
    size_t k = v.n;
    while (k > 0 && v.p[k - 1] != ',')
        k--;
    return trim((sv_http_span){v.p + k, v.n - k});
}

bool sv_http_forwarded(const sv_http_upgrade_req *r, char out[SV_HTTP_FORWARDED_MAX])
{
    sv_http_span v = r->has_xff ? r->xff : r->has_real_ip ? r->real_ip : (sv_http_span){"", 0};
    out[0] = '\0';
    if (v.n == 0 || v.n >= SV_HTTP_FORWARDED_MAX)
        return false;
    memcpy(out, v.p, v.n);
    out[v.n] = '\0';
    return true;
}

bool sv_http_parse_upgrade(const char *p, size_t n, sv_http_upgrade_req *r)
{
    memset(r, 0, sizeof *r);
    const char *eol = memmem(p, n, "\r\n", 2);
    if (eol == NULL)
        return false;
    sv_http_span line = {p, (size_t)(eol - p)};
    const char *sp1 = memchr(line.p, ' ', line.n);
    if (sp1 == NULL || sp1 - line.p != 3 || memcmp(line.p, "GET", 3) != 0)
        return false;
    const char *target = sp1 + 1;
    const char *sp2 = memchr(target, ' ', (size_t)(line.p + line.n - target));
    if (sp2 == NULL || (size_t)(line.p + line.n - sp2 - 1) != 8 ||
        memcmp(sp2 + 1, "HTTP/1.1", 8) != 0)
        return false;
    size_t tlen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', tlen);
    r->path = (sv_http_span){target, q != NULL ? (size_t)(q - target) : tlen};
    const char *at = eol + 2, *end = p + n;
    while (at < end) {
        const char *le = memmem(at, (size_t)(end - at), "\r\n", 2);
        if (le == NULL)
            return false;
        if (le == at)
            break; /* the empty line */
        const char *colon = memchr(at, ':', (size_t)(le - at));
        if (colon == NULL)
            return false;
        sv_http_span name = {at, (size_t)(colon - at)};
        sv_http_span value = trim((sv_http_span){colon + 1, (size_t)(le - colon - 1)});
        if (sv_http_span_ieq(name, "Host"))
            r->host = value, r->has_host = true;
        else if (sv_http_span_ieq(name, "Upgrade"))
            r->upgrade = value, r->has_upgrade = true;
        else if (sv_http_span_ieq(name, "Connection"))
            r->connection = value, r->has_connection = true;
        else if (sv_http_span_ieq(name, "Sec-WebSocket-Version"))
            r->version = value, r->has_version = true;
        else if (sv_http_span_ieq(name, "Sec-WebSocket-Key"))
            r->key = value, r->has_key = true;
        else if (sv_http_span_ieq(name, "Sec-WebSocket-Protocol"))
            r->protocol = value, r->has_protocol = true;
        else if (sv_http_span_ieq(name, "X-Forwarded-For"))
            r->xff = last_element(value), r->has_xff = true;
        else if (sv_http_span_ieq(name, "X-Real-IP"))
            r->real_ip = value, r->has_real_ip = true;
        at = le + 2;
    }
    return true;
}

int sv_http_head_collect(uint8_t **head, size_t *head_len, size_t max, const uint8_t *in,
                         size_t n, size_t *used)
{
    if (*head == NULL && (*head = malloc(max)) == NULL)
        return -ENOMEM;
    uint8_t *h = *head;
    size_t room = max - *head_len, k = n < room ? n : room;
    size_t from = *head_len >= 3 ? *head_len - 3 : 0;
    memcpy(h + *head_len, in, k);
    size_t have = *head_len + k;
    const uint8_t *e = memmem(h + from, have - from, "\r\n\r\n", 4);
    if (e == NULL) {
        *head_len = have;
        *used = k;
        size_t cmp = have < 4 ? have : 4;
        return memcmp(h, "GET ", cmp) != 0 || have == max ? SV_HTTP_HEAD_NOT_HTTP
                                                         : SV_HTTP_HEAD_MORE;
    }
    size_t end = (size_t)(e - h) + 4;
    *used = end - *head_len;
    *head_len = end;
    return SV_HTTP_HEAD_COMPLETE;
}
