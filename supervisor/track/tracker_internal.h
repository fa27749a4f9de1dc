/*
 * Internals shared by tracker.c (registry, kill, events), sampler.c (stats ticks) and ledger.c
 * (per-user usage). Not for other modules: they use supervisor/track/tracker.h.
 *
 * Lock order (never taken the other way round): sample_lock → worker lock, stats_lock; ledger lock →
 * worker lock; a device admission lock → worker lock, dev_lock; stats_lock and ev_lock are leaves (nothing else is taken while they are held).
 */
#ifndef SV_TRACK_TRACKER_INTERNAL_H
#define SV_TRACK_TRACKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "supervisor/track/tracker.h"
#include "supervisor/util/table.h"

/** Highest worker count: a flow id keeps its worker in the low 8 bits. */
#define SV__TRACK_MAX_WORKERS 256u

/** Device admission locks (devices.c), a power of two: users are spread over them by id. */
#define SV__DEV_STRIPES 16u

/** Entries per chunk of a slot pool: chunks never move, so a worker's pointer stays valid. */
#define SV__POOL_CHUNK 1024u

/** slot_id of a record counting in its own slot (unregistered, or the pool had no memory). */
#define SV__SLOT_OWN UINT32_MAX

/**
 * One worker's dense slots of one kind (sv_flow_slot or sv_session_slot): the
 * sampler's and the ledger's scans walk entries [0, used) in order and skip those not live.
 * Released entries are reused last-in first-out. Under the worker's lock.
 */
typedef struct sv__pool {
    char **chunks;     /**< n_chunks chunks of SV__POOL_CHUNK entries of elem bytes */
    size_t elem;
    uint32_t n_chunks;
    uint32_t used;     /**< entries handed out at least once */
    uint32_t *free;    /**< released entries; room for every entry of every chunk */
    uint32_t n_free;
    uint32_t n_own;    /**< live records counting in their own slot (pool out of memory) */
} sv__pool;

/** Entry @p id (< used) of @p p. */
static inline void *sv__pool_at(const sv__pool *p, uint32_t id)
{
    return p->chunks[id / SV__POOL_CHUNK] + (size_t)(id % SV__POOL_CHUNK) * p->elem;
}

/** Release entry @p id of @p p for reuse (its last bytes are counted). Never fails. */
static inline void sv__pool_put(sv__pool *p, uint32_t id)
{
    p->free[p->n_free++] = id;
}

/** One worker's registry: live records and records unregistered since the last count. */
typedef struct sv__worker {
    pthread_mutex_t lock;
    sv_list flows, sessions;               /**< live, in id order */
    sv__pool flow_pool, session_pool;      /**< the live records' counters (and closed ones'
                                                until counted) */
    sv_list closed_flows, closed_sessions; /**< owned by the tracker, not yet counted */
    uint64_t next_flow;                    /**< per-worker flow counter, from 1 */
} sv__worker;

/** One group of the stats snapshot (total, an inbound, an outbound tag). */
typedef struct sv__group {
    sv_tag_stats s;   /**< tag, cumulative up/down, live flows of this tick */
    uint64_t tick_up, tick_down;
} sv__group;

/** A user of the users table: its id and the id in decimal (its snapshot tag, made once). */
/**
 * The label user @p user is known by in flows and in the stats snapshot (seed 003
 * FlowEntry::user_label, UserStats::label): katana's users are the frontend's numeric ids and
 * their label is the id in decimal (seed 001: katana's Uid::name() is that number), so a flow
 * carries no label of its own (no string per flow). Written into @p out (@p cap bytes).
 */
static inline void sv__user_label(uint64_t user, char *out, size_t cap)
{
    snprintf(out, cap, "%" PRIu64, user);
}

typedef struct sv__user {
    uint64_t user;
    char tag[24];
} sv__user;

/** A user's sums, indexed like the users table (dense: the tick adds each flow into one). */
typedef struct sv__user_sum {
    uint64_t up, down;           /**< bytes since start */
    uint64_t tick_up, tick_down; /**< bytes this tick */
    uint32_t flows;              /**< live flows this tick */
} sv__user_sum;

