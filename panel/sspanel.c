/*
 * The SSPanel-UIM mod_mu client (panel/sspanel.h).
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

#include "panel/http.h"
#include "panel/jsonscan.h"
#include "panel/sspanel.h"
#include "panel/uniproxy.h"
#include "supervisor/util/log.h"

#define URL_MAX 2048u
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

/* ---------------------------------------------------------------------------------------- */
/* the client                                                                                */
/* ---------------------------------------------------------------------------------------- */

typedef struct last_good {
    char *etag;
    char *body;
    size_t len;
} last_good;

typedef struct pn_sspanel pn_sspanel;

typedef struct call {
    pn_sspanel *s;
    enum { CALL_NODE, CALL_RULES, CALL_USERS, CALL_REPORT } kind;
    const char *what; /* endpoint name for messages and counters (static) */
    union {
        pn_node_cb node;
        pn_users_cb users;
        pn_report_cb report;
    } cb;
    void *arg;
    struct call *next, *prev;
} call;

struct pn_sspanel {
    pn_client base; /* first */
    pn_http *http;
    char *base_url; /* without trailing '/' */
    char *key_q;    /* "key=..&muKey=.." */
    char *node_id;  /* digits only */
    long timeout_ms;
    uint32_t pull, push;
    last_good good[2];   /* raw info and users bodies with their ETags */
    last_good rules;      /* raw detect_rules body and ETag (body NULL: none) */
    char *combined;       /* {"info","detect_rules","detect_rules_etag"}: the stored node body */
    size_t combined_len;
    pn_http_response info; /* the info answer while its detect_rules request runs (copies) */
    size_t rules_skipped;   /* detect rules katana cannot express (hex matches) */
    bool has_meta;
    pn_sspanel_meta meta; /* from the last good node answer */
    pn_alive_count *alive; /* legacy alive_ip counts of the last good users answer */
    size_t n_alive;
    size_t skipped; /* users left out of the last answer (another method) */
    call *calls;
    /* a users answer that came before the node answer it depends on (its secrets follow the
     * node's sort): held until the node answer is delivered, then parsed */
    call *deferred;
    pn_http_response deferred_resp; /* body and etag malloc'ed */
    unsigned delivering;            /* callbacks running: a free waits for them */
    bool free_pending;
    pn_request_count counts[PN_REQUEST_COUNTS_MAX];
    size_t n_counts;
};

static void call_unlink(call *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        k->s->calls = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
}

static void set_good(last_good *g, const char *body, size_t len, const char *etag);

/* set_good() of an answer's body, taken from its request rather than copied. */
static void set_good_taken(last_good *g, const pn_http_response *r)
{
    char *e = r->etag != NULL ? strdup(r->etag) : NULL;
    char *b = r->etag == NULL || e != NULL ? pn_http_take_body(r) : NULL;
    if (b == NULL) {
        free(e);
        set_good(g, r->body, r->len, r->etag);
        return;
    }
    free(g->etag);
    free(g->body);
    *g = (last_good){.etag = e, .body = b, .len = r->len};
}

static void set_good(last_good *g, const char *body, size_t len, const char *etag)
{
    char *e = etag != NULL ? strdup(etag) : NULL;
    char *b = malloc(len + 1);
    if (b == NULL || (etag != NULL && e == NULL)) {
        free(e);
        free(b);
        return; /* keep the old one: the next fetch simply gets a 200 */
    }
    memcpy(b, body, len);
    b[len] = '\0';
    free(g->etag);
    free(g->body);
    *g = (last_good){.etag = e, .body = b, .len = len};
}

/* The error of a 2xx body that is not JSON; @p err holds the reason on entry. */
static int not_json(long status, const char *ctype, sv_error *err)
{
    sv_error why = *err;
    return sv_error_set(err, -EPROTO, "HTTP %ld body is not JSON (%s): %.100s", status,
                        ctype != NULL ? ctype : "no content type", why.msg);
}

