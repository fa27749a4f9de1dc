/*
 * The SSPanel-UIM mod_mu client (panel/sspanel.h); the parsers of its answers are
 * sspanel_parse.c.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/http.h"
#include "panel/jsonscan.h"
#include "panel/sspanel.h"
#include "panel/uniproxy.h"
#include "supervisor/util/log.h"

#define URL_MAX 2048u

/* ---------------------------------------------------------------------------------------- */
/* the client                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct last_good {
    char *etag;
    char *body;
    size_t len;
} last_good;

typedef struct pn_sspanel pn_sspanel;

typedef struct call {
    pn_sspanel *s;
    enum { CALL_NODE, CALL_RULES, CALL_USERS, CALL_REPORT } kind;
    const char *what; /* endpoint name for messages and counters (static) */
    union {
        pn_node_cb node;
        pn_users_cb users;
        pn_report_cb report;
    } cb;
    void *arg;
    struct call *next, *prev;
} call;

struct pn_sspanel {
    pn_client base; /* first */
    pn_http *http;
    char *base_url; /* without trailing '/' */
    char *key_q;    /* "key=..&muKey=.." */
    char *node_id;  /* digits only */
    long timeout_ms;
    uint32_t pull, push;
    last_good good[2];   /* raw info and users bodies with their ETags */
    last_good rules;      /* raw detect_rules body and ETag (body NULL: none) */
    char *combined;       /* {"info","detect_rules","detect_rules_etag"}: the stored node body */
    size_t combined_len;
    pn_http_response info; /* the info answer while its detect_rules request runs (copies) */
    size_t rules_skipped;   /* detect rules katana cannot express (hex matches) */
    bool has_meta;
    pn_sspanel_meta meta; /* from the last good node answer */
    pn_alive_count *alive; /* legacy alive_ip counts of the last good users answer */
    size_t n_alive;
    size_t skipped; /* users left out of the last answer (another method) */
    call *calls;
    /* a users answer that came before the node answer it depends on (its secrets follow the
     * node's sort): held until the node answer is delivered, then parsed */
    call *deferred;
    pn_http_response deferred_resp; /* body and etag malloc'ed */
    unsigned delivering;            /* callbacks running: a free waits for them */
    bool free_pending;
    pn_request_count counts[PN_REQUEST_COUNTS_MAX];
    size_t n_counts;
};

static void call_unlink(call *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        k->s->calls = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
}

static void set_good(last_good *g, const char *body, size_t len, const char *etag);

/* set_good() of an answer's body, taken from its request rather than copied. */
static void set_good_taken(last_good *g, const pn_http_response *r)
{
    char *e = r->etag != NULL ? strdup(r->etag) : NULL;
    char *b = r->etag == NULL || e != NULL ? pn_http_take_body(r) : NULL;
    if (b == NULL) {
        free(e);
        set_good(g, r->body, r->len, r->etag);
        return;
    }
    free(g->etag);
    free(g->body);
    *g = (last_good){.etag = e, .body = b, .len = r->len};
}

static void set_good(last_good *g, const char *body, size_t len, const char *etag)
{
    char *e = etag != NULL ? strdup(etag) : NULL;
    char *b = malloc(len + 1);
    if (b == NULL || (etag != NULL && e == NULL)) {
        free(e);
        free(b);
        return; /* keep the old one: the next fetch simply gets a 200 */
    }
    memcpy(b, body, len);
    b[len] = '\0';
    free(g->etag);
    free(g->body);
    *g = (last_good){.etag = e, .body = b, .len = len};
}

/* The error of a 2xx body that is not JSON; @p err holds the reason on entry. */
static int not_json(long status, const char *ctype, sv_error *err)
{
    sv_error why = *err;
    return sv_error_set(err, -EPROTO, "HTTP %ld body is not JSON (%s): %.100s", status,
                        ctype != NULL ? ctype : "no content type", why.msg);
}

/* A body as a tree; one that is not JSON builds none. */
static int parse_json(const char *body, size_t len, long status, const char *ctype,
                      json_t **out, sv_error *err)
{
    json_error_t jerr;
    *out = NULL;
    if (pn_json_check(body, len, err) != 0)
        return not_json(status, ctype, err);
    *out = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*out != NULL)
        return 0;
    char *near = strstr(jerr.text, " near '");
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a secret: log none (#5) */
    sv_error_set(err, -EPROTO, "%s", jerr.text);
    return not_json(status, ctype, err);
}

