/*
 * katana operator REST API (DESIGN.md "api/", "Threads and loops"; seed 003, "REST
 * API"): a libmicrohttpd server in two threads of its own: libmicrohttpd's epoll
 * thread serves every connection, and an accept thread takes connections (pausing while the
 * process is out of descriptors) and wakes suspended SSE streams. Reads come from the supervisor's published
 * snapshots and flow registry (sv_flows, sv_sessions, sv_stats_get, sv_events_next, ...);
 * kills and closes use the supervisor's any-thread entry points; node status, sync requests,
 * per node usage and panel request counters go through callbacks the agent provides (which read
 * snapshots the control loop publishes under a mutex). The API depends on supervisor/ only.
 *
 * Routes (JSON; byte counts are integers; times RFC 3339 UTC):
 *   GET /healthz, GET /metrics, GET /v1/nodes, GET /v1/nodes/{tag}, POST /v1/nodes/{tag}/sync,
 *   GET|DELETE /v1/connections, DELETE /v1/connections/{flow}, GET /v1/connections/events,
 *   DELETE /v1/sessions, GET /v1/traffic, GET /v1/usage, GET /v1/audit.
 */
#ifndef API_API_H
#define API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "supervisor/supervisor.h"

#define API_DEFAULT_LISTEN "127.0.0.1:9090"
#define API_TOKEN_MAX 256      /**< bytes in api.token */
#define API_URI_MAX 2048       /**< bytes in a request target (longer: 414) */
#define API_QUERY_MAX 16       /**< query parameters in one request */
#define API_QUERY_KEY_MAX 32   /**< bytes in a decoded query key */
#define API_QUERY_VALUE_MAX 256 /**< bytes in a decoded query value */
#define API_PATH_SEGMENTS_MAX 8 /**< path segments */
#define API_SEGMENT_MAX 128    /**< bytes in a decoded path segment */
/**
 * Live SSE streams at a time. A stream holds a connection slot but no thread: it is
 * suspended while it has nothing to send. One more is answered 503 {"error":"too many streams"}.
 */
#define API_SSE_STREAMS_MAX 256
/**
 * Open API connections at a time, streams included: each costs one descriptor and at
 * most libmicrohttpd's 32 KiB connection pool. Beyond it a new connection is closed unanswered.
 */
#define API_CONNECTIONS_MAX 512
/** Open API connections from one IP address; beyond it, closed unanswered. */
#define API_PER_IP_CONNECTIONS_MAX 64
/**
 * Seconds a new connection has to deliver its whole first request (headers and body) before it
 * is closed unanswered, however steadily it trickles bytes (a short timeout for
 * connections that have not sent a full request). On a kept-alive connection the next request
 * must be complete within API_IDLE_TIMEOUT_S + API_REQUEST_DEADLINE_S of the previous answer.
 */
#define API_REQUEST_DEADLINE_S 5
/**
 * Seconds a connection may stay silent (no request bytes in, no response bytes out) before it is
 * closed: an idle kept-alive connection, a stream whose client stopped reading (an
 * unfinished request meets API_REQUEST_DEADLINE_S first). Streams send a comment every
 * API_SSE_KEEPALIVE_S, and a suspended stream does not time out.
 */
#define API_IDLE_TIMEOUT_S 10
/** Seconds between ": keepalive" comments on a stream that has nothing else to send. */
#define API_SSE_KEEPALIVE_S 5
/** Lines the API logs (its own and libmicrohttpd's) per API_LOG_WINDOW_S; more are counted. */
#define API_LOG_BURST 5
/** The window of API_LOG_BURST, seconds (never a log line in a loop). */
#define API_LOG_WINDOW_S 60

/* ------------------------------------------------------------------------------------------ */
/* Node status (filled by the agent)                                                           */
/* ------------------------------------------------------------------------------------------ */

/** One node as the agent knows it; plain data, copied out under the agent's lock. */
typedef struct api_node_status {
    char tag[SV_TAG_MAX + 1];
    char panel_type[16];       /**< "local", "uniproxy" */
    char panel_url[256];       /**< where the panel is, never a token or key ("" = inline) */
    uint64_t last_pull_ms;     /**< wall clock ms of the last fetch end; 0 = never */
    int last_pull_status;      /**< 0 or a negative error */
    char last_pull_error[160]; /**< "" when the last pull succeeded */
    uint64_t last_push_ms;     /**< end of the last usage push; 0 = never */
    int last_push_status;
    char last_push_error[160];
    bool applied;              /**< a spec holding this node runs */
    uint64_t applied_ms;       /**< when it was last applied */
    uint64_t epoch;            /**< plane epoch after that apply */
    uint64_t users;            /**< users of the node's running user list */
    char last_apply_error[160]; /**< why the last load holding the node was refused, or "" */
    uint64_t applies;          /**< successful applies (incl. users-only edits) with this node */
    uint64_t apply_errors;     /**< refused loads that included this node */
    uint64_t outbox_pending_bytes; /**< up+down in the outbox not yet acknowledged by the panel */
    uint64_t outbox_oldest_ms; /**< wall clock of the oldest pending report; 0 = none */
    uint64_t audit_recorded;   /**< audit hits written to the outbox since start:
                                    each (user, rule) once per report period */
    uint64_t audit_pending;    /**< audit hits in the outbox, this report period */
    uint64_t audit_reported;   /**< audit hits the panel took as its detect log since start */
    uint64_t usage_dropped_users; /**< users whose pending usage was dropped since start: the
                                       panel no longer had them when it failed a push */
    uint64_t usage_dropped_bytes; /**< their up+down */
    int64_t cert_not_after;    /**< when the certificate the node serves ends, Unix seconds;
                                    0 = none of its own (plain, REALITY) or not applied */
} api_node_status;