/* A body as a tree; one that is not JSON builds none. */
static int parse_json(const char *body, size_t len, long status, const char *ctype,
                      json_t **out, sv_error *err)
{
    json_error_t jerr;
    *out = NULL;
    if (pn_json_check(body, len, err) != 0)
        return not_json(status, ctype, err);
    *out = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*out != NULL)
        return 0;
    char *near = strstr(jerr.text, " near '");
    if (near != NULL)
        *near = '\0'; /* jansson quotes the token there, maybe a secret: log none (#5) */
    sv_error_set(err, -EPROTO, "%s", jerr.text);
    return not_json(status, ctype, err);
}

/* Parse a node (info) body into @p node, updating the client's meta (the users' shape). */
static int parse_node_body(pn_sspanel *s, const json_t *j, pn_node *node, sv_error *err)
{
    pn_sspanel_meta meta;
    int rc = pn_sspanel_parse_node(j, s->pull, s->push, &meta, node, err);
    if (rc == 0) {
        s->meta = meta;
        s->has_meta = true;
    }
    return rc;
}

/* A users body as text into @p users (the client's alive table and count updated), without a
 * tree of the whole list. -EBADMSG: not JSON (err says why). */
static int parse_users_text(pn_sspanel *s, const char *body, size_t len, pn_users *users,
                            sv_error *err)
{
    if (!s->has_meta)
        return sv_error_set(err, -EAGAIN, "no node info yet (users follow the node's type)");
    pn_alive_count *al = NULL;
    size_t n_al = 0, skipped = 0;
    int rc = pn_sspanel_parse_users_text(body, len, &s->meta, users, &skipped, &al, &n_al,
                                         err);
    if (rc != 0)
        return rc;
    free(s->alive);
    s->alive = al;
    s->n_alive = n_al;
    s->skipped = skipped;
    return 0;
}

static void deliver_fetch(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    pn_sspanel *s = k->s;
    pn_client *c = &s->base;
    enum pn_body_kind kind = k->kind == CALL_NODE ? PN_BODY_CONFIG : PN_BODY_USERS;
    sv_error err = {0};
    json_t *j = NULL;
    pn_node node = {0};
    pn_users users = {0};
    size_t skipped_before = s->skipped;
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status == 304)
        rc = PN_NOT_MODIFIED;
    else if (r->status < 200 || r->status > 299)
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else if (kind == PN_BODY_USERS &&
             (rc = parse_users_text(s, r->body, r->len, &users, &err)) == -EBADMSG)
        rc = not_json(r->status, r->content_type, &err);
    else if (kind == PN_BODY_CONFIG &&
             (rc = parse_json(r->body, r->len, r->status, r->content_type, &j, &err)) == 0)
        rc = parse_node_body(s, j, &node, &err);
    if (rc == 0 && r != NULL && r->status != 304 && r->status >= 200 && r->status <= 299)
        set_good_taken(&s->good[kind], r);
    if (rc < 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
    }
    if (rc == PN_OK && kind == PN_BODY_USERS && s->skipped != skipped_before &&
        s->skipped > 0) /* once per change, not per pull */
        SV_LOG(SV_LOG_WARN, "pn.sspanel", "panel users: %zu users left out: their method is "
               "not the node's (%s)", s->skipped, s->meta.method);
    if (k->kind == CALL_NODE)
        k->cb.node(c, rc, rc == PN_OK ? &node : NULL, rc < 0 ? &err : NULL, k->arg);
    else
        k->cb.users(c, rc, rc == PN_OK ? &users : NULL, rc < 0 ? &err : NULL, k->arg);
    /* the client may be gone: only locals below */
    pn_node_free(&node);
    pn_users_free(&users);
    json_decref(j);
}

