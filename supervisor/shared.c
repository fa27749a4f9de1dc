/*
 * What every worker shares (shared.h): the epochs of the planes the workers serve, a listener's
 * last reference, the trial-decryption counters, the unit tests' seams. Here, not in worker.c,
 * so that conn.c and udp.c need nothing of the worker's thread.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "supervisor/shared.h"

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
