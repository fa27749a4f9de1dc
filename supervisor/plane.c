/* Reference-counted immutable runtime objects: handlers, targets, route tables, planes. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <openssl/rand.h>

#include "supervisor/bounds.h"
#include "supervisor/flow.h"
#include "supervisor/hints.h"
#include "supervisor/plane.h"
#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/ss22_dgram.h"
#include "supervisor/proto/ss2022.h"
#include "supervisor/proto/ss_dgram.h"
#include "supervisor/proto/ss_mux.h"
#include "supervisor/proto/ss_ops.h"
#include "supervisor/proto/trojan.h"
#include "supervisor/scan.h"
#include "supervisor/proto/vless.h"
#include "supervisor/proto/vmess.h"
#include "supervisor/transport/grpc.h"
#include "supervisor/transport/httpupgrade.h"
#include "supervisor/transport/reality.h"
#include "supervisor/transport/tls.h"
#include "supervisor/transport/ws.h"
#include "supervisor/util/log.h"
#include "supervisor/worker.h"

#define REPLAY_CAPACITY 65536

uint64_t sv__wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u;
}

void sv__audit_hit(sv_shared *s, const sv_routes *r, int rule, const char *inbound,
                   uint64_t user)
{
    int64_t id;
    if (rule >= 0 && s->audit != NULL && sv_routes_rule_audit(r, rule, &id))
        sv_audit_note(s->audit, inbound, user, id, sv__wall_ms());
}

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
        break; /* UDP inside the stream only */
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
 * the worker's buffers (SV_CARRY_MAX, sv_worker.sealed). */
static bool handler_core(sv_handler *h, const sv_inbound_spec *in, const sv_proto_ops **core)
{
    *core = sv_proto_ops_for(in);
    h->ops = in->grpc.service_name != NULL && *core != NULL ? &sv_grpc_ops : *core;
    return h->ops != NULL && h->ops->carry_max <= SV_CARRY_MAX &&
           h->ops->frame_max(SV_SCRATCH) <= sizeof ((sv_worker *)0)->sealed;
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
    bool reuse = from != NULL && was->handler->ops == h->ops && h->ops->creds_new_from != NULL;
    int rc = h->ops == &sv_grpc_ops
                 ? sv_grpc_creds_new(core, in->grpc.service_name, in,
                                     users != NULL ? users : &none, &h->creds, err)
             : reuse ? h->ops->creds_new_from(in, users, was->handler->creds, from, &h->creds, err)
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
    if (h->ops->attach_replay != NULL)
        h->ops->attach_replay(h->creds, replay->filter);
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

sv_test_hooks sv__test_hooks;

void sv__epoch_adopted(sv_shared *s, unsigned index, uint64_t epoch)
{
    pthread_mutex_lock(&s->adopt_mu);
    atomic_store(&s->adopted[index], epoch);
    pthread_cond_broadcast(&s->adopt_cv);
    pthread_mutex_unlock(&s->adopt_mu);
}

uint64_t sv__epoch_now(sv_shared *s)
{
    uint64_t low = UINT64_MAX;
    for (unsigned i = 0; i < s->n_workers; i++) {
        uint64_t e = atomic_load(&s->adopted[i]);
        low = e < low ? e : low;
    }
    return s->n_workers > 0 ? low : 0;
}

bool sv__epoch_wait(sv_shared *s, uint64_t epoch, unsigned ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->adopt_mu);
    int rc = 0;
    while (sv__epoch_now(s) < epoch && rc == 0)
        rc = pthread_cond_timedwait(&s->adopt_cv, &s->adopt_mu, &until);
    bool ok = sv__epoch_now(s) >= epoch;
    pthread_mutex_unlock(&s->adopt_mu);
    return ok;
}

void sv__wlistener_release(sv_wlistener *l)
{
    if (--l->n_users_of == 0 && l->stopped && l->open_handles == 0) {
        sv_handler_unref(l->handler);
        sv__wl_guides_free(l);
        free(l);
    }
}

void sv__ss_count(sv_shared *s, unsigned keys)
{
    atomic_fetch_add_explicit(&s->ss_lookups, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ss_keys, keys, memory_order_relaxed);
}

void sv__wl_guides_free(sv_wlistener *l)
{
    sv_iphints_deinit(&l->hints);
    if (l->order != NULL)
        sv_ss_order_deinit(l->order);
    free(l->order);
    l->order = NULL;
    l->order_of = NULL;
}

/* @p l's most-recently-matched order of its handler's users, set up at its first use after a
 * swap; NULL when out of memory. */
static sv_ss_order *order_ready(sv_wlistener *l)
{
    const sv_handler *h = l->handler;
    if (l->order_of != h->creds) {
        if (l->order == NULL && (l->order = calloc(1, sizeof *l->order)) == NULL)
            return NULL; /* (never built: order_of is NULL) */
        sv_ss_order_deinit(l->order);
        l->order_of = sv_ss_order_init(l->order, h->n_users) == 0 ? h->creds : NULL;
    }
    return l->order_of != NULL ? l->order : NULL;
}