static void count_request(pn_sspanel *s, const char *what, long status)
{
    for (size_t i = 0; i < s->n_counts; i++)
        if (s->counts[i].endpoint == what && s->counts[i].status == status) {
            s->counts[i].n++;
            return;
        }
    if (s->n_counts < PN_REQUEST_COUNTS_MAX)
        s->counts[s->n_counts++] = (pn_request_count){what, status, 1};
}

static bool node_in_flight(const pn_sspanel *s)
{
    for (const call *k = s->calls; k != NULL; k = k->next)
        if (k->kind == CALL_NODE || k->kind == CALL_RULES)
            return true;
    return false;
}

static void response_clear(pn_http_response *r)
{
    free((char *)r->body);
    free((char *)r->etag);
    memset(r, 0, sizeof *r);
}

/* A malloc'ed copy of @p r's status, body and ETag in @p dst; false when out of memory. */
static bool response_copy(pn_http_response *dst, const pn_http_response *r)
{
    char *body = malloc(r->len + 1), *etag = r->etag != NULL ? strdup(r->etag) : NULL;
    if (body == NULL || (r->etag != NULL && etag == NULL)) {
        free(body);
        free(etag);
        return false;
    }
    memcpy(body, r->body, r->len);
    body[r->len] = '\0';
    *dst = (pn_http_response){.status = r->status, .body = body, .len = r->len, .etag = etag};
    return true;
}

/* The node body the store keeps: info and detect rules together (parsed by ss_parse_body). */
static void build_combined(pn_sspanel *s)
{
    json_t *info = s->good[PN_BODY_CONFIG].body != NULL
                   ? json_loadb(s->good[PN_BODY_CONFIG].body, s->good[PN_BODY_CONFIG].len, 0,
                                NULL) : NULL;
    json_t *rules = s->rules.body != NULL ? json_loadb(s->rules.body, s->rules.len, 0, NULL)
                                          : NULL;
    json_t *o = info != NULL ? json_pack("{s:O, s:O?, s:s?}", "info", info, "detect_rules",
                                         rules, "detect_rules_etag", s->rules.etag) : NULL;
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text != NULL) { /* else the old one stays (stored at the next change) */
        free(s->combined);
        s->combined = text;
        s->combined_len = strlen(text);
    }
    json_decref(o);
    json_decref(info);
    json_decref(rules);
}

