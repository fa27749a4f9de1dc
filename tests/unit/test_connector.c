/*
 * Unit tests of the connector (supervisor/connector.h, issue 25 "One connector"), for each kind
 * of flow it serves, called as its call sites call it: a TCP flow (conn.c open_flow), a
 * sub-flow with a sniffed name (conn.c sub_route), a UDP datagram's sub-link (udp.c
 * sv__assoc_send). Each test builds a worker (its loop, tracker, audit set), a plane of compiled
 * routes and outbound versions, and dials either a fake outbound of its own (an sv_outbound_ops
 * that records its calls) or the real direct outbound to a listener on 127.0.0.1:
 *  - a routed destination gets its target, its resolver and a flow record, its link is pointed
 *    at the target and dialled, and the flow registers;
 *  - an internal destination is refused (SV_CONNECT_INTERNAL, close reason error) with no flow
 *    record and no dial, unless the inbound allows private destinations or the route names it;
 *  - a blocked destination (an audit rule to a blackhole) notes its audit hit and is refused at
 *    the blackhole's dial, or as a datagram that its outbound cannot carry;
 *  - a flow whose version is drained while it dials is registered, then refused (close reason
 *    kill);
 *  - a dns route's flow resolves on that route's resolver, made once per worker.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "supervisor/runtime.h"
#include "supervisor/track/audit.h"

#define USER 42
#define AUDIT_ID 7
#define EPOCH 5

/* ---- a fake outbound: records every call -------------------------------------------------- */

typedef struct calls {
    int open, close, dgram_open, dgram_send, dgram_close;
    sv_dest last; /* the last destination opened or sent to */
    bool last_allow_internal;
} calls;

static calls g_calls;

static int fake_open(sv_ob_stream *s, const sv_dest *d)
{
    (void)s;
    g_calls.open++;
    g_calls.last = *d;
    return 0; /* dialling: connected would follow */
}
static void fake_read(sv_ob_stream *s, bool on) { (void)s, (void)on; }
static int fake_try_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    (void)s, (void)iov, (void)n;
    return 0;
}
static int fake_write(sv_ob_stream *s, const uv_buf_t *iov, unsigned n)
{
    (void)s, (void)iov, (void)n;
    return -1;
}
static int fake_shutdown(sv_ob_stream *s)
{
    (void)s;
    return 0;
}
static void fake_close(sv_ob_stream *s)
{
    (void)s;
    g_calls.close++;
}
static int fake_dgram_open(sv_ob_dgram *g)
{
    (void)g;
    g_calls.dgram_open++;
    return 0;
}
static void fake_dgram_send(sv_ob_dgram *g, const sv_dest *d, const uint8_t *p, size_t n,
                            bool allow_internal)
{
    (void)g, (void)p, (void)n;
    g_calls.dgram_send++;
    g_calls.last = *d;
    g_calls.last_allow_internal = allow_internal;
}
static void fake_dgram_close(sv_ob_dgram *g)
{
    (void)g;
    g_calls.dgram_close++;
}

static const sv_outbound_ops fake_ops = {
    .name = "fake", .open = fake_open, .read = fake_read, .try_write = fake_try_write,
    .write = fake_write, .shutdown = fake_shutdown, .close = fake_close,
    .dgram_open = fake_dgram_open, .dgram_send = fake_dgram_send,
    .dgram_close = fake_dgram_close,
};

/* ---- fixture: a worker, its plane, a session ---------------------------------------------- */

enum { T_DIRECT, T_ALT, T_BLOCK, N_TARGETS };

typedef struct fx {
    sv_shared shared;
    sv_worker *w;
    sv_plane *plane;
    sv_target *t[N_TARGETS];
    sv_session_rec *sess;
    sv_principal user;
    struct sockaddr_in client;
} fx;

static void wake(void *ctx, unsigned worker) { (void)ctx, (void)worker; }

/* Rules: 0 audited.example → block (audit rule AUDIT_ID); 1 127.0.0.1/32 → direct (names the
 * destination); 2 sniffed.example → alt; 3 dns.example → direct, resolved by 127.0.0.1:5353;
 * default direct. */
