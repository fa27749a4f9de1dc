/*
 * Unit tests for internal destinations (supervisor/netclass.c) and the routing decision that
 * exempts a destination a rule names (supervisor/router.c); issue 15, "Proxy users can reach
 * the node itself". Pure: nothing here dials or sends anything.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "supervisor/netclass.h"
#include "supervisor/router.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static sv_ip16 ip_of(const char *text)
{
    sv_ip16 ip;
    uint8_t b[16];
    if (inet_pton(AF_INET, text, b) == 1) {
        assert_true(sv_ip16_from(AF_INET, b, &ip));
    } else {
        assert_int_equal(inet_pton(AF_INET6, text, b), 1);
        assert_true(sv_ip16_from(AF_INET6, b, &ip));
    }
    return ip;
}

static enum sv_addr_class class_of(const char *text)
{
    uint8_t b[16];
    if (inet_pton(AF_INET, text, b) == 1)
        return sv_addr_classify(AF_INET, b);
    assert_int_equal(inet_pton(AF_INET6, text, b), 1);
    return sv_addr_classify(AF_INET6, b);
}

typedef struct class_case {
    const char *addr;
    enum sv_addr_class want;
} class_case;

static void check_cases(const class_case *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum sv_addr_class got = class_of(v[i].addr);
        if (got != v[i].want)
            fail_msg("%s: class %d, expected %d", v[i].addr, (int)got, (int)v[i].want);
        /* the same address as an sv_ip16 (IPv4 mapped) classifies the same way */
        sv_ip16 ip = ip_of(v[i].addr);
        assert_int_equal(sv_addr_classify(AF_INET6, ip.b), v[i].want);
    }
}

/* ---- classification ---------------------------------------------------------------------- */

static void ipv4_ranges_and_their_edges(void **state)
{
    (void)state;
    static const class_case v[] = {
        {"0.0.0.0", SV_ADDR_UNSPECIFIED},       {"0.255.255.255", SV_ADDR_UNSPECIFIED},
        {"1.0.0.0", SV_ADDR_PUBLIC},            {"9.255.255.255", SV_ADDR_PUBLIC},
        {"10.0.0.0", SV_ADDR_PRIVATE},          {"10.255.255.255", SV_ADDR_PRIVATE},
        {"11.0.0.0", SV_ADDR_PUBLIC},           {"100.63.255.255", SV_ADDR_PUBLIC},
        {"100.64.0.0", SV_ADDR_SHARED},         {"100.127.255.255", SV_ADDR_SHARED},
        {"100.128.0.0", SV_ADDR_PUBLIC},        {"126.255.255.255", SV_ADDR_PUBLIC},
        {"127.0.0.1", SV_ADDR_LOOPBACK},        {"127.0.0.2", SV_ADDR_LOOPBACK},
        {"127.255.255.255", SV_ADDR_LOOPBACK},  {"128.0.0.0", SV_ADDR_PUBLIC},
        {"169.253.255.255", SV_ADDR_PUBLIC},    {"169.254.0.0", SV_ADDR_LINK_LOCAL},
        {"169.254.169.254", SV_ADDR_LINK_LOCAL}, {"169.255.0.0", SV_ADDR_PUBLIC},
        {"172.15.255.255", SV_ADDR_PUBLIC},     {"172.16.0.0", SV_ADDR_PRIVATE},
        {"172.31.255.255", SV_ADDR_PRIVATE},    {"172.32.0.0", SV_ADDR_PUBLIC},
        {"192.167.255.255", SV_ADDR_PUBLIC},    {"192.168.0.0", SV_ADDR_PRIVATE},
        {"192.168.255.255", SV_ADDR_PRIVATE},   {"192.169.0.0", SV_ADDR_PUBLIC},
        {"223.255.255.255", SV_ADDR_PUBLIC},    {"224.0.0.0", SV_ADDR_MULTICAST},
        {"239.255.255.250", SV_ADDR_MULTICAST}, {"240.0.0.0", SV_ADDR_RESERVED},
        {"255.255.255.255", SV_ADDR_RESERVED},  {"8.8.8.8", SV_ADDR_PUBLIC},
        {"203.0.113.7", SV_ADDR_PUBLIC},
    };
    check_cases(v, sizeof v / sizeof v[0]);
}

