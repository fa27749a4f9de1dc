/* Unit tests: agent config parser (agent/agent_config.c). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/agent_config.h"
#include "panel/model.h"
#include "supervisor/supervisor.h"
#include "supervisor/util/log.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

/* A minimal valid node; tests splice their variations into it. */
#define PANEL_OK "{\"type\":\"local\",\"node\":{\"server_port\":1},\"users\":{\"users\":[]}}"
#define NODE_OK "{\"tag\":\"a\",\"panel\":" PANEL_OK "}"

static const char *srcdir(void)
{
    const char *s = getenv("KATANA_TOP_SRCDIR");
    return s != NULL ? s : TOP_SRCDIR;
}

/* Parse text and expect failure with exactly this code and message. */
static void expect_error(const char *text, int code, const char *msg)
{
    ag_config cfg;
    sv_error err = {0};
    int rc = ag_config_parse(text, strlen(text), NULL, &cfg, &err);
    if (rc != code || strcmp(err.msg, msg) != 0)
        fail_msg("input %s\n  want %d \"%s\"\n  got  %d \"%s\"", text, code, msg, rc, err.msg);
    assert_int_equal(cfg.n_nodes, 0);
    assert_null(cfg.nodes);
}

/* The Trojan demo (issue 8): a local trojan node with a self-signed certificate. */
static void config__trojan_example__parses(void **state)
{
    (void)state;
    char path[PATH_MAX];
    ag_config cfg;
    sv_error err = {0};
    snprintf(path, sizeof path, "%s/packaging/examples/local-trojan.json", srcdir());
    int rc = ag_config_load_file(path, &cfg, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_nodes, 1);
    const ag_node_config *n = &cfg.nodes[0];
    assert_int_equal(n->cert.mode, AG_CERT_SELF);
    assert_int_equal(n->panel.type, AG_PANEL_LOCAL);
    assert_string_equal(n->panel.node_type, "trojan");
    assert_int_equal(json_integer_value(json_object_get(n->panel.node, "server_port")), 8443);
    ag_config_free(&cfg);
}

/* The VLESS demo (issue 9): a local vless node over TLS with a self-signed certificate. */
static void config__vless_example__parses(void **state)
{
    (void)state;
    char path[PATH_MAX];
    ag_config cfg;
    sv_error err = {0};
    snprintf(path, sizeof path, "%s/packaging/examples/local-vless.json", srcdir());
    int rc = ag_config_load_file(path, &cfg, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_nodes, 1);
    const ag_node_config *n = &cfg.nodes[0];
    assert_int_equal(n->cert.mode, AG_CERT_SELF);
    assert_string_equal(n->panel.node_type, "vless");
    assert_int_equal(json_integer_value(json_object_get(n->panel.node, "tls")), 1);
    ag_config_free(&cfg);
}

static void config__example__parses(void **state)
{
    char path[PATH_MAX];
    ag_config cfg;
    sv_error err = {0};
    snprintf(path, sizeof path, "%s/packaging/examples/local-shadowsocks.json", srcdir());
    int rc = ag_config_load_file(path, &cfg, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.log_level, SV_LOG_INFO);
    assert_int_equal(cfg.workers, 0);
    assert_int_equal(cfg.n_nodes, 1);
    const ag_node_config *n = &cfg.nodes[0];
    assert_string_equal(n->tag, "demo");
    assert_string_equal(n->listen, "127.0.0.1");
    assert_int_equal(n->panel.type, AG_PANEL_LOCAL);
    assert_non_null(n->panel.node);
    assert_null(n->panel.node_file);
    assert_int_equal(json_integer_value(json_object_get(n->panel.node, "server_port")), 8388);
    assert_string_equal(json_string_value(json_object_get(n->panel.node, "cipher")),
                        "aes-256-gcm");
    assert_int_equal(json_array_size(json_object_get(n->panel.users, "users")), 2);
    assert_null(n->panel.users_file);
    ag_config_free(&cfg);
    assert_null(cfg.nodes);
}

static void config__full_settings__parse(void **state)
{
    const char *t = "{\"log\":{\"level\":\"debug\"},\"workers\":3,\"nodes\":[" NODE_OK
                    ",{\"tag\":\"b\",\"listen\":\"::1\",\"panel\":{\"type\":\"local\","
                    "\"node_file\":\"/etc/n.json\",\"users_file\":\"u.json\"}}]}";
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(t, strlen(t), "/base", &cfg, &err), 0);
    assert_int_equal(cfg.log_level, SV_LOG_DEBUG);
    assert_int_equal(cfg.workers, 3);
    assert_int_equal(cfg.n_nodes, 2);
    assert_null(cfg.nodes[0].listen);
    assert_string_equal(cfg.nodes[1].listen, "::1");
    assert_null(cfg.nodes[1].panel.node);
    assert_string_equal(cfg.nodes[1].panel.node_file, "/etc/n.json"); /* absolute: as given */
    assert_string_equal(cfg.nodes[1].panel.users_file, "/base/u.json");
    ag_config_free(&cfg);
}

static void config__unknown_keys__name_their_path(void **state)
{
    expect_error("{\"nodes\":[" NODE_OK "],\"tokn\":1}", -EINVAL, "tokn: unknown key");
    expect_error("{\"log\":{\"level\":\"info\",\"lvl\":1},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "log.lvl: unknown key");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"tagg\":\"b\",\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].tagg: unknown key (did you mean \"tag\"?)");
    expect_error("{\"nodes\":[" NODE_OK ",{\"tag\":\"b\",\"panel\":{\"type\":\"local\","
                 "\"tokn\":\"x\",\"node_file\":\"n\",\"users_file\":\"u\"}}]}",
                 -EINVAL, "nodes[1].panel.tokn: unknown key");
    /* a key starting with '_' is a comment in every object (katana.json(5) DESCRIPTION) */
    const char *noted = "{\"_note\":\"x\",\"nodes\":[{\"_why\":1,\"tag\":\"a\",\"panel\":"
                        PANEL_OK "}]}";
    ag_config cfg;
    sv_error err = {0};
    if (ag_config_parse(noted, strlen(noted), NULL, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_nodes, 1);
    ag_config_free(&cfg);
}

static void config__wrong_types__are_named(void **state)
{
    expect_error("{\"workers\":\"4\",\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "workers: expected an integer");
    expect_error("{\"workers\":1.5,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "workers: expected an integer");
    expect_error("{\"workers\":-1,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "workers: must be between 0 and 64");
    expect_error("{\"workers\":65,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "workers: must be between 0 and 64");
    expect_error("{\"log\":\"info\",\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "log: expected an object");
    expect_error("{\"log\":{\"level\":3},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "log.level: expected a string");
    expect_error("{\"log\":{\"level\":\"loud\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "log.level: unknown level \"loud\" (error, warn, info, debug, trace)");
    expect_error("{\"nodes\":{}}", -EINVAL, "nodes: expected an array");
    expect_error("{\"nodes\":[\"x\"]}", -EINVAL, "nodes[0]: expected an object");
    expect_error("{\"nodes\":[{\"tag\":5,\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].tag: expected a string");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"listen\":\"localhost\",\"panel\":" PANEL_OK "}]}",
                 -EINVAL, "nodes[0].listen: not an IP address \"localhost\"");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":[]}]}", -EINVAL,
                 "nodes[0].panel: expected an object");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\",\"node\":\"x\","
                 "\"users_file\":\"u\"}}]}",
                 -EINVAL, "nodes[0].panel.node: expected an object");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\",\"node_file\":\"n\","
                 "\"users_file\":3}}]}",
                 -EINVAL, "nodes[0].panel.users_file: expected a string");
    expect_error("[]", -EINVAL, "config: expected an object");
}

static void config__missing_keys__are_named(void **state)
{
    expect_error("{}", -EINVAL, "nodes: missing required key");
    expect_error("{\"nodes\":[]}", -EINVAL, "nodes: at least one node is required");
    expect_error("{\"nodes\":[{\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].tag: missing required key");
    expect_error("{\"nodes\":[{\"tag\":\"\",\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].tag: must not be empty");
    /* control characters, '"' and '\\' in a tag would split or garble the log lines naming it */
    static const char *const bad_tags[] = {"a\\nb", "a\\rb", "a\\\"b", "a\\\\b", "a\\u007fb",
                                           "a\\tb"};
    for (size_t i = 0; i < sizeof bad_tags / sizeof bad_tags[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"nodes\":[{\"tag\":\"%s\",\"panel\":" PANEL_OK "}]}",
                 bad_tags[i]);
        expect_error(text, -EINVAL, "nodes[0].tag: byte 1 is a control character, '\"' or '\\' "
                     "(refused in tags)");
    }
    expect_error("{\"nodes\":[{\"tag\":\"a\"}]}", -EINVAL, "nodes[0].panel: missing required key");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"node_file\":\"n\"}}]}", -EINVAL,
                 "nodes[0].panel.type: missing required key");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\","
                 "\"users_file\":\"u\"}}]}",
                 -EINVAL,
                 "nodes[0].panel: exactly one of \"node\" and \"node_file\" is required");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\",\"node\":{},"
                 "\"node_file\":\"n\",\"users_file\":\"u\"}}]}",
                 -EINVAL,
                 "nodes[0].panel: exactly one of \"node\" and \"node_file\" is required");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\",\"node_file\":\"n\"}}]}",
                 -EINVAL,
                 "nodes[0].panel: exactly one of \"users\" and \"users_file\" is required");
}

