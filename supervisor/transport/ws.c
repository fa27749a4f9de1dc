/*
 * WebSocket server layer (RFC 6455, PROTOCOLS.md §8). See ws.h for the rules.
 *
 * A session is in one of four phases: HEAD (reading the upgrade request into a buffer that lives
 * only during the handshake), OPEN (frames), REFUSED (bytes pass through as they are, the request
 * first) and FAILED. Frame payloads are unmasked eight bytes at a time from the bytes below
 * straight into the buffer of the layer above: one pass, no copy of our own.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "supervisor/transport/http_head.h"
#include "supervisor/transport/ws.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define CTRL_MAX 125
/* room beyond SV_WS_OUT_MAX for control frames (pong, close) queued behind data */
#define OUT_SLACK 256
#define OUT_CAP (SV_WS_OUT_MAX + OUT_SLACK)

enum ws_phase { WS_HEAD, WS_OPEN, WS_REFUSED, WS_FAILED };

enum {
    OP_CONT = 0x0,
    OP_TEXT = 0x1,
    OP_BINARY = 0x2,
    OP_CLOSE = 0x8,
    OP_PING = 0x9,
    OP_PONG = 0xA,
};

enum { CLOSE_NORMAL = 1000, CLOSE_PROTOCOL = 1002, CLOSE_TOO_BIG = 1009 };

typedef struct ws_session {
    const sv_ws_conf *conf;
    enum ws_phase phase;
    uint8_t *head;        /* HEAD: the request so far; REFUSED: bytes still to pass up */
    size_t head_len, head_off;
    uint8_t *early;       /* decoded early data not yet passed up (§8.3) */
    size_t early_len, early_off;
    uint8_t *out;         /* pending bytes towards the layer below, out[out_off .. +out_len) */
    size_t out_off, out_len;
    uint64_t remain;      /* payload bytes left in the current frame */
    uint8_t hdr[14];      /* the frame header being collected */
    uint8_t hdr_len;
    uint8_t key[4];
    uint8_t key_pos;      /* payload offset modulo 4 */
    uint8_t opcode;
    uint8_t ctl_len;
    uint8_t ctl[CTRL_MAX];
    uint16_t close_code;  /* the peer's Close code, 0 when none */
    int err;              /* FAILED: the negative errno, returned from then on */
    bool in_frame, fin, in_message, peer_closed, shut;
    bool has_forwarded;   /* forwarded holds what a proxy's header named (http_head.h) */
    char forwarded[SV_HTTP_FORWARDED_MAX];
} ws_session;

sv_ws_conf *sv_ws_conf_new(const char *path, const char *host)
{
    if (path == NULL || path[0] != '/')
        return NULL;
    size_t plen = strcspn(path, "?");
    if (plen > SV_WS_PATH_MAX || (host != NULL && strlen(host) > SV_WS_PATH_MAX))
        return NULL;
    sv_ws_conf *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->path = strndup(path, plen);
    if (host != NULL && host[0] != '\0')
        c->host = strdup(host);
    if (c->path == NULL || (host != NULL && host[0] != '\0' && c->host == NULL)) {
        sv_ws_conf_free(c);
        return NULL;
    }
    return c;
}

void sv_ws_conf_free(sv_ws_conf *conf)
{
    if (conf == NULL)
        return;
    free(conf->path);
    free(conf->host);
    free(conf);
}

/* ---- output queue ---- */

/* Append @p n bytes (callers keep data frames within SV_WS_OUT_MAX; control frames use the
 * slack). @return 0, -ENOBUFS when it does not fit, -ENOMEM. */
static int out_append(ws_session *s, const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    if (s->out_len + na + nb > OUT_CAP)
        return -ENOBUFS;
    if (s->out == NULL) {
        s->out = malloc(OUT_CAP);
        if (s->out == NULL)
            return -ENOMEM;
        s->out_off = 0;
    }
    if (s->out_off + s->out_len + na + nb > OUT_CAP) {
        memmove(s->out, s->out + s->out_off, s->out_len);
        s->out_off = 0;
    }
    uint8_t *dst = s->out + s->out_off + s->out_len;
    memcpy(dst, a, na);
    if (nb > 0)
        memcpy(dst + na, b, nb);
    s->out_len += na + nb;
    return 0;
}