/* Append detect rules (a detect_rules answer, PANEL.md §2.6) to @p node as block routes. */
static int add_rules(pn_sspanel *s, const json_t *j, pn_node *node, sv_error *err)
{
    pn_route *routes = NULL;
    size_t n = 0, skipped = 0;
    int rc = pn_sspanel_parse_rules(j, &routes, &n, &skipped, err);
    if (rc != 0)
        return rc;
    if (skipped != s->rules_skipped && skipped > 0) /* once per change, not per pull */
        SV_LOG(SV_LOG_WARN, "pn.sspanel", "panel detect_rules: %zu rules skipped: only "
               "plaintext (type 1) rules are served, as block routes", skipped);
    s->rules_skipped = skipped;
    if (n == 0)
        return 0;
    pn_route *v = realloc(node->routes, (node->n_routes + n) * sizeof *v);
    if (v == NULL) {
        pn_node tmp = {.routes = routes, .n_routes = n};
        pn_node_free(&tmp);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    memcpy(v + node->n_routes, routes, n * sizeof *v);
    node->routes = v;
    node->n_routes += n;
    free(routes);
    return 0;
}

/* The detect_rules answer (after a 2xx or 304 info answer held in s->info): PN_NOT_MODIFIED
 * when both were 304, else the node from the info body (new or held) with the rules (new or
 * held; a 404 means a panel without detect rules) as block routes, or an error. */
static void finish_node(call *k, int rc, const pn_http_response *r, const sv_error *herr)
{
    pn_sspanel *s = k->s;
    sv_error err = {0};
    pn_node node = {0};
    json_t *ij = NULL, *rj = NULL;
    bool info_new = s->info.status != 304, rules_new = false, rules_none = false;
    const char *what = "detect_rules";
    if (rc != 0)
        sv_error_set(&err, rc, "%s", herr->msg);
    else if (r->status == 404)
        rules_none = rules_new = true;
    else if (r->status != 304 && (r->status < 200 || r->status > 299))
        rc = pn_uniproxy_error(r->status, r->body, r->len, &err);
    else
        rules_new = r->status != 304;
    if (rc == 0 && !info_new && !rules_new)
        rc = PN_NOT_MODIFIED;
    const last_good *gi = &s->good[PN_BODY_CONFIG];
    const char *ib = info_new ? s->info.body : gi->body;
    size_t il = info_new ? s->info.len : gi->len;
    if (rc == 0 && ib == NULL) {
        what = "info";
        rc = sv_error_set(&err, -EPROTO, "HTTP 304 but no body held");
    }
    if (rc == 0 && (rc = parse_json(ib, il, info_new ? s->info.status : 200, NULL, &ij,
                                    &err)) != 0)
        what = "info";
    if (rc == 0 && (rc = parse_node_body(s, ij, &node, &err)) != 0)
        what = "info";
    const char *rb = rules_none ? NULL : rules_new ? r->body : s->rules.body;
    size_t rl = rules_none ? 0 : rules_new ? r->len : s->rules.len;
    if (rc == 0 && rb != NULL && (rc = parse_json(rb, rl, 200, NULL, &rj, &err)) == 0)
        rc = add_rules(s, rj, &node, &err);
    if (rc == 0) {
        if (info_new)
            set_good(&s->good[PN_BODY_CONFIG], s->info.body, s->info.len, s->info.etag);
        if (rules_none) {
            free(s->rules.body);
            free(s->rules.etag);
            memset(&s->rules, 0, sizeof s->rules);
        } else if (rules_new) {
            set_good(&s->rules, r->body, r->len, r->etag);
        }
        build_combined(s);
    }
    response_clear(&s->info);
    if (rc < 0) {
        sv_error inner = err;
        sv_error_set(&err, rc, "panel %s: %s", what, inner.msg);
        pn_node_free(&node);
    }
    k->cb.node(&s->base, rc, rc == PN_OK ? &node : NULL, rc < 0 ? &err : NULL, k->arg);
    pn_node_free(&node);
    json_decref(ij);
    json_decref(rj);
}

static int start(pn_sspanel *s, call *k, const char *method, const char *path, bool node_q,
                 const char *body, size_t len);
static call *call_new(int kind, const char *what, void *arg);

/* A 2xx or 304 info answer: hold it and ask for the detect rules. false: not started (the
 * caller delivers the info answer as it is, or an error). */
static bool start_rules(pn_sspanel *s, call *k, const pn_http_response *r)
{
    call *rk = call_new(CALL_RULES, "detect_rules", k->arg);
    if (rk == NULL || !response_copy(&s->info, r)) {
        free(rk);
        return false;
    }
    rk->cb.node = k->cb.node;
    if (start(s, rk, "GET", "func/detect_rules", false, NULL, 0) != 0) {
        response_clear(&s->info);
        return false;
    }
    return true;
}

/* Hold a 2xx users answer until the node answer in flight is delivered. false: no room. */
static bool defer_users(pn_sspanel *s, call *k, const pn_http_response *r)
{
    char *body = malloc(r->len + 1), *etag = r->etag != NULL ? strdup(r->etag) : NULL;
    if (body == NULL || (r->etag != NULL && etag == NULL)) {
        free(body);
        free(etag);
        return false;
    }
    memcpy(body, r->body, r->len);
    body[r->len] = '\0';
    s->deferred = k;
    s->deferred_resp = (pn_http_response){.status = r->status, .body = body, .len = r->len,
                                          .etag = etag};
    return true;
}

static void drop_deferred(pn_sspanel *s)
{
    free(s->deferred);
    free((char *)s->deferred_resp.body);
    free((char *)s->deferred_resp.etag);
    s->deferred = NULL;
    memset(&s->deferred_resp, 0, sizeof s->deferred_resp);
}

static void real_free(pn_sspanel *s);

static void on_http(int rc, const pn_http_response *r, const sv_error *herr, void *arg)
{
    call *k = arg;
    pn_sspanel *s = k->s;
    call_unlink(k);
    count_request(s, k->what, rc == 0 && r != NULL ? r->status : 0);
    if (k->kind == CALL_USERS && rc == 0 && r->status >= 200 && r->status <= 299 &&
        !s->has_meta && s->deferred == NULL && node_in_flight(s) && defer_users(s, k, r))
        return; /* delivered right after the node answer */
    if (k->kind == CALL_NODE && rc == 0 && (r->status == 304 ||
                                             (r->status >= 200 && r->status <= 299)) &&
        start_rules(s, k, r)) {
        free(k);
        return; /* the node is delivered with its detect rules */
    }
    s->delivering++; /* a free from a callback below waits until they all ran */
    if (k->kind == CALL_NODE || k->kind == CALL_RULES) {
        if (k->kind == CALL_NODE)
            deliver_fetch(k, rc, r, herr);
        else
            finish_node(k, rc, r, herr);
        if (s->deferred != NULL && !s->free_pending)
            deliver_fetch(s->deferred, 0, &s->deferred_resp, NULL);
        drop_deferred(s);
    } else if (k->kind == CALL_USERS) {
        deliver_fetch(k, rc, r, herr);
    } else {
        sv_error err = {0};
        if (rc != 0)
            sv_error_set(&err, rc, "panel %s: %s", k->what, herr->msg);
        else if ((rc = pn_sspanel_check_ack(r->status, r->body, r->len, &err)) != 0) {
            sv_error inner = err;
            if (r->status == 500) /* PHP ran and failed (usage_apply); 502-504 are the front's */
                rc = PN_ERR_PANEL_FAILED;
            sv_error_set(&err, rc, "panel %s: %s", k->what, inner.msg);
        }
        k->cb.report(&s->base, rc, rc != 0 ? &err : NULL, k->arg);
    }
    free(k);
    if (--s->delivering == 0 && s->free_pending)
        real_free(s);
}

/* Start one request to /mod_mu/@p path; on success the call is owned by the request. */
static int start(pn_sspanel *s, call *k, const char *method, const char *path, bool node_q,
                 const char *body, size_t len)
{
    char url[URL_MAX];
    int n = snprintf(url, sizeof url, "%s/mod_mu/%s?%s%s%s", s->base_url, path, s->key_q,
                     node_q ? "&node_id=" : "", node_q ? s->node_id : "");
    if (n < 0 || (size_t)n >= sizeof url) {
        free(k);
        return -ENAMETOOLONG;
    }
    const char *inm = k->kind == CALL_NODE    ? s->good[PN_BODY_CONFIG].etag
                      : k->kind == CALL_RULES ? s->rules.etag
                      : k->kind == CALL_USERS ? s->good[PN_BODY_USERS].etag
                                              : NULL;
    pn_http_request req = {.method = method, .url = url, .body = body, .body_len = len,
                           .if_none_match = inm, .timeout_ms = s->timeout_ms};
    k->s = s;
    int rc = pn_http_start(s->http, &req, on_http, k, NULL, NULL);
    if (rc != 0) {
        free(k);
        return rc;
    }
    k->next = s->calls;
    if (s->calls != NULL)
        s->calls->prev = k;
    s->calls = k;
    return 0;
}

static call *call_new(int kind, const char *what, void *arg)
{
    call *k = calloc(1, sizeof *k);
    if (k != NULL)
        *k = (call){.kind = kind, .what = what, .arg = arg};
    return k;
}

static int ss_fetch_node(pn_client *c, pn_node_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    char path[64];
    call *k = call_new(CALL_NODE, "info", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.node = cb;
    snprintf(path, sizeof path, "nodes/%s/info", s->node_id);
    return start(s, k, "GET", path, false, NULL, 0);
}

static int ss_fetch_users(pn_client *c, pn_users_cb cb, void *arg)
{
    call *k = call_new(CALL_USERS, "users", arg);
    if (k == NULL)
        return -ENOMEM;
    k->cb.users = cb;
    return start((pn_sspanel *)c, k, "GET", "users", true, NULL, 0);
}

/* POST a JSON body (stolen) to /mod_mu/@p path. */
static int post(pn_sspanel *s, const char *what, const char *path, bool node_q, json_t *body,
                pn_report_cb cb, void *arg)
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
    int rc = start(s, k, "POST", path, node_q, text, strlen(text));
    free(text);
    return rc;
}

/* {"data":[...]} around @p items (stolen). */
static json_t *wrap(json_t *items)
{
    return items != NULL ? json_pack("{s:o}", "data", items) : NULL;
}

static int ss_report_usage(pn_client *c, const sv_usage *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        if (items[i].up > INT64_MAX || items[i].down > INT64_MAX || items[i].user > INT64_MAX) {
            json_decref(a);
            return -EOVERFLOW;
        }
        json_t *e = json_pack("{s:I, s:I, s:I}", "user_id", (json_int_t)items[i].user, "u",
                              (json_int_t)items[i].up, "d", (json_int_t)items[i].down);
        if (e == NULL || json_array_append_new(a, e) != 0) {
            json_decref(a);
            return -ENOMEM;
        }
    }
    return post((pn_sspanel *)c, "traffic", "users/traffic", true, wrap(a), cb, arg);
}

