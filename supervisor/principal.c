/* The process-wide principal registry (principal.h). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "supervisor/principal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SLOT_POISON(p) ASAN_POISON_MEMORY_REGION((p), sizeof(sv_principal))
#define SLOT_UNPOISON(p) ASAN_UNPOISON_MEMORY_REGION((p), sizeof(sv_principal))
#define CHUNK_UNPOISON(c) ASAN_UNPOISON_MEMORY_REGION((c), sizeof *(c))
#else
#define CHUNK_UNPOISON(c) ((void)(c))
#define SLOT_POISON(p) ((void)(p))
#define SLOT_UNPOISON(p) ((void)(p))
#endif

#define BUCKETS_MIN 1024u
#define CHUNK_SLOTS 1024u

/* Principals come from chunks of CHUNK_SLOTS slots (a malloc block each was 64 bytes for 48;
 * a principal is now 32): a freed slot goes on a free
 * list (poisoned under ASan, so a use after the last unref is still caught), slots past `used`
 * are not touched yet, and all chunks are freed when the last principal is. */
typedef struct chunk {
    struct chunk *next;
    size_t used; /* slots handed out at least once */
    sv_principal slots[CHUNK_SLOTS];
} chunk;

/* Everything below is under reg_mu. The table doubles when it holds two principals per bucket,
 * so a lookup walks a short chain at 1 000 000 users too. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sv_principal **reg;
static size_t reg_buckets, reg_count;
static chunk *chunks;           /* newest first: slots are bumped from the head */
static sv_principal *free_slots; /* chained through `next` */

/* A zeroed slot, or NULL when out of memory. */
static sv_principal *slot_alloc(void)
{
    sv_principal *p = free_slots;
    if (p != NULL) {
        SLOT_UNPOISON(p);
        free_slots = p->next;
    } else {
        if (chunks == NULL || chunks->used == CHUNK_SLOTS) {
            chunk *c = malloc(sizeof *c);
            if (c == NULL)
                return NULL;
            c->next = chunks;
            c->used = 0;
            chunks = c;
        }
        p = &chunks->slots[chunks->used++];
    }
    memset(p, 0, sizeof *p);
    return p;
}

/* Return @p p's slot; the last one frees every chunk (reg_count already counts it out). */
static void slot_free(sv_principal *p)
{
    if (reg_count == 0) {
        while (chunks != NULL) {
            chunk *c = chunks;
            chunks = c->next;
            CHUNK_UNPOISON(c); /* free slots are poisoned; hand the allocator a clean block */
            free(c);
        }
        free_slots = NULL;
        return;
    }
    p->next = free_slots;
    free_slots = p;
    SLOT_POISON(p);
}

static size_t bucket_of(uint64_t id, size_t buckets)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (buckets - 1);
}

/* Make room for one more principal. @return false when the first table cannot be allocated
 * (a failed growth keeps the old table: longer chains, still correct). */
static bool reg_reserve(void)
{
    if (reg != NULL && reg_count < 2 * reg_buckets)
        return true;
    size_t n = reg != NULL ? 2 * reg_buckets : BUCKETS_MIN;
    sv_principal **t = calloc(n, sizeof *t);
    if (t == NULL)
        return reg != NULL;
    for (size_t b = 0; b < reg_buckets; b++)
        for (sv_principal *p = reg[b], *next; p != NULL; p = next) {
            next = p->next;
            size_t nb = bucket_of(p->id, n);
            p->next = t[nb];
            t[nb] = p;
        }
    free(reg);
    reg = t;
    reg_buckets = n;
    return true;
}

/* The registered principal for (@p id, @p fp) with one more reference, or NULL. */
static sv_principal *reg_find(uint64_t id, uint64_t fp)
{
    if (reg == NULL)
        return NULL;
    for (sv_principal *p = reg[bucket_of(id, reg_buckets)]; p != NULL; p = p->next) {
        if (p->id != id || p->fp != fp)
            continue;
        int r = atomic_load(&p->refs);
        /* a principal whose last reference is being dropped is not revived */
        while (r > 0 && !atomic_compare_exchange_weak(&p->refs, &r, r + 1))
            ;
        if (r > 0)
            return p;
    }
    return NULL;
}

/* A new registered principal for (@p user, @p fp) with one reference, or NULL. */
static sv_principal *reg_insert(const sv_user *user, uint64_t fp)
{
    sv_principal *p = reg_reserve() ? slot_alloc() : NULL;
    if (p == NULL)
        return NULL;
    atomic_init(&p->refs, 1);
    atomic_init(&p->device_limit, user->device_limit);
    p->id = user->id;
    p->fp = fp;
    size_t b = bucket_of(p->id, reg_buckets);
    p->next = reg[b];
    reg[b] = p;
    reg_count++;
    return p;
}

/* SHA-256, fetched once per process (an implicit fetch per user doubled the cost of building a
 * handler of many users), and one digest context reused under reg_mu (a context per user was a
 * tenth of an apply of 50 000 users). Kept for the process's life. */
static EVP_MD *sha256_fetched;
static EVP_MD_CTX *sha256_ctx;
static void sha256_fetch(void)
{
    sha256_fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
    sha256_ctx = EVP_MD_CTX_new();
}

/* The fingerprint of (@p tag, @p secret) into @p fp: the first 64 bits of SHA-256 over the tag's
 * length (8 bytes, little-endian), the tag and the secret. Under reg_mu. */
static bool fingerprint(const char *tag, const char *secret, uint64_t *fp)
{
    uint8_t digest[EVP_MAX_MD_SIZE], len[8];
    unsigned digest_len = 0;
    size_t tag_len = strlen(tag);
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)tag_len >> (8 * i));
    if (sha256_fetched == NULL || sha256_ctx == NULL ||
        EVP_DigestInit_ex2(sha256_ctx, sha256_fetched, NULL) != 1 ||
        EVP_DigestUpdate(sha256_ctx, len, sizeof len) != 1 ||
        EVP_DigestUpdate(sha256_ctx, tag, tag_len) != 1 ||
        EVP_DigestUpdate(sha256_ctx, secret, strlen(secret)) != 1 ||
        EVP_DigestFinal_ex(sha256_ctx, digest, &digest_len) != 1 || digest_len < sizeof *fp)
        return false;
    memcpy(fp, digest, sizeof *fp);
    return true;
}

sv_principal *sv_principal_acquire(const char *set, const sv_user *user)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sha256_fetch);
    uint64_t fp;
    sv_principal *p = NULL;
    pthread_mutex_lock(&reg_mu);
    if (fingerprint(set != NULL ? set : "", user->secret != NULL ? user->secret : "", &fp)) {
        p = reg_find(user->id, fp);
        if (p != NULL)
            atomic_store(&p->device_limit, user->device_limit);
        else
            p = reg_insert(user, fp);
    }
    pthread_mutex_unlock(&reg_mu);
    return p;
}

void sv_principal_ref(sv_principal *p) { atomic_fetch_add(&p->refs, 1); }

sv_principal *sv_principal_keep(sv_principal *p, const sv_user *user)
{
    atomic_fetch_add(&p->refs, 1);
    atomic_store(&p->device_limit, user->device_limit);
    return p;
}

void sv_principal_unref(sv_principal *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    pthread_mutex_lock(&reg_mu);
    for (sv_principal **pp = &reg[bucket_of(p->id, reg_buckets)]; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            reg_count--;
            break;
        }
    slot_free(p);
    pthread_mutex_unlock(&reg_mu);
}
