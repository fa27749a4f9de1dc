/*
 * The panel interface: one ops table, several clients (DESIGN.md "panel/": local now, UniProxy
 * over HTTP and SSPanel later). A node manager holds one pn_client per node and asks it for the
 * node settings and the user list; a client answers "ok" (with fresh data), "not modified"
 * (the ETag matched, PANEL.md §1.3) or an error, always through a callback so that an HTTP client
 * driven by the control loop fits behind the same calls.
 *
 * Callback contract (libuv's): when a fetch/report call returns 0 its callback runs exactly once,
 * either before the call returns (the local panel reads files synchronously) or later on the
 * control loop (HTTP clients); when the call returns an error the callback never runs.
 */
#ifndef PN_PANEL_H
#define PN_PANEL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "panel/model.h"
#include "supervisor/util/err.h"
#include "supervisor/util/usage.h"

/** Result of a fetch, passed to its callback; a negative value is an error (-errno). */
enum pn_result {
    PN_OK = 0,           /**< fresh data in the callback's argument */
    PN_NOT_MODIFIED = 1, /**< the panel's data did not change since the last PN_OK (ETag) */
};

typedef struct pn_client pn_client;

/**
 * A node fetch finished.
 * @param result  PN_OK, PN_NOT_MODIFIED or a negative error
 * @param node    with PN_OK: the parsed node, valid during the call; the callback may take its
 *                contents (copy the struct, then zero *node); the client frees what is left.
 *                NULL otherwise.
 * @param err     with an error: the reason ("node body: server_port: ..."); NULL otherwise
 */
typedef void (*pn_node_cb)(pn_client *c, int result, pn_node *node, const sv_error *err,
                           void *arg);

/** A user fetch finished. Same conventions as pn_node_cb (an empty list is PN_OK, not an error). */
typedef void (*pn_users_cb)(pn_client *c, int result, pn_users *users, const sv_error *err,
                            void *arg);

/** A report finished: 0 when the panel accepted it, else a negative error with err set. */
typedef void (*pn_report_cb)(pn_client *c, int result, const sv_error *err, void *arg);

/** One user's online IPs for an alive report (PANEL.md §1.7). Strings are borrowed. */
typedef struct pn_alive {
    uint64_t user;
    const char *const *ips;
    size_t n_ips;
} pn_alive;

/** One user's online-device count from `alivelist` (PANEL.md §1.8). */
typedef struct pn_alive_count {
    uint64_t user;
    uint32_t count; /**< distinct IPs across all nodes, as the panel counts them */
} pn_alive_count;

/**
 * An alivelist fetch finished.
 * @param items  with result PN_OK: the counts, valid during the call (possibly none); else NULL
 */
typedef void (*pn_alivelist_cb)(pn_client *c, int result, const pn_alive_count *items, size_t n,
                                const sv_error *err, void *arg);

/** One audit hit for a detect log report (PANEL.md §2 `users/detectlog`). */
typedef struct pn_detect_hit {
    uint64_t user;
    int64_t rule; /**< the panel's rule id (`list_id`) */
} pn_detect_hit;

/** Node load for a status report (PANEL.md §1.9, §2.1). Sizes in bytes. */
typedef struct pn_status {
    double cpu; /**< percent, 0..100 */
    uint64_t mem_total, mem_used;
    uint64_t swap_total, swap_used;
    uint64_t disk_total, disk_used;
    uint64_t uptime_s; /**< seconds since boot (/proc/uptime; mod_mu's legacy load report) */
    double load[3];    /**< 1, 5 and 15 minute load averages (/proc/loadavg) */
} pn_status;

#define PN_METRICS_CORES_MAX 256u /**< CPU cores listed in one metrics snapshot */

/**
 * A node's runtime metrics, as Xboard's node page shows them (PROTOCOLS-2.md §6.5 `node.status`;
 * PANEL.md §1.1 the `metrics` key of `report`; the panel keeps what ServerService::updateMetrics
 * reads). Counts are of this node unless said otherwise.
 */
