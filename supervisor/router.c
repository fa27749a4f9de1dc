/*
 * Compiled routes (seed 000, "CompiledRoutes", "route_target"; router.h).
 *
 * Compilation turns each rule into per-kind arrays so that deciding never allocates:
 *   - domain / domain_suffix texts are lower-cased, one trailing dot is dropped (and one leading
 *     dot of a suffix), then sorted; exact names are found by binary search, a suffix by
 *     looking up the candidate and each of its parent names ("a.b.c" → "b.c" → "c");
 *   - keywords are lower-cased and tested with strstr;
 *   - CIDRs (destination and source) become merged, sorted [lo, hi] ranges per family, searched
 *     by binary search; an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is matched as IPv4;
 *   - ports are inclusive ranges, networks a bit mask, inbound tags a sorted array;
 *   - regexes (SV_MATCH_REGEX) are compiled once with PCRE2_CASELESS (and JIT-compiled when the
 *     library supports it) and searched, unanchored, in the normalised destination name and the
 *     sniffed name. Matching uses one match-data block per thread (rt_match_data: created on a
 *     thread's first regex match, freed at thread exit), so a decision never allocates after
 *     that first call.
 * Destination choices: a domain destination matches CIDR rules only when its text is an IP
 * literal ("10.0.0.1", "::1"); an IP destination never matches domain rules (only the sniffed
 * name can). Missing fields (no destination, no source, no inbound) never match.
 * A decision also says whether the rule matched through a destination matcher (names_dest):
 * those are tried first in each rule, the others only when none of them matches.
 */
#include "supervisor/router.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <pcre2.h>
#include <pthread.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 rt_u128;

/** One merged address range, inclusive; IPv4 values use the low 32 bits. */
typedef struct rt_range {
    rt_u128 lo, hi;
} rt_range;

/** A set of address ranges per family. */
typedef struct rt_ipset {
    rt_range *v4, *v6;
    size_t n4, n6;
} rt_ipset;

typedef struct rt_ports {
    uint16_t lo, hi;
} rt_ports;

/** A sorted array of owned strings. */
typedef struct rt_strs {
    char **v;
    size_t n;
} rt_strs;

typedef struct rt_rule {
    uint32_t slot;
    rt_strs only_inbounds; /**< the rule applies only to these inbounds when not empty */
    rt_strs domains, suffixes, keywords, inbound_tags;
    rt_ipset cidr, source;
    rt_ports *ports;
    size_t n_ports;
    pcre2_code **regexes;
    size_t n_regexes;
    unsigned networks; /**< bit (1 << enum sv_network) per network matcher */
    bool audit;        /**< sv_route_rule.audit */
    int64_t audit_id;
    char *dns_server;  /**< sv_route_rule.dns_server (owned), or NULL */
} rt_rule;

struct sv_routes {
    char **slots;
    size_t n_slots, cap_slots;
    rt_rule *rules;
    size_t n_rules;
    uint32_t default_slot;
};

/** An IP address ready for range lookup. */
typedef struct rt_ip {
    bool set;
    bool v6;
    rt_u128 value;
} rt_ip;

/** The query, normalised once per decision on the stack (route_target). */
typedef struct rt_target {
    const sv_route_query *q;
    char host[256]; /**< normalised destination domain, "" when none */
    char sniff[256]; /**< normalised sniffed name, "" when none */
    char ip_text[INET6_ADDRSTRLEN]; /**< an IP destination's literal (regexes only), or "";
                                         made on the first rule with regexes (rt_ip_text) */
    bool ip_text_done;
    rt_ip dest_ip, src_ip;
    bool has_port;
    uint16_t port;
} rt_target;

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/** Lower-case @p s into @p out (cap bytes) and drop one trailing dot. false when too long. */
static bool rt_norm_domain(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s);
    if (n >= cap)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    if (n > 0 && out[n - 1] == '.')
        n--;
    out[n] = '\0';
    return true;
}

static rt_u128 rt_bytes_value(const uint8_t *p, size_t n)
{
    rt_u128 v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/** Load an address of @p family from network-order bytes; v4-mapped IPv6 becomes IPv4. */
static rt_ip rt_ip_from(int family, const uint8_t *addr)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    rt_ip ip = {.set = true};
    if (family == AF_INET6 && memcmp(addr, mapped, sizeof mapped) == 0) {
        ip.value = rt_bytes_value(addr + 12, 4);
    } else if (family == AF_INET6) {
        ip.v6 = true;
        ip.value = rt_bytes_value(addr, 16);
    } else {
        ip.value = rt_bytes_value(addr, 4);
    }
    return ip;
}

