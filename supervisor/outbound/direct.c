/*
 * The direct outbound ("freedom"): a stream dials the requested destination, resolving a name
 * first; a datagram link is one socket per address family that sends to any destination
 * (seed 002 "直连出站的 UDP socket"). Issue 15: a name that resolves to an internal address is
 * dialled or sent to only when the owner allows it (allow_internal); IP destinations are the
 * connector's to check before it opens.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/outbound/outbound.h"

/* ---- addresses ------------------------------------------------------------------------------ */

/* The socket address of an IP destination. */
static void dest_sockaddr(const sv_dest *d, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (d->atyp == SV_ATYP_IPV4) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, d->ip, 4);
        a->sin_port = htons(d->port);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, d->ip, 16);
        a->sin6_port = htons(d->port);
    }
}

/* Issue 15: is any address of @p res internal (or the node's own)? Every address counts, not only
 * the one used, so a name is judged by all it resolves to. */
static bool any_internal(const struct addrinfo *res, const sv_addrset *own)
{
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        sv_ip16 ip;
        if (sv_ip16_from_sockaddr(ai->ai_addr, &ip) && sv_dest_refused(false, false, &ip, own))
            return true;
    }
    return false;
}

/* ---- streams -------------------------------------------------------------------------------- */

static void stream_release(sv_ob_stream *s)
{
    if (--s->pending == 0 && s->closing)
        s->ev->closed(s->owner);
}

static void on_tcp_closed(uv_handle_t *h) { stream_release(h->data); }

static void on_connect(uv_connect_t *req, int status)
{
    sv_ob_stream *s = req->data;
    if (!s->closing) {
        if (status == 0)
            uv_tcp_nodelay(&s->tcp, 1);
        s->ev->connected(s->owner, status);
    }
    stream_release(s);
}

static int dial(sv_ob_stream *s, const struct sockaddr *sa)
{
    int rc = uv_tcp_init(s->env.loop, &s->tcp);
    if (rc != 0)
        return rc;
    s->tcp.data = s;
    s->tcp_inited = true;
    s->pending++;
    s->connect.data = s;
    rc = uv_tcp_connect(&s->connect, &s->tcp, sa, on_connect);
    if (rc == 0)
        s->pending++;
    return rc;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    sv_ob_stream *s = req->data;
    s->resolving = false;
    if (!s->closing) {
        int rc = status == 0 && res != NULL ? 0 : (status < 0 ? status : UV_EAI_NONAME);
        if (rc == 0 && !s->allow_internal && any_internal(res, *s->env.own_addrs))
            rc = -EACCES; /* refused like a blocked route */
        if (rc == 0)
            rc = dial(s, res->ai_addr);
        if (rc != 0)
            s->ev->connected(s->owner, rc);
    }
    uv_freeaddrinfo(res);
    stream_release(s);
}

static int direct_open(sv_ob_stream *s, const sv_dest *d)
{
    if (d->atyp != SV_ATYP_DOMAIN) {
        struct sockaddr_storage ss;
        dest_sockaddr(d, &ss);
        return dial(s, (struct sockaddr *)&ss);
    }
    char port[8];
    snprintf(port, sizeof port, "%u", d->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    s->gai.data = s;
    int rc = uv_getaddrinfo(s->env.loop, &s->gai, on_resolved, d->host, port, &hints);
    if (rc == 0) {
        s->resolving = true;
        s->pending++;
    }
    return rc;
}

static void stream_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_ob_stream *s = h->data;
    s->ev->alloc(s->owner, buf);
    (void)suggested;
}

static void stream_read_cb(uv_stream_t *h, ssize_t n, const uv_buf_t *buf)
{
    sv_ob_stream *s = h->data;
    if (n != 0 && !s->closing)
        s->ev->read(s->owner, n, buf);
}

static void direct_read(sv_ob_stream *s, bool on)
{
    if (!s->tcp_inited || s->closing)
        return;
    if (on)
        uv_read_start((uv_stream_t *)&s->tcp, stream_alloc, stream_read_cb);
    else
        uv_read_stop((uv_stream_t *)&s->tcp);
}

static int direct_try_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    int r = uv_try_write((uv_stream_t *)&s->tcp, iov, n);
    return r == UV_EAGAIN ? 0 : r;
}

static void on_written(uv_write_t *req, int status)
{
    sv_ob_stream *s = req->data;
    if (!s->closing)
        s->ev->written(s->owner, status);
    stream_release(s);
}

static int direct_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    s->wr.data = s;
    int rc = uv_write(&s->wr, (uv_stream_t *)&s->tcp, iov, n, on_written);
    if (rc == 0)
        s->pending++;
    return rc;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    stream_release(req->data);
    (void)status;
}

static int direct_shutdown(sv_ob_stream *s)
{
    s->sd.data = s;
    int rc = uv_shutdown(&s->sd, (uv_stream_t *)&s->tcp, on_shutdown);
    if (rc == 0)
        s->pending++;
    return rc;
}

static void direct_close(sv_ob_stream *s)
{
    if (s->closing)
        return;
    s->closing = true;
    s->pending++; /* held while the close is issued, so closed comes once, last */
    if (s->resolving)
        uv_cancel((uv_req_t *)&s->gai);
    if (s->tcp_inited)
        uv_close((uv_handle_t *)&s->tcp, on_tcp_closed);
    stream_release(s);
}

/* ---- datagrams ------------------------------------------------------------------------------ */

