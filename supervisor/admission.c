/*
 * Admission of new TCP connections: one budget for the process and a bound on the
 * connections that have not authenticated yet.
 *
 * - The budget (sv_shared.conn_cap, max_connections) is one atomic count for every worker, so a
 *   worker accepts while the process has room, whichever worker SO_REUSEPORT hands a client.
 * - A connection is "pre-auth" from accept until its protocol core says SV_FX_AUTHENTICATED or
 *   it closes (conn.c keeps them per worker in accept order, sv_worker.preauth). A worker keeps
 *   at most sv_shared.preauth_cap of them (its share of half the budget): past it, its oldest
 *   is closed. With the budget full, a new connection takes the place of the oldest pre-auth
 *   one, this worker's, else another's (asked by sv_shared.evict_asked and woken), so that an
 *   authenticated client is always admitted while pre-auth connections hold any slot; only
 *   when every connection is authenticated does the worker stop accepting (worker.c).
 * - Out of descriptors (accept fails with EMFILE or ENFILE), a worker closes its oldest
 *   pre-auth connections (SV_EVICT_ON_EMFILE at a time) and accepts again on its next loop
 *   turn; it pauses only when it has none left.
 * - Under pressure (a worker's pre-auth connections at half its share, or the budget full),
 *   pre-auth connections older than SV_PREAUTH_PRESSED_MS are closed, oldest first.
 * Accept and close only: nothing here runs per byte.
 */
#include "config.h"

#include <stdio.h>

#include "supervisor/admission.h"
#include "supervisor/bounds.h"
#include "supervisor/conn.h"
#include "supervisor/flow.h"
#include "supervisor/shared.h"

/* Whether @p w is under pressure: its pre-auth connections at half its share or more, or the
 * process at its budget. */
static bool pressed(const sv_worker *w)
{
    const sv_shared *s = w->shared;
    return (uint64_t)w->n_preauth * 2 >= s->preauth_cap ||
           atomic_load_explicit(&s->n_conns, memory_order_relaxed) >= s->conn_cap;
}

/* The index of another worker with a pre-auth connection not already asked for, or -1. */
static int peer_with_preauth(const sv_worker *w)
{
    const sv_shared *s = w->shared;
    for (unsigned i = 0; i < s->n_workers && i < SV_WORKERS_MAX; i++)
        if (i != w->index && atomic_load(&s->preauth[i]) > atomic_load(&s->evict_asked[i]))
            return (int)i;
    return -1;
}

/* Ask worker @p i to close its oldest pre-auth connection (sv__admit_asked on its loop).
 * @return false when the workers are not all running (start or shutdown). */
static bool ask_peer(sv_worker *w, int i)
{
    sv_shared *s = w->shared;
    bool asked = false;
    pthread_rwlock_rdlock(&s->peers_lock);
    if (s->peers != NULL && (unsigned)i < s->n_peers) {
        atomic_fetch_add(&s->evict_asked[i], 1);
        uv_async_send(&s->peers[i]->async);
        asked = true;
    }
    pthread_rwlock_unlock(&s->peers_lock);
    return asked;
}

bool sv__admit_room(const sv_worker *w, char *why, size_t why_len)
{
    const sv_shared *s = w->shared;
    uint32_t n = atomic_load(&s->n_conns);
    uint32_t spliced = atomic_load(&s->n_spliced);
    bool fds_fit = spliced == 0 || sv_fds_fit((uint64_t)n + 1, spliced, s->fd_cap);
    if (n < s->conn_cap && fds_fit)
        return true; /* the usual case: nothing more to look at */
    bool evictable = w->n_preauth > 0 || peer_with_preauth(w) >= 0;
    if (evictable && n < s->conn_cap + SV_ACCEPT_BATCH) /* evictions not yet released */
        return true;
    if (!fds_fit) {
        if (why != NULL)
            snprintf(why, why_len, "the file descriptors are taken (%u connections, %u relayed "
                     "by splice)", n, spliced);
        return false;
    }
    if (why != NULL)
        snprintf(why, why_len, "max_connections reached (%u connections, %s)", n,
                 evictable ? "closing the oldest before authentication"
                           : "every one authenticated");
    return false;
}

void sv__admit_accepted(sv_worker *w)
{
    sv_shared *s = w->shared;
    uint32_t n = atomic_load(&s->n_conns);
    bool over = n > s->conn_cap ||
                (atomic_load(&s->n_spliced) > 0 &&
                 !sv_fds_fit(n, atomic_load(&s->n_spliced), s->fd_cap));
    if (w->n_preauth > s->preauth_cap || over) {
        /* the newest is the one just accepted: an older one of this worker goes, if any */
        if (!(w->n_preauth > 1 && sv__conn_evict_oldest(w)) && over) {
            int i = peer_with_preauth(w);
            if (i >= 0)
                ask_peer(w, i);
        }
    }
    sv__admit_tick(w);
}

bool sv__admit_out_of_fds(sv_worker *w)
{
    unsigned n = 0;
    while (n < SV_EVICT_ON_EMFILE && sv__conn_evict_oldest(w))
        n++;
    return n > 0;
}

void sv__admit_asked(sv_worker *w)
{
    uint32_t k = atomic_exchange(&w->shared->evict_asked[w->index], 0);
    while (k-- > 0 && sv__conn_evict_oldest(w)) {
    }
}

void sv__admit_tick(sv_worker *w)
{
    uint64_t now = sv__wall_ms();
    if (w->n_preauth > 0 && pressed(w) && now > SV_PREAUTH_PRESSED_MS)
        sv__conn_preauth_expire(w, now - SV_PREAUTH_PRESSED_MS);
}
