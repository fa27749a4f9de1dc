/*
 * The SSPanel-UIM mod_mu parsers (panel/sspanel.h; PANEL.md §2.3–2.5): the node, users,
 * alive IP and detect rule answers, and the answers to pushes. Pure: no I/O, no log; bodies
 * bounded by PN_BODY_MAX and checked by pn_json_check() before any tree is built.
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

#include "panel/jsonscan.h"
#include "panel/keys.h"
#include "panel/model_internal.h"
#include "panel/sspanel.h"
#include "panel/uniproxy.h"

#define INTERVAL_DEFAULT 60u

/* ---------------------------------------------------------------------------------------- */
/* parsers (PANEL.md §2.3–2.5)                                                              */
/* ---------------------------------------------------------------------------------------- */

/* `{"ret":1,"data":...}` → data; ret ≠ 1 is -EPROTO with the panel's msg. */
static int envelope(const json_t *body, const json_t **data, sv_error *err)
{
    if (!json_is_object(body))
        return sv_error_set(err, -EINVAL, "expected a JSON object {\"ret\":1,\"data\":...}");
    const json_t *ret = json_object_get(body, "ret");
    if (!json_is_integer(ret) || json_integer_value(ret) != 1) {
        const json_t *msg = json_object_get(body, "msg");
        return sv_error_set(err, -EPROTO, "ret %s: %.200s", json_is_integer(ret)
                            ? (json_integer_value(ret) == 0 ? "0" : "not 1") : "missing",
                            json_is_string(msg) ? json_string_value(msg) : "no message");
    }
    *data = json_object_get(body, "data");
    return 0;
}

/* A non-negative integer (JSON integer or decimal string) no larger than max. */
static int get_uint(const json_t *v, const char *path, uint64_t max, uint64_t *out,
                    sv_error *err)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < 0)
            return sv_error_set(err, -EINVAL, "%s: negative", path);
        if ((uint64_t)x > max)
            return sv_error_set(err, -EINVAL, "%s: larger than %" PRIu64, path, max);
        *out = (uint64_t)x;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        uint64_t x = 0;
        if (n == 0 || n > 20)
            return sv_error_set(err, -EINVAL, "%s: expected a number", path);
        for (size_t i = 0; i < n; i++) {
            if (s[i] < '0' || s[i] > '9')
                return sv_error_set(err, -EINVAL, "%s: expected a number", path);
            if (x > (UINT64_MAX - 9) / 10)
                return sv_error_set(err, -EINVAL, "%s: larger than %" PRIu64, path, max);
            x = x * 10 + (uint64_t)(s[i] - '0');
        }
        if (x > max)
            return sv_error_set(err, -EINVAL, "%s: larger than %" PRIu64, path, max);
        *out = x;
        return 0;
    }
    return sv_error_set(err, -EINVAL, "%s: expected a number", path);
}

/* Mbps as mod_mu sends it (a float column: integer, real or numeric string); absent or null
 * is 0; a fraction rounds up to a whole Mbps (never to "unlimited"). */
static int get_mbps(const json_t *obj, const char *key, const char *path, uint64_t *out,
                    sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= 0))
            return sv_error_set(err, -EINVAL, "%s: negative", path);
        if (d > PN_SSPANEL_SPEED_MAX)
            return sv_error_set(err, -EINVAL, "%s: larger than %u", path, PN_SSPANEL_SPEED_MAX);
        *out = (uint64_t)ceil(d);
        return 0;
    }
    return get_uint(v, path, PN_SSPANEL_SPEED_MAX, out, err);
}

/* A string member (absent or null → NULL); longer than max is -EMSGSIZE. */
static int opt_text(const json_t *obj, const char *key, const char *path, size_t max,
                    const char **out, sv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return sv_error_set(err, -EINVAL, "%s: expected a string", path);
    if (json_string_length(v) > max)
        return sv_error_set(err, -EMSGSIZE, "%s: longer than %zu bytes", path, max);
    *out = json_string_value(v);
    return 0;
}

static bool set_text(const char *s)
{
    return s != NULL && s[0] != '\0' && strcmp(s, "0") != 0;
}

static int dup_text(char **dst, const char *s)
{
    if (!set_text(s))
        return 0;
    *dst = strdup(s);
    return *dst != NULL ? 0 : -ENOMEM;
}

