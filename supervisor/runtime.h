/*
 * Internal types of the running supervisor: handlers, targets, planes, workers and the messages
 * the control loop posts to workers (DESIGN.md "Threads and loops", seed 000 "plane", seed 001
 * "actor"). Not part of the public API.
 */
#ifndef SV_RUNTIME_H
#define SV_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/crypto/replay.h"
#include "supervisor/fleet.h"
#include "supervisor/netclass.h"
#include "supervisor/outbound/outbound.h"
#include "supervisor/principal.h"
#include "supervisor/proto/dgram.h"
#include "supervisor/proto/proto.h"
#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/ss2022.h"
#include "supervisor/router.h"
#include "supervisor/supervisor.h"
#include "supervisor/track/audit.h"
#include "supervisor/track/pacer.h"
#include "supervisor/track/tracker.h"
#include "supervisor/transport/tls.h"
#include "supervisor/transport/grpc.h"
#include "supervisor/transport/ws.h"
#include "supervisor/transport/reality.h"
#include "supervisor/util/iphints.h"
#include "supervisor/util/list.h"
#include "supervisor/util/scanbudget.h"
#include "supervisor/xudp.h"

#define SV_WORKERS_MAX 64
/**
 * Room for the wire framed from one remote read of SV_SCRATCH bytes: every core's
 * frame_max(SV_SCRATCH) must fit (sv_handler_new checks). Shadowsocks needs
 * SV_SS_SEALED_MAX(SV_SCRATCH) (202 bytes over the payload); VMess (PROTOCOLS.md §6.6) a
 * response header and a chunk's overhead (up to 97 bytes) per 2 KiB-16 KiB of payload.
 */
#define SV_SEALED_MAX (SV_SCRATCH + 16384)
/** A sub-flow's outbound stops being read while the core holds more than this for it, waiting
 *  for the client's flow control (proto.h queued), and reads again under the low mark */
#define SV_SUB_QUEUED_HIGH (512u * 1024u)
#define SV_SUB_QUEUED_LOW (128u * 1024u)
/** Most bytes for the client kept behind a write in flight (a multiplexed connection's End
 *  frames; what a core's flow-control backlog, SV_SUB_QUEUED_HIGH and a read per stream, may
 *  release at once): past it the client is taken as one that does not read */
#define SV_CLIENT_MORE_MAX (8u * 1024u * 1024u)
/** Per-worker read buffer: one plain TCP read, either side. 256 KiB (issue 13): a bulk relay
 *  makes a quarter of the reads, writes and loop turns per GB that 64 KiB made, and carries a
 *  chunk split by a read boundary a quarter as often. */
#define SV_SCRATCH (256 * 1024)
/** A client read under transport layers (wrapped bytes, into the sealed buffer): as large as a
 *  plain read (issue 11: a quarter of the reads and writes per GB that 64 KiB made for
 *  REALITY). The top layer unwraps into scratch, so under one layer (TLS, REALITY) a read
 *  reaches the protocol in one piece; between two layers it moves in stage pieces
 *  (layer.h SV_CHAIN_STAGE). */
#define SV_LAYERED_READ SV_SCRATCH
/** Most unconsumed client bytes any protocol core keeps between reads (its carry_max): a whole
 *  Shadowsocks 2022 chunk (0xFFFF + tag, PROTOCOLS.md §3.2), the largest of the cores. */
#define SV_CARRY_MAX SV_SS22_CARRY_MAX
#define SV_UDP_SUBLINKS_MAX 64          /**< seed 002: sub-links per UDP association */
#define SV_ROUTE_RESOLVERS_MAX 16       /**< issue 13: `dns` route servers a worker serves */
#define SV_UDP_IDLE_MS 60000            /**< an idle UDP association expires */
#define SV_HANDSHAKE_MS 60000           /**< a client that never completes its header is closed */
#define SV_TLS_HANDSHAKE_MS 10000       /**< issue 8: a transport handshake (TLS, WebSocket
                                             upgrade ...) not done by then is dropped */
#define SV_TLS_PLAIN_READ (3 * 16384)   /**< remote read size under transport layers: its
                                             wrapping fits their output queues (SV_TLS_OUT_MAX) */
#define SV_REFUSE_LINGER_MS 5000        /**< a client answered 404 is closed after this at most */
#define SV_TCP_IDLE_MS 300000           /**< a relay that moved nothing either way for this long ends */
#define SV_IDLE_SWEEP_MS 10000          /**< how often a worker looks for idle relays */
#define SV_PROBE_DRAIN_MIN_MS 5000      /**< a failed client is drained for a random time ... */
#define SV_PROBE_DRAIN_SPAN_MS 25000    /**< ... in [min, min + span) before the close */
#define SV_OWN_ADDRS_REFRESH_MS 30000   /**< how often the control loop re-reads the host's addresses */
#define SV_LISTEN_BACKLOG 1024          /**< accept queue of each worker's listening socket */
#define SV_ACCEPT_BATCH 64              /**< accepts per readiness callback (then the loop turns) */
#define SV_ACCEPT_RETRY_MS 200          /**< a paused worker retries accepting this often */
#define SV_TRIM_FALL 256                /**< issue 33: the heap is trimmed once the
                                             connections fell by this many (and by half) */
