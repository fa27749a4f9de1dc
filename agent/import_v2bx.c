/*
 * `katana import v2bx FILE`: V2bX's config.json (InazumaV/V2bX and its forks: "Log",
 * "Cores", "Nodes"; a node is flat, or split into "ApiConfig" and "Options") onto katana's
 * configuration. V2bX speaks V2Board's UniProxy API, so every node becomes a `uniproxy` panel
 * node. V2bX reads its file with comments and trailing commas allowed; so does this.
 */
#include "agent/import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------------------------ */
/* V2bX's JSON dialect                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Blank // and block comments in @p b (newlines kept, so jansson's line numbers hold). */
static void strip_comments(char *b, size_t n)
{
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        if (str) {
            if (b[i] == '\\' && i + 1 < n)
                i++;
            else if (b[i] == '"')
                str = false;
        } else if (b[i] == '"') {
            str = true;
        } else if (b[i] == '/' && i + 1 < n && b[i + 1] == '/') {
            for (; i < n && b[i] != '\n'; i++)
                b[i] = ' ';
        } else if (b[i] == '/' && i + 1 < n && b[i + 1] == '*') {
            size_t j = i + 2;
            char prev = '\0';
            b[i] = b[i + 1] = ' ';
            for (; j < n && !(prev == '*' && b[j] == '/'); j++) {
                prev = b[j];
                if (b[j] != '\n')
                    b[j] = ' ';
            }
            if (j < n)
                b[j] = ' ';
            i = j;
        }
    }
}

/* Blank each ',' that only white space separates from a closing '}' or ']'. */
static void strip_trailing_commas(char *b, size_t n)
{
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        if (str) {
            if (b[i] == '\\' && i + 1 < n)
                i++;
            else if (b[i] == '"')
                str = false;
            continue;
        }
        if (b[i] == '"') {
            str = true;
            continue;
        }
        if (b[i] != ',')
            continue;
        size_t j = i + 1;
        while (j < n && (b[j] == ' ' || b[j] == '\t' || b[j] == '\r' || b[j] == '\n'))
            j++;
        if (j < n && (b[j] == '}' || b[j] == ']'))
            b[i] = ' ';
    }
}

