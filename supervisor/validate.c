/*
 * sv_validate: every semantic rule of a spec, and the only place they live (seed 001, "validate",
 * "one owner per rule"). Pure: reads the spec, allocates only scratch sets, touches nothing.
 *
 * Texts: seed 001 ApplyError ("duplicate {kind} tag {tag}", "{from} references unknown {kind}
 * {tag}", "a {kind} tag must not be empty", "{resource}: {reason}"); seed 000 ("route references
 * unknown outbound <tag>"). Kinds are the words "inbound", "outbound", "user set". Reasons the
 * seeds do not spell out are katana's, in the same "{resource}: {reason}" shape.
 *
 * Check order (the first violation wins and is the one reported):
 *  1. tags, per kind: inbounds, then outbounds, then user sets; within a kind in spec order:
 *     empty, a byte sv_tag_bad_byte() refuses, longer than SV_TAG_MAX, duplicate of an earlier
 *     one;
 *  2. references, in spec order: each inbound's user set; then each route rule (its outbound,
 *     then its inbounds list); then the default outbound;
 *  3. per-resource rules: inbounds (address, port, bind overlap with an earlier inbound,
 *     protocol, cipher, user set present), outbounds (kind, socket policy), user sets
 *     (count, then per user:
 *     duplicate id, secret, secret shared with an earlier user — a secret names its user, so two
 *     users with one secret would be told apart by nothing), route (rule count, then
 *     per rule: matcher count, dns server, each matcher), policies.
 * Rule and matcher numbers in texts are 0-based indexes, like sv_flow_info.rule.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "supervisor/proto/core.h"
#include <sys/socket.h>

#include "supervisor/plan.h"
#include "supervisor/supervisor.h"

#define INVALID(err, ...) sv_error_set((err), -EINVAL, __VA_ARGS__)

static bool is_empty(const char *s)
{
    return s == NULL || s[0] == '\0';
}

/* ----------------------------------------------------------------------------------------- */
/* A set of element indexes for finding the first duplicate in scan order (open addressing).   */
/* ----------------------------------------------------------------------------------------- */

typedef uint64_t (*key_hash_fn)(const void *ctx, size_t i);
typedef bool (*key_eq_fn)(const void *ctx, size_t i, size_t j);

typedef struct seen_set {
    size_t *slots; /**< index + 1; 0 = empty */
    size_t mask;
    const void *ctx;
    key_hash_fn hash;
    key_eq_fn eq;
} seen_set;

static int seen_init(seen_set *s, size_t n, const void *ctx, key_hash_fn hash, key_eq_fn eq)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    s->slots = calloc(cap, sizeof *s->slots);
    s->mask = cap - 1;
    s->ctx = ctx;
    s->hash = hash;
    s->eq = eq;
    return s->slots == NULL ? -ENOMEM : 0;
}

/** Insert element @p i. @return the index of an earlier equal element, or SIZE_MAX. */
static size_t seen_insert(seen_set *s, size_t i)
{
    size_t pos = (size_t)s->hash(s->ctx, i) & s->mask;
    while (s->slots[pos] != 0) {
        size_t j = s->slots[pos] - 1;
        if (s->eq(s->ctx, i, j))
            return j;
        pos = (pos + 1) & s->mask;
    }
    s->slots[pos] = i + 1;
    return SIZE_MAX;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t str_hash(const char *p)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
    return h;
}

static uint64_t tag_hash(const void *ctx, size_t i)
{
    return str_hash(((const char *const *)ctx)[i]);
}

static bool tag_eq(const void *ctx, size_t i, size_t j)
{
    const char *const *tags = ctx;
    return strcmp(tags[i], tags[j]) == 0;
}

static uint64_t user_hash(const void *ctx, size_t i)
{
    return mix64(((const sv_user_set *)ctx)->users[i].id);
}

static bool user_eq(const void *ctx, size_t i, size_t j)
{
    const sv_user_set *set = ctx;
    return set->users[i].id == set->users[j].id;
}

static uint64_t secret_hash(const void *ctx, size_t i)
{
    return str_hash(((const sv_user_set *)ctx)->users[i].secret);
}

static bool secret_eq(const void *ctx, size_t i, size_t j)
{
    const sv_user_set *set = ctx;
    return strcmp(set->users[i].secret, set->users[j].secret) == 0;
}

/* ----------------------------------------------------------------------------------------- */
/* 1. Tags                                                                                   */
/* ----------------------------------------------------------------------------------------- */

/** Empty, a refused byte (sv_tag_bad_byte; the tag is not printed then), too long, duplicate, in
 * order, over @p n tags of one @p kind. */
