/* Unit tests for the compiled router (supervisor/router.c; seed 000 "CompiledRoutes"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "supervisor/router.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static sv_dest dest_domain(const char *host, uint16_t port)
{
    sv_dest d = {.atyp = SV_ATYP_DOMAIN, .port = port, .network = SV_NET_TCP};
    snprintf(d.host, sizeof d.host, "%s", host);
    return d;
}

static sv_dest dest_ip(const char *text, uint16_t port)
{
    sv_dest d = {.port = port, .network = SV_NET_TCP};
    if (inet_pton(AF_INET, text, d.ip) == 1) {
        d.atyp = SV_ATYP_IPV4;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, d.ip), 1);
        d.atyp = SV_ATYP_IPV6;
    }
    return d;
}

static struct sockaddr_storage sockaddr_of(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
    }
    return ss;
}

static sv_cidr cidr_of(const char *text, uint8_t prefix)
{
    sv_cidr c = {.prefix = prefix};
    if (inet_pton(AF_INET, text, c.addr) == 1) {
        c.family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, c.addr), 1);
        c.family = AF_INET6;
    }
    return c;
}

/** Compile one rule "m → hit" with default "miss"; the caller frees. */
static sv_routes *one_rule(sv_route_match *m, size_t n, char **inbounds, size_t n_inbounds)
{
    sv_route_rule rule = {.matchers = m, .n_matchers = n, .inbounds = inbounds,
                          .n_inbounds = n_inbounds, .outbound = "hit"};
    sv_route_spec spec = {.rules = &rule, .n_rules = 1, .default_outbound = "miss"};
    sv_routes *r = NULL;
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&spec, &r, &err), 0);
    assert_non_null(r);
    assert_string_equal(sv_routes_slot_tag(r, 0), "hit");
    assert_string_equal(sv_routes_slot_tag(r, 1), "miss");
    return r;
}

/** True when the query reaches rule 0 of a one_rule() table. */
static bool hits(const sv_routes *r, const sv_dest *d, const char *sniffed, const char *inbound,
                 const struct sockaddr *src, enum sv_network net)
{
    sv_route_query q = {.dest = d, .sniffed = sniffed, .inbound = inbound, .source = src,
                        .network = net};
    sv_decision dec = sv_routes_decide(r, &q);
    if (dec.rule == 0) {
        assert_int_equal(dec.slot, 0);
        return true;
    }
    assert_int_equal(dec.rule, -1);
    assert_int_equal(dec.slot, 1);
    return false;
}

static bool hits_domain(const sv_routes *r, const char *host)
{
    sv_dest d = dest_domain(host, 443);
    return hits(r, &d, NULL, "in", NULL, SV_NET_TCP);
}

static bool hits_ip(const sv_routes *r, const char *ip)
{
    sv_dest d = dest_ip(ip, 443);
    return hits(r, &d, NULL, "in", NULL, SV_NET_TCP);
}

/* ---- the seed's slot table --------------------------------------------------------------- */

