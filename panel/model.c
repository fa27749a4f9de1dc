/*
 * UniProxy body parsers and panel-model helpers (PANEL.md §1.4, §1.5, §4.6).
 * Panel bodies are outside bytes: unknown keys are ignored (panels add keys), every string and
 * list has a bound, and the first malformed field fails the whole body with its path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "panel/jsonscan.h"
#include "panel/model.h"

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = dup_n(src, strlen(src));
    return *dst != NULL ? 0 : -ENOMEM;
}

/* A JSON string (bounded) into a new heap string. */
static int take_string(const json_t *v, const char *path, size_t max, char **out, sv_error *err)
{
    if (!json_is_string(v))
        return sv_error_set(err, -EINVAL, "%s: expected a string", path);
    size_t n = json_string_length(v);
    if (n > max)
        return sv_error_set(err, -EMSGSIZE, "%s: longer than %zu bytes", path, max);
    *out = dup_n(json_string_value(v), n);
    return *out != NULL ? 0 : sv_error_set(err, -ENOMEM, "%s: out of memory", path);
}

/* An optional string member: absent or null leaves *out NULL. */
static int opt_string(const json_t *obj, const char *key, char **out, sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    return take_string(v, key, PN_TEXT_MAX, out, err);
}

/* Digits only (a panel sends "60" or "28004"); rejects signs, blanks and overflow. */
static bool parse_digits(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0' || strlen(s) > 20)
        return false;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/*
 * A non-negative integer no larger than max, from a JSON integer or (when strings are allowed)
 * a numeric string. The caller handles null/absent itself.
 */
static int get_uint(const json_t *v, const char *path, uint64_t max, bool allow_string,
                    uint64_t *out, sv_error *err)
{
    uint64_t u;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return sv_error_set(err, -EINVAL, "%s: must not be negative", path);
        u = (uint64_t)i;
    } else if (allow_string && json_is_string(v)) {
        if (!parse_digits(json_string_value(v), &u))
            return sv_error_set(err, -EINVAL, "%s: expected a number", path);
    } else {
        return sv_error_set(err, -EINVAL, "%s: expected an integer", path);
    }
    if (u > max)
        return sv_error_set(err, -EINVAL, "%s: must be at most %llu", path,
                            (unsigned long long)max);
    *out = u;
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
    return get_uint(v, path, max, allow_string, out, err);
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
static const char *const users_keys[] = {"users", NULL};
static const char *const user_keys[] = {"id", "uuid", "speed_limit", "device_limit", NULL};

/* With PN_PARSE_STRICT, every key of obj must be in known; prefix names obj ("" at the top). */
static int check_keys(const json_t *obj, unsigned flags, const char *prefix,
                      const char *const *known, sv_error *err)
{
    const char *key;
    json_t *v;
    if (!(flags & PN_PARSE_STRICT))
        return 0;
    json_object_foreach((json_t *)obj, key, v) {
        const char *const *k = known;
        while (*k != NULL && strcmp(*k, key) != 0)
            k++;
        if (*k == NULL)
            return sv_error_set(err, -EINVAL, "%s%s%.64s: unknown key", prefix,
                                prefix[0] != '\0' ? "." : "", key);
    }
    return 0;
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
    v[r->n_match] = dup_n(s, n);
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

static int parse_route(const json_t *v, size_t idx, unsigned flags, pn_route *r,
                       sv_error *err)
{
    char path[64];
    int rc;
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "routes[%zu]: expected an object", idx);
    snprintf(path, sizeof path, "routes[%zu]", idx);
    rc = check_keys(v, flags, path, route_keys, err);
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
    rc = take_string(a, path, PN_TEXT_MAX, &r->action, err);
    if (rc != 0)
        return rc;
    const json_t *av = json_object_get(v, "action_value");
    if (av == NULL || json_is_null(av))
        return 0;
    snprintf(path, sizeof path, "routes[%zu].action_value", idx);
    return take_string(av, path, PN_TEXT_MAX, &r->action_value, err);
}

static int parse_routes(const json_t *routes, unsigned flags, pn_node *out, sv_error *err)
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
        int rc = parse_route(json_array_get(routes, i), i, flags, &out->routes[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* node                                                                                         */
/* ------------------------------------------------------------------------------------------ */

static int parse_intervals(const json_t *body, unsigned flags, pn_node *out, sv_error *err)
{
    const json_t *bc = json_object_get(body, "base_config");
    uint64_t v;
    int rc;
    if (bc == NULL || json_is_null(bc))
        return 0;
    if (!json_is_object(bc))
        return sv_error_set(err, -EINVAL, "base_config: expected an object");
    rc = check_keys(bc, flags, "base_config", base_config_keys, err);
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
static int parse_reality(const json_t *body, pn_reality *out, sv_error *err)
{
    const json_t *ts = json_object_get(body, "tls_settings");
    if (ts == NULL || json_is_null(ts))
        ts = json_object_get(body, "tlsSettings");
    if (ts == NULL || json_is_null(ts))
        return 0;
    if (!json_is_object(ts))
        return sv_error_set(err, -EINVAL, "tls_settings: expected an object");
    uint64_t port = 0;
    int rc = opt_string(ts, "server_name", &out->server_name, err);
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

static int parse_node_strings(const json_t *body, const char *node_type, pn_node *out,
                              sv_error *err)
{
    int rc = opt_string(body, "protocol", &out->protocol, err);
    if (rc == 0 && out->protocol == NULL && node_type != NULL) {
        rc = dup_opt(&out->protocol, node_type);
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
        rc = parse_network_settings(body, out, err);
    out->set = node_set_bits(body);
    out->tls = tls_value(json_object_get(body, "tls"), out->set);
    if (rc == 0 && out->tls == 2)
        rc = parse_reality(body, &out->reality, err);
    return rc;
}

int pn_node_parse(const json_t *body, const char *node_type, unsigned flags, pn_node *out,
                  sv_error *err)
{
    uint64_t port;
    int rc;
    memset(out, 0, sizeof *out);
    if (!json_is_object(body))
        return sv_error_set(err, -EINVAL, "node: expected an object");
    rc = check_keys(body, flags, "", node_keys, err);
    if (rc == 0)
        rc = parse_node_strings(body, node_type, out, err);
    if (rc != 0)
        goto out;
    const json_t *p = json_object_get(body, "server_port");
    if (p == NULL || json_is_null(p)) {
        rc = sv_error_set(err, -EINVAL, "server_port: missing");
        goto out;
    }
    rc = get_uint(p, "server_port", 65535, true, &port, err);
    if (rc == 0 && port == 0)
        rc = sv_error_set(err, -EINVAL, "server_port: must be between 1 and 65535");
    if (rc != 0)
        goto out;
    out->server_port = (uint16_t)port;
    rc = parse_intervals(body, flags, out, err);
    if (rc == 0)
        rc = parse_routes(json_object_get(body, "routes"), flags, out, err);
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
    free(node->ws_path);
    free(node->ws_host);
    free(node->grpc_service);
    free(node->reality.server_name);
    free(node->reality.private_key);
    free(node->reality.short_id);
    free(node->reality.target);
    free(node->reality.server_names);
    free(node->reality.short_ids);
    for (size_t i = 0; i < node->n_routes; i++)
        route_free(&node->routes[i]);
    free(node->routes);
    memset(node, 0, sizeof *node);
}

/* ------------------------------------------------------------------------------------------ */
/* users                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Which member of a user object a key names (PANEL.md §1.5). */
enum user_field { UF_ID, UF_UUID, UF_SPEED, UF_DEVICES, UF_OTHER };

static enum user_field user_field_of(const char *key)
{
    for (int f = UF_ID; f < UF_OTHER; f++)
        if (strcmp(key, user_keys[f]) == 0)
            return (enum user_field)f;
    return UF_OTHER;
}

/* One user object, in a single pass over its members (a list of 1 000 000 users is
 * parsed on every pull): the field path of an error ("users[7].uuid") is written only when
 * there is an error. */
static int parse_user(const json_t *v, size_t idx, unsigned flags, pn_user *u, sv_error *err)
{
    const json_t *field[UF_OTHER] = {0};
    const char *key;
    json_t *m;
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "users[%zu]: expected an object", idx);
    json_object_foreach((json_t *)v, key, m) {
        enum user_field f = user_field_of(key);
        if (f != UF_OTHER)
            field[f] = m;
        else if (flags & PN_PARSE_STRICT)
            return sv_error_set(err, -EINVAL, "users[%zu].%.64s: unknown key", idx, key);
    }
    char path[64];
    int rc;
    uint64_t x;
    enum user_field bad = UF_ID;
    if (field[UF_ID] == NULL || json_is_null(field[UF_ID]))
        return sv_error_set(err, -EINVAL, "users[%zu].id: missing", idx);
    if (field[UF_UUID] == NULL || json_is_null(field[UF_UUID]))
        return sv_error_set(err, -EINVAL, "users[%zu].uuid: missing", idx);
    /* each check below runs again with its path once it failed without one */
    rc = get_uint(field[UF_ID], "", INT64_MAX, false, &u->id, NULL);
    if (rc == 0 && u->id == 0) /* panels number users from 1; 0 is no user (PANEL.md §1.5) */
        return sv_error_set(err, -EINVAL, "users[%zu].id: must be positive", idx);
    if (rc == 0) {
        bad = UF_UUID;
        rc = take_string(field[UF_UUID], "", PN_UUID_MAX, &u->uuid, NULL);
        if (rc == 0 && u->uuid[0] == '\0')
            return sv_error_set(err, -EINVAL, "users[%zu].uuid: empty", idx);
    }
    /* Mbps; the bound keeps Mbps × 125000 inside 64 bits. */
    if (rc == 0 && field[UF_SPEED] != NULL && !json_is_null(field[UF_SPEED])) {
        bad = UF_SPEED;
        rc = get_uint(field[UF_SPEED], "", UINT64_MAX / 125000, false, &u->speed_limit, NULL);
    }
    if (rc == 0 && field[UF_DEVICES] != NULL && !json_is_null(field[UF_DEVICES])) {
        bad = UF_DEVICES;
        rc = get_uint(field[UF_DEVICES], "", UINT32_MAX, false, &x, NULL);
        u->device_limit = (uint32_t)x;
    }
    if (rc == 0)
        return 0;
    if (rc == -ENOMEM)
        return sv_error_set(err, rc, "users[%zu].%s: out of memory", idx, user_keys[bad]);
    snprintf(path, sizeof path, "users[%zu].%s", idx, user_keys[bad]);
    static const uint64_t max[UF_OTHER] = {INT64_MAX, 0, UINT64_MAX / 125000, UINT32_MAX};
    return bad == UF_UUID ? take_string(field[UF_UUID], path, PN_UUID_MAX, &u->uuid, err)
                          : get_uint(field[bad], path, max[bad], false, &x, err);
}

/* pn_users_parse() of @p body, whose users array is @p src's when it splits the body. */
static int parse_users(const json_t *body, pn_json_body *src, unsigned flags, pn_users *out,
                       sv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(body))
        return sv_error_set(err, -EINVAL, "users: expected an object {\"users\": [...]}");
    int rc = check_keys(body, flags, "", users_keys, err);
    if (rc != 0)
        return rc;
    const json_t *list = json_object_get(body, "users");
    if (list == NULL || json_is_null(list))
        return sv_error_set(err, -EINVAL, "users: missing");
    if (!json_is_array(list))
        return sv_error_set(err, -EINVAL, "users: expected an array");
    size_t n = src != NULL && src->open != 0 ? src->n : json_array_size(list);
    if (n > PN_USERS_MAX)
        return sv_error_set(err, -EMSGSIZE, "users: more than %u users", PN_USERS_MAX);
    if (n == 0)
        return 0;
    out->users = calloc(n, sizeof *out->users);
    if (out->users == NULL)
        return sv_error_set(err, -ENOMEM, "users: out of memory");
    out->n = n;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *v;
        json_t *own;
        rc = pn_json_body_at(list, src, i, "users", &v, &own, err);
        if (rc == 0)
            rc = parse_user(v, i, flags, &out->users[i], err);
        json_decref(own);
    }
    if (rc != 0)
        pn_users_free(out);
    return rc;
}

int pn_users_parse(const json_t *body, unsigned flags, pn_users *out, sv_error *err)
{
    return parse_users(body, NULL, flags, out, err);
}

int pn_users_parse_text(const char *text, size_t len, unsigned flags, pn_users *out,
                        sv_error *err)
{
    sv_error why = {0};
    memset(out, 0, sizeof *out);
    if (pn_json_check(text, len, &why) != 0) /* before any user is built */
        return sv_error_set(err, -EBADMSG, "%s", why.msg);
    int rc = pn_users_scan(text, len, out);
    if (rc <= 0)
        return rc == 0 ? 0 : sv_error_set(err, rc, "users: out of memory");
    pn_json_body b;
    rc = pn_json_body_load(&b, text, len, "users", err);
    if (rc == 0)
        rc = parse_users(b.root, &b, flags, out, err);
    pn_json_body_free(&b);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* users body from text, without a JSON tree                                                   */
/* ------------------------------------------------------------------------------------------ */

/* A cursor over a users body. Every step either advances or gives up (false): the body is then
 * left to json_loadb() + pn_users_parse(), which also say what is wrong with it. */
typedef struct scan {
    const char *p, *end;
} scan;

static void scan_ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Skip white space, then take @p c. */
static bool scan_char(scan *s, char c)
{
    scan_ws(s);
    if (s->p == s->end || *s->p != c)
        return false;
    s->p++;
    return true;
}

/* A string of printable ASCII without escapes, 1..max bytes: [*str, *str + *n). */
static bool scan_plain_string(scan *s, size_t max, const char **str, size_t *n)
{
    if (!scan_char(s, '"'))
        return false;
    const char *b = s->p;
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = (unsigned char)*s->p;
        if (c < 0x20 || c > 0x7e || c == '\\' || (size_t)(s->p - b) >= max)
            return false;
        s->p++;
    }
    if (s->p == s->end || s->p == b)
        return false;
    *str = b;
    *n = (size_t)(s->p - b);
    s->p++;
    return true;
}

/* A JSON integer of at most 19 digits, no sign, at most @p max; or null (*null set) when
 * @p null_ok. */
static bool scan_uint(scan *s, uint64_t max, bool null_ok, uint64_t *out, bool *null)
{
    scan_ws(s);
    *null = false;
    if (null_ok && s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        *null = true;
        *out = 0;
    } else {
        const char *b = s->p;
        uint64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && s->p - b < 19)
            v = v * 10 + (uint64_t)(*s->p++ - '0');
        if (s->p == b || (*b == '0' && s->p - b > 1) || v > max)
            return false;
        *out = v;
    }
    /* what follows a number or null: not more of a token (a fraction, exponent, 20th digit) */
    return s->p == s->end || (*s->p != '\0' && strchr(" \t\n\r,}]", *s->p) != NULL);
}

/* One user object into @p u (uuid allocated). @return 0, 1 (not for this scanner), -ENOMEM. */
static int scan_user(scan *s, pn_user *u)
{
    if (!scan_char(s, '{'))
        return 1;
    bool seen[UF_OTHER] = {false};
    if (!scan_char(s, '}')) {
        do {
            const char *key, *str = NULL;
            size_t klen, n = 0;
            if (!scan_plain_string(s, 16, &key, &klen) || !scan_char(s, ':'))
                return 1;
            enum user_field f = UF_OTHER;
            for (int k = UF_ID; k < UF_OTHER; k++)
                if (strlen(user_keys[k]) == klen && memcmp(user_keys[k], key, klen) == 0)
                    f = (enum user_field)k;
            if (f == UF_OTHER || seen[f])
                return 1; /* unknown keys (refused when strict) and duplicates: jansson's */
            seen[f] = true;
            uint64_t x;
            bool null;
            switch (f) {
            case UF_ID: /* 0 too goes to the reference parser, which names it */
                if (!scan_uint(s, INT64_MAX, false, &u->id, &null) || u->id == 0)
                    return 1;
                break;
            case UF_UUID:
                if (!scan_plain_string(s, PN_UUID_MAX, &str, &n))
                    return 1;
                if ((u->uuid = dup_n(str, n)) == NULL)
                    return -ENOMEM;
                break;
            case UF_SPEED:
                if (!scan_uint(s, UINT64_MAX / 125000, true, &u->speed_limit, &null))
                    return 1;
                break;
            case UF_DEVICES:
                if (!scan_uint(s, UINT32_MAX, true, &x, &null))
                    return 1;
                u->device_limit = (uint32_t)x;
                break;
            case UF_OTHER:
                return 1;
            }
        } while (scan_char(s, ','));
        if (!scan_char(s, '}'))
            return 1;
    }
    return seen[UF_ID] && seen[UF_UUID] ? 0 : 1;
}

int pn_users_scan(const char *body, size_t len, pn_users *out)
{
    memset(out, 0, sizeof *out);
    scan s = {body, body + len};
    const char *key;
    size_t klen, cap = 0;
    if (!scan_char(&s, '{') || !scan_plain_string(&s, 8, &key, &klen) || klen != 5 ||
        memcmp(key, "users", 5) != 0 || !scan_char(&s, ':') || !scan_char(&s, '['))
        return 1;
    int rc = 1;
    if (scan_char(&s, ']'))
        goto close;
    do {
        if (out->n == cap) {
            /* a user is at least 18 bytes ({"id":1,"uuid":"x"}): no larger guess than that */
            size_t guess = cap == 0 ? len / 64 + 1 : 2 * cap;
            if (guess > PN_USERS_MAX)
                guess = PN_USERS_MAX;
            if (guess <= cap) {
                rc = 1; /* more than PN_USERS_MAX: pn_users_parse() says so */
                goto out;
            }
            pn_user *grown = realloc(out->users, guess * sizeof *grown);
            if (grown == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            out->users = grown;
            cap = guess;
        }
        pn_user *u = &out->users[out->n];
        memset(u, 0, sizeof *u);
        out->n++;
        if ((rc = scan_user(&s, u)) != 0)
            goto out;
    } while (scan_char(&s, ','));
    rc = 1;
    if (!scan_char(&s, ']'))
        goto out;
close:
    if (scan_char(&s, '}')) {
        scan_ws(&s);
        if (s.p == s.end)
            rc = 0;
    }
out:
    if (rc != 0) {
        pn_users_free(out);
    } else if (out->n < cap) { /* give back the guess's slack (n > 0 here) */
        pn_user *fit = realloc(out->users, out->n * sizeof *fit);
        if (fit != NULL)
            out->users = fit;
    }
    return rc;
}

void pn_users_free(pn_users *users)
{
    if (users == NULL)
        return;
    for (size_t i = 0; users->users != NULL && i < users->n; i++)
        free(users->users[i].uuid);
    free(users->users);
    memset(users, 0, sizeof *users);
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
            if (dup_opt(&d->match[i], s->match[i]) != 0)
                return -ENOMEM;
    }
    if (dup_opt(&d->action, s->action) != 0 || dup_opt(&d->action_value, s->action_value) != 0)
        return -ENOMEM;
    return 0;
}

static int node_clone_parts(pn_node *d, const pn_node *s)
{
    if (dup_opt(&d->protocol, s->protocol) != 0 || dup_opt(&d->listen_ip, s->listen_ip) != 0 ||
        dup_opt(&d->network, s->network) != 0 ||
        dup_opt(&d->cipher, s->cipher) != 0 || dup_opt(&d->server_key, s->server_key) != 0 ||
        dup_opt(&d->flow, s->flow) != 0 ||
        dup_opt(&d->obfs, s->obfs) != 0 || dup_opt(&d->plugin, s->plugin) != 0 ||
        dup_opt(&d->plugin_opts, s->plugin_opts) != 0 ||
        dup_opt(&d->server_name, s->server_name) != 0 || dup_opt(&d->host, s->host) != 0 ||
        dup_opt(&d->ws_path, s->ws_path) != 0 || dup_opt(&d->ws_host, s->ws_host) != 0 ||
        dup_opt(&d->grpc_service, s->grpc_service) != 0 ||
        dup_opt(&d->reality.server_name, s->reality.server_name) != 0 ||
        dup_opt(&d->reality.private_key, s->reality.private_key) != 0 ||
        dup_opt(&d->reality.short_id, s->reality.short_id) != 0 ||
        dup_opt(&d->reality.target, s->reality.target) != 0 ||
        dup_opt(&d->reality.server_names, s->reality.server_names) != 0 ||
        dup_opt(&d->reality.short_ids, s->reality.short_ids) != 0)
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

int pn_users_clone(pn_users *dst, const pn_users *src)
{
    memset(dst, 0, sizeof *dst);
    dst->shed = src->shed;
    memcpy(dst->digest, src->digest, sizeof dst->digest);
    if (src->users == NULL) { /* shed whole: the count and the digest are the list */
        dst->n = src->n;
        return 0;
    }
    if (src->n == 0)
        return 0;
    dst->users = calloc(src->n, sizeof *dst->users);
    if (dst->users == NULL)
        return -ENOMEM;
    dst->n = src->n;
    for (size_t i = 0; i < src->n; i++) {
        dst->users[i] = src->users[i];
        if (dup_opt(&dst->users[i].uuid, src->users[i].uuid) != 0) {
            pn_users_free(dst);
            return -ENOMEM;
        }
    }
    return 0;
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
        !str_eq(a->host, b->host) || !str_eq(a->ws_path, b->ws_path) ||
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

bool pn_users_equal(const pn_users *a, const pn_users *b)
{
    if (a->n != b->n)
        return false;
    if (a->shed || b->shed) {
        uint8_t da[PN_USERS_DIGEST], db[PN_USERS_DIGEST];
        if (a->shed)
            memcpy(da, a->digest, sizeof da);
        else if (pn_users_digest(a, da) != 0)
            return false;
        if (b->shed)
            memcpy(db, b->digest, sizeof db);
        else if (pn_users_digest(b, db) != 0)
            return false;
        return memcmp(da, db, sizeof da) == 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        const pn_user *x = &a->users[i], *y = &b->users[i];
        if (x->id != y->id || x->speed_limit != y->speed_limit ||
            x->device_limit != y->device_limit || !str_eq(x->uuid, y->uuid))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* digest, shed, refill                                                                         */
/* ------------------------------------------------------------------------------------------ */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int pn_users_digest(const pn_users *users, uint8_t out[PN_USERS_DIGEST])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned len = 0;
    uint8_t rec[32];
    int ok = ctx != NULL && EVP_DigestInit_ex2(ctx, EVP_sha256(), NULL) == 1;
    put_le64(rec, users->n);
    ok = ok && EVP_DigestUpdate(ctx, rec, 8) == 1;
    for (size_t i = 0; ok && i < users->n; i++) {
        const pn_user *u = &users->users[i];
        size_t ulen = u->uuid != NULL ? strlen(u->uuid) : 0;
        put_le64(rec, u->id);
        put_le64(rec + 8, u->speed_limit);
        put_le64(rec + 16, u->device_limit);
        put_le64(rec + 24, ulen); /* the uuid's length frames it */
        ok = EVP_DigestUpdate(ctx, rec, sizeof rec) == 1 &&
             (ulen == 0 || EVP_DigestUpdate(ctx, u->uuid, ulen) == 1);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == PN_USERS_DIGEST;
    int rc = ctx == NULL ? -ENOMEM : ok ? 0 : -EIO;
    EVP_MD_CTX_free(ctx);
    return rc;
}

int pn_users_shed(pn_users *users, bool keep_limits)
{
    if (users->shed)
        return 0;
    int rc = pn_users_digest(users, users->digest);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < users->n; i++) {
        free(users->users[i].uuid);
        users->users[i].uuid = NULL;
    }
    if (!keep_limits) {
        free(users->users);
        users->users = NULL;
    }
    users->shed = true;
    return 0;
}

int pn_users_restore(pn_users *shed, pn_users *candidate)
{
    uint8_t digest[PN_USERS_DIGEST];
    if (!shed->shed || candidate->shed)
        return -EINVAL;
    int rc = pn_users_digest(candidate, digest);
    if (rc != 0)
        return rc;
    if (candidate->n != shed->n || memcmp(digest, shed->digest, sizeof digest) != 0)
        return -ESTALE;
    pn_users_free(shed);
    *shed = *candidate;
    memset(candidate, 0, sizeof *candidate);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* files                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Read at most max bytes; one byte more means "too big" (st_size is not trusted: /proc). */
static int read_bounded(int fd, size_t max, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                return -EMSGSIZE;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max) {
        free(buf);
        return -EMSGSIZE;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* What a non-regular file is, for the error text. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "a special file";
}

int pn_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, sv_error *err)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; no effect on a file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return sv_error_set(err, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sv_error_set(err, -e, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sv_error_set(err, -EINVAL, "%s: %s, not a regular file", path,
                            file_kind(st.st_mode));
    }
    int rc = 0;
    if ((uint64_t)st.st_size > max_bytes)
        rc = -EMSGSIZE;
    else
        rc = read_bounded(fd, max_bytes, buf, len);
    close(fd);
    if (rc == -EMSGSIZE)
        return sv_error_set(err, rc, "%s: file is larger than %zu bytes", path, max_bytes);
    if (rc != 0)
        return sv_error_set(err, rc, "%s: %s", path, strerror(-rc));
    return 0;
}

int pn_json_parse_text(const char *path, const char *buf, size_t len, json_t **out,
                       sv_error *err)
{
    json_error_t jerr;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    char *near = *out == NULL ? strstr(jerr.text, " near '") : NULL;
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a password: log no secrets (#5) */
    if (*out == NULL)
        return sv_error_set(err, -EINVAL, "%s: line %d, column %d: %s", path, jerr.line,
                            jerr.column, jerr.text);
    return 0;
}

int pn_json_load_file(const char *path, size_t max_bytes, json_t **out, sv_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = pn_read_file(path, max_bytes, &buf, &len, err);
    if (rc == 0)
        rc = pn_json_parse_text(path, buf, len, out, err);
    free(buf);
    return rc;
}

char *pn_users_body(const pn_users *u)
{
    json_t *list = json_array(), *body = json_object();
    int rc = list != NULL && body != NULL ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < u->n; i++)
        rc = json_array_append_new(list, json_pack("{s:I, s:s, s:I, s:I}", "id",
                                                   (json_int_t)u->users[i].id, "uuid",
                                                   u->users[i].uuid, "speed_limit",
                                                   (json_int_t)u->users[i].speed_limit,
                                                   "device_limit",
                                                   (json_int_t)u->users[i].device_limit));
    char *text = NULL;
    if (rc == 0 && json_object_set(body, "users", list) == 0)
        text = json_dumps(body, JSON_COMPACT);
    json_decref(list);
    json_decref(body);
    return text;
}
