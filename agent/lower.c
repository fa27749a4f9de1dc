/*
 * Panel model → spec (agent/lower.h). Allocation uses malloc/realloc so that sv_spec_free()
 * releases everything.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "agent/lower.h"
#include "supervisor/util/log.h"

/** The one VLESS flow served (PROTOCOLS-2.md §2): XTLS Vision over REALITY or TLS. */
#define VISION_FLOW "xtls-rprx-vision"

#define MOD "ag.lower"
/* The REALITY private key of docs/nodes/reality.md and packaging/examples: published, so a
 * node serving with it is warned about at every check and apply. */
#define DOCS_EXAMPLE_REALITY_KEY "REPLACE-with-your-own-x25519-private-key-AA"

void ag_node_state_free(ag_node_state *st)
{
    if (st == NULL)
        return;
    free(st->tag);
    free(st->listen);
    free(st->cert_file);
    free(st->key_file);
    free(st->fallback);
    pn_node_free(&st->node);
    pn_users_free(&st->users);
    memset(st, 0, sizeof *st);
}

void ag_fleet_free(ag_fleet *fleet)
{
    if (fleet == NULL)
        return;
    for (size_t i = 0; i < fleet->n; i++)
        ag_node_state_free(&fleet->nodes[i]);
    free(fleet->nodes);
    memset(fleet, 0, sizeof *fleet);
}

int ag_users_refill(pn_users *list, const sv_user_set *set)
{
    if (!list->shed)
        return 0;
    if (set == NULL || set->n_users != list->n)
        return -ESTALE;
    pn_users cand = {0};
    int rc = 0;
    if (list->n > 0 && (cand.users = calloc(list->n, sizeof *cand.users)) == NULL)
        return -ENOMEM;
    for (size_t k = 0; rc == 0 && k < list->n; k++) {
        const sv_user *u = &set->users[k];
        pn_user *c = &cand.users[k];
        cand.n = k + 1;
        c->id = u->id;
        c->device_limit = u->device_limit;
        c->speed_limit = list->users != NULL ? list->users[k].speed_limit : u->speed_limit / 125000;
        if ((c->uuid = strdup(u->secret != NULL ? u->secret : "")) == NULL)
            rc = -ENOMEM;
    }
    if (rc == 0)
        rc = pn_users_restore(list, &cand);
    pn_users_free(&cand);
    return rc;
}

uint64_t ag_lower_speed(uint64_t mbps)
{
    if (mbps > UINT64_MAX / 125000)
        return UINT64_MAX;
    return mbps * 125000; /* × 1 000 000 / 8 */
}

void ag_lower_node_speed(sv_user_set *set, uint64_t node_mbps)
{
    uint64_t node = ag_lower_speed(node_mbps);
    if (node == 0)
        return;
    for (size_t i = 0; i < set->n_users; i++)
        if (set->users[i].speed_limit == 0 || set->users[i].speed_limit > node)
            set->users[i].speed_limit = node;
}

int ag_lower_cipher(const char *name, enum sv_ss_cipher *out)
{
    if (name == NULL)
        return -EINVAL;
    if (strcmp(name, "aes-128-gcm") == 0)
        *out = SV_SS_AES_128_GCM;
    else if (strcmp(name, "aes-256-gcm") == 0)
        *out = SV_SS_AES_256_GCM;
    else if (strcmp(name, "chacha20-ietf-poly1305") == 0 ||
             strcmp(name, "chacha20-poly1305") == 0)
        *out = SV_SS_CHACHA20_POLY1305;
    else if (strcmp(name, "2022-blake3-aes-128-gcm") == 0)
        *out = SV_SS_2022_AES_128_GCM;
    else if (strcmp(name, "2022-blake3-aes-256-gcm") == 0)
        *out = SV_SS_2022_AES_256_GCM;
    else if (strcmp(name, "2022-blake3-chacha20-poly1305") == 0)
        *out = SV_SS_2022_CHACHA20_POLY1305;
    else
        return -EINVAL;
    return 0;
}

const char *ag_node_listen(const ag_node_state *node)
{
    if (node->listen != NULL)
        return node->listen;
    if (node->node.listen_ip != NULL && node->node.listen_ip[0] != '\0')
        return node->node.listen_ip;
    return AG_DEFAULT_LISTEN;
}

/* ------------------------------------------------------------------------------------------ */
/* match entries                                                                                */
/* ------------------------------------------------------------------------------------------ */

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Decimal 1..65535, the whole of [s, end). */
static bool parse_port(const char *s, const char *end, uint16_t *out)
{
    unsigned v = 0;
    if (s == end || end - s > 5)
        return false;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *out = (uint16_t)v;
    return true;
}

static int match_port(const char *spec, sv_route_match *out)
{
    const char *dash = strchr(spec, '-');
    const char *end = spec + strlen(spec);
    out->kind = SV_MATCH_PORT;
    if (dash == NULL) {
        if (!parse_port(spec, end, &out->port_lo))
            return -EINVAL;
        out->port_hi = out->port_lo;
        return AG_MATCH_OK;
    }
    if (!parse_port(spec, dash, &out->port_lo) || !parse_port(dash + 1, end, &out->port_hi) ||
        out->port_lo > out->port_hi)
        return -EINVAL;
    return AG_MATCH_OK;
}

/* 1 = not an address (the caller tries other forms), 0 = filled, -EINVAL = bad prefix. */
static int match_cidr(const char *s, sv_route_match *out)
{
    sv_cidr c;
    int rc = sv_cidr_parse(s, &c);
    if (rc == -EINVAL)
        return 1;
    if (rc != 0)
        return -EINVAL;
    out->kind = SV_MATCH_CIDR;
    out->cidr = c;
    return 0;
}

static int match_text(enum sv_match_kind kind, const char *text, sv_route_match *out)
{
    if (text[0] == '\0')
        return -EINVAL;
    out->kind = kind;
    out->text = strdup(text);
    return out->text != NULL ? AG_MATCH_OK : -ENOMEM;
}

int ag_regex_check(const char *pattern, char *why, size_t cap)
{
    int code;
    PCRE2_SIZE off;
    uint32_t minlen = 0;
    char dummy[1];
    if (why == NULL || cap == 0) {
        why = dummy;
        cap = sizeof dummy;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS,
                                   &code, &off, NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[128];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", code);
        snprintf(why, cap, "invalid regex at offset %zu: %s", (size_t)off, (const char *)msg);
        return -EINVAL;
    }
    int rc = pcre2_pattern_info(re, PCRE2_INFO_MINLENGTH, &minlen);
    pcre2_code_free(re);
    if (rc != 0 || minlen == 0) {
        snprintf(why, cap, "the regex can match an empty string (it would block everything)");
        return -EINVAL;
    }
    return 0;
}

