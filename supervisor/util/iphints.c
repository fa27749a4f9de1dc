/* Client IP -> last user hints (issue 13); see iphints.h. */
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

/* The 16-byte key of @p sa's IP. @return false for a family without one. */
static bool ip_key(const struct sockaddr *sa, uint8_t key[16])
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
    if (t->slots == NULL || !ip_key(client, key))
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
    if (!ip_key(client, key))
        return -EAFNOSUPPORT;
    if (t->slots == NULL) {
        t->slots = calloc(sv_iphints_capacity(t), sizeof *t->slots);
        if (t->slots == NULL)
            return -ENOMEM;
    }
    sv_iphint *set = set_of(t, key), *slot = &set[0];
    for (unsigned i = 0; i < SV_IPHINTS_WAYS; i++) {
        if (set[i].expires > 0 && memcmp(set[i].ip, key, 16) == 0) {
            slot = &set[i]; /* the same IP, even expired: refresh it */
            break;
        }
        if (set[i].expires < slot->expires)
            slot = &set[i]; /* empty (0) or expired first, else the oldest */
    }
    memcpy(slot->ip, key, 16);
    slot->expires = now_s + t->ttl;
    if (slot->expires == 0)
        slot->expires = 1;
    slot->idx = idx;
    slot->who = who;
    return 0;
}
