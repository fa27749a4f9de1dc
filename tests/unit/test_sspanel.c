/*
 * mod_mu parsers (panel/sspanel.c, issue 14) on the shared fixtures (PANEL.md §2,
 * ../shared/fixtures/panel/sspanel-*.json copied to tests/unit/fixtures/panel/) and on the bad
 * shapes: each field the lowering needs, each refusal naming its field.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "panel/sspanel.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static json_t *fixture(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, TOP_SRCDIR "/tests/unit/fixtures/panel/%s", name);
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        fail_msg("%s: %s", path, jerr.text);
    return j;
}

static json_t *text(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    return j;
}

/* Parse a node body expecting failure with exactly @p msg. */
static void node_refused(const char *body, int code, const char *msg)
{
    json_t *j = text(body);
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    int rc = pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err);
    if (rc != code || strcmp(err.msg, msg) != 0)
        fail_msg("%s\n  want %d \"%s\"\n  got  %d \"%s\"", body, code, msg, rc, err.msg);
    assert_null(node.protocol);
    json_decref(j);
}

static void users_refused(const char *body, const pn_sspanel_meta *meta, int code,
                          const char *msg)
{
    json_t *j = text(body);
    pn_users users;
    size_t skipped = 9;
    sv_error err = {0};
    int rc = pn_sspanel_parse_users(j, meta, &users, &skipped, NULL, NULL, &err);
    if (rc != code || strcmp(err.msg, msg) != 0)
        fail_msg("%s\n  want %d \"%s\"\n  got  %d \"%s\"", body, code, msg, rc, err.msg);
    assert_int_equal(users.n, 0);
    assert_int_equal(skipped, 0);
    json_decref(j);
}

static void sspanel__vmess_node__lowers_transport_and_port(void **state)
{
    (void)state;
    json_t *j = fixture("sspanel-node-info-vmess.json");
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_node(j, 30, 0, &meta, &node, &err), 0);
    assert_string_equal(node.protocol, "vmess");
    assert_int_equal(node.server_port, 10086); /* offset_port_node, a string */
    assert_string_equal(node.network, "ws");
    assert_true(node.set & PN_SET_TLS);
    assert_int_equal(node.tls, 1);
    assert_true(node.set & PN_SET_NETWORK_SETTINGS); /* path "/ws" */
    assert_false(node.set & PN_SET_FLOW);
    assert_string_equal(node.server_name, "vm.example.com");
    assert_int_equal(node.pull_interval, 30);
    assert_int_equal(node.push_interval, 60);
    assert_int_equal(meta.sort, 11);
    assert_int_equal(meta.version_year, 2025);
    pn_node_free(&node);
    json_decref(j);
}

static void sspanel__ss2022_node__has_method_and_server_key(void **state)
{
    (void)state;
    json_t *j = fixture("sspanel-node-info-ss2022.json");
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), 0);
    assert_string_equal(node.protocol, "shadowsocks");
    assert_string_equal(node.cipher, "2022-blake3-aes-128-gcm");
    assert_string_equal(node.server_key, "NzhhN2QwMWMwMmQxYTlkMA==");
    assert_int_equal(node.server_port, 8388);
    assert_int_equal(meta.speed_mbps, 100);
    assert_null(node.unknown); /* every key of the answer is known */
    pn_node_free(&node);
    json_decref(j);
}

/* Keys a panel adds are listed for one warning each (never refused): in data, custom_config
 * and reality-opts, with the nearest known key. */
static void sspanel__unknown_keys__are_listed_not_refused(void **state)
{
    (void)state;
    json_t *j = json_loads("{\"ret\":1,\"data\":{\"server\":\"s.test\",\"node_speedlimit\":0,"
                           "\"node_group\":2,\"custom_config\":{\"offset_port_node\":\"8388\","
                           "\"method\":\"aes-128-gcm\",\"servr_key\":\"x\"},\"sort\":0}}",
                           0, NULL);
    assert_non_null(j);
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    int rc = pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err);
    if (rc != 0)
        fail_msg("%d %s", rc, err.msg);
    assert_int_equal(node.server_port, 8388);
    assert_string_equal(node.unknown, "data.node_group\n"
                                      "data.custom_config.servr_key (did you mean "
                                      "\"server_key\"?)\n");
    pn_node_free(&node);
    json_decref(j);
}