#define SV_EVICT_ON_EMFILE 16           /**< issue 33: pre-auth connections closed per accept
                                             that failed for lack of descriptors */
#define SV_PREAUTH_PRESSED_MS 5000      /**< issue 33: under pressure a connection not
                                             authenticated by then is closed (admission.c) */
#define SV_ADOPT_WAIT_MS 2000           /**< sv_apply waits this long at most for every worker to
                                             adopt its plane (they do within a loop turn) */

_Static_assert(SV_SEALED_MAX >= SV_SS_SEALED_MAX(SV_SCRATCH), "sealed buffer too small");
/** Room for a core's end-of-stream bytes (proto.h frame_end; VLESS with Vision's padding needs
 *  about 1.5 KiB); a core whose frame_max(0) is larger has them built in sealed instead. */
#define SV_END_FRAME_MAX 2048

/** A salt replay filter shared by every handler of one inbound. */
typedef struct sv_replay_ref {
    _Atomic int refs;
    sv_replay *filter;
} sv_replay_ref;

/**
 * What serves new connections of one inbound: its protocol core, the core's credential table and
 * the principals of its users. Immutable and reference-counted; a listener swaps it without
 * touching live connections.
 */
typedef struct sv_handler {
    _Atomic int refs;
    char tag[SV_TAG_MAX + 1];
    const sv_proto_ops *ops;   /**< the inbound's protocol core */
    void *creds;               /**< ops->creds_new() of the user set (immutable, shared) */
    sv_inbound_spec in;        /**< the inbound's scalar settings (tag points at .tag; strings NULL) */
    sv_principal **principals; /**< one reference per user, indexed like the credential table */
    size_t n_users;
    sv_replay_ref *replay;
    bool allow_private; /**< sv_inbound_spec.allow_private (issue 15) */
    sv_tls_ctx *tls;    /**< the inbound's TLS context (a reference), or NULL: plain TCP */
    sv_ws_conf *ws;     /**< the inbound's WebSocket or HTTPUpgrade settings, or NULL: none */
    sv_reality_conf *reality; /**< the inbound's REALITY settings and certificate, or NULL */
    sv_layer_conf layers[SV_CHAIN_MAX]; /**< the inbound's transport layers above TCP, bottom
                                             first (their confs are owned by this handler) */
    unsigned n_layers;                  /**< 0 = plain TCP */
    bool has_fallback;  /**< sv_inbound_spec.fallback was given: fallback is where it points */
    sv_dest fallback;
} sv_handler;

/** One outbound version (seed 000 "targets"): what a plane slot points at. */
typedef struct sv_target {
    _Atomic int refs;
    const sv_outbound_ops *ops; /**< its implementation (outbound/): the connector opens through it */
    char id[SV_TAG_MAX + 16]; /**< "tag@vN" */
    char tag[SV_TAG_MAX + 1];
    uint64_t version; /**< per tag, from 1 (seed 001 OutboundId); 0 = the supervisor's own */
    sv_socket_policy sock; /**< its outbound's socket policy (issue 13); zero = none */
    /** The version's closed token (seed 000 "Guarded"): set once by a Close drain
     *  (sv_target_close, control loop), read by every dial on it that completes
     *  (sv__flow_opened, workers) */
    _Atomic bool closed;
} sv_target;

typedef struct sv_routes_ref {
    _Atomic int refs;
    sv_routes *routes;
} sv_routes_ref;

/** The immutable plane: compiled routes, one target per slot, its epoch (RCU, seed 000). */
typedef struct sv_plane {
    _Atomic int refs;
    sv_routes_ref *routes;
    sv_target **targets; /**< n_slots entries */
    size_t n_slots;
    uint64_t epoch;
} sv_plane;

/** The protocol core serving inbound @p in (its protocol; Shadowsocks with ws.mux: Shadowsocks
 *  over Mux.Cool), or NULL when none does. */
const sv_proto_ops *sv_proto_ops_for(const sv_inbound_spec *in);
/** The datagram framing of inbound @p in's own UDP socket (dgram.h), or NULL: none. */
const sv_dgram_ops *sv_dgram_ops_for(const sv_inbound_spec *in);

/** What a new handler replaces (issue 13): the listener's running handler and the running
 *  spec's user set it was built from (both borrowed). */
