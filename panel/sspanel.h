/*
 * The SSPanel-UIM `mod_mu` WebAPI client (PANEL.md §2): GET nodes/{id}/info and
 * users with ETag / If-None-Match / 304, POST users/traffic and users/aliveip, the legacy
 * POST nodes/{id}/info load report on panels older than 2023.2; every request carries the
 * token as `key` (and `muKey`, as XrayR sends it, §2.2). HTTP through panel/http.h on the
 * control loop. Behind the ops table of panel/panel.h.
 *
 * Outcomes (PANEL.md §2.3): 304 gives PN_NOT_MODIFIED; a 2xx (or 400, which mod_mu answers
 * with an envelope) whose body is `{"ret":1,...}` and parses gives PN_OK; `ret` other than 1
 * (HTTP 200 business errors such as "Node not found."), another status, an HTML page or a
 * body that does not parse is an error and the caller keeps its running state.
 *
 * The node is delivered with the panel's detect rules (GET func/detect_rules, after the info
 * answer; a 404 means none) as block routes; PN_NOT_MODIFIED only when both answers were 304.
 * The stored node body holds both (last_body / parse_body).
 *
 * Node types (the `sort` of §2.4) are lowered to the UniProxy model: 0 Shadowsocks (the
 * method from custom_config), 1 Shadowsocks 2022, 11 VMess (VLESS with enable_vless "1"), 14
 * Trojan; any other sort is refused naming it. The user's secret is `passwd` on Shadowsocks
 * nodes and `uuid` on the others, so users are parsed after the node (a users answer that
 * arrives first is an error "no node info yet", retried by the caller's backoff).
 */
#ifndef PN_SSPANEL_H
#define PN_SSPANEL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "panel/panel.h"

#define PN_SSPANEL_SPEED_MAX 10000000u /**< Mbps (10 Tbit/s): a larger node_speedlimit is refused */
#define PN_SSPANEL_IPLIMIT_MAX 65535u  /**< a larger node_iplimit is refused */
#define PN_SSPANEL_METHOD_MAX 64u      /**< bytes of a Shadowsocks method name */

/** Options; every pointer is borrowed for the pn_sspanel_new() call only. */
typedef struct pn_sspanel_options {
    uv_loop_t *loop;        /**< the control loop */
    const char *url;        /**< panel base URL, no /mod_mu */
    const char *key;        /**< mod_mu key (`muKey`; never logged) */
    const char *node_id;    /**< decimal node id */
    long timeout_ms;        /**< per request; 0 = PN_HTTP_TIMEOUT_MS */
    uint32_t pull_interval; /**< s, put into every parsed node (the panel has none); 0 = 60 */
    uint32_t push_interval; /**< s, likewise; 0 = 60 */
} pn_sspanel_options;

/**
 * Create a mod_mu client.
 * @return 0, -EINVAL (missing option or a url that is not http(s), err names it), -ENOMEM,
 *         -EIO (curl). A failure leaves nothing to free.
 */
int pn_sspanel_new(const pn_sspanel_options *opts, pn_client **out, sv_error *err);

/** What the users parser needs from the node answer (filled by pn_sspanel_parse_node). */
typedef struct pn_sspanel_meta {
    int sort;                            /**< mod_mu node sort (PANEL.md §2.4) */
    uint64_t speed_mbps;                 /**< the node's node_speedlimit, Mbps (0 = none) */
    char method[PN_SSPANEL_METHOD_MAX];  /**< Shadowsocks method (sort 0/1), else "" */
    unsigned version_year, version_month; /**< panel `version` "YYYY.M.P"; 0 when absent */
} pn_sspanel_meta;

