/*
 * The per-connection runtime of a Shadowsocks TCP session: it feeds client bytes to the sans-I/O
 * core, applies what the core produced (authenticate, open, data), dials the routed outbound,
 * relays with backpressure and half-close, and meters every byte.
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

#include "supervisor/proto/mux.h"
#include "supervisor/proto/sniff.h"
#include "supervisor/runtime.h"
#include "supervisor/util/log.h"

#define IOV_MAX_BATCH 64 /* a read of 2 KiB VMess chunks (v2ray) goes out in one writev */

typedef struct sv_subflow sv_subflow;

/* A client write the kernel did not take whole: the request and the bytes left, one allocation
 * (issue 13: an idle connection holds neither). */
typedef struct client_write {
    uv_write_t req;
    uint8_t data[];
} client_write;

typedef struct sv_conn {
    sv_list link;
    sv_worker *w;
    sv_wlistener *listener;
    sv_handler *handler;
    uv_tcp_t client;
    sv_ob_stream ob; /**< the remote side: the routed target's outbound stream */
    uv_timer_t *timer; /**< the bound on the handshake, sniff or drain while one runs; allocated
                            on demand and dropped once relaying (issue 13: none while idle) */
    client_write *wr_client; /**< the client write in flight (to_client is its data), or NULL */
    int pending;  /**< open handles + in-flight requests that hold the connection */
    uint32_t carry_len;
    sv_principal *principal; /**< who the connection acts for, once authenticated (a reference) */
    sv_session_rec *sess;
    sv_flow_rec *flow;
    sv_target *target; /**< the outbound version flow was opened on (a reference), or NULL */
    uint64_t user_id;
    uint8_t *carry;
    uint8_t *to_remote, *to_client;
    size_t to_remote_len, to_client_len;
    uint8_t *remote_more;  /**< bytes for the remote that came while to_remote was being written
                                (the rest of the read that filled the socket; reading stopped) */
    size_t remote_more_len;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } peer; /**< the client's address (not a sockaddr_storage: 100 bytes less per connection) */
    unsigned n_subs;
    /* the flags together, no padding between them (issue 13: every idle connection holds them) */
    bool flow_registered;
    bool ob_opened; /**< ob was opened: it is closed with the connection (on_ob_closed) */
    bool connected, client_eof, remote_eof, remote_shut, client_shut;
    bool writing_remote, writing_client, draining, closing;
    bool chain_up;       /**< the chain's handshakes completed */
    bool chain_bye;      /**< the chain's ends of stream (close_notify ...) are queued */
    bool raw;            /**< fallback relay: client bytes go to the remote as they are */
    uint8_t direct_counted; /**< SV_DIRECT_IN / OUT already counted in shared->direct */
    uint8_t end_why;        /**< why it ends (sv_close_reason + 1), 0: not said (an error) */
    bool pace_known : 1;  /**< pacer was looked up (at the first payload after admission) */
    bool paced_up : 1, paced_down : 1; /**< in debt: that side stopped reading until pace_timer
                                            fires */
    bool subs_paced : 1;  /**< some sub-flows stopped reading until pace_timer fires */
    bool subs_blocked : 1; /**< some sub-flows stopped reading until the core's queue drains */
    bool subs_sniffing : 1; /**< some sub-flows wait for their first payload to be sniffed */
    bool no_splice : 1;   /**< the kernel relay is not possible for this connection */
    bool preauth : 1;     /**< issue 33: in w->preauth (accepted, not authenticated nor closing) */
    sv_chain chain;      /**< the transport layers over the client socket (none: plain TCP) */
    sv_assoc *assoc;     /**< UDP carried in the stream (Trojan UDP ASSOCIATE), or NULL */
    sv_dest *held;       /**< a TCP open waiting for the first client bytes to sniff (issue 9),
                              or NULL; its payload collects in to_remote meanwhile */
    uint64_t last_active; /**< loop time (ms) of the last byte read from either side */
    uint8_t *client_more; /**< bytes for the client that came while to_client was being
                               written (a multiplexed connection's End frames) */
    size_t client_more_len;
    sv_subflow **subs;    /**< multiplexed (Mux.Cool) only: the open sub-flows (n_subs), or
                               NULL */
    sv_pacer *pacer;      /**< the user's speed limit (a reference), or NULL (anonymous) */
    uv_timer_t *pace_timer; /**< allocated at the first debt, closed with the connection;
                                 NULL before (issue 13: no per-connection cost while unpaced) */
    struct conn_paused *paused; /**< admission waiting for the fleet (issue 12), or NULL */
    struct target_peek *peek; /**< REALITY: the target's first flight being read, or NULL */
    struct conn_splice *splice; /**< Vision direct both ways: the kernel relay, or NULL */
    _Alignas(max_align_t) uint8_t state[]; /**< the protocol core's state (ops->state_size) */
} sv_conn;

static void conn_close(sv_conn *c);
static void conn_end(sv_conn *c, sv_close_reason why);
static void client_read_start(sv_conn *c);
static void remote_read_start(sv_conn *c);
static void remote_read_stop(sv_conn *c);
static bool flush_chain(sv_conn *c);
static void on_handshake_timeout(uv_timer_t *t);
static void on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void subs_read(sv_conn *c, bool on);
static void subs_unblock(sv_conn *c);
static void subs_resume(sv_conn *c);
static void subs_close(sv_conn *c);
static void paused_end(sv_conn *c);
static void process_client(sv_conn *c, uint8_t *data, size_t len);
static void peek_end(sv_conn *c);
static void splice_end(sv_conn *c);
static void splice_run(sv_conn *c);
static void splice_try(sv_conn *c);