/**
 * Copy the status of every node (any thread: the API calls it from its own threads).
 * @param out  receives a malloc'ed array the API frees with free()
 * @return the count, or a negative error.
 */
typedef long (*api_nodes_fn)(void *arg, api_node_status **out);

/**
 * Ask the control loop to pull node @p tag from its panel now (any thread; must not block).
 * @return 0 when queued, -ENOENT for an unknown tag, another negative error otherwise.
 */
typedef int (*api_sync_fn)(void *arg, const char *tag);

/**
 * One user's usage as billed through one node (GET /v1/usage). "Unreported" is every byte the
 * panel has not yet acknowledged: rows of the SQLite outbox not yet deleted after a 2xx push
 * (open rows and batches in flight), bytes taken from the supervisor but not yet written (a store
 * error), and bytes the supervisor counted but the uplink has not taken yet (up to one flush
 * interval).
 */
typedef struct api_usage_row {
    char node[SV_TAG_MAX + 1];  /**< the node whose pushes bill this user */
    uint64_t user;              /**< panel user id */
    uint64_t up, down;          /**< wire bytes since this process started */
    uint64_t unreported_up, unreported_down;
} api_usage_row;

/**
 * Copy the per node, per user usage (any thread; from snapshots the control loop publishes).
 * @param out  malloc'ed array (sorted by node, then user) the API frees with free()
 * @return the count (0 when no node reports usage or nothing is counted or pending yet; the
 *         API then answers "unreported": null), or a negative error.
 */
typedef long (*api_usage_fn)(void *arg, api_usage_row **out);

/** One audit hit of the current report period (GET /v1/audit). */
typedef struct api_audit_row {
    char node[SV_TAG_MAX + 1];
    uint64_t user;
    int64_t rule;      /**< the panel's rule id */
    uint64_t first_ms; /**< wall clock of the first hit of the period */
    bool reporting;    /**< part of a detect log report in flight (or one that failed) */
} api_audit_row;

/**
 * Copy the audit hits not yet taken by the panel (any thread; from the published snapshot).
 * @param out  malloc'ed array (sorted by node, user, rule) the API frees with free()
 * @return the count or a negative error.
 */
typedef long (*api_audit_fn)(void *arg, api_audit_row **out);

/** Finished panel requests of one node, endpoint and HTTP status (0 = no answer). */
typedef struct api_panel_requests {
    char node[SV_TAG_MAX + 1];
    char endpoint[16];  /**< "config", "user", "push", "alive", "alivelist", "status" */
    long status;
    uint64_t count;     /**< since start */
} api_panel_requests;

/**
 * Copy the panel request counters (any thread).
 * @param out  malloc'ed array the API frees with free()
 * @return the count or a negative error.
 */
typedef long (*api_requests_fn)(void *arg, api_panel_requests **out);

/* ------------------------------------------------------------------------------------------ */
/* Server                                                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct api_options {
    const char *listen;   /**< "ip:port" or "[ipv6]:port"; NULL = API_DEFAULT_LISTEN */
    const char *token;    /**< bearer token, NULL/"" = none (then listen must be loopback) */
    sv_supervisor *sv;    /**< borrowed; must outlive the server */
    api_nodes_fn nodes;   /**< may be NULL (no nodes) */
    api_sync_fn sync;     /**< may be NULL (sync answers 503) */
    api_usage_fn usage;   /**< may be NULL ("unreported" is null) */
    api_requests_fn requests; /**< may be NULL (no panel request counters) */
    api_audit_fn audit;   /**< may be NULL (no audit hits listed) */
    void *arg;            /**< for nodes, sync, usage, requests and audit */
} api_options;

typedef struct api_server api_server;

