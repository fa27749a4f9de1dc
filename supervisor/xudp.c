/* The XUDP GlobalID table of one worker (PROTOCOLS-2.md §5.3). */
#include "config.h"

#include "supervisor/xudp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool sv_xudp_gid_none(const uint8_t *gid)
{
    uint8_t any = 0;
    for (size_t i = 0; i < SV_XUDP_GID_LEN; i++)
        any |= gid[i];
    return any == 0;
}

static bool key_eq(const sv_xudp_key *a, const sv_xudp_key *b)
{
    return a->listener == b->listener && a->user == b->user &&
           memcmp(a->gid, b->gid, SV_XUDP_GID_LEN) == 0;
}

static sv_xudp_entry *entry_of(sv_xudp_table *t, const void *assoc)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].assoc == assoc)
            return &t->v[i];
    return NULL;
}

/* Remove entry @p e (swap with the last). */
static void drop(sv_xudp_table *t, sv_xudp_entry *e)
{
    if (e->detached)
        t->n_detached--;
    *e = t->v[--t->n];
}

int sv_xudp_add(sv_xudp_table *t, const sv_xudp_key *key, void *assoc)
{
    if (t->n == t->cap) {
        size_t cap = t->cap == 0 ? 16 : t->cap * 2;
        sv_xudp_entry *v = realloc(t->v, cap * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = (sv_xudp_entry){.key = *key, .assoc = assoc};
    return 0;
}

sv_xudp_entry *sv_xudp_find(sv_xudp_table *t, const sv_xudp_key *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (key_eq(&t->v[i].key, key))
            return &t->v[i];
    return NULL;
}

void *sv_xudp_detach(sv_xudp_table *t, void *assoc, uint64_t now_ms)
{
    sv_xudp_entry *e = entry_of(t, assoc);
    if (e == NULL || e->detached)
        return NULL;
    e->detached = true;
    e->since_ms = now_ms;
    t->n_detached++;
    size_t max = t->max_detached != 0 ? t->max_detached : SV_XUDP_DETACHED_MAX;
    if (t->n_detached <= max)
        return NULL;
    sv_xudp_entry *old = NULL;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].detached && (old == NULL || t->v[i].since_ms < old->since_ms))
            old = &t->v[i];
    void *gone = old->assoc;
    drop(t, old);
    return gone;
}

void sv_xudp_attach(sv_xudp_table *t, void *assoc)
{
    sv_xudp_entry *e = entry_of(t, assoc);
    if (e == NULL || !e->detached)
        return;
    e->detached = false;
    t->n_detached--;
}

void sv_xudp_remove(sv_xudp_table *t, void *assoc)
{
    sv_xudp_entry *e = entry_of(t, assoc);
    if (e != NULL)
        drop(t, e);
}

void *sv_xudp_expired(sv_xudp_table *t, uint64_t now_ms)
{
    if (t->n_detached == 0)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        sv_xudp_entry *e = &t->v[i];
        if (e->detached && now_ms - e->since_ms >= SV_XUDP_KEEP_MS) {
            void *gone = e->assoc;
            drop(t, e);
            return gone;
        }
    }
    return NULL;
}

void sv_xudp_table_free(sv_xudp_table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}
