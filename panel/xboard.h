/*
 * The Xboard API v2 panel client (PANEL.md §1.1; PROTOCOLS-2.md §6): the UniProxy
 * REST calls on /api/v2/server/ (config, user, push, alive, status, alivelist: the same handlers
 * as v1, without node_type) plus the node channel: `handshake`, then a WebSocket to its
 * `ws_url` carrying `sync.config`, `sync.users` and `sync.user.delta` as they happen, `ping`
 * answered with `pong`, and device reports (`report.devices`) sent over it while it is up.
 * In machine mode the channel is the machine's (pn_xb_machine_watch): one WebSocket for every
 * node of the machine, its node-scoped events routed by `data.node_id`.
 *
 * The WebSocket is libwebsockets' client (Debian 12's libcurl 7.88 is built without WebSocket
 * support), serviced on a thread of its own with lws' default event loop; messages cross to the
 * control loop through a uv_async_t and a queue, so no callback runs on that thread. The channel
 * reconnects by itself: 1 s doubling to 60 s with up to 20 % jitter, reset after 2 minutes up
 * (PROTOCOLS-2.md §6.6); a connection silent for 60 s gets a WebSocket ping and is dropped
 * after 150 s. A message over PN_XB_MSG_MAX bytes drops the connection.
 */
#ifndef PN_XBOARD_H
#define PN_XBOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "panel/panel.h"

#define PN_XB_MSG_MAX (16u << 20)  /**< bytes in one channel message */
#define PN_XB_NODES_MAX 4096u      /**< node ids in one event */
#define PN_XB_API_PATH "/api/v2/server/"

#define PN_XB_MACHINE_NODES_MAX 256u /**< nodes in one machine answer (AG_CONFIG_NODES_MAX) */
#define PN_XB_TYPE_MAX 31u           /**< bytes of a node type */
#define PN_XB_URL_MAX 2048u          /**< bytes of a URL katana builds; a ws_url is at most half */

/** One node the panel assigns to the machine. */
typedef struct pn_xb_machine_node {
    uint64_t id;                    /**< the panel's node id (positive) */
    char type[PN_XB_TYPE_MAX + 1];  /**< "shadowsocks", "vless", ... ([a-z0-9_-], non-empty) */
} pn_xb_machine_node;

/** A parsed `machine/nodes` answer; nodes sorted by id. Free with pn_xb_machine_free(). */
typedef struct pn_xb_machine {
    pn_xb_machine_node *nodes; /**< malloc'ed, NULL when none */
    size_t n;
    uint32_t push_interval, pull_interval; /**< s, `base_config`; 0 when absent */
} pn_xb_machine;

/** What one channel message says (PROTOCOLS-2.md §6.4). */
enum pn_xb_kind {
    PN_XB_IGNORED = 0,  /**< an event katana does not use (sync.devices, ...) */
    PN_XB_PING,         /**< `ping`: answer `pong` */
    PN_XB_AUTH_OK,      /**< `auth.success` */
    PN_XB_ERROR,        /**< `error` (the panel closes next): message */
    PN_XB_CONFIG,       /**< `sync.config`: node */
    PN_XB_USERS,        /**< `sync.users`: users */
    PN_XB_DELTA,        /**< `sync.user.delta`: users (action add) or ids (action remove) */
    PN_XB_NODES,        /**< `sync.nodes` (machine mode): nodes, no intervals */
};

/** A parsed message; owned data freed by pn_xb_event_free(). */
typedef struct pn_xb_event {
    enum pn_xb_kind kind;
    bool has_node_id;
    uint64_t node_id;  /**< `data.node_id` (machine mode), when present */
    pn_node node;      /**< PN_XB_CONFIG */
    char *config_body; /**< PN_XB_CONFIG: `data.config` as compact JSON (malloc'ed) */
    size_t config_len;
    pn_users users;    /**< PN_XB_USERS; PN_XB_DELTA "add" */
    uint64_t *ids;     /**< PN_XB_DELTA "remove": user ids (malloc'ed) */
    size_t n_ids;
    pn_xb_machine nodes; /**< PN_XB_NODES: the machine's node set (intervals 0) */
    char message[160]; /**< PN_XB_ERROR: the panel's text, printable ASCII only */
} pn_xb_event;

/**
 * Parse one channel message (a JSON text frame, PROTOCOLS-2.md §6.3: `{"event","data"}`).
 * Bounded by PN_XB_MSG_MAX, PN_USERS_MAX users, PN_XB_MACHINE_NODES_MAX nodes and the model's
 * bounds; duplicate keys, duplicate user ids and duplicate node ids are refused.
 * @param node_type  protocol assumed by a `sync.config` without one (may be NULL)
 * @param ev         overwritten; free with pn_xb_event_free() (also after an error)
 * @return 0, -EINVAL (not JSON, bad shape; err: "sync.user.delta: users[2].id: ..."),
 *         -EMSGSIZE (over a bound) or -ENOMEM.
 */
