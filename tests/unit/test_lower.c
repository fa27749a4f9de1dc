/*
 * Unit tests: panel bodies (panel/model.c, panel/local.c) and lowering to a spec
 * (agent/lower.c). Fixtures: tests/unit/fixtures/panel/ (copies of shared/fixtures/panel).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/lower.h"
#include "panel/panel.h"
#include "supervisor/util/log.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static void fixture_path(char *buf, size_t cap, const char *name)
{
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(buf, cap, "%s/tests/unit/fixtures/panel/%s", top != NULL ? top : TOP_SRCDIR, name);
}

/* ------------------------------------------------------------------------------------------ */
/* helpers: fetch through the local panel                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct got {
    int calls;
    int node_rc, users_rc;
    pn_node node;
    pn_users users;
    sv_error err;
} got;

static void got_node(pn_client *c, int rc, pn_node *node, const sv_error *err, void *arg)
{
    got *g = arg;
    g->calls++;
    g->node_rc = rc;
    if (rc == PN_OK) {
        g->node = *node;
        memset(node, 0, sizeof *node);
    } else {
        g->err = *err;
    }
}

static void got_users(pn_client *c, int rc, pn_users *users, const sv_error *err, void *arg)
{
    got *g = arg;
    g->calls++;
    g->users_rc = rc;
    if (rc == PN_OK) {
        g->users = *users;
        memset(users, 0, sizeof *users);
    } else {
        g->err = *err;
    }
}

/* Fill a node state from two fixture files through the local panel. */
static void state_from_fixtures(ag_node_state *st, const char *tag, const char *listen,
                                const char *node_file, const char *users_file)
{
    char np[PATH_MAX], up[PATH_MAX];
    fixture_path(np, sizeof np, node_file);
    fixture_path(up, sizeof up, users_file);
    pn_local_options o = {.node_file = np, .users_file = up};
    pn_client *c;
    sv_error err = {0};
    got g = {0};
    assert_int_equal(pn_local_new(&o, &c, &err), 0);
    assert_int_equal(pn_fetch_node(c, got_node, &g), 0);
    assert_int_equal(pn_fetch_users(c, got_users, &g), 0);
    pn_client_free(c);
    assert_int_equal(g.calls, 2); /* the local panel answers before returning */
    if (g.node_rc != PN_OK || g.users_rc != PN_OK)
        fail_msg("fetch failed: %s", g.err.msg);
    memset(st, 0, sizeof *st);
    st->tag = strdup(tag);
    st->listen = listen != NULL ? strdup(listen) : NULL;
    st->node = g.node;
    st->users = g.users;
}

/* A node state from inline JSON texts. */
static void state_from_json(ag_node_state *st, const char *tag, const char *node_json,
                            const char *users_json)
{
    json_t *n = json_loads(node_json, 0, NULL), *u = json_loads(users_json, 0, NULL);
    assert_non_null(n);
    assert_non_null(u);
    sv_error err = {0};
    memset(st, 0, sizeof *st);
    st->tag = strdup(tag);
    if (pn_node_parse(n, "shadowsocks", PN_PARSE_STRICT, &st->node, &err) != 0)
        fail_msg("node: %s", err.msg);
    if (pn_users_parse(u, PN_PARSE_STRICT, &st->users, &err) != 0)
        fail_msg("users: %s", err.msg);
    json_decref(n);
    json_decref(u);
}

static void lower_one(ag_node_state *st, sv_spec *spec)
{
    ag_fleet f = {.nodes = st, .n = 1};
    sv_error err = {0};
    if (ag_lower_fleet(&f, spec, &err) != 0)
        fail_msg("lower: %s", err.msg);
}

static void free_state(ag_node_state *st)
{
    ag_fleet f = {.nodes = malloc(sizeof *st), .n = 1};
    f.nodes[0] = *st;
    ag_fleet_free(&f);
}

static void check_shared(const sv_spec *s)
{
    assert_int_equal(s->n_outbounds, 2);
    assert_string_equal(s->outbounds[0].tag, "direct");
    assert_int_equal(s->outbounds[0].kind, SV_OUTBOUND_DIRECT);
    assert_string_equal(s->outbounds[1].tag, "block");
    assert_int_equal(s->outbounds[1].kind, SV_OUTBOUND_BLACKHOLE);
    assert_string_equal(s->route.default_outbound, "direct");
    assert_int_equal(sv_removal_policy_of(s, NULL).kind, SV_POLICY_CLOSE);
    assert_int_equal(sv_drain_policy_of(s, NULL).kind, SV_POLICY_KEEP);
}

static void check_user(const sv_user *u, uint64_t id, const char *uuid, uint64_t speed,
                       uint32_t devices)
{
    assert_int_equal(u->id, id);
    assert_string_equal(u->secret, uuid);
    assert_null(u->label);
    assert_int_equal(u->speed_limit, speed);
    assert_int_equal(u->device_limit, devices);
}

/* ------------------------------------------------------------------------------------------ */
/* fixtures → spec                                                                              */
/* ------------------------------------------------------------------------------------------ */

static void lower__v17_fixture__gives_the_expected_spec(void **state)
{
    ag_node_state st;
    sv_spec s;
    state_from_fixtures(&st, "ss1", NULL, "v2board-config-shadowsocks-v17.json",
                        "v2board-user-basic.json");
    assert_string_equal(st.node.protocol, "shadowsocks"); /* v1.7 sends none */
    assert_int_equal(st.node.push_interval, 60);
    assert_int_equal(st.node.pull_interval, 60);
    assert_string_equal(st.node.obfs, "http");
    sv_error err = {0};
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL); /* issue 15: obfs not served */
    assert_string_equal(err.msg, "node ss1: obfs \"http\": not served (no obfuscation)");
    free(st.node.obfs); /* the same node without obfs */
    st.node.obfs = NULL;
    lower_one(&st, &s);
    check_shared(&s);
    assert_int_equal(s.n_inbounds, 1);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_string_equal(in->tag, "ss1");
    assert_string_equal(in->bind.address, "0.0.0.0");
    assert_int_equal(in->bind.port, 28004);
    assert_true(in->udp);
    assert_int_equal(in->protocol, SV_INBOUND_SHADOWSOCKS);
    assert_int_equal(in->ss_cipher, SV_SS_CHACHA20_POLY1305);
    assert_string_equal(in->users, "ss1");
    assert_int_equal(s.n_user_sets, 1);
    const sv_user_set *set = &s.user_sets[0];
    assert_string_equal(set->tag, "ss1");
    assert_int_equal(set->n_users, 4);
    check_user(&set->users[0], 1, "167dd41a-347a-4e47-8e5a-c63a43514e2e", 0, 0);
    check_user(&set->users[1], 2, "a30354ef-398b-4edf-a326-3c49440a9a11", 0, 0);
    check_user(&set->users[2], 5, "67c8765c-5781-4ce8-98f0-1733d942b204", 12500000, 0);
    check_user(&set->users[3], 8, "a37f115c-6a44-43cc-8df2-d1aff1067dbd", 0, 3);
    assert_int_equal(s.route.n_rules, 0);
    sv_spec_free(&s);
    free_state(&st);
}

static void lower__listen__override_then_panel_then_default(void **state)
{
    ag_node_state st;
    sv_spec s;
    state_from_fixtures(&st, "x", "127.0.0.1", "v2board-config-shadowsocks.json",
                        "v2board-user-empty.json");
    lower_one(&st, &s);
    assert_string_equal(s.inbounds[0].bind.address, "127.0.0.1");
    assert_int_equal(s.inbounds[0].bind.port, 28001);
    assert_int_equal(s.inbounds[0].ss_cipher, SV_SS_AES_128_GCM);
    assert_int_equal(s.user_sets[0].n_users, 0); /* an empty list is valid: no user admitted */
    sv_spec_free(&s);
    free_state(&st);

    state_from_json(&st, "y", "{\"server_port\":9,\"cipher\":\"aes-256-gcm\","
                              "\"listen_ip\":\"::\"}", "{\"users\":[]}");
    assert_string_equal(ag_node_listen(&st), "::");
    free(st.node.listen_ip);
    st.node.listen_ip = NULL;
    assert_string_equal(ag_node_listen(&st), "0.0.0.0");
    free_state(&st);
}

/* issue 15: allow_private goes to the node's inbound only; a change of it is a settings change
 * (an apply that swaps the handler), not a transport change (no session is closed). */
static void lower__allow_private__reaches_the_inbound_and_is_a_setting(void **state)
{
    (void)state;
    const char *node = "{\"server_port\":1,\"cipher\":\"aes-128-gcm\"}";
    ag_node_state two[2];
    state_from_json(&two[0], "a", node, "{\"users\":[]}");
    state_from_json(&two[1], "b", "{\"server_port\":2,\"cipher\":\"aes-128-gcm\"}",
                    "{\"users\":[]}");
    two[1].allow_private = true;
    ag_fleet f = {.nodes = two, .n = 2};
    sv_spec s;
    sv_error err = {0};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), 0);
    assert_int_equal(s.n_inbounds, 2);
    assert_false(s.inbounds[0].allow_private);
    assert_true(s.inbounds[1].allow_private);
    sv_spec_free(&s);

    ag_node_state b;
    state_from_json(&b, "a", node, "{\"users\":[]}");
    assert_true(ag_node_settings_equal(&two[0], &b));
    b.allow_private = true;
    assert_false(ag_node_settings_equal(&two[0], &b));
    assert_true(ag_node_transport_equal(&two[0], &b));
    free_state(&b);
    free_state(&two[0]);
    free_state(&two[1]);
}

/* Issue 13: the fleet's `outbound` is the shared direct's policy; a node's own `outbound` gives it
 * a direct outbound tagged with its tag and a last rule of its inbound (tcp or udp) to it, after
 * its block rules; the policy is a setting. */
static void lower__outbound__shared_and_per_node(void **state)
{
    (void)state;
    const char *node = "{\"server_port\":1,\"cipher\":\"aes-128-gcm\",\"routes\":[{\"id\":3,"
                       "\"match\":[\"domain:ads.example\"],\"action\":\"block\"}]}";
    ag_node_state two[2];
    state_from_json(&two[0], "a", node, "{\"users\":[]}");
    state_from_json(&two[1], "b", "{\"server_port\":2,\"cipher\":\"aes-128-gcm\"}",
                    "{\"users\":[]}");
    two[1].has_outbound = true;
    two[1].outbound = (sv_socket_policy){.has_addr4 = true, .addr4 = {127, 0, 0, 3}};
    ag_fleet f = {.nodes = two, .n = 2, .outbound = {.mark = 7}};
    sv_spec s;
    sv_error err = {0};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), 0);
    assert_int_equal(s.n_outbounds, 3);
    assert_string_equal(s.outbounds[0].tag, "direct");
    assert_int_equal(s.outbounds[0].socket.mark, 7);
    assert_int_equal(s.outbounds[1].socket.mark, 0); /* block */
    assert_string_equal(s.outbounds[2].tag, "b");
    assert_int_equal(s.outbounds[2].kind, SV_OUTBOUND_DIRECT);
    assert_true(s.outbounds[2].socket.has_addr4);
    assert_int_equal(s.route.n_rules, 2);
    assert_string_equal(s.route.rules[0].outbound, "block");
    const sv_route_rule *r = &s.route.rules[1];
    assert_string_equal(r->outbound, "b");
    assert_int_equal(r->n_inbounds, 1);
    assert_string_equal(r->inbounds[0], "b");
    assert_int_equal(r->n_matchers, 2);
    assert_int_equal(r->matchers[0].network, SV_NET_TCP);
    assert_int_equal(r->matchers[1].network, SV_NET_UDP);
    sv_spec_free(&s);

    ag_node_state b;
    state_from_json(&b, "b", "{\"server_port\":2,\"cipher\":\"aes-128-gcm\"}", "{\"users\":[]}");
    assert_false(ag_node_settings_equal(&two[1], &b));
    b.has_outbound = true;
    b.outbound = two[1].outbound;
    assert_true(ag_node_settings_equal(&two[1], &b));
    b.outbound.addr4[3] = 4;
    assert_false(ag_node_settings_equal(&two[1], &b));
    free_state(&b);
    free_state(&two[0]);
    free_state(&two[1]);
}

