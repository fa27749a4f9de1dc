/*
 * One TCP connection of a worker (sv_conn): its life (open, close, release, the handshake,
 * drain and relay timers, half-closes), the client read path (transport layers, then the
 * protocol core) and the core's effects (authenticate, open, data, close). The connection's
 * other jobs are its parts, in this translation unit (conn_internal.h says why):
 *   conn_write.c.inc   writes with backpressure, and the users' speed limits
 *   conn_remote.c.inc  the remote side: Vision's direct bits, remote reads, the TCP connector
 *   conn_splice.c.inc  Vision's kernel relay (splice(2))
 *   conn_admit.c.inc   admission pauses: sniffing, the fleet's device limit, a scan off the loop
 *   conn_client.c.inc  the client side: reads, carry, fallback, refusal, UDP in the stream
 *   conn_relay.c.inc   UDP beside the stream (SOCKS5's UDP ASSOCIATE relay socket)
 *   conn_sub.c.inc     sub-flows of a multiplexed connection (Mux.Cool, gRPC streams)
 *   conn_flight.c.inc  REALITY's target flight
 *
 * Hot path: reads land in the worker's scratch buffer; the core decrypts client chunks in place
 * and seals each remote read (up to SV_SCRATCH, 256 KiB) into the worker's sealed buffer as
 * consecutive chunks; both directions go to the kernel with uv_try_write. Only a write the kernel
 * did not take whole is copied to a per-connection buffer (and reading that side stops until it
 * drains). An idle connection holds no buffer. Connector order: seed 002 (admit, route, refuse,
 * dial, register); the remote side is the routed target's outbound stream (outbound/outbound.h).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "supervisor/bounds.h"
#include "supervisor/conn.h"
#include "supervisor/conn_internal.h"
#include "supervisor/connector.h"
#include "supervisor/flow.h"
#include "supervisor/hints.h"
#include "supervisor/plane.h"
#include "supervisor/proto/mux.h"
#include "supervisor/proto/sniff.h"
#include "supervisor/scan.h"
#include "supervisor/udp.h"
#include "supervisor/util/log.h"
#include "supervisor/shared.h"

/* ---- the parts (conn_internal.h) --------------------------------------------------------- */

#include "supervisor/conn_write.c.inc"
#include "supervisor/conn_remote.c.inc"
#include "supervisor/conn_splice.c.inc"
#include "supervisor/conn_admit.c.inc"
#include "supervisor/conn_client.c.inc"
#include "supervisor/conn_relay.c.inc"
#include "supervisor/conn_sub.c.inc"
#include "supervisor/conn_flight.c.inc"

static void on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* Drop one hold on @p c (an open handle or a request in flight, counted in pending); the last
 * frees it: its flow's close is counted and the record goes to the tracker (or is freed), the
 * session closes, every reference goes back, and the worker hears of it (conn_gone). */
static void conn_release(sv_conn *c)
{
    if (--c->pending > 0)
        return;
    sv_tracker *t = c->w->shared->tracker;
    if (c->flow != NULL) {
        sv__flow_closed(c->w->shared, c->flow, c->end_why ? c->end_why - 1u : SV_CLOSE_ERROR);
        if (conn_has(c, SV_CONN_FLOW_REGISTERED))
            sv_tracker_flow_close(t, c->flow);
        else
            free(c->flow);
    }
    sv_tracker_session_close(t, c->sess);
    c->handler->ops->deinit(c->state);
    sv_chain_free(&c->chain);
    sv_principal_unref(c->principal);
    sv_pacer_release(c->pacer);
    sv_handler_unref(c->handler);
    sv_target_unref(c->target);
    free(c->carry);
    free(c->to_remote);
    free(c->remote_more);
    free(c->wr_client);
    free(c->client_more);
    free(c->subs);
    free(c->held);
    sv_list_unlink(&c->link);
    sv__wlistener_release(c->listener);
    sv_worker *w = c->w;
    free(c);
    w->n_conns--;
    atomic_fetch_sub(&w->shared->n_conns, 1);
    w->conn_gone(w);
}

/* ---- admission: connections before authentication ------------------------------- */

/* @p c authenticated or is closing: it leaves w->preauth (its accept order) for w->conns, and
 * stops counting against the worker's pre-authentication share. */
static void preauth_leave(sv_conn *c)
{
    if (!conn_has(c, SV_CONN_PREAUTH))
        return;
    sv_worker *w = c->w;
    conn_clear(c, SV_CONN_PREAUTH);
    sv_list_unlink(&c->link);
    sv_list_insert_tail(&w->conns, &c->link);
    w->n_preauth--;
    atomic_store_explicit(&w->shared->preauth[w->index], w->n_preauth, memory_order_relaxed);
}