typedef struct sv_handler_was {
    const sv_handler *handler;
    const sv_user_set *users;
} sv_handler_was;

/**
 * Build the handler of inbound @p in for @p users (may be NULL: no user is admitted): the core's
 * credential table (e.g. one master key per user, PROTOCOLS.md §2.2), one principal per user from
 * the registry (principal.h), and a reference on @p replay, shared with the table.
 * @param was  NULL, or the handler this one replaces: a user of @p users with the same id and
 *             secret in @p was's set (same set tag) keeps its principal there, and the core
 *             copies what it derived for it (creds_new_from), so a reload that changes one user
 *             of 50 000 derives one (issue 13 "Scale benchmarks")
 * @return a handler with one reference, or NULL with @p err set (out of memory, or a user set
 *         the protocol refuses, e.g. two Trojan users with one password).
 */
sv_handler *sv_handler_new(const sv_inbound_spec *in, const sv_user_set *users,
                           const sv_handler_was *was, sv_replay_ref *replay, sv_tls_ctx *tls,
                           sv_error *err);
/** Take / drop a reference (any thread); the last unref frees the keys. NULL-safe unref. */
void sv_handler_ref(sv_handler *h);
void sv_handler_unref(sv_handler *h);
/**
 * Does @p now still admit a session that @p was admitted as principal @p p? Yes when @p now has
 * the same protocol settings as @p was (a changed cipher changes every key) and lists @p p (the
 * same user with the same secret). @return the principal's index in @p now, or -1.
 */
int sv_handler_find(const sv_handler *now, const sv_handler *was, const sv_principal *p);

/** A new salt filter with one reference, or NULL on allocation failure. */
sv_replay_ref *sv_replay_ref_new(void);
/** Drop a reference; the last frees the filter. NULL-safe. */
void sv_replay_ref_unref(sv_replay_ref *r);

/** A target "tag@vN" of @p kind with one reference, or NULL on allocation failure (or a kind
 *  sv_outbound_ops_for() does not know). */
sv_target *sv_target_new(enum sv_outbound_kind kind, const char *tag, uint64_t version);
/** Take / drop a reference (any thread). NULL-safe unref. */
void sv_target_ref(sv_target *t);
void sv_target_unref(sv_target *t);

/** What a flow whose outbound version was drained while it dialled fails with (seed 000
 *  "Guarded", the text of its io::ErrorKind::ConnectionAborted). */
#define SV_DRAINED_TEXT "the outbound this flow was opened on was drained"

/**
 * Cancel outbound version @p t's closed token (seed 000 "Guarded", Target::close_flows): from
 * now on every dial on @p t that completes fails (sv__flow_opened). The caller then kills the
 * flows already registered on it (sv_tracker_kill_where on t->id): a flow is either registered
 * before that kill sees the registry, or its check sees the token. Once set, it stays. Any
 * thread (the control loop's drain).
 */
void sv_target_close(sv_target *t);

/** Drop a reference on compiled routes; the last frees them. NULL-safe. */
void sv_routes_ref_unref(sv_routes_ref *r);

/** Build a plane; takes a reference on @p routes and on every target. NULL on OOM. */
sv_plane *sv_plane_new(sv_routes_ref *routes, sv_target *const *targets, size_t n, uint64_t epoch);
/** Take / drop a reference (any thread); a plane is freed when its last flow and worker let go. */
void sv_plane_ref(sv_plane *p);
void sv_plane_unref(sv_plane *p);

/* ------------------------------------------------------------------------------------------ */

