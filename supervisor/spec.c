/*
 * Spec helpers (supervisor.h, plan.h): free, deep copy, lookup, field-by-field equality (the
 * planner's reuse criterion, seed 001 "compare typed specs with =="), bind text, report free.
 * Optional strings: NULL and "" mean the same thing everywhere here.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/plan.h"
#include "supervisor/supervisor.h"

/* ----------------------------------------------------------------------------------------- */
/* Free                                                                                      */
/* ----------------------------------------------------------------------------------------- */

void sv_user_set_free(sv_user_set *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; set->strings == NULL && i < set->n_users; i++) {
        free(set->users[i].label);
        free(set->users[i].secret);
    }
    free(set->strings);
    free(set->users);
    free(set->tag);
    memset(set, 0, sizeof *set);
}

static void inbound_free(sv_inbound_spec *in)
{
    free(in->tag);
    free(in->bind.address);
    free(in->users);
    free(in->tls.cert_file);
    free(in->tls.key_file);
    free(in->tls.server_name);
    free(in->fallback);
    free(in->ws.path);
    free(in->ws.host);
    free(in->grpc.service_name);
    free(in->ss_server_key);
    free(in->anytls_padding_scheme);
    free(in->reality.private_key);
    free(in->reality.short_ids);
    free(in->reality.server_names);
}

void sv_route_rule_free(sv_route_rule *r)
{
    for (size_t i = 0; i < r->n_matchers; i++)
        free(r->matchers[i].text);
    free(r->matchers);
    for (size_t i = 0; i < r->n_inbounds; i++)
        free(r->inbounds[i]);
    free(r->inbounds);
    free(r->outbound);
    free(r->dns_server);
    memset(r, 0, sizeof *r);
}

static void route_free(sv_route_spec *route)
{
    for (size_t i = 0; i < route->n_rules; i++)
        sv_route_rule_free(&route->rules[i]);
    free(route->rules);
    free(route->default_outbound);
}

void sv_spec_free(sv_spec *spec)
{
    if (spec == NULL)
        return;
    for (size_t i = 0; i < spec->n_inbounds; i++)
        inbound_free(&spec->inbounds[i]);
    free(spec->inbounds);
    for (size_t i = 0; i < spec->n_outbounds; i++)
        free(spec->outbounds[i].tag);
    free(spec->outbounds);
    for (size_t i = 0; i < spec->n_user_sets; i++)
        sv_user_set_free(&spec->user_sets[i]);
    free(spec->user_sets);
    route_free(&spec->route);
    memset(spec, 0, sizeof *spec);
}

/* ----------------------------------------------------------------------------------------- */
/* Clone. Each helper fills a zeroed destination; on failure what it already copied stays in   */
/* the destination, so the caller's single sv_spec_free() releases it.                        */
/* ----------------------------------------------------------------------------------------- */

/** Copy an optional string: NULL stays NULL. */
static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    if (src == NULL)
        return 0;
    *dst = strdup(src);
    return *dst == NULL ? -ENOMEM : 0;
}

/** calloc of @p n elements; 0 elements is "no array" (NULL). Check failure with alloc_failed(). */
static void *alloc_array(size_t n, size_t size)
{
    return n == 0 ? NULL : calloc(n, size);
}

static bool alloc_failed(const void *p, size_t n)
{
    return n > 0 && p == NULL;
}

/* Append @p src (may be NULL) to @p *at and point @p dst at the copy. */
static void pack_opt(char **dst, const char *src, char **at)
{
    if (src == NULL) {
        *dst = NULL;
        return;
    }
    size_t len = strlen(src) + 1;
    *dst = memcpy(*at, src, len);
    *at += len;
}

/* The users of @p src into @p dst, their labels and secrets packed into dst->strings. */
static int users_clone(sv_user_set *dst, const sv_user_set *src)
{
    size_t bytes = 0;
    for (size_t i = 0; i < src->n_users; i++) {
        const sv_user *s = &src->users[i];
        bytes += (s->label != NULL ? strlen(s->label) + 1 : 0) +
                 (s->secret != NULL ? strlen(s->secret) + 1 : 0);
    }
    dst->users = alloc_array(src->n_users, sizeof *dst->users);
    if (alloc_failed(dst->users, src->n_users))
        return -ENOMEM;
    if (bytes > 0 && (dst->strings = malloc(bytes)) == NULL)
        return -ENOMEM;
    dst->n_users = src->n_users;
    char *at = dst->strings;
    for (size_t i = 0; i < src->n_users; i++) {
        const sv_user *s = &src->users[i];
        sv_user *d = &dst->users[i];
        *d = *s;
        pack_opt(&d->label, s->label, &at);
        pack_opt(&d->secret, s->secret, &at);
    }
    return 0;
}