bool sv__conn_evict_oldest(sv_worker *w)
{
    if (sv_list_is_empty(&w->preauth))
        return false;
    conn_end(sv_container_of(w->preauth.next, sv_conn, link), SV_CLOSE_LIMIT); /* leaves it */
    return true;
}

unsigned sv__conn_preauth_expire(sv_worker *w, uint64_t before_ms)
{
    unsigned n = 0;
    while (!sv_list_is_empty(&w->preauth)) {
        sv_conn *c = sv_container_of(w->preauth.next, sv_conn, link);
        if (c->sess->info.started_ms >= before_ms)
            break; /* the rest came later */
        conn_end(c, SV_CLOSE_LIMIT);
        n++;
    }
    return n;
}

static void on_handle_closed(uv_handle_t *h) { conn_release(h->data); }

/* A timer the connection allocated (timer, pace_timer) has closed: free it, release its hold. */
static void on_pace_timer_closed(uv_handle_t *h)
{
    sv_conn *c = h->data;
    free(h);
    conn_release(c);
}

/* Begin closing @p c (once): every part ends (kernel relay, pause, target flight, UDP in the
 * stream, sub-flows) and every handle closes; @p c is freed by the last conn_release. */
static void conn_close(sv_conn *c)
{
    if (conn_has(c, SV_CONN_CLOSING))
        return;
    conn_set(c, SV_CONN_CLOSING);
    preauth_leave(c);
    splice_end(c); /* its polls go before the sockets they watch */
    paused_end(c);
    peek_end(c);
    if (c->assoc != NULL) { /* its release comes back as conn_release (on_assoc_released) */
        sv__assoc_close(c->assoc);
        c->assoc = NULL;
    }
    relay_end(c);
    uv_close((uv_handle_t *)&c->client, on_handle_closed);
    if (c->timer != NULL) {
        uv_close((uv_handle_t *)c->timer, on_pace_timer_closed);
        c->timer = NULL;
    }
    if (c->pace_timer != NULL)
        uv_close((uv_handle_t *)c->pace_timer, on_pace_timer_closed);
    if (conn_has(c, SV_CONN_OB_OPENED)) /* its release comes back as conn_release (on_ob_closed) */
        c->ob.ops->close(&c->ob);
    if (c->subs != NULL)
        subs_close(c);
}

/* Close @p c for reason @p why (its flows' close says it, /metrics counts it), unless
 * a reason was given first. */
static void conn_end(sv_conn *c, sv_close_reason why)
{
    if (c->end_why == 0 && !conn_has(c, SV_CONN_CLOSING))
        c->end_why = (uint8_t)(why + 1);
    conn_close(c);
}

/* Arm the connection's timer for @p ms, allocating it at need (it holds the connection until
 * closed). @return false when out of memory: the caller closes the connection. */
static bool conn_timer_start(sv_conn *c, uv_timer_cb cb, uint64_t ms)
{
    if (conn_has(c, SV_CONN_CLOSING))
        return true; /* nothing left to bound (and a new handle would never be closed) */
    if (c->timer == NULL) {
        if ((c->timer = malloc(sizeof *c->timer)) == NULL)
            return false;
        uv_timer_init(&c->w->loop, c->timer);
        c->timer->data = c;
        c->pending++; /* released by on_pace_timer_closed */
    }
    uv_timer_start(c->timer, cb, ms, 0);
    return true;
}

/* The connection relays: no bound runs any more, so give the timer back. */
static void conn_timer_drop(sv_conn *c)
{
    if (c->timer == NULL)
        return;
    uv_close((uv_handle_t *)c->timer, on_pace_timer_closed);
    c->timer = NULL;
}

/* A client that failed authentication gets no answer and no tell-tale close: read and discard
 * for a random time, then close (PROTOCOLS.md §1.4 (b)). No log line per connection. */
static void on_drain_timeout(uv_timer_t *t) { conn_close(t->data); }

/* Drain a client that failed (PROTOCOLS.md §1.4 (b)): read and discard until a random time
 * in [SV_PROBE_DRAIN_MIN_MS, + SV_PROBE_DRAIN_SPAN_MS) passes, then close. */
