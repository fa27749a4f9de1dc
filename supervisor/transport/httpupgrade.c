/*
 * HTTPUpgrade server layer (PROTOCOLS-2.md §4). See httpupgrade.h for the rules.
 *
 * A session is in one of three phases: HEAD (reading the upgrade request into a buffer that
 * lives only during the handshake), OPEN (bytes pass both ways as they are) and REFUSED (the
 * same, the request first).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/http_head.h"
#include "supervisor/transport/httpupgrade.h"
#include "supervisor/transport/ws.h"

enum hu_phase { HU_HEAD, HU_OPEN, HU_REFUSED };

typedef struct hu_session {
    const sv_ws_conf *conf;
    enum hu_phase phase;
    uint8_t *head; /* HEAD: the request so far; REFUSED: bytes still to pass up */
    size_t head_len, head_off;
    uint8_t *out;  /* pending bytes towards the layer below, out[out_off .. +out_len) */
    size_t out_off, out_len;
    bool has_forwarded; /* forwarded holds what a proxy's header named (http_head.h) */
    char forwarded[SV_HTTP_FORWARDED_MAX];
} hu_session;

static const char k_answer[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                               "Upgrade: websocket\r\n\r\n";

/* Append @p n bytes to the output queue (the caller keeps it within SV_HU_OUT_MAX).
 * @return 0 or -ENOMEM. */
static int out_append(hu_session *s, const uint8_t *p, size_t n)
{
    if (s->out == NULL) {
        s->out = malloc(SV_HU_OUT_MAX);
        if (s->out == NULL)
            return -ENOMEM;
        s->out_off = 0;
    }
    if (s->out_off + s->out_len + n > SV_HU_OUT_MAX) {
        memmove(s->out, s->out + s->out_off, s->out_len);
        s->out_off = 0;
    }
    memcpy(s->out + s->out_off + s->out_len, p, n);
    s->out_len += n;
    return 0;
}

/* Does the request in the head buffer upgrade (§4.2 server-side checks)? Keeps the client
 * address a forwarding proxy named. */
static bool acceptable(hu_session *s)
{
    sv_http_upgrade_req r;
    const sv_ws_conf *cf = s->conf;
    if (!sv_http_parse_upgrade((const char *)s->head, s->head_len, &r))
        return false;
    if (r.path.n != strlen(cf->path) || memcmp(r.path.p, cf->path, r.path.n) != 0)
        return false;
    if (cf->host != NULL && (!r.has_host || !sv_http_host_matches(r.host, cf->host)))
        return false;
    s->has_forwarded = sv_http_forwarded(&r, s->forwarded);
    return r.has_upgrade && sv_http_has_token(r.upgrade, "websocket") && r.has_connection &&
           sv_http_has_token(r.connection, "upgrade") && !r.has_key;
}

static void refuse(hu_session *s)
{
    s->phase = HU_REFUSED;
    s->head_off = 0;
}

/* Collect the request head; bytes after it (early data) stay with the caller. */
static ssize_t unwrap_head(hu_session *s, const uint8_t *in, size_t n, size_t *used)
{
    int st = sv_http_head_collect(&s->head, &s->head_len, SV_HU_HEAD_MAX, in, n, used);
    if (st < 0)
        return st;
    if (st != SV_HTTP_HEAD_COMPLETE) {
        if (st == SV_HTTP_HEAD_NOT_HTTP)
            refuse(s); /* not an upgrade request: pass it on as it is */
        return 0;
    }
    if (!acceptable(s)) {
        refuse(s);
        return 0;
    }
    if (out_append(s, (const uint8_t *)k_answer, sizeof k_answer - 1) < 0)
        return -ENOMEM;
    free(s->head);
    s->head = NULL;
    s->head_len = 0;
    s->phase = HU_OPEN;
    return 0;
}

static int hu_open(const void *conf, void **state)
{
    hu_session *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->conf = conf;
    *state = s;
    return 0;
}

static void hu_free(void *state)
{
    hu_session *s = state;
    if (s == NULL)
        return;
    free(s->head);
    free(s->out);
    free(s);
}

static ssize_t hu_unwrap(void *state, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                         size_t cap)
{
    hu_session *s = state;
    *used = 0;
    if (s->phase == HU_HEAD)
        return n > 0 ? unwrap_head(s, in, n, used) : 0;
    if (s->head != NULL) { /* REFUSED: the request goes up first */
        size_t k = s->head_len - s->head_off < cap ? s->head_len - s->head_off : cap;
        memcpy(out, s->head + s->head_off, k);
        s->head_off += k;
        if (s->head_off == s->head_len) {
            free(s->head);
            s->head = NULL;
            s->head_len = s->head_off = 0;
        }
        return (ssize_t)k;
    }
    *used = n < cap ? n : cap;
    if (*used > 0)
        memcpy(out, in, *used);
    return (ssize_t)*used;
}

static ssize_t hu_wrap(void *state, const uint8_t *p, size_t n)
{
    hu_session *s = state;
    if (s->phase == HU_HEAD)
        return -ENOTCONN;
    size_t room = s->out_len < SV_HU_OUT_MAX ? SV_HU_OUT_MAX - s->out_len : 0;
    size_t k = n < room ? n : room;
    if (k == 0)
        return 0;
    int rc = out_append(s, p, k);
    return rc < 0 ? rc : (ssize_t)k;
}

static int hu_shutdown(void *state)
{
    const hu_session *s = state;
    return s->phase == HU_HEAD ? -ENOTCONN : 0; /* raw bytes: the end is TCP's (or TLS's) */
}

static const uint8_t *hu_out_peek(const void *state, size_t *len)
{
    const hu_session *s = state;
    *len = s->out_len;
    return s->out_len > 0 ? s->out + s->out_off : NULL;
}

static void hu_out_consume(void *state, size_t n)
{
    hu_session *s = state;
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

static unsigned hu_status(const void *state)
{
    const hu_session *s = state;
    if (s->phase == HU_OPEN)
        return SV_LAYER_UP;
    if (s->phase == HU_REFUSED)
        return SV_LAYER_UP | SV_LAYER_REFUSED;
    return 0;
}

static const char *hu_forwarded(const void *state)
{
    const hu_session *s = state;
    return s->phase == HU_OPEN && s->has_forwarded ? s->forwarded : NULL;
}

const sv_layer_ops sv_httpupgrade_layer_ops = {
    .name = "httpupgrade",
    .open = hu_open,
    .free = hu_free,
    .unwrap = hu_unwrap,
    .wrap = hu_wrap,
    .shutdown = hu_shutdown,
    .out_peek = hu_out_peek,
    .out_consume = hu_out_consume,
    .status = hu_status,
    .forwarded = hu_forwarded,
};
