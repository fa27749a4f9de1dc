/*
 * Unit tests for sv_validate (supervisor/validate.c; seed 001 "validate", ApplyError texts;
 * seed 000 "route references unknown outbound <tag>"). One test per rule, each asserting the
 * exact text, plus the check order (the first violation wins).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "supervisor/supervisor.h"

/* ---- fixture: a valid spec built from string literals (nothing to free) ------------------ */

typedef struct fx {
    sv_spec spec;
    sv_inbound_spec in[3];
    sv_outbound_spec out[3];
    sv_user_set sets[2];
    sv_user users[3];
    sv_route_rule rules[2];
    sv_route_match m0[2], m1[1];
    char *r0_inbounds[1];
} fx;

/*
 * inbounds ss1 127.0.0.1:8388 and ss2 [::1]:8389 (Shadowsocks, user set u); outbounds direct and
 * block; user set u {1, 2}; route: rule 0 (domain suffix ads.example or port 25, from ss1) →
 * block, rule 1 (10.0.0.0/8) → block, default direct.
 */
static void fx_init(fx *f)
{
    memset(f, 0, sizeof *f);
    f->in[0] = (sv_inbound_spec){.tag = "ss1", .bind = {"127.0.0.1", 8388}, .udp = true,
                                 .protocol = SV_INBOUND_SHADOWSOCKS,
                                 .ss_cipher = SV_SS_AES_128_GCM, .users = "u"};
    f->in[1] = (sv_inbound_spec){.tag = "ss2", .bind = {"::1", 8389},
                                 .protocol = SV_INBOUND_SHADOWSOCKS,
                                 .ss_cipher = SV_SS_CHACHA20_POLY1305, .users = "u"};
    f->out[0] = (sv_outbound_spec){.tag = "direct", .kind = SV_OUTBOUND_DIRECT};
    f->out[1] = (sv_outbound_spec){.tag = "block", .kind = SV_OUTBOUND_BLACKHOLE};
    f->users[0] = (sv_user){.id = 1, .label = "alice", .secret = "secret-1"};
    f->users[1] = (sv_user){.id = 2, .secret = "secret-2", .speed_limit = 1000};
    f->sets[0] = (sv_user_set){.tag = "u", .users = f->users, .n_users = 2};
    f->m0[0] = (sv_route_match){.kind = SV_MATCH_DOMAIN_SUFFIX, .text = "ads.example"};
    f->m0[1] = (sv_route_match){.kind = SV_MATCH_PORT, .port_lo = 25, .port_hi = 25};
    f->m1[0] = (sv_route_match){.kind = SV_MATCH_CIDR,
                                .cidr = {.family = AF_INET, .addr = {10}, .prefix = 8}};
    f->r0_inbounds[0] = "ss1";
    f->rules[0] = (sv_route_rule){.matchers = f->m0, .n_matchers = 2,
                                  .inbounds = f->r0_inbounds, .n_inbounds = 1,
                                  .outbound = "block"};
    f->rules[1] = (sv_route_rule){.matchers = f->m1, .n_matchers = 1, .outbound = "block"};
    f->spec = (sv_spec){.inbounds = f->in, .n_inbounds = 2, .outbounds = f->out,
                        .n_outbounds = 2, .user_sets = f->sets, .n_user_sets = 1,
                        .route = {.rules = f->rules, .n_rules = 2, .default_outbound = "direct"},
                        .user_removal = {.kind = SV_POLICY_CLOSE}};
}

static void expect_invalid(const fx *f, const char *text)
{
    sv_error err = {0};
    assert_int_equal(sv_validate(&f->spec, &err), -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, text);
}

static void expect_valid(const fx *f)
{
    sv_error err = {.code = -1, .msg = "stale"};
    int rc = sv_validate(&f->spec, &err);
    if (rc != 0)
        fail_msg("unexpected refusal: %s", err.msg);
    assert_int_equal(err.code, 0);
    assert_string_equal(err.msg, "");
}

/* ---- valid specs ------------------------------------------------------------------------- */

static void a_valid_spec_passes(void **state)
{
    fx f;
    fx_init(&f);
    expect_valid(&f);
    assert_int_equal(sv_validate(&f.spec, NULL), 0); /* err is optional */
}

static void the_same_tag_in_different_kinds_is_allowed(void **state)
{
    fx f;
    fx_init(&f);
    f.out[1].tag = "u"; /* outbound u next to user set u */
    f.rules[0].outbound = "u";
    f.rules[1].outbound = "u";
    f.in[1].tag = "direct"; /* inbound direct next to outbound direct */
    expect_valid(&f);
}

static void a_null_spec_is_refused(void **state)
{
    sv_error err = {0};
    assert_int_equal(sv_validate(NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "spec: missing");
}

/* ---- 1. tags ----------------------------------------------------------------------------- */

static void no_tag_may_be_empty(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1].tag = "";
    expect_invalid(&f, "a inbound tag must not be empty");
    fx_init(&f);
    f.out[0].tag = NULL; /* absent counts as empty */
    expect_invalid(&f, "a outbound tag must not be empty");
    fx_init(&f);
    f.sets[0].tag = "";
    expect_invalid(&f, "a user set tag must not be empty");
}

/* A tag with a control character, '"' or '\\' is refused without being printed (it would split
 * or garble the log line that names it); other bytes, UTF-8 included, are fine. */