static void start_drain(sv_conn *c)
{
    uint32_t r = 0;
    conn_set(c, SV_CONN_DRAINING);
    free(c->carry);
    c->carry = NULL;
    c->carry_len = 0;
    RAND_bytes((uint8_t *)&r, sizeof r);
    if (!conn_timer_start(c, on_drain_timeout,
                          SV_PROBE_DRAIN_MIN_MS + r % SV_PROBE_DRAIN_SPAN_MS)) {
        conn_close(c);
        return;
    }
    client_read_start(c);
}

/* Both sides ended and nothing is in flight either way: the connection ends (SV_CLOSE_END). */
static void maybe_finish(sv_conn *c)
{
    if (conn_has(c, SV_CONN_CLIENT_EOF) && conn_has(c, SV_CONN_REMOTE_EOF) &&
        !conn_has(c, SV_CONN_WRITING_CLIENT) && !conn_has(c, SV_CONN_WRITING_REMOTE))
        conn_end(c, SV_CLOSE_END);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    sv_conn *c = req->data;
    free(req);
    conn_release(c);
    (void)status;
}

/* Pass the client's end on: half-close the remote (once, when it is connected). */
static void shutdown_remote(sv_conn *c)
{
    if (conn_has(c, SV_CONN_REMOTE_SHUT) || conn_has(c, SV_CONN_CLOSING) ||
        !conn_has(c, SV_CONN_CONNECTED) || !conn_has(c, SV_CONN_OB_OPENED))
        return;
    conn_set(c, SV_CONN_REMOTE_SHUT);
    c->ob.ops->shutdown(&c->ob);
}

/* Pass the remote's end on: the layers' ends of stream first, then, once no write is in
 * flight, the client's TCP half-close (once). */
static void shutdown_client(sv_conn *c)
{
    if (conn_has(c, SV_CONN_CLIENT_SHUT) || conn_has(c, SV_CONN_CLOSING))
        return;
    if (c->chain.n > 0 && !conn_has(c, SV_CONN_CHAIN_BYE)) {
        /* the layers' ends first (TLS close_notify, RFC 8446 §6.1), then the TCP half-close */
        conn_set(c, SV_CONN_CHAIN_BYE);
        if (sv_chain_shutdown(&c->chain) == 0 && !flush_chain(c))
            return;
    }
    if (conn_has(c, SV_CONN_WRITING_CLIENT))
        return; /* on_client_written comes back here */
    conn_set(c, SV_CONN_CLIENT_SHUT);
    uv_shutdown_t *sd = malloc(sizeof *sd); /* once per connection: none kept while idle */
    if (sd == NULL) {
        conn_close(c);
        return;
    }
    sd->data = c;
    if (uv_shutdown(sd, (uv_stream_t *)&c->client, on_shutdown) == 0)
        c->pending++;
    else
        free(sd);
}

/* SV_FX_AUTHENTICATED: admit the principal (the fleet may make it wait: the effects after
 * @p i are kept), start the sub-flow table of a multiplexed core. @return false when the
 * connection closed or paused. */
static bool fx_authenticated(sv_conn *c, const sv_effects *fx, unsigned i)
{
    const sv_effect *e = &fx->v[i];
    preauth_leave(c); /* no longer evicted to make room */
    if (sv_proto_guide(c->handler->ops) != NULL)
        sv__wl_learn(c->listener, c->handler, (struct sockaddr *)&c->peer, e->principal);
    enum admit_result a = admit(c, e->principal);
    if (a == ADMIT_WAIT) {
        if (!pause_effects(c, fx, i + 1, e->multiplexed))
            conn_close(c);
        return false;
    }
    if (a == ADMIT_NO || (e->multiplexed && !mux_start(c))) {
        conn_close(c);
        return false;
    }
    return true;
}

/* SV_FX_OPEN: a sub-flow, else the connection's one flow (UDP: an association; TCP: held for
 * sniffing). @return false when the connection closed. */
static bool fx_open(sv_conn *c, const sv_effect *e)
{
    if (c->subs != NULL) {
        sub_open(c, e);
        return true;
    }
    if (c->principal == NULL || c->flow != NULL || c->held != NULL || c->assoc != NULL) {
        conn_close(c); /* one flow per connection for now */
        return false;
    }
    if (e->dest.network == SV_NET_UDP && sv_proto_relay(c->handler->ops) != NULL)
        return open_relay(c);
    if (e->dest.network == SV_NET_UDP ? !open_assoc(c) : !hold_open(c, &e->dest)) {
        conn_close(c);
        return false;
    }
    return true;
}