static void ipv6_ranges_and_their_edges(void **state)
{
    (void)state;
    static const class_case v[] = {
        {"::", SV_ADDR_UNSPECIFIED},           {"::1", SV_ADDR_LOOPBACK},
        {"fbff:ffff::1", SV_ADDR_PUBLIC},      {"fc00::", SV_ADDR_PRIVATE},
        {"fd12:3456:789a::1", SV_ADDR_PRIVATE}, {"fdff:ffff::ffff", SV_ADDR_PRIVATE},
        {"fe00::1", SV_ADDR_PUBLIC},           {"fe7f:ffff::1", SV_ADDR_PUBLIC},
        {"fe80::", SV_ADDR_LINK_LOCAL},        {"fe80::1", SV_ADDR_LINK_LOCAL},
        {"febf:ffff::1", SV_ADDR_LINK_LOCAL},  {"fec0::1", SV_ADDR_PRIVATE},
        {"feff:ffff::1", SV_ADDR_PRIVATE},     {"ff00::", SV_ADDR_MULTICAST},
        {"ff02::1", SV_ADDR_MULTICAST},        {"2001:4860:4860::8888", SV_ADDR_PUBLIC},
        {"2606:4700::1111", SV_ADDR_PUBLIC},
    };
    check_cases(v, sizeof v / sizeof v[0]);
}

static void ipv6_forms_of_an_ipv4_address_are_classified_by_it(void **state)
{
    (void)state;
    static const class_case v[] = {
        {"::ffff:127.0.0.1", SV_ADDR_LOOPBACK},  {"::ffff:127.0.0.2", SV_ADDR_LOOPBACK},
        {"::ffff:10.1.2.3", SV_ADDR_PRIVATE},    {"::ffff:172.16.0.1", SV_ADDR_PRIVATE},
        {"::ffff:192.168.1.1", SV_ADDR_PRIVATE}, {"::ffff:169.254.169.254", SV_ADDR_LINK_LOCAL},
        {"::ffff:100.64.0.1", SV_ADDR_SHARED},   {"::ffff:0.0.0.0", SV_ADDR_UNSPECIFIED},
        {"::ffff:224.0.0.1", SV_ADDR_MULTICAST}, {"::ffff:255.255.255.255", SV_ADDR_RESERVED},
        {"::ffff:8.8.8.8", SV_ADDR_PUBLIC},
        {"::127.0.0.1", SV_ADDR_LOOPBACK},       {"::10.0.0.1", SV_ADDR_PRIVATE},
        {"::8.8.8.8", SV_ADDR_PUBLIC},
        {"64:ff9b::127.0.0.1", SV_ADDR_LOOPBACK}, {"64:ff9b::192.168.0.1", SV_ADDR_PRIVATE},
        {"64:ff9b::8.8.8.8", SV_ADDR_PUBLIC},
        {"2002:7f00:1::1", SV_ADDR_LOOPBACK},    {"2002:a00:1::", SV_ADDR_PRIVATE},
        {"2002:808:808::1", SV_ADDR_PUBLIC},
    };
    check_cases(v, sizeof v / sizeof v[0]);
}

static void other_families_are_not_classified(void **state)
{
    (void)state;
    uint8_t b[16] = {127, 0, 0, 1};
    sv_ip16 ip;
    assert_int_equal(sv_addr_classify(AF_UNIX, b), SV_ADDR_PUBLIC);
    assert_false(sv_ip16_from(AF_UNIX, b, &ip));
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_false(sv_ip16_from_sockaddr(&sa, &ip));
    assert_false(sv_ip16_from_sockaddr(NULL, &ip));
}

static void a_sockaddr_of_either_family_gives_the_same_ip16(void **state)
{
    (void)state;
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(80)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(80)};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a4.sin_addr), 1);
    assert_int_equal(inet_pton(AF_INET6, "::ffff:127.0.0.1", &a6.sin6_addr), 1);
    sv_ip16 x, y, z = ip_of("127.0.0.1");
    assert_true(sv_ip16_from_sockaddr((struct sockaddr *)&a4, &x));
    assert_true(sv_ip16_from_sockaddr((struct sockaddr *)&a6, &y));
    assert_memory_equal(x.b, y.b, 16);
    assert_memory_equal(x.b, z.b, 16);
}

/* ---- the node's own addresses ------------------------------------------------------------ */

