/*
 * `katana import xrayr FILE`: XrayR's config.yml (XrayR-project/XrayR
 * release/config/config.yml.example: "Log", the Xray-core file paths, "ConnectionConfig",
 * "Nodes" of PanelType / ApiConfig / ControllerConfig) onto katana's configuration. An SSpanel
 * node becomes an `sspanel` panel node, a NewV2board or V2board node a `uniproxy` one.
 */
#include "agent/import.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NO_DEVICE_LIMIT "katana applies each user's device_limit from the panel; no node-wide " \
                        "override"

static const ag_import_key root_keys[] = {
    {"Log", NULL}, {"DnsConfigPath", NULL}, {"Nodes", NULL},
    {"RouteConfigPath", "katana has no local route file: its routes come from the panel "
                        "(routes)"},
    {"InboundConfigPath", "katana's inbounds are the panel's nodes only"},
    {"OutboundConfigPath", "katana's outbounds are direct and block (outbound, "
                           "nodes[].outbound)"},
    {"ConnectionConfig", "katana's connection timeouts and buffers are its own, not "
                         "configurable"},
    {"ConnetionConfig", "katana's connection timeouts and buffers are its own, not "
                        "configurable"},
    {NULL, NULL}};
static const ag_import_key log_keys[] = {
    {"Level", NULL}, {"AccessPath", "katana writes no access log"},
    {"ErrorPath", "katana logs to stderr (the journal under systemd)"}, {NULL, NULL}};
static const ag_import_key node_keys[] = {
    {"PanelType", NULL}, {"ApiConfig", NULL}, {"ControllerConfig", NULL}, {NULL, NULL}};
static const ag_import_key api_keys[] = {
    {"ApiHost", NULL}, {"ApiKey", NULL}, {"NodeID", NULL}, {"NodeType", NULL}, {"Timeout", NULL},
    {"EnableVless", NULL}, {"SpeedLimit", NULL},
    {"EnableXTLS", "katana serves XTLS Vision when the panel's flow asks"},
    {"VlessFlow", "the flow comes from the panel's node settings (flow)"},
    {"DeviceLimit", NO_DEVICE_LIMIT},
    {"RuleListPath", "katana takes block rules from the panel (detect rules, routes); no local "
                     "rule list"},
    {"DisableCustomConfig", "katana always reads the panel's custom_config"},
    {NULL, NULL}};
static const ag_import_key ctl_keys[] = {
    {"ListenIP", NULL}, {"SendIP", NULL}, {"UpdatePeriodic", NULL}, {"EnableDNS", NULL},
    {"DNSType", NULL}, {"GlobalDeviceLimitConfig", NULL}, {"EnableFallback", NULL},
    {"FallBackConfigs", NULL}, {"CertConfig", NULL}, {"DisableLocalREALITYConfig", NULL},
    {"REALITYConfigs", NULL}, {"AutoSpeedLimitConfig", NULL},
    {"EnableREALITY", "katana takes REALITY settings from the panel (tls_settings, "
                      "reality-opts); the local REALITYConfigs are left out"},
    {"EnableProxyProtocol", NULL},
    {"DisableSniffing", "katana always sniffs TLS SNI and HTTP Host for block routes"},
    {"DisableUploadTraffic", "katana always reports usage to the panel"},
    {"DisableGetRule", "katana always reads the panel's rules"},
    {"DisableIVCheck", "katana always refuses replayed Shadowsocks salts"},
    {"EnableUot", "katana carries UDP inside each protocol's own UDP; no UDP over TCP"},
    {NULL, NULL}};
static const ag_import_key cert_keys[] = {
    {"CertMode", NULL}, {"CertDomain", NULL}, {"CertFile", NULL}, {"KeyFile", NULL},
    {"Provider", NULL}, {"Email", NULL}, {"DNSEnv", NULL},
    {"RejectUnknownSni", "katana answers every SNI with the node's certificate"},
    {NULL, NULL}};

