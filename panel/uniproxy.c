/*
 * The UniProxy client (panel/uniproxy.h).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/http.h"
#include "panel/jsonscan.h"
#include "panel/uniproxy.h"

#define API_PATH "/api/v1/server/UniProxy/"
#define URL_MAX 2048u

typedef struct last_good {
    char *etag;
    char *body;
    size_t len;
} last_good;

typedef struct pn_uniproxy pn_uniproxy;

typedef struct call {
    pn_uniproxy *u;
    enum { CALL_NODE, CALL_USERS, CALL_REPORT, CALL_ALIVELIST } kind;
    const char *what; /* endpoint name for messages */
    union {
        pn_node_cb node;
        pn_users_cb users;
        pn_report_cb report;
        pn_alivelist_cb alivelist;
    } cb;
    void *arg;
    struct call *next, *prev;
} call;

struct pn_uniproxy {
    pn_client base; /* first */
    pn_http *http;
    char *base_url;  /* without trailing '/' */
    char *query;     /* "token=..&node_id=..&node_type=.." */
    char *node_type;
    const char *api_path; /* API_PATH, or the caller's (static) path: Xboard API v2 */
    long timeout_ms;
    last_good good[2];
    call *calls;
    pn_request_count counts[PN_REQUEST_COUNTS_MAX]; /* requests by endpoint and status */
    size_t n_counts;
};

/* ---------------------------------------------------------------------------------------- */
/* answers                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static const char *envelope_text(const json_t *j)
{
    const char *keys[] = {"message", "error", "msg"};
    for (size_t i = 0; j != NULL && json_is_object(j) && i < 3; i++) {
        const json_t *v = json_object_get(j, keys[i]);
        if (json_is_string(v))
            return json_string_value(v);
    }
    return NULL;
}

int pn_uniproxy_error(long status, const char *body, size_t len, sv_error *err)
{
    json_t *j = pn_json_check(body, len, NULL) == 0 ? json_loadb(body, len, 0, NULL) : NULL;
    const char *text = envelope_text(j);
    if (text != NULL) {
        sv_error_set(err, -EPROTO, "HTTP %ld: %.200s", status, text);
    } else {
        char head[81];
        size_t n = len < 80 ? len : 80;
        for (size_t i = 0; i < n; i++)
            head[i] = isprint((unsigned char)body[i]) ? body[i] : '.';
        head[n] = '\0';
        sv_error_set(err, -EPROTO, "HTTP %ld%s%s", status, n > 0 ? ": " : "", head);
    }
    json_decref(j);
    return -EPROTO;
}

/* The error of a 2xx body that is not JSON (an HTML page), naming its content type; @p err
 * holds the reason on entry. */
static int not_json(const pn_http_response *r, sv_error *err)
{
    sv_error why = *err;
    return sv_error_set(err, -EPROTO, "HTTP %ld body is not JSON (%s): %.100s", r->status,
                        r->content_type != NULL ? r->content_type : "no content type",
                        why.msg);
}

/* Parse a 2xx body as JSON; a body that is not JSON builds no tree. */
static int body_json(const pn_http_response *r, json_t **out, sv_error *err)
{
    json_error_t jerr;
    *out = NULL;
    if (pn_json_check(r->body, r->len, err) != 0)
        return not_json(r, err);
    *out = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
    if (*out != NULL)
        return 0;
    char *near = strstr(jerr.text, " near '");
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a user's uuid: log no secrets (#5) */
    sv_error_set(err, -EPROTO, "%s", jerr.text);
    return not_json(r, err);
}

int pn_uniproxy_check_ack(long status, const char *body, size_t len, sv_error *err)
{
    if (status < 200 || status > 299)
        return pn_uniproxy_error(status, body, len, err);
    json_error_t jerr;
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    int rc = 0;
    if (!json_is_object(j)) {
        rc = sv_error_set(err, -EPROTO, "HTTP %ld body is not a JSON object", status);
        goto out;
    }
    const json_t *st = json_object_get(j, "status"), *data = json_object_get(j, "data");
    bool fail = json_is_string(st) && strcmp(json_string_value(st), "success") != 0;
    bool ok = json_is_true(data) || (json_is_string(st) && !fail);
    if (fail || json_is_false(data) || !ok) {
        const char *t = envelope_text(j);
        rc = sv_error_set(err, -EPROTO, "HTTP %ld: not accepted%s%.200s", status,
                          t != NULL ? ": " : "", t != NULL ? t : "");
    }
out:
    json_decref(j);
    return rc;
}