/* The header of an unmasked server frame (RFC 6455 §5.2, shortest length). @return its size. */
static size_t frame_header(uint8_t *h, uint8_t opcode, size_t len)
{
    h[0] = (uint8_t)(0x80u | opcode);
    if (len < 126) {
        h[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xFFFF) {
        h[1] = 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        return 4;
    }
    h[1] = 127;
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
    return 10;
}

static int queue_control(ws_session *s, uint8_t opcode, const uint8_t *p, size_t n)
{
    uint8_t h[4];
    size_t hl = frame_header(h, opcode, n);
    return out_append(s, h, hl, p, n);
}

static int queue_close(ws_session *s, uint16_t code)
{
    uint8_t p[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    return queue_control(s, OP_CLOSE, p, sizeof p);
}

/* A protocol error: queue the Close the RFC asks for and fail the layer. */
static int fail(ws_session *s, uint16_t code, int err)
{
    if (s->phase == WS_OPEN && !s->shut)
        (void)queue_close(s, code); /* best effort: the connection ends anyway */
    s->shut = true;
    s->phase = WS_FAILED;
    s->err = err;
    return err;
}

/* ---- handshake (PROTOCOLS.md §8.1) ---- */

/* base64url without padding (RFC 4648 §5; '=' tolerated at the end). @return the decoded
 * length, or -1 when @p in is not base64url. @p out has room for in_len * 3 / 4 + 1 bytes. */
static ssize_t b64url_decode(const char *in, size_t n, uint8_t *out)
{
    while (n > 0 && in[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return -1;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = in[i];
        int v;
        if (ch >= 'A' && ch <= 'Z')
            v = ch - 'A';
        else if (ch >= 'a' && ch <= 'z')
            v = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9')
            v = ch - '0' + 52;
        else if (ch == '-')
            v = 62;
        else if (ch == '_')
            v = 63;
        else
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[w++] = (uint8_t)(acc >> bits);
        }
    }
    return (ssize_t)w;
}

/* Sec-WebSocket-Key: base64 of 16 bytes (RFC 6455 §4.2.1 item 5). */
static bool key_valid(sv_http_span k)
{
    if (k.n != 24 || k.p[22] != '=' || k.p[23] != '=')
        return false;
    uint8_t raw[18];
    return EVP_DecodeBlock(raw, (const unsigned char *)k.p, 24) == 18;
}

/* Check the request and, when it upgrades, queue the 101 answer and keep the early data.
 * @return 1 upgraded, 0 refused, -ENOMEM. */
static int handshake(ws_session *s)
{
    sv_http_upgrade_req r;
    const sv_ws_conf *cf = s->conf;
    if (!sv_http_parse_upgrade((const char *)s->head, s->head_len, &r))
        return 0;
    if (r.path.n != strlen(cf->path) || memcmp(r.path.p, cf->path, r.path.n) != 0)
        return 0;
    if (cf->host != NULL && (!r.has_host || !sv_http_host_matches(r.host, cf->host)))
        return 0;
    if (!r.has_upgrade || !sv_http_has_token(r.upgrade, "websocket") || !r.has_connection ||
        !sv_http_has_token(r.connection, "upgrade") || !r.has_version ||
        !sv_http_span_ieq(r.version, "13") || !r.has_key || !key_valid(r.key))
        return 0;
    s->has_forwarded = sv_http_forwarded(&r, s->forwarded);
    /* Sec-WebSocket-Accept = base64(SHA-1(key ‖ GUID)) (RFC 6455 §4.2.2) */
    uint8_t material[24 + sizeof WS_GUID - 1], digest[SHA_DIGEST_LENGTH];
    memcpy(material, r.key.p, 24);
    memcpy(material + 24, WS_GUID, sizeof WS_GUID - 1);
    SHA1(material, sizeof material, digest);
    char accept[32];
    EVP_EncodeBlock((unsigned char *)accept, digest, sizeof digest);
    if (r.has_protocol && r.protocol.n > 0) { /* early data (§8.3) */
        s->early = malloc(r.protocol.n * 3 / 4 + 1);
        if (s->early == NULL)
            return -ENOMEM;
        ssize_t m = b64url_decode(r.protocol.p, r.protocol.n, s->early);
        if (m <= 0) {
            free(s->early);
            s->early = NULL;
            r.has_protocol = false; /* a subprotocol name, not early data: not echoed */
        } else {
            s->early_len = (size_t)m;
        }
    } else {
        r.has_protocol = false;
    }
    static const char h1[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Accept: ";
    static const char hp[] = "\r\nSec-WebSocket-Protocol: ";
    int rc = out_append(s, (const uint8_t *)h1, sizeof h1 - 1, (const uint8_t *)accept,
                        strlen(accept));
    if (rc == 0 && r.has_protocol)
        rc = out_append(s, (const uint8_t *)hp, sizeof hp - 1, (const uint8_t *)r.protocol.p,
                        r.protocol.n);
    if (rc == 0)
        rc = out_append(s, (const uint8_t *)"\r\n\r\n", 4, NULL, 0);
    return rc < 0 ? -ENOMEM : 1;
}

static void refuse(ws_session *s)
{
    s->phase = WS_REFUSED;
    s->head_off = 0;
}

/* Collect the request head; bytes after it stay with the caller. */
static ssize_t unwrap_head(ws_session *s, const uint8_t *in, size_t n, size_t *used)
{
    int st = sv_http_head_collect(&s->head, &s->head_len, SV_WS_HEAD_MAX, in, n, used);
    if (st < 0)
        return st;
    if (st != SV_HTTP_HEAD_COMPLETE) {
        if (st == SV_HTTP_HEAD_NOT_HTTP)
            refuse(s); /* not an upgrade request: pass it on as it is */
        return 0;
    }
    int rc = handshake(s);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        refuse(s);
        return 0;
    }
    free(s->head);
    s->head = NULL;
    s->head_len = 0;
    s->phase = WS_OPEN;
    return 0;
}

/* ---- frames (PROTOCOLS.md §8.2) ---- */

/* dst[i] = src[i] ^ key[(pos + i) % 4], eight bytes at a time. */
static void unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], unsigned pos)
{
    uint8_t k8[8];
    for (unsigned i = 0; i < 8; i++)
        k8[i] = key[(pos + i) & 3];
    uint64_t k;
    memcpy(&k, k8, 8);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, src + i, 8);
        v ^= k;
        memcpy(dst + i, &v, 8);
    }
    for (; i < n; i++)
        dst[i] = src[i] ^ k8[i & 7];
}

