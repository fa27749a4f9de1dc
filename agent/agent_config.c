/*
 * Agent config parser (agent/agent_config.h). Pure apart from ag_config_load_file's read. Every error
 * names the JSON path of the offending value.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_config.h"
#include "agent/node_types.h"
#include "api/api.h"
#include "panel/keys.h"
#include "panel/model.h"
#include "supervisor/proto/core.h"
#include "supervisor/supervisor.h"
#include "supervisor/util/log.h"

#define PATH_MAX_TEXT 192
#define TAG_MAX 64

/* "parent.key" (or "key" at the root) into buf; a path too long for buf is cut short. */
static void path_key(char *buf, size_t cap, const char *parent, const char *key)
{
    int n;
    if (parent[0] == '\0')
        n = snprintf(buf, cap, "%.64s", key);
    else
        n = snprintf(buf, cap, "%s.%.64s", parent, key);
    if (n < 0)
        buf[0] = '\0';
}

/* Every key of obj must be in allowed (NULL-terminated): the first that is not is refused,
 * naming the nearest known key when one is near (pn_keys_check). */
static int check_keys(const json_t *obj, const char *path, const char *const *allowed,
                      sv_error *err)
{
    return pn_keys_check(obj, path, allowed, true, NULL, NULL, err);
}

static int expect_object(const json_t *v, const char *path, sv_error *err)
{
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "%s: expected an object", path);
    return 0;
}

/* A string member; absent is allowed only when !required (then *out stays NULL). */
static int get_string(const json_t *obj, const char *parent, const char *key, bool required,
                      const char **out, sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    path_key(p, sizeof p, parent, key);
    if (v == NULL)
        return required ? sv_error_set(err, -EINVAL, "%s: missing required key", p) : 0;
    if (!json_is_string(v))
        return sv_error_set(err, -EINVAL, "%s: expected a string", p);
    if (json_string_length(v) == 0)
        return sv_error_set(err, -EINVAL, "%s: must not be empty", p);
    *out = json_string_value(v);
    return 0;
}

static int parse_log(const json_t *root, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"level", NULL};
    const json_t *log = json_object_get(root, "log");
    const char *level;
    if (log == NULL)
        return 0;
    int rc = expect_object(log, "log", err);
    if (rc == 0)
        rc = check_keys(log, "log", keys, err);
    if (rc == 0)
        rc = get_string(log, "log", "level", false, &level, err);
    if (rc != 0 || level == NULL)
        return rc;
    cfg->log_level = sv_log_level_parse(level);
    if (cfg->log_level < 0)
        return sv_error_set(err, -EINVAL,
                            "log.level: unknown level \"%.32s\" (error, warn, info, debug, trace)",
                            level);
    return 0;
}

static int parse_workers(const json_t *root, ag_config *cfg, sv_error *err)
{
    const json_t *w = json_object_get(root, "workers");
    if (w == NULL)
        return 0;
    if (!json_is_integer(w))
        return sv_error_set(err, -EINVAL, "workers: expected an integer");
    json_int_t v = json_integer_value(w);
    if (v < 0 || v > AG_CONFIG_WORKERS_MAX)
        return sv_error_set(err, -EINVAL, "workers: must be between 0 and %u",
                            AG_CONFIG_WORKERS_MAX);
    cfg->workers = (unsigned)v;
    return 0;
}

/* "max_connections": TCP connections of the process, 0 = sized from the descriptor limit. */
static int parse_max_connections(const json_t *root, ag_config *cfg, sv_error *err)
{
    const json_t *m = json_object_get(root, "max_connections");
    if (m == NULL)
        return 0;
    if (!json_is_integer(m))
        return sv_error_set(err, -EINVAL, "max_connections: expected an integer");
    json_int_t v = json_integer_value(m);
    if (v < 0 || v > SV_MAX_CONNECTIONS_MAX)
        return sv_error_set(err, -EINVAL, "max_connections: must be between 0 and %u",
                            SV_MAX_CONNECTIONS_MAX);
    cfg->max_connections = (uint32_t)v;
    return 0;
}

/* A policy at @p path (seed 001 "policies"): "keep", "close" or
 * {"close_after": SECONDS} with 1..SV_POLICY_GRACE_MAX_MS / 1000 seconds. Absent: untouched. */
static int parse_policy(const json_t *v, const char *path, sv_policy *out, sv_error *err)
{
    static const char *const keys[] = {"close_after", NULL};
    const unsigned max = SV_POLICY_GRACE_MAX_MS / 1000u;
    if (v == NULL)
        return 0;
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "keep") == 0)
            *out = (sv_policy){.kind = SV_POLICY_KEEP};
        else if (strcmp(json_string_value(v), "close") == 0)
            *out = (sv_policy){.kind = SV_POLICY_CLOSE};
        else
            return sv_error_set(err, -EINVAL, "%s: unknown policy \"%.32s\" (keep, close, "
                                "{\"close_after\": seconds})", path, json_string_value(v));
        return 0;
    }
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "%s: expected \"keep\", \"close\" or "
                            "{\"close_after\": seconds}", path);
    int rc = check_keys(v, path, keys, err);
    if (rc != 0)
        return rc;
    const json_t *g = json_object_get(v, "close_after");
    if (g == NULL || !json_is_integer(g) || json_integer_value(g) < 1 ||
        json_integer_value(g) > max)
        return sv_error_set(err, -EINVAL, "%s.close_after: expected seconds between 1 and %u",
                            path, max);
    *out = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER,
                       .grace_ms = (uint32_t)json_integer_value(g) * 1000u};
    return 0;
}

/* "policies": {"user_removal": P, "drain": P}. */
static int parse_policies(const json_t *root, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"user_removal", "drain", NULL};
    const json_t *p = json_object_get(root, "policies");
    if (p == NULL)
        return 0;
    int rc = expect_object(p, "policies", err);
    if (rc == 0)
        rc = check_keys(p, "policies", keys, err);
    if (rc == 0)
        rc = parse_policy(json_object_get(p, "user_removal"), "policies.user_removal",
                          &cfg->user_removal, err);
    if (rc == 0)
        rc = parse_policy(json_object_get(p, "drain"), "policies.drain", &cfg->drain, err);
    return rc;
}

