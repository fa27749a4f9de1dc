/*
 * The usage ledger (seed 001 take_usage, seed 003 sampler step 1 "调和用量账本"): each session's
 * wire bytes are moved into its user's account at reconcile; take returns and clears what is
 * pending, snapshot returns totals since start.
 *
 * Bytes before binding: a session's watermark stays put until it is bound to a user, so the
 * bytes it moved before authenticating (the handshake that authenticated it) are charged to that
 * user at the first reconcile after the bind. A session that never binds charges nobody: its
 * bytes are dropped when it closes. A closed session's last bytes are charged when its record is
 * drained; then the record is freed.
 */
#include "supervisor/track/tracker_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/** How many records ahead a scan prefetches (tracker_internal.h sv__ptrset). */
#define PREFETCH_AHEAD 16

static bool account_eq(const void *entry, const void *key)
{
    return ((const sv__account *)entry)->user == *(const uint64_t *)key;
}

void sv__ledger_init(sv_tracker *t) { sv_table_init(&t->accounts, sizeof(sv__account)); }

void sv__ledger_free(sv_tracker *t) { sv_table_free(&t->accounts); }

/**
 * Add bytes to @p rec's user's pending and total. The account's index is remembered in the
 * session (accounts never move or go, util/table.h; a session's user never changes once
 * bound), so that a session is looked up once, not every tick (issue 13).
 * @return 0, or -ENOMEM when the account cannot be created.
 */
static int charge(sv_tracker *t, sv_session_rec *rec, uint64_t user, uint64_t up, uint64_t down)
{
    sv__account *a;
    if (rec->account != 0) {
        a = sv_table_at(&t->accounts, rec->account - 1);
    } else {
        bool added;
        a = sv_table_get(&t->accounts, sv_hash_u64(user), &user, account_eq, &added);
        if (!a)
            return -ENOMEM;
        a->user = user;
        rec->account = (uint32_t)(((char *)a - t->accounts.v) / t->accounts.elem) + 1;
    }
    a->pend_up += up;
    a->pend_down += down;
    a->total_up += up;
    a->total_down += down;
    return 0;
}

/**
 * Charge a bound session's bytes since its watermarks and move them. The watermarks stay when
 * the session is unbound or the charge failed, so the bytes are counted later.
 * @return 0 or -ENOMEM.
 */
static int reconcile_session(sv_tracker *t, sv_session_rec *rec)
{
    if (!atomic_load_explicit(&rec->has_user, memory_order_acquire))
        return 0;
    uint64_t user = atomic_load_explicit(&rec->user, memory_order_relaxed);
    uint64_t up = atomic_load_explicit(&rec->wire.up, memory_order_relaxed);
    uint64_t down = atomic_load_explicit(&rec->wire.down, memory_order_relaxed);
    uint64_t du = up - rec->wm_up, dd = down - rec->wm_down;
    if (du == 0 && dd == 0)
        return 0;
    if (charge(t, rec, user, du, dd) < 0)
        return -ENOMEM;
    rec->wm_up = up;
    rec->wm_down = down;
    return 0;
}

void sv__ledger_reconcile(sv_tracker *t)
{
    pthread_mutex_lock(&t->ledger_lock);
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        pthread_mutex_lock(&w->lock);
        sv_list *pos, *tmp;
        if (w->session_set.broken) {
            sv_list_foreach_safe(pos, tmp, &w->sessions)
                reconcile_session(t, sv_container_of(pos, sv_session_rec, link));
        } else {
            sv_session_rec **v = (sv_session_rec **)w->session_set.v;
            size_t n = w->session_set.n;
            for (size_t k = 0; k < n; k++) {
                /* records PREFETCH_AHEAD ahead, the account of one half as far */
                if (k + PREFETCH_AHEAD < n) {
                    __builtin_prefetch(&v[k + PREFETCH_AHEAD]->wire);
                    __builtin_prefetch(&v[k + PREFETCH_AHEAD]->user);
                }
                if (k + PREFETCH_AHEAD / 2 < n && v[k + PREFETCH_AHEAD / 2]->account != 0)
                    __builtin_prefetch(
                        sv_table_at(&t->accounts, v[k + PREFETCH_AHEAD / 2]->account - 1));
                reconcile_session(t, v[k]);
            }
        }
        sv_list_foreach_safe(pos, tmp, &w->closed_sessions)
        {
            sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
            if (reconcile_session(t, rec) < 0)
                continue; /* out of memory: keep it queued, retry next time */
            sv_list_unlink(pos);
            free(rec);
        }
        pthread_mutex_unlock(&w->lock);
    }
    pthread_mutex_unlock(&t->ledger_lock);
}

static int cmp_usage(const void *a, const void *b)
{
    uint64_t x = ((const sv_usage *)a)->user, y = ((const sv_usage *)b)->user;
    return x < y ? -1 : x > y;
}

/** Collect accounts (pending ones, clearing them, or totals) into a sorted array. */
static long collect(sv_tracker *t, bool take, sv_usage **out)
{
    *out = NULL;
    pthread_mutex_lock(&t->ledger_lock);
    size_t n = 0;
    for (size_t i = 0; i < t->accounts.n; i++) {
        const sv__account *a = sv_table_at(&t->accounts, i);
        n += take ? (a->pend_up || a->pend_down) : (a->total_up || a->total_down);
    }
    sv_usage *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) {
        pthread_mutex_unlock(&t->ledger_lock);
        return -ENOMEM; /* nothing was cleared */
    }
    size_t k = 0;
    for (size_t i = 0; i < t->accounts.n; i++) {
        sv__account *a = sv_table_at(&t->accounts, i);
        if (take && (a->pend_up || a->pend_down)) {
            v[k++] = (sv_usage){.user = a->user, .up = a->pend_up, .down = a->pend_down};
            a->pend_up = a->pend_down = 0;
        } else if (!take && (a->total_up || a->total_down)) {
            v[k++] = (sv_usage){.user = a->user, .up = a->total_up, .down = a->total_down};
        }
    }
    pthread_mutex_unlock(&t->ledger_lock);
    if (k > 1)
        qsort(v, k, sizeof *v, cmp_usage);
    *out = v;
    return (long)k;
}

long sv_tracker_take_usage(sv_tracker *t, sv_usage **out)
{
    sv__ledger_reconcile(t);
    return collect(t, true, out);
}

long sv_tracker_usage_snapshot(sv_tracker *t, sv_usage **out)
{
    sv__ledger_reconcile(t);
    return collect(t, false, out);
}