static void every_rule_naming_a_tag_shares_that_tags_slot(void **state)
{
    (void)state;
    sv_route_match m80 = {.kind = SV_MATCH_PORT, .port_lo = 80, .port_hi = 80};
    sv_route_match mudp = {.kind = SV_MATCH_NETWORK, .network = SV_NET_UDP};
    sv_route_match m443 = {.kind = SV_MATCH_PORT, .port_lo = 443, .port_hi = 443};
    sv_route_rule rules[] = {
        {.matchers = &m80, .n_matchers = 1, .outbound = "proxy"},
        {.matchers = &mudp, .n_matchers = 1, .outbound = "direct"},
        {.matchers = &m443, .n_matchers = 1, .outbound = "proxy"},
    };
    sv_route_spec spec = {.rules = rules, .n_rules = 3, .default_outbound = "direct"};
    sv_routes *r = NULL;
    assert_int_equal(sv_routes_compile(&spec, &r, NULL), 0);
    assert_int_equal(sv_routes_n_slots(r), 2);
    assert_string_equal(sv_routes_slot_tag(r, 0), "proxy");
    assert_string_equal(sv_routes_slot_tag(r, 1), "direct");
    assert_null(sv_routes_slot_tag(r, 2));

    struct { enum sv_network net; uint16_t port; uint32_t slot; int rule; } cases[] = {
        {SV_NET_TCP, 80, 0, 0}, {SV_NET_TCP, 443, 0, 2}, {SV_NET_UDP, 443, 1, 1}, {SV_NET_TCP, 22, 1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sv_dest d = dest_ip("192.0.2.1", cases[i].port);
        sv_route_query q = {.dest = &d, .inbound = "in", .network = cases[i].net};
        sv_decision dec = sv_routes_decide(r, &q);
        assert_int_equal(dec.slot, cases[i].slot);
        assert_int_equal(dec.rule, cases[i].rule);
    }
    sv_routes_free(r);
}

static void the_default_tag_gets_the_last_slot_when_no_rule_names_it(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_PORT, .port_lo = 1, .port_hi = 1};
    sv_route_rule rules[] = {{.matchers = &m, .n_matchers = 1, .outbound = "b"},
                             {.matchers = &m, .n_matchers = 1, .outbound = "a"},
                             {.matchers = &m, .n_matchers = 1, .outbound = "b"}};
    sv_route_spec spec = {.rules = rules, .n_rules = 3, .default_outbound = "c"};
    sv_routes *r = NULL;
    assert_int_equal(sv_routes_compile(&spec, &r, NULL), 0);
    assert_int_equal(sv_routes_n_slots(r), 3);
    assert_string_equal(sv_routes_slot_tag(r, 0), "b");
    assert_string_equal(sv_routes_slot_tag(r, 1), "a");
    assert_string_equal(sv_routes_slot_tag(r, 2), "c");
    sv_route_query q = {.network = SV_NET_TCP}; /* no destination: the port rule cannot match */
    sv_decision dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.slot, 2);
    assert_int_equal(dec.rule, -1);
    sv_routes_free(r);
}

/* ---- matchers ---------------------------------------------------------------------------- */

static void domain_matches_the_whole_name_ignoring_case_and_a_trailing_dot(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_DOMAIN, .text = "Example.COM."};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    assert_true(hits_domain(r, "example.com"));
    assert_true(hits_domain(r, "EXAMPLE.com."));
    assert_false(hits_domain(r, "www.example.com"));
    assert_false(hits_domain(r, "example.co"));
    assert_false(hits_domain(r, "example.com.cn"));
    assert_false(hits_ip(r, "192.0.2.1"));
    sv_routes_free(r);
}

/* Issue 13 (panel dns routes): the matching rule's DNS server comes with the decision. */
static void a_decision_carries_its_rules_dns_server(void **state)
{
    (void)state;
    sv_route_match m0 = {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "split.test"};
    sv_route_match m1 = {.kind = SV_MATCH_DOMAIN, .text = "plain.test"};
    char server[] = "127.0.0.1:5353";
    sv_route_rule rules[2] = {
        {.matchers = &m0, .n_matchers = 1, .outbound = "direct", .dns_server = server},
        {.matchers = &m1, .n_matchers = 1, .outbound = "direct"},
    };
    sv_route_spec spec = {.rules = rules, .n_rules = 2, .default_outbound = "direct"};
    sv_routes *r = NULL;
    assert_int_equal(sv_routes_compile(&spec, &r, NULL), 0);
    server[0] = 'x'; /* the routes hold their own copy */
    sv_dest d = dest_domain("a.split.test", 443);
    sv_route_query q = {.dest = &d, .inbound = "in", .network = SV_NET_TCP};
    sv_decision dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.rule, 0);
    assert_string_equal(dec.dns_server, "127.0.0.1:5353");
    assert_false(dec.names_dest); /* issue 15: a dns route opens no internal destination */
    d = dest_domain("plain.test", 443);
    dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.rule, 1);
    assert_null(dec.dns_server);
    d = dest_domain("other.test", 443);
    dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.rule, -1);
    assert_null(dec.dns_server);
    sv_routes_free(r);
}