/* A speed in Mbps: an optional integer 0..AG_CONFIG_SPEED_MAX,
 * 0 = none (absent: *out stays as it is). */
static int get_mbps(const json_t *obj, const char *parent, const char *key, uint64_t *out,
                    sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return 0;
    path_key(p, sizeof p, parent, key);
    if (!json_is_integer(v))
        return sv_error_set(err, -EINVAL, "%s: expected an integer (Mbit/s)", p);
    json_int_t n = json_integer_value(v);
    if (n < 0 || n > AG_CONFIG_SPEED_MAX)
        return sv_error_set(err, -EINVAL, "%s: must be between 0 and %u (Mbit/s)", p,
                            AG_CONFIG_SPEED_MAX);
    *out = (uint64_t)n;
    return 0;
}

/* "shutdown_grace": seconds a SIGTERM/SIGINT leaves live connections (default 5). */
static int parse_grace(const json_t *root, ag_config *cfg, sv_error *err)
{
    const json_t *g = json_object_get(root, "shutdown_grace");
    cfg->shutdown_grace = AG_CONFIG_GRACE_DEFAULT;
    if (g == NULL)
        return 0;
    if (!json_is_integer(g))
        return sv_error_set(err, -EINVAL, "shutdown_grace: expected an integer");
    json_int_t v = json_integer_value(g);
    if (v < 0 || v > AG_CONFIG_GRACE_MAX)
        return sv_error_set(err, -EINVAL, "shutdown_grace: must be between 0 and %u",
                            AG_CONFIG_GRACE_MAX);
    cfg->shutdown_grace = (unsigned)v;
    return 0;
}

/* "dns": {"servers", "timeout", "strategy"}. */
static int parse_dns(const json_t *root, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"servers", "timeout", "strategy", NULL};
    static const char *const strategies[] = {"prefer_ipv4", "prefer_ipv6", "ipv4_only",
                                             "ipv6_only"};
    const json_t *dns = json_object_get(root, "dns");
    if (dns == NULL)
        return 0;
    int rc = expect_object(dns, "dns", err);
    if (rc == 0)
        rc = check_keys(dns, "dns", keys, err);
    if (rc != 0)
        return rc;
    const json_t *servers = json_object_get(dns, "servers");
    if (servers != NULL) {
        if (!json_is_array(servers))
            return sv_error_set(err, -EINVAL, "dns.servers: expected an array");
        if (json_array_size(servers) > SV_DNS_SERVERS_MAX)
            return sv_error_set(err, -EINVAL, "dns.servers: at most %u servers",
                                SV_DNS_SERVERS_MAX);
        if (json_array_size(servers) == 0) /* the key absent is the way to say resolv.conf */
            return sv_error_set(err, -EINVAL, "dns.servers: at least 1 server (leave the key "
                                "out to use those of /etc/resolv.conf)");
        for (size_t i = 0; i < json_array_size(servers); i++) {
            const json_t *v = json_array_get(servers, i);
            if (!json_is_string(v) || !sv_dns_server_valid(json_string_value(v)))
                return sv_error_set(err, -EINVAL,
                                    "dns.servers[%zu]: expected \"ip\", \"ipv4:port\" or "
                                    "\"[ipv6]:port\"", i);
            snprintf(cfg->dns.servers[i], sizeof cfg->dns.servers[i], "%s",
                     json_string_value(v));
            cfg->dns.n_servers = (unsigned)i + 1;
        }
    }
    const json_t *t = json_object_get(dns, "timeout");
    if (t != NULL) {
        if (!json_is_number(t))
            return sv_error_set(err, -EINVAL, "dns.timeout: expected a number of seconds");
        double v = json_number_value(t);
        if (!(v >= 0.1 && v <= AG_CONFIG_DNS_TIMEOUT_MAX))
            return sv_error_set(err, -EINVAL, "dns.timeout: must be between 0.1 and %u seconds",
                                AG_CONFIG_DNS_TIMEOUT_MAX);
        cfg->dns.timeout_ms = (uint32_t)(v * 1000.0 + 0.5);
    }
    const char *strategy;
    rc = get_string(dns, "dns", "strategy", false, &strategy, err);
    if (rc != 0 || strategy == NULL)
        return rc;
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++)
        if (strcmp(strategy, strategies[i]) == 0) {
            cfg->dns.strategy = (enum sv_dns_strategy)i;
            return 0;
        }
    return sv_error_set(err, -EINVAL, "dns.strategy: unknown strategy \"%.32s\" (prefer_ipv4, "
                        "prefer_ipv6, ipv4_only, ipv6_only)", strategy);
}

