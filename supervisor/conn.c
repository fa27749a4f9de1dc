/*
 * The per-connection runtime of a Shadowsocks TCP session: it feeds client bytes to the sans-I/O
 * core, applies what the core produced (authenticate, open, data), dials the routed outbound,
 * relays with backpressure and half-close, and meters every byte.
 *
 * Hot path: reads land in the worker's scratch buffer; the core decrypts client chunks in place
 * and seals each remote read (up to 64 KiB) into the worker's sealed buffer as consecutive chunks;
 * both directions go to the kernel with uv_try_write. Only a write the kernel did not take whole is
 * copied to a per-connection buffer (and reading that side stops until it drains). An idle
 * connection holds no buffer. Connector order: seed 002 (admit, route, refuse, dial, register).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "supervisor/runtime.h"
#include "supervisor/util/log.h"

#define IOV_MAX_BATCH 16

typedef struct sv_conn {
    sv_list link;
    sv_worker *w;
    sv_wlistener *listener;
    sv_handler *handler;
    uv_tcp_t client, remote;
    uv_timer_t timer;
    uv_getaddrinfo_t gai;
    uv_connect_t connect;
    uv_write_t wr_remote, wr_client;
    uv_shutdown_t sd_remote, sd_client;
    int pending;  /**< open handles + in-flight requests that hold the connection */
    sv_ss_tcp ss;
    sv_session_rec *sess;
    sv_flow_rec *flow;
    bool flow_registered;
    sv_plane *plane;
    uint64_t user_id;
    uint8_t *carry;
    uint32_t carry_len;
    uint8_t *to_remote, *to_client;
    size_t to_remote_len, to_client_len;
    struct sockaddr_storage peer;
    bool remote_inited, dialing, connected, client_eof, remote_eof, remote_shut, client_shut;
    bool writing_remote, writing_client, draining, closing;
    bool names_dest; /**< the route named the destination (issue 15, sv_dest_refused) */
    uint64_t last_active; /**< loop time (ms) of the last byte read from either side */
} sv_conn;

static void conn_close(sv_conn *c);
static void client_read_start(sv_conn *c);
static void remote_read_start(sv_conn *c);

static void conn_release(sv_conn *c)
{
    if (--c->pending > 0)
        return;
    sv_tracker *t = c->w->shared->tracker;
    if (c->flow != NULL) {
        if (c->flow_registered)
            sv_tracker_flow_close(t, c->flow);
        else
            free(c->flow);
    }
    sv_tracker_session_close(t, c->sess);
    sv_ss_tcp_deinit(&c->ss);
    sv_handler_unref(c->handler);
    sv_plane_unref(c->plane);
    free(c->carry);
    free(c->to_remote);
    free(c->to_client);
    sv_list_unlink(&c->link);
    sv__wlistener_release(c->listener);
    sv_worker *w = c->w;
    free(c);
    w->n_conns--;
    sv__worker_conn_gone(w);
}

static void on_handle_closed(uv_handle_t *h) { conn_release(h->data); }

static void conn_close(sv_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->client, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    if (c->remote_inited)
        uv_close((uv_handle_t *)&c->remote, on_handle_closed);
    if (c->dialing && !c->remote_inited)
        uv_cancel((uv_req_t *)&c->gai);
}

/* A client that failed authentication gets no answer and no tell-tale close: read and discard
 * for a random time, then close (PROTOCOLS.md §1.4 (b)). No log line per connection. */
static void on_drain_timeout(uv_timer_t *t) { conn_close(t->data); }

static void start_drain(sv_conn *c)
{
    uint32_t r = 0;
    c->draining = true;
    free(c->carry);
    c->carry = NULL;
    c->carry_len = 0;
    RAND_bytes((uint8_t *)&r, sizeof r);
    uv_timer_start(&c->timer, on_drain_timeout, SV_PROBE_DRAIN_MIN_MS + r % SV_PROBE_DRAIN_SPAN_MS, 0);
    client_read_start(c);
}

static void maybe_finish(sv_conn *c)
{
    if (c->client_eof && c->remote_eof && !c->writing_client && !c->writing_remote)
        conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    sv_conn *c = req->data;
    conn_release(c);
    (void)status;
}