static int match_regex(const char *pattern, sv_route_match *out)
{
    if (pattern[0] == '\0')
        return -EINVAL;
    if (ag_regex_check(pattern, NULL, 0) != 0)
        return AG_MATCH_BAD_REGEX;
    return match_text(SV_MATCH_REGEX, pattern, out);
}

int ag_lower_match(const char *entry, sv_route_match *out)
{
    memset(out, 0, sizeof *out);
    if (entry == NULL || entry[0] == '\0')
        return -EINVAL;
    if (starts_with(entry, "protocol:"))
        return AG_MATCH_SKIPPED;
    if (starts_with(entry, "regexp:"))
        return match_regex(entry + 7, out);
    if (starts_with(entry, "domain:"))
        return match_text(SV_MATCH_DOMAIN_SUFFIX, entry + 7, out);
    if (starts_with(entry, "full:"))
        return match_text(SV_MATCH_DOMAIN, entry + 5, out);
    if (starts_with(entry, "keyword:"))
        return match_text(SV_MATCH_DOMAIN_KEYWORD, entry + 8, out);
    if (starts_with(entry, "port:"))
        return match_port(entry + 5, out);
    int rc = match_cidr(entry, out);
    if (rc <= 0)
        return rc;
    return match_regex(entry, out);
}

/* ------------------------------------------------------------------------------------------ */
/* rules                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* One warning for a skipped regex entry, with PCRE2's reason. */
static void warn_bad_regex(const char *tag, const pn_route *route, const char *entry)
{
    char why[192];
    const char *pattern = starts_with(entry, "regexp:") ? entry + 7 : entry;
    if (ag_regex_check(pattern, why, sizeof why) == 0)
        snprintf(why, sizeof why, "refused");
    SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": match \"%.128s\" skipped: %s", tag,
           route->id, entry, why);
}

/* Fill r's matchers from the route's entries; warns about what it skips. */
static int rule_matchers(const char *tag, const pn_route *route, sv_route_rule *r)
{
    size_t skipped = 0;
    if (route->n_match == 0)
        return 0;
    r->matchers = calloc(route->n_match, sizeof *r->matchers);
    if (r->matchers == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < route->n_match; i++) {
        int rc = ag_lower_match(route->match[i], &r->matchers[r->n_matchers]);
        if (rc == -ENOMEM)
            return rc;
        if (rc == AG_MATCH_OK)
            r->n_matchers++;
        else if (rc == AG_MATCH_SKIPPED)
            skipped++;
        else if (rc == AG_MATCH_BAD_REGEX)
            warn_bad_regex(tag, route, route->match[i]);
        else
            SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": match \"%.128s\" skipped: "
                   "malformed", tag, route->id, route->match[i]);
    }
    if (skipped > 0)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": %zu protocol: match(es) "
               "skipped: protocol sniffing is not supported", tag, route->id, skipped);
    return 0;
}

static int rule_fill(const char *tag, const pn_route *route, sv_route_rule *r)
{
    int rc = rule_matchers(tag, route, r);
    if (rc != 0 || r->n_matchers == 0)
        return rc;
    r->inbounds = calloc(1, sizeof *r->inbounds);
    if (r->inbounds == NULL)
        return -ENOMEM;
    r->inbounds[0] = strdup(tag);
    if (r->inbounds[0] == NULL)
        return -ENOMEM;
    r->n_inbounds = 1;
    r->audit = true; /* a block route is an audit rule, its hits recorded */
    r->audit_id = route->id;
    r->outbound = strdup(AG_OUTBOUND_BLOCK);
    return r->outbound != NULL ? 0 : -ENOMEM;
}

/* a `dns` route's server (PANEL.md §1.4 action_value; "udp://" prefix dropped), or
 * NULL with a warning when katana does not serve it (DoH, TCP, a name, V2bX's raw "main" JSON). */
static char *dns_route_server(const char *tag, const pn_route *route)
{
    const char *v = route->action_value != NULL ? route->action_value : "";
    if (starts_with(v, "udp://"))
        v += 6;
    if (route->n_match > 0 && strcmp(route->match[0], "main") == 0) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": dns route skipped: raw DNS JSON "
               "(\"main\") is not served", tag, route->id);
        return NULL;
    }
    if (!sv_dns_server_valid(v)) {
        SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": dns route skipped: server "
               "\"%.64s\" is not \"ip\", \"ipv4:port\" or \"[ipv6]:port\"", tag, route->id, v);
        return NULL;
    }
    return strdup(v);
}

/* A `dns` route: a rule of the node's inbound, not an audit rule, to the node's
 * direct outbound (@p outbound), with the route's server resolving what it matches. */
static int dns_rule_fill(const char *tag, const pn_route *route, const char *outbound,
                         sv_route_rule *r)
{
    int rc = rule_matchers(tag, route, r);
    if (rc != 0 || r->n_matchers == 0)
        return rc;
    r->inbounds = calloc(1, sizeof *r->inbounds);
    if (r->inbounds == NULL || (r->inbounds[0] = strdup(tag)) == NULL)
        return -ENOMEM;
    r->n_inbounds = 1;
    r->outbound = strdup(outbound);
    return r->outbound != NULL ? 0 : -ENOMEM;
}

/* Route @p route of the node when its action is @p action: one rule appended to spec (none when
 * no entry produced a matcher). block → an audit rule to "block"; dns → a rule to @p outbound
 * with the route's DNS server. Actions other than block and dns are warned about (once, with
 * the block pass). */
static int lower_route(const char *tag, const pn_route *route, const char *action,
                       const char *outbound, sv_spec *spec, sv_error *err)
{
    bool is_block = strcmp(route->action, "block") == 0, is_dns = strcmp(route->action, "dns") == 0;
    if (!is_block && !is_dns && strcmp(action, "block") == 0)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: route %" PRId64 ": action \"%.32s\" ignored "
               "(only block and dns are supported)", tag, route->id, route->action);
    if (strcmp(route->action, action) != 0 || (!is_block && !is_dns))
        return 0;
    sv_route_rule r = {0};
    int rc = 0;
    if (is_block) {
        rc = rule_fill(tag, route, &r);
    } else if ((r.dns_server = dns_route_server(tag, route)) != NULL) {
        rc = dns_rule_fill(tag, route, outbound, &r);
    }
    if (rc == 0 && r.n_matchers > 0) {
        sv_route_rule *v = realloc(spec->route.rules, (spec->route.n_rules + 1) * sizeof *v);
        if (v == NULL) {
            rc = -ENOMEM;
        } else {
            spec->route.rules = v;
            v[spec->route.n_rules++] = r;
            return 0;
        }
    }
    sv_route_rule_free(&r);
    return rc != 0 ? sv_error_set(err, rc, "node %s: out of memory", tag) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* users, inbound, node, fleet                                                                  */