static void domain_suffix_matches_the_name_and_its_subdomains_only(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "example.com"};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    assert_true(hits_domain(r, "example.com"));
    assert_true(hits_domain(r, "www.example.com"));
    assert_true(hits_domain(r, "A.B.Example.Com."));
    assert_false(hits_domain(r, "badexample.com"));
    assert_false(hits_domain(r, "com"));
    assert_false(hits_domain(r, "example.com.evil"));
    sv_routes_free(r);

    sv_route_match lead = {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = ".example.org"};
    r = one_rule(&lead, 1, NULL, 0);
    assert_true(hits_domain(r, "example.org"));
    assert_true(hits_domain(r, "x.example.org"));
    assert_false(hits_domain(r, "xexample.org"));
    sv_routes_free(r);
}

static void regex_is_searched_caseless_in_the_destination_name(void **state)
{
    (void)state;
    sv_route_match m[] = {{.kind = SV_MATCH_REGEX, .text = "(^|\\.)tracker\\.example$"},
                          {.kind = SV_MATCH_REGEX, .text = "^ads[0-9]+\\."}};
    sv_routes *r = one_rule(m, 2, NULL, 0);
    assert_true(hits_domain(r, "tracker.example"));
    assert_true(hits_domain(r, "a.b.TRACKER.Example"));
    assert_true(hits_domain(r, "tracker.example.")); /* one trailing dot dropped */
    assert_true(hits_domain(r, "Ads42.cdn.test"));
    assert_false(hits_domain(r, "notracker.example"));
    assert_false(hits_domain(r, "tracker.example.org"));
    assert_false(hits_domain(r, "ads.cdn.test"));
    assert_false(hits_domain(r, "www.ads1.test"));
    assert_false(hits_ip(r, "192.0.2.1"));
    /* unanchored: a plain pattern is a substring search */
    sv_route_match plain = {.kind = SV_MATCH_REGEX, .text = "bad.host"};
    sv_routes *p = one_rule(&plain, 1, NULL, 0);
    assert_true(hits_domain(p, "a.bad.host.test"));
    assert_true(hits_domain(p, "badXhost"));
    assert_false(hits_domain(p, "bad.hos"));
    for (int i = 0; i < 1000; i++) /* repeated decisions reuse the thread's match data */
        assert_true(hits_domain(r, "tracker.example"));
    sv_routes_free(p);
    sv_routes_free(r);
}

static void regex_matches_the_sniffed_name(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_REGEX, .text = "^video\\.sniffed\\.example$"};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    sv_dest ip = dest_ip("127.0.0.1", 443);
    assert_true(hits(r, &ip, "VIDEO.sniffed.example", "in", NULL, SV_NET_TCP));
    assert_false(hits(r, &ip, "www.video.sniffed.example", "in", NULL, SV_NET_TCP));
    assert_false(hits(r, &ip, NULL, "in", NULL, SV_NET_TCP));
    sv_routes_free(r);
}

/* issue 12: audit regexes are matched against an IP destination's literal too, never with its
 * port; a rule's audit id is what sv_routes_rule_audit() gives for its decision. */
static void regex_matches_an_ip_literal_without_the_port_and_audit_ids_are_kept(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_REGEX, .text = "^192\\.0\\.2\\.7$"};
    sv_route_match v6 = {.kind = SV_MATCH_REGEX, .text = "^2001:db8::1$"};
    sv_route_match port = {.kind = SV_MATCH_REGEX, .text = ":443"};
    sv_route_rule rules[] = {
        {.matchers = &m, .n_matchers = 1, .outbound = "block", .audit = true, .audit_id = 9},
        {.matchers = &v6, .n_matchers = 1, .outbound = "block"},
        {.matchers = &port, .n_matchers = 1, .outbound = "block", .audit = true, .audit_id = 5}};
    sv_route_spec spec = {.rules = rules, .n_rules = 3, .default_outbound = "direct"};
    sv_routes *r = NULL;
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&spec, &r, &err), 0);
    sv_dest a = dest_ip("192.0.2.7", 443), b = dest_ip("2001:db8::1", 443),
            c = dest_ip("192.0.2.70", 443);
    sv_route_query q = {.dest = &a, .inbound = "in", .network = SV_NET_TCP};
    sv_decision d = sv_routes_decide(r, &q);
    assert_int_equal(d.rule, 0);
    assert_true(d.names_dest);
    int64_t id = 0;
    assert_true(sv_routes_rule_audit(r, d.rule, &id));
    assert_int_equal(id, 9);
    q.dest = &b;
    d = sv_routes_decide(r, &q);
    assert_int_equal(d.rule, 1);
    assert_false(sv_routes_rule_audit(r, d.rule, &id)); /* a block rule that is no audit rule */
    q.dest = &c;
    d = sv_routes_decide(r, &q);
    assert_int_equal(d.rule, -1); /* ":443" never sees the port */
    assert_false(sv_routes_rule_audit(r, -1, &id));
    assert_false(sv_routes_rule_audit(r, 3, &id));
    sv_routes_free(r);
}