static void sspanel__bad_nodes__are_refused_naming_the_field(void **state)
{
    (void)state;
    node_refused("{\"ret\":1,\"data\":{\"sort\":2,\"custom_config\":{\"offset_port_node\":\"1\"}}}",
                 -EINVAL, "data.sort: node type 2 (TUIC) is not served by katana");
    node_refused("{\"ret\":1,\"data\":{\"sort\":0,\"custom_config\":{\"offset_port_node\":\"1\"}}}",
                 -EINVAL, "data.custom_config.method: missing (the node's Shadowsocks method)");
    node_refused("{\"ret\":1,\"data\":{\"sort\":14,\"server\":\"t.example\"}}", -EINVAL,
                 "data.custom_config.offset_port_node: missing (no port in custom_config or "
                 "server)");
    node_refused("{\"ret\":1,\"data\":{\"sort\":14,\"custom_config\":{\"offset_port_node\":"
                 "\"70000\"}}}", -EINVAL,
                 "data.custom_config.offset_port_node: larger than 65535");
    node_refused("{\"ret\":1,\"data\":{\"sort\":1,\"custom_config\":{\"offset_port_node\":1,"
                 "\"method\":\"aes-128-gcm\"}}}", -EINVAL,
                 "data.custom_config.method: \"aes-128-gcm\" does not match node type 1");
    node_refused("{\"ret\":1,\"data\":{\"sort\":14,\"node_speedlimit\":1e20,\"custom_config\":{}}}",
                 -EINVAL, "data.node_speedlimit: larger than 10000000");
    node_refused("{\"ret\":1,\"data\":[]}", -EINVAL, "data: expected an object");
    node_refused("[1]", -EINVAL, "expected a JSON object {\"ret\":1,\"data\":...}");
    json_t *j = fixture("sspanel-resp-node-missing.json");
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), -EPROTO);
    assert_string_equal(err.msg, "ret 0: Node not found.");
    json_decref(j);
}

static void sspanel__legacy_server_string__gives_the_port(void **state)
{
    (void)state;
    json_t *j = text("{\"ret\":1,\"data\":{\"sort\":14,\"server\":\"t.example;port=443#12345|"
                     "host=t.example\",\"custom_config\":\"\",\"version\":\"21.10.1\"}}");
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), 0);
    assert_string_equal(node.protocol, "trojan");
    assert_int_equal(node.server_port, 12345);
    assert_int_equal(meta.version_year, 2021);
    pn_node_free(&node);
    json_decref(j);
}

static void sspanel__users__secret_by_sort_and_limits(void **state)
{
    (void)state;
    pn_sspanel_meta vm = {.sort = 11, .speed_mbps = 7};
    json_t *j = fixture("sspanel-users-vmess.json");
    pn_users users;
    size_t skipped;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_users(j, &vm, &users, &skipped, NULL, NULL, &err), 0);
    assert_int_equal(users.n, 2);
    assert_string_equal(users.users[0].uuid, "be32fd09-89ed-4cec-aa8f-f10f08e94a8d");
    assert_int_equal(users.users[0].speed_limit, 7); /* 0: the node's */
    assert_int_equal(users.users[1].speed_limit, 50);
    pn_users_free(&users);
    json_decref(j);

    pn_sspanel_meta ss = {.sort = 0, .method = "aes-256-gcm"};
    j = fixture("sspanel-users-ss.json");
    assert_int_equal(pn_sspanel_parse_users(j, &ss, &users, &skipped, NULL, NULL, &err), 0);
    assert_int_equal(users.n, 1); /* user 4 uses chacha20-ietf-poly1305: left out */
    assert_int_equal(skipped, 1);
    assert_int_equal(users.users[0].id, 3);
    assert_string_equal(users.users[0].uuid, "ExamplePass3");
    pn_users_free(&users);
    json_decref(j);

    pn_sspanel_meta s22 = {.sort = 1, .method = "2022-blake3-aes-128-gcm"};
    j = fixture("sspanel-users-ss2022.json");
    assert_int_equal(pn_sspanel_parse_users(j, &s22, &users, &skipped, NULL, NULL, &err), 0);
    assert_int_equal(users.n, 1);
    assert_string_equal(users.users[0].uuid, "ZTkwMzJhYjU1NWRhNWM0NA==");
    pn_users_free(&users);
    json_decref(j);
}