/* ------------------------------------------------------------------------------------------ */

int ag_lower_user_set(const char *tag, const pn_users *users, sv_user_set *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    if (users->shed) /* the manager refills a shed list before lowering it (agent/node.c) */
        return sv_error_set(err, -ESTALE, "node %s: the user list is not held", tag);
    out->tag = strdup(tag);
    if (out->tag == NULL)
        goto nomem;
    /* the secrets in one block (sv_user_set.strings): a malloc block each was a tenth of the
     * memory per user of a large node */
    size_t bytes = 0;
    for (size_t i = 0; i < users->n; i++)
        bytes += strlen(users->users[i].uuid != NULL ? users->users[i].uuid : "") + 1;
    if (users->n > 0) {
        out->users = calloc(users->n, sizeof *out->users);
        out->strings = malloc(bytes);
        if (out->users == NULL || out->strings == NULL)
            goto nomem;
    }
    char *at = out->strings;
    for (size_t i = 0; i < users->n; i++) {
        const pn_user *p = &users->users[i];
        sv_user *u = &out->users[i];
        const char *uuid = p->uuid != NULL ? p->uuid : "";
        size_t len = strlen(uuid) + 1;
        u->id = p->id; /* no label: the API and the logs name a user by its id */
        u->secret = memcpy(at, uuid, len);
        at += len;
        u->speed_limit = ag_lower_speed(p->speed_limit);
        u->device_limit = p->device_limit;
    }
    out->n_users = users->n;
    return 0;
nomem:
    sv_user_set_free(out);
    return sv_error_set(err, -ENOMEM, "node %s: out of memory", tag);
}

/*
 * Panel settings that change what clients speak or where their traffic goes: a node
 * whose protocol does not serve one is refused naming the field, never served as if it were
 * absent (clients set up from the panel would speak a transport, TLS, mux, obfs or plugin katana
 * does not, or expect their traffic to leave through the panel's outbounds).
 */
static const struct {
    unsigned bit;
    const char *field, *why;
} unserved_fields[] = {
    {PN_SET_NETWORK_SETTINGS, "networkSettings", "no transport settings"},
    {PN_SET_NETWORK_SETTINGS_ALT, "network_settings", "no transport settings"},
    {PN_SET_TLS, "tls", "no TLS or REALITY on a shadowsocks node"},
    {PN_SET_MULTIPLEX, "multiplex", "no multiplexing"},
    {PN_SET_CUSTOM_OUTBOUNDS, "custom_outbounds", "traffic leaves directly"},
    {PN_SET_CUSTOM_ROUTES, "custom_routes", "only block routes"},
    {PN_SET_FLOW, "flow", "no VLESS flow such as xtls-rprx-vision"},
    {PN_SET_DECRYPTION, "decryption", "no VLESS encryption"},
};

/* Refuse a `network` other than tcp (and @p also_network when not NULL) and every
 * unserved_fields entry but the @p served bits; @p what says what the node serves ("trojan over
 * TLS on TCP"). */
static int check_unserved(const ag_node_state *n, const char *what, unsigned served,
                          const char *also_network, sv_error *err)
{
    const pn_node *p = &n->node;
    if (p->network != NULL && strcmp(p->network, "tcp") != 0 &&
        (also_network == NULL || strcmp(p->network, also_network) != 0))
        return sv_error_set(err, -EINVAL, "node %s: network \"%.32s\": not served (%s only)",
                            n->tag, p->network, what);
    for (size_t i = 0; i < sizeof unserved_fields / sizeof unserved_fields[0]; i++)
        if ((p->set & unserved_fields[i].bit) && !(served & unserved_fields[i].bit))
            return sv_error_set(err, -EINVAL, "node %s: %s: not served (%s)", n->tag,
                                unserved_fields[i].field, unserved_fields[i].why);
    return 0;
}

/* A shadowsocks node's SIP003 v2ray-plugin in WebSocket mode: TLS or not, Mux.Cool
 * or not, the path (default "/") and the Host clients send (NULL: not checked), each NULL when
 * absent. */
typedef struct {
    bool tls, mux;
    char *path, *host;
} ss_ws_plugin;

static void ss_ws_plugin_free(ss_ws_plugin *w)
{
    free(w->path);
    free(w->host);
    *w = (ss_ws_plugin){0};
}

static int plugin_opt_text(const ag_node_state *n, const char *key, const char *val, char **out,
                           sv_error *err)
{
    if (val == NULL || val[0] == '\0')
        return sv_error_set(err, -EINVAL, "node %s: plugin_opts: %s needs a value", n->tag, key);
    free(*out);
    if ((*out = strdup(val)) == NULL)
        return sv_error_set(err, -ENOMEM, "node %s: out of memory", n->tag);
    return 0;
}

/*
 * Parse the `plugin_opts` of a shadowsocks node with `plugin` "v2ray-plugin" (PANEL.md §1.4;
 * the SIP003 option string "key=value;flag;..." of shadowsocks/v2ray-plugin) into @p out
 * (owned by the caller, ss_ws_plugin_free). Served: mode websocket, tls, path, host, server,
 * mux; cert, key, loglevel and fastopen are ignored (the certificate is the agent config's
 * "cert"). mux is v2ray-plugin's: clients multiplex with Mux.Cool (mux=N, N their concurrency)
 * unless it is 0, and a v2ray-plugin server expects what its own mux says, 1 when absent (issue
 * 9); a mux that is not a number, mode quic and unknown keys are refused.
 */
