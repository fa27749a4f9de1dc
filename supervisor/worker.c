/*
 * Workers: one thread and one uv loop each. Every listener has one SO_REUSEPORT socket per worker
 * (bound by the control loop in prepare), so a connection lives on one worker from accept to
 * close. The control loop talks to a worker only by message (DESIGN.md "Threads and loops").
 *
 * Accepting: the worker polls each listening socket and
 * calls accept4 itself, so that it can stop. It pauses every listener when accept fails for lack
 * of descriptors or memory, or when the process has no room (sv__admit_room, admission.c:
 * max_connections, shared->conn_cap, one budget for all workers, or the descriptors
 * once kernel relays hold pipes, shared->fd_cap, and no connection before authentication to
 * make room); connections then wait in the kernel's accept queue, nothing is accepted only to
 * be closed. It resumes when one of its connections ends or, at the latest, on the next retry
 * tick (SV_ACCEPT_RETRY_MS), so a slot freed on another worker is used within that tick. One
 * pause episode of the whole process logs two lines.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "supervisor/admission.h"
#include "supervisor/bounds.h"
#include "supervisor/conn.h"
#include "supervisor/flow.h"
#include "supervisor/hints.h"
#include "supervisor/plane.h"
#include "supervisor/proxy_wait.h"
#include "supervisor/udp.h"
#include "supervisor/util/log.h"
#include "supervisor/worker.h"

static void wlistener_on_close(uv_handle_t *h)
{
    sv_wlistener *l = h->data;
    if (--l->open_handles == 0 && l->n_users_of == 0) {
        sv_handler_unref(l->handler);
        sv__wl_guides_free(l);
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

/* ---- accept: pause, resume, one log line at each end of an episode ------------------------- */

static void on_acceptable(uv_poll_t *p, int status, int events);

static void set_polling(sv_worker *w, bool on)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->listeners) {
        sv_wlistener *l = sv_container_of(pos, sv_wlistener, link);
        if (!l->has_accept)
            continue;
        if (on)
            uv_poll_start(&l->accept, UV_READABLE, on_acceptable);
        else
            uv_poll_stop(&l->accept);
    }
}

static void episode_end(sv_worker *w)
{
    sv_accept_episode *e = &w->shared->pause;
    w->in_episode = false;
    uv_timer_stop(&w->accept_retry);
    atomic_fetch_add(&e->waited, w->episode_accepted);
    if (atomic_fetch_sub(&e->workers, 1) != 1)
        return; /* another worker is still paused: it logs the end */
    uint64_t took = sv__wall_ms() - atomic_load(&e->started_ms);
    SV_LOG(SV_LOG_WARN, "sv.listener", "accepting resumed on every worker after %" PRIu64
           " ms; %" PRIu64 " connections had to wait", took, atomic_exchange(&e->waited, 0));
}

/* Retry tick: resume when there is room; end the episode after a whole tick without a pause. */
static void on_accept_retry(uv_timer_t *t)
{
    sv_worker *w = t->data;
    sv__admit_tick(w);
    if (w->accept_paused) {
        if (sv__admit_room(w, NULL, 0)) {
            w->accept_paused = false;
            set_polling(w, true);
        }
        return;
    }
    if (w->paused_this_tick) {
        w->paused_this_tick = false;
        return;
    }
    episode_end(w);
}

/* Stop polling every listener of @p w; @p why is logged if this starts the process's episode. */
static void accept_pause(sv_worker *w, const char *why)
{
    w->paused_this_tick = true;
    if (!w->accept_paused) {
        w->accept_paused = true;
        set_polling(w, false);
    }
    if (w->in_episode)
        return;
    w->in_episode = true;
    w->episode_accepted = 0;
    uv_timer_start(&w->accept_retry, on_accept_retry, SV_ACCEPT_RETRY_MS, SV_ACCEPT_RETRY_MS);
    sv_accept_episode *e = &w->shared->pause;
    if (atomic_fetch_add(&e->workers, 1) != 0)
        return;
    atomic_store(&e->started_ms, sv__wall_ms());
    SV_LOG(SV_LOG_WARN, "sv.listener", "worker %u: %s: accepting paused, new connections wait "
           "(retry every %d ms)", w->index, why, SV_ACCEPT_RETRY_MS);
}

/* sv_worker.conn_gone: a connection ended or gave its pipes back; resume accepting if not full. */
static void on_conn_gone(sv_worker *w)
{
    if (w->accept_paused && !w->exiting && sv__admit_room(w, NULL, 0)) {
        w->accept_paused = false;
        set_polling(w, true);
    }
}