int pn_uniproxy_parse_alivelist(const json_t *body, pn_alive_count **out, size_t *n,
                                sv_error *err)
{
    *out = NULL;
    *n = 0;
    const json_t *alive = json_is_object(body) ? json_object_get(body, "alive") : NULL;
    if (json_is_array(alive) && json_array_size(alive) == 0)
        return 0; /* PHP's empty array */
    if (!json_is_object(alive))
        return sv_error_set(err, -EINVAL, "alive: expected an object");
    size_t total = json_object_size(alive);
    if (total > PN_USERS_MAX)
        return sv_error_set(err, -EMSGSIZE, "alive: more than %u users", PN_USERS_MAX);
    pn_alive_count *items = total > 0 ? calloc(total, sizeof *items) : NULL;
    if (total > 0 && items == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    const char *key;
    json_t *v;
    size_t k = 0;
    json_object_foreach((json_t *)alive, key, v) {
        char *end = NULL;
        errno = 0;
        unsigned long long uid = strtoull(key, &end, 10);
        json_int_t cnt = json_is_integer(v) ? json_integer_value(v) : -1;
        if (key[0] < '0' || key[0] > '9' || *end != '\0' || errno != 0 || cnt < 0 ||
            cnt > UINT32_MAX) {
            free(items);
            return sv_error_set(err, -EINVAL, "alive.%.64s: expected a user id and a count",
                                key);
        }
        items[k++] = (pn_alive_count){.user = uid, .count = (uint32_t)cnt};
    }
    *out = items;
    *n = k;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* requests                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void call_unlink(call *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        k->u->calls = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
}

/* Keep @p r's body (taken from the request, not copied) and ETag as the last good. */
static void set_good(last_good *g, const pn_http_response *r)
{
    char *etag = r->etag != NULL ? strdup(r->etag) : NULL;
    if (r->etag != NULL && etag == NULL)
        return; /* keep the old one: the next fetch simply gets a 200 */
    char *body = pn_http_take_body(r);
    if (body == NULL && (body = malloc(r->len + 1)) != NULL) {
        memcpy(body, r->body, r->len);
        body[r->len] = '\0';
    }
    if (body == NULL) {
        free(etag);
        return;
    }
    free(g->etag);
    free(g->body);
    g->etag = etag;
    g->body = body;
    g->len = r->len;
}

/* A config / user answer: PN_OK with the parsed data, PN_NOT_MODIFIED, or an error. */
static int fetch_answer(call *k, const pn_http_response *r, json_t **j, pn_node *node,
                        pn_users *users, sv_error *err)
{
    pn_uniproxy *u = k->u;
    if (r->status == 304)
        return PN_NOT_MODIFIED;
    if (r->status < 200 || r->status > 299)
        return pn_uniproxy_error(r->status, r->body, r->len, err);
    if (k->kind == CALL_USERS) { /* no tree of the whole list */
        int rc = pn_users_parse_text(r->body, r->len, 0, users, err);
        if (rc == -EBADMSG)
            return not_json(r, err);
        if (rc == 0)
            set_good(&u->good[PN_BODY_USERS], r);
        return rc;
    }
    int rc = body_json(r, j, err);
    if (rc != 0)
        return rc;
    rc = pn_node_parse(*j, u->node_type, 0, node, err);
    if (rc == 0)
        set_good(&u->good[PN_BODY_CONFIG], r);
    return rc;
}

static void deliver_fetch(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    pn_client *c = &k->u->base;
    sv_error err = {0};
    json_t *j = NULL;
    pn_node node = {0};
    pn_users users = {0};
    if (rc != 0) {
        sv_error_set(&err, rc, "%s", herr->msg);
    } else {
        rc = fetch_answer(k, r, &j, &node, &users, &err);
    }
    if (rc < 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
    }
    if (k->kind == CALL_NODE)
        k->cb.node(c, rc, rc == PN_OK ? &node : NULL, rc < 0 ? &err : NULL, k->arg);
    else
        k->cb.users(c, rc, rc == PN_OK ? &users : NULL, rc < 0 ? &err : NULL, k->arg);
    /* the client may be gone: only locals below */
    pn_node_free(&node);
    pn_users_free(&users);
    json_decref(j);
}

static void deliver_alivelist(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    sv_error err = {0};
    json_t *j = NULL;
    pn_alive_count *items = NULL;
    size_t n = 0;
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status < 200 || r->status > 299)
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else if ((rc = body_json(r, &j, &err)) == 0)
        rc = pn_uniproxy_parse_alivelist(j, &items, &n, &err);
    if (rc != 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel alivelist: %s", inner.msg);
    }
    k->cb.alivelist(&k->u->base, rc, rc == 0 ? items : NULL, rc == 0 ? n : 0,
                    rc != 0 ? &err : NULL, k->arg);
    free(items);
    json_decref(j);
}

/* One more finished request of endpoint @p what (a static name) answered with @p status. */
static void count_request(pn_uniproxy *u, const char *what, long status)
{
    for (size_t i = 0; i < u->n_counts; i++)
        if (u->counts[i].endpoint == what && u->counts[i].status == status) {
            u->counts[i].n++;
            return;
        }
    if (u->n_counts < PN_REQUEST_COUNTS_MAX)
        u->counts[u->n_counts++] = (pn_request_count){what, status, 1};
}

static size_t up_requests(pn_client *c, pn_request_count *out, size_t cap)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    size_t n = u->n_counts < cap ? u->n_counts : cap;
    memcpy(out, u->counts, n * sizeof *out);
    return n;
}

