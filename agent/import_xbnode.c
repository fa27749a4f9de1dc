/*
 * `katana import xboard-node FILE`: Xboard-Node's config.yml (cedar2025/Xboard-Node
 * config.yml.example and internal/config: "panel", "node", "kernel", "cert", "log", "ws",
 * "nodes" for several nodes of one panel, "machine" for machine mode, "instances" for several
 * panels) onto katana's configuration. Xboard-Node speaks Xboard's API v2, so every node becomes
 * an `xboard` panel node (a machine an `xboard` machine entry).
 */
#include "agent/import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define INTERVALS "katana pulls and pushes at the panel's base_config intervals"

static const ag_import_key cfg_keys[] = {
    {"panel", NULL}, {"node", NULL}, {"kernel", NULL}, {"cert", NULL}, {"log", NULL},
    {"runtime", NULL}, {"nodes", NULL}, {"machine", NULL}, {"instances", NULL},
    {"ws", "katana's node channel reconnects after 1 s, doubling to 60 s; not configurable"},
    {"standalone", "a standalone node is not imported: write a katana node with panel type "
                   "local by hand"},
    {"health_port", "katana's health check is GET /healthz on api.listen"},
    {NULL, NULL}};
static const ag_import_key panel_keys[] = {
    {"url", NULL}, {"token", NULL}, {"token_env", NULL}, {"node_id", NULL},
    {"node_type", NULL}, {NULL, NULL}};
static const ag_import_key node_keys[] = {
    {"push_interval", INTERVALS}, {"pull_interval", INTERVALS},
    {"track_interval", "katana counts usage continuously"},
    {"device_report_interval", "katana reports online IPs at every push"}, {NULL, NULL}};
static const ag_import_key kernel_keys[] = {
    {"type", NULL}, {"config_dir", NULL},
    {"log_level", "katana has one log (log.level)"},
    {"geo_data_dir", "katana needs no geo data files"},
    {"custom_outbound", "katana's outbounds are direct and block (outbound, nodes[].outbound)"},
    {"custom_route", "katana has no local routes: its routes come from the panel (routes)"},
    {"custom_config", "a raw kernel config has no katana equivalent"},
    {NULL, NULL}};
static const ag_import_key cert_keys[] = {
    {"auto_tls", NULL}, {"domain", NULL}, {"email", NULL}, {"cert_file", NULL},
    {"key_file", NULL}, {"cert_dir", NULL}, {"http_port", NULL}, {"cert_mode", NULL},
    {"dns_provider", NULL}, {"dns_env", NULL}, {"cert_content", NULL}, {"key_content", NULL},
    {NULL, NULL}};
static const ag_import_key log_keys[] = {
    {"level", NULL}, {"output", "katana logs to stderr (the journal under systemd)"},
    {NULL, NULL}};
static const ag_import_key entry_keys[] = {
    {"node_id", NULL}, {"node_type", NULL}, {"cert", NULL},
    {"kernel", "katana has one engine for every node; per-node kernel settings are left out"},
    {NULL, NULL}};
static const ag_import_key machine_keys[] = {
    {"machine_id", NULL}, {"token", NULL}, {"token_env", NULL}, {NULL, NULL}};

/* A token written out, or the value of the environment variable token_env names. */
static const char *token_of(ag_import *im, const char *where, const json_t *obj)
{
    const char *t = ag_import_str(obj, "token"), *env = ag_import_str(obj, "token_env");
    if (t != NULL || env == NULL)
        return t;
    t = getenv(env);
    if (t != NULL && t[0] != '\0')
        ag_import_warnf(im, "%s.token_env %.64s: katana reads no token from the environment; "
                        "wrote the value of $%.64s into the config", where, env, env);
    return t != NULL && t[0] != '\0' ? t : NULL;
}

/* cert: the explicit cert_mode, else file when cert_file is set, http with auto_tls. */
static void map_cert(ag_import *im, json_t *node, const char *where, const char *type,
                     const json_t *cert)
{
    char w[200];
    snprintf(w, sizeof w, "%.96s.cert", where);
    ag_import_keys(im, w, cert, cert_keys);
    ag_import_cert c = {.mode = ag_import_str(cert, "cert_mode"),
                        .cert_file = ag_import_str(cert, "cert_file"),
                        .key_file = ag_import_str(cert, "key_file"),
                        .domain = ag_import_str(cert, "domain"),
                        .provider = ag_import_str(cert, "dns_provider")};
    if (c.mode == NULL)
        c.mode = c.cert_file != NULL                 ? "file"
                 : ag_import_true(cert, "auto_tls") ? "http"
                                                     : NULL;
    ag_import_set_cert(im, node, w, type, &c);
}