static int rt_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool rt_strs_has(const rt_strs *s, const char *key)
{
    return s->n > 0 && bsearch(&key, s->v, s->n, sizeof *s->v, rt_cmp_str) != NULL;
}

static void rt_strs_free(rt_strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int rt_cmp_range(const void *a, const void *b)
{
    const rt_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/** True when @p ip falls in one of the sorted, disjoint ranges. */
static bool rt_ranges_have(const rt_range *v, size_t n, rt_u128 x)
{
    size_t lo = 0, hi = n; /* find the last range whose lo <= x */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].lo <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && x <= v[lo - 1].hi;
}

static bool rt_ipset_has(const rt_ipset *s, const rt_ip *ip)
{
    if (!ip->set)
        return false;
    return ip->v6 ? rt_ranges_have(s->v6, s->n6, ip->value) : rt_ranges_have(s->v4, s->n4, ip->value);
}

/* ---------------------------------------------------------------------------------------- */
/* Compilation                                                                                */
/* ---------------------------------------------------------------------------------------- */

/** slot_of (seed 000): the slot of @p tag, appended on first sight. -1 on OOM. */
static long rt_slot_of(sv_routes *r, const char *tag)
{
    for (size_t i = 0; i < r->n_slots; i++)
        if (strcmp(r->slots[i], tag) == 0)
            return (long)i;
    if (r->n_slots == r->cap_slots) {
        size_t cap = r->cap_slots ? r->cap_slots * 2 : 4;
        char **v = realloc(r->slots, cap * sizeof *v);
        if (!v)
            return -1;
        r->slots = v;
        r->cap_slots = cap;
    }
    char *copy = strdup(tag);
    if (!copy)
        return -1;
    r->slots[r->n_slots] = copy;
    return (long)r->n_slots++;
}

/** Turn a CIDR into a range. -EINVAL for a bad family or prefix. */
static int rt_cidr_range(const sv_cidr *c, rt_range *out, bool *v6)
{
    unsigned bits;
    if (c->family == AF_INET)
        bits = 32;
    else if (c->family == AF_INET6)
        bits = 128;
    else
        return -EINVAL;
    if (c->prefix > bits)
        return -EINVAL;
    rt_u128 value = rt_bytes_value(c->addr, bits / 8);
    rt_u128 all = bits == 128 ? ~(rt_u128)0 : (((rt_u128)1 << bits) - 1);
    rt_u128 host; /* the bits below the prefix */
    if (c->prefix == 0)
        host = all;
    else if (c->prefix == bits)
        host = 0;
    else
        host = ((rt_u128)1 << (bits - c->prefix)) - 1;
    out->lo = value & ~host & all;
    out->hi = out->lo | host;
    *v6 = bits == 128;
    return 0;
}

/** Sort and merge overlapping or adjacent ranges in place. @return the new count. */
static size_t rt_ranges_merge(rt_range *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, rt_cmp_range);
    size_t w = 0;
    for (size_t i = 1; i < n; i++) {
        bool touches = v[i].lo <= v[w].hi || (v[w].hi != ~(rt_u128)0 && v[i].lo == v[w].hi + 1);
        if (touches) {
            if (v[i].hi > v[w].hi)
                v[w].hi = v[i].hi;
        } else {
            v[++w] = v[i];
        }
    }
    return w + 1;
}

/** Append one CIDR matcher to @p s (arrays sized by the caller). */
static int rt_ipset_add(rt_ipset *s, const sv_cidr *c)
{
    rt_range r;
    bool v6;
    int rc = rt_cidr_range(c, &r, &v6);
    if (rc < 0)
        return rc;
    if (v6)
        s->v6[s->n6++] = r;
    else
        s->v4[s->n4++] = r;
    return 0;
}

static int rt_ipset_alloc(rt_ipset *s, size_t n)
{
    if (n == 0)
        return 0;
    s->v4 = calloc(n, sizeof *s->v4);
    s->v6 = calloc(n, sizeof *s->v6);
    return s->v4 && s->v6 ? 0 : -ENOMEM;
}