static void config__other_panel_types__are_refused(void **state)
{
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"ppanel\"}}]}", -EINVAL,
                 "nodes[0].panel.type: unsupported panel type \"ppanel\"");
}

#define FWD_CONFIG(list) "{\"nodes\":[{\"tag\":\"a\",\"trusted_forwarders\":" list \
                               ",\"panel\":" PANEL_OK "}]}"

/* Does one of @p v[0 .. n) hold the address @p text (v4 or v6)? */
static bool cidrs_hold(const sv_cidr *v, size_t n, const char *text)
{
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    struct sockaddr_in a4 = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, text, &a4.sin_addr) == 1)
        return sv_cidr_list_has(v, n, (struct sockaddr *)&a4);
    assert_int_equal(inet_pton(AF_INET6, text, &a6.sin6_addr), 1);
    return sv_cidr_list_has(v, n, (struct sockaddr *)&a6);
}

/* nodes[].trusted_forwarders: addresses and CIDR prefixes (host bits cleared), matched against
 * the peer (an IPv4-mapped IPv6 peer as IPv4); bad entries and lists too long named. */
static void config__trusted_forwarders__parse_match_and_errors(void **state)
{
    (void)state;
    const char *text = FWD_CONFIG("[\"127.0.0.5\",\"10.1.2.3/8\",\"2001:db8::1/32\","
                                  "\"192.168.7.0/23\"]");
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    const ag_node_config *n = &cfg.nodes[0];
    assert_int_equal(n->n_trusted_forwarders, 4);
    assert_int_equal(n->trusted_forwarders[1].prefix, 8);
    assert_int_equal(n->trusted_forwarders[1].addr[1], 0); /* 10.1.2.3/8 → 10.0.0.0/8 */
    const sv_cidr *v = n->trusted_forwarders;
    assert_true(cidrs_hold(v, 4, "127.0.0.5"));
    assert_false(cidrs_hold(v, 4, "127.0.0.1"));
    assert_true(cidrs_hold(v, 4, "10.255.0.9"));
    assert_false(cidrs_hold(v, 4, "11.0.0.1"));
    assert_true(cidrs_hold(v, 4, "192.168.6.1"));
    assert_true(cidrs_hold(v, 4, "192.168.7.255"));
    assert_false(cidrs_hold(v, 4, "192.168.8.0"));
    assert_true(cidrs_hold(v, 4, "2001:db8:ffff::9"));
    assert_false(cidrs_hold(v, 4, "2001:db9::1"));
    assert_true(cidrs_hold(v, 4, "::ffff:127.0.0.5")); /* mapped: as IPv4 */
    assert_false(cidrs_hold(v, 0, "127.0.0.5"));
    ag_config_free(&cfg);
    text = FWD_CONFIG("[]");
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].n_trusted_forwarders, 0);
    ag_config_free(&cfg);
    expect_error(FWD_CONFIG("[\"127.0.0.5\",\"nginx\"]"), -EINVAL,
                 "nodes[0].trusted_forwarders[1]: expected an IP address or CIDR prefix "
                 "(\"10.0.0.0/8\", \"::1\")");
    expect_error(FWD_CONFIG("[\"10.0.0.0/33\"]"), -EINVAL,
                 "nodes[0].trusted_forwarders[0]: expected an IP address or CIDR prefix "
                 "(\"10.0.0.0/8\", \"::1\")");
    expect_error(FWD_CONFIG("[7]"), -EINVAL,
                 "nodes[0].trusted_forwarders[0]: expected an IP address or CIDR prefix "
                 "(\"10.0.0.0/8\", \"::1\")");
    expect_error(FWD_CONFIG("\"127.0.0.5\""), -EINVAL,
                 "nodes[0].trusted_forwarders: expected an array of at most 64 IP addresses "
                 "or CIDR prefixes");
    char many[64 * 14 + 64] = "[";
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"10.0.0.%d\"",
                 i > 0 ? "," : "", i);
    strcat(many, "]");
    char big[sizeof many + 256];
    snprintf(big, sizeof big, FWD_CONFIG("%s"), many);
    expect_error(big, -EINVAL, "nodes[0].trusted_forwarders: expected an array of at most 64 "
                 "IP addresses or CIDR prefixes");
}

#define SS_CONFIG(db, extra) "{" db "\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"sspanel\"," \
                             "\"url\":\"https://p.example\",\"token\":\"k\"" extra "}}]}"

/* issue 14: the sspanel panel (mod_mu), strict like uniproxy, with its own intervals. */
static void config__sspanel_panel__parses_and_errors_name_their_path(void **state)
{
    (void)state;
    const char *text = SS_CONFIG("\"db\":{\"path\":\"k.db\"},", ",\"node_id\":7,\"timeout\":3,"
                                 "\"pull_interval\":30,\"push_interval\":90");
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].panel.type, AG_PANEL_SSPANEL);
    assert_string_equal(cfg.nodes[0].panel.node_id, "7");
    assert_string_equal(cfg.nodes[0].panel.token, "k");
    assert_int_equal(cfg.nodes[0].panel.timeout_s, 3);
    assert_int_equal(cfg.nodes[0].panel.pull_interval_s, 30);
    assert_int_equal(cfg.nodes[0].panel.push_interval_s, 90);
    ag_config_free(&cfg);
    expect_error(SS_CONFIG("", ",\"node_id\":1"), -EINVAL,
                 "db.path: required with a sspanel panel (nodes[0])");
    expect_error(SS_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":\"hk\""), -EINVAL,
                 "nodes[0].panel.node_id: expected a positive integer");
    expect_error(SS_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"node_type\":\"x\""),
                 -EINVAL, "nodes[0].panel.node_type: unknown key");
    expect_error(SS_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"pull_interval\":0"),
                 -EINVAL, "nodes[0].panel.pull_interval: expected seconds between 1 and 86400");
    expect_error(SS_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"push_interval\":\"60\""),
                 -EINVAL, "nodes[0].panel.push_interval: expected seconds between 1 and 86400");
}

