/*
 * HTTP for panel clients (DESIGN.md "panel/"): libcurl's multi interface driven by a libuv loop
 * (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION on uv_poll_t / uv_timer_t), so no call
 * blocks the control loop. TLS verification stays on; every request has a total timeout, the
 * User-Agent "katana/<version>" and a bound on the response body. A POST never reuses a
 * connection, so curl never re-sends it on its own (each report is sent once per call).
 */
#ifndef PN_HTTP_H
#define PN_HTTP_H

#include <stddef.h>

#include <uv.h>

#include "supervisor/util/err.h"

#define PN_HTTP_BODY_MAX (256u << 20) /**< default bound on a response body, bytes (= PN_BODY_MAX) */
#define PN_HTTP_TIMEOUT_MS 10000L     /**< default total timeout of a request */

typedef struct pn_http pn_http;
typedef struct pn_http_req pn_http_req;

/** One request; every pointer is borrowed for the pn_http_start() call only. */
typedef struct pn_http_request {
    const char *method;        /**< "GET" or "POST" */
    const char *url;           /**< http:// or https:// (other schemes are refused by curl) */
    const char *body;          /**< POST body (sent as application/json), or NULL */
    size_t body_len;
    const char *if_none_match; /**< sent verbatim as If-None-Match, or NULL (PANEL.md §1.3) */
    long timeout_ms;           /**< total time allowed; 0 = PN_HTTP_TIMEOUT_MS */
    size_t max_body;           /**< response bound; 0 = PN_HTTP_BODY_MAX */
} pn_http_request;

/** A finished exchange; valid during the callback only. */
typedef struct pn_http_response {
    long status;              /**< HTTP status (304 included) */
    const char *body;         /**< NUL-terminated (the NUL is not counted), never NULL */
    size_t len;
    const char *etag;         /**< the ETag header value as received, or NULL */
    const char *content_type; /**< or NULL */
    pn_http_req *req;         /**< the request, for pn_http_take_body(); NULL for a copy */
} pn_http_response;

/**
 * A request ended.
 * @param rc    0 when an HTTP answer arrived (any status; resp set), else a negative error
 *              (-ETIMEDOUT, -ECONNREFUSED, -EMSGSIZE for a body over the bound, -EIO ...) with
 *              err set ("curl: Timeout was reached") and resp NULL
 */
typedef void (*pn_http_cb)(int rc, const pn_http_response *resp, const sv_error *err,
                           void *arg);

/**
 * Create an HTTP client on @p loop (control loop only).
 * @return 0, -ENOMEM, -EIO (curl could not initialise).
 */
int pn_http_new(uv_loop_t *loop, pn_http **out);

/**
 * Start a request. The callback runs exactly once, later, on the loop, unless the request is
 * cancelled or the client freed first.
 * @param out  receives a handle for pn_http_cancel() (valid until the callback runs); may be NULL
 * @return 0, -ENOMEM, -EINVAL (bad method), -EIO (curl refused the request; err set).
 */
int pn_http_start(pn_http *h, const pn_http_request *req, pn_http_cb cb, void *arg,
                  pn_http_req **out, sv_error *err);

/**
 * Take the body of @p resp during its callback, instead of copying it (a users body
 * of 250 MB held twice): the malloc'ed buffer at resp->body (NUL-terminated, resp->len bytes,
 * maybe with room after them) is the caller's to free() from now on, and resp->body stays
 * valid until then. @return the buffer, or NULL when there is none to take (an empty body,
 * taken already, or @p resp is a copy, not the request's own): copy it then.
 */
char *pn_http_take_body(const pn_http_response *resp);

/** End a request without its callback. Not after its callback ran. */
void pn_http_cancel(pn_http_req *r);

/** Number of requests in flight. */
size_t pn_http_pending(const pn_http *h);

/**
 * Free the client: every request in flight ends without its callback; the libuv handles close
 * asynchronously (the loop must run for their memory to be released). Safe from inside a
 * callback of this client. NULL-safe.
 */
void pn_http_free(pn_http *h);

#endif
