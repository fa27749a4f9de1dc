/*
 * Internals shared by the API's files: the server state, one reply, JSON builders (json.c),
 * route handlers (routes.c), SSE streams (sse.c) and the metrics page (metrics.c).
 */
#ifndef API_API_INTERNAL_H
#define API_API_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <stdatomic.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api/api.h"
#include "supervisor/util/list.h"

/**
 * One API connection as the accept thread tracks it: katana enforces the connection
 * limits and the request deadline itself, so libmicrohttpd never reaches its own limit paths.
 * Slots are guarded by api_server.conn_lock; a slot is free when fd < 0.
 */
typedef struct api_conn {
    int fd;                        /* -1: free */
    struct sockaddr_storage peer;  /* the client's address (per-IP limit) */
    uint64_t deadline_ms;          /* close it unanswered after this; UINT64_MAX: none */
    bool started;                  /* libmicrohttpd owns it (NOTIFY_STARTED seen) */
    bool cut;                      /* shut down at its deadline; libmicrohttpd closes it */
} api_conn;

/** Accept thread: a count of closed connections, logged at most once per API_LOG_WINDOW_S. */
typedef struct api_tally {
    uint64_t n;       /* so far */
    uint64_t logged;  /* of which already reported */
    uint64_t log_ms;  /* when last reported (0: never) */
} api_tally;

#define API_FD_SPARES 4 /* descriptors the API keeps in reserve for accept() */

struct api_server {
    struct MHD_Daemon *daemon;
    int listen_fd;        /* ours: the accept thread hands connections to libmicrohttpd */
    int wake_fd;          /* eventfd: wakes the accept thread (a new stream, stop) */
    pthread_t acceptor;
    pthread_mutex_t log_lock; /* guards log_budget */
    api_log_budget log_budget;
    sv_supervisor *sv;
    api_nodes_fn nodes;
    api_sync_fn sync;
    api_usage_fn usage;
    api_requests_fn requests;
    api_audit_fn audit;
    void *arg;
    /* server.c's clock and wake-up, for the stream code (sse.c calls nothing of server.c) */
    uint64_t (*now_ms)(void);    /* monotonic milliseconds */
    void (*wake)(api_server *s); /* wake the accept thread: a stream started, pump from now on */
    char token[API_TOKEN_MAX + 1]; /* "" = no token */
    uint16_t port;
    atomic_bool stopping; /* streams end when set (under stream_lock) */
    atomic_int streams;   /* live SSE streams */
    atomic_int traffic_streams; /* of which /v1/traffic (the pump reads the tick for them) */
    pthread_mutex_t stream_lock; /* guards stream_list and each stream's suspended flag */
    sv_list stream_list;  /* every live stream (sse.c) */
    pthread_mutex_t conn_lock; /* guards conns: taken by the accept thread and in callbacks */
    api_conn conns[API_CONNECTIONS_MAX];
    api_tally refused;         /* accept thread: new connections closed at the limits */
    api_tally late;            /* accept thread: connections cut at their request deadline */
    /* descriptors held in reserve (/dev/null) by the accept thread; one is given up
     * when accept() finds the process out of descriptors, so /healthz answers meanwhile */
    int spare[API_FD_SPARES];
    unsigned n_spare;
};

/** What a handler answers: a status and either a JSON value, a text body or a response. */
typedef struct api_reply {
    unsigned status;
    json_t *json;                  /* owned; serialised by the server */
    char *text;                    /* owned malloc'ed text body (metrics) */
    size_t text_len;
    const char *content_type;      /* for text */
    struct MHD_Response *response; /* a ready response (SSE streams) */
    struct MHD_Connection *conn;   /* the request's connection (a stream suspends it) */
    bool head;                     /* HEAD: answered like GET, libmicrohttpd drops the body */
} api_reply;

/** Set an error reply {"error": msg} with @p status. @return 0. */
int api_reply_error(api_reply *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * A JSON text written directly (json.c), for the bodies that grow with the live flows
 * (GET /v1/connections at 10 000 flows, where building jansson values per flow cost 10 times the
 * goal). Start zeroed; appends grow the buffer; after an allocation failure every append is a
 * no-op and @c oom stays set.
 */
typedef struct api_jw {
    char *buf;
    size_t len, cap;
    bool oom;
} api_jw;

/** Append @p n bytes of JSON text as they are. */
void api_jw_raw(api_jw *w, const char *text, size_t n);

/**
 * Append a flow object: id, session, node, inbound, user ({uid, label} or null), source,
 * destination, sniffed_host (or null), network, outbound, rule (or null), epoch, killed (seed
 * 003 FlowEntry::killed), start (RFC 3339 or null), up, down (README "Operate a node"). Strings are escaped (RFC 8259 §7); bytes that are
 * not well-formed UTF-8 become U+FFFD; integers above INT64_MAX are clamped.
 */
void api_jw_flow(api_jw *w, const sv_flow_info *f);

/** Append a session object: id, node, inbound, source, user (id or null), network, start, up,
 * down (same rules as api_jw_flow()). */
void api_jw_session(api_jw *w, const sv_session_info *s);

/**
 * Finish: @return the NUL-terminated text (the caller frees it) and its length in @p len, or
 * NULL (the writer ran out of memory; the buffer is freed). The writer is zeroed either way.
 */
char *api_jw_take(api_jw *w, size_t *len);

/* json.c: every builder returns a new reference or NULL on allocation failure. */
/** A stats snapshot: tick, interval_ms, total, inbounds and outbounds ({tag, ...}), users
 *  ({user, label, ...}: seed 003 UserStats). */
json_t *api_json_stats(const sv_stats *st);
json_t *api_json_node(const api_node_status *n, long sessions, long flows);
json_t *api_json_time(uint64_t ms); /* RFC 3339 string, or null for 0 */

/* routes.c */
void api_route(api_server *s, const char *method, const api_uri *uri, api_reply *r);

/* sse.c: a streaming response on connection @p c for the events / traffic stream, or NULL
 * (API_SSE_STREAMS_MAX reached, or ENOMEM: the caller answers 503). */
struct MHD_Response *api_sse_events(api_server *s, struct MHD_Connection *c);
struct MHD_Response *api_sse_traffic(api_server *s, struct MHD_Connection *c);

/* sse.c, accept thread: resume the suspended streams that have something to send at @p now_ms
 * (a new event, a new tick, a keepalive due). */
void api_sse_pump(api_server *s, uint64_t now_ms);

/* sse.c: set s->stopping and resume every suspended stream so that it ends (before
 * MHD_stop_daemon, which must not meet a suspended connection). */
void api_sse_stop(api_server *s);

/* metrics.c: the Prometheus text page, with the node statuses @p nodes (@p n_nodes of them,
 * the caller's: routes.c gives api_node_list()'s) in its per-node families. @return 0 (*out
 * malloc'ed, the caller frees it) or -ENOMEM. */
int api_metrics_render(api_server *s, const api_node_status *nodes, long n_nodes, char **out,
                       size_t *len);

/* Node statuses from the agent's callback (count >= 0, *out malloc'ed or NULL). */
long api_node_list(api_server *s, api_node_status **out);

#endif