static const char *sort_name(int sort)
{
    switch (sort) {
    case 2: return "TUIC";
    case 9: return "ShadowsocksR";
    case 10: return "Shadowsocks relay";
    case 12: return "V2Ray relay";
    case 13: return "Shadowsocks V2Ray-Plugin";
    default: return "unknown";
    }
}

/* The node's listening port: custom_config offset_port_node, else offset_port_user, else the
 * legacy `server` string's second field ("443" or "port=443#12345": the part after '#'). */
static int node_port(const json_t *cc, const char *server, uint16_t *port, sv_error *err)
{
    static const char *const keys[] = {"offset_port_node", "offset_port_user"};
    uint64_t x = 0;
    for (int i = 0; i < 2; i++) {
        const json_t *v = cc != NULL ? json_object_get(cc, keys[i]) : NULL;
        if (v == NULL || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
            continue;
        char path[64];
        snprintf(path, sizeof path, "data.custom_config.%s", keys[i]);
        int rc = get_uint(v, path, 65535, &x, err);
        if (rc == 0 && x == 0)
            rc = sv_error_set(err, -EINVAL, "%s: expected a port number", path);
        if (rc == 0)
            *port = (uint16_t)x;
        return rc;
    }
    const char *semi = server != NULL ? strchr(server, ';') : NULL;
    if (semi != NULL) {
        const char *p = semi + 1, *hash = strchr(p, '#'), *eq = strchr(p, '=');
        size_t end = strcspn(p, ";|");
        if (hash != NULL && (size_t)(hash - p) < end)
            p = hash + 1;
        else if (eq != NULL && (size_t)(eq - p) < end)
            p = eq + 1;
        size_t n = strspn(p, "0123456789");
        for (size_t i = 0; i < n && i < 6; i++)
            x = x * 10 + (uint64_t)(p[i] - '0');
        if (n > 0 && n < 6 && x > 0 && x <= 65535) {
            *port = (uint16_t)x;
            return 0;
        }
    }
    return sv_error_set(err, -EINVAL, "data.custom_config.offset_port_node: missing (no port "
                        "in custom_config or server)");
}

/* custom_config: an object, or (older panels) a string holding one. */
static int custom_config(const json_t *data, json_t **out, sv_error *err)
{
    const json_t *v = json_object_get(data, "custom_config");
    *out = NULL;
    if (v == NULL || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0) ||
        (json_is_array(v) && json_array_size(v) == 0))
        return 0;
    if (json_is_object(v)) {
        *out = json_incref((json_t *)v);
        return 0;
    }
    if (json_is_string(v)) {
        if (json_string_length(v) > PN_TEXT_MAX * 4)
            return sv_error_set(err, -EMSGSIZE, "data.custom_config: longer than %u bytes",
                                PN_TEXT_MAX * 4);
        *out = json_loadb(json_string_value(v), json_string_length(v),
                          JSON_REJECT_DUPLICATES, NULL);
        if (json_is_object(*out))
            return 0;
        json_decref(*out);
        *out = NULL;
    }
    return sv_error_set(err, -EINVAL, "data.custom_config: expected an object");
}

/* ---- reality-opts (PANEL.md §2.5; PROTOCOLS-2.md §1.1) ------------------------------------ */

#define RO "data.custom_config.reality-opts."
#define RO_LIST_MAX 16u  /* names or short ids, as the REALITY layer's SV_REALITY_LIST_MAX */
#define RO_NAME_MAX 253u /* a DNS name */

/* `dest`: "host:port" ([v6]:port too) or a bare port N, as a string or a number, into
 * @p out as "host:port" (N: "127.0.0.1:N", Xray's localhost:N). */
