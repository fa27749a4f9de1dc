/* Reference-counted immutable runtime objects: handlers, targets, route tables, planes. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "supervisor/bounds.h"
#include "supervisor/plane.h"
#include "supervisor/proto/anytls.h"
#include "supervisor/proto/http_proxy.h"
#include "supervisor/proto/mixed.h"
#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/socks.h"
#include "supervisor/proto/ss22_dgram.h"
#include "supervisor/proto/ss2022.h"
#include "supervisor/proto/ss_dgram.h"
#include "supervisor/proto/ss_mux.h"
#include "supervisor/proto/ss_ops.h"
#include "supervisor/proto/trojan.h"
#include "supervisor/proto/vless.h"
#include "supervisor/proto/vmess.h"
#include "supervisor/transport/grpc.h"
#include "supervisor/transport/httpupgrade.h"
#include "supervisor/transport/reality.h"
#include "supervisor/transport/tls.h"
#include "supervisor/transport/ws.h"
#include "supervisor/util/log.h"

#define REPLAY_CAPACITY 65536

sv_replay_ref *sv_replay_ref_new(void)
{
    sv_replay_ref *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->filter = sv_replay_new(REPLAY_CAPACITY);
    if (r->filter == NULL) {
        free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    return r;
}

void sv_replay_ref_unref(sv_replay_ref *r)
{
    if (r == NULL || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    sv_replay_free(r->filter);
    free(r);
}

/* The runtime's buffers fit every core registered here (bounds.h). */
_Static_assert(SV_SEALED_MAX >= SV_SS_SEALED_MAX(SV_SCRATCH), "sealed buffer too small");
_Static_assert(SV_CARRY_MAX == SV_SS22_CARRY_MAX, "SV_CARRY_MAX is Shadowsocks 2022's chunk");

const sv_proto_ops *sv_proto_ops_for(const sv_inbound_spec *in)
{
    switch (in->protocol) {
    case SV_INBOUND_SHADOWSOCKS:
        return in->ws.mux ? &sv_ss_mux_ops : &sv_shadowsocks_ops;
    case SV_INBOUND_TROJAN:
        return &sv_trojan_ops;
    case SV_INBOUND_VLESS:
        return &sv_vless_ops;
    case SV_INBOUND_VMESS:
        return &sv_vmess_ops;
    case SV_INBOUND_SS2022:
        return &sv_ss2022_ops;
    case SV_INBOUND_SOCKS:
        return &sv_socks_ops;
    case SV_INBOUND_HTTP:
        return &sv_http_proxy_ops;
    case SV_INBOUND_MIXED:
        return &sv_mixed_ops;
    case SV_INBOUND_ANYTLS:
        return &sv_anytls_ops;
    }
    return NULL;
}

const sv_dgram_ops *sv_dgram_ops_for(const sv_inbound_spec *in)
{
    switch (in->protocol) {
    case SV_INBOUND_SHADOWSOCKS:
        return &sv_shadowsocks_dgram_ops; /* over Mux.Cool too: the same credential table */
    case SV_INBOUND_SS2022:
        return &sv_ss2022_dgram_ops;
    case SV_INBOUND_TROJAN:
    case SV_INBOUND_VLESS:
    case SV_INBOUND_VMESS:
    case SV_INBOUND_ANYTLS:
        break; /* UDP inside the stream only (AnyTLS: UDP over TCP) */
    case SV_INBOUND_SOCKS:
    case SV_INBOUND_HTTP:
    case SV_INBOUND_MIXED:
        break; /* no UDP on the node's port (SOCKS5's relay has a socket per association) */
    }
    return NULL;
}

static uint64_t id_slot(uint64_t id, size_t mask)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

/* from[i]: the index in @p was's handler of user i of @p users when it is the same user (id) with
 * the same secret in the same user set, else -1. NULL when nothing can be reused or out of
 * memory (then everything is derived again). Ids are unique in a validated set. */