enum sv_msg_kind {
    SV_MSG_START_LISTENER = 1, /**< id, fds, handler (ref moves to the worker) */
    SV_MSG_SWAP_HANDLER,       /**< id, handler (ref moves), revoke = close sessions of users gone */
    SV_MSG_STOP_LISTENER,      /**< id */
    SV_MSG_PUBLISH_PLANE,      /**< plane (ref moves) */
    SV_MSG_SET_OWN_ADDRS,      /**< own_addrs (ref moves): the node's own addresses (issue 15) */
    SV_MSG_EXIT,               /**< close everything and leave the loop */
    SV_MSG_HINTS_EXPORT,       /**< hints_out: add this worker's hints (issue 13) */
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
 * Process-wide accounting of accept pauses (issue 15 "File descriptors run out"): an episode
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

/** Shared, thread-safe parts every worker sees. */
typedef struct sv_shared {
    sv_tracker *tracker;
    sv_pacers *pacers;           /**< per-user speed limits (issue 12; set before workers start) */
    sv_dns_options dns;          /**< each worker's resolver (set before workers start) */
    sv_redis_options redis;      /**< each worker's fleet client (issue 12; set before start) */
    sv_fleet_shared fleet;       /**< their shared state (log lines) */
    /** Issue 33: the process's TCP connection budget (max_connections), one for every worker,
     *  so that a worker accepts while the process has room whichever worker the kernel picks
     *  (set before workers start) */
    uint32_t conn_cap;
    /** The connections the descriptor limit allows (sv_max_connections_default): what the
     *  process's connections and kernel relays' pipes fit in (sv_fds_fit) */
    uint32_t fd_cap;
    /** Issue 33: connections one worker keeps before authentication (its share of half the
     *  budget, at least 1); past it, its oldest such connection is closed (admission.c) */
    uint32_t preauth_cap;
    _Atomic uint32_t n_conns;    /**< live TCP connections of every worker (sv_conn) */
    _Atomic uint32_t n_spliced;  /**< of them, holding a kernel relay's pipes (sv_fds_fit) */
    /** Per worker (index): its connections before authentication (written by it alone), and
     *  the evictions of them other workers asked it for (admission.c) */
    _Atomic uint32_t preauth[SV_WORKERS_MAX];
    _Atomic uint32_t evict_asked[SV_WORKERS_MAX];
    sv_accept_episode pause;
    /* Issue 8: the epoch of the plane each worker has adopted (serves new flows with). */
    unsigned n_workers;          /**< workers started (set by the control loop as they start) */
    /** Issue 13: a worker that learns a client IP's user tells the others (sv__wl_learn), so a
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
    sv_audit *audit; /**< audit hits (issue 12), taken by sv_take_audit() */
    /** Issue 13: Shadowsocks trial decryptions (a TCP first chunk, a UDP datagram) and the keys
     *  they tried, matched or not (sv_ss_trials). */
    _Atomic uint64_t ss_lookups, ss_keys;
    /** Issue 13 "junk": full scans off the worker loops (scan.c): the budget (under scan_mu),
     *  one scan running at a time (scan_run_mu), and their counts (sv_ss_scans). */
    pthread_mutex_t scan_mu, scan_run_mu;
    sv_scan_budget scan_budget;
    _Atomic uint64_t ss_scans_queued, ss_scans_run, ss_scans_dropped;
    /** PROTOCOLS-2.md §2.6: connections whose chain switched to raw, [0] client bytes (in),
     *  [1] ours (out) (sv_vision_direct). */
    _Atomic uint64_t direct[2];
    /** Issue 11: connections relayed by splice(2) once Vision went direct both ways, and the
     *  payload bytes they moved so (sv_vision_direct). */
    _Atomic uint64_t splice_conns, splice_bytes;
    _Atomic uint64_t splice_no_pipe; /**< relayed in user space: no pipe could be had */
    /** Worker loop turns by the CPU time their thread spent in them (sv_turn_counts): a turn
     *  is everything one loop iteration ran, so its CPU time is how long every other flow of
     *  that worker waited on katana's own work (issue 13, the 2 ms pause) */
    sv_turn_row turns[SV_WORKERS_MAX]; /**< one row per worker (index), written by it alone */
    sv_close_row closes[SV_WORKERS_MAX]; /**< flow closes by reason (issue 24), likewise */
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

/** Start worker @p index (a thread with its own loop). @return 0 or a negative errno. */
int sv_worker_start(sv_worker **out, unsigned index, sv_shared *shared);
/** Post a message (moved to the worker; freed there). Any thread. */
void sv_worker_post(sv_worker *w, sv_msg *m);
/** Wake the worker to act on kill/close flags. Any thread. */
void sv_worker_wake(sv_worker *w);
/** Post SV_MSG_EXIT, join the thread and free the worker. */
void sv_worker_join(sv_worker *w);

/* worker internals shared by worker.c, conn.c, udp.c */
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
    sv_resolver *resolver;  /**< names of direct flows are resolved here (issue 13) */
    /** Resolvers of panel `dns` routes (issue 13), one per server, made on first use
     *  (sv__route_resolver) and kept until the worker ends (links hold them). */
    struct sv_route_resolver {
        char server[SV_DNS_SERVER_LEN];
        sv_resolver *r;     /**< NULL: a free entry */
    } route_resolvers[SV_ROUTE_RESOLVERS_MAX];
    sv_fleet *fleet;        /**< fleet-wide device limit client (issue 12), or NULL: off */
    sv_list listeners;      /**< sv_wlistener */
    sv_list conns;          /**< TCP connections (sv_conn) */
    sv_list assocs;         /**< UDP associations */
    sv_list udp_scans;      /**< datagrams waiting for their scan off the loop (issue 13) */
    sv_xudp_table xudp;     /**< XUDP associations by GlobalID, attached and detached (udp.c) */
    bool exiting;
    uv_timer_t sweep;       /**< SV_IDLE_SWEEP_MS: closes idle relays */
    uv_prepare_t turn_clock; /**< runs once per loop turn: charges the turn's CPU (turns) */
    uint64_t turn_began_ns; /**< the thread's CPU clock at the last turn_clock, 0 = none yet */
    uint32_t n_conns;       /**< live TCP connections (sv_conn) of this worker */
    uint32_t n_spliced;     /**< of them, holding a kernel relay's pipes (issue 11, sv_fds_fit) */
    /** Issue 33: connections accepted and not yet authenticated by their core nor closing, in
     *  accept order (oldest first; conn.c moves one to conns when it authenticates or
     *  closes), and their number */
    sv_list preauth;
    uint32_t n_preauth;
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

/**
 * The resolver that resolves names for a flow routed with @p dns_server (sv_decision.dns_server,
 * issue 13: a panel `dns` route): NULL → the worker's own; else this worker's resolver for that
 * server (the workers' timeout and strategy), made on first use and kept until the worker ends.
 * Past SV_ROUTE_RESOLVERS_MAX servers in the worker's life (or when c-ares refuses one): the
 * worker's own. Worker thread only. (udp.c)
 */
sv_resolver *sv__route_resolver(sv_worker *w, const char *dns_server);

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
    /* Issue 13: this worker's guides for trial decryption over handler's users (sv__wl_guide) */
    sv_iphints hints;          /**< client IP -> the user who last authenticated from it */
    sv_ss_order order;         /**< most recently matched first, for order_of's users */
    const void *order_of;      /**< the credential table @p order was built for, or NULL */
};

#define SV_HINTS_MAX SV_IP_HINTS_PER_INBOUND /**< client IPs remembered per worker and listener
                                                 (issue 13) */
#define SV_HINT_TTL_S SV_IP_HINT_TTL_S /**< a client IP's user is forgotten after this without a
                                            login */

/* ---- hints across a restart (issue 13: sv_hints_export, sv_hints_import) ------------------- */

/** Where the workers add their hints for sv_hints_export(): shared by the caller and each
 *  message posted, freed by the last reference (sv__hints_release). */
struct sv_hints_out {
    pthread_mutex_t mu;  /**< guards everything below; cv: a worker answered */
    pthread_cond_t cv;
    unsigned refs;       /**< the caller's and each message's not yet handled */
    unsigned answered;   /**< workers that added theirs */
    bool closed;         /**< the caller took the result: later answers add nothing */
    bool short_of_memory; /**< a worker could not add all of its hints */
    sv_ip_hint *v;       /**< malloc'ed, grown by the workers */
    size_t n, cap;
};

/** One hint for a listener's tables: its user by index in the message's handler. */
typedef struct sv_hint_row {
    uint8_t ip[16];
    int32_t idx;
    uint32_t age_s;
} sv_hint_row;

/** The hints for one listener, shared (read-only) by the messages to every worker. */
struct sv_hints_in {
    _Atomic unsigned refs;
    size_t n;
    bool matched; /**< just matched on another worker (issue 13): each row's user also moves to
                       the front of the listener's order, as a match there would move it */
    sv_hint_row rows[];
};

/**
 * Add every live hint of @p w's listeners whose user the listener's handler still admits (same
 * index, same principal) to @p out, as (inbound tag, IP, user id, age); sets short_of_memory
 * when not all fit. Worker thread (SV_MSG_HINTS_EXPORT). (plane.c)
 */
void sv__hints_export_worker(sv_worker *w, sv_hints_out *out);
/**
 * Put @p in's hints (indexes into @p h) in @p l's table, each as learnt age_s seconds ago, when
 * @p l still serves @p h and keeps hints (two users or more); with in->matched their users also
 * move to the front of @p l's order. Worker thread (SV_MSG_HINTS_IMPORT). (plane.c)
 */
void sv__hints_import_listener(sv_wlistener *l, const sv_handler *h, const sv_hints_in *in);
/** Drop one reference on each of @p out and @p in (any thread; either may be NULL); the last
 *  frees it. (plane.c) */
void sv__hints_release(sv_hints_out *out, sv_hints_in *in);

/** Count one trial decryption that tried @p keys keys (> 0) in @p s (any worker). */
void sv__ss_count(sv_shared *s, unsigned keys);

/* ---- full scans off the worker loop (issue 13 "junk", scan.c) ------------------------------
 * A trial decryption tries SV_SS_GUESSES keys on the loop (the hint, then the most recently
 * matched); the rest of the keyring is scanned on libuv's thread pool, one scan at a time for
 * the process, paced by a CPU budget (SV_SCAN_RATE_NS per second, sv_scan_budget). A scan that
 * would wait beyond SV_SCAN_WAIT_MS, or past SV_SCAN_QUEUE_MAX waiting, is refused: the client
 * is treated as if no key matched (Shadowsocks: drained, a datagram dropped). */
#define SV_SS_GUESSES 16             /**< keys tried on the loop before a scan (~25 us: 50 new
                                          clients at once cost the loop ~1 ms) */