int sv_user_set_clone(sv_user_set *dst, const sv_user_set *src)
{
    memset(dst, 0, sizeof *dst);
    int rc = dup_opt(&dst->tag, src->tag);
    if (rc == 0)
        rc = users_clone(dst, src);
    if (rc < 0)
        sv_user_set_free(dst);
    return rc;
}

static int inbound_clone(sv_inbound_spec *d, const sv_inbound_spec *s)
{
    *d = *s;
    d->tag = NULL;
    d->bind.address = NULL;
    d->users = NULL;
    d->tls.cert_file = d->tls.key_file = d->tls.server_name = d->fallback = NULL;
    d->ws.path = d->ws.host = NULL;
    d->grpc.service_name = NULL;
    d->ss_server_key = NULL;
    d->anytls_padding_scheme = NULL;
    d->reality.private_key = d->reality.short_ids = d->reality.server_names = NULL;
    if (dup_opt(&d->reality.private_key, s->reality.private_key) < 0 ||
        dup_opt(&d->reality.short_ids, s->reality.short_ids) < 0 ||
        dup_opt(&d->reality.server_names, s->reality.server_names) < 0)
        return -ENOMEM;
    if (dup_opt(&d->tag, s->tag) < 0 || dup_opt(&d->bind.address, s->bind.address) < 0 ||
        dup_opt(&d->users, s->users) < 0 || dup_opt(&d->tls.cert_file, s->tls.cert_file) < 0 ||
        dup_opt(&d->tls.key_file, s->tls.key_file) < 0 ||
        dup_opt(&d->tls.server_name, s->tls.server_name) < 0 ||
        dup_opt(&d->fallback, s->fallback) < 0 || dup_opt(&d->ws.path, s->ws.path) < 0 ||
        dup_opt(&d->ws.host, s->ws.host) < 0 ||
        dup_opt(&d->grpc.service_name, s->grpc.service_name) < 0 ||
        dup_opt(&d->ss_server_key, s->ss_server_key) < 0 ||
        dup_opt(&d->anytls_padding_scheme, s->anytls_padding_scheme) < 0)
        return -ENOMEM;
    return 0;
}