static void sspanel__legacy_users__iplimit_and_alive_ip(void **state)
{
    (void)state;
    pn_sspanel_meta vm = {.sort = 11};
    json_t *j = fixture("sspanel-users-legacy-2023.json");
    pn_users users;
    pn_alive_count *alive = NULL;
    size_t skipped, n_alive = 0;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_users(j, &vm, &users, &skipped, &alive, &n_alive, &err),
                     0);
    assert_int_equal(users.n, 2);
    assert_int_equal(users.users[0].device_limit, 2);
    assert_int_equal(users.users[1].device_limit, 0);
    assert_int_equal(users.users[1].speed_limit, 10);
    assert_int_equal(n_alive, 1);
    assert_int_equal(alive[0].user, 6);
    assert_int_equal(alive[0].count, 1);
    free(alive);
    pn_users_free(&users);
    json_decref(j);
}

static void sspanel__bad_users__are_refused_naming_the_entry(void **state)
{
    (void)state;
    pn_sspanel_meta vm = {.sort = 11};
    users_refused("{\"ret\":1,\"data\":[{\"id\":5,\"uuid\":\"a\"},{\"id\":6,\"uuid\":\"b\"},"
                  "{\"id\":5,\"uuid\":\"c\"}]}", &vm, -EINVAL,
                  "data[2].id: duplicate user id 5");
    users_refused("{\"ret\":1,\"data\":[{\"id\":1,\"uuid\":\"a\",\"node_iplimit\":70000}]}", &vm,
                  -EINVAL, "data[0].node_iplimit: larger than 65535");
    users_refused("{\"ret\":1,\"data\":[{\"id\":1,\"uuid\":\"a\",\"node_speedlimit\":-1}]}", &vm,
                  -EINVAL, "data[0].node_speedlimit: negative");
    users_refused("{\"ret\":1,\"data\":[{\"id\":1,\"passwd\":\"a\"}]}", &vm, -EINVAL,
                  "data[0].uuid: missing");
    users_refused("{\"ret\":1,\"data\":[{\"id\":0,\"uuid\":\"a\"}]}", &vm, -EINVAL,
                  "data[0].id: expected a positive integer");
    users_refused("{\"ret\":1,\"data\":{}}", &vm, -EINVAL, "data: expected an array of users");
    users_refused("{\"ret\":0,\"msg\":\"Node out of bandwidth.\"}", &vm, -EPROTO,
                  "ret 0: Node out of bandwidth.");
    json_t *j = text("{\"ret\":1,\"data\":[]}");
    pn_users users;
    size_t skipped;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_users(j, &vm, &users, &skipped, NULL, NULL, &err), 0);
    assert_int_equal(users.n, 0); /* an empty list is valid: it revokes everyone */
    json_decref(j);
}

/* A users body of @p n entries "0" in @p head ... "]}" (malloc'ed, @p len set). */
static char *long_list(const char *head, size_t n, size_t *len)
{
    size_t h = strlen(head);
    char *b = malloc(h + 2 * n + 2);
    assert_non_null(b);
    memcpy(b, head, h);
    for (size_t i = 0; i < n; i++)
        memcpy(b + h + 2 * i, i + 1 < n ? "0," : "0]", 2);
    b[h + 2 * n] = '}';
    *len = h + 2 * n + 1;
    return b;
}

/* Issue 33: the text parser refuses what the tree's parser refuses, with the same reasons, and
 * a body that is not JSON (a list that never closes) before building any user. */
