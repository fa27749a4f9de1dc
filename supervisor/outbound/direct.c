/*
 * The direct outbound ("freedom"): a stream dials the requested destination, resolving a name
 * first on the worker's resolver and then trying every address, staggered as Happy Eyeballs v2
 * (RFC 8305 §5: SV_OB_ATTEMPT_DELAY_MS between attempts, families alternating, the next attempt
 * at once when one fails); a datagram link is one socket per address family that sends
 * to any destination (seed 002 "直连出站的 UDP socket"), holding datagrams to a name in a bounded
 * queue while it resolves. A name that resolves to an internal address is dialled or
 * sent to only when the owner allows it (allow_internal); IP destinations are the connector's to
 * check before it opens.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
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

/* is any address of @p res internal (or the node's own)? Every address counts, not only
 * the one used, so a name is judged by all it resolves to. */
static bool any_internal(const sv_dns_result *res, const sv_addrset *own)
{
    for (size_t i = 0; i < res->n; i++) {
        sv_ip16 ip;
        if (sv_ip16_from(res->addrs[i].family, res->addrs[i].ip, &ip) &&
            sv_dest_refused(false, false, &ip, own))
            return true;
    }
    return false;
}

/* The socket address of @p a, port @p port. */
static void addr_sockaddr(const sv_dns_addr *a, uint16_t port, struct sockaddr_storage *ss)
{
    sv_dest d = {.atyp = a->family == AF_INET ? SV_ATYP_IPV4 : SV_ATYP_IPV6, .port = port};
    memcpy(d.ip, a->ip, a->family == AF_INET ? 4 : 16);
    dest_sockaddr(&d, ss);
}

/* ---- streams -------------------------------------------------------------------------------- */

/* One connection attempt (RFC 8305 §5): allocated when it starts. The first uses the stream's own
 * socket, a later one brings its own (own[0]). Freed once its connect completed and, when it
 * lost, its handle closed; a later attempt that won stays as the stream's socket until closed. */
typedef struct he_attempt {
    uv_connect_t req;
    struct sv_ob_eyeballs *he;
    uv_tcp_t *tcp;      /* &s->tcp or own */
    size_t idx;         /* in he->at */
    uv_tcp_t own[];     /* a later attempt's socket */
} he_attempt;

/* A name's dial: its query, then its attempts. Lives while it dials: once the stream connected
 * or failed, the timer and the other attempts close and it goes (an idle connection
 * keeps only its socket). */
struct sv_ob_eyeballs {
    sv_ob_stream *s;
    sv_dns_req dns;     /* the query while the name resolves */
    uv_timer_t timer;   /* SV_OB_ATTEMPT_DELAY_MS to the next attempt (once resolved) */
    unsigned refs;      /* the timer once initialised, and each attempt not yet freed */
    size_t n, next, live; /* attempts, the next to start, connects in flight */
    int last_err;
    bool resolving;     /* the query is in flight */
    bool timer_inited;
    bool done;          /* connected or failed */
    bool starting;      /* inside he_start: a failure is returned, not reported */
    uint16_t port;
    sv_dns_result addrs;
    he_attempt *at[SV_DNS_ADDRS_MAX]; /* started, not yet closed, and not the winner */
};

static void stream_release(sv_ob_stream *s)
{
    if (--s->pending == 0 && s->closing)
        s->ev->closed(s->owner);
}

/* Drop one of @p he's holds; the last frees it. */
static void he_unref(struct sv_ob_eyeballs *he)
{
    if (--he->refs > 0)
        return;
    he->s->he = NULL;
    free(he);
}

static void on_he_timer_closed(uv_handle_t *h)
{
    struct sv_ob_eyeballs *he = h->data;
    sv_ob_stream *s = he->s;
    he_unref(he);
    stream_release(s);
}

static void he_timer_close(struct sv_ob_eyeballs *he)
{
    if (he->timer_inited && !uv_is_closing((uv_handle_t *)&he->timer))
        uv_close((uv_handle_t *)&he->timer, on_he_timer_closed);
}

static void on_tcp_closed(uv_handle_t *h) { stream_release(h->data); }

/* TCP_NODELAY on, unless the policy keeps Nagle's algorithm. */
static void tcp_connected(sv_ob_stream *s, uv_tcp_t *tcp)
{
    uv_tcp_nodelay(tcp, s->env.sock == NULL || !s->env.sock->nagle);
}