static int check_tags(const char *kind, const char *const *tags, size_t n, sv_error *err)
{
    seen_set seen;
    if (seen_init(&seen, n, tags, tag_hash, tag_eq) < 0)
        return sv_error_set(err, -ENOMEM, "validating the spec: out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (is_empty(tags[i]))
            rc = INVALID(err, "a %s tag must not be empty", kind);
        else if (sv_tag_bad_byte(tags[i]) != NULL)
            rc = INVALID(err, "%s tag %zu: byte %zu is a control character, '\"' or '\\'", kind,
                         i, (size_t)(sv_tag_bad_byte(tags[i]) - tags[i]));
        else if (strlen(tags[i]) > SV_TAG_MAX)
            rc = INVALID(err, "%s %s: the tag is longer than %d bytes", kind, tags[i], SV_TAG_MAX);
        else if (seen_insert(&seen, i) != SIZE_MAX)
            rc = INVALID(err, "duplicate %s tag %s", kind, tags[i]);
    }
    free(seen.slots);
    return rc;
}

/** Gathers the tags of one kind into a scratch array (strided access would be less clear). */
static int check_kind_tags(const char *kind, const void *base, size_t n, size_t stride,
                           size_t tag_off, sv_error *err)
{
    const char **tags = calloc(n > 0 ? n : 1, sizeof *tags);
    if (tags == NULL)
        return sv_error_set(err, -ENOMEM, "validating the spec: out of memory");
    for (size_t i = 0; i < n; i++)
        memcpy(&tags[i], (const char *)base + i * stride + tag_off, sizeof tags[i]);
    int rc = check_tags(kind, tags, n, err);
    free(tags);
    return rc;
}

static int check_all_tags(const sv_spec *spec, sv_error *err)
{
    int rc = check_kind_tags("inbound", spec->inbounds, spec->n_inbounds,
                             sizeof *spec->inbounds, offsetof(sv_inbound_spec, tag), err);
    if (rc == 0)
        rc = check_kind_tags("outbound", spec->outbounds, spec->n_outbounds,
                             sizeof *spec->outbounds, offsetof(sv_outbound_spec, tag), err);
    if (rc == 0)
        rc = check_kind_tags("user set", spec->user_sets, spec->n_user_sets,
                             sizeof *spec->user_sets, offsetof(sv_user_set, tag), err);
    return rc;
}

/* ----------------------------------------------------------------------------------------- */
/* 2. References                                                                             */
/* ----------------------------------------------------------------------------------------- */

static bool has_outbound(const sv_spec *spec, const char *tag)
{
    for (size_t i = 0; i < spec->n_outbounds; i++)
        if (strcmp(spec->outbounds[i].tag, tag) == 0)
            return true;
    return false;
}

static bool has_inbound(const sv_spec *spec, const char *tag)
{
    for (size_t i = 0; i < spec->n_inbounds; i++)
        if (strcmp(spec->inbounds[i].tag, tag) == 0)
            return true;
    return false;
}

static int check_rule_refs(const sv_spec *spec, size_t r, sv_error *err)
{
    const sv_route_rule *rule = &spec->route.rules[r];
    if (is_empty(rule->outbound))
        return INVALID(err, "route: rule %zu has no outbound", r);
    if (!has_outbound(spec, rule->outbound))
        return INVALID(err, "route references unknown outbound %s", rule->outbound);
    for (size_t i = 0; i < rule->n_inbounds; i++) {
        if (is_empty(rule->inbounds[i]))
            return INVALID(err, "route: rule %zu lists an empty inbound tag", r);
        if (!has_inbound(spec, rule->inbounds[i]))
            return INVALID(err, "route references unknown inbound %s", rule->inbounds[i]);
    }
    return 0;
}

static int check_references(const sv_spec *spec, sv_error *err)
{
    for (size_t i = 0; i < spec->n_inbounds; i++) {
        const sv_inbound_spec *in = &spec->inbounds[i];
        if (!is_empty(in->users) && sv_spec_user_set(spec, in->users) == NULL)
            return INVALID(err, "inbound %s references unknown user set %s", in->tag, in->users);
    }
    for (size_t r = 0; r < spec->route.n_rules; r++) {
        int rc = check_rule_refs(spec, r, err);
        if (rc < 0)
            return rc;
    }
    const char *def = spec->route.default_outbound;
    if (is_empty(def))
        return INVALID(err, "route: there is no default outbound");
    if (!has_outbound(spec, def))
        return INVALID(err, "route references unknown outbound %s", def);
    return 0;
}

/* ----------------------------------------------------------------------------------------- */
/* 3. Per-resource rules: inbounds                                                           */
/* ----------------------------------------------------------------------------------------- */

/** A parsed bind address. */
typedef struct ip_addr {
    int family;
    uint8_t bytes[16];
} ip_addr;

static bool parse_ip(const char *text, ip_addr *out)
{
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, text, out->bytes) == 1) {
        out->family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, text, out->bytes) == 1) {
        out->family = AF_INET6;
        return true;
    }
    return false;
}

static bool ip_is_any(const ip_addr *a)
{
    static const uint8_t zero[16];
    return memcmp(a->bytes, zero, sizeof zero) == 0;
}