static int ss_report_alive(pn_client *c, const pn_alive *items, size_t n, pn_report_cb cb,
                           void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        for (size_t k = 0; k < items[i].n_ips; k++) {
            json_t *e = json_pack("{s:I, s:s}", "user_id", (json_int_t)items[i].user, "ip",
                                  items[i].ips[k]);
            if (e == NULL || json_array_append_new(a, e) != 0) {
                json_decref(a);
                return -ENOMEM;
            }
        }
    return post((pn_sspanel *)c, "aliveip", "users/aliveip", true, wrap(a), cb, arg);
}

/* Audit hits as the detect log (PANEL.md §2: POST users/detectlog
 * {"data":[{"user_id","list_id"}]}). */
static int ss_report_detect(pn_client *c, const pn_detect_hit *items, size_t n, pn_report_cb cb,
                            void *arg)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        if (items[i].user > INT64_MAX) {
            json_decref(a);
            return -EOVERFLOW;
        }
        json_t *e = json_pack("{s:I, s:I}", "user_id", (json_int_t)items[i].user, "list_id",
                              (json_int_t)items[i].rule);
        if (e == NULL || json_array_append_new(a, e) != 0) {
            json_decref(a);
            return -ENOMEM;
        }
    }
    return post((pn_sspanel *)c, "detectlog", "users/detectlog", true, wrap(a), cb, arg);
}

