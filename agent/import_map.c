/*
 * `katana import`: the settings every agent has in some form, mapped onto the keys
 * of katana.json(5): listen and send addresses, certificates (nodes[].cert), the Redis device
 * limit (redis.*), the resolver (dns.*), the log level and a node's fallback. See import.h.
 */
#include "agent/import.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMPORT_DNS_MAX 8 /* katana.json(5) dns.servers: 1 to 8 */

/* Whether @p s is an IPv4 or IPv6 literal. */
static bool is_ip(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

static bool any_address(const char *ip)
{
    return ip == NULL || ip[0] == '\0' || strcmp(ip, "0.0.0.0") == 0 || strcmp(ip, "::") == 0;
}

void ag_import_listen(ag_import *im, json_t *node, const char *where, const char *ip)
{
    if (any_address(ip))
        return; /* katana's default: every address */
    if (!is_ip(ip)) {
        ag_import_warnf(im, "%s: \"%.64s\" is not an IP address; katana listens on every "
                        "address", where, ip);
        return;
    }
    json_object_set_new(node, "listen", json_string(ip));
}

void ag_import_send(ag_import *im, json_t *node, const char *where, const char *ip)
{
    if (any_address(ip))
        return; /* the kernel chooses the source address, as with 0.0.0.0 */
    if (!is_ip(ip)) {
        ag_import_warnf(im, "%s: \"%.64s\" is not an IP address; the kernel chooses the "
                        "source address", where, ip);
        return;
    }
    json_object_set_new(node, "outbound", json_pack("{s:[s]}", "bind", ip));
}

/* ------------------------------------------------------------------------------------------ */
/* certificates                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void cert_acme(ag_import *im, json_t *node, const char *where, const ag_import_cert *c)
{
    ag_import_warnf(im, "%s: certificate mode %s: katana has no ACME client%s%s%s; wrote "
                    "cert mode self (a self-signed certificate): get the certificate%s%s with "
                    "certbot, acme.sh or lego and set cert mode file with its cert_file and "
                    "key_file (katana reads them again at every panel sync)", where, c->mode,
                    c->provider != NULL ? " (DNS provider " : "",
                    c->provider != NULL ? c->provider : "", c->provider != NULL ? " unused)" : "",
                    c->domain != NULL ? " for " : "", c->domain != NULL ? c->domain : "");
    json_object_set_new(node, "cert", json_pack("{s:s}", "mode", "self"));
}

void ag_import_set_cert(ag_import *im, json_t *node, const char *where, const char *node_type,
                        const ag_import_cert *c)
{
    const char *mode = c->mode;
    if (mode == NULL || strcasecmp(mode, "none") == 0)
        return;
    if (strcmp(node_type, "shadowsocks") == 0) {
        ag_import_warnf(im, "%s: certificate mode %s: a katana shadowsocks node takes a "
                        "cert only when its plugin_opts say tls; none written", where, mode);
        return;
    }
    if (strcasecmp(mode, "file") == 0 && c->cert_file != NULL && c->key_file != NULL) {
        json_object_set_new(node, "cert", json_pack("{s:s, s:s, s:s}", "mode", "file",
                                                    "cert_file", c->cert_file, "key_file",
                                                    c->key_file));
    } else if (strcasecmp(mode, "file") == 0) {
        ag_import_warnf(im, "%s: certificate mode file without both a certificate and a key "
                        "file; wrote cert mode self (a self-signed certificate)", where);
        json_object_set_new(node, "cert", json_pack("{s:s}", "mode", "self"));
    } else if (strcasecmp(mode, "self") == 0) {
        json_object_set_new(node, "cert", json_pack("{s:s}", "mode", "self"));
    } else if (strcasecmp(mode, "content") == 0) {
        ag_import_warnf(im, "%s: certificate mode content: katana reads a certificate from "
                        "files only; wrote cert mode self: save cert_content and key_content to "
                        "files and set cert mode file", where);
        json_object_set_new(node, "cert", json_pack("{s:s}", "mode", "self"));
    } else if (strcasecmp(mode, "http") == 0 || strcasecmp(mode, "dns") == 0 ||
               strcasecmp(mode, "tls") == 0) {
        cert_acme(im, node, where, c);
    } else {
        ag_import_warnf(im, "%s: certificate mode \"%.32s\": not a mode katana import "
                        "knows; wrote cert mode self (a self-signed certificate)", where, mode);
        json_object_set_new(node, "cert", json_pack("{s:s}", "mode", "self"));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Redis                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Append @p s to @p b (capacity @p cap, length *@p n) with every byte outside [A-Za-z0-9._~-]
 * as %XX (katana.json(5) redis.url: "user and password with %XX escapes"). */
static void pct_escape(char *b, size_t cap, size_t *n, const char *s)
{
    for (; *s != '\0' && *n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '.' || ch == '_' || ch == '~' || ch == '-')
            b[(*n)++] = (char)ch;
        else
            *n += (size_t)snprintf(b + *n, cap - *n, "%%%02X", ch);
    }
    b[*n] = '\0';
}