/* Parse a node (info) body into @p node, updating the client's meta (the users' shape). */
static int parse_node_body(pn_sspanel *s, const json_t *j, pn_node *node, sv_error *err)
{
    pn_sspanel_meta meta;
    int rc = pn_sspanel_parse_node(j, s->pull, s->push, &meta, node, err);
    if (rc == 0) {
        s->meta = meta;
        s->has_meta = true;
    }
    return rc;
}

/* A users body as text into @p users (the client's alive table and count updated), without a
 * tree of the whole list. -EBADMSG: not JSON (err says why). */
static int parse_users_text(pn_sspanel *s, const char *body, size_t len, pn_users *users,
                            sv_error *err)
{
    if (!s->has_meta)
        return sv_error_set(err, -EAGAIN, "no node info yet (users follow the node's type)");
    pn_alive_count *al = NULL;
    size_t n_al = 0, skipped = 0;
    int rc = pn_sspanel_parse_users_text(body, len, &s->meta, users, &skipped, &al, &n_al,
                                         err);
    if (rc != 0)
        return rc;
    free(s->alive);
    s->alive = al;
    s->n_alive = n_al;
    s->skipped = skipped;
    return 0;
}

static void deliver_fetch(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    pn_sspanel *s = k->s;
    pn_client *c = &s->base;
    enum pn_body_kind kind = k->kind == CALL_NODE ? PN_BODY_CONFIG : PN_BODY_USERS;
    sv_error err = {0};
    json_t *j = NULL;
    pn_node node = {0};
    pn_users users = {0};
    size_t skipped_before = s->skipped;
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status == 304)
        rc = PN_NOT_MODIFIED;
    else if (r->status < 200 || r->status > 299)
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else if (kind == PN_BODY_USERS &&
             (rc = parse_users_text(s, r->body, r->len, &users, &err)) == -EBADMSG)
        rc = not_json(r->status, r->content_type, &err);
    else if (kind == PN_BODY_CONFIG &&
             (rc = parse_json(r->body, r->len, r->status, r->content_type, &j, &err)) == 0)
        rc = parse_node_body(s, j, &node, &err);
    if (rc == 0 && r != NULL && r->status != 304 && r->status >= 200 && r->status <= 299)
        set_good_taken(&s->good[kind], r);
    if (rc < 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
    }
    if (rc == PN_OK && kind == PN_BODY_USERS && s->skipped != skipped_before &&
        s->skipped > 0) /* once per change, not per pull */
        SV_LOG(SV_LOG_WARN, "pn.sspanel", "panel users: %zu users left out: their method is "
               "not the node's (%s)", s->skipped, s->meta.method);
    if (k->kind == CALL_NODE)
        k->cb.node(c, rc, rc == PN_OK ? &node : NULL, rc < 0 ? &err : NULL, k->arg);
    else
        k->cb.users(c, rc, rc == PN_OK ? &users : NULL, rc < 0 ? &err : NULL, k->arg);
    /* the client may be gone: only locals below */
    pn_node_free(&node);
    pn_users_free(&users);
    json_decref(j);
}

static void count_request(pn_sspanel *s, const char *what, long status)
{
    for (size_t i = 0; i < s->n_counts; i++)
        if (s->counts[i].endpoint == what && s->counts[i].status == status) {
            s->counts[i].n++;
            return;
        }
    if (s->n_counts < PN_REQUEST_COUNTS_MAX)
        s->counts[s->n_counts++] = (pn_request_count){what, status, 1};
}

static bool node_in_flight(const pn_sspanel *s)
{
    for (const call *k = s->calls; k != NULL; k = k->next)
        if (k->kind == CALL_NODE || k->kind == CALL_RULES)
            return true;
    return false;
}

static void response_clear(pn_http_response *r)
{
    free((char *)r->body);
    free((char *)r->etag);
    memset(r, 0, sizeof *r);
}

/* A malloc'ed copy of @p r's status, body and ETag in @p dst; false when out of memory. */
static bool response_copy(pn_http_response *dst, const pn_http_response *r)
{
    char *body = malloc(r->len + 1), *etag = r->etag != NULL ? strdup(r->etag) : NULL;
    if (body == NULL || (r->etag != NULL && etag == NULL)) {
        free(body);
        free(etag);
        return false;
    }
    memcpy(body, r->body, r->len);
    body[r->len] = '\0';
    *dst = (pn_http_response){.status = r->status, .body = body, .len = r->len, .etag = etag};
    return true;
}