void sv__wl_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int *hint,
                  sv_ss_order **order)
{
    *hint = -1;
    *order = NULL;
    if (h->n_users < 2)
        return;
    int idx;
    const void *who;
    if (sv_iphints_get(&l->hints, client, uv_now(&l->w->loop) / 1000, &idx, &who) && idx >= 0 &&
        (size_t)idx < h->n_users && h->principals[idx] == who)
        *hint = idx;
    if (h == l->handler)
        *order = order_ready(l);
}

void sv__wl_dgram_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client,
                        sv_dgram_guide *g)
{
    sv_ss_order *order;
    sv__wl_guide(l, h, client, &g->hint, &order);
    g->order = order;
    g->limit = SV_SS_GUESSES;
    g->trials = 0;
}

/* Set up @p l's hint table at its first use (a zeroed listener). */
static void hints_ready(sv_wlistener *l)
{
    if (l->hints.n_sets != 0)
        return;
    uint64_t seed = uv_hrtime() ^ (uint64_t)(uintptr_t)l;
    (void)RAND_bytes((unsigned char *)&seed, sizeof seed); /* on failure: the clock's */
    sv_iphints_init(&l->hints, SV_HINTS_MAX, SV_HINT_TTL_S, seed);
}

/* Give the hint (@p ip, user @p idx of @p l's handler) to the same listener of every other
 * worker, as an import of one row (sv__hints_import_listener: ignored where the handler differs). */
static void share_hint(sv_wlistener *l, const uint8_t ip[16], int idx)
{
    sv_shared *sh = l->w->shared;
    pthread_rwlock_rdlock(&sh->peers_lock); /* workers post side by side */
    unsigned n = sh->peers != NULL ? sh->n_peers : 0;
    sv_hints_in *in = n > 1 ? malloc(sizeof *in + sizeof in->rows[0]) : NULL;
    if (in != NULL) {
        in->n = 1;
        in->matched = true;
        atomic_init(&in->refs, 1); /* this call's; each message takes one more */
        memcpy(in->rows[0].ip, ip, 16);
        in->rows[0].idx = idx;
        in->rows[0].age_s = 0;
        for (unsigned i = 0; i < n; i++) {
            sv_msg *m = sh->peers[i] != l->w ? calloc(1, sizeof *m) : NULL;
            if (m == NULL)
                continue;
            m->kind = SV_MSG_HINTS_IMPORT;
            m->listener = l->id;
            sv_handler_ref(l->handler);
            m->handler = l->handler;
            atomic_fetch_add(&in->refs, 1);
            m->hints_in = in;
            sh->post(sh->peers[i], m);
        }
        sv__hints_release(NULL, in);
    }
    pthread_rwlock_unlock(&sh->peers_lock);
}

void sv__wl_learn(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int idx)
{
    if (h != l->handler || h->n_users < 2 || idx < 0 || (size_t)idx >= h->n_users)
        return; /* an older handler's principal could outlive the next check (sv__wl_swapped) */
    hints_ready(l);
    uint64_t now = uv_now(&l->w->loop) / 1000;
    int had = -1;
    const void *who = NULL;
    bool known = sv_iphints_get(&l->hints, client, now, &had, &who) && had == idx &&
                 who == h->principals[idx];
    uint8_t ip[16];
    if (sv_iphints_put(&l->hints, client, now, idx, h->principals[idx]) == 0 && !known &&
        sv_iphints_ip_key(client, ip))
        share_hint(l, ip, idx); /* new here: new to the other workers too (issue 13) */
}

/* Does @p e still name the user at its index of the handler @p arg? */
static bool hint_admitted(const sv_iphint *e, void *arg)
{
    const sv_handler *h = arg;
    return e->idx >= 0 && (size_t)e->idx < h->n_users && h->principals[e->idx] == e->who;
}

void sv__wl_swapped(sv_wlistener *l)
{
    (void)sv_iphints_keep(&l->hints, hint_admitted, l->handler);
}

void sv__hints_export_worker(sv_worker *w, sv_hints_out *out)
{
    uint64_t now = uv_now(&w->loop) / 1000;
    pthread_mutex_lock(&out->mu);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->listeners) {
        sv_wlistener *l = sv_container_of(pos, sv_wlistener, link);
        const sv_handler *h = l->handler;
        const sv_iphint *e;
        size_t at = 0;
        uint64_t age;
        while (!out->closed && h != NULL && (e = sv_iphints_next(&l->hints, now, &at, &age))) {
            if (!hint_admitted(e, (void *)h))
                continue; /* a user the handler no longer admits there */
            if (out->n == out->cap) {
                size_t cap = out->cap ? 2 * out->cap : 256;
                sv_ip_hint *v = realloc(out->v, cap * sizeof *v);
                if (v == NULL) {
                    out->short_of_memory = true;
                    break;
                }
                out->v = v;
                out->cap = cap;
            }
            sv_ip_hint *r = &out->v[out->n++];
            memset(r, 0, sizeof *r);
            snprintf(r->inbound, sizeof r->inbound, "%s", h->tag);
            memcpy(r->ip, e->ip, 16);
            r->user = h->principals[e->idx]->id;
            r->age_s = (uint32_t)age;
        }
    }
    out->answered++;
    pthread_cond_broadcast(&out->cv);
    pthread_mutex_unlock(&out->mu);
}