static int parse_ws_plugin(const ag_node_state *n, ss_ws_plugin *out, sv_error *err)
{
    *out = (ss_ws_plugin){0};
    const char *opts = n->node.plugin_opts != NULL ? n->node.plugin_opts : "";
    char *buf = strdup(opts), *save = NULL;
    if (buf == NULL)
        return sv_error_set(err, -ENOMEM, "node %s: out of memory", n->tag);
    out->mux = true;
    int rc = 0;
    for (char *it = strtok_r(buf, ";", &save); rc == 0 && it != NULL;
         it = strtok_r(NULL, ";", &save)) {
        char *val = strchr(it, '=');
        if (val != NULL)
            *val++ = '\0';
        if (strcmp(it, "tls") == 0 || strcmp(it, "server") == 0)
            out->tls |= strcmp(it, "tls") == 0;
        else if (strcmp(it, "path") == 0)
            rc = plugin_opt_text(n, it, val, &out->path, err);
        else if (strcmp(it, "host") == 0)
            rc = plugin_opt_text(n, it, val, &out->host, err);
        else if (strcmp(it, "mode") == 0 && (val == NULL || strcmp(val, "websocket") != 0))
            rc = sv_error_set(err, -EINVAL, "node %s: plugin_opts: mode \"%.32s\": not served "
                              "(websocket only)", n->tag, val != NULL ? val : "");
        else if (strcmp(it, "mux") == 0 && (val == NULL || val[0] == '\0' || strlen(val) > 4 ||
                                            strspn(val, "0123456789") != strlen(val)))
            rc = sv_error_set(err, -EINVAL, "node %s: plugin_opts: mux \"%.32s\": not a number "
                              "(0: no Mux.Cool, N: Mux.Cool)", n->tag, val != NULL ? val : "");
        else if (strcmp(it, "mux") == 0)
            out->mux = strspn(val, "0") != strlen(val);
        else if (strcmp(it, "mode") != 0 && strcmp(it, "cert") != 0 && strcmp(it, "key") != 0 &&
                 strcmp(it, "loglevel") != 0 && strcmp(it, "fastopen") != 0)
            rc = sv_error_set(err, -EINVAL, "node %s: plugin_opts: \"%.32s\": not served", n->tag,
                              it);
    }
    free(buf);
    if (rc == 0 && out->path == NULL && (out->path = strdup("/")) == NULL)
        rc = sv_error_set(err, -ENOMEM, "node %s: out of memory", n->tag);
    if (rc != 0)
        ss_ws_plugin_free(out);
    return rc;
}

/* Does the shadowsocks node use the SIP003 v2ray-plugin (`plugin` "v2ray-plugin")? */
static bool is_v2ray_plugin(const pn_node *p)
{
    return p->plugin != NULL && strcmp(p->plugin, "v2ray-plugin") == 0;
}

/* Is @p cipher one of the Shadowsocks 2022 (2022-blake3-*) methods? */
static bool is_ss2022(enum sv_ss_cipher cipher)
{
    return cipher == SV_SS_2022_AES_128_GCM || cipher == SV_SS_2022_AES_256_GCM ||
           cipher == SV_SS_2022_CHACHA20_POLY1305;
}

/* A shadowsocks node with @p cipher: plain TCP and UDP, or (classic ciphers only) TCP inside
 * WebSocket (over TLS or not, Mux.Cool or not) with the v2ray-plugin; no obfs or other SIP003
 * plugin.
 * TLS needs the agent config's "cert". */
static int check_shadowsocks(const ag_node_state *n, enum sv_ss_cipher cipher, sv_error *err)
{
    const pn_node *p = &n->node;
    if (p->obfs != NULL && p->obfs[0] != '\0')
        return sv_error_set(err, -EINVAL, "node %s: obfs \"%.32s\": not served (no "
                            "obfuscation)", n->tag, p->obfs);
    if (is_ss2022(cipher) && p->plugin != NULL && p->plugin[0] != '\0')
        return sv_error_set(err, -EINVAL, "node %s: plugin \"%.32s\": not served with a "
                            "2022-blake3 cipher (v2ray-plugin with classic ciphers only)", n->tag,
                            p->plugin);
    if (p->plugin != NULL && p->plugin[0] != '\0' && !is_v2ray_plugin(p))
        return sv_error_set(err, -EINVAL, "node %s: plugin \"%.32s\": not served (v2ray-plugin "
                            "only)", n->tag, p->plugin);
    if (n->fallback != NULL)
        return sv_error_set(err, -EINVAL, "node %s: \"fallback\" applies to trojan, vless and "
                            "anytls nodes only", n->tag);
    bool tls = false;
    if (is_v2ray_plugin(p)) {
        ss_ws_plugin w;
        int rc = parse_ws_plugin(n, &w, err);
        if (rc != 0)
            return rc;
        tls = w.tls;
        ss_ws_plugin_free(&w);
    }
    if (tls && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: v2ray-plugin with tls needs \"cert\" in the "
                            "agent config (mode file or self)", n->tag);
    if (!tls && n->cert != SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: \"cert\" applies to a shadowsocks node only "
                            "with v2ray-plugin tls", n->tag);
    return check_unserved(n, "shadowsocks over plain TCP and UDP", 0, NULL, err);
}

/* Is the node's transport WebSocket (`network` "ws") or HTTPUpgrade ("httpupgrade"),
 * both set by networkSettings path and Host? */
static bool is_ws(const pn_node *p)
{
    return p->network != NULL &&
           (strcmp(p->network, "ws") == 0 || strcmp(p->network, "httpupgrade") == 0);
}

/* Is the node's transport gRPC (`network` "grpc")? */
static bool is_grpc(const pn_node *p)
{
    return p->network != NULL && strcmp(p->network, "grpc") == 0;
}

/* The transports a trojan, vless or vmess node may name besides tcp (ws; httpupgrade
 * and grpc): the node's own when it is one of them (its networkSettings are then served, @p served
 * gets their bits), else NULL. A grpc node needs networkSettings.serviceName. */
static const char *stream_network(const ag_node_state *n, unsigned *served, sv_error *err,
                                  int *rc)
{
    *rc = 0;
    if (!is_ws(&n->node) && !is_grpc(&n->node))
        return NULL;
    *served |= PN_SET_NETWORK_SETTINGS | PN_SET_NETWORK_SETTINGS_ALT;
    if (is_grpc(&n->node) && (n->node.grpc_service == NULL || n->node.grpc_service[0] == '\0'))
        *rc = sv_error_set(err, -EINVAL, "node %s: networkSettings.serviceName: required for "
                           "network grpc", n->tag);
    return n->node.network;
}

static int check_reality(const ag_node_state *n, const char *what, sv_error *err);

/*
 * A vless node's `flow` (PROTOCOLS-2.md §2): only "xtls-rprx-vision", and only
 * directly on TLS (tls 1, OpenSSL's TLS 1.3) or REALITY (tls 2) over TCP, as Xray's server
 * (§2.1: not in clear, nor over WebSocket, HTTPUpgrade or gRPC, @p net when the node has one).
 * Adds PN_SET_FLOW to @p served when the node has a flow. @return 0, or -EINVAL naming `flow`.
 */
static int check_flow(const ag_node_state *n, const char *net, unsigned *served, sv_error *err)
{
    const char *flow = n->node.flow != NULL ? n->node.flow : "";
    if (!(n->node.set & PN_SET_FLOW))
        return 0;
    if (strcmp(flow, VISION_FLOW) != 0)
        return sv_error_set(err, -EINVAL, "node %s: flow \"%.32s\": only \"%s\" is served",
                            n->tag, flow, VISION_FLOW);
    if (n->node.tls != 1 && n->node.tls != 2)
        return sv_error_set(err, -EINVAL, "node %s: flow \"%s\": XTLS Vision is served over "
                            "tls 1 (TLS) or 2 (REALITY) only, not over tls %u", n->tag,
                            VISION_FLOW, n->node.tls);
    if (net != NULL)
        return sv_error_set(err, -EINVAL, "node %s: flow \"%s\": XTLS Vision is served "
                            "directly on TLS or REALITY over TCP only, not over %.32s", n->tag,
                            VISION_FLOW, net);
    *served |= PN_SET_FLOW;
    return 0;
}

