/*
 * The Xboard API v2 parsers (panel/xboard.h): a node channel message, the handshake answer and
 * the machine's node list (PROTOCOLS-2.md §6, PANEL.md §1.1). Pure: no I/O, no log; every input
 * bounded (PN_XB_MSG_MAX, PN_BODY_MAX), checked by pn_json_check() before any tree is built.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/jsonscan.h"
#include "panel/xboard.h"
/* ---------------------------------------------------------------------------------------- */
/* parsing                                                                                    */
/* ---------------------------------------------------------------------------------------- */

void pn_xb_event_free(pn_xb_event *ev)
{
    pn_node_free(&ev->node);
    free(ev->config_body);
    pn_users_free(&ev->users);
    free(ev->ids);
    pn_xb_machine_free(&ev->nodes);
    memset(ev, 0, sizeof *ev);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* -EINVAL when two entries of @p ids share an id (sorts @p ids). */
static int check_unique(uint64_t *ids, size_t n, const char *what, sv_error *err)
{
    if (n < 2) /* ids is NULL for an empty list: qsort's pointer must not be */
        return 0;
    qsort(ids, n, sizeof *ids, cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1])
            return sv_error_set(err, -EINVAL, "%s: user id %" PRIu64 " listed twice", what,
                                ids[i]);
    return 0;
}

static int users_unique(const pn_users *u, const char *what, sv_error *err)
{
    if (u->n < 2)
        return 0;
    uint64_t *ids = malloc(u->n * sizeof *ids);
    if (ids == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < u->n; i++)
        ids[i] = u->users[i].id;
    int rc = check_unique(ids, u->n, what, err);
    free(ids);
    return rc;
}