static bool ip_equal(const ip_addr *a, const ip_addr *b)
{
    return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

/**
 * Would listeners on @p a and @p b (same port) take each other's connections? Equal addresses do;
 * a wildcard covers its family, and "::" is treated as dual-stack (covers IPv4 too).
 */
static bool ip_overlap(const ip_addr *a, const ip_addr *b)
{
    if (ip_equal(a, b))
        return true;
    if (ip_is_any(a) && (a->family == b->family || a->family == AF_INET6))
        return true;
    return ip_is_any(b) && (b->family == a->family || b->family == AF_INET6);
}

/** Bind of inbound @p i against every earlier inbound (their addresses already parsed fine). */
static int check_bind_overlap(const sv_spec *spec, size_t i, const ip_addr *addr, sv_error *err)
{
    const sv_inbound_spec *in = &spec->inbounds[i];
    for (size_t j = 0; j < i; j++) {
        const sv_inbound_spec *other = &spec->inbounds[j];
        ip_addr o;
        if (other->bind.port != in->bind.port || !parse_ip(other->bind.address, &o))
            continue;
        if (!ip_overlap(addr, &o))
            continue;
        char mine[80], theirs[80];
        sv_bind_format(&in->bind, mine, sizeof mine);
        sv_bind_format(&other->bind, theirs, sizeof theirs);
        if (ip_equal(addr, &o))
            return INVALID(err, "inbound %s: bind %s is already used by inbound %s", in->tag,
                           mine, other->tag);
        return INVALID(err, "inbound %s: bind %s overlaps bind %s of inbound %s", in->tag, mine,
                       theirs, other->tag);
    }
    return 0;
}

static bool cipher_known(enum sv_ss_cipher c)
{
    return c == SV_SS_AES_128_GCM || c == SV_SS_AES_256_GCM || c == SV_SS_CHACHA20_POLY1305;
}

/* WebSocket settings (PROTOCOLS.md §8.1): a path that starts with '/', printable
 * ASCII without spaces, and an optional Host of the same kind, each at most
 * SV_INBOUND_WS_TEXT_MAX bytes. */
static bool ws_text_ok(const char *s)
{
    size_t n = strlen(s);
    if (n > SV_INBOUND_WS_TEXT_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

static int check_ws(const sv_inbound_spec *in, sv_error *err)
{
    if (in->ws.mux && (in->protocol != SV_INBOUND_SHADOWSOCKS || in->ws.path == NULL))
        return INVALID(err, "inbound %s: ws mux (Shadowsocks over Mux.Cool) needs a shadowsocks "
                       "inbound with a ws path", in->tag);
    if (in->ws.path == NULL) {
        if (in->ws.host != NULL)
            return INVALID(err, "inbound %s: ws host needs a ws path", in->tag);
        if (in->ws.httpupgrade)
            return INVALID(err, "inbound %s: httpupgrade needs a ws path", in->tag);
        return 0;
    }
    if (in->ws.path[0] != '/' || !ws_text_ok(in->ws.path))
        return INVALID(err, "inbound %s: ws path \"%.64s\" must start with '/' and be at most "
                       "%u printable characters without spaces", in->tag, in->ws.path,
                       SV_INBOUND_WS_TEXT_MAX);
    if (in->ws.host != NULL && (in->ws.host[0] == '\0' || !ws_text_ok(in->ws.host)))
        return INVALID(err, "inbound %s: ws host \"%.64s\" must be a host name of at most %u "
                       "printable characters", in->tag, in->ws.host, SV_INBOUND_WS_TEXT_MAX);
    return 0;
}

/* gRPC (PROTOCOLS-2.md §3): a service name of printable characters without spaces
 * (a custom path starts with '/'), not together with WebSocket. */
static int check_grpc(const sv_inbound_spec *in, sv_error *err)
{
    const char *s = in->grpc.service_name;
    if (s == NULL)
        return 0;
    if (in->ws.path != NULL)
        return INVALID(err, "inbound %s: grpc and ws cannot both carry one inbound", in->tag);
    size_t n = strlen(s);
    bool ok = n > 0 && n <= SV_GRPC_SERVICE_NAME_MAX && (s[0] != '/' || (n > 1 && s[n - 1] != '/'));
    for (size_t i = 0; ok && i < n; i++)
        ok = s[i] > ' ' && s[i] < 0x7f;
    if (!ok)
        return INVALID(err, "inbound %s: grpc service_name \"%.64s\" must be 1 to %u printable "
                       "characters without spaces", in->tag, s, SV_GRPC_SERVICE_NAME_MAX);
    return 0;
}

/* The inbounds whose protocol runs inside a stream: a user set, UDP only inside
 * the stream, a certificate (required when @p tls_required, else optional), WebSocket settings
 * as check_ws, and a fallback that parses as HOST:PORT where @p fallback_served, else none.
 * @p name is the protocol's name in the error texts. */
static int check_stream_inbound(const sv_inbound_spec *in, const char *name, bool tls_required,
                                bool fallback_served, sv_error *err)
{
    if (is_empty(in->users))
        return INVALID(err, "inbound %s: a %s inbound needs a user set", in->tag, name);
    if (in->udp)
        return INVALID(err, "inbound %s: a %s inbound carries UDP inside its %sstream; "
                       "udp must be false", in->tag, name, tls_required ? "TLS " : "");
    if (in->tls.cert == SV_CERT_FILE && (is_empty(in->tls.cert_file) || is_empty(in->tls.key_file)))
        return INVALID(err, "inbound %s: cert mode file needs cert_file and key_file", in->tag);
    if (tls_required && in->tls.cert != SV_CERT_FILE && in->tls.cert != SV_CERT_SELF)
        return INVALID(err, "inbound %s: a %s inbound needs a TLS certificate (cert mode "
                       "file or self)", in->tag, name);
    if (in->tls.cert != SV_CERT_NONE && in->tls.cert != SV_CERT_FILE &&
        in->tls.cert != SV_CERT_SELF)
        return INVALID(err, "inbound %s: unknown cert mode", in->tag);
    int rc = check_ws(in, err);
    if (rc < 0)
        return rc;
    rc = check_grpc(in, err);
    if (rc < 0)
        return rc;
    sv_dest d;
    if (!fallback_served && in->fallback != NULL)
        return INVALID(err, "inbound %s: fallback is not served on a %s inbound", in->tag, name);
    if (in->fallback != NULL && sv_dest_parse_hostport(in->fallback, &d) != 0)
        return INVALID(err, "inbound %s: fallback \"%.64s\" is not HOST:PORT", in->tag,
                       in->fallback);
    return 0;
}

static int check_reality(const sv_inbound_spec *in, sv_error *err);

/* Trojan: over TLS, with an optional fallback, or over REALITY (PANEL.md
 * §1.4, tls 2). VLESS: TLS optional (the UUID travels in clear without it,
 * PROTOCOLS.md §5.4), optional fallback. VMess (PROTOCOLS.md §6): TLS optional, no
 * fallback. */
static int check_trojan(const sv_inbound_spec *in, sv_error *err)
{
    bool reality = in->reality.private_key != NULL;
    int rc = check_stream_inbound(in, "trojan", !reality, true, err);
    if (rc == 0 && reality)
        rc = check_reality(in, err);
    if (rc == 0 && in->reality.vision)
        return INVALID(err, "inbound %s: the vision flow is served on vless inbounds only",
                       in->tag);
    return rc;
}

/* Is every comma-separated item of @p list (NULL = none) @p ok? Empty items count when
 * @p allow_empty. */
static bool list_ok(const char *list, bool allow_empty, bool (*ok)(const char *p, size_t n))
{
    size_t count = 0;
    for (const char *p = list; p != NULL; count++) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if ((n == 0 && !allow_empty) || (n > 0 && !ok(p, n)) || count == 16)
            return false;
        p = end != NULL ? end + 1 : NULL;
    }
    return true;
}

static bool short_id_ok(const char *p, size_t n)
{
    return n <= 16 && n % 2 == 0 && strspn(p, "0123456789abcdefABCDEF") >= n;
}

static bool name_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] <= ' ' || p[i] >= 0x7f)
            return false;
    return n <= 253;
}