/* Node load (PANEL.md §2.1): only panels older than 2023.2 have POST nodes/{id}/info; a
 * current one takes no load report (-ENOTSUP, no callback). */
static int ss_report_status(pn_client *c, const pn_status *st, pn_report_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (!s->has_meta || s->meta.version_year == 0 || s->meta.version_year > 2023 ||
        (s->meta.version_year == 2023 && s->meta.version_month >= 2))
        return -ENOTSUP;
    char uptime[24], load[64], path[64];
    snprintf(uptime, sizeof uptime, "%" PRIu64, st->uptime_s);
    snprintf(load, sizeof load, "%.2f %.2f %.2f", st->load[0], st->load[1], st->load[2]);
    snprintf(path, sizeof path, "nodes/%s/info", s->node_id);
    return post(s, "load", path, false, json_pack("{s:s, s:s}", "uptime", uptime, "load", load),
                cb, arg);
}

/* The legacy `alive_ip` counts of the last users answer (none on a current panel), at once. */
static int ss_fetch_alivelist(pn_client *c, pn_alivelist_cb cb, void *arg)
{
    pn_sspanel *s = (pn_sspanel *)c;
    cb(c, PN_OK, s->alive, s->n_alive, NULL, arg);
    return 0;
}

static int ss_set_etag(pn_client *c, enum pn_body_kind kind, const char *etag)
{
    pn_sspanel *s = (pn_sspanel *)c;
    char *e = etag != NULL ? strdup(etag) : NULL;
    if (etag != NULL && e == NULL)
        return -ENOMEM;
    free(s->good[kind].etag);
    s->good[kind].etag = e;
    return 0;
}