/* SV_FX_DATAGRAM, SV_FX_TO_OUTBOUND and SV_FX_TO_CLIENT: bytes to their flow, the caller's
 * batch (@p iov, @p niov) or the client. @return false when the connection closed or stopped
 * taking client bytes. */
static bool fx_data(sv_conn *c, const sv_effect *e, uv_buf_t *iov, unsigned *niov)
{
    if (e->kind == SV_FX_TO_CLIENT) {
        if (!write_remote(c, iov, *niov) || !write_client(c, e->data, e->len))
            return false;
        *niov = 0;
        return true;
    }
    if (c->subs != NULL) {
        sv_subflow *s = NULL;
        if (e->kind == SV_FX_TO_OUTBOUND)
            sub_write(c, e->stream, e->data, e->len);
        else if ((s = sub_find(c, e->stream, NULL)) != NULL && s->assoc != NULL)
            sv__assoc_send(s->assoc, &e->dest, e->data, e->len);
        return true;
    }
    if (e->kind == SV_FX_DATAGRAM) {
        if (c->assoc == NULL) {
            conn_close(c);
            return false;
        }
        sv__assoc_send(c->assoc, &e->dest, e->data, e->len);
        return true;
    }
    if (c->flow == NULL && c->held == NULL) {
        conn_close(c);
        return false;
    }
    return e->len == 0 || to_outbound(c, iov, niov, e->data, e->len);
}

/* SV_FX_CLOSE, SV_FX_FINISH, SV_FX_SCAN and SV_FX_ERROR: a sub-flow's end, else the
 * connection's; a scan off the loop; a failed client's policy. @return false when the
 * connection closed or paused (true: a refused scan, the core is fed again and fails). */
static bool fx_close(sv_conn *c, const sv_effect *e, uv_buf_t *iov, unsigned *niov)
{
    switch (e->kind) {
    case SV_FX_CLOSE:
        if (c->subs != NULL) {
            sub_client_end(c, e->stream, e->half_close);
            return true;
        }
        break;
    case SV_FX_SCAN:
        if (c->principal == NULL && sv_proto_guide(c->handler->ops) != NULL)
            return !scan_elsewhere(c, e); /* paused: process_client keeps the bytes not fed */
        break;
    case SV_FX_ERROR:
        if (!write_remote(c, iov, *niov))
            return false;
        *niov = 0;
        client_failed(c, e);
        return false;
    default:
        break;
    }
    conn_close(c);
    return false;
}

/* Apply the effects of one feed() call in order. Bytes for the outbound join the caller's batch
 * @p iov (@p niov entries, pointing into the fed buffer), which the caller writes once all of a
 * read was fed. @return false when the connection closed or stopped taking client bytes. */
static bool apply_effects(sv_conn *c, const sv_effects *fx, uv_buf_t *iov, unsigned *niov)
{
    for (unsigned i = 0; i < fx->n && !conn_has(c, SV_CONN_CLOSING); i++) {
        const sv_effect *e = &fx->v[i];
        bool go_on = true;
        if (e->trials > 0) /* keys a trial decryption tried, whatever the effect */
            sv__ss_count(c->w->shared, e->trials);
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            go_on = fx_authenticated(c, fx, i);
            break;
        case SV_FX_OPEN:
            go_on = fx_open(c, e);
            break;
        case SV_FX_DATAGRAM:
        case SV_FX_TO_OUTBOUND:
        case SV_FX_TO_CLIENT:
            go_on = fx_data(c, e, iov, niov);
            break;
        case SV_FX_CLOSE:
        case SV_FX_FINISH:
        case SV_FX_SCAN:
        case SV_FX_ERROR:
            go_on = fx_close(c, e, iov, niov);
            break;
        }
        if (!go_on) {
            /* at least its timer runs (a pause) */
            if (conn_has(c, SV_CONN_SUBS_SNIFFING) && !conn_has(c, SV_CONN_CLOSING))
                subs_sniff(c);
            return false;
        }
    }
    if (c->held != NULL && !conn_has(c, SV_CONN_CLOSING) && !sniff_and_open(c, false))
        return false;
    if (conn_has(c, SV_CONN_SUBS_SNIFFING) && !conn_has(c, SV_CONN_CLOSING) && !subs_sniff(c))
        return false;
    return !conn_has(c, SV_CONN_CLOSING);
}