static void shutdown_remote(sv_conn *c)
{
    if (c->remote_shut || c->closing || !c->connected)
        return;
    c->remote_shut = true;
    c->sd_remote.data = c;
    if (uv_shutdown(&c->sd_remote, (uv_stream_t *)&c->remote, on_shutdown) == 0)
        c->pending++;
}

static void shutdown_client(sv_conn *c)
{
    if (c->client_shut || c->closing)
        return;
    c->client_shut = true;
    c->sd_client.data = c;
    if (uv_shutdown(&c->sd_client, (uv_stream_t *)&c->client, on_shutdown) == 0)
        c->pending++;
}

/* ---- writes: try the kernel first, keep only what it did not take ---------------------------- */

static size_t iov_total(const uv_buf_t *iov, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += iov[i].len;
    return total;
}

/* Copy the part of iov[] past @p skip bytes into one new buffer. */
static uint8_t *iov_rest(const uv_buf_t *iov, unsigned n, size_t skip, size_t *len)
{
    size_t all = iov_total(iov, n);
    if (skip >= all || all - skip > SIZE_MAX / 2)
        return NULL;
    size_t total = all - skip;
    uint8_t *buf = malloc(total);
    if (buf == NULL)
        return NULL;
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t l = iov[i].len;
        const char *p = iov[i].base;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        memcpy(buf + at, p + skip, l - skip);
        at += l - skip;
        skip = 0;
    }
    *len = total;
    return buf;
}

static void on_remote_written(uv_write_t *req, int status)
{
    sv_conn *c = req->data;
    c->writing_remote = false;
    free(c->to_remote);
    c->to_remote = NULL;
    c->to_remote_len = 0;
    if (status < 0) {
        conn_close(c);
    } else if (!c->closing) {
        if (c->client_eof)
            shutdown_remote(c);
        else
            client_read_start(c);
        maybe_finish(c);
    }
    conn_release(c);
}

static void on_client_written(uv_write_t *req, int status)
{
    sv_conn *c = req->data;
    c->writing_client = false;
    free(c->to_client);
    c->to_client = NULL;
    c->to_client_len = 0;
    if (status < 0) {
        conn_close(c);
    } else if (!c->closing) {
        if (c->remote_eof)
            shutdown_client(c);
        else
            remote_read_start(c);
        maybe_finish(c);
    }
    conn_release(c);
}

/* Hand @p iov to @p stream; queue the rest in *@p held and pause @p source when the kernel
 * does not take it all. @return false when the connection was closed. */
static bool write_side(sv_conn *c, uv_stream_t *stream, uv_stream_t *source, const uv_buf_t *iov,
                       unsigned n, uint8_t **held, size_t *held_len, uv_write_t *req, bool *writing,
                       uv_write_cb cb)
{
    size_t total = iov_total(iov, n);
    int r = uv_try_write(stream, iov, n);
    if (r == UV_EAGAIN)
        r = 0;
    if (r < 0) {
        conn_close(c);
        return false;
    }
    if ((size_t)r == total)
        return true;
    *held = iov_rest(iov, n, (size_t)r, held_len);
    if (*held == NULL) {
        conn_close(c);
        return false;
    }
    uv_buf_t b = uv_buf_init((char *)*held, (unsigned)*held_len);
    req->data = c;
    if (uv_write(req, stream, &b, 1, cb) != 0) {
        conn_close(c);
        return false;
    }
    c->pending++;
    *writing = true;
    uv_read_stop(source);
    return true;
}

static bool write_remote(sv_conn *c, const uv_buf_t *iov, unsigned n)
{
    if (n == 0)
        return true;
    sv_meter_add(&c->flow->bytes.up, iov_total(iov, n));
    return write_side(c, (uv_stream_t *)&c->remote, (uv_stream_t *)&c->client, iov, n, &c->to_remote,
                      &c->to_remote_len, &c->wr_remote, &c->writing_remote, on_remote_written);
}

static bool write_client(sv_conn *c, uint8_t *wire, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)wire, (unsigned)len);
    sv_meter_add(&c->sess->wire.down, len);
    return write_side(c, (uv_stream_t *)&c->client, (uv_stream_t *)&c->remote, &b, 1, &c->to_client,
                      &c->to_client_len, &c->wr_client, &c->writing_client, on_client_written);
}

/* ---- remote side ------------------------------------------------------------------------------ */

static void remote_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_conn *c = h->data;
    buf->base = (char *)c->w->scratch;
    buf->len = SV_SCRATCH;
    (void)suggested;
}