#define SV_SCAN_RATE_NS 500000000ULL /**< scan CPU per second of wall time: half a core */
#define SV_SCAN_BURST_NS 100000000ULL /**< scan CPU credit kept when idle */
#define SV_SCAN_WAIT_MS 5000         /**< longest expected wait of an admitted scan (50
                                          never-seen clients at once at 20 000 users: ~3 s) */
#define SV_SCAN_QUEUE_MAX 64         /**< scans admitted at once, for every worker */

typedef struct sv_scan_job sv_scan_job;

/** The scan's answer, on the worker loop: the user's index, or -1 (none, or not run); @p in
 *  and @p n: the job's copy of the bytes (the owner may use them during the call). */
typedef void (*sv_scan_done_fn)(void *owner, int user, uint8_t *in, size_t n);

/** Set up @p s's scan budget and locks (supervisor start). */
void sv__scan_shared_init(sv_shared *s);
/** Destroy @p s's scan locks (no scan may be pending: every worker has ended). */
void sv__scan_shared_deinit(sv_shared *s);

/**
 * Scan @p n bytes at @p in (copied) over @p h's credential table with @p scan (sv_proto_ops
 * scan, or a Shadowsocks datagram's) off @p w's loop, within the shared budget; @p done gets
 * the answer on @p w's loop, unless sv__scan_cancel() came first. Holds a reference of @p h
 * until then. Counted in ss_scans_queued, and the keys it tries in ss_keys.
 * @return the job, for sv__scan_cancel(); NULL when refused (over the budget or the queue
 *         bound, or memory is short; counted in ss_scans_dropped): @p done is never called.
 */