/* Feed the core until it needs more bytes; apply what it produced. */
static void process_client(sv_conn *c, uint8_t *data, size_t len)
{
    const sv_proto_ops *ops = c->handler->ops;
    size_t off = 0;
    sv_effects fx;
    uv_buf_t iov[IOV_MAX_BATCH];
    unsigned niov = 0;
    if (c->paused != NULL) {
        if (!pause_input(c, data, len))
            conn_close(c);
        return;
    }
    /* a core with more effects than one list holds is called again at once (backlog's more) */
    while ((off < len || sv_proto_more(ops, c->state)) &&
           !conn_has(c, SV_CONN_CLOSING) &&
           !conn_has(c, SV_CONN_DRAINING)) {
        /* a multiplexed core (gRPC) authenticates every new stream: it keeps the clock */
        if (sv_proto_clock(ops) != NULL && (c->principal == NULL || c->subs != NULL))
            sv_proto_clock(ops)->set_time(c->state, (int64_t)(sv__wall_ms() / 1000));
        ssize_t r = ops->feed(c->state, c->handler->creds, data + off, len - off, &fx);
        if (!apply_effects(c, &fx, iov, &niov)) {
            size_t fed = off + (r > 0 ? (size_t)r : 0);
            if (c->paused != NULL && !conn_has(c, SV_CONN_CLOSING) && r >= 0 &&
                !pause_input(c, data + fed, len - fed))
                conn_close(c);
            return;
        }
        if (r < 0) {
            conn_close(c); /* a core error always comes with an SV_FX_ERROR effect */
            return;
        }
        if (!sync_direct(c)) /* before the chain unwraps the client's next record */
            return;
        if (r == 0 && !sv_proto_more(ops, c->state))
            break;
        off += (size_t)r;
    }
    if (conn_has(c, SV_CONN_SUBS_BLOCKED) && !conn_has(c, SV_CONN_CLOSING))
        subs_unblock(c);
    if (conn_has(c, SV_CONN_CLOSING) || conn_has(c, SV_CONN_DRAINING) ||
        !write_remote(c, iov, niov))
        return;
    if (!keep_carry(c, data + off, len - off))
        conn_close(c);
}

/* Client bytes after the transport layers: to the core, or as they are to the fallback. */
static void process_plain(sv_conn *c, uint8_t *data, size_t len)
{
    if (!conn_has(c, SV_CONN_RAW)) {
        process_client(c, data, len);
        return;
    }
    uv_buf_t iov[IOV_MAX_BATCH];
    unsigned niov = 0;
    if (to_outbound(c, iov, &niov, data, len))
        write_remote(c, iov, niov);
}

/* The client ended its direction: half-close the remote once its writes are done; a
 * connection that is draining, not connected, or carries UDP or sub-flows ends instead. */
static void client_eof(sv_conn *c)
{
    if (conn_has(c, SV_CONN_DRAINING) || !conn_has(c, SV_CONN_CONNECTED) || c->assoc != NULL ||
        c->subs != NULL) {
        conn_end(c, SV_CLOSE_END); /* the client ended every sub-flow it carried */
        return;
    }
    conn_set(c, SV_CONN_CLIENT_EOF);
    uv_read_stop((uv_stream_t *)&c->client);
    if (!conn_has(c, SV_CONN_WRITING_REMOTE))
        shutdown_remote(c);
    maybe_finish(c);
}

/* Where the chain's top layer unwraps to: the scratch buffer after the core's carry, as a
 * plain TCP read lands (client_alloc). */
static uint8_t *chain_alloc(void *ctx, size_t *cap)
{
    sv_conn *c = ctx;
    size_t base = 0;
    if (!conn_has(c, SV_CONN_RAW) && !conn_has(c, SV_CONN_DRAINING) && c->carry_len > 0) {
        memcpy(c->w->scratch, c->carry, c->carry_len);
        base = c->carry_len;
    }
    *cap = sizeof c->w->scratch - base;
    return c->w->scratch + base;
}

/* Parse a forwarded client address: "1.2.3.4", "1.2.3.4:port", "[v6]:port" or "v6" (port 0
 * when none). @return 0, or -EINVAL. */
static int forwarded_addr(const char *text, struct sockaddr_storage *out)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *port = NULL, *end = text + strlen(text), *h = text;
    if (*h == '[') { /* "[v6]" or "[v6]:port" */
        const char *rb = strchr(h, ']');
        if (rb == NULL || (rb[1] != '\0' && rb[1] != ':'))
            return -EINVAL;
        port = rb[1] == ':' ? rb + 2 : NULL;
        end = rb;
        h++;
    } else if (strchr(h, ':') != NULL && strchr(h, ':') == strrchr(h, ':')) {
        port = strchr(h, ':') + 1; /* one colon: "v4:port" */
        end = port - 1;
    }
    unsigned long pn = 0;
    if (port != NULL) {
        if (*port == '\0' || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port) ||
            (pn = strtoul(port, NULL, 10)) > 65535)
            return -EINVAL;
    }
    if ((size_t)(end - h) >= sizeof host)
        return -EINVAL;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = '\0';
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (text[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)pn);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)pn);
    } else {
        return -EINVAL;
    }
    return 0;
}