static void a_tag_with_a_control_character_quote_or_backslash_is_refused(void **state)
{
    static const char *const bad[] = {"in\nx", "in\"x", "in\\x", "in\tx", "in\x7fx", "in\rx"};
    char tag[16];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx f;
        fx_init(&f);
        snprintf(tag, sizeof tag, "%s", bad[i]);
        f.in[1].tag = tag;
        expect_invalid(&f, "inbound tag 1: byte 2 is a control character, '\"' or '\\'");
        fx_init(&f);
        f.out[1].tag = tag;
        f.rules[0].outbound = tag;
        f.rules[1].outbound = tag;
        expect_invalid(&f, "outbound tag 1: byte 2 is a control character, '\"' or '\\'");
    }
    fx f;
    fx_init(&f);
    f.out[1].tag = "\xe9\xa6\x99\xe6\xb8\xaf-1 a/b";
    f.rules[0].outbound = f.out[1].tag;
    f.rules[1].outbound = f.out[1].tag;
    expect_valid(&f);
}

static void a_tag_longer_than_the_limit_is_refused(void **state)
{
    char tag[SV_TAG_MAX + 2];
    memset(tag, 'x', sizeof tag - 1);
    tag[SV_TAG_MAX + 1] = '\0';
    char want[256];
    snprintf(want, sizeof want, "outbound %s: the tag is longer than %d bytes", tag, SV_TAG_MAX);
    fx f;
    fx_init(&f);
    f.out[1].tag = tag;
    f.rules[0].outbound = tag;
    f.rules[1].outbound = tag;
    expect_invalid(&f, want);
    tag[SV_TAG_MAX] = '\0'; /* exactly the limit is fine */
    expect_valid(&f);
}

static void duplicate_inbound_tag(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1].tag = "ss1";
    expect_invalid(&f, "duplicate inbound tag ss1");
}

static void duplicate_outbound_tag(void **state)
{
    fx f;
    fx_init(&f);
    f.out[2] = (sv_outbound_spec){.tag = "direct", .kind = SV_OUTBOUND_BLACKHOLE};
    f.spec.n_outbounds = 3;
    expect_invalid(&f, "duplicate outbound tag direct");
}

static void duplicate_user_set_tag(void **state)
{
    fx f;
    fx_init(&f);
    f.sets[1] = (sv_user_set){.tag = "u"};
    f.spec.n_user_sets = 2;
    expect_invalid(&f, "duplicate user set tag u");
}

/* ---- 2. references ----------------------------------------------------------------------- */

static void an_inbound_references_an_unknown_user_set(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1].users = "nobody";
    expect_invalid(&f, "inbound ss2 references unknown user set nobody");
}

static void a_rule_references_an_unknown_outbound(void **state)
{
    fx f;
    fx_init(&f);
    f.rules[1].outbound = "proxy";
    expect_invalid(&f, "route references unknown outbound proxy");
}

static void the_default_references_an_unknown_outbound(void **state)
{
    fx f;
    fx_init(&f);
    f.spec.route.default_outbound = "gone";
    expect_invalid(&f, "route references unknown outbound gone");
}

static void a_rule_references_an_unknown_inbound(void **state)
{
    fx f;
    fx_init(&f);
    f.r0_inbounds[0] = "x";
    expect_invalid(&f, "route references unknown inbound x");
}

static void a_rule_without_an_outbound_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.rules[1].outbound = NULL;
    expect_invalid(&f, "route: rule 1 has no outbound");
}

static void a_rule_listing_an_empty_inbound_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.r0_inbounds[0] = "";
    expect_invalid(&f, "route: rule 0 lists an empty inbound tag");
}

static void a_route_without_a_default_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.spec.route.default_outbound = NULL;
    expect_invalid(&f, "route: there is no default outbound");
}

/* ---- 3. inbounds ------------------------------------------------------------------------- */

static void an_empty_bind_address_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].bind.address = NULL;
    expect_invalid(&f, "inbound ss1: the bind address must not be empty");
}

static void a_bind_address_must_be_an_ip_literal(void **state)
{
    static const char *bad[] = {"1.2.3", "localhost", "::1%lo", "1.2.3.4 ", "[::1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx f;
        fx_init(&f);
        f.in[0].bind.address = (char *)bad[i];
        char want[128];
        snprintf(want, sizeof want, "inbound ss1: address %s is not an IP address", bad[i]);
        expect_invalid(&f, want);
    }
}

static void port_zero_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1].bind.port = 0;
    expect_invalid(&f, "inbound ss2: port must be between 1 and 65535");
}

/* Issue 9: a vmess inbound needs a user set, carries UDP in its stream, may have TLS (with both
 * files in mode file) and has no fallback. */
static void a_vmess_inbound_is_checked(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1] = (sv_inbound_spec){.tag = "vm", .bind = {"::1", 8389},
                                .protocol = SV_INBOUND_VMESS, .users = "u"};
    expect_valid(&f);
    f.in[1].tls.cert = SV_CERT_SELF;
    expect_valid(&f);
    f.in[1].tls = (sv_inbound_tls){.cert = SV_CERT_FILE, .cert_file = "c.pem"};
    expect_invalid(&f, "inbound vm: cert mode file needs cert_file and key_file");
    f.in[1].tls = (sv_inbound_tls){.cert = SV_CERT_NONE};
    f.in[1].udp = true;
    expect_invalid(&f, "inbound vm: a vmess inbound carries UDP inside its stream; udp must be "
                       "false");
    f.in[1].udp = false;
    f.in[1].fallback = "127.0.0.1:80";
    expect_invalid(&f, "inbound vm: fallback is not served on a vmess inbound");
    f.in[1].fallback = NULL;
    f.in[1].users = NULL;
    expect_invalid(&f, "inbound vm: a vmess inbound needs a user set");
}