static void rt_ipset_free(rt_ipset *s)
{
    free(s->v4);
    free(s->v6);
}

/** Add a normalised copy of @p text to @p s (array sized by the caller). */
static int rt_strs_add(rt_strs *s, const char *text, bool domain, bool strip_lead)
{
    if (!text)
        return -EINVAL;
    char *copy = strdup(text);
    if (!copy)
        return -ENOMEM;
    if (domain) {
        rt_norm_domain(text, copy, strlen(text) + 1);
        if (strip_lead && copy[0] == '.')
            memmove(copy, copy + 1, strlen(copy));
        if (copy[0] == '\0') {
            free(copy);
            return -EINVAL;
        }
    }
    s->v[s->n++] = copy;
    return 0;
}

/** Matcher counts per kind, used to size a rule's arrays. */
typedef struct rt_counts {
    size_t by_kind[SV_MATCH_REGEX + 1];
} rt_counts;

static int rt_rule_alloc(rt_rule *rr, const sv_route_rule *rule)
{
    rt_counts c = {{0}};
    for (size_t i = 0; i < rule->n_matchers; i++) {
        unsigned k = (unsigned)rule->matchers[i].kind;
        if (k < SV_MATCH_DOMAIN || k > SV_MATCH_REGEX)
            return -EINVAL;
        c.by_kind[k]++;
    }
    rt_strs *strs[] = {&rr->domains, &rr->suffixes, &rr->keywords, &rr->inbound_tags, &rr->only_inbounds};
    size_t ns[] = {c.by_kind[SV_MATCH_DOMAIN], c.by_kind[SV_MATCH_DOMAIN_SUFFIX],
                   c.by_kind[SV_MATCH_DOMAIN_KEYWORD], c.by_kind[SV_MATCH_INBOUND], rule->n_inbounds};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        if (ns[i] && !(strs[i]->v = calloc(ns[i], sizeof(char *))))
            return -ENOMEM;
    if (c.by_kind[SV_MATCH_PORT] && !(rr->ports = calloc(c.by_kind[SV_MATCH_PORT], sizeof *rr->ports)))
        return -ENOMEM;
    if (rt_ipset_alloc(&rr->cidr, c.by_kind[SV_MATCH_CIDR]) < 0 ||
        rt_ipset_alloc(&rr->source, c.by_kind[SV_MATCH_SOURCE_CIDR]) < 0)
        return -ENOMEM;
    if (c.by_kind[SV_MATCH_REGEX] &&
        !(rr->regexes = calloc(c.by_kind[SV_MATCH_REGEX], sizeof *rr->regexes)))
        return -ENOMEM;
    return 0;
}

/** Compile one pattern (caseless, JIT when available) into @p rr. -EINVAL: does not compile. */
static int rt_regex_add(rt_rule *rr, const char *pattern)
{
    if (!pattern || pattern[0] == '\0')
        return -EINVAL;
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS,
                                   &code, &off, NULL);
    if (!re)
        return code == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    rr->regexes[rr->n_regexes++] = re;
    return 0;
}

/** Add one matcher to a rule whose arrays are sized. */
static int rt_rule_add(rt_rule *rr, const sv_route_match *m)
{
    switch (m->kind) {
    case SV_MATCH_DOMAIN:
        return rt_strs_add(&rr->domains, m->text, true, false);
    case SV_MATCH_DOMAIN_SUFFIX:
        return rt_strs_add(&rr->suffixes, m->text, true, true);
    case SV_MATCH_DOMAIN_KEYWORD:
        return rt_strs_add(&rr->keywords, m->text, true, false);
    case SV_MATCH_INBOUND:
        return rt_strs_add(&rr->inbound_tags, m->text, false, false);
    case SV_MATCH_CIDR:
        return rt_ipset_add(&rr->cidr, &m->cidr);
    case SV_MATCH_SOURCE_CIDR:
        return rt_ipset_add(&rr->source, &m->cidr);
    case SV_MATCH_PORT:
        if (m->port_lo > m->port_hi)
            return -EINVAL;
        rr->ports[rr->n_ports++] = (rt_ports){m->port_lo, m->port_hi};
        return 0;
    case SV_MATCH_NETWORK:
        if (m->network != SV_NET_TCP && m->network != SV_NET_UDP)
            return -EINVAL;
        rr->networks |= 1u << m->network;
        return 0;
    case SV_MATCH_REGEX:
        return rt_regex_add(rr, m->text);
    }
    return -EINVAL;
}