/* The node body the store keeps: info and detect rules together (parsed by ss_parse_body). */
static void build_combined(pn_sspanel *s)
{
    json_t *info = s->good[PN_BODY_CONFIG].body != NULL
                   ? json_loadb(s->good[PN_BODY_CONFIG].body, s->good[PN_BODY_CONFIG].len, 0,
                                NULL) : NULL;
    json_t *rules = s->rules.body != NULL ? json_loadb(s->rules.body, s->rules.len, 0, NULL)
                                          : NULL;
    json_t *o = info != NULL ? json_pack("{s:O, s:O?, s:s?}", "info", info, "detect_rules",
                                         rules, "detect_rules_etag", s->rules.etag) : NULL;
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text != NULL) { /* else the old one stays (stored at the next change) */
        free(s->combined);
        s->combined = text;
        s->combined_len = strlen(text);
    }
    json_decref(o);
    json_decref(info);
    json_decref(rules);
}

/* Append detect rules (a detect_rules answer, PANEL.md §2.6) to @p node as block routes. */
static int add_rules(pn_sspanel *s, const json_t *j, pn_node *node, sv_error *err)
{
    pn_route *routes = NULL;
    size_t n = 0, skipped = 0;
    int rc = pn_sspanel_parse_rules(j, &routes, &n, &skipped, err);
    if (rc != 0)
        return rc;
    if (skipped != s->rules_skipped && skipped > 0) /* once per change, not per pull */
        SV_LOG(SV_LOG_WARN, "pn.sspanel", "panel detect_rules: %zu rules skipped: only "
               "plaintext (type 1) rules are served, as block routes", skipped);
    s->rules_skipped = skipped;
    if (n == 0)
        return 0;
    pn_route *v = realloc(node->routes, (node->n_routes + n) * sizeof *v);
    if (v == NULL) {
        pn_node tmp = {.routes = routes, .n_routes = n};
        pn_node_free(&tmp);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    memcpy(v + node->n_routes, routes, n * sizeof *v);
    node->routes = v;
    node->n_routes += n;
    free(routes);
    return 0;
}

/* The detect_rules answer (after a 2xx or 304 info answer held in s->info): PN_NOT_MODIFIED
 * when both were 304, else the node from the info body (new or held) with the rules (new or
 * held; a 404 means a panel without detect rules) as block routes, or an error. */
static void finish_node(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    pn_sspanel *s = k->s;
    sv_error err = {0};
    pn_node node = {0};
    json_t *ij = NULL, *rj = NULL;
    bool info_new = s->info.status != 304, rules_new = false, rules_none = false;
    const char *what = "detect_rules";
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status == 404)
        rules_none = rules_new = true;
    else if (r->status != 304 && (r->status < 200 || r->status > 299))
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else
        rules_new = r->status != 304;
    if (rc == 0 && !info_new && !rules_new)
        rc = PN_NOT_MODIFIED;
    const last_good *gi = &s->good[PN_BODY_CONFIG];
    const char *ib = info_new ? s->info.body : gi->body;
    size_t il = info_new ? s->info.len : gi->len;
    if (rc == 0 && ib == NULL) {
        what = "info";
        rc = sv_error_set(&err, -EPROTO, "HTTP 304 but no body held");
    }
    if (rc == 0 && (rc = parse_json(ib, il, info_new ? s->info.status : 200, NULL, &ij,
                                    &err)) != 0)
        what = "info";
    if (rc == 0 && (rc = parse_node_body(s, ij, &node, &err)) != 0)
        what = "info";
    const char *rb = rules_none ? NULL : rules_new ? r->body : s->rules.body;
    size_t rl = rules_none ? 0 : rules_new ? r->len : s->rules.len;
    if (rc == 0 && rb != NULL && (rc = parse_json(rb, rl, 200, NULL, &rj, &err)) == 0)
        rc = add_rules(s, rj, &node, &err);
    if (rc == 0) {
        if (info_new)
            set_good(&s->good[PN_BODY_CONFIG], s->info.body, s->info.len, s->info.etag);
        if (rules_none) {
            free(s->rules.body);
            free(s->rules.etag);
            memset(&s->rules, 0, sizeof s->rules);
        } else if (rules_new) {
            set_good(&s->rules, r->body, r->len, r->etag);
        }
        build_combined(s);
    }
    response_clear(&s->info);
    if (rc < 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel %s: %s", what, inner.msg);
        pn_node_free(&node);
    }
    k->cb.node(&s->base, rc, rc == PN_OK ? &node : NULL, rc < 0 ? &err : NULL, k->arg);
    pn_node_free(&node);
    json_decref(ij);
    json_decref(rj);
}

