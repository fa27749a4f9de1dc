/*
 * The UniProxy node body (`GET config`, PANEL.md §1.4, §4.6): its parser and the node's life
 * cycle (free, clone, equal). Panel bodies are outside bytes: unknown keys are listed for a
 * warning, not refused (panels add keys); an operator's body (PN_PARSE_STRICT) refuses the first
 * one. Every string and list has a bound, and the first malformed field fails the whole body
 * with its path. Shared helpers: panel/model_internal.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/keys.h"
#include "panel/model.h"
#include "panel/model_internal.h"
#include "supervisor/util/closest.h"

/* An optional string member: absent or null leaves *out NULL. */
static int opt_string(const json_t *obj, const char *key, char **out, sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    return pn__take_string(v, key, PN_TEXT_MAX, out, err);
}

/* anytls `padding_scheme` (PROTOCOLS-3.md §5.5: an array of lines; a string is taken as it is):
 * the lines joined by "\n", none at the end, at most PN_TEXT_MAX bytes; NULL when absent, null
 * or empty. */
static int opt_lines(const json_t *obj, const char *key, char **out, sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0))
        return 0;
    if (!json_is_array(v))
        return pn__take_string(v, key, PN_TEXT_MAX, out, err);
    size_t total = 0, i;
    const json_t *line;
    json_array_foreach(v, i, line) {
        if (!json_is_string(line))
            return sv_error_set(err, -EINVAL, "%s[%zu]: expected a string", key, i);
        total += json_string_length(line) + 1;
    }
    if (total > PN_TEXT_MAX)
        return sv_error_set(err, -EINVAL, "%s: longer than %u bytes", key, PN_TEXT_MAX);
    char *s = malloc(total);
    if (s == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", key);
    size_t at = 0;
    json_array_foreach(v, i, line) {
        size_t n = json_string_length(line);
        memcpy(s + at, json_string_value(line), n);
        at += n;
        s[at++] = '\n';
    }
    s[at - 1] = '\0';
    *out = s;
    return 0;
}

/* An optional non-negative member: absent or null gives 0. */
static int opt_uint(const json_t *obj, const char *key, const char *path, uint64_t max,
                    bool allow_string, uint64_t *out, sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    return pn__get_uint(v, path, max, allow_string, out, err);
}

/* Keys of every UniProxy body shape (PANEL.md §1.4 common and per-type keys, §1.5). */
static const char *const node_keys[] = {
    "protocol", "listen_ip", "server_port", "network", "networkSettings", "network_settings",
    "routes", "custom_outbounds", "custom_routes", "cert_config", "base_config", "cipher",
    "plugin", "plugin_opts", "server_key", "obfs", "obfs_settings", "obfs-password", "tls",
    "tls_settings", "tlsSettings", "multiplex", "flow", "decryption", "host", "server_name",
    "version", "up_mbps", "down_mbps", "ignore_client_bandwidth", "congestion_control",
    "auth_timeout", "zero_rtt_handshake", "heartbeat", "padding_scheme", "transport",
    "traffic_pattern", "alpn", "udp_relay_mode", NULL};
static const char *const base_config_keys[] = {
    "push_interval", "pull_interval", "node_report_min_traffic", "device_online_min_traffic",
    NULL};
static const char *const route_keys[] = {"id", "match", "action", "action_value", NULL};
/* `tls_settings` of a REALITY node (PANEL.md §1.4 vless/trojan with tls 2; max_time_diff:
 * PROTOCOLS-2.md §1.1). */
static const char *const reality_keys[] = {"server_name", "server_port", "public_key",
                                           "private_key", "short_id", "allow_insecure",
                                           "max_time_diff", NULL};

/* How a parse treats unknown keys: strict (refuse) or listing them into node->unknown. */
typedef struct key_ctx {
    bool strict;
    pn__unknown_list list;
} key_ctx;

void pn__list_unknown(void *arg, const char *path, const char *closest)
{
    pn__unknown_list *l = arg;
    char line[PN_KEY_PATH_MAX + SV_CLOSEST_MAX + 24];
    if (l->n >= PN_UNKNOWN_MAX || l->failed != 0)
        return;
    int n = closest != NULL ? snprintf(line, sizeof line, "%s (did you mean \"%s\"?)\n", path,
                                       closest)
                            : snprintf(line, sizeof line, "%s\n", path);
    if (n < 0)
        return;
    size_t old = l->node->unknown != NULL ? strlen(l->node->unknown) : 0;
    char *u = realloc(l->node->unknown, old + (size_t)n + 1);
    if (u == NULL) {
        l->failed = -ENOMEM;
        return;
    }
    memcpy(u + old, line, (size_t)n + 1);
    l->node->unknown = u;
    l->n++;
}