static void rt_rule_free(rt_rule *rr)
{
    rt_strs_free(&rr->only_inbounds);
    rt_strs_free(&rr->domains);
    rt_strs_free(&rr->suffixes);
    rt_strs_free(&rr->keywords);
    rt_strs_free(&rr->inbound_tags);
    rt_ipset_free(&rr->cidr);
    rt_ipset_free(&rr->source);
    free(rr->ports);
    free(rr->dns_server);
    for (size_t i = 0; i < rr->n_regexes; i++)
        pcre2_code_free(rr->regexes[i]);
    free(rr->regexes);
}

/** Compile one rule. @return 0, -ENOMEM or -EINVAL (with @p what naming the problem). */
static int rt_rule_compile(rt_rule *rr, const sv_route_rule *rule, const char **what)
{
    int rc = rt_rule_alloc(rr, rule);
    *what = "unknown matcher kind";
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < rule->n_matchers; i++) {
        rc = rt_rule_add(rr, &rule->matchers[i]);
        if (rc < 0) {
            *what = "invalid matcher (empty name, bad cidr, port range, network or regex)";
            return rc;
        }
    }
    rr->audit = rule->audit;
    rr->audit_id = rule->audit_id;
    if (rule->dns_server != NULL && (rr->dns_server = strdup(rule->dns_server)) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < rule->n_inbounds; i++) {
        rc = rt_strs_add(&rr->only_inbounds, rule->inbounds[i], false, false);
        if (rc < 0) {
            *what = "invalid inbound list";
            return rc;
        }
    }
    rt_strs *sorted[] = {&rr->only_inbounds, &rr->domains, &rr->suffixes, &rr->inbound_tags};
    for (size_t i = 0; i < sizeof sorted / sizeof sorted[0]; i++)
        if (sorted[i]->n > 1)
            qsort(sorted[i]->v, sorted[i]->n, sizeof(char *), rt_cmp_str);
    rr->cidr.n4 = rt_ranges_merge(rr->cidr.v4, rr->cidr.n4);
    rr->cidr.n6 = rt_ranges_merge(rr->cidr.v6, rr->cidr.n6);
    rr->source.n4 = rt_ranges_merge(rr->source.v4, rr->source.n4);
    rr->source.n6 = rt_ranges_merge(rr->source.v6, rr->source.n6);
    return 0;
}

int sv_routes_compile(const sv_route_spec *spec, sv_routes **out, sv_error *err)
{
    *out = NULL;
    if (!spec->default_outbound)
        return sv_error_set(err, -EINVAL, "building route failed: no default outbound");
    if ((spec->n_rules > 0 && !spec->rules) || spec->n_rules > INT_MAX)
        return sv_error_set(err, -EINVAL, "building route failed: invalid rule list");
    sv_routes *r = calloc(1, sizeof *r);
    if (!r || (spec->n_rules > 0 && !(r->rules = calloc(spec->n_rules, sizeof *r->rules))))
        goto nomem;
    for (size_t i = 0; i < spec->n_rules; i++) {
        const sv_route_rule *rule = &spec->rules[i];
        r->n_rules = i + 1; /* the partial rule is freed on error */
        if (!rule->outbound) {
            sv_routes_free(r);
            return sv_error_set(err, -EINVAL, "building route failed: rule %zu has no outbound", i);
        }
        long slot = rt_slot_of(r, rule->outbound);
        if (slot < 0)
            goto nomem;
        r->rules[i].slot = (uint32_t)slot;
        const char *what = NULL;
        int rc = rt_rule_compile(&r->rules[i], rule, &what);
        if (rc == -ENOMEM)
            goto nomem;
        if (rc < 0) {
            sv_routes_free(r);
            return sv_error_set(err, rc, "building route failed: rule %zu: %s", i, what);
        }
    }
    long slot = rt_slot_of(r, spec->default_outbound);
    if (slot < 0)
        goto nomem;
    r->default_slot = (uint32_t)slot;
    *out = r;
    return 0;
nomem:
    sv_routes_free(r);
    return sv_error_set(err, -ENOMEM, "building route failed: out of memory");
}