#define XB_CONFIG(db, extra) "{" db "\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"xboard\"," \
                             "\"url\":\"https://p.example\",\"token\":\"t\"" extra "}}]}"

/* issue 14: the xboard panel (API v2 and its node channel) takes uniproxy's keys, strictly. */
static void config__xboard_panel__takes_uniproxy_keys(void **state)
{
    (void)state;
    const char *text = XB_CONFIG("\"db\":{\"path\":\"k.db\"},", ",\"node_id\":\"hk\","
                                 "\"node_type\":\"vless\",\"timeout\":4");
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].panel.type, AG_PANEL_XBOARD);
    assert_string_equal(ag_panel_type_name(cfg.nodes[0].panel.type), "xboard");
    assert_string_equal(cfg.nodes[0].panel.node_id, "hk");
    assert_string_equal(cfg.nodes[0].panel.node_type, "vless");
    assert_int_equal(cfg.nodes[0].panel.timeout_s, 4);
    ag_config_free(&cfg);
    expect_error(XB_CONFIG("", ",\"node_id\":1,\"node_type\":\"vless\""), -EINVAL,
                 "db.path: required with a xboard panel (nodes[0])");
    expect_error(XB_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"node_type\":\"vless\","
                           "\"machine_id\":3"),
                 -EINVAL, "nodes[0].panel: node_id and machine_id exclude each other (a "
                 "machine's nodes come from the panel)");
    expect_error(XB_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1"), -EINVAL,
                 "nodes[0].panel.node_type: missing required key");
}

/* issue 14: machine mode, {"type":"xboard","url","token","machine_id","timeout"} (PANEL.md
 * §1.1): no node_id, no node_type (the machine's list gives them). */
static void config__xboard_machine__takes_machine_id(void **state)
{
    (void)state;
    const char *text = XB_CONFIG("\"db\":{\"path\":\"k.db\"},", ",\"machine_id\":7,"
                                 "\"timeout\":3");
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].panel.type, AG_PANEL_XBOARD);
    assert_string_equal(cfg.nodes[0].panel.machine_id, "7");
    assert_null(cfg.nodes[0].panel.node_id);
    assert_int_equal(cfg.nodes[0].panel.timeout_s, 3);
    ag_node_config copy;
    assert_int_equal(ag_node_config_copy(&copy, &cfg.nodes[0]), 0);
    assert_string_equal(copy.panel.machine_id, "7");
    assert_string_equal(copy.tag, "a");
    assert_ptr_not_equal(copy.tag, cfg.nodes[0].tag);
    ag_node_config_free(&copy);
    ag_config_free(&cfg);
    expect_error(XB_CONFIG("\"db\":{\"path\":\"x\"},", ",\"machine_id\":\"7\""), -EINVAL,
                 "nodes[0].panel.machine_id: expected a positive integer");
    expect_error(XB_CONFIG("\"db\":{\"path\":\"x\"},", ",\"machine_id\":0"), -EINVAL,
                 "nodes[0].panel.machine_id: expected a positive integer");
    expect_error(XB_CONFIG("\"db\":{\"path\":\"x\"},", ",\"machine_id\":7,"
                           "\"node_type\":\"vless\""),
                 -EINVAL, "nodes[0].panel.node_type: unknown key");
    expect_error(XB_CONFIG("", ",\"machine_id\":7"), -EINVAL,
                 "db.path: required with a xboard panel (nodes[0])");
    expect_error("{\"db\":{\"path\":\"x\"},\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":"
                 "\"uniproxy\",\"url\":\"https://p.example\",\"token\":\"t\",\"machine_id\":7,"
                 "\"node_type\":\"vless\"}}]}",
                 -EINVAL, "nodes[0].panel.machine_id: unknown key");
}

#define UP_PANEL(extra) "{\"type\":\"uniproxy\",\"url\":\"https://p.example\",\"token\":\"t\"," \
                        "\"node_type\":\"shadowsocks\"" extra "}"
#define UP_CONFIG(db, extra) "{" db "\"nodes\":[{\"tag\":\"a\",\"panel\":" UP_PANEL(extra) "}]}"

/* issue #3: the uniproxy panel and the db section, strict like the rest. */
static void config__uniproxy_panel__parses_with_db(void **state)
{
    (void)state;
    const char *text = UP_CONFIG("\"db\":{\"path\":\"k.db\"},", ",\"node_id\":12,\"timeout\":3");
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(text, strlen(text), "/var/lib/katana", &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].panel.type, AG_PANEL_UNIPROXY);
    assert_string_equal(cfg.nodes[0].panel.url, "https://p.example");
    assert_string_equal(cfg.nodes[0].panel.node_id, "12");
    assert_string_equal(cfg.nodes[0].panel.node_type, "shadowsocks");
    assert_int_equal(cfg.nodes[0].panel.timeout_s, 3);
    assert_string_equal(cfg.db_path, "/var/lib/katana/k.db");
    assert_int_equal(cfg.db_flush_s, AG_CONFIG_FLUSH_DEFAULT);
    ag_config_free(&cfg);
    text = UP_CONFIG("\"db\":{\"path\":\"/d.db\",\"flush_interval\":2},", ",\"node_id\":\"hk-1\"");
    assert_int_equal(ag_config_parse(text, strlen(text), NULL, &cfg, &err), 0);
    assert_string_equal(cfg.nodes[0].panel.node_id, "hk-1");
    assert_int_equal(cfg.nodes[0].panel.timeout_s, AG_CONFIG_TIMEOUT_DEFAULT);
    assert_int_equal(cfg.db_flush_s, 2);
    ag_config_free(&cfg);
}

static void config__uniproxy_panel__errors_name_their_path(void **state)
{
    (void)state;
    expect_error(UP_CONFIG("", ",\"node_id\":1"), -EINVAL,
                 "db.path: required with a uniproxy panel (nodes[0])");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\"},", ""), -EINVAL,
                 "nodes[0].panel.node_id: missing required key");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":0"), -EINVAL,
                 "nodes[0].panel.node_id: expected a positive integer or a non-empty string");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"tokn\":1"), -EINVAL,
                 "nodes[0].panel.tokn: unknown key (did you mean \"token\"?)");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\"},", ",\"node_id\":1,\"timeout\":0"), -EINVAL,
                 "nodes[0].panel.timeout: expected seconds between 1 and 300");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\",\"flush\":1},", ",\"node_id\":1"), -EINVAL,
                 "db.flush: unknown key");
    expect_error(UP_CONFIG("\"db\":{\"path\":\"x\",\"flush_interval\":0},", ",\"node_id\":1"),
                 -EINVAL, "db.flush_interval: expected seconds between 1 and 3600");
    expect_error("{\"db\":{\"path\":\"x\"},\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"uniproxy\","
                 "\"url\":\"ftp://x\",\"token\":\"t\",\"node_id\":1,\"node_type\":\"shadowsocks\"}}]}",
                 -EINVAL, "nodes[0].panel.url: must start with http:// or https://");
}