/* REALITY (PROTOCOLS-2.md §1.1): a base64url X25519 key of 32 bytes, short ids of at
 * most 16 hex digits (even count), at least one server name, the target as the fallback, xver
 * 0..2, client versions of 24 bits (min not above max); on TCP or under gRPC (§1.6: HTTP/2 with
 * prior knowledge), not with a certificate or WebSocket. */
static int check_reality(const sv_inbound_spec *in, sv_error *err)
{
    const sv_inbound_reality *r = &in->reality;
    const char *k = r->private_key;
    size_t klen = strlen(k);
    if ((klen != 43 && !(klen == 44 && k[43] == '=')) ||
        strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != 43)
        return INVALID(err, "inbound %s: reality private_key must be 32 bytes in base64url",
                       in->tag);
    /* 42 'A's and a last digit whose 4 data bits are 0: 32 zero bytes */
    if (strspn(k, "A") >= 42 && strchr("ABCD", k[42]) != NULL)
        return INVALID(err, "inbound %s: reality private_key is all zeros, a key anyone can "
                       "derive the shared secrets of (make one with `xray x25519`)", in->tag);
    if (!list_ok(r->short_ids, true, short_id_ok))
        return INVALID(err, "inbound %s: reality short_ids \"%.64s\" must be at most 16 hex "
                       "ids of at most 16 digits (an even count)", in->tag, r->short_ids);
    if (is_empty(r->server_names) || !list_ok(r->server_names, false, name_ok))
        return INVALID(err, "inbound %s: reality server_names must be 1 to 16 names",
                       in->tag);
    if (in->fallback == NULL)
        return INVALID(err, "inbound %s: reality needs its target as the fallback (HOST:PORT)",
                       in->tag);
    if (in->tls.cert != SV_CERT_NONE || in->ws.path != NULL)
        return INVALID(err, "inbound %s: reality is served on TCP or under gRPC (no cert or "
                       "WebSocket)", in->tag);
    if (r->xver > 2)
        return INVALID(err, "inbound %s: reality xver %u: expected 0, 1 or 2 (the PROXY "
                       "protocol version)", in->tag, (unsigned)r->xver);
    if (r->min_client_ver > 0xffffff || r->max_client_ver > 0xffffff ||
        (r->max_client_ver != 0 && r->min_client_ver > r->max_client_ver))
        return INVALID(err, "inbound %s: reality client versions must be 24-bit x.y.z values, "
                       "the minimum not above the maximum", in->tag);
    return 0;
}