static void domain_keyword_matches_a_substring(void **state)
{
    (void)state;
    sv_route_match m[] = {{.kind = SV_MATCH_DOMAIN_KEYWORD, .text = "GOOG"},
                          {.kind = SV_MATCH_DOMAIN_KEYWORD, .text = "tracker"}};
    sv_routes *r = one_rule(m, 2, NULL, 0);
    assert_true(hits_domain(r, "www.google.com"));
    assert_true(hits_domain(r, "goog"));
    assert_true(hits_domain(r, "ads.tracker.net"));
    assert_false(hits_domain(r, "example.org"));
    assert_false(hits_domain(r, "go.og"));
    sv_routes_free(r);
}

static void cidr_matches_the_destination_ip_of_either_family(void **state)
{
    (void)state;
    sv_route_match m[] = {{.kind = SV_MATCH_CIDR, .cidr = cidr_of("10.0.0.0", 8)},
                          {.kind = SV_MATCH_CIDR, .cidr = cidr_of("192.168.1.77", 24)},
                          {.kind = SV_MATCH_CIDR, .cidr = cidr_of("192.168.2.0", 24)},
                          {.kind = SV_MATCH_CIDR, .cidr = cidr_of("2001:db8::", 32)},
                          {.kind = SV_MATCH_CIDR, .cidr = cidr_of("203.0.113.9", 32)}};
    sv_routes *r = one_rule(m, 5, NULL, 0);
    assert_true(hits_ip(r, "10.0.0.0"));
    assert_true(hits_ip(r, "10.255.255.255"));
    assert_false(hits_ip(r, "11.0.0.0"));
    assert_false(hits_ip(r, "9.255.255.255"));
    assert_true(hits_ip(r, "192.168.1.0"));   /* host bits of the rule are masked */
    assert_true(hits_ip(r, "192.168.2.255")); /* adjacent ranges merged */
    assert_false(hits_ip(r, "192.168.3.0"));
    assert_false(hits_ip(r, "192.168.0.255"));
    assert_true(hits_ip(r, "203.0.113.9"));
    assert_false(hits_ip(r, "203.0.113.10"));
    assert_true(hits_ip(r, "2001:db8:1::5"));
    assert_false(hits_ip(r, "2001:db9::1"));
    assert_true(hits_ip(r, "::ffff:10.1.2.3")); /* v4-mapped IPv6 is matched as IPv4 */
    assert_false(hits_ip(r, "::a01:203"));      /* IPv4-compatible is not mapped */
    /* a domain destination matches only when its text is an IP literal */
    assert_true(hits_domain(r, "10.1.2.3"));
    assert_true(hits_domain(r, "2001:db8::1"));
    assert_false(hits_domain(r, "ten.example"));
    sv_routes_free(r);

    sv_route_match all = {.kind = SV_MATCH_CIDR, .cidr = cidr_of("::", 0)};
    r = one_rule(&all, 1, NULL, 0);
    assert_true(hits_ip(r, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
    assert_false(hits_ip(r, "1.2.3.4")); /* ::/0 covers IPv6 only */
    sv_routes_free(r);
}

static void port_range_is_inclusive(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_PORT, .port_lo = 1000, .port_hi = 2000};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    uint16_t yes[] = {1000, 1500, 2000}, no[] = {0, 999, 2001, 65535};
    for (size_t i = 0; i < 3; i++) {
        sv_dest d = dest_domain("example.com", yes[i]);
        assert_true(hits(r, &d, NULL, "in", NULL, SV_NET_TCP));
    }
    for (size_t i = 0; i < 4; i++) {
        sv_dest d = dest_domain("example.com", no[i]);
        assert_false(hits(r, &d, NULL, "in", NULL, SV_NET_TCP));
    }
    assert_false(hits(r, NULL, NULL, "in", NULL, SV_NET_TCP));
    sv_routes_free(r);
}

static void network_separates_tcp_from_udp(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_NETWORK, .network = SV_NET_UDP};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    sv_dest d = dest_ip("192.0.2.1", 53);
    assert_true(hits(r, &d, NULL, "in", NULL, SV_NET_UDP));
    assert_false(hits(r, &d, NULL, "in", NULL, SV_NET_TCP));
    sv_routes_free(r);
}