typedef struct pn_metrics {
    uint64_t uptime_s;           /**< seconds since katana started */
    uint64_t active_connections; /**< live client connections (sessions) of the node */
    uint64_t total_connections;  /**< live flows of the node: dialled connections and UDP
                                      sub-links its sessions opened (a multiplexed session
                                      opens many) */
    uint64_t active_users;       /**< distinct users with a live session on the node */
    uint64_t total_users;        /**< users the panel gave the node */
    uint64_t inbound_speed;      /**< bytes/s from the node's clients (upload), sampler tick */
    uint64_t outbound_speed;     /**< bytes/s to the node's clients (download) */
    double cpu_per_core[PN_METRICS_CORES_MAX]; /**< percent busy per core since the previous
                                                    snapshot */
    size_t n_cores;              /**< 0: cpu_per_core is not sent */
    double load[3];              /**< 1, 5, 15 minute load averages (/proc/loadavg) */
    bool has_limits;             /**< some user of the node has a speed limit */
    uint64_t limited_users;      /**< users of the node with a speed limit */
    uint64_t speed_limited_users; /**< of those, users with a live session on the node */
    uint64_t device_limit_events; /**< sessions the device limit refused since start (all
                                       nodes: the supervisor counts them together) */
    uint64_t api_success, api_failure; /**< the node's panel requests since start: answered
                                            2xx/3xx, and failed (another status, no answer) */
    bool ws_enabled, ws_connected; /**< the panel offered a channel; it is up (a client that
                                        sends over its channel fills these in itself) */
    bool kernel_status;          /**< the supervisor serves the node */
} pn_metrics;

/** How pn_client_ops.report_metrics may send a snapshot. */
enum pn_metrics_via {
    PN_METRICS_CHANNEL = 0, /**< over the push channel while it is up; else -ENOTCONN */
    PN_METRICS_REST = 1,    /**< over REST while the channel is down; else -EISCONN */
};

/** Bodies a remote client remembers (last good, for the store and for If-None-Match). */
enum pn_body_kind {
    PN_BODY_CONFIG = 0, /**< node settings (UniProxy `GET config`, mod_mu `nodes/{id}/info`) */
    PN_BODY_USERS = 1,  /**< user list (UniProxy `GET user`, mod_mu `users`) */
};

#define PN_REQUEST_COUNTS_MAX 64 /**< (endpoint, status) pairs counted per client */

/** Finished requests of one endpoint with one outcome (/metrics). */
typedef struct pn_request_count {
    const char *endpoint; /**< "config", "user", "push", ... (static, the client's names) */
    long status;          /**< HTTP status, 0 when no answer arrived (transport error, timeout) */
    uint64_t n;           /**< requests since the client was created */
} pn_request_count;

/**
 * What a panel that pushes (Xboard's node channel, PROTOCOLS-2.md §6) tells its watcher, on the
 * control loop. Data pointers are valid during the call; node and users may be taken (copy the
 * struct, then zero it). Every member is required.
 */
typedef struct pn_push_events {
    /** `sync.config`: new node settings (no intervals: those come from REST only); @p body
     *  (@p len bytes, may be NULL) is the same settings as a REST config body without
     *  `base_config`, for the last good store. */
    void (*node)(void *arg, pn_node *node, const char *body, size_t len);
    /** `sync.users`: the full user list (an empty list revokes everyone). */
    void (*users)(void *arg, pn_users *users);
    /** `sync.user.delta`: users to add or replace (same id), and ids to remove. */
    void (*delta)(void *arg, const pn_users *add, const uint64_t *remove, size_t n_remove);
    /** A push that could not be read (@p why): the watcher pulls everything over REST. */
    void (*resync)(void *arg, const sv_error *why);
    /** The channel came up (authenticated) or went down (@p why, NULL when up); when down
     *  the watcher polls over REST while the client reconnects on its own. */
    void (*channel)(void *arg, bool up, const sv_error *why);
} pn_push_events;

/**
 * What a panel does with one usage report: the outbox decides from this, never from
 * the panel's name, what a failed push means and what to send again.
 */
enum pn_usage_apply {
    /** All entries or none: a failure applied nothing, so the batch is sent again whole; an
     *  answer lost after the panel took the batch bills it twice (the at-least-once window).
     *  UniProxy and Xboard: the body is queued whole or refused (PANEL.md §1.6). */
    PN_USAGE_ATOMIC = 0,
    /** Entries applied one by one in the order sent, with no transaction: the first entry that
     *  fails (a user the panel deleted) ends the request with HTTP 5xx after the earlier ones
     *  were billed. SSPanel mod_mu (PANEL.md §2.6). Its report_usage must end with
     *  PN_ERR_PANEL_FAILED for an answer that says the panel's own code failed (HTTP 500; a
     *  502 or 503 comes from the web front before the panel ran, a 504 is a lost answer), so
     *  the outbox settles that batch against a fresh user list (db_batch_settle) before
     *  sending any of it again. */
    PN_USAGE_ORDERED = 1,
};

