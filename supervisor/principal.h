/*
 * Principals: who a connection acts for, shared by every inbound's handler.
 * One registry per process maps (user set, user id, secret) to a reference-counted principal;
 * handlers hold a reference per user they admit, connections one for their lifetime. Building a
 * handler for an edited user set finds the unchanged users' principals and reuses them, so a
 * handler swap can tell a connection whose user is unchanged (same principal) from one whose user
 * was removed or got a new secret (no longer in the new handler).
 */
#ifndef SV_PRINCIPAL_H
#define SV_PRINCIPAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "supervisor/supervisor.h"

typedef struct sv_principal sv_principal;

/* 32 bytes: a node may hold SV_USERS_MAX of them
 * (at most 200 bytes of RSS per idle user in all). */
struct sv_principal {
    _Atomic int refs;
    _Atomic uint32_t device_limit;  /**< sv_user.device_limit, updated in place (0 = unlimited) */
    uint64_t id;                    /**< frontend id (sv_user.id) */
    /** SHA-256 of the user set's tag and the secret, its first 64 bits: a new secret, or the
     *  same user in another set, is a new principal (no tag kept per principal) */
    uint64_t fp;
    sv_principal *next;             /**< registry chain (under the registry lock) */
};

/**
 * The principal of @p user in user set @p set: the registered one with the same id and secret
 * (its device limit is updated in place to @p user's), or a new one.
 * @return a principal with one more reference, or NULL on allocation or digest failure.
 */
sv_principal *sv_principal_acquire(const char *set, const sv_user *user);

/**
 * Take one more reference on @p p for @p user, known by the caller to be the same user with the
 * same secret as @p p's (a handler rebuilt for a reload keeps its unchanged users'
 * principals without a digest each); the device limit is updated to @p user's as
 * sv_principal_acquire() does. @return @p p.
 */
sv_principal *sv_principal_keep(sv_principal *p, const sv_user *user);

/** Take one more reference on @p p (any thread; @p p must already be referenced). */
void sv_principal_ref(sv_principal *p);

/** Drop a reference (any thread); the last one unregisters and frees it. NULL-safe. */
void sv_principal_unref(sv_principal *p);

/** Current device limit of @p p (0 = unlimited). */
static inline uint32_t sv_principal_device_limit(const sv_principal *p)
{
    return atomic_load_explicit(&((sv_principal *)p)->device_limit, memory_order_relaxed);
}

#endif