int pn_xb_event_parse(const char *msg, size_t len, const char *node_type, pn_xb_event *ev,
                      sv_error *err);

/** Free what an event owns and zero it. */
void pn_xb_event_free(pn_xb_event *ev);

/**
 * Parse a `handshake` answer `{"websocket":{"enabled":bool,"ws_url":"ws[s]://..."}}`
 * (PROTOCOLS-2.md §6.1). Bounded by @p len.
 * @param url  receives a malloc'ed ws:// or wss:// URL when enabled, else NULL
 * @return 0 (enabled or not), -EINVAL (shape, or a URL of another scheme; err set), -ENOMEM.
 */
int pn_xb_parse_handshake(const char *body, size_t len, char **url, sv_error *err);

/** Options; pointers borrowed for the call (as pn_uniproxy_options). */
typedef struct pn_xboard_options {
    uv_loop_t *loop;
    const char *url;       /**< panel base URL */
    const char *token;     /**< server token (never logged) */
    const char *node_id;   /**< numeric id or node code */
    const char *node_type; /**< the protocol a config without one has */
    long timeout_ms;       /**< per REST request; 0 = PN_HTTP_TIMEOUT_MS */
    const char *machine_id; /**< machine mode (PANEL.md §1.1): REST auth is machine_id + the
                                 machine token + node_id; the node has no channel of its own
                                 (watch gives -ENOTSUP: the machine's channel serves it,
                                 pn_xb_machine_watch). NULL = node mode */
} pn_xboard_options;

/**
 * Create an Xboard API v2 client ("xboard"). Nothing is sent before the first call; the
 * channel starts with the watch op.
 * @return 0, -EINVAL (missing option, err names it), -ENOMEM, -EIO.
 */
int pn_xboard_new(const pn_xboard_options *o, pn_client **out, sv_error *err);

/* ---------------------------------------------------------------------------------------- */
/* machine mode (PANEL.md §1.1 `/api/v2/server/machine/nodes` and `machine/status`) */
/* ---------------------------------------------------------------------------------------- */

/**
 * Parse a `machine/nodes` answer `{"nodes":[{"id","type","name"}...],"base_config":{...}}`
 * (PANEL.md §1.1). Strict: a body that is not a JSON object (an HTML page), a missing or
 * non-array `nodes`, an id that is not a positive integer, a duplicate id, a missing or
 * malformed type, an interval that is not 0..86400 are refused; `name` is ignored. Bounded by
 * @p len and PN_XB_MACHINE_NODES_MAX.
 * @param out  overwritten; zeroed on failure
 * @return 0, -EINVAL (err: "machine nodes: nodes[2].id: duplicate id 7"), -EMSGSIZE, -ENOMEM.
 */
int pn_xb_parse_machine(const char *body, size_t len, pn_xb_machine *out, sv_error *err);

/** Free what a machine answer owns and zero it. NULL-safe. */
void pn_xb_machine_free(pn_xb_machine *m);

/** Options of the machine client; pointers borrowed for the call. */
typedef struct pn_xb_machine_options {
    uv_loop_t *loop;
    const char *url;        /**< panel base URL */
    const char *token;      /**< the machine token (never logged) */
    const char *machine_id; /**< the machine's id */
    long timeout_ms;        /**< per request; 0 = PN_HTTP_TIMEOUT_MS */
} pn_xb_machine_options;

typedef struct pn_xb_machine_client pn_xb_machine_client;

/**
 * The machine node list arrived.
 * @param rc  0 with @p m set (valid during the call; the callback may take its contents: copy,
 *            then zero *m), or a negative error with @p err set ("HTTP 403: ...") and m NULL
 */
typedef void (*pn_xb_machine_cb)(int rc, pn_xb_machine *m, const sv_error *err, void *arg);

/** A machine status report finished: 0, or a negative error with @p err set. */
typedef void (*pn_xb_machine_report_cb)(int rc, const sv_error *err, void *arg);

/**
 * Create the client of a machine's own endpoints (POST machine/nodes, POST machine/status),
 * auth `{"machine_id","token"}` in the JSON body. A failure leaves nothing to free.
 * @return 0, -EINVAL (missing option), -ENOMEM, -EIO.
 */
int pn_xb_machine_new(const pn_xb_machine_options *o, pn_xb_machine_client **out,
                      sv_error *err);

/** Ask for the node list (the callback contract of panel.h). @return 0, -EBUSY (one in
 *  flight) or another negative error. */
int pn_xb_machine_fetch(pn_xb_machine_client *c, pn_xb_machine_cb cb, void *arg);

/** Report the machine's load `{cpu, mem, swap, disk}` (PANEL.md §1.9 shapes). @return 0 or a
 *  negative error (-EBUSY: one in flight; then @p cb never runs). */
