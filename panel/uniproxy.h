/*
 * The V2Board / Xboard "UniProxy" panel client (PANEL.md §1): GET config / user with
 * ETag / If-None-Match / 304, POST push / alive / status, GET alivelist, every request carrying
 * token, node_id and node_type as query parameters (§1.1, §1.2). HTTP through panel/http.h on
 * the control loop. Behind the ops table of panel/panel.h.
 *
 * Outcomes of config / user (PANEL.md §4.2): 304 gives PN_NOT_MODIFIED; a 2xx whose body parses
 * gives PN_OK (an empty user list included: it revokes everyone); anything else — transport
 * error, non-2xx with either error envelope (§1.2), a 2xx body that is not the expected JSON
 * (an HTML page) — is an error and the caller keeps its running state.
 */
#ifndef PN_UNIPROXY_H
#define PN_UNIPROXY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "panel/panel.h"

/** Options; every pointer is borrowed for the pn_uniproxy_new() call only. */
typedef struct pn_uniproxy_options {
    uv_loop_t *loop;       /**< the control loop */
    const char *url;       /**< panel base URL ("https://panel.example.com"), no API path */
    const char *token;     /**< server token (never logged) */
    const char *node_id;   /**< numeric id or Xboard node code */
    const char *node_type; /**< "shadowsocks", ... (also the protocol when config has none) */
    long timeout_ms;       /**< per request; 0 = PN_HTTP_TIMEOUT_MS */
    const char *api_path;  /**< NULL: "/api/v1/server/UniProxy/"; else a static path ending in
                                '/' ("/api/v2/server/", Xboard API v2, PANEL.md §1.1), and then
                                node_type is not sent */
    const char *machine_id; /**< Xboard API v2 machine mode (PANEL.md §1.1): sent as
                                 `machine_id` with the machine token; NULL = node mode */
} pn_uniproxy_options;

/**
 * Create a UniProxy client.
 * @return 0, -EINVAL (missing option, err names it), -ENOMEM, -EIO (curl).
 */
int pn_uniproxy_new(const pn_uniproxy_options *opts, pn_client **out, sv_error *err);

/**
 * Judge a report answer (push / alive / status): accepted when the status is 2xx and the body
 * is a JSON object that says so — `"data": true` or `"status": "success"` (PANEL.md §1.2.1) —
 * and does not say `"status": "fail"`. Bounded by @p len (no NUL needed).
 * @return 0, or -EPROTO with err set ("HTTP 500: token is error", "HTTP 200 body is not JSON").
 */
int pn_uniproxy_check_ack(long status, const char *body, size_t len, sv_error *err);

/**
 * Parse an `alivelist` body `{"alive":{"<uid>":count,...}}` (PANEL.md §1.8).
 * @param out  malloc'ed array (NULL when empty) for the caller to free()
 * @return 0, -EINVAL (shape), -EMSGSIZE (over PN_USERS_MAX entries), -ENOMEM.
 */
int pn_uniproxy_parse_alivelist(const json_t *body, pn_alive_count **out, size_t *n,
                                sv_error *err);

/**
 * The error text of a non-2xx answer: the `message` (or `error`) of either envelope
 * (PANEL.md §1.2), else the start of the body. Writes "HTTP <status>: <text>" into @p err.
 * @return -EPROTO.
 */
int pn_uniproxy_error(long status, const char *body, size_t len, sv_error *err);

/**
 * POST @p body (taken, may be NULL: -ENOMEM) as compact JSON to @p endpoint (a static name
 * under the client's API path, e.g. "report"), with the client's auth query, answered and
 * counted as a report (pn_uniproxy_check_ack; pn_client_ops.requests names it @p endpoint).
 * @p c must be a UniProxy client. @return 0 (the callback contract of panel.h) or -ENOMEM.
 */
int pn_uniproxy_post(pn_client *c, const char *endpoint, json_t *body, pn_report_cb cb,
                     void *arg);

#endif
