/*
 * The UDP fan-out (seed 002) and its datagram sources. An association is one client's UDP
 * traffic, bound to one principal. Each datagram is routed on the current plane (seed 000 "UDP:
 * per-packet routing"), refused silently when blocked or internal, and sent through a
 * sub-link keyed by the outbound version (at most 64, the least recently used is evicted). A
 * sub-link carries its datagrams through its target's outbound (outbound.h datagram ops; direct
 * sends from one socket per address family to any destination); each sub-link is a tracked flow.
 * Replies go back through the association's source:
 *  - the inbound's own UDP socket: its protocol's datagram framing (proto/dgram.h, the
 *    inbound's sv_dgram_ops_for()) opens each datagram and seals each reply; an association is
 *    a session of its own, of the user whose key opened its first datagram. A core with
 *    session_match keys it by the client's session (Shadowsocks 2022: its session ID, packet IDs
 *    through the session's window, replies to the client's latest source address: clients may
 *    roam); else it is the client's (address, port) (Shadowsocks AEAD). Replies are sent from
 *    the listener.
 *  - UDP inside a stream (Trojan UDP ASSOCIATE): the connection's session owns the
 *    association; replies go to the connection (sv_dgram_source), which frames them.
 *  - XUDP (PROTOCOLS-2.md §5.3): a Mux.Cool UDP session with a GlobalID is also in
 *    the worker's table (xudp.h); when its owner lets go it is detached (no owner, no session,
 *    replies dropped unbilled, its sockets kept) until a New frame with its GlobalID re-attaches
 *    it to another sub-flow, or the sweep expires it after SV_XUDP_KEEP_MS.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/bounds.h"
#include "supervisor/connector.h"
#include "supervisor/flow.h"
#include "supervisor/hints.h"
#include "supervisor/plane.h"
#include "supervisor/scan.h"
#include "supervisor/shared.h"
#include "supervisor/udp.h"
#include "supervisor/util/log.h"

typedef struct sv_assoc sv_assoc;

typedef struct sv_sublink {
    sv_assoc *a;
    sv_target *target;
    sv_flow_rec *flow;
    sv_ob_dgram link;      /**< the target's datagram link */
    uint64_t last_used;
    bool closing;
    bool registered; /**< the flow is in the tracker (else it is freed here) */
    uint8_t end_why; /**< why it ends (sv_close_reason + 1), 0: its association's reason */
} sv_sublink;

struct sv_assoc {
    sv_list link;
    sv_worker *w;
    sv_wlistener *l;                 /**< Shadowsocks UDP: its listener; NULL inside a stream */
    const sv_dgram_source *src;      /**< inside a stream: where replies go; NULL for SS-UDP */
    void *src_ctx;
    sv_handler *handler;
    const sv_wlistener *settings_from; /**< its current handler's allow_private applies to every
                                            datagram, so a reload reaches live associations */
    int user_idx;
    sv_principal *principal; /**< a reference */
    uint64_t user;
    sv_pacer *pacer;         /**< the user's speed limit (a reference), looked up at the first
                                  datagram, or NULL */
    bool pace_known;
    struct sockaddr_storage client;
    sv_session_rec *sess;
    uv_timer_t idle;
    sv_sublink *subs[SV_UDP_SUBLINKS_MAX];
    unsigned n_subs;
    int pending;
    uint64_t clock;
    bool closing;
    uint8_t end_why;           /**< why it ends (sv_close_reason + 1), 0: its end */
    bool xudp;                 /**< in the worker's XUDP table (a GlobalID, xudp.h) */
    bool detached;             /**< XUDP: its owner let go; kept for a re-attach */
    sv_wlistener *held_l;      /**< while detached: a listener reference (settings_from) */
    const sv_dgram_ops *dgram; /**< on a listener's socket: the framing of its datagrams and
                                    replies (dgram.h); NULL inside a stream */
    /** dgram's session_size bytes of per-session state */
    _Alignas(max_align_t) unsigned char session[];
};