static int check_vless(const sv_inbound_spec *in, sv_error *err)
{
    int rc = check_stream_inbound(in, "vless", false, true, err);
    if (rc == 0 && in->reality.private_key != NULL)
        rc = check_reality(in, err);
    bool outer_tls = in->reality.private_key != NULL || in->tls.cert != SV_CERT_NONE;
    if (rc == 0 && in->reality.vision &&
        (!outer_tls || in->grpc.service_name != NULL || in->ws.path != NULL))
        return INVALID(err, "inbound %s: the vision flow is served directly on reality or tls "
                       "over TCP only (PROTOCOLS-2.md §2.1)", in->tag);
    return rc;
}

static int check_vmess(const sv_inbound_spec *in, sv_error *err)
{
    return check_stream_inbound(in, "vmess", false, false, err);
}

/* SOCKS5, HTTP proxy and mixed (PROTOCOLS-3.md §4): a user set, TLS optional, on TCP only
 * (no WebSocket, gRPC or fallback). */
static int check_proxy(const sv_inbound_spec *in, sv_error *err)
{
    static const char *const names[] = {
        [SV_INBOUND_SOCKS] = "socks", [SV_INBOUND_HTTP] = "http", [SV_INBOUND_MIXED] = "mixed"};
    const char *name = names[in->protocol];
    if (in->ws.path != NULL || in->grpc.service_name != NULL)
        return INVALID(err, "inbound %s: a %s inbound is served on TCP or TLS only (no "
                       "WebSocket, HTTPUpgrade or gRPC)", in->tag, name);
    return check_stream_inbound(in, name, false, false, err);
}

/* AnyTLS (PROTOCOLS-3.md §3): over TLS, on TCP, with an optional fallback (§3.7). */
static int check_anytls(const sv_inbound_spec *in, sv_error *err)
{
    if (in->ws.path != NULL || in->grpc.service_name != NULL)
        return INVALID(err, "inbound %s: an anytls inbound is served on TLS over TCP only (no "
                       "WebSocket, HTTPUpgrade or gRPC)", in->tag);
    return check_stream_inbound(in, "anytls", true, true, err);
}

/* Shadowsocks: a known cipher and a user set; TCP inside WebSocket (check_ws) as the SIP003
 * v2ray-plugin serves it, over TLS only then; no fallback. */
static int check_shadowsocks(const sv_inbound_spec *in, sv_error *err)
{
    if (in->grpc.service_name != NULL)
        return INVALID(err, "inbound %s: grpc is not served on a shadowsocks inbound", in->tag);
    if (in->fallback != NULL)
        return INVALID(err, "inbound %s: fallback is not served on a shadowsocks inbound",
                       in->tag);
    if (in->tls.cert != SV_CERT_NONE && in->ws.path == NULL)
        return INVALID(err, "inbound %s: TLS on a shadowsocks inbound needs a ws path (the "
                       "v2ray-plugin's WebSocket over TLS)", in->tag);
    if (in->tls.cert == SV_CERT_FILE && (is_empty(in->tls.cert_file) || is_empty(in->tls.key_file)))
        return INVALID(err, "inbound %s: cert mode file needs cert_file and key_file", in->tag);
    if (in->tls.cert != SV_CERT_NONE && in->tls.cert != SV_CERT_FILE &&
        in->tls.cert != SV_CERT_SELF)
        return INVALID(err, "inbound %s: unknown cert mode", in->tag);
    int rc = check_ws(in, err);
    if (rc < 0)
        return rc;
    if (in->ws.httpupgrade)
        return INVALID(err, "inbound %s: httpupgrade is not served on a shadowsocks inbound "
                       "(WebSocket only)", in->tag);
    if (!cipher_known(in->ss_cipher))
        return INVALID(err, "inbound %s: unknown cipher", in->tag);
    if (is_empty(in->users))
        return INVALID(err, "inbound %s: a shadowsocks inbound needs a user set", in->tag);
    return 0;
}

/* Shadowsocks 2022 (PROTOCOLS.md §3): a 2022 method, a user set, and
 * a server key (base64 of the method's key length) unless the inbound has one user. */
static size_t ss2022_key_len(enum sv_ss_cipher c)
{
    return c == SV_SS_2022_AES_128_GCM ? 16
           : c == SV_SS_2022_AES_256_GCM || c == SV_SS_2022_CHACHA20_POLY1305 ? 32
                                                                              : 0;
}