/* Issue 13: `dns` routes become rules of the node's inbound after its block rules, to the node's
 * direct outbound (its own when it has one), carrying the server; unserved servers are skipped. */
static void lower__dns_routes__after_block_rules_with_their_server(void **state)
{
    (void)state;
    const char *node =
        "{\"server_port\":1,\"cipher\":\"aes-128-gcm\",\"routes\":["
        "{\"id\":1,\"match\":[\"domain:split.test\"],\"action\":\"dns\","
        "\"action_value\":\"udp://127.0.0.1:5353\"},"
        "{\"id\":2,\"match\":[\"domain:ads.test\"],\"action\":\"block\"},"
        "{\"id\":3,\"match\":[\"domain:doh.test\"],\"action\":\"dns\","
        "\"action_value\":\"https://dns.example/dns-query\"},"
        "{\"id\":4,\"match\":[\"main\",\"{}\"],\"action\":\"dns\",\"action_value\":\"1.1.1.1\"},"
        "{\"id\":5,\"match\":[\"domain:x.test\"],\"action\":\"proxy\"}]}";
    ag_node_state st;
    state_from_json(&st, "a", node, "{\"users\":[]}");
    sv_spec s;
    lower_one(&st, &s);
    assert_int_equal(s.route.n_rules, 2);
    assert_string_equal(s.route.rules[0].outbound, "block");
    assert_null(s.route.rules[0].dns_server);
    const sv_route_rule *r = &s.route.rules[1];
    assert_string_equal(r->outbound, "direct");
    assert_string_equal(r->dns_server, "127.0.0.1:5353");
    assert_false(r->audit);
    assert_int_equal(r->n_inbounds, 1);
    assert_string_equal(r->inbounds[0], "a");
    assert_int_equal(r->n_matchers, 1);
    assert_int_equal(r->matchers[0].kind, SV_MATCH_DOMAIN_SUFFIX);
    assert_string_equal(r->matchers[0].text, "split.test");
    sv_spec_free(&s);

    st.has_outbound = true; /* then its own outbound, and its catch-all rule last */
    lower_one(&st, &s);
    assert_int_equal(s.route.n_rules, 3);
    assert_string_equal(s.route.rules[1].outbound, "a");
    assert_non_null(s.route.rules[1].dns_server);
    assert_null(s.route.rules[2].dns_server);
    assert_string_equal(s.route.rules[2].outbound, "a");
    sv_spec_free(&s);
    free_state(&st);
}

static void lower__speed_limit__mbps_to_bytes_per_second(void **state)
{
    ag_node_state st;
    sv_spec s;
    state_from_fixtures(&st, "ss", NULL, "v2board-config-shadowsocks.json",
                        "v2board-user-speedlimit.json");
    lower_one(&st, &s);
    const sv_user_set *set = &s.user_sets[0];
    assert_int_equal(set->n_users, 4);
    check_user(&set->users[0], 11, "a22fa1f7-2560-4b2f-8a7c-e6e5f89c8d33", 1250000, 0);
    check_user(&set->users[1], 12, "5043796d-4061-4823-9b39-320448410fe3", 6250000, 0);
    check_user(&set->users[2], 13, "1098d6a9-0494-4815-8587-18296e887807", 125000000, 0);
    check_user(&set->users[3], 14, "9b19cdec-60c9-4347-ba38-b767352e4941", 0, 0);
    sv_spec_free(&s);
    free_state(&st);
    assert_int_equal(ag_lower_speed(8), 1000000);
    assert_int_equal(ag_lower_speed(UINT64_MAX / 125000 + 1), UINT64_MAX);
}

/* Issue 12: the node's `speed_limit` (Mbps) — each user gets the smallest non-zero of it and the
 * panel's; a node speed_limit of 0 changes nothing; the node settings differ when it changes. */
static void lower__node_speed_limit__smallest_non_zero(void **state)
{
    ag_node_state st;
    sv_spec s;
    (void)state;
    state_from_fixtures(&st, "ss", NULL, "v2board-config-shadowsocks.json",
                        "v2board-user-speedlimit.json");
    st.speed_limit = 50; /* 6 250 000 B/s */
    lower_one(&st, &s);
    const sv_user_set *set = &s.user_sets[0];
    assert_int_equal(set->users[0].speed_limit, 1250000);   /* 10 Mbps: below the node's */
    assert_int_equal(set->users[1].speed_limit, 6250000);   /* 50 Mbps: equal */
    assert_int_equal(set->users[2].speed_limit, 6250000);   /* 1000 Mbps: the node's */
    assert_int_equal(set->users[3].speed_limit, 6250000);   /* unlimited: the node's */
    ag_node_state other = st;
    other.speed_limit = 0;
    assert_false(ag_node_settings_equal(&st, &other));
    sv_user_set copy;
    assert_int_equal(sv_user_set_clone(&copy, set), 0);
    ag_lower_node_speed(&copy, 0);
    assert_int_equal(copy.users[3].speed_limit, 6250000);
    sv_user_set_free(&copy);
    sv_spec_free(&s);
    free_state(&st);
}

static void lower__null_or_missing_limits__are_unlimited(void **state)
{
    ag_node_state st;
    sv_spec s;
    state_from_fixtures(&st, "ss", NULL, "v2board-config-shadowsocks.json",
                        "v2board-user-nulls-omitted.json");
    lower_one(&st, &s);
    const sv_user_set *set = &s.user_sets[0];
    assert_int_equal(set->n_users, 3);
    check_user(&set->users[0], 41, "c8bd8770-d23a-42d9-bd31-09bf6bd33d83", 0, 0);
    check_user(&set->users[1], 42, "26b8e5ba-2d10-49f2-a2f5-6763d5236ac1", 2500000, 0);
    check_user(&set->users[2], 43, "fd39265b-b32e-4ea1-9439-f75f10c01d5d", 0, 2);
    sv_spec_free(&s);
    free_state(&st);

    state_from_fixtures(&st, "ss", NULL, "v2board-config-shadowsocks.json",
                        "v2board-user-v17.json"); /* v1.7.4: no device_limit key */
    lower_one(&st, &s);
    check_user(&s.user_sets[0].users[0], 31, "c10c2788-a8e1-4980-86f6-d2e1c91d6da3", 0, 0);
    check_user(&s.user_sets[0].users[1], 32, "d703d5b0-62c4-4228-9e5d-4d25c8ec9feb", 3750000, 0);
    sv_spec_free(&s);
    free_state(&st);
}

/* Issue 10: a Shadowsocks 2022 node (Xboard's fixture) lowers to an SS2022 inbound on TCP and
 * UDP with the panel's server_key; its users' secrets stay their UUIDs (the core takes the key
 * from them). Validation: test_validate. */
static void lower__ss2022_node__served_with_server_key(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_fixtures(&st, "ss22", NULL, "v2board-config-shadowsocks-2022.json",
                        "v2board-user-basic.json");
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), 0);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_SS2022);
    assert_int_equal(in->ss_cipher, SV_SS_2022_AES_128_GCM);
    assert_string_equal(in->ss_server_key, "NzhhN2QwMWMwMmQxYTlkMA==");
    assert_true(in->udp);
    assert_string_equal(s.user_sets[0].users[0].secret, "167dd41a-347a-4e47-8e5a-c63a43514e2e");
    sv_spec_free(&s);
    free_state(&st);

    enum sv_ss_cipher c;
    assert_int_equal(ag_lower_cipher("2022-blake3-aes-256-gcm", &c), 0);
    assert_int_equal(c, SV_SS_2022_AES_256_GCM);
    assert_int_equal(ag_lower_cipher("2022-blake3-chacha20-poly1305", &c), 0);
    assert_int_equal(c, SV_SS_2022_CHACHA20_POLY1305);
    /* chacha20: Xboard sends no server_key (PANEL.md §1.4 gap): a single-user inbound */
    state_from_json(&st, "c", "{\"server_port\":9,\"cipher\":\"2022-blake3-chacha20-poly1305\","
                    "\"server_key\":null}", "{\"users\":[]}");
    f.nodes = &st;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), 0);
    assert_int_equal(s.inbounds[0].protocol, SV_INBOUND_SS2022);
    assert_null(s.inbounds[0].ss_server_key);
    assert_true(s.inbounds[0].udp);
    sv_spec_free(&s);
    free_state(&st);

    /* the v2ray-plugin is served with the classic ciphers only (issue 9): refused naming it */
    state_from_json(&st, "p", "{\"server_port\":9,\"cipher\":\"2022-blake3-aes-128-gcm\","
                    "\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux=0\"}",
                    "{\"users\":[]}");
    f.nodes = &st;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node p: plugin \"v2ray-plugin\": not served with a "
                                 "2022-blake3 cipher (v2ray-plugin with classic ciphers only)");
    free_state(&st);
}

static void lower__unknown_cipher__is_named(void **state)
{
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_json(&st, "rc", "{\"server_port\":9,\"cipher\":\"rc4-md5\"}", "{\"users\":[]}");
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node rc: unsupported shadowsocks cipher \"rc4-md5\"");
    assert_null(s.inbounds); /* nothing left to free */
    assert_null(s.outbounds);
    free_state(&st);

    enum sv_ss_cipher c;
    assert_int_equal(ag_lower_cipher("chacha20-poly1305", &c), 0);
    assert_int_equal(c, SV_SS_CHACHA20_POLY1305);
    assert_int_equal(ag_lower_cipher("aes-256-gcm", &c), 0);
    assert_int_equal(c, SV_SS_AES_256_GCM);
    assert_int_equal(ag_lower_cipher("rc4-md5", &c), -EINVAL);

    state_from_json(&st, "nc", "{\"server_port\":9}", "{\"users\":[]}");
    f.nodes = &st;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node nc: cipher: missing (required for a shadowsocks node)");
    free_state(&st);
}

static void lower__other_protocols__are_refused(void **state)
{
    char np[PATH_MAX];
    json_t *body;
    pn_node node;
    sv_error err = {0};
    fixture_path(np, sizeof np, "v2board-config-vmess-tcp-v17.json");
    assert_int_equal(pn_json_load_file(np, PN_BODY_MAX, &body, &err), 0);
    assert_int_equal(pn_node_parse(body, "vmess", PN_PARSE_STRICT, &node, &err), 0);
    json_decref(body);
    ag_node_state st = {.tag = strdup("vm"), .node = node};
    ag_fleet f = {.nodes = &st, .n = 1};
    sv_spec s;
    /* issue 9: vmess is served, but not this body's TCP header obfuscation */
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node vm: networkSettings: not served (no transport settings)");
    free(st.node.protocol);
    st.node.protocol = strdup("hysteria");
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node vm: unsupported protocol \"hysteria\"");
    free_state(&st);
}