static void on_connect(uv_connect_t *req, int status)
{
    sv_ob_stream *s = req->data;
    free(req);
    if (!s->closing) {
        if (status == 0)
            tcp_connected(s, &s->tcp);
        s->ev->connected(s->owner, status);
    }
    stream_release(s);
}

static int dial(sv_ob_stream *s, const struct sockaddr *sa)
{
    int rc = uv_tcp_init_ex(s->env.loop, &s->tcp, sa->sa_family);
    if (rc != 0)
        return rc;
    s->tcp.data = s;
    s->tcp_inited = true;
    s->sock = &s->tcp;
    s->pending++;
    if (s->env.sock != NULL) {
        uv_os_fd_t fd;
        rc = uv_fileno((uv_handle_t *)&s->tcp, &fd);
        if (rc == 0)
            rc = sv_socket_policy_apply(s->env.sock, fd, sa->sa_family, true);
        if (rc != 0)
            return rc;
    }
    uv_connect_t *req = malloc(sizeof *req);
    if (req == NULL)
        return -ENOMEM;
    req->data = s;
    rc = uv_tcp_connect(req, &s->tcp, sa, on_connect);
    if (rc == 0)
        s->pending++;
    else
        free(req);
    return rc;
}

static void on_attempt_closed(uv_handle_t *h)
{
    he_attempt *a = h->data;
    struct sv_ob_eyeballs *he = a->he;
    sv_ob_stream *s = he->s;
    he->at[a->idx] = NULL;
    free(a);
    he_unref(he);
    stream_release(s);
}

/* The socket of a later attempt that won has closed with its stream. */
static void on_won_closed(uv_handle_t *h)
{
    sv_ob_stream *s = h->data;
    free((char *)h - offsetof(he_attempt, own));
    stream_release(s);
}

static void attempt_close(he_attempt *a)
{
    if (a != NULL && !uv_is_closing((uv_handle_t *)a->tcp))
        uv_close((uv_handle_t *)a->tcp, on_attempt_closed);
}

static void he_fail(struct sv_ob_eyeballs *he)
{
    he->done = true;
    uv_timer_stop(&he->timer);
    if (!he->starting)
        he->s->ev->connected(he->s->owner, he->last_err);
}

static void on_attempt(uv_connect_t *req, int status);
static void on_attempt_timer(uv_timer_t *t);

/* Start the next attempt that can start; report the failure when none is left. */
static void he_next(struct sv_ob_eyeballs *he)
{
    sv_ob_stream *s = he->s;
    while (he->next < he->n) {
        struct sockaddr_storage ss;
        int family = he->addrs.addrs[he->next].family;
        addr_sockaddr(&he->addrs.addrs[he->next], he->port, &ss);
        size_t idx = he->next++;
        bool first = idx == 0; /* the stream's socket was never used before it */
        he_attempt *a = calloc(1, sizeof *a + (first ? 0 : sizeof(uv_tcp_t)));
        if (a != NULL)
            a->tcp = first ? &s->tcp : &a->own[0];
        int rc = a == NULL ? -ENOMEM : uv_tcp_init_ex(s->env.loop, a->tcp, (unsigned)family);
        if (rc != 0) {
            free(a);
            he->last_err = rc;
            continue;
        }
        a->tcp->data = a; /* the stream once it won: its read callbacks take it from there */
        a->idx = idx;
        he->at[idx] = a;
        he->refs++;
        s->pending++;
        a->he = he;
        a->req.data = a;
        uv_os_fd_t fd;
        if (s->env.sock != NULL &&
            ((rc = uv_fileno((uv_handle_t *)a->tcp, &fd)) != 0 ||
             (rc = sv_socket_policy_apply(s->env.sock, fd, family, true)) != 0)) {
            he->last_err = rc;
            attempt_close(a);
            continue;
        }
        rc = uv_tcp_connect(&a->req, a->tcp, (struct sockaddr *)&ss, on_attempt);
        if (rc != 0) { /* e.g. no route for this family: the next one at once */
            he->last_err = rc;
            attempt_close(a);
            continue;
        }
        s->pending++;
        he->live++;
        if (he->next < he->n)
            uv_timer_start(&he->timer, on_attempt_timer, SV_OB_ATTEMPT_DELAY_MS, 0);
        return;
    }
    if (he->live == 0 && !he->done)
        he_fail(he);
}