/* "redis": {"url", "expiry", "timeout", "prefix"} (the fleet-wide device limit). */
static int parse_redis(const json_t *root, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"url", "expiry", "timeout", "prefix", NULL};
    const json_t *r = json_object_get(root, "redis");
    const char *url, *prefix;
    if (r == NULL)
        return 0;
    int rc = expect_object(r, "redis", err);
    if (rc == 0)
        rc = check_keys(r, "redis", keys, err);
    if (rc == 0)
        rc = get_string(r, "redis", "url", true, &url, err);
    if (rc == 0)
        rc = ag_redis_url_parse(url, &cfg->redis, err);
    if (rc == 0)
        rc = get_string(r, "redis", "prefix", false, &prefix, err);
    if (rc != 0)
        return rc;
    if (prefix != NULL && strlen(prefix) >= SV_REDIS_PREFIX_LEN)
        return sv_error_set(err, -EINVAL, "redis.prefix: at most %u bytes",
                            SV_REDIS_PREFIX_LEN - 1);
    snprintf(cfg->redis.prefix, sizeof cfg->redis.prefix, "%s",
             prefix != NULL ? prefix : AG_CONFIG_REDIS_PREFIX);
    cfg->redis.expiry_s = AG_CONFIG_REDIS_EXPIRY_DEFAULT;
    const json_t *e = json_object_get(r, "expiry");
    if (e != NULL) {
        if (!json_is_integer(e))
            return sv_error_set(err, -EINVAL, "redis.expiry: expected an integer (seconds)");
        json_int_t v = json_integer_value(e);
        if (v < AG_CONFIG_REDIS_EXPIRY_MIN || v > AG_CONFIG_REDIS_EXPIRY_MAX)
            return sv_error_set(err, -EINVAL, "redis.expiry: must be between %u and %u seconds",
                                AG_CONFIG_REDIS_EXPIRY_MIN, AG_CONFIG_REDIS_EXPIRY_MAX);
        cfg->redis.expiry_s = (uint32_t)v;
    }
    cfg->redis.timeout_ms = AG_CONFIG_REDIS_TIMEOUT_MS_DEFAULT;
    const json_t *t = json_object_get(r, "timeout");
    if (t != NULL) {
        if (!json_is_number(t))
            return sv_error_set(err, -EINVAL, "redis.timeout: expected a number of seconds");
        double v = json_number_value(t);
        if (!(v >= 0.01 && v <= AG_CONFIG_REDIS_TIMEOUT_MAX))
            return sv_error_set(err, -EINVAL, "redis.timeout: must be between 0.01 and %u "
                                "seconds", AG_CONFIG_REDIS_TIMEOUT_MAX);
        cfg->redis.timeout_ms = (uint32_t)(v * 1000.0 + 0.5);
    }
    cfg->redis.enabled = true;
    return 0;
}

/* "api": {"listen", "token"}: a listen address beyond loopback needs a token. */
static int parse_api(const json_t *root, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"listen", "token", NULL};
    const json_t *api = json_object_get(root, "api");
    const char *listen = NULL, *token = NULL;
    bool loopback = true;
    if (api == NULL)
        return 0;
    int rc = expect_object(api, "api", err);
    if (rc == 0)
        rc = check_keys(api, "api", keys, err);
    if (rc == 0)
        rc = get_string(api, "api", "listen", false, &listen, err);
    if (rc == 0)
        rc = get_string(api, "api", "token", false, &token, err);
    if (rc == 0 && listen != NULL)
        rc = api_listen_parse(listen, NULL, &loopback, err); /* err: "api.listen: ..." */
    /* the packaged config's placeholder, which postinst / %post replace: a copy that
     * kept it would protect the API with a token everyone knows */
    if (rc == 0 && token != NULL && strcmp(token, AG_API_TOKEN_PLACEHOLDER) == 0)
        rc = sv_error_set(err, -EINVAL, "api.token: still the package placeholder %s; set a "
                          "random token", AG_API_TOKEN_PLACEHOLDER);
    if (rc == 0 && token != NULL && strlen(token) > API_TOKEN_MAX)
        rc = sv_error_set(err, -EINVAL, "api.token: longer than %d bytes", API_TOKEN_MAX);
    if (rc == 0 && listen != NULL && !loopback && token == NULL)
        rc = sv_error_set(err, -EINVAL, "api.token: required when api.listen (%s) is not a "
                          "loopback address", listen);
    if (rc != 0)
        return rc;
    cfg->api_listen = listen != NULL ? strdup(listen) : NULL;
    cfg->api_token = token != NULL ? strdup(token) : NULL;
    if ((listen != NULL && cfg->api_listen == NULL) || (token != NULL && cfg->api_token == NULL))
        return sv_error_set(err, -ENOMEM, "api: out of memory");
    return 0;
}

/* A *_file path, resolved against base_dir when relative. */
static int resolve_path(const char *file, const char *base_dir, char **out)
{
    size_t need;
    if (base_dir == NULL || file[0] == '/') {
        *out = strdup(file);
        return *out != NULL ? 0 : -ENOMEM;
    }
    need = strlen(base_dir) + 1 + strlen(file) + 1;
    *out = malloc(need);
    if (*out == NULL)
        return -ENOMEM;
    snprintf(*out, need, "%s/%s", base_dir, file);
    return 0;
}

/* One body: inline object under `key` or a file under `file_key`, exactly one of them. */
static int parse_body(const json_t *panel, const char *path, const char *key,
                      const char *file_key, const char *base_dir, json_t **body, char **file,
                      sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *inl = json_object_get(panel, key);
    const char *f;
    int rc = get_string(panel, path, file_key, false, &f, err);
    if (rc != 0)
        return rc;
    if ((inl == NULL) == (f == NULL))
        return sv_error_set(err, -EINVAL, "%s: exactly one of \"%s\" and \"%s\" is required",
                            path, key, file_key);
    if (inl != NULL) {
        path_key(p, sizeof p, path, key);
        rc = expect_object(inl, p, err);
        if (rc == 0)
            *body = json_incref((json_t *)inl);
        return rc;
    }
    if (resolve_path(f, base_dir, file) != 0)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    return 0;
}

/* Seconds between 1 and AG_CONFIG_INTERVAL_MAX under @p key, when present. */
static int opt_seconds(const json_t *panel, const char *path, const char *key, unsigned max,
                       uint32_t *out, sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *t = json_object_get(panel, key);
    if (t == NULL)
        return 0;
    path_key(p, sizeof p, path, key);
    if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > max)
        return sv_error_set(err, -EINVAL, "%s: expected seconds between 1 and %u", p, max);
    *out = (uint32_t)json_integer_value(t);
    return 0;
}

/* {"type":"uniproxy","url","token","node_id","node_type","timeout"} (PANEL.md §1);
 * {"type":"xboard", the same keys} (Xboard API v2 and its node channel), or
 * {"type":"xboard","url","token","machine_id","timeout"} (machine mode, PANEL.md §1.1: the
 * panel's machine list names the nodes and their types), both with an optional
 * "status_interval" (PROTOCOLS-2.md §6.5 node.status); or
 * {"type":"sspanel","url","token","node_id","timeout","pull_interval","push_interval"}
 * (PANEL.md §2: mod_mu has no interval setting of its own, no node_type). */
