/* A small open-addressing hash table over a growable array (util/table.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/util/table.h"


uint64_t sv_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

uint64_t sv_hash_u64(uint64_t x)
{
    x ^= x >> 30; /* splitmix64 finaliser */
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void sv_table_init(sv_table *t, size_t elem)
{
    memset(t, 0, sizeof *t);
    t->elem = elem;
}

void sv_table_free(sv_table *t)
{
    free(t->v);
    free(t->hashes);
    free(t->slots);
    sv_table_init(t, t->elem);
}

void *sv_table_at(const sv_table *t, size_t i) { return t->v + i * t->elem; }

static void table_place(uint32_t *slots, size_t n_slots, uint64_t hash, uint32_t value)
{
    size_t i = (size_t)hash & (n_slots - 1);
    while (slots[i])
        i = (i + 1) & (n_slots - 1);
    slots[i] = value;
}

/** Make room for one more entry: grow the array and, past half load, the slot index. */
static int table_reserve(sv_table *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        char *v = realloc(t->v, cap * t->elem);
        if (!v)
            return -ENOMEM;
        t->v = v;
        uint64_t *h = realloc(t->hashes, cap * sizeof *h);
        if (!h)
            return -ENOMEM;
        t->hashes = h;
        t->cap = cap;
    }
    if ((t->n + 1) * 2 <= t->n_slots)
        return 0;
    size_t n_slots = t->n_slots ? t->n_slots * 2 : 16;
    uint32_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < t->n; i++)
        table_place(slots, n_slots, t->hashes[i], (uint32_t)(i + 1));
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    return 0;
}

void *sv_table_get(sv_table *t, uint64_t hash, const void *key, sv_table_eq eq, bool *added)
{
    *added = false;
    if (t->n_slots) {
        for (size_t i = (size_t)hash & (t->n_slots - 1); t->slots[i]; i = (i + 1) & (t->n_slots - 1)) {
            size_t at = t->slots[i] - 1;
            if (t->hashes[at] == hash && eq(sv_table_at(t, at), key))
                return sv_table_at(t, at);
        }
    }
    if (t->n >= UINT32_MAX - 1 || table_reserve(t) < 0)
        return NULL;
    size_t at = t->n++;
    t->hashes[at] = hash;
    table_place(t->slots, t->n_slots, hash, (uint32_t)(at + 1));
    void *e = sv_table_at(t, at);
    memset(e, 0, t->elem);
    *added = true;
    return e;
}