static void inbound_tag_selects_the_route(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_INBOUND, .text = "ss-in"};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    sv_dest d = dest_ip("192.0.2.1", 80);
    assert_true(hits(r, &d, NULL, "ss-in", NULL, SV_NET_TCP));
    assert_false(hits(r, &d, NULL, "ss-in2", NULL, SV_NET_TCP));
    assert_false(hits(r, &d, NULL, "SS-IN", NULL, SV_NET_TCP)); /* tags are exact */
    assert_false(hits(r, &d, NULL, NULL, NULL, SV_NET_TCP));
    sv_routes_free(r);
}

static void source_cidr_matches_the_client_address(void **state)
{
    (void)state;
    sv_route_match m[] = {{.kind = SV_MATCH_SOURCE_CIDR, .cidr = cidr_of("198.51.100.0", 24)},
                          {.kind = SV_MATCH_SOURCE_CIDR, .cidr = cidr_of("fd00::", 8)}};
    sv_routes *r = one_rule(m, 2, NULL, 0);
    sv_dest d = dest_ip("198.51.100.7", 80); /* the destination is not the source */
    struct sockaddr_storage in = sockaddr_of("198.51.100.200"), out = sockaddr_of("198.51.101.1");
    struct sockaddr_storage in6 = sockaddr_of("fd12::1"), mapped = sockaddr_of("::ffff:198.51.100.1");
    assert_true(hits(r, &d, NULL, "in", (struct sockaddr *)&in, SV_NET_TCP));
    assert_true(hits(r, &d, NULL, "in", (struct sockaddr *)&in6, SV_NET_TCP));
    assert_true(hits(r, &d, NULL, "in", (struct sockaddr *)&mapped, SV_NET_TCP));
    assert_false(hits(r, &d, NULL, "in", (struct sockaddr *)&out, SV_NET_TCP));
    assert_false(hits(r, &d, NULL, "in", NULL, SV_NET_TCP));
    struct sockaddr unix_sa = {.sa_family = AF_UNIX};
    assert_false(hits(r, &d, NULL, "in", &unix_sa, SV_NET_TCP));
    sv_routes_free(r);
}

/* ---- route_target: the four source combinations (seed 000 tests/unit/router.rs) ------- */

static sv_routes *source_table(void)
{
    static sv_route_match m;
    m = (sv_route_match){.kind = SV_MATCH_SOURCE_CIDR, .cidr = cidr_of("10.0.0.1", 32)};
    return one_rule(&m, 1, NULL, 0);
}

static bool hits_from(const sv_routes *r, const struct sockaddr *flow, const struct sockaddr *listener)
{
    sv_dest d = dest_ip("192.0.2.1", 80);
    return hits(r, &d, NULL, "in", sv_route_source(flow, listener), SV_NET_TCP);
}

static void the_circuits_own_source_wins_over_the_listeners(void **state)
{
    (void)state;
    sv_routes *r = source_table();
    struct sockaddr_storage flow = sockaddr_of("10.0.0.1"), listener = sockaddr_of("10.0.0.2");
    assert_ptr_equal(sv_route_source((struct sockaddr *)&flow, (struct sockaddr *)&listener), &flow);
    assert_true(hits_from(r, (struct sockaddr *)&flow, (struct sockaddr *)&listener));
    /* swapped: the flow's non-matching source wins over a matching listener source */
    assert_false(hits_from(r, (struct sockaddr *)&listener, (struct sockaddr *)&flow));
    sv_routes_free(r);
}

static void without_one_the_listeners_source_is_used(void **state)
{
    (void)state;
    sv_routes *r = source_table();
    struct sockaddr_storage listener = sockaddr_of("10.0.0.1");
    assert_ptr_equal(sv_route_source(NULL, (struct sockaddr *)&listener), &listener);
    assert_true(hits_from(r, NULL, (struct sockaddr *)&listener));
    sv_routes_free(r);
}