/**
 * Parse and check @p opts, bind and start serving: libmicrohttpd on epoll in one thread (no
 * thread per connection, descriptors >= 1024 are fine) and the accept thread. Limits: the
 * API_CONNECTIONS_MAX, API_PER_IP_CONNECTIONS_MAX, API_IDLE_TIMEOUT_S and API_SSE_STREAMS_MAX
 * above. When accept() fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) the accept
 * thread stops accepting, retries every 250 ms and logs the pause and the recovery once each;
 * libmicrohttpd's messages go to the log within the API_LOG_BURST budget.
 * @return 0; -EINVAL (bad listen, err: "api.listen: ..."); -EPERM when listen is not a loopback
 *         address and no token is set (err says so, nothing is bound); -EADDRINUSE or another
 *         bind error; -ENOMEM; another negative errno when a thread or libmicrohttpd cannot
 *         start.
 */
int api_server_start(const api_options *opts, api_server **out, sv_error *err);

/** Port the server listens on (useful with port 0). */
uint16_t api_server_port(const api_server *s);

/**
 * End every stream, stop the threads and free the server. Blocks until both threads are gone
 * (streams end at once: suspended ones are resumed to finish). NULL-safe.
 */
void api_server_stop(api_server *s);

/* ------------------------------------------------------------------------------------------ */
/* Pure helpers (api/query.c, api/logbudget.c), exposed for tests and fuzzing                 */
/* ------------------------------------------------------------------------------------------ */

/** A parsed request target: decoded path segments and query parameters, heap-free. */
typedef struct api_uri {
    size_t n_segments;
    char segments[API_PATH_SEGMENTS_MAX][API_SEGMENT_MAX + 1];
    size_t n_params;
    struct {
        char key[API_QUERY_KEY_MAX + 1];
        char value[API_QUERY_VALUE_MAX + 1];
    } params[API_QUERY_MAX];
} api_uri;

/**
 * Parse an origin-form request target ("/v1/connections?user=3&node=a%20b") of at most
 * API_URI_MAX bytes. Percent escapes are decoded (and '+' in the query is a space); empty
 * path segments are dropped; a decoded NUL, a malformed escape, a repeated key, or anything over
 * the limits above is an error.
 * @return 0 or -EINVAL with err->msg ("query: key \"x\" repeated", "path: too many segments").
 */
int api_uri_parse(const char *target, size_t len, api_uri *out, sv_error *err);

/**
 * Check that every query key of @p uri is in @p allowed (NULL-terminated).
 * @return 0 or -EINVAL with err->msg "unknown query key \"x\"".
 */
int api_uri_check_keys(const api_uri *uri, const char *const *allowed, sv_error *err);

/** The value of query key @p key, or NULL. */
const char *api_uri_param(const api_uri *uri, const char *key);

/**
 * A decimal unsigned 64-bit integer without sign, spaces or leading '+'.
 * @return 0 or -EINVAL (empty, non-digit, overflow).
 */
int api_parse_u64(const char *s, uint64_t *out);

/**
 * Parse a listen address "ip:port" / "[ipv6]:port" (IP literals only, port 1..65535).
 * @param sa  receives the socket address (may be NULL to only check)
 * @param loopback  receives whether the address is loopback (127.0.0.0/8, ::1)
 * @return 0 or -EINVAL with err->msg naming the problem.
 */
int api_listen_parse(const char *text, struct sockaddr_storage *sa, bool *loopback,
                     sv_error *err);

/**
 * Compare the Authorization header value with "Bearer <token>" in time independent of where
 * they differ (it depends only on the lengths of @p header's token part and @p token).
 * @return true when they match; false for NULL, another scheme or another token.
 */
bool api_auth_ok(const char *header, const char *token);

/** A log budget: API_LOG_BURST lines per window of API_LOG_WINDOW_S; the rest are counted. */
typedef struct api_log_budget {
    bool open;           /**< a window is running */
    uint64_t start_ms;   /**< when it began (monotonic ms) */
    unsigned used;       /**< lines written in it */
    uint64_t suppressed; /**< lines dropped in it */
} api_log_budget;

/**
 * Whether one more line may be written at @p now_ms (monotonic milliseconds). A line arriving
 * after the window ended opens a new one.
 * @param suppressed  receives the lines dropped in a window that this call ended (0 if none):
 *                    the caller reports them before its line
 * @return true to write the line; false when it is dropped (and counted).
 */
bool api_log_budget_take(api_log_budget *b, uint64_t now_ms, uint64_t *suppressed);

/**
 * End the window if it is over at @p now_ms (called periodically, so that the count of a burst
 * is reported even when nothing else is logged afterwards).
 * @return the lines the ended window dropped; 0 when it is still running or dropped nothing.
 */
uint64_t api_log_budget_flush(api_log_budget *b, uint64_t now_ms);

/**
 * Format wall-clock milliseconds as RFC 3339 UTC with milliseconds ("2024-05-01T12:00:00.123Z");
 * times after 9999-12-31T23:59:59.999Z are written as that.
 * @param buf  at least 25 bytes (a shorter @p cap truncates, NUL-terminated)
 */
void api_time_rfc3339(uint64_t ms, char *buf, size_t cap);

#endif