static sv_routes *compile_routes(void)
{
    static sv_route_match m0 = {.kind = SV_MATCH_DOMAIN, .text = "audited.example"};
    static sv_route_match m1 = {.kind = SV_MATCH_CIDR,
                                .cidr = {.family = AF_INET, .prefix = 32, .addr = {127, 0, 0, 1}}};
    static sv_route_match m2 = {.kind = SV_MATCH_DOMAIN, .text = "sniffed.example"};
    static sv_route_match m3 = {.kind = SV_MATCH_DOMAIN, .text = "dns.example"};
    sv_route_rule rules[] = {
        {.matchers = &m0, .n_matchers = 1, .outbound = "block", .audit = true,
         .audit_id = AUDIT_ID},
        {.matchers = &m1, .n_matchers = 1, .outbound = "direct"},
        {.matchers = &m2, .n_matchers = 1, .outbound = "alt"},
        {.matchers = &m3, .n_matchers = 1, .outbound = "direct", .dns_server = "127.0.0.1:5353"},
    };
    sv_route_spec spec = {.rules = rules, .n_rules = 4, .default_outbound = "direct"};
    sv_routes *r = NULL;
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&spec, &r, &err), 0);
    return r;
}

static int setup(void **state)
{
    static fx f;
    memset(&f, 0, sizeof f);
    memset(&g_calls, 0, sizeof g_calls);
    f.shared.tracker = sv_tracker_new(1, wake, NULL);
    f.shared.audit = sv_audit_new();
    assert_non_null(f.shared.tracker);
    assert_non_null(f.shared.audit);
    f.w = calloc(1, sizeof *f.w);
    assert_non_null(f.w);
    f.w->shared = &f.shared;
    assert_int_equal(uv_loop_init(&f.w->loop), 0);

    f.t[T_DIRECT] = sv_target_new(SV_OUTBOUND_DIRECT, "direct", 1);
    f.t[T_ALT] = sv_target_new(SV_OUTBOUND_DIRECT, "alt", 3);
    f.t[T_BLOCK] = sv_target_new(SV_OUTBOUND_BLACKHOLE, "block", 1);
    f.t[T_DIRECT]->ops = &fake_ops;
    f.t[T_ALT]->ops = &fake_ops;
    sv_routes_ref *rr = calloc(1, sizeof *rr);
    assert_non_null(rr);
    atomic_init(&rr->refs, 1);
    rr->routes = compile_routes();
    size_t n = sv_routes_n_slots(rr->routes);
    sv_target *by_slot[N_TARGETS];
    assert_true(n <= N_TARGETS);
    for (size_t i = 0; i < n; i++) {
        const char *tag = sv_routes_slot_tag(rr->routes, i);
        for (int k = 0; k < N_TARGETS; k++)
            if (strcmp(f.t[k]->tag, tag) == 0)
                by_slot[i] = f.t[k];
    }
    f.plane = sv_plane_new(rr, by_slot, n, EPOCH);
    assert_non_null(f.plane);
    sv_routes_ref_unref(rr); /* the plane holds it */
    f.w->plane = f.plane;

    f.sess = sv_session_rec_new("in1", "127.0.0.1:40000");
    assert_non_null(f.sess);
    sv_tracker_session_open(f.shared.tracker, f.sess);
    f.user.id = USER;
    f.client = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(40000),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    for (size_t i = 0; i < SV_ROUTE_RESOLVERS_MAX; i++)
        sv_resolver_close(f->w->route_resolvers[i].r);
    sv_addrset_unref(f->w->own_addrs);
    uv_run(&f->w->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->w->loop), 0); /* every handle the tests opened closed */
    sv_tracker_session_close(f->shared.tracker, f->sess);
    sv_plane_unref(f->plane);
    for (int k = 0; k < N_TARGETS; k++)
        sv_target_unref(f->t[k]);
    sv_audit_free(f->shared.audit);
    sv_tracker_free(f->shared.tracker);
    free(f->w);
    return 0;
}

/* ---- the kinds of flow, called as their call sites call the connector --------------------- */

typedef struct kind {
    const char *name;
    enum sv_network network;
    const char *sniffed; /* the name sniffed from its first payload, or NULL */
} kind;