static int parse_remote(const json_t *panel, const char *path, enum ag_panel_type type,
                        ag_panel_config *pc, sv_error *err)
{
    static const char *const up_keys[] = {"type", "url", "token", "node_id", "node_type",
                                          "timeout", NULL};
    static const char *const xb_keys[] = {"type", "url", "token", "node_id", "node_type",
                                          "timeout", "machine_id", "status_interval", NULL};
    static const char *const machine_keys[] = {"type", "url", "token", "machine_id", "timeout",
                                               "status_interval", NULL};
    static const char *const ss_keys[] = {"type", "url", "token", "node_id", "timeout",
                                          "pull_interval", "push_interval", NULL};
    const char *url, *token, *node_type = "sspanel", *node_id = NULL;
    char idbuf[24], p[PATH_MAX_TEXT];
    bool sspanel = type == AG_PANEL_SSPANEL;
    const json_t *mid = type == AG_PANEL_XBOARD ? json_object_get(panel, "machine_id") : NULL;
    bool machine = mid != NULL;
    pc->type = type;
    pc->timeout_s = AG_CONFIG_TIMEOUT_DEFAULT;
    int rc = check_keys(panel, path, sspanel ? ss_keys
                                    : type != AG_PANEL_XBOARD ? up_keys
                                    : machine && json_object_get(panel, "node_id") == NULL
                                        ? machine_keys : xb_keys, err);
    if (rc == 0 && machine && json_object_get(panel, "node_id") != NULL)
        rc = sv_error_set(err, -EINVAL, "%s: node_id and machine_id exclude each other (a "
                          "machine's nodes come from the panel)", path);
    if (rc == 0 && machine && !(json_is_integer(mid) && json_integer_value(mid) > 0))
        rc = sv_error_set(err, -EINVAL, "%s.machine_id: expected a positive integer", path);
    if (rc == 0)
        rc = get_string(panel, path, "url", true, &url, err);
    if (rc == 0 && strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        rc = sv_error_set(err, -EINVAL, "%s.url: must start with http:// or https://", path);
    if (rc == 0)
        rc = get_string(panel, path, "token", true, &token, err);
    if (rc == 0 && !sspanel && !machine)
        rc = get_string(panel, path, "node_type", true, &node_type, err);
    if (rc != 0)
        return rc;
    const json_t *id = machine ? mid : json_object_get(panel, "node_id");
    path_key(p, sizeof p, path, "node_id");
    if (json_is_integer(id) && json_integer_value(id) > 0) {
        snprintf(idbuf, sizeof idbuf, "%lld", (long long)json_integer_value(id));
        node_id = idbuf;
    } else if (!sspanel && json_is_string(id) && json_string_length(id) > 0 &&
               json_string_length(id) <= 64) {
        node_id = json_string_value(id);
    } else {
        return sv_error_set(err, -EINVAL, "%s: %s", p, id == NULL ? "missing required key"
                            : sspanel ? "expected a positive integer"
                                      : "expected a positive integer or a non-empty string");
    }
    uint32_t timeout = AG_CONFIG_TIMEOUT_DEFAULT;
    rc = opt_seconds(panel, path, "timeout", AG_CONFIG_TIMEOUT_MAX, &timeout, err);
    pc->timeout_s = timeout;
    if (rc == 0 && sspanel)
        rc = opt_seconds(panel, path, "pull_interval", AG_CONFIG_INTERVAL_MAX,
                         &pc->pull_interval_s, err);
    if (rc == 0 && sspanel)
        rc = opt_seconds(panel, path, "push_interval", AG_CONFIG_INTERVAL_MAX,
                         &pc->push_interval_s, err);
    if (rc == 0 && type == AG_PANEL_XBOARD)
        rc = opt_seconds(panel, path, "status_interval", AG_CONFIG_INTERVAL_MAX,
                         &pc->status_interval_s, err);
    if (rc != 0)
        return rc;
    pc->url = strdup(url);
    pc->token = strdup(token);
    if (machine)
        pc->machine_id = strdup(node_id);
    else
        pc->node_id = strdup(node_id);
    pc->node_type = strdup(machine ? "machine" : node_type);
    if (pc->url == NULL || pc->token == NULL || (pc->node_id == NULL && pc->machine_id == NULL) ||
        pc->node_type == NULL)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    return 0;
}

/* A local panel's node_type katana does not serve: the error names every served type. */
static int bad_node_type(const char *path, const char *type, sv_error *err)
{
    char list[160] = "";
    size_t at = 0;
    for (const char *const *t = ag_node_types(); *t != NULL && at < sizeof list; t++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"",
                               at > 0 ? (t[1] != NULL ? ", " : " or ") : "", *t);
    return sv_error_set(err, -EINVAL, "%s.node_type: expected %s, got \"%.32s\"", path, list,
                        type);
}

static int parse_panel(const json_t *node, const char *npath, const char *base_dir,
                       ag_panel_config *pc, sv_error *err)
{
    static const char *const keys[] = {"type", "node_type", "node", "node_file", "users",
                                       "users_file", NULL};
    char path[PATH_MAX_TEXT];
    const char *type, *node_type = NULL;
    path_key(path, sizeof path, npath, "panel");
    const json_t *panel = json_object_get(node, "panel");
    if (panel == NULL)
        return sv_error_set(err, -EINVAL, "%s: missing required key", path);
    int rc = expect_object(panel, path, err);
    if (rc == 0)
        rc = get_string(panel, path, "type", true, &type, err);
    if (rc != 0)
        return rc;
    if (strcmp(type, "uniproxy") == 0)
        return parse_remote(panel, path, AG_PANEL_UNIPROXY, pc, err);
    if (strcmp(type, "sspanel") == 0)
        return parse_remote(panel, path, AG_PANEL_SSPANEL, pc, err);
    if (strcmp(type, "xboard") == 0)
        return parse_remote(panel, path, AG_PANEL_XBOARD, pc, err);
    if (strcmp(type, "local") != 0)
        return sv_error_set(err, -EINVAL, "%s.type: unsupported panel type \"%.32s\"", path,
                            type);
    pc->type = AG_PANEL_LOCAL;
    rc = check_keys(panel, path, keys, err);
    if (rc == 0) /* the protocol a body without "protocol" has (default shadowsocks) */
        rc = get_string(panel, path, "node_type", false, &node_type, err);
    if (rc == 0 && node_type != NULL && ag_node_type(node_type) == NULL)
        rc = bad_node_type(path, node_type, err);
    if (rc == 0 && node_type != NULL && (pc->node_type = strdup(node_type)) == NULL)
        rc = sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    if (rc == 0)
        rc = parse_body(panel, path, "node", "node_file", base_dir, &pc->node, &pc->node_file,
                        err);
    if (rc == 0)
        rc = parse_body(panel, path, "users", "users_file", base_dir, &pc->users,
                        &pc->users_file, err);
    return rc;
}

/* "db": {"path", "flush_interval"}; a uniproxy panel needs db.path (the outbox). */
static int parse_db(const json_t *root, const char *base_dir, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"path", "flush_interval", NULL};
    const json_t *db = json_object_get(root, "db");
    const char *path = NULL;
    cfg->db_flush_s = AG_CONFIG_FLUSH_DEFAULT;
    int rc = db != NULL ? expect_object(db, "db", err) : 0;
    if (rc == 0 && db != NULL)
        rc = check_keys(db, "db", keys, err);
    if (rc == 0 && db != NULL)
        rc = get_string(db, "db", "path", false, &path, err);
    const json_t *f = db != NULL ? json_object_get(db, "flush_interval") : NULL;
    if (rc == 0 && f != NULL) {
        if (!json_is_integer(f) || json_integer_value(f) < 1 ||
            json_integer_value(f) > AG_CONFIG_FLUSH_MAX)
            return sv_error_set(err, -EINVAL, "db.flush_interval: expected seconds between 1 "
                                "and %u", AG_CONFIG_FLUSH_MAX);
        cfg->db_flush_s = (unsigned)json_integer_value(f);
    }
    if (rc != 0)
        return rc;
    for (size_t i = 0; path == NULL && i < cfg->n_nodes; i++)
        if (cfg->nodes[i].panel.type == AG_PANEL_UNIPROXY ||
            cfg->nodes[i].panel.type == AG_PANEL_SSPANEL ||
            cfg->nodes[i].panel.type == AG_PANEL_XBOARD)
            return sv_error_set(err, -EINVAL, "db.path: required with a %s panel "
                                "(nodes[%zu])", ag_panel_type_name(cfg->nodes[i].panel.type), i);
    if (path != NULL && resolve_path(path, base_dir, &cfg->db_path) != 0)
        return sv_error_set(err, -ENOMEM, "db: out of memory");
    return 0;
}