/* Whether the host of "host[:port]" / "[v6]:port" is one katana's redis.url takes. */
static bool redis_host_ok(const char *addr)
{
    char host[256];
    if (addr[0] == '[')
        return strchr(addr, ']') != NULL;
    const char *colon = strrchr(addr, ':');
    size_t n = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    if (n == 0 || n >= sizeof host)
        return false;
    memcpy(host, addr, n);
    host[n] = '\0';
    return strcmp(host, "localhost") == 0 || is_ip(host);
}

void ag_import_redis(ag_import *im, const char *where, const char *addr, const char *password,
                     json_int_t db, json_int_t timeout_s, json_int_t expiry_s)
{
    char url[600];
    size_t n;
    if (addr == NULL) {
        ag_import_warnf(im, "%s: no Redis address; the device limit stays per node", where);
        return;
    }
    if (im->redis_set) {
        ag_import_warnf(im, "%s: katana has one Redis per process; kept the first one", where);
        return;
    }
    if (!redis_host_ok(addr)) {
        ag_import_warnf(im, "%s: Redis address \"%.64s\": katana's redis.url takes an IP address "
                        "or localhost (no name is resolved); no redis written", where, addr);
        return;
    }
    n = (size_t)snprintf(url, sizeof url, "redis://");
    if (password != NULL) {
        url[n++] = ':';
        pct_escape(url, sizeof url - 1, &n, password);
        url[n++] = '@';
    }
    snprintf(url + n, sizeof url - n, db > 0 ? "%.256s/%lld" : "%.256s", addr, (long long)db);
    json_t *r = json_pack("{s:s}", "url", url);
    if (timeout_s > 10)
        ag_import_warnf(im, "%s: Redis timeout %llds: katana waits at most 10 s for Redis "
                        "before deciding alone; wrote 10", where, (long long)timeout_s);
    if (timeout_s > 0)
        json_object_set_new(r, "timeout", json_integer(timeout_s > 10 ? 10 : timeout_s));
    if (expiry_s > 0)
        json_object_set_new(r, "expiry", json_integer(expiry_s < 3       ? 3
                                                      : expiry_s > 86400 ? 86400
                                                                         : expiry_s));
    json_object_set_new(im->out, "redis", r);
    im->redis_set = true;
    ag_import_warnf(im, "%s: katana keeps its own device sets in this Redis (redis.prefix "
                    "\"katana:devices:\"): nodes still running the old agent count their "
                    "devices apart from katana's", where);
}

/* ------------------------------------------------------------------------------------------ */
/* DNS and logging                                                                              */
/* ------------------------------------------------------------------------------------------ */