static void two_inbounds_on_one_bind_are_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.in[1].bind = (sv_bind){"127.0.0.1", 8388};
    expect_invalid(&f, "inbound ss2: bind 127.0.0.1:8388 is already used by inbound ss1");
}

static void a_bind_spelled_differently_is_still_the_same_bind(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].bind = (sv_bind){"::1", 8389};
    f.in[1].bind = (sv_bind){"0:0::1", 8389};
    expect_invalid(&f, "inbound ss2: bind [0:0::1]:8389 is already used by inbound ss1");
}

static void a_wildcard_bind_overlaps_a_specific_one_on_its_port(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].bind = (sv_bind){"0.0.0.0", 8388};
    f.in[1].bind = (sv_bind){"127.0.0.1", 8388};
    expect_invalid(&f, "inbound ss2: bind 127.0.0.1:8388 overlaps bind 0.0.0.0:8388 of inbound ss1");
    f.in[0].bind = (sv_bind){"::", 8388}; /* treated as dual-stack */
    expect_invalid(&f, "inbound ss2: bind 127.0.0.1:8388 overlaps bind [::]:8388 of inbound ss1");
}

static void binds_on_other_ports_or_families_do_not_overlap(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].bind = (sv_bind){"0.0.0.0", 8388};
    f.in[1].bind = (sv_bind){"0.0.0.0", 8389};
    expect_valid(&f);
    f.in[1].bind = (sv_bind){"::1", 8388}; /* an IPv4 wildcard does not cover IPv6 */
    expect_valid(&f);
}

static void an_unknown_protocol_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].protocol = 0;
    expect_invalid(&f, "inbound ss1: unknown protocol");
}

/* Issue 9: a vless inbound needs a user set and UDP in its stream; TLS is optional, a
 * certificate file needs both paths, a fallback must be HOST:PORT. */
static void vless_inbound_rules(void **state)
{
    (void)state;
    fx f;
    fx_init(&f);
    f.in[1] = (sv_inbound_spec){.tag = "vl", .bind = {"::1", 8389},
                                .protocol = SV_INBOUND_VLESS, .users = "u"};
    expect_valid(&f);
    f.in[1].tls.cert = SV_CERT_SELF;
    f.in[1].fallback = "127.0.0.1:80";
    expect_valid(&f);
    f.in[1].fallback = "web";
    expect_invalid(&f, "inbound vl: fallback \"web\" is not HOST:PORT");
    f.in[1].fallback = NULL;
    f.in[1].tls.cert = SV_CERT_FILE;
    f.in[1].tls.cert_file = "c.pem";
    expect_invalid(&f, "inbound vl: cert mode file needs cert_file and key_file");
    f.in[1].tls.cert = SV_CERT_SELF + 1;
    expect_invalid(&f, "inbound vl: unknown cert mode");
    f.in[1].tls.cert = SV_CERT_NONE;
    f.in[1].udp = true;
    expect_invalid(&f, "inbound vl: a vless inbound carries UDP inside its stream; udp must be "
                       "false");
    f.in[1].udp = false;
    f.in[1].users = NULL;
    expect_invalid(&f, "inbound vl: a vless inbound needs a user set");
}

static void an_unknown_cipher_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].ss_cipher = SV_SS_CHACHA20_POLY1305 + 1;
    expect_invalid(&f, "inbound ss1: unknown cipher");
}

/* Issue 10: a Shadowsocks 2022 inbound: a 2022 cipher, TCP only, a user set, a server key of the
 * cipher's length in base64, no server key with chacha20 (no identity headers). */
static void a_shadowsocks_2022_inbound_is_checked(void **state)
{
    (void)state;
    fx f;
    fx_init(&f);
    f.in[1].protocol = SV_INBOUND_SS2022;
    f.in[1].ss_cipher = SV_SS_2022_AES_128_GCM;
    f.in[1].ss_server_key = "NzhhN2QwMWMwMmQxYTlkMA==";
    expect_valid(&f);
    f.in[1].ss_server_key = NULL; /* single user: the core refuses a second user */
    expect_valid(&f);
    f.in[1].ss_server_key = "NzhhN2QwMWMwMmQxYTlkMA";
    expect_invalid(&f, "inbound ss2: server_key is not the standard base64 of 16 bytes");
    f.in[1].ss_server_key = "NzhhN2QwMWMwMmQxYTlk*A==";
    expect_invalid(&f, "inbound ss2: server_key is not the standard base64 of 16 bytes");
    f.in[1].ss_cipher = SV_SS_2022_AES_256_GCM;
    f.in[1].ss_server_key = "NzhhN2QwMWMwMmQxYTlkMA==";
    expect_invalid(&f, "inbound ss2: server_key is not the standard base64 of 32 bytes");
    f.in[1].ss_cipher = SV_SS_2022_CHACHA20_POLY1305;
    f.in[1].ss_server_key = "klmDzbDBonLE+cn2Qqk3rs5quAvEsruDf/tlHQhgXP0=";
    expect_invalid(&f, "inbound ss2: server_key: 2022-blake3-chacha20-poly1305 has no identity "
                       "headers (single user only)");
    f.in[1].ss_server_key = NULL;
    f.in[1].ss_cipher = SV_SS_AES_128_GCM;
    expect_invalid(&f, "inbound ss2: a shadowsocks-2022 inbound needs a 2022-blake3 cipher");
    f.in[1].ss_cipher = SV_SS_2022_AES_128_GCM;
    f.in[1].udp = true;
    expect_valid(&f);
    f.in[1].ss_cipher = SV_SS_2022_CHACHA20_POLY1305;
    expect_valid(&f);
    f.in[1].ss_cipher = SV_SS_2022_AES_128_GCM;
    f.in[1].udp = false;
    f.in[1].users = NULL;
    expect_invalid(&f, "inbound ss2: a shadowsocks-2022 inbound needs a user set");
    fx_init(&f);
    f.in[0].ss_cipher = SV_SS_2022_AES_128_GCM; /* a 2022 method on an AEAD inbound */
    expect_invalid(&f, "inbound ss1: unknown cipher");
}

