/*
 * The API's libmicrohttpd server (api/api.h): start/stop, per-request state, bearer auth (every
 * route but the probes /healthz, /livez and /readyz when a token is set; 401
 * {"error":"unauthorized"}), the request target parsed by api_uri_parse() from the raw URI,
 * and replies serialised to JSON.
 *
 * Threads: libmicrohttpd runs on epoll in its one internal thread, without a listen
 * socket of its own. The accept thread here owns the listen socket and hands each connection
 * over with MHD_add_connection(), because libmicrohttpd, out of descriptors with no connection
 * open, retries accept() in a busy loop and logs every try. The accept thread also enforces the
 * connection limits itself (libmicrohttpd 0.9.75 can deadlock its thread when a connection handed
 * over this way meets its own global limit) and the request deadline (API_REQUEST_DEADLINE_S),
 * in a table of the open connections (api_conn) shared with libmicrohttpd's callbacks. It keeps
 * API_FD_SPARES descriptors in reserve: when accept() finds the process out of
 * descriptors (the data plane took them), it gives one up and accepts into it, so /healthz
 * answers throughout; it takes them back as soon as descriptors are free again (every
 * SPARE_RETRY_MS while short). With no spare left (or on any error of the listen socket
 * itself), this thread stops polling the listen socket (new clients wait in its backlog), tries
 * again every ACCEPT_RETRY_MS, and logs the pause and the recovery once each. It also drives the SSE pump
 * (sse.c) and reports suppressed log lines.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "supervisor/util/holder.h"
#include "supervisor/util/log.h"

#define MOD "api"
#define BODY_MAX 65536u       /* request bodies are ignored, but bounded (413 over it) */
#define LISTEN_BACKLOG 128
#define ACCEPT_BATCH 64       /* connections taken per wakeup before polling again */
#define ACCEPT_RETRY_MS 250   /* out of descriptors: try accept() again after this */
#define SPARE_RETRY_MS 100    /* short of spare descriptors: try to take them back this often */
#define SSE_STEP_MS 50        /* how often suspended streams are checked for news */
#define IDLE_POLL_MS 1000     /* the accept thread's wakeup with no stream (log flush) */
#define DEADLINE_MS ((uint64_t)API_REQUEST_DEADLINE_S * 1000u)
#define NEXT_REQUEST_MS ((uint64_t)(API_IDLE_TIMEOUT_S + API_REQUEST_DEADLINE_S) * 1000u)
#define STR_(x) #x
#define STR(x) STR_(x)
#define REFUSED_LOG_MS ((uint64_t)API_LOG_WINDOW_S * 1000u) /* refusals: one line at most per */
#define MHD_CONNECTIONS_MAX (2u * API_CONNECTIONS_MAX) /* a backstop never reached */

/* Monotonic milliseconds (CLOCK_MONOTONIC). */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Wake the accept thread through its eventfd (a stream started, a descriptor came free, stop). */
static void wake_acceptor(api_server *s)
{
    uint64_t one = 1;
    ssize_t w = write(s->wake_fd, &one, sizeof one); /* EAGAIN: already signalled */
    (void)w;
}