/**
 * Parse a `GET /mod_mu/nodes/{id}/info` answer `{"ret":1,"data":{sort, server, custom_config,
 * node_speedlimit, version}}` (PANEL.md §2.5) into the UniProxy model. Keys of `data`,
 * `custom_config` and `reality-opts` that PANEL.md §2.5 does not name are listed in
 * out->unknown (for one warning each), never refused.
 * @param pull, push  seconds put into out->pull_interval / push_interval
 * @param meta        receives the sort, node speed limit, method and version
 * @param out         overwritten; owned by the caller on success (pn_node_free), zeroed on error
 * @return 0; -EPROTO for `ret` ≠ 1 (err "ret 0: Node not found."); -EINVAL naming the field
 *         ("data.sort: node type 2 (TUIC) is not served", "data.custom_config.method:
 *         missing"); -EMSGSIZE over a bound; -ENOMEM.
 */
int pn_sspanel_parse_node(const json_t *body, uint32_t pull, uint32_t push,
                          pn_sspanel_meta *meta, pn_node *out, sv_error *err);

/**
 * Parse a `GET /mod_mu/users` answer `{"ret":1,"data":[{id, node_speedlimit, passwd | uuid,
 * method, node_iplimit, alive_ip, ...}]}` (PANEL.md §2.4, current and legacy 2023 shapes).
 * The secret is `passwd` for sort 0/1 and `uuid` otherwise; a user's node_speedlimit of 0
 * takes the node's. On a sort 0 node, users whose `method` differs from the node's are left
 * out (katana serves one method per node) and counted in @p skipped.
 * @param alive    NULL, or receives the legacy `alive_ip` counts (malloc'ed, caller frees;
 *                 NULL when none); @p n_alive their count
 * @return 0; -EPROTO for `ret` ≠ 1; -EINVAL naming the entry ("data[3].id: duplicate user id
 *         5", "data[0].node_speedlimit: larger than 10000000"); -EMSGSIZE (over PN_USERS_MAX
 *         users or a long string); -ENOMEM. Outputs zeroed on error.
 */
int pn_sspanel_parse_users(const json_t *body, const pn_sspanel_meta *meta, pn_users *out,
                           size_t *skipped, pn_alive_count **alive, size_t *n_alive,
                           sv_error *err);

/**
 * pn_sspanel_parse_users() of a body given as text (@p len bytes, borrowed, bounded by the
 * caller), without a tree of the whole list: a body that is not JSON is refused
 * before any user is built, and each entry of `data` is loaded and parsed alone
 * (panel/jsonscan.h). A body with several faults may name another of them than the tree's
 * parse would.
 * @return pn_sspanel_parse_users()'s values, or -EBADMSG when the body is not JSON (err says
 *         why, quoting none of it).
 */
int pn_sspanel_parse_users_text(const char *text, size_t len, const pn_sspanel_meta *meta,
                                pn_users *out, size_t *skipped, pn_alive_count **alive,
                                size_t *n_alive, sv_error *err);

/**
 * Parse a `GET /mod_mu/func/detect_rules` answer `{"ret":1,"data":[{id, name, text, regex,
 * type}]}` (PANEL.md §2.6) into block routes: each plaintext rule (type 1) becomes a route with
 * its id and the one match "regexp:<regex>" (lowered like a UniProxy block route: searched in
 * the destination name; an invalid or empty-matching regex is skipped there with a warning).
 * Other types match packet bytes, which katana cannot express: counted in @p skipped.
 * @param out  malloc'ed routes (NULL when none), freed like pn_node's routes
 * @return 0; -EPROTO for `ret` ≠ 1; -EINVAL naming the entry; -EMSGSIZE over PN_ROUTES_MAX
 *         rules or PN_TEXT_MAX bytes of regex; -ENOMEM. Outputs zeroed on error.
 */
int pn_sspanel_parse_rules(const json_t *body, pn_route **out, size_t *n, size_t *skipped,
                           sv_error *err);

/**
 * Judge a mod_mu answer to a report (traffic, aliveip, info): accepted when the status is
 * 2xx and the body is a JSON object with `"ret": 1` (PANEL.md §2.3). Bounded by @p len.
 * @return 0, or -EPROTO with err set ("HTTP 200: ret 0: Invalid data.", "HTTP 500 ...").
 */
int pn_sspanel_check_ack(long status, const char *body, size_t len, sv_error *err);

#endif