static int *reuse_map(const sv_user_set *users, const sv_handler_was *was)
{
    const sv_user_set *old = was != NULL ? was->users : NULL;
    size_t n = users != NULL ? users->n_users : 0, m = old != NULL ? old->n_users : 0;
    if (n == 0 || m == 0 || was->handler == NULL || was->handler->n_users != m ||
        strcmp(users->tag != NULL ? users->tag : "", old->tag != NULL ? old->tag : "") != 0)
        return NULL;
    int *from = malloc(n * sizeof *from);
    size_t *slots = NULL, mask = 0; /* old ids -> index + 1, built at the first moved user */
    for (size_t i = 0; from != NULL && i < n; i++) {
        const sv_user *u = &users->users[i];
        size_t j = i < m && old->users[i].id == u->id ? i : SIZE_MAX;
        if (j == SIZE_MAX && slots == NULL) {
            for (mask = 15; mask < 2 * m; mask = 2 * mask + 1)
                ;
            if ((slots = calloc(mask + 1, sizeof *slots)) == NULL) {
                free(from);
                return NULL;
            }
            for (size_t k = 0; k < m; k++) {
                size_t s = id_slot(old->users[k].id, mask);
                while (slots[s] != 0)
                    s = (s + 1) & mask;
                slots[s] = k + 1;
            }
        }
        if (j == SIZE_MAX)
            for (size_t s = id_slot(u->id, mask); slots[s] != 0; s = (s + 1) & mask)
                if (old->users[slots[s] - 1].id == u->id) {
                    j = slots[s] - 1;
                    break;
                }
        from[i] = j != SIZE_MAX && was->handler->principals[j]->id == u->id &&
                          u->secret != NULL && old->users[j].secret != NULL &&
                          strcmp(u->secret, old->users[j].secret) == 0
                      ? (int)j
                      : -1;
    }
    free(slots);
    return from;
}

/* The core serving @p in into h->ops (gRPC wraps it: one inner core, *@p core, per HTTP/2
 * stream, transport/grpc.h). @return false when none does, or its carry or framing does not fit
 * the worker's buffers (SV_CARRY_MAX, SV_SEALED_MAX: sv_worker.sealed). */
static bool handler_core(sv_handler *h, const sv_inbound_spec *in, const sv_proto_ops **core)
{
    *core = sv_proto_ops_for(in);
    h->ops = in->grpc.service_name != NULL && *core != NULL ? &sv_grpc_ops : *core;
    return h->ops != NULL && h->ops->carry_max <= SV_CARRY_MAX &&
           h->ops->frame_max(SV_SCRATCH) <= SV_SEALED_MAX;
}

/* One principal per user of @p users (NULL: none), kept from @p was's where @p from says it is
 * the same user (reuse_map), else from the registry. @return 0 or -ENOMEM (h->n_users counts
 * the principals taken). */
static int handler_principals(sv_handler *h, const sv_user_set *users, const sv_handler_was *was,
                              const int *from)
{
    size_t n = users != NULL ? users->n_users : 0;
    h->principals = calloc(n ? n : 1, sizeof *h->principals);
    if (h->principals == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        h->principals[i] = from != NULL && from[i] >= 0
                               ? sv_principal_keep(was->handler->principals[from[i]],
                                                   &users->users[i])
                               : sv_principal_acquire(users->tag, &users->users[i]);
        if (h->principals[i] == NULL)
            return -ENOMEM;
        h->n_users = i + 1;
    }
    return 0;
}

/* The core's credential table for @p users (NULL: an empty set of @p in's tag) into h->creds:
 * copied from @p was's for the users @p from maps when the core can (creds_new_from), else
 * derived; a gRPC inbound's wraps its inner @p core's. @return 0, or the core's error (@p err
 * set; h->creds NULL). */
static int handler_creds(sv_handler *h, const sv_proto_ops *core, const sv_inbound_spec *in,
                         const sv_user_set *users, const sv_handler_was *was, const int *from,
                         sv_error *err)
{
    sv_user_set none = {.tag = in->users};
    bool reuse = from != NULL && was->handler->ops == h->ops && sv_proto_reload(h->ops) != NULL;
    int rc = h->ops == &sv_grpc_ops
                 ? sv_grpc_creds_new(core, in->grpc.service_name, in,
                                     users != NULL ? users : &none, &h->creds, err)
             : reuse ? sv_proto_reload(h->ops)->creds_new_from(in, users, was->handler->creds, from,
                                                               &h->creds, err)
                     : h->ops->creds_new(in, users != NULL ? users : &none, &h->creds, err);
    if (rc != 0)
        h->creds = NULL;
    return rc;
}

/* The inbound's settings the handler keeps: its scalars (h->in, whose strings and sub-settings
 * the spec owns are dropped, but for the TLS certificate mode), allow_private and the fallback.
 * @return 0, or -EINVAL with @p err set (a fallback that is not HOST:PORT). */