void ag_import_strategy(ag_import *im, const char *where, const char *value)
{
    static const char *const map[][2] = {
        {"asis", NULL},           {"useip", "prefer_ipv4"},    {"useipv4", "ipv4_only"},
        {"useipv6", "ipv6_only"}, {"prefer_ipv4", "prefer_ipv4"}, {"prefer_ipv6", "prefer_ipv6"},
        {"ipv4_only", "ipv4_only"}, {"ipv6_only", "ipv6_only"}, {NULL, NULL}};
    size_t i = 0;
    if (value == NULL)
        return;
    while (map[i][0] != NULL && strcasecmp(map[i][0], value) != 0)
        i++;
    if (map[i][0] == NULL) {
        ag_import_warnf(im, "%s \"%.32s\": not a strategy katana knows; katana resolves "
                        "prefer_ipv4", where, value);
    } else if (map[i][1] != NULL && im->strategy_set) {
        const char *had = json_string_value(json_object_get(json_object_get(im->out, "dns"),
                                                            "strategy"));
        if (had != NULL && strcmp(had, map[i][1]) != 0)
            ag_import_warnf(im, "%s %s: katana has one DNS strategy per process; kept %s",
                            where, value, had);
    } else if (map[i][1] != NULL) {
        json_t *dns = json_object_get(im->out, "dns");
        if (dns == NULL)
            json_object_set_new(im->out, "dns", dns = json_object());
        json_object_set_new(dns, "strategy", json_string(map[i][1]));
        im->strategy_set = true;
    }
}

/* The katana form of one DNS server entry (@p out), or false with a warning. */
static bool dns_server(ag_import *im, const char *where, const json_t *s, char *out, size_t cap)
{
    const char *addr = json_is_string(s) ? json_string_value(s) : ag_import_str(s, "address");
    json_int_t port = 0;
    if (json_is_object(s) && ag_import_is_set(ag_import_get(s, "domains"))) {
        ag_import_warnf(im, "%s: a server for some domains only (%.64s): katana takes such "
                        "servers from the panel's dns routes; left out", where,
                        addr != NULL ? addr : "?");
        return false;
    }
    if (addr != NULL && strncmp(addr, "udp://", 6) == 0)
        addr += 6;
    if (json_is_object(s))
        ag_import_int(s, "port", &port);
    if (addr != NULL && is_ip(addr)) {
        bool v6 = strchr(addr, ':') != NULL;
        if (port > 0 && port != 53)
            snprintf(out, cap, v6 ? "[%s]:%lld" : "%s:%lld", addr, (long long)port);
        else
            snprintf(out, cap, "%s", addr);
        return true;
    }
    char host[64];
    const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
    if (colon != NULL && (size_t)(colon - addr) < sizeof host && addr[0] != '[') {
        snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
        if (is_ip(host) && atoi(colon + 1) > 0) {
            snprintf(out, cap, "%s", addr);
            return true;
        }
    }
    ag_import_warnf(im, "%s: server \"%.64s\": katana asks plain DNS servers by IP address only "
                    "(no DoH, DoT, TCP, names or \"localhost\"); left out", where,
                    addr != NULL ? addr : "?");
    return false;
}

static void dns_servers(ag_import *im, const char *where, const json_t *root)
{
    json_t *list = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(ag_import_get(root, "servers"), i, s) {
        char one[80];
        if (!dns_server(im, where, s, one, sizeof one))
            continue;
        if (json_array_size(list) == IMPORT_DNS_MAX) {
            ag_import_warnf(im, "%s: katana asks at most %d DNS servers; left out %s", where,
                            IMPORT_DNS_MAX, one);
            continue;
        }
        json_array_append_new(list, json_string(one));
    }
    if (json_array_size(list) == 0) {
        ag_import_warnf(im, "%s: no plain DNS server in the file; katana uses the servers of "
                        "/etc/resolv.conf", where);
        json_decref(list);
        return;
    }
    json_t *dns = json_object_get(im->out, "dns");
    if (dns == NULL)
        json_object_set_new(im->out, "dns", dns = json_object());
    json_object_set_new(dns, "servers", list);
    im->dns_set = true;
}