static void conn_release(sv_conn *c)
{
    if (--c->pending > 0)
        return;
    sv_tracker *t = c->w->shared->tracker;
    if (c->flow != NULL) {
        sv__flow_closed(c->w->shared, c->flow, c->end_why ? c->end_why - 1u : SV_CLOSE_ERROR);
        if (c->flow_registered)
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

/* ---- admission (issue 33): connections before authentication ------------------------------- */

/* @p c authenticated or is closing: it leaves w->preauth (its accept order) for w->conns, and
 * stops counting against the worker's pre-authentication share. */
static void preauth_leave(sv_conn *c)
{
    if (!c->preauth)
        return;
    sv_worker *w = c->w;
    c->preauth = false;
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

static void conn_close(sv_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    preauth_leave(c);
    splice_end(c); /* its polls go before the sockets they watch */
    paused_end(c);
    peek_end(c);
    if (c->assoc != NULL) { /* its release comes back as conn_release (on_assoc_released) */
        sv__assoc_close(c->assoc);
        c->assoc = NULL;
    }
    uv_close((uv_handle_t *)&c->client, on_handle_closed);
    if (c->timer != NULL) {
        uv_close((uv_handle_t *)c->timer, on_pace_timer_closed);
        c->timer = NULL;
    }
    if (c->pace_timer != NULL)
        uv_close((uv_handle_t *)c->pace_timer, on_pace_timer_closed);
    if (c->ob_opened) /* its release comes back as conn_release (on_ob_closed) */
        c->ob.ops->close(&c->ob);
    if (c->subs != NULL)
        subs_close(c);
}

/* Close @p c for reason @p why (issue 24: its flows' close says it, /metrics counts it), unless
 * a reason was given first. */
static void conn_end(sv_conn *c, sv_close_reason why)
{
    if (c->end_why == 0 && !c->closing)
        c->end_why = (uint8_t)(why + 1);
    conn_close(c);
}

/* Arm the connection's timer for @p ms, allocating it at need (it holds the connection until
 * closed; issue 13). @return false when out of memory: the caller closes the connection. */
static bool conn_timer_start(sv_conn *c, uv_timer_cb cb, uint64_t ms)
{
    if (c->closing)
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

static void start_drain(sv_conn *c)
{
    uint32_t r = 0;
    c->draining = true;
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

static void maybe_finish(sv_conn *c)
{
    if (c->client_eof && c->remote_eof && !c->writing_client && !c->writing_remote)
        conn_end(c, SV_CLOSE_END);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    sv_conn *c = req->data;
    free(req);
    conn_release(c);
    (void)status;
}

static void shutdown_remote(sv_conn *c)
{
    if (c->remote_shut || c->closing || !c->connected || !c->ob_opened)
        return;
    c->remote_shut = true;
    c->ob.ops->shutdown(&c->ob);
}

static void shutdown_client(sv_conn *c)
{
    if (c->client_shut || c->closing)
        return;
    if (c->chain.n > 0 && !c->chain_bye) {
        c->chain_bye = true; /* the layers' ends first (TLS close_notify, RFC 8446 §6.1), then
                                the TCP half-close */
        if (sv_chain_shutdown(&c->chain) == 0 && !flush_chain(c))
            return;
    }
    if (c->writing_client)
        return; /* on_client_written comes back here */
    c->client_shut = true;
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

/* ---- speed limits (issue 12 "Speed limits", seed 003 "限速") ---------------------------------
 * Every payload byte a flow of the connection moved (either direction, any sub-flow) is charged
 * to its user's bucket after the transfer; while the bucket is in debt, the side that read it
 * reads no more (TCP backpressure reaches the client or the destination; nothing is buffered
 * or dropped) and the connection sleeps on pace_timer, at most a second at a time, so a changed
 * limit is felt at the next check. Each side waits on its own, as the seed's per-direction
 * pauses: one side's bulk never starves the other's next read. An anonymous connection has no
 * pacer; an unlimited user's costs one load. */

static void pace_resume(uv_timer_t *t);
static void client_read_stop(sv_conn *c);
static void subs_resume_paced(sv_conn *c);

/* When the user's bucket is in debt: arm pace_timer (if it is not) and @return true. */
static bool pace_arm(sv_conn *c)
{
    uint32_t ms = 0;
    if (c->closing || sv_pace_gate(NULL, c->pacer, uv_hrtime(), &ms) <= 0)
        return false;
    if (c->pace_timer == NULL) {
        if ((c->pace_timer = malloc(sizeof *c->pace_timer)) == NULL) {
            conn_close(c);
            return false;
        }
        uv_timer_init(&c->w->loop, c->pace_timer);
        c->pace_timer->data = c;
        c->pending++; /* released by on_pace_timer_closed */
    }
    if (!uv_is_active((uv_handle_t *)c->pace_timer))
        uv_timer_start(c->pace_timer, pace_resume, ms, 0);
    return true;
}

/* While the user's bucket is in debt: stop reading the side that moved bytes (@p up: the
 * client's) and sleep. */
static void pace_hold(sv_conn *c, bool up)
{
    if (!pace_arm(c))
        return;
    if (up && !c->paced_up) {
        c->paced_up = true;
        client_read_stop(c);
    } else if (!up && !c->paced_down) {
        c->paced_down = true;
        remote_read_stop(c);
    }
}

static void pace_resume(uv_timer_t *t)
{
    sv_conn *c = t->data;
    uint32_t ms = 0;
    if (c->closing)
        return;
    int g = sv_pace_gate(c->flow != NULL ? &c->flow->kill : NULL, c->pacer, uv_hrtime(), &ms);
    if (g < 0) {
        conn_end(c, SV_CLOSE_KILL);
    } else if (g > 0) {
        uv_timer_start(t, pace_resume, ms, 0);
    } else {
        bool up = c->paced_up, down = c->paced_down;
        c->paced_up = c->paced_down = false;
        if (up && !c->writing_remote)
            client_read_start(c);
        if (down && !c->writing_client)
            remote_read_start(c);
        if (c->subs_paced)
            subs_resume_paced(c);
    }
}

/* Charge @p n payload bytes that just moved. @return true when the user is limited (the caller
 * then holds the reader that moved them while in debt). */
static bool pace_account(sv_conn *c, uint64_t n)
{
    if (!c->pace_known && c->principal != NULL) {
        c->pace_known = true;
        c->pacer = sv_pacers_acquire(c->w->shared->pacers, c->user_id, uv_hrtime());
    }
    if (!sv_pacer_limited(c->pacer))
        return false;
    sv_pacer_charge(c->pacer, n, uv_hrtime());
    return true;
}

/* Charge @p n payload bytes read from the client (@p up) or the remote, and hold that side. */
static void pace_charge(sv_conn *c, uint64_t n, bool up)
{
    if (pace_account(c, n))
        pace_hold(c, up);
}

/* ---- writes: try the kernel first, keep only what it did not take ---------------------------- */

static size_t iov_total(const uv_buf_t *iov, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += iov[i].len;
    return total;
}

/* Copy the part of iov[] past @p skip bytes into one new buffer, after @p head bytes left for the
 * caller; *@p len = the bytes copied. */
static uint8_t *iov_rest(const uv_buf_t *iov, unsigned n, size_t skip, size_t head, size_t *len)
{
    size_t all = iov_total(iov, n);
    if (skip >= all || all - skip > SIZE_MAX / 2)
        return NULL;
    size_t total = all - skip;
    uint8_t *buf = malloc(head + total);
    if (buf == NULL)
        return NULL;
    size_t at = head;
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

static void on_remote_written(void *owner, int status)
{
    sv_conn *c = owner;
    c->writing_remote = false;
    free(c->to_remote);
    c->to_remote = c->remote_more;
    c->to_remote_len = c->remote_more_len;
    c->remote_more = NULL;
    c->remote_more_len = 0;
    if (status >= 0 && !c->closing && c->to_remote_len > 0) {
        /* what came while writing goes next, in order; client reading stays stopped */
        uv_buf_t b = uv_buf_init((char *)c->to_remote, (unsigned)c->to_remote_len);
        if (c->ob.ops->write(&c->ob, &b, 1) != 0)
            conn_close(c);
        else
            c->writing_remote = true;
    } else if (status < 0) {
        conn_close(c);
    } else if (!c->closing) {
        if (c->client_eof)
            shutdown_remote(c);
        else
            client_read_start(c);
        maybe_finish(c);
        splice_try(c);
    }
}

static bool write_client(sv_conn *c, uint8_t *wire, size_t len);

static void on_client_written(uv_write_t *req, int status)
{
    sv_conn *c = req->data;
    c->writing_client = false;
    free(c->wr_client);
    c->wr_client = NULL;
    c->to_client = NULL;
    c->to_client_len = 0;
    if (status >= 0 && !c->closing && c->client_more != NULL) {
        uint8_t *more = c->client_more; /* in order, before reads resume */
        size_t more_len = c->client_more_len;
        c->client_more = NULL;
        c->client_more_len = 0;
        bool ok = write_client(c, more, more_len);
        free(more);
        if (!ok || c->writing_client) {
            conn_release(c);
            return;
        }
    }
    if (status < 0) {
        conn_close(c);
    } else if (!c->closing && (c->chain.n == 0 || (flush_chain(c) && !c->writing_client))) {
        if (c->remote_eof)
            shutdown_client(c);
        else
            remote_read_start(c);
        maybe_finish(c);
        splice_try(c);
    }
    conn_release(c);
}

/* Write c->wr_client (its @p len bytes of data, filled by the caller) to the client with
 * uv_write; reading the remote stops until on_client_written. @return false when closed. */
static bool client_write_queued(sv_conn *c, size_t len)
{
    c->to_client = c->wr_client->data;
    c->to_client_len = len;
    uv_buf_t b = uv_buf_init((char *)c->to_client, (unsigned)len);
    c->wr_client->req.data = c;
    if (uv_write(&c->wr_client->req, (uv_stream_t *)&c->client, &b, 1, on_client_written) != 0) {
        conn_close(c);
        return false;
    }
    c->pending++;
    c->writing_client = true;
    remote_read_stop(c);
    return true;
}

/* Hand @p iov to the client socket; queue the rest and stop reading the remote when the kernel
 * does not take it all. @return false when the connection was closed. */
static bool write_side(sv_conn *c, const uv_buf_t *iov, unsigned n)
{
    size_t total = iov_total(iov, n), len = 0;
    int r = uv_try_write((uv_stream_t *)&c->client, iov, n);
    if (r == UV_EAGAIN)
        r = 0;
    if (r < 0) {
        conn_close(c);
        return false;
    }
    if ((size_t)r == total)
        return true;
    c->wr_client = (client_write *)iov_rest(iov, n, (size_t)r, sizeof(client_write), &len);
    if (c->wr_client == NULL) {
        conn_close(c);
        return false;
    }
    return client_write_queued(c, len);
}

static void client_read_stop(sv_conn *c)
{
    if (c->splice == NULL) /* relayed in the kernel: its poll stops reading (splice_watch) */
        uv_read_stop((uv_stream_t *)&c->client);
}

/* The remote side of write_side: the outbound stream takes what it can now, the rest is copied
 * to to_remote and queued (reading the client stops until on_remote_written). */
static bool write_remote_now(sv_conn *c, const uv_buf_t *iov, unsigned n)
{
    size_t total = iov_total(iov, n);
    int r = c->ob.ops->try_write(&c->ob, iov, n);
    if (r < 0) {
        conn_close(c);
        return false;
    }
    if ((size_t)r == total)
        return true;
    c->to_remote = iov_rest(iov, n, (size_t)r, 0, &c->to_remote_len);
    if (c->to_remote == NULL) {
        conn_close(c);
        return false;
    }
    uv_buf_t b = uv_buf_init((char *)c->to_remote, (unsigned)c->to_remote_len);
    if (c->ob.ops->write(&c->ob, &b, 1) != 0) {
        conn_close(c);
        return false;
    }
    c->writing_remote = true;
    client_read_stop(c);
    return true;
}

static bool write_remote(sv_conn *c, const uv_buf_t *iov, unsigned n)
{
    if (n == 0)
        return true;
    size_t total = iov_total(iov, n);
    if (c->flow != NULL)
        sv_meter_add(&c->flow->bytes->up, total);
    pace_charge(c, total, true);
    if (c->writing_remote) { /* behind a write in flight: append, on_remote_written sends it */
        uint8_t *grown = realloc(c->remote_more, c->remote_more_len + total);
        if (grown == NULL) {
            conn_close(c);
            return false;
        }
        for (unsigned i = 0; i < n; i++) {
            memcpy(grown + c->remote_more_len, iov[i].base, iov[i].len);
            c->remote_more_len += iov[i].len;
        }
        c->remote_more = grown;
        return true;
    }
    return write_remote_now(c, iov, n);
}

/*
 * Send what the transport chain has for TCP: pump the layers' output down, the kernel first,
 * the rest copied to to_client and written with uv_write (reading the remote stops until it
 * drains). While such a write is in flight, new output stays queued in the layers;
 * on_client_written sends it. @return false when the connection was closed.
 */
static bool flush_chain(sv_conn *c)
{
    size_t len = 0;
    const uint8_t *p = NULL;
    for (;;) {
        if (c->writing_client || c->closing)
            return !c->closing;
        if (sv_chain_pump(&c->chain) < 0) {
            conn_close(c);
            return false;
        }
        p = sv_chain_out_peek(&c->chain, &len);
        if (len == 0)
            return true;
        sv_meter_add(&c->sess->wire->down, len);
        uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
        int r = uv_try_write((uv_stream_t *)&c->client, &b, 1);
        if (r == UV_EAGAIN)
            r = 0;
        if (r < 0) {
            conn_close(c);
            return false;
        }
        if ((size_t)r < len) {
            p += r;
            len -= (size_t)r;
            sv_chain_out_consume(&c->chain, (size_t)r);
            break;
        }
        sv_chain_out_consume(&c->chain, (size_t)r);
    }
    size_t rest = len;
    c->wr_client = malloc(sizeof *c->wr_client + rest);
    if (c->wr_client == NULL) {
        conn_close(c);
        return false;
    }
    memcpy(c->wr_client->data, p, rest);
    sv_chain_out_consume(&c->chain, rest);
    return client_write_queued(c, rest);
}

/* Append @p len bytes at @p p to the malloc'ed *@p buf of *@p buf_len bytes; the connection
 * closes when memory runs out. @return false when it was closed. */
static bool held_append(sv_conn *c, uint8_t **buf, size_t *buf_len, const uint8_t *p, size_t len)
{
    uint8_t *grown = realloc(*buf, *buf_len + len);
    if (grown == NULL) {
        conn_close(c);
        return false;
    }
    memcpy(grown + *buf_len, p, len);
    *buf = grown;
    *buf_len += len;
    return true;
}

/* Keep @p len bytes for the client behind the write in flight (on_client_written sends them
 * next), at most SV_CLIENT_MORE_MAX in all. @return false when the connection was closed. */
static bool client_more_add(sv_conn *c, const uint8_t *p, size_t len)
{
    if (c->client_more_len + len > SV_CLIENT_MORE_MAX) {
        conn_end(c, SV_CLOSE_LIMIT); /* a client that does not read */
        return false;
    }
    return held_append(c, &c->client_more, &c->client_more_len, p, len);
}

/* Bytes towards the client through the transport chain. A remote read (at most
 * SV_TLS_PLAIN_READ bytes) fits the layers' empty output queues whole; what a full queue does
 * not take while a write is in flight waits behind it (a core's flow-control backlog that the
 * client's window update let go at once, gRPC), up to SV_CLIENT_MORE_MAX. */
static bool write_client_chain(sv_conn *c, const uint8_t *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        if (c->client_more_len > 0) /* in order: behind what already waits */
            return client_more_add(c, p + off, len - off);
        ssize_t a = sv_chain_wrap(&c->chain, p + off, len - off);
        if (a < 0) {
            conn_close(c);
            return false;
        }
        if (a == 0 && c->writing_client)
            return client_more_add(c, p + off, len - off);
        off += (size_t)a;
        if (!flush_chain(c))
            return false;
    }
    return true;
}

static bool write_client(sv_conn *c, uint8_t *wire, size_t len)
{
    if (c->chain.n > 0)
        return write_client_chain(c, wire, len);
    if (c->writing_client) /* behind a write in flight: on_client_written sends it next */
        return client_more_add(c, wire, len);
    uv_buf_t b = uv_buf_init((char *)wire, (unsigned)len);
    sv_meter_add(&c->sess->wire->down, len);
    return write_side(c, &b, 1);
}

/* ---- remote side ------------------------------------------------------------------------------ */

_Static_assert((unsigned)SV_DIRECT_WATCH == (unsigned)SV_LAYER_WATCH &&
                   (unsigned)SV_DIRECT_IN == (unsigned)SV_LAYER_RAW_IN &&
                   (unsigned)SV_DIRECT_OUT == (unsigned)SV_LAYER_RAW_OUT,
               "proto.h's sv_direct bits are layer.h's sv_layer_direct bits");

/* XTLS Vision (PROTOCOLS-2.md §2.6): pass what the core wants now (watch the client's records,
 * raw in, raw out) to the transport chain. The bytes still go through this connection's
 * reads and writes, so every one stays metered. @return false when the connection closed. */
static bool sync_direct(sv_conn *c)
{
    const sv_proto_ops *ops = c->handler->ops;
    if (ops->direct == NULL || c->raw || c->closing)
        return !c->closing;
    unsigned bits = ops->direct(c->state);
    if (sv_chain_direct(&c->chain, bits) < 0) {
        conn_close(c);
        return false;
    }
    /* PROTOCOLS-2.md §2.6: each direction's switch counted once per connection */
    unsigned fresh = bits & (SV_DIRECT_IN | SV_DIRECT_OUT) & ~(unsigned)c->direct_counted;
    if (fresh & SV_DIRECT_IN)
        atomic_fetch_add_explicit(&c->w->shared->direct[0], 1, memory_order_relaxed);
    if (fresh & SV_DIRECT_OUT)
        atomic_fetch_add_explicit(&c->w->shared->direct[1], 1, memory_order_relaxed);
    c->direct_counted |= (uint8_t)fresh;
    return true;
}

/* ---- kernel relay (issue 11: Vision's direct copy by splice(2)) ------------------------------
 * Once Vision is direct both ways, the chain passes bytes as they are and holds none, nothing
 * waits in the connection and the remote is a stream with a socket of its own (direct), the two
 * sockets are relayed in the kernel: splice(2) through one pipe per direction, driven by uv_poll
 * on the sockets (their libuv streams stop reading first and never write again). Each move is
 * metered as a read is: the session's wire bytes (the user's usage), the flow's bytes (listing)
 * and the user's speed limit, whose debt stops that direction's reading until pace_timer fires,
 * as in user space. The pipes exist only while relaying, at the kernel's default size until one
 * fills (bulk), which then grows to SPLICE_PIPE_BULK. A splice the kernel refuses (EINVAL,
 * ENOSYS) before any byte moved sends the connection back to user space for good. */

#define SPLICE_PIPE_BULK (1 << 20) /* a pipe that filled grows to this (from the kernel's 64 KiB):
                                      a third of the CPU per byte in bulk (tests/bench) */
#define SPLICE_CHUNK (1u << 20)    /* asked of one splice; the pipe takes what it holds */
#define SPLICE_ROUNDS 16        /* moves per direction per wake-up, then the loop's turn */

typedef struct conn_splice {
    sv_conn *c;
    uv_poll_t poll[2];   /**< [0] watches the client socket, [1] the remote's */
    int fd[2];           /**< the sockets (owned by their libuv handles) */
    int pipe[2][2];      /**< per direction ([0] up: client to remote, [1] down): read, write */
    size_t held[2];      /**< bytes in that direction's pipe */
    bool eof[2];         /**< that direction's source ended (its destination is half-closed) */
    bool moved;          /**< a byte went either way */
    bool grown[2];       /**< that pipe was asked to grow to SPLICE_PIPE_BULK (once) */
    int watching[2];     /**< the events each poll watches now */
    unsigned open_polls; /**< poll handles not closed yet: the last close frees the struct */
} conn_splice;

static void on_splice_poll_closed(uv_handle_t *h)
{
    conn_splice *sp = h->data;
    sv_conn *c = sp->c;
    if (--sp->open_polls == 0)
        free(sp);
    conn_release(c);
}

/* Close the relay's pipes and give their descriptors back to the worker's share (sv_fds_fit):
 * accepting may resume. */
static void splice_pipes_close(sv_worker *w, conn_splice *sp)
{
    for (unsigned d = 0; d < 2; d++)
        for (unsigned e = 0; e < 2; e++)
            close(sp->pipe[d][e]);
    w->n_spliced--;
    atomic_fetch_sub(&w->shared->n_spliced, 1);
    w->conn_gone(w);
}

/* Leave the kernel relay: the pipes close (what they hold is lost: the connection is closing, or
 * nothing moved), the polls close before the sockets do. */
static void splice_end(sv_conn *c)
{
    conn_splice *sp = c->splice;
    if (sp == NULL)
        return;
    c->splice = NULL;
    splice_pipes_close(c->w, sp);
    unsigned n = sp->open_polls;
    for (unsigned i = 0; i < n; i++)
        uv_close((uv_handle_t *)&sp->poll[i], on_splice_poll_closed);
}

/* @p n bytes entered direction @p d's pipe: metered and charged as a read of that side. */
static void splice_meter(sv_conn *c, unsigned d, size_t n)
{
    sv_meter_add(d == 0 ? &c->sess->wire->up : &c->sess->wire->down, n);
    sv_meter_add(d == 0 ? &c->flow->bytes->up : &c->flow->bytes->down, n);
    atomic_fetch_add_explicit(&c->w->shared->splice_bytes, n, memory_order_relaxed);
    c->last_active = uv_now(&c->w->loop);
    pace_charge(c, n, d == 0);
}

/* Direction @p d's source ended: half-close its destination (the pipe is empty). */
static void splice_eof(sv_conn *c, unsigned d)
{
    conn_splice *sp = c->splice;
    sp->eof[d] = true;
    if (d == 0) {
        c->client_eof = c->remote_shut = true;
    } else {
        c->remote_eof = c->client_shut = true; /* raw out: the outer TLS has no end of its own */
    }
    shutdown(sp->fd[d ^ 1], SHUT_WR);
}

/* Back to user space (the kernel refused the first splice): nothing moved, so nothing is lost. */
static void splice_back(sv_conn *c)
{
    splice_end(c);
    c->no_splice = true;
    client_read_start(c);
    remote_read_start(c);
}

/* Move what direction @p d (0: client to remote, 1: back) can now: the pipe out first, then
 * more in. @return false when the connection closed or left the kernel relay. */
static bool splice_move(sv_conn *c, unsigned d)
{
    conn_splice *sp = c->splice;
    const unsigned flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
    for (unsigned round = 0; round < SPLICE_ROUNDS; round++) {
        ssize_t n;
        if (sp->held[d] > 0) {
            n = splice(sp->pipe[d][0], NULL, sp->fd[d ^ 1], NULL, sp->held[d], flags);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                return true; /* splice_watch waits until the destination takes more */
            if (n <= 0) {
                conn_close(c);
                return false;
            }
            sp->held[d] -= (size_t)n;
            continue;
        }
        if (sp->eof[d] || (d == 0 ? c->paced_up : c->paced_down))
            return true;
        n = splice(sp->fd[d], NULL, sp->pipe[d][1], NULL, SPLICE_CHUNK, flags);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n < 0) {
            if ((errno == EINVAL || errno == ENOSYS) && !sp->moved)
                splice_back(c);
            else
                conn_close(c);
            return false;
        }
        if (n == 0) {
            splice_eof(c, d);
            return true;
        }
        sp->moved = true;
        sp->held[d] = (size_t)n;
        if (!sp->grown[d] && n >= 65536) { /* bulk: a larger pipe, fewer moves per byte; refused
                                              past fs.pipe-user-pages-soft (the pipe stays) */
            sp->grown[d] = true;
            (void)fcntl(sp->pipe[d][1], F_SETPIPE_SZ, SPLICE_PIPE_BULK);
        }
        splice_meter(c, d, (size_t)n);
        if (c->closing)
            return false;
    }
    return true;
}

static void on_splice_poll(uv_poll_t *h, int status, int events);

/* Watch what the relay waits for: a destination that took part of a pipe, else the source
 * (not at its end, not in debt to the speed limit). @return false when the connection closed. */
static bool splice_watch(sv_conn *c)
{
    conn_splice *sp = c->splice;
    int want[2] = {0, 0};
    for (unsigned d = 0; d < 2; d++) {
        if (sp->held[d] > 0)
            want[d ^ 1] |= UV_WRITABLE;
        else if (!sp->eof[d] && !(d == 0 ? c->paced_up : c->paced_down))
            want[d] |= UV_READABLE;
    }
    for (unsigned i = 0; i < 2; i++) {
        if (want[i] == sp->watching[i])
            continue;
        int rc = want[i] != 0 ? uv_poll_start(&sp->poll[i], want[i], on_splice_poll)
                              : uv_poll_stop(&sp->poll[i]);
        if (rc != 0) {
            conn_close(c);
            return false;
        }
        sp->watching[i] = want[i];
    }
    return true;
}

/* Move both directions as far as they go now, then wait for the sockets; the connection ends
 * once both directions ended and their pipes are empty. */
static void splice_run(sv_conn *c)
{
    if (c->splice == NULL || c->closing)
        return;
    if (!splice_move(c, 0) || !splice_move(c, 1))
        return;
    conn_splice *sp = c->splice;
    if (sp->eof[0] && sp->eof[1] && sp->held[0] == 0 && sp->held[1] == 0)
        conn_close(c);
    else
        splice_watch(c);
}

static void on_splice_poll(uv_poll_t *h, int status, int events)
{
    conn_splice *sp = h->data;
    sv_conn *c = sp->c;
    (void)events;
    if (c->splice != sp || c->closing)
        return;
    if (status < 0)
        conn_close(c);
    else
        splice_run(c);
}

/* Whether the connection can be relayed in the kernel now: Vision direct both ways and nothing
 * that is not the sockets' own bytes (a layer's, the core's carry, a write in flight, a
 * sub-flow, an end already seen) in the way. */
static bool splice_ready(sv_conn *c)
{
    const unsigned both = SV_DIRECT_IN | SV_DIRECT_OUT;
    return c->handler->ops->direct(c->state) == both && c->connected && c->ob_opened &&
           c->flow != NULL && c->subs == NULL && c->assoc == NULL && c->held == NULL && !c->raw &&
           !c->draining && c->paused == NULL && c->peek == NULL && !c->writing_client &&
           !c->writing_remote && c->to_remote_len == 0 && c->remote_more_len == 0 &&
           c->client_more_len == 0 && c->carry_len == 0 && !c->client_eof && !c->remote_eof &&
           !c->client_shut && !c->remote_shut &&
           (sv_chain_status(&c->chain) & SV_LAYER_PASS) != 0;
}

/* No pipe for @p c: its worker's descriptor share is full or pipe2 failed. It stays in user space
 * for good (counted once), so a busy worker does not try again on every read. */
static void splice_no_pipe(sv_conn *c)
{
    c->no_splice = true;
    atomic_fetch_add_explicit(&c->w->shared->splice_no_pipe, 1, memory_order_relaxed);
}

/* Called after each read and write of a connection that went direct both ways: switch to the
 * kernel relay when it is ready and possible; stay in user space otherwise (a remote without a
 * socket of its own; no pipe: the worker's connections and pipes would not fit its share of the
 * descriptor limit with two more pipes, sv_fds_fit, or pipe2 failed). */
static void splice_try(sv_conn *c)
{
    if (c->direct_counted != (SV_DIRECT_IN | SV_DIRECT_OUT) || c->splice != NULL ||
        c->no_splice || c->closing || !splice_ready(c))
        return;
    uv_os_fd_t cfd = -1;
    int rfd = c->ob.ops->fileno != NULL ? c->ob.ops->fileno(&c->ob) : -1;
    if (rfd < 0 || uv_fileno((uv_handle_t *)&c->client, &cfd) != 0) {
        c->no_splice = true;
        return;
    }
    sv_worker *w = c->w;
    if (!sv_fds_fit(atomic_load(&w->shared->n_conns),
                    (uint64_t)atomic_load(&w->shared->n_spliced) + 1, w->shared->fd_cap)) {
        splice_no_pipe(c);
        return;
    }
    conn_splice *sp = calloc(1, sizeof *sp);
    if (sp == NULL)
        return; /* user space goes on */
    sp->c = c;
    sp->fd[0] = cfd;
    sp->fd[1] = rfd;
    if (pipe2(sp->pipe[0], O_NONBLOCK | O_CLOEXEC) != 0) {
        free(sp);
        splice_no_pipe(c);
        return;
    }
    if (pipe2(sp->pipe[1], O_NONBLOCK | O_CLOEXEC) != 0) {
        close(sp->pipe[0][0]);
        close(sp->pipe[0][1]);
        free(sp);
        splice_no_pipe(c);
        return;
    }
    w->n_spliced++;
    atomic_fetch_add(&w->shared->n_spliced, 1);
    client_read_stop(c); /* before the polls take the sockets over */
    remote_read_stop(c);
    c->splice = sp;
    for (unsigned i = 0; i < 2; i++) {
        if (uv_poll_init(&c->w->loop, &sp->poll[i], sp->fd[i]) != 0)
            break;
        sp->poll[i].data = sp;
        sp->open_polls++;
        c->pending++; /* released by on_splice_poll_closed */
    }
    if (sp->open_polls < 2) {
        if (sp->open_polls == 0) {
            c->splice = NULL;
            splice_pipes_close(w, sp);
            free(sp);
            c->no_splice = true;
            client_read_start(c);
            remote_read_start(c);
        } else {
            splice_back(c);
        }
        return;
    }
    atomic_fetch_add_explicit(&c->w->shared->splice_conns, 1, memory_order_relaxed);
    splice_run(c);
}

static void remote_alloc(void *owner, uv_buf_t *buf)
{
    sv_conn *c = owner;
    buf->base = (char *)c->w->scratch;
    /* under layers, one read must fit their output queues whole (write_client_chain) */
    buf->len = c->chain.n > 0 ? SV_TLS_PLAIN_READ : SV_SCRATCH;
}

/* The core's end-of-stream bytes for @p stream (proto.h frame_end), built in the worker's
 * end_frame: sealed may hold the client's read under layers, whose unread part a stream refused
 * inside that read must not overwrite. @return their length (at *out) or a negative errno. */
static ssize_t end_frame(sv_conn *c, uint32_t stream, bool abort, uint8_t **out)
{
    const sv_proto_ops *ops = c->handler->ops;
    uint8_t *buf = c->w->end_frame;
    size_t cap = sizeof c->w->end_frame;
    if (ops->frame_max(0) > cap) { /* not so for any core today */
        buf = c->w->sealed;
        cap = sizeof c->w->sealed;
    }
    *out = buf;
    return ops->frame_end(c->state, c->handler->creds, stream, abort, buf, cap);
}

/* The outbound closed: the core's end-of-stream bytes, if it has any (proto.h frame_end).
 * @return false when the connection was closed. */
static bool end_downstream(sv_conn *c)
{
    if (c->handler->ops->frame_end == NULL)
        return true;
    uint8_t *out;
    ssize_t len = end_frame(c, 0, false, &out);
    if (len < 0) {
        conn_close(c);
        return false;
    }
    return len == 0 || write_client(c, out, (size_t)len);
}

static void on_remote_read(void *owner, ssize_t n, const uv_buf_t *buf)
{
    sv_conn *c = owner;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        if (n != UV_EOF) {
            conn_close(c);
            return;
        }
        c->remote_eof = true;
        remote_read_stop(c);
        if (!c->raw && !end_downstream(c))
            return;
        if (!c->writing_client)
            shutdown_client(c);
        maybe_finish(c);
        return;
    }
    if (c->flow != NULL)
        sv_meter_add(&c->flow->bytes->down, (uint64_t)n);
    pace_charge(c, (uint64_t)n, false);
    c->last_active = uv_now(&c->w->loop);
    if (c->raw) {
        write_client(c, (uint8_t *)buf->base, (size_t)n);
        return;
    }
    uint8_t *wire = c->w->sealed;
    ssize_t len = c->handler->ops->frame(c->state, c->handler->creds, 0, (const uint8_t *)buf->base,
                                         (size_t)n, wire, sizeof c->w->sealed);
    if (len < 0) {
        conn_close(c);
        return;
    }
    if (write_client(c, wire, (size_t)len) && sync_direct(c)) /* after the frame that says so */
        splice_try(c);
}

static void remote_read_start(sv_conn *c)
{
    if (c->paced_down)
        return; /* pace_resume starts it */
    if (c->splice != NULL) {
        splice_run(c);
        return;
    }
    if (c->subs != NULL) {
        subs_read(c, true);
        return;
    }
    if (c->ob_opened && c->connected && !c->remote_eof && !c->closing)
        c->ob.ops->read(&c->ob, true);
}

static void remote_read_stop(sv_conn *c)
{
    if (c->splice != NULL)
        return; /* its poll stops reading (splice_watch) */
    if (c->subs != NULL) {
        subs_read(c, false);
        return;
    }
    if (c->ob_opened && c->connected)
        c->ob.ops->read(&c->ob, false);
}

static void on_connected(void *owner, int status)
{
    sv_conn *c = owner;
    if (status < 0 || c->closing) {
        if (status < 0 && c->flow != NULL)
            SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: dial %s failed: %s",
                   (unsigned long long)c->sess->info.id, c->flow->info.destination, uv_strerror(status));
        conn_close(c);
        return;
    }
    c->connected = true;
    c->last_active = uv_now(&c->w->loop);
    conn_timer_drop(c);
    if (c->flow != NULL) {
        c->flow_registered = true;
        if (!sv__flow_opened(c->w->shared->tracker, c->flow, c->target)) {
            conn_end(c, SV_CLOSE_KILL); /* its version was drained while it dialled */
            return;
        }
    }
    remote_read_start(c);
    if (c->to_remote_len > 0) {
        uv_buf_t b = uv_buf_init((char *)c->to_remote, (unsigned)c->to_remote_len);
        if (c->flow != NULL)
            sv_meter_add(&c->flow->bytes->up, c->to_remote_len);
        pace_charge(c, c->to_remote_len, true);
        if (c->ob.ops->write(&c->ob, &b, 1) != 0)
            conn_close(c);
        else
            c->writing_remote = true;
    } else if (c->client_eof) {
        shutdown_remote(c);
    } else {
        client_read_start(c);
    }
}

static void on_ob_closed(void *owner) { conn_release(owner); }

static const sv_ob_stream_events ob_events = {on_connected, remote_alloc, on_remote_read,
                                              on_remote_written, on_ob_closed};

/* Open the remote side through @p ops to @p d, under socket policy @p sock (issue 13; NULL =
 * none; owned by c->target), its name resolved on @p res (issue 13: a dns route's
 * resolver, else the worker's); @p allow_internal lets a name that resolves to an internal
 * address be dialled (issue 15). Reading the client stops until it is there.
 * @return false when the connection is closing (refused or failed now). */
static bool open_stream(sv_conn *c, const sv_outbound_ops *ops, const sv_socket_policy *sock,
                        sv_resolver *res, const sv_dest *d, bool allow_internal)
{
    c->ob.ops = ops;
    c->ob.ev = &ob_events;
    c->ob.owner = c;
    c->ob.env = (sv_ob_env){&c->w->loop, &c->w->own_addrs, res, sock};
    c->ob.allow_internal = allow_internal;
    c->ob_opened = true;
    c->pending++; /* released by on_ob_closed */
    uv_read_stop((uv_stream_t *)&c->client);
    if (ops->open(&c->ob, d) != 0) {
        conn_close(c); /* refused (blackhole) or failed: no log, no answer */
        return false;
    }
    return true;
}

/* The socket address of an IP destination (the internal-address check). */
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

/* Connector steps 3-4 for a TCP flow or sub-flow of @p c: route @p d (with the sniffed name as
 * an extra domain candidate, or NULL) on the worker's current plane (seed 000: every new flow
 * reads it) into @p dec. @return the target (held by that plane: take a reference before the
 * loop turns), or NULL when the destination is an internal IP the route did not name
 * (issue 15). */
static sv_target *route_stream(sv_conn *c, const sv_dest *d, const char *sniffed, sv_decision *dec)
{
    const sv_plane *plane = c->w->plane;
    sv_route_query q = {.dest = d, .sniffed = sniffed, .inbound = c->handler->tag,
                        .source = (const struct sockaddr *)&c->peer, .network = SV_NET_TCP};
    *dec = sv_routes_decide(plane->routes->routes, &q);
    if (c->principal != NULL) /* issue 12: an audit rule's hit is recorded */
        sv__audit_hit(c->w->shared, plane->routes->routes, dec->rule, c->handler->tag,
                      c->user_id);
    struct sockaddr_storage ss;
    sv_ip16 ip;
    if (d->atyp != SV_ATYP_DOMAIN) {
        dest_sockaddr(d, &ss);
        if (sv_ip16_from_sockaddr((struct sockaddr *)&ss, &ip) &&
            sv_dest_refused(c->handler->allow_private, dec->names_dest, &ip, c->w->own_addrs))
            return NULL;
    }
    return plane->targets[dec->slot];
}

/* Connector steps 3-8 (seed 002): route on the current plane, refuse (issue 15) an internal IP
 * the route did not name, open through the target's outbound (a blackhole refuses there; a
 * name is checked once resolved). The flow is registered once the stream is connected
 * (sv__flow_opened, which fails it when its version was drained meanwhile). */
static bool open_flow(sv_conn *c, const sv_dest *d, const char *sniffed)
{
    sv_worker *w = c->w;
    sv_decision dec;
    sv_target *t = route_stream(c, d, sniffed, &dec);
    if (t == NULL) {
        conn_close(c); /* refused like a blocked route */
        return false;
    }
    c->target = t;
    sv_target_ref(t);
    if (!open_stream(c, t->ops, &t->sock, sv__route_resolver(w, dec.dns_server), d,
                     c->handler->allow_private || dec.names_dest))
        return false;
    c->flow = sv__flow_new(w->index, c, c->sess, c->user_id, d, sniffed, SV_NET_TCP, t, dec.rule,
                           w->plane->epoch);
    if (c->flow == NULL) {
        conn_close(c);
        return false;
    }
    return true;
}

/* ---- sniffing (issue 9, Xray's routeOnly) ------------------------------------------------------
 * A TCP open is held until the client's first payload names a host (TLS SNI, HTTP Host), proves
 * not to, passes SV_SNIFF_MAX bytes, or SV_SNIFF_MS pass (servers-speak-first protocols); the
 * flow is then routed with that name as an extra domain candidate and dials the requested
 * destination, sending the held bytes first. */

static void on_sniff_timeout(uv_timer_t *t);

/* SV_FX_OPEN for TCP: hold it for sniffing; the connection's timer bounds the wait. */
static bool hold_open(sv_conn *c, const sv_dest *d)
{
    c->held = malloc(sizeof *c->held);
    if (c->held == NULL)
        return false;
    *c->held = *d;
    return conn_timer_start(c, on_sniff_timeout, SV_SNIFF_MS); /* held is freed with c */
}

/* Sniff what the held open collected; open the flow once the answer is final or @p now.
 * @return false when the connection is closing. */
static bool sniff_and_open(sv_conn *c, bool now)
{
    char name[SV_SNIFF_NAME_CAP];
    sv_sniff_result r = c->to_remote_len == 0 ? SV_SNIFF_NEED_MORE
                                              : sv_sniff(c->to_remote, c->to_remote_len, name);
    if (!now && r == SV_SNIFF_NEED_MORE && c->to_remote_len < SV_SNIFF_MAX)
        return true;
    sv_dest *d = c->held;
    c->held = NULL;
    /* the protocol's bound again, now for the dial */
    bool ok = conn_timer_start(c, on_handshake_timeout, SV_HANDSHAKE_MS) &&
              open_flow(c, d, r == SV_SNIFF_FOUND ? name : NULL);
    free(d);
    if (!ok)
        conn_close(c);
    return ok;
}

static void on_sniff_timeout(uv_timer_t *t)
{
    sv_conn *c = t->data;
    if (c->held != NULL && !c->closing)
        sniff_and_open(c, true);
}

/* Dial the inbound's fallback: an operator's target, so neither routed nor refused as internal. */
static void dial_fallback(sv_conn *c)
{
    open_stream(c, &sv_ob_direct, NULL, c->w->resolver, &c->handler->fallback, true);
}

/* ---- admission that waits for the fleet (issue 12: the device limit on Redis, fleet.h) --------
 * A session from a new IP of a limited user, on a node with Redis up, is admitted by Redis. The
 * connection pauses meanwhile: the effects after SV_FX_AUTHENTICATED and the client bytes not yet
 * fed are kept and the client is not read, until the answer (at the latest SV_FLEET_UNKNOWN after
 * redis.timeout_ms: then the node's own count and the panel's alivelist decide) resumes or ends
 * it. Nothing is dialled before the answer. */

typedef struct conn_paused {
    sv_fleet_req *req;  /* the question, NULL once answered */
    sv_scan_job *scan;  /* or a scan off the loop (issue 13), NULL once answered */
    bool multiplexed;   /* the AUTHENTICATED effect's */
    sv_effects fx;      /* the effects after it; their data copied into data */
    uint8_t *data;
    uint8_t *in;        /* client bytes not fed yet (the carry included) */
    size_t in_len;
} conn_paused;

/* Most client bytes kept while paused: what one read brings up the transport chain, twice. */
#define PAUSED_IN_MAX (2 * (SV_SCRATCH + SV_CARRY_MAX))

enum admit_result { ADMIT_NO, ADMIT_YES, ADMIT_WAIT };

static void on_fleet_answer(void *ctx, sv_fleet_answer answer);

static void paused_free(conn_paused *pz)
{
    free(pz->data);
    free(pz->in);
    free(pz);
}

/* The connection ends while paused: the question is withdrawn. */
static void paused_end(sv_conn *c)
{
    conn_paused *pz = c->paused;
    if (pz == NULL)
        return;
    c->paused = NULL;
    if (pz->req != NULL)
        sv_fleet_cancel(pz->req);
    if (pz->scan != NULL)
        sv__scan_cancel(pz->scan);
    paused_free(pz);
}

/* ---- a scan off the loop (issue 13 "junk", runtime.h) -----------------------------------------
 * SV_FX_SCAN: the core's first guesses missed. The connection pauses as for the fleet (the
 * client is not read, the bytes not fed are kept) while the scan runs off the loop; its answer
 * goes to the core, which is fed the kept bytes again. A scan refused over the budget is the
 * answer "no user": the core fails the client with its own policy (Shadowsocks: drain). */

static void on_scan_answer(void *ctx, int user, uint8_t *in, size_t n)
{
    sv_conn *c = ctx;
    conn_paused *pz = c->paused;
    (void)in, (void)n;
    pz->scan = NULL;
    c->paused = NULL;
    c->handler->ops->scan_result(c->state, user);
    client_read_start(c);
    static uint8_t none[1];
    process_client(c, pz->in != NULL ? pz->in : none, pz->in_len);
    paused_free(pz);
}

/* Start the scan SV_FX_SCAN @p e asks for. @return true when the connection waits for it;
 * false when it goes on at once (the scan was refused: the core has the answer -1). */
static bool scan_elsewhere(sv_conn *c, const sv_effect *e)
{
    const sv_proto_ops *ops = c->handler->ops;
    c->paused = calloc(1, sizeof *c->paused);
    if (c->paused != NULL) {
        c->paused->scan = sv__scan_start(c->w, c->handler, ops->scan, e->data, e->len,
                                         on_scan_answer, c);
        if (c->paused->scan != NULL) {
            uv_read_stop((uv_stream_t *)&c->client);
            return true;
        }
        paused_free(c->paused);
        c->paused = NULL;
    }
    ops->scan_result(c->state, -1);
    return false;
}

/* Ask the fleet about the session's new IP. @return ADMIT_WAIT, or the local decision when
 * the question could not be sent. */
static enum admit_result ask_fleet(sv_conn *c, uint32_t limit)
{
    char ip[64];
    c->paused = calloc(1, sizeof *c->paused);
    if (c->paused != NULL) {
        sv_source_ip(c->sess->info.source, ip);
        c->paused->req = sv_fleet_ask(c->w->fleet, c->user_id, limit, ip, on_fleet_answer, c);
        if (c->paused->req != NULL)
            return ADMIT_WAIT;
        paused_end(c);
    }
    return sv_tracker_session_admit(c->w->shared->tracker, c->sess, c->user_id, limit, false) ==
                   SV_DEVICE_ADMITTED ? ADMIT_YES : ADMIT_NO;
}

/* Keep the effects of @p fx from @p from on (their data copied) for the answer. */
static bool pause_effects(sv_conn *c, const sv_effects *fx, unsigned from, bool multiplexed)
{
    conn_paused *pz = c->paused;
    size_t total = 0, off = 0;
    for (unsigned i = from; i < fx->n; i++)
        total += fx->v[i].data != NULL ? fx->v[i].len : 0;
    pz->data = malloc(total > 0 ? total : 1);
    if (pz->data == NULL)
        return false;
    pz->multiplexed = multiplexed;
    for (unsigned i = from; i < fx->n; i++) {
        sv_effect *e = &pz->fx.v[pz->fx.n++];
        *e = fx->v[i];
        if (e->data != NULL && e->len > 0) {
            memcpy(pz->data + off, e->data, e->len);
            e->data = pz->data + off;
            off += e->len;
        }
    }
    uv_read_stop((uv_stream_t *)&c->client);
    return true;
}

/* Client bytes that came while paused (the rest of the read, what the chain still unwraps). */
static bool pause_input(sv_conn *c, const uint8_t *p, size_t n)
{
    conn_paused *pz = c->paused;
    free(c->carry); /* its bytes are at the start of the first piece */
    c->carry = NULL;
    c->carry_len = 0;
    if (n == 0)
        return true;
    if (pz->in_len + n > PAUSED_IN_MAX)
        return false;
    uint8_t *grown = realloc(pz->in, pz->in_len + n);
    if (grown == NULL)
        return false;
    memcpy(grown + pz->in_len, p, n);
    pz->in = grown;
    pz->in_len += n;
    return true;
}

/* Connector steps 1-2: the principal must still be admitted by its listener's current handler,
 * and (issues 3, 12) a session from a new IP must fit the user's current device_limit: on this
 * node, or in the fleet when Redis is configured and up (ADMIT_WAIT: c->paused waits for it). */
static enum admit_result admit(sv_conn *c, int idx)
{
    if (idx < 0 || (size_t)idx >= c->handler->n_users || c->principal != NULL)
        return ADMIT_NO;
    sv_principal *p = c->handler->principals[idx];
    sv_principal_ref(p);
    c->principal = p;
    c->user_id = p->id;
    sv_handler *now = c->listener->handler;
    if (c->listener->stopped)
        return ADMIT_NO;
    if (now != c->handler && sv_handler_find(now, c->handler, p) < 0)
        return ADMIT_NO;
    uint32_t limit = sv_principal_device_limit(p);
    switch (sv_tracker_session_admit(c->w->shared->tracker, c->sess, c->user_id, limit,
                                     sv_fleet_usable(c->w->fleet))) {
    case SV_DEVICE_ADMITTED:
        return ADMIT_YES;
    case SV_DEVICE_ASK_FLEET:
        return ask_fleet(c, limit);
    default:
        return ADMIT_NO;
    }
}

/* ---- client side ------------------------------------------------------------------------------ */

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_conn *c = h->data;
    if (c->chain.n > 0) { /* wrapped bytes; the unwrapped go to scratch (chain_alloc) */
        buf->base = (char *)c->w->sealed;
        buf->len = SV_LAYERED_READ;
        return;
    }
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
    if (n > c->handler->ops->carry_max)
        return false;
    if (c->carry == NULL) {
        c->carry = malloc(c->handler->ops->carry_max);
        if (c->carry == NULL)
            return false;
    }
    memcpy(c->carry, p, n);
    c->carry_len = (uint32_t)n;
    return true;
}

/* Queue @p len bytes for the outbound: batched in @p iov once connected (flushed when full),
 * else appended to the bytes held until the dial completes. @return false when closed. */
static bool to_outbound(sv_conn *c, uv_buf_t *iov, unsigned *niov, uint8_t *data, size_t len)
{
    if (!c->connected)
        return held_append(c, &c->to_remote, &c->to_remote_len, data, len);
    iov[(*niov)++] = uv_buf_init((char *)data, (unsigned)len);
    if (*niov < IOV_MAX_BATCH)
        return true;
    unsigned n = *niov;
    *niov = 0;
    return write_remote(c, iov, n);
}

/* Without a fallback, a client that is not a valid request is answered like a plain HTTP/1.1
 * server would answer an unknown path (issue 8), then the connection ends. */
static void answer_not_found(sv_conn *c)
{
    static const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
    c->draining = true; /* later client bytes are read and dropped */
    free(c->carry);
    c->carry = NULL;
    c->carry_len = 0;
    if (!conn_timer_start(c, on_drain_timeout, SV_REFUSE_LINGER_MS)) {
        conn_close(c);
        return;
    }
    if (!write_client(c, (uint8_t *)resp, sizeof resp - 1))
        return;
    c->remote_eof = true; /* nothing more comes: the close follows the answer */
    shutdown_client(c);
}

static void dial_fallback(sv_conn *c);

/* REALITY's xver (PROTOCOLS-2.md §1.1): the PROXY protocol header the target gets first, from
 * the client's address to the one it reached, into @p out; 0 when the inbound sends none. */
static size_t target_proxy_header(sv_conn *c, uint8_t out[SV_PROXY_HEADER_MAX])
{
    const sv_reality_conf *r = c->handler->reality;
    struct sockaddr_storage local;
    int len = sizeof local;
    if (r == NULL || r->xver == 0 ||
        uv_tcp_getsockname(&c->client, (struct sockaddr *)&local, &len) != 0)
        return 0;
    return sv_proxy_header(r->xver, &c->peer.sa, (struct sockaddr *)&local, out);
}

/* Issue 8 fallback: relay every byte received so far (@p data, @p len), then both ways, to the
 * inbound's fallback, unmetered for users (no principal, no flow); a REALITY target gets its
 * PROXY header first. */
static void start_fallback(sv_conn *c, const uint8_t *data, size_t len)
{
    uint8_t head[SV_PROXY_HEADER_MAX];
    size_t hl = target_proxy_header(c, head);
    c->raw = true;
    c->to_remote = malloc(hl + len > 0 ? hl + len : 1);
    if (c->to_remote == NULL) {
        conn_close(c);
        return;
    }
    memcpy(c->to_remote, head, hl);
    memcpy(c->to_remote + hl, data, len);
    c->to_remote_len = hl + len;
    free(c->carry);
    c->carry = NULL;
    c->carry_len = 0;
    dial_fallback(c);
}

/* The client failed the protocol: do what the core's policy says (PROTOCOLS.md §1.4, §4.4). */
static void client_failed(sv_conn *c, const sv_effect *e)
{
    if (c->principal == NULL && e->policy >= SV_PROBE_CLOSE && e->policy <= SV_PROBE_FALLBACK)
        atomic_fetch_add_explicit(&c->w->shared->refused[e->policy - 1], 1,
                                  memory_order_relaxed);
    if (e->policy == SV_PROBE_DRAIN)
        start_drain(c);
    else if (e->policy == SV_PROBE_FALLBACK && c->principal == NULL && c->flow == NULL &&
             c->handler->has_fallback)
        start_fallback(c, e->data, e->len);
    else if (e->policy == SV_PROBE_FALLBACK && c->principal == NULL && c->flow == NULL)
        answer_not_found(c);
    else
        conn_close(c);
}

/* A reply datagram of the connection's association: framed by the core and sent like any
 * bytes towards the client; dropped while the client does not keep up (UDP may drop). */
static void on_assoc_reply(void *ctx, const sv_dest *from, const uint8_t *p, size_t n)
{
    sv_conn *c = ctx;
    if (c->closing || c->writing_client || c->client_shut)
        return;
    ssize_t len = c->handler->ops->frame_datagram(c->state, c->handler->creds, 0, from, p, n,
                                                  c->w->sealed, sizeof c->w->sealed);
    if (len <= 0)
        return;
    c->last_active = uv_now(&c->w->loop);
    write_client(c, c->w->sealed, (size_t)len);
}

static void on_assoc_released(void *ctx) { conn_release(ctx); }

static const sv_dgram_source conn_dgram = {on_assoc_reply, on_assoc_released, NULL};

/* SV_FX_OPEN for UDP: the connection becomes a datagram source of the UDP fan-out. */
static bool open_assoc(sv_conn *c)
{
    if (c->handler->ops->frame_datagram == NULL)
        return false;
    c->assoc = sv__assoc_open_in_stream(c->w, c->listener, c->handler, c->principal, c->sess,
                                        (const struct sockaddr *)&c->peer, &conn_dgram, c);
    if (c->assoc == NULL)
        return false;
    c->pending++;
    c->connected = true;
    c->last_active = uv_now(&c->w->loop);
    conn_timer_drop(c);
    return true;
}

/* ---- Mux.Cool: one sub-flow per stream (issue 9, PROTOCOLS.md §7) ---------------------------- */

/* Bytes a sub-flow holds for its outbound (dialling, or behind a write in flight): past
 * SUB_HELD_PAUSE reading the client stops until that write drains (every sub-flow of the
 * connection waits, as with v2ray's own server; no byte is dropped; client_read_start never
 * resumes while one is over the mark). What still reaches a sub-flow after the mark is the
 * rest of the client read being processed: at most one read (SV_SCRATCH, SV_LAYERED_READ)
 * and what the layers and the core carried over from the read before it (a TLS record, a
 * frame's head: each far under a read), and that read may come whole to a sub-flow that sits
 * just under the mark. SUB_HELD_MAX is the mark and two reads: past it (reading resumed while
 * a sub-flow was over the mark) the sub-flow is ended towards the client (README "Mux.Cool"). */
#define SUB_HELD_PAUSE (256 * 1024)
#define SUB_HELD_MAX (SUB_HELD_PAUSE + 2 * SV_SCRATCH)

/* One stream of a multiplexed connection: its own outbound stream and flow record, or for a
 * UDP session its own association (whose sub-links are the flows). */
struct sv_subflow {
    sv_conn *c;
    uint32_t stream;
    sv_ob_stream ob;
    sv_assoc *assoc;
    sv_flow_rec *flow;
    sv_target *target; /* the outbound version it was opened on (a reference), or NULL */
    sv_dest *sniff;    /* a TCP stream held until its first payload is sniffed, or NULL; its
                          bytes collect in held meanwhile */
    uint64_t sniff_since; /* loop time (ms) the hold began */
    bool registered, connected, writing, client_done, ended;
    bool half;      /* client_done by a half-close: the outbound is shut down, not closed */
    bool shut;      /* its outbound was half-closed */
    bool paced;     /* its outbound's reading waits for pace_timer (issue 12) */
    bool blocked;   /* its outbound's reading waits for the core's queue for it to drain
                       (proto.h queued: the client's flow control) */
    bool paused;    /* reading the client stopped for its held bytes (SUB_HELD_PAUSE) */
    uint8_t end_why; /* why it ends (sv_close_reason + 1), 0: not said yet (sub_end) */
    uint8_t *out;   /* the write in flight */
    uint8_t *held;  /* bytes waiting for the dial or for the write in flight */
    size_t held_len;
};

static sv_subflow *sub_find(sv_conn *c, uint32_t stream, unsigned *at)
{
    for (unsigned i = 0; i < c->n_subs; i++)
        if (c->subs[i]->stream == stream) {
            if (at != NULL)
                *at = i;
            return c->subs[i];
        }
    return NULL;
}

/* End @p s: out of the table, its outbound closed (sub_closed frees it). With @p tell, the
 * client gets the stream's End frame (frame_end; @p abort: the outbound failed, was killed or
 * overflowed) unless the connection is closing. Its reason, unless its caller set one first:
 * an error with @p abort, else its end. */
static void sub_end(sv_subflow *s, bool tell, bool abort)
{
    sv_conn *c = s->c;
    if (s->ended)
        return;
    s->ended = true;
    if (s->end_why == 0)
        s->end_why = (uint8_t)(1 + (abort ? SV_CLOSE_ERROR : SV_CLOSE_END));
    unsigned at = 0;
    if (sub_find(c, s->stream, &at) == s)
        c->subs[at] = c->subs[--c->n_subs];
    if (s->paused && !c->closing)
        subs_resume(c); /* its bytes are dropped with it */
    if (tell && !c->closing && !c->client_shut) {
        uint8_t *out;
        ssize_t len = end_frame(c, s->stream, abort, &out);
        if (len < 0)
            conn_close(c);
        else if (len > 0)
            write_client(c, out, (size_t)len);
    }
    /* last: sub_closed (which frees s) may come from inside. An XUDP association outlives
     * its sub-flow for a re-attach (udp.c), unless its session was asked to close. */
    if (s->assoc != NULL && (atomic_load(&c->sess->close_requested) || c->w->exiting))
        sv__assoc_close(s->assoc);
    else if (s->assoc != NULL)
        sv__assoc_let_go(s->assoc);
    else
        s->ob.ops->close(&s->ob);
}

/* A UDP session's reply datagram: one frame towards the client; dropped while the client does
 * not keep up (UDP may drop). */
static void sub_dgram_reply(void *ctx, const sv_dest *from, const uint8_t *p, size_t n)
{
    sv_subflow *s = ctx;
    sv_conn *c = s->c;
    if (s->ended || c->closing || c->writing_client || c->client_shut)
        return;
    ssize_t len = c->handler->ops->frame_datagram(c->state, c->handler->creds, s->stream, from,
                                                  p, n, c->w->sealed, sizeof c->w->sealed);
    if (len <= 0)
        return;
    c->last_active = uv_now(&c->w->loop);
    write_client(c, c->w->sealed, (size_t)len);
}

static void sub_closed(void *owner);
static void sub_assoc_released(void *ctx) { sub_closed(ctx); }

/* XUDP: a New frame on another sub-flow re-attached this one's association (udp.c): it ends
 * towards its client without it. */
static void sub_assoc_taken(void *ctx)
{
    sv_subflow *s = ctx;
    s->assoc = NULL; /* sub_end closes its (blackhole) stream instead: sub_closed follows */
    sub_end(s, true, false);
}

static const sv_dgram_source sub_dgram = {sub_dgram_reply, sub_assoc_released, sub_assoc_taken};

static void sub_closed(void *owner)
{
    sv_subflow *s = owner;
    sv_conn *c = s->c;
    if (s->flow != NULL) {
        sv__flow_closed(c->w->shared, s->flow, s->end_why ? s->end_why - 1u : SV_CLOSE_ERROR);
        if (s->registered)
            sv_tracker_flow_close(c->w->shared->tracker, s->flow);
        else
            free(s->flow);
    }
    sv_target_unref(s->target);
    free(s->sniff);
    free(s->out);
    free(s->held);
    free(s);
    conn_release(c);
}

/* Hand the held bytes to the outbound (one write in flight), or end the sub-flow (half-close
 * its outbound, after a half-close of the client's) once the client ended the stream and
 * nothing is left. */
static void sub_flush(sv_subflow *s)
{
    if (s->ended || !s->connected || s->writing)
        return;
    if (s->held_len == 0) {
        if (s->client_done && !s->half) {
            sub_end(s, false, false);
        } else if (s->client_done && !s->shut) { /* the download goes on until its EOF */
            s->shut = true;
            if (s->ob.ops->shutdown(&s->ob) != 0)
                sub_end(s, true, true);
        }
        return;
    }
    free(s->out);
    s->out = s->held;
    uv_buf_t b = uv_buf_init((char *)s->out, (unsigned)s->held_len);
    sv_meter_add(&s->flow->bytes->up, s->held_len);
    pace_charge(s->c, s->held_len, true);
    s->held = NULL;
    s->held_len = 0;
    if (s->ob.ops->write(&s->ob, &b, 1) != 0)
        sub_end(s, true, true);
    else
        s->writing = true;
}

/* Does a sub-flow hold more than SUB_HELD_PAUSE bytes (reading the client waits for it)? */
static bool subs_over_pause(const sv_conn *c)
{
    for (unsigned i = 0; i < c->n_subs; i++)
        if (c->subs[i]->held_len > SUB_HELD_PAUSE)
            return true;
    return false;
}

/* Read the client again once no sub-flow holds more than SUB_HELD_PAUSE bytes. */
static void subs_resume(sv_conn *c) { client_read_start(c); }

static void sub_written(void *owner, int status)
{
    sv_subflow *s = owner;
    sv_conn *c = s->c;
    bool paused = s->paused;
    s->paused = false;
    s->writing = false;
    free(s->out);
    s->out = NULL;
    if (status < 0)
        sub_end(s, true, true);
    else
        sub_flush(s);
    if (paused && !c->closing)
        subs_resume(c);
}

static void sub_connected(void *owner, int status)
{
    sv_subflow *s = owner;
    sv_conn *c = s->c;
    if (status < 0 || s->ended) {
        sub_end(s, true, true);
        return;
    }
    s->connected = true;
    s->registered = true;
    if (!sv__flow_opened(c->w->shared->tracker, s->flow, s->target)) {
        s->end_why = (uint8_t)(1 + SV_CLOSE_KILL); /* its version was drained while it dialled */
        sub_end(s, true, true);
        return;
    }
    if (!c->writing_client && !c->paced_down)
        s->ob.ops->read(&s->ob, true);
    bool paused = s->paused;
    s->paused = false;
    sub_flush(s); /* the held bytes go: a write in flight */
    if (paused && !c->closing)
        subs_resume(c);
}

static void sub_alloc(void *owner, uv_buf_t *buf) { remote_alloc(((sv_subflow *)owner)->c, buf); }

/* Outbound bytes of the stream: Keep frames to the client; its end: the End frame. */
static void sub_read(void *owner, ssize_t n, const uv_buf_t *buf)
{
    sv_subflow *s = owner;
    sv_conn *c = s->c;
    if (n == 0 || s->ended || c->closing)
        return;
    if (n < 0) {
        sub_end(s, true, n != UV_EOF); /* a clean end, or a failed outbound */
        return;
    }
    sv_meter_add(&s->flow->bytes->down, (uint64_t)n);
    if (pace_account(c, (uint64_t)n) && pace_arm(c)) {
        s->paced = true; /* this sub-flow alone waits: one stream never starves its siblings */
        c->subs_paced = true;
        s->ob.ops->read(&s->ob, false);
    }
    c->last_active = uv_now(&c->w->loop);
    const sv_proto_ops *ops = c->handler->ops;
    ssize_t len = ops->frame(c->state, c->handler->creds, s->stream, (const uint8_t *)buf->base,
                             (size_t)n, c->w->sealed, sizeof c->w->sealed);
    if (len < 0) {
        conn_close(c);
        return;
    }
    if (write_client(c, c->w->sealed, (size_t)len) && !c->closing && ops->queued != NULL &&
        ops->queued(c->state, s->stream) > SV_SUB_QUEUED_HIGH) {
        s->blocked = true; /* its client's window is shut: this stream alone waits */
        c->subs_blocked = true;
        s->ob.ops->read(&s->ob, false);
    }
}

static const sv_ob_stream_events sub_events = {sub_connected, sub_alloc, sub_read, sub_written,
                                               sub_closed};

/* Start (@p on) or stop reading every sub-flow's outbound: the downstream backpressure of the
 * shared client socket. */
static void subs_read(sv_conn *c, bool on)
{
    for (unsigned i = 0; i < c->n_subs; i++)
        if (c->subs[i]->connected && c->subs[i]->assoc == NULL &&
            !(on && (c->subs[i]->paced || c->subs[i]->blocked)))
            c->subs[i]->ob.ops->read(&c->subs[i]->ob, on);
}

/* After a feed(): the blocked sub-flows whose queue in the core drained read again. */
static void subs_unblock(sv_conn *c)
{
    const sv_proto_ops *ops = c->handler->ops;
    bool still = false;
    for (unsigned i = 0; i < c->n_subs; i++) {
        sv_subflow *s = c->subs[i];
        if (!s->blocked)
            continue;
        if (ops->queued(c->state, s->stream) > SV_SUB_QUEUED_LOW) {
            still = true;
            continue;
        }
        s->blocked = false;
        if (s->connected && s->assoc == NULL && !s->paced && !c->writing_client &&
            !c->paced_down)
            s->ob.ops->read(&s->ob, true);
    }
    c->subs_blocked = still;
}

/* The user's debt is paid: the sub-flows that waited read again (issue 12). */
static void subs_resume_paced(sv_conn *c)
{
    c->subs_paced = false;
    for (unsigned i = 0; i < c->n_subs; i++) {
        sv_subflow *s = c->subs[i];
        if (!s->paced)
            continue;
        s->paced = false;
        if (s->connected && s->assoc == NULL && !s->blocked && !c->writing_client &&
            !c->paced_down)
            s->ob.ops->read(&s->ob, true);
    }
}

/* The connection closes: every sub-flow ends with it, for its reason. */
static void subs_close(sv_conn *c)
{
    while (c->n_subs > 0) {
        sv_subflow *s = c->subs[c->n_subs - 1];
        if (s->end_why == 0)
            s->end_why = c->end_why ? c->end_why : (uint8_t)(1 + SV_CLOSE_ERROR);
        sub_end(s, false, false);
    }
}

/* A killed sub-flow (DELETE /v1/connections/<id>) ends alone; the client gets its End. */
static void subs_scan_kill(sv_conn *c)
{
    for (unsigned i = c->n_subs; i-- > 0;)
        if (i < c->n_subs && c->subs[i]->flow != NULL &&
            atomic_load(&c->subs[i]->flow->kill)) {
            c->subs[i]->end_why = 1 + SV_CLOSE_KILL;
            sub_end(c->subs[i], true, true);
        }
}

/* The client asked for Mux.Cool: the connection holds a table of sub-flows from here, and
 * lives until the client closes it. @return false when out of memory. */
static bool mux_start(sv_conn *c)
{
    if (c->subs != NULL || c->handler->ops->frame_end == NULL)
        return false;
    c->subs = calloc(SV_MUX_SESSIONS_MAX, sizeof *c->subs);
    if (c->subs == NULL)
        return false;
    c->connected = true;
    c->last_active = uv_now(&c->w->loop);
    conn_timer_drop(c);
    return true;
}

/* Connector steps 3-8 for sub-flow @p s, sniffed name @p sniffed (or NULL), as open_flow: on
 * the worker's current plane (seed 000: each sub-flow reads it; a route change reaches the next
 * sub-flow of a live connection), with its own outbound stream and flow record. A refused or
 * failed stream gets its End. */
static void sub_route(sv_subflow *s, const char *sniffed)
{
    sv_conn *c = s->c;
    sv_worker *w = c->w;
    sv_dest *d = s->sniff;
    s->sniff = NULL;
    sv_decision dec;
    sv_target *t = route_stream(c, d, sniffed, &dec);
    s->flow = t != NULL ? sv__flow_new(w->index, s, c->sess, c->user_id, d, sniffed, SV_NET_TCP,
                                       t, dec.rule, w->plane->epoch)
                        : NULL;
    if (s->flow == NULL) { /* refused like a blocked route (or no memory): no dial */
        s->ob.ops->open(&s->ob, d);
        free(d);
        sub_end(s, true, true);
        return;
    }
    s->target = t;
    sv_target_ref(t);
    s->ob.ops = t->ops;
    s->ob.env.sock = &t->sock; /* s->target holds t */
    s->ob.env.resolver = sv__route_resolver(w, dec.dns_server);
    s->ob.allow_internal = c->handler->allow_private || dec.names_dest;
    if (s->ob.ops->open(&s->ob, d) != 0)
        sub_end(s, true, true); /* refused (blackhole) or failed */
    free(d);
}

static void on_sub_sniff_timeout(uv_timer_t *t);

/* Route the sub-flows held for sniffing (seed 000: the demuxer sniffs each sub-flow's first
 * payload, as hold_open / sniff_and_open do for a connection's one flow) whose answer is final,
 * whose bytes reached SV_SNIFF_MAX, whose client ended the stream, or that waited SV_SNIFF_MS;
 * the connection's timer comes back for the others. @return false when the connection closed. */
static bool subs_sniff(sv_conn *c)
{
    uint64_t now = uv_now(&c->w->loop), wait = SV_SNIFF_MS;
    if (c->draining)
        return !c->closing;
    c->subs_sniffing = false;
    for (unsigned i = c->n_subs; i-- > 0 && !c->closing;) {
        sv_subflow *s = i < c->n_subs ? c->subs[i] : NULL;
        if (s == NULL || s->sniff == NULL)
            continue;
        char name[SV_SNIFF_NAME_CAP];
        sv_sniff_result r = s->held_len == 0 ? SV_SNIFF_NEED_MORE
                                             : sv_sniff(s->held, s->held_len, name);
        uint64_t waited = now - s->sniff_since;
        if (r == SV_SNIFF_NEED_MORE && s->held_len < SV_SNIFF_MAX && !s->client_done &&
            waited < SV_SNIFF_MS) {
            c->subs_sniffing = true;
            if (SV_SNIFF_MS - waited < wait)
                wait = SV_SNIFF_MS - waited;
            continue;
        }
        sub_route(s, r == SV_SNIFF_FOUND ? name : NULL);
    }
    if (c->closing)
        return false;
    if (!c->subs_sniffing) {
        conn_timer_drop(c); /* a multiplexed connection's timer bounds nothing else */
        return true;
    }
    if (!conn_timer_start(c, on_sub_sniff_timeout, wait)) {
        conn_close(c);
        return false;
    }
    return true;
}

static void on_sub_sniff_timeout(uv_timer_t *t)
{
    sv_conn *c = t->data;
    if (!c->closing)
        subs_sniff(c);
}

/* A new stream (SV_FX_OPEN): a TCP stream is held for sniffing (subs_sniff routes it, then
 * sub_route opens it); a UDP session gets its own association (datagrams routed per datagram
 * on the current plane, billed and listed per destination by udp.c). A refused or failed
 * stream gets its End. */
static void sub_open(sv_conn *c, const sv_effect *e)
{
    sv_worker *w = c->w;
    sv_subflow *s = calloc(1, sizeof *s);
    if (s == NULL || c->n_subs >= SV_MUX_SESSIONS_MAX || sub_find(c, e->stream, NULL) != NULL) {
        free(s);
        conn_close(c);
        return;
    }
    s->c = c;
    s->stream = e->stream;
    s->ob.ev = &sub_events;
    s->ob.owner = s;
    s->ob.env = (sv_ob_env){&w->loop, &w->own_addrs, w->resolver, NULL};
    s->ob.ops = &sv_ob_blackhole;
    c->subs[c->n_subs++] = s;
    c->pending++; /* released by sub_closed */
    const sv_dest *d = &e->dest;
    if (d->network == SV_NET_UDP) {
        if (c->handler->ops->frame_datagram != NULL) /* XUDP re-attach (issue 10) */
            s->assoc = sv__assoc_open_xudp(w, c->listener, c->handler, c->principal, c->sess,
                                           (const struct sockaddr *)&c->peer, e->global_id,
                                           &sub_dgram, s);
        if (s->assoc == NULL) {
            s->ob.ops->open(&s->ob, d);
            sub_end(s, true, true);
            return;
        }
        s->connected = true;
        return;
    }
    if ((s->sniff = malloc(sizeof *s->sniff)) == NULL) {
        s->ob.ops->open(&s->ob, d);
        sub_end(s, true, true);
        return;
    }
    *s->sniff = *d;
    s->sniff_since = uv_now(&w->loop);
    c->subs_sniffing = true; /* apply_effects routes it once this feed's bytes are in */
}

/* Client bytes of a stream (SV_FX_TO_OUTBOUND): to its outbound now, or held (bounded). Bytes
 * of a stream ended here are dropped (the core answers its later frames with End). */
static void sub_write(sv_conn *c, uint32_t stream, uint8_t *data, size_t len)
{
    sv_subflow *s = sub_find(c, stream, NULL);
    if (s == NULL || len == 0 || s->client_done || s->assoc != NULL)
        return;
    if (s->connected && !s->writing) {
        uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
        int r = s->ob.ops->try_write(&s->ob, &b, 1);
        if (r < 0) {
            sub_end(s, true, true);
            return;
        }
        sv_meter_add(&s->flow->bytes->up, (uint64_t)r);
        pace_charge(c, (uint64_t)r, true);
        data += r;
        len -= (size_t)r;
        if (len == 0)
            return;
    }
    if (s->held_len + len > SUB_HELD_MAX) {
        s->end_why = 1 + SV_CLOSE_LIMIT;
        sub_end(s, true, true);
        return;
    }
    uint8_t *grown = realloc(s->held, s->held_len + len);
    if (grown == NULL) {
        sub_end(s, true, true);
        return;
    }
    memcpy(grown + s->held_len, data, len);
    s->held = grown;
    s->held_len += len;
    if ((s->writing || !s->connected) && s->held_len > SUB_HELD_PAUSE) {
        s->paused = true; /* until sub_written or sub_connected takes the bytes */
        client_read_stop(c);
        return;
    }
    sub_flush(s);
}

/* The client ended a stream (End frame): its outbound gets what is held, then closes; with
 * @p half (the client ended its direction only) a stream's outbound is half-closed instead and
 * the download goes on until the outbound ends (a UDP session ends). */
static void sub_client_end(sv_conn *c, uint32_t stream, bool half)
{
    sv_subflow *s = sub_find(c, stream, NULL);
    if (s == NULL)
        return;
    if (s->client_done && s->half && !half) { /* after its half-close, the whole stream */
        sub_end(s, false, false);
        return;
    }
    s->client_done = true;
    s->half = half && s->assoc == NULL; /* a UDP session has no direction of its own to end */
    if (s->connected && !s->writing)
        sub_flush(s);
}

/* SV_FX_AUTHENTICATED: admit the principal (the fleet may make it wait: the effects after
 * @p i are kept), start the sub-flow table of a multiplexed core. @return false when the
 * connection closed or paused. */
static bool fx_authenticated(sv_conn *c, const sv_effects *fx, unsigned i)
{
    const sv_effect *e = &fx->v[i];
    preauth_leave(c); /* issue 33: no longer evicted to make room */
    if (c->handler->ops->set_guide != NULL)
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
        if (c->principal == NULL && c->handler->ops->scan != NULL)
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
    for (unsigned i = 0; i < fx->n && !c->closing; i++) {
        const sv_effect *e = &fx->v[i];
        bool go_on = true;
        if (e->trials > 0) /* issue 13: keys a trial decryption tried, whatever the effect */
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
            if (c->subs_sniffing && !c->closing) /* at least its timer runs (a pause) */
                subs_sniff(c);
            return false;
        }
    }
    if (c->held != NULL && !c->closing && !sniff_and_open(c, false))
        return false;
    if (c->subs_sniffing && !c->closing && !subs_sniff(c))
        return false;
    return !c->closing;
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
    /* a core with more effects than one list holds is called again at once (ops->more) */
    while ((off < len || (ops->more != NULL && ops->more(c->state))) && !c->closing &&
           !c->draining) {
        /* a multiplexed core (gRPC) authenticates every new stream: it keeps the clock */
        if (ops->set_time != NULL && (c->principal == NULL || c->subs != NULL))
            ops->set_time(c->state, (int64_t)(sv__wall_ms() / 1000));
        ssize_t r = ops->feed(c->state, c->handler->creds, data + off, len - off, &fx);
        if (!apply_effects(c, &fx, iov, &niov)) {
            size_t fed = off + (r > 0 ? (size_t)r : 0);
            if (c->paused != NULL && !c->closing && r >= 0 &&
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
        if (r == 0 && (ops->more == NULL || !ops->more(c->state)))
            break;
        off += (size_t)r;
    }
    if (c->subs_blocked && !c->closing)
        subs_unblock(c);
    if (c->closing || c->draining || !write_remote(c, iov, niov))
        return;
    if (!keep_carry(c, data + off, len - off))
        conn_close(c);
}

/* The fleet answered (or timed out): admit and go on with what was kept, or end. */
static void on_fleet_answer(void *ctx, sv_fleet_answer answer)
{
    sv_conn *c = ctx;
    conn_paused *pz = c->paused;
    sv_tracker *t = c->w->shared->tracker;
    bool ok;
    pz->req = NULL;
    c->paused = NULL;
    if (answer == SV_FLEET_UNKNOWN) {
        ok = sv_tracker_session_admit(t, c->sess, c->user_id,
                                      sv_principal_device_limit(c->principal),
                                      false) == SV_DEVICE_ADMITTED;
    } else {
        ok = answer == SV_FLEET_YES;
        sv_tracker_session_admit_fleet(t, c->sess, c->user_id, ok);
    }
    if (!ok || (pz->multiplexed && !mux_start(c))) {
        conn_close(c);
    } else {
        uv_buf_t iov[IOV_MAX_BATCH];
        unsigned niov = 0;
        client_read_start(c); /* first: what follows may stop it again (backpressure) */
        if (apply_effects(c, &pz->fx, iov, &niov) && !c->closing &&
            write_remote(c, iov, niov) &&
            (pz->in_len > 0 || (c->handler->ops->more != NULL && c->handler->ops->more(c->state)))) {
            static uint8_t none[1]; /* nothing kept: the core's held effects only */
            process_client(c, pz->in != NULL ? pz->in : none, pz->in_len);
        }
    }
    paused_free(pz);
}

/* ---- REALITY's target flight (PROTOCOLS-2.md §1.5 step 1) ------------------------------------
 * A layer that waits for its target (SV_LAYER_TARGET: a valid REALITY client) gets it through
 * the fallback's dial (direct, to the inbound's fallback, which is the target): the client's
 * hello is written, at most SV_LAYER_TARGET_MAX bytes are read for at most SV_TARGET_FLIGHT_MS,
 * and each read goes to the layer until it goes on; the target connection then closes. The
 * client is not read meanwhile. One dial per valid client, none for anyone else. */

#define SV_TARGET_FLIGHT_MS 2000

typedef struct target_peek {
    sv_ob_stream ob;
    sv_conn *c;           /* NULL once the connection stopped waiting (then only closing) */
    sv_conn *owner_conn;  /* the connection it holds (pending), released when it closed */
    size_t len;           /* bytes read into buf */
    uint8_t buf[SV_LAYER_TARGET_MAX];
    size_t hello_len;
    uint8_t hello[];      /* the client's hello records, written to the target */
} target_peek;

static void client_chain_read(sv_conn *c, const uint8_t *in, size_t n);

/* Stop waiting: close the target connection (its closed event frees it). */
static void peek_end(sv_conn *c)
{
    target_peek *pk = c->peek;
    if (pk == NULL)
        return;
    c->peek = NULL;
    pk->c = NULL;
    pk->ob.ops->close(&pk->ob);
}

/* Give the layer what the target sent; once it went on, the client's handshake resumes. */
static void peek_reply(sv_conn *c, bool final)
{
    target_peek *pk = c->peek;
    if (final) /* the layer mirrors what it can of it; debug only: no line per client */
        SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: reality target's first flight ended "
               "at %zu bytes (time, its end or the bound): mirrored as far as it went",
               (unsigned long long)c->sess->info.id, pk->len);
    int rc = sv_chain_target_reply(&c->chain, pk->buf, pk->len, final);
    if (rc == 1)
        return;
    peek_end(c);
    if (rc < 0) {
        conn_close(c);
        return;
    }
    if (!conn_timer_start(c, on_handshake_timeout, SV_TLS_HANDSHAKE_MS)) {
        conn_close(c);
        return;
    }
    static const uint8_t none[1];
    client_chain_read(c, none, 0); /* the server's flight out, held client bytes up */
    if (!c->closing && !c->ob_opened) /* (a refused client waits for its fallback's dial) */
        client_read_start(c);
}

static void on_target_timeout(uv_timer_t *t)
{
    sv_conn *c = t->data;
    if (c->peek != NULL)
        peek_reply(c, true);
}

static void peek_connected(void *owner, int status)
{
    target_peek *pk = owner;
    if (pk->c == NULL)
        return;
    uv_buf_t b = uv_buf_init((char *)pk->hello, (unsigned)pk->hello_len);
    if (status < 0 || pk->ob.ops->write(&pk->ob, &b, 1) != 0) {
        peek_reply(pk->c, true);
        return;
    }
    pk->ob.ops->read(&pk->ob, true);
}

static void peek_alloc(void *owner, uv_buf_t *buf)
{
    target_peek *pk = owner;
    *buf = uv_buf_init((char *)pk->buf + pk->len, (unsigned)(sizeof pk->buf - pk->len));
}

static void peek_read(void *owner, ssize_t n, const uv_buf_t *buf)
{
    target_peek *pk = owner;
    (void)buf;
    if (pk->c == NULL)
        return;
    if (n > 0)
        pk->len += (size_t)n;
    peek_reply(pk->c, n < 0 || pk->len == sizeof pk->buf);
}

static void peek_written(void *owner, int status)
{
    target_peek *pk = owner;
    if (status < 0 && pk->c != NULL)
        peek_reply(pk->c, true);
}

static void peek_closed(void *owner)
{
    target_peek *pk = owner;
    sv_conn *c = pk->owner_conn;
    free(pk);
    conn_release(c);
}

static const sv_ob_stream_events peek_events = {peek_connected, peek_alloc, peek_read,
                                                peek_written, peek_closed};

/* The chain waits for its target: dial it (the inbound's fallback, which a REALITY layer
 * mirrors only when there is one) with the layer's bytes. */
static void peek_start(sv_conn *c)
{
    size_t len = 0;
    uint8_t head[SV_PROXY_HEADER_MAX];
    size_t hl = target_proxy_header(c, head); /* xver: the target gets it first here too */
    const uint8_t *hello = sv_chain_target_ask(&c->chain, &len);
    target_peek *pk = c->handler->has_fallback && len > 0 ? calloc(1, sizeof *pk + hl + len)
                                                          : NULL;
    if (pk == NULL || !conn_timer_start(c, on_target_timeout, SV_TARGET_FLIGHT_MS)) {
        free(pk);
        conn_close(c);
        return;
    }
    memcpy(pk->hello, head, hl);
    memcpy(pk->hello + hl, hello, len);
    pk->hello_len = hl + len;
    pk->c = c;
    pk->owner_conn = c;
    c->peek = pk;
    c->pending++; /* released by peek_closed */
    pk->ob.ops = &sv_ob_direct;
    pk->ob.ev = &peek_events;
    pk->ob.owner = pk;
    pk->ob.env = (sv_ob_env){&c->w->loop, &c->w->own_addrs, c->w->resolver, NULL};
    pk->ob.allow_internal = true; /* the operator's fallback, as dial_fallback */
    uv_read_stop((uv_stream_t *)&c->client);
    if (pk->ob.ops->open(&pk->ob, &c->handler->fallback) != 0)
        peek_reply(c, true);
}

/* Client bytes after the transport layers: to the core, or as they are to the fallback. */
static void process_plain(sv_conn *c, uint8_t *data, size_t len)
{
    if (!c->raw) {
        process_client(c, data, len);
        return;
    }
    uv_buf_t iov[IOV_MAX_BATCH];
    unsigned niov = 0;
    if (to_outbound(c, iov, &niov, data, len))
        write_remote(c, iov, niov);
}

static void client_eof(sv_conn *c)
{
    if (c->draining || !c->connected || c->assoc != NULL || c->subs != NULL) {
        conn_end(c, SV_CLOSE_END); /* the client ended every sub-flow it carried */
        return;
    }
    c->client_eof = true;
    uv_read_stop((uv_stream_t *)&c->client);
    if (!c->writing_remote)
        shutdown_remote(c);
    maybe_finish(c);
}

/* Where the chain's top layer unwraps to: the scratch buffer after the core's carry, as a
 * plain TCP read lands (client_alloc). */
static uint8_t *chain_alloc(void *ctx, size_t *cap)
{
    sv_conn *c = ctx;
    size_t base = 0;
    if (!c->raw && !c->draining && c->carry_len > 0) {
        memcpy(c->w->scratch, c->carry, c->carry_len);
        base = c->carry_len;
    }
    *cap = sizeof c->w->scratch - base;
    return c->w->scratch + base;
}

/* Unwrapped client bytes: to the core (after its carry), to the fallback, or refused. */
static bool chain_deliver(void *ctx, uint8_t *p, size_t n)
{
    sv_conn *c = ctx;
    if (c->closing || c->draining)
        return !c->closing;
    if (!c->raw && c->principal == NULL && c->flow == NULL &&
        (sv_chain_status(&c->chain) & SV_LAYER_REFUSED)) {
        /* a layer refused the peer (e.g. a WebSocket upgrade on another path): the fallback
         * gets its bytes, else a 404, as for a request the protocol refuses (issue 9) */
        sv_effect e = {.kind = SV_FX_ERROR, .policy = SV_PROBE_FALLBACK, .data = p, .len = n};
        client_failed(c, &e);
        return !c->closing;
    }
    size_t base = c->raw ? 0 : c->carry_len;
    process_plain(c, p - base, base + n);
    return !c->closing;
}

/* A layer failed: give the kernel what it queued last (a TLS alert, a WebSocket Close), once
 * and without waiting, before the connection closes. */
static void send_last_words(sv_conn *c)
{
    size_t len = 0;
    if (c->writing_client || c->closing || sv_chain_pump(&c->chain) < 0)
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
 * oversized handshake ends the connection without a log line (issue 8).
 */
static void client_chain_read(sv_conn *c, const uint8_t *in, size_t n)
{
    if (sv_chain_unwrap(&c->chain, in, n, c->w->stage, chain_alloc, chain_deliver, c) < 0) {
        send_last_words(c);
        conn_close(c);
        return;
    }
    if (c->closing || !flush_chain(c))
        return;
    unsigned st = sv_chain_status(&c->chain);
    if ((st & SV_LAYER_TARGET) && c->peek == NULL) {
        peek_start(c); /* REALITY: the target answers the hello first (§1.5) */
        return;
    }
    if (!c->chain_up && (st & SV_LAYER_UP)) {
        c->chain_up = true; /* the protocol's own bound from here */
        if (!c->connected && !c->draining && !c->raw && c->held == NULL &&
            !conn_timer_start(c, on_handshake_timeout, SV_HANDSHAKE_MS)) {
            conn_close(c);
            return;
        }
    }
    if ((st & SV_LAYER_EOF) && !c->client_eof) {
        client_eof(c);
        /* the layers below the one that ended still have their ends to read (a TLS
         * close_notify after a WebSocket Close): keep reading until TCP's EOF */
        if (!c->closing && c->client_eof)
            uv_read_start((uv_stream_t *)&c->client, client_alloc, on_client_read);
    }
}

static void on_client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    sv_conn *c = s->data;
    if (n == 0 || c->closing)
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
    if (c->draining)
        return;
    process_plain(c, c->w->scratch, c->carry_len + (size_t)n);
}

static void client_read_start(sv_conn *c)
{
    if (c->splice != NULL) {
        splice_run(c);
        return;
    }
    if (!c->client_eof && !c->closing && !c->paced_up && c->paused == NULL &&
        !(c->subs != NULL && subs_over_pause(c))) /* the sub-flows' backpressure holds */
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
    const sv_proto_ops *ops = l->handler->ops;
    sv_conn *c = calloc(1, sizeof *c + ops->state_size);
    struct sockaddr_storage peer = {0}; /* before the record: it keeps the source as text */
    socklen_t peer_len = sizeof peer;
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
    sess->info.started_ms = sv__wall_ms(); /* also its place in the accept order (issue 33) */
    int chain_rc = sv_chain_open(&c->chain, l->handler->layers, l->handler->n_layers);
    uv_tcp_init(&w->loop, &c->client);
    c->client.data = c;
    c->pending = 1;
    c->preauth = true;
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
    if (ops->set_guide != NULL) { /* issue 13: the user last seen from this IP first */
        int hint;
        sv_ss_order *order;
        sv__wl_guide(l, c->handler, (struct sockaddr *)&c->peer, &hint, &order);
        ops->set_guide(c->state, hint, order, ops->scan != NULL ? SV_SS_GUESSES : 0);
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
        if (c->listener != l || c->closing || c->principal == NULL)
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
        if (c->connected && !c->closing && now - c->last_active >= SV_TCP_IDLE_MS)
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