static void on_http(int rc, const pn_http_response *r, const sv_error *herr, void *arg)
{
    call *k = arg;
    call_unlink(k); /* the callback below may free the client and its list */
    count_request(k->u, k->what, rc == 0 && r != NULL ? r->status : 0);
    if (k->kind == CALL_NODE || k->kind == CALL_USERS) {
        deliver_fetch(k, rc, r, herr);
    } else if (k->kind == CALL_ALIVELIST) {
        deliver_alivelist(k, rc, r, herr);
    } else {
        sv_error err = {0};
        if (rc != 0)
            sv_error_set(&err, rc, "panel %s: %s", k->what, herr->msg);
        else if ((rc = pn_uniproxy_check_ack(r->status, r->body, r->len, &err)) != 0) {
            sv_error inner = err;
            sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
        }
        k->cb.report(&k->u->base, rc, rc != 0 ? &err : NULL, k->arg);
    }
    free(k);
}

/* Start one request; on success the call is owned by the request. */
static int start(pn_uniproxy *u, call *k, const char *method, const char *body, size_t len)
{
    char url[URL_MAX];
    int n = snprintf(url, sizeof url, "%s%s%s?%s", u->base_url, u->api_path, k->what,
                     u->query);
    if (n < 0 || (size_t)n >= sizeof url) {
        free(k);
        return -ENAMETOOLONG;
    }
    const char *inm = NULL;
    if (k->kind == CALL_NODE)
        inm = u->good[PN_BODY_CONFIG].etag;
    else if (k->kind == CALL_USERS)
        inm = u->good[PN_BODY_USERS].etag;
    pn_http_request req = {.method = method, .url = url, .body = body, .body_len = len,
                           .if_none_match = inm, .timeout_ms = u->timeout_ms};
    k->u = u;
    int rc = pn_http_start(u->http, &req, on_http, k, NULL, NULL);
    if (rc != 0) {
        free(k);
        return rc;
    }
    k->next = u->calls;
    if (u->calls != NULL)
        u->calls->prev = k;
    u->calls = k;
    return 0;
}

static call *call_new(int kind, const char *what, void *arg)
{
    call *k = calloc(1, sizeof *k);
    if (k != NULL) {
        k->kind = kind;
        k->what = what;
        k->arg = arg;
    }
    return k;
}

static int up_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    call *k = call_new(CALL_NODE, "config", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.node = cb;
    return start((pn_uniproxy *)c, k, "GET", NULL, 0);
}

