/* HTTP proxy server core (PROTOCOLS-3.md §4.3): request head parsing, Basic authentication,
 * the CONNECT tunnel and the absolute-form request rewritten for the origin (http_proxy.h). */
#include "config.h"

#include "supervisor/proto/http_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "supervisor/proto/userpass.h"
#include "supervisor/util/digits.h"

/* The answers (static: they outlive the connection's last call, as SV_PROBE_ANSWER needs). */
static const char answer_400[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                                 "Connection: close\r\n\r\n";
static const char answer_407[] = "HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 "Proxy-Authenticate: Basic realm=\"proxy\"\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char answer_431[] = "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char answer_200[] = "HTTP/1.1 200 Connection established\r\n\r\n";
static const char conn_close[] = "Connection: close\r\n\r\n";

/* ---------------------------------------------------------------------------------------- */
/* Credential table                                                                          */
/* ---------------------------------------------------------------------------------------- */

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    sv_userpass *t = NULL;
    *out = NULL;
    int rc = sv_userpass_new(users, in != NULL && in->proxy_no_auth, &t, err);
    if (rc == 0)
        *out = t;
    return rc;
}

static void creds_free(void *creds)
{
    sv_userpass_free(creds);
}

/* ---------------------------------------------------------------------------------------- */
/* Request line                                                                              */
/* ---------------------------------------------------------------------------------------- */

typedef struct span {
    const uint8_t *p;
    size_t n;
} span;

/* What the request line says. */
typedef struct http_req {
    bool connect;
    sv_dest dest;
    span method, authority, path, version; /* path: after the authority (may be empty) */
    size_t line_len;                       /* without its CRLF */
} http_req;

/* tchar of RFC 9110 §5.6.2. */
static bool is_tchar(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool span_ieq(span a, const char *b)
{
    return a.n == strlen(b) && strncasecmp((const char *)a.p, b, a.n) == 0;
}

/* Port digits 1..65535 (no sign, at most 5 digits). @return the port or 0. */
static uint16_t parse_port(span s)
{
    if (s.n < 1 || s.n > 5)
        return 0;
    unsigned v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(s.p[i] - '0');
    }
    return v >= 1 && v <= 65535 ? (uint16_t)v : 0;
}

/* A host: [IPv6], an IPv4 literal or a name (letters, digits, '-', '.', '_'; 1..255 bytes). */
static int parse_host(span h, sv_dest *d)
{
    char buf[256];
    if (h.n >= 2 && h.p[0] == '[' && h.p[h.n - 1] == ']') {
        if (h.n - 2 >= 46 || h.n == 2)
            return -EPROTO;
        memcpy(buf, h.p + 1, h.n - 2);
        buf[h.n - 2] = '\0';
        d->atyp = SV_ATYP_IPV6;
        return inet_pton(AF_INET6, buf, d->ip) == 1 ? 0 : -EPROTO;
    }
    if (h.n < 1 || h.n > 255)
        return -EPROTO;
    for (size_t i = 0; i < h.n; i++) {
        uint8_t c = h.p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '.' || c == '_'))
            return -EPROTO;
    }
    memcpy(buf, h.p, h.n);
    buf[h.n] = '\0';
    if (inet_pton(AF_INET, buf, d->ip) == 1) {
        d->atyp = SV_ATYP_IPV4;
        return 0;
    }
    d->atyp = SV_ATYP_DOMAIN;
    memcpy(d->host, buf, h.n + 1);
    return 0;
}

/* "host[:port]" (RFC 9110 §4.2.1 for http, §9.3.6 for CONNECT): the port is required with
 * @p need_port, else 80 by default. @return 0 or -EPROTO. */
static int parse_authority(span a, bool need_port, sv_dest *d)
{
    memset(d, 0, sizeof *d);
    d->network = SV_NET_TCP;
    size_t hl = a.n;
    if (a.n > 0 && a.p[0] == '[') {
        const uint8_t *rb = memchr(a.p, ']', a.n);
        if (rb == NULL)
            return -EPROTO;
        hl = (size_t)(rb - a.p) + 1;
        if (hl < a.n && a.p[hl] != ':')
            return -EPROTO;
    } else {
        const uint8_t *colon = memchr(a.p, ':', a.n);
        if (colon != NULL)
            hl = (size_t)(colon - a.p);
    }
    if (parse_host((span){a.p, hl}, d) < 0)
        return -EPROTO;
    if (hl == a.n) {
        d->port = 80;
        return need_port ? -EPROTO : 0;
    }
    d->port = parse_port((span){a.p + hl + 1, a.n - hl - 1});
    return d->port != 0 ? 0 : -EPROTO;
}

