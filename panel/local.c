/*
 * The local panel: node settings and users from inline JSON or from files, in the UniProxy
 * shapes (PANEL.md §1.4, §1.5). Files are read again on every fetch. The operator writes these
 * bodies, so keys no UniProxy body has are refused (PN_PARSE_STRICT) to catch typos.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "panel/panel.h"

typedef struct pn_local {
    pn_client base; /* first: a pn_client * is a pn_local * */
    json_t *node;   /* own references, or NULL */
    json_t *users;
    char *node_file;
    char *users_file;
    char *node_type;
    bool typed;     /* node_type was configured (else "shadowsocks" is assumed) */
} pn_local;

/* Either the inline body (a new reference) or the parsed file, whose errors name the config
 * key @p file_key ("node_file: /etc/katana/node.json: No such file or directory"). */
static int local_body(json_t *inline_body, const char *file, const char *file_key,
                      json_t **out, sv_error *err)
{
    if (inline_body != NULL) {
        *out = json_incref(inline_body);
        return 0;
    }
    int rc = pn_json_load_file(file, PN_BODY_MAX, out, err);
    if (rc != 0) {
        sv_error inner = *err;
        sv_error_set(err, rc, "%s: %s", file_key, inner.msg);
    }
    return rc;
}

/* A body without "protocol" and without "cipher" on a panel without node_type is not the
 * shadowsocks node katana would assume: name the key the operator must write. */
static int check_typed(const pn_local *l, const json_t *body, sv_error *err)
{
    if (l->typed || !json_is_object(body) || json_object_get(body, "protocol") != NULL ||
        json_object_get(body, "cipher") != NULL)
        return 0;
    return sv_error_set(err, -EINVAL, "node_type: missing (the node body has no \"protocol\" "
                        "and no \"cipher\": set the panel's \"node_type\" to \"trojan\", "
                        "\"vless\" or \"vmess\", or the body's \"cipher\" for shadowsocks)");
}

/* Prefix a parser's message with what was parsed. */
static int wrap_error(sv_error *err, const char *what, const char *file)
{
    sv_error inner = *err;
    if (file != NULL)
        return sv_error_set(err, inner.code, "%s %s: %s", what, file, inner.msg);
    return sv_error_set(err, inner.code, "%s: %s", what, inner.msg);
}

static int local_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    pn_local *l = (pn_local *)c;
    sv_error err = {0};
    json_t *body = NULL;
    pn_node node;
    int rc = local_body(l->node, l->node_file, "node_file", &body, &err);
    if (rc == 0) {
        rc = pn_node_parse(body, l->node_type, PN_PARSE_STRICT, &node, &err);
        if (rc == 0 && (rc = check_typed(l, body, &err)) != 0)
            pn_node_free(&node);
        if (rc != 0)
            wrap_error(&err, "node body", l->node != NULL ? NULL : l->node_file);
    }
    json_decref(body);
    if (rc != 0) {
        cb(c, rc, NULL, &err, arg);
        return 0;
    }
    cb(c, PN_OK, &node, NULL, arg); /* may free c: nothing below touches it */
    pn_node_free(&node);
    return 0;
}

static int local_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    pn_local *l = (pn_local *)c;
    sv_error err = {0};
    json_t *body = NULL;
    pn_users users = {0};
    int rc;
    if (l->users != NULL) {
        rc = local_body(l->users, NULL, "users_file", &body, &err);
    } else { /* the plain shape is read without a JSON tree (pn_users_scan) */
        char *text = NULL;
        size_t len = 0;
        rc = pn_read_file(l->users_file, PN_BODY_MAX, &text, &len, &err);
        if (rc != 0) {
            sv_error inner = err;
            sv_error_set(&err, rc, "users_file: %s", inner.msg);
        }
        int scanned = rc == 0 ? pn_users_scan(text, len, &users) : rc;
        if (scanned == 1)
            rc = pn_json_parse_text(l->users_file, text, len, &body, &err);
        else if (rc == 0 && scanned < 0)
            rc = sv_error_set(&err, scanned, "users body %s: out of memory", l->users_file);
        free(text);
    }
    if (rc == 0 && body != NULL) {
        rc = pn_users_parse(body, PN_PARSE_STRICT, &users, &err);
        if (rc != 0)
            wrap_error(&err, "users body", l->users != NULL ? NULL : l->users_file);
    }
    json_decref(body);
    if (rc != 0) {
        cb(c, rc, NULL, &err, arg);
        return 0;
    }
    cb(c, PN_OK, &users, NULL, arg);
    pn_users_free(&users);
    return 0;
}

static void local_free(pn_client *c)
{
    pn_local *l = (pn_local *)c;
    json_decref(l->node);
    json_decref(l->users);
    free(l->node_file);
    free(l->users_file);
    free(l->node_type);
    free(l);
}

static const pn_client_ops local_ops = {
    .type = "local",
    .fetch_node = local_fetch_node,
    .fetch_users = local_fetch_users,
    .free = local_free,
};

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = strdup(src);
    return *dst != NULL ? 0 : -ENOMEM;
}

int pn_local_new(const pn_local_options *opts, pn_client **out, sv_error *err)
{
    *out = NULL;
    if ((opts->node == NULL) == (opts->node_file == NULL))
        return sv_error_set(err, -EINVAL, "local panel: exactly one of node and node_file");
    if ((opts->users == NULL) == (opts->users_file == NULL))
        return sv_error_set(err, -EINVAL, "local panel: exactly one of users and users_file");
    pn_local *l = calloc(1, sizeof *l);
    if (l == NULL)
        return sv_error_set(err, -ENOMEM, "local panel: out of memory");
    l->base.ops = &local_ops;
    /* json_incref takes a non-const pointer; the body is never modified. */
    l->node = json_incref((json_t *)opts->node);
    l->users = json_incref((json_t *)opts->users);
    l->typed = opts->node_type != NULL;
    if (dup_opt(&l->node_file, opts->node_file) != 0 ||
        dup_opt(&l->users_file, opts->users_file) != 0 ||
        dup_opt(&l->node_type, opts->node_type != NULL ? opts->node_type : "shadowsocks") != 0) {
        local_free(&l->base);
        return sv_error_set(err, -ENOMEM, "local panel: out of memory");
    }
    *out = &l->base;
    return 0;
}