static void a_shadowsocks_inbound_needs_a_user_set(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].users = NULL;
    expect_invalid(&f, "inbound ss1: a shadowsocks inbound needs a user set");
    f.in[0].users = "";
    expect_invalid(&f, "inbound ss1: a shadowsocks inbound needs a user set");
}

/* ---- 3. outbounds, user sets ------------------------------------------------------------- */

static void an_unknown_outbound_kind_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.out[1].kind = 99;
    expect_invalid(&f, "outbound block: unknown kind");
}

/* Issue 13 "Socket policy": what validate tells without the host. */
static void a_socket_policy_is_checked(void **state)
{
    fx f;
    (void)state;
    fx_init(&f);
    f.out[0].socket = (sv_socket_policy){.has_addr4 = true, .addr4 = {127, 0, 0, 2},
                                         .interface = "eth0", .mark = 7, .keepalive_idle_s = 60,
                                         .keepalive_interval_s = 10, .keepalive_count = 5};
    expect_valid(&f);
    f.out[1].socket.mark = 1;
    expect_invalid(&f, "outbound block: a socket policy needs a direct outbound");
    static const char *const bad_names[] = {".", "..", "a/b", "a b", "a:1"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        fx_init(&f);
        snprintf(f.out[0].socket.interface, SV_IFNAME_MAX, "%s", bad_names[i]);
        char want[128];
        snprintf(want, sizeof want, "outbound direct: interface \"%s\" is not a valid interface "
                 "name", bad_names[i]);
        expect_invalid(&f, want);
    }
    fx_init(&f);
    f.out[0].socket.keepalive_idle_s = SV_KEEPALIVE_IDLE_MAX + 1;
    expect_invalid(&f, "outbound direct: keepalive idle and interval are at most 32767 seconds");
    fx_init(&f);
    f.out[0].socket = (sv_socket_policy){.keepalive_idle_s = 1, .keepalive_count = 128};
    expect_invalid(&f, "outbound direct: keepalive count is at most 127");
    fx_init(&f);
    f.out[0].socket.keepalive_interval_s = 5;
    expect_invalid(&f, "outbound direct: keepalive interval and count need an idle time");
}

/* Issue 13: a dns route's server is "ip", "ipv4:port" or "[ipv6]:port". */
static void a_rules_dns_server_is_checked(void **state)
{
    fx f;
    (void)state;
    static char *const good[] = {"127.0.0.1", "127.0.0.1:5353", "[::1]:53", "::1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fx_init(&f);
        f.rules[1].dns_server = good[i];
        expect_valid(&f);
    }
    static char *const bad[] = {"https://dns.example/dns-query", "dns.example", "1.2.3.4:0",
                                "[::1]", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx_init(&f);
        f.rules[1].dns_server = bad[i];
        char want[160];
        snprintf(want, sizeof want, "route: rule 1: dns server \"%s\" is not \"ip\", "
                 "\"ipv4:port\" or \"[ipv6]:port\"", bad[i]);
        expect_invalid(&f, want);
    }
}

static void a_duplicate_user_id_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.users[2] = (sv_user){.id = 1, .secret = "other"};
    f.sets[0].n_users = 3;
    expect_invalid(&f, "user set u: duplicate user 1");
}

/* Issue 15: two users with one secret (the Shadowsocks password) cannot be told apart; the
 * text names both ids, never the secret. */
static void a_secret_shared_by_two_users_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.users[2] = (sv_user){.id = 3, .secret = "secret-1"};
    f.sets[0].n_users = 3;
    expect_invalid(&f, "user set u: users 1 and 3 have the same secret");
    f.users[2].secret = "secret-3";
    expect_valid(&f);
}

static void a_user_needs_a_secret(void **state)
{
    fx f;
    fx_init(&f);
    f.users[1].secret = "";
    expect_invalid(&f, "user set u: user 2 has an empty secret");
    f.users[1].secret = NULL;
    expect_invalid(&f, "user set u: user 2 has an empty secret");
}

static void a_secret_longer_than_the_limit_is_refused(void **state)
{
    char secret[SV_SECRET_MAX + 2];
    memset(secret, 's', sizeof secret - 1);
    secret[SV_SECRET_MAX + 1] = '\0';
    fx f;
    fx_init(&f);
    f.users[0].secret = secret;
    expect_invalid(&f, "user set u: user 1 has a secret longer than 256 bytes");
    secret[SV_SECRET_MAX] = '\0';
    expect_valid(&f);
}

/** A set of @p n users with ids 1..n and secrets "s<id>" (free with free_users). */
static sv_user *many_users(size_t n)
{
    sv_user *users = calloc(n, sizeof *users);
    assert_non_null(users);
    for (size_t i = 0; i < n; i++) {
        char secret[32];
        snprintf(secret, sizeof secret, "s%zu", i + 1);
        users[i] = (sv_user){.id = i + 1, .secret = strdup(secret)};
        assert_non_null(users[i].secret);
    }
    return users;
}

static void free_users(sv_user *users, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(users[i].secret);
    free(users);
}