static void on_remote_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    sv_conn *c = s->data;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        if (n != UV_EOF) {
            conn_close(c);
            return;
        }
        c->remote_eof = true;
        uv_read_stop(s);
        if (!c->writing_client)
            shutdown_client(c);
        maybe_finish(c);
        return;
    }
    sv_meter_add(&c->flow->bytes.down, (uint64_t)n);
    c->last_active = uv_now(&c->w->loop);
    uint8_t *wire = c->w->sealed;
    ssize_t len = sv_ss_tcp_seal_to(&c->ss, &c->handler->ring, (const uint8_t *)buf->base,
                                    (size_t)n, wire, sizeof c->w->sealed);
    if (len < 0) {
        conn_close(c);
        return;
    }
    write_client(c, wire, (size_t)len);
}

static void remote_read_start(sv_conn *c)
{
    if (!c->remote_eof && !c->closing)
        uv_read_start((uv_stream_t *)&c->remote, remote_alloc, on_remote_read);
}

static void on_connected(uv_connect_t *req, int status)
{
    sv_conn *c = req->data;
    c->dialing = false;
    if (status < 0 || c->closing) {
        if (status < 0)
            SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: dial %s failed: %s",
                   (unsigned long long)c->sess->info.id, c->flow->info.destination, uv_strerror(status));
        conn_close(c);
        conn_release(c);
        return;
    }
    c->connected = true;
    c->last_active = uv_now(&c->w->loop);
    uv_timer_stop(&c->timer);
    uv_tcp_nodelay(&c->remote, 1);
    sv_tracker_flow_open(c->w->shared->tracker, c->flow);
    c->flow_registered = true;
    remote_read_start(c);
    if (c->to_remote_len > 0) {
        uv_buf_t b = uv_buf_init((char *)c->to_remote, (unsigned)c->to_remote_len);
        sv_meter_add(&c->flow->bytes.up, c->to_remote_len);
        c->wr_remote.data = c;
        if (uv_write(&c->wr_remote, (uv_stream_t *)&c->remote, &b, 1, on_remote_written) != 0) {
            conn_close(c);
        } else {
            c->pending++;
            c->writing_remote = true;
        }
    } else if (c->client_eof) {
        shutdown_remote(c);
    } else {
        client_read_start(c);
    }
    conn_release(c);
}

static void dial(sv_conn *c, const struct sockaddr *sa)
{
    int rc = uv_tcp_init(&c->w->loop, &c->remote);
    if (rc == 0) {
        c->remote.data = c;
        c->remote_inited = true;
        c->pending++;
        c->connect.data = c;
        rc = uv_tcp_connect(&c->connect, &c->remote, sa, on_connected);
    }
    if (rc != 0) {
        c->dialing = false;
        conn_close(c);
        return;
    }
    c->pending++;
}

/* Issue 15: is any address the name resolved to one a user may not reach? Checks every
 * address, not only the one dialled, so a name is judged by all it resolves to. */
static bool any_refused(const sv_conn *c, const struct addrinfo *res)
{
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        sv_ip16 ip;
        if (sv_ip16_from_sockaddr(ai->ai_addr, &ip) &&
            sv_dest_refused(c->handler->allow_private, c->names_dest, &ip, c->w->own_addrs))
            return true;
    }
    return false;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    sv_conn *c = req->data;
    if (status == 0 && res != NULL && !c->closing && !any_refused(c, res)) {
        dial(c, res->ai_addr);
    } else {
        c->dialing = false;
        conn_close(c);
    }
    uv_freeaddrinfo(res);
    conn_release(c);
}

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

/* Connector steps 3-8 (seed 002): route on the current plane, refuse blackhole and (issue 15)
 * internal destinations the route did not name, dial. A name is checked once resolved. */
