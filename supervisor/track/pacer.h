/*
 * Per-user speed limits (seed 003 "限速"): one token bucket per user,
 * shared by all of the user's flows on every worker, both directions, TCP and UDP.
 *
 * The bucket is kept as a theoretical arrival time (GCRA): `tat` is the time, on the caller's
 * clock, at which the bucket is back to zero. A balance of B bytes at rate r is tat = now - B/r;
 * the burst of one second caps it at tat >= now - 1 s; a debt of D bytes is tat = now + D/r. So a
 * charge is one compare-and-swap and a readiness check one load, from any thread, and every
 * function here is a pure function of the `now_ns` it is given (tests inject a fake clock).
 *
 * Rules (seed 003): a transfer may start while the balance is not negative; it is charged after
 * it moved, whatever its size (debt allowed); the flow then waits until the debt is paid,
 * sleeping at least SV_PACE_MIN_WAIT_MS and at most SV_PACE_MAX_WAIT_MS at a time so that a
 * raised or removed limit is felt within a second. An unlimited user's pacer costs one relaxed
 * load per read or write (a plain load, no locked instruction); anonymous flows have no pacer.
 */
#ifndef SV_TRACK_PACER_H
#define SV_TRACK_PACER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_PACE_BURST_NS 1000000000ull /**< the burst: one second of the rate (seed 003) */
#define SV_PACE_MIN_WAIT_MS 1u         /**< shortest pacing sleep (seed 003 MIN_WAIT) */
#define SV_PACE_MAX_WAIT_MS 1000u      /**< longest pacing sleep (seed 003 MAX_WAIT) */

/** One user's bucket. Fields are the pacer's own; callers use the functions below. */
typedef struct sv_pacer {
    _Atomic uint64_t rate;  /**< effective bytes/s; 0 = unlimited (the fast path) */
    _Atomic uint64_t tat;   /**< ns: when the balance is back to zero */
    _Atomic uint64_t last;  /**< ns of the last charge while limited (node fair share) */
    _Atomic uint32_t refs;  /**< flows holding it (registry lock to take, any thread to drop) */
    uint64_t user;          /**< frontend user id (sv_user.id) */
    uint64_t limit;         /**< the user's own limit, bytes/s, 0 = none (registry lock) */
} sv_pacer;

/** True when @p p limits its flows now. NULL (an anonymous flow) is never limited. */
static inline bool sv_pacer_limited(const sv_pacer *p)
{
    return p != NULL && atomic_load_explicit(&((sv_pacer *)p)->rate, memory_order_relaxed) != 0;
}

/**
 * Charge @p n payload bytes that a read or write of one of the user's flows has moved, at
 * @p now_ns, even into debt (seed 003 "charge after each transfer"). No-op when unlimited or
 * NULL. Any thread.
 */
void sv_pacer_charge(sv_pacer *p, uint64_t n, uint64_t now_ns);

/**
 * Nanoseconds from @p now_ns until the user's next transfer may start: 0 when the balance is not
 * negative or the pacer is unlimited (or NULL). Any thread.
 */
uint64_t sv_pacer_wait(const sv_pacer *p, uint64_t now_ns);

/** A wait (ns, from sv_pacer_wait) as the sleep a paced flow takes: ceil ms in [1 ms, 1 s]. */
uint32_t sv_pace_sleep_ms(uint64_t wait_ns);

/**
 * Decide the next step of a paced flow at @p now_ns (seed 003 poll_ready, kill first):
 * @return -ECONNABORTED when *@p killed is set (the pending transfer fails at once, whatever
 *         the debt), 0 when the transfer may start, 1 when the flow must sleep *@p sleep_ms first.
 */
int sv_pace_gate(const _Atomic bool *killed, const sv_pacer *p, uint64_t now_ns,
                 uint32_t *sleep_ms);

/**
 * Set the effective rate (bytes/s, 0 = unlimited) at @p now_ns (seed 003 set_rate): the same
 * rate leaves the bucket alone; limited → unlimited forgives any debt; unlimited → limited starts
 * with a full burst; limited → limited keeps the balance, capped at the new burst, and keeps the
 * debt (in bytes). Called under the registry lock; a charge racing it may be counted at either
 * rate.
 */
void sv_pacer_set_rate(sv_pacer *p, uint64_t rate, uint64_t now_ns);

/** Drop a flow's reference on @p p (from sv_pacers_acquire). Any thread; NULL-safe. */
void sv_pacer_release(sv_pacer *p);

/** One user's limit as published: frontend id and bytes/s (0 = none). */
typedef struct sv_pace_limit {
    uint64_t user;
    uint64_t rate;
} sv_pace_limit;

/** The process's pacers, one per user id, and the node-wide aggregate cap. */
typedef struct sv_pacers sv_pacers;

/**
 * A registry whose users share a node-wide cap of @p node_rate bytes/s (0 = none;
 * `node_speed_limit`). @return NULL on allocation failure.
 */
sv_pacers *sv_pacers_new(uint64_t node_rate);

/** Free the registry and every pacer. No flow may hold one any more. NULL-safe. */
void sv_pacers_free(sv_pacers *r);

/**
 * The pacer of user @p user with one more reference (created at the user's published limit and
 * the current node share when it has none yet). Worker thread, once per flow or association.
 * @return the pacer, or NULL on allocation failure (the flow then goes unpaced).
 */
sv_pacer *sv_pacers_acquire(sv_pacers *r, uint64_t user, uint64_t now_ns);

/**
 * Publish the users' limits (seed 003 publish_speed_limits / set_speed_limits): @p v may name a
 * user more than once (a user in several user sets) and the smallest non-zero limit wins; users
 * not named become unlimited (bounded by the node share). A pacer whose effective rate does not
 * change is left alone. Control thread. @return 0, or -ENOMEM (pacers of new users whose
 * allocation failed are created at their first flow instead).
 */
int sv_pacers_publish(sv_pacers *r, const sv_pace_limit *v, size_t n, uint64_t now_ns);

/**
 * Share the node cap fairly: every user that moved bytes in the last second is active;
 * each pacer's effective rate becomes the smallest non-zero of its user's limit and the node rate
 * divided by the active users. No-op without a node cap. Control thread, once per sampler tick.
 */
void sv_pacers_rebalance(sv_pacers *r, uint64_t now_ns);

#endif