static void an_addrset_is_sorted_without_duplicates(void **state)
{
    (void)state;
    sv_ip16 v[] = {ip_of("203.0.113.9"), ip_of("2001:db8::1"), ip_of("198.51.100.1"),
                   ip_of("203.0.113.9"), ip_of("::ffff:198.51.100.1")};
    sv_addrset *s = sv_addrset_new(v, 5);
    assert_non_null(s);
    assert_int_equal(s->n, 3);
    for (size_t i = 1; i < s->n; i++)
        assert_true(memcmp(s->v[i - 1].b, s->v[i].b, 16) < 0);
    sv_ip16 in = ip_of("198.51.100.1"), out = ip_of("198.51.100.2");
    assert_true(sv_addrset_has(s, &in));
    assert_false(sv_addrset_has(s, &out));
    assert_false(sv_addrset_has(NULL, &in));

    sv_ip16 w[] = {ip_of("2001:db8::1"), ip_of("198.51.100.1"), ip_of("203.0.113.9")};
    sv_addrset *t = sv_addrset_new(w, 3), *e = sv_addrset_new(NULL, 0);
    assert_non_null(t);
    assert_non_null(e);
    assert_true(sv_addrset_equal(s, t));
    assert_false(sv_addrset_equal(s, e));
    assert_true(sv_addrset_equal(e, NULL));
    sv_addrset_ref(t);
    sv_addrset_unref(t);
    sv_addrset_unref(t);
    sv_addrset_unref(e);
    sv_addrset_unref(s);
    sv_addrset_unref(NULL);
}

static void the_hosts_addresses_include_loopback_and_the_listen_addresses(void **state)
{
    (void)state;
    const char *extra[] = {"203.0.113.9", "2001:db8::7", "not-an-address", NULL};
    sv_addrset *s = NULL;
    assert_int_equal(sv_addrset_from_host(extra, 4, &s), 0);
    assert_non_null(s);
    sv_ip16 lo = ip_of("127.0.0.1"), a = ip_of("203.0.113.9"), b = ip_of("2001:db8::7");
    sv_ip16 other = ip_of("203.0.113.10");
    assert_true(sv_addrset_has(s, &lo));
    assert_true(sv_addrset_has(s, &a));
    assert_true(sv_addrset_has(s, &b));
    assert_false(sv_addrset_has(s, &other));
    sv_addrset_unref(s);
}

static void refused_internal_or_own_unless_allowed_or_named(void **state)
{
    (void)state;
    sv_ip16 own_v[] = {ip_of("203.0.113.9"), ip_of("2001:db8::7")};
    sv_addrset *own = sv_addrset_new(own_v, 2);
    assert_non_null(own);
    const char *refused[] = {"127.0.0.1", "::1", "10.0.0.1", "203.0.113.9", "2001:db8::7",
                             "::ffff:203.0.113.9", "169.254.169.254", "fd00::1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        sv_ip16 ip = ip_of(refused[i]);
        if (!sv_dest_refused(false, false, &ip, own))
            fail_msg("%s is not refused", refused[i]);
        assert_false(sv_dest_refused(true, false, &ip, own));
        assert_false(sv_dest_refused(false, true, &ip, own));
    }
    sv_ip16 pub = ip_of("203.0.113.10"), pub6 = ip_of("2001:db8::8");
    assert_false(sv_dest_refused(false, false, &pub, own));
    assert_false(sv_dest_refused(false, false, &pub6, own));
    assert_false(sv_dest_refused(false, false, &pub, NULL));
    sv_addrset_unref(own);
}

/* ---- the routing decision ---------------------------------------------------------------- */

/*
 * The table the connector sees (direct everywhere, so only the private rule refuses):
 *   0: cidr 127.0.0.1/32        → direct   (names the destination)
 *   1: full db.internal         → direct   (names the destination)
 *   2: port 8080                → direct   (does not name it)
 *   3: regex ^admin\.           → direct   (names the destination)
 *   4: cidr 192.168.7.0/24, port 9 → direct (either)
 *   default                     → direct
 */
typedef struct route_fixture {
    sv_routes *r;
} route_fixture;