/* ------------------------------------------------------------------------------------------ */
/* Logging within the budget                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void report_suppressed(uint64_t n)
{
    if (n > 0)
        SV_LOG(SV_LOG_WARN, MOD, "%llu more API log lines suppressed (at most %d per %d s)",
               (unsigned long long)n, API_LOG_BURST, API_LOG_WINDOW_S);
}

/* One WARN line within the API's log budget (any thread). */
static void log_limited(api_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_limited(api_server *s, const char *fmt, ...)
{
    if (SV_LOG_WARN > sv_log_threshold)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t dropped;
    pthread_mutex_lock(&s->log_lock);
    bool ok = api_log_budget_take(&s->log_budget, now_ms(), &dropped);
    report_suppressed(dropped);
    if (ok)
        sv_log_write(SV_LOG_WARN, MOD, "%s", msg);
    pthread_mutex_unlock(&s->log_lock);
}

static void flush_log(api_server *s, uint64_t now_ms)
{
    pthread_mutex_lock(&s->log_lock);
    report_suppressed(api_log_budget_flush(&s->log_budget, now_ms));
    pthread_mutex_unlock(&s->log_lock);
}

/* MHD_OPTION_EXTERNAL_LOGGER: libmicrohttpd's messages, one line each, within the budget. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* a client that went away mid-request (or was cut at its deadline): not the server's fault,
     * and one line per connection */
    static const char gone[] = "Connection socket is closed", left[] = "Connection was closed by";
    if (strncmp(msg, gone, sizeof gone - 1) == 0 || strncmp(msg, left, sizeof left - 1) == 0)
        return;
    /* a client that closed a stream (or did not wait for its answer): libmicrohttpd's texts for
     * EPIPE and ECONNRESET, after "Failed to send ... Error: " */
    static const char failed[] = "Failed to send";
    if (strncmp(msg, failed, sizeof failed - 1) == 0 &&
        (strstr(msg, "no longer available for sending") != NULL ||
         strstr(msg, "forcibly closed by remote peer") != NULL))
        return;
    log_limited(cls, "libmicrohttpd: %s", msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Connection table: the limits and the request deadline                                       */
/* ------------------------------------------------------------------------------------------ */

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return true;
}

/*
 * Accept thread: a slot for the new connection @p fd from @p peer, due to deliver its request
 * by @p now_ms + DEADLINE_MS, or NULL when API_CONNECTIONS_MAX are open or
 * API_PER_IP_CONNECTIONS_MAX from that address. A slot that libmicrohttpd never started and
 * that holds the same descriptor number is stale (the number was closed and reused): freed.
 */
static api_conn *conn_take(api_server *s, int fd, const struct sockaddr_storage *peer,
                           uint64_t now_ms)
{
    api_conn *slot = NULL;
    int from_peer = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (size_t i = 0; i < API_CONNECTIONS_MAX; i++) {
        api_conn *c = &s->conns[i];
        if (c->fd == fd && !c->started)
            c->fd = -1;
        if (c->fd < 0) {
            if (slot == NULL)
                slot = c;
        } else if (same_host(&c->peer, peer)) {
            from_peer++;
        }
    }
    if (slot != NULL && from_peer < API_PER_IP_CONNECTIONS_MAX)
        *slot = (api_conn){.fd = fd, .peer = *peer, .deadline_ms = now_ms + DEADLINE_MS};
    else
        slot = NULL;
    pthread_mutex_unlock(&s->conn_lock);
    return slot;
}

/* Accept thread: free @p slot of @p fd, which libmicrohttpd refused (and closed) at once. */
static void conn_forget(api_server *s, api_conn *slot, int fd)
{
    pthread_mutex_lock(&s->conn_lock);
    if (slot->fd == fd && !slot->started)
        slot->fd = -1;
    pthread_mutex_unlock(&s->conn_lock);
}

/*
 * Accept thread: shut down (both ways) every started connection past its deadline; libmicrohttpd
 * then reads the end of the stream and closes it. The descriptor is still open while conn_lock
 * is held: libmicrohttpd reports NOTIFY_CLOSED (on_connection takes the lock) before it closes
 * the socket. A slot past its deadline that libmicrohttpd never started is only forgotten.
 * @return the earliest deadline still ahead (UINT64_MAX: none).
 */
static uint64_t conn_sweep(api_server *s, uint64_t now_ms)
{
    uint64_t next = UINT64_MAX;
    pthread_mutex_lock(&s->conn_lock);
    for (size_t i = 0; i < API_CONNECTIONS_MAX; i++) {
        api_conn *c = &s->conns[i];
        if (c->fd < 0 || c->cut)
            continue;
        if (c->deadline_ms > now_ms) {
            next = c->deadline_ms < next ? c->deadline_ms : next;
        } else if (!c->started) {
            c->fd = -1;
        } else {
            shutdown(c->fd, SHUT_RDWR);
            c->cut = true;
            s->late.n++;
        }
    }
    pthread_mutex_unlock(&s->conn_lock);
    return next;
}

/* MHD_OPTION_NOTIFY_CONNECTION (libmicrohttpd's thread): link a started connection to its slot
 * (in *ctx), free the slot when it closes. */
static void on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    api_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *ctx = NULL;
        if (info == NULL)
            return;
        pthread_mutex_lock(&s->conn_lock);
        for (size_t i = 0; i < API_CONNECTIONS_MAX; i++) {
            api_conn *slot = &s->conns[i];
            if (slot->fd == info->connect_fd && !slot->started) {
                slot->started = true;
                *ctx = slot;
                break;
            }
        }
        pthread_mutex_unlock(&s->conn_lock);
    } else if (*ctx != NULL) {
        api_conn *slot = *ctx;
        pthread_mutex_lock(&s->conn_lock);
        *slot = (api_conn){.fd = -1};
        pthread_mutex_unlock(&s->conn_lock);
        *ctx = NULL;
        wake_acceptor(s); /* a descriptor comes free: the accept thread takes its spares back */
    }
}