/** A report the panel's own code failed (HTTP 500): it took the request and failed while
 *  processing it (what a PN_USAGE_ORDERED panel applied of it is not known). */
#define PN_ERR_PANEL_FAILED (-EREMOTEIO)

/**
 * What a panel client implements. A NULL report hook means the panel takes no such report
 * (the local panel takes none). fetch_node and fetch_users are required; the last three hooks
 * are for remote clients (the uplink drives every remote panel through them alone).
 */
typedef struct pn_client_ops {
    const char *type; /**< "local", "uniproxy", ... */
    enum pn_usage_apply usage_apply; /**< what the panel does with a usage report */
    int (*fetch_node)(pn_client *c, pn_node_cb cb, void *arg);
    int (*fetch_users)(pn_client *c, pn_users_cb cb, void *arg);
    int (*report_usage)(pn_client *c, const sv_usage *items, size_t n, pn_report_cb cb,
                        void *arg);
    int (*report_alive)(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                        void *arg);
    int (*report_status)(pn_client *c, const pn_status *status, pn_report_cb cb, void *arg);
    int (*fetch_alivelist)(pn_client *c, pn_alivelist_cb cb, void *arg);
    /** Report audit hits: SSPanel's detect log; NULL for a panel without an audit
     *  endpoint (UniProxy, PANEL.md §1: its hits are recorded locally only). */
    int (*report_detect)(pn_client *c, const pn_detect_hit *items, size_t n, pn_report_cb cb,
                         void *arg);
    /** Remember @p etag (may be NULL) as the ETag of the last good body of @p kind, sent as
     *  If-None-Match by the next fetch (e.g. from the store after a restart). 0 or -ENOMEM. */
    int (*set_etag)(pn_client *c, enum pn_body_kind kind, const char *etag);
    /** The raw body and ETag of the last PN_OK fetch of @p kind (to store as last good state);
     *  valid until the next fetch of that kind ends or the client is freed; NULL when none. */
    const char *(*last_body)(pn_client *c, enum pn_body_kind kind, size_t *len,
                             const char **etag);
    /** Drop the body last_body() gives for @p kind, keeping its ETag: the caller stored it
     *  (a users body is about 90 bytes per user, held for nothing once stored); from
     *  then on last_body() gives NULL for @p kind until the next PN_OK fetch. Optional: a
     *  client that needs its body (e.g. to build another from it) leaves it NULL or keeps it. */
    void (*forget_body)(pn_client *c, enum pn_body_kind kind);
    /** Parse a body of @p kind that an earlier last_body() returned (from the store after a
     *  restart) into @p node (PN_BODY_CONFIG) or @p users (PN_BODY_USERS), as a fetch would.
     *  0, -EINVAL (err set), -EMSGSIZE or -ENOMEM; the output is zeroed on failure. */
    int (*parse_body)(pn_client *c, enum pn_body_kind kind, const char *body, size_t len,
                      pn_node *node, pn_users *users, sv_error *err);
    /** Copy at most @p cap request counters; @return the number written. */
    size_t (*requests)(pn_client *c, pn_request_count *out, size_t cap);
    /** Report node metrics (optional: Xboard, PROTOCOLS-2.md §6.5, PANEL.md §1.1) as @p via
     *  says. Over the channel it is fire and forget: @p cb runs before the call returns. 0, or
     *  -ENOTCONN / -EISCONN (see pn_metrics_via; then @p cb never runs), -ENOMEM. */
    int (*report_metrics)(pn_client *c, const pn_metrics *m, enum pn_metrics_via via,
                          pn_report_cb cb, void *arg);
    /** Start the panel's push channel (optional, PROTOCOLS-2.md §6): @p ev (borrowed,
     *  must outlive the client) gets every pushed change until the client is freed. The client
     *  keeps the channel up by itself (handshake, reconnects). 0, -EALREADY or -ENOMEM. */
    int (*watch)(pn_client *c, const pn_push_events *ev, void *arg);
    /** Release the client; pending requests end without their callbacks. Must be safe to call
     *  from inside one of this client's callbacks (an HTTP client defers the release). */
    void (*free)(pn_client *c);
} pn_client_ops;

