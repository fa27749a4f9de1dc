/*
 * Which user a returning client is (hints.h): per worker listener, the user last authenticated
 * from each client IP and the order of recent matches, shared with the same listener of the
 * other workers, exported across a restart and imported again.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "supervisor/hints.h"
#include "supervisor/proto/dgram.h"
#include "supervisor/scan.h"
#include "supervisor/shared.h"

void sv__wl_guides_free(sv_wlistener *l)
{
    sv_iphints_deinit(&l->hints);
    sv__order_free(l->order);
    l->order = NULL;
    l->order_of = NULL;
}

/* @p l's most-recently-matched order of its handler's users, set up at its first use after a
 * swap; NULL when out of memory. */
static sv_order *order_ready(sv_wlistener *l)
{
    const sv_handler *h = l->handler;
    if (l->order_of != h->creds) /* on failure never built: order_of stays NULL */
        l->order_of = sv__order_reset(&l->order, h->n_users) == 0 ? h->creds : NULL;
    return l->order_of != NULL ? l->order : NULL;
}

void sv__wl_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int *hint,
                  sv_order **order)
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
    sv_order *order;
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
        share_hint(l, ip, idx); /* new here: new to the other workers too */
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
        sv_order *order = in->matched ? order_ready(l) : NULL;
        if (order != NULL)
            sv__order_touch(order, (size_t)r->idx);
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