static void assoc_release(sv_assoc *a)
{
    if (--a->pending > 0)
        return;
    if (a->src == NULL)
        sv_tracker_session_close(a->w->shared->tracker, a->sess);
    sv_principal_unref(a->principal);
    sv_pacer_release(a->pacer);
    sv_handler_unref(a->handler);
    sv_list_unlink(&a->link);
    if (a->l != NULL)
        sv__wlistener_release(a->l);
    if (a->held_l != NULL)
        sv__wlistener_release(a->held_l);
    if (a->src != NULL)
        a->src->released(a->src_ctx);
    if (a->dgram != NULL && a->dgram->session_deinit != NULL)
        a->dgram->session_deinit(a->session);
    free(a);
}

static void on_sub_closed(void *owner)
{
    sv_sublink *s = owner;
    sv_assoc *a = s->a;
    uint8_t why = s->end_why ? s->end_why : a->end_why;
    sv__flow_closed(a->w->shared, s->flow, why ? why - 1u : SV_CLOSE_END);
    if (s->registered)
        sv_tracker_flow_close(a->w->shared->tracker, s->flow);
    else
        free(s->flow);
    sv_target_unref(s->target);
    free(s);
    assoc_release(a);
}

static void sub_close(sv_sublink *s)
{
    if (s->closing)
        return;
    s->closing = true;
    s->link.ops->dgram_close(&s->link);
}

static void on_idle_closed(uv_handle_t *h) { assoc_release(h->data); }

static void assoc_close(sv_assoc *a)
{
    if (a->closing)
        return;
    a->closing = true;
    if (a->xudp)
        sv_xudp_remove(&a->w->xudp, a);
    for (unsigned i = 0; i < a->n_subs; i++)
        sub_close(a->subs[i]);
    a->n_subs = 0;
    uv_close((uv_handle_t *)&a->idle, on_idle_closed);
}

void sv__assoc_close(sv_assoc *a) { assoc_close(a); }

/* Close @p a for reason @p why (its sub-links' closes say it), unless a reason was
 * given first. */
static void assoc_end(sv_assoc *a, sv_close_reason why)
{
    if (a->end_why == 0 && !a->closing)
        a->end_why = (uint8_t)(why + 1);
    assoc_close(a);
}

/* Close sub-link @p s for reason @p why. */
static void sub_end(sv_sublink *s, sv_close_reason why)
{
    if (s->end_why == 0 && !s->closing)
        s->end_why = (uint8_t)(why + 1);
    sub_close(s);
}

static void on_idle(uv_timer_t *t) { assoc_end(t->data, SV_CLOSE_IDLE); }

void sv__udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sv_wlistener *l = h->data;
    buf->base = (char *)l->w->scratch;
    buf->len = SV_SCRATCH;
    (void)suggested;
}

static void sub_alloc(void *owner, uv_buf_t *buf)
{
    sv_sublink *s = owner;
    /* room before the payload for a reply's header and address, after it for its tag: sealed
     * out of place, whatever the framing (dgram.h) */
    buf->base = (char *)s->a->w->scratch + SV_SCRATCH / 2;
    buf->len = SV_SCRATCH / 2 - SV_DGRAM_OVERHEAD_MAX;
}

static void sockaddr_to_dest(const struct sockaddr *sa, sv_dest *d)
{
    memset(d, 0, sizeof *d);
    d->network = SV_NET_UDP;
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        d->port = ntohs(a->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            d->atyp = SV_ATYP_IPV4;
            memcpy(d->ip, &a->sin6_addr.s6_addr[12], 4);
        } else {
            d->atyp = SV_ATYP_IPV6;
            memcpy(d->ip, &a->sin6_addr, 16);
        }
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        d->atyp = SV_ATYP_IPV4;
        d->port = ntohs(a->sin_port);
        memcpy(d->ip, &a->sin_addr, 4);
    }
}

/* a datagram may pass while the user's bucket is not in debt (then
 * it is charged, pace_charge); one over the limit is dropped and not billed. An unlimited
 * user's check is one load. */
