/*
 * Exact salt replay filter (PROTOCOLS.md §1.4, §2.5): two generations of an open-addressing
 * hash set with linear probing, load factor at most 1/2.
 *
 * A generation's table grows with its entries (doubling from REPLAY_SLOTS_MIN, rehashed) up to
 * the size `capacity` needs, and starts small again when the generation is retired
 * (resident memory follows the salts seen, not 5 MB for every Shadowsocks inbound once a few
 * thousand connections touched every page of a full-size table).
 *
 * Every slot carries the epoch of the generation that wrote it; a slot whose epoch differs from
 * its table's current epoch is empty. Retiring a generation is therefore O(1): bump the epoch of
 * the older table and make it current. Buckets come from keyed SipHash-2-4 with a random key, so
 * a client that chooses its salts cannot aim at one probe chain.
 */
#include "config.h"

#include "supervisor/crypto/replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#define REPLAY_TOKEN_MAX 32
#define REPLAY_SLOTS_MIN 1024 /* a generation's first table (40 KiB) */

typedef struct replay_slot {
    uint32_t epoch;  /* 0 = never written */
    uint8_t len;
    uint8_t token[REPLAY_TOKEN_MAX];
} replay_slot;

typedef struct replay_gen {
    replay_slot *slots;
    size_t mask;        /* slots - 1 */
    uint32_t epoch;
    size_t count;
} replay_gen;

struct sv_replay {
    pthread_mutex_t lock;
    replay_gen gen[2];  /* gen[cur] takes inserts, gen[cur ^ 1] is the previous window */
    unsigned cur;
    uint32_t next_epoch;
    size_t capacity;    /* entries per generation before the swap */
    size_t slots_max;   /* a table's size at `capacity` entries (load 1/2) */
    uint64_t k0, k1;    /* SipHash key */
};

static inline uint64_t rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define SIP_ROUND(v0, v1, v2, v3)                                                              \
    do {                                                                                       \
        v0 += v1; v1 = rotl64(v1, 13); v1 ^= v0; v0 = rotl64(v0, 32);                         \
        v2 += v3; v3 = rotl64(v3, 16); v3 ^= v2;                                               \
        v0 += v3; v3 = rotl64(v3, 21); v3 ^= v0;                                               \
        v2 += v1; v1 = rotl64(v1, 17); v1 ^= v2; v2 = rotl64(v2, 32);                         \
    } while (0)

/* SipHash-2-4 of @p n bytes under (k0, k1). */
static uint64_t siphash24(uint64_t k0, uint64_t k1, const uint8_t *p, size_t n)
{
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = n & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = (uint64_t)(n & 0xff) << 56;
    for (size_t i = full; i < n; i++)
        last |= (uint64_t)p[i] << (8 * (i - full));
    v3 ^= last;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

sv_replay *sv_replay_new(size_t capacity)
{
    if (capacity == 0)
        capacity = 1;
    size_t slots = 2;
    while (slots < 2 * capacity) {
        if (slots > SIZE_MAX / 4 / sizeof(replay_slot))
            return NULL;
        slots <<= 1;
    }
    sv_replay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    uint8_t seed[16];
    if (RAND_bytes(seed, sizeof seed) != 1)
        goto fail;
    r->k0 = load_le64(seed);
    r->k1 = load_le64(seed + 8);
    r->capacity = capacity;
    r->slots_max = slots;
    size_t first = slots < REPLAY_SLOTS_MIN ? slots : REPLAY_SLOTS_MIN;
    for (int i = 0; i < 2; i++) {
        r->gen[i].slots = calloc(first, sizeof(replay_slot));
        if (r->gen[i].slots == NULL)
            goto fail;
        r->gen[i].mask = first - 1;
        r->gen[i].epoch = (uint32_t)i + 1;
    }
    r->next_epoch = 3;
    r->cur = 0;
    if (pthread_mutex_init(&r->lock, NULL) != 0)
        goto fail;
    return r;
fail:
    free(r->gen[0].slots);
    free(r->gen[1].slots);
    free(r);
    return NULL;
}

void sv_replay_free(sv_replay *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->gen[0].slots);
    free(r->gen[1].slots);
    free(r);
}

