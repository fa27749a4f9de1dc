/*
 * The API's libmicrohttpd server (api/api.h): start/stop, per-request state, bearer auth (every
 * route but /healthz when a token is set; 401 {"error":"unauthorized"}), the request target
 * parsed by api_uri_parse() from the raw URI, and replies serialised to JSON.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "supervisor/util/holder.h"
#include "supervisor/util/log.h"

#define MOD "api"
#define BODY_MAX 65536u       /* request bodies are ignored, but bounded */
#define CONNECTIONS_MAX 64u
#define IDLE_TIMEOUT_S 60u

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

static bool is_healthz(const char *target)
{
    size_t n = strcspn(target, "?");
    return n == 8 && strncmp(target, "/healthz", 8) == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    api_server *s = cls;
    api_request *req = *con_cls;
    api_reply r = {0};
    if (req == NULL)
        return MHD_NO;
    if (!req->started || *upload_data_size > 0) { /* wait for the whole (ignored) body */
        req->started = true;
        req->body += *upload_data_size;
        *upload_data_size = 0;
        if (req->body <= BODY_MAX)
            return MHD_YES;
    }
    if (req->body > BODY_MAX) {
        api_reply_error(&r, 413, "request body larger than %u bytes", BODY_MAX);
        return send_reply(c, &r, false);
    }
    if (req->target == NULL) {
        api_reply_error(&r, 414, "request target longer than %d bytes", API_URI_MAX);
        return send_reply(c, &r, false);
    }
    if (s->token[0] != '\0' && !is_healthz(req->target) &&
        !api_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
                     s->token)) {
        api_reply_error(&r, 401, "unauthorized");
        return send_reply(c, &r, true);
    }
    api_uri uri;
    sv_error err = {0};
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
    s->arg = o->arg;
    if (o->token != NULL)
        strcpy(s->token, o->token);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_done, s,
                                 MHD_OPTION_CONNECTION_LIMIT, CONNECTIONS_MAX,
                                 MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S,
                                 MHD_OPTION_END);
    if (s->daemon == NULL) {
        int e = errno != 0 ? errno : EADDRINUSE;
        char who[128];
        free(s);
        if (sv_addr_held_elsewhere((struct sockaddr *)&sa, SOCK_STREAM, who, sizeof who) != 0)
            return sv_error_set(err, -EADDRINUSE, "api: cannot listen on %s: the port is held "
                                "by %s", o->listen != NULL ? o->listen : API_DEFAULT_LISTEN, who);
        return sv_error_set(err, -e, "api: cannot listen on %s: %s",
                            o->listen != NULL ? o->listen : API_DEFAULT_LISTEN, strerror(e));
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info != NULL ? info->port : 0;
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
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->daemon);
    free(s);
}