void sv__hints_import_listener(sv_wlistener *l, const sv_handler *h, const sv_hints_in *in)
{
    if (l->handler != h || h->n_users < 2)
        return; /* swapped meanwhile: its users' indexes may differ */
    hints_ready(l);
    uint64_t now = uv_now(&l->w->loop) / 1000;
    for (size_t i = 0; i < in->n; i++) {
        const sv_hint_row *r = &in->rows[i];
        if (r->idx < 0 || (size_t)r->idx >= h->n_users)
            continue;
        (void)sv_iphints_put_ip(&l->hints, r->ip, now, r->age_s, r->idx, h->principals[r->idx]);
        sv_ss_order *order = in->matched ? order_ready(l) : NULL;
        if (order != NULL)
            sv_ss_order_touch(order, (size_t)r->idx);
    }
}

void sv__hints_release(sv_hints_out *out, sv_hints_in *in)
{
    if (in != NULL && atomic_fetch_sub(&in->refs, 1) == 1)
        free(in);
    if (out == NULL)
        return;
    pthread_mutex_lock(&out->mu);
    bool last = --out->refs == 0;
    pthread_mutex_unlock(&out->mu);
    if (!last)
        return;
    pthread_cond_destroy(&out->cv);
    pthread_mutex_destroy(&out->mu);
    free(out->v);
    free(out);
}

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

void sv__addr_format(const struct sockaddr *sa, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        uv_ip4_name(a, ip, sizeof ip);
        snprintf(buf, cap, "%s:%u", ip, ntohs(a->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(a, ip, sizeof ip);
        snprintf(buf, cap, "[%s]:%u", ip, ntohs(a->sin6_port));
    } else {
        snprintf(buf, cap, "?");
    }
}

sv_flow_rec *sv__flow_new(unsigned worker, void *owner, const sv_session_rec *sess, uint64_t user,
                          const sv_dest *d, const char *sniffed, enum sv_network network,
                          const sv_target *t, int rule, uint64_t epoch)
{
    char dest[sizeof ((sv_flow_info *)0)->destination];
    sv_dest_format(d, dest, sizeof dest);
    sv_flow_rec *f = sv_flow_rec_new(sess->info.inbound, sess->info.source, dest, sniffed, t->id);
    if (f == NULL)
        return NULL;
    sv_flow_desc *fi = &f->info;
    f->worker = worker;
    f->owner = owner;
    fi->session = sess->info.id;
    fi->has_user = true;
    fi->user = user;
    fi->network = network;
    fi->rule = rule;
    fi->epoch = epoch;
    fi->started_ms = sv__wall_ms();
    return f;
}

bool sv__flow_opened(sv_tracker *tracker, sv_flow_rec *f, const sv_target *t)
{
    sv_tracker_flow_open(tracker, f);
    /* seq_cst after the registry's lock: a drain stores the token before it walks the registry */
    if (!atomic_load(&t->closed))
        return true;
    SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: flow %llu to %s on %s: " SV_DRAINED_TEXT,
           (unsigned long long)f->info.session, (unsigned long long)f->info.id,
           f->info.destination, f->info.outbound);
    return false;
}

const char *sv_close_reason_name(sv_close_reason r)
{
    static const char *const names[SV_CLOSE_REASONS] = {
        [SV_CLOSE_END] = "end",       [SV_CLOSE_ERROR] = "error",   [SV_CLOSE_KILL] = "kill",
        [SV_CLOSE_SESSION] = "session", [SV_CLOSE_REVOKE] = "revoke", [SV_CLOSE_IDLE] = "idle",
        [SV_CLOSE_LIMIT] = "limit",   [SV_CLOSE_SHUTDOWN] = "shutdown",
    };
    return (unsigned)r < SV_CLOSE_REASONS ? names[r] : "unknown";
}

void sv__flow_closed(sv_shared *s, const sv_flow_rec *f, sv_close_reason r)
{
    if ((unsigned)r >= SV_CLOSE_REASONS)
        r = SV_CLOSE_ERROR;
    _Atomic uint64_t *n = &s->closes[f->worker % SV_WORKERS_MAX].n[r];
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    SV_LOG(SV_LOG_DEBUG, "sv.flow", "flow %llu of session %llu to %s via %s closed: %s",
           (unsigned long long)f->info.id, (unsigned long long)f->info.session,
           f->info.destination, f->info.outbound, sv_close_reason_name(r));
}