static int handler_settings(sv_handler *h, const sv_inbound_spec *in, sv_error *err)
{
    snprintf(h->tag, sizeof h->tag, "%s", in->tag);
    h->in = *in;
    h->in.tag = h->tag;
    h->in.users = NULL;
    h->in.bind.address = NULL; /* borrowed from the spec: not kept */
    h->allow_private = in->allow_private;
    if (in->fallback != NULL) {
        if (sv_dest_parse_hostport(in->fallback, &h->fallback) != 0) {
            sv_error_set(err, -EINVAL, "inbound %s: fallback is not HOST:PORT", in->tag);
            return -EINVAL;
        }
        h->has_fallback = true;
    }
    h->in.tls = (sv_inbound_tls){.cert = in->tls.cert};
    h->in.fallback = NULL;
    h->in.ws = (sv_inbound_ws){0};
    h->in.grpc = (sv_inbound_grpc){0}; /* borrowed from the spec: the core keeps its paths */
    return 0;
}

/* The REALITY layer of @p in (PROTOCOLS-2.md §1.1), when it has a private key: its settings and
 * certificate into h->reality, pushed on h->layers. @return 0, -ENOMEM, or -EINVAL with @p err
 * set (settings refused or a certificate that could not be made). */
static int handler_reality(sv_handler *h, const sv_inbound_spec *in, sv_error *err)
{
    const sv_inbound_reality *r = &in->reality;
    if (r->private_key == NULL)
        return 0;
    const char *what = NULL;
    int rc = 0;
    h->reality = sv_reality_conf_new(r->private_key, r->short_ids, r->server_names,
                                     r->max_time_diff_ms != 0 ? r->max_time_diff_ms
                                                              : SV_REALITY_TIME_DIFF_DEFAULT_MS,
                                     &what, &rc);
    if (h->reality == NULL && rc == -ENOMEM)
        return -ENOMEM;
    if (h->reality == NULL) {
        sv_error_set(err, rc, "inbound %s: reality %s: %s", in->tag,
                     what != NULL ? what : "certificate",
                     rc == -EINVAL ? "invalid" : "could not be made");
        return -EINVAL;
    }
    h->reality->mirror = h->has_fallback; /* the fallback is the target (§1.5) */
    h->reality->auth.min_client_ver = r->min_client_ver; /* §1.1: 0 = no bound */
    h->reality->auth.max_client_ver = r->max_client_ver;
    h->reality->xver = r->xver;
    h->layers[h->n_layers++] = (sv_layer_conf){&sv_reality_layer_ops, h->reality};
    return 0;
}

/* The transport layers of @p in above TCP, bottom first: REALITY, TLS (a reference on @p tls),
 * WebSocket or HTTPUpgrade. @return 0, -ENOMEM, or -EINVAL with @p err set. */
static int handler_layers(sv_handler *h, const sv_inbound_spec *in, sv_tls_ctx *tls,
                          sv_error *err)
{
    int rc = handler_reality(h, in, err);
    if (rc != 0)
        return rc;
    /* what the connection reads of REALITY (its PROXY header, conn_client.c.inc) */
    h->in.reality = (sv_inbound_reality){.max_time_diff_ms = in->reality.max_time_diff_ms,
                                         .xver = in->reality.xver};
    if (tls != NULL) {
        h->tls = sv_tls_ctx_ref(tls);
        h->layers[h->n_layers++] = (sv_layer_conf){&sv_tls_layer_ops, h->tls};
    }
    if (in->ws.path != NULL) {
        h->ws = sv_ws_conf_new(in->ws.path, in->ws.host);
        if (h->ws == NULL)
            return -ENOMEM; /* the path was validated */
        h->layers[h->n_layers++] = (sv_layer_conf){
            in->ws.httpupgrade ? &sv_httpupgrade_layer_ops : &sv_ws_layer_ops, h->ws};
    }
    return 0;
}

/* Free a handler that was not finished (sv_handler_new's failures): what it holds so far. */
static void handler_free_partial(sv_handler *h)
{
    if (h->creds != NULL)
        h->ops->creds_free(h->creds);
    for (size_t i = 0; i < h->n_users; i++)
        sv_principal_unref(h->principals[i]);
    free(h->principals);
    sv_tls_ctx_unref(h->tls);
    sv_ws_conf_free(h->ws);
    sv_reality_conf_free(h->reality);
    free(h);
}