/*
 * A trojan node (PANEL.md §1.4: server_port, server_name, host, network tcp, ws or httpupgrade
 * with networkSettings path and headers.Host) is served over TLS with the agent
 * config's certificate, or over REALITY on TCP or gRPC when tls is 2
 * (PANEL.md §1.4: the same REALITY tls_settings as vless; check_reality). Other transports and
 * transport settings on tcp are refused naming the field; the node keeps its last good state.
 */
static int check_trojan(const ag_node_state *n, sv_error *err)
{
    if (n->node.tls == 2)
        return check_reality(n, "trojan over REALITY on TCP or gRPC", err);
    unsigned served = PN_SET_TLS;
    int rc;
    const char *net = stream_network(n, &served, err, &rc);
    if (rc != 0)
        return rc;
    rc = check_unserved(n, "trojan over TLS on TCP, WebSocket, HTTPUpgrade or gRPC", served, net, err);
    if (rc == 0 && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: a trojan node needs \"cert\" in the agent "
                            "config (mode file or self)", n->tag);
    return rc;
}

/* Is @p s (NULL = absent) @p n characters of @p set? */
static bool chars_in(const char *s, size_t n, const char *set)
{
    return s != NULL && strlen(s) == n && strspn(s, set) == n;
}

/*
 * A vless or trojan node with tls 2: REALITY on TCP or gRPC with its `tls_settings`
 * (PANEL.md §1.4), @p what naming what is served in refusals:
 * the target's server_name (also the one SNI served) and server_port, the X25519 private_key
 * (base64url of 32 bytes) and the short_id (hex, at most 16 digits, even count; empty = the
 * all-zero id). The agent config's "fallback" does not apply (the target is the fallback);
 * `flow` "xtls-rprx-vision" is served on TCP (XTLS Vision, PROTOCOLS-2.md §2; not over gRPC,
 * §2.1); another flow and transports other than gRPC (PROTOCOLS-2.md §1.6: HTTP/2 with prior
 * knowledge inside REALITY, networkSettings.serviceName required) are refused naming the field
 * (check_flow).
 * An SSPanel node's reality-opts (PANEL.md §2.5, checked by panel/sspanel.c) give the target,
 * the server name and short id lists, client version bounds and xver instead.
 */
static int check_reality(const ag_node_state *n, const char *what, sv_error *err)
{
    const pn_reality *r = &n->node.reality;
    static const char b64url[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if (r->target == NULL && (r->server_name == NULL || r->server_name[0] == '\0' ||
                              strlen(r->server_name) > 253 ||
                              strpbrk(r->server_name, " ,:/[]") != NULL))
        return sv_error_set(err, -EINVAL, "node %s: tls_settings.server_name: required for tls "
                            "2 (REALITY): the target site's DNS name", n->tag);
    if (r->target == NULL && r->server_port == 0)
        return sv_error_set(err, -EINVAL, "node %s: tls_settings.server_port: required for tls "
                            "2 (REALITY): the target site's port", n->tag);
    if (r->target != NULL && (r->server_names == NULL || r->short_ids == NULL))
        return sv_error_set(err, -EINVAL, "node %s: reality-opts: server_names and short_ids "
                            "are required with dest", n->tag);
    if (r->private_key == NULL)
        return sv_error_set(err, -EINVAL, "node %s: tls_settings.private_key: missing (required "
                            "for tls 2, REALITY: the server's X25519 private key)", n->tag);
    if (!chars_in(r->private_key, 43, b64url))
        return sv_error_set(err, -EINVAL, "node %s: tls_settings.private_key: expected an X25519 "
                            "key, 43 base64url characters", n->tag);
    if (strcmp(r->private_key, DOCS_EXAMPLE_REALITY_KEY) == 0)
        SV_LOG(SV_LOG_WARN, MOD, "node %s: tls_settings.private_key is the documentation's "
               "example key, which anyone can read: make a pair of your own with "
               "'katana keygen reality'", n->tag);
    const char *sid = r->short_id != NULL ? r->short_id : "";
    if (r->target == NULL && (strlen(sid) > 16 || strlen(sid) % 2 != 0 ||
                              !chars_in(sid, strlen(sid), "0123456789abcdefABCDEF")))
        return sv_error_set(err, -EINVAL, "node %s: tls_settings.short_id \"%.32s\": expected "
                            "at most 16 hex digits, an even count", n->tag, sid);
    if (n->fallback != NULL)
        return sv_error_set(err, -EINVAL, "node %s: \"fallback\" does not apply to tls 2 "
                            "(REALITY): the target is tls_settings.server_name:server_port",
                            n->tag);
    unsigned served = PN_SET_TLS;
    int rc = 0;
    const char *net = is_grpc(&n->node) ? stream_network(n, &served, err, &rc) : NULL;
    if (rc != 0)
        return rc;
    if (strcmp(n->node.protocol, "vless") == 0)
        rc = check_flow(n, net, &served, err);
    return rc != 0 ? rc : check_unserved(n, what, served, net, err);
}

/*
 * A vless node (PANEL.md §1.4: tls 0/1/2, flow, decryption, network tcp, ws or httpupgrade
 * with networkSettings path and headers.Host) is served on TCP, WebSocket or
 * HTTPUpgrade, over TLS with the agent config's certificate when tls is 1, in clear when 0 (the
 * config's "cert" is then unused), over REALITY on TCP or gRPC when 2 (check_reality). The
 * Vision flow is served over tls 1 or 2 on TCP (check_flow); VLESS encryption and other
 * transports are refused naming the field.
 */
static int check_vless(const ag_node_state *n, sv_error *err)
{
    if (n->node.tls == 2)
        return check_reality(n, "vless over REALITY on TCP or gRPC", err);
    unsigned served = PN_SET_TLS;
    int rc;
    const char *net = stream_network(n, &served, err, &rc);
    if (rc == 0)
        rc = check_flow(n, net, &served, err);
    if (rc != 0)
        return rc;
    rc = check_unserved(n, "vless on TCP, WebSocket, HTTPUpgrade or gRPC", served, net, err);
    if (rc == 0 && n->node.tls == 1 && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: a vless node with tls 1 needs \"cert\" in "
                            "the agent config (mode file or self)", n->tag);
    return rc;
}

/*
 * A vmess node (PANEL.md §1.4: server_port, network tcp, ws or httpupgrade with
 * networkSettings path and headers.Host, tls 0/1) is served on TCP, WebSocket or HTTPUpgrade,
 * in clear or over TLS with the agent config's certificate when tls is 1. Other transports and
 * REALITY are refused, naming the field.
 */
static int check_vmess(const ag_node_state *n, sv_error *err)
{
    if (n->node.tls == 2)
        return sv_error_set(err, -EINVAL, "node %s: tls 2 (REALITY): not served (vmess in "
                            "clear or over TLS only)", n->tag);
    unsigned served = PN_SET_TLS;
    int rc;
    const char *net = stream_network(n, &served, err, &rc);
    if (rc != 0)
        return rc;
    rc = check_unserved(n, "vmess on TCP, WebSocket, HTTPUpgrade or gRPC", served, net, err);
    if (rc == 0 && n->fallback != NULL)
        return sv_error_set(err, -EINVAL, "node %s: \"fallback\" applies to trojan, vless and "
                            "anytls nodes only", n->tag);
    if (rc == 0 && n->node.tls == 1 && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: a vmess node with tls 1 needs \"cert\" in "
                            "the agent config (mode file or self)", n->tag);
    if (rc == 0 && n->node.tls == 0 && n->cert != SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: \"cert\" is set but the vmess node has "
                            "tls 0", n->tag);
    return rc;
}

/* The proxy node types (PROTOCOLS-3.md §4, §5.5): "socks" and "http" from a panel, "mixed" in
 * a local config; TCP only, in clear or over TLS (tls 1, the agent config's certificate). */
static enum sv_inbound_protocol proxy_protocol(const pn_node *p)
{
    static const struct {
        const char *name;
        enum sv_inbound_protocol protocol;
    } types[] = {{"socks", SV_INBOUND_SOCKS}, {"http", SV_INBOUND_HTTP},
                 {"mixed", SV_INBOUND_MIXED}};
    for (size_t i = 0; p->protocol != NULL && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(p->protocol, types[i].name) == 0)
            return types[i].protocol;
    return 0;
}

/* Is @p addr (an IP literal) a loopback or private (RFC 1918, RFC 4193) address? A wildcard
 * (0.0.0.0, ::) is not: it listens on the public addresses too. */
static bool listen_is_private(const char *addr)
{
    uint8_t a[16];
    if (inet_pton(AF_INET, addr, a) == 1)
        return a[0] == 127 || a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) ||
               (a[0] == 192 && a[1] == 168);
    if (inet_pton(AF_INET6, addr, a) != 1)
        return false;
    static const uint8_t loop[16] = {[15] = 1};
    return memcmp(a, loop, 16) == 0 || (a[0] & 0xfe) == 0xfc;
}