/* nodes[].trusted_forwarders: when the peer is a trusted proxy, the client address its
 * X-Forwarded-For / X-Real-IP named (sv_chain_forwarded) becomes the peer and the session's
 * source (device limit, alive report, audit, API); an untrusted peer's or a malformed header
 * is ignored with a debug line. Runs once, before the first payload reaches the core. */
static void forwarded_apply(sv_conn *c)
{
    conn_set(c, SV_CONN_FORWARD_SEEN);
    const sv_inbound_spec *in = &c->handler->in;
    const char *text = sv_chain_forwarded(&c->chain);
    if (in->n_trusted_forwarders == 0 || text == NULL)
        return;
    char peer[SV_SESSION_SOURCE_MAX];
    sv__addr_format(&c->peer.sa, peer, sizeof peer);
    unsigned long long id = (unsigned long long)c->sess->info.id;
    if (!sv_cidr_list_has(in->trusted_forwarders, in->n_trusted_forwarders, &c->peer.sa)) {
        SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: forwarded address \"%s\" from %s "
               "ignored: not a trusted forwarder", id, text, peer);
        return;
    }
    struct sockaddr_storage a;
    if (forwarded_addr(text, &a) != 0) {
        SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: forwarded address \"%s\" from %s "
               "ignored: not an IP address", id, text, peer);
        return;
    }
    memset(&c->peer, 0, sizeof c->peer);
    memcpy(&c->peer, &a, a.ss_family == AF_INET6 ? sizeof c->peer.in6 : sizeof c->peer.in);
    char source[SV_SESSION_SOURCE_MAX];
    sv__addr_format(&c->peer.sa, source, sizeof source);
    sv_tracker_session_set_source(c->w->shared->tracker, c->sess, source);
    SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: client %s (forwarded by %s)", id, source,
           peer);
}

/* Unwrapped client bytes: to the core (after its carry), to the fallback, or refused. */
static bool chain_deliver(void *ctx, uint8_t *p, size_t n)
{
    sv_conn *c = ctx;
    if (conn_has(c, SV_CONN_CLOSING) || conn_has(c, SV_CONN_DRAINING))
        return !conn_has(c, SV_CONN_CLOSING);
    if (!conn_has(c, SV_CONN_FORWARD_SEEN))
        forwarded_apply(c);
    if (!conn_has(c, SV_CONN_RAW) && c->principal == NULL && c->flow == NULL &&
        (sv_chain_status(&c->chain) & SV_LAYER_REFUSED)) {
        /* a layer refused the peer (e.g. a WebSocket upgrade on another path): the fallback
         * gets its bytes, else a 404, as for a request the protocol refuses */
        sv_effect e = {.kind = SV_FX_ERROR, .policy = SV_PROBE_FALLBACK, .data = p, .len = n};
        client_failed(c, &e);
        return !conn_has(c, SV_CONN_CLOSING);
    }
    size_t base = conn_has(c, SV_CONN_RAW) ? 0 : c->carry_len;
    process_plain(c, p - base, base + n);
    return !conn_has(c, SV_CONN_CLOSING);
}

/* A layer failed: give the kernel what it queued last (a TLS alert, a WebSocket Close), once
 * and without waiting, before the connection closes. */
static void send_last_words(sv_conn *c)
{
    size_t len = 0;
    if (conn_has(c, SV_CONN_WRITING_CLIENT) || conn_has(c, SV_CONN_CLOSING) ||
        sv_chain_pump(&c->chain) < 0)
        return;
    const uint8_t *p = sv_chain_out_peek(&c->chain, &len);
    if (len == 0)
        return;
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
    (void)uv_try_write((uv_stream_t *)&c->client, &b, 1);
}

/*
 * Client bytes under transport layers: push them up the chain (each piece that leaves the top
 * goes to chain_deliver), send the layers' answers, then act on their events. A failed or
 * oversized handshake ends the connection without a log line.
 */