static int family_slot(int family) { return family == AF_INET ? 0 : 1; }

static void dgram_release(sv_ob_dgram *g)
{
    if (--g->pending == 0 && g->closing)
        g->ev->closed(g->owner);
}

static void on_sock_closed(uv_handle_t *h) { dgram_release(h->data); }

static void dgram_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_ob_dgram *g = h->data;
    g->ev->alloc(g->owner, buf);
    (void)suggested;
}

static void on_dgram_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                          unsigned flags)
{
    sv_ob_dgram *g = h->data;
    if (n > 0 && from != NULL && !g->closing && !(flags & UV_UDP_PARTIAL))
        g->ev->recv(g->owner, from, (const uint8_t *)buf->base, (size_t)n);
}

/* Seed 002 bind_dual: one socket per address family; a family that does not bind is skipped. */
static int direct_dgram_open(sv_ob_dgram *g)
{
    static const int families[2] = {AF_INET, AF_INET6};
    for (int i = 0; i < 2; i++) {
        if (uv_udp_init(g->env.loop, &g->sock[i]) != 0)
            continue;
        g->sock[i].data = g;
        g->inited[i] = true;
        g->pending++;
        struct sockaddr_storage any;
        memset(&any, 0, sizeof any);
        any.ss_family = (sa_family_t)families[i];
        unsigned flags = families[i] == AF_INET6 ? UV_UDP_IPV6ONLY : 0;
        g->has[i] = uv_udp_bind(&g->sock[i], (struct sockaddr *)&any, flags) == 0 &&
                    uv_udp_recv_start(&g->sock[i], dgram_alloc, on_dgram_recv) == 0;
    }
    /* "udp: no usable local socket in any requested family" */
    return g->has[0] || g->has[1] ? 0 : -EADDRNOTAVAIL;
}

static void send_to(sv_ob_dgram *g, const struct sockaddr *to, const uint8_t *p, size_t n)
{
    int i = family_slot(to->sa_family);
    if (!g->has[i])
        return; /* no socket of that family: dropped */
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    if (uv_udp_try_send(&g->sock[i], &b, 1, to) >= 0)
        g->ev->sent(g->owner, n);
}

static void on_dgram_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    sv_ob_dgram *g = req->data;
    g->resolving = false;
    if (!g->closing && status == 0 && res != NULL) {
        g->cached_internal = any_internal(res, *g->env.own_addrs);
        /* seed 002: the first address of a family that has a socket */
        for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
            if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
                g->has[family_slot(ai->ai_family)]) {
                memcpy(&g->cached_addr, ai->ai_addr, ai->ai_addrlen);
                break;
            }
        if (g->held != NULL && g->cached_addr.ss_family != AF_UNSPEC &&
            !(g->cached_internal && !g->held_allow_internal))
            send_to(g, (struct sockaddr *)&g->cached_addr, g->held, g->held_len);
    }
    free(g->held);
    g->held = NULL;
    uv_freeaddrinfo(res);
    dgram_release(g);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* Send one datagram to @p d, resolving a name first (one at a time, the answer cached for the
 * next datagrams to the same name). */
static void direct_dgram_send(sv_ob_dgram *g, const sv_dest *d, const uint8_t *p, size_t n,
                              bool allow_internal)
{
    if (g->closing)
        return;
    struct sockaddr_storage to;
    if (d->atyp != SV_ATYP_DOMAIN) {
        dest_sockaddr(d, &to);
        send_to(g, (struct sockaddr *)&to, p, n);
        return;
    }
    if (strcmp(g->cached_host, d->host) == 0 && g->cached_addr.ss_family != AF_UNSPEC) {
        if (g->cached_internal && !allow_internal)
            return; /* refused like a blocked route */
        to = g->cached_addr;
        set_port(&to, d->port);
        send_to(g, (struct sockaddr *)&to, p, n);
        return;
    }
    if (g->resolving)
        return; /* one resolution at a time; UDP may drop */
    g->held = malloc(n ? n : 1);
    if (g->held == NULL)
        return;
    memcpy(g->held, p, n);
    g->held_len = n;
    g->held_allow_internal = allow_internal;
    snprintf(g->cached_host, sizeof g->cached_host, "%s", d->host);
    memset(&g->cached_addr, 0, sizeof g->cached_addr);
    char port[8];
    snprintf(port, sizeof port, "%u", d->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
    g->gai.data = g;
    if (uv_getaddrinfo(g->env.loop, &g->gai, on_dgram_resolved, d->host, port, &hints) == 0) {
        g->resolving = true;
        g->pending++;
    } else {
        free(g->held);
        g->held = NULL;
    }
}

static void direct_dgram_close(sv_ob_dgram *g)
{
    if (g->closing)
        return;
    g->closing = true;
    g->pending++; /* held while the close is issued, so closed comes once, last */
    if (g->resolving)
        uv_cancel((uv_req_t *)&g->gai);
    for (int i = 0; i < 2; i++)
        if (g->inited[i])
            uv_close((uv_handle_t *)&g->sock[i], on_sock_closed);
    dgram_release(g);
}

const sv_outbound_ops sv_ob_direct = {
    .name = "direct",
    .open = direct_open,
    .read = direct_read,
    .try_write = direct_try_write,
    .write = direct_write,
    .shutdown = direct_shutdown,
    .close = direct_close,
    .dgram_open = direct_dgram_open,
    .dgram_send = direct_dgram_send,
    .dgram_close = direct_dgram_close,
};