/* The target of a request that is not CONNECT: "http://" authority [path-abempty] [? query]. */
static int parse_absolute(span t, http_req *r)
{
    static const char scheme[] = "http://";
    size_t sl = sizeof scheme - 1;
    if (t.n <= sl || strncasecmp((const char *)t.p, scheme, sl) != 0)
        return -EPROTO;
    size_t end = sl;
    while (end < t.n && t.p[end] != '/' && t.p[end] != '?')
        end++;
    r->authority = (span){t.p + sl, end - sl};
    r->path = (span){t.p + end, t.n - end};
    return parse_authority(r->authority, false, &r->dest);
}

/* `METHOD SP target SP HTTP/1.x` of @p len bytes (RFC 9112 §3). @return 0 or -EPROTO. */
static int parse_line(const uint8_t *p, size_t len, http_req *r)
{
    memset(r, 0, sizeof *r);
    r->line_len = len;
    size_t m = 0;
    while (m < len && is_tchar(p[m]))
        m++;
    if (m == 0 || m >= len || p[m] != ' ')
        return -EPROTO;
    size_t t = m + 1, te = t;
    while (te < len && p[te] > 0x20 && p[te] < 0x7f)
        te++;
    if (te == t || len - te != 9 || p[te] != ' ' || memcmp(p + te + 1, "HTTP/1.", 7) != 0 ||
        (p[len - 1] != '0' && p[len - 1] != '1'))
        return -EPROTO;
    r->method = (span){p, m};
    r->version = (span){p + te + 1, 8};
    span target = {p + t, te - t};
    r->connect = m == 7 && memcmp(p, "CONNECT", 7) == 0;
    if (r->connect) {
        r->authority = target;
        return parse_authority(target, true, &r->dest);
    }
    return parse_absolute(target, r);
}

/* ---------------------------------------------------------------------------------------- */
/* Header fields                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* One header line of the head: @p len bytes without CRLF, the name's @p name_len. */
typedef struct field {
    const uint8_t *p;
    uint16_t len, name_len;
} field;

typedef struct fields {
    field v[SV_HTTP_PROXY_FIELDS_MAX];
    unsigned n;
    int host, auth;       /* index of the Host / Proxy-Authorization line, or -1 */
    bool length, chunked; /* Content-Length / Transfer-Encoding came */
    uint64_t content_length; /* Content-Length's value */
} fields;

static span field_name(const field *f)
{
    return (span){f->p, f->name_len};
}