static void on_attempt_timer(uv_timer_t *t)
{
    struct sv_ob_eyeballs *he = t->data;
    if (!he->done && !he->s->closing)
        he_next(he);
}

/* @p a won: it becomes the stream's socket, and the rest of the dial closes. */
static void he_won(struct sv_ob_eyeballs *he, he_attempt *a)
{
    sv_ob_stream *s = he->s;
    he->done = true;
    he->at[a->idx] = NULL;
    for (size_t i = 0; i < he->next; i++)
        attempt_close(he->at[i]); /* the others' connects end cancelled */
    s->sock = a->tcp;
    s->sock->data = s;
    if (a->tcp == &s->tcp) {
        s->tcp_inited = true; /* closed as an IP destination's socket, by on_tcp_closed */
        free(a);
    } /* else a stays with its socket, freed by on_won_closed */
    he_timer_close(he);
    he_unref(he); /* a's hold */
    tcp_connected(s, s->sock);
    s->ev->connected(s->owner, 0);
}

static void on_attempt(uv_connect_t *req, int status)
{
    he_attempt *a = req->data;
    struct sv_ob_eyeballs *he = a->he;
    sv_ob_stream *s = he->s;
    he->live--;
    if (!s->closing && !he->done) {
        if (status == 0) {
            he_won(he, a);
        } else {
            he->last_err = status;
            attempt_close(a);
            he_next(he);
        }
    }
    stream_release(s);
}

static void on_failed_timer(uv_timer_t *t)
{
    struct sv_ob_eyeballs *he = t->data;
    if (!he->s->closing)
        he->s->ev->connected(he->s->owner, he->last_err);
}

/* Dial the name of s->he, which resolved with @p status (@p res when 0): refused when any
 * address is internal, else Happy Eyeballs. A failure is reported by ev->connected
 * from the loop, never from inside open. */
static void he_start(sv_ob_stream *s, int status, const sv_dns_result *res)
{
    struct sv_ob_eyeballs *he = s->he;
    sv_dns_result ordered = {0};
    if (status == 0) {
        ordered = *res;
        sv_dns_order(&ordered, sv_resolver_strategy(s->env.resolver));
    }
    he->n = ordered.n;
    he->addrs = ordered;
    he->last_err = status != 0 ? status : ordered.n == 0 ? -ENOENT : -ECONNREFUSED;
    uv_timer_init(s->env.loop, &he->timer);
    he->timer.data = he;
    he->timer_inited = true;
    he->refs++;
    s->pending++;
    if (status == 0 && !s->allow_internal && any_internal(res, *s->env.own_addrs)) {
        he->last_err = -EACCES; /* refused like a blocked route */
        s->refused_internal = true;
    } else if (he->n > 0) {
        he->starting = true;
        he_next(he);
        he->starting = false;
        if (!he->done)
            return;
    }
    he->done = true;
    uv_timer_start(&he->timer, on_failed_timer, 0, 0);
}

static void on_resolved(sv_dns_req *req, int status, const sv_dns_result *res)
{
    sv_ob_stream *s = req->data;
    s->he->resolving = false;
    if (!s->closing)
        he_start(s, status, res);
    stream_release(s);
}

static int direct_open(sv_ob_stream *s, const sv_dest *d)
{
    if (d->atyp != SV_ATYP_DOMAIN) {
        struct sockaddr_storage ss;
        dest_sockaddr(d, &ss);
        return dial(s, (struct sockaddr *)&ss);
    }
    struct sv_ob_eyeballs *he = calloc(1, sizeof *he);
    if (he == NULL)
        return -ENOMEM;
    he->s = s;
    he->port = d->port;
    he->dns.data = s;
    s->he = he;
    sv_dns_result res;
    int rc = sv_dns_resolve(s->env.resolver, &he->dns, d->host, on_resolved, &res);
    if (rc != 1) { /* answered now: dial (or report the failure) from the loop */
        he_start(s, rc, &res);
        return 0;
    }
    he->resolving = true;
    s->pending++;
    return 0;
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
    if (s->sock == NULL || s->closing)
        return;
    if (on)
        uv_read_start((uv_stream_t *)s->sock, stream_alloc, stream_read_cb);
    else
        uv_read_stop((uv_stream_t *)s->sock);
}

static int direct_try_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    int r = uv_try_write((uv_stream_t *)s->sock, iov, n);
    return r == UV_EAGAIN ? 0 : r;
}