static bool is_data(uint8_t opcode) { return (opcode & 0x8u) == 0; }

/* The header is complete in hdr[0 .. hdr_len): check it and start the frame. */
static int start_frame(ws_session *s)
{
    uint8_t b0 = s->hdr[0], b1 = s->hdr[1], len7 = b1 & 0x7Fu;
    uint8_t opcode = b0 & 0x0Fu;
    s->fin = (b0 & 0x80u) != 0;
    if ((b0 & 0x70u) != 0 || (b1 & 0x80u) == 0) /* RSV bits, unmasked client frame */
        return fail(s, CLOSE_PROTOCOL, -EPROTO);
    if (is_data(opcode)) {
        if (opcode > OP_BINARY || (opcode == OP_CONT) != s->in_message)
            return fail(s, CLOSE_PROTOCOL, -EPROTO);
    } else if ((opcode != OP_CLOSE && opcode != OP_PING && opcode != OP_PONG) || !s->fin ||
               len7 > CTRL_MAX) {
        return fail(s, CLOSE_PROTOCOL, -EPROTO);
    }
    uint64_t len = len7;
    const uint8_t *m = s->hdr + 2;
    if (len7 == 126) {
        len = (uint64_t)s->hdr[2] << 8 | s->hdr[3];
        m += 2;
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | s->hdr[2 + i];
        m += 8;
    }
    if (len > SV_WS_FRAME_MAX)
        return fail(s, CLOSE_TOO_BIG, -EMSGSIZE);
    memcpy(s->key, m, 4);
    s->key_pos = 0;
    s->opcode = opcode;
    s->remain = len;
    s->ctl_len = 0;
    s->in_frame = true;
    if (is_data(opcode))
        s->in_message = !s->fin;
    return 0;
}