/* The panel kind katana speaks for a PanelType, or NULL. */
static const char *panel_kind(ag_import *im, const char *where, const char *pt)
{
    if (pt != NULL && strcasecmp(pt, "SSpanel") == 0)
        return "sspanel";
    if (pt != NULL && strcasecmp(pt, "NewV2board") == 0)
        return "uniproxy";
    if (pt != NULL && strcasecmp(pt, "V2board") == 0) {
        ag_import_warnf(im, "%s.PanelType V2board: katana speaks V2Board's UniProxy API (V2Board "
                        "1.7 and later, Xboard), not the older one; wrote uniproxy", where);
        return "uniproxy";
    }
    return NULL;
}

static void map_auto_speed(ag_import *im, const char *where, const json_t *a)
{
    json_int_t limit = 0;
    if (ag_import_int(a, "Limit", &limit) && limit > 0)
        ag_import_warnf(im, "%s.AutoSpeedLimitConfig: katana has no automatic speed limit; a "
                        "user's speed_limit comes from the panel", where);
}

static void map_cert(ag_import *im, json_t *node, const char *where, const char *type,
                     const json_t *cert)
{
    char w[200];
    snprintf(w, sizeof w, "%.96s.CertConfig", where);
    ag_import_keys(im, w, cert, cert_keys);
    ag_import_cert c = {.mode = ag_import_str(cert, "CertMode"),
                        .cert_file = ag_import_str(cert, "CertFile"),
                        .key_file = ag_import_str(cert, "KeyFile"),
                        .domain = ag_import_str(cert, "CertDomain"),
                        .provider = ag_import_str(cert, "Provider")};
    ag_import_set_cert(im, node, w, type, &c);
}

static void map_redis(ag_import *im, const char *where, const json_t *g)
{
    char w[200];
    json_int_t db = 0, timeout = 0, expiry = 0;
    if (!ag_import_true(g, "Enable"))
        return;
    snprintf(w, sizeof w, "%.96s.GlobalDeviceLimitConfig", where);
    ag_import_int(g, "RedisDB", &db);
    ag_import_int(g, "Timeout", &timeout);
    ag_import_int(g, "Expiry", &expiry);
    ag_import_redis(im, w, ag_import_str(g, "RedisAddr"), ag_import_str(g, "RedisPassword"), db,
                    timeout, expiry);
}

/* The ControllerConfig of a node written as @p node. */
static void map_controller(ag_import *im, json_t *node, const char *where, const char *kind,
                           const char *type, const json_t *ctl, const json_t *root)
{
    char w[200];
    json_int_t period = 0;
    snprintf(w, sizeof w, "%.96s.ControllerConfig", where);
    ag_import_keys(im, w, ctl, ctl_keys);
    snprintf(w, sizeof w, "%.96s.ControllerConfig.ListenIP", where);
    ag_import_listen(im, node, w, ag_import_str(ctl, "ListenIP"));
    if (ag_import_true(ctl, "EnableProxyProtocol")) /* a PROXY header names each client */
        json_object_set_new(node, "accept_proxy_protocol", json_true());
    snprintf(w, sizeof w, "%.96s.ControllerConfig.SendIP", where);
    ag_import_send(im, node, w, ag_import_str(ctl, "SendIP"));
    snprintf(w, sizeof w, "%.96s.ControllerConfig.DNSType", where);
    ag_import_strategy(im, w, ag_import_str(ctl, "DNSType"));
    if (ag_import_true(ctl, "EnableDNS"))
        ag_import_dns_file(im, "DnsConfigPath", ag_import_str(root, "DnsConfigPath"));
    if (ag_import_int(ctl, "UpdatePeriodic", &period) && period > 0) {
        period = period > 86400 ? 86400 : period; /* katana.json(5): 1 to 86400 */
        json_t *panel = json_object_get(node, "panel");
        if (strcmp(kind, "sspanel") == 0) {
            json_object_set_new(panel, "pull_interval", json_integer(period));
            json_object_set_new(panel, "push_interval", json_integer(period));
        } else {
            ag_import_warnf(im, "%s.ControllerConfig.UpdatePeriodic: katana pulls and pushes "
                            "at the panel's base_config intervals", where);
        }
    }
    snprintf(w, sizeof w, "%.96s.ControllerConfig", where);
    map_auto_speed(im, w, ag_import_get(ctl, "AutoSpeedLimitConfig"));
    map_redis(im, w, ag_import_get(ctl, "GlobalDeviceLimitConfig"));
    if (ag_import_true(ctl, "EnableFallback")) {
        snprintf(w, sizeof w, "%.96s.ControllerConfig.FallBackConfigs", where);
        ag_import_fallback(im, node, w, type, ag_import_get(ctl, "FallBackConfigs"));
    }
    snprintf(w, sizeof w, "%.96s.ControllerConfig", where);
    map_cert(im, node, w, type, ag_import_get(ctl, "CertConfig"));
}

