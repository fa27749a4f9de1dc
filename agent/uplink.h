/*
 * The panel uplink: for every node whose panel is remote ("uniproxy",
 * "sspanel"), a persistent client made by pn_remote_new() and driven only through the ops of
 * panel/panel.h, that pulls node settings and users on the node's pull_interval, keeps the panel's
 * latest state in memory (what the node manager is offered) and the last state that applied in
 * the SQLite store, and a usage outbox that is flushed from the supervisor every
 * db.flush_interval and pushed every push_interval.
 *
 * Refused panel answers: a pulled state is stored only after the node manager applied
 * it (ag_uplink_applied), so a refused answer never becomes the state a restart loads. A refused
 * answer stays held with its ETag: the next pulls get 304 and the same refused state is not
 * offered again at every pull, only when the panel changes it (a new ETag, a full body) or a
 * reload (SIGHUP, POST /v1/nodes/{tag}/sync) asks for it. At start, a stored state
 * that this version refuses is skipped with one warning (its ETags dropped, so the next pull
 * fetches full bodies) and the node waits for the panel; katana keeps running.
 *
 * Accounting guarantee: usage is taken from the supervisor (sv_take_usage) and written to the
 * outbox in one transaction, every flush interval, before every push, before every apply that
 * may remove users, and at shutdown; it is deleted only after the panel answered the push with
 * a 2xx and a valid body. So a graceful stop loses nothing, a crash loses at most the bytes of
 * the last flush interval, and a push is at-least-once: when the panel applied a push but its
 * answer was lost (timeout, reset, crash between the answer and the delete), the same batch is
 * sent again and billed twice. That window is one request round trip plus one SQLite commit.
 *
 * Usage is per panel user id (the supervisor meters users, not nodes): each uid is billed
 * through the first remote node whose user list holds it (the first remote node when none
 * does any more). Each node keeps its own alivelist answer; the supervisor gets their union.
 *
 * Xboard machine mode (PANEL.md §1.1): a machine entry (panel.machine_id) has no
 * node of its own; its `machine/nodes` list, pulled every pull_interval (with a machine/status
 * report) and stored as its last good list, makes one node per listed node of a type katana
 * serves. A node the list drops stops being offered (ag_uplink_expand leaves it out, so the next
 * load stops its listener) and billed; its pending usage is handed to a live node of the same
 * machine (db_usage_move: the panel takes no push for a node the machine no longer has, and
 * usage is billed per user id) or, without one, pushed by the node itself until its outbox is
 * empty. A refused list keeps the last good one, with one warning. The machine's one channel
 * (pn_xb_machine_watch, PROTOCOLS-2.md §6.2-6.5) routes node-scoped events by node id to that
 * node's push handlers (the same as a node's own channel), applies `sync.nodes` through the
 * same code as a pulled list, sends each node's online IPs as `report.devices`, and when it
 * drops every node of the machine pulls at once.
 *
 * Pushed changes (Xboard's channel): applied at once; their state is stored as the last good
 * state, without an ETag, once it applied, like a pulled body; the next pull's full
 * body replaces it.
 *
 * No process-wide state: everything, the REST API's snapshot included, hangs on the
 * ag_uplink, so several uplinks (or several nodes on different panels in one) run side by side.
 * Control loop only, except the API readers.
 */
#ifndef AG_UPLINK_H
#define AG_UPLINK_H

#include <stdbool.h>

#include <uv.h>

#include "agent/agent_config.h"
#include "agent/lower.h"
#include "api/api.h"
#include "db/db.h"
#include "panel/panel.h"
#include "supervisor/supervisor.h"

typedef struct ag_uplink ag_uplink;

/** New panel data arrived (or a node got its first state): the caller reloads its nodes. */
typedef void (*ag_uplink_change_cb)(void *arg);

/**
 * Start the uplink for the remote panel nodes of @p cfg (none: a no-op uplink). Opens db.path,
 * seeds each node with its stored last good state and ETags, resends pending usage at once,
 * and starts pulling. Panel settings (url, token, node_id, node_type, timeout) and db settings
 * are read here only: changing them needs a restart.
 * @param sv  borrowed; must outlive the uplink
 * @return 0, or the store's or a client's error (err set; *out NULL and nothing left to undo).
 *         Never fails because of a panel answer.
 */
int ag_uplink_new(uv_loop_t *loop, sv_supervisor *sv, const ag_config *cfg,
                  ag_uplink_change_cb on_change, void *arg, ag_uplink **out, sv_error *err);

/**
 * Replace every Xboard machine entry of @p cfg (panel.machine_id) by one node per
 * node the uplink runs for that machine (its live nodes, as the machine's last good list
 * made them): the entry's settings, tag "<tag>-<node id>", panel.node_id the node's id,
 * panel.node_type its type. Other entries stay as they are. A machine with no node (yet)
 * expands to none. Call it on every config given to the node manager.
 * @return 0; -ENOENT (a machine entry this uplink did not start: its settings changed, err
 *         names it) or -ENOMEM; @p cfg stays valid for ag_config_free() either way.
 */
int ag_uplink_expand(ag_uplink *u, ag_config *cfg, sv_error *err);

/** Whether katana serves panel node type @p type ("shadowsocks", "vmess", "vless", "trojan"):
 *  a machine's node of another type is skipped. */