static int start(pn_sspanel *s, call *k, const char *method, const char *path, bool node_q,
                 const char *body, size_t len);
static call *call_new(int kind, const char *what, void *arg);

/* A 2xx or 304 info answer: hold it and ask for the detect rules. false: not started (the
 * caller delivers the info answer as it is, or an error). */
static bool start_rules(pn_sspanel *s, call *k, const pn_http_response *r)
{
    call *rk = call_new(CALL_RULES, "detect_rules", k->arg);
    if (rk == NULL || !response_copy(&s->info, r)) {
        free(rk);
        return false;
    }
    rk->cb.node = k->cb.node;
    if (start(s, rk, "GET", "func/detect_rules", false, NULL, 0) != 0) {
        response_clear(&s->info);
        return false;
    }
    return true;
}

/* Hold a 2xx users answer until the node answer in flight is delivered. false: no room. */
static bool defer_users(pn_sspanel *s, call *k, const pn_http_response *r)
{
    char *body = malloc(r->len + 1), *etag = r->etag != NULL ? strdup(r->etag) : NULL;
    if (body == NULL || (r->etag != NULL && etag == NULL)) {
        free(body);
        free(etag);
        return false;
    }
    memcpy(body, r->body, r->len);
    body[r->len] = '\0';
    s->deferred = k;
    s->deferred_resp = (pn_http_response){.status = r->status, .body = body, .len = r->len,
                                          .etag = etag};
    return true;
}

static void drop_deferred(pn_sspanel *s)
{
    free(s->deferred);
    free((char *)s->deferred_resp.body);
    free((char *)s->deferred_resp.etag);
    s->deferred = NULL;
    memset(&s->deferred_resp, 0, sizeof s->deferred_resp);
}

static void real_free(pn_sspanel *s);

static void on_http(int rc, const pn_http_response *r, const sv_error *herr, void *arg)
{
    call *k = arg;
    pn_sspanel *s = k->s;
    call_unlink(k);
    count_request(s, k->what, rc == 0 && r != NULL ? r->status : 0);
    if (k->kind == CALL_USERS && rc == 0 && r->status >= 200 && r->status <= 299 &&
        !s->has_meta && s->deferred == NULL && node_in_flight(s) && defer_users(s, k, r))
        return; /* delivered right after the node answer */
    if (k->kind == CALL_NODE && rc == 0 && (r->status == 304 ||
                                             (r->status >= 200 && r->status <= 299)) &&
        start_rules(s, k, r)) {
        free(k);
        return; /* the node is delivered with its detect rules */
    }
    s->delivering++; /* a free from a callback below waits until they all ran */
    if (k->kind == CALL_NODE || k->kind == CALL_RULES) {
        if (k->kind == CALL_NODE)
            deliver_fetch(k, rc, r, herr);
        else
            finish_node(k, rc, r, herr);
        if (s->deferred != NULL && !s->free_pending)
            deliver_fetch(s->deferred, 0, &s->deferred_resp, NULL);
        drop_deferred(s);
    } else if (k->kind == CALL_USERS) {
        deliver_fetch(k, rc, r, herr);
    } else {
        sv_error err = {0};
        if (rc != 0)
            sv_error_set(&err, rc, "panel %s: %s", k->what, herr->msg);
        else if ((rc = pn_sspanel_check_ack(r->status, r->body, r->len, &err)) != 0) {
            sv_error inner = err;
            if (r->status == 500) /* PHP ran and failed (usage_apply); 502-504 are the front's */
                rc = PN_ERR_PANEL_FAILED;
            sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
        }
        k->cb.report(&s->base, rc, rc != 0 ? &err : NULL, k->arg);
    }
    free(k);
    if (--s->delivering == 0 && s->free_pending)
        real_free(s);
}