/* accept(2) errors that concern one queued connection only: take the next one. */
static bool accept_error_is_transient(int err)
{
    switch (err) {
    case ECONNABORTED: case EINTR: case EPROTO: case EPERM: case ENETDOWN: case ENOPROTOOPT:
    case EHOSTDOWN: case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
    case ETIMEDOUT:
        return true;
    default:
        return false;
    }
}

/* Readiness of a listening socket: accept up to SV_ACCEPT_BATCH connections. Running out of
 * descriptors or memory, the cap, or any other failure pauses the worker: no error is ever
 * retried in a loop. */
static void on_acceptable(uv_poll_t *p, int status, int events)
{
    sv_wlistener *l = p->data;
    sv_worker *w = l->w;
    char why[128];
    (void)events;
    if (status < 0) {
        snprintf(why, sizeof why, "inbound %s: poll failed (%s)", l->handler->tag,
                 uv_strerror(status));
        accept_pause(w, why);
        return;
    }
    for (int i = 0; i < SV_ACCEPT_BATCH && !w->accept_paused; i++) {
        if (!sv__admit_room(w, why, sizeof why)) {
            accept_pause(w, why);
            return;
        }
        int fd = accept4(l->tcp_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (accept_error_is_transient(err))
                continue;
            if ((err == EMFILE || err == ENFILE) && sv__admit_out_of_fds(w))
                return; /* their descriptors are free once closed: the next turn accepts */
            snprintf(why, sizeof why, "%s (%s)",
                     err == EMFILE || err == ENFILE   ? "out of file descriptors"
                     : err == ENOBUFS || err == ENOMEM ? "out of memory"
                                                       : "accept failed",
                     uv_strerror(-err));
            accept_pause(w, why);
            return;
        }
        if (w->in_episode)
            w->episode_accepted++;
        /* behind a load balancer the connection opens once its PROXY header is read */
        int rc = l->handler->in.accept_proxy_protocol ? sv__proxy_wait_start(l, fd)
                                                      : sv__conn_open(l, fd, NULL, NULL, 0);
        if (rc != 0) {
            accept_pause(w, "out of memory");
            return;
        }
        if (!l->handler->in.accept_proxy_protocol)
            sv__admit_accepted(w);
    }
}

/* ---- listeners -------------------------------------------------------------------------------- */

static void stop_listener(sv_wlistener *l)
{
    if (l->stopped)
        return;
    l->stopped = true;
    sv_list_unlink(&l->link);
    sv__udp_close_listener(l->w, l);
    /* Pin the listener while its handles close, so a release in between cannot free it. */
    l->n_users_of++;
    if (l->has_accept)
        uv_close((uv_handle_t *)&l->accept, wlistener_on_close); /* leaves epoll: fd may go */
    close(l->tcp_fd);
    l->tcp_fd = -1;
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
    l->tcp_fd = m->tcp_fd;
    int rc = listen(l->tcp_fd, SV_LISTEN_BACKLOG) == 0 ? 0 : -errno;
    if (rc == 0)
        rc = uv_poll_init_socket(&w->loop, &l->accept, l->tcp_fd);
    if (rc == 0) {
        l->accept.data = l;
        l->open_handles++;
        l->has_accept = true;
        if (!w->accept_paused)
            rc = uv_poll_start(&l->accept, UV_READABLE, on_acceptable);
    }
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
        sv__wl_swapped(l);
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
        if (sv__test_hooks.adopting != NULL)
            sv__test_hooks.adopting(w->index, m->plane->epoch);
        sv_plane_unref(w->plane);
        w->plane = m->plane;
        sv__epoch_adopted(w->shared, w->index, w->plane->epoch);
        break;
    case SV_MSG_SET_OWN_ADDRS:
        sv_addrset_unref(w->own_addrs);
        w->own_addrs = m->own_addrs;
        break;
    case SV_MSG_EXIT:
        w->exiting = true;
        break;
    case SV_MSG_HINTS_EXPORT:
        sv__hints_export_worker(w, m->hints_out);
        break;
    case SV_MSG_HINTS_IMPORT:
        l = find_listener(w, m->listener);
        if (l != NULL)
            sv__hints_import_listener(l, m->handler, m->hints_in);
        sv_handler_unref(m->handler);
        break;
    }
    sv__hints_release(m->hints_out, m->hints_in);
}

