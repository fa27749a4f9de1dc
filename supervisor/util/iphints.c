/* Client IP -> last user hints; see iphints.h. */
#include "config.h"

#include "supervisor/util/iphints.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "supervisor/util/table.h"

void sv_iphints_init(sv_iphints *t, size_t capacity, uint64_t ttl_s, uint64_t seed)
{
    size_t sets = 1;
    while (sets * SV_IPHINTS_WAYS < capacity && sets < ((size_t)1 << 24))
        sets <<= 1;
    t->slots = NULL;
    t->n_sets = sets;
    t->ttl = ttl_s;
    t->seed = seed;
}

void sv_iphints_deinit(sv_iphints *t)
{
    free(t->slots);
    t->slots = NULL;
}

size_t sv_iphints_capacity(const sv_iphints *t) { return t->n_sets * SV_IPHINTS_WAYS; }

bool sv_iphints_ip_key(const struct sockaddr *sa, uint8_t key[16])
{
    if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    if (sa->sa_family == AF_INET) {
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    return false;
}

static sv_iphint *set_of(const sv_iphints *t, const uint8_t key[16])
{
    uint64_t a, b;
    memcpy(&a, key, 8);
    memcpy(&b, key + 8, 8);
    uint64_t h = sv_hash_u64(sv_hash_u64(a ^ t->seed) ^ b);
    return t->slots + (h & (t->n_sets - 1)) * SV_IPHINTS_WAYS;
}

bool sv_iphints_get(const sv_iphints *t, const struct sockaddr *client, uint64_t now_s, int *idx,
                    const void **who)
{
    uint8_t key[16];
    if (t->slots == NULL || !sv_iphints_ip_key(client, key))
        return false;
    const sv_iphint *set = set_of(t, key);
    for (unsigned i = 0; i < SV_IPHINTS_WAYS; i++) {
        if (set[i].expires > now_s && memcmp(set[i].ip, key, 16) == 0) {
            *idx = set[i].idx;
            *who = set[i].who;
            return true;
        }
    }
    return false;
}

int sv_iphints_put(sv_iphints *t, const struct sockaddr *client, uint64_t now_s, int idx,
                   const void *who)
{
    uint8_t key[16];
    if (!sv_iphints_ip_key(client, key))
        return -EAFNOSUPPORT;
    return sv_iphints_put_ip(t, key, now_s, 0, idx, who);
}

int sv_iphints_put_ip(sv_iphints *t, const uint8_t key[16], uint64_t now_s, uint64_t age_s,
                      int idx, const void *who)
{
    if (age_s >= t->ttl)
        return -ESTALE;
    if (t->slots == NULL) {
        t->slots = calloc(sv_iphints_capacity(t), sizeof *t->slots);
        if (t->slots == NULL)
            return -ENOMEM;
    }
    uint64_t expires = now_s + (t->ttl - age_s);
    if (expires == 0)
        expires = 1;
    sv_iphint *set = set_of(t, key), *slot = &set[0];
    for (unsigned i = 0; i < SV_IPHINTS_WAYS; i++) {
        if (set[i].expires > 0 && memcmp(set[i].ip, key, 16) == 0) {
            slot = &set[i]; /* the same IP, even expired: refresh it */
            break;
        }
        if (set[i].expires < slot->expires)
            slot = &set[i]; /* empty (0) or expired first, else the oldest */
    }
    if (slot->expires > expires) /* a later entry (only an aged put can be older) */
        return 0;
    memcpy(slot->ip, key, 16);
    slot->expires = expires;
    slot->idx = idx;
    slot->who = who;
    return 0;
}

const sv_iphint *sv_iphints_next(const sv_iphints *t, uint64_t now_s, size_t *pos,
                                 uint64_t *age_s)
{
    size_t n = t->slots != NULL ? sv_iphints_capacity(t) : 0;
    for (; *pos < n; (*pos)++) {
        const sv_iphint *e = &t->slots[*pos];
        if (e->expires > now_s) {
            uint64_t left = e->expires - now_s;
            *age_s = left < t->ttl ? t->ttl - left : 0;
            (*pos)++;
            return e;
        }
    }
    return NULL;
}

size_t sv_iphints_keep(sv_iphints *t, bool (*keep)(const sv_iphint *e, void *arg), void *arg)
{
    size_t n = t->slots != NULL ? sv_iphints_capacity(t) : 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->slots[i].expires != 0 && !keep(&t->slots[i], arg)) {
            memset(&t->slots[i], 0, sizeof t->slots[i]);
            dropped++;
        }
    }
    return dropped;
}