static int reality_dest(const json_t *v, char **out, sv_error *err)
{
    char buf[RO_NAME_MAX + 16];
    uint64_t port = 0;
    if (v == NULL || json_is_null(v))
        return sv_error_set(err, -EINVAL, RO "dest: missing (the target site, host:port)");
    if (json_is_integer(v) || (json_is_string(v) && json_string_length(v) > 0 &&
                               json_string_length(v) <= 5 &&
                               strspn(json_string_value(v), "0123456789") ==
                                   json_string_length(v))) {
        int rc = get_uint(v, RO "dest", 65535, &port, err);
        if (rc == 0 && port == 0)
            rc = sv_error_set(err, -EINVAL, RO "dest: port 0");
        if (rc != 0)
            return rc;
        snprintf(buf, sizeof buf, "127.0.0.1:%u", (unsigned)port);
    } else {
        if (!json_is_string(v))
            return sv_error_set(err, -EINVAL, RO "dest: expected host:port or a port");
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n >= sizeof buf)
            return sv_error_set(err, -EMSGSIZE, RO "dest: longer than %zu bytes",
                                sizeof buf - 1);
        if (s[0] == '/' || s[0] == '@')
            return sv_error_set(err, -EINVAL, RO "dest: a Unix socket target is not served "
                                "(host:port or a port)");
        const char *colon = strrchr(s, ':');
        size_t host = colon != NULL ? (size_t)(colon - s) : 0;
        size_t digits = colon != NULL ? strspn(colon + 1, "0123456789") : 0;
        for (size_t i = 0; colon != NULL && i < digits && i < 6; i++)
            port = port * 10 + (uint64_t)(colon[1 + i] - '0');
        if (host == 0 || digits == 0 || digits > 5 || colon[1 + digits] != '\0' ||
            port == 0 || port > 65535 || strlen(s) != n || strcspn(s, " \t,/") != n ||
            (s[0] == '[') != (s[host - 1] == ']'))
            return sv_error_set(err, -EINVAL, RO "dest: \"%.64s\": expected host:port or a "
                                "port", s);
        memcpy(buf, s, n + 1);
    }
    *out = strdup(buf);
    return *out != NULL ? 0 : sv_error_set(err, -ENOMEM, "out of memory");
}

/* The short ids (each at most 16 hex digits, an even count) or server names (each 1..253
 * printable characters, no ',' or space) of array member @p key, joined with ',' into @p out;
 * at most RO_LIST_MAX, at least one name (no short id means the all-zero one only). */
static int reality_list(const json_t *ro, const char *key, bool names, char **out,
                        sv_error *err)
{
    const json_t *v = json_object_get(ro, key);
    if (v == NULL || json_is_null(v)) {
        if (names)
            return sv_error_set(err, -EINVAL, RO "%s: missing (the SNI values clients send)",
                                key);
        *out = strdup("");
        return *out != NULL ? 0 : sv_error_set(err, -ENOMEM, "out of memory");
    }
    if (!json_is_array(v))
        return sv_error_set(err, -EINVAL, RO "%s: expected an array of strings", key);
    size_t count = json_array_size(v);
    if ((names && count == 0) || count > RO_LIST_MAX)
        return sv_error_set(err, -EINVAL, RO "%s: expected %s to %u entries", key,
                            names ? "1" : "0", RO_LIST_MAX);
    char *joined = calloc(1, RO_LIST_MAX * (RO_NAME_MAX + 1) + 1);
    if (joined == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        const json_t *e = json_array_get(v, i);
        const char *s = json_is_string(e) ? json_string_value(e) : NULL;
        size_t n = s != NULL ? json_string_length(e) : 0;
        bool ok = s != NULL && strlen(s) == n;
        for (size_t k = 0; ok && k < n; k++)
            ok = names ? s[k] > ' ' && s[k] < 0x7f && s[k] != ','
                       : strchr("0123456789abcdefABCDEF", s[k]) != NULL;
        ok = ok && (names ? n >= 1 && n <= RO_NAME_MAX : n <= 16 && n % 2 == 0);
        if (!ok) {
            free(joined);
            return sv_error_set(err, -EINVAL, RO "%s[%zu]: expected %s", key, i,
                                names ? "a DNS name of 1 to 253 characters"
                                      : "at most 16 hex digits, an even count");
        }
        if (i > 0)
            joined[at++] = ',';
        memcpy(joined + at, s, n);
        at += n;
    }
    *out = joined;
    return 0;
}

/* A client version bound "x.y.z" (each part 0..255; "" or null = none) as a 24-bit value. */
static int reality_version(const json_t *ro, const char *key, uint32_t *out, sv_error *err)
{
    const char *s = NULL;
    char path[64];
    snprintf(path, sizeof path, RO "%s", key);
    int rc = opt_text(ro, key, path, 16, &s, err);
    if (rc != 0 || !set_text(s))
        return rc;
    uint32_t v = 0;
    const char *p = s;
    for (int part = 0; part < 3; part++) {
        size_t n = strspn(p, "0123456789");
        unsigned x = 0;
        for (size_t i = 0; i < n && i < 4; i++)
            x = x * 10 + (unsigned)(p[i] - '0');
        if (n == 0 || n > 3 || x > 255 || p[n] != (part < 2 ? '.' : '\0'))
            return sv_error_set(err, -EINVAL, "%s: \"%.16s\": expected x.y.z, each part at "
                                "most 255", path, s);
        v = v << 8 | x;
        p += n + 1;
    }
    *out = v;
    return 0;
}