static const kind kinds[] = {
    {"TCP flow", SV_NET_TCP, NULL},
    {"sub-flow", SV_NET_TCP, "sniffed.example"},
    {"UDP sub-link", SV_NET_UDP, NULL},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

/* A link's events while a test does not watch them. */
static void quiet_connected(void *owner, int status) { (void)owner, (void)status; }
static void quiet_alloc(void *owner, uv_buf_t *buf)
{
    static char room[64];
    (void)owner;
    *buf = uv_buf_init(room, sizeof room);
}
static void quiet_read(void *owner, ssize_t n, const uv_buf_t *buf)
{
    (void)owner, (void)n, (void)buf;
}
static void quiet_written(void *owner, int status) { (void)owner, (void)status; }
static void quiet_closed(void *owner) { (void)owner; }
static void quiet_recv(void *owner, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    (void)owner, (void)from, (void)p, (void)n;
}
static void quiet_sent(void *owner, size_t n) { (void)owner, (void)n; }
static const sv_ob_stream_events quiet_stream = {quiet_connected, quiet_alloc, quiet_read,
                                                 quiet_written, quiet_closed};
static const sv_ob_dgram_events quiet_dgram = {quiet_alloc, quiet_recv, quiet_sent,
                                               quiet_closed};

/* A flow of kind @p k on its way: the connector's result and the link it dials. */
typedef struct flow {
    sv_connector_req rq;
    sv_connector_result r;
    sv_ob_stream ob;
    sv_ob_dgram g;
    int dial; /* what the link's open returned */
} flow;

static sv_dest ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port,
                   enum sv_network net)
{
    sv_dest x = {.atyp = SV_ATYP_IPV4, .port = port, .network = net};
    x.ip[0] = a, x.ip[1] = b, x.ip[2] = c, x.ip[3] = d;
    return x;
}

static sv_dest name(const char *host, uint16_t port, enum sv_network net)
{
    sv_dest x = {.atyp = SV_ATYP_DOMAIN, .port = port, .network = net};
    snprintf(x.host, sizeof x.host, "%s", host);
    return x;
}

/* Connect @p fl, a flow of kind @p k to @p d, acting for @p who (NULL: nobody), under
 * allow_private @p allow: a stream as conn.c does (route and record in one call, then the
 * stream's dial), a sub-link as udp.c does (route, record, its datagram link's open).
 * @return the connector's verdict; fl->dial holds the link's open when it was reached. */
static sv_connect_verdict connect_kind(fx *f, const kind *k, const sv_dest *d,
                                       const sv_principal *who, bool allow, flow *fl)
{
    memset(fl, 0, sizeof *fl);
    fl->dial = 1; /* not dialled */
    fl->ob.ev = &quiet_stream;
    fl->ob.owner = fl;
    fl->g.ev = &quiet_dgram;
    fl->g.owner = fl;
    fl->rq = (sv_connector_req){.network = k->network, .dest = d, .sniffed = k->sniffed,
                                .inbound = "in1", .source = (struct sockaddr *)&f->client,
                                .principal = who, .sess = f->sess, .allow_private = allow};
    sv_connect_verdict v;
    if (k->network == SV_NET_TCP) {
        v = sv__connector_open(f->w, f->plane, &fl->rq, fl, &fl->r);
        if (v == SV_CONNECT_OK) {
            sv__connector_stream(f->w, &fl->r, &fl->ob);
            fl->dial = fl->ob.ops->open(&fl->ob, d);
        }
        return v;
    }
    v = sv__connector_route(f->w, f->plane, &fl->rq, &fl->r);
    if (v != SV_CONNECT_OK)
        return v;
    assert_null(fl->r.flow); /* a datagram's record comes with its sub-link only */
    v = sv__connector_record(f->w, &fl->rq, fl, &fl->r);
    if (v == SV_CONNECT_OK) {
        sv__connector_dgram(f->w, &fl->r, &fl->g);
        fl->dial = fl->g.ops->dgram_open(&fl->g);
    }
    return v;
}

/* Close @p fl's link and free its unregistered record (the owner's part). */
static void drop(flow *fl)
{
    if (fl->dial != 1 && fl->rq.network == SV_NET_TCP)
        fl->ob.ops->close(&fl->ob);
    else if (fl->dial != 1)
        fl->g.ops->dgram_close(&fl->g);
    free(fl->r.flow);
}