static void a_user_set_at_the_limit_passes_and_one_more_is_refused(void **state)
{
    sv_user *users = many_users(SV_USERS_MAX + 1);
    fx f;
    fx_init(&f);
    f.sets[0].users = users;
    f.sets[0].n_users = SV_USERS_MAX;
    expect_valid(&f);
    f.sets[0].n_users = SV_USERS_MAX + 1;
    expect_invalid(&f, "user set u: more than 1000000 users");
    /* A duplicate at the end of a large set is still found. */
    f.sets[0].n_users = SV_USERS_MAX;
    users[SV_USERS_MAX - 1].id = 777;
    expect_invalid(&f, "user set u: duplicate user 777");
    /* So is a shared secret. */
    users[SV_USERS_MAX - 1].id = SV_USERS_MAX;
    strcpy(users[SV_USERS_MAX - 1].secret, "s5");
    expect_invalid(&f, "user set u: users 5 and 1000000 have the same secret");
    free_users(users, SV_USERS_MAX + 1);
}

/* ---- 3. route ---------------------------------------------------------------------------- */

static void too_many_rules_are_refused(void **state)
{
    size_t n = SV_RULES_MAX + 1;
    sv_route_rule *rules = calloc(n, sizeof *rules);
    assert_non_null(rules);
    fx f;
    fx_init(&f);
    for (size_t i = 0; i < n; i++)
        rules[i] = (sv_route_rule){.matchers = f.m1, .n_matchers = 1, .outbound = "block"};
    f.spec.route.rules = rules;
    f.spec.route.n_rules = SV_RULES_MAX;
    expect_valid(&f);
    f.spec.route.n_rules = n;
    expect_invalid(&f, "route: more than 4096 rules");
    free(rules);
}

static void a_rule_with_no_matchers_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.rules[1].n_matchers = 0;
    expect_invalid(&f, "route: rule 1 has no matchers");
}

static void a_rule_with_too_many_matchers_is_refused(void **state)
{
    size_t n = SV_MATCHERS_MAX + 1;
    sv_route_match *m = calloc(n, sizeof *m);
    assert_non_null(m);
    for (size_t i = 0; i < n; i++)
        m[i] = (sv_route_match){.kind = SV_MATCH_NETWORK, .network = SV_NET_TCP};
    fx f;
    fx_init(&f);
    f.rules[1].matchers = m;
    f.rules[1].n_matchers = SV_MATCHERS_MAX;
    expect_valid(&f);
    f.rules[1].n_matchers = n;
    expect_invalid(&f, "route: rule 1 has more than 65536 matchers");
    free(m);
}

static void a_text_matcher_needs_text(void **state)
{
    static const enum sv_match_kind kinds[] = {SV_MATCH_DOMAIN, SV_MATCH_DOMAIN_SUFFIX,
                                               SV_MATCH_DOMAIN_KEYWORD, SV_MATCH_INBOUND};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        fx f;
        fx_init(&f);
        f.m0[0] = (sv_route_match){.kind = kinds[i], .text = ""};
        expect_invalid(&f, "route: rule 0 matcher 0 has no text");
    }
}

static void a_regex_must_compile(void **state)
{
    fx f;
    fx_init(&f);
    f.m0[0] = (sv_route_match){.kind = SV_MATCH_REGEX, .text = "(^|\\.)ads\\.example$"};
    expect_valid(&f);
    f.m0[0].text = "";
    expect_invalid(&f, "route: rule 0 matcher 0 has no text");
    f.m0[0].text = "a(b";
    expect_invalid(&f, "route: rule 0 matcher 0: invalid regex at offset 3: missing closing "
                       "parenthesis");
    f.m0[0].text = "*.example.com";
    sv_error err = {0};
    assert_int_equal(sv_validate(&f.spec, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "route: rule 0 matcher 0: invalid regex at offset 0: "));
}

static void a_cidr_must_be_ipv4_or_ipv6(void **state)
{
    fx f;
    fx_init(&f);
    f.m1[0].cidr.family = AF_UNIX;
    expect_invalid(&f, "route: rule 1 matcher 0: the CIDR is neither IPv4 nor IPv6");
    f.m1[0].kind = SV_MATCH_SOURCE_CIDR; /* same rule for source CIDRs */
    expect_invalid(&f, "route: rule 1 matcher 0: the CIDR is neither IPv4 nor IPv6");
}

static void a_cidr_prefix_longer_than_its_address_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.m1[0].cidr.prefix = 32;
    expect_valid(&f);
    f.m1[0].cidr.prefix = 33;
    expect_invalid(&f, "route: rule 1 matcher 0: prefix /33 is longer than 32 bits");
    f.m1[0].cidr = (sv_cidr){.family = AF_INET6, .prefix = 128};
    expect_valid(&f);
    f.m1[0].cidr.prefix = 129;
    expect_invalid(&f, "route: rule 1 matcher 0: prefix /129 is longer than 128 bits");
}

static void an_inverted_port_range_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.m0[1].port_lo = 90;
    f.m0[1].port_hi = 80;
    expect_invalid(&f, "route: rule 0 matcher 1: port range 90-80 is inverted");
}

static void an_unknown_network_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.m0[1] = (sv_route_match){.kind = SV_MATCH_NETWORK, .network = 3};
    expect_invalid(&f, "route: rule 0 matcher 1: unknown network");
}

static void an_unknown_matcher_kind_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.m0[1].kind = 0;
    expect_invalid(&f, "route: rule 0 matcher 1: unknown matcher kind");
}

static void an_unknown_removal_policy_is_refused(void **state)
{
    fx f;
    fx_init(&f);
    f.spec.user_removal.kind = 7;
    expect_invalid(&f, "policies: unknown user removal policy");
}

