/*
 * Which user last authenticated from a client IP:
 * a bounded, set-associative table of client IP -> (user index, owner tag) with an expiry. A
 * trial decryption tries the remembered user first; the table is only a first guess, never an
 * authority (a stale or evicted entry costs one trial, or a scan from the order).
 *
 * One table per worker and listener (DESIGN.md "Threads and loops": a worker's state is its own,
 * no lock on the data path), so a client whose connections SO_REUSEPORT spreads over N workers
 * pays at most one full scan per worker. Not thread-safe. Time is given by the caller.
 */
#ifndef SV_UTIL_IPHINTS_H
#define SV_UTIL_IPHINTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#define SV_IPHINTS_WAYS 4 /**< entries per set; a full set evicts its oldest */

/** One remembered client IP. */
typedef struct sv_iphint {
    uint8_t ip[16];       /**< IPv6, or IPv4-mapped IPv6 */
    uint64_t expires;     /**< caller's clock (seconds); 0 = empty slot */
    const void *who;      /**< the owner's check that idx still names the same user */
    int32_t idx;          /**< the user's index */
} sv_iphint;

typedef struct sv_iphints {
    sv_iphint *slots; /**< n_sets * SV_IPHINTS_WAYS, allocated at the first put */
    size_t n_sets;    /**< a power of two */
    uint64_t ttl;     /**< seconds an entry lives after its last put */
    uint64_t seed;    /**< keys the set choice, so clients cannot aim at one set */
} sv_iphints;

/**
 * Make @p t an empty table of at most @p capacity entries (rounded up to a power-of-two number
 * of sets of SV_IPHINTS_WAYS), entries living @p ttl_s seconds, sets chosen under @p seed (give a
 * random one). Allocates nothing yet.
 */
void sv_iphints_init(sv_iphints *t, size_t capacity, uint64_t ttl_s, uint64_t seed);
/** Free the table's entries; it stays usable (empty). Idempotent. */
void sv_iphints_deinit(sv_iphints *t);
/** Entries the table holds at most. */
size_t sv_iphints_capacity(const sv_iphints *t);

/**
 * The user remembered for @p client's IP (AF_INET or AF_INET6; the port is ignored) at time
 * @p now_s, in *@p idx and *@p who. @return false when none is (never seen, expired, evicted,
 * another family).
 */
bool sv_iphints_get(const sv_iphints *t, const struct sockaddr *client, uint64_t now_s, int *idx,
                    const void **who);

/**
 * Remember that user @p idx (@p who: the owner's tag for it, e.g. its principal) authenticated
 * from @p client's IP at @p now_s, until now_s + ttl. A full set drops its entry nearest to
 * expiry. Allocates the table at the first call. @return 0, -ENOMEM (nothing remembered), or
 * -EAFNOSUPPORT.
 */
int sv_iphints_put(sv_iphints *t, const struct sockaddr *client, uint64_t now_s, int idx,
                   const void *who);

/**
 * The 16-byte key of @p client's IP as entries hold it (IPv6, or IPv4-mapped IPv6) in @p ip.
 * @return false for a family other than AF_INET / AF_INET6.
 */
bool sv_iphints_ip_key(const struct sockaddr *client, uint8_t ip[16]);

/**
 * Remember user @p idx (@p who as in sv_iphints_put) for the IP key @p ip (as sv_iphints_ip_key
 * makes it) as learnt @p age_s seconds before @p now_s, so it expires at now_s + ttl - age_s: a
 * hint carried over from an earlier process (sv_hints_import). An entry of the table
 * that expires later (the same IP, or the one a full set would evict) is kept instead.
 * Allocates the table at the first call.
 * @return 0 (remembered, or a later entry kept), -ESTALE (age_s >= ttl: nothing remembered), or
 *         -ENOMEM.
 */
int sv_iphints_put_ip(sv_iphints *t, const uint8_t ip[16], uint64_t now_s, uint64_t age_s,
                      int idx, const void *who);

/**
 * Walk the live entries at @p now_s: start with *@p pos = 0; each call gives the next entry not
 * expired (borrowed, valid until the next put or deinit) and its age in *@p age_s (seconds since
 * its last put), or NULL when there is none left. For sv_hints_export.
 */
const sv_iphint *sv_iphints_next(const sv_iphints *t, uint64_t now_s, size_t *pos,
                                 uint64_t *age_s);

/**
 * Forget every entry for which @p keep(entry, @p arg) is false (e.g. its user is no longer the
 * owner's at that index). @return how many were forgotten.
 */
size_t sv_iphints_keep(sv_iphints *t, bool (*keep)(const sv_iphint *e, void *arg), void *arg);

#endif
