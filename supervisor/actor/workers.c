/*
 * The supervisor actor's messages to its workers (seed 001): worker messages allocated ahead
 * so that commit only sends, the plane's publication, the listener table (start, swap,
 * revoke, stop on every worker) and the node's own addresses the workers refuse.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/log.h"

/* ---- worker messages: allocated ahead, so that commit only sends --------------------------- */

static sv_msg *msg_alloc(void)
{
    if (sv__test_hooks.alloc_fails != NULL && sv__test_hooks.alloc_fails())
        return NULL;
    return calloc(1, sizeof(sv_msg));
}

/* Have @p n messages on the spare list. @return 0 or -ENOMEM (what was allocated stays). */
int sv__msgs_reserve(sv_supervisor *sv, size_t n)
{
    while (sv->n_spare < n) {
        sv_msg *m = msg_alloc();
        if (m == NULL)
            return -ENOMEM;
        sv_list_insert_tail(&sv->spare, &m->link);
        sv->n_spare++;
    }
    return 0;
}

/* A spare message, else a new one (only outside commit: shutdown). NULL when none. */
sv_msg *sv__msg_take(sv_supervisor *sv)
{
    if (sv->n_spare == 0)
        return msg_alloc();
    sv_list *first = sv->spare.next;
    sv_list_unlink(first);
    sv->n_spare--;
    sv_msg *m = sv_container_of(first, sv_msg, link);
    memset(m, 0, sizeof *m);
    return m;
}

void sv__post(sv_supervisor *sv, unsigned w, enum sv_msg_kind kind, uint32_t listener,
              sv_handler *h, sv_plane *p, int tcp_fd, int udp_fd, bool revoke)
{
    sv_msg *m = sv__msg_take(sv);
    if (m == NULL) {
        SV_LOG(SV_LOG_ERROR, "sv.actor", "out of memory posting to worker %u", w);
        return;
    }
    m->kind = kind;
    m->listener = listener;
    m->handler = h;
    m->plane = p;
    m->tcp_fd = tcp_fd;
    m->udp_fd = udp_fd;
    m->revoke = revoke;
    sv_worker_post(sv->workers[w], m);
}

void sv__publish_plane(sv_supervisor *sv, sv_plane *p)
{
    for (unsigned i = 0; i < sv->n_workers; i++) {
        sv_plane_ref(p);
        sv__post(sv, i, SV_MSG_PUBLISH_PLANE, 0, NULL, p, -1, -1, false);
    }
    sv_plane_unref(sv->plane);
    sv->plane = p;
}

/* Re-read the node's own addresses (the host's interfaces and every inbound's listen address)
 * and give the workers the new set when it changed. A failed read keeps the old set
 * and is logged once until a read succeeds again. */
void sv__own_addrs_refresh(sv_supervisor *sv)
{
    size_t n = sv->has_running ? sv->running.n_inbounds : 0;
    const char **binds = calloc(n ? n : 1, sizeof *binds);
    sv_addrset *set = NULL;
    int rc = binds != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++)
        binds[i] = sv->running.inbounds[i].bind.address;
    if (rc == 0)
        rc = sv_addrset_from_host(binds, n, &set);
    free(binds);
    sv->own_addrs_read_ns = uv_hrtime();
    if (rc != 0) {
        if (!sv->own_addrs_failing)
            SV_LOG(SV_LOG_WARN, "sv.actor", "reading the host's addresses failed: %s; keeping the "
                   "last known ones", strerror(-rc));
        sv->own_addrs_failing = true;
        return;
    }
    sv->own_addrs_failing = false;
    if (sv->own_addrs != NULL && sv_addrset_equal(set, sv->own_addrs)) {
        sv_addrset_unref(set);
        return;
    }
    if (sv__msgs_reserve(sv, sv->n_workers) != 0) { /* every worker or none: the next read retries */
        SV_LOG(SV_LOG_ERROR, "sv.actor", "out of memory giving the workers the host's addresses");
        sv_addrset_unref(set);
        return;
    }
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_msg *m = sv__msg_take(sv);
        m->kind = SV_MSG_SET_OWN_ADDRS;
        m->tcp_fd = m->udp_fd = -1;
        sv_addrset_ref(set);
        m->own_addrs = set;
        sv_worker_post(sv->workers[w], m);
    }
    sv_addrset_unref(sv->own_addrs);
    sv->own_addrs = set;
}

/* Start a listener bound in sv__prepare (room for it was made there). */
void sv__listener_add(sv_supervisor *sv, staged_listener *s)
{
    s->l.id = ++sv->next_listener_id;
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_handler_ref(s->l.handler);
        sv__post(sv, w, SV_MSG_START_LISTENER, s->l.id, s->l.handler, NULL, s->tcp_fds[w], s->udp_fds[w], false);
        s->tcp_fds[w] = s->udp_fds[w] = -1;
    }
    sv->listeners[sv->n_listeners++] = s->l;
    SV_LOG(SV_LOG_INFO, "sv.listener", "inbound %s listening on %s", s->l.tag, s->l.bind);
    memset(&s->l, 0, sizeof s->l);
}

void sv__listener_remove_at(sv_supervisor *sv, size_t i)
{
    ctl_listener *l = &sv->listeners[i];
    for (unsigned w = 0; w < sv->n_workers; w++)
        sv__post(sv, w, SV_MSG_STOP_LISTENER, l->id, NULL, NULL, -1, -1, false);
    sv_handler_unref(l->handler);
    sv_replay_ref_unref(l->replay);
    sv->listeners[i] = sv->listeners[--sv->n_listeners];
}

void sv__listener_swap(sv_supervisor *sv, staged_listener *s, bool revoke)
{
    ctl_listener *run = NULL;
    for (size_t i = 0; i < sv->n_listeners; i++)
        if (sv->listeners[i].id == s->l.id)
            run = &sv->listeners[i];
    if (run == NULL)
        return;
    snprintf(run->tag, sizeof run->tag, "%s", s->l.tag);
    for (unsigned w = 0; w < sv->n_workers; w++) {
        sv_handler_ref(s->l.handler);
        sv__post(sv, w, SV_MSG_SWAP_HANDLER, run->id, s->l.handler, NULL, -1, -1, revoke);
    }
    sv_handler_unref(run->handler);
    run->handler = s->l.handler;
    s->l.handler = NULL;
}

/* Close, on every worker, the sessions of listener @p id whose principal its current handler no
 * longer admits (a handler swap onto the same handler, with revoke). */
void sv__listener_revoke(sv_supervisor *sv, uint32_t id)
{
    for (size_t i = 0; i < sv->n_listeners; i++) {
        if (sv->listeners[i].id != id)
            continue;
        for (unsigned w = 0; w < sv->n_workers; w++) {
            sv_handler_ref(sv->listeners[i].handler);
            sv__post(sv, w, SV_MSG_SWAP_HANDLER, id, sv->listeners[i].handler, NULL, -1, -1, true);
        }
    }
}