static void with_neither_there_is_no_source_to_match_on(void **state)
{
    (void)state;
    sv_routes *r = source_table();
    assert_null(sv_route_source(NULL, NULL));
    assert_false(hits_from(r, NULL, NULL));
    sv_routes_free(r);
}

static void a_circuit_source_works_with_no_listener_source(void **state)
{
    (void)state;
    sv_routes *r = source_table();
    struct sockaddr_storage flow = sockaddr_of("10.0.0.1");
    assert_true(hits_from(r, (struct sockaddr *)&flow, NULL));
    sv_routes_free(r);
}

/* ---- sniffed names, inbound restriction, single, errors --------------------------------- */

static void a_sniffed_name_is_an_extra_domain_candidate(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "sniffed.example"};
    sv_routes *r = one_rule(&m, 1, NULL, 0);
    sv_dest ip = dest_ip("127.0.0.1", 443), other = dest_domain("other.example", 443);
    assert_true(hits(r, &ip, "www.Sniffed.Example", "in", NULL, SV_NET_TCP));
    assert_true(hits(r, &other, "sniffed.example", "in", NULL, SV_NET_TCP));
    assert_false(hits(r, &ip, "unsniffed.example", "in", NULL, SV_NET_TCP));
    assert_false(hits(r, &ip, NULL, "in", NULL, SV_NET_TCP));
    sv_routes_free(r);
}

static void a_rule_with_inbounds_applies_only_to_those_inbounds(void **state)
{
    (void)state;
    sv_route_match m = {.kind = SV_MATCH_PORT, .port_lo = 80, .port_hi = 80};
    char *only[] = {"node-b", "node-a"};
    sv_routes *r = one_rule(&m, 1, only, 2);
    sv_dest d80 = dest_ip("192.0.2.1", 80), d81 = dest_ip("192.0.2.1", 81);
    assert_true(hits(r, &d80, NULL, "node-a", NULL, SV_NET_TCP));
    assert_true(hits(r, &d80, NULL, "node-b", NULL, SV_NET_TCP));
    assert_false(hits(r, &d80, NULL, "node-c", NULL, SV_NET_TCP));
    assert_false(hits(r, &d80, NULL, NULL, NULL, SV_NET_TCP));
    assert_false(hits(r, &d81, NULL, "node-a", NULL, SV_NET_TCP));
    sv_routes_free(r);
}

static void the_first_matching_rule_wins_and_any_matcher_suffices(void **state)
{
    (void)state;
    sv_route_match a[] = {{.kind = SV_MATCH_DOMAIN, .text = "a.example"},
                          {.kind = SV_MATCH_PORT, .port_lo = 8080, .port_hi = 8080}};
    sv_route_match b = {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "example"};
    sv_route_rule rules[] = {{.matchers = a, .n_matchers = 2, .outbound = "one"},
                             {.matchers = &b, .n_matchers = 1, .outbound = "two"}};
    sv_route_spec spec = {.rules = rules, .n_rules = 2, .default_outbound = "one"};
    sv_routes *r = NULL;
    assert_int_equal(sv_routes_compile(&spec, &r, NULL), 0);
    assert_int_equal(sv_routes_n_slots(r), 2);
    sv_dest d1 = dest_domain("a.example", 1), d2 = dest_domain("b.example", 8080);
    sv_dest d3 = dest_domain("b.example", 1), d4 = dest_domain("b.test", 1);
    sv_route_query q = {.dest = &d1, .network = SV_NET_TCP};
    assert_int_equal(sv_routes_decide(r, &q).rule, 0);
    q.dest = &d2;
    assert_int_equal(sv_routes_decide(r, &q).rule, 0);
    q.dest = &d3;
    sv_decision dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.rule, 1);
    assert_int_equal(dec.slot, 1);
    q.dest = &d4;
    dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.rule, -1);
    assert_int_equal(dec.slot, 0);
    sv_routes_free(r);
}