/* Start one request to /mod_mu/@p path; on success the call is owned by the request. */
static int start(pn_sspanel *s, call *k, const char *method, const char *path, bool node_q,
                 const char *body, size_t len)
{
    char url[URL_MAX];
    int n = snprintf(url, sizeof url, "%s/mod_mu/%s?%s%s%s", s->base_url, path, s->key_q,
                     node_q ? "&node_id=" : "", node_q ? s->node_id : "");
    if (n < 0 || (size_t)n >= sizeof url) {
        free(k);
        return -ENAMETOOLONG;
    }
    const char *inm = k->kind == CALL_NODE    ? s->good[PN_BODY_CONFIG].etag
                      : k->kind == CALL_RULES ? s->rules.etag
                      : k->kind == CALL_USERS ? s->good[PN_BODY_USERS].etag
                                              : NULL;
    pn_http_request req = {.method = method, .url = url, .body = body, .body_len = len,
                           .if_none_match = inm, .timeout_ms = s->timeout_ms};
    k->s = s;
    int rc = pn_http_start(s->http, &req, on_http, k, NULL, NULL);
    if (rc != 0) {
        free(k);
        return rc;
    }
    k->next = s->calls;
    if (s->calls != NULL)
        s->calls->prev = k;
    s->calls = k;
    return 0;
}

static call *call_new(int kind, const char *what, void *arg)
{
    call *k = calloc(1, sizeof *k);
    if (k != NULL)
        *k = (call){.kind = kind, .what = what, .arg = arg};
    return k;
}

static int ss_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    char path[64];
    call *k = call_new(CALL_NODE, "info", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.node = cb;
    snprintf(path, sizeof path, "nodes/%s/info", s->node_id);
    return start(s, k, "GET", path, false, NULL, 0);
}

static int ss_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    call *k = call_new(CALL_USERS, "users", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.users = cb;
    return start((pn_sspanel *)c, k, "GET", "users", true, NULL, 0);
}

/* POST a JSON body (stolen) to /mod_mu/@p path. */
static int post(pn_sspanel *s, const char *what, const char *path, bool node_q, json_t *body,
                pn_report_cb cb, void *arg)
{
    if (body == NULL)
        return -ENOMEM;
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    call *k = text != NULL ? call_new(CALL_REPORT, what, arg) : NULL;
    if (k == NULL) {
        free(text);
        return -ENOMEM;
    }
    k->cb.report = cb;
    int rc = start(s, k, "POST", path, node_q, text, strlen(text));
    free(text);
    return rc;
}

/* {"data":[...]} around @p items (stolen). */
static json_t *wrap(json_t *items)
{
    return items != NULL ? json_pack("{s:o}", "data", items) : NULL;
}

static int ss_report_usage(pn_client *c, const sv_usage *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        if (items[i].up > INT64_MAX || items[i].down > INT64_MAX || items[i].user > INT64_MAX) {
            json_decref(a);
            return -EOVERFLOW;
        }
        json_t *e = json_pack("{s:I, s:I, s:I}", "user_id", (json_int_t)items[i].user, "u",
                              (json_int_t)items[i].up, "d", (json_int_t)items[i].down);
        if (e == NULL || json_array_append_new(a, e) != 0) {
            json_decref(a);
            return -ENOMEM;
        }
    }
    return post((pn_sspanel *)c, "traffic", "users/traffic", true, wrap(a), cb, arg);
}

static int ss_report_alive(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        for (size_t k = 0; k < items[i].n_ips; k++) {
            json_t *e = json_pack("{s:I, s:s}", "user_id", (json_int_t)items[i].user, "ip",
                                  items[i].ips[k]);
            if (e == NULL || json_array_append_new(a, e) != 0) {
                json_decref(a);
                return -ENOMEM;
            }
        }
    return post((pn_sspanel *)c, "aliveip", "users/aliveip", true, wrap(a), cb, arg);
}

/* Audit hits as the detect log (PANEL.md §2: POST users/detectlog
 * {"data":[{"user_id","list_id"}]}). */
static int ss_report_detect(pn_client *c, const pn_detect_hit *items, size_t n, pn_report_cb cb,
                            void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        if (items[i].user > INT64_MAX) {
            json_decref(a);
            return -EOVERFLOW;
        }
        json_t *e = json_pack("{s:I, s:I}", "user_id", (json_int_t)items[i].user, "list_id",
                              (json_int_t)items[i].rule);
        if (e == NULL || json_array_append_new(a, e) != 0) {
            json_decref(a);
            return -ENOMEM;
        }
    }
    return post((pn_sspanel *)c, "detectlog", "users/detectlog", true, wrap(a), cb, arg);
}