/* Issue 15: settings a shadowsocks node cannot serve are refused naming the field; their empty
 * forms (null, "", false, 0, {}, [], multiplex disabled, network "tcp") are accepted. */
static void lower__unserved_settings__are_refused_naming_the_field(void **state)
{
    static const struct {
        const char *extra, *msg;
    } refused[] = {
        {"\"network\":\"grpc\"", "node n: network \"grpc\": not served (shadowsocks over plain "
                                  "TCP and UDP only)"},
        {"\"network\":\"ws\"", "node n: network \"ws\": not served (shadowsocks over plain TCP "
                                "and UDP only)"},
        {"\"networkSettings\":{\"path\":\"/x\"}", "node n: networkSettings: not served (no "
                                                  "transport settings)"},
        {"\"network\":\"tcp\",\"network_settings\":{\"header\":{\"type\":\"http\"}}",
         "node n: network_settings: not served (no transport settings)"},
        {"\"tls\":1", "node n: tls: not served (no TLS or REALITY on a shadowsocks node)"},
        {"\"tls\":\"2\"", "node n: tls: not served (no TLS or REALITY on a shadowsocks node)"},
        {"\"multiplex\":{\"enabled\":true,\"protocol\":\"smux\"}",
         "node n: multiplex: not served (no multiplexing)"},
        {"\"obfs\":\"tls\"", "node n: obfs \"tls\": not served (no obfuscation)"},
        {"\"plugin\":\"obfs\",\"plugin_opts\":\"obfs=http\"",
         "node n: plugin \"obfs\": not served (v2ray-plugin only)"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux=on;path=/ss\"",
         "node n: plugin_opts: mux \"on\": not a number (0: no Mux.Cool, N: Mux.Cool)"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux;path=/ss\"",
         "node n: plugin_opts: mux \"\": not a number (0: no Mux.Cool, N: Mux.Cool)"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux=-1\"",
         "node n: plugin_opts: mux \"-1\": not a number (0: no Mux.Cool, N: Mux.Cool)"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mode=quic;mux=0\"",
         "node n: plugin_opts: mode \"quic\": not served (websocket only)"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux=0;path\"",
         "node n: plugin_opts: path needs a value"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"mux=0;obfs=http\"",
         "node n: plugin_opts: \"obfs\": not served"},
        {"\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"tls;mux=0\"",
         "node n: v2ray-plugin with tls needs \"cert\" in the agent config (mode file or self)"},
        {"\"custom_outbounds\":[{\"tag\":\"warp\"}]",
         "node n: custom_outbounds: not served (traffic leaves directly)"},
        {"\"custom_routes\":[{\"outbound\":\"warp\"}]",
         "node n: custom_routes: not served (only block routes)"},
    };
    static const char *const accepted[] = {
        "\"network\":null,\"networkSettings\":null,\"plugin\":null,\"plugin_opts\":null",
        "\"network\":\"tcp\",\"network_settings\":{},\"tls\":0,\"obfs\":\"\",\"plugin\":\"\"",
        "\"network\":\"\",\"networkSettings\":[],\"tls\":false,\"multiplex\":{\"enabled\":false}",
        "\"custom_outbounds\":[],\"custom_routes\":null,\"tls_settings\":{\"server_name\":\"x\"}",
    };
    char json[512];
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(json, sizeof json, "{\"server_port\":9,\"cipher\":\"aes-128-gcm\",%s}",
                 refused[i].extra);
        state_from_json(&st, "n", json, "{\"users\":[]}");
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, refused[i].msg);
        free_state(&st);
    }
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        snprintf(json, sizeof json, "{\"server_port\":9,\"cipher\":\"aes-128-gcm\",%s}",
                 accepted[i]);
        state_from_json(&st, "n", json, "{\"users\":[]}");
        lower_one(&st, &s);
        sv_spec_free(&s);
        free_state(&st);
    }
}

/* Issue 8: a trojan node (PANEL.md §1.4) lowers to a Trojan inbound over TLS with the config's
 * certificate and fallback; grpc, REALITY and a missing certificate are refused naming the
 * field, and a shadowsocks node refuses cert and fallback. */
static void lower__trojan_node__inbound_over_tls_and_refusals(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_json(&st, "tj", "{\"protocol\":\"trojan\",\"server_port\":443,\"tls\":1,"
                    "\"server_name\":\"node.test\",\"host\":\"h.example\",\"network\":\"tcp\"}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"u1\"}]}");
    st.cert = SV_CERT_SELF;
    st.fallback = strdup("127.0.0.1:8080");
    lower_one(&st, &s);
    assert_int_equal(s.n_inbounds, 1);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_TROJAN);
    assert_false(in->udp);
    assert_int_equal(in->bind.port, 443);
    assert_int_equal(in->tls.cert, SV_CERT_SELF);
    assert_string_equal(in->tls.server_name, "node.test");
    assert_string_equal(in->fallback, "127.0.0.1:8080");
    assert_string_equal(in->users, "tj");
    sv_spec_free(&s);
    free_state(&st);

    static const struct {
        const char *extra, *msg;
    } refused[] = {
        {"\"network\":\"grpc\"", "node tj: networkSettings.serviceName: required for network "
                                 "grpc"},
        {"\"tls\":2", "node tj: tls_settings.server_name: required for tls 2 (REALITY): the "
                      "target site's DNS name"},
        {"\"networkSettings\":{\"path\":\"/x\"}", "node tj: networkSettings: not served (no "
                                                  "transport settings)"},
    };
    char json[256];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(json, sizeof json, "{\"protocol\":\"trojan\",\"server_port\":9,%s}",
                 refused[i].extra);
        state_from_json(&st, "tj", json, "{\"users\":[]}");
        st.cert = SV_CERT_SELF;
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, refused[i].msg);
        free_state(&st);
    }
    state_from_json(&st, "tj", "{\"protocol\":\"trojan\",\"server_port\":9}", "{\"users\":[]}");
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node tj: a trojan node needs \"cert\" in the agent config "
                                 "(mode file or self)");
    free_state(&st);
    state_from_json(&st, "ss", "{\"server_port\":9,\"cipher\":\"aes-128-gcm\"}", "{\"users\":[]}");
    st.fallback = strdup("127.0.0.1:80");
    f.nodes = &st;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node ss: \"fallback\" applies to trojan, vless and anytls nodes only");
    free(st.fallback);
    st.fallback = NULL;
    st.cert = SV_CERT_SELF;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node ss: \"cert\" applies to a shadowsocks node only with "
                                 "v2ray-plugin tls");
    free_state(&st);
}

/* Issue 11, PANEL.md §1.4: a trojan node with tls 2 lowers to a Trojan inbound with REALITY (no
 * certificate needed), on TCP or gRPC, the target as the fallback; a flow is refused. */
static void lower__trojan_reality_node__inbound(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    static const char users[] = "{\"users\":[{\"id\":1,\"uuid\":\"pw1\"}]}";
    state_from_json(&st, "tr", "{\"protocol\":\"trojan\",\"server_port\":443,\"tls\":2,"
                    "\"server_name\":\"www.example.com\",\"tls_settings\":{\"server_name\":"
                    "\"www.example.com\",\"server_port\":\"8443\",\"private_key\":"
                    "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\",\"short_id\":\"ab\"}}", users);
    lower_one(&st, &s);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_TROJAN);
    assert_int_equal(in->tls.cert, SV_CERT_NONE);
    assert_string_equal(in->fallback, "www.example.com:8443");
    assert_string_equal(in->reality.private_key, "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA");
    assert_string_equal(in->reality.short_ids, "ab");
    assert_string_equal(in->reality.server_names, "www.example.com");
    assert_false(in->reality.vision);
    sv_spec_free(&s);
    free_state(&st);

    state_from_json(&st, "tr", "{\"protocol\":\"trojan\",\"server_port\":443,\"tls\":2,"
                    "\"network\":\"grpc\",\"networkSettings\":{\"serviceName\":\"kt-tun\"},"
                    "\"tls_settings\":{\"server_name\":\"www.example.com\",\"server_port\":443,"
                    "\"private_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}", users);
    lower_one(&st, &s);
    in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_TROJAN);
    assert_string_equal(in->grpc.service_name, "kt-tun");
    assert_string_equal(in->fallback, "www.example.com:443");
    sv_spec_free(&s);
    free_state(&st);

    state_from_json(&st, "tr", "{\"protocol\":\"trojan\",\"server_port\":443,\"tls\":2,"
                    "\"flow\":\"xtls-rprx-vision\",\"tls_settings\":{\"server_name\":"
                    "\"www.example.com\",\"server_port\":443,\"private_key\":"
                    "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}", users);
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node tr: flow: not served (no VLESS flow such as "
                                 "xtls-rprx-vision)");
    free_state(&st);
    /* PANEL.md §2.5: an SSPanel node's reality-opts (panel/sspanel.c) give the target, the
     * lists, the client version bounds and xver as they are */
    state_from_json(&st, "tr", "{\"protocol\":\"trojan\",\"server_port\":443,\"tls\":2,"
                    "\"tls_settings\":{\"private_key\":"
                    "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}", users);
    pn_reality *r = &st.node.reality;
    r->target = strdup("127.0.0.1:8443");
    r->server_names = strdup("a.test,b.test");
    r->short_ids = strdup(",ab");
    r->min_client_ver = 0x010800;
    r->max_client_ver = 0x1a031b;
    r->xver = 1;
    r->max_time_diff = 60000;
    lower_one(&st, &s);
    in = &s.inbounds[0];
    assert_string_equal(in->fallback, "127.0.0.1:8443");
    assert_string_equal(in->reality.server_names, "a.test,b.test");
    assert_string_equal(in->reality.short_ids, ",ab");
    assert_int_equal(in->reality.min_client_ver, 0x010800);
    assert_int_equal(in->reality.max_client_ver, 0x1a031b);
    assert_int_equal(in->reality.xver, 1);
    assert_int_equal(in->reality.max_time_diff_ms, 60000);
    sv_spec_free(&s);
    free_state(&st);
}

/* Issue 11: a vless node with tls 2 lowers to a VLESS inbound with REALITY, its target as the
 * fallback; each bad tls_settings member, a flow, another network and the config's fallback
 * are refused naming the field. */