/* The value of @p f, trimmed of spaces and tabs. */
static span field_value(const field *f)
{
    span v = {f->p + f->name_len + 1, (size_t)f->len - f->name_len - 1};
    while (v.n > 0 && (v.p[0] == ' ' || v.p[0] == '\t'))
        v.p++, v.n--;
    while (v.n > 0 && (v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
        v.n--;
    return v;
}

/* Content-Length = 1*DIGIT, at most 18 digits. @return 0 or -EPROTO. */
static int parse_length(span v, uint64_t *out)
{
    if (v.n == 0 || v.n > 18)
        return -EPROTO;
    uint64_t x = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (v.p[i] < '0' || v.p[i] > '9')
            return -EPROTO;
        x = x * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = x;
    return 0;
}

/* Check one line (RFC 9112 §5: token ":" value without CTLs but HTAB) and note what it is. */
static int add_field(fields *fs, const uint8_t *p, size_t len)
{
    size_t k = 0;
    while (k < len && is_tchar(p[k]))
        k++;
    if (k == 0 || k == len || p[k] != ':')
        return -EPROTO; /* no name, no colon, space before it, a folded line */
    for (size_t i = k + 1; i < len; i++)
        if ((p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)
            return -EPROTO;
    if (fs->n == SV_HTTP_PROXY_FIELDS_MAX)
        return -EMSGSIZE;
    field *f = &fs->v[fs->n];
    *f = (field){p, (uint16_t)len, (uint16_t)k};
    span name = field_name(f);
    int *seen = span_ieq(name, "Host")                  ? &fs->host
                : span_ieq(name, "Proxy-Authorization") ? &fs->auth
                                                        : NULL;
    if (seen != NULL && *seen >= 0)
        return -EPROTO; /* two Host (RFC 9112 §3.2) or two credentials */
    if (seen != NULL)
        *seen = (int)fs->n;
    if (span_ieq(name, "Content-Length")) {
        if (fs->length || parse_length(field_value(f), &fs->content_length) < 0)
            return -EPROTO; /* two lengths, or not 1*DIGIT (RFC 9110 §8.6) */
        fs->length = true;
    }
    fs->chunked |= span_ieq(name, "Transfer-Encoding");
    fs->n++;
    return 0;
}

/* The header lines of @p p[0 .. end) (after the request line, before the empty line).
 * @return 0, -EPROTO or -EMSGSIZE. */
static int parse_fields(const uint8_t *p, size_t end, fields *fs)
{
    fs->n = 0;
    fs->host = fs->auth = -1;
    fs->length = fs->chunked = false;
    size_t at = 0;
    while (at < end) {
        const uint8_t *le = memmem(p + at, end - at, "\r\n", 2);
        size_t len = le != NULL ? (size_t)(le - (p + at)) : end - at;
        int rc = add_field(fs, p + at, len);
        if (rc < 0)
            return rc;
        at += len + 2;
    }
    /* both framings: a smuggling attempt (RFC 9112 §6.3 lets a server refuse it) */
    return fs->length && fs->chunked ? -EPROTO : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Basic authentication                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Standard base64 (RFC 4648 §4), padding optional, into @p out (3 * ceil(n / 4) bytes).
 * @return the decoded length, or -1. */
static ssize_t b64_decode(span s, uint8_t *out)
{
    size_t pad = 0;
    while (pad < 2 && s.n > pad && s.p[s.n - 1 - pad] == '=')
        pad++;
    size_t n = s.n - pad;
    if ((pad > 0 && s.n % 4 != 0) || n % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        int v = sv_b64_digit(s.p[i], false);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            out[o++] = (uint8_t)(acc >> 16);
            out[o++] = (uint8_t)(acc >> 8);
            out[o++] = (uint8_t)acc;
        }
    }
    if (n % 4 == 2)
        out[o++] = (uint8_t)(acc >> 4);
    else if (n % 4 == 3) {
        out[o++] = (uint8_t)(acc >> 10);
        out[o++] = (uint8_t)(acc >> 2);
    }
    return (ssize_t)o;
}

/* The user the request authenticates as (RFC 7617 §2: the first colon splits name and
 * password). @return the user index, or -EACCES. */
static int authenticate(const sv_userpass *t, const fields *fs)
{
    if (fs->auth < 0) {
        int anon = sv_userpass_anonymous(t);
        return anon >= 0 ? anon : -EACCES;
    }
    span v = field_value(&fs->v[fs->auth]);
    size_t k = 0;
    while (k < v.n && v.p[k] != ' ')
        k++;
    if (!span_ieq((span){v.p, k}, "Basic"))
        return -EACCES;
    while (k < v.n && v.p[k] == ' ')
        k++;
    span tok = {v.p + k, v.n - k};
    uint8_t plain[SV_HTTP_PROXY_TOKEN_MAX / 4 * 3 + 3];
    if (tok.n == 0 || tok.n > SV_HTTP_PROXY_TOKEN_MAX)
        return -EACCES;
    ssize_t len = b64_decode(tok, plain);
    const uint8_t *colon = len > 0 ? memchr(plain, ':', (size_t)len) : NULL;
    if (colon == NULL)
        return -EACCES;
    size_t ul = (size_t)(colon - plain);
    int user = sv_userpass_lookup(t, plain, ul, colon + 1, (size_t)len - ul - 1);
    OPENSSL_cleanse(plain, sizeof plain);
    return user >= 0 ? user : -EACCES;
}

/* ---------------------------------------------------------------------------------------- */
/* The rewritten head of a plain request                                                     */
/* ---------------------------------------------------------------------------------------- */

/* Hop-by-hop fields (RFC 9110 §7.6.1; Proxy-Authorization and Proxy-Connection too,
 * PROTOCOLS-3.md §4.3). Transfer-Encoding is not one here: it frames the body we pass on. */
static bool is_hop_by_hop(span name)
{
    static const char *const hop[] = {"Proxy-Authorization", "Proxy-Connection", "Connection",
                                      "Keep-Alive", "TE", "Trailer", "Upgrade"};
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (span_ieq(name, hop[i]))
            return true;
    return false;
}

/* Does the comma-separated list @p v hold @p token (case-insensitive, RFC 9110 §5.6.1)? */
static bool list_has(span v, span token)
{
    while (v.n > 0) {
        size_t k = 0;
        while (k < v.n && v.p[k] != ',')
            k++;
        span e = {v.p, k};
        while (e.n > 0 && (e.p[0] == ' ' || e.p[0] == '\t'))
            e.p++, e.n--;
        while (e.n > 0 && (e.p[e.n - 1] == ' ' || e.p[e.n - 1] == '\t'))
            e.n--;
        if (e.n == token.n && strncasecmp((const char *)e.p, (const char *)token.p, e.n) == 0)
            return true;
        k = k < v.n ? k + 1 : k;
        v.p += k, v.n -= k;
    }
    return false;
}

/* Is @p f dropped from the forwarded head: hop-by-hop, or named by a Connection line (never
 * Host nor the body's framing)? */
static bool dropped(const fields *fs, const field *f)
{
    span name = field_name(f);
    if (is_hop_by_hop(name))
        return true;
    if (span_ieq(name, "Host") || span_ieq(name, "Content-Length") ||
        span_ieq(name, "Transfer-Encoding"))
        return false;
    for (unsigned i = 0; i < fs->n; i++)
        if (span_ieq(field_name(&fs->v[i]), "Connection") && list_has(field_value(&fs->v[i]), name))
            return true;
    return false;
}

static uint8_t *put(uint8_t *o, const void *p, size_t n)
{
    memcpy(o, p, n);
    return o + n;
}

/* Build the origin-form head of @p r with @p fs into a new buffer *@p out.
 * @return its length, or -ENOMEM. */
static ssize_t build_head(const http_req *r, const fields *fs, size_t head_len, uint8_t **out)
{
    size_t cap = head_len + 2 * r->authority.n + sizeof conn_close + 16;
    uint8_t *b = malloc(cap), *o = b;
    if (b == NULL)
        return -ENOMEM;
    o = put(o, r->method.p, r->method.n);
    bool slash = r->path.n > 0 && r->path.p[0] == '/';
    o = put(o, slash ? " " : " /", slash ? 1 : 2);
    o = put(o, r->path.p, r->path.n);
    o = put(o, " ", 1);
    o = put(o, r->version.p, r->version.n);
    o = put(o, "\r\n", 2);
    for (unsigned i = 0; i < fs->n; i++) {
        const field *f = &fs->v[i];
        if ((int)i == fs->host) {
            o = put(o, f->p, f->name_len);
            o = put(o, ": ", 2);
            o = put(o, r->authority.p, r->authority.n);
            o = put(o, "\r\n", 2);
        } else if (!dropped(fs, f)) {
            o = put(o, f->p, f->len);
            o = put(o, "\r\n", 2);
        }
    }
    if (fs->host < 0) {
        o = put(o, "Host: ", 6);
        o = put(o, r->authority.p, r->authority.n);
        o = put(o, "\r\n", 2);
    }
    o = put(o, conn_close, sizeof conn_close - 1);
    *out = b;
    return o - b;
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state and feed                                                             */
/* ---------------------------------------------------------------------------------------- */

/* PH_BODY: the forwarded request's Content-Length bytes pass; PH_DONE: the forwarded request
 * is whole, later bytes (a pipelined request, with its credentials) are dropped. */
enum http_phase { PH_HEAD = 0, PH_TUNNEL, PH_BODY, PH_CHUNKED, PH_DONE, PH_FAILED };

/* Where a chunked body (RFC 9112 §7.1) is: a size line (hex digits, then extensions to LF), a
 * chunk's data, the CRLF after it, a trailer line, or the start of one (an empty line ends the
 * body). */
enum chunk_at { CK_SIZE = 0, CK_EXT, CK_DATA, CK_DATA_END, CK_TRAILER_START, CK_TRAILER, CK_LAST };

typedef struct http_conn {
    uint8_t phase;    /* enum http_phase */
    bool line_ok;     /* the request line is complete and valid */
    uint16_t scanned; /* PH_HEAD: bytes known to hold no end of head (no end of line while
                         !line_ok) */
    int error;        /* PH_FAILED: the error that ended the connection */
    uint8_t *head;    /* the rewritten head of the last call, or NULL */
    uint64_t body_left; /* PH_BODY: body bytes still to pass; PH_CHUNKED: the chunk's */
    bool plain;         /* the inbound has no TLS: a tunnel may be spliced */
    uint8_t ck;         /* PH_CHUNKED: enum chunk_at */
    uint8_t ck_digits;  /* PH_CHUNKED: hex digits of the size line so far */
} http_conn;

static int conn_init(void *state, const sv_inbound_spec *in)
{
    memset(state, 0, sizeof(http_conn));
    ((http_conn *)state)->plain = in != NULL && in->tls.cert == SV_CERT_NONE;
    return 0;
}

/* A CONNECT tunnel in clear carries the bytes as they are both ways: the runtime may relay it
 * in the kernel (splice), as it does Vision's raw directions. */
static unsigned conn_direct(const void *state)
{
    const http_conn *c = state;
    return c->plain && c->phase == PH_TUNNEL ? SV_DIRECT_IN | SV_DIRECT_OUT : 0;
}

static const sv_proto_ext_direct http_direct = {.direct = conn_direct};

static void conn_deinit(void *state)
{
    http_conn *c = state;
    free(c->head);
    c->head = NULL;
}

static ssize_t fail(http_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy,
                    const char *answer)
{
    c->phase = PH_FAILED;
    c->error = error;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    e->error = error;
    e->policy = policy;
    if (answer != NULL) {
        e->data = (uint8_t *)(uintptr_t)answer; /* only read */
        e->len = strlen(answer);
    }
    return error;
}

static ssize_t refuse(http_conn *c, sv_effects *fx, int error)
{
    const char *a = error == -EACCES ? answer_407 : error == -EMSGSIZE ? answer_431 : answer_400;
    return fail(c, fx, error, SV_PROBE_ANSWER, a);
}

static void push(sv_effects *fx, enum sv_effect_kind kind, const void *p, size_t n)
{
    if (n > 0) {
        sv_effect *e = sv_effects_push(fx, kind);
        e->data = (uint8_t *)(uintptr_t)p;
        e->len = n;
    }
}

/* Find the end of the head in @p p[0 .. q), checking the request line once it is complete.
 * @return the head's length, 0 when not there yet, or -EPROTO. */
static ssize_t find_head(http_conn *c, const uint8_t *p, size_t q)
{
    if (!c->line_ok) {
        size_t from = c->scanned > 0 ? c->scanned - 1u : 0;
        const uint8_t *eol = memmem(p + from, q - from, "\r\n", 2);
        if (eol == NULL) {
            c->scanned = (uint16_t)q;
            return 0;
        }
        http_req r;
        if (parse_line(p, (size_t)(eol - p), &r) < 0)
            return -EPROTO;
        c->line_ok = true;
        c->scanned = (uint16_t)(eol - p + 3);
    }
    size_t from = c->scanned - 3u;
    const uint8_t *e = memmem(p + from, q - from, "\r\n\r\n", 4);
    if (e == NULL) {
        c->scanned = (uint16_t)(q > c->scanned ? q : c->scanned);
        return 0;
    }
    return e - p + 4;
}

/* One step of a chunked body at @p p[0 .. n): @return the bytes it covers (> 0), or -EPROTO for
 * a malformed framing. Sets PH_DONE at the body's end. */
static ssize_t chunk_step(http_conn *c, const uint8_t *p, size_t n)
{
    uint8_t b = p[0];
    switch (c->ck) {
    case CK_SIZE: {
        int v = sv_hex_digit(b);
        if (v >= 0 && c->ck_digits < 15) {
            c->body_left = c->body_left << 4 | (uint64_t)v;
            c->ck_digits++;
            return 1;
        }
        if (v >= 0 || c->ck_digits == 0)
            return -EPROTO; /* a size of 16 digits or more, or none */
        c->ck = CK_EXT; /* the rest of the size line (extensions, CR) */
        __attribute__((fallthrough));
    }
    case CK_EXT:
        if (b == '\n')
            c->ck = c->body_left > 0 ? CK_DATA : CK_TRAILER_START;
        return 1;
    case CK_DATA: {
        size_t k = c->body_left < n ? (size_t)c->body_left : n;
        c->body_left -= k;
        if (c->body_left == 0)
            c->ck = CK_DATA_END;
        return (ssize_t)k;
    }
    case CK_DATA_END: /* CR LF */
        if (b == '\n') {
            c->ck = CK_SIZE;
            c->ck_digits = 0;
        } else if (b != '\r') {
            return -EPROTO;
        }
        return 1;
    case CK_TRAILER_START:
        if (b == '\n')
            c->phase = PH_DONE;
        else if (b == '\r')
            c->ck = CK_LAST;
        else
            c->ck = CK_TRAILER;
        return 1;
    case CK_LAST:
        if (b != '\n')
            return -EPROTO;
        c->phase = PH_DONE;
        return 1;
    default: /* CK_TRAILER: a trailer field, to its LF */
        if (b == '\n')
            c->ck = CK_TRAILER_START;
        return 1;
    }
}

/* PH_CHUNKED: the bytes of @p n up to the body's end pass; those after it are dropped. */
static ssize_t feed_chunked(http_conn *c, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t at = 0;
    while (at < n && c->phase == PH_CHUNKED) {
        ssize_t k = chunk_step(c, p + at, n - at);
        if (k < 0) {
            push(fx, SV_FX_TO_OUTBOUND, p, at);
            return fail(c, fx, (int)k, SV_PROBE_CLOSE, NULL);
        }
        at += (size_t)k;
    }
    push(fx, SV_FX_TO_OUTBOUND, p, at);
    return (ssize_t)n;
}

/* PH_TUNNEL, PH_BODY, PH_CHUNKED, PH_DONE: what passes of @p n bytes (all are consumed). */
static ssize_t feed_body(http_conn *c, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t pass = n;
    if (c->phase == PH_CHUNKED)
        return feed_chunked(c, p, n, fx);
    if (c->phase == PH_DONE) {
        pass = 0;
    } else if (c->phase == PH_BODY) {
        pass = c->body_left < n ? (size_t)c->body_left : n;
        c->body_left -= pass;
        if (c->body_left == 0)
            c->phase = PH_DONE;
    }
    push(fx, SV_FX_TO_OUTBOUND, p, pass);
    return (ssize_t)n;
}

/* The whole head of @p h bytes is in @p p: authenticate, then open. */
static ssize_t accept_head(http_conn *c, const sv_userpass *t, uint8_t *p, size_t n, size_t h,
                           sv_effects *fx)
{
    http_req r;
    fields fs;
    const uint8_t *eol = memmem(p, h, "\r\n", 2);
    parse_line(p, (size_t)(eol - p), &r);
    size_t fstart = r.line_len + 2;
    int rc = parse_fields(p + fstart, h - 2 - fstart, &fs);
    if (rc < 0)
        return refuse(c, fx, rc);
    int user = authenticate(t, &fs);
    if (user < 0)
        return refuse(c, fx, user);
    ssize_t hl = 0;
    if (!r.connect && (hl = build_head(&r, &fs, h, &c->head)) < 0)
        return fail(c, fx, -ENOMEM, SV_PROBE_CLOSE, NULL);
    sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
    e->principal = user;
    if (r.connect)
        push(fx, SV_FX_TO_CLIENT, answer_200, sizeof answer_200 - 1);
    e = sv_effects_push(fx, SV_FX_OPEN);
    e->dest = r.dest;
    if (r.connect) {
        c->phase = PH_TUNNEL;
        push(fx, SV_FX_TO_OUTBOUND, p + h, n - h);
        return (ssize_t)n;
    }
    push(fx, SV_FX_TO_OUTBOUND, c->head, (size_t)hl);
    /* the body, for its Content-Length or to its last chunk, then nothing more */
    c->phase = fs.chunked ? PH_CHUNKED : PH_BODY;
    c->body_left = fs.length ? fs.content_length : 0;
    return (ssize_t)h + feed_body(c, p + h, n - h, fx);
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    http_conn *c = state;
    fx->n = 0;
    free(c->head);
    c->head = NULL;
    switch (c->phase) {
    case PH_FAILED:
        return fail(c, fx, c->error, SV_PROBE_CLOSE, NULL);
    case PH_TUNNEL:
    case PH_BODY:
    case PH_CHUNKED:
    case PH_DONE:
        return feed_body(c, p, n, fx);
    default:
        break;
    }
    size_t q = n < SV_HTTP_PROXY_HEAD_MAX ? n : SV_HTTP_PROXY_HEAD_MAX;
    ssize_t h = find_head(c, p, q);
    if (h < 0)
        return refuse(c, fx, (int)h);
    if (h == 0)
        return q == SV_HTTP_PROXY_HEAD_MAX ? refuse(c, fx, -EMSGSIZE) : 0;
    return accept_head(c, creds, p, n, (size_t)h, fx);
}

const sv_proto_ops sv_http_proxy_ops = {
    .name = "http",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(http_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_HTTP_PROXY_HEAD_MAX,
    .frame = sv_frame_copy,
    .frame_max = sv_frame_copy_max,
    .ext =
        {
            [SV_PROTO_CAP_DIRECT] = &http_direct,
        },
};