/* The live flows of @p f's tracker. */
static long live_flows(fx *f, sv_flow_info **out)
{
    long n = sv_tracker_flows(f->shared.tracker, out);
    assert_true(n >= 0);
    return n;
}

/* ---- a routed destination: its target and a flow record ------------------------------------ */

static void a_routed_destination_gets_its_target_and_a_flow_record(void **state)
{
    fx *f = *state;
    for (size_t i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        memset(&g_calls, 0, sizeof g_calls);
        sv_dest d = name("example.com", 443, k->network);
        flow fl;
        if (connect_kind(f, k, &d, &f->user, false, &fl) != SV_CONNECT_OK)
            fail_msg("%s: refused", k->name);
        /* the sniffed name is an extra candidate: the sub-flow's picks rule 2 */
        sv_target *want = k->sniffed != NULL ? f->t[T_ALT] : f->t[T_DIRECT];
        assert_ptr_equal(fl.r.target, want);
        assert_int_equal(fl.r.dec.rule, k->sniffed != NULL ? 2 : -1);
        assert_int_equal(fl.r.epoch, EPOCH);
        assert_null(fl.r.resolver); /* the worker's own (none here) */
        assert_false(fl.r.allow_internal);
        /* its record */
        sv_flow_rec *rec = fl.r.flow;
        assert_non_null(rec);
        assert_ptr_equal(rec->owner, &fl);
        assert_string_equal(rec->info.destination, "example.com:443");
        assert_string_equal(rec->info.sniffed, k->sniffed != NULL ? k->sniffed : "");
        assert_string_equal(rec->info.outbound, want->id);
        assert_string_equal(rec->info.inbound, "in1");
        assert_int_equal(rec->info.network, k->network);
        assert_int_equal(rec->info.user, USER);
        assert_int_equal(rec->info.session, f->sess->info.id);
        assert_int_equal(rec->info.rule, fl.r.dec.rule);
        assert_int_equal(rec->info.epoch, EPOCH);
        /* its link: pointed at the target, then dialled */
        assert_int_equal(fl.dial, 0);
        if (k->network == SV_NET_TCP) {
            assert_int_equal(g_calls.open, 1);
            assert_string_equal(g_calls.last.host, "example.com");
            assert_ptr_equal(fl.ob.env.sock, &want->sock);
            assert_ptr_equal(fl.ob.env.loop, &f->w->loop);
            assert_false(fl.ob.allow_internal);
        } else {
            assert_int_equal(g_calls.dgram_open, 1);
            assert_ptr_equal(fl.g.env.sock, &want->sock);
            assert_ptr_equal(fl.g.env.own_addrs, &f->w->own_addrs);
        }
        /* registered once its dial completed */
        assert_int_equal(sv__connector_opened(f->w, rec, fl.r.target), SV_CONNECT_OK);
        sv_flow_info *v = NULL;
        assert_int_equal(live_flows(f, &v), 1);
        assert_int_equal(v[0].id, rec->info.id);
        assert_string_equal(v[0].outbound, want->id);
        free(v);
        sv_tracker_flow_close(f->shared.tracker, rec);
        fl.r.flow = NULL;
        drop(&fl);
    }
    sv_audit_hit *hits = NULL;
    assert_int_equal(sv_audit_take(f->shared.audit, &hits), 0); /* no audit rule matched */
    free(hits);
}

/* ---- an internal destination: refused with its reason --------------------------------------- */