/** A user's ledger account (wire bytes). */
typedef struct sv__account {
    uint64_t user;
    uint64_t pend_up, pend_down;   /**< not yet taken */
    uint64_t total_up, total_down; /**< since start */
} sv__account;

struct sv_tracker {
    unsigned n_workers;
    sv__worker *workers;
    sv_tracker_wake_fn wake;
    void *wake_ctx;
    _Atomic uint64_t next_session;

    pthread_mutex_t ev_lock; /**< the event ring */
    sv_event *ring;          /**< SV_EVENT_RING entries; seq s lives at (s - 1) % SV_EVENT_RING */
    uint64_t ev_head;        /**< seq of the newest event, 0 = none yet */

    pthread_mutex_t sample_lock; /**< the sampler's aggregation state */
    uint64_t tick;
    sv__group total;
    sv_table inbounds, outbounds; /**< of sv__group */
    sv_table users;           /**< of sv__user, in order of first use */
    sv__user_sum *user_sums;  /**< users.n of them, room for n_user_sums */
    size_t n_user_sums;
    sv_tag_stats *spare_users; /**< the users array of the snapshot before, for reuse */
    size_t n_spare_users, n_published_users; /**< room in spare_users / in stats.users */
    uint32_t *user_order; /**< indexes of the user groups sorted by id, users.n of them once
                               sorted (sampler.c); re-sorted only when a user group was added */
    size_t n_user_order;

    pthread_mutex_t stats_lock; /**< the published snapshot */
    sv_stats stats;

    pthread_mutex_t ledger_lock;
    sv_table accounts; /**< of sv__account */

    pthread_mutex_t dev_lock;  /**< the remote device table (devices.c) */
    sv_device_count *remote;   /**< sorted by user, unique */
    size_t n_remote;
    _Atomic uint64_t dev_refused;
    pthread_mutex_t dev_admit[SV__DEV_STRIPES]; /**< check + bind of one user's new session */
    unsigned test_admit_delay_us; /**< test hook (KATANA_TEST_ADMIT_DELAY_MS): a pause between
                                       an admission's check and its insertion; 0 = none */
};

/* Pure string helpers shared by tracker.c, sampler.c and devices.c, inline so that no file
 * of track/ calls back into another one (no cycle, supervisor/README.md "Include direction"). */

/** Length of the tag part of an outbound id: "tag@v3" → 3; without "@vN" the whole length. */
static inline size_t sv__outbound_tag_len(const char *outbound)
{
    const char *at = strrchr(outbound, '@');
    size_t n = strlen(outbound);
    if (!at || at[1] != 'v' || at[2] == '\0')
        return n;
    for (const char *p = at + 2; *p; p++)
        if (*p < '0' || *p > '9')
            return n;
    return (size_t)(at - outbound);
}

/** The IP part of an "ip:port" or "[v6]:port" source, copied into @p out (NUL-terminated). */
static inline void sv__source_ip(const char *source, char out[64])
{
    const char *colon = strrchr(source, ':');
    size_t n = colon ? (size_t)(colon - source) : strlen(source);
    if (n >= 2 && source[0] == '[' && source[n - 1] == ']') {
        source++;
        n -= 2;
    }
    if (n > 63)
        n = 63;
    memcpy(out, source, n);
    out[n] = '\0';
}

/** Sampler state and ledger setup/teardown (called by sv_tracker_new / sv_tracker_free). */
void sv__sampler_init(sv_tracker *t);
void sv__sampler_free(sv_tracker *t);
void sv__ledger_init(sv_tracker *t);
void sv__ledger_free(sv_tracker *t);

/**
 * Move every live session's new wire bytes (and closed sessions' last bytes) into their users'
 * pending totals; frees drained closed sessions. Takes the ledger lock.
 */
void sv__ledger_reconcile(sv_tracker *t);

#endif
