/*
 * What the runtime's files share about a worker (DESIGN.md "Threads and loops", seed 001
 * "actor"): the messages the control loop posts to it, the state every worker shares
 * (sv_shared) and its epochs (shared.c), the worker's own loop and tables, and its listeners.
 * The worker's thread itself (start, post, join) is worker.h's. Not part of the public API.
 */
#ifndef SV_SHARED_H
#define SV_SHARED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/bounds.h"
#include "supervisor/crypto/aead.h"
#include "supervisor/fleet.h"
#include "supervisor/netclass.h"
#include "supervisor/plane.h"
#include "supervisor/track/audit.h"
#include "supervisor/track/pacer.h"
#include "supervisor/track/tracker.h"
#include "supervisor/util/iphints.h"
#include "supervisor/util/list.h"
#include "supervisor/util/scanbudget.h"
#include "supervisor/xudp.h"

/* A worker's most recently matched order of a credential table's users (proto_ext.h) */
typedef struct sv_order sv_order;

/* ------------------------------------------------------------------------------------------ */

enum sv_msg_kind {
    SV_MSG_START_LISTENER = 1, /**< id, fds, handler (ref moves to the worker) */
    SV_MSG_SWAP_HANDLER,       /**< id, handler (ref moves), revoke = close sessions of users gone */
    SV_MSG_STOP_LISTENER,      /**< id */
    SV_MSG_PUBLISH_PLANE,      /**< plane (ref moves) */
    SV_MSG_SET_OWN_ADDRS,      /**< own_addrs (ref moves): the node's own addresses */
    SV_MSG_EXIT,               /**< close everything and leave the loop */
    SV_MSG_HINTS_EXPORT,       /**< hints_out: add this worker's hints */
    SV_MSG_HINTS_IMPORT,       /**< id, handler and hints_in (refs move): put them in its table */
};

typedef struct sv_hints_out sv_hints_out;
typedef struct sv_hints_in sv_hints_in;

typedef struct sv_msg {
    enum sv_msg_kind kind;
    uint32_t listener;
    int tcp_fd, udp_fd;
    sv_handler *handler;
    sv_plane *plane;
    sv_addrset *own_addrs;
    bool revoke;
    sv_hints_out *hints_out; /**< SV_MSG_HINTS_EXPORT (a reference) */
    sv_hints_in *hints_in;   /**< SV_MSG_HINTS_IMPORT (a reference) */
    sv_list link;
} sv_msg;

typedef struct sv_worker sv_worker;
typedef struct sv_wlistener sv_wlistener;

/**
 * Process-wide accounting of accept pauses: an episode
 * runs from the first worker that pauses to the last one that is accepting freely again, and
 * takes two log lines whatever the number of workers and listeners.
 */
typedef struct sv_accept_episode {
    _Atomic unsigned workers;    /**< workers inside an episode */
    _Atomic uint64_t started_ms; /**< loop-independent start (sv__wall_ms) of the episode */
    _Atomic uint64_t waited;     /**< connections accepted late during the episode */
} sv_accept_episode;

/** One worker's turn counts (sv_turn_counts): written by that worker alone, read by any
 *  thread; 64 bytes of padding keep two workers' counts off a common cache line. */
typedef struct sv_turn_row {
    _Atomic uint64_t le[SV_TURN_BUCKETS + 1];
    _Atomic uint64_t cpu_ns; /**< their sum */
    uint8_t pad[64];
} sv_turn_row;

/** One worker's flow closes by reason (sv_close_counts): written by that worker alone (relaxed
 *  load and store, no locked add), read by any thread; padded off the next worker's line. */
typedef struct sv_close_row {
    _Atomic uint64_t n[SV_CLOSE_REASONS];
    uint8_t pad[64];
} sv_close_row;

/** One worker's connector refusals by reason (sv_refusal_counts), kept like sv_close_row. */
typedef struct sv_refusal_row {
    _Atomic uint64_t n[SV_REFUSALS];
    uint8_t pad[64];
} sv_refusal_row;