static void lower__vless_reality_node__inbound_and_refusals(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_json(&st, "vr", "{\"protocol\":\"vless\",\"server_port\":443,\"tls\":2,"
                    "\"network\":\"tcp\",\"flow\":\"\",\"tls_settings\":{\"server_name\":"
                    "\"www.example.com\",\"server_port\":\"8443\",\"public_key\":\"x\","
                    "\"private_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\","
                    "\"short_id\":\"0123456789abcdef\",\"allow_insecure\":false}}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
    lower_one(&st, &s);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_VLESS);
    assert_int_equal(in->tls.cert, SV_CERT_NONE);
    assert_string_equal(in->fallback, "www.example.com:8443");
    assert_string_equal(in->reality.private_key, "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA");
    assert_string_equal(in->reality.short_ids, "0123456789abcdef");
    assert_string_equal(in->reality.server_names, "www.example.com");
    assert_int_equal(in->reality.max_time_diff_ms, 0);
    assert_false(in->reality.vision);
    assert_null(in->grpc.service_name);
    sv_spec_free(&s);
    free_state(&st);

    /* PROTOCOLS-2.md §1.6: gRPC over REALITY, the same REALITY settings under the gRPC core */
    state_from_json(&st, "vr", "{\"protocol\":\"vless\",\"server_port\":443,\"tls\":2,"
                    "\"network\":\"grpc\",\"networkSettings\":{\"serviceName\":\"kt-tun\"},"
                    "\"tls_settings\":{\"server_name\":\"www.example.com\",\"server_port\":443,"
                    "\"private_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
    lower_one(&st, &s);
    in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_VLESS);
    assert_int_equal(in->tls.cert, SV_CERT_NONE);
    assert_string_equal(in->grpc.service_name, "kt-tun");
    assert_string_equal(in->fallback, "www.example.com:443");
    assert_string_equal(in->reality.server_names, "www.example.com");
    assert_false(in->reality.vision);
    sv_spec_free(&s);
    free_state(&st);

    /* the Vision flow (PROTOCOLS-2.md §2) is served over REALITY on TCP */
    state_from_json(&st, "vr", "{\"protocol\":\"vless\",\"server_port\":443,\"tls\":2,"
                    "\"flow\":\"xtls-rprx-vision\",\"tls_settings\":{\"server_name\":"
                    "\"www.example.com\",\"server_port\":\"8443\",\"private_key\":"
                    "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}", "{\"users\":[]}");
    lower_one(&st, &s);
    assert_true(s.inbounds[0].reality.vision);
    sv_spec_free(&s);
    free_state(&st);

    static const struct {
        const char *settings, *extra, *msg;
    } refused[] = {
        {"\"server_port\":443", "", "node vr: tls_settings.server_name: required for tls 2 "
                                    "(REALITY): the target site's DNS name"},
        {"\"server_name\":\"a.test\"", "", "node vr: tls_settings.server_port: required for "
                                          "tls 2 (REALITY): the target site's port"},
        {"\"server_name\":\"a.test\",\"server_port\":443", "",
         "node vr: tls_settings.private_key: missing (required for tls 2, REALITY: the server's "
         "X25519 private key)"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":\"AQID\"", "",
         "node vr: tls_settings.private_key: expected an X25519 key, 43 base64url characters"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":"
         "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\",\"short_id\":\"abc\"", "",
         "node vr: tls_settings.short_id \"abc\": expected at most 16 hex digits, an even count"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":"
         "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"", ",\"flow\":\"xtls-rprx-direct\"",
         "node vr: flow \"xtls-rprx-direct\": only \"xtls-rprx-vision\" is served"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":"
         "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"", ",\"network\":\"ws\"",
         "node vr: network \"ws\": not served (vless over REALITY on TCP or gRPC only)"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":"
         "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"", ",\"network\":\"grpc\"",
         "node vr: networkSettings.serviceName: required for network grpc"},
        {"\"server_name\":\"a.test\",\"server_port\":443,\"private_key\":"
         "\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"",
         ",\"flow\":\"xtls-rprx-vision\",\"network\":\"grpc\",\"networkSettings\":"
         "{\"serviceName\":\"kt\"}",
         "node vr: flow \"xtls-rprx-vision\": XTLS Vision is served directly on TLS or REALITY "
         "over TCP only, not over grpc"},
    };
    char json[512];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(json, sizeof json, "{\"protocol\":\"vless\",\"server_port\":9,\"tls\":2,"
                 "\"tls_settings\":{%s}%s}", refused[i].settings, refused[i].extra);
        state_from_json(&st, "vr", json, "{\"users\":[]}");
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, refused[i].msg);
        free_state(&st);
    }
    state_from_json(&st, "vr", "{\"protocol\":\"vless\",\"server_port\":9,\"tls\":2,"
                    "\"tls_settings\":{\"server_name\":\"a.test\",\"server_port\":443,"
                    "\"private_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\"}}",
                    "{\"users\":[]}");
    st.fallback = strdup("127.0.0.1:8080");
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node vr: \"fallback\" does not apply to tls 2 (REALITY): the "
                                 "target is tls_settings.server_name:server_port");
    free_state(&st);
}

/* Issue 9: a vless node (PANEL.md §1.4) lowers to a VLESS inbound, over TLS with the config's
 * certificate when tls is 1, in clear when 0; transports, REALITY, a flow and VLESS encryption
 * are refused naming the field. */
static void lower__vless_node__inbound_and_refusals(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_json(&st, "vl", "{\"protocol\":\"vless\",\"server_port\":443,\"tls\":1,"
                    "\"network\":\"tcp\",\"flow\":null,\"decryption\":\"none\"}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
    st.cert = SV_CERT_SELF;
    st.fallback = strdup("127.0.0.1:8080");
    lower_one(&st, &s);
    assert_int_equal(s.n_inbounds, 1);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_VLESS);
    assert_false(in->udp);
    assert_int_equal(in->bind.port, 443);
    assert_int_equal(in->tls.cert, SV_CERT_SELF);
    assert_string_equal(in->fallback, "127.0.0.1:8080");
    assert_string_equal(in->users, "vl");
    sv_spec_free(&s);
    free_state(&st);

    /* tls 0: in clear, the config's certificate unused; the fallback still applies. */
    state_from_json(&st, "vl", "{\"protocol\":\"vless\",\"server_port\":8443,\"flow\":\"\"}",
                    "{\"users\":[]}");
    st.cert = SV_CERT_SELF;
    st.fallback = strdup("127.0.0.1:8080");
    lower_one(&st, &s);
    assert_int_equal(s.inbounds[0].protocol, SV_INBOUND_VLESS);
    assert_int_equal(s.inbounds[0].tls.cert, SV_CERT_NONE);
    assert_null(s.inbounds[0].tls.server_name);
    assert_string_equal(s.inbounds[0].fallback, "127.0.0.1:8080");
    sv_spec_free(&s);
    free_state(&st);

    static const struct {
        const char *extra, *msg;
    } refused[] = {
        {"\"network\":\"grpc\",\"networkSettings\":{\"serviceName\":\"\"}",
         "node vl: networkSettings.serviceName: required for network grpc"},
        {"\"network\":\"xhttp\"", "node vl: network \"xhttp\": not served (vless on TCP, "
                                  "WebSocket, HTTPUpgrade or gRPC only)"},
        {"\"tls\":2", "node vl: tls_settings.server_name: required for tls 2 (REALITY): the "
                      "target site's DNS name"},
        {"\"flow\":\"xtls-rprx-direct\"", "node vl: flow \"xtls-rprx-direct\": only "
                                          "\"xtls-rprx-vision\" is served"},
        /* Vision sits directly on TLS over TCP (PROTOCOLS-2.md §2.1, as Xray's server) */
        {"\"flow\":\"xtls-rprx-vision\",\"network\":\"ws\"",
         "node vl: flow \"xtls-rprx-vision\": XTLS Vision is served directly on TLS or REALITY "
         "over TCP only, not over ws"},
        {"\"flow\":\"xtls-rprx-vision\",\"network\":\"httpupgrade\"",
         "node vl: flow \"xtls-rprx-vision\": XTLS Vision is served directly on TLS or REALITY "
         "over TCP only, not over httpupgrade"},
        {"\"flow\":\"xtls-rprx-vision\",\"network\":\"grpc\",\"networkSettings\":"
         "{\"serviceName\":\"kt\"}",
         "node vl: flow \"xtls-rprx-vision\": XTLS Vision is served directly on TLS or REALITY "
         "over TCP only, not over grpc"},
        {"\"decryption\":\"mlkem768x25519plus.native.600s.x\"",
         "node vl: decryption: not served (no VLESS encryption)"},
        {"\"multiplex\":{\"enabled\":true}", "node vl: multiplex: not served (no multiplexing)"},
    };
    char json[256];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(json, sizeof json, "{\"protocol\":\"vless\",\"server_port\":9,\"tls\":1,%s}",
                 refused[i].extra);
        state_from_json(&st, "vl", json, "{\"users\":[]}");
        st.cert = SV_CERT_SELF;
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, refused[i].msg);
        free_state(&st);
    }
    state_from_json(&st, "vl", "{\"protocol\":\"vless\",\"server_port\":9,\"tls\":1}",
                    "{\"users\":[]}");
    ag_fleet f = {.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node vl: a vless node with tls 1 needs \"cert\" in the agent "
                                 "config (mode file or self)");
    free_state(&st);
    /* Vision needs an outer TLS (PROTOCOLS-2.md §2.1): not in clear */
    state_from_json(&st, "vl", "{\"protocol\":\"vless\",\"server_port\":9,\"tls\":0,"
                    "\"flow\":\"xtls-rprx-vision\"}", "{\"users\":[]}");
    f = (ag_fleet){.nodes = &st, .n = 1};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node vl: flow \"xtls-rprx-vision\": XTLS Vision is served over "
                                 "tls 1 (TLS) or 2 (REALITY) only, not over tls 0");
    free_state(&st);
}

/* Issue 11: the Vision flow on a vless node with tls 1 (PANEL.md §1.4, as Xboard nodes run it)
 * lowers to a VLESS inbound over TLS with the config's certificate and the flow on, so the TLS
 * layer serves Vision's switch to direct copy (PROTOCOLS-2.md §2.6). */