static void close_everything(sv_worker *w)
{
    sv_list *pos, *tmp;
    sv_list_foreach_safe(pos, tmp, &w->listeners)
        stop_listener(sv_container_of(pos, sv_wlistener, link));
    sv__proxy_waits_close_all(w);
    sv__conn_close_all(w);
    sv__udp_close_all(w);
    sv__udp_scans_cancel(w);
    sv_resolver_close(w->resolver); /* after the flows: none waits for it any more */
    w->resolver = NULL;
    for (size_t i = 0; i < SV_ROUTE_RESOLVERS_MAX; i++) {
        sv_resolver_close(w->route_resolvers[i].r);
        w->route_resolvers[i].r = NULL;
    }
    sv_fleet_close(w->fleet); /* after the connections: none waits for it any more */
    w->fleet = NULL;
    if (w->in_episode) /* the process stops: no "resumed" line */
        atomic_fetch_sub(&w->shared->pause.workers, 1);
    w->in_episode = false;
    uv_close((uv_handle_t *)&w->accept_retry, NULL);
    uv_close((uv_handle_t *)&w->sweep, NULL);
    uv_close((uv_handle_t *)&w->turn_clock, NULL);
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
    sv__admit_asked(w); /* other workers need room */
    if (atomic_exchange(&w->flags_set, false)) {
        sv__conn_scan_flags(w);
        sv__udp_scan_flags(w);
    }
    if (w->exiting)
        close_everything(w);
}

static void on_sweep(uv_timer_t *t)
{
    sv__conn_sweep_idle(t->data);
    sv__admit_tick(t->data);
    sv__udp_sweep(t->data); /* detached XUDP associations expire */
}

/* Once per loop turn, before the loop polls: charge the CPU time the thread spent since the
 * last turn to its bucket (sv_turn_counts). */
static void on_turn(uv_prepare_t *p)
{
    static const uint64_t bounds_us[SV_TURN_BUCKETS] = SV_TURN_BOUNDS_US;
    sv_worker *w = p->data;
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    uint64_t began = w->turn_began_ns;
    w->turn_began_ns = now;
    if (began == 0 || now < began)
        return;
    uint64_t ns = now - began;
    size_t b = 0;
    while (b < SV_TURN_BUCKETS && ns > bounds_us[b] * 1000)
        b++;
    sv_turn_row *row = &w->shared->turns[w->index]; /* this worker's alone: no locked add */
    atomic_store_explicit(&row->le[b], atomic_load_explicit(&row->le[b], memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&row->cpu_ns,
                          atomic_load_explicit(&row->cpu_ns, memory_order_relaxed) + ns,
                          memory_order_relaxed);
}

static void *worker_main(void *arg)
{
    sv_worker *w = arg;
    uv_run(&w->loop, UV_RUN_DEFAULT);
    sv_xudp_table_free(&w->xudp);
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
    w->conn_gone = on_conn_gone;
    sv_list_init(&w->inbox);
    sv_list_init(&w->listeners);
    sv_list_init(&w->conns);
    sv_list_init(&w->preauth);
    sv_list_init(&w->proxy_waits);
    sv_list_init(&w->assocs);
    sv_list_init(&w->udp_scans);
    pthread_mutex_init(&w->mu, NULL);
    int rc = uv_loop_init(&w->loop);
    if (rc == 0)
        rc = uv_async_init(&w->loop, &w->async, on_async);
    if (rc != 0) {
        free(w);
        return rc;
    }
    w->async.data = w;
    rc = sv_resolver_new(&w->loop, &shared->dns, &w->resolver);
    if (rc != 0) {
        uv_close((uv_handle_t *)&w->async, NULL);
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
        free(w);
        return rc;
    }
    if (shared->redis.enabled &&
        sv_fleet_new(&w->loop, &shared->redis, shared->tracker, index == 0, &shared->fleet,
                     &w->fleet) != 0) {
        sv_resolver_close(w->resolver);
        uv_close((uv_handle_t *)&w->async, NULL);
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
        free(w);
        return -ENOMEM;
    }
    uv_timer_init(&w->loop, &w->sweep);
    w->sweep.data = w;
    uv_timer_start(&w->sweep, on_sweep, SV_IDLE_SWEEP_MS, SV_IDLE_SWEEP_MS);
    uv_unref((uv_handle_t *)&w->sweep);
    uv_timer_init(&w->loop, &w->accept_retry);
    w->accept_retry.data = w;
    uv_prepare_init(&w->loop, &w->turn_clock);
    w->turn_clock.data = w;
    uv_prepare_start(&w->turn_clock, on_turn);
    uv_unref((uv_handle_t *)&w->turn_clock);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        uv_close((uv_handle_t *)&w->turn_clock, NULL);
        uv_close((uv_handle_t *)&w->accept_retry, NULL);
        uv_close((uv_handle_t *)&w->sweep, NULL);
        uv_close((uv_handle_t *)&w->async, NULL);
        sv_resolver_close(w->resolver);
        sv_fleet_close(w->fleet);
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
        sv__hints_release(left->hints_out, left->hints_in);
        free(left);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}