/* Find @p token in @p g starting at bucket @p h. @return its slot, or the empty slot ending the
 * probe chain (found = false). The table is never more than half full, so a free slot exists. */
static replay_slot *gen_probe(const replay_gen *g, uint64_t h, const uint8_t *token, size_t len,
                              bool *found)
{
    for (size_t i = (size_t)h & g->mask;; i = (i + 1) & g->mask) {
        replay_slot *s = &g->slots[i];
        if (s->epoch != g->epoch) {
            *found = false;
            return s;
        }
        if (s->len == len && memcmp(s->token, token, len) == 0) {
            *found = true;
            return s;
        }
    }
}

/* Retire the older generation: it becomes the (empty) current one, on a first-size table again
 * (kept as it is when that allocation fails). */
static void replay_rotate(sv_replay *r)
{
    r->cur ^= 1;
    replay_gen *g = &r->gen[r->cur];
    if (r->next_epoch == 0)
        r->next_epoch = 1; /* wrapped after 2^32 rotations */
    g->epoch = r->next_epoch++;
    g->count = 0;
    size_t first = r->slots_max < REPLAY_SLOTS_MIN ? r->slots_max : REPLAY_SLOTS_MIN;
    replay_slot *fresh = g->mask + 1 > first ? calloc(first, sizeof(replay_slot)) : NULL;
    if (fresh != NULL) {
        free(g->slots);
        g->slots = fresh;
        g->mask = first - 1;
    } else if (g->epoch <= 2) {
        /* After a wrap, epochs 1 and 2 may still sit in stale slots: clear each table once. */
        memset(g->slots, 0, (g->mask + 1) * sizeof(replay_slot));
    }
}

/* Double the current generation's table, its entries rehashed. @return false when out of
 * memory (the table is left as it was). */
static bool replay_grow(const sv_replay *r, replay_gen *g)
{
    size_t slots = (g->mask + 1) * 2;
    replay_slot *t = calloc(slots, sizeof(replay_slot));
    if (t == NULL)
        return false;
    replay_gen bigger = {.slots = t, .mask = slots - 1, .epoch = g->epoch, .count = g->count};
    for (size_t i = 0; i <= g->mask; i++) {
        const replay_slot *o = &g->slots[i];
        if (o->epoch != g->epoch)
            continue;
        bool found;
        *gen_probe(&bigger, siphash24(r->k0, r->k1, o->token, o->len), o->token, o->len,
                   &found) = *o;
    }
    free(g->slots);
    *g = bigger;
    return true;
}

bool sv_replay_add(sv_replay *r, const uint8_t *token, size_t len)
{
    if (r == NULL || token == NULL || len == 0 || len > REPLAY_TOKEN_MAX)
        return false; /* refuse what cannot be remembered */
    uint64_t h = siphash24(r->k0, r->k1, token, len);
    bool found_old, found_cur;
    pthread_mutex_lock(&r->lock);
    (void)gen_probe(&r->gen[r->cur ^ 1], h, token, len, &found_old);
    replay_slot *s = gen_probe(&r->gen[r->cur], h, token, len, &found_cur);
    bool fresh = !found_old && !found_cur;
    if (fresh) {
        replay_gen *g = &r->gen[r->cur];
        if (g->count >= r->capacity) {
            replay_rotate(r);
            g = &r->gen[r->cur];
        }
        /* Load at most 1/2; out of memory to grow, the generation retires early instead (a
         * shorter window, never a false refusal). */
        if ((g->count + 1) * 2 > g->mask + 1 && !replay_grow(r, g)) {
            replay_rotate(r);
            g = &r->gen[r->cur];
        }
        s = gen_probe(g, h, token, len, &found_cur);
        s->epoch = g->epoch;
        s->len = (uint8_t)len;
        memcpy(s->token, token, len);
        g->count++;
    }
    pthread_mutex_unlock(&r->lock);
    return fresh;
}

size_t sv_replay_bytes(sv_replay *r)
{
    pthread_mutex_lock(&r->lock);
    size_t slots = r->gen[0].mask + 1 + r->gen[1].mask + 1;
    pthread_mutex_unlock(&r->lock);
    return slots * sizeof(replay_slot);
}