/* One node of the panel @p url: node_id and node_type from @p src (panel or a nodes entry). */
static int add_node(ag_import *im, const char *where, const char *url, const char *token,
                    const json_t *src, const json_t *cert, sv_error *err)
{
    json_int_t id = 0;
    const char *raw = ag_import_str(src, "node_type");
    if (!ag_import_int(src, "node_id", &id) || id <= 0)
        return sv_error_set(err, -EBADMSG, "%s.node_id: a positive node id is required", where);
    const char *type = ag_import_node_type(raw, false);
    if (type == NULL) {
        ag_import_warnf(im, "%s.node_type \"%.32s\": katana's xboard panel needs the node type, "
                        "one of shadowsocks, trojan, vless and vmess; node %lld left out", where,
                        raw != NULL ? raw : "", (long long)id);
        return 0;
    }
    json_t *node = ag_import_node(im, NULL, "xboard", url, token, id, type);
    if (node == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    map_cert(im, node, where, type, cert);
    return 0;
}

static int map_machine(ag_import *im, const char *where, const char *url, const json_t *m,
                       const json_t *cert, sv_error *err)
{
    char w[200];
    json_int_t id = 0;
    snprintf(w, sizeof w, "%.96s.machine", where);
    ag_import_keys(im, w, m, machine_keys);
    const char *token = token_of(im, w, m);
    if (!ag_import_int(m, "machine_id", &id) || id <= 0 || token == NULL)
        return sv_error_set(err, -EBADMSG, "%s: a positive machine_id and a token are required",
                            w);
    json_t *node = ag_import_node(im, NULL, "xboard", url, token, id, "machine");
    if (node == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    map_cert(im, node, where, "machine", cert);
    return 0;
}

static void check_sections(ag_import *im, const char *where, const json_t *c)
{
    char w[200];
    ag_import_keys(im, where[0] != '\0' ? where : "(top)", c, cfg_keys);
    snprintf(w, sizeof w, "%.96s%spanel", where, where[0] != '\0' ? "." : "");
    ag_import_keys(im, w, ag_import_get(c, "panel"), panel_keys);
    snprintf(w, sizeof w, "%.96s%snode", where, where[0] != '\0' ? "." : "");
    ag_import_keys(im, w, ag_import_get(c, "node"), node_keys);
    snprintf(w, sizeof w, "%.96s%skernel", where, where[0] != '\0' ? "." : "");
    ag_import_keys(im, w, ag_import_get(c, "kernel"), kernel_keys);
    snprintf(w, sizeof w, "%.96s%slog", where, where[0] != '\0' ? "." : "");
    ag_import_keys(im, w, ag_import_get(c, "log"), log_keys);
}

/* One configuration (the file, or one of its instances with @p parent the file). */
static int map_config(ag_import *im, const char *where, const json_t *c, const json_t *parent,
                      sv_error *err)
{
    char w[200];
    size_t i;
    json_t *e;
    check_sections(im, where, c);
    const json_t *panel = ag_import_get(c, "panel"), *cert = ag_import_get(c, "cert");
    if (cert == NULL && parent != NULL)
        cert = ag_import_get(parent, "cert"); /* instances inherit the top-level cert */
    snprintf(w, sizeof w, "%.96s%spanel", where, where[0] != '\0' ? "." : "");
    const char *url = ag_import_str(panel, "url");
    if (url == NULL)
        return sv_error_set(err, -EBADMSG, "%s.url is required", w);
    const json_t *machine = ag_import_get(c, "machine");
    json_int_t mid = 0;
    if (ag_import_int(machine, "machine_id", &mid) && mid > 0)
        return map_machine(im, where[0] != '\0' ? where : "(top)", url, machine, cert, err);
    const char *token = token_of(im, w, panel);
    if (token == NULL)
        return sv_error_set(err, -EBADMSG, "%s.token is required (or token_env naming a set "
                            "variable)", w);
    const json_t *nodes = ag_import_get(c, "nodes");
    if (json_array_size(nodes) == 0)
        return add_node(im, w, url, token, panel, cert, err);
    json_array_foreach(nodes, i, e) {
        char ew[200];
        snprintf(ew, sizeof ew, "%s%snodes[%zu]", where, where[0] != '\0' ? "." : "", i);
        ag_import_keys(im, ew, e, entry_keys);
        const json_t *ec = ag_import_get(e, "cert");
        int rc = add_node(im, ew, url, token, e, ec != NULL ? ec : cert, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int ag_import_xbnode(ag_import *im, const json_t *root, sv_error *err)
{
    size_t i;
    json_t *inst;
    const json_t *log = ag_import_get(root, "log");
    ag_import_log_level(im, "log.level", ag_import_str(log, "level"));
    const json_t *list = ag_import_get(root, "instances");
    if (json_array_size(list) == 0)
        return map_config(im, "", root, NULL, err);
    check_sections(im, "", root); /* the defaults every instance inherits */
    json_array_foreach(list, i, inst) {
        char where[64];
        snprintf(where, sizeof where, "instances[%zu]", i);
        if (!json_is_object(inst))
            return sv_error_set(err, -EBADMSG, "%s: expected a mapping", where);
        int rc = map_config(im, where, inst, root, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}
