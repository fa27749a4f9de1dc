/* ClientHello collector and parser (tls_hello.h; RFC 8446 §4.1.2, §4.2, §5.1). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "supervisor/transport/tls_hello.h"

#define REC_HDR 5u
#define REC_MAX 16384u /* 2^14: largest plaintext record (RFC 8446 §5.1) */

static size_t be16(const uint8_t *p)
{
    return (size_t)p[0] << 8 | p[1];
}

static size_t be24(const uint8_t *p)
{
    return (size_t)p[0] << 16 | (size_t)p[1] << 8 | p[2];
}

/* Check the header at @p h: handshake, version 3.1-3.3, 1..2^14 bytes. @return the length, or 0. */
static size_t record_len(const uint8_t *h)
{
    size_t len = be16(h + 3);
    if (h[0] != 22 || h[1] != 3 || h[2] < 1 || h[2] > 3 || len == 0 || len > REC_MAX)
        return 0;
    return len;
}

/* Can the @p k (< 5) bytes at @p h still start a handshake record header? */
static bool header_prefix_ok(const uint8_t *h, size_t k)
{
    return (k < 1 || h[0] == 22) && (k < 2 || h[1] == 3) && (k < 3 || (h[2] >= 1 && h[2] <= 3));
}

/* Copy the fragments of the records in raw[0 .. end) into @p msg, one after the other. */
static void join_fragments(const uint8_t *raw, size_t end, uint8_t *msg)
{
    size_t out = 0;
    for (size_t at = 0; at < end;) {
        size_t rlen = be16(raw + at + 3);
        memcpy(msg + out, raw + at + REC_HDR, rlen);
        out += rlen;
        at += REC_HDR + rlen;
    }
}

int sv_tls_hello_collect(const uint8_t *raw, size_t n, uint8_t *msg, size_t cap,
                         size_t *msg_len, size_t *raw_used)
{
    uint8_t head[4];
    size_t have = 0, want = 0, at = 0; /* message bytes seen, message length, raw offset */
    for (;;) {
        if (n - at < REC_HDR)
            return header_prefix_ok(raw + at, n - at) ? 0 : -EPROTO;
        size_t rlen = record_len(raw + at);
        if (rlen == 0)
            return -EPROTO;
        size_t avail = n - at - REC_HDR < rlen ? n - at - REC_HDR : rlen;
        for (size_t i = 0; i < avail && have + i < 4; i++)
            head[have + i] = raw[at + REC_HDR + i];
        have += avail;
        if (have >= 1 && head[0] != 1)
            return -EPROTO;
        if (have >= 4 && want == 0) {
            want = 4 + be24(head + 1);
            if (want > SV_TLS_HELLO_MAX || want > cap)
                return -EMSGSIZE;
        }
        if (want != 0 && have > want)
            return -EPROTO; /* bytes after the ClientHello in its record */
        if (avail < rlen)
            return 0;
        at += REC_HDR + rlen;
        if (want != 0 && have == want)
            break;
    }
    join_fragments(raw, at, msg);
    *msg_len = want;
    *raw_used = at;
    return 1;
}

/* A bounded reader over the message. Every take fails once, then stays failed. */
typedef struct rd {
    const uint8_t *p;
    size_t n;
    bool bad;
} rd;