static void config__bad_json__gives_position(void **state)
{
    ag_config cfg;
    sv_error err = {0};
    const char *cut = "{\"nodes\": [";
    assert_int_equal(ag_config_parse(cut, strlen(cut), NULL, &cfg, &err), -EINVAL);
    /* jansson's own wording varies between versions; the position is ours. */
    assert_memory_equal(err.msg, "line 1, column 11: ", 19);
    const char *dup = "{\"workers\":1,\"workers\":2,\"nodes\":[" NODE_OK "]}";
    assert_int_equal(ag_config_parse(dup, strlen(dup), NULL, &cfg, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "duplicate object key"));
}

/* A syntax error right after a password does not copy the password into the message (#5). */
static void config__syntax_error__quotes_no_value(void **state)
{
    ag_config cfg;
    sv_error err = {0};
    const char *t = "{\"nodes\":[{\"uuid\" \"s3cret-pass\"}]}"; /* jansson: near '"s3cret..' */
    assert_int_equal(ag_config_parse(t, strlen(t), NULL, &cfg, &err), -EINVAL);
    assert_memory_equal(err.msg, "line 1, column ", 15);
    assert_null(strstr(err.msg, "s3cret"));
    assert_null(strstr(err.msg, "near"));
}

/* shutdown_grace (issue #5): 5 s when absent, an integer of seconds in [0, 3600] otherwise. */
static void config__shutdown_grace__default_and_bounds(void **state)
{
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    const char *set = "{\"shutdown_grace\":0,\"nodes\":[" NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.shutdown_grace, 5);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.shutdown_grace, 0);
    ag_config_free(&cfg);
    expect_error("{\"shutdown_grace\":\"5\",\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "shutdown_grace: expected an integer");
    expect_error("{\"shutdown_grace\":-1,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "shutdown_grace: must be between 0 and 3600");
    expect_error("{\"shutdown_grace\":3601,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "shutdown_grace: must be between 0 and 3600");
}

/* max_connections (issue 15): 0 (from the fd limit) when absent, an integer in [0, 2^24]. */
static void config__max_connections__default_and_bounds(void **state)
{
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    const char *set = "{\"max_connections\":16777216,\"nodes\":[" NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    (void)state;
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.max_connections, 0);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.max_connections, 16777216);
    ag_config_free(&cfg);
    expect_error("{\"max_connections\":\"100\",\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "max_connections: expected an integer");
    expect_error("{\"max_connections\":-1,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "max_connections: must be between 0 and 16777216");
    expect_error("{\"max_connections\":16777217,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "max_connections: must be between 0 and 16777216");
}

/* Issue 12: node_speed_limit (top level) and nodes[].speed_limit, Mbit/s in [0, 10000000]. */
static void config__speed_limits__default_and_bounds(void **state)
{
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    const char *set = "{\"node_speed_limit\":100,\"nodes\":[{\"tag\":\"a\",\"speed_limit\":8,"
                      "\"panel\":" PANEL_OK "}]}";
    ag_config cfg;
    sv_error err = {0};
    (void)state;
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_true(cfg.node_speed_limit == 0 && cfg.nodes[0].speed_limit == 0);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    assert_true(cfg.node_speed_limit == 100 && cfg.nodes[0].speed_limit == 8);
    ag_config_free(&cfg);
    expect_error("{\"node_speed_limit\":1.5,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "node_speed_limit: expected an integer (Mbit/s)");
    expect_error("{\"node_speed_limit\":-1,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "node_speed_limit: must be between 0 and 10000000 (Mbit/s)");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"speed_limit\":\"8\",\"panel\":" PANEL_OK "}]}",
                 -EINVAL, "nodes[0].speed_limit: expected an integer (Mbit/s)");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"speed_limit\":10000001,\"panel\":" PANEL_OK
                 "}]}", -EINVAL, "nodes[0].speed_limit: must be between 0 and 10000000 (Mbit/s)");
}

/* dns (issue 13): servers, timeout and strategy, strictly. */
static void config__dns__parses_and_refuses_bad_values(void **state)
{
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    const char *set = "{\"dns\":{\"servers\":[\"127.0.0.53\",\"127.0.0.1:5353\",\"[::1]:53\","
                      "\"::1\"],\"timeout\":1.5,\"strategy\":\"ipv6_only\"},\"nodes\":[" NODE_OK
                      "]}";
    ag_config cfg;
    sv_error err = {0};
    (void)state;
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.dns.n_servers, 0);
    assert_int_equal(cfg.dns.timeout_ms, 0);
    assert_int_equal(cfg.dns.strategy, SV_DNS_PREFER_IPV4);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.dns.n_servers, 4);
    assert_string_equal(cfg.dns.servers[1], "127.0.0.1:5353");
    assert_string_equal(cfg.dns.servers[2], "[::1]:53");
    assert_int_equal(cfg.dns.timeout_ms, 1500);
    assert_int_equal(cfg.dns.strategy, SV_DNS_IPV6_ONLY);
    ag_config_free(&cfg);
    expect_error("{\"dns\":{\"server\":[]},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.server: unknown key (did you mean \"servers\"?)");
    expect_error("{\"dns\":[],\"nodes\":[" NODE_OK "]}", -EINVAL, "dns: expected an object");
    expect_error("{\"dns\":{\"servers\":\"1.1.1.1\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.servers: expected an array");
    expect_error("{\"dns\":{\"servers\":[]},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.servers: at least 1 server (leave the key out to use those of "
                 "/etc/resolv.conf)");
    static const char *const bad[] = {"dns.example", "1.2.3.4:0", "1.2.3.4:65536", "[::1]",
                                      "[::1]:x", "1.2.3:53", "::1:53:", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"dns\":{\"servers\":[\"%s\"]},\"nodes\":[" NODE_OK "]}",
                 bad[i]);
        expect_error(text, -EINVAL,
                     "dns.servers[0]: expected \"ip\", \"ipv4:port\" or \"[ipv6]:port\"");
    }
    expect_error("{\"dns\":{\"timeout\":0},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.timeout: must be between 0.1 and 60 seconds");
    expect_error("{\"dns\":{\"timeout\":\"5\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.timeout: expected a number of seconds");
    expect_error("{\"dns\":{\"strategy\":\"ipv4\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "dns.strategy: unknown strategy \"ipv4\" (prefer_ipv4, prefer_ipv6, ipv4_only, "
                 "ipv6_only)");
}