static bool pace_allows(sv_assoc *a)
{
    if (!a->pace_known) {
        a->pace_known = true;
        a->pacer = sv_pacers_acquire(a->w->shared->pacers, a->user, uv_hrtime());
    }
    return !sv_pacer_limited(a->pacer) || sv_pacer_wait(a->pacer, uv_hrtime()) == 0;
}

static void pace_charge(sv_assoc *a, size_t n)
{
    if (sv_pacer_limited(a->pacer))
        sv_pacer_charge(a->pacer, n, uv_hrtime());
}

static void on_sub_recv(void *owner, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    sv_sublink *s = owner;
    sv_assoc *a = s->a;
    if (a->closing || a->detached || !pace_allows(a))
        return; /* a detached XUDP association has nobody to answer: dropped, not billed */
    sv_dest src;
    sockaddr_to_dest(from, &src);
    if (a->src != NULL) { /* inside a stream: the connection frames and meters the wire */
        sv_meter_add(&s->flow->bytes->down, (uint64_t)n);
        pace_charge(a, n);
        a->src->reply(a->src_ctx, &src, p, n);
        return;
    }
    uint8_t *out = a->w->scratch;
    ssize_t len = a->dgram->seal(a->session, a->handler->creds, a->user_idx,
                                 (int64_t)(sv__wall_ms() / 1000), &src, p, n, out,
                                 SV_SCRATCH / 2, &a->w->udp_seal, NULL);
    if (len < 0)
        return;
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)len);
    if (uv_udp_try_send(&a->l->udp, &b, 1, (const struct sockaddr *)&a->client) >= 0) {
        sv_meter_add(&s->flow->bytes->down, (uint64_t)n);
        sv_meter_add(&a->sess->wire->down, (uint64_t)len);
        pace_charge(a, n);
    }
    uv_timer_again(&a->idle);
}

/* the inbound's allow_private as its listener has it now (not when the association
 * opened), so a reload that closes internal destinations reaches live associations too. */
static bool allow_private_now(const sv_assoc *a)
{
    return a->settings_from->handler->allow_private;
}

static void on_sub_sent(void *owner, size_t n)
{
    sv_sublink *s = owner;
    sv_meter_add(&s->flow->bytes->up, n);
    pace_charge(s->a, n);
}

static const sv_ob_dgram_events sub_events = {sub_alloc, on_sub_recv, on_sub_sent, on_sub_closed};

/* A new sub-link of @p a for datagram request @p rq, routed into @p r (connector.h): the least
 * recently used one goes first when there are SV_UDP_SUBLINKS_MAX; then its flow record, its
 * datagram link on r's target and its registration. @return it, or NULL: the datagram is dropped
 * (no memory, no address family bound, or its version was drained). */
static sv_sublink *sub_open(sv_assoc *a, const sv_connector_req *rq, sv_connector_result *r)
{
    if (a->n_subs == SV_UDP_SUBLINKS_MAX) {
        unsigned lru = 0;
        for (unsigned i = 1; i < a->n_subs; i++)
            if (a->subs[i]->last_used < a->subs[lru]->last_used)
                lru = i;
        sub_end(a->subs[lru], SV_CLOSE_LIMIT); /* SV_UDP_SUBLINKS_MAX: the oldest goes */
        a->subs[lru] = a->subs[--a->n_subs];
    }
    sv_sublink *s = calloc(1, sizeof *s);
    if (s == NULL || sv__connector_record(a->w, rq, s, r) != SV_CONNECT_OK) {
        free(s);
        return NULL;
    }
    s->a = a;
    s->flow = r->flow;
    s->target = r->target;
    sv_target_ref(r->target);
    a->pending++; /* released by on_sub_closed */
    s->link.ev = &sub_events;
    s->link.owner = s;
    sv__connector_dgram(a->w, r, &s->link);
    if (s->link.ops->dgram_open(&s->link) != 0) {
        sub_end(s, SV_CLOSE_ERROR); /* seed 002: no family bound; the datagram is dropped */
        return NULL;
    }
    s->registered = true;
    sv_connect_verdict v = sv__connector_opened(a->w, s->flow, s->target);
    if (v != SV_CONNECT_OK) {
        sub_end(s, sv__connector_reason(v)); /* its version was drained (seed 000 "Guarded"):
                                                 the datagram is dropped */
        return NULL;
    }
    a->subs[a->n_subs++] = s;
    return s;
}