/* libmicrohttpd's thread: the deadline of connection @p c from now on (UINT64_MAX: none). */
static void conn_set_deadline(api_server *s, struct MHD_Connection *c, uint64_t deadline_ms)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    api_conn *slot = info != NULL ? info->socket_context : NULL;
    if (slot == NULL)
        return;
    pthread_mutex_lock(&s->conn_lock);
    slot->deadline_ms = deadline_ms;
    pthread_mutex_unlock(&s->conn_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Requests                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/** One request: the raw target (from the URI log callback) and how much body was seen. */
typedef struct api_request {
    char *target; /* NULL when longer than API_URI_MAX */
    size_t body;
    bool started;
} api_request;

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    api_request *req = calloc(1, sizeof *req);
    if (req != NULL && strlen(uri) <= API_URI_MAX)
        req->target = strdup(uri);
    return req;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode code)
{
    /* answered: a kept-alive connection's next request is due in time too */
    conn_set_deadline(cls, c, now_ms() + NEXT_REQUEST_MS);
    api_request *req = *con_cls;
    if (req != NULL) {
        free(req->target);
        free(req);
        *con_cls = NULL;
    }
}

static enum MHD_Result send_reply(struct MHD_Connection *c, api_reply *r, bool www_auth)
{
    struct MHD_Response *resp = r->response;
    const char *ctype = "application/json";
    if (resp == NULL && r->json != NULL) {
        char *body = json_dumps(r->json, JSON_COMPACT);
        size_t n = body != NULL ? strlen(body) : 0;
        resp = body != NULL ? MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE)
                            : NULL;
        if (resp == NULL)
            free(body);
    } else if (resp == NULL && r->text != NULL) {
        resp = MHD_create_response_from_buffer(r->text_len, r->text, MHD_RESPMEM_MUST_FREE);
        if (resp != NULL)
            r->text = NULL;
        ctype = r->content_type;
    } else if (resp == NULL) {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        ctype = NULL;
    } else {
        ctype = NULL; /* streams set their own headers */
    }
    json_decref(r->json);
    free(r->text);
    if (resp == NULL)
        return MHD_NO;
    if (ctype != NULL)
        MHD_add_response_header(resp, "Content-Type", ctype);
    if (www_auth)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, r->response != NULL ? 200 : r->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* Is @p target one of the probes a token does not guard (/healthz, /livez, /readyz)? */
static bool is_probe(const char *target)
{
    static const char *const probes[] = {"/healthz", "/livez", "/readyz"};
    size_t n = strcspn(target, "?");
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        if (n == strlen(probes[i]) && strncmp(target, probes[i], n) == 0)
            return true;
    return false;
}

typedef struct length_headers {
    const char *first;
    bool differ; /* another Content-Length with another value */
} length_headers;

static enum MHD_Result on_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    length_headers *h = cls;
    if (key == NULL || value == NULL || strcasecmp(key, "Content-Length") != 0)
        return MHD_YES;
    if (h->first == NULL)
        h->first = value;
    else if (strcmp(h->first, value) != 0)
        h->differ = true;
    return MHD_YES;
}