static bool is_ip_literal(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* An optional boolean member (absent: *out stays as it is). */
static int get_bool(const json_t *obj, const char *parent, const char *key, bool *out,
                    sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return 0;
    path_key(p, sizeof p, parent, key);
    if (!json_is_boolean(v))
        return sv_error_set(err, -EINVAL, "%s: expected true or false", p);
    *out = json_is_true(v);
    return 0;
}

/* "cert": {"mode": "file", "cert_file", "key_file"} or {"mode": "self"}. */
static int parse_cert(const json_t *node, const char *npath, const char *base_dir,
                      ag_cert_config *cc, sv_error *err)
{
    static const char *const keys[] = {"mode", "cert_file", "key_file", NULL};
    const json_t *cert = json_object_get(node, "cert");
    if (cert == NULL)
        return 0;
    char path[PATH_MAX_TEXT + 8];
    const char *mode, *cf = NULL, *kf = NULL;
    snprintf(path, sizeof path, "%s.cert", npath);
    int rc = expect_object(cert, path, err);
    if (rc == 0)
        rc = check_keys(cert, path, keys, err);
    if (rc == 0)
        rc = get_string(cert, path, "mode", true, &mode, err);
    if (rc == 0)
        rc = get_string(cert, path, "cert_file", false, &cf, err);
    if (rc == 0)
        rc = get_string(cert, path, "key_file", false, &kf, err);
    if (rc != 0)
        return rc;
    if (strcmp(mode, "self") == 0) {
        if (cf != NULL || kf != NULL)
            return sv_error_set(err, -EINVAL, "%s: mode self takes no cert_file or key_file",
                                path);
        cc->mode = AG_CERT_SELF;
        return 0;
    }
    if (strcmp(mode, "file") != 0)
        return sv_error_set(err, -EINVAL, "%s.mode: expected \"file\" or \"self\", got "
                            "\"%.32s\"", path, mode);
    if (cf == NULL || kf == NULL || cf[0] == '\0' || kf[0] == '\0')
        return sv_error_set(err, -EINVAL, "%s: mode file needs cert_file and key_file", path);
    cc->mode = AG_CERT_FILE;
    if (resolve_path(cf, base_dir, &cc->cert_file) != 0 ||
        resolve_path(kf, base_dir, &cc->key_file) != 0)
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    return 0;
}

/* "fallback": "HOST:PORT". */
static int parse_fallback(const json_t *node, const char *npath, char **out, sv_error *err)
{
    const char *fb = NULL;
    int rc = get_string(node, npath, "fallback", false, &fb, err);
    if (rc != 0 || fb == NULL)
        return rc;
    sv_dest d;
    if (sv_dest_parse_hostport(fb, &d) != 0)
        return sv_error_set(err, -EINVAL, "%s.fallback: expected \"HOST:PORT\", got \"%.64s\"",
                            npath, fb);
    *out = strdup(fb);
    return *out != NULL ? 0 : sv_error_set(err, -ENOMEM, "%s: out of memory", npath);
}

/* An integer member in lo..hi at @p parent.@p key; absent leaves *out alone. */
static int get_uint_in(const json_t *obj, const char *parent, const char *key, uint64_t lo,
                       uint64_t hi, uint32_t *out, sv_error *err)
{
    char p[PATH_MAX_TEXT];
    const json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return 0;
    path_key(p, sizeof p, parent, key);
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)lo ||
        (uint64_t)json_integer_value(v) > hi)
        return sv_error_set(err, -EINVAL, "%s: expected an integer between %" PRIu64 " and %"
                            PRIu64, p, lo, hi);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