static bool open_flow(sv_conn *c, const sv_dest *d)
{
    sv_worker *w = c->w;
    c->plane = w->plane;
    sv_plane_ref(c->plane);
    sv_route_query q = {.dest = d, .inbound = c->handler->tag,
                        .source = (const struct sockaddr *)&c->peer, .network = SV_NET_TCP};
    sv_decision dec = sv_routes_decide(c->plane->routes->routes, &q);
    sv_target *t = c->plane->targets[dec.slot];
    if (t->kind != SV_OUTBOUND_DIRECT) {
        conn_close(c); /* refused: no log, no answer */
        return false;
    }
    c->names_dest = dec.names_dest;
    struct sockaddr_storage ss;
    sv_ip16 ip;
    if (d->atyp != SV_ATYP_DOMAIN) {
        dest_sockaddr(d, &ss);
        if (sv_ip16_from_sockaddr((struct sockaddr *)&ss, &ip) &&
            sv_dest_refused(c->handler->allow_private, c->names_dest, &ip, w->own_addrs)) {
            conn_close(c); /* refused like a blocked route */
            return false;
        }
    }
    sv_flow_rec *f = calloc(1, sizeof *f);
    if (f == NULL) {
        conn_close(c);
        return false;
    }
    c->flow = f;
    sv__flow_describe(f, w->index, c, c->sess, c->user_id, d, SV_NET_TCP, t, dec.rule, c->plane->epoch);
    c->dialing = true;
    uv_read_stop((uv_stream_t *)&c->client);
    if (d->atyp == SV_ATYP_DOMAIN) {
        char port[8];
        snprintf(port, sizeof port, "%u", d->port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        c->gai.data = c;
        if (uv_getaddrinfo(&w->loop, &c->gai, on_resolved, d->host, port, &hints) != 0) {
            c->dialing = false;
            conn_close(c);
            return false;
        }
        c->pending++;
        return true;
    }
    dial(c, (struct sockaddr *)&ss);
    return !c->closing;
}

/* Connector steps 1-2: the principal must still be admitted by its listener's current handler,
 * and (issue 3) a session from a new IP must fit the user's current device_limit. */
static bool admit(sv_conn *c)
{
    int idx = c->ss.user;
    c->user_id = c->handler->user_ids[idx];
    sv_handler *now = c->listener->handler;
    if (c->listener->stopped)
        return false;
    int now_idx = now == c->handler
                      ? idx
                      : sv_handler_find(now, c->user_id, c->handler->ring.keys[idx]);
    if (now_idx < 0)
        return false;
    sv_tracker *t = c->w->shared->tracker;
    if (!sv_tracker_device_admit(t, c->user_id, now->device_limits[now_idx], c->sess->info.source))
        return false;
    sv_tracker_session_bind_user(t, c->sess, c->user_id);
    return true;
}

/* ---- client side ------------------------------------------------------------------------------ */

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_conn *c = h->data;
    uint8_t *s = c->w->scratch;
    if (c->carry_len > 0)
        memcpy(s, c->carry, c->carry_len);
    buf->base = (char *)s + c->carry_len;
    buf->len = SV_SCRATCH;
    (void)suggested;
}

/* Keep the unconsumed tail for the next read. The carry buffer (one chunk at most) stays while
 * a transfer straddles reads and is freed once empty, so an idle connection holds none. */
static bool keep_carry(sv_conn *c, const uint8_t *p, size_t n)
{
    if (n == 0) {
        free(c->carry);
        c->carry = NULL;
        c->carry_len = 0;
        return true;
    }
    if (n > SV_SS_SALT_MAX + SV_SS_NEED_MAX)
        return false;
    if (c->carry == NULL) {
        c->carry = malloc(SV_SS_SALT_MAX + SV_SS_NEED_MAX);
        if (c->carry == NULL)
            return false;
    }
    memcpy(c->carry, p, n);
    c->carry_len = (uint32_t)n;
    return true;
}

/* Feed the core until it needs more bytes; relay what it decrypted. */
static void process_client(sv_conn *c, uint8_t *data, size_t len)
{
    uv_buf_t iov[IOV_MAX_BATCH];
    unsigned niov = 0;
    size_t off = 0;
    while (off < len && !c->closing) {
        sv_ss_out out;
        out.authenticated = out.open = false;
        out.data = NULL;
        out.len = 0;
        enum sv_ss_state before = c->ss.state;
        ssize_t r = sv_ss_tcp_feed(&c->ss, &c->handler->ring, c->handler->replay->filter, data + off,
                                   len - off, &out);
        if (r < 0) {
            if (before == SV_SS_RELAY)
                conn_close(c);
            else
                start_drain(c);
            return;
        }
        if (r == 0)
            break;
        off += (size_t)r;
        if (out.authenticated && !admit(c)) {
            conn_close(c);
            return;
        }
        if (out.open && !open_flow(c, &out.dest))
            return;
        if (out.len == 0)
            continue;
        if (!c->connected) {
            uint8_t *grown = realloc(c->to_remote, c->to_remote_len + out.len);
            if (grown == NULL) {
                conn_close(c);
                return;
            }
            memcpy(grown + c->to_remote_len, out.data, out.len);
            c->to_remote = grown;
            c->to_remote_len += out.len;
            continue;
        }
        iov[niov++] = uv_buf_init((char *)out.data, (unsigned)out.len);
        if (niov == IOV_MAX_BATCH) {
            if (!write_remote(c, iov, niov))
                return;
            niov = 0;
        }
    }
    if (c->closing || !write_remote(c, iov, niov))
        return;
    if (!keep_carry(c, data + off, len - off))
        conn_close(c);
}

