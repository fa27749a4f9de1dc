/*
 * Route handlers of the REST API (api/api.h; seed 003 "REST API": connections sorted
 * by id, DELETE /v1/connections/{flow} is kill (204, else 404 "no live flow <id>"), the selector
 * DELETE is kill_where over the given fields with {"closed": n}, unknown query keys are 400).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

int api_reply_error(api_reply *r, unsigned status, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->status = status;
    json_decref(r->json);
    r->json = json_pack("{s:s}", "error", msg);
    return 0;
}

static void reply_json(api_reply *r, unsigned status, json_t *v)
{
    if (v == NULL) {
        api_reply_error(r, 500, "out of memory");
        return;
    }
    r->status = status;
    r->json = v;
}

long api_node_list(api_server *s, api_node_status **out)
{
    *out = NULL;
    if (s->nodes == NULL)
        return 0;
    long n = s->nodes(s->arg, out);
    if (n < 0)
        *out = NULL;
    return n;
}

/* GET /metrics: the page over the agent's node statuses. */
static void metrics(api_server *s, api_reply *r)
{
    api_node_status *nodes = NULL;
    long n = api_node_list(s, &nodes);
    int rc = api_metrics_render(s, nodes, n < 0 ? 0 : n, &r->text, &r->text_len);
    free(nodes);
    if (rc != 0) {
        api_reply_error(r, 500, "out of memory");
        return;
    }
    r->status = 200;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ------------------------------------------------------------------------------------------ */
/* Selectors                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/** The fields a request selects on; NULL / false = any. node and inbound are both inbound
 * tags. */
typedef struct selection {
    const char *inbound, *node, *outbound;
    bool has_user, has_session;
    uint64_t user, session;
} selection;

static int selection_parse(const api_uri *uri, const char *const *keys, selection *sel,
                           api_reply *r)
{
    sv_error err = {0};
    memset(sel, 0, sizeof *sel);
    if (api_uri_check_keys(uri, keys, &err) != 0)
        return api_reply_error(r, 400, "%s", err.msg), -EINVAL;
    sel->inbound = api_uri_param(uri, "inbound");
    sel->node = api_uri_param(uri, "node");
    sel->outbound = api_uri_param(uri, "outbound");
    const char *user = api_uri_param(uri, "user");
    if (user != NULL) {
        if (api_parse_u64(user, &sel->user) != 0)
            return api_reply_error(r, 400, "user: expected a user id"), -EINVAL;
        sel->has_user = true;
    }
    const char *session = api_uri_param(uri, "session");
    if (session != NULL) {
        if (api_parse_u64(session, &sel->session) != 0)
            return api_reply_error(r, 400, "session: expected a session id"), -EINVAL;
        sel->has_session = true;
    }
    return 0;
}

/* Outbound "tag" matches "tag@vN"; "tag@vN" matches exactly. */
static bool outbound_matches(const char *want, const char *have)
{
    size_t n = strlen(want);
    return strncmp(want, have, n) == 0 && (have[n] == '\0' || (have[n] == '@' && !strchr(want, '@')));
}

static bool flow_selected(const selection *s, const sv_flow_info *f)
{
    return (s->inbound == NULL || strcmp(s->inbound, f->inbound) == 0) &&
           (s->node == NULL || strcmp(s->node, f->inbound) == 0) &&
           (s->outbound == NULL || outbound_matches(s->outbound, f->outbound)) &&
           (!s->has_user || (f->has_user && f->user == s->user)) &&
           (!s->has_session || s->session == f->session);
}

static bool session_selected(const selection *s, const sv_session_info *x)
{
    return (s->inbound == NULL || strcmp(s->inbound, x->inbound) == 0) &&
           (s->node == NULL || strcmp(s->node, x->inbound) == 0) &&
           (!s->has_user || (x->has_user && x->user == s->user));
}

/* ------------------------------------------------------------------------------------------ */
/* /v1/connections, /v1/sessions                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The body is written directly (api_jw): at 10 000 flows a jansson value per flow cost about
 * ten times the goal of 50 ms. */
static void connections_get(api_server *s, const api_uri *uri, api_reply *r)
{
    static const char *const keys[] = {"node", "user", "inbound", "outbound", NULL};
    selection sel;
    sv_flow_info *flows = NULL;
    sv_session_info *sessions = NULL;
    if (selection_parse(uri, keys, &sel, r) != 0)
        return;
    long nf = sv_flows(s->sv, &flows), ns = sv_sessions(s->sv, &sessions);
    api_jw w = {0};
    bool first = true;
    static const char open_body[] = "{\"sessions\":[", between[] = "],\"flows\":[";
    api_jw_raw(&w, open_body, sizeof open_body - 1);
    for (long i = 0; i < ns; i++)
        if (session_selected(&sel, &sessions[i])) {
            if (!first)
                api_jw_raw(&w, ",", 1);
            api_jw_session(&w, &sessions[i]);
            first = false;
        }
    api_jw_raw(&w, between, sizeof between - 1);
    first = true;
    for (long i = 0; i < nf; i++)
        if (flow_selected(&sel, &flows[i])) {
            if (!first)
                api_jw_raw(&w, ",", 1);
            api_jw_flow(&w, &flows[i]);
            first = false;
        }
    api_jw_raw(&w, "]}", 2);
    free(flows);
    free(sessions);
    size_t len;
    char *body = api_jw_take(&w, &len);
    if (nf < 0 || ns < 0 || body == NULL) {
        free(body);
        api_reply_error(r, 500, "out of memory");
        return;
    }
    r->status = 200;
    r->text = body;
    r->text_len = len;
    r->content_type = "application/json";
}

/* Kill the selected flows (sv_kill_where). */
static void connections_delete(api_server *s, const api_uri *uri, api_reply *r)
{
    static const char *const keys[] = {"outbound", "inbound", "session", "user", "node", NULL};
    selection sel;
    if (selection_parse(uri, keys, &sel, r) != 0)
        return;
    if (sel.node != NULL && sel.inbound != NULL && strcmp(sel.node, sel.inbound) != 0) {
        reply_json(r, 200, json_pack("{s:i}", "closed", 0));
        return;
    }
    sv_flow_filter f = {.inbound = sel.inbound != NULL ? sel.inbound : sel.node,
                        .outbound = sel.outbound, .has_user = sel.has_user, .user = sel.user,
                        .has_session = sel.has_session, .session = sel.session};
    size_t closed = sv_kill_where(s->sv, &f);
    reply_json(r, 200, json_pack("{s:I}", "closed", (json_int_t)closed));
}

static void connection_delete_one(api_server *s, const char *id_text, api_reply *r)
{
    uint64_t id;
    if (api_parse_u64(id_text, &id) != 0) {
        api_reply_error(r, 400, "not a flow id: %.64s", id_text);
        return;
    }
    if (sv_kill(s->sv, id) != 0) {
        api_reply_error(r, 404, "no live flow %" PRIu64, id);
        return;
    }
    r->status = 204;
}

/* Close whole sessions (the supervisor's close): every selected live session by id. */
static void sessions_delete(api_server *s, const api_uri *uri, api_reply *r)
{
    static const char *const keys[] = {"user", "node", "inbound", NULL};
    selection sel;
    size_t closed = 0;
    if (selection_parse(uri, keys, &sel, r) != 0)
        return;
    if (!sel.has_user && sel.node == NULL && sel.inbound == NULL) {
        sv_selector all = {.kind = SV_SELECT_ALL};
        closed = sv_close(s->sv, &all);
    } else {
        sv_session_info *v = NULL;
        long n = sv_sessions(s->sv, &v);
        if (n < 0) {
            api_reply_error(r, 500, "out of memory");
            return;
        }
        for (long i = 0; i < n; i++) {
            sv_selector one = {.kind = SV_SELECT_SESSION, .session = v[i].id};
            if (session_selected(&sel, &v[i]))
                closed += sv_close(s->sv, &one);
        }
        free(v);
    }
    reply_json(r, 200, json_pack("{s:I}", "closed", (json_int_t)closed));
}

/* ------------------------------------------------------------------------------------------ */
/* /v1/nodes, /v1/usage, probes                                                                 */
/* ------------------------------------------------------------------------------------------ */

static long count_inbound_flows(const sv_flow_info *v, long n, const char *tag)
{
    long c = 0;
    for (long i = 0; i < n; i++)
        c += strcmp(v[i].inbound, tag) == 0;
    return c;
}

static long count_inbound_sessions(const sv_session_info *v, long n, const char *tag)
{
    long c = 0;
    for (long i = 0; i < n; i++)
        c += strcmp(v[i].inbound, tag) == 0;
    return c;
}

/* GET /v1/nodes (tag NULL) or /v1/nodes/{tag}. */
static void nodes_get(api_server *s, const char *tag, api_reply *r)
{
    api_node_status *nodes = NULL;
    sv_flow_info *flows = NULL;
    sv_session_info *sessions = NULL;
    long n = api_node_list(s, &nodes);
    long nf = sv_flows(s->sv, &flows), ns = sv_sessions(s->sv, &sessions);
    json_t *arr = json_array();
    for (long i = 0; n > 0 && arr != NULL && i < n; i++) {
        if (tag != NULL && strcmp(tag, nodes[i].tag) != 0)
            continue;
        json_t *o = api_json_node(&nodes[i], count_inbound_sessions(sessions, ns, nodes[i].tag),
                                  count_inbound_flows(flows, nf, nodes[i].tag));
        if (json_array_append_new(arr, o) != 0)
            json_decref(arr), arr = NULL;
    }
    free(nodes);
    free(flows);
    free(sessions);
    if (n < 0 || arr == NULL) {
        json_decref(arr);
        api_reply_error(r, 500, "node status unavailable");
    } else if (tag == NULL) {
        reply_json(r, 200, json_pack("{s:o}", "nodes", arr));
    } else if (json_array_size(arr) == 0) {
        json_decref(arr);
        api_reply_error(r, 404, "no node %s", tag);
    } else {
        reply_json(r, 200, json_incref(json_array_get(arr, 0)));
        json_decref(arr);
    }
}

static void node_sync(api_server *s, const char *tag, api_reply *r)
{
    int rc = s->sync != NULL ? s->sync(s->arg, tag) : -ENOTSUP;
    if (rc == -ENOENT)
        api_reply_error(r, 404, "no node %s", tag);
    else if (rc != 0)
        api_reply_error(r, 503, "sync unavailable: %s", strerror(-rc));
    else
        reply_json(r, 202, json_pack("{s:s, s:b}", "node", tag, "queued", 1));
}

/* {"node": tag, "users": [{"user", "up", "down", "unreported": {"up", "down"}}]} per node. */
static json_t *usage_nodes(const api_usage_row *v, long n, uint64_t *un_up, uint64_t *un_down)
{
    json_t *nodes = json_array(), *users = NULL;
    for (long i = 0; nodes != NULL && i < n; i++) {
        if (i == 0 || strcmp(v[i].node, v[i - 1].node) != 0) {
            users = json_array();
            if (json_array_append_new(nodes, json_pack("{s:s, s:o}", "node", v[i].node,
                                                       "users", users)) != 0)
                goto oom;
        }
        *un_up += v[i].unreported_up;
        *un_down += v[i].unreported_down;
        if (json_array_append_new(users, json_pack("{s:I, s:I, s:I, s:{s:I, s:I}}",
                "user", (json_int_t)v[i].user, "up", (json_int_t)v[i].up,
                "down", (json_int_t)v[i].down, "unreported", "up",
                (json_int_t)v[i].unreported_up, "down", (json_int_t)v[i].unreported_down)) != 0)
            goto oom;
    }
    return nodes;
oom:
    json_decref(nodes);
    return NULL;
}

/* GET /v1/usage: per user totals ("users"), per node per user totals and unreported bytes
 * ("nodes", from the agent), and the sum of what is unreported (null without a reporting node). */
static void usage_get(api_server *s, api_reply *r)
{
    sv_usage *u = NULL;
    api_usage_row *rows = NULL;
    long n = sv_usage_snapshot(s->sv, &u);
    long nr = s->usage != NULL ? s->usage(s->arg, &rows) : 0;
    json_t *arr = json_array();
    for (long i = 0; n > 0 && arr != NULL && i < n; i++) {
        json_t *o = json_pack("{s:I, s:I, s:I}", "user", (json_int_t)u[i].user,
                              "up", (json_int_t)u[i].up, "down", (json_int_t)u[i].down);
        if (json_array_append_new(arr, o) != 0)
            json_decref(arr), arr = NULL;
    }
    free(u);
    uint64_t un_up = 0, un_down = 0;
    json_t *nodes = nr >= 0 ? usage_nodes(rows, nr, &un_up, &un_down) : NULL;
    free(rows);
    if (n < 0 || arr == NULL || nodes == NULL) {
        json_decref(arr);
        json_decref(nodes);
        api_reply_error(r, 500, "usage unavailable");
        return;
    }
    json_t *unrep = nr > 0 ? json_pack("{s:I, s:I}", "up", (json_int_t)un_up, "down",
                                       (json_int_t)un_down) : json_null();
    reply_json(r, 200, json_pack("{s:o, s:o, s:o}", "users", arr, "nodes", nodes,
                                 "unreported", unrep));
}

/* GET /v1/audit: {"hits": [{"node","user","rule","first_seen","reporting"}] (the
 * hits of the current report period, from the agent), "dropped" (hits lost since start because
 * the supervisor held too many between two flushes)}. */
static void audit_get(api_server *s, api_reply *r)
{
    api_audit_row *rows = NULL;
    long n = s->audit != NULL ? s->audit(s->arg, &rows) : 0;
    json_t *hits = json_array();
    for (long i = 0; n > 0 && hits != NULL && i < n; i++) {
        char t[40];
        api_time_rfc3339(rows[i].first_ms, t, sizeof t);
        if (json_array_append_new(hits, json_pack("{s:s, s:I, s:I, s:s, s:b}", "node",
                                                  rows[i].node, "user", (json_int_t)rows[i].user,
                                                  "rule", (json_int_t)rows[i].rule,
                                                  "first_seen", t, "reporting",
                                                  rows[i].reporting)) != 0)
            json_decref(hits), hits = NULL;
    }
    free(rows);
    if (n < 0 || hits == NULL) {
        json_decref(hits);
        api_reply_error(r, 500, "audit unavailable");
        return;
    }
    uint64_t noted, dropped;
    sv_audit_counts(s->sv, &noted, &dropped);
    reply_json(r, 200, json_pack("{s:o, s:I}", "hits", hits, "dropped", (json_int_t)dropped));
}

static void healthz(api_server *s, api_reply *r)
{
    api_node_status *nodes = NULL;
    long n = api_node_list(s, &nodes);
    long waiting = 0;
    for (long i = 0; i < n; i++)
        waiting += !nodes[i].applied;
    free(nodes);
    if (n <= 0 || waiting > 0)
        reply_json(r, 503, json_pack("{s:s, s:I}", "status", "starting",
                                     "nodes_not_applied", (json_int_t)(n <= 0 ? 0 : waiting)));
    else
        reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* /livez fails once the control loop has been silent this many sampler intervals (and at
 * least LIVE_MIN_MS): a loop that turns ticks every interval. */
#define LIVE_TICKS 10
#define LIVE_MIN_MS 5000

/* GET /livez: 200 {"status":"ok"} while this thread answers and the control loop turns, else
 * 503 {"status":"stalled","control_loop_silent_ms":N}. */
static void livez(api_server *s, api_reply *r)
{
    uint64_t every_ms, silent = sv_control_silence_ms(s->sv, &every_ms);
    uint64_t limit = every_ms * LIVE_TICKS > LIVE_MIN_MS ? every_ms * LIVE_TICKS : LIVE_MIN_MS;
    if (silent > limit)
        reply_json(r, 503, json_pack("{s:s, s:I}", "status", "stalled",
                                     "control_loop_silent_ms", (json_int_t)silent));
    else
        reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* Why node @p n has not applied a spec yet, in the operator's words, into @p buf. */
static const char *not_ready_reason(const api_node_status *n, char *buf, size_t cap)
{
    if (n->last_apply_error[0] != '\0')
        snprintf(buf, cap, "spec refused: %s", n->last_apply_error);
    else if (n->last_pull_ms == 0)
        snprintf(buf, cap, "panel not reached yet");
    else if (n->last_pull_status != 0)
        snprintf(buf, cap, "panel: %s", n->last_pull_error[0] != '\0' ? n->last_pull_error
                                                                     : strerror(-n->last_pull_status));
    else
        snprintf(buf, cap, "waiting for its first apply");
    return buf;
}

/* GET /readyz: 200 {"status":"ok"} once every configured node has applied a spec; else 503
 * {"status":"not ready","nodes":[{"node","reason"}]} naming each node not applied and why (or
 * "reason": "no node is configured"). */
static void readyz(api_server *s, api_reply *r)
{
    api_node_status *nodes = NULL;
    long n = api_node_list(s, &nodes);
    json_t *waiting = json_array();
    for (long i = 0; waiting != NULL && i < n; i++) {
        char why[400];
        if (!nodes[i].applied &&
            json_array_append_new(waiting, json_pack("{s:s, s:s}", "node", nodes[i].tag,
                                                     "reason", not_ready_reason(&nodes[i], why,
                                                                                sizeof why))) != 0)
            json_decref(waiting), waiting = NULL;
    }
    free(nodes);
    if (n < 0 || waiting == NULL) {
        json_decref(waiting);
        api_reply_error(r, 503, "node status unavailable");
    } else if (n == 0) {
        reply_json(r, 503, json_pack("{s:s, s:o, s:s}", "status", "not ready", "nodes", waiting,
                                     "reason", "no node is configured"));
    } else if (json_array_size(waiting) > 0) {
        reply_json(r, 503, json_pack("{s:s, s:o}", "status", "not ready", "nodes", waiting));
    } else {
        json_decref(waiting);
        reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Dispatch                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static bool seg_is(const api_uri *u, size_t i, const char *s)
{
    return i < u->n_segments && strcmp(u->segments[i], s) == 0;
}

static int no_query(const api_uri *uri, api_reply *r)
{
    static const char *const none[] = {NULL};
    sv_error err = {0};
    if (api_uri_check_keys(uri, none, &err) != 0)
        return api_reply_error(r, 400, "%s", err.msg), -EINVAL;
    return 0;
}

static void method_not_allowed(api_reply *r)
{
    api_reply_error(r, 405, "method not allowed");
}

/* The answer to HEAD on a stream: a stream's headers, no stream started. */
static void stream_head(api_reply *r)
{
    r->status = 200;
    r->text = strdup("");
    r->text_len = 0;
    r->content_type = "text/event-stream";
    if (r->text == NULL)
        api_reply_error(r, 500, "out of memory");
}

static void route_connections(api_server *s, bool get, bool del, const api_uri *u, api_reply *r)
{
    if (u->n_segments == 2) {
        if (get)
            connections_get(s, u, r);
        else if (del)
            connections_delete(s, u, r);
        else
            method_not_allowed(r);
    } else if (u->n_segments == 3 && seg_is(u, 2, "events")) {
        if (!get)
            method_not_allowed(r);
        else if (no_query(u, r) != 0)
            return;
        else if (r->head)
            stream_head(r);
        else if ((r->response = api_sse_events(s, r->conn)) == NULL)
            api_reply_error(r, 503, "too many streams");
    } else if (u->n_segments == 3) {
        if (!del)
            method_not_allowed(r);
        else if (no_query(u, r) == 0)
            connection_delete_one(s, u->segments[2], r);
    } else {
        api_reply_error(r, 404, "not found");
    }
}

static void route_v1(api_server *s, bool get, bool del, bool post, const api_uri *u,
                     api_reply *r)
{
    if (seg_is(u, 1, "connections")) {
        route_connections(s, get, del, u, r);
        return;
    }
    if (seg_is(u, 1, "sessions") && u->n_segments == 2) {
        if (del)
            sessions_delete(s, u, r);
        else
            method_not_allowed(r);
        return;
    }
    if (no_query(u, r) != 0)
        return;
    if (seg_is(u, 1, "nodes") && u->n_segments <= 3) {
        if (!get)
            method_not_allowed(r);
        else
            nodes_get(s, u->n_segments == 3 ? u->segments[2] : NULL, r);
    } else if (seg_is(u, 1, "nodes") && u->n_segments == 4 && seg_is(u, 3, "sync")) {
        if (!post)
            method_not_allowed(r);
        else
            node_sync(s, u->segments[2], r);
    } else if (seg_is(u, 1, "traffic") && u->n_segments == 2) {
        if (!get)
            method_not_allowed(r);
        else if (r->head)
            stream_head(r);
        else if ((r->response = api_sse_traffic(s, r->conn)) == NULL)
            api_reply_error(r, 503, "too many streams");
    } else if (seg_is(u, 1, "usage") && u->n_segments == 2) {
        if (!get)
            method_not_allowed(r);
        else
            usage_get(s, r);
    } else if (seg_is(u, 1, "audit") && u->n_segments == 2) {
        if (!get)
            method_not_allowed(r);
        else
            audit_get(s, r);
    } else {
        api_reply_error(r, 404, "not found");
    }
}

void api_route(api_server *s, const char *method, const api_uri *u, api_reply *r)
{
    r->head = strcmp(method, "HEAD") == 0; /* RFC 9110 9.3.2: HEAD is GET without a body */
    bool get = r->head || strcmp(method, "GET") == 0, del = strcmp(method, "DELETE") == 0;
    bool post = strcmp(method, "POST") == 0;
    static const struct {
        const char *name;
        void (*fn)(api_server *, api_reply *);
    } top[] = {{"healthz", healthz}, {"livez", livez}, {"readyz", readyz}, {"metrics", metrics}};
    for (size_t i = 0; u->n_segments == 1 && i < sizeof top / sizeof top[0]; i++) {
        if (!seg_is(u, 0, top[i].name))
            continue;
        if (!get)
            method_not_allowed(r);
        else if (no_query(u, r) == 0)
            top[i].fn(s, r);
        return;
    }
    if (seg_is(u, 0, "v1") && u->n_segments >= 2)
        route_v1(s, get, del, post, u, r);
    else
        api_reply_error(r, 404, "not found");
}