static void an_internal_destination_is_refused_with_its_reason(void **state)
{
    fx *f = *state;
    sv_ip16 own;
    assert_true(sv_ip16_from(AF_INET, (const uint8_t[]){203, 0, 113, 9}, &own));
    f->w->own_addrs = sv_addrset_new(&own, 1);
    for (size_t i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        memset(&g_calls, 0, sizeof g_calls);
        sv_dest refused[] = {ip4(10, 0, 0, 1, 80, k->network), ip4(127, 0, 0, 2, 53, k->network),
                             ip4(169, 254, 169, 254, 80, k->network),
                             ip4(203, 0, 113, 9, 22, k->network)}; /* the node's own */
        for (size_t j = 0; j < sizeof refused / sizeof refused[0]; j++) {
            flow fl;
            sv_connect_verdict v = connect_kind(f, k, &refused[j], &f->user, false, &fl);
            if (v != SV_CONNECT_INTERNAL)
                fail_msg("%s: destination %zu: verdict %d", k->name, j, (int)v);
            assert_int_equal(sv__connector_reason(v), SV_CLOSE_ERROR);
            assert_null(fl.r.flow);
            assert_int_equal(fl.dial, 1);
        }
        assert_int_equal(g_calls.open + g_calls.dgram_open, 0); /* nothing dialled */
        /* allow_private lets it through; a rule naming the destination does too */
        flow fl;
        sv_dest priv = ip4(10, 0, 0, 1, 80, k->network);
        assert_int_equal(connect_kind(f, k, &priv, &f->user, true, &fl), SV_CONNECT_OK);
        assert_true(fl.r.allow_internal);
        drop(&fl);
        sv_dest named = ip4(127, 0, 0, 1, 8080, k->network);
        assert_int_equal(connect_kind(f, k, &named, &f->user, false, &fl), SV_CONNECT_OK);
        assert_true(fl.r.dec.names_dest);
        assert_true(fl.r.allow_internal);
        if (k->network == SV_NET_TCP)
            assert_true(fl.ob.allow_internal);
        drop(&fl);
        /* a name is judged by what it resolves to, at the dial */
        sv_dest host = name("localhost", 80, k->network);
        assert_int_equal(connect_kind(f, k, &host, &f->user, false, &fl), SV_CONNECT_OK);
        assert_false(fl.r.allow_internal);
        drop(&fl);
    }
    sv_flow_info *v = NULL;
    assert_int_equal(live_flows(f, &v), 0); /* no flow was registered */
    free(v);
}

/* ---- a blocked destination: its audit hit --------------------------------------------------- */

static void a_blocked_destination_is_refused_with_its_audit_hit(void **state)
{
    fx *f = *state;
    for (size_t i = 0; i < N_KINDS; i++) {
        const kind *k = &kinds[i];
        memset(&g_calls, 0, sizeof g_calls);
        sv_dest d = name("audited.example", 443, k->network);
        flow fl;
        sv_connect_verdict v = connect_kind(f, k, &d, &f->user, false, &fl);
        assert_ptr_equal(fl.r.target, f->t[T_BLOCK]);
        assert_int_equal(fl.r.dec.rule, 0);
        if (k->network == SV_NET_TCP) {
            /* routed to the blackhole, which refuses at the dial */
            assert_int_equal(v, SV_CONNECT_OK);
            assert_non_null(fl.r.flow);
            assert_string_equal(fl.r.flow->info.outbound, "block@v1");
            assert_true(fl.dial < 0);
            drop(&fl);
        } else {
            /* a datagram its outbound cannot carry: dropped, no record, no link */
            assert_int_equal(v, SV_CONNECT_NO_DATAGRAMS);
            assert_int_equal(sv__connector_reason(v), SV_CLOSE_ERROR);
            assert_null(fl.r.flow);
            assert_int_equal(fl.dial, 1);
        }
        assert_int_equal(g_calls.open + g_calls.dgram_open, 0);
        sv_audit_hit *hits = NULL;
        if (sv_audit_take(f->shared.audit, &hits) != 1)
            fail_msg("%s: no audit hit", k->name);
        assert_string_equal(hits[0].inbound, "in1");
        assert_int_equal(hits[0].user, USER);
        assert_int_equal(hits[0].rule, AUDIT_ID);
        free(hits);
        /* a flow that acts for nobody notes none */
        v = connect_kind(f, k, &d, NULL, false, &fl);
        assert_ptr_equal(fl.r.target, f->t[T_BLOCK]);
        if (v == SV_CONNECT_OK)
            drop(&fl);
        hits = NULL;
        assert_int_equal(sv_audit_take(f->shared.audit, &hits), 0);
        free(hits);
    }
}

/* ---- a drained target version: refused at registration ------------------------------------- */