static const uint8_t *take(rd *r, size_t k)
{
    if (r->bad || k > r->n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += k;
    r->n -= k;
    return p;
}

static size_t take_u8(rd *r)
{
    const uint8_t *p = take(r, 1);
    return p != NULL ? p[0] : 0;
}

static size_t take_u16(rd *r)
{
    const uint8_t *p = take(r, 2);
    return p != NULL ? be16(p) : 0;
}

/* A vector with a 1- or 2-byte length prefix, as a sub-reader. */
static rd take_vec(rd *r, unsigned len_bytes)
{
    size_t k = len_bytes == 1 ? take_u8(r) : take_u16(r);
    const uint8_t *p = take(r, k);
    return (rd){p, p != NULL ? k : 0, p == NULL};
}

/* server_name (RFC 6066 §3): the first host_name entry of a non-empty list. */
static bool parse_sni(rd e, sv_tls_hello *h)
{
    rd list = take_vec(&e, 2);
    if (list.bad || list.n == 0 || e.n != 0)
        return false;
    while (list.n > 0) {
        size_t type = take_u8(&list);
        rd name = take_vec(&list, 2);
        if (list.bad || name.n == 0)
            return false;
        if (type == 0 && h->server_name.p == NULL)
            h->server_name = (sv_tls_span){name.p, name.n};
    }
    return true;
}

/* supported_versions (RFC 8446 §4.2.1): 2..254 bytes of versions. */
static bool parse_versions(rd e, sv_tls_hello *h)
{
    rd list = take_vec(&e, 1);
    if (list.bad || e.n != 0 || list.n < 2 || list.n % 2 != 0)
        return false;
    for (size_t i = 0; i < list.n; i += 2)
        if (be16(list.p + i) == 0x0304)
            h->has_tls13 = true;
    return true;
}

/* key_share (RFC 8446 §4.2.8): KeyShareEntry client_shares<0..2^16-1>. */
static bool parse_key_share(rd e, sv_tls_hello *h)
{
    rd list = take_vec(&e, 2);
    if (list.bad || e.n != 0)
        return false;
    h->has_key_share = true;
    while (list.n > 0) {
        size_t group = take_u16(&list);
        rd share = take_vec(&list, 2);
        if (list.bad || share.n == 0)
            return false;
        if (group == SV_TLS_GROUP_X25519 && share.n == 32 && h->x25519 == NULL)
            h->x25519 = share.p;
        if (group == SV_TLS_GROUP_X25519MLKEM768 && share.n == SV_TLS_MLKEM_SHARE_LEN &&
            h->x25519mlkem768 == NULL)
            h->x25519mlkem768 = share.p;
    }
    return true;
}

/* signature_algorithms (RFC 8446 §4.2.3): 2..2^16-2 bytes of schemes. */
static bool parse_sigalgs(rd e, sv_tls_hello *h)
{
    rd list = take_vec(&e, 2);
    if (list.bad || e.n != 0 || list.n < 2 || list.n % 2 != 0)
        return false;
    h->has_signature_algorithms = true;
    h->signature_algorithms = (sv_tls_span){list.p, list.n};
    return true;
}

/* ALPN (RFC 7301 §3.1): a non-empty list of non-empty names. */
static bool parse_alpn(rd e, sv_tls_hello *h)
{
    rd list = take_vec(&e, 2);
    if (list.bad || e.n != 0 || list.n == 0)
        return false;
    h->alpn = (sv_tls_span){list.p, list.n};
    while (list.n > 0) {
        rd name = take_vec(&list, 1);
        if (list.bad || name.n == 0)
            return false;
    }
    return true;
}

static bool parse_extension(size_t type, rd body, sv_tls_hello *h)
{
    switch (type) {
    case SV_TLS_EXT_SERVER_NAME:
        return parse_sni(body, h);
    case SV_TLS_EXT_SUPPORTED_VERSIONS:
        return parse_versions(body, h);
    case SV_TLS_EXT_KEY_SHARE:
        return parse_key_share(body, h);
    case SV_TLS_EXT_SIGNATURE_ALGORITHMS:
        return parse_sigalgs(body, h);
    case SV_TLS_EXT_ALPN:
        return parse_alpn(body, h);
    default:
        return true;
    }
}

static bool parse_extensions(rd exts, sv_tls_hello *h)
{
    uint64_t seen[65536 / 64] = {0}; /* one bit per extension type: a repeat is an error */
    while (exts.n > 0) {
        size_t type = take_u16(&exts);
        rd body = take_vec(&exts, 2);
        if (exts.bad)
            return false;
        if (seen[type / 64] & (1ull << (type % 64)))
            return false;
        seen[type / 64] |= 1ull << (type % 64);
        if (!parse_extension(type, body, h))
            return false;
    }
    return true;
}

int sv_tls_hello_parse(const uint8_t *msg, size_t len, sv_tls_hello *out)
{
    memset(out, 0, sizeof *out);
    rd r = {msg, len, false};
    const uint8_t *head = take(&r, 4);
    if (head == NULL || head[0] != 1 || be24(head + 1) != len - 4)
        return -EPROTO;
    out->legacy_version = (uint16_t)take_u16(&r);
    out->random = take(&r, 32);
    out->session_id_off = (size_t)(r.p - msg) + 1;
    rd sid = take_vec(&r, 1);
    rd suites = take_vec(&r, 2);
    rd comp = take_vec(&r, 1);
    if (r.bad || sid.n > 32 || suites.n < 2 || suites.n % 2 != 0 || comp.n < 1)
        return -EPROTO;
    out->session_id = (sv_tls_span){sid.p, sid.n};
    out->cipher_suites = (sv_tls_span){suites.p, suites.n};
    if (r.n == 0)
        return 0; /* no extensions (a pre-TLS 1.3 hello) */
    rd exts = take_vec(&r, 2);
    if (exts.bad || r.n != 0)
        return -EPROTO;
    out->extensions = (sv_tls_span){exts.p, exts.n};
    return parse_extensions(exts, out) ? 0 : -EPROTO;
}

bool sv_tls_hello_has_suite(const sv_tls_hello *h, uint16_t suite)
{
    for (size_t i = 0; i + 1 < h->cipher_suites.n; i += 2)
        if (be16(h->cipher_suites.p + i) == suite)
            return true;
    return false;
}