static void on_written(uv_write_t *req, int status)
{
    sv_ob_stream *s = req->data;
    free(req);
    if (!s->closing)
        s->ev->written(s->owner, status);
    stream_release(s);
}

static int direct_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    uv_write_t *req = malloc(sizeof *req); /* only while the kernel has not taken it all */
    if (req == NULL)
        return UV_ENOMEM;
    req->data = s;
    int rc = uv_write(req, (uv_stream_t *)s->sock, iov, n, on_written);
    if (rc == 0)
        s->pending++;
    else
        free(req);
    return rc;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    sv_ob_stream *s = req->data;
    s->sd = NULL;
    free(req);
    stream_release(s);
    (void)status;
}

static int direct_shutdown(sv_ob_stream *s)
{
    if (s->sd != NULL)
        return UV_EALREADY;
    if ((s->sd = malloc(sizeof *s->sd)) == NULL)
        return UV_ENOMEM;
    s->sd->data = s;
    int rc = uv_shutdown(s->sd, (uv_stream_t *)s->sock, on_shutdown);
    if (rc == 0) {
        s->pending++;
    } else {
        free(s->sd);
        s->sd = NULL;
    }
    return rc;
}

static int direct_fileno(const sv_ob_stream *s)
{
    uv_os_fd_t fd = -1;
    if (s->sock == NULL || s->closing || uv_fileno((const uv_handle_t *)s->sock, &fd) != 0)
        return -1;
    return fd;
}