/* enable_reality's `reality-opts` (PANEL.md §2.5) into @p r, each field checked and its bounds
 * enforced here so that an error names the SSPanel field (PROTOCOLS-2.md §1.1 for the
 * meanings). */
static int reality_opts(const json_t *cc, pn_reality *r, sv_error *err)
{
    static const char b64url[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const json_t *ro = json_object_get(cc, "reality-opts");
    if (ro == NULL || json_is_null(ro))
        return sv_error_set(err, -EINVAL, "data.custom_config.reality-opts: missing (required "
                            "with enable_reality)");
    if (!json_is_object(ro))
        return sv_error_set(err, -EINVAL, "data.custom_config.reality-opts: expected an object");
    const char *key = NULL;
    uint64_t xver = 0, diff = 0;
    const json_t *pv = json_object_get(ro, "proxy_protocol_ver");
    const json_t *dv = json_object_get(ro, "max_time_diff");
    int rc = reality_dest(json_object_get(ro, "dest"), &r->target, err);
    if (rc == 0)
        rc = reality_list(ro, "server_names", true, &r->server_names, err);
    if (rc == 0)
        rc = reality_list(ro, "short_ids", false, &r->short_ids, err);
    if (rc == 0)
        rc = opt_text(ro, "private_key", RO "private_key", 44, &key, err);
    if (rc == 0 && (key == NULL || strspn(key, b64url) != 43 ||
                    (key[43] != '\0' && strcmp(key + 43, "=") != 0)))
        rc = sv_error_set(err, -EINVAL, RO "private_key: expected an X25519 key, 43 base64url "
                          "characters");
    if (rc == 0 && (r->private_key = strndup(key, 43)) == NULL)
        rc = sv_error_set(err, -ENOMEM, "out of memory");
    if (rc == 0 && pv != NULL && !json_is_null(pv))
        rc = get_uint(pv, RO "proxy_protocol_ver", 2, &xver, err);
    if (rc == 0 && dv != NULL && !json_is_null(dv))
        rc = get_uint(dv, RO "max_time_diff", UINT32_MAX, &diff, err);
    if (rc == 0)
        rc = reality_version(ro, "min_client_ver", &r->min_client_ver, err);
    if (rc == 0)
        rc = reality_version(ro, "max_client_ver", &r->max_client_ver, err);
    if (rc == 0 && r->max_client_ver != 0 && r->min_client_ver > r->max_client_ver)
        rc = sv_error_set(err, -EINVAL, RO "min_client_ver: above max_client_ver");
    r->xver = (uint8_t)xver;
    r->max_time_diff = diff;
    return rc;
}

/* The V2Ray / Trojan transport and TLS keys of custom_config (§2.5) into the model's fields
 * and PN_SET_* bits, so lowering serves or refuses them by name. */
static int transport_fields(const json_t *cc, pn_node *out, sv_error *err)
{
    const char *network = NULL, *security = NULL, *host = NULL, *flow = NULL, *path = NULL,
               *service = NULL;
    int rc = 0;
    if (cc == NULL)
        return 0;
    if (rc == 0)
        rc = opt_text(cc, "network", "data.custom_config.network", 32, &network, err);
    if (rc == 0)
        rc = opt_text(cc, "security", "data.custom_config.security", 32, &security, err);
    if (rc == 0)
        rc = opt_text(cc, "host", "data.custom_config.host", PN_TEXT_MAX, &host, err);
    if (rc == 0)
        rc = opt_text(cc, "flow", "data.custom_config.flow", PN_TEXT_MAX, &flow, err);
    if (rc == 0)
        rc = opt_text(cc, "path", "data.custom_config.path", PN_TEXT_MAX, &path, err);
    if (rc == 0)
        rc = opt_text(cc, "servicename", "data.custom_config.servicename", PN_TEXT_MAX,
                      &service, err);
    if (rc != 0)
        return rc;
    const json_t *reality = json_object_get(cc, "enable_reality");
    const json_t *header = json_object_get(cc, "header");
    if (set_text(security) && strcmp(security, "none") != 0) {
        out->set |= PN_SET_TLS;
        out->tls = strcmp(security, "tls") == 0 ? 1 : 2;
    }
    if (json_is_true(reality)) {
        out->set |= PN_SET_TLS;
        out->tls = 2;
        rc = reality_opts(cc, &out->reality, err);
        if (rc != 0)
            return rc;
    }
    if (set_text(flow)) {
        out->set |= PN_SET_FLOW;
        if (dup_text(&out->flow, flow) != 0)
            return sv_error_set(err, -ENOMEM, "out of memory");
    }
    if (set_text(path) || set_text(service) ||
        (header != NULL && !json_is_null(header) && !(json_is_object(header) &&
                                                      json_object_size(header) == 0)))
        out->set |= PN_SET_NETWORK_SETTINGS;
    if ((set_text(network) && dup_text(&out->network, network) != 0) ||
        dup_text(&out->host, host) != 0 || dup_text(&out->server_name, host) != 0)
        return sv_error_set(err, -ENOMEM, "out of memory");
    return 0;
}

/* "2025.1.0" → 2025, 1; two-digit years (older panels) as 20YY. */
static void parse_version(const char *v, pn_sspanel_meta *meta)
{
    unsigned y = 0, m = 0;
    if (v != NULL && sscanf(v, "%u.%u", &y, &m) == 2) {
        meta->version_year = y < 100 ? 2000 + y : y;
        meta->version_month = m;
    }
}

static int node_fields(const json_t *data, pn_sspanel_meta *meta, pn_node *out, sv_error *err)
{
    uint64_t sort = 0;
    const char *server = NULL, *version = NULL, *method = NULL, *server_key = NULL;
    json_t *cc = NULL;
    const json_t *s = json_object_get(data, "sort");
    int rc = s == NULL ? sv_error_set(err, -EINVAL, "data.sort: missing")
                       : get_uint(s, "data.sort", 1000, &sort, err);
    meta->sort = (int)sort;
    if (rc == 0)
        rc = get_mbps(data, "node_speedlimit", "data.node_speedlimit", &meta->speed_mbps, err);
    if (rc == 0)
        rc = opt_text(data, "server", "data.server", PN_TEXT_MAX, &server, err);
    if (rc == 0)
        rc = opt_text(data, "version", "data.version", 32, &version, err);
    if (rc == 0)
        rc = custom_config(data, &cc, err);
    if (rc == 0 && cc != NULL)
        rc = opt_text(cc, "method", "data.custom_config.method", PN_SSPANEL_METHOD_MAX - 1,
                      &method, err);
    if (rc == 0 && cc != NULL)
        rc = opt_text(cc, "server_key", "data.custom_config.server_key", PN_TEXT_MAX,
                      &server_key, err);
    if (rc != 0)
        goto out;
    parse_version(version, meta);
    const char *protocol = NULL;
    switch (sort) {
    case 0:
    case 1:
        protocol = "shadowsocks";
        if (!set_text(method)) {
            rc = sv_error_set(err, -EINVAL, "data.custom_config.method: missing (the node's "
                              "Shadowsocks method)");
            goto out;
        }
        if ((sort == 1) != (strncmp(method, "2022-", 5) == 0)) {
            rc = sv_error_set(err, -EINVAL, "data.custom_config.method: \"%.40s\" does not "
                              "match node type %d", method, (int)sort);
            goto out;
        }
        snprintf(meta->method, sizeof meta->method, "%s", method);
        break;
    case 11: {
        const json_t *vl = json_object_get(cc, "enable_vless");
        bool vless = (json_is_string(vl) && strcmp(json_string_value(vl), "1") == 0) ||
                     json_is_true(vl) || (json_is_integer(vl) && json_integer_value(vl) == 1);
        protocol = vless ? "vless" : "vmess";
        break;
    }
    case 14:
        protocol = "trojan";
        break;
    default:
        rc = sv_error_set(err, -EINVAL, "data.sort: node type %d (%s) is not served by katana",
                          (int)sort, sort_name((int)sort));
        goto out;
    }
    rc = node_port(cc, server, &out->server_port, err);
    if (rc == 0 && sort >= 11)
        rc = transport_fields(cc, out, err);
    if (rc == 0 && ((out->protocol = strdup(protocol)) == NULL ||
                    (sort <= 1 && (out->cipher = strdup(method)) == NULL) ||
                    (sort == 1 && dup_text(&out->server_key, server_key) != 0)))
        rc = sv_error_set(err, -ENOMEM, "out of memory");
out:
    json_decref(cc);
    return rc;
}

/* The keys of a node info answer (PANEL.md §2.1, §2.5: what mod_mu sends, the legacy keys, and
 * the custom_config keys XrayR and the panel's subscription builders read). */
static const char *const data_keys[] = {"node_speedlimit", "sort", "server", "custom_config",
                                        "type", "version", "node_iplimit", "node_connector",
                                        "alive_ip", NULL};
static const char *const cc_keys[] = {
    "offset_port_node", "offset_port_user", "host", "method", "server_key", "network",
    "security", "path", "servicename", "header", "enable_vless", "flow", "enable_reality",
    "reality-opts", "congestion_control", "allow_insecure", "uot", "utls", "max_early_data",
    "early_data_header_name", NULL};
static const char *const ro_keys[] = {"dest", "proxy_protocol_ver", "server_names",
                                      "private_key", "min_client_ver", "max_client_ver",
                                      "max_time_diff", "short_ids", NULL};

/* A panel's keys katana does not know into out->unknown, for one warning each (never refused:
 * panels add keys). */
static int list_unknown_keys(const json_t *data, pn_node *out, sv_error *err)
{
    pn__unknown_list l = {.node = out};
    json_t *cc = NULL;
    int rc = pn_keys_check(data, "data", data_keys, false, pn__list_unknown, &l, err);
    if (rc == 0)
        rc = custom_config(data, &cc, err);
    if (rc == 0 && cc != NULL)
        rc = pn_keys_check(cc, "data.custom_config", cc_keys, false, pn__list_unknown, &l, err);
    if (rc == 0 && cc != NULL)
        rc = pn_keys_check(json_object_get(cc, "reality-opts"), "data.custom_config.reality-opts",
                           ro_keys, false, pn__list_unknown, &l, err);
    json_decref(cc);
    if (rc == 0 && l.failed != 0)
        rc = sv_error_set(err, l.failed, "data: out of memory");
    return rc;
}

int pn_sspanel_parse_node(const json_t *body, uint32_t pull, uint32_t push,
                          pn_sspanel_meta *meta, pn_node *out, sv_error *err)
{
    const json_t *data = NULL;
    memset(out, 0, sizeof *out);
    memset(meta, 0, sizeof *meta);
    int rc = envelope(body, &data, err);
    if (rc == 0 && !json_is_object(data))
        rc = sv_error_set(err, -EINVAL, "data: expected an object");
    if (rc == 0)
        rc = node_fields(data, meta, out, err);
    if (rc == 0)
        rc = list_unknown_keys(data, out, err);
    if (rc != 0) {
        pn_node_free(out);
        memset(meta, 0, sizeof *meta);
        return rc;
    }
    out->pull_interval = pull > 0 ? pull : INTERVAL_DEFAULT;
    out->push_interval = push > 0 ? push : INTERVAL_DEFAULT;
    return 0;
}

static int cmp_user_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One entry of `data`; *keep false when the user is left out (another method). */
static int parse_user(const json_t *v, size_t idx, const pn_sspanel_meta *meta, pn_user *u,
                      bool *keep, uint32_t *alive, sv_error *err)
{
    char path[64];
    uint64_t x = 0;
    const char *secret = NULL, *method = NULL;
    bool ss = meta->sort <= 1;
    *keep = true;
    *alive = 0;
    if (!json_is_object(v))
        return sv_error_set(err, -EINVAL, "data[%zu]: expected an object", idx);
    snprintf(path, sizeof path, "data[%zu].id", idx);
    const json_t *id = json_object_get(v, "id");
    int rc = id == NULL ? sv_error_set(err, -EINVAL, "%s: missing", path)
                        : get_uint(id, path, INT64_MAX, &u->id, err);
    if (rc == 0 && u->id == 0)
        rc = sv_error_set(err, -EINVAL, "%s: expected a positive integer", path);
    snprintf(path, sizeof path, "data[%zu].%s", idx, ss ? "passwd" : "uuid");
    if (rc == 0)
        rc = opt_text(v, ss ? "passwd" : "uuid", path, PN_UUID_MAX, &secret, err);
    if (rc == 0 && (secret == NULL || secret[0] == '\0'))
        rc = sv_error_set(err, -EINVAL, "%s: missing", path);
    snprintf(path, sizeof path, "data[%zu].method", idx);
    if (rc == 0)
        rc = opt_text(v, "method", path, PN_TEXT_MAX, &method, err);
    snprintf(path, sizeof path, "data[%zu].node_speedlimit", idx);
    if (rc == 0)
        rc = get_mbps(v, "node_speedlimit", path, &u->speed_limit, err);
    snprintf(path, sizeof path, "data[%zu].node_iplimit", idx);
    const json_t *lim = json_object_get(v, "node_iplimit");
    if (rc == 0 && lim != NULL && !json_is_null(lim))
        rc = get_uint(lim, path, PN_SSPANEL_IPLIMIT_MAX, &x, err);
    u->device_limit = (uint32_t)x;
    snprintf(path, sizeof path, "data[%zu].alive_ip", idx);
    const json_t *al = json_object_get(v, "alive_ip");
    x = 0;
    if (rc == 0 && al != NULL && !json_is_null(al))
        rc = get_uint(al, path, UINT32_MAX, &x, err);
    *alive = (uint32_t)x;
    if (rc != 0)
        return rc;
    if (meta->sort == 0 && set_text(method) && strcmp(method, meta->method) != 0) {
        *keep = false;
        return 0;
    }
    if (u->speed_limit == 0)
        u->speed_limit = meta->speed_mbps;
    u->uuid = strdup(secret);
    return u->uuid != NULL ? 0 : sv_error_set(err, -ENOMEM, "out of memory");
}

/* Refuse a list holding one id twice (katana keys users by id), naming the second entry. */
static int check_unique(const pn_users *users, const uint32_t *index, sv_error *err)
{
    if (users->n < 2)
        return 0;
    uint64_t *ids = malloc(users->n * sizeof *ids);
    if (ids == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < users->n; i++)
        ids[i] = users->users[i].id;
    qsort(ids, users->n, sizeof *ids, cmp_user_id);
    int rc = 0;
    for (size_t i = 1; i < users->n && rc == 0; i++)
        if (ids[i] == ids[i - 1])
            for (size_t k = 0, seen = 0; k < users->n && rc == 0; k++)
                if (users->users[k].id == ids[i] && seen++ == 1)
                    rc = sv_error_set(err, -EINVAL, "data[%u].id: duplicate user id %" PRIu64,
                                      index[k], ids[i]);
    free(ids);
    return rc;
}

/* pn_sspanel_parse_users() of @p body, whose `data` array is @p src's when it splits it. */
static int parse_users_from(const json_t *body, pn_json_body *src, const pn_sspanel_meta *meta,
                            pn_users *out, size_t *skipped, pn_alive_count **alive,
                            size_t *n_alive, sv_error *err)
{
    const json_t *data = NULL;
    memset(out, 0, sizeof *out);
    *skipped = 0;
    if (alive != NULL) {
        *alive = NULL;
        *n_alive = 0;
    }
    int rc = envelope(body, &data, err);
    if (rc != 0)
        return rc;
    if (!json_is_array(data))
        return sv_error_set(err, -EINVAL, "data: expected an array of users");
    size_t n = src != NULL && src->open != 0 ? src->n : json_array_size(data);
    if (n > PN_USERS_MAX)
        return sv_error_set(err, -EMSGSIZE, "data: more than %u users", PN_USERS_MAX);
    if (n == 0)
        return 0; /* an empty list revokes everyone (PANEL.md §4.2) */
    uint32_t *index = malloc(n * sizeof *index);
    pn_alive_count *al = calloc(n, sizeof *al);
    out->users = calloc(n, sizeof *out->users);
    if (index == NULL || al == NULL || out->users == NULL) {
        rc = sv_error_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    size_t k = 0, na = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        bool keep = false;
        uint32_t cnt = 0;
        const json_t *v;
        json_t *own;
        rc = pn_json_body_at(data, src, i, "data", &v, &own, err);
        if (rc == 0)
            rc = parse_user(v, i, meta, &out->users[k], &keep, &cnt, err);
        json_decref(own);
        if (rc == 0 && cnt > 0)
            al[na++] = (pn_alive_count){.user = out->users[k].id, .count = cnt};
        if (rc == 0 && keep) {
            index[k++] = (uint32_t)i;
        } else {
            free(out->users[k].uuid);
            memset(&out->users[k], 0, sizeof out->users[k]);
            *skipped += rc == 0;
        }
        out->n = k;
    }
    if (rc == 0)
        rc = check_unique(out, index, err);
    if (rc == 0 && alive != NULL && na > 0) {
        *alive = al;
        *n_alive = na;
        al = NULL;
    }
out:
    free(index);
    free(al);
    if (rc != 0) {
        pn_users_free(out);
        *skipped = 0;
    }
    return rc;
}

int pn_sspanel_parse_users(const json_t *body, const pn_sspanel_meta *meta, pn_users *out,
                           size_t *skipped, pn_alive_count **alive, size_t *n_alive,
                           sv_error *err)
{
    return parse_users_from(body, NULL, meta, out, skipped, alive, n_alive, err);
}

int pn_sspanel_parse_users_text(const char *text, size_t len, const pn_sspanel_meta *meta,
                                pn_users *out, size_t *skipped, pn_alive_count **alive,
                                size_t *n_alive, sv_error *err)
{
    pn_json_body b;
    memset(out, 0, sizeof *out);
    *skipped = 0;
    if (alive != NULL) {
        *alive = NULL;
        *n_alive = 0;
    }
    int rc = pn_json_body_load(&b, text, len, "data", err);
    if (rc == 0)
        rc = parse_users_from(b.root, &b, meta, out, skipped, alive, n_alive, err);
    pn_json_body_free(&b);
    return rc;
}

static int route_block_regex(pn_route *r, int64_t id, const char *regex)
{
    size_t n = strlen(regex);
    r->id = id;
    r->match = calloc(1, sizeof *r->match);
    r->action = strdup("block");
    if (r->match != NULL && (r->match[0] = malloc(n + 8)) != NULL) {
        memcpy(r->match[0], "regexp:", 7);
        memcpy(r->match[0] + 7, regex, n + 1);
        r->n_match = 1;
    }
    return r->action != NULL && r->n_match == 1 ? 0 : -ENOMEM;
}

int pn_sspanel_parse_rules(const json_t *body, pn_route **out, size_t *n, size_t *skipped,
                           sv_error *err)
{
    const json_t *data = NULL;
    *out = NULL;
    *n = *skipped = 0;
    int rc = envelope(body, &data, err);
    if (rc != 0)
        return rc;
    if (json_is_null(data) || (json_is_object(data) && json_object_size(data) == 0))
        return 0;
    if (!json_is_array(data))
        return sv_error_set(err, -EINVAL, "data: expected an array of rules");
    size_t total = json_array_size(data);
    if (total > PN_ROUTES_MAX)
        return sv_error_set(err, -EMSGSIZE, "data: more than %u rules", PN_ROUTES_MAX);
    pn_route *v = total > 0 ? calloc(total, sizeof *v) : NULL;
    if (total > 0 && v == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < total && rc == 0; i++) {
        const json_t *e = json_array_get(data, i);
        char path[64];
        uint64_t id = 0, type = 0;
        const char *regex = NULL;
        snprintf(path, sizeof path, "data[%zu]", i);
        if (!json_is_object(e)) {
            rc = sv_error_set(err, -EINVAL, "%s: expected an object", path);
            break;
        }
        snprintf(path, sizeof path, "data[%zu].id", i);
        rc = get_uint(json_object_get(e, "id"), path, INT64_MAX, &id, err);
        snprintf(path, sizeof path, "data[%zu].type", i);
        const json_t *t = json_object_get(e, "type");
        if (rc == 0 && t != NULL && !json_is_null(t))
            rc = get_uint(t, path, 1000, &type, err);
        snprintf(path, sizeof path, "data[%zu].regex", i);
        if (rc == 0)
            rc = opt_text(e, "regex", path, PN_TEXT_MAX, &regex, err);
        if (rc != 0)
            break;
        if (type != 1 || regex == NULL || regex[0] == '\0') { /* hex rules match bytes */
            (*skipped)++;
            continue;
        }
        rc = route_block_regex(&v[k++], (int64_t)id, regex);
        if (rc != 0)
            sv_error_set(err, rc, "out of memory");
    }
    if (rc != 0) {
        pn_node tmp = {.routes = v, .n_routes = k};
        pn_node_free(&tmp);
        *skipped = 0;
        return rc;
    }
    if (k == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = k;
    return 0;
}

/* Error text of a non-2xx answer or a body that is not JSON: mod_mu's `msg`, else the start. */
int pn_sspanel_check_ack(long status, const char *body, size_t len, sv_error *err)
{
    if (status < 200 || status > 299)
        return pn_uniproxy_error(status, body, len, err);
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const json_t *data = NULL;
    sv_error inner = {0};
    int rc = j == NULL ? sv_error_set(&inner, -EPROTO, "body is not JSON")
                       : envelope(j, &data, &inner);
    json_decref(j);
    if (rc != 0)
        return sv_error_set(err, -EPROTO, "HTTP %ld: %s", status, inner.msg);
    return 0;
}