static int check_proxy(const ag_node_state *n, sv_error *err)
{
    const char *type = n->node.protocol;
    if (n->no_auth && !listen_is_private(ag_node_listen(n)))
        SV_LOG(SV_LOG_WARN, MOD, "node %s: no_auth on %s: anyone who reaches the port is "
               "served as its user; listen on a loopback or private address", n->tag,
               ag_node_listen(n));
    if (n->node.tls == 2)
        return sv_error_set(err, -EINVAL, "node %s: tls 2 (REALITY): not served (%s in clear "
                            "or over TLS only)", n->tag, type);
    int rc = check_unserved(n, "a proxy node on TCP", PN_SET_TLS, NULL, err);
    if (rc == 0 && n->fallback != NULL)
        return sv_error_set(err, -EINVAL, "node %s: \"fallback\" applies to trojan, vless and "
                            "anytls nodes only", n->tag);
    if (rc == 0 && n->node.tls == 1 && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: a %s node with tls 1 needs \"cert\" in the "
                            "agent config (mode file or self)", n->tag, type);
    if (rc == 0 && n->node.tls == 0 && n->cert != SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: \"cert\" is set but the %s node has tls 0",
                            n->tag, type);
    return rc;
}

/* An anytls node (PROTOCOLS-3.md §5.5: server_name, tls_settings, padding_scheme): AnyTLS over
 * TLS on TCP with the agent config's certificate, an optional fallback; REALITY refused. */
static int check_anytls(const ag_node_state *n, sv_error *err)
{
    if (n->node.tls == 2)
        return sv_error_set(err, -EINVAL, "node %s: tls 2 (REALITY): not served (anytls over "
                            "TLS only)", n->tag);
    int rc = check_unserved(n, "anytls over TLS on TCP", PN_SET_TLS, NULL, err);
    if (rc == 0 && n->cert == SV_CERT_NONE)
        return sv_error_set(err, -EINVAL, "node %s: an anytls node needs \"cert\" in the agent "
                            "config (mode file or self)", n->tag);
    return rc;
}

static int check_node(const ag_node_state *n, enum sv_ss_cipher *cipher, sv_error *err)
{
    const pn_node *p = &n->node;
    if (proxy_protocol(p) != 0)
        return check_proxy(n, err);
    if (n->no_auth)
        return sv_error_set(err, -EINVAL, "node %s: \"no_auth\" applies to socks, http and "
                            "mixed nodes only", n->tag);
    if (p->protocol != NULL && strcmp(p->protocol, "trojan") == 0)
        return check_trojan(n, err);
    if (p->protocol != NULL && strcmp(p->protocol, "anytls") == 0)
        return check_anytls(n, err);
    if (p->protocol != NULL && strcmp(p->protocol, "vless") == 0)
        return check_vless(n, err);
    if (p->protocol != NULL && strcmp(p->protocol, "vmess") == 0)
        return check_vmess(n, err);
    if (p->protocol == NULL || strcmp(p->protocol, "shadowsocks") != 0)
        return sv_error_set(err, -EINVAL, "node %s: unsupported protocol \"%.32s\"", n->tag,
                            p->protocol != NULL ? p->protocol : "");
    if (p->cipher == NULL)
        return sv_error_set(err, -EINVAL, "node %s: cipher: missing (required for a shadowsocks "
                            "node)", n->tag);
    if (ag_lower_cipher(p->cipher, cipher) != 0)
        return sv_error_set(err, -EINVAL, "node %s: unsupported shadowsocks cipher \"%.64s\"",
                            n->tag, p->cipher);
    return check_shadowsocks(n, *cipher, err);
}

/* The node's WebSocket path (an empty one is "/", as v2ray and Xray take it) and Host into
 * @p in. */
static int set_ws(sv_inbound_spec *in, const char *path, const char *host)
{
    if ((in->ws.path = strdup(path != NULL && path[0] != '\0' ? path : "/")) == NULL ||
        (host != NULL && host[0] != '\0' && (in->ws.host = strdup(host)) == NULL))
        return -ENOMEM;
    return 0;
}

/* A shadowsocks inbound: UDP on its port; with the v2ray-plugin, TCP inside WebSocket (and
 * Mux.Cool unless mux=0), over TLS with the agent config's certificate when the plugin options
 * say tls. */
