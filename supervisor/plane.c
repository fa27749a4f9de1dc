/* Reference-counted immutable runtime objects: handlers, targets, route tables, planes. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "supervisor/runtime.h"

#define REPLAY_CAPACITY 65536

uint64_t sv__wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u;
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

sv_handler *sv_handler_new(const sv_inbound_spec *in, const sv_user_set *users, sv_replay_ref *replay)
{
    size_t n = users != NULL ? users->n_users : 0;
    sv_handler *h = calloc(1, sizeof *h);
    const char **pw = calloc(n ? n : 1, sizeof *pw);
    if (h == NULL || pw == NULL)
        goto fail;
    h->user_ids = calloc(n ? n : 1, sizeof *h->user_ids);
    h->device_limits = calloc(n ? n : 1, sizeof *h->device_limits);
    if (h->user_ids == NULL || h->device_limits == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        pw[i] = users->users[i].secret;
        h->user_ids[i] = users->users[i].id;
        h->device_limits[i] = users->users[i].device_limit;
    }
    if (sv_ss_keyring_init(&h->ring, in->ss_cipher, pw, n) != 0)
        goto fail;
    free(pw);
    h->n_users = n;
    h->allow_private = in->allow_private;
    snprintf(h->tag, sizeof h->tag, "%s", in->tag);
    atomic_fetch_add(&replay->refs, 1);
    h->replay = replay;
    atomic_init(&h->refs, 1);
    return h;
fail:
    free(pw);
    if (h != NULL) {
        free(h->user_ids);
        free(h->device_limits);
    }
    free(h);
    return NULL;
}

void sv_handler_ref(sv_handler *h) { atomic_fetch_add(&h->refs, 1); }

void sv_handler_unref(sv_handler *h)
{
    if (h == NULL || atomic_fetch_sub(&h->refs, 1) != 1)
        return;
    sv_ss_keyring_deinit(&h->ring);
    free(h->user_ids);
    free(h->device_limits);
    sv_replay_ref_unref(h->replay);
    free(h);
}

int sv_handler_find(const sv_handler *h, uint64_t user, const uint8_t *key)
{
    size_t klen = sv_ss_key_len(h->ring.cipher);
    for (size_t i = 0; i < h->n_users; i++)
        if (h->user_ids[i] == user && memcmp(h->ring.keys[i], key, klen) == 0)
            return (int)i;
    return -1;
}

sv_target *sv_target_new(enum sv_outbound_kind kind, const char *tag, uint32_t version)
{
    sv_target *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->kind = kind;
    t->version = version;
    snprintf(t->tag, sizeof t->tag, "%s", tag);
    snprintf(t->id, sizeof t->id, "%s@v%u", tag, version);
    atomic_init(&t->refs, 1);
    return t;
}

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

void sv__flow_describe(sv_flow_rec *f, unsigned worker, void *owner, const sv_session_rec *sess,
                       uint64_t user, const sv_dest *d, enum sv_network network,
                       const sv_target *t, int rule, uint64_t epoch)
{
    sv_flow_info *fi = &f->info;
    f->worker = worker;
    f->owner = owner;
    fi->session = sess->info.id;
    memcpy(fi->inbound, sess->info.inbound, sizeof fi->inbound);
    fi->has_user = true;
    fi->user = user;
    snprintf(fi->user_label, sizeof fi->user_label, "%llu", (unsigned long long)user);
    memcpy(fi->source, sess->info.source, sizeof fi->source);
    sv_dest_format(d, fi->destination, sizeof fi->destination);
    fi->network = network;
    snprintf(fi->outbound, sizeof fi->outbound, "%s", t->id);
    fi->rule = rule;
    fi->epoch = epoch;
    fi->started_ms = sv__wall_ms();
}