static void lower__vless_tls_vision_node__inbound(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    state_from_json(&st, "vv", "{\"protocol\":\"vless\",\"server_port\":443,\"tls\":1,"
                    "\"network\":\"tcp\",\"flow\":\"xtls-rprx-vision\",\"server_name\":"
                    "\"node.example.com\",\"decryption\":\"none\"}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
    st.cert = SV_CERT_SELF;
    st.fallback = strdup("127.0.0.1:8080");
    lower_one(&st, &s);
    assert_int_equal(s.n_inbounds, 1);
    const sv_inbound_spec *in = &s.inbounds[0];
    assert_int_equal(in->protocol, SV_INBOUND_VLESS);
    assert_int_equal(in->tls.cert, SV_CERT_SELF);
    assert_string_equal(in->tls.server_name, "node.example.com");
    assert_true(in->reality.vision);
    assert_null(in->reality.private_key); /* not REALITY */
    assert_null(in->ws.path);
    assert_null(in->grpc.service_name);
    assert_string_equal(in->fallback, "127.0.0.1:8080");
    sv_spec_free(&s);
    free_state(&st);
}

/* Issue 9: a vmess node (PANEL.md §1.4) lowers to a VMess inbound, on plain TCP for tls 0 and
 * over TLS with the config's certificate for tls 1; other networks, REALITY, transport settings,
 * tls 1 without a certificate, a certificate with tls 0 and a fallback are refused naming them. */
static void lower__vmess_node__tcp_or_tls_and_refusals(void **state)
{
    (void)state;
    ag_node_state st;
    sv_spec s;
    sv_error err = {0};
    state_from_json(&st, "vm", "{\"protocol\":\"vmess\",\"server_port\":443,\"tls\":0,"
                    "\"network\":\"tcp\",\"networkSettings\":null}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
    lower_one(&st, &s);
    assert_int_equal(s.n_inbounds, 1);
    assert_int_equal(s.inbounds[0].protocol, SV_INBOUND_VMESS);
    assert_false(s.inbounds[0].udp);
    assert_int_equal(s.inbounds[0].tls.cert, SV_CERT_NONE);
    assert_null(s.inbounds[0].fallback);
    sv_spec_free(&s);
    free_state(&st);
    state_from_json(&st, "vm", "{\"protocol\":\"vmess\",\"server_port\":443,\"tls\":1,"
                    "\"host\":\"h.example\"}", "{\"users\":[]}");
    st.cert = SV_CERT_SELF;
    lower_one(&st, &s);
    assert_int_equal(s.inbounds[0].protocol, SV_INBOUND_VMESS);
    assert_int_equal(s.inbounds[0].tls.cert, SV_CERT_SELF);
    assert_string_equal(s.inbounds[0].tls.server_name, "h.example");
    sv_spec_free(&s);
    free_state(&st);

    static const struct {
        const char *extra, *msg;
        enum sv_cert_source cert;
        bool fallback;
    } refused[] = {
        {"\"network\":\"xhttp\"", "node vm: network \"xhttp\": not served (vmess on TCP, "
                                   "WebSocket, HTTPUpgrade or gRPC only)", SV_CERT_NONE, false},
        {"\"tls\":2", "node vm: tls 2 (REALITY): not served (vmess in clear or over TLS "
                      "only)", SV_CERT_SELF, false},
        {"\"networkSettings\":{\"path\":\"/x\"}", "node vm: networkSettings: not served (no "
                                                    "transport settings)", SV_CERT_NONE, false},
        {"\"tls\":1", "node vm: a vmess node with tls 1 needs \"cert\" in the agent config (mode "
                      "file or self)", SV_CERT_NONE, false},
        {"\"tls\":0", "node vm: \"cert\" is set but the vmess node has tls 0", SV_CERT_SELF,
         false},
        {"\"tls\":0", "node vm: \"fallback\" applies to trojan, vless and anytls nodes only", SV_CERT_NONE, true},
    };
    char json[256];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(json, sizeof json, "{\"protocol\":\"vmess\",\"server_port\":9,%s}",
                 refused[i].extra);
        state_from_json(&st, "vm", json, "{\"users\":[]}");
        st.cert = refused[i].cert;
        if (refused[i].fallback)
            st.fallback = strdup("127.0.0.1:80");
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, refused[i].msg);
        free_state(&st);
    }
}

/* Issue 9: a trojan, vless or vmess node with network ws lowers its networkSettings path and
 * headers.Host (or network_settings), an empty path to "/"; the ?ed= form stays in the path for
 * the layer. vless and vmess keep it with tls 0 (WebSocket in clear). Issue 10: the same with
 * network httpupgrade, marked as HTTPUpgrade; its Host also as networkSettings.host. */