/* "bind": up to one IPv4 and one IPv6 literal (seed 001: each binds sockets of its family). */
static int parse_bind(const json_t *b, const char *path, sv_socket_policy *sp, sv_error *err)
{
    if (!json_is_array(b) || json_array_size(b) == 0 || json_array_size(b) > 2)
        return sv_error_set(err, -EINVAL, "%s: expected an array of one or two IP addresses",
                            path);
    for (size_t i = 0; i < json_array_size(b); i++) {
        const json_t *v = json_array_get(b, i);
        const char *a = json_is_string(v) ? json_string_value(v) : "";
        uint8_t ip[16];
        bool v4 = inet_pton(AF_INET, a, ip) == 1;
        if (!v4 && inet_pton(AF_INET6, a, ip) != 1)
            return sv_error_set(err, -EINVAL, "%s[%zu]: not an IP address", path, i);
        if (v4 ? sp->has_addr4 : sp->has_addr6)
            return sv_error_set(err, -EINVAL, "%s[%zu]: a second %s address (at most one per "
                                "family)", path, i, v4 ? "IPv4" : "IPv6");
        memcpy(v4 ? sp->addr4 : sp->addr6, ip, v4 ? 4 : 16);
        *(v4 ? &sp->has_addr4 : &sp->has_addr6) = true;
    }
    return 0;
}

/* "tcp_keepalive": {"idle" (required), "interval", "count"}. */
static int parse_keepalive(const json_t *k, const char *path, sv_socket_policy *sp,
                           sv_error *err)
{
    static const char *const keys[] = {"idle", "interval", "count", NULL};
    char p[PATH_MAX_TEXT];
    int rc = expect_object(k, path, err);
    if (rc == 0)
        rc = check_keys(k, path, keys, err);
    if (rc == 0 && json_object_get(k, "idle") == NULL) {
        path_key(p, sizeof p, path, "idle");
        rc = sv_error_set(err, -EINVAL, "%s: missing required key", p);
    }
    if (rc == 0)
        rc = get_uint_in(k, path, "idle", 1, SV_KEEPALIVE_IDLE_MAX, &sp->keepalive_idle_s, err);
    if (rc == 0)
        rc = get_uint_in(k, path, "interval", 1, SV_KEEPALIVE_IDLE_MAX,
                         &sp->keepalive_interval_s, err);
    if (rc == 0)
        rc = get_uint_in(k, path, "count", 1, SV_KEEPALIVE_COUNT_MAX, &sp->keepalive_count,
                         err);
    return rc;
}

int ag_socket_policy_parse(const json_t *o, const char *path, sv_socket_policy *out,
                           sv_error *err)
{
    static const char *const keys[] = {"bind", "interface", "mark", "tcp_keepalive",
                                       "tcp_nodelay", NULL};
    char p[PATH_MAX_TEXT];
    memset(out, 0, sizeof *out);
    int rc = expect_object(o, path, err);
    if (rc == 0)
        rc = check_keys(o, path, keys, err);
    path_key(p, sizeof p, path, "bind");
    if (rc == 0 && json_object_get(o, "bind") != NULL)
        rc = parse_bind(json_object_get(o, "bind"), p, out, err);
    const char *ifname = NULL;
    if (rc == 0)
        rc = get_string(o, path, "interface", false, &ifname, err);
    if (rc == 0 && ifname != NULL) {
        path_key(p, sizeof p, path, "interface");
        if (strlen(ifname) >= SV_IFNAME_MAX)
            return sv_error_set(err, -EINVAL, "%s: longer than %d bytes", p, SV_IFNAME_MAX - 1);
        snprintf(out->interface, sizeof out->interface, "%s", ifname);
    }
    if (rc == 0)
        rc = get_uint_in(o, path, "mark", 0, UINT32_MAX, &out->mark, err);
    path_key(p, sizeof p, path, "tcp_keepalive");
    if (rc == 0 && json_object_get(o, "tcp_keepalive") != NULL)
        rc = parse_keepalive(json_object_get(o, "tcp_keepalive"), p, out, err);
    bool nodelay = true;
    if (rc == 0)
        rc = get_bool(o, path, "tcp_nodelay", &nodelay, err);
    out->nagle = !nodelay;
    return rc;
}

/* `trusted_forwarders` of the node at @p path: IP addresses or CIDR prefixes, at most
 * SV_TRUSTED_FORWARDERS_MAX; absent = none. */
static int parse_forwarders(const json_t *node, const char *path, ag_node_config *nc,
                            sv_error *err)
{
    const json_t *v = json_object_get(node, "trusted_forwarders");
    if (v == NULL)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > SV_TRUSTED_FORWARDERS_MAX)
        return sv_error_set(err, -EINVAL, "%s.trusted_forwarders: expected an array of at most "
                            "%d IP addresses or CIDR prefixes", path, SV_TRUSTED_FORWARDERS_MAX);
    for (size_t j = 0; j < json_array_size(v); j++) {
        const json_t *e = json_array_get(v, j);
        if (!json_is_string(e) ||
            sv_cidr_parse(json_string_value(e), &nc->trusted_forwarders[j]) != 0)
            return sv_error_set(err, -EINVAL, "%s.trusted_forwarders[%zu]: expected an IP "
                                "address or CIDR prefix (\"10.0.0.0/8\", \"::1\")", path, j);
    }
    nc->n_trusted_forwarders = (unsigned)json_array_size(v);
    return 0;
}