static const char *ss_last_body(pn_client *c, enum pn_body_kind kind, size_t *len,
                                const char **etag)
{
    pn_sspanel *s = (pn_sspanel *)c;
    bool node = kind == PN_BODY_CONFIG; /* the info and detect rules pair (build_combined) */
    if (len != NULL)
        *len = node ? s->combined_len : s->good[kind].len;
    if (etag != NULL)
        *etag = s->good[kind].etag;
    return node ? s->combined : s->good[kind].body;
}

/* The users body only: the info body is kept, combined with the detect rules (build_combined). */
static void ss_forget_body(pn_client *c, enum pn_body_kind kind)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (kind != PN_BODY_USERS)
        return;
    free(s->good[kind].body);
    s->good[kind].body = NULL;
    s->good[kind].len = 0;
}

static int ss_parse_body(pn_client *c, enum pn_body_kind kind, const char *body, size_t len,
                         pn_node *node, pn_users *users, sv_error *err)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (kind == PN_BODY_USERS) {
        int rc = parse_users_text(s, body, len, users, err);
        return rc == -EBADMSG ? sv_error_set(err, -EINVAL, "stored body is not JSON") : rc;
    }
    json_t *j = pn_json_check(body, len, NULL) == 0
                ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (j == NULL)
        return sv_error_set(err, -EINVAL, "stored body is not JSON");
    const json_t *info = json_object_get(j, "info");
    if (info == NULL) { /* an info body on its own */
        int rc = parse_node_body(s, j, node, err);
        json_decref(j);
        return rc;
    }
    /* the stored pair: the held bodies come back too, so a 304 after the restart is served */
    const json_t *rules = json_object_get(j, "detect_rules");
    const json_t *rules_etag = json_object_get(j, "detect_rules_etag");
    int rc = parse_node_body(s, info, node, err);
    if (rc == 0 && rules != NULL && !json_is_null(rules) &&
        (rc = add_rules(s, rules, node, err)) != 0)
        pn_node_free(node);
    char *it = rc == 0 ? json_dumps(info, JSON_COMPACT) : NULL;
    char *rt = rc == 0 && json_is_object(rules) ? json_dumps(rules, JSON_COMPACT) : NULL;
    if (it != NULL) {
        set_good(&s->good[PN_BODY_CONFIG], it, strlen(it), s->good[PN_BODY_CONFIG].etag);
        if (rt != NULL)
            set_good(&s->rules, rt, strlen(rt), json_string_value(rules_etag));
        build_combined(s);
    }
    free(it);
    free(rt);
    json_decref(j);
    return rc;
}

static size_t ss_requests(pn_client *c, pn_request_count *out, size_t cap)
{
    pn_sspanel *s = (pn_sspanel *)c;
    size_t n = s->n_counts < cap ? s->n_counts : cap;
    memcpy(out, s->counts, n * sizeof *out);
    return n;
}

/* Free now, or (from inside a callback) once the callbacks of this answer have run. */
static void ss_free(pn_client *c)
{
    pn_sspanel *s = (pn_sspanel *)c;
    if (s->delivering > 0) {
        s->free_pending = true;
        pn_http_free(s->http); /* pending requests end without callbacks */
        s->http = NULL;
        return;
    }
    real_free(s);
}