/* Node load (PANEL.md §2.1): only panels older than 2023.2 have POST nodes/{id}/info; a
 * current one takes no load report (-ENOTSUP, no callback). */
static int ss_report_status(pn_client *c, const pn_status *st, pn_report_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (!s->has_meta || s->meta.version_year == 0 || s->meta.version_year > 2023 ||
        (s->meta.version_year == 2023 && s->meta.version_month >= 2))
        return -ENOTSUP;
    char uptime[24], load[64], path[64];
    snprintf(uptime, sizeof uptime, "%" PRIu64, st->uptime_s);
    snprintf(load, sizeof load, "%.2f %.2f %.2f", st->load[0], st->load[1], st->load[2]);
    snprintf(path, sizeof path, "nodes/%s/info", s->node_id);
    return post(s, "load", path, false, json_pack("{s:s, s:s}", "uptime", uptime, "load", load),
                cb, arg);
}

/* The legacy `alive_ip` counts of the last users answer (none on a current panel), at once. */
static int ss_fetch_alivelist(pn_client *c, pn_alivelist_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    cb(c, PN_OK, s->alive, s->n_alive, NULL, arg);
    return 0;
}

static int ss_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag)
{
    pn_sspanel *s = (pn_sspanel *)c;
    char *e = etag != NULL ? strdup(etag) : NULL;
    if (etag != NULL && e == NULL)
        return -ENOMEM;
    free(s->good[kind].etag);
    s->good[kind].etag = e;
    return 0;
}

static const char *ss_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                const char **etag)
{
    pn_sspanel *s = (pn_sspanel *)c;
    bool node = kind == PN_BODY_CONFIG; /* the info and detect rules pair (build_combined) */
    if (len != NULL)
        *len = node ? s->combined_len : s->good[kind].len;
    if (etag != NULL)
        *etag = s->good[kind].etag;
    return node ? s->combined : s->good[kind].body;
}

/* The users body only: the info body is kept, combined with the detect rules (build_combined). */
static void ss_forget_body(pn_client *c, enum pn_body_kind kind)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (kind != PN_BODY_USERS)
        return;
    free(s->good[kind].body);
    s->good[kind].body = NULL;
    s->good[kind].len = 0;
}

static int ss_parse_body(pn_client *c, enum pn_body_kind kind, const char *body, size_t len,
                         pn_node *node, pn_users *users, sv_error *err)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (kind == PN_BODY_USERS) {
        int rc = parse_users_text(s, body, len, users, err);
        return rc == -EBADMSG ? sv_error_set(err, -EINVAL, "stored body is not JSON") : rc;
    }
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (j == NULL)
        return sv_error_set(err, -EINVAL, "stored body is not JSON");
    const json_t *info = json_object_get(j, "info");
    if (info == NULL) { /* an info body on its own */
        int rc = parse_node_body(s, j, node, err);
        json_decref(j);
        return rc;
    }
    /* the stored pair: the held bodies come back too, so a 304 after the restart is served */
    const json_t *rules = json_object_get(j, "detect_rules");
    const json_t *rules_etag = json_object_get(j, "detect_rules_etag");
    int rc = parse_node_body(s, info, node, err);
    if (rc == 0 && rules != NULL && !json_is_null(rules) &&
        (rc = add_rules(s, rules, node, err)) != 0)
        pn_node_free(node);
    char *it = rc == 0 ? json_dumps(info, JSON_COMPACT) : NULL;
    char *rt = rc == 0 && json_is_object(rules) ? json_dumps(rules, JSON_COMPACT) : NULL;
    if (it != NULL) {
        set_good(&s->good[PN_BODY_CONFIG], it, strlen(it), s->good[PN_BODY_CONFIG].etag);
        if (rt != NULL)
            set_good(&s->rules, rt, strlen(rt), json_string_value(rules_etag));
        build_combined(s);
    }
    free(it);
    free(rt);
    json_decref(j);
    return rc;
}

static size_t ss_requests(pn_client *c, pn_request_count *out, size_t cap)
{
    pn_sspanel *s = (pn_sspanel *)c;
    size_t n = s->n_counts < cap ? s->n_counts : cap;
    memcpy(out, s->counts, n * sizeof *out);
    return n;
}