/* redis.url (issue 12): the URL grammar, defaults, escapes; never the password in an error. */
static void config__redis_url__parses_and_refuses_bad_values(void **state)
{
    sv_redis_options o;
    sv_error err = {0};
    (void)state;
    memset(&o, 0, sizeof o);
    assert_int_equal(ag_redis_url_parse("redis://127.0.0.1", &o, &err), 0);
    assert_string_equal(o.host, "127.0.0.1");
    assert_int_equal(o.port, 6379);
    assert_int_equal(o.db, 0);
    assert_string_equal(o.user, "");
    assert_string_equal(o.password, "");
    assert_int_equal(ag_redis_url_parse("redis://localhost:6380/3", &o, &err), 0);
    assert_string_equal(o.host, "127.0.0.1");
    assert_int_equal(o.port, 6380);
    assert_int_equal(o.db, 3);
    assert_int_equal(ag_redis_url_parse("redis://:s%40cr%2Ft@[::1]:7000/", &o, &err), 0);
    assert_string_equal(o.host, "::1");
    assert_int_equal(o.port, 7000);
    assert_int_equal(o.db, 0);
    assert_string_equal(o.user, "");
    assert_string_equal(o.password, "s@cr/t");
    assert_int_equal(ag_redis_url_parse("redis://katana:p:w@10.0.0.1/15", &o, &err), 0);
    assert_string_equal(o.user, "katana");
    assert_string_equal(o.password, "p:w");
    assert_string_equal(o.host, "10.0.0.1");
    assert_int_equal(o.db, 15);
    assert_int_equal(ag_redis_url_parse("redis://[::1]", &o, &err), 0);
    assert_int_equal(o.port, 6379);

    static const struct {
        const char *url, *msg;
    } bad[] = {
        {"rediss://127.0.0.1", "redis.url: TLS (rediss://) is not supported"},
        {"http://127.0.0.1", "redis.url: expected redis://[[user]:password@]host[:port][/db]"},
        {"redis://", "redis.url: missing or too long host"},
        {"redis://redis.example:6379", "redis.url: the host must be an IPv4 address, [IPv6] or "
                                       "localhost (no name is resolved)"},
        {"redis://127.0.0.1:0", "redis.url: port must be 1..65535"},
        {"redis://127.0.0.1:65536", "redis.url: port must be 1..65535"},
        {"redis://127.0.0.1:99999999999", "redis.url: port must be 1..65535"},
        {"redis://127.0.0.1:", "redis.url: port must be 1..65535"},
        {"redis://127.0.0.1:6379x", "redis.url: port must be 1..65535"},
        {"redis://127.0.0.1/x", "redis.url: database must be 0..65535"},
        {"redis://127.0.0.1/65536", "redis.url: database must be 0..65535"},
        {"redis://127.0.0.1/0/1", "redis.url: database must be 0..65535"},
        {"redis://127.0.0.1?db=1", "redis.url: no query or fragment is taken"},
        {"redis://[::1", "redis.url: unclosed [ in the host"},
        {"redis://[::1]x", "redis.url: expected :port after ]"},
        {"redis://[1.2.3.4]", "redis.url: bad IPv6 address"},
        {"redis://hunter2@127.0.0.1", "redis.url: user info must be [user]:password"},
        {"redis://:@127.0.0.1", "redis.url: empty password"},
        {"redis://:bad%zzpass@127.0.0.1", "redis.url: bad user or password (at most 127 bytes "
                                          "each, %XX escapes)"},
        {"redis://:nul%00@127.0.0.1", "redis.url: bad user or password (at most 127 bytes each, "
                                      "%XX escapes)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = ag_redis_url_parse(bad[i].url, &o, &err);
        if (rc != -EINVAL || strcmp(err.msg, bad[i].msg) != 0)
            fail_msg("url %s\n  want \"%s\"\n  got  %d \"%s\"", bad[i].url, bad[i].msg, rc,
                     err.msg);
    }
    char longpw[300] = "redis://:";
    memset(longpw + 9, 'p', 200);
    snprintf(longpw + 209, sizeof longpw - 209, "@127.0.0.1");
    assert_int_equal(ag_redis_url_parse(longpw, &o, &err), -EINVAL);
    assert_null(strstr(err.msg, "ppp")); /* the password is never quoted */
}

/* The redis object (issue 12): defaults, values, strictness. */
static void config__redis__parses_and_refuses_bad_values(void **state)
{
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    const char *min = "{\"redis\":{\"url\":\"redis://127.0.0.1:6390/2\"},\"nodes\":[" NODE_OK "]}";
    const char *set = "{\"redis\":{\"url\":\"redis://:pw@127.0.0.1\",\"expiry\":120,"
                      "\"timeout\":0.25,\"prefix\":\"fleet1:\"},\"nodes\":[" NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    (void)state;
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_false(cfg.redis.enabled);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(min, strlen(min), NULL, &cfg, &err), 0);
    assert_true(cfg.redis.enabled);
    assert_int_equal(cfg.redis.port, 6390);
    assert_int_equal(cfg.redis.db, 2);
    assert_int_equal(cfg.redis.expiry_s, 60);
    assert_int_equal(cfg.redis.timeout_ms, 500);
    assert_string_equal(cfg.redis.prefix, "katana:devices:");
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    assert_string_equal(cfg.redis.password, "pw");
    assert_int_equal(cfg.redis.expiry_s, 120);
    assert_int_equal(cfg.redis.timeout_ms, 250);
    assert_string_equal(cfg.redis.prefix, "fleet1:");
    ag_config_free(&cfg);
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"expire\":5},\"nodes\":[" NODE_OK
                 "]}", -EINVAL, "redis.expire: unknown key (did you mean \"expiry\"?)");
    expect_error("{\"redis\":\"redis://127.0.0.1\",\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "redis: expected an object");
    expect_error("{\"redis\":{},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "redis.url: missing required key");
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"expiry\":2},\"nodes\":[" NODE_OK
                 "]}", -EINVAL, "redis.expiry: must be between 3 and 86400 seconds");
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"expiry\":6.5},\"nodes\":[" NODE_OK
                 "]}", -EINVAL, "redis.expiry: expected an integer (seconds)");
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"timeout\":11},\"nodes\":[" NODE_OK
                 "]}", -EINVAL, "redis.timeout: must be between 0.01 and 10 seconds");
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"timeout\":\"1\"},\"nodes\":["
                 NODE_OK "]}", -EINVAL, "redis.timeout: expected a number of seconds");
    expect_error("{\"redis\":{\"url\":\"redis://127.0.0.1\",\"prefix\":\"\"},\"nodes\":[" NODE_OK
                 "]}", -EINVAL, "redis.prefix: must not be empty");
    expect_error("{\"redis\":{\"url\":\"redis://x.example\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "redis.url: the host must be an IPv4 address, [IPv6] or localhost (no name is "
                 "resolved)");
}

/* The default budget (issue 15): 128 descriptors kept, 2 per relayed connection, at least 1. */
static void config__max_connections__default_from_fd_limit(void **state)
{
    (void)state;
    assert_int_equal(sv_max_connections_default(256), 64);
    assert_int_equal(sv_max_connections_default(1024), 448);
    assert_int_equal(sv_max_connections_default(1048576), 524224);
    assert_int_equal(sv_max_connections_default(130), 1);
    assert_int_equal(sv_max_connections_default(0), 1);
    assert_int_equal(sv_max_connections_default(UINT64_MAX), SV_MAX_CONNECTIONS_MAX);
}

/* Issue 11: a kernel relay's pipes (4 descriptors, 2 connections' worth) fit a worker's
 * descriptor share only beside the connections it serves; at the share, none. */
