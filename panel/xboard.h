/*
 * The Xboard API v2 panel client (issue 14; PANEL.md §1.1; PROTOCOLS-2.md §6): the UniProxy
 * REST calls on /api/v2/server/ (config, user, push, alive, status, alivelist: the same handlers
 * as v1, without node_type) plus the node channel: `handshake`, then a WebSocket to its
 * `ws_url` carrying `sync.config`, `sync.users` and `sync.user.delta` as they happen, `ping`
 * answered with `pong`, and device reports (`report.devices`) sent over it while it is up.
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

/** What one channel message says (PROTOCOLS-2.md §6.4). */
enum pn_xb_kind {
    PN_XB_IGNORED = 0,  /**< an event katana does not use (sync.devices, sync.nodes, ...) */
    PN_XB_PING,         /**< `ping`: answer `pong` */
    PN_XB_AUTH_OK,      /**< `auth.success` */
    PN_XB_ERROR,        /**< `error` (the panel closes next): message */
    PN_XB_CONFIG,       /**< `sync.config`: node */
    PN_XB_USERS,        /**< `sync.users`: users */
    PN_XB_DELTA,        /**< `sync.user.delta`: users (action add) or ids (action remove) */
};

/** A parsed message; owned data freed by pn_xb_event_free(). */
typedef struct pn_xb_event {
    enum pn_xb_kind kind;
    bool has_node_id;
    uint64_t node_id;  /**< `data.node_id` (machine mode), when present */
    pn_node node;      /**< PN_XB_CONFIG */
    pn_users users;    /**< PN_XB_USERS; PN_XB_DELTA "add" */
    uint64_t *ids;     /**< PN_XB_DELTA "remove": user ids (malloc'ed) */
    size_t n_ids;
    char message[160]; /**< PN_XB_ERROR: the panel's text, printable ASCII only */
} pn_xb_event;

/**
 * Parse one channel message (a JSON text frame, PROTOCOLS-2.md §6.3: `{"event","data"}`).
 * Bounded by PN_XB_MSG_MAX, PN_USERS_MAX users and the model's bounds; duplicate keys and
 * duplicate user ids are refused.
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
} pn_xboard_options;

/**
 * Create an Xboard API v2 client ("xboard"). Nothing is sent before the first call; the
 * channel starts with the watch op.
 * @return 0, -EINVAL (missing option, err names it), -ENOMEM, -EIO.
 */
int pn_xboard_new(const pn_xboard_options *o, pn_client **out, sv_error *err);

#endif