void ag_import_dns_file(ag_import *im, const char *where, const char *path)
{
    char full[4200];
    json_error_t je;
    if (path == NULL || im->base_dir == NULL)
        return;
    if (im->dns_set) {
        ag_import_warnf(im, "%s %.256s: katana has one resolver per process; kept the servers "
                        "of the first DNS file", where, path);
        return;
    }
    snprintf(full, sizeof full, "%s%s%s", path[0] == '/' ? "" : im->base_dir,
             path[0] == '/' ? "" : "/", path);
    json_t *root = json_load_file(full, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        ag_import_warnf(im, "%s %.256s: not read (%s); katana uses the servers of "
                        "/etc/resolv.conf", where, full, je.text);
        return;
    }
    dns_servers(im, where, root);
    if (ag_import_is_set(ag_import_get(root, "hosts")))
        ag_import_warnf(im, "%s %.256s: hosts: katana has no static host table; left out",
                        where, path);
    if (ag_import_is_set(ag_import_get(root, "rules")))
        ag_import_warnf(im, "%s %.256s: rules: katana takes per-domain DNS servers from the "
                        "panel's dns routes; left out", where, path);
    json_decref(root);
}

void ag_import_log_level(ag_import *im, const char *where, const char *level)
{
    /* The agents' quiet levels silence their cores' per-connection lines; katana's info level
     * is a few lines per apply, and the start's "running" line is the first thing an operator
     * trying katana looks for: quieter levels are written as info, with a warning. */
    static const char *const map[][2] = {
        {"none", NULL}, {"error", NULL}, {"warning", NULL}, {"warn", NULL},
        {"info", "info"}, {"debug", "debug"}, {"trace", "trace"}, {NULL, NULL}};
    size_t i = 0;
    if (level == NULL)
        return;
    while (map[i][0] != NULL && strcasecmp(map[i][0], level) != 0)
        i++;
    if (map[i][0] == NULL) {
        ag_import_warnf(im, "%s \"%.32s\": not a level katana knows; katana logs info", where,
                        level);
        return;
    }
    if (map[i][1] == NULL) {
        ag_import_warnf(im, "%s %s: katana logs info, a few lines per start and apply and no "
                        "line per connection; set log.level to \"warn\" for less", where,
                        map[i][0]);
        return;
    }
    json_object_set_new(im->out, "log", json_pack("{s:s}", "level", map[i][1]));
}

/* ------------------------------------------------------------------------------------------ */
/* fallback                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Dest as katana's "HOST:PORT": a bare port is 127.0.0.1:PORT (Xray's fallback rule). */
static bool fallback_dest(const json_t *e, char *out, size_t cap)
{
    json_int_t port;
    const char *dest = ag_import_str(e, "Dest");
    if (ag_import_int(e, "Dest", &port) && port > 0 && port < 65536) {
        snprintf(out, cap, "127.0.0.1:%lld", (long long)port);
        return true;
    }
    const char *colon = dest != NULL ? strrchr(dest, ':') : NULL;
    if (colon == NULL || colon == dest || atoi(colon + 1) <= 0 || dest[0] == '/')
        return false;
    snprintf(out, cap, "%s", dest);
    return true;
}

void ag_import_fallback(ag_import *im, json_t *node, const char *where, const char *node_type,
                        const json_t *list)
{
    json_t *one = NULL;
    if (json_is_object(list))
        list = one = json_pack("[O]", list);
    if (strcmp(node_type, "trojan") != 0 && strcmp(node_type, "vless") != 0) {
        ag_import_warnf(im, "%s: katana has fallbacks on trojan and vless nodes only; left out",
                        where);
        json_decref(one);
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char dest[300];
        bool plain = ag_import_str(e, "SNI") == NULL && ag_import_str(e, "Alpn") == NULL &&
                     ag_import_str(e, "Path") == NULL;
        if (json_object_get(node, "fallback") == NULL && plain &&
            fallback_dest(e, dest, sizeof dest)) {
            json_object_set_new(node, "fallback", json_string(dest));
            json_int_t pp = 0;
            if (ag_import_int(e, "ProxyProtocolVer", &pp) && pp != 0)
                ag_import_warnf(im, "%s[%zu].ProxyProtocolVer: katana sends no PROXY protocol "
                                "header to a fallback", where, i);
            continue;
        }
        ag_import_warnf(im, "%s[%zu]: katana has one fallback per node, by HOST:PORT, without "
                        "SNI, Alpn or Path matching; left out", where, i);
    }
    json_decref(one);
}