/* One datagram of @p a to @p d through the connector (connector.h), on the current plane: a
 * refused one (its outbound carries no datagrams, or an internal address) is dropped unbilled;
 * else it goes through the sub-link of its outbound version and resolver (dns routes),
 * opened at need. */
void sv__assoc_send(sv_assoc *a, const sv_dest *d, const uint8_t *p, size_t n)
{
    if (a->closing || !pace_allows(a))
        return;
    sv_connector_req rq = {.network = SV_NET_UDP, .dest = d, .inbound = a->handler->tag,
                           .source = (const struct sockaddr *)&a->client,
                           .principal = a->principal, .sess = a->sess,
                           .allow_private = allow_private_now(a)};
    sv_connector_result r;
    if (sv__connector_route(a->w, a->w->plane, &rq, &r) != SV_CONNECT_OK)
        return; /* seed 002: dropped like a blocked datagram, not billed */
    sv_sublink *s = NULL;
    for (unsigned i = 0; i < a->n_subs; i++)
        if (a->subs[i]->target == r.target && a->subs[i]->link.env.resolver == r.resolver)
            s = a->subs[i]; /* one sub-link per outbound and resolver (dns routes) */
    if (s == NULL)
        s = sub_open(a, &rq, &r);
    if (s == NULL)
        return;
    s->last_used = ++a->clock;
    s->link.ops->dgram_send(&s->link, d, p, n, r.allow_internal);
}

static sv_assoc *assoc_find(sv_worker *w, sv_wlistener *l, const struct sockaddr *from)
{
    socklen_t len = from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->assocs) {
        sv_assoc *a = sv_container_of(pos, sv_assoc, link);
        if (a->l == l && !a->closing && memcmp(&a->client, from, len) == 0)
            return a;
    }
    return NULL;
}

static sv_assoc *assoc_new(sv_wlistener *l, const sv_dgram_ops *ops, const struct sockaddr *from,
                           int user_idx)
{
    sv_worker *w = l->w;
    sv_handler *h = l->handler;
    char source[sizeof ((sv_session_info *)0)->source];
    sv__addr_format(from, source, sizeof source);
    sv_principal *p = h->principals[user_idx];
    sv_assoc *a = calloc(1, sizeof *a + ops->session_size);
    sv_session_rec *sess = sv_session_rec_new(h->tag, source);
    if (a == NULL || sess == NULL) {
        free(a);
        free(sess);
        return NULL;
    }
    sess->worker = w->index;
    sess->info.udp = true;
    sess->info.started_ms = sv__wall_ms();
    sv_tracker_session_open(w->shared->tracker, sess);
    if (sv_tracker_session_admit(w->shared->tracker, sess, p->id, sv_principal_device_limit(p),
                                 false) != SV_DEVICE_ADMITTED) {
        sv_tracker_session_close(w->shared->tracker, sess); /* the tracker frees it */
        free(a);
        return NULL; /* a new IP over the device limit; silent, counted */
    }
    a->w = w;
    a->l = l;
    l->n_users_of++;
    a->settings_from = l;
    a->handler = h;
    sv_handler_ref(h);
    a->user_idx = user_idx;
    a->principal = p;
    sv_principal_ref(p);
    a->user = p->id;
    memcpy(&a->client, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    a->sess = sess;
    sess->owner = a;
    a->dgram = ops;
    uv_timer_init(&w->loop, &a->idle);
    a->idle.data = a;
    a->pending = 1;
    uv_timer_start(&a->idle, on_idle, SV_UDP_IDLE_MS, SV_UDP_IDLE_MS);
    sv_list_insert_tail(&w->assocs, &a->link);
    return a;
}

/* a datagram whose first guesses missed waits for its scan off the loop. */
typedef struct udp_scan {
    sv_list link;           /* in the worker's udp_scans */
    sv_wlistener *l;        /* held (n_users_of) until the answer */
    sv_scan_job *job;
    struct sockaddr_storage from;
} udp_scan;

#define UDP_NO_SCAN (-2) /* dgram_in: no scan ran for this datagram */

static void dgram_in(sv_wlistener *l, uint8_t *p, size_t n, const struct sockaddr *from,
                     int scanned);

static void on_udp_scan(void *ctx, int user, uint8_t *in, size_t n)
{
    udp_scan *u = ctx;
    sv_list_unlink(&u->link);
    if (!u->l->stopped && user >= 0)
        dgram_in(u->l, in, n, (const struct sockaddr *)&u->from, user);
    sv__wlistener_release(u->l);
    free(u);
}

/* Scan the datagram off the loop with @p scan (the datagram core's); dropped when refused (over
 * the budget, the queue bound). */
static void udp_scan_start(sv_wlistener *l,
                           int (*scan)(const void *creds, const uint8_t *in, size_t n,
                                       unsigned *trials),
                           const uint8_t *p, size_t n, const struct sockaddr *from)
{
    udp_scan *u = calloc(1, sizeof *u);
    if (u == NULL)
        return;
    u->job = sv__scan_start(l->w, l->handler, scan, p, n, on_udp_scan, u);
    if (u->job == NULL) {
        free(u);
        return;
    }
    u->l = l;
    l->n_users_of++;
    memcpy(&u->from, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                       : sizeof(struct sockaddr_in));
    sv_list_insert_tail(&l->w->udp_scans, &u->link);
}

void sv__udp_scans_cancel(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->udp_scans) {
        udp_scan *u = sv_container_of(pos, udp_scan, link);
        sv_list_unlink(pos);
        sv__scan_cancel(u->job);
        sv__wlistener_release(u->l);
        free(u);
    }
}