static void single_is_one_slot_with_no_rules(void **state)
{
    (void)state;
    sv_routes *r = sv_routes_single("block");
    assert_non_null(r);
    assert_int_equal(sv_routes_n_slots(r), 1);
    assert_string_equal(sv_routes_slot_tag(r, 0), "block");
    sv_dest d = dest_domain("example.com", 53);
    sv_route_query q = {.dest = &d, .inbound = "in", .network = SV_NET_UDP};
    sv_decision dec = sv_routes_decide(r, &q);
    assert_int_equal(dec.slot, 0);
    assert_int_equal(dec.rule, -1);
    sv_routes_free(r);

    r = sv_routes_single(NULL); /* the empty plane's tag */
    assert_non_null(r);
    assert_string_equal(sv_routes_slot_tag(r, 0), "");
    sv_routes_free(r);
}

static void expect_compile_error(sv_route_match *m)
{
    sv_route_rule rule = {.matchers = m, .n_matchers = 1, .outbound = "x"};
    sv_route_spec spec = {.rules = &rule, .n_rules = 1, .default_outbound = "y"};
    sv_routes *r = (sv_routes *)&spec; /* must be reset to NULL */
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&spec, &r, &err), -EINVAL);
    assert_null(r);
    assert_int_equal(err.code, -EINVAL);
    assert_non_null(strstr(err.msg, "building route failed: rule 0"));
}

static void invalid_matchers_are_refused_with_the_seed_prefix(void **state)
{
    (void)state;
    sv_route_match bad[] = {
        {.kind = SV_MATCH_CIDR, .cidr = {.family = AF_INET, .prefix = 33}},
        {.kind = SV_MATCH_SOURCE_CIDR, .cidr = {.family = AF_INET6, .prefix = 129}},
        {.kind = SV_MATCH_CIDR, .cidr = {.family = AF_UNIX, .prefix = 1}},
        {.kind = SV_MATCH_DOMAIN, .text = "."},
        {.kind = SV_MATCH_DOMAIN_SUFFIX, .text = NULL},
        {.kind = SV_MATCH_PORT, .port_lo = 9, .port_hi = 8},
        {.kind = SV_MATCH_NETWORK, .network = 7},
        {.kind = SV_MATCH_REGEX, .text = "a(b"},
        {.kind = SV_MATCH_REGEX, .text = ""},
        {.kind = SV_MATCH_REGEX, .text = NULL},
        {.kind = 99},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_compile_error(&bad[i]);

    sv_route_spec nodefault = {0};
    sv_routes *r = NULL;
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&nodefault, &r, &err), -EINVAL);
    assert_string_equal(err.msg, "building route failed: no default outbound");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_rule_naming_a_tag_shares_that_tags_slot),
        cmocka_unit_test(the_default_tag_gets_the_last_slot_when_no_rule_names_it),
        cmocka_unit_test(domain_matches_the_whole_name_ignoring_case_and_a_trailing_dot),
        cmocka_unit_test(domain_suffix_matches_the_name_and_its_subdomains_only),
        cmocka_unit_test(a_decision_carries_its_rules_dns_server),
        cmocka_unit_test(regex_is_searched_caseless_in_the_destination_name),
        cmocka_unit_test(regex_matches_the_sniffed_name),
        cmocka_unit_test(regex_matches_an_ip_literal_without_the_port_and_audit_ids_are_kept),
        cmocka_unit_test(domain_keyword_matches_a_substring),
        cmocka_unit_test(cidr_matches_the_destination_ip_of_either_family),
        cmocka_unit_test(port_range_is_inclusive),
        cmocka_unit_test(network_separates_tcp_from_udp),
        cmocka_unit_test(inbound_tag_selects_the_route),
        cmocka_unit_test(source_cidr_matches_the_client_address),
        cmocka_unit_test(the_circuits_own_source_wins_over_the_listeners),
        cmocka_unit_test(without_one_the_listeners_source_is_used),
        cmocka_unit_test(with_neither_there_is_no_source_to_match_on),
        cmocka_unit_test(a_circuit_source_works_with_no_listener_source),
        cmocka_unit_test(a_sniffed_name_is_an_extra_domain_candidate),
        cmocka_unit_test(a_rule_with_inbounds_applies_only_to_those_inbounds),
        cmocka_unit_test(the_first_matching_rule_wins_and_any_matcher_suffices),
        cmocka_unit_test(single_is_one_slot_with_no_rules),
        cmocka_unit_test(invalid_matchers_are_refused_with_the_seed_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