static int add_ss_inbound(const ag_node_state *n, enum sv_ss_cipher cipher, sv_inbound_spec *in)
{
    in->udp = true;
    in->ss_cipher = cipher;
    if (is_ss2022(cipher)) {
        /* Shadowsocks 2022 on TCP and UDP, users told apart by identity headers
         * under server_key (PANEL.md §1.4); check_shadowsocks refused a plugin */
        in->protocol = SV_INBOUND_SS2022;
        const char *key = n->node.server_key;
        return key != NULL && (in->ss_server_key = strdup(key)) == NULL ? -ENOMEM : 0;
    }
    in->protocol = SV_INBOUND_SHADOWSOCKS;
    if (!is_v2ray_plugin(&n->node))
        return 0;
    ss_ws_plugin w;
    sv_error err = {0};
    if (parse_ws_plugin(n, &w, &err) != 0)
        return -ENOMEM; /* checked by check_node: only memory can fail here */
    int rc = set_ws(in, w.path, w.host);
    in->ws.mux = w.mux;
    if (rc == 0 && w.tls) {
        in->tls.cert = n->cert;
        if ((n->cert_file != NULL && (in->tls.cert_file = strdup(n->cert_file)) == NULL) ||
            (n->key_file != NULL && (in->tls.key_file = strdup(n->key_file)) == NULL) ||
            (w.host != NULL && (in->tls.server_name = strdup(w.host)) == NULL))
            rc = -ENOMEM;
    }
    ss_ws_plugin_free(&w);
    return rc;
}

/* REALITY settings of a vless or trojan node with tls 2 (checked by check_reality): the target
 * as the inbound's fallback, its name as the one server name; an SSPanel node's
 * reality-opts target, lists, client version bounds and xver as they are (PANEL.md §2.5). */
static int add_reality(const ag_node_state *n, sv_inbound_spec *in)
{
    const pn_reality *r = &n->node.reality;
    char target[300];
    snprintf(target, sizeof target, "%s:%u", r->server_name, (unsigned)r->server_port);
    in->reality.max_time_diff_ms = r->max_time_diff;
    in->reality.min_client_ver = r->min_client_ver;
    in->reality.max_client_ver = r->max_client_ver;
    in->reality.xver = r->xver;
    const char *names = r->server_names != NULL ? r->server_names : r->server_name;
    const char *sids = r->short_ids != NULL ? r->short_ids : r->short_id;
    if ((in->fallback = strdup(r->target != NULL ? r->target : target)) == NULL ||
        (in->reality.private_key = strdup(r->private_key)) == NULL ||
        (in->reality.server_names = strdup(names)) == NULL ||
        (sids != NULL && (in->reality.short_ids = strdup(sids)) == NULL))
        return -ENOMEM;
    return 0;
}