/* Open datagram @p p of @p n bytes from @p from with @p hd's credential table (dgram.h). A
 * guided core (with scan) walks the users so: association @p a's own user alone
 * (its datagrams are its user's or no one's), or @p scanned, the user a scan found, alone (a
 * match moves to the order's front), else the user last seen from this IP, then the worker's
 * order, at most SV_SS_GUESSES keys; past them, a datagram of no association is scanned off the
 * loop. @return 0 with @p in filled, or a negative errno: the datagram is not served now. */
static int dgram_open(sv_wlistener *l, const sv_dgram_ops *ops, const sv_assoc *a,
                      const sv_handler *hd, uint8_t *p, size_t n, const struct sockaddr *from,
                      int scanned, sv_dgram_in *in)
{
    sv_dgram_guide g = {.hint = -1}, *guide = NULL;
    if (ops->scan != NULL) {
        guide = &g;
        sv__wl_dgram_guide(l, hd, from, &g);
        if (scanned != UDP_NO_SCAN)
            g.hint = scanned, g.limit = 1;
        if (a != NULL)
            g.hint = a->user_idx, g.limit = 1;
    }
    int rc = ops->open(hd->creds, (int64_t)(sv__wall_ms() / 1000), guide, p, n, in,
                       &l->w->udp_open);
    if (g.trials > 0 && scanned == UDP_NO_SCAN)
        sv__ss_count(l->w->shared, g.trials);
    if (rc == -EAGAIN && a == NULL && scanned == UDP_NO_SCAN)
        udp_scan_start(l, ops->scan, p, n, from);
    return rc;
}

/* The live association of @p l whose session opened datagram @p in belongs to, or NULL. */
static sv_assoc *session_find(sv_wlistener *l, const sv_dgram_ops *ops, const sv_dgram_in *in)
{
    sv_assoc *a = NULL;
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &l->w->assocs) {
        sv_assoc *x = sv_container_of(pos, sv_assoc, link);
        if (x->l == l && x->dgram == ops && !x->closing && ops->session_match(x->session, in))
            a = x;
    }
    return a;
}

/* A new association of @p l for opened datagram @p in from @p from (its first), its session set
 * up by the core (Shadowsocks 2022: our own random session ID); a guided core's listener
 * remembers the IP's user. */