static int parse_node(const json_t *node, size_t idx, const char *base_dir,
                      ag_node_config *nc, sv_error *err)
{
    static const char *const keys[] = {"tag", "listen", "allow_private", "cert", "fallback",
                                       "user_removal", "panel", "speed_limit", "outbound",
                                       "accept_proxy_protocol", "trusted_forwarders", "no_auth",
                                       NULL};
    char path[PATH_MAX_TEXT];
    const char *tag, *listen;
    snprintf(path, sizeof path, "nodes[%zu]", idx);
    int rc = expect_object(node, path, err);
    if (rc == 0)
        rc = check_keys(node, path, keys, err);
    if (rc == 0)
        rc = get_string(node, path, "tag", true, &tag, err);
    if (rc == 0 && strlen(tag) > TAG_MAX)
        rc = sv_error_set(err, -EINVAL, "%s.tag: longer than %d bytes", path, TAG_MAX);
    if (rc == 0 && sv_tag_bad_byte(tag) != NULL) /* the tag itself would garble the line */
        rc = sv_error_set(err, -EINVAL, "%s.tag: byte %zu is a control character, '\"' or '\\' "
                          "(refused in tags)", path, (size_t)(sv_tag_bad_byte(tag) - tag));
    if (rc == 0)
        rc = get_string(node, path, "listen", false, &listen, err);
    if (rc == 0 && listen != NULL && !is_ip_literal(listen))
        rc = sv_error_set(err, -EINVAL, "%s.listen: not an IP address \"%.64s\"", path, listen);
    if (rc == 0) /* users may reach internal addresses only when the node says so */
        rc = get_bool(node, path, "allow_private", &nc->allow_private, err);
    if (rc == 0) /* behind a load balancer: a PROXY header names each client */
        rc = get_bool(node, path, "accept_proxy_protocol", &nc->accept_proxy_protocol, err);
    if (rc == 0) /* a gateway's proxy node: clients without credentials are its one user */
        rc = get_bool(node, path, "no_auth", &nc->no_auth, err);
    if (rc == 0) /* behind an HTTP proxy: X-Forwarded-For from these peers names the client */
        rc = parse_forwarders(node, path, nc, err);
    if (rc == 0) {
        char p[PATH_MAX_TEXT];
        path_key(p, sizeof p, path, "user_removal");
        rc = parse_policy(json_object_get(node, "user_removal"), p, &nc->user_removal, err);
    }
    if (rc == 0) /* the node's limit for each of its users */
        rc = get_mbps(node, path, "speed_limit", &nc->speed_limit, err);
    if (rc == 0 && json_object_get(node, "outbound") != NULL) {
        char p[PATH_MAX_TEXT];
        path_key(p, sizeof p, path, "outbound");
        nc->has_outbound = true;
        rc = ag_socket_policy_parse(json_object_get(node, "outbound"), p, &nc->outbound, err);
    }
    if (rc != 0)
        return rc;
    nc->tag = strdup(tag);
    nc->listen = listen != NULL ? strdup(listen) : NULL;
    if (nc->tag == NULL || (listen != NULL && nc->listen == NULL))
        return sv_error_set(err, -ENOMEM, "%s: out of memory", path);
    rc = parse_cert(node, path, base_dir, &nc->cert, err);
    if (rc == 0)
        rc = parse_fallback(node, path, &nc->fallback, err);
    if (rc != 0)
        return rc;
    return parse_panel(node, path, base_dir, &nc->panel, err);
}

