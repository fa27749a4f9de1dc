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

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "panel/model.h"
#include "supervisor/util/err.h"

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

/** One user's traffic for a usage report (PANEL.md §1.6: wire bytes since the last report). */
typedef struct pn_traffic {
    uint64_t user; /**< panel user id */
    uint64_t up;   /**< bytes from the client */
    uint64_t down; /**< bytes to the client */
} pn_traffic;

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

/** Node load for a status report (PANEL.md §1.9). Sizes in bytes. */
typedef struct pn_status {
    double cpu; /**< percent, 0..100 */
    uint64_t mem_total, mem_used;
    uint64_t swap_total, swap_used;
    uint64_t disk_total, disk_used;
} pn_status;

/**
 * What a panel client implements. A NULL report hook means the panel takes no such report
 * (the local panel takes none). fetch_node and fetch_users are required.
 */
typedef struct pn_client_ops {
    const char *type; /**< "local", "uniproxy", ... */
    int (*fetch_node)(pn_client *c, pn_node_cb cb, void *arg);
    int (*fetch_users)(pn_client *c, pn_users_cb cb, void *arg);
    int (*report_usage)(pn_client *c, const pn_traffic *items, size_t n, pn_report_cb cb,
                        void *arg);
    int (*report_alive)(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                        void *arg);
    int (*report_status)(pn_client *c, const pn_status *status, pn_report_cb cb, void *arg);
    int (*fetch_alivelist)(pn_client *c, pn_alivelist_cb cb, void *arg);
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

/** Release a client. NULL-safe. */
static inline void pn_client_free(pn_client *c)
{
    if (c != NULL)
        c->ops->free(c);
}

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