static int rule_clone(sv_route_rule *d, const sv_route_rule *s)
{
    memset(d, 0, sizeof *d);
    d->audit = s->audit;
    d->audit_id = s->audit_id;
    if (dup_opt(&d->outbound, s->outbound) < 0 || dup_opt(&d->dns_server, s->dns_server) < 0)
        return -ENOMEM;
    d->matchers = alloc_array(s->n_matchers, sizeof *d->matchers);
    if (alloc_failed(d->matchers, s->n_matchers))
        return -ENOMEM;
    for (size_t i = 0; i < s->n_matchers; i++) {
        d->n_matchers = i + 1;
        d->matchers[i] = s->matchers[i];
        if (dup_opt(&d->matchers[i].text, s->matchers[i].text) < 0)
            return -ENOMEM;
    }
    d->inbounds = alloc_array(s->n_inbounds, sizeof *d->inbounds);
    if (alloc_failed(d->inbounds, s->n_inbounds))
        return -ENOMEM;
    for (size_t i = 0; i < s->n_inbounds; i++) {
        d->n_inbounds = i + 1;
        if (dup_opt(&d->inbounds[i], s->inbounds[i]) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int route_clone(sv_route_spec *d, const sv_route_spec *s)
{
    if (dup_opt(&d->default_outbound, s->default_outbound) < 0)
        return -ENOMEM;
    d->rules = alloc_array(s->n_rules, sizeof *d->rules);
    if (alloc_failed(d->rules, s->n_rules))
        return -ENOMEM;
    for (size_t i = 0; i < s->n_rules; i++) {
        d->n_rules = i + 1;
        if (rule_clone(&d->rules[i], &s->rules[i]) < 0)
            return -ENOMEM;
    }
    return 0;
}

static int spec_clone_parts(sv_spec *dst, const sv_spec *src)
{
    dst->inbounds = alloc_array(src->n_inbounds, sizeof *dst->inbounds);
    if (alloc_failed(dst->inbounds, src->n_inbounds))
        return -ENOMEM;
    for (size_t i = 0; i < src->n_inbounds; i++) {
        dst->n_inbounds = i + 1;
        if (inbound_clone(&dst->inbounds[i], &src->inbounds[i]) < 0)
            return -ENOMEM;
    }
    dst->outbounds = alloc_array(src->n_outbounds, sizeof *dst->outbounds);
    if (alloc_failed(dst->outbounds, src->n_outbounds))
        return -ENOMEM;
    for (size_t i = 0; i < src->n_outbounds; i++) {
        dst->n_outbounds = i + 1;
        dst->outbounds[i] = src->outbounds[i];
        if (dup_opt(&dst->outbounds[i].tag, src->outbounds[i].tag) < 0)
            return -ENOMEM;
    }
    dst->user_sets = alloc_array(src->n_user_sets, sizeof *dst->user_sets);
    if (alloc_failed(dst->user_sets, src->n_user_sets))
        return -ENOMEM;
    for (size_t i = 0; i < src->n_user_sets; i++) {
        dst->n_user_sets = i + 1;
        if (sv_user_set_clone(&dst->user_sets[i], &src->user_sets[i]) < 0)
            return -ENOMEM;
    }
    return route_clone(&dst->route, &src->route);
}

int sv_spec_clone(sv_spec *dst, const sv_spec *src)
{
    memset(dst, 0, sizeof *dst);
    dst->user_removal = src->user_removal;
    dst->drain = src->drain;
    int rc = spec_clone_parts(dst, src);
    if (rc < 0)
        sv_spec_free(dst);
    return rc;
}

/* ----------------------------------------------------------------------------------------- */
/* Lookup and equality                                                                       */
/* ----------------------------------------------------------------------------------------- */

/** Optional strings are equal when both are absent/empty or both hold the same bytes. */
static bool str_eq(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

const sv_user_set *sv_spec_user_set(const sv_spec *spec, const char *tag)
{
    if (spec == NULL || tag == NULL)
        return NULL;
    for (size_t i = 0; i < spec->n_user_sets; i++)
        if (str_eq(spec->user_sets[i].tag, tag))
            return &spec->user_sets[i];
    return NULL;
}

bool sv_cidr_equal(const sv_cidr *a, const sv_cidr *b)
{
    size_t len = a->family == AF_INET ? 4 : sizeof a->addr;
    return a->family == b->family && a->prefix == b->prefix &&
           memcmp(a->addr, b->addr, len) == 0;
}

bool sv_cidr_list_equal(const sv_cidr *a, size_t na, const sv_cidr *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!sv_cidr_equal(&a[i], &b[i]))
            return false;
    return true;
}

static bool forwarders_eq(const sv_inbound_spec *a, const sv_inbound_spec *b)
{
    return sv_cidr_list_equal(a->trusted_forwarders, a->n_trusted_forwarders,
                              b->trusted_forwarders, b->n_trusted_forwarders);
}

int sv_cidr_parse(const char *text, sv_cidr *out)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(text, '/');
    size_t hlen = slash != NULL ? (size_t)(slash - text) : strlen(text);
    if (hlen == 0 || hlen >= sizeof host)
        return -EINVAL; /* not an address */
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    sv_cidr c = {0};
    if (inet_pton(AF_INET, host, c.addr) == 1)
        c.family = AF_INET;
    else if (inet_pton(AF_INET6, host, c.addr) == 1)
        c.family = AF_INET6;
    else
        return -EINVAL; /* not an address */
    unsigned max = c.family == AF_INET ? 32 : 128, prefix = max;
    if (slash != NULL) { /* an address with a bad prefix: -ERANGE */
        const char *p = slash + 1;
        if (*p == '\0' || strlen(p) > 3)
            return -ERANGE;
        for (prefix = 0; *p != '\0'; p++) {
            if (*p < '0' || *p > '9')
                return -ERANGE;
            prefix = prefix * 10 + (unsigned)(*p - '0');
        }
        if (prefix > max)
            return -ERANGE;
    }
    c.prefix = (uint8_t)prefix;
    for (unsigned i = 0; i < max / 8; i++) { /* clear the host bits */
        unsigned bit0 = i * 8;
        if (bit0 >= prefix)
            c.addr[i] = 0;
        else if (bit0 + 8 > prefix)
            c.addr[i] &= (uint8_t)(0xff << (8 - (prefix - bit0)));
    }
    *out = c;
    return 0;
}

/* Does @p c hold the @p len-byte address @p a of family @p family? */
static bool cidr_has(const sv_cidr *c, int family, const uint8_t *a)
{
    if (c->family != family)
        return false;
    unsigned full = c->prefix / 8u, rest = c->prefix % 8u;
    if (memcmp(c->addr, a, full) != 0)
        return false;
    return rest == 0 || ((a[full] ^ c->addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool sv_cidr_list_has(const sv_cidr *v, size_t n, const struct sockaddr *sa)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    int family;
    const uint8_t *a;
    if (sa->sa_family == AF_INET) {
        family = AF_INET;
        a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        a = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        family = memcmp(a, mapped, sizeof mapped) == 0 ? AF_INET : AF_INET6;
        if (family == AF_INET)
            a += sizeof mapped;
    } else {
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (cidr_has(&v[i], family, a))
            return true;
    return false;
}

bool sv_inbound_spec_equal(const sv_inbound_spec *a, const sv_inbound_spec *b)
{
    return str_eq(a->tag, b->tag) && str_eq(a->bind.address, b->bind.address) &&
           a->bind.port == b->bind.port && a->udp == b->udp && a->protocol == b->protocol &&
           a->ss_cipher == b->ss_cipher && str_eq(a->users, b->users) &&
           a->allow_private == b->allow_private &&
           a->accept_proxy_protocol == b->accept_proxy_protocol && forwarders_eq(a, b) &&
           a->tls.cert == b->tls.cert &&
           str_eq(a->tls.cert_file, b->tls.cert_file) && str_eq(a->tls.key_file, b->tls.key_file) &&
           str_eq(a->tls.server_name, b->tls.server_name) && str_eq(a->fallback, b->fallback) &&
           str_eq(a->ws.path, b->ws.path) && str_eq(a->ws.host, b->ws.host) &&
           a->ws.httpupgrade == b->ws.httpupgrade &&
           a->ws.mux == b->ws.mux &&
           str_eq(a->grpc.service_name, b->grpc.service_name) &&
           str_eq(a->ss_server_key, b->ss_server_key) &&
           str_eq(a->anytls_padding_scheme, b->anytls_padding_scheme) &&
           str_eq(a->reality.private_key, b->reality.private_key) &&
           str_eq(a->reality.short_ids, b->reality.short_ids) &&
           str_eq(a->reality.server_names, b->reality.server_names) &&
           a->reality.max_time_diff_ms == b->reality.max_time_diff_ms &&
           a->reality.min_client_ver == b->reality.min_client_ver &&
           a->reality.max_client_ver == b->reality.max_client_ver &&
           a->reality.xver == b->reality.xver &&
           a->reality.vision == b->reality.vision && a->proxy_no_auth == b->proxy_no_auth;
}

sv_policy sv_removal_policy_of(const sv_spec *spec, const sv_inbound_spec *in)
{
    if (in != NULL && in->user_removal.kind != SV_POLICY_DEFAULT)
        return in->user_removal;
    if (spec != NULL && spec->user_removal.kind != SV_POLICY_DEFAULT)
        return spec->user_removal;
    return (sv_policy){.kind = SV_POLICY_CLOSE};
}

sv_policy sv_drain_policy_of(const sv_spec *spec, const sv_outbound_spec *out)
{
    if (out != NULL && out->drain.kind != SV_POLICY_DEFAULT)
        return out->drain;
    if (spec != NULL && spec->drain.kind != SV_POLICY_DEFAULT)
        return spec->drain;
    return (sv_policy){.kind = SV_POLICY_KEEP};
}

bool sv_socket_policy_equal(const sv_socket_policy *a, const sv_socket_policy *b)
{
    return a->has_addr4 == b->has_addr4 && a->has_addr6 == b->has_addr6 &&
           (!a->has_addr4 || memcmp(a->addr4, b->addr4, 4) == 0) &&
           (!a->has_addr6 || memcmp(a->addr6, b->addr6, 16) == 0) &&
           strcmp(a->interface, b->interface) == 0 && a->mark == b->mark &&
           a->keepalive_idle_s == b->keepalive_idle_s &&
           a->keepalive_interval_s == b->keepalive_interval_s &&
           a->keepalive_count == b->keepalive_count && a->nagle == b->nagle;
}

bool sv_outbound_spec_equal(const sv_outbound_spec *a, const sv_outbound_spec *b)
{
    return str_eq(a->tag, b->tag) && a->kind == b->kind &&
           sv_socket_policy_equal(&a->socket, &b->socket);
}


/** Matchers compare the fields their kind uses (the others carry no meaning). */
static bool match_eq(const sv_route_match *a, const sv_route_match *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case SV_MATCH_CIDR:
    case SV_MATCH_SOURCE_CIDR:
        return sv_cidr_equal(&a->cidr, &b->cidr);
    case SV_MATCH_PORT:
        return a->port_lo == b->port_lo && a->port_hi == b->port_hi;
    case SV_MATCH_NETWORK:
        return a->network == b->network;
    case SV_MATCH_DOMAIN:
    case SV_MATCH_DOMAIN_SUFFIX:
    case SV_MATCH_DOMAIN_KEYWORD:
    case SV_MATCH_INBOUND:
    case SV_MATCH_REGEX:
        return str_eq(a->text, b->text);
    }
    /* An unknown kind (refused by validation): compare every field. */
    return str_eq(a->text, b->text) && sv_cidr_equal(&a->cidr, &b->cidr) &&
           a->port_lo == b->port_lo && a->port_hi == b->port_hi && a->network == b->network;
}

static bool rule_eq(const sv_route_rule *a, const sv_route_rule *b)
{
    if (a->n_matchers != b->n_matchers || a->n_inbounds != b->n_inbounds ||
        !str_eq(a->outbound, b->outbound) || !str_eq(a->dns_server, b->dns_server) ||
        a->audit != b->audit ||
        (a->audit && a->audit_id != b->audit_id))
        return false;
    for (size_t i = 0; i < a->n_matchers; i++)
        if (!match_eq(&a->matchers[i], &b->matchers[i]))
            return false;
    for (size_t i = 0; i < a->n_inbounds; i++)
        if (!str_eq(a->inbounds[i], b->inbounds[i]))
            return false;
    return true;
}

bool sv_route_spec_equal(const sv_route_spec *a, const sv_route_spec *b)
{
    if (a->n_rules != b->n_rules || !str_eq(a->default_outbound, b->default_outbound))
        return false;
    for (size_t i = 0; i < a->n_rules; i++)
        if (!rule_eq(&a->rules[i], &b->rules[i]))
            return false;
    return true;
}

static bool user_eq(const sv_user *a, const sv_user *b)
{
    return a->id == b->id && str_eq(a->secret, b->secret) && a->speed_limit == b->speed_limit &&
           a->device_limit == b->device_limit && str_eq(a->label, b->label);
}

bool sv_user_set_equal(const sv_user_set *a, const sv_user_set *b)
{
    if (!str_eq(a->tag, b->tag) || a->n_users != b->n_users)
        return false;
    for (size_t i = 0; i < a->n_users; i++)
        if (!user_eq(&a->users[i], &b->users[i]))
            return false;
    return true;
}

/* ----------------------------------------------------------------------------------------- */
/* Text                                                                                      */
/* ----------------------------------------------------------------------------------------- */

void sv_bind_format(const sv_bind *b, char *buf, size_t cap)
{
    if (buf == NULL || cap == 0)
        return;
    const char *addr = b->address != NULL ? b->address : "";
    if (strchr(addr, ':') != NULL)
        snprintf(buf, cap, "[%s]:%u", addr, (unsigned)b->port);
    else
        snprintf(buf, cap, "%s:%u", addr, (unsigned)b->port);
}

static void strv_free(char ***v, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

void sv_apply_report_free(sv_apply_report *report)
{
    if (report == NULL)
        return;
    strv_free(&report->reused, &report->n_reused);
    strv_free(&report->built, &report->n_built);
    strv_free(&report->swapped, &report->n_swapped);
    strv_free(&report->drained, &report->n_drained);
    strv_free(&report->rebound, &report->n_rebound);
    strv_free(&report->restarted, &report->n_restarted);
    strv_free(&report->removed, &report->n_removed);
    memset(report, 0, sizeof *report);
}

bool sv_dns_server_valid(const char *s)
{
    char host[SV_DNS_SERVER_LEN];
    const char *port = NULL;
    uint8_t buf[16];
    size_t len = strlen(s);
    if (len == 0 || len >= sizeof host)
        return false;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return false;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        if (inet_pton(AF_INET6, host, buf) != 1)
            return false;
        port = close + 2;
    } else {
        const char *colon = strchr(s, ':');
        if (colon == NULL)
            return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
        if (strchr(colon + 1, ':') != NULL) /* a bare IPv6 address */
            return inet_pton(AF_INET6, s, buf) == 1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        if (inet_pton(AF_INET, host, buf) != 1)
            return false;
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    return *port >= '0' && *port <= '9' && *end == '\0' && p >= 1 && p <= 65535;
}
