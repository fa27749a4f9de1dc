/*
 * The audit hit set (audit.h): an sv_table of sv_audit_hit keyed by (inbound, user, rule) under
 * one mutex; a take hands the entries over and starts an empty table.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/track/audit.h"
#include "supervisor/util/table.h"

struct sv_audit {
    pthread_mutex_t mu;
    sv_table hits; /**< sv_audit_hit entries, under mu */
    _Atomic uint64_t recorded, dropped;
};

sv_audit *sv_audit_new(void)
{
    sv_audit *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    pthread_mutex_init(&a->mu, NULL);
    sv_table_init(&a->hits, sizeof(sv_audit_hit));
    return a;
}

void sv_audit_free(sv_audit *a)
{
    if (a == NULL)
        return;
    sv_table_free(&a->hits);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static bool hit_eq(const void *entry, const void *key)
{
    const sv_audit_hit *x = entry, *y = key;
    return x->user == y->user && x->rule == y->rule && strcmp(x->inbound, y->inbound) == 0;
}

/* Is @p key held? A scan: only asked when the set is full (a rare state). */
static bool held(const sv_audit *a, const sv_audit_hit *key)
{
    for (size_t i = 0; i < a->hits.n; i++)
        if (hit_eq(sv_table_at(&a->hits, i), key))
            return true;
    return false;
}

bool sv_audit_note(sv_audit *a, const char *inbound, uint64_t user, int64_t rule,
                   uint64_t now_ms)
{
    sv_audit_hit key = {.user = user, .rule = rule, .first_ms = now_ms};
    snprintf(key.inbound, sizeof key.inbound, "%s", inbound);
    uint64_t h = sv_hash_str(key.inbound) ^ sv_hash_u64(user) ^ sv_hash_u64(~(uint64_t)rule);
    bool added = false, dropped = false;
    pthread_mutex_lock(&a->mu);
    if (a->hits.n >= SV_AUDIT_PENDING_MAX) {
        dropped = !held(a, &key);
    } else {
        sv_audit_hit *e = sv_table_get(&a->hits, h, &key, hit_eq, &added);
        if (e == NULL)
            dropped = true;
        else if (added)
            *e = key;
    }
    pthread_mutex_unlock(&a->mu);
    if (added)
        atomic_fetch_add(&a->recorded, 1);
    if (dropped)
        atomic_fetch_add(&a->dropped, 1);
    return added;
}

static int cmp_hit(const void *x, const void *y)
{
    const sv_audit_hit *a = x, *b = y;
    int c = strcmp(a->inbound, b->inbound);
    if (c != 0)
        return c;
    if (a->user != b->user)
        return a->user < b->user ? -1 : 1;
    return a->rule < b->rule ? -1 : a->rule > b->rule;
}

long sv_audit_take(sv_audit *a, sv_audit_hit **out)
{
    *out = NULL;
    pthread_mutex_lock(&a->mu);
    size_t n = a->hits.n;
    sv_audit_hit *v = n > 0 ? malloc(n * sizeof *v) : NULL;
    if (n > 0 && v == NULL) {
        pthread_mutex_unlock(&a->mu);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = *(const sv_audit_hit *)sv_table_at(&a->hits, i);
    sv_table_free(&a->hits);
    pthread_mutex_unlock(&a->mu);
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_hit);
    *out = v;
    return (long)n;
}

void sv_audit_stats(sv_audit *a, uint64_t *recorded, uint64_t *dropped)
{
    *recorded = atomic_load(&a->recorded);
    *dropped = atomic_load(&a->dropped);
}