sv_handler *sv_handler_new(const sv_inbound_spec *in, const sv_user_set *users,
                           const sv_handler_was *was, sv_replay_ref *replay, sv_tls_ctx *tls,
                           sv_error *err)
{
    const sv_proto_ops *core = NULL;
    sv_handler *h = calloc(1, sizeof *h);
    if (h == NULL) {
        sv_error_set(err, -ENOMEM, "building inbound %s failed: out of memory", in->tag);
        return NULL;
    }
    if (!handler_core(h, in, &core)) {
        free(h);
        sv_error_set(err, -EINVAL, "inbound %s: no protocol core", in->tag);
        return NULL;
    }
    int *from = reuse_map(users, was); /* NULL: every user's principal and key anew */
    int rc = handler_principals(h, users, was, from);
    if (rc == 0)
        rc = handler_creds(h, core, in, users, was, from, err);
    free(from);
    if (rc == 0)
        rc = handler_settings(h, in, err);
    if (rc == 0)
        rc = handler_layers(h, in, tls, err);
    if (rc != 0) {
        if (rc == -ENOMEM)
            sv_error_set(err, -ENOMEM, "building inbound %s failed: out of memory", in->tag);
        handler_free_partial(h);
        return NULL;
    }
    atomic_fetch_add(&replay->refs, 1);
    h->replay = replay;
    if (sv_proto_replay(h->ops) != NULL)
        sv_proto_replay(h->ops)->attach_replay(h->creds, replay->filter);
    atomic_init(&h->refs, 1);
    return h;
}

void sv_handler_ref(sv_handler *h) { atomic_fetch_add(&h->refs, 1); }

void sv_handler_unref(sv_handler *h)
{
    if (h == NULL || atomic_fetch_sub(&h->refs, 1) != 1)
        return;
    h->ops->creds_free(h->creds);
    sv_tls_ctx_unref(h->tls);
    sv_ws_conf_free(h->ws);
    sv_reality_conf_free(h->reality);
    for (size_t i = 0; i < h->n_users; i++)
        sv_principal_unref(h->principals[i]);
    free(h->principals);
    sv_replay_ref_unref(h->replay);
    free(h);
}

int sv_handler_find(const sv_handler *now, const sv_handler *was, const sv_principal *p)
{
    if (now->ops != was->ops || now->in.protocol != was->in.protocol ||
        now->in.ss_cipher != was->in.ss_cipher)
        return -1;
    for (size_t i = 0; i < now->n_users; i++)
        if (now->principals[i] == p)
            return (int)i;
    return -1;
}

int sv__order_reset(struct sv_order **o, size_t n)
{
    if (*o == NULL && (*o = calloc(1, sizeof **o)) == NULL)
        return -ENOMEM;
    sv_ss_order_deinit(*o);
    return sv_ss_order_init(*o, n);
}

void sv__order_free(struct sv_order *o)
{
    if (o != NULL)
        sv_ss_order_deinit(o);
    free(o);
}

void sv__order_touch(struct sv_order *o, size_t i) { sv_ss_order_touch(o, i); }

sv_target *sv_target_new(enum sv_outbound_kind kind, const char *tag, uint64_t version)
{
    const sv_outbound_ops *ops = sv_outbound_ops_for(kind);
    sv_target *t = ops != NULL ? calloc(1, sizeof *t) : NULL;
    if (t == NULL)
        return NULL;
    t->ops = ops;
    t->version = version;
    snprintf(t->tag, sizeof t->tag, "%s", tag);
    snprintf(t->id, sizeof t->id, "%s@v%" PRIu64, tag, version);
    atomic_init(&t->refs, 1);
    atomic_init(&t->closed, false);
    return t;
}

void sv_target_close(sv_target *t) { atomic_store(&t->closed, true); }

void sv_target_ref(sv_target *t) { atomic_fetch_add(&t->refs, 1); }

void sv_target_unref(sv_target *t)
{
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

void sv_routes_ref_unref(sv_routes_ref *r)
{
    if (r == NULL || atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    sv_routes_free(r->routes);
    free(r);
}

sv_plane *sv_plane_new(sv_routes_ref *routes, sv_target *const *targets, size_t n, uint64_t epoch)
{
    sv_plane *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->targets = calloc(n ? n : 1, sizeof *p->targets);
    if (p->targets == NULL) {
        free(p);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        sv_target_ref(targets[i]);
        p->targets[i] = targets[i];
    }
    p->n_slots = n;
    atomic_fetch_add(&routes->refs, 1);
    p->routes = routes;
    p->epoch = epoch;
    atomic_init(&p->refs, 1);
    return p;
}

void sv_plane_ref(sv_plane *p) { atomic_fetch_add(&p->refs, 1); }

void sv_plane_unref(sv_plane *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    for (size_t i = 0; i < p->n_slots; i++)
        sv_target_unref(p->targets[i]);
    free(p->targets);
    sv_routes_ref_unref(p->routes);
    free(p);
}