/* A positive integer id: a JSON integer or a decimal string (PHP may send either). */
static int get_id(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end = NULL;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (s[0] >= '1' && s[0] <= '9' && *end == '\0' && errno == 0) {
            *out = x;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_remove(const json_t *data, pn_xb_event *ev, sv_error *err)
{
    const json_t *users = json_object_get(data, "users");
    if (!json_is_array(users))
        return sv_error_set(err, -EINVAL, "users: expected an array");
    size_t n = json_array_size(users);
    if (n > PN_USERS_MAX)
        return sv_error_set(err, -EMSGSIZE, "users: more than %u entries", PN_USERS_MAX);
    if (n > 0 && (ev->ids = malloc(n * sizeof *ev->ids)) == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *u = json_array_get(users, i);
        if (get_id(json_is_object(u) ? json_object_get(u, "id") : u, &ev->ids[i]) != 0)
            return sv_error_set(err, -EINVAL, "users[%zu].id: expected a positive integer", i);
    }
    ev->n_ids = n;
    return check_unique(ev->ids, n, "users", err);
}

static int machine_nodes(const json_t *nodes, pn_xb_machine *out, const char *what,
                         sv_error *err);

static int parse_data(const char *event, const json_t *data, const char *node_type,
                      pn_xb_event *ev, sv_error *err)
{
    if (strcmp(event, "ping") == 0) {
        ev->kind = PN_XB_PING;
        return 0;
    }
    if (strcmp(event, "auth.success") == 0) {
        ev->kind = PN_XB_AUTH_OK;
        return 0;
    }
    if (strcmp(event, "error") == 0) {
        const json_t *m = json_is_object(data) ? json_object_get(data, "message") : NULL;
        const char *s = json_is_string(m) ? json_string_value(m) : "no message";
        size_t k = 0;
        for (; s[k] != '\0' && k < sizeof ev->message - 1; k++)
            ev->message[k] = isprint((unsigned char)s[k]) ? s[k] : '.';
        ev->message[k] = '\0';
        ev->kind = PN_XB_ERROR;
        return 0;
    }
    if (strcmp(event, "sync.nodes") == 0) { /* machine mode: the node set, no node_id */
        if (!json_is_object(data))
            return sv_error_set(err, -EINVAL, "data: expected an object");
        ev->kind = PN_XB_NODES;
        return machine_nodes(json_object_get(data, "nodes"), &ev->nodes, "data", err);
    }
    bool config = strcmp(event, "sync.config") == 0, users = strcmp(event, "sync.users") == 0;
    bool delta = strcmp(event, "sync.user.delta") == 0;
    if (!config && !users && !delta)
        return 0; /* PN_XB_IGNORED: unknown events are ignored (PROTOCOLS-2.md §6.5) */
    if (!json_is_object(data))
        return sv_error_set(err, -EINVAL, "data: expected an object");
    if (config) {
        const json_t *c = json_object_get(data, "config");
        if (!json_is_object(c))
            return sv_error_set(err, -EINVAL, "config: expected an object");
        ev->kind = PN_XB_CONFIG;
        int rc = pn_node_parse(c, node_type, 0, &ev->node, err);
        if (rc == 0 && (ev->config_body = json_dumps(c, JSON_COMPACT)) == NULL)
            rc = sv_error_set(err, -ENOMEM, "out of memory");
        ev->config_len = ev->config_body != NULL ? strlen(ev->config_body) : 0;
        return rc;
    }
    if (users) {
        ev->kind = PN_XB_USERS;
        int rc = pn_users_parse(data, 0, &ev->users, err);
        return rc != 0 ? rc : users_unique(&ev->users, "users", err);
    }
    ev->kind = PN_XB_DELTA;
    const json_t *action = json_object_get(data, "action");
    const char *a = json_is_string(action) ? json_string_value(action) : "";
    if (strcmp(a, "remove") == 0)
        return parse_remove(data, ev, err);
    if (strcmp(a, "add") != 0)
        return sv_error_set(err, -EINVAL, "action: expected \"add\" or \"remove\"");
    int rc = pn_users_parse(data, 0, &ev->users, err);
    return rc != 0 ? rc : users_unique(&ev->users, "users", err);
}

int pn_xb_event_parse(const char *msg, size_t len, const char *node_type, pn_xb_event *ev,
                      sv_error *err)
{
    memset(ev, 0, sizeof *ev);
    if (len > PN_XB_MSG_MAX)
        return sv_error_set(err, -EMSGSIZE, "message of %zu bytes (bound %u)", len,
                            PN_XB_MSG_MAX);
    json_error_t jerr;
    json_t *j = pn_json_check(msg, len, NULL) == 0 /* no tree of a broken one */
                ? json_loadb(msg, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        return sv_error_set(err, -EINVAL, "message is not a JSON object");
    }
    const json_t *event = json_object_get(j, "event"), *data = json_object_get(j, "data");
    int rc = 0;
    if (!json_is_string(event) || json_string_length(event) > 64) {
        rc = sv_error_set(err, -EINVAL, "event: expected a name");
        goto out;
    }
    const json_t *nid = json_is_object(data) ? json_object_get(data, "node_id") : NULL;
    if (nid != NULL && !json_is_null(nid)) {
        if (get_id(nid, &ev->node_id) != 0) {
            rc = sv_error_set(err, -EINVAL, "%s: data.node_id: expected a positive integer",
                              json_string_value(event));
            goto out;
        }
        ev->has_node_id = true;
    }
    sv_error inner = {0};
    rc = parse_data(json_string_value(event), data, node_type, ev, &inner);
    if (rc != 0)
        sv_error_set(err, rc, "%s: %s", json_string_value(event), inner.msg);
out:
    json_decref(j);
    if (rc != 0) { /* kind and node id stay: a resync goes to that node */
        enum pn_xb_kind kind = ev->kind;
        bool has_node_id = ev->has_node_id;
        uint64_t node_id = ev->node_id;
        pn_xb_event_free(ev);
        ev->kind = kind;
        ev->has_node_id = has_node_id;
        ev->node_id = node_id;
    }
    return rc;
}

int pn_xb_parse_handshake(const char *body, size_t len, char **url, sv_error *err)
{
    *url = NULL;
    json_error_t jerr;
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    const json_t *ws = json_is_object(j) ? json_object_get(j, "websocket") : NULL;
    int rc = 0;
    if (!json_is_object(ws)) {
        rc = sv_error_set(err, -EINVAL, "handshake: %s", j == NULL ? "body is not JSON"
                          : "websocket: expected an object");
        goto out;
    }
    const json_t *en = json_object_get(ws, "enabled"), *u = json_object_get(ws, "ws_url");
    if (!json_is_true(en))
        goto out;
    const char *s = json_is_string(u) ? json_string_value(u) : "";
    if ((strncmp(s, "ws://", 5) != 0 && strncmp(s, "wss://", 6) != 0) ||
        strlen(s) > PN_XB_URL_MAX / 2) {
        rc = sv_error_set(err, -EINVAL, "handshake: websocket.ws_url: expected a ws:// or "
                          "wss:// URL");
        goto out;
    }
    for (const char *p = s; *p != '\0'; p++)
        if (!isgraph((unsigned char)*p)) {
            rc = sv_error_set(err, -EINVAL, "handshake: websocket.ws_url: not a URL");
            goto out;
        }
    if ((*url = strdup(s)) == NULL)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
out:
    json_decref(j);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* machine mode                                                                               */
/* ---------------------------------------------------------------------------------------- */

void pn_xb_machine_free(pn_xb_machine *m)
{
    if (m == NULL)
        return;
    free(m->nodes);
    memset(m, 0, sizeof *m);
}

static int cmp_machine_node(const void *a, const void *b)
{
    uint64_t x = ((const pn_xb_machine_node *)a)->id, y = ((const pn_xb_machine_node *)b)->id;
    return x < y ? -1 : x > y;
}

static int machine_type(const json_t *v, char *out)
{
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    if (n == 0 || n > PN_XB_TYPE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_' &&
            s[i] != '-')
            return -EINVAL;
    memcpy(out, s, n + 1);
    return 0;
}

/* base_config.{push,pull}_interval: an integer or a decimal string (PANEL.md §4.6), 0..86400. */
static int machine_interval(const json_t *bc, const char *key, uint32_t *out, sv_error *err)
{
    const json_t *v = json_object_get(bc, key);
    long long x = -1;
    if (v == NULL || json_is_null(v))
        return 0;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_string(v) && json_string_length(v) > 0 && json_string_length(v) < 8) {
        char *end = NULL;
        x = strtoll(json_string_value(v), &end, 10);
        if (*end != '\0')
            x = -1;
    }
    if (x < 0 || x > 86400)
        return sv_error_set(err, -EINVAL, "machine nodes: base_config.%s: expected 0..86400 "
                            "seconds", key);
    *out = (uint32_t)x;
    return 0;
}

/* The `nodes` array of a machine list or a `sync.nodes` event into @p out (nodes, n), sorted by
 * id; @p what prefixes errors. 0, -EINVAL, -EMSGSIZE or -ENOMEM (out's nodes then freed). */
static int machine_nodes(const json_t *nodes, pn_xb_machine *out, const char *what,
                         sv_error *err)
{
    if (!json_is_array(nodes))
        return sv_error_set(err, -EINVAL, "%s: nodes: expected an array", what);
    size_t n = json_array_size(nodes);
    int rc = 0;
    if (n > PN_XB_MACHINE_NODES_MAX)
        return sv_error_set(err, -EMSGSIZE, "%s: %zu nodes (bound %u)", what, n,
                            PN_XB_MACHINE_NODES_MAX);
    if (n > 0 && (out->nodes = calloc(n, sizeof *out->nodes)) == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *e = json_array_get(nodes, i);
        pn_xb_machine_node *mn = &out->nodes[i];
        const json_t *id = json_is_object(e) ? json_object_get(e, "id") : NULL;
        if (!json_is_object(e))
            rc = sv_error_set(err, -EINVAL, "%s: nodes[%zu]: expected an object", what, i);
        else if (get_id(id, &mn->id) != 0 || mn->id > INT64_MAX)
            rc = sv_error_set(err, -EINVAL, "%s: nodes[%zu].id: expected a positive integer",
                              what, i);
        else if (machine_type(json_object_get(e, "type"), mn->type) != 0)
            rc = sv_error_set(err, -EINVAL, "%s: nodes[%zu].type: expected a node type name",
                              what, i);
        for (size_t k = 0; rc == 0 && k < i; k++)
            if (out->nodes[k].id == mn->id)
                rc = sv_error_set(err, -EINVAL, "%s: nodes[%zu].id: duplicate id %" PRIu64,
                                  what, i, mn->id);
    }
    if (rc != 0) {
        free(out->nodes);
        out->nodes = NULL;
        return rc;
    }
    out->n = n;
    if (n > 1)
        qsort(out->nodes, n, sizeof *out->nodes, cmp_machine_node);
    return 0;
}

int pn_xb_parse_machine(const char *body, size_t len, pn_xb_machine *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    if (len > PN_BODY_MAX)
        return sv_error_set(err, -EMSGSIZE, "machine nodes: body of %zu bytes (bound %u)", len,
                            PN_BODY_MAX);
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    const json_t *nodes = json_is_object(j) ? json_object_get(j, "nodes") : NULL;
    const json_t *bc = json_is_object(j) ? json_object_get(j, "base_config") : NULL;
    int rc = 0;
    if (!json_is_array(nodes)) {
        rc = sv_error_set(err, -EINVAL, "machine nodes: %s", j == NULL ? "body is not JSON"
                          : !json_is_object(j) ? "body is not a JSON object"
                                               : "nodes: expected an array");
        goto out;
    }
    size_t n = json_array_size(nodes);
    if (n > PN_XB_MACHINE_NODES_MAX) {
        rc = sv_error_set(err, -EMSGSIZE, "machine nodes: %zu nodes (bound %u)", n,
                          PN_XB_MACHINE_NODES_MAX);
        goto out;
    }
    if (bc != NULL && !json_is_null(bc) && !json_is_object(bc) &&
        !(json_is_array(bc) && json_array_size(bc) == 0)) { /* PHP's empty map is [] */
        rc = sv_error_set(err, -EINVAL, "machine nodes: base_config: expected an object");
        goto out;
    }
    if (json_is_object(bc) &&
        ((rc = machine_interval(bc, "push_interval", &out->push_interval, err)) != 0 ||
         (rc = machine_interval(bc, "pull_interval", &out->pull_interval, err)) != 0))
        goto out;
    rc = machine_nodes(nodes, out, "machine nodes", err);
out:
    json_decref(j);
    if (rc != 0)
        pn_xb_machine_free(out);
    return rc;
}
