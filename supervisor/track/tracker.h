/*
 * Flow and session tracking, stats and the usage ledger (seed 003).
 *
 * Records are allocated by a worker when a flow (dialed connection / UDP sub-link) or a session
 * (client connection / UDP association) opens, registered here, and their counters are written
 * only by that worker with relaxed atomic stores (no lock on the per-byte path). At close the
 * worker unregisters the record; the tracker then owns it and frees it after the sampler (flows)
 * or the ledger (sessions) has counted its last bytes. Registry mutations take a per-worker mutex
 * (once per open/close, never per byte); readers (API, sampler) take the same mutex briefly.
 *
 * The counters live in a slot of a per-worker pool of fixed chunks (the sampler and
 * the ledger walk those dense arrays instead of chasing one record per flow); the record points
 * at its slot (rec->bytes, rec->wire). A slot is handed back only once its last bytes are
 * counted, and a new flow's slot starts from zero, so nothing carries over to the next flow.
 *
 * Counting is exact (seed 003, "the sampler counts every byte once"): each record has watermarks
 * owned by the counting side; live records are scanned first, then the closed queue is drained,
 * and the watermark swap hands every byte to exactly one tick.
 */
#ifndef SV_TRACK_TRACKER_H
#define SV_TRACK_TRACKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "supervisor/supervisor.h"
#include "supervisor/util/list.h"

/** Byte counters written by one worker thread, read anywhere. */
typedef struct sv_meter {
    _Atomic uint64_t up;   /**< client → remote */
    _Atomic uint64_t down; /**< remote → client */
} sv_meter;

/** Add to a counter from its single writer: a relaxed load+store, no locked instruction. */
static inline void sv_meter_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/**
 * A flow's static fields as its record keeps them: sv_flow_info's, its strings pointing into the
 * record's own text (about 100 bytes and the strings' lengths per flow, not the 900 of
 * sv_flow_info's fixed arrays); the user label is the user id's decimal.
 */
typedef struct sv_flow_desc {
    uint64_t id; /**< names its worker: id % 256 == worker index */
    uint64_t session;
    bool has_user;
    uint64_t user;
    const char *inbound, *source, *destination, *sniffed, *outbound; /**< never NULL */
    enum sv_network network;
    int rule;
    uint64_t epoch;
    uint64_t started_ms;
} sv_flow_desc;

/**
 * A flow's counters and the sampler's state for it: an entry of its worker's dense
 * pool while registered, so that a tick reads arrays rather than scattered records; the
 * record's own before registration, or for good when the pool had no memory.
 */
typedef struct sv_flow_slot {
    sv_meter bytes;          /**< payload bytes (written by the worker only) */
    uint64_t wm_up, wm_down; /**< sampler watermarks (sampler only) */
    uint32_t groups[3];      /**< sampler only: index + 1 of its inbound, outbound tag and user
                                  group, 0 = not looked up yet (set to 0 at register) */
    bool live;               /**< registered and not closed (under the worker's lock) */
    struct sv_flow_rec *rec; /**< the record it counts for (the sampler's first lookup) */
} sv_flow_slot;

typedef struct sv_flow_rec {
    sv_flow_desc info;   /**< static fields, filled by the worker before register (id by tracker) */
    sv_meter *bytes;     /**< payload bytes, written by the worker only: its slot's counters
                              (set by sv_flow_rec_new, moved into the pool by register) */
    uint32_t slot_id;    /**< tracker only: its entry in the worker's pool, or UINT32_MAX */
    unsigned worker;
    _Atomic bool kill;   /**< set by sv_tracker_kill*(); the worker closes the flow */
    void *owner;         /**< the worker's object for this flow (only the worker dereferences it) */
    sv_list link;        /**< registry or closed queue */
    sv_flow_slot own;    /**< the slot while unregistered or when the pool had no memory */
    char text[];         /**< info's strings, each NUL-terminated */
} sv_flow_rec;

/**
 * Allocate a zeroed flow record holding copies of the given strings (NULL = "") as its info's
 * inbound, source, destination, sniffed name and outbound ("tag@vN"); the caller fills the rest.
 * One allocation: free() it (or hand it to the tracker). @return NULL when out of memory.
 */
sv_flow_rec *sv_flow_rec_new(const char *inbound, const char *source, const char *destination,
                             const char *sniffed, const char *outbound);

/**
 * A session's static fields as its record keeps them: sv_session_info's, its strings pointing into
 * the record's own text (the strings' lengths per session, not the 129 bytes of
 * sv_session_info's arrays); user and counters live in the record.
 */