static int up_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    call *k = call_new(CALL_USERS, "user", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.users = cb;
    return start((pn_uniproxy *)c, k, "GET", NULL, 0);
}

static int up_fetch_alivelist(pn_client *c, pn_alivelist_cb cb, void *arg)
{
    call *k = call_new(CALL_ALIVELIST, "alivelist", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.alivelist = cb;
    return start((pn_uniproxy *)c, k, "GET", NULL, 0);
}

/* POST a JSON body built by the caller (stolen). */
static int post(pn_client *c, const char *what, json_t *body, pn_report_cb cb, void *arg)
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
    int rc = start((pn_uniproxy *)c, k, "POST", text, strlen(text));
    free(text);
    return rc;
}

static int up_report_usage(pn_client *c, const sv_usage *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *o = json_object();
    for (size_t i = 0; o != NULL && i < n; i++) {
        char key[24];
        if (items[i].up > INT64_MAX || items[i].down > INT64_MAX) {
            json_decref(o);
            return -EOVERFLOW;
        }
        snprintf(key, sizeof key, "%" PRIu64, items[i].user);
        json_t *pair = json_pack("[II]", (json_int_t)items[i].up, (json_int_t)items[i].down);
        if (pair == NULL || json_object_set_new(o, key, pair) != 0) {
            json_decref(o);
            return -ENOMEM;
        }
    }
    return post(c, "push", o, cb, arg);
}

static int up_report_alive(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *o = json_object();
    for (size_t i = 0; o != NULL && i < n; i++) {
        char key[24];
        json_t *ips = json_array();
        for (size_t k = 0; ips != NULL && k < items[i].n_ips; k++)
            if (json_array_append_new(ips, json_string(items[i].ips[k])) != 0) {
                json_decref(ips);
                ips = NULL;
            }
        snprintf(key, sizeof key, "%" PRIu64, items[i].user);
        if (ips == NULL || json_object_set_new(o, key, ips) != 0) {
            json_decref(o);
            return -ENOMEM;
        }
    }
    return post(c, "alive", o, cb, arg);
}

static int up_report_status(pn_client *c, const pn_status *s, pn_report_cb cb, void *arg)
{
    json_t *o = json_pack("{s:f, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}}", "cpu", s->cpu,
                          "mem", "total", (json_int_t)s->mem_total, "used",
                          (json_int_t)s->mem_used, "swap", "total", (json_int_t)s->swap_total,
                          "used", (json_int_t)s->swap_used, "disk", "total",
                          (json_int_t)s->disk_total, "used", (json_int_t)s->disk_used);
    return post(c, "status", o, cb, arg);
}

int pn_uniproxy_post(pn_client *c, const char *endpoint, json_t *body, pn_report_cb cb,
                     void *arg)
{
    return post(c, endpoint, body, cb, arg);
}

static void up_free(pn_client *c)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    pn_http_free(u->http); /* pending requests end without callbacks */
    while (u->calls != NULL) {
        call *k = u->calls;
        u->calls = k->next;
        free(k);
    }
    for (int i = 0; i < 2; i++) {
        free(u->good[i].etag);
        free(u->good[i].body);
    }
    free(u->base_url);
    free(u->query);
    free(u->node_type);
    free(u);
}

static int up_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag);

static int up_parse_body(pn_client *c, enum pn_body_kind kind, const char *body, size_t len,
                         pn_node *node, pn_users *users, sv_error *err)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    if (kind == PN_BODY_USERS) {
        int rc = pn_users_parse_text(body, len, 0, users, err);
        return rc == -EBADMSG ? sv_error_set(err, -EINVAL, "stored body is not JSON") : rc;
    }
    json_error_t jerr;
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (j == NULL)
        return sv_error_set(err, -EINVAL, "stored body is not JSON");
    int rc = pn_node_parse(j, u->node_type, 0, node, err);
    json_decref(j);
    return rc;
}
static const char *up_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                const char **etag);
static void up_forget_body(pn_client *c, enum pn_body_kind kind);