/* Standard base64 of @p k bytes, padded: its length and alphabet (the core decodes it). */
static bool base64_of(const char *s, size_t k)
{
    size_t len = strlen(s), pad = (3 - k % 3) % 3;
    if (len != (k + 2) / 3 * 4)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        bool alnum = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        if (!alnum && ch != '+' && ch != '/' && !(ch == '=' && i >= len - pad))
            return false;
    }
    return true;
}

static int check_ss2022(const sv_inbound_spec *in, sv_error *err)
{
    size_t k = ss2022_key_len(in->ss_cipher);
    if (in->grpc.service_name != NULL)
        return INVALID(err, "inbound %s: grpc is not served on a shadowsocks-2022 inbound",
                       in->tag);
    if (in->tls.cert != SV_CERT_NONE || in->fallback != NULL || in->ws.path != NULL ||
        in->ws.host != NULL || in->ws.httpupgrade || in->ws.mux)
        return INVALID(err, "inbound %s: TLS, WebSocket and fallback are not served on a "
                       "shadowsocks-2022 inbound", in->tag);
    if (k == 0)
        return INVALID(err, "inbound %s: a shadowsocks-2022 inbound needs a 2022-blake3 cipher",
                       in->tag);
    if (is_empty(in->users))
        return INVALID(err, "inbound %s: a shadowsocks-2022 inbound needs a user set", in->tag);
    if (in->ss_server_key != NULL && in->ss_cipher == SV_SS_2022_CHACHA20_POLY1305)
        return INVALID(err, "inbound %s: server_key: 2022-blake3-chacha20-poly1305 has no "
                       "identity headers (single user only)", in->tag);
    if (in->ss_server_key != NULL && !base64_of(in->ss_server_key, k))
        return INVALID(err, "inbound %s: server_key is not the standard base64 of %zu bytes",
                       in->tag, k);
    return 0;
}

static int check_inbound(const sv_spec *spec, size_t i, sv_error *err)
{
    const sv_inbound_spec *in = &spec->inbounds[i];
    ip_addr addr;
    if (is_empty(in->bind.address))
        return INVALID(err, "inbound %s: the bind address must not be empty", in->tag);
    if (!parse_ip(in->bind.address, &addr))
        return INVALID(err, "inbound %s: address %s is not an IP address", in->tag,
                       in->bind.address);
    if (in->bind.port == 0)
        return INVALID(err, "inbound %s: port must be between 1 and 65535", in->tag);
    int rc = check_bind_overlap(spec, i, &addr, err);
    if (rc < 0)
        return rc;
    if (in->protocol != SV_INBOUND_VLESS && in->protocol != SV_INBOUND_TROJAN &&
        in->reality.private_key != NULL)
        return INVALID(err, "inbound %s: reality is served on vless and trojan inbounds only",
                       in->tag);
    if (in->protocol == SV_INBOUND_TROJAN)
        return check_trojan(in, err);
    if (in->protocol == SV_INBOUND_VLESS)
        return check_vless(in, err);
    if (in->protocol == SV_INBOUND_VMESS)
        return check_vmess(in, err);
    if (in->protocol == SV_INBOUND_SS2022)
        return check_ss2022(in, err);
    bool proxy = in->protocol == SV_INBOUND_SOCKS || in->protocol == SV_INBOUND_HTTP ||
                 in->protocol == SV_INBOUND_MIXED;
    if (in->proxy_no_auth && !proxy)
        return INVALID(err, "inbound %s: no_auth applies to socks, http and mixed inbounds only",
                       in->tag);
    if (proxy)
        return check_proxy(in, err);
    if (in->anytls_padding_scheme != NULL && in->protocol != SV_INBOUND_ANYTLS)
        return INVALID(err, "inbound %s: a padding scheme applies to anytls inbounds only",
                       in->tag);
    if (in->protocol == SV_INBOUND_ANYTLS)
        return check_anytls(in, err);
    if (in->protocol != SV_INBOUND_SHADOWSOCKS)
        return INVALID(err, "inbound %s: unknown protocol", in->tag);
    return check_shadowsocks(in, err);
}

/* ----------------------------------------------------------------------------------------- */
/* 3. Per-resource rules: outbounds, user sets                                               */
/* ----------------------------------------------------------------------------------------- */

/* Linux's dev_valid_name: 1..15 bytes, not "." or "..", no '/', ':' or white space. */
static bool ifname_valid(const char *name)
{
    size_t n = strnlen(name, SV_IFNAME_MAX);
    if (n == 0 || n >= SV_IFNAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '/' || name[i] == ':' || name[i] <= ' ' || name[i] == 0x7f)
            return false;
    return true;
}

/* what can be told without the host (prepare checks the host:
 * sv_socket_policy_check). */