static int add_inbound(const ag_node_state *n, enum sv_ss_cipher cipher, sv_spec *spec)
{
    sv_inbound_spec *v = realloc(spec->inbounds, (spec->n_inbounds + 1) * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    spec->inbounds = v;
    sv_inbound_spec *in = &v[spec->n_inbounds++];
    memset(in, 0, sizeof *in);
    in->bind.port = n->node.server_port;
    in->allow_private = n->allow_private;
    in->accept_proxy_protocol = n->accept_proxy_protocol;
    in->proxy_no_auth = n->no_auth;
    memcpy(in->trusted_forwarders, n->trusted_forwarders, sizeof in->trusted_forwarders);
    in->n_trusted_forwarders = n->n_trusted_forwarders;
    in->user_removal = n->user_removal;
    in->tag = strdup(n->tag);
    in->bind.address = strdup(ag_node_listen(n));
    in->users = strdup(n->tag);
    if (in->tag == NULL || in->bind.address == NULL || in->users == NULL)
        return -ENOMEM;
    bool vless = n->node.protocol != NULL && strcmp(n->node.protocol, "vless") == 0;
    bool vmess = n->node.protocol != NULL && strcmp(n->node.protocol, "vmess") == 0;
    bool anytls = n->node.protocol != NULL && strcmp(n->node.protocol, "anytls") == 0;
    enum sv_inbound_protocol proxy = proxy_protocol(&n->node);
    if (!vless && !vmess && !anytls && proxy == 0 &&
        (n->node.protocol == NULL || strcmp(n->node.protocol, "trojan") != 0))
        return add_ss_inbound(n, cipher, in);
    in->protocol = proxy != 0 ? proxy
                   : vless    ? SV_INBOUND_VLESS
                   : vmess    ? SV_INBOUND_VMESS
                   : anytls   ? SV_INBOUND_ANYTLS
                              : SV_INBOUND_TROJAN;
    if (anytls && n->node.padding_scheme != NULL &&
        (in->anytls_padding_scheme = strdup(n->node.padding_scheme)) == NULL)
        return -ENOMEM;
    if (is_ws(&n->node) && set_ws(in, n->node.ws_path, n->node.ws_host) != 0)
        return -ENOMEM;
    in->ws.httpupgrade = is_ws(&n->node) && strcmp(n->node.network, "httpupgrade") == 0;
    if (is_grpc(&n->node) && (in->grpc.service_name = strdup(n->node.grpc_service)) == NULL)
        return -ENOMEM;
    bool tls_optional = vless || vmess || proxy != 0;
    in->tls.cert = n->node.tls == 2 || (tls_optional && n->node.tls != 1) ? SV_CERT_NONE : n->cert;
    /* checked by check_flow: xtls-rprx-vision on a vless node over TLS or REALITY on TCP */
    in->reality.vision = vless && (n->node.set & PN_SET_FLOW) != 0;
    if (n->node.tls == 2) /* vless or trojan: REALITY (check_reality) */
        return add_reality(n, in);
    if (in->tls.cert == SV_CERT_NONE)
        return n->fallback != NULL && (in->fallback = strdup(n->fallback)) == NULL ? -ENOMEM : 0;
    const char *name = n->node.server_name != NULL ? n->node.server_name : n->node.host;
    if ((n->cert_file != NULL && (in->tls.cert_file = strdup(n->cert_file)) == NULL) ||
        (n->key_file != NULL && (in->tls.key_file = strdup(n->key_file)) == NULL) ||
        (name != NULL && (in->tls.server_name = strdup(name)) == NULL) ||
        (n->fallback != NULL && (in->fallback = strdup(n->fallback)) == NULL))
        return -ENOMEM;
    return 0;
}

static int add_user_set(const ag_node_state *n, sv_spec *spec, sv_error *err)
{
    sv_user_set *v = realloc(spec->user_sets, (spec->n_user_sets + 1) * sizeof *v);
    if (v == NULL)
        return sv_error_set(err, -ENOMEM, "node %s: out of memory", n->tag);
    spec->user_sets = v;
    int rc = ag_lower_user_set(n->tag, &n->users, &v[spec->n_user_sets], err);
    if (rc == 0)
        ag_lower_node_speed(&v[spec->n_user_sets++], n->speed_limit);
    return rc;
}

/* a node with its own `outbound` gets a direct outbound tagged with the node's tag
 * and, after its block rules, a rule of its inbound sending every flow (tcp or udp) there. */
static int add_own_outbound(const ag_node_state *n, sv_spec *spec)
{
    sv_outbound_spec *o = realloc(spec->outbounds, (spec->n_outbounds + 1) * sizeof *o);
    if (o == NULL)
        return -ENOMEM;
    spec->outbounds = o;
    o = &o[spec->n_outbounds];
    *o = (sv_outbound_spec){.kind = SV_OUTBOUND_DIRECT, .socket = n->outbound};
    if ((o->tag = strdup(n->tag)) == NULL)
        return -ENOMEM;
    spec->n_outbounds++;
    sv_route_rule r = {0};
    r.matchers = calloc(2, sizeof *r.matchers);
    r.inbounds = calloc(1, sizeof *r.inbounds);
    if (r.matchers != NULL && r.inbounds != NULL) {
        r.matchers[0] = (sv_route_match){.kind = SV_MATCH_NETWORK, .network = SV_NET_TCP};
        r.matchers[1] = (sv_route_match){.kind = SV_MATCH_NETWORK, .network = SV_NET_UDP};
        r.n_matchers = 2;
        r.inbounds[0] = strdup(n->tag);
        r.n_inbounds = r.inbounds[0] != NULL ? 1 : 0;
        r.outbound = strdup(n->tag);
    }
    sv_route_rule *v = r.outbound != NULL && r.n_inbounds == 1
                           ? realloc(spec->route.rules, (spec->route.n_rules + 1) * sizeof *v)
                           : NULL;
    if (v == NULL) {
        sv_route_rule_free(&r);
        return -ENOMEM;
    }
    spec->route.rules = v;
    v[spec->route.n_rules++] = r;
    return 0;
}

int ag_lower_node(const ag_node_state *node, sv_spec *spec, sv_error *err)
{
    enum sv_ss_cipher cipher = SV_SS_AES_128_GCM;
    int rc = check_node(node, &cipher, err);
    if (rc != 0)
        return rc;
    if (add_inbound(node, cipher, spec) != 0)
        return sv_error_set(err, -ENOMEM, "node %s: out of memory", node->tag);
    rc = add_user_set(node, spec, err);
    /* block routes first, then dns routes (a blocked name stays blocked), then the node's own
     * outbound's catch-all rule */
    const char *direct = node->has_outbound ? node->tag : AG_OUTBOUND_DIRECT;
    for (size_t i = 0; rc == 0 && i < node->node.n_routes; i++)
        rc = lower_route(node->tag, &node->node.routes[i], "block", direct, spec, err);
    for (size_t i = 0; rc == 0 && i < node->node.n_routes; i++)
        rc = lower_route(node->tag, &node->node.routes[i], "dns", direct, spec, err);
    if (rc == 0 && node->has_outbound && add_own_outbound(node, spec) != 0)
        rc = sv_error_set(err, -ENOMEM, "node %s: out of memory", node->tag);
    return rc;
}

static int add_outbounds(const ag_fleet *fleet, sv_spec *spec)
{
    spec->outbounds = calloc(2, sizeof *spec->outbounds);
    if (spec->outbounds == NULL)
        return -ENOMEM;
    spec->n_outbounds = 2;
    spec->outbounds[0].kind = SV_OUTBOUND_DIRECT;
    spec->outbounds[0].socket = fleet->outbound;
    spec->outbounds[0].tag = strdup(AG_OUTBOUND_DIRECT);
    spec->outbounds[1].kind = SV_OUTBOUND_BLACKHOLE;
    spec->outbounds[1].tag = strdup(AG_OUTBOUND_BLOCK);
    spec->route.default_outbound = strdup(AG_OUTBOUND_DIRECT);
    if (spec->outbounds[0].tag == NULL || spec->outbounds[1].tag == NULL ||
        spec->route.default_outbound == NULL)
        return -ENOMEM;
    return 0;
}

int ag_lower_fleet(const ag_fleet *fleet, sv_spec *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    out->user_removal = fleet->user_removal;
    out->drain = fleet->drain;
    int rc = add_outbounds(fleet, out);
    if (rc != 0)
        sv_error_set(err, rc, "out of memory");
    for (size_t i = 0; rc == 0 && i < fleet->n; i++)
        rc = ag_lower_node(&fleet->nodes[i], out, err);
    if (rc != 0)
        sv_spec_free(out);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* comparisons                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool forwarders_equal(const ag_node_state *a, const ag_node_state *b)
{
    return sv_cidr_list_equal(a->trusted_forwarders, a->n_trusted_forwarders,
                              b->trusted_forwarders, b->n_trusted_forwarders);
}

bool ag_node_settings_equal(const ag_node_state *a, const ag_node_state *b)
{
    return str_eq(a->tag, b->tag) && strcmp(ag_node_listen(a), ag_node_listen(b)) == 0 &&
           a->allow_private == b->allow_private &&
           a->accept_proxy_protocol == b->accept_proxy_protocol && a->no_auth == b->no_auth &&
           a->speed_limit == b->speed_limit &&
           forwarders_equal(a, b) &&
           pn_node_equal(&a->node, &b->node) &&
           a->user_removal.kind == b->user_removal.kind &&
           a->user_removal.grace_ms == b->user_removal.grace_ms &&
           a->has_outbound == b->has_outbound &&
           sv_socket_policy_equal(&a->outbound, &b->outbound) &&
           a->cert == b->cert && str_eq(a->cert_file, b->cert_file) &&
           str_eq(a->key_file, b->key_file) && str_eq(a->fallback, b->fallback);
}

bool ag_node_transport_equal(const ag_node_state *a, const ag_node_state *b)
{
    const pn_node *x = &a->node, *y = &b->node;
    return strcmp(ag_node_listen(a), ag_node_listen(b)) == 0 &&
           x->server_port == y->server_port && str_eq(x->protocol, y->protocol) &&
           str_eq(x->network, y->network) && x->set == y->set &&
           str_eq(x->cipher, y->cipher) && str_eq(x->server_key, y->server_key) &&
           str_eq(x->obfs, y->obfs) && str_eq(x->plugin, y->plugin) &&
           str_eq(x->plugin_opts, y->plugin_opts) &&
           str_eq(x->ws_path, y->ws_path) && str_eq(x->ws_host, y->ws_host) &&
           str_eq(x->grpc_service, y->grpc_service);
}