/* A frame's payload is complete. */
static int end_frame(ws_session *s)
{
    s->in_frame = false;
    s->hdr_len = 0;
    if (s->opcode == OP_PING) {
        int rc = queue_control(s, OP_PONG, s->ctl, s->ctl_len);
        if (rc == -ENOMEM)
            return fail(s, CLOSE_PROTOCOL, rc); /* -ENOBUFS: the pong is dropped (UDP-like) */
    } else if (s->opcode == OP_CLOSE) {
        s->peer_closed = true;
        if (s->ctl_len >= 2)
            s->close_code = (uint16_t)(s->ctl[0] << 8 | s->ctl[1]);
    }
    return 0;
}

/* Header bytes still needed, from what is collected so far. */
static size_t header_need(const ws_session *s)
{
    if (s->hdr_len < 2)
        return 2;
    uint8_t len7 = s->hdr[1] & 0x7Fu;
    return 2 + (len7 == 126 ? 2u : len7 == 127 ? 8u : 0u) + 4;
}

static ssize_t unwrap_frames(ws_session *s, const uint8_t *in, size_t n, size_t *used,
                             uint8_t *out, size_t cap)
{
    size_t off = 0, w = 0;
    while (off < n) {
        if (s->peer_closed) { /* nothing counts after a Close (RFC 6455 §5.5.1) */
            off = n;
            break;
        }
        if (!s->in_frame) {
            size_t need;
            while (s->hdr_len < (need = header_need(s)) && off < n) {
                size_t k = need - s->hdr_len;
                if (k > n - off)
                    k = n - off;
                memcpy(s->hdr + s->hdr_len, in + off, k);
                s->hdr_len = (uint8_t)(s->hdr_len + k);
                off += k;
            }
            if (s->hdr_len < need)
                break;
            int rc = start_frame(s);
            if (rc == 0 && s->remain == 0)
                rc = end_frame(s);
            if (rc < 0)
                goto failed;
            continue;
        }
        size_t k = n - off;
        if (k > s->remain)
            k = (size_t)s->remain;
        if (is_data(s->opcode)) {
            if (w == cap)
                break;
            if (k > cap - w)
                k = cap - w;
            unmask(out + w, in + off, k, s->key, s->key_pos);
            w += k;
        } else {
            unmask(s->ctl + s->ctl_len, in + off, k, s->key, s->key_pos);
            s->ctl_len = (uint8_t)(s->ctl_len + k);
        }
        off += k;
        s->key_pos = (uint8_t)((s->key_pos + k) & 3u);
        s->remain -= k;
        if (s->remain == 0 && end_frame(s) < 0)
            goto failed;
    }
    *used = off;
    return (ssize_t)w;
failed: /* the bytes before the error go up first; the error comes with the next call */
    *used = off;
    return w > 0 ? (ssize_t)w : s->err;
}

/* ---- layer ops ---- */

static int ws_open(const void *conf, void **state)
{
    ws_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->conf = conf;
    *state = s;
    return 0;
}

static void ws_free(void *state)
{
    ws_session *s = state;
    if (s == NULL)
        return;
    free(s->head);
    free(s->early);
    free(s->out);
    free(s);
}

/* Pass up what is parked in @p buf (the refused request, the early data) first. */
static size_t take_parked(uint8_t **buf, size_t len, size_t *off, uint8_t *out, size_t cap)
{
    size_t k = len - *off < cap ? len - *off : cap;
    memcpy(out, *buf + *off, k);
    *off += k;
    if (*off == len) {
        free(*buf);
        *buf = NULL;
    }
    return k;
}