/* One element of "Nodes". */
static int map_node(ag_import *im, size_t i, const json_t *n, const json_t *root, sv_error *err)
{
    char where[64], w[200];
    json_int_t id = 0, timeout = 0, speed = 0;
    snprintf(where, sizeof where, "Nodes[%zu]", i);
    ag_import_keys(im, where, n, node_keys);
    const json_t *api = ag_import_get(n, "ApiConfig");
    snprintf(w, sizeof w, "%.96s.ApiConfig", where);
    ag_import_keys(im, w, api, api_keys);
    const char *url = ag_import_str(api, "ApiHost"), *key = ag_import_str(api, "ApiKey");
    if (url == NULL || key == NULL || !ag_import_int(api, "NodeID", &id) || id <= 0)
        return sv_error_set(err, -EBADMSG, "%s.ApiConfig: ApiHost, ApiKey and a positive NodeID "
                            "are required", where);
    const char *pt = ag_import_str(n, "PanelType"), *kind = panel_kind(im, where, pt);
    if (kind == NULL) {
        ag_import_warnf(im, "%s.PanelType \"%.32s\": katana speaks SSpanel, NewV2board (UniProxy) "
                        "and Xboard panels; node %lld left out", where, pt != NULL ? pt : "",
                        (long long)id);
        return 0;
    }
    const char *raw = ag_import_str(api, "NodeType");
    const char *type = ag_import_node_type(raw, ag_import_true(api, "EnableVless"));
    if (type == NULL) {
        ag_import_warnf(im, "%s.ApiConfig.NodeType \"%.32s\": katana serves Shadowsocks, "
                        "Trojan and V2ray (VMess, VLESS) nodes; node %lld left out", where,
                        raw != NULL ? raw : "", (long long)id);
        return 0;
    }
    json_t *node = ag_import_node(im, NULL, kind, url, key, id, type);
    if (node == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    if (ag_import_int(api, "Timeout", &timeout) && timeout > 0)
        json_object_set_new(json_object_get(node, "panel"), "timeout",
                            json_integer(timeout > 300 ? 300 : timeout));
    if (ag_import_int(api, "SpeedLimit", &speed) && speed > 0)
        json_object_set_new(node, "speed_limit", /* katana.json(5): at most 10000000 */
                            json_integer(speed > 10000000 ? 10000000 : speed));
    map_controller(im, node, where, kind, type, ag_import_get(n, "ControllerConfig"), root);
    return 0;
}

int ag_import_xrayr(ag_import *im, const json_t *root, sv_error *err)
{
    size_t i;
    json_t *v;
    ag_import_keys(im, "(top)", root, root_keys);
    const json_t *log = ag_import_get(root, "Log");
    ag_import_keys(im, "Log", log, log_keys);
    ag_import_log_level(im, "Log.Level", ag_import_str(log, "Level"));
    const json_t *nodes = ag_import_get(root, "Nodes");
    if (!json_is_array(nodes) || json_array_size(nodes) == 0)
        return sv_error_set(err, -EBADMSG, "Nodes: expected a list of nodes");
    json_array_foreach(nodes, i, v) {
        if (!json_is_object(v))
            return sv_error_set(err, -EBADMSG, "Nodes[%zu]: expected a mapping", i);
        int rc = map_node(im, i, v, root, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}