/*
 * The answer to a request known from its headers alone, before any of its body is read (so
 * that libmicrohttpd sends no "100 Continue" for it): 414, 401, 400 for Content-Length headers
 * that disagree (RFC 9110 §8.6: the body's length is unknown), or 413 for a Content-Length over
 * BODY_MAX. @return false when the request is to be read and routed.
 */
static bool refuse_early(api_server *s, struct MHD_Connection *c, const api_request *req,
                         api_reply *r, bool *www_auth)
{
    uint64_t length = 0;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (req->target == NULL)
        return api_reply_error(r, 414, "request target longer than %d bytes", API_URI_MAX), true;
    if (s->token[0] != '\0' && !is_probe(req->target) &&
        !api_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
                     s->token)) {
        *www_auth = true;
        return api_reply_error(r, 401, "unauthorized"), true;
    }
    length_headers lh = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, on_header, &lh);
    if (lh.differ)
        return api_reply_error(r, 400, "Content-Length headers that disagree"), true;
    /* libmicrohttpd has refused a malformed Content-Length itself */
    if (cl != NULL && (api_parse_u64(cl, &length) != 0 || length > BODY_MAX))
        return api_reply_error(r, 413, "request body larger than %u bytes", BODY_MAX), true;
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    api_server *s = cls;
    api_request *req = *con_cls;
    api_reply r = {0};
    bool www_auth = false;
    if (req == NULL)
        return MHD_NO;
    if (!req->started) { /* the headers: refuse now, or read the (ignored) body */
        req->started = true;
        if (refuse_early(s, c, req, &r, &www_auth)) {
            conn_set_deadline(s, c, UINT64_MAX);
            return send_reply(c, &r, www_auth);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a chunked body over BODY_MAX is read to its end, then 413 */
        req->body += *upload_data_size;
        *upload_data_size = 0;
        return MHD_YES;
    }
    conn_set_deadline(s, c, UINT64_MAX); /* the request is complete: answering it */
    if (req->body > BODY_MAX) {
        api_reply_error(&r, 413, "request body larger than %u bytes", BODY_MAX);
        return send_reply(c, &r, false);
    }
    api_uri uri;
    sv_error err = {0};
    r.conn = c;
    if (api_uri_parse(req->target, strlen(req->target), &uri, &err) != 0)
        api_reply_error(&r, 400, "%s", err.msg);
    else
        api_route(s, method, &uri, &r);
    return send_reply(c, &r, false);
}

static int check_options(const api_options *o, struct sockaddr_storage *sa, sv_error *err)
{
    bool loopback = false;
    const char *listen = o->listen != NULL ? o->listen : API_DEFAULT_LISTEN;
    int rc = api_listen_parse(listen, sa, &loopback, err);
    if (rc != 0)
        return rc;
    if (o->token != NULL && strlen(o->token) > API_TOKEN_MAX)
        return sv_error_set(err, -EINVAL, "api.token: longer than %d bytes", API_TOKEN_MAX);
    if (!loopback && (o->token == NULL || o->token[0] == '\0'))
        return sv_error_set(err, -EPERM, "api.listen %s is not a loopback address and "
                            "api.token is not set: refusing to serve the API unauthenticated",
                            listen);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Accept thread                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* An accept() error that concerns only the connection being accepted (accept(2), Linux). */
static bool connection_error(int e)
{
    return e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM || e == ENETDOWN ||
           e == ENOPROTOOPT || e == EHOSTDOWN || e == ENONET || e == EHOSTUNREACH ||
           e == EOPNOTSUPP || e == ENETUNREACH;
}

/* Accept thread: hold up to API_FD_SPARES descriptors in reserve (/dev/null), stopping at the
 * first that cannot be opened (the process is still out of them). */
static void spares_fill(api_server *s)
{
    while (s->n_spare < API_FD_SPARES) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return;
        s->spare[s->n_spare++] = fd;
    }
}

/* Accept thread: give up one spare descriptor, for the accept() that follows.
 * @return false when none is left. */