static ssize_t ws_unwrap(void *state, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                         size_t cap)
{
    ws_session *s = state;
    *used = 0;
    switch (s->phase) {
    case WS_HEAD:
        return n > 0 ? unwrap_head(s, in, n, used) : 0;
    case WS_REFUSED:
        if (s->head != NULL) {
            size_t k = take_parked(&s->head, s->head_len, &s->head_off, out, cap);
            if (s->head == NULL)
                s->head_len = s->head_off = 0;
            return (ssize_t)k;
        }
        *used = n < cap ? n : cap;
        if (*used > 0)
            memcpy(out, in, *used);
        return (ssize_t)*used;
    case WS_OPEN:
        if (s->early != NULL) {
            size_t k = take_parked(&s->early, s->early_len, &s->early_off, out, cap);
            if (s->early == NULL)
                s->early_len = s->early_off = 0;
            return (ssize_t)k;
        }
        return unwrap_frames(s, in, n, used, out, cap);
    case WS_FAILED:
        return s->err;
    }
    return -EPROTO;
}

static ssize_t ws_wrap(void *state, const uint8_t *p, size_t n)
{
    ws_session *s = state;
    if (s->phase == WS_HEAD)
        return -ENOTCONN;
    if (s->phase == WS_FAILED)
        return -EPROTO;
    if (s->shut && s->phase == WS_OPEN)
        return -EPIPE;
    size_t room = s->out_len < SV_WS_OUT_MAX ? SV_WS_OUT_MAX - s->out_len : 0;
    int rc;
    if (s->phase == WS_REFUSED) {
        size_t k = n < room ? n : room;
        rc = k > 0 ? out_append(s, p, k, NULL, 0) : 0;
        return rc < 0 ? rc : (ssize_t)k;
    }
    if (room <= 10 || n == 0)
        return 0;
    size_t k = n < room - 10 ? n : room - 10;
    uint8_t h[10];
    size_t hl = frame_header(h, OP_BINARY, k);
    rc = out_append(s, h, hl, p, k);
    return rc < 0 ? rc : (ssize_t)k;
}

static int ws_shutdown(void *state)
{
    ws_session *s = state;
    if (s->phase == WS_HEAD)
        return -ENOTCONN;
    if (s->phase == WS_FAILED)
        return -EPROTO;
    if (s->phase == WS_REFUSED || s->shut)
        return 0;
    s->shut = true; /* echo the peer's code (RFC 6455 §5.5.1), else a normal closure */
    int rc = queue_close(s, s->close_code != 0 ? s->close_code : CLOSE_NORMAL);
    return rc == -ENOMEM ? rc : 0;
}

static const uint8_t *ws_out_peek(const void *state, size_t *len)
{
    const ws_session *s = state;
    *len = s->out_len;
    return s->out_len > 0 ? s->out + s->out_off : NULL;
}

static void ws_out_consume(void *state, size_t n)
{
    ws_session *s = state;
    if (n > s->out_len)
        n = s->out_len;
    s->out_off += n;
    s->out_len -= n;
    if (s->out_len == 0) { /* an idle session holds no buffer */
        free(s->out);
        s->out = NULL;
        s->out_off = 0;
    }
}

static unsigned ws_status(const void *state)
{
    const ws_session *s = state;
    unsigned st = s->peer_closed ? SV_LAYER_EOF : 0u;
    if (s->phase == WS_OPEN)
        st |= SV_LAYER_UP;
    else if (s->phase == WS_REFUSED)
        st |= SV_LAYER_UP | SV_LAYER_REFUSED;
    return st;
}

static const char *ws_forwarded(const void *state)
{
    const ws_session *s = state;
    return s->has_forwarded ? s->forwarded : NULL;
}

const sv_layer_ops sv_ws_layer_ops = {
    .name = "ws",
    .open = ws_open,
    .free = ws_free,
    .unwrap = ws_unwrap,
    .wrap = ws_wrap,
    .shutdown = ws_shutdown,
    .out_peek = ws_out_peek,
    .out_consume = ws_out_consume,
    .status = ws_status,
    .forwarded = ws_forwarded,
};