static int parse_nodes(const json_t *root, const char *base_dir, ag_config *cfg, sv_error *err)
{
    const json_t *nodes = json_object_get(root, "nodes");
    if (nodes == NULL)
        return sv_error_set(err, -EINVAL, "nodes: missing required key");
    if (!json_is_array(nodes))
        return sv_error_set(err, -EINVAL, "nodes: expected an array");
    size_t n = json_array_size(nodes);
    if (n == 0)
        return sv_error_set(err, -EINVAL, "nodes: at least one node is required");
    if (n > AG_CONFIG_NODES_MAX)
        return sv_error_set(err, -EINVAL, "nodes: more than %u nodes", AG_CONFIG_NODES_MAX);
    cfg->nodes = calloc(n, sizeof *cfg->nodes);
    if (cfg->nodes == NULL)
        return sv_error_set(err, -ENOMEM, "nodes: out of memory");
    cfg->n_nodes = n;
    for (size_t i = 0; i < n; i++) {
        int rc = parse_node(json_array_get(nodes, i), i, base_dir, &cfg->nodes[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int parse_root(const json_t *root, const char *base_dir, ag_config *cfg, sv_error *err)
{
    static const char *const keys[] = {"log", "workers", "max_connections", "shutdown_grace",
                                       "api", "db", "nodes", "dns", "policies",
                                       "node_speed_limit", "redis", "outbound", NULL};
    if (!json_is_object(root))
        return sv_error_set(err, -EINVAL, "config: expected an object");
    int rc = check_keys(root, "", keys, err);
    if (rc == 0)
        rc = parse_log(root, cfg, err);
    if (rc == 0)
        rc = parse_workers(root, cfg, err);
    if (rc == 0)
        rc = parse_max_connections(root, cfg, err);
    if (rc == 0) /* the node-wide aggregate cap */
        rc = get_mbps(root, "", "node_speed_limit", &cfg->node_speed_limit, err);
    if (rc == 0)
        rc = parse_grace(root, cfg, err);
    if (rc == 0)
        rc = parse_api(root, cfg, err);
    if (rc == 0)
        rc = parse_dns(root, cfg, err);
    if (rc == 0)
        rc = parse_policies(root, cfg, err);
    if (rc == 0)
        rc = parse_redis(root, cfg, err);
    if (rc == 0 && json_object_get(root, "outbound") != NULL)
        rc = ag_socket_policy_parse(json_object_get(root, "outbound"), "outbound",
                                    &cfg->outbound, err);
    if (rc == 0)
        rc = parse_nodes(root, base_dir, cfg, err);
    if (rc == 0)
        rc = parse_db(root, base_dir, cfg, err);
    return rc;
}

int ag_config_parse(const char *text, size_t len, const char *base_dir, ag_config *out,
                    sv_error *err)
{
    json_error_t jerr;
    memset(out, 0, sizeof *out);
    out->log_level = SV_LOG_INFO;
    if (len > AG_CONFIG_MAX_BYTES)
        return sv_error_set(err, -EMSGSIZE, "config is larger than %u bytes",
                            AG_CONFIG_MAX_BYTES);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    char *near = root == NULL ? strstr(jerr.text, " near '") : NULL;
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a password: log no secrets (#5) */
    if (root == NULL)
        return sv_error_set(err, -EINVAL, "line %d, column %d: %s", jerr.line, jerr.column,
                            jerr.text);
    int rc = parse_root(root, base_dir, out, err);
    json_decref(root);
    if (rc != 0)
        ag_config_free(out);
    return rc;
}

int ag_config_load_file(const char *path, ag_config *out, sv_error *err)
{
    json_t *root = NULL;
    memset(out, 0, sizeof *out);
    out->log_level = SV_LOG_INFO;
    int rc = pn_json_load_file(path, AG_CONFIG_MAX_BYTES, &root, err);
    if (rc != 0)
        return rc;
    char *dir = strdup(path);
    if (dir == NULL) {
        json_decref(root);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        strcpy(dir, ".");
    else if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    rc = parse_root(root, dir, out, err);
    json_decref(root);
    free(dir);
    if (rc != 0)
        ag_config_free(out);
    return rc;
}

const char *ag_panel_type_name(enum ag_panel_type type)
{
    switch (type) {
    case AG_PANEL_LOCAL:
        return "local";
    case AG_PANEL_UNIPROXY:
        return "uniproxy";
    case AG_PANEL_SSPANEL:
        return "sspanel";
    case AG_PANEL_XBOARD:
        return "xboard";
    }
    return "unknown";
}

static char *dup_or_null(const char *s, bool *failed)
{
    char *c = s != NULL ? strdup(s) : NULL;
    *failed |= s != NULL && c == NULL;
    return c;
}

int ag_node_config_copy(ag_node_config *dst, const ag_node_config *src)
{
    bool failed = false;
    *dst = *src;
    dst->tag = dup_or_null(src->tag, &failed);
    dst->listen = dup_or_null(src->listen, &failed);
    dst->cert.cert_file = dup_or_null(src->cert.cert_file, &failed);
    dst->cert.key_file = dup_or_null(src->cert.key_file, &failed);
    dst->fallback = dup_or_null(src->fallback, &failed);
    dst->panel.node = json_incref(src->panel.node);
    dst->panel.users = json_incref(src->panel.users);
    dst->panel.node_file = dup_or_null(src->panel.node_file, &failed);
    dst->panel.users_file = dup_or_null(src->panel.users_file, &failed);
    dst->panel.url = dup_or_null(src->panel.url, &failed);
    dst->panel.token = dup_or_null(src->panel.token, &failed);
    dst->panel.node_id = dup_or_null(src->panel.node_id, &failed);
    dst->panel.node_type = dup_or_null(src->panel.node_type, &failed);
    dst->panel.machine_id = dup_or_null(src->panel.machine_id, &failed);
    if (!failed)
        return 0;
    ag_node_config_free(dst);
    return -ENOMEM;
}

void ag_node_config_free(ag_node_config *n)
{
    if (n == NULL)
        return;
    free(n->tag);
    free(n->listen);
    free(n->cert.cert_file);
    free(n->cert.key_file);
    free(n->fallback);
    json_decref(n->panel.node);
    json_decref(n->panel.users);
    free(n->panel.node_file);
    free(n->panel.users_file);
    free(n->panel.url);
    free(n->panel.token);
    free(n->panel.node_id);
    free(n->panel.node_type);
    free(n->panel.machine_id);
    memset(n, 0, sizeof *n);
}

void ag_config_free(ag_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n_nodes; i++)
        ag_node_config_free(&cfg->nodes[i]);
    free(cfg->db_path);
    free(cfg->nodes);
    free(cfg->api_listen);
    free(cfg->api_token);
    memset(cfg, 0, sizeof *cfg);
}

static bool str_differ(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

size_t ag_config_restart_keys(const ag_config *running, const ag_config *next,
                              ag_restart_key_cb cb, void *arg)
{
    const ag_config *a = running, *b = next;
    struct { bool differ; const char *path; } top[] = {
        {a->workers != b->workers, "workers"},
        {a->max_connections != b->max_connections, "max_connections"},
        {a->node_speed_limit != b->node_speed_limit, "node_speed_limit"},
        {memcmp(&a->dns, &b->dns, sizeof a->dns) != 0, "dns"},
        {memcmp(&a->redis, &b->redis, sizeof a->redis) != 0, "redis"},
        {str_differ(a->api_listen, b->api_listen), "api.listen"},
        {str_differ(a->api_token, b->api_token), "api.token"},
        {str_differ(a->db_path, b->db_path), "db.path"},
        {a->db_flush_s != b->db_flush_s, "db.flush_interval"},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (top[i].differ) {
            cb(arg, top[i].path);
            n++;
        }
    for (size_t j = 0; j < b->n_nodes; j++) {
        const ag_panel_config *q = &b->nodes[j].panel, *p = NULL;
        for (size_t i = 0; i < a->n_nodes && p == NULL; i++)
            if (strcmp(a->nodes[i].tag, b->nodes[j].tag) == 0)
                p = &a->nodes[i].panel;
        if (p == NULL || p->type == AG_PANEL_LOCAL || q->type == AG_PANEL_LOCAL)
            continue; /* a local panel is re-read on every load */
        struct { bool differ; const char *key; } keys[] = {
            {p->type != q->type, "type"},
            {str_differ(p->url, q->url), "url"},
            {str_differ(p->token, q->token), "token"},
            {str_differ(p->node_id, q->node_id), "node_id"},
            {str_differ(p->node_type, q->node_type), "node_type"},
            {p->timeout_s != q->timeout_s, "timeout"},
            {p->pull_interval_s != q->pull_interval_s, "pull_interval"},
            {p->push_interval_s != q->push_interval_s, "push_interval"},
            {p->status_interval_s != q->status_interval_s, "status_interval"},
            {str_differ(p->machine_id, q->machine_id), "machine_id"},
        };
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (keys[k].differ) {
                char path[128];
                snprintf(path, sizeof path, "nodes[%zu].panel.%s", j, keys[k].key);
                cb(arg, path);
                n++;
            }
    }
    return n;
}