static void a_drained_target_version_is_refused(void **state)
{
    fx *f = *state;
    flow fl[N_KINDS];
    for (size_t i = 0; i < N_KINDS; i++) {
        sv_dest d = ip4(93, 184, 216, 34, 443, kinds[i].network);
        kind k = kinds[i];
        k.sniffed = NULL; /* every one on direct@v1 */
        assert_int_equal(connect_kind(f, &k, &d, &f->user, false, &fl[i]), SV_CONNECT_OK);
        assert_ptr_equal(fl[i].r.target, f->t[T_DIRECT]);
        assert_int_equal(fl[i].dial, 0);
    }
    sv_target_close(f->t[T_DIRECT]); /* a drain while they dial */
    for (size_t i = 0; i < N_KINDS; i++) {
        sv_connect_verdict v = sv__connector_opened(f->w, fl[i].r.flow, fl[i].r.target);
        if (v != SV_CONNECT_DRAINED)
            fail_msg("%s: verdict %d", kinds[i].name, (int)v);
        assert_int_equal(sv__connector_reason(v), SV_CLOSE_KILL);
    }
    /* registered all the same, so a kill of "direct@v1" reaches them */
    sv_flow_info *v = NULL;
    assert_int_equal(live_flows(f, &v), N_KINDS);
    for (size_t i = 0; i < N_KINDS; i++)
        assert_string_equal(v[i].outbound, "direct@v1");
    free(v);
    for (size_t i = 0; i < N_KINDS; i++) {
        sv_tracker_flow_close(f->shared.tracker, fl[i].r.flow);
        fl[i].r.flow = NULL;
        drop(&fl[i]);
    }
    /* the next flow on the same plane routes to the same version and fails the same way */
    flow again;
    sv_dest d = name("example.com", 80, SV_NET_TCP);
    assert_int_equal(connect_kind(f, &kinds[0], &d, &f->user, false, &again), SV_CONNECT_OK);
    assert_int_equal(sv__connector_opened(f->w, again.r.flow, again.r.target),
                     SV_CONNECT_DRAINED);
    sv_tracker_flow_close(f->shared.tracker, again.r.flow);
    again.r.flow = NULL;
    drop(&again);
}

/* ---- a dns route's resolver --------------------------------------------------------------- */

static void a_dns_route_resolves_on_its_own_resolver(void **state)
{
    fx *f = *state;
    sv_resolver *first = NULL;
    for (size_t i = 0; i < N_KINDS; i++) {
        kind k = kinds[i];
        k.sniffed = NULL;
        sv_dest d = name("dns.example", 443, k.network);
        flow fl;
        assert_int_equal(connect_kind(f, &k, &d, &f->user, false, &fl), SV_CONNECT_OK);
        assert_int_equal(fl.r.dec.rule, 3);
        assert_non_null(fl.r.resolver);
        if (first == NULL)
            first = fl.r.resolver;
        assert_ptr_equal(fl.r.resolver, first); /* made once per worker */
        assert_ptr_equal(k.network == SV_NET_TCP ? fl.ob.env.resolver : fl.g.env.resolver,
                         first);
        drop(&fl);
    }
    assert_ptr_equal(f->w->route_resolvers[0].r, first);
    assert_string_equal(f->w->route_resolvers[0].server, "127.0.0.1:5353");
}

/* ---- the real direct outbound to a listener on 127.0.0.1 ------------------------------------ */

typedef struct live {
    int connected; /* 0: not yet; 1: connected; < 0: failed */
    int closed;
    size_t sent;
    uint8_t buf[2048];
} live;

static void live_connected(void *owner, int status)
{
    live *l = owner;
    l->connected = status == 0 ? 1 : status;
}
static void live_alloc(void *owner, uv_buf_t *buf)
{
    live *l = owner;
    *buf = uv_buf_init((char *)l->buf, sizeof l->buf);
}
static void live_read(void *owner, ssize_t n, const uv_buf_t *buf) { (void)owner, (void)n, (void)buf; }
static void live_written(void *owner, int status) { (void)owner, (void)status; }
static void live_closed(void *owner) { ((live *)owner)->closed = 1; }
static void live_recv(void *owner, const struct sockaddr *from, const uint8_t *p, size_t n)
{
    (void)owner, (void)from, (void)p, (void)n;
}
static void live_sent(void *owner, size_t n) { ((live *)owner)->sent += n; }