static void a_close_after_policy_needs_a_grace_within_bounds(void **state)
{
    fx f;
    fx_init(&f);
    f.spec.drain = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 0};
    expect_invalid(&f, "policies: drain policy close_after: grace must be 1 ms to 86400 s");
    fx_init(&f);
    f.spec.drain = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 1500};
    f.spec.inbounds[0].user_removal = (sv_policy){.kind = SV_POLICY_CLOSE_AFTER,
                                                  .grace_ms = SV_POLICY_GRACE_MAX_MS + 1};
    char want[128];
    snprintf(want, sizeof want, "inbound %s: user removal policy close_after: grace must be "
             "1 ms to 86400 s", f.spec.inbounds[0].tag);
    expect_invalid(&f, want);
}

/* ---- order: the first violation wins ----------------------------------------------------- */

static void tags_are_checked_before_references(void **state)
{
    fx f;
    fx_init(&f);
    f.spec.route.default_outbound = "gone"; /* a reference error ... */
    f.sets[1] = (sv_user_set){.tag = "u"};  /* ... and a later kind's duplicate tag */
    f.spec.n_user_sets = 2;
    expect_invalid(&f, "duplicate user set tag u");
}

static void inbound_tags_are_checked_before_outbound_tags(void **state)
{
    fx f;
    fx_init(&f);
    f.out[1].tag = "direct";
    f.in[1].tag = "";
    expect_invalid(&f, "a inbound tag must not be empty");
}

static void references_are_checked_before_resource_rules(void **state)
{
    fx f;
    fx_init(&f);
    f.in[0].bind.port = 0;         /* a per-resource error on the first inbound ... */
    f.rules[1].outbound = "proxy"; /* ... and a reference error in the route */
    expect_invalid(&f, "route references unknown outbound proxy");
}

static void within_a_phase_spec_order_decides(void **state)
{
    fx f;
    fx_init(&f);
    f.rules[0].outbound = "a"; /* rule 0 before rule 1 before the default */
    f.rules[1].outbound = "b";
    f.spec.route.default_outbound = "c";
    expect_invalid(&f, "route references unknown outbound a");
    fx_init(&f);
    f.users[1].secret = ""; /* user set (after inbounds) ... */
    f.in[1].ss_cipher = 0;  /* ... loses to the second inbound */
    expect_invalid(&f, "inbound ss2: unknown cipher");
    fx_init(&f);
    f.in[0].tag = "dup"; /* the first duplicate in scan order is named */
    f.in[1].tag = "dup";
    f.in[2] = f.in[0];
    f.in[2].tag = "ss1";
    f.spec.n_inbounds = 3;
    expect_invalid(&f, "duplicate inbound tag dup");
}

/* Issue 9: a WebSocket transport on a trojan inbound: path starting with '/', printable, Host
 * only with a path; shadowsocks refuses it. */
/* Issue 11: REALITY on a vless or trojan inbound: key, short ids, server names, the target as
 * the fallback, xver, client versions, TCP or gRPC; not on other protocols. */
