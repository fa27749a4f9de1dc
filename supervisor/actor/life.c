/*
 * The supervisor actor's life (seed 001): sv_supervisor_new starts the workers on an empty
 * plane and the sampler, sv_shutdown ends listeners, sessions and graces, sv_supervisor_free.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "supervisor/actor/actor.h"
#include "supervisor/util/log.h"

static void wake_worker(void *ctx, unsigned worker)
{
    sv_supervisor *sv = ctx;
    sv_worker_wake(sv->workers[worker]);
}

/* once the process's connections fell to half their peak since the last trim, and
 * by SV_TRIM_FALL at least, give the freed heap pages back to the kernel (glibc keeps them in
 * each worker thread's arena otherwise: after 5 000 TLS connections closed, RSS stayed at its
 * peak). On the control loop, at most once per sampler tick. */
static void trim_after_fall(sv_supervisor *sv)
{
    uint32_t n = atomic_load(&sv->shared.n_conns);
    if (n > sv->conns_peak) {
        sv->conns_peak = n;
        return;
    }
    if (sv->conns_peak - n < SV_TRIM_FALL || n > sv->conns_peak / 2)
        return;
    malloc_trim(0);
    sv->conns_peak = n;
}

static void on_sample(uv_timer_t *t)
{
    sv_supervisor *sv = t->data;
    uint64_t now = uv_hrtime();
    sv_tracker_tick(sv->shared.tracker, now - sv->last_tick_ns); /* frees closed sessions */
    trim_after_fall(sv);
    sv_pacers_rebalance(sv->shared.pacers, now);
    sv->last_tick_ns = now;
    atomic_store_explicit(&sv->beat_ns, now, memory_order_relaxed);
    if (now - sv->own_addrs_read_ns >= (uint64_t)SV_OWN_ADDRS_REFRESH_MS * 1000000u)
        sv__own_addrs_refresh(sv);
}

static int empty_plane(sv_supervisor *sv)
{
    sv_routes_ref *r = calloc(1, sizeof *r);
    sv_target *t = sv_target_new(SV_OUTBOUND_BLACKHOLE, "", 0);
    if (r == NULL || t == NULL || (r->routes = sv_routes_single("")) == NULL ||
        sv__msgs_reserve(sv, sv->n_workers) != 0) {
        free(r);
        sv_target_unref(t);
        return -ENOMEM;
    }
    atomic_init(&r->refs, 1);
    sv_plane *p = sv_plane_new(r, &t, 1, 0);
    sv_routes_ref_unref(r);
    sv_target_unref(t);
    if (p == NULL)
        return -ENOMEM;
    sv__publish_plane(sv, p);
    return 0;
}

/* The soft RLIMIT_NOFILE, UINT64_MAX for none. */
static uint64_t fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return (uint64_t)rl.rlim_cur;
    return UINT64_MAX;
}

/* the connections one of @p workers keeps before authentication, its share of half
 * of the budget @p total: at least 1. */
static uint32_t preauth_share(uint32_t total, unsigned workers)
{
    uint32_t n = total / 2 / workers;
    return n > 0 ? n : 1;
}

/* The process's connection budget from max_connections (one for every worker, issue
 * 33); logs it once at start. */
static uint32_t connection_cap(uint32_t configured, unsigned workers)
{
    uint64_t limit = fd_limit();
    uint32_t total = configured ? configured : sv_max_connections_default(limit);
    uint64_t need = (uint64_t)total * SV_FDS_PER_CONN + SV_FD_RESERVE;
    if (configured && need > limit)
        SV_LOG(SV_LOG_WARN, "sv.supervisor", "max_connections %u needs about %" PRIu64 " file "
               "descriptors but the limit is %" PRIu64 ": when they run out, accepting pauses",
               total, need, limit);
    if (configured)
        SV_LOG(SV_LOG_INFO, "sv.supervisor", "up to %u TCP connections, shared by %u workers "
               "(max_connections); up to %u per worker before authentication", total, workers,
               preauth_share(total, workers));
    else
        SV_LOG(SV_LOG_INFO, "sv.supervisor", "up to %u TCP connections, shared by %u workers "
               "(max_connections, from the file descriptor limit %" PRIu64 "); up to %u per "
               "worker before authentication", total, workers, limit,
               preauth_share(total, workers));
    return total;
}