static const sv_ob_stream_events live_stream = {live_connected, live_alloc, live_read,
                                                live_written, live_closed};
static const sv_ob_dgram_events live_dgram = {live_alloc, live_recv, live_sent, live_closed};

/* Run @p loop until *@p flag is set, at most ~3 s. */
static void run_until(uv_loop_t *loop, const int *flag)
{
    for (int i = 0; i < 3000 && *flag == 0; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (*flag == 0)
            usleep(1000);
    }
}

/* A socket of @p type bound to 127.0.0.1 on a port the kernel picks (*@p port). */
static int loopback_socket(int type, uint16_t *port)
{
    int fd = socket(AF_INET, type, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void the_real_direct_outbound_dials_what_the_connector_allows(void **state)
{
    fx *f = *state;
    f->t[T_DIRECT]->ops = &sv_ob_direct;
    uint16_t tport, uport;
    int lfd = loopback_socket(SOCK_STREAM, &tport);
    assert_int_equal(listen(lfd, 4), 0);
    int ufd = loopback_socket(SOCK_DGRAM, &uport);

    /* a TCP flow to 127.0.0.1, which rule 1 names: dialled, connected, registered */
    sv_dest d = ip4(127, 0, 0, 1, tport, SV_NET_TCP);
    flow fl;
    assert_int_equal(connect_kind(f, &kinds[0], &d, &f->user, false, &fl), SV_CONNECT_OK);
    assert_int_equal(fl.dial, 0);
    live l = {0};
    fl.ob.ev = &live_stream; /* the events go to l from here on */
    fl.ob.owner = &l;
    run_until(&f->w->loop, &l.connected);
    assert_int_equal(l.connected, 1);
    int peer = accept(lfd, NULL, NULL);
    assert_true(peer >= 0);
    assert_int_equal(sv__connector_opened(f->w, fl.r.flow, fl.r.target), SV_CONNECT_OK);
    sv_tracker_flow_close(f->shared.tracker, fl.r.flow);
    fl.r.flow = NULL;
    fl.ob.ops->close(&fl.ob);
    run_until(&f->w->loop, &l.closed);
    assert_true(l.closed);
    close(peer);

    /* its neighbour 127.0.0.2, which no rule names: refused before any dial */
    sv_dest other = ip4(127, 0, 0, 2, tport, SV_NET_TCP);
    assert_int_equal(connect_kind(f, &kinds[0], &other, &f->user, false, &fl),
                     SV_CONNECT_INTERNAL);

    /* a UDP sub-link to 127.0.0.1: its datagram reaches the socket */
    sv_dest u = ip4(127, 0, 0, 1, uport, SV_NET_UDP);
    assert_int_equal(connect_kind(f, &kinds[2], &u, &f->user, false, &fl), SV_CONNECT_OK);
    live lu = {0};
    fl.g.ev = &live_dgram;
    fl.g.owner = &lu;
    assert_int_equal(fl.dial, 0);
    fl.g.ops->dgram_send(&fl.g, &u, (const uint8_t *)"ping", 4, fl.r.allow_internal);
    struct pollfd pfd = {.fd = ufd, .events = POLLIN};
    for (int i = 0; i < 3000 && poll(&pfd, 1, 0) == 0; i++) {
        uv_run(&f->w->loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    char got[8];
    assert_int_equal(recv(ufd, got, sizeof got, MSG_DONTWAIT), 4);
    assert_memory_equal(got, "ping", 4);
    assert_int_equal(lu.sent, 4);
    fl.g.ops->dgram_close(&fl.g);
    run_until(&f->w->loop, &lu.closed);
    assert_true(lu.closed);
    free(fl.r.flow);
    close(lfd);
    close(ufd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_routed_destination_gets_its_target_and_a_flow_record,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(an_internal_destination_is_refused_with_its_reason, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_blocked_destination_is_refused_with_its_audit_hit,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_drained_target_version_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(a_dns_route_resolves_on_its_own_resolver, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(the_real_direct_outbound_dials_what_the_connector_allows,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