/** Shared, thread-safe parts every worker sees. */
typedef struct sv_shared {
    sv_tracker *tracker;
    sv_pacers *pacers;           /**< per-user speed limits (set before workers start) */
    sv_dns_options dns;          /**< each worker's resolver (set before workers start) */
    sv_redis_options redis;      /**< each worker's fleet client (set before start) */
    sv_fleet_shared fleet;       /**< their shared state (log lines) */
    /** the process's TCP connection budget (max_connections), one for every worker,
     *  so that a worker accepts while the process has room whichever worker the kernel picks
     *  (set before workers start) */
    uint32_t conn_cap;
    /** The connections the descriptor limit allows (sv_max_connections_default): what the
     *  process's connections and kernel relays' pipes fit in (sv_fds_fit) */
    uint32_t fd_cap;
    /** connections one worker keeps before authentication (its share of half the
     *  budget, at least 1); past it, its oldest such connection is closed (admission.c) */
    uint32_t preauth_cap;
    _Atomic uint32_t n_conns;    /**< live TCP connections of every worker (sv_conn) */
    _Atomic uint32_t n_spliced;  /**< of them, holding a kernel relay's pipes (sv_fds_fit) */
    /** Per worker (index): its connections before authentication (written by it alone), and
     *  the evictions of them other workers asked it for (admission.c) */
    _Atomic uint32_t preauth[SV_WORKERS_MAX];
    _Atomic uint32_t evict_asked[SV_WORKERS_MAX];
    sv_accept_episode pause;
    /* the epoch of the plane each worker has adopted (serves new flows with). */
    unsigned n_workers;          /**< workers started (set by the control loop as they start) */
    /** a worker that learns a client IP's user tells the others (sv__wl_learn), so a
     *  client is scanned for once, not once per worker. peers is the supervisor's worker array
     *  from the moment all have started until shutdown joins them, else NULL; a worker posts to
     *  them only while holding peers_lock for reading (the supervisor writes it). */
    pthread_rwlock_t peers_lock;
    sv_worker *const *peers;
    unsigned n_peers;
    void (*post)(sv_worker *w, sv_msg *m); /**< sv_worker_post (set by the supervisor: the
                                                 plane's code does not link the worker's) */
    pthread_mutex_t adopt_mu;    /**< with adopt_cv: a worker adopted a plane */
    pthread_cond_t adopt_cv;
    _Atomic uint64_t adopted[SV_WORKERS_MAX];
    /** Clients refused before authentication, by policy (index enum sv_probe_policy - 1):
     *  drained, closed, sent to the fallback or answered 404 (sv_refused_clients). */
    _Atomic uint64_t refused[3];
    sv_audit *audit; /**< audit hits, taken by sv_take_audit() */
    /** Shadowsocks trial decryptions (a TCP first chunk, a UDP datagram) and the keys
     *  they tried, matched or not (sv_ss_trials). */
    _Atomic uint64_t ss_lookups, ss_keys;
    /** full scans off the worker loops (scan.c): the budget (under scan_mu),
     *  one scan running at a time (scan_run_mu), and their counts (sv_ss_scans). */
    pthread_mutex_t scan_mu, scan_run_mu;
    sv_scan_budget scan_budget;
    _Atomic uint64_t ss_scans_queued, ss_scans_run, ss_scans_dropped;
    /** PROTOCOLS-2.md §2.6: connections whose chain switched to raw, [0] client bytes (in),
     *  [1] ours (out) (sv_vision_direct). */
    _Atomic uint64_t direct[2];
    /** connections relayed by splice(2) once Vision went direct both ways, and the
     *  payload bytes they moved so (sv_vision_direct). */
    _Atomic uint64_t splice_conns, splice_bytes;
    _Atomic uint64_t splice_no_pipe; /**< relayed in user space: no pipe could be had */
    /** Worker loop turns by the CPU time their thread spent in them (sv_turn_counts): a turn
     *  is everything one loop iteration ran, so its CPU time is how long every other flow of
     *  that worker waited on katana's own work (the 2 ms pause) */
    sv_turn_row turns[SV_WORKERS_MAX]; /**< one row per worker (index), written by it alone */
    sv_close_row closes[SV_WORKERS_MAX]; /**< flow closes by reason, likewise */
    sv_refusal_row refusals[SV_WORKERS_MAX]; /**< connector refusals by reason, likewise */
} sv_shared;

/** Worker @p index now serves new flows with the plane of @p epoch; wakes sv__epoch_wait. */
void sv__epoch_adopted(sv_shared *s, unsigned index, uint64_t epoch);
/** The newest epoch every started worker has adopted (the lowest of them). Any thread. */
uint64_t sv__epoch_now(sv_shared *s);
/** Wait up to @p ms for sv__epoch_now(@p s) >= @p epoch. @return true when it is. */
bool sv__epoch_wait(sv_shared *s, uint64_t epoch, unsigned ms);

/**
 * Test seams (tests/unit/test_supervisor.c); NULL in the daemon. alloc_fails: supervisor.c asks
 * it before allocating a worker message (true = the allocation fails). adopting: a worker calls
 * it just before it adopts the plane of @p epoch.
 */
typedef struct sv_test_hooks {
    bool (*alloc_fails)(void);
    void (*adopting)(unsigned worker, uint64_t epoch);
} sv_test_hooks;
extern sv_test_hooks sv__test_hooks;