sv_scan_job *sv__scan_start(sv_worker *w, sv_handler *h,
                            int (*scan)(const void *creds, const uint8_t *in, size_t n,
                                        unsigned *trials),
                            const uint8_t *in, size_t n, sv_scan_done_fn done, void *owner);

/** The owner of @p j is gone (worker loop): its done is never called; a scan not yet run is
 *  skipped and costs nothing. The job frees itself. */
void sv__scan_cancel(sv_scan_job *j);

/** Free what a worker listener's guides hold (plane.c; the listener is freed next). */
void sv__wl_guides_free(sv_wlistener *l);

/**
 * How a new client of @p l served by @p h is identified (issue 13): *@p hint is the index in
 * @p h of the user who last authenticated from @p client's IP on this worker (-1: none, or that
 * user is no longer at that index), *@p order the worker's most recently matched order of @p h's
 * users (built at the first use after a handler swap; NULL when @p h is not the listener's
 * current handler, has fewer than two users, or memory is short: index order then).
 */
void sv__wl_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int *hint,
                  sv_ss_order **order);
/** sv__wl_guide() as a datagram core's guide @p g: its hint and order, limit SV_SS_GUESSES. */
void sv__wl_dgram_guide(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client,
                        sv_dgram_guide *g);

/** User @p idx of @p h authenticated from @p client on @p l: remember it for the IP (issue 13),
 *  when @p h is still @p l's handler; when that is new to @p l's table (a new IP, another user
 *  of the IP, or an expired entry), tell the same listener of every other worker
 *  (sv_shared.peers: an SV_MSG_HINTS_IMPORT of one row, `matched`). A refresh stays local, so
 *  the other workers' copies expire an hour after they were told. */
void sv__wl_learn(sv_wlistener *l, const sv_handler *h, const struct sockaddr *client, int idx);

/**
 * @p l has a new handler: forget the hints whose user is not at the same index in it (the same
 * principal), so that every hint's principal is one the handler holds and no freed principal's
 * address can come back as another user's (issue 13). Worker thread. (plane.c)
 */
void sv__wl_swapped(sv_wlistener *l);

/**
 * Start serving the accepted client socket @p fd on listener @p l (conn.c): the connection
 * counts in l->w->n_conns and sv_shared.n_conns until its last handle closes, and is pre-auth
 * (sv_worker.preauth) until its core authenticates it or it closes. Takes ownership of @p fd.
 * @return 0, or -ENOMEM (the socket is closed: the client sees the connection end).
 */
int sv__conn_open(sv_wlistener *l, int fd);
/**
 * Issue 33: close the oldest connection of @p w that is not authenticated (nor closing), in
 * accept order (conn.c). @return false when there is none.
 */
bool sv__conn_evict_oldest(sv_worker *w);
/**
 * Issue 33: close the connections of @p w not authenticated (nor closing) that were accepted
 * before @p before_ms (sv__wall_ms), oldest first (conn.c). @return how many.
 */
unsigned sv__conn_preauth_expire(sv_worker *w, uint64_t before_ms);