static void lower__ws_node__ws_settings(void **state)
{
    (void)state;
    static const struct {
        const char *extra, *path, *host;
    } cases[] = {
        {"\"networkSettings\":{\"path\":\"/tj?ed=2048\",\"headers\":{\"Host\":\"cdn.test\"}}",
         "/tj?ed=2048", "cdn.test"},
        {"\"network_settings\":{\"path\":\"/p\"}", "/p", NULL},
        {"\"networkSettings\":{\"path\":\"\",\"headers\":{\"Host\":\"\"}}", "/", NULL},
        {"\"networkSettings\":null", "/", NULL},
        {"\"networkSettings\":{\"path\":\"/h\",\"host\":\"up.test\"}", "/h", "up.test"},
    };
    static const struct {
        const char *protocol;
        int tls;
    } protos[] = {{"trojan", 1}, {"vless", 0}, {"vless", 1}, {"vmess", 0}, {"vmess", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] * 5 * 2; i++) {
        size_t nc = sizeof cases / sizeof cases[0], c = i % nc, pr = i / nc % 5;
        bool hu = i >= sizeof cases / sizeof cases[0] * 5; /* issue 10: HTTPUpgrade */
        char json[256];
        ag_node_state st;
        sv_spec s;
        snprintf(json, sizeof json, "{\"protocol\":\"%s\",\"server_port\":443,\"tls\":%d,"
                 "\"network\":\"%s\",%s}", protos[pr].protocol, protos[pr].tls,
                 hu ? "httpupgrade" : "ws", cases[c].extra);
        state_from_json(&st, "tj", json, "{\"users\":[{\"id\":1,\"uuid\":"
                        "\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
        st.cert = protos[pr].tls ? SV_CERT_SELF : SV_CERT_NONE;
        lower_one(&st, &s);
        assert_int_equal(s.inbounds[0].tls.cert, st.cert);
        assert_int_equal(s.n_inbounds, 1);
        assert_string_equal(s.inbounds[0].ws.path, cases[c].path);
        assert_int_equal(s.inbounds[0].ws.httpupgrade, hu);
        if (cases[c].host == NULL)
            assert_null(s.inbounds[0].ws.host);
        else
            assert_string_equal(s.inbounds[0].ws.host, cases[c].host);
        sv_spec_free(&s);
        free_state(&st);
    }
}

/* Issue 10: a trojan, vless or vmess node with network grpc lowers to an inbound with the
 * networkSettings.serviceName (network_settings too), in clear or over TLS as the node says. */
static void lower__grpc_node__service_name(void **state)
{
    (void)state;
    static const struct {
        const char *protocol, *extra;
        int tls;
    } cases[] = {
        {"trojan", "\"networkSettings\":{\"serviceName\":\"tun-svc\"}", 1},
        {"vless", "\"network_settings\":{\"serviceName\":\"tun-svc\"}", 0},
        {"vless", "\"networkSettings\":{\"serviceName\":\"tun-svc\"}", 1},
        {"vmess", "\"networkSettings\":{\"serviceName\":\"tun-svc\"}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256];
        ag_node_state st;
        sv_spec s;
        snprintf(json, sizeof json, "{\"protocol\":\"%s\",\"server_port\":443,\"tls\":%d,"
                 "\"network\":\"grpc\",%s}", cases[i].protocol, cases[i].tls, cases[i].extra);
        state_from_json(&st, "g", json, "{\"users\":[{\"id\":1,\"uuid\":"
                        "\"27848739-7e62-4138-9fd3-098a63964b6b\"}]}");
        st.cert = cases[i].tls ? SV_CERT_SELF : SV_CERT_NONE;
        lower_one(&st, &s);
        assert_int_equal(s.n_inbounds, 1);
        assert_int_equal(s.inbounds[0].tls.cert, st.cert);
        assert_string_equal(s.inbounds[0].grpc.service_name, "tun-svc");
        assert_null(s.inbounds[0].ws.path);
        sv_spec_free(&s);
        free_state(&st);
    }
}

/* Issue 9: a shadowsocks node with the SIP003 v2ray-plugin lowers to a shadowsocks inbound
 * with a WebSocket path (default "/") and Host, over TLS with the config's certificate when
 * plugin_opts says tls, with Mux.Cool unless mux=0 (v2ray-plugin's default is 1); UDP stays on
 * the port. */
static void lower__ss_v2ray_plugin__websocket_inbound(void **state)
{
    (void)state;
    static const struct {
        const char *opts, *path, *host;
        bool tls, mux;
    } cases[] = {
        {"mux=0", "/", NULL, false, false},
        {"path=/ss;host=cdn.test;mux=0;loglevel=none", "/ss", "cdn.test", false, false},
        {"server;tls;host=node.test;path=/s?ed=2048;mux=0;mode=websocket;", "/s?ed=2048",
         "node.test", true, false},
        {"", "/", NULL, false, true},
        {"path=/ss;mux=1", "/ss", NULL, false, true},
        {"tls;host=node.test;mux=8", "/", "node.test", true, true},
        {"mux=00", "/", NULL, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256];
        ag_node_state st;
        sv_spec s;
        snprintf(json, sizeof json, "{\"server_port\":8388,\"cipher\":\"aes-128-gcm\","
                 "\"plugin\":\"v2ray-plugin\",\"plugin_opts\":\"%s\"}", cases[i].opts);
        state_from_json(&st, "ss", json, "{\"users\":[{\"id\":1,\"uuid\":\"u1\"}]}");
        st.cert = cases[i].tls ? SV_CERT_SELF : SV_CERT_NONE;
        lower_one(&st, &s);
        const sv_inbound_spec *in = &s.inbounds[0];
        assert_int_equal(in->protocol, SV_INBOUND_SHADOWSOCKS);
        assert_true(in->udp);
        assert_string_equal(in->ws.path, cases[i].path);
        if (cases[i].host == NULL)
            assert_null(in->ws.host);
        else
            assert_string_equal(in->ws.host, cases[i].host);
        assert_int_equal(in->tls.cert, st.cert);
        assert_int_equal(in->ws.mux, cases[i].mux);
        sv_spec_free(&s);
        free_state(&st);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* routes and matchers                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void lower__match_string_array_object__are_the_same(void **state)
{
    static const char *const forms[] = {
        "[\"domain:a.test\",\"keyword:ads\",\"10.0.0.0/8\"]",
        "\"domain:a.test, keyword:ads ,10.0.0.0/8\"",
        "{\"0\":\"domain:a.test\",\"2\":\"keyword:ads\",\"5\":\"10.0.0.0/8\"}",
    };
    sv_spec first = {0};
    for (size_t i = 0; i < 3; i++) {
        char node[256];
        ag_node_state st;
        sv_spec s;
        snprintf(node, sizeof node, "{\"server_port\":1,\"cipher\":\"aes-128-gcm\",\"routes\":"
                 "[{\"id\":4,\"match\":%s,\"action\":\"block\"}]}", forms[i]);
        state_from_json(&st, "n", node, "{\"users\":[]}");
        assert_int_equal(st.node.routes[0].n_match, 3);
        assert_string_equal(st.node.routes[0].match[1], "keyword:ads");
        lower_one(&st, &s);
        assert_int_equal(s.route.n_rules, 1);
        const sv_route_rule *r = &s.route.rules[0];
        assert_int_equal(r->n_matchers, 3);
        assert_int_equal(r->matchers[0].kind, SV_MATCH_DOMAIN_SUFFIX);
        assert_string_equal(r->matchers[0].text, "a.test");
        assert_int_equal(r->matchers[1].kind, SV_MATCH_DOMAIN_KEYWORD);
        assert_string_equal(r->matchers[1].text, "ads");
        assert_int_equal(r->matchers[2].kind, SV_MATCH_CIDR);
        assert_int_equal(r->matchers[2].cidr.prefix, 8);
        if (i == 0)
            first = s;
        else
            sv_spec_free(&s);
        free_state(&st);
    }
    sv_spec_free(&first);

    /* The v1.7 fixture carries its match as a comma string. */
    char np[PATH_MAX];
    json_t *body;
    pn_node node;
    sv_error err = {0};
    fixture_path(np, sizeof np, "v2board-config-vmess-tcp-v17.json");
    assert_int_equal(pn_json_load_file(np, PN_BODY_MAX, &body, &err), 0);
    assert_int_equal(pn_node_parse(body, "vmess", PN_PARSE_STRICT, &node, &err), 0);
    json_decref(body);
    assert_int_equal(node.n_routes, 1);
    assert_int_equal(node.routes[0].n_match, 2);
    assert_string_equal(node.routes[0].match[0], "domain:ads.example.test");
    assert_string_equal(node.routes[0].match[1], "regexp:.*\\.tracker\\.example$");
    pn_node_free(&node);
}

typedef struct match_case {
    const char *entry;
    int rc;
    enum sv_match_kind kind;
    const char *text;   /* text kinds */
    int family;         /* cidr */
    const char *addr;   /* cidr, as text after masking */
    unsigned prefix;
    unsigned lo, hi;    /* port */
} match_case;

static void check_match_case(const match_case *c)
{
    sv_route_match m;
    int rc = ag_lower_match(c->entry, &m);
    if (rc != c->rc)
        fail_msg("\"%s\": rc %d, want %d", c->entry, rc, c->rc);
    if (rc != AG_MATCH_OK)
        return;
    assert_int_equal(m.kind, c->kind);
    if (c->text != NULL)
        assert_string_equal(m.text, c->text);
    if (c->kind == SV_MATCH_CIDR) {
        uint8_t want[16] = {0};
        assert_int_equal(m.cidr.family, c->family);
        assert_int_equal(inet_pton(c->family, c->addr, want), 1);
        assert_memory_equal(m.cidr.addr, want, c->family == AF_INET ? 4 : 16);
        assert_int_equal(m.cidr.prefix, c->prefix);
    }
    if (c->kind == SV_MATCH_PORT) {
        assert_int_equal(m.port_lo, c->lo);
        assert_int_equal(m.port_hi, c->hi);
    }
    free(m.text);
}

#define TXT(e, k, t) {.entry = (e), .kind = (k), .text = (t)}
#define CIDR(e, f, a, p)                                                                           \
    {.entry = (e), .kind = SV_MATCH_CIDR, .family = (f), .addr = (a), .prefix = (p)}
#define PORT(e, l, h) {.entry = (e), .kind = SV_MATCH_PORT, .lo = (l), .hi = (h)}
#define RC(e, r) {.entry = (e), .rc = (r)}

static void lower__every_match_form(void **state)
{
    static const match_case cases[] = {
        TXT("domain:example.com", SV_MATCH_DOMAIN_SUFFIX, "example.com"),
        TXT("full:www.example.com", SV_MATCH_DOMAIN, "www.example.com"),
        TXT("keyword:tracker", SV_MATCH_DOMAIN_KEYWORD, "tracker"),
        /* issue 3: a plain entry is a regex (was a domain suffix before PCRE2 landed) */
        TXT("example.org", SV_MATCH_REGEX, "example.org"),
        TXT("regexp:(^|\\.)example\\.test$", SV_MATCH_REGEX, "(^|\\.)example\\.test$"),
        TXT(".*\\.tracker\\.", SV_MATCH_REGEX, ".*\\.tracker\\."),
        CIDR("192.0.2.1", AF_INET, "192.0.2.1", 32),
        CIDR("192.0.2.77/24", AF_INET, "192.0.2.0", 24),
        CIDR("0.0.0.0/0", AF_INET, "0.0.0.0", 0),
        CIDR("2001:db8::1", AF_INET6, "2001:db8::1", 128),
        CIDR("2001:db8:ffff::/33", AF_INET6, "2001:db8:8000::", 33),
        PORT("port:25", 25, 25),
        PORT("port:1000-2000", 1000, 2000),
        PORT("port:65535", 65535, 65535),
        RC("protocol:bittorrent", AG_MATCH_SKIPPED),
        RC("regexp:", -EINVAL),
        RC("*.example.com", AG_MATCH_BAD_REGEX),  /* invalid: panics XrayR and V2bX */
        RC("regexp:a(b", AG_MATCH_BAD_REGEX),
        RC("a||b", AG_MATCH_BAD_REGEX),           /* empty alternative: matches everything */
        RC("regexp:.*", AG_MATCH_BAD_REGEX),
        RC("x?", AG_MATCH_BAD_REGEX),
        RC("\\b", AG_MATCH_BAD_REGEX),
        RC("^$", AG_MATCH_BAD_REGEX),
        RC("", -EINVAL),
        RC("domain:", -EINVAL),
        RC("port:0", -EINVAL),
        RC("port:65536", -EINVAL),
        RC("port:20-10", -EINVAL),
        RC("port:1-", -EINVAL),
        RC("port:x", -EINVAL),
        RC("10.0.0.0/33", -EINVAL),
        RC("10.0.0.0/", -EINVAL),
        RC("::/129", -EINVAL),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_match_case(&cases[i]);
}

static void lower__bad_regexps_protocols_and_other_actions__are_skipped(void **state)
{
    ag_node_state st;
    sv_spec s;
    state_from_json(&st, "n",
                    "{\"server_port\":1,\"cipher\":\"aes-128-gcm\",\"routes\":["
                    "{\"id\":1,\"match\":[\"regexp:a||b\",\"protocol:bittorrent\",\"*.x\","
                    "\"regexp:.*\"],\"action\":\"block\"},"
                    "{\"id\":2,\"match\":[\"regexp:a(\",\"full:x.test\",\"port:99999\","
                    "\"regexp:^ads\\\\.\"],\"action\":\"block\"},"
                    "{\"id\":3,\"match\":[\"a.test\"],\"action\":\"dns\","
                    "\"action_value\":\"1.1.1.1\"},"
                    "{\"id\":4,\"match\":\"b.test\",\"action\":\"direct\"},"
                    "{\"id\":5,\"match\":\"keyword:c\",\"action\":\"block\"}]}",
                    "{\"users\":[]}");
    lower_one(&st, &s);
    /* route 1: only refused entries (empty-matching, invalid, protocol:) → no rule, so never a
     * block-everything rule; 4: neither block nor dns → no rule; 3: dns (issue 13) → a rule
     * after the block rules */
    assert_int_equal(s.route.n_rules, 3);
    assert_string_equal(s.route.rules[2].dns_server, "1.1.1.1");
    assert_false(s.route.rules[2].audit);
    assert_int_equal(s.route.rules[0].n_matchers, 2);
    assert_int_equal(s.route.rules[0].matchers[0].kind, SV_MATCH_DOMAIN);
    assert_string_equal(s.route.rules[0].matchers[0].text, "x.test");
    assert_int_equal(s.route.rules[0].matchers[1].kind, SV_MATCH_REGEX);
    assert_string_equal(s.route.rules[0].matchers[1].text, "^ads\\.");
    assert_int_equal(s.route.rules[1].n_matchers, 1);
    assert_int_equal(s.route.rules[1].matchers[0].kind, SV_MATCH_DOMAIN_KEYWORD);
    /* issue 12: block routes are audit rules, reported with the panel's route id */
    assert_true(s.route.rules[0].audit);
    assert_int_equal(s.route.rules[0].audit_id, 2);
    assert_true(s.route.rules[1].audit);
    assert_int_equal(s.route.rules[1].audit_id, 5);
    sv_spec_free(&s);
    free_state(&st);
}

static void lower__two_nodes__share_outbounds_and_scope_rules(void **state)
{
    ag_node_state st[2];
    sv_spec s;
    state_from_json(&st[0], "a",
                    "{\"server_port\":1000,\"cipher\":\"aes-128-gcm\",\"routes\":["
                    "{\"id\":1,\"match\":[\"domain:a.test\"],\"action\":\"block\"}]}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"u-one\"}]}");
    state_from_json(&st[1], "b",
                    "{\"server_port\":\"2000\",\"cipher\":\"aes-256-gcm\",\"routes\":["
                    "{\"id\":2,\"match\":[\"10.0.0.0/8\",\"port:22\"],\"action\":\"block\"}]}",
                    "{\"users\":[{\"id\":1,\"uuid\":\"u-two\",\"speed_limit\":1},"
                    "{\"id\":7,\"uuid\":\"u-three\"}]}");
    ag_fleet f = {.nodes = st, .n = 2};
    sv_error err = {0};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), 0);
    check_shared(&s);
    assert_int_equal(s.n_inbounds, 2);
    assert_string_equal(s.inbounds[0].tag, "a");
    assert_int_equal(s.inbounds[0].bind.port, 1000);
    assert_string_equal(s.inbounds[1].tag, "b");
    assert_int_equal(s.inbounds[1].bind.port, 2000);
    assert_string_equal(s.inbounds[1].users, "b");
    assert_int_equal(s.n_user_sets, 2);
    assert_int_equal(s.user_sets[0].n_users, 1);
    check_user(&s.user_sets[1].users[0], 1, "u-two", 125000, 0);
    check_user(&s.user_sets[1].users[1], 7, "u-three", 0, 0);
    assert_int_equal(s.route.n_rules, 2);
    for (size_t i = 0; i < 2; i++) {
        const sv_route_rule *r = &s.route.rules[i];
        assert_int_equal(r->n_inbounds, 1);
        assert_string_equal(r->inbounds[0], i == 0 ? "a" : "b");
        assert_string_equal(r->outbound, "block");
    }
    assert_int_equal(s.route.rules[1].n_matchers, 2);
    assert_int_equal(s.route.rules[1].matchers[1].kind, SV_MATCH_PORT);
    sv_spec_free(&s);
    ag_fleet_free(&(ag_fleet){.nodes = memcpy(malloc(sizeof st), st, sizeof st), .n = 2});
}

/* ------------------------------------------------------------------------------------------ */
/* comparisons and panel-body variants                                                          */
/* ------------------------------------------------------------------------------------------ */

static void lower__settings_and_transport_equality(void **state)
{
    const char *base = "{\"server_port\":1,\"cipher\":\"aes-128-gcm\",\"routes\":["
                       "{\"id\":1,\"match\":\"a.test\",\"action\":\"block\"}]}";
    ag_node_state a, b;
    state_from_json(&a, "n", base, "{\"users\":[{\"id\":1,\"uuid\":\"x\"}]}");
    state_from_json(&b, "n", base, "{\"users\":[{\"id\":2,\"uuid\":\"y\"}]}");
    assert_true(ag_node_settings_equal(&a, &b)); /* users differ only */
    assert_false(pn_users_equal(&a.users, &b.users));
    free(b.node.routes[0].match[0]);
    b.node.routes[0].match[0] = strdup("b.test");
    assert_false(ag_node_settings_equal(&a, &b)); /* a route changed ... */
    assert_true(ag_node_transport_equal(&a, &b)); /* ... but not the transport */
    b.node.server_port = 2;
    assert_false(ag_node_transport_equal(&a, &b));
    b.node.server_port = 1;
    b.listen = strdup("127.0.0.1");
    assert_false(ag_node_transport_equal(&a, &b));
    free(b.listen);
    b.listen = NULL;
    b.node.set = PN_SET_TLS; /* issue 15: the recorded transport settings count too */
    assert_false(ag_node_transport_equal(&a, &b));
    assert_false(pn_node_equal(&a.node, &b.node));
    b.node.set = 0;
    b.node.network = strdup("tcp");
    assert_false(ag_node_transport_equal(&a, &b));
    assert_false(pn_node_equal(&a.node, &b.node));
    free_state(&a);
    free_state(&b);
}

static void expect_node_error(const char *json, const char *msg)
{
    json_t *body = json_loads(json, 0, NULL);
    pn_node node;
    sv_error err = {0};
    assert_non_null(body);
    int rc = pn_node_parse(body, "shadowsocks", PN_PARSE_STRICT, &node, &err);
    json_decref(body);
    if (rc == 0 || strcmp(err.msg, msg) != 0)
        fail_msg("%s: want \"%s\", got %d \"%s\"", json, msg, rc, err.msg);
    assert_null(node.protocol);
}

static void expect_users_error(const char *json, const char *msg)
{
    json_t *body = json_loads(json, 0, NULL);
    pn_users users;
    sv_error err = {0};
    assert_non_null(body);
    int rc = pn_users_parse(body, PN_PARSE_STRICT, &users, &err);
    json_decref(body);
    if (rc == 0 || strcmp(err.msg, msg) != 0)
        fail_msg("%s: want \"%s\", got %d \"%s\"", json, msg, rc, err.msg);
    assert_int_equal(users.n, 0);
}

static void panel__body_variants_and_errors(void **state)
{
    char np[PATH_MAX];
    json_t *body;
    pn_node node;
    sv_error err = {0};
    fixture_path(np, sizeof np, "v2board-config-edge-string-intervals.json");
    assert_int_equal(pn_json_load_file(np, PN_BODY_MAX, &body, &err), 0);
    assert_int_equal(pn_node_parse(body, NULL, PN_PARSE_STRICT, &node, &err), 0);
    json_decref(body);
    assert_int_equal(node.push_interval, 60); /* "60" */
    assert_int_equal(node.pull_interval, 30); /* "30" */
    assert_string_equal(node.routes[0].action_value, "");
    assert_int_equal(node.routes[0].n_match, 2);
    pn_node_free(&node);

    expect_node_error("{\"cipher\":\"aes-128-gcm\"}", "server_port: missing");
    expect_node_error("{\"server_port\":\"88a\"}", "server_port: expected a number");
    expect_node_error("{\"server_port\":70000}", "server_port: must be at most 65535");
    expect_node_error("{\"server_port\":0}", "server_port: must be between 1 and 65535");
    expect_node_error("{\"server_port\":1,\"cipher\":5}", "cipher: expected a string");
    expect_node_error("{\"server_port\":1,\"routes\":[{\"match\":[1],\"action\":\"block\"}]}",
                      "routes[0].match: expected strings");
    expect_node_error("{\"server_port\":1,\"routes\":[{\"match\":[]}]}",
                      "routes[0].action: missing");
    expect_node_error("{\"server_port\":1,\"base_config\":{\"pull_interval\":-5}}",
                      "base_config.pull_interval: must not be negative");
    expect_users_error("{}", "users: missing");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"a\"},{\"id\":2}]}",
                       "users[1].uuid: missing");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"\"}]}", "users[0].uuid: empty");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"a\",\"speed_limit\":-1}]}",
                       "users[0].speed_limit: must not be negative");
    expect_users_error("{\"users\":[{\"id\":\"1\",\"uuid\":\"a\"}]}",
                       "users[0].id: expected an integer");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"a\"},{\"id\":2,\"uuid\":7}]}",
                       "users[1].uuid: expected a string");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"a\",\"device_limit\":4294967296}]}",
                       "users[0].device_limit: must be at most 4294967295");
    expect_users_error("{\"users\":[{\"uuid\":\"a\",\"id\":null}]}", "users[0].id: missing");

    /* Strict (operator-written) bodies name keys no UniProxy body has ... */
    expect_node_error("{\"server_port\":1,\"srever_port\":2}",
                      "srever_port: unknown key (did you mean \"server_port\"?)");
    expect_node_error("{\"server_port\":1,\"tls\":2,\"tls_settings\":{\"shortid\":\"ab\"}}",
                      "tls_settings.shortid: unknown key (did you mean \"short_id\"?)");
    expect_node_error("{\"server_port\":1,\"tls\":2,\"tls_settings\":{\"privateKey\":\"k\"}}",
                      "tls_settings.privateKey: unknown key (did you mean \"private_key\"?)");
    expect_node_error("{\"server_port\":1,\"base_config\":{\"pull\":1}}",
                      "base_config.pull: unknown key");
    expect_node_error("{\"server_port\":1,\"routes\":[{\"action\":\"block\",\"mach\":[]}]}",
                      "routes[0].mach: unknown key (did you mean \"match\"?)");
    expect_users_error("{\"users\":[],\"total\":0}", "total: unknown key");
    expect_users_error("{\"users\":[{\"id\":1,\"uuid\":\"a\",\"speed\":1}]}",
                       "users[0].speed: unknown key");
    /* ... while a panel's answer may carry keys of its own. */
    json_t *extra = json_loads("{\"server_port\":1,\"srever_port\":2,\"new_key\":{}}", 0, NULL);
    assert_int_equal(pn_node_parse(extra, "shadowsocks", 0, &node, &err), 0);
    assert_int_equal(node.server_port, 1);
    assert_string_equal(node.unknown, "srever_port (did you mean \"server_port\"?)\nnew_key\n");
    pn_node clone;
    assert_int_equal(pn_node_clone(&clone, &node), 0);
    assert_string_equal(clone.unknown, node.unknown);
    pn_node_free(&clone);
    pn_node_free(&node);
    json_decref(extra);
    pn_users users;
    extra = json_loads("{\"users\":[{\"id\":3,\"uuid\":\"a\",\"alive\":1}],\"x\":1}", 0, NULL);
    assert_int_equal(pn_users_parse(extra, 0, &users, &err), 0);
    assert_int_equal(users.n, 1);
    pn_users_free(&users);
    json_decref(extra);
}