static bool spare_release(api_server *s)
{
    if (s->n_spare == 0)
        return false;
    close(s->spare[--s->n_spare]);
    return true;
}

/*
 * Take up to ACCEPT_BATCH pending connections and hand them to libmicrohttpd. Out of
 * descriptors, a spare is given up for the next try.
 * @return 0 (the queue is empty or the batch is done) or the errno of a failed accept() that
 *         is not about one connection: out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
 *         ENOMEM), or anything else wrong with the socket. The caller pauses on it.
 */
static int accept_some(api_server *s)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EAGAIN || e == EWOULDBLOCK)
                return 0;
            if (connection_error(e))
                continue;
            if ((e == EMFILE || e == ENFILE) && spare_release(s))
                continue;
            return e;
        }
        api_conn *slot = conn_take(s, fd, &sa, now_ms());
        if (slot == NULL) { /* at a limit: closed unanswered, counted, logged by the tick */
            close(fd);
            s->refused.n++;
            continue;
        }
        /* closes fd itself when it fails; it logs within the budget */
        if (MHD_add_connection(s->daemon, fd, (struct sockaddr *)&sa, len) != MHD_YES)
            conn_forget(s, slot, fd);
    }
    return 0;
}

/* Accept thread: one line "closed N <what>" for the connections counted in @p t since it was
 * last reported, at most one per REFUSED_LOG_MS (no log line per connection). */
static void log_tally(api_server *s, api_tally *t, uint64_t now_ms, const char *what)
{
    if (t->n == t->logged || (t->log_ms != 0 && now_ms - t->log_ms < REFUSED_LOG_MS))
        return;
    log_limited(s, "closed %llu %s", (unsigned long long)(t->n - t->logged), what);
    t->logged = t->n;
    t->log_ms = now_ms;
}

static void *accept_main(void *arg)
{
    api_server *s = arg;
    pthread_setname_np(pthread_self(), "api-accept");
    bool paused = false;
    uint64_t paused_at = 0, retry_at = 0, pumped_at = 0, next_deadline = UINT64_MAX;
    while (!atomic_load(&s->stopping)) {
        spares_fill(s);
        uint64_t now = now_ms();
        bool streams = atomic_load(&s->streams) > 0;
        uint64_t wait = streams ? SSE_STEP_MS : IDLE_POLL_MS;
        if (s->n_spare < API_FD_SPARES && wait > SPARE_RETRY_MS)
            wait = SPARE_RETRY_MS;
        if (next_deadline != UINT64_MAX)
            wait = next_deadline > now ? (next_deadline - now < wait ? next_deadline - now : wait)
                                       : 0;
        if (paused)
            wait = retry_at > now ? (retry_at - now < wait ? retry_at - now : wait) : 0;
        struct pollfd p[2] = {{.fd = s->wake_fd, .events = POLLIN},
                              {.fd = paused ? -1 : s->listen_fd, .events = POLLIN}};
        if (poll(p, 2, (int)wait) < 0 && errno != EINTR)
            log_limited(s, "poll: %s", strerror(errno));
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(s->wake_fd, &v, sizeof v);
            (void)r;
        }
        now = now_ms();
        if ((!paused && p[1].revents != 0) || (paused && now >= retry_at)) {
            int e = accept_some(s);
            if (e != 0 && !paused) {
                paused = true;
                paused_at = now;
                log_limited(s, "accept: %s: not accepting API connections (they wait in the "
                            "backlog), retrying every %d ms", strerror(e), ACCEPT_RETRY_MS);
            } else if (e == 0 && paused) {
                paused = false;
                log_limited(s, "accepting API connections again after %.1f s",
                            (double)(now - paused_at) / 1000.0);
            }
            if (paused)
                retry_at = now + ACCEPT_RETRY_MS;
        }
        if (streams && now - pumped_at >= SSE_STEP_MS) {
            api_sse_pump(s, now);
            pumped_at = now;
        }
        next_deadline = conn_sweep(s, now);
        log_tally(s, &s->refused, now, "new API connections unanswered at the connection "
                  "limits (" STR(API_CONNECTIONS_MAX) " open, "
                  STR(API_PER_IP_CONNECTIONS_MAX) " from one address)");
        log_tally(s, &s->late, now, "API connections that had not sent a full request "
                  "within " STR(API_REQUEST_DEADLINE_S) " s");
        flush_log(s, now);
    }
    return NULL;
}