int ag_import_json5_load(const char *text, size_t len, json_t **out, sv_error *err)
{
    json_error_t je;
    char *b = malloc(len + 1);
    *out = NULL;
    if (b == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    memcpy(b, text, len);
    b[len] = '\0';
    strip_comments(b, len);
    strip_trailing_commas(b, len);
    *out = json_loadb(b, len, JSON_REJECT_DUPLICATES, &je);
    free(b);
    if (*out != NULL)
        return 0;
    char *near = strstr(je.text, " near '"); /* the text near the error may be a secret */
    if (near != NULL)
        *near = '\0';
    return sv_error_set(err, -EBADMSG, "JSON line %d column %d: %s", je.line, je.column,
                        je.text);
}

/* ------------------------------------------------------------------------------------------ */
/* the settings                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define NO_ROUTE_FILE "katana has no local route file: its routes come from the panel (routes)"
#define NO_DEVICE_LIMIT "katana applies each user's device_limit from the panel; no node-wide " \
                        "limit"

static const ag_import_key root_keys[] = {{"Log", NULL}, {"Cores", NULL}, {"Nodes", NULL},
                                          {NULL, NULL}};
static const ag_import_key log_keys[] = {
    {"Level", NULL}, {"Output", "katana logs to stderr (the journal under systemd)"},
    {"Access", "katana writes no access log"}, {NULL, NULL}};
static const ag_import_key core_keys[] = {
    {"Type", NULL}, {"Name", NULL}, {"DnsConfigPath", NULL}, {"EnableConnClear", NULL},
    {"Log", "katana has one log (log.level)"},
    {"NTP", "katana does not set the clock: keep it synchronised with the system's NTP "
            "(VMess and REALITY need it)"},
    {"RouteConfigPath", NO_ROUTE_FILE},
    {"OriginalPath", "a raw sing-box config has no katana equivalent"},
    {"AssetPath", "katana needs no geo data files"},
    {"ConnectionConfig", "katana's connection timeouts are its own, not configurable"},
    {"InboundConfigPath", "katana's inbounds are the panel's nodes only"},
    {"OutboundConfigPath", "katana's outbounds are direct and block (outbound, "
                           "nodes[].outbound)"},
    {NULL, NULL}};
static const ag_import_key api_keys[] = {
    {"ApiHost", NULL}, {"ApiKey", NULL}, {"NodeID", NULL}, {"NodeType", NULL}, {"Timeout", NULL},
    {"ApiSendIP", "katana sends panel requests from the address the kernel chooses"},
    {"RuleListPath", "katana takes block rules from the panel's routes; no local rule list"},
    {NULL, NULL}};
static const ag_import_key opt_keys[] = {
    {"Name", NULL}, {"Core", NULL}, {"CoreName", NULL}, {"ListenIP", NULL}, {"SendIP", NULL},
    {"EnableDNS", NULL}, {"DNSType", NULL}, {"DomainStrategy", NULL}, {"LimitConfig", NULL},
    {"CertConfig", NULL}, {"EnableFallback", NULL}, {"FallBackConfigs", NULL},
    {"EnableVless", NULL}, {"EnableXTLS", "katana serves XTLS Vision when the panel's flow asks"},
    {"VlessFlow", "the flow comes from the panel's node settings (flow)"},
    {"EnableProxyProtocol", NULL},
    {"EnableTFO", "katana does not enable TCP Fast Open"},
    {"EnableUot", "katana carries UDP inside each protocol's own UDP; no UDP over TCP"},
    {"DisableIVCheck", "katana always refuses replayed Shadowsocks salts"},
    {"DisableSniffing", "katana always sniffs TLS SNI and HTTP Host for block routes"},
    {"DeviceOnlineMinTraffic", "katana counts every online IP; no traffic minimum"},
    {"ReportMinTraffic", "katana reports every user with traffic; no minimum"},
    {"Hysteria2ConfigPath", "katana does not serve hysteria2"},
    {NULL, NULL}};
static const ag_import_key limit_keys[] = {
    {"SpeedLimit", NULL}, {"EnableRealtime", NULL}, {"DynamicSpeedLimitConfig", NULL},
    {"IpRecorderConfig", NULL}, {"GlobalDeviceLimitConfig", NULL},
    {"IPLimit", NO_DEVICE_LIMIT}, {"DeviceLimit", NO_DEVICE_LIMIT},
    {"ConnLimit", "katana has no per-user connection limit"},
    {"EnableDynamicSpeedLimit", "katana has no dynamic speed limit; a user's speed_limit comes "
                                "from the panel"},
    {"EnableIpRecorder", NULL}, {NULL, NULL}};
static const ag_import_key cert_keys[] = {
    {"CertMode", NULL}, {"CertDomain", NULL}, {"CertFile", NULL}, {"KeyFile", NULL},
    {"Provider", NULL}, {"Email", NULL}, {"DNSEnv", NULL},
    {"RejectUnknownSni", "katana answers every SNI with the node's certificate"},
    {"RealityConfig", "katana takes REALITY settings from the panel (tls_settings)"},
    {NULL, NULL}};

/* The device limit over Redis: V2bX's IP recorder of type Redis, or a GlobalDeviceLimitConfig
 * as XrayR's. */
static void map_redis(ag_import *im, const char *where, const json_t *limit)
{
    const json_t *g = ag_import_get(limit, "GlobalDeviceLimitConfig");
    const json_t *rec = ag_import_get(limit, "IpRecorderConfig");
    json_int_t db = 0, timeout = 0, expiry = 0;
    char w[200];
    if (ag_import_true(g, "Enable")) {
        snprintf(w, sizeof w, "%.96s.GlobalDeviceLimitConfig", where);
        ag_import_int(g, "RedisDB", &db);
        ag_import_int(g, "Timeout", &timeout);
        ag_import_int(g, "Expiry", &expiry);
        ag_import_redis(im, w, ag_import_str(g, "RedisAddr"), ag_import_str(g, "RedisPassword"),
                        db, timeout, expiry);
    }
    if (!ag_import_true(limit, "EnableIpRecorder"))
        return;
    const char *type = ag_import_str(rec, "Type");
    const json_t *r = ag_import_get(rec, "RedisConfig");
    snprintf(w, sizeof w, "%.96s.IpRecorderConfig", where);
    if (type == NULL || strcasecmp(type, "redis") != 0 || !json_is_object(r)) {
        ag_import_warnf(im, "%s: katana reports online IPs to the panel; no other recorder",
                        w);
        return;
    }
    ag_import_int(r, "Db", &db);
    ag_import_int(r, "Expiry", &expiry);
    ag_import_redis(im, w, ag_import_str(r, "Address"), ag_import_str(r, "Password"), db, 0,
                    expiry);
}

static void map_limits(ag_import *im, json_t *node, const char *where, const json_t *limit)
{
    json_int_t speed = 0;
    ag_import_keys(im, where, limit, limit_keys);
    if (ag_import_int(limit, "SpeedLimit", &speed) && speed > 0)
        json_object_set_new(node, "speed_limit", /* katana.json(5): at most 10000000 */
                            json_integer(speed > 10000000 ? 10000000 : speed));
    map_redis(im, where, limit);
}

static void map_cert(ag_import *im, json_t *node, const char *where, const char *type,
                     const json_t *cert)
{
    ag_import_keys(im, where, cert, cert_keys);
    ag_import_cert c = {.mode = ag_import_str(cert, "CertMode"),
                        .cert_file = ag_import_str(cert, "CertFile"),
                        .key_file = ag_import_str(cert, "KeyFile"),
                        .domain = ag_import_str(cert, "CertDomain"),
                        .provider = ag_import_str(cert, "Provider")};
    ag_import_set_cert(im, node, where, type, &c);
}

/* The node's options (the node itself, or its "Options"), on the node @p node. */
static void map_options(ag_import *im, json_t *node, const char *where, const char *type,
                        const json_t *opt)
{
    char w[200];
    snprintf(w, sizeof w, "%.96s.ListenIP", where);
    ag_import_listen(im, node, w, ag_import_str(opt, "ListenIP"));
    if (ag_import_true(opt, "EnableProxyProtocol")) /* a PROXY header names each client */
        json_object_set_new(node, "accept_proxy_protocol", json_true());
    snprintf(w, sizeof w, "%.96s.SendIP", where);
    ag_import_send(im, node, w, ag_import_str(opt, "SendIP"));
    snprintf(w, sizeof w, "%.96s.DomainStrategy", where);
    ag_import_strategy(im, w, ag_import_str(opt, "DomainStrategy"));
    snprintf(w, sizeof w, "%.96s.DNSType", where);
    ag_import_strategy(im, w, ag_import_str(opt, "DNSType"));
    snprintf(w, sizeof w, "%.96s.LimitConfig", where);
    map_limits(im, node, w, ag_import_get(opt, "LimitConfig"));
    snprintf(w, sizeof w, "%.96s.CertConfig", where);
    map_cert(im, node, w, type, ag_import_get(opt, "CertConfig"));
    if (ag_import_true(opt, "EnableFallback")) {
        snprintf(w, sizeof w, "%.96s.FallBackConfigs", where);
        ag_import_fallback(im, node, w, type, ag_import_get(opt, "FallBackConfigs"));
    }
}

/* One element of "Nodes". */
static int map_node(ag_import *im, size_t i, const json_t *n, sv_error *err)
{
    char where[64], w[200];
    json_int_t id = 0;
    snprintf(where, sizeof where, "Nodes[%zu]", i);
    if (ag_import_str(n, "Include") != NULL) {
        ag_import_warnf(im, "%s.Include: katana import reads one file; import %.200s on its own",
                        where, ag_import_str(n, "Include"));
        return 0;
    }
    const json_t *api = ag_import_get(n, "ApiConfig"), *opt = ag_import_get(n, "Options");
    if (api == NULL)
        api = n;
    if (opt == NULL)
        opt = n;
    if (api != n) {
        snprintf(w, sizeof w, "%.96s.ApiConfig", where);
        ag_import_keys(im, w, api, api_keys);
    }
    if (opt != n) {
        snprintf(w, sizeof w, "%.96s.Options", where);
        ag_import_keys(im, w, opt, opt_keys);
    }
    const char *url = ag_import_str(api, "ApiHost"), *key = ag_import_str(api, "ApiKey");
    const char *raw = ag_import_str(api, "NodeType");
    if (raw == NULL)
        raw = ag_import_str(opt, "NodeType");
    if (url == NULL || key == NULL || !ag_import_int(api, "NodeID", &id) || id <= 0)
        return sv_error_set(err, -EBADMSG, "%s: ApiHost, ApiKey and a positive NodeID are "
                            "required", where);
    const char *type = ag_import_node_type(raw, ag_import_true(opt, "EnableVless"));
    if (type == NULL) {
        ag_import_warnf(im, "%s.NodeType \"%.32s\": katana serves shadowsocks, trojan, vless and "
                        "vmess; node %lld left out", where, raw != NULL ? raw : "",
                        (long long)id);
        return 0;
    }
    json_t *node = ag_import_node(im, ag_import_str(opt, "Name"), "uniproxy", url, key, id, type);
    if (node == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    json_int_t timeout;
    if (ag_import_int(api, "Timeout", &timeout) && timeout > 0)
        json_object_set_new(json_object_get(node, "panel"), "timeout",
                            json_integer(timeout > 300 ? 300 : timeout));
    snprintf(w, sizeof w, opt != n ? "%s.Options" : "%s", where);
    map_options(im, node, w, type, opt);
    return 0;
}

/* A node written flat has the keys of both tables: check it against their union; a split one
 * has ApiConfig and Options (checked by map_node()). */
static void check_node_keys(ag_import *im, size_t i, const json_t *n)
{
    static const ag_import_key split[] = {{"ApiConfig", NULL}, {"Options", NULL},
                                          {"Name", NULL}, {"Include", NULL}, {NULL, NULL}};
    char where[64];
    ag_import_key both[64];
    size_t k = 0;
    snprintf(where, sizeof where, "Nodes[%zu]", i);
    if (ag_import_get(n, "ApiConfig") != NULL || ag_import_get(n, "Options") != NULL) {
        ag_import_keys(im, where, n, split);
        return;
    }
    for (size_t j = 0; api_keys[j].name != NULL && k < 60; j++)
        both[k++] = api_keys[j];
    for (size_t j = 0; opt_keys[j].name != NULL && k < 60; j++)
        both[k++] = opt_keys[j];
    both[k++] = (ag_import_key){"ApiConfig", NULL};
    both[k++] = (ag_import_key){"Options", NULL};
    both[k++] = (ag_import_key){"Include", NULL};
    both[k] = (ag_import_key){NULL, NULL};
    ag_import_keys(im, where, n, both);
}

int ag_import_v2bx(ag_import *im, const json_t *root, sv_error *err)
{
    size_t i;
    json_t *v;
    ag_import_keys(im, "(top)", root, root_keys);
    const json_t *log = ag_import_get(root, "Log");
    ag_import_keys(im, "Log", log, log_keys);
    ag_import_log_level(im, "Log.Level", ag_import_str(log, "Level"));
    json_array_foreach(ag_import_get(root, "Cores"), i, v) {
        char where[64];
        snprintf(where, sizeof where, "Cores[%zu]", i);
        ag_import_keys(im, where, v, core_keys);
        snprintf(where, sizeof where, "Cores[%zu].DnsConfigPath", i);
        ag_import_dns_file(im, where, ag_import_str(v, "DnsConfigPath"));
    }
    const json_t *nodes = ag_import_get(root, "Nodes");
    if (!json_is_array(nodes) || json_array_size(nodes) == 0)
        return sv_error_set(err, -EBADMSG, "Nodes: expected a list of nodes");
    json_array_foreach(nodes, i, v) {
        if (!json_is_object(v))
            return sv_error_set(err, -EBADMSG, "Nodes[%zu]: expected an object", i);
        check_node_keys(im, i, v);
        int rc = map_node(im, i, v, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}