int sv_supervisor_new(uv_loop_t *control, const sv_options *opts, sv_supervisor **out)
{
    sv_supervisor *sv = calloc(1, sizeof *sv);
    if (sv == NULL)
        return -ENOMEM;
    unsigned n = opts != NULL && opts->workers ? opts->workers : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
    sv->n_workers = n < 1 ? 1 : (n > SV_WORKERS_MAX ? SV_WORKERS_MAX : n);
    sv->control = control;
    sv_list_init(&sv->spare);
    sv_list_init(&sv->graces);
    pthread_mutex_init(&sv->shared.adopt_mu, NULL);
    pthread_rwlock_init(&sv->shared.peers_lock, NULL);
    sv__scan_shared_init(&sv->shared);
    pthread_cond_init(&sv->shared.adopt_cv, NULL);
    if (opts != NULL) {
        sv->shared.dns = opts->dns;
        sv->shared.redis = opts->redis;
    }
    sv->shared.conn_cap = connection_cap(opts != NULL ? opts->max_connections : 0, sv->n_workers);
    sv->shared.preauth_cap = preauth_share(sv->shared.conn_cap, sv->n_workers);
    sv->shared.fd_cap = sv_max_connections_default(fd_limit());
    sv->shared.tracker = sv_tracker_new(sv->n_workers, wake_worker, sv);
    sv->shared.audit = sv_audit_new();
    sv->shared.pacers = sv_pacers_new(opts != NULL ? opts->node_speed_limit : 0);
    if (sv->shared.tracker == NULL || sv->shared.audit == NULL || sv->shared.pacers == NULL) {
        sv_tracker_free(sv->shared.tracker);
        sv_audit_free(sv->shared.audit);
        sv_pacers_free(sv->shared.pacers);
        pthread_cond_destroy(&sv->shared.adopt_cv);
        pthread_mutex_destroy(&sv->shared.adopt_mu);
        pthread_rwlock_destroy(&sv->shared.peers_lock);
        sv__scan_shared_deinit(&sv->shared);
        free(sv);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < sv->n_workers; i++) {
        int rc = sv_worker_start(&sv->workers[i], i, &sv->shared);
        if (rc != 0) {
            sv->n_workers = i;
            sv_supervisor_free(sv);
            return rc;
        }
        sv->shared.n_workers = i + 1;
    }
    pthread_rwlock_wrlock(&sv->shared.peers_lock); /* all run: they may tell each other hints */
    sv->shared.peers = sv->workers;
    sv->shared.n_peers = sv->n_workers;
    sv->shared.post = sv_worker_post;
    pthread_rwlock_unlock(&sv->shared.peers_lock);
    if (empty_plane(sv) != 0) {
        sv_shutdown(sv, 0);
        sv_supervisor_free(sv);
        return -ENOMEM;
    }
    sv__own_addrs_refresh(sv);
    uint32_t every = opts != NULL && opts->sample_interval_ms ? opts->sample_interval_ms : 1000;
    sv->sample_every_ms = every;
    sv->sampler = calloc(1, sizeof *sv->sampler);
    if (sv->sampler != NULL) {
        uv_timer_init(control, sv->sampler);
        sv->sampler->data = sv;
        sv->last_tick_ns = uv_hrtime();
        atomic_store_explicit(&sv->beat_ns, sv->last_tick_ns, memory_order_relaxed);
        uv_timer_start(sv->sampler, on_sample, every, every);
    }
    *out = sv;
    return 0;
}

static size_t live_sessions(sv_supervisor *sv)
{
    sv_session_info *list = NULL;
    long n = sv_tracker_sessions(sv->shared.tracker, &list);
    free(list);
    return n > 0 ? (size_t)n : 0;
}

static void wait_sessions(sv_supervisor *sv, uint32_t ms)
{
    for (uint32_t waited = 0; live_sessions(sv) > 0 && waited < ms; waited += 20)
        usleep(20 * 1000);
}

static void on_sampler_closed(uv_handle_t *h) { free(h); }

void sv_shutdown(sv_supervisor *sv, uint32_t grace_ms)
{
    if (sv->shut)
        return;
    sv->shut = true;
    while (!sv_list_is_empty(&sv->graces)) /* grace timers end instead of delaying shutdown */
        sv__grace_end(sv_container_of(sv->graces.next, grace_timer, link));
    while (sv->n_listeners > 0) /* 1. stop accepting */
        sv__listener_remove_at(sv, sv->n_listeners - 1);
    wait_sessions(sv, grace_ms); /* 2. grace for live connections */
    sv_tracker_close_sessions(sv->shared.tracker, NULL, false, 0, 0); /* 3. close the rest */
    wait_sessions(sv, 2000);
    pthread_rwlock_wrlock(&sv->shared.peers_lock); /* no worker posts to another once one may end */
    sv->shared.peers = NULL;
    sv->shared.n_peers = 0;
    pthread_rwlock_unlock(&sv->shared.peers_lock);
    for (unsigned i = 0; i < sv->n_workers; i++) { /* 4. workers end */
        sv_worker_join(sv->workers[i]);
        sv->workers[i] = NULL;
    }
    if (sv->sampler != NULL) {
        uv_timer_stop(sv->sampler);
        uv_close((uv_handle_t *)sv->sampler, on_sampler_closed);
        sv->sampler = NULL;
    }
    uint64_t now = uv_hrtime(); /* 5. a last tick: every byte is in the ledger */
    sv_tracker_tick(sv->shared.tracker, now - sv->last_tick_ns);
    sv->last_tick_ns = now;
}

void sv_supervisor_free(sv_supervisor *sv)
{
    if (sv == NULL)
        return;
    sv_shutdown(sv, 0);
    for (size_t i = 0; sv->has_running && i < sv->running.n_outbounds; i++)
        sv_target_unref(sv->targets[i]);
    free(sv->targets);
    free(sv->versions);
    free(sv->tag_versions);
    sv_routes_ref_unref(sv->routes);
    sv_plane_unref(sv->plane);
    sv_addrset_unref(sv->own_addrs);
    while (sv->n_listeners > 0)
        sv__listener_remove_at(sv, sv->n_listeners - 1);
    free(sv->listeners);
    while (sv->n_spare > 0)
        free(sv__msg_take(sv));
    sv_spec_free(&sv->running);
    sv_tracker_free(sv->shared.tracker);
    sv_audit_free(sv->shared.audit);
    sv_pacers_free(sv->shared.pacers);
    pthread_cond_destroy(&sv->shared.adopt_cv);
    pthread_mutex_destroy(&sv->shared.adopt_mu);
    pthread_rwlock_destroy(&sv->shared.peers_lock);
    sv__scan_shared_deinit(&sv->shared);
    free(sv);
}