sv_routes *sv_routes_single(const char *tag)
{
    sv_route_spec spec = {.default_outbound = (char *)(tag ? tag : "")};
    sv_routes *r = NULL;
    return sv_routes_compile(&spec, &r, NULL) == 0 ? r : NULL;
}

void sv_routes_free(sv_routes *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_rules; i++)
        rt_rule_free(&r->rules[i]);
    free(r->rules);
    for (size_t i = 0; i < r->n_slots; i++)
        free(r->slots[i]);
    free(r->slots);
    free(r);
}

size_t sv_routes_n_slots(const sv_routes *r) { return r->n_slots; }

const char *sv_routes_slot_tag(const sv_routes *r, size_t slot)
{
    return slot < r->n_slots ? r->slots[slot] : NULL;
}

const struct sockaddr *sv_route_source(const struct sockaddr *flow_source,
                                       const struct sockaddr *listener_source)
{
    return flow_source ? flow_source : listener_source;
}

/* ---------------------------------------------------------------------------------------- */
/* Deciding                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static rt_ip rt_ip_of_sockaddr(const struct sockaddr *sa)
{
    rt_ip none = {0};
    if (!sa)
        return none;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return rt_ip_from(AF_INET, (const uint8_t *)&in->sin_addr);
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return rt_ip_from(AF_INET6, in6->sin6_addr.s6_addr);
    }
    return none;
}

/** The destination's IP: the address itself, or a domain whose text is an IP literal. */
static rt_ip rt_ip_of_dest(const sv_dest *d)
{
    rt_ip none = {0};
    uint8_t buf[16];
    if (d->atyp == SV_ATYP_IPV4)
        return rt_ip_from(AF_INET, d->ip);
    if (d->atyp == SV_ATYP_IPV6)
        return rt_ip_from(AF_INET6, d->ip);
    if (d->atyp != SV_ATYP_DOMAIN || memchr(d->host, '\0', sizeof d->host) == NULL)
        return none;
    if (inet_pton(AF_INET, d->host, buf) == 1)
        return rt_ip_from(AF_INET, buf);
    if (inet_pton(AF_INET6, d->host, buf) == 1)
        return rt_ip_from(AF_INET6, buf);
    return none;
}

/** route_target (seed 000): borrow and normalise every field once, without allocating. */
static void rt_target_init(rt_target *t, const sv_route_query *q)
{
    t->q = q;
    t->host[0] = t->sniff[0] = t->ip_text[0] = '\0';
    t->ip_text_done = false;
    t->dest_ip = (rt_ip){0};
    t->has_port = false;
    t->port = 0;
    const sv_dest *d = q->dest;
    if (d) {
        t->has_port = true;
        t->port = d->port;
        t->dest_ip = rt_ip_of_dest(d);
        if (d->atyp == SV_ATYP_DOMAIN && memchr(d->host, '\0', sizeof d->host) != NULL &&
            !rt_norm_domain(d->host, t->host, sizeof t->host))
            t->host[0] = '\0';
    }
    if (q->sniffed && !rt_norm_domain(q->sniffed, t->sniff, sizeof t->sniff))
        t->sniff[0] = '\0';
    t->src_ip = rt_ip_of_sockaddr(q->source);
}

static pthread_key_t rt_md_key;
static pthread_once_t rt_md_once = PTHREAD_ONCE_INIT;
static bool rt_md_key_ok;

static void rt_md_free(void *md) { pcre2_match_data_free(md); }

static void rt_md_init(void) { rt_md_key_ok = pthread_key_create(&rt_md_key, rt_md_free) == 0; }

/**
 * This thread's match-data block (one ovector pair: only "did it match" is used), created on
 * the thread's first call and freed by the key destructor at thread exit. NULL on OOM.
 */
static pcre2_match_data *rt_match_data(void)
{
    pthread_once(&rt_md_once, rt_md_init);
    if (!rt_md_key_ok)
        return NULL;
    pcre2_match_data *md = pthread_getspecific(rt_md_key);
    if (!md) {
        md = pcre2_match_data_create(1, NULL);
        if (md && pthread_setspecific(rt_md_key, md) != 0) {
            pcre2_match_data_free(md);
            md = NULL;
        }
    }
    return md;
}