static int check_socket_policy(const sv_outbound_spec *out, sv_error *err)
{
    const sv_socket_policy *p = &out->socket;
    static const sv_socket_policy none;
    if (out->kind != SV_OUTBOUND_DIRECT) {
        if (!sv_socket_policy_equal(p, &none))
            return INVALID(err, "outbound %s: a socket policy needs a direct outbound", out->tag);
        return 0;
    }
    if (p->interface[0] != '\0' && !ifname_valid(p->interface))
        return INVALID(err, "outbound %s: interface \"%.*s\" is not a valid interface name",
                       out->tag, SV_IFNAME_MAX, p->interface);
    if (p->keepalive_idle_s > SV_KEEPALIVE_IDLE_MAX ||
        p->keepalive_interval_s > SV_KEEPALIVE_IDLE_MAX)
        return INVALID(err, "outbound %s: keepalive idle and interval are at most %u seconds",
                       out->tag, SV_KEEPALIVE_IDLE_MAX);
    if (p->keepalive_count > SV_KEEPALIVE_COUNT_MAX)
        return INVALID(err, "outbound %s: keepalive count is at most %u", out->tag,
                       SV_KEEPALIVE_COUNT_MAX);
    if (p->keepalive_idle_s == 0 && (p->keepalive_interval_s != 0 || p->keepalive_count != 0))
        return INVALID(err, "outbound %s: keepalive interval and count need an idle time",
                       out->tag);
    return 0;
}

static int check_outbound(const sv_outbound_spec *out, sv_error *err)
{
    if (out->kind != SV_OUTBOUND_DIRECT && out->kind != SV_OUTBOUND_BLACKHOLE)
        return INVALID(err, "outbound %s: unknown kind", out->tag);
    return check_socket_policy(out, err);
}

static int check_user(const sv_user_set *set, const sv_user *u, sv_error *err)
{
    if (is_empty(u->secret))
        return INVALID(err, "user set %s: user %" PRIu64 " has an empty secret", set->tag, u->id);
    if (strlen(u->secret) > SV_SECRET_MAX)
        return INVALID(err, "user set %s: user %" PRIu64 " has a secret longer than %d bytes",
                       set->tag, u->id, SV_SECRET_MAX);
    return 0;
}

static int check_user_set(const sv_user_set *set, sv_error *err)
{
    if (set->n_users > SV_USERS_MAX)
        return INVALID(err, "user set %s: more than %d users", set->tag, SV_USERS_MAX);
    seen_set seen, secrets;
    int rc = seen_init(&seen, set->n_users, set, user_hash, user_eq);
    if (rc == 0 && (rc = seen_init(&secrets, set->n_users, set, secret_hash, secret_eq)) < 0)
        free(seen.slots);
    if (rc < 0)
        return sv_error_set(err, -ENOMEM, "validating the spec: out of memory");
    for (size_t i = 0; i < set->n_users && rc == 0; i++) {
        size_t other = SIZE_MAX;
        if (seen_insert(&seen, i) != SIZE_MAX)
            rc = INVALID(err, "user set %s: duplicate user %" PRIu64, set->tag, set->users[i].id);
        else if ((rc = check_user(set, &set->users[i], err)) == 0 &&
                 (other = seen_insert(&secrets, i)) != SIZE_MAX) /* one key, two users (#15) */
            rc = INVALID(err, "user set %s: users %" PRIu64 " and %" PRIu64 " have the same "
                         "secret", set->tag, set->users[other].id, set->users[i].id);
    }
    free(seen.slots);
    free(secrets.slots);
    return rc;
}

/* ----------------------------------------------------------------------------------------- */
/* 3. Per-resource rules: route                                                              */
/* ----------------------------------------------------------------------------------------- */

static int check_cidr(const sv_cidr *c, size_t r, size_t m, sv_error *err)
{
    unsigned max;
    if (c->family == AF_INET)
        max = 32;
    else if (c->family == AF_INET6)
        max = 128;
    else
        return INVALID(err, "route: rule %zu matcher %zu: the CIDR is neither IPv4 nor IPv6", r,
                       m);
    if (c->prefix > max)
        return INVALID(err, "route: rule %zu matcher %zu: prefix /%u is longer than %u bits", r,
                       m, (unsigned)c->prefix, max);
    return 0;
}

/** A regex matcher's text must compile with PCRE2 (the router compiles it the same way). */
static int check_regex(const char *text, size_t r, size_t m, sv_error *err)
{
    if (is_empty(text))
        return INVALID(err, "route: rule %zu matcher %zu has no text", r, m);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS,
                                   &code, &off, NULL);
    if (re) {
        pcre2_code_free(re);
        return 0;
    }
    PCRE2_UCHAR msg[128];
    if (pcre2_get_error_message(code, msg, sizeof msg) < 0)
        strcpy((char *)msg, "unknown error");
    return INVALID(err, "route: rule %zu matcher %zu: invalid regex at offset %zu: %s", r, m,
                   (size_t)off, (const char *)msg);
}