/** The base every client embeds first. */
struct pn_client {
    const pn_client_ops *ops;
};

/** Ask for the node settings (see the callback contract above). @return 0 or a negative error. */
static inline int pn_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    return c->ops->fetch_node(c, cb, arg);
}

/** Ask for the user list (see the callback contract above). @return 0 or a negative error. */
static inline int pn_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    return c->ops->fetch_users(c, cb, arg);
}

/** ops->set_etag, or 0 for a client that keeps no ETag. */
static inline int pn_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag)
{
    return c->ops->set_etag != NULL ? c->ops->set_etag(c, kind, etag) : 0;
}

/** ops->forget_body when the client has it (see there); nothing otherwise. */
static inline void pn_forget_body(pn_client *c, enum pn_body_kind kind)
{
    if (c->ops->forget_body != NULL)
        c->ops->forget_body(c, kind);
}

/** ops->last_body, or NULL for a client that keeps no body. */
static inline const char *pn_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                       const char **etag)
{
    if (c->ops->last_body != NULL)
        return c->ops->last_body(c, kind, len, etag);
    if (len != NULL)
        *len = 0;
    if (etag != NULL)
        *etag = NULL;
    return NULL;
}

/** ops->requests, or 0 for a client that counts none. */
static inline size_t pn_requests(pn_client *c, pn_request_count *out, size_t cap)
{
    return c->ops->requests != NULL ? c->ops->requests(c, out, cap) : 0;
}

/** Release a client. NULL-safe. */
static inline void pn_client_free(pn_client *c)
{
    if (c != NULL)
        c->ops->free(c);
}

/** Options of a remote panel client; every pointer is borrowed for the pn_remote_new() call. */
typedef struct pn_remote_options {
    uv_loop_t *loop;       /**< the control loop */
    const char *type;      /**< "uniproxy" (PANEL.md §1), "xboard" (Xboard API v2 with its node
                                channel, PANEL.md §1.1) or "sspanel" (mod_mu, PANEL.md §2) */
    const char *url;       /**< panel base URL ("https://panel.example.com"), no API path */
    const char *token;     /**< UniProxy token / mod_mu key (never logged) */
    const char *node_id;   /**< numeric id (or an Xboard node code) */
    const char *node_type; /**< UniProxy node_type ("shadowsocks", ...); unused by sspanel */
    long timeout_ms;       /**< per request; 0 = PN_HTTP_TIMEOUT_MS */
    uint32_t pull_interval; /**< s, sspanel: the panel has none of its own; 0 = default */
    uint32_t push_interval; /**< s, sspanel; 0 = default */
    const char *machine_id; /**< xboard machine mode (PANEL.md §1.1), or NULL */
} pn_remote_options;

/**
 * Create the client of a remote panel of type @p o->type (the one constructor the
 * uplink calls, whatever the panel). A failure leaves nothing to free.
 * @return 0, -EINVAL (unknown type or a missing option, err names it), -ENOMEM, -EIO (curl).
 */
int pn_remote_new(const pn_remote_options *o, pn_client **out, sv_error *err);

/** Options of the local panel; every pointer is borrowed for the call only. */
typedef struct pn_local_options {
    const json_t *node;     /**< inline UniProxy config body, or NULL */
    const char *node_file;  /**< path of a file holding that body (when node is NULL) */
    const json_t *users;    /**< inline `{"users":[...]}` body, or NULL */
    const char *users_file; /**< path of a file holding that body (when users is NULL) */
    const char *node_type;  /**< protocol assumed when the body has none; NULL = "shadowsocks" */
} pn_local_options;

/**
 * Create the local panel: it answers from inline JSON or re-reads its files on every fetch
 * (bounded by PN_BODY_MAX), so a SIGHUP reload sees edited files. Its fetches complete before
 * they return and always give PN_OK or an error (never PN_NOT_MODIFIED).
 * @param out  receives the client, freed with pn_client_free()
 * @return 0, -EINVAL (neither or both of node/node_file, users/users_file), -ENOMEM.
 */
int pn_local_new(const pn_local_options *opts, pn_client **out, sv_error *err);

#endif