/**
 * Issue 33 (admission.c): whether @p w may accept one more connection now: the process is
 * under its budget (sv_shared.conn_cap) and its descriptors fit (sv_fds_fit), or a connection
 * not authenticated yet can make room (this worker's or another's), with at most
 * SV_ACCEPT_BATCH connections over the budget while those close. When not, a reason for the
 * log goes to @p why (@p why_len bytes; NULL: none). Worker thread.
 */
bool sv__admit_room(const sv_worker *w, char *why, size_t why_len);
/**
 * Issue 33 (admission.c): a connection was just accepted on @p w (sv__conn_open succeeded).
 * Past the worker's pre-auth share, or over the budget, the oldest pre-auth connection of @p w
 * is closed (never the new one), else another worker is asked to close its oldest; then
 * sv__admit_tick(). Worker thread.
 */
void sv__admit_accepted(sv_worker *w);
/** Issue 33 (admission.c): accept on @p w failed for lack of descriptors: close up to
 *  SV_EVICT_ON_EMFILE of its oldest pre-auth connections. @return true when it closed any
 *  (accept again on the next loop turn, once they are closed), false: pause. */
bool sv__admit_out_of_fds(sv_worker *w);
/** Issue 33 (admission.c): close as many of @p w's oldest pre-auth connections as other workers
 *  asked for (sv_shared.evict_asked). Worker thread, on its wakeup. */
void sv__admit_asked(sv_worker *w);
/** Issue 33 (admission.c): under pressure, close @p w's pre-auth connections older than
 *  SV_PREAUTH_PRESSED_MS. Worker thread (accepts, retry ticks, sweeps). */
void sv__admit_tick(sv_worker *w);

/** Close every connection whose session/flow was asked to close (conn.c). */
void sv__conn_scan_flags(sv_worker *w);
/** Close every TCP connection of @p l whose user is no longer in l->handler (conn.c). */
void sv__conn_revoke(sv_worker *w, sv_wlistener *l);
/** Close every established relay that moved no byte for SV_TCP_IDLE_MS (conn.c). */
void sv__conn_sweep_idle(sv_worker *w);
/** Close every TCP connection (shutdown / exit). */
void sv__conn_close_all(sv_worker *w);
/** Drop a listener user reference; frees a stopped listener whose handles are closed when none
 *  is left (plane.c, so that conn.c and udp.c need nothing of worker.c). */
void sv__wlistener_release(sv_wlistener *l);

/**
 * A datagram source carried inside a stream (issue 8: Trojan UDP ASSOCIATE; later VLESS, VMess,
 * Mux): where the UDP fan-out sends the replies of an association it does not own the socket of.
 */
typedef struct sv_dgram_source {
    /** One reply datagram from @p from (@p p, @p n bytes; borrowed for the call). */
    void (*reply)(void *ctx, const sv_dest *from, const uint8_t *p, size_t n);
    /** The association is gone (all its sub-links closed): @p ctx may go too. */
    void (*released)(void *ctx);
    /** XUDP sources only (sv__assoc_open_xudp), else NULL: the association moved to another
     *  owner (a New frame with its GlobalID); @p ctx forgets it and gets no released. */
    void (*taken)(void *ctx);
} sv_dgram_source;

typedef struct sv_assoc sv_assoc;

/**
 * Open an association of principal @p p inside a stream of worker @p w (udp.c): it shares the
 * connection's session @p sess (which must outlive it: @p src->released says when it may go),
 * routes, refuses and bills each datagram like Shadowsocks UDP, and sends replies to @p src.
 * @param l       the connection's listener (it outlives the connection): its current handler's
 *                allow_private decides each datagram (issue 15)
 * @param client  the connection's peer (the route's source)
 * @return the association, or NULL on allocation failure.
 */
sv_assoc *sv__assoc_open_in_stream(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                                   sv_principal *p, sv_session_rec *sess,
                                   const struct sockaddr *client, const sv_dgram_source *src,
                                   void *ctx);
/**
 * XUDP (issue 10, PROTOCOLS-2.md §5.3 item 3): the association of a Mux.Cool UDP session whose
 * New frame carried GlobalID @p gid (8 bytes). All zeros: a new association, as
 * sv__assoc_open_in_stream(). Otherwise the worker's table (xudp.h) is asked for (@p l, user of
 * @p p, @p gid): a detached association, or one another sub-flow carries (that owner's
 * src->taken is called first), re-attaches to @p src / @p ctx, @p sess, @p h, @p p and
 * @p client with its sockets and sub-links (the remote peers keep the same mapping); else a
 * new one is opened and recorded. Arguments as sv__assoc_open_in_stream(); @p src must have
 * `taken`. Routing, refusal and billing stay per datagram, to the user of @p p.
 * @return the association, or NULL on allocation failure.
 */