static void on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    sv_conn *c = s->data;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        if (n != UV_EOF || c->draining || !c->connected) {
            conn_close(c);
            return;
        }
        c->client_eof = true;
        uv_read_stop(s);
        if (!c->writing_remote)
            shutdown_remote(c);
        maybe_finish(c);
        return;
    }
    sv_meter_add(&c->sess->wire.up, (uint64_t)n);
    c->last_active = uv_now(&c->w->loop);
    if (c->draining)
        return;
    process_client(c, c->w->scratch, c->carry_len + (size_t)n);
    (void)buf;
}

static void client_read_start(sv_conn *c)
{
    if (!c->client_eof && !c->closing)
        uv_read_start((uv_stream_t *)&c->client, client_alloc, on_client_read);
}

static void on_handshake_timeout(uv_timer_t *t)
{
    sv_conn *c = t->data;
    if (!c->connected)
        conn_close(c);
}

int sv__conn_open(sv_wlistener *l, int fd)
{
    sv_worker *w = l->w;
    sv_conn *c = calloc(1, sizeof *c);
    sv_session_rec *sess = calloc(1, sizeof *sess);
    if (c == NULL || sess == NULL || sv_ss_tcp_init(&c->ss, l->handler->ring.cipher) != 0) {
        free(c);
        free(sess);
        close(fd);
        return -ENOMEM;
    }
    c->w = w;
    c->listener = l;
    l->n_users_of++;
    w->n_conns++;
    c->handler = l->handler;
    sv_handler_ref(c->handler);
    c->sess = sess;
    uv_tcp_init(&w->loop, &c->client);
    uv_timer_init(&w->loop, &c->timer);
    c->client.data = c->timer.data = c;
    c->pending = 2;
    sv_list_insert_tail(&w->conns, &c->link);
    if (uv_tcp_open(&c->client, fd) != 0) {
        close(fd); /* the handle never owned it */
        sess->info.id = 0;
        sv_tracker_session_open(w->shared->tracker, sess);
        conn_close(c);
        return 0;
    }
    int len = sizeof c->peer;
    uv_tcp_getpeername(&c->client, (struct sockaddr *)&c->peer, &len);
    uv_tcp_nodelay(&c->client, 1);
    sess->worker = w->index;
    sess->owner = c;
    snprintf(sess->info.inbound, sizeof sess->info.inbound, "%s", l->handler->tag);
    sv__addr_format((struct sockaddr *)&c->peer, sess->info.source, sizeof sess->info.source);
    sess->info.started_ms = sv__wall_ms();
    sv_tracker_session_open(w->shared->tracker, sess);
    uv_timer_start(&c->timer, on_handshake_timeout, SV_HANDSHAKE_MS, 0);
    client_read_start(c);
    return 0;
}

void sv__conn_scan_flags(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (atomic_load(&c->sess->close_requested) ||
            (c->flow != NULL && atomic_load(&c->flow->kill)))
            conn_close(c);
    }
}

void sv__conn_revoke(sv_worker *w, sv_wlistener *l)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (c->listener != l || c->closing || c->ss.user < 0)
            continue;
        if (sv_handler_find(l->handler, c->user_id, c->handler->ring.keys[c->ss.user]) < 0)
            conn_close(c);
    }
}

void sv__conn_sweep_idle(sv_worker *w)
{
    uint64_t now = uv_now(&w->loop);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (c->connected && !c->closing && now - c->last_active >= SV_TCP_IDLE_MS)
            conn_close(c);
    }
}

void sv__conn_close_all(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns)
        conn_close(sv_container_of(pos, sv_conn, link));
}