static int check_matcher(const sv_route_match *mt, size_t r, size_t m, sv_error *err)
{
    switch (mt->kind) {
    case SV_MATCH_DOMAIN:
    case SV_MATCH_DOMAIN_SUFFIX:
    case SV_MATCH_DOMAIN_KEYWORD:
    case SV_MATCH_INBOUND:
        if (is_empty(mt->text))
            return INVALID(err, "route: rule %zu matcher %zu has no text", r, m);
        return 0;
    case SV_MATCH_CIDR:
    case SV_MATCH_SOURCE_CIDR:
        return check_cidr(&mt->cidr, r, m, err);
    case SV_MATCH_PORT:
        if (mt->port_lo > mt->port_hi)
            return INVALID(err, "route: rule %zu matcher %zu: port range %u-%u is inverted", r, m,
                           (unsigned)mt->port_lo, (unsigned)mt->port_hi);
        return 0;
    case SV_MATCH_NETWORK:
        if (mt->network != SV_NET_TCP && mt->network != SV_NET_UDP)
            return INVALID(err, "route: rule %zu matcher %zu: unknown network", r, m);
        return 0;
    case SV_MATCH_REGEX:
        return check_regex(mt->text, r, m, err);
    }
    return INVALID(err, "route: rule %zu matcher %zu: unknown matcher kind", r, m);
}

static int check_route(const sv_route_spec *route, sv_error *err)
{
    if (route->n_rules > SV_RULES_MAX)
        return INVALID(err, "route: more than %d rules", SV_RULES_MAX);
    for (size_t r = 0; r < route->n_rules; r++) {
        const sv_route_rule *rule = &route->rules[r];
        if (rule->n_matchers == 0)
            return INVALID(err, "route: rule %zu has no matchers", r);
        if (rule->n_matchers > SV_MATCHERS_MAX)
            return INVALID(err, "route: rule %zu has more than %d matchers", r, SV_MATCHERS_MAX);
        if (rule->dns_server != NULL && !sv_dns_server_valid(rule->dns_server))
            return INVALID(err, "route: rule %zu: dns server \"%.64s\" is not \"ip\", "
                           "\"ipv4:port\" or \"[ipv6]:port\"", r, rule->dns_server);
        for (size_t m = 0; m < rule->n_matchers; m++) {
            int rc = check_matcher(&rule->matchers[m], r, m, err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------------------------------- */

/* A removal or drain policy (seed 001 "policies") of @p owner ("policies", "inbound x",
 * "outbound y"): a known kind; CloseAfter with a grace of 1 ms .. SV_POLICY_GRACE_MAX_MS. */
static int check_policy(const sv_policy *p, const char *owner, const char *what, sv_error *err)
{
    switch (p->kind) {
    case SV_POLICY_DEFAULT:
    case SV_POLICY_KEEP:
    case SV_POLICY_CLOSE:
        return 0;
    case SV_POLICY_CLOSE_AFTER:
        if (p->grace_ms == 0 || p->grace_ms > SV_POLICY_GRACE_MAX_MS)
            return INVALID(err, "%s: %s policy close_after: grace must be 1 ms to %u s", owner,
                           what, SV_POLICY_GRACE_MAX_MS / 1000u);
        return 0;
    }
    return INVALID(err, "%s: unknown %s policy", owner, what);
}

static int check_resources(const sv_spec *spec, sv_error *err)
{
    int rc = 0;
    for (size_t i = 0; i < spec->n_inbounds && rc == 0; i++)
        rc = check_inbound(spec, i, err);
    for (size_t i = 0; i < spec->n_outbounds && rc == 0; i++)
        rc = check_outbound(&spec->outbounds[i], err);
    for (size_t i = 0; i < spec->n_user_sets && rc == 0; i++)
        rc = check_user_set(&spec->user_sets[i], err);
    if (rc == 0)
        rc = check_route(&spec->route, err);
    if (rc == 0)
        rc = check_policy(&spec->user_removal, "policies", "user removal", err);
    if (rc == 0)
        rc = check_policy(&spec->drain, "policies", "drain", err);
    char owner[SV_TAG_MAX + 16];
    for (size_t i = 0; i < spec->n_inbounds && rc == 0; i++) {
        snprintf(owner, sizeof owner, "inbound %s", spec->inbounds[i].tag);
        rc = check_policy(&spec->inbounds[i].user_removal, owner, "user removal", err);
    }
    for (size_t i = 0; i < spec->n_outbounds && rc == 0; i++) {
        snprintf(owner, sizeof owner, "outbound %s", spec->outbounds[i].tag);
        rc = check_policy(&spec->outbounds[i].drain, owner, "drain", err);
    }
    return rc;
}

int sv_validate(const sv_spec *spec, sv_error *err)
{
    if (spec == NULL)
        return INVALID(err, "spec: missing");
    int rc = check_all_tags(spec, err);
    if (rc == 0)
        rc = check_references(spec, err);
    if (rc == 0)
        rc = check_resources(spec, err);
    if (rc == 0 && err != NULL) {
        err->code = 0;
        err->msg[0] = '\0';
    }
    return rc;
}
