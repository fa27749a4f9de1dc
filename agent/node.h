/*
 * Node manager (DESIGN.md "The agent"): one panel client per configured node; fetch node
 * settings and users, lower every node into one spec, apply it to the supervisor with
 * allow_disruptive, and keep each node's last good data. Runs on the control loop.
 *
 * Reconcile rule: when every node's settings (tag, listen, panel node) are the same as the
 * running ones, only user lists changed, and each changed list goes through sv_set_users() so
 * the sessions of unchanged users stay (seed 001 "user edits"). Otherwise the whole spec is
 * applied; afterwards the sessions of nodes whose transport or protocol settings changed are
 * closed (seed 001, katana: "close(Selector::All)" when NodeInfo::transport_eq/protocol_eq differ).
 */
#ifndef AG_NODE_H
#define AG_NODE_H

#include <uv.h>

#include "agent/agent_config.h"
#include "agent/lower.h"
#include "api/api.h"
#include "panel/panel.h"
#include "supervisor/supervisor.h"

/**
 * Where the node manager gets the client of a remote panel node ("uniproxy", "sspanel"; issue
 * 14): the uplink that owns that node's pulls (agent/uplink.h, ag_uplink_client) answers from its
 * held state, so the node manager needs no link to HTTP or the store and no process-wide hook.
 * @p client NULL (or a NULL source): such nodes are refused ("panel not running", e.g. in
 * `katana check --offline`).
 */
typedef struct ag_remote_source {
    int (*client)(void *arg, const ag_node_config *nc, pn_client **out, sv_error *err);
    void *arg;
} ag_remote_source;

/**
 * Create the panel client a node's config asks for: the local panel, or a remote panel's client
 * from @p remote (may be NULL).
 * @return 0, or the panel's error (err set, prefixed with "node <tag>: ").
 */
int ag_panel_new(const ag_node_config *nc, const ag_remote_source *remote, pn_client **out,
                 sv_error *err);

/**
 * A fetch of every node finished.
 * @param status  0, or the first error (err: "node demo: users body ...: users[3].uuid: missing")
 * @param fleet   on success the fetched data, valid during the call; the callback may take its
 *                contents (copy the struct, then zero *fleet); what is left is freed after it.
 *                NULL on error.
 */
typedef void (*ag_fetch_cb)(void *arg, int status, ag_fleet *fleet, const sv_error *err);

/**
 * Fetch node settings and users of every node of @p cfg from newly created panel clients, which
 * are freed when the fetch ends. A PN_NOT_MODIFIED answer reuses the data of the node with the
 * same tag in @p running. @p cfg is only read during this call; @p running (may be NULL) must
 * stay valid until the callback. Remote panel nodes get their client from @p remote (may be NULL:
 * they are refused).
 * @return 0 (then @p cb runs exactly once, possibly before this returns), or a negative error
 *         (err set; @p cb never runs).
 */
int ag_fetch(uv_loop_t *loop, const ag_config *cfg, const ag_fleet *running,
             const ag_remote_source *remote, ag_fetch_cb cb, void *arg, sv_error *err);

typedef struct ag_manager ag_manager;

/**
 * Create a node manager driving @p sv (borrowed, must outlive the manager) on @p loop. Remote
 * panel nodes get their clients from @p remote (copied; may be NULL: such nodes are refused).
 * @return 0 or -ENOMEM.
 */
int ag_manager_new(uv_loop_t *loop, sv_supervisor *sv, const ag_remote_source *remote,
                   ag_manager **out);

/** A load finished: 0 when the new state runs, else the reason: the old state keeps running,
 *  or, when ag_manager_partly_applied() says so, only the nodes refused keep theirs. */
typedef void (*ag_load_cb)(void *arg, int status, const sv_error *err);

/**
 * Fetch every node of @p cfg, then reconcile (ag_manager_reconcile()). @p cfg is only read
 * during this call. One load at a time.
 * @return 0 (then @p cb runs exactly once, possibly before this returns); -EBUSY while a load
 *         runs; another negative error with err set (cb never runs).
 */
int ag_manager_load(ag_manager *m, const ag_config *cfg, ag_load_cb cb, void *arg,
                    sv_error *err);

/**
 * Make @p next the running state: users-only edits through sv_set_users(), anything else through
 * sv_apply() (allow_disruptive). Logs "node <tag>: applied epoch N, U users" (never a secret).
 * Nodes are independent: a node whose new user set, or whose settings alone, are
 * refused keeps its running state (a new one is left out) with one warning, and every other
 * node applies; only a refusal no single node explains (e.g. two nodes on one port) refuses all.
 * @param next  taken on success and on a partial apply (the manager owns it; zeroed); left to
 *              the caller on failure, a user list lowered for an edit maybe shed by then
 *              (pn_users_shed: its secrets were in the lowered set only once)
 * @return 0; the first node refused, "node T: ... (every other node applied)", when some were
 *         (ag_manager_partly_applied() is then true); or the lowering, sv_apply() error with err
 *         set, the running state unchanged.
 */
int ag_manager_reconcile(ag_manager *m, ag_fleet *next, sv_error *err);

/** Whether the last load or reconcile refused some nodes and applied the others. */
bool ag_manager_partly_applied(const ag_manager *m);

/** Whether a load is in flight (a new ag_manager_load() would give -EBUSY). */
bool ag_manager_busy(const ag_manager *m);

/** The running state (last good data of every node); empty before the first success. */
const ag_fleet *ag_manager_running(const ag_manager *m);

/**
 * Status of every node for the REST API: panel type and URL (no secret), last pull
 * and its result, last apply, epoch, users. Any thread (a copy under the manager's lock).
 * Nodes appear when a load that holds them starts and leave when a load without them succeeds.
 * Push and outbox fields are 0 here: the agent fills them from the uplink (ag_uplink_status_merge).
 * @param out  malloc'ed array for the caller to free()
 * @return the count, or -ENOMEM.
 */
long ag_manager_status(ag_manager *m, api_node_status **out);

/**
 * List the nodes of @p cfg in the status (ag_manager_status) as not applied, before any load
 * holds them: at start while a remote panel has not answered yet (no load runs), so /v1/nodes
 * shows them with the uplink's pull errors and /healthz counts them. An Xboard machine entry
 * is skipped (its nodes come from the panel). Control loop; @p cfg is only read.
 */
void ag_manager_declare(ag_manager *m, const ag_config *cfg);

/** Runs on the control loop for each node whose sync was requested (ag_manager_request_sync). */
typedef void (*ag_sync_cb)(void *arg, const char *tag);

/**
 * Accept sync requests from other threads and deliver them to @p cb on the manager's loop
 * (a uv_async_t and a bounded queue). Control loop, once.
 * @return 0, -EALREADY, -ENOMEM or a libuv error.
 */
int ag_manager_enable_sync(ag_manager *m, ag_sync_cb cb, void *arg);

/**
 * Ask for node @p tag to be pulled now (POST /v1/nodes/{tag}/sync). Any thread, never blocks
 * beyond the manager's lock; a tag already queued is queued once.
 * @return 0; -ENOENT for a node the manager does not know; -ENOTSUP before
 *         ag_manager_enable_sync(); -EAGAIN when the queue (16) is full.
 */
int ag_manager_request_sync(ag_manager *m, const char *tag);

/** Free the manager (not the supervisor). A load in flight ends without its callback. */
void ag_manager_free(ag_manager *m);

#endif
