/*
 * The usage ledger (seed 001 take_usage, seed 003 sampler step 1 "调和用量账本"): each session's
 * wire bytes are moved into its user's account at reconcile; take returns and clears what is
 * pending, snapshot returns totals since start.
 *
 * Bytes before binding: a session's watermark stays put until it is bound to a user, so the
 * bytes it moved before authenticating (the handshake that authenticated it) are charged to that
 * user at the first reconcile after the bind. A session that never binds charges nobody: its
 * bytes are dropped when it closes. A closed session's last bytes are charged when its record is
 * drained; then its slot goes back to its worker's pool and the record is freed.
 */
#include "supervisor/track/tracker_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/** How many slots ahead a pool scan prefetches what a slot adds into. */
#define PREFETCH_AHEAD 16

static bool account_eq(const void *entry, const void *key)
{
    return ((const sv__account *)entry)->user == *(const uint64_t *)key;
}

void sv__ledger_init(sv_tracker *t) { sv_table_init(&t->accounts, sizeof(sv__account)); }

void sv__ledger_free(sv_tracker *t) { sv_table_free(&t->accounts); }

/**
 * Charge a bound session's bytes since its watermarks and move them. The account's index is
 * remembered in the slot (accounts never move or go, util/table.h; a session's user never
 * changes once bound), so that a session is looked up once, not every tick. The
 * watermarks stay when the session is unbound or the account cannot be created, so the bytes
 * are counted later. @return 0 or -ENOMEM.
 */
static int reconcile_slot(sv_tracker *t, sv_session_slot *s)
{
    uint64_t up = atomic_load_explicit(&s->wire.up, memory_order_relaxed);
    uint64_t down = atomic_load_explicit(&s->wire.down, memory_order_relaxed);
    uint64_t du = up - s->wm_up, dd = down - s->wm_down;
    if (du == 0 && dd == 0)
        return 0;
    if (s->account == 0) {
        if (!atomic_load_explicit(&s->rec->has_user, memory_order_acquire))
            return 0;
        uint64_t user = atomic_load_explicit(&s->rec->user, memory_order_relaxed);
        bool added;
        sv__account *a = sv_table_get(&t->accounts, sv_hash_u64(user), &user, account_eq, &added);
        if (!a)
            return -ENOMEM;
        a->user = user;
        s->account = (uint32_t)(((char *)a - t->accounts.v) / t->accounts.elem) + 1;
    }
    sv__account *a = sv_table_at(&t->accounts, s->account - 1);
    a->pend_up += du;
    a->pend_down += dd;
    a->total_up += du;
    a->total_down += dd;
    s->wm_up = up;
    s->wm_down = down;
    return 0;
}

void sv__ledger_reconcile(sv_tracker *t)
{
    pthread_mutex_lock(&t->ledger_lock);
    for (unsigned i = 0; i < t->n_workers; i++) {
        sv__worker *w = &t->workers[i];
        sv__pool *p = &w->session_pool;
        pthread_mutex_lock(&w->lock);
        for (uint32_t c = 0; c < p->n_chunks; c++) { /* the live slots, in order */
            sv_session_slot *v = (sv_session_slot *)p->chunks[c];
            uint32_t n = p->used - c * SV__POOL_CHUNK;
            if (n > SV__POOL_CHUNK)
                n = SV__POOL_CHUNK;
            for (uint32_t k = 0; k < n; k++) {
                if (k + PREFETCH_AHEAD < n && v[k + PREFETCH_AHEAD].account != 0)
                    __builtin_prefetch(
                        sv_table_at(&t->accounts, v[k + PREFETCH_AHEAD].account - 1));
                if (v[k].live)
                    reconcile_slot(t, &v[k]);
            }
        }
        sv_list *pos, *tmp;
        if (p->n_own > 0) /* those the pool had no memory for */
            sv_list_foreach_safe(pos, tmp, &w->sessions)
            {
                sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
                if (rec->slot_id == SV__SLOT_OWN)
                    reconcile_slot(t, &rec->own);
            }
        sv_list_foreach_safe(pos, tmp, &w->closed_sessions)
        {
            sv_session_rec *rec = sv_container_of(pos, sv_session_rec, link);
            if (reconcile_slot(t, (sv_session_slot *)rec->wire) < 0)
                continue; /* out of memory: keep it queued, retry next time */
            sv_list_unlink(pos);
            if (rec->slot_id != SV__SLOT_OWN)
                sv__pool_put(p, rec->slot_id);
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