/* worker internals shared by worker.c, conn.c, udp.c, scan.c, hints.c */
struct sv_worker {
    unsigned index;
    sv_shared *shared;
    uv_loop_t loop;
    uv_async_t async;
    pthread_t thread;
    pthread_mutex_t mu;
    sv_list inbox;          /**< sv_msg, under mu */
    /** worker.c's hook, called by conn.c when one of its connections is gone or gave its kernel
     *  relay's pipes back (resume accepting): a pointer, so that conn.c does not call back into
     *  worker.c */
    void (*conn_gone)(sv_worker *w);
    _Atomic bool flags_set; /**< a kill/close flag was set somewhere on this worker */
    sv_plane *plane;        /**< current plane (worker-owned reference) */
    sv_addrset *own_addrs;  /**< the node's own addresses (worker-owned reference; NULL = none) */
    sv_resolver *resolver;  /**< names of direct flows are resolved here */
    /** Resolvers of panel `dns` routes, one per server, made on first use by the
     *  connector (connector.c) and kept until the worker ends (links hold them). */
    struct sv_route_resolver {
        char server[SV_DNS_SERVER_LEN];
        sv_resolver *r;     /**< NULL: a free entry */
    } route_resolvers[SV_ROUTE_RESOLVERS_MAX];
    sv_fleet *fleet;        /**< fleet-wide device limit client, or NULL: off */
    sv_list listeners;      /**< sv_wlistener */
    sv_list conns;          /**< TCP connections (sv_conn) */
    sv_list assocs;         /**< UDP associations */
    sv_list udp_scans;      /**< datagrams waiting for their scan off the loop */
    sv_xudp_table xudp;     /**< XUDP associations by GlobalID, attached and detached (udp.c) */
    bool exiting;
    uv_timer_t sweep;       /**< SV_IDLE_SWEEP_MS: closes idle relays */
    uv_prepare_t turn_clock; /**< runs once per loop turn: charges the turn's CPU (turns) */
    uint64_t turn_began_ns; /**< the thread's CPU clock at the last turn_clock, 0 = none yet */
    uint32_t n_conns;       /**< live TCP connections (sv_conn) of this worker */
    uint32_t n_spliced;     /**< of them, holding a kernel relay's pipes (sv_fds_fit) */
    /** connections accepted and not yet authenticated by their core nor closing, in
     *  accept order (oldest first; conn.c moves one to conns when it authenticates or
     *  closes), and their number */
    sv_list preauth;
    uint32_t n_preauth;
    /** accepted sockets of listeners with accept_proxy_protocol whose header is not read yet
     *  (proxy_wait.c, oldest first; not connections yet), and their number */
    sv_list proxy_waits;
    uint32_t n_proxy_waits;
    bool accept_paused;     /**< no listener of this worker polls its socket */
    bool paused_this_tick;  /**< paused since the last retry tick */
    bool in_episode;        /**< counted in shared->pause (the retry timer runs) */
    uint64_t episode_accepted; /**< connections accepted since the episode began */
    uv_timer_t accept_retry; /**< SV_ACCEPT_RETRY_MS while in an episode */
    sv_aead udp_open, udp_seal; /**< cipher contexts re-keyed per datagram (never reallocated) */
    uint8_t scratch[SV_SCRATCH + SV_CARRY_MAX + 64]; /**< carry, then one read */
    uint8_t sealed[SV_SEALED_MAX]; /**< downstream wire built from one remote read; also the
                                        client read under layers */
    uint8_t stage[SV_CHAIN_STAGE_BYTES]; /**< boundaries between transport layers (layer.h) */
    uint8_t end_frame[SV_END_FRAME_MAX]; /**< a core's frame_end bytes: a stream refused inside a
                                              client read is ended while sealed holds that read */
};

struct sv_wlistener {
    sv_list link;
    sv_worker *w;
    uint32_t id;
    int tcp_fd;             /**< the listening socket (owned; closed with the listener) */
    uv_poll_t accept;       /**< readiness of tcp_fd; stopped while the worker pauses */
    bool has_accept;        /**< tcp_fd listens and accept is initialised: it is polled unless
                                 the worker pauses, and closed with the listener */
    uv_udp_t udp;
    bool has_udp;
    int open_handles;
    bool stopped;
    unsigned n_users_of; /**< live connections and associations still pointing here */
    sv_handler *handler;
    /* this worker's guides for trial decryption over handler's users (sv__wl_guide) */
    sv_iphints hints;          /**< client IP -> the user who last authenticated from it */
    sv_order *order;           /**< most recently matched first, for order_of's users;
                                    allocated at its first use, or NULL */
    const void *order_of;      /**< the credential table @p order was built for, or NULL */
};

#define SV_HINTS_MAX SV_IP_HINTS_PER_INBOUND /**< client IPs remembered per worker and listener
                                                 */
#define SV_HINT_TTL_S SV_IP_HINT_TTL_S /**< a client IP's user is forgotten after this without a
                                            login */

/** Drop a listener user reference; frees a stopped listener whose handles are closed when none
 *  is left (shared.c, so that conn.c and udp.c need nothing of worker.c). */
void sv__wlistener_release(sv_wlistener *l);
/** Free what a worker listener's guides hold (hints.c; the listener is freed next). */
void sv__wl_guides_free(sv_wlistener *l);
/** Count one trial decryption that tried @p keys keys (> 0) in @p s (any worker). */
void sv__ss_count(sv_shared *s, unsigned keys);

#endif