static void client_chain_read(sv_conn *c, const uint8_t *in, size_t n)
{
    if (sv_chain_unwrap(&c->chain, in, n, c->w->stage, chain_alloc, chain_deliver, c) < 0) {
        send_last_words(c);
        conn_close(c);
        return;
    }
    if (conn_has(c, SV_CONN_CLOSING) || !flush_chain(c))
        return;
    unsigned st = sv_chain_status(&c->chain);
    if ((st & SV_LAYER_TARGET) && c->peek == NULL) {
        peek_start(c); /* REALITY: the target answers the hello first (§1.5) */
        return;
    }
    if (!conn_has(c, SV_CONN_CHAIN_UP) && (st & SV_LAYER_UP)) {
        conn_set(c, SV_CONN_CHAIN_UP); /* the protocol's own bound from here */
        if (!conn_has(c, SV_CONN_CONNECTED) && !conn_has(c, SV_CONN_DRAINING) &&
            !conn_has(c, SV_CONN_RAW) && c->held == NULL &&
            !conn_timer_start(c, on_handshake_timeout, SV_HANDSHAKE_MS)) {
            conn_close(c);
            return;
        }
    }
    if ((st & SV_LAYER_EOF) && !conn_has(c, SV_CONN_CLIENT_EOF)) {
        client_eof(c);
        /* the layers below the one that ended still have their ends to read (a TLS
         * close_notify after a WebSocket Close): keep reading until TCP's EOF */
        if (!conn_has(c, SV_CONN_CLOSING) && conn_has(c, SV_CONN_CLIENT_EOF))
            uv_read_start((uv_stream_t *)&c->client, client_alloc, on_client_read);
    }
}

static void on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    sv_conn *c = s->data;
    if (n == 0 || conn_has(c, SV_CONN_CLOSING))
        return;
    if (n < 0) {
        if (n != UV_EOF)
            conn_close(c);
        else
            client_eof(c);
        return;
    }
    sv_meter_add(&c->sess->wire->up, (uint64_t)n);
    c->last_active = uv_now(&c->w->loop);
    if (c->chain.n > 0) {
        client_chain_read(c, (const uint8_t *)buf->base, (size_t)n);
        splice_try(c);
        return;
    }
    if (conn_has(c, SV_CONN_DRAINING))
        return;
    process_plain(c, c->w->scratch, c->carry_len + (size_t)n);
}

/* Read the client again, unless it ended, the connection closes, the client's side is in
 * debt (pace), admission is paused, or a sub-flow holds too much; a kernel relay polls instead. */
static void client_read_start(sv_conn *c)
{
    if (c->splice != NULL) {
        splice_run(c);
        return;
    }
    if (!conn_has(c, SV_CONN_CLIENT_EOF) && !conn_has(c, SV_CONN_CLOSING) &&
        !conn_has(c, SV_CONN_PACED_UP) && c->paused == NULL &&
        !(c->subs != NULL && subs_over_pause(c))) /* the sub-flows' backpressure holds */
        uv_read_start((uv_stream_t *)&c->client, client_alloc, on_client_read);
}

/* The protocol's bound ran out before the remote was connected: close. */
static void on_handshake_timeout(uv_timer_t *t)
{
    sv_conn *c = t->data;
    if (!conn_has(c, SV_CONN_CONNECTED))
        conn_close(c);
}

/* Bytes read before the connection existed (past a PROXY header): served as a first read. */
static void serve_first(sv_conn *c, const uint8_t *first, size_t first_len)
{
    if (first_len == 0 || conn_has(c, SV_CONN_CLOSING))
        return;
    uv_buf_t b;
    client_alloc((uv_handle_t *)&c->client, first_len, &b); /* where a read would land */
    memcpy(b.base, first, first_len);
    on_client_read((uv_stream_t *)&c->client, (ssize_t)first_len, &b);
}