static int routes_setup(void **state)
{
    static route_fixture f;
    sv_route_match m0 = {.kind = SV_MATCH_CIDR, .cidr = {.family = AF_INET, .prefix = 32,
                                                         .addr = {127, 0, 0, 1}}};
    sv_route_match m1 = {.kind = SV_MATCH_DOMAIN, .text = "db.internal"};
    sv_route_match m2 = {.kind = SV_MATCH_PORT, .port_lo = 8080, .port_hi = 8080};
    sv_route_match m3 = {.kind = SV_MATCH_REGEX, .text = "^admin\\."};
    sv_route_match m4[] = {{.kind = SV_MATCH_PORT, .port_lo = 9, .port_hi = 9},
                           {.kind = SV_MATCH_CIDR, .cidr = {.family = AF_INET, .prefix = 24,
                                                            .addr = {192, 168, 7, 0}}}};
    sv_route_rule rules[] = {
        {.matchers = &m0, .n_matchers = 1, .outbound = "direct"},
        {.matchers = &m1, .n_matchers = 1, .outbound = "direct"},
        {.matchers = &m2, .n_matchers = 1, .outbound = "direct"},
        {.matchers = &m3, .n_matchers = 1, .outbound = "direct"},
        {.matchers = m4, .n_matchers = 2, .outbound = "direct"},
    };
    sv_route_spec spec = {.rules = rules, .n_rules = 5, .default_outbound = "direct"};
    sv_error err = {0};
    assert_int_equal(sv_routes_compile(&spec, &f.r, &err), 0);
    *state = &f;
    return 0;
}

static int routes_teardown(void **state)
{
    route_fixture *f = *state;
    sv_routes_free(f->r);
    return 0;
}

/** Route a TCP flow to @p host (a name or an IP literal sent as an IP) : @p port, optionally
 * with a sniffed name; expect rule @p rule; then apply the connector's rule to the address it
 * resolved to (@p resolved) with allow_private @p allow. @return true when refused. */
static bool decide_refused(const sv_routes *r, const char *host, bool as_ip, uint16_t port,
                           const char *sniffed, int rule, const char *resolved, bool allow)
{
    sv_dest d = {.port = port, .network = SV_NET_TCP};
    if (as_ip && inet_pton(AF_INET, host, d.ip) == 1) {
        d.atyp = SV_ATYP_IPV4;
    } else if (as_ip) {
        assert_int_equal(inet_pton(AF_INET6, host, d.ip), 1);
        d.atyp = SV_ATYP_IPV6;
    } else {
        d.atyp = SV_ATYP_DOMAIN;
        snprintf(d.host, sizeof d.host, "%s", host);
    }
    sv_route_query q = {.dest = &d, .sniffed = sniffed, .inbound = "n1", .network = SV_NET_TCP};
    sv_decision dec = sv_routes_decide(r, &q);
    if (dec.rule != rule)
        fail_msg("%s:%u: rule %d, expected %d", host, port, dec.rule, rule);
    if (rule < 0)
        assert_false(dec.names_dest);
    sv_ip16 ip = ip_of(resolved);
    return sv_dest_refused(allow, dec.names_dest, &ip, NULL);
}

static void the_default_route_refuses_every_internal_range(void **state)
{
    route_fixture *f = *state;
    const char *internal[] = {
        "127.0.0.2", "127.255.0.1", "10.0.0.1", "10.255.255.254", "172.16.0.1",
        "172.31.255.254", "192.168.0.1", "192.168.255.254", "169.254.169.254", "100.64.0.1",
        "100.127.255.254", "0.0.0.0", "224.0.0.251", "239.1.2.3", "255.255.255.255",
        "::1", "::", "fc00::1", "fd00:ec2::254", "fe80::1", "ff02::fb", "::ffff:127.0.0.2",
        "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::10.0.0.1",
    };
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++) {
        if (!decide_refused(f->r, internal[i], true, 80, NULL, -1, internal[i], false))
            fail_msg("%s on the default route is not refused", internal[i]);
        assert_false(decide_refused(f->r, internal[i], true, 80, NULL, -1, internal[i], true));
    }
    const char *public[] = {"8.8.8.8", "1.1.1.1", "203.0.113.7", "2001:4860:4860::8888",
                            "::ffff:8.8.4.4", "172.32.0.1", "100.128.0.1"};
    for (size_t i = 0; i < sizeof public / sizeof public[0]; i++)
        assert_false(decide_refused(f->r, public[i], true, 80, NULL, -1, public[i], false));
}