static void reality_settings_are_checked(void **state)
{
    (void)state;
    fx f;
    fx_init(&f);
    f.in[1] = (sv_inbound_spec){
        .tag = "vr", .bind = {"::1", 8389}, .protocol = SV_INBOUND_VLESS, .users = "u",
        .fallback = "www.example.com:443",
        .reality = {.private_key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA",
                    .short_ids = "0123456789abcdef,,aa", .server_names = "www.example.com"}};
    expect_valid(&f);
    f.in[1].reality.private_key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHy+";
    expect_invalid(&f, "inbound vr: reality private_key must be 32 bytes in base64url");
    /* issue 33: 32 zero bytes, with or without the padding, and with the unused low bits */
    static char *const zero_keys[] = {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                                      "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                                      "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAD"};
    for (size_t i = 0; i < sizeof zero_keys / sizeof zero_keys[0]; i++) {
        f.in[1].reality.private_key = zero_keys[i];
        expect_invalid(&f, "inbound vr: reality private_key is all zeros, a key anyone can "
                           "derive the shared secrets of (make one with `xray x25519`)");
    }
    f.in[1].reality.private_key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE"; /* a 1 bit */
    expect_valid(&f);
    f.in[1].reality.private_key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA";
    f.in[1].reality.short_ids = "abc";
    expect_invalid(&f, "inbound vr: reality short_ids \"abc\" must be at most 16 hex ids of at "
                       "most 16 digits (an even count)");
    f.in[1].reality.short_ids = NULL;
    f.in[1].reality.server_names = "a.test,";
    expect_invalid(&f, "inbound vr: reality server_names must be 1 to 16 names");
    f.in[1].reality.server_names = "a.test,b.test";
    f.in[1].fallback = NULL;
    expect_invalid(&f, "inbound vr: reality needs its target as the fallback (HOST:PORT)");
    f.in[1].fallback = "a.test:443";
    f.in[1].tls.cert = SV_CERT_SELF;
    expect_invalid(&f, "inbound vr: reality is served on TCP or under gRPC (no cert or "
                       "WebSocket)");
    f.in[1].tls.cert = SV_CERT_NONE;
    f.in[1].ws.path = "/ws";
    expect_invalid(&f, "inbound vr: reality is served on TCP or under gRPC (no cert or "
                       "WebSocket)");
    f.in[1].ws.path = NULL;
    f.in[1].grpc.service_name = "kt-tun"; /* §1.6: gRPC over REALITY */
    expect_valid(&f);
    f.in[1].reality.vision = true; /* PROTOCOLS-2.md §2.1: Vision directly on REALITY */
    expect_invalid(&f, "inbound vr: the vision flow is served directly on reality or tls over "
                       "TCP only (PROTOCOLS-2.md §2.1)");
    f.in[1].grpc.service_name = NULL;
    expect_valid(&f);
    /* or directly on TLS with a certificate (OpenSSL's TLS 1.3), not in clear or over WS */
    char *key = f.in[1].reality.private_key, *fallback = f.in[1].fallback;
    f.in[1].reality.private_key = NULL;
    f.in[1].fallback = NULL;
    expect_invalid(&f, "inbound vr: the vision flow is served directly on reality or tls over "
                       "TCP only (PROTOCOLS-2.md §2.1)");
    f.in[1].tls.cert = SV_CERT_SELF;
    expect_valid(&f);
    f.in[1].ws.path = "/ws";
    expect_invalid(&f, "inbound vr: the vision flow is served directly on reality or tls over "
                       "TCP only (PROTOCOLS-2.md §2.1)");
    f.in[1].ws.path = NULL;
    f.in[1].tls.cert = SV_CERT_NONE;
    f.in[1].reality.private_key = key;
    f.in[1].fallback = fallback;
    f.in[1].reality.vision = false;
    f.in[1].reality.xver = 3; /* §1.1: PROXY protocol v1 or v2 */
    expect_invalid(&f, "inbound vr: reality xver 3: expected 0, 1 or 2 (the PROXY protocol "
                       "version)");
    f.in[1].reality.xver = 2;
    f.in[1].reality.min_client_ver = 0x010900;
    f.in[1].reality.max_client_ver = 0x010801;
    expect_invalid(&f, "inbound vr: reality client versions must be 24-bit x.y.z values, the "
                       "minimum not above the maximum");
    f.in[1].reality.max_client_ver = 0x1000000;
    expect_invalid(&f, "inbound vr: reality client versions must be 24-bit x.y.z values, the "
                       "minimum not above the maximum");
    f.in[1].reality.max_client_ver = 0; /* no upper bound */
    expect_valid(&f);
    f.in[1].protocol = SV_INBOUND_TROJAN; /* PANEL.md §1.4: trojan with tls 2 */
    expect_valid(&f);
    f.in[1].reality.vision = true;
    expect_invalid(&f, "inbound vr: the vision flow is served on vless inbounds only");
    f.in[1].reality.vision = false;
    f.in[1].fallback = NULL;
    expect_invalid(&f, "inbound vr: reality needs its target as the fallback (HOST:PORT)");
    f.in[1].protocol = SV_INBOUND_VMESS;
    expect_invalid(&f, "inbound vr: reality is served on vless and trojan inbounds only");
}

static void websocket_settings_are_checked(void **state)
{
    (void)state;
    fx f;
    fx_init(&f);
    f.in[2] = (sv_inbound_spec){.tag = "tj", .bind = {"127.0.0.1", 8443},
                                .protocol = SV_INBOUND_TROJAN, .users = "u",
                                .tls = {.cert = SV_CERT_SELF}, .ws = {"/ws?ed=2048", "cdn.test"}};
    f.spec.n_inbounds = 3;
    expect_valid(&f);
    f.in[2].ws.path = "ws";
    expect_invalid(&f, "inbound tj: ws path \"ws\" must start with '/' and be at most 256 "
                       "printable characters without spaces");
    f.in[2].ws.path = "/a b";
    expect_invalid(&f, "inbound tj: ws path \"/a b\" must start with '/' and be at most 256 "
                       "printable characters without spaces");
    f.in[2].ws = (sv_inbound_ws){.path = "/ws", .host = ""};
    expect_invalid(&f, "inbound tj: ws host \"\" must be a host name of at most 256 printable "
                       "characters");
    f.in[2].ws = (sv_inbound_ws){.host = "cdn.test"};
    expect_invalid(&f, "inbound tj: ws host needs a ws path");
    f.in[2] = (sv_inbound_spec){.tag = "vl", .bind = {"127.0.0.1", 8443},
                                .protocol = SV_INBOUND_VLESS, .users = "u", .ws = {"/vl"}};
    expect_valid(&f);
    f.in[2].ws.path = "vl";
    expect_invalid(&f, "inbound vl: ws path \"vl\" must start with '/' and be at most 256 "
                       "printable characters without spaces");
    f.in[2] = (sv_inbound_spec){.tag = "vm", .bind = {"127.0.0.1", 8443},
                                .protocol = SV_INBOUND_VMESS, .users = "u",
                                .tls = {.cert = SV_CERT_SELF}, .ws = {.host = "cdn.test"}};
    expect_invalid(&f, "inbound vm: ws host needs a ws path");
    f.in[2].ws.path = "/vm";
    expect_valid(&f);
    /* issue 10: HTTPUpgrade takes the same path and Host, and needs a path */
    f.in[2].ws.httpupgrade = true;
    expect_valid(&f);
    f.in[2].ws = (sv_inbound_ws){.httpupgrade = true};
    expect_invalid(&f, "inbound vm: httpupgrade needs a ws path");
    /* shadowsocks: WebSocket (the v2ray-plugin), TLS only with it, never a fallback */
    fx_init(&f);
    f.in[0].ws.path = "/ws";
    expect_valid(&f);
    f.in[0].tls.cert = SV_CERT_SELF;
    expect_valid(&f);
    f.in[0].ws.path = "ws";
    expect_invalid(&f, "inbound ss1: ws path \"ws\" must start with '/' and be at most 256 "
                       "printable characters without spaces");
    f.in[0].ws.path = NULL;
    expect_invalid(&f, "inbound ss1: TLS on a shadowsocks inbound needs a ws path (the "
                       "v2ray-plugin's WebSocket over TLS)");
    f.in[0].tls.cert = SV_CERT_NONE;
    f.in[0].ws = (sv_inbound_ws){.path = "/ws", .httpupgrade = true};
    expect_invalid(&f, "inbound ss1: httpupgrade is not served on a shadowsocks inbound "
                       "(WebSocket only)");
    f.in[0].ws = (sv_inbound_ws){0};
    f.in[0].fallback = "127.0.0.1:80";
    expect_invalid(&f, "inbound ss1: fallback is not served on a shadowsocks inbound");
    /* Mux.Cool inside the WebSocket (the v2ray-plugin with mux): shadowsocks with a ws path */
    f.in[0].fallback = NULL;
    f.in[0].ws = (sv_inbound_ws){.path = "/ws", .mux = true};
    expect_valid(&f);
    f.in[0].ws.path = NULL;
    expect_invalid(&f, "inbound ss1: ws mux (Shadowsocks over Mux.Cool) needs a shadowsocks "
                       "inbound with a ws path");
    f.in[2] = (sv_inbound_spec){.tag = "vm", .bind = {"127.0.0.1", 8443},
                                .protocol = SV_INBOUND_VMESS, .users = "u",
                                .ws = {.path = "/vm", .mux = true}};
    f.in[0].ws = (sv_inbound_ws){0};
    f.spec.n_inbounds = 3;
    expect_invalid(&f, "inbound vm: ws mux (Shadowsocks over Mux.Cool) needs a shadowsocks "
                       "inbound with a ws path");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_valid_spec_passes),
        cmocka_unit_test(reality_settings_are_checked),
        cmocka_unit_test(the_same_tag_in_different_kinds_is_allowed),
        cmocka_unit_test(a_null_spec_is_refused),
        cmocka_unit_test(no_tag_may_be_empty),
        cmocka_unit_test(a_tag_longer_than_the_limit_is_refused),
        cmocka_unit_test(a_tag_with_a_control_character_quote_or_backslash_is_refused),
        cmocka_unit_test(duplicate_inbound_tag),
        cmocka_unit_test(duplicate_outbound_tag),
        cmocka_unit_test(duplicate_user_set_tag),
        cmocka_unit_test(an_inbound_references_an_unknown_user_set),
        cmocka_unit_test(a_rule_references_an_unknown_outbound),
        cmocka_unit_test(the_default_references_an_unknown_outbound),
        cmocka_unit_test(a_rule_references_an_unknown_inbound),
        cmocka_unit_test(a_rule_without_an_outbound_is_refused),
        cmocka_unit_test(a_rule_listing_an_empty_inbound_is_refused),
        cmocka_unit_test(a_route_without_a_default_is_refused),
        cmocka_unit_test(an_empty_bind_address_is_refused),
        cmocka_unit_test(a_bind_address_must_be_an_ip_literal),
        cmocka_unit_test(port_zero_is_refused),
        cmocka_unit_test(a_vmess_inbound_is_checked),
        cmocka_unit_test(two_inbounds_on_one_bind_are_refused),
        cmocka_unit_test(a_bind_spelled_differently_is_still_the_same_bind),
        cmocka_unit_test(a_wildcard_bind_overlaps_a_specific_one_on_its_port),
        cmocka_unit_test(binds_on_other_ports_or_families_do_not_overlap),
        cmocka_unit_test(an_unknown_protocol_is_refused),
        cmocka_unit_test(an_unknown_cipher_is_refused),
        cmocka_unit_test(a_shadowsocks_2022_inbound_is_checked),
        cmocka_unit_test(vless_inbound_rules),
        cmocka_unit_test(a_shadowsocks_inbound_needs_a_user_set),
        cmocka_unit_test(an_unknown_outbound_kind_is_refused),
        cmocka_unit_test(a_socket_policy_is_checked),
        cmocka_unit_test(a_rules_dns_server_is_checked),
        cmocka_unit_test(a_duplicate_user_id_is_refused),
        cmocka_unit_test(a_user_needs_a_secret),
        cmocka_unit_test(a_secret_shared_by_two_users_is_refused),
        cmocka_unit_test(a_secret_longer_than_the_limit_is_refused),
        cmocka_unit_test(a_user_set_at_the_limit_passes_and_one_more_is_refused),
        cmocka_unit_test(too_many_rules_are_refused),
        cmocka_unit_test(a_rule_with_no_matchers_is_refused),
        cmocka_unit_test(a_rule_with_too_many_matchers_is_refused),
        cmocka_unit_test(a_text_matcher_needs_text),
        cmocka_unit_test(a_regex_must_compile),
        cmocka_unit_test(a_cidr_must_be_ipv4_or_ipv6),
        cmocka_unit_test(a_cidr_prefix_longer_than_its_address_is_refused),
        cmocka_unit_test(an_inverted_port_range_is_refused),
        cmocka_unit_test(an_unknown_network_is_refused),
        cmocka_unit_test(an_unknown_matcher_kind_is_refused),
        cmocka_unit_test(an_unknown_removal_policy_is_refused),
        cmocka_unit_test(a_close_after_policy_needs_a_grace_within_bounds),
        cmocka_unit_test(tags_are_checked_before_references),
        cmocka_unit_test(inbound_tags_are_checked_before_outbound_tags),
        cmocka_unit_test(references_are_checked_before_resource_rules),
        cmocka_unit_test(within_a_phase_spec_order_decides),
        cmocka_unit_test(websocket_settings_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