static void real_free(pn_sspanel *s)
{
    pn_http_free(s->http); /* pending requests end without callbacks */
    drop_deferred(s);
    while (s->calls != NULL) {
        call *k = s->calls;
        s->calls = k->next;
        free(k);
    }
    for (int i = 0; i < 2; i++) {
        free(s->good[i].etag);
        free(s->good[i].body);
    }
    free(s->rules.etag);
    free(s->rules.body);
    free(s->combined);
    response_clear(&s->info);
    free(s->alive);
    free(s->base_url);
    free(s->key_q);
    free(s->node_id);
    free(s);
}

static const pn_client_ops sspanel_ops = {
    .type = "sspanel",
    .usage_apply = PN_USAGE_ORDERED, /* PANEL.md §2.6: no transaction */
    .fetch_node = ss_fetch_node,
    .fetch_users = ss_fetch_users,
    .report_usage = ss_report_usage,
    .report_alive = ss_report_alive,
    .report_status = ss_report_status,
    .fetch_alivelist = ss_fetch_alivelist,
    .report_detect = ss_report_detect,
    .set_etag = ss_set_etag,
    .last_body = ss_last_body,
    .forget_body = ss_forget_body,
    .parse_body = ss_parse_body,
    .requests = ss_requests,
    .free = ss_free,
};

/* Percent-encode everything but RFC 3986 unreserved characters; -ENAMETOOLONG past cap. */
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

int pn_sspanel_new(const pn_sspanel_options *o, pn_client **out, sv_error *err)
{
    *out = NULL;
    const char *missing = o->url == NULL || o->url[0] == '\0'   ? "url"
                          : o->key == NULL || o->key[0] == '\0' ? "token"
                          : o->node_id == NULL || o->node_id[0] == '\0' ? "node_id"
                                                                        : NULL;
    if (missing != NULL)
        return sv_error_set(err, -EINVAL, "sspanel panel: %s is required", missing);
    if (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)
        return sv_error_set(err, -EINVAL, "sspanel panel: url must start with http:// or "
                            "https://");
    if (strspn(o->node_id, "0123456789") != strlen(o->node_id) || strlen(o->node_id) > 20)
        return sv_error_set(err, -EINVAL, "sspanel panel: node_id must be a number");
    pn_sspanel *s = calloc(1, sizeof *s);
    if (s == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    s->base.ops = &sspanel_ops;
    s->timeout_ms = o->timeout_ms;
    s->pull = o->pull_interval;
    s->push = o->push_interval;
    char q[1024];
    size_t pos = 0;
    int rc = 0;
    s->base_url = strdup(o->url);
    s->node_id = strdup(o->node_id);
    if (s->base_url == NULL || s->node_id == NULL)
        rc = -ENOMEM;
    memcpy(q, "key=", 5);
    pos = 4;
    if (rc == 0)
        rc = escape(q, sizeof q, &pos, o->key);
    if (rc == 0 && pos + 7 < sizeof q) {
        memcpy(q + pos, "&muKey=", 8);
        pos += 7;
        rc = escape(q, sizeof q, &pos, o->key);
    } else if (rc == 0) {
        rc = -ENAMETOOLONG;
    }
    if (rc == 0 && (s->key_q = strdup(q)) == NULL)
        rc = -ENOMEM;
    if (rc == 0)
        rc = pn_http_new(o->loop, &s->http);
    if (rc != 0) {
        ss_free(&s->base);
        return sv_error_set(err, rc, "sspanel panel: %s", rc == -ENAMETOOLONG
                            ? "token too long" : "cannot initialise");
    }
    size_t n = strlen(s->base_url);
    while (n > 0 && s->base_url[n - 1] == '/')
        s->base_url[--n] = '\0';
    *out = &s->base;
    return 0;
}