int sv__conn_open(sv_wlistener *l, int fd, const struct sockaddr *given, const uint8_t *first,
                  size_t first_len)
{
    sv_worker *w = l->w;
    const sv_proto_ops *ops = l->handler->ops;
    sv_conn *c = calloc(1, sizeof *c + ops->state_size);
    struct sockaddr_storage peer = {0}; /* before the record: it keeps the source as text */
    socklen_t peer_len = sizeof peer;
    if (given != NULL)
        memcpy(&peer, given, given->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                         : sizeof(struct sockaddr_in));
    else
        getpeername(fd, (struct sockaddr *)&peer, &peer_len);
    char source[sizeof ((sv_session_info *)0)->source];
    sv__addr_format((struct sockaddr *)&peer, source, sizeof source);
    sv_session_rec *sess = sv_session_rec_new(l->handler->tag, source);
    if (c == NULL || sess == NULL || ops->init(c->state, &l->handler->in) != 0) {
        if (c != NULL)
            ops->deinit(c->state);
        free(c);
        free(sess);
        close(fd);
        return -ENOMEM;
    }
    c->w = w;
    c->listener = l;
    l->n_users_of++;
    w->n_conns++;
    atomic_fetch_add(&w->shared->n_conns, 1);
    c->handler = l->handler;
    sv_handler_ref(c->handler);
    c->sess = sess;
    sess->info.started_ms = sv__wall_ms(); /* also its place in the accept order */
    int chain_rc = sv_chain_open(&c->chain, l->handler->layers, l->handler->n_layers);
    uv_tcp_init(&w->loop, &c->client);
    c->client.data = c;
    c->pending = 1;
    conn_set(c, SV_CONN_PREAUTH);
    sv_list_insert_tail(&w->preauth, &c->link);
    w->n_preauth++;
    atomic_store_explicit(&w->shared->preauth[w->index], w->n_preauth, memory_order_relaxed);
    if (chain_rc != 0 || uv_tcp_open(&c->client, fd) != 0) { /* closed once the handles exist */
        close(fd); /* the handle never owned it */
        sess->info.id = 0;
        sv_tracker_session_open(w->shared->tracker, sess);
        conn_close(c);
        return 0;
    }
    memcpy(&c->peer, &peer, sizeof c->peer);
    uv_tcp_nodelay(&c->client, 1);
    if (sv_proto_guide(ops) != NULL) { /* the user last seen from this IP first */
        int hint;
        struct sv_order *order;
        sv__wl_guide(l, c->handler, (struct sockaddr *)&c->peer, &hint, &order);
        sv_proto_guide(ops)->set_guide(c->state, hint, order, SV_SS_GUESSES);
    }
    sess->worker = w->index;
    sess->owner = c;
    sv_tracker_session_open(w->shared->tracker, sess);
    if (!conn_timer_start(c, on_handshake_timeout,
                          c->chain.n > 0 ? SV_TLS_HANDSHAKE_MS : SV_HANDSHAKE_MS)) {
        conn_close(c);
        return 0;
    }
    client_read_start(c);
    serve_first(c, first, first_len);
    return 0;
}

/* Close the connections of @p list (w->conns or w->preauth) asked to close. */
static void scan_flags_in(sv_list *list)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, list) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (atomic_load(&c->sess->close_requested)) /* moves c alone, preauth to conns */
            conn_end(c, SV_CLOSE_SESSION);
        else if (c->flow != NULL && atomic_load(&c->flow->kill))
            conn_end(c, SV_CLOSE_KILL);
        else if (c->subs != NULL)
            subs_scan_kill(c);
    }
}

void sv__conn_scan_flags(sv_worker *w)
{
    scan_flags_in(&w->preauth);
    scan_flags_in(&w->conns);
}

void sv__conn_revoke(sv_worker *w, sv_wlistener *l)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (c->listener != l || conn_has(c, SV_CONN_CLOSING) || c->principal == NULL)
            continue;
        if (sv_handler_find(l->handler, c->handler, c->principal) < 0)
            conn_end(c, SV_CLOSE_REVOKE);
    }
}

/* Close the relays of @p list (w->conns or w->preauth: a fallback relay is never
 * authenticated) that moved no byte since @p now - SV_TCP_IDLE_MS. */
static void sweep_idle_in(sv_list *list, uint64_t now)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, list) {
        sv_conn *c = sv_container_of(pos, sv_conn, link);
        if (conn_has(c, SV_CONN_CONNECTED) && !conn_has(c, SV_CONN_CLOSING) &&
            now - c->last_active >= SV_TCP_IDLE_MS)
            conn_end(c, SV_CLOSE_IDLE);
    }
}

void sv__conn_sweep_idle(sv_worker *w)
{
    uint64_t now = uv_now(&w->loop);
    sweep_idle_in(&w->preauth, now);
    sweep_idle_in(&w->conns, now);
}

void sv__conn_close_all(sv_worker *w)
{
    while (!sv_list_is_empty(&w->preauth)) /* each leaves it for conns */
        conn_end(sv_container_of(w->preauth.next, sv_conn, link), SV_CLOSE_SHUTDOWN);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->conns)
        conn_end(sv_container_of(pos, sv_conn, link), SV_CLOSE_SHUTDOWN);
}