/* The keys of @p obj (at @p prefix) against @p known, as @p kc says. */
static int check_keys(const json_t *obj, key_ctx *kc, const char *prefix,
                      const char *const *known, sv_error *err)
{
    int rc = pn_keys_check(obj, prefix, known, kc->strict, pn__list_unknown, &kc->list, err);
    if (rc == 0 && kc->list.failed != 0)
        rc = sv_error_set(err, kc->list.failed, "%s: out of memory", prefix[0] ? prefix : "node");
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* routes                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static int match_push(pn_route *r, const char *s, size_t n, const char *path, sv_error *err)
{
    if (r->n_match >= PN_MATCH_MAX)
        return sv_error_set(err, -EMSGSIZE, "%s: more than %u entries", path, PN_MATCH_MAX);
    if (n > PN_TEXT_MAX)
        return sv_error_set(err, -EMSGSIZE, "%s: an entry is longer than %u bytes", path,
                            PN_TEXT_MAX);
    char **v = realloc(r->match, (r->n_match + 1) * sizeof *v);
    if (v == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    r->match = v;
    v[r->n_match] = pn__dup_n(s, n);
    if (v[r->n_match] == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    r->n_match++;
    return 0;
}

/* Legacy v1.7 rows: "a,b, c" (PANEL.md §1.4). Blanks around entries are dropped; an empty entry
 * is kept so lowering can warn about it rather than silently matching nothing. */
static int match_split(pn_route *r, const char *s, const char *path, sv_error *err)
{
    for (;;) {
        const char *comma = strchr(s, ',');
        const char *end = comma != NULL ? comma : s + strlen(s);
        const char *b = s;
        while (b < end && (*b == ' ' || *b == '\t'))
            b++;
        const char *e = end;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        int rc = match_push(r, b, (size_t)(e - b), path, err);
        if (rc != 0 || comma == NULL)
            return rc;
        s = comma + 1;
    }
}

static int match_one(pn_route *r, const json_t *v, const char *path, sv_error *err)
{
    if (!json_is_string(v))
        return sv_error_set(err, -EINVAL, "%s: expected strings", path);
    return match_push(r, json_string_value(v), json_string_length(v), path, err);
}

static int parse_match(pn_route *r, const json_t *m, const char *path, sv_error *err)
{
    int rc = 0;
    if (m == NULL || json_is_null(m))
        return 0;
    if (json_is_string(m)) {
        if (json_string_length(m) == 0)
            return 0;
        return match_split(r, json_string_value(m), path, err);
    }
    if (json_is_array(m)) {
        size_t i;
        const json_t *v;
        json_array_foreach(m, i, v) {
            rc = match_one(r, v, path, err);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    if (json_is_object(m)) { /* a sparse PHP array after array_filter */
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)m, k, v) {
            rc = match_one(r, v, path, err);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    return sv_error_set(err, -EINVAL, "%s: expected an array or a string", path);
}

static void route_free(pn_route *r)
{
    for (size_t i = 0; i < r->n_match; i++)
        free(r->match[i]);
    free(r->match);
    free(r->action);
    free(r->action_value);
    memset(r, 0, sizeof *r);
}

static int parse_route(const json_t *v, size_t idx, key_ctx *kc, pn_route *r, sv_error *err)
{
    char path[64];
    int rc;
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "routes[%zu]: expected an object", idx);
    snprintf(path, sizeof path, "routes[%zu]", idx);
    rc = check_keys(v, kc, path, route_keys, err);
    if (rc != 0)
        return rc;
    const json_t *id = json_object_get(v, "id");
    if (json_is_integer(id))
        r->id = json_integer_value(id);
    snprintf(path, sizeof path, "routes[%zu].match", idx);
    rc = parse_match(r, json_object_get(v, "match"), path, err);
    if (rc != 0)
        return rc;
    snprintf(path, sizeof path, "routes[%zu].action", idx);
    const json_t *a = json_object_get(v, "action");
    if (a == NULL || json_is_null(a))
        return sv_error_set(err, -EINVAL, "%s: missing", path);
    rc = pn__take_string(a, path, PN_TEXT_MAX, &r->action, err);
    if (rc != 0)
        return rc;
    const json_t *av = json_object_get(v, "action_value");
    if (av == NULL || json_is_null(av))
        return 0;
    snprintf(path, sizeof path, "routes[%zu].action_value", idx);
    return pn__take_string(av, path, PN_TEXT_MAX, &r->action_value, err);
}

static int parse_routes(const json_t *routes, key_ctx *kc, pn_node *out, sv_error *err)
{
    if (routes == NULL || json_is_null(routes))
        return 0;
    if (!json_is_array(routes))
        return sv_error_set(err, -EINVAL, "routes: expected an array");
    size_t n = json_array_size(routes);
    if (n > PN_ROUTES_MAX)
        return sv_error_set(err, -EMSGSIZE, "routes: more than %u entries", PN_ROUTES_MAX);
    if (n == 0)
        return 0;
    out->routes = calloc(n, sizeof *out->routes);
    if (out->routes == NULL)
        return sv_error_set(err, -ENOMEM, "routes: out of memory");
    out->n_routes = n;
    for (size_t i = 0; i < n; i++) {
        int rc = parse_route(json_array_get(routes, i), i, kc, &out->routes[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* node                                                                                         */
/* ------------------------------------------------------------------------------------------ */

static int parse_intervals(const json_t *body, key_ctx *kc, pn_node *out, sv_error *err)
{
    const json_t *bc = json_object_get(body, "base_config");
    uint64_t v;
    int rc;
    if (bc == NULL || json_is_null(bc))
        return 0;
    if (!json_is_object(bc))
        return sv_error_set(err, -EINVAL, "base_config: expected an object");
    rc = check_keys(bc, kc, "base_config", base_config_keys, err);
    if (rc != 0)
        return rc;
    rc = opt_uint(bc, "push_interval", "base_config.push_interval", 86400, true, &v, err);
    if (rc != 0)
        return rc;
    out->push_interval = (uint32_t)v;
    rc = opt_uint(bc, "pull_interval", "base_config.pull_interval", 86400, true, &v, err);
    if (rc != 0)
        return rc;
    out->pull_interval = (uint32_t)v;
    return 0;
}

/* Whether a member holds a value (see enum pn_node_set). */
static bool is_set(const json_t *v)
{
    if (v == NULL || json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    if (json_is_real(v))
        return json_real_value(v) != 0.0;
    if (json_is_string(v))
        return json_string_length(v) > 0 && strcmp(json_string_value(v), "0") != 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    return true;
}

/* The PN_SET_* bits of a node body. */
static unsigned node_set_bits(const json_t *body)
{
    static const struct {
        const char *key;
        unsigned bit;
    } keys[] = {{"networkSettings", PN_SET_NETWORK_SETTINGS},
                {"network_settings", PN_SET_NETWORK_SETTINGS_ALT},
                {"tls", PN_SET_TLS},
                {"custom_outbounds", PN_SET_CUSTOM_OUTBOUNDS},
                {"custom_routes", PN_SET_CUSTOM_ROUTES},
                {"flow", PN_SET_FLOW}};
    unsigned bits = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (is_set(json_object_get(body, keys[i].key)))
            bits |= keys[i].bit;
    const json_t *mux = json_object_get(body, "multiplex");
    if (json_is_object(mux) ? is_set(json_object_get(mux, "enabled")) : is_set(mux))
        bits |= PN_SET_MULTIPLEX;
    const json_t *dec = json_object_get(body, "decryption");
    if (is_set(dec) && !(json_is_string(dec) && strcmp(json_string_value(dec), "none") == 0))
        bits |= PN_SET_DECRYPTION;
    return bits;
}

/* The `tls` value (PANEL.md §1.4: 1 TLS, 2 REALITY). */
static unsigned tls_value(const json_t *v, unsigned set)
{
    if (!(set & PN_SET_TLS))
        return 0;
    if (json_is_integer(v))
        return json_integer_value(v) == 2 ? 2 : 1;
    if (json_is_string(v))
        return strcmp(json_string_value(v), "2") == 0 ? 2 : 1;
    return 1;
}

/* `networkSettings` (or `network_settings`): a ws or httpupgrade node's `path` and
 * `headers.Host` (PANEL.md §1.4), else `host` (Xray's httpupgradeSettings spelling);
 * a grpc node's `serviceName`. Other members are not read here. */
static int parse_network_settings(const json_t *body, pn_node *out, sv_error *err)
{
    const json_t *ns = json_object_get(body, "networkSettings");
    if (ns == NULL || json_is_null(ns))
        ns = json_object_get(body, "network_settings");
    if (!json_is_object(ns))
        return 0;
    int rc = opt_string(ns, "path", &out->ws_path, err);
    if (rc == 0)
        rc = opt_string(ns, "serviceName", &out->grpc_service, err);
    const json_t *h = json_object_get(ns, "headers");
    if (rc == 0 && json_is_object(h)) {
        rc = opt_string(h, "Host", &out->ws_host, err);
        if (rc == 0 && out->ws_host == NULL)
            rc = opt_string(h, "host", &out->ws_host, err);
    }
    if (rc == 0 && out->ws_host == NULL)
        rc = opt_string(ns, "host", &out->ws_host, err);
    return rc;
}

/* A `tls` 2 node's REALITY `tls_settings` (or `tlsSettings`; PANEL.md §1.4). */
static int parse_reality(const json_t *body, key_ctx *kc, pn_reality *out, sv_error *err)
{
    const char *name = "tls_settings";
    const json_t *ts = json_object_get(body, name);
    if (ts == NULL || json_is_null(ts))
        ts = json_object_get(body, name = "tlsSettings");
    if (ts == NULL || json_is_null(ts))
        return 0;
    if (!json_is_object(ts))
        return sv_error_set(err, -EINVAL, "tls_settings: expected an object");
    uint64_t port = 0;
    int rc = check_keys(ts, kc, name, reality_keys, err);
    if (rc == 0)
        rc = opt_string(ts, "server_name", &out->server_name, err);
    if (rc == 0)
        rc = opt_string(ts, "private_key", &out->private_key, err);
    if (rc == 0)
        rc = opt_string(ts, "short_id", &out->short_id, err);
    if (rc == 0)
        rc = opt_uint(ts, "server_port", "tls_settings.server_port", 65535, true, &port, err);
    if (rc == 0)
        rc = opt_uint(ts, "max_time_diff", "tls_settings.max_time_diff", UINT32_MAX, true,
                      &out->max_time_diff, err);
    out->server_port = (uint16_t)port;
    return rc;
}

static int parse_node_strings(const json_t *body, const char *node_type, key_ctx *kc,
                              pn_node *out, sv_error *err)
{
    int rc = opt_string(body, "protocol", &out->protocol, err);
    if (rc == 0 && out->protocol == NULL && node_type != NULL) {
        rc = pn__dup_opt(&out->protocol, node_type);
        if (rc != 0)
            sv_error_set(err, rc, "protocol: out of memory");
    }
    if (rc == 0 && out->protocol == NULL)
        rc = sv_error_set(err, -EINVAL, "protocol: missing");
    if (rc == 0)
        rc = opt_string(body, "listen_ip", &out->listen_ip, err);
    if (rc == 0)
        rc = opt_string(body, "cipher", &out->cipher, err);
    if (rc == 0 && json_is_string(json_object_get(body, "flow"))) /* else PN_SET_FLOW alone */
        rc = opt_string(body, "flow", &out->flow, err);
    if (rc == 0 && out->flow != NULL && out->flow[0] == '\0') {
        free(out->flow);
        out->flow = NULL;
    }
    if (rc == 0)
        rc = opt_string(body, "server_key", &out->server_key, err);
    if (rc == 0)
        rc = opt_string(body, "obfs", &out->obfs, err);
    if (rc == 0)
        rc = opt_string(body, "plugin", &out->plugin, err);
    if (rc == 0)
        rc = opt_string(body, "plugin_opts", &out->plugin_opts, err);
    if (rc == 0)
        rc = opt_string(body, "network", &out->network, err);
    if (rc == 0 && out->network != NULL && out->network[0] == '\0') {
        free(out->network);
        out->network = NULL;
    }
    if (rc == 0)
        rc = opt_string(body, "server_name", &out->server_name, err);
    if (rc == 0)
        rc = opt_string(body, "host", &out->host, err);
    if (rc == 0)
        rc = opt_lines(body, "padding_scheme", &out->padding_scheme, err);
    if (rc == 0)
        rc = parse_network_settings(body, out, err);
    out->set = node_set_bits(body);
    out->tls = tls_value(json_object_get(body, "tls"), out->set);
    if (rc == 0 && out->tls == 2)
        rc = parse_reality(body, kc, &out->reality, err);
    return rc;
}

int pn_node_parse(const json_t *body, const char *node_type, unsigned flags, pn_node *out,
                  sv_error *err)
{
    uint64_t port;
    int rc;
    memset(out, 0, sizeof *out);
    key_ctx kc = {.strict = (flags & PN_PARSE_STRICT) != 0, .list = {.node = out}};
    if (!json_is_object(body))
        return sv_error_set(err, -EINVAL, "node: expected an object");
    rc = check_keys(body, &kc, "", node_keys, err);
    if (rc == 0)
        rc = parse_node_strings(body, node_type, &kc, out, err);
    if (rc != 0)
        goto out;
    const json_t *p = json_object_get(body, "server_port");
    if (p == NULL || json_is_null(p)) {
        rc = sv_error_set(err, -EINVAL, "server_port: missing");
        goto out;
    }
    rc = pn__get_uint(p, "server_port", 65535, true, &port, err);
    if (rc == 0 && port == 0)
        rc = sv_error_set(err, -EINVAL, "server_port: must be between 1 and 65535");
    if (rc != 0)
        goto out;
    out->server_port = (uint16_t)port;
    rc = parse_intervals(body, &kc, out, err);
    if (rc == 0)
        rc = parse_routes(json_object_get(body, "routes"), &kc, out, err);
out:
    if (rc != 0)
        pn_node_free(out);
    return rc;
}

void pn_node_free(pn_node *node)
{
    if (node == NULL)
        return;
    free(node->protocol);
    free(node->listen_ip);
    free(node->network);
    free(node->cipher);
    free(node->flow);
    free(node->server_key);
    free(node->obfs);
    free(node->plugin);
    free(node->plugin_opts);
    free(node->server_name);
    free(node->host);
    free(node->padding_scheme);
    free(node->ws_path);
    free(node->ws_host);
    free(node->grpc_service);
    free(node->reality.server_name);
    free(node->reality.private_key);
    free(node->reality.short_id);
    free(node->reality.target);
    free(node->reality.server_names);
    free(node->reality.short_ids);
    free(node->unknown);
    for (size_t i = 0; i < node->n_routes; i++)
        route_free(&node->routes[i]);
    free(node->routes);
    memset(node, 0, sizeof *node);
}

/* ------------------------------------------------------------------------------------------ */
/* clone / equal                                                                                */
/* ------------------------------------------------------------------------------------------ */

static int route_clone(pn_route *d, const pn_route *s)
{
    memset(d, 0, sizeof *d);
    d->id = s->id;
    if (s->n_match > 0) {
        d->match = calloc(s->n_match, sizeof *d->match);
        if (d->match == NULL)
            return -ENOMEM;
        d->n_match = s->n_match;
        for (size_t i = 0; i < s->n_match; i++)
            if (pn__dup_opt(&d->match[i], s->match[i]) != 0)
                return -ENOMEM;
    }
    if (pn__dup_opt(&d->action, s->action) != 0 || pn__dup_opt(&d->action_value, s->action_value) != 0)
        return -ENOMEM;
    return 0;
}

static int node_clone_parts(pn_node *d, const pn_node *s)
{
    if (pn__dup_opt(&d->protocol, s->protocol) != 0 || pn__dup_opt(&d->listen_ip, s->listen_ip) != 0 ||
        pn__dup_opt(&d->network, s->network) != 0 ||
        pn__dup_opt(&d->cipher, s->cipher) != 0 || pn__dup_opt(&d->server_key, s->server_key) != 0 ||
        pn__dup_opt(&d->flow, s->flow) != 0 ||
        pn__dup_opt(&d->obfs, s->obfs) != 0 || pn__dup_opt(&d->plugin, s->plugin) != 0 ||
        pn__dup_opt(&d->plugin_opts, s->plugin_opts) != 0 ||
        pn__dup_opt(&d->server_name, s->server_name) != 0 || pn__dup_opt(&d->host, s->host) != 0 ||
        pn__dup_opt(&d->padding_scheme, s->padding_scheme) != 0 ||
        pn__dup_opt(&d->ws_path, s->ws_path) != 0 || pn__dup_opt(&d->ws_host, s->ws_host) != 0 ||
        pn__dup_opt(&d->grpc_service, s->grpc_service) != 0 ||
        pn__dup_opt(&d->reality.server_name, s->reality.server_name) != 0 ||
        pn__dup_opt(&d->reality.private_key, s->reality.private_key) != 0 ||
        pn__dup_opt(&d->reality.short_id, s->reality.short_id) != 0 ||
        pn__dup_opt(&d->reality.target, s->reality.target) != 0 ||
        pn__dup_opt(&d->reality.server_names, s->reality.server_names) != 0 ||
        pn__dup_opt(&d->reality.short_ids, s->reality.short_ids) != 0 ||
        pn__dup_opt(&d->unknown, s->unknown) != 0)
        return -ENOMEM;
    d->reality.server_port = s->reality.server_port;
    d->reality.max_time_diff = s->reality.max_time_diff;
    d->reality.min_client_ver = s->reality.min_client_ver;
    d->reality.max_client_ver = s->reality.max_client_ver;
    d->reality.xver = s->reality.xver;
    if (s->n_routes == 0)
        return 0;
    d->routes = calloc(s->n_routes, sizeof *d->routes);
    if (d->routes == NULL)
        return -ENOMEM;
    d->n_routes = s->n_routes;
    for (size_t i = 0; i < s->n_routes; i++)
        if (route_clone(&d->routes[i], &s->routes[i]) != 0)
            return -ENOMEM;
    return 0;
}

int pn_node_clone(pn_node *dst, const pn_node *src)
{
    memset(dst, 0, sizeof *dst);
    dst->server_port = src->server_port;
    dst->set = src->set;
    dst->tls = src->tls;
    dst->push_interval = src->push_interval;
    dst->pull_interval = src->pull_interval;
    int rc = node_clone_parts(dst, src);
    if (rc != 0)
        pn_node_free(dst);
    return rc;
}

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool route_eq(const pn_route *a, const pn_route *b)
{
    if (a->id != b->id || a->n_match != b->n_match || !str_eq(a->action, b->action) ||
        !str_eq(a->action_value, b->action_value))
        return false;
    for (size_t i = 0; i < a->n_match; i++)
        if (!str_eq(a->match[i], b->match[i]))
            return false;
    return true;
}

bool pn_node_equal(const pn_node *a, const pn_node *b)
{
    if (!str_eq(a->protocol, b->protocol) || !str_eq(a->listen_ip, b->listen_ip) ||
        a->server_port != b->server_port || !str_eq(a->network, b->network) ||
        a->set != b->set || !str_eq(a->cipher, b->cipher) || !str_eq(a->flow, b->flow) ||
        !str_eq(a->server_key, b->server_key) || !str_eq(a->obfs, b->obfs) ||
        !str_eq(a->plugin, b->plugin) || !str_eq(a->plugin_opts, b->plugin_opts) ||
        !str_eq(a->server_name, b->server_name) ||
        !str_eq(a->host, b->host) || !str_eq(a->padding_scheme, b->padding_scheme) ||
        !str_eq(a->ws_path, b->ws_path) ||
        !str_eq(a->ws_host, b->ws_host) || !str_eq(a->grpc_service, b->grpc_service) || a->tls != b->tls || a->push_interval != b->push_interval ||
        a->pull_interval != b->pull_interval || a->n_routes != b->n_routes ||
        !str_eq(a->reality.server_name, b->reality.server_name) ||
        !str_eq(a->reality.private_key, b->reality.private_key) ||
        !str_eq(a->reality.short_id, b->reality.short_id) ||
        a->reality.server_port != b->reality.server_port ||
        a->reality.max_time_diff != b->reality.max_time_diff ||
        !str_eq(a->reality.target, b->reality.target) ||
        !str_eq(a->reality.server_names, b->reality.server_names) ||
        !str_eq(a->reality.short_ids, b->reality.short_ids) ||
        a->reality.min_client_ver != b->reality.min_client_ver ||
        a->reality.max_client_ver != b->reality.max_client_ver ||
        a->reality.xver != b->reality.xver)
        return false;
    for (size_t i = 0; i < a->n_routes; i++)
        if (!route_eq(&a->routes[i], &b->routes[i]))
            return false;
    return true;
}