typedef struct sv_session_desc {
    uint64_t id;
    const char *inbound, *source; /**< never NULL */
    uint64_t started_ms;          /**< wall clock, ms since the Unix epoch */
    bool udp;
} sv_session_desc;

/** A session's wire counters and the ledger's state for it (see sv_flow_slot). */
typedef struct sv_session_slot {
    sv_meter wire;              /**< wire bytes on the client side (written by the worker only) */
    uint64_t wm_up, wm_down;    /**< ledger watermarks (ledger only) */
    uint32_t account;           /**< ledger only: index + 1 of its user's account, 0 = not looked
                                     up yet (set to 0 at register) */
    bool live;                  /**< registered and not closed (under the worker's lock) */
    struct sv_session_rec *rec; /**< the record it counts for (its user, until looked up) */
} sv_session_slot;

typedef struct sv_session_rec {
    sv_session_desc info; /**< static fields, filled by the worker (id by tracker) */
    sv_meter *wire;       /**< wire bytes on the client side, written by the worker only: its
                               slot's counters (set by sv_session_rec_new, moved by register) */
    uint32_t slot_id;     /**< tracker only: its entry in the worker's pool, or UINT32_MAX */
    _Atomic bool has_user; /**< set once by the worker when the first flow authenticates */
    _Atomic uint64_t user; /**< frontend user id, valid when has_user */
    unsigned worker;
    _Atomic bool close_requested; /**< set by sv_tracker_close_sessions(); the worker closes it */
    void *owner;
    sv_list link;
    sv_session_slot own; /**< the slot while unregistered or when the pool had no memory */
    char text[];         /**< info's strings, each NUL-terminated */
} sv_session_rec;

/** Bytes of room a session record keeps for its source text, NUL included (sv_session_info's). */
#define SV_SESSION_SOURCE_MAX 64u

/**
 * Allocate a zeroed session record holding copies of @p inbound and @p source (NULL = "") as its
 * info's strings (room for SV_SESSION_SOURCE_MAX bytes of source at least, so that
 * sv_tracker_session_set_source can replace it); the caller fills the rest. One allocation: free() it (or hand it to the
 * tracker). @return NULL when out of memory.
 */
sv_session_rec *sv_session_rec_new(const char *inbound, const char *source);

typedef struct sv_tracker sv_tracker;

/**
 * Replace the source text of the open session @p rec (its worker's, registered with
 * sv_tracker_session_open) by @p source ("ip:port"), truncated to SV_SESSION_SOURCE_MAX - 1
 * bytes, under the worker's lock: a forwarding proxy named the client
 * (nodes[].trusted_forwarders). Call before its first flow.
 */
void sv_tracker_session_set_source(sv_tracker *t, sv_session_rec *rec, const char *source);

/**
 * Called from any thread, possibly with a tracker mutex held, after a kill or close flag was set
 * on a record of worker @p worker: it only wakes that worker (uv_async_send), which then closes
 * every flow/session of its own whose flag is set. It must not call back into the tracker.
 */
typedef void (*sv_tracker_wake_fn)(void *ctx, unsigned worker);

/**
 * Create a tracker for @p n_workers workers; @p wake tells a worker to look at its flags.
 * @return NULL on allocation failure.
 */
sv_tracker *sv_tracker_new(unsigned n_workers, sv_tracker_wake_fn wake, void *wake_ctx);

/** Free the tracker and every record it still holds. No worker may use it any more. */
void sv_tracker_free(sv_tracker *t);

/**
 * Register a flow opened on @p rec->worker: assigns rec->info.id (id % 256 == worker), inserts
 * it, emits OPENED. Worker thread. The worker keeps using @p rec until unregister.
 */
void sv_tracker_flow_open(sv_tracker *t, sv_flow_rec *rec);

/**
 * Unregister a flow: removes it, queues it for the sampler's last count, emits CLOSED with the
 * final counts. Ownership passes to the tracker. Worker thread.
 */
void sv_tracker_flow_close(sv_tracker *t, sv_flow_rec *rec);

/** Register / unregister a session (same rules; the ledger counts its wire bytes). */
void sv_tracker_session_open(sv_tracker *t, sv_session_rec *rec);
void sv_tracker_session_close(sv_tracker *t, sv_session_rec *rec);

/** Bind a live session to a user (first authenticated flow). Worker thread. */
void sv_tracker_session_bind_user(sv_tracker *t, sv_session_rec *rec, uint64_t user);