/* Free now, or (from inside a callback) once the callbacks of this answer have run. */
static void ss_free(pn_client *c)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (s->delivering > 0) {
        s->free_pending = true;
        pn_http_free(s->http); /* pending requests end without callbacks */
        s->http = NULL;
        return;
    }
    real_free(s);
}

static void real_free(pn_sspanel *s)
{
    pn_http_free(s->http); /* pending requests end without callbacks */
    drop_deferred(s);
    while (s->calls != NULL) {
        call *k = s->calls;
        s->calls = k->next;
        free(k);
    }
    for (int i = 0; i < 2; i++) {
        free(s->good[i].etag);
        free(s->good[i].body);
    }
    free(s->rules.etag);
    free(s->rules.body);
    free(s->combined);
    response_clear(&s->info);
    free(s->alive);
    free(s->base_url);
    free(s->key_q);
    free(s->node_id);
    free(s);
}

static const pn_client_ops sspanel_ops = {
    .type = "sspanel",
    .usage_apply = PN_USAGE_ORDERED, /* PANEL.md §2.6: no transaction */
    .fetch_node = ss_fetch_node,
    .fetch_users = ss_fetch_users,
    .report_usage = ss_report_usage,
    .report_alive = ss_report_alive,
    .report_status = ss_report_status,
    .fetch_alivelist = ss_fetch_alivelist,
    .report_detect = ss_report_detect,
    .set_etag = ss_set_etag,
    .last_body = ss_last_body,
    .forget_body = ss_forget_body,
    .parse_body = ss_parse_body,
    .requests = ss_requests,
    .free = ss_free,
};

/* Percent-encode everything but RFC 3986 unreserved characters; -ENAMETOOLONG past cap. */
static int escape(char *dst, size_t cap, size_t *pos, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~';
        if (*pos + (plain ? 1 : 3) >= cap)
            return -ENAMETOOLONG;
        if (plain) {
            dst[(*pos)++] = (char)ch;
        } else {
            dst[(*pos)++] = '%';
            dst[(*pos)++] = hex[ch >> 4];
            dst[(*pos)++] = hex[ch & 15];
        }
    }
    dst[*pos] = '\0';
    return 0;
}

int pn_sspanel_new(const pn_sspanel_options *o, pn_client **out, sv_error *err)
{
    *out = NULL;
    const char *missing = o->url == NULL || o->url[0] == '\0'   ? "url"
                          : o->key == NULL || o->key[0] == '\0' ? "token"
                          : o->node_id == NULL || o->node_id[0] == '\0' ? "node_id"
                                                                        : NULL;
    if (missing != NULL)
        return sv_error_set(err, -EINVAL, "sspanel panel: %s is required", missing);
    if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
        return sv_error_set(err, -EINVAL, "sspanel panel: url must start with http:// or "
                            "https://");
    if (strspn(o->node_id, "0123456789") != strlen(o->node_id) || strlen(o->node_id) > 20)
        return sv_error_set(err, -EINVAL, "sspanel panel: node_id must be a number");
    pn_sspanel *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    s->base.ops = &sspanel_ops;
    s->timeout_ms = o->timeout_ms;
    s->pull = o->pull_interval;
    s->push = o->push_interval;
    char q[1024];
    size_t pos = 0;
    int rc = 0;
    s->base_url = strdup(o->url);
    s->node_id = strdup(o->node_id);
    if (s->base_url == NULL || s->node_id == NULL)
        rc = -ENOMEM;
    memcpy(q, "key=", 5);
    pos = 4;
    if (rc == 0)
        rc = escape(q, sizeof q, &pos, o->key);
    if (rc == 0 && pos + 7 < sizeof q) {
        memcpy(q + pos, "&muKey=", 8);
        pos += 7;
        rc = escape(q, sizeof q, &pos, o->key);
    } else if (rc == 0) {
        rc = -ENAMETOOLONG;
    }
    if (rc == 0 && (s->key_q = strdup(q)) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = pn_http_new(o->loop, &s->http);
    if (rc != 0) {
        ss_free(&s->base);
        return sv_error_set(err, rc, "sspanel panel: %s", rc == -ENAMETOOLONG
                            ? "token too long" : "cannot initialise");
    }
    size_t n = strlen(s->base_url);
    while (n > 0 && s->base_url[n - 1] == '/')
        s->base_url[--n] = '\0';
    *out = &s->base;
    return 0;
}