int pn_xb_machine_status(pn_xb_machine_client *c, const pn_status *st,
                         pn_xb_machine_report_cb cb, void *arg);

/** Free the client and stop its channel; requests in flight end without their callbacks.
 *  Safe from inside one of its callbacks. NULL-safe. */
void pn_xb_machine_client_free(pn_xb_machine_client *c);

/**
 * What the machine's channel tells its watcher (PROTOCOLS-2.md §6.2-6.4), on the
 * control loop. Node-scoped events carry the panel's node id (`data.node_id`); one without it
 * is dropped. Data pointers are valid during the call and may be taken (copy, then zero).
 * Every member is required.
 */
typedef struct pn_xb_machine_events {
    /** `sync.config`; @p body as in pn_push_events.node */
    void (*node)(void *arg, uint64_t node_id, pn_node *node, const char *body, size_t len);
    void (*users)(void *arg, uint64_t node_id, pn_users *users); /**< `sync.users` */
    void (*delta)(void *arg, uint64_t node_id, const pn_users *add, const uint64_t *remove,
                  size_t n_remove);                               /**< `sync.user.delta` */
    /** A message that could not be read (@p why): pull node @p node_id over REST, or every
     *  node of the machine and its list when @p node_id is 0 (its node id is unknown). */
    void (*resync)(void *arg, uint64_t node_id, const sv_error *why);
    /** `sync.nodes`: the machine's node set now (no intervals: those come from REST). */
    void (*nodes)(void *arg, pn_xb_machine *list);
    /** The channel came up (authenticated; @p why NULL) or went down: then every node of the
     *  machine polls over REST at once while the client reconnects (1 s doubling to 60 s, up
     *  to 20 % jitter, PROTOCOLS-2.md §6.6). */
    void (*channel)(void *arg, bool up, const sv_error *why);
} pn_xb_machine_events;

/**
 * Start the machine's channel: `handshake` with `{"machine_id","token"}`, then the WebSocket at
 * its `ws_url?token=<machine token>&machine_id=<id>`, kept up by the client; `ping` is answered
 * with `pong`. @p ev (borrowed) must outlive the client.
 * @return 0, -EALREADY or -ENOMEM.
 */
int pn_xb_machine_watch(pn_xb_machine_client *c, const pn_xb_machine_events *ev, void *arg);

/**
 * Send node @p node_id's online IPs as `report.devices` `{"node_id":N,"devices":{uid:[ip]}}`
 * over the machine's channel (PROTOCOLS-2.md §6.5). Fire and forget: queued for the channel.
 * @return 0; -ENOTCONN when the channel is not up (report over REST instead); -ENOMEM.
 */
int pn_xb_machine_report_devices(pn_xb_machine_client *c, uint64_t node_id,
                                 const pn_alive *items, size_t n);

/* ---------------------------------------------------------------------------------------- */
/* node metrics (PROTOCOLS-2.md §6.5 `node.status`; PANEL.md §1.1 `report`): xboard_metrics.c  */
/* ---------------------------------------------------------------------------------------- */

/**
 * The `metrics` object Xboard's ServerService::updateMetrics reads: uptime,
 * active_connections, total_connections, active_users, total_users, inbound_speed,
 * outbound_speed, cpu_per_core (only when @p m has cores), load {load1, load5, load15},
 * speed_limiter {has_limits, limited_users}, api {success, failure}, ws {enabled, connected},
 * limits {device_limit_events, speed_limited_users}, kernel_status. Xboard-Node's `goroutines`
 * and `gc` have no katana equivalent and are left out (the panel reads 0 and an empty object,
 * and its node page hides those rows). Counts over INT64_MAX are sent as INT64_MAX. Pure.
 * @return a new JSON object (the caller's reference), or NULL (out of memory).
 */
json_t *pn_xb_metrics_json(const pn_metrics *m);

/**
 * The `node.status` channel message `{"event":"node.status","data":<metrics>,"timestamp":T}`
 * (PROTOCOLS-2.md §6.5), with `data.node_id` = @p node_id when @p machine (machine mode). Pure
 * but for the timestamp (time(2)).
 * @return malloc'ed compact JSON text, or NULL (out of memory).
 */
char *pn_xb_status_message(const pn_metrics *m, bool machine, uint64_t node_id);

/**
 * Send node @p node_id's metrics as `node.status` over the machine's channel (fire and forget:
 * queued for the channel). @p m's ws fields are replaced by the channel's state.
 * @return 0; -ENOTCONN when the channel is not up (report over REST instead); -ENOMEM.
 */
int pn_xb_machine_report_metrics(pn_xb_machine_client *c, uint64_t node_id,
                                 const pn_metrics *m);

/** The machine's channel: whether the panel offered one (@p enabled) and whether it is up
 *  (authenticated, @p connected). Either pointer may be NULL. */
void pn_xb_machine_channel_state(const pn_xb_machine_client *c, bool *enabled, bool *connected);

#endif
