/*
 * Workers: one thread and one uv loop each. Every listener has one SO_REUSEPORT socket per worker
 * (bound by the control loop in prepare), so a connection lives on one worker from accept to
 * close. The control loop talks to a worker only by message (DESIGN.md "Threads and loops").
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/runtime.h"
#include "supervisor/util/log.h"

static void wlistener_on_close(uv_handle_t *h)
{
    sv_wlistener *l = h->data;
    if (--l->open_handles == 0 && l->n_users_of == 0) {
        sv_handler_unref(l->handler);
        free(l);
    }
}

void sv__wlistener_release(sv_wlistener *l)
{
    if (--l->n_users_of == 0 && l->stopped && l->open_handles == 0) {
        sv_handler_unref(l->handler);
        free(l);
    }
}

static sv_wlistener *find_listener(sv_worker *w, uint32_t id)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->listeners) {
        sv_wlistener *l = sv_container_of(pos, sv_wlistener, link);
        if (l->id == id)
            return l;
    }
    return NULL;
}

static void stop_listener(sv_wlistener *l)
{
    if (l->stopped)
        return;
    l->stopped = true;
    sv_list_unlink(&l->link);
    sv__udp_close_listener(l->w, l);
    /* Pin the listener while its handles close, so a release in between cannot free it. */
    l->n_users_of++;
    uv_close((uv_handle_t *)&l->tcp, wlistener_on_close);
    if (l->has_udp)
        uv_close((uv_handle_t *)&l->udp, wlistener_on_close);
    sv__wlistener_release(l);
}

static void start_listener(sv_worker *w, sv_msg *m)
{
    sv_wlistener *l = calloc(1, sizeof *l);
    if (l == NULL) {
        SV_LOG(SV_LOG_ERROR, "sv.listener", "worker %u: out of memory starting a listener", w->index);
        close(m->tcp_fd);
        if (m->udp_fd >= 0)
            close(m->udp_fd);
        sv_handler_unref(m->handler);
        return;
    }
    l->w = w;
    l->id = m->listener;
    l->handler = m->handler;
    uv_tcp_init(&w->loop, &l->tcp);
    l->tcp.data = l;
    l->open_handles++;
    int rc = uv_tcp_open(&l->tcp, m->tcp_fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->tcp, 1024, sv__conn_on_accept);
    if (rc != 0)
        SV_LOG(SV_LOG_ERROR, "sv.listener", "inbound %s: listen failed: %s", l->handler->tag, uv_strerror(rc));
    if (m->udp_fd >= 0) {
        uv_udp_init(&w->loop, &l->udp);
        l->udp.data = l;
        l->open_handles++;
        l->has_udp = true;
        rc = uv_udp_open(&l->udp, m->udp_fd);
        if (rc == 0)
            rc = uv_udp_recv_start(&l->udp, sv__udp_alloc, sv__udp_on_recv);
        if (rc != 0)
            SV_LOG(SV_LOG_ERROR, "sv.listener", "inbound %s: udp failed: %s", l->handler->tag, uv_strerror(rc));
    }
    sv_list_insert_tail(&w->listeners, &l->link);
}

static void handle_msg(sv_worker *w, sv_msg *m)
{
    sv_wlistener *l;
    switch (m->kind) {
    case SV_MSG_START_LISTENER:
        start_listener(w, m);
        break;
    case SV_MSG_SWAP_HANDLER:
        l = find_listener(w, m->listener);
        if (l == NULL) {
            sv_handler_unref(m->handler);
            break;
        }
        sv_handler_unref(l->handler);
        l->handler = m->handler;
        if (m->revoke) {
            sv__conn_revoke(w, l);
            sv__udp_revoke(w, l);
        }
        break;
    case SV_MSG_STOP_LISTENER:
        l = find_listener(w, m->listener);
        if (l != NULL)
            stop_listener(l);
        break;
    case SV_MSG_PUBLISH_PLANE:
        sv_plane_unref(w->plane);
        w->plane = m->plane;
        break;
    case SV_MSG_SET_OWN_ADDRS:
        sv_addrset_unref(w->own_addrs);
        w->own_addrs = m->own_addrs;
        break;
    case SV_MSG_EXIT:
        w->exiting = true;
        break;
    }
}

