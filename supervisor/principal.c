/* The process-wide principal registry (principal.h). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "supervisor/principal.h"

#define BUCKETS 1024

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sv_principal *reg[BUCKETS];

static size_t bucket_of(uint64_t id) { return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 54) % BUCKETS; }

sv_principal *sv_principal_acquire(const char *set, const sv_user *user)
{
    uint8_t fp[SV_PRINCIPAL_FP];
    unsigned fp_len = 0;
    const char *secret = user->secret != NULL ? user->secret : "";
    if (EVP_Digest(secret, strlen(secret), fp, &fp_len, EVP_sha256(), NULL) != 1 ||
        fp_len != sizeof fp)
        return NULL;
    const char *tag = set != NULL ? set : "";
    size_t b = bucket_of(user->id);
    pthread_mutex_lock(&reg_mu);
    for (sv_principal *p = reg[b]; p != NULL; p = p->next) {
        if (p->id != user->id || strcmp(p->set, tag) != 0 || memcmp(p->fp, fp, sizeof fp) != 0)
            continue;
        int r = atomic_load(&p->refs);
        /* a principal whose last reference is being dropped is not revived */
        while (r > 0 && !atomic_compare_exchange_weak(&p->refs, &r, r + 1))
            ;
        if (r > 0) {
            atomic_store(&p->device_limit, user->device_limit);
            pthread_mutex_unlock(&reg_mu);
            return p;
        }
    }
    sv_principal *p = calloc(1, sizeof *p);
    if (p != NULL) {
        atomic_init(&p->refs, 1);
        p->id = user->id;
        snprintf(p->label, sizeof p->label, "%s", user->label != NULL ? user->label : "");
        atomic_init(&p->device_limit, user->device_limit);
        snprintf(p->set, sizeof p->set, "%s", tag);
        memcpy(p->fp, fp, sizeof fp);
        p->next = reg[b];
        reg[b] = p;
    }
    pthread_mutex_unlock(&reg_mu);
    return p;
}

void sv_principal_ref(sv_principal *p) { atomic_fetch_add(&p->refs, 1); }

void sv_principal_unref(sv_principal *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    pthread_mutex_lock(&reg_mu);
    for (sv_principal **pp = &reg[bucket_of(p->id)]; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    free(p);
}