static int listen_on(const struct sockaddr_storage *sa, int *out)
{
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    socklen_t len = sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (sa->ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(fd, (const struct sockaddr *)sa, len) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    *out = fd;
    return 0;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return 0;
    if (sa.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    return ntohs(((struct sockaddr_in *)&sa)->sin_port);
}

/* Free what api_server_start() set up (threads already stopped). */
static void server_free(api_server *s)
{
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    while (s->n_spare > 0)
        close(s->spare[--s->n_spare]);
    pthread_mutex_destroy(&s->stream_lock);
    pthread_mutex_destroy(&s->log_lock);
    pthread_mutex_destroy(&s->conn_lock);
    free(s);
}

int api_server_start(const api_options *o, api_server **out, sv_error *err)
{
    struct sockaddr_storage sa;
    *out = NULL;
    int rc = check_options(o, &sa, err);
    if (rc != 0)
        return rc;
    api_server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    s->sv = o->sv;
    s->nodes = o->nodes;
    s->sync = o->sync;
    s->usage = o->usage;
    s->requests = o->requests;
    s->audit = o->audit;
    s->arg = o->arg;
    s->now_ms = now_ms;
    s->wake = wake_acceptor;
    if (o->token != NULL)
        strcpy(s->token, o->token);
    s->listen_fd = -1;
    pthread_mutex_init(&s->stream_lock, NULL);
    pthread_mutex_init(&s->log_lock, NULL);
    pthread_mutex_init(&s->conn_lock, NULL);
    for (size_t i = 0; i < API_CONNECTIONS_MAX; i++)
        s->conns[i].fd = -1;
    sv_list_init(&s->stream_list);
    const char *listen = o->listen != NULL ? o->listen : API_DEFAULT_LISTEN;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        rc = -errno;
        server_free(s);
        return sv_error_set(err, rc, "api: eventfd: %s", strerror(-rc));
    }
    rc = listen_on(&sa, &s->listen_fd);
    if (rc != 0) {
        char who[128];
        server_free(s);
        if (rc == -EADDRINUSE &&
            sv_addr_held_elsewhere((struct sockaddr *)&sa, SOCK_STREAM, who, sizeof who) != 0)
            return sv_error_set(err, rc, "api: cannot listen on %s: the port is held by %s",
                                listen, who);
        return sv_error_set(err, rc, "api: cannot listen on %s: %s", listen, strerror(-rc));
    }
    s->port = bound_port(s->listen_fd);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_done, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 /* the limits are the accept thread's (conn_take) */
                                 MHD_OPTION_CONNECTION_LIMIT, MHD_CONNECTIONS_MAX,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_IDLE_TIMEOUT_S,
                                 MHD_OPTION_END);
    if (s->daemon == NULL) {
        rc = errno != 0 ? -errno : -ENOMEM;
        server_free(s);
        return sv_error_set(err, rc, "api: libmicrohttpd did not start: %s", strerror(-rc));
    }
    spares_fill(s);
    rc = -pthread_create(&s->acceptor, NULL, accept_main, s);
    if (rc != 0) {
        MHD_stop_daemon(s->daemon);
        server_free(s);
        return sv_error_set(err, rc, "api: cannot start the accept thread: %s", strerror(-rc));
    }
    *out = s;
    return 0;
}

uint16_t api_server_port(const api_server *s)
{
    return s->port;
}

void api_server_stop(api_server *s)
{
    if (s == NULL)
        return;
    api_sse_stop(s); /* sets stopping: the accept thread ends, streams end */
    wake_acceptor(s);
    pthread_join(s->acceptor, NULL);
    MHD_stop_daemon(s->daemon);
    flush_log(s, UINT64_MAX);
    server_free(s);
}