/** Copies of every live flow / session sorted by id (see sv_flows() / sv_sessions()). */
long sv_tracker_flows(sv_tracker *t, sv_flow_info **out);
long sv_tracker_sessions(sv_tracker *t, sv_session_info **out);

/** Kill one flow (sets its kill flag, wakes its worker). @return 0 or -ENOENT. Any thread. */
int sv_tracker_kill(sv_tracker *t, uint64_t id);
/** Kill every flow matching @p f. @return how many. Any thread. */
size_t sv_tracker_kill_where(sv_tracker *t, const sv_flow_filter *f);

/**
 * Close live sessions that match: all (inbound NULL, has_user false, session 0), one session
 * id, all of an inbound, or all bound to a user. @return how many were asked to close
 * (sessions already asked before are not counted again).
 */
size_t sv_tracker_close_sessions(sv_tracker *t, const char *inbound, bool has_user, uint64_t user,
                                 uint64_t session);

/**
 * The device-limit decision, pure: admit when @p limit is 0 (unlimited), when the new
 * session's IP is already among the user's live IPs (@p ip_known), or when @p local_ips plus
 * @p remote stays below @p limit. Existing sessions are never affected by it.
 */
bool sv_device_decide(uint32_t limit, size_t local_ips, bool ip_known, uint32_t remote);

/** Outcome of sv_tracker_session_admit(). */
typedef enum sv_device_verdict {
    SV_DEVICE_ADMITTED, /**< the session is now bound to the user */
    SV_DEVICE_REFUSED,  /**< over the limit: not bound, counted as a refusal */
    SV_DEVICE_ASK_FLEET /**< a new IP and the fleet (Redis) decides: not bound yet */
} sv_device_verdict;

/**
 * Device-limit admission of the live, not yet bound session @p rec (its info.source is
 * "ip:port" / "[v6]:port") for @p user, and its binding to the user, as one step:
 * under the user's admission lock it counts the user's distinct live IPs (each worker's lock
 * once) and, when admitted, binds @p rec before any other admission of the user can count.
 * An IP the user already has live, or @p limit 0, is always admitted. For a new IP: with
 * @p ask_fleet the answer is SV_DEVICE_ASK_FLEET (the caller asks Redis, then calls
 * sv_tracker_session_admit_fleet()); else sv_device_decide() with the remote count
 * (the panel's alivelist). A refusal is counted (sv_tracker_device_refusals). Worker thread.
 */
sv_device_verdict sv_tracker_session_admit(sv_tracker *t, sv_session_rec *rec, uint64_t user,
                                           uint32_t limit, bool ask_fleet);

/**
 * The fleet's answer for a session that got SV_DEVICE_ASK_FLEET: @p ok binds @p rec to
 * @p user, else the refusal is counted. Worker thread.
 */
void sv_tracker_session_admit_fleet(sv_tracker *t, sv_session_rec *rec, uint64_t user, bool ok);

/** Replace the remote device table (see sv_set_remote_devices()). Any thread. 0 or -ENOMEM. */
int sv_tracker_set_remote_devices(sv_tracker *t, const sv_device_count *v, size_t n);

/** The IP part of @p source ("ip:port" / "[v6]:port"), NUL-terminated into @p out. Pure. */
void sv_source_ip(const char *source, char out[64]);

/** Refusals counted by sv_tracker_session_admit(). Any thread. */
uint64_t sv_tracker_device_refusals(sv_tracker *t);

/** Number of live sessions of @p user and the number of distinct client IPs among them. */
void sv_tracker_user_presence(sv_tracker *t, uint64_t user, size_t *sessions, size_t *ips);

/**
 * One sampler tick (seed 003 "sampler"): reconcile the ledger, count every flow's bytes since
 * its watermark (live, then the closed queue), publish a new snapshot. Control loop.
 * @param interval_ns  measured time since the previous tick (rates are bytes over it)
 */
void sv_tracker_tick(sv_tracker *t, uint64_t interval_ns);

/** Copy of the latest snapshot (see sv_stats_get()). */
int sv_tracker_stats(sv_tracker *t, sv_stats *out);

/** Reconcile the ledger, then take per-user deltas / totals (see sv_take_usage()). */
long sv_tracker_take_usage(sv_tracker *t, sv_usage **out);
long sv_tracker_usage_snapshot(sv_tracker *t, sv_usage **out);

/** Event ring access (see sv_events_next()). */
int sv_tracker_events_next(sv_tracker *t, uint64_t *cursor, sv_event *ev);
uint64_t sv_tracker_events_head(sv_tracker *t);

#endif