static void panel__local_missing_file__reports_through_callback(void **state)
{
    pn_local_options o = {.node_file = "/nonexistent/node.json",
                          .users = json_pack("{s:[]}", "users")};
    pn_client *c;
    sv_error err = {0};
    got g = {0};
    assert_int_equal(pn_local_new(&o, &c, &err), 0);
    json_decref((json_t *)o.users); /* the client holds its own reference */
    assert_int_equal(pn_fetch_node(c, got_node, &g), 0);
    assert_int_equal(g.node_rc, -ENOENT);
    assert_string_equal(g.err.msg, "node_file: /nonexistent/node.json: No such file or directory");
    assert_int_equal(pn_fetch_users(c, got_users, &g), 0);
    assert_int_equal(g.users_rc, PN_OK);
    assert_int_equal(g.users.n, 0);
    pn_client_free(c);

    pn_local_options bad = {.users_file = "u"};
    assert_int_equal(pn_local_new(&bad, &c, &err), -EINVAL);
}

/* The local panel's users_file (issue 13: read without a JSON tree when plain): a plain body, a
 * strict refusal and a JSON error each reach the callback as they did through jansson. */
static void panel__local_users_file__scanned_or_refused_with_the_path(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"users\":[{\"id\":4,\"uuid\":\"u4\",\"device_limit\":2}]}",
        "{\"users\":[{\"id\":4,\"uuid\":\"u4\",\"speed\":1}]}",
        "{\"users\":[{\"id\":4,}]}",
    };
    char path[] = "/tmp/katana-test-users-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bodies[i], f);
        fclose(f);
        pn_local_options o = {.node_file = path, .users_file = path};
        pn_client *c;
        sv_error err = {0};
        got g = {0};
        assert_int_equal(pn_local_new(&o, &c, &err), 0);
        assert_int_equal(pn_fetch_users(c, got_users, &g), 0);
        pn_client_free(c);
        char want[PATH_MAX + 80];
        if (i == 0) {
            assert_int_equal(g.users_rc, PN_OK);
            assert_int_equal(g.users.n, 1);
            assert_int_equal(g.users.users[0].id, 4);
            assert_string_equal(g.users.users[0].uuid, "u4");
            assert_int_equal(g.users.users[0].device_limit, 2);
            pn_users_free(&g.users);
        } else if (i == 1) {
            snprintf(want, sizeof want, "users body %s: users[0].speed: unknown key", path);
            assert_int_equal(g.users_rc, -EINVAL);
            assert_string_equal(g.err.msg, want);
        } else {
            snprintf(want, sizeof want, "%s: line 1, column ", path);
            assert_int_equal(g.users_rc, -EINVAL);
            assert_memory_equal(g.err.msg, want, strlen(want));
        }
    }
    unlink(path);
}

/* Issue 13: a shed list keeps its digest (and, asked to, its ids and limits), compares with the
 * list it was and with no other, copies as shed, refuses to be lowered, and is made whole only
 * by a candidate with its digest. */
static void model__shed_users__compare_by_digest_and_restore_only_the_same(void **state)
{
    (void)state;
    json_t *body = json_loads("{\"users\":[{\"id\":1,\"uuid\":\"a\",\"speed_limit\":5},"
                              "{\"id\":2,\"uuid\":\"b\",\"device_limit\":3}]}", 0, NULL);
    pn_users full, shed, copy, cand;
    sv_error err = {0};
    sv_user_set set;
    assert_int_equal(pn_users_parse(body, 0, &full, &err), 0);
    for (int keep = 0; keep < 2; keep++) {
        assert_int_equal(pn_users_clone(&shed, &full), 0);
        assert_int_equal(pn_users_shed(&shed, keep), 0);
        assert_true(shed.shed);
        assert_int_equal(shed.n, 2);
        if (keep)
            assert_int_equal(shed.users[0].speed_limit, 5);
        else
            assert_null(shed.users);
        assert_true(pn_users_equal(&shed, &full) && pn_users_equal(&full, &shed));
        assert_int_equal(pn_users_clone(&copy, &shed), 0);
        assert_true(copy.shed && pn_users_equal(&copy, &full));
        assert_int_equal(ag_lower_user_set("t", &copy, &set, &err), -ESTALE);
        /* one field off: not the same list, not restored */
        assert_int_equal(pn_users_clone(&cand, &full), 0);
        cand.users[1].device_limit = 4;
        assert_false(pn_users_equal(&shed, &cand));
        assert_int_equal(pn_users_restore(&copy, &cand), -ESTALE);
        assert_true(copy.shed);
        pn_users_free(&cand);
        assert_int_equal(pn_users_clone(&cand, &full), 0);
        assert_int_equal(pn_users_restore(&copy, &cand), 0);
        assert_false(copy.shed);
        assert_string_equal(copy.users[1].uuid, "b");
        assert_true(pn_users_equal(&copy, &full));
        pn_users_free(&cand);
        pn_users_free(&copy);
        pn_users_free(&shed);
    }
    pn_users_free(&full);
    json_decref(body);
}

/* Issue 13: a shed list is made whole from the user set lowered from it (ag_users_refill):
 * uuids from the secrets, speed limits from the list when kept, else back from bytes/s to Mbps
 * (the largest a panel may send included); a set of other users, or none, is refused. */