bool ag_machine_type_served(const char *type);

/**
 * The config of panel node @p id (of @p type) of the Xboard machine entry @p entry
 * (PANEL.md §1.1): the entry's settings with tag "<tag>-<id>", panel.node_id the id and
 * panel.node_type the type (panel.machine_id kept: REST auth is the machine's). What `run`
 * serves for each node of the machine's list, and what `check` fetches.
 * @param out  filled; valid for ag_node_config_free() whatever the result
 * @return 0, -EINVAL (the tag is longer than SV_TAG_MAX, err names it) or -ENOMEM.
 */
int ag_machine_node_config(const ag_node_config *entry, uint64_t id, const char *type,
                           ag_node_config *out, sv_error *err);

/** Whether every machine has a node list and every remote node a node and a user list
 *  (stored or pulled). */
bool ag_uplink_ready(const ag_uplink *u);

/**
 * A load of the node manager succeeded and @p running (borrowed, the manager's running fleet)
 * now runs: for every remote node whose running node and users equal the uplink's held state,
 * write the bodies pulled since the last store, with their ETags, to the store in one
 * transaction (only a state that applied becomes the last good state). Nodes whose
 * held state differs (a refused answer still held) are left alone. A store error is logged and
 * the write is tried again after the next successful load.
 */
void ag_uplink_applied(ag_uplink *u, const ag_fleet *running);

/**
 * The first load, made from the stored state, was refused (@p why; e.g. a bind error the
 * per-node check at start cannot see): forget the held state of every node served from the store
 * together with its ETags, log one warning per such node naming it and @p why, and pull at once,
 * so the node waits for the panel instead of katana exiting.
 * @return the number of such nodes; 0 when the refused state did not come from the store (the
 *         caller then fails as before).
 */
size_t ag_uplink_drop_stored(ag_uplink *u, const sv_error *why);

/**
 * Graceful stop (SIGTERM, SIGINT): save the
 * supervisor's client IP hints (sv_hints_export) in the store, replacing those saved before, so
 * that the next start knows its returning clients. Call it before sv_shutdown(). Nothing without
 * a store (no db.path), or before ag_uplink_restore_hints() ran (the stored ones stay). A store
 * error is logged.
 */
void ag_uplink_save_hints(ag_uplink *u);

/**
 * The first load applied: give the hints saved at the last graceful stop to the
 * supervisor (sv_hints_import; those of removed users or expired are dropped there) and delete
 * them from the store. Once per process: later calls do nothing. Errors are logged.
 */
void ag_uplink_restore_hints(ag_uplink *u);

/**
 * Take the supervisor's usage and write it to the outbox (one transaction per node). On a store
 * error the bytes stay in memory and are written by the next flush.
 * @return 0 or the store's error.
 */
int ag_uplink_flush(ag_uplink *u);

/**
 * The client the node manager uses for a remote panel node: it answers at once from the uplink's
 * last good state (never PN_NOT_MODIFIED). Fits ag_remote_source.client with the uplink as arg.
 * @return 0; -ENOENT when no uplink serves this tag; -ENOMEM.
 */
int ag_uplink_client(void *uplink, const ag_node_config *nc, pn_client **out, sv_error *err);

/**
 * Fill the push and outbox fields (last_push_*, outbox_pending_bytes, outbox_oldest_ms) of the
 * remote nodes in @p v from the snapshot the control loop publishes after every flush, push
 * and pull, and their last pull: its time when later than the last load's, and its
 * error when it failed (a good pull keeps the last load's outcome). Other nodes are left as
 * they are. Any thread.
 */
void ag_uplink_status_merge(ag_uplink *u, api_node_status *v, long n);

/**
 * Per node, per user usage for GET /v1/usage (the uplink may be NULL: nothing).
 * Totals are the supervisor's wire bytes since start (sv_usage_snapshot); each user goes under
 * the node that bills it (see above). Unreported = the node's outbox rows for the user not yet
 * acknowledged by a 2xx push (open rows and batches in flight; rows left by an earlier run
 * included) + bytes taken but not yet written (store error) + bytes the supervisor counted that
 * no flush has taken yet (at most one db.flush_interval, clamped at 0). Any thread; reads the
 * published snapshot (never the store).
 * @return the count (0 without remote nodes), -ENOMEM or the supervisor's error.
 */
long ag_uplink_usage(ag_uplink *u, api_usage_row **out);

/**
 * Panel request counters by node, endpoint and HTTP status, as published (any thread; the
 * uplink may be NULL: nothing).
 * @return the count or -ENOMEM.
 */
long ag_uplink_requests(ag_uplink *u, api_panel_requests **out);

/**
 * The audit hits of the current report period of every remote node (GET /v1/audit):
 * the outbox rows not yet taken by the panel (SSPanel's detect log) or, for a panel without an
 * audit endpoint, recorded since the node's last push. Any thread; reads the published snapshot.
 * The uplink may be NULL (nothing).
 * @param out  malloc'ed array (by node, then user, rule) for the caller to free()
 * @return the count or -ENOMEM.
 */
long ag_uplink_audit(ag_uplink *u, api_audit_row **out);

/** Stop the timers, drop requests in flight (their batches stay pending), close the store. */
void ag_uplink_free(ag_uplink *u);

#endif