/** Does one of the rule's regexes match somewhere in @p name? (OOM: no match.) */
static bool rt_regex_matches(const rt_rule *rr, const char *name)
{
    if (rr->n_regexes == 0)
        return false;
    pcre2_match_data *md = rt_match_data();
    if (!md)
        return false;
    size_t len = strlen(name);
    for (size_t i = 0; i < rr->n_regexes; i++)
        if (pcre2_match(rr->regexes[i], (PCRE2_SPTR)name, len, 0, 0, md, NULL) >= 0)
            return true;
    return false;
}

/** Does the normalised name @p name match one of the rule's domain matchers? */
static bool rt_name_matches(const rt_rule *rr, const char *name)
{
    if (name[0] == '\0')
        return false;
    if (rt_strs_has(&rr->domains, name))
        return true;
    if (rr->suffixes.n > 0) {
        for (const char *p = name; p; p = strchr(p, '.')) {
            if (*p == '.')
                p++;
            if (*p && rt_strs_has(&rr->suffixes, p))
                return true;
        }
    }
    for (size_t i = 0; i < rr->keywords.n; i++)
        if (strstr(name, rr->keywords.v[i]))
            return true;
    return rt_regex_matches(rr, name);
}

/** How a rule matched: not at all, through its destination matchers, or through others. */
enum rt_hit { RT_MISS = 0, RT_HIT_DEST, RT_HIT_OTHER };

/* An IP destination's literal ("" for a name), formatted once per decision and only for a rule
 * with regexes (audit regexes see the IP literal; no cost per datagram otherwise). */
static const char *rt_ip_text(rt_target *t)
{
    const sv_dest *d = t->q->dest;
    if (!t->ip_text_done && d != NULL && (d->atyp == SV_ATYP_IPV4 || d->atyp == SV_ATYP_IPV6) &&
        inet_ntop(d->atyp == SV_ATYP_IPV4 ? AF_INET : AF_INET6, d->ip, t->ip_text,
                  sizeof t->ip_text) == NULL)
        t->ip_text[0] = '\0';
    t->ip_text_done = true;
    return t->ip_text;
}

/* The destination matchers go first, so that a rule that matches both ways names the
 * destination (sv_decision.names_dest); the order does not change whether the rule matches. */
static enum rt_hit rt_rule_matches(const rt_rule *rr, rt_target *t)
{
    const sv_route_query *q = t->q;
    if (rr->only_inbounds.n > 0 && (!q->inbound || !rt_strs_has(&rr->only_inbounds, q->inbound)))
        return RT_MISS;
    if (rt_ipset_has(&rr->cidr, &t->dest_ip) || rt_name_matches(rr, t->host) ||
        (rr->n_regexes > 0 && rt_ip_text(t)[0] != '\0' && rt_regex_matches(rr, t->ip_text)))
        return RT_HIT_DEST;
    if ((unsigned)q->network < 32 && (rr->networks & (1u << q->network)))
        return RT_HIT_OTHER;
    if (t->has_port)
        for (size_t i = 0; i < rr->n_ports; i++)
            if (t->port >= rr->ports[i].lo && t->port <= rr->ports[i].hi)
                return RT_HIT_OTHER;
    if (q->inbound && rt_strs_has(&rr->inbound_tags, q->inbound))
        return RT_HIT_OTHER;
    if (rt_ipset_has(&rr->source, &t->src_ip) || rt_name_matches(rr, t->sniff))
        return RT_HIT_OTHER;
    return RT_MISS;
}

sv_decision sv_routes_decide(const sv_routes *r, const sv_route_query *q)
{
    rt_target t;
    rt_target_init(&t, q);
    for (size_t i = 0; i < r->n_rules; i++) {
        enum rt_hit hit = rt_rule_matches(&r->rules[i], &t);
        if (hit != RT_MISS)
            return (sv_decision){.slot = r->rules[i].slot, .rule = (int)i,
                                 .names_dest = hit == RT_HIT_DEST &&
                                               r->rules[i].dns_server == NULL,
                                 .dns_server = r->rules[i].dns_server};
    }
    return (sv_decision){.slot = r->default_slot, .rule = -1, .names_dest = false};
}

bool sv_routes_rule_audit(const sv_routes *r, int rule, int64_t *id)
{
    if (rule < 0 || (size_t)rule >= r->n_rules || !r->rules[rule].audit)
        return false;
    *id = r->rules[rule].audit_id;
    return true;
}