sv_assoc *sv__assoc_open_xudp(sv_worker *w, const sv_wlistener *l, sv_handler *h,
                              sv_principal *p, sv_session_rec *sess,
                              const struct sockaddr *client, const uint8_t *gid,
                              const sv_dgram_source *src, void *ctx);
/**
 * The owner of @p a is done with it (its sub-flow ended: End frame, connection closed). An
 * association in the XUDP table is detached: src->released(ctx) is called now, its sockets stay
 * open, replies are dropped unbilled, and it closes when re-attached and let go again, at
 * expiry (sv__udp_sweep, SV_XUDP_KEEP_MS), when evicted (SV_XUDP_DETACHED_MAX), or with its
 * listener, user or worker. Any other association is closed (sv__assoc_close).
 */
void sv__assoc_let_go(sv_assoc *a);
/** Close the detached XUDP associations of @p w older than SV_XUDP_KEEP_MS (worker sweep). */
void sv__udp_sweep(sv_worker *w);
/** Route and send one datagram of @p a to @p d (dropped silently when refused or blocked). */
void sv__assoc_send(sv_assoc *a, const sv_dest *d, const uint8_t *p, size_t n);
/** Close @p a: no reply is sent after this; src->released follows once its sockets closed. */
void sv__assoc_close(sv_assoc *a);

/** UDP receive callback of a worker's listener (udp.c). */
void sv__udp_on_recv(uv_udp_t *h, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                     unsigned flags);
/** Allocation callback of a listener's UDP socket: the worker's scratch buffer. */
void sv__udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
/** The UDP counterparts of sv__conn_scan_flags / sv__conn_revoke / sv__conn_close_all. */
void sv__udp_scan_flags(sv_worker *w);
void sv__udp_revoke(sv_worker *w, sv_wlistener *l);
void sv__udp_close_all(sv_worker *w);
/** Forget the datagrams of @p w waiting for a scan (worker exit; udp.c): their scans are
 *  cancelled, their listeners released. */
void sv__udp_scans_cancel(sv_worker *w);
/**
 * End the UDP associations of a listener that stops: its socket is closed, so they can neither
 * receive from their clients nor answer them, and waiting out a shutdown grace for them is moot.
 */
void sv__udp_close_listener(sv_worker *w, sv_wlistener *l);

/**
 * A new flow record of worker @p worker (its @p owner object) for session @p sess: user, source,
 * destination @p d, the name sniffed from the first client bytes (@p sniffed, NULL = none),
 * @p network, the target "tag@vN", the rule (-1 = default) and plane epoch, started now. The
 * tracker assigns the id at sv_tracker_flow_open(). Free it with free() while unregistered.
 * @return NULL when out of memory.
 */
sv_flow_rec *sv__flow_new(unsigned worker, void *owner, const sv_session_rec *sess, uint64_t user,
                          const sv_dest *d, const char *sniffed, enum sv_network network,
                          const sv_target *t, int rule, uint64_t epoch);

/**
 * Connector step 8 (seed 000 "Guarded", seed 002 "register"): the one place where a dial
 * completes, for a plain flow, a sub-flow and a UDP sub-link alike. Registers flow @p f, opened
 * on outbound version @p t, with @p tracker (sv_tracker_flow_open; the tracker owns it from
 * now), then checks @p t's closed token, in that order (see sv_target_close). Worker thread.
 * @return true: the flow relays; false: @p t was drained while the flow dialled: the flow is
 *         registered all the same and the caller ends it at once (a sub-flow with its End, a
 *         sub-link dropped); logged here at debug level with SV_DRAINED_TEXT.
 */
bool sv__flow_opened(sv_tracker *tracker, sv_flow_rec *f, const sv_target *t);

/**
 * Flow @p f of worker f->worker ends for reason @p r (issue 24): counted in @p s's row of that
 * worker (sv_flow_closes) and said at debug level with the flow's id (0 when it never
 * registered: a dial that failed), session, destination and outbound. Call it on that worker's
 * thread, before the record goes to the tracker or is freed.
 */
void sv__flow_closed(sv_shared *s, const sv_flow_rec *f, sv_close_reason r);

/** Format a socket address as "ip:port" ("[v6]:port"). */
void sv__addr_format(const struct sockaddr *sa, char *buf, size_t cap);

/** Milliseconds since the Unix epoch (wall clock, for started_ms). */
uint64_t sv__wall_ms(void);

/**
 * Connector step "audit" (issue 12, seed 002 "forbidden"): when rule @p rule of @p r (a
 * decision's rule) is an audit rule, note the hit of @p user on @p inbound in @p s->audit. The
 * flow itself is refused (or the datagram dropped) by the rule's outbound, as for any block
 * route. No log line. Any worker.
 */
void sv__audit_hit(sv_shared *s, const sv_routes *r, int rule, const char *inbound,
                   uint64_t user);

#endif