static void close_everything(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->listeners)
        stop_listener(sv_container_of(pos, sv_wlistener, link));
    sv__conn_close_all(w);
    sv__udp_close_all(w);
    uv_close((uv_handle_t *)&w->sweep, NULL);
    uv_close((uv_handle_t *)&w->async, NULL);
}

static void on_async(uv_async_t *a)
{
    sv_worker *w = a->data;
    sv_list batch;
    sv_list_init(&batch);
    pthread_mutex_lock(&w->mu);
    if (!sv_list_is_empty(&w->inbox)) {
        batch = w->inbox;
        batch.next->prev = &batch;
        batch.prev->next = &batch;
        sv_list_init(&w->inbox);
    }
    pthread_mutex_unlock(&w->mu);
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &batch) {
        sv_msg *m = sv_container_of(pos, sv_msg, link);
        sv_list_unlink(pos);
        handle_msg(w, m);
        free(m);
    }
    if (atomic_exchange(&w->flags_set, false)) {
        sv__conn_scan_flags(w);
        sv__udp_scan_flags(w);
    }
    if (w->exiting)
        close_everything(w);
}

static void on_sweep(uv_timer_t *t) { sv__conn_sweep_idle(t->data); }

static void *worker_main(void *arg)
{
    sv_worker *w = arg;
    uv_run(&w->loop, UV_RUN_DEFAULT);
    sv_plane_unref(w->plane);
    w->plane = NULL;
    sv_addrset_unref(w->own_addrs);
    w->own_addrs = NULL;
    sv_aead_deinit(&w->udp_open);
    sv_aead_deinit(&w->udp_seal);
    int rc = uv_loop_close(&w->loop);
    if (rc != 0)
        SV_LOG(SV_LOG_WARN, "sv.worker", "worker %u: loop closed with live handles", w->index);
    return NULL;
}

int sv_worker_start(sv_worker **out, unsigned index, sv_shared *shared)
{
    sv_worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    w->index = index;
    w->shared = shared;
    sv_list_init(&w->inbox);
    sv_list_init(&w->listeners);
    sv_list_init(&w->conns);
    sv_list_init(&w->assocs);
    pthread_mutex_init(&w->mu, NULL);
    int rc = uv_loop_init(&w->loop);
    if (rc == 0)
        rc = uv_async_init(&w->loop, &w->async, on_async);
    if (rc != 0) {
        free(w);
        return rc;
    }
    w->async.data = w;
    uv_timer_init(&w->loop, &w->sweep);
    w->sweep.data = w;
    uv_timer_start(&w->sweep, on_sweep, SV_IDLE_SWEEP_MS, SV_IDLE_SWEEP_MS);
    uv_unref((uv_handle_t *)&w->sweep);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        uv_close((uv_handle_t *)&w->sweep, NULL);
        uv_close((uv_handle_t *)&w->async, NULL);
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
        free(w);
        return -rc;
    }
    *out = w;
    return 0;
}

void sv_worker_post(sv_worker *w, sv_msg *m)
{
    pthread_mutex_lock(&w->mu);
    sv_list_insert_tail(&w->inbox, &m->link);
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
}

void sv_worker_wake(sv_worker *w)
{
    atomic_store(&w->flags_set, true);
    uv_async_send(&w->async);
}

void sv_worker_join(sv_worker *w)
{
    sv_msg *m = calloc(1, sizeof *m);
    if (m != NULL) {
        m->kind = SV_MSG_EXIT;
        sv_worker_post(w, m);
    }
    pthread_join(w->thread, NULL);
    /* messages that arrived after the exit: release what they carry */
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->inbox) {
        sv_msg *left = sv_container_of(pos, sv_msg, link);
        sv_list_unlink(pos);
        if (left->kind == SV_MSG_START_LISTENER) {
            close(left->tcp_fd);
            if (left->udp_fd >= 0)
                close(left->udp_fd);
        }
        sv_handler_unref(left->handler);
        sv_plane_unref(left->plane);
        sv_addrset_unref(left->own_addrs);
        free(left);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}