static void config__splice_pipes_fit_the_fd_share(void **state)
{
    (void)state;
    assert_true(sv_fds_fit(1, 1, 3));   /* 2 + 4 descriptors of 6 */
    assert_false(sv_fds_fit(2, 1, 3));  /* 8 of 6 */
    assert_true(sv_fds_fit(64, 0, 64)); /* connections alone: the default budget */
    assert_false(sv_fds_fit(64, 1, 64));
    assert_true(sv_fds_fit(60, 2, 64));
    assert_false(sv_fds_fit(61, 2, 64));
    assert_false(sv_fds_fit(0, 1, 1));
    /* the default share of 256 descriptors, one worker: 64 connections, or 24 with 20 spliced */
    uint32_t share = sv_max_connections_default(256);
    assert_true(sv_fds_fit(24, 20, share));
    assert_false(sv_fds_fit(25, 20, share));
    /* no overflow at the largest counts */
    assert_true(sv_fds_fit(SV_MAX_CONNECTIONS_MAX, SV_MAX_CONNECTIONS_MAX,
                           sv_max_connections_default(UINT64_MAX) * 3u));
}

/* Make a unique temporary directory for one test. */
static void tmpdir(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/katana-test-config-XXXXXX");
    assert_non_null(mkdtemp(buf));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void config__file_too_big__is_refused(void **state)
{
    char dir[64], path[128];
    ag_config cfg;
    sv_error err = {0};
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)AG_CONFIG_MAX_BYTES + 1), 0); /* sparse */
    close(fd);
    assert_int_equal(ag_config_load_file(path, &cfg, &err), -EMSGSIZE);
    assert_non_null(strstr(err.msg, "file is larger than 16777216 bytes"));
    assert_int_equal(cfg.n_nodes, 0);
    /* The text entry point has the same bound. */
    size_t n = (size_t)AG_CONFIG_MAX_BYTES + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    assert_int_equal(ag_config_parse(big, n, NULL, &cfg, &err), -EMSGSIZE);
    free(big);
    unlink(path);
    rmdir(dir);
}

static void config__missing_file__names_it(void **state)
{
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_load_file("/nonexistent/katana.json", &cfg, &err), -ENOENT);
    assert_string_equal(err.msg, "/nonexistent/katana.json: No such file or directory");
}

/* Issue 15: a FIFO would block the control loop until someone writes; a directory or a device
 * is no config either. Each is refused at once, naming what it is. (A test that hangs on the
 * FIFO's open fails by the test runner's timeout.) */
static void config__non_regular_file__is_refused_without_blocking(void **state)
{
    char dir[64], path[128];
    ag_config cfg;
    sv_error err = {0};
    json_t *j = NULL;
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(ag_config_load_file(path, &cfg, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "fifo.json: a FIFO, not a regular file"));
    assert_int_equal(pn_json_load_file(path, 100, &j, &err), -EINVAL); /* node_file/users_file */
    assert_null(j);
    assert_int_equal(ag_config_load_file(dir, &cfg, &err), -EINVAL);
    assert_non_null(strstr(err.msg, ": a directory, not a regular file"));
    assert_int_equal(ag_config_load_file("/dev/null", &cfg, &err), -EINVAL);
    assert_string_equal(err.msg, "/dev/null: a character device, not a regular file");
    unlink(path);
    rmdir(dir);
}

static void config__relative_files__resolve_against_config_dir(void **state)
{
    char dir[64], path[128], want[160], cwd[PATH_MAX];
    ag_config cfg;
    sv_error err = {0};
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/katana.json", dir);
    write_file(path, "{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\","
                     "\"node_file\":\"node.json\",\"users_file\":\"sub/users.json\"}}]}");
    assert_int_equal(ag_config_load_file(path, &cfg, &err), 0);
    snprintf(want, sizeof want, "%s/node.json", dir);
    assert_string_equal(cfg.nodes[0].panel.node_file, want);
    snprintf(want, sizeof want, "%s/sub/users.json", dir);
    assert_string_equal(cfg.nodes[0].panel.users_file, want);
    ag_config_free(&cfg);

    /* A config named without a directory resolves against ".". */
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    assert_int_equal(ag_config_load_file("katana.json", &cfg, &err), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_string_equal(cfg.nodes[0].panel.node_file, "./node.json");
    ag_config_free(&cfg);
    unlink(path);
    rmdir(dir);
}

/* "allow_private" (issue 15): per node, false unless set, strictly a boolean. */
static void config__allow_private__defaults_to_false_and_is_a_boolean(void **state)
{
    (void)state;
    static const char t[] = "{\"nodes\":[" NODE_OK ",{\"tag\":\"b\",\"allow_private\":true,"
                            "\"panel\":" PANEL_OK "},{\"tag\":\"c\",\"allow_private\":false,"
                            "\"panel\":" PANEL_OK "}]}";
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(t, strlen(t), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.n_nodes, 3);
    assert_false(cfg.nodes[0].allow_private);
    assert_true(cfg.nodes[1].allow_private);
    assert_false(cfg.nodes[2].allow_private);
    ag_config_free(&cfg);
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"allow_private\":\"yes\",\"panel\":" PANEL_OK
                 "}]}", -EINVAL, "nodes[0].allow_private: expected true or false");
    expect_error("{\"nodes\":[" NODE_OK ",{\"tag\":\"b\",\"allow_private\":1,\"panel\":"
                 PANEL_OK "}]}", -EINVAL, "nodes[1].allow_private: expected true or false");
    expect_error("{\"allow_private\":true,\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "allow_private: unknown key");
}

/* "policies" and a node's "user_removal" (issue 12, seed 001 "policies"): "keep", "close" or
 * {"close_after": seconds}; absent = the supervisor's defaults; strict. */
static void config__policies__parse_strictly(void **state)
{
    (void)state;
    static const char t[] = "{\"policies\":{\"user_removal\":{\"close_after\":30},"
                            "\"drain\":\"close\"},\"nodes\":[" NODE_OK ",{\"tag\":\"b\","
                            "\"user_removal\":\"keep\",\"panel\":" PANEL_OK "}]}";
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(t, strlen(t), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.user_removal.kind, SV_POLICY_CLOSE_AFTER);
    assert_int_equal(cfg.user_removal.grace_ms, 30000);
    assert_int_equal(cfg.drain.kind, SV_POLICY_CLOSE);
    assert_int_equal(cfg.nodes[0].user_removal.kind, SV_POLICY_DEFAULT);
    assert_int_equal(cfg.nodes[1].user_removal.kind, SV_POLICY_KEEP);
    ag_config_free(&cfg);
    static const char none[] = "{\"nodes\":[" NODE_OK "]}";
    assert_int_equal(ag_config_parse(none, strlen(none), NULL, &cfg, &err), 0);
    assert_int_equal(cfg.user_removal.kind, SV_POLICY_DEFAULT);
    assert_int_equal(cfg.drain.kind, SV_POLICY_DEFAULT);
    ag_config_free(&cfg);
    expect_error("{\"policies\":{\"drian\":\"keep\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "policies.drian: unknown key (did you mean \"drain\"?)");
    expect_error("{\"policies\":{\"drain\":\"later\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "policies.drain: unknown policy \"later\" (keep, close, {\"close_after\": "
                 "seconds})");
    expect_error("{\"policies\":{\"drain\":{\"close_after\":0}},\"nodes\":[" NODE_OK "]}",
                 -EINVAL, "policies.drain.close_after: expected seconds between 1 and 86400");
    expect_error("{\"policies\":{\"drain\":{\"close_after\":5,\"x\":1}},\"nodes\":["
                 NODE_OK "]}", -EINVAL, "policies.drain.x: unknown key");
    expect_error("{\"policies\":[],\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "policies: expected an object");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"user_removal\":5,\"panel\":" PANEL_OK "}]}",
                 -EINVAL, "nodes[0].user_removal: expected \"keep\", \"close\" or "
                 "{\"close_after\": seconds}");
}

/* "cert", "fallback" and the local panel's "node_type" (issue 8): strict, errors name the path. */
static void config__cert_fallback_node_type__parse_strictly(void **state)
{
    (void)state;
    static const char t[] =
        "{\"nodes\":[{\"tag\":\"a\",\"cert\":{\"mode\":\"file\",\"cert_file\":\"c.pem\","
        "\"key_file\":\"/k.pem\"},\"fallback\":\"[::1]:80\",\"panel\":{\"type\":\"local\","
        "\"node_type\":\"trojan\",\"node\":{\"server_port\":1},\"users\":{\"users\":[]}}},"
        "{\"tag\":\"b\",\"cert\":{\"mode\":\"self\"},\"panel\":" PANEL_OK "}," NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    assert_int_equal(ag_config_parse(t, strlen(t), "/etc/k", &cfg, &err), 0);
    assert_int_equal(cfg.nodes[0].cert.mode, AG_CERT_FILE);
    assert_string_equal(cfg.nodes[0].cert.cert_file, "/etc/k/c.pem");
    assert_string_equal(cfg.nodes[0].cert.key_file, "/k.pem");
    assert_string_equal(cfg.nodes[0].fallback, "[::1]:80");
    assert_string_equal(cfg.nodes[0].panel.node_type, "trojan");
    assert_int_equal(cfg.nodes[1].cert.mode, AG_CERT_SELF);
    assert_null(cfg.nodes[1].fallback);
    assert_int_equal(cfg.nodes[2].cert.mode, AG_CERT_NONE);
    ag_config_free(&cfg);
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"cert\":{\"mode\":\"acme\"},\"panel\":"
                 PANEL_OK "}]}", -EINVAL,
                 "nodes[0].cert.mode: expected \"file\" or \"self\", got \"acme\"");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"cert\":{\"mode\":\"file\",\"cert_file\":"
                 "\"c\"},\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].cert: mode file needs cert_file and key_file");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"cert\":{\"mode\":\"self\",\"key_file\":"
                 "\"k\"},\"panel\":" PANEL_OK "}]}", -EINVAL,
                 "nodes[0].cert: mode self takes no cert_file or key_file");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"cert\":{\"mode\":\"self\",\"sni\":1},"
                 "\"panel\":" PANEL_OK "}]}", -EINVAL, "nodes[0].cert.sni: unknown key");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"fallback\":\"web\",\"panel\":" PANEL_OK
                 "}]}", -EINVAL, "nodes[0].fallback: expected \"HOST:PORT\", got \"web\"");
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"panel\":{\"type\":\"local\",\"node_type\":"
                 "\"hysteria\",\"node\":{\"server_port\":1},\"users\":{\"users\":[]}}}]}",
                 -EINVAL, "nodes[0].panel.node_type: expected \"shadowsocks\", \"trojan\", "
                 "\"vless\", \"vmess\", \"anytls\", \"socks\", \"http\" or \"mixed\", got "
                 "\"hysteria\"");
}