static const pn_client_ops uniproxy_ops = {
    .type = "uniproxy",
    .usage_apply = PN_USAGE_ATOMIC,
    .fetch_node = up_fetch_node,
    .fetch_users = up_fetch_users,
    .report_usage = up_report_usage,
    .report_alive = up_report_alive,
    .report_status = up_report_status,
    .fetch_alivelist = up_fetch_alivelist,
    .set_etag = up_set_etag,
    .last_body = up_last_body,
    .forget_body = up_forget_body,
    .parse_body = up_parse_body,
    .requests = up_requests,
    .free = up_free,
};

/* ---------------------------------------------------------------------------------------- */
/* construction                                                                               */
/* ---------------------------------------------------------------------------------------- */

/* Percent-encode everything but RFC 3986 unreserved characters. */
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

static int build_query(pn_uniproxy *u, const pn_uniproxy_options *o)
{
    char q[1024];
    size_t pos = 0;
    const char *names[] = {"token=", "&node_id=", "&node_type=", "&machine_id="};
    const char *values[] = {o->token, o->node_id, o->node_type, o->machine_id};
    for (int i = 0; i < 4; i++) {
        if ((i == 2 && o->api_path != NULL) || values[i] == NULL)
            continue; /* API v2 takes no node_type (PANEL.md §1.1); machine_id: machine mode */
        size_t k = strlen(names[i]);
        if (pos + k >= sizeof q)
            return -ENAMETOOLONG;
        memcpy(q + pos, names[i], k + 1);
        pos += k;
        int rc = escape(q, sizeof q, &pos, values[i]);
        if (rc != 0)
            return rc;
    }
    u->query = strdup(q);
    return u->query != NULL ? 0 : -ENOMEM;
}

static int check_options(const pn_uniproxy_options *o, sv_error *err)
{
    const char *missing = o->url == NULL || o->url[0] == '\0' ? "url"
                          : o->token == NULL || o->token[0] == '\0' ? "token"
                          : o->node_id == NULL || o->node_id[0] == '\0' ? "node_id"
                          : o->node_type == NULL || o->node_type[0] == '\0' ? "node_type"
                          : NULL;
    if (missing != NULL)
        return sv_error_set(err, -EINVAL, "uniproxy panel: %s is required", missing);
    if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
        return sv_error_set(err, -EINVAL, "uniproxy panel: url must start with http:// or "
                            "https://");
    return 0;
}

int pn_uniproxy_new(const pn_uniproxy_options *o, pn_client **out, sv_error *err)
{
    *out = NULL;
    int rc = check_options(o, err);
    if (rc != 0)
        return rc;
    pn_uniproxy *u = calloc(1, sizeof *u);
    if (u == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    u->base.ops = &uniproxy_ops;
    u->timeout_ms = o->timeout_ms;
    u->api_path = o->api_path != NULL ? o->api_path : API_PATH;
    u->base_url = strdup(o->url);
    u->node_type = strdup(o->node_type);
    if (u->base_url == NULL || u->node_type == NULL)
        rc = -ENOMEM;
    else if ((rc = build_query(u, o)) == 0)
        rc = pn_http_new(o->loop, &u->http);
    if (rc != 0) {
        up_free(&u->base);
        return sv_error_set(err, rc, "uniproxy panel: %s", rc == -ENAMETOOLONG
                            ? "token, node_id or node_type too long" : "cannot initialise");
    }
    size_t n = strlen(u->base_url);
    while (n > 0 && u->base_url[n - 1] == '/')
        u->base_url[--n] = '\0';
    *out = &u->base;
    return 0;
}

static int up_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    char *e = etag != NULL ? strdup(etag) : NULL;
    if (etag != NULL && e == NULL)
        return -ENOMEM;
    free(u->good[kind].etag);
    u->good[kind].etag = e;
    return 0;
}

static const char *up_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                const char **etag)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    if (len != NULL)
        *len = u->good[kind].len;
    if (etag != NULL)
        *etag = u->good[kind].etag;
    return u->good[kind].body;
}

static void up_forget_body(pn_client *c, enum pn_body_kind kind)
{
    pn_uniproxy *u = (pn_uniproxy *)c;
    free(u->good[kind].body);
    u->good[kind].body = NULL;
    u->good[kind].len = 0;
}