static void direct_close(sv_ob_stream *s)
{
    if (s->closing)
        return;
    s->closing = true;
    s->pending++; /* held while the close is issued, so closed comes once, last */
    struct sv_ob_eyeballs *he = s->he;
    if (he != NULL) {
        if (he->resolving) {
            he->resolving = false;
            sv_dns_cancel(&he->dns);
            s->pending--; /* the resolution's hold; ours keeps the count above zero */
        }
        if (he->refs == 0) { /* never resolved: nothing else holds it */
            s->he = NULL;
            free(he);
        } else {
            for (size_t i = 0; i < he->next; i++)
                attempt_close(he->at[i]);
            he_timer_close(he);
        }
    }
    if (s->tcp_inited)
        uv_close((uv_handle_t *)&s->tcp, on_tcp_closed);
    else if (s->sock != NULL)
        uv_close((uv_handle_t *)s->sock, on_won_closed);
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
        if (uv_udp_init_ex(g->env.loop, &g->sock[i], (unsigned)families[i]) != 0)
            continue;
        g->sock[i].data = g;
        g->inited[i] = true;
        g->pending++;
        uv_os_fd_t fd;
        if (g->env.sock != NULL &&
            (uv_fileno((uv_handle_t *)&g->sock[i], &fd) != 0 ||
             sv_socket_policy_apply(g->env.sock, fd, families[i], false) != 0))
            continue; /* no datagram leaves outside the policy */
        struct sockaddr_storage src; /* the policy's source of this family, else any */
        sv_socket_policy_source(g->env.sock, families[i], &src);
        unsigned flags = families[i] == AF_INET6 ? UV_UDP_IPV6ONLY : 0;
        g->has[i] = uv_udp_bind(&g->sock[i], (struct sockaddr *)&src, flags) == 0 &&
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

/* A datagram waiting for its name, in the link's queue. */
struct sv_ob_held {
    struct sv_ob_held *next;
    uint16_t port;
    bool allow_internal;
    size_t len;
    char host[256];
    uint8_t data[];
};

/* Send to a resolved name: dropped when any address is internal and not allowed, or
 * when no address has a socket; else to the first of the strategy's order that has one. */
static void send_resolved(sv_ob_dgram *g, const sv_dns_result *res, uint16_t port,
                          bool allow_internal, const uint8_t *p, size_t n)
{
    if (!allow_internal && any_internal(res, *g->env.own_addrs))
        return; /* refused like a blocked route */
    sv_dns_result ordered = *res;
    sv_dns_order(&ordered, sv_resolver_strategy(g->env.resolver));
    for (size_t i = 0; i < ordered.n; i++)
        if (g->has[family_slot(ordered.addrs[i].family)]) {
            struct sockaddr_storage to;
            addr_sockaddr(&ordered.addrs[i], port, &to);
            send_to(g, (struct sockaddr *)&to, p, n);
            return;
        }
}

static void on_dgram_resolved(sv_dns_req *req, int status, const sv_dns_result *res);

/* Send the queued datagrams in order while their names are answered; stop at the first name
 * that needs a query (seed 002: one query in flight per link) and start it. @p answer is the
 * answer just received for @p host (NULL: none). */
static void drain_held(sv_ob_dgram *g, const char *host, int status, const sv_dns_result *answer)
{
    while (g->held != NULL && !g->closing) {
        struct sv_ob_held *h = g->held;
        sv_dns_result res;
        int rc;
        if (host != NULL && strcmp(host, h->host) == 0) {
            rc = status;
            if (rc == 0)
                res = *answer;
        } else {
            g->dns.data = g;
            rc = sv_dns_resolve(g->env.resolver, &g->dns, h->host, on_dgram_resolved, &res);
        }
        if (rc == 1) {
            g->resolving = true;
            g->pending++;
            return;
        }
        if (rc == 0)
            send_resolved(g, &res, h->port, h->allow_internal, h->data, h->len);
        g->held = h->next;
        if (g->held == NULL)
            g->held_tail = NULL;
        g->n_held--;
        g->held_bytes -= h->len;
        free(h);
    }
}

static void on_dgram_resolved(sv_dns_req *req, int status, const sv_dns_result *res)
{
    sv_ob_dgram *g = req->data;
    g->resolving = false;
    if (!g->closing && g->held != NULL) {
        char host[256];
        snprintf(host, sizeof host, "%s", g->held->host);
        drain_held(g, host, status, res);
    }
    dgram_release(g);
}

/* Queue one datagram for a name; dropped past SV_OB_DGRAM_QUEUE_MAX / _BYTES. */
static void hold(sv_ob_dgram *g, const sv_dest *d, const uint8_t *p, size_t n, bool allow_internal)
{
    if (g->n_held >= SV_OB_DGRAM_QUEUE_MAX || g->held_bytes + n > SV_OB_DGRAM_QUEUE_BYTES)
        return;
    struct sv_ob_held *h = malloc(sizeof *h + n);
    if (h == NULL)
        return;
    h->next = NULL;
    h->port = d->port;
    h->allow_internal = allow_internal;
    h->len = n;
    snprintf(h->host, sizeof h->host, "%s", d->host);
    memcpy(h->data, p, n);
    if (g->held_tail != NULL)
        g->held_tail->next = h;
    else
        g->held = h;
    g->held_tail = h;
    g->n_held++;
    g->held_bytes += n;
}

/* Send one datagram to @p d; a name is resolved on the worker's resolver, and while a name's
 * query is in flight, datagrams to names wait in order in the link's bounded queue. */
static void direct_dgram_send(sv_ob_dgram *g, const sv_dest *d, const uint8_t *p, size_t n,
                              bool allow_internal)
{
    if (g->closing)
        return;
    if (d->atyp != SV_ATYP_DOMAIN) {
        struct sockaddr_storage to;
        dest_sockaddr(d, &to);
        send_to(g, (struct sockaddr *)&to, p, n);
        return;
    }
    if (g->held != NULL) { /* behind the queue, in order */
        hold(g, d, p, n, allow_internal);
        return;
    }
    sv_dns_result res;
    g->dns.data = g;
    int rc = sv_dns_resolve(g->env.resolver, &g->dns, d->host, on_dgram_resolved, &res);
    if (rc == 0)
        send_resolved(g, &res, d->port, allow_internal, p, n);
    if (rc != 1)
        return; /* sent, or a negative answer: dropped */
    hold(g, d, p, n, allow_internal);
    if (g->held == NULL) { /* not held (no memory): nothing waits for the answer */
        sv_dns_cancel(&g->dns);
        return;
    }
    g->resolving = true; /* the queue's head is the name asked (drain_held relies on it) */
    g->pending++;
}

static void direct_dgram_close(sv_ob_dgram *g)
{
    if (g->closing)
        return;
    g->closing = true;
    g->pending++; /* held while the close is issued, so closed comes once, last */
    if (g->resolving) {
        g->resolving = false;
        sv_dns_cancel(&g->dns);
        g->pending--;
    }
    while (g->held != NULL) {
        struct sv_ob_held *h = g->held;
        g->held = h->next;
        free(h);
    }
    g->held_tail = NULL;
    g->n_held = g->held_bytes = 0;
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
    .fileno = direct_fileno,
    .dgram_open = direct_dgram_open,
    .dgram_send = direct_dgram_send,
    .dgram_close = direct_dgram_close,
};