/* The packaged config (issue 15): never an empty API token but the placeholder the package
 * replaces with a random one at install; a copy that kept the placeholder is refused. With a
 * token in its place the file is valid and keeps internal destinations closed. */
static void config__packaged_example__has_an_api_token(void **state)
{
    (void)state;
    char path[PATH_MAX];
    ag_config cfg;
    sv_error err = {0};
    snprintf(path, sizeof path, "%s/packaging/examples/config.json", srcdir());
    int rc = ag_config_load_file(path, &cfg, &err);
    assert_int_equal(rc, -EINVAL);
    if (strstr(err.msg, "api.token: still the package placeholder @KATANA_API_TOKEN@") == NULL)
        fail_msg("unexpected error: %s", err.msg);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, AG_API_TOKEN_PLACEHOLDER);
    assert_non_null(at);
    memcpy(at, "0123456789abcdef01", strlen(AG_API_TOKEN_PLACEHOLDER)); /* same length */
    rc = ag_config_parse(text, n, NULL, &cfg, &err);
    if (rc != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(cfg.api_token, "0123456789abcdef01");
    assert_false(cfg.nodes[0].allow_private);
    ag_config_free(&cfg);
}

/* "api" (issue 4): listen and token; unknown keys named; beyond loopback a token is required. */
static void config__api__keys_are_strict_and_public_needs_a_token(void **state)
{
    (void)state;
    static const char ok[] = "{\"api\":{\"listen\":\"0.0.0.0:9091\",\"token\":\"t\"},"
                             "\"nodes\":[" NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    if (ag_config_parse(ok, strlen(ok), NULL, &cfg, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(cfg.api_listen, "0.0.0.0:9091");
    assert_string_equal(cfg.api_token, "t");
    ag_config_free(&cfg);
    expect_error("{\"api\":{\"listen\":\"0.0.0.0:9091\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "api.token: required when api.listen (0.0.0.0:9091) is not a loopback address");
    expect_error("{\"api\":{\"tokn\":\"t\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "api.tokn: unknown key (did you mean \"token\"?)");
    expect_error("{\"api\":{\"listen\":\"localhost:1\"},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "api.listen: \"localhost\" is not an IP address");
    expect_error("{\"api\":{\"listen\":9090},\"nodes\":[" NODE_OK "]}", -EINVAL,
                 "api.listen: expected a string");
}

/* `outbound` at the top and on a node (issue 13 "Socket policy"): values, defaults, strict keys
 * and ranges, at most one address per family. */
static void config__outbound__parses_and_refuses_bad_values(void **state)
{
    const char *set = "{\"outbound\":{\"bind\":[\"192.0.2.7\",\"2001:db8::7\"],\"interface\":"
                      "\"eth1\",\"mark\":7,\"tcp_keepalive\":{\"idle\":60,\"interval\":10,"
                      "\"count\":5},\"tcp_nodelay\":false},\"nodes\":[{\"tag\":\"a\","
                      "\"outbound\":{\"bind\":[\"::1\"]},\"panel\":" PANEL_OK "}]}";
    const char *dflt = "{\"nodes\":[" NODE_OK "]}";
    ag_config cfg;
    sv_error err = {0};
    (void)state;
    assert_int_equal(ag_config_parse(dflt, strlen(dflt), NULL, &cfg, &err), 0);
    assert_false(cfg.outbound.has_addr4 || cfg.outbound.has_addr6 || cfg.outbound.nagle);
    assert_int_equal(cfg.outbound.mark, 0);
    assert_int_equal(cfg.outbound.keepalive_idle_s, 0);
    assert_string_equal(cfg.outbound.interface, "");
    assert_false(cfg.nodes[0].has_outbound);
    ag_config_free(&cfg);
    assert_int_equal(ag_config_parse(set, strlen(set), NULL, &cfg, &err), 0);
    const sv_socket_policy *p = &cfg.outbound;
    assert_true(p->has_addr4 && p->has_addr6);
    assert_memory_equal(p->addr4, ((uint8_t[]){192, 0, 2, 7}), 4);
    assert_int_equal(p->addr6[0], 0x20);
    assert_int_equal(p->addr6[15], 7);
    assert_string_equal(p->interface, "eth1");
    assert_int_equal(p->mark, 7);
    assert_int_equal(p->keepalive_idle_s, 60);
    assert_int_equal(p->keepalive_interval_s, 10);
    assert_int_equal(p->keepalive_count, 5);
    assert_true(p->nagle);
    assert_true(cfg.nodes[0].has_outbound);
    assert_false(cfg.nodes[0].outbound.has_addr4);
    assert_true(cfg.nodes[0].outbound.has_addr6);
    assert_false(cfg.nodes[0].outbound.nagle);
    ag_config_free(&cfg);
    static const struct {
        const char *outbound, *msg;
    } bad[] = {
        {"{\"bnd\":[]}", "outbound.bnd: unknown key (did you mean \"bind\"?)"},
        {"[]", "outbound: expected an object"},
        {"{\"bind\":\"127.0.0.2\"}", "outbound.bind: expected an array of one or two IP "
                                     "addresses"},
        {"{\"bind\":[]}", "outbound.bind: expected an array of one or two IP addresses"},
        {"{\"bind\":[\"a\",\"b\",\"c\"]}", "outbound.bind: expected an array of one or two IP "
                                           "addresses"},
        {"{\"bind\":[\"host.example\"]}", "outbound.bind[0]: not an IP address"},
        {"{\"bind\":[\"127.0.0.2\",\"127.0.0.3\"]}", "outbound.bind[1]: a second IPv4 address "
                                                     "(at most one per family)"},
        {"{\"interface\":\"abcdefghijklmnop\"}", "outbound.interface: longer than 15 bytes"},
        {"{\"interface\":7}", "outbound.interface: expected a string"},
        {"{\"mark\":-1}", "outbound.mark: expected an integer between 0 and 4294967295"},
        {"{\"mark\":4294967296}", "outbound.mark: expected an integer between 0 and 4294967295"},
        {"{\"tcp_keepalive\":{\"interval\":5}}", "outbound.tcp_keepalive.idle: missing required "
                                                 "key"},
        {"{\"tcp_keepalive\":{\"idle\":0}}", "outbound.tcp_keepalive.idle: expected an integer "
                                             "between 1 and 32767"},
        {"{\"tcp_keepalive\":{\"idle\":1,\"count\":128}}", "outbound.tcp_keepalive.count: "
                                                           "expected an integer between 1 and "
                                                           "127"},
        {"{\"tcp_keepalive\":{\"idle\":1,\"probes\":1}}", "outbound.tcp_keepalive.probes: "
                                                          "unknown key"},
        {"{\"tcp_nodelay\":1}", "outbound.tcp_nodelay: expected true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"outbound\":%s,\"nodes\":[" NODE_OK "]}", bad[i].outbound);
        expect_error(text, -EINVAL, bad[i].msg);
    }
    expect_error("{\"nodes\":[{\"tag\":\"a\",\"outbound\":{\"mark\":\"7\"},\"panel\":" PANEL_OK
                 "}]}", -EINVAL, "nodes[0].outbound.mark: expected an integer between 0 and "
                 "4294967295");
}

static void collect_key(void *arg, const char *path)
{
    char *buf = arg;
    strcat(buf, path);
    strcat(buf, " ");
}

/* A reload cannot apply these: every changed one is named (its JSON path), nothing else. */
static void config__restart_keys__name_what_a_reload_cannot_apply(void **state)
{
    const char *a = "{\"workers\":2,\"api\":{\"listen\":\"127.0.0.1:9\",\"token\":\"x\"},"
                    "\"db\":{\"path\":\"k.db\"},\"log\":{\"level\":\"info\"},"
                    "\"nodes\":[{\"tag\":\"a\",\"panel\":" UP_PANEL(",\"node_id\":7") "}]}";
    const char *b = "{\"workers\":2,\"api\":{\"listen\":\"127.0.0.1:9\",\"token\":\"y\"},"
                    "\"db\":{\"path\":\"k.db\",\"flush_interval\":9},"
                    "\"log\":{\"level\":\"debug\"},\"nodes\":[{\"tag\":\"a\",\"panel\":"
                    UP_PANEL(",\"node_id\":7,\"timeout\":3") "}]}";
    ag_config ca, cb;
    sv_error err = {0};
    char keys[256] = "";
    (void)state;
    assert_int_equal(ag_config_parse(a, strlen(a), NULL, &ca, &err), 0);
    assert_int_equal(ag_config_parse(b, strlen(b), NULL, &cb, &err), 0);
    assert_int_equal(ag_config_restart_keys(&ca, &ca, collect_key, keys), 0);
    assert_string_equal(keys, "");
    assert_int_equal(ag_config_restart_keys(&ca, &cb, collect_key, keys), 3);
    assert_string_equal(keys, "api.token db.flush_interval nodes[0].panel.timeout ");
    ag_config_free(&ca);
    ag_config_free(&cb);
}

int main(void)
{
    sv_log_threshold = SV_LOG_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config__example__parses),
        cmocka_unit_test(config__trojan_example__parses),
        cmocka_unit_test(config__vless_example__parses),
        cmocka_unit_test(config__full_settings__parse),
        cmocka_unit_test(config__unknown_keys__name_their_path),
        cmocka_unit_test(config__wrong_types__are_named),
        cmocka_unit_test(config__missing_keys__are_named),
        cmocka_unit_test(config__other_panel_types__are_refused),
        cmocka_unit_test(config__trusted_forwarders__parse_match_and_errors),
        cmocka_unit_test(config__sspanel_panel__parses_and_errors_name_their_path),
        cmocka_unit_test(config__xboard_panel__takes_uniproxy_keys),
        cmocka_unit_test(config__xboard_machine__takes_machine_id),
        cmocka_unit_test(config__uniproxy_panel__parses_with_db),
        cmocka_unit_test(config__uniproxy_panel__errors_name_their_path),
        cmocka_unit_test(config__bad_json__gives_position),
        cmocka_unit_test(config__shutdown_grace__default_and_bounds),
        cmocka_unit_test(config__syntax_error__quotes_no_value),
        cmocka_unit_test(config__file_too_big__is_refused),
        cmocka_unit_test(config__missing_file__names_it),
        cmocka_unit_test(config__non_regular_file__is_refused_without_blocking),
        cmocka_unit_test(config__relative_files__resolve_against_config_dir),
        cmocka_unit_test(config__api__keys_are_strict_and_public_needs_a_token),
        cmocka_unit_test(config__allow_private__defaults_to_false_and_is_a_boolean),
        cmocka_unit_test(config__policies__parse_strictly),
        cmocka_unit_test(config__packaged_example__has_an_api_token),
        cmocka_unit_test(config__cert_fallback_node_type__parse_strictly),
        cmocka_unit_test(config__max_connections__default_and_bounds),
        cmocka_unit_test(config__speed_limits__default_and_bounds),
        cmocka_unit_test(config__dns__parses_and_refuses_bad_values),
        cmocka_unit_test(config__redis_url__parses_and_refuses_bad_values),
        cmocka_unit_test(config__redis__parses_and_refuses_bad_values),
        cmocka_unit_test(config__max_connections__default_from_fd_limit),
        cmocka_unit_test(config__splice_pipes_fit_the_fd_share),
        cmocka_unit_test(config__outbound__parses_and_refuses_bad_values),
        cmocka_unit_test(config__restart_keys__name_what_a_reload_cannot_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