static void sspanel__users_text__refused_as_the_tree_is(void **state)
{
    (void)state;
    pn_sspanel_meta vm = {.sort = 11};
    pn_users users;
    size_t skipped, len;
    sv_error err = {0};
    const char *dup = "{\"ret\":1,\"data\":[{\"id\":1,\"uuid\":\"a\"},{\"id\":1,\"uuid\":\"b\"}]}";
    assert_int_equal(pn_sspanel_parse_users_text(dup, strlen(dup), &vm, &users, &skipped, NULL,
                                                 NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "data[1].id: duplicate user id 1");
    const char *open = "{\"ret\":1,\"data\":[{\"id\":1,\"uuid\":\"x\"},{\"id\":1,\"uuid\":\"x\"},";
    assert_int_equal(pn_sspanel_parse_users_text(open, strlen(open), &vm, &users, &skipped,
                                                 NULL, NULL, &err), -EBADMSG);
    assert_string_equal(err.msg, "premature end of input at byte 57");
    const char *biz = "{\"ret\":0,\"msg\":\"Node out of bandwidth.\"}";
    assert_int_equal(pn_sspanel_parse_users_text(biz, strlen(biz), &vm, &users, &skipped, NULL,
                                                 NULL, &err), -EPROTO);
    assert_string_equal(err.msg, "ret 0: Node out of bandwidth.");
    char *many = long_list("{\"ret\":1,\"data\":[", PN_USERS_MAX + 1, &len);
    assert_int_equal(pn_sspanel_parse_users_text(many, len, &vm, &users, &skipped, NULL, NULL,
                                                 &err), -EMSGSIZE);
    assert_string_equal(err.msg, "data: more than 1000000 users");
    free(many);
    assert_int_equal(users.n, 0);
    assert_null(users.users);
}

static void sspanel__detect_rules__become_block_routes(void **state)
{
    (void)state;
    json_t *j = fixture("sspanel-detect-rules.json");
    pn_route *routes;
    size_t n, skipped;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_rules(j, &routes, &n, &skipped, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(skipped, 0);
    assert_int_equal(routes[1].id, 3);
    assert_string_equal(routes[1].action, "block");
    assert_string_equal(routes[1].match[0], "regexp:(.+\\.|^)ads\\.example\\.(com|net)");
    pn_node holder = {.routes = routes, .n_routes = n};
    pn_node_free(&holder);
    json_decref(j);
    j = text("{\"ret\":1,\"data\":[{\"id\":4,\"regex\":\"474554\",\"type\":2}]}");
    assert_int_equal(pn_sspanel_parse_rules(j, &routes, &n, &skipped, &err), 0);
    assert_int_equal(n, 0); /* a hex rule matches bytes: not expressible */
    assert_int_equal(skipped, 1);
    json_decref(j);
    j = text("{\"ret\":1,\"data\":[{\"regex\":\"x\",\"type\":1}]}");
    assert_int_equal(pn_sspanel_parse_rules(j, &routes, &n, &skipped, &err), -EINVAL);
    assert_string_equal(err.msg, "data[0].id: expected a number");
    json_decref(j);
}

static void sspanel__acks(void **state)
{
    (void)state;
    sv_error err = {0};
    const char *ok = "{\"ret\":1,\"msg\":\"ok\"}";
    assert_int_equal(pn_sspanel_check_ack(200, ok, strlen(ok), &err), 0);
    const char *bad = "{\"ret\":0,\"msg\":\"Invalid data.\"}";
    assert_int_equal(pn_sspanel_check_ack(200, bad, strlen(bad), &err), -EPROTO);
    assert_string_equal(err.msg, "HTTP 200: ret 0: Invalid data.");
    const char *html = "<html>hi</html>";
    assert_int_equal(pn_sspanel_check_ack(200, html, strlen(html), &err), -EPROTO);
    assert_string_equal(err.msg, "HTTP 200: body is not JSON");
    assert_int_equal(pn_sspanel_check_ack(401, bad, strlen(bad), &err), -EPROTO);
}

/* PANEL.md §2.5, issue 11: enable_reality with reality-opts (PROTOCOLS-2.md §1.1) gives tls 2
 * and the REALITY model: dest as host:port (a bare port is 127.0.0.1:N), the server name and
 * short id lists joined, the key, the time window, the client version bounds and xver; each
 * bad field is refused by name. */
#define RO_HEAD "{\"ret\":1,\"data\":{\"sort\":11,\"custom_config\":{\"offset_port_node\":443," \
                "\"enable_vless\":\"1\",\"enable_reality\":true,\"reality-opts\":"
#define RO_KEY "\"private_key\":\"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA\""
#define RO_BASE RO_KEY ",\"server_names\":[\"a.test\"]"
static void sspanel__reality_opts__parsed_strictly(void **state)
{
    (void)state;
    json_t *j = text(RO_HEAD "{\"dest\":\"www.example.com:8443\",\"proxy_protocol_ver\":2,"
                     "\"server_names\":[\"www.example.com\",\"b.test\"]," RO_KEY ","
                     "\"min_client_ver\":\"1.8.0\",\"max_client_ver\":\"26.3.27\","
                     "\"max_time_diff\":60000,\"short_ids\":[\"\",\"0123456789abcdef\",\"ab\"]}"
                     "}}}");
    pn_sspanel_meta meta;
    pn_node node;
    sv_error err = {0};
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), 0);
    assert_string_equal(node.protocol, "vless");
    assert_int_equal(node.tls, 2);
    assert_string_equal(node.reality.target, "www.example.com:8443");
    assert_string_equal(node.reality.server_names, "www.example.com,b.test");
    assert_string_equal(node.reality.short_ids, ",0123456789abcdef,ab");
    assert_string_equal(node.reality.private_key, "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA");
    assert_int_equal(node.reality.max_time_diff, 60000);
    assert_int_equal(node.reality.min_client_ver, 1 << 16 | 8 << 8);
    assert_int_equal(node.reality.max_client_ver, 26 << 16 | 3 << 8 | 27);
    assert_int_equal(node.reality.xver, 2);
    pn_node_free(&node);
    json_decref(j);

    /* a bare port (a number or a string) is localhost's; no short ids = the all-zero one */
    j = text(RO_HEAD "{\"dest\":8443," RO_BASE "}}}}");
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), 0);
    assert_string_equal(node.reality.target, "127.0.0.1:8443");
    assert_string_equal(node.reality.short_ids, "");
    assert_int_equal(node.reality.xver, 0);
    assert_int_equal(node.reality.min_client_ver, 0);
    pn_node_free(&node);
    json_decref(j);
    j = text("{\"ret\":1,\"data\":{\"sort\":14,\"custom_config\":{\"offset_port_node\":443,"
             "\"enable_reality\":true,\"reality-opts\":{\"dest\":\"443\"," RO_BASE "}}}}");
    assert_int_equal(pn_sspanel_parse_node(j, 0, 0, &meta, &node, &err), 0);
    assert_string_equal(node.protocol, "trojan");
    assert_int_equal(node.tls, 2);
    assert_string_equal(node.reality.target, "127.0.0.1:443");
    pn_node_free(&node);
    json_decref(j);

    static const struct {
        const char *opts, *msg;
    } bad[] = {
        {"null", "data.custom_config.reality-opts: missing (required with enable_reality)"},
        {"[]", "data.custom_config.reality-opts: expected an object"},
        {"{" RO_BASE "}", "data.custom_config.reality-opts.dest: missing (the target site, "
                          "host:port)"},
        {"{\"dest\":0," RO_BASE "}", "data.custom_config.reality-opts.dest: port 0"},
        {"{\"dest\":65536," RO_BASE "}",
         "data.custom_config.reality-opts.dest: larger than 65535"},
        {"{\"dest\":\"/run/t.sock\"," RO_BASE "}", "data.custom_config.reality-opts.dest: a "
                                                   "Unix socket target is not served (host:port "
                                                   "or a port)"},
        {"{\"dest\":\"a.test\"," RO_BASE "}", "data.custom_config.reality-opts.dest: "
                                              "\"a.test\": expected host:port or a port"},
        {"{\"dest\":\"a.test:99999\"," RO_BASE "}", "data.custom_config.reality-opts.dest: "
                                                    "\"a.test:99999\": expected host:port or a "
                                                    "port"},
        {"{\"dest\":\"a b:443\"," RO_BASE "}", "data.custom_config.reality-opts.dest: \"a "
                                               "b:443\": expected host:port or a port"},
        {"{\"dest\":true," RO_BASE "}", "data.custom_config.reality-opts.dest: expected "
                                        "host:port or a port"},
        {"{\"dest\":443," RO_KEY "}", "data.custom_config.reality-opts.server_names: missing "
                                      "(the SNI values clients send)"},
        {"{\"dest\":443," RO_KEY ",\"server_names\":[]}",
         "data.custom_config.reality-opts.server_names: expected 1 to 16 entries"},
        {"{\"dest\":443," RO_KEY ",\"server_names\":\"a.test\"}",
         "data.custom_config.reality-opts.server_names: expected an array of strings"},
        {"{\"dest\":443," RO_KEY ",\"server_names\":[\"a,b\"]}",
         "data.custom_config.reality-opts.server_names[0]: expected a DNS name of 1 to 253 "
         "characters"},
        {"{\"dest\":443," RO_KEY ",\"server_names\":[\"a\",\"\"]}",
         "data.custom_config.reality-opts.server_names[1]: expected a DNS name of 1 to 253 "
         "characters"},
        {"{\"dest\":443," RO_BASE ",\"short_ids\":[\"abc\"]}",
         "data.custom_config.reality-opts.short_ids[0]: expected at most 16 hex digits, an "
         "even count"},
        {"{\"dest\":443," RO_BASE ",\"short_ids\":[\"0123456789abcdef01\"]}",
         "data.custom_config.reality-opts.short_ids[0]: expected at most 16 hex digits, an "
         "even count"},
        {"{\"dest\":443," RO_BASE ",\"short_ids\":[\"zz\"]}",
         "data.custom_config.reality-opts.short_ids[0]: expected at most 16 hex digits, an "
         "even count"},
        {"{\"dest\":443," RO_BASE ",\"short_ids\":[1]}",
         "data.custom_config.reality-opts.short_ids[0]: expected at most 16 hex digits, an "
         "even count"},
        {"{\"dest\":443,\"server_names\":[\"a\"]}", "data.custom_config.reality-opts."
                                                    "private_key: expected an X25519 key, 43 "
                                                    "base64url characters"},
        {"{\"dest\":443,\"server_names\":[\"a\"],\"private_key\":\"AQID\"}",
         "data.custom_config.reality-opts.private_key: expected an X25519 key, 43 base64url "
         "characters"},
        {"{\"dest\":443," RO_BASE ",\"proxy_protocol_ver\":3}",
         "data.custom_config.reality-opts.proxy_protocol_ver: larger than 2"},
        {"{\"dest\":443," RO_BASE ",\"proxy_protocol_ver\":-1}",
         "data.custom_config.reality-opts.proxy_protocol_ver: negative"},
        {"{\"dest\":443," RO_BASE ",\"max_time_diff\":\"1m\"}",
         "data.custom_config.reality-opts.max_time_diff: expected a number"},
        {"{\"dest\":443," RO_BASE ",\"min_client_ver\":\"1.8\"}",
         "data.custom_config.reality-opts.min_client_ver: \"1.8\": expected x.y.z, each part "
         "at most 255"},
        {"{\"dest\":443," RO_BASE ",\"max_client_ver\":\"1.256.0\"}",
         "data.custom_config.reality-opts.max_client_ver: \"1.256.0\": expected x.y.z, each "
         "part at most 255"},
        {"{\"dest\":443," RO_BASE ",\"max_client_ver\":\"1.2.3.4\"}",
         "data.custom_config.reality-opts.max_client_ver: \"1.2.3.4\": expected x.y.z, each "
         "part at most 255"},
        {"{\"dest\":443," RO_BASE ",\"min_client_ver\":\"2.0.0\",\"max_client_ver\":\"1.0.0\"}",
         "data.custom_config.reality-opts.min_client_ver: above max_client_ver"},
    };
    char body[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, RO_HEAD "%s}}}", bad[i].opts);
        node_refused(body, -EINVAL, bad[i].msg);
    }
    /* at most 16 names */
    char *p = body + snprintf(body, sizeof body, RO_HEAD "{\"dest\":443," RO_KEY
                              ",\"server_names\":[");
    for (int i = 0; i < 17; i++)
        p += sprintf(p, "%s\"n%d.test\"", i > 0 ? "," : "", i);
    strcpy(p, "]}}}}");
    node_refused(body, -EINVAL, "data.custom_config.reality-opts.server_names: expected 1 to 16 "
                                "entries");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sspanel__vmess_node__lowers_transport_and_port),
        cmocka_unit_test(sspanel__ss2022_node__has_method_and_server_key),
        cmocka_unit_test(sspanel__bad_nodes__are_refused_naming_the_field),
        cmocka_unit_test(sspanel__reality_opts__parsed_strictly),
        cmocka_unit_test(sspanel__legacy_server_string__gives_the_port),
        cmocka_unit_test(sspanel__users__secret_by_sort_and_limits),
        cmocka_unit_test(sspanel__legacy_users__iplimit_and_alive_ip),
        cmocka_unit_test(sspanel__bad_users__are_refused_naming_the_entry),
        cmocka_unit_test(sspanel__users_text__refused_as_the_tree_is),
        cmocka_unit_test(sspanel__detect_rules__become_block_routes),
        cmocka_unit_test(sspanel__acks),
        cmocka_unit_test(sspanel__unknown_keys__are_listed_not_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