static sv_assoc *assoc_start(sv_wlistener *l, const sv_dgram_ops *ops, const sv_handler *hd,
                             const struct sockaddr *from, const sv_dgram_in *in)
{
    if (ops->scan != NULL)
        sv__wl_learn(l, hd, from, in->user);
    sv_assoc *a = assoc_new(l, ops, from, in->user);
    if (a != NULL && ops->session_init != NULL && ops->session_init(a->session, in, NULL) != 0) {
        assoc_close(a);
        return NULL;
    }
    return a;
}

/* One datagram on @p l's socket (dgram.h): opened with the current keys (an association's own
 * handler's, when it is found by the client's address); its association is the client's
 * session (new: the user's), which accepts it (a packet ID passes the session's window) and,
 * keyed by session, follows the client to its latest source address. @p scanned: the user a
 * scan found, or UDP_NO_SCAN. */
static void dgram_in(sv_wlistener *l, uint8_t *p, size_t n, const struct sockaddr *from,
                     int scanned)
{
    const sv_dgram_ops *ops = sv_dgram_ops_for(&l->handler->in);
    if (ops == NULL)
        return;
    bool by_session = ops->session_match != NULL;
    sv_assoc *a = by_session ? NULL : assoc_find(l->w, l, from);
    const sv_handler *hd = a != NULL ? a->handler : l->handler;
    sv_dgram_in in;
    if (dgram_open(l, ops, a, hd, p, n, from, scanned, &in) != 0)
        return; /* not ours, stale, refused, or scanning: no answer, no log */
    if (by_session) {
        a = session_find(l, ops, &in);
        if (a != NULL && a->principal != hd->principals[in.user])
            return;
    } else if (a != NULL && in.user != a->user_idx) {
        return;
    }
    if (a == NULL && (a = assoc_start(l, ops, hd, from, &in)) == NULL)
        return;
    if (ops->session_accept != NULL && !ops->session_accept(a->session, &in))
        return; /* a replayed or too old packet */
    if (by_session)
        memcpy(&a->client, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                             : sizeof(struct sockaddr_in));
    sv_meter_add(&a->sess->wire->up, (uint64_t)n);
    uv_timer_again(&a->idle);
    sv__assoc_send(a, &in.dest, in.payload, in.len);
}

void sv__udp_on_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                     unsigned flags)
{
    sv_wlistener *l = h->data;
    if (n <= 0 || from == NULL || (flags & UV_UDP_PARTIAL))
        return;
    dgram_in(l, (uint8_t *)buf->base, (size_t)n, from, UDP_NO_SCAN);
}

sv_assoc *sv__assoc_open_in_stream(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                                   sv_principal *p, sv_session_rec *sess,
                                   const struct sockaddr *client, const sv_dgram_source *src,
                                   void *ctx)
{
    sv_assoc *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->w = w;
    a->settings_from = l;
    a->src = src;
    a->src_ctx = ctx;
    a->handler = h;
    sv_handler_ref(h);
    a->principal = p;
    sv_principal_ref(p);
    a->user = p->id;
    a->user_idx = -1;
    memcpy(&a->client, client, client->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                              : sizeof(struct sockaddr_in));
    a->sess = sess;
    uv_timer_init(&w->loop, &a->idle); /* the connection bounds idleness; never started */
    a->idle.data = a;
    a->pending = 1;
    sv_list_insert_tail(&w->assocs, &a->link);
    return a;
}

/* The owner of a detached XUDP association: replies are dropped before this is reached
 * (on_sub_recv), and nobody waits for its release. */
static void detached_reply(void *ctx, const sv_dest *from, const uint8_t *p, size_t n)
{
    (void)ctx, (void)from, (void)p, (void)n;
}
static void detached_released(void *ctx) { (void)ctx; }
static const sv_dgram_source detached_src = {detached_reply, detached_released, NULL};