static void a_name_is_judged_by_the_address_it_resolves_to(void **state)
{
    route_fixture *f = *state;
    assert_true(decide_refused(f->r, "localhost", false, 9090, NULL, -1, "127.0.0.1", false));
    assert_true(decide_refused(f->r, "localhost", false, 9090, NULL, -1, "::1", false));
    assert_true(decide_refused(f->r, "metadata.example", false, 80, NULL, -1, "169.254.169.254",
                               false));
    assert_false(decide_refused(f->r, "example.com", false, 80, NULL, -1, "93.184.216.34",
                                false));
    assert_false(decide_refused(f->r, "localhost", false, 9090, NULL, -1, "127.0.0.1", true));
}

static void a_rule_naming_the_destination_allows_it(void **state)
{
    route_fixture *f = *state;
    /* cidr 127.0.0.1/32: the IP, the IP-literal name, the mapped IPv6 form */
    assert_false(decide_refused(f->r, "127.0.0.1", true, 9090, NULL, 0, "127.0.0.1", false));
    assert_false(decide_refused(f->r, "127.0.0.1", false, 9090, NULL, 0, "127.0.0.1", false));
    assert_false(decide_refused(f->r, "::ffff:127.0.0.1", true, 9090, NULL, 0,
                                "::ffff:127.0.0.1", false));
    /* ... but not its neighbour */
    assert_true(decide_refused(f->r, "127.0.0.2", true, 9090, NULL, -1, "127.0.0.2", false));
    /* full db.internal, whatever it resolves to; regex ^admin\. on the name */
    assert_false(decide_refused(f->r, "db.internal", false, 5432, NULL, 1, "10.0.0.5", false));
    assert_false(decide_refused(f->r, "DB.Internal.", false, 5432, NULL, 1, "10.0.0.5", false));
    assert_false(decide_refused(f->r, "admin.corp", false, 443, NULL, 3, "192.168.1.1", false));
    assert_true(decide_refused(f->r, "db2.internal", false, 5432, NULL, -1, "10.0.0.6", false));
    /* a rule with a port matcher and a cidr matcher: the cidr names 192.168.7.x */
    assert_false(decide_refused(f->r, "192.168.7.20", true, 9, NULL, 4, "192.168.7.20", false));
    assert_true(decide_refused(f->r, "192.168.8.20", true, 9, NULL, 4, "192.168.8.20", false));
}

static void a_rule_that_matched_on_something_else_does_not(void **state)
{
    route_fixture *f = *state;
    /* port 8080 → direct does not name 10.0.0.1 */
    assert_true(decide_refused(f->r, "10.0.0.1", true, 8080, NULL, 2, "10.0.0.1", false));
    assert_true(decide_refused(f->r, "localhost", false, 8080, NULL, 2, "127.0.0.1", false));
    /* a sniffed name is the client's word: it matches rule 1 but does not name the IP */
    assert_true(decide_refused(f->r, "10.0.0.5", true, 443, "db.internal", 1, "10.0.0.5", false));
    assert_true(decide_refused(f->r, "127.0.0.3", true, 443, "admin.corp", 3, "127.0.0.3", false));
    /* allow_private still allows them */
    assert_false(decide_refused(f->r, "10.0.0.1", true, 8080, NULL, 2, "10.0.0.1", true));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ipv4_ranges_and_their_edges),
        cmocka_unit_test(ipv6_ranges_and_their_edges),
        cmocka_unit_test(ipv6_forms_of_an_ipv4_address_are_classified_by_it),
        cmocka_unit_test(other_families_are_not_classified),
        cmocka_unit_test(a_sockaddr_of_either_family_gives_the_same_ip16),
        cmocka_unit_test(an_addrset_is_sorted_without_duplicates),
        cmocka_unit_test(the_hosts_addresses_include_loopback_and_the_listen_addresses),
        cmocka_unit_test(refused_internal_or_own_unless_allowed_or_named),
        cmocka_unit_test_setup_teardown(the_default_route_refuses_every_internal_range,
                                        routes_setup, routes_teardown),
        cmocka_unit_test_setup_teardown(a_name_is_judged_by_the_address_it_resolves_to,
                                        routes_setup, routes_teardown),
        cmocka_unit_test_setup_teardown(a_rule_naming_the_destination_allows_it,
                                        routes_setup, routes_teardown),
        cmocka_unit_test_setup_teardown(a_rule_that_matched_on_something_else_does_not,
                                        routes_setup, routes_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