static void lower__users_refill__rebuilds_the_list_from_its_running_set(void **state)
{
    (void)state;
    json_t *body = json_loads("{\"users\":[{\"id\":7,\"uuid\":\"a\",\"speed_limit\":5},"
                              "{\"id\":2,\"uuid\":\"b\",\"device_limit\":3},"
                              "{\"id\":9,\"uuid\":\"c\",\"speed_limit\":147573952589676}]}",
                              0, NULL);
    pn_users full, held;
    sv_error err = {0};
    sv_user_set set, other;
    assert_int_equal(pn_users_parse(body, 0, &full, &err), 0);
    assert_int_equal(ag_lower_user_set("t", &full, &set, &err), 0);
    for (int keep = 0; keep < 2; keep++) {
        assert_int_equal(pn_users_clone(&held, &full), 0);
        assert_int_equal(ag_users_refill(&held, &set), 0); /* not shed: left alone */
        assert_int_equal(pn_users_shed(&held, keep), 0);
        assert_int_equal(ag_users_refill(&held, NULL), -ESTALE);
        assert_true(held.shed);
        /* the same ids, one secret off: another list */
        assert_int_equal(ag_lower_user_set("t", &full, &other, &err), 0);
        other.users[2].secret[0] = 'x';
        assert_int_equal(ag_users_refill(&held, &other), -ESTALE);
        assert_true(held.shed);
        sv_user_set_free(&other);
        assert_int_equal(ag_users_refill(&held, &set), 0);
        assert_false(held.shed);
        assert_true(pn_users_equal(&held, &full));
        assert_string_equal(held.users[2].uuid, "c");
        assert_int_equal(held.users[2].speed_limit, 147573952589676u);
        assert_int_equal(held.users[1].device_limit, 3);
        pn_users_free(&held);
    }
    /* kept limits win over the set's: a node's own cap lowered into the set */
    assert_int_equal(pn_users_clone(&held, &full), 0);
    assert_int_equal(pn_users_shed(&held, true), 0);
    ag_lower_node_speed(&set, 1);
    assert_int_equal(ag_users_refill(&held, &set), 0);
    assert_int_equal(held.users[0].speed_limit, 5);
    pn_users_free(&held);
    /* a list shed whole cannot be told from a capped set: refused, never a wrong limit */
    assert_int_equal(pn_users_clone(&held, &full), 0);
    assert_int_equal(pn_users_shed(&held, false), 0);
    assert_int_equal(ag_users_refill(&held, &set), -ESTALE);
    pn_users_free(&held);
    sv_user_set_free(&set);
    pn_users_free(&full);
    json_decref(body);
}

/* Issue 27: socks, http and mixed nodes lower to their inbounds, TLS with tls 1 and the
 * config's cert; no_auth on them only; REALITY, another network and a fallback refused. */
static void lower__proxy_node_types(void **state)
{
    (void)state;
    static const char users[] = "{\"users\": [{\"id\": 1, \"uuid\": \"u-1\"}]}";
    static const struct {
        const char *body;
        enum sv_inbound_protocol protocol;
        bool tls;
    } ok[] = {
        {"{\"protocol\": \"socks\", \"server_port\": 1080, \"tls\": 0}", SV_INBOUND_SOCKS, false},
        {"{\"protocol\": \"http\", \"server_port\": 8080, \"tls\": 1}", SV_INBOUND_HTTP, true},
        {"{\"protocol\": \"mixed\", \"server_port\": 1080}", SV_INBOUND_MIXED, false},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ag_node_state st;
        sv_spec s;
        state_from_json(&st, "p", ok[i].body, users);
        st.cert = ok[i].tls ? SV_CERT_SELF : SV_CERT_NONE;
        st.no_auth = true;
        lower_one(&st, &s);
        assert_int_equal(s.inbounds[0].protocol, ok[i].protocol);
        assert_int_equal(s.inbounds[0].tls.cert, ok[i].tls ? SV_CERT_SELF : SV_CERT_NONE);
        assert_true(s.inbounds[0].proxy_no_auth);
        assert_false(s.inbounds[0].udp);
        sv_spec_free(&s);
        free_state(&st);
    }
    static const struct {
        const char *body;
        enum sv_cert_source cert;
        bool no_auth;
        const char *msg;
    } bad[] = {
        {"{\"protocol\": \"socks\", \"server_port\": 1, \"tls\": 2}", SV_CERT_NONE, false,
         "node p: tls 2 (REALITY): not served (socks in clear or over TLS only)"},
        {"{\"protocol\": \"http\", \"server_port\": 1, \"network\": \"ws\"}", SV_CERT_NONE,
         false, "node p: network \"ws\": not served (a proxy node on TCP only)"},
        {"{\"protocol\": \"http\", \"server_port\": 1, \"tls\": 1}", SV_CERT_NONE, false,
         "node p: a http node with tls 1 needs \"cert\" in the agent config (mode file or self)"},
        {"{\"protocol\": \"socks\", \"server_port\": 1}", SV_CERT_SELF, false,
         "node p: \"cert\" is set but the socks node has tls 0"},
        {"{\"protocol\": \"trojan\", \"server_port\": 1}", SV_CERT_SELF, true,
         "node p: \"no_auth\" applies to socks, http and mixed nodes only"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ag_node_state st;
        sv_spec s;
        sv_error err = {0};
        state_from_json(&st, "p", bad[i].body, users);
        st.cert = bad[i].cert;
        st.no_auth = bad[i].no_auth;
        ag_fleet f = {.nodes = &st, .n = 1};
        assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
        free_state(&st);
    }
}

/* Issue 27: an anytls node lowers to an AnyTLS inbound over the config's certificate with the
 * panel's padding scheme and the fallback; without a cert, or with tls 2, it is refused. */
static void lower__anytls_node(void **state)
{
    (void)state;
    static const char users[] = "{\"users\": [{\"id\": 1, \"uuid\": \"u-1\"}]}";
    ag_node_state st;
    sv_spec s;
    state_from_json(&st, "a", "{\"protocol\": \"anytls\", \"server_port\": 8443, "
                    "\"server_name\": \"n.example\", \"padding_scheme\": [\"stop=1\", \"0=30-30\"]}",
                    users);
    st.cert = SV_CERT_SELF;
    st.fallback = strdup("127.0.0.1:80");
    lower_one(&st, &s);
    assert_int_equal(s.inbounds[0].protocol, SV_INBOUND_ANYTLS);
    assert_int_equal(s.inbounds[0].tls.cert, SV_CERT_SELF);
    assert_string_equal(s.inbounds[0].tls.server_name, "n.example");
    assert_string_equal(s.inbounds[0].anytls_padding_scheme, "stop=1\n0=30-30");
    assert_string_equal(s.inbounds[0].fallback, "127.0.0.1:80");
    sv_spec_free(&s);
    st.cert = SV_CERT_NONE;
    ag_fleet f = {.nodes = &st, .n = 1};
    sv_error err = {0};
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node a: an anytls node needs \"cert\" in the agent config "
                                 "(mode file or self)");
    st.node.tls = 2;
    assert_int_equal(ag_lower_fleet(&f, &s, &err), -EINVAL);
    assert_string_equal(err.msg, "node a: tls 2 (REALITY): not served (anytls over TLS only)");
    free_state(&st);
}

/* AnyTLS's padding_scheme: an array of lines joined by "\n" with none at the end
 * (PROTOCOLS-3.md §3.4), a string as it is, an empty array none, a non-string line refused. */
static void model__padding_scheme_lines(void **state)
{
    (void)state;
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{\"server_port\": 1, \"padding_scheme\": [\"stop=8\", \"0=30-30\"]}", "stop=8\n0=30-30"},
        {"{\"server_port\": 1, \"padding_scheme\": \"stop=2\\n0=1-2\"}", "stop=2\n0=1-2"},
        {"{\"server_port\": 1, \"padding_scheme\": []}", NULL},
        {"{\"server_port\": 1, \"padding_scheme\": null}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_loads(cases[i].body, 0, NULL);
        assert_non_null(j);
        pn_node n;
        sv_error err = {0};
        assert_int_equal(pn_node_parse(j, "anytls", PN_PARSE_STRICT, &n, &err), 0);
        if (cases[i].want == NULL)
            assert_null(n.padding_scheme);
        else
            assert_string_equal(n.padding_scheme, cases[i].want);
        pn_node n2;
        assert_int_equal(pn_node_clone(&n2, &n), 0);
        assert_true(pn_node_equal(&n, &n2));
        pn_node_free(&n2);
        pn_node_free(&n);
        json_decref(j);
    }
    json_t *j = json_loads("{\"server_port\": 1, \"padding_scheme\": [\"stop=8\", 3]}", 0, NULL);
    pn_node n;
    sv_error err = {0};
    assert_int_equal(pn_node_parse(j, "anytls", PN_PARSE_STRICT, &n, &err), -EINVAL);
    assert_string_equal(err.msg, "padding_scheme[1]: expected a string");
    json_decref(j);
}

int main(void)
{
    sv_log_threshold = SV_LOG_ERROR; /* the skipped-route warnings are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lower__v17_fixture__gives_the_expected_spec),
        cmocka_unit_test(lower__proxy_node_types),
        cmocka_unit_test(lower__anytls_node),
        cmocka_unit_test(model__padding_scheme_lines),
        cmocka_unit_test(model__shed_users__compare_by_digest_and_restore_only_the_same),
        cmocka_unit_test(lower__users_refill__rebuilds_the_list_from_its_running_set),
        cmocka_unit_test(lower__listen__override_then_panel_then_default),
        cmocka_unit_test(lower__allow_private__reaches_the_inbound_and_is_a_setting),
        cmocka_unit_test(lower__outbound__shared_and_per_node),
        cmocka_unit_test(lower__dns_routes__after_block_rules_with_their_server),
        cmocka_unit_test(lower__speed_limit__mbps_to_bytes_per_second),
        cmocka_unit_test(lower__node_speed_limit__smallest_non_zero),
        cmocka_unit_test(lower__null_or_missing_limits__are_unlimited),
        cmocka_unit_test(lower__unknown_cipher__is_named),
        cmocka_unit_test(lower__ss2022_node__served_with_server_key),
        cmocka_unit_test(lower__other_protocols__are_refused),
        cmocka_unit_test(lower__unserved_settings__are_refused_naming_the_field),
        cmocka_unit_test(lower__trojan_node__inbound_over_tls_and_refusals),
        cmocka_unit_test(lower__ws_node__ws_settings),
        cmocka_unit_test(lower__grpc_node__service_name),
        cmocka_unit_test(lower__ss_v2ray_plugin__websocket_inbound),
        cmocka_unit_test(lower__vless_node__inbound_and_refusals),
        cmocka_unit_test(lower__vless_tls_vision_node__inbound),
        cmocka_unit_test(lower__vless_reality_node__inbound_and_refusals),
        cmocka_unit_test(lower__trojan_reality_node__inbound),
        cmocka_unit_test(lower__vmess_node__tcp_or_tls_and_refusals),
        cmocka_unit_test(lower__match_string_array_object__are_the_same),
        cmocka_unit_test(lower__every_match_form),
        cmocka_unit_test(lower__bad_regexps_protocols_and_other_actions__are_skipped),
        cmocka_unit_test(lower__two_nodes__share_outbounds_and_scope_rules),
        cmocka_unit_test(lower__settings_and_transport_equality),
        cmocka_unit_test(panel__body_variants_and_errors),
        cmocka_unit_test(panel__local_missing_file__reports_through_callback),
        cmocka_unit_test(panel__local_users_file__scanned_or_refused_with_the_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
