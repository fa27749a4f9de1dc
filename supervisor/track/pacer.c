/*
 * Per-user token buckets and their registry (seed 003 "限速"); see
 * pacer.h for the arithmetic. The registry is a hash of user id → pacer under one mutex, taken
 * once per flow open and by the control thread; the per-byte path never takes it.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "supervisor/track/pacer.h"
#include "supervisor/util/table.h"

/* The time @p n bytes take at @p rate bytes/s, in ns (rounded down; at least 1 for n > 0 so
 * that every byte costs something). */
static uint64_t cost_ns(uint64_t n, uint64_t rate)
{
    uint64_t whole = n / rate, rest = n % rate;
    double part = (double)rest * 1e9 / (double)rate;
    uint64_t ns = whole * 1000000000u + (uint64_t)part;
    return ns == 0 && n > 0 ? 1 : ns;
}

static uint64_t floor_of(uint64_t now_ns)
{
    return now_ns > SV_PACE_BURST_NS ? now_ns - SV_PACE_BURST_NS : 0;
}

void sv_pacer_charge(sv_pacer *p, uint64_t n, uint64_t now_ns)
{
    if (!sv_pacer_limited(p) || n == 0)
        return;
    uint64_t rate = atomic_load_explicit(&p->rate, memory_order_relaxed);
    if (rate == 0)
        return;
    uint64_t cost = cost_ns(n, rate), floor = floor_of(now_ns);
    uint64_t old = atomic_load_explicit(&p->tat, memory_order_relaxed);
    uint64_t next;
    do {
        next = (old > floor ? old : floor) + cost;
    } while (!atomic_compare_exchange_weak_explicit(&p->tat, &old, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    if (atomic_load_explicit(&p->last, memory_order_relaxed) != now_ns)
        atomic_store_explicit(&p->last, now_ns, memory_order_relaxed);
}

uint64_t sv_pacer_wait(const sv_pacer *p, uint64_t now_ns)
{
    if (!sv_pacer_limited(p))
        return 0;
    uint64_t tat = atomic_load_explicit(&((sv_pacer *)p)->tat, memory_order_relaxed);
    return tat > now_ns ? tat - now_ns : 0;
}

uint32_t sv_pace_sleep_ms(uint64_t wait_ns)
{
    uint64_t ms = (wait_ns + 999999u) / 1000000u;
    if (ms < SV_PACE_MIN_WAIT_MS)
        return SV_PACE_MIN_WAIT_MS;
    return ms > SV_PACE_MAX_WAIT_MS ? SV_PACE_MAX_WAIT_MS : (uint32_t)ms;
}

int sv_pace_gate(const _Atomic bool *killed, const sv_pacer *p, uint64_t now_ns,
                 uint32_t *sleep_ms)
{
    if (killed != NULL && atomic_load_explicit((_Atomic bool *)killed, memory_order_acquire))
        return -ECONNABORTED;
    uint64_t wait = sv_pacer_wait(p, now_ns);
    if (wait == 0)
        return 0;
    *sleep_ms = sv_pace_sleep_ms(wait);
    return 1;
}

void sv_pacer_set_rate(sv_pacer *p, uint64_t rate, uint64_t now_ns)
{
    uint64_t old = atomic_load_explicit(&p->rate, memory_order_relaxed);
    if (old == rate)
        return; /* seed 003: publishing an unchanged limit leaves the bucket alone */
    uint64_t tat = atomic_load_explicit(&p->tat, memory_order_relaxed), next;
    if (rate == 0) {
        next = now_ns; /* unlimited: any debt is forgiven */
    } else if (old == 0) {
        next = floor_of(now_ns); /* newly limited: a full burst */
    } else if (tat > now_ns) { /* in debt: the same bytes, owed at the new rate */
        uint64_t debt = (uint64_t)((double)(tat - now_ns) * (double)old / 1e9);
        next = now_ns + cost_ns(debt, rate);
    } else { /* a balance, capped at the new burst */
        uint64_t balance = (uint64_t)((double)(now_ns - tat) * (double)old / 1e9);
        next = balance >= rate ? floor_of(now_ns) : now_ns - cost_ns(balance, rate);
        if (next < floor_of(now_ns))
            next = floor_of(now_ns);
    }
    atomic_store_explicit(&p->tat, next, memory_order_relaxed);
    atomic_store_explicit(&p->rate, rate, memory_order_relaxed);
}

void sv_pacer_release(sv_pacer *p)
{
    if (p != NULL)
        atomic_fetch_sub_explicit(&p->refs, 1, memory_order_relaxed);
}

/* ---- registry -------------------------------------------------------------------------------- */

typedef struct pacer_slot {
    uint64_t user;
    sv_pacer *p;
} pacer_slot;

struct sv_pacers {
    pthread_mutex_t lock;
    sv_table users;    /**< of pacer_slot; entries are never removed */
    uint64_t node;     /**< the node cap, bytes/s; 0 = none */
    uint64_t share;    /**< each active user's part of it (0 = none) */
};

static bool slot_eq(const void *entry, const void *key)
{
    return ((const pacer_slot *)entry)->user == *(const uint64_t *)key;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b)
{
    if (a == 0)
        return b;
    return b == 0 || a < b ? a : b;
}

sv_pacers *sv_pacers_new(uint64_t node_rate)
{
    sv_pacers *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    sv_table_init(&r->users, sizeof(pacer_slot));
    r->node = node_rate;
    r->share = node_rate;
    return r;
}

void sv_pacers_free(sv_pacers *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->users.n; i++)
        free(((pacer_slot *)sv_table_at(&r->users, i))->p);
    sv_table_free(&r->users);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* The pacer of @p user, created (unlimited until its rate is set) when absent. Lock held. */
static sv_pacer *slot_of(sv_pacers *r, uint64_t user, bool *added)
{
    pacer_slot *s = sv_table_get(&r->users, sv_hash_u64(user), &user, slot_eq, added);
    if (s == NULL)
        return NULL;
    if (*added) {
        s->user = user;
        s->p = calloc(1, sizeof *s->p);
        if (s->p == NULL)
            return NULL; /* the slot stays, empty: filled at the next attempt */
        s->p->user = user;
    } else if (s->p == NULL) {
        s->p = calloc(1, sizeof *s->p);
        if (s->p == NULL)
            return NULL;
        s->p->user = user;
        *added = true;
    }
    return s->p;
}

sv_pacer *sv_pacers_acquire(sv_pacers *r, uint64_t user, uint64_t now_ns)
{
    bool added = false;
    pthread_mutex_lock(&r->lock);
    sv_pacer *p = slot_of(r, user, &added);
    if (p != NULL) {
        if (added)
            sv_pacer_set_rate(p, r->share, now_ns);
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&r->lock);
    return p;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Water-filling over the active users (lock held): users whose own limit is below an equal
 * share keep it, the rest split what is left equally. Sets r->share. */
static void compute_share(sv_pacers *r, uint64_t now_ns)
{
    if (r->node == 0) {
        r->share = 0;
        return;
    }
    uint64_t *limits = malloc((r->users.n ? r->users.n : 1) * sizeof *limits);
    size_t k = 0;
    for (size_t i = 0; i < r->users.n; i++) {
        const sv_pacer *p = ((pacer_slot *)sv_table_at(&r->users, i))->p;
        uint64_t last = p != NULL ? atomic_load_explicit(&((sv_pacer *)p)->last, memory_order_relaxed) : 0;
        if (p == NULL || last == 0 || last + SV_PACE_BURST_NS < now_ns)
            continue;
        if (limits != NULL)
            limits[k] = p->limit;
        k++;
    }
    if (k == 0 || limits == NULL) {
        free(limits);
        r->share = k == 0 ? r->node : r->node / k;
        return;
    }
    qsort(limits, k, sizeof *limits, cmp_u64);
    uint64_t left = r->node;
    size_t i = 0;
    while (i < k && limits[i] == 0) /* unlimited users take the equal share */
        i++;
    size_t unconstrained = k;
    for (; i < k; i++) {
        if (limits[i] >= left / unconstrained)
            break;
        left -= limits[i];
        unconstrained--;
    }
    /* every constrained limit is below the final share; when all are, nothing bounds it */
    r->share = unconstrained ? left / unconstrained : r->node;
    if (r->share == 0)
        r->share = 1;
    free(limits);
}

static void apply_rates(sv_pacers *r, uint64_t now_ns)
{
    for (size_t i = 0; i < r->users.n; i++) {
        sv_pacer *p = ((pacer_slot *)sv_table_at(&r->users, i))->p;
        if (p != NULL)
            sv_pacer_set_rate(p, min_nonzero(p->limit, r->share), now_ns);
    }
}

int sv_pacers_publish(sv_pacers *r, const sv_pace_limit *v, size_t n, uint64_t now_ns)
{
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->users.n; i++) {
        sv_pacer *p = ((pacer_slot *)sv_table_at(&r->users, i))->p;
        if (p != NULL)
            p->limit = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (v[i].rate == 0)
            continue;
        bool added = false;
        sv_pacer *p = slot_of(r, v[i].user, &added);
        if (p == NULL) {
            rc = -ENOMEM;
            continue;
        }
        p->limit = min_nonzero(p->limit, v[i].rate);
    }
    compute_share(r, now_ns);
    apply_rates(r, now_ns);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void sv_pacers_rebalance(sv_pacers *r, uint64_t now_ns)
{
    pthread_mutex_lock(&r->lock);
    if (r->node != 0) {
        compute_share(r, now_ns);
        apply_rates(r, now_ns);
    }
    pthread_mutex_unlock(&r->lock);
}