sv_assoc *sv__assoc_open_xudp(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                              sv_principal *p, sv_session_rec *sess,
                              const struct sockaddr *client, const uint8_t *gid,
                              const sv_dgram_source *src, void *ctx)
{
    if (sv_xudp_gid_none(gid)) /* §5.3 item 3: all zeros is a plain UDP session */
        return sv__assoc_open_in_stream(w, l, h, p, sess, client, src, ctx);
    sv_xudp_key key = {.listener = l, .user = p->id};
    memcpy(key.gid, gid, sizeof key.gid);
    sv_xudp_entry *e = sv_xudp_find(&w->xudp, &key);
    if (e == NULL) {
        sv_assoc *a = sv__assoc_open_in_stream(w, l, h, p, sess, client, src, ctx);
        if (a != NULL && sv_xudp_add(&w->xudp, &key, a) == 0)
            a->xudp = true;
        return a;
    }
    sv_assoc *a = e->assoc;
    if (a->detached) {
        sv_xudp_attach(&w->xudp, a);
        a->detached = false;
        sv__wlistener_release(a->held_l); /* the new connection holds the same listener */
        a->held_l = NULL;
    } else {
        a->src->taken(a->src_ctx); /* its old sub-flow ends; no release comes for it */
    }
    a->src = src;
    a->src_ctx = ctx;
    a->sess = sess;
    if (a->handler != h) { /* a reload swapped the listener's handler meanwhile */
        sv_handler_ref(h);
        sv_handler_unref(a->handler);
        a->handler = h;
    }
    if (a->principal != p) {
        sv_principal_ref(p);
        sv_principal_unref(a->principal);
        a->principal = p;
    }
    memcpy(&a->client, client, client->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                              : sizeof(struct sockaddr_in));
    return a;
}

void sv__assoc_let_go(sv_assoc *a)
{
    if (!a->xudp || a->closing || a->detached) {
        assoc_close(a);
        return;
    }
    const sv_dgram_source *src = a->src;
    void *ctx = a->src_ctx;
    a->src = &detached_src;
    a->src_ctx = NULL;
    a->sess = NULL;
    a->detached = true;
    a->held_l = (sv_wlistener *)a->settings_from;
    a->held_l->n_users_of++;
    sv_assoc *evicted = sv_xudp_detach(&a->w->xudp, a, uv_now(&a->w->loop));
    src->released(ctx); /* the owner may go now */
    if (evicted != NULL) /* over SV_XUDP_DETACHED_MAX: the oldest detached one goes */
        assoc_end(evicted, SV_CLOSE_LIMIT);
}

void sv__udp_sweep(sv_worker *w)
{
    sv_assoc *a;
    while ((a = sv_xudp_expired(&w->xudp, uv_now(&w->loop))) != NULL)
        assoc_end(a, SV_CLOSE_IDLE);
}

void sv__udp_scan_flags(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->assocs) {
        sv_assoc *a = sv_container_of(pos, sv_assoc, link);
        if (a->src == NULL && atomic_load(&a->sess->close_requested)) {
            assoc_end(a, SV_CLOSE_SESSION);
            continue;
        }
        for (unsigned i = 0; i < a->n_subs;) {
            if (atomic_load(&a->subs[i]->flow->kill)) {
                sub_end(a->subs[i], SV_CLOSE_KILL);
                a->subs[i] = a->subs[--a->n_subs];
            } else {
                i++;
            }
        }
    }
}

void sv__udp_revoke(sv_worker *w, sv_wlistener *l)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->assocs) {
        sv_assoc *a = sv_container_of(pos, sv_assoc, link);
        if ((a->l == l || a->held_l == l) &&
            sv_handler_find(l->handler, a->handler, a->principal) < 0)
            assoc_end(a, SV_CLOSE_REVOKE);
    }
}

void sv__udp_close_all(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->assocs)
        assoc_end(sv_container_of(pos, sv_assoc, link), SV_CLOSE_SHUTDOWN);
}

void sv__udp_close_listener(sv_worker *w, sv_wlistener *l)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->assocs) {
        sv_assoc *a = sv_container_of(pos, sv_assoc, link);
        if (a->l == l || a->held_l == l)
            assoc_close(a);
    }
}
